//! The network transport: RoCEv2 packets over UDP port 4791, for destinations that are not
//! on this host (issue 12), over IPv4 and IPv6: the sockets, the receive path, UD, and the
//! relay to other processes of the host; RC and UC are driven by [`super::net`].
//!
//! Read before editing: docs/rocev2-wire.md §1 (packets), §2.5 (the ICRC and the IPv4
//! Identification a UDP socket cannot see), §5 (GIDs, the GRH area of a UD receive) and
//! docs/network.md.
//!
//! Sockets: one UDP socket per IP address of the GID table (loopback and IPv6 link-local
//! excluded), bound to `address:4791`, unconnected, with path MTU discovery "do" so the
//! kernel sends IPv4 ID 0 with DF and the ICRC can be computed before sending
//! (docs/rocev2-wire.md §2.5; IPv6 has no ID). Packets go out from
//! the socket of the QP's source GID to `destination:4791`. The progress thread reads the
//! sockets (`progress::NetRx`), up to [`RX_BATCH`] datagrams per `recvmmsg`
//! ([`NetSock::receive`]), a train of datagrams coalesced by the kernel (`UDP_GRO`) cut
//! apart first. Batches go out with one `sendmmsg`, runs of equal-sized packets as GSO
//! trains ([`NetSock::transmit_all`]). Received packets are checked, one by one in arrival order: parse (`wire::roce`), ICRC
//! (IPv4: with ID 0, else the ID solved from the ICRC, `icrc::solve_ipv4_id`, since rxe and
//! NICs send non-zero IDs); a packet that fails either is dropped and counted, never
//! delivered.
//!
//! Demultiplexing: a RoCEv2 peer only knows port 4791 of a host, and one socket per
//! address can have it. The first rverbs process of a network namespace to bind an
//! address owns it; the others bind `address:0` and send from that port (RoCEv2 peers
//! accept any source port, and answer to 4791). A packet for a QP of another process of
//! the host (the QPN names its endpoint, `crate::table::endpoint_of`) reaches it through
//! the owner:
//! - UD: the owner delivers it straight into that process's queues through shared memory,
//!   as the same-host transport delivers.
//! - RC and UC: the requester and responder state lives in the QP's own process
//!   (`super::net`), so the owner *relays* the checked packet, if the QP record names a
//!   live RC/UC QP: one datagram from `address:4791` to the port that process published
//!   for the address in its endpoint header (`Net::publish`,
//!   `shm::registry::Peer::net_port`; the network namespace must be the owner's too),
//!   holding a relay header ([`relay`]: magic, version, the packet's original source
//!   address and port, the IPv4 ID its ICRC was checked with) and the packet as received.
//!   That process's socket takes a datagram as a relay only when it comes from its own
//!   address and port 4791 and starts with the magic; it strips the header and delivers
//!   the packet as if it had come from the original source (no second ICRC check: the
//!   owner did it). A relay datagram that does not decode is dropped and counted
//!   (`NetStats::bad_relay`). The relay's answers go out from the process's own socket
//!   straight to the peer's port 4791.
//!
//! Trust: a relay datagram is believed on its source address (this host's address, port
//! 4791) alone, which is not authentication. Whoever can send from there — the owning
//! rverbs process, a process of the namespace (of any user) that binds the port while no
//! rverbs process holds it, a sender forging its source address — can make a packet look
//! as if it came from any peer. That is no more than RoCEv2 allows without the relay: any
//! host of the network can send a packet with any source address and a right ICRC (a
//! checksum, not a secret). Processes of the same user, which already map each other's
//! shared segments, gain nothing by it.
//!
//! Takeover: when the owner exits, its port is free; a process with a socket that does not
//! own its address's port takes it over ([`Net::take_over`]): its progress thread tries to
//! bind `address:4791` again every [`TAKEOVER_PERIOD`] (500 ms) while some socket is not
//! the owner, and at once when a peer it watches dies (`progress::watch_peer`; the owner
//! is one only if this process reached it, so mostly the timer finds the port free). Cost
//! while not the owner: one progress-thread wake-up per period and, per such address, one
//! failed `bind` (a socket, a bind, a close: microseconds); nothing once every port is
//! this process's. `bind` is atomic: of several processes trying at once, or the old owner
//! restarting, exactly one gets the port, and the others keep sending from their own
//! ports and receive through it. The winner's new socket is added to the progress
//! thread's wait (`progress::watch_net_fd`) and is an owner like any: it receives,
//! checks, delivers UD for the other processes and relays RC/UC to their published ports,
//! from `address:4791`, so their sockets take its relays as they took the old owner's.
//! The process keeps *sending* from its old socket (RC connections already running keep
//! their source port, the send path stays lock-free over the sockets bound at start, and
//! peers answer to 4791, which now reaches the new socket); the old socket stays polled
//! (only stray datagrams reach it) and its published port stays in the endpoint header
//! (nobody relays to the owner itself). Until the takeover, for up to a period, the
//! others' QPs are unreachable from the network on that address, which RC's retransmits
//! cover when it is shorter than the requester's timeout × retry count.
//!
//! Limits of this slice: no link-local GIDs; an address beyond the endpoint header's table
//! of ports (32 addresses) is not relayed to; a forked child that keeps the owner's socket
//! open keeps the port from the others after the owner exits.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use std::time::{Duration, Instant};

use rverbs_proto::fault::{Corrupt, FaultConfig, Injector};
use rverbs_proto::pcap::{self, PcapWriter};
use rverbs_proto::rc::{Request, Responder};
use rverbs_proto::wire::icrc;
use rverbs_proto::wire::roce::{Packet, Repr};
use rverbs_proto::wire::{Operation, Transport};

use rverbs_proto::verbs::QpType;

use super::grh;
use super::host::{deliver_ud, ud_target, UdMessage, UdTarget};
use crate::engine::Engine;
use crate::gid::{Gid, GidEntry};
use crate::limits;
use crate::mr::Source;
use crate::shm::registry::Registry;
use crate::table::endpoint_of;

/// The most datagrams one GSO train carries (the kernel's `UDP_MAX_SEGMENTS` of 6.1).
const TRAIN_PACKETS: usize = 64;

/// The most bytes one GSO train carries (a UDP datagram's payload limit, less room).
const TRAIN_BYTES: usize = 60 * 1024;

/// How many packet lengths' IPv4 ID bases a receiving thread keeps (`icrc_id`).
const ID_BASES: usize = 4;

/// The socket buffer sizes asked for (bytes).
const RECV_BUFFER: usize = 4 << 20;

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_PORT: u16 = 4791;

/// `RVERBS_PCAP=file`: every datagram sent and received, IPv4 and IPv6, as a pcap file of
/// raw IP records (`LINKTYPE_RAW`, both versions in one file) whose IP and UDP headers are
/// rebuilt around the RoCEv2 payload (`rverbs_proto::pcap`; tshark decodes it with
/// `-d udp.port==4791,infiniband`).
struct Trace {
    out: Mutex<PcapWriter<std::fs::File>>,
}

impl Trace {
    fn open() -> Option<Arc<Trace>> {
        Trace::create(std::path::Path::new(&std::env::var_os("RVERBS_PCAP")?))
    }

    /// A trace writing to a new file at `path`; `None` (logged) if it cannot be created.
    fn create(path: &std::path::Path) -> Option<Arc<Trace>> {
        let file = std::fs::File::create(path)
            .map_err(|err| tracing::warn!(path = %path.display(), %err, "RVERBS_PCAP: cannot create"))
            .ok()?;
        let out = PcapWriter::new(file, pcap::LINKTYPE_RAW).ok()?;
        Some(Arc::new(Trace { out: Mutex::new(out) }))
    }

    /// Records one datagram from `from` to `to`, with IPv4 Identification `id` (IPv6 has
    /// none: `id` is ignored).
    ///
    /// Rule: the headers a socket sender puts on it (docs/rocev2-wire.md §1.1, §2.5): IPv4 DF,
    /// TTL 64; IPv6 traffic class 0, flow label 0, hop limit 64, a computed UDP checksum.
    /// The masked fields (TTL, hop limit, class, flow) are not what a receiver saw, but the
    /// ICRC does not cover them, so every record's ICRC checks from the record alone.
    fn record(&self, from: SocketAddr, to: SocketAddr, id: u16, udp_payload: &[u8]) {
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        // The file is unbuffered: every record is on disk when the call returns, however
        // the process ends.
        let _ = match (from.ip(), to.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let hdr = pcap::Ipv4Udp { src, dst, src_port: from.port(), dst_port: to.port(), id, ttl: 64 };
                self.out.lock().expect("pcap").write_ipv4_udp(ts, &hdr, udp_payload)
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let hdr = pcap::Ipv6Udp {
                    src,
                    dst,
                    src_port: from.port(),
                    dst_port: to.port(),
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                };
                self.out.lock().expect("pcap").write_ipv6_udp(ts, &hdr, udp_payload)
            }
            // Never sent (`seal` refuses mixed families) nor received on one socket.
            _ => return,
        };
    }
}

