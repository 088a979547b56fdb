//! Global identifiers (`union ibv_gid`) and GID table entries (`struct ibv_gid_entry`).
//!
//! Rule: ibv_query_gid(3), ibv_query_gid_ex(3): a GID is 16 bytes in network order; on a
//! RoCE v2 port an IPv4 address appears as the IPv4-mapped GID `::ffff:a.b.c.d`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit global identifier (`union ibv_gid`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID `::ffff:a.b.c.d` (RoCE v2, IBTA Annex A17; kernel `rdma_gid2ip`).
    pub fn from_ipv4(ip: Ipv4Addr) -> Self {
        Gid(ip.to_ipv6_mapped().octets())
    }

    /// The IPv4 address if this is an IPv4-mapped GID.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// The IP address a RoCE v2 GID stands for (docs/rocev2-wire.md §5.1): IPv4 if the GID is
    /// IPv4-mapped, else the GID itself as an IPv6 address.
    pub fn to_ip(&self) -> IpAddr {
        match self.to_ipv4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }

    /// The GID of an IP address (the inverse of [`Gid::to_ip`]).
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Gid::from_ipv4(v4),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The link-local GID `fe80::` + the EUI-64 interface id.
    pub fn link_local(eui64: [u8; 8]) -> Self {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&eui64);
        Gid(g)
    }

    /// Whether every byte is zero (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The subnet prefix (first 8 bytes) as a host-order integer.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }

    /// The interface id (last 8 bytes) as a host-order integer.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The type of a GID table entry (`enum ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1.
    RoceV1,
    /// RoCE v2 (UDP encapsulation): every entry of the rverbs device.
    RoceV2,
}

/// One GID table entry (`struct ibv_gid_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table.
    pub index: u32,
    /// Its port.
    pub port: u32,
    /// Its type.
    pub gid_type: GidType,
    /// The index of the network interface the address belongs to (for GID 0, the
    /// interface whose MAC it is built from, or the loopback).
    pub ifindex: u32,
}
