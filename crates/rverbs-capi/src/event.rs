//! Asynchronous events.
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.

use core::ffi::c_int;

use crate::abi::*;
use crate::ffi::{not_supported_minus_one, not_supported_void};

export! {
    /// Waits for the next async event of a context (`ibv_get_async_event(3)`).
    /// Returns 0, or -1 with `errno` (`EAGAIN` on an `O_NONBLOCK` `async_fd`).
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_get_async_event(
        _context: *mut ibv_context,
        _event: *mut ibv_async_event,
    ) -> c_int {
        // TODO(core): read one ib_uverbs_async_event_desc from async_fd into *event.
        not_supported_minus_one()
    }
}

export! {
    /// Acknowledges an async event (`ibv_ack_async_event(3)`).
    ///
    /// Rule: device.c: CQ events bump `cq->async_events_completed`; QP events
    /// (`QP_FATAL`…`PATH_MIG_ERR`, `QP_LAST_WQE_REACHED`) `qp->events_completed`; SRQ
    /// events `srq->events_completed`; `WQ_FATAL` `wq->events_completed` — each under the
    /// object's mutex followed by `pthread_cond_signal`; port/device events nothing.
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_ack_async_event(_event: *mut ibv_async_event) {
        // TODO(core): bump the element's counter under its mutex, signal its cond.
        not_supported_void()
    }
}
