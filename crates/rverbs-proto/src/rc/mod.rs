//! The RC transport (with UC and UD as modes of the same machines), sans I/O.
//!
//! Read before editing: docs/rocev2-wire.md §1.5–§1.6 (opcodes, segmentation, PSNs), §3.1
//! (constants), §3.2 (requester, rxe `rxe_req.c`), §3.3 (responder, `rxe_resp.c`), §3.4
//! (completer, `rxe_comp.c`), §3.5 (UC and UD) and §4 (completion statuses).
//!
//! Two machines per QP, after quinn-proto's `Connection`:
//! - [`Requester`] is the send side: the requester and the completer of rxe. The driver
//!   [`Requester::post`]s work requests, takes request packets from
//!   [`Requester::poll_transmit`], feeds responses to [`Requester::handle_response`],
//!   calls [`Requester::handle_timeout`] once [`Requester::poll_timeout`] has passed, and
//!   drains [`Requester::poll_completion`].
//! - [`Responder`] is the receive side: [`Responder::handle_request`] checks one request
//!   against the rules (through the device's [`Target`]) and answers with a
//!   [`Delivery`], the plan of what to place where and which receive to complete;
//!   [`Responder::poll_transmit`] yields the ACKs, NAKs, read and atomic responses.
//!
//! Neither machine reads a clock, does I/O or touches payload bytes: packets are
//! descriptors ([`Request`], [`Response`]) that name byte ranges, and the driver gathers
//! and scatters the bytes (from a packet, or straight between registered regions for a
//! same-host transport that has no packets). Time comes in as `Instant`s. Storage is
//! sized at construction; the data path does not allocate.
//!
//! A same-host transport drives it synchronously inside `post_send`: `post` →
//! `poll_transmit` → peer `handle_request` → peer `poll_transmit` → `handle_response` →
//! `poll_completion`. A UDP transport converts the descriptors to and from
//! [`crate::wire::roce::Repr`] ([`Request::to_repr`], [`Request::from_repr`],
//! [`Response::to_repr`], [`Response::from_repr`]) and runs the timers.

mod completer;
mod requester;
mod responder;
pub mod timer;
mod wire;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use core::fmt;

use crate::psn::Psn;
use crate::verbs::{QpType, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode};
use crate::wire::{AtomicEthRepr, DethRepr, FethRepr, OpCode, RethRepr, Syndrome};

pub use self::requester::{Requester, RequesterCounts, RequesterState};
pub use self::responder::{Responder, ResponderCounts, ResponderState};

/// Most PSNs a requester may have unacknowledged (rxe `RXE_MAX_UNACKED_PSNS`,
/// docs/rocev2-wire.md §3.1): it stalls while `req.psn > comp.psn + 128`.
pub const MAX_UNACKED_PSNS: u32 = 128;

/// rxe `RXE_MAX_PKT_PER_ACK` (docs/rocev2-wire.md §1.2, §3.1): AckReq is set on a packet that
/// ends a message, and on the packet where the count of packets sent without AckReq
/// exceeds this.
pub const MAX_PKT_PER_ACK: u32 = 64;

/// The MTU of a transport without packets: the largest message (2^31 bytes, rxe's
/// `max_msg_sz`), so that every message is one ONLY request and one response.
pub const UNSEGMENTED_MTU: u32 = 1 << 31;

/// Bytes a UD receive reserves for the GRH before the payload (docs/rocev2-wire.md §5.3).
pub const UD_GRH_LEN: u64 = 40;

/// The transport a machine runs (docs/rocev2-wire.md §3.5: UC and UD are RC without parts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reliable connected: ACKs, retries, reads and atomics.
    Rc,
    /// Unreliable connected: no ACKs or retries; the requester completes at transmit.
    Uc,
    /// Unreliable datagram: one SEND_ONLY packet per message, DETH, no ACKs.
    Ud,
}

impl Mode {
    /// The mode of a QP type; `None` for types these machines do not run.
    pub const fn of(qp_type: QpType) -> Option<Mode> {
        match qp_type {
            QpType::Rc => Some(Mode::Rc),
            QpType::Uc => Some(Mode::Uc),
            QpType::Ud => Some(Mode::Ud),
            _ => None,
        }
    }

