//! The BTH OpCode and what each one implies: IBTA vol. 1, ch. 9 (opcode table, header order)
//! and rxe `rxe_opcode.c` (`rxe_opcode[]`: each opcode's headers, offsets and masks).
//!
//! An opcode is a transport (high 3 bits) and an operation (low 5 bits). RC, UC and UD follow
//! the table of `rxe_opcode.c`; XRC (0xA0) has the RC operations through
//! SEND_ONLY_WITH_INVALIDATE (the XRC entries of Linux's `ib_pack.h`, without FLUSH and
//! ATOMIC_WRITE), with an XRCETH after the BTH of every request; CNP is 0x81. RD and
//! manufacturer-specific opcodes are [`OpCode::Unknown`], which rxe drops (`rxe_recv.c`).

use super::{aeth, atomic_ack_eth, atomic_eth, bth, deth, enum_with_unknown, feth, ieth, immdt};
use super::{reth, xrceth};

enum_with_unknown! {
    /// The BTH OpCode byte (IBTA vol. 1, ch. 9; rxe `rxe_opcode.c`). Every byte
    /// round-trips through `From<u8>` and `From<OpCode> for u8`; bytes rverbs has no row
    /// for are [`OpCode::Unknown`].
    ///
    /// The facts below (headers, payload, position, receive WQE use) are computed from the
    /// byte, so a non-canonical `Unknown(0x04)` behaves as `RcSendOnly`.
    pub enum OpCode(u8) {
        /// RC SEND First (0x00).
        RcSendFirst = 0x00,
        /// RC SEND Middle (0x01).
        RcSendMiddle = 0x01,
        /// RC SEND Last (0x02).
        RcSendLast = 0x02,
        /// RC SEND Last with Immediate (0x03).
        RcSendLastWithImmediate = 0x03,
        /// RC SEND Only (0x04).
        RcSendOnly = 0x04,
        /// RC SEND Only with Immediate (0x05).
        RcSendOnlyWithImmediate = 0x05,
        /// RC RDMA WRITE First (0x06).
        RcRdmaWriteFirst = 0x06,
        /// RC RDMA WRITE Middle (0x07).
        RcRdmaWriteMiddle = 0x07,
        /// RC RDMA WRITE Last (0x08).
        RcRdmaWriteLast = 0x08,
        /// RC RDMA WRITE Last with Immediate (0x09).
        RcRdmaWriteLastWithImmediate = 0x09,
        /// RC RDMA WRITE Only (0x0A).
        RcRdmaWriteOnly = 0x0a,
        /// RC RDMA WRITE Only with Immediate (0x0B).
        RcRdmaWriteOnlyWithImmediate = 0x0b,
        /// RC RDMA READ Request (0x0C).
        RcRdmaReadRequest = 0x0c,
        /// RC RDMA READ response First (0x0D).
        RcRdmaReadResponseFirst = 0x0d,
        /// RC RDMA READ response Middle (0x0E).
        RcRdmaReadResponseMiddle = 0x0e,
        /// RC RDMA READ response Last (0x0F).
        RcRdmaReadResponseLast = 0x0f,
        /// RC RDMA READ response Only (0x10).
        RcRdmaReadResponseOnly = 0x10,
        /// RC Acknowledge (0x11).
        RcAcknowledge = 0x11,
        /// RC ATOMIC Acknowledge (0x12).
        RcAtomicAcknowledge = 0x12,
        /// RC CmpSwap (0x13).
        RcCompareSwap = 0x13,
        /// RC FetchAdd (0x14).
        RcFetchAdd = 0x14,
        /// RC SEND Last with Invalidate (0x16).
        RcSendLastWithInvalidate = 0x16,
        /// RC SEND Only with Invalidate (0x17).
        RcSendOnlyWithInvalidate = 0x17,
        /// RC FLUSH (0x1C, IBTA 1.5 Annex A19).
        RcFlush = 0x1c,
        /// RC ATOMIC WRITE (0x1D, IBTA 1.5 Annex A19).
        RcAtomicWrite = 0x1d,

        /// UC SEND First (0x20).
        UcSendFirst = 0x20,
        /// UC SEND Middle (0x21).
        UcSendMiddle = 0x21,
        /// UC SEND Last (0x22).
        UcSendLast = 0x22,
        /// UC SEND Last with Immediate (0x23).
        UcSendLastWithImmediate = 0x23,
        /// UC SEND Only (0x24).
        UcSendOnly = 0x24,
        /// UC SEND Only with Immediate (0x25).
        UcSendOnlyWithImmediate = 0x25,
        /// UC RDMA WRITE First (0x26).
        UcRdmaWriteFirst = 0x26,
        /// UC RDMA WRITE Middle (0x27).
        UcRdmaWriteMiddle = 0x27,
        /// UC RDMA WRITE Last (0x28).
        UcRdmaWriteLast = 0x28,
        /// UC RDMA WRITE Last with Immediate (0x29).
        UcRdmaWriteLastWithImmediate = 0x29,
        /// UC RDMA WRITE Only (0x2A).
        UcRdmaWriteOnly = 0x2a,
        /// UC RDMA WRITE Only with Immediate (0x2B).
        UcRdmaWriteOnlyWithImmediate = 0x2b,

        /// UD SEND Only (0x64).
        UdSendOnly = 0x64,
        /// UD SEND Only with Immediate (0x65).
        UdSendOnlyWithImmediate = 0x65,

        /// Congestion Notification Packet (0x81, IBTA Annex A17): BTH + 16 reserved bytes.
        Cnp = 0x81,

        /// XRC SEND First (0xA0).
        XrcSendFirst = 0xa0,
        /// XRC SEND Middle (0xA1).
        XrcSendMiddle = 0xa1,
        /// XRC SEND Last (0xA2).
        XrcSendLast = 0xa2,
        /// XRC SEND Last with Immediate (0xA3).
        XrcSendLastWithImmediate = 0xa3,
        /// XRC SEND Only (0xA4).
        XrcSendOnly = 0xa4,
        /// XRC SEND Only with Immediate (0xA5).
        XrcSendOnlyWithImmediate = 0xa5,
        /// XRC RDMA WRITE First (0xA6).
        XrcRdmaWriteFirst = 0xa6,
        /// XRC RDMA WRITE Middle (0xA7).
        XrcRdmaWriteMiddle = 0xa7,
        /// XRC RDMA WRITE Last (0xA8).
        XrcRdmaWriteLast = 0xa8,
        /// XRC RDMA WRITE Last with Immediate (0xA9).
        XrcRdmaWriteLastWithImmediate = 0xa9,
        /// XRC RDMA WRITE Only (0xAA).
        XrcRdmaWriteOnly = 0xaa,
        /// XRC RDMA WRITE Only with Immediate (0xAB).
        XrcRdmaWriteOnlyWithImmediate = 0xab,
        /// XRC RDMA READ Request (0xAC).
        XrcRdmaReadRequest = 0xac,
        /// XRC RDMA READ response First (0xAD).
        XrcRdmaReadResponseFirst = 0xad,
        /// XRC RDMA READ response Middle (0xAE).
        XrcRdmaReadResponseMiddle = 0xae,
        /// XRC RDMA READ response Last (0xAF).
        XrcRdmaReadResponseLast = 0xaf,
        /// XRC RDMA READ response Only (0xB0).
        XrcRdmaReadResponseOnly = 0xb0,
        /// XRC Acknowledge (0xB1).
        XrcAcknowledge = 0xb1,
        /// XRC ATOMIC Acknowledge (0xB2).
        XrcAtomicAcknowledge = 0xb2,
        /// XRC CmpSwap (0xB3).
        XrcCompareSwap = 0xb3,
        /// XRC FetchAdd (0xB4).
        XrcFetchAdd = 0xb4,
        /// XRC SEND Last with Invalidate (0xB6).
        XrcSendLastWithInvalidate = 0xb6,
        /// XRC SEND Only with Invalidate (0xB7).
        XrcSendOnlyWithInvalidate = 0xb7,
    }
}

