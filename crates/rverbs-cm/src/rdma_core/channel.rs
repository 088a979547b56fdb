//! Event channels of librdmacm (rdma_create_event_channel(3)): an fd that is readable
//! while an event waits, and rdma_get_cm_event(3) on it.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use rverbs_abi::rdma_cm::rdma_event_channel;

use super::library::{last_errno, rdmacm, Rdmacm};
use crate::error::Result;

/// The `struct rdma_event_channel`, destroyed when the last channel handle and the last
/// id on it are gone (rdma_destroy_event_channel(3): no id may be left on it).
pub(super) struct ChannelInner {
    pub(super) ch: *mut rdma_event_channel,
    pub(super) lib: Arc<Rdmacm>,
}

// SAFETY: `ch` is owned by this value; librdmacm's calls are thread-safe (it locks its
// own lists), and only `Drop` destroys the channel.
unsafe impl Send for ChannelInner {}
// SAFETY: as for Send.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: `ch` came from rdma_create_event_channel; every id on it holds an Arc
        // of this value, so none is left; destroyed once, here.
        unsafe { (self.lib.sym.rdma_destroy_event_channel)(self.ch) }
    }
}

/// An event channel of librdmacm (rdma_create_event_channel(3)), the backend's
/// [`crate::EventChannel`]: clones share it. Its fd is non-blocking (the rdma_cm(7)
/// way to poll it): [`EventChannel::get_event`] waits for it to be readable.
#[derive(Clone)]
pub struct EventChannel {
    pub(super) inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").field("fd", &self.fd()).finish()
    }
}

impl EventChannel {
    /// Creates a channel (rdma_create_event_channel(3)), loading librdmacm at the first
    /// call (docs/rdma-core-backend.md, "rverbs-cm over librdmacm").
    pub fn new() -> Result<EventChannel> {
        let lib = rdmacm()?;
        // SAFETY: no arguments; NULL is the error.
        let ch = unsafe { (lib.sym.rdma_create_event_channel)() };
        if ch.is_null() {
            return Err(last_errno());
        }
        let c = EventChannel { inner: Arc::new(ChannelInner { ch, lib }) };
        let fd = c.fd();
        let flags = rustix::fs::fcntl_getfl(fd)?;
        rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
        Ok(c)
    }

    /// The channel's fd (`rdma_event_channel.fd`): readable while an event waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel is live while `self` is, and librdmacm keeps its fd open
        // until rdma_destroy_event_channel, which only the last drop calls.
        unsafe { BorrowedFd::borrow_raw((*self.inner.ch).fd) }
    }

    /// Whether `self` and `other` are the same channel.
    pub fn same_as(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The channel's fd ([`EventChannel::fd`]).
impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
