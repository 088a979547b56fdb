//! The RDMA CM IP header that rdma_cm puts at the start of REQ and SIDR_REQ private data, 36
//! bytes: IBTA Vol 1 Annex A11 (RDMA IP CM Service); Linux `drivers/infiniband/core/cma.c`
//! (`struct cma_hdr`, `union cma_ip_addr`, `cma_format_hdr`, `cma_get_ip_ver`,
//! `cma_set_ip_ver`, `cma_save_ip4_info`, `cma_save_ip6_info`).
//!
//! ```text
//! byte 0      cma_version, 0x00 (CMA_VERSION)
//! byte 1      IP version in bits 7-4 (4 or 6); bits 3-0 reserved
//! bytes 2-3   source port, big-endian (cma_format_hdr stores the source's sin_port)
//! bytes 4-19  source address: IPv6, or IPv4 in bytes 16-19 after 12 zero bytes
//! bytes 20-35 destination address: IPv6, or IPv4 in bytes 32-35 after 12 zero bytes
//! ```
//! The destination port is not in the header: the receiver takes it from the REQ's service
//! ID (`cma_port_from_service_id`, see [`super::service`]). User private data follows the
//! header (`cma_user_data_offset` is 36 for IP addressing), which leaves the limits below.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::field::get_array;
use super::common::MadError;
use super::{drep, dreq, mra, rej, rep, req, rtu, sidr};

mod field {
    use crate::mad::field::Bytes;

    pub const CMA_VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: Bytes = 2..4;
    pub const SRC_ADDR: Bytes = 4..20;
    pub const DST_ADDR: Bytes = 20..36;
    /// Where an IPv4 address sits inside a 16-byte address field (`union cma_ip_addr`).
    pub const IP4_OFFSET: usize = 12;
}

/// Length of the RDMA CM IP header in bytes (`sizeof(struct cma_hdr)`).
pub const CMA_IP_HEADER_LEN: usize = 36;

/// The only RDMA CM header version (Linux cma.c `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;

/// Most user private data `rdma_connect` can send in a REQ: 92 − 36 = 56 bytes.
pub const REQ_USER_PRIVATE_DATA_MAX: usize = req::PRIVATE_DATA_LEN - CMA_IP_HEADER_LEN;
/// Most user private data `rdma_connect` can send in a SIDR_REQ (UD): 216 − 36 = 180 bytes.
pub const SIDR_REQ_USER_PRIVATE_DATA_MAX: usize = sidr::REQ_PRIVATE_DATA_LEN - CMA_IP_HEADER_LEN;
/// Most user private data `rdma_accept` can send in a REP (no CMA header): 196 bytes.
pub const REP_USER_PRIVATE_DATA_MAX: usize = rep::PRIVATE_DATA_LEN;
/// Most user private data `rdma_reject` can send in a REJ: 148 bytes.
pub const REJ_USER_PRIVATE_DATA_MAX: usize = rej::PRIVATE_DATA_LEN;
/// Most private data a DREQ carries: 220 bytes (`rdma_disconnect` sends none).
pub const DREQ_USER_PRIVATE_DATA_MAX: usize = dreq::PRIVATE_DATA_LEN;
/// Most private data a DREP carries: 224 bytes (`rdma_disconnect` sends none).
pub const DREP_USER_PRIVATE_DATA_MAX: usize = drep::PRIVATE_DATA_LEN;
/// Most private data an MRA carries: 222 bytes.
pub const MRA_USER_PRIVATE_DATA_MAX: usize = mra::PRIVATE_DATA_LEN;
/// Most private data an RTU carries: 224 bytes.
pub const RTU_USER_PRIVATE_DATA_MAX: usize = rtu::PRIVATE_DATA_LEN;
/// Most user private data `rdma_accept` can send in a SIDR_REP (UD): 136 bytes.
pub const SIDR_REP_USER_PRIVATE_DATA_MAX: usize = sidr::REP_PRIVATE_DATA_LEN;

/// The addresses of an rdma_cm connection as carried in the RDMA CM IP header.
///
/// Rule: Linux cma.c `cma_format_hdr`: the header carries the active side's source address
/// and port and the destination address; the destination port is the service ID's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaIpHeader {
    /// The active side's (the REQ sender's) address and port.
    pub src: SocketAddr,
    /// The passive side's address and port.
    pub dst: SocketAddr,
}

