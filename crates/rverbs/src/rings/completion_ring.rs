//! The completion ring: fixed-size CQEs in a power-of-two array, many producers, one
//! consumer at a time.
//!
//! Read before editing: docs/completion-queues.md, ibv_poll_cq(3) and ibv_create_cq_ex(3).
//!
//! Protocol (after rxe_queue.h, and Vyukov's bounded queue for the many producers):
//! - A producer reserves position `t` by a compare-exchange on `tail`, after checking
//!   that `t - head < capacity` (otherwise the CQ overruns). It writes the slot, then
//!   publishes it by storing `seq = t + 1` with `Release`.
//! - The consumer reads the slot at `head` when its `seq` is `head + 1` (`Acquire`),
//!   copies it out, and releases the slot by storing `head + 1` with `Release`.
//! - With `IGNORE_OVERRUN` producers skip the capacity check and overwrite the oldest
//!   entry. Slots are then read as a seqlock: a writer first marks the slot busy
//!   (`seq = 0`), the reader re-checks `seq` after copying and resynchronises to the
//!   oldest surviving entry when the slot was overwritten under it.
//!
//! Every field of a slot is an `AtomicU64`, so a reader racing an overwriting writer
//! reads stale or torn *values* that the seqlock check discards, never undefined
//! behaviour. On x86-64 relaxed atomic loads and stores are plain moves.
//!
//! The ring lives in a shared segment (`crate::shm`), so producers in other processes
//! publish into it the same way; its memory is zero-filled and committed only as
//! completions are written, so a CQ of millions of entries costs nothing until used.
#![allow(unsafe_code)]

#[cfg(rverbs_loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(rverbs_loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::rings::wc::SlotWords;

/// Number of data words of a slot, after its sequence word: what a CQE encodes into
/// (its format, in `wc`).
pub(crate) const DATA_WORDS: usize = crate::rings::wc::CQE_WORDS;

/// One CQE slot: 64 bytes, one cache line.
#[repr(C, align(64))]
pub(crate) struct Slot {
    /// 0 = empty or being written; otherwise the position it holds, plus one.
    seq: AtomicU64,
    data: SlotWords,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

/// Why a producer could not publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The ring was full: the CQE was not written.
    Full,
    /// The indices are impossible (the consumer's `head` beyond every position ever
    /// reserved): another process scribbled over the ring. The CQE was not written.
    Corrupt,
}

/// What the consumer found at `head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pop {
    /// A CQE, now removed, and the ring position it held.
    Entry([u64; DATA_WORDS], u64),
    /// Nothing published at `head` yet.
    Empty,
    /// The slot at `head` holds a position the protocol can never put there: another
    /// process scribbled over the ring. The consumer skipped to `tail`.
    Corrupt,
}

/// The producer and consumer indices, each on its own cache line.
#[repr(C)]
pub(crate) struct RingHdr {
    tail: CachePadded<AtomicU64>,
    head: CachePadded<AtomicU64>,
}

/// Bytes the indices take at the start of a ring's area.
pub(crate) const HDR_BYTES: usize = std::mem::size_of::<RingHdr>();

#[cfg(not(rverbs_loom))]
// SAFETY: two AtomicU64 with padding; every bit pattern of the atomics is valid and the
// padding is never read.
unsafe impl crate::shm::ShmSafe for RingHdr {}
#[cfg(not(rverbs_loom))]
// SAFETY: eight AtomicU64; every bit pattern is valid.
unsafe impl crate::shm::ShmSafe for Slot {}

/// Where the ring's memory is.
enum Backing {
    /// A shared segment: indices at `hdr`, slots at `slots` (byte offsets).
    #[cfg(not(rverbs_loom))]
    Shm {
        /// Keeps the mapping alive.
        _seg: std::sync::Arc<crate::shm::Segment>,
        hdr: *const RingHdr,
        slots: *const Slot,
        cap: usize,
    },
    /// Process memory (unit tests, loom models and the fuzz harness).
    #[cfg(any(test, rverbs_loom, feature = "fuzzing"))]
    Heap { hdr: Box<RingHdr>, slots: Box<[Slot]> },
}

/// The ring. `capacity` is a power of two.
pub(crate) struct Ring {
    mem: Backing,
    mask: u64,
    /// A consumer position this process read (`head` never moves back), kept in this
    /// process's memory: a producer that finds its reservation less than a lap ahead of
    /// it knows there is room without reading `head`, the line the consumer writes at
    /// every poll (one cache-line transfer between the processes per completion saved).
    seen_head: Box<CachePadded<AtomicU64>>,
}

