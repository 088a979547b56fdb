//! `rverbs::aio` (feature `tokio`): completions and asynchronous events awaited on tokio's
//! reactor, in ibv_get_cq_event(3)'s order (poll, arm, poll again, wait, acknowledge),
//! cancellation-safe and without empty wake-ups.
mod common;
use common::*;
use rverbs::aio::{AsyncChannel, AsyncCq, AsyncEvents};
use rverbs::*;
use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

/// A current-thread runtime with I/O and timers.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap()
}

/// Bounds a wait that must end (no sleep decides the outcome: the deadline only turns a
/// hang into a failure).
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut).await.expect("no result within 10 s")
}

#[test]
fn a_completion_posted_by_another_thread_wakes_the_awaiting_task() {
    let (a, b, ch) = pair_on_channel();
    let rt = runtime();
    rt.block_on(async {
        let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
        // The task is parked on the channel before the message exists.
        let mut wait = pin!(cq.next_completion());
        assert!(poll_once(wait.as_mut()).is_pending());
        let sender = std::thread::spawn(move || {
            send_one(&a, &b, 7);
            (a, b)
        });
        let wc = bounded(wait).await.unwrap();
        assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (7, WcStatus::Success, Some(WcOpcode::Recv)));
        let (_a, b) = sender.join().unwrap();
        assert_empty(&b.cq);
    });
}

#[test]
fn completions_already_queued_are_returned_without_waiting_for_an_event() {
    let (a, b, ch) = pair_on_channel();
    // Queued before the CQ was ever armed: no event will come for them.
    for i in 1..=3 {
        send_one(&a, &b, i);
    }
    let rt = runtime();
    rt.block_on(async {
        let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
        let mut wc = [Wc::default(); 8];
        let n = {
            let mut fut = pin!(cq.completions(&mut wc));
            let Poll::Ready(n) = poll_once(fut.as_mut()) else { panic!("queued completions must be ready at once") };
            n.unwrap()
        };
        assert_eq!(n, 3);
        assert_eq!(wc[..3].iter().map(|w| w.wr_id()).collect::<Vec<_>>(), [1, 2, 3]);
    });
}

#[test]
fn a_dropped_future_loses_no_completion_and_leaves_the_cq_armed() {
    let (a, b, ch) = pair_on_channel();
    let rt = runtime();
    rt.block_on(async {
        let mut cq = AsyncCq::new(b.cq.clone(), ch.clone()).unwrap();
        {
            // Empty: the future arms the CQ, polls again, and waits; then it is dropped.
            let mut fut = pin!(cq.next_completion());
            assert!(poll_once(fut.as_mut()).is_pending());
        }
        // The completion arrives with no future alive; the arming fires its event.
        send_one(&a, &b, 11);
        // A new future returns it.
        let wc = bounded(cq.next_completion()).await.unwrap();
        assert_eq!(wc.wr_id(), 11);
        // The next one: the spent event is acknowledged, the CQ re-armed, nothing more.
        let mut fut = pin!(cq.next_completion());
        assert!(poll_once(fut.as_mut()).is_pending());
        send_one(&a, &b, 12);
        assert_eq!(bounded(fut).await.unwrap().wr_id(), 12);
    });
    // Every event obtained was acknowledged: the CQ can be destroyed without waiting.
    b.qp.destroy().unwrap();
    b.cq.destroy().unwrap();
}

#[test]
fn a_wakeup_whose_event_finds_the_cq_empty_does_not_surface() {
    let (a, b, ch) = pair_on_channel();
    let rt = runtime();
    rt.block_on(async {
        let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
        let mut fut = pin!(cq.next_completion());
        assert!(poll_once(fut.as_mut()).is_pending());
        // The completion fires the arming; a plain poll takes it behind the async CQ's
        // back, so the event it will read names an empty CQ.
        send_one(&a, &b, 21);
        assert_eq!(poll_one(&b.cq).wr_id(), 21);
        // The future reads the event, finds nothing, re-arms and waits again: Pending,
        // not an empty result.
        assert!(poll_once(fut.as_mut()).is_pending());
        send_one(&a, &b, 22);
        assert_eq!(bounded(fut).await.unwrap().wr_id(), 22);
    });
}

