//! Service ID Resolution: SIDR_REQ (attribute 0x0017) and SIDR_REP (attribute 0x0018), IBTA
//! Vol 1 ch. 12, Table 119 "SIDR_REQ Message Contents" and Table 120 "SIDR_REP Message
//! Contents"; offsets as in Linux `include/rdma/ibta_vol1_c12.h` `CM_SIDR_REQ_*` and
//! `CM_SIDR_REP_*`. rdma_cm uses SIDR to resolve a UD service (`RDMA_PS_UDP`) to a QPN and
//! Q_Key.
//!
//! SIDR_REQ, offsets in the 232-byte CM data area (add 24 for the MAD offset):
//! ```text
//! 0[0],32   Request ID                      4[0],16   Partition Key
//! 6-7       reserved                        8-15      Service ID
//! 16-231    Private Data (216 bytes)
//! ```
//! SIDR_REP:
//! ```text
//! 0[0],32   Request ID                      4[0],8    Status
//! 5[0],8    Additional Information Length   6[0],16   Vendor ID bits 23-8 (ECE)
//! 8[0],24   QPN                             11[0],8   Vendor ID bits 7-0
//! 12-19     Service ID                      20[0],32  Q_Key
//! 24-95     Additional Information (72; ClassPortInfo on redirect)
//! 96-231    Private Data (136 bytes)
//! ```

use super::field::{bit_accessors, get_array, get_u64, set_u64, view};
use super::common::{MadError, CM_DATA_LEN};
use super::reason::SidrStatus;

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const REQ_REQUEST_ID: Bits = Bits::new(0, 0, 32);
    pub const REQ_PARTITION_KEY: Bits = Bits::new(4, 0, 16);
    pub const REQ_SERVICE_ID: Bytes = 8..16;
    pub const REQ_PRIVATE_DATA: Bytes = 16..232;

    pub const REP_REQUEST_ID: Bits = Bits::new(0, 0, 32);
    pub const REP_STATUS: Bits = Bits::new(4, 0, 8);
    pub const REP_ADDITIONAL_INFO_LENGTH: Bits = Bits::new(5, 0, 8);
    pub const REP_VENDOR_ID_H: Bits = Bits::new(6, 0, 16);
    pub const REP_QPN: Bits = Bits::new(8, 0, 24);
    pub const REP_VENDOR_ID_L: Bits = Bits::new(11, 0, 8);
    pub const REP_SERVICE_ID: Bytes = 12..20;
    pub const REP_QKEY: Bits = Bits::new(20, 0, 32);
    pub const REP_ADDITIONAL_INFO: Bytes = 24..96;
    pub const REP_PRIVATE_DATA: Bytes = 96..232;
}

/// Length of SIDR_REQ private data in bytes (IBTA Vol 1 Table 119; Linux
/// `IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE`).
pub const REQ_PRIVATE_DATA_LEN: usize = 216;

/// Length of SIDR_REP private data in bytes (IBTA Vol 1 Table 120; Linux
/// `IB_CM_SIDR_REP_PRIVATE_DATA_SIZE`).
pub const REP_PRIVATE_DATA_LEN: usize = 136;

/// Size of the SIDR_REP Additional Information area in bytes (IBTA Vol 1 Table 120; Linux
/// `IB_CM_SIDR_REP_INFO_LENGTH`).
pub const REP_ADDITIONAL_INFO_LEN: usize = 72;

const _: () =
    assert!(field::REQ_PRIVATE_DATA.end - field::REQ_PRIVATE_DATA.start == REQ_PRIVATE_DATA_LEN);
const _: () =
    assert!(field::REP_PRIVATE_DATA.end - field::REP_PRIVATE_DATA.start == REP_PRIVATE_DATA_LEN);
const _: () = assert!(
    field::REP_ADDITIONAL_INFO.end - field::REP_ADDITIONAL_INFO.start == REP_ADDITIONAL_INFO_LEN
);
const _: () = assert!(field::REQ_PRIVATE_DATA.end == CM_DATA_LEN);
const _: () = assert!(field::REP_PRIVATE_DATA.end == CM_DATA_LEN);

view!(
    /// A view over the 232-byte CM data area of a SIDR_REQ (IBTA Vol 1 Table 119).
    SidrReqPacket,
    CM_DATA_LEN
);

