//! The in-process transport: the requester runs the responder of the target QP directly
//! and completes at once.
//!
//! Read before editing: rocev2-wire.md §3.2 (requester), §3.3 (responder: the order of
//! its checks is GET_REQ → CHK_OP_VALID → CHK_RESOURCE → CHK_LENGTH → CHK_RKEY →
//! EXECUTE, kept here), §3.4 (completer), §3.5 (UC, UD), §4 (statuses), §5.3 (UD
//! GRH).
//!
//! One call executes one whole message. There are no packets, so there is nothing to
//! reorder or lose: PSNs are not needed, and a "lost" message is one the responder
//! dropped (wrong state, unknown QP, wrong addresses) — the requester then retries on
//! its ACK timer like rxe would.

use std::sync::Arc;

use rverbs_proto::rnr::rnr_delay;
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpState, QpType, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode};
use rverbs_proto::violation::Violation;

use crate::mcast::{is_multicast, MULTICAST_QPN};
use crate::mem::AtomicOp;
use crate::mr::{self, copy_message, Fault, KeyTarget, PinList, Source};
use crate::qp::wr::{FlushPlacement, FlushSelectivity};
use crate::qp::rq::RecvWqe;
use crate::qp::sq::{ReqView, SendWqe};
use crate::cq::CqInner;
use crate::pd::PdInner;
use crate::qp::QpInner;
use crate::srq::SrqInner;
use crate::transport::grh::{self, GRH_LEN};
use crate::transport::Exec;
use crate::wc::Cqe;
use crate::mr::Sge;

/// The data a request carries, gathered and checked on the requester side.
enum Gathered<'a> {
    Inline(&'a [u8]),
    Pins(PinList),
}

impl Gathered<'_> {
    fn source(&self) -> Source<'_> {
        match self {
            Gathered::Inline(b) => Source::Bytes(b),
            Gathered::Pins(l) => Source::Pins(l),
        }
    }
}

/// The responder a request reaches: the target QP (state, access rights, errors), the
/// PD its memory checks use, where its receives come from and where they complete. For
/// RC/UC/UD all of it is the target QP's own; for XRC the PD, the receives and the CQ are
/// those of the XRC SRQ the request names (notes §17.4).
struct Resp {
    qp: Arc<QpInner>,
    pd: Arc<PdInner>,
    srq: Option<Arc<SrqInner>>,
    cq: Arc<CqInner>,
}

impl Resp {
    fn of(qp: Arc<QpInner>) -> Resp {
        Resp { pd: qp.pd.clone(), srq: qp.srq.clone(), cq: qp.recv_cq.clone(), qp }
    }
}