/// A datagram on its way out, as the fault injector holds it.
#[derive(Clone)]
struct Datagram {
    from: IpAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

impl Corrupt for Datagram {
    fn corrupt(&mut self, random: u64) {
        self.bytes.corrupt(random);
    }
}

/// The deterministic fault injector on the send path of every socket of this process:
/// set from `RVERBS_FAULTS=spec` (`rverbs_proto::fault::FaultConfig::parse`) at start, and
/// at any time by [`crate::Context::set_network_faults`]. A packet it holds back (delay,
/// reorder) leaves when due, from the progress thread.
struct Faults {
    /// Whether an injector is set (the send path's one check when none is).
    on: std::sync::atomic::AtomicBool,
    inj: Mutex<Option<Injector<Datagram>>>,
}

impl Faults {
    /// No injector.
    fn none() -> Faults {
        Faults { on: std::sync::atomic::AtomicBool::new(false), inj: Mutex::new(None) }
    }

    fn from_env() -> Faults {
        let f = Faults::none();
        let Ok(spec) = std::env::var("RVERBS_FAULTS") else { return f };
        match FaultConfig::parse(&spec) {
            Ok(cfg) => {
                if !cfg.is_none() {
                    tracing::info!(?cfg, "RVERBS_FAULTS: injecting faults on the RoCEv2 send path");
                }
                f.set(cfg);
            }
            Err(err) => tracing::warn!(%err, "RVERBS_FAULTS ignored"),
        }
        f
    }

    /// Replaces the injector by one with `cfg` (none if `cfg` injects nothing); returns
    /// what the old one still held back, to be sent now.
    fn set(&self, cfg: FaultConfig) -> Vec<Datagram> {
        let mut inj = self.inj.lock().expect("fault injector");
        let mut held = Vec::new();
        if let Some(old) = inj.as_mut() {
            while let Some(d) = old.pop_due(Instant::now() + std::time::Duration::from_secs(3600)) {
                held.push(d);
            }
        }
        *inj = (!cfg.is_none()).then(|| Injector::new(cfg));
        self.on.store(inj.is_some(), Ordering::Release);
        held
    }

    fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }
}

/// One socket, for one local IP address.
pub(crate) struct NetSock {
    pub(crate) ip: IpAddr,
    /// The bound port: 4791 if this process owns the address's RoCEv2 port, else an
    /// ephemeral one to send from (any port in tests).
    port: u16,
    /// The port the address's owner receives on, and relays from: 4791 (another in
    /// tests). `port == owner_port`: this socket is the owner.
    owner_port: u16,
    pub(crate) gid: Gid,
    /// The largest IB MTU the address's link carries (bytes): its netdev's MTU less the
    /// RoCEv2 headers, as rxe derives a port's active MTU (docs/rocev2-wire.md §1.6).
    pub(crate) link_mtu: u32,
    sock: UdpSocket,
    trace: Option<Arc<Trace>>,
    /// Whether batches may go out as GSO trains ([`NetSock::transmit_all`]); cleared for
    /// good the first time the kernel refuses one (a route without checksum offload).
    gso: std::sync::atomic::AtomicBool,
}

/// The largest IB MTU (bytes) whose packets fit a link of `netdev_mtu` bytes
/// ([`limits::ib_mtu_for_link`], rxe `eth_mtu_int_to_enum`); 4096 when the MTU is unknown.
pub(crate) fn ib_mtu_for_link(netdev_mtu: Option<u32>) -> u32 {
    netdev_mtu.map_or(limits::MAX_MTU, limits::ib_mtu_for_link).bytes()
}

/// The MTU of the interface with index `ifindex`, in this process's network namespace.
fn netdev_mtu(sock: &UdpSocket, ifindex: u32) -> Option<u32> {
    let name = rustix::net::netdevice::index_to_name(sock, ifindex).ok()?;
    crate::sys::if_mtu(&name)
}

/// What the receive path dropped, by reason (for tests and diagnostics).
#[derive(Default)]
pub(crate) struct NetStats {
    /// Packets that did not parse as RoCEv2.
    pub(crate) malformed: AtomicU64,
    /// Packets whose ICRC fits no IPv4 Identification.
    pub(crate) bad_icrc: AtomicU64,
    /// Packets for a transport or QP this process does not serve.
    pub(crate) unserved: AtomicU64,
    /// Packets delivered to a QP's responder.
    pub(crate) delivered: AtomicU64,
    /// RC/UC packets relayed to the process of their QP (by the owner of the port).
    pub(crate) relayed: AtomicU64,
    /// Relay datagrams (from the owner of the port) that did not decode, or whose packet
    /// did not parse.
    pub(crate) bad_relay: AtomicU64,
}

/// The sockets of this process and the receive side's state.
pub(crate) struct Net {
    socks: Vec<NetSock>,
    pub(crate) stats: NetStats,
    /// The core's UD responder machine, reconfigured per destination QP (the receive path
    /// runs on the progress thread only; the lock is never contended).
    pub(crate) ud_responder: Mutex<Option<Responder>>,
    faults: Faults,
    /// Held while a thread receives (the progress thread, or an application thread that
    /// polls an empty CQ, `receive_now`; on a multicast group's socket too,
    /// `super::mcast_net`): packets of a connection are delivered in the order they
    /// arrived.
    pub(crate) rx: Mutex<()>,
    /// The network namespace the sockets are in ([`netns_id`]).
    netns: u64,
    /// Per socket of `socks` (same index) that does not own its address's RoCEv2 port:
    /// the socket bound to that port once this process took it over from an owner that
    /// exited ([`Net::take_over`]). Set once, then read without a lock.
    taken: Vec<OnceLock<NetSock>>,
    /// When the next takeover attempt is due; `None` once every address's port is this
    /// process's.
    next_takeover: Mutex<Option<Instant>>,
    /// The multicast groups this process receives from the network, and its multicast
    /// sends (`super::mcast_net`).
    pub(crate) mcast: super::mcast_net::McastNet,
}

/// How often a process with a socket that does not own its address's RoCEv2 port tries
/// to bind that port (module docs, "Takeover").
pub(crate) const TAKEOVER_PERIOD: Duration = Duration::from_millis(500);

/// The identity of this process's network namespace (the inode of `/proc/self/ns/net`; 0
/// if it cannot be read): a relay goes only to a port of the owner's namespace.
fn netns_id() -> u64 {
    rustix::fs::stat("/proc/self/ns/net").map_or(0, |st| st.st_ino)
}

