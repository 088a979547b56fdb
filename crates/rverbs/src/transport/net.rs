//! Connected QPs (RC, UC, XRC) whose peer is on another host: the protocol core's
//! machines driven over RoCEv2/UDP (issue 12; the sockets are [`super::udp`]'s).
//!
//! Read before editing: `rverbs_proto::rc` (the machines and their calling order),
//! docs/rocev2-wire.md §1.6 (segmentation), §1.8 (XRC), §3.2–§3.4 (requester, responder,
//! completer), §4 (statuses), and docs/network.md.
//!
//! XRC is RC with an XRCETH (docs/rocev2-wire.md §1.8): an XRC_SEND QP's requester is RC's,
//! each work request handed over with its `xrc_remote_srqn`, so the core emits XRC
//! opcodes and the XRCETH on every request packet; an XRC_RECV QP's responder is RC's
//! with `ResponderConfig::xrc`, and each request is served by the XRC SRQ its XRCETH
//! names ([`super::route::xrc_target`]: an SRQ of the QP's domain, in this process or in
//! another of the host), whose receives, PD and CQ it uses; a request naming no such SRQ
//! is NAKed invalid request by the core.
//!
//! Requester: the send queue hands its work requests, oldest first, to the core's
//! [`Requester`] of the connection ([`NetRequester`], kept in the queue's `route::Path`);
//! several are in flight at once. Each request packet gathers its bytes from the work
//! request's scatter list (or inline bytes), which stay in the send queue until the
//! request completes. Responses arrive on the progress thread ([`handle_response`]): READ
//! data is scattered into the work request's list there, and completions retire the send
//! queue's head in order. The retransmit and RNR timers are the core's; the progress
//! thread kicks the queue when [`Requester::poll_timeout`] passes.
//!
//! Responder: requests arrive on the progress thread ([`handle_requests`], a train at a time) and go through
//! the QP's [`rverbs_proto::rc::Responder`] (in `QpInner::net_resp`), which checks them in
//! rxe's order; the payload is placed packet by packet (a SEND keeps its receive WQE
//! until its last packet; a WRITE's later packets are looked up again under its R_Key) and
//! the machine's ACKs, NAKs and READ/atomic responses go back to the requester's address.
//!
//! Any process of the host can have such QPs: a packet for a QP of a process that does
//! not own the address's port 4791 reaches it relayed by the owner, with its original
//! source address ([`super::udp`], "Demultiplexing"), so [`handle_requests`] and
//! [`handle_response`] run in the QP's own process and see the peer's address; what they
//! send leaves from that process's own socket, straight to the peer's port 4791.
//!
//! Limits of this slice: when the owner of an address's port 4791 exits, RC/UC QPs of the
//! other processes are unreachable on that address until one of them takes the port over
//! (within [`super::udp::TAKEOVER_PERIOD`], [`super::udp`] "Takeover"; the requester's
//! retransmits cover the gap when its timeout × retry count is longer); XRC has no
//! FLUSH or ATOMIC_WRITE (no opcode: LOC_QP_OP_ERR); attributes changed by `modify_qp`
//! while the connection runs (timeout, retry counts) take effect at the next connection.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{self, Mode, Request, Requester, RequesterConfig, Responder, Response};
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpType, SendFlags, WcStatus, WrOpcode};
use rverbs_proto::wire::roce::{Packet, Repr};
use rverbs_proto::wire::Transport;

use super::host::{core_wqe, recv_cqe, responder_event, sent};
use super::respond::Responding;
use super::route::{accepts_requests, connected_mode, responder_config, Path};
use super::route::xrc_target;
use super::target::{LocalTarget, Serving, SplitTarget, Target};
use super::udp::{Checked, Net};
use crate::engine::Engine;
use crate::gid::Gid;
use crate::mr::{self, KeySpace};
use crate::qp::sq::SendQueue;
use crate::qp::QpInner;
use crate::wc::Cqe;

