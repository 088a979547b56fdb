//! Running the send queue: the protocol core's requester ([`rverbs_proto::rc::Requester`])
//! over the queue's link, for every transport and every link.
//!
//! Read before editing: `rverbs_proto::rc` (the machines and their calling order),
//! docs/rocev2-wire.md §3.2 (requester), §3.4 (completer), §4 (statuses),
//! docs/queue-pairs.md "One requester, two links", ibv_post_send(3) and ibv_poll_cq(3).
//!
//! The requester owns PSNs, the window, fences, read/atomic credits, the retry and RNR
//! budgets and their timers, ordering and completion; this module only feeds it. Work
//! requests are handed to it oldest first ([`Conn`]); each request packet it builds goes
//! to the queue's link ([`SendPath::transmit`]), which gathers the bytes; responses come
//! back through [`Answers`] (on the same host inside that call, from the network later
//! through [`QpInner::on_response`]); its completions retire the queue's head in order.
//! The link is the only thing that differs between the same host and the network.
//!
//! Local operations (BIND_MW, LOCAL_INV, [`super::local`]) and work requests the device
//! fails before anything is sent (a local scatter-list fault: LOC_PROT_ERR; an opcode the
//! transport has no wire opcode for, or an address handle of another PD: LOC_QP_OP_ERR)
//! are finished here, in queue order, once every earlier request has completed.

use std::sync::Arc;
use std::time::Instant;

use rverbs_proto::rc::{self, Placed, Requester, RequesterConfig, Response};
use rverbs_proto::psn::Psn;
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpState, QpType, SendFlags, WcStatus, WrOpcode};
use rverbs_proto::wire::{self, FethRepr, Selectivity};

use super::device::{Answers, Express, ExpressData, ExpressOp, Expressed, PacketBytes, ResponseBytes, SendPath, Shape, Tx};
use super::sq::{ReqView, Ring, SendWqe};
use crate::rings::wr::{FlushPlacement, FlushSelectivity};
use super::{transition, QpInner};
use crate::gid::Gid;
use crate::mr::{self, KeySpace, PinList, Sge};
use crate::error::Result;
use crate::mr::endpoint::Endpoint;
use crate::rings::wr::SendWr;
use crate::rings::wc::Cqe;
use crate::shm::counters::Counter;

/// A QP's send side, under its lock: the posted work requests, the requester's view of
/// the QP attributes, the link the requests leave by, and the protocol core's requester
/// that runs them over it (`super::send`, from the first request after RTS until the
/// queue is flushed or reset).
pub(crate) struct SendQueue {
    pub(crate) ring: Ring,
    pub(crate) req: ReqView,
    /// The transports' state for this queue: the link to the responders (made by the
    /// device).
    pub(crate) link: Box<dyn SendPath>,
    pub(crate) conn: Option<Conn>,
}

