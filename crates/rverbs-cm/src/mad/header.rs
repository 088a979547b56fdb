//! The common MAD header, 24 bytes: IBTA Vol 1 §13.4 (MAD format); Linux
//! `include/rdma/ib_mad.h` (`struct ib_mad_hdr`).
//!
//! ```text
//! byte 0      BaseVersion (1)
//! byte 1      MgmtClass (0x07 for CM)
//! byte 2      ClassVersion (2 for CM)
//! byte 3      R (0x80) | Method (0x7F); CM messages use Send, 0x03
//! bytes 4-5   Status
//! bytes 6-7   ClassSpecific
//! bytes 8-15  TransactionID
//! bytes 16-17 AttributeID
//! bytes 18-19 reserved
//! bytes 20-23 AttributeModifier
//! ```
//! Every field is big-endian. This module reads and writes any header; which values a CM MAD
//! must carry is checked by [`CmMessage::decode`](super::CmMessage::decode).

use super::field::{bit_accessors, get_u64, set_u64, view};
use super::common::{MadError, BASE_VERSION, CM_CLASS_VERSION, MAD_HEADER_LEN, METHOD_SEND, MGMT_CLASS_CM};

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const BASE_VERSION: Bits = Bits::new(0, 0, 8);
    pub const MGMT_CLASS: Bits = Bits::new(1, 0, 8);
    pub const CLASS_VERSION: Bits = Bits::new(2, 0, 8);
    pub const METHOD: Bits = Bits::new(3, 0, 8);
    pub const STATUS: Bits = Bits::new(4, 0, 16);
    pub const CLASS_SPECIFIC: Bits = Bits::new(6, 0, 16);
    pub const TRANSACTION_ID: Bytes = 8..16;
    pub const ATTRIBUTE_ID: Bits = Bits::new(16, 0, 16);
    pub const RESERVED: Bytes = 18..20;
    pub const ATTRIBUTE_MODIFIER: Bits = Bits::new(20, 0, 32);
}

/// Length of the common MAD header in bytes (IBTA Vol 1 §13.4).
pub const HEADER_LEN: usize = MAD_HEADER_LEN;

view!(
    /// A view over the 24-byte common MAD header (IBTA Vol 1 §13.4), which starts at offset 0.
    Packet,
    HEADER_LEN
);

