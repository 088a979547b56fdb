//! `wire_parse`: a UDP payload from the network through the RoCEv2 parser and the ICRC.
//!
//! Input: 12 bytes of addressing (IPv4 source, IPv4 destination, UDP source port, IPv4
//! Identification), then the datagram (the UDP payload, BTH to ICRC).
//!
//! Asserts:
//! - `Packet::new_checked`, `Repr::parse` and every header's own `Repr::parse` never panic,
//!   and after `check_len` no accessor panics;
//! - a parsed packet is exactly as long as its `Repr` says, its headers are those of its
//!   opcode, and parse → emit → parse gives the same `Repr` (emitting again gives the same
//!   bytes); each extension header round-trips the same way on its own;
//! - the transport descriptors built from it (`Request::from_repr`, `Response::from_repr`)
//!   give back the same headers through `to_repr`;
//! - the ICRC agrees with a recomputation written here from IBTA Annex A17 (masked IPv4 /
//!   IPv6 and UDP headers after eight 0xFF bytes, BTH byte 4 masked): the pseudo-header
//!   functions, `compute_ip_packet` on a real IP header with arbitrary masked fields, and
//!   `solve_ipv4_id`, which must find the Identification the ICRC was computed with; any
//!   ID `Ipv4IdBasis::solve` returns for an arbitrary syndrome must reproduce it.

use std::net::{Ipv4Addr, Ipv6Addr};

use rverbs_proto::rc::{Request, Response};
use rverbs_proto::wire::icrc::{self, Ipv4IdBasis, ICRC_LEN};
use rverbs_proto::wire::{aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, ieth, immdt, reth, xrceth};
use rverbs_proto::wire::{Operation, RocePacket, RoceRepr, Transport};

use crate::input::Input;

thread_local! {
    static BASES: std::cell::RefCell<std::collections::HashMap<usize, Ipv4IdBasis>> = Default::default();
}

/// The RoCEv2 UDP destination port (IBTA Annex A17).
pub const ROCE_PORT: u16 = 4791;

/// Bytes of addressing in front of the datagram.
pub const META_LEN: usize = 12;

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let src = Ipv4Addr::from(inp.u32().to_be_bytes());
    let dst = Ipv4Addr::from(inp.u32().to_be_bytes());
    let sport = inp.u16();
    let id = inp.u16();
    let dgram = inp.bytes(usize::MAX);

    packet_and_repr(dgram);
    headers(dgram);
    icrc_checks(src, dst, sport, id, dgram);
}

/// The whole-packet view and representation.
fn packet_and_repr(dgram: &[u8]) {
    // Repr::parse checks the length itself: no panic even on an unchecked view.
    let parsed = RoceRepr::parse(&RocePacket::new_unchecked(dgram));
    let Ok(packet) = RocePacket::new_checked(dgram) else {
        assert!(parsed.is_err(), "parse accepted what check_len refuses");
        return;
    };
    // After check_len no accessor panics, whatever the bytes hold.
    let range = packet.payload_range();
    assert!(range.start <= range.end && range.end + ICRC_LEN <= dgram.len());
    assert_eq!(packet.payload().len(), range.len());
    assert!(packet.pad().len() <= 3);
    assert_eq!(packet.without_icrc().len() + ICRC_LEN, dgram.len());
    let _ = (
        packet.icrc(),
        packet.header_len(),
        packet.bth().psn(),
        packet.bth().dest_qp(),
    );

    let Ok(repr) = parsed else { return };
    assert!(repr.headers_match_opcode(), "{repr:?}");
    assert_eq!(repr.buffer_len(), dgram.len(), "{repr:?}");
    assert_eq!(repr.payload_range(), range, "{repr:?}");
    assert_eq!(usize::from(repr.bth.pad_count), repr.pad_len(), "{repr:?}");
    if !repr.bth.opcode.has_payload() {
        assert_eq!(repr.payload_len, 0, "{repr:?}");
    }

    // parse → emit → parse.
    let mut out = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut RocePacket::new_unchecked(&mut out[..]));
    {
        let mut p = RocePacket::new_unchecked(&mut out[..]);
        p.payload_mut().copy_from_slice(packet.payload());
        p.set_icrc(packet.icrc());
    }
    let emitted = RocePacket::new_checked(&out[..]).expect("an emitted packet passes check_len");
    let again = RoceRepr::parse(&emitted).expect("an emitted packet parses");
    assert_eq!(again, repr);
    assert_eq!(emitted.payload(), packet.payload());
    assert!(emitted.pad().iter().all(|&b| b == 0), "emit writes zero pad");
    let mut out2 = vec![0x5a; again.buffer_len()];
    again.emit(&mut RocePacket::new_unchecked(&mut out2[..]));
    {
        let mut p = RocePacket::new_unchecked(&mut out2[..]);
        p.payload_mut().copy_from_slice(packet.payload());
        p.set_icrc(packet.icrc());
    }
    assert_eq!(out2, out, "emit is a function of the Repr alone");

    descriptors(&repr, packet.payload());
}