impl SendQueue {
    pub(crate) fn new(ring: Ring, link: Box<dyn SendPath>) -> Self {
        SendQueue { ring, req: ReqView::default(), link, conn: None }
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Removes the newest work requests until `count` remain (an aborted batch).
    pub(crate) fn truncate(&mut self, count: usize) {
        self.ring.truncate(count);
    }

    /// Validates `wr` and appends it ([`Ring::push`]).
    pub(crate) fn push(&mut self, endpoint: &Endpoint, pd: u32, qp_type: QpType, wr: &SendWr<'_>, keep: bool) -> Result<()> {
        self.ring.push(endpoint, pd, qp_type, wr, keep)
    }

    /// Removes every work request without completing it (→ RESET, destroy), with the
    /// requester that carried some of them and the link's state for it.
    pub(crate) fn clear(&mut self) {
        while self.ring.pop().is_some() {}
        self.conn = None;
        self.link.reset();
    }
}

/// The requester of one connection of a send queue: the core's machine and which queue
/// entries it carries. Made at the first progress after RTS; dropped when the queue is
/// flushed or reset, or a request failed.
pub(crate) struct Conn {
    req: Requester,
    /// Queue entries, from the oldest, handed to `req`.
    handed: usize,
    /// The core's id of the queue's oldest entry; entry `i` has id `base + i`.
    base: u64,
    /// The deadline a progress-thread timer is set for.
    armed: Option<Instant>,
    /// XRC requests carry the XRCETH on this link.
    xrceth: bool,
    /// Scatter lists are checked at hand-over (LOC_PROT_ERR before anything is sent):
    /// on the network, and for UC and UD, which complete at transmit; a same-host RC
    /// request's list is checked when its bytes are gathered, once.
    precheck: bool,
    /// The last key of this process the hand-over's check of a scatter list went through
    /// ([`mr::KeyMemo`]: the next request through the same key is checked against what
    /// its record held, while this process has not written the record since).
    memo: mr::KeyMemo,
    /// Every request is answered inside `transmit` (the same host): the clock is read
    /// only when a request is left waiting (see `run`).
    synchronous: bool,
    /// The last instant read from the clock.
    clock: Instant,
}

/// Whether network RC requesters ask for ACKs only where they stop
/// (`RequesterConfig::ack_req_coalescing`; docs/network.md, "ACKs where the requester
/// stops"). On: the same-host link and XRC ask at every message end regardless.
const ACK_REQ_COALESCING: bool = true;

impl Conn {
    fn new(qp: &QpInner, r: &ReqView, shape: Shape) -> Conn {
        let cfg = RequesterConfig {
            mode: match qp.qp_type {
                QpType::Uc => rc::Mode::Uc,
                QpType::Ud => rc::Mode::Ud,
                _ => rc::Mode::Rc,
            },
            qpn: qp.qpn,
            mtu: shape.mtu,
            sq_psn: Psn::new(r.sq_psn),
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            retry_cnt_7_infinite: false,
            rnr_retry: r.rnr_retry,
            max_rd_atomic: r.max_rd_atomic,
            max_send_wr: qp.cap.max_send_wr,
            // Every WQE completes in the core; the send queue decides what is written
            // (ibv_post_send(3) SIGNALED / sq_sig_all, `QpInner::complete_head`).
            sq_sig_all: true,
            max_unacked_psns: shape.window,
            // RC on the network asks only where the requester stops (docs/network.md,
            // "ACKs where the requester stops"). Never the same host, whose queued way
            // answers each request as it goes, nor XRC: AckReq at every message end there,
            // as rxe.
            ack_req_coalescing: ACK_REQ_COALESCING && !shape.synchronous && qp.qp_type == QpType::Rc,
        };
        let precheck = !shape.synchronous || cfg.mode != rc::Mode::Rc;
        Conn {
            req: Requester::new(cfg),
            handed: 0,
            base: 0,
            armed: None,
            xrceth: shape.xrceth,
            precheck,
            memo: mr::KeyMemo::default(),
            synchronous: shape.synchronous,
            clock: Instant::now(),
        }
    }

    /// `modify_qp` changed attributes of the running requester (ibv_modify_qp(3): RTS →
    /// RTS, SQD → RTS): they take effect at once.
    pub(crate) fn modified(&mut self, timeout: Option<u8>, retry_cnt: Option<u8>, rnr_retry: Option<u8>, max_rd_atomic: Option<u8>) {
        if let Some(t) = timeout {
            self.req.set_timeout(t);
        }
        if let Some(n) = retry_cnt {
            self.req.set_retry_cnt(n);
        }
        if let Some(n) = rnr_retry {
            self.req.set_rnr_retry(n);
        }
        if let Some(n) = max_rd_atomic {
            self.req.set_max_rd_atomic(n);
        }
    }
}

impl QpInner {
    /// The express lane (docs/queue-pairs.md, "The express lane"): a signaled or
    /// unsignaled RDMA WRITE (with or without immediate data), RDMA READ or atomic (into
    /// registered memory, with a credit of `max_rd_atomic`:
    /// [`Requester::express_rd_atomic_psn`]) or SEND (with or without immediate data, not
    /// with invalidation) of an RC QP in RTS whose send queue holds nothing,
    /// executed and acknowledged inside the post without entering the queue, when the
    /// requester ([`Requester::express_psn`]) and the link ([`SendPath::express`]) both
    /// find it is what the queued way would do at once. Returns whether it was done;
    /// `false` leaves the request to the queued way. Its completion is written as
    /// [`QpInner::complete_head`] writes a success, the responder's notification held
    /// until it is ([`crate::rings::deferred_notify`]); an atomic whose original value
    /// could not be stored completes as the queued way's would ([`Expressed::LocalFault`]).
    /// The caller checked the state, the sanitizer and the fault plan.
    pub(crate) fn express(self: &Arc<Self>, sq: &mut SendQueue, wr: &SendWr<'_>) -> bool {
        self.express_outcome(sq, wr) != Expressed::No
    }