pub(crate) fn execute(
    qp: &Arc<QpInner>,
    req: &ReqView,
    wqe: &SendWqe,
    sges: &[Sge],
    inline: &[u8],
) -> Exec {
    let dev = qp.pd.ctx.dev;
    let op = wqe.opcode();
    match op {
        WrOpcode::BindMw => return super::local::bind_mw(qp, wqe),
        WrOpcode::LocalInv => return super::local::local_inv(qp, wqe),
        _ => {}
    }

    // Requester: gather the outgoing data (local SGE faults are LOC_PROT_ERR,
    // rocev2-wire.md §4; rxe reports LOC_QP_OP_ERR for them — see ARCHITECTURE.md).
    let carries_data = matches!(
        op,
        WrOpcode::Send
            | WrOpcode::SendWithImm
            | WrOpcode::SendWithInv
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
    );
    let gathered = if !carries_data {
        Gathered::Inline(&[])
    } else if wqe.inline_len.is_some() {
        Gathered::Inline(inline)
    } else {
        match mr::pin_sges(dev, &qp.pd, sges, Access::empty(), wqe.total_len) {
            Ok(l) => Gathered::Pins(l),
            Err(f) => return local_fault(qp, wqe, f),
        }
    };

    // Read/atomic credit (rocev2-wire.md §3.2 step 5): with max_rd_atomic 0 the request
    // can never be issued.
    let needs_credit = op.is_read_or_atomic() || op == WrOpcode::AtomicWrite;
    if needs_credit && req.max_rd_atomic == 0 && qp.qp_type.is_reliable() {
        return Exec::Stall;
    }

    match qp.qp_type {
        QpType::Ud => ud_send(qp, wqe, &gathered),
        QpType::Rc | QpType::Uc | QpType::XrcSend => {
            let Some(target) = route_connected(qp, req, wqe) else {
                return unanswered(qp, wqe);
            };
            target.qp.note_inbound();
            connected(qp, wqe, sges, &gathered, &target)
        }
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

/// Whether a responder in `state` accepts requests (rxe drops requests for QPs below
/// RTR, and in ERR).
fn accepts_requests(state: QpState) -> bool {
    matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
}

/// Finds the responder of an RC/UC/XRC request: the destination GID must be this
/// device's, the QP must exist with the matching transport (XRC initiators reach XRC
/// targets) and accept requests, and — as rxe checks the packet's IP addresses — its path
/// must point back at our source GID. An XRC request must name an XRC SRQ of the
/// target's domain; otherwise it is dropped (the unmerged rxe XRC series; IBTA A14
/// unverified).
fn route_connected(qp: &QpInner, req: &ReqView, wqe: &SendWqe) -> Option<Resp> {
    let dev = qp.pd.ctx.dev;
    if !dev.owns_gid(&req.dgid) {
        return None;
    }
    let t = dev.qps.get(req.dest_qpn)?;
    let peer_type = if qp.qp_type == QpType::XrcSend { QpType::XrcRecv } else { qp.qp_type };
    if t.qp_type != peer_type || !accepts_requests(t.state()) || t.resp.dgid() != req.sgid {
        return None;
    }
    if qp.qp_type != QpType::XrcSend {
        return Some(Resp::of(t));
    }
    let srq = dev.srqs.get(wqe.xrc_srqn)?;
    let (xrcd, cq) = srq.xrc.clone()?;
    if !t.xrcd.as_ref().is_some_and(|x| Arc::ptr_eq(x, &xrcd)) {
        return None;
    }
    Some(Resp { pd: srq.pd.clone(), srq: Some(srq), cq, qp: t })
}

/// Takes a receive for the responder, from its SRQ or the target QP's RQ.
fn take_recv(t: &Resp) -> Option<RecvWqe> {
    match &t.srq {
        Some(srq) => srq.take(),
        None => t.qp.rq.as_ref()?.take().map(|(w, _)| w),
    }
}

/// A successful receive completion at the target.
fn recv_cqe(t: &Resp, rwqe: &RecvWqe, opcode: WcOpcode, byte_len: u32, wqe: &SendWqe) -> Cqe {
    let mut c = Cqe::success(rwqe.wr_id, t.qp.qpn, opcode, byte_len);
    if wqe.opcode().has_imm() {
        c.imm = wqe.imm;
        c.wc_flags |= WcFlags::WITH_IMM.bits() as u8;
    }
    c.solicited = wqe.flags.contains(SendFlags::SOLICITED);
    c
}

/// Writes a receive completion at the target; an overrun of its CQ moves it to ERR
/// with QP_FATAL and the message counts as unanswered (rxe: no ACK is sent).
fn deliver_recv(t: &Resp, cqe: Cqe) -> Result<(), ()> {
    if t.cq.push(cqe).is_err() {
        t.qp.enter_error(Some(EventType::QpFatal));
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
    /// The responder could not complete (its CQ overran).
    NoAck,
}

/// RC and UC: run the responder, then complete at the requester.
fn connected(
    qp: &Arc<QpInner>,
    wqe: &SendWqe,
    sges: &[Sge],
    gathered: &Gathered<'_>,
    target: &Resp,
) -> Exec {
    let t = target;
    let op = wqe.opcode();
    let reliable = qp.qp_type.is_reliable();
    let response = match op {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => {
            respond_send(t, wqe, gathered)
        }
        WrOpcode::AtomicWrite => return respond_atomic_write(qp, t, wqe),
        WrOpcode::Flush => return respond_flush(qp, t, wqe),
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => respond_write(t, wqe, gathered),
        WrOpcode::RdmaRead => return respond_read(qp, t, wqe, sges),
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            return respond_atomic(qp, t, wqe, sges)
        }
        _ => Response::Violation(Violation::InvalidOpcode, None),
    };
    match response {
        Response::Ack => Exec::Done(sent(qp, wqe)),
        Response::Rnr if reliable => {
            Exec::Rnr(rnr_delay(t.qp.resp.min_rnr_timer.load(std::sync::atomic::Ordering::Acquire)))
        }
        Response::Rnr => Exec::Done(sent(qp, wqe)),
        Response::NoAck => unanswered(qp, wqe),
        Response::Violation(v, rwqe) => violation(qp, t, wqe, v, rwqe),
    }
}

/// Applies a responder violation: completes a consumed receive with its error, moves
/// the responder to ERR for class A/C errors, and completes the requester with the
/// NAK's status (RC) or as sent (UC, which gets no NAK).
fn violation(qp: &QpInner, t: &Resp, wqe: &SendWqe, v: Violation, rwqe: Option<RecvWqe>) -> Exec {
    let nak_status = v.nak().requester_status().unwrap_or(WcStatus::RemOpErr);
    let held = rwqe.is_some();
    if let Some(r) = rwqe {
        let status = v.responder_status().unwrap_or(nak_status);
        let _ = t.cq.push(Cqe::error(r.wr_id, t.qp.qpn, status, v.vendor_err()));
    }
    if qp.qp_type.is_reliable() {
        if v.responder_fatal() {
            // IBTA: a responder error no receive completion reports is raised as an
            // asynchronous event (rxe raises none; hardware does).
            let event = (!held).then_some(match v {
                Violation::RkeyUnknown
                | Violation::RkeyWrongPd
                | Violation::RkeyBounds
                | Violation::RkeyAccess => EventType::QpAccessErr,
                _ => EventType::QpReqErr,
            });
            t.qp.enter_error(event);
        }
        Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, nak_status, v.vendor_err()))
    } else {
        if held && v.responder_fatal() {
            t.qp.enter_error(None);
        }
        Exec::Done(sent(qp, wqe))
    }
}

