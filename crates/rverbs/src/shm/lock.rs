//! A spin lock in shared memory that survives the death of its holder.
//!
//! The lock word holds the endpoint number of the holder plus one (0 = free). A waiter
//! that has spun for a while asks whether the holder's endpoint is still alive; if it is
//! not, it takes the lock over. Critical sections guarded by these locks are a few
//! stores long and keep their data consistent at every step that matters (indices are
//! published last), so a takeover sees a usable state.

use std::sync::atomic::{AtomicU32, Ordering};

use super::ShmSafe;

/// The lock word.
#[repr(C)]
#[derive(Default)]
pub(crate) struct ShmLock {
    word: AtomicU32,
}

// SAFETY: a single AtomicU32.
unsafe impl ShmSafe for ShmLock {}

/// How long a lock word may keep naming one live holder before it is taken over (see
/// [`ShmLock::lock`]).
const STUCK: std::time::Duration = std::time::Duration::from_secs(1);

/// What a waiter asks about the endpoint a lock word names.
pub(crate) trait Holders {
    /// Whether endpoint `ep` still exists (asked only after spinning, so it may be slow).
    fn alive(&self, ep: u32) -> bool;

    /// Whether endpoint `ep`'s process is stopped (a signal, a debugger), asked only of a
    /// holder kept past `stuck`. It goes on inside its critical section when it runs
    /// again, so it is waited for: a lock taken over from it would have two holders.
    fn stopped(&self, _ep: u32) -> bool {
        false
    }
}

impl<F: Fn(u32) -> bool> Holders for F {
    fn alive(&self, ep: u32) -> bool {
        self(ep)
    }
}

/// Held until dropped.
pub(crate) struct ShmGuard<'a> {
    lock: &'a ShmLock,
    /// The endpoint whose lock this was when it was taken over because that endpoint
    /// died inside its critical section ([`ShmGuard::took_over_from`]).
    dead_holder: Option<u32>,
}

impl ShmGuard<'_> {
    /// The endpoint that died holding the lock, if this guard took it over from one: its
    /// critical section stopped somewhere in the middle, and the new holder may have
    /// to finish or undo it (`rings::recv_ring`).
    pub(crate) fn took_over_from(&self) -> Option<u32> {
        self.dead_holder
    }
}

impl Drop for ShmGuard<'_> {
    fn drop(&mut self) {
        self.lock.word.store(0, Ordering::Release);
    }
}

