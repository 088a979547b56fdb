//! Base Transport Header (BTH), 12 bytes: IBTA vol. 1, ch. 9; rxe `rxe_hdr.h` (`struct rxe_bth`).
//!
//! ```text
//! byte 0      OpCode
//! byte 1      SE(0x80) | M(0x40) | PadCnt(0x30) | TVer(0x0F)
//! bytes 2-3   P_Key
//! byte 4      FECN(0x80) | BECN(0x40) | resv6a(0x3F)
//! bytes 5-7   DestQP (24)
//! byte 8      AckReq(0x80) | resv7(0x7F)
//! bytes 9-11  PSN (24)
//! ```

use super::{header_packet, read, read_u24, set_bits, write_u24, Error, OpCode};

mod field {
    use crate::wire::Field;

    pub const OPCODE: usize = 0;
    /// SE | M | PadCnt | TVer.
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    /// FECN | BECN | resv6a; the ICRC masks the whole byte (IBTA Annex A17; rxe `rxe_icrc.c`).
    pub const ECN: usize = 4;
    pub const DEST_QP: Field = 5..8;
    /// AckReq | resv7.
    pub const ACK_REQ: usize = 8;
    pub const PSN: Field = 9..12;

    pub const SE: u8 = 0x80;
    pub const MIGREQ: u8 = 0x40;
    pub const PAD_SHIFT: u32 = 4;
    pub const PAD_MASK: u8 = 0x30;
    pub const TVER_MASK: u8 = 0x0F;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const ACK_REQ_BIT: u8 = 0x80;
}

/// Length of a BTH in bytes (IBTA vol. 1, ch. 9).
pub const HEADER_LEN: usize = field::PSN.end;

/// Byte offset of the ECN byte (FECN, BECN, resv6a), which the ICRC masks (IBTA Annex A17).
pub const ECN_OFFSET: usize = field::ECN;

header_packet!("Base Transport Header (IBTA vol. 1, ch. 9)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// OpCode (byte 0): transport in the high 3 bits, operation in the low 5 (IBTA vol. 1, ch. 9).
    pub fn opcode(&self) -> OpCode {
        OpCode::from(self.buffer.as_ref()[field::OPCODE])
    }

    /// SE, solicited event: set on the last packet of a solicited SEND or WRITE-with-IMM.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::SE != 0
    }

    /// M, migration request. rxe sends 0, hardware often 1; receivers ignore it.
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::MIGREQ != 0
    }

    /// PadCnt: number of pad bytes (0..=3) between the payload and the ICRC (IBTA vol. 1, ch. 9).
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & field::PAD_MASK) >> field::PAD_SHIFT
    }

    /// TVer, transport header version (4 bits); 0 is the only one defined (IBTA vol. 1, ch. 9).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & field::TVER_MASK
    }

    /// P_Key, the partition key. rxe sends 0xFFFF (`IB_DEFAULT_PKEY_FULL`).
    pub fn pkey(&self) -> u16 {
        u16::from_be_bytes(read(self.buffer.as_ref(), field::PKEY))
    }

    /// F, forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & field::FECN != 0
    }

    /// B, backward explicit congestion notification (set in a CNP, IBTA Annex A17).
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & field::BECN != 0
    }

    /// DestQP, the destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::DEST_QP)
    }

    /// A, acknowledge request (RC only; rxe `rxe_req.c` sets it at each message end).
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & field::ACK_REQ_BIT != 0
    }

    /// PSN, the packet sequence number (24 bits; see [`crate::psn`]).
    pub fn psn(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the OpCode byte.
    pub fn set_opcode(&mut self, value: OpCode) {
        self.buffer.as_mut()[field::OPCODE] = value.into();
    }

    /// Sets or clears SE.
    pub fn set_solicited(&mut self, value: bool) {
        set_bits(&mut self.buffer.as_mut()[field::FLAGS], field::SE, value);
    }

    /// Sets or clears M.
    pub fn set_migreq(&mut self, value: bool) {
        set_bits(
            &mut self.buffer.as_mut()[field::FLAGS],
            field::MIGREQ,
            value,
        );
    }

    /// Sets PadCnt to the low 2 bits of `value`.
    pub fn set_pad_count(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::FLAGS];
        *byte = (*byte & !field::PAD_MASK) | ((value << field::PAD_SHIFT) & field::PAD_MASK);
    }

    /// Sets TVer to the low 4 bits of `value`.
    pub fn set_tver(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::FLAGS];
        *byte = (*byte & !field::TVER_MASK) | (value & field::TVER_MASK);
    }

    /// Sets P_Key.
    pub fn set_pkey(&mut self, value: u16) {
        self.buffer.as_mut()[field::PKEY].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets or clears FECN.
    pub fn set_fecn(&mut self, value: bool) {
        set_bits(&mut self.buffer.as_mut()[field::ECN], field::FECN, value);
    }

    /// Sets or clears BECN.
    pub fn set_becn(&mut self, value: bool) {
        set_bits(&mut self.buffer.as_mut()[field::ECN], field::BECN, value);
    }

    /// Sets DestQP to the low 24 bits of `value`.
    pub fn set_dest_qp(&mut self, value: u32) {
        write_u24(self.buffer.as_mut(), field::DEST_QP, value);
    }

    /// Sets or clears AckReq.
    pub fn set_ack_req(&mut self, value: bool) {
        set_bits(
            &mut self.buffer.as_mut()[field::ACK_REQ],
            field::ACK_REQ_BIT,
            value,
        );
    }

    /// Sets the PSN to the low 24 bits of `value`.
    pub fn set_psn(&mut self, value: u32) {
        write_u24(self.buffer.as_mut(), field::PSN, value);
    }

    /// Zeroes the reserved bits resv6a and resv7 (IBTA: sent as zero).
    pub fn clear_reserved(&mut self) {
        let buf = self.buffer.as_mut();
        buf[field::ECN] &= field::FECN | field::BECN;
        buf[field::ACK_REQ] &= field::ACK_REQ_BIT;
    }
}

