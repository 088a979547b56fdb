//! Tests of the CM MAD wire formats as a whole: round trips, robustness against arbitrary
//! bytes, the exact byte and bit of every field, and rdma_cm's IP header.
//!
//! Every expected offset below is a data-area offset from Linux
//! `include/rdma/ibta_vol1_c12.h` (`CM_FIELD*_LOC(struct, byte, width)` / `CM_FIELD_BLOC(struct,
//! byte, bit, width)`, where `bit` counts from the MSB); the MAD offset is 24 more
//! (`sizeof(struct ib_mad_hdr)`).

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use proptest::array::uniform;
use proptest::prelude::*;

use super::cma_ip::{CmaIpHeader, CMA_IP_HEADER_LEN};
use super::*;

// ---------------------------------------------------------------------------------------
// Strategies: every field takes any value that fits its IBTA bit width.

fn bits(width: u32) -> core::ops::Range<u32> {
    0..(1u32 << width)
}

fn bits8(width: u32) -> core::ops::Range<u8> {
    0..(1u8 << width)
}

fn arb_path() -> impl Strategy<Value = Path> {
    (
        any::<u16>(),
        any::<u16>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        bits(20),
        bits8(6),
        any::<u8>(),
        any::<u8>(),
        bits8(4),
        any::<bool>(),
        bits8(5),
    )
        .prop_map(
            |(
                local_lid,
                remote_lid,
                local_gid,
                remote_gid,
                flow_label,
                packet_rate,
                traffic_class,
                hop_limit,
                sl,
                subnet_local,
                local_ack_timeout,
            )| Path {
                local_lid,
                remote_lid,
                local_gid,
                remote_gid,
                flow_label,
                packet_rate,
                traffic_class,
                hop_limit,
                sl,
                subnet_local,
                local_ack_timeout,
            },
        )
}

fn arb_req() -> impl Strategy<Value = Req> {
    let a = (
        any::<u32>(),
        bits(24),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        bits(24),
        any::<u8>(),
        bits(24),
        any::<u8>(),
        bits(24),
        bits8(5),
        bits8(2),
    );
    let b = (
        any::<bool>(),
        bits(24),
        bits8(5),
        bits8(3),
        any::<u16>(),
        bits8(4),
        any::<bool>(),
        bits8(3),
        bits8(4),
        any::<bool>(),
        bits8(3),
        any::<bool>(),
    );
    let c = (arb_path(), arb_path(), uniform::<_, 92>(any::<u8>()));
    (a, b, c).prop_map(|(a, b, c)| Req {
        local_comm_id: a.0,
        vendor_id: a.1,
        service_id: a.2,
        local_ca_guid: a.3,
        local_qkey: a.4,
        local_qpn: a.5,
        responder_resources: a.6,
        local_eecn: a.7,
        initiator_depth: a.8,
        remote_eecn: a.9,
        remote_cm_response_timeout: a.10,
        transport_service_type: TransportServiceType::from(a.11),
        end_to_end_flow_control: b.0,
        starting_psn: b.1,
        local_cm_response_timeout: b.2,
        retry_count: b.3,
        partition_key: b.4,
        path_mtu: b.5,
        rdc_exists: b.6,
        rnr_retry_count: b.7,
        max_cm_retries: b.8,
        srq: b.9,
        extended_transport_type: b.10,
        sap_supported: b.11,
        primary_path: c.0,
        alternate_path: c.1,
        private_data: c.2,
    })
}

fn arb_rep() -> impl Strategy<Value = Rep> {
    let a = (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        bits(24),
        bits(24),
        bits(24),
        bits(24),
        any::<u8>(),
        any::<u8>(),
        bits8(5),
        bits8(2),
        any::<bool>(),
    );
    let b = (
        bits8(3),
        any::<bool>(),
        any::<u64>(),
        uniform::<_, 196>(any::<u8>()),
    );
    (a, b).prop_map(|(a, b)| Rep {
        local_comm_id: a.0,
        remote_comm_id: a.1,
        local_qkey: a.2,
        local_qpn: a.3,
        local_eecn: a.4,
        starting_psn: a.5,
        vendor_id: a.6,
        responder_resources: a.7,
        initiator_depth: a.8,
        target_ack_delay: a.9,
        failover_accepted: a.10,
        end_to_end_flow_control: a.11,
        rnr_retry_count: b.0,
        srq: b.1,
        local_ca_guid: b.2,
        private_data: b.3,
    })
}

fn arb_message_kind() -> impl Strategy<Value = MessageKind> {
    bits8(2).prop_map(MessageKind::from)
}

fn arb_mra() -> impl Strategy<Value = Mra> {
    (
        any::<u32>(),
        any::<u32>(),
        arb_message_kind(),
        bits8(5),
        uniform::<_, 222>(any::<u8>()),
    )
        .prop_map(
            |(local_comm_id, remote_comm_id, message_mraed, service_timeout, private_data)| Mra {
                local_comm_id,
                remote_comm_id,
                message_mraed,
                service_timeout,
                private_data,
            },
        )
}

fn arb_rej() -> impl Strategy<Value = Rej> {
    (
        any::<u32>(),
        any::<u32>(),
        arb_message_kind(),
        0..=72u8,
        any::<u16>().prop_map(RejReason::from),
        uniform::<_, 72>(any::<u8>()),
        uniform::<_, 148>(any::<u8>()),
    )
        .prop_map(
            |(local_comm_id, remote_comm_id, message_rejected, ari_length, reason, ari, pd)| Rej {
                local_comm_id,
                remote_comm_id,
                message_rejected,
                ari_length,
                reason,
                ari,
                private_data: pd,
            },
        )
}

fn arb_rtu() -> impl Strategy<Value = Rtu> {
    (any::<u32>(), any::<u32>(), uniform::<_, 224>(any::<u8>())).prop_map(
        |(local_comm_id, remote_comm_id, private_data)| Rtu {
            local_comm_id,
            remote_comm_id,
            private_data,
        },
    )
}

