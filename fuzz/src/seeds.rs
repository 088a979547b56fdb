//! The seed corpora, built from the crates' own emitters and machines (never captured
//! from elsewhere): `cargo test --manifest-path fuzz/Cargo.toml` checks that every seed
//! runs clean, and with `RVERBS_FUZZ_WRITE_SEEDS=1` writes them to `fuzz/corpus/`.
//!
//! The packet seeds come from a requester and a responder talking to each other (MTU 256,
//! so each is small): every request opcode the requester sends, every response the
//! responder sends, a UC and a UD exchange and a CNP.

use std::net::Ipv4Addr;
use std::time::Instant;

use rverbs_cm::mad::cma_ip::CmaIpHeader;
use rverbs_cm::mad::service::{service_id, RDMA_PS_TCP, RDMA_PS_UDP};
use rverbs_cm::mad::{CmMessage, Drep, Dreq, MessageKind, Mra, Rej, Rep, Req, Rtu, SidrRep, SidrReq};
use rverbs_proto::psn::Psn;
use rverbs_proto::rc::RequesterConfig;
use rverbs_proto::rc::{Mode, Request, Requester, Responder, ResponderConfig, Response, SendWqe, UdDest};
use rverbs_proto::wire::icrc;
use rverbs_proto::wire::{BthRepr, OpCode, RocePacket, RoceRepr};

use crate::input::{push_record, Input};
use crate::responder::{FuzzTarget, QKEY};
use crate::wire_parse::ROCE_PORT;

/// One seed: the target, a file name, the bytes.
pub type Seed = (&'static str, String, Vec<u8>);

const SRC: Ipv4Addr = Ipv4Addr::new(10, 66, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 66, 0, 2);
const SPORT: u16 = 0xc123;

/// The 12 addressing bytes `wire_parse` reads first.
fn meta(id: u16) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&u32::from_be_bytes(SRC.octets()).to_le_bytes());
    m.extend_from_slice(&u32::from_be_bytes(DST.octets()).to_le_bytes());
    m.extend_from_slice(&SPORT.to_le_bytes());
    m.extend_from_slice(&id.to_le_bytes());
    m
}

