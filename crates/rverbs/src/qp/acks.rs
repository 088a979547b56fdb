//! ACKs a network responder holds back so that they leave with the QP's next requests
//! (docs/network.md, "Coalesced ACKs"; issue 24).
//!
//! Rule: an ACK is coalesced, never lost. In a process that busy-polls (found out by its
//! device, or `RVERBS_BUSY_POLL=1`: `busy_poll`, `progress::holds_acks`), an application
//! thread that received requests inline (it polled an empty CQ, `progress::receive_inline`)
//! keeps the plain ACKs they produced here instead of sending them; they leave
//! - in the same `sendmmsg` as the next request packets of the QP's requester (to the same
//!   peer, from the same address), or
//! - at that process's next inline receive (the application polled an empty CQ again:
//!   it has nothing to send for now), or
//! - when the application waits for an event or calls the connection manager
//!   (`progress::application_waits`: it moved on), or
//! - once [`ACK_DELAY`] has passed, from the progress thread (an application that left the
//!   library; `progress::deadline_added` makes sure the thread wakes by then), or
//! - when the QP leaves RTS/RTR (ERR, RESET) or is destroyed, and at process exit.
//!
//! A NAK, an RNR NAK, a READ response or an atomic ACK is never held: the requester waits
//! on those. The progress thread never holds an ACK either (nothing tells it that a
//! request follows). IBTA ACKs are cumulative (docs/rocev2-wire.md §3.4 "coalesced
//! ACKs"), but nothing here relies on it: every held ACK is sent, in order.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::gid::Gid;

/// How long an ACK may wait for a request to ride with before the progress thread sends
/// it alone. Far below any requester's ACK timeout but the shortest ones (timeout 1–4:
/// 8–64 µs, which then retransmit and are ACKed again).
pub(crate) const ACK_DELAY: Duration = Duration::from_micros(200);

/// The most buffers a QP's held ACKs keep for reuse ([`HeldAcks::drain_into`]).
const SPARE_BUFFERS: usize = 8;

/// The ACK packets a QP's network responder holds, for one peer.
#[derive(Default)]
pub(crate) struct HeldAcks {
    /// The packets (BTH to ICRC, ICRC not yet written), oldest first.
    packets: Vec<Vec<u8>>,
    /// Buffers the held packets displaced where they were sent from (a requester's batch),
    /// for the next responses of this QP ([`HeldAcks::spares`]): a busy ping-pong holds
    /// and sends an ACK per message without allocating one.
    spare: Vec<Vec<u8>>,
    /// The local GID whose socket they leave from, and the peer's address.
    route: Option<(Gid, IpAddr)>,
}

impl HeldAcks {
    /// Whether nothing is held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Holds `packets` (in order, after those held already) for the peer at `dst`, to
    /// leave from the socket of `sgid`. The caller sends what is held for another route
    /// first ([`HeldAcks::route`], [`HeldAcks::take`]).
    pub(crate) fn hold(&mut self, sgid: Gid, dst: IpAddr, packets: impl IntoIterator<Item = Vec<u8>>) {
        if self.route != Some((sgid, dst)) {
            debug_assert!(self.packets.is_empty(), "held ACKs are sent before the route changes");
            self.route = Some((sgid, dst));
        }
        self.packets.extend(packets);
    }

    /// The route of what is held: the source GID and the peer's address.
    pub(crate) fn route(&self) -> Option<(Gid, IpAddr)> {
        self.route.filter(|_| !self.packets.is_empty())
    }

    /// Takes every held packet, oldest first.
    pub(crate) fn take(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.packets)
    }

    /// Hands every held packet, oldest first, to `put`, which may give back a buffer the
    /// packet displaced (kept, a few, for [`HeldAcks::spares`]).
    pub(crate) fn drain_into(&mut self, mut put: impl FnMut(Vec<u8>) -> Option<Vec<u8>>) {
        for p in self.packets.drain(..) {
            if let Some(buf) = put(p) {
                if self.spare.len() < SPARE_BUFFERS {
                    self.spare.push(buf);
                }
            }
        }
    }

    /// The buffers [`HeldAcks::drain_into`] kept, for packets to come.
    pub(crate) fn spares(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.spare.drain(..)
    }
}

/// The QPs of this process that hold ACKs, with when each started holding: the progress
/// thread sends what waited [`ACK_DELAY`]; an inline receive sends everything.
#[derive(Default)]
pub(crate) struct AcksDue {
    /// Whether `qps` may be non-empty (one load on the inline receive path).
    any: AtomicBool,
    qps: Mutex<Vec<(u32, Instant)>>,
}

