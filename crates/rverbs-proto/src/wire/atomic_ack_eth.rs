//! Atomic Acknowledge Extended Transport Header (AtomicAckETH), 8 bytes: IBTA vol. 1, ch. 9;
//! rxe `rxe_hdr.h` (`struct rxe_atmack`).
//!
//! ```text
//! bytes 0-7   Original remote data (64), big-endian
//! ```
//! Follows the AETH in an ATOMIC ACKNOWLEDGE (IBTA vol. 1, ch. 9; rxe `rxe_opcode.c`).

use super::{header_packet, read, Error};

mod field {
    use crate::wire::Field;

    pub const ORIGINAL: Field = 0..8;
}

/// Length of an AtomicAckETH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::ORIGINAL.end;

header_packet!("Atomic Acknowledge Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The remote data as it was before the atomic operation.
    pub fn original(&self) -> u64 {
        u64::from_be_bytes(read(self.buffer.as_ref(), field::ORIGINAL))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the original remote data.
    pub fn set_original(&mut self, value: u64) {
        self.buffer.as_mut()[field::ORIGINAL].copy_from_slice(&value.to_be_bytes());
    }
}

/// An AtomicAckETH (IBTA vol. 1, ch. 9); every bit pattern is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Original remote data.
    pub original: u64,
}

impl Repr {
    /// Parses an AtomicAckETH.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            original: packet.original(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_original(self.original);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 8] = [0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10];

    const REPR: Repr = Repr {
        original: 0xfedc_ba98_7654_3210,
    };

    #[test]
    fn atomic_ack_eth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.original(), 0xfedc_ba98_7654_3210);
    }

    #[test]
    fn atomic_ack_eth_construct() {
        let mut bytes = [0xa5; 8];
        Packet::new_unchecked(&mut bytes[..]).set_original(0xfedc_ba98_7654_3210);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn atomic_ack_eth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn atomic_ack_eth_emit() {
        let mut bytes = [0; 8];
        assert_eq!(REPR.buffer_len(), 8);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn atomic_ack_eth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