    const fn transport(self) -> crate::wire::Transport {
        match self {
            Mode::Rc => crate::wire::Transport::Rc,
            Mode::Uc => crate::wire::Transport::Uc,
            Mode::Ud => crate::wire::Transport::Ud,
        }
    }
}

/// Where a UD message goes (ibv_post_send(3) `wr.ud`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct UdDest {
    /// The destination QPN.
    pub remote_qpn: u32,
    /// The Q_Key put into the DETH.
    pub remote_qkey: u32,
}

/// A send work request as the requester needs it: no scatter list, since the core never
/// touches payload bytes (the driver gathers `[offset, offset + len)` of the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWqe {
    /// The driver's name for the WQE (`wr_id`, or a slot); echoed in packets and completions.
    pub id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Message length in bytes: the payload of SEND/WRITE, the bytes to READ, the FLUSH
    /// length; 8 for atomics and ATOMIC_WRITE (set by `post`).
    pub length: u32,
    /// Remote virtual address (RETH / AtomicETH VA).
    pub remote_va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Immediate data (`*_WITH_IMM`) or the rkey to invalidate (`SEND_WITH_INV`).
    pub imm: u32,
    /// Compare value of CMP_SWAP, addend of FETCH_ADD.
    pub compare_add: u64,
    /// Swap value of CMP_SWAP; the 8 bytes of ATOMIC_WRITE.
    pub swap: u64,
    /// SIGNALED, FENCE, SOLICITED (ibv_post_send(3)).
    pub flags: SendFlags,
    /// FLUSH selectivity and placement (IBTA Annex A19).
    pub flush: Option<FethRepr>,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// XRC (ibv_post_send(3) `qp_type.xrc.remote_srqn`): the SRQ at the XRC target that
    /// receives the message. When set, every request packet of the WQE is an XRC opcode
    /// (0xA0 + operation) with an XRCETH naming it after the BTH (IBTA Annex A14,
    /// docs/rocev2-wire.md §1.8); the rules are RC's.
    pub xrc_srq: Option<u32>,
}

impl SendWqe {
    /// A template for `..SendWqe::TEMPLATE`: a signaled zero-length SEND with id 0.
    pub const TEMPLATE: SendWqe = SendWqe {
        id: 0,
        opcode: WrOpcode::Send,
        length: 0,
        remote_va: 0,
        rkey: 0,
        imm: 0,
        compare_add: 0,
        swap: 0,
        flags: SendFlags::SIGNALED,
        flush: None,
        ud: None,
        xrc_srq: None,
    };

    /// Whether it needs a read/atomic credit (docs/rocev2-wire.md §3.2 step 5): READ, atomics
    /// and ATOMIC_WRITE; FLUSH does not.
    fn needs_credit(&self) -> bool {
        self.opcode.is_read_or_atomic() || self.opcode == WrOpcode::AtomicWrite
    }

    /// Whether its responses carry data the completer waits for (READ/atomic: a later
    /// response is an implicit NAK for them, docs/rocev2-wire.md §3.4 CHECK_PSN).
    fn is_read_or_atomic(&self) -> bool {
        self.opcode.is_read_or_atomic()
    }
}

/// A request packet, as the requester emits it and the responder takes it.
///
/// Payload bytes are not here: `payload_offset`/`payload_len` name the range of the WQE's
/// message the packet carries; the driver gathers it (or the packet holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Request {
    /// BTH opcode.
    pub opcode: OpCode,
    /// BTH PSN.
    pub psn: Psn,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH SE (solicited event).
    pub solicited: bool,
    /// The WQE this packet belongs to (requester side; 0 on packets from the wire).
    pub wqe_id: u64,
    /// Offset of the payload in the WQE's message.
    pub payload_offset: u64,
    /// Payload length in bytes (pad excluded).
    pub payload_len: u32,
    /// RETH (WRITE FIRST/ONLY, READ, FLUSH, ATOMIC_WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CMP_SWAP, FETCH_ADD).
    pub atomic: Option<AtomicEthRepr>,
    /// ImmDt.
    pub imm: Option<u32>,
    /// IETH: the rkey to invalidate.
    pub invalidate: Option<u32>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// UD: the destination QPN (from the WQE); the driver puts it into the BTH.
    pub dest_qpn: Option<u32>,
    /// ATOMIC_WRITE: the 8 bytes it stores (its payload on the wire).
    pub atomic_write: Option<u64>,
    /// XRCETH (XRC requests): the SRQ at the target that receives the message.
    pub xrc_srq: Option<u32>,
}

