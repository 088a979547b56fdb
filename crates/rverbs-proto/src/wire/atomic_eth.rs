//! Atomic Extended Transport Header (AtomicETH), 28 bytes: IBTA vol. 1, ch. 9; rxe `rxe_hdr.h`
//! (`struct rxe_atmeth`).
//!
//! ```text
//! bytes 0-7    VA (64)
//! bytes 8-11   R_Key (32)
//! bytes 12-19  Swap (CMP_SWAP) or Add (FETCH_ADD) data (64)
//! bytes 20-27  Compare data (64); FETCH_ADD ignores it and sends 0
//! ```
//! Packed: the 64-bit fields are not 8-aligned. Operands are big-endian (IBTA vol. 1, ch. 9).

use super::{header_packet, read, Error};

mod field {
    use crate::wire::Field;

    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// Length of an AtomicETH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::COMPARE.end;

header_packet!("Atomic Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// VA of the 8-byte remote target.
    pub fn va(&self) -> u64 {
        u64::from_be_bytes(read(self.buffer.as_ref(), field::VA))
    }

    /// R_Key of the remote memory region.
    pub fn rkey(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::RKEY))
    }

    /// Swap data (COMPARE_SWAP) or add data (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        u64::from_be_bytes(read(self.buffer.as_ref(), field::SWAP_ADD))
    }

    /// Compare data (COMPARE_SWAP only).
    pub fn compare(&self) -> u64 {
        u64::from_be_bytes(read(self.buffer.as_ref(), field::COMPARE))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets VA.
    pub fn set_va(&mut self, value: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets R_Key.
    pub fn set_rkey(&mut self, value: u32) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the swap or add data.
    pub fn set_swap_add(&mut self, value: u64) {
        self.buffer.as_mut()[field::SWAP_ADD].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the compare data.
    pub fn set_compare(&mut self, value: u64) {
        self.buffer.as_mut()[field::COMPARE].copy_from_slice(&value.to_be_bytes());
    }
}

/// An AtomicETH (IBTA vol. 1, ch. 9); every bit pattern is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// VA.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap (COMPARE_SWAP) or add (FETCH_ADD) data.
    pub swap_add: u64,
    /// Compare data; 0 for FETCH_ADD.
    pub compare: u64,
}

impl Repr {
    /// Parses an AtomicETH.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 28] = [
        0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x56, 0x78, // VA
        0x00, 0x00, 0x10, 0x01, // R_Key
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // swap
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // compare
    ];

    const REPR: Repr = Repr {
        va: 0x0000_7f00_1234_5678,
        rkey: 0x1001,
        swap_add: 0x1122_3344_5566_7788,
        compare: 0x8000_0000_0000_0001,
    };

    #[test]
    fn atomic_eth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.va(), 0x0000_7f00_1234_5678);
        assert_eq!(packet.rkey(), 0x1001);
        assert_eq!(packet.swap_add(), 0x1122_3344_5566_7788);
        assert_eq!(packet.compare(), 0x8000_0000_0000_0001);
    }

    #[test]
    fn atomic_eth_construct() {
        let mut bytes = [0xa5; 28];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_va(0x0000_7f00_1234_5678);
        packet.set_rkey(0x1001);
        packet.set_swap_add(0x1122_3344_5566_7788);
        packet.set_compare(0x8000_0000_0000_0001);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn atomic_eth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn atomic_eth_emit() {
        let mut bytes = [0; 28];
        assert_eq!(REPR.buffer_len(), 28);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn atomic_eth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