fn arb_dreq() -> impl Strategy<Value = Dreq> {
    (
        any::<u32>(),
        any::<u32>(),
        bits(24),
        uniform::<_, 220>(any::<u8>()),
    )
        .prop_map(
            |(local_comm_id, remote_comm_id, remote_qpn_eecn, private_data)| Dreq {
                local_comm_id,
                remote_comm_id,
                remote_qpn_eecn,
                private_data,
            },
        )
}

fn arb_drep() -> impl Strategy<Value = Drep> {
    (any::<u32>(), any::<u32>(), uniform::<_, 224>(any::<u8>())).prop_map(
        |(local_comm_id, remote_comm_id, private_data)| Drep {
            local_comm_id,
            remote_comm_id,
            private_data,
        },
    )
}

fn arb_sidr_req() -> impl Strategy<Value = SidrReq> {
    (
        any::<u32>(),
        any::<u16>(),
        any::<u64>(),
        uniform::<_, 216>(any::<u8>()),
    )
        .prop_map(
            |(request_id, partition_key, service_id, private_data)| SidrReq {
                request_id,
                partition_key,
                service_id,
                private_data,
            },
        )
}

fn arb_sidr_rep() -> impl Strategy<Value = SidrRep> {
    (
        any::<u32>(),
        any::<u8>().prop_map(SidrStatus::from),
        0..=72u8,
        bits(24),
        bits(24),
        any::<u64>(),
        any::<u32>(),
        uniform::<_, 72>(any::<u8>()),
        uniform::<_, 136>(any::<u8>()),
    )
        .prop_map(
            |(request_id, status, len, vendor_id, qpn, sid, qkey, info, pd)| SidrRep {
                request_id,
                status,
                additional_info_length: len,
                vendor_id,
                qpn,
                service_id: sid,
                qkey,
                additional_info: info,
                private_data: pd,
            },
        )
}

fn arb_message() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        arb_req().prop_map(CmMessage::Req),
        arb_mra().prop_map(CmMessage::Mra),
        arb_rej().prop_map(CmMessage::Rej),
        arb_rep().prop_map(CmMessage::Rep),
        arb_rtu().prop_map(CmMessage::Rtu),
        arb_dreq().prop_map(CmMessage::Dreq),
        arb_drep().prop_map(CmMessage::Drep),
        arb_sidr_req().prop_map(CmMessage::SidrReq),
        arb_sidr_rep().prop_map(CmMessage::SidrRep),
    ]
}

/// A 256-byte MAD with a valid CM Send header, the given attribute and arbitrary data.
fn arb_cm_mad() -> impl Strategy<Value = Vec<u8>> {
    let attr = prop_oneof![
        (ATTR_REQ..=ATTR_APR),
        Just(ATTR_CLASS_PORT_INFO),
        any::<u16>()
    ];
    (
        attr,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), CM_DATA_LEN),
    )
        .prop_map(|(attr, tid, data)| {
            let mut mad = Vec::with_capacity(MAD_SIZE);
            mad.extend_from_slice(&[BASE_VERSION, MGMT_CLASS_CM, CM_CLASS_VERSION, METHOD_SEND]);
            mad.extend_from_slice(&[0; 4]);
            mad.extend_from_slice(&tid.to_be_bytes());
            mad.extend_from_slice(&attr.to_be_bytes());
            mad.extend_from_slice(&[0; 6]);
            mad.extend_from_slice(&data);
            mad
        })
}

#[track_caller]
fn round_trip(message: CmMessage, tid: u64) {
    let mad = message.encode(tid);
    assert_eq!(CmMessage::decode(&mad), Ok((tid, message)));
}

