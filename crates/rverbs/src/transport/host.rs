//! The same-host link: the requester's request goes straight to the responder of the
//! target QP — in this process, or in a peer process's shared state ([`Target`]) — and
//! the responder's answer straight back, inside `ibv_post_send`.
//!
//! Read before editing: `crate::qp::send` (the one requester this link serves),
//! rxe `rxe_resp.c` (responder: the order of its checks is GET_REQ → CHK_OP_VALID →
//! CHK_RESOURCE → CHK_LENGTH → CHK_RKEY → EXECUTE, kept by the core's machine), the
//! statuses of ibv_poll_cq(3), and `transport::grh` (UD GRH).
//!
//! The requester runs with an MTU of `rverbs_proto::rc::UNSEGMENTED_MTU`: one request
//! carries a whole message and one response answers it. Nothing is reordered or lost on
//! the way; a request nobody answers (wrong state, unknown QP, wrong addresses, a dead
//! peer) is simply not answered, and the requester retries on its ACK timer as it would
//! on the network. The connection's responder machine lives in the send queue's link
//! (`super::route`), started at the requester's oldest unacknowledged PSN.

use std::sync::Arc;
use std::time::Instant;

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{self, Mode, Placed, RecvCompletion, Responder, ResponderConfig, ResponderState, UNSEGMENTED_MTU};
use rverbs_proto::verbs::{Access, QpType, WcStatus};
use rverbs_proto::violation::Violation;
use rverbs_proto::wire;
use rverbs_proto::wire::roce::Packet as RocePacket;

use super::respond::Responding;
use super::deliver::{complete_receive, count_delivery, deliver_recv, deliver_recv_counting, deliver_ud, of_receive, place_message_in, recv_cqe, responder_event, tm_completion, ud_accepts, ud_target, UdMessage, UdTarget};
use super::rendezvous::Rendezvous;
use super::respond::Head;
use crate::rings::tm_recv::TmRecv;
use super::route::{connected_mode, responder_config, Route, Routed};
use super::udp::Net;
use super::target::{LocalTarget, PeerTarget, Target};
use crate::engine::Engine;
use crate::mcast::{is_multicast, Groups, MULTICAST_QPN};
use crate::shm::cma::CmaError;
use crate::mr::{self, KeyMemo, KeySpace, PinList, Source};
use crate::qp::device::{Answers, Express, ExpressData, ExpressOp, Expressed, PacketBytes, ResponseBytes, Tx};
use crate::qp::sq::ReqView;
use crate::rings::recv_ring::RecvWqe;
use crate::qp::QpInner;
use crate::transport::grh;
use crate::rings::wc::Cqe;
use crate::shm::counters::{Counter, CounterLane};

/// The data a request carries, gathered and checked on the requester side.
enum Gathered<'g, 'a> {
    Inline(&'g [u8]),
    Pins(&'g PinList<'a>),
}

impl<'a> Gathered<'_, 'a> {
    fn source(&self) -> Source<'_, 'a> {
        match self {
            Gathered::Inline(b) => Source::Bytes(b),
            Gathered::Pins(l) => Source::Pins(l.as_slice()),
        }
    }
}

/// The same-host link's state for one send queue: the responder of its connection with
/// the core's machine for it (kept until `modify_qp` changes the path or a new requester
/// starts), one UD machine reconfigured per destination, and the device state it reaches.
pub(crate) struct HostLink {
    /// The engine's state: the live objects requests are routed to.
    engine: &'static Engine,
    /// The network transport's sockets (a UD send to another host or a group leaves by
    /// them), if the device has any.
    net: Option<&'static Net>,
    /// The device's multicast groups (UD sends to a group).
    mcast: &'static Groups,
    route: Option<Route>,
    /// The express lane's memos of the last local key (the scatter list's), remote key
    /// and receive key (the target's, when its QP is of this process) it checked
    /// ([`KeyMemo`]).
    memos: [KeyMemo; 3],
    ud: Option<Responder>,
    /// The instant handed to the responder machines, which read no clock themselves and
    /// keep no timer on the responder side.
    epoch: Instant,
    /// The express lane's lane of the endpoint's counters (docs/device.md, "Where they
    /// live"), taken at its first request: the send queue's lock makes it one writer.
    counts: Option<CounterLane>,
}