/// The send side of one connection to another host: the core's requester, where it sends,
/// and which send-queue entries it carries.
pub(crate) struct NetRequester {
    req: Requester,
    /// The peer's address (the path's destination GID) and this side's source GID.
    dst: IpAddr,
    sgid: Gid,
    dest_qpn: u32,
    /// Send-queue entries, from the oldest, handed to `req`.
    handed: usize,
    /// The core's id of the send queue's oldest entry; entry `i` has id `base + i`.
    base: u64,
    /// The deadline a progress-thread timer is set for.
    armed: Option<Instant>,
    /// The packets built by one pass, sent together (`Net::send_batch`); `out[..queued]`
    /// are waiting, the rest are spare buffers.
    out: Vec<Vec<u8>>,
    queued: usize,
    /// Counted while it lives (`progress::net_active`).
    _live: crate::progress::NetConnection,
}

impl NetRequester {
    fn new(qp: &QpInner, sq: &SendQueue) -> NetRequester {
        let r = &sq.req;
        let cfg = RequesterConfig {
            mode: connected_mode(qp.qp_type),
            qpn: qp.qpn,
            mtu: r.mtu,
            sq_psn: Psn::new(r.sq_psn),
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            retry_cnt_7_infinite: false,
            rnr_retry: r.rnr_retry,
            max_rd_atomic: r.max_rd_atomic,
            max_send_wr: qp.cap.max_send_wr,
            // Every WQE completes in the core; the send queue decides what is written
            // (ibv_post_send(3) SIGNALED / sq_sig_all), as for the same-host path.
            sq_sig_all: true,
            max_unacked_psns: WINDOW,
        };
        NetRequester {
            req: Requester::new(cfg),
            dst: r.dgid.to_ip(),
            sgid: r.sgid,
            dest_qpn: r.dest_qpn,
            handed: 0,
            base: 0,
            armed: None,
            out: Vec::new(),
            queued: 0,
            _live: crate::progress::NetConnection::open(),
        }
    }
}

/// Runs the network requester of `qp` (its send queue `sq` locked; the QP in RTS, SQD or
/// SQE): hands new work requests to the core (none while `draining`), sends what the core
/// lets go, retires completed requests, and sets the progress thread's timer for the next
/// deadline. Returns whether requests are still in flight.
pub(crate) fn progress(path: &mut Path, qp: &Arc<QpInner>, sq: &mut SendQueue, draining: bool) -> bool {
    let Some(net) = path.net else { return false };
    let now = Instant::now();
    let mut conn = path.net_req.take().unwrap_or_else(|| Box::new(NetRequester::new(qp, sq)));
    if conn.req.poll_timeout().is_some_and(|t| t <= now) {
        conn.req.handle_timeout(now);
        tracing::debug!(
            qpn = qp.qpn,
            comp_psn = conn.req.comp_psn().get(),
            req_psn = conn.req.req_psn().get(),
            retries_left = ?conn.req.retries_left(),
            rnr_retries_left = ?conn.req.rnr_retries_left(),
            state = ?conn.req.state(),
            "network requester timer fired"
        );
    }
    loop {
        if !draining && !hand_over(qp, sq, &mut conn) {
            // The head was finished locally (a bind, a local fault): hand again.
            continue;
        }
        while let Some(r) = conn.req.poll_transmit(now) {
            build(qp, sq, &mut conn, &r);
            if conn.queued == BATCH {
                send_queued(&mut conn, net);
            }
        }
        send_queued(&mut conn, net);
        match retire(qp, sq, &mut conn) {
            Retired::Running => break,
            Retired::Failed => return false,
        }
    }
    if let Some(t) = conn.req.poll_timeout() {
        if conn.armed.is_none_or(|a| a > t || a <= now) {
            conn.armed = Some(t);
            let me: std::sync::Weak<dyn crate::progress::Timed> = Arc::downgrade(qp) as _;
            crate::progress::schedule(t, me);
        }
    }
    let in_flight = conn.handed > 0;
    path.net_req = Some(conn);
    in_flight
}