proptest! {
    #[test]
    fn req_round_trips(m in arb_req(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn rep_round_trips(m in arb_rep(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn rtu_round_trips(m in arb_rtu(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn rej_round_trips(m in arb_rej(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn mra_round_trips(m in arb_mra(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn dreq_round_trips(m in arb_dreq(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn drep_round_trips(m in arb_drep(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn sidr_req_round_trips(m in arb_sidr_req(), tid in any::<u64>()) { round_trip(m.into(), tid) }
    #[test]
    fn sidr_rep_round_trips(m in arb_sidr_rep(), tid in any::<u64>()) { round_trip(m.into(), tid) }

    /// The header of every encoded message is a CM Send with the message's attribute ID.
    #[test]
    fn encode_writes_cm_send_header(m in arb_message(), tid in any::<u64>()) {
        let mad = m.encode(tid);
        let head = MadHeader::parse(&MadHeaderPacket::new_checked(&mad[..]).unwrap()).unwrap();
        prop_assert_eq!(head, MadHeader::cm(m.attribute_id(), tid));
    }

    /// Any buffer of any length decodes to a value or an error, never a panic.
    #[test]
    fn decode_arbitrary_bytes_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        let result = CmMessage::decode(&buf);
        if buf.len() < MAD_SIZE {
            prop_assert_eq!(result, Err(MadError::Truncated { len: buf.len(), need: MAD_SIZE }));
        }
    }

    /// Arbitrary data behind a valid CM header never panics, and whatever decodes re-encodes
    /// to bytes that decode to the same message.
    #[test]
    fn decode_arbitrary_cm_data_never_panics(mad in arb_cm_mad()) {
        if let Ok((tid, message)) = CmMessage::decode(&mad) {
            prop_assert_eq!(CmMessage::decode(&message.encode(tid)), Ok((tid, message)));
        }
    }

    /// Encoding what was decoded from arbitrary bytes gives a canonical MAD: decoding and
    /// encoding it again reproduces it byte for byte.
    #[test]
    fn reencode_is_a_fixed_point(mad in arb_cm_mad()) {
        if let Ok((tid, message)) = CmMessage::decode(&mad) {
            let again = message.encode(tid);
            prop_assert_eq!(CmMessage::decode(&again).unwrap().1.encode(tid), again);
        }
    }

    #[test]
    fn cma_ipv4_header_round_trips(
        src in any::<[u8; 4]>(), sport in any::<u16>(),
        dst in any::<[u8; 4]>(), dport in any::<u16>(),
    ) {
        let hdr = CmaIpHeader {
            src: SocketAddrV4::new(Ipv4Addr::from(src), sport).into(),
            dst: SocketAddrV4::new(Ipv4Addr::from(dst), dport).into(),
        };
        prop_assert_eq!(CmaIpHeader::parse(&hdr.to_bytes(), dport), Ok(hdr));
    }

    #[test]
    fn cma_ipv6_header_round_trips(
        src in any::<[u8; 16]>(), sport in any::<u16>(),
        dst in any::<[u8; 16]>(), dport in any::<u16>(),
    ) {
        let hdr = CmaIpHeader {
            src: SocketAddrV6::new(Ipv6Addr::from(src), sport, 0, 0).into(),
            dst: SocketAddrV6::new(Ipv6Addr::from(dst), dport, 0, 0).into(),
        };
        prop_assert_eq!(CmaIpHeader::parse(&hdr.to_bytes(), dport), Ok(hdr));
    }

    #[test]
    fn cma_parse_arbitrary_bytes_never_panics(
        buf in proptest::collection::vec(any::<u8>(), 0..64), port in any::<u16>(),
    ) {
        let _ = CmaIpHeader::parse(&buf, port);
    }
}

// ---------------------------------------------------------------------------------------
// Header checks.

fn valid_mad() -> [u8; MAD_SIZE] {
    CmMessage::Rtu(Rtu::default()).encode(0x1122_3344_5566_7788)
}

#[test]
fn decode_refuses_every_prefix_of_a_mad() {
    let mad = valid_mad();
    for len in 0..MAD_SIZE {
        assert_eq!(
            CmMessage::decode(&mad[..len]),
            Err(MadError::Truncated {
                len,
                need: MAD_SIZE
            })
        );
    }
}

#[test]
fn decode_ignores_bytes_after_256() {
    let mut long = valid_mad().to_vec();
    long.extend_from_slice(&[0xff; 40]);
    assert_eq!(
        CmMessage::decode(&long),
        Ok((0x1122_3344_5566_7788, CmMessage::Rtu(Rtu::default())))
    );
}

#[test]
fn decode_refuses_wrong_base_version() {
    let mut mad = valid_mad();
    mad[0] = 2;
    mad[1] = 0x81; // a wrong class too: the base version is checked first
    assert_eq!(CmMessage::decode(&mad), Err(MadError::BaseVersion(2)));
}

#[test]
fn decode_refuses_other_management_classes() {
    let mut mad = valid_mad();
    mad[1] = 0x03; // SA
    assert_eq!(CmMessage::decode(&mad), Err(MadError::MgmtClass(0x03)));
}

#[test]
fn decode_refuses_wrong_class_version() {
    let mut mad = valid_mad();
    mad[2] = 1;
    assert_eq!(CmMessage::decode(&mad), Err(MadError::ClassVersion(1)));
}

#[test]
fn decode_refuses_methods_other_than_send() {
    for method in [0x01, 0x81, 0x83, 0x02] {
        let mut mad = valid_mad();
        mad[3] = method;
        assert_eq!(CmMessage::decode(&mad), Err(MadError::Method(method)));
    }
}

#[test]
fn decode_reports_unsupported_attributes_by_id() {
    for attr in [
        ATTR_LAP,
        ATTR_APR,
        ATTR_CLASS_PORT_INFO,
        0x0000,
        0x001B,
        0xFFFF,
    ] {
        let mut mad = valid_mad();
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        assert_eq!(
            CmMessage::decode(&mad),
            Err(MadError::UnsupportedAttribute(attr))
        );
    }
}

#[test]
fn decode_ignores_status_and_attribute_modifier() {
    let mut mad = valid_mad();
    mad[4..8].copy_from_slice(&[0xff; 4]);
    mad[18..24].copy_from_slice(&[0xff; 6]);
    assert!(CmMessage::decode(&mad).is_ok());
}

#[test]
fn decode_rej_with_long_ari_length_is_length_out_of_range() {
    let mut mad = CmMessage::Rej(Rej::default()).encode(1);
    mad[24 + 9] = 0xFE; // 7-bit length 127
    assert_eq!(
        CmMessage::decode(&mad),
        Err(MadError::LengthOutOfRange {
            field: "REJ Reject Info Length",
            value: 127,
            max: 72
        })
    );
}

#[test]
fn attribute_ids_match_ib_cm_h() {
    let ids = [
        (CmMessage::Req(Req::default()), 0x0010),
        (CmMessage::Mra(Mra::default()), 0x0011),
        (CmMessage::Rej(Rej::default()), 0x0012),
        (CmMessage::Rep(Rep::default()), 0x0013),
        (CmMessage::Rtu(Rtu::default()), 0x0014),
        (CmMessage::Dreq(Dreq::default()), 0x0015),
        (CmMessage::Drep(Drep::default()), 0x0016),
        (CmMessage::SidrReq(SidrReq::default()), 0x0017),
        (CmMessage::SidrRep(SidrRep::default()), 0x0018),
    ];
    for (message, id) in ids {
        assert_eq!(message.attribute_id(), id);
        let mad = message.encode(0);
        assert_eq!(u16::from_be_bytes([mad[16], mad[17]]), id);
    }
}

#[test]
fn encode_header_bytes() {
    let mad = CmMessage::Rep(Rep::default()).encode(0x0102_0304_0506_0708);
    assert_eq!(
        mad[..24],
        [
            0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x13, 0, 0, 0, 0, 0,
            0
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Field offsets: set one field to a distinctive value and check the exact bytes.

/// Asserts that the data area of `mad` is zero except at `expect` (data-area offsets).
#[track_caller]
fn assert_data_bytes(name: &str, mad: &[u8; MAD_SIZE], expect: &[(usize, u8)]) {
    for (i, &got) in mad.iter().enumerate().skip(MAD_HEADER_LEN) {
        let d = i - MAD_HEADER_LEN;
        let want = expect.iter().find(|&&(o, _)| o == d).map_or(0, |&(_, v)| v);
        assert_eq!(
            got, want,
            "{name}: data byte {d} (MAD byte {i}) is {got:#04x}, expected {want:#04x}"
        );
    }
}

type Case<M> = (&'static str, fn(&mut M), &'static [(usize, u8)]);

/// Runs offset cases: each mutates a default message, which must encode to exactly the
/// listed data bytes and decode back to itself.
#[track_caller]
fn check_offsets<M>(cases: &[Case<M>])
where
    M: Default + Clone + Into<CmMessage>,
{
    for (name, set, expect) in cases {
        let mut m = M::default();
        set(&mut m);
        let message: CmMessage = m.into();
        let mad = message.encode(0);
        assert_data_bytes(name, &mad, expect);
        assert_eq!(CmMessage::decode(&mad), Ok((0, message)), "{name}");
    }
}

const GID_A: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
];

#[test]
fn req_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 106: CM_REQ_*.
    #[rustfmt::skip]
    let cases: &[Case<Req>] = &[
        // CM_FIELD32_LOC(0, 32)
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        // CM_FIELD32_LOC(5, 24): bytes 5-7, byte 4 reserved
        ("vendor_id", |m| m.vendor_id = 0xAB_CDEF, &[(5, 0xAB), (6, 0xCD), (7, 0xEF)]),
        // CM_FIELD64_LOC(8)
        ("service_id", |m| m.service_id = 0x1122_3344_5566_7788, &[
            (8, 0x11), (9, 0x22), (10, 0x33), (11, 0x44),
            (12, 0x55), (13, 0x66), (14, 0x77), (15, 0x88),
        ]),
        // CM_FIELD64_LOC(16)
        ("local_ca_guid", |m| m.local_ca_guid = 0x8877_6655_4433_2211, &[
            (16, 0x88), (17, 0x77), (18, 0x66), (19, 0x55),
            (20, 0x44), (21, 0x33), (22, 0x22), (23, 0x11),
        ]),
        // CM_FIELD32_LOC(28, 32)
        ("local_qkey", |m| m.local_qkey = 0xDEAD_BEEF, &[(28, 0xDE), (29, 0xAD), (30, 0xBE), (31, 0xEF)]),
        // CM_FIELD32_LOC(32, 24)
        ("local_qpn", |m| m.local_qpn = 0xAB_CDEF, &[(32, 0xAB), (33, 0xCD), (34, 0xEF)]),
        // CM_FIELD8_LOC(35, 8)
        ("responder_resources", |m| m.responder_resources = 0x5A, &[(35, 0x5A)]),
        // CM_FIELD32_LOC(36, 24)
        ("local_eecn", |m| m.local_eecn = 0x12_3456, &[(36, 0x12), (37, 0x34), (38, 0x56)]),
        // CM_FIELD8_LOC(39, 8)
        ("initiator_depth", |m| m.initiator_depth = 0xA5, &[(39, 0xA5)]),
        // CM_FIELD32_LOC(40, 24)
        ("remote_eecn", |m| m.remote_eecn = 0x65_4321, &[(40, 0x65), (41, 0x43), (42, 0x21)]),
        // CM_FIELD8_LOC(43, 5): mask 0xF8
        ("remote_cm_response_timeout", |m| m.remote_cm_response_timeout = 0x1F, &[(43, 0xF8)]),
        // CM_FIELD_BLOC(43, 5, 2): mask 0x06
        ("transport_service_type", |m| m.transport_service_type = TransportServiceType::Extended, &[(43, 0x06)]),
        ("transport_service_type UC", |m| m.transport_service_type = TransportServiceType::Uc, &[(43, 0x02)]),
        // CM_FIELD_BLOC(43, 7, 1): mask 0x01
        ("end_to_end_flow_control", |m| m.end_to_end_flow_control = true, &[(43, 0x01)]),
        // CM_FIELD32_LOC(44, 24)
        ("starting_psn", |m| m.starting_psn = 0xFE_DCBA, &[(44, 0xFE), (45, 0xDC), (46, 0xBA)]),
        // CM_FIELD8_LOC(47, 5): mask 0xF8
        ("local_cm_response_timeout", |m| m.local_cm_response_timeout = 0x1F, &[(47, 0xF8)]),
        // CM_FIELD_BLOC(47, 5, 3): mask 0x07
        ("retry_count", |m| m.retry_count = 7, &[(47, 0x07)]),
        // CM_FIELD16_LOC(48, 16)
        ("partition_key", |m| m.partition_key = 0x8001, &[(48, 0x80), (49, 0x01)]),
        // CM_FIELD8_LOC(50, 4): mask 0xF0
        ("path_mtu", |m| m.path_mtu = 0xF, &[(50, 0xF0)]),
        ("path_mtu 4096", |m| m.path_mtu = 5, &[(50, 0x50)]),
        // CM_FIELD_BLOC(50, 4, 1): mask 0x08
        ("rdc_exists", |m| m.rdc_exists = true, &[(50, 0x08)]),
        // CM_FIELD_BLOC(50, 5, 3): mask 0x07
        ("rnr_retry_count", |m| m.rnr_retry_count = 7, &[(50, 0x07)]),
        // CM_FIELD8_LOC(51, 4): mask 0xF0
        ("max_cm_retries", |m| m.max_cm_retries = 0xF, &[(51, 0xF0)]),
        // CM_FIELD_BLOC(51, 4, 1): mask 0x08
        ("srq", |m| m.srq = true, &[(51, 0x08)]),
        // CM_FIELD_BLOC(51, 5, 3): mask 0x07
        ("extended_transport_type", |m| m.extended_transport_type = 7, &[(51, 0x07)]),
        // CM_FIELD16_LOC(52, 16), (54, 16)
        ("primary local_lid", |m| m.primary_path.local_lid = 0x1234, &[(52, 0x12), (53, 0x34)]),
        ("primary remote_lid", |m| m.primary_path.remote_lid = 0x5678, &[(54, 0x56), (55, 0x78)]),
        // CM_FIELD_MLOC(56, 128), (72, 128)
        ("primary local_gid", |m| m.primary_path.local_gid = GID_A, &[
            (56, 0xfe), (57, 0x80), (64, 0x02), (65, 0x11), (66, 0x22), (67, 0xff),
            (68, 0xfe), (69, 0x33), (70, 0x44), (71, 0x55),
        ]),
        ("primary remote_gid", |m| m.primary_path.remote_gid = GID_A, &[
            (72, 0xfe), (73, 0x80), (80, 0x02), (81, 0x11), (82, 0x22), (83, 0xff),
            (84, 0xfe), (85, 0x33), (86, 0x44), (87, 0x55),
        ]),
        // CM_FIELD32_LOC(88, 20): the top 20 bits of bytes 88-91
        ("primary flow_label", |m| m.primary_path.flow_label = 0xA_BCDE, &[(88, 0xAB), (89, 0xCD), (90, 0xE0)]),
        // CM_FIELD_BLOC(91, 2, 6): mask 0x3F
        ("primary packet_rate", |m| m.primary_path.packet_rate = 0x3F, &[(91, 0x3F)]),
        // CM_FIELD8_LOC(92, 8), (93, 8)
        ("primary traffic_class", |m| m.primary_path.traffic_class = 0xB8, &[(92, 0xB8)]),
        ("primary hop_limit", |m| m.primary_path.hop_limit = 0x40, &[(93, 0x40)]),
        // CM_FIELD8_LOC(94, 4): mask 0xF0; CM_FIELD_BLOC(94, 4, 1): mask 0x08
        ("primary sl", |m| m.primary_path.sl = 0xF, &[(94, 0xF0)]),
        ("primary subnet_local", |m| m.primary_path.subnet_local = true, &[(94, 0x08)]),
        // CM_FIELD8_LOC(95, 5): mask 0xF8
        ("primary local_ack_timeout", |m| m.primary_path.local_ack_timeout = 0x1F, &[(95, 0xF8)]),
        // CM_FIELD16_LOC(96, 16), (98, 16)
        ("alternate local_lid", |m| m.alternate_path.local_lid = 0x1234, &[(96, 0x12), (97, 0x34)]),
        ("alternate remote_lid", |m| m.alternate_path.remote_lid = 0x5678, &[(98, 0x56), (99, 0x78)]),
        // CM_FIELD_MLOC(100, 128), (116, 128)
        ("alternate local_gid", |m| m.alternate_path.local_gid = GID_A, &[
            (100, 0xfe), (101, 0x80), (108, 0x02), (109, 0x11), (110, 0x22), (111, 0xff),
            (112, 0xfe), (113, 0x33), (114, 0x44), (115, 0x55),
        ]),
        ("alternate remote_gid", |m| m.alternate_path.remote_gid = GID_A, &[
            (116, 0xfe), (117, 0x80), (124, 0x02), (125, 0x11), (126, 0x22), (127, 0xff),
            (128, 0xfe), (129, 0x33), (130, 0x44), (131, 0x55),
        ]),
        // CM_FIELD32_LOC(132, 20)
        ("alternate flow_label", |m| m.alternate_path.flow_label = 0xA_BCDE, &[(132, 0xAB), (133, 0xCD), (134, 0xE0)]),
        // CM_FIELD_BLOC(135, 2, 6)
        ("alternate packet_rate", |m| m.alternate_path.packet_rate = 0x3F, &[(135, 0x3F)]),
        // CM_FIELD8_LOC(136, 8), (137, 8)
        ("alternate traffic_class", |m| m.alternate_path.traffic_class = 0xB8, &[(136, 0xB8)]),
        ("alternate hop_limit", |m| m.alternate_path.hop_limit = 0x40, &[(137, 0x40)]),
        // CM_FIELD8_LOC(138, 4); CM_FIELD_BLOC(138, 4, 1)
        ("alternate sl", |m| m.alternate_path.sl = 0xF, &[(138, 0xF0)]),
        ("alternate subnet_local", |m| m.alternate_path.subnet_local = true, &[(138, 0x08)]),
        // CM_FIELD8_LOC(139, 5)
        ("alternate local_ack_timeout", |m| m.alternate_path.local_ack_timeout = 0x1F, &[(139, 0xF8)]),
        // CM_FIELD_BLOC(139, 5, 1): mask 0x04
        ("sap_supported", |m| m.sap_supported = true, &[(139, 0x04)]),
        // CM_FIELD_MLOC(140, 736): 92 bytes to the end
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[91] = 0xBB;
        }, &[(140, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn rep_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 110: CM_REP_*.
    #[rustfmt::skip]
    let cases: &[Case<Rep>] = &[
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("remote_comm_id", |m| m.remote_comm_id = 0x0506_0708, &[(4, 5), (5, 6), (6, 7), (7, 8)]),
        // CM_FIELD32_LOC(8, 32)
        ("local_qkey", |m| m.local_qkey = 0xDEAD_BEEF, &[(8, 0xDE), (9, 0xAD), (10, 0xBE), (11, 0xEF)]),
        // CM_FIELD32_LOC(12, 24)
        ("local_qpn", |m| m.local_qpn = 0xAB_CDEF, &[(12, 0xAB), (13, 0xCD), (14, 0xEF)]),
        // CM_REP_VENDOR_ID_H/M/L: CM_FIELD8_LOC(15), (19), (23)
        ("vendor_id", |m| m.vendor_id = 0xAB_CDEF, &[(15, 0xAB), (19, 0xCD), (23, 0xEF)]),
        // CM_FIELD32_LOC(16, 24)
        ("local_eecn", |m| m.local_eecn = 0x12_3456, &[(16, 0x12), (17, 0x34), (18, 0x56)]),
        // CM_FIELD32_LOC(20, 24)
        ("starting_psn", |m| m.starting_psn = 0xFE_DCBA, &[(20, 0xFE), (21, 0xDC), (22, 0xBA)]),
        // CM_FIELD8_LOC(24, 8), (25, 8)
        ("responder_resources", |m| m.responder_resources = 0x5A, &[(24, 0x5A)]),
        ("initiator_depth", |m| m.initiator_depth = 0xA5, &[(25, 0xA5)]),
        // CM_FIELD8_LOC(26, 5): mask 0xF8
        ("target_ack_delay", |m| m.target_ack_delay = 0x1F, &[(26, 0xF8)]),
        // CM_FIELD_BLOC(26, 5, 2): mask 0x06
        ("failover_accepted", |m| m.failover_accepted = 3, &[(26, 0x06)]),
        // CM_FIELD_BLOC(26, 7, 1): mask 0x01
        ("end_to_end_flow_control", |m| m.end_to_end_flow_control = true, &[(26, 0x01)]),
        // CM_FIELD8_LOC(27, 3): mask 0xE0
        ("rnr_retry_count", |m| m.rnr_retry_count = 7, &[(27, 0xE0)]),
        // CM_FIELD_BLOC(27, 3, 1): mask 0x10
        ("srq", |m| m.srq = true, &[(27, 0x10)]),
        // CM_FIELD64_LOC(28)
        ("local_ca_guid", |m| m.local_ca_guid = 0x8877_6655_4433_2211, &[
            (28, 0x88), (29, 0x77), (30, 0x66), (31, 0x55),
            (32, 0x44), (33, 0x33), (34, 0x22), (35, 0x11),
        ]),
        // CM_FIELD_MLOC(36, 1568): 196 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[195] = 0xBB;
        }, &[(36, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn rtu_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 111: CM_RTU_*.
    #[rustfmt::skip]
    let cases: &[Case<Rtu>] = &[
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("remote_comm_id", |m| m.remote_comm_id = 0x0506_0708, &[(4, 5), (5, 6), (6, 7), (7, 8)]),
        // CM_FIELD_MLOC(8, 1792): 224 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[223] = 0xBB;
        }, &[(8, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn rej_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 108: CM_REJ_*.
    #[rustfmt::skip]
    let cases: &[Case<Rej>] = &[
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("remote_comm_id", |m| m.remote_comm_id = 0x0506_0708, &[(4, 5), (5, 6), (6, 7), (7, 8)]),
        // CM_FIELD8_LOC(8, 2): mask 0xC0
        ("message_rejected REP", |m| m.message_rejected = MessageKind::Rep, &[(8, 0x40)]),
        ("message_rejected other", |m| m.message_rejected = MessageKind::Other, &[(8, 0x80)]),
        ("message_rejected reserved", |m| m.message_rejected = MessageKind::Reserved, &[(8, 0xC0)]),
        // CM_FIELD8_LOC(9, 7): mask 0xFE
        ("ari_length", |m| m.ari_length = 72, &[(9, 72 << 1)]),
        ("ari_length 1", |m| m.ari_length = 1, &[(9, 0x02)]),
        // CM_FIELD16_LOC(10, 16)
        ("reason consumer", |m| m.reason = RejReason::ConsumerDefined, &[(11, 28)]),
        ("reason unknown", |m| m.reason = RejReason::Unknown(0xABCD), &[(10, 0xAB), (11, 0xCD)]),
        // CM_FIELD_MLOC(12, 576): 72 bytes
        ("ari", |m| {
            m.ari[0] = 0x11;
            m.ari[71] = 0x22;
        }, &[(12, 0x11), (83, 0x22)]),
        // CM_FIELD_MLOC(84, 1184): 148 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[147] = 0xBB;
        }, &[(84, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn mra_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 107: CM_MRA_*.
    #[rustfmt::skip]
    let cases: &[Case<Mra>] = &[
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("remote_comm_id", |m| m.remote_comm_id = 0x0506_0708, &[(4, 5), (5, 6), (6, 7), (7, 8)]),
        // CM_FIELD8_LOC(8, 2): mask 0xC0
        ("message_mraed REP", |m| m.message_mraed = MessageKind::Rep, &[(8, 0x40)]),
        ("message_mraed LAP", |m| m.message_mraed = MessageKind::Other, &[(8, 0x80)]),
        // CM_FIELD8_LOC(9, 5): mask 0xF8
        ("service_timeout", |m| m.service_timeout = 0x1F, &[(9, 0xF8)]),
        ("service_timeout 1", |m| m.service_timeout = 1, &[(9, 0x08)]),
        // CM_FIELD_MLOC(10, 1776): 222 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[221] = 0xBB;
        }, &[(10, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn dreq_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 112: CM_DREQ_*.
    #[rustfmt::skip]
    let cases: &[Case<Dreq>] = &[
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("remote_comm_id", |m| m.remote_comm_id = 0x0506_0708, &[(4, 5), (5, 6), (6, 7), (7, 8)]),
        // CM_FIELD32_LOC(8, 24)
        ("remote_qpn_eecn", |m| m.remote_qpn_eecn = 0xAB_CDEF, &[(8, 0xAB), (9, 0xCD), (10, 0xEF)]),
        // CM_FIELD_MLOC(12, 1760): 220 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[219] = 0xBB;
        }, &[(12, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn drep_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 113: CM_DREP_*.
    #[rustfmt::skip]
    let cases: &[Case<Drep>] = &[
        ("local_comm_id", |m| m.local_comm_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        ("remote_comm_id", |m| m.remote_comm_id = 0x0506_0708, &[(4, 5), (5, 6), (6, 7), (7, 8)]),
        // CM_FIELD_MLOC(8, 1792): 224 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[223] = 0xBB;
        }, &[(8, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn sidr_req_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 119: CM_SIDR_REQ_*.
    #[rustfmt::skip]
    let cases: &[Case<SidrReq>] = &[
        ("request_id", |m| m.request_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        // CM_FIELD16_LOC(4, 16)
        ("partition_key", |m| m.partition_key = 0xFFFF, &[(4, 0xFF), (5, 0xFF)]),
        // CM_FIELD64_LOC(8)
        ("service_id", |m| m.service_id = 0x0000_0000_0111_12B7, &[
            (12, 0x01), (13, 0x11), (14, 0x12), (15, 0xB7),
        ]),
        // CM_FIELD_MLOC(16, 1728): 216 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[215] = 0xBB;
        }, &[(16, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn sidr_rep_field_offsets() {
    // Linux ibta_vol1_c12.h, Table 120: CM_SIDR_REP_*.
    #[rustfmt::skip]
    let cases: &[Case<SidrRep>] = &[
        ("request_id", |m| m.request_id = 0x0102_0304, &[(0, 1), (1, 2), (2, 3), (3, 4)]),
        // CM_FIELD8_LOC(4, 8)
        ("status", |m| m.status = SidrStatus::Redirect, &[(4, 0x04)]),
        ("status unknown", |m| m.status = SidrStatus::Unknown(0xEE), &[(4, 0xEE)]),
        // CM_FIELD8_LOC(5, 8)
        ("additional_info_length", |m| m.additional_info_length = 72, &[(5, 72)]),
        // CM_SIDR_REP_VENDOR_ID_H: CM_FIELD16_LOC(6, 16); _L: CM_FIELD8_LOC(11, 8)
        ("vendor_id", |m| m.vendor_id = 0xAB_CDEF, &[(6, 0xAB), (7, 0xCD), (11, 0xEF)]),
        // CM_FIELD32_LOC(8, 24)
        ("qpn", |m| m.qpn = 0x12_3456, &[(8, 0x12), (9, 0x34), (10, 0x56)]),
        // CM_FIELD64_LOC(12)
        ("service_id", |m| m.service_id = 0x1122_3344_5566_7788, &[
            (12, 0x11), (13, 0x22), (14, 0x33), (15, 0x44),
            (16, 0x55), (17, 0x66), (18, 0x77), (19, 0x88),
        ]),
        // CM_FIELD32_LOC(20, 32)
        ("qkey", |m| m.qkey = 0x0123_4567, &[(20, 0x01), (21, 0x23), (22, 0x45), (23, 0x67)]),
        // CM_FIELD_MLOC(24, 576): 72 bytes
        ("additional_info", |m| {
            m.additional_info[0] = 0x11;
            m.additional_info[71] = 0x22;
        }, &[(24, 0x11), (95, 0x22)]),
        // CM_FIELD_MLOC(96, 1088): 136 bytes
        ("private_data", |m| {
            m.private_data[0] = 0xAA;
            m.private_data[135] = 0xBB;
        }, &[(96, 0xAA), (231, 0xBB)]),
    ];
    check_offsets(cases);
}

#[test]
fn emit_truncates_values_wider_than_their_field() {
    let req = Req {
        local_qpn: 0xFFAB_CDEF,
        remote_cm_response_timeout: 0xFF,
        retry_count: 0xFF,
        path_mtu: 0xFF,
        ..Req::default()
    };
    let mad = CmMessage::Req(req).encode(0);
    // Only the field's own bits are written: 32[0],24; 43[0],5; 47[5],3; 50[0],4.
    assert_data_bytes(
        "truncation",
        &mad,
        &[
            (32, 0xAB),
            (33, 0xCD),
            (34, 0xEF),
            (43, 0xF8),
            (47, 0x07),
            (50, 0xF0),
        ],
    );
    let Ok((_, CmMessage::Req(back))) = CmMessage::decode(&mad) else {
        panic!("REQ did not decode");
    };
    assert_eq!(
        (
            back.local_qpn,
            back.remote_cm_response_timeout,
            back.retry_count,
            back.path_mtu
        ),
        (0xAB_CDEF, 0x1F, 0x07, 0x0F)
    );
}

#[test]
fn decode_masks_reserved_bits() {
    // REQ with every reserved bit set and every field zero decodes to the default REQ.
    // Reserved in Table 106: byte 4, bytes 24-27, bits after each path's flow label (low 4
    // bits of 90 and 134, high 2 of 91 and 135), low 3 bits of 94/138, low 3 of 95, low 2 of
    // 139.
    let mut mad = CmMessage::Req(Req::default()).encode(0);
    let reserved: &[(usize, u8)] = &[
        (4, 0xFF),
        (24, 0xFF),
        (25, 0xFF),
        (26, 0xFF),
        (27, 0xFF),
        (90, 0x0F),
        (91, 0xC0),
        (94, 0x07),
        (95, 0x07),
        (134, 0x0F),
        (135, 0xC0),
        (138, 0x07),
        (139, 0x03),
    ];
    for &(offset, bits) in reserved {
        mad[MAD_HEADER_LEN + offset] |= bits;
    }
    assert_eq!(
        CmMessage::decode(&mad),
        Ok((0, CmMessage::Req(Req::default())))
    );

    // REP: the low 4 bits of byte 27.
    let mut mad = CmMessage::Rep(Rep::default()).encode(0);
    mad[MAD_HEADER_LEN + 27] |= 0x0F;
    assert_eq!(
        CmMessage::decode(&mad),
        Ok((0, CmMessage::Rep(Rep::default())))
    );

    // MRA: low 6 bits of byte 8, low 3 of byte 9.
    let mut mad = CmMessage::Mra(Mra::default()).encode(0);
    mad[MAD_HEADER_LEN + 8] |= 0x3F;
    mad[MAD_HEADER_LEN + 9] |= 0x07;
    assert_eq!(
        CmMessage::decode(&mad),
        Ok((0, CmMessage::Mra(Mra::default())))
    );

    // REJ: low 6 bits of byte 8, low bit of byte 9.
    let mut mad = CmMessage::Rej(Rej::default()).encode(0);
    mad[MAD_HEADER_LEN + 8] |= 0x3F;
    mad[MAD_HEADER_LEN + 9] |= 0x01;
    assert_eq!(
        CmMessage::decode(&mad),
        Ok((0, CmMessage::Rej(Rej::default())))
    );

    // DREQ: byte 11. SIDR_REQ: bytes 6-7.
    let mut mad = CmMessage::Dreq(Dreq::default()).encode(0);
    mad[MAD_HEADER_LEN + 11] = 0xFF;
    assert_eq!(
        CmMessage::decode(&mad),
        Ok((0, CmMessage::Dreq(Dreq::default())))
    );
    let mut mad = CmMessage::SidrReq(SidrReq::default()).encode(0);
    mad[MAD_HEADER_LEN + 6] = 0xFF;
    mad[MAD_HEADER_LEN + 7] = 0xFF;
    assert_eq!(
        CmMessage::decode(&mad),
        Ok((0, CmMessage::SidrReq(SidrReq::default())))
    );
}

// ---------------------------------------------------------------------------------------
// rdma_cm's IP header (Linux cma.c struct cma_hdr, cma_format_hdr).

#[test]
fn cma_ipv4_header_bytes() {
    let hdr = CmaIpHeader {
        src: "192.168.1.10:50000".parse().unwrap(),
        dst: "192.168.1.20:4791".parse().unwrap(),
    };
    let expected: [u8; CMA_IP_HEADER_LEN] = [
        0x00, // cma_version
        0x40, // IP version 4 in the high nibble
        0xC3, 0x50, // source port 50000, big-endian
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 168, 1, 10, // src: ip4.pad[3], ip4.addr
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 168, 1, 20, // dst
    ];
    assert_eq!(hdr.to_bytes(), expected);
    assert_eq!(CmaIpHeader::parse(&expected, 4791), Ok(hdr));
}

#[test]
fn cma_ipv6_header_bytes() {
    let hdr = CmaIpHeader {
        src: "[fe80::1]:1234".parse().unwrap(),
        dst: "[2001:db8::2]:4791".parse().unwrap(),
    };
    let expected: [u8; CMA_IP_HEADER_LEN] = [
        0x00, // cma_version
        0x60, // IP version 6
        0x04, 0xD2, // source port 1234
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst
    ];
    assert_eq!(hdr.to_bytes(), expected);
    assert_eq!(CmaIpHeader::parse(&expected, 4791), Ok(hdr));
}

#[test]
fn cma_mixed_families_are_written_as_ipv6_mapped() {
    let hdr = CmaIpHeader {
        src: "10.0.0.1:7000".parse().unwrap(),
        dst: "[2001:db8::2]:4791".parse().unwrap(),
    };
    let bytes = hdr.to_bytes();
    assert_eq!(bytes[1], 0x60);
    assert_eq!(
        bytes[4..20],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]
    );
    let parsed = CmaIpHeader::parse(&bytes, 4791).unwrap();
    assert_eq!(
        parsed.src,
        SocketAddr::from(("::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap(), 7000))
    );
}

#[test]
fn cma_parse_reads_ipv4_from_last_four_bytes_and_ignores_low_nibble() {
    let mut bytes = [0u8; CMA_IP_HEADER_LEN];
    bytes[1] = 0x4F;
    bytes[2..4].copy_from_slice(&80u16.to_be_bytes());
    bytes[4..16].fill(0xEE); // pad, not read by cma_save_ip4_info
    bytes[16..20].copy_from_slice(&[1, 2, 3, 4]);
    bytes[32..36].copy_from_slice(&[5, 6, 7, 8]);
    assert_eq!(
        CmaIpHeader::parse(&bytes, 443),
        Ok(CmaIpHeader {
            src: "1.2.3.4:80".parse().unwrap(),
            dst: "5.6.7.8:443".parse().unwrap(),
        })
    );
}

#[test]
fn cma_parse_refuses_bad_versions_and_short_buffers() {
    let good = CmaIpHeader {
        src: "1.2.3.4:1".parse().unwrap(),
        dst: "5.6.7.8:2".parse().unwrap(),
    }
    .to_bytes();
    let mut bad = good;
    bad[0] = 1;
    assert_eq!(CmaIpHeader::parse(&bad, 2), Err(MadError::CmaVersion(1)));
    let mut bad = good;
    bad[1] = 0x50;
    assert_eq!(CmaIpHeader::parse(&bad, 2), Err(MadError::IpVersion(5)));
    for len in 0..CMA_IP_HEADER_LEN {
        assert_eq!(
            CmaIpHeader::parse(&good[..len], 2),
            Err(MadError::Truncated {
                len,
                need: CMA_IP_HEADER_LEN
            })
        );
    }
}

#[test]
fn cma_emit_writes_only_the_first_36_bytes() {
    let hdr = CmaIpHeader {
        src: "1.2.3.4:1".parse().unwrap(),
        dst: "5.6.7.8:2".parse().unwrap(),
    };
    let mut pd = [0xAAu8; req::PRIVATE_DATA_LEN];
    hdr.emit(&mut pd);
    assert_eq!(pd[..36], hdr.to_bytes());
    assert!(pd[36..].iter().all(|&b| b == 0xAA));
}

#[test]
fn user_private_data_limits() {
    use super::cma_ip::*;
    assert_eq!(REQ_USER_PRIVATE_DATA_MAX, 56);
    assert_eq!(SIDR_REQ_USER_PRIVATE_DATA_MAX, 180);
    assert_eq!(REP_USER_PRIVATE_DATA_MAX, 196);
    assert_eq!(REJ_USER_PRIVATE_DATA_MAX, 148);
    assert_eq!(DREQ_USER_PRIVATE_DATA_MAX, 220);
    assert_eq!(DREP_USER_PRIVATE_DATA_MAX, 224);
    assert_eq!(MRA_USER_PRIVATE_DATA_MAX, 222);
    assert_eq!(RTU_USER_PRIVATE_DATA_MAX, 224);
    assert_eq!(SIDR_REP_USER_PRIVATE_DATA_MAX, 136);
}

#[test]
fn rdma_cm_req_carries_cma_header_then_user_data() {
    // What rdma_connect on RDMA_PS_TCP puts on the wire: service ID from the destination
    // port, the CMA header, then the user's private data at offset 36.
    let src: SocketAddr = "192.168.1.10:50000".parse().unwrap();
    let dst: SocketAddr = "192.168.1.20:4791".parse().unwrap();
    let mut req = Req {
        service_id: service::service_id(service::RDMA_PS_TCP, dst.port()),
        ..Req::default()
    };
    CmaIpHeader { src, dst }.emit(&mut req.private_data);
    req.private_data[36..40].copy_from_slice(b"ping");
    let mad = CmMessage::Req(req).encode(9);
    // Service ID at data bytes 8-15; private data from data byte 140.
    assert_eq!(mad[24 + 8..24 + 16], [0, 0, 0, 0, 0x01, 0x06, 0x12, 0xB7]);
    assert_eq!(mad[24 + 140..24 + 142], [0x00, 0x40]);
    assert_eq!(mad[24 + 176..24 + 180], *b"ping");

    let Ok((9, CmMessage::Req(got))) = CmMessage::decode(&mad) else {
        panic!("REQ did not decode");
    };
    let (ps, port) = service::split_service_id(got.service_id).unwrap();
    assert_eq!(ps, service::RDMA_PS_TCP);
    assert_eq!(
        CmaIpHeader::parse(&got.private_data, port),
        Ok(CmaIpHeader { src, dst })
    );
}
