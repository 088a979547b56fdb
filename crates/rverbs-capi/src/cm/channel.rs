//! Event channels and event retrieval: stubs (`ENOSYS`) until the connection-manager
//! engine lands. One `cm_export!` per function; replace them one by one.
//!
//! Contract to keep (rdma-core 44, rpma-rdmacm.md §2.3/§3.7): `fd` pollable and
//! `FD_CLOEXEC`; `rdma_get_cm_event` blocks unless the fd is `O_NONBLOCK` (then -1 with
//! `EAGAIN`); an event's private data lives until `rdma_ack_cm_event`.

#![allow(unused_variables)]

use core::ffi::c_int;

use super::abi::{rdma_cm_event, rdma_event_channel};
use super::{enosys, enosys_null, enosys_void};

cm_export! {
    /// Opens an event channel (rdma_create_event_channel(3)). Errors: NULL with `errno`.
    #[cm(null)]
    pub unsafe fn rdma_create_event_channel() -> *mut rdma_event_channel {
        enosys_null()
    }
}

cm_export! {
    /// Closes an event channel (rdma_destroy_event_channel(3)); all its ids must be
    /// destroyed first.
    #[cm(void)]
    pub unsafe fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
        enosys_void()
    }
}

cm_export! {
    /// Retrieves the next event of a channel (rdma_get_cm_event(3)). Returns 0 or -1
    /// with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_get_cm_event(
        channel: *mut rdma_event_channel,
        event: *mut *mut rdma_cm_event,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Frees an event (rdma_ack_cm_event(3)). Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        enosys()
    }
}
