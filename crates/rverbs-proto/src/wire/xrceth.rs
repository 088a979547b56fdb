//! XRC Extended Transport Header (XRCETH), 4 bytes (IBTA XRC annex).
//!
//! ```text
//! byte 0      reserved
//! bytes 1-3   XRCSRQ (24), the SRQ at the target that receives the message
//! ```
//! Every XRC *request* carries an XRCETH right after the BTH; XRC responses do not (IBTA
//! Annex A14; the same layout as the XRC entries of Linux's `rxe_opcode.c` XRC patches,
//! read for facts only).

use super::{header_packet, read_u24, write_u24, Error};

mod field {
    use crate::wire::Field;

    pub const RESERVED: usize = 0;
    pub const XRC_SRQ: Field = 1..4;
}

/// Length of an XRCETH in bytes.
pub const HEADER_LEN: usize = field::XRC_SRQ.end;

header_packet!("XRC Extended Transport Header (IBTA XRC annex)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// XRCSRQ, the number of the target SRQ (24 bits).
    pub fn xrc_srq(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::XRC_SRQ)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets XRCSRQ to the low 24 bits of `value` and zeroes the reserved byte.
    pub fn set_xrc_srq(&mut self, value: u32) {
        let buf = self.buffer.as_mut();
        buf[field::RESERVED] = 0;
        write_u24(buf, field::XRC_SRQ, value);
    }
}

/// An XRCETH; the reserved byte is ignored on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// XRCSRQ (24 bits).
    pub xrc_srq: u32,
}

impl Repr {
    /// Parses an XRCETH.
    ///
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            xrc_srq: packet.xrc_srq(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the XRCETH with a zero reserved byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_xrc_srq(self.xrc_srq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 4] = [0x00, 0x00, 0x01, 0x42];

    const REPR: Repr = Repr { xrc_srq: 0x142 };

    #[test]
    fn xrceth_deconstruct() {
        assert_eq!(Packet::new_checked(&BYTES[..]).unwrap().xrc_srq(), 0x142);
    }

    #[test]
    fn xrceth_construct() {
        let mut bytes = [0xa5; 4];
        Packet::new_unchecked(&mut bytes[..]).set_xrc_srq(0x142);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn xrceth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
        let reserved_set = [0xff, 0x00, 0x01, 0x42];
        assert_eq!(
            Repr::parse(&Packet::new_checked(&reserved_set[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn xrceth_emit() {
        let mut bytes = [0xff; 4];
        assert_eq!(REPR.buffer_len(), 4);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn xrceth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