bit_accessors!(SidrReqPacket {
    /// Request ID: the requester's handle, echoed in the SIDR_REP.
    request_id / set_request_id: u32 = field::REQ_REQUEST_ID;
    /// Partition Key the requester wants to use.
    partition_key / set_partition_key: u16 = field::REQ_PARTITION_KEY;
});

impl<T: AsRef<[u8]>> SidrReqPacket<T> {
    /// Service ID to resolve (rdma_cm: see [`super::service`]).
    pub fn service_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::REQ_SERVICE_ID)
    }

    /// Private Data (216 bytes); rdma_cm puts its IP header in the first 36.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::REQ_PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SidrReqPacket<T> {
    /// Sets Service ID.
    pub fn set_service_id(&mut self, value: u64) {
        set_u64(self.buffer.as_mut(), field::REQ_SERVICE_ID, value);
    }

    /// Private Data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::REQ_PRIVATE_DATA]
    }
}

/// A SIDR_REQ message: every field of IBTA Vol 1 Table 119.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SidrReq {
    /// Request ID.
    pub request_id: u32,
    /// Partition Key.
    pub partition_key: u16,
    /// Service ID.
    pub service_id: u64,
    /// Private Data.
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl Default for SidrReq {
    /// The all-zero SIDR_REQ.
    fn default() -> Self {
        SidrReq {
            request_id: 0,
            partition_key: 0,
            service_id: 0,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }
    }
}

impl SidrReq {
    /// Parses a SIDR_REQ; the reserved bytes 6-7 are ignored.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &SidrReqPacket<T>) -> Result<SidrReq, MadError> {
        packet.check_len()?;
        Ok(SidrReq {
            request_id: packet.request_id(),
            partition_key: packet.partition_key(),
            service_id: packet.service_id(),
            private_data: get_array(packet.buffer.as_ref(), field::REQ_PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the SIDR_REQ: zeroes the data area, then sets every field.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut SidrReqPacket<T>) {
        packet.clear();
        packet.set_request_id(self.request_id);
        packet.set_partition_key(self.partition_key);
        packet.set_service_id(self.service_id);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

view!(
    /// A view over the 232-byte CM data area of a SIDR_REP (IBTA Vol 1 Table 120).
    SidrRepPacket,
    CM_DATA_LEN
);

bit_accessors!(SidrRepPacket {
    /// Request ID: the Request ID of the SIDR_REQ answered.
    request_id / set_request_id: u32 = field::REP_REQUEST_ID;
    /// Status (8 bits), see [`SidrStatus`].
    status / set_status: SidrStatus = field::REP_STATUS;
    /// Additional Information Length: how many Additional Information bytes count; at most 72.
    additional_info_length / set_additional_info_length: u8 = field::REP_ADDITIONAL_INFO_LENGTH;
    /// QPN (24 bits): the UD QP that serves the service.
    qpn / set_qpn: u32 = field::REP_QPN;
    /// Q_Key of that QP.
    qkey / set_qkey: u32 = field::REP_QKEY;
});

impl<T: AsRef<[u8]>> SidrRepPacket<T> {
    /// The 24-bit ECE Vendor ID, IBTA Vol 1 release 1.4, split over bytes 6-7 and 11 (Linux
    /// `CM_SIDR_REP_VENDOR_ID_H/L`).
    pub fn vendor_id(&self) -> u32 {
        let buf = self.buffer.as_ref();
        (field::REP_VENDOR_ID_H.get(buf) << 8) | field::REP_VENDOR_ID_L.get(buf)
    }

    /// Service ID resolved.
    pub fn service_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::REP_SERVICE_ID)
    }

    /// Additional Information, the whole 72-byte area (a ClassPortInfo when the status is
    /// `Redirect`).
    pub fn additional_info(&self) -> &[u8] {
        &self.buffer.as_ref()[field::REP_ADDITIONAL_INFO]
    }

    /// Private Data (136 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::REP_PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SidrRepPacket<T> {
    /// Sets the ECE Vendor ID to the low 24 bits of `value`.
    pub fn set_vendor_id(&mut self, value: u32) {
        let buf = self.buffer.as_mut();
        field::REP_VENDOR_ID_H.set(buf, value >> 8);
        field::REP_VENDOR_ID_L.set(buf, value);
    }

    /// Sets Service ID.
    pub fn set_service_id(&mut self, value: u64) {
        set_u64(self.buffer.as_mut(), field::REP_SERVICE_ID, value);
    }

    /// Additional Information, writable.
    pub fn additional_info_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::REP_ADDITIONAL_INFO]
    }

