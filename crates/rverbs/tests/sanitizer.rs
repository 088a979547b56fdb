//! The verbs sanitizer from Rust (docs/sanitizer.md): each finding as a value, with its
//! kind, objects and sites, switched on with `sanitize::set_mode`; a correct program has
//! no finding, and with the sanitizer off nothing is recorded.
//!
//! The switch and the findings are per process: the tests of this file take `SERIAL`
//! so that, run as threads of one process (`cargo test`), each sees only its own.
mod common;
use common::*;
use rverbs::sanitize::{self, FindingKind, Mode, Object, Queue};
use rverbs::*;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the process for one test: the mode set, the findings of earlier tests gone.
fn with_mode(mode: Mode) -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    sanitize::set_mode(mode);
    let _ = sanitize::take_findings();
    g
}

/// Whether a site of the finding has a frame of this file (the application's).
#[track_caller]
fn site_in_this_file(f: &sanitize::Finding, label: &str) -> bool {
    let site = f.site(label).unwrap_or_else(|| panic!("no site {label:?} in {f:#?}"));
    site.frames.iter().any(|fr| fr.file.as_deref().is_some_and(|p| p.ends_with("tests/sanitizer.rs")))
}

#[test]
fn dereg_of_a_region_an_unpolled_send_uses_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send_unpinned(&[SendWr::write(0x5a, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    let lkey = a.mr.lkey();
    a.mr.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(f.kind, FindingKind::DeregMrInUse);
    assert_eq!(f.kind.name(), "dereg-mr-in-use");
    assert_eq!(f.page, "ibv_dereg_mr(3)");
    assert_eq!((f.lkey(), f.wr_id(), f.qpn()), (Some(lkey), Some(0x5a), Some(a.qp.qp_num())));
    assert!(f.objects.contains(&Object::WorkRequest { wr_id: 0x5a, queue: Queue::Send, num: a.qp.qp_num(), sge: Some((sge[0].addr, 64)) }));
    assert!(site_in_this_file(f, "posted at"));
    assert!(site_in_this_file(f, "deregistered at"));
    // The verb behaved as without the sanitizer; the WRITE's completion is still there.
    assert!(!a.mr.is_valid());
    assert_eq!(poll_one(&a.cq).wr_id(), 0x5a);
}

#[test]
fn dereg_after_the_completion_was_polled_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send_unpinned(&[SendWr::write(1, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    a.mr.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn an_unsignaled_send_is_outstanding_until_a_later_completion_of_its_queue_is_polled() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let second = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let unsignaled = [a.mr.sge(0, 8).unwrap()];
    let signaled = [second.sge(0, 8).unwrap()];
    a.qp.post_send_unpinned(&[SendWr::write(1, &unsignaled, b.mr.iova(), b.mr.rkey())]).unwrap();
    a.qp.post_send_unpinned(&[SendWr::write(2, &signaled, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    // Executed already, but nothing was polled: the unsignaled one is outstanding.
    let other = a.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    other.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![], "a region no request names is no finding");
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
    // The completion of request 2 implies the one of request 1 (ibv_post_send(3)).
    a.mr.dereg().unwrap();
    second.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn dereg_of_a_region_a_posted_receive_uses_is_a_finding_until_it_completes() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let recv_mr = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let rsge = [recv_mr.sge(0, 64).unwrap()];
    b.qp.post_recv_unpinned(&[RecvWr::new(9, &rsge)]).unwrap();
    let lkey = recv_mr.lkey();
    recv_mr.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].lkey(), found[0].wr_id()), (FindingKind::DeregMrInUse, Some(lkey), Some(9)));
    assert!(found[0].objects.iter().any(|o| matches!(o, Object::WorkRequest { queue: Queue::Recv, .. })));
    drop(a);
}

#[test]
fn post_send_in_init_is_a_finding_with_the_state_history() {
    let _g = with_mode(Mode::Report);
    let a = side(QpType::Rc);
    to_init(&a.qp, ALL_ACCESS);
    let s = SendWr::write(3, &[], 0, 0);
    // The verb's answer is unchanged: EINVAL (rxe).
    assert_eq!(a.qp.post_send(&[s]).unwrap_err().error.errno(), libc::EINVAL);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(f.kind, FindingKind::PostInBadState);
    assert!(f.objects.contains(&Object::Qp { qpn: a.qp.qp_num(), state: Some(QpState::Init) }));
    assert_eq!(f.wr_id(), Some(3));
    assert!(site_in_this_file(f, "ibv_post_send called at"));
    assert!(f.site("state change 1: created in Reset").is_some(), "{:#?}", f.sites);
    assert!(f.site("state change 2: Reset -> Init (ibv_modify_qp)").is_some(), "{:#?}", f.sites);
}

#[test]
fn post_recv_in_reset_is_a_finding_and_in_init_is_none() {
    let _g = with_mode(Mode::Report);
    let a = side(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    assert_eq!(a.qp.post_recv(&[RecvWr::new(4, &sge)]).unwrap_err().error.errno(), libc::EINVAL);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].qpn()), (FindingKind::PostInBadState, Some(a.qp.qp_num())));
    to_init(&a.qp, ALL_ACCESS);
    a.qp.post_recv(&[RecvWr::new(5, &sge)]).unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn destroy_cq_with_an_unacknowledged_event_reports_before_it_waits() {
    let _g = with_mode(Mode::Report);
    let (a, peer) = (side(QpType::Rc), side(QpType::Rc));
    let ch = a.ctx.create_comp_channel().unwrap();
    // 128 entries: the QP's 64 + 64 work requests fit (cq-too-small otherwise).
    let cq = a.ctx.create_cq(&CqInit::new(128).channel(&ch)).unwrap();
    let me = Side { qp: a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap(), cq: cq.clone(), ..a };
    connect(&me, &peer, &PATH);
    let qp = me.qp.clone();
    cq.req_notify(false).unwrap();
    let sge = [me.mr.sge(0, 8).unwrap()];
    qp.post_send(&[SendWr::write(1, &sge, peer.mr.iova(), peer.mr.rkey()).signaled()]).unwrap();
    let event = ch.get_cq_event().unwrap();
    assert_eq!(poll_one(&cq).wr_id(), 1);
    qp.destroy().unwrap();
    drop((qp, me));
    // The destroy waits for the acknowledgement: on a thread, until the event is dropped.
    let destroying = std::thread::spawn({
        let cq = cq.clone();
        move || cq.destroy()
    });
    let mut found = Vec::new();
    for _ in 0..10_000 {
        found.extend(sanitize::take_findings());
        if !found.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(!destroying.is_finished(), "ibv_destroy_cq waits for the acknowledgement");
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.page), (FindingKind::UnackedCqEvents, "ibv_get_cq_event(3)"));
    assert!(f.objects.contains(&Object::Events { unacked: 1 }));
    assert!(site_in_this_file(f, "last unacknowledged event obtained at"));
    assert!(site_in_this_file(f, "cq created at"));
    drop(event);
    destroying.join().unwrap().unwrap();
}

#[test]
fn leaks_lists_the_live_objects_with_their_creation_sites() {
    let _g = with_mode(Mode::Report);
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let leaks = sanitize::leaks().expect("objects are alive");
    assert_eq!(leaks.kind, FindingKind::LeakAtExit);
    assert!(leaks.objects.contains(&Object::Pd { handle: pd.handle() }), "{:#?}", leaks.objects);
    assert!(leaks.objects.iter().any(|o| matches!(o, Object::Mr { lkey, len: 4096, .. } if *lkey == mr.lkey())));
    assert!(site_in_this_file(&leaks, &format!("pd handle {} created at", pd.handle())));
    mr.dereg().unwrap();
    pd.dealloc().unwrap();
    let (handle, lkey) = (pd.handle(), mr.lkey());
    drop((mr, pd, ctx));
    let after = sanitize::leaks();
    let still = |o: &Object| matches!(o, Object::Pd { handle: h } if *h == handle) || matches!(o, Object::Mr { lkey: k, .. } if *k == lkey);
    assert!(after.is_none_or(|f| !f.objects.iter().any(still)), "destroyed objects are not leaks");
    // leaks() only looks; nothing was reported.
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn with_the_sanitizer_off_nothing_is_recorded() {
    let _g = with_mode(Mode::Off);
    assert_eq!(sanitize::mode(), Mode::Off);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send_unpinned(&[SendWr::write(1, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    a.mr.dereg().unwrap();
    let c = side(QpType::Rc);
    assert!(c.qp.post_send(&[SendWr::write(2, &[], 0, 0)]).is_err());
    assert_eq!(sanitize::take_findings(), vec![]);
    assert!(sanitize::leaks().is_none_or(|f| !f.objects.contains(&Object::Pd { handle: c.pd.handle() })), "objects made while off are not tracked");
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
}

#[test]
fn a_receive_of_an_srq_is_outstanding_until_the_completion_naming_its_qp_is_polled() {
    let _g = with_mode(Mode::Report);
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    let srq = b.pd.create_srq(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }).unwrap();
    let on_srq = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &b.cq, CAP) }).unwrap();
    let b = Side { qp: on_srq, ..b };
    connect(&a, &b, &PATH);
    let (first, second) = (b.pd.alloc_mr(4096, ALL_ACCESS).unwrap(), b.pd.alloc_mr(4096, ALL_ACCESS).unwrap());
    srq.post_recv_unpinned(&[RecvWr::new(1, &[first.sge(0, 64).unwrap()]), RecvWr::new(2, &[second.sge(0, 64).unwrap()])]).unwrap();
    a.qp.post_send(&[SendWr::send(7, &[a.mr.sge(0, 8).unwrap()]).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 7);
    let recv = poll_one(&b.cq);
    assert_eq!((recv.wr_id(), recv.qp_num()), (1, b.qp.qp_num()));
    // The first receive completed (its completion names the QP, not the SRQ); the
    // second is still posted.
    first.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
    let lkey = second.lkey();
    second.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].lkey(), found[0].wr_id()), (Some(lkey), Some(2)));
    assert!(found[0].objects.iter().any(|o| matches!(o, Object::WorkRequest { queue: Queue::SharedRecv, num, .. } if *num == srq.srq_num())));
}