impl ShmLock {
    /// The lock word (the fuzz harness).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn word(&self) -> u32 {
        self.word.load(Ordering::Relaxed)
    }

    /// Writes the lock word as another process could (the fuzz harness; a test's holder
    /// that died inside its critical section).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn set_word(&self, v: u32) {
        self.word.store(v, Ordering::Relaxed);
    }

    /// Takes the lock for endpoint `me`; `holders` tells whether the endpoint a word
    /// names still exists, and whether its process is stopped.
    ///
    /// A word that names no endpoint is taken over at once, and one that keeps naming
    /// the same holder for [`STUCK`] as well, alive or not, unless that holder's process
    /// is stopped: critical sections are a few stores long, so such a word was written by
    /// another process of the user (a scribbled segment naming a live endpoint, or this
    /// one), and waiting for it would hang every verb on the ring. A stopped holder (by
    /// SIGSTOP or a debugger, in the middle of its critical section) is waited for until
    /// it runs again, and given [`STUCK`] from then: it goes on with its stores when it
    /// resumes, and a second holder would interleave with them.
    #[inline]
    pub(crate) fn lock(&self, me: u32, holders: &impl Holders) -> ShmGuard<'_> {
        self.lock_with(me, holders, STUCK, || {})
    }

    /// As [`ShmLock::lock`], for a lock whose live holder may legitimately keep it up to
    /// `stuck` (the host-wide lock of device atomics, held across a proxied read and
    /// write), running `waiting` between looks (a progress thread serves the requests
    /// the holder may be waiting for: `mr::proxy`).
    #[inline]
    pub(crate) fn lock_with(
        &self,
        me: u32,
        holders: &impl Holders,
        stuck: std::time::Duration,
        waiting: impl FnMut(),
    ) -> ShmGuard<'_> {
        // A free lock, the usual case, inline: the guard is made in the caller's
        // registers. Returned from the out-of-line wait, it is copied 16 bytes at a time
        // over fields written apart, a load the CPU cannot forward from its store buffer
        // (`rings::wc::CqeWords`).
        if self.word.compare_exchange(0, me + 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return ShmGuard { lock: self, dead_holder: None };
        }
        self.wait_for(me, holders, stuck, waiting)
    }

    /// [`ShmLock::lock_with`] of a lock found held: looks until it is free, taking it
    /// over from a holder that died or is stuck.
    #[inline(never)]
    fn wait_for(
        &self,
        me: u32,
        holders: &impl Holders,
        stuck: std::time::Duration,
        mut waiting: impl FnMut(),
    ) -> ShmGuard<'_> {
        let tag = me + 1;
        let mut spins = 0u32;
        // The word seen non-zero at every look since when, and when the holder was last
        // asked about (checked every 64 spins, at most every millisecond: a waiter that
        // yields to busy threads can take a millisecond per spin).
        let mut seen: Option<(u32, std::time::Instant)> = None;
        let mut asked: Option<std::time::Instant> = None;
        // Since when the holder of `seen` has been found stopped, asked again at most
        // every millisecond until it runs.
        let mut stopped: Option<std::time::Instant> = None;
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            if cur == 0 {
                if self.word.compare_exchange_weak(0, tag, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    return ShmGuard { lock: self, dead_holder: None };
                }
                // Free for a moment: whoever holds it now is a new holder.
                seen = None;
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if spins.is_multiple_of(64) {
                let now = std::time::Instant::now();
                let mut held_long = match seen {
                    Some((h, at)) if h == cur => now.duration_since(at) >= stuck,
                    _ => {
                        seen = Some((cur, now));
                        stopped = None;
                        false
                    }
                };
                let holder = cur - 1;
                // No endpoint has that number: another process wrote the word.
                let garbage = holder >= crate::limits::MAX_ENDPOINTS;
                // A holder kept past `stuck` is asked whether it is stopped; once it is,
                // it is watched until it runs, and gets `stuck` from then.
                let ask = match stopped {
                    Some(t) => now.duration_since(t) >= std::time::Duration::from_millis(1),
                    None => held_long,
                };
                if ask {
                    let was = stopped.is_some();
                    stopped = (!garbage && holders.stopped(holder)).then_some(now);
                    if stopped.is_some() || was {
                        seen = Some((cur, now));
                        held_long = false;
                    }
                }
                if stopped.is_some() {
                    held_long = false;
                }
                let dead = !garbage
                    && holder != me
                    && asked.is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_millis(1))
                    && {
                        asked = Some(now);
                        !holders.alive(holder)
                    };
                // The holder died inside its critical section, or the word is garbage
                // that nobody will release: take over.
                if (garbage || dead || held_long)
                    && self.word.compare_exchange(cur, tag, Ordering::Acquire, Ordering::Relaxed).is_ok()
                {
                    if dead {
                        tracing::warn!(holder, "took over a lock of a dead endpoint");
                    } else {
                        tracing::warn!(word = cur, "took over a shared lock whose word another process overwrote");
                    }
                    return ShmGuard { lock: self, dead_holder: dead.then_some(holder) };
                }
                waiting();
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    // The host-wide atomics lock: its holder may wait for the waiter's own progress
    // thread (a proxied read); the waiter serves meanwhile, and a live holder is not
    // taken over before `stuck`.
    #[test]
    fn a_waiter_serves_while_it_waits_and_a_live_holder_keeps_the_lock_until_it_releases() {
        let l = Arc::new(ShmLock::default());
        let held = l.lock(1, &|_| true);
        let served = Arc::new(AtomicU32::new(0));
        let (l2, s2) = (l.clone(), served.clone());
        let waiter = std::thread::spawn(move || {
            let _g = l2.lock_with(2, &|_| true, std::time::Duration::from_secs(3600), || {
                s2.fetch_add(1, Ordering::Relaxed);
            });
            s2.load(Ordering::Relaxed)
        });
        // The holder waits for the waiter to serve (as for a proxied copy), then releases.
        while served.load(Ordering::Relaxed) < 3 {
            std::thread::yield_now();
        }
        assert_eq!(l.word.load(Ordering::Relaxed), 2, "still the live holder's");
        drop(held);
        assert!(waiter.join().unwrap() >= 3);
    }

    #[test]
    fn excludes_threads() {
        let l = Arc::new(ShmLock::default());
        let counter = Arc::new(AtomicU32::new(0));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (l, c) = (l.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let _g = l.lock(0, &|_| true);
                        // A non-atomic read-modify-write made exclusive by the lock.
                        let v = c.load(Ordering::Relaxed);
                        c.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(counter.load(Ordering::Relaxed), 20_000);
    }

    // Hostile-segment harness (tests/chaos/hostile_seg.sh), rq_lock: another process set
    // a receive ring's lock word to the endpoint number of a live process (here, the
    // locker's own); every later lock spun for ever (destroy_qp hung draining the ring).
    #[test]
    fn a_lock_word_naming_a_live_holder_for_ever_is_taken_over() {
        let l = Arc::new(ShmLock::default());
        l.word.store(6, Ordering::Relaxed); // "held" by endpoint 5, which is alive
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = l.clone();
        std::thread::spawn(move || {
            let g = l2.lock(5, &|_| true);
            drop(g);
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the lock was taken over, not waited for");
        assert_eq!(l.word.load(Ordering::Relaxed), 0);
        // A lock that changes hands is never taken over: threads still exclude each other
        // (excludes_threads), and a holder that releases in time keeps it.
        let g = l.lock(1, &|_| true);
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(g);
    }

    // A holder stopped by SIGSTOP or a debugger inside its critical section, past
    // `stuck`, was taken over like a scribbled word: when it ran again, two holders
    // interleaved their stores. It is waited for while stopped, and given `stuck` again
    // once it runs.
    #[test]
    fn a_stopped_holder_is_waited_for_and_taken_over_only_once_it_runs_past_stuck() {
        use std::sync::atomic::AtomicBool;
        struct Stopped {
            stopped: AtomicBool,
            asked: AtomicU32,
        }
        impl Holders for Stopped {
            fn alive(&self, _: u32) -> bool {
                true
            }
            fn stopped(&self, ep: u32) -> bool {
                assert_eq!(ep, 5, "asked about the holder");
                self.asked.fetch_add(1, Ordering::Relaxed);
                self.stopped.load(Ordering::Relaxed)
            }
        }
        let l = Arc::new(ShmLock::default());
        l.word.store(6, Ordering::Relaxed); // held by endpoint 5, alive and stopped
        let h = Arc::new(Stopped { stopped: AtomicBool::new(true), asked: AtomicU32::new(0) });
        let (l2, h2) = (l.clone(), h.clone());
        let stuck = std::time::Duration::from_millis(5);
        let waiter = std::thread::spawn(move || {
            let g = l2.lock_with(1, &*h2, stuck, || {});
            let at = std::time::Instant::now();
            drop(g);
            at
        });
        // Each question comes after the word named the holder for `stuck`.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while h.asked.load(Ordering::Relaxed) < 20 && !waiter.is_finished() && std::time::Instant::now() < end {
            std::thread::yield_now();
        }
        assert!(!waiter.is_finished(), "the lock was taken over from the stopped holder");
        assert_eq!(l.word.load(Ordering::Relaxed), 6, "still the stopped holder's");
        let resumed = std::time::Instant::now();
        h.stopped.store(false, Ordering::Relaxed);
        let taken = waiter.join().unwrap();
        assert!(taken.duration_since(resumed) >= stuck, "the resumed holder was given `stuck`");
    }

    #[test]
    fn a_lock_word_naming_no_endpoint_is_taken_over_at_once() {
        let l = ShmLock::default();
        l.word.store(u32::MAX, Ordering::Relaxed);
        let t = std::time::Instant::now();
        let asked = std::cell::Cell::new(false);
        let _g = l.lock(1, &|_| {
            asked.set(true);
            true
        });
        assert!(t.elapsed() < STUCK, "not waited for");
        assert!(!asked.get(), "no endpoint 0xfffffffe to ask about");
    }

    #[test]
    fn a_dead_holder_is_taken_over() {
        let l = ShmLock::default();
        std::mem::forget(l.lock(5, &|_| true)); // endpoint 5 "dies" holding it
        let _g = l.lock(1, &|ep| ep != 5);
        assert_eq!(l.word.load(Ordering::Relaxed), 2);
    }
}
