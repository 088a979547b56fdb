//! Per-QP and per-CQ statistics (issue 23, observability; docs/device.md, "Per-QP and
//! per-CQ statistics"): on a device opened with `DeviceConfig::stats(true)`, traffic of
//! a known shape moves each QP's and CQ's counts by exactly what its owner posted and
//! polled, each successful send work request counts once in its QP's latency histogram,
//! and a CQ's record keeps its size, its deepest poll and its overrun; on a device
//! without, nothing is counted.
//!
//! Each test opens a device of its own (the statistics are per device), so the counts
//! are only this test's traffic.

mod common;

use common::{ALL_ACCESS, CAP, MR_LEN, PATH};
use rverbs::*;

/// One RC side of a connection on device `dev`.
fn side_on(dev: &Device) -> common::Side {
    side_on_typed(dev, QpType::Rc)
}

/// One side with a QP of `qp_type` on device `dev`.
fn side_on_typed(dev: &Device, qp_type: QpType) -> common::Side {
    let ctx = dev.open().expect("open the device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
    let qp = pd.create_qp(&QpInit::new(qp_type, &cq, CAP)).unwrap();
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    common::Side { ctx, pd, cq, qp, mr }
}

/// Two connected RC sides on one device.
fn pair_on(dev: &Device) -> (common::Side, common::Side) {
    let (a, b) = (side_on(dev), side_on(dev));
    common::connect(&a, &b, &PATH);
    (a, b)
}

/// The one completion in `cq`, found by a single poll (in-process traffic completes
/// inside `post_send`), so that a test knows how many polls it made.
#[track_caller]
fn poll_exactly_one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1, "one completion was expected");
    wc[0]
}