/// A region only the application and the local device may write: its bytes are watched
/// while a SEND or RDMA WRITE reads them (docs/sanitizer.md, "send-buffer-changed").
fn local_only(pd: &Pd) -> Mr {
    pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap()
}

#[test]
fn a_send_buffer_changed_before_the_completion_was_polled_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let src = local_only(&a.pd);
    src.write(0, &[7; 64]).unwrap();
    let sge = [src.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::write(0x77, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    src.write(10, b"reused").unwrap();
    assert_eq!(sanitize::take_findings(), vec![], "found when the completion is polled");
    assert_eq!(poll_one(&a.cq).wr_id(), 0x77);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::SendBufferChanged, "send-buffer-changed", "ibv_post_send(3)"));
    assert_eq!((f.wr_id(), f.qpn(), f.lkey()), (Some(0x77), Some(a.qp.qp_num()), Some(src.lkey())));
    assert!(f.objects.contains(&Object::WorkRequest { wr_id: 0x77, queue: Queue::Send, num: a.qp.qp_num(), sge: Some((sge[0].addr, 64)) }));
    assert!(site_in_this_file(f, "posted at"));
    assert!(site_in_this_file(f, "completion polled at"));
    assert!(site_in_this_file(f, "mr registered at"));
}

#[test]
fn a_send_buffer_changed_after_the_poll_or_rewritten_unchanged_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let src = local_only(&a.pd);
    let sge = [src.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    // The same bytes written again: the buffer did not change.
    src.write(0, &[0; 64]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    src.write(0, b"after the poll").unwrap();
    b.qp.post_recv(&[RecvWr::new(3, &[b.mr.sge(0, 64).unwrap()])]).unwrap();
    a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    // Bytes outside the SGE are not the request's.
    src.write(64, b"beside").unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn an_unsignaled_send_whose_buffer_changed_is_found_when_a_later_completion_releases_it() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let (first, second) = (local_only(&a.pd), local_only(&a.pd));
    let (s1, s2) = ([first.sge(0, 32).unwrap()], [second.sge(0, 32).unwrap()]);
    a.qp.post_send(&[SendWr::write(1, &s1, b.mr.iova(), b.mr.rkey()), SendWr::write(2, &s2, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    first.write(0, b"x").unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].wr_id(), found[0].lkey()), (FindingKind::SendBufferChanged, Some(1), Some(first.lkey())));
}

#[test]
fn a_buffer_the_device_may_write_meanwhile_is_not_watched() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    // A region a peer may write (REMOTE_WRITE): its changes are no finding.
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    a.mr.write(0, b"changed").unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    // One buffer for the receive and the send (ibv_rc_pingpong's): the peer's message
    // lands in it before the send's completion is polled.
    let buf = local_only(&a.pd);
    let both = [buf.sge(0, 64).unwrap()];
    a.qp.post_recv(&[RecvWr::new(10, &both)]).unwrap();
    a.qp.post_send(&[SendWr::send(11, &both).signaled()]).unwrap();
    let rsge = [b.mr.sge(128, 64).unwrap()];
    b.qp.post_recv(&[RecvWr::new(20, &rsge)]).unwrap();
    b.mr.write(0, &[9; 64]).unwrap();
    b.qp.post_send(&[SendWr::send(21, &[b.mr.sge(0, 64).unwrap()]).signaled()]).unwrap();
    let mut ids = vec![poll_one(&a.cq).wr_id(), poll_one(&a.cq).wr_id()];
    ids.sort_unstable();
    assert_eq!(ids, vec![10, 11]);
    let mut got = [0u8; 64];
    buf.read(0, &mut got).unwrap();
    assert_eq!(got, [9; 64], "the receive changed the send's buffer");
    assert_eq!(sanitize::take_findings(), vec![]);
    drop(b);
}

/// A QP of `CAP` (64 sends, 64 receives) on `cq` whose sends are all signaled.
fn signaling_qp(a: &Side, cq: &Cq) -> Qp {
    a.pd.create_qp(&QpInit { sq_sig_all: true, ..QpInit::new(QpType::Rc, cq, CAP) }).unwrap()
}

/// The first post to `qp` (of side `a`'s PD): to INIT, then one receive into `a`'s region.
fn first_post(a: &Side, qp: &Qp) {
    to_init(qp, ALL_ACCESS);
    let sge = [a.mr.sge(0, 8).unwrap()];
    qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
}

#[test]
fn a_cq_smaller_than_the_work_of_its_qps_is_a_finding_at_the_first_post_once() {
    let _g = with_mode(Mode::Report);
    let a = side_with(QpType::Rc, 256, CAP);
    let cq = a.ctx.create_cq(&CqInit::new(16)).unwrap();
    assert_eq!(cq.cqe(), 16);
    let qp = signaling_qp(&a, &cq);
    assert_eq!(sanitize::take_findings(), vec![], "a QP never posted to (a probe of the device) overruns nothing");
    first_post(&a, &qp);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::CqTooSmall, "cq-too-small", "ibv_create_cq(3)"));
    assert!(f.objects.iter().any(|o| matches!(o, Object::CqCapacity { cqe: 16, demand: 128, .. })), "{:#?}", f.objects);
    assert!(f.objects.contains(&Object::QueueDepth { queue: Queue::Send, num: qp.qp_num(), depth: 64 }));
    assert!(f.objects.contains(&Object::QueueDepth { queue: Queue::Recv, num: qp.qp_num(), depth: 64 }));
    assert_eq!(f.qpn(), Some(qp.qp_num()));
    assert!(site_in_this_file(f, "ibv_post_recv called at"));
    assert!(f.sites.iter().any(|s| s.label.starts_with("cq ") && s.label.ends_with("created at")), "{:#?}", f.sites);
    assert!(site_in_this_file(f, &format!("qp QPN {:#x} created at", qp.qp_num())));
    // Once per CQ.
    let more = signaling_qp(&a, &cq);
    first_post(&a, &more);
    assert_eq!(sanitize::take_findings(), vec![]);
    more.destroy().unwrap();
    qp.destroy().unwrap();
}

