//! Event queues behind real file descriptors: the context's asynchronous events and the
//! completion channels, plus the delivered/acknowledged counters that destroy waits on.
//!
//! Rule: ibv_get_async_event(3): events are read from `async_fd`, a real fd; every event
//! returned must be acknowledged with ibv_ack_async_event(3); destroying the object the
//! event names waits for those acknowledgements.
//! Rule: ibv_get_cq_event(3): the same for completion events and ibv_ack_cq_events(3).

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::{Condvar, Mutex, Weak};

use rverbs_proto::verbs::EventType;

use crate::cq::{Cq, CqInner};
use crate::error::Result;
use crate::qp::{Qp, QpInner};
use crate::srq::{Srq, SrqInner};
use crate::sys::EventFd;

/// A FIFO of events whose length is mirrored by an eventfd counter, so the fd is
/// readable exactly while an event is queued (no spurious wake-ups), blocking or not
/// as the application sets the fd.
pub(crate) struct EventQueue<T> {
    fd: EventFd,
    queue: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> Result<Self> {
        Ok(EventQueue { fd: EventFd::new()?, queue: Mutex::new(VecDeque::new()) })
    }

    /// Queues an event and makes the fd readable.
    pub(crate) fn push(&self, event: T) {
        self.queue.lock().expect("event queue lock").push_back(event);
        self.fd.signal();
    }

    /// Takes the oldest event for which `live` returns `Some`, blocking while there is
    /// none (or failing with `WouldBlock` if the fd is non-blocking). Events whose
    /// object was destroyed before delivery are discarded, as the kernel discards them.
    pub(crate) fn pop<U>(&self, mut live: impl FnMut(T) -> Option<U>) -> Result<U> {
        loop {
            self.fd.wait()?;
            let event = self.queue.lock().expect("event queue lock").pop_front();
            if let Some(u) = event.and_then(&mut live) {
                return Ok(u);
            }
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.fd()
    }
}

/// Counts events delivered to the application and acknowledged by it, so that destroy
/// can wait until the two match (rdma-core's `events_completed` / `events_reported`).
#[derive(Default)]
pub(crate) struct EventCounter {
    counts: Mutex<(u64, u64)>,
    acked: Condvar,
}

impl EventCounter {
    pub(crate) fn delivered(&self) {
        self.counts.lock().expect("event counter").0 += 1;
    }

    pub(crate) fn ack(&self, n: u32) {
        let mut c = self.counts.lock().expect("event counter");
        c.1 += u64::from(n);
        self.acked.notify_all();
    }

    /// Blocks until every delivered event has been acknowledged.
    pub(crate) fn wait_all_acked(&self) {
        let mut c = self.counts.lock().expect("event counter");
        while c.1 < c.0 {
            c = self.acked.wait(c).expect("event counter");
        }
    }

    /// (delivered, acknowledged).
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        *self.counts.lock().expect("event counter")
    }
}

/// The object an asynchronous event is about, as queued (weakly held: a destroyed
/// object's undelivered events are dropped).
pub(crate) enum RawElement {
    Cq(Weak<CqInner>),
    Qp(Weak<QpInner>),
    Srq(Weak<SrqInner>),
}

pub(crate) struct RawAsyncEvent {
    pub(crate) kind: EventType,
    pub(crate) element: RawElement,
}

/// What an asynchronous event is about.
#[derive(Clone)]
pub enum AsyncElement {
    /// A completion queue (CQ_ERR).
    Cq(Cq),
    /// A queue pair (QP_FATAL, COMM_EST, SQ_DRAINED, QP_LAST_WQE_REACHED, …).
    Qp(Qp),
    /// A shared receive queue (SRQ_LIMIT_REACHED, SRQ_ERR).
    Srq(Srq),
    /// A port (PORT_ACTIVE, PORT_ERR).
    Port(u8),
}

impl std::fmt::Debug for AsyncElement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AsyncElement::Cq(_) => f.write_str("Cq"),
            AsyncElement::Qp(q) => write!(f, "Qp({})", q.qp_num()),
            AsyncElement::Srq(_) => f.write_str("Srq"),
            AsyncElement::Port(p) => write!(f, "Port({p})"),
        }
    }
}

/// An asynchronous event (ibv_get_async_event(3)); acknowledged when dropped.
#[derive(Debug)]
pub struct AsyncEvent {
    kind: EventType,
    element: AsyncElement,
    acked: bool,
}

impl AsyncEvent {
    pub(crate) fn deliver(raw: RawAsyncEvent) -> Option<AsyncEvent> {
        let element = match raw.element {
            RawElement::Cq(w) => {
                let cq = w.upgrade().filter(|c| !c.is_destroyed())?;
                cq.async_events.delivered();
                AsyncElement::Cq(Cq::from_inner(cq))
            }
            RawElement::Qp(w) => {
                let qp = w.upgrade().filter(|q| !q.is_destroyed())?;
                qp.async_events.delivered();
                AsyncElement::Qp(Qp::from_inner(qp))
            }
            RawElement::Srq(w) => {
                let srq = w.upgrade().filter(|s| !s.is_destroyed())?;
                srq.async_events.delivered();
                AsyncElement::Srq(Srq::from_inner(srq))
            }
        };
        Some(AsyncEvent { kind: raw.kind, element, acked: false })
    }

    /// The event type.
    pub fn event_type(&self) -> EventType {
        self.kind
    }

    /// The object the event is about.
    pub fn element(&self) -> &AsyncElement {
        &self.element
    }

    /// Acknowledges the event now (ibv_ack_async_event(3)); dropping does the same.
    pub fn ack(mut self) {
        self.do_ack();
    }

    /// Gives up the automatic acknowledgement: the caller acknowledges later with
    /// `ack_async_event` on the element (what the C ABI does).
    pub fn into_parts(mut self) -> (EventType, AsyncElement) {
        self.acked = true;
        (self.kind, self.element.clone())
    }

    fn do_ack(&mut self) {
        if std::mem::replace(&mut self.acked, true) {
            return;
        }
        match &self.element {
            AsyncElement::Cq(c) => c.inner().async_events.ack(1),
            AsyncElement::Qp(q) => q.inner().async_events.ack(1),
            AsyncElement::Srq(s) => s.inner().async_events.ack(1),
            AsyncElement::Port(_) => {}
        }
    }
}

impl Drop for AsyncEvent {
    fn drop(&mut self) {
        self.do_ack();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_fd_is_readable_only_while_events_are_queued() {
        let q = EventQueue::<u32>::new().unwrap();
        rustix::io::ioctl_fionbio(q.fd(), true).unwrap();
        assert!(matches!(q.pop(Some), Err(crate::Error::WouldBlock)));
        q.push(7);
        q.push(8);
        assert_eq!(q.pop(Some).unwrap(), 7);
        assert_eq!(q.pop(Some).unwrap(), 8);
        assert!(matches!(q.pop(Some), Err(crate::Error::WouldBlock)));
    }

    #[test]
    fn dead_events_are_skipped() {
        let q = EventQueue::<u32>::new().unwrap();
        rustix::io::ioctl_fionbio(q.fd(), true).unwrap();
        q.push(1);
        q.push(2);
        assert_eq!(q.pop(|v| (v != 1).then_some(v)).unwrap(), 2);
    }

    #[test]
    fn counter_waits_for_acks() {
        let c = std::sync::Arc::new(EventCounter::default());
        c.delivered();
        c.delivered();
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.wait_all_acked());
        c.ack(1);
        c.ack(1);
        t.join().unwrap();
        assert_eq!(c.counts(), (2, 2));
    }
}