/// The transport of an opcode, its high 3 bits (IBTA vol. 1, ch. 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Transport {
    /// Reliable Connected (0x00).
    Rc = 0x00,
    /// Unreliable Connected (0x20).
    Uc = 0x20,
    /// Reliable Datagram (0x40); rxe drops it and rverbs has no RD opcodes.
    Rd = 0x40,
    /// Unreliable Datagram (0x60).
    Ud = 0x60,
    /// Congestion notification (0x80).
    Cnp = 0x80,
    /// Extended Reliable Connected (0xA0).
    Xrc = 0xa0,
    /// Reserved (0xC0).
    Reserved = 0xc0,
    /// Manufacturer specific (0xE0).
    Manufacturer = 0xe0,
}

impl Transport {
    #[inline]
    const fn of(byte: u8) -> Transport {
        match byte & 0xe0 {
            0x00 => Transport::Rc,
            0x20 => Transport::Uc,
            0x40 => Transport::Rd,
            0x60 => Transport::Ud,
            0x80 => Transport::Cnp,
            0xa0 => Transport::Xrc,
            0xc0 => Transport::Reserved,
            _ => Transport::Manufacturer,
        }
    }
}

/// The operation of an opcode, its low 5 bits (IBTA vol. 1, ch. 9, one row each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Operation {
    /// SEND_FIRST (0x00).
    SendFirst = 0x00,
    /// SEND_MIDDLE (0x01).
    SendMiddle = 0x01,
    /// SEND_LAST (0x02).
    SendLast = 0x02,
    /// SEND_LAST_WITH_IMMEDIATE (0x03).
    SendLastWithImmediate = 0x03,
    /// SEND_ONLY (0x04).
    SendOnly = 0x04,
    /// SEND_ONLY_WITH_IMMEDIATE (0x05).
    SendOnlyWithImmediate = 0x05,
    /// RDMA_WRITE_FIRST (0x06).
    RdmaWriteFirst = 0x06,
    /// RDMA_WRITE_MIDDLE (0x07).
    RdmaWriteMiddle = 0x07,
    /// RDMA_WRITE_LAST (0x08).
    RdmaWriteLast = 0x08,
    /// RDMA_WRITE_LAST_WITH_IMMEDIATE (0x09).
    RdmaWriteLastWithImmediate = 0x09,
    /// RDMA_WRITE_ONLY (0x0A).
    RdmaWriteOnly = 0x0a,
    /// RDMA_WRITE_ONLY_WITH_IMMEDIATE (0x0B).
    RdmaWriteOnlyWithImmediate = 0x0b,
    /// RDMA_READ_REQUEST (0x0C).
    RdmaReadRequest = 0x0c,
    /// RDMA_READ_RESPONSE_FIRST (0x0D).
    RdmaReadResponseFirst = 0x0d,
    /// RDMA_READ_RESPONSE_MIDDLE (0x0E).
    RdmaReadResponseMiddle = 0x0e,
    /// RDMA_READ_RESPONSE_LAST (0x0F).
    RdmaReadResponseLast = 0x0f,
    /// RDMA_READ_RESPONSE_ONLY (0x10).
    RdmaReadResponseOnly = 0x10,
    /// ACKNOWLEDGE (0x11).
    Acknowledge = 0x11,
    /// ATOMIC_ACKNOWLEDGE (0x12).
    AtomicAcknowledge = 0x12,
    /// COMPARE_SWAP (0x13).
    CompareSwap = 0x13,
    /// FETCH_ADD (0x14).
    FetchAdd = 0x14,
    /// SEND_LAST_WITH_INVALIDATE (0x16).
    SendLastWithInvalidate = 0x16,
    /// SEND_ONLY_WITH_INVALIDATE (0x17).
    SendOnlyWithInvalidate = 0x17,
    /// FLUSH (0x1C, Annex A19).
    Flush = 0x1c,
    /// ATOMIC_WRITE (0x1D, Annex A19).
    AtomicWrite = 0x1d,
}

