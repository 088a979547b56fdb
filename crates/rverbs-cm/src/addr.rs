//! Addresses: which IP addresses are this host's (and so the device's), and the GID
//! each maps to.
//!
//! Rule (rdma_bind_addr(3), rdma_resolve_addr(3); the kernel's rdma_cm with RoCE): an IP
//! address names the RDMA device whose GID table holds it; the GID of an IPv4 address is
//! its IPv4-mapped IPv6 form. A wildcard address names no device. Loopback addresses
//! (127/8, ::1) map to the device as the kernel's rdma_cm maps them to the first active
//! device.
//!
//! rverbs0's GID table holds the host's IPv4 addresses (docs/device.md, "GID table, port"), 127.0.0.1
//! last; every 127/8 address maps to that entry. IPv6 addresses are found in the table
//! when it holds them; `::1` maps to the 127.0.0.1 entry (one host, one loopback GID),
//! and an IPv4-mapped IPv6 address to its IPv4 entry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use rverbs::{Context, Gid};

use crate::error::{Error, Result};

/// A GID of the device's port 1 and its table index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalGid {
    /// Index in the GID table.
    pub index: u8,
    /// The GID.
    pub gid: Gid,
}

/// The GID address `ip` has on a device that serves addresses of its own
/// (`rverbs::DeviceConfig::addresses`, a simulated host): every address is its own,
/// 127/8 ones included (each simulated host is one of them), IPv4-mapped for IPv4.
pub fn exact_gid_of(ip: IpAddr) -> Gid {
    match canonical(ip) {
        IpAddr::V4(v4) => Gid::from_ipv4(v4),
        IpAddr::V6(v6) => Gid(v6.octets()),
    }
}

/// The GID an IP address has on the wire (RoCEv2: IPv4-mapped for IPv4).
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        // Every 127/8 address is this host's loopback, whose GID is 127.0.0.1's.
        IpAddr::V4(v4) if v4.is_loopback() => Gid::from_ipv4(Ipv4Addr::LOCALHOST),
        IpAddr::V4(v4) => Gid::from_ipv4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) if v4.is_loopback() => Gid::from_ipv4(Ipv4Addr::LOCALHOST),
            Some(v4) => Gid::from_ipv4(v4),
            None if v6.is_loopback() => Gid::from_ipv4(Ipv4Addr::LOCALHOST),
            None => Gid(v6.octets()),
        },
    }
}

/// The entry of the device's GID table for local address `ip`, or `None` if `ip` is not
/// an address of this host.
pub fn local_gid(ctx: &Context, ip: IpAddr) -> Option<LocalGid> {
    ctx.gid_entry_of(ip).map(|e| LocalGid { index: e.index as u8, gid: e.gid })
}

/// IPv4-mapped IPv6 addresses as IPv4; everything else unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is a wildcard address (0.0.0.0 or ::).
pub fn is_wildcard(ip: IpAddr) -> bool {
    ip.is_unspecified()
}

/// The source address the host would use towards `dst` (rdma_resolve_addr(3) without a
/// source): the destination itself when it is local (the kernel routes local
/// destinations through loopback with that source), otherwise what the routing table
/// picks (a connected UDP socket's local address; no packet is sent).
///
/// On a device that serves addresses of its own (`served`: a simulated host), a source
/// it does not serve is replaced by its first served address of the destination's family,
/// as a host with one interface sends from that interface's address.
pub fn source_for(ctx: &Context, dst: IpAddr, served: Option<&[IpAddr]>) -> Result<IpAddr> {
    if local_gid(ctx, dst).is_some() {
        return Ok(dst);
    }
    let probe = match dst {
        IpAddr::V4(_) => UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)),
        IpAddr::V6(_) => UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)),
    }?;
    probe.connect(SocketAddr::new(dst, 9)).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH)))?;
    let routed = probe.local_addr()?.ip();
    match served {
        Some(own) if local_gid(ctx, routed).is_none() => {
            own.iter().copied().find(|a| a.is_ipv4() == dst.is_ipv4()).ok_or(Error::AddrNotAvail)
        }
        _ => Ok(routed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_mapped_addresses_share_the_loopback_gid() {
        let ctx = rverbs::devices().unwrap()[0].open().unwrap();
        let lo = local_gid(&ctx, "127.0.0.1".parse().unwrap()).expect("127.0.0.1 is in the table");
        assert_eq!(lo.gid, Gid::from_ipv4(Ipv4Addr::LOCALHOST));
        assert_eq!(local_gid(&ctx, "127.0.0.2".parse().unwrap()), Some(lo));
        assert_eq!(local_gid(&ctx, "::1".parse().unwrap()), Some(lo));
        assert_eq!(local_gid(&ctx, "::ffff:127.0.0.1".parse().unwrap()), Some(lo));
        assert_eq!(local_gid(&ctx, "192.0.2.77".parse().unwrap()), None, "TEST-NET-1 is nobody's address");
        assert_eq!(source_for(&ctx, "127.0.0.3".parse().unwrap(), None).unwrap(), "127.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(gid_of("127.0.0.2".parse().unwrap()), lo.gid, "a 127/8 peer is reached at the loopback GID");
        assert_eq!(gid_of("::ffff:127.0.0.9".parse().unwrap()), lo.gid);
    }
}
