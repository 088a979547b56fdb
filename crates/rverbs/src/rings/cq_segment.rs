//! A completion queue's shared segment: its state and its ring, as every process that
//! completes to it sees them.
//!
//! Layout: [`CqShm`] at byte 0, the producers' [`Gate`] at byte 256, the ring (indices,
//! then slots) from byte 4096. The segment is `cq-<id>-<gen>` in the owner's endpoint directory; a resize
//! creates generation `gen + 1` and leaves a forwarding mark in the old one.
//!
//! Producers (the owner's threads and peers alike) follow one protocol, [`CqSeg::publish`]:
//! enter the gate (counted under their endpoint and pid, unless a resize is under way),
//! publish into the ring, fire the armed notification, leave. A resize stops the gate,
//! waits for the live producers inside to leave, moves the completions to the new
//! generation and records it in `moved`; a producer that meets the resize follows
//! `moved`. A reservation a dead producer left unpublished is skipped by the owner
//! ([`CqSeg::skip_dead`]), so the completions behind it still arrive.
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::rings::producer_gate::{Frozen, Gate, Producer, GATE_BYTES};
use crate::rings::completion_ring::{PushError, Ring};
use crate::error::Result;
use crate::shm::view::View;
use crate::shm::{Segment, ShmSafe};
use crate::rings::wc::{Cqe, CqeWords};

/// Where the [`Gate`] starts (after [`CqShm`]).
const GATE_OFF: usize = 256;
/// Bytes before the ring: [`CqShm`] and the [`Gate`], rounded up to a page.
pub(crate) const SHM_BYTES: usize = 4096;
const _: () = assert!(GATE_OFF + GATE_BYTES <= SHM_BYTES);

/// Where a completion's CQE was reserved, as a receive's mark keeps it in the receive
/// ring's shared words (`rings::recv_ring`, [`CqSeg::published`]): the low 16 bits of the
/// CQ's generation and the low 48 bits of the ring position plus one, in one word (a
/// producer stores it with one plain store on the line it writes anyway); 0: unknown (a
/// completion of this process's own, whose producer does not die alone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CqAt(pub(crate) u64);

const AT_POS_BITS: u32 = 48;
const AT_POS_MASK: u64 = (1 << AT_POS_BITS) - 1;

impl CqAt {
    pub(crate) const UNKNOWN: CqAt = CqAt(0);

    pub(crate) fn new(gen: u32, pos: u64) -> CqAt {
        CqAt(u64::from(gen as u16) << AT_POS_BITS | (pos.wrapping_add(1) & AT_POS_MASK))
    }

    /// Whether it names a position of generation `gen`.
    pub(crate) fn of_gen(self, gen: u32) -> bool {
        self != CqAt::UNKNOWN && (self.0 >> AT_POS_BITS) as u16 == gen as u16
    }

    /// The position it names: the last one below `tail` with its low bits (every position
    /// below `tail` was reserved); `None` for none.
    fn position_below(self, tail: u64) -> Option<u64> {
        let low = (self.0 & AT_POS_MASK).checked_sub(1)?;
        let last = tail.checked_sub(1)?;
        last.checked_sub(last.wrapping_sub(low) & AT_POS_MASK)
    }
}