impl AcksDue {
    /// QP `qpn` started holding ACKs at `now` (a QP already listed keeps its time).
    /// Returns whether it was not listed: a new deadline, `now` + [`ACK_DELAY`], which the
    /// progress thread must be told of (`progress::deadline_added`).
    pub(crate) fn add(&self, qpn: u32, now: Instant) -> bool {
        let mut q = self.qps.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let new = !q.iter().any(|(n, _)| *n == qpn);
        if new {
            q.push((qpn, now));
        }
        self.any.store(true, Ordering::Release);
        new
    }

    /// Whether any QP may hold ACKs.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// When the oldest holding started waiting plus [`ACK_DELAY`], if any QP holds ACKs.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if !self.any() {
            return None;
        }
        let q = self.qps.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        q.iter().map(|(_, t)| *t + ACK_DELAY).min()
    }

    /// Removes and returns the QPs whose ACKs are due at `now` (`None`: all of them). A
    /// busy poller asks at every empty poll: a few QPs come back without an allocation.
    pub(crate) fn take_due(&self, now: Option<Instant>) -> smallvec::SmallVec<[u32; 4]> {
        if !self.any() {
            return smallvec::SmallVec::new();
        }
        let mut q = self.qps.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut due = smallvec::SmallVec::new();
        q.retain(|&(n, t)| {
            let is_due = now.is_none_or(|now| t + ACK_DELAY <= now);
            if is_due {
                due.push(n);
            }
            !is_due
        });
        self.any.store(!q.is_empty(), Ordering::Release);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn held_acks_come_back_in_order_with_their_route() {
        let mut h = HeldAcks::default();
        assert!(h.is_empty() && h.route().is_none());
        let (gid, dst) = (Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        h.hold(gid, dst, [vec![1], vec![2]]);
        h.hold(gid, dst, [vec![3]]);
        assert_eq!(h.route(), Some((gid, dst)));
        assert_eq!(h.take(), [vec![1], vec![2], vec![3]]);
        assert!(h.is_empty() && h.route().is_none());
    }

    #[test]
    fn drained_acks_go_in_order_and_the_buffers_they_displace_come_back_a_few() {
        let mut h = HeldAcks::default();
        let (gid, dst) = (Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        h.hold(gid, dst, (0..10u8).map(|k| vec![k]));
        let mut sent = Vec::new();
        // Each packet displaces an idle buffer of the batch it goes into, but the first.
        h.drain_into(|p| {
            let displaced = (!sent.is_empty()).then(|| vec![0xee; 64]);
            sent.push(p);
            displaced
        });
        assert_eq!(sent, (0..10u8).map(|k| vec![k]).collect::<Vec<_>>());
        assert!(h.is_empty() && h.route().is_none());
        let spares: Vec<Vec<u8>> = h.spares().collect();
        assert_eq!(spares.len(), SPARE_BUFFERS, "nine displaced, a few kept");
        assert!(spares.iter().all(|b| b.len() == 64));
        assert_eq!(h.spares().count(), 0, "given once");
    }

    #[test]
    fn the_progress_thread_waits_no_longer_than_a_held_ack_while_acks_are_held() {
        // A hold that starts while the thread waits `HOLDING_WAIT` is due after it wakes, so
        // it needs no wake-up of its own (progress::deadline_added).
        assert!(crate::progress::HOLDING_WAIT <= ACK_DELAY);
    }

    #[test]
    fn a_qp_is_due_once_its_first_held_ack_waited_the_delay() {
        let due = AcksDue::default();
        let t0 = Instant::now();
        assert_eq!((due.any(), due.deadline()), (false, None));
        // A new deadline only for a QP not listed (the progress thread is told of those).
        assert!(due.add(7, t0));
        assert!(due.add(9, t0 + ACK_DELAY / 2));
        assert!(!due.add(7, t0 + ACK_DELAY), "keeps its first time");
        assert_eq!(due.deadline(), Some(t0 + ACK_DELAY));
        assert_eq!(due.take_due(Some(t0 + ACK_DELAY - Duration::from_nanos(1))).as_slice(), [0u32; 0]);
        assert_eq!(due.take_due(Some(t0 + ACK_DELAY)).as_slice(), [7]);
        assert_eq!(due.deadline(), Some(t0 + ACK_DELAY / 2 + ACK_DELAY));
        assert_eq!(due.take_due(None).as_slice(), [9]);
        assert_eq!((due.any(), due.deadline()), (false, None));
        assert!(due.add(7, t0 + 2 * ACK_DELAY), "taken, so new again");
    }
}
