//! The endpoint's hardware counters (docs/device.md, "Hardware counters"; rxe's names,
//! `rdma statistic show`): traffic of a known shape between two QPs of this process
//! moves each counter by exactly what it did, and nothing else.
//!
//! The counters are the process's: the tests of this file take a lock so that no other
//! traffic of it runs between the two readings (under `cargo test`, which runs them on
//! threads of one process; nextest gives each its own).

mod common;

use std::sync::Mutex;

use common::*;
use rverbs::*;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `after - before`, counter by counter, by name.
fn delta(before: &Counters, after: &Counters) -> Vec<(&'static str, u64)> {
    before.named().iter().zip(after.named()).map(|((name, b), (_, a))| (*name, a - b)).collect()
}

/// Asserts that the counters named in `moved` moved by exactly those amounts and every
/// other counter did not move.
#[track_caller]
fn assert_moved(before: &Counters, after: &Counters, moved: &[(&str, u64)]) {
    for (name, d) in delta(before, after) {
        let want = moved.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
        assert_eq!(d, want, "counter {name}: moved by {d}, expected {want} (all: {:?})", delta(before, after));
    }
}

#[test]
fn writes_sends_and_receives_on_the_same_host_count_as_local_requests() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (a, b) = pair(QpType::Rc);
    const WRITES: u64 = 5;
    const SENDS: u64 = 3;
    let before = a.ctx.counters();
    let sge = [a.mr.sge(0, 64).unwrap()];
    for i in 0..WRITES {
        a.qp.post_send(&[SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
    for i in 0..SENDS {
        post_recv(&b, 100 + i, 0, 64);
        a.qp.post_send(&[SendWr::send(10 + i, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    }
    let after = a.ctx.counters();
    // Both QPs are this process's: one endpoint, whichever context reads it.
    assert_eq!(after, b.ctx.counters());
    assert_moved(
        &before,
        &after,
        &[("local_requests", WRITES + SENDS), ("rdma_sends", SENDS), ("rdma_recvs", SENDS)],
    );
}

#[test]
fn a_send_without_a_receive_counts_rnr_naks_until_the_retries_are_exceeded() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // rnr_retry 2: the first two RNR NAKs are retried, the third ends the request.
    let path = Path { rnr_retry: 2, min_rnr_timer: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 256, CAP);
    let before = a.ctx.counters();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RnrRetryExcErr);
    assert_empty(&b.cq);
    let after = a.ctx.counters();
    assert_moved(
        &before,
        &after,
        &[("local_requests", 3), ("send_rnr_err", 3), ("rcvd_rnr_err", 3), ("retry_rnr_exceeded_err", 1)],
    );
}

#[test]
fn host_counters_list_this_process_once_it_opened_the_device() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let mine: Vec<_> = host_counters().into_iter().filter(|e| e.pid == std::process::id()).collect();
    assert_eq!(mine.len(), 1, "this process is one endpoint");
    // What the segment says is what the context says (nothing ran between the readings).
    assert_eq!(mine[0].counters, a.ctx.counters());
    assert!(mine[0].counters.local_requests >= 1);
}

