//! The receive side of a QP (rxe `rxe_resp.c`).
//!
//! Read before editing: docs/rocev2-wire.md §3.3 (the state walk GET_REQ → CHK_PSN →
//! CHK_OP_SEQ → CHK_OP_VALID → CHK_RESOURCE → CHK_LENGTH → CHK_RKEY → EXECUTE → COMPLETE →
//! ACKNOWLEDGE is kept in this order), §3.5 (UC, UD) and §4.

use std::collections::VecDeque;
use std::time::Instant;

use super::{packets, AtomicOp, Delivery, Mode, Placement, ReadSource, RecvCompletion, RecvSlot};
use super::{Request, Response, ResponderConfig, Target, UD_GRH_LEN};
use crate::state::rd_atomic_depth;
use crate::psn::Psn;
use crate::vendor_err;
use crate::verbs::{Access, WcFlags, WcOpcode, WcStatus};
use crate::violation::{Nak, Violation};
use crate::wire::{NakCode, OpCode, Operation, Placement as FlushPlacement, Syndrome, Transport};

/// Where the receive side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponderState {
    /// RTR/RTS: requests are processed.
    Ready,
    /// ERR (a class A/C error, an invalidate failure, or the driver's `enter_error`):
    /// every request is dropped; the driver flushes the receive queue (§3.3).
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MsgKind {
    Send,
    Write,
}

/// The message in progress (rxe `resp.opcode`, `resp.wqe`, `resp.va`, `resp.resid`).
#[derive(Clone, Copy, Debug)]
struct InMsg {
    kind: MsgKind,
    recv: Option<RecvSlot>,
    placed: u64,
    rkey: u32,
    va: u64,
    resid: u32,
    dma_len: u32,
    /// XRC: the SRQ the message's first packet named; its later packets name it too.
    xrc_srq: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResKind {
    Read { rkey: u32, va: u64, len: u32 },
    Atomic { original: u64 },
    /// FLUSH and ATOMIC_WRITE: replayed as an empty READ_RESPONSE_ONLY.
    Empty,
}

/// A responder resource (rxe `struct resp_res`), kept for replays.
#[derive(Clone, Copy, Debug)]
struct Resource {
    first_psn: Psn,
    last_psn: Psn,
    kind: ResKind,
}

/// A queued response.
#[derive(Clone, Copy, Debug)]
enum Work {
    One(Response),
    /// READ responses still to generate, one packet per `poll_transmit`.
    Read { psn: Psn, rkey: u32, va: u64, resid: u32, started: bool },
}

/// The receive side of one QP (docs/rocev2-wire.md §3.3).
///
/// Calling order: `handle_request` for each inbound request (carry out the returned
/// [`Delivery`]), then `poll_transmit` until `None`.
#[derive(Debug)]
pub struct Responder {
    cfg: ResponderConfig,
    state: ResponderState,
    /// `resp.psn`.
    expected: Psn,
    msn: u32,
    sent_psn_nak: bool,
    cur: Option<InMsg>,
    /// UC: the receive WQE of an abandoned message, used by the next one.
    spare_recv: Option<RecvSlot>,
    /// UC: dropping the rest of a message until a START packet (rxe `drop_msg`).
    uc_drop: bool,
    resources: Vec<Option<Resource>>,
    res_next: usize,
    out: VecDeque<Work>,
    /// The PSN of the last SEND or WRITE message that ended without asking for an ACK
    /// (AckReq clear), while no response covering it has been queued since: what
    /// [`Responder::acknowledge_owed`] answers.
    owed: Option<Psn>,
    /// The debt the last response that paid one paid, and that response's PSN: restored
    /// when that response gives way to a NAK ([`Responder::placement_failed`]).
    paid: Option<(Psn, Psn)>,
    /// Events counted since the driver last took them ([`Responder::take_counts`]).
    counts: ResponderCounts,
}

/// Events of an RC responder the driver counts (rxe's hardware counters of the same
/// names, `rxe_hw_counters.c`), since it last took them ([`Responder::take_counts`]).
/// What the driver can see in each [`Delivery`] (an RNR NAK is its `violation`, a
/// receive completion its `recv`) is not counted here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponderCounts {
    /// Requests behind the expected PSN (§3.3 CHK_PSN, "duplicate"): rxe
    /// `duplicate_request`.
    pub duplicates: u64,
    /// Requests ahead of the expected PSN answered with a NAK-sequence (§3.3 CHK_PSN;
    /// later ones are dropped silently until the expected PSN, and not counted, as rxe):
    /// rxe `out_of_seq_request`.
    pub out_of_sequence: u64,
}

impl Responder {
    /// A receive side at RTR with `cfg` (`resp.psn = rq_psn`, §1.6).
    pub fn new(cfg: ResponderConfig) -> Responder {
        let ring = rd_atomic_depth(cfg.max_dest_rd_atomic) as usize;
        Responder {
            cfg,
            state: ResponderState::Ready,
            expected: cfg.rq_psn,
            msn: 0,
            sent_psn_nak: false,
            cur: None,
            spare_recv: None,
            uc_drop: false,
            resources: vec![None; ring],
            res_next: 0,
            out: VecDeque::with_capacity(ring.max(16) * 2),
            owed: None,
            paid: None,
            counts: ResponderCounts::default(),
        }
    }

    /// The events counted since the last call, and starts counting again from zero (the
    /// driver adds them to its counters; the core keeps no totals).
    #[inline]
    pub fn take_counts(&mut self) -> ResponderCounts {
        std::mem::take(&mut self.counts)
    }

    /// Takes new attributes (ibv_modify_qp(3) on the responder QP: access flags, RNR
    /// timer, Q_Key, read/atomic resources) and keeps the sequence state. A new
    /// `max_dest_rd_atomic` depth starts an empty resource ring.
    #[inline]
    pub fn reconfigure(&mut self, cfg: ResponderConfig) {
        if cfg == self.cfg {
            return;
        }
        let ring = rd_atomic_depth(cfg.max_dest_rd_atomic) as usize;
        if ring != self.resources.len() {
            self.resources = vec![None; ring];
            self.res_next = 0;
        }
        self.cfg = cfg;
    }

