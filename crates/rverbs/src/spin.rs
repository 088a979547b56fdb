//! A mutual-exclusion lock for the data path: the send queue and the CQ consumer.
//!
//! Held for the length of one post or one poll, the way rdma-core's providers hold a
//! spin lock around their queues. Compared with `std::sync::Mutex` it never enters the
//! kernel, and its operations are sequentially consistent, which the send queue's kick
//! protocol relies on (`QpInner::kick`). A waiter spins briefly, then yields.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// The lock.
pub(crate) struct SpinMutex<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `T` to one thread at a time, like a Mutex.
unsafe impl<T: Send> Send for SpinMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SpinMutex<T> {}

/// Access to the value until dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinMutex<T>,
}

impl<T> SpinMutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        SpinMutex { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Takes the lock if it is free (sequentially consistent).
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // `then`, not `then_some`: a guard made eagerly and dropped on failure would
        // release the lock another thread holds.
        self.locked
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
            .then(|| SpinGuard { lock: self })
    }

    /// Takes the lock, waiting for it.
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl SpinMutex<()> {
    /// Takes the lock and keeps it after this call returns, for a critical section that
    /// spans calls (ibv_start_poll … ibv_end_poll); [`SpinMutex::unlock`] ends it.
    pub(crate) fn lock_held(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken by [`SpinMutex::lock_held`]. A lock over `()` guards no data,
    /// so a release by the wrong caller breaks only the exclusion the caller relies on,
    /// never memory safety.
    pub(crate) fn unlock(&self) {
        // Sequentially consistent, as the guard's release.
        self.locked.swap(false, Ordering::SeqCst);
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread holds the lock: no other reference to the
        // value exists until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Sequentially consistent: a kicker that stored its flag and then failed to take
        // the lock is ordered before this release, so the holder's check after it sees
        // the flag. (On x86-64 this is one exchange, as a Mutex release is.)
        self.lock.locked.swap(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_threads() {
        let m = Arc::new(SpinMutex::new(0u64));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..if cfg!(miri) { 100 } else { 50_000 } {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*m.lock(), if cfg!(miri) { 200 } else { 100_000 });
    }

    #[test]
    fn try_lock_fails_while_held_and_leaves_the_lock_held() {
        let m = SpinMutex::new(1);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        assert!(m.try_lock().is_none(), "a failed try_lock must not release the holder's lock");
        drop(g);
        assert!(m.try_lock().is_some());
    }
}
