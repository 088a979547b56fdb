//! ibv_get_async_event(3): the events the device raises and their fd.
mod common;
use common::*;
use rverbs::*;
use std::sync::mpsc;
use std::time::Duration;

fn nonblocking(ctx: &Context) {
    rustix::io::ioctl_fionbio(ctx.async_fd(), true).unwrap();
}

#[test]
fn no_event_means_wouldblock_on_a_nonblocking_fd() {
    let ctx = open();
    nonblocking(&ctx);
    assert!(matches!(ctx.get_async_event(), Err(Error::WouldBlock)));
}

/// [`requester_rts_responder_rtr`] with `b`'s async-event fd non-blocking.
fn requester_and_responder_in_rtr() -> (Side, Side) {
    let (a, b) = requester_rts_responder_rtr();
    nonblocking(&b.ctx);
    (a, b)
}

#[test]
fn comm_est_is_raised_for_the_first_request_to_a_qp_in_rtr() {
    let (a, b) = requester_and_responder_in_rtr();
    a.qp.post_send(&[SendWr::write(1, &[], 0, 0).signaled()]).unwrap();
    a.qp.post_send(&[SendWr::write(2, &[], 0, 0).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let ev = b.ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type(), EventType::CommEst);
    assert!(matches!(ev.element(), AsyncElement::Qp(q) if q.qp_num() == b.qp.qp_num()));
    drop(ev);
    assert!(matches!(b.ctx.get_async_event(), Err(Error::WouldBlock)), "once only");
}

#[test]
fn srq_limit_fires_once_when_armed_and_crossed() {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: 16, max_sge: 1, srq_limit: 0, srq_context: 0 }).unwrap();
    let qp = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &b.cq, CAP) }).unwrap();
    let b = Side { qp, ..b };
    connect(&a, &b, &PATH);
    nonblocking(&b.ctx);
    let sge = [b.mr.sge(0, 64).unwrap()];
    for i in 0..4 {
        srq.post_recv(&[RecvWr::new(i, &sge)]).unwrap();
    }
    srq.modify(&SrqAttr { srq_limit: 3, ..SrqAttr::default() }, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(srq.query().srq_limit, 3);
    let ss = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &ss)]).unwrap(); // 3 left: not below 3
    assert!(matches!(b.ctx.get_async_event(), Err(Error::WouldBlock)));
    a.qp.post_send(&[SendWr::send(2, &ss)]).unwrap(); // 2 left: fires
    let ev = b.ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type(), EventType::SrqLimitReached);
    assert!(matches!(ev.element(), AsyncElement::Srq(_)));
    drop(ev);
    assert_eq!(srq.query().srq_limit, 0, "disarmed");
    a.qp.post_send(&[SendWr::send(3, &ss)]).unwrap();
    assert!(matches!(b.ctx.get_async_event(), Err(Error::WouldBlock)));
    let e = srq.modify(&SrqAttr { srq_limit: 17, ..SrqAttr::default() }, SrqAttrMask::LIMIT);
    assert_eq!(e.unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn last_wqe_reached_when_a_qp_on_an_srq_enters_err() {
    let ctx = open();
    nonblocking(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let srq = pd.create_srq(&SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() }).unwrap();
    let qp = pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &cq, CAP) }).unwrap();
    to_init(&qp, ALL_ACCESS);
    qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    let ev = ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type(), EventType::QpLastWqeReached);
    drop(ev);
    assert_eq!(srq.destroy().unwrap_err().errno(), libc::EBUSY);
    qp.destroy().unwrap();
    srq.destroy().unwrap();
}

#[test]
fn a_blocked_reader_wakes_on_an_event() {
    let (a, b) = pair(QpType::Rc);
    let ctx = b.ctx.clone();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let ev = ctx.get_async_event().unwrap();
        tx.send(ev.event_type()).unwrap();
    });
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, 0, 0xdead)]).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), EventType::QpAccessErr);
    t.join().unwrap();
}

#[test]
fn qp_destroy_waits_for_its_events_to_be_acknowledged() {
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, 0, 0xdead)]).unwrap();
    let ev = b.ctx.get_async_event().unwrap();
    let (kind, element) = ev.into_parts();
    assert_eq!(kind, EventType::QpAccessErr);
    let AsyncElement::Qp(qp) = element else { panic!("a QP event") };
    let (tx, rx) = mpsc::channel();
    let q2 = qp.clone();
    let t = std::thread::spawn(move || {
        q2.destroy().unwrap();
        tx.send(()).unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "destroy waits for the ack");
    qp.ack_async_events(1);
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    t.join().unwrap();
}

/// A context is `AsFd` over its asynchronous-event fd (issue 23: an event loop watches the
/// context itself): readable exactly while an event is pending.
#[test]
fn a_context_is_a_source_of_async_events_an_event_loop_can_watch() {
    use std::os::fd::AsFd;
    let ready = |ctx: &Context| {
        let fd = ctx.as_fd();
        let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
    };
    let (a, b) = requester_and_responder_in_rtr();
    assert!(!ready(&b.ctx));
    a.qp.post_send(&[SendWr::write(1, &[], 0, 0).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert!(ready(&b.ctx), "COMM_EST is pending");
    assert_eq!(b.ctx.get_async_event().unwrap().event_type(), EventType::CommEst);
    assert!(!ready(&b.ctx));
}