impl Net {
    /// Binds `address:4791` for the address of each GID of `gids` (loopback and IPv6
    /// link-local excluded), or, where another process owns that port, `address:0` to send
    /// from. `None` when no socket could be bound or `RVERBS_NET=off`.
    pub(crate) fn open(gids: &[GidEntry]) -> Option<Net> {
        if crate::config::is_off(std::env::var_os("RVERBS_NET").as_deref()) {
            return None;
        }
        let mut socks = Vec::new();
        let trace = Trace::open();
        for e in gids {
            let ip = e.gid.to_ip();
            // Link-local IPv6 addresses need a scope (an interface) to be reached: not served.
            let link_local = matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local());
            if ip.is_loopback() || link_local || socks.iter().any(|s: &NetSock| s.ip == ip) {
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
                Ok(sock) => {
                    let link_mtu = ib_mtu_for_link(netdev_mtu(&sock.sock, e.ifindex));
                    socks.push(NetSock { trace: trace.clone(), link_mtu, ..sock })
                }
                Err(err) => tracing::warn!(%ip, %err, "no RoCEv2 socket for this address"),
            }
        }
        let mcast = super::mcast_net::McastNet::new(gids, &socks);
        (!socks.is_empty()).then(|| Net { mcast, ..Net::new(socks, Faults::from_env(), Instant::now()) })
    }

    /// A transport with one socket on 127.0.0.1 and one on ::1 (ephemeral ports), whose
    /// multicast groups are joined on the loopback interface (for tests).
    #[cfg(test)]
    pub(crate) fn loopback_for_tests() -> Net {
        use super::mcast_net::{Iface, McastNet};
        let lo = rustix::net::netdevice::name_to_index(UdpSocket::bind("127.0.0.1:0").unwrap(), "lo").unwrap();
        let ips = [IpAddr::from(std::net::Ipv4Addr::LOCALHOST), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)];
        let socks: Vec<NetSock> = ips.iter().map(|ip| NetSock::bind(*ip, 0, Gid::from_ip(*ip)).unwrap()).collect();
        let mcast = McastNet::with_ifaces(ips.iter().map(|ip| Iface { ip: *ip, ifindex: lo }).collect());
        Net { mcast, ..Net::new(socks, Faults::none(), Instant::now()) }
    }

    /// The network transport of sockets `socks`, with fault injector `faults`; created at
    /// `now` (the first takeover attempt is one period later).
    fn new(socks: Vec<NetSock>, faults: Faults, now: Instant) -> Net {
        let taken = socks.iter().map(|_| OnceLock::new()).collect();
        let next_takeover = socks.iter().any(|s| !s.owns_port()).then_some(now + TAKEOVER_PERIOD);
        Net {
            socks,
            stats: NetStats::default(),
            ud_responder: Mutex::new(None),
            faults,
            rx: Mutex::new(()),
            netns: netns_id(),
            taken,
            next_takeover: Mutex::new(next_takeover),
            mcast: Default::default(),
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
        if !sock.seal(to, packet) {
            return;
        }
        let now = Instant::now();
        let mut guard = self.faults.inj.lock().expect("fault injector");
        let Some(inj) = guard.as_mut() else {
            // Switched off since the check.
            sock.transmit(to, packet);
            return;
        };
        inj.send(now, Datagram { from: sock.ip, to, bytes: packet.to_vec() });
        self.release(inj, now);
        if inj.poll_timeout().is_some() {
            // Held back: the progress thread sends it when due.
            crate::progress::wake();
        }
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

    /// Sends what the injector holds that is due, each from the socket it was sent on.
    fn release(&self, inj: &mut Injector<Datagram>, now: Instant) {
        while let Some(d) = inj.pop_due(now) {
            if let Some(s) = self.socks.iter().find(|s| s.ip == d.from) {
                s.transmit(d.to, &d.bytes);
            }
        }
    }

    /// When the transport next needs to run without a readable socket: the fault
    /// injector releases a held-back packet, or a takeover attempt is due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let held = if self.faults.is_on() {
            self.faults.inj.lock().expect("fault injector").as_ref().and_then(|i| i.poll_timeout())
        } else {
            None
        };
        let takeover = *self.next_takeover.lock().expect("takeover deadline");
        match (held, takeover) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sends the held-back packets that are due.
    fn release_due(&self, now: Instant) {
        if let Some(inj) = self.faults.inj.lock().expect("fault injector").as_mut() {
            self.release(inj, now);
        }
    }

    /// Puts a new fault injector with `cfg` on the send path of every socket of this
    /// process (`FaultConfig::NONE`: none); what the previous one held back is sent now.
    pub(crate) fn set_faults(&self, cfg: FaultConfig) {
        for d in self.faults.set(cfg) {
            if let Some(s) = self.socks.iter().find(|s| s.ip == d.from) {
                s.transmit(d.to, &d.bytes);
            }
        }
        if !cfg.is_none() {
            tracing::info!(?cfg, "injecting faults on the RoCEv2 send path");
        }
        crate::progress::wake();
    }

    /// If a takeover attempt is due at `now`: tries to bind the RoCEv2 port of each
    /// address whose port this process does not own yet ([`NetSock::take_over`]), and
    /// returns the receive indices ([`Net::rx_sock`]) of the sockets that now own one
    /// (the caller has the progress thread wait on them). The next attempt is due one
    /// [`TAKEOVER_PERIOD`] later, or never once every port is this process's.
    ///
    /// Rule: `bind` is atomic, so of several processes trying at once (or an exited
    /// owner restarting) exactly one gets the port; the others keep their ephemeral
    /// sockets, receive through the new owner, and keep trying.
    pub(crate) fn take_over(&self, now: Instant) -> Vec<usize> {
        let mut next = self.next_takeover.lock().expect("takeover deadline");
        if next.is_none_or(|at| at > now) {
            return Vec::new();
        }
        let mut got = Vec::new();
        for (i, s) in self.socks.iter().enumerate() {
            if s.owns_port() || self.taken[i].get().is_some() {
                continue;
            }
            match s.take_over() {
                Ok(owner) => {
                    tracing::info!(ip = %s.ip, port = owner.port, "took over the RoCEv2 port: its owner exited");
                    let _ = self.taken[i].set(owner);
                    got.push(self.socks.len() + i);
                }
                Err(err) => tracing::trace!(ip = %s.ip, %err, "RoCEv2 port still owned"),
            }
        }
        let all = self.socks.iter().enumerate().all(|(i, s)| s.owns_port() || self.taken[i].get().is_some());
        *next = (!all).then_some(now + TAKEOVER_PERIOD);
        got
    }

    /// A peer process died, which may have owned an address's RoCEv2 port: the next
    /// takeover attempt is due at once (if one is pending at all).
    pub(crate) fn peer_died(&self) {
        let mut next = self.next_takeover.lock().expect("takeover deadline");
        if next.is_some() {
            *next = Some(Instant::now());
        }
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
            Some(i) => self.taken.get(i)?.get(),
        }
    }
}

impl NetSock {
    /// A socket bound to `ip:port` for local GID `gid`: unconnected, path MTU discovery
    /// "do" (IPv4: ID 0 with DF; both: no fragmentation, an oversize send fails), non-blocking.
    fn bind(ip: IpAddr, port: u16, gid: Gid) -> std::io::Result<NetSock> {
        use rustix::net::sockopt;
        let sock = UdpSocket::bind(SocketAddr::new(ip, port))?;
        match ip {
            IpAddr::V4(_) => sockopt::set_ip_mtu_discover(&sock, sockopt::Ipv4PathMtuDiscovery::DO)?,
            IpAddr::V6(_) => sockopt::set_ipv6_mtu_discover(&sock, sockopt::Ipv6PathMtuDiscovery::DO)?,
        }
        NetSock::wrap(sock, ip, gid)
    }

    /// The socket `sock`, bound to `ip`, for GID `gid`: its buffers sized, non-blocking,
    /// receiving trains whole (`UDP_GRO`).
    fn wrap(sock: UdpSocket, ip: IpAddr, gid: Gid) -> std::io::Result<NetSock> {
        use rustix::net::sockopt;
        // A window of up to 512 unacknowledged packets (`net::WINDOW`; rxe's is 128,
        // docs/rocev2-wire.md §3.1) from each of several connections arrives in bursts: a receive buffer of the default size (about 90
        // datagrams) overflows and every overflow is a go-back-N. Ask for 4 MiB (the kernel
        // caps it at net.core.rmem_max; best effort).
        let _ = sockopt::set_socket_recv_buffer_size(&sock, RECV_BUFFER);
        let _ = sockopt::set_socket_send_buffer_size(&sock, RECV_BUFFER);
        sock.set_nonblocking(true)?;
        let port = sock.local_addr()?.port();
        // Trains of datagrams (a peer's GSO, or what the kernel coalesced) come up whole,
        // one receive for many packets (`receive` cuts them apart again).
        crate::sys::enable_udp_gro(sock.as_fd());
        let gso = std::sync::atomic::AtomicBool::new(true);
        Ok(NetSock { ip, port, owner_port: ROCE_PORT, gid, link_mtu: 4096, sock, trace: None, gso })
    }

    /// A socket that receives what is sent to `sock`'s address (a multicast group's,
    /// `super::mcast_net`) as the socket of GID `gid`, which owns that port (it takes no
    /// relays), traced as this one is.
    pub(crate) fn receiver(&self, sock: UdpSocket, gid: Gid) -> std::io::Result<NetSock> {
        let local = sock.local_addr()?;
        let s = NetSock::wrap(sock, local.ip(), gid)?;
        Ok(NetSock { owner_port: s.port, trace: self.trace.clone(), ..s })
    }

    /// Whether this socket owns its address's RoCEv2 port (receives on it, delivers UD
    /// for the other processes and relays their RC/UC packets).
    fn owns_port(&self) -> bool {
        self.port == self.owner_port
    }

    /// A new socket bound to the owner's port of this socket's address, for the same GID
    /// and trace: the port is free (its owner exited). Fails (`EADDRINUSE`) while a
    /// process holds it.
    fn take_over(&self) -> std::io::Result<NetSock> {
        let sock = NetSock::bind(self.ip, self.owner_port, self.gid)?;
        Ok(NetSock { owner_port: self.owner_port, trace: self.trace.clone(), ..sock })
    }

    /// The socket's descriptor, for the progress thread's epoll.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Sends the RoCEv2 packet `packet` (BTH to ICRC; the ICRC's 4 bytes last, written
    /// here) to `dst`.
    ///
    /// Rule: docs/rocev2-wire.md §2.5: over IPv4 the ICRC covers a pseudo header with ID 0 and
    /// DF, which is what the kernel sends from this socket; IPv6 has no ID.
    fn send_to(&self, dst: SocketAddr, packet: &mut [u8]) {
        if self.seal(dst, packet) {
            self.transmit(dst, packet);
        }
    }

    /// Writes the ICRC of `packet` as sent from this socket to `dst`; `false` when `dst`
    /// is of the other address family (no route, as for rxe).
    fn seal(&self, dst: SocketAddr, packet: &mut [u8]) -> bool {
        self.seal_with_id(dst, packet, 0)
    }

    /// As [`NetSock::seal`] for a packet that leaves with IPv4 Identification `id`
    /// (ignored for IPv6, which has none).
    fn seal_with_id(&self, dst: SocketAddr, packet: &mut [u8], id: u16) -> bool {
        let n = packet.len();
        let body = &packet[..n - 4];
        let icrc = match (self.ip, dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(to)) => icrc::ipv4_pseudo_with_id(src, to, self.port, dst.port(), id, body),
            (IpAddr::V6(src), IpAddr::V6(to)) => icrc::compute_ipv6_pseudo(src, to, self.port, dst.port(), body),
            _ => return false,
        };
        packet[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        true
    }