// SAFETY: the ring is shared memory accessed only through atomics; the raw pointers of
// the shared backing point into a mapping the ring keeps alive.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// Bytes of segment a ring of `min_entries` needs (indices and slots).
    pub(crate) fn bytes(min_entries: usize) -> usize {
        HDR_BYTES + min_entries.max(1).next_power_of_two() * std::mem::size_of::<Slot>()
    }

    /// The ring in `seg` at byte `offset` (64-byte aligned), with room for at least
    /// `min_entries` CQEs (rounded up to a power of two). A freshly created segment is
    /// zero-filled: an empty ring.
    #[cfg(not(rverbs_loom))]
    pub(crate) fn in_segment(seg: std::sync::Arc<crate::shm::Segment>, offset: usize, min_entries: usize) -> Self {
        let cap = min_entries.max(1).next_power_of_two();
        // `get` and `slice` check bounds and alignment once; the pointers stay valid as
        // long as `_seg` keeps the mapping.
        let hdr: *const RingHdr = seg.get::<RingHdr>(offset);
        let slots = seg.slice::<Slot>(offset + HDR_BYTES, cap).as_ptr();
        Ring { mem: Backing::Shm { _seg: seg, hdr, slots, cap }, mask: cap as u64 - 1, seen_head: Box::new(CachePadded::new(AtomicU64::new(0))) }
    }

    /// Under loom a ring lives in process memory: loom's atomics cannot be placed in a
    /// segment. Only the ring's own models run under loom; the rest of the crate just
    /// has to compile.
    #[cfg(rverbs_loom)]
    pub(crate) fn in_segment(_seg: std::sync::Arc<crate::shm::Segment>, _offset: usize, min_entries: usize) -> Self {
        Self::new(min_entries)
    }

    /// A ring in process memory with room for at least `min_entries` CQEs.
    #[cfg(any(test, rverbs_loom, feature = "fuzzing"))]
    pub(crate) fn new(min_entries: usize) -> Self {
        let cap = min_entries.max(1).next_power_of_two();
        let slots: Box<[Slot]> = (0..cap)
            .map(|_| Slot { seq: AtomicU64::new(0), data: std::array::from_fn(|_| AtomicU64::new(0)) })
            .collect();
        let hdr = Box::new(RingHdr {
            tail: CachePadded::new(AtomicU64::new(0)),
            head: CachePadded::new(AtomicU64::new(0)),
        });
        Ring { mem: Backing::Heap { hdr, slots }, mask: cap as u64 - 1, seen_head: Box::new(CachePadded::new(AtomicU64::new(0))) }
    }

    fn hdr(&self) -> &RingHdr {
        match &self.mem {
            #[cfg(not(rverbs_loom))]
            // SAFETY: checked in-bounds and aligned at construction; the mapping lives as
            // long as `self` (the backing holds it); RingHdr is ShmSafe.
            Backing::Shm { hdr, .. } => unsafe { &**hdr },
            #[cfg(any(test, rverbs_loom, feature = "fuzzing"))]
            Backing::Heap { hdr, .. } => hdr,
        }
    }

    fn slots(&self) -> &[Slot] {
        match &self.mem {
            #[cfg(not(rverbs_loom))]
            // SAFETY: as in `hdr`, for `cap` slots.
            Backing::Shm { slots, cap, .. } => unsafe { std::slice::from_raw_parts(*slots, *cap) },
            #[cfg(any(test, rverbs_loom, feature = "fuzzing"))]
            Backing::Heap { slots, .. } => slots,
        }
    }

    /// Number of CQEs the ring holds when full.
    pub(crate) fn capacity(&self) -> usize {
        self.mask as usize + 1
    }

    /// CQEs published or being published and not yet consumed (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let t = self.hdr().tail.load(Ordering::Acquire);
        let h = self.hdr().head.load(Ordering::Acquire);
        t.saturating_sub(h).min(self.capacity() as u64) as usize
    }

    fn slot(&self, pos: u64) -> &Slot {
        &self.slots()[(pos & self.mask) as usize]
    }

    /// Publishes a CQE. With `overwrite` false a full ring refuses it (`PushError::Full`);
    /// with `overwrite` true the oldest entry is lost instead (IGNORE_OVERRUN).
    #[inline(always)]
    pub(crate) fn push(&self, data: &[u64; DATA_WORDS], overwrite: bool) -> Result<(), PushError> {
        self.push_marking(data, overwrite, |_| {})
    }

    /// [`Ring::push`], calling `before` with the position reserved once the CQE's words
    /// are written there, right before the store that publishes them (not at all if the
    /// ring refuses it): the last step of a producer that dies after `before` is that
    /// store, and [`Ring::published_at`] then tells whether it was made.
    #[inline(always)]
    pub(crate) fn push_marking(&self, data: &[u64; DATA_WORDS], overwrite: bool, before: impl FnOnce(u64)) -> Result<(), PushError> {
        let cap = self.capacity() as u64;
        let mut t = self.hdr().tail.load(Ordering::Relaxed);
        loop {
            // As in `pop`: a tail at the last position was scribbled.
            if t == u64::MAX {
                return Err(PushError::Corrupt);
            }
            // Room known from a consumer position seen before (less than a lap behind
            // `t`; `head` only moves forward, so the real one is at least as far): the
            // reservation cannot overrun, and `head` is not read. The consumer's reads of
            // the slot are ordered before this write by the Acquire load of `head` that
            // found the position, passed on by `seen_head`'s Release store and Acquire load.
            if !overwrite && t.wrapping_sub(self.seen_head.load(Ordering::Acquire)) >= cap {
                let h = self.hdr().head.load(Ordering::Acquire);
                if h > t {
                    // Our view of `tail` may be older than the consumer's progress (found
                    // by the loom model): read it again. The consumer published `head`
                    // (Release) after seeing position h - 1 published, so a `tail` read
                    // after acquiring `head` is at least `head`; one still below it was
                    // never written by the protocol, and waiting for it would spin for
                    // ever inside another process's verb.
                    t = self.hdr().tail.load(Ordering::Acquire);
                    if h > t {
                        return Err(PushError::Corrupt);
                    }
                    continue;
                }
                if t - h >= cap {
                    return Err(PushError::Full);
                }
                self.seen_head.store(h, Ordering::Release);
            }
            // Release: a consumer that acquires `tail` past `t` also sees that this
            // producer entered the CQ's gate before reserving (`rings::producer_gate`), so a
            // reservation it finds unpublished is held by a producer it can see.
            match self.hdr().tail.compare_exchange_weak(t, t + 1, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => t = now,
            }
        }
        let slot = self.slot(t);
        if overwrite {
            // Seqlock writer: mark busy before touching the data words.
            slot.seq.store(0, Ordering::Relaxed);
            fence(Ordering::Release);
        }
        for (w, v) in slot.data.iter().zip(data) {
            w.store(*v, Ordering::Relaxed);
        }
        before(t);
        slot.seq.store(t + 1, Ordering::Release);
        Ok(())
    }

    /// Removes the oldest published CQE, if any.
    ///
    /// Only one thread may consume at a time (the caller holds the consumer lock, or the
    /// CQ is SINGLE_THREADED). The CQ polls through [`Ring::consumer`].
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn pop(&self) -> Pop {
        self.consumer().pop_skipping(usize::MAX, true)
    }

    /// The consumer's side of the ring for one poll: [`Consumer::pop_skipping`] is
    /// [`Ring::pop`] with the header, the slots and the mask read once, so that a poll that removes
    /// many CQEs does not read them again for each one.
    #[inline(always)]
    pub(crate) fn consumer(&self) -> Consumer<'_> {
        let slots = self.slots();
        // What `Consumer::slot`'s unchecked index relies on (set together at construction;
        // checked once per poll, not per CQE).
        assert_eq!(slots.len() as u64, self.mask + 1, "ring capacity and mask");
        Consumer { ring: self, hdr: self.hdr(), slots, mask: self.mask }
    }

    /// The producer and consumer indices and the sequence word of slot `i` (modulo the
    /// capacity), for a harness standing in for a process that scribbles over the ring.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn raw_words(&self, i: usize) -> (&AtomicU64, &AtomicU64, &AtomicU64) {
        let slot = &self.slots()[i & self.mask as usize];
        (&*self.hdr().tail, &*self.hdr().head, &slot.seq)
    }

    /// The position the next CQE will take: every CQE reserved so far is below it.
    pub(crate) fn tail(&self) -> u64 {
        self.hdr().tail.load(Ordering::Acquire)
    }

    /// Whether no producer has reserved a position the consumer has not passed: the ring
    /// holds nothing, and nothing is on its way. Lock-free, for any thread: a head read
    /// late only makes the answer `false` (conservative), and a reservation made after
    /// the tail is read is a completion that arrived after this look.
    #[inline]
    pub(crate) fn nothing_reserved(&self) -> bool {
        let h = self.hdr().head.load(Ordering::Relaxed);
        self.tail() == h
    }

    /// Whether nothing is published at the consumer's position: one load of the slot the
    /// next completion will be written to, the line its producer hands over anyway, and
    /// not of `tail`, which a poller spinning on an empty CQ would otherwise take from the
    /// producer at each of its reservations. A reservation not yet published reads as
    /// empty (use [`Ring::nothing_reserved`] to see it). Lock-free, for any thread.
    #[inline]
    pub(crate) fn nothing_published(&self) -> bool {
        // Acquire: what the consumer that stored this `head` did before (a resize moving
        // the completions out marks its segment first) is visible to the caller's next
        // loads.
        let h = self.hdr().head.load(Ordering::Acquire);
        // An older lap's position (or 0): not published for `h` yet. Without a panic path
        // (`get`, not an index: the C entry point's empty poll runs outside the panic
        // guard); a slot that is not there, which cannot happen, reads as "look closer".
        self.slots().get((h & self.mask) as usize).is_some_and(|s| s.seq.load(Ordering::Relaxed) <= h)
    }

    /// The consumer's position if a producer reserved it and has not published it yet
    /// (what [`Ring::pop`] reported `Empty` for although later positions may be ready).
    /// Consumer only.
    pub(crate) fn stalled_at(&self) -> Option<u64> {
        let h = self.hdr().head.load(Ordering::Relaxed);
        (self.tail() > h && self.slot(h).seq.load(Ordering::Acquire) != h + 1).then_some(h)
    }

    /// Whether the CQE reserved at position `pos` is published and its slot not yet
    /// reused: its sequence word says so. (A slot the consumer passed keeps the word until
    /// a producer reserves it again a lap later: `tail > pos + capacity`.) Any thread.
    pub(crate) fn published_at(&self, pos: u64) -> bool {
        pos != u64::MAX && self.slot(pos).seq.load(Ordering::Acquire) == pos + 1
    }

    /// Moves the consumer past position `h`, reserved by a producer that died before
    /// publishing it (the caller checked that no live producer is inside the CQ, after
    /// [`Ring::stalled_at`] returned `h`); `false` if `h` was published meanwhile or the
    /// consumer is elsewhere. Consumer only.
    pub(crate) fn skip(&self, h: u64) -> bool {
        if h == u64::MAX || self.hdr().head.load(Ordering::Relaxed) != h || self.slot(h).seq.load(Ordering::Acquire) == h + 1 {
            return false;
        }
        self.hdr().head.store(h + 1, Ordering::Release);
        true
    }

    /// Reserves a position and never publishes it: a producer killed between the two.
    #[cfg(any(test, rverbs_loom))]
    pub(crate) fn reserve_and_die(&self) {
        self.hdr().tail.fetch_add(1, Ordering::Release);
    }
}