impl Request {
    /// The one request that carries the whole of `wqe` with PSN `psn`, for a transport
    /// without packets (the same-host transport executes each message at once, in order,
    /// with nothing lost): the packet [`Requester::poll_transmit`] would build with an
    /// MTU of [`UNSEGMENTED_MTU`], an ONLY opcode, AckReq set on RC.
    #[inline(always)]
    pub fn message(mode: Mode, src_qpn: u32, wqe: &SendWqe, psn: Psn) -> Request {
        let mut r = Request::new(OpCode::Unknown(0), psn);
        requester::segment(mode, src_qpn, wqe, 0, UNSEGMENTED_MTU, &mut r);
        r.ack_req = mode == Mode::Rc;
        r
    }

    /// A request with only an opcode and a PSN, for building by hand.
    pub const fn new(opcode: OpCode, psn: Psn) -> Request {
        Request {
            opcode,
            psn,
            ack_req: false,
            solicited: false,
            wqe_id: 0,
            payload_offset: 0,
            payload_len: 0,
            reth: None,
            atomic: None,
            imm: None,
            invalidate: None,
            feth: None,
            deth: None,
            dest_qpn: None,
            atomic_write: None,
            xrc_srq: None,
        }
    }
}

/// Where the data of a READ response comes from at the responder: the driver gathers
/// `len` bytes at `va` under `rkey` (re-looked-up per packet, docs/rocev2-wire.md §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadSource {
    /// The R_Key of the READ.
    pub rkey: u32,
    /// The first byte.
    pub va: u64,
    /// Bytes.
    pub len: u32,
}

/// A response packet: ACKNOWLEDGE, ATOMIC ACKNOWLEDGE or an RDMA READ response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Response {
    /// BTH opcode.
    pub opcode: OpCode,
    /// BTH PSN.
    pub psn: Psn,
    /// AETH syndrome (absent on READ_RESPONSE_MIDDLE).
    pub syndrome: Option<Syndrome>,
    /// AETH MSN.
    pub msn: u32,
    /// AtomicAckETH: the original value.
    pub atomic_original: Option<u64>,
    /// Payload bytes (READ responses).
    pub payload_len: u32,
    /// Responder side: where the payload comes from (`None` on responses from the wire).
    pub source: Option<ReadSource>,
    /// Responder side: the rule a NAK answers (`None` on ACKs and on responses from the
    /// wire, whose AETH carries only the NAK code). A link that hands the responder's
    /// responses over without packets (the same host) keeps it, and the completer puts its
    /// documented reason ([`crate::violation::Violation::vendor_err`]) into the error
    /// completion instead of the NAK code's generic one.
    pub reason: Option<crate::violation::Violation>,
}

impl Response {
    /// An ACKNOWLEDGE with `syndrome` for `psn`.
    pub const fn ack(psn: Psn, syndrome: Syndrome, msn: u32) -> Response {
        Response {
            opcode: OpCode::RcAcknowledge,
            psn,
            syndrome: Some(syndrome),
            msn,
            atomic_original: None,
            payload_len: 0,
            source: None,
            reason: None,
        }
    }
}

/// A send-side work completion (ibv_poll_cq(3)); written only when the WQE was signaled,
/// the QP signals all, or it failed (docs/rocev2-wire.md §3.4 "Signalled completions").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The WQE's id.
    pub id: u64,
    /// Status (docs/rocev2-wire.md §4).
    pub status: WcStatus,
    /// Opcode; `None` on error (only meaningful on success).
    pub opcode: Option<WcOpcode>,
    /// Bytes: the WR length on success, 0 on error.
    pub byte_len: u32,
    /// The documented reason of an error ([`crate::vendor_err`]), 0 on success.
    pub vendor_err: u32,
    /// The original value of a CMP_SWAP / FETCH_ADD, for the driver to store into the
    /// WQE's local buffer (host byte order) before publishing the completion.
    pub atomic_original: Option<u64>,
}

