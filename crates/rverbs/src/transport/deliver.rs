//! What a responder's decisions become at the target QP, for every link: its receive
//! completions (with the bytes of an immediate as C reads them), the asynchronous event
//! of an error no completion reports, and UD delivery — finding the UD QP of this host
//! that takes a message, and running the core's UD responder for it.
//!
//! Read before editing: docs/rocev2-wire.md §3.3 (the responder table), §3.5 (UD), §5.3
//! (the GRH area of a UD receive), ibv_poll_cq(3) (what an error completion carries) and
//! ibv_get_async_event(3).

use std::sync::atomic::Ordering;
use std::time::Instant;

use rverbs_proto::rc::{Mode, RecvCompletion, Request, Responder, ResponderState};
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpType, WcFlags, WcOpcode, WcStatus};
use rverbs_proto::violation::Violation;

use super::respond::Responding;
use super::route::{endpoint_of, responder_config};
use super::target::{LocalTarget, PeerTarget, Target};
use crate::cq::Overrun;
use crate::rings::cq_segment::CqAt;
use crate::engine::Engine;
use crate::mr::{self, KeySpace, PinList, Source};
use crate::rings::recv_ring::RecvWqe;
use crate::rings::tm_recv::{TmRecv, TMH_LEN};
use crate::rings::wc::Cqe;
use crate::shm::counters::{Counter, CounterBlock};

/// Places a whole message of `n` bytes from `src` into receive `r` of target `t`: the
/// receive must hold it, and its SGEs are pinned for LOCAL_WRITE under `t`'s PD before a
/// byte is copied (ibv_post_recv(3); docs/rocev2-wire.md §3.3). Whether it was placed.
pub(crate) fn place_message<T: Target>(t: &T, r: &RecvWqe, src: Source<'_, '_>, n: u64) -> bool {
    place_message_in(&t.keys(), t.pd(), r, src, n)
}

/// [`place_message`] with the target's keys `keys` (the express lane's remember the last
/// receive key: [`KeySpace::remembering`]) and PD `pd`.
pub(crate) fn place_message_in(keys: &KeySpace<'_>, pd: u32, r: &RecvWqe, src: Source<'_, '_>, n: u64) -> bool {
    if r.capacity() < n {
        return false;
    }
    // One entry that is not empty, the usual receive: pinned without a list, as
    // `pin_sges_into` pins it (`min(length, n)` bytes from its address), and copied as
    // `copy_message` copies into a list of one range.
    if let [s] = r.sges() {
        if s.length != 0 && n != 0 {
            let via = mr::Via { key: s.lkey, pd, used: mr::KeyUse::Local, need: Access::LOCAL_WRITE, va: s.addr };
            // Borrowed where the key space wrote it, not moved (as `host::express_to`).
            let pinned = keys.pin_one(via, u64::from(s.length).min(n));
            return matches!(&pinned, Ok(d) if mr::copy_to(d, &src).is_ok());
        }
    }
    let mut dst = PinList::new();
    mr::pin_sges_into(keys, pd, r.sges(), Access::LOCAL_WRITE, n, &mut dst).is_ok()
        && mr::copy_message(&dst, 0, src).is_ok()
}

/// The receive completion the core decided, as the target's CQ entry; `r` is the
/// receive the responder holds, whose take's count it carries ([`of_receive`]).
pub(crate) fn recv_cqe<T: Target>(t: &T, c: &RecvCompletion, r: Option<&RecvWqe>) -> Cqe {
    if c.status != WcStatus::Success {
        return of_receive(Cqe::error(c.wr_id, t.qpn(), c.status, c.vendor_err), r);
    }
    let mut cqe = Cqe::success(c.wr_id, t.qpn(), c.opcode.unwrap_or(WcOpcode::Recv), c.byte_len);
    cqe.imm = wc_imm(c);
    cqe.wc_flags |= c.flags.bits() as u8;
    cqe.solicited = c.solicited;
    cqe.src_qp = c.src_qp;
    of_receive(cqe, r)
}