impl CmaIpHeader {
    /// The IP version written to byte 1: 4 when both addresses are IPv4, else 6.
    pub fn ip_version(&self) -> u8 {
        match (self.src, self.dst) {
            (SocketAddr::V4(_), SocketAddr::V4(_)) => 4,
            _ => 6,
        }
    }

    /// The 36 header bytes.
    ///
    /// Rule: Linux cma.c `cma_format_hdr`: version 0, IP version in the high nibble, the
    /// source port, IPv4 addresses in the last 4 bytes of each 16-byte field, the rest zero.
    /// Deviation: the kernel takes the family from the source address alone; when the two
    /// families differ this writes IPv6, with the IPv4 address IPv4-mapped (`::ffff:a.b.c.d`).
    /// Scope IDs and flow info of IPv6 addresses are not carried.
    pub fn to_bytes(&self) -> [u8; CMA_IP_HEADER_LEN] {
        let mut out = [0u8; CMA_IP_HEADER_LEN];
        out[field::CMA_VERSION] = CMA_VERSION;
        out[field::IP_VERSION] = self.ip_version() << 4;
        out[field::PORT].copy_from_slice(&self.src.port().to_be_bytes());
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                out[field::SRC_ADDR][field::IP4_OFFSET..].copy_from_slice(&src.octets());
                out[field::DST_ADDR][field::IP4_OFFSET..].copy_from_slice(&dst.octets());
            }
            (src, dst) => {
                out[field::SRC_ADDR].copy_from_slice(&to_v6(src).octets());
                out[field::DST_ADDR].copy_from_slice(&to_v6(dst).octets());
            }
        }
        out
    }

    /// Writes the header into the first 36 bytes of `private_data`; the rest is untouched.
    ///
    /// Panics if `private_data` is shorter than [`CMA_IP_HEADER_LEN`].
    pub fn emit(&self, private_data: &mut [u8]) {
        private_data[..CMA_IP_HEADER_LEN].copy_from_slice(&self.to_bytes());
    }

    /// Parses the header at the start of REQ or SIDR_REQ `private_data`; `dst_port` is the
    /// port of the REQ's service ID ([`super::service::split_service_id`]).
    ///
    /// Rule: Linux cma.c `cma_save_ip4_info` / `cma_save_ip6_info`: the source port is the
    /// header's, the destination port the service ID's; only the last 4 bytes of an IPv4
    /// address field are read. The low nibble of byte 1 is ignored.
    /// Errors: `MadError::Truncated` below 36 bytes; `MadError::CmaVersion` if byte 0 is not
    /// 0; `MadError::IpVersion` if the IP version is neither 4 nor 6.
    pub fn parse(private_data: &[u8], dst_port: u16) -> Result<CmaIpHeader, MadError> {
        let hdr = private_data
            .get(..CMA_IP_HEADER_LEN)
            .ok_or(MadError::Truncated {
                len: private_data.len(),
                need: CMA_IP_HEADER_LEN,
            })?;
        if hdr[field::CMA_VERSION] != CMA_VERSION {
            return Err(MadError::CmaVersion(hdr[field::CMA_VERSION]));
        }
        let src_port = u16::from_be_bytes(get_array(hdr, field::PORT));
        let src: [u8; 16] = get_array(hdr, field::SRC_ADDR);
        let dst: [u8; 16] = get_array(hdr, field::DST_ADDR);
        match hdr[field::IP_VERSION] >> 4 {
            4 => Ok(CmaIpHeader {
                src: SocketAddrV4::new(ip4_of(&src), src_port).into(),
                dst: SocketAddrV4::new(ip4_of(&dst), dst_port).into(),
            }),
            6 => Ok(CmaIpHeader {
                src: SocketAddrV6::new(Ipv6Addr::from(src), src_port, 0, 0).into(),
                dst: SocketAddrV6::new(Ipv6Addr::from(dst), dst_port, 0, 0).into(),
            }),
            other => Err(MadError::IpVersion(other)),
        }
    }
}

/// The IPv4 address in the last four bytes of a `union cma_ip_addr`.
fn ip4_of(field: &[u8; 16]) -> Ipv4Addr {
    Ipv4Addr::new(field[12], field[13], field[14], field[15])
}

/// `ip` as IPv6; an IPv4 address becomes IPv4-mapped.
fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