/// Hands the send queue's new work requests to the core. A local operation (bind,
/// local invalidate) or a request whose scatter list fails its local checks is finished
/// here once every earlier request has completed; returns `false` when it finished one
/// (the caller hands again).
fn hand_over(qp: &Arc<QpInner>, sq: &mut SendQueue, conn: &mut NetRequester) -> bool {
    while let Some((w, sges, _)) = sq.nth(conn.handed) {
        let op = w.opcode();
        // LOC_PROT_ERR is decided before anything is sent (ibv_poll_cq(3)).
        let fault = if op.carries_payload() && w.inline_len.is_none() {
            pin_own(qp, sges, Access::empty(), w.total_len).err()
        } else {
            None
        };
        // docs/rocev2-wire.md §1.8: XRC has no FLUSH or ATOMIC_WRITE opcode here.
        let xrc = qp.qp_type == QpType::XrcSend;
        let no_wire = !op.has_wire_opcode(qp.qp_type) || (xrc && matches!(op, WrOpcode::Flush | WrOpcode::AtomicWrite));
        if fault.is_some() || no_wire || matches!(op, WrOpcode::BindMw | WrOpcode::LocalInv) {
            if conn.handed > 0 {
                return true;
            }
            let exec = match (op, fault) {
                (_, Some(f)) => super::Exec::Done(Cqe::error(w.wr_id, qp.qpn, WcStatus::LocProtErr, f.local_vendor_err())),
                _ if no_wire => super::host::no_wire_opcode(qp, w),
                (WrOpcode::BindMw, None) => super::local::bind_mw(qp, w),
                _ => super::local::local_inv(qp, w),
            };
            let super::Exec::Done(cqe) = exec else { return true };
            qp.complete_head(sq, cqe);
            conn.base += 1;
            return false;
        }
        let mut wqe = core_wqe(w);
        wqe.id = conn.base + conn.handed as u64;
        // ibv_post_send(3) `qp_type.xrc.remote_srqn`: the XRCETH of every packet.
        wqe.xrc_srq = xrc.then_some(w.xrc_srqn);
        wqe.flags |= SendFlags::SIGNALED;
        if conn.req.post(wqe).is_err() {
            // Full: the core holds as many as the send queue.
            return true;
        }
        conn.handed += 1;
    }
    true
}

/// Pins the first `need` bytes of `qp`'s own scatter list `sges` for `access` (its PD, its
/// process's keys).
fn pin_own<'a>(qp: &'a QpInner, sges: &[crate::mr::Sge], access: Access, need: u64) -> Result<mr::PinList<'a>, mr::Fault> {
    mr::pin_sges(&KeySpace::local(qp.pd.endpoint()), qp.pd.id, sges, access, need)
}

/// The most PSNs a connection keeps unacknowledged (rxe: 128, `RequesterConfig`'s
/// default). 128 MTU-1024 packets are 128 KiB in flight, less than a veth's
/// bandwidth-delay product once both ends' per-packet work is counted: a 1 MiB
/// `ib_write_bw` across two namespaces went from ~1100 to ~1450 MB/s with 512 (1024 and
/// 2048 gained nothing more; 64 KiB messages, ACKed every message, did not change). The
/// responder, rxe's included, checks sequence, not distance, so a peer sees nothing but
/// more packets between ACKs; a loss costs a go-back-N of up to this many packets.
const WINDOW: u32 = 512;

/// Request packets sent with one system call, at most.
const BATCH: usize = 64;

/// Sends the packets built so far.
fn send_queued(conn: &mut NetRequester, net: &Net) {
    if conn.queued > 0 {
        net.send_batch(&conn.sgid, conn.dst, &mut conn.out[..conn.queued]);
        conn.queued = 0;
    }
}