    /// Puts one datagram on the wire (and into the trace).
    fn transmit(&self, dst: SocketAddr, packet: &[u8]) {
        if let Some(t) = &self.trace {
            t.record(SocketAddr::new(self.ip, self.port), dst, 0, packet);
        }
        if let Err(err) = self.sock.send_to(packet, dst) {
            // A datagram transport: a failed send is a lost packet, which the protocol
            // (RC retries; UD is unreliable) already handles.
            tracing::debug!(%dst, %err, "RoCEv2 send failed");
        }
    }

    /// Seals the packets `packets` (each BTH to ICRC) and puts them on the wire (and into
    /// the trace), with as few system calls as the kernel allows: consecutive packets of
    /// one size (a message's MIDDLE packets, say) go out as one GSO train (`UDP_SEGMENT`,
    /// udp(7)), up to [`TRAIN_PACKETS`] and [`TRAIN_BYTES`], the trains of a batch in one
    /// `sendmmsg`; what the kernel refuses is lost, as a failed [`NetSock::transmit`].
    ///
    /// Rule (docs/rocev2-wire.md §2.5): over IPv4 the ICRC covers the IPv4 Identification. The
    /// kernel cuts a train into datagrams that carry the train's ID plus their index
    /// (`inet_gso_segment`), and the train of an unconnected `IP_PMTUDISC_DO` socket has
    /// ID 0 (`ip_select_ident_segs`), so packet `k` of a train is sealed with ID `k`; a
    /// single datagram has ID 0. A route that cannot take GSO (no checksum offload: the
    /// kernel answers `EIO`) turns trains off for this socket, and the rest of the batch
    /// goes datagram by datagram, sealed again with ID 0.
    fn transmit_all(&self, dst: SocketAddr, packets: &mut [Vec<u8>]) {
        use std::sync::atomic::Ordering::Relaxed;
        let gso = self.gso.load(Relaxed);
        let mut trains: smallvec::SmallVec<[std::ops::Range<usize>; 64]> = smallvec::SmallVec::new();
        let mut i = 0;
        while i < packets.len() {
            let size = packets[i].len();
            let mut end = i + 1;
            let mut bytes = size;
            if gso {
                while end < packets.len() && end - i < TRAIN_PACKETS && bytes + packets[end].len() <= TRAIN_BYTES {
                    let next = packets[end].len();
                    if next > size {
                        break;
                    }
                    bytes += next;
                    end += 1;
                    if next < size {
                        break; // a shorter datagram ends a train
                    }
                }
            }
            for (k, p) in packets[i..end].iter_mut().enumerate() {
                if !self.seal_with_id(dst, p, k as u16) {
                    return;
                }
            }
            trains.push(i..end);
            i = end;
        }
        let mut done = 0;
        while done < trains.len() {
            let sent = {
                let batch: smallvec::SmallVec<[&[Vec<u8>]; 64]> = trains[done..].iter().map(|r| &packets[r.clone()]).collect();
                crate::sys::sendmmsg_trains(self.sock.as_fd(), dst, &batch)
            };
            match sent {
                Ok(0) => break,
                Ok(n) => {
                    // Into the trace what the kernel took, each with the ID it carries.
                    if let Some(t) = &self.trace {
                        for r in &trains[done..done + n] {
                            for (k, p) in packets[r.clone()].iter().enumerate() {
                                t.record(SocketAddr::new(self.ip, self.port), dst, k as u16, p);
                            }
                        }
                    }
                    done += n;
                }
                Err(err) if matches!(err.raw_os_error(), Some(libc::EIO | libc::EINVAL)) && trains[done].len() > 1 => {
                    tracing::info!(%dst, %err, "UDP GSO refused on this route: sending datagram by datagram");
                    self.gso.store(false, Relaxed);
                    let rest = trains[done].start;
                    for p in packets[rest..].iter_mut() {
                        if self.seal(dst, p) {
                            self.transmit(dst, p);
                        }
                    }
                    return;
                }
                Err(err) => {
                    // A datagram transport: unsent packets are lost packets, which the
                    // protocol already handles.
                    tracing::debug!(%dst, %err, unsent = trains.len() - done, "RoCEv2 sendmmsg failed");
                    break;
                }
            }
        }
    }

    /// Receives every datagram waiting, handing the checked packets to `deliver` in
    /// arrival order, in runs of up to [`RX_RUN`] (the packets of a train, or of several
    /// datagrams of one `recvmmsg`), each with its source address and the IPv4
    /// Identification it was sent with (0 for IPv6). A relay datagram from the owner of
    /// the port ([`NetSock::relayed`]) hands over the packet it carries, with the original
    /// source and ID, its ICRC not checked again.
    ///
    /// The datagrams are read up to [`RX_BATCH`] per system call (`recvmmsg`, into
    /// `batch`); a batch that comes back short means the socket's queue ran empty, so no
    /// further call is made to find it empty (a datagram that arrives meanwhile leaves the
    /// socket readable for the next wait).
    pub(crate) fn receive(&self, stats: &NetStats, batch: &mut RxBatch, mut deliver: impl FnMut(&[Checked<'_>])) {
        loop {
            let n = match batch.recv(self.sock.as_fd()) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    tracing::debug!(%err, "RoCEv2 receive failed");
                    return;
                }
            };
            // Sized to what arrived (a lone packet on the latency path allocates one entry,
            // not a whole run's).
            let packets: usize = (0..n)
                .filter_map(|i| Some((batch.get(i)?.1.len(), batch.segment_size(i))))
                .map(|(len, seg)| seg.map_or(1, |s| len.div_ceil(s)))
                .sum();
            let mut run: Vec<Checked<'_>> = Vec::with_capacity(packets.min(RX_RUN));
            let mut take = |c| {
                if let Some(c) = c {
                    run.push(c);
                    if run.len() == RX_RUN {
                        deliver(&run);
                        run.clear();
                    }
                }
            };
            for i in 0..n {
                let Some((from, datagram)) = batch.get(i) else { continue };
                for_each_segment(datagram, batch.segment_size(i), |d| take(self.check(stats, from, d)));
            }
            if !run.is_empty() {
                deliver(&run);
            }
            if n < RX_BATCH {
                return;
            }
        }
    }

    /// [`NetSock::receive`] a packet at a time (the tests' view).
    #[cfg(test)]
    pub(crate) fn receive_each(&self, stats: &NetStats, batch: &mut RxBatch, mut deliver: impl FnMut(SocketAddr, &Packet<&[u8]>, &Repr, u16)) {
        self.receive(stats, batch, |run| {
            for c in run {
                deliver(c.from, &c.packet, &c.repr, c.id);
            }
        });
    }

    /// Checks one datagram `datagram` from `from` ([`check_datagram`]; traced, drops
    /// counted): the packet, or `None` when it is dropped.
    fn check<'b>(&self, stats: &NetStats, from: SocketAddr, datagram: &'b [u8]) -> Option<Checked<'b>> {
        let r = check_datagram(self.rx_addr(), from, datagram);
        if let (Some(t), Some(seen)) = (&self.trace, r.seen) {
            t.record(seen.from, seen.to, seen.id, seen.bytes);
        }
        let counter = match r.verdict {
            Ok(c) => return Some(c),
            Err(RxDrop::RelayHeader) => {
                tracing::debug!(%from, "relay datagram dropped: malformed");
                &stats.bad_relay
            }
            Err(RxDrop::RelayedMalformed) => &stats.bad_relay,
            Err(RxDrop::Malformed) => &stats.malformed,
            Err(RxDrop::BadIcrc) => {
                tracing::debug!(%from, "RoCEv2 packet dropped: bad ICRC");
                &stats.bad_icrc
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Where this socket receives ([`check_datagram`]).
    fn rx_addr(&self) -> RxAddr {
        RxAddr { ip: self.ip, port: self.port, owner_port: self.owner_port }
    }

    /// Relays the checked packet `packet`, which came from `src` with IPv4 ID `id`, to
    /// port `port` of this socket's address (this socket owns the address's RoCEv2 port).
    /// Returns whether it was sent.
    fn relay_to(&self, port: u16, src: SocketAddr, id: u16, packet: &[u8]) -> bool {
        thread_local! {
            static OUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        OUT.with_borrow_mut(|out| {
            relay::encode(src, id, packet, out);
            let to = SocketAddr::new(self.ip, port);
            self.sock.send_to(out, to).map_err(|err| tracing::debug!(%to, %err, "relay failed")).is_ok()
        })
    }
}

/// The datagrams of a received buffer: a train (GSO from the peer, or coalesced by the
/// kernel; `segment_size` from `UDP_GRO`) one by one, anything else as one datagram (an
/// empty one too: it is counted as malformed).
pub(crate) fn for_each_segment<'d>(datagram: &'d [u8], segment_size: Option<usize>, f: impl FnMut(&'d [u8])) {
    match segment_size {
        Some(size) if size > 0 && size < datagram.len() => datagram.chunks(size).for_each(f),
        _ => std::iter::once(datagram).for_each(f),
    }
}

/// Where a socket receives: its address and bound port, and the port the address's
/// owner receives on (`port == owner_port`: this socket is the owner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxAddr {
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    pub(crate) owner_port: u16,
}

impl RxAddr {
    /// Whether this socket owns its address's RoCEv2 port.
    pub(crate) fn owns_port(&self) -> bool {
        self.port == self.owner_port
    }
}

/// Why [`check_datagram`] dropped a datagram (each counted in [`NetStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxDrop {
    /// A relay datagram from the owner whose header does not decode (`bad_relay`).
    RelayHeader,
    /// A relay datagram whose packet does not parse (`bad_relay`).
    RelayedMalformed,
    /// A datagram that is not a RoCEv2 packet (`malformed`).
    Malformed,
    /// A RoCEv2 packet whose ICRC is wrong under every IPv4 Identification (`bad_icrc`).
    BadIcrc,
}

