//! The public event channel (rdma_create_event_channel(3)): the soft connection
//! manager's or librdmacm's.

use std::os::fd::{AsFd, BorrowedFd};

use crate::error::Result;

/// An event channel (`struct rdma_event_channel`): where the events of its ids queue.
/// Cloning shares the channel.
///
/// Rule (rdma_create_event_channel(3), rdma_get_cm_event(3)): the fd is readable exactly
/// while an event is queued; `get_event` blocks while none is, unless the fd is
/// non-blocking (then `EAGAIN`).
///
/// Deviation: over librdmacm the fd is made non-blocking at creation (the rdma_cm(7) way
/// to poll it) and [`EventChannel::get_event`] waits for it to be readable.
#[derive(Clone, Debug)]
pub struct EventChannel {
    pub(crate) repr: Repr,
}

#[derive(Clone, Debug)]
pub(crate) enum Repr {
    Soft(crate::channel::EventChannel),
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::EventChannel),
}

impl PartialEq for EventChannel {
    fn eq(&self, other: &Self) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Soft(a), Repr::Soft(b)) => a == b,
            #[cfg(feature = "rdma-core")]
            (Repr::Native(a), Repr::Native(b)) => a.same_as(b),
            #[cfg(feature = "rdma-core")]
            _ => false,
        }
    }
}

/// The channel's descriptor ([`EventChannel::fd`]): readable while an event is queued,
/// for epoll or an async reactor.
impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl EventChannel {
    /// Creates a channel (rdma_create_event_channel(3)) on the connection manager of the
    /// listed devices: the soft one, or (feature `rdma-core`, `RVERBS_BACKEND=rdma-core`,
    /// `rverbs::listed_backend`) librdmacm's, loaded at the first call. Its fd is
    /// close-on-exec.
    ///
    /// Errors: `EOPNOTSUPP` when `RVERBS_BACKEND` names no backend, or librdmacm cannot
    /// be loaded; those of rdma_create_event_channel(3).
    pub fn new() -> Result<EventChannel> {
        #[cfg(feature = "rdma-core")]
        if rverbs::listed_backend()? == rverbs::Backend::RdmaCore {
            return Ok(EventChannel { repr: Repr::Native(crate::rdma_core::EventChannel::new()?) });
        }
        Ok(EventChannel { repr: Repr::Soft(crate::channel::EventChannel::new()?) })
    }

    /// Creates a channel whose ids work on `device`: a soft device of its own
    /// configuration (its addresses, its QP1, its runtime directory's listener table;
    /// docs/connection-manager.md, "Several devices"), or a device of `rverbs`' rdma-core
    /// backend, whose ids run over librdmacm (which picks each id's device by its
    /// address, rdma_bind_addr(3)). An id keeps its device for its life.
    pub fn on(device: &rverbs::Device) -> Result<EventChannel> {
        #[cfg(feature = "rdma-core")]
        if device.backend() == rverbs::Backend::RdmaCore {
            return Ok(EventChannel { repr: Repr::Native(crate::rdma_core::EventChannel::new()?) });
        }
        Ok(EventChannel { repr: Repr::Soft(crate::channel::EventChannel::on(device)?) })
    }

    /// The soft device the channel's ids use (`None`: the listed soft device, or a
    /// channel over librdmacm, whose ids take the device of their address).
    pub fn device(&self) -> Option<rverbs::Device> {
        match &self.repr {
            Repr::Soft(ch) => ch.device(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => None,
        }
    }

    /// Which connection manager the channel's ids use: [`rverbs::Backend::Soft`], or
    /// [`rverbs::Backend::RdmaCore`] for librdmacm.
    pub fn backend(&self) -> rverbs::Backend {
        match &self.repr {
            Repr::Soft(_) => rverbs::Backend::Soft,
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => rverbs::Backend::RdmaCore,
        }
    }

    /// The channel's descriptor (`rdma_event_channel.fd`): readable while an event is
    /// queued.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match &self.repr {
            Repr::Soft(ch) => ch.fd(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(ch) => ch.fd(),
        }
    }
}

impl From<crate::channel::EventChannel> for EventChannel {
    fn from(ch: crate::channel::EventChannel) -> EventChannel {
        EventChannel { repr: Repr::Soft(ch) }
    }
}

#[cfg(feature = "rdma-core")]
impl From<crate::rdma_core::EventChannel> for EventChannel {
    fn from(ch: crate::rdma_core::EventChannel) -> EventChannel {
        EventChannel { repr: Repr::Native(ch) }
    }
}
