//! DREP, the disconnection reply (attribute 0x0016): IBTA Vol 1 §12.6, Table 113 "DREP
//! Message Contents"; offsets as in Linux `include/rdma/ibta_vol1_c12.h` `CM_DREP_*`.
//!
//! Offsets in the 232-byte CM data area (add 24 for the MAD offset), as `Byte[Bit],bits`:
//! ```text
//! 0[0],32   Local Communication ID          4[0],32   Remote Communication ID
//! 8-231     Private Data (224 bytes)
//! ```

use super::field::{bit_accessors, get_array, view};
use super::common::{MadError, CM_DATA_LEN};

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const PRIVATE_DATA: Bytes = 8..232;
}

/// Length of DREP private data in bytes (IBTA Vol 1 Table 113; Linux
/// `IB_CM_DREP_PRIVATE_DATA_SIZE`).
pub const PRIVATE_DATA_LEN: usize = 224;

const _: () = assert!(field::PRIVATE_DATA.end - field::PRIVATE_DATA.start == PRIVATE_DATA_LEN);
const _: () = assert!(field::PRIVATE_DATA.end == CM_DATA_LEN);

view!(
    /// A view over the 232-byte CM data area of a DREP (IBTA Vol 1 §12.6, Table 113).
    Packet,
    CM_DATA_LEN
);

bit_accessors!(Packet {
    /// Local Communication ID: the replier's connection handle.
    local_comm_id / set_local_comm_id: u32 = field::LOCAL_COMM_ID;
    /// Remote Communication ID: the Local Communication ID of the DREQ answered.
    remote_comm_id / set_remote_comm_id: u32 = field::REMOTE_COMM_ID;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// Private Data (224 bytes).
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

/// A DREP message: every field of IBTA Vol 1 Table 113.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Drep {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Private Data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for Drep {
    /// The all-zero DREP.
    fn default() -> Self {
        Drep {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }
}

impl Drep {
    /// Parses a DREP.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Drep, MadError> {
        packet.check_len()?;
        Ok(Drep {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            private_data: get_array(packet.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the DREP over the whole data area.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear();
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}
