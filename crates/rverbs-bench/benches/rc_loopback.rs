//! In-process RC traffic through the built-in device, and its peer: plain memcpy.
//!
//! - `send_pingpong/<size>`: one SEND/RECV round trip per iteration (B posts a receive,
//!   A sends, both CQs polled; then the same back). Time per iteration = round trip.
//! - `write_lat/<size>`: post one signaled RDMA WRITE and poll its completion.
//! - `write_bw/<size>`: a stream of RDMA WRITEs to the same destination with up to
//!   `WINDOW` outstanding and every `CQ_MOD`-th signaled (perftest `ib_write_bw` style);
//!   time per iteration = one WRITE at steady state.
//! - `peer_memcpy/<size>`: `copy_from_slice` between two page-aligned heap buffers of the
//!   same size, the ceiling for an in-process WRITE (the target is ≥ 80 % of memcpy
//!   bandwidth). Each size's WRITE benchmarks and its memcpy run back to back.
//!
//! All setup (connecting, registering, filling buffers) happens before the clock starts.
//!
//! Run: `cargo bench -p rverbs-bench --bench rc_loopback`

mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rverbs::{RecvWr, SendWr, Wc};

/// WRITEs outstanding in `write_bw`.
const WINDOW: u64 = 64;
/// Every `CQ_MOD`-th WRITE of `write_bw` is signaled.
const CQ_MOD: u64 = 16;

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8) ^ ((i >> 8) as u8).wrapping_mul(31))
        .collect()
}

fn send_pingpong(c: &mut Criterion) {
    let mut g = c.benchmark_group("send_pingpong");
    for size in [8usize, 4096] {
        let p = common::pair(64, 16, 16, 2 * size);
        p.a.mr.write(0, &pattern(size)).unwrap();
        p.b.mr.write(0, &pattern(size)).unwrap();
        let a_send = [p.a.mr.sge(0, size as u32).unwrap()];
        let a_recv = [p.a.mr.sge(size, size as u32).unwrap()];
        let b_send = [p.b.mr.sge(0, size as u32).unwrap()];
        let b_recv = [p.b.mr.sge(size, size as u32).unwrap()];
        let ran = Cell::new(false);
        g.bench_function(BenchmarkId::from_parameter(size), |bench| {
            ran.set(true);
            bench.iter(|| {
                p.b.qp.post_recv(&[RecvWr::new(1, &b_recv)]).unwrap();
                p.a.qp
                    .post_send(&[SendWr::send(2, &a_send).signaled()])
                    .unwrap();
                common::poll_one(&p.a.cq);
                common::poll_one(&p.b.cq);
                p.a.qp.post_recv(&[RecvWr::new(3, &a_recv)]).unwrap();
                p.b.qp
                    .post_send(&[SendWr::send(4, &b_send).signaled()])
                    .unwrap();
                common::poll_one(&p.b.cq);
                common::poll_one(&p.a.cq)
            })
        });
        // Outside the timing: the last pong arrived intact (if the bench ran: a filter on
        // the command line skips it).
        if ran.get() {
            let mut got = vec![0u8; size];
            p.a.mr.read(size, &mut got).unwrap();
            assert_eq!(got, pattern(size), "pong payload");
        }
    }
    g.finish();
}

/// `write_lat/<size>`: post one signaled WRITE, poll its completion.
fn write_lat(c: &mut Criterion, size: usize) {
    let p = common::pair(64, 16, 1, size);
    p.a.mr.write(0, &pattern(size)).unwrap();
    let sge = [p.a.mr.sge(0, size as u32).unwrap()];
    let (remote, rkey) = (p.b.mr.iova(), p.b.mr.rkey());
    let mut g = c.benchmark_group("write_lat");
    g.throughput(Throughput::Bytes(size as u64));
    let ran = Cell::new(false);
    g.bench_function(BenchmarkId::from_parameter(size), |bench| {
        ran.set(true);
        bench.iter(|| {
            p.a.qp
                .post_send(&[SendWr::write(0, &sge, remote, rkey).signaled()])
                .unwrap();
            common::poll_one(&p.a.cq)
        })
    });
    g.finish();
    if ran.get() {
        let mut got = vec![0u8; size];
        p.b.mr.read(0, &mut got).unwrap();
        assert_eq!(got, pattern(size), "written bytes");
    }
}