impl HostLink {
    pub(crate) fn new(engine: &'static Engine, net: Option<&'static Net>, mcast: &'static Groups) -> HostLink {
        HostLink { engine, net, mcast, route: None, memos: Default::default(), ud: None, epoch: Instant::now(), counts: None }
    }

    /// Forgets the responder (`modify_qp` changed the path, or a new requester starts).
    pub(crate) fn forget_route(&mut self) {
        self.route = None;
    }
}

/// The same-host link's [`crate::qp::device::SendPath::transmit`]: gathers the request's
/// bytes, then hands it to its responder — the connection's (RC, UC, XRC: [`connected`])
/// or each UD destination's ([`ud_send`]) — and the responder's answer straight back to
/// the requester. Nobody found: no answer.
pub(crate) fn transmit(path: &mut HostLink, qp: &Arc<QpInner>, req: &ReqView, tx: Tx<'_>, answers: &mut dyn Answers) -> Result<(), u32> {
    let wqe = tx.wqe;
    let own = KeySpace::local(qp.endpoint);
    let mut pins = PinList::new();
    let gathered = if !wqe.opcode().carries_payload() {
        Gathered::Inline(&[])
    } else if wqe.inline_len.is_some() {
        Gathered::Inline(tx.inline)
    } else {
        // Pinned in place: the list is large and moving it costs a memcpy per request.
        match mr::pin_sges_into(&own, qp.pd.id, tx.sges, Access::empty(), wqe.total_len, &mut pins) {
            Ok(()) => Gathered::Pins(&pins),
            Err(f) => return Err(f.local_vendor_err()),
        }
    };
    if qp.qp_type == QpType::Ud {
        ud_send(qp, &tx, &gathered, path);
        return Ok(());
    }
    let now = path.epoch;
    let Some(Route { to, responder, .. }) = super::route::connected(path.engine, qp, req, wqe, tx.comp_psn, &mut path.route) else {
        if let Some(t) = super::route::xrc_refusal(path.engine, qp, req) {
            xrc_refused(&t, tx.request, answers);
        }
        return Ok(());
    };
    match to {
        Routed::Local(t) => {
            t.note_inbound();
            connected(qp, &tx, &gathered, t, responder, now, answers);
        }
        Routed::Peer(t) => {
            t.note_inbound();
            connected(qp, &tx, &gathered, t, responder, now, answers);
        }
        Routed::Split(t) => {
            t.note_inbound();
            connected(qp, &tx, &gathered, t, responder, now, answers);
        }
    }
    Ok(())
}