/// `flags` bit: overwrite the oldest entry instead of failing (IGNORE_OVERRUN).
pub(crate) const FLAG_IGNORE_OVERRUN: u32 = 1;
/// `flags` bit: stamp completions with the device clock.
pub(crate) const FLAG_TIMESTAMPS: u32 = 1 << 1;
/// `notify` bit: armed for the next solicited completion.
pub(crate) const NOTIFY_SOLICITED: u32 = 1;
/// `notify` bit: armed for the next completion.
pub(crate) const NOTIFY_NEXT: u32 = 1 << 1;
/// How long a resize waits for the live producers inside `publish` to leave.
pub(crate) const RESIZE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The shared state of a CQ.
#[repr(C)]
#[derive(Default)]
pub(crate) struct CqShm {
    /// Non-zero once an overrun put the CQ in error.
    pub(crate) errored: AtomicU32,
    /// Arm bits of `req_notify`.
    pub(crate) notify: AtomicU32,
    /// Completion channel id plus one (0: no channel).
    pub(crate) channel: AtomicU32,
    /// `FLAG_*` bits.
    pub(crate) flags: AtomicU32,
    /// The owner's context id (for CQ_ERR).
    pub(crate) ctx: AtomicU32,
    /// The CQ id.
    pub(crate) id: AtomicU32,
    /// Generation that replaced this segment (0: none).
    pub(crate) moved: AtomicU32,
    /// Non-zero from the start of a resize that may move the completions out of this
    /// generation (set before the first leaves): an empty look at this generation
    /// without the consumer lock is then no answer ([`CqSeg::may_be_moving`]). Cleared
    /// if the resize is called off; a generation a resize replaced keeps it.
    pub(crate) moving: AtomicU32,
    /// Ring capacity.
    pub(crate) cap: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<CqShm>() <= SHM_BYTES);

// SAFETY: atomics only.
unsafe impl ShmSafe for CqShm {}

/// The name of generation `gen` of CQ `id`'s segment.
pub(crate) fn name(id: u32, gen: u32) -> String {
    format!("cq-{id}-{gen}")
}

/// What publishing a completion led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// Published; `fire` says the armed notification fired (queue a channel event).
    Done { fire: bool },
    /// The CQ overran (or had already); `first` says this publish put it in error
    /// (raise CQ_ERR).
    Overrun { first: bool },
    /// The CQ was resized: publish into generation `gen` instead.
    Moved(u32),
    /// A resize is under way and this publish, not counted in the gate, stopped before
    /// reserving: the caller leaves the CQ (drops its `grace::Inside` mark, which the
    /// resize waits for) and publishes again ([`CqSeg::publish_uncounted`]).
    Resizing,
}

/// A mapped CQ segment.
pub(crate) struct CqSeg {
    /// The segment, through its header at offset 0 (checked once: every empty poll reads
    /// `errored`).
    shm: View<CqShm>,
    ring: Ring,
    pub(crate) gen: u32,
    /// Under loom the gate lives in process memory, as the ring does (loom's atomics
    /// cannot be placed in a segment; only the models run, the rest has to compile).
    #[cfg(rverbs_loom)]
    gate: Box<Gate>,
}

impl CqSeg {
    /// Creates generation `gen` of CQ `id` in `dir` with room for `min_entries`.
    pub(crate) fn create(dir: &Path, id: u32, gen: u32, min_entries: usize) -> Result<CqSeg> {
        let seg = Arc::new(Segment::create(&dir.join(name(id, gen)), SHM_BYTES + Ring::bytes(min_entries))?);
        let ring = Ring::in_segment(seg.clone(), SHM_BYTES, min_entries);
        let s = CqSeg {
            shm: View::new(&seg, 0),
            ring,
            gen,
            #[cfg(rverbs_loom)]
            gate: Box::new(Gate::new()),
        };
        s.shm().id.store(id, Ordering::Relaxed);
        s.shm().cap.store(s.ring.capacity() as u64, Ordering::Release);
        Ok(s)
    }

    /// A peer's view of an existing segment; `None` if its capacity is not one the
    /// owner can have written (not a power of two, or more slots than the file holds:
    /// another process wrote it), which would index past the mapping.
    pub(crate) fn open(seg: Arc<Segment>, gen: u32) -> Option<CqSeg> {
        let shm = View::<CqShm>::new(&seg, 0);
        let cap = open_capacity(shm.cap.load(Ordering::Acquire), seg.len())?;
        let ring = Ring::in_segment(seg, SHM_BYTES, cap);
        Some(CqSeg {
            shm,
            ring,
            gen,
            #[cfg(rverbs_loom)]
            gate: Box::new(Gate::new()),
        })
    }

    /// Removes the segment's file (a replaced generation).
    pub(crate) fn unlink(&self) {
        self.shm.segment().unlink();
    }

