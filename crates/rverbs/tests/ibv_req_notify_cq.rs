//! ibv_req_notify_cq(3), ibv_get_cq_event(3), ibv_create_comp_channel(3).
mod common;
use common::*;
use rverbs::*;
use std::os::fd::BorrowedFd;
use std::sync::mpsc;
use std::time::Duration;

/// Whether the fd is readable right now.
fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 }))
        .unwrap()
        == 1
}

/// A pair whose receiving side (b) completes to a CQ attached to a channel.
fn pair_ch() -> (Side, Side, CompChannel) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let ch = b.ctx.create_comp_channel().unwrap();
    let cq = b.ctx.create_cq(&CqInit::new(64).channel(&ch).cq_context(0xc0ffee)).unwrap();
    let qp = b.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let b = Side { cq, qp, ..b };
    connect(&a, &b, &PATH);
    rustix::io::ioctl_fionbio(ch.fd(), true).unwrap();
    (a, b, ch)
}

fn send(a: &Side, b: &Side, wr_id: u64, flags: SendFlags) {
    post_recv(b, wr_id, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(wr_id, &sge).flags(flags)]).unwrap();
}

#[test]
fn armed_cq_queues_one_event_on_the_next_completion() {
    let (a, b, ch) = pair_ch();
    b.cq.req_notify(false).unwrap();
    assert!(!readable(ch.fd()));
    send(&a, &b, 1, SendFlags::empty());
    assert!(readable(ch.fd()));
    let ev = ch.get_cq_event().unwrap();
    assert!(ev.cq().same_as(&b.cq));
    assert_eq!(ev.cq_context(), 0xc0ffee);
    ev.ack();
    assert!(!readable(ch.fd()), "one event per arming");
    assert_eq!(poll_one(&b.cq).wr_id(), 1);
}

#[test]
fn no_event_without_arming_and_one_per_arming() {
    let (a, b, ch) = pair_ch();
    send(&a, &b, 1, SendFlags::empty());
    assert!(!readable(ch.fd()));
    assert!(matches!(ch.get_cq_event(), Err(Error::WouldBlock)));
    b.cq.req_notify(false).unwrap();
    // A completion already in the CQ does not fire the new arming.
    assert!(!readable(ch.fd()));
    send(&a, &b, 2, SendFlags::empty());
    send(&a, &b, 3, SendFlags::empty());
    ch.get_cq_event().unwrap().ack();
    assert!(matches!(ch.get_cq_event(), Err(Error::WouldBlock)));
}

#[test]
fn solicited_only_waits_for_a_solicited_completion() {
    let (a, b, ch) = pair_ch();
    b.cq.req_notify(true).unwrap();
    send(&a, &b, 1, SendFlags::empty());
    assert!(!readable(ch.fd()), "an unsolicited receive does not fire");
    send(&a, &b, 2, SendFlags::SOLICITED);
    assert!(readable(ch.fd()));
    ch.get_cq_event().unwrap().ack();
}

#[test]
fn a_blocked_reader_wakes_on_the_completion() {
    let (a, b, ch) = pair_ch();
    rustix::io::ioctl_fionbio(ch.fd(), false).unwrap();
    b.cq.req_notify(false).unwrap();
    let (tx, rx) = mpsc::channel();
    let ch2 = ch.clone();
    let t = std::thread::spawn(move || {
        let ev = ch2.get_cq_event().unwrap();
        tx.send(ev.cq_context()).unwrap();
    });
    send(&a, &b, 1, SendFlags::empty());
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 0xc0ffee);
    t.join().unwrap();
}

#[test]
fn destroy_waits_until_delivered_events_are_acknowledged() {
    let (a, b, ch) = pair_ch();
    b.cq.req_notify(false).unwrap();
    send(&a, &b, 1, SendFlags::empty());
    let ev = ch.get_cq_event().unwrap();
    let cq = ev.into_cq();
    b.qp.destroy().unwrap();
    let (tx, rx) = mpsc::channel();
    let cq2 = cq.clone();
    let t = std::thread::spawn(move || {
        cq2.destroy().unwrap();
        tx.send(()).unwrap();
    });
    // Still blocked: the event was delivered and not acknowledged.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    cq.ack_events(1);
    rx.recv_timeout(Duration::from_secs(10)).expect("destroy returns after the ack");
    t.join().unwrap();
}

#[test]
fn channel_destroy_is_busy_while_a_cq_uses_it() {
    let ctx = open();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(&CqInit::new(4).channel(&ch)).unwrap();
    assert_eq!(ch.destroy().unwrap_err().errno(), libc::EBUSY);
    cq.destroy().unwrap();
    ch.destroy().unwrap();
    // A destroyed channel serves no new CQ and cannot be destroyed again.
    assert_eq!(ctx.create_cq(&CqInit::new(4).channel(&ch)).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(ch.destroy().unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn events_of_a_destroyed_cq_are_discarded() {
    let (a, b, ch) = pair_ch();
    b.cq.req_notify(false).unwrap();
    send(&a, &b, 1, SendFlags::empty());
    b.qp.destroy().unwrap();
    b.cq.destroy().unwrap();
    assert!(matches!(ch.get_cq_event(), Err(Error::WouldBlock)));
}

#[test]
fn one_channel_serves_several_cqs() {
    let ctx = open();
    let ch = ctx.create_comp_channel().unwrap();
    rustix::io::ioctl_fionbio(ch.fd(), true).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq1 = ctx.create_cq(&CqInit::new(8).channel(&ch).cq_context(1)).unwrap();
    let cq2 = ctx.create_cq(&CqInit::new(8).channel(&ch).cq_context(2)).unwrap();
    let qp1 = pd.create_qp(&QpInit::new(QpType::Rc, &cq1, CAP)).unwrap();
    let qp2 = pd.create_qp(&QpInit::new(QpType::Rc, &cq2, CAP)).unwrap();
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let s1 = Side { ctx: ctx.clone(), pd: pd.clone(), cq: cq1.clone(), qp: qp1, mr: mr.clone() };
    let s2 = Side { ctx: ctx.clone(), pd, cq: cq2.clone(), qp: qp2, mr };
    connect(&s1, &s2, &PATH);
    cq1.req_notify(false).unwrap();
    cq2.req_notify(false).unwrap();
    send(&s1, &s2, 1, SendFlags::SIGNALED);
    let mut got = vec![ch.get_cq_event().unwrap().cq_context(), ch.get_cq_event().unwrap().cq_context()];
    got.sort_unstable();
    assert_eq!(got, vec![1, 2]);
}

/// Whether a source a reactor would register (anything `AsFd`) is readable right now.
fn ready_source(src: &impl std::os::fd::AsFd) -> bool {
    readable(src.as_fd())
}

/// A completion channel is `AsFd` (issue 23: registered with epoll or `tokio::io::unix::AsyncFd`
/// as it is): the descriptor an event loop watches is the channel's, readable exactly while an
/// event is queued.
#[test]
fn a_completion_channel_is_a_source_an_event_loop_can_watch() {
    let (a, b, ch) = pair_ch();
    use std::os::fd::{AsFd, AsRawFd};
    assert_eq!(ch.as_fd().as_raw_fd(), ch.fd().as_raw_fd(), "the channel's own fd");
    b.cq.req_notify(false).unwrap();
    assert!(!ready_source(&ch));
    send(&a, &b, 1, SendFlags::empty());
    assert!(ready_source(&ch));
    ch.get_cq_event().unwrap().ack();
    assert!(!ready_source(&ch));
}
