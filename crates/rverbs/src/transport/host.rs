//! The same-host transport: the requester runs the responder of the target QP directly —
//! in this process, or in a peer process's shared state ([`Target`]) — and completes at
//! once.
//!
//! Read before editing: rxe `rxe_req.c` (requester), `rxe_resp.c` (responder: the order
//! of its checks is GET_REQ → CHK_OP_VALID → CHK_RESOURCE → CHK_LENGTH → CHK_RKEY →
//! EXECUTE, kept here), `rxe_comp.c` (completer; UC and UD complete at transmit), the
//! statuses of ibv_poll_cq(3), and `transport::grh` (UD GRH).
//!
//! One call executes one whole message. There are no packets, so there is nothing to
//! reorder or lose: PSNs are not needed, and a "lost" message is one the responder
//! dropped (wrong state, unknown QP, wrong addresses, a dead peer) — the requester then
//! retries on its ACK timer like rxe would.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{self, Mode, RecvCompletion, Request, Responder, ResponderState, UNSEGMENTED_MTU};
use rverbs_proto::rnr::rnr_delay;
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpType, WcOpcode, WcStatus, WrOpcode};
use rverbs_proto::violation::Violation;

use rverbs_proto::wire::roce::Packet as RocePacket;
use rverbs_proto::wire::{self, FethRepr, Selectivity};

use super::respond::Responding;
use super::route::{connected_mode, endpoint_of, responder_config, Path, Route, Routed};
use super::target::{LocalTarget, PeerTarget, Target};
use crate::mcast::{is_multicast, MULTICAST_QPN};
use crate::mr::cma::CmaError;
use crate::mr::{self, copy_message, Fault, KeySpace, PinList, Sge, Source};
use crate::qp::sq::{ReqView, SendWqe};
use crate::qp::wr::{FlushPlacement, FlushSelectivity};
use crate::qp::QpInner;
use crate::transport::grh;
use crate::transport::Exec;
use crate::engine::Engine;
use crate::wc::Cqe;

/// The data a request carries, gathered and checked on the requester side.
enum Gathered<'g, 'a> {
    Inline(&'g [u8]),
    Pins(&'g PinList<'a>),
}

impl<'a> Gathered<'_, 'a> {
    fn source(&self) -> Source<'_, 'a> {
        match self {
            Gathered::Inline(b) => Source::Bytes(b),
            Gathered::Pins(l) => Source::Pins(l),
        }
    }
}

pub(crate) fn execute(
    qp: &Arc<QpInner>,
    req: &ReqView,
    wqe: &SendWqe,
    sges: &[Sge],
    inline: &[u8],
    path: &mut Path,
) -> Exec {
    let op = wqe.opcode();
    match op {
        WrOpcode::BindMw => return super::local::bind_mw(qp, wqe),
        WrOpcode::LocalInv => return super::local::local_inv(qp, wqe),
        _ if !op.has_wire_opcode(qp.qp_type) => return no_wire_opcode(qp, wqe),
        _ => {}
    }

    // Requester: gather the outgoing data (local SGE faults are LOC_PROT_ERR, as
    // ibv_poll_cq(3) describes it; rxe reports LOC_QP_OP_ERR for them — see
    // docs/rxe-differences.md, "A local SGE fault is LOC_PROT_ERR").
    let own = KeySpace::local(qp.pd.endpoint());
    let mut pins = PinList::new();
    let gathered = if !op.carries_payload() {
        Gathered::Inline(&[])
    } else if wqe.inline_len.is_some() {
        Gathered::Inline(inline)
    } else {
        // Pinned in place: the list is large and moving it costs a memcpy per request.
        match mr::pin_sges_into(&own, qp.pd.id, sges, Access::empty(), wqe.total_len, &mut pins) {
            Ok(()) => Gathered::Pins(&pins),
            Err(f) => return local_fault(qp, wqe, f),
        }
    };

    // Read/atomic credit (rxe `rxe_req.c` `check_init_depth`): with max_rd_atomic 0 the request
    // can never be issued.
    let needs_credit = op.is_read_or_atomic() || op == WrOpcode::AtomicWrite;
    if needs_credit && req.max_rd_atomic == 0 && qp.qp_type.is_reliable() {
        return Exec::Stall;
    }

    match qp.qp_type {
        QpType::Ud => ud_send(qp, wqe, &gathered, path),
        QpType::Rc | QpType::Uc | QpType::XrcSend => {
            let now = path.epoch;
            let Some(Route { to, responder }) = super::route::connected(path.engine, qp, req, wqe, &mut path.route) else {
                return unanswered(qp, wqe);
            };
            match to {
                Routed::Local(t) => {
                    t.note_inbound();
                    connected(qp, wqe, sges, &gathered, t, responder, now)
                }
                Routed::Peer(t) => {
                    t.note_inbound();
                    connected(qp, wqe, sges, &gathered, t, responder, now)
                }
                Routed::Split(t) => {
                    t.note_inbound();
                    connected(qp, wqe, sges, &gathered, t, responder, now)
                }
            }
        }
        _ => Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::REMOTE_INVALID)),
    }
}