    /// [`QpInner::express`], saying how the request ended.
    #[inline]
    fn express_outcome(self: &Arc<Self>, sq: &mut SendQueue, wr: &SendWr<'_>) -> Expressed {
        let SendQueue { ring, req, link, conn: slot } = sq;
        let Some(conn) = slot.as_mut() else { return Expressed::No };
        if !ring.is_empty() || !conn.synchronous || self.qp_type != QpType::Rc {
            return Expressed::No;
        }
        use rverbs_proto::verbs::WcOpcode;
        // A READ's or an atomic's list receives its response: never inline (the queued
        // way decides what IBV_SEND_INLINE on them comes to).
        let inline = wr.flags.contains(SendFlags::INLINE);
        let solicited = wr.flags.contains(SendFlags::SOLICITED);
        let (op, wc_opcode) = match wr.opcode {
            WrOpcode::RdmaWrite => (ExpressOp::Write { rkey: wr.rkey, va: wr.remote_addr }, WcOpcode::RdmaWrite),
            WrOpcode::Send => (ExpressOp::Send { solicited, imm: None }, WcOpcode::Send),
            // The core carries immediate data as the wire's value, as `core_wqe` gives it
            // (`imm_data` holds the bytes C put in `__be32 imm_data`).
            WrOpcode::SendWithImm => (ExpressOp::Send { solicited, imm: Some(u32::from_be(wr.imm_data)) }, WcOpcode::Send),
            WrOpcode::RdmaWriteWithImm => {
                let imm = u32::from_be(wr.imm_data);
                (ExpressOp::WriteImm { rkey: wr.rkey, va: wr.remote_addr, imm, solicited }, WcOpcode::RdmaWrite)
            }
            WrOpcode::RdmaRead if !inline => (ExpressOp::Read { rkey: wr.rkey, va: wr.remote_addr }, WcOpcode::RdmaRead),
            WrOpcode::AtomicFetchAndAdd if !inline => {
                let op = crate::mem::AtomicOp::FetchAdd(wr.compare_add);
                (ExpressOp::Atomic { rkey: wr.rkey, va: wr.remote_addr, op }, WcOpcode::FetchAdd)
            }
            WrOpcode::AtomicCmpAndSwp if !inline => {
                let op = crate::mem::AtomicOp::CompareSwap { compare: wr.compare_add, swap: wr.swap };
                (ExpressOp::Atomic { rkey: wr.rkey, va: wr.remote_addr, op }, WcOpcode::CompSwap)
            }
            _ => return Expressed::No,
        };
        let (max_sge, max_inline) = ring.limits();
        let (data, len) = match wr.payload {
            crate::rings::wr::Payload::Sge(s) if s.len() <= max_sge && !inline => {
                (ExpressData::Sges(s), s.iter().map(|e| u64::from(e.length)).sum::<u64>())
            }
            crate::rings::wr::Payload::Inline(b)
                if b.len() <= max_inline && matches!(op, ExpressOp::Write { .. } | ExpressOp::WriteImm { .. } | ExpressOp::Send { .. }) =>
            {
                (ExpressData::Inline(b), b.len() as u64)
            }
            _ => return Expressed::No,
        };
        let Ok(len) = u32::try_from(len) else { return Expressed::No };
        let psn = match op {
            _ if len > crate::limits::MAX_MSG_SZ => None,
            ExpressOp::Write { .. } | ExpressOp::Read { .. } if len == 0 => None,
            ExpressOp::Read { .. } => conn.req.express_rd_atomic_psn(len),
            // The queued way refuses any other length and a misaligned address at the
            // post (EINVAL): that is its to report.
            ExpressOp::Atomic { va, .. } if len == 8 && va.is_multiple_of(8) => conn.req.express_rd_atomic_psn(len),
            ExpressOp::Atomic { .. } => None,
            _ => conn.req.express_psn(len),
        };
        let Some(psn) = psn else { return Expressed::No };
        let w = Express { psn, op, data, len };
        // The responder's completion events wait until this request's own is written
        // (crate::rings::deferred_notify: the order a NIC produces).
        // (A WRITE without immediate data gives the responder no completion.)
        let mut step = matches!(op, ExpressOp::Send { .. } | ExpressOp::WriteImm { .. }).then(crate::rings::deferred_notify::Step::begin);
        let outcome = link.express(self, req, &w);
        match outcome {
            Expressed::No => return outcome,
            Expressed::Done => {}
            Expressed::LocalFault { vendor_err } => {
                // The atomic was executed and acknowledged: the queued way's completer
                // then fails to store its original value, completes it LOC_PROT_ERR and
                // the QP enters ERR, whose flush drops the connection.
                conn.req.express_acked();
                drop(step);
                self.complete_failed(Cqe::error(wr.wr_id, self.qpn, WcStatus::LocProtErr, vendor_err));
                *slot = None;
                self.progress(sq);
                return outcome;
            }
        }
        conn.req.express_acked();
        if let Some(s) = step.as_mut() {
            s.requester_done();
        }
        // rxe `rdma_sends` of a SEND: counted by the same-host link with its request and
        // receive (`transport::host::express`).
        if self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED) {
            let cqe = Cqe::success(wr.wr_id, self.qpn, wc_opcode, len);
            if self.send_cq.push(cqe).is_err() {
                self.enter_error(Some(EventType::QpFatal), transition::Cause::SendCqOverrun);
            }
        }
        drop(step);
        outcome
    }

