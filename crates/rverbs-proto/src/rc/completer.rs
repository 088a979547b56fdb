//! The completer (rxe `rxe_comp.c`): responses against the oldest WQE.
//!
//! Read before editing: docs/rocev2-wire.md §3.4 (every step below cites it) and §4.

use std::time::Instant;

use super::requester::{Requester, RequesterState, WqeState};
use super::timer::Timer;
use super::{packets, Mode, Placed, ReadPlacement, Response};
use crate::rnr::{ack_timeout, rnr_delay};
use crate::vendor_err;
use crate::verbs::{WcStatus, WrOpcode};
use crate::wire::{NakCode, Operation, Syndrome};

/// What CHECK_PSN decided for one response against the oldest WQE.
enum Check {
    /// Drop the response (COMPST_DONE).
    Drop,
    /// Complete the WQE and look at the next one with the same response (COMPST_COMP_WQE).
    ImplicitAck,
    /// A late response naming the WQE's last PSN: complete it (COMPST_COMP_ACK).
    LateLast,
    /// A READ/atomic was skipped by a later response: retry (implicit NAK).
    ImplicitNak,
    /// Look at the response's contents (COMPST_CHECK_ACK).
    Contents,
}

impl Requester {
    /// Takes one response (RC only; UC/UD have none) and returns where its READ payload
    /// goes, if it carries any the driver must place.
    ///
    /// Rule: a response naming a PSN at or beyond the highest one sent is dropped.
    /// Rule: docs/rocev2-wire.md §3.4 CHECK_PSN: a response beyond a pending SEND/WRITE's last
    /// PSN implicitly acknowledges it (one ACK retires many WQEs); beyond a pending
    /// READ/atomic it is an implicit NAK (retry); a response below `comp.psn` completes the
    /// WQE only if it names its last PSN; an atomic response above `comp.psn` is dropped
    /// (the timer recovers).
    /// Rule: §3.4 "READ responses": a READ response is matched against its own READ
    /// (`take_read_response`): a gap asks that READ again at once from its first missing
    /// response.
    /// Rule: §3.4 CHECK_ACK: response sequence; READ data; ATOMIC ACK original value;
    /// ACK / RNR NAK / NAK 0x60 (implicit ACK of earlier PSNs, then retry) / 0x61
    /// REM_INV_REQ_ERR / 0x62 REM_ACCESS_ERR / 0x63 and unknown codes REM_OP_ERR.
    /// Rule: §3.1: progress refills `retry_cnt` and `rnr_retry`.
    /// Rule: §3.4 "Retransmit timer": re-armed whenever the completer goes idle with PSNs
    /// outstanding.
    /// Deviation: a READ response stream may restart with FIRST/ONLY at `comp.psn` (the
    /// resume point of a go-back-N READ, §3.2 step 1), not only at the WQE's first PSN.
    /// Deviation: a lost READ response is asked for again at once, for that READ alone
    /// (docs/rxe-differences.md, "A lost READ response is asked for again at once, alone").
    pub fn handle_response(&mut self, now: Instant, resp: &Response) -> Option<ReadPlacement> {
        let mut placement = None;
        self.handle_response_placing(now, resp, &mut |p| {
            placement = Some(p);
            Placed::Done
        });
        placement
    }