/// A responder-side receive completion (docs/rocev2-wire.md §4, "inbound SEND", "inbound
/// WRITE_WITH_IMM", and the error rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvCompletion {
    /// The receive WQE.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// RECV or RECV_RDMA_WITH_IMM (on success).
    pub opcode: Option<WcOpcode>,
    /// Bytes placed (UD: + 40 for the GRH); WRITE_WITH_IMM: the RETH DMA length.
    pub byte_len: u32,
    /// WITH_IMM, WITH_INV, GRH.
    pub flags: WcFlags,
    /// Immediate data, or the invalidated rkey with WITH_INV.
    pub imm: u32,
    /// UD: the sender's QPN (DETH SrcQP).
    pub src_qp: u32,
    /// The packet had SE set.
    pub solicited: bool,
    /// The documented reason of an error, 0 on success.
    pub vendor_err: u32,
}

impl RecvCompletion {
    /// The error completion of receive WQE `wr_id` (ibv_poll_cq(3): on an error only
    /// `wr_id`, `status`, `qp_num` and `vendor_err` are valid; the rest is zero).
    pub const fn error(wr_id: u64, status: WcStatus, vendor_err: u32) -> RecvCompletion {
        RecvCompletion {
            wr_id,
            status,
            opcode: None,
            byte_len: 0,
            flags: WcFlags::empty(),
            imm: 0,
            src_qp: 0,
            solicited: false,
            vendor_err,
        }
    }
}

/// A receive WQE the device hands the responder (from the QP's RQ or its SRQ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvSlot {
    /// The WQE's `wr_id`.
    pub wr_id: u64,
    /// The sum of its SGE lengths.
    pub capacity: u64,
}

/// An atomic the responder asks the device to execute (docs/rocev2-wire.md §3.3 "Execute").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// CMP_SWAP: store `swap` if the word equals `compare`.
    CompareSwap {
        /// Compared against the word.
        compare: u64,
        /// Stored on equality.
        swap: u64,
    },
    /// FETCH_ADD.
    FetchAdd(u64),
}

/// The device side of a responder: key checks and receive queues (docs/rocev2-wire.md §3.3).
///
/// The responder decides *whether* and *where*; the target knows the keys and memory.
pub trait Target {
    /// CHK_RKEY: the MR/MW of `rkey` in the QP's PD grants `access` on `[va, va + len)`.
    ///
    /// Errors: `RkeyUnknown`, `RkeyWrongPd`, `RkeyBounds` or `RkeyAccess` (NAK 0x62).
    fn check_rkey(&mut self, rkey: u32, va: u64, len: u64, access: crate::verbs::Access) -> Result<(), crate::violation::Violation>;

    /// CHK_RESOURCE: takes the next receive WQE (RQ or SRQ); `None` when there is none
    /// (RNR).
    fn take_recv(&mut self) -> Option<RecvSlot>;

    /// Whether the receive WQE's scatter list can take `len` bytes at `offset` (lkeys,
    /// PD, bounds, LOCAL_WRITE).
    ///
    /// Errors: `RecvWqeMalformed` (NAK 0x63, responder LOC_QP_OP_ERR).
    fn check_recv(&mut self, slot: &RecvSlot, offset: u64, len: u64) -> Result<(), crate::violation::Violation> {
        let _ = (slot, offset, len);
        Ok(())
    }

    /// Executes an atomic on the 8-byte word at `va` (already checked) and returns the
    /// original value.
    ///
    /// Errors: `MisalignedAtomic` when the word is not 8-byte aligned where it lives.
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, crate::violation::Violation>;

    /// ATOMIC_WRITE: stores the 8 bytes verbatim at `va` (already checked).
    ///
    /// Errors: `MisalignedAtomic`.
    fn atomic_write(&mut self, rkey: u32, va: u64, value: u64) -> Result<(), crate::violation::Violation>;

    /// FLUSH: makes `[va, va + len)` of `rkey` visible/persistent as `feth` asks; the
    /// responder has checked the QP's access, the target checks the key (a whole-MR
    /// flush only checks the key).
    ///
    /// Errors: the rkey violations.
    fn flush(&mut self, rkey: u32, va: u64, len: u32, feth: FethRepr) -> Result<(), crate::violation::Violation>;

    /// SEND_WITH_INV: invalidates `rkey`; `false` if it cannot be invalidated.
    fn invalidate(&mut self, rkey: u32) -> bool;

