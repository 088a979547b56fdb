//! Deferred completion notifications: while a requester executes a work request on a
//! responder (same-host transport), the completion event the responder's CQ raises is
//! held back until the requester's own completion is published.
//!
//! Why: on a NIC the responder's receive completion and the requester's send completion
//! are both generated before the responder's application can react, and the requester
//! sees its completion (after the ACK) long before any answer the responder sends. Here
//! the requester runs the responder inside `ibv_post_send`; without this, the responder's
//! application could be woken, reply, and have its reply's completion notified at the
//! requester before the requester's own send completion is written — an order no NIC
//! produces and applications rely on (librpma's 12scch example waits on one completion
//! channel shared by its send and receive CQs and expects its send completion first).
//! The CQEs themselves are published at once (a responder polling without waiting on a
//! channel still sees its receive as soon as the data is placed); only the channel
//! event waits for the end of the requester's step.

use std::cell::{Cell, RefCell};

thread_local! {
    /// Whether a requester step is holding notifications on this thread, and how many are
    /// held (so the common case, none, never touches the list): one cell, so a step looks
    /// up this thread's state once where it reads and writes both.
    static HOLD: Cell<(bool, usize)> = const { Cell::new((false, 0)) };
    static HELD: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `fire` now, or at the end of the current requester step if one is executing.
pub(crate) fn fire_or_hold(fire: impl FnOnce() + 'static) {
    let (holding, n) = HOLD.get();
    if holding {
        HELD.with(|h| h.borrow_mut().push(Box::new(fire)));
        HOLD.set((true, n + 1));
    } else {
        fire();
    }
}

/// One requester step: notifications raised until [`Step::requester_done`] are held,
/// and run when the step is dropped, in the order they were raised.
pub(crate) struct Step {
    active: bool,
}

impl Step {
    /// Starts holding notifications (a no-op step if one is already open on this thread).
    pub(crate) fn begin() -> Step {
        let (holding, n) = HOLD.get();
        HOLD.set((true, n));
        Step { active: !holding }
    }

    /// The responder's part is over: notifications raised from now on (the requester's
    /// own completion) run at once; the held ones run when the step is dropped.
    pub(crate) fn requester_done(&mut self) {
        if self.active {
            let (_, n) = HOLD.get();
            HOLD.set((false, n));
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let (_, n) = HOLD.replace((false, 0));
        if n == 0 {
            return;
        }
        let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
        for f in held {
            f();
        }
    }
}