/// The consumer's view of a [`Ring`] for one poll ([`Ring::consumer`]). Only one thread
/// may consume at a time (the caller holds the consumer lock, or the CQ is
/// SINGLE_THREADED).
pub(crate) struct Consumer<'r> {
    ring: &'r Ring,
    hdr: &'r RingHdr,
    slots: &'r [Slot],
    mask: u64,
}

impl Consumer<'_> {
    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot {
        let i = (pos & self.mask) as usize;
        // SAFETY: `slots` has `mask + 1` entries (asserted by `Ring::consumer`, the only
        // constructor), so `i <= mask` is in bounds.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// Removes the CQEs published in a row at the consumer's position, oldest first, into
    /// `out`, until it is full; returns how many it holds. The batched poll's common case
    /// at the cost of the entries alone. `read` decodes a slot's words into an entry of
    /// `out` straight from the ring (a racing overwrite may tear them: it must only
    /// compute, and answer what `keep` needs); `keep` then decides, once the seqlock's
    /// check says the words were whole, whether the entry stays (`false`: the caller drops
    /// it, and the next one takes its place). `head` is read once and stored once, at the
    /// end (as a NIC's consumer index is written once per `ibv_poll_cq`). Only a slot whose
    /// `seq` is exactly its position plus one, and stays so across the copy, is taken: it
    /// stops at anything else (nothing published, a slot overwritten or being rewritten,
    /// scribbled indices), leaving that position to [`Consumer::pop_skipping`], which
    /// knows what to do with it.
    #[inline(always)]
    pub(crate) fn pop_published<T, R>(
        &self,
        out: &mut [T],
        read: impl Fn(&SlotWords, &mut T) -> R,
        mut keep: impl FnMut(R, u64) -> bool,
    ) -> usize {
        let start = self.hdr.head.load(Ordering::Relaxed);
        let mut h = start;
        let mut n = 0;
        // No producer reaches the last position (a head there was scribbled): `h + 1`
        // does not overflow below it.
        while n < out.len() && h < u64::MAX {
            let slot = self.slot(h);
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 != h + 1 {
                break;
            }
            let r = read(&slot.data, &mut out[n]);
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != s1 {
                // Torn by an overwriting producer: `pop_skipping` resynchronises.
                break;
            }
            if keep(r, h) {
                n += 1;
            }
            h += 1;
        }
        if h != start {
            self.hdr.head.store(h, Ordering::Release);
        }
        n
    }

    /// Removes the oldest published CQE, if any (module doc: the consumer's protocol),
    /// leaving data word `skip` 0 instead of loading it (a word the caller does not read;
    /// `usize::MAX`: none). The seqlock's check covers the words loaded.
    ///
    /// `check_tail`: an empty answer also reads `tail`, to find a `head` scribbled past
    /// every reservation ([`Pop::Corrupt`]). A poll that already removed completions
    /// passes `false` and leaves the check to a poll that finds nothing: `tail` is the
    /// line every producer's reservation writes, and a consumer that read it at the end
    /// of each poll draining the CQ would make each reservation from another process
    /// take it back first (BENCHMARKS.md, "A poll that drains the CQ leaves `tail`
    /// alone").
    #[inline(always)]
    pub(crate) fn pop_skipping(&self, skip: usize, check_tail: bool) -> Pop {
        let cap = self.mask + 1;
        let mut h = self.hdr.head.load(Ordering::Relaxed);
        loop {
            // No producer reaches the last position (2^64 CQEs): a head there was
            // scribbled, and `h + 1` would overflow.
            if h == u64::MAX {
                self.hdr.head.store(self.ring.tail(), Ordering::Release);
                return Pop::Corrupt;
            }
            let slot = self.slot(h);
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 == 0 || s1 < h + 1 {
                // Not yet published (or being rewritten while still unread): empty for now.
                if h != self.hdr.head.load(Ordering::Relaxed) {
                    self.hdr.head.store(h, Ordering::Release);
                }
                // A `head` beyond every position reserved was scribbled: nothing will be
                // published there (a producer that knows it has room does not read `head`
                // to find out).
                if !check_tail {
                    return Pop::Empty;
                }
                let t = self.ring.tail();
                if h > t {
                    self.hdr.head.store(t, Ordering::Release);
                    return Pop::Corrupt;
                }
                return Pop::Empty;
            }
            if s1 > h + 1 {
                // Overwritten (IGNORE_OVERRUN): the slot now holds a newer position p.
                // Everything older than p - cap + 1 is lost; skip to the oldest survivor.
                // A p that is not this slot's, or not a whole lap ahead, was never written
                // by a producer: skipping to it would loop for ever.
                let p = s1 - 1;
                if p & self.mask != h & self.mask || p < cap || p >= self.ring.tail() {
                    self.hdr.head.store(self.ring.tail(), Ordering::Release);
                    return Pop::Corrupt;
                }
                h = p + 1 - cap;
                continue;
            }
            let mut out = [0u64; DATA_WORDS];
            for (i, (o, w)) in out.iter_mut().zip(&slot.data).enumerate() {
                if i != skip {
                    *o = w.load(Ordering::Relaxed);
                }
            }
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != s1 {
                // Torn by an overwriting producer: retry at the same position, which
                // will now report the newer entry and resynchronise.
                continue;
            }
            self.hdr.head.store(h + 1, Ordering::Release);
            return Pop::Entry(out, h);
        }
    }
}