    #[inline]
    pub(crate) fn shm(&self) -> &CqShm {
        &self.shm
    }

    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Publishes `cqe` (the protocol of the module doc).
    ///
    /// Rule: ibv_poll_cq(3) NOTES: a completion arriving at a full CQ is an overrun: the
    /// CQ enters the error state (IGNORE_OVERRUN: the oldest entry is overwritten and
    /// nothing fails). Rule: ibv_req_notify_cq(3): an armed CQ fires once for the next
    /// completion, or the next solicited one; rxe treats error and flush completions as
    /// not solicited, and so does rverbs (the producer sets `cqe.solicited`).
    ///
    /// `owner_stopped` tells whether the CQ's owner is stopped (a signal, a debugger),
    /// asked only of a resize still under way after twice `RESIZE_WAIT`: a stopped owner
    /// finishes its resize when it runs again, so it is waited for.
    // Out of line, as it was before it took `owner_stopped` (generic, it was inlined into
    // `CqInner::publish`, +24 instructions per completion under callgrind).
    #[inline(never)]
    pub(crate) fn publish(&self, cqe: &CqeWords, who: Producer, owner_stopped: impl Fn() -> bool) -> Publish {
        publish_in(self.shm(), self.gate(), &self.ring, cqe, who, RESIZE_WAIT, owner_stopped, |_| {})
    }

    /// [`CqSeg::publish`] by a thread of the CQ's owner process, marked as inside this CQ
    /// (`grace::Pin::inside`) from before this call until after it, without counting
    /// itself in the gate (two locked instructions fewer per completion): the owner's
    /// resize and its skip of a dead producer's reservation wait for the threads inside
    /// instead (`grace::Insiders`, an asymmetric fence: docs/completion-queues.md, "The
    /// owner's own completions"). [`Publish::Resizing`] if a resize is under way: nothing
    /// was reserved, and the caller must leave before trying again.
    #[inline(never)]
    pub(crate) fn publish_uncounted(&self, cqe: &CqeWords) -> Publish {
        let sh = self.shm();
        if sh.errored.load(Ordering::Acquire) != 0 {
            return Publish::Overrun { first: false };
        }
        // After the caller's mark (program order; the resize's membarrier orders the two
        // for the CPU): either the resize sees the mark and waits for it, or this load
        // sees the resize.
        if self.gate().resizing_relaxed() {
            return Publish::Resizing;
        }
        publish_reserving(sh, &self.ring, cqe, |_| {})
    }

    /// [`CqSeg::publish`], calling `before` with where the CQE is right before the store
    /// that makes it visible, its words written ([`Ring::push_marking`]); not at all if it
    /// is not published here (an overrun, a resize under way).
    pub(crate) fn publish_marking(&self, cqe: &CqeWords, who: Producer, owner_stopped: impl Fn() -> bool, before: impl FnOnce(CqAt)) -> Publish {
        let gen = self.gen;
        publish_in(self.shm(), self.gate(), &self.ring, cqe, who, RESIZE_WAIT, owner_stopped, |pos| before(CqAt::new(gen, pos)))
    }

    /// Whether the completion a receive's mark says is at `at` (a position of this
    /// generation) was published: it is, or its slot was reused a lap later and
    /// `skipped(pos)` (the consumer's note of the dead producers' reservations it skipped,
    /// held by the caller across this call as across each skip) does not name it. `false`:
    /// the producer died between its mark and its publish (the reservation is still there,
    /// or was skipped). An `at` that names no position reserved here (unknown, or garbage a
    /// peer wrote) counts as published: a receive is never completed twice.
    pub(crate) fn published(&self, at: CqAt, skipped: impl Fn(u64) -> bool) -> bool {
        let tail = self.ring.tail();
        let Some(pos) = at.position_below(tail) else { return true };
        if self.ring.published_at(pos) {
            return true;
        }
        // The consumer passes a position by polling it or by skipping it (noted), and a
        // producer reserves its slot again only after that.
        tail > pos.saturating_add(self.ring.capacity() as u64) && !skipped(pos)
    }

