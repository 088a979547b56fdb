//! The network transport's link: RoCEv2 packets over UDP port 4791, for destinations that
//! are not on this host (issue 12), over IPv4 and IPv6. It sends and receives checked
//! packets and knows nothing of QPs: what a received packet is for is decided above it
//! (`transport::dispatch`), RC and UC are driven by `transport::net`, UD multicast
//! delivery by `transport::mcast_net`, MADs by `transport::gsi`.
//!
//! Read before editing: docs/rocev2-wire.md §1 (packets), §2.5 (the ICRC and the IPv4
//! Identification a UDP socket cannot see), §5 (GIDs, the GRH area of a UD receive) and
//! docs/network.md.
//!
//! Its parts, one rule each:
//! - `socket`: one UDP socket per IP address of the GID table (loopback and IPv6
//!   link-local excluded), bound to `address:4791`, unconnected, with path MTU discovery
//!   "do" so the kernel sends IPv4 ID 0 with DF and the ICRC can be computed before sending
//!   (docs/rocev2-wire.md §2.5; IPv6 has no ID). Packets go out from the socket of the
//!   QP's source GID to `destination:4791`. The progress thread reads the sockets
//!   (`progress::NetRx`), up to `rx::RX_BATCH` datagrams per `recvmmsg`
//!   ([`NetSock::receive`]), a train of datagrams coalesced by the kernel (`UDP_GRO`) cut
//!   apart first. Batches go out with one `sendmmsg`, runs of equal-sized packets as GSO
//!   trains (`NetSock::transmit_all`).
//! - `rx`: received packets are checked, one by one in arrival order: parse
//!   (`wire::roce`), ICRC (IPv4: with ID 0, else the ID solved from the ICRC,
//!   `icrc::solve_ipv4_id`, since rxe and NICs send non-zero IDs); a packet that fails
//!   either is dropped and counted, never delivered (`rx::check_datagram`).
//! - Demultiplexing ([`relay`]): the first rverbs process of a network namespace to bind
//!   an address owns its port 4791; the others send from a port of their own and receive
//!   through the owner, which delivers UD into their queues and relays RC/UC packets to
//!   the port they published.
//! - Takeover (`takeover`): when the owner exits, another process binds the port.
//! - `faults` (`RVERBS_FAULTS`) and `trace` (`RVERBS_PCAP`): fault injection on the send
//!   path, and the pcap capture of every datagram sent and received.
//! - `group`: the sockets of the UD multicast groups this process has members of.
//!
//! Limits of this slice: no link-local GIDs; an address beyond the endpoint header's table
//! of ports (32 addresses) is not relayed to; a forked child that keeps the owner's socket
//! open keeps the port from the others after the owner exits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

use rverbs_proto::fault::FaultConfig;
use rverbs_proto::rc::Responder;

use crate::gid::{Gid, GidEntry};
use crate::shm::counters::CounterBlock;
use crate::shm::registry::Registry;

mod faults;
mod group;
pub(crate) mod relay;
mod rx;
mod socket;
mod takeover;
mod trace;

use faults::Faults;
use group::McastNet;
use takeover::Takeover;
use trace::Trace;

// The link's interface to the transport above it (`transport::{dispatch,net,gsi,mcast_net}`);
// the parts below import each other by their own paths, never through these.
pub(crate) use group::{slot_of as group_slot, GroupSock};
pub(crate) use rx::{with_rx_batch, Checked};
#[cfg(feature = "fuzzing")]
pub(crate) use rx::{check_datagram, for_each_segment, IcrcKept, RxAddr};
pub(crate) use socket::{NetSock, NetStats, ROCE_PORT};