#[test]
fn sends_writes_and_an_error_count_exactly_on_their_qps_and_cqs() {
    let dev = DeviceConfig::from_env().stats(true).open().unwrap();
    let (a, b) = pair_on(&dev);
    let sge = [a.mr.sge(0, 48).unwrap()];
    // 3 SENDs of 48 bytes into receives of 64; 2 WRITEs of 48 bytes; 1 WRITE unsignaled.
    for i in 0..3 {
        common::post_recv(&b, 100 + i, 0, 64);
        a.qp.post_send(&[SendWr::send(i, &sge).signaled()]).unwrap();
        assert_eq!(poll_exactly_one(&a.cq).status(), WcStatus::Success);
        let r = poll_exactly_one(&b.cq);
        assert_eq!((r.status(), r.byte_len()), (WcStatus::Success, Some(48)));
    }
    for i in 0..2 {
        a.qp.post_send(&[SendWr::write(10 + i, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
        assert_eq!(poll_exactly_one(&a.cq).status(), WcStatus::Success);
    }
    a.qp.post_send(&[SendWr::write(20, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    common::assert_empty(&a.cq);
    common::assert_empty(&b.cq);

    let qa = a.qp.stats();
    assert_eq!(qa.qpn, a.qp.qp_num());
    assert_eq!((qa.send_wrs, qa.recv_wrs), (6, 0));
    assert_eq!((qa.send_completions, qa.send_bytes), (5, 5 * 48), "5 signaled sends of 48 bytes: {qa:?}");
    assert_eq!((qa.recv_completions, qa.recv_bytes, qa.error_completions), (0, 0, 0));
    let qb = b.qp.stats();
    assert_eq!((qb.send_wrs, qb.recv_wrs), (0, 3));
    assert_eq!((qb.recv_completions, qb.recv_bytes), (3, 3 * 48), "{qb:?}");
    assert_eq!((qb.send_completions, qb.error_completions), (0, 0));
    assert_eq!((a.cq.stats().polled, a.cq.stats().empty_polls), (5, 1));
    assert_eq!((b.cq.stats().polled, b.cq.stats().empty_polls), (3, 1));
    // Every poll found one completion waiting, or none.
    for cq in [&a.cq, &b.cq] {
        let s = cq.stats();
        assert_eq!((s.size, s.deepest, s.overrun), (cq.cqe(), 1, false), "{s:?}");
    }
    assert_ne!(a.cq.stats().cq, b.cq.stats().cq, "each CQ has its record");
    // 6 successful send work requests, the unsignaled WRITE too; none on b.
    let lat = qa.send_latency;
    assert_eq!(lat.count, 6, "{lat:?}");
    assert!(lat.min_ns <= lat.p50_ns && lat.p50_ns <= lat.p99_ns && lat.p99_ns <= lat.p999_ns && lat.p999_ns <= lat.max_ns, "{lat:?}");
    assert_eq!(qb.send_latency, Latency::default());

    // A WRITE to a key that does not exist: REMOTE_ACCESS_ERR, an error of `a`'s QP.
    a.qp.post_send(&[SendWr::write(30, &sge, b.mr.iova(), b.mr.rkey() ^ 0xff00).signaled()]).unwrap();
    assert_eq!(poll_exactly_one(&a.cq).status(), WcStatus::RemAccessErr);
    let qa = a.qp.stats();
    assert_eq!((qa.send_wrs, qa.send_completions, qa.error_completions), (7, 5, 1));
    assert_eq!(a.cq.stats().polled, 6);
    assert_eq!(qa.send_latency.count, 6, "a failed request has no latency");

    // The runtime directory lists both QPs of this device's endpoint with the same counts.
    let ep = a.qp.qp_num() >> 16;
    let listed = dev.host_stats().into_iter().find(|e| e.ep == ep).expect("this endpoint is listed");
    assert_eq!(listed.pid, std::process::id());
    assert_eq!(listed.qps, vec![a.qp.stats(), b.qp.stats()]);
    assert_eq!(listed.cqs, vec![a.cq.stats(), b.cq.stats()]);

    // A destroyed QP is no longer listed.
    let qpn = b.qp.qp_num();
    b.qp.destroy().unwrap();
    let listed = dev.host_stats().into_iter().find(|e| e.ep == ep).unwrap();
    assert!(listed.qps.iter().all(|q| q.qpn != qpn), "{listed:?}");
}

#[test]
fn extended_polling_counts_each_entry_and_each_enoent() {
    let dev = DeviceConfig::from_env().stats(true).open().unwrap();
    let (a, b) = pair_on(&dev);
    let sge = [a.mr.sge(0, 8).unwrap()];
    for i in 0..2 {
        a.qp.post_send(&[SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    }
    assert!(a.cq.start_poll().unwrap().is_some());
    assert!(a.cq.next_poll().unwrap().is_some());
    assert!(a.cq.next_poll().unwrap().is_none());
    a.cq.end_poll();
    assert!(a.cq.start_poll().unwrap().is_none());
    let s = a.cq.stats();
    assert_eq!((s.polled, s.empty_polls), (2, 1));
    // Another handle of the CQ reads the same record.
    assert_eq!(a.cq.clone().stats(), s);
    let q = a.qp.stats();
    assert_eq!((q.send_wrs, q.send_completions, q.send_bytes), (2, 2, 16));
    assert_eq!((q.send_latency.count, s.deepest), (2, 2));
}

#[test]
fn queued_requests_count_their_latency_at_completion() {
    // UC requests take the queue (the express lane is RC's), completing where the queue
    // retires them: 4 WRITEs, signaled or not, posted in one call.
    let dev = DeviceConfig::from_env().stats(true).open().unwrap();
    let (a, b) = (side_on_typed(&dev, QpType::Uc), side_on_typed(&dev, QpType::Uc));
    common::connect(&a, &b, &PATH);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let wrs: Vec<SendWr<'_>> = (0..4).map(|i| SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey())).collect();
    let mut wrs = wrs;
    wrs[3] = wrs[3].signaled();
    a.qp.post_send(&wrs).unwrap();
    let wc = common::poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::Success));
    let q = a.qp.stats();
    assert_eq!((q.send_wrs, q.send_completions, q.send_latency.count), (4, 1, 4), "{q:?}");
}

#[test]
fn an_overrun_is_kept_in_the_cq_record() {
    let dev = DeviceConfig::from_env().stats(true).open().unwrap();
    let (a, b) = pair_on(&dev);
    let cq = a.ctx.create_cq(&CqInit::new(4)).unwrap();
    let qp = a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let a = common::Side { cq, qp, ..a };
    let c = side_on(&dev);
    common::connect(&a, &c, &PATH);
    let sge = [a.mr.sge(0, 8).unwrap()];
    for i in 0..=u64::from(a.cq.cqe()) {
        let _ = a.qp.post_send(&[SendWr::write(i, &sge, c.mr.iova(), c.mr.rkey()).signaled()]);
    }
    assert!(a.cq.is_errored());
    assert!(!a.cq.stats().overrun, "not polled yet");
    let mut wc = [Wc::default(); 4];
    assert!(matches!(a.cq.poll(&mut wc), Err(Error::CqOverrun)));
    let s = a.cq.stats();
    assert!(s.overrun, "{s:?}");
    assert!(!b.cq.stats().overrun);
}

#[test]
fn a_device_without_statistics_counts_nothing() {
    let dev = DeviceConfig::from_env().stats(false).open().unwrap();
    let (a, b) = pair_on(&dev);
    let sge = [a.mr.sge(0, 48).unwrap()];
    common::post_recv(&b, 1, 0, 64);
    a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    assert_eq!(poll_exactly_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_exactly_one(&b.cq).status(), WcStatus::Success);
    common::assert_empty(&a.cq);
    for qp in [&a.qp, &b.qp] {
        let s = qp.stats();
        assert_eq!(s.qpn, qp.qp_num());
        let counts = [s.send_wrs, s.recv_wrs, s.send_completions, s.send_bytes, s.recv_completions, s.recv_bytes, s.error_completions];
        assert_eq!(counts, [0; 7], "{s:?}");
        assert_eq!(s.send_latency, Latency::default());
    }
    assert_eq!((a.cq.stats(), b.cq.stats()), (CqStats::default(), CqStats::default()));
    // Its endpoint has no statistics segment to list.
    let ep = a.qp.qp_num() >> 16;
    assert!(dev.host_stats().iter().all(|e| e.ep != ep));
}
