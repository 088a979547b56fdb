//! Immediate Data Extended Transport Header (ImmDt), 4 bytes: IBTA vol. 1, ch. 9; rxe
//! `rxe_hdr.h`.
//!
//! ```text
//! bytes 0-3   immediate data
//! ```
//! The four bytes are opaque and copied verbatim; verbs carries them as a `__be32`
//! (`wr.imm_data`, `wc.imm_data`). Here they are read big-endian, so the value is what an
//! application gets from `be32toh(wc.imm_data)`.

use super::{header_packet, read, Error};

mod field {
    use crate::wire::Field;

    pub const IMM: Field = 0..4;
}

/// Length of an ImmDt in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::IMM.end;

header_packet!("Immediate Data Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate data, read big-endian.
    pub fn imm(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::IMM))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the immediate data, written big-endian.
    pub fn set_imm(&mut self, value: u32) {
        self.buffer.as_mut()[field::IMM].copy_from_slice(&value.to_be_bytes());
    }
}

/// An ImmDt (IBTA vol. 1, ch. 9); every bit pattern is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Immediate data (the wire bytes read big-endian).
    pub imm: u32,
}

impl Repr {
    /// Parses an ImmDt.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr { imm: packet.imm() })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the ImmDt.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_imm(self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 4] = [0xca, 0xfe, 0x00, 0x2a];

    const REPR: Repr = Repr { imm: 0xcafe_002a };

    #[test]
    fn immdt_deconstruct() {
        assert_eq!(Packet::new_checked(&BYTES[..]).unwrap().imm(), 0xcafe_002a);
    }

    #[test]
    fn immdt_construct() {
        let mut bytes = [0xa5; 4];
        Packet::new_unchecked(&mut bytes[..]).set_imm(0xcafe_002a);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn immdt_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn immdt_emit() {
        let mut bytes = [0; 4];
        assert_eq!(REPR.buffer_len(), 4);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn immdt_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