/// The sockets of this process and the receive side's state.
pub(crate) struct Net {
    socks: Vec<NetSock>,
    pub(crate) stats: NetStats,
    /// The core's UD responder machine, reconfigured per destination QP (the receive path
    /// runs on the progress thread only; the lock is never contended).
    pub(crate) ud_responder: Mutex<Option<Responder>>,
    faults: Faults,
    /// Held while a thread receives (the progress thread, or an application thread that
    /// polls an empty CQ, `dispatch::receive_now`; on a multicast group's socket too,
    /// `transport::mcast_net`): packets of a connection are delivered in the order they
    /// arrived.
    pub(crate) rx: Mutex<()>,
    /// The network namespace the sockets are in ([`netns_id`]).
    netns: u64,
    /// Which ports of the addresses of `socks` this process took over from an owner that
    /// exited, and when it next tries (`takeover`).
    takeover: Takeover,
    /// The device slot whose progress thread waits on the sockets (`usize::MAX`: none, a
    /// transport used on its own in tests).
    slot: usize,
    /// The multicast groups this process receives from the network, and its multicast
    /// sends (`transport::mcast_net`).
    pub(crate) mcast: McastNet,
}

/// The identity of this process's network namespace (the inode of `/proc/self/ns/net`; 0
/// if it cannot be read): a relay goes only to a port of the owner's namespace.
fn netns_id() -> u64 {
    rustix::fs::stat("/proc/self/ns/net").map_or(0, |st| st.st_ino)
}