/// The same-host link's express lane ([`crate::qp::device::SendPath::express`];
/// docs/queue-pairs.md, "The express lane"): an RDMA WRITE, an RDMA READ or a SEND to the
/// connection's responder when it is a QP of this process or of another process of the
/// host (not an XRC split target), executed and acknowledged without the request and its
/// response being built. Every check of the queued way is made before anything moves: the
/// route still answers, the responder machine accepts the request at its PSN (with the
/// QP's current attributes; a READ also needs a responder resource), the requester's
/// scatter list gathers (a READ's takes the response: LOCAL_WRITE); a WRITE's R_Key grants
/// REMOTE_WRITE on the range, a READ's REMOTE_READ; a SEND's receive (the QP's own receive
/// queue) holds it, its scatter list takes it, and the copy is done before the receive is
/// taken. A failure of any of them, or of a WRITE's or READ's copy (which the queued way
/// repeats: the same bytes again), leaves the request to the queued way, which decides its
/// outcome. One thing moves before `false`: a receive CQ that overruns once the SEND is
/// placed ends the responder (QP_FATAL), as in the queued way, whose retries then find
/// nobody to answer them.
pub(crate) fn express(path: &mut HostLink, qp: &Arc<QpInner>, req: &ReqView, w: &Express<'_>) -> Expressed {
    if qp.qp_type != QpType::Rc {
        return Expressed::No;
    }
    let counts = path.counts.get_or_insert_with(|| qp.endpoint.counters.lane());
    let memos = &path.memos;
    match path.route.as_mut() {
        Some(Route { to: Routed::Local(t), responder, seen }) => {
            if t.qp.is_destroyed() {
                return Expressed::No;
            }
            // docs/shared-state.md, "A lane per connection": while this process has not
            // written the target's responder view since the lane last checked it, its
            // path and attributes are those checked; the state and the port, which
            // others write, are read every time.
            let writes = t.qp.view_writes();
            if *seen == Some(writes) {
                if !super::route::takes_requests(t.qp.rec) {
                    return Expressed::No;
                }
            } else {
                if !super::route::answers(t.qp.rec, qp.qpn, req) {
                    return Expressed::No;
                }
                refresh(responder, responder_config(Mode::Rc, t.rec(), UNSEGMENTED_MTU));
                *seen = Some(writes);
            }
            express_to(qp, t, responder, memos, counts, w)
        }
        Some(Route { to: Routed::Peer(t), responder, .. }) => {
            if !(t.still_valid() && super::route::answers(t.rec(), qp.qpn, req)) {
                return Expressed::No;
            }
            refresh(responder, responder_config(Mode::Rc, t.rec(), UNSEGMENTED_MTU));
            express_to(qp, t, responder, memos, counts, w)
        }
        _ => Expressed::No,
    }
}

/// Gives `responder` the target QP's current attributes `cfg` (a modify may have changed
/// them since the last request), keeping its expected PSN. The usual case, nothing
/// changed, is the compare here, without the call.
#[inline]
fn refresh(responder: &mut Responder, mut cfg: ResponderConfig) {
    cfg.rq_psn = responder.config().rq_psn;
    if *responder.config() != cfg {
        responder.reconfigure(cfg);
    }
}