    fn gate(&self) -> &Gate {
        #[cfg(not(rverbs_loom))]
        return self.shm.segment().get::<Gate>(GATE_OFF);
        #[cfg(rverbs_loom)]
        return &self.gate;
    }

    /// Moves the consumer past a ring position that a dead producer reserved and never
    /// published, if that is why it is stuck: no producer that `alive(ep, pid)` says is
    /// alive is inside, so the reservation can only be a dead one's. Consumer only.
    ///
    /// Rule: ibv_poll_cq(3) returns the completions in the CQ; a process of the device
    /// killed while completing to this CQ must not keep the others from it. The
    /// completion that process was publishing is lost with it (the work request it
    /// completed was being executed by the dead process).
    /// Only position `at` is skipped, if the consumer is stuck there (the caller looked at
    /// it before making sure no thread of its own process is publishing uncounted: one
    /// that reserved a later position since is not in its look). The position skipped,
    /// if any: the caller notes it, for [`CqSeg::published`].
    pub(crate) fn skip_dead(&self, at: u64, alive: &dyn Fn(u32, u32) -> bool) -> Option<u64> {
        let h = self.ring.stalled_at().filter(|&h| h == at)?;
        (!self.gate().live_inside(alive) && self.ring.skip(h)).then_some(h)
    }

    /// Arms the notification with `bits` (`NOTIFY_*`; ibv_req_notify_cq(3)). Returns
    /// the arming a resize left behind here, to carry to the current generation (0:
    /// none; the arming holds).
    ///
    /// Rule: ibv_req_notify_cq(3) arms for the next completion, whichever generation it
    /// lands in: an arming that meets a resize (ibv_resize_cq(3) from another thread)
    /// reaches the new generation either through the resize
    /// ([`CqSeg::hand_over_arming`]) or through its caller, never neither.
    pub(crate) fn arm(&self, bits: u32) -> u32 {
        self.shm().notify.fetch_or(bits, Ordering::AcqRel);
        // Pairs with the fences in `notify_if_armed` (a producer of this generation sees
        // the arming, or the application's poll after arming sees its completion) and
        // in `hand_over_arming` (the resize sees the arming, or this load its mark).
        fence(Ordering::SeqCst);
        if self.shm().moved.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.shm().notify.swap(0, Ordering::AcqRel)
    }

    /// After `moved` is set (the resize is visible): moves the arming that reached this
    /// generation after [`CqSeg::inherit`] to `next`. Each arming bit is taken from here
    /// once, by this or by the armer ([`CqSeg::arm`]), so a resize neither loses an
    /// arming nor fires it twice.
    pub(crate) fn hand_over_arming(&self, next: &CqSeg) {
        fence(Ordering::SeqCst);
        let late = self.shm().notify.swap(0, Ordering::AcqRel);
        if late != 0 {
            next.shm().notify.fetch_or(late, Ordering::AcqRel);
        }
    }

    /// Starts a resize: stops new producers and waits for the live ones inside to leave
    /// (`alive` as for [`CqSeg::skip_dead`]) — at most two seconds. A producer that died
    /// inside is not waited for.
    ///
    /// From here on [`CqSeg::may_be_moving`] is true: the resize's consumer may move the
    /// completions out before the next generation is current.
    ///
    /// [`Frozen::TimedOut`]: a live producer is still inside (a process stopped by a
    /// signal or a debugger between reserving a position and publishing it, one
    /// descheduled that long, or garbage another process wrote into the gate). Its
    /// reservation may be in this ring, or it may still reserve one: moving the ring now
    /// would lose its completion and stop the move at its hole, losing every completion
    /// behind it too. The caller calls the resize off ([`CqSeg::thaw`]).
    pub(crate) fn freeze(&self, alive: &dyn Fn(u32, u32) -> bool) -> Frozen {
        // Before any completion leaves: ordered before the consumer's `head` stores
        // (Release), which a lock-free look reads with Acquire.
        self.shm().moving.store(1, Ordering::Relaxed);
        // Pairs with the fence in `CqInner::purge`: either it sees `moving`, or this
        // resize's drain sees its record.
        fence(Ordering::SeqCst);
        self.gate().freeze(alive, RESIZE_WAIT)
    }

