//! The life of a backend object that any of its handles may destroy (`destroy(&self)`,
//! as the soft types): calls through a handle are counted in flight, a destruction waits
//! until none is and admits no new one meanwhile, so no call ever reaches a `struct
//! ibv_*` that is being or has been destroyed; and the live children that name the object
//! (a QP its PD and CQs, a region or an address handle its PD, a CQ its channel) are
//! counted, so that destroying an object still in use is refused with `EBUSY` before the
//! provider is asked (ibv_destroy_cq(3), ibv_dealloc_pd(3), ibv_destroy_comp_channel(3)).
//!
//! The calls in flight, the destruction under way and the destroyed mark are one atomic
//! word: a call costs one increment on entry and one decrement on exit. Only a call that
//! meets a destruction under way, and the destruction itself while calls are in flight,
//! wait, on a condition variable (a call may block for long: `get_cq_event`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::{Error, Result};

/// `state` bit: the object is destroyed (set once, never cleared).
const DESTROYED: u32 = 1 << 31;
/// `state` bit: a destruction is under way (it waits for the calls in flight, then asks
/// the provider); new calls wait for its outcome.
const CLOSING: u32 = 1 << 30;
/// `state` bits: the calls in flight.
const CALLS: u32 = CLOSING - 1;

/// Whether an object is destroyed, the calls in flight on it, and how many live children
/// use it.
pub(super) struct Life {
    /// [`DESTROYED`] | [`CLOSING`] | calls in flight.
    state: AtomicU32,
    /// Live (not destroyed) children that name the object.
    users: AtomicU32,
    /// Where a destruction waits for the calls in flight, and calls for a destruction
    /// under way (slow paths only).
    lock: Mutex<()>,
    changed: Condvar,
    /// What the object is, for the errors (`"queue pair"`).
    what: &'static str,
}

/// A call in progress on a live object: the object is not destroyed until it is dropped.
#[must_use]
pub(super) struct Entered<'a> {
    life: &'a Life,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let was = self.life.state.fetch_sub(1, Ordering::Release);
        if was & CLOSING != 0 && was & CALLS == 1 {
            // The last call a destruction waits for.
            self.life.wake();
        }
    }
}

impl Life {
    pub(super) fn new(what: &'static str) -> Life {
        Life { state: AtomicU32::new(0), users: AtomicU32::new(0), lock: Mutex::new(()), changed: Condvar::new(), what }
    }

