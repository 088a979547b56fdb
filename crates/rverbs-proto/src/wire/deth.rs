//! Datagram Extended Transport Header (DETH), 8 bytes: IBTA vol. 1, ch. 9; rxe `rxe_hdr.h`
//! (`struct rxe_deth`).
//!
//! ```text
//! bytes 0-3   Q_Key (32)
//! byte 4      reserved
//! bytes 5-7   SrcQP (24)
//! ```
//! Carried by every UD packet (rxe `rxe_opcode.c`); a Q_Key mismatch is a silent drop (rxe
//! `rxe_recv.c` `check_keys`).

use super::{header_packet, read, read_u24, write_u24, Error};

mod field {
    use crate::wire::Field;

    pub const QKEY: Field = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Field = 5..8;
}

/// Length of a DETH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::SRC_QP.end;

header_packet!("Datagram Extended Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Q_Key, which must equal the destination QP's Q_Key.
    pub fn qkey(&self) -> u32 {
        u32::from_be_bytes(read(self.buffer.as_ref(), field::QKEY))
    }

    /// SrcQP, the sender's QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Q_Key.
    pub fn set_qkey(&mut self, value: u32) {
        self.buffer.as_mut()[field::QKEY].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets SrcQP to the low 24 bits of `value` and zeroes the reserved byte.
    pub fn set_src_qp(&mut self, value: u32) {
        let buf = self.buffer.as_mut();
        buf[field::RESERVED] = 0;
        write_u24(buf, field::SRC_QP, value);
    }
}

/// A DETH (IBTA vol. 1, ch. 9); the reserved byte is ignored on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Q_Key.
    pub qkey: u32,
    /// SrcQP (24 bits).
    pub src_qp: u32,
}

impl Repr {
    /// Parses a DETH.
    ///
    /// Rule: IBTA vol. 1, ch. 9 (unverified): the reserved byte is ignored on receipt.
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            qkey: packet.qkey(),
            src_qp: packet.src_qp(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the DETH with a zero reserved byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_qkey(self.qkey);
        packet.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q_Key 0x80010000 (QP1's, `GSI_QKEY` in rxe `rxe_hdr.h`), SrcQP 0xabcdef.
    static BYTES: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0xab, 0xcd, 0xef];

    const REPR: Repr = Repr {
        qkey: 0x8001_0000,
        src_qp: 0xab_cdef,
    };

    #[test]
    fn deth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.qkey(), 0x8001_0000);
        assert_eq!(packet.src_qp(), 0xab_cdef);
    }

    #[test]
    fn deth_construct() {
        let mut bytes = [0xa5; 8];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_qkey(0x8001_0000);
        packet.set_src_qp(0xab_cdef);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn deth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn deth_parse_ignores_reserved_byte() {
        let mut bytes = BYTES;
        bytes[4] = 0xff;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn deth_emit() {
        let mut bytes = [0xff; 8];
        assert_eq!(REPR.buffer_len(), 8);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn deth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