#[test]
fn the_sends_of_a_qp_count_only_when_all_are_signaled() {
    let _g = with_mode(Mode::Report);
    let a = side_with(QpType::Rc, 256, CAP);
    // 64 receives in 64: the 64 sends may be signaled one in n (sq_sig_all off).
    let cq = a.ctx.create_cq(&CqInit::new(64)).unwrap();
    let some = a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    first_post(&a, &some);
    assert_eq!(sanitize::take_findings(), vec![]);
    some.destroy().unwrap();
    // The same CQ for a QP that signals every send: 128 in 64.
    let all = signaling_qp(&a, &cq);
    first_post(&a, &all);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].objects.iter().any(|o| matches!(o, Object::CqCapacity { cqe: 64, demand: 128, .. })), "{:#?}", found[0].objects);
    all.destroy().unwrap();
}

#[test]
fn a_cq_that_holds_the_work_ignores_overruns_or_whose_qps_use_an_srq_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let a = side_with(QpType::Rc, 128, CAP);
    // Exactly full: 64 + 64 in 128.
    let full = a.ctx.create_cq(&CqInit::new(128)).unwrap();
    let q0 = signaling_qp(&a, &full);
    let ignoring = a.ctx.create_cq(&CqInit { flags: CqCreateFlags::IGNORE_OVERRUN, ..CqInit::new(16) }).unwrap();
    let q1 = signaling_qp(&a, &ignoring);
    // The receives of a QP with an SRQ complete through the SRQ's count, not the QP's.
    let srq = a.pd.create_srq(&SrqInit { max_wr: 64, max_sge: 1, ..SrqInit::default() }).unwrap();
    let cq = a.ctx.create_cq(&CqInit::new(64)).unwrap();
    let q2 = a.pd.create_qp(&QpInit { srq: Some(&srq), sq_sig_all: true, ..QpInit::new(QpType::Rc, &cq, CAP) }).unwrap();
    first_post(&a, &q0);
    first_post(&a, &q1);
    // q2 receives through the SRQ: its first post is a WRITE to itself (connected to itself).
    q2.connect(&remote(&a.ctx, q2.qp_num(), &PATH, ALL_ACCESS)).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    q2.post_send(&[SendWr::write(2, &sge, a.mr.iova() + 64, a.mr.rkey())]).unwrap();
    assert_eq!(poll_one(&cq).status(), WcStatus::Success);
    assert_eq!(sanitize::take_findings(), vec![]);
    for q in [q2, q1, q0] {
        q.destroy().unwrap();
    }
}

#[test]
fn resizing_a_cq_below_the_work_of_its_qps_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let a = side_with(QpType::Rc, 256, CAP);
    assert_eq!(a.cq.resize(512).unwrap(), 512);
    assert_eq!(a.cq.resize(64).unwrap(), 64);
    assert_eq!(sanitize::take_findings(), vec![], "larger, then just large enough for 64 receives");
    assert_eq!(a.cq.resize(32).unwrap(), 32);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].kind, FindingKind::CqTooSmall);
    assert!(found[0].objects.iter().any(|o| matches!(o, Object::CqCapacity { cqe: 32, demand: 64, .. })), "{:#?}", found[0].objects);
    assert!(site_in_this_file(&found[0], "ibv_resize_cq called at"));
}

#[test]
fn a_destroyed_qp_gives_its_depth_back() {
    let _g = with_mode(Mode::Report);
    let a = side_with(QpType::Rc, 256, CAP);
    let cq = a.ctx.create_cq(&CqInit::new(128)).unwrap();
    let first = signaling_qp(&a, &cq);
    first_post(&a, &first);
    first.destroy().unwrap();
    let second = signaling_qp(&a, &cq);
    first_post(&a, &second);
    assert_eq!(sanitize::take_findings(), vec![], "128 in 128: the first QP's are gone");
    second.destroy().unwrap();
}

/// A side whose QP completes to a CQ made with `init` (64 entries: the QP's 64 + 64 work
/// requests would not fit, cq-too-small at its first post, so the QP has 16 + 16),
/// connected to a peer.
fn cq_side(init: impl FnOnce(CqInit<'static>) -> CqInit<'static>) -> (Side, Side) {
    let (a, peer) = (side(QpType::Rc), side(QpType::Rc));
    let cq = a.ctx.create_cq(&init(CqInit::new(64))).unwrap();
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, ..CAP };
    let me = Side { qp: a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap(), cq, ..a };
    connect(&me, &peer, &PATH);
    (me, peer)
}

/// Posts `n` signaled RDMA WRITEs from `a` to `peer` and waits (bounded) until their
/// completions are in `a`'s CQ.
#[track_caller]
fn complete_writes(a: &Side, peer: &Side, n: usize) {
    let before = a.cq.len();
    let sge = [a.mr.sge(0, 8).unwrap()];
    for i in 0..n {
        a.qp.post_send(&[SendWr::write(i as u64, &sge, peer.mr.iova(), peer.mr.rkey()).signaled()]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while a.cq.len() < before + n {
        assert!(std::time::Instant::now() < deadline, "no completions within 10 s");
        std::thread::yield_now();
    }
}

#[test]
fn a_second_start_poll_without_end_poll_is_a_finding() {
    let _g = with_mode(Mode::Report);
    // SINGLE_THREADED: no lock, so the second start_poll returns (on a locked CQ it waits
    // for ever, as rdma-core's providers do, after the report).
    let (a, peer) = cq_side(|i| i.flags(CqCreateFlags::SINGLE_THREADED));
    complete_writes(&a, &peer, 2);
    assert!(a.cq.start_poll().unwrap().is_some());
    assert_eq!(sanitize::take_findings(), vec![], "an open batch alone is no finding");
    assert!(a.cq.start_poll().unwrap().is_some());
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::CqPollUnfinished, "cq-poll-unfinished", "ibv_create_cq_ex(3)"));
    assert!(matches!(f.objects[..], [Object::Cq { .. }]), "{:#?}", f.objects);
    assert!(site_in_this_file(f, "ibv_start_poll called at"));
    assert!(site_in_this_file(f, "unfinished poll started at"));
    a.cq.end_poll();
    // Ended: a batch after it, and the destroy, are no finding.
    complete_writes(&a, &peer, 1);
    assert!(a.cq.start_poll().unwrap().is_some());
    a.cq.end_poll();
    assert!(a.cq.start_poll().unwrap().is_none(), "ENOENT opens no batch");
    a.qp.destroy().unwrap();
    a.cq.destroy().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn destroy_cq_with_a_batch_open_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (a, peer) = cq_side(|i| i);
    complete_writes(&a, &peer, 1);
    assert!(a.cq.start_poll().unwrap().is_some());
    a.qp.destroy().unwrap();
    a.cq.destroy().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].kind, FindingKind::CqPollUnfinished);
    assert!(site_in_this_file(&found[0], "ibv_destroy_cq called at"));
    assert!(site_in_this_file(&found[0], "unfinished poll started at"));
}

/// Thread 1 opens a batch of `a`'s CQ; thread 2 polls it between two barriers, so that
/// the batch is open during its poll (`overlap`) or ended before it (not `overlap`).
fn poll_from_two_threads(a: &Side, overlap: bool) {
    let (entered, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        s.spawn(|| {
            entered.wait();
            let mut wc = [Wc::default(); 1];
            assert_eq!(a.cq.poll(&mut wc).unwrap(), 1);
            done.wait();
        });
        assert!(a.cq.start_poll().unwrap().is_some());
        if !overlap {
            a.cq.end_poll();
        }
        entered.wait();
        done.wait();
        if overlap {
            a.cq.end_poll();
        }
    });
}