    /// [`QpInner::express`] on a device that counts statistics (`stats`): a request the
    /// lane completes has this call's duration as its latency (`shm::stats`; not one that
    /// failed, as for the queued way). Out of line: the plain post only chooses between
    /// the two.
    #[cold]
    #[inline(never)]
    pub(crate) fn express_counted(self: &Arc<Self>, stats: &crate::shm::stats::Stats, sq: &mut SendQueue, wr: &SendWr<'_>) -> bool {
        let posted_ns = crate::clock::device_ns();
        let outcome = self.express_outcome(sq, wr);
        if outcome == Expressed::Done {
            stats.send_latency(self.qpn, crate::clock::device_ns().saturating_sub(posted_ns));
        }
        outcome != Expressed::No
    }
}

/// What handing the queue's next entries to the requester came to.
enum Handed {
    /// Everything that can go is handed (or waits for earlier requests to complete).
    Done,
    /// The oldest entry is finished here, with this completion.
    Local(Cqe),
}

impl QpInner {
    /// Runs the send queue as far as it can go. Called with the queue locked.
    pub(crate) fn progress(self: &Arc<Self>, sq: &mut SendQueue) {
        loop {
            // SQD: no new work request starts. Only `modify` moves the QP into or out of
            // SQD other than into ERR, and it does so under the send-queue lock, which the
            // caller holds.
            let draining = match self.state() {
                QpState::Err => {
                    self.flush_sq(sq);
                    return;
                }
                QpState::Reset | QpState::Init | QpState::Rtr => return,
                QpState::Sqd => true,
                QpState::Rts | QpState::Sqe => false,
            };
            if sq.conn.is_none() {
                if sq.ring.is_empty() || draining {
                    self.drained(draining);
                    return;
                }
                // A new connection on the link (the same host: a new responder machine).
                sq.link.reset();
                sq.conn = Some(Conn::new(self, &sq.req, sq.link.shape(self, &sq.req)));
            }
            match self.run(sq, draining) {
                Ran::Idle => return,
                // A local completion changed the state, or a request failed: look again.
                Ran::Again => continue,
            }
        }
    }

