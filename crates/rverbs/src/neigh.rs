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
//! next hop (ARP, or IPv6 neighbour discovery); the route's next hop is read from
//! `/proc/net/route` (`/proc/net/ipv6_route`) and its state from `/proc/net/arp`
//! (complete: resolved) or, for IPv6, which has no such file, from the kernel's neighbour
//! table over rtnetlink (`RTM_GETNEIGH`: reachable, stale, delay, probe, permanent or
//! no-ARP: resolved; `neighbour6`); and the connected socket reports `EHOSTUNREACH`
//! when resolution failed (and `ECONNREFUSED` when the destination itself answered,
//! which proves the path). Everything read is the calling process's network namespace's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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
    hop: IpAddr,
    deadline: Instant,
    /// When to look again.
    pub next: Instant,
}

/// Starts resolving `dst` (not an address of this host) within `timeout`: `Err(verdict)`
/// when the answer is known at once.
///
/// Rule: a multicast group has no neighbour to ask: its link address is computed from the
/// group's (RFC 1112 §6.4, RFC 2464 §7; the kernel's neighbour table marks it no-ARP), and
/// the kernel routes it out of the bound source address's interface without a route
/// (`ip_route_output`), so a group is reachable at once (rdma_join_multicast(3) after
/// rdma_resolve_addr(3) to the group).
pub fn start(dst: IpAddr, timeout: Duration, now: Instant) -> Result<Resolving, Probe> {
    if dst.is_loopback() || dst.is_multicast() {
        return Err(Probe::Reachable);
    }
    let family = if dst.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let sock = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| Probe::Unreachable(e.raw_os_error()))?;
    // No route: the kernel's rdma_cm fails the same way (ip_route_output).
    rustix::net::connect(&sock, &SocketAddr::new(dst, 9)).map_err(|e| Probe::Unreachable(e.raw_os_error()))?;
    let hop = match dst {
        IpAddr::V4(v4) => next_hop(v4, &std::fs::read_to_string("/proc/net/route").unwrap_or_default()).map(IpAddr::V4),
        IpAddr::V6(v6) => next_hop6(v6, &std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default()).map(IpAddr::V6),
    };
    let Some(hop) = hop else { return Err(Probe::Reachable) };
    if resolved(hop) {
        return Err(Probe::Reachable);
    }
    // Make the kernel resolve the next hop (an empty datagram to the discard port).
    let _ = rustix::net::send(&sock, &[], rustix::net::SendFlags::empty());
    Ok(Resolving { sock, hop, deadline: now + timeout, next: now + POLL })
}

