//! REQ, the connection request (attribute 0x0010): IBTA Vol 1 §12.6, Table 106 "REQ Message
//! Contents"; offsets as in Linux `include/rdma/ibta_vol1_c12.h` `CM_REQ_*`.
//!
//! Offsets in the 232-byte CM data area (add 24 for the MAD offset), as `Byte[Bit],bits`:
//! ```text
//! 0[0],32   Local Communication ID          4         reserved
//! 5[0],24   Vendor ID (ECE, IBTA 1.4)       8-15      Service ID
//! 16-23     Local CA GUID                   24-27     reserved
//! 28[0],32  Local Q_Key                     32[0],24  Local QPN
//! 35[0],8   Responder Resources             36[0],24  Local EECN
//! 39[0],8   Initiator Depth                 40[0],24  Remote EECN
//! 43[0],5   Remote CM Response Timeout      43[5],2   Transport Service Type
//! 43[7],1   End-to-End Flow Control         44[0],24  Starting PSN
//! 47[0],5   Local CM Response Timeout       47[5],3   Retry Count
//! 48[0],16  Partition Key                   50[0],4   Path Packet Payload MTU
//! 50[4],1   RDC Exists                      50[5],3   RNR Retry Count
//! 51[0],4   Max CM Retries                  51[4],1   SRQ
//! 51[5],3   Extended Transport Type         52-95     Primary path (see `path`)
//! 96-139    Alternate path                  139[5],1  SAP Supported
//! 140-231   Private Data (92 bytes)
//! ```

