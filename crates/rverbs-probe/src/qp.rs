//! One RC QP of rverbs-proto's machines on a real UDP socket: the I/O around the sans-I/O
//! core, as the coming UDP transport will do it (docs/rocev2-wire.md §2.5 for the ICRC recipe).
//!
//! - Send: the core's `Request`/`Response` → `wire::roce::Repr` → bytes, payload gathered
//!   from the WQE's message (or the memory region, for READ responses), ICRC over the
//!   IPv4/UDP pseudo header the kernel will send (ID 0: unconnected socket with
//!   `IP_PMTUDISC_DO`), `sendto`.
//! - Receive: the source must be the peer; the ICRC is checked by solving for the IPv4 ID
//!   the socket does not see (`icrc::solve_ipv4_id`: accepted iff an ID fits, so a
//!   corrupted packet passes with probability 2^-16); bad ICRCs are dropped and counted.
//! - Timers: `poll_timeout` / `handle_timeout` with `Instant::now()`.
//! - Every datagram sent or received can go to a pcap (IPv4 headers rebuilt, real ICRC).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufWriter};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rverbs_proto::pcap::{Ipv4Udp, PcapWriter};
use rverbs_proto::rc::{AtomicOp, Completion, Placement, RecvCompletion, RecvSlot, Request, Requester};
use rverbs_proto::rc::{Responder, Response, SendWqe, Target};
use rverbs_proto::verbs::Access;
use rverbs_proto::violation::Violation;
use rverbs_proto::wire::{icrc, FethRepr, OpCode, RocePacket, RoceRepr, Syndrome};

/// The RoCEv2 UDP port (docs/rocev2-wire.md §1.1).
pub const ROCE_PORT: u16 = 4791;
/// The receive buffer asked for (bytes).
const RECV_BUFFER: usize = 4 << 20;
/// The TTL written into rebuilt IPv4 headers (masked in the ICRC; a socket does not see it).
const PCAP_TTL: u8 = 64;

/// A registered region the responder may expose (rkey, base VA, bytes, access); none in
/// the ping-pong (rc_pingpong's QPs grant no remote access).
#[derive(Debug)]
pub struct Region {
    pub rkey: u32,
    pub va: u64,
    pub bytes: Vec<u8>,
    pub access: Access,
}

/// The device side of the responder: the receive queue and the one region.
#[derive(Debug, Default)]
struct Device {
    recvs: VecDeque<RecvSlot>,
    region: Option<Region>,
}

impl Device {
    fn offset(&self, va: u64) -> Option<usize> {
        let r = self.region.as_ref()?;
        usize::try_from(va.checked_sub(r.va)?).ok()
    }
}

impl Target for Device {
    fn check_rkey(&mut self, rkey: u32, va: u64, len: u64, access: Access) -> Result<(), Violation> {
        let Some(r) = &self.region else { return Err(Violation::RkeyUnknown) };
        if r.rkey != rkey {
            return Err(Violation::RkeyUnknown);
        }
        if va < r.va || va.saturating_add(len) > r.va + r.bytes.len() as u64 {
            return Err(Violation::RkeyBounds);
        }
        if !r.access.contains(access) {
            return Err(Violation::RkeyAccess);
        }
        Ok(())
    }

    fn take_recv(&mut self) -> Option<RecvSlot> {
        self.recvs.pop_front()
    }

    fn atomic(&mut self, _rkey: u32, va: u64, op: AtomicOp) -> Result<u64, Violation> {
        let o = self.offset(va).ok_or(Violation::RkeyBounds)?;
        let r = self.region.as_mut().ok_or(Violation::RkeyUnknown)?;
        let word: [u8; 8] = r.bytes[o..o + 8].try_into().map_err(|_| Violation::RkeyBounds)?;
        let old = u64::from_ne_bytes(word);
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } if old == compare => swap,
            AtomicOp::CompareSwap { .. } => old,
            AtomicOp::FetchAdd(add) => old.wrapping_add(add),
        };
        r.bytes[o..o + 8].copy_from_slice(&new.to_ne_bytes());
        Ok(old)
    }

    fn atomic_write(&mut self, _rkey: u32, va: u64, value: u64) -> Result<(), Violation> {
        let o = self.offset(va).ok_or(Violation::RkeyBounds)?;
        let r = self.region.as_mut().ok_or(Violation::RkeyUnknown)?;
        r.bytes[o..o + 8].copy_from_slice(&value.to_ne_bytes());
        Ok(())
    }

    fn flush(&mut self, rkey: u32, va: u64, len: u32, _feth: FethRepr) -> Result<(), Violation> {
        self.check_rkey(rkey, va, u64::from(len), Access::empty())
    }

    fn invalidate(&mut self, _rkey: u32) -> bool {
        false
    }
}

