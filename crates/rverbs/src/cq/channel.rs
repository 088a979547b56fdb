//! Completion channels (ibv_create_comp_channel(3), ibv_get_cq_event(3)).
//!
//! Rule: the channel's fd is a real kernel fd, readable while an event is queued,
//! blocking unless the application sets O_NONBLOCK; each armed CQ queues at most one
//! event per arming; every event returned must be acknowledged, and destroying the CQ
//! waits for that. Destroying a channel fails with EBUSY while CQs use it.
//!
//! The channel is a FIFO (`ch-<id>` in the endpoint directory) carrying the ids of the
//! CQs whose notification fired, 8 bytes each; a completion published by a peer process
//! queues the event itself, so the application's fd becomes readable without this
//! process doing anything.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::cq::{Cq, CqInner};
use crate::mr::endpoint::Endpoint;
use crate::table::Table;
use crate::error::{Error, Result};
use crate::shm::fifo::Fifo;

/// Bytes of one channel record: the CQ id, native endianness, zero-extended.
pub(crate) const RECORD_LEN: usize = 8;

/// The name of channel `id`'s FIFO in its endpoint directory.
pub(crate) fn fifo_name(id: u32) -> String {
    format!("ch-{id}")
}

/// The record that queues an event for CQ `cq_id`.
pub(crate) fn record(cq_id: u32) -> [u8; RECORD_LEN] {
    u64::from(cq_id).to_ne_bytes()
}

pub(crate) struct ChannelInner {
    /// The CQs of the endpoint the channel was created in, by number.
    cqs: &'static Table<CqInner>,
    /// The context it belongs to, by id.
    ctx: u32,
    pub(crate) id: u32,
    /// The slot of its device (`sys::MAX_DEVICES`): the sanitizer keys it by both.
    slot: usize,
    fifo: Fifo,
    users: AtomicU32,
    destroyed: std::sync::atomic::AtomicBool,
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if crate::sanitizer::on() && !self.destroyed.load(Ordering::Acquire) {
            crate::sanitizer::gone(crate::sanitizer::Kind::CompChannel, self.sanitizer_id());
        }
    }
}

impl ChannelInner {
    /// The channel as the sanitizer keys it: its device and id.
    pub(crate) fn sanitizer_id(&self) -> crate::sanitizer::Id {
        crate::sanitizer::Id::new(self.slot, self.id)
    }

    /// Whether the channel belongs to context `ctx` of the endpoint whose CQs are `cqs`
    /// (a CQ may only use a channel of its own context).
    pub(crate) fn belongs_to(&self, cqs: &Table<CqInner>, ctx: u32) -> bool {
        std::ptr::eq(self.cqs, cqs) && self.ctx == ctx
    }

    pub(crate) fn attach(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// How many CQs report to the channel.
    pub(crate) fn users(&self) -> u32 {
        self.users.load(Ordering::Acquire)
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    pub(crate) fn detach(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Queues a completion event for CQ `cq_id` (its armed notification fired here).
    pub(crate) fn fire(&self, cq_id: u32) {
        self.fifo.send(&record(cq_id));
    }
}

/// A completion channel (`struct ibv_comp_channel`). Cloning shares it.
#[derive(Clone)]
pub struct CompChannel {
    repr: Repr,
}

/// What a [`CompChannel`] is: the soft device's, or (feature `rdma-core`) one of the
/// rdma-core backend.
#[derive(Clone)]
enum Repr {
    Soft(Arc<ChannelInner>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn super::native::NativeChannel>),
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.repr {
            Repr::Soft(inner) => f.debug_struct("CompChannel").field("id", &inner.id).finish_non_exhaustive(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => f.debug_struct("CompChannel").field("fd", &self.fd()).finish_non_exhaustive(),
        }
    }
}

/// A completion event (ibv_get_cq_event(3)); acknowledged when dropped
/// (ibv_ack_cq_events(3)).
#[derive(Debug)]
pub struct CqEvent {
    cq: Cq,
    acked: bool,
}

impl CqEvent {
    /// An event of a CQ of the rdma-core backend, not acknowledged yet.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn of_native(cq: Arc<dyn super::native::NativeCq>) -> Self {
        CqEvent { cq: Cq::from_native(cq), acked: false }
    }

    /// The CQ that got the event.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// The CQ's `cq_context`.
    pub fn cq_context(&self) -> usize {
        self.cq.cq_context()
    }

    /// Acknowledges the event now.
    pub fn ack(mut self) {
        self.acked = true;
        self.cq.ack_events(1);
    }

    /// Gives up the automatic acknowledgement; the caller acknowledges later with
    /// [`Cq::ack_events`] (batched acknowledgement, or the C ABI).
    pub fn into_cq(mut self) -> Cq {
        self.acked = true;
        self.cq.clone()
    }
}

impl Drop for CqEvent {
    fn drop(&mut self) {
        if !self.acked {
            self.cq.ack_events(1);
        }
    }
}

impl CompChannel {
    /// A channel of context `ctx` of `endpoint`, whose CQs are `cqs`, with its FIFO in
    /// the endpoint directory.
    pub(crate) fn new(endpoint: &Endpoint, cqs: &'static Table<CqInner>, ctx: u32) -> Result<Self> {
        let id = endpoint.new_id();
        let fifo = Fifo::create(&endpoint.dir.join(fifo_name(id)))?;
        if crate::sanitizer::on() {
            crate::sanitizer::created(crate::sanitizer::Kind::CompChannel, crate::sanitizer::Id::new(endpoint.slot, id), None);
        }
        Ok(CompChannel {
            repr: Repr::Soft(Arc::new(ChannelInner { cqs, ctx, id, slot: endpoint.slot, fifo, users: AtomicU32::new(0), destroyed: Default::default() })),
        })
    }

    /// A channel of the rdma-core backend.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(ch: Arc<dyn super::native::NativeChannel>) -> Self {
        CompChannel { repr: Repr::Native(ch) }
    }

    /// The backend's channel, for a channel of the rdma-core backend.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn native(&self) -> Option<&Arc<dyn super::native::NativeChannel>> {
        match &self.repr {
            Repr::Soft(_) => None,
            Repr::Native(ch) => Some(ch),
        }
    }

