//! REJ, reject (attribute 0x0012): IBTA Vol 1 §12.6, Table 108 "REJ Message Contents"; offsets
//! as in Linux `include/rdma/ibta_vol1_c12.h` `CM_REJ_*`.
//!
//! Offsets in the 232-byte CM data area (add 24 for the MAD offset), as `Byte[Bit],bits`:
//! ```text
//! 0[0],32   Local Communication ID          4[0],32   Remote Communication ID
//! 8[0],2    Message Rejected | reserved (6) 9[0],7    Reject Info Length | reserved (1)
//! 10[0],16  Reason                          12-83     Additional Reject Information (72)
//! 84-231    Private Data (148 bytes)
//! ```
//! The reasons are in [`super::reason::RejReason`].

use super::field::{bit_accessors, get_array, view};
use super::common::{MadError, MessageKind, CM_DATA_LEN};
use super::reason::RejReason;

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const MESSAGE_REJECTED: Bits = Bits::new(8, 0, 2);
    pub const REJECTED_INFO_LENGTH: Bits = Bits::new(9, 0, 7);
    pub const REASON: Bits = Bits::new(10, 0, 16);
    pub const ARI: Bytes = 12..84;
    pub const PRIVATE_DATA: Bytes = 84..232;
}

/// Length of REJ private data in bytes (IBTA Vol 1 Table 108; Linux
/// `IB_CM_REJ_PRIVATE_DATA_SIZE`).
pub const PRIVATE_DATA_LEN: usize = 148;

/// Size of the Additional Reject Information area in bytes (IBTA Vol 1 Table 108; Linux
/// `IB_CM_REJ_ARI_LENGTH`).
pub const ARI_LEN: usize = 72;

const _: () = assert!(field::ARI.end - field::ARI.start == ARI_LEN);
const _: () = assert!(field::PRIVATE_DATA.end - field::PRIVATE_DATA.start == PRIVATE_DATA_LEN);
const _: () = assert!(field::PRIVATE_DATA.end == CM_DATA_LEN);

view!(
    /// A view over the 232-byte CM data area of a REJ (IBTA Vol 1 §12.6, Table 108).
    Packet,
    CM_DATA_LEN
);

bit_accessors!(Packet {
    /// Local Communication ID: the rejecter's connection handle (zero if it has none).
    local_comm_id / set_local_comm_id: u32 = field::LOCAL_COMM_ID;
    /// Remote Communication ID: the Local Communication ID of the message rejected.
    remote_comm_id / set_remote_comm_id: u32 = field::REMOTE_COMM_ID;
    /// Message Rejected (2 bits): 0 REQ, 1 REP, 2 other.
    message_rejected / set_message_rejected: MessageKind = field::MESSAGE_REJECTED;
    /// Reject Info Length (7 bits): how many ARI bytes are meaningful; at most 72.
    rejected_info_length / set_rejected_info_length: u8 = field::REJECTED_INFO_LENGTH;
    /// Reason (16 bits), from the REJ reason table of IBTA Vol 1 §12.6 (see [`RejReason`]).
    reason / set_reason: RejReason = field::REASON;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// Additional Reject Information, the whole 72-byte area.
    pub fn ari(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ARI]
    }

    /// Private Data (148 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Additional Reject Information, writable.
    pub fn ari_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::ARI]
    }

    /// Private Data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A REJ message: every field of IBTA Vol 1 Table 108.
///
/// The ARI area is kept whole; [`Rej::ari_bytes`] gives the `ari_length` bytes that count.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rej {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Message Rejected (2 bits).
    pub message_rejected: MessageKind,
    /// Reject Info Length (7 bits on the wire; at most [`ARI_LEN`]).
    pub ari_length: u8,
    /// Reason.
    pub reason: RejReason,
    /// Additional Reject Information (the whole area).
    pub ari: [u8; ARI_LEN],
    /// Private Data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Default for Rej {
    /// The all-zero REJ (reason 0, which is `RejReason::Unknown(0)`).
    fn default() -> Self {
        Rej {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_rejected: MessageKind::Req,
            ari_length: 0,
            reason: RejReason::from(0),
            ari: [0; ARI_LEN],
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }
}

impl Rej {
    /// The meaningful ARI bytes: the first `ari_length` (at most [`ARI_LEN`]).
    pub fn ari_bytes(&self) -> &[u8] {
        &self.ari[..usize::from(self.ari_length).min(ARI_LEN)]
    }

    /// Parses a REJ; reserved bits are ignored.
    ///
    /// Rule: IBTA Vol 1 Table 108: the ARI area holds 72 bytes, so Reject Info Length is at
    /// most 72.
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`CM_DATA_LEN`];
    /// `MadError::LengthOutOfRange` if Reject Info Length exceeds [`ARI_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Rej, MadError> {
        packet.check_len()?;
        let ari_length = packet.rejected_info_length();
        if usize::from(ari_length) > ARI_LEN {
            return Err(MadError::LengthOutOfRange {
                field: "REJ Reject Info Length",
                value: ari_length,
                max: ARI_LEN as u8,
            });
        }
        Ok(Rej {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_rejected: packet.message_rejected(),
            ari_length,
            reason: packet.reason(),
            ari: get_array(packet.buffer.as_ref(), field::ARI),
            private_data: get_array(packet.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Length of the emitted message: [`CM_DATA_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the REJ: zeroes the data area, then sets every field. An `ari_length` above
    /// [`ARI_LEN`] is written as [`ARI_LEN`], so the output always parses.
    ///
    /// Panics if the buffer is shorter than [`CM_DATA_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear();
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_message_rejected(self.message_rejected);
        packet.set_rejected_info_length(self.ari_length.min(ARI_LEN as u8));
        packet.set_reason(self.reason);
        packet.ari_mut().copy_from_slice(&self.ari);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rej_ari_length_over_72_is_refused() {
        let mut bytes = [0u8; CM_DATA_LEN];
        bytes[9] = 73 << 1;
        assert_eq!(
            Rej::parse(&Packet::new_unchecked(&bytes[..])),
            Err(MadError::LengthOutOfRange {
                field: "REJ Reject Info Length",
                value: 73,
                max: 72
            })
        );
        bytes[9] = 72 << 1;
        assert_eq!(
            Rej::parse(&Packet::new_unchecked(&bytes[..]))
                .unwrap()
                .ari_length,
            72
        );
    }

    #[test]
    fn rej_emit_clamps_ari_length() {
        let rej = Rej {
            ari_length: 100,
            ..Rej::default()
        };
        let mut bytes = [0u8; CM_DATA_LEN];
        rej.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[9], 72 << 1);
        assert_eq!(rej.ari_bytes().len(), 72);
    }
}