/// Streams `n` WRITEs of `sge` to the start of B's region with the window and signaling
/// of `write_bw`; returns the elapsed time.
fn write_stream(p: &common::Pair, sge: &[rverbs::Sge; 1], n: u64) -> Duration {
    let (remote, rkey) = (p.b.mr.iova(), p.b.mr.rkey());
    let mut batch: Vec<SendWr<'_>> = Vec::with_capacity(16);
    let mut wc = [Wc::default(); 16];
    let (mut posted, mut completed) = (0u64, 0u64);
    let t = Instant::now();
    while completed < n {
        while posted < n && posted - completed < WINDOW {
            let k = (n - posted).min(WINDOW - (posted - completed)).min(16);
            batch.clear();
            for id in posted..posted + k {
                let wr = SendWr::write(id, sge, remote, rkey);
                batch.push(if (id + 1) % CQ_MOD == 0 || id + 1 == n {
                    wr.signaled()
                } else {
                    wr
                });
            }
            p.a.qp.post_send(&batch).unwrap();
            posted += k;
        }
        let got = p.a.cq.poll(&mut wc).unwrap();
        for w in &wc[..got] {
            assert!(w.is_success(), "{w:?}");
            completed = w.wr_id() + 1;
        }
    }
    t.elapsed()
}

/// `write_bw/<size>`: windowed WRITE stream; time per iteration = one WRITE.
fn write_bw(c: &mut Criterion, size: usize) {
    let p = common::pair(256, WINDOW as u32, 1, size);
    let body = pattern(size);
    p.a.mr.write(0, &body).unwrap();
    let sge = [p.a.mr.sge(0, size as u32).unwrap()];
    let mut g = c.benchmark_group("write_bw");
    g.throughput(Throughput::Bytes(size as u64));
    let ran = Cell::new(false);
    g.bench_function(BenchmarkId::from_parameter(size), |bench| {
        ran.set(true);
        bench.iter_custom(|iters| write_stream(&p, &sge, iters))
    });
    g.finish();
    if ran.get() {
        let mut got = vec![0u8; size];
        p.b.mr.read(0, &mut got).unwrap();
        assert_eq!(got, body, "written bytes");
    }
}

/// A page-aligned window of `size` bytes inside a fresh heap buffer (registered regions
/// are page-aligned too; a plain `Vec` starts 16 bytes into a page, which changes memcpy
/// speed by itself).
fn page_aligned(size: usize, byte: u8) -> (Vec<u8>, usize) {
    let v = vec![byte; size + 4096];
    let off = (4096 - v.as_ptr() as usize % 4096) % 4096;
    (v, off)
}

/// `peer_memcpy/<size>`: `copy_from_slice` between two page-aligned heap buffers.
fn peer_memcpy(c: &mut Criterion, size: usize) {
    let (mut src, so) = page_aligned(size, 0);
    src[so..so + size].copy_from_slice(&pattern(size));
    let (mut dst, d) = page_aligned(size, 0);
    let mut g = c.benchmark_group("peer_memcpy");
    g.throughput(Throughput::Bytes(size as u64));
    let ran = Cell::new(false);
    g.bench_function(BenchmarkId::from_parameter(size), |bench| {
        ran.set(true);
        bench.iter(|| {
            black_box(&mut dst[d..d + size]).copy_from_slice(black_box(&src[so..so + size]))
        })
    });
    g.finish();
    if ran.get() {
        assert_eq!(dst[d..d + size], src[so..so + size]);
    }
}

/// WRITE latency, WRITE throughput and the memcpy peer, size by size, so each rverbs
/// figure and its peer are measured back to back (this 2-vCPU VM drifts over time, so only
/// figures taken together compare).
fn write_and_peer(c: &mut Criterion) {
    for size in [8usize, 4096, 64 << 10, 1 << 20] {
        if size <= 64 << 10 {
            write_lat(c, size);
        }
        if size >= 4096 {
            write_bw(c, size);
        }
        peer_memcpy(c, size);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = send_pingpong, write_and_peer
}
criterion_main!(benches);