/// What the packet trace records of a datagram: where it came from and was sent to (a
/// relayed packet: its original source, and the owner's port), the ID its ICRC was
/// checked with (0 when it did not check), and the packet's bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen<'b> {
    pub(crate) from: SocketAddr,
    pub(crate) to: SocketAddr,
    pub(crate) id: u16,
    pub(crate) bytes: &'b [u8],
}

/// The outcome of [`check_datagram`].
pub(crate) struct Received<'b> {
    /// What the trace records (`None`: a relay datagram whose header does not decode).
    pub(crate) seen: Option<Seen<'b>>,
    pub(crate) verdict: Result<Checked<'b>, RxDrop>,
}

/// The receive checks of one datagram `datagram` from `from` arriving at `rx`, before
/// the protocol core, without I/O: the relay header ([`relay`]; only a socket that does
/// not own its address's port takes one, and only from that port's owner, whose ICRC
/// check and ID it carries; a relay header from elsewhere does not parse as RoCEv2: its
/// first byte is an opcode nobody serves), the packet's parse, and the ICRC under the
/// IPv4 Identification it was sent with ([`icrc_id`]).
pub(crate) fn check_datagram(rx: RxAddr, from: SocketAddr, datagram: &[u8]) -> Received<'_> {
    let from_owner = from.ip() == rx.ip && from.port() == rx.owner_port;
    let relayed = !rx.owns_port() && from_owner && datagram.starts_with(&relay::MAGIC);
    // `to`: where the packet was sent (a relayed one: to the owner's port).
    let (from, to, bytes, relayed_id) = if relayed {
        match relay::decode(datagram) {
            Some(r) => (r.src, SocketAddr::new(rx.ip, rx.owner_port), r.packet, Some(r.id)),
            None => return Received { seen: None, verdict: Err(RxDrop::RelayHeader) },
        }
    } else {
        (from, SocketAddr::new(rx.ip, rx.port), datagram, None)
    };
    let dropped = if relayed_id.is_some() { RxDrop::RelayedMalformed } else { RxDrop::Malformed };
    let packet = Packet::new_checked(bytes);
    let checked = match relayed_id {
        // The owner checked the ICRC and found the ID.
        Some(id) => Some(id),
        None => packet.as_ref().ok().and_then(|p| icrc_id(from, to, p)),
    };
    let seen = Some(Seen { from, to, id: checked.unwrap_or(0), bytes });
    let verdict = match packet {
        Err(_) => Err(dropped),
        Ok(packet) => match Repr::parse(&packet) {
            Err(_) => Err(dropped),
            Ok(repr) => match checked {
                None => Err(RxDrop::BadIcrc),
                Some(id) => Ok(Checked { from, id, packet, repr }),
            },
        },
    };
    Received { seen, verdict }
}

/// Datagrams one `recvmmsg` takes at most ([`NetSock::receive`]).
pub(crate) const RX_BATCH: usize = 32;

/// Checked packets handed on together at most ([`NetSock::receive`]): a train of 64
/// MTU-sized packets (one GSO send of the requester) is one run.
pub(crate) const RX_RUN: usize = 64;

/// A packet [`NetSock::receive`] checked: where it came from (for a relayed packet, its
/// original source), the IPv4 Identification it was sent with, its bytes and headers.
pub(crate) struct Checked<'a> {
    pub(crate) from: SocketAddr,
    pub(crate) id: u16,
    pub(crate) packet: Packet<&'a [u8]>,
    pub(crate) repr: Repr,
}

/// Bytes of each receive buffer: any UDP payload fits (at most 65 527 bytes without IPv6
/// jumbograms), so no datagram is ever truncated, as with one `recv_from` into 64 KiB.
const RX_DATAGRAM: usize = 1 << 16;

/// The buffers a receiving thread (the progress thread, an application thread in
/// [`receive_now`]) reads datagrams into, one set per thread: [`RX_BATCH`] of
/// [`RX_DATAGRAM`] bytes, 2 MiB allocated zeroed (a block that large is usually mapped
/// fresh, its pages resident only once a datagram is written into them), with each one's
/// source address (`sys::DatagramBatch`: `recvmmsg`).
pub(crate) type RxBatch = crate::sys::DatagramBatch<RX_BATCH, RX_DATAGRAM>;

/// The relay header the owner of an address's RoCEv2 port puts before a packet it passes
/// to another process of the host (module docs, "Demultiplexing"). 28 bytes, then the
/// packet as received (BTH to ICRC):
///
/// ```text
/// 0..4   magic ff 'r' 'l' 'y' (0xff: a BTH opcode nobody serves)
/// 4      version (1)
/// 5      family of the original source: 4 or 6
/// 6..8   original source UDP port, big-endian
/// 8..10  the IPv4 Identification the ICRC was checked with, big-endian (IPv6: 0)
/// 10..12 zero
/// 12..28 original source address (IPv4: 4 bytes, then 12 zero bytes)
/// ```
pub(crate) mod relay {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    /// The first bytes of every relay datagram.
    pub(crate) const MAGIC: [u8; 4] = [0xff, b'r', b'l', b'y'];
    /// The layout version this code writes and reads.
    pub(crate) const VERSION: u8 = 1;
    /// Bytes of the header.
    pub(crate) const LEN: usize = 28;

    /// A decoded relay datagram.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) struct Relay<'b> {
        /// Where the packet came from.
        pub(crate) src: SocketAddr,
        /// The IPv4 Identification its ICRC was checked with (IPv6: 0).
        pub(crate) id: u16,
        /// The packet, BTH to ICRC.
        pub(crate) packet: &'b [u8],
    }

    /// Writes into `out` the relay datagram of `packet` from `src`, checked with ID `id`.
    pub(crate) fn encode(src: SocketAddr, id: u16, packet: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&MAGIC);
        let (family, addr, id) = match src.ip() {
            IpAddr::V4(v4) => {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(&v4.octets());
                (4u8, a, id)
            }
            IpAddr::V6(v6) => (6u8, v6.octets(), 0),
        };
        out.extend_from_slice(&[VERSION, family]);
        out.extend_from_slice(&src.port().to_be_bytes());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&addr);
        out.extend_from_slice(packet);
    }

    /// Decodes a relay datagram; `None` if it is not one this code wrote: shorter than
    /// the header, another magic or version, an unknown family, non-zero reserved bytes
    /// (or IPv4 address padding), or an IPv6 source with an ID.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Relay<'_>> {
        let (h, packet) = (bytes.get(..LEN)?, &bytes[LEN..]);
        if h[..4] != MAGIC || h[4] != VERSION || h[10..12] != [0, 0] {
            return None;
        }
        let port = u16::from_be_bytes([h[6], h[7]]);
        let id = u16::from_be_bytes([h[8], h[9]]);
        let addr: [u8; 16] = h[12..28].try_into().ok()?;
        let ip = match h[5] {
            4 if addr[4..] == [0; 12] => IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3])),
            6 if id == 0 => IpAddr::V6(Ipv6Addr::from(addr)),
            _ => return None,
        };
        Some(Relay { src: SocketAddr::new(ip, port), id, packet })
    }
}

/// Whether the packet's ICRC is right, and under which IPv4 Identification: 0 (what rverbs
/// and any `IP_PMTUDISC_DO` sender use), else the one solved from the ICRC (docs/rocev2-wire.md
/// §2.5); IPv6 has no ID (0). `None`: corrupted.
fn icrc_id(from: SocketAddr, to: SocketAddr, packet: &Packet<&[u8]>) -> Option<u16> {
    let body = packet.without_icrc();
    let got = packet.icrc();
    match (from.ip(), to.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let zero = icrc::compute_ipv4_pseudo(src, dst, from.port(), to.port(), body);
            if zero == got {
                return Some(0);
            }
            // The ID's effect depends only on the packet's length: the bases of the last
            // few lengths met on this thread are kept (building one costs sixteen CRC
            // shifts, as much as the rest of the packet's handling; a peer with non-zero
            // IDs sends mostly packets of two or three lengths).
            thread_local! {
                static BASES: std::cell::RefCell<Vec<icrc::Ipv4IdBasis>> = const { std::cell::RefCell::new(Vec::new()) };
            }
            BASES.with_borrow_mut(|bases| {
                let at = match bases.iter().position(|b| b.roce_len() == body.len()) {
                    Some(i) => i,
                    None => {
                        if bases.len() == ID_BASES {
                            bases.remove(0);
                        }
                        bases.push(icrc::Ipv4IdBasis::new(body.len()));
                        bases.len() - 1
                    }
                };
                bases[at].solve(got ^ zero)
            })
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            (icrc::compute_ipv6_pseudo(src, dst, from.port(), to.port(), body) == got).then_some(0)
        }
        _ => None,
    }
}

