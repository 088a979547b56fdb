//! A receive queue's consumed count, carried back to its owner in the receive completion
//! the owner polls anyway (docs/shared-state.md, "The consumed count in the completion").
//!
//! Rule: ibv_post_recv(3): a queue holds at most `max_recv_wr` receives (ENOMEM). A queue
//! kept full — perftest posts each receive again after polling its completion, with
//! `max_recv_wr` outstanding — has room for a post only once a receive was taken, and the
//! takers' `head` that says so is written, for that very message, by a taker in another
//! process: reading it costs the post a cache line from the other core, and gives that
//! line back to the next taker. Instead the take writes into the receive's completion
//! which ring it took from and how many receives were ever taken from it (the low 32 bits
//! of `head` after the take); the CQ's poll keeps the last such count it saw ([`Heard`],
//! in the owner's memory); the owner's post widens it against its own `tail`
//! ([`widen`]) and uses it as a `head` it read (`RecvRing::post`).
//!
//! Why the count is as good as `head`:
//! - *Never ahead.* It is `head` after a take whose completion the poll has seen: the
//!   taker read the slot before it stored `head` and published the completion (Release),
//!   the poll read the completion (Acquire) before it stored the count in [`Heard`]
//!   (Release), the post reads [`Heard`] (Acquire) before it reuses a slot. Room it
//!   shows is room; a count that shows none sends the post to `head`, which decides.
//! - *Never another ring's.* Each ring has a per-process tag ([`next_tag`], never 0),
//!   carried with the count and compared by the post: a QP destroyed and its number
//!   reused has a ring with another tag.
//! - *Never far behind.* A receive or error completion polled without a count clears
//!   [`Heard`], so a count heard is behind `head` by at most the completions of its ring
//!   not yet polled (at most the CQ's depth, below 2^22) or lost, far below the 2^32 that
//!   [`widen`] resolves.
//! - *A peer that lies* (a wrong count or tag in a CQE, or in the ring's header) can make
//!   a post overwrite a receive not yet taken, as it can by writing `head` itself: data
//!   wrong, never a write outside a region (the receive's keys are checked when it is
//!   used) nor a wait.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What a take tells the ring's owner: the ring's tag, and the low 32 bits of the count of
/// receives ever taken from it (this one included).
///
/// Kept as the CQE word that carries it (the tag in the low half), written and read whole:
/// two halves written apart and read as one word make a load the CPU cannot forward from
/// its store buffer (`rings::wc::CqeWords`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct TakenCount(u64);

impl TakenCount {
    pub(crate) fn new(ring: u32, count: u32) -> TakenCount {
        TakenCount(u64::from(ring) | u64::from(count) << 32)
    }

    /// The tag of the ring it was taken from.
    pub(crate) fn ring(self) -> u32 {
        self.0 as u32
    }

    /// The low 32 bits of the ring's count of takes.
    pub(crate) fn count(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The CQE word that carries it.
    pub(crate) fn word(self) -> u64 {
        self.0
    }

    pub(crate) fn from_word(w: u64) -> TakenCount {
        TakenCount(w)
    }
}

impl std::fmt::Debug for TakenCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakenCount").field("ring", &self.ring()).field("count", &self.count()).finish()
    }
}

/// A new receive ring's tag, unique in this process (never 0: a [`Heard`] of 0 is
/// "nothing heard").
pub(crate) fn next_tag() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let t = NEXT.fetch_add(1, Ordering::Relaxed);
        if t != 0 {
            return t;
        }
    }
}

/// The count of the last receive completion a CQ's poll found, in the CQ owner's memory
/// (0: none, or the last receive or error completion carried none).
#[derive(Debug, Default)]
pub(crate) struct Heard(AtomicU64);

impl Heard {
    /// A completion was polled (after the Acquire of its slot): keep its count, or forget
    /// the last one if it is a receive or an error completion without one (a take the
    /// count would not show).
    #[inline]
    pub(crate) fn polled(&self, carried: Option<TakenCount>, receive_or_error: bool) {
        match carried {
            Some(c) => self.0.store(c.word(), Ordering::Release),
            None if receive_or_error && self.0.load(Ordering::Relaxed) != 0 => self.0.store(0, Ordering::Release),
            None => {}
        }
    }

    /// The count heard for the ring tagged `ring`, if the last one heard was its.
    #[inline]
    pub(crate) fn count_for(&self, ring: u32) -> Option<u32> {
        let c = TakenCount::from_word(self.0.load(Ordering::Acquire));
        (c.ring() == ring && ring != 0).then_some(c.count())
    }
}

/// The full count that the low 32 bits `count` stand for, for a ring whose owner has
/// posted `tail` receives: the one at or below `tail` by less than 2^32.
pub(crate) fn widen(tail: u64, count: u32) -> u64 {
    tail.wrapping_sub(u64::from((tail as u32).wrapping_sub(count)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_finds_the_count_at_or_below_tail() {
        assert_eq!(widen(10, 7), 7);
        assert_eq!(widen(10, 10), 10);
        // Across a 32-bit boundary of the full count.
        let tail = (5u64 << 32) + 3;
        assert_eq!(widen(tail, u32::MAX - 1), (5u64 << 32) - 2);
        // A count ahead of tail (a lie) reads as nearly 2^32 behind it: no room.
        assert_eq!(tail - widen(tail, 4), (1u64 << 32) - 1);
    }

    #[test]
    fn heard_keeps_the_last_count_and_forgets_it_on_a_receive_without_one() {
        let h = Heard::default();
        assert_eq!(h.count_for(3), None);
        h.polled(Some(TakenCount::new(3, 41)), true);
        assert_eq!((h.count_for(3), h.count_for(4)), (Some(41), None));
        h.polled(None, false);
        assert_eq!(h.count_for(3), Some(41), "a send completion says nothing of receives");
        h.polled(None, true);
        assert_eq!(h.count_for(3), None, "a receive taken without a count hides the takes after it");
        h.polled(Some(TakenCount::new(0, 9)), true);
        assert_eq!(h.count_for(0), None, "tag 0 is nobody's");
    }

    #[test]
    fn tags_are_never_zero_and_differ() {
        let (a, b) = (next_tag(), next_tag());
        assert!(a != 0 && b != 0 && a != b);
    }
}