    /// The attributes.
    #[inline]
    pub fn config(&self) -> &ResponderConfig {
        &self.cfg
    }

    /// The state.
    #[inline]
    pub fn state(&self) -> ResponderState {
        self.state
    }

    /// The next PSN expected (`resp.psn`).
    #[inline]
    pub fn expected_psn(&self) -> Psn {
        self.expected
    }

    /// The message sequence number (completed inbound messages, 24 bits).
    pub fn msn(&self) -> u32 {
        self.msn
    }

    /// Moves the receive side to ERR: nothing more is answered, queued responses are
    /// discarded (so a receive completion that overran the CQ is never ACKed, §3.3 table).
    pub fn enter_error(&mut self) {
        self.state = ResponderState::Error;
        self.out.clear();
        self.owed = None;
        self.cur = None;
    }

    /// Queues the ACK a message owes (docs/rocev2-wire.md §3.3 "ACK generation"): a SEND
    /// or WRITE message that ended without AckReq (a requester that coalesces its
    /// requests for ACKs asks only where it stops, §1.2) and that no response queued since
    /// covers (each of them acknowledges every PSN before its own). The ACK names that
    /// message's last PSN. A driver calls it once a run of received requests is handled,
    /// before it publishes their receive completions, so that a receive completion still
    /// follows an ACK of its message and a requester that stopped gets its ACK without a
    /// retry. Nothing is owed to a requester that asks at every message end (rxe).
    /// Returns whether it queued one.
    pub fn acknowledge_owed(&mut self) -> bool {
        let Some(psn) = self.owed else { return false };
        self.respond(Work::One(Response::ack(psn, Syndrome::ACK, self.msn)));
        true
    }

    /// Queues `w` (a response to a request); one whose PSN is not before the owed message's
    /// acknowledges it. A NAK after the owed message is preceded by the owed ACK: a NAK
    /// acknowledges every PSN before its own too, but one that is lost leaves a responder
    /// in ERR silent, and the requester's retries would then end the first unacknowledged
    /// message (one this responder executed) instead of the refused request. With the ACK
    /// first, either packet arriving completes the owed message, as when it had asked
    /// (docs/network.md, "ACKs where the requester stops").
    fn respond(&mut self, w: Work) {
        let (psn, nak) = match &w {
            Work::One(r) => (r.psn, r.syndrome.is_some_and(|s| !s.is_ack())),
            Work::Read { psn, .. } => (*psn, false),
        };
        if let Some(owed) = self.owed.filter(|&o| psn.diff(o) >= 0) {
            self.owed = None;
            self.paid = Some((owed, psn));
            if nak && psn.diff(owed) > 0 {
                self.out.push_back(Work::One(Response::ack(owed, Syndrome::ACK, self.msn)));
            }
        }
        self.out.push_back(w);
    }

    /// The driver could not place packet `psn`, which the machine had accepted: the
    /// memory its checks passed went away before the copy (deregistered, unmapped), a
    /// violation `v` found at EXECUTE instead of CHK_RKEY. RC (§3.3 table): what was
    /// queued for that packet (its ACK) gives way to the NAK of `v` with its PSN, and the
    /// responder is in ERR once that is out, as for a failed check: the requester
    /// completes with the NAK's status instead of retrying into silence. UC: the
    /// responder ends silently (§3.5).
    pub fn placement_failed(&mut self, psn: Psn, v: Violation) {
        // An earlier message's debt survives, also one this packet's discarded ACK paid:
        // its ACK goes ahead of the NAK (`respond`).
        let owed = self.owed.or(self.paid.filter(|&(_, by)| by == psn).map(|(o, _)| o));
        self.enter_error();
        self.owed = owed.filter(|&o| psn.diff(o) > 0);
        if self.cfg.mode == Mode::Rc {
            let nak = Response { reason: Some(v), ..Response::ack(psn, Syndrome::Nak(nak_code(v)), self.msn) };
            self.respond(Work::One(nak));
        }
    }

    /// The transport of the requests it takes and the responses it sends: the mode's,
    /// or XRC for an XRC target.
    fn transport(&self) -> Transport {
        if self.cfg.xrc {
            Transport::Xrc
        } else {
            self.cfg.mode.transport()
        }
    }

