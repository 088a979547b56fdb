//! Event channels: where a connection id's events queue until the application takes
//! them.
//!
//! Rule (rdma_create_event_channel(3), rdma_get_cm_event(3)): the channel's fd is a real
//! descriptor the application may poll, epoll or make non-blocking; it is readable
//! exactly while an event is queued — a wake-up with no event behind it is a bug users
//! see (rpma servers wait with timeouts and treat EAGAIN after readiness as an error).
//! `rdma_get_cm_event` blocks while the queue is empty unless the fd is non-blocking,
//! then it fails with EAGAIN.
//!
//! Mechanism: an `eventfd` in semaphore mode whose counter always equals the number of
//! queued events. Events are pushed under the queue lock followed by a write of 1;
//! they are taken under the same lock followed by a read, which decrements by one and
//! cannot block because the counter counts the queue. Only this module reads the fd.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::event::{EventfdFlags, PollFd, PollFlags};

use crate::error::{Error, Result};
use crate::event::Event;

pub(crate) struct ChannelInner {
    queue: Mutex<VecDeque<Event>>,
    fd: OwnedFd,
    /// The device whose connection manager the channel's ids use (`None`: the listed
    /// device).
    device: Option<rverbs::Device>,
}

/// An event channel (`struct rdma_event_channel`). Cloning shares the channel.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").field("fd", &self.inner.fd).finish()
    }
}

impl PartialEq for EventChannel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The channel's descriptor ([`EventChannel::fd`], rdma_create_event_channel(3) `fd`):
/// readable while an event is queued, for epoll or an async reactor.
impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl EventChannel {
    /// Creates a channel (rdma_create_event_channel(3)); its fd is close-on-exec and
    /// blocking.
    pub fn new() -> Result<EventChannel> {
        EventChannel::with_device(None)
    }

    /// Creates a channel whose ids work on `device` (a device of its own configuration,
    /// `rverbs::DeviceConfig::open`): they bind and resolve the addresses that device
    /// serves, and their handshakes run through its QP1 and its runtime directory's
    /// listener table, as the kernel's rdma_cm binds an id to the device of its address
    /// (rdma_bind_addr(3)). The ids of a channel made by [`EventChannel::new`] work on the
    /// device `rverbs::devices()` lists. An id keeps its device for its life
    /// ([`Rule::OtherDevice`](crate::Rule::OtherDevice)). docs/connection-manager.md,
    /// "Several devices".
    pub fn on(device: &rverbs::Device) -> Result<EventChannel> {
        EventChannel::with_device(Some(*device))
    }

    pub(crate) fn with_device(device: Option<rverbs::Device>) -> Result<EventChannel> {
        let fd = rustix::event::eventfd(0, EventfdFlags::SEMAPHORE | EventfdFlags::CLOEXEC)?;
        Ok(EventChannel { inner: Arc::new(ChannelInner { queue: Mutex::new(VecDeque::new()), fd, device }) })
    }

    /// The device of the channel's ids (`None`: the listed device).
    pub fn device(&self) -> Option<rverbs::Device> {
        self.inner.device
    }

    /// The channel's descriptor: readable while an event is queued.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }

    /// Takes the oldest event (rdma_get_cm_event(3)): blocks while none is queued,
    /// unless the fd is non-blocking (then [`Error::WouldBlock`], errno EAGAIN).
    pub fn get_event(&self) -> Result<Event> {
        // The application waits: ACKs its verbs hold leave now (rverbs's docs/network.md,
        // "Coalesced ACKs").
        rverbs::capi_support::application_waits();
        loop {
            if let Some(ev) = self.try_get_event() {
                return Ok(ev);
            }
            let flags = rustix::fs::fcntl_getfl(&self.inner.fd)?;
            if flags.contains(rustix::fs::OFlags::NONBLOCK) {
                return Err(Error::WouldBlock);
            }
            let mut fds = [PollFd::new(&self.inner.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Takes the oldest event if one is queued, never blocking.
    pub fn try_get_event(&self) -> Option<Event> {
        let mut q = self.lock();
        let mut ev = q.pop_front()?;
        self.take_count();
        // Counted as retrieved before the queue lock goes, so a concurrent destroy or
        // migrate of its id either purges it or waits for its acknowledgement.
        ev.mark_retrieved();
        drop(q);
        Some(ev)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VecDeque<Event>> {
        self.inner.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an event (the caller holds no lock of this channel).
    pub(crate) fn push(&self, ev: Event) {
        let mut q = self.lock();
        q.push_back(ev);
        self.add_count();
    }

    /// Removes the queued events `pred` selects, keeping the counter equal to the
    /// queue length; returns them (dropping them is the caller's business: dropping an
    /// event that was never retrieved does not count as an acknowledgement).
    pub(crate) fn take_where(&self, mut pred: impl FnMut(&Event) -> bool) -> Vec<Event> {
        let mut q = self.lock();
        let mut out = Vec::new();
        let mut i = 0;
        while i < q.len() {
            if pred(&q[i]) {
                out.push(q.remove(i).expect("index in range"));
                self.take_count();
            } else {
                i += 1;
            }
        }
        out
    }

    /// How many queued events `pred` selects.
    pub(crate) fn count_where(&self, mut pred: impl FnMut(&Event) -> bool) -> usize {
        self.lock().iter().filter(|e| pred(e)).count()
    }

    fn add_count(&self) {
        let _ = rustix::io::write(&self.inner.fd, &1u64.to_ne_bytes());
    }

    fn take_count(&self) {
        // Cannot block: the counter is at least the number of queued events, and one
        // was just removed under the lock. The fd may be blocking or not (the
        // application's choice); either way this read returns at once.
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.inner.fd, &mut b);
    }
}
