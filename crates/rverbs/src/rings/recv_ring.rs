//! Receive queues: a QP's own, or a shared receive queue's.
//!
//! Rule: ibv_post_recv(3): each work request names at most `max_recv_sge` entries
//! (EINVAL) and the queue holds at most `max_recv_wr` (ENOMEM); the first refused
//! request is reported and the ones before it stay posted. Receives are consumed in
//! order by inbound SENDs and RDMA WRITEs with immediate.
//!
//! The queue is a ring in a shared segment (`rq-<qpn>-<gen>` or `srq-<srqn>-<gen>` in the
//! endpoint directory): the owner posts into it, and whoever delivers a message — a
//! thread of this process or a peer process — takes the oldest receive out of it, under
//! a lock in the segment that survives the death of its holder ([`ShmLock`]).
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::mr::endpoint::Endpoint;
use crate::mr::Sge;
use crate::mr::domain::PdCore;
use crate::rings::bounce::{self, Bounce};
use crate::rings::cq_segment::CqAt;
use crate::rings::kept::{self, Holds, Kept};
use crate::rings::recv_count::{self, TakenCount};
use crate::rings::wr::{PostError, RecvWr};
use crate::shm::lock::ShmLock;
use crate::shm::{Segment, ShmSafe};
use crate::spin::SpinMutex;
use crossbeam_utils::CachePadded;
use smallvec::SmallVec;

/// Largest scatter list a receive (or send) work request can have on this device.
pub(crate) const MAX_SGE: usize = crate::limits::MAX_SGE as usize;

/// Scatter entries a taken receive keeps inline ([`RecvWqe`]).
const INLINE_SGES: usize = 4;

/// A receive work request taken off the queue.
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    sges: smallvec::SmallVec<[Sge; INLINE_SGES]>,
    /// Taken by a tag-matching SRQ: how the message is delivered (`rings::tag_list`).
    pub(crate) tm: Option<crate::rings::tm_recv::TmRecv>,
    /// Taken from a ring: the ring's tag and the receives ever taken from it, this one
    /// included, which its completion carries to the queue's owner (`rings::recv_count`,
    /// `rings::kept`).
    pub(crate) taken: Option<TakenCount>,
    /// Taken to be placed after the take (the queued way): counted in the ring until
    /// dropped, so that the QP's destroy waits for the placement ([`RecvRing::close`]).
    _placing: Option<Placing>,
}

impl RecvWqe {
    pub(crate) fn new(wr_id: u64, sges: smallvec::SmallVec<[Sge; INLINE_SGES]>) -> Self {
        RecvWqe { wr_id, sges, tm: None, taken: None, _placing: None }
    }

    /// Counts the receive as being placed in `ring` ([`RecvRing::count_placing`]) unless
    /// its take counted it already; `false` if `ring` is closed (its SRQ destroyed, or
    /// replaced by a resize: the caller counts in the current generation instead).
    pub(crate) fn count_in(&mut self, ring: &RecvRing) -> bool {
        if self._placing.is_none() {
            self._placing = ring.count_placing();
        }
        self._placing.is_some()
    }

    /// The count its completion carries to the queue's owner: its take's, unless a
    /// tag-matching SRQ matched it (that completion's word carries the tag instead). A
    /// matched receive is a tagged buffer of the SRQ's list, never a take from its ring,
    /// so it has no count to carry; the ring's receives a TM-SRQ hands unexpected,
    /// NO_TAG and untagged messages carry theirs as any SRQ's do.
    pub(crate) fn completion_count(&self) -> Option<TakenCount> {
        use crate::rings::tm_recv::TmRecv;
        self.taken.filter(|_| !matches!(self.tm, Some(TmRecv::Eager { .. } | TmRecv::Rndv { .. })))
    }

    pub(crate) fn sges(&self) -> &[Sge] {
        &self.sges
    }

    /// Its completion is about to be published, at `at` ([`Placing::completing`]; nothing
    /// for a receive placed inside its take).
    pub(crate) fn completing(&self, at: CqAt) {
        if let Some(p) = &self._placing {
            p.completing(at);
        }
    }

    /// Total bytes the scatter list can take.
    pub(crate) fn capacity(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length)).sum()
    }
}

/// The ring's header, at byte 0 of the segment: three cache lines, so that the owner
/// posting and a peer taking share no line but the slot itself, then the records of the
/// takes being placed ([`RqTakes`]). `tail` counts the receives ever posted and is
/// written only by the owner's posts; `head` counts those ever taken and is written only
/// under `lock` (a taker, or the owner draining). The queue holds `tail - head` receives
/// at slots `head % cap ..`.
#[repr(C)]
#[derive(Default)]
struct RqHdr {
    config: RqConfig,
    takers: RqTakers,
    poster: RqPoster,
    takes: RqTakes,
}

/// The ring's geometry and rarely written words (the tag: written once, by the owner).
#[repr(C, align(64))]
#[derive(Default)]
struct RqConfig {
    cap: AtomicU32,
    max_sge: AtomicU32,
    /// SRQ limit (0: not armed); disarmed by the take that goes below it.
    limit: AtomicU32,
    /// An SRQ that was resized: the generation that replaced this segment.
    moved: AtomicU32,
    /// The owner's tag of the ring, which a take writes into the receive's completion
    /// with the count taken (`rings::recv_count`).
    tag: AtomicU32,
    /// Take records after the slots ([`RqTakes`]): an SRQ's ring has one a slot.
    more_records: AtomicU32,
}

/// What takers write: the lock they take under, and how many receives were taken. One
/// store moves `head`, so a taker that dies while holding the lock leaves a consistent
/// queue (the next taker takes the lock over).
#[repr(C, align(64))]
#[derive(Default)]
struct RqTakers {
    lock: ShmLock,
    /// Receives taken whose message is still being placed ([`Placing`]), and
    /// [`CLOSED`] once the QP's destroy closed the ring.
    placing: AtomicU32,
    head: AtomicU64,
    /// The count taken (`head` after the take) of the last receive taken to be placed
    /// whose completion its taker was about to publish ([`Placing::completing`]): a dead
    /// taker's receives are reclaimed only past it ([`RecvRing::reclaim_placing`]), and
    /// it too if its completion never became visible (`completed_at`).
    completed: AtomicU64,
    /// Who took the last receive taken by the queued way or a peer's express lane, as
    /// `pid << 32 | endpoint number`: the one taker of a QP's own queue, whose death
    /// [`RecvRing::reclaim_placing`] asks about by pid as well (an endpoint number is
    /// claimed again by the next process that opens the device, at once).
    taker: AtomicU64,
    /// The count taken (`head` after the take) of the last receive a peer's express lane
    /// took from a QP's own queue ([`Counted::Express`]): placed before the take,
    /// completed after it, and counted in no `placing`; the taker marks `completed` with
    /// it right before publishing the completion ([`RecvRing::express_completing`]), so
    /// one above `completed` is a take whose completion its taker may not have published.
    express: AtomicU64,
    /// Records ever claimed, as the index of the highest + 1 ([`RqTakes`]): the owner's
    /// reclaims look no further, so records never used stay unread (and their pages
    /// uncommitted).
    records_used: AtomicU64,
    /// Where the completion of the take `completed` names is ([`CqAt`]), stored right
    /// before `completed`: a taker that dies between its mark and its publish leaves a
    /// position the CQ shows unpublished ([`RecvRing::reclaim_placing`]).
    completed_at: AtomicU64,
}

/// `placing` bit: the ring is closed (its QP destroyed): nothing is taken any more.
const CLOSED: u32 = 1 << 31;

/// How long [`RecvRing::close`] waits for the placements under way: a taker that died
/// while placing never leaves (its count stays), nor does garbage another process wrote.
const PLACING_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A receive being placed by whoever took it (this process or a peer): counted in the
/// ring's `placing` from the take, under the ring's lock, until dropped — after the
/// message's bytes were copied and its completion published.
pub(crate) struct Placing {
    seg: Arc<Segment>,
    /// The count taken with this receive (`head` after its take); 0 for a placement
    /// counted without a take of this ring ([`RecvRing::count_placing`]).
    taken: u64,
    /// The take's record ([`TakeRecord`]) as its byte offset in the segment; 0 for none
    /// (byte 0 holds the ring's geometry, never a record).
    record: usize,
}

impl Placing {
    /// The receive's completion is about to be published, at `at`: marked in the ring,
    /// so that a taker that dies after publishing it and before dropping this does not
    /// have the receive flushed a second time, and one that dies before the publish does
    /// ([`RecvRing::reclaim_placing`], [`RecvRing::reclaim_recorded`]).
    fn completing(&self, at: CqAt) {
        let h = self.seg.get::<RqHdr>(0);
        if self.taken != 0 {
            h.takers.completed_at.store(at.0, Ordering::Relaxed);
            h.takers.completed.store(self.taken, Ordering::Release);
        }
        if let Some(r) = self.record() {
            r.mark_done(at);
        }
    }

    fn record(&self) -> Option<&TakeRecord> {
        (self.record != 0).then(|| self.seg.get::<TakeRecord>(self.record))
    }
}

impl Drop for Placing {
    fn drop(&mut self) {
        // Freed before the count goes: a record is never reclaimed after its take was
        // uncounted (a taker that dies in between leaves a count the destroy waits for).
        if let Some(r) = self.record() {
            r.free();
        }
        self.seg.get::<RqHdr>(0).takers.placing.fetch_sub(1, Ordering::Release);
    }
}

/// What the owner's posts write: how many receives were ever posted, stored (Release)
/// after the slot it publishes.
#[repr(C, align(64))]
#[derive(Default)]
struct RqPoster {
    tail: AtomicU64,
}

/// Takes of a shared receive queue being placed, each recorded with its taker and the QP
/// it is for, so that the receive a taker that died was placing can be completed by that
/// QP's flush ([`RecvRing::reclaim_recorded`]): an SRQ is taken from by many peers at once,
/// so the order of its takes cannot tell whose a receive being placed is, as it does for
/// a QP's own queue ([`RecvRing::reclaim_placing`]). These [`TAKE_RECORDS`] in the header
/// come first; an SRQ's ring has one more per slot after its slots
/// ([`RqConfig::more_records`]), so that as many takes as the ring holds receives, and
/// more, can be placed at once, each recorded (a receive's slot is free for the next post
/// from its take on, so no count of records bounds the takes being placed: one that
/// finds every record in use goes unrecorded, lost if its taker dies while placing it,
/// as before records existed: docs/failure-model.md).
#[repr(C, align(64))]
#[derive(Default)]
struct RqTakes {
    records: [TakeRecord; TAKE_RECORDS],
}

