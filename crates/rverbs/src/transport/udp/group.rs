//! The sockets of UD multicast groups across hosts: one UDP socket per group this process
//! has members of, bound to `group:4791` and joined on the served interfaces, and the
//! options of a multicast send (`transport::mcast_net` holds the rules and delivers what
//! these sockets receive).
//!
//! Read before editing: `transport::mcast_net` (the module doc: receiving, sending, and the
//! deviations from rxe), and ip(7) / ipv6(7) (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP,
//! IP_MULTICAST_IF/LOOP/TTL).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::socket::{NetSock, ROCE_PORT};
use crate::gid::{Gid, GidEntry};
use crate::progress::NetConnection;

/// The progress thread's index ([`crate::progress::NetRx::readable`]) of the socket of
/// slot 0; slot `k` is `FIRST_INDEX + k`. Above every index of the unicast sockets
/// (`Net::rx_sock`: twice the number of addresses).
pub(crate) const FIRST_INDEX: usize = 1 << 15;

/// An interface the network transport serves an address on: groups of that address's
/// family are joined there, and sends from that address leave there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Iface {
    /// The served address (the source of multicast sends from it).
    pub(crate) ip: IpAddr,
    pub(crate) ifindex: u32,
}

/// One group this process receives: its socket, bound to `group:4791` and joined.
pub(crate) struct GroupSock {
    pub(crate) group: Gid,
    pub(crate) sock: NetSock,
    /// The socket counts as a network connection while it lives, so a thread that polls an
    /// empty CQ receives from it too (`progress::receive_inline`).
    _live: NetConnection,
}

/// The multicast state of the network transport: the group sockets of this process by
/// slot, and the interfaces of the served addresses.
pub(crate) struct McastNet {
    ifaces: Vec<Iface>,
    slots: Mutex<Vec<Option<Arc<GroupSock>>>>,
    /// Whether a slot holds a socket (written under `slots`' lock): a thread that polls an
    /// empty CQ looks here, not at the lock, when the process receives no group (the
    /// common case; a join it misses is seen at its next poll, and by the progress thread).
    open: AtomicBool,
    /// Held across a multicast send: the TTL last set on each sending socket (by its
    /// address; absent: the socket was never configured for multicast).
    tx: Mutex<HashMap<IpAddr, u32>>,
    /// The device slot whose progress thread waits on the groups' sockets.
    slot: usize,
}

impl Default for McastNet {
    /// No interface, no group, and no progress thread (a transport used on its own).
    fn default() -> Self {
        McastNet { ifaces: Vec::new(), slots: Mutex::default(), open: AtomicBool::new(false), tx: Mutex::default(), slot: usize::MAX }
    }
}

impl McastNet {
    /// The multicast state for the sockets `socks`, which serve the GIDs of `gids`: each
    /// socket's interface is its GID's.
    pub(super) fn new(gids: &[GidEntry], socks: &[NetSock], slot: usize) -> McastNet {
        let ifaces = socks
            .iter()
            .filter_map(|s| gids.iter().find(|e| e.gid == s.gid).map(|e| Iface { ip: s.ip, ifindex: e.ifindex }))
            .collect();
        McastNet { slot, ..McastNet::with_ifaces(ifaces) }
    }

    /// The multicast state for the interfaces `ifaces`.
    pub(super) fn with_ifaces(ifaces: Vec<Iface>) -> McastNet {
        McastNet { ifaces, ..McastNet::default() }
    }

    /// The interfaces a group of `group`'s family is joined on: one per interface index.
    fn ifaces_for(&self, group: IpAddr) -> Vec<Iface> {
        let mut out: Vec<Iface> = Vec::new();
        for i in self.ifaces.iter().filter(|i| i.ip.is_ipv4() == group.is_ipv4()) {
            if !out.iter().any(|o| o.ifindex == i.ifindex) {
                out.push(*i);
            }
        }
        out
    }

    /// The group socket of slot `slot`, if it is open.
    pub(crate) fn slot(&self, slot: usize) -> Option<Arc<GroupSock>> {
        self.slots.lock().expect("multicast sockets").get(slot)?.clone()
    }

