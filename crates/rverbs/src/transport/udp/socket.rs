//! The sockets of the network transport: one UDP socket per local IP address, the link
//! MTU of its address, and sending (one datagram, or a batch as GSO trains in one
//! `sendmmsg`) and receiving (`recvmmsg`, GRO trains cut apart, each datagram checked by
//! `super::rx`).
//!
//! Read before editing: docs/rocev2-wire.md §1 (packets), §1.6 (the link MTU), §2.5 (the
//! ICRC and the IPv4 Identification a UDP socket cannot see) and docs/network.md.
//!
//! Rule: each socket is bound to `address:4791` (or, where another process of the network
//! namespace owns that port, `address:0` to send from, `super::relay`), unconnected, with
//! path MTU discovery "do", so the kernel sends IPv4 ID 0 with DF and the ICRC can be
//! computed before sending (docs/rocev2-wire.md §2.5; IPv6 has no ID). Packets go out
//! from the socket of the QP's source GID to `destination:4791`.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rverbs_proto::wire::icrc;
#[cfg(test)]
use rverbs_proto::wire::roce::{Packet, Repr};
use smallvec::SmallVec;

use super::relay;
use super::rx::{check_datagram, for_each_segment, with_tx_icrc, Checked, IcrcKept, RxAddr, RxBatch, RxDrop, RX_BATCH, RX_RUN, RX_RUN_INLINE};
use super::trace::Trace;
use crate::gid::Gid;
use crate::limits;
use crate::shm::counters::{Counter, CounterBlock, DETACHED};

/// The most datagrams one GSO train carries (the kernel's `UDP_MAX_SEGMENTS` of 6.1).
const TRAIN_PACKETS: usize = 64;

/// The most bytes one GSO train carries (a UDP datagram's payload limit, less room).
const TRAIN_BYTES: usize = 60 * 1024;

/// The socket buffer sizes asked for (bytes).
const RECV_BUFFER: usize = 4 << 20;

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_PORT: u16 = 4791;

/// One socket, for one local IP address.
pub(crate) struct NetSock {
    pub(crate) ip: IpAddr,
    /// The bound port: 4791 if this process owns the address's RoCEv2 port, else an
    /// ephemeral one to send from (any port in tests).
    pub(super) port: u16,
    /// The port the address's owner receives on, and relays from: 4791 (another in
    /// tests). `port == owner_port`: this socket is the owner.
    pub(super) owner_port: u16,
    pub(crate) gid: Gid,
    /// The largest IB MTU the address's link carries (bytes): its netdev's MTU less the
    /// RoCEv2 headers, as rxe derives a port's active MTU (docs/rocev2-wire.md §1.6).
    pub(crate) link_mtu: u32,
    pub(super) sock: UdpSocket,
    pub(super) trace: Option<Arc<Trace>>,
    /// Whether batches may go out as GSO trains ([`NetSock::transmit_all`]); cleared for
    /// good the first time the kernel refuses one (a route without checksum offload).
    pub(super) gso: std::sync::atomic::AtomicBool,
    /// Where the datagrams sent, refused and received are counted (the endpoint's
    /// counters, docs/device.md, "Hardware counters"; [`DETACHED`] until [`NetSock::on_link`]).
    pub(super) counters: &'static CounterBlock,
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

impl NetSock {
    /// A socket bound to `ip:port` for local GID `gid`: unconnected, path MTU discovery
    /// "do" (IPv4: ID 0 with DF; both: no fragmentation, an oversize send fails), non-blocking.
    pub(super) fn bind(ip: IpAddr, port: u16, gid: Gid) -> std::io::Result<NetSock> {
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
        Ok(NetSock { ip, port, owner_port: ROCE_PORT, gid, link_mtu: 4096, sock, trace: None, gso, counters: &DETACHED })
    }

    /// A socket that receives what is sent to `sock`'s address (a multicast group's,
    /// `super::mcast_net`) as the socket of GID `gid`, which owns that port (it takes no
    /// relays), traced as this one is.
    pub(super) fn receiver(&self, sock: UdpSocket, gid: Gid) -> std::io::Result<NetSock> {
        let local = sock.local_addr()?;
        let s = NetSock::wrap(sock, local.ip(), gid)?;
        Ok(NetSock { owner_port: s.port, trace: self.trace.clone(), counters: self.counters, ..s })
    }

    /// This socket (of an address served at start) with the link MTU of interface
    /// `ifindex` ([`ib_mtu_for_link`]), tracing into `trace`, counting into `counters`.
    pub(super) fn on_link(self, ifindex: u32, trace: Option<Arc<Trace>>, counters: &'static CounterBlock) -> NetSock {
        let link_mtu = ib_mtu_for_link(netdev_mtu(&self.sock, ifindex));
        NetSock { trace, link_mtu, counters, ..self }
    }