#[cfg(all(test, not(rverbs_loom)))]
mod tests {
    use super::*;

    fn cqe(n: u64) -> [u64; DATA_WORDS] {
        [n, n * 2, 0, 0, 0, 0, n + 7]
    }

    fn pop_n(r: &Ring) -> Option<u64> {
        match r.pop() {
            Pop::Entry(e, _) => {
                assert_eq!(e[1], e[0] * 2);
                assert_eq!(e[6], e[0] + 7);
                Some(e[0])
            }
            Pop::Empty => None,
            Pop::Corrupt => panic!("corrupt ring"),
        }
    }

    /// `Consumer::pop_published` of ring `r` into `out`, dropping the entries whose first
    /// word `drop` names; the first words of those kept.
    fn pop_run(r: &Ring, out: &mut [[u64; DATA_WORDS]], drop: &[u64]) -> Vec<u64> {
        let read = |w: &[AtomicU64; DATA_WORDS], o: &mut [u64; DATA_WORDS]| {
            for (o, w) in o.iter_mut().zip(w) {
                *o = w.load(Ordering::Relaxed);
            }
            o[0]
        };
        let n = r.consumer().pop_published(out, read, |first, _| !drop.contains(&first));
        out[..n].iter().map(|e| e[0]).collect()
    }