    /// The multicast state of a transport with sockets on 127.0.0.1 and ::1, both served
    /// on the loopback interface (for tests).
    #[cfg(test)]
    pub(super) fn loopback_for_tests() -> McastNet {
        let lo = rustix::net::netdevice::name_to_index(UdpSocket::bind("127.0.0.1:0").unwrap(), "lo").unwrap();
        let ips = [IpAddr::from(std::net::Ipv4Addr::LOCALHOST), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)];
        McastNet::with_ifaces(ips.iter().map(|ip| Iface { ip: *ip, ifindex: lo }).collect())
    }

    /// The groups this process receives from the network, by slot.
    #[cfg(test)]
    pub(crate) fn groups(&self) -> Vec<Gid> {
        self.slots.lock().expect("multicast sockets").iter().flatten().map(|g| g.group).collect()
    }

    /// Whether any group socket is open (one load: what a busy poller asks at every empty
    /// poll).
    #[inline]
    pub(crate) fn any_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// The open group sockets (a few: no allocation for up to four; none and no lock when
    /// no group is received).
    pub(crate) fn open_socks(&self) -> smallvec::SmallVec<[Arc<GroupSock>; 4]> {
        if !self.open.load(Ordering::Acquire) {
            return smallvec::SmallVec::new();
        }
        self.slots.lock().expect("multicast sockets").iter().flatten().cloned().collect()
    }

    /// Starts receiving group `group` from the network (the first member of this process
    /// attached): opens its socket, a receiver like `first` (the first socket of the
    /// transport, `None`: the transport has none), and has the progress thread wait on it.
    /// Nothing to do if the group's socket is open already, or if the transport serves no
    /// address of the group's family (no interface to join on: the group is reached on this
    /// host only).
    ///
    /// Errors: the errno of the socket, its bind, or of every join failing (rxe: the netdev's
    /// refusal fails the attach).
    pub(super) fn join(&self, first: Option<&NetSock>, group: &Gid) -> std::io::Result<()> {
        let ip = group.to_ip();
        let ifaces = self.ifaces_for(ip);
        let Some(first) = first else {
            return Ok(());
        };
        if ifaces.is_empty() {
            return Ok(());
        }
        let mut slots = self.slots.lock().expect("multicast sockets");
        if slots.iter().flatten().any(|g| g.group == *group) {
            return Ok(());
        }
        let sock = first.receiver(group_socket(ip, &ifaces)?, *group)?;
        let g = Arc::new(GroupSock { group: *group, sock, _live: NetConnection::open() });
        let slot = match slots.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                slots.push(None);
                slots.len() - 1
            }
        };
        crate::progress::watch_net_fd(self.slot, FIRST_INDEX + slot, g.sock.fd());
        slots[slot] = Some(g);
        self.open.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops receiving group `group` (this process's last member detached): the progress
    /// thread stops waiting on its socket, which closes once no thread receives from it.
    pub(super) fn leave(&self, group: &Gid) {
        let mut slots = self.slots.lock().expect("multicast sockets");
        if let Some(s) = slots.iter_mut().find(|s| s.as_ref().is_some_and(|g| g.group == *group)) {
            if let Some(g) = s.take() {
                crate::progress::unwatch_net_fd(self.slot, g.sock.fd());
            }
        }
        self.open.store(slots.iter().any(Option::is_some), Ordering::Release);
    }

    /// Runs `send`, a send from `sock` to a group, with the socket's multicast options
    /// set for it: hop limit `hop_limit` as TTL / hop limit (0: 1), multicast loopback off,
    /// leaving on the source address's interface (`transport::mcast_net`, "Sending").
    pub(crate) fn configured<R>(&self, sock: &NetSock, hop_limit: u8, send: impl FnOnce() -> R) -> R {
        let ttl = u32::from(hop_limit.max(1));
        // The options are the socket's, shared by every multicast send from it: set and send
        // under one lock. (A packet the fault injector holds back leaves with the options of
        // its release.)
        let mut tx = self.tx.lock().expect("multicast sends");
        let set = tx.get(&sock.ip).copied();
        if set != Some(ttl) {
            let ifindex = self.ifaces.iter().find(|i| i.ip == sock.ip).map_or(0, |i| i.ifindex);
            if let Err(err) = configure(sock, ifindex, ttl, set.is_none()) {
                tracing::debug!(ip = %sock.ip, %err, "multicast socket options not set");
            }
            tx.insert(sock.ip, ttl);
        }
        send()
    }
}