/// Builds one request packet into the connection's batch: the core's headers, then the
/// payload gathered from the work request it belongs to.
fn build(qp: &QpInner, sq: &SendQueue, conn: &mut NetRequester, r: &Request) {
    let repr = r.to_repr(conn.dest_qpn);
    let n = repr.buffer_len();
    if conn.out.len() == conn.queued {
        conn.out.push(Vec::new());
    }
    let buf = &mut conn.out[conn.queued];
    buf.clear();
    buf.resize(n, 0);
    let mut packet = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut packet);
    let payload = packet.payload_mut();
    let filled = if let Some(v) = r.atomic_write {
        // docs/rocev2-wire.md §1.3: ATOMIC_WRITE's 8 bytes go verbatim.
        payload.copy_from_slice(&v.to_ne_bytes());
        true
    } else if r.payload_len == 0 {
        true
    } else {
        let idx = r.wqe_id.wrapping_sub(conn.base) as usize;
        match sq.nth(idx) {
            Some((w, _, inline)) if w.inline_len.is_some() => {
                let off = r.payload_offset as usize;
                payload.copy_from_slice(&inline[off..off + payload.len()]);
                true
            }
            Some((w, sges, _)) => {
                pin_own(qp, sges, Access::empty(), w.total_len)
                    .ok()
                    .is_some_and(|list| mr::gather_at(&list, r.payload_offset as usize, payload).is_ok())
            }
            None => false,
        }
    };
    if !filled {
        // The region went away after the request was handed over (deregistered).
        conn.req.fail_oldest(WcStatus::LocProtErr, vendor_err::LOCAL_LKEY);
        return;
    }
    conn.queued += 1;
}

enum Retired {
    Running,
    Failed,
}

/// Retires the completed requests, oldest first, into the send CQ (atomic results stored
/// into the request's buffer first). A failure moves the QP to ERR (UC: SQE) and ends the
/// connection.
fn retire(qp: &Arc<QpInner>, sq: &mut SendQueue, conn: &mut NetRequester) -> Retired {
    while let Some(c) = conn.req.poll_completion() {
        debug_assert_eq!(c.id, conn.base, "the core completes in order");
        let Some((w, sges, _)) = sq.head() else { break };
        let mut cqe = if c.status == WcStatus::Success {
            sent(qp, w)
        } else {
            Cqe::error(w.wr_id, qp.qpn, c.status, c.vendor_err)
        };
        if let Some(original) = c.atomic_original {
            // ibv_post_send(3): the original value lands in the local buffer (LOCAL_WRITE).
            let stored = pin_own(qp, sges, Access::LOCAL_WRITE, 8)
                .ok()
                .is_some_and(|l| mr::copy_message(&l, 0, mr::Source::Bytes(&original.to_ne_bytes())).is_ok());
            if !stored {
                cqe = Cqe::error(w.wr_id, qp.qpn, WcStatus::LocProtErr, vendor_err::LOCAL_ACCESS);
            }
        }
        let failed = cqe.status() != WcStatus::Success;
        qp.complete_head(sq, cqe);
        conn.base += 1;
        conn.handed -= 1;
        if failed {
            // The QP left RTS; what is still queued is flushed by the caller's next pass.
            return Retired::Failed;
        }
    }
    Retired::Running
}

/// A response (ACK, NAK, READ response, atomic ACK) from the network for QP `qpn` of this
/// process: fed to its connection's requester (READ data scattered into the request's
/// list), then the send queue runs. Responses from another address, or for a QP without
/// a network connection, are dropped (rxe `check_addr`). Returns whether it was taken.
pub(crate) fn handle_response(engine: &'static Engine, src: IpAddr, repr: &Repr, payload: &[u8]) -> bool {
    let Some(qp) = engine.qps.get(repr.bth.dest_qp) else { return false };
    // rxe `check_type_state`: the response's transport is the QP's (XRC answers XRC).
    if (repr.bth.opcode.transport() == Transport::Xrc) != (qp.qp_type == QpType::XrcSend) {
        return false;
    }
    let now = Instant::now();
    {
        let mut sq = qp.sq.lock();
        let Some(mut conn) = Path::of(&mut sq).and_then(|p| p.net_req.take()) else { return false };
        if conn.dst != src {
            put_back(&mut sq, conn);
            return false;
        }
        let r = Response::from_repr(repr);
        if let Some(pl) = conn.req.handle_response(now, &r) {
            let idx = pl.wqe_id.wrapping_sub(conn.base) as usize;
            let placed = sq.nth(idx).is_some_and(|(w, sges, _)| {
                pin_own(&qp, sges, Access::LOCAL_WRITE, w.total_len).ok().is_some_and(|l| {
                    let n = (pl.len as usize).min(payload.len());
                    mr::copy_message(&l, pl.offset as usize, mr::Source::Bytes(&payload[..n])).is_ok()
                })
            });
            if !placed {
                // rxe `rxe_comp.c`: a READ response that cannot be written locally.
                conn.req.fail_oldest(WcStatus::LocProtErr, vendor_err::LOCAL_ACCESS);
            }
        }
        put_back(&mut sq, conn);
    }
    qp.kick();
    true
}

