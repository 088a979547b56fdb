//! The receive checks of the network transport, before the protocol core and without I/O:
//! a received buffer cut into its datagrams, a relay datagram's header, the packet's parse
//! (`wire::roce`) and its ICRC under the IPv4 Identification it was sent with.
//!
//! Read before editing: docs/rocev2-wire.md §1 (packets) and §2.5 (the ICRC, and the IPv4
//! Identification a UDP socket cannot see), docs/network.md, "UD across hosts, and
//! receiving".
//!
//! Rule: received packets are checked one by one in arrival order: parse, then ICRC
//! (IPv4: with ID 0, else the ID solved from the ICRC, `icrc::solve_ipv4_id`, since rxe
//! and NICs send non-zero IDs; IPv6 has no ID); a packet that fails either is dropped and
//! counted (`NetStats`), never delivered. A relay datagram (`super::relay`) is taken only
//! by a socket that does not own its address's port, and only from that port's owner.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rverbs_proto::wire::icrc;
use rverbs_proto::wire::roce::{Packet, Repr};

use super::relay;

/// How many packet lengths' IPv4 ID bases a receiving thread keeps (`icrc_id`).
const ID_BASES: usize = 4;

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

/// Why [`check_datagram`] dropped a datagram (each counted in `NetStats`).
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
    /// The datagram was a relay from the owner of the port (which received the packet).
    pub(crate) relayed: bool,
}

/// The receive checks of one datagram `datagram` from `from` arriving at `rx`, before
/// the protocol core, without I/O: the relay header ([`relay`]; only a socket that does
/// not own its address's port takes one, and only from that port's owner, whose ICRC
/// check and ID it carries; a relay header from elsewhere does not parse as RoCEv2: its
/// first byte is an opcode nobody serves), the packet's parse, and the ICRC under the
/// IPv4 Identification it was sent with ([`icrc_id`], through the receiving thread's
/// `kept` state).
pub(crate) fn check_datagram<'d>(kept: &mut IcrcKept, rx: RxAddr, from: SocketAddr, datagram: &'d [u8]) -> Received<'d> {
    let from_owner = from.ip() == rx.ip && from.port() == rx.owner_port;
    let relayed = !rx.owns_port() && from_owner && datagram.starts_with(&relay::MAGIC);
    // `to`: where the packet was sent (a relayed one: to the owner's port).
    let (from, to, bytes, relayed_id) = if relayed {
        match relay::decode(datagram) {
            Some(r) => (r.src, SocketAddr::new(rx.ip, rx.owner_port), r.packet, Some(r.id)),
            None => return Received { seen: None, verdict: Err(RxDrop::RelayHeader), relayed },
        }
    } else {
        (from, SocketAddr::new(rx.ip, rx.port), datagram, None)
    };
    let dropped = if relayed_id.is_some() { RxDrop::RelayedMalformed } else { RxDrop::Malformed };
    let packet = Packet::new_checked(bytes);
    let checked = match relayed_id {
        // The owner checked the ICRC and found the ID.
        Some(id) => Some(id),
        None => packet.as_ref().ok().and_then(|p| icrc_id(kept, from, to, p)),
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
    Received { seen, verdict, relayed }
}

/// Datagrams one `recvmmsg` takes at most (`NetSock::receive`).
pub(crate) const RX_BATCH: usize = 32;

/// Checked packets handed on together at most (`NetSock::receive`): a train of 64
/// MTU-sized packets (one GSO send of the requester) is one run.
pub(crate) const RX_RUN: usize = 64;

/// Checked packets of a run kept on the stack (`NetSock::receive`): a run this short,
/// what a latency-bound exchange receives at a time, costs no allocation.
pub(crate) const RX_RUN_INLINE: usize = 2;

/// A packet `NetSock::receive` checked: where it came from (for a relayed packet, its
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
/// `dispatch::receive_now`) reads datagrams into, one set per thread: [`RX_BATCH`] of
/// [`RX_DATAGRAM`] bytes, 2 MiB allocated zeroed (a block that large is usually mapped
/// fresh, its pages resident only once a datagram is written into them), with each one's
/// source address (`sys::DatagramBatch`: `recvmmsg`); and what the thread keeps to check
/// the ICRCs of what it reads ([`IcrcKept`]).
pub(crate) struct RxBatch {
    pub(super) datagrams: crate::sys::DatagramBatch<RX_BATCH, RX_DATAGRAM>,
    pub(super) icrc: IcrcKept,
}

impl RxBatch {
    pub(crate) fn new() -> RxBatch {
        RxBatch { datagrams: crate::sys::DatagramBatch::new(), icrc: IcrcKept::default() }
    }
}

/// Runs `f` with this thread's receive buffers ([`RxBatch`], one set per thread).
pub(crate) fn with_rx_batch<R>(f: impl FnOnce(&mut RxBatch) -> R) -> R {
    thread_local! {
        static BUF: std::cell::RefCell<RxBatch> = std::cell::RefCell::new(RxBatch::new());
    }
    BUF.with_borrow_mut(f)
}