/// A UDP socket bound to `group:4791` with SO_REUSEADDR (every process of the host with
/// members binds it too), joined to the group on each of `ifaces`. A link- or
/// interface-local IPv6 group is bound on the first interface (its scope).
fn group_socket(group: IpAddr, ifaces: &[Iface]) -> std::io::Result<UdpSocket> {
    use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};
    let family = if group.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd = rustix::net::socket_with(family, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    let mut joined = 0;
    let mut last = None;
    match group {
        IpAddr::V4(g) => {
            rustix::net::bind(&fd, &SocketAddr::new(group, ROCE_PORT))?;
            for i in ifaces {
                let IpAddr::V4(addr) = i.ip else { continue };
                match sockopt::set_ip_add_membership_with_ifindex(&fd, &g, &addr, i.ifindex) {
                    Ok(()) => joined += 1,
                    Err(e) => last = Some(e),
                }
            }
        }
        IpAddr::V6(g) => {
            sockopt::set_ipv6_v6only(&fd, true)?;
            // Scope 1 (interface-local) and 2 (link-local) need an interface to bind.
            let scope = if matches!(g.octets()[1] & 0x0f, 1 | 2) { ifaces.first().map_or(0, |i| i.ifindex) } else { 0 };
            rustix::net::bind(&fd, &SocketAddrV6::new(g, ROCE_PORT, 0, scope))?;
            for i in ifaces {
                match sockopt::set_ipv6_add_membership(&fd, &g, i.ifindex) {
                    Ok(()) => joined += 1,
                    Err(e) => last = Some(e),
                }
            }
        }
    }
    match last {
        Some(e) if joined == 0 => Err(e.into()),
        _ => Ok(UdpSocket::from(fd)),
    }
}

/// The slot of progress-thread index `index`, if it names a group socket.
pub(crate) fn slot_of(index: usize) -> Option<usize> {
    index.checked_sub(FIRST_INDEX)
}

/// Sets the multicast TTL / hop limit of `sock`, and first (`first`) its outgoing
/// interface (`ifindex`) and loopback (off).
fn configure(sock: &NetSock, ifindex: u32, ttl: u32, first: bool) -> std::io::Result<()> {
    use rustix::net::sockopt;
    let fd = sock.fd();
    match sock.ip {
        IpAddr::V4(addr) => {
            if first {
                sockopt::set_ip_multicast_if_with_ifindex(fd, &std::net::Ipv4Addr::UNSPECIFIED, &addr, ifindex)?;
                sockopt::set_ip_multicast_loop(fd, false)?;
            }
            sockopt::set_ip_multicast_ttl(fd, ttl)?;
        }
        IpAddr::V6(_) => {
            if first {
                sockopt::set_ipv6_multicast_if(fd, ifindex)?;
                sockopt::set_ipv6_multicast_loop(fd, false)?;
            }
            sockopt::set_ipv6_multicast_hops(fd, ttl)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// One socket per group however often it is joined; leaving closes it and frees its
    /// slot for the next group; a family the transport serves no address of opens none.
    #[test]
    fn join_opens_one_socket_per_group_and_leave_closes_it() {
        let mc = McastNet::loopback_for_tests();
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let first = NetSock::bind(lo, 0, Gid::from_ip(lo)).unwrap();
        let first = Some(&first);
        let g4 = Gid::from_ipv4(Ipv4Addr::new(239, 255, 77, 1));
        let g6 = Gid::from_ip(IpAddr::V6(Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 0x77, 1)));
        mc.join(first, &g4).unwrap();
        mc.join(first, &g4).unwrap();
        mc.join(first, &g6).unwrap();
        assert_eq!(mc.groups(), [g4, g6]);
        mc.leave(&g4);
        assert_eq!(mc.groups(), [g6]);
        let g5 = Gid::from_ipv4(Ipv4Addr::new(239, 255, 77, 5));
        mc.join(first, &g5).unwrap();
        assert_eq!(mc.groups(), [g5, g6], "the free slot is taken again");
        assert_eq!(mc.slot(0).map(|g| g.group), Some(g5));
        mc.leave(&g5);
        mc.leave(&g6);
        mc.leave(&g6);
        assert!(mc.groups().is_empty());

        let v4_only = McastNet::with_ifaces(vec![mc.ifaces[0]]);
        v4_only.join(first, &g6).unwrap();
        assert!(v4_only.groups().is_empty(), "no IPv6 interface: this host only");
    }
}