/// Gives `conn` back to the path of send queue `sq`, which it was taken from.
fn put_back(sq: &mut SendQueue, conn: Box<NetRequester>) {
    if let Some(p) = Path::of(sq) {
        p.net_req = Some(conn);
    }
}

/// Requests (RC/UC/XRC) from the network, all for QP `run[0].repr.bth.dest_qp` of this
/// process and all from `src`, in arrival order (a UDP GSO train usually, or the
/// datagrams of one `recvmmsg`), which arrived on the socket of local GID `local`:
/// checked as rxe's `rxe_rcv` does (the QP exists with the packets' transport, accepts
/// requests, and its path names `src`), then run through the QP's responder one by one;
/// each payload is placed and the responses are sent back to `src`. Returns how many
/// were taken (a run is taken whole, or, when a packet puts the responder into ERR, up
/// to that packet).
///
/// The QP is looked up, its responder locked and its attributes read once for the run,
/// not per packet: a train of 64 packets costs one lookup, as a NIC's QP context cache
/// does.
pub(crate) fn handle_requests(engine: &'static Engine, net: &Net, local: &Gid, src: IpAddr, run: &[Checked<'_>]) -> usize {
    let Some(first) = run.first() else { return 0 };
    let Some(qp) = engine.qps.get(first.repr.bth.dest_qp) else { return 0 };
    let want = match first.repr.bth.opcode.transport() {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Xrc => QpType::XrcRecv,
        _ => return 0,
    };
    let xrc = want == QpType::XrcRecv;
    if qp.qp_type != want || !accepts_requests(qp.state()) || qp.rec.dgid() != Gid::from_ip(src) {
        return 0;
    }
    let t = LocalTarget::of(qp.clone());
    t.note_inbound();
    let now = Instant::now();
    let mode = connected_mode(want);
    // An XRC request is served by the SRQ its XRCETH names (docs/rocev2-wire.md §1.8),
    // found once per SRQ number the run names in a row.
    let mut xrc_srq: Option<(u32, Option<SplitTarget>)> = None;
    let dest_qpn = qp.rec.dest_qpn.load(Ordering::Acquire);
    // The responder's MTU is the requester's: the path MTU, within the port's largest and
    // the link's.
    let link_mtu = net.sock_of(local).map_or(u32::MAX, |s| s.link_mtu);
    let mtu = qp.rec.path_mtu.load(Ordering::Acquire).min(crate::limits::MAX_MTU.bytes()).min(link_mtu);
    // Whether to move the QP to ERR (raising this event, if any) once the responder's lock
    // is released: the flush that follows takes that lock.
    let mut fail: Option<Option<EventType>> = None;
    let mut taken = 0;
    {
        let mut guard = qp.net_resp.lock().expect("net responder");
        let nr = &mut *guard;
        let mut cfg = responder_config(mode, qp.rec, mtu);
        cfg.xrc = xrc;
        cfg.rq_psn = Psn::new(nr.rq_psn);
        if nr.machine.is_none() {
            nr.live = Some(crate::progress::NetConnection::open());
        }
        let machine = nr.machine.get_or_insert_with(|| Responder::new(cfg));
        machine.reconfigure(cfg);
        let mut buf = Vec::new();
        for a in run {
            debug_assert_eq!(a.repr.bth.dest_qp, qp.qpn, "a run is for one QP");
            taken += 1;
            let payload = a.packet.payload();
            let request = Request::from_repr(&a.repr, payload);
            if let (true, Some(n)) = (xrc, request.xrc_srq) {
                if xrc_srq.as_ref().is_none_or(|(m, _)| *m != n) {
                    xrc_srq = Some((n, xrc_target(engine, &qp, n)));
                }
            }
            let split = xrc_srq.as_ref().and_then(|(n, s)| s.as_ref().filter(|_| request.xrc_srq == Some(*n)));
            let served = match split {
                Some(s) => Serving::Xrc(s),
                None => Serving::Own(&t),
            };
            let mut at = Responding::new(&served);
            at.xrc_srq = split.and(request.xrc_srq);
            at.recv = nr.held.take();
            let d = machine.handle_request(now, &request, &mut at);
            let mut completed = None;
            if d.violation.is_some() || !d.executed {
                tracing::debug!(
                    qpn = qp.qpn,
                    psn = request.psn.get(),
                    opcode = ?request.opcode,
                    expected = machine.expected_psn().get(),
                    violation = ?d.violation,
                    executed = d.executed,
                    "network request not executed"
                );
            }
            if let Some(v) = d.violation {
                if let Some(c) = d.recv {
                    let _ = served.complete(recv_cqe(&served, &c));
                }
                if v.responder_fatal() && (mode == Mode::Rc || d.recv.is_some()) {
                    // IBTA: a responder error no receive completion reports is raised as
                    // an asynchronous event (as the same-host path does).
                    let event = (d.recv.is_none() && mode == Mode::Rc).then_some(responder_event(v));
                    fail = Some(event);
                }
            } else if d.executed {
                let placed = d.place.map_or(Ok(()), |place| at.place_packet(place, payload));
                match (placed, d.recv) {
                    (Err(v), _) => {
                        // The memory failed between the check and the copy (deregistered):
                        // the QP ends, as for a failed check.
                        machine.enter_error();
                        if let Some(r) = at.recv.take() {
                            let _ = served.complete(Cqe::error(r.wr_id, t.qpn(), WcStatus::LocQpOpErr, v.vendor_err()));
                        }
                        fail = Some(Some(EventType::QpAccessErr));
                    }
                    // SEND_WITH_INV whose invalidation failed (rxe "class J"): the receive
                    // completes in error, the responder enters ERR below.
                    (Ok(()), Some(c)) if c.status != WcStatus::Success => {
                        let _ = served.complete(recv_cqe(&served, &c));
                    }
                    // Published once the ACK is out (below).
                    (Ok(()), Some(c)) => completed = Some(c),
                    (Ok(()), None) => {}
                }
            }
            if machine.state() == rc::ResponderState::Error && fail.is_none() {
                fail = Some(None);
            }
            // The receive WQE stays taken while its message goes on (or, UC, while the
            // core keeps it for the next message); one that completed is gone.
            let held = at.recv.take().filter(|w| d.recv.is_none_or(|c| c.wr_id != w.wr_id));
            // Responses go back to the requester, READ data gathered per packet.
            while let Some(resp) = machine.poll_transmit(now) {
                let repr = resp.to_repr(dest_qpn);
                buf.clear();
                buf.resize(repr.buffer_len(), 0);
                let mut packet = Packet::new_unchecked(&mut buf[..]);
                repr.emit(&mut packet);
                if let Some(s) = resp.source {
                    if at.read_source(s, packet.payload_mut()).is_err() {
                        // The region was deregistered during the READ: nothing more is
                        // sent; the requester times out.
                        break;
                    }
                }
                net.send(local, src, &mut buf);
            }
            drop(at);
            nr.held = held;
            // docs/rxe-differences.md, "The receive completion after the ACK": the receive
            // completion is published after the ACK is sent (rxe completes first): the
            // application may exit the instant it sees the completion, and a message it saw
            // must not be left unacknowledged. A receive CQ that overruns still ends the QP
            // (QP_FATAL), though its message was ACKed.
            if let Some(c) = completed {
                if served.complete(recv_cqe(&served, &c)).is_err() {
                    machine.enter_error();
                    fail = Some(Some(EventType::QpFatal));
                }
            }
            if fail.is_some() {
                // The responder is in ERR: what follows in the run is not for a live
                // responder (the QP leaves RTS below and drops it, as a later run would).
                break;
            }
        }
    }
    if let Some(event) = fail {
        t.enter_error(event);
    }
    taken
}