impl Net {
    /// Binds `address:4791` for the address of each GID of `gids` (loopback and IPv6
    /// link-local excluded), or, where another process owns that port, `address:0` to send
    /// from. `None` when no socket could be bound or the device's network is off
    /// (`RVERBS_NET=off`, `DeviceConfig::net`).
    /// Its sockets count what they send and receive in `counters` (the endpoint's,
    /// docs/device.md, "Hardware counters"); `cfg` gives the capture file and the packet
    /// faults; `slot` is the device's, whose progress thread waits on the sockets.
    pub(crate) fn open(gids: &[GidEntry], counters: &'static CounterBlock, cfg: &crate::config::DeviceConfig, slot: usize) -> Option<Net> {
        if !cfg.net {
            return None;
        }
        let mut socks = Vec::new();
        let trace = cfg.pcap.as_deref().and_then(Trace::create);
        for e in gids {
            let ip = e.gid.to_ip();
            // Link-local IPv6 addresses need a scope (an interface) to be reached: not served.
            let link_local = matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local());
            // Loopback addresses name this host, reached without the network, unless the
            // device was given its addresses (a simulated host, `DeviceConfig::addresses`).
            let loopback = ip.is_loopback() && cfg.addresses.is_none();
            if loopback || link_local || socks.iter().any(|s: &NetSock| s.ip == ip) {
                continue;
            }
            // Another process of the namespace may own ip:4791: then this one sends from
            // a port of its own (RoCEv2 peers accept any source port) and receives through
            // the owner, which delivers UD messages into this process's queues and relays
            // RC/UC packets to this socket.
            let sock = NetSock::bind(ip, ROCE_PORT, e.gid).or_else(|err| {
                tracing::debug!(%ip, %err, "RoCEv2 port owned by another process: sending from an ephemeral port");
                NetSock::bind(ip, 0, e.gid)
            });
            match sock {
                Ok(sock) => socks.push(sock.on_link(e.ifindex, trace.clone(), counters)),
                Err(err) => tracing::warn!(%ip, %err, "no RoCEv2 socket for this address"),
            }
        }
        let mcast = McastNet::new(gids, &socks, slot);
        (!socks.is_empty()).then(|| Net { mcast, slot, ..Net::new(socks, Faults::with(cfg.net_faults, slot), Instant::now()) })
    }

    /// A transport with one socket on 127.0.0.1 and one on ::1 (ephemeral ports), whose
    /// multicast groups are joined on the loopback interface (for tests).
    #[cfg(test)]
    pub(crate) fn loopback_for_tests() -> Net {
        let ips = [IpAddr::from(std::net::Ipv4Addr::LOCALHOST), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)];
        let socks: Vec<NetSock> = ips.iter().map(|ip| NetSock::bind(*ip, 0, Gid::from_ip(*ip)).unwrap()).collect();
        Net { mcast: McastNet::loopback_for_tests(), ..Net::new(socks, Faults::none(), Instant::now()) }
    }

    /// The network transport of sockets `socks`, with fault injector `faults`; created at
    /// `now` (the first takeover attempt is one period later).
    fn new(socks: Vec<NetSock>, faults: Faults, now: Instant) -> Net {
        let takeover = Takeover::new(&socks, now);
        Net {
            socks,
            stats: NetStats::default(),
            ud_responder: Mutex::new(None),
            faults,
            rx: Mutex::new(()),
            netns: netns_id(),
            takeover,
            mcast: Default::default(),
            slot: usize::MAX,
        }
    }

    /// Publishes in this process's endpoint header (`reg`) the port of each socket that
    /// does not own its address's RoCEv2 port, for the owner to relay RC/UC packets to.
    pub(crate) fn publish(&self, reg: &Registry) {
        for s in self.socks.iter().filter(|s| !s.owns_port()) {
            if !reg.publish_net_port(self.netns, s.ip, s.port) {
                tracing::warn!(ip = %s.ip, "too many addresses: RC/UC packets for this one are not relayed to this process");
            }
        }
    }

    /// The network namespace the sockets are in: a packet is relayed only to a port
    /// published for it (`shm::registry::Peer::net_port`).
    pub(crate) fn netns(&self) -> u64 {
        self.netns
    }

    /// Sends the RoCEv2 packet `packet` (BTH to ICRC; the ICRC written here) from the
    /// socket of local GID `sgid` to `dst:4791`, through the fault injector if
    /// `RVERBS_FAULTS` set one. Without a socket for `sgid` nothing is sent (no route, as
    /// for rxe).
    pub(crate) fn send(&self, sgid: &Gid, dst: IpAddr, packet: &mut [u8]) {
        let Some(sock) = self.sock_of(sgid) else { return };
        let to = SocketAddr::new(dst, ROCE_PORT);
        if !self.faults.is_on() {
            sock.send_to(to, packet);
            return;
        }
        self.faults.send(&self.socks, sock, to, packet);
    }

    /// Sends the RoCEv2 packets `packets` (each BTH to ICRC) from the socket of local GID
    /// `sgid` to `dst:4791` as [`Net::send`] does, in one system call when no fault
    /// injector is set (`sendmmsg`, batches of up to 64).
    pub(crate) fn send_batch(&self, sgid: &Gid, dst: IpAddr, packets: &mut [Vec<u8>]) {
        let Some(sock) = self.sock_of(sgid) else { return };
        if self.faults.is_on() || packets.len() == 1 {
            for p in packets {
                self.send(sgid, dst, p);
            }
            return;
        }
        let to = SocketAddr::new(dst, ROCE_PORT);
        sock.transmit_all(to, packets);
    }

    /// When the transport next needs to run without a readable socket: the fault
    /// injector releases a held-back packet, or a takeover attempt is due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let held = self.faults.poll_timeout();
        let takeover = self.takeover.deadline();
        match (held, takeover) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The progress thread's deadline ([`Net::poll_timeout`]) passed at `now`: sends the
    /// held-back packets that are due, and tries to take over the ports this process does not
    /// own if that is due; a socket that took one over is added to the progress thread's
    /// wait (`progress::watch_net_fd`), and receives from then on.
    pub(crate) fn handle_timeout(&self, now: Instant) {
        self.faults.release_due(&self.socks, now);
        for index in self.take_over(now) {
            if let Some(s) = self.rx_sock(index) {
                crate::progress::watch_net_fd(self.slot, index, s.fd());
            }
        }
    }

    /// Puts a new fault injector with `cfg` on the send path of every socket of this
    /// process (`FaultConfig::NONE`: none); what the previous one held back is sent now.
    pub(crate) fn set_faults(&self, cfg: FaultConfig) {
        self.faults.replace(&self.socks, cfg);
    }

    /// If a takeover attempt is due at `now`: tries to bind the RoCEv2 port of each
    /// address whose port this process does not own yet, and returns the receive indices
    /// ([`Net::rx_sock`]) of the sockets that now own one (the caller has the progress
    /// thread wait on them). The next attempt is due one `TAKEOVER_PERIOD` later, or
    /// never once every port is this process's (`takeover`).
    pub(crate) fn take_over(&self, now: Instant) -> Vec<usize> {
        self.takeover.attempt(&self.socks, now)
    }

    /// A peer process died, which may have owned an address's RoCEv2 port: the next
    /// takeover attempt is due at once (if one is pending at all).
    pub(crate) fn peer_died(&self) {
        self.takeover.peer_died();
    }

    /// The socket of local GID `gid`, which sends for it.
    pub(crate) fn sock_of(&self, gid: &Gid) -> Option<&NetSock> {
        self.socks.iter().find(|s| s.gid == *gid)
    }

    /// The sockets bound at start, in a fixed order; the progress thread polls them by
    /// their index, and a socket that took a port over by [`Net::rx_sock`]'s.
    pub(crate) fn socks(&self) -> &[NetSock] {
        &self.socks
    }

    /// The receiving socket of index `index`: below `socks().len()` the socket of that
    /// index, from there the socket that took over the port of socket `index -
    /// socks().len()`, if it did.
    pub(crate) fn rx_sock(&self, index: usize) -> Option<&NetSock> {
        match index.checked_sub(self.socks.len()) {
            None => self.socks.get(index),
            Some(i) => self.takeover.taken(i),
        }
    }
}

