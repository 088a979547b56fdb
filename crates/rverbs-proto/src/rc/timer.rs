//! The requester's timers: a fixed table, one slot per kind (quinn `connection/timer.rs`).
//!
//! Read before editing: docs/rocev2-wire.md §3.4 ("Retransmit timer", "RNR_RETRY").

use std::time::Instant;

/// A requester timer (docs/rocev2-wire.md §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Timer {
    /// The retransmit (local ACK) timer: 4.096 µs × 2^`timeout`; firing is an ERROR_RETRY.
    Retransmit = 0,
    /// The RNR NAK timer: `rnr_delay(syndrome & 0x1F)`; firing starts the retry.
    Rnr = 1,
}

impl Timer {
    /// Every timer, in slot order.
    pub const ALL: [Timer; 2] = [Timer::Retransmit, Timer::Rnr];
}

/// The deadlines of the [`Timer`]s; `None` when a timer is stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerTable {
    data: [Option<Instant>; 2],
}

impl TimerTable {
    /// Arms `timer` to fire at `at` (replacing any earlier deadline).
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.data[timer as usize] = Some(at);
    }

    /// The deadline of `timer`, if armed.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.data[timer as usize]
    }

    /// Stops `timer`.
    pub fn stop(&mut self, timer: Timer) {
        self.data[timer as usize] = None;
    }

    /// Whether `timer` is armed.
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.data[timer as usize].is_some()
    }

    /// The earliest deadline of all armed timers.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.data.iter().flatten().min().copied()
    }

    /// Stops and returns `timer` if its deadline is at or before `now`.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        match self.data[timer as usize] {
            Some(at) if at <= now => {
                self.data[timer as usize] = None;
                true
            }
            _ => false,
        }
    }

    /// Stops every timer.
    pub fn stop_all(&mut self) {
        self.data = [None; 2];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timer_table_next_timeout_is_the_earliest() {
        let t0 = Instant::now();
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::Retransmit, t0 + Duration::from_millis(5));
        t.set(Timer::Rnr, t0 + Duration::from_millis(2));
        assert_eq!(t.next_timeout(), Some(t0 + Duration::from_millis(2)));
        assert!(!t.take_expired(Timer::Rnr, t0 + Duration::from_millis(1)));
        assert!(t.take_expired(Timer::Rnr, t0 + Duration::from_millis(2)));
        assert_eq!(t.next_timeout(), Some(t0 + Duration::from_millis(5)));
        t.stop_all();
        assert_eq!(t.next_timeout(), None);
    }
}