    /// XRC (IBTA Annex A14, docs/rocev2-wire.md §1.8): the request's XRCETH names SRQ
    /// `srqn`; from here on the receives, the PD of the key checks and the CQ are that
    /// SRQ's. Asked for every request of an XRC target, after CHK_PSN and before any
    /// other check.
    ///
    /// Errors: `XrcSrqInvalid` when no XRC SRQ `srqn` exists or it belongs to another
    /// XRC domain than the target QP (NAK invalid request). The default: no XRC SRQ.
    fn select_xrc_srq(&mut self, srqn: u32) -> Result<(), crate::violation::Violation> {
        let _ = srqn;
        Err(crate::violation::Violation::XrcSrqInvalid)
    }
}

/// Where the driver puts a request's payload (docs/rocev2-wire.md §3.3 "Execute").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Into registered memory: `rkey` was checked for the whole message at its first packet.
    Memory {
        /// The R_Key.
        rkey: u32,
        /// Where the payload's first byte goes.
        va: u64,
    },
    /// Into the receive WQE `wr_id`, at byte `offset` of its scatter list.
    Recv {
        /// The receive WQE.
        wr_id: u64,
        /// Byte offset (UD: after the 40-byte GRH area, which the driver fills).
        offset: u64,
    },
}

/// What the driver must do for one request: place its payload, then publish the receive
/// completion. Responses are taken with [`Responder::poll_transmit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Delivery {
    /// Copy the packet's payload here (`None`: nothing to place, or dropped).
    pub place: Option<Placement>,
    /// Then publish this receive completion. If the receive CQ overflows, call
    /// [`Responder::enter_error`] (no ACK is then sent, docs/rocev2-wire.md §3.3 table).
    pub recv: Option<RecvCompletion>,
    /// The request was executed (false: dropped silently, a duplicate answered from
    /// the responder's state, or refused with a NAK).
    pub executed: bool,
    /// The rule the request broke, when it was refused (RC: a NAK is queued; UC: dropped;
    /// `ReceiveNotReady` is the RNR case). `recv` then holds the error completion of a
    /// receive WQE the message had taken, if the rule completes one.
    pub violation: Option<crate::violation::Violation>,
}

/// Where the driver puts the payload of a READ response at the requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct ReadPlacement {
    /// The READ WQE.
    pub wqe_id: u64,
    /// Byte offset in its local scatter list.
    pub offset: u64,
    /// Bytes (the response's payload length).
    pub len: u32,
}

/// What the driver did with the payload of a READ response
/// ([`Requester::handle_response_placing`]), asked before the completer acknowledges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// The bytes are in the WQE's scatter list.
    Done,
    /// The bytes could not be had (the responder's memory went away on a link without
    /// packets): the response counts as never received, and the retransmit timer
    /// recovers.
    Dropped,
    /// The WQE fails with this status (a local scatter list that no longer takes the
    /// bytes: LOC_PROT_ERR; a remote range that failed after its check: REM_ACCESS_ERR).
    Failed {
        /// The completion status.
        status: WcStatus,
        /// Its documented reason ([`crate::vendor_err`]).
        vendor_err: u32,
    },
}

/// Why `post` refused a work request (ibv_post_send(3): EINVAL / ENOMEM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The send queue is full (ENOMEM).
    QueueFull,
    /// The opcode is not allowed on this transport, or is a local operation the core does
    /// not run (EINVAL).
    Opcode(WrOpcode),
    /// UD without a destination (EINVAL).
    NoDestination,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::QueueFull => f.write_str("send queue full"),
            PostError::Opcode(op) => write!(f, "opcode {op:?} not allowed here"),
            PostError::NoDestination => f.write_str("UD send without a destination"),
        }
    }
}

impl std::error::Error for PostError {}