#[test]
fn the_cq_is_a_stream_of_work_completions() {
    let (a, b, ch) = pair_on_channel();
    let rt = runtime();
    rt.block_on(async {
        let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
        let sender = std::thread::spawn(move || {
            for i in 0..16 {
                send_one(&a, &b, 100 + i);
            }
            (a, b)
        });
        let mut got = Vec::new();
        while got.len() < 16 {
            let wc = bounded(std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut cq), cx)))
                .await
                .expect("the stream never ends")
                .unwrap();
            assert_eq!(wc.status(), WcStatus::Success);
            got.push(wc.wr_id());
        }
        assert_eq!(got, (100..116).collect::<Vec<_>>(), "in completion order");
        sender.join().unwrap();
    });
}

#[test]
fn an_async_cq_needs_the_cqs_own_unshared_channel() {
    let ctx = open();
    let ch = ctx.create_comp_channel().unwrap();
    let other = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16).channel(&ch)).unwrap();
    let rt = runtime();
    let _guard = rt.enter();
    match AsyncCq::new(cq.clone(), other) {
        Err(Error::Invalid { rule: Rule::NotTheCqsChannel, .. }) => {}
        r => panic!("another CQ's channel: {r:?}"),
    }
    let second = ctx.create_cq(&CqInit::new(16).channel(&ch)).unwrap();
    match AsyncCq::new(cq.clone(), ch.clone()) {
        Err(Error::Invalid { rule: Rule::SharedChannel { cqs: 2 }, .. }) => {}
        r => panic!("a channel of two CQs: {r:?}"),
    }
    second.destroy().unwrap();
    let mut acq = AsyncCq::new(cq, ch).unwrap();
    let mut fut = pin!(acq.completions(&mut []));
    assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Err(Error::Invalid { rule: Rule::NoRoomForCompletion, .. }))));
}

#[test]
fn a_shared_channel_yields_the_event_of_each_cq() {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let ch = b.ctx.create_comp_channel().unwrap();
    let cq1 = b.ctx.create_cq(&CqInit::new(16).channel(&ch).cq_context(1)).unwrap();
    let cq2 = b.ctx.create_cq(&CqInit::new(16).channel(&ch).cq_context(2)).unwrap();
    let qp = b.pd.create_qp(&QpInit::new(QpType::Rc, &cq1, CAP)).unwrap();
    let b = Side { cq: cq1.clone(), qp, ..b };
    connect(&a, &b, &PATH);
    let rt = runtime();
    rt.block_on(async {
        let chan = AsyncChannel::new(ch).unwrap();
        cq1.req_notify(false).unwrap();
        cq2.req_notify(false).unwrap();
        let mut fut = pin!(chan.event());
        assert!(poll_once(fut.as_mut()).is_pending(), "nothing completed yet");
        send_one(&a, &b, 5);
        let ev = bounded(fut).await.unwrap();
        assert_eq!(ev.cq_context(), 1, "the receive completed to cq1");
        drop(ev);
        assert_eq!(poll_one(&cq1).wr_id(), 5);
        assert!(poll_once(pin!(chan.event())).is_pending(), "cq2 stays silent");
    });
}

#[test]
fn asynchronous_events_are_awaited() {
    // The responder stays in RTR: the first request to it raises COMM_EST.
    let (a, b) = requester_rts_responder_rtr();
    let rt = runtime();
    rt.block_on(async {
        let events = AsyncEvents::new(b.ctx.clone()).unwrap();
        let mut fut = pin!(events.event());
        assert!(poll_once(fut.as_mut()).is_pending(), "no event yet");
        a.qp.post_send(&[SendWr::write(1, &[], 0, 0).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        let ev = bounded(fut).await.unwrap();
        assert_eq!(ev.event_type(), EventType::CommEst);
        assert!(matches!(ev.element(), AsyncElement::Qp(q) if q.qp_num() == b.qp.qp_num()));
        drop(ev);
        assert!(poll_once(pin!(events.event())).is_pending(), "once only");
    });
}