/// What the QP hands the application.
#[derive(Debug)]
pub enum Event {
    /// A send-side completion.
    Send(Completion),
    /// A receive completion and the receive buffer.
    Recv(RecvCompletion, Vec<u8>),
}

/// Counters of one run.
#[derive(Debug, Default)]
pub struct Stats {
    pub tx: BTreeMap<String, u64>,
    pub rx: BTreeMap<String, u64>,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Request packets sent again (PSN not above the highest sent).
    pub retransmits: u64,
    /// Request packets sent with a corrupted ICRC (fault injection).
    pub corrupted: u64,
    /// Datagrams dropped on receipt (fault injection).
    pub dropped: u64,
    pub bad_icrc: u64,
    pub malformed: u64,
    pub foreign: u64,
    pub wrong_qp: u64,
    /// The IPv4 IDs recovered from the peer's packets.
    pub rx_ids: BTreeSet<u16>,
    /// Responses the responder refused a request with, by violation.
    pub violations: BTreeMap<String, u64>,
    pub timeouts: u64,
}

/// One RC QP: requester + responder of rverbs-proto on a UDP socket.
pub struct Qp {
    sock: UdpSocket,
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
    pub qpn: u32,
    pub remote_qpn: u32,
    req: Requester,
    resp: Responder,
    dev: Device,
    /// Per send WQE id: its message (SEND/WRITE payload, READ destination).
    send_bufs: HashMap<u64, Vec<u8>>,
    recv_bufs: HashMap<u64, Vec<u8>>,
    pcap: Option<PcapWriter<BufWriter<File>>>,
    highest_psn_sent: Option<rverbs_proto::psn::Psn>,
    pub stats: Stats,
    buf: Vec<u8>,
    /// Fault injection: flip an ICRC bit of every n-th request packet sent (the peer must
    /// drop it silently, docs/rocev2-wire.md §1.7, and our requester recover by retrying).
    pub corrupt_tx_every: u64,
    /// Fault injection: drop every n-th datagram received (our responder must NAK the gap,
    /// or our requester time out, and the peer retry).
    pub drop_rx_every: u64,
    requests_sent: u64,
    datagrams_received: u64,
}

/// A socket bound to `local:4791` whose datagrams leave with IPv4 ID 0 (docs/rocev2-wire.md §2.5:
/// unconnected, `IP_PMTUDISC_DO`), so the ICRC can be computed before sending.
pub fn roce_socket(local: Ipv4Addr) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(SocketAddrV4::new(local, ROCE_PORT))?;
    rustix::net::sockopt::set_ip_mtu_discover(&sock, rustix::net::sockopt::Ipv4PathMtuDiscovery::DO)?;
    // rxe sends a 64-packet message in one burst, and on two shared cores the probe can be
    // off CPU for 80 ms while rxe sends two of them (a go-back-N included): the default
    // buffer (about 90 datagrams) overflowed and the tap saw packets our pcap lacked. 4 MiB,
    // as transport::udp asks for; forced past net.core.rmem_max when root, else best effort.
    if rustix::net::sockopt::set_socket_recv_buffer_size_force(&sock, RECV_BUFFER).is_err() {
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&sock, RECV_BUFFER);
    }
    Ok(sock)
}

fn op_name(op: OpCode) -> String {
    match op.operation() {
        Some(o) => format!("{o:?}"),
        None => format!("{op:?}"),
    }
}