    /// As [`Requester::handle_response`], with the driver placing a READ response's payload
    /// through `place` before the completer takes the response: what `place` answers
    /// decides whether the READ goes on ([`Placed::Done`]), the response counts as lost
    /// ([`Placed::Dropped`]: nothing changes, the timer recovers), or the WQE fails
    /// ([`Placed::Failed`], and the QP with it: §3.4 COMPST_ERROR). A READ's last response
    /// then completes it only once its bytes are where the application will read them.
    pub fn handle_response_placing(&mut self, now: Instant, resp: &Response, place: &mut dyn FnMut(ReadPlacement) -> Placed) {
        if self.cfg.mode != Mode::Rc || self.state == RequesterState::Error {
            return;
        }
        // Rule: a response can only answer a PSN that was sent. One naming a PSN at or
        // beyond the highest ever transmitted (a "ghost" response: forged, misrouted, or
        // from an old connection) is dropped without effect: an ACK or NAK-sequence for it
        // would move `comp.psn` past `req.psn` (found by the `requester_acks` fuzz target:
        // with only PSN 0 of a three-packet SEND sent, an ACK for PSN 2 acknowledged PSNs
        // 1 and 2 before they were sent, and stopped the retransmit timer).
        if resp.psn.diff(self.sent_end) >= 0 {
            return;
        }
        match self.take_read_response(resp, place) {
            Some(true) => {
                self.kick_retransmit_timer(now);
                return;
            }
            // The driver could not have the payload: as if never received.
            Some(false) => return,
            None => {}
        }
        // §3.4 GET_WQE: nothing started, nothing to complete.
        while let Some(front) = self.queue.front().copied() {
            if front.state == WqeState::Posted {
                break;
            }
            match self.check_psn(resp, &front) {
                Check::Drop => break,
                Check::ImplicitAck => {
                    self.reset_retry_counters();
                    self.advance_comp_psn(front.last_psn.add(1));
                    self.complete_front(WcStatus::Success, vendor_err::NONE, None);
                }
                Check::LateLast => {
                    self.complete_front(WcStatus::Success, vendor_err::NONE, None);
                    break;
                }
                Check::ImplicitNak => {
                    self.error_retry(false);
                    break;
                }
                Check::Contents => {
                    if !self.check_ack(now, resp, &front, place) {
                        // The driver could not have the payload: as if never received.
                        return;
                    }
                    break;
                }
            }
        }
        self.kick_retransmit_timer(now);
    }

    /// docs/rocev2-wire.md §3.4 "READ responses": a READ response for a READ WQE with only
    /// READs before it, matched by its PSN against that WQE (not only the oldest). Returns
    /// `None` when the response is not one of those (the in-order completer takes it),
    /// `Some(false)` when `place` dropped it, `Some(true)` when it was taken or dropped here.
    ///
    /// Rule: a response at the next position of its READ (`got`) is placed and taken, and
    /// completes the READ at its last PSN once every earlier WQE has completed; one at an
    /// earlier position is a duplicate, dropped.
    /// Rule: one beyond that position is a gap: the READ is asked again at once from its
    /// first missing response (PSN `first_psn + got`, VA + the bytes received, length the
    /// rest), and the responses of the abandoned stream that follow are dropped without
    /// asking again, until the new stream is seen restarting below them (its own first
    /// response lost).
    /// Rule: a response of a later READ ends the streams of the earlier ones: a READ that
    /// lacks its last responses is asked again for them.
    /// Rule: §3.4 ERROR_RETRY: the re-reads asked between two responses that make
    /// progress use one retry together; progress refills the budget (§3.1).
    /// Rule: SEND/WRITE WQEs before the READ are implicitly acknowledged (CHECK_PSN).
    /// Deviation: rxe's completer matches every response against the oldest WQE only: a
    /// gap inside a READ waits for the retransmit timer, and a response of a later READ is
    /// an implicit NAK that re-sends every request from `comp.psn` (go-back-N), each later
    /// READ in full (docs/rxe-differences.md, "A lost READ response is asked for again at
    /// once, alone").
    fn take_read_response(&mut self, resp: &Response, place: &mut dyn FnMut(ReadPlacement) -> Placed) -> Option<bool> {
        use Operation as O;
        let op = resp.opcode.operation()?;
        if !matches!(op, O::RdmaReadResponseFirst | O::RdmaReadResponseMiddle | O::RdmaReadResponseLast | O::RdmaReadResponseOnly) {
            return None;
        }
        // §3.4 CHECK_PSN: a response beyond a pending SEND/WRITE acknowledges it.
        while let Some(front) = self.queue.front().copied() {
            if front.state != WqeState::Pending || front.wqe.is_read_or_atomic() || resp.psn.diff(front.last_psn) <= 0 {
                break;
            }
            self.reset_retry_counters();
            self.advance_comp_psn(front.last_psn.add(1));
            self.complete_front(WcStatus::Success, vendor_err::NONE, None);
        }
        let mut found = None;
        for (i, e) in self.queue.iter().enumerate() {
            if e.state == WqeState::Posted || e.wqe.opcode != WrOpcode::RdmaRead {
                break;
            }
            if resp.psn.diff(e.first_psn) >= 0 && resp.psn.diff(e.last_psn) <= 0 {
                found = Some(i);
                break;
            }
        }
        let j = found?;
        // The streams of the READs before this one have ended.
        for i in 0..j {
            let e = &self.queue[i];
            if e.got < packets(e.wqe.length, self.cfg.mtu) && !self.read_gap(i, None) {
                return Some(true);
            }
        }
        let mtu = self.cfg.mtu;
        let e = self.queue[j];
        let pos = resp.psn.diff(e.first_psn) as u32;
        if pos < e.got {
            return Some(true);
        }
        if pos > e.got {
            self.read_gap(j, Some(pos));
            return Some(true);
        }
        // §3.4 CHECK_ACK: FIRST, LAST and ONLY carry an ACK; a stream starts with FIRST or
        // ONLY (at the READ's first PSN, or where a re-read asked); FIRST and MIDDLE carry
        // the MTU, LAST and ONLY what remains.
        let aeth_ack = resp.syndrome.is_some_and(crate::wire::Syndrome::is_ack);
        let offset = u64::from(pos) * u64::from(mtu);
        let end = offset + u64::from(resp.payload_len);
        let last = matches!(op, O::RdmaReadResponseLast | O::RdmaReadResponseOnly);
        let whole = u64::from(e.wqe.length);
        if (op != O::RdmaReadResponseMiddle && !aeth_ack)
            || (pos == 0 && !resp.opcode.is_start())
            || end > whole
            || (last && end != whole)
            || (!last && resp.payload_len != mtu)
        {
            self.bad_response(WcStatus::BadRespErr);
            return Some(true);
        }
        match place(ReadPlacement { wqe_id: e.wqe.id, offset, len: resp.payload_len }) {
            Placed::Done => {}
            Placed::Dropped => return Some(false),
            // A later READ's failure shows once it is the oldest (its responses are asked
            // again then); the oldest fails now.
            Placed::Failed { status, vendor_err } => {
                if j == 0 {
                    self.complete_front(status, vendor_err, None);
                    return Some(true);
                }
                return Some(false);
            }
        }
        let e = &mut self.queue[j];
        e.got += 1;
        e.seen_hi = e.seen_hi.max(pos);
        if e.reread && e.got >= packets(e.wqe.length, mtu) {
            // Every response arrived (from the abandoned stream, or an earlier re-read):
            // nothing to ask. A READ REQUEST at `first_psn + got` would name the next
            // WQE's PSN, a new request to the responder.
            e.reread = false;
            self.rereads = self.rereads.saturating_sub(1);
        }
        self.reset_retry_counters();
        self.complete_received_reads();
        Some(true)
    }

