//! Who is inside a CQ's publish: one word per endpoint of the host, so that the CQ's owner
//! can tell a producer that is slow from one that died, and a resize waits only for the
//! living.
//!
//! Read before editing: docs/completion-queues.md ("A producer that dies inside publish").
//!
//! Rule: a completion queue belongs to one process, but producers are every process whose
//! QPs complete to it (`crate::rings::cq_segment`). A producer that dies with SIGKILL between
//! reserving a ring position and publishing it would leave a hole the consumer never gets
//! past: every later completion of the CQ would be stuck behind it, and a resize would
//! wait for a producer that never leaves. The gate records, per endpoint number, the pid
//! of the process counted and how many of its threads are inside; the owner asks the
//! registry whether those processes are alive. A live producer is always counted while
//! it holds a reservation, so only the reservations of dead processes are ever skipped.
//! The threads of the CQ's own process are the exception: they publish marked as inside
//! the CQ on their own reader record instead of counted, and the owner waits for the
//! threads so marked (docs/completion-queues.md, "The owner's own completions").
//!
//! Protocol:
//! - enter: increment `inside[ep]` (a word left by a dead process that held the same
//!   endpoint number is replaced: it counts nobody alive), then read `resizing`; if set,
//!   leave again and follow the resize.
//! - resize (`freeze`): set `resizing`, then read every `inside` word.
//!   Each side's write and read are SeqCst (Dekker), so either the producer sees the
//!   resize or the resizer sees the producer. On x86-64 the producer's SeqCst
//!   compare-exchange is a locked instruction and its SeqCst load a plain one: no fence
//!   on the path of every completion (a `fence(SeqCst)` there cost ~8 ns per CQE,
//!   BENCHMARKS.md). Under loom, which models SeqCst accesses as AcqRel but SeqCst
//!   fences exactly, the same order comes from a fence after each write ([`dekker`]).
//! - leave: decrement `inside[ep]` with `Release`, after the CQE is published: a consumer
//!   that reads the word with `Acquire` and finds nobody sees the publication.
#![allow(unsafe_code)]

#[cfg(rverbs_loom)]
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(rverbs_loom))]
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Endpoint numbers of one host (`limits::MAX_ENDPOINTS`).
#[cfg(not(rverbs_loom))]
pub(crate) const ENDPOINTS: usize = crate::limits::MAX_ENDPOINTS as usize;
/// Under loom, a few: every word read is a branch of the model.
#[cfg(rverbs_loom)]
pub(crate) const ENDPOINTS: usize = 4;

/// A process that publishes completions: its endpoint number and pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Producer {
    pub(crate) ep: u32,
    pub(crate) pid: u32,
}

/// The gate's shared words. `inside[ep]` is `pid << 32 | threads inside`.
#[repr(C)]
pub(crate) struct Gate {
    /// Non-zero while a resize is under way.
    resizing: AtomicU32,
    _pad: AtomicU32,
    inside: [AtomicU64; ENDPOINTS],
}

#[cfg(not(rverbs_loom))]
// SAFETY: atomics only; every bit pattern is valid (garbage counts are handled as counts).
unsafe impl crate::shm::ShmSafe for Gate {}

/// Orders a SeqCst write before the SeqCst read that follows it, as the module doc
/// explains: nothing to add outside loom (the accesses are SeqCst), a SeqCst fence under
/// loom (which models SeqCst accesses as AcqRel).
#[inline(always)]
fn dekker() {
    #[cfg(rverbs_loom)]
    fence(Ordering::SeqCst);
}

/// Bytes a [`Gate`] takes in a segment.
pub(crate) const GATE_BYTES: usize = std::mem::size_of::<Gate>();

/// How a resize found the producers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frozen {
    /// No live producer is inside: the resize may move the ring.
    Quiet,
    /// A live producer did not leave in time (or the words are garbage another process
    /// wrote): the resize must not move the ring, where that producer may still write.
    TimedOut,
}