use super::field::{bit_accessors, get_array, get_u64, set_u64, view, FieldValue};
use super::path::{self, Path};
use super::common::{MadError, CM_DATA_LEN};

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const VENDOR_ID: Bits = Bits::new(5, 0, 24);
    pub const SERVICE_ID: Bytes = 8..16;
    pub const LOCAL_CA_GUID: Bytes = 16..24;
    pub const LOCAL_QKEY: Bits = Bits::new(28, 0, 32);
    pub const LOCAL_QPN: Bits = Bits::new(32, 0, 24);
    pub const RESPONDER_RESOURCES: Bits = Bits::new(35, 0, 8);
    pub const LOCAL_EECN: Bits = Bits::new(36, 0, 24);
    pub const INITIATOR_DEPTH: Bits = Bits::new(39, 0, 8);
    pub const REMOTE_EECN: Bits = Bits::new(40, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(43, 0, 5);
    pub const TRANSPORT_SERVICE_TYPE: Bits = Bits::new(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(43, 7, 1);
    pub const STARTING_PSN: Bits = Bits::new(44, 0, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::new(47, 0, 5);
    pub const RETRY_COUNT: Bits = Bits::new(47, 5, 3);
    pub const PARTITION_KEY: Bits = Bits::new(48, 0, 16);
    pub const PATH_MTU: Bits = Bits::new(50, 0, 4);
    pub const RDC_EXISTS: Bits = Bits::new(50, 4, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(50, 5, 3);
    pub const MAX_CM_RETRIES: Bits = Bits::new(51, 0, 4);
    pub const SRQ: Bits = Bits::new(51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: Bits = Bits::new(51, 5, 3);
    pub const PRIMARY_PATH: Bytes = 52..96;
    pub const ALTERNATE_PATH: Bytes = 96..140;
    pub const SAP_SUPPORTED: Bits = Bits::new(139, 5, 1);
    pub const PRIVATE_DATA: Bytes = 140..232;
}

/// Length of REQ private data in bytes (IBTA Vol 1 Table 106; Linux
/// `IB_CM_REQ_PRIVATE_DATA_SIZE`).
pub const PRIVATE_DATA_LEN: usize = 92;

const _: () = assert!(field::PRIVATE_DATA.end - field::PRIVATE_DATA.start == PRIVATE_DATA_LEN);
const _: () = assert!(field::PRIVATE_DATA.end == CM_DATA_LEN);

/// The Transport Service Type of a REQ (2 bits at `43[5]`): IBTA Vol 1 Table 106.
///
/// Rule: IBTA Vol 1 Table 106: 0 RC, 1 UC, 2 RD; 3 says "see Extended Transport Type"
/// (Linux `cm_req_set_qp_type`: XRC is 3 with extended type 1, IBTA Annex A14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportServiceType {
    /// Reliable Connected (0).
    #[default]
    Rc,
    /// Unreliable Connected (1).
    Uc,
    /// Reliable Datagram (2).
    Rd,
    /// Extended (3): the Extended Transport Type field names the transport.
    Extended,
}

impl From<u8> for TransportServiceType {
    /// Takes the low two bits of `value`.
    fn from(value: u8) -> Self {
        match value & 0b11 {
            0 => TransportServiceType::Rc,
            1 => TransportServiceType::Uc,
            2 => TransportServiceType::Rd,
            _ => TransportServiceType::Extended,
        }
    }
}

impl From<TransportServiceType> for u8 {
    fn from(value: TransportServiceType) -> Self {
        match value {
            TransportServiceType::Rc => 0,
            TransportServiceType::Uc => 1,
            TransportServiceType::Rd => 2,
            TransportServiceType::Extended => 3,
        }
    }
}

impl FieldValue for TransportServiceType {
    fn from_bits(bits: u32) -> Self {
        TransportServiceType::from(bits as u8)
    }
    fn into_bits(self) -> u32 {
        u32::from(u8::from(self))
    }
}

view!(
    /// A view over the 232-byte CM data area of a REQ (IBTA Vol 1 §12.6, Table 106).
    Packet,
    CM_DATA_LEN
);

bit_accessors!(Packet {
    /// Local Communication ID: the sender's connection handle.
    local_comm_id / set_local_comm_id: u32 = field::LOCAL_COMM_ID;
    /// Vendor ID (24 bits) of Enhanced Connection Establishment, IBTA Vol 1 release 1.4
    /// (Linux `CM_REQ_VENDOR_ID`); zero when ECE is unused.
    vendor_id / set_vendor_id: u32 = field::VENDOR_ID;
    /// Local Q_Key (RD only; RC/UC senders leave it zero).
    local_qkey / set_local_qkey: u32 = field::LOCAL_QKEY;
    /// Local QPN (24 bits): the sender's QP.
    local_qpn / set_local_qpn: u32 = field::LOCAL_QPN;
    /// Responder Resources: RDMA Read/Atomic requests the sender accepts at once.
    responder_resources / set_responder_resources: u8 = field::RESPONDER_RESOURCES;
    /// Local EECN (24 bits, RD only).
    local_eecn / set_local_eecn: u32 = field::LOCAL_EECN;
    /// Initiator Depth: RDMA Read/Atomic requests the sender issues at once.
    initiator_depth / set_initiator_depth: u8 = field::INITIATOR_DEPTH;
    /// Remote EECN (24 bits, RD only).
    remote_eecn / set_remote_eecn: u32 = field::REMOTE_EECN;
    /// Remote CM Response Timeout (5 bits): 4.096 µs × 2^value for the peer's CM to answer.
    remote_cm_response_timeout / set_remote_cm_response_timeout: u8 =
        field::REMOTE_CM_RESPONSE_TIMEOUT;
    /// Transport Service Type (2 bits).
    transport_service_type / set_transport_service_type: TransportServiceType =
        field::TRANSPORT_SERVICE_TYPE;
    /// End-to-End Flow Control (1 bit).
    end_to_end_flow_control / set_end_to_end_flow_control: bool = field::END_TO_END_FLOW_CONTROL;
    /// Starting PSN (24 bits): the first PSN the sender will send.
    starting_psn / set_starting_psn: u32 = field::STARTING_PSN;
    /// Local CM Response Timeout (5 bits): how long the sender's CM takes to answer.
    local_cm_response_timeout / set_local_cm_response_timeout: u8 =
        field::LOCAL_CM_RESPONSE_TIMEOUT;
    /// Retry Count (3 bits): transport retries on timeout.
    retry_count / set_retry_count: u8 = field::RETRY_COUNT;
    /// Partition Key.
    partition_key / set_partition_key: u16 = field::PARTITION_KEY;
    /// Path Packet Payload MTU (4 bits): the IBTA MTU code, 1 = 256 … 5 = 4096.
    path_mtu / set_path_mtu: u8 = field::PATH_MTU;
    /// RDC Exists (1 bit, RD only).
    rdc_exists / set_rdc_exists: bool = field::RDC_EXISTS;
    /// RNR Retry Count (3 bits); 7 means retry forever.
    rnr_retry_count / set_rnr_retry_count: u8 = field::RNR_RETRY_COUNT;
    /// Max CM Retries (4 bits): how often the sender's CM resends this REQ.
    max_cm_retries / set_max_cm_retries: u8 = field::MAX_CM_RETRIES;
    /// SRQ (1 bit): the sender's QP uses a shared receive queue.
    srq / set_srq: bool = field::SRQ;
    /// Extended Transport Type (3 bits), used when the service type is `Extended`; 1 = XRC.
    extended_transport_type / set_extended_transport_type: u8 = field::EXTENDED_TRANSPORT_TYPE;
    /// SAP Supported (1 bit at `139[5]`).
    sap_supported / set_sap_supported: bool = field::SAP_SUPPORTED;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// Service ID: the service the sender wants to reach (rdma_cm: see [`super::service`]).
    pub fn service_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::SERVICE_ID)
    }

    /// Local CA GUID: the sender's channel adapter.
    pub fn local_ca_guid(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::LOCAL_CA_GUID)
    }

    /// The primary path (bytes 52-95).
    pub fn primary_path(&self) -> path::Packet<&[u8]> {
        path::Packet::new_unchecked(&self.buffer.as_ref()[field::PRIMARY_PATH])
    }

    /// The alternate path (bytes 96-139); all zero when there is none.
    pub fn alternate_path(&self) -> path::Packet<&[u8]> {
        path::Packet::new_unchecked(&self.buffer.as_ref()[field::ALTERNATE_PATH])
    }

    /// Private Data (92 bytes); rdma_cm puts its IP header in the first 36 (see
    /// [`super::cma_ip`]).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Service ID.
    pub fn set_service_id(&mut self, value: u64) {
        set_u64(self.buffer.as_mut(), field::SERVICE_ID, value);
    }

    /// Sets Local CA GUID.
    pub fn set_local_ca_guid(&mut self, value: u64) {
        set_u64(self.buffer.as_mut(), field::LOCAL_CA_GUID, value);
    }

    /// The primary path, writable.
    pub fn primary_path_mut(&mut self) -> path::Packet<&mut [u8]> {
        path::Packet::new_unchecked(&mut self.buffer.as_mut()[field::PRIMARY_PATH])
    }

    /// The alternate path, writable.
    pub fn alternate_path_mut(&mut self) -> path::Packet<&mut [u8]> {
        path::Packet::new_unchecked(&mut self.buffer.as_mut()[field::ALTERNATE_PATH])
    }

    /// Private Data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A REQ message: every field of IBTA Vol 1 Table 106.
///
/// Values wider than their field (a 24-bit QPN held in a `u32`) are truncated on emit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Req {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// ECE Vendor ID (24 bits); zero when unused.
    pub vendor_id: u32,
    /// Service ID.
    pub service_id: u64,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Local QPN (24 bits).
    pub local_qpn: u32,
    /// Responder Resources.
    pub responder_resources: u8,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Initiator Depth.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// Remote CM Response Timeout (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport Service Type.
    pub transport_service_type: TransportServiceType,
    /// End-to-End Flow Control.
    pub end_to_end_flow_control: bool,
    /// Starting PSN (24 bits).
    pub starting_psn: u32,
    /// Local CM Response Timeout (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry Count (3 bits).
    pub retry_count: u8,
    /// Partition Key.
    pub partition_key: u16,
    /// Path Packet Payload MTU code (4 bits).
    pub path_mtu: u8,
    /// RDC Exists.
    pub rdc_exists: bool,
    /// RNR Retry Count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM Retries (4 bits).
    pub max_cm_retries: u8,
    /// SRQ.
    pub srq: bool,
    /// Extended Transport Type (3 bits).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary_path: Path,
    /// Alternate path; [`Path::is_empty`] when there is none.
    pub alternate_path: Path,
    /// SAP Supported.
    pub sap_supported: bool,
    /// Private Data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for Req {
    /// The all-zero REQ.
    fn default() -> Self {
        Req {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport_service_type: TransportServiceType::Rc,
            end_to_end_flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            partition_key: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport_type: 0,
            primary_path: Path::default(),
            alternate_path: Path::default(),
            sap_supported: false,
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }
}

impl Req {
    /// Parses a REQ; reserved bits are ignored and every field value is accepted.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Req, MadError> {
        packet.check_len()?;
        Ok(Req {
            local_comm_id: packet.local_comm_id(),
            vendor_id: packet.vendor_id(),
            service_id: packet.service_id(),
            local_ca_guid: packet.local_ca_guid(),
            local_qkey: packet.local_qkey(),
            local_qpn: packet.local_qpn(),
            responder_resources: packet.responder_resources(),
            local_eecn: packet.local_eecn(),
            initiator_depth: packet.initiator_depth(),
            remote_eecn: packet.remote_eecn(),
            remote_cm_response_timeout: packet.remote_cm_response_timeout(),
            transport_service_type: packet.transport_service_type(),
            end_to_end_flow_control: packet.end_to_end_flow_control(),
            starting_psn: packet.starting_psn(),
            local_cm_response_timeout: packet.local_cm_response_timeout(),
            retry_count: packet.retry_count(),
            partition_key: packet.partition_key(),
            path_mtu: packet.path_mtu(),
            rdc_exists: packet.rdc_exists(),
            rnr_retry_count: packet.rnr_retry_count(),
            max_cm_retries: packet.max_cm_retries(),
            srq: packet.srq(),
            extended_transport_type: packet.extended_transport_type(),
            primary_path: Path::parse(&packet.primary_path())?,
            alternate_path: Path::parse(&packet.alternate_path())?,
            sap_supported: packet.sap_supported(),
            private_data: get_array(packet.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the REQ: zeroes the data area (so reserved bits are zero, IBTA Vol 1 §13.4),
    /// then sets every field, truncated to its width.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear();
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_vendor_id(self.vendor_id);
        packet.set_service_id(self.service_id);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet.set_local_qkey(self.local_qkey);
        packet.set_local_qpn(self.local_qpn);
        packet.set_responder_resources(self.responder_resources);
        packet.set_local_eecn(self.local_eecn);
        packet.set_initiator_depth(self.initiator_depth);
        packet.set_remote_eecn(self.remote_eecn);
        packet.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        packet.set_transport_service_type(self.transport_service_type);
        packet.set_end_to_end_flow_control(self.end_to_end_flow_control);
        packet.set_starting_psn(self.starting_psn);
        packet.set_local_cm_response_timeout(self.local_cm_response_timeout);
        packet.set_retry_count(self.retry_count);
        packet.set_partition_key(self.partition_key);
        packet.set_path_mtu(self.path_mtu);
        packet.set_rdc_exists(self.rdc_exists);
        packet.set_rnr_retry_count(self.rnr_retry_count);
        packet.set_max_cm_retries(self.max_cm_retries);
        packet.set_srq(self.srq);
        packet.set_extended_transport_type(self.extended_transport_type);
        self.primary_path.emit(&mut packet.primary_path_mut());
        self.alternate_path.emit(&mut packet.alternate_path_mut());
        packet.set_sap_supported(self.sap_supported);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_service_type_round_trips_two_bits() {
        for v in 0u8..4 {
            assert_eq!(u8::from(TransportServiceType::from(v)), v);
        }
        assert_eq!(
            TransportServiceType::from(0b111),
            TransportServiceType::Extended
        );
    }

    #[test]
    fn req_emit_zeroes_reserved_bytes() {
        let mut bytes = [0xffu8; CM_DATA_LEN];
        Req::default().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0u8; CM_DATA_LEN]);
    }

    #[test]
    fn req_parse_too_short_is_refused() {
        let bytes = [0u8; CM_DATA_LEN];
        for len in [0, 1, CM_DATA_LEN - 1] {
            assert_eq!(
                Req::parse(&Packet::new_unchecked(&bytes[..len])),
                Err(MadError::Truncated {
                    len,
                    need: CM_DATA_LEN
                })
            );
        }
    }
}
