//! What every CM message shares: sizes, the CM class's header constants, the attribute
//! IDs, the decoding errors and the 2-bit message kind (IBTA Vol 1 §13.4, chapter 12).

/// Size of every MAD on the wire, in bytes (IBTA Vol 1 §13.4).
pub const MAD_SIZE: usize = 256;

/// Length of the common MAD header, in bytes (IBTA Vol 1 §13.4).
pub const MAD_HEADER_LEN: usize = 24;

/// Length of the CM data area after the common MAD header: 256 − 24 = 232 bytes (IBTA Vol 1
/// §12.6: each message-contents table covers exactly these bytes).
pub const CM_DATA_LEN: usize = MAD_SIZE - MAD_HEADER_LEN;

/// MAD BaseVersion (IBTA Vol 1 §13.4; Linux `IB_MGMT_BASE_VERSION`).
pub const BASE_VERSION: u8 = 1;

/// MgmtClass of the Communication Manager (IBTA Vol 1 §13.4; Linux `IB_MGMT_CLASS_CM`).
pub const MGMT_CLASS_CM: u8 = 0x07;

/// ClassVersion of the CM class (IBTA Vol 1 ch. 12; Linux `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;

/// Method Send, used by every CM message (IBTA Vol 1 §13.4, ch. 12; Linux
/// `IB_MGMT_METHOD_SEND`).
pub const METHOD_SEND: u8 = 0x03;

/// AttributeID of ClassPortInfo (IBTA Vol 1 §13.4; Linux `IB_MGMT_CLASSPORTINFO_ATTR_ID`).
pub const ATTR_CLASS_PORT_INFO: u16 = 0x0001;
/// AttributeID of REQ, the connection request (IBTA Vol 1 ch. 12; Linux `CM_REQ_ATTR_ID`).
pub const ATTR_REQ: u16 = 0x0010;
/// AttributeID of MRA, message receipt acknowledgement (Linux `CM_MRA_ATTR_ID`).
pub const ATTR_MRA: u16 = 0x0011;
/// AttributeID of REJ, reject (Linux `CM_REJ_ATTR_ID`).
pub const ATTR_REJ: u16 = 0x0012;
/// AttributeID of REP, the connection reply (Linux `CM_REP_ATTR_ID`).
pub const ATTR_REP: u16 = 0x0013;
/// AttributeID of RTU, ready to use (Linux `CM_RTU_ATTR_ID`).
pub const ATTR_RTU: u16 = 0x0014;
/// AttributeID of DREQ, disconnection request (Linux `CM_DREQ_ATTR_ID`).
pub const ATTR_DREQ: u16 = 0x0015;
/// AttributeID of DREP, disconnection reply (Linux `CM_DREP_ATTR_ID`).
pub const ATTR_DREP: u16 = 0x0016;
/// AttributeID of SIDR_REQ, service ID resolution request (Linux `CM_SIDR_REQ_ATTR_ID`).
pub const ATTR_SIDR_REQ: u16 = 0x0017;
/// AttributeID of SIDR_REP, service ID resolution reply (Linux `CM_SIDR_REP_ATTR_ID`).
pub const ATTR_SIDR_REP: u16 = 0x0018;
/// AttributeID of LAP, load alternate path (Linux `CM_LAP_ATTR_ID`); not decoded here.
pub const ATTR_LAP: u16 = 0x0019;
/// AttributeID of APR, alternate path response (Linux `CM_APR_ATTR_ID`); not decoded here.
pub const ATTR_APR: u16 = 0x001A;

/// Bytes that are not a CM MAD rverbs understands.
///
/// Every variant is caused by the values of untrusted input; none is an API misuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum MadError {
    /// The buffer is shorter than the structure read from it (a MAD is 256 bytes, IBTA Vol 1
    /// §13.4; the CM data area 232; rdma_cm's IP header 36).
    #[error("buffer of {len} bytes is shorter than the {need} bytes required")]
    Truncated {
        /// Length of the buffer given.
        len: usize,
        /// Length required.
        need: usize,
    },
    /// BaseVersion is not 1 (IBTA Vol 1 §13.4).
    #[error("MAD base version {0}, expected 1")]
    BaseVersion(u8),
    /// MgmtClass is not the CM's, 0x07 (IBTA Vol 1 §13.4).
    #[error("management class {0:#04x}, expected the CM class 0x07")]
    MgmtClass(u8),
    /// ClassVersion is not 2 (IBTA Vol 1 ch. 12; a CM answers with REJ reason
    /// `InvalidClassVersion`).
    #[error("CM class version {0}, expected 2")]
    ClassVersion(u8),
    /// Method is not Send, 0x03 (IBTA Vol 1 ch. 12).
    #[error("MAD method {0:#04x}, expected Send (0x03)")]
    Method(u8),
    /// The AttributeID is not a message decoded here: LAP, APR, ClassPortInfo or unknown.
    #[error("CM attribute {0:#06x} is not supported")]
    UnsupportedAttribute(u16),
    /// A length field holds more than the area it describes (REJ Rejected Info Length or
    /// SIDR_REP Additional Information Length over 72, IBTA Vol 1 Tables 108 and 120).
    #[error("{field} is {value}, more than the {max} bytes of its area")]
    LengthOutOfRange {
        /// The IBTA name of the length field.
        field: &'static str,
        /// The value received.
        value: u8,
        /// The largest valid value.
        max: u8,
    },
    /// rdma_cm's private-data header has a version other than 0 (Linux cma.c `CMA_VERSION`).
    #[error("RDMA CM header version {0}, expected 0")]
    CmaVersion(u8),
    /// rdma_cm's private-data header names an IP version other than 4 or 6 (Linux cma.c
    /// `cma_get_ip_ver`).
    #[error("RDMA CM header IP version {0}, expected 4 or 6")]
    IpVersion(u8),
}

/// Which message an MRA acknowledges or a REJ rejects (2 bits): IBTA Vol 1 Table 107
/// "Message MRAed" and Table 108 "Message Rejected".
///
/// Rule: IBTA Vol 1 Tables 107/108: 0 REQ, 1 REP, 2 other (LAP for an MRA), 3 reserved
/// (Linux `CM_MSG_RESPONSE_REQ/REP/OTHER`). All four values are kept, so each round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MessageKind {
    /// The REQ (0).
    #[default]
    Req,
    /// The REP (1).
    Rep,
    /// Another message (2): the LAP for an MRA.
    Other,
    /// Reserved (3).
    Reserved,
}

impl From<u8> for MessageKind {
    /// Takes the low two bits of `value`.
    fn from(value: u8) -> Self {
        match value & 0b11 {
            0 => MessageKind::Req,
            1 => MessageKind::Rep,
            2 => MessageKind::Other,
            _ => MessageKind::Reserved,
        }
    }
}

impl From<MessageKind> for u8 {
    fn from(value: MessageKind) -> Self {
        match value {
            MessageKind::Req => 0,
            MessageKind::Rep => 1,
            MessageKind::Other => 2,
            MessageKind::Reserved => 3,
        }
    }
}
