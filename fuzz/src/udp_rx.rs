//! `udp_rx`: the UDP transport's receive path of the device crate (`rverbs`,
//! `transport/udp/rx.rs` and `transport/dispatch.rs`), from a received buffer to where each packet goes, without
//! sockets: the cutting of a GRO train into datagrams, the relay header a non-owner
//! process accepts only from the owner of its address's RoCEv2 port, the parse and the
//! ICRC under the IPv4 Identification, the routing of a checked packet (QP1 MADs, relay
//! to another endpoint, own requests and responses, UD), the GRH a UD receive gets, and
//! the QP1 dispatch and receive records of a MAD.
//!
//! Input: a flags byte (bit 0 IPv6, bit 1 this socket owns the port, bit 2 the datagram
//! comes from the owner's port, bit 3 a GRO segment size is given), the segment size
//! (u16), the source address (16 bytes; IPv4 uses the first 4) and port (u16), this
//! process's endpoint (u8), then the received buffer.
//!
//! Asserts: the train's datagrams are the buffer cut in order, none larger than the
//! segment size; a relay header is taken only by a non-owner and only from the owner's
//! port, and then the datagram is exactly what the owner's encoder writes for the packet
//! it hands over (decode → encode is the identity); the packet handed on lies inside the
//! datagram and its headers and payload exactly fill it; a packet taken directly has the
//! ICRC of its source and destination (ID 0 recomputed; IPv6 always ID 0); every packet
//! an owner accepts, relayed to a non-owner, comes out there unchanged (source, ID,
//! bytes, headers); the route agrees with the headers (a MAD is a UD SEND_ONLY to QP1, a
//! relayed QP is another endpoint's, a UD delivery has a DETH); a UD receive's GRH has
//! the datagram's real lengths and (IPv4) a valid header checksum; a MAD's receiver
//! endpoint fits the endpoint byte and its receive record round trips; any 296 bytes of
//! a QP1 FIFO parse.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rverbs::fuzzing::udp::{self, Route, RxAddr};
use rverbs_proto::wire::icrc;
use rverbs_proto::wire::roce::Packet;
use rverbs_proto::wire::Transport;

use crate::input::Input;

/// This host's addresses.
pub const LOCAL_V4: Ipv4Addr = Ipv4Addr::new(10, 66, 0, 2);
/// This host's IPv6 address.
pub const LOCAL_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
/// The owner's port.
pub const OWNER_PORT: u16 = 4791;
/// A non-owner's port.
pub const OTHER_PORT: u16 = 40123;

/// The 25 bytes before the buffer (the seed generator's side).
pub fn header(v6: bool, owner: bool, from_owner: bool, gso: Option<u16>, from: SocketAddr, ep: u8) -> Vec<u8> {
    let flags = u8::from(v6) | u8::from(owner) << 1 | u8::from(from_owner) << 2 | u8::from(gso.is_some()) << 3;
    let mut h = vec![flags];
    h.extend_from_slice(&gso.unwrap_or(0).to_le_bytes());
    let mut a = [0u8; 16];
    match from.ip() {
        IpAddr::V4(v4) => a[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => a = v6.octets(),
    }
    h.extend_from_slice(&a);
    h.extend_from_slice(&from.port().to_le_bytes());
    h.push(ep);
    h
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let gso = inp.u16();
    let mut a = [0u8; 16];
    a.copy_from_slice(&{
        let mut b = inp.bytes(16).to_vec();
        b.resize(16, 0);
        b
    });
    let from_port = inp.u16();
    let ep = u32::from(inp.u8());
    let buffer = inp.bytes(usize::MAX);

    let v6 = flags & 1 != 0;
    let owner = flags & 2 != 0;
    let ip = if v6 { IpAddr::V6(LOCAL_V6) } else { IpAddr::V4(LOCAL_V4) };
    let rx = RxAddr { ip, port: if owner { OWNER_PORT } else { OTHER_PORT }, owner_port: OWNER_PORT };
    let from = if flags & 4 != 0 {
        SocketAddr::new(ip, OWNER_PORT)
    } else if v6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), from_port)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), from_port)
    };
    let segment = (flags & 8 != 0).then_some(usize::from(gso)).filter(|&s| s != 0);

    // The train, cut.
    let mut parts: Vec<&[u8]> = Vec::new();
    udp::for_each_segment(buffer, segment, |d| parts.push(d));
    assert!(!parts.is_empty());
    assert_eq!(parts.concat(), buffer, "the datagrams are the buffer, in order");
    if let Some(s) = segment.filter(|&s| s < buffer.len()) {
        assert!(parts.iter().all(|d| !d.is_empty() && d.len() <= s));
        assert_eq!(parts.len(), buffer.len().div_ceil(s));
    } else {
        assert_eq!(parts.len(), 1);
    }
    for d in parts {
        datagram(rx, from, d, ep);
    }

    // A QP1 FIFO's records come from other processes of the user.
    if let Some(rec) = buffer.get(..udp::RECORD_LEN) {
        let rec: &[u8; udp::RECORD_LEN] = rec.try_into().expect("record length");
        match udp::mad_record_parse(rec) {
            Ok(ep) => assert_ne!(ep, u32::MAX),
            Err(_) => assert_eq!(&rec[..4], &u32::MAX.to_ne_bytes()),
        }
    }
}

fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

fn datagram(rx: RxAddr, from: SocketAddr, d: &[u8], ep: u32) {
    let r = udp::check_datagram(rx, from, d);
    let takes_relay = rx.port != rx.owner_port && from == SocketAddr::new(rx.ip, rx.owner_port) && d.starts_with(&[0xff, b'r', b'l', b'y']);
    let decoded = udp::relay_decode(d);
    match &r.seen {
        None => {
            assert!(takes_relay && decoded.is_none(), "only an undecodable relay header goes untraced");
            assert_eq!(r.verdict.as_ref().err().map(String::as_str), Some("RelayHeader"));
        }
        Some((sfrom, sto, _, bytes)) => {
            assert!(inside(bytes, d));
            if takes_relay {
                let (src, _, packet) = decoded.expect("a relayed datagram decodes");
                assert_eq!((*sfrom, *sto, *bytes), (src, SocketAddr::new(rx.ip, rx.owner_port), packet));
                assert_eq!(bytes.len() + udp::RELAY_LEN, d.len());
            } else {
                assert_eq!((*sfrom, *sto, *bytes), (from, SocketAddr::new(rx.ip, rx.port), d));
            }
        }
    }
    let Ok(p) = &r.verdict else { return };
    assert!(inside(p.bytes, d));
    assert_eq!(p.repr.buffer_len(), p.bytes.len(), "headers, payload, pad and ICRC fill the packet");
    if p.from.is_ipv6() {
        assert_eq!(p.id, 0, "IPv6 has no Identification");
    }
    if takes_relay {
        // Decode → encode is the identity.
        let mut again = Vec::new();
        udp::relay_encode(p.from, p.id, p.bytes, &mut again);
        assert_eq!(again, d, "a relay datagram is exactly what the owner writes");
    } else {
        assert_eq!(p.from, from);
        let packet = Packet::new_checked(p.bytes).expect("checked");
        let to = SocketAddr::new(rx.ip, rx.port);
        if p.id == 0 {
            let want = match (from.ip(), to.ip()) {
                (IpAddr::V4(s), IpAddr::V4(t)) => icrc::compute_ipv4_pseudo(s, t, from.port(), to.port(), packet.without_icrc()),
                (IpAddr::V6(s), IpAddr::V6(t)) => icrc::compute_ipv6_pseudo(s, t, from.port(), to.port(), packet.without_icrc()),
                _ => panic!("a packet across address families was accepted"),
            };
            assert_eq!(packet.icrc(), want);
        } else {
            assert!(from.is_ipv4() && rx.ip.is_ipv4());
        }
        // The owner relays it to a process behind the same port: it arrives unchanged.
        let mut relayed = Vec::new();
        udp::relay_encode(p.from, p.id, p.bytes, &mut relayed);
        let other = RxAddr { ip: rx.ip, port: OTHER_PORT, owner_port: rx.port };
        if other.port != other.owner_port {
            let r2 = udp::check_datagram(other, SocketAddr::new(rx.ip, rx.port), &relayed);
            let q = r2.verdict.expect("a packet the owner accepted is accepted relayed");
            assert_eq!((q.from, q.id, q.bytes, q.repr), (p.from, p.id, p.bytes, p.repr));
        }
    }
    route(rx, p.from, &p.repr, Packet::new_checked(p.bytes).expect("checked").payload(), p.bytes.len(), ep);
}

