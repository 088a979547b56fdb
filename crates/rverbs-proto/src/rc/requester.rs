//! The send side of a QP: the requester (rxe `rxe_req.c`) and, in `completer.rs`, the
//! completer (`rxe_comp.c`), over one send queue.
//!
//! Read before editing: docs/rocev2-wire.md §1.6 (segmentation, PSNs), §3.1, §3.2, §3.4, §3.5.

use std::collections::VecDeque;
use std::time::Instant;

use super::timer::{Timer, TimerTable};
use super::{packets, Completion, Mode, PostError, Request, RequesterConfig, SendWqe};
use super::MAX_PKT_PER_ACK;
use crate::state::rd_atomic_depth;
use crate::psn::Psn;
use crate::rnr::{ack_timeout, RetryCounter};
use crate::vendor_err;
use crate::verbs::{QpType, SendFlags, WcStatus, WrOpcode};
use crate::wire::{AtomicEthRepr, DethRepr, FethRepr, OpCode, Operation, Placement as FlushPlacement};
use crate::wire::{RethRepr, Selectivity};

/// Where the send side is (docs/rocev2-wire.md §3.2, §3.4). Every change goes through
/// `Requester::set_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequesterState {
    /// Sending as the window, fences and credits allow, and completing on responses.
    Ready,
    /// An RNR NAK arrived: nothing is sent until the RNR timer fires (§3.4 RNR_RETRY).
    RnrWait,
    /// A retry was requested (timeout, NAK-sequence, implicit NAK, RNR timer): the next
    /// `poll_transmit` rewinds to `comp.psn` (go-back-N, §3.2 step 1 `req_retry`).
    Retrying,
    /// The QP is in error: every WQE completes with WR_FLUSH_ERR (§3.4 COMPST_ERROR).
    Error,
}

/// rxe's WQE states (`wqe_state_posted / processing / pending`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WqeState {
    /// Not started.
    Posted,
    /// Some packets sent (or resumed after a retry), not the last.
    Processing,
    /// Every packet sent; waiting for the response (RC).
    Pending,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) wqe: SendWqe,
    pub(super) state: WqeState,
    pub(super) first_psn: Psn,
    pub(super) last_psn: Psn,
    /// Bytes of the message covered by packets already sent; for a READ, the bytes
    /// before the point the (re)issued READ REQUEST starts from.
    pub(super) sent: u32,
    /// Holds a read/atomic credit (§3.2 step 5), returned at completion.
    pub(super) credit: bool,
    /// READ: response packets received in order from `first_psn` (the prefix whose
    /// bytes are placed), kept across re-reads and go-back-N (docs/rocev2-wire.md §3.4,
    /// "READ responses").
    pub(super) got: u32,
    /// READ: a re-read of the rest (from `got`) waits to be sent.
    pub(super) reread: bool,
    /// READ: `got` when the last re-read was asked; while `got` stays there, a gap is a
    /// response of an abandoned stream, not a new loss.
    pub(super) reread_from: Option<u32>,
    /// READ: the highest response position seen since the last re-read was asked; a gap
    /// below it is the re-read's own stream restarting after a loss.
    pub(super) seen_hi: u32,
}

/// The send side of one QP: requester and completer (docs/rocev2-wire.md §3.2, §3.4).
///
/// Calling order, per quinn's `Connection`: mutators (`post`, `enter_error`), then
/// `poll_transmit` until `None`, `poll_timeout`, `poll_completion` until `None`; feed
/// `handle_response` / `handle_timeout` as they come.
#[derive(Debug)]
pub struct Requester {
    pub(super) cfg: RequesterConfig,
    pub(super) state: RequesterState,
    pub(super) queue: VecDeque<Entry>,
    /// Index in `queue` of the WQE the requester works on (`req.wqe_index`).
    pub(super) next: usize,
    pub(super) req_psn: Psn,
    pub(super) comp_psn: Psn,
    /// One past the highest PSN ever transmitted (a READ REQUEST counts all its response
    /// PSNs): `req.psn` goes back on a retry, this does not. A response at or beyond it
    /// answers nothing that was sent (see `handle_response`).
    pub(super) sent_end: Psn,
    noack_pkts: u32,
    pub(super) rd_atomic: u32,
    pub(super) max_rd_atomic: u32,
    pub(super) retry: RetryCounter,
    pub(super) rnr: RetryCounter,
    /// rxe `comp.started_retry`: one retry sequence at a time, except on timeouts.
    pub(super) started_retry: bool,
    /// The completer is inside a READ response stream (rxe `comp.opcode` FIRST/MIDDLE).
    pub(super) in_read_stream: bool,
    /// READ WQEs whose re-read request waits to be sent (`Entry::reread`).
    pub(super) rereads: u32,
    /// A re-read has used a retry since the last progress: the re-reads of one loss event
    /// (several READs short at once) count as one retry, as one go-back-N would.
    pub(super) reread_charged: bool,
    pub(super) timers: TimerTable,
    completions: VecDeque<Completion>,
    cap: usize,
    /// Events counted since the driver last took them ([`Requester::take_counts`]).
    pub(super) counts: RequesterCounts,
}

