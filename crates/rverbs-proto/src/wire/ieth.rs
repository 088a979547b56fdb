//! Invalidate Extended Transport Header (IETH), 4 bytes: IBTA vol. 1, ch. 9; rxe `rxe_hdr.h`.
//!
//! ```text
//! bytes 0-3   R_Key to invalidate (32)
//! ```
//! Carried by SEND_LAST_WITH_INVALIDATE and SEND_ONLY_WITH_INVALIDATE (rxe `rxe_opcode.c`).

use super::{header_packet, read, Error};

mod field {
    use crate::wire::Field;

    pub const RKEY: Field = 0..4;
}

/// Length of an IETH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::RKEY.end;

header_packet!("Invalidate Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The R_Key the responder invalidates.
    pub fn rkey(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::RKEY))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, value: u32) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&value.to_be_bytes());
    }
}

/// An IETH (IBTA vol. 1, ch. 9); every bit pattern is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// R_Key to invalidate.
    pub rkey: u32,
}

impl Repr {
    /// Parses an IETH.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            rkey: packet.rkey(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the IETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_rkey(self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 4] = [0x00, 0x04, 0x2a, 0x17];

    const REPR: Repr = Repr { rkey: 0x0004_2a17 };

    #[test]
    fn ieth_deconstruct() {
        assert_eq!(Packet::new_checked(&BYTES[..]).unwrap().rkey(), 0x0004_2a17);
    }

    #[test]
    fn ieth_construct() {
        let mut bytes = [0xa5; 4];
        Packet::new_unchecked(&mut bytes[..]).set_rkey(0x0004_2a17);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn ieth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn ieth_emit() {
        let mut bytes = [0; 4];
        assert_eq!(REPR.buffer_len(), 4);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn ieth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