    /// One pass of the requester: timers, hand-over, transmit, responses, completions.
    fn run(self: &Arc<Self>, sq: &mut SendQueue, draining: bool) -> Ran {
        let SendQueue { ring, req, link, conn: slot } = sq;
        let Some(conn) = slot.as_mut() else { return Ran::Idle };
        // On a synchronous link with no timer armed, nothing in this pass depends on the
        // time except the deadlines it may arm, which are moved to the real clock at the
        // end if any is (`Requester::delay_timers`): the clock (tens of nanoseconds) is
        // read only when a request is left waiting.
        let stale = conn.synchronous && conn.req.poll_timeout().is_none();
        let now = if stale {
            conn.clock
        } else {
            conn.clock = Instant::now();
            conn.clock
        };
        if !stale && conn.req.poll_timeout().is_some_and(|t| t <= now) {
            conn.req.handle_timeout(now);
            self.count(&mut conn.req);
            tracing::debug!(
                qpn = self.qpn,
                comp_psn = conn.req.comp_psn().get(),
                req_psn = conn.req.req_psn().get(),
                retries_left = ?conn.req.retries_left(),
                rnr_retries_left = ?conn.req.rnr_retries_left(),
                state = ?conn.req.state(),
                "requester timer fired"
            );
        }
        loop {
            if !draining {
                if let Handed::Local(cqe) = self.hand_over(ring, conn) {
                    let failed = cqe.status() != WcStatus::Success;
                    self.complete_head(ring, cqe);
                    conn.base += 1;
                    if failed {
                        *slot = None;
                        return Ran::Again;
                    }
                    continue;
                }
            }
            // The responder's completion events wait until this step's own completions
            // are written (crate::rings::deferred_notify: the order a NIC produces).
            let mut step = crate::rings::deferred_notify::Step::begin();
            let mut r = rc::Request::new(wire::OpCode::Unknown(0), Psn::new(0));
            while conn.req.poll_transmit_into(now, &mut r) {
                let idx = r.wqe_id.wrapping_sub(conn.base) as usize;
                let Some((wqe, sges, inline)) = ring.nth(idx) else { break };
                let tx = Tx { request: &r, wqe, sges, inline, comp_psn: conn.req.comp_psn() };
                let mut answering = Answering { qp: self, req: &mut conn.req, memo: &conn.memo, ring, base: conn.base, now };
                if let Err(vendor) = link.transmit(self, req, tx, &mut answering) {
                    // The request's bytes could not be gathered (a scatter list not checked
                    // at hand-over, or a region that went away since): LOC_PROT_ERR once it
                    // is the oldest; until then it is a request nobody answered, which the
                    // requester's timers bring back.
                    if conn.req.oldest() == Some(r.wqe_id) {
                        conn.req.fail_oldest(WcStatus::LocProtErr, vendor);
                    }
                }
            }
            link.flush(self);
            self.count(&mut conn.req);
            step.requester_done();
            let retired = self.retire(ring, conn);
            drop(step);
            match retired {
                Retired::Failed => {
                    // The QP left RTS (RC: ERR, whose flush follows; UC/UD: SQE).
                    *slot = None;
                    return Ran::Again;
                }
                // Completions may let a local operation or a new request go.
                Retired::Some if ring.len() > conn.handed && !draining => continue,
                _ => break,
            }
        }
        self.settle_clock(conn, stale, now);
        if let Some(t) = conn.req.poll_timeout() {
            if conn.armed.is_none_or(|a| a > t || a <= now) {
                conn.armed = Some(t);
                let me: std::sync::Weak<dyn crate::progress::Timed> = Arc::downgrade(self) as _;
                crate::progress::schedule(self.endpoint, t, me);
            }
        }
        if conn.handed == 0 {
            self.drained(draining);
        }
        Ran::Idle
    }

    /// After a pass run on the last instant read (`stale`): deadlines armed in it move to
    /// the real clock.
    fn settle_clock(&self, conn: &mut Conn, stale: bool, then: Instant) {
        if stale && conn.req.poll_timeout().is_some() {
            let real = Instant::now();
            conn.req.delay_timers(real.saturating_duration_since(then));
            conn.clock = real;
        }
    }