    /// Lets producers in again after a resize that did not happen.
    pub(crate) fn thaw(&self) {
        self.gate().thaw();
        self.shm().moving.store(0, Ordering::Release);
    }

    /// Whether a resize started on this generation (and may have moved its completions to
    /// the next one, not current yet). Rule: ibv_resize_cq(3) keeps the completions, and
    /// ibv_poll_cq(3) returns what the CQ holds: a poll that saw this generation's ring
    /// emptied by a resize in another thread must look again under the consumer lock,
    /// which the resize holds until the next generation is current. Read after the ring's
    /// consumer position ([`Ring::nothing_published`] loads it with Acquire).
    #[inline(always)]
    pub(crate) fn may_be_moving(&self) -> bool {
        self.shm().moving.load(Ordering::Relaxed) != 0
    }

    /// Copies the shared settings of `other` (a previous generation, frozen) into this
    /// one; its arming moves (an arming that comes later is handed over with
    /// [`CqSeg::hand_over_arming`]).
    pub(crate) fn inherit(&self, other: &CqSeg) {
        let (a, b) = (self.shm(), other.shm());
        a.notify.store(b.notify.swap(0, Ordering::AcqRel), Ordering::Release);
        for (x, y) in [
            (&a.channel, &b.channel),
            (&a.flags, &b.flags),
            (&a.ctx, &b.ctx),
            (&a.errored, &b.errored),
        ] {
            x.store(y.load(Ordering::Acquire), Ordering::Release);
        }
    }
}

/// The ring capacity a peer may use in a segment of `seg_len` bytes whose header says
/// `cap`: `None` if it is not one the owner can have written (not a power of two, or more
/// slots than the file holds: another process wrote it), which would index past the
/// mapping.
pub(crate) fn open_capacity(cap: u64, seg_len: usize) -> Option<usize> {
    let room = seg_len.checked_sub(SHM_BYTES + crate::rings::completion_ring::HDR_BYTES)? / std::mem::size_of::<crate::rings::completion_ring::Slot>();
    (cap.is_power_of_two() && cap <= room as u64).then_some(cap as usize)
}

/// [`CqSeg::publish`] over the parts of a CQ segment — its header `sh`, its producers'
/// `gate`, its `ring` — every word of which another process may have written;
/// `resize_wait` as `RESIZE_WAIT` (a resize still under way after twice that is a flag
/// another process wrote, unless `owner_stopped()`: the owner was stopped in the middle of
/// its resize, and is waited for); `before` as [`CqSeg::publish_marking`]'s.
// The parts of the segment are separate arguments so that the fuzzing harness and the
// loom model can pass their own.
#[allow(clippy::too_many_arguments)]
pub(crate) fn publish_in(
    sh: &CqShm,
    gate: &Gate,
    ring: &Ring,
    cqe: &CqeWords,
    who: Producer,
    resize_wait: std::time::Duration,
    owner_stopped: impl Fn() -> bool,
    before: impl FnOnce(u64),
) -> Publish {
    if sh.errored.load(Ordering::Acquire) != 0 {
        return Publish::Overrun { first: false };
    }
    let mut waiting: Option<std::time::Instant> = None;
    while !gate.enter(who) {
        // A resize is under way: follow it once it moved the CQ, or enter again if it
        // was called off.
        while gate.resizing() {
            let m = sh.moved.load(Ordering::Acquire);
            if m != 0 {
                return Publish::Moved(m);
            }
            // A resize moves at most the ring's completions; one still "under way"
            // after the time a resize waits for producers (`freeze`) is a flag another
            // process wrote: the CQ is in error, as for a scribbled ring. Unless its
            // owner is stopped (SIGSTOP, a debugger): it goes on with the resize when it
            // runs again, and the time starts again.
            let since = *waiting.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() > 2 * resize_wait {
                if owner_stopped() {
                    waiting = Some(std::time::Instant::now());
                    continue;
                }
                return Publish::Overrun { first: sh.errored.swap(1, Ordering::AcqRel) == 0 };
            }
            std::thread::yield_now();
        }
    }
    let out = publish_reserving(sh, ring, cqe, before);
    gate.leave(who);
    out
}