/// `cqe`, the completion of receive `r` (the one the responder holds, if it is the one
/// completing), carrying the count of `r`'s take to the queue's owner: the poll that
/// finds it tells the queue's post (`rings::recv_count`) and lets the regions the
/// receive kept registered go (`rings::kept`). A tag-matched receive's word carries its
/// tag instead ([`tm_completion`]). It is published with [`complete_receive`], which
/// marks `r` as completing in its ring.
pub(crate) fn of_receive(mut cqe: Cqe, r: Option<&RecvWqe>) -> Cqe {
    if let Some(r) = r.filter(|r| r.wr_id == cqe.wr_id) {
        cqe.rq_taken = r.completion_count();
    }
    cqe
}

/// Publishes `cqe` at `t`, marking `r`, if it is the receive `cqe` completes, as
/// completing in its ring right before the completion becomes visible
/// ([`Target::complete_marking`], [`RecvWqe::completing`]: a taker that dies from there
/// on has completed it).
pub(crate) fn complete_receive<T: Target + ?Sized>(t: &T, cqe: Cqe, r: Option<&RecvWqe>) -> Result<(), Overrun> {
    let wr_id = cqe.wr_id;
    t.complete_marking(cqe, &|at| mark_completing(r, wr_id, at))
}

/// Marks `r` as completing at `at` ([`RecvWqe::completing`]) if it is the receive of the
/// completion of `wr_id`.
pub(crate) fn mark_completing(r: Option<&RecvWqe>, wr_id: u64, at: CqAt) {
    if let Some(r) = r.filter(|r| r.wr_id == wr_id) {
        r.completing(at);
    }
}

/// A receive completion of a tag-matching SRQ as `tm` decided it (docs/tag-matching.md):
/// the opcode (TM_NO_TAG, TM_RECV), the match flags, the tag and application context of a
/// match, and the length of an EAGER payload without its TMH.
pub(crate) fn tm_completion(cqe: &mut Cqe, tm: TmRecv) {
    let matched = |cqe: &mut Cqe, tag: u64, app_ctx: u32| {
        cqe.opcode = WcOpcode::TmRecv as u32 as u8;
        cqe.wc_flags |= WcFlags::TM_MATCH.bits() as u8;
        cqe.tm_tag = tag;
        // The context shares the immediate's word; a SEND with immediate keeps its own.
        if u32::from(cqe.wc_flags) & WcFlags::WITH_IMM.bits() == 0 {
            cqe.imm = app_ctx;
        }
    };
    match tm {
        TmRecv::Plain => {}
        TmRecv::NoTag => cqe.opcode = WcOpcode::TmNoTag as u32 as u8,
        TmRecv::Unexpected => cqe.opcode = WcOpcode::TmRecv as u32 as u8,
        TmRecv::Eager { tag, app_ctx } => {
            matched(cqe, tag, app_ctx);
            cqe.wc_flags |= WcFlags::TM_DATA_VALID.bits() as u8;
            cqe.byte_len = cqe.byte_len.saturating_sub(TMH_LEN as u32);
        }
        TmRecv::Rndv { tag, app_ctx, offload, .. } => {
            matched(cqe, tag, app_ctx);
            if offload {
                // The match alone: the data completion follows once the read is done.
                cqe.byte_len = 0;
            } else if cqe.status == WcStatus::Success as u32 as u8 {
                cqe.status = WcStatus::TmRndvIncomplete as u32 as u8;
            }
        }
    }
}

/// The completion's `imm_data` as C reads it: the bytes of the ImmDt the core holds as a
/// big-endian value (see `core_wqe`); an invalidated rkey stays a value in host order
/// (`invalidated_rkey`).
pub(crate) fn wc_imm(c: &RecvCompletion) -> u32 {
    if c.flags.contains(rverbs_proto::verbs::WcFlags::WITH_IMM) {
        c.imm.to_be()
    } else {
        c.imm
    }
}

/// Writes a receive completion at the target (of receive `r`, marked as
/// [`complete_receive`] does); an overrun of its CQ moves it to ERR with QP_FATAL and
/// the message counts as unanswered (rxe: no ACK is sent).
pub(crate) fn deliver_recv<T: Target>(t: &T, cqe: Cqe, r: Option<&RecvWqe>, counters: &CounterBlock) -> Result<(), ()> {
    let wr_id = cqe.wr_id;
    deliver_recv_counting(t, cqe, &|at| mark_completing(r, wr_id, at), |c| counters.add(c))
}