/// [`express`] once the route is known to answer and `responder` has the target's
/// current attributes; what it delivers is counted in `counts`.
fn express_to<T: Target>(qp: &QpInner, t: &T, responder: &mut Responder, memos: &[KeyMemo; 3], counts: &mut CounterLane, w: &Express<'_>) -> Expressed {
    let accepted = match w.op {
        ExpressOp::Write { .. } => responder.express_write_ok(w.psn, w.len),
        ExpressOp::Send { .. } => responder.express_send_ok(w.psn, w.len),
        ExpressOp::WriteImm { .. } => responder.express_write_imm_ok(w.psn, w.len),
        ExpressOp::Read { .. } => responder.express_read_ok(w.psn, w.len),
        ExpressOp::Atomic { va, .. } => responder.express_atomic_ok(w.psn, va),
    };
    if !accepted {
        return Expressed::No;
    }
    let own = KeySpace::local(qp.endpoint).remembering(&memos[0]);
    // A READ's or an atomic's scatter list is written by its response: LOCAL_WRITE, as
    // the queued way pins it.
    let need = match w.op {
        ExpressOp::Read { .. } | ExpressOp::Atomic { .. } => Access::LOCAL_WRITE,
        _ => Access::empty(),
    };
    let mut pins = PinList::new();
    // Each pin is borrowed where the key space wrote it, never moved: a `Pinned` moved is
    // copied 16 bytes at a time over fields written one by one, loads the CPU cannot
    // forward from its store buffer (as `CqeWords`).
    let one;
    let src = match w.data {
        ExpressData::Inline(b) => Source::Bytes(b),
        // One SGE that is not empty, the usual case: pinned without a list, as
        // `pin_sges_into` pins it (`min(length, message)` bytes from its address).
        ExpressData::Sges([s]) if s.length != 0 && w.len != 0 => {
            let via = mr::Via { key: s.lkey, pd: qp.pd.id, used: mr::KeyUse::Local, need, va: s.addr };
            one = own.pin_one(via, u64::from(s.length.min(w.len)));
            let Ok(p) = &one else { return Expressed::No };
            Source::Pins(std::slice::from_ref(p))
        }
        ExpressData::Sges(s) => {
            if mr::pin_sges_into(&own, qp.pd.id, s, need, u64::from(w.len), &mut pins).is_err() {
                return Expressed::No;
            }
            Source::Pins(pins.as_slice())
        }
    };
    let keys = t.keys().remembering(&memos[1]);
    match w.op {
        ExpressOp::Write { rkey, va } => {
            let via = mr::Via { key: rkey, pd: t.pd(), used: mr::KeyUse::Remote { qpn: t.qpn() }, need: Access::REMOTE_WRITE, va };
            let pinned = keys.pin_one(via, u64::from(w.len));
            let Ok(mem) = &pinned else { return Expressed::No };
            t.note_inbound();
            if mr::copy_to(mem, &src).is_err() {
                return Expressed::No;
            }
            responder.express_write_done(w.psn);
        }
        ExpressOp::Read { rkey, va } => {
            let via = mr::Via { key: rkey, pd: t.pd(), used: mr::KeyUse::Remote { qpn: t.qpn() }, need: Access::REMOTE_READ, va };
            let pinned = keys.pin_one(via, u64::from(w.len));
            let Ok(mem) = &pinned else { return Expressed::No };
            t.note_inbound();
            // The response's bytes into the scatter list, in increasing address order
            // (RDMA READ is placed in order). A copy that fails is the queued way's to
            // repeat, as a WRITE's.
            let from = Source::Pins(std::slice::from_ref(mem));
            let copied = match src {
                Source::Pins([d]) => mr::copy_to(d, &from),
                Source::Pins(_) => mr::copy_message(&pins, 0, from),
                Source::Bytes(_) => return Expressed::No,
            };
            if copied.is_err() {
                return Expressed::No;
            }
            responder.express_read_done(w.psn, rkey, va, w.len);
        }
        ExpressOp::Atomic { rkey, va, op } => {
            let via = mr::Via { key: rkey, pd: t.pd(), used: mr::KeyUse::Remote { qpn: t.qpn() }, need: Access::REMOTE_ATOMIC, va };
            let Ok(word) = keys.pin_one(via, 8) else { return Expressed::No };
            if !super::respond::aligned8(&word) || matches!(src, Source::Bytes(_)) {
                return Expressed::No;
            }
            t.note_inbound();
            // A word that faulted was not changed: the queued way tries it again.
            let Ok(original) = mr::atomic(&word, op) else { return Expressed::No };
            responder.express_atomic_done(w.psn, original);
            counts.add(Counter::LocalRequests);
            // Executed: from here on the request is done whatever follows. The original
            // value into the scatter list, as the queued way's completer stores it.
            let stored = match src {
                Source::Pins([d]) => mr::copy_to(d, &Source::Bytes(&original.to_ne_bytes())),
                Source::Pins(_) => mr::copy_message(&pins, 0, Source::Bytes(&original.to_ne_bytes())),
                Source::Bytes(_) => Err(CmaError::Fault),
            };
            return match stored {
                Ok(_) => Expressed::Done,
                Err(_) => Expressed::LocalFault { vendor_err: mr::Fault::Bounds.local_vendor_err() },
            };
        }
        ExpressOp::Send { solicited, imm } => {
            let recv_keys = t.keys().remembering(&memos[2]);
            let mut fits = |r: &RecvWqe| place_message_in(&recv_keys, t.pd(), r, src, u64::from(w.len));
            t.note_inbound();
            let Some((wr_id, taken)) = t.express_recv(&mut fits) else { return Expressed::No };
            let c = responder.express_send_done(w.psn, wr_id, w.len, solicited, imm);
            if !deliver_express(t, responder, counts, &c, taken) {
                return Expressed::No;
            }
            // rxe `rdma_sends`: a SEND completed (the request and the receive are
            // counted here too).
            counts.add(Counter::RdmaSends);
        }
        ExpressOp::WriteImm { rkey, va, imm, solicited } => {
            // The bytes first (none for a zero-length WRITE, whose R_Key is not checked),
            // then the receive it consumes: the copy is made under the receive ring's
            // lock and the receive taken only once it succeeded, so a copy that faults or
            // no receive at all (RNR) leaves everything to the queued way. The receive's
            // own scatter list takes nothing.
            let mem = if w.len > 0 {
                let via = mr::Via { key: rkey, pd: t.pd(), used: mr::KeyUse::Remote { qpn: t.qpn() }, need: Access::REMOTE_WRITE, va };
                let Ok(mem) = keys.pin_one(via, u64::from(w.len)) else { return Expressed::No };
                Some(mem)
            } else {
                None
            };
            let mut fits = |_: &RecvWqe| mem.as_ref().is_none_or(|m| mr::copy_to(m, &src).is_ok());
            t.note_inbound();
            let Some((wr_id, taken)) = t.express_recv(&mut fits) else { return Expressed::No };
            let c = responder.express_write_imm_done(w.psn, wr_id, w.len, solicited, imm);
            if !deliver_express(t, responder, counts, &c, taken) {
                return Expressed::No;
            }
        }
    }
    // docs/device.md, "Hardware counters": a request delivered on this host, without packets.
    counts.add(Counter::LocalRequests);
    Expressed::Done
}