/// Where a packet sits in its message (rxe's START/MIDDLE/END masks, `rxe_opcode.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet (also every single-packet request or response).
    Only,
}

/// An extension header that can follow the BTH, in wire order (IBTA vol. 1, ch. 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtHeader {
    /// DETH (UD).
    Deth,
    /// XRCETH (XRC requests).
    XrcEth,
    /// FETH (FLUSH).
    Feth,
    /// RETH.
    Reth,
    /// AtomicETH.
    AtomicEth,
    /// AETH.
    Aeth,
    /// AtomicAckETH.
    AtomicAckEth,
    /// ImmDt.
    ImmDt,
    /// IETH.
    Ieth,
    /// The 16 reserved bytes of a CNP (IBTA Annex A17), sent as zero.
    CnpReserved,
}

/// Length of the reserved block of a CNP (IBTA Annex A17).
pub const CNP_RESERVED_LEN: usize = 16;

impl ExtHeader {
    /// Size of the header in bytes (IBTA vol. 1, ch. 9; rxe `rxe_hdr.h`).
    #[inline]
    pub const fn size(self) -> usize {
        match self {
            ExtHeader::Deth => deth::HEADER_LEN,
            ExtHeader::XrcEth => xrceth::HEADER_LEN,
            ExtHeader::Feth => feth::HEADER_LEN,
            ExtHeader::Reth => reth::HEADER_LEN,
            ExtHeader::AtomicEth => atomic_eth::HEADER_LEN,
            ExtHeader::Aeth => aeth::HEADER_LEN,
            ExtHeader::AtomicAckEth => atomic_ack_eth::HEADER_LEN,
            ExtHeader::ImmDt => immdt::HEADER_LEN,
            ExtHeader::Ieth => ieth::HEADER_LEN,
            ExtHeader::CnpReserved => CNP_RESERVED_LEN,
        }
    }
}