    /// Enters a call on the object: `EINVAL` (`Error::Destroyed`) once it is destroyed.
    /// A call that meets a destruction under way waits for its outcome.
    pub(super) fn enter(&self) -> Result<Entered<'_>> {
        loop {
            let was = self.state.fetch_add(1, Ordering::Acquire);
            if was & (DESTROYED | CLOSING) == 0 {
                return Ok(Entered { life: self });
            }
            // Not admitted: undo, as if the call never came.
            let now = self.state.fetch_sub(1, Ordering::Release) - 1;
            if now & CLOSING != 0 && now & CALLS == 0 {
                // The destruction may be waiting for the count this call raised.
                self.wake();
            }
            if was & DESTROYED != 0 {
                return Err(Error::Destroyed { what: self.what });
            }
            self.wait_while(|s| s & CLOSING != 0);
        }
    }

    /// Whether the object was destroyed (by [`Life::destroy`]).
    pub(super) fn is_destroyed(&self) -> bool {
        self.state.load(Ordering::Acquire) & DESTROYED != 0
    }

    /// A child that names the object was made (called while the object is entered, so
    /// that no destruction runs between the check and the count).
    pub(super) fn attach(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// How many live children name the object (`Cq::channel_users`, for `aio`).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(super) fn users(&self) -> u32 {
        self.users.load(Ordering::Acquire)
    }

    /// A child that named the object was destroyed.
    pub(super) fn detach(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Destroys the object with `verb` once no call is in progress: `EINVAL`
    /// (`Error::Destroyed`) if it already is, `EBUSY` while a child uses it, else
    /// `verb`'s result. An error leaves the object as it was, usable.
    pub(super) fn destroy(&self, verb: impl FnOnce() -> Result<()>) -> Result<()> {
        // Claim the destruction: one at a time; none once destroyed.
        loop {
            let s = self.state.load(Ordering::Acquire);
            if s & DESTROYED != 0 {
                return Err(Error::Destroyed { what: self.what });
            }
            if s & CLOSING != 0 {
                self.wait_while(|s| s & CLOSING != 0);
                continue;
            }
            if self.state.compare_exchange(s, s | CLOSING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                break;
            }
        }
        // The calls in flight finish; new ones wait (`enter`).
        self.wait_while(|s| s & CALLS != 0);
        let r = if self.users.load(Ordering::Acquire) > 0 { Err(Error::Busy { what: self.what }) } else { verb() };
        if r.is_ok() {
            self.state.fetch_or(DESTROYED, Ordering::AcqRel);
        }
        self.state.fetch_and(!CLOSING, Ordering::AcqRel);
        self.wake();
        r
    }

    /// Blocks while `cond` holds of the state word (re-checked under the lock, which
    /// every [`Life::wake`] takes, so no wake-up is lost).
    fn wait_while(&self, cond: impl Fn(u32) -> bool) {
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while cond(self.state.load(Ordering::Acquire)) {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Wakes the waiters of [`Life::wait_while`] after a change of the state word.
    fn wake(&self) {
        drop(self.lock.lock().unwrap_or_else(|p| p.into_inner()));
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    /// Waits (yielding) until a destruction has claimed `life`.
    fn until_closing(life: &Life) {
        while life.state.load(Ordering::SeqCst) & CLOSING == 0 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_destruction_waits_for_the_call_in_flight_then_calls_are_einval() {
        let life = Arc::new(Life::new("object"));
        let call = life.enter().expect("a live object");
        let (tx, rx) = mpsc::channel();
        let l = life.clone();
        let destroyer = std::thread::spawn(move || tx.send(l.destroy(|| Ok(()))).unwrap());
        until_closing(&life);
        assert!(rx.try_recv().is_err(), "the call in flight holds the destruction");
        assert!(!life.is_destroyed());
        drop(call);
        assert!(rx.recv().unwrap().is_ok());
        destroyer.join().unwrap();
        assert!(life.is_destroyed());
        assert_eq!(life.enter().err().map(|e| e.errno()), Some(libc::EINVAL));
        assert_eq!(life.destroy(|| Ok(())).err().map(|e| e.errno()), Some(libc::EINVAL));
    }

    #[test]
    fn a_call_that_meets_a_failing_destruction_goes_on_once_it_failed() {
        let life = Arc::new(Life::new("object"));
        let (go, gate) = mpsc::channel::<()>();
        let l = life.clone();
        let destroyer = std::thread::spawn(move || {
            l.destroy(|| {
                gate.recv().unwrap();
                Err(Error::Busy { what: "the provider" })
            })
        });
        until_closing(&life);
        let (tx, rx) = mpsc::channel();
        let l = life.clone();
        let caller = std::thread::spawn(move || tx.send(l.enter().map(drop)).unwrap());
        assert!(rx.try_recv().is_err(), "no call is admitted while the destruction runs");
        go.send(()).unwrap();
        assert_eq!(destroyer.join().unwrap().err().map(|e| e.errno()), Some(libc::EBUSY));
        assert!(rx.recv().unwrap().is_ok(), "the object is left usable");
        caller.join().unwrap();
        assert!(!life.is_destroyed());
        assert_eq!(life.state.load(Ordering::SeqCst), 0, "no call, no destruction left counted");
    }

    #[test]
    fn a_used_object_is_ebusy_until_its_last_child_goes() {
        let life = Life::new("object");
        life.attach();
        assert_eq!(life.destroy(|| panic!("the provider is not asked")).err().map(|e| e.errno()), Some(libc::EBUSY));
        assert!(life.enter().is_ok(), "still usable");
        life.detach();
        assert!(life.destroy(|| Ok(())).is_ok());
    }
}
