//! Event plumbing below the objects that raise events: the asynchronous event record as
//! it travels through a context's event FIFO (written by this process and by peers), and
//! the delivered/acknowledged counters that destroying a CQ, QP or SRQ waits on.
//!
//! Rule: ibv_get_async_event(3), ibv_get_cq_event(3): every event returned must be
//! acknowledged (ibv_ack_async_event(3), ibv_ack_cq_events(3)); destroying the object the
//! event names waits for those acknowledgements.

use std::sync::{Condvar, Mutex};

use rverbs_proto::verbs::EventType;

/// Name of context `id`'s asynchronous event FIFO in its endpoint directory (where this
/// process and its peers write the context's [`RawAsyncEvent`]s).
pub(crate) fn async_fifo_name(id: u32) -> String {
    format!("async-{id}")
}

/// An asynchronous event as it travels through a context's event FIFO (16 bytes):
/// `[kind: u32, element kind: u32, element id: u64]`. Peers in other processes write the
/// same records for events they cause on this process's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawAsyncEvent {
    pub(crate) kind: EventType,
    pub(crate) element: RawElement,
}

/// What an asynchronous event names, by number (a destroyed object's undelivered events
/// are dropped when read, as the kernel drops them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawElement {
    Cq(u32),
    Qp(u32),
    Srq(u32),
    /// A port (PORT_ERR, PORT_ACTIVE).
    Port(u8),
    /// The device itself (DEVICE_FATAL).
    Device,
}

impl RawAsyncEvent {
    pub(crate) const LEN: usize = 16;

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let (k, id) = match self.element {
            RawElement::Cq(i) => (1u32, i),
            RawElement::Qp(i) => (2, i),
            RawElement::Srq(i) => (3, i),
            RawElement::Port(p) => (4, u32::from(p)),
            RawElement::Device => (5, 0),
        };
        let mut r = [0u8; Self::LEN];
        r[..4].copy_from_slice(&self.kind.raw().to_ne_bytes());
        r[4..8].copy_from_slice(&k.to_ne_bytes());
        r[8..].copy_from_slice(&u64::from(id).to_ne_bytes());
        r
    }

    pub(crate) fn decode(r: &[u8; Self::LEN]) -> Option<Self> {
        let kind = EventType::from_raw(u32::from_ne_bytes(r[..4].try_into().ok()?))?;
        let id = u64::from_ne_bytes(r[8..].try_into().ok()?) as u32;
        let element = match u32::from_ne_bytes(r[4..8].try_into().ok()?) {
            1 => RawElement::Cq(id),
            2 => RawElement::Qp(id),
            3 => RawElement::Srq(id),
            4 => RawElement::Port(u8::try_from(id).ok()?),
            5 => RawElement::Device,
            _ => return None,
        };
        Some(RawAsyncEvent { kind, element })
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

    /// Events delivered and not acknowledged yet.
    pub(crate) fn unacked(&self) -> u64 {
        let c = self.counts.lock().expect("event counter");
        c.0.saturating_sub(c.1)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        for e in [
            RawAsyncEvent { kind: EventType::CqErr, element: RawElement::Cq(7) },
            RawAsyncEvent { kind: EventType::QpFatal, element: RawElement::Qp(0x12_3456) },
            RawAsyncEvent { kind: EventType::SrqLimitReached, element: RawElement::Srq(3) },
            RawAsyncEvent { kind: EventType::PortErr, element: RawElement::Port(1) },
            RawAsyncEvent { kind: EventType::DeviceFatal, element: RawElement::Device },
        ] {
            assert_eq!(RawAsyncEvent::decode(&e.encode()), Some(e));
        }
        assert_eq!(RawAsyncEvent::decode(&[0xff; 16]), None);
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