/// Events of a requester the driver counts (rxe's hardware counters of the same names,
/// `rxe_hw_counters.c`), since it last took them ([`Requester::take_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequesterCounts {
    /// Go-back-N retransmissions started, by the retransmit timer or a NAK (§3.4
    /// ERROR_RETRY with retries left and PSNs outstanding): rxe `completer_retry_err`.
    pub retries: u64,
    /// RNR NAKs the completer took (§3.4 CHECK_ACK): rxe `rcvd_rnr_err`.
    pub rnr_naks: u64,
    /// NAK-sequence errors that moved `comp.psn` forward (§3.4 CHECK_ACK): rxe
    /// `rcvd_seq_err`.
    pub seq_naks: u64,
}

impl Requester {
    /// A send side at RTS with `cfg` (`req.psn = comp.psn = sq_psn`, §1.6).
    pub fn new(cfg: RequesterConfig) -> Requester {
        let cap = cfg.max_send_wr.max(1) as usize;
        let retry = if cfg.retry_cnt_7_infinite {
            RetryCounter::transport_rxe(cfg.retry_cnt)
        } else {
            RetryCounter::transport(cfg.retry_cnt)
        };
        let max_rd_atomic = rd_atomic_depth(cfg.max_rd_atomic);
        Requester {
            cfg,
            state: RequesterState::Ready,
            queue: VecDeque::with_capacity(cap),
            next: 0,
            req_psn: cfg.sq_psn,
            comp_psn: cfg.sq_psn,
            sent_end: cfg.sq_psn,
            noack_pkts: 0,
            rd_atomic: max_rd_atomic,
            max_rd_atomic,
            retry,
            rnr: RetryCounter::rnr(cfg.rnr_retry),
            started_retry: false,
            in_read_stream: false,
            rereads: 0,
            reread_charged: false,
            timers: TimerTable::default(),
            completions: VecDeque::with_capacity(cap),
            cap,
            counts: RequesterCounts::default(),
        }
    }

    /// The events counted since the last call, and starts counting again from zero (the
    /// driver adds them to its counters; the core keeps no totals).
    #[inline]
    pub fn take_counts(&mut self) -> RequesterCounts {
        std::mem::take(&mut self.counts)
    }

    /// The state.
    pub fn state(&self) -> RequesterState {
        self.state
    }

    /// The PSN of the next request packet (`req.psn`).
    pub fn req_psn(&self) -> Psn {
        self.req_psn
    }

    /// The oldest PSN not yet acknowledged (`comp.psn`).
    pub fn comp_psn(&self) -> Psn {
        self.comp_psn
    }

    /// Read/atomic credits left (`req.rd_atomic`).
    pub fn rd_atomic_credits(&self) -> u32 {
        self.rd_atomic
    }

    /// Transport retries left (`None`: infinite).
    pub fn retries_left(&self) -> Option<u8> {
        self.retry.left()
    }

    /// RNR retries left (`None`: infinite).
    pub fn rnr_retries_left(&self) -> Option<u8> {
        self.rnr.left()
    }

    /// The id of the oldest WQE not yet completed.
    pub fn oldest(&self) -> Option<u64> {
        self.queue.front().map(|e| e.wqe.id)
    }