#[test]
fn a_single_threaded_cq_polled_by_two_threads_at_once_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (a, peer) = cq_side(|i| i.flags(CqCreateFlags::SINGLE_THREADED));
    complete_writes(&a, &peer, 2);
    poll_from_two_threads(&a, true);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::SingleThreadedCqShared, "single-threaded-cq-shared", "ibv_create_cq_ex(3)"));
    assert!(site_in_this_file(f, "ibv_poll_cq called at"));
    assert!(site_in_this_file(f, "the other thread's poll started at"));
    // Once per CQ.
    complete_writes(&a, &peer, 2);
    poll_from_two_threads(&a, true);
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn a_single_threaded_cq_polled_by_two_threads_in_turn_or_a_locked_cq_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let (a, peer) = cq_side(|i| i.flags(CqCreateFlags::SINGLE_THREADED));
    complete_writes(&a, &peer, 2);
    poll_from_two_threads(&a, false);
    // A CQ with its lock: the second thread's poll waits for the batch (no barrier
    // across it), which is the provider's job, not a mistake.
    let (b, peer_b) = cq_side(|i| i);
    complete_writes(&b, &peer_b, 2);
    std::thread::scope(|s| {
        assert!(b.cq.start_poll().unwrap().is_some());
        let t = s.spawn(|| poll_one(&b.cq));
        b.cq.end_poll();
        t.join().unwrap();
    });
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn waiting_for_an_event_after_arming_a_cq_that_held_completions_unpolled_is_a_lost_wakeup() {
    let _g = with_mode(Mode::Report);
    let (a0, peer) = (side(QpType::Rc), side(QpType::Rc));
    let ch = a0.ctx.create_comp_channel().unwrap();
    let cq = a0.ctx.create_cq(&CqInit::new(64).channel(&ch)).unwrap();
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, ..CAP };
    let a = Side { qp: a0.pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap(), cq: cq.clone(), ..a0 };
    connect(&a, &peer, &PATH);
    complete_writes(&a, &peer, 1);
    cq.req_notify(false).unwrap();
    // A completion after the arming fires the event, so the wait below returns; the one
    // held at the arming raised none.
    complete_writes(&a, &peer, 1);
    let event = ch.get_cq_event().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::LostWakeup, "lost-wakeup", "ibv_get_cq_event(3)"));
    assert!(f.headline.contains("holding 1 completion(s)"), "{}", f.headline);
    assert!(matches!(f.objects[..], [Object::CompChannel { .. }, Object::Cq { .. }]), "{:#?}", f.objects);
    assert!(site_in_this_file(f, "ibv_get_cq_event called at"));
    assert!(f.sites.iter().any(|s| s.label.ends_with("armed at") && s.frames.iter().any(|fr| fr.file.as_deref().is_some_and(|p| p.ends_with("tests/sanitizer.rs")))), "{:#?}", f.sites);
    event.ack();
    // The man page's pattern: arm, poll again, then wait. No finding.
    poll_one(&cq);
    poll_one(&cq);
    complete_writes(&a, &peer, 1);
    cq.req_notify(false).unwrap();
    poll_one(&cq);
    complete_writes(&a, &peer, 1);
    ch.get_cq_event().unwrap().ack();
    poll_one(&cq);
    assert_eq!(sanitize::take_findings(), vec![]);
    a.qp.destroy().unwrap();
    cq.destroy().unwrap();
}

/// A connected RC pair whose send queues hold `depth` requests.
fn pair_of_depth(depth: u32) -> (Side, Side) {
    pair_with(QpType::Rc, &PATH, 256, QpCap { max_send_wr: depth, ..CAP })
}

#[test]
fn a_send_queue_filled_by_unsignaled_requests_is_a_finding_once_per_run() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair_of_depth(4);
    let sge = [a.mr.sge(0, 8).unwrap()];
    for i in 0..4 {
        a.qp.post_send(&[SendWr::write(0x10 + i, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    }
    assert_eq!(sanitize::take_findings(), vec![], "four unsignaled in four slots: no post found the queue full yet");
    // The fifth post needs a slot that no completion will free (rverbs executed the
    // four already and takes it; a NIC refuses it).
    let _ = a.qp.post_send(&[SendWr::write(0x14, &sge, b.mr.iova(), b.mr.rkey()).signaled()]);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::UnsignaledFill, "unsignaled-fill", "ibv_post_send(3)"));
    assert_eq!(f.qpn(), Some(a.qp.qp_num()));
    assert!(f.objects.contains(&Object::QueueDepth { queue: Queue::Send, num: a.qp.qp_num(), depth: 4 }), "{:#?}", f.objects);
    assert_eq!(f.wr_id(), Some(0x10), "the first request of the run");
    assert!(site_in_this_file(f, "ibv_post_send called at"));
    assert!(site_in_this_file(f, "first unsignaled work request of the run posted at"));
    // Once per run: the same requests outstanding, another post refused or not, no second report.
    let _ = a.qp.post_send(&[SendWr::write(0x15, &sge, b.mr.iova(), b.mr.rkey())]);
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn a_send_queue_full_with_a_signaled_request_outstanding_or_sq_sig_all_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair_of_depth(4);
    let sge = [a.mr.sge(0, 8).unwrap()];
    // One signaled in four, as perftest's cq_mod: its completion frees the others.
    for i in 0..4u64 {
        let wr = SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey());
        a.qp.post_send(&[if i == 1 { wr.signaled() } else { wr }]).unwrap();
    }
    assert_eq!(sanitize::take_findings(), vec![]);
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    // Requests 0 and 1 are released, 2 and 3 outstanding: two more fill the queue with
    // unsignaled requests only, and the next post finds no slot.
    for i in 4..6u64 {
        a.qp.post_send(&[SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    }
    assert_eq!(sanitize::take_findings(), vec![]);
    let _ = a.qp.post_send(&[SendWr::write(6, &sge, b.mr.iova(), b.mr.rkey())]);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].wr_id()), (FindingKind::UnsignaledFill, Some(2)));
    // A QP that signals every send.
    let all = a.pd.create_qp(&QpInit { sq_sig_all: true, ..QpInit::new(QpType::Rc, &a.cq, QpCap { max_send_wr: 4, ..CAP }) }).unwrap();
    let peer = b.pd.create_qp(&QpInit::new(QpType::Rc, &b.cq, CAP)).unwrap();
    for (qp, ctx, dest) in [(&all, &a.ctx, peer.qp_num()), (&peer, &b.ctx, all.qp_num())] {
        to_init(qp, ALL_ACCESS);
        to_rtr(qp, ctx, dest, &PATH);
        to_rts(qp, &PATH);
    }
    for i in 0..4u64 {
        all.post_send(&[SendWr::write(0x20 + i, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    }
    let fifth = all.post_send(&[SendWr::write(0x24, &sge, b.mr.iova(), b.mr.rkey())]);
    assert_eq!(sanitize::take_findings(), vec![]);
    for _ in 0..4 + usize::from(fifth.is_ok()) {
        poll_one(&a.cq);
    }
    all.destroy().unwrap();
    peer.destroy().unwrap();
}

/// The remote-access-explained finding of the one error completion of `a`'s WRITE `wr_id`.
#[track_caller]
fn explained(a: &Side, wr_id: u64) -> sanitize::Finding {
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (wr_id, WcStatus::RemAccessErr));
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = found.into_iter().next().unwrap();
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::RemoteAccessExplained, "remote-access-explained", "ibv_post_send(3)"));
    assert_eq!((f.wr_id(), f.qpn()), (Some(wr_id), Some(a.qp.qp_num())));
    assert!(site_in_this_file(&f, "posted at"));
    assert!(site_in_this_file(&f, "error completion polled at"));
    f
}

#[test]
fn a_write_beyond_the_region_is_explained_with_the_regions_range_and_registration() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 64).unwrap()];
    let (start, len) = (b.mr.iova(), MR_LEN as u64);
    let raddr = start + len - 32;
    a.qp.post_send(&[SendWr::write(0x61, &sge, raddr, b.mr.rkey()).signaled()]).unwrap();
    let f = explained(&a, 0x61);
    assert!(f.objects.contains(&Object::RemoteRange { rkey: b.mr.rkey(), addr: raddr, len: 64 }), "{:#?}", f.objects);
    let want = format!("the range [{raddr:#x}-{:#x}) leaves the region, which covers [{start:#x}-{:#x})", raddr + 64, start + len);
    assert!(f.headline.contains(&want), "{}", f.headline);
    assert!(site_in_this_file(&f, "target region registered at"));
}

#[test]
fn a_missing_access_flag_and_an_unknown_rkey_are_explained() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let read_only = b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    a.qp.post_send(&[SendWr::write(0x62, &sge, read_only.iova(), read_only.rkey()).signaled()]).unwrap();
    let f = explained(&a, 0x62);
    assert!(f.headline.contains("the region does not grant IBV_ACCESS_REMOTE_WRITE (its access flags: "), "{}", f.headline);
    assert!(f.headline.contains("REMOTE_READ"), "{}", f.headline);
    // The QP is in error now: a fresh pair for the unknown key.
    let (c, d) = pair(QpType::Rc);
    let sge = [c.mr.sge(0, 8).unwrap()];
    let gone = d.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let (rkey, iova) = (gone.rkey(), gone.iova());
    gone.dereg().unwrap();
    c.qp.post_send(&[SendWr::write(0x63, &sge, iova, rkey).signaled()]).unwrap();
    let f = explained(&c, 0x63);
    assert!(f.headline.contains(&format!("no region or window of the target has rkey {rkey:#x}")), "{}", f.headline);
    assert!(f.site("target region registered at").is_none(), "a deregistered region has no registration left");
}