/// `Request` / `Response` conversions keep every header they carry.
fn descriptors(repr: &RoceRepr, payload: &[u8]) {
    let Some(op) = repr.bth.opcode.operation() else { return };
    if op.is_request() {
        let req = Request::from_repr(repr, payload);
        assert_eq!(req.payload_len as usize, repr.payload_len);
        if op == Operation::AtomicWrite && payload.len() >= 8 {
            assert!(req.atomic_write.is_some());
        }
        let back = req.to_repr(repr.bth.dest_qp);
        assert_eq!(back.bth.opcode, repr.bth.opcode);
        assert_eq!(back.bth.psn, repr.bth.psn);
        assert_eq!(back.bth.ack_req, repr.bth.ack_req);
        assert_eq!(back.bth.solicited, repr.bth.solicited);
        assert_eq!(back.bth.dest_qp, repr.bth.dest_qp);
        assert_eq!(back.payload_len, repr.payload_len);
        assert_eq!((back.deth, back.feth, back.reth), (repr.deth, repr.feth, repr.reth));
        assert_eq!(
            (back.atomic_eth, back.immdt, back.ieth),
            (repr.atomic_eth, repr.immdt, repr.ieth)
        );
        // XRC requests carry an XRCETH the descriptor does not (rverbs has no XRC data path).
        if repr.bth.opcode.transport() != Transport::Xrc {
            assert!(back.headers_match_opcode(), "{back:?}");
        }
    } else {
        let resp = Response::from_repr(repr);
        let back = resp.to_repr(repr.bth.dest_qp);
        assert_eq!((back.bth.opcode, back.bth.psn), (repr.bth.opcode, repr.bth.psn));
        assert_eq!(back.aeth, repr.aeth);
        assert_eq!(back.atomic_ack_eth, repr.atomic_ack_eth);
        assert_eq!(back.payload_len, repr.payload_len);
    }
}

/// Each extension header's own view and representation on the datagram's first bytes.
fn headers(buf: &[u8]) {
    macro_rules! round_trip {
        ($($m:ident),*) => {$(
            if let Ok(r) = $m::Repr::parse(&$m::Packet::new_unchecked(buf)) {
                assert!(buf.len() >= $m::HEADER_LEN);
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(&mut $m::Packet::new_unchecked(&mut out[..]));
                let again = $m::Repr::parse(&$m::Packet::new_unchecked(&out[..]))
                    .expect(concat!(stringify!($m), ": an emitted header parses"));
                assert_eq!(again, r, stringify!($m));
            }
        )*};
    }
    round_trip!(
        bth,
        aeth,
        atomic_ack_eth,
        atomic_eth,
        deth,
        feth,
        ieth,
        immdt,
        reth,
        xrceth
    );
}

/// The ICRC, against a recomputation from the rule.
fn icrc_checks(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, id: u16, dgram: &[u8]) {
    // `roce`: BTH to the last pad byte (any length: the pseudo functions take anything).
    let roce = &dgram[..dgram.len().saturating_sub(ICRC_LEN)];
    let want = reference_ipv4(src, dst, sport, ROCE_PORT, id, roce);
    assert_eq!(icrc::ipv4_pseudo_with_id(src, dst, sport, ROCE_PORT, id, roce), want);
    let zero = icrc::compute_ipv4_pseudo(src, dst, sport, ROCE_PORT, roce);
    assert_eq!(zero, reference_ipv4(src, dst, sport, ROCE_PORT, 0, roce));

    // A real IPv4 header, masked fields (TOS, TTL, checksums) set from the input.
    let mask_noise = dgram.first().copied().unwrap_or(0x5c);
    let ip = ipv4_packet(src, dst, sport, id, mask_noise, roce);
    let got = icrc::compute_ip_packet(&ip);
    if roce.len() >= bth::HEADER_LEN {
        assert_eq!(got, Ok(want));
    } else {
        assert!(got.is_err());
    }

    // Any ID the basis finds for an arbitrary syndrome reproduces that syndrome. A basis
    // costs sixteen CRC shifts, most of an execution: as the UDP transport does, one is
    // kept per length (and checked against `solve_ipv4_id`, which builds its own, when
    // it is built).
    let basis = BASES.with_borrow_mut(|bases| {
        bases
            .entry(roce.len())
            .or_insert_with(|| {
                // The Identification the ICRC was sealed with comes back.
                assert_eq!(icrc::solve_ipv4_id(src, dst, sport, ROCE_PORT, roce, want), Some(id));
                Ipv4IdBasis::new(roce.len())
            })
            .clone()
    });
    assert_eq!(basis.roce_len(), roce.len());
    let syndrome = if dgram.len() >= ICRC_LEN {
        u32::from_le_bytes(dgram[dgram.len() - ICRC_LEN..].try_into().expect("4 bytes"))
    } else {
        want
    };
    for s in [syndrome, syndrome ^ zero, want ^ zero] {
        if let Some(x) = basis.solve(s) {
            assert_eq!(icrc::ipv4_pseudo_with_id(src, dst, sport, ROCE_PORT, x, roce) ^ zero, s);
        }
    }
    assert_eq!(basis.solve(want ^ zero), Some(id));

    // IPv6: fully predictable, and the whole-packet function agrees.
    let (s6, d6) = (
        src.to_ipv6_mapped(),
        Ipv6Addr::from(u128::from(u32::from(dst)) << 64 | 0xfd00),
    );
    let want6 = reference_ipv6(s6, d6, sport, ROCE_PORT, roce);
    assert_eq!(icrc::compute_ipv6_pseudo(s6, d6, sport, ROCE_PORT, roce), want6);
    let ip6 = ipv6_packet(s6, d6, sport, mask_noise, roce);
    if roce.len() >= bth::HEADER_LEN {
        assert_eq!(icrc::compute_ip_packet(&ip6), Ok(want6));
    }
}