/// [`deliver_recv`] counting through `count` (the express lane counts in its send
/// queue's lane of the counters, `shm::counters::CounterLane`), `mark` called right
/// before the completion becomes visible ([`Target::complete_marking`]).
#[inline]
pub(crate) fn deliver_recv_counting<T: Target>(t: &T, cqe: Cqe, mark: &dyn Fn(CqAt), count: impl FnOnce(Counter)) -> Result<(), ()> {
    let success = cqe.status() == WcStatus::Success;
    if t.complete_marking(cqe, mark).is_err() {
        t.enter_error(Some(EventType::QpFatal));
        return Err(());
    }
    if success {
        // rxe `rdma_recvs` (its responder's `do_complete`, status success).
        count(Counter::RdmaRecvs);
    }
    Ok(())
}

/// Counts in `counters` what a responder did with one request (docs/device.md, "Hardware counters"): the
/// duplicates and out-of-sequence requests the core counted, and an RNR NAK sent (RC:
/// a SEND found no receive, §3.3 CHK_RESOURCE; UC drops it).
pub(crate) fn count_delivery(counters: &CounterBlock, responder: &mut Responder, mode: Mode, d: &rverbs_proto::rc::Delivery) {
    let c = responder.take_counts();
    counters.add_n(Counter::DuplicateRequest, c.duplicates);
    counters.add_n(Counter::OutOfSeqRequest, c.out_of_sequence);
    if mode == Mode::Rc && d.violation == Some(Violation::ReceiveNotReady) {
        counters.add(Counter::SendRnrErr);
    }
}

/// The asynchronous event of a responder error no receive completion reports (IBTA):
/// QP_ACCESS_ERR for an rkey fault, QP_REQ_ERR for the rest.
pub(crate) fn responder_event(v: Violation) -> EventType {
    match v {
        Violation::RkeyUnknown | Violation::RkeyWrongPd | Violation::RkeyBounds | Violation::RkeyAccess => {
            EventType::QpAccessErr
        }
        _ => EventType::QpReqErr,
    }
}

/// A UD QP of this host that takes a message: this process's, or a peer process's reached
/// through its shared tables.
// Made and dropped per delivered message: boxing the peer's would allocate per message.
#[allow(clippy::large_enum_variant)]
pub(crate) enum UdTarget {
    Local(LocalTarget),
    Peer(PeerTarget),
}

/// The UD QP `qpn` of this host if it takes a message with Q_Key `qkey` (rxe `rxe_rcv`:
/// the QP exists, runs UD and accepts requests; `check_keys`: the Q_Key matches); `None`
/// drops the message silently. The same-host transport and the network's receive path
/// both find their UD responders here.
pub(crate) fn ud_target(engine: &'static Engine, qpn: u32, qkey: u32) -> Option<UdTarget> {
    let ep = endpoint_of(qpn);
    if ep == engine.ep() {
        let t = engine.qps.get(qpn)?;
        (t.qp_type == QpType::Ud && ud_accepts(t.rec, qkey)).then(|| UdTarget::Local(LocalTarget::of(t)))
    } else {
        let peer = engine.reg.as_ref()?.peer(ep).ok()?;
        let rec = peer.tables().qp(qpn);
        let takes = super::route::is_qp(rec, qpn, QpType::Ud) && ud_accepts(rec, qkey);
        takes.then(|| UdTarget::Peer(PeerTarget::of_qp(&engine.endpoint, peer, qpn)))
    }
}

/// Whether a UD responder takes a message with `qkey` (and its owner's port is up,
/// docs/fault-injection.md).
pub(crate) fn ud_accepts(rec: &crate::shm::tables::QpRecord, qkey: u32) -> bool {
    super::route::accepts_requests(rec.state()) && !rec.port_down() && rec.qkey.load(Ordering::Acquire) == qkey
}

/// A UD message as it reaches a responder: the request, the 40-byte GRH area its receive
/// gets (docs/rocev2-wire.md §5.3), the payload, and the service level for the completion.
pub(crate) struct UdMessage<'a, 's, 'p> {
    pub(crate) request: &'a Request,
    pub(crate) header: &'a [u8],
    pub(crate) data: Source<'s, 'p>,
    pub(crate) sl: u8,
}

