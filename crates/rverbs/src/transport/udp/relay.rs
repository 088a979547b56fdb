//! The relay between processes of one host: how a packet for a QP of another process
//! reaches it through the process that owns the address's RoCEv2 port, and the header
//! that carries it (docs/network.md, "Sockets and the relay").
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
//!   (`transport::net`), so the owner *relays* the checked packet, if the QP record names a
//!   live RC/UC QP: one datagram from `address:4791` to the port that process published
//!   for the address in its endpoint header (`Net::publish`,
//!   `shm::registry::Peer::net_port`; the network namespace must be the owner's too),
//!   holding a relay header ([`encode`]: magic, version, the packet's original source
//!   address and port, the IPv4 ID its ICRC was checked with) and the packet as received.
//!   That process's socket takes a datagram as a relay only when it comes from its own
//!   address and port 4791 and starts with the magic (`super::rx::check_datagram`); it
//!   strips the header and delivers the packet as if it had come from the original source
//!   (no second ICRC check: the owner did it). A relay datagram that does not decode is
//!   dropped and counted (`NetStats::bad_relay`). The relay's answers go out from the
//!   process's own socket straight to the peer's port 4791.
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
//! The relay header the owner puts before a packet it passes on: 28 bytes, then the
//! packet as received (BTH to ICRC):
//!
//! ```text
//! 0..4   magic ff 'r' 'l' 'y' (0xff: a BTH opcode nobody serves)
//! 4      version (1)
//! 5      family of the original source: 4 or 6
//! 6..8   original source UDP port, big-endian
//! 8..10  the IPv4 Identification the ICRC was checked with, big-endian (IPv6: 0)
//! 10..12 zero
//! 12..28 original source address (IPv4: 4 bytes, then 12 zero bytes)
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

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

/// Sends from `sock` (the owner's socket of address `ip`) to port `port` of `ip` the relay
/// datagram of the checked packet `packet`, which came from `src` with IPv4 ID `id`.
/// Returns whether it was sent.
pub(super) fn send(sock: &UdpSocket, ip: IpAddr, port: u16, src: SocketAddr, id: u16, packet: &[u8]) -> bool {
    thread_local! {
        static OUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    OUT.with_borrow_mut(|out| {
        encode(src, id, packet, out);
        let to = SocketAddr::new(ip, port);
        sock.send_to(out, to).map_err(|err| tracing::debug!(%to, %err, "relay failed")).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay header carries the original source (IPv4 with its ID, IPv6) and the
    /// packet unchanged; what this code did not write is rejected: any truncation of the
    /// header, another magic or version, an unknown family, non-zero reserved bytes or
    /// IPv4 padding, an ID with an IPv6 source.
    #[test]
    fn relay_header_round_trips_and_rejects_what_it_did_not_write() {
        let packet = b"a packet as received, BTH to ICRC".to_vec();
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 67, 0, 2)), 49152);
        let v6 = SocketAddr::new(IpAddr::V6("fd67::2".parse::<Ipv6Addr>().unwrap()), 4791);
        let mut out = Vec::new();
        encode(v4, 0x718c, &packet, &mut out);
        assert_eq!(out.len(), LEN + packet.len());
        assert_eq!(&out[..4], &MAGIC);
        assert_eq!(decode(&out), Some(Relay { src: v4, id: 0x718c, packet: &packet }));
        let v4_datagram = out.clone();
        encode(v6, 0x718c, &packet, &mut out);
        // IPv6 has no ID: none is carried.
        assert_eq!(decode(&out), Some(Relay { src: v6, id: 0, packet: &packet }));
        // A header with nothing after it decodes (the packet then fails to parse).
        assert_eq!(decode(&out[..LEN]).map(|r| r.packet.len()), Some(0));
        for n in 0..LEN {
            assert_eq!(decode(&out[..n]), None, "truncated to {n} bytes");
            assert_eq!(decode(&v4_datagram[..n]), None, "truncated to {n} bytes");
        }
        let spoiled = |i: usize, v: u8| {
            let mut d = v4_datagram.clone();
            d[i] = v;
            decode(&d).is_none()
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
        assert_eq!(decode(&d), None);
    }
}
