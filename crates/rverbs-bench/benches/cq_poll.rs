//! Batch poll cost per completion (the target: low nanoseconds per CQE, single thread).
//!
//! - `cq_poll/drain/batch<B>`: each measured iteration drains a CQ holding `FILL`
//!   successful completions with `cq.poll(&mut [Wc; B])` until all are taken. The
//!   completions come from `FILL` signaled zero-length RDMA WRITEs on a connected
//!   in-process RC pair, posted before the clock starts (`iter_custom` times only the
//!   drain), so the ring is hot in this core's cache, as it is for an application polling
//!   right behind its posts. Throughput is in CQEs.
//! - `cq_poll/drain_single_threaded/batch16`: the same on CQs created with
//!   `CqCreateFlags::SINGLE_THREADED` (no consumer lock).
//! - `cq_poll_empty/<default|single_threaded>`: one `poll` call that finds nothing.
//!
//! Run: `cargo bench -p rverbs-bench --bench cq_poll`

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use rverbs::{Cq, CqCreateFlags, SendWr, Sge, Wc};

/// Completions in the CQ at the start of each drain.
const FILL: usize = 1024;

/// Work requests per `post_send` while filling (the send queue depth).
const POST_CHUNK: usize = 256;

/// Takes exactly `n` completions out of `cq`, `B` at most per call; returns the number of
/// `poll` calls.
#[inline(never)]
fn drain<const B: usize>(cq: &Cq, n: usize) -> usize {
    let mut wc = [Wc::default(); B];
    let (mut taken, mut calls) = (0, 0);
    while taken < n {
        let got = cq.poll(&mut wc).expect("poll");
        black_box(&wc[..got]);
        taken += got;
        calls += 1;
    }
    calls
}

fn drain_bench<const B: usize>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, p: &common::Pair) {
    let no_data: [Sge; 0] = [];
    let (remote, rkey) = (p.b.mr.iova(), p.b.mr.rkey());
    let wrs: Vec<SendWr<'_>> = (0..FILL as u64)
        .map(|i| SendWr::write(i, &no_data, remote, rkey).signaled())
        .collect();
    g.bench_function(BenchmarkId::new(name, format!("batch{B}")), |bench| {
        bench.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                // Untimed: put FILL completions into the CQ.
                for chunk in wrs.chunks(POST_CHUNK) {
                    p.a.qp.post_send(chunk).expect("post_send");
                }
                let t = Instant::now();
                let calls = drain::<B>(&p.a.cq, FILL);
                timed += t.elapsed();
                assert_eq!(calls, FILL.div_ceil(B), "the CQ held {FILL} completions");
            }
            timed
        })
    });
}

fn cq_poll(c: &mut Criterion) {
    let cqe = (2 * FILL) as u32;
    let p = common::pair(cqe, POST_CHUNK as u32, 1, 4096);
    let st = common::pair_with(
        cqe,
        CqCreateFlags::SINGLE_THREADED,
        POST_CHUNK as u32,
        1,
        4096,
    );

    let mut g = c.benchmark_group("cq_poll");
    g.throughput(Throughput::Elements(FILL as u64));
    drain_bench::<1>(&mut g, "drain", &p);
    drain_bench::<16>(&mut g, "drain", &p);
    drain_bench::<32>(&mut g, "drain", &p);
    drain_bench::<16>(&mut g, "drain_single_threaded", &st);
    g.finish();

    let mut g = c.benchmark_group("cq_poll_empty");
    g.throughput(Throughput::Elements(1));
    let mut wc = [Wc::default(); 16];
    for (name, pair) in [("default", &p), ("single_threaded", &st)] {
        g.bench_function(name, |bench| {
            bench.iter(|| black_box(pair.a.cq.poll(black_box(&mut wc)).expect("poll")))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = cq_poll
}
criterion_main!(benches);