/// A work request the QP's transport has no opcode for (UC SEND with Invalidate): posted,
/// then failed with LOC_QP_OP_ERR, as rxe's requester does (`WrOpcode::has_wire_opcode`).
pub(crate) fn no_wire_opcode(qp: &QpInner, wqe: &SendWqe) -> Exec {
    Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::LOCAL_NO_OPCODE))
}

fn local_fault(qp: &QpInner, wqe: &SendWqe, f: Fault) -> Exec {
    Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocProtErr, f.local_vendor_err()))
}

/// A request nobody answered: RC retries; UC and UD complete as sent.
fn unanswered(qp: &QpInner, wqe: &SendWqe) -> Exec {
    if qp.qp_type.is_reliable() {
        Exec::Lost
    } else {
        Exec::Done(sent(qp, wqe))
    }
}

/// The successful requester completion of `wqe`.
pub(crate) fn sent(qp: &QpInner, wqe: &SendWqe) -> Cqe {
    let op = wqe.opcode();
    let opcode = op.wc_opcode().unwrap_or(WcOpcode::Send);
    let byte_len = match op {
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => 8,
        WrOpcode::BindMw | WrOpcode::LocalInv => 0,
        _ => wqe.total_len as u32,
    };
    Cqe::success(wqe.wr_id, qp.qpn, opcode, byte_len)
}

/// The core's form of a send work request: the same fields, no scatter list.
pub(crate) fn core_wqe(wqe: &SendWqe) -> rc::SendWqe {
    let op = wqe.opcode();
    rc::SendWqe {
        id: wqe.wr_id,
        opcode: op,
        length: match (op, wqe.flush) {
            (WrOpcode::Flush, Some(f)) => f.len,
            _ => wqe.total_len as u32,
        },
        remote_va: wqe.remote_addr,
        rkey: wqe.rkey,
        // `imm_data` is the 4 bytes C put in `__be32 imm_data`, kept verbatim (a native
        // u32 of those bytes); the core and the wire's ImmDt hold its big-endian value
        // (IBTA §9.2.3: ImmDt carries the bytes as given). The rkey of SEND_WITH_INV
        // shares the field in host order, as `invalidate_rkey` does in C.
        imm: match op {
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => u32::from_be(wqe.imm),
            _ => wqe.imm,
        },
        compare_add: wqe.compare_add,
        swap: wqe.swap,
        flags: wqe.flags,
        flush: wqe.flush.map(|f| FethRepr {
            selectivity: match f.selectivity {
                FlushSelectivity::WholeMr => Selectivity::WholeMr,
                FlushSelectivity::Range => Selectivity::MemoryRange,
            },
            placement: {
                let mut p = wire::Placement::empty();
                if f.placement.contains(FlushPlacement::GLOBAL) {
                    p |= wire::Placement::GLOBAL_VISIBILITY;
                }
                if f.placement.contains(FlushPlacement::PERSISTENT) {
                    p |= wire::Placement::PERSISTENCE;
                }
                p
            },
        }),
        ud: wqe.ud.as_ref().map(|u| rc::UdDest { remote_qpn: u.remote_qpn, remote_qkey: u.remote_qkey }),
        // The network transport sets it for XRC initiators (`super::net`); the same-host
        // transport finds the SRQ with the route and runs the RC opcodes.
        xrc_srq: None,
    }
}