    /// A gap in the responses of READ `i`: one at position `pos`, or (`None`) the stream
    /// ended (a later READ answered) before its last response. Asks for a re-read from
    /// the first missing response unless one was asked from there and this is a response
    /// of the abandoned stream (see `take_read_response`). Returns `false` when the retry
    /// budget ran out and the QP entered ERR.
    fn read_gap(&mut self, i: usize, pos: Option<u32>) -> bool {
        let total = packets(self.queue[i].wqe.length, self.cfg.mtu);
        let e = &mut self.queue[i];
        let p = pos.unwrap_or(total);
        let asked_here = e.reread_from == Some(e.got);
        // The stream asked for restarted below what the abandoned one reached: its own
        // first response was lost.
        let restart = asked_here && pos.is_some() && p < e.seen_hi;
        e.seen_hi = e.seen_hi.max(p);
        // Not yet (re)sent whole (a go-back-N will ask it again), already asked, or a
        // response of the abandoned stream.
        if e.state != WqeState::Pending || e.reread || (asked_here && !restart) {
            return true;
        }
        // §3.4 ERROR_RETRY: a retry, one for all the re-reads until the next progress
        // (which refills the budget, §3.1).
        if !self.reread_charged {
            if !self.retry.consume() {
                self.complete_front(WcStatus::RetryExcErr, vendor_err::RETRY_EXHAUSTED, None);
                return false;
            }
            self.counts.retries += 1; // rxe's completer_retry_err: a retry started
            self.reread_charged = true;
        }
        let e = &mut self.queue[i];
        e.reread = true;
        e.reread_from = Some(e.got);
        e.seen_hi = p;
        self.rereads += 1;
        true
    }

