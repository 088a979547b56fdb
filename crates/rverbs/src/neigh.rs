//! Whether another host's next hop answers, as the kernel's RDMA stack asks it.
//!
//! Rule: rdma_resolve_addr(3): the address is resolved within `timeout_ms`, else the id
//! gets RDMA_CM_EVENT_ADDR_ERROR. The kernel's rdma_cm resolves the neighbour (ARP or
//! IPv6 neighbour discovery) of the route's next hop: a next hop nobody answers ends in
//! ADDR_ERROR with -ETIMEDOUT at the caller's timeout (or -EHOSTUNREACH when the
//! neighbour fails first), not in a connection attempt that times out a minute later.
//! Rule: ibv_modify_qp(3) to RTR on a RoCE port resolves the destination GID's neighbour
//! the same way (the kernel's `ib_resolve_eth_dmac`, one second) and fails when nobody
//! answers ([`resolve_blocking`]).
//!
//! From user space the same question is asked of the kernel's own neighbour table: one
//! empty UDP datagram to the destination's discard port (9) makes the kernel resolve the
//! next hop; the route's next hop is read from `/proc/net/route` and its state from
//! `/proc/net/arp` (complete: resolved), and the connected socket reports
//! `EHOSTUNREACH` when resolution failed (and `ECONNREFUSED` when the destination itself
//! answered, which proves the path). The files are the calling process's network
//! namespace's. IPv6 has no such file: an IPv6 destination is resolved at once, as
//! before (ARCHITECTURE.md §14).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SocketType};

/// How often a pending resolution looks at the neighbour table.
const POLL: Duration = Duration::from_millis(10);

/// The verdict on a destination.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// The next hop answers (or nothing needs asking): ADDR_RESOLVED.
    Reachable,
    /// ADDR_ERROR with this errno.
    Unreachable(i32),
    /// Ask again at [`Resolving::next`].
    Pending,
}

/// A resolution waiting for the neighbour table.
#[derive(Debug)]
pub struct Resolving {
    sock: OwnedFd,
    hop: Ipv4Addr,
    deadline: Instant,
    /// When to look again.
    pub next: Instant,
}

/// Starts resolving `dst` (not an address of this host) within `timeout`: `Err(verdict)`
/// when the answer is known at once.
pub fn start(dst: IpAddr, timeout: Duration, now: Instant) -> Result<Resolving, Probe> {
    let IpAddr::V4(v4) = dst else { return Err(Probe::Reachable) };
    if v4.is_loopback() {
        return Err(Probe::Reachable);
    }
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| Probe::Unreachable(e.raw_os_error()))?;
    // No route: the kernel's rdma_cm fails the same way (ip_route_output).
    rustix::net::connect(&sock, &SocketAddr::new(dst, 9)).map_err(|e| Probe::Unreachable(e.raw_os_error()))?;
    let hop = next_hop(v4, &std::fs::read_to_string("/proc/net/route").unwrap_or_default());
    let Some(hop) = hop else { return Err(Probe::Reachable) };
    if arp_complete(hop, &std::fs::read_to_string("/proc/net/arp").unwrap_or_default()) {
        return Err(Probe::Reachable);
    }
    // Make the kernel resolve the next hop (an empty datagram to the discard port).
    let _ = rustix::net::send(&sock, &[], rustix::net::SendFlags::empty());
    Ok(Resolving { sock, hop, deadline: now + timeout, next: now + POLL })
}

impl Resolving {
    /// Looks at the neighbour table and the socket's error.
    pub fn poll(&mut self, now: Instant) -> Probe {
        if arp_complete(self.hop, &std::fs::read_to_string("/proc/net/arp").unwrap_or_default()) {
            return Probe::Reachable;
        }
        match rustix::net::sockopt::socket_error(&self.sock) {
            Ok(Err(e)) if e == rustix::io::Errno::CONNREFUSED => return Probe::Reachable,
            Ok(Err(e)) => return Probe::Unreachable(e.raw_os_error()),
            _ => {}
        }
        if now >= self.deadline {
            return Probe::Unreachable(libc::ETIMEDOUT);
        }
        self.next = (now + POLL).min(self.deadline);
        Probe::Pending
    }
}