/// Whether the completion a mark names at `at` ([`CqAt`] as stored) became visible, as
/// `published` says; a mark with no place ([`CqAt::UNKNOWN`]: this process's own take, or
/// a peer's word that names none) counts as visible, so a receive is never completed
/// twice.
fn visible(at: u64, published: impl FnOnce(CqAt) -> bool) -> bool {
    at == CqAt::UNKNOWN.0 || published(CqAt(at))
}

/// Records in a ring's header.
const TAKE_RECORDS: usize = 16;

/// [`TakeRecord::who`] bit (above every endpoint number): the taker is publishing, or has
/// published, the receive's completion.
const DONE: u64 = 1 << 31;

/// [`TakeRecord::who`] bit: an express take ([`Counted::ExpressFor`]), placed inside the
/// take and counted in no `placing`.
const EXPRESS: u64 = 1 << 30;

/// One take being placed: claimed under the ring's lock by the take, marked [`DONE`] by
/// its taker right before it publishes the receive's completion (with where it is,
/// `at`), freed when the taker
/// drops the receive, right before it uncounts it from `placing` (an express take,
/// [`EXPRESS`], is counted in no `placing`: freed once its completion is published).
#[repr(C)]
#[derive(Default)]
pub(crate) struct TakeRecord {
    /// `pid << 32 | endpoint number` of the taker, with [`DONE`] and [`EXPRESS`]; 0: the
    /// record is free.
    who: AtomicU64,
    /// The QP the message is for (low 32 bits), and the low 32 bits of the count taken
    /// with the receive (`head` after the take), which its completion carries
    /// (`rings::recv_count`).
    qpn: AtomicU64,
    wr_id: AtomicU64,
    /// Where the completion is ([`CqAt`]), stored right before [`DONE`].
    at: AtomicU64,
}

impl TakeRecord {
    /// Marked [`DONE`] by its taker, its completion at `at` (only the taker writes a
    /// record it claimed, until it frees it).
    fn mark_done(&self, at: CqAt) {
        self.at.store(at.0, Ordering::Relaxed);
        self.who.store(self.who.load(Ordering::Relaxed) | DONE, Ordering::Release);
    }

    /// Free for the next take.
    fn free(&self) {
        self.who.store(0, Ordering::Release);
    }
}

// SAFETY: atomics only (the three lines and the take records below), every bit pattern
// valid.
unsafe impl ShmSafe for RqHdr {}

// SAFETY: four atomic words, every bit pattern valid.
unsafe impl ShmSafe for TakeRecord {}

/// Bytes of one take record.
const RECORD_BYTES: usize = std::mem::size_of::<TakeRecord>();

const HDR_BYTES: usize = std::mem::size_of::<RqHdr>();

/// Slots a ring has beyond the receives it may hold (512 bytes' worth, at least 2), so
/// that a post to a queue kept full writes a slot taken several takes ago, on a line the
/// taker is done with, not the slot it has just read, whose line holds the next ones it
/// reads (docs/shared-state.md: perftest's `ib_send_lat` 0.66–0.72 → 0.56–0.58 µs).
fn spare_slots(max_sge: usize) -> usize {
    (512 / (slot_words(max_sge) * 8)).max(2)
}

/// Words of one slot: wr_id, num_sge, then (addr, length | lkey << 32) per SGE.
fn slot_words(max_sge: usize) -> usize {
    2 + 2 * max_sge
}

/// The ring geometry a segment header gives (capacity, SGEs per slot), checked against
/// the segment's length `seg_len`: `None` if no ring of the owner's making has it (a peer
/// may have written anything there).
pub(crate) fn geometry(cap: u32, max_sge: u32, seg_len: usize) -> Option<(usize, usize)> {
    let (cap, max_sge) = (cap as usize, max_sge as usize);
    if cap == 0 || max_sge == 0 || max_sge > MAX_SGE {
        return None;
    }
    let bytes = cap.checked_mul(slot_words(max_sge) * 8)?.checked_add(HDR_BYTES)?;
    (bytes <= seg_len).then_some((cap, max_sge))
}

/// Byte offset and words of slot `i` in a ring of `max_sge` SGEs per slot.
pub(crate) fn slot_at(i: usize, max_sge: usize) -> (usize, usize) {
    let w = slot_words(max_sge);
    (HDR_BYTES + i * w * 8, w)
}

/// The slot of the oldest receive and the number queued, from the header's `head` and
/// `tail`, clamped to a ring of `cap` slots (a peer may have written anything: a `tail`
/// behind `head` or more than a lap ahead reads as a full ring).
pub(crate) fn clamp_state(head: u64, tail: u64, cap: usize) -> (usize, usize) {
    ((head % cap as u64) as usize, tail.wrapping_sub(head).min(cap as u64) as usize)
}

/// The receive a slot's words hold (wr_id, num_sge, then the SGEs), at most `max_sge`
/// entries whatever `num_sge` says: a peer could have written any value.
pub(crate) fn read_slot(s: &[AtomicU64], max_sge: usize) -> RecvWqe {
    let n = (s[1].load(Ordering::Relaxed) as usize).min(max_sge).min((s.len() - 2) / 2);
    let sge = |k: usize| {
        let lk = s[3 + 2 * k].load(Ordering::Relaxed);
        Sge { addr: s[2 + 2 * k].load(Ordering::Relaxed), length: lk as u32, lkey: (lk >> 32) as u32 }
    };
    // Up to the inline capacity (every receive of a QP made with max_recv_sge <= 4), the
    // entries go straight into the inline array: collecting through the SmallVec's
    // `extend` measured 99 instructions per receive taken, most of them its growth checks.
    let mut inline = [Sge::default(); INLINE_SGES];
    let sges = if n <= INLINE_SGES {
        for (k, e) in inline.iter_mut().enumerate().take(n) {
            *e = sge(k);
        }
        smallvec::SmallVec::from_buf_and_len(inline, n)
    } else {
        (0..n).map(sge).collect()
    };
    RecvWqe::new(s[0].load(Ordering::Relaxed), sges)
}

/// The name of a QP's receive queue segment.
pub(crate) fn qp_segment_name(qpn: u32, gen: u32) -> String {
    format!("rq-{qpn}-{gen}")
}

/// The name of an SRQ's queue segment.
pub(crate) fn srq_segment_name(srqn: u32, gen: u32) -> String {
    format!("srq-{srqn}-{gen}")
}

/// How a take of a receive is counted until its message's completion is published, so
/// that the ring's owner knows what a taker that died left (docs/failure-model.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Not at all: this process's express lane, for a QP of its own (it cannot die apart
    /// from the owner), places the message inside the take.
    No,
    /// A peer's express lane, from a QP's own queue: the message placed inside the take,
    /// its completion published after it. The take names this process as the taker and
    /// is remembered in `express` (two stores on the line the lock holds), so that the
    /// owner's flush completes the receive should this process die before publishing its
    /// completion ([`RecvRing::reclaim_placing`]); the taker calls
    /// [`RecvRing::express_completing`] right before it publishes.
    Express,
    /// A peer's express lane, from an SRQ, for the QP numbered so: as [`Counted::Express`],
    /// the take recorded ([`RqTakes`], marked [`EXPRESS`]) while a record is free; the
    /// taker marks it [`DONE`] right before publishing the completion and frees it after
    /// ([`RecvRing::express_record_done`]).
    ExpressFor { qpn: u32 },
    /// The queued way: the message placed after the take, which counts in `placing`
    /// until the receive is dropped ([`Placing`]); `for_qp` too: a take of an SRQ by a
    /// peer, for the QP numbered so, recorded with this process as its taker while a
    /// record is free ([`RqTakes`]).
    Placing { for_qp: Option<u32> },
}

/// What a take found.
pub(crate) struct Taken {
    /// The receive, with the count its completion carries ([`RecvWqe::taken`]).
    pub(crate) wqe: RecvWqe,
    /// This take crossed the armed SRQ limit (raise SRQ_LIMIT_REACHED).
    pub(crate) limit_fired: bool,
}

/// A receive ring in a segment, as its owner or a peer maps it.
pub(crate) struct RecvRing {
    seg: Arc<Segment>,
    /// This process's endpoint: who holds the ring's lock, and who is still alive.
    me: &'static Endpoint,
    cap: usize,
    max_sge: usize,
    /// The indices this process last read, in its own memory (boxed: a line each).
    seen: Box<Seen>,
}

/// What a process keeps of a ring in its own memory: the indices it last read, so that it
/// reads the other side's line only when what it knows is used up; the ring's tag; the
/// receives the owner may queue.
#[derive(Default)]
struct Seen {
    /// A `tail` this process's takers read (Acquire), used under the ring's lock only:
    /// while the queue holds receives below it, a take does not read the owner's line.
    tail: CachePadded<AtomicU64>,
    /// A `head` the owner's posts read (Acquire), used by posts only (which the owner
    /// serialises): while a post is less than a lap ahead of it, it does not read the
    /// takers' line.
    head: CachePadded<AtomicU64>,
    /// The ring's tag (`rings::recv_count`): the owner's, or as a peer read it (here, in
    /// the ring's one box of process memory, rather than beside `cap`).
    tag: u32,
    /// The receives the owner may queue (`max_recv_wr`; ENOMEM beyond): fewer than the
    /// ring's slots ([`spare_slots`]). A peer's view holds the slot count.
    max: usize,
    /// The record (its byte offset; 0: none) of this process's last take as
    /// [`Counted::ExpressFor`], until [`RecvRing::express_record_done`] frees it.
    express_record: AtomicUsize,
    /// The take records after the slots ([`RqTakes`]): their byte offset and number.
    more_records: (usize, usize),
}

impl std::fmt::Debug for RecvRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvRing").field("cap", &self.cap).field("max_sge", &self.max_sge).finish()
    }
}

impl RecvRing {
    fn mapped(seg: Arc<Segment>, me: &'static Endpoint, cap: usize, max_sge: usize, tag: u32, max: usize) -> RecvRing {
        // The records after the slots, as many as the header says and the segment holds
        // (a peer may have written anything there).
        let at = HDR_BYTES + cap * slot_words(max_sge) * 8;
        let room = seg.len().saturating_sub(at) / RECORD_BYTES;
        let more = (seg.get::<RqHdr>(0).config.more_records.load(Ordering::Acquire) as usize).min(room);
        RecvRing { seg, me, cap, max_sge, seen: Box::new(Seen { tag, max, more_records: (at, more), ..Seen::default() }) }
    }