#[test]
fn a_successful_remote_access_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::write(0x64, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn rereg_of_the_pd_or_translation_of_a_region_an_unpolled_send_uses_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let other = a.ctx.alloc_pd().unwrap();
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send_unpinned(&[SendWr::write(0x5d, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    // Access flags only: the region's memory and PD stay, no finding.
    a.mr.rereg(ReregFlags::ACCESS, None, Some(ALL_ACCESS)).unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
    let lkey = a.mr.lkey();
    a.mr.rereg(ReregFlags::PD, Some(&other), None).unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::ReregMrInUse, "rereg-mr-in-use", "ibv_rereg_mr(3)"));
    assert_eq!((f.lkey(), f.wr_id(), f.qpn()), (Some(lkey), Some(0x5d), Some(a.qp.qp_num())));
    assert!(f.headline.starts_with("ibv_rereg_mr (changing translation or PD) of mr lkey"), "{}", f.headline);
    assert!(site_in_this_file(f, "posted at"));
    assert!(site_in_this_file(f, "re-registered at"));
    // The verb behaved as without the sanitizer: the region is in the other PD now.
    assert!(a.mr.is_valid());
    assert_eq!(poll_one(&a.cq).wr_id(), 0x5d);
    // Once the completion was polled, moving it back is no finding.
    a.mr.rereg(ReregFlags::PD, Some(&a.pd), None).unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn dealloc_of_a_window_an_unpolled_bind_binds_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (_a, b) = pair(QpType::Rc);
    let mb = b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    let info = MwBind { mr: Some(&mb), addr: mb.iova(), length: 4096, access: Access::REMOTE_WRITE | Access::LOCAL_WRITE };
    let mw = Mw::new(&b.pd, 1).unwrap();
    let rkey = b.qp.bind_mw(&mw, &info, 0x71, SendFlags::SIGNALED).unwrap();
    mw.dealloc().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::DeallocMwInUse, "dealloc-mw-in-use", "ibv_dealloc_mw(3)"));
    assert_eq!((f.wr_id(), f.qpn()), (Some(0x71), Some(b.qp.qp_num())));
    assert!(f.objects.contains(&Object::Mw { rkey }), "{:#?}", f.objects);
    assert!(site_in_this_file(f, "bind posted at"));
    assert!(site_in_this_file(f, "deallocated at"));
    assert_eq!(poll_one(&b.cq).wr_id(), 0x71);
    // A bind whose completion was polled first: no finding; nor is an unbound window.
    let mw = Mw::new(&b.pd, 1).unwrap();
    b.qp.bind_mw(&mw, &info, 0x72, SendFlags::SIGNALED).unwrap();
    assert_eq!(poll_one(&b.cq).wr_id(), 0x72);
    mw.dealloc().unwrap();
    Mw::new(&b.pd, 1).unwrap().dealloc().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
    mb.dereg().unwrap();
}

#[test]
fn destroy_qp_with_a_send_the_device_has_not_finished_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    // A WRITE that completed, its completion not polled, then a SEND the peer cannot take
    // (no receive posted: RNR NAKs, retried for ever with rnr_retry 7), which stays on
    // the send queue.
    a.qp.post_send(&[SendWr::write(0x81, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    a.qp.post_send(&[SendWr::send(0x82, &sge)]).unwrap();
    assert_eq!(a.qp.send_queue_len(), 1, "the SEND waits for a receive");
    a.qp.destroy().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::DestroyQpInUse, "destroy-qp-in-use", "ibv_destroy_qp(3)"));
    assert_eq!((f.qpn(), f.wr_id()), (Some(a.qp.qp_num()), Some(0x82)), "the unfinished request is named, not the finished one");
    assert!(f.headline.contains("while the device has not finished 1 send work request(s) (the first: wr_id 0x82, unsignaled)"), "{}", f.headline);
    assert!(f.objects.contains(&Object::Qp { qpn: a.qp.qp_num(), state: Some(QpState::Rts) }), "{:#?}", f.objects);
    assert!(site_in_this_file(f, "ibv_destroy_qp called at"));
    assert!(site_in_this_file(f, "posted at"));
    assert!(site_in_this_file(f, "qp QPN"));
}

