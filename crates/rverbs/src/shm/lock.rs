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

/// Held until dropped.
pub(crate) struct ShmGuard<'a> {
    lock: &'a ShmLock,
}

impl Drop for ShmGuard<'_> {
    fn drop(&mut self) {
        self.lock.word.store(0, Ordering::Release);
    }
}

impl ShmLock {
    /// Takes the lock for endpoint `me`; `alive(ep)` tells whether endpoint `ep` still
    /// exists (asked only after spinning, so it may be slow).
    pub(crate) fn lock(&self, me: u32, alive: impl Fn(u32) -> bool) -> ShmGuard<'_> {
        let tag = me + 1;
        let mut spins = 0u32;
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            if cur == 0 {
                if self.word.compare_exchange_weak(0, tag, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    return ShmGuard { lock: self };
                }
                continue;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if spins.is_multiple_of(1024) && cur != tag && !alive(cur - 1) {
                // The holder died inside its critical section: take over.
                if self.word.compare_exchange(cur, tag, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    tracing::warn!(holder = cur - 1, "took over a lock of a dead endpoint");
                    return ShmGuard { lock: self };
                }
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_threads() {
        let l = Arc::new(ShmLock::default());
        let counter = Arc::new(AtomicU32::new(0));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (l, c) = (l.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let _g = l.lock(0, |_| true);
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

    #[test]
    fn a_dead_holder_is_taken_over() {
        let l = ShmLock::default();
        std::mem::forget(l.lock(5, |_| true)); // endpoint 5 "dies" holding it
        let _g = l.lock(1, |ep| ep != 5);
        assert_eq!(l.word.load(Ordering::Relaxed), 2);
    }
}
