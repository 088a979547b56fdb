//! ACK Extended Transport Header (AETH), 4 bytes: IBTA vol. 1, ch. 9; rxe `rxe_hdr.h`.
//!
//! ```text
//! byte 0      Syndrome: resv(0x80) | type(0x60) | value(0x1F)
//! bytes 1-3   MSN (24)
//! ```
//! Syndrome type 00 = ACK (value: credit count), 01 = RNR NAK (value: RNR timer code,
//! `min_rnr_timer` of ibv_modify_qp(3)), 10 = reserved, 11 = NAK (value: NAK code).

use super::{enum_with_unknown, header_packet, read_u24, write_u24, Error};

mod field {
    use crate::wire::Field;

    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;

    pub const TYPE_MASK: u8 = 0x60;
    pub const VALUE_MASK: u8 = 0x1F;
    pub const TYPE_ACK: u8 = 0x00;
    pub const TYPE_RNR_NAK: u8 = 0x20;
    pub const TYPE_NAK: u8 = 0x60;
}

/// Length of an AETH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::MSN.end;

/// The credit count "unlimited/invalid" that rxe always sends (`AETH_ACK_UNLIMITED`).
pub const CREDITS_INVALID: u8 = 0x1F;

enum_with_unknown! {
    /// The NAK code of a NAK syndrome (IBTA vol. 1, ch. 9; rxe `enum aeth_syndrome`).
    ///
    /// Rule: rxe `rxe_comp.c` `check_ack`: a requester treats codes it does not know like
    /// `RemoteOperationalError` (rxe), so unknown codes are kept, not refused.
    pub enum NakCode(u8) {
        /// PSN sequence error (0x60): the responder expected another PSN.
        PsnSequenceError = 0,
        /// Invalid request (0x61).
        InvalidRequest = 1,
        /// Remote access error (0x62): bad R_Key, range or access rights.
        RemoteAccessError = 2,
        /// Remote operational error (0x63).
        RemoteOperationalError = 3,
        /// Invalid RD request (0x64), RD only.
        InvalidRdRequest = 4,
    }
}

/// An AETH syndrome (IBTA vol. 1, ch. 9).
///
/// `u8::from(syndrome)` gives the wire byte: ACK `0x00 | credits`, RNR NAK `0x20 | timer`,
/// NAK `0x60 | code`; values wider than 5 bits are truncated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK with a credit count (5 bits; [`CREDITS_INVALID`] = unlimited, what rxe sends).
    Ack {
        /// End-to-end credit count.
        credits: u8,
    },
    /// RNR NAK: the responder had no receive WQE.
    RnrNak {
        /// RNR timer code (5 bits), the minimum wait before retrying (see [`crate::rnr`]).
        timer: u8,
    },
    /// NAK with its code.
    Nak(NakCode),
}

impl Syndrome {
    /// The plain ACK rxe sends: credits [`CREDITS_INVALID`] (syndrome 0x1F).
    pub const ACK: Syndrome = Syndrome::Ack {
        credits: CREDITS_INVALID,
    };

    /// Whether this is an ACK (not a NAK of either kind).
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

impl TryFrom<u8> for Syndrome {
    type Error = Error;