/// The packet of `repr` with `payload` and the ICRC it has when sent from SRC to DST with
/// IPv4 Identification 0.
pub fn packet(repr: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0; repr.buffer_len()];
    let mut p = RocePacket::new_unchecked(&mut out[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(&payload[..repr.payload_len]);
    let crc = icrc::compute_ipv4_pseudo(SRC, DST, SPORT, ROCE_PORT, p.without_icrc());
    p.set_icrc(crc);
    out
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect()
}

/// The payload a request carries (`Request` names a range of its WR's message).
fn request_payload(r: &Request) -> Vec<u8> {
    match r.atomic_write {
        Some(v) => v.to_ne_bytes().to_vec(),
        None => pattern(r.payload_len as usize, r.payload_offset as u8),
    }
}

/// The header of a `requester_acks` input and the requester it describes, run through the
/// harness's own decoding.
fn requester_input(cfg: [u8; 6], wrs: &[[u8; 4]]) -> (Vec<u8>, Requester, RequesterConfig) {
    let mut bytes = cfg.to_vec();
    bytes.push(wrs.len() as u8 - 1);
    for w in wrs {
        bytes.extend_from_slice(w);
    }
    let mut inp = Input::new(&bytes);
    let cfg = crate::requester_acks::config(&mut inp);
    let mut req = Requester::new(cfg);
    let n = usize::from(inp.u8() % 8) + 1;
    for id in 1..=n as u64 {
        let w = crate::requester_acks::wqe(&mut inp, id, cfg.mtu);
        req.post(w).expect("seed WR posts");
    }
    (bytes, req, cfg)
}

/// The 4 bytes of a WR for `requester_acks::wqe`: opcode index, length, flags.
fn wr(opcode: usize, length: u16, flags: u8) -> [u8; 4] {
    let l = length.to_le_bytes();
    [opcode as u8, l[0], l[1], flags]
}

/// An RC exchange through the harnesses' own types: the requester's packets, the
/// responder's, and the inputs of `responder` and `requester_acks` that replay it.
struct Exchange {
    requests: Vec<Vec<u8>>,
    responses: Vec<Vec<u8>>,
    responder_input: Vec<u8>,
    requester_input: Vec<u8>,
}

fn exchange(mode: Mode, wrs: &[[u8; 4]], recvs: &[u16]) -> Exchange {
    let now = Instant::now();
    let (mut requester_input, mut req, rcfg) = requester_input([0, 16, 0, 0, 0, 0], wrs);
    // Responder configuration bytes for `responder::config`: mode, MTU 256, all access,
    // 16 resources, rq_psn 0, RNR timer 1.
    let mode_byte = match mode {
        Mode::Rc => 0,
        Mode::Uc => 1,
        Mode::Ud => 2,
    };
    let mut responder_input = vec![mode_byte, 0, 0, 16, 0, 0, 0, 1];
    let scfg = crate::responder::config(&mut Input::new(&responder_input));
    assert_eq!((scfg.mtu, scfg.rq_psn), (rcfg.mtu, rcfg.sq_psn));
    let mut resp = Responder::new(ResponderConfig { mode, ..scfg });
    let mut t = FuzzTarget::new();
    for &c in recvs {
        t.post_recv(u64::from(c));
        responder_input.push(5);
        responder_input.extend_from_slice(&c.to_le_bytes());
    }
    let (mut requests, mut responses) = (Vec::new(), Vec::new());
    for _round in 0..4 {
        requester_input.push(4);
        let mut any = false;
        while let Some(r) = req.poll_transmit(now) {
            any = true;
            let payload = request_payload(&r);
            let bytes = packet(&r.to_repr(0x12), &payload);
            let parsed =
                RoceRepr::parse(&RocePacket::new_checked(&bytes[..]).expect("seed packet")).expect("seed parses");
            let request = Request::from_repr(&parsed, &payload);
            let d = resp.handle_request(now, &request, &mut t);
            crate::responder::deliver(&scfg, &mut t, &d, &payload);
            responder_input.push(0);
            push_record(&mut responder_input, &bytes);
            requests.push(bytes);
        }
        responder_input.push(6);
        while let Some(r) = resp.poll_transmit(now) {
            any = true;
            let payload = match r.source {
                Some(s) if s.len > 0 => t.read(s.va, s.len).to_vec(),
                _ => Vec::new(),
            };
            let bytes = packet(&r.to_repr(0x11), &payload);
            let _ = req.handle_response(
                now,
                &Response::from_repr(
                    &RoceRepr::parse(&RocePacket::new_checked(&bytes[..]).expect("seed")).expect("seed"),
                ),
            );
            requester_input.push(0);
            push_record(&mut requester_input, &bytes);
            responses.push(bytes);
        }
        if !any {
            break;
        }
    }
    // The exchange is a good one: every WR completed with success.
    let mut done = 0;
    while let Some(c) = req.poll_completion() {
        assert_eq!(c.status, rverbs_proto::verbs::WcStatus::Success, "seed exchange: {c:?}");
        done += 1;
    }
    assert!(
        mode != Mode::Rc || (done > 0 && req.is_idle()),
        "seed exchange did not finish: {done} completions"
    );
    Exchange {
        requests,
        responses,
        responder_input,
        requester_input,
    }
}

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = Vec::new();
    // Opcode indices of `requester_acks::OPCODES`.
    let (send, send_imm, send_inv, write, write_imm, read, cas, faa, awrite, flush) = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
    let rc = exchange(
        Mode::Rc,
        &[
            wr(send, 600, 0),
            wr(write, 300, 0x10),
            wr(read, 520, 0x20),
            wr(cas, 8, 0x30),
            wr(faa, 8, 0x41),
            wr(write_imm, 40, 0),
            wr(send_imm, 0, 0),
            wr(awrite, 8, 0x50),
        ],
        &[1024, 64, 64],
    );
    let rc2 = exchange(
        Mode::Rc,
        &[
            wr(send_inv, 100, 0),
            wr(flush, 64, 0),
            wr(read, 0, 0x02),
            wr(send, 16, 0),
        ],
        &[256, 256],
    );
    let uc = exchange(Mode::Uc, &[wr(send, 300, 0), wr(write_imm, 10, 0)], &[512, 512]);
    for (name, e) in [("rc", &rc), ("rc2", &rc2), ("uc", &uc)] {
        seeds.push(("responder", format!("seed-{name}"), e.responder_input.clone()));
        if !e.responses.is_empty() {
            seeds.push(("requester_acks", format!("seed-{name}"), e.requester_input.clone()));
        }
        for (i, p) in e.requests.iter().chain(&e.responses).enumerate() {
            let mut s = meta(i as u16 * 0x101);
            s.extend_from_slice(p);
            seeds.push(("wire_parse", format!("seed-{name}-{i:02}"), s));
        }
    }
    // UD: a SEND ONLY with immediate and DETH, through the responder.
    let mut ud_req = Requester::new(RequesterConfig {
        mode: Mode::Ud,
        mtu: 256,
        ..RequesterConfig::TEMPLATE
    });
    let ud = UdDest {
        remote_qpn: 0x12,
        remote_qkey: QKEY,
    };
    let w = SendWqe {
        id: 1,
        opcode: rverbs_proto::verbs::WrOpcode::SendWithImm,
        length: 24,
        imm: 7,
        ud: Some(ud),
        ..SendWqe::TEMPLATE
    };
    ud_req.post(w).expect("UD post");
    let r = ud_req.poll_transmit(Instant::now()).expect("UD packet");
    let ud_packet = packet(&r.to_repr(0x12), &request_payload(&r));
    let mut s = vec![2, 0, 0, 16, 0, 0, 0, 1, 5];
    s.extend_from_slice(&128u16.to_le_bytes());
    s.push(0);
    push_record(&mut s, &ud_packet);
    seeds.push(("responder", "seed-ud".into(), s));
    let mut s = meta(0);
    s.extend_from_slice(&ud_packet);
    seeds.push(("wire_parse", "seed-ud".into(), s));
    // A CNP (IBTA Annex A17): 16 reserved bytes.
    let cnp = RoceRepr::new(
        BthRepr {
            opcode: OpCode::Cnp,
            solicited: false,
            migreq: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: 0x12,
            ack_req: false,
            psn: 0,
        },
        0,
    );
    let mut s = meta(0x718c);
    s.extend_from_slice(&packet(&cnp, &[]));
    seeds.push(("wire_parse", "seed-cnp".into(), s));
    let _ = Psn::new(0);

    // A capture as `RVERBS_PCAP` writes one (LINKTYPE_RAW): an IPv4 and an IPv6 datagram.
    let mut w = rverbs_proto::pcap::PcapWriter::new(Vec::new(), rverbs_proto::pcap::LINKTYPE_RAW).expect("pcap");
    let v4 = rverbs_proto::pcap::Ipv4Udp {
        src: SRC,
        dst: DST,
        src_port: SPORT,
        dst_port: ROCE_PORT,
        id: 0x1234,
        ttl: 64,
    };
    let v6 = rverbs_proto::pcap::Ipv6Udp {
        src: SRC.to_ipv6_mapped(),
        dst: DST.to_ipv6_mapped(),
        src_port: SPORT,
        dst_port: ROCE_PORT,
        traffic_class: 0x68,
        flow_label: 0x12345,
        hop_limit: 64,
    };
    let first = &rc.requests[0];
    w.write_ipv4_udp(std::time::Duration::new(1_700_000_000, 5_000), &v4, first)
        .expect("pcap");
    w.write_ipv6_udp(std::time::Duration::new(1_700_000_001, 0), &v6, &rc.responses[0])
        .expect("pcap");
    seeds.push(("pcap_read", "seed-raw".into(), w.into_inner()));

    let mads = cm_seeds(&mut seeds);
    let mut packets: Vec<Vec<u8>> = rc.requests.iter().chain(&rc.responses).chain(&uc.requests).cloned().collect();
    packets.push(ud_packet.clone());
    udp_rx_seeds(&mut seeds, &packets, &mads);
    shm_seeds(&mut seeds);
    capi_seeds(&mut seeds);
    config_seeds(&mut seeds);
    neigh_seeds(&mut seeds);
    capi_send_seeds(&mut seeds);
    for (i, spec) in [
        "seed=7,drop=1%,dup=0.5%,reorder=5%,reorder_by=200us,corrupt=1%",
        "delay=50us",
        "drop=0.25, duplicate=0.1 ,reorder=1,reorder_by=1ms,seed=18446744073709551615",
        "corrupt=100%,delay=2s",
    ]
    .iter()
    .enumerate()
    {
        seeds.push(("fault_config", format!("seed-{i}"), spec.as_bytes().to_vec()));
    }
    seeds
}