    /// WQEs posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is queued and no timer runs.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.timers.next_timeout().is_none()
    }

    /// `modify_qp` changed the ACK `timeout` of the running QP (ibv_modify_qp(3),
    /// RTS → RTS or SQD → RTS): the next retransmit timer armed uses it.
    pub fn set_timeout(&mut self, timeout: u8) {
        self.cfg.timeout = timeout;
    }

    /// `modify_qp` changed `retry_cnt` of the running QP: a fresh budget of that many
    /// consecutive retries (§3.1).
    pub fn set_retry_cnt(&mut self, retry_cnt: u8) {
        self.cfg.retry_cnt = retry_cnt;
        self.retry = if self.cfg.retry_cnt_7_infinite {
            RetryCounter::transport_rxe(retry_cnt)
        } else {
            RetryCounter::transport(retry_cnt)
        };
    }

    /// `modify_qp` changed `rnr_retry` of the running QP: a fresh RNR budget (§3.1).
    pub fn set_rnr_retry(&mut self, rnr_retry: u8) {
        self.cfg.rnr_retry = rnr_retry;
        self.rnr = RetryCounter::rnr(rnr_retry);
    }

    /// `modify_qp` changed `max_rd_atomic` of the running QP (§3.2 step 5): the credits
    /// are the new depth less those held by outstanding READ/atomic WQEs, so a WQE that
    /// waited for credit (depth 0) goes on once there is some.
    pub fn set_max_rd_atomic(&mut self, max_rd_atomic: u8) {
        let held = self.max_rd_atomic.saturating_sub(self.rd_atomic);
        self.cfg.max_rd_atomic = max_rd_atomic;
        self.max_rd_atomic = rd_atomic_depth(max_rd_atomic);
        self.rd_atomic = self.max_rd_atomic.saturating_sub(held);
    }

    /// The instant the calls since the last one that found no timer armed were given was
    /// `by` older than the real one (a driver that reads the clock only when a timer is
    /// needed): every armed deadline moves `by` later, to where the real instant would
    /// have put it. Only sound when every armed timer was set from that older instant.
    pub fn delay_timers(&mut self, by: std::time::Duration) {
        for t in super::timer::Timer::ALL {
            if let Some(at) = self.timers.get(t) {
                self.timers.set(t, at + by);
            }
        }
    }

    pub(super) fn set_state(&mut self, state: RequesterState) {
        self.state = state;
    }

    fn qp_type(&self) -> QpType {
        match self.cfg.mode {
            Mode::Rc => QpType::Rc,
            Mode::Uc => QpType::Uc,
            Mode::Ud => QpType::Ud,
        }
    }

    /// Queues a send work request.
    ///
    /// Rule: ibv_post_send(3): the opcode must be allowed on the transport (docs/rocev2-wire.md
    /// §1.5); atomics and ATOMIC_WRITE move 8 bytes.
    /// Rule: a WQE posted to a QP in error completes at once with WR_FLUSH_ERR (§4).
    /// Errors: `PostError::Opcode` for opcodes the transport or this core does not run
    /// (local operations LOCAL_INV and BIND_MW are the driver's; one without a wire opcode
    /// on this transport, [`WrOpcode::has_wire_opcode`], is the driver's to fail; an XRC
    /// WQE (`xrc_srq`) on a non-RC machine, or an XRC FLUSH or ATOMIC_WRITE), `NoDestination` for UD
    /// without `ud`, `QueueFull` when `max_send_wr` WQEs are outstanding.
    pub fn post(&mut self, wqe: SendWqe) -> Result<(), PostError> {
        let op = wqe.opcode;
        if !op.allowed_on(self.qp_type())
            || !op.has_wire_opcode(self.qp_type())
            || matches!(op, WrOpcode::LocalInv | WrOpcode::BindMw | WrOpcode::Tso | WrOpcode::Driver1)
        {
            return Err(PostError::Opcode(op));
        }
        if self.cfg.mode == Mode::Ud && wqe.ud.is_none() {
            return Err(PostError::NoDestination);
        }
        // docs/rocev2-wire.md §1.8: XRC is a variant of RC, and its opcode table (as
        // rverbs knows it) has no FLUSH or ATOMIC_WRITE.
        if wqe.xrc_srq.is_some() && (self.cfg.mode != Mode::Rc || matches!(op, WrOpcode::Flush | WrOpcode::AtomicWrite)) {
            return Err(PostError::Opcode(op));
        }
        if self.queue.len() >= self.cap {
            return Err(PostError::QueueFull);
        }
        let mut wqe = wqe;
        if op.is_atomic() || op == WrOpcode::AtomicWrite {
            wqe.length = 8;
        }
        if self.state == RequesterState::Error {
            self.completions.push_back(flushed(wqe.id));
            return Ok(());
        }
        self.queue.push_back(Entry {
            wqe,
            state: WqeState::Posted,
            first_psn: self.req_psn,
            last_psn: self.req_psn,
            sent: 0,
            credit: false,
            got: 0,
            reread: false,
            reread_from: None,
            seen_hi: 0,
        });
        Ok(())
    }

    /// The express lane of a synchronous link (docs/queue-pairs.md, "The express lane"):
    /// the PSN an RC request of `length` bytes would carry if the link executed it and its
    /// responder acknowledged it inside the post, instead of the request being queued;
    /// `None` unless that is what [`Requester::post`], [`Requester::poll_transmit`] and the
    /// ACK would do. That holds when nothing is outstanding (no WQE, no completion, no
    /// timer, `req.psn == comp.psn`), the state is Ready and the message is one packet: the
    /// request is then the oldest, the newest and the only one, and a single ONLY packet
    /// with AckReq whose ACK completes it.
    pub fn express_psn(&self, length: u32) -> Option<Psn> {
        let idle = self.queue.is_empty()
            && self.completions.is_empty()
            && self.timers.next_timeout().is_none()
            && self.req_psn == self.comp_psn
            && !self.in_read_stream;
        (self.cfg.mode == Mode::Rc && self.state == RequesterState::Ready && idle && length <= self.cfg.mtu)
            .then_some(self.req_psn)
    }

    /// As [`Requester::express_psn`] for an RDMA READ of `length` bytes or an atomic (8):
    /// also a credit of `max_rd_atomic` free (§3.2 step 5; idle, every credit is: the
    /// queued way takes one and its one response returns it). With `max_rd_atomic` 0 the
    /// queued way holds the request for good, and so does the lane, by refusing it.
    pub fn express_rd_atomic_psn(&self, length: u32) -> Option<Psn> {
        self.express_psn(length).filter(|_| self.rd_atomic > 0)
    }

    /// The request [`Requester::express_psn`] named was executed and acknowledged: the
    /// state moves exactly as posting it, transmitting its ONLY packet (AckReq) and the ACK
    /// of its PSN would move it (`req.psn`, `comp.psn` and the highest PSN sent advance by
    /// one, the retry budgets refill, no timer is left armed). Its completion, always a
    /// success, is the caller's to write. A READ or an atomic
    /// [`Requester::express_rd_atomic_psn`] named, answered by its one READ RESPONSE ONLY
    /// or ATOMIC ACKNOWLEDGE, moves it the same way (its credit taken and returned).
    pub fn express_acked(&mut self) {
        debug_assert!(self.queue.is_empty() && self.req_psn == self.comp_psn);
        let next = self.req_psn.add(1);
        self.req_psn = next;
        if next.diff(self.sent_end) > 0 {
            self.sent_end = next;
        }
        self.noack_pkts = 0;
        self.reset_retry_counters();
        self.advance_comp_psn(next);
    }

    /// Moves the send side to ERR (a `modify_qp` to ERR, or a fatal error found by the
    /// driver): every outstanding WQE completes with WR_FLUSH_ERR (§3.4 COMPST_ERROR).
    pub fn enter_error(&mut self) {
        self.set_state(RequesterState::Error);
        self.timers.stop_all();
        self.next = 0;
        self.rereads = 0;
        while let Some(e) = self.queue.pop_front() {
            self.completions.push_back(flushed(e.wqe.id));
        }
    }

    /// Completes the oldest WQE with a local error found by the driver (LOC_PROT_ERR when
    /// gathering or scattering fails, LOC_QP_OP_ERR when transmitting fails; §3.2 step 8)
    /// and moves the QP to ERR.
    pub fn fail_oldest(&mut self, status: WcStatus, vendor_err: u32) {
        if !self.queue.is_empty() && self.state != RequesterState::Error {
            self.complete_front(status, vendor_err, None);
        }
    }

    /// The next completion, oldest first.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The earliest timer deadline; call [`Requester::handle_timeout`] once it has passed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Runs the timers due at `now` (docs/rocev2-wire.md §3.4).
    ///
    /// Rule: §3.4 RNR_RETRY: when the RNR timer fires the requester retries from `comp.psn`.
    /// Rule: §3.4 "Retransmit timer": firing is an ERROR_RETRY with `timeout_retry`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timers.take_expired(Timer::Rnr, now) && self.state == RequesterState::RnrWait {
            self.set_state(RequesterState::Retrying);
        }
        if self.timers.take_expired(Timer::Retransmit, now) {
            self.error_retry(true);
        }
    }

    /// The next request packet to send, if the rules allow one now (docs/rocev2-wire.md §3.2).
    ///
    /// Rule: §3.2 step 1: a requested retry rewinds to `comp.psn` first (go-back-N).
    /// Rule: §3.2 step 2: FENCE waits until every earlier READ/atomic completed.
    /// Rule: §3.2 step 4: RC stalls while `req.psn > comp.psn + 128`.
    /// Rule: §3.2 step 5: READ/atomic/ATOMIC_WRITE take a credit of `max_rd_atomic`.
    /// Rule: §3.2 step 6, §1.6: FIRST/MIDDLE/LAST/ONLY by remaining length vs MTU; a READ
    /// REQUEST consumes `max(1, ceil(len/MTU))` PSNs.
    /// Rule: §1.2: AckReq (RC only) on message ends and when more than 64 packets went
    /// without it.
    /// Rule: §3.2 step 7: the retransmit timer is armed if not pending; UC/UD complete at
    /// transmit; §1.6: a UD message above the MTU completes SUCCESS with nothing sent.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Request> {
        let mut r = Request::new(OpCode::Unknown(0), self.req_psn);
        self.poll_transmit_into(now, &mut r).then_some(r)
    }

    /// As [`Requester::poll_transmit`], building the packet into `out` (a driver's buffer:
    /// nothing is moved on the way out); returns whether there is one. `out` is
    /// overwritten whole.
    #[inline]
    pub fn poll_transmit_into(&mut self, now: Instant, out: &mut Request) -> bool {
        loop {
            match self.state {
                RequesterState::Error | RequesterState::RnrWait => return false,
                RequesterState::Retrying => {
                    self.rewind();
                    self.set_state(RequesterState::Ready);
                }
                RequesterState::Ready => {}
            }
            // docs/rocev2-wire.md §3.4 "READ responses": a re-read goes before new requests.
            if self.rereads > 0 && self.emit_reread(now, out) {
                return true;
            }
            let idx = self.next;
            let mtu = self.cfg.mtu;
            let mode = self.cfg.mode;
            let Some(e) = self.queue.get(idx) else { return false };
            // Only what the checks read (the WQE itself stays where it is).
            let (posted, credit, needs_credit) = (e.state == WqeState::Posted, e.credit, e.wqe.needs_credit());
            // A READ resumed by a go-back-N whose responses all arrived already (while an
            // earlier READ was re-read): nothing to ask again.
            if !posted && e.wqe.opcode == WrOpcode::RdmaRead && e.got >= packets(e.wqe.length, mtu) {
                self.req_psn = e.last_psn.add(1);
                self.queue[idx].state = WqeState::Pending;
                self.next += 1;
                continue;
            }
            if posted {
                // §3.2 step 2: earlier READ/atomic WQEs hold credits until they complete.
                // Only those before it: after a go-back-N a READ behind it that was sent
                // keeps its credit, and is sent again after it (waiting for it would wait
                // for ever, with nothing in flight to time out).
                if e.wqe.flags.contains(SendFlags::FENCE) && self.queue.iter().take(idx).any(|p| p.credit) {
                    return false;
                }
                // §1.6 (C10-93.1.1): nothing is sent, the WQE completes with success.
                if mode == Mode::Ud && e.wqe.length > mtu {
                    self.complete_front(WcStatus::Success, vendor_err::NONE, None);
                    continue;
                }
            }
            // §3.2 step 4.
            if mode == Mode::Rc && self.req_psn.diff(self.comp_psn) > self.cfg.max_unacked_psns as i32 {
                return false;
            }
            // §3.2 step 5.
            if mode == Mode::Rc && needs_credit && !credit {
                if self.rd_atomic == 0 {
                    return false;
                }
                self.rd_atomic -= 1;
                self.queue[idx].credit = true;
            }
            let end = self.build(idx, out);
            if mode == Mode::Rc {
                if !self.timers.is_armed(Timer::Retransmit) {
                    if let Some(d) = ack_timeout(self.cfg.timeout) {
                        self.timers.set(Timer::Retransmit, now + d);
                    }
                }
                if end {
                    self.queue[idx].state = WqeState::Pending;
                    self.next += 1;
                }
            } else if end {
                // §3.5: UC and UD complete at transmit (every earlier WQE already has).
                self.comp_psn = self.req_psn;
                self.complete_front(WcStatus::Success, vendor_err::NONE, None);
            }
            return true;
        }
    }

    /// Builds the next packet of WQE `idx` into `r` and advances `req.psn`; returns whether
    /// it ends the message.
    fn build(&mut self, idx: usize, r: &mut Request) -> bool {
        let mtu = self.cfg.mtu;
        let mode = self.cfg.mode;
        let qpn = self.cfg.qpn;
        let psn = self.req_psn;
        // §1.2, coalescing: another request behind this one goes out in the same pass
        // unless the window, a credit or a fence holds it, and each of those ends with an
        // ACK or a response this one does not need to ask for. A packet sent again (a
        // go-back-N) asks as rxe's do: the request behind it may never go out (its bytes
        // cannot be gathered, so the link drops it), and a responder acknowledges a
        // duplicate only if it asks, so a re-sent message that did not ask could be retried
        // until its retries ran out when the ACK its first sending was owed got lost.
        let resending = self.req_psn.diff(self.sent_end) < 0;
        let behind = self.cfg.ack_req_coalescing && !resending && idx + 1 < self.queue.len();
        let e = &mut self.queue[idx];
        if e.state == WqeState::Posted {
            // §3.2 step 7: first/last PSN recorded at the START packet.
            e.first_psn = psn;
            e.last_psn = psn.add(psn_span(&e.wqe, mtu) - 1);
            e.state = WqeState::Processing;
            e.sent = 0;
        }
        // A READ asks from the first response it lacks (§3.2 step 1): its PSN, address
        // and length follow what arrived, here too for a READ that is not the oldest.
        let psn = if e.wqe.opcode == WrOpcode::RdmaRead {
            e.sent = e.got.saturating_mul(mtu).min(e.wqe.length);
            e.first_psn.add(e.got)
        } else {
            psn
        };
        *r = Request::new(OpCode::Unknown(0), psn);
        let seg = segment(mode, qpn, &e.wqe, e.sent, mtu, r);
        e.sent = seg.sent;
        self.req_psn = match e.wqe.opcode {
            WrOpcode::RdmaRead => e.last_psn.add(1),
            _ => psn.add(1),
        };
        if self.req_psn.diff(self.sent_end) > 0 {
            self.sent_end = self.req_psn;
        }
        // §1.2: AckReq on every END packet (with coalescing, one of a SEND or WRITE only
        // when no request is queued behind it, or once it is the 64th packet without one),
        // and when the no-ack count exceeds 64. The END that makes 64 asks where the 65th
        // packet, in the next message, would: its ACK then retires the message it ends.
        // (Otherwise a 64-packet WRITE, which asked at its end without coalescing, made the
        // next message's first packet ask and owed an ACK besides: two ACKs a message, and
        // `ib_write_bw` 64 KiB across two namespaces 7 % slower.)
        if mode == Mode::Rc {
            let send_or_write = matches!(
                e.wqe.opcode,
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm
            );
            let asks_at_end = !behind || !send_or_write;
            r.ack_req = (seg.end && asks_at_end) || {
                self.noack_pkts += 1;
                self.noack_pkts > MAX_PKT_PER_ACK || (seg.end && self.noack_pkts == MAX_PKT_PER_ACK)
            };
            if r.ack_req {
                self.noack_pkts = 0;
            }
        }
        seg.end
    }

    /// Builds the re-read of the oldest READ that waits for one into `r` (docs/rocev2-wire.md
    /// §3.4 "READ responses"): a READ REQUEST with the PSN of the first response it lacks,
    /// the address advanced and the length reduced by what arrived. `req.psn` does not
    /// move: the PSN was sent before, and the responder answers it as a duplicate READ
    /// (§3.3). Returns whether there was one.
    fn emit_reread(&mut self, now: Instant, r: &mut Request) -> bool {
        let mtu = self.cfg.mtu;
        let (mode, qpn) = (self.cfg.mode, self.cfg.qpn);
        // Only a PSN inside the READ is a re-read: one at `first_psn + got` of a READ whose
        // responses all arrived would name the next WQE's PSN, a new request to the
        // responder (the completer clears the flag then; this is the guard).
        let Some(e) = self.queue.iter_mut().find(|e| e.reread && e.got < packets(e.wqe.length, mtu)) else {
            for e in self.queue.iter_mut() {
                e.reread = false;
            }
            self.rereads = 0;
            return false;
        };
        e.reread = false;
        self.rereads = self.rereads.saturating_sub(1);
        e.sent = e.got.saturating_mul(mtu).min(e.wqe.length);
        *r = Request::new(OpCode::Unknown(0), e.first_psn.add(e.got));
        let _ = segment(mode, qpn, &e.wqe, e.sent, mtu, r);
        r.ack_req = true;
        if !self.timers.is_armed(Timer::Retransmit) {
            if let Some(d) = ack_timeout(self.cfg.timeout) {
                self.timers.set(Timer::Retransmit, now + d);
            }
        }
        true
    }

    /// rxe `req_retry` (§3.2 step 1): back to the oldest uncompleted WQE with
    /// `req.psn = comp.psn`; the first WQE skips what was acknowledged (SEND/WRITE:
    /// `comp.psn − first_psn` packets; READ: the bytes already received), later WQEs
    /// restart from scratch with the same PSNs.
    fn rewind(&mut self) {
        self.next = 0;
        self.req_psn = self.comp_psn;
        self.rereads = 0;
        let mtu = self.cfg.mtu;
        let comp_psn = self.comp_psn;
        for (i, e) in self.queue.iter_mut().enumerate() {
            if e.state == WqeState::Posted {
                break;
            }
            e.reread = false;
            e.reread_from = None;
            if e.wqe.opcode == WrOpcode::RdmaRead {
                // A READ keeps what arrived (its PSNs do not move: every WQE before it is
                // re-sent with the same ones) and is asked again from there (`build`).
                e.state = WqeState::Processing;
            } else if i == 0 {
                let done = comp_psn.diff(e.first_psn).max(0) as u32;
                e.sent = match e.wqe.opcode {
                    op if op.carries_payload() || op == WrOpcode::RdmaRead => {
                        done.saturating_mul(mtu).min(e.wqe.length)
                    }
                    _ => 0,
                };
                // Keeps first/last PSN (and the credit): the WQE is not started anew.
                e.state = WqeState::Processing;
            } else {
                e.state = WqeState::Posted;
                e.sent = 0;
            }
        }
    }

    /// Completes the oldest WQE (rxe `do_complete`): returns its credit, writes the
    /// completion if signaled, sig_all, or failed (§3.4), and on failure moves the QP to
    /// ERR and flushes the rest (§3.4 COMPST_ERROR).
    pub(super) fn complete_front(&mut self, status: WcStatus, vendor_err: u32, atomic_original: Option<u64>) {
        let Some(e) = self.queue.pop_front() else { return };
        if e.credit {
            self.rd_atomic += 1;
        }
        if e.reread {
            self.rereads = self.rereads.saturating_sub(1);
        }
        if self.next > 0 {
            self.next -= 1;
        } else if self.cfg.mode == Mode::Rc {
            // The WQE was still being (re)sent: the next one starts after it.
            self.req_psn = self.comp_psn;
        }
        let ok = status == WcStatus::Success;
        if !ok || self.cfg.sq_sig_all || e.wqe.flags.contains(SendFlags::SIGNALED) {
            self.completions.push_back(Completion {
                id: e.wqe.id,
                status,
                opcode: if ok { e.wqe.opcode.wc_opcode() } else { None },
                byte_len: if ok { e.wqe.length } else { 0 },
                vendor_err,
                atomic_original: if ok { atomic_original } else { None },
            });
        }
        if !ok {
            self.enter_error();
        }
    }
}