    // A peer marks the receive it completes as completed from inside the publish
    // (`Target::complete_marking`), with the position its CQE is at: a producer that dies
    // before the mark leaves the receive to the QP's flush, and one that dies between the
    // mark and the publish leaves a position `published_at` says is not published (the
    // flush completes that receive too). So the mark must come once the words are written
    // and before the CQE is visible, with its position, and never for a CQE refused.
    #[test]
    fn push_marking_marks_between_the_words_and_the_publish_and_not_when_refused() {
        let r = Ring::new(2);
        let marks = std::cell::Cell::new(0);
        let before = |pos| {
            marks.set(marks.get() + 1);
            assert_eq!(pos, 0, "the position reserved");
            let (tail, head, seq) = r.raw_words(0);
            assert_eq!(tail.load(Ordering::Relaxed), 1, "reserved");
            assert_eq!(seq.load(Ordering::Relaxed), 0, "not published yet");
            assert!(!r.published_at(0));
            assert_eq!(r.slot(0).data[6].load(Ordering::Relaxed), 7, "the words are written");
            assert_eq!(head.load(Ordering::Relaxed), 0);
        };
        r.push_marking(&cqe(0), false, before).unwrap();
        assert_eq!(marks.get(), 1);
        assert!(r.published_at(0));
        assert_eq!(pop_n(&r), Some(0));
        assert!(r.published_at(0), "consumed, its slot not reused yet");
        r.push(&cqe(1), false).unwrap();
        r.push_marking(&cqe(2), false, |pos| assert_eq!(pos, 2)).unwrap();
        assert!(!r.published_at(0), "its slot reused a lap later");
        assert_eq!(r.push_marking(&cqe(3), false, |_| marks.set(marks.get() + 1)), Err(PushError::Full));
        assert_eq!(marks.get(), 1, "no mark for a CQE the ring refused");
        r.reserve_and_die();
        assert!(!r.published_at(3), "reserved by a producer that died");
        assert!(!r.published_at(u64::MAX));
    }

    #[test]
    fn pop_published_takes_a_run_in_order_and_stores_head_once() {
        let r = Ring::new(8);
        for i in 0..6 {
            r.push(&cqe(i), false).unwrap();
        }
        let mut out = [[0; DATA_WORDS]; 3];
        assert_eq!(pop_run(&r, &mut out, &[]), [0, 1, 2], "stops when `out` is full");
        assert_eq!(r.len(), 3);
        // A dropped entry is consumed, and the next takes its place.
        assert_eq!(pop_run(&r, &mut out, &[4]), [3, 5]);
        assert_eq!(r.len(), 0);
        assert!(pop_run(&r, &mut out, &[]).is_empty(), "nothing published");
        r.push(&cqe(6), false).unwrap();
        assert_eq!(pop_n(&r), Some(6), "the one-at-a-time pop goes on from the same head");
    }