/// The receive completion `c` of an express SEND or WRITE with immediate, published as
/// the queued way's is (`taken`: the consumed count it carries to the queue's owner),
/// its take marked as completing before (`Target::express_completing`) and as completed
/// after (`Target::express_completed`); `false` if the receive CQ overran, which ended
/// the responder (QP_FATAL).
fn deliver_express<T: Target>(t: &T, responder: &mut Responder, counts: &mut CounterLane, c: &RecvCompletion, taken: Option<crate::rings::recv_count::TakenCount>) -> bool {
    let mut cqe = recv_cqe(t, c, None);
    cqe.rq_taken = taken;
    let delivered = deliver_recv_counting(t, cqe, &|at| t.express_completing(at), |c| counts.add(c));
    t.express_completed();
    if delivered.is_err() {
        responder.enter_error();
        return false;
    }
    true
}

/// XRC: the target QP `t` answers the requester, but the SRQ the request names is not an
/// XRC SRQ of its domain. Its responder refuses it as the network's does (the core's
/// `Target::select_xrc_srq`, docs/rocev2-wire.md §1.8): invalid request, the target QP
/// enters ERR raising QP_REQ_ERR (no receive completion reports it), and the requester
/// hears the NAK.
fn xrc_refused(t: &Routed, request: &rc::Request, answers: &mut dyn Answers) {
    let v = Violation::XrcSrqInvalid;
    let event = Some(responder_event(v));
    match t {
        Routed::Local(t) => {
            t.note_inbound();
            t.enter_error(event);
        }
        Routed::Peer(t) => {
            t.note_inbound();
            t.enter_error(event);
        }
        Routed::Split(t) => {
            t.note_inbound();
            t.enter_error(event);
        }
    }
    answers.answer(&nak_for(request.psn, v, 0), &PacketBytes(&[]));
}