    /// The soft channel's state; `EOPNOTSUPP` for a channel of the rdma-core backend.
    pub(crate) fn inner(&self) -> Result<&Arc<ChannelInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(Error::native_unsupported("a verb of the soft device")),
        }
    }

    /// Waits for the next completion event. Blocks unless [`CompChannel::fd`] was made
    /// non-blocking, in which case `Error::WouldBlock` means no event is queued.
    ///
    /// Events of CQs destroyed since they were queued are skipped.
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn get_cq_event(&self) -> Result<CqEvent> {
        // The application waits: ACKs it holds leave now (docs/network.md, "Coalesced ACKs").
        crate::progress::application_waits();
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(ch) => return Ok(CqEvent { cq: Cq::from_native(ch.get_cq_event()?), acked: false }),
        };
        let cqs = inner.cqs;
        if crate::sanitizer::on() {
            // lost-wakeup: reported before the wait.
            crate::sanitizer::waiting_for_event(inner.sanitizer_id());
        }
        let mut rec = [0u8; RECORD_LEN];
        loop {
            inner.fifo.recv(&mut rec)?;
            let id = u64::from_ne_bytes(rec) as u32;
            let Some(cq) = cqs.get(id).filter(|c| !c.is_destroyed()) else { continue };
            if !cq.channel_is(inner) {
                continue;
            }
            cq.comp_events.delivered();
            if crate::sanitizer::on() {
                crate::sanitizer::event_obtained(false, crate::sanitizer::Kind::Cq, cq.sanitizer_id());
            }
            return Ok(CqEvent { cq: Cq::from_inner(cq), acked: false });
        }
    }

    /// The channel's fd: readable while an event is queued.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match &self.repr {
            Repr::Soft(inner) => inner.fifo.fd(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(ch) => ch.fd(),
        }
    }

    /// Destroys the channel (ibv_destroy_comp_channel(3)).
    ///
    /// Errors: `EBUSY` while CQs use it; `EINVAL` if already destroyed. On the rdma-core
    /// backend, the provider's ibv_destroy_comp_channel(3), with the same errors; its
    /// [`CompChannel::fd`] stays open as long as the handle (docs/rdma-core-backend.md).
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn destroy(&self) -> Result<()> {
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(ch) => return ch.destroy(),
        };
        if inner.users() != 0 {
            return Err(Error::Busy { what: "completion channel" });
        }
        if inner.destroyed.swap(true, Ordering::AcqRel) {
            return Err(Error::Destroyed { what: "completion channel" });
        }
        if crate::sanitizer::on() {
            crate::sanitizer::gone(crate::sanitizer::Kind::CompChannel, inner.sanitizer_id());
        }
        Ok(())
    }
}

/// The channel's fd ([`CompChannel::fd`], ibv_create_comp_channel(3) `fd`): readable while
/// an event is queued, so a channel can be registered with epoll, `tokio`'s `AsyncFd` or
/// any reactor, then drained with [`CompChannel::get_cq_event`] on a non-blocking fd.
impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