impl Gate {
    /// A gate in process memory (unit tests, loom models, the fuzz harness).
    #[cfg(any(test, rverbs_loom, feature = "fuzzing"))]
    pub(crate) fn new() -> Self {
        Gate { resizing: AtomicU32::new(0), _pad: AtomicU32::new(0), inside: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    fn word(&self, ep: u32) -> &AtomicU64 {
        &self.inside[ep as usize % ENDPOINTS]
    }

    /// Counts `who` inside; `false` (and not counted) if a resize is under way.
    pub(crate) fn enter(&self, who: Producer) -> bool {
        let w = self.word(who.ep);
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            // A word of another pid was left by a dead process with this endpoint number
            // (a live one cannot share it): it counts nobody alive, so it is replaced.
            let next = if cur >> 32 == u64::from(who.pid) { cur.wrapping_add(1) } else { u64::from(who.pid) << 32 | 1 };
            match w.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // Pairs with `freeze`'s write of `resizing` (see the module doc).
        dekker();
        if self.resizing.load(Ordering::SeqCst) != 0 {
            self.leave(who);
            return false;
        }
        true
    }

    /// Uncounts `who` (after its CQE is published).
    pub(crate) fn leave(&self, who: Producer) {
        self.word(who.ep).fetch_sub(1, Ordering::Release);
    }

    /// Whether a resize is under way.
    pub(crate) fn resizing(&self) -> bool {
        self.resizing.load(Ordering::Acquire) != 0
    }

    /// [`Gate::resizing`] as a plain load, for a publisher of the owner's process not
    /// counted here, which a membarrier(2) of the resize orders after its pin
    /// (`CqSeg::publish_uncounted`).
    #[inline(always)]
    pub(crate) fn resizing_relaxed(&self) -> bool {
        self.resizing.load(Ordering::Relaxed) != 0
    }

    /// Whether some process that `alive(ep, pid)` says is alive is inside.
    ///
    /// Reads every word with SeqCst (at least Acquire: when it finds nobody alive inside,
    /// every completion published by a producer that has left is visible to the caller).
    pub(crate) fn live_inside(&self, alive: &dyn Fn(u32, u32) -> bool) -> bool {
        self.inside.iter().enumerate().any(|(ep, w)| {
            let v = w.load(Ordering::SeqCst);
            v & 0xffff_ffff != 0 && alive(ep as u32, (v >> 32) as u32)
        })
    }

    /// Starts a resize: stops new producers and waits until no live one is inside, at
    /// most `wait` (`alive` as for [`Gate::live_inside`]). A producer that died inside
    /// is not waited for.
    pub(crate) fn freeze(&self, alive: &dyn Fn(u32, u32) -> bool, wait: std::time::Duration) -> Frozen {
        self.resizing.store(1, Ordering::SeqCst);
        // Pairs with `enter`'s count (see the module doc).
        dekker();
        #[cfg(not(rverbs_loom))]
        let start = std::time::Instant::now();
        while self.live_inside(alive) {
            #[cfg(not(rverbs_loom))]
            if start.elapsed() > wait {
                return Frozen::TimedOut;
            }
            #[cfg(rverbs_loom)]
            let _ = wait;
            #[cfg(not(rverbs_loom))]
            std::thread::yield_now();
            #[cfg(rverbs_loom)]
            loom::thread::yield_now();
        }
        Frozen::Quiet
    }

    /// Lets producers in again (a resize that did not happen).
    pub(crate) fn thaw(&self) {
        self.resizing.store(0, Ordering::Release);
    }

    /// Sets the resize flag as another process could (tests of a flag nobody clears).
    #[cfg(test)]
    pub(crate) fn set_resizing(&self) {
        self.resizing.store(1, Ordering::Release);
    }

    /// The resize flag and the `inside` words, for writing them as another process could
    /// (the fuzz harness).
    #[cfg(all(feature = "fuzzing", not(rverbs_loom)))]
    pub(crate) fn words(&self) -> (&AtomicU32, &[AtomicU64; ENDPOINTS]) {
        (&self.resizing, &self.inside)
    }
}

#[cfg(all(test, not(rverbs_loom)))]
mod tests {
    use super::*;

    const ME: Producer = Producer { ep: 3, pid: 1000 };

    #[test]
    fn a_producer_is_inside_between_enter_and_leave() {
        let g = Gate::new();
        let alive = |ep, pid| ep == 3 && pid == 1000;
        assert!(!g.live_inside(&alive));
        assert!(g.enter(ME));
        assert!(g.enter(ME), "two threads of one process");
        assert!(g.live_inside(&alive));
        g.leave(ME);
        assert!(g.live_inside(&alive));
        g.leave(ME);
        assert!(!g.live_inside(&alive));
    }

    #[test]
    fn a_dead_producer_inside_is_not_waited_for() {
        let g = Gate::new();
        let dead = Producer { ep: 4, pid: 77 };
        assert!(g.enter(dead));
        // ep 4 is now another process: pid 77 died inside.
        let alive = |ep, pid| ep == 4 && pid == 78;
        assert!(!g.live_inside(&alive));
        assert_eq!(g.freeze(&alive, std::time::Duration::from_secs(3600)), Frozen::Quiet);
        // The process that took endpoint 4 over is refused while the resize lasts, and
        // its entering replaces the dead process's count.
        assert!(!g.enter(Producer { ep: 4, pid: 78 }));
        g.thaw();
        assert!(g.enter(Producer { ep: 4, pid: 78 }));
        assert_eq!(g.word(4).load(Ordering::Relaxed), 78 << 32 | 1);
        assert!(g.live_inside(&alive));
    }

    #[test]
    fn a_live_producer_that_never_leaves_times_the_resize_out() {
        let g = Gate::new();
        assert!(g.enter(ME));
        let alive = |_, _| true;
        assert_eq!(g.freeze(&alive, std::time::Duration::ZERO), Frozen::TimedOut);
    }
}

/// Exhaustive interleavings of the gate (run with
/// `RUSTFLAGS="--cfg rverbs_loom" cargo test -p rverbs --release --lib rings::producer_gate`).
#[cfg(all(test, rverbs_loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// A producer that entered is either seen by the resize (which then waits for it to
    /// leave) or sees the resize (and stays out): the ring, here a cell that both write,
    /// is never written by both at once (loom reports such a race as a failure).
    #[test]
    fn a_resize_and_a_producer_exclude_each_other() {
        loom::model(|| {
            let g = Arc::new(Gate::new());
            let ring = Arc::new(UnsafeCell::new(0u32));
            let (g2, r2) = (g.clone(), ring.clone());
            let p = loom::thread::spawn(move || {
                let who = Producer { ep: 1, pid: 5 };
                if g2.enter(who) {
                    // SAFETY: the gate's exclusion is what the model checks.
                    r2.with_mut(|v| unsafe { *v += 1 });
                    g2.leave(who);
                }
            });
            assert_eq!(g.freeze(&|_, _| true, std::time::Duration::ZERO), Frozen::Quiet);
            // SAFETY: as above.
            ring.with_mut(|v| unsafe { *v += 10 });
            p.join().unwrap();
        });
    }
}