/// Resolves `dst` within `timeout`, waiting in the caller: `Ok` when its next hop
/// answers (or nothing needs asking), else the errno (ETIMEDOUT, EHOSTUNREACH,
/// ENETUNREACH).
pub fn resolve_blocking(dst: IpAddr, timeout: Duration) -> Result<(), i32> {
    let mut r = match start(dst, timeout, Instant::now()) {
        Ok(r) => r,
        Err(Probe::Unreachable(errno)) => return Err(errno),
        Err(_) => return Ok(()),
    };
    loop {
        match r.poll(Instant::now()) {
            Probe::Reachable => return Ok(()),
            Probe::Unreachable(errno) => return Err(errno),
            Probe::Pending => std::thread::sleep(r.next.saturating_duration_since(Instant::now())),
        }
    }
}

/// The next hop towards `dst` in `/proc/net/route`'s text: the gateway of the most
/// specific matching route, or `dst` itself on a directly connected network; `None`
/// when the route leaves through the loopback (nothing to resolve) or no route matches.
fn next_hop(dst: Ipv4Addr, table: &str) -> Option<Ipv4Addr> {
    // Fields: Iface Destination Gateway Flags RefCnt Use Metric Mask …; each address is
    // its four network-order bytes read as a native u32, printed in hex.
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(|v| Ipv4Addr::from(v.to_ne_bytes()));
    let mut best: Option<(u32, &str, Ipv4Addr)> = None;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let (Some(net), Some(gw), Some(mask)) = (word(f[1]), word(f[2]), word(f[7])) else { continue };
        let (m, n) = (u32::from(mask), u32::from(net));
        if u32::from(dst) & m != n & m {
            continue;
        }
        if best.is_none_or(|(bm, _, _)| m.count_ones() > bm.count_ones()) {
            best = Some((m, f[0], gw));
        }
    }
    let (_, iface, gw) = best?;
    if iface == "lo" {
        return None;
    }
    Some(if gw.is_unspecified() { dst } else { gw })
}

/// Whether `/proc/net/arp`'s text holds a complete entry (flag ATF_COM, 0x2) for `ip`.
fn arp_complete(ip: Ipv4Addr, table: &str) -> bool {
    table.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() >= 3
            && f[0].parse::<Ipv4Addr>().is_ok_and(|a| a == ip)
            && u32::from_str_radix(f[2].trim_start_matches("0x"), 16).is_ok_and(|flags| flags & 0x2 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTES: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
        eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        veth0\t0042420A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";

    #[test]
    #[cfg(target_endian = "little")]
    fn the_next_hop_is_the_gateway_of_the_longest_prefix_or_the_destination() {
        // 192.168.0.0/24 on eth0 directly, default via 192.168.0.1, 10.66.66.0/24 on veth0.
        assert_eq!(next_hop("192.168.0.7".parse().unwrap(), ROUTES), Some("192.168.0.7".parse().unwrap()));
        assert_eq!(next_hop("8.8.8.8".parse().unwrap(), ROUTES), Some("192.168.0.1".parse().unwrap()));
        assert_eq!(next_hop("10.66.66.9".parse().unwrap(), ROUTES), Some("10.66.66.9".parse().unwrap()));
        assert_eq!(next_hop("8.8.8.8".parse().unwrap(), "Iface\n"), None);
    }

    #[test]
    fn only_complete_arp_entries_count() {
        let arp = "IP address       HW type     Flags       HW address            Mask     Device\n\
            10.66.66.2       0x1         0x2         aa:bb:cc:dd:ee:ff     *        veth0\n\
            10.66.66.3       0x1         0x0         00:00:00:00:00:00     *        veth0\n";
        assert!(arp_complete("10.66.66.2".parse().unwrap(), arp));
        assert!(!arp_complete("10.66.66.3".parse().unwrap(), arp));
        assert!(!arp_complete("10.66.66.4".parse().unwrap(), arp));
    }

    #[test]
    fn loopback_and_ipv6_need_no_neighbour() {
        let now = Instant::now();
        assert!(matches!(start("127.0.0.1".parse().unwrap(), Duration::from_secs(1), now), Err(Probe::Reachable)));
        assert!(matches!(start("::1".parse().unwrap(), Duration::from_secs(1), now), Err(Probe::Reachable)));
    }
}