/// One of each CM message rverbs sends, with the private data rdma_cm puts in it.
fn cm_seeds(seeds: &mut Vec<Seed>) -> Vec<[u8; 256]> {
    let v4 = CmaIpHeader {
        src: "10.66.0.1:40000".parse().expect("addr"),
        dst: "10.66.0.2:7471".parse().expect("addr"),
    };
    let v6 = CmaIpHeader {
        src: "[fd00::1]:40000".parse().expect("addr"),
        dst: "[fd00::2]:7471".parse().expect("addr"),
    };
    let mut req4 = Req {
        local_comm_id: 0x1111,
        service_id: service_id(RDMA_PS_TCP, 7471),
        local_qpn: 0x12,
        starting_psn: 0x33,
        ..Req::default()
    };
    v4.emit(&mut req4.private_data);
    req4.private_data[36..40].copy_from_slice(b"user");
    let mut req6 = req4.clone();
    v6.emit(&mut req6.private_data);
    let mut sidr = SidrReq {
        request_id: 9,
        service_id: service_id(RDMA_PS_UDP, 7471),
        ..SidrReq::default()
    };
    v4.emit(&mut sidr.private_data);
    let mut rej = Rej {
        local_comm_id: 1,
        remote_comm_id: 2,
        message_rejected: MessageKind::Rep,
        ari_length: 4,
        ..Rej::default()
    };
    rej.ari[..4].copy_from_slice(&[1, 2, 3, 4]);
    let sidr_rep = SidrRep {
        request_id: 9,
        qpn: 0x44,
        qkey: 0x0123_4567,
        additional_info_length: 2,
        ..SidrRep::default()
    };
    let messages: Vec<(&str, CmMessage)> = vec![
        ("req-ipv4", req4.into()),
        ("req-ipv6", req6.into()),
        (
            "rep",
            Rep {
                local_comm_id: 2,
                remote_comm_id: 1,
                local_qpn: 0x13,
                ..Rep::default()
            }
            .into(),
        ),
        (
            "rtu",
            Rtu {
                local_comm_id: 1,
                remote_comm_id: 2,
                ..Rtu::default()
            }
            .into(),
        ),
        ("rej", rej.into()),
        (
            "mra",
            Mra {
                local_comm_id: 1,
                remote_comm_id: 2,
                service_timeout: 20,
                ..Mra::default()
            }
            .into(),
        ),
        (
            "dreq",
            Dreq {
                local_comm_id: 1,
                remote_comm_id: 2,
                remote_qpn_eecn: 0x13,
                ..Dreq::default()
            }
            .into(),
        ),
        (
            "drep",
            Drep {
                local_comm_id: 2,
                remote_comm_id: 1,
                ..Drep::default()
            }
            .into(),
        ),
        ("sidr-req", sidr.into()),
        ("sidr-rep", sidr_rep.into()),
    ];
    let mut mads = Vec::new();
    for (i, (name, m)) in messages.into_iter().enumerate() {
        let mad = m.encode_with_modifier(0x1000 + i as u64, i as u32);
        seeds.push(("cm_mad", format!("seed-{name}"), mad.to_vec()));
        mads.push(mad);
    }
    mads
}

