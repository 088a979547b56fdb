//! InfiniBand Communication Manager MADs: the wire formats of IBTA Vol 1, chapter 12.
//!
//! Read before editing: IBTA Vol 1 §13.4 (the MAD format and its 24-byte common header) and
//! §12.6 (the CM messages; their contents tables are Table 106 REQ, 107 MRA, 108 REJ, 110 REP,
//! 111 RTU, 112 DREQ, 113 DREP, 119 SIDR_REQ and 120 SIDR_REP in the numbering of the Linux
//! kernel's `include/rdma/ibta_vol1_c12.h`, which gives every field's `Byte[Bit]` offset and
//! width). rdma_cm's use of the private data is in Linux `drivers/infiniband/core/cma.c`.
//!
//! A CM MAD is a 256-byte management datagram exchanged between the communication managers
//! of two ports over QP1 (the GSI). It is a common MAD header ([`header`]: base version 1,
//! management class 0x07, class version 2, method Send 0x03) followed by a 232-byte data area
//! whose layout the header's AttributeID selects: one module per message ([`req`], [`rep`],
//! [`rtu`], [`rej`], [`mra`], [`dreq`], [`drep`], [`sidr`]), with the REQ path in [`path`].
//! [`reason`] holds the REJ reasons and SIDR_REP statuses, [`cma_ip`] the header rdma_cm puts
//! in front of REQ and SIDR_REQ private data, and [`service`] rdma_cm's service IDs.
//! [`CmMessage`] puts header and data area together.
//!
//! Every message module has the shape of smoltcp's `wire` (and of `rverbs_proto::wire`):
//! - `Packet<T: AsRef<[u8]>>`, a view over the 232-byte data area. Getters need
//!   `AsRef<[u8]>`; setters need `AsMut<[u8]>` too. A private `mod field` lists every field in
//!   the IBTA `Byte[Bit], width` notation, offsets counted from the start of the data area.
//! - A plain struct (the smoltcp `Repr`: [`Req`], [`Rep`], …) with every IBTA field, and
//!   `parse`, `buffer_len` and `emit`.
//!
//! # Panics
//!
//! - `Packet::new_unchecked` checks nothing; an accessor on a buffer that is too short panics.
//! - `Packet::check_len` fails with [`MadError::Truncated`] when an accessor could panic; once
//!   it has succeeded no accessor panics, whatever the bytes hold. `Packet::new_checked` is
//!   both. **Bytes from the network go through [`CmMessage::decode`] or `new_checked`.**
//! - `parse` checks the length itself and never panics. It masks every field to its width and
//!   ignores reserved bits; it fails only on a short buffer or a length field out of range.
//! - `emit` never panics on a buffer of at least `buffer_len()` bytes. It zeroes the area
//!   first, so reserved bits go out as zero, and truncates values wider than their field (a
//!   24-bit QPN in a `u32`).
//! - [`CmMessage::decode`] never panics, on any input.
//!
//! Nothing here does I/O or allocates.

#![forbid(unsafe_code)]

pub mod cma_ip;
mod common;
pub mod drep;
pub mod dreq;
pub(crate) mod field;
pub mod header;
pub mod mra;
pub mod path;
pub mod reason;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod service;
pub mod sidr;

#[cfg(test)]
mod tests;

pub use self::cma_ip::CmaIpHeader;
pub use self::drep::{Drep, Packet as DrepPacket};
pub use self::dreq::{Dreq, Packet as DreqPacket};
pub use self::header::{MadHeader, Packet as MadHeaderPacket};
pub use self::mra::{Mra, Packet as MraPacket};
pub use self::path::{Packet as PathPacket, Path};
pub use self::reason::{RejReason, SidrStatus};
pub use self::rej::{Packet as RejPacket, Rej};
pub use self::rep::{Packet as RepPacket, Rep};
pub use self::req::{Packet as ReqPacket, Req, TransportServiceType};
pub use self::rtu::{Packet as RtuPacket, Rtu};
pub use self::sidr::{SidrRep, SidrRepPacket, SidrReq, SidrReqPacket};