#[test]
fn destroy_qp_with_receives_posted_or_sends_finished_or_flushed_is_no_finding() {
    let _g = with_mode(Mode::Report);
    // Receives posted at destroy: what every server does.
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 1, 0, 64);
    post_recv(&b, 2, 64, 64);
    // A send that the device finished, its completion polled or not.
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(3, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    poll_one(&a.cq);
    a.qp.post_send(&[SendWr::write(4, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(a.qp.send_queue_len(), 0);
    a.qp.destroy().unwrap();
    b.qp.destroy().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
    // A SEND waiting for a receive, flushed by a move to ERR (its flush completion not
    // even polled); another discarded by a move to RESET.
    let (c, d) = pair(QpType::Rc);
    let sge = [c.mr.sge(0, 8).unwrap()];
    c.qp.post_send(&[SendWr::send(5, &sge).signaled()]).unwrap();
    assert_eq!(c.qp.send_queue_len(), 1);
    c.qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    c.qp.destroy().unwrap();
    d.qp.post_send(&[SendWr::send(6, &sge).signaled()]).unwrap();
    d.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    d.qp.destroy().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn reading_a_field_the_cq_did_not_request_is_a_finding_once_per_cq_and_field() {
    let _g = with_mode(Mode::Report);
    let ctx = open();
    let cq = ctx.create_cq(&CqInit::new(16).wc_flags(WcExFlags::QP_NUM)).unwrap();
    let read = |field, name, flag| rverbs::capi_support::sanitizer_wc_read(&cq, field, name, flag);
    read(WcExFlags::QP_NUM, "ibv_wc_read_qp_num", "IBV_WC_EX_WITH_QP_NUM");
    assert_eq!(sanitize::take_findings(), vec![], "a requested field");
    read(WcExFlags::BYTE_LEN, "ibv_wc_read_byte_len", "IBV_WC_EX_WITH_BYTE_LEN");
    read(WcExFlags::BYTE_LEN, "ibv_wc_read_byte_len", "IBV_WC_EX_WITH_BYTE_LEN");
    read(WcExFlags::IMM, "ibv_wc_read_imm_data", "IBV_WC_EX_WITH_IMM");
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 2, "once per CQ and field: {found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::WcFieldNotRequested, "wc-field-not-requested", "ibv_create_cq_ex(3)"));
    let id = match f.objects[0] {
        Object::WcField { cq, read, flag, wc_flags } => {
            assert_eq!((read, flag, wc_flags), ("ibv_wc_read_byte_len", "IBV_WC_EX_WITH_BYTE_LEN", WcExFlags::QP_NUM.bits()));
            cq
        }
        ref o => panic!("{o:?}"),
    };
    assert_eq!(f.headline, format!("ibv_wc_read_byte_len of cq {id}, created without IBV_WC_EX_WITH_BYTE_LEN in its wc_flags"));
    assert!(site_in_this_file(f, "ibv_wc_read_byte_len called at"));
    assert!(site_in_this_file(f, &format!("cq {id} created at")));
    assert_eq!(found[1].headline, format!("ibv_wc_read_imm_data of cq {id}, created without IBV_WC_EX_WITH_IMM in its wc_flags"));
    cq.destroy().unwrap();
    // Off: nothing.
    sanitize::set_mode(Mode::Off);
    let cq = ctx.create_cq(&CqInit::new(16).wc_flags(WcExFlags::QP_NUM)).unwrap();
    rverbs::capi_support::sanitizer_wc_read(&cq, WcExFlags::SL, "ibv_wc_read_sl", "IBV_WC_EX_WITH_SL");
    assert_eq!(sanitize::take_findings(), vec![]);
}

/// A connected RC pair whose `a` QP builds work requests (ibv_wr_start(3)).
fn builder_pair() -> (Side, Side) {
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    let qp = a.pd.create_qp(&QpInit { send_ops: Some(SendOps::SEND | SendOps::RDMA_WRITE), ..QpInit::new(QpType::Rc, &a.cq, CAP) }).unwrap();
    let a = Side { qp, ..a };
    connect(&a, &b, &PATH);
    (a, b)
}

#[test]
fn work_requests_of_the_builder_are_tracked_as_posted_ones() {
    let _g = with_mode(Mode::Report);
    let (a, b) = builder_pair();
    let mut w = a.qp.wr_start().unwrap();
    w.send(0x90, SendFlags::SIGNALED).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    w.complete().unwrap();
    a.qp.destroy().unwrap();
    a.mr.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.iter().map(|f| (f.kind, f.wr_id())).collect::<Vec<_>>(), vec![(FindingKind::DestroyQpInUse, Some(0x90))], "{found:#?}");
    assert!(site_in_this_file(&found[0], "posted at"));
    drop(b);
    // The destroy discarded the request: the dereg after it is no finding. On a live QP
    // the builder's request keeps its region in use until its completion is polled.
    let (a, b) = builder_pair();
    let mut w = a.qp.wr_start().unwrap();
    w.rdma_write(0x92, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 64);
    w.complete().unwrap();
    let lkey = a.mr.lkey();
    a.mr.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.iter().map(|f| (f.kind, f.wr_id(), f.lkey())).collect::<Vec<_>>(), vec![(FindingKind::DeregMrInUse, Some(0x92), Some(lkey))], "{found:#?}");
    assert_eq!(poll_one(&a.cq).wr_id(), 0x92);
    let (a, b) = builder_pair();
    let mut w = a.qp.wr_start().unwrap();
    w.rdma_write(0x93, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 64);
    w.complete().unwrap();
    let other = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    other.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
    assert_eq!(poll_one(&a.cq).wr_id(), 0x93);
    a.mr.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![]);
}

#[test]
fn a_builder_batch_that_fails_or_completes_in_init_posts_nothing_to_track() {
    let _g = with_mode(Mode::Report);
    let a = side(QpType::Rc);
    let qp = a.pd.create_qp(&QpInit { send_ops: Some(SendOps::RDMA_WRITE), ..QpInit::new(QpType::Rc, &a.cq, CAP) }).unwrap();
    to_init(&qp, ALL_ACCESS);
    let mut w = qp.wr_start().unwrap();
    w.rdma_write(0x94, SendFlags::SIGNALED, 0, 0).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    assert_eq!(w.complete().unwrap_err().errno(), libc::EINVAL);
    let found = sanitize::take_findings();
    assert_eq!(found.iter().map(|f| (f.kind, f.wr_id())).collect::<Vec<_>>(), vec![(FindingKind::PostInBadState, Some(0x94))], "{found:#?}");
    assert!(found[0].headline.contains("ibv_wr_complete"), "{}", found[0].headline);
    a.mr.dereg().unwrap();
    qp.destroy().unwrap();
    assert_eq!(sanitize::take_findings(), vec![], "the refused batch left nothing outstanding");
}

/// Runs `scenario` until the hole it made (the pages `[hole, hole+len)` it unmapped
/// under a registration) stayed empty through its checks: another thread of the process
/// may map something there meanwhile (docs/rxe-differences.md, "Registered memory unmapped
/// later"), and then the sanitizer rightly sees mapped memory. `scenario` returns the hole
/// and its findings; the findings of the first attempt whose hole stayed empty are
/// returned.
fn with_a_hole(mut scenario: impl FnMut() -> ((*mut u8, usize), Vec<sanitize::Finding>)) -> Vec<sanitize::Finding> {
    for _ in 0..8 {
        let ((hole, len), found) = scenario();
        if !overlaps_a_mapping(hole, len) {
            return found;
        }
    }
    panic!("the hole was mapped again by another thread in 8 attempts out of 8");
}

#[test]
fn a_post_naming_registered_memory_that_was_unmapped_is_a_finding_once() {
    let _g = with_mode(Mode::Report);
    let b = side(QpType::Rc);
    let mut ids = (0, 0);
    let found = with_a_hole(|| {
        let pages = map(2, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the mistake under test: the second page goes while registered; the
        // device touches nothing (the receive is never consumed).
        let mr = unsafe { b.pd.reg_mr(pages, 2 * 4096, ALL_ACCESS) }.unwrap();
        let second = pages.wrapping_add(4096);
        unmap(second, 1);
        to_init(&b.qp, ALL_ACCESS);
        let sge = [mr.sge(0, 2 * 4096).unwrap()];
        b.qp.post_recv(&[RecvWr::new(0x77, &sge)]).unwrap();
        b.qp.post_recv(&[RecvWr::new(0x78, &sge)]).unwrap();
        ids = (mr.lkey(), second as usize);
        let found = sanitize::take_findings();
        b.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
        mr.dereg().unwrap();
        unmap(pages, 1);
        let later = sanitize::take_findings();
        assert_eq!(later, vec![], "reported once per region, not again at the deregistration");
        ((second, 4096), found)
    });
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(f.kind, FindingKind::MrMemoryUnmapped);
    assert_eq!(f.kind.name(), "mr-memory-unmapped");
    assert_eq!(f.page, "ibv_reg_mr(3)");
    assert_eq!((f.lkey(), f.wr_id()), (Some(ids.0), Some(0x77)), "the first post that named it");
    assert!(f.headline.contains(&format!("{:#x}", ids.1)), "names the first unmapped page: {}", f.headline);
    assert!(f.headline.contains("ibv_post_recv of work request wr_id 0x77"), "names the post: {}", f.headline);
    assert!(site_in_this_file(f, "posted at"));
    assert!(site_in_this_file(f, "mr registered at"));
}

#[test]
fn a_registered_region_unmapped_before_its_deregistration_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let b = side(QpType::Rc);
    let mut lkey = 0;
    let found = with_a_hole(|| {
        let page = map(1, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the mistake under test: the page goes while registered; no request
        // names it.
        let mr = unsafe { b.pd.reg_mr(page, 4096, ALL_ACCESS) }.unwrap();
        lkey = mr.lkey();
        unmap(page, 1);
        mr.dereg().unwrap();
        ((page, 4096), sanitize::take_findings())
    });
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].lkey()), (FindingKind::MrMemoryUnmapped, Some(lkey)));
    assert!(site_in_this_file(&found[0], "deregistered at"));
}

#[test]
fn memory_unmapped_after_its_deregistration_is_no_finding() {
    let _g = with_mode(Mode::Report);
    let b = side(QpType::Rc);
    let page = map(1, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: registered, deregistered, then unmapped: the right order.
    let mr = unsafe { b.pd.reg_mr(page, 4096, ALL_ACCESS) }.unwrap();
    to_init(&b.qp, ALL_ACCESS);
    b.qp.post_recv(&[RecvWr::new(1, &[mr.sge(0, 4096).unwrap()])]).unwrap();
    b.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    mr.dereg().unwrap();
    unmap(page, 1);
    assert_eq!(sanitize::take_findings(), vec![]);
}

/// Waits at most 10 s for child `pid`; its exit status, or `None` (then killed) if it
/// did not end.
fn wait_child(pid: libc::pid_t) -> Option<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut status = 0;
    loop {
        // SAFETY: waits for a child this test forked, without blocking.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(1)),
            0 => {
                // SAFETY: the child is ours and still running.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                // SAFETY: reaps it.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                return None;
            }
            _ => return Some(status),
        }
    }
}

#[test]
fn a_fork_while_another_thread_posts_leaves_the_child_a_usable_sanitizer() {
    let _g = with_mode(Mode::Report);
    let (a, b) = pair(QpType::Rc);
    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the posting thread however the forking loop ends (a failed assertion too).
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        // Every post and every poll takes the sanitizer's tracking lock.
        s.spawn(|| {
            let sge = [a.mr.sge(0, 8).unwrap()];
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                a.qp.post_send(&[SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
                assert_eq!(poll_one(&a.cq).wr_id(), i);
                i += 1;
            }
        });
        let _stop = Stop(&stop);
        for round in 0..50 {
            // SAFETY: the child uses only this library (a new process generation) and
            // leaves with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // Tracked verbs take the lock: a child that inherited it held would wait
                // for ever.
                let code = std::panic::catch_unwind(|| {
                    let ctx = devices().unwrap()[0].open().unwrap();
                    ctx.alloc_pd().unwrap();
                })
                .map_or(1, |()| 0);
                // SAFETY: ends the child without the parent's atexit handlers.
                unsafe { libc::_exit(code) };
            }
            assert!(pid > 0, "fork failed");
            let status = wait_child(pid).unwrap_or_else(|| panic!("fork {round}: the child hung in the sanitizer"));
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "fork {round}: child failed: {status:#x}");
        }
    });
}