/// What a data movement that failed after the checks means (the registered memory was
/// unmapped by its owner, or the peer's process is gone or will not let us in): whether
/// anybody answers. A gone peer answers nothing (the requester retries on its timer);
/// a fault answers with the NAK of `v`.
fn answers_after(e: CmaError) -> bool {
    if e == CmaError::Denied {
        tracing::warn!("cross-memory attach refused by the kernel; the peer cannot be reached");
    }
    e == CmaError::Fault
}

/// A responder error: the target's side of it (docs/rocev2-wire.md §3.3 table). A receive
/// WQE the message held completes in error (`recv`, of the receive `r` the responder
/// holds); RC: a class A/C error ends the target QP, raising the asynchronous event no
/// receive completion reports (IBTA; rxe raises none, hardware does); UC: only a held
/// receive's fatal error ends it. The receive's completion is written before the QP
/// moves, so that a post_recv flushing in ERR cannot put later receives' flushes before
/// it (docs/rxe-differences.md, "A failed send request's QP is in ERR before its
/// completion is seen").
fn refused<T: Target>(qp: &QpInner, t: &T, v: Violation, recv: Option<RecvCompletion>, r: Option<&RecvWqe>) {
    let held = recv.is_some();
    if let Some(c) = recv {
        let _ = complete_receive(t, of_receive(Cqe::error(c.wr_id, t.qpn(), c.status, c.vendor_err), r), r);
    }
    if qp.qp_type.is_reliable() {
        if v.responder_fatal() {
            t.enter_error((!held).then_some(responder_event(v)));
        }
    } else if held && v.responder_fatal() {
        t.enter_error(None);
    }
}

/// The NAK an RC responder answers a violation found after its checks with, keeping the
/// rule for the completion's vendor error.
fn nak_for(psn: Psn, v: Violation, msn: u32) -> rc::Response {
    use rverbs_proto::violation::Nak;
    let code = match v.nak() {
        Nak::InvalidRequest => wire::NakCode::InvalidRequest,
        Nak::RemoteAccess => wire::NakCode::RemoteAccessError,
        _ => wire::NakCode::RemoteOperationalError,
    };
    rc::Response { reason: Some(v), ..rc::Response::ack(psn, wire::Syndrome::Nak(code), msn) }
}