/// CRC-32 (IEEE) over eight 0xFF bytes (the pseudo-LRH), `masked` and `roce` with BTH
/// byte 4 (FECN, BECN, reserved) set to 0xFF: the ICRC rule of IBTA Annex A17, written
/// without the crate's code.
fn reference(masked: &[u8], roce: &[u8]) -> u32 {
    let mut all = vec![0xff; 8];
    all.extend_from_slice(masked);
    let at = all.len();
    all.extend_from_slice(roce);
    if roce.len() > 4 {
        all[at + 4] = 0xff;
    }
    crc32fast::hash(&all)
}

fn udp_len(roce: &[u8]) -> u16 {
    (8 + roce.len() + ICRC_LEN) as u16
}

/// IPv4 (no options, DF, ID `id`) and UDP headers with TOS, TTL, header checksum and UDP
/// checksum all-ones (masked).
fn reference_ipv4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, id: u16, roce: &[u8]) -> u32 {
    let ulen = udp_len(roce);
    let total = 20u16.wrapping_add(ulen);
    let mut h = vec![0x45, 0xff];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&[0x40, 0x00, 0xff, 17, 0xff, 0xff]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&ulen.to_be_bytes());
    h.extend_from_slice(&[0xff, 0xff]);
    reference(&h, roce)
}

/// IPv6 (traffic class, flow label, hop limit masked) and UDP headers.
fn reference_ipv6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, roce: &[u8]) -> u32 {
    let ulen = udp_len(roce);
    let mut h = vec![0x6f, 0xff, 0xff, 0xff];
    h.extend_from_slice(&ulen.to_be_bytes());
    h.extend_from_slice(&[17, 0xff]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&ulen.to_be_bytes());
    h.extend_from_slice(&[0xff, 0xff]);
    reference(&h, roce)
}

/// An IPv4 + UDP packet around `roce` as a sender would put it on the wire, with the
/// masked fields holding `noise`.
fn ipv4_packet(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, id: u16, noise: u8, roce: &[u8]) -> Vec<u8> {
    let ulen = udp_len(roce);
    let mut p = vec![0x45, noise];
    p.extend_from_slice(&20u16.wrapping_add(ulen).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0x00, noise ^ 0x40, 17, noise, !noise]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&ROCE_PORT.to_be_bytes());
    p.extend_from_slice(&ulen.to_be_bytes());
    p.extend_from_slice(&[noise, noise.rotate_left(3)]);
    p.extend_from_slice(roce);
    if roce.len() > 4 {
        // FECN/BECN as a congested switch would set them: masked too.
        p[28 + 4] ^= noise & 0xc0;
    }
    p
}

/// An IPv6 + UDP packet around `roce`, masked fields holding `noise`.
fn ipv6_packet(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, noise: u8, roce: &[u8]) -> Vec<u8> {
    let ulen = udp_len(roce);
    let mut p = vec![0x60 | (noise >> 4), noise, noise ^ 0x11, !noise];
    p.extend_from_slice(&ulen.to_be_bytes());
    p.extend_from_slice(&[17, noise]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&ROCE_PORT.to_be_bytes());
    p.extend_from_slice(&ulen.to_be_bytes());
    p.extend_from_slice(&[!noise, noise]);
    p.extend_from_slice(roce);
    p
}
