//! The per-packet work of a RoCEv2 receiver and sender, in one process (no sockets): what a
//! 1 KiB RDMA WRITE MIDDLE packet (MTU 1024) costs to parse, to emit, and to have its ICRC
//! computed and, for a packet sent with a non-zero IPv4 ID (rxe, NICs, a GSO train), its ID
//! solved. BENCHMARKS.md, "RoCEv2 per-packet costs"; run with
//! `cargo bench -p rverbs-proto --bench wire`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rverbs_proto::wire::icrc::{self, Ipv4IdBasis};
use rverbs_proto::wire::{BthRepr, OpCode, RocePacket, RoceRepr};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PAYLOAD: usize = 1024;

fn middle() -> RoceRepr {
    let bth = BthRepr {
        opcode: OpCode::RcRdmaWriteMiddle,
        solicited: false,
        migreq: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x11,
        ack_req: false,
        psn: 42,
    };
    RoceRepr::new(bth, PAYLOAD)
}

/// A sealed packet (ICRC for IPv4 ID 0).
fn packet() -> Vec<u8> {
    let repr = middle();
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut p = RocePacket::new_unchecked(&mut buf[..]);
    repr.emit(&mut p);
    p.payload_mut().iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let icrc = icrc::compute_ipv4_pseudo(SRC, DST, 49152, 4791, p.without_icrc());
    p.set_icrc(icrc);
    buf
}

fn wire(c: &mut Criterion) {
    let buf = packet();
    let mut g = c.benchmark_group("roce_1k");
    g.throughput(Throughput::Bytes(PAYLOAD as u64));
    g.bench_function("parse", |b| {
        b.iter(|| {
            let p = RocePacket::new_checked(black_box(&buf[..])).unwrap();
            black_box(RoceRepr::parse(&p).unwrap())
        })
    });
    let repr = middle();
    let mut out = vec![0u8; repr.buffer_len()];
    g.bench_function("emit", |b| {
        b.iter(|| {
            let mut p = RocePacket::new_unchecked(&mut out[..]);
            black_box(&repr).emit(&mut p);
        })
    });
    let body = RocePacket::new_checked(&buf[..]).unwrap().without_icrc().to_vec();
    g.bench_function("icrc_ipv4", |b| {
        b.iter(|| icrc::compute_ipv4_pseudo(SRC, DST, 49152, 4791, black_box(&body)))
    });
    let basis = Ipv4IdBasis::new(body.len());
    let zero = icrc::compute_ipv4_pseudo(SRC, DST, 49152, 4791, &body);
    let sent = icrc::ipv4_pseudo_with_id(SRC, DST, 49152, 4791, 7, &body);
    g.bench_function("solve_id_cached_basis", |b| b.iter(|| basis.solve(black_box(sent ^ zero))));
    g.finish();
}

criterion_group!(benches, wire);
criterion_main!(benches);