    /// Private Data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::REP_PRIVATE_DATA]
    }
}

/// A SIDR_REP message: every field of IBTA Vol 1 Table 120.
///
/// The Additional Information area is kept whole; [`SidrRep::additional_info_bytes`] gives
/// the `additional_info_length` bytes that count.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SidrRep {
    /// Request ID.
    pub request_id: u32,
    /// Status.
    pub status: SidrStatus,
    /// Additional Information Length (at most [`REP_ADDITIONAL_INFO_LEN`]).
    pub additional_info_length: u8,
    /// ECE Vendor ID (24 bits); zero when unused.
    pub vendor_id: u32,
    /// QPN (24 bits).
    pub qpn: u32,
    /// Service ID.
    pub service_id: u64,
    /// Q_Key.
    pub qkey: u32,
    /// Additional Information (the whole area; ClassPortInfo on redirect, else zeros).
    pub additional_info: [u8; REP_ADDITIONAL_INFO_LEN],
    /// Private Data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl Default for SidrRep {
    /// The all-zero SIDR_REP (status `Success`).
    fn default() -> Self {
        SidrRep {
            request_id: 0,
            status: SidrStatus::Success,
            additional_info_length: 0,
            vendor_id: 0,
            qpn: 0,
            service_id: 0,
            qkey: 0,
            additional_info: [0; REP_ADDITIONAL_INFO_LEN],
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }
    }
}

impl SidrRep {
    /// The meaningful Additional Information bytes: the first `additional_info_length` (at
    /// most [`REP_ADDITIONAL_INFO_LEN`]).
    pub fn additional_info_bytes(&self) -> &[u8] {
        &self.additional_info
            [..usize::from(self.additional_info_length).min(REP_ADDITIONAL_INFO_LEN)]
    }

    /// Parses a SIDR_REP.
    ///
    /// Rule: IBTA Vol 1 Table 120: the Additional Information area holds 72 bytes, so its
    /// length is at most 72.
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`];
    /// `MadError::LengthOutOfRange` if Additional Information Length exceeds 72.
    pub fn parse<T: AsRef<[u8]>>(packet: &SidrRepPacket<T>) -> Result<SidrRep, MadError> {
        packet.check_len()?;
        let additional_info_length = packet.additional_info_length();
        if usize::from(additional_info_length) > REP_ADDITIONAL_INFO_LEN {
            return Err(MadError::LengthOutOfRange {
                field: "SIDR_REP Additional Information Length",
                value: additional_info_length,
                max: REP_ADDITIONAL_INFO_LEN as u8,
            });
        }
        Ok(SidrRep {
            request_id: packet.request_id(),
            status: packet.status(),
            additional_info_length,
            vendor_id: packet.vendor_id(),
            qpn: packet.qpn(),
            service_id: packet.service_id(),
            qkey: packet.qkey(),
            additional_info: get_array(packet.buffer.as_ref(), field::REP_ADDITIONAL_INFO),
            private_data: get_array(packet.buffer.as_ref(), field::REP_PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the SIDR_REP: zeroes the data area, then sets every field, truncated to its
    /// width. An `additional_info_length` above 72 is written as 72.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut SidrRepPacket<T>) {
        packet.clear();
        packet.set_request_id(self.request_id);
        packet.set_status(self.status);
        packet.set_additional_info_length(
            self.additional_info_length
                .min(REP_ADDITIONAL_INFO_LEN as u8),
        );
        packet.set_vendor_id(self.vendor_id);
        packet.set_qpn(self.qpn);
        packet.set_service_id(self.service_id);
        packet.set_qkey(self.qkey);
        packet
            .additional_info_mut()
            .copy_from_slice(&self.additional_info);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidr_rep_additional_info_length_over_72_is_refused() {
        let mut bytes = [0u8; CM_DATA_LEN];
        bytes[5] = 73;
        assert!(matches!(
            SidrRep::parse(&SidrRepPacket::new_unchecked(&bytes[..])),
            Err(MadError::LengthOutOfRange {
                value: 73,
                max: 72,
                ..
            })
        ));
        bytes[5] = 72;
        assert!(SidrRep::parse(&SidrRepPacket::new_unchecked(&bytes[..])).is_ok());
    }
}