/// Runs `f` with this thread's ICRC state for the packets it sends ([`IcrcKept`]: one
/// lookup of the thread's state per batch of packets, not per packet).
pub(super) fn with_tx_icrc<R>(f: impl FnOnce(&mut IcrcKept) -> R) -> R {
    thread_local! {
        static KEPT: std::cell::RefCell<IcrcKept> = std::cell::RefCell::new(IcrcKept::default());
    }
    KEPT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut kept) => f(&mut kept),
        Err(_) => f(&mut IcrcKept::default()),
    })
}

/// How many IPv4 flows' ICRC headers a thread keeps ([`IcrcKept::ipv4`]).
const FLOWS: usize = 4;

/// What one thread keeps to compute ICRCs cheaply: the pseudo header's share of the ICRC
/// for the last few IPv4 flows it met ([`icrc::Ipv4Flow`]: a connection's requests one way
/// and ACKs the other), and the IPv4 ID bases of the last few packet lengths it solved an
/// ID for ([`icrc::Ipv4IdBasis`]). Kept with the thread's receive buffers ([`RxBatch`])
/// for what it receives, and per thread for what it sends ([`with_tx_icrc`]), so a packet
/// costs the CRC of its own bytes and no lookup of the thread's state.
#[derive(Default)]
pub(crate) struct IcrcKept {
    flows: [Option<icrc::Ipv4Flow>; FLOWS],
    next: usize,
    bases: Vec<icrc::Ipv4IdBasis>,
}

impl IcrcKept {
    /// The ICRC of `roce` sent from `src:src_port` to `dst:dst_port` with IPv4
    /// Identification `id` (docs/rocev2-wire.md §2.5), what `icrc::ipv4_pseudo_with_id`
    /// returns.
    pub(super) fn ipv4(&mut self, src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16, id: u16, roce: &[u8]) -> u32 {
        let flow = match self.flows.iter().flatten().find(|f| f.is(src, dst, src_port, dst_port)) {
            Some(f) => *f,
            None => {
                let f = icrc::Ipv4Flow::new(src, dst, src_port, dst_port);
                self.flows[self.next] = Some(f);
                self.next = (self.next + 1) % FLOWS;
                f
            }
        };
        flow.icrc(id, roce)
    }

    /// The IPv4 ID whose effect on the ICRC of a `roce_len`-byte packet is `syndrome`
    /// (the received ICRC xor the one with ID 0), if one is. The ID's effect depends only
    /// on the packet's length: the bases of the last few lengths are kept (building one
    /// costs sixteen CRC shifts, as much as the rest of the packet's handling; a peer with
    /// non-zero IDs sends mostly packets of two or three lengths).
    fn solve_id(&mut self, roce_len: usize, syndrome: u32) -> Option<u16> {
        let at = match self.bases.iter().position(|b| b.roce_len() == roce_len) {
            Some(i) => i,
            None => {
                if self.bases.len() == ID_BASES {
                    self.bases.remove(0);
                }
                self.bases.push(icrc::Ipv4IdBasis::new(roce_len));
                self.bases.len() - 1
            }
        };
        self.bases[at].solve(syndrome)
    }
}

/// Whether the packet's ICRC is right, and under which IPv4 Identification: 0 (what rverbs
/// and any `IP_PMTUDISC_DO` sender use), else the one solved from the ICRC (docs/rocev2-wire.md
/// §2.5); IPv6 has no ID (0). `None`: corrupted.
fn icrc_id(kept: &mut IcrcKept, from: SocketAddr, to: SocketAddr, packet: &Packet<&[u8]>) -> Option<u16> {
    let body = packet.without_icrc();
    let got = packet.icrc();
    match (from.ip(), to.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let zero = kept.ipv4(src, dst, from.port(), to.port(), 0, body);
            if zero == got {
                return Some(0);
            }
            kept.solve_id(body.len(), got ^ zero)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            (icrc::compute_ipv6_pseudo(src, dst, from.port(), to.port(), body) == got).then_some(0)
        }
        _ => None,
    }
}

/// A UD SEND_ONLY packet to QP 0x12 from QP 0x34 carrying `payload` (its ICRC not
/// written), for the tests of the network transport.
#[cfg(test)]
pub(super) fn ud_packet(payload: &[u8]) -> Vec<u8> {
    use rverbs_proto::wire::{BthRepr, DethRepr, OpCode};
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// docs/rocev2-wire.md §2.5: rxe and NICs send non-zero IPv4 IDs; the receive side finds the
    /// ID from the ICRC instead of rejecting the packet.
    #[test]
    fn a_packet_sent_with_a_nonzero_ipv4_id_is_accepted_with_that_id() {
        let (src, dst) = (Ipv4Addr::new(10, 77, 0, 2), Ipv4Addr::new(10, 77, 0, 1));
        let from = SocketAddr::new(IpAddr::V4(src), 49152);
        let to = SocketAddr::new(IpAddr::V4(dst), 4791);
        let mut buf = ud_packet(b"rxe sends ids");
        let n = buf.len();
        let icrc = icrc::ipv4_pseudo_with_id(src, dst, from.port(), to.port(), 0x718c, &buf[..n - 4]);
        buf[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        let packet = Packet::new_checked(&buf[..]).unwrap();
        let kept = &mut IcrcKept::default();
        assert_eq!(icrc_id(kept, from, to, &packet), Some(0x718c));
        buf[20] ^= 1;
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_ne!(icrc_id(kept, from, to, &packet), Some(0x718c));
    }
}