/// `udp_rx`: packets as the owner of 10.66.0.2:4791 receives them from SRC, the same
/// relayed to a process behind the port, a GRO train, and MADs to QP1.
fn udp_rx_seeds(seeds: &mut Vec<Seed>, packets: &[Vec<u8>], mads: &[[u8; 256]]) {
    use crate::udp_rx::{header, OWNER_PORT};
    use std::net::{IpAddr, SocketAddr};
    let from = SocketAddr::new(IpAddr::V4(SRC), SPORT);
    let owner = SocketAddr::new(IpAddr::V4(DST), OWNER_PORT);
    for (i, p) in packets.iter().enumerate() {
        let mut s = header(false, true, false, None, from, 0);
        s.extend_from_slice(p);
        seeds.push(("udp_rx", format!("seed-{i:02}"), s));
        if i % 4 == 0 {
            // `relay_encode` writes the whole datagram into its buffer.
            let mut relayed = Vec::new();
            rverbs::fuzzing::udp::relay_encode(from, 0, p, &mut relayed);
            let mut s = header(false, false, true, None, owner, 0);
            s.extend_from_slice(&relayed);
            seeds.push(("udp_rx", format!("seed-relayed-{i:02}"), s));
        }
    }
    let first = &packets[0];
    let mut s = header(false, true, false, Some(first.len() as u16), from, 0);
    s.extend_from_slice(first);
    s.extend_from_slice(first);
    seeds.push(("udp_rx", "seed-train".into(), s));
    for (i, mad) in mads.iter().enumerate().step_by(3) {
        let mut repr = RoceRepr::new(
            BthRepr {
                opcode: OpCode::UdSendOnly,
                solicited: false,
                migreq: false,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 1,
                ack_req: false,
                psn: i as u32,
            },
            mad.len(),
        );
        repr.deth = Some(rverbs_proto::wire::DethRepr { qkey: 0x8001_0000, src_qp: 1 });
        let mut s = header(false, true, false, None, from, 0);
        s.extend_from_slice(&packet(&repr, mad));
        seeds.push(("udp_rx", format!("seed-mad-{i:02}"), s));
    }
}