/// The requester's attributes (ibv_modify_qp(3) at RTS; docs/rocev2-wire.md §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequesterConfig {
    /// Transport.
    pub mode: Mode,
    /// Own QPN (UD: DETH SrcQP).
    pub qpn: u32,
    /// Path MTU in bytes (UD: the port's active MTU).
    pub mtu: u32,
    /// `sq_psn`.
    pub sq_psn: Psn,
    /// `timeout` (5 bits; 0 = no retransmit timer).
    pub timeout: u8,
    /// `retry_cnt` (3 bits).
    pub retry_cnt: u8,
    /// rxe's reading of `retry_cnt` 7 as infinite (docs/rocev2-wire.md §3.1); off by default,
    /// since rverbs reads 7 as seven retries (docs/rxe-differences.md, "`retry_cnt` 7 is
    /// seven retries").
    pub retry_cnt_7_infinite: bool,
    /// `rnr_retry` (3 bits; 7 = infinite).
    pub rnr_retry: u8,
    /// `max_rd_atomic` (rounded up to a power of two, as rxe does).
    pub max_rd_atomic: u8,
    /// `max_send_wr`: queue capacity.
    pub max_send_wr: u32,
    /// `sq_sig_all`.
    pub sq_sig_all: bool,
    /// The most PSNs unacknowledged before the requester stalls (§3.2 step 4): rxe's
    /// [`MAX_UNACKED_PSNS`] by default. IBTA bounds it only by half the PSN space; a
    /// driver may open it wider for paths whose bandwidth-delay product is larger than
    /// 128 packets (the responder is indifferent: it checks sequence, not distance).
    pub max_unacked_psns: u32,
    /// RC: ask for ACKs where the requester stops, not at every message end
    /// (docs/rocev2-wire.md §1.2): a SEND's or WRITE's last packet with another request
    /// queued behind it goes without AckReq (every 65th packet still asks), and the
    /// responder acknowledges what it owes once a run of requests is handled
    /// ([`Responder::acknowledge_owed`]). Off by
    /// default (rxe asks at every message end).
    pub ack_req_coalescing: bool,
}

impl RequesterConfig {
    /// A template for `..RequesterConfig::TEMPLATE`: RC, MTU 1024, PSN 0, timeout 14,
    /// retry_cnt 7, rnr_retry 7, max_rd_atomic 16, 256 WQEs.
    pub const TEMPLATE: RequesterConfig = RequesterConfig {
        mode: Mode::Rc,
        qpn: 0x11,
        mtu: 1024,
        sq_psn: Psn::new(0),
        timeout: 14,
        retry_cnt: 7,
        retry_cnt_7_infinite: false,
        rnr_retry: 7,
        max_rd_atomic: 16,
        max_send_wr: 256,
        sq_sig_all: false,
        max_unacked_psns: MAX_UNACKED_PSNS,
        ack_req_coalescing: false,
    };
}

/// The responder's attributes (ibv_modify_qp(3) at RTR; docs/rocev2-wire.md §3.1, §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Transport.
    pub mode: Mode,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// `rq_psn`.
    pub rq_psn: Psn,
    /// `qp_access_flags`.
    pub access: crate::verbs::Access,
    /// `max_dest_rd_atomic` (the resource ring rounds it up to a power of two).
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer` (5 bits), put into RNR NAKs.
    pub min_rnr_timer: u8,
    /// UD: the QP's Q_Key.
    pub qkey: u32,
    /// An XRC target (XRC_RECV QP, IBTA Annex A14; `mode` is `Rc`): it takes XRC
    /// requests only, asks [`Target::select_xrc_srq`] for the SRQ each one's XRCETH
    /// names, and answers with the XRC response opcodes (docs/rocev2-wire.md §1.8).
    pub xrc: bool,
}

impl ResponderConfig {
    /// A template: RC, MTU 1024, PSN 0, all remote access, 16 resources, RNR timer 1.
    pub const TEMPLATE: ResponderConfig = ResponderConfig {
        mode: Mode::Rc,
        mtu: 1024,
        rq_psn: Psn::new(0),
        access: crate::verbs::Access::LOCAL_WRITE
            .union(crate::verbs::Access::REMOTE_WRITE)
            .union(crate::verbs::Access::REMOTE_READ)
            .union(crate::verbs::Access::REMOTE_ATOMIC)
            .union(crate::verbs::Access::FLUSH_GLOBAL),
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        qkey: 0x1111_1111,
        xrc: false,
    };
}

/// `max(1, ceil(len / mtu))`: packets of a message, and PSNs of a READ (docs/rocev2-wire.md §1.6).
pub const fn packets(len: u32, mtu: u32) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu)
    }
}