/// RC and UC: the core's responder machine of the connection takes the whole message as
/// one request (docs/rocev2-wire.md §3.3: its checks, in rxe's order, and its plan); this
/// link moves the bytes the plan names, publishes the receive completion, and hands the
/// machine's responses to the requester (§3.4, §4) — a READ's bytes straight from the
/// memory the responder checked.
fn connected<T: Target>(
    qp: &Arc<QpInner>,
    tx: &Tx<'_>,
    gathered: &Gathered<'_, '_>,
    t: &T,
    responder: &mut Responder,
    now: Instant,
    answers: &mut dyn Answers,
) {
    let mode = connected_mode(qp.qp_type);
    let mut cfg = responder_config(mode, t.rec(), UNSEGMENTED_MTU);
    if responder.state() == ResponderState::Error {
        // The route accepted the responder, so its QP left ERR through RESET since the
        // machine failed (rxe "class J" leaves the requester in RTS): a new connection,
        // from the oldest request not yet acknowledged.
        cfg.rq_psn = tx.comp_psn;
        *responder = Responder::new(cfg);
    } else {
        refresh(responder, cfg);
    }
    let request = tx.request;
    let mut at = Responding::new(t);
    if t.tag_matching() && super::respond::starts_send(request.opcode) {
        let len = u64::from(request.payload_len);
        at.head = Some(match gathered {
            Gathered::Inline(b) => Head::of(b, len, true),
            Gathered::Pins(p) => Head::gathered(p, len),
        });
    }
    let delivery = responder.handle_request(now, request, &mut at);
    let counters = qp.endpoint.counters;
    // docs/device.md, "Hardware counters": a request delivered on this host, without packets.
    counters.add(Counter::LocalRequests);
    count_delivery(counters, responder, mode, &delivery);
    // Whether the machine's responses reach the requester: not when nobody answers.
    let mut answered = true;
    if let Some(v) = delivery.violation {
        match at.moved {
            // The data movement inside an atomic failed.
            Some(e) => {
                answered = answers_after(e);
                if answered {
                    refused(qp, t, v, None, None);
                } else {
                    responder.enter_error();
                }
            }
            None => refused(qp, t, v, delivery.recv, at.recv.as_ref()),
        }
    } else if delivery.executed {
        let mut failed = None;
        if let Some(place) = delivery.place {
            if let Err(e) = at.place(place, None, gathered.source()) {
                let (v, recv) = match place {
                    rc::Placement::Recv { wr_id, .. } => (Violation::RecvWqeMalformed, Some(wr_id)),
                    rc::Placement::Memory { .. } => (Violation::RkeyBounds, at.recv.as_ref().map(|r| r.wr_id)),
                };
                answered = answers_after(e);
                if answered {
                    let recv = recv.and_then(|id| Some(RecvCompletion::error(id, v.recv_status()?, v.vendor_err())));
                    refused(qp, t, v, recv, at.recv.as_ref());
                    failed = Some(v);
                }
                responder.enter_error();
            }
        }
        if let Some(c) = delivery.recv.filter(|_| failed.is_none() && answered) {
            let mut cqe = recv_cqe(t, &c, at.recv.as_ref());
            let tm = at.recv.as_ref().and_then(|r| r.tm);
            if let Some(tm) = tm {
                tm_completion(&mut cqe, tm);
            }
            if c.status != WcStatus::Success {
                // SEND_WITH_INV whose invalidation failed (rxe "class J"): the receive
                // completes in error and the responder enters ERR, but no NAK is sent.
                let _ = complete_receive(t, cqe, at.recv.as_ref());
            } else if deliver_recv(t, cqe, at.recv.as_ref(), counters).is_err() {
                responder.enter_error();
                answered = false;
            } else if let (Some(TmRecv::Rndv { offload: true, va, rkey, len, .. }), Some(r)) = (tm, at.recv.as_ref()) {
                super::rendezvous::run(qp, t, r, Rendezvous { va, rkey, len }, at.head.as_ref());
            }
        }
        if failed.is_none() && answered && responder.state() == ResponderState::Error {
            t.enter_error(None);
        }
        if let Some(v) = failed.filter(|_| mode == Mode::Rc) {
            // The machine ACKed what it could not place: the requester hears the NAK.
            let nak = nak_for(request.psn, v, responder.msn());
            answers.answer(&nak, &PacketBytes(&[]));
            return;
        }
    }
    let back = ReadBack { at: &at, failed: std::cell::Cell::new(None) };
    while let Some(r) = responder.poll_transmit(now) {
        if answered {
            answers.answer(&r, &back);
        }
    }
    if let Some(e) = back.failed.get() {
        // A READ whose memory failed while its bytes moved.
        responder.enter_error();
        if e == CmaError::Fault {
            t.enter_error(Some(responder_event(Violation::RkeyBounds)));
        }
    }
}

/// A READ response's bytes on the same host: the memory the responder checked, copied
/// into the requester's list (rxe `rxe_comp.c`); a copy that fails is kept for the link.
struct ReadBack<'a, 't, T: Target> {
    at: &'a Responding<'t, T>,
    failed: std::cell::Cell<Option<CmaError>>,
}

