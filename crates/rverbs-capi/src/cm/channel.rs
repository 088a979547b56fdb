//! Event channels and event retrieval (rdma_create_event_channel(3),
//! rdma_get_cm_event(3), rdma_ack_cm_event(3)).
//!
//! Contract (rdma-core 44, docs/rpma-rdmacm.md §2.3/§3.7): `fd` is the core channel's
//! descriptor — pollable, `FD_CLOEXEC`, readable exactly while an event is queued;
//! `rdma_get_cm_event` blocks unless the fd is `O_NONBLOCK` (then -1 with `EAGAIN`); an
//! event's private data lives until `rdma_ack_cm_event`; destroying a channel while
//! another thread is blocked on it frees nothing that thread uses (the channel lives
//! while any call holds it).

use core::ffi::c_int;

use super::abi::{rdma_cm_event, rdma_event_channel};
use super::obj::{deliver, fail, Chan, Ev};
use crate::ffi::{getter_on_unknown_object, minus_one_errno, null_errno};

cm_export! {
    /// Opens an event channel (rdma_create_event_channel(3)). Errors: NULL with `errno`.
    #[cm(null)]
    pub unsafe fn rdma_create_event_channel() -> *mut rdma_event_channel {
        match Chan::new() {
            Ok(ch) => Chan::into_raw(ch),
            Err(e) => null_errno(e),
        }
    }
}

cm_export! {
    /// Closes an event channel (rdma_destroy_event_channel(3)); all its ids must be
    /// destroyed first. A thread still blocked in `rdma_get_cm_event` on it keeps the
    /// channel (and its fd) alive until it returns.
    #[cm(void)]
    pub unsafe fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
        // SAFETY: caller contract: a channel of ours, given up.
        unsafe { Chan::release(channel) };
    }
}

cm_export! {
    /// Retrieves the next event of a channel (rdma_get_cm_event(3)). Returns 0 or -1
    /// with `errno` (`EAGAIN`: non-blocking fd and nothing queued; `EINVAL`: NULL
    /// arguments).
    #[cm(minus_one)]
    pub unsafe fn rdma_get_cm_event(
        channel: *mut rdma_event_channel,
        event: *mut *mut rdma_cm_event,
    ) -> c_int {
        if event.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        // SAFETY: caller contract.
        let Some(ch) = (unsafe { Chan::from_raw(channel) }) else {
            return getter_on_unknown_object();
        };
        let ev = match ch.core().get_event() {
            Ok(ev) => ev,
            Err(e) => return fail(&e),
        };
        match deliver(ev, channel) {
            Ok(p) => {
                // SAFETY: checked non-NULL; caller contract.
                unsafe { event.write(p) };
                0
            }
            Err(e) => {
                tracing::debug!(errno = e, "a retrieved event could not be given to C");
                minus_one_errno(e)
            }
        }
    }
}

cm_export! {
    /// Frees an event (rdma_ack_cm_event(3)). Returns 0 or -1 with `errno` (`EINVAL`
    /// for NULL).
    #[cm(minus_one)]
    pub unsafe fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        if event.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        // SAFETY: caller contract: an event of ours, given up.
        if unsafe { Ev::free(event) } {
            0
        } else {
            minus_one_errno(libc::EINVAL)
        }
    }
}
