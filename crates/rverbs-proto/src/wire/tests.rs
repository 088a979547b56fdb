//! Tests across headers: every opcode, truncation, the ICRC test vectors as whole packets, and
//! property tests of emit/parse and the ICRC.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use proptest::sample::select;

use super::icrc::{self, ICRC_LEN};
use super::*;

const ROCE_PORT: u16 = 4791;

const BTH_TEMPL: BthRepr = BthRepr {
    opcode: OpCode::RcSendOnly,
    solicited: false,
    migreq: false,
    pad_count: 0,
    pkey: 0xffff,
    fecn: false,
    becn: false,
    dest_qp: 0x00_0123,
    ack_req: false,
    psn: 0x00_0456,
};

/// A `Repr` for `opcode` with every header it needs filled with distinct values.
fn repr_for(opcode: OpCode, payload_len: usize) -> RoceRepr {
    let mut repr = RoceRepr::new(
        BthRepr {
            opcode,
            ..BTH_TEMPL
        },
        payload_len,
    );
    repr.bth.pad_count = repr.pad_len() as u8;
    for header in opcode.ext_headers().expect("known opcode") {
        match header {
            ExtHeader::Deth => {
                repr.deth = Some(DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 0x42,
                })
            }
            ExtHeader::XrcEth => repr.xrceth = Some(XrcEthRepr { xrc_srq: 0x77 }),
            ExtHeader::Feth => {
                repr.feth = Some(FethRepr {
                    selectivity: Selectivity::WholeMr,
                    placement: Placement::PERSISTENCE,
                })
            }
            ExtHeader::Reth => {
                repr.reth = Some(RethRepr {
                    va: 0x7f00_0000_1000,
                    rkey: 0x1234,
                    dma_len: 8,
                })
            }
            ExtHeader::AtomicEth => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: 0x7f00_0000_2000,
                    rkey: 0x1235,
                    swap_add: 5,
                    compare: 6,
                })
            }
            ExtHeader::Aeth => {
                repr.aeth = Some(AethRepr {
                    syndrome: Syndrome::ACK,
                    msn: 9,
                })
            }
            ExtHeader::AtomicAckEth => {
                repr.atomic_ack_eth = Some(AtomicAckEthRepr { original: 0xdead })
            }
            ExtHeader::ImmDt => repr.immdt = Some(ImmDtRepr { imm: 0xcafe_f00d }),
            ExtHeader::Ieth => repr.ieth = Some(IethRepr { rkey: 0x4321 }),
            ExtHeader::CnpReserved => {}
        }
    }
    repr
}

/// Emits `repr` with payload bytes 0, 1, 2, … and a dummy ICRC.
fn emit(repr: &RoceRepr) -> Vec<u8> {
    let mut bytes = vec![0xa5; repr.buffer_len()];
    let mut packet = RocePacket::new_unchecked(&mut bytes[..]);
    repr.emit(&mut packet);
    for (i, byte) in packet.payload_mut().iter_mut().enumerate() {
        *byte = i as u8;
    }
    packet.set_icrc(0x0bad_c0de);
    bytes
}

#[test]
fn all_opcodes_round_trip() {
    for byte in 0..=u8::MAX {
        assert_eq!(u8::from(OpCode::from(byte)), byte);
    }
    for &opcode in OpCode::KNOWN {
        let lens: &[usize] = if opcode.has_payload() {
            &[0, 1, 2, 3, 4, 5, 256]
        } else {
            &[0]
        };
        for &payload_len in lens {
            let repr = repr_for(opcode, payload_len);
            assert!(repr.headers_match_opcode(), "{opcode:?}");
            assert_eq!(Some(repr.header_len()), opcode.header_len(), "{opcode:?}");
            let bytes = emit(&repr);
            assert_eq!(bytes.len() % 4, 0, "{opcode:?}");
            let packet = RocePacket::new_checked(&bytes[..]).unwrap();
            assert_eq!(packet.bth().opcode(), opcode);
            assert_eq!(
                RoceRepr::parse(&packet),
                Ok(repr),
                "{opcode:?} payload {payload_len}"
            );
            assert_eq!(packet.payload_range(), repr.payload_range());
            assert_eq!(packet.payload().len(), payload_len);
            assert!(packet
                .payload()
                .iter()
                .enumerate()
                .all(|(i, &b)| b == i as u8));
            assert_eq!(packet.icrc(), 0x0bad_c0de);
        }
    }
}