    #[test]
    fn pop_published_leaves_what_is_not_plainly_published_to_pop_skipping() {
        // A reservation not published: the run stops before it, and leaves what follows.
        let r = Ring::new(4);
        r.push(&cqe(0), false).unwrap();
        r.reserve_and_die();
        r.push(&cqe(2), false).unwrap();
        let mut out = [[0; DATA_WORDS]; 4];
        assert_eq!(pop_run(&r, &mut out, &[]), [0]);
        assert_eq!(r.len(), 2);
        // Overwritten (IGNORE_OVERRUN): the slot at `head` holds a newer lap; the run takes
        // nothing and `pop_skipping` resynchronises to the oldest survivor.
        let r = Ring::new(2);
        for i in 0..4 {
            r.push(&cqe(i), true).unwrap();
        }
        assert!(pop_run(&r, &mut out, &[]).is_empty());
        assert_eq!(pop_n(&r), Some(2));
        assert_eq!(pop_run(&r, &mut out, &[]), [3]);
        // Scribbled: a head at the last position, which no producer reaches.
        let r = Ring::new(4);
        r.hdr().head.store(u64::MAX, Ordering::Relaxed);
        assert!(pop_run(&r, &mut out, &[]).is_empty());
        assert_eq!(r.pop(), Pop::Corrupt);
    }

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(Ring::new(1).capacity(), 1);
        assert_eq!(Ring::new(3).capacity(), 4);
        assert_eq!(Ring::new(2000).capacity(), 2048);
    }

    #[test]
    fn pop_returns_oldest_first_and_removes() {
        let r = Ring::new(8);
        for i in 0..5 {
            r.push(&cqe(i), false).unwrap();
        }
        assert_eq!(r.len(), 5);
        for i in 0..5 {
            assert_eq!(pop_n(&r), Some(i));
        }
        assert_eq!(pop_n(&r), None);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn scribbled_indices_fail_instead_of_spinning() {
        let r = Ring::new(4);
        r.push(&cqe(0), false).unwrap();
        // Another process moved `head` beyond every reserved position: the consumer finds
        // out, and resynchronises at the tail.
        r.hdr().head.store(1000, Ordering::Relaxed);
        assert_eq!(r.pop(), Pop::Corrupt);
        r.push(&cqe(1), false).unwrap();
        assert_eq!(pop_n(&r), Some(1));
        // So does a producer that reads `head` (a lap after the position it last saw).
        let r = Ring::new(4);
        for i in 0..4 {
            r.push(&cqe(i), false).unwrap();
        }
        r.hdr().head.store(1000, Ordering::Relaxed);
        assert_eq!(r.push(&cqe(4), false), Err(PushError::Corrupt));
        // A slot claiming a position that is not its own.
        let r = Ring::new(4);
        r.push(&cqe(0), false).unwrap();
        r.slot(0).seq.store(1000, Ordering::Relaxed);
        assert_eq!(r.pop(), Pop::Corrupt);
        assert_eq!(r.pop(), Pop::Empty, "resynchronised at the tail");
        r.push(&cqe(1), false).unwrap();
        assert_eq!(pop_n(&r), Some(1));
    }

    /// A poll that already removed completions does not read `tail` (`check_tail`
    /// false): a scribbled `head` reads as empty there, and the next poll that asks finds
    /// it, with the same resynchronisation.
    #[test]
    fn a_scribbled_head_is_found_by_the_pop_that_checks_tail() {
        let r = Ring::new(4);
        r.push(&cqe(0), false).unwrap();
        r.hdr().head.store(1000, Ordering::Relaxed);
        assert_eq!(r.consumer().pop_skipping(usize::MAX, false), Pop::Empty);
        assert_eq!(r.hdr().head.load(Ordering::Relaxed), 1000, "nothing resynchronised without the check");
        assert_eq!(r.consumer().pop_skipping(usize::MAX, true), Pop::Corrupt);
        r.push(&cqe(1), false).unwrap();
        assert_eq!(pop_n(&r), Some(1));
    }

    #[test]
    fn a_reservation_never_published_is_skipped_only_when_asked() {
        let r = Ring::new(4);
        r.push(&cqe(0), false).unwrap();
        r.reserve_and_die();
        r.push(&cqe(2), false).unwrap();
        assert_eq!(pop_n(&r), Some(0));
        assert_eq!(r.stalled_at(), Some(1));
        // Stuck behind the hole until the owner skips it.
        assert_eq!(pop_n(&r), None);
        assert!(!r.skip(0), "not where the consumer is");
        assert!(r.skip(1));
        assert_eq!(pop_n(&r), Some(2));
        assert_eq!(r.stalled_at(), None);
        // A published position is never skipped.
        r.push(&cqe(3), false).unwrap();
        assert!(!r.skip(3));
        assert_eq!(pop_n(&r), Some(3));
        // The ring goes on round the laps, past the skipped slot.
        for i in 4..20 {
            r.push(&cqe(i), false).unwrap();
            assert_eq!(pop_n(&r), Some(i));
        }
    }

    #[test]
    fn indices_scribbled_to_the_last_position_are_corrupt_not_an_overflow() {
        // Found by the `shm_segments` fuzz target: a head of u64::MAX overflowed `h + 1`
        // (a panic in a build with overflow checks, in the process polling the CQ).
        let r = Ring::new(4);
        let (tail, head, seq) = r.raw_words(3);
        head.store(u64::MAX, Ordering::Relaxed);
        seq.store(5, Ordering::Relaxed);
        assert_eq!(r.pop(), Pop::Corrupt);
        assert_eq!(r.pop(), Pop::Empty, "the consumer resynchronised");
        tail.store(u64::MAX, Ordering::Relaxed);
        head.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(r.push(&cqe(1), false), Err(PushError::Corrupt));
        assert_eq!(r.push(&cqe(1), true), Err(PushError::Corrupt));
    }

    #[test]
    fn full_ring_refuses_without_overwrite() {
        let r = Ring::new(4);
        for i in 0..4 {
            r.push(&cqe(i), false).unwrap();
        }
        assert_eq!(r.push(&cqe(4), false), Err(PushError::Full));
        assert_eq!(pop_n(&r), Some(0));
        r.push(&cqe(4), false).unwrap();
        for i in 1..5 {
            assert_eq!(pop_n(&r), Some(i));
        }
    }

    #[test]
    fn overwrite_loses_oldest_and_keeps_order() {
        let r = Ring::new(4);
        for i in 0..10 {
            r.push(&cqe(i), true).unwrap();
        }
        // The four newest survive, oldest first.
        for i in 6..10 {
            assert_eq!(pop_n(&r), Some(i));
        }
        assert_eq!(pop_n(&r), None);
        r.push(&cqe(10), true).unwrap();
        assert_eq!(pop_n(&r), Some(10));
    }

    #[test]
    fn wraps_many_times() {
        let r = Ring::new(4);
        for i in 0..if cfg!(miri) { 50 } else { 1000 } {
            r.push(&cqe(i), false).unwrap();
            if i % 3 == 2 {
                while pop_n(&r).is_some() {}
            }
        }
    }

    #[test]
    fn concurrent_producers_deliver_every_entry_exactly_once() {
        use std::sync::Arc;
        let r = Arc::new(Ring::new(64));
        const PER: u64 = if cfg!(miri) { 50 } else { 20_000 };
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let n = p * PER + i;
                        while r.push(&cqe(n), false).is_err() {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut seen = vec![false; (2 * PER) as usize];
        let mut last = [None::<u64>; 2];
        let mut got = 0;
        while got < 2 * PER {
            if let Some(n) = pop_n(&r) {
                assert!(!seen[n as usize], "duplicate {n}");
                seen[n as usize] = true;
                // Each producer's entries arrive in its own order.
                let p = (n / PER) as usize;
                assert!(last[p].is_none_or(|l| l < n));
                last[p] = Some(n);
                got += 1;
            } else {
                std::hint::spin_loop();
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn concurrent_overwrite_never_yields_torn_entries() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let r = Arc::new(Ring::new(2));
        let stop = Arc::new(AtomicBool::new(false));
        let prod = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) && i < if cfg!(miri) { 500 } else { 2_000_000 } {
                    r.push(&cqe(i), true).unwrap();
                    i += 1;
                }
            })
        };
        let mut last = None;
        for _ in 0..if cfg!(miri) { 200 } else { 200_000 } {
            // pop_n asserts the entry is internally consistent (not torn).
            if let Some(n) = pop_n(&r) {
                assert!(last.is_none_or(|l| l < n), "out of order: {last:?} then {n}");
                last = Some(n);
            }
        }
        stop.store(true, Ordering::Relaxed);
        prod.join().unwrap();
    }
}