/// A BTH rverbs accepts: TVer 0, reserved bits ignored (IBTA vol. 1, ch. 9; rxe `hdr_check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// OpCode; unknown values are kept (the whole-packet parse refuses them).
    pub opcode: OpCode,
    /// SE, solicited event.
    pub solicited: bool,
    /// M, migration request.
    pub migreq: bool,
    /// PadCnt (0..=3). [`crate::wire::roce::Repr::emit`] overwrites it from the payload length.
    pub pad_count: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl Repr {
    /// Parses a BTH.
    ///
    /// Rule: rxe `rxe_recv.c` `hdr_check`: a packet with TVer ≠ 0 is dropped.
    /// Rule: IBTA vol. 1, ch. 9 (unverified): reserved bits (resv6a, resv7) are ignored on receipt.
    /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`] or TVer ≠ 0.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        if packet.tver() != 0 {
            return Err(Error);
        }
        Ok(Repr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            migreq: packet.migreq(),
            pad_count: packet.pad_count(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the BTH, with TVer 0 and zero reserved bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_opcode(self.opcode);
        packet.buffer.as_mut()[field::FLAGS] = 0;
        packet.set_solicited(self.solicited);
        packet.set_migreq(self.migreq);
        packet.set_pad_count(self.pad_count);
        packet.set_pkey(self.pkey);
        packet.buffer.as_mut()[field::ECN] = 0;
        packet.set_fecn(self.fecn);
        packet.set_becn(self.becn);
        packet.set_dest_qp(self.dest_qp);
        packet.buffer.as_mut()[field::ACK_REQ] = 0;
        packet.set_ack_req(self.ack_req);
        packet.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RC RDMA_WRITE_ONLY, SE, M, PadCnt 2, P_Key 0x8001, FECN, DestQP 0x123456, AckReq,
    /// PSN 0xABCDEF.
    static BYTES: [u8; 12] = [
        0x0a, 0xe0, 0x80, 0x01, 0x80, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef,
    ];

    const REPR: Repr = Repr {
        opcode: OpCode::RcRdmaWriteOnly,
        solicited: true,
        migreq: true,
        pad_count: 2,
        pkey: 0x8001,
        fecn: true,
        becn: false,
        dest_qp: 0x12_3456,
        ack_req: true,
        psn: 0xab_cdef,
    };

    #[test]
    fn bth_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.opcode(), OpCode::RcRdmaWriteOnly);
        assert!(packet.solicited());
        assert!(packet.migreq());
        assert_eq!(packet.pad_count(), 2);
        assert_eq!(packet.tver(), 0);
        assert_eq!(packet.pkey(), 0x8001);
        assert!(packet.fecn());
        assert!(!packet.becn());
        assert_eq!(packet.dest_qp(), 0x12_3456);
        assert!(packet.ack_req());
        assert_eq!(packet.psn(), 0xab_cdef);
        assert!(packet.payload().is_empty());
    }

    #[test]
    fn bth_construct() {
        let mut bytes = [0xa5; 12];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_opcode(OpCode::RcRdmaWriteOnly);
        packet.set_solicited(true);
        packet.set_migreq(true);
        packet.set_pad_count(2);
        packet.set_tver(0);
        packet.set_pkey(0x8001);
        packet.set_fecn(true);
        packet.set_becn(false);
        packet.clear_reserved();
        packet.set_dest_qp(0x12_3456);
        packet.set_ack_req(true);
        packet.set_psn(0xab_cdef);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn bth_parse() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Ok(REPR));
    }

    #[test]
    fn bth_emit() {
        let mut bytes = [0xff; 12];
        assert_eq!(REPR.buffer_len(), 12);
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn bth_parse_rejects_tver_not_zero() {
        let mut bytes = BYTES;
        Packet::new_unchecked(&mut bytes[..]).set_tver(1);
        assert_eq!(bytes[1], 0xe1);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Err(Error));
    }

    #[test]
    fn bth_parse_ignores_reserved_bits() {
        let mut bytes = BYTES;
        bytes[4] |= 0x3f;
        bytes[8] |= 0x7f;
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(REPR));
    }

    #[test]
    fn bth_emit_truncates_wide_values() {
        let repr = Repr {
            dest_qp: 0xff12_3456,
            psn: 0x01ab_cdef,
            pad_count: 6,
            ..REPR
        };
        let mut bytes = [0; 12];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn bth_setters_keep_neighbouring_bits() {
        let mut bytes = BYTES;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_migreq(false);
        packet.set_fecn(false);
        packet.set_becn(true);
        packet.set_ack_req(false);
        assert_eq!(packet.pad_count(), 2);
        assert!(packet.solicited());
        assert_eq!(
            &bytes[..],
            &[0x0a, 0xa0, 0x80, 0x01, 0x40, 0x12, 0x34, 0x56, 0x00, 0xab, 0xcd, 0xef]
        );
    }

    #[test]
    fn bth_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&BYTES[..len]), Err(Error));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..len])),
                Err(Error)
            );
        }
    }
}
