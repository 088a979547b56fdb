//! RDMA Extended Transport Header (RETH), 16 bytes: IBTA vol. 1, ch. 9; rxe `rxe_hdr.h`.
//!
//! ```text
//! bytes 0-7    VA (64)
//! bytes 8-11   R_Key (32)
//! bytes 12-15  DMA length (32)
//! ```
//! Carried by RDMA WRITE FIRST/ONLY, RDMA READ REQUEST, FLUSH and ATOMIC_WRITE (rxe
//! `rxe_opcode.c`).

use super::{header_packet, read, Error};

mod field {
    use crate::wire::Field;

    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// Length of a RETH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::DMA_LEN.end;

header_packet!("RDMA Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// VA, the remote virtual address.
    pub fn va(&self) -> u64 {
        u64::from_be_bytes(read(self.buffer.as_ref(), field::VA))
    }

    /// R_Key of the remote memory region.
    pub fn rkey(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::RKEY))
    }

    /// DMA length: bytes the whole message moves (for a WRITE FIRST, the remaining length).
    pub fn dma_len(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::DMA_LEN))
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

    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, value: u32) {
        self.buffer.as_mut()[field::DMA_LEN].copy_from_slice(&value.to_be_bytes());
    }
}

/// A RETH (IBTA vol. 1, ch. 9); every bit pattern is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// VA.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMA length.
    pub dma_len: u32,
}

impl Repr {
    /// Parses a RETH.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            dma_len: packet.dma_len(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 16] = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x00,
        0x02,
    ];

    const REPR: Repr = Repr {
        va: 0x0123_4567_89ab_cdef,
        rkey: 0xdead_beef,
        dma_len: 0x0001_0002,
    };

    #[test]
    fn reth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.va(), 0x0123_4567_89ab_cdef);
        assert_eq!(packet.rkey(), 0xdead_beef);
        assert_eq!(packet.dma_len(), 0x0001_0002);
    }

    #[test]
    fn reth_construct() {
        let mut bytes = [0xa5; 16];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_va(0x0123_4567_89ab_cdef);
        packet.set_rkey(0xdead_beef);
        packet.set_dma_len(0x0001_0002);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn reth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn reth_emit() {
        let mut bytes = [0; 16];
        assert_eq!(REPR.buffer_len(), 16);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn reth_payload_follows_header() {
        let mut bytes = [0u8; 20];
        bytes[..16].copy_from_slice(&BYTES);
        bytes[16..].copy_from_slice(b"data");
        assert_eq!(Packet::new_checked(&bytes[..]).unwrap().payload(), b"data");
    }

    #[test]
    fn reth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