pub use self::common::{
    MadError, MessageKind, ATTR_APR, ATTR_CLASS_PORT_INFO, ATTR_DREP, ATTR_DREQ, ATTR_LAP, ATTR_MRA, ATTR_REJ, ATTR_REP, ATTR_REQ,
    ATTR_RTU, ATTR_SIDR_REP, ATTR_SIDR_REQ, BASE_VERSION, CM_CLASS_VERSION, CM_DATA_LEN, MAD_HEADER_LEN, MAD_SIZE, METHOD_SEND,
    MGMT_CLASS_CM,
};

/// A CM message that rverbs sends and receives (IBTA Vol 1 §12.6; SIDR in Tables 119-120).
///
/// LAP and APR (path migration) and ClassPortInfo are not among them: decoding one gives
/// [`MadError::UnsupportedAttribute`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// REQ (0x0010).
    Req(Req),
    /// MRA (0x0011).
    Mra(Mra),
    /// REJ (0x0012).
    Rej(Rej),
    /// REP (0x0013).
    Rep(Rep),
    /// RTU (0x0014).
    Rtu(Rtu),
    /// DREQ (0x0015).
    Dreq(Dreq),
    /// DREP (0x0016).
    Drep(Drep),
    /// SIDR_REQ (0x0017).
    SidrReq(SidrReq),
    /// SIDR_REP (0x0018).
    SidrRep(SidrRep),
}

macro_rules! from_message {
    ($($variant:ident),+) => {$(
        impl From<$variant> for CmMessage {
            fn from(message: $variant) -> Self {
                CmMessage::$variant(message)
            }
        }
    )+};
}
from_message!(Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep);

