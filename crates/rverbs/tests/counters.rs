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

/// docs/network.md, "ACKs where the requester stops": 32 SENDs posted in one call across
/// hosts leave in one pass, only the last asking for an ACK, and the responder, which
/// acknowledges what each received run owes, sends fewer ACKs than messages (before: one
/// per message). Every SEND completes and every receive holds its message.
#[test]
fn a_stream_of_sends_across_hosts_is_acknowledged_by_fewer_acks_than_messages() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    const N: u64 = 32;
    let (da, db) = (device_on([127, 0, 17, 1], "acks", None), device_on([127, 0, 17, 2], "acks", None));
    let (a, b) = (side_on(da.open().unwrap(), QpType::Rc, 64, CAP), side_on(db.open().unwrap(), QpType::Rc, 64, CAP));
    connect_across(&a.qp, &b.ctx, b.qp.qp_num(), 14);
    connect_across(&b.qp, &a.ctx, a.qp.qp_num(), 14);
    for i in 0..N {
        post_recv(&b, 100 + i, 64 * i as usize, 64);
        a.mr.write(64 * i as usize, &[i as u8 + 1; 8]).unwrap();
    }
    let before = b.ctx.counters();
    let sges: Vec<[Sge; 1]> = (0..N).map(|i| [a.mr.sge(64 * i as usize, 8).unwrap()]).collect();
    let wrs: Vec<SendWr<'_>> = sges.iter().enumerate().map(|(i, s)| SendWr::send(i as u64, s).signaled()).collect();
    a.qp.post_send(&wrs).unwrap();
    for i in 0..N {
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (i, WcStatus::Success), "send {i}");
    }
    for i in 0..N {
        let wc = poll_one(&b.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (100 + i, WcStatus::Success, Some(8)), "receive {i}");
        let mut got = [0u8; 8];
        b.mr.read(64 * i as usize, &mut got).unwrap();
        assert_eq!(got, [i as u8 + 1; 8], "receive {i}'s bytes");
    }
    let after = b.ctx.counters();
    let sent = delta(&before, &after).into_iter().find(|(n, _)| *n == "sent_pkts").unwrap().1;
    assert!((1..N).contains(&sent), "the responder sent {sent} packets (ACKs) for {N} messages");
    assert_empty(&a.cq);
    assert_empty(&b.cq);
}