#[test]
fn every_prefix_of_every_opcode_is_refused() {
    for &opcode in OpCode::KNOWN {
        let bytes = emit(&repr_for(opcode, 0));
        assert!(RoceRepr::parse(&RocePacket::new_checked(&bytes[..]).unwrap()).is_ok());
        for len in 0..bytes.len() {
            let prefix = &bytes[..len];
            assert_eq!(
                RocePacket::new_checked(prefix),
                Err(Error),
                "{opcode:?} len {len}"
            );
            assert_eq!(
                RoceRepr::parse(&RocePacket::new_unchecked(prefix)),
                Err(Error),
                "{opcode:?} len {len}"
            );
        }
    }
}

#[test]
fn every_prefix_of_every_header_is_refused() {
    let bytes = [0u8; 28];
    for len in 0..bytes.len() {
        let b = &bytes[..len];
        assert_eq!(
            len >= bth::HEADER_LEN,
            BthRepr::parse(&BthPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= reth::HEADER_LEN,
            RethRepr::parse(&RethPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= aeth::HEADER_LEN,
            AethRepr::parse(&AethPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= atomic_eth::HEADER_LEN,
            AtomicEthRepr::parse(&AtomicEthPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= atomic_ack_eth::HEADER_LEN,
            AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= immdt::HEADER_LEN,
            ImmDtRepr::parse(&ImmDtPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= ieth::HEADER_LEN,
            IethRepr::parse(&IethPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= deth::HEADER_LEN,
            DethRepr::parse(&DethPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= feth::HEADER_LEN,
            FethRepr::parse(&FethPacket::new_unchecked(b)).is_ok()
        );
        assert_eq!(
            len >= xrceth::HEADER_LEN,
            XrcEthRepr::parse(&XrcEthPacket::new_unchecked(b)).is_ok()
        );
    }
}

/// ICRC test vectors, IP header to ICRC; `|` separates the IP, UDP and BTH headers from the
/// rest. V1–V3 (RC SEND_ONLY over IPv4, RC ACKNOWLEDGE, RC SEND_ONLY over IPv6) agree with
/// scapy's `contrib/roce` ICRC; V4 is a ConnectX-4 Lx CNP from scapy's `test/contrib/roce.uts`.
pub(crate) const V1: &str = concat!(
    "45000034123440004011a531c0a80101c0a80102 | c12312b700200000 | ",
    "0430ffff0000001180000100 | 68656c6c6f000000 78fcce4e",
);
/// V1's masked buffer (the ICRC input after the pseudo-LRH), IP header to pad.
pub(crate) const V1_MASKED: &str = concat!(
    "45ff003412344000ff11ffffc0a80101c0a80102 | c12312b70020ffff | ",
    "0430ffffff00001180000100 | 68656c6c6f000000",
);
pub(crate) const V2: &str = concat!(
    "45000030123440004011a535c0a80102c0a80101 | c12312b7001c0000 | ",
    "1100ffff0000002200000100 | 1f000001 70c676e5",
);
pub(crate) const V3: &str = concat!(
    "612abcde00201140 fd000000000000000000000000000001 fd000000000000000000000000000002 | ",
    "c12312b7002099e5 | 0400ffff0000001180000300 | 76362068656c6c6f b58bf2d1",
);
pub(crate) const V4: &str = concat!(
    "45c2003c718c400040119161 0a001101 0a001201 | 000012b700280000 | 8100ffff 40000118 00000000 | ",
    "00000000000000000000000000000000 | 82fd002a",
);

/// Decodes a hex string, ignoring spaces and `|`.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    let pair = |p: &[u8]| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap();
    digits.chunks(2).map(pair).collect()
}

#[test]
fn v1_send_only_parses_as_a_packet() {
    // UDP payload: after 20 + 8 bytes.
    let wire = hex(V1);
    let packet = RocePacket::new_checked(&wire[28..]).unwrap();
    let repr = RoceRepr::parse(&packet).unwrap();
    assert_eq!(
        repr,
        RoceRepr::new(
            BthRepr {
                opcode: OpCode::RcSendOnly,
                pad_count: 3,
                dest_qp: 0x11,
                ack_req: true,
                psn: 0x100,
                ..BTH_TEMPL
            },
            5
        )
    );
    assert_eq!(packet.payload(), b"hello");
    assert_eq!(&wire[28..][repr.payload_range()], b"hello");
    assert_eq!(packet.icrc(), 0x4ece_fc78);
    let (src, dst) = (Ipv4Addr::new(192, 168, 1, 1), Ipv4Addr::new(192, 168, 1, 2));
    assert_eq!(
        icrc::solve_ipv4_id(
            src,
            dst,
            0xc123,
            ROCE_PORT,
            packet.without_icrc(),
            packet.icrc()
        ),
        Some(0x1234)
    );
    // Emitting the parsed Repr gives back the same bytes.
    let mut out = emit(&repr);
    RocePacket::new_unchecked(&mut out[..])
        .payload_mut()
        .copy_from_slice(b"hello");
    RocePacket::new_unchecked(&mut out[..]).set_icrc(0x4ece_fc78);
    assert_eq!(out, wire[28..]);
}

#[test]
fn v2_acknowledge_parses_as_a_packet() {
    let wire = hex(V2);
    let packet = RocePacket::new_checked(&wire[28..]).unwrap();
    let repr = RoceRepr::parse(&packet).unwrap();
    let bth = BthRepr {
        opcode: OpCode::RcAcknowledge,
        dest_qp: 0x22,
        psn: 0x100,
        ..BTH_TEMPL
    };
    let aeth = Some(AethRepr {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: 1,
    });
    assert_eq!(
        repr,
        RoceRepr {
            aeth,
            ..RoceRepr::new(bth, 0)
        }
    );
    assert_eq!(packet.icrc(), 0xe576_c670);
}

#[test]
fn v3_ipv6_send_only_parses_and_verifies() {
    let wire = hex(V3);
    let packet = RocePacket::new_checked(&wire[48..]).unwrap();
    let repr = RoceRepr::parse(&packet).unwrap();
    assert_eq!(repr.bth.opcode, OpCode::RcSendOnly);
    assert_eq!(repr.bth.psn, 0x300);
    assert_eq!(repr.bth.pad_count, 0);
    assert_eq!(packet.payload(), b"v6 hello");
    let (src, dst) = (
        "fd00::1".parse::<Ipv6Addr>().unwrap(),
        "fd00::2".parse::<Ipv6Addr>().unwrap(),
    );
    assert_eq!(
        icrc::compute_ipv6_pseudo(src, dst, 0xc123, ROCE_PORT, packet.without_icrc()),
        packet.icrc()
    );
}

#[test]
fn v4_hardware_cnp_parses_and_solves() {
    let wire = hex(V4);
    let packet = RocePacket::new_checked(&wire[28..]).unwrap();
    let repr = RoceRepr::parse(&packet).unwrap();
    let bth = BthRepr {
        opcode: OpCode::Cnp,
        becn: true,
        dest_qp: 0x118,
        psn: 0,
        ..BTH_TEMPL
    };
    assert_eq!(repr, RoceRepr::new(bth, 0));
    assert_eq!(repr.header_len(), 28);
    let (src, dst) = (Ipv4Addr::new(10, 0, 17, 1), Ipv4Addr::new(10, 0, 18, 1));
    assert_eq!(
        icrc::solve_ipv4_id(src, dst, 0, ROCE_PORT, packet.without_icrc(), packet.icrc()),
        Some(0x718c)
    );
}

#[test]
fn error_displays_and_is_std_error() {
    let error: Box<dyn std::error::Error> = Box::new(Error);
    assert_eq!(error.to_string(), "malformed RoCEv2 packet");
}

fn arb_syndrome() -> impl Strategy<Value = Syndrome> {
    (0u8..3, 0u8..32).prop_map(|(kind, value)| match kind {
        0 => Syndrome::Ack { credits: value },
        1 => Syndrome::RnrNak { timer: value },
        _ => Syndrome::Nak(NakCode::from(value)),
    })
}

const U24: core::ops::Range<u32> = 0..1 << 24;

fn arb_bth() -> impl Strategy<Value = BthRepr> {
    (
        select(OpCode::KNOWN),
        any::<[bool; 5]>(),
        any::<u16>(),
        U24,
        U24,
    )
        .prop_map(
            |(opcode, [solicited, migreq, fecn, becn, ack_req], pkey, dest_qp, psn)| BthRepr {
                opcode,
                solicited,
                migreq,
                pad_count: 0,
                pkey,
                fecn,
                becn,
                dest_qp,
                ack_req,
                psn,
            },
        )
}

/// Any well-formed packet: a known opcode, exactly its headers, random field values.
fn arb_repr() -> impl Strategy<Value = RoceRepr> {
    let headers = (
        (any::<u32>(), U24).prop_map(|(qkey, src_qp)| DethRepr { qkey, src_qp }),
        U24.prop_map(|xrc_srq| XrcEthRepr { xrc_srq }),
        (0u8..4, 0u8..16).prop_map(|(sel, plt)| FethRepr {
            selectivity: Selectivity::from(sel),
            placement: Placement::from_bits_retain(plt),
        }),
        any::<(u64, u32, u32)>().prop_map(|(va, rkey, dma_len)| RethRepr { va, rkey, dma_len }),
        any::<(u64, u32, u64, u64)>().prop_map(|(va, rkey, swap_add, compare)| AtomicEthRepr {
            va,
            rkey,
            swap_add,
            compare,
        }),
        (arb_syndrome(), U24).prop_map(|(syndrome, msn)| AethRepr { syndrome, msn }),
        any::<u64>().prop_map(|original| AtomicAckEthRepr { original }),
        any::<u32>().prop_map(|imm| ImmDtRepr { imm }),
        any::<u32>().prop_map(|rkey| IethRepr { rkey }),
    );
    (arb_bth(), headers, 0usize..300).prop_map(|(bth, h, payload_len)| {
        let payload_len = if bth.opcode.has_payload() {
            payload_len
        } else {
            0
        };
        let mut repr = RoceRepr::new(bth, payload_len);
        repr.bth.pad_count = repr.pad_len() as u8;
        let wanted = bth.opcode.ext_headers().unwrap();
        let want = |header| wanted.contains(&header);
        repr.deth = Some(h.0).filter(|_| want(ExtHeader::Deth));
        repr.xrceth = Some(h.1).filter(|_| want(ExtHeader::XrcEth));
        repr.feth = Some(h.2).filter(|_| want(ExtHeader::Feth));
        repr.reth = Some(h.3).filter(|_| want(ExtHeader::Reth));
        repr.atomic_eth = Some(h.4).filter(|_| want(ExtHeader::AtomicEth));
        repr.aeth = Some(h.5).filter(|_| want(ExtHeader::Aeth));
        repr.atomic_ack_eth = Some(h.6).filter(|_| want(ExtHeader::AtomicAckEth));
        repr.immdt = Some(h.7).filter(|_| want(ExtHeader::ImmDt));
        repr.ieth = Some(h.8).filter(|_| want(ExtHeader::Ieth));
        repr
    })
}

/// A real IPv4 header + UDP header in front of `roce` (BTH..pad), with the given ID, TOS,
/// TTL and garbage checksums.
fn ipv4_packet(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    id: u16,
    tos: u8,
    ttl: u8,
    roce: &[u8],
) -> Vec<u8> {
    let udp_len = (8 + roce.len() + ICRC_LEN) as u16;
    let mut p = vec![0x45, tos];
    p.extend_from_slice(&(20 + udp_len).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0x00, ttl, 17, 0xde, 0xad]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&ROCE_PORT.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0xbe, 0xef]);
    p.extend_from_slice(roce);
    p
}

proptest! {
    #[test]
    fn emit_then_parse_round_trips(repr in arb_repr()) {
        prop_assert!(repr.headers_match_opcode());
        let bytes = emit(&repr);
        prop_assert_eq!(bytes.len(), repr.buffer_len());
        let packet = RocePacket::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(RoceRepr::parse(&packet), Ok(repr));
        prop_assert_eq!(packet.payload_range(), repr.payload_range());
        prop_assert!(packet.pad().iter().all(|&b| b == 0));
    }

    #[test]
    fn parse_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..96),
        opcode in select(OpCode::KNOWN),
    ) {
        let _ = RoceRepr::parse(&RocePacket::new_unchecked(&bytes[..]));
        // Again with a known opcode and TVer 0, to reach past the BTH.
        let mut bytes = bytes;
        if bytes.len() >= 2 {
            bytes[0] = opcode.into();
            bytes[1] &= 0xf0;
        }
        if let Ok(packet) = RocePacket::new_checked(&bytes[..]) {
            let _ = (packet.payload(), packet.pad(), packet.icrc(), packet.without_icrc());
            if let Ok(repr) = RoceRepr::parse(&packet) {
                prop_assert_eq!(repr.buffer_len(), bytes.len());
                prop_assert!(repr.headers_match_opcode());
            }
        }
        let _ = icrc::compute_ip_packet(&bytes);
    }

    #[test]
    fn ipv4_icrc_masks_tos_ttl_and_solves_the_id(
        repr in arb_repr(),
        src in any::<[u8; 4]>(),
        dst in any::<[u8; 4]>(),
        sport in any::<u16>(),
        id in any::<u16>(),
        tos in any::<u8>(),
        ttl in any::<u8>(),
    ) {
        let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
        let bytes = emit(&repr);
        let roce = RocePacket::new_checked(&bytes[..]).unwrap().without_icrc().to_vec();
        let pseudo = icrc::compute_ipv4_pseudo(src, dst, sport, ROCE_PORT, &roce);
        let on_wire = |id, tos, ttl| {
            icrc::compute_ip_packet(&ipv4_packet(src, dst, sport, id, tos, ttl, &roce)).unwrap()
        };
        prop_assert_eq!(on_wire(0, tos, ttl), pseudo);
        let with_id = on_wire(id, tos, ttl);
        prop_assert_eq!(with_id, on_wire(id, !tos, ttl ^ 1));
        prop_assert_eq!(icrc::solve_ipv4_id(src, dst, sport, ROCE_PORT, &roce, with_id), Some(id));
    }

    #[test]
    fn ipv6_icrc_masks_class_flow_and_hop_limit(
        repr in arb_repr(),
        src in any::<[u8; 16]>(),
        dst in any::<[u8; 16]>(),
        sport in any::<u16>(),
        class_flow in 0u32..1 << 28,
        hop in any::<u8>(),
    ) {
        let bytes = emit(&repr);
        let roce = RocePacket::new_checked(&bytes[..]).unwrap().without_icrc().to_vec();
        let udp_len = (8 + roce.len() + ICRC_LEN) as u16;
        let mut p = (6 << 28 | class_flow).to_be_bytes().to_vec();
        p.extend_from_slice(&udp_len.to_be_bytes());
        p.extend_from_slice(&[17, hop]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&ROCE_PORT.to_be_bytes());
        p.extend_from_slice(&udp_len.to_be_bytes());
        p.extend_from_slice(&[0x12, 0x34]);
        p.extend_from_slice(&roce);
        let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        let pseudo = icrc::compute_ipv6_pseudo(src, dst, sport, ROCE_PORT, &roce);
        prop_assert_eq!(icrc::compute_ip_packet(&p), Ok(pseudo));
    }
}