impl Resolving {
    /// Looks at the neighbour table and the socket's error.
    pub fn poll(&mut self, now: Instant) -> Probe {
        if resolved(self.hop) {
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
pub(crate) fn next_hop(dst: Ipv4Addr, table: &str) -> Option<Ipv4Addr> {
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

/// Whether the kernel's neighbour table has resolved `hop`.
fn resolved(hop: IpAddr) -> bool {
    match hop {
        IpAddr::V4(v4) => arp_complete(v4, &std::fs::read_to_string("/proc/net/arp").unwrap_or_default()),
        IpAddr::V6(v6) => neighbour6(v6).is_some_and(|state| state & NUD_RESOLVED != 0),
    }
}

/// The next hop towards `dst` in `/proc/net/ipv6_route`'s text, as [`next_hop`] does for
/// IPv4: `None` for a route through the loopback or a local one (an address of this
/// host: nothing to resolve), or when no route matches.
pub(crate) fn next_hop6(dst: Ipv6Addr, table: &str) -> Option<Ipv6Addr> {
    // Fields: destination, prefix length, source, source prefix length, next hop, metric,
    // reference count, use, flags, device; addresses in 32 hex digits, lengths and flags in
    // hex.
    const RTF_LOCAL: u32 = 0x8000_0000;
    let addr = |s: &str| u128::from_str_radix(s, 16).ok().filter(|_| s.len() == 32).map(Ipv6Addr::from);
    let mut best: Option<(u32, Ipv6Addr, u32, &str)> = None;
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let (Some(net), Ok(len), Some(gw), Ok(flags)) =
            (addr(f[0]), u32::from_str_radix(f[1], 16), addr(f[4]), u32::from_str_radix(f[8], 16))
        else {
            continue;
        };
        if len > 128 {
            continue;
        }
        let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
        if u128::from(dst) & mask != u128::from(net) & mask {
            continue;
        }
        if best.is_none_or(|(bl, ..)| len > bl) {
            best = Some((len, gw, flags, f[9]));
        }
    }
    let (_, gw, flags, iface) = best?;
    if iface == "lo" || flags & RTF_LOCAL != 0 {
        return None;
    }
    Some(if gw.is_unspecified() { dst } else { gw })
}

/// Neighbour states that mean "resolved" (`NUD_REACHABLE | NUD_STALE | NUD_DELAY |
/// NUD_PROBE | NUD_NOARP | NUD_PERMANENT`): a link-layer address is known.
const NUD_RESOLVED: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// The state (`NUD_*`) of the kernel's IPv6 neighbour entry for `ip`, asked over
/// rtnetlink (an `RTM_GETNEIGH` dump of the AF_INET6 table); `None` when there is none
/// or the kernel cannot be asked.
fn neighbour6(ip: Ipv6Addr) -> Option<u16> {
    // Protocol NETLINK_ROUTE is 0, the default (`None`).
    use rustix::net::{recv, send, socket_with, RecvFlags, SendFlags, SocketFlags};
    let sock = socket_with(AddressFamily::NETLINK, SocketType::RAW, SocketFlags::CLOEXEC, None).ok()?;
    send(&sock, &neigh_dump_request(1), SendFlags::empty()).ok()?;
    let mut buf = vec![0u8; 32 * 1024];
    let mut state = None;
    // Bounded: a dump ends with NLMSG_DONE; the kernel sends a table's worth at most.
    for _ in 0..4096 {
        let (n, _) = recv(&sock, &mut buf, RecvFlags::empty()).ok()?;
        let (found, done) = parse_neighbours(&buf[..n.min(buf.len())], ip);
        state = state.or(found);
        if done {
            return state;
        }
    }
    state
}

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NDA_DST: u16 = 1;

/// An `RTM_GETNEIGH` dump request for the IPv6 neighbour table: a netlink header
/// (length, type, NLM_F_REQUEST | NLM_F_DUMP, sequence, port 0) and an `ndmsg` of family
/// AF_INET6, native endianness.
fn neigh_dump_request(seq: u32) -> [u8; 28] {
    let mut m = [0u8; 28];
    m[0..4].copy_from_slice(&28u32.to_ne_bytes());
    m[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    m[6..8].copy_from_slice(&(0x01u16 | 0x300).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m[16] = libc::AF_INET6 as u8;
    m
}

/// Reads the netlink messages in `buf` (one `recv`): the state of the `RTM_NEWNEIGH`
/// entry whose destination is `ip`, if one is there, and whether the dump ended (DONE or
/// an error, or a message that does not fit: nothing more can be read from it).
pub(crate) fn parse_neighbours(buf: &[u8], ip: Ipv6Addr) -> (Option<u16>, bool) {
    let u16_at = |b: &[u8], i: usize| b.get(i..i + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]));
    let u32_at = |b: &[u8], i: usize| b.get(i..i + 4).map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]));
    let mut found = None;
    let mut off = 0;
    while off + 16 <= buf.len() {
        let (Some(len), Some(kind)) = (u32_at(buf, off), u16_at(buf, off + 4)) else { break };
        let len = len as usize;
        let Some(msg) = buf.get(off..off.saturating_add(len)).filter(|_| len >= 16) else { return (found, true) };
        match kind {
            NLMSG_DONE | NLMSG_ERROR => return (found, true),
            // ndmsg: family, pads, ifindex, state (u16 at 8), flags, type; then attributes.
            RTM_NEWNEIGH if msg.len() >= 16 + 12 => {
                let body = &msg[16..];
                let state = u16_at(body, 8).unwrap_or(0);
                let mut a = 12;
                while a + 4 <= body.len() {
                    let (Some(alen), Some(akind)) = (u16_at(body, a), u16_at(body, a + 2)) else { break };
                    let alen = alen as usize;
                    if alen < 4 || a + alen > body.len() {
                        break;
                    }
                    if akind == NDA_DST && alen == 4 + 16 {
                        let mut o = [0u8; 16];
                        o.copy_from_slice(&body[a + 4..a + 20]);
                        if Ipv6Addr::from(o) == ip {
                            found = Some(state);
                        }
                    }
                    a += alen.div_ceil(4) * 4;
                }
            }
            _ => {}
        }
        off += len.div_ceil(4) * 4;
    }
    (found, false)
}