    /// Whether this socket owns its address's RoCEv2 port (receives on it, delivers UD
    /// for the other processes and relays their RC/UC packets).
    pub(crate) fn owns_port(&self) -> bool {
        self.port == self.owner_port
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
    pub(super) fn send_to(&self, dst: SocketAddr, packet: &mut [u8]) {
        if self.seal(dst, packet) {
            self.transmit(dst, packet);
        }
    }

    /// Writes the ICRC of `packet` as sent from this socket to `dst`; `false` when `dst`
    /// is of the other address family (no route, as for rxe).
    pub(super) fn seal(&self, dst: SocketAddr, packet: &mut [u8]) -> bool {
        with_tx_icrc(|kept| self.seal_with_id(kept, dst, packet, 0))
    }

    /// As [`NetSock::seal`] for a packet that leaves with IPv4 Identification `id`
    /// (ignored for IPv6, which has none), through the sending thread's `kept` state.
    fn seal_with_id(&self, kept: &mut IcrcKept, dst: SocketAddr, packet: &mut [u8], id: u16) -> bool {
        let n = packet.len();
        let body = &packet[..n - 4];
        let icrc = match (self.ip, dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(to)) => kept.ipv4(src, to, self.port, dst.port(), id, body),
            (IpAddr::V6(src), IpAddr::V6(to)) => icrc::compute_ipv6_pseudo(src, to, self.port, dst.port(), body),
            _ => return false,
        };
        packet[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        true
    }

    /// Puts one datagram on the wire (and into the trace).
    pub(super) fn transmit(&self, dst: SocketAddr, packet: &[u8]) {
        if let Some(t) = &self.trace {
            t.record(SocketAddr::new(self.ip, self.port), dst, 0, packet);
        }
        match self.sock.send_to(packet, dst) {
            Ok(_) => self.counters.add(Counter::SentPkts),
            Err(err) => {
                // A datagram transport: a failed send is a lost packet, which the protocol
                // (RC retries; UD is unreliable) already handles.
                self.counters.add(Counter::SendErr);
                tracing::debug!(%dst, %err, "RoCEv2 send failed");
            }
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
    pub(super) fn transmit_all(&self, dst: SocketAddr, packets: &mut [Vec<u8>]) {
        use std::sync::atomic::Ordering::Relaxed;
        let gso = self.gso.load(Relaxed);
        let mut trains: smallvec::SmallVec<[std::ops::Range<usize>; 64]> = smallvec::SmallVec::new();
        let sealed = with_tx_icrc(|kept| {
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
                    if !self.seal_with_id(kept, dst, p, k as u16) {
                        return false;
                    }
                }
                trains.push(i..end);
                i = end;
            }
            true
        });
        if !sealed {
            return;
        }
        let mut done = 0;
        while done < trains.len() {
            let sent = crate::sys::sendmmsg_trains(self.sock.as_fd(), dst, packets, &trains[done..]);
            match sent {
                Ok(0) => {
                    self.counters.add_n(Counter::SendErr, unsent(&trains[done..]));
                    break;
                }
                Ok(n) => {
                    self.counters.add_n(Counter::SentPkts, unsent(&trains[done..done + n]));
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
                    self.counters.add_n(Counter::SendErr, unsent(&trains[done..]));
                    break;
                }
            }
        }
    }

    /// Receives every datagram waiting, handing the checked packets to `deliver` in
    /// arrival order, in runs of up to [`RX_RUN`] (the packets of a train, or of several
    /// datagrams of one `recvmmsg`), each with its source address and the IPv4
    /// Identification it was sent with (0 for IPv6). A relay datagram from the owner of
    /// the port ([`relay`]) hands over the packet it carries, with the original
    /// source and ID, its ICRC not checked again.
    ///
    /// The datagrams are read up to [`RX_BATCH`] per system call (`recvmmsg`, into
    /// `batch`); a batch that comes back short means the socket's queue ran empty, so no
    /// further call is made to find it empty (a datagram that arrives meanwhile leaves the
    /// socket readable for the next wait).
    pub(crate) fn receive(&self, stats: &NetStats, batch: &mut RxBatch, mut deliver: impl FnMut(&[Checked<'_>])) {
        loop {
            let n = match batch.datagrams.recv(self.sock.as_fd()) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    tracing::debug!(%err, "RoCEv2 receive failed");
                    return;
                }
            };
            // Sized to what arrived: a lone packet or two (the latency path: a request, its
            // ACK) stay on the stack; a train allocates its run once, not a whole run's.
            let packets: usize = (0..n)
                .filter_map(|i| Some((batch.datagrams.get(i)?.1.len(), batch.datagrams.segment_size(i))))
                .map(|(len, seg)| seg.map_or(1, |s| len.div_ceil(s)))
                .sum();
            let mut run: SmallVec<[Checked<'_>; RX_RUN_INLINE]> = SmallVec::with_capacity(packets.min(RX_RUN));
            // rxe `rcvd_pkts`, counted once per run (one locked add, not one per packet),
            // before the run is handed on: whoever sees what a packet did sees it counted.
            let mut rcvd = 0;
            let mut take = |c: Option<(_, bool)>| {
                if let Some((c, counted)) = c {
                    rcvd += u64::from(counted);
                    run.push(c);
                    if run.len() == RX_RUN {
                        self.counters.add_n(Counter::RcvdPkts, std::mem::take(&mut rcvd));
                        deliver(&run);
                        run.clear();
                    }
                }
            };
            let (datagrams, kept) = (&batch.datagrams, &mut batch.icrc);
            for i in 0..n {
                let Some((from, datagram)) = datagrams.get(i) else { continue };
                for_each_segment(datagram, datagrams.segment_size(i), |d| take(self.check(kept, stats, from, d)));
            }
            self.counters.add_n(Counter::RcvdPkts, rcvd);
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
    /// counted): the packet, and whether it counts in rxe's `rcvd_pkts` (parsed, ICRC
    /// checked, not relayed: a relayed packet was counted by the owner of the port, which
    /// received it from the network), or `None` when it is dropped.
    fn check<'b>(&self, kept: &mut IcrcKept, stats: &NetStats, from: SocketAddr, datagram: &'b [u8]) -> Option<(Checked<'b>, bool)> {
        let r = check_datagram(kept, self.rx_addr(), from, datagram);
        if let (Some(t), Some(seen)) = (&self.trace, r.seen) {
            t.record(seen.from, seen.to, seen.id, seen.bytes);
        }
        let counter = match r.verdict {
            Ok(c) => return Some((c, !r.relayed)),
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
    /// port `port` of this socket's address (this socket owns the address's RoCEv2 port;
    /// `super::relay`). Returns whether it was sent.
    pub(crate) fn relay_to(&self, port: u16, src: SocketAddr, id: u16, packet: &[u8]) -> bool {
        relay::send(&self.sock, self.ip, port, src, id, packet)
    }
}

/// Datagrams in the trains `trains` (ranges of packets).
fn unsent(trains: &[std::ops::Range<usize>]) -> u64 {
    trains.iter().map(|r| r.len() as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use super::super::rx::ud_packet;
    use rverbs_proto::pcap;

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

    /// docs/device.md, "Hardware counters": every datagram the kernel takes is
    /// `sent_pkts` (each of a train too), one it refuses `send_err`; a datagram received is
    /// `rcvd_pkts` once its ICRC checks.
    #[test]
    fn datagrams_sent_refused_and_received_are_counted() {
        let gid = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
        let (tx_counts, rx_counts): (&'static CounterBlock, &'static CounterBlock) =
            (Box::leak(Box::new(CounterBlock::zero())), Box::leak(Box::new(CounterBlock::zero())));
        let rx = NetSock { counters: rx_counts, ..NetSock::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, gid).unwrap() };
        let tx = NetSock { counters: tx_counts, ..NetSock::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, gid).unwrap() };
        let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), rx.port);
        tx.send_to(to, &mut ud_packet(b"one"));
        let mut train: Vec<Vec<u8>> = (0..3).map(|_| ud_packet(b"same size")).collect();
        tx.transmit_all(to, &mut train);
        // Corrupted after sealing, sent around the counting socket: received, not counted.
        let mut bad = ud_packet(b"bad");
        assert!(tx.seal(to, &mut bad));
        let n = bad.len();
        bad[n - 9] ^= 0x10;
        tx.sock.send_to(&bad, to).unwrap();
        // Larger than any UDP datagram: the kernel refuses it (EMSGSIZE).
        let mut huge = vec![0u8; 70_000];
        tx.send_to(to, &mut huge);

        let stats = NetStats::default();
        let mut buf = RxBatch::new();
        let mut got = 0;
        for _ in 0..1000 {
            rx.receive_each(&stats, &mut buf, |_, _, _, _| got += 1);
            if got == 4 && stats.bad_icrc.load(Ordering::Relaxed) == 1 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(got, 4);
        let (t, r) = (tx_counts.snapshot(), rx_counts.snapshot());
        assert_eq!((t.sent_pkts, t.send_err, t.rcvd_pkts), (4, 1, 0));
        assert_eq!((r.sent_pkts, r.send_err, r.rcvd_pkts), (0, 0, 4));
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
