//! The progress thread: runs what cannot run inside the application's calls.
//!
//! DESIGN.md §5: one thread per process, started the first time it is needed, asleep
//! while there is nothing to do. Today its only work is timers — the RNR wait and the
//! ACK timeout after which a send queue retries its head work request. Work requests
//! otherwise execute inside `post_send`, so no latency-critical path waits for this
//! thread to wake.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock, Weak};
use std::time::Instant;

use crate::qp::QpInner;

struct Timer {
    at: Instant,
    seq: u64,
    qp: Weak<QpInner>,
}

impl PartialEq for Timer {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timer {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Default)]
struct Timers {
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

struct Progress {
    timers: Mutex<Timers>,
    wake: Condvar,
}

fn progress() -> &'static Progress {
    static P: OnceLock<&'static Progress> = OnceLock::new();
    P.get_or_init(|| {
        let p: &'static Progress =
            Box::leak(Box::new(Progress { timers: Mutex::default(), wake: Condvar::new() }));
        std::thread::Builder::new()
            .name("rverbs-progress".into())
            .spawn(move || run(p))
            .expect("spawn the rverbs progress thread");
        p
    })
}

/// Asks the progress thread to kick `qp`'s send queue at `at`.
pub(crate) fn schedule(at: Instant, qp: Weak<QpInner>) {
    let p = progress();
    let mut t = p.timers.lock().expect("timers");
    t.seq += 1;
    let seq = t.seq;
    let earliest = t.heap.peek().map(|Reverse(x)| x.at);
    t.heap.push(Reverse(Timer { at, seq, qp }));
    if earliest.is_none_or(|e| at < e) {
        p.wake.notify_one();
    }
}

fn run(p: &'static Progress) {
    let mut t = p.timers.lock().expect("timers");
    loop {
        let now = Instant::now();
        match t.heap.peek() {
            None => t = p.wake.wait(t).expect("timers"),
            Some(Reverse(first)) if first.at > now => {
                let d = first.at - now;
                t = p.wake.wait_timeout(t, d).expect("timers").0;
            }
            Some(_) => {
                let Reverse(due) = t.heap.pop().expect("peeked");
                drop(t);
                if let Some(qp) = due.qp.upgrade() {
                    qp.kick();
                }
                t = p.timers.lock().expect("timers");
            }
        }
    }
}