/// `shm_segments`: one of each reader's operations on a record or ring the owner wrote.
fn shm_seeds(seeds: &mut Vec<Seed>) {
    let u32s = |out: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    let u64s = |out: &mut Vec<u8>, v: &[u64]| v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    // A region's key record, and an access inside it.
    let mut key = vec![0u8];
    u32s(&mut key, &[2, 0x1234_5601]);
    key.extend_from_slice(&[1, 1, 2]);
    u32s(&mut key, &[0xf]);
    key.push(0);
    u32s(&mut key, &[0x12_3456]);
    u64s(&mut key, &[0x10000, 4096, 0x7f00_0001_0000, 3, 64]);
    key.extend_from_slice(&[0, 2, 0]);
    u32s(&mut key, &[1]);
    key.push(0);
    u32s(&mut key, &[100]);
    key.push(0);
    key.extend_from_slice(&200u16.to_le_bytes());
    u32s(&mut key, &[8192]);
    seeds.push(("shm_segments", "seed-key".into(), key));
    // A QP record.
    let mut qp = vec![1u8];
    for w in [0x10012u32, 3, 2, 0xf, 0x1111, 12, 4, 2, 0, 1, 3, 0, 1, 0, 1024, 0x20013] {
        qp.push(128);
        u32s(&mut qp, &[w]);
    }
    u64s(&mut qp, &[0, 0xffff_0a42_0001]);
    qp.push(0);
    seeds.push(("shm_segments", "seed-qp".into(), qp));
    // Completion rings: a FIFO, and one overrun with IGNORE_OVERRUN.
    seeds.push(("shm_segments", "seed-ring".into(), vec![2, 3, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2]));
    let mut over = vec![2, 3, 1];
    over.extend_from_slice(&[0; 7]);
    over.extend_from_slice(&[2; 5]);
    seeds.push(("shm_segments", "seed-ring-overrun".into(), over));
    // A receive ring of 4 slots of 2 SGEs, head 1 and 2 queued, a slot of one SGE.
    let mut rq = vec![3u8, 0, 4, 2];
    u32s(&mut rq, &[4096]);
    u64s(&mut rq, &[1 << 32 | 2]);
    for w in [7u64, 1, 0x7f00_0000_1000, 0x1234_0000_0100, 0, 0] {
        rq.push(1);
        u64s(&mut rq, &[w]);
    }
    seeds.push(("shm_segments", "seed-rq".into(), rq));
    // An endpoint header: pid, canary, and a relay port published for 10.66.0.2.
    let mut hdr = vec![4u8, 3, 1, 2, 77, 2, 1, 0];
    u32s(&mut hdr, &[0x1000, 0]);
    hdr.extend_from_slice(&[3, 2, 0x11, 0, 0, 2, 7]);
    hdr.extend_from_slice(&40123u16.to_le_bytes());
    hdr.push(0);
    seeds.push(("shm_segments", "seed-header".into(), hdr));
    // A proxied read of 64 bytes through a remote key, then a write that asks for a right
    // to write, both in a channel segment of the right size.
    let mut px = vec![5u8, 1];
    u32s(&mut px, &[0x1234_5601]);
    px.extend_from_slice(&[1, 1]);
    u32s(&mut px, &[1, 3, 0x4]);
    u64s(&mut px, &[0x7f00_0000_1000]);
    px.push(0);
    px.extend_from_slice(&64u16.to_le_bytes());
    px.push(0);
    px.extend_from_slice(&[5, 0]);
    u32s(&mut px, &[0x1234_5601]);
    px.extend_from_slice(&[1, 0]);
    u32s(&mut px, &[0, 0x1]);
    u64s(&mut px, &[0x7f00_0000_2000]);
    px.push(0);
    px.extend_from_slice(&4096u16.to_le_bytes());
    px.push(0);
    seeds.push(("shm_segments", "seed-proxy".into(), px));
    // A CQ of 4: its own capacity in a segment of the right size, endpoints 0 and 1
    // alive; a channel and an arming, five publishes (the fifth an overrun), polls, a
    // resize with nobody inside, one followed after the forwarding mark is set.
    let mut cq = vec![6u8, 3, 0, 0, 0b11];
    cq.extend_from_slice(&[3, 2, 0, 1]); // channel = 1
    cq.extend_from_slice(&[5, 0, 0]); // arm for the next completion
    for pid in [1u8, 1, 3, 1] {
        cq.extend_from_slice(&[0, 1, pid, 0]);
    }
    cq.extend_from_slice(&[2, 2]);
    cq.extend_from_slice(&[5, 1, 1]); // freeze, stay frozen
    cq.extend_from_slice(&[3, 6, 0, 2]); // moved = 2
    cq.extend_from_slice(&[0, 0, 1, 0]); // follows the resize
    cq.extend_from_slice(&[5, 1, 0]); // freeze, thaw
    for _ in 0..3 {
        cq.extend_from_slice(&[1, 2, 1, 1]);
    }
    seeds.push(("shm_segments", "seed-cq".into(), cq));
    // Lock words: free; held by a dead endpoint 5; garbage.
    let mut lk = vec![7u8, 1, 0];
    u64s(&mut lk, &[0b10, 0, 0, 0]);
    lk.extend_from_slice(&[7, 1, 2, 5]);
    u64s(&mut lk, &[0b10, 0, 0, 0]);
    lk.extend_from_slice(&[7, 1, 3]);
    u32s(&mut lk, &[0xffff_fff0]);
    u64s(&mut lk, &[0, 0, 0, 0]);
    seeds.push(("shm_segments", "seed-lock".into(), lk));
}