impl Operation {
    #[inline]
    const fn of(byte: u8) -> Option<Operation> {
        use Operation as O;
        Some(match byte & 0x1f {
            0x00 => O::SendFirst,
            0x01 => O::SendMiddle,
            0x02 => O::SendLast,
            0x03 => O::SendLastWithImmediate,
            0x04 => O::SendOnly,
            0x05 => O::SendOnlyWithImmediate,
            0x06 => O::RdmaWriteFirst,
            0x07 => O::RdmaWriteMiddle,
            0x08 => O::RdmaWriteLast,
            0x09 => O::RdmaWriteLastWithImmediate,
            0x0a => O::RdmaWriteOnly,
            0x0b => O::RdmaWriteOnlyWithImmediate,
            0x0c => O::RdmaReadRequest,
            0x0d => O::RdmaReadResponseFirst,
            0x0e => O::RdmaReadResponseMiddle,
            0x0f => O::RdmaReadResponseLast,
            0x10 => O::RdmaReadResponseOnly,
            0x11 => O::Acknowledge,
            0x12 => O::AtomicAcknowledge,
            0x13 => O::CompareSwap,
            0x14 => O::FetchAdd,
            0x16 => O::SendLastWithInvalidate,
            0x17 => O::SendOnlyWithInvalidate,
            0x1c => O::Flush,
            0x1d => O::AtomicWrite,
            _ => return None,
        })
    }

    /// Position in the message (rxe `rxe_opcode.c` masks). Single-packet requests and
    /// responses (READ REQUEST, atomics, ACKs, FLUSH, ATOMIC_WRITE) are `Only`.
    #[inline]
    pub const fn position(self) -> Position {
        use Operation as O;
        match self {
            O::SendFirst | O::RdmaWriteFirst | O::RdmaReadResponseFirst => Position::First,
            O::SendMiddle | O::RdmaWriteMiddle | O::RdmaReadResponseMiddle => Position::Middle,
            O::SendLast
            | O::SendLastWithImmediate
            | O::SendLastWithInvalidate
            | O::RdmaWriteLast
            | O::RdmaWriteLastWithImmediate
            | O::RdmaReadResponseLast => Position::Last,
            _ => Position::Only,
        }
    }

    /// Whether the packet carries a payload: SEND, RDMA WRITE, READ responses and
    /// ATOMIC_WRITE (rxe `RXE_PAYLOAD_MASK`).
    #[inline]
    pub const fn has_payload(self) -> bool {
        use Operation as O;
        !matches!(
            self,
            O::RdmaReadRequest
                | O::Acknowledge
                | O::AtomicAcknowledge
                | O::CompareSwap
                | O::FetchAdd
                | O::Flush
        )
    }

    /// Whether the packet is sent by a requester (everything but READ responses and ACKs).
    #[inline]
    pub const fn is_request(self) -> bool {
        !self.is_response()
    }

    /// Whether the packet is sent by a responder: READ responses, ACKNOWLEDGE and
    /// ATOMIC_ACKNOWLEDGE (rxe `RXE_ACK_MASK`).
    #[inline]
    pub const fn is_response(self) -> bool {
        use Operation as O;
        matches!(
            self,
            O::RdmaReadResponseFirst
                | O::RdmaReadResponseMiddle
                | O::RdmaReadResponseLast
                | O::RdmaReadResponseOnly
                | O::Acknowledge
                | O::AtomicAcknowledge
        )
    }

    /// Whether the responder consumes a receive WQE at this packet: SEND_FIRST, SEND_ONLY*,
    /// and the last/only packet of a WRITE with immediate (rxe `RXE_RWR_MASK`).
    #[inline]
    pub const fn consumes_recv_wqe(self) -> bool {
        use Operation as O;
        matches!(
            self,
            O::SendFirst
                | O::SendOnly
                | O::SendOnlyWithImmediate
                | O::SendOnlyWithInvalidate
                | O::RdmaWriteLastWithImmediate
                | O::RdmaWriteOnlyWithImmediate
        )
    }

    /// Whether the responder posts a receive completion at this packet: SEND_LAST*,
    /// SEND_ONLY*, and WRITE last/only with immediate (rxe `RXE_COMP_MASK`).
    #[inline]
    pub const fn completes_recv(self) -> bool {
        use Operation as O;
        matches!(
            self,
            O::SendLast
                | O::SendLastWithImmediate
                | O::SendLastWithInvalidate
                | O::SendOnly
                | O::SendOnlyWithImmediate
                | O::SendOnlyWithInvalidate
                | O::RdmaWriteLastWithImmediate
                | O::RdmaWriteOnlyWithImmediate
        )
    }
}