    /// Completes the READs at the front whose responses have all arrived, moves
    /// `comp.psn` to the first response the oldest READ lacks, and notes whether it is
    /// inside its response stream.
    fn complete_received_reads(&mut self) {
        let mtu = self.cfg.mtu;
        while let Some(f) = self.queue.front() {
            if f.wqe.opcode != WrOpcode::RdmaRead || f.state == WqeState::Posted || f.got < packets(f.wqe.length, mtu) {
                break;
            }
            let next = f.last_psn.add(1);
            self.advance_comp_psn(next);
            self.complete_front(WcStatus::Success, vendor_err::NONE, None);
        }
        self.in_read_stream = false;
        if let Some(f) = self.queue.front() {
            if f.wqe.opcode == WrOpcode::RdmaRead && f.state != WqeState::Posted {
                let at = f.first_psn.add(f.got);
                self.in_read_stream = f.got > 0;
                self.advance_comp_psn(at);
            }
        }
    }

    /// §3.4 CHECK_PSN.
    fn check_psn(&self, resp: &Response, front: &super::requester::Entry) -> Check {
        if resp.psn.diff(front.last_psn) > 0 {
            if front.state != WqeState::Pending {
                return Check::Drop;
            }
            if front.wqe.is_read_or_atomic() {
                return Check::ImplicitNak;
            }
            return Check::ImplicitAck;
        }
        let d = resp.psn.diff(self.comp_psn);
        if d < 0 {
            if resp.psn == front.last_psn {
                Check::LateLast
            } else if resp.opcode.operation() == Some(Operation::Acknowledge) && self.in_read_stream {
                // A NAK inside a READ response stream (rxe check_psn).
                Check::Contents
            } else {
                Check::Drop
            }
        } else if d > 0 && front.wqe.is_read_or_atomic() {
            Check::Drop
        } else {
            Check::Contents
        }
    }