/// `capi_structs`: one of each struct an application hands over, as a well-behaved one
/// fills it.
fn capi_seeds(seeds: &mut Vec<Seed>) {
    // ibv_modify_qp to RTR: state 2 (RTR), MTU 3 (1024), with an IPv4-mapped route.
    let mut rtr = vec![0u8, 0, 2, 0, 0, 0, 3, 0, 0];
    for w in [0x1111_u32, 0x55, 0x66, 0x12, 0xf, 16, 1] {
        rtr.extend_from_slice(&w.to_le_bytes());
    }
    let mut gid = [0u8; 16];
    gid[10..12].copy_from_slice(&[0xff, 0xff]);
    gid[12..].copy_from_slice(&DST.octets());
    for global in [1u8, 0] {
        rtr.extend_from_slice(&gid);
        rtr.extend_from_slice(&0u32.to_le_bytes());
        rtr.extend_from_slice(&[1, 64, 0]);
        rtr.extend_from_slice(&0u16.to_le_bytes());
        rtr.extend_from_slice(&[0, 0, 0, global, 1]);
    }
    rtr.extend_from_slice(&0u16.to_le_bytes());
    rtr.extend_from_slice(&[1, 1, 12, 1, 14, 7, 7]);
    rtr.extend_from_slice(&0u32.to_le_bytes());
    rtr.push(0);
    // STATE | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER | AV
    let mask: u32 = 1 | 1 << 8 | 1 << 20 | 1 << 12 | 1 << 17 | 1 << 15 | 1 << 7;
    rtr.extend_from_slice(&mask.to_le_bytes());
    seeds.push(("capi_structs", "seed-modify-rtr".into(), rtr));
    // A scatter list of two entries, then a receive chain of three.
    let mut sge = vec![1u8, 0, 2, 0];
    sge.extend((0..64).map(|i| i as u8));
    seeds.push(("capi_structs", "seed-sges".into(), sge));
    seeds.push(("capi_structs", "seed-recv-chain".into(), vec![2, 2, 200, 0, 1, 0, 0, 2, 0, 0, 3, 0]));
    // Socket addresses: 10.66.0.2:7471 and [fd00::2]:7471.
    let mut v4 = vec![3u8];
    v4.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    v4.extend_from_slice(&7471u16.to_be_bytes());
    v4.extend_from_slice(&DST.octets());
    v4.resize(1 + 128, 0);
    v4.push(0);
    seeds.push(("capi_structs", "seed-sockaddr-v4".into(), v4));
    let mut v6 = vec![3u8];
    v6.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
    v6.extend_from_slice(&7471u16.to_be_bytes());
    v6.extend_from_slice(&[0; 4]);
    v6.extend_from_slice(&"fd00::2".parse::<std::net::Ipv6Addr>().expect("v6").octets());
    v6.resize(1 + 128, 0);
    v6.push(1);
    seeds.push(("capi_structs", "seed-sockaddr-v6".into(), v6));
    // rdma_connect's parameters: 16 bytes of private data after a 4-byte prefix.
    let mut cp = vec![4u8, 4, b'p', b'r', b'e', b'f'];
    cp.extend((0..=255u8).map(|i| i.wrapping_mul(7)));
    cp.extend_from_slice(&[1, 16, 4, 4, 0, 7, 7, 0]);
    cp.extend_from_slice(&0x12u32.to_le_bytes());
    cp.push(1);
    seeds.push(("capi_structs", "seed-conn-param".into(), cp));
}