/// Delivers one UD message to `t` through the core's UD responder (kept in `slot`,
/// reconfigured with `t`'s Q_Key): docs/rocev2-wire.md §3.5: Q_Key, MTU, a receive WQE with
/// room for the GRH area and the payload; silent drops otherwise.
pub(crate) fn deliver_ud<T: Target>(t: &T, slot: &mut Option<Responder>, now: Instant, mtu: u32, msg: UdMessage<'_, '_, '_>, counters: &CounterBlock) {
    t.note_inbound();
    let cfg = responder_config(Mode::Ud, t.rec(), mtu);
    let responder = match slot {
        // A receive WQE the target could not use ended that target's QP, not this machine's
        // next destination: start over.
        Some(r) if r.state() == ResponderState::Error => slot.insert(Responder::new(cfg)),
        Some(r) => {
            r.reconfigure(cfg);
            r
        }
        None => slot.insert(Responder::new(cfg)),
    };
    let mut at = Responding::new(t);
    let delivery = responder.handle_request(now, msg.request, &mut at);
    let Some(c) = delivery.recv else { return };
    if c.status != WcStatus::Success {
        // rxe: with an SRQ a receive too small completes in error; without one the
        // message is dropped — here the receive was already taken, so complete it in
        // error. A receive WQE whose memory fails the checks also ends the QP.
        let _ = complete_receive(t, recv_cqe(t, &c, at.recv.as_ref()), at.recv.as_ref());
        if responder.state() == ResponderState::Error {
            t.enter_error(None);
        }
        return;
    }
    if let Some(place) = delivery.place {
        if at.place(place, Some(msg.header), msg.data).is_err() {
            let _ = complete_receive(t, of_receive(Cqe::error(c.wr_id, t.qpn(), WcStatus::LocQpOpErr, vendor_err::RECV_WQE_BAD), at.recv.as_ref()), at.recv.as_ref());
            t.enter_error(None);
            return;
        }
    }
    let mut cqe = recv_cqe(t, &c, at.recv.as_ref());
    cqe.sl = msg.sl;
    let _ = deliver_recv(t, cqe, at.recv.as_ref(), counters);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_proto::psn::Psn;
    use rverbs_proto::wire::roce::Packet as RocePacket;
    use crate::qp::send::core_wqe;
    use crate::qp::sq::SendWqe;
    use rverbs_proto::verbs::WrOpcode;
    use rverbs_proto::wire::roce::Repr;

    /// `imm_data` reaches the wire as the 4 bytes C stored (htobe32(2) is 00 00 00 02 on
    /// the wire, as rxe and udaddy expect), and a received ImmDt comes back as the same
    /// bytes; an rkey to invalidate travels as its value (IETH, big-endian).
    #[test]
    fn immediate_data_crosses_the_wire_as_the_bytes_c_stored() {
        let c_bytes = [0u8, 0, 0, 2];
        let wqe = SendWqe { opcode: Some(WrOpcode::SendWithImm), imm: u32::from_ne_bytes(c_bytes), ..SendWqe::default() };
        let request = Request::message(Mode::Ud, 0x12, &core_wqe(&wqe), Psn::new(0));
        let repr: Repr = request.to_repr(0x34);
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut RocePacket::new_unchecked(&mut buf[..]));
        let at = repr.header_len() - 4;
        assert_eq!(&buf[at..at + 4], &c_bytes, "ImmDt carries the C bytes");

        let mut rc = RecvCompletion::error(7, WcStatus::Success, 0);
        rc.flags |= rverbs_proto::verbs::WcFlags::WITH_IMM;
        rc.imm = Request::from_repr(&repr, &[]).imm.expect("an ImmDt");
        assert_eq!(wc_imm(&rc).to_ne_bytes(), c_bytes, "and the receiver's imm_data holds them again");

        let inv = SendWqe { opcode: Some(WrOpcode::SendWithInv), imm: 0x0102_0304, ..SendWqe::default() };
        assert_eq!(core_wqe(&inv).imm, 0x0102_0304, "an rkey is a value, not bytes");
    }
}