/// Whether `/proc/net/arp`'s text holds a complete entry (flag ATF_COM, 0x2) for `ip`.
pub(crate) fn arp_complete(ip: Ipv4Addr, table: &str) -> bool {
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
    fn a_multicast_group_needs_no_neighbour_nor_route() {
        let now = Instant::now();
        for g in ["239.70.1.1", "224.0.0.251", "ff0e::1234"] {
            assert!(matches!(start(g.parse().unwrap(), Duration::from_secs(1), now), Err(Probe::Reachable)), "{g}");
        }
    }

    #[test]
    fn loopback_needs_no_neighbour() {
        let now = Instant::now();
        assert!(matches!(start("127.0.0.1".parse().unwrap(), Duration::from_secs(1), now), Err(Probe::Reachable)));
        assert!(matches!(start("::1".parse().unwrap(), Duration::from_secs(1), now), Err(Probe::Reachable)));
    }

    const ROUTES6: &str = "\
fd690000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001    veth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth0
fd690000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000004 00000000 80200001    veth0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000004 00000000 80200001       lo
";

    #[test]
    fn the_ipv6_next_hop_is_the_gateway_of_the_longest_prefix_or_the_destination() {
        let ip = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(next_hop6(ip("fd69::2"), ROUTES6), Some(ip("fd69::2")), "on the link");
        assert_eq!(next_hop6(ip("2001:db8::1"), ROUTES6), Some(ip("fd00::1")), "the default route's gateway");
        assert_eq!(next_hop6(ip("fd69::1"), ROUTES6), None, "an address of this host");
        assert_eq!(next_hop6(ip("::1"), ROUTES6), None);
        assert_eq!(next_hop6(ip("fd69::2"), ""), None);
    }

    /// A netlink message of `kind` with `body`, padded to 4 bytes.
    fn nlmsg(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    /// An RTM_NEWNEIGH body for `ip` in `state`, with a link-layer address attribute first.
    fn neigh(ip: Ipv6Addr, state: u16) -> Vec<u8> {
        let mut b = vec![libc::AF_INET6 as u8, 0, 0, 0, 3, 0, 0, 0];
        b.extend_from_slice(&state.to_ne_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&10u16.to_ne_bytes()); // NDA_LLADDR, 6 bytes + padding
        b.extend_from_slice(&2u16.to_ne_bytes());
        b.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0, 0]);
        b.extend_from_slice(&20u16.to_ne_bytes());
        b.extend_from_slice(&NDA_DST.to_ne_bytes());
        b.extend_from_slice(&ip.octets());
        b
    }

    #[test]
    fn the_neighbour_dump_is_read_entry_by_entry_until_done() {
        let a: Ipv6Addr = "fd69::2".parse().unwrap();
        let other: Ipv6Addr = "fd69::3".parse().unwrap();
        let mut buf = nlmsg(RTM_NEWNEIGH, &neigh(other, 0x02));
        buf.extend(nlmsg(RTM_NEWNEIGH, &neigh(a, 0x20)));
        assert_eq!(parse_neighbours(&buf, a), (Some(0x20), false), "NUD_FAILED: known, not resolved");
        buf.extend(nlmsg(NLMSG_DONE, &[0; 4]));
        assert_eq!(parse_neighbours(&buf, other), (Some(0x02), true));
        assert_eq!(parse_neighbours(&buf, "fd69::4".parse().unwrap()), (None, true));
        // Truncated or lying lengths end the reading without a panic.
        for cut in 0..buf.len() {
            let _ = parse_neighbours(&buf[..cut], a);
        }
        let mut lying = buf.clone();
        lying[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse_neighbours(&lying, a), (None, true));
        assert_eq!(neigh_dump_request(7)[4..6], RTM_GETNEIGH.to_ne_bytes());
    }

    #[test]
    fn the_kernel_answers_the_neighbour_dump() {
        // This namespace's table may be empty, but the dump must end (DONE) rather than
        // fail: `neighbour6` of an address nobody has is None, not a hang.
        assert_eq!(neighbour6("fd69::ffff".parse().unwrap()), None);
    }
}