    /// SQD with nothing in flight: SQ_DRAINED, once per entry into SQD (rxe raises it
    /// whether or not `en_sqd_async_notify` was set).
    fn drained(self: &Arc<Self>, draining: bool) {
        if draining && !self.sqd_notified.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.raise(EventType::SqDrained);
        }
    }

    /// Hands the queue's new work requests to the requester, oldest first, until the
    /// first one the device finishes itself; that one is finished once every earlier
    /// request has completed.
    fn hand_over(&self, ring: &Ring, conn: &mut Conn) -> Handed {
        while let Some((w, sges, _)) = ring.nth(conn.handed) {
            let precheck = conn.precheck.then_some(&conn.memo);
            if let Some(cqe) = self.finished_here(w, sges, conn.xrceth, precheck) {
                return if conn.handed == 0 { Handed::Local(cqe()) } else { Handed::Done };
            }
            let mut wqe = core_wqe(w);
            wqe.id = conn.base + conn.handed as u64;
            // ibv_post_send(3) `qp_type.xrc.remote_srqn`: the XRCETH of every packet.
            wqe.xrc_srq = (conn.xrceth && self.qp_type == QpType::XrcSend).then_some(w.xrc_srqn);
            wqe.flags |= SendFlags::SIGNALED;
            if conn.req.post(wqe).is_err() {
                // Full: the core holds as many as the send queue.
                break;
            }
            conn.handed += 1;
        }
        Handed::Done
    }

    /// The completion of a work request the device finishes without its requester: a
    /// local operation, or one that fails before anything is sent; `None` for the rest.
    /// `precheck`: the scatter list is checked here, through this memo of the last key.
    fn finished_here<'w>(&'w self, w: &'w SendWqe, sges: &'w [Sge], xrceth: bool, precheck: Option<&mr::KeyMemo>) -> Option<impl FnOnce() -> Cqe + 'w> {
        let op = w.opcode();
        let fail = |status, vendor| Cqe::error(w.wr_id, self.qpn, status, vendor);
        enum Why {
            Local,
            NoWire,
            Fault(mr::Fault),
            OtherPd,
            Injected(WcStatus),
        }
        // docs/rocev2-wire.md §1.8: XRC has no FLUSH or ATOMIC_WRITE opcode on the wire.
        let no_wire = !op.has_wire_opcode(self.qp_type) || (xrceth && self.qp_type == QpType::XrcSend && matches!(op, WrOpcode::Flush | WrOpcode::AtomicWrite));
        let why = if let Some(status) = w.injected {
            // The fault plan's status (docs/fault-injection.md): nothing is sent.
            Why::Injected(status)
        } else if matches!(op, WrOpcode::BindMw | WrOpcode::LocalInv) {
            Why::Local
        } else if no_wire {
            Why::NoWire
        } else if let Some(f) = precheck
            .filter(|_| op.carries_payload() && w.inline_len.is_none())
            .and_then(|memo| self.pin_own(memo, sges, Access::empty(), w.total_len).err())
        {
            // LOC_PROT_ERR is decided before anything is sent (ibv_poll_cq(3); rxe
            // reports LOC_QP_OP_ERR, docs/rxe-differences.md, "A local SGE fault is
            // LOC_PROT_ERR").
            Why::Fault(f)
        } else if w.ud.as_ref().is_some_and(|u| u.ah.pd != self.pd.id) {
            // rxe: an address handle of another PD is a local QP operation error.
            Why::OtherPd
        } else {
            return None;
        };
        Some(move || match why {
            Why::Local if op == WrOpcode::BindMw => super::local::bind_mw(self, w),
            Why::Local => super::local::local_inv(self, w),
            // UC SEND with Invalidate: posted, then failed, as rxe's requester does
            // (`WrOpcode::has_wire_opcode`).
            Why::NoWire => fail(WcStatus::LocQpOpErr, vendor_err::LOCAL_NO_OPCODE),
            Why::Fault(f) => fail(WcStatus::LocProtErr, f.local_vendor_err()),
            Why::OtherPd => fail(WcStatus::LocQpOpErr, vendor_err::LOCAL_PD),
            Why::Injected(status) => fail(status, vendor_err::INJECTED),
        })
    }

    /// Pins the first `need` bytes of this QP's own scatter list `sges` for `access` (its
    /// PD, its process's keys, remembered in `memo`).
    fn pin_own<'a>(&'a self, memo: &'a mr::KeyMemo, sges: &[Sge], access: Access, need: u64) -> Result<PinList<'a>, mr::Fault> {
        mr::pin_sges(&KeySpace::local(self.endpoint).remembering(memo), self.pd.id, sges, access, need)
    }

    /// Adds the events the requester counted since the last call to the endpoint's
    /// counters (docs/device.md, "Hardware counters").
    fn count(&self, req: &mut Requester) {
        let c = req.take_counts();
        if c != rc::RequesterCounts::default() {
            let counters = self.endpoint.counters;
            counters.add_n(Counter::CompleterRetryErr, c.retries);
            counters.add_n(Counter::RcvdRnrErr, c.rnr_naks);
            counters.add_n(Counter::RcvdSeqErr, c.seq_naks);
        }
    }

    /// Counts the completion of a send work request of opcode `op` with `status` the
    /// requester retired (rxe counts these in its completer, `do_complete`).
    fn count_completion(&self, op: WrOpcode, status: WcStatus) {
        let counter = match status {
            WcStatus::Success if matches!(op, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv) => Counter::RdmaSends,
            WcStatus::RetryExcErr => Counter::RetryExceededErr,
            WcStatus::RnrRetryExcErr => Counter::RetryRnrExceededErr,
            _ => return,
        };
        self.endpoint.counters.add(counter);
    }

    /// Retires the requester's completions, oldest first, into the send CQ (an atomic's
    /// original value stored into the request's buffer first, ibv_post_send(3)).
    fn retire(self: &Arc<Self>, ring: &mut Ring, conn: &mut Conn) -> Retired {
        let mut retired = Retired::None;
        while let Some(c) = conn.req.poll_completion() {
            debug_assert_eq!(c.id, conn.base, "the core completes in order");
            let Some((w, sges, _)) = ring.head() else { break };
            let mut cqe = if c.status == WcStatus::Success {
                w.success(self.qpn)
            } else {
                Cqe::error(w.wr_id, self.qpn, c.status, c.vendor_err)
            };
            if let Some(original) = c.atomic_original {
                // The original value lands in the local buffer (LOCAL_WRITE; a fault is
                // LOC_PROT_ERR).
                let stored = self.pin_own(&conn.memo, sges, Access::LOCAL_WRITE, 8).and_then(|l| {
                    mr::copy_message(&l, 0, mr::Source::Bytes(&original.to_ne_bytes())).map(drop).map_err(|_| mr::Fault::Bounds)
                });
                if let Err(f) = stored {
                    cqe = Cqe::error(w.wr_id, self.qpn, WcStatus::LocProtErr, f.local_vendor_err());
                }
            }
            let failed = cqe.status() != WcStatus::Success;
            self.count_completion(w.opcode(), cqe.status());
            self.complete_head(ring, cqe);
            conn.base += 1;
            conn.handed -= 1;
            if failed {
                return Retired::Failed;
            }
            retired = Retired::Some;
        }
        retired
    }

    /// Retires the head WQE with `cqe`: written to the send CQ if the request was
    /// signaled, the QP signals all, or it failed (ibv_post_send(3); rxe `do_complete`).
    /// A failure moves the QP to ERR (UC, UD: SQE) before its completion is written, so
    /// that `ibv_query_qp` after `ibv_poll_cq` returned it finds the QP there; the flushes
    /// follow the completion. An overrun of the send CQ moves the QP to ERR, with
    /// QP_FATAL.
    pub(crate) fn complete_head(self: &Arc<Self>, ring: &mut Ring, cqe: Cqe) {
        let wqe = ring.pop().expect("non-empty");
        let failed = cqe.status() != WcStatus::Success;
        if failed && wqe.hold_ms == 0 {
            return self.complete_failed(cqe);
        }
        let written = failed || self.sq_sig_all || wqe.flags.contains(SendFlags::SIGNALED);
        // UC and UD send errors only stop the send queue (SQE); RC and XRC go to ERR.
        let mut erred = false;
        if failed {
            if matches!(self.qp_type, QpType::Uc | QpType::Ud) {
                let _ = self.transition(transition::Expect::Is(QpState::Rts), QpState::Sqe, transition::Cause::SendError);
            } else {
                erred = self.move_to_error(transition::Cause::SendError);
            }
        }
        if written && wqe.hold_ms > 0 {
            // The fault plan holds the completion back (docs/fault-injection.md); the CQ
            // publishes it, and what follows it, when the time has come.
            let me: std::sync::Weak<dyn crate::cq::Overran> = Arc::downgrade(self) as _;
            self.send_cq.push_held(cqe, std::time::Duration::from_millis(u64::from(wqe.hold_ms)), me);
        } else if written && self.send_cq.push(cqe).is_err() {
            if erred {
                self.after_error(Some(EventType::QpFatal));
            } else {
                self.enter_error(Some(EventType::QpFatal), transition::Cause::SendCqOverrun);
            }
            return;
        }
        if !failed && wqe.posted_ns != 0 {
            if let Some(stats) = self.endpoint.stats {
                stats.send_latency(self.qpn, crate::clock::device_ns().saturating_sub(wqe.posted_ns));
            }
        }
        if erred {
            self.after_error(None);
        }
    }

    /// Writes the completion of a request that failed (always written): the QP leaves
    /// RTS first (RC and XRC: ERR; UC, UD: SQE), so that `ibv_query_qp` after
    /// `ibv_poll_cq` returned it finds the QP there, then the CQE; an overrun of the send
    /// CQ moves the QP to ERR with QP_FATAL. The flushes follow ([`QpInner::after_error`]).
    pub(crate) fn complete_failed(self: &Arc<Self>, cqe: Cqe) {
        debug_assert_ne!(cqe.status(), WcStatus::Success);
        let mut erred = false;
        if matches!(self.qp_type, QpType::Uc | QpType::Ud) {
            let _ = self.transition(transition::Expect::Is(QpState::Rts), QpState::Sqe, transition::Cause::SendError);
        } else {
            erred = self.move_to_error(transition::Cause::SendError);
        }
        if self.send_cq.push(cqe).is_err() {
            if erred {
                self.after_error(Some(EventType::QpFatal));
            } else {
                self.enter_error(Some(EventType::QpFatal), transition::Cause::SendCqOverrun);
            }
            return;
        }
        if erred {
            self.after_error(None);
        }
    }

    /// Completes every queued send with WR_FLUSH_ERR (always written, signaled or not);
    /// the requester that carried some of them is dropped.
    pub(crate) fn flush_sq(&self, sq: &mut SendQueue) {
        // ACKs for messages delivered before the error still leave.
        sq.link.release_acks(self);
        sq.conn = None;
        sq.link.reset();
        while let Some(w) = sq.ring.pop() {
            let cqe = Cqe::error(w.wr_id, self.qpn, WcStatus::WrFlushErr, vendor_err::FLUSHED);
            let _ = self.send_cq.push(cqe);
        }
    }

    /// A response from the network for this QP's requester, from the host whose GID is
    /// `from` (`payload`: a READ response's bytes). Dropped if the QP has no requester
    /// running over the network to that host (rxe `check_addr`). Returns whether it was
    /// taken; the send queue then runs.
    pub(crate) fn on_response(self: &Arc<Self>, from: &Gid, response: &Response, payload: &[u8]) -> bool {
        let mut sq = self.sq.lock();
        let SendQueue { ring, req, conn, .. } = &mut *sq;
        let Some(conn) = conn.as_mut() else { return false };
        if !req.network || req.dgid != *from {
            return false;
        }
        let mut answering = Answering { qp: self, req: &mut conn.req, memo: &conn.memo, ring, base: conn.base, now: Instant::now() };
        answering.answer(response, &PacketBytes(payload));
        self.count(&mut conn.req);
        // The queue runs under the same hold: completions retire, the window may open.
        self.progress_and_release(sq, true);
        true
    }
}

