//! A mutual-exclusion lock for the data path: the send queue and the CQ consumer.
//!
//! Held for the length of one post or one poll, the way rdma-core's providers hold a
//! spin lock around their queues. Compared with `std::sync::Mutex` it never enters the
//! kernel. A waiter spins briefly, then yields.
//!
//! Orderings: taking the lock is a sequentially consistent compare-exchange. Releasing
//! it is sequentially consistent by default (`SpinMutex<T>`, the send queue), which the
//! send queue's kick protocol relies on (`QpInner::kick`: a kicker's flag store, then its
//! failed try-lock, are ordered before the holder's release and so before the holder's
//! load of the flag after it); on x86-64 that release is a locked exchange. A lock no
//! such protocol looks past (`SpinMutex<T, false>`, the CQ consumer) is released with a
//! Release store, a plain store on x86-64: what the next holder needs is that the
//! critical section happens before its own, which Release and the Acquire of its
//! compare-exchange give.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// The lock; `SEQ_CST` says whether its release is sequentially consistent (module doc).
pub(crate) struct SpinMutex<T, const SEQ_CST: bool = true> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `T` to one thread at a time, like a Mutex.
unsafe impl<T: Send, const S: bool> Send for SpinMutex<T, S> {}
// SAFETY: as above.
unsafe impl<T: Send, const S: bool> Sync for SpinMutex<T, S> {}

/// Access to the value until dropped.
pub(crate) struct SpinGuard<'a, T, const SEQ_CST: bool = true> {
    lock: &'a SpinMutex<T, SEQ_CST>,
}

impl<T, const S: bool> SpinMutex<T, S> {
    pub(crate) const fn new(value: T) -> Self {
        SpinMutex { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Takes the lock if it is free (sequentially consistent).
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T, S>> {
        // `then`, not `then_some`: a guard made eagerly and dropped on failure would
        // release the lock another thread holds.
        self.locked
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
            .then(|| SpinGuard { lock: self })
    }

    /// Takes the lock, waiting for it. The free lock's take is inline; the wait is not.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T, S> {
        match self.try_lock() {
            Some(g) => g,
            None => self.lock_contended(),
        }
    }

    /// [`SpinMutex::lock`] once its first try failed.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) -> SpinGuard<'_, T, S> {
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

impl<const S: bool> SpinMutex<(), S> {
    /// Takes the lock and keeps it after this call returns, for a critical section that
    /// spans calls (ibv_start_poll … ibv_end_poll); [`SpinMutex::unlock`] ends it.
    pub(crate) fn lock_held(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken by [`SpinMutex::lock_held`]. A lock over `()` guards no data,
    /// so a release by the wrong caller breaks only the exclusion the caller relies on,
    /// never memory safety.
    pub(crate) fn unlock(&self) {
        // As the guard's release.
        self.release();
    }
}

impl<T, const S: bool> SpinMutex<T, S> {
    /// Frees the lock with the ordering of its kind (module doc).
    #[inline(always)]
    fn release(&self) {
        if S {
            self.locked.swap(false, Ordering::SeqCst);
        } else {
            self.locked.store(false, Ordering::Release);
        }
    }
}

impl<T, const S: bool> Deref for SpinGuard<'_, T, S> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread holds the lock: no other reference to the
        // value exists until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T, const S: bool> DerefMut for SpinGuard<'_, T, S> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T, const S: bool> Drop for SpinGuard<'_, T, S> {
    fn drop(&mut self) {
        // Sequentially consistent for a lock with a kick protocol: a kicker that stored
        // its flag and then failed to take the lock is ordered before this release, so
        // the holder's check after it sees the flag (on x86-64 one exchange, as a Mutex
        // release is); Release otherwise (module doc).
        self.lock.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Two threads adding under lock `m` lose no increment.
    fn counts_every_increment<const S: bool>(m: SpinMutex<u64, S>) {
        let m = Arc::new(m);
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
    fn excludes_threads() {
        counts_every_increment(SpinMutex::<u64, true>::new(0));
    }

    #[test]
    fn excludes_threads_with_a_release_store_unlock() {
        counts_every_increment(SpinMutex::<u64, false>::new(0));
    }

    #[test]
    fn unlock_of_a_held_lock_frees_it_for_both_kinds() {
        let a = SpinMutex::<(), true>::new(());
        let b = SpinMutex::<(), false>::new(());
        a.lock_held();
        b.lock_held();
        assert!(a.try_lock().is_none() && b.try_lock().is_none());
        a.unlock();
        b.unlock();
        assert!(a.try_lock().is_some() && b.try_lock().is_some());
    }

    #[test]
    fn try_lock_fails_while_held_and_leaves_the_lock_held() {
        let m: SpinMutex<i32> = SpinMutex::new(1);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        assert!(m.try_lock().is_none(), "a failed try_lock must not release the holder's lock");
        drop(g);
        assert!(m.try_lock().is_some());
    }
}