    /// Creates an empty ring of `cap` receives of up to `max_sge` entries at `path`, in
    /// this process's endpoint `me`; `shared`: an SRQ's, with a take record per slot
    /// after the slots ([`RqTakes`]).
    pub(crate) fn create(path: &Path, cap: u32, max_sge: u32, shared: bool, me: &'static Endpoint) -> Result<RecvRing> {
        let max = cap.max(1) as usize;
        let max_sge = max_sge.max(1) as usize;
        let cap = max + spare_slots(max_sge);
        let more = if shared { cap } else { 0 };
        let bytes = HDR_BYTES + cap * slot_words(max_sge) * 8 + more * RECORD_BYTES;
        let seg = Arc::new(Segment::create(path, bytes)?);
        let h = seg.get::<RqHdr>(0);
        let tag = recv_count::next_tag();
        h.config.cap.store(cap as u32, Ordering::Relaxed);
        h.config.tag.store(tag, Ordering::Relaxed);
        h.config.more_records.store(more as u32, Ordering::Relaxed);
        h.config.max_sge.store(max_sge as u32, Ordering::Release);
        Ok(RecvRing::mapped(seg, me, cap, max_sge, tag, max))
    }

    /// A peer's view of a ring another endpoint created, from this process's endpoint `me`.
    pub(crate) fn open(seg: Arc<Segment>, me: &'static Endpoint) -> Result<RecvRing> {
        let h = seg.get::<RqHdr>(0);
        let (cap, max_sge) = geometry(h.config.cap.load(Ordering::Acquire), h.config.max_sge.load(Ordering::Acquire), seg.len())
            .ok_or(Error::Bug("malformed receive queue segment"))?;
        let tag = h.config.tag.load(Ordering::Acquire);
        Ok(RecvRing::mapped(seg, me, cap, max_sge, tag, cap))
    }

    /// The byte offset of take record `i` (below [`TAKE_RECORDS`] plus the records after
    /// the slots): the header's first, then those after the slots ([`RqTakes`]).
    fn record_offset(&self, i: usize) -> usize {
        match i.checked_sub(TAKE_RECORDS) {
            None => std::mem::offset_of!(RqHdr, takes) + i * RECORD_BYTES,
            Some(k) => self.seen.more_records.0 + k * RECORD_BYTES,
        }
    }

    /// The take records that may be in use: the header's, and those after the slots up
    /// to the highest ever claimed (`records_used`, clamped: a peer may have written
    /// anything), so that a reclaim reads no record never used.
    fn used_records(&self) -> impl Iterator<Item = &TakeRecord> {
        let used = self.hdr().takers.records_used.load(Ordering::Acquire).min(usize::MAX as u64) as usize;
        let n = used.clamp(TAKE_RECORDS, TAKE_RECORDS + self.seen.more_records.1);
        (0..n).map(|i| self.seg.get::<TakeRecord>(self.record_offset(i)))
    }

    fn hdr(&self) -> &RqHdr {
        self.seg.get(0)
    }

    fn slot(&self, i: usize) -> &[AtomicU64] {
        let (at, w) = slot_at(i, self.max_sge);
        self.seg.slice(at, w)
    }

