//! The path information of a REQ, 44 bytes, carried twice: the primary path at REQ bytes
//! 52-95 and the alternate path at REQ bytes 96-139 (IBTA Vol 1 §12.6, Table 106; Linux
//! `ibta_vol1_c12.h` `CM_REQ_PRIMARY_*` / `CM_REQ_ALTERNATE_*`).
//!
//! Offsets relative to the start of the path (add 52 or 96 for the REQ offset):
//! ```text
//! bytes 0-1    Local Port LID
//! bytes 2-3    Remote Port LID
//! bytes 4-19   Local Port GID
//! bytes 20-35  Remote Port GID
//! bytes 36-38  Flow Label (20, from 36[0]) | reserved (6)
//! byte 39      reserved (2) | Packet Rate (6, 39[2])
//! byte 40      Traffic Class
//! byte 41      Hop Limit
//! byte 42      SL (4, 42[0]) | Subnet Local (1, 42[4]) | reserved (3)
//! byte 43      Local ACK Timeout (5, 43[0]) | 3 bits that are not the path's
//! ```
//! The low three bits of byte 43 are reserved in the primary path; in the alternate path
//! REQ byte 139 bit 5 is SAP Supported, which belongs to the REQ, so a path's emit leaves
//! them alone.

use super::field::{bit_accessors, get_array, view};
use super::common::MadError;

mod field {
    use crate::mad::field::{Bits, Bytes};

    pub const LOCAL_LID: Bits = Bits::new(0, 0, 16);
    pub const REMOTE_LID: Bits = Bits::new(2, 0, 16);
    pub const LOCAL_GID: Bytes = 4..20;
    pub const REMOTE_GID: Bytes = 20..36;
    pub const FLOW_LABEL: Bits = Bits::new(36, 0, 20);
    pub const PACKET_RATE: Bits = Bits::new(39, 2, 6);
    pub const TRAFFIC_CLASS: Bits = Bits::new(40, 0, 8);
    pub const HOP_LIMIT: Bits = Bits::new(41, 0, 8);
    pub const SL: Bits = Bits::new(42, 0, 4);
    pub const SUBNET_LOCAL: Bits = Bits::new(42, 4, 1);
    pub const LOCAL_ACK_TIMEOUT: Bits = Bits::new(43, 0, 5);
}

/// Length of one path in a REQ, in bytes (IBTA Vol 1 Table 106: bytes 52-95, 96-139).
pub const PATH_LEN: usize = 44;

view!(
    /// A view over the 44 bytes of one REQ path (IBTA Vol 1 §12.6, Table 106).
    Packet,
    PATH_LEN
);

bit_accessors!(Packet {
    /// Local Port LID (16 bits); 0xFFFF (permissive) on RoCE, where LIDs are unused.
    local_lid / set_local_lid: u16 = field::LOCAL_LID;
    /// Remote Port LID (16 bits).
    remote_lid / set_remote_lid: u16 = field::REMOTE_LID;
    /// Flow Label (20 bits) for the GRH.
    flow_label / set_flow_label: u32 = field::FLOW_LABEL;
    /// Packet Rate (6 bits), the IBTA rate encoding of PathRecord.Rate.
    packet_rate / set_packet_rate: u8 = field::PACKET_RATE;
    /// Traffic Class (8 bits) for the GRH.
    traffic_class / set_traffic_class: u8 = field::TRAFFIC_CLASS;
    /// Hop Limit (8 bits) for the GRH.
    hop_limit / set_hop_limit: u8 = field::HOP_LIMIT;
    /// SL (4 bits), the service level.
    sl / set_sl: u8 = field::SL;
    /// Subnet Local (1 bit): the remote port is on the local subnet (no GRH needed on IB).
    subnet_local / set_subnet_local: bool = field::SUBNET_LOCAL;
    /// Local ACK Timeout (5 bits), 4.096 µs × 2^value (IBTA Vol 1 ch. 9, transport timers).
    local_ack_timeout / set_local_ack_timeout: u8 = field::LOCAL_ACK_TIMEOUT;
});

impl<T: AsRef<[u8]>> Packet<T> {
    /// Local Port GID (128 bits).
    pub fn local_gid(&self) -> [u8; 16] {
        get_array(self.buffer.as_ref(), field::LOCAL_GID)
    }