#[test]
fn a_heap_block_released_under_a_region_of_caller_memory_is_a_finding_once() {
    let _g = with_mode(Mode::Report);
    let b = side(QpType::Rc);
    let block = vec![0u8; 4096];
    let at = block.as_ptr() as usize;
    // SAFETY: the block outlives the region: it is deregistered below before `block` drops.
    let mr = unsafe { b.pd.reg_mr(block.as_ptr() as *mut u8, 4096, ALL_ACCESS) }.unwrap();
    // What the drop-in's free watch calls when free(3) is given a block (the C program
    // tests/sanitizer/mr_freed.c drives it through the real free): beside the region,
    // nothing; over its last byte, the finding; the same region again, nothing.
    rverbs::capi_support::sanitizer_released(at + 4096, 64);
    assert_eq!(sanitize::take_findings(), vec![]);
    rverbs::capi_support::sanitizer_released(at + 4095, 64);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name(), f.page), (FindingKind::MrMemoryFreed, "mr-memory-freed", "ibv_reg_mr(3)"));
    assert_eq!(f.lkey(), Some(mr.lkey()));
    assert!(f.objects.contains(&Object::Mr { lkey: mr.lkey(), addr: at as u64, len: 4096 }));
    assert!(site_in_this_file(f, "freed at"));
    assert!(site_in_this_file(f, "mr registered at"));
    rverbs::capi_support::sanitizer_released(at, 4096);
    assert_eq!(sanitize::take_findings(), vec![], "once per region");
    mr.dereg().unwrap();
    // A new region over the block, deregistered: its release is no finding.
    // SAFETY: as above.
    let again = unsafe { b.pd.reg_mr(block.as_ptr() as *mut u8, 4096, ALL_ACCESS) }.unwrap();
    again.dereg().unwrap();
    rverbs::capi_support::sanitizer_released(at, 4096);
    assert_eq!(sanitize::take_findings(), vec![]);
    drop(block);
}

#[test]
fn library_memory_is_not_blamed_for_a_heap_release() {
    let _g = with_mode(Mode::Report);
    let b = side(QpType::Rc);
    // The side's own region is memory the library allocated (alloc_mr): not heap.
    let (addr, len) = (b.mr.addr() as usize, b.mr.len());
    rverbs::capi_support::sanitizer_released(addr, len);
    assert_eq!(sanitize::take_findings(), vec![]);
}

/// A receiver on a device of its own whose caller memory stays private (peers reach it
/// with cross-memory attach, so SENDs are not in order there), connected to a sender on
/// another device of this process; a one-page receive buffer registered for local
/// writes, and a receive `0x62` posted into it by key (as the C library posts).
fn receiver_not_in_order() -> (Side, Side, Mr, *mut u8) {
    receiver_not_in_order_on(CqInit::new(256))
}

/// As [`receiver_not_in_order`], the receiver's CQ made with `cq`.
fn receiver_not_in_order_on(cq: CqInit) -> (Side, Side, Mr, *mut u8) {
    let recv_dev = DeviceConfig::from_env().shared_mr(Some(false)).open().unwrap();
    let send_dev = DeviceConfig::from_env().open().unwrap();
    let on = |dev: &Device, init: &CqInit| {
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(init).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
        let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
        Side { ctx, pd, cq, qp, mr }
    };
    let (a, b) = (on(&send_dev, &CqInit::new(256)), on(&recv_dev, &cq));
    connect(&a, &b, &PATH);
    let buf = map(1, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: one page this test mapped, read only through `buf` below and unmapped after
    // the region is gone.
    let mr = unsafe { b.pd.reg_mr(buf, 4096, Access::LOCAL_WRITE) }.unwrap();
    assert_eq!(b.qp.data_in_order(WrOpcode::Send, 0), 0, "a private region: SENDs not in order");
    let sge = [mr.sge(0, 4096).unwrap()];
    b.qp.post_recv_unpinned(&[RecvWr::new(0x62, &sge)]).unwrap();
    a.mr.write(0, b"hello from the peer").unwrap();
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "the SEND was placed");
    (a, b, mr, buf)
}

#[test]
fn a_receive_buffer_read_before_its_completion_where_sends_are_not_in_order_is_a_finding() {
    let _g = with_mode(Mode::Report);
    let (_a, b, mr, buf) = receiver_not_in_order();
    // The bug: the data is polled for, not the completion.
    // SAFETY: `buf` is the mapped page of the receive buffer; a plain load of it.
    let early = unsafe { std::ptr::read_volatile(buf) };
    assert_eq!(early, 0, "placed late: the early read sees the old bytes");
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.kind.name()), (FindingKind::ReadBeforeCompletion, "read-before-completion"));
    assert_eq!((f.wr_id(), f.qpn()), (Some(0x62), Some(b.qp.qp_num())));
    assert!(f.objects.contains(&Object::Read { addr: buf as u64, lkey: mr.lkey() }), "{f:#?}");
    assert!(f.objects.contains(&Object::WorkRequest { wr_id: 0x62, queue: Queue::Recv, num: b.qp.qp_num(), sge: Some((buf as u64, 4096)) }));
    assert!(site_in_this_file(f, "read at"));
    assert!(site_in_this_file(f, "posted at"));
    // The poll returns the completion with the message in the buffer.
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (0x62, WcStatus::Success, Some(64)));
    // SAFETY: as above, after the completion.
    let got = unsafe { std::slice::from_raw_parts(buf, 19) }.to_vec();
    assert_eq!(got, b"hello from the peer");
    assert_eq!(sanitize::take_findings(), vec![], "once per receive");
    drop(mr);
    unmap(buf, 1);
}

#[test]
fn a_receive_buffer_read_after_its_completion_is_no_finding_and_holds_the_message() {
    let _g = with_mode(Mode::Report);
    let (_a, b, mr, buf) = receiver_not_in_order();
    assert_eq!(b.qp.data_in_order(WrOpcode::Send, 0), 0, "0 while the receive is placed late");
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status()), (0x62, WcStatus::Success));
    // SAFETY: the mapped page of the receive buffer, after the completion.
    let got = unsafe { std::slice::from_raw_parts(buf, 19) }.to_vec();
    assert_eq!(got, b"hello from the peer");
    assert_eq!(sanitize::take_findings(), vec![]);
    drop(mr);
    unmap(buf, 1);
}

#[test]
fn an_extended_cq_returns_a_staged_receive_with_its_message_in_the_buffer() {
    let _g = with_mode(Mode::Report);
    let (_a, b, mr, buf) = receiver_not_in_order_on(CqInit::new(256).wc_flags(WcExFlags::STANDARD | WcExFlags::BYTE_LEN));
    let mut e = None;
    for _ in 0..1_000_000 {
        e = b.cq.start_poll().unwrap();
        if e.is_some() {
            break;
        }
    }
    let e = e.expect("the receive's completion");
    assert_eq!((e.wr_id(), e.byte_len()), (0x62, Some(64)));
    // SAFETY: the mapped page of the receive buffer, once ibv_start_poll returned it.
    let got = unsafe { std::slice::from_raw_parts(buf, 19) }.to_vec();
    b.cq.end_poll();
    assert_eq!(got, b"hello from the peer");
    assert_eq!(sanitize::take_findings(), vec![]);
    drop(mr);
    unmap(buf, 1);
}