/// The progress thread found socket `index` ([`Net::rx_sock`]) readable: receives and
/// delivers what waits.
pub(crate) fn readable(engine: &'static Engine, net: &Net, index: usize) {
    let _rx = net.rx.lock().expect("receive lock");
    receive_on(engine, net, index);
}

/// The progress thread's deadline ([`Net::poll_timeout`]) passed at `now`: sends the
/// held-back packets that are due, and tries to take over the ports this process does not
/// own if that is due; a socket that took one over is added to the progress thread's
/// wait (`progress::watch_net_fd`), and receives from then on.
pub(crate) fn handle_timeout(net: &Net, now: Instant) {
    net.release_due(now);
    for index in net.take_over(now) {
        if let Some(s) = net.rx_sock(index) {
            crate::progress::watch_net_fd(index, s.fd());
        }
    }
}

/// An application thread found its CQ empty while network connections exist
/// (`progress::receive_inline`): receives what waits on every socket, unless another
/// thread is receiving (which delivers it).
pub(crate) fn receive_now(engine: &'static Engine, net: &Net) {
    let Ok(_rx) = net.rx.try_lock() else { return };
    for index in 0..2 * net.socks().len() {
        receive_on(engine, net, index);
    }
}

/// Receives and delivers what waits on socket `index` (the caller holds `net.rx`).
fn receive_on(engine: &'static Engine, net: &Net, index: usize) {
    let Some(sock) = net.rx_sock(index) else { return };
    with_rx_batch(|buf| sock.receive(&net.stats, buf, |run| deliver_run(engine, net, sock, run)));
}

/// Runs `f` with this thread's receive buffers ([`RxBatch`], one set per thread).
pub(crate) fn with_rx_batch<R>(f: impl FnOnce(&mut RxBatch) -> R) -> R {
    thread_local! {
        static BUF: std::cell::RefCell<RxBatch> = std::cell::RefCell::new(RxBatch::new());
    }
    BUF.with_borrow_mut(f)
}

/// Delivers a run of checked packets, in order: a stretch of RC/UC requests for one QP
/// of this process from one address goes to its responder together
/// ([`super::net::handle_requests`]: one lookup per train), every other packet alone
/// ([`deliver`]).
fn deliver_run(engine: &'static Engine, net: &Net, sock: &NetSock, run: &[Checked<'_>]) {
    let mut rest = run;
    while let Some(c) = rest.first() {
        let Some(qpn) = own_request(engine, &c.repr) else {
            deliver(engine, net, sock, c.from, c.id, &c.packet, &c.repr);
            rest = &rest[1..];
            continue;
        };
        let src = c.from.ip();
        let n = rest.iter().take_while(|d| d.from.ip() == src && own_request(engine, &d.repr) == Some(qpn)).count();
        let taken = super::net::handle_requests(engine, net, &sock.gid, src, &rest[..n]);
        net.stats.delivered.fetch_add(taken as u64, Ordering::Relaxed);
        net.stats.unserved.fetch_add((n - taken) as u64, Ordering::Relaxed);
        rest = &rest[n..];
    }
}

/// The QP an RC/UC request is for, when that QP is this process's (the others are relayed
/// or answered by [`deliver`]).
fn own_request(engine: &Engine, repr: &Repr) -> Option<u32> {
    match route(engine.ep(), repr) {
        Route::Request { qpn } => Some(qpn),
        _ => None,
    }
}

/// Where a checked packet goes ([`route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A UD SEND_ONLY to QP1: a MAD, with the Q_Key its DETH names (0: none), for
    /// `super::gsi::deliver`.
    Mad { qkey: u32 },
    /// An RC/UC packet for a QP of another endpoint of this host: relayed to it.
    Relay { qpn: u32 },
    /// An RC/UC request for QP `qpn` of this endpoint: to its responder.
    Request { qpn: u32 },
    /// An RC/UC response for QP `qpn` of this endpoint: to its requester.
    Response { qpn: u32 },
    /// A UD SEND (with or without immediate) for QP `qpn`, with the DETH's Q_Key.
    Ud { qpn: u32, qkey: u32 },
    /// Nothing here serves it (counted as unserved).
    Unserved,
}

/// Where a checked packet goes, from its headers alone, in endpoint `ep` (rxe
/// `rxe_rcv`): the QP's number names its endpoint; QP1 takes only UD SEND_ONLY; other
/// UD QPs only UD SENDs with a DETH.
pub(crate) fn route(ep: u32, repr: &Repr) -> Route {
    let qpn = repr.bth.dest_qp;
    let operation = repr.bth.opcode.operation();
    match repr.bth.opcode.transport() {
        Transport::Ud if qpn == super::gsi::GSI_QPN => match operation {
            Some(Operation::SendOnly) => Route::Mad { qkey: repr.deth.map_or(0, |d| d.qkey) },
            _ => Route::Unserved,
        },
        Transport::Rc | Transport::Uc | Transport::Xrc if endpoint_of(qpn) != ep => Route::Relay { qpn },
        Transport::Rc | Transport::Uc | Transport::Xrc if repr.bth.opcode.is_request() => Route::Request { qpn },
        Transport::Rc | Transport::Uc | Transport::Xrc => Route::Response { qpn },
        Transport::Ud => match (operation, repr.deth) {
            (Some(Operation::SendOnly | Operation::SendOnlyWithImmediate), Some(deth)) => Route::Ud { qpn, qkey: deth.qkey },
            _ => Route::Unserved,
        },
        _ => Route::Unserved,
    }
}

/// Delivers one checked packet (rxe `rxe_rcv`: the destination QP must exist with the
/// packet's transport, accept requests and match the DETH's Q_Key; docs/rocev2-wire.md §3.5).
///
/// The QP may be of another process of this host (its number names its endpoint): the
/// process that owns the port delivers a UD message into that process's queues through
/// shared memory, as the same-host transport does, and relays an RC/UC packet to that
/// process's socket ([`relay_packet`]), so every process is reachable from the network.
fn deliver(engine: &'static Engine, net: &Net, sock: &NetSock, from: SocketAddr, id: u16, packet: &Packet<&[u8]>, repr: &Repr) {
    let unserved = || {
        net.stats.unserved.fetch_add(1, Ordering::Relaxed);
    };
    let src = from.ip();
    let (qpn, qkey) = match route(engine.ep(), repr) {
        Route::Mad { qkey } => {
            // A MAD for QP1: to the endpoint it is for (`super::gsi`).
            if super::gsi::deliver(engine, sock, from, qkey, packet.payload()) {
                net.stats.delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                unserved();
            }
            return;
        }
        Route::Relay { .. } => {
            if relay_packet(engine, net, sock, from, id, packet, repr) {
                net.stats.relayed.fetch_add(1, Ordering::Relaxed);
            } else {
                unserved();
            }
            return;
        }
        Route::Response { .. } => {
            // Connected QPs: responses to their requesters (requests went to their
            // responders in runs, `deliver_run`).
            if super::net::handle_response(engine, src, repr, packet.payload()) {
                net.stats.delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                unserved();
            }
            return;
        }
        Route::Request { .. } | Route::Unserved => return unserved(),
        Route::Ud { qpn, qkey } => (qpn, qkey),
    };
    let Some(target) = ud_target(engine, qpn, qkey) else { return unserved() };
    let request = Request::from_repr(repr, packet.payload());
    // docs/rocev2-wire.md §5.3: the receive's GRH area holds the packet's IP header.
    let header = grh::build(&Gid::from_ip(src), &sock.gid, 0, 64, 0, repr.payload_len, repr.immdt.is_some());
    let msg = UdMessage { request: &request, header: &header, data: Source::Bytes(packet.payload()), sl: 0 };
    let mut slot = net.ud_responder.lock().expect("UD responder");
    // rxe does not check a UD message's size on receive: anything up to the largest
    // MTU is taken (the sender's port kept it within its link).
    let mtu = limits::MAX_MTU.bytes();
    match target {
        UdTarget::Local(t) => deliver_ud(&t, &mut slot, Instant::now(), mtu, msg),
        UdTarget::Peer(t) => deliver_ud(&t, &mut slot, Instant::now(), mtu, msg),
    }
    net.stats.delivered.fetch_add(1, Ordering::Relaxed);
}