/// The receive completion the core decided, as the target's CQ entry.
pub(crate) fn recv_cqe<T: Target>(t: &T, c: &RecvCompletion) -> Cqe {
    if c.status != WcStatus::Success {
        return Cqe::error(c.wr_id, t.qpn(), c.status, c.vendor_err);
    }
    let mut cqe = Cqe::success(c.wr_id, t.qpn(), c.opcode.unwrap_or(WcOpcode::Recv), c.byte_len);
    cqe.imm = wc_imm(c);
    cqe.wc_flags |= c.flags.bits() as u8;
    cqe.solicited = c.solicited;
    cqe.src_qp = c.src_qp;
    cqe
}

/// The completion's `imm_data` as C reads it: the bytes of the ImmDt the core holds as a
/// big-endian value (see `core_wqe`); an invalidated rkey stays a value in host order
/// (`invalidated_rkey`).
fn wc_imm(c: &RecvCompletion) -> u32 {
    if c.flags.contains(rverbs_proto::verbs::WcFlags::WITH_IMM) {
        c.imm.to_be()
    } else {
        c.imm
    }
}

/// Writes a receive completion at the target; an overrun of its CQ moves it to ERR
/// with QP_FATAL and the message counts as unanswered (rxe: no ACK is sent).
fn deliver_recv<T: Target>(t: &T, cqe: Cqe) -> Result<(), ()> {
    if t.complete(cqe).is_err() {
        t.enter_error(Some(EventType::QpFatal));
        return Err(());
    }
    Ok(())
}

/// The error completion of receive WQE `wr_id` for a rule broken while it was in use.
fn refused_recv(wr_id: u64, v: Violation) -> Option<RecvCompletion> {
    Some(RecvCompletion::error(wr_id, v.recv_status()?, v.vendor_err()))
}

/// What a failed data movement means for the request: the peer's process is gone (or
/// will not let us in) and nobody answers, or the registered memory was unmapped by its
/// owner and the access fails as `violation` (out of bounds, or a bad receive WQE).
fn moved_failed(qp: &QpInner, t: &impl Target, wqe: &SendWqe, e: CmaError, v: Violation, recv: Option<u64>) -> Exec {
    match e {
        CmaError::Gone | CmaError::Denied => {
            if e == CmaError::Denied {
                tracing::warn!("cross-memory attach refused by the kernel; the peer cannot be reached");
            }
            unanswered(qp, wqe)
        }
        CmaError::Fault => violation(qp, t, wqe, v, recv.and_then(|id| refused_recv(id, v))),
    }
}