/// Exhaustive interleavings of the ring protocol (run with
/// `RUSTFLAGS="--cfg rverbs_loom" cargo test -p rverbs --release --lib rings::completion_ring`).
#[cfg(all(test, rverbs_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Runs `f` under loom with a preemption bound, which keeps the spin-and-yield
    /// loops of these models tractable (loom's documented practice).
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    fn cqe(n: u64) -> [u64; DATA_WORDS] {
        [n, n ^ 0xff, n, n, n, n, n]
    }

    fn consistent(e: &[u64; DATA_WORDS]) -> bool {
        e[1] == e[0] ^ 0xff && e[2..].iter().all(|&w| w == e[0])
    }

    #[test]
    fn two_producers_one_consumer_deliver_each_entry_once() {
        model(|| {
            let r = Arc::new(Ring::new(2));
            let hs: Vec<_> = (1..=2u64)
                .map(|n| {
                    let r = r.clone();
                    loom::thread::spawn(move || r.push(&cqe(n), false).unwrap())
                })
                .collect();
            let mut got = vec![];
            while got.len() < 2 {
                match r.pop() {
                    Pop::Entry(e, _) => {
                        assert!(consistent(&e));
                        got.push(e[0]);
                    }
                    Pop::Empty => loom::thread::yield_now(),
                    Pop::Corrupt => panic!("the protocol never corrupts the ring"),
                }
            }
            for h in hs {
                h.join().unwrap();
            }
            got.sort_unstable();
            assert_eq!(got, vec![1, 2]);
            assert_eq!(r.pop(), Pop::Empty);
        });
    }

    #[test]
    fn full_ring_refuses_until_the_consumer_frees_a_slot() {
        model(|| {
            let r = Arc::new(Ring::new(1));
            r.push(&cqe(1), false).unwrap();
            let r2 = r.clone();
            let consumer = loom::thread::spawn(move || r2.pop());
            let pushed = r.push(&cqe(2), false).is_ok();
            let popped = consumer.join().unwrap();
            assert!(matches!(popped, Pop::Entry(e, _) if e[0] == 1));
            if pushed {
                assert!(matches!(r.pop(), Pop::Entry(e, _) if e[0] == 2));
            }
        });
    }

    /// The consumer's loop of `cq::CqInner::pop_live` and `unstick`: pops until an entry
    /// comes, skipping an unpublished reservation when no producer `alive` says is alive
    /// is inside the gate; `may_skip` false asserts no skip ever happens.
    fn first_entry(r: &Ring, g: &crate::rings::producer_gate::Gate, alive: &dyn Fn(u32, u32) -> bool, may_skip: bool) -> u64 {
        loop {
            match r.pop() {
                Pop::Entry(e, _) => return e[0],
                Pop::Empty => {
                    if let Some(h) = r.stalled_at() {
                        if !g.live_inside(alive) {
                            let skipped = r.skip(h);
                            assert!(may_skip || !skipped, "skipped a live producer's reservation");
                        }
                    }
                    loom::thread::yield_now();
                }
                Pop::Corrupt => panic!("the protocol never corrupts the ring"),
            }
        }
    }

    /// The owner skips a reservation only when no live producer is inside the CQ's gate
    /// (`rings::producer_gate`): a live producer between reserving and publishing is never skipped,
    /// and its entry is delivered once.
    #[test]
    fn a_live_producers_reservation_is_never_skipped() {
        use crate::rings::producer_gate::{Gate, Producer};
        model(|| {
            let r = Arc::new(Ring::new(2));
            let g = Arc::new(Gate::new());
            let who = Producer { ep: 1, pid: 5 };
            let (r2, g2) = (r.clone(), g.clone());
            let p = loom::thread::spawn(move || {
                assert!(g2.enter(who));
                r2.push(&cqe(1), false).unwrap();
                g2.leave(who);
            });
            let alive = |ep, pid| (ep, pid) == (1, 5);
            assert_eq!(first_entry(&r, &g, &alive, false), 1);
            p.join().unwrap();
            assert_eq!(r.pop(), Pop::Empty);
        });
    }

    /// A producer that died between reserving and publishing (still counted in the gate
    /// under its pid) does not hold back the completions published after it.
    #[test]
    fn a_dead_producers_reservation_is_skipped() {
        use crate::rings::producer_gate::{Gate, Producer};
        model(|| {
            let r = Arc::new(Ring::new(2));
            let g = Arc::new(Gate::new());
            let dead = Producer { ep: 2, pid: 9 };
            assert!(g.enter(dead));
            r.reserve_and_die();
            let who = Producer { ep: 1, pid: 5 };
            let (r2, g2) = (r.clone(), g.clone());
            let p = loom::thread::spawn(move || {
                if g2.enter(who) {
                    r2.push(&cqe(2), false).unwrap();
                    g2.leave(who);
                }
            });
            let alive = |ep, pid| (ep, pid) == (1, 5);
            assert_eq!(first_entry(&r, &g, &alive, true), 2);
            p.join().unwrap();
        });
    }

    /// A one-slot ring and a producer that overwrites it with entries 1 and 2.
    fn overwriting_producer() -> (Arc<Ring>, loom::thread::JoinHandle<()>) {
        let r = Arc::new(Ring::new(1));
        let r2 = r.clone();
        let p = loom::thread::spawn(move || {
            for n in 1..=2 {
                r2.push(&cqe(n), true).unwrap();
            }
        });
        (r, p)
    }

    #[test]
    fn overwriting_producer_never_lets_pop_published_keep_a_torn_entry() {
        model(|| {
            let (r, p) = overwriting_producer();
            let read = |w: &[AtomicU64; DATA_WORDS], o: &mut [u64; DATA_WORDS]| {
                for (o, w) in o.iter_mut().zip(w) {
                    *o = w.load(Ordering::Relaxed);
                }
            };
            let mut last = 0;
            for _ in 0..3 {
                let mut out = [[0; DATA_WORDS]; 2];
                let mut kept = Vec::new();
                let n = r.consumer().pop_published(&mut out, read, |(), pos| {
                    kept.push(pos);
                    true
                });
                assert_eq!(n, kept.len());
                for e in &out[..n] {
                    assert!(consistent(e), "torn entry {e:?}");
                    assert!(e[0] > last, "reordered: {} after {last}", e[0]);
                    last = e[0];
                }
                if n == 0 {
                    if let Pop::Entry(e, _) = r.pop() {
                        assert!(consistent(&e) && e[0] > last, "pop after an empty run: {e:?}");
                        last = e[0];
                    }
                }
            }
            p.join().unwrap();
        });
    }

    #[test]
    fn overwriting_producer_never_hands_out_torn_or_reordered_entries() {
        model(|| {
            let (r, p) = overwriting_producer();
            let mut last = 0;
            for _ in 0..3 {
                if let Pop::Entry(e, _) = r.pop() {
                    assert!(consistent(&e), "torn entry {e:?}");
                    assert!(e[0] > last);
                    last = e[0];
                }
            }
            p.join().unwrap();
        });
    }
}