    /// §3.4 CHECK_ACK and what follows it.
    /// Returns `false` when `place` dropped the response.
    fn check_ack(
        &mut self,
        now: Instant,
        resp: &Response,
        front: &super::requester::Entry,
        place: &mut dyn FnMut(ReadPlacement) -> Placed,
    ) -> bool {
        use Operation as O;
        let Some(op) = resp.opcode.operation() else {
            self.bad_response(WcStatus::BadRespErr);
            return true;
        };
        // Sequence: outside a READ stream only START packets; inside only MIDDLE/LAST, a
        // NAK, or a restart at the resume point.
        let in_sequence = if !self.in_read_stream {
            resp.opcode.is_start()
        } else {
            match op {
                O::Acknowledge | O::RdmaReadResponseMiddle | O::RdmaReadResponseLast => true,
                O::RdmaReadResponseFirst | O::RdmaReadResponseOnly => resp.psn == self.comp_psn,
                _ => false,
            }
        };
        if !in_sequence {
            // §3.4: "use IBV_WC_BAD_RESP_ERR as IBTA intends".
            self.bad_response(WcStatus::BadRespErr);
            return true;
        }
        let aeth_ack = resp.syndrome.is_some_and(Syndrome::is_ack);
        match op {
            O::RdmaReadResponseFirst | O::RdmaReadResponseMiddle | O::RdmaReadResponseLast | O::RdmaReadResponseOnly => {
                if op != O::RdmaReadResponseMiddle && !aeth_ack {
                    self.bad_response(WcStatus::BadRespErr);
                    return true;
                }
                match front.wqe.opcode {
                    WrOpcode::RdmaRead => {
                        let mtu = u64::from(self.cfg.mtu);
                        let offset = resp.psn.diff(front.first_psn).max(0) as u64 * mtu;
                        let end = offset + u64::from(resp.payload_len);
                        let last = matches!(op, O::RdmaReadResponseLast | O::RdmaReadResponseOnly);
                        let whole = u64::from(front.wqe.length);
                        if end > whole || (last && end != whole) || (!last && u64::from(resp.payload_len) != mtu) {
                            self.bad_response(WcStatus::BadRespErr);
                            return true;
                        }
                        let placement = ReadPlacement { wqe_id: front.wqe.id, offset, len: resp.payload_len };
                        match place(placement) {
                            Placed::Done => {}
                            Placed::Dropped => return false,
                            Placed::Failed { status, vendor_err } => {
                                self.complete_front(status, vendor_err, None);
                                return true;
                            }
                        }
                        self.advance_comp_psn(resp.psn.add(1));
                        self.reset_retry_counters();
                        self.in_read_stream = !last;
                        if last {
                            self.complete_front(WcStatus::Success, vendor_err::NONE, None);
                        }
                        true
                    }
                    // §1.5: FLUSH and ATOMIC_WRITE are answered by an empty READ_RESPONSE_ONLY.
                    WrOpcode::Flush | WrOpcode::AtomicWrite if op == O::RdmaReadResponseOnly && resp.payload_len == 0 => {
                        self.advance_comp_psn(resp.psn.add(1));
                        self.reset_retry_counters();
                        self.complete_front(WcStatus::Success, vendor_err::NONE, None);
                        true
                    }
                    // §4: "read response to a non-read WQE → FATAL_ERR (rxe)".
                    _ => {
                        self.bad_response(WcStatus::FatalErr);
                        true
                    }
                }
            }
            O::AtomicAcknowledge => {
                if !front.wqe.opcode.is_atomic() || !aeth_ack {
                    self.bad_response(WcStatus::BadRespErr);
                    return true;
                }
                self.advance_comp_psn(resp.psn.add(1));
                self.reset_retry_counters();
                self.complete_front(WcStatus::Success, vendor_err::NONE, Some(resp.atomic_original.unwrap_or(0)));
                true
            }
            O::Acknowledge => {
                match resp.syndrome {
                    // Rule: a READ or an atomic completes only with its data (READ
                    // responses, ATOMIC ACKNOWLEDGE). A plain ACK naming one of its PSNs
                    // (rxe re-ACKs a duplicate with `resp.psn − 1`, which can be a READ's
                    // last PSN) is dropped; the retransmit timer recovers the data. Taken,
                    // it completed the WQE with success and nothing placed, or an atomic
                    // without its original value (found by the `requester_acks` fuzz
                    // target).
                    Some(Syndrome::Ack { .. }) if front.wqe.is_read_or_atomic() => {}
                    Some(Syndrome::Ack { .. }) => {
                        self.reset_retry_counters();
                        // The ACK of the WQE's last PSN completes it, even while a
                        // go-back-N is re-sending it (not `Pending` again yet): every PSN
                        // up to it was sent (see the ghost rule above) and received. Left
                        // uncompleted, `comp.psn` would pass its last PSN and the next
                        // rewind would re-send it from its end: an empty LAST packet with
                        // a PSN of its own that shifted every later PSN (found by the
                        // `requester_acks` fuzz target).
                        if resp.psn == front.last_psn {
                            self.advance_comp_psn(resp.psn.add(1));
                            self.in_read_stream = false;
                            self.complete_front(WcStatus::Success, vendor_err::NONE, None);
                        } else {
                            self.advance_comp_psn(resp.psn.add(1));
                        }
                    }
                    Some(Syndrome::RnrNak { timer }) => {
                        self.counts.rnr_naks += 1;
                        self.rnr_retry(now, timer)
                    }
                    Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
                        // A NAK implicitly acknowledges every earlier PSN. One that moves
                        // `comp.psn` forward is progress: the retry budget counts
                        // consecutive failures (§3.1), and the go-back-N it asks for starts
                        // now rather than when the timer fires.
                        // Deviation: rxe resets the counters (and `started_retry`) on ACKs
                        // only, so a second loss before the next ACK waits for the
                        // retransmit timer, and under steady loss a window of 64-packet
                        // messages spends its `retry_cnt` on timeouts while the peer answers
                        // (docs/rxe-differences.md, "A sequence NAK refills the retry counters").
                        if resp.psn.diff(self.comp_psn) > 0 {
                            self.counts.seq_naks += 1;
                            self.comp_psn = resp.psn;
                            self.reset_retry_counters();
                        }
                        self.error_retry(false);
                    }
                    // The NAK code decides the status; the rule the responder named, when
                    // the link kept it (`Response::reason`), the vendor error.
                    Some(Syndrome::Nak(NakCode::InvalidRequest)) => {
                        self.complete_front(WcStatus::RemInvReqErr, reason_or(resp, vendor_err::REMOTE_INVALID), None)
                    }
                    Some(Syndrome::Nak(NakCode::RemoteAccessError)) => {
                        self.complete_front(WcStatus::RemAccessErr, reason_or(resp, vendor_err::REMOTE_ACCESS), None)
                    }
                    Some(Syndrome::Nak(_)) => {
                        self.complete_front(WcStatus::RemOpErr, reason_or(resp, vendor_err::REMOTE_OP), None)
                    }
                    None => self.bad_response(WcStatus::BadRespErr),
                }
                true
            }
            _ => {
                self.bad_response(WcStatus::BadRespErr);
                true
            }
        }
    }

    fn bad_response(&mut self, status: WcStatus) {
        self.complete_front(status, vendor_err::BAD_RESPONSE, None);
    }

    /// `comp.psn = max(comp.psn, psn)`.
    pub(super) fn advance_comp_psn(&mut self, psn: crate::psn::Psn) {
        if psn.diff(self.comp_psn) > 0 {
            self.comp_psn = psn;
        }
    }

    /// §3.1 `reset_retry_counters`: counts are of consecutive failures.
    pub(super) fn reset_retry_counters(&mut self) {
        self.retry.reset();
        self.rnr.reset();
        self.started_retry = false;
        self.reread_charged = false;
    }

    /// §3.4 ERROR_RETRY (timeout, NAK-sequence, implicit NAK).
    ///
    /// Rule: ignored while a retry is under way unless it is a timeout; `retry_cnt > 0`:
    /// decrement (unless infinite) and, if PSNs are outstanding, retry from `comp.psn`;
    /// 0: the WQE completes with RETRY_EXC_ERR.
    pub(super) fn error_retry(&mut self, timeout: bool) {
        let Some(front) = self.queue.front() else { return };
        if front.state == WqeState::Posted {
            return;
        }
        if self.started_retry && !timeout {
            return;
        }
        if self.retry.consume() {
            if self.req_psn.diff(self.comp_psn) > 0 {
                self.counts.retries += 1;
                self.started_retry = true;
                // The RNR timer, if running, still gates the retry (rxe `wait_for_rnr_timer`).
                if self.state == RequesterState::Ready {
                    self.set_state(RequesterState::Retrying);
                }
            }
        } else {
            self.complete_front(WcStatus::RetryExcErr, vendor_err::RETRY_EXHAUSTED, None);
        }
    }

    /// §3.4 RNR_RETRY: wait `rnr_delay(code)`, then retry from `comp.psn`; exhausted:
    /// RNR_RETRY_EXC_ERR.
    ///
    /// Deviation: a second RNR NAK while already waiting (a duplicate) is ignored
    /// instead of using another retry.
    fn rnr_retry(&mut self, now: Instant, code: u8) {
        if self.state == RequesterState::RnrWait {
            return;
        }
        if self.rnr.consume() {
            self.set_state(RequesterState::RnrWait);
            self.timers.stop(Timer::Retransmit);
            self.timers.set(Timer::Rnr, now + rnr_delay(code));
        } else {
            self.complete_front(WcStatus::RnrRetryExcErr, vendor_err::RNR_EXHAUSTED, None);
        }
    }

    /// §3.4 "Retransmit timer ... kicked down the road": after each response, re-armed if
    /// PSNs are outstanding, stopped if none are.
    fn kick_retransmit_timer(&mut self, now: Instant) {
        if !matches!(self.state, RequesterState::Ready | RequesterState::Retrying) {
            return;
        }
        match ack_timeout(self.cfg.timeout) {
            Some(d) if self.req_psn.diff(self.comp_psn) > 0 => self.timers.set(Timer::Retransmit, now + d),
            _ => self.timers.stop(Timer::Retransmit),
        }
    }
}

/// The vendor error of a NAK: the responder's rule when the response kept it, else the NAK
/// code's `generic` one.
fn reason_or(resp: &Response, generic: u32) -> u32 {
    resp.reason.map_or(generic, crate::violation::Violation::vendor_err)
}