#[test]
fn a_staged_receive_ended_by_the_destroy_or_the_deregistration_gives_its_pages_back() {
    let _g = with_mode(Mode::Report);
    // Destroyed with the receive outstanding (its message waits in the staging region):
    // the page is readable again and nothing is reported (destroy-qp-in-use ignores
    // receives).
    let (_a, b, mr, buf) = receiver_not_in_order();
    b.qp.destroy().unwrap();
    // SAFETY: the mapped page of the receive buffer, the receive discarded.
    assert_eq!(unsafe { std::ptr::read_volatile(buf) }, 0, "nothing was scattered");
    assert_eq!(sanitize::take_findings(), vec![]);
    drop(mr);
    unmap(buf, 1);
    // Deregistered with the receive outstanding: dereg-mr-in-use, and the page is given
    // back (no read-before-completion for a read after it).
    let (_a, b, mr, buf) = receiver_not_in_order();
    mr.dereg().unwrap();
    // SAFETY: as above; the region is gone, the mapping is the test's.
    assert_eq!(unsafe { std::ptr::read_volatile(buf) }, 0);
    let kinds: Vec<FindingKind> = sanitize::take_findings().iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![FindingKind::DeregMrInUse]);
    // The completion is still returned; nothing is scattered into the region that went.
    assert_eq!(poll_one(&b.cq).wr_id(), 0x62);
    // SAFETY: as above.
    assert_eq!(unsafe { std::ptr::read_volatile(buf) }, 0);
    unmap(buf, 1);
}

/// Two devices of this process (`DeviceConfig`), each with a context, a PD and a CQ of
/// `cqe` entries made in the same order, so that their CQs have the same number.
fn two_devices_same_cq_number(cqe: u32) -> [(Device, Context, Pd, Cq); 2] {
    let on = |dev: Device| {
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(&CqInit::new(cqe)).unwrap();
        (dev, ctx, pd, cq)
    };
    // With statistics on, so that a CQ's number can be read (`CqStats::cq`).
    let both = [on(DeviceConfig::from_env().stats(true).open().unwrap()), on(DeviceConfig::from_env().stats(true).open().unwrap())];
    assert_ne!(both[0].0.slot_index().unwrap(), both[1].0.slot_index().unwrap());
    let (a, b) = (both[0].3.stats().cq, both[1].3.stats().cq);
    assert!(a != 0 && a == b, "the premise: CQ numbers repeat across devices ({a}, {b})");
    both
}

/// A QP of 32 signaled sends and 32 receives (64 completions at most) on `cq`, moved to
/// INIT and posted one receive into a region of `pd`.
fn qp_of_64_posted(pd: &Pd, cq: &Cq) -> (Qp, Mr) {
    let cap = QpCap { max_send_wr: 32, max_recv_wr: 32, ..CAP };
    let qp = pd.create_qp(&QpInit { sq_sig_all: true, ..QpInit::new(QpType::Rc, cq, cap) }).unwrap();
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    to_init(&qp, ALL_ACCESS);
    qp.post_recv(&[RecvWr::new(1, &[mr.sge(0, 8).unwrap()])]).unwrap();
    (qp, mr)
}

#[test]
fn cqs_of_the_same_number_on_two_devices_count_the_work_of_their_own_device_only() {
    let _g = with_mode(Mode::Report);
    let [(da, _ca, pa, cqa), (db, _cb, pb, cqb)] = two_devices_same_cq_number(64);
    // Both CQs are alive, each named with its device (neither is the listed one).
    let (n, slots) = (cqa.stats().cq, [da.slot_index().unwrap(), db.slot_index().unwrap()]);
    let leaks = sanitize::leaks().unwrap();
    assert_eq!(leaks.objects.iter().filter(|o| **o == Object::Cq { id: n }).count(), 2, "{:#?}", leaks.objects);
    for slot in slots {
        assert!(leaks.site(&format!("cq {n} (device slot {slot}) created at")).is_some(), "{:#?}", leaks.sites);
    }
    // Each CQ holds exactly its own QP's 32 + 32: no finding, although both are "CQ n".
    let (qa, _ma) = qp_of_64_posted(&pa, &cqa);
    let (qb, _mb) = qp_of_64_posted(&pb, &cqb);
    assert_eq!(sanitize::take_findings(), vec![], "device A's QP counted on device B's CQ of the same number");
    // A real overcommitment of device B's CQ is still found, naming B's queues only.
    let (more, _mm) = qp_of_64_posted(&pb, &cqb);
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f.kind, f.device), (FindingKind::CqTooSmall, Some(slots[1])));
    assert!(f.objects.contains(&Object::CqCapacity { id: n, cqe: 64, demand: 128 }), "{:#?}", f.objects);
    let queues: Vec<u32> = f.objects.iter().filter_map(|o| match o { Object::QueueDepth { num, .. } => Some(*num), _ => None }).collect();
    assert_eq!(queues.len(), 4, "{:#?}", f.objects);
    assert!(queues.iter().all(|&n| n == qb.qp_num() || n == more.qp_num()), "a queue of device A named: {:#?}", f.objects);
    assert!(site_in_this_file(f, &format!("qp QPN {:#x} created at", more.qp_num())));
    for q in [more, qb, qa] {
        q.destroy().unwrap();
    }
}

#[test]
fn a_region_of_one_device_is_not_in_use_by_a_receive_of_another_with_the_same_lkey() {
    let _g = with_mode(Mode::Report);
    // CQs of 128: even counted together the two QPs' 64 + 64 fit (no cq-too-small).
    let [(_da, _ca, pa, cqa), (db, _cb, pb, cqb)] = two_devices_same_cq_number(128);
    let (qa, ma) = qp_of_64_posted(&pa, &cqa);
    let (qb, mb) = qp_of_64_posted(&pb, &cqb);
    assert_eq!(ma.lkey(), mb.lkey(), "the premise: memory keys repeat across devices");
    assert_eq!(sanitize::take_findings(), vec![]);
    // Device A's region: device B's receive names the same lkey, but not this region.
    let _ = qa.destroy();
    ma.dereg().unwrap();
    assert_eq!(sanitize::take_findings(), vec![], "device B's receive blamed on device A's region");
    // Device B's region, under its outstanding receive: the finding, naming B's QP.
    let lkey = mb.lkey();
    mb.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].lkey(), found[0].wr_id(), found[0].qpn()), (FindingKind::DeregMrInUse, Some(lkey), Some(1), Some(qb.qp_num())));
    assert_eq!(found[0].device, Some(db.slot_index().unwrap()));
    qb.destroy().unwrap();
}

/// A device in a runtime directory of its own, without the network: endpoint 0 there, so
/// its QPNs are those of any other such device.
fn device_in_own_dir(tag: &str) -> (Device, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("rverbs-sanitizer-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    (DeviceConfig::new().name(tag).runtime_dir(&dir).net(false).open().unwrap(), dir)
}

#[test]
fn a_flush_polled_on_one_device_leaves_the_receive_of_the_same_qpn_on_another_outstanding() {
    let _g = with_mode(Mode::Report);
    let ((da, dir_a), (db, dir_b)) = (device_in_own_dir("san-a"), device_in_own_dir("san-b"));
    let on = |dev: &Device| {
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(&CqInit::new(128)).unwrap();
        (ctx, pd, cq)
    };
    let ((_ca, pa, cqa), (_cb, pb, cqb)) = (on(&da), on(&db));
    // One region more on device A, so that the two receives' lkeys differ.
    let _spare = pa.alloc_mr(4096, ALL_ACCESS).unwrap();
    let (qa, ma) = qp_of_64_posted(&pa, &cqa);
    let (qb, mb) = qp_of_64_posted(&pb, &cqb);
    assert_eq!(qa.qp_num(), qb.qp_num(), "the premise: QPNs repeat across runtime directories");
    assert_ne!(ma.lkey(), mb.lkey());
    // Device B's QP enters ERR: its receive (wr_id 1) is flushed, and the flush polled.
    qb.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    let wc = poll_one(&cqb);
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::WrFlushErr));
    assert_eq!(sanitize::take_findings(), vec![]);
    // Device A's receive of the same QPN and wr_id is still outstanding.
    ma.dereg().unwrap();
    let found = sanitize::take_findings();
    assert_eq!(found.len(), 1, "device B's flush completed device A's receive: {found:#?}");
    assert_eq!((found[0].kind, found[0].device, found[0].qpn()), (FindingKind::DeregMrInUse, Some(da.slot_index().unwrap()), Some(qa.qp_num())));
    for q in [qa, qb] {
        q.destroy().unwrap();
    }
    drop((mb, _spare, cqa, cqb, pa, pb, _ca, _cb));
    let _ = (std::fs::remove_dir_all(dir_a), std::fs::remove_dir_all(dir_b));
}