/// `config` and `log_filter`: the values the README documents, and the unset and empty
/// cases.
fn config_seeds(seeds: &mut Vec<Seed>) {
    let cases: [(&[u8], &[u8], &[u8], &[u8], &str); 4] = [
        (b"/tmp/rt-a", b"/run/user/1000", b"off", b"/sys/", "info"),
        (b"\xff", b"/run/user/1000", b"1", b"\xff", "rverbs=debug,rverbs_cm=trace"),
        (b"", b"", b"on", b"//", " warn , rverbs::transport[recv{qpn=7}]=trace,rverbs=Info,,=x"),
        (b"\xff", b"\xff", b"\xff", b"/custom/sys", "off"),
    ];
    for (i, (r, x, sw, sys, log)) in cases.iter().enumerate() {
        let mut s = Vec::new();
        for v in [r, x, sw, sys] {
            push_record(&mut s, v);
        }
        s.extend_from_slice(&1000u32.to_le_bytes());
        s.push(i as u8 & 1);
        seeds.push(("config", format!("seed-{i}"), s));
        let mut l = Vec::new();
        push_record(&mut l, ["rverbs::transport::net", "rverbs_cm::conn", "rverbs", "ibverbs"][i].as_bytes());
        l.extend_from_slice(log.as_bytes());
        seeds.push(("log_filter", format!("seed-{i}"), l));
    }
}

/// `neigh`: a neighbour dump, route tables and an ARP table as the kernel writes them.
fn neigh_seeds(seeds: &mut Vec<Seed>) {
    // A dump for fd69::2: an entry for it (REACHABLE, link-layer address first), one for
    // fd69::1 (FAILED), DONE; cut at byte 0x30, nothing overwritten.
    let mut d = vec![0u8, 2, 3];
    d.extend_from_slice(&[0, 0x02, 0x00, 2, 0, 1, 2]);
    d.extend_from_slice(&[1, 0x20, 0x00, 1, 2, 1]);
    d.extend_from_slice(&[5, 0, 0, 0]);
    d.extend_from_slice(&0x30u16.to_le_bytes());
    d.push(0);
    seeds.push(("neigh", "seed-dump".into(), d));
    // The same reply as raw bytes (native endianness), asked for fd69::2.
    let nl = |kind: u16, body: &[u8]| {
        let mut m = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(body);
        m
    };
    let mut body = vec![10u8, 0, 0, 0, 3, 0, 0, 0];
    body.extend_from_slice(&2u16.to_ne_bytes());
    body.extend_from_slice(&[0, 0]);
    body.extend_from_slice(&20u16.to_ne_bytes());
    body.extend_from_slice(&1u16.to_ne_bytes());
    body.extend_from_slice(&"fd69::2".parse::<std::net::Ipv6Addr>().expect("v6").octets());
    let mut raw = nl(28, &body);
    raw.extend(nl(3, &[0; 4]));
    let mut r = vec![1u8, 2];
    push_record(&mut r, &raw);
    seeds.push(("neigh", "seed-raw-dump".into(), r));
    // /proc/net/route: default via 192.168.0.1 on eth0, 192.168.0.0/24 on eth0,
    // 127.0.0.0/8 on lo; asked for 192.168.0.7; then the real text.
    let mut t = vec![2u8, 1, 0, 7, 3];
    t.extend_from_slice(&[0, 0, 0, 1]);
    t.extend_from_slice(&u32::from(Ipv4Addr::new(192, 168, 0, 1)).to_le_bytes());
    t.push(1);
    t.extend_from_slice(&[0, 24, 0, 0, 1]);
    t.extend_from_slice(&[1, 8, 1]);
    t.extend_from_slice(&u32::from(Ipv4Addr::new(127, 0, 0, 0)).to_le_bytes());
    t.extend_from_slice(&[0, 1]);
    push_record(
        &mut t,
        b"Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
    );
    seeds.push(("neigh", "seed-route".into(), t));
    // /proc/net/ipv6_route: fd69::/64 on veth0, a local route for fd69::1; asked for
    // fd69::2.
    let mut t6 = vec![3u8, 2, 2];
    t6.extend_from_slice(&[1, 64, 0, 0, 1, 1]);
    t6.extend_from_slice(&[1, 128, 1, 1, 0, 0, 1]);
    push_record(
        &mut t6,
        b"fd690000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001    veth0\n",
    );
    seeds.push(("neigh", "seed-route6".into(), t6));
    // /proc/net/arp: 10.66.66.2 complete, 10.66.66.3 incomplete; asked for .2.
    let mut a = vec![4u8, 2, 2, 2, 2, 1, 3, 0, 1];
    push_record(
        &mut a,
        b"IP address       HW type     Flags       HW address            Mask     Device\n\
10.66.66.2       0x1         0x2         aa:bb:cc:dd:ee:ff     *        veth0\n",
    );
    seeds.push(("neigh", "seed-arp".into(), a));
}

