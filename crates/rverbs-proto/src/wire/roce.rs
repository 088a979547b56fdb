//! A whole RoCEv2 packet, the UDP payload: BTH, the extension headers its opcode needs,
//! payload, pad and ICRC. Read IBTA Annex A17 (encapsulation), IBTA vol. 1, ch. 9 (header
//! order, padding) and rxe `rxe_opcode.c` (which headers each opcode has) before editing.
//!
//! ```text
//! | BTH (12) | extension headers (opcode.ext_headers()) | payload | pad (PadCnt) | ICRC (4, LE) |
//! ```
//!
//! Receiving: `Packet::new_checked(udp_payload)`, then [`Repr::parse`]; the payload is
//! `&udp_payload[repr.payload_range()]` (or `packet.payload()`), never copied.
//! Sending: `repr.emit(&mut Packet::new_unchecked(&mut buf[..repr.buffer_len()]))`, write
//! the payload into `packet.payload_mut()`, compute the ICRC over `packet.without_icrc()`
//! with [`crate::wire::icrc`] and store it with `packet.set_icrc`.

use core::ops::Range;

use super::icrc::ICRC_LEN;
use super::opcode::CNP_RESERVED_LEN;
use super::{aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, opcode, reth, xrceth};
use super::{Error, ExtHeader, OpCode};

/// The shortest packet there is: a BTH and an ICRC.
pub const MIN_LEN: usize = bth::HEADER_LEN + ICRC_LEN;