/// RC and UC: the core's responder machine of the connection takes the whole message as
/// one request (docs/rocev2-wire.md §3.3: its checks, in rxe's order, and its plan); this
/// driver moves the bytes the plan names, publishes the receive completion, and turns
/// the machine's response into the requester's completion (§3.4, §4).
fn connected<T: Target>(
    qp: &Arc<QpInner>,
    wqe: &SendWqe,
    sges: &[Sge],
    gathered: &Gathered<'_, '_>,
    t: &T,
    responder: &mut Responder,
    now: Instant,
) -> Exec {
    use WrOpcode as W;
    let carried = matches!(
        wqe.opcode(),
        W::Send
            | W::SendWithImm
            | W::SendWithInv
            | W::RdmaWrite
            | W::RdmaWriteWithImm
            | W::RdmaRead
            | W::AtomicCmpAndSwp
            | W::AtomicFetchAndAdd
            | W::AtomicWrite
            | W::Flush
    );
    if !carried {
        return violation(qp, t, wqe, Violation::InvalidOpcode, None);
    }
    let mode = connected_mode(qp.qp_type);
    let cfg = responder_config(mode, t.rec(), UNSEGMENTED_MTU);
    if responder.state() == ResponderState::Error {
        // The route accepted the responder, so its QP left ERR through RESET since the
        // machine failed (rxe "class J" leaves the requester in RTS): a new connection.
        *responder = Responder::new(cfg);
    } else {
        responder.reconfigure(cfg);
    }
    let request = Request::message(mode, qp.qpn, &core_wqe(wqe), responder.expected_psn());
    let mut at = Responding::new(t);
    let delivery = responder.handle_request(now, &request, &mut at);
    let response = responder.poll_transmit(now);
    debug_assert!(!responder.has_transmit(), "one request, one response");

    if let Some(v) = delivery.violation {
        if let Some(e) = at.moved {
            responder.enter_error();
            return moved_failed(qp, t, wqe, e, v, None);
        }
        return match v {
            Violation::ReceiveNotReady if mode == Mode::Rc => {
                Exec::Rnr(rnr_delay(responder.config().min_rnr_timer))
            }
            Violation::ReceiveNotReady => Exec::Done(sent(qp, wqe)),
            v => violation(qp, t, wqe, v, delivery.recv),
        };
    }
    if !delivery.executed {
        // Dropped: a responder the machine saw fail earlier answers nothing.
        return unanswered(qp, wqe);
    }
    if let Some(place) = delivery.place {
        if let Err(e) = at.place(place, None, gathered.source()) {
            responder.enter_error();
            let (v, recv) = match place {
                rc::Placement::Recv { wr_id, .. } => (Violation::RecvWqeMalformed, Some(wr_id)),
                rc::Placement::Memory { .. } => (Violation::RkeyBounds, at.recv.as_ref().map(|r| r.wr_id)),
            };
            return moved_failed(qp, t, wqe, e, v, recv);
        }
    }
    if let Some(c) = delivery.recv {
        if c.status != WcStatus::Success {
            // SEND_WITH_INV whose invalidation failed (rxe "class J"): the receive
            // completes in error and the responder enters ERR, but no NAK is sent.
            let _ = t.complete(recv_cqe(t, &c));
        } else if deliver_recv(t, recv_cqe(t, &c)).is_err() {
            responder.enter_error();
            return unanswered(qp, wqe);
        }
    }
    if responder.state() == ResponderState::Error {
        t.enter_error(None);
    }
    match response {
        // UC: no responses; the requester completes at transmit.
        None => Exec::Done(sent(qp, wqe)),
        Some(r) => completed(qp, t, wqe, sges, &at, &r),
    }
}

/// The requester's side of a response (rxe `rxe_comp.c`): READ data and atomic results go
/// into the local scatter list (needs LOCAL_WRITE; a fault is LOC_PROT_ERR).
fn completed<T: Target>(qp: &QpInner, t: &T, wqe: &SendWqe, sges: &[Sge], at: &Responding<'_, T>, r: &rc::Response) -> Exec {
    if r.atomic_original.is_none() && wqe.opcode() != WrOpcode::RdmaRead {
        return Exec::Done(sent(qp, wqe));
    }
    let own = KeySpace::local(qp.pd.endpoint());
    if let Some(original) = r.atomic_original {
        let local = match mr::pin_sges(&own, qp.pd.id, sges, Access::LOCAL_WRITE, 8) {
            Ok(l) => l,
            Err(f) => return local_fault(qp, wqe, f),
        };
        // The requester's own memory is always in this process: the copy cannot fail.
        let _ = copy_message(&local, 0, Source::Bytes(&original.to_ne_bytes()));
    } else if wqe.opcode() == WrOpcode::RdmaRead {
        let local = match mr::pin_sges(&own, qp.pd.id, sges, Access::LOCAL_WRITE, wqe.total_len) {
            Ok(l) => l,
            Err(f) => return local_fault(qp, wqe, f),
        };
        if r.payload_len > 0 {
            if let Err(e) = at.read_into(&local) {
                return moved_failed(qp, t, wqe, e, Violation::RkeyBounds, None);
            }
        }
    }
    Exec::Done(sent(qp, wqe))
}