/// `capi_send`: a send chain as a well-behaved application posts it (an inline SEND, an
/// RDMA WRITE with immediate data, a compare-and-swap), the creation attributes of an
/// extended RC QP with builders, and those of an extended CQ.
fn capi_send_seeds(seeds: &mut Vec<Seed>) {
    let sges = ibverbs::fuzzing::MAX_ANY_SGE;
    // One request: opcode, flags selector (+ byte), count, imm, union, remote_srqn, the
    // bind_mw member (NULL window), the scatter list (offset/2, length, not NULL), not NULL.
    let wr = |out: &mut Vec<u8>, opcode: u8, inline: bool, n: u8, union: &[u8]| {
        out.extend_from_slice(&[0, opcode]);
        out.extend_from_slice(if inline { &[1, 0] } else { &[0] });
        out.extend_from_slice(&[0, n]);
        out.extend_from_slice(&0x1234_5678u32.to_le_bytes());
        out.extend_from_slice(union);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&[0, 0, 0, 0, 0]);
        for i in 0..sges {
            out.extend_from_slice(&[(i * 16) as u8, 24, 0]);
        }
        out.push(0);
    };
    let mut c = vec![0u8, 4, 1, 0, 2, 15];
    let mut rdma = vec![0u8];
    rdma.extend_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
    rdma.extend_from_slice(&0x55u32.to_le_bytes());
    let mut atomic = vec![1u8];
    for v in [0x7f00_0000_2000u64, 5, 6] {
        atomic.extend_from_slice(&v.to_le_bytes());
    }
    atomic.extend_from_slice(&0x66u32.to_le_bytes());
    wr(&mut c, 2, true, 2, &rdma);
    wr(&mut c, 1, false, 1, &rdma);
    wr(&mut c, 5, false, 1, &atomic);
    seeds.push(("capi_send", "seed-send-chain".into(), c));
    // ibv_create_qp_ex: RC in a PD with the SEND, RDMA WRITE and READ builders.
    let mut q = vec![1u8];
    for p in [1u16, 2, 2, 0] {
        q.extend_from_slice(&p.to_le_bytes());
    }
    for cap in [16u32, 16, 2, 2, 64] {
        q.extend_from_slice(&cap.to_le_bytes());
    }
    q.extend_from_slice(&[0, 2]);
    q.extend_from_slice(&0u32.to_le_bytes());
    q.push(1);
    q.extend_from_slice(&3u16.to_le_bytes());
    q.extend_from_slice(&0u16.to_le_bytes());
    q.push(0);
    q.push(0);
    q.extend_from_slice(&0b0001_1001u16.to_le_bytes());
    seeds.push(("capi_send", "seed-qp-init-ex".into(), q));
    // ibv_create_cq_ex: 64 entries, vector 0, the standard flags and IGNORE_OVERRUN.
    let mut cq = vec![2u8];
    cq.extend_from_slice(&64u32.to_le_bytes());
    cq.extend_from_slice(&[1, 0, 0, 0]);
    cq.extend_from_slice(&[0, 0, 0]);
    cq.extend_from_slice(&0x3fu16.to_le_bytes());
    cq.extend_from_slice(&[0, 1, 0, 2]);
    seeds.push(("capi_send", "seed-cq-init-ex".into(), cq));
    // ibv_create_srq_ex: an XRC SRQ with its PD, domain and CQ.
    let mut srq = vec![3u8];
    for v in [64u32, 2, 0] {
        srq.extend_from_slice(&v.to_le_bytes());
    }
    srq.extend_from_slice(&[0, 0b1111, 0, 1]);
    for p in [1u16, 2, 3] {
        srq.extend_from_slice(&p.to_le_bytes());
    }
    seeds.push(("capi_send", "seed-srq-init-ex".into(), srq));
    // The builders' arguments: SIGNALED | INLINE flags, an atomic-write value, a list of
    // two SGEs of four allowed, three inline pieces.
    let mut b = vec![4u8];
    b.extend_from_slice(&(IBV_SEND_SIGNALED_FLAG | 8).to_le_bytes());
    b.extend_from_slice(&[1, 2, 3, 4, 1, 0, 4, 0, 2]);
    b.extend(std::iter::repeat_n(7u8, 34 * 8));
    b.push(0);
    b.extend((0..=255u8).map(|i| i.wrapping_mul(3)));
    b.push(3);
    b.extend_from_slice(&[0, 16, 0, 32, 8, 0, 200, 0, 0]);
    b.push(0);
    seeds.push(("capi_send", "seed-builder-args".into(), b));
    // rdma_create_ep: an active TCP endpoint with 16 bytes of private data.
    let mut ep = vec![5u8];
    ep.extend((0..64u8).map(|i| i ^ 0x33));
    ep.extend_from_slice(&0u32.to_le_bytes());
    ep.extend_from_slice(&[0, 2, 0, 0, 16, 1]);
    seeds.push(("capi_send", "seed-create-ep".into(), ep));
}

/// `IBV_SEND_SIGNALED`.
const IBV_SEND_SIGNALED_FLAG: u32 = 1 << 1;