impl OpCode {
    /// The opcode for `operation` on `transport`, or `None` where the table of
    /// IBTA vol. 1, ch. 9 (as rxe `rxe_opcode.c`) has no such row (UD RDMA WRITE, UC READ,
    /// any RD, …).
    #[inline]
    pub fn new(transport: Transport, operation: Operation) -> Option<OpCode> {
        match OpCode::from(transport as u8 | operation as u8) {
            OpCode::Unknown(_) => None,
            opcode => Some(opcode),
        }
    }

    /// Whether rverbs knows this opcode's layout; the whole-packet parse refuses the others.
    #[inline]
    pub fn is_known(self) -> bool {
        OpCode::is_named(self.into())
    }

    /// The transport, from the high 3 bits (defined for every byte).
    #[inline]
    pub fn transport(self) -> Transport {
        Transport::of(self.into())
    }

    /// The operation, from the low 5 bits; `None` for CNP and unknown opcodes.
    #[inline]
    pub fn operation(self) -> Option<Operation> {
        FACTS[usize::from(u8::from(self))].operation
    }

    /// The extension headers that follow the BTH, in wire order (rxe `rxe_opcode.c`);
    /// `None` for unknown opcodes.
    ///
    /// Rule: IBTA vol. 1, ch. 9: UD SEND_ONLY(_WITH_IMMEDIATE) carry a DETH first.
    /// Rule: XRC requests carry an XRCETH first; XRC responses do not.
    /// Rule: IBTA Annex A17: a CNP is followed by 16 reserved bytes.
    #[inline]
    pub fn ext_headers(self) -> Option<&'static [ExtHeader]> {
        FACTS[usize::from(u8::from(self))].ext_headers
    }

    /// BTH plus extension headers, in bytes (`length` in rxe `rxe_opcode.c`); `None` for
    /// unknown opcodes.
    #[inline]
    pub fn header_len(self) -> Option<usize> {
        header_len_of(self.into())
    }

    /// Position in the message; `None` for CNP and unknown opcodes.
    #[inline]
    pub fn position(self) -> Option<Position> {
        self.operation().map(Operation::position)
    }

    /// Whether this packet starts a message (FIRST or ONLY; rxe's START mask).
    #[inline]
    pub fn is_start(self) -> bool {
        matches!(self.position(), Some(Position::First | Position::Only))
    }

    /// Whether this packet ends a message (LAST or ONLY; rxe's END mask, which sets AckReq
    /// on RC, `rxe_req.c`).
    #[inline]
    pub fn is_end(self) -> bool {
        matches!(self.position(), Some(Position::Last | Position::Only))
    }

    /// Whether a payload follows the headers (IBTA vol. 1, ch. 9); false for CNP and
    /// unknown opcodes.
    #[inline]
    pub fn has_payload(self) -> bool {
        self.operation().is_some_and(Operation::has_payload)
    }

    /// Whether a requester sends it; false for CNP and unknown opcodes.
    #[inline]
    pub fn is_request(self) -> bool {
        self.operation().is_some_and(Operation::is_request)
    }

    /// Whether a responder sends it; false for CNP and unknown opcodes.
    #[inline]
    pub fn is_response(self) -> bool {
        self.operation().is_some_and(Operation::is_response)
    }

    /// Whether the responder consumes a receive WQE at this packet (rxe `RXE_RWR_MASK`; a
    /// multi-packet WRITE with immediate consumes it at its LAST packet).
    #[inline]
    pub fn consumes_recv_wqe(self) -> bool {
        self.operation().is_some_and(Operation::consumes_recv_wqe)
    }

    /// Whether the responder generates a receive completion at this packet
    /// (rxe `RXE_COMP_MASK`).
    #[inline]
    pub fn completes_recv(self) -> bool {
        self.operation().is_some_and(Operation::completes_recv)
    }
}

/// What the packet path asks of an opcode byte, for all 256 bytes, computed at compile
/// time from the rules of [`OpCode::ext_headers`] and [`OpCode::operation`]: one indexed
/// load per question instead of matching the byte every time (a receiver asks several
/// per packet).
#[derive(Clone, Copy)]
struct Facts {
    operation: Option<Operation>,
    ext_headers: Option<&'static [ExtHeader]>,
    /// BTH plus extension headers (0 when `ext_headers` is `None`).
    header_len: u8,
}