    /// Decodes a syndrome byte.
    ///
    /// Rule: IBTA vol. 1, ch. 9 (unverified): bit 7 is reserved and ignored on receipt.
    /// Errors: `Error` for the reserved type 0b10 (0x40..=0x5F).
    fn try_from(byte: u8) -> Result<Self, Error> {
        let value = byte & field::VALUE_MASK;
        match byte & field::TYPE_MASK {
            field::TYPE_ACK => Ok(Syndrome::Ack { credits: value }),
            field::TYPE_RNR_NAK => Ok(Syndrome::RnrNak { timer: value }),
            field::TYPE_NAK => Ok(Syndrome::Nak(NakCode::from(value))),
            _ => Err(Error),
        }
    }
}

impl From<Syndrome> for u8 {
    fn from(syndrome: Syndrome) -> u8 {
        match syndrome {
            Syndrome::Ack { credits } => field::TYPE_ACK | (credits & field::VALUE_MASK),
            Syndrome::RnrNak { timer } => field::TYPE_RNR_NAK | (timer & field::VALUE_MASK),
            Syndrome::Nak(code) => field::TYPE_NAK | (u8::from(code) & field::VALUE_MASK),
        }
    }
}

header_packet!("ACK Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte; decode it with `Syndrome::try_from`.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }

    /// MSN, the responder's count of completed inbound messages (24 bits; rxe `rxe_resp.c`).
    pub fn msn(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome(&mut self, value: u8) {
        self.buffer.as_mut()[field::SYNDROME] = value;
    }

    /// Sets the MSN to the low 24 bits of `value`.
    pub fn set_msn(&mut self, value: u32) {
        write_u24(self.buffer.as_mut(), field::MSN, value);
    }
}

/// An AETH with a decoded syndrome (IBTA vol. 1, ch. 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Syndrome: ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// MSN (24 bits).
    pub msn: u32,
}

impl Repr {
    /// Parses an AETH.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`] or the syndrome type is
    /// the reserved 0b10.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            syndrome: Syndrome::try_from(packet.syndrome())?,
            msn: packet.msn(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome(self.syndrome.into());
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RNR NAK with timer code 14 (1.28 ms), MSN 0x012345.
    static BYTES: [u8; 4] = [0x2e, 0x01, 0x23, 0x45];

    const REPR: Repr = Repr {
        syndrome: Syndrome::RnrNak { timer: 14 },
        msn: 0x01_2345,
    };

    #[test]
    fn aeth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.syndrome(), 0x2e);
        assert_eq!(packet.msn(), 0x01_2345);
    }

    #[test]
    fn aeth_construct() {
        let mut bytes = [0xa5; 4];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_syndrome(0x2e);
        packet.set_msn(0x01_2345);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn aeth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn aeth_emit() {
        let mut bytes = [0; 4];
        assert_eq!(REPR.buffer_len(), 4);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn aeth_syndrome_values_match_the_table() {
        // rxe `enum aeth_syndrome`: ACK 0x1F; RNR NAK 0x20|timer; NAK 0x60/0x61/0x62/0x63(/0x64).
        assert_eq!(u8::from(Syndrome::ACK), 0x1f);
        assert_eq!(u8::from(Syndrome::Ack { credits: 0 }), 0x00);
        assert_eq!(u8::from(Syndrome::RnrNak { timer: 0 }), 0x20);
        assert_eq!(u8::from(Syndrome::RnrNak { timer: 31 }), 0x3f);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::PsnSequenceError)), 0x60);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::InvalidRequest)), 0x61);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::RemoteAccessError)), 0x62);
        assert_eq!(
            u8::from(Syndrome::Nak(NakCode::RemoteOperationalError)),
            0x63
        );
        assert_eq!(u8::from(Syndrome::Nak(NakCode::InvalidRdRequest)), 0x64);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::Unknown(0x1d))), 0x7d);
        assert!(Syndrome::ACK.is_ack());
        assert!(!Syndrome::RnrNak { timer: 1 }.is_ack());
        assert!(!Syndrome::Nak(NakCode::InvalidRequest).is_ack());
    }

    #[test]
    fn aeth_syndrome_every_byte_decodes_or_is_reserved() {
        for byte in 0..=u8::MAX {
            let decoded = Syndrome::try_from(byte);
            if byte & 0x60 == 0x40 {
                assert_eq!(decoded, Err(Error), "byte {byte:#04x}");
            } else {
                // Bit 7 is reserved: ignored on parse, emitted as 0.
                assert_eq!(decoded.map(u8::from), Ok(byte & 0x7f), "byte {byte:#04x}");
            }
        }
    }

    #[test]
    fn aeth_parse_rejects_reserved_syndrome_type() {
        let bytes = [0x5f, 0, 0, 1];
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(Error)
        );
    }

    #[test]
    fn aeth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