/// The part of a publish inside the gate (or, for the owner's own, marked inside the CQ):
/// the reservation, the words, `before`, the store that publishes them, the notification.
#[inline(always)]
fn publish_reserving(sh: &CqShm, ring: &Ring, cqe: &CqeWords, before: impl FnOnce(u64)) -> Publish {
    let flags = sh.flags.load(Ordering::Relaxed);
    // Copied only to stamp it: the copy reads the words in wider pieces than they were
    // written (`CqeWords`).
    let stamped;
    let words = if flags & FLAG_TIMESTAMPS != 0 {
        let mut w = *cqe;
        w[Cqe::TIMESTAMP_WORD] = crate::clock::device_ns();
        stamped = w;
        &stamped
    } else {
        cqe
    };
    match ring.push_marking(words, flags & FLAG_IGNORE_OVERRUN != 0, before) {
        // A ring whose indices another process scribbled over fails like an overrun:
        // the CQ enters the error state and its owner gets IBV_EVENT_CQ_ERR.
        Err(PushError::Full | PushError::Corrupt) => Publish::Overrun { first: sh.errored.swap(1, Ordering::AcqRel) == 0 },
        Ok(()) => Publish::Done { fire: notify_if_armed(sh, Cqe::solicited_in(cqe)) },
    }
}