static FACTS: [Facts; 256] = {
    let mut t = [Facts { operation: None, ext_headers: None, header_len: 0 }; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        let operation = operation_of(byte);
        let ext_headers = ext_headers_of(byte, operation);
        let mut header_len = 0;
        if let Some(ext) = ext_headers {
            header_len = bth::HEADER_LEN;
            let mut i = 0;
            while i < ext.len() {
                header_len += ext[i].size();
                i += 1;
            }
        }
        t[b] = Facts { operation, ext_headers, header_len: header_len as u8 };
        b += 1;
    }
    t
};

/// [`OpCode::header_len`] of the opcode byte `byte`, straight from the byte (a packet's
/// checks need no [`OpCode`] for it).
#[inline]
pub(crate) fn header_len_of(byte: u8) -> Option<usize> {
    let f = &FACTS[usize::from(byte)];
    f.ext_headers.map(|_| usize::from(f.header_len))
}

/// The operation of opcode byte `byte`: `None` for CNP and bytes without a named opcode.
const fn operation_of(byte: u8) -> Option<Operation> {
    if !OpCode::is_named(byte) || byte == CNP_BYTE {
        return None;
    }
    Operation::of(byte)
}

/// The CNP opcode byte (IBTA Annex A17).
const CNP_BYTE: u8 = OpCode::Cnp.raw();

/// The extension headers of opcode byte `byte` whose operation is `op` (rxe
/// `rxe_opcode.c`; the rules are [`OpCode::ext_headers`]'s).
const fn ext_headers_of(byte: u8, op: Option<Operation>) -> Option<&'static [ExtHeader]> {
    use ExtHeader::*;
    use Operation as O;
    if byte == CNP_BYTE {
        return Some(&[CnpReserved]);
    }
    let Some(op) = op else { return None };
    let transport = Transport::of(byte);
    // Each request layout is written once with its XRC prefix; other transports skip it.
    let skip = if matches!(transport, Transport::Xrc) { 0 } else { 1 };
    let ud = matches!(transport, Transport::Ud);
    let headers: &'static [ExtHeader] = match op {
        O::SendOnly if ud => return Some(&[Deth]),
        O::SendOnlyWithImmediate if ud => return Some(&[Deth, ImmDt]),
        O::SendFirst | O::SendMiddle | O::SendLast | O::SendOnly => &[XrcEth],
        O::RdmaWriteMiddle | O::RdmaWriteLast => &[XrcEth],
        O::SendLastWithImmediate | O::SendOnlyWithImmediate => &[XrcEth, ImmDt],
        O::RdmaWriteLastWithImmediate => &[XrcEth, ImmDt],
        O::RdmaWriteFirst | O::RdmaWriteOnly | O::RdmaReadRequest | O::AtomicWrite => &[XrcEth, Reth],
        O::RdmaWriteOnlyWithImmediate => &[XrcEth, Reth, ImmDt],
        O::CompareSwap | O::FetchAdd => &[XrcEth, AtomicEth],
        O::SendLastWithInvalidate | O::SendOnlyWithInvalidate => &[XrcEth, Ieth],
        O::Flush => &[XrcEth, Feth, Reth],
        O::RdmaReadResponseMiddle => return Some(&[]),
        O::RdmaReadResponseFirst | O::RdmaReadResponseLast | O::RdmaReadResponseOnly | O::Acknowledge => {
            return Some(&[Aeth])
        }
        O::AtomicAcknowledge => return Some(&[Aeth, AtomicAckEth]),
    };
    Some(headers.split_at(skip).1)
}

