//! `rverbs::aio` without tokio (feature `async-io`): the same futures registered with
//! async-io's reactor, driven by an executor that knows nothing of it — the minimal
//! `block_on` below, which only parks its thread until a waker unparks it. What the
//! tokio tests (tests/aio.rs) check of the order of ibv_get_cq_event(3) holds here too:
//! a task waits on the channel and is woken by a completion from another thread; a
//! dropped future loses nothing; a wake-up that finds the CQ empty does not surface.
mod common;
use common::*;
use rverbs::aio::{AsyncCq, AsyncEvents};
use rverbs::*;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Wakes the executor's thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor: polls `fut` on this thread, parking between polls until its waker
/// runs. The deadline turns a hang (a lost wake-up) into a failure; it decides nothing
/// else (a spurious unpark only polls once more).
fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = pin!(fut);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        let left = deadline.checked_duration_since(Instant::now()).expect("not woken within 10 s");
        std::thread::park_timeout(left);
    }
}

#[test]
fn a_completion_posted_by_another_thread_wakes_a_task_of_any_executor() {
    let (a, b, ch) = pair_on_channel();
    // No tokio runtime here: the CQ's channel goes to async-io's reactor.
    let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
    let mut wait = pin!(cq.next_completion());
    // The task waits on the channel before the message exists.
    assert!(poll_once(wait.as_mut()).is_pending());
    let sender = std::thread::spawn(move || {
        send_one(&a, &b, 7);
        (a, b)
    });
    let wc = block_on(wait).unwrap();
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (7, WcStatus::Success, Some(WcOpcode::Recv)));
    assert_eq!(wc.byte_len(), Some(8));
    let _keep = sender.join().unwrap();
}

#[test]
fn a_dropped_future_loses_no_completion() {
    let (a, b, ch) = pair_on_channel();
    let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
    {
        // Armed and waiting, then dropped: the arming stays with the AsyncCq.
        let mut wait = pin!(cq.next_completion());
        assert!(poll_once(wait.as_mut()).is_pending());
    }
    send_one(&a, &b, 21);
    let wc = block_on(cq.next_completion()).unwrap();
    assert_eq!((wc.wr_id(), wc.status()), (21, WcStatus::Success));
    // And the next one, posted while a new future waits, wakes it.
    let mut wait = pin!(cq.next_completion());
    assert!(poll_once(wait.as_mut()).is_pending());
    let sender = std::thread::spawn(move || {
        send_one(&a, &b, 22);
        (a, b)
    });
    assert_eq!(block_on(wait).unwrap().wr_id(), 22);
    let _keep = sender.join().unwrap();
}

#[test]
fn a_wakeup_whose_event_finds_the_cq_empty_does_not_surface() {
    let (a, b, ch) = pair_on_channel();
    let mut cq = AsyncCq::new(b.cq.clone(), ch).unwrap();
    let mut wait = pin!(cq.next_completion());
    assert!(poll_once(wait.as_mut()).is_pending());
    // Taken behind the future's back: the event fires, the CQ is empty when it looks.
    send_one(&a, &b, 31);
    let mut wc = [Wc::default()];
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.cq.poll(&mut wc).unwrap() == 0 {
        assert!(Instant::now() < deadline, "the SEND never completed");
        std::thread::yield_now();
    }
    assert_eq!(wc[0].wr_id(), 31);
    // The future wakes for that event, finds nothing, re-arms and waits on: only the
    // next completion resolves it.
    assert!(poll_once(wait.as_mut()).is_pending());
    let sender = std::thread::spawn(move || {
        send_one(&a, &b, 32);
        (a, b)
    });
    assert_eq!(block_on(wait).unwrap().wr_id(), 32);
    let _keep = sender.join().unwrap();
}

#[test]
fn asynchronous_events_are_awaited_on_any_executor() {
    // The responder stays in RTR: the first request to it raises COMM_EST.
    let (a, b) = requester_rts_responder_rtr();
    let events = AsyncEvents::new(b.ctx.clone()).unwrap();
    let mut wait = pin!(events.event());
    assert!(poll_once(wait.as_mut()).is_pending(), "no event yet");
    let b_qpn = b.qp.qp_num();
    let requester = std::thread::spawn(move || {
        a.qp.post_send(&[SendWr::write(1, &[], 0, 0).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        a
    });
    let ev = block_on(wait).unwrap();
    assert_eq!(ev.event_type(), EventType::CommEst);
    assert!(matches!(ev.element(), AsyncElement::Qp(q) if q.qp_num() == b_qpn));
    drop(ev);
    assert!(poll_once(pin!(events.event())).is_pending(), "once only");
    let _keep = (requester.join().unwrap(), b);
}