/// Relays the RC/UC packet `packet` (from `from`, checked with IPv4 ID `id`) for a QP of
/// another process of the host to that process: only the owner of the port relays, and
/// only to a live endpoint whose record shows an RC/UC QP of that number and which
/// published a port for the socket's address in this network namespace. Returns whether
/// it was sent.
fn relay_packet(engine: &'static Engine, net: &Net, sock: &NetSock, from: SocketAddr, id: u16, packet: &Packet<&[u8]>, repr: &Repr) -> bool {
    let qpn = repr.bth.dest_qp;
    let want = match repr.bth.opcode.transport() {
        Transport::Rc => QpType::Rc,
        // XRC requests are for target QPs, responses for initiators.
        Transport::Xrc if repr.bth.opcode.is_request() => QpType::XrcRecv,
        Transport::Xrc => QpType::XrcSend,
        _ => QpType::Uc,
    };
    if !sock.owns_port() {
        return false;
    }
    let Some(peer) = engine.reg.as_ref().and_then(|r| r.peer(endpoint_of(qpn)).ok()) else { return false };
    if !super::route::is_qp(peer.tables().qp(qpn), qpn, want) {
        return false;
    }
    let Some(port) = peer.net_port(net.netns, sock.ip) else { return false };
    sock.relay_to(port, from, id, packet.clone().into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use rverbs_proto::wire::{BthRepr, DethRepr, OpCode};

    fn ud_packet(payload: &[u8]) -> Vec<u8> {
        let bth = BthRepr {
            opcode: OpCode::UdSendOnly,
            solicited: false,
            migreq: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: false,
            psn: 7,
        };
        let mut repr = Repr::new(bth, payload.len());
        repr.deth = Some(DethRepr { qkey: 0x1111, src_qp: 0x34 });
        let mut buf = vec![0; repr.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        p.payload_mut().copy_from_slice(payload);
        buf
    }

    /// `Context::set_network_faults`: an injector set at run time drops what it should
    /// (drop = 100 %: nothing arrives), and `FaultConfig::NONE` takes it off again (the
    /// next packet arrives, and is the first: loopback keeps the order).
    /// docs/rocev2-wire.md §1.8: XRC packets go where RC's do — requests to the target
    /// QP's responder, responses to the initiator's requester, another endpoint's relayed.
    #[test]
    fn route_takes_xrc_packets_as_rc() {
        let mine = 5 << crate::table::LOCAL_BITS | 0x12;
        let theirs = 6 << crate::table::LOCAL_BITS | 0x12;
        let of = |opcode, dest_qp| {
            let bth = BthRepr { opcode, solicited: false, migreq: false, pad_count: 0, pkey: 0xffff, fecn: false, becn: false, dest_qp, ack_req: false, psn: 0 };
            route(5, &Repr::new(bth, 0))
        };
        for op in [OpCode::XrcSendOnly, OpCode::XrcRdmaWriteFirst, OpCode::XrcRdmaReadRequest, OpCode::XrcFetchAdd] {
            assert_eq!(of(op, mine), Route::Request { qpn: mine }, "{op:?}");
            assert_eq!(of(op, theirs), Route::Relay { qpn: theirs }, "{op:?}");
        }
        for op in [OpCode::XrcAcknowledge, OpCode::XrcRdmaReadResponseOnly, OpCode::XrcAtomicAcknowledge] {
            assert_eq!(of(op, mine), Route::Response { qpn: mine }, "{op:?}");
            assert_eq!(of(op, theirs), Route::Relay { qpn: theirs }, "{op:?}");
        }
    }

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

    /// rxe `eth_mtu_int_to_enum`: the largest IB MTU that fits the link less 80 bytes of
    /// headers (1500 → 1024, 9000 → 4096, loopback's 65536 → 4096), 4096 when unknown.
    #[test]
    fn the_link_mtu_is_the_largest_ib_mtu_that_fits_the_netdev() {
        assert_eq!(ib_mtu_for_link(Some(1500)), 1024);
        assert_eq!(ib_mtu_for_link(Some(1104)), 1024);
        assert_eq!(ib_mtu_for_link(Some(1103)), 512);
        assert_eq!(ib_mtu_for_link(Some(2128)), 2048);
        assert_eq!(ib_mtu_for_link(Some(9000)), 4096);
        assert_eq!(ib_mtu_for_link(Some(65536)), 4096);
        assert_eq!(ib_mtu_for_link(Some(68)), 256);
        assert_eq!(ib_mtu_for_link(None), 4096);
    }

    /// docs/rocev2-wire.md §2: a packet whose ICRC is right arrives; one with a flipped bit is
    /// dropped and counted, never delivered.
    #[test]
    fn receive_delivers_good_packets_and_counts_corrupted_ones() {
        let gid = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
        let rx = NetSock::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, gid).unwrap();
        let tx = NetSock::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, gid).unwrap();
        let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), rx.port);
        let mut good = ud_packet(b"hello");
        tx.send_to(to, &mut good);
        let mut bad = ud_packet(b"world");
        tx.send_to(to, &mut bad);
        let n = bad.len();
        bad[n - 9] ^= 0x10; // a payload bit, after the ICRC was computed
        tx.sock.send_to(&bad, to).unwrap();
        let mut good_again = ud_packet(b"again");
        tx.send_to(to, &mut good_again);

        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = Vec::new();
        // Loopback delivers at once; the socket is non-blocking, so keep reading until
        // the three good packets are in (bounded).
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |from, p, repr, id| {
                assert_eq!((from.ip(), id, repr.deth.map(|d| d.src_qp)), (IpAddr::V4(Ipv4Addr::LOCALHOST), 0, Some(0x34)));
                got.push(p.payload().to_vec());
            });
            if got.len() == 3 && stats.bad_icrc.load(Ordering::Relaxed) == 1 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(got, [b"hello".to_vec(), b"world".to_vec(), b"again".to_vec()]);
        assert_eq!(stats.bad_icrc.load(Ordering::Relaxed), 1);
        assert_eq!(stats.malformed.load(Ordering::Relaxed), 0);
    }

    /// More datagrams than one `recvmmsg` takes (`RX_BATCH`): every good packet is
    /// delivered, in arrival order, across the batches; the corrupted ones among them are
    /// dropped and counted, never delivered.
    #[test]
    fn receive_keeps_arrival_order_across_batches() {
        let gid = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
        let rx = NetSock::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, gid).unwrap();
        let tx = NetSock::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, gid).unwrap();
        let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), rx.port);
        let (mut want, mut bad) = (Vec::new(), 0);
        for i in 0..3 * RX_BATCH as u32 + 5 {
            let mut p = ud_packet(&i.to_be_bytes());
            if i % 7 == 3 {
                assert!(tx.seal(to, &mut p));
                let n = p.len();
                p[n - 6] ^= 1; // a payload bit, after the ICRC
                tx.sock.send_to(&p, to).unwrap();
                bad += 1;
            } else {
                tx.send_to(to, &mut p);
                want.push(i.to_be_bytes().to_vec());
            }
        }
        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = Vec::new();
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |_, p, _, _| got.push(p.payload().to_vec()));
            if got.len() == want.len() && stats.bad_icrc.load(Ordering::Relaxed) == bad {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(got, want);
        assert_eq!(stats.bad_icrc.load(Ordering::Relaxed), bad);
        assert_eq!(stats.malformed.load(Ordering::Relaxed), 0);
    }

    /// A batch of equal-sized packets goes out as GSO trains (one train here; then one
    /// shorter packet ends it, and a larger one starts the next): every packet arrives once,
    /// in order, its ICRC right for the IPv4 ID the kernel gives packet `k` of a train (`k`;
    /// the receiver solves it, so the IDs it reports are the ones each packet was sealed
    /// with), whether the receiving socket takes the train whole (GRO) or cut apart.
    #[test]
    fn a_batch_of_equal_packets_goes_out_as_trains_and_arrives_whole_and_in_order() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let gid = Gid::from_ip(lo);
        let rx = NetSock::bind(lo, 0, gid).unwrap();
        let tx = NetSock::bind(lo, 0, gid).unwrap();
        let to = SocketAddr::new(lo, rx.port);
        let mut sizes = vec![200usize; 40];
        sizes.push(120);
        sizes.extend([300, 300, 300]);
        let mut packets: Vec<Vec<u8>> =
            sizes.iter().enumerate().map(|(i, &n)| ud_packet(&vec![i as u8; n])).collect();
        tx.transmit_all(to, &mut packets);
        assert!(tx.gso.load(Ordering::Relaxed), "loopback takes GSO trains");
        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = Vec::new();
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |_, p, _, id| got.push((p.payload().to_vec(), id)));
            if got.len() == sizes.len() {
                break;
            }
            std::thread::yield_now();
        }
        let payloads: Vec<Vec<u8>> = got.iter().map(|(p, _)| p.clone()).collect();
        let want: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
        assert_eq!(payloads, want);
        let ids: Vec<u16> = got.iter().map(|(_, id)| *id).collect();
        let want_ids: Vec<u16> = (0..41).chain(0..3).collect();
        assert_eq!(ids, want_ids, "packet k of a train is sealed with IPv4 ID k");
        assert_eq!(stats.bad_icrc.load(Ordering::Relaxed), 0);
    }

    /// docs/rocev2-wire.md §2.5: rxe and NICs send non-zero IPv4 IDs; the receive side finds the
    /// ID from the ICRC instead of rejecting the packet.
    #[test]
    fn a_packet_sent_with_a_nonzero_ipv4_id_is_accepted_with_that_id() {
        let (src, dst) = (Ipv4Addr::new(10, 77, 0, 2), Ipv4Addr::new(10, 77, 0, 1));
        let from = SocketAddr::new(IpAddr::V4(src), 49152);
        let to = SocketAddr::new(IpAddr::V4(dst), ROCE_PORT);
        let mut buf = ud_packet(b"rxe sends ids");
        let n = buf.len();
        let icrc = icrc::ipv4_pseudo_with_id(src, dst, from.port(), to.port(), 0x718c, &buf[..n - 4]);
        buf[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(icrc_id(from, to, &packet), Some(0x718c));
        buf[20] ^= 1;
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_ne!(icrc_id(from, to, &packet), Some(0x718c));
    }

    /// docs/rocev2-wire.md §2.5: IPv6 carries no ID; its ICRC is checked as it is.
    #[test]
    fn ipv6_packets_are_checked_without_an_id() {
        let gid = Gid::from_ip(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
        let Ok(rx) = NetSock::bind(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), 0, gid) else {
            // A host without IPv6 loopback cannot run this test; the IPv4 ones cover the path.
            return;
        };
        let tx = NetSock::bind(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), 0, gid).unwrap();
        let to = SocketAddr::new(rx.ip, rx.port);
        let mut good = ud_packet(b"six");
        tx.send_to(to, &mut good);
        let mut bad = good.clone();
        bad[13] ^= 4;
        tx.sock.send_to(&bad, to).unwrap();
        tx.send_to(to, &mut ud_packet(b"six again"));
        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = Vec::new();
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |_, p, _, id| {
                assert_eq!(id, 0);
                got.push(p.payload().to_vec());
            });
            if got.len() == 2 && stats.bad_icrc.load(Ordering::Relaxed) == 1 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(got, [b"six".to_vec(), b"six again".to_vec()]);
        assert_eq!(stats.bad_icrc.load(Ordering::Relaxed), 1);
    }

    /// The relay header carries the original source (IPv4 with its ID, IPv6) and the
    /// packet unchanged; what this code did not write is rejected: any truncation of the
    /// header, another magic or version, an unknown family, non-zero reserved bytes or
    /// IPv4 padding, an ID with an IPv6 source.
    #[test]
    fn relay_header_round_trips_and_rejects_what_it_did_not_write() {
        use std::net::Ipv6Addr;
        let packet = ud_packet(b"relayed");
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 67, 0, 2)), 49152);
        let v6 = SocketAddr::new(IpAddr::V6("fd67::2".parse::<Ipv6Addr>().unwrap()), 4791);
        let mut out = Vec::new();
        relay::encode(v4, 0x718c, &packet, &mut out);
        assert_eq!(out.len(), relay::LEN + packet.len());
        assert_eq!(&out[..4], &relay::MAGIC);
        assert_eq!(relay::decode(&out), Some(relay::Relay { src: v4, id: 0x718c, packet: &packet }));
        let v4_datagram = out.clone();
        relay::encode(v6, 0x718c, &packet, &mut out);
        // IPv6 has no ID: none is carried.
        assert_eq!(relay::decode(&out), Some(relay::Relay { src: v6, id: 0, packet: &packet }));
        // A header with nothing after it decodes (the packet then fails to parse).
        assert_eq!(relay::decode(&out[..relay::LEN]).map(|r| r.packet.len()), Some(0));
        for n in 0..relay::LEN {
            assert_eq!(relay::decode(&out[..n]), None, "truncated to {n} bytes");
            assert_eq!(relay::decode(&v4_datagram[..n]), None, "truncated to {n} bytes");
        }
        let spoiled = |i: usize, v: u8| {
            let mut d = v4_datagram.clone();
            d[i] = v;
            relay::decode(&d).is_none()
        };
        assert!(spoiled(0, 0x00), "magic");
        assert!(spoiled(3, b'x'), "magic");
        assert!(spoiled(4, 2), "version");
        assert!(spoiled(5, 5), "family");
        assert!(spoiled(11, 1), "reserved");
        assert!(spoiled(16, 1), "IPv4 padding");
        assert!(!spoiled(15, 9), "the last IPv4 address byte is data");
        let mut d = out.clone();
        d[9] = 1; // an ID with an IPv6 source
        assert_eq!(relay::decode(&d), None);
    }

    /// A socket that does not own its address's port takes a relay datagram only from the
    /// owner (its own address, the owner's port): the packet it carries is delivered with
    /// the original source and ID, its ICRC not checked again; a malformed one from the
    /// owner is dropped and counted; the same datagram from any other port is an ordinary
    /// datagram, which does not parse; and the owner itself takes none.
    #[test]
    fn relay_datagrams_are_taken_only_from_the_owner() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let gid = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
        let owner = NetSock::bind(lo, 0, gid).unwrap();
        let owner = NetSock { owner_port: owner.port, ..owner };
        let rx = NetSock::bind(lo, 0, gid).unwrap();
        let rx = NetSock { owner_port: owner.port, ..rx };
        let other = NetSock::bind(lo, 0, gid).unwrap();
        let to = SocketAddr::new(lo, rx.port);
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 67, 0, 2)), 49152);
        // The ICRC is wrong for every path: a relayed packet's is not checked here.
        let mut packet = ud_packet(b"via the owner");
        let n = packet.len();
        packet[n - 4..].copy_from_slice(&[1, 2, 3, 4]);
        let mut good = Vec::new();
        relay::encode(peer, 0x1234, &packet, &mut good);
        let mut bad_family = good.clone();
        bad_family[5] = 7;
        let mut bad_packet = Vec::new();
        relay::encode(peer, 0, &packet[..5], &mut bad_packet);
        owner.sock.send_to(&good, to).unwrap();
        owner.sock.send_to(&good[..relay::LEN - 1], to).unwrap();
        owner.sock.send_to(&bad_family, to).unwrap();
        owner.sock.send_to(&bad_packet, to).unwrap();
        other.sock.send_to(&good, to).unwrap();
        owner.sock.send_to(&good, SocketAddr::new(lo, owner.port)).unwrap();

        let (stats, owner_stats) = (NetStats::default(), NetStats::default());
        let mut buf = RxBatch::new();
        let (mut got, mut owner_got) = (Vec::new(), 0);
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |from, p, _, id| got.push((from, id, p.payload().to_vec())));
            owner.receive_each(&owner_stats, &mut buf, |_, _, _, _| owner_got += 1);
            let done = stats.bad_relay.load(Ordering::Relaxed) == 3
                && stats.malformed.load(Ordering::Relaxed) == 1
                && owner_stats.malformed.load(Ordering::Relaxed) == 1;
            if done && got.len() == 1 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(got, [(peer, 0x1234, b"via the owner".to_vec())]);
        assert_eq!(stats.bad_relay.load(Ordering::Relaxed), 3, "truncated, bad family, packet that does not parse");
        assert_eq!(stats.malformed.load(Ordering::Relaxed), 1, "the relay header from another port");
        assert_eq!(stats.bad_icrc.load(Ordering::Relaxed), 0);
        assert_eq!((owner_got, owner_stats.malformed.load(Ordering::Relaxed)), (0, 1), "the owner takes no relay");
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

    /// RVERBS_PCAP records IPv6 datagrams (issue 12): what a socket sends and what it
    /// receives, corrupted ones included, as IPv6 records whose ICRC checks from the record
    /// alone exactly when the datagram's did.
    #[test]
    fn trace_records_ipv6_datagrams_sent_and_received() {
        use rverbs_proto::pcap::IpUdp;
        use std::net::Ipv6Addr;
        let gid = Gid::from_ip(IpAddr::V6(Ipv6Addr::LOCALHOST));
        let Ok(rx) = NetSock::bind(IpAddr::V6(Ipv6Addr::LOCALHOST), 0, gid) else {
            // A host without IPv6 loopback cannot run this test.
            return;
        };
        let path = std::env::temp_dir().join(format!("rverbs-trace-v6-{}.pcap", std::process::id()));
        let trace = Trace::create(&path).unwrap();
        let rx = NetSock { trace: Some(trace.clone()), ..rx };
        let tx = NetSock::bind(IpAddr::V6(Ipv6Addr::LOCALHOST), 0, gid).unwrap();
        let tx = NetSock { trace: Some(trace), ..tx };
        let to = SocketAddr::new(rx.ip, rx.port);
        let mut good = ud_packet(b"traced six");
        tx.send_to(to, &mut good);
        let mut bad = good.clone();
        bad[13] ^= 4;
        tx.sock.send_to(&bad, to).unwrap(); // past the trace: only the receiver records it
        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = 0;
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |_, _, _, _| got += 1);
            if got == 1 && stats.bad_icrc.load(Ordering::Relaxed) == 1 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!((got, stats.bad_icrc.load(Ordering::Relaxed)), (1, 1));
        let file = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let (linktype, recs) = pcap::records(&file).unwrap();
        assert_eq!(linktype, pcap::LINKTYPE_RAW);
        let mut seen = Vec::new();
        for r in &recs {
            let d = pcap::parse_ip_udp(r.data).expect("an IPv6/UDP record");
            let IpUdp::V6(h) = d.header else { panic!("not IPv6: {:?}", d.header) };
            assert_eq!((h.src, h.dst, h.dst_port, h.hop_limit), (Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, rx.port, 64));
            assert_eq!(h.src_port, tx.port);
            let (body, tail) = d.packet.split_at(d.packet.len() - 4);
            let icrc_ok = icrc::compute_ip_packet(body) == Ok(u32::from_le_bytes(tail.try_into().unwrap()));
            seen.push((d.udp_payload.to_vec(), icrc_ok));
        }
        // The sender's record, then the receiver's two (in arrival order).
        assert_eq!(seen, [(good.clone(), true), (good, true), (bad, false)]);
    }
}