bit_accessors!(Packet {
    /// BaseVersion: the MAD format version, 1 (IBTA Vol 1 §13.4).
    base_version / set_base_version: u8 = field::BASE_VERSION;
    /// MgmtClass: the management class, 0x07 for the CM (IBTA Vol 1 §13.4).
    mgmt_class / set_mgmt_class: u8 = field::MGMT_CLASS;
    /// ClassVersion: the version of the class; the CM's is 2 (IBTA Vol 1 ch. 12).
    class_version / set_class_version: u8 = field::CLASS_VERSION;
    /// Method, including the response bit 0x80 (IBTA Vol 1 §13.4).
    method / set_method: u8 = field::METHOD;
    /// Status, meaningful in responses (IBTA Vol 1 §13.4).
    status / set_status: u16 = field::STATUS;
    /// ClassSpecific: defined by each class; unused by the CM (IBTA Vol 1 §13.4).
    class_specific / set_class_specific: u16 = field::CLASS_SPECIFIC;
    /// AttributeID: selects the message in the data area (IBTA Vol 1 §13.4, ch. 12).
    attribute_id / set_attribute_id: u16 = field::ATTRIBUTE_ID;
    /// AttributeModifier (IBTA Vol 1 §13.4); the kernel CM puts the ECE attribute modifier here.
    attribute_modifier / set_attribute_modifier: u32 = field::ATTRIBUTE_MODIFIER;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// TransactionID: pairs a request with its response (IBTA Vol 1 §13.4).
    pub fn transaction_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::TRANSACTION_ID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets TransactionID.
    pub fn set_transaction_id(&mut self, value: u64) {
        set_u64(self.buffer.as_mut(), field::TRANSACTION_ID, value);
    }
}

/// The common MAD header (IBTA Vol 1 §13.4); the reserved bytes 18-19 are ignored on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadHeader {
    /// BaseVersion, 1.
    pub base_version: u8,
    /// MgmtClass; 0x07 is the CM.
    pub mgmt_class: u8,
    /// ClassVersion; the CM's is 2.
    pub class_version: u8,
    /// Method with its response bit.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub transaction_id: u64,
    /// AttributeID.
    pub attribute_id: u16,
    /// AttributeModifier.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// The header of a CM message: base version 1, class 0x07, class version 2, method Send,
    /// status, class-specific and attribute modifier zero.
    ///
    /// Rule: IBTA Vol 1 ch. 12: every CM message is sent with the Send method; Linux
    /// `cm_format_mad_hdr` fills the header this way.
    pub const fn cm(attribute_id: u16, transaction_id: u64) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// Parses a header; every value is accepted.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`HEADER_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<MadHeader, MadError> {
        packet.check_len()?;
        Ok(MadHeader {
            base_version: packet.base_version(),
            mgmt_class: packet.mgmt_class(),
            class_version: packet.class_version(),
            method: packet.method(),
            status: packet.status(),
            class_specific: packet.class_specific(),
            transaction_id: packet.transaction_id(),
            attribute_id: packet.attribute_id(),
            attribute_modifier: packet.attribute_modifier(),
        })
    }

    /// Length of the emitted header: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with zero reserved bytes.
    ///
    /// Panics if the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_base_version(self.base_version);
        packet.set_mgmt_class(self.mgmt_class);
        packet.set_class_version(self.class_version);
        packet.set_method(self.method);
        packet.set_status(self.status);
        packet.set_class_specific(self.class_specific);
        packet.set_transaction_id(self.transaction_id);
        packet.set_attribute_id(self.attribute_id);
        packet.buffer.as_mut()[field::RESERVED].fill(0);
        packet.set_attribute_modifier(self.attribute_modifier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A REQ header: version 1, class 0x07, class version 2, Send, status 0x1234,
    /// class-specific 0x5678, TID 0x0102030405060708, attribute 0x0010, modifier 0xdeadbeef.
    static BYTES: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x12, 0x34, 0x56, 0x78, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
        0x08, 0x00, 0x10, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef,
    ];

    const REPR: MadHeader = MadHeader {
        base_version: 1,
        mgmt_class: 0x07,
        class_version: 2,
        method: 0x03,
        status: 0x1234,
        class_specific: 0x5678,
        transaction_id: 0x0102_0304_0506_0708,
        attribute_id: 0x0010,
        attribute_modifier: 0xdead_beef,
    };

    #[test]
    fn mad_header_deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.base_version(), 1);
        assert_eq!(p.mgmt_class(), 0x07);
        assert_eq!(p.class_version(), 2);
        assert_eq!(p.method(), 0x03);
        assert_eq!(p.status(), 0x1234);
        assert_eq!(p.class_specific(), 0x5678);
        assert_eq!(p.transaction_id(), 0x0102_0304_0506_0708);
        assert_eq!(p.attribute_id(), 0x0010);
        assert_eq!(p.attribute_modifier(), 0xdead_beef);
    }

    #[test]
    fn mad_header_parse_ignores_reserved() {
        let mut bytes = BYTES;
        bytes[18] = 0xff;
        bytes[19] = 0xff;
        assert_eq!(
            MadHeader::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(REPR)
        );
    }

    #[test]
    fn mad_header_emit() {
        let mut bytes = [0xa5u8; 24];
        REPR.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn mad_header_too_short_is_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..len]),
                Err(MadError::Truncated {
                    len,
                    need: HEADER_LEN
                })
            );
        }
    }

    #[test]
    fn cm_header_has_cm_constants() {
        let h = MadHeader::cm(0x0013, 7);
        assert_eq!(
            (h.base_version, h.mgmt_class, h.class_version, h.method),
            (1, 0x07, 2, 0x03)
        );
        assert_eq!((h.attribute_id, h.transaction_id), (0x0013, 7));
    }
}
