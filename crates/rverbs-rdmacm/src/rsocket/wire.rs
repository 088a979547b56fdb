//! The rsocket wire formats (docs/rsockets.md): the connection private data, the
//! immediate-data message word, the SGL and iomap entries written into the peer.
//! Pure values: no I/O.

/// `RS_OP_*`: the top 3 bits of the immediate data (docs/rsockets.md, "Messages").
pub mod op {
    pub const DATA: u32 = 0;
    pub const WRITE: u32 = 2;
    pub const SGL: u32 = 4;
    pub const IOMAP_SGL: u32 = 6;
    pub const CTRL: u32 = 7;
}

/// `RS_CTRL_*`: the data of an [`op::CTRL`] message.
pub mod ctrl {
    pub const DISCONNECT: u32 = 0;
    pub const KEEPALIVE: u32 = 1;
    pub const SHUTDOWN: u32 = 2;
}

/// The message word `op << 29 | data` (data: 29 bits).
pub fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}

/// The op of a message word.
pub fn msg_op(m: u32) -> u32 {
    m >> 29
}

/// The data of a message word.
pub fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// Bit 63 of a work request id: a receive.
pub const WR_ID_RECV: u64 = 1 << 63;

/// The version byte of [`ConnData`].
pub const VERSION: u8 = 1;
/// `RS_CONN_FLAG_NET`: the sender is big-endian (its SGL entries are in network order).
pub const FLAG_NET: u8 = 1;
/// `RS_CONN_FLAG_IOMAP`: the target buffer holds an iomap table after the SGL.
pub const FLAG_IOMAP: u8 = 2;
/// Entries of the target SGL (`RS_SGL_SIZE`).
pub const SGL_SIZE: usize = 2;
/// Bytes of an [`Sge`] in memory.
pub const SGE_LEN: usize = 16;
/// Bytes of an iomap entry (`offset` then an [`Sge`]).
pub const IOMAP_LEN: usize = 24;

/// `struct rs_sge`: a buffer of the peer (host order here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

impl Sge {
    /// The 16 bytes as the sender's memory holds them (little-endian host).
    pub fn to_le(self) -> [u8; SGE_LEN] {
        let mut b = [0; SGE_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.key.to_le_bytes());
        b[12..16].copy_from_slice(&self.length.to_le_bytes());
        b
    }

    /// Reads 16 bytes written by a little-endian peer.
    pub fn from_le(b: &[u8; SGE_LEN]) -> Self {
        Sge {
            addr: u64::from_le_bytes(b[0..8].try_into().unwrap_or_default()),
            key: u32::from_le_bytes(b[8..12].try_into().unwrap_or_default()),
            length: u32::from_le_bytes(b[12..16].try_into().unwrap_or_default()),
        }
    }
}

/// `struct rs_conn_data` (40 bytes): the private data of the REQ and of the REP, every
/// multi-byte field big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnData {
    pub version: u8,
    pub flags: u8,
    /// Receive credits (messages) the sender grants: its receive queue size.
    pub credits: u16,
    /// Iomap entries, as `value_to_scale(n, 8)`.
    pub target_iomap_size: u8,
    /// Where the peer writes SGL updates (`length` = entries).
    pub target_sgl: Sge,
    /// The first half of the sender's receive buffer.
    pub data_buf: Sge,
}

/// Bytes of [`ConnData`].
pub const CONN_DATA_LEN: usize = 40;

impl ConnData {
    /// The 40 bytes.
    pub fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.target_iomap_size;
        for (at, s) in [(8, self.target_sgl), (24, self.data_buf)] {
            b[at..at + 8].copy_from_slice(&s.addr.to_be_bytes());
            b[at + 8..at + 12].copy_from_slice(&s.key.to_be_bytes());
            b[at + 12..at + 16].copy_from_slice(&s.length.to_be_bytes());
        }
        b
    }

    /// Parses private data; `None` if shorter than 40 bytes or not version 1
    /// (rs_accept rejects, rs_do_connect fails with ENOTSUP).
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < CONN_DATA_LEN || b[0] != VERSION {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let sge = |i: usize| Sge { addr: u64_at(i), key: u32_at(i + 8), length: u32_at(i + 12) };
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        })
    }
}

/// `rs_value_to_scale(value, 8)`: values up to 128 as they are, larger ones as
/// `0x80 | value >> 8`.
pub fn value_to_scale(value: u32) -> u8 {
    if value <= 128 { value as u8 } else { (0x80 | (value >> 8)) as u8 }
}

/// `rs_scale_to_value(scale, 8)`, the inverse of [`value_to_scale`].
pub fn scale_to_value(scale: u8) -> u32 {
    let v = u32::from(scale);
    if v <= 128 { v } else { (v & 0x7F) << 8 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A REQ of rdma-core's rsocket as it is on the wire (x86_64 sender, rq_size 384,
    /// no iomap).
    const REQ: [u8; 40] = [
        1, 2, 0x01, 0x80, 0, 0, 0, 0, // version, flags (IOMAP), credits 384, reserved, iomap 0
        0, 0, 0x55, 0x55, 0x12, 0x34, 0x50, 0x00, 0x00, 0x00, 0x01, 0x02, 0, 0, 0, 2, // target_sgl
        0, 0, 0x55, 0x55, 0x12, 0x40, 0x00, 0x00, 0x00, 0x00, 0x03, 0x04, 0, 1, 0, 0, // data_buf
    ];

    #[test]
    fn conn_data_parse_reads_rdma_core_layout() {
        let c = ConnData::parse(&REQ).expect("version 1");
        assert_eq!(c.flags, FLAG_IOMAP);
        assert_eq!(c.credits, 384);
        assert_eq!(c.target_iomap_size, 0);
        assert_eq!(c.target_sgl, Sge { addr: 0x5555_1234_5000, key: 0x102, length: 2 });
        assert_eq!(c.data_buf, Sge { addr: 0x5555_1240_0000, key: 0x304, length: 0x10000 });
    }

    #[test]
    fn conn_data_emit_round_trips() {
        let c = ConnData::parse(&REQ).expect("version 1");
        assert_eq!(c.emit(), REQ);
    }

    #[test]
    fn conn_data_parse_refuses_other_versions_and_short_data() {
        let mut v2 = REQ;
        v2[0] = 2;
        assert_eq!(ConnData::parse(&v2), None);
        for len in 0..CONN_DATA_LEN {
            assert_eq!(ConnData::parse(&REQ[..len]), None, "prefix of {len} bytes");
        }
    }

    #[test]
    fn msg_packs_op_in_top_three_bits() {
        assert_eq!(msg(op::SGL, 384 + 7), 0x8000_0187);
        assert_eq!(msg(op::CTRL, ctrl::SHUTDOWN), 0xE000_0002);
        assert_eq!(msg(op::DATA, 65536), 0x0001_0000);
        let m = msg(op::IOMAP_SGL, 5);
        assert_eq!((msg_op(m), msg_data(m)), (op::IOMAP_SGL, 5));
    }

    #[test]
    fn scale_round_trips_supported_values() {
        for v in [0, 1, 64, 128, 256, 512, 0x7F00] {
            assert_eq!(scale_to_value(value_to_scale(v)), v, "{v}");
        }
        assert_eq!(value_to_scale(256), 0x81);
    }

    #[test]
    fn sge_le_round_trips() {
        let s = Sge { addr: 0x1122_3344_5566_7788, key: 0xAABB_CCDD, length: 4096 };
        assert_eq!(Sge::from_le(&s.to_le()), s);
        assert_eq!(s.to_le()[0], 0x88);
    }
}
