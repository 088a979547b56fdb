//! Completion channels and completion queues (the out-of-line verbs; polling and arming
//! are inline in applications and go through `ibv_context.ops`).
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.

use core::ffi::{c_int, c_uint, c_void};

use crate::abi::*;
use crate::ffi::{
    not_supported_errno, not_supported_minus_one, not_supported_null, not_supported_void,
};

export! {
    /// Creates a completion channel (`ibv_create_comp_channel(3)`).
    /// Errors: NULL with `errno`.
    ///
    /// Rule: reference §4.11: `fd` is a real pollable fd delivering one 8-byte
    /// `ib_uverbs_comp_event_desc` per notification; `refcnt` starts at 0.
    #[export("IBVERBS_1.0", null)]
    pub unsafe fn ibv_create_comp_channel(_context: *mut ibv_context) -> *mut ibv_comp_channel {
        // TODO(core): create the core's event fd; return `{ context, fd, refcnt: 0 }`.
        not_supported_null()
    }
}

export! {
    /// Destroys a completion channel (`ibv_destroy_comp_channel(3)`). Returns 0 or an
    /// errno: `EBUSY` while CQs are attached (`refcnt > 0`).
    #[export("IBVERBS_1.0", errno)]
    pub unsafe fn ibv_destroy_comp_channel(_channel: *mut ibv_comp_channel) -> c_int {
        // TODO(core): under context->mutex: EBUSY if refcnt > 0, else close the fd and free.
        not_supported_errno()
    }
}

export! {
    /// Creates a completion queue (`ibv_create_cq(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: reference §4.4: allocate as an `ibv_cq_ex` (so ex and plain APIs share it);
    /// `cqe` >= requested; counters 0; mutex/cond initialised; `++channel->refcnt`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_cq(
        _context: *mut ibv_context,
        _cqe: c_int,
        _cq_context: *mut c_void,
        _channel: *mut ibv_comp_channel,
        _comp_vector: c_int,
    ) -> *mut ibv_cq {
        // TODO(core): create a core CQ (>= cqe entries) as `{ ibv_cq_ex, private }`.
        not_supported_null()
    }
}

export! {
    /// Resizes a completion queue (`ibv_resize_cq(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
        // TODO(core): resize the core CQ ring and update cq->cqe.
        not_supported_errno()
    }
}

export! {
    /// Destroys a completion queue (`ibv_destroy_cq(3)`). Returns 0 or an errno.
    ///
    /// Rule: rdma-core waits until all delivered events are acked, then
    /// `--channel->refcnt` under the context mutex.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_cq(_cq: *mut ibv_cq) -> c_int {
        // TODO(core): destroy the core CQ (EBUSY if QPs use it), drop the channel refcnt, free.
        not_supported_errno()
    }
}

export! {
    /// Waits for the next completion event on a channel (`ibv_get_cq_event(3)`).
    /// Returns 0, or -1 with `errno` (`EAGAIN` on an `O_NONBLOCK` fd with nothing queued).
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_get_cq_event(
        _channel: *mut ibv_comp_channel,
        _cq: *mut *mut ibv_cq,
        _cq_context: *mut *mut c_void,
    ) -> c_int {
        // TODO(core): read one ib_uverbs_comp_event_desc from channel->fd; set *cq, *cq_context.
        not_supported_minus_one()
    }
}

export! {
    /// Acknowledges `nevents` completion events (`ibv_ack_cq_events(3)`).
    ///
    /// Rule: verbs.c: `comp_events_completed += nevents` under `cq->mutex`, then
    /// `pthread_cond_signal(&cq->cond)` (ibv_destroy_cq waits on it).
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_ack_cq_events(_cq: *mut ibv_cq, _nevents: c_uint) {
        // TODO(core): lock cq->mutex, add nevents to comp_events_completed, signal cq->cond.
        not_supported_void()
    }
}