fn flushed(id: u64) -> Completion {
    Completion {
        id,
        status: WcStatus::WrFlushErr,
        opcode: None,
        byte_len: 0,
        vendor_err: vendor_err::FLUSHED,
        atomic_original: None,
    }
}

/// PSNs a message takes (§1.6): `max(1, ceil(len/MTU))` for SEND, WRITE and READ; one for
/// the rest.
fn psn_span(w: &SendWqe, mtu: u32) -> u32 {
    match w.opcode {
        op if op.carries_payload() || op == WrOpcode::RdmaRead => packets(w.length, mtu),
        _ => 1,
    }
}

/// Where [`segment`] cut a message.
pub(super) struct Segment {
    /// It ends the message.
    pub(super) end: bool,
    /// Bytes of the message sent once it is (READ: the whole request).
    pub(super) sent: u32,
}

/// Makes `r` (whose PSN is set) the packet of `w` that starts at byte `sent`
/// (docs/rocev2-wire.md §1.5, §1.6): the opcode by position (FIRST/MIDDLE/LAST/ONLY from
/// the remaining length and the MTU), RETH on the first packet of a WRITE and on
/// READ/FLUSH/ATOMIC_WRITE, AtomicETH, ImmDt and IETH on the last packet, SE on the last
/// packet of a SEND or WRITE_WITH_IMM, DETH for UD. AckReq is left to the caller. A resumed
/// READ asks for the rest: VA += `sent`, length = what remains (§3.2 step 1).
#[inline(always)]
pub(super) fn segment(mode: Mode, src_qpn: u32, w: &SendWqe, sent: u32, mtu: u32, r: &mut Request) -> Segment {
    // docs/rocev2-wire.md §1.8: an XRC request is RC's with the XRC opcode and an
    // XRCETH naming the target's SRQ, on every packet of the message.
    let transport = if w.xrc_srq.is_some() { crate::wire::Transport::Xrc } else { mode.transport() };
    let op_of = |o: Operation| OpCode::new(transport, o).unwrap_or(OpCode::Unknown(o as u8));
    r.wqe_id = w.id;
    r.xrc_srq = w.xrc_srq;
    match w.opcode {
        WrOpcode::RdmaRead => {
            r.opcode = op_of(Operation::RdmaReadRequest);
            r.reth = Some(RethRepr { va: w.remote_va.wrapping_add(u64::from(sent)), rkey: w.rkey, dma_len: w.length - sent });
            Segment { end: true, sent }
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            let cas = w.opcode == WrOpcode::AtomicCmpAndSwp;
            r.opcode = op_of(if cas { Operation::CompareSwap } else { Operation::FetchAdd });
            r.atomic = Some(AtomicEthRepr {
                va: w.remote_va,
                rkey: w.rkey,
                swap_add: if cas { w.swap } else { w.compare_add },
                compare: if cas { w.compare_add } else { 0 },
            });
            Segment { end: true, sent }
        }
        WrOpcode::AtomicWrite => {
            r.opcode = op_of(Operation::AtomicWrite);
            r.reth = Some(RethRepr { va: w.remote_va, rkey: w.rkey, dma_len: 8 });
            r.payload_len = 8;
            r.atomic_write = Some(w.swap);
            Segment { end: true, sent }
        }
        WrOpcode::Flush => {
            r.opcode = op_of(Operation::Flush);
            r.feth = Some(w.flush.unwrap_or(FethRepr {
                selectivity: Selectivity::MemoryRange,
                placement: FlushPlacement::GLOBAL_VISIBILITY,
            }));
            r.reth = Some(RethRepr { va: w.remote_va, rkey: w.rkey, dma_len: w.length });
            Segment { end: true, sent }
        }
        _ => {
            // SEND and WRITE (§1.5, §1.6).
            let offset = sent;
            let remaining = w.length - offset;
            let first = offset == 0;
            let last = remaining <= mtu;
            let len = remaining.min(mtu);
            let send = matches!(w.opcode, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv);
            use Operation as O;
            let o = match (send, first, last, w.opcode) {
                (true, true, false, _) => O::SendFirst,
                (true, false, false, _) => O::SendMiddle,
                (true, false, true, WrOpcode::SendWithImm) => O::SendLastWithImmediate,
                (true, false, true, WrOpcode::SendWithInv) => O::SendLastWithInvalidate,
                (true, false, true, _) => O::SendLast,
                (true, true, true, WrOpcode::SendWithImm) => O::SendOnlyWithImmediate,
                (true, true, true, WrOpcode::SendWithInv) => O::SendOnlyWithInvalidate,
                (true, true, true, _) => O::SendOnly,
                (false, true, false, _) => O::RdmaWriteFirst,
                (false, false, false, _) => O::RdmaWriteMiddle,
                (false, false, true, WrOpcode::RdmaWriteWithImm) => O::RdmaWriteLastWithImmediate,
                (false, false, true, _) => O::RdmaWriteLast,
                (false, true, true, WrOpcode::RdmaWriteWithImm) => O::RdmaWriteOnlyWithImmediate,
                (false, true, true, _) => O::RdmaWriteOnly,
            };
            r.opcode = op_of(o);
            r.payload_offset = u64::from(offset);
            r.payload_len = len;
            if !send && first {
                r.reth = Some(RethRepr { va: w.remote_va, rkey: w.rkey, dma_len: w.length });
            }
            if last {
                if w.opcode.has_imm() {
                    r.imm = Some(w.imm);
                }
                if w.opcode == WrOpcode::SendWithInv {
                    r.invalidate = Some(w.imm);
                }
                // §1.2: SE on the last packet of a SEND or WRITE_WITH_IMM.
                r.solicited =
                    w.flags.contains(SendFlags::SOLICITED) && (send || w.opcode == WrOpcode::RdmaWriteWithImm);
            }
            if mode == Mode::Ud {
                let ud = w.ud.unwrap_or_default();
                r.deth = Some(DethRepr { qkey: ud.remote_qkey, src_qp: src_qpn });
                r.dest_qpn = Some(ud.remote_qpn);
            }
            Segment { end: last, sent: offset + len }
        }
    }
}