impl Qp {
    /// A QP on `sock` (see [`roce_socket`]) with both machines configured.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sock: UdpSocket,
        local: Ipv4Addr,
        remote: Ipv4Addr,
        qpn: u32,
        remote_qpn: u32,
        req: Requester,
        resp: Responder,
        pcap: Option<PcapWriter<BufWriter<File>>>,
    ) -> Qp {
        Qp {
            sock,
            local,
            remote,
            qpn,
            remote_qpn,
            req,
            resp,
            dev: Device::default(),
            send_bufs: HashMap::new(),
            recv_bufs: HashMap::new(),
            pcap,
            highest_psn_sent: None,
            stats: Stats::default(),
            buf: vec![0; 65_536],
            corrupt_tx_every: 0,
            drop_rx_every: 0,
            requests_sent: 0,
            datagrams_received: 0,
        }
    }

    /// Posts a send work request with its message (`data`: the payload, or the READ
    /// destination).
    pub fn post_send(&mut self, wqe: SendWqe, data: Vec<u8>) -> Result<(), rverbs_proto::rc::PostError> {
        self.req.post(wqe)?;
        self.send_bufs.insert(wqe.id, data);
        Ok(())
    }

    /// Posts a receive of `capacity` bytes.
    pub fn post_recv(&mut self, wr_id: u64, capacity: usize) {
        self.dev.recvs.push_back(RecvSlot { wr_id, capacity: capacity as u64 });
        self.recv_bufs.insert(wr_id, vec![0; capacity]);
    }

    /// The requester (for its counters and state).
    pub fn requester(&self) -> &Requester {
        &self.req
    }

    /// The responder.
    pub fn responder(&self) -> &Responder {
        &self.resp
    }

    fn record(&mut self, hdr: Ipv4Udp, datagram_len: usize) {
        if let Some(p) = &mut self.pcap {
            let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            if let Err(e) = p.write_ipv4_udp(ts, &hdr, &self.buf[..datagram_len]) {
                eprintln!("pcap: {e}");
                self.pcap = None;
            }
        }
    }

    /// Emits `repr` into `self.buf`, payload filled by `fill`, ICRC set; sends it.
    fn transmit(&mut self, repr: &RoceRepr, corrupt: bool, fill: impl FnOnce(&mut [u8], &Self)) -> io::Result<()> {
        let len = repr.buffer_len();
        let mut buf = std::mem::take(&mut self.buf);
        {
            let mut pkt = RocePacket::new_unchecked(&mut buf[..len]);
            repr.emit(&mut pkt);
            fill(pkt.payload_mut(), self);
            let c = icrc::compute_ipv4_pseudo(self.local, self.remote, ROCE_PORT, ROCE_PORT, pkt.without_icrc());
            pkt.set_icrc(if corrupt { c ^ 1 } else { c });
        }
        self.buf = buf;
        self.sock.send_to(&self.buf[..len], SocketAddrV4::new(self.remote, ROCE_PORT))?;
        *self.stats.tx.entry(op_name(repr.bth.opcode)).or_default() += 1;
        self.stats.tx_bytes += len as u64;
        let hdr = Ipv4Udp {
            src: self.local,
            dst: self.remote,
            src_port: ROCE_PORT,
            dst_port: ROCE_PORT,
            id: 0,
            ttl: PCAP_TTL,
        };
        self.record(hdr, len);
        Ok(())
    }

    fn send_request(&mut self, r: &Request) -> io::Result<()> {
        if r.opcode.is_request() {
            let psn = r.psn;
            match self.highest_psn_sent {
                Some(h) if psn.diff(h) <= 0 => self.stats.retransmits += 1,
                _ => self.highest_psn_sent = Some(psn),
            }
        }
        let repr = r.to_repr(self.remote_qpn);
        let (id, off, n) = (r.wqe_id, r.payload_offset as usize, r.payload_len as usize);
        let atomic_write = r.atomic_write;
        self.requests_sent += 1;
        let corrupt = self.corrupt_tx_every > 0 && self.requests_sent.is_multiple_of(self.corrupt_tx_every);
        self.stats.corrupted += u64::from(corrupt);
        self.transmit(&repr, corrupt, |payload, qp| {
            if let Some(v) = atomic_write {
                payload.copy_from_slice(&v.to_ne_bytes());
            } else if n > 0 {
                payload.copy_from_slice(&qp.send_bufs[&id][off..off + n]);
            }
        })
    }

    fn send_response(&mut self, r: &Response) -> io::Result<()> {
        let repr = r.to_repr(self.remote_qpn);
        let source = r.source;
        self.transmit(&repr, false, |payload, qp| {
            if let (Some(src), Some(region)) = (source, qp.dev.region.as_ref()) {
                let o = (src.va - region.va) as usize;
                payload.copy_from_slice(&region.bytes[o..o + src.len as usize]);
            }
        })
    }

    /// Sends everything both machines have to send and collects completions.
    fn flush(&mut self, now: Instant, events: &mut Vec<Event>) -> io::Result<()> {
        loop {
            let mut moved = false;
            while let Some(r) = self.req.poll_transmit(now) {
                self.send_request(&r)?;
                moved = true;
            }
            while let Some(r) = self.resp.poll_transmit(now) {
                self.send_response(&r)?;
                moved = true;
            }
            if !moved {
                break;
            }
        }
        while let Some(c) = self.req.poll_completion() {
            self.send_bufs.remove(&c.id);
            events.push(Event::Send(c));
        }
        Ok(())
    }

    /// Runs until at least one event is ready or `deadline` passes.
    pub fn poll(&mut self, deadline: Instant) -> io::Result<Vec<Event>> {
        let mut events = Vec::new();
        loop {
            let now = Instant::now();
            if self.req.poll_timeout().is_some_and(|t| t <= now) {
                self.stats.timeouts += 1;
                self.req.handle_timeout(now);
            }
            self.flush(now, &mut events)?;
            if !events.is_empty() || now >= deadline {
                return Ok(events);
            }
            let wake = self.req.poll_timeout().map_or(deadline, |t| t.min(deadline));
            let wait = wake.saturating_duration_since(now).max(std::time::Duration::from_micros(50));
            self.sock.set_read_timeout(Some(wait))?;
            let mut buf = std::mem::take(&mut self.buf);
            let got = self.sock.recv_from(&mut buf);
            self.buf = buf;
            match got {
                Ok((n, from)) => self.handle_datagram(n, from, &mut events),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn handle_datagram(&mut self, n: usize, from: std::net::SocketAddr, events: &mut Vec<Event>) {
        let now = Instant::now();
        let std::net::SocketAddr::V4(from) = from else {
            self.stats.foreign += 1;
            return;
        };
        if *from.ip() != self.remote {
            self.stats.foreign += 1;
            return;
        }
        self.datagrams_received += 1;
        if self.drop_rx_every > 0 && self.datagrams_received.is_multiple_of(self.drop_rx_every) {
            self.stats.dropped += 1;
            return;
        }
        let mut hdr = Ipv4Udp {
            src: self.remote,
            dst: self.local,
            src_port: from.port(),
            dst_port: ROCE_PORT,
            id: 0,
            ttl: PCAP_TTL,
        };
        let data = self.buf[..n].to_vec();
        let Ok(pkt) = RocePacket::new_checked(&data[..]) else {
            self.stats.malformed += 1;
            self.record(hdr, n);
            return;
        };
        // docs/rocev2-wire.md §2.5 RX option 2: the ICRC holds iff some IPv4 ID makes it hold.
        let id = icrc::solve_ipv4_id(self.remote, self.local, from.port(), ROCE_PORT, pkt.without_icrc(), pkt.icrc());
        let Some(id) = id else {
            self.stats.bad_icrc += 1;
            self.record(hdr, n);
            return;
        };
        hdr.id = id;
        self.stats.rx_ids.insert(id);
        self.record(hdr, n);
        let Ok(repr) = RoceRepr::parse(&pkt) else {
            self.stats.malformed += 1;
            return;
        };
        *self.stats.rx.entry(op_name(repr.bth.opcode)).or_default() += 1;
        self.stats.rx_bytes += n as u64;
        if repr.bth.dest_qp != self.qpn {
            self.stats.wrong_qp += 1;
            return;
        }
        let payload_range = pkt.payload_range();
        if repr.bth.opcode.is_request() {
            let r = Request::from_repr(&repr, &data[payload_range.clone()]);
            let d = self.resp.handle_request(now, &r, &mut self.dev);
            // One datagram is one run here: a message that ended without AckReq (an
            // rverbs requester across hosts asks only where it stops) is acknowledged now.
            let _ = self.resp.acknowledge_owed();
            if let Some(v) = d.violation {
                *self.stats.violations.entry(format!("{v:?}")).or_default() += 1;
            }
            let payload = &data[payload_range];
            match d.place {
                Some(Placement::Recv { wr_id, offset }) => {
                    if let Some(b) = self.recv_bufs.get_mut(&wr_id) {
                        let o = offset as usize;
                        b[o..o + payload.len()].copy_from_slice(payload);
                    }
                }
                Some(Placement::Memory { va, .. }) => {
                    if let Some(region) = self.dev.region.as_mut() {
                        let o = (va - region.va) as usize;
                        region.bytes[o..o + payload.len()].copy_from_slice(payload);
                    }
                }
                None => {}
            }
            if let Some(c) = d.recv {
                let data = self.recv_bufs.remove(&c.wr_id).unwrap_or_default();
                events.push(Event::Recv(c, data));
            }
        } else if repr.bth.opcode.is_response() {
            let r = Response::from_repr(&repr);
            if let Some(Syndrome::Nak(_) | Syndrome::RnrNak { .. }) = r.syndrome {
                *self.stats.violations.entry(format!("received {:?}", r.syndrome)).or_default() += 1;
            }
            if let Some(pl) = self.req.handle_response(now, &r) {
                if let Some(b) = self.send_bufs.get_mut(&pl.wqe_id) {
                    let o = pl.offset as usize;
                    b[o..o + pl.len as usize].copy_from_slice(&data[payload_range]);
                }
            }
        }
    }

    /// Flushes the pcap.
    pub fn finish(&mut self) {
        if let Some(p) = &mut self.pcap {
            if let Err(e) = p.flush() {
                eprintln!("pcap: {e}");
            }
        }
    }

    /// Datagrams received from the peer so far.
    pub fn datagrams_received(&self) -> u64 {
        self.datagrams_received
    }

    /// Records in the pcap so far.
    pub fn pcap_packets(&self) -> u64 {
        self.pcap.as_ref().map_or(0, |p| p.packets())
    }
}
