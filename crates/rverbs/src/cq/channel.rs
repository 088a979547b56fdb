//! Completion channels (ibv_create_comp_channel(3), ibv_get_cq_event(3)).
//!
//! Rule: the channel's fd is a real kernel fd, readable while an event is queued,
//! blocking unless the application sets O_NONBLOCK; each armed CQ queues at most one
//! event per arming; every event returned must be acknowledged, and destroying the CQ
//! waits for that. Destroying a channel fails with EBUSY while CQs use it.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use crate::context::ContextInner;
use crate::cq::{Cq, CqInner};
use crate::error::{Error, Result};
use crate::event::EventQueue;

pub(crate) struct ChannelInner {
    pub(crate) ctx: Arc<ContextInner>,
    events: EventQueue<Weak<CqInner>>,
    users: AtomicU32,
}

impl ChannelInner {
    pub(crate) fn attach(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn detach(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn queue_event(&self, cq: Weak<CqInner>) {
        self.events.push(cq);
    }
}

/// A completion channel (`struct ibv_comp_channel`). Cloning shares it.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel").finish_non_exhaustive()
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
    pub(crate) fn new(ctx: Arc<ContextInner>) -> Result<Self> {
        Ok(CompChannel {
            inner: Arc::new(ChannelInner { ctx, events: EventQueue::new()?, users: AtomicU32::new(0) }),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<ChannelInner> {
        &self.inner
    }

    /// Waits for the next completion event. Blocks unless [`CompChannel::fd`] was made
    /// non-blocking, in which case `Error::WouldBlock` means no event is queued.
    pub fn get_cq_event(&self) -> Result<CqEvent> {
        let cq = self.inner.events.pop(|w| {
            let cq = w.upgrade().filter(|c| !c.is_destroyed())?;
            cq.comp_events.delivered();
            Some(cq)
        })?;
        Ok(CqEvent { cq: Cq::from_inner(cq), acked: false })
    }

    /// The channel's fd: readable while an event is queued.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.events.fd()
    }

    /// Destroys the channel (ibv_destroy_comp_channel(3)).
    ///
    /// Errors: `EBUSY` while CQs use it.
    pub fn destroy(&self) -> Result<()> {
        if self.inner.users.load(Ordering::Acquire) != 0 {
            return Err(Error::Busy { what: "completion channel" });
        }
        Ok(())
    }
}
