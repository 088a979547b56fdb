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
    let cq = a.ctx.create_cq(&CqInit::new(16).channel(&ch)).unwrap();
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
