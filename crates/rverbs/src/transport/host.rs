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

use rverbs_proto::rnr::rnr_delay;
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpType, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode};
use rverbs_proto::violation::Violation;

use super::route::{endpoint_of, Routed};
use super::target::{LocalTarget, PeerTarget, Target};
use crate::mcast::{is_multicast, MULTICAST_QPN};
use crate::mem::AtomicOp;
use crate::mr::cma::CmaError;
use crate::mr::{self, copy_message, Fault, KeySpace, KeyUse, PinList, Sge, Source};
use crate::qp::rq::RecvWqe;
use crate::qp::sq::{ReqView, SendWqe};
use crate::qp::wr::{FlushPlacement, FlushSelectivity};
use crate::qp::QpInner;
use crate::transport::grh::{self, GRH_LEN};
use crate::transport::Exec;
use crate::wc::Cqe;

/// The data a request carries, gathered and checked on the requester side.
enum Gathered<'a> {
    Inline(&'a [u8]),
    Pins(PinList<'a>),
}

impl<'a> Gathered<'a> {
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
    route: &mut Option<Routed>,
) -> Exec {
    let dev = qp.pd.ctx.dev;
    let op = wqe.opcode();
    match op {
        WrOpcode::BindMw => return super::local::bind_mw(qp, wqe),
        WrOpcode::LocalInv => return super::local::local_inv(qp, wqe),
        _ => {}
    }

    // Requester: gather the outgoing data (local SGE faults are LOC_PROT_ERR, as
    // ibv_poll_cq(3) describes it; rxe reports LOC_QP_OP_ERR for them — see ARCHITECTURE.md).
    let own = KeySpace::local(dev.tables);
    let gathered = if !op.carries_payload() {
        Gathered::Inline(&[])
    } else if wqe.inline_len.is_some() {
        Gathered::Inline(inline)
    } else {
        match mr::pin_sges(&own, qp.pd.id, sges, Access::empty(), wqe.total_len) {
            Ok(l) => Gathered::Pins(l),
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
        QpType::Ud => ud_send(qp, wqe, &gathered),
        QpType::Rc | QpType::Uc | QpType::XrcSend => match super::route::connected(qp, req, wqe, route) {
            Some(Routed::Local(t)) => {
                t.note_inbound();
                connected(qp, wqe, sges, &gathered, t)
            }
            Some(Routed::Peer(t)) => {
                t.note_inbound();
                connected(qp, wqe, sges, &gathered, t)
            }
            Some(Routed::Split(t)) => {
                t.note_inbound();
                connected(qp, wqe, sges, &gathered, t)
            }
            None => unanswered(qp, wqe),
        },
        _ => Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::REMOTE_INVALID)),
    }
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

/// A successful receive completion at the target.
fn recv_cqe<T: Target>(t: &T, rwqe: &RecvWqe, opcode: WcOpcode, byte_len: u32, wqe: &SendWqe) -> Cqe {
    let mut c = Cqe::success(rwqe.wr_id, t.qpn(), opcode, byte_len);
    if wqe.opcode().has_imm() {
        c.imm = wqe.imm;
        c.wc_flags |= WcFlags::WITH_IMM.bits() as u8;
    }
    c.solicited = wqe.flags.contains(SendFlags::SOLICITED);
    c
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

/// What the responder found, for the requester to complete.
enum Response {
    Ack,
    Rnr,
    /// A broken rule; a receive WQE already consumed for the message, if any.
    Violation(Violation, Option<RecvWqe>),
    /// The responder could not complete (its CQ overran, its process died).
    NoAck,
}

/// What a failed data movement means for the request.
fn moved_failed(e: CmaError, violation: Violation, rwqe: Option<RecvWqe>) -> Response {
    match e {
        // The responder's process is gone (or will not let us in): nobody answers.
        CmaError::Gone | CmaError::Denied => {
            if e == CmaError::Denied {
                tracing::warn!("cross-memory attach refused by the kernel; the peer cannot be reached");
            }
            Response::NoAck
        }
        // Registered memory the owner unmapped: the access fails as out of bounds.
        CmaError::Fault => Response::Violation(violation, rwqe),
    }
}

/// RC and UC: run the responder, then complete at the requester.
fn connected<T: Target>(
    qp: &Arc<QpInner>,
    wqe: &SendWqe,
    sges: &[Sge],
    gathered: &Gathered<'_>,
    t: &T,
) -> Exec {
    let op = wqe.opcode();
    let reliable = qp.qp_type.is_reliable();
    let response = match op {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => respond_send(t, wqe, gathered),
        WrOpcode::AtomicWrite => return respond_atomic_write(qp, t, wqe),
        WrOpcode::Flush => return respond_flush(qp, t, wqe),
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => respond_write(t, wqe, gathered),
        WrOpcode::RdmaRead => return respond_read(qp, t, wqe, sges),
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => return respond_atomic(qp, t, wqe, sges),
        _ => Response::Violation(Violation::InvalidOpcode, None),
    };
    finish(qp, t, wqe, response, reliable)
}

fn finish<T: Target>(qp: &QpInner, t: &T, wqe: &SendWqe, response: Response, reliable: bool) -> Exec {
    match response {
        Response::Ack => Exec::Done(sent(qp, wqe)),
        Response::Rnr if reliable => Exec::Rnr(rnr_delay(t.rec().min_rnr_timer.load(Ordering::Acquire) as u8)),
        Response::Rnr => Exec::Done(sent(qp, wqe)),
        Response::NoAck => unanswered(qp, wqe),
        Response::Violation(v, rwqe) => violation(qp, t, wqe, v, rwqe),
    }
}

/// Applies a responder violation: completes a consumed receive with its error, moves
/// the responder to ERR for class A/C errors, and completes the requester with the
/// NAK's status (RC) or as sent (UC, which gets no NAK).
fn violation<T: Target>(qp: &QpInner, t: &T, wqe: &SendWqe, v: Violation, rwqe: Option<RecvWqe>) -> Exec {
    let nak_status = v.nak().requester_status().unwrap_or(WcStatus::RemOpErr);
    let held = rwqe.is_some();
    if let Some(r) = rwqe {
        let status = v.responder_status().unwrap_or(nak_status);
        let _ = t.complete(Cqe::error(r.wr_id, t.qpn(), status, v.vendor_err()));
    }
    if qp.qp_type.is_reliable() {
        if v.responder_fatal() {
            // IBTA: a responder error no receive completion reports is raised as an
            // asynchronous event (rxe raises none; hardware does).
            let event = (!held).then_some(match v {
                Violation::RkeyUnknown | Violation::RkeyWrongPd | Violation::RkeyBounds | Violation::RkeyAccess => {
                    EventType::QpAccessErr
                }
                _ => EventType::QpReqErr,
            });
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

fn respond_send<T: Target>(t: &T, wqe: &SendWqe, data: &Gathered<'_>) -> Response {
    let Some(rwqe) = t.take_recv() else { return Response::Rnr };
    let len = wqe.total_len;
    if rwqe.capacity() < len {
        return Response::Violation(Violation::ReceiveTooSmall, Some(rwqe));
    }
    let keys = t.keys();
    let dst = match mr::pin_sges(&keys, t.pd(), rwqe.sges(), Access::LOCAL_WRITE, len) {
        Ok(d) => d,
        Err(_) => return Response::Violation(Violation::RecvWqeMalformed, Some(rwqe)),
    };
    if let Err(e) = copy_message(&dst, 0, data.source()) {
        drop(dst);
        return moved_failed(e, Violation::RecvWqeMalformed, Some(rwqe));
    }
    drop(dst);
    let mut cqe = recv_cqe(t, &rwqe, WcOpcode::Recv, len as u32, wqe);
    if wqe.opcode() == WrOpcode::SendWithInv {
        if !t.invalidate(wqe.imm) {
            // rxe "class J": the receive completes in error and the responder enters ERR,
            // but no NAK is sent, so the requester completes successfully.
            let _ = t.complete(Cqe::error(rwqe.wr_id, t.qpn(), WcStatus::RemInvReqErr, vendor_err::REMOTE_INVALIDATE));
            t.enter_error(None);
            return Response::Ack;
        }
        cqe.imm = wqe.imm;
        cqe.wc_flags |= WcFlags::WITH_INV.bits() as u8;
    }
    match deliver_recv(t, cqe) {
        Ok(()) => Response::Ack,
        Err(()) => Response::NoAck,
    }
}

fn respond_write<T: Target>(t: &T, wqe: &SendWqe, data: &Gathered<'_>) -> Response {
    if !t.rec().access().contains(Access::REMOTE_WRITE) {
        return Response::Violation(Violation::QpAccessDenied, None);
    }
    let imm = wqe.opcode() == WrOpcode::RdmaWriteWithImm;
    let rwqe = if imm {
        match t.take_recv() {
            Some(r) => Some(r),
            None => return Response::Rnr,
        }
    } else {
        None
    };
    let len = wqe.total_len;
    if len > 0 {
        let keys = t.keys();
        let used = KeyUse::Remote { qpn: t.qpn() };
        match keys.pin(wqe.rkey, t.pd(), used, wqe.remote_addr, len, Access::REMOTE_WRITE) {
            Ok(p) => {
                let dst = PinList::one(p);
                if let Err(e) = copy_message(&dst, 0, data.source()) {
                    drop(dst);
                    return moved_failed(e, Violation::RkeyBounds, rwqe);
                }
            }
            Err(f) => return Response::Violation(f.remote(), rwqe),
        }
    }
    if let Some(r) = rwqe {
        let cqe = recv_cqe(t, &r, WcOpcode::RecvRdmaWithImm, len as u32, wqe);
        if deliver_recv(t, cqe).is_err() {
            return Response::NoAck;
        }
    }
    Response::Ack
}

/// Checks a read/atomic-class request against the responder QP: its access flag and its
/// read/atomic resources.
fn check_rd_atomic<T: Target>(t: &T, need: Access) -> Result<(), Violation> {
    if !t.rec().access().contains(need) {
        return Err(Violation::QpAccessDenied);
    }
    if t.rec().max_dest_rd_atomic.load(Ordering::Acquire) == 0 {
        return Err(Violation::NoRdAtomicResources);
    }
    Ok(())
}

fn respond_read<T: Target>(qp: &Arc<QpInner>, t: &T, wqe: &SendWqe, sges: &[Sge]) -> Exec {
    if let Err(v) = check_rd_atomic(t, Access::REMOTE_READ) {
        return violation(qp, t, wqe, v, None);
    }
    let len = wqe.total_len;
    let keys = t.keys();
    let remote = if len > 0 {
        let used = KeyUse::Remote { qpn: t.qpn() };
        match keys.pin(wqe.rkey, t.pd(), used, wqe.remote_addr, len, Access::REMOTE_READ) {
            Ok(p) => Some(PinList::one(p)),
            Err(f) => return violation(qp, t, wqe, f.remote(), None),
        }
    } else {
        None
    };
    // Completer: place the response (needs LOCAL_WRITE; a fault is LOC_PROT_ERR).
    let own = KeySpace::local(qp.pd.ctx.dev.tables);
    let local = match mr::pin_sges(&own, qp.pd.id, sges, Access::LOCAL_WRITE, len) {
        Ok(l) => l,
        Err(f) => return local_fault(qp, wqe, f),
    };
    if let Some(r) = &remote {
        if let Err(e) = copy_message(&local, 0, Source::Pins(r)) {
            return finish(qp, t, wqe, moved_failed(e, Violation::RkeyBounds, None), true);
        }
    }
    Exec::Done(sent(qp, wqe))
}

fn respond_atomic<T: Target>(qp: &Arc<QpInner>, t: &T, wqe: &SendWqe, sges: &[Sge]) -> Exec {
    if let Err(v) = check_rd_atomic(t, Access::REMOTE_ATOMIC) {
        return violation(qp, t, wqe, v, None);
    }
    if !wqe.remote_addr.is_multiple_of(8) {
        return violation(qp, t, wqe, Violation::MisalignedAtomic, None);
    }
    let keys = t.keys();
    let used = KeyUse::Remote { qpn: t.qpn() };
    let target = match keys.pin(wqe.rkey, t.pd(), used, wqe.remote_addr, 8, Access::REMOTE_ATOMIC) {
        Ok(p) => p,
        Err(f) => return violation(qp, t, wqe, f.remote(), None),
    };
    if !aligned8(&target) {
        return violation(qp, t, wqe, Violation::MisalignedAtomic, None);
    }
    let op = match wqe.opcode() {
        WrOpcode::AtomicCmpAndSwp => AtomicOp::CompareSwap { compare: wqe.compare_add, swap: wqe.swap },
        _ => AtomicOp::FetchAdd(wqe.compare_add),
    };
    let original = match mr::atomic(&target, op) {
        Ok(v) => v,
        Err(e) => return finish(qp, t, wqe, moved_failed(e, Violation::RkeyBounds, None), true),
    };
    drop(target);
    // Completer: the original value goes to the local SGE (host byte order).
    let own = KeySpace::local(qp.pd.ctx.dev.tables);
    let local = match mr::pin_sges(&own, qp.pd.id, sges, Access::LOCAL_WRITE, 8) {
        Ok(l) => l,
        Err(f) => return local_fault(qp, wqe, f),
    };
    // The requester's own memory is always in this process: the copy cannot fail.
    let _ = copy_message(&local, 0, Source::Bytes(&original.to_ne_bytes()));
    Exec::Done(sent(qp, wqe))
}

/// Whether a pinned word is 8-byte aligned where it lives.
fn aligned8(p: &mr::Pinned<'_>) -> bool {
    match p.place {
        mr::access::Place::Local(a) => a % 8 == 0,
        mr::access::Place::Cma { addr, .. } => addr % 8 == 0,
        mr::access::Place::Proxy(r) => r.va % 8 == 0,
    }
}

/// ATOMIC_WRITE (IBTA A19; rxe `rxe_resp.c`): needs REMOTE_WRITE on the responder QP and the
/// region, a read/atomic resource, 8 aligned bytes; stores the 8 bytes verbatim.
fn respond_atomic_write<T: Target>(qp: &Arc<QpInner>, t: &T, wqe: &SendWqe) -> Exec {
    if let Err(v) = check_rd_atomic(t, Access::REMOTE_WRITE) {
        return violation(qp, t, wqe, v, None);
    }
    let keys = t.keys();
    let used = KeyUse::Remote { qpn: t.qpn() };
    let target = match keys.pin(wqe.rkey, t.pd(), used, wqe.remote_addr, 8, Access::REMOTE_WRITE) {
        Ok(p) => p,
        Err(f) => return violation(qp, t, wqe, f.remote(), None),
    };
    if !wqe.remote_addr.is_multiple_of(8) || !aligned8(&target) {
        return violation(qp, t, wqe, Violation::MisalignedAtomic, None);
    }
    if let Err(e) = mr::atomic(&target, AtomicOp::Write(wqe.swap)) {
        return finish(qp, t, wqe, moved_failed(e, Violation::RkeyBounds, None), true);
    }
    Exec::Done(sent(qp, wqe))
}

/// FLUSH (IBTA A19; rxe `rxe_resp.c`): the responder QP must allow the placement type, the
/// region must grant it; a RANGE flush checks the range, a whole-MR flush only the key.
/// Global visibility is a full memory barrier here.
fn respond_flush<T: Target>(qp: &Arc<QpInner>, t: &T, wqe: &SendWqe) -> Exec {
    let f = wqe.flush.unwrap_or_default();
    let mut need = Access::empty();
    if f.placement.contains(FlushPlacement::GLOBAL) {
        need |= Access::FLUSH_GLOBAL;
    }
    if f.placement.contains(FlushPlacement::PERSISTENT) {
        need |= Access::FLUSH_PERSISTENT;
    }
    if !t.rec().access().contains(need) {
        return violation(qp, t, wqe, Violation::QpAccessDenied, None);
    }
    let keys = t.keys();
    let used = KeyUse::Remote { qpn: t.qpn() };
    let pinned = match f.selectivity {
        FlushSelectivity::WholeMr => keys.pin_base(wqe.rkey, t.pd(), used, need),
        FlushSelectivity::Range => keys.pin(wqe.rkey, t.pd(), used, wqe.remote_addr, u64::from(f.len), need),
    };
    match pinned {
        Ok(_) => {
            mr::flush_global();
            Exec::Done(sent(qp, wqe))
        }
        Err(e) => violation(qp, t, wqe, e.remote(), None),
    }
}

/// UD: one message to the QP the address handle and `remote_qpn` name, or to every
/// member of a multicast group (remote QPN 0xFFFFFF and a multicast destination GID:
/// the attached QPs of this process, then those of other processes the host-wide record
/// names, `crate::mcast`). The requester always completes as sent
/// (rxe `rxe_req.c`): a message above the path MTU is not sent at all (C10-93.1.1);
/// an unknown or not-ready QP, a Q_Key mismatch or a missing receive drop it silently.
fn ud_send(qp: &Arc<QpInner>, wqe: &SendWqe, data: &Gathered<'_>) -> Exec {
    let done = Exec::Done(sent(qp, wqe));
    let Some(ud) = &wqe.ud else { return done };
    if !Arc::ptr_eq(&ud.ah.pd, &qp.pd) {
        // rxe: an AH of another PD is a local QP operation error.
        return Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::LOCAL_PD));
    }
    let dev = qp.pd.ctx.dev;
    let mtu = dev.port_attr().active_mtu.bytes();
    if wqe.total_len > u64::from(mtu) {
        return done;
    }
    let Some(grh_attr) = ud.ah.attr.grh else { return done };
    if ud.remote_qpn == MULTICAST_QPN && is_multicast(&grh_attr.dgid) {
        for t in dev.mcast.members(&grh_attr.dgid) {
            if ud_accepts(t.rec, ud.remote_qkey) {
                ud_deliver(qp, wqe, data, &LocalTarget::of(t));
            }
        }
        for (peer, qpn) in crate::mcast::remote_members(dev, &grh_attr.dgid) {
            let rec = peer.tables().qp(qpn);
            if super::route::is_qp(rec, qpn, QpType::Ud) && ud_accepts(rec, ud.remote_qkey) {
                ud_deliver(qp, wqe, data, &PeerTarget::of_qp(peer, qpn));
            }
        }
        return done;
    }
    if !dev.owns_gid(&grh_attr.dgid) {
        return done;
    }
    let ep = endpoint_of(ud.remote_qpn);
    if ep == dev.ep() {
        if let Some(t) = dev.qps.get(ud.remote_qpn) {
            if t.qp_type == QpType::Ud && ud_accepts(t.rec, ud.remote_qkey) {
                ud_deliver(qp, wqe, data, &LocalTarget::of(t));
            }
        }
    } else if let Some(peer) = dev.reg.as_ref().and_then(|r| r.peer(ep).ok()) {
        let qpn = ud.remote_qpn;
        let rec = peer.tables().qp(qpn);
        if super::route::is_qp(rec, qpn, QpType::Ud) && ud_accepts(rec, ud.remote_qkey) {
            ud_deliver(qp, wqe, data, &PeerTarget::of_qp(peer.clone(), qpn));
        }
    }
    done
}

/// Whether a UD responder takes a message with `qkey`.
fn ud_accepts(rec: &crate::shm::tables::QpRecord, qkey: u32) -> bool {
    super::route::accepts_requests(rec.state()) && rec.qkey.load(Ordering::Acquire) == qkey
}

/// Delivers one UD message to `t`, which accepts it.
fn ud_deliver<T: Target>(qp: &QpInner, wqe: &SendWqe, data: &Gathered<'_>, t: &T) {
    let Some(ud) = &wqe.ud else { return };
    let Some(grh_attr) = ud.ah.attr.grh else { return };
    let dev = qp.pd.ctx.dev;
    t.note_inbound();
    let sgid = dev.gids.get(usize::from(grh_attr.sgid_index)).map(|e| e.gid).unwrap_or_default();
    let len = wqe.total_len as usize;
    let Some(rwqe) = t.take_recv() else { return };
    let need = (GRH_LEN + len) as u64;
    if rwqe.capacity() < need {
        // rxe: with an SRQ the receive completes in error; without one the message is
        // dropped — here the receive was already taken, so complete it in error.
        let _ = t.complete(Cqe::error(rwqe.wr_id, t.qpn(), WcStatus::RemInvReqErr, vendor_err::RECV_TOO_SMALL));
        return;
    }
    let keys = t.keys();
    let placed = mr::pin_sges(&keys, t.pd(), rwqe.sges(), Access::LOCAL_WRITE, need).map_err(|_| ()).and_then(|dst| {
        let header = grh::build(
            &sgid,
            &grh_attr.dgid,
            grh_attr.traffic_class,
            grh_attr.hop_limit,
            grh_attr.flow_label,
            len,
            wqe.opcode().has_imm(),
        );
        copy_message(&dst, 0, Source::Bytes(&header)).map_err(|_| ())?;
        copy_message(&dst, GRH_LEN, data.source()).map_err(|_| ())?;
        Ok(())
    });
    if placed.is_err() {
        let _ = t.complete(Cqe::error(rwqe.wr_id, t.qpn(), WcStatus::LocQpOpErr, vendor_err::RECV_WQE_BAD));
        t.enter_error(None);
        return;
    }
    let mut cqe = recv_cqe(t, &rwqe, WcOpcode::Recv, need as u32, wqe);
    cqe.src_qp = qp.qpn;
    cqe.wc_flags |= WcFlags::GRH.bits() as u8;
    cqe.sl = ud.ah.attr.sl;
    let _ = deliver_recv(t, cqe);
}