/// Applies a responder violation: completes a consumed receive with its error, moves
/// the responder to ERR for class A/C errors, and completes the requester with the
/// NAK's status (RC) or as sent (UC, which gets no NAK).
fn violation<T: Target>(qp: &QpInner, t: &T, wqe: &SendWqe, v: Violation, recv: Option<RecvCompletion>) -> Exec {
    let nak_status = v.nak().requester_status().unwrap_or(WcStatus::RemOpErr);
    let held = recv.is_some();
    if let Some(r) = recv {
        let _ = t.complete(Cqe::error(r.wr_id, t.qpn(), r.status, r.vendor_err));
    }
    if qp.qp_type.is_reliable() {
        if v.responder_fatal() {
            // IBTA: a responder error no receive completion reports is raised as an
            // asynchronous event (rxe raises none; hardware does).
            let event = (!held).then_some(responder_event(v));
            t.enter_error(event);
        }
        Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, nak_status, v.vendor_err()))
    } else {
        if held && v.responder_fatal() {
            t.enter_error(None);
        }
        Exec::Done(sent(qp, wqe))
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

/// UD: one message to the QP the address handle and `remote_qpn` name, or to every
/// member of a multicast group (remote QPN 0xFFFFFF and a multicast destination GID:
/// the attached QPs of this process, then those of other processes the host-wide record
/// names, `crate::mcast`, then one packet to the group's address for the other hosts,
/// `super::mcast_net`). The requester always completes as sent
/// (rxe `rxe_req.c`): a message above the port's active MTU is not sent at all
/// (C10-93.1.1);
/// an unknown or not-ready QP, a Q_Key mismatch or a missing receive drop it silently.
fn ud_send(qp: &Arc<QpInner>, wqe: &SendWqe, data: &Gathered<'_, '_>, path: &mut Path) -> Exec {
    let done = Exec::Done(sent(qp, wqe));
    let Some(ud) = &wqe.ud else { return done };
    if ud.ah.pd != qp.pd.id {
        // rxe: an AH of another PD is a local QP operation error.
        return Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::LOCAL_PD));
    }
    let dev = path.engine;
    // C10-93.1.1: above the port's active MTU, nothing is sent and no error is reported.
    let mtu = dev.active_mtu.get().bytes();
    if wqe.total_len > u64::from(mtu) {
        return done;
    }
    let Some(grh_attr) = ud.ah.attr.grh else { return done };
    if ud.remote_qpn == MULTICAST_QPN && is_multicast(&grh_attr.dgid) {
        for t in path.mcast.members(&grh_attr.dgid) {
            if ud_accepts(t.rec, ud.remote_qkey) {
                ud_deliver(qp, wqe, data, &LocalTarget::of(t), path);
            }
        }
        for (peer, qpn) in crate::mcast::remote_members(dev, &grh_attr.dgid) {
            let rec = peer.tables().qp(qpn);
            if super::route::is_qp(rec, qpn, QpType::Ud) && ud_accepts(rec, ud.remote_qkey) {
                ud_deliver(qp, wqe, data, &PeerTarget::of_qp(dev, peer, qpn), path);
            }
        }
        // And once on the network, for the members of other hosts (`super::mcast_net`).
        if let Some(net) = path.net {
            let sgid = dev.gids.get(usize::from(grh_attr.sgid_index)).map(|e| e.gid).unwrap_or_default();
            let to = Wire::Group { ip: grh_attr.dgid.to_ip(), hop_limit: grh_attr.hop_limit };
            send_ud_packet(qp, wqe, data, net, &sgid, to);
        }
        return done;
    }
    if !dev.owns_gid(&grh_attr.dgid) {
        // Another host: one RoCEv2 packet over UDP, if the network transport serves the
        // source GID; else it is lost, as rxe's would be without a route.
        let sgid = dev.gids.get(usize::from(grh_attr.sgid_index)).map(|e| e.gid).unwrap_or_default();
        if let Some(net) = path.net {
            send_ud_packet(qp, wqe, data, net, &sgid, Wire::Host(grh_attr.dgid.to_ip()));
        }
        return done;
    }
    match ud_target(dev, ud.remote_qpn, ud.remote_qkey) {
        Some(UdTarget::Local(t)) => ud_deliver(qp, wqe, data, &t, path),
        Some(UdTarget::Peer(t)) => ud_deliver(qp, wqe, data, &t, path),
        None => {}
    }
    done
}

/// Where a UD packet goes on the network.
enum Wire {
    /// A host's address.
    Host(std::net::IpAddr),
    /// A multicast group's address, with the address handle's hop limit.
    Group { ip: std::net::IpAddr, hop_limit: u8 },
}