#[cfg(test)]
mod tests {
    use super::ExtHeader::*;
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        for byte in 0..=u8::MAX {
            assert_eq!(u8::from(OpCode::from(byte)), byte);
        }
        assert_eq!(OpCode::from(0x40), OpCode::Unknown(0x40));
        assert_eq!(OpCode::from(0x15), OpCode::Unknown(0x15));
        assert_eq!(OpCode::from(0xbc), OpCode::Unknown(0xbc));
    }

    #[test]
    fn known_opcodes_count_per_transport() {
        let count = |t| {
            OpCode::KNOWN
                .iter()
                .filter(|op| op.transport() == t)
                .count()
        };
        assert_eq!(count(Transport::Rc), 25);
        assert_eq!(count(Transport::Uc), 12);
        assert_eq!(count(Transport::Ud), 2);
        assert_eq!(count(Transport::Cnp), 1);
        assert_eq!(count(Transport::Xrc), 23);
        assert_eq!(count(Transport::Rd), 0);
        assert_eq!(OpCode::KNOWN.len(), 63);
    }

    /// (byte, headers after BTH, payload, position, consumes recv WQE, completes recv).
    type Row = (u8, &'static [ExtHeader], bool, Position, bool, bool);

    /// IBTA vol. 1, ch. 9 and rxe `rxe_opcode.c`, one row per RC/UC/UD opcode.
    #[rustfmt::skip]
    const TABLE: &[Row] = &[
        (0x00, &[], true, Position::First, true, false),
        (0x01, &[], true, Position::Middle, false, false),
        (0x02, &[], true, Position::Last, false, true),
        (0x03, &[ImmDt], true, Position::Last, false, true),
        (0x04, &[], true, Position::Only, true, true),
        (0x05, &[ImmDt], true, Position::Only, true, true),
        (0x06, &[Reth], true, Position::First, false, false),
        (0x07, &[], true, Position::Middle, false, false),
        (0x08, &[], true, Position::Last, false, false),
        (0x09, &[ImmDt], true, Position::Last, true, true),
        (0x0a, &[Reth], true, Position::Only, false, false),
        (0x0b, &[Reth, ImmDt], true, Position::Only, true, true),
        (0x0c, &[Reth], false, Position::Only, false, false),
        (0x0d, &[Aeth], true, Position::First, false, false),
        (0x0e, &[], true, Position::Middle, false, false),
        (0x0f, &[Aeth], true, Position::Last, false, false),
        (0x10, &[Aeth], true, Position::Only, false, false),
        (0x11, &[Aeth], false, Position::Only, false, false),
        (0x12, &[Aeth, AtomicAckEth], false, Position::Only, false, false),
        (0x13, &[AtomicEth], false, Position::Only, false, false),
        (0x14, &[AtomicEth], false, Position::Only, false, false),
        (0x16, &[Ieth], true, Position::Last, false, true),
        (0x17, &[Ieth], true, Position::Only, true, true),
        (0x1c, &[Feth, Reth], false, Position::Only, false, false),
        (0x1d, &[Reth], true, Position::Only, false, false),
        (0x20, &[], true, Position::First, true, false),
        (0x21, &[], true, Position::Middle, false, false),
        (0x22, &[], true, Position::Last, false, true),
        (0x23, &[ImmDt], true, Position::Last, false, true),
        (0x24, &[], true, Position::Only, true, true),
        (0x25, &[ImmDt], true, Position::Only, true, true),
        (0x26, &[Reth], true, Position::First, false, false),
        (0x27, &[], true, Position::Middle, false, false),
        (0x28, &[], true, Position::Last, false, false),
        (0x29, &[ImmDt], true, Position::Last, true, true),
        (0x2a, &[Reth], true, Position::Only, false, false),
        (0x2b, &[Reth, ImmDt], true, Position::Only, true, true),
        (0x64, &[Deth], true, Position::Only, true, true),
        (0x65, &[Deth, ImmDt], true, Position::Only, true, true),
    ];

    #[test]
    fn opcode_table_matches_the_spec() {
        for &(byte, headers, payload, position, consumes, completes) in TABLE {
            let op = OpCode::from(byte);
            assert!(op.is_known(), "{byte:#04x}");
            assert_eq!(op.ext_headers(), Some(headers), "{op:?}");
            assert_eq!(op.has_payload(), payload, "{op:?}");
            assert_eq!(op.position(), Some(position), "{op:?}");
            assert_eq!(op.consumes_recv_wqe(), consumes, "{op:?}");
            assert_eq!(op.completes_recv(), completes, "{op:?}");
        }
        let rc_uc_ud = OpCode::KNOWN.iter().filter(|op| {
            matches!(
                op.transport(),
                Transport::Rc | Transport::Uc | Transport::Ud
            )
        });
        assert_eq!(rc_uc_ud.count(), TABLE.len());
    }

    #[test]
    fn header_lengths_match_the_spec() {
        // BTH plus extension headers, as `length` in rxe `rxe_opcode.c`.
        assert_eq!(OpCode::RcSendOnly.header_len(), Some(12));
        assert_eq!(
            OpCode::RcRdmaWriteOnlyWithImmediate.header_len(),
            Some(12 + 16 + 4)
        );
        assert_eq!(
            OpCode::UdSendOnlyWithImmediate.header_len(),
            Some(12 + 8 + 4)
        );
        assert_eq!(OpCode::RcAtomicAcknowledge.header_len(), Some(12 + 4 + 8));
        assert_eq!(OpCode::RcFlush.header_len(), Some(12 + 4 + 16));
        assert_eq!(OpCode::RcCompareSwap.header_len(), Some(12 + 28));
        assert_eq!(OpCode::Cnp.header_len(), Some(12 + 16));
        assert_eq!(
            OpCode::XrcRdmaWriteOnlyWithImmediate.header_len(),
            Some(12 + 4 + 16 + 4)
        );
        assert_eq!(OpCode::Unknown(0x40).header_len(), None);
        assert_eq!(OpCode::Unknown(0x40).ext_headers(), None);
    }

    #[test]
    fn xrc_requests_carry_xrceth_and_responses_do_not() {
        for &op in OpCode::KNOWN
            .iter()
            .filter(|op| op.transport() == Transport::Xrc)
        {
            let rc = OpCode::new(Transport::Rc, op.operation().unwrap()).unwrap();
            let (xrc_headers, rc_headers) = (op.ext_headers().unwrap(), rc.ext_headers().unwrap());
            if op.is_request() {
                assert_eq!(xrc_headers[0], XrcEth, "{op:?}");
                assert_eq!(&xrc_headers[1..], rc_headers, "{op:?}");
            } else {
                assert_eq!(xrc_headers, rc_headers, "{op:?}");
            }
            assert_eq!(op.has_payload(), rc.has_payload());
            assert_eq!(op.position(), rc.position());
            assert_eq!(op.consumes_recv_wqe(), rc.consumes_recv_wqe());
            assert_eq!(op.completes_recv(), rc.completes_recv());
        }
    }

    #[test]
    fn requests_and_responses_partition_known_opcodes() {
        for &op in OpCode::KNOWN {
            if op == OpCode::Cnp {
                assert!(!op.is_request() && !op.is_response());
                assert_eq!(op.position(), None);
            } else {
                assert_ne!(op.is_request(), op.is_response(), "{op:?}");
            }
        }
        assert!(OpCode::RcRdmaReadResponseMiddle.is_response());
        assert!(OpCode::RcAcknowledge.is_response());
        assert!(OpCode::RcRdmaReadRequest.is_request());
        assert!(OpCode::RcFlush.is_request());
        assert!(!OpCode::Unknown(0x55).is_request());
        assert!(!OpCode::Unknown(0x55).is_response());
    }

    #[test]
    fn start_and_end_follow_position() {
        assert!(OpCode::RcSendFirst.is_start() && !OpCode::RcSendFirst.is_end());
        assert!(!OpCode::RcSendMiddle.is_start() && !OpCode::RcSendMiddle.is_end());
        assert!(!OpCode::RcSendLast.is_start() && OpCode::RcSendLast.is_end());
        assert!(OpCode::RcRdmaReadRequest.is_start() && OpCode::RcRdmaReadRequest.is_end());
        assert!(!OpCode::Cnp.is_start() && !OpCode::Cnp.is_end());
    }

    #[test]
    fn new_builds_only_rows_of_the_table() {
        assert_eq!(
            OpCode::new(Transport::Rc, Operation::Flush),
            Some(OpCode::RcFlush)
        );
        assert_eq!(
            OpCode::new(Transport::Ud, Operation::SendOnly),
            Some(OpCode::UdSendOnly)
        );
        assert_eq!(OpCode::new(Transport::Ud, Operation::SendFirst), None);
        assert_eq!(OpCode::new(Transport::Uc, Operation::RdmaReadRequest), None);
        assert_eq!(OpCode::new(Transport::Rd, Operation::SendOnly), None);
        assert_eq!(OpCode::new(Transport::Xrc, Operation::AtomicWrite), None);
        for &op in OpCode::KNOWN.iter().filter(|&&op| op != OpCode::Cnp) {
            assert_eq!(
                OpCode::new(op.transport(), op.operation().unwrap()),
                Some(op)
            );
        }
    }

    #[test]
    fn transport_is_defined_for_every_byte() {
        assert_eq!(OpCode::Unknown(0x41).transport(), Transport::Rd);
        assert_eq!(OpCode::Unknown(0xc0).transport(), Transport::Reserved);
        assert_eq!(OpCode::Unknown(0xff).transport(), Transport::Manufacturer);
        assert_eq!(OpCode::Cnp.transport(), Transport::Cnp);
        assert_eq!(OpCode::XrcFetchAdd.transport(), Transport::Xrc);
    }

    #[test]
    fn non_canonical_unknown_behaves_as_its_byte() {
        let op = OpCode::Unknown(0x04);
        assert!(op.is_known());
        assert_eq!(op.operation(), Some(Operation::SendOnly));
        assert_eq!(op.ext_headers(), OpCode::RcSendOnly.ext_headers());
    }
}