    /// Remote Port GID (128 bits).
    pub fn remote_gid(&self) -> [u8; 16] {
        get_array(self.buffer.as_ref(), field::REMOTE_GID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Local Port GID.
    pub fn set_local_gid(&mut self, gid: [u8; 16]) {
        self.buffer.as_mut()[field::LOCAL_GID].copy_from_slice(&gid);
    }

    /// Sets Remote Port GID.
    pub fn set_remote_gid(&mut self, gid: [u8; 16]) {
        self.buffer.as_mut()[field::REMOTE_GID].copy_from_slice(&gid);
    }
}

/// One path of a REQ (primary or alternate): IBTA Vol 1 §12.6, Table 106.
///
/// Rule: IBTA Vol 1 Table 106: the alternate path is all zero when there is none (Linux
/// `cm_req_has_alt_path` looks at its LID and GID); see [`Path::is_empty`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Path {
    /// Local Port LID.
    pub local_lid: u16,
    /// Remote Port LID.
    pub remote_lid: u16,
    /// Local Port GID.
    pub local_gid: [u8; 16],
    /// Remote Port GID.
    pub remote_gid: [u8; 16],
    /// Flow Label (20 bits).
    pub flow_label: u32,
    /// Packet Rate (6 bits).
    pub packet_rate: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Hop Limit.
    pub hop_limit: u8,
    /// SL (4 bits).
    pub sl: u8,
    /// Subnet Local.
    pub subnet_local: bool,
    /// Local ACK Timeout (5 bits).
    pub local_ack_timeout: u8,
}

impl Path {
    /// Whether this is the all-zero "no path" value.
    ///
    /// Rule: Linux `cm_req_has_alt_path`: a REQ has an alternate path when the alternate
    /// local LID or local GID is non-zero.
    pub fn is_empty(&self) -> bool {
        self.local_lid == 0 && self.local_gid == [0; 16]
    }

    /// Parses a path; reserved bits are ignored.
    ///
    /// Errors: `MadError::Truncated` if the buffer is shorter than [`PATH_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Path, MadError> {
        packet.check_len()?;
        Ok(Path {
            local_lid: packet.local_lid(),
            remote_lid: packet.remote_lid(),
            local_gid: packet.local_gid(),
            remote_gid: packet.remote_gid(),
            flow_label: packet.flow_label(),
            packet_rate: packet.packet_rate(),
            traffic_class: packet.traffic_class(),
            hop_limit: packet.hop_limit(),
            sl: packet.sl(),
            subnet_local: packet.subnet_local(),
            local_ack_timeout: packet.local_ack_timeout(),
        })
    }

    /// Length of the emitted path: [`PATH_LEN`].
    pub const fn buffer_len(&self) -> usize {
        PATH_LEN
    }

    /// Writes the path's fields, truncating each value to its width. Reserved bits and the
    /// low three bits of byte 43 are left as they are: the REQ's emit zeroes them first.
    ///
    /// Panics if the buffer is shorter than [`PATH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_lid(self.local_lid);
        packet.set_remote_lid(self.remote_lid);
        packet.set_local_gid(self.local_gid);
        packet.set_remote_gid(self.remote_gid);
        packet.set_flow_label(self.flow_label);
        packet.set_packet_rate(self.packet_rate);
        packet.set_traffic_class(self.traffic_class);
        packet.set_hop_limit(self.hop_limit);
        packet.set_sl(self.sl);
        packet.set_subnet_local(self.subnet_local);
        packet.set_local_ack_timeout(self.local_ack_timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_emit_leaves_byte_43_low_bits() {
        let mut bytes = [0u8; PATH_LEN];
        bytes[43] = 0b0000_0111;
        let path = Path {
            local_ack_timeout: 0x1f,
            ..Path::default()
        };
        path.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[43], 0xff);
    }

    #[test]
    fn path_parse_ignores_reserved_bits() {
        let mut bytes = [0u8; PATH_LEN];
        bytes[38] = 0x0f; // bits after the flow label
        bytes[39] = 0xc0; // bits before the packet rate
        bytes[42] = 0x07; // bits after subnet local
        bytes[43] = 0x07; // bits after the local ACK timeout
        let path = Path::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(path, Path::default());
    }

    #[test]
    fn path_is_empty_looks_at_local_lid_and_gid() {
        assert!(Path::default().is_empty());
        let mut p = Path::default();
        p.local_gid[15] = 1;
        assert!(!p.is_empty());
        let p = Path {
            local_lid: 1,
            ..Path::default()
        };
        assert!(!p.is_empty());
    }
}
