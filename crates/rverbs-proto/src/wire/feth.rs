//! Flush Extended Transport Header (FETH), 4 bytes: IBTA 1.5 Annex A19; rxe `rxe_hdr.h`.
//!
//! ```text
//! bytes 0-2   reserved
//! byte 3      reserved(0xC0) | SEL(0x30) | PLT(0x0F)
//! ```
//! SEL, selectivity: 0 = the memory range of the RETH, 1 = the whole MR. PLT, placement
//! type, a bit mask: 1 = global visibility, 2 = persistence. Carried by FLUSH, before the
//! RETH (rxe `rxe_opcode.c`).

use bitflags::bitflags;

use super::{enum_with_unknown, header_packet, Error};

mod field {
    use crate::wire::Field;

    pub const RESERVED: Field = 0..3;
    pub const SEL_PLT: usize = 3;

    pub const SEL_SHIFT: u32 = 4;
    pub const SEL_MASK: u8 = 0x30;
    pub const PLT_MASK: u8 = 0x0F;
}

/// Length of an FETH in bytes (IBTA Annex A19).
pub const HEADER_LEN: usize = field::SEL_PLT + 1;

enum_with_unknown! {
    /// FETH selectivity level, SEL (2 bits; IBTA Annex A19).
    ///
    /// The reserved values 2 and 3 are kept as `Unknown` for the responder to refuse.
    pub enum Selectivity(u8) {
        /// Flush the memory range given by the RETH VA and DMA length.
        MemoryRange = 0,
        /// Flush the whole memory region named by the RETH R_Key.
        WholeMr = 1,
    }
}

bitflags! {
    /// FETH placement type, PLT (4 bits; IBTA Annex A19). Reserved bits are kept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Placement: u8 {
        /// Make the data globally visible.
        const GLOBAL_VISIBILITY = 1;
        /// Make the data persistent.
        const PERSISTENCE = 2;
    }
}

header_packet!("Flush Extended Transport Header (IBTA Annex A19)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// SEL, the selectivity level.
    pub fn selectivity(&self) -> Selectivity {
        let byte = self.buffer.as_ref()[field::SEL_PLT];
        Selectivity::from((byte & field::SEL_MASK) >> field::SEL_SHIFT)
    }

    /// PLT, the placement type, reserved bits included.
    pub fn placement(&self) -> Placement {
        Placement::from_bits_retain(self.buffer.as_ref()[field::SEL_PLT] & field::PLT_MASK)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets SEL to the low 2 bits of `value`.
    pub fn set_selectivity(&mut self, value: Selectivity) {
        let byte = &mut self.buffer.as_mut()[field::SEL_PLT];
        *byte =
            (*byte & !field::SEL_MASK) | ((u8::from(value) << field::SEL_SHIFT) & field::SEL_MASK);
    }

    /// Sets PLT to the low 4 bits of `value`.
    pub fn set_placement(&mut self, value: Placement) {
        let byte = &mut self.buffer.as_mut()[field::SEL_PLT];
        *byte = (*byte & !field::PLT_MASK) | (value.bits() & field::PLT_MASK);
    }

    /// Zeroes the reserved bits.
    pub fn clear_reserved(&mut self) {
        let buf = self.buffer.as_mut();
        buf[field::RESERVED].fill(0);
        buf[field::SEL_PLT] &= field::SEL_MASK | field::PLT_MASK;
    }
}

/// An FETH (IBTA Annex A19); reserved bits are ignored on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// SEL.
    pub selectivity: Selectivity,
    /// PLT.
    pub placement: Placement,
}

impl Repr {
    /// Parses an FETH.
    ///
    /// Rule: the responder, not the parser, refuses a reserved SEL or an empty PLT (it
    /// answers with a NAK; rxe `rxe_resp.c`), so both are kept here.
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            selectivity: packet.selectivity(),
            placement: packet.placement(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the FETH with zero reserved bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear_reserved();
        packet.set_selectivity(self.selectivity);
        packet.set_placement(self.placement);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole MR, global visibility + persistence.
    static BYTES: [u8; 4] = [0x00, 0x00, 0x00, 0x13];

    const REPR: Repr = Repr {
        selectivity: Selectivity::WholeMr,
        placement: Placement::GLOBAL_VISIBILITY.union(Placement::PERSISTENCE),
    };

    #[test]
    fn feth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.selectivity(), Selectivity::WholeMr);
        assert_eq!(
            packet.placement(),
            Placement::GLOBAL_VISIBILITY | Placement::PERSISTENCE
        );
    }

    #[test]
    fn feth_construct() {
        let mut bytes = [0xff; 4];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.clear_reserved();
        packet.set_selectivity(Selectivity::WholeMr);
        packet.set_placement(Placement::GLOBAL_VISIBILITY | Placement::PERSISTENCE);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn feth_parse() {
        assert_eq!(
            Repr::parse(&Packet::new_checked(&BYTES[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn feth_emit() {
        let mut bytes = [0xff; 4];
        assert_eq!(REPR.buffer_len(), 4);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn feth_reserved_values_are_kept_and_reserved_bits_ignored() {
        let bytes = [0xff, 0xff, 0xff, 0xe8];
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.selectivity, Selectivity::Unknown(2));
        assert_eq!(repr.placement.bits(), 0x8);
        assert_eq!(repr.placement & Placement::all(), Placement::empty());
        let mut out = [0; 4];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, [0, 0, 0, 0x28]);
    }

    #[test]
    fn feth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