/// Sends `wqe` as one UD SEND_ONLY(_WITH_IMMEDIATE) packet from the socket of `sgid` to
/// `dst` (docs/rocev2-wire.md §1.2, §1.5: BTH with P_Key 0xFFFF, DETH with the Q_Key and
/// this QP's number, ImmDt, the payload and its pad, the ICRC).
fn send_ud_packet(qp: &QpInner, wqe: &SendWqe, data: &Gathered<'_, '_>, net: &super::udp::Net, sgid: &crate::gid::Gid, dst: Wire) {
    let Some(ud) = &wqe.ud else { return };
    // A UD QP that talks to another host counts as a network connection from now on (until
    // it is reset), so its polls receive what the network brings (`progress::net_active`).
    if let Ok(mut nr) = qp.net_resp.lock() {
        nr.live.get_or_insert_with(crate::progress::NetConnection::open);
    }
    let request = Request::message(Mode::Ud, qp.qpn, &core_wqe(wqe), Psn::new(0));
    let repr = request.to_repr(ud.remote_qpn);
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut packet = RocePacket::new_unchecked(&mut buf[..]);
    repr.emit(&mut packet);
    let gathered = match data {
        Gathered::Inline(b) => {
            packet.payload_mut().copy_from_slice(b);
            Ok(())
        }
        Gathered::Pins(l) => mr::gather(l, packet.payload_mut()),
    };
    match dst {
        _ if gathered.is_err() => {}
        Wire::Host(ip) => net.send(sgid, ip, &mut buf),
        Wire::Group { ip, hop_limit } => super::mcast_net::send(net, sgid, ip, hop_limit, &mut buf),
    }
}

/// A UD QP of this host that takes a message: this process's, or a peer process's reached
/// through its shared tables.
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

/// Whether a UD responder takes a message with `qkey`.
pub(crate) fn ud_accepts(rec: &crate::shm::tables::QpRecord, qkey: u32) -> bool {
    super::route::accepts_requests(rec.state()) && rec.qkey.load(Ordering::Acquire) == qkey
}

/// Delivers one UD message to `t`, which accepts it (same host: the GRH is the one the
/// path would have put on the wire).
fn ud_deliver<T: Target>(qp: &QpInner, wqe: &SendWqe, data: &Gathered<'_, '_>, t: &T, path: &mut Path) {
    let Some(ud) = &wqe.ud else { return };
    let Some(grh_attr) = ud.ah.attr.grh else { return };
    let sgid = path.engine.gids.get(usize::from(grh_attr.sgid_index)).map(|e| e.gid).unwrap_or_default();
    let header = grh::build(
        &sgid,
        &grh_attr.dgid,
        grh_attr.traffic_class,
        grh_attr.hop_limit,
        grh_attr.flow_label,
        wqe.total_len as usize,
        wqe.opcode().has_imm(),
    );
    let request = Request::message(Mode::Ud, qp.qpn, &core_wqe(wqe), Psn::new(0));
    let msg = UdMessage { request: &request, header: &header, data: data.source(), sl: ud.ah.attr.sl };
    deliver_ud(t, &mut path.ud, path.epoch, path.engine.active_mtu.get().bytes(), msg);
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
pub(crate) fn deliver_ud<T: Target>(t: &T, slot: &mut Option<Responder>, now: Instant, mtu: u32, msg: UdMessage<'_, '_, '_>) {
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
        let _ = t.complete(recv_cqe(t, &c));
        if responder.state() == ResponderState::Error {
            t.enter_error(None);
        }
        return;
    }
    if let Some(place) = delivery.place {
        if at.place(place, Some(msg.header), msg.data).is_err() {
            let _ = t.complete(Cqe::error(c.wr_id, t.qpn(), WcStatus::LocQpOpErr, vendor_err::RECV_WQE_BAD));
            t.enter_error(None);
            return;
        }
    }
    let mut cqe = recv_cqe(t, &c);
    cqe.sl = msg.sl;
    let _ = deliver_recv(t, cqe);
}

#[cfg(test)]
mod tests {
    use super::*;
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