/// A view over a whole RoCEv2 packet, BTH to ICRC inclusive (the UDP payload).
///
/// See the panic contract in [`crate::wire`]: after `check_len` succeeds no accessor panics.
/// There are no setters that change the layout (opcode, pad count): rebuild with
/// [`Repr::emit`] instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` and checks that no accessor can panic.
    ///
    /// Errors: as [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that no accessor can panic.
    ///
    /// Rule: rxe `rxe_rcv` (first check): the packet holds the BTH, the headers of its opcode,
    /// PadCnt pad bytes and the ICRC.
    /// Errors: `Error` if the buffer is shorter than that, or the opcode is unknown (its
    /// header layout is not known).
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < MIN_LEN {
            return Err(Error);
        }
        let header_len = opcode::header_len_of(self.opcode_byte()).ok_or(Error)?;
        let pad = usize::from(self.bth().pad_count());
        if len < header_len + pad + ICRC_LEN {
            return Err(Error);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The BTH's opcode byte.
    #[inline]
    fn opcode_byte(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The BTH.
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    /// BTH plus extension headers, in bytes: where the payload starts.
    pub fn header_len(&self) -> usize {
        opcode::header_len_of(self.opcode_byte()).unwrap_or(bth::HEADER_LEN)
    }

    /// Where the payload lies in the buffer.
    pub fn payload_range(&self) -> Range<usize> {
        let end = self.buffer.as_ref().len() - ICRC_LEN - usize::from(self.bth().pad_count());
        self.header_len()..end
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The pad bytes (PadCnt of them; zero when well formed).
    pub fn pad(&self) -> &[u8] {
        let len = self.buffer.as_ref().len();
        &self.buffer.as_ref()[self.payload_range().end..len - ICRC_LEN]
    }

    /// Everything the ICRC covers after the IP and UDP headers: BTH to the last pad byte.
    /// This is the `roce` argument of the [`crate::wire::icrc`] functions.
    pub fn without_icrc(&self) -> &[u8] {
        let buf = self.buffer.as_ref();
        &buf[..buf.len() - ICRC_LEN]
    }

    /// The ICRC value, read little-endian (rxe `rxe_icrc.c`).
    pub fn icrc(&self) -> u32 {
        let buf = self.buffer.as_ref();
        let mut bytes = [0; ICRC_LEN];
        bytes.copy_from_slice(&buf[buf.len() - ICRC_LEN..]);
        u32::from_le_bytes(bytes)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The payload, mutably, to fill after [`Repr::emit`].
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }

    /// Stores the ICRC value little-endian in the last four bytes.
    pub fn set_icrc(&mut self, value: u32) {
        let buf = self.buffer.as_mut();
        let len = buf.len();
        buf[len - ICRC_LEN..].copy_from_slice(&value.to_le_bytes());
    }
}

/// A whole packet rverbs accepts: a known opcode, its extension headers, the payload length
/// and the pad it implies (IBTA vol. 1, ch. 9). The payload itself stays in the buffer.
///
/// The `Option` headers are `Some` exactly for the headers of `bth.opcode.ext_headers()`
/// after [`Repr::parse`]. [`Repr::emit`] writes the ones that are `Some`, in the order of
/// [`OpCode::ext_headers`], so a hand-built `Repr` must follow the same rule to parse back
/// ([`Repr::headers_match_opcode`] checks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The BTH. `bth.pad_count` is ignored by `emit`, which derives it from `payload_len`.
    pub bth: bth::Repr,
    /// DETH (UD).
    pub deth: Option<deth::Repr>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<xrceth::Repr>,
    /// FETH (FLUSH).
    pub feth: Option<feth::Repr>,
    /// RETH.
    pub reth: Option<reth::Repr>,
    /// AtomicETH.
    pub atomic_eth: Option<atomic_eth::Repr>,
    /// AETH.
    pub aeth: Option<aeth::Repr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<atomic_ack_eth::Repr>,
    /// ImmDt.
    pub immdt: Option<immdt::Repr>,
    /// IETH.
    pub ieth: Option<ieth::Repr>,
    /// Payload length in bytes, without pad.
    pub payload_len: usize,
}

impl Repr {
    /// A `Repr` with only a BTH and a payload length; set the extension headers the opcode
    /// needs before emitting.
    pub const fn new(bth: bth::Repr, payload_len: usize) -> Repr {
        Repr {
            bth,
            deth: None,
            xrceth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            payload_len,
        }
    }

    /// Parses a whole packet.
    ///
    /// Rule: rxe `rxe_rcv`: long enough for BTH, the opcode's headers, the pad and the ICRC;
    /// `hdr_check`: TVer = 0 (see [`bth::Repr::parse`]).
    /// Rule: rxe `rxe_opcode.c`: the opcode must be one rverbs knows (RD and vendor opcodes
    /// are dropped).
    /// Rule: IBTA vol. 1, ch. 9: payload plus pad is a multiple of 4 bytes
    /// (PadCnt = (−payload) & 3).
    /// Rule: IBTA vol. 1, ch. 9 (rxe: no `RXE_PAYLOAD_MASK`): READ REQUEST, ACKNOWLEDGE,
    /// ATOMIC ACKNOWLEDGE, atomics, FLUSH and CNP carry neither payload nor pad.
    /// Errors: `Error` for each rule above and for a reserved AETH syndrome type.
    /// Deviation: rxe checks only the length; it accepts a misaligned or surplus payload.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        let bytes = packet.buffer.as_ref();
        let bth = bth::Repr::parse(&packet.bth())?;
        let payload_and_pad = bytes.len() - ICRC_LEN - packet.header_len();
        if bytes.len() % 4 != 0 || (!bth.opcode.has_payload() && payload_and_pad != 0) {
            return Err(Error);
        }
        let mut repr = Repr::new(bth, packet.payload().len());
        let mut at = bth::HEADER_LEN;
        for &header in bth.opcode.ext_headers().ok_or(Error)? {
            let h = &bytes[at..];
            // Each field of `Repr` is named after the module of its header.
            macro_rules! parse_ext {
                ($m:ident) => {
                    repr.$m = Some($m::Repr::parse(&$m::Packet::new_unchecked(h))?)
                };
            }
            match header {
                ExtHeader::Deth => parse_ext!(deth),
                ExtHeader::XrcEth => parse_ext!(xrceth),
                ExtHeader::Feth => parse_ext!(feth),
                ExtHeader::Reth => parse_ext!(reth),
                ExtHeader::AtomicEth => parse_ext!(atomic_eth),
                ExtHeader::Aeth => parse_ext!(aeth),
                ExtHeader::AtomicAckEth => parse_ext!(atomic_ack_eth),
                ExtHeader::ImmDt => parse_ext!(immdt),
                ExtHeader::Ieth => parse_ext!(ieth),
                // IBTA Annex A17: reserved, ignored on receipt.
                ExtHeader::CnpReserved => {}
            }
            at += header.size();
        }
        Ok(repr)
    }

    /// Whether the `Some` headers are exactly those `bth.opcode` needs (`rxe_opcode.c`);
    /// always true after [`Repr::parse`].
    pub fn headers_match_opcode(&self) -> bool {
        let Some(wanted) = self.bth.opcode.ext_headers() else {
            return false;
        };
        let present = [
            (ExtHeader::Deth, self.deth.is_some()),
            (ExtHeader::XrcEth, self.xrceth.is_some()),
            (ExtHeader::Feth, self.feth.is_some()),
            (ExtHeader::Reth, self.reth.is_some()),
            (ExtHeader::AtomicEth, self.atomic_eth.is_some()),
            (ExtHeader::Aeth, self.aeth.is_some()),
            (ExtHeader::AtomicAckEth, self.atomic_ack_eth.is_some()),
            (ExtHeader::ImmDt, self.immdt.is_some()),
            (ExtHeader::Ieth, self.ieth.is_some()),
        ];
        present
            .iter()
            .all(|&(header, is_some)| wanted.contains(&header) == is_some)
    }

    /// Pad bytes after the payload: `(−payload_len) & 3` (IBTA vol. 1, ch. 9).
    pub const fn pad_len(&self) -> usize {
        self.payload_len.wrapping_neg() & 3
    }

    /// BTH plus the extension headers that are `Some` (plus the CNP reserved bytes).
    pub fn header_len(&self) -> usize {
        let optional = [
            self.deth.map(|h| h.buffer_len()),
            self.xrceth.map(|h| h.buffer_len()),
            self.feth.map(|h| h.buffer_len()),
            self.reth.map(|h| h.buffer_len()),
            self.atomic_eth.map(|h| h.buffer_len()),
            self.aeth.map(|h| h.buffer_len()),
            self.atomic_ack_eth.map(|h| h.buffer_len()),
            self.immdt.map(|h| h.buffer_len()),
            self.ieth.map(|h| h.buffer_len()),
        ];
        let cnp = if self.bth.opcode == OpCode::Cnp {
            CNP_RESERVED_LEN
        } else {
            0
        };
        bth::HEADER_LEN + cnp + optional.iter().flatten().sum::<usize>()
    }

    /// Where the payload lies in the packet (parsed or emitted).
    pub fn payload_range(&self) -> Range<usize> {
        let start = self.header_len();
        start..start + self.payload_len
    }

    /// Length of the whole packet: headers, payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + self.pad_len() + ICRC_LEN
    }

    /// Writes headers, zero pad and a zero ICRC into a buffer of exactly
    /// [`Repr::buffer_len`] bytes; the payload bytes are left as they are.
    ///
    /// Rule: IBTA vol. 1, ch. 9: PadCnt = (−payload_len) & 3 and pad bytes are zero.
    /// Rule: IBTA vol. 1, ch. 9 (and Annexes A14, A19): extension headers in the order DETH,
    /// XRCETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; a CNP gets 16 zero
    /// bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let buf = packet.buffer.as_mut();
        let pad = self.pad_len();
        let bth = bth::Repr {
            pad_count: pad as u8, // at most 3
            ..self.bth
        };
        bth.emit(&mut bth::Packet::new_unchecked(&mut *buf));
        let mut at = bth::HEADER_LEN;
        if self.bth.opcode == OpCode::Cnp {
            buf[at..at + CNP_RESERVED_LEN].fill(0);
            at += CNP_RESERVED_LEN;
        }
        // In wire order (IBTA vol. 1, ch. 9); fields are named after their modules.
        macro_rules! emit_ext {
            ($($m:ident),*) => {$(
                if let Some(header) = &self.$m {
                    header.emit(&mut $m::Packet::new_unchecked(&mut buf[at..]));
                    at += header.buffer_len();
                }
            )*};
        }
        emit_ext!(
            deth,
            xrceth,
            feth,
            reth,
            atomic_eth,
            aeth,
            atomic_ack_eth,
            immdt,
            ieth
        );
        at += self.payload_len;
        buf[at..at + pad + ICRC_LEN].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AethRepr, BthRepr, RethRepr, Syndrome};

    /// RC RDMA WRITE ONLY, RETH, payload "abcdef" (pad 2), ICRC 0x44332211.
    static BYTES: [u8; 40] = [
        0x0a, 0x20, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x07, // BTH
        0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x20, 0x00, 0x00, 0x00, 0x12,
        0x34, // RETH VA, R_Key
        0x00, 0x00, 0x00, 0x06, // RETH DMA length
        b'a', b'b', b'c', b'd', b'e', b'f', 0x00, 0x00, // payload, pad
        0x11, 0x22, 0x33, 0x44, // ICRC
    ];

    const BTH: BthRepr = BthRepr {
        opcode: OpCode::RcRdmaWriteOnly,
        solicited: false,
        migreq: false,
        pad_count: 2,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x11,
        ack_req: true,
        psn: 7,
    };

    const REPR: Repr = Repr {
        reth: Some(RethRepr {
            va: 0x1000_2000,
            rkey: 0x1234,
            dma_len: 6,
        }),
        ..Repr::new(BTH, 6)
    };

    #[test]
    fn roce_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.bth().opcode(), OpCode::RcRdmaWriteOnly);
        assert_eq!(packet.bth().psn(), 7);
        assert_eq!(packet.header_len(), 28);
        assert_eq!(packet.payload_range(), 28..34);
        assert_eq!(packet.payload(), b"abcdef");
        assert_eq!(packet.pad(), &[0, 0]);
        assert_eq!(packet.icrc(), 0x4433_2211);
        assert_eq!(packet.without_icrc(), &BYTES[..36]);
    }

    #[test]
    fn roce_construct() {
        let mut bytes = [0u8; 40];
        bytes[..28].copy_from_slice(&BYTES[..28]);
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.payload_mut().copy_from_slice(b"abcdef");
        packet.set_icrc(0x4433_2211);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn roce_parse() {
        let repr = Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()).unwrap();
        assert_eq!(repr, REPR);
        assert!(repr.headers_match_opcode());
        assert_eq!(&BYTES[repr.payload_range()], b"abcdef");
    }

    #[test]
    fn roce_emit() {
        let mut bytes = [0xa5u8; 40];
        assert_eq!(REPR.buffer_len(), 40);
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        REPR.emit(&mut packet);
        packet.payload_mut().copy_from_slice(b"abcdef");
        assert_eq!(packet.icrc(), 0);
        packet.set_icrc(0x4433_2211);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn roce_emit_derives_pad_count_from_payload() {
        for (payload_len, pad) in [(0, 0), (1, 3), (2, 2), (3, 1), (4, 0), (5, 3)] {
            let repr = Repr {
                payload_len,
                bth: BthRepr {
                    pad_count: 3 - pad as u8,
                    ..BTH
                },
                ..REPR
            };
            assert_eq!(repr.pad_len(), pad);
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(usize::from(packet.bth().pad_count()), pad);
            assert!(packet.pad().iter().all(|&b| b == 0));
            let parsed = Repr::parse(&packet).unwrap();
            assert_eq!(parsed.payload_len, payload_len);
            assert_eq!(usize::from(parsed.bth.pad_count), pad);
        }
    }

    #[test]
    fn roce_parse_refuses_misaligned_packet() {
        // One byte of payload with PadCnt 2: payload + pad = 3, not a multiple of 4.
        let mut bytes = BYTES[..39].to_vec();
        bytes[1] = 0x20;
        bytes.truncate(28 + 1 + 2);
        bytes.extend_from_slice(&[0; 4]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload().len(), 1);
        assert_eq!(Repr::parse(&packet), Err(Error));
    }

    #[test]
    fn roce_parse_refuses_pad_longer_than_packet() {
        // ACKNOWLEDGE with PadCnt 3 and no room for pad.
        let bytes = [
            0x11, 0x30, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0x1f, 0, 0, 1, 0, 0, 0, 0,
        ];
        assert_eq!(Packet::new_checked(&bytes[..]), Err(Error));
    }

    #[test]
    fn roce_parse_refuses_payload_on_payloadless_opcode() {
        let ack = Repr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::ACK,
                msn: 1,
            }),
            ..Repr::new(
                BthRepr {
                    opcode: OpCode::RcAcknowledge,
                    pad_count: 0,
                    ack_req: false,
                    ..BTH
                },
                0,
            )
        };
        let mut bytes = vec![0; ack.buffer_len()];
        ack.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(ack)
        );
        let with_payload = Repr {
            payload_len: 4,
            ..ack
        };
        let mut bytes = vec![0; with_payload.buffer_len()];
        with_payload.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(Error)
        );
    }

    #[test]
    fn roce_parse_refuses_unknown_opcode_and_tver() {
        let mut bytes = BYTES;
        bytes[0] = 0x4a; // RD RDMA WRITE ONLY
        assert_eq!(Packet::new_checked(&bytes[..]), Err(Error));
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Err(Error));
        let mut bytes = BYTES;
        bytes[1] |= 0x01; // TVer 1
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(Error)
        );
    }

    #[test]
    fn roce_headers_match_opcode() {
        assert!(REPR.headers_match_opcode());
        assert!(!Repr { reth: None, ..REPR }.headers_match_opcode());
        let extra = Repr {
            immdt: Some(crate::wire::ImmDtRepr { imm: 1 }),
            ..REPR
        };
        assert!(!extra.headers_match_opcode());
        let unknown = Repr::new(
            BthRepr {
                opcode: OpCode::Unknown(0x40),
                ..BTH
            },
            0,
        );
        assert!(!unknown.headers_match_opcode());
    }
}
