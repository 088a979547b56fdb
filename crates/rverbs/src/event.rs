//! Asynchronous events as the application receives them: resolved to the object they
//! name, acknowledged when dropped. (The record that travels through a context's event
//! FIFO and the delivered/acknowledged counters are in `notify`, below the objects.)
//!
//! Rule: ibv_get_async_event(3): events are read from `async_fd`, a real fd; every event
//! returned must be acknowledged with ibv_ack_async_event(3); destroying the object the
//! event names waits for those acknowledgements.
//! Rule: ibv_get_cq_event(3): the same for completion events and ibv_ack_cq_events(3).

use rverbs_proto::verbs::EventType;

use crate::cq::{Cq, CqInner};
use crate::qp::{Qp, QpInner};
use crate::qp::srq::{Srq, SrqInner};
use crate::table::Table;

use crate::notify::{RawAsyncEvent, RawElement};

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
    /// The device itself (DEVICE_FATAL; ibv_get_async_event(3) names no object for it).
    Device,
}

impl std::fmt::Debug for AsyncElement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AsyncElement::Cq(_) => f.write_str("Cq"),
            AsyncElement::Qp(q) => write!(f, "Qp({})", q.qp_num()),
            AsyncElement::Srq(_) => f.write_str("Srq"),
            AsyncElement::Port(p) => write!(f, "Port({p})"),
            AsyncElement::Device => f.write_str("Device"),
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
    /// Resolves a raw event read from the context's FIFO in the live objects of the
    /// context's device (`cqs`, `qps`, `srqs`); `None` if the object it names was
    /// destroyed in the meantime (the event is dropped, as the kernel drops it).
    pub(crate) fn deliver(raw: RawAsyncEvent, cqs: &Table<CqInner>, qps: &Table<QpInner>, srqs: &Table<SrqInner>) -> Option<AsyncEvent> {
        let element = match raw.element {
            RawElement::Cq(id) => {
                let cq = cqs.get(id).filter(|c| !c.is_destroyed())?;
                cq.async_events.delivered();
                if crate::sanitizer::on() {
                    crate::sanitizer::event_obtained(true, crate::sanitizer::Kind::Cq, cq.sanitizer_id());
                }
                AsyncElement::Cq(Cq::from_inner(cq))
            }
            RawElement::Qp(qpn) => {
                let qp = qps.get(qpn).filter(|q| !q.is_destroyed())?;
                qp.async_events.delivered();
                if crate::sanitizer::on() {
                    crate::sanitizer::event_obtained(true, crate::sanitizer::Kind::Qp, qp.sanitizer_id());
                }
                AsyncElement::Qp(Qp::from_inner(qp))
            }
            RawElement::Srq(srqn) => {
                let srq = srqs.get(srqn).filter(|s| !s.is_destroyed())?;
                srq.async_events.delivered();
                if crate::sanitizer::on() {
                    crate::sanitizer::event_obtained(true, crate::sanitizer::Kind::Srq, srq.sanitizer_id());
                }
                AsyncElement::Srq(Srq::from_inner(srq))
            }
            // Events of the device and its port: nothing to wait for on destroy
            // (ibv_ack_async_event(3) counts them nowhere).
            RawElement::Port(p) => AsyncElement::Port(p),
            RawElement::Device => AsyncElement::Device,
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
            AsyncElement::Cq(c) => c.ack_async_events(1),
            AsyncElement::Qp(q) => q.ack_async_events(1),
            AsyncElement::Srq(s) => s.inner().async_events.ack(1),
            AsyncElement::Port(_) | AsyncElement::Device => {}
        }
    }
}

impl Drop for AsyncEvent {
    fn drop(&mut self) {
        self.do_ack();
    }
}
