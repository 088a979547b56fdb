//! MRA, message receipt acknowledgement (attribute 0x0011): IBTA Vol 1 §12.6, Table 107 "MRA
//! Message Contents"; offsets as in Linux `include/rdma/ibta_vol1_c12.h` `CM_MRA_*`.
//!
//! An MRA tells the sender of a REQ, REP or LAP that the answer will take longer than its
//! timeout, and how long to wait instead.
//!
//! Offsets in the 232-byte CM data area (add 24 for the MAD offset), as `Byte[Bit],bits`:
//! ```text
//! 0[0],32   Local Communication ID          4[0],32   Remote Communication ID
//! 8[0],2    Message MRAed | reserved (6)    9[0],5    Service Timeout | reserved (3)
//! 10-231    Private Data (222 bytes)
//! ```

use super::field::{bit_accessors, get_array, view};
use super::common::{MadError, MessageKind, CM_DATA_LEN};

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const MESSAGE_MRAED: Bits = Bits::new(8, 0, 2);
    pub const SERVICE_TIMEOUT: Bits = Bits::new(9, 0, 5);
    pub const PRIVATE_DATA: Bytes = 10..232;
}

/// Length of MRA private data in bytes (IBTA Vol 1 Table 107; Linux
/// `IB_CM_MRA_PRIVATE_DATA_SIZE`).
pub const PRIVATE_DATA_LEN: usize = 222;

const _: () = assert!(field::PRIVATE_DATA.end - field::PRIVATE_DATA.start == PRIVATE_DATA_LEN);
const _: () = assert!(field::PRIVATE_DATA.end == CM_DATA_LEN);

view!(
    /// A view over the 232-byte CM data area of an MRA (IBTA Vol 1 §12.6, Table 107).
    Packet,
    CM_DATA_LEN
);

bit_accessors!(Packet {
    /// Local Communication ID: the sender's connection handle.
    local_comm_id / set_local_comm_id: u32 = field::LOCAL_COMM_ID;
    /// Remote Communication ID: the Local Communication ID of the message acknowledged.
    remote_comm_id / set_remote_comm_id: u32 = field::REMOTE_COMM_ID;
    /// Message MRAed (2 bits): 0 REQ, 1 REP, 2 LAP.
    message_mraed / set_message_mraed: MessageKind = field::MESSAGE_MRAED;
    /// Service Timeout (5 bits): the peer waits 4.096 µs × 2^value more for the answer.
    service_timeout / set_service_timeout: u8 = field::SERVICE_TIMEOUT;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// Private Data (222 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Private Data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// An MRA message: every field of IBTA Vol 1 Table 107.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mra {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Message MRAed (2 bits).
    pub message_mraed: MessageKind,
    /// Service Timeout (5 bits).
    pub service_timeout: u8,
    /// Private Data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for Mra {
    /// The all-zero MRA.
    fn default() -> Self {
        Mra {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_mraed: MessageKind::Req,
            service_timeout: 0,
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }
}

impl Mra {
    /// Parses an MRA; reserved bits are ignored.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Mra, MadError> {
        packet.check_len()?;
        Ok(Mra {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_mraed: packet.message_mraed(),
            service_timeout: packet.service_timeout(),
            private_data: get_array(packet.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the MRA: zeroes the data area, then sets every field, truncated to its width.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear();
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_message_mraed(self.message_mraed);
        packet.set_service_timeout(self.service_timeout);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}