/// What a pass of the requester came to.
enum Ran {
    /// Nothing more to do until a post, a response or a timer.
    Idle,
    /// The QP's state may have changed: look again.
    Again,
}

/// What retiring completions came to.
#[derive(PartialEq, Eq)]
enum Retired {
    None,
    Some,
    Failed,
}

/// The requester's side of the responses a link brings back: the core's completer takes
/// each; a READ response's bytes go into the request's own scatter list (LOCAL_WRITE; a
/// fault is LOC_PROT_ERR) before the completer acknowledges them.
struct Answering<'a> {
    qp: &'a QpInner,
    req: &'a mut Requester,
    /// The send queue's memo of the last key checked ([`Conn`]).
    memo: &'a mr::KeyMemo,
    ring: &'a Ring,
    base: u64,
    now: Instant,
}

impl Answers for Answering<'_> {
    fn answer(&mut self, response: &Response, bytes: &dyn ResponseBytes) {
        let (qp, memo, ring, base) = (self.qp, self.memo, self.ring, self.base);
        self.req.handle_response_placing(self.now, response, &mut |p| {
            let Some((w, sges, _)) = ring.nth(p.wqe_id.wrapping_sub(base) as usize) else { return Placed::Dropped };
            let local = match qp.pin_own(memo, sges, Access::LOCAL_WRITE, w.total_len) {
                Ok(l) => l,
                Err(f) => return Placed::Failed { status: WcStatus::LocProtErr, vendor_err: f.local_vendor_err() },
            };
            if p.len == 0 {
                return Placed::Done;
            }
            bytes.copy_into(&local, p.offset as usize, p.len)
        });
    }
}

/// A packet's payload: copied as it is; a failure is the local buffer's (LOC_PROT_ERR).
impl ResponseBytes for PacketBytes<'_> {
    fn copy_into(&self, dst: &PinList<'_>, offset: usize, len: u32) -> Placed {
        let n = (len as usize).min(self.0.len());
        match mr::copy_message(dst, offset, mr::Source::Bytes(&self.0[..n])) {
            Ok(_) => Placed::Done,
            Err(_) => Placed::Failed { status: WcStatus::LocProtErr, vendor_err: vendor_err::LOCAL_ACCESS },
        }
    }
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
        // Set by the hand-over on links that carry the XRCETH.
        xrc_srq: None,
    }
}

/// A held send completion that overran the send CQ when it was published fails the QP as
/// an overrun at write time does ([`QpInner::complete_head`]): ERR, with QP_FATAL.
impl crate::cq::Overran for QpInner {
    fn overran(self: Arc<Self>) {
        self.enter_error(Some(EventType::QpFatal), transition::Cause::SendCqOverrun);
    }
}
