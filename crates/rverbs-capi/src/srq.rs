//! Shared receive queues (out-of-line verbs; `ibv_post_srq_recv` is inline and goes
//! through `ibv_context.ops.post_srq_recv`).
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.

use core::ffi::c_int;

use crate::abi::*;
use crate::ffi::{not_supported_errno, not_supported_null};

export! {
    /// Creates a shared receive queue (`ibv_create_srq(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: the inline `ibv_create_srq_ex` forwards basic SRQs here (reference §7 item 9);
    /// the library sets context, srq_context, pd, mutex/cond, events_completed.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_srq(
        _pd: *mut ibv_pd,
        _srq_init_attr: *mut ibv_srq_init_attr,
    ) -> *mut ibv_srq {
        // TODO(core): create a core SRQ as `{ ibv_srq, private }`, write back the actual attr.
        not_supported_null()
    }
}

export! {
    /// Modifies an SRQ (`ibv_modify_srq(3)`: `IBV_SRQ_MAX_WR`, `IBV_SRQ_LIMIT`).
    /// Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_modify_srq(
        _srq: *mut ibv_srq,
        _srq_attr: *mut ibv_srq_attr,
        _srq_attr_mask: c_int,
    ) -> c_int {
        // TODO(core): resize and/or arm the limit of the core SRQ.
        not_supported_errno()
    }
}

export! {
    /// Queries SRQ attributes (`ibv_query_srq(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_srq(_srq: *mut ibv_srq, _srq_attr: *mut ibv_srq_attr) -> c_int {
        // TODO(core): fill max_wr, max_sge, srq_limit from the core SRQ.
        not_supported_errno()
    }
}

export! {
    /// Destroys an SRQ (`ibv_destroy_srq(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_srq(_srq: *mut ibv_srq) -> c_int {
        // TODO(core): destroy the core SRQ (EBUSY if QPs use it) and free it.
        not_supported_errno()
    }
}