/// The network's reception of multicast groups (`crate::mcast::Reception`): the first
/// member of a group attached in this process opens the group's socket, the last one
/// detached closes it (`transport::mcast_net`, "Receiving").
impl crate::mcast::Reception for Net {
    fn join(&self, gid: &Gid) -> std::io::Result<()> {
        self.mcast.join(self.socks.first(), gid)
    }

    fn leave(&self, gid: &Gid) {
        self.mcast.leave(gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::atomic::Ordering;

    use rx::{ud_packet, RxBatch};
    use takeover::TAKEOVER_PERIOD;

    /// `Context::set_network_faults`: an injector set at run time drops what it should
    /// (drop = 100 %: nothing arrives), and `FaultConfig::NONE` takes it off again (the
    /// next packet arrives, and is the first: loopback keeps the order).
    #[test]
    fn faults_set_at_run_time_apply_until_taken_off() {
        let (rx_ip, rx) = (3..=250u8)
            .find_map(|x| {
                let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, x));
                NetSock::bind(ip, ROCE_PORT, Gid::from_ip(ip)).ok().map(|s| (ip, s))
            })
            .expect("a loopback address whose port 4791 is free");
        let tx_ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let gid = Gid::from_ip(tx_ip);
        let tx = NetSock::bind(tx_ip, 0, gid).unwrap();
        let net = Net::new(vec![tx], Faults::none(), Instant::now());
        net.set_faults(FaultConfig { seed: 1, drop: 1.0, ..FaultConfig::NONE });
        assert!(net.faults.is_on());
        for _ in 0..5 {
            net.send(&gid, rx_ip, &mut ud_packet(b"dropped"));
        }
        net.set_faults(FaultConfig::NONE);
        assert!(!net.faults.is_on());
        net.send(&gid, rx_ip, &mut ud_packet(b"marker"));
        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = Vec::new();
        for _ in 0..10_000 {
            rx.receive_each(&stats, &mut buf, |_, p, _, _| got.push(p.payload().to_vec()));
            if !got.is_empty() {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(got, [b"marker".to_vec()]);
    }

    /// Takeover: while the owner holds its port a non-owner's attempt fails and the next
    /// is due a period later (at once after a peer died); once the port is free, of two
    /// non-owners trying exactly one gets it (bind is atomic) and stops trying, while the
    /// other keeps trying. The winner's new socket is an owner: it receives on the port (the
    /// ICRC checked against it) and relays from it, and the loser's socket takes that relay
    /// with the original source and ID. The winner keeps sending from its old socket.
    #[test]
    fn a_non_owner_takes_over_the_port_its_owner_closed_and_only_one_wins() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let gid = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
        let owner = NetSock::bind(lo, 0, gid).unwrap();
        let port = owner.port;
        let non_owner = || NetSock { owner_port: port, ..NetSock::bind(lo, 0, gid).unwrap() };
        let t0 = Instant::now();
        let (a, b) = (Net::new(vec![non_owner()], Faults::none(), t0), Net::new(vec![non_owner()], Faults::none(), t0));
        let first = t0 + TAKEOVER_PERIOD;
        assert_eq!(a.poll_timeout(), Some(first));
        assert_eq!(a.take_over(first), [0usize; 0], "the owner holds the port");
        assert_eq!(a.poll_timeout(), Some(first + TAKEOVER_PERIOD));
        drop(owner);
        assert_eq!(a.take_over(first), [0usize; 0], "not due: the next attempt is a period later");
        assert!(a.rx_sock(1).is_none());
        a.peer_died();
        let now = Instant::now();
        assert!(a.poll_timeout().is_some_and(|at| at <= now), "a peer died: an attempt is due at once");
        // Both try; `a` first.
        assert_eq!(a.take_over(now), [1]);
        assert_eq!(b.take_over(first), [0usize; 0], "the port is a's now");
        assert_eq!(a.poll_timeout(), None, "every port is a's: no more attempts");
        assert_eq!(b.poll_timeout(), Some(first + TAKEOVER_PERIOD));
        assert_eq!(a.take_over(first + 10 * TAKEOVER_PERIOD), [0usize; 0]);
        let new_owner = a.rx_sock(1).unwrap();
        assert_eq!((new_owner.port, new_owner.owns_port(), new_owner.gid), (port, true, gid));
        assert_eq!(a.sock_of(&gid).unwrap().port, a.socks()[0].port, "sends leave from the old socket");
        assert_ne!(a.socks()[0].port, port);
        assert!(a.rx_sock(2).is_none() && b.rx_sock(1).is_none());

        let sender = NetSock::bind(lo, 0, gid).unwrap();
        sender.send_to(SocketAddr::new(lo, port), &mut ud_packet(b"to the new owner"));
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 67, 0, 2)), 49152);
        let mut relayed = ud_packet(b"relayed by the new owner");
        let n = relayed.len();
        relayed[n - 4..].copy_from_slice(&[9, 9, 9, 9]); // not checked again by the loser
        assert!(new_owner.relay_to(b.socks()[0].port, peer, 0x4321, &relayed));
        let (owner_stats, stats) = (NetStats::default(), NetStats::default());
        let mut buf = RxBatch::new();
        let (mut owner_got, mut got) = (Vec::new(), Vec::new());
        for _ in 0..1000 {
            new_owner.receive_each(&owner_stats, &mut buf, |from, p, _, id| owner_got.push((from.port(), id, p.payload().to_vec())));
            b.socks()[0].receive_each(&stats, &mut buf, |from, p, _, id| got.push((from, id, p.payload().to_vec())));
            if owner_got.len() == 1 && got.len() == 1 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(owner_got, [(sender.port, 0, b"to the new owner".to_vec())]);
        assert_eq!(owner_stats.bad_icrc.load(Ordering::Relaxed), 0);
        assert_eq!(got, [(peer, 0x4321, b"relayed by the new owner".to_vec())]);
        assert_eq!((stats.bad_relay.load(Ordering::Relaxed), stats.malformed.load(Ordering::Relaxed)), (0, 0));
    }
}