/// Disarms and reports whether the arming fires for this completion.
fn notify_if_armed(sh: &CqShm, solicited: bool) -> bool {
    if sh.channel.load(Ordering::Relaxed) == 0 {
        return false;
    }
    // Pairs with the fence in `arm`: either the application's poll after arming sees
    // this CQE, or this load sees the arming (no lost wake-up).
    fence(Ordering::SeqCst);
    let armed = sh.notify.load(Ordering::Relaxed);
    let fire = armed & NOTIFY_NEXT != 0 || (armed & NOTIFY_SOLICITED != 0 && solicited);
    fire && sh.notify.compare_exchange(armed, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Producer = Producer { ep: 0, pid: 1 };

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rverbs-cqseg-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    // Hostile-segment harness (tests/chaos/hostile_seg.sh), cq_shm: another process
    // wrote a CQ's capacity; a peer that mapped the CQ then built a ring past the end of
    // the mapping (a panic inside a verb, an abort through the C ABI).
    #[test]
    fn a_peer_refuses_a_cq_segment_whose_capacity_does_not_fit() {
        let d = dir("cap");
        let owner = CqSeg::create(&d, 7, 1, 16).unwrap();
        let path = d.join(name(7, 1));
        assert!(CqSeg::open(Arc::new(Segment::open(&path).unwrap()), 1).is_some());
        for cap in [0u64, 3, 1 << 20, 1 << 63, u64::MAX] {
            owner.shm().cap.store(cap, Ordering::Release);
            assert!(CqSeg::open(Arc::new(Segment::open(&path).unwrap()), 1).is_none(), "cap {cap:#x}");
        }
        drop(owner);
        std::fs::remove_dir_all(&d).unwrap();
    }

    // Hostile-segment harness, cq_shm: another process set the RESIZING bit of a CQ
    // that is not being resized; every producer, the owner's included, yielded for ever
    // waiting for a new generation.
    #[test]
    fn a_resize_flag_nobody_clears_puts_the_cq_in_error_instead_of_waiting_for_ever() {
        let d = dir("resizing");
        let cq = Arc::new(CqSeg::create(&d, 8, 1, 16).unwrap());
        cq.gate().set_resizing();
        let (tx, rx) = std::sync::mpsc::channel();
        let c2 = cq.clone();
        std::thread::spawn(move || {
            let _ = tx.send(c2.publish(&Cqe::default().encode(), ME, || false));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("publish returned");
        assert_eq!(got, Publish::Overrun { first: true });
        assert_eq!(cq.publish(&Cqe::default().encode(), ME, || false), Publish::Overrun { first: false });
        drop(cq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    // A receive's taker marks its take as completing with the place `publish_marking`
    // hands it; the QP's flush later asks whether that place was published. A producer
    // killed between its mark and its publish left a reservation the owner skips: not
    // published, skipped or not, and a lap later still not (the skip is noted). A
    // completion published is, consumed or not, and after its slot was reused a lap later.
    #[test]
    fn published_tells_a_marked_completion_from_one_its_producer_died_publishing() {
        let d = dir("published");
        let cq = CqSeg::create(&d, 10, 3, 4).unwrap();
        let cap = cq.ring().capacity() as u64;
        let mark = |cqe: Cqe| {
            let at = std::cell::Cell::new(CqAt::UNKNOWN);
            assert!(matches!(cq.publish_marking(&cqe.encode(), ME, || false, |a| at.set(a)), Publish::Done { .. }));
            at.get()
        };
        let nothing = |_| false;
        let first = mark(Cqe::default());
        assert_eq!(first, CqAt::new(3, 0));
        assert!(first.of_gen(3) && !first.of_gen(2) && !CqAt::UNKNOWN.of_gen(0));
        assert!(cq.published(first, nothing));
        // The next position reserved by a producer that died before publishing it.
        cq.ring().reserve_and_die();
        let lost = CqAt::new(3, 1);
        assert!(!cq.published(lost, nothing), "reserved, never published");
        assert!(!cq.published(lost, |_| panic!("no need to ask: not lapped")));
        // The consumer takes the first, skips the hole (noted), and producers lap the ring.
        assert!(matches!(cq.ring().pop(), crate::rings::completion_ring::Pop::Entry(..)));
        assert!(cq.published(first, nothing), "consumed");
        let alive = |_, _| false;
        assert_eq!(cq.skip_dead(0, &alive), None, "not where the consumer is stuck");
        assert_eq!(cq.skip_dead(1, &alive), Some(1));
        let noted = |pos| pos == 1;
        assert!(!cq.published(lost, noted), "skipped");
        for _ in 0..cap {
            mark(Cqe::default());
            assert!(matches!(cq.ring().pop(), crate::rings::completion_ring::Pop::Entry(..)));
        }
        assert!(cq.published(first, noted), "its slot reused a lap later: it was consumed");
        assert!(!cq.published(lost, noted), "its slot reused a lap later: it was skipped");
        // Places that name no reservation: unknown, or beyond `tail` (a peer's garbage).
        assert!(cq.published(CqAt::UNKNOWN, nothing));
        assert!(cq.published(CqAt::new(3, 1_000), nothing));
        drop(cq);
        std::fs::remove_dir_all(&d).unwrap();
    }

    // The owner stopped (SIGSTOP, a debugger) in the middle of a resize: its producers
    // put the CQ in error after 4 s, as for a flag another process wrote, and the owner
    // found its CQ broken when it ran again. They wait while it is stopped.
    #[test]
    fn a_resize_whose_owner_is_stopped_is_waited_for() {
        let d = dir("stopped-owner");
        let cq = CqSeg::create(&d, 9, 1, 16).unwrap();
        cq.gate().set_resizing();
        let asked = std::cell::Cell::new(0u32);
        let owner_stopped = || {
            asked.set(asked.get() + 1);
            asked.get() <= 5
        };
        let wait = std::time::Duration::from_millis(1);
        let got = publish_in(cq.shm(), cq.gate(), cq.ring(), &Cqe::default().encode(), ME, wait, owner_stopped, |_| {});
        assert_eq!(asked.get(), 6, "waited through five answers of 'stopped'");
        // Still resizing once the owner runs and nobody clears the flag: a scribbled one.
        assert_eq!(got, Publish::Overrun { first: true });
        drop(cq);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