impl<T: Target> ResponseBytes for ReadBack<'_, '_, T> {
    fn copy_into(&self, dst: &PinList<'_>, offset: usize, _len: u32) -> Placed {
        match self.at.read_into(dst, offset) {
            Ok(()) => Placed::Done,
            Err(e) => {
                self.failed.set(Some(e));
                if answers_after(e) {
                    let v = Violation::RkeyBounds;
                    Placed::Failed { status: WcStatus::RemAccessErr, vendor_err: v.vendor_err() }
                } else {
                    Placed::Dropped
                }
            }
        }
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
fn ud_send(qp: &Arc<QpInner>, tx: &Tx<'_>, data: &Gathered<'_, '_>, path: &mut HostLink) {
    let wqe = tx.wqe;
    let Some(ud) = &wqe.ud else { return };
    let dev = path.engine;
    // C10-93.1.1: above the port's active MTU, nothing is sent and no error is reported.
    let mtu = dev.active_mtu.get().bytes();
    if wqe.total_len > u64::from(mtu) {
        return;
    }
    let Some(grh_attr) = ud.ah.attr.grh else { return };
    if ud.remote_qpn == MULTICAST_QPN && is_multicast(&grh_attr.dgid) {
        for t in path.mcast.members(&grh_attr.dgid) {
            if ud_accepts(t.rec, ud.remote_qkey) {
                ud_deliver(tx, data, &LocalTarget::of(t), path);
            }
        }
        for (peer, qpn) in crate::mcast::remote_members(dev, &grh_attr.dgid) {
            let rec = peer.tables().qp(qpn);
            if super::route::is_qp(rec, qpn, QpType::Ud) && ud_accepts(rec, ud.remote_qkey) {
                ud_deliver(tx, data, &PeerTarget::of_qp(dev, peer, qpn), path);
            }
        }
        // And once on the network, for the members of other hosts (`super::mcast_net`).
        if let Some(net) = path.net {
            let sgid = dev.gids.get(usize::from(grh_attr.sgid_index)).map(|e| e.gid).unwrap_or_default();
            let to = Wire::Group { ip: grh_attr.dgid.to_ip(), hop_limit: grh_attr.hop_limit };
            send_ud_packet(qp, tx, data, net, &sgid, to);
        }
        return;
    }
    if !dev.owns_gid(&grh_attr.dgid) {
        // Another host: one RoCEv2 packet over UDP, if the network transport serves the
        // source GID; else it is lost, as rxe's would be without a route.
        let sgid = dev.gids.get(usize::from(grh_attr.sgid_index)).map(|e| e.gid).unwrap_or_default();
        if let Some(net) = path.net {
            send_ud_packet(qp, tx, data, net, &sgid, Wire::Host(grh_attr.dgid.to_ip()));
        }
        return;
    }
    match ud_target(dev, ud.remote_qpn, ud.remote_qkey) {
        Some(UdTarget::Local(t)) => ud_deliver(tx, data, &t, path),
        Some(UdTarget::Peer(t)) => ud_deliver(tx, data, &t, path),
        None => {}
    }
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
fn send_ud_packet(qp: &QpInner, tx: &Tx<'_>, data: &Gathered<'_, '_>, net: &Net, sgid: &crate::gid::Gid, dst: Wire) {
    let Some(ud) = &tx.wqe.ud else { return };
    // A UD QP that talks to another host counts as a network connection from now on (until
    // it is reset), so its polls receive what the network brings (`progress::net_active`).
    if let Ok(mut nr) = qp.net_resp.lock() {
        nr.live.get_or_insert_with(crate::progress::NetConnection::open);
    }
    let repr = tx.request.to_repr(ud.remote_qpn);
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

/// Delivers one UD message to `t`, which accepts it (same host: the GRH is the one the
/// path would have put on the wire).
fn ud_deliver<T: Target>(tx: &Tx<'_>, data: &Gathered<'_, '_>, t: &T, path: &mut HostLink) {
    let wqe = tx.wqe;
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
    let msg = UdMessage { request: tx.request, header: &header, data: data.source(), sl: ud.ah.attr.sl };
    // docs/device.md, "Hardware counters": a request delivered on this host, without packets.
    path.engine.endpoint.counters.add(Counter::LocalRequests);
    deliver_ud(t, &mut path.ud, path.epoch, path.engine.active_mtu.get().bytes(), msg, path.engine.endpoint.counters);
}
