//! Fixtures of the async tests: a PD and a small RC QP on the listed device, and the
//! minimal executor of the `*_any_executor` tests, which only parks its thread until a
//! waker unparks it, so the futures it drives depend on no runtime (async-io's reactor
//! wakes them).
#![allow(dead_code)]

use rverbs::{CqInit, Pd, Qp, QpCap, QpInit, QpType};

/// A PD of a new context of the listed device.
pub fn pd() -> Pd {
    rverbs::devices().unwrap()[0].open().unwrap().alloc_pd().unwrap()
}

/// An RC QP of `pd` with room for two sends and two receives, on a CQ of its own.
pub fn qp(pd: &Pd) -> Qp {
    let cq = pd.context().create_cq(&CqInit::new(8)).unwrap();
    let cap = QpCap { max_send_wr: 2, max_recv_wr: 2, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap()
}

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread, parking between polls until its waker runs; the deadline
/// turns a lost wake-up into a failure and decides nothing else (a spurious unpark only
/// polls once more).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = pin!(fut);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        let left = deadline.checked_duration_since(Instant::now()).expect("not woken within 20 s");
        std::thread::park_timeout(left);
    }
}

/// Polls `fut` once with a waker that does nothing.
pub fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut TaskContext::from_waker(Waker::noop()))
}