fn respond_send(t: &Resp, wqe: &SendWqe, data: &Gathered<'_>) -> Response {
    let Some(rwqe) = take_recv(t) else { return Response::Rnr };
    let len = wqe.total_len;
    if rwqe.capacity() < len {
        return Response::Violation(Violation::ReceiveTooSmall, Some(rwqe));
    }
    let dev = t.pd.ctx.dev;
    let dst = match mr::pin_sges(dev, &t.pd, rwqe.sges(), Access::LOCAL_WRITE, len) {
        Ok(d) => d,
        Err(_) => return Response::Violation(Violation::RecvWqeMalformed, Some(rwqe)),
    };
    copy_message(&dst, 0, data.source());
    let mut cqe = recv_cqe(t, &rwqe, WcOpcode::Recv, len as u32, wqe);
    if wqe.opcode() == WrOpcode::SendWithInv {
        if !invalidate(t, wqe.imm) {
            // rxe "class J": the receive completes in error and the responder enters ERR,
            // but no NAK is sent, so the requester completes successfully.
            let _ = t.cq.push(Cqe::error(
                rwqe.wr_id,
                t.qp.qpn,
                WcStatus::RemInvReqErr,
                vendor_err::REMOTE_INVALIDATE,
            ));
            t.qp.enter_error(None);
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

/// Invalidates `rkey` at responder `t` (SEND_WITH_INV): only a valid type 2 memory
/// window of the responder's PD can be (rxe: user memory regions cannot).
fn invalidate(t: &Resp, rkey: u32) -> bool {
    match t.pd.ctx.dev.keys.get(rkey) {
        Some(KeyTarget::Mw(w)) => w.upgrade().is_some_and(|mw| mw.invalidate(rkey, &t.pd)),
        _ => false,
    }
}

fn respond_write(t: &Resp, wqe: &SendWqe, data: &Gathered<'_>) -> Response {
    if !t.qp.resp.access().contains(Access::REMOTE_WRITE) {
        return Response::Violation(Violation::QpAccessDenied, None);
    }
    let imm = wqe.opcode() == WrOpcode::RdmaWriteWithImm;
    let rwqe = if imm {
        match take_recv(t) {
            Some(r) => Some(r),
            None => return Response::Rnr,
        }
    } else {
        None
    };
    let len = wqe.total_len;
    if len > 0 {
        let dev = t.pd.ctx.dev;
        match mr::pin_remote(dev, &t.pd, t.qp.qpn, wqe.rkey, wqe.remote_addr, len, Access::REMOTE_WRITE) {
            Ok(p) => {
                copy_message(&PinList::one(p), 0, data.source());
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

fn respond_read(qp: &Arc<QpInner>, t: &Resp, wqe: &SendWqe, sges: &[Sge]) -> Exec {
    if !t.qp.resp.access().contains(Access::REMOTE_READ) {
        return violation(qp, t, wqe, Violation::QpAccessDenied, None);
    }
    if t.qp.resp.max_dest_rd_atomic.load(std::sync::atomic::Ordering::Acquire) == 0 {
        return violation(qp, t, wqe, Violation::NoRdAtomicResources, None);
    }
    let len = wqe.total_len;
    let dev = qp.pd.ctx.dev;
    let remote = if len > 0 {
        match mr::pin_remote(dev, &t.pd, t.qp.qpn, wqe.rkey, wqe.remote_addr, len, Access::REMOTE_READ) {
            Ok(p) => Some(p),
            Err(f) => return violation(qp, t, wqe, f.remote(), None),
        }
    } else {
        None
    };
    // Completer: place the response (needs LOCAL_WRITE; a fault is LOC_PROT_ERR).
    let local = match mr::pin_sges(dev, &qp.pd, sges, Access::LOCAL_WRITE, len) {
        Ok(l) => l,
        Err(f) => return local_fault(qp, wqe, f),
    };
    if let Some(r) = remote {
        copy_message(&local, 0, Source::Pins(&PinList::one(r)));
    }
    Exec::Done(sent(qp, wqe))
}

fn respond_atomic(qp: &Arc<QpInner>, t: &Resp, wqe: &SendWqe, sges: &[Sge]) -> Exec {
    if !t.qp.resp.access().contains(Access::REMOTE_ATOMIC) {
        return violation(qp, t, wqe, Violation::QpAccessDenied, None);
    }
    if t.qp.resp.max_dest_rd_atomic.load(std::sync::atomic::Ordering::Acquire) == 0 {
        return violation(qp, t, wqe, Violation::NoRdAtomicResources, None);
    }
    if wqe.remote_addr % 8 != 0 {
        return violation(qp, t, wqe, Violation::MisalignedAtomic, None);
    }
    let dev = qp.pd.ctx.dev;
    let target = match mr::pin_remote(dev, &t.pd, t.qp.qpn, wqe.rkey, wqe.remote_addr, 8, Access::REMOTE_ATOMIC) {
        Ok(p) => p,
        Err(f) => return violation(qp, t, wqe, f.remote(), None),
    };
    if target.ptr % 8 != 0 {
        return violation(qp, t, wqe, Violation::MisalignedAtomic, None);
    }
    let op = match wqe.opcode() {
        WrOpcode::AtomicCmpAndSwp => AtomicOp::CompareSwap { compare: wqe.compare_add, swap: wqe.swap },
        _ => AtomicOp::FetchAdd(wqe.compare_add),
    };
    let original = mr::atomic(&target, op);
    drop(target);
    // Completer: the original value goes to the local SGE (host byte order).
    let local = match mr::pin_sges(dev, &qp.pd, sges, Access::LOCAL_WRITE, 8) {
        Ok(l) => l,
        Err(f) => return local_fault(qp, wqe, f),
    };
    copy_message(&local, 0, Source::Bytes(&original.to_ne_bytes()));
    Exec::Done(sent(qp, wqe))
}

/// ATOMIC_WRITE (IBTA A19; notes §14): needs REMOTE_WRITE on the responder QP and the
/// region, a read/atomic resource, 8 aligned bytes; stores the 8 bytes verbatim.
fn respond_atomic_write(qp: &Arc<QpInner>, t: &Resp, wqe: &SendWqe) -> Exec {
    if !t.qp.resp.access().contains(Access::REMOTE_WRITE) {
        return violation(qp, t, wqe, Violation::QpAccessDenied, None);
    }
    if t.qp.resp.max_dest_rd_atomic.load(std::sync::atomic::Ordering::Acquire) == 0 {
        return violation(qp, t, wqe, Violation::NoRdAtomicResources, None);
    }
    let dev = qp.pd.ctx.dev;
    let target =
        match mr::pin_remote(dev, &t.pd, t.qp.qpn, wqe.rkey, wqe.remote_addr, 8, Access::REMOTE_WRITE) {
            Ok(p) => p,
            Err(f) => return violation(qp, t, wqe, f.remote(), None),
        };
    if wqe.remote_addr % 8 != 0 || target.ptr % 8 != 0 {
        return violation(qp, t, wqe, Violation::MisalignedAtomic, None);
    }
    mr::atomic(&target, AtomicOp::Write(wqe.swap));
    Exec::Done(sent(qp, wqe))
}

/// FLUSH (IBTA A19; notes §13): the responder QP must allow the placement type, the
/// region must grant it; a RANGE flush checks the range, a whole-MR flush only the key.
/// Global visibility is a full memory barrier here.
fn respond_flush(qp: &Arc<QpInner>, t: &Resp, wqe: &SendWqe) -> Exec {
    let f = wqe.flush.unwrap_or_default();
    let mut need = Access::empty();
    if f.placement.contains(FlushPlacement::GLOBAL) {
        need |= Access::FLUSH_GLOBAL;
    }
    if f.placement.contains(FlushPlacement::PERSISTENT) {
        need |= Access::FLUSH_PERSISTENT;
    }
    if !t.qp.resp.access().contains(need) {
        return violation(qp, t, wqe, Violation::QpAccessDenied, None);
    }
    let dev = qp.pd.ctx.dev;
    let (addr, len) = match f.selectivity {
        FlushSelectivity::Range => (wqe.remote_addr, u64::from(f.len)),
        FlushSelectivity::WholeMr => (u64::MAX, 0),
    };
    let pinned = if f.selectivity == FlushSelectivity::WholeMr {
        mr::pin_remote_key(dev, &t.pd, t.qp.qpn, wqe.rkey, need)
    } else {
        mr::pin_remote(dev, &t.pd, t.qp.qpn, wqe.rkey, addr, len, need)
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
/// member of a multicast group (remote QPN 0xFFFFFF and a multicast destination GID).
/// The requester always completes as sent (rocev2-wire.md §3.5): a message above the path
/// MTU is not sent at all (C10-93.1.1); an unknown or not-ready QP, a Q_Key mismatch or a
/// missing receive drop it silently.
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
            ud_deliver(qp, wqe, data, t);
        }
        return done;
    }
    if !dev.owns_gid(&grh_attr.dgid) {
        return done;
    }
    if let Some(t) = dev.qps.get(ud.remote_qpn) {
        ud_deliver(qp, wqe, data, t);
    }
    done
}

/// Delivers one UD message to `t`, if it accepts it.
fn ud_deliver(qp: &QpInner, wqe: &SendWqe, data: &Gathered<'_>, t: Arc<QpInner>) {
    let Some(ud) = &wqe.ud else { return };
    let Some(grh_attr) = ud.ah.attr.grh else { return };
    let dev = qp.pd.ctx.dev;
    if t.qp_type != QpType::Ud || !accepts_requests(t.state()) {
        return;
    }
    if ud.remote_qkey != t.resp.qkey.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    t.note_inbound();
    let t = Resp::of(t);
    let sgid = dev
        .gids
        .get(usize::from(grh_attr.sgid_index))
        .map(|e| e.gid)
        .unwrap_or_default();
    let len = wqe.total_len as usize;
    let Some(rwqe) = take_recv(&t) else { return };
    let need = (GRH_LEN + len) as u64;
    if rwqe.capacity() < need {
        // rxe: with an SRQ the receive completes in error; without one the message is
        // dropped — here the receive was already taken, so complete it in error.
        let _ = t.cq.push(Cqe::error(
            rwqe.wr_id,
            t.qp.qpn,
            WcStatus::RemInvReqErr,
            vendor_err::RECV_TOO_SMALL,
        ));
        return;
    }
    let dst = match mr::pin_sges(dev, &t.pd, rwqe.sges(), Access::LOCAL_WRITE, need) {
        Ok(d) => d,
        Err(_) => {
            let _ = t.cq.push(Cqe::error(
                rwqe.wr_id,
                t.qp.qpn,
                WcStatus::LocQpOpErr,
                vendor_err::RECV_WQE_BAD,
            ));
            t.qp.enter_error(None);
            return;
        }
    };
    let header = grh::build(
        &sgid,
        &grh_attr.dgid,
        grh_attr.traffic_class,
        grh_attr.hop_limit,
        grh_attr.flow_label,
        len,
        wqe.opcode().has_imm(),
    );
    copy_message(&dst, 0, Source::Bytes(&header));
    copy_message(&dst, GRH_LEN, data.source());
    let mut cqe = recv_cqe(&t, &rwqe, WcOpcode::Recv, need as u32, wqe);
    cqe.src_qp = qp.qpn;
    cqe.wc_flags |= WcFlags::GRH.bits() as u8;
    cqe.sl = ud.ah.attr.sl;
    let _ = deliver_recv(&t, cqe);
}