fn route(rx: RxAddr, from: SocketAddr, repr: &rverbs_proto::wire::roce::Repr, payload: &[u8], len: usize, ep: u32) {
    let transport = repr.bth.opcode.transport();
    let qp = repr.bth.dest_qp;
    match udp::route(ep, repr) {
        Route::Mad { qkey } => {
            assert!(transport == Transport::Ud && qp == 1);
            assert_eq!(qkey, repr.deth.map_or(0, |d| d.qkey));
            grh(rx, from, repr, len);
            if let Ok(mad) = <&[u8; udp::MAD_LEN]>::try_from(payload) {
                if let Some(Some(to)) = udp::mad_receiver(mad) {
                    assert!(to < 256, "an endpoint number is 8 bits");
                }
                let canonical = |ip: IpAddr| match ip {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                    v4 => v4,
                };
                let (peer, local) = (canonical(from.ip()), rx.ip);
                assert_eq!(udp::mad_record_round_trip(peer, local, mad), (peer, local, *mad));
            }
        }
        Route::Relay { qpn } => {
            // XRC is routed and relayed as RC is (docs/network.md, "XRC across hosts").
            assert!(matches!(transport, Transport::Rc | Transport::Uc | Transport::Xrc) && qpn == qp);
            assert_ne!(udp::endpoint_of(qpn), ep);
        }
        Route::Request { qpn } | Route::Response { qpn } => {
            assert!(matches!(transport, Transport::Rc | Transport::Uc | Transport::Xrc) && qpn == qp);
            assert_eq!(udp::endpoint_of(qpn), ep);
            assert_eq!(repr.bth.opcode.is_request(), matches!(udp::route(ep, repr), Route::Request { .. }));
        }
        Route::Ud { qpn, qkey } => {
            assert!(transport == Transport::Ud && qpn == qp && qp != 1);
            assert_eq!(Some(qkey), repr.deth.map(|d| d.qkey));
            grh(rx, from, repr, len);
        }
        Route::Unserved => {}
    }
}

/// The GRH area of a UD receive: the IP header the packet came with.
fn grh(rx: RxAddr, from: SocketAddr, repr: &rverbs_proto::wire::roce::Repr, len: usize) {
    let h = udp::grh(from.ip(), rx.ip, repr.payload_len, repr.immdt.is_some());
    match (from.ip(), rx.ip) {
        (IpAddr::V4(s), IpAddr::V4(t)) => {
            let ip = &h[20..];
            assert_eq!(ip[0], 0x45);
            assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), 20 + 8 + len, "IPv4 total length");
            let sum: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
            let folded = (sum & 0xffff) + (sum >> 16);
            assert_eq!((folded & 0xffff) + (folded >> 16), 0xffff, "IPv4 header checksum");
            assert_eq!((&ip[12..16], &ip[16..20]), (&s.octets()[..], &t.octets()[..]));
        }
        _ => {
            assert_eq!(h[0] >> 4, 6);
            assert_eq!(usize::from(u16::from_be_bytes([h[4], h[5]])), 8 + len, "IPv6 payload length");
        }
    }
}