    #[inline]
    fn lock(&self) -> crate::shm::lock::ShmGuard<'_> {
        let me = self.me;
        let g = self.hdr().takers.lock.lock(me.ep(), me);
        if let Some(dead) = g.took_over_from() {
            self.undo_uncommitted(dead);
        }
        g
    }

    /// Under the lock taken over from endpoint `dead`, which died inside a take: a take
    /// records itself (its record, its count in `placing`, its taker) before the one
    /// store of `head` that commits it ([`RecvRing::take_counted`]), so a record of
    /// `dead` whose count is `head + 1` names a receive that was never taken, still at
    /// the head of the queue: freed, or the QP's flush would complete that receive while
    /// the next taker takes it too; a queued take's count in `placing` goes with it (an
    /// express take is counted in none). (A taker that died before recording left
    /// nothing; one that died after storing `head` left a take the flush completes.)
    #[cold]
    fn undo_uncommitted(&self, dead: u32) {
        let h = self.hdr();
        let next = h.takers.head.load(Ordering::Relaxed).wrapping_add(1) as u32;
        for r in self.used_records() {
            let who = r.who.load(Ordering::Acquire);
            if who != 0 && who as u32 & !((DONE | EXPRESS) as u32) == dead && (r.qpn.load(Ordering::Relaxed) >> 32) as u32 == next {
                r.free();
                if who & EXPRESS == 0 && h.takers.placing.load(Ordering::Relaxed) & !CLOSED != 0 {
                    h.takers.placing.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.seen.max as u32
    }

    pub(crate) fn max_sge(&self) -> u32 {
        self.max_sge as u32
    }

    /// The ring's tag (`rings::recv_count`).
    pub(crate) fn tag(&self) -> u32 {
        self.seen.tag
    }

    /// Receives queued (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let h = self.hdr();
        clamp_state(h.takers.head.load(Ordering::Acquire), h.poster.tail.load(Ordering::Acquire), self.cap).1
    }

    /// The SRQ limit (0: not armed).
    pub(crate) fn limit(&self) -> u32 {
        self.hdr().config.limit.load(Ordering::Acquire)
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        self.hdr().config.limit.store(limit, Ordering::Release);
    }

    /// The generation that replaced this (resized) SRQ segment, if any.
    pub(crate) fn moved(&self) -> u32 {
        self.hdr().config.moved.load(Ordering::Acquire)
    }

    /// Appends receives; `on_slot(at, wr)` runs for each one stored at position `at`
    /// (slot `at % cap`: the owner keeps its regions alive per slot). The owner's posts
    /// must not run concurrently (the caller serialises them: [`RecvQueue`]'s lock);
    /// takers may.
    ///
    /// Without the ring's lock: the slot is written, then `tail` published (Release), so
    /// a taker that reads `tail` (Acquire) reads the whole slot. The slot is free once
    /// `head` (Acquire: the taker's reads of its last occupant came before) is less than
    /// a lap behind. `heard` is the count of receives taken that the owner's CQ last
    /// polled for this ring (`rings::recv_count`): when it shows room, `head` is not read.
    pub(crate) fn post(
        &self,
        wrs: &[RecvWr<'_>],
        verb: &'static str,
        heard: Option<u32>,
        mut on_slot: impl FnMut(u64, &RecvWr<'_>),
    ) -> Result<(), PostError> {
        let h = self.hdr();
        let (cap, max) = (self.cap as u64, self.seen.max as u64);
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.max_sge {
                let error = Error::TooManySge { max: self.max_sge as u32, got: wr.sg_list.len() as u32 };
                return Err(PostError { index, error });
            }
            let tail = h.poster.tail.load(Ordering::Relaxed);
            if tail.wrapping_sub(self.seen.head.load(Ordering::Acquire)) >= max {
                let head = match heard.map(|c| recv_count::widen(tail, c)) {
                    Some(head) if tail.wrapping_sub(head) < max => head,
                    _ => h.takers.head.load(Ordering::Acquire),
                };
                self.seen.head.store(head, Ordering::Release);
                if tail.wrapping_sub(head) >= max {
                    return Err(PostError { index, error: Error::QueueFull { verb, max: max as u32 } });
                }
            }
            let i = (tail % cap) as usize;
            self.write_slot(i, wr.wr_id, wr.sg_list);
            on_slot(tail, wr);
            h.poster.tail.store(tail.wrapping_add(1), Ordering::Release);
        }
        Ok(())
    }

    /// Takes the oldest receive, if any, to place the message after the take (the
    /// queued way: the receive counts as placing until dropped); also tells whether the
    /// SRQ limit fired.
    pub(crate) fn take(&self) -> Option<Taken> {
        self.take_counted(|_| true, Counted::Placing { for_qp: None })
    }

    /// Takes the oldest receive only if `fits` says so, under the ring's lock (the express
    /// lane places a message into it before committing the take: `docs/queue-pairs.md`);
    /// also tells whether the SRQ limit fired.
    ///
    /// `tail` is read only when the receives known to this process's takers are used up
    /// (`Seen::tail`, kept under the lock, whose Acquire passes on the one that read it).
    pub(crate) fn take_if(&self, fits: impl FnOnce(&RecvWqe) -> bool) -> Option<Taken> {
        self.take_counted(fits, Counted::No)
    }

    /// The receive of this process's last take as [`Counted::Express`] is about to have
    /// its completion published, at `at`: marked in `completed` (a taker that dies from
    /// here on has completed it once the CQ shows `at` published).
    pub(crate) fn express_completing(&self, at: CqAt) {
        let t = &self.hdr().takers;
        t.completed_at.store(at.0, Ordering::Relaxed);
        t.completed.store(t.express.load(Ordering::Relaxed), Ordering::Release);
    }

    /// [`RecvRing::take_if`], the take counted as `how` says ([`Counted`]).
    pub(crate) fn take_counted(&self, fits: impl FnOnce(&RecvWqe) -> bool, how: Counted) -> Option<Taken> {
        let _g = self.lock();
        let h = self.hdr();
        if h.takers.placing.load(Ordering::Relaxed) & CLOSED != 0 {
            return None;
        }
        let head = h.takers.head.load(Ordering::Relaxed);
        let limit = h.config.limit.load(Ordering::Acquire);
        let mut queued = self.seen.tail.load(Ordering::Relaxed).wrapping_sub(head);
        // An armed SRQ limit counts what is left exactly: `tail` is read.
        if queued == 0 || queued > self.cap as u64 || limit != 0 {
            let tail = h.poster.tail.load(Ordering::Acquire);
            self.seen.tail.store(tail, Ordering::Relaxed);
            queued = clamp_state(head, tail, self.cap).1 as u64;
            if queued == 0 {
                return None;
            }
        }
        let wqe = self.read_slot((head % self.cap as u64) as usize);
        if !fits(&wqe) {
            return None;
        }
        let left = queued - 1;
        let taken = head.wrapping_add(1);
        // The take is recorded first (its record, its count, its taker) and committed by
        // the one store of `head` below: a taker that dies in between leaves a record the
        // next holder of the lock undoes ([`RecvRing::undo_uncommitted`]), and counts
        // that name no receive past the last completed one. Stored the other way round, a
        // taker that died after moving `head` left a receive taken and named nowhere,
        // neither queued nor ever completed or flushed (tests/chaos/kill.py's SRQ
        // account found one in some 500 rounds).
        let placing = match how {
            Counted::No => None,
            Counted::Express => {
                h.takers.taker.store(self.who(), Ordering::Relaxed);
                h.takers.express.store(taken, Ordering::Relaxed);
                None
            }
            Counted::ExpressFor { qpn } => {
                let record = self.record_take(qpn, taken as u32, wqe.wr_id, EXPRESS);
                self.seen.express_record.store(record, Ordering::Relaxed);
                None
            }
            Counted::Placing { for_qp } => {
                h.takers.placing.fetch_add(1, Ordering::Relaxed);
                h.takers.taker.store(self.who(), Ordering::Relaxed);
                let record = for_qp.map_or(0, |qpn| self.record_take(qpn, taken as u32, wqe.wr_id, 0));
                Some(Placing { seg: self.seg.clone(), taken, record })
            }
        };
        h.takers.head.store(taken, Ordering::Release);
        let limit_fired = limit != 0 && (left < u64::from(limit)) && {
            h.config.limit.store(0, Ordering::Release);
            true
        };
        let wqe = RecvWqe { taken: Some(TakenCount::new(self.seen.tag, taken as u32)), _placing: placing, ..wqe };
        Some(Taken { wqe, limit_fired })
    }

    /// Claims a free record for a take of receive `wr_id` by this process for QP `qpn`,
    /// the `taken`-th of the ring, under the ring's lock (which every claim holds), its
    /// taker word with `flags`: its byte offset, or 0 if none is free. The lowest free
    /// record is claimed, so the records in use stay few to read.
    fn record_take(&self, qpn: u32, taken: u32, wr_id: u64, flags: u64) -> usize {
        let h = self.hdr();
        let free = |i: &usize| self.seg.get::<TakeRecord>(self.record_offset(*i)).who.load(Ordering::Acquire) == 0;
        let Some(i) = (0..TAKE_RECORDS + self.seen.more_records.1).find(free) else {
            tracing::debug!("every take record of a shared receive queue is in use: this take goes unrecorded");
            return 0;
        };
        if i >= TAKE_RECORDS && h.takers.records_used.load(Ordering::Relaxed) <= i as u64 {
            h.takers.records_used.store(i as u64 + 1, Ordering::Relaxed);
        }
        let at = self.record_offset(i);
        let r = self.seg.get::<TakeRecord>(at);
        r.qpn.store(u64::from(qpn) | u64::from(taken) << 32, Ordering::Relaxed);
        r.wr_id.store(wr_id, Ordering::Relaxed);
        r.who.store(self.who() | flags, Ordering::Release);
        at
    }

    /// The completion of this process's last take as [`Counted::ExpressFor`] is about to
    /// be published at `at`: its record is marked [`DONE`].
    pub(crate) fn express_record_completing(&self, at: CqAt) {
        let record = self.seen.express_record.load(Ordering::Relaxed);
        if record != 0 {
            self.seg.get::<TakeRecord>(record).mark_done(at);
        }
    }

    /// The completion of this process's last take as [`Counted::ExpressFor`] was
    /// published (or refused): its record is freed, for the next take.
    pub(crate) fn express_record_done(&self) {
        let record = self.seen.express_record.swap(0, Ordering::Relaxed);
        if record != 0 {
            self.seg.get::<TakeRecord>(record).free();
        }
    }

    /// This process as a taker: `pid << 32 | endpoint number`.
    fn who(&self) -> u64 {
        u64::from(self.me.pid) << 32 | u64::from(self.me.ep())
    }

    /// The receives of a shared receive queue's ring that takers now dead took for QP
    /// `qpn` (for any QP: `None`) and were still placing, as their records name them
    /// ([`RqTakes`]; `alive(ep, pid)` says whether the process of a record lives): their
    /// wr_ids with the counts their completions carry. They, and the takes such a taker
    /// had completed without uncounting them yet (marked [`DONE`]: not named, so never
    /// completed twice, unless `published` says the CQ never showed the completion the
    /// mark points at: the taker died between its mark and its publish), count as placed
    /// no more.
    ///
    /// Rule: ibv_modify_qp(3) to ERR completes every outstanding receive of the QP in
    /// error — a NIC flushes the receive a message was arriving into with the QP's other
    /// work — and once ibv_destroy_qp(3) or ibv_destroy_srq(3) returned nothing is placed
    /// into the receives any more, which a dead taker never does.
    pub(crate) fn reclaim_recorded(&self, qpn: Option<u32>, alive: impl Fn(u32, u32) -> bool, published: impl Fn(CqAt) -> bool) -> Vec<(u64, TakenCount)> {
        let _g = self.lock();
        let h = self.hdr();
        let mut ids = Vec::new();
        for r in self.used_records() {
            let (who, for_qp) = (r.who.load(Ordering::Acquire), r.qpn.load(Ordering::Relaxed));
            if who == 0 || qpn.is_some_and(|q| for_qp as u32 != q) || alive((who & !(DONE | EXPRESS)) as u32, (who >> 32) as u32) {
                continue;
            }
            if who & DONE == 0 || !visible(r.at.load(Ordering::Relaxed), &published) {
                ids.push((r.wr_id.load(Ordering::Relaxed), TakenCount::new(self.seen.tag, (for_qp >> 32) as u32)));
            }
            r.free();
            // An express take was never counted. Never below 0, whatever a peer wrote.
            if who & EXPRESS == 0 {
                let _ = h.takers.placing.fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| (p & !CLOSED != 0).then(|| p - 1));
            }
        }
        ids
    }

    /// Stores a receive in slot `i` (at most `max_sge` entries: the caller checked).
    ///
    /// A word that already holds its value is not stored again: a program that posts the
    /// same receive again and again (perftest: one buffer, one wr_id) finds its values in
    /// the slot from the lap before, and a line left unwritten stays in the cache of the
    /// peer that takes from it, which then reads it without fetching it from this core.
    fn write_slot(&self, i: usize, wr_id: u64, sges: &[Sge]) {
        let s = self.slot(i);
        let put = |w: &AtomicU64, v: u64| {
            if w.load(Ordering::Relaxed) != v {
                w.store(v, Ordering::Relaxed);
            }
        };
        put(&s[0], wr_id);
        put(&s[1], sges.len() as u64);
        for (k, sge) in sges.iter().enumerate() {
            put(&s[2 + 2 * k], sge.addr);
            put(&s[3 + 2 * k], u64::from(sge.length) | u64::from(sge.lkey) << 32);
        }
    }

    fn read_slot(&self, i: usize) -> RecvWqe {
        read_slot(self.slot(i), self.max_sge)
    }

    /// Removes every receive, oldest first, returning their wr_ids.
    pub(crate) fn drain(&self) -> Vec<u64> {
        let _g = self.lock();
        self.drain_locked()
    }

    /// [`RecvRing::drain`], the lock held.
    fn drain_locked(&self) -> Vec<u64> {
        let h = self.hdr();
        let head = h.takers.head.load(Ordering::Relaxed);
        let (at, count) = clamp_state(head, h.poster.tail.load(Ordering::Acquire), self.cap);
        let out = (0..count).map(|k| self.slot((at + k) % self.cap)[0].load(Ordering::Relaxed)).collect();
        h.takers.head.store(head.wrapping_add(count as u64), Ordering::Release);
        out
    }

    /// Offers each receive queued and not taken to `f`, oldest first, with its position;
    /// a receive `f` gives an SGE for gets that SGE as its scatter list. Under the
    /// takers' lock: no take reads a receive while it changes.
    pub(crate) fn rewrite_queued(&self, mut f: impl FnMut(u64, &RecvWqe) -> Option<Sge>) {
        let _g = self.lock();
        let h = self.hdr();
        let head = h.takers.head.load(Ordering::Relaxed);
        let (_, count) = clamp_state(head, h.poster.tail.load(Ordering::Acquire), self.cap);
        for at in head..head.wrapping_add(count as u64) {
            let i = (at % self.cap as u64) as usize;
            let w = self.read_slot(i);
            if let Some(sge) = f(at, &w) {
                self.write_slot(i, w.wr_id, &[sge]);
            }
        }
    }

    /// Closes the ring for good (ibv_destroy_qp(3)): removes every receive, as
    /// [`RecvRing::drain`], and refuses every take from now on. Returns the wr_ids
    /// removed. [`RecvRing::wait_placed`] then waits for the receives taken before.
    pub(crate) fn close(&self) -> Vec<u64> {
        let _g = self.lock();
        self.hdr().takers.placing.fetch_or(CLOSED, Ordering::Relaxed);
        self.drain_locked()
    }

    /// The receives a taker that died took and was still placing (ibv_modify_qp(3) to
    /// ERR: every outstanding receive completes, in error): their wr_ids, oldest first,
    /// and they count as placed no more. Only for a ring one taker takes from in order —
    /// a QP's own receive queue, whose connected peer delivers one message at a time —
    /// so that those still placing are the last ones taken, at the positions just before
    /// `head`, after the last one whose completion the taker marked as about to be
    /// published (`completed`: a taker that dies between that and uncounting the receive
    /// has completed it, if `published` says the CQ shows that completion at
    /// `completed_at`; one that died between its mark and its publish has not, and the
    /// marked one is among them, once), and the last one a peer's express lane took if
    /// its completion was not marked (`express`); `alive(ep, pid)`, asked only if some
    /// are, says whether the process that took last (`taker`) lives. A slot the owner has
    /// posted into again since (a full lap of the ring later) names another receive and
    /// is left out.
    pub(crate) fn reclaim_placing(&self, alive: impl FnOnce(u32, u32) -> bool, published: impl FnOnce(CqAt) -> bool) -> Vec<u64> {
        let _g = self.lock();
        let h = self.hdr();
        let placing = h.takers.placing.load(Ordering::Acquire) & !CLOSED;
        let head = h.takers.head.load(Ordering::Relaxed);
        let completed = h.takers.completed.load(Ordering::Acquire);
        // A peer's express take whose completion was not marked: the last one taken
        // (the taker's send queue runs one request at a time through the lane).
        let express = h.takers.express.load(Ordering::Relaxed);
        let open = express != 0 && express == head && completed < express;
        // The last receive marked, if its completion never became visible: its taker is
        // publishing it, or died between its mark and its publish.
        let lost = completed != 0 && completed <= head && !visible(h.takers.completed_at.load(Ordering::Relaxed), published);
        let taker = h.takers.taker.load(Ordering::Relaxed);
        if (placing == 0 && !open && !lost) || alive(taker as u32, (taker >> 32) as u32) {
            return Vec::new();
        }
        if lost {
            // Named once.
            h.takers.completed_at.store(CqAt::UNKNOWN.0, Ordering::Relaxed);
        }
        let tail = h.poster.tail.load(Ordering::Acquire);
        let cap = self.cap as u64;
        // Within the last lap of posts (a slot posted into again names another receive)
        // and below `tail` as well as `head`: at most `cap` positions, whatever a peer
        // wrote into these words.
        let lap = tail.saturating_sub(cap - 1);
        let first = head.saturating_sub(u64::from(placing) + u64::from(open)).max(completed).max(lap);
        // The marked one first (it was taken before those), at position `completed - 1`.
        let marked = (lost && completed > lap && completed <= tail).then(|| completed - 1);
        let ids = marked.into_iter().chain(first..head.min(tail)).map(|at| self.slot((at % cap) as usize)[0].load(Ordering::Relaxed)).collect();
        h.takers.placing.fetch_sub(placing, Ordering::AcqRel);
        if open {
            h.takers.express.store(0, Ordering::Relaxed);
        }
        ids
    }

    /// Counts a placement into a receive that was not taken from this ring — a tagged
    /// buffer a tag-matching SRQ's list matched (`rings::tag_list`) — as a take counts
    /// its own ([`Placing`]); `None` once the ring is closed (the SRQ destroyed, or this
    /// generation replaced by a resize): the message must not be counted here then. The
    /// count and the close are read-modify-writes of one word, so either the close sees
    /// the count (and the destroy waits for it), or the count sees the close.
    pub(crate) fn count_placing(&self) -> Option<Placing> {
        let placing = &self.hdr().takers.placing;
        if placing.fetch_add(1, Ordering::AcqRel) & CLOSED != 0 {
            placing.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Placing { seg: self.seg.clone(), taken: 0, record: 0 })
    }

    /// Receives taken from this ring whose messages are still being placed ([`Placing`]).
    pub(crate) fn placing(&self) -> u32 {
        self.hdr().takers.placing.load(Ordering::Acquire) & !CLOSED
    }

    /// Waits until no receive taken from this ring is being placed any more (at most
    /// [`PLACING_WAIT`], for a taker that died while placing).
    ///
    /// Rule: once ibv_destroy_qp(3) returned, the program may free the buffers its
    /// receives named: no message is placed into them any more.
    ///
    /// A placement by a peer stopped (a signal, a debugger) in the middle of a copy
    /// through cross-memory attach is waited for while it is stopped: it goes on when it
    /// runs again (`Endpoint::wait_accesses`; its pin of the receive's region counts it).
    pub(crate) fn wait_placed(&self) {
        let placing = &self.hdr().takers.placing;
        if !self.me.wait_accesses(PLACING_WAIT, || placing.load(Ordering::Acquire) & !CLOSED == 0) {
            tracing::warn!("a receive taken from a destroyed QP was still being placed after {PLACING_WAIT:?}");
        }
    }

    /// Moves every receive of `old` (oldest first) into this ring and marks `old` as
    /// replaced by generation `gen` (an SRQ resize; no post of either ring runs
    /// meanwhile). Returns where they were in `old` (head, count), or, leaving both rings
    /// as they were, `Err(count)` if `old` holds more than `max_wr` receives: a post that
    /// looked the queue up before the resize added to what the caller checked.
    pub(crate) fn absorb(&self, old: &RecvRing, gen: u32, max_wr: usize) -> std::result::Result<(usize, usize), usize> {
        let _go = old.lock();
        let _g = self.lock();
        let (oh, h) = (old.hdr(), self.hdr());
        let ohead = oh.takers.head.load(Ordering::Relaxed);
        let (oat, n) = clamp_state(ohead, oh.poster.tail.load(Ordering::Acquire), old.cap);
        if n > max_wr {
            return Err(n);
        }
        let sges = self.max_sge.min(old.max_sge);
        let n = n.min(self.cap);
        for k in 0..n {
            let w = old.read_slot((oat + k) % old.cap);
            self.write_slot(k, w.wr_id, &w.sges()[..w.sges().len().min(sges)]);
        }
        h.config.limit.store(oh.config.limit.load(Ordering::Acquire), Ordering::Relaxed);
        h.takers.head.store(0, Ordering::Relaxed);
        h.poster.tail.store(n as u64, Ordering::Release);
        oh.takers.head.store(oh.poster.tail.load(Ordering::Relaxed), Ordering::Relaxed);
        oh.config.moved.store(gen, Ordering::Release);
        Ok((oat, n))
    }
}

/// The owner's receive queue: the shared ring plus, per slot, the regions the Rust API
/// keeps registered until the receive's completion is polled (`rings::kept`).
pub(crate) struct RecvQueue {
    ring: RecvRing,
    /// Also the posters' lock (ibv_post_recv(3) may be called from several threads): held
    /// for the length of one post, as the send queue's, and released with a Release store
    /// (`crate::spin`: no protocol looks past it; `std::sync::Mutex` released with a
    /// locked exchange, one more per post). Shared with the poll that lets a hold go.
    holds: Arc<Holds>,
}

impl RecvQueue {
    /// A QP's own receive queue at `path`.
    pub(crate) fn new(path: &Path, max_wr: u32, max_sge: u32, me: &'static Endpoint) -> Result<Self> {
        Self::create(path, max_wr, max_sge, false, me)
    }

    /// A shared receive queue's at `path`, with a take record per slot ([`RqTakes`]).
    pub(crate) fn new_shared(path: &Path, max_wr: u32, max_sge: u32, me: &'static Endpoint) -> Result<Self> {
        Self::create(path, max_wr, max_sge, true, me)
    }

    fn create(path: &Path, max_wr: u32, max_sge: u32, shared: bool, me: &'static Endpoint) -> Result<Self> {
        let ring = RecvRing::create(path, max_wr, max_sge, shared, me)?;
        let holds = Arc::new(SpinMutex::new(Kept::new(ring.cap, ring.max_sge)));
        Ok(RecvQueue { ring, holds })
    }

    pub(crate) fn ring(&self) -> &RecvRing {
        &self.ring
    }

    /// Queue capacity.
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.capacity()
    }

    pub(crate) fn max_sge(&self) -> u32 {
        self.ring.max_sge()
    }

    /// Posts receives. With `keys`, each SGE's region is held registered until the
    /// receive's completion is polled, its slot reused or the queue drained or destroyed
    /// (the Rust API's buffer-lifetime guarantee, `rings::kept`: the receive may be
    /// consumed by a peer process, which cannot release it).
    pub(crate) fn post(
        &self,
        wrs: &[RecvWr<'_>],
        keys: Option<&crate::mr::KeyTable>,
        verb: &'static str,
        heard: Option<u32>,
    ) -> Result<(), PostError> {
        let kept = self.holds.lock();
        self.post_locked(kept, wrs, keys, verb, heard)
    }

    /// [`RecvQueue::post`] to an SRQ's queue, unless a resize replaced it (`None`: nothing
    /// posted; post to the queue that replaced it). Checked under the posters' lock,
    /// which the resize holds while it moves the receives out and marks the ring
    /// ([`RecvQueue::absorb`]).
    pub(crate) fn post_unless_replaced(&self, wrs: &[RecvWr<'_>], keys: Option<&crate::mr::KeyTable>, verb: &'static str, heard: Option<u32>) -> Option<Result<(), PostError>> {
        let kept = self.holds.lock();
        if self.ring.moved() != 0 {
            return None;
        }
        Some(self.post_locked(kept, wrs, keys, verb, heard))
    }

    /// [`RecvQueue::post`] with the posters' lock `kept` held.
    fn post_locked(
        &self,
        mut kept: crate::spin::SpinGuard<'_, Kept, false>,
        wrs: &[RecvWr<'_>],
        keys: Option<&crate::mr::KeyTable>,
        verb: &'static str,
        heard: Option<u32>,
    ) -> Result<(), PostError> {
        if keys.is_none() && !kept.listed() {
            // A queue that never held a region (the C library's): no slot to let go of.
            return self.ring.post(wrs, verb, heard, |_, _| {});
        }
        if keys.is_some() {
            kept::list(&self.holds, &mut kept, self.ring.tag());
        }
        let mut gone = Vec::new();
        let r = self.ring.post(wrs, verb, heard, |at, wr| {
            let regions = wr.sg_list.iter().map(|sge| keys.and_then(|t| t.mr(sge.lkey)));
            kept.hold(at, regions, &mut gone);
        });
        drop(kept);
        drop(gone);
        r
    }

    /// The posters' lock, the queue given its slots for receives placed by their owner
    /// first if it has none (a region of the library: a segment file and its key, made
    /// outside the lock).
    fn holds_with_slots(&self, pd: &Arc<PdCore>) -> crate::spin::SpinGuard<'_, Kept, false> {
        let kept = self.holds.lock();
        if kept.has_bounce() {
            return kept;
        }
        drop(kept);
        let made = Bounce::new(pd, self.ring.cap);
        let mut kept = self.holds.lock();
        kept.set_bounce(made);
        kept
    }

    /// [`RecvQueue::post`] of receives of PD `pd` whose writer is another process of the
    /// host: each one into private memory that fits a slot is posted through one and
    /// placed by the poll of its completion (`rings::bounce`; docs/memory.md, "Receives
    /// placed by their owner"); the others as they are.
    pub(crate) fn post_bounced(
        &self,
        wrs: &[RecvWr<'_>],
        keys: Option<&crate::mr::KeyTable>,
        verb: &'static str,
        heard: Option<u32>,
        pd: &Arc<PdCore>,
    ) -> Result<(), PostError> {
        let me = pd.endpoint();
        // Which receives want a slot (their keys checked as the responder would).
        let wanted: SmallVec<[Option<u32>; 8]> =
            wrs.iter().map(|w| bounce::wants(me, pd.id, w.sg_list).filter(|_| w.sg_list.len() <= self.ring.max_sge)).collect();
        if wanted.iter().all(Option::is_none) {
            return self.post(wrs, keys, verb, heard);
        }
        let mut kept = self.holds_with_slots(pd);
        // Under the posters' lock the ring's tail is the next receive's position.
        let tail = self.ring.hdr().poster.tail.load(Ordering::Relaxed);
        let mut slots: SmallVec<[Option<Sge>; 8]> = SmallVec::new();
        if let Some(b) = kept.bounce_mut() {
            for (k, (w, want)) in wrs.iter().zip(&wanted).enumerate() {
                slots.push(want.and_then(|total| b.take(tail.wrapping_add(k as u64), w.sg_list, total)));
            }
        }
        if slots.iter().all(Option::is_none) {
            return self.post_locked(kept, wrs, keys, verb, heard);
        }
        // Polls look the queue up from its receives' completions.
        kept.posted_up_to(tail);
        kept::list(&self.holds, &mut kept, self.ring.tag());
        let posted: SmallVec<[RecvWr<'_>; 8]> = wrs
            .iter()
            .zip(&slots)
            .map(|(w, s)| match s {
                Some(s) => RecvWr { wr_id: w.wr_id, sg_list: std::slice::from_ref(s) },
                None => *w,
            })
            .collect();
        let mut gone = Vec::new();
        let r = self.ring.post(&posted, verb, heard, |at, _| {
            // The regions a pinned post holds are the receive's own (`wrs`), not the slot's.
            let own = &wrs[at.wrapping_sub(tail) as usize];
            let regions = own.sg_list.iter().map(|sge| keys.and_then(|t| t.mr(sge.lkey)));
            kept.hold(at, regions, &mut gone);
        });
        if let (Err(e), Some(b)) = (&r, kept.bounce_mut()) {
            for k in (e.index..wrs.len()).filter(|&k| slots[k].is_some()) {
                b.untake(tail.wrapping_add(k as u64));
            }
        }
        drop(kept);
        drop(gone);
        r
    }

    /// The receives queued and not taken, of PD `pd`, when the QP starts taking requests
    /// from another process of the host (`modify_qp` to RTR): each one [`RecvQueue::post_bounced`]
    /// would post through a slot is moved to one, as if posted now (receives are usually
    /// posted before the QP is connected: ibv_rc_pingpong posts its whole queue in INIT).
    pub(crate) fn bounce_queued(&self, pd: &Arc<PdCore>) {
        let me = pd.endpoint();
        if self.ring.len() == 0 {
            return;
        }
        let mut kept = self.holds_with_slots(pd);
        let Some(b) = kept.bounce_mut() else { return };
        let mut moved = false;
        self.ring.rewrite_queued(|at, w| {
            let total = bounce::wants(me, pd.id, w.sges())?;
            let sge = b.take(at, w.sges(), total)?;
            moved = true;
            Some(sge)
        });
        if moved {
            kept.posted_up_to(self.ring.hdr().poster.tail.load(Ordering::Relaxed));
            kept::list(&self.holds, &mut kept, self.ring.tag());
        }
    }

    /// Takes the oldest receive (this process delivering to itself).
    pub(crate) fn take(&self) -> Option<Taken> {
        self.ring.take()
    }

    /// Removes every receive, oldest first, returning their wr_ids.
    pub(crate) fn drain(&self) -> Vec<u64> {
        let mut kept = self.holds.lock();
        let ids = self.ring.drain();
        let mut gone = Vec::new();
        kept.clear(ids.len(), &mut gone);
        drop(kept);
        drop(gone);
        ids
    }

    /// [`RecvRing::reclaim_placing`] of the queue's ring.
    pub(crate) fn reclaim_placing(&self, alive: impl FnOnce(u32, u32) -> bool, published: impl FnOnce(CqAt) -> bool) -> Vec<u64> {
        self.ring.reclaim_placing(alive, published)
    }

    /// Closes the queue of a QP being destroyed ([`RecvRing::close`]); returns the wr_ids
    /// removed. The slots of receives placed by their owner stay until
    /// [`RecvQueue::park_placed`].
    pub(crate) fn close(&self) -> Vec<u64> {
        let mut kept = self.holds.lock();
        let ids = self.ring.close();
        let mut gone = Vec::new();
        kept.clear(ids.len(), &mut gone);
        drop(kept);
        drop(gone);
        ids
    }

    /// The QP's destroy closed the queue and waited for the messages being placed
    /// ([`RecvRing::wait_placed`]): the slots of receives placed by their owner go, before
    /// the QP's PD can be deallocated, and the messages of those taken whose completions
    /// are not polled yet wait for their polls (`rings::bounce`, [`Bounce::park`]).
    pub(crate) fn park_placed(&self) {
        let mut kept = self.holds.lock();
        let slots = kept.close_bounce();
        let region = slots.map(|(b, tail)| (*b).park(self.ring.tag(), tail));
        drop(kept);
        // The slots' region is freed here, after the lock.
        drop(region);
    }

    /// Moves the receives of `old` into this queue (SRQ resize), with the regions they
    /// keep registered; `Err(queued)`, nothing moved, if `old` holds more than `max_wr`
    /// ([`RecvRing::absorb`]: checked here, where no post runs).
    pub(crate) fn absorb(&self, old: &RecvQueue, gen: u32, max_wr: usize) -> std::result::Result<(), usize> {
        // Posts to either queue wait (they hold the posters' locks while they write the
        // ring).
        let mut okept = old.holds.lock();
        let mut kept = self.holds.lock();
        let (ohead, n) = self.ring.absorb(&old.ring, gen, max_wr)?;
        if okept.listed() {
            kept::list(&self.holds, &mut kept, self.ring.tag());
        }
        for k in 0..n {
            kept.move_from(&mut okept, ohead as u64 + k as u64, k as u64);
        }
        Ok(())
    }

    /// Receives queued.
    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }
}

impl Drop for RecvQueue {
    fn drop(&mut self) {
        if self.holds.lock().listed() {
            kept::unlist(self.ring.tag());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(n: u64) -> Sge {
        Sge { addr: n, length: 8, lkey: 1 }
    }

    /// This process's endpoint (the rings' lock holder).
    fn me() -> &'static Endpoint {
        &crate::device::device().endpoint
    }

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rverbs-rq-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A dead taker's receives are reclaimed past the last one whose completion was built
    /// (`transport::deliver::of_receive` marks it in the ring), and only while counted as
    /// placing; a living taker's never.
    #[test]
    fn reclaim_takes_what_a_dead_taker_was_placing_past_its_last_completion() {
        use crate::rings::wc::Cqe;
        use rverbs_proto::verbs::WcStatus;
        let d = dir("reclaim");
        let rq = RecvQueue::new(&d.join("q"), 4, 1, me()).unwrap();
        let s = [sge(1)];
        let wrs: Vec<RecvWr<'_>> = (1..=4).map(|i| RecvWr::new(i, &s)).collect();
        rq.post(&wrs, None, "post_recv", None).unwrap();
        // Receive 1 taken and completed: its completion built and published (marked from
        // inside the publish, `Target::complete_marking`), then the take dropped.
        let one = rq.take().unwrap().wqe;
        let cqe = crate::transport::deliver::of_receive(Cqe::error(1, 9, WcStatus::Success, 0), Some(&one));
        assert_eq!(cqe.rq_taken.map(|t| t.count()), Some(1));
        one.completing(CqAt::UNKNOWN);
        drop(one);
        assert!(rq.reclaim_placing(|_, _| panic!("asked with nothing placing"), |_| true).is_empty());
        // Receive 2 being placed: a living taker keeps it; a dead one's (its drop never
        // runs) is reclaimed and uncounted.
        std::mem::forget(rq.take().unwrap().wqe);
        assert!(rq.reclaim_placing(|_, _| true, |_| true).is_empty(), "a living taker keeps its receive");
        assert_eq!(rq.ring().placing(), 1);
        let taker = |ep, pid| {
            assert_eq!((ep, pid), (me().ep(), me().pid), "asked about the process that took");
            false
        };
        assert_eq!(rq.reclaim_placing(taker, |_| true), vec![2], "a dead taker's");
        assert_eq!(rq.ring().placing(), 0, "uncounted");
        // Receive 3's completion marked before its taker died: it was published.
        let three = rq.take().unwrap().wqe;
        three.completing(CqAt::UNKNOWN);
        std::mem::forget(three);
        assert_eq!(rq.reclaim_placing(|_, _| false, |_| true), Vec::<u64>::new(), "completed before the death");
        assert_eq!(rq.ring().placing(), 0);
        // Words a peer scribbled: a count of receives placing and a head far beyond what
        // was posted name at most a lap of slots, read at once.
        let takers = &rq.ring().hdr().takers;
        let head = takers.head.load(Ordering::Relaxed);
        takers.head.store(u64::MAX / 2, Ordering::Relaxed);
        takers.placing.store(!CLOSED, Ordering::Relaxed);
        assert!(rq.reclaim_placing(|_, _| false, |_| true).len() <= rq.ring().cap, "a lap at most");
        assert_eq!(rq.ring().placing(), 0);
        takers.head.store(head, Ordering::Relaxed);
        // A peer's express take (placed inside the take, completed after it): reclaimed
        // from a dead taker until it marked its completion, and once.
        let t = rq.ring().take_counted(|_| true, Counted::Express).unwrap();
        assert_eq!((t.wqe.wr_id, rq.ring().placing()), (4, 0));
        assert!(rq.reclaim_placing(|_, _| true, |_| true).is_empty(), "a living taker completes it");
        assert_eq!(rq.reclaim_placing(|_, _| false, |_| true), vec![4], "a dead one's");
        assert!(rq.reclaim_placing(|_, _| false, |_| true).is_empty(), "once");
        rq.post(&[RecvWr::new(5, &s), RecvWr::new(6, &s)], None, "post_recv", None).unwrap();
        let _ = rq.ring().take_counted(|_| true, Counted::Express).unwrap();
        rq.ring().express_completing(CqAt::UNKNOWN);
        assert!(rq.reclaim_placing(|_, _| false, |_| true).is_empty(), "its completion marked before the death");
        assert_eq!(rq.drain(), vec![6]);
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    // A take records itself, then commits with one store of `head`. A taker in another
    // process that died in between (holding the ring's lock) left a record of a receive
    // still at the head of the queue: the next holder of the lock frees it, so the QP's
    // flush does not complete that receive while the next taker takes it too. Before the
    // order was the other way round, and a taker that died after moving `head` left a
    // receive taken and recorded nowhere (tests/chaos/kill.py's SRQ account).
    #[test]
    fn a_take_whose_taker_died_before_committing_it_is_undone_by_the_next_holder_of_the_lock() {
        let d = dir("uncommitted");
        let rq = RecvQueue::new(&d.join("q"), 4, 1, me()).unwrap();
        let s = [sge(1)];
        let wrs: Vec<RecvWr<'_>> = (1..=3).map(|i| RecvWr::new(i, &s)).collect();
        rq.post(&wrs, None, "post_recv", None).unwrap();
        let ring = rq.ring();
        // Endpoint 250: nobody's (a process that exited); its take of receive 1 for QP 7
        // recorded with the count 1, `head` still 0, the lock still its.
        let dead_ep = 250u64;
        let r = &ring.hdr().takes.records[0];
        r.qpn.store(7 | 1 << 32, Ordering::Relaxed);
        r.wr_id.store(1, Ordering::Relaxed);
        r.who.store(u64::from(u32::MAX - 1) << 32 | dead_ep, Ordering::Relaxed);
        ring.hdr().takers.placing.store(1, Ordering::Relaxed);
        ring.hdr().takers.lock.set_word(dead_ep as u32 + 1);
        let dead = |_, _| false;
        assert_eq!(ring.reclaim_recorded(Some(7), dead, |_| true), vec![], "nothing was taken");
        assert_eq!(r.who.load(Ordering::Relaxed), 0, "the record is free");
        assert_eq!(ring.placing(), 0, "its count in placing goes with it");
        assert_eq!(ring.take().unwrap().wqe.wr_id, 1, "receive 1 is still at the head");
        std::fs::remove_dir_all(&d).unwrap();
    }

    // A taker marks its take as completing, with where its completion is, right before
    // the one store that publishes the completion. One killed between the two left a
    // receive marked as completed whose completion nobody ever saw: the CQ's owner
    // skipped the dead producer's reservation (its warning: "a process died while
    // completing to this CQ"), and the QP's flush, which trusted the mark, completed
    // nothing (tests/chaos/kill.py's SRQ account: a receive "neither in it, nor completed,
    // nor flushed", about one SRQ round in 2 500). Now the flush asks the CQ whether the
    // place the mark names was published: not, and the receive is flushed, once; a
    // living taker keeps it.
    #[test]
    fn a_take_marked_as_completing_whose_completion_never_became_visible_is_reclaimed() {
        let d = dir("unpublished");
        let s = [sge(1)];
        let mine = (me().ep(), me().pid);
        let dead = |ep, pid| (ep, pid) != mine;
        let at = CqAt::new(3, 41);
        let unpublished = |a: CqAt| {
            assert_eq!(a, at, "asked about the place the mark names");
            false
        };
        // A QP's own queue, the queued way (counted in `placing`) and a peer's express
        // take (counted in none).
        let rq = RecvQueue::new(&d.join("own"), 4, 1, me()).unwrap();
        let wrs: Vec<RecvWr<'_>> = (1..=3).map(|i| RecvWr::new(i, &s)).collect();
        rq.post(&wrs, None, "post_recv", None).unwrap();
        let one = rq.take().unwrap().wqe;
        one.completing(at);
        std::mem::forget(one);
        assert!(rq.reclaim_placing(|_, _| true, unpublished).is_empty(), "a living taker is still publishing it");
        assert_eq!(rq.reclaim_placing(|_, _| false, |_| true), Vec::<u64>::new(), "published before the death");
        let two = rq.take().unwrap().wqe;
        two.completing(at);
        std::mem::forget(two);
        assert_eq!(rq.reclaim_placing(|_, _| false, unpublished), vec![2], "never published");
        assert_eq!(rq.ring().placing(), 0);
        assert!(rq.reclaim_placing(|_, _| false, |_| false).is_empty(), "once");
        let _ = rq.ring().take_counted(|_| true, Counted::Express).unwrap();
        rq.ring().express_completing(at);
        assert_eq!(rq.reclaim_placing(|_, _| false, unpublished), vec![3], "an express take never published");
        assert!(rq.reclaim_placing(|_, _| false, |_| false).is_empty(), "once");
        // An SRQ's recorded takes, the queued way and a peer's express take.
        let srq = RecvQueue::new_shared(&d.join("srq"), 4, 1, me()).unwrap();
        let wrs: Vec<RecvWr<'_>> = (11..=14).map(|i| RecvWr::new(i, &s)).collect();
        srq.post(&wrs, None, "post_recv", None).unwrap();
        let ring = srq.ring();
        let tag = ring.tag();
        for _ in 0..2 {
            let w = ring.take_counted(|_| true, Counted::Placing { for_qp: Some(7) }).unwrap().wqe;
            w.completing(at);
            std::mem::forget(w);
        }
        let ask = std::cell::Cell::new(0);
        let first_unpublished = |a: CqAt| {
            assert_eq!(a, at);
            ask.set(ask.get() + 1);
            ask.get() != 1
        };
        assert_eq!(ring.reclaim_recorded(Some(7), |_, _| true, |_| false), vec![], "living takers keep them");
        assert_eq!(ring.reclaim_recorded(Some(7), dead, first_unpublished), vec![(11, TakenCount::new(tag, 1))], "the one never published");
        assert_eq!(ring.placing(), 0, "both uncounted");
        assert_eq!(ring.reclaim_recorded(Some(7), dead, |_| false), vec![], "once");
        assert_eq!(ring.take_counted(|_| true, Counted::ExpressFor { qpn: 5 }).unwrap().wqe.wr_id, 13);
        ring.express_record_completing(at);
        assert_eq!(ring.reclaim_recorded(Some(5), dead, unpublished), vec![(13, TakenCount::new(tag, 3))]);
        drop((rq, srq));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A take recorded for a QP (a peer's take of an SRQ) is reclaimed for that QP, or for
    /// any, only once its taker is dead: named unless the taker marked it right before
    /// publishing the completion (then only uncounted), and not at all once the taker
    /// dropped the receive; a take that finds every record in use still takes, unrecorded.
    #[test]
    fn recorded_takes_of_a_dead_taker_are_reclaimed_for_their_qp_once() {
        let d = dir("records");
        let n = TAKE_RECORDS as u64 + 8;
        let rq = RecvQueue::new(&d.join("q"), n as u32, 1, me()).unwrap();
        let s = [sge(1)];
        let wrs: Vec<RecvWr<'_>> = (1..=n).map(|i| RecvWr::new(i, &s)).collect();
        rq.post(&wrs, None, "post_recv", None).unwrap();
        let ring = rq.ring();
        let take = |qpn| ring.take_counted(|_| true, Counted::Placing { for_qp: Some(qpn) }).unwrap().wqe;
        let me = (me().ep(), me().pid);
        let dead = |ep, pid| (ep, pid) != me;
        // 1 and 2 taken by a taker that dies while placing them; 3 completed before its
        // taker died; 4 placed and dropped.
        std::mem::forget(take(7));
        std::mem::forget(take(8));
        let three = take(7);
        three.completing(CqAt::UNKNOWN);
        std::mem::forget(three);
        drop(take(7));
        assert_eq!(ring.placing(), 3);
        assert_eq!(ring.reclaim_recorded(Some(7), |ep, pid| (ep, pid) == me, |_| true), vec![], "a living taker keeps its takes");
        let tag = ring.tag();
        // QP 7's: 1 named; 3, completed, uncounted only.
        assert_eq!(ring.reclaim_recorded(Some(7), dead, |_| true), vec![(1, TakenCount::new(tag, 1))], "QP 7's");
        assert_eq!(ring.placing(), 1);
        assert_eq!(ring.reclaim_recorded(Some(7), dead, |_| true), vec![], "once");
        assert_eq!(ring.reclaim_recorded(None, dead, |_| true), vec![(2, TakenCount::new(tag, 2))], "any QP's");
        assert_eq!(ring.placing(), 0);
        // Every record in use: the next take is not refused, only unrecorded.
        let held: Vec<RecvWqe> = (0..TAKE_RECORDS).map(|_| take(9)).collect();
        let extra = take(9);
        assert_eq!(extra.wr_id, 5 + TAKE_RECORDS as u64);
        std::mem::forget(held);
        std::mem::forget(extra);
        let reclaimed: Vec<u64> = ring.reclaim_recorded(Some(9), dead, |_| true).into_iter().map(|(w, _)| w).collect();
        assert_eq!(reclaimed, (5..5 + TAKE_RECORDS as u64).collect::<Vec<_>>());
        assert_eq!(ring.placing(), 1, "the unrecorded take's");
        // A peer's express take of an SRQ (placed inside the take, counted in no
        // `placing`): named for a dead taker until it marked its completion, freed after
        // its completion, and its reclaim leaves `placing` alone.
        let free = |ring: &RecvRing| ring.hdr().takes.records.iter().all(|r| r.who.load(Ordering::Relaxed) == 0);
        assert_eq!(rq.drain(), (22..=n).collect::<Vec<_>>());
        rq.post(&[RecvWr::new(101, &s), RecvWr::new(102, &s), RecvWr::new(103, &s)], None, "post_recv", None).unwrap();
        let express = |ring: &RecvRing| ring.take_counted(|_| true, Counted::ExpressFor { qpn: 5 }).unwrap().wqe.wr_id;
        assert!(free(ring));
        assert_eq!(express(ring), 101);
        assert!(!free(ring), "recorded");
        let named: Vec<u64> = ring.reclaim_recorded(Some(5), dead, |_| true).into_iter().map(|(w, _)| w).collect();
        assert_eq!((named, ring.placing()), (vec![101], 1), "a dead taker's, the count untouched");
        assert_eq!(express(ring), 102);
        ring.express_record_completing(CqAt::UNKNOWN);
        assert_eq!(ring.reclaim_recorded(Some(5), dead, |_| true), vec![], "its completion marked before the death");
        assert!(free(ring), "and the record freed by the reclaim");
        assert_eq!(express(ring), 103);
        ring.express_record_completing(CqAt::UNKNOWN);
        ring.express_record_done();
        assert!(free(ring), "freed once its completion was published");
        assert_eq!(ring.placing(), 1);
        // Records a peer scribbled (any taker, QP and flags): a reclaim names at most one
        // receive each, frees them, and never takes `placing` below 0.
        for (k, r) in ring.hdr().takes.records.iter().enumerate() {
            let flags = [0, DONE, EXPRESS, DONE | EXPRESS][k % 4];
            r.who.store((u64::MAX - k as u64) & !(DONE | EXPRESS) | flags, Ordering::Relaxed);
            r.qpn.store(u64::MAX, Ordering::Relaxed);
        }
        let named = ring.reclaim_recorded(None, |_, _| false, |_| true);
        assert_eq!(named.len(), TAKE_RECORDS / 2, "those not marked done");
        assert!(free(ring), "all freed");
        assert_eq!(ring.placing(), 0, "one count left to take, none below it");
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    // An SRQ's takes being placed were recorded in 16 records a ring: with more placed
    // at once (a peer per QP, each placing one), the 17th went unrecorded and a taker
    // that died placing it lost the receive. An SRQ's ring has a record per slot more.
    #[test]
    fn an_srq_records_as_many_takes_being_placed_as_it_holds_receives() {
        let d = dir("more-records");
        let n = 4 * TAKE_RECORDS as u64;
        let rq = RecvQueue::new_shared(&d.join("q"), n as u32, 1, me()).unwrap();
        let s = [sge(1)];
        let wrs: Vec<RecvWr<'_>> = (1..=n).map(|i| RecvWr::new(i, &s)).collect();
        rq.post(&wrs, None, "post_recv", None).unwrap();
        let ring = rq.ring();
        // A peer's view, as a taker in another process maps the ring.
        let peer = RecvRing::open(Arc::new(Segment::open(&d.join("q")).unwrap()), me()).unwrap();
        for k in 1..=n {
            let how = if k % 2 == 0 { Counted::ExpressFor { qpn: 9 } } else { Counted::Placing { for_qp: Some(9) } };
            std::mem::forget(peer.take_counted(|_| true, how).unwrap().wqe);
        }
        let this = (me().ep(), me().pid);
        let dead = |ep, pid| (ep, pid) != this;
        let reclaimed: Vec<u64> = ring.reclaim_recorded(Some(9), dead, |_| true).into_iter().map(|(w, _)| w).collect();
        assert_eq!(reclaimed, (1..=n).collect::<Vec<_>>(), "every take recorded, flushed in order");
        assert_eq!(ring.placing(), 0);
        assert!(ring.used_records().all(|r| r.who.load(Ordering::Relaxed) == 0), "all freed");
        // What a peer may write there is clamped to the segment: a view made after it
        // and the owner's reclaim read no record outside it.
        ring.hdr().takers.records_used.store(u64::MAX, Ordering::Relaxed);
        ring.hdr().config.more_records.store(u32::MAX, Ordering::Relaxed);
        let scribbled = RecvRing::open(Arc::new(Segment::open(&d.join("q")).unwrap()), me()).unwrap();
        let (at, more) = scribbled.seen.more_records;
        assert!(more < u32::MAX as usize && at + more * RECORD_BYTES <= scribbled.seg.len(), "{more} records at {at}");
        assert_eq!(scribbled.reclaim_recorded(None, dead, |_| true), vec![]);
        assert_eq!(ring.reclaim_recorded(None, dead, |_| true), vec![]);
        // A QP's own queue has none after its slots (its takes are not recorded).
        assert_eq!(RecvQueue::new(&d.join("own"), n as u32, 1, me()).unwrap().ring().seen.more_records.1, 0);
        drop((rq, peer, scribbled));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn post_take_in_order_and_full_is_enomem() {
        let d = dir("order");
        let rq = RecvQueue::new(&d.join("q"), 2, 2, me()).unwrap();
        let a = [sge(1)];
        let b = [sge(2), sge(3)];
        let c = [sge(4)];
        let wrs = [RecvWr::new(1, &a), RecvWr::new(2, &b), RecvWr::new(3, &c)];
        let err = rq.post(&wrs, None, "post_recv", None).unwrap_err();
        assert_eq!(err.index, 2);
        assert_eq!(err.error.errno(), libc::ENOMEM);
        let t = rq.take().unwrap();
        assert_eq!((t.wqe.wr_id, t.wqe.sges(), rq.len()), (1, &a[..], 1));
        let t = rq.take().unwrap();
        assert_eq!((t.wqe.wr_id, t.wqe.sges()), (2, &b[..]));
        assert_eq!(t.wqe.capacity(), 16);
        assert!(rq.take().is_none());
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn receives_of_every_length_around_the_inline_entries_are_taken_as_posted() {
        let d = dir("inline");
        let max = INLINE_SGES + 2;
        let rq = RecvQueue::new(&d.join("q"), 8, max as u32, me()).unwrap();
        let lists: Vec<Vec<Sge>> = (0..=max).map(|n| (0..n as u64).map(|k| Sge { addr: 100 * n as u64 + k, length: k as u32 + 1, lkey: n as u32 }).collect()).collect();
        let wrs: Vec<RecvWr<'_>> = lists.iter().enumerate().map(|(i, l)| RecvWr::new(i as u64, l)).collect();
        rq.post(&wrs, None, "post_recv", None).unwrap();
        for (i, l) in lists.iter().enumerate() {
            let t = rq.take().unwrap();
            assert_eq!((t.wqe.wr_id, t.wqe.sges()), (i as u64, &l[..]), "a receive of {i} entries");
        }
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_slot_claiming_more_entries_than_it_holds_is_read_up_to_max_sge() {
        let words: Vec<AtomicU64> = (0..2 + 2 * 3).map(|_| AtomicU64::new(0)).collect();
        words[0].store(7, Ordering::Relaxed);
        words[1].store(u64::MAX, Ordering::Relaxed);
        for k in 0..3 {
            words[2 + 2 * k].store(10 + k as u64, Ordering::Relaxed);
            words[3 + 2 * k].store(1 | (5u64 << 32), Ordering::Relaxed);
        }
        let wqe = read_slot(&words, 2);
        let want: Vec<Sge> = (0..2).map(|k| Sge { addr: 10 + k, length: 1, lkey: 5 }).collect();
        assert_eq!((wqe.wr_id, wqe.sges()), (7, &want[..]));
        assert_eq!(read_slot(&words, MAX_SGE).sges().len(), 3, "no more than the slot's words");
    }

    #[test]
    fn receives_posted_from_four_threads_at_once_are_each_taken_once() {
        let d = dir("threads");
        let rq = RecvQueue::new(&d.join("q"), 1000, 1, me()).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let rq = &rq;
                s.spawn(move || {
                    for i in 0..250 {
                        let sg = [sge(t * 1000 + i)];
                        rq.post(&[RecvWr::new(t * 1000 + i, &sg)], None, "post_recv", None).unwrap();
                    }
                });
            }
        });
        let mut ids: Vec<u64> = std::iter::from_fn(|| rq.take()).map(|t| {
            assert_eq!(t.wqe.sges(), &[sge(t.wqe.wr_id)], "each slot whole");
            t.wqe.wr_id
        }).collect();
        ids.sort_unstable();
        let want: Vec<u64> = (0..4).flat_map(|t| (0..250).map(move |i| t * 1000 + i)).collect();
        assert_eq!(ids, want);
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn too_many_sges_is_einval() {
        let d = dir("sge");
        let rq = RecvQueue::new(&d.join("q"), 4, 1, me()).unwrap();
        let two = [sge(1), sge(2)];
        let err = rq.post(&[RecvWr::new(1, &two)], None, "post_recv", None).unwrap_err();
        assert_eq!((err.index, err.error.errno()), (0, libc::EINVAL));
        assert_eq!(rq.len(), 0);
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_mapping_takes_what_the_owner_posted_and_the_limit_fires_once() {
        let d = dir("peer");
        let rq = RecvQueue::new(&d.join("q"), 4, 1, me()).unwrap();
        let s = [sge(9)];
        rq.post(&[RecvWr::new(7, &s), RecvWr::new(8, &s), RecvWr::new(9, &s)], None, "post_recv", None).unwrap();
        rq.ring().set_limit(2);
        let peer = RecvRing::open(Arc::new(Segment::open(&d.join("q")).unwrap()), me()).unwrap();
        let t = peer.take().unwrap();
        assert_eq!((t.wqe.wr_id, t.limit_fired, peer.len()), (7, false, 2));
        let t = peer.take().unwrap();
        assert_eq!((t.wqe.wr_id, t.limit_fired, peer.len()), (8, true, 1));
        assert_eq!(rq.ring().limit(), 0, "the limit disarms when it fires");
        assert_eq!(rq.drain(), vec![9]);
        drop((peer, rq));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The takers' `head`, as only a test reads it behind the owner's back.
    fn head_of(r: &RecvRing) -> u64 {
        r.hdr().takers.head.load(Ordering::Acquire)
    }

    #[test]
    fn a_full_queue_posts_on_a_heard_count_without_reading_head_and_refuses_a_count_that_shows_no_room() {
        let d = dir("heard");
        let rq = RecvQueue::new(&d.join("q"), 2, 1, me()).unwrap();
        let s = [sge(1)];
        rq.post(&[RecvWr::new(1, &s), RecvWr::new(2, &s)], None, "post_recv", None).unwrap();
        let peer = RecvRing::open(Arc::new(Segment::open(&d.join("q")).unwrap()), me()).unwrap();
        assert_eq!(peer.tag(), rq.ring().tag(), "a peer reads the owner's tag");
        let t = peer.take().unwrap();
        assert_eq!(t.wqe.taken, Some(TakenCount::new(rq.ring().tag(), 1)));
        // A head the owner must not have read: were the post to read it, it would find
        // the queue full and refuse.
        rq.ring().hdr().takers.head.store(0, Ordering::Release);
        rq.post(&[RecvWr::new(3, &s)], None, "post_recv", t.wqe.taken.map(|t| t.count())).unwrap();
        // A count of no take (ahead of tail, or the one already used) shows no room: `head` decides.
        rq.ring().hdr().takers.head.store(1, Ordering::Release);
        let err = rq.post(&[RecvWr::new(4, &s)], None, "post_recv", Some(7)).unwrap_err();
        assert_eq!(err.error.errno(), libc::ENOMEM);
        let err = rq.post(&[RecvWr::new(4, &s)], None, "post_recv", Some(1)).unwrap_err();
        assert_eq!(err.error.errno(), libc::ENOMEM);
        assert_eq!((peer.take().unwrap().wqe.wr_id, peer.take().unwrap().wqe.wr_id, head_of(&peer)), (2, 3, 3));
        drop((peer, rq));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_full_queue_posts_into_a_spare_slot_not_the_one_just_taken_and_still_holds_max_recv_wr() {
        let d = dir("spare");
        let rq = RecvQueue::new(&d.join("q"), 2, 1, me()).unwrap();
        assert_eq!(rq.capacity(), 2, "the queue reports what was asked");
        let s = [sge(1)];
        let mut slots = Vec::new();
        let cap = rq.ring().cap as u64;
        rq.ring().post(&[RecvWr::new(1, &s), RecvWr::new(2, &s)], "post_recv", None, |at, _| slots.push(at % cap)).unwrap();
        let t = rq.take().unwrap();
        rq.ring().post(&[RecvWr::new(3, &s)], "post_recv", Some(t.wqe.taken.unwrap().count()), |at, _| slots.push(at % cap)).unwrap();
        assert_eq!(slots, [0, 1, 2], "the third receive goes to a spare slot, not slot 0 just taken");
        let err = rq.post(&[RecvWr::new(4, &s)], None, "post_recv", None).unwrap_err();
        assert_eq!((err.error.errno(), rq.len()), (libc::ENOMEM, 2));
        drop(rq);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