impl CmMessage {
    /// The AttributeID that identifies this message in the MAD header (IBTA Vol 1 ch. 12;
    /// Linux `CM_*_ATTR_ID`).
    pub const fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => ATTR_REQ,
            CmMessage::Mra(_) => ATTR_MRA,
            CmMessage::Rej(_) => ATTR_REJ,
            CmMessage::Rep(_) => ATTR_REP,
            CmMessage::Rtu(_) => ATTR_RTU,
            CmMessage::Dreq(_) => ATTR_DREQ,
            CmMessage::Drep(_) => ATTR_DREP,
            CmMessage::SidrReq(_) => ATTR_SIDR_REQ,
            CmMessage::SidrRep(_) => ATTR_SIDR_REP,
        }
    }

    /// Encodes the whole 256-byte MAD with transaction ID `tid`.
    ///
    /// Rule: IBTA Vol 1 §13.4 and ch. 12: header base version 1, class 0x07, class version 2,
    /// method Send, status 0, attribute modifier 0 ([`MadHeader::cm`]); reserved bits zero;
    /// every field truncated to its width.
    pub fn encode(&self, tid: u64) -> [u8; MAD_SIZE] {
        self.encode_with_modifier(tid, 0)
    }

    /// Encodes the whole MAD with transaction ID `tid` and attribute modifier
    /// `attr_mod`, which carries the ECE options of a REQ, REP or REJ (the kernel's
    /// `ib_cm`: `hdr.attr_mod = ece.attr_mod`, next to the message's vendor ID).
    pub fn encode_with_modifier(&self, tid: u64, attr_mod: u32) -> [u8; MAD_SIZE] {
        let mut mad = [0u8; MAD_SIZE];
        let (head, data) = mad.split_at_mut(MAD_HEADER_LEN);
        let mut hdr = MadHeader::cm(self.attribute_id(), tid);
        hdr.attribute_modifier = attr_mod;
        hdr.emit(&mut header::Packet::new_unchecked(head));
        match self {
            CmMessage::Req(m) => m.emit(&mut req::Packet::new_unchecked(data)),
            CmMessage::Mra(m) => m.emit(&mut mra::Packet::new_unchecked(data)),
            CmMessage::Rej(m) => m.emit(&mut rej::Packet::new_unchecked(data)),
            CmMessage::Rep(m) => m.emit(&mut rep::Packet::new_unchecked(data)),
            CmMessage::Rtu(m) => m.emit(&mut rtu::Packet::new_unchecked(data)),
            CmMessage::Dreq(m) => m.emit(&mut dreq::Packet::new_unchecked(data)),
            CmMessage::Drep(m) => m.emit(&mut drep::Packet::new_unchecked(data)),
            CmMessage::SidrReq(m) => m.emit(&mut SidrReqPacket::new_unchecked(data)),
            CmMessage::SidrRep(m) => m.emit(&mut SidrRepPacket::new_unchecked(data)),
        }
        mad
    }

    /// Decodes a CM MAD into its transaction ID and message. Bytes after the first 256 are
    /// ignored. Never panics.
    ///
    /// Rule: IBTA Vol 1 §13.4: base version 1, management class 0x07; ch. 12: class version
    /// 2, method Send. Status, ClassSpecific and AttributeModifier are not checked.
    /// Errors: `Truncated` below 256 bytes; `BaseVersion`, `MgmtClass`, `ClassVersion`,
    /// `Method` for a header that is not a CM Send (checked in that order);
    /// `UnsupportedAttribute` for LAP, APR, ClassPortInfo and unknown IDs; `LengthOutOfRange`
    /// from [`Rej::parse`] and [`SidrRep::parse`].
    pub fn decode(buf: &[u8]) -> Result<(u64, CmMessage), MadError> {
        Self::decode_with_modifier(buf).map(|(tid, _, m)| (tid, m))
    }

    /// [`CmMessage::decode`], also returning the header's attribute modifier (the ECE
    /// options of a REQ, REP or REJ).
    pub fn decode_with_modifier(buf: &[u8]) -> Result<(u64, u32, CmMessage), MadError> {
        let mad = buf.get(..MAD_SIZE).ok_or(MadError::Truncated {
            len: buf.len(),
            need: MAD_SIZE,
        })?;
        let (head, data) = mad.split_at(MAD_HEADER_LEN);
        let head = MadHeader::parse(&header::Packet::new_unchecked(head))?;
        if head.base_version != BASE_VERSION {
            return Err(MadError::BaseVersion(head.base_version));
        }
        if head.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::MgmtClass(head.mgmt_class));
        }
        if head.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion(head.class_version));
        }
        if head.method != METHOD_SEND {
            return Err(MadError::Method(head.method));
        }
        let message = match head.attribute_id {
            ATTR_REQ => CmMessage::Req(Req::parse(&req::Packet::new_unchecked(data))?),
            ATTR_MRA => CmMessage::Mra(Mra::parse(&mra::Packet::new_unchecked(data))?),
            ATTR_REJ => CmMessage::Rej(Rej::parse(&rej::Packet::new_unchecked(data))?),
            ATTR_REP => CmMessage::Rep(Rep::parse(&rep::Packet::new_unchecked(data))?),
            ATTR_RTU => CmMessage::Rtu(Rtu::parse(&rtu::Packet::new_unchecked(data))?),
            ATTR_DREQ => CmMessage::Dreq(Dreq::parse(&dreq::Packet::new_unchecked(data))?),
            ATTR_DREP => CmMessage::Drep(Drep::parse(&drep::Packet::new_unchecked(data))?),
            ATTR_SIDR_REQ => {
                CmMessage::SidrReq(SidrReq::parse(&SidrReqPacket::new_unchecked(data))?)
            }
            ATTR_SIDR_REP => {
                CmMessage::SidrRep(SidrRep::parse(&SidrRepPacket::new_unchecked(data))?)
            }
            other => return Err(MadError::UnsupportedAttribute(other)),
        };
        Ok((head.transaction_id, head.attribute_modifier, message))
    }
}
