//! REP, the connection reply (attribute 0x0013): IBTA Vol 1 §12.6, Table 110 "REP Message
//! Contents"; offsets as in Linux `include/rdma/ibta_vol1_c12.h` `CM_REP_*`.
//!
//! Offsets in the 232-byte CM data area (add 24 for the MAD offset), as `Byte[Bit],bits`:
//! ```text
//! 0[0],32   Local Communication ID          4[0],32   Remote Communication ID
//! 8[0],32   Local Q_Key                     12[0],24  Local QPN
//! 15[0],8   Vendor ID bits 23-16 (ECE)      16[0],24  Local EE Context Number
//! 19[0],8   Vendor ID bits 15-8             20[0],24  Starting PSN
//! 23[0],8   Vendor ID bits 7-0              24[0],8   Responder Resources
//! 25[0],8   Initiator Depth                 26[0],5   Target ACK Delay
//! 26[5],2   Failover Accepted               26[7],1   End-to-End Flow Control
//! 27[0],3   RNR Retry Count                 27[3],1   SRQ
//! 28-35     Local CA GUID                   36-231    Private Data (196 bytes)
//! ```

use super::field::{bit_accessors, get_array, get_u64, set_u64, view};
use super::common::{MadError, CM_DATA_LEN};

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const LOCAL_QKEY: Bits = Bits::new(8, 0, 32);
    pub const LOCAL_QPN: Bits = Bits::new(12, 0, 24);
    pub const VENDOR_ID_H: Bits = Bits::new(15, 0, 8);
    pub const LOCAL_EECN: Bits = Bits::new(16, 0, 24);
    pub const VENDOR_ID_M: Bits = Bits::new(19, 0, 8);
    pub const STARTING_PSN: Bits = Bits::new(20, 0, 24);
    pub const VENDOR_ID_L: Bits = Bits::new(23, 0, 8);
    pub const RESPONDER_RESOURCES: Bits = Bits::new(24, 0, 8);
    pub const INITIATOR_DEPTH: Bits = Bits::new(25, 0, 8);
    pub const TARGET_ACK_DELAY: Bits = Bits::new(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Bits = Bits::new(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(26, 7, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(27, 0, 3);
    pub const SRQ: Bits = Bits::new(27, 3, 1);
    pub const LOCAL_CA_GUID: Bytes = 28..36;
    pub const PRIVATE_DATA: Bytes = 36..232;
}

/// Length of REP private data in bytes (IBTA Vol 1 Table 110; Linux
/// `IB_CM_REP_PRIVATE_DATA_SIZE`).
pub const PRIVATE_DATA_LEN: usize = 196;

const _: () = assert!(field::PRIVATE_DATA.end - field::PRIVATE_DATA.start == PRIVATE_DATA_LEN);
const _: () = assert!(field::PRIVATE_DATA.end == CM_DATA_LEN);

view!(
    /// A view over the 232-byte CM data area of a REP (IBTA Vol 1 §12.6, Table 110).
    Packet,
    CM_DATA_LEN
);

bit_accessors!(Packet {
    /// Local Communication ID: the replier's connection handle.
    local_comm_id / set_local_comm_id: u32 = field::LOCAL_COMM_ID;
    /// Remote Communication ID: the Local Communication ID of the REQ answered.
    remote_comm_id / set_remote_comm_id: u32 = field::REMOTE_COMM_ID;
    /// Local Q_Key (RD only).
    local_qkey / set_local_qkey: u32 = field::LOCAL_QKEY;
    /// Local QPN (24 bits): the replier's QP.
    local_qpn / set_local_qpn: u32 = field::LOCAL_QPN;
    /// Local EE Context Number (24 bits, RD only).
    local_eecn / set_local_eecn: u32 = field::LOCAL_EECN;
    /// Starting PSN (24 bits): the first PSN the replier will send.
    starting_psn / set_starting_psn: u32 = field::STARTING_PSN;
    /// Responder Resources.
    responder_resources / set_responder_resources: u8 = field::RESPONDER_RESOURCES;
    /// Initiator Depth.
    initiator_depth / set_initiator_depth: u8 = field::INITIATOR_DEPTH;
    /// Target ACK Delay (5 bits): the replier's worst-case ACK delay, 4.096 µs × 2^value.
    target_ack_delay / set_target_ack_delay: u8 = field::TARGET_ACK_DELAY;
    /// Failover Accepted (2 bits): the replier's answer to the REQ's alternate path; rdma_cm
    /// (Linux `cma_accept_ib`) always sends 0.
    failover_accepted / set_failover_accepted: u8 = field::FAILOVER_ACCEPTED;
    /// End-to-End Flow Control (1 bit).
    end_to_end_flow_control / set_end_to_end_flow_control: bool = field::END_TO_END_FLOW_CONTROL;
    /// RNR Retry Count (3 bits).
    rnr_retry_count / set_rnr_retry_count: u8 = field::RNR_RETRY_COUNT;
    /// SRQ (1 bit).
    srq / set_srq: bool = field::SRQ;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// The 24-bit ECE Vendor ID, IBTA Vol 1 release 1.4, split over bytes 15, 19 and 23
    /// (Linux `CM_REP_VENDOR_ID_H/M/L`).
    pub fn vendor_id(&self) -> u32 {
        let buf = self.buffer.as_ref();
        (field::VENDOR_ID_H.get(buf) << 16)
            | (field::VENDOR_ID_M.get(buf) << 8)
            | field::VENDOR_ID_L.get(buf)
    }

    /// Local CA GUID: the replier's channel adapter.
    pub fn local_ca_guid(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::LOCAL_CA_GUID)
    }

    /// Private Data (196 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the ECE Vendor ID to the low 24 bits of `value`.
    pub fn set_vendor_id(&mut self, value: u32) {
        let buf = self.buffer.as_mut();
        field::VENDOR_ID_H.set(buf, value >> 16);
        field::VENDOR_ID_M.set(buf, value >> 8);
        field::VENDOR_ID_L.set(buf, value);
    }

    /// Sets Local CA GUID.
    pub fn set_local_ca_guid(&mut self, value: u64) {
        set_u64(self.buffer.as_mut(), field::LOCAL_CA_GUID, value);
    }

    /// Private Data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A REP message: every field of IBTA Vol 1 Table 110.
///
/// Values wider than their field are truncated on emit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rep {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Local QPN (24 bits).
    pub local_qpn: u32,
    /// Local EE Context Number (24 bits).
    pub local_eecn: u32,
    /// Starting PSN (24 bits).
    pub starting_psn: u32,
    /// ECE Vendor ID (24 bits); zero when unused.
    pub vendor_id: u32,
    /// Responder Resources.
    pub responder_resources: u8,
    /// Initiator Depth.
    pub initiator_depth: u8,
    /// Target ACK Delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover Accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-End Flow Control.
    pub end_to_end_flow_control: bool,
    /// RNR Retry Count (3 bits).
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Private Data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for Rep {
    /// The all-zero REP.
    fn default() -> Self {
        Rep {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: 0,
            local_eecn: 0,
            starting_psn: 0,
            vendor_id: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }
}

impl Rep {
    /// Parses a REP; reserved bits are ignored and every field value is accepted.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Rep, MadError> {
        packet.check_len()?;
        Ok(Rep {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            local_qkey: packet.local_qkey(),
            local_qpn: packet.local_qpn(),
            local_eecn: packet.local_eecn(),
            starting_psn: packet.starting_psn(),
            vendor_id: packet.vendor_id(),
            responder_resources: packet.responder_resources(),
            initiator_depth: packet.initiator_depth(),
            target_ack_delay: packet.target_ack_delay(),
            failover_accepted: packet.failover_accepted(),
            end_to_end_flow_control: packet.end_to_end_flow_control(),
            rnr_retry_count: packet.rnr_retry_count(),
            srq: packet.srq(),
            local_ca_guid: packet.local_ca_guid(),
            private_data: get_array(packet.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the REP: zeroes the data area, then sets every field, truncated to its width.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear();
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_local_qkey(self.local_qkey);
        packet.set_local_qpn(self.local_qpn);
        packet.set_local_eecn(self.local_eecn);
        packet.set_starting_psn(self.starting_psn);
        packet.set_vendor_id(self.vendor_id);
        packet.set_responder_resources(self.responder_resources);
        packet.set_initiator_depth(self.initiator_depth);
        packet.set_target_ack_delay(self.target_ack_delay);
        packet.set_failover_accepted(self.failover_accepted);
        packet.set_end_to_end_flow_control(self.end_to_end_flow_control);
        packet.set_rnr_retry_count(self.rnr_retry_count);
        packet.set_srq(self.srq);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}