    /// The next response to send: ACKs and NAKs in the order they were decided, READ
    /// responses one packet per call (docs/rocev2-wire.md §3.3 "Execute").
    ///
    /// Rule: §3.3: READ responses are ONLY if the rest fits the MTU at the start, else
    /// FIRST, MIDDLE…, LAST; FIRST/LAST/ONLY carry AETH (ACK, MSN), MIDDLE none; PSN =
    /// request PSN + i. The payload is `source`, re-read by the driver per packet.
    /// Rule: §1.8: an XRC target answers with the XRC opcodes of the same operations.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Response> {
        let mut r = self.next_response(now)?;
        if self.cfg.xrc {
            if let Some(op) = r.opcode.operation() {
                r.opcode = OpCode::new(Transport::Xrc, op).unwrap_or(r.opcode);
            }
        }
        Some(r)
    }

    fn next_response(&mut self, _now: Instant) -> Option<Response> {
        let mtu = self.cfg.mtu;
        let msn = self.msn;
        match self.out.front_mut()? {
            Work::One(_) => match self.out.pop_front() {
                Some(Work::One(r)) => Some(r),
                _ => None,
            },
            Work::Read { psn, rkey, va, resid, started } => {
                let last = *resid <= mtu;
                let len = (*resid).min(mtu);
                let op = match (*started, last) {
                    (false, true) => Operation::RdmaReadResponseOnly,
                    (false, false) => Operation::RdmaReadResponseFirst,
                    (true, false) => Operation::RdmaReadResponseMiddle,
                    (true, true) => Operation::RdmaReadResponseLast,
                };
                let r = Response {
                    opcode: OpCode::new(crate::wire::Transport::Rc, op).unwrap_or(OpCode::RcRdmaReadResponseOnly),
                    psn: *psn,
                    syndrome: (op != Operation::RdmaReadResponseMiddle).then_some(Syndrome::ACK),
                    msn,
                    atomic_original: None,
                    payload_len: len,
                    source: Some(ReadSource { rkey: *rkey, va: *va, len }),
                    reason: None,
                };
                *psn = psn.add(1);
                *va = va.wrapping_add(u64::from(len));
                *resid -= len;
                *started = true;
                if last {
                    self.out.pop_front();
                }
                Some(r)
            }
        }
    }

    /// Whether responses are queued.
    #[inline]
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// Processes one inbound request (docs/rocev2-wire.md §3.3; §3.5 for UC/UD).
    ///
    /// Rule: §1.7: a request of another transport, or to a QP in ERR, is dropped.
    /// Rule: §3.3 CHK_PSN (RC): ahead of `resp.psn` → one NAK-sequence (PSN = expected),
    /// then silence until the expected PSN; behind → a duplicate (see `duplicate`).
    /// Rule: §3.5 UC: a PSN mismatch drops the rest of the message until a START packet.
    /// Rule: §3.3 CHK_OP_SEQ, CHK_OP_VALID, CHK_RESOURCE (RNR NAK with `min_rnr_timer`,
    /// PSN of the packet, expected PSN unchanged), CHK_LENGTH, CHK_RKEY, then EXECUTE.
    /// Rule: §3.3 ACKNOWLEDGE: an ACK only for AckReq (plus NAKs and READ/atomic/FLUSH/
    /// ATOMIC_WRITE responses), PSN = the request's.
    /// Rule: §3.3 table: class A/C errors NAK with the packet's PSN, complete the receive
    /// in progress with an error and move the responder to ERR; UC/UD drop silently.
    pub fn handle_request(&mut self, _now: Instant, req: &Request, target: &mut impl Target) -> Delivery {
        let dropped = Delivery::default();
        if self.state == ResponderState::Error {
            return dropped;
        }
        let Some(op) = req.opcode.operation() else { return dropped };
        if req.opcode.transport() != self.transport() || !op.is_request() {
            return dropped;
        }
        if self.cfg.mode == Mode::Ud {
            return self.handle_ud(req, target);
        }

        // CHK_PSN.
        let d = req.psn.diff(self.expected);
        match self.cfg.mode {
            Mode::Rc => {
                if d > 0 {
                    if !self.sent_psn_nak {
                        self.sent_psn_nak = true;
                        self.counts.out_of_sequence += 1;
                        let nak = Syndrome::Nak(NakCode::PsnSequenceError);
                        self.respond(Work::One(Response::ack(self.expected, nak, self.msn)));
                    }
                    return dropped;
                }
                if d < 0 {
                    self.counts.duplicates += 1;
                    self.duplicate(req, op);
                    return dropped;
                }
                self.sent_psn_nak = false;
                // docs/rocev2-wire.md §1.8: an XRC target serves each request from the SRQ
                // its XRCETH names, which must be of the target QP's XRC domain.
                // A message's later packets name its first packet's SRQ: the receive WQE
                // it holds is that SRQ's.
                if self.cfg.xrc {
                    let selected = match req.xrc_srq {
                        Some(n) if self.cur.is_some_and(|m| m.xrc_srq != Some(n)) => Err(Violation::XrcSrqInvalid),
                        Some(srqn) => target.select_xrc_srq(srqn),
                        None => Err(Violation::XrcSrqInvalid),
                    };
                    if let Err(v) = selected {
                        return self.refuse(req, v, None);
                    }
                }
            }
            _ => {
                if self.uc_drop || d != 0 {
                    self.abandon_uc_message();
                    if !req.opcode.is_start() {
                        self.uc_drop = true;
                        return dropped;
                    }
                    self.uc_drop = false;
                }
            }
        }

        use Operation as O;
        match op {
            O::SendFirst
            | O::SendMiddle
            | O::SendLast
            | O::SendLastWithImmediate
            | O::SendLastWithInvalidate
            | O::SendOnly
            | O::SendOnlyWithImmediate
            | O::SendOnlyWithInvalidate => self.send(req, op, target),
            O::RdmaWriteFirst
            | O::RdmaWriteMiddle
            | O::RdmaWriteLast
            | O::RdmaWriteLastWithImmediate
            | O::RdmaWriteOnly
            | O::RdmaWriteOnlyWithImmediate => self.write(req, op, target),
            O::RdmaReadRequest => self.read(req, target),
            O::CompareSwap | O::FetchAdd => self.atomic(req, op, target),
            O::AtomicWrite => self.atomic_write(req, target),
            O::Flush => self.flush(req, target),
            _ => dropped,
        }
    }

    /// The express lane of a synchronous link (docs/queue-pairs.md, "The express lane"):
    /// whether an RDMA WRITE ONLY without immediate data of `len` bytes (1 ≤ `len` ≤ MTU) at
    /// PSN `psn`, with AckReq, whose R_Key the link checked for REMOTE_WRITE, passes every
    /// check of [`Responder::handle_request`] and is executed: RC, not XRC, not in ERR, no
    /// message in progress and nothing waiting to be sent, the expected PSN, the QP's
    /// REMOTE_WRITE access.
    pub fn express_write_ok(&self, psn: Psn, len: u32) -> bool {
        self.express_idle(psn) && (1..=self.cfg.mtu).contains(&len) && self.cfg.access.contains(Access::REMOTE_WRITE)
    }

    /// The conditions both express checks share: RC, not XRC, not in ERR, no message in
    /// progress, nothing waiting to be sent, and `psn` the expected PSN.
    fn express_idle(&self, psn: Psn) -> bool {
        self.cfg.mode == Mode::Rc
            && !self.cfg.xrc
            && self.state != ResponderState::Error
            && self.cur.is_none()
            && self.out.is_empty()
            && psn == self.expected
    }

    /// The state moves as handling the express request at `psn` and sending its ACK would
    /// (the expected PSN and the MSN advance).
    fn express_advance(&mut self, psn: Psn) {
        self.sent_psn_nak = false;
        self.expected = psn.add(1);
        self.msn = (self.msn + 1) & Psn::MASK;
    }

    /// The WRITE [`Responder::express_write_ok`] accepted was placed: the state moves as
    /// handling it and sending its ACK would (the expected PSN and the MSN advance).
    pub fn express_write_done(&mut self, psn: Psn) {
        self.express_advance(psn);
    }

    /// The express lane for an RDMA READ REQUEST of `len` bytes (1 ≤ `len` ≤ MTU: one
    /// READ RESPONSE ONLY answers it) at PSN `psn`, whose R_Key the link checked for
    /// REMOTE_READ: whether it passes every check of [`Responder::handle_request`] and is
    /// executed: RC, not XRC, not in ERR, no message in progress and nothing waiting to be
    /// sent, the expected PSN, the QP's REMOTE_READ access and a responder resource
    /// (`max_dest_rd_atomic` > 0; CHK_RESOURCE, §3.3).
    pub fn express_read_ok(&self, psn: Psn, len: u32) -> bool {
        self.express_idle(psn) && (1..=self.cfg.mtu).contains(&len) && self.check_rd_atomic(Access::REMOTE_READ).is_ok()
    }

    /// The READ [`Responder::express_read_ok`] accepted was answered, its bytes read from
    /// `rkey`'s `len` bytes at `va` by the link: the state moves as handling it and sending
    /// its READ RESPONSE ONLY would (the expected PSN and the MSN advance, and the READ is
    /// saved in the resource ring, so a duplicate of it is replayed, §3.3).
    pub fn express_read_done(&mut self, psn: Psn, rkey: u32, va: u64, len: u32) {
        self.express_advance(psn);
        self.save_resource(psn, psn, ResKind::Read { rkey, va, len });
    }

    /// The express lane for a CMP_SWAP or FETCH_ADD at `va` and PSN `psn`, whose R_Key the
    /// link checked for REMOTE_ATOMIC on its 8 bytes: whether it passes every check of
    /// [`Responder::handle_request`] and is executed: RC, not XRC, not in ERR, no message
    /// in progress and nothing waiting to be sent, the expected PSN, the QP's
    /// REMOTE_ATOMIC access and a responder resource (CHK_RESOURCE, §3.3), `va` 8-byte
    /// aligned (else the queued way NAKs it).
    pub fn express_atomic_ok(&self, psn: Psn, va: u64) -> bool {
        self.express_idle(psn) && self.check_rd_atomic(Access::REMOTE_ATOMIC).is_ok() && va.is_multiple_of(8)
    }

    /// The atomic [`Responder::express_atomic_ok`] accepted was executed by the link, the
    /// word's value before it `original`: the state moves as executing it and sending its
    /// ATOMIC ACKNOWLEDGE would (the expected PSN and the MSN advance, and `original` is
    /// saved in the resource ring, so a duplicate is answered with it, not executed again,
    /// §3.3).
    pub fn express_atomic_done(&mut self, psn: Psn, original: u64) {
        self.express_advance(psn);
        self.save_resource(psn, psn, ResKind::Atomic { original });
    }

    /// The express lane for a SEND ONLY, with or without immediate data (not with
    /// invalidation), of `len` bytes (≤ MTU) at PSN `psn`, with AckReq: whether it passes
    /// the checks of [`Responder::handle_request`] that do not depend on the receive (RC,
    /// not XRC, not in ERR, no message in progress, nothing waiting to be sent, no held
    /// receive, the expected PSN); the link then takes a receive that holds it and places
    /// it.
    pub fn express_send_ok(&self, psn: Psn, len: u32) -> bool {
        self.express_idle(psn) && self.spare_recv.is_none() && len <= self.cfg.mtu
    }

    /// The SEND [`Responder::express_send_ok`] accepted was placed into receive `wr_id`:
    /// the state moves as handling it and sending its ACK would, and the receive
    /// completion is the one it would give (`solicited`: the request's SE bit; `imm`: its
    /// immediate data, SEND_WITH_IMM).
    pub fn express_send_done(&mut self, psn: Psn, wr_id: u64, len: u32, solicited: bool, imm: Option<u32>) -> RecvCompletion {
        self.express_advance(psn);
        express_recv_completion(wr_id, WcOpcode::Recv, len, solicited, imm)
    }

    /// The express lane for an RDMA WRITE ONLY with immediate data of `len` bytes
    /// (0 ≤ `len` ≤ MTU) at PSN `psn`, with AckReq, whose R_Key (if `len` > 0) the link
    /// checked for REMOTE_WRITE: whether it passes the checks of
    /// [`Responder::handle_request`] that do not depend on the receive it consumes (as
    /// [`Responder::express_send_ok`], and the QP's REMOTE_WRITE access); the link then
    /// places the bytes and takes a receive (none: the queued way's RNR).
    pub fn express_write_imm_ok(&self, psn: Psn, len: u32) -> bool {
        self.express_send_ok(psn, len) && self.cfg.access.contains(Access::REMOTE_WRITE)
    }

    /// The WRITE with immediate [`Responder::express_write_imm_ok`] accepted was placed
    /// and took receive `wr_id`: the state moves as handling it and sending its ACK
    /// would, and the receive completion is the one it would give (RECV_RDMA_WITH_IMM,
    /// the WRITE's length, `imm`).
    pub fn express_write_imm_done(&mut self, psn: Psn, wr_id: u64, len: u32, solicited: bool, imm: u32) -> RecvCompletion {
        self.express_advance(psn);
        express_recv_completion(wr_id, WcOpcode::RecvRdmaWithImm, len, solicited, Some(imm))
    }

    /// CHK_OP_SEQ (§3.3): inside a SEND only SEND_MIDDLE/LAST*, inside a WRITE only
    /// WRITE_MIDDLE/LAST*; a MIDDLE/LAST outside a message is a missing FIRST.
    fn check_op_seq(&self, op: Operation) -> Result<(), Violation> {
        use Operation as O;
        let continues = |kind| self.cur.is_some_and(|m| m.kind == kind);
        let ok = match op {
            O::SendMiddle | O::SendLast | O::SendLastWithImmediate | O::SendLastWithInvalidate => {
                continues(MsgKind::Send)
            }
            O::RdmaWriteMiddle | O::RdmaWriteLast | O::RdmaWriteLastWithImmediate => continues(MsgKind::Write),
            _ => self.cur.is_none(),
        };
        if ok {
            Ok(())
        } else {
            Err(Violation::OpcodeSequence)
        }
    }

    /// CHK_LENGTH for a data packet (§3.3): ONLY ≤ MTU, FIRST/MIDDLE = MTU, LAST 1..MTU.
    fn check_payload(&self, op: Operation, len: u32) -> Result<(), Violation> {
        let mtu = self.cfg.mtu;
        let ok = match op.position() {
            crate::wire::Position::Only => len <= mtu,
            crate::wire::Position::First | crate::wire::Position::Middle => len == mtu,
            crate::wire::Position::Last => (1..=mtu).contains(&len),
        };
        if ok {
            Ok(())
        } else {
            Err(Violation::InvalidLength)
        }
    }

    /// CHK_RESOURCE for a receive WQE: a held one (UC spare) or the next of the RQ/SRQ.
    fn take_recv(&mut self, target: &mut impl Target) -> Option<RecvSlot> {
        self.spare_recv.take().or_else(|| target.take_recv())
    }

    fn send(&mut self, req: &Request, op: Operation, target: &mut impl Target) -> Delivery {
        if let Err(v) = self.check_op_seq(op) {
            return self.refuse(req, v, None);
        }
        let mut msg = match self.cur {
            Some(m) => m,
            None => {
                // CHK_RESOURCE: SEND_FIRST/ONLY take a receive WQE.
                let Some(recv) = self.take_recv(target) else {
                    return self.refuse(req, Violation::ReceiveNotReady, None);
                };
                InMsg { kind: MsgKind::Send, recv: Some(recv), placed: 0, rkey: 0, va: 0, resid: 0, dma_len: 0, xrc_srq: req.xrc_srq }
            }
        };
        let recv = msg.recv.unwrap_or(RecvSlot { wr_id: 0, capacity: 0 });
        if let Err(v) = self.check_payload(op, req.payload_len) {
            return self.refuse(req, v, Some(recv));
        }
        let len = u64::from(req.payload_len);
        if msg.placed + len > recv.capacity {
            return self.refuse(req, Violation::ReceiveTooSmall, Some(recv));
        }
        if let Err(v) = target.check_recv(&recv, msg.placed, len) {
            return self.refuse(req, v, Some(recv));
        }
        // EXECUTE: scatter into the receive WQE.
        let place = Some(Placement::Recv { wr_id: recv.wr_id, offset: msg.placed });
        msg.placed += len;
        self.expected = req.psn.add(1);
        let mut delivery = Delivery { place, recv: None, executed: true, violation: None };
        if op.position() == crate::wire::Position::Last || op.position() == crate::wire::Position::Only {
            self.cur = None;
            self.msn = (self.msn + 1) & Psn::MASK;
            let mut c = recv_success(recv.wr_id, WcOpcode::Recv, msg.placed as u32, req);
            if let Some(imm) = req.imm {
                c.flags |= WcFlags::WITH_IMM;
                c.imm = imm;
            }
            if let Some(rkey) = req.invalidate {
                if target.invalidate(rkey) {
                    c.flags |= WcFlags::WITH_INV;
                    c.imm = rkey;
                } else {
                    // §3.3 Execute, rxe quirk: the receive fails, the responder enters ERR,
                    // no NAK syndrome: the requester still gets its ACK.
                    delivery.recv = Some(RecvCompletion::error(recv.wr_id, WcStatus::RemInvReqErr, vendor_err::REMOTE_INVALIDATE));
                    self.ack(req);
                    self.state = ResponderState::Error;
                    return delivery;
                }
            }
            delivery.recv = Some(c);
        } else {
            self.cur = Some(msg);
        }
        self.ack(req);
        delivery
    }

    fn write(&mut self, req: &Request, op: Operation, target: &mut impl Target) -> Delivery {
        use Operation as O;
        if let Err(v) = self.check_op_seq(op) {
            return self.refuse(req, v, None);
        }
        // CHK_OP_VALID.
        if !self.cfg.access.contains(Access::REMOTE_WRITE) {
            return self.refuse(req, Violation::QpAccessDenied, None);
        }
        // CHK_RESOURCE: a WRITE with immediate takes its receive WQE at LAST/ONLY.
        let recv = if matches!(op, O::RdmaWriteLastWithImmediate | O::RdmaWriteOnlyWithImmediate) {
            match self.take_recv(target) {
                Some(r) => Some(r),
                None => return self.refuse(req, Violation::ReceiveNotReady, None),
            }
        } else {
            None
        };
        let mut msg = match self.cur {
            Some(m) => m,
            None => {
                let Some(reth) = req.reth else {
                    return self.refuse(req, Violation::InvalidLength, recv);
                };
                InMsg {
                    kind: MsgKind::Write,
                    recv: None,
                    placed: 0,
                    rkey: reth.rkey,
                    va: reth.va,
                    resid: reth.dma_len,
                    dma_len: reth.dma_len,
                    xrc_srq: req.xrc_srq,
                }
            }
        };
        // CHK_LENGTH: RETH ≤ 2^31; the payload is what remains, MTU while more remains.
        let len = req.payload_len;
        let last = matches!(op.position(), crate::wire::Position::Last | crate::wire::Position::Only);
        let fits = if last { len == msg.resid } else { len == self.cfg.mtu && msg.resid > len };
        if msg.dma_len > 1 << 31 || self.check_payload(op, len).is_err() || !fits {
            return self.refuse(req, Violation::InvalidLength, recv);
        }
        // CHK_RKEY at the first packet for the whole message; zero length skips it.
        if self.cur.is_none() && msg.dma_len > 0 {
            if let Err(v) = target.check_rkey(msg.rkey, msg.va, u64::from(msg.dma_len), Access::REMOTE_WRITE) {
                return self.refuse(req, v, recv);
            }
        }
        // EXECUTE.
        let place = (len > 0).then_some(Placement::Memory { rkey: msg.rkey, va: msg.va });
        msg.va = msg.va.wrapping_add(u64::from(len));
        msg.resid -= len;
        self.expected = req.psn.add(1);
        let mut delivery = Delivery { place, recv: None, executed: true, violation: None };
        if last {
            self.cur = None;
            self.msn = (self.msn + 1) & Psn::MASK;
            if let Some(r) = recv {
                let mut c = recv_success(r.wr_id, WcOpcode::RecvRdmaWithImm, msg.dma_len, req);
                c.flags |= WcFlags::WITH_IMM;
                c.imm = req.imm.unwrap_or(0);
                delivery.recv = Some(c);
            }
        } else {
            self.cur = Some(msg);
        }
        self.ack(req);
        delivery
    }

    /// CHK_OP_VALID and CHK_RESOURCE of the read/atomic class (§3.3).
    fn check_rd_atomic(&self, need: Access) -> Result<(), Violation> {
        if !self.cfg.access.contains(need) {
            return Err(Violation::QpAccessDenied);
        }
        if self.resources.is_empty() {
            return Err(Violation::NoRdAtomicResources);
        }
        Ok(())
    }

    fn read(&mut self, req: &Request, target: &mut impl Target) -> Delivery {
        if let Err(v) = self.check_op_seq(Operation::RdmaReadRequest) {
            return self.refuse(req, v, None);
        }
        if self.cfg.mode != Mode::Rc {
            return self.refuse(req, Violation::InvalidOpcode, None);
        }
        if let Err(v) = self.check_rd_atomic(Access::REMOTE_READ) {
            return self.refuse(req, v, None);
        }
        let Some(reth) = req.reth else { return self.refuse(req, Violation::InvalidLength, None) };
        if reth.dma_len > 1 << 31 {
            return self.refuse(req, Violation::InvalidLength, None);
        }
        if reth.dma_len > 0 {
            if let Err(v) = target.check_rkey(reth.rkey, reth.va, u64::from(reth.dma_len), Access::REMOTE_READ) {
                return self.refuse(req, v, None);
            }
        }
        // EXECUTE: msn++ at once (C9-148); the resource covers every response PSN.
        self.msn = (self.msn + 1) & Psn::MASK;
        let npkts = packets(reth.dma_len, self.cfg.mtu);
        let kind = ResKind::Read { rkey: reth.rkey, va: reth.va, len: reth.dma_len };
        self.save_resource(req.psn, req.psn.add(npkts - 1), kind);
        self.respond(Work::Read { psn: req.psn, rkey: reth.rkey, va: reth.va, resid: reth.dma_len, started: false });
        self.expected = req.psn.add(npkts);
        Delivery { place: None, recv: None, executed: true, violation: None }
    }

    fn atomic(&mut self, req: &Request, op: Operation, target: &mut impl Target) -> Delivery {
        if let Err(v) = self.check_op_seq(op) {
            return self.refuse(req, v, None);
        }
        if let Err(v) = self.check_rd_atomic(Access::REMOTE_ATOMIC) {
            return self.refuse(req, v, None);
        }
        let Some(a) = req.atomic else { return self.refuse(req, Violation::InvalidLength, None) };
        if a.va % 8 != 0 {
            return self.refuse(req, Violation::MisalignedAtomic, None);
        }
        if let Err(v) = target.check_rkey(a.rkey, a.va, 8, Access::REMOTE_ATOMIC) {
            return self.refuse(req, v, None);
        }
        let aop = if op == Operation::CompareSwap {
            AtomicOp::CompareSwap { compare: a.compare, swap: a.swap_add }
        } else {
            AtomicOp::FetchAdd(a.swap_add)
        };
        let original = match target.atomic(a.rkey, a.va, aop) {
            Ok(v) => v,
            Err(v) => return self.refuse(req, v, None),
        };
        // EXECUTE: save the original for replays, msn++, ATOMIC ACK with the request PSN.
        self.save_resource(req.psn, req.psn, ResKind::Atomic { original });
        self.msn = (self.msn + 1) & Psn::MASK;
        self.push_atomic_ack(req.psn, original);
        self.expected = req.psn.add(1);
        Delivery { place: None, recv: None, executed: true, violation: None }
    }

    fn atomic_write(&mut self, req: &Request, target: &mut impl Target) -> Delivery {
        if let Err(v) = self.check_op_seq(Operation::AtomicWrite) {
            return self.refuse(req, v, None);
        }
        if let Err(v) = self.check_rd_atomic(Access::REMOTE_WRITE) {
            return self.refuse(req, v, None);
        }
        let Some(reth) = req.reth else { return self.refuse(req, Violation::InvalidLength, None) };
        if reth.dma_len != 8 || req.payload_len != 8 {
            return self.refuse(req, Violation::InvalidLength, None);
        }
        if let Err(v) = target.check_rkey(reth.rkey, reth.va, 8, Access::REMOTE_WRITE) {
            return self.refuse(req, v, None);
        }
        if reth.va % 8 != 0 {
            return self.refuse(req, Violation::MisalignedAtomic, None);
        }
        if let Err(v) = target.atomic_write(reth.rkey, reth.va, req.atomic_write.unwrap_or(0)) {
            return self.refuse(req, v, None);
        }
        self.finish_empty(req);
        Delivery { place: None, recv: None, executed: true, violation: None }
    }

    fn flush(&mut self, req: &Request, target: &mut impl Target) -> Delivery {
        if let Err(v) = self.check_op_seq(Operation::Flush) {
            return self.refuse(req, v, None);
        }
        let (Some(feth), Some(reth)) = (req.feth, req.reth) else {
            return self.refuse(req, Violation::InvalidLength, None);
        };
        let mut need = Access::empty();
        if feth.placement.contains(FlushPlacement::GLOBAL_VISIBILITY) {
            need |= Access::FLUSH_GLOBAL;
        }
        if feth.placement.contains(FlushPlacement::PERSISTENCE) {
            need |= Access::FLUSH_PERSISTENT;
        }
        if !self.cfg.access.contains(need) {
            return self.refuse(req, Violation::QpAccessDenied, None);
        }
        if let Err(v) = target.flush(reth.rkey, reth.va, reth.dma_len, feth) {
            return self.refuse(req, v, None);
        }
        self.finish_empty(req);
        Delivery { place: None, recv: None, executed: true, violation: None }
    }

    /// FLUSH / ATOMIC_WRITE executed: resource, msn++, an empty READ_RESPONSE_ONLY (§1.5).
    fn finish_empty(&mut self, req: &Request) {
        if !self.resources.is_empty() {
            self.save_resource(req.psn, req.psn, ResKind::Empty);
        }
        self.msn = (self.msn + 1) & Psn::MASK;
        self.push_empty_read_response(req.psn);
        self.expected = req.psn.add(1);
    }

    /// §3.3: the resource ring (size `max_dest_rd_atomic` rounded up to a power of two)
    /// is overwritten oldest first; rxe does not police the number outstanding.
    fn save_resource(&mut self, first_psn: Psn, last_psn: Psn, kind: ResKind) {
        if self.resources.is_empty() {
            return;
        }
        self.resources[self.res_next] = Some(Resource { first_psn, last_psn, kind });
        self.res_next = (self.res_next + 1) % self.resources.len();
    }

    fn find_resource(&self, psn: Psn) -> Option<Resource> {
        self.resources
            .iter()
            .flatten()
            .find(|r| psn.diff(r.first_psn) >= 0 && psn.diff(r.last_psn) <= 0)
            .copied()
    }

    /// A request behind the expected PSN (§3.3 "duplicate"):
    /// SEND/WRITE are not re-executed (C9-105); one that asks for an ACK (AckReq) is
    /// re-ACKed with its own PSN (every PSN up to it was received: a coalesced ACK that
    /// can never name a PSN the requester is still re-sending a message around), the
    /// others are dropped silently, as new packets without AckReq are;
    /// a READ is replayed from the resource whose PSN range holds it, if its RETH is a
    /// sub-range with the same R_Key; an ATOMIC is answered with the saved original value;
    /// FLUSH / ATOMIC_WRITE with the empty READ response. No resource: silent drop.
    fn duplicate(&mut self, req: &Request, op: Operation) {
        use Operation as O;
        match op {
            O::RdmaReadRequest => {
                let (Some(res), Some(reth)) = (self.find_resource(req.psn), req.reth) else { return };
                let ResKind::Read { rkey, va, len } = res.kind else { return };
                let end = va + u64::from(len);
                let new_end = reth.va.wrapping_add(u64::from(reth.dma_len));
                if reth.rkey != rkey || reth.va < va || new_end > end || new_end < reth.va {
                    return;
                }
                self.respond(Work::Read { psn: req.psn, rkey, va: reth.va, resid: reth.dma_len, started: false });
            }
            O::CompareSwap | O::FetchAdd => {
                if let Some(Resource { kind: ResKind::Atomic { original }, first_psn, .. }) = self.find_resource(req.psn) {
                    if first_psn == req.psn {
                        self.push_atomic_ack(req.psn, original);
                    }
                }
            }
            O::Flush | O::AtomicWrite => {
                if let Some(Resource { kind: ResKind::Empty, first_psn, .. }) = self.find_resource(req.psn) {
                    if first_psn == req.psn {
                        self.push_empty_read_response(req.psn);
                    }
                }
            }
            _ => {
                // Deviation: rxe re-ACKs every duplicate SEND/WRITE packet with the last
                // acknowledged PSN; we only those with AckReq, each with its own PSN. A
                // go-back-N always ends with an AckReq packet (the message's last, or one
                // every 65), and that one is re-ACKed. An ACK naming the last PSN of a
                // message rxe 6.1 is re-sending wedges its send queue: that second ACK
                // completes the WQE while its requester is still re-sending it, and with a
                // one-entry send queue (ibv_rc_pingpong) the next post leaves the
                // requester's index equal to the producer's, so nothing is ever sent
                // again. rxe's AckReq counter runs across an interrupted re-send, so a
                // MIDDLE of the re-sent message can ask for an ACK: answered with its own
                // PSN, it names nothing rxe completes (tests/interop/README.md, "rxe's
                // stalled send queue").
                if req.ack_req {
                    let ack = Response::ack(req.psn, Syndrome::ACK, self.msn);
                    self.respond(Work::One(ack));
                }
            }
        }
    }

    fn push_atomic_ack(&mut self, psn: Psn, original: u64) {
        self.respond(Work::One(Response {
            opcode: OpCode::RcAtomicAcknowledge,
            psn,
            syndrome: Some(Syndrome::ACK),
            msn: self.msn,
            atomic_original: Some(original),
            payload_len: 0,
            source: None,
            reason: None,
        }));
    }

    fn push_empty_read_response(&mut self, psn: Psn) {
        self.respond(Work::One(Response {
            opcode: OpCode::RcRdmaReadResponseOnly,
            psn,
            syndrome: Some(Syndrome::ACK),
            msn: self.msn,
            atomic_original: None,
            payload_len: 0,
            source: None,
            reason: None,
        }));
    }

    /// ACKNOWLEDGE (§3.3): RC, only when the request asked (AckReq), with its PSN; a
    /// message that ends without asking owes one ([`Responder::acknowledge_owed`]).
    fn ack(&mut self, req: &Request) {
        if self.cfg.mode != Mode::Rc {
            return;
        }
        if req.ack_req {
            self.respond(Work::One(Response::ack(req.psn, Syndrome::ACK, self.msn)));
        } else if matches!(req.opcode.position(), Some(crate::wire::Position::Last | crate::wire::Position::Only)) {
            self.owed = Some(req.psn);
        }
    }

    /// A request broke `v` (§3.3 table). `recv`: a receive WQE taken for this message.
    fn refuse(&mut self, req: &Request, v: Violation, recv: Option<RecvSlot>) -> Delivery {
        let recv = recv.or(self.cur.and_then(|m| m.recv));
        let mut delivery = Delivery { violation: Some(v), ..Delivery::default() };
        if self.cfg.mode != Mode::Rc {
            // §3.5: UC drops the message silently; a receive already taken completes in
            // error (as the same-host transport does) and a fatal fault ends the QP.
            self.cur = None;
            self.uc_drop = true;
            if let (Some(r), Some(status)) = (recv, v.recv_status()) {
                delivery.recv = Some(RecvCompletion::error(r.wr_id, status, v.vendor_err()));
                if v.responder_fatal() {
                    self.state = ResponderState::Error;
                    self.out.clear();
                }
            } else if let Some(r) = recv {
                // RNR cannot hold a receive; keep any other for the next message.
                self.spare_recv = Some(r);
            }
            return delivery;
        }
        match v.nak() {
            Nak::Rnr => {
                // §3.3: RNR NAK with the packet's PSN; expected PSN and message unchanged.
                let rnr = Syndrome::RnrNak { timer: self.cfg.min_rnr_timer & 0x1f };
                self.respond(Work::One(Response::ack(req.psn, rnr, self.msn)));
            }
            _ => {
                let nak = Response { reason: Some(v), ..Response::ack(req.psn, Syndrome::Nak(nak_code(v)), self.msn) };
                self.respond(Work::One(nak));
                if let (Some(r), Some(status)) = (recv, v.recv_status()) {
                    delivery.recv = Some(RecvCompletion::error(r.wr_id, status, v.vendor_err()));
                }
                if v.responder_fatal() {
                    // Class A/C: the responder goes to ERR once the NAK is out.
                    self.state = ResponderState::Error;
                    self.cur = None;
                }
            }
        }
        delivery
    }

    /// UC: the message in progress is abandoned; its receive WQE waits for the next one.
    fn abandon_uc_message(&mut self) {
        if let Some(m) = self.cur.take() {
            if let Some(r) = m.recv {
                self.spare_recv = Some(r);
            }
        }
    }

    /// UD (§3.5): SEND_ONLY(±IMM) with a DETH whose Q_Key matches; no receive, a wrong
    /// Q_Key or a payload above the MTU drop silently. The payload lands after the 40-byte
    /// GRH area (§5.3).
    /// Deviation: a receive too small for GRH + payload completes REM_INV_REQ_ERR (it was
    /// already taken), where rxe drops the message (docs/rxe-differences.md,
    /// "A UD receive too small").
    fn handle_ud(&mut self, req: &Request, target: &mut impl Target) -> Delivery {
        let dropped = Delivery::default();
        let Some(deth) = req.deth else { return dropped };
        if deth.qkey != self.cfg.qkey || req.payload_len > self.cfg.mtu {
            return dropped;
        }
        if !matches!(req.opcode.operation(), Some(Operation::SendOnly | Operation::SendOnlyWithImmediate)) {
            return dropped;
        }
        let Some(recv) = target.take_recv() else { return dropped };
        let need = UD_GRH_LEN + u64::from(req.payload_len);
        if recv.capacity < need {
            let c = RecvCompletion::error(recv.wr_id, WcStatus::RemInvReqErr, vendor_err::RECV_TOO_SMALL);
            return Delivery { place: None, recv: Some(c), executed: false, violation: None };
        }
        if let Err(v) = target.check_recv(&recv, 0, need) {
            self.state = ResponderState::Error;
            let c = RecvCompletion::error(recv.wr_id, v.recv_status().unwrap_or(WcStatus::LocQpOpErr), v.vendor_err());
            return Delivery { place: None, recv: Some(c), executed: false, violation: None };
        }
        let mut c = recv_success(recv.wr_id, WcOpcode::Recv, need as u32, req);
        c.flags |= WcFlags::GRH;
        c.src_qp = deth.src_qp;
        if let Some(imm) = req.imm {
            c.flags |= WcFlags::WITH_IMM;
            c.imm = imm;
        }
        self.msn = (self.msn + 1) & Psn::MASK;
        Delivery {
            place: Some(Placement::Recv { wr_id: recv.wr_id, offset: UD_GRH_LEN }),
            recv: Some(c),
            executed: true,
            violation: None,
        }
    }
}

/// The receive completion of an express SEND or WRITE with immediate: as
/// [`recv_success`] with the immediate data, if any.
fn express_recv_completion(wr_id: u64, opcode: WcOpcode, byte_len: u32, solicited: bool, imm: Option<u32>) -> RecvCompletion {
    RecvCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: Some(opcode),
        byte_len,
        flags: if imm.is_some() { WcFlags::WITH_IMM } else { WcFlags::empty() },
        imm: imm.unwrap_or(0),
        src_qp: 0,
        solicited,
        vendor_err: vendor_err::NONE,
    }
}

fn recv_success(wr_id: u64, opcode: WcOpcode, byte_len: u32, req: &Request) -> RecvCompletion {
    RecvCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: Some(opcode),
        byte_len,
        flags: WcFlags::empty(),
        imm: 0,
        src_qp: 0,
        solicited: req.solicited,
        vendor_err: vendor_err::NONE,
    }
}

/// The NAK code of a violation that is not an RNR (§3.3 table, §4).
fn nak_code(v: Violation) -> NakCode {
    match v.nak() {
        Nak::InvalidRequest => NakCode::InvalidRequest,
        Nak::RemoteAccess => NakCode::RemoteAccessError,
        _ => NakCode::RemoteOperationalError,
    }
}
