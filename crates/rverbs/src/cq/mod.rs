//! Completion queues: creation, batch polling, overrun, notification, resize, destroy.
//!
//! Read before editing: ibv_poll_cq(3), ibv_create_cq_ex(3) and docs/completion-queues.md. The
//! ring itself is in `rings::completion_ring`; extended polling in [`ex`]; completion channels in
//! [`channel`].

pub mod channel;
pub mod ex;
#[cfg(feature = "rdma-core")]
pub(crate) mod native;

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::grace;
use crate::spin::{SpinGuard, SpinMutex};

use bitflags::bitflags;
use rverbs_proto::verbs::EventType;

use crate::mr::domain::ContextCore;
use crate::table::Table;
use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::notify::{EventCounter, RawElement};
use crate::rings::recv_count::{Heard, TakenCount};
use crate::rings::wc::{Cqe, CqeWords, Wc, WcRead, CQE_WORDS};
use channel::{ChannelInner, CompChannel};
use crate::rings::producer_gate::{Frozen, Producer};
use crate::rings::completion_ring::{Consumer, Pop};
use crate::rings::cq_segment::{self, CqAt, CqSeg, Publish};

/// How often the consumer, stuck behind an unpublished reservation, asks again whether
/// the producers inside are alive (`CqInner::unstick`).
const STUCK_CHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a look for a dead producer's reservation waits for this process's own
/// uncounted publishers to leave ([`CqInner::skip_dead`]); the next look tries again.
const OWN_PUBLISHERS_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Dead producers' reservations a CQ remembers having skipped ([`CqInner::skipped`]):
/// each is a process killed inside a completion to this CQ, whose receive's flush may come
/// much later (when its QP enters ERR).
const SKIPPED_KEPT: usize = 64;
/// One empty poll in this many that found nothing published reads the coarse clock, and
/// looks for a reservation left unpublished ([`CqInner::surely_empty`]) if the last such
/// look is [`LOOK_EVERY_MS`] old: a dead producer's is then found within that many polls
/// and that time (a busy poller makes 256 empty polls in about 1.3 µs; one that polls
/// every 10 ms, in 2.6 s). The look reads the ring's `tail`, the line every producer's
/// reservation writes: at one in 64 polls a receiver that spins through a same-host
/// ping-pong's wait (~50 polls) read it about once per message, and the sender's next
/// reservation took the line back from it; perftest's `ib_send_lat` 8 B between two
/// processes: 0.41–0.45 µs at 64, 0.34–0.36 µs at one in 4 096 (BENCHMARKS.md, "The
/// dead-producer look, once in 4 096 empty polls"); by time, a busy poller looks about
/// once in a thousand messages. The clock (`CLOCK_MONOTONIC_COARSE`, a read of the vDSO's
/// page, ~5 ns) is read once in 256 empty polls: 0.02 ns a poll.
const CLOCK_CHECK: u32 = 256;
/// The least time between two looks for a reservation left unpublished, in the coarse
/// clock's milliseconds (it moves by a scheduler tick, 1–10 ms).
const LOOK_EVERY_MS: u32 = 1;

/// The poller's count of empty polls and when it last looked for a reservation left
/// unpublished ([`CLOCK_CHECK`], [`LOOK_EVERY_MS`]).
#[derive(Default)]
struct Quiet {
    polls: AtomicU32,
    /// The coarse clock's milliseconds (wrapping) at the last look.
    looked_at: AtomicU32,
}

impl Quiet {
    /// Whether the last look is [`LOOK_EVERY_MS`] old (then this is the look: noted).
    #[cold]
    #[inline(never)]
    fn look_due(&self) -> bool {
        let now = coarse_ms();
        if now.wrapping_sub(self.looked_at.load(Ordering::Relaxed)) < LOOK_EVERY_MS {
            return false;
        }
        self.looked_at.store(now, Ordering::Relaxed);
        true
    }

    /// Makes the next empty poll look (an arming, a flush: a poller that is about to
    /// sleep, or completions pushed that a dead producer's reservation may hide).
    fn look_soon(&self) {
        self.polls.fetch_or(CLOCK_CHECK - 1, Ordering::Relaxed);
        self.looked_at.store(coarse_ms().wrapping_sub(LOOK_EVERY_MS), Ordering::Relaxed);
    }
}

/// `CLOCK_MONOTONIC_COARSE` in milliseconds, wrapping.
fn coarse_ms() -> u32 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64).wrapping_mul(1000).wrapping_add(t.tv_nsec as u64 / 1_000_000) as u32
}

/// This process as a producer of completions (`rings::producer_gate`).
pub(crate) fn producer_of(endpoint: &crate::mr::endpoint::Endpoint) -> Producer {
    Producer { ep: endpoint.reg.as_ref().map_or(0, |r| r.ep), pid: endpoint.pid }
}

/// Whether producer `pid` of endpoint `ep` is alive, as the owner of a CQ of `endpoint`
/// sees it ([`Endpoint::owner_alive`](crate::mr::endpoint::Endpoint::owner_alive)).
fn producer_alive(endpoint: &crate::mr::endpoint::Endpoint, ep: u32, pid: u32) -> bool {
    endpoint.owner_alive(ep, pid)
}

bitflags! {
    /// The fields extended polling may read (`enum ibv_wc_flags_ex`, chosen at creation).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcExFlags: u64 {
        /// Byte count.
        const BYTE_LEN = 1;
        /// Immediate data (and the invalidated rkey, which shares it).
        const IMM = 1 << 1;
        /// Local QP number.
        const QP_NUM = 1 << 2;
        /// Source QP number.
        const SRC_QP = 1 << 3;
        /// Source LID.
        const SLID = 1 << 4;
        /// Service level.
        const SL = 1 << 5;
        /// DLID path bits.
        const DLID_PATH_BITS = 1 << 6;
        /// Completion time in device clock units.
        const COMPLETION_TIMESTAMP = 1 << 7;
        /// VLAN (not supported).
        const CVLAN = 1 << 8;
        /// Flow tag (not supported).
        const FLOW_TAG = 1 << 9;
        /// Tag-matching information (`ibv_wc_read_tm_info`).
        const TM_INFO = 1 << 10;
        /// Completion time in wall-clock nanoseconds.
        const COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11;
    }
}

impl WcExFlags {
    /// `IBV_WC_STANDARD_FLAGS`: what a CQ made with plain ibv_create_cq(3) provides.
    pub const STANDARD: WcExFlags = WcExFlags::from_bits_truncate(0x7f);
    /// The flags rverbs supports.
    pub const SUPPORTED: WcExFlags = WcExFlags::STANDARD
        .union(WcExFlags::COMPLETION_TIMESTAMP)
        .union(WcExFlags::COMPLETION_TIMESTAMP_WALLCLOCK)
        .union(WcExFlags::TM_INFO);
}

bitflags! {
    /// Creation flags (`enum ibv_create_cq_attr_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct CqCreateFlags: u32 {
        /// The application polls from one thread at a time: no consumer locking.
        const SINGLE_THREADED = 1;
        /// On overrun, overwrite the oldest CQE instead of failing the CQ.
        const IGNORE_OVERRUN = 1 << 1;
    }
}

/// Parameters of [`Context::create_cq`](crate::Context::create_cq) (`struct ibv_cq_init_attr_ex`).
#[derive(Clone, Debug)]
pub struct CqInit<'a> {
    /// Minimum number of entries; the CQ reports its real (power-of-two) size.
    pub cqe: u32,
    /// Opaque value returned with completion events (`cq_context`).
    pub cq_context: usize,
    /// Completion channel for events, if any.
    pub channel: Option<&'a CompChannel>,
    /// Completion vector, `< num_comp_vectors` (1).
    pub comp_vector: u32,
    /// Fields extended polling may read.
    pub wc_flags: WcExFlags,
    /// Creation flags.
    pub flags: CqCreateFlags,
}

impl CqInit<'_> {
    /// A CQ of at least `cqe` entries with the standard fields and no channel.
    pub fn new(cqe: u32) -> Self {
        CqInit {
            cqe,
            cq_context: 0,
            channel: None,
            comp_vector: 0,
            wc_flags: WcExFlags::STANDARD,
            flags: CqCreateFlags::empty(),
        }
    }
}

impl<'a> CqInit<'a> {
    /// Attaches a completion channel.
    pub fn channel(mut self, channel: &'a CompChannel) -> Self {
        self.channel = Some(channel);
        self
    }

    /// Chooses the fields extended polling may read.
    pub fn wc_flags(mut self, flags: WcExFlags) -> Self {
        self.wc_flags = flags;
        self
    }

    /// Sets creation flags.
    pub fn flags(mut self, flags: CqCreateFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Sets the context value returned with events.
    pub fn cq_context(mut self, value: usize) -> Self {
        self.cq_context = value;
        self
    }
}

const DESTROYED: u32 = 1 << 31;

/// The generations of a CQ's segment. Producers and the consumer use the current one
/// without a lock; a resize publishes the next one here. A replaced generation stays
/// mapped (its file removed) until no reader can still be using it: readers hold the
/// consumer lock, which every resize takes, or a [`grace::Pin`], whose snapshot each
/// replaced generation keeps; a later resize lets go of those whose readers moved on
/// (docs/completion-queues.md, "Resize").
struct Gens {
    current: AtomicPtr<CqSeg>,
    boxes: Mutex<Boxes>,
}

/// What [`Gens::current`] points into, and the generations replaced and still mapped.
struct Boxes {
    /// Boxed: `current` points into it, so it must not move with the struct.
    current: Box<CqSeg>,
    /// Each with the readers that may still hold it (`None`: no proof will ever come,
    /// kept until the CQ is dropped).
    retired: Vec<(Box<CqSeg>, Option<grace::Snapshot>)>,
}

/// Why the current generation can be read: the CQ's consumer lock is held (every resize
/// takes it), or a [`grace::Pin`] holds what was current when it was made.
// The fields are held for their drops (the unlock, the unpin).
#[allow(dead_code)]
pub(crate) enum Reading<'a> {
    /// This CQ's consumer lock.
    Lock(SpinGuard<'a, (), false>),
    /// A reader's pin.
    Pin(grace::Pin),
}

impl Reading<'_> {
    /// A pin, for a reader without the consumer lock.
    #[inline(always)]
    pub(crate) fn pin() -> Reading<'static> {
        Reading::Pin(grace::pin())
    }

    /// Marks this thread as inside `what` (`grace::Pin::inside`): `None` unless this is
    /// the thread's outermost tracked pin.
    #[inline(always)]
    fn inside(&self, what: usize) -> Option<grace::Inside<'_>> {
        match self {
            Reading::Pin(p) => p.inside(what),
            _ => None,
        }
    }
}

impl Gens {
    fn new(first: CqSeg) -> Gens {
        let b = Box::new(first);
        let current = AtomicPtr::new(&*b as *const CqSeg as *mut CqSeg);
        Gens { current, boxes: Mutex::new(Boxes { current: b, retired: Vec::new() }) }
    }

    /// The current generation, for as long as `held` holds it (`held` is this CQ's lock
    /// or a pin made before this call).
    #[allow(unsafe_code)]
    #[inline(always)]
    fn current<'a>(&'a self, held: &'a Reading<'_>) -> &'a CqSeg {
        let _ = held;
        // SAFETY: `current` points into a Box of `boxes` (the current one, or one retired
        // after this load). A retired box is dropped only at a later resize, under the
        // consumer lock (so not while `held` is that lock), and only once the snapshot
        // taken after it was replaced shows every pin of that time released (so not while
        // `held` is a pin made before this load: membarrier(2) makes the pin visible to
        // the snapshot, or this load see the next generation; `grace`).
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// Makes `next` the current generation (the caller froze the current one and holds
    /// the consumer lock, `held`). The generation replaced stays mapped at least until
    /// the next resize; those replaced before it whose readers all left are let go.
    fn advance<'a>(&'a self, next: CqSeg, held: &'a Reading<'_>) -> &'a CqSeg {
        let mut boxes = self.boxes.lock().expect("cq generations");
        // Not the one replaced now: the caller still uses it.
        boxes.retired.retain(|(_, readers)| !readers.as_ref().is_some_and(grace::Snapshot::passed));
        let b = Box::new(next);
        self.current.store(&*b as *const CqSeg as *mut CqSeg, Ordering::SeqCst);
        let old = std::mem::replace(&mut boxes.current, b);
        boxes.retired.push((old, grace::Snapshot::take()));
        drop(boxes);
        self.current(held)
    }
}

pub(crate) struct CqInner {
    pub(crate) ctx: Arc<ContextCore>,
    /// The live CQs of the device, where this one is published.
    cqs: &'static Table<CqInner>,
    pub(crate) id: u32,
    /// The generations of the shared segment.
    gens: Gens,
    /// Taken by a poll, and from `start_poll` to `end_poll` (not for SINGLE_THREADED);
    /// released with Release ordering (`crate::spin`: no protocol looks past it).
    consumer: SpinMutex<(), false>,
    pub(crate) flags: CqCreateFlags,
    pub(crate) wc_flags: WcExFlags,
    channel: Option<Arc<ChannelInner>>,
    cq_context: AtomicUsize,
    pub(crate) comp_events: EventCounter,
    pub(crate) async_events: EventCounter,
    /// QPs and SRQs completing to this CQ; the top bit marks it destroyed.
    users: AtomicU32,
    /// Completions of QPs reset since (qpn, generation, ring position): those of that
    /// generation below the position are dropped when polled.
    purges: Mutex<Vec<(u32, u32, u64)>>,
    purging: AtomicBool,
    cookie: AtomicUsize,
    /// The completion extended polling is positioned on ([`ex`]), as ring words: atomic,
    /// so a misbehaving second poller reads stale values, never undefined behaviour.
    /// Written and read by the poller only, like `consumer`.
    polled: [AtomicU64; crate::rings::completion_ring::DATA_WORDS],
    /// Where the consumer found the ring stuck behind an unpublished reservation, and
    /// when it last looked for the producer's death there (`unstick`).
    stuck: Mutex<Option<(u64, std::time::Instant)>>,
    /// Whether this process's own threads publish here without counting themselves in the
    /// gate ([`CqSeg::publish_uncounted`]): membarrier(2) serves the process, so the
    /// resize and the dead producer's skip can wait for the threads inside this CQ
    /// ([`CqInner::own_publishers_left`]). Decided at creation.
    own_fence: bool,
    /// [`crate::sys::forks_since_load`] when the CQ was created: a forked child that
    /// completes here (as its parent) is another process, which the parent's membarrier
    /// does not reach, so it counts itself in the gate as peers do.
    forks: usize,
    /// The dead producers' reservations skipped (generation, ring position), the newest
    /// [`SKIPPED_KEPT`]: a receive whose taker marked its completion there and died
    /// before publishing it was never completed, and its QP's flush completes it
    /// ([`CqInner::was_published`]). Held across each skip and each look.
    skipped: Mutex<std::collections::VecDeque<(u32, u64)>>,
    /// Empty polls that found nothing published, counted (racily: a hint) so that every
    /// [`CLOCK_CHECK`]-th also looks for a reservation left unpublished if the last look
    /// is old ([`CqInner::surely_empty`]); on a line of its own, as a poller writes it.
    quiet: crossbeam_utils::CachePadded<Quiet>,
    /// The count of receives taken that the last receive completion polled carried, for
    /// the posts of the QP whose receive queue it names (`rings::recv_count`), and of an
    /// SRQ whose QPs all complete here (which holds it: `qp::srq`); a line of its own,
    /// written by the poller and read by those posts.
    pub(crate) heard: Arc<crossbeam_utils::CachePadded<Heard>>,
    /// The parent domain the CQ was created on (ibv_create_cq_ex(3),
    /// `IBV_CQ_INIT_ATTR_MASK_PD`), held until the CQ is destroyed: opaque here, the verbs
    /// layer (`pd`) puts its hold in and reads it back.
    parent: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
    /// Sanitizer only (single-threaded-cq-shared): the thread inside a poll of a
    /// SINGLE_THREADED CQ (`sanitizer::thread_token`), 0 for none.
    poller: AtomicU64,
    /// Sanitizer only (lost-wakeup): armed while holding completions, not polled since.
    armed_full: AtomicBool,
    /// Completions the fault plan holds back (`wc_delay=`, docs/fault-injection.md), each
    /// with the time it may be published, oldest first, and those this process wrote
    /// after them, which wait behind them (due at once).
    held: Mutex<std::collections::VecDeque<Held>>,
    /// Whether `held` may be non-empty: the one load a push pays without a plan.
    holding: AtomicBool,
    /// The endpoint's statistics segment when the device counts them
    /// (`DeviceConfig::stats`): the one load a poll pays when it does not.
    pub(crate) stats: Option<&'static crate::shm::stats::Stats>,
}

/// The progress thread's timer of held completions ([`CqInner::push_held`]).
impl crate::progress::Timed for CqInner {
    fn fire(self: Arc<Self>) {
        self.release_held();
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // A destroyed CQ's id may name a new CQ already (its entry went at destroy).
        if crate::sanitizer::on() && !self.is_destroyed() {
            crate::sanitizer::gone(crate::sanitizer::Kind::Cq, self.sanitizer_id());
        }
        // Dropped without destroy: its statistics record is free (a destroyed CQ's
        // was freed at destroy, and its slot may be a new CQ's).
        if let (Some(stats), false) = (self.stats, self.is_destroyed()) {
            stats.release_cq(self.id);
        }
    }
}

/// Why a completion could not be delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overrun;

/// The writer of a held completion ([`CqInner::push_held`]): told when the CQ overran as
/// the completion was published, so that it fails as it would had the CQ overrun when
/// it wrote the completion (a QP: ERR with QP_FATAL, ibv_create_cq(3)).
pub(crate) trait Overran: Send + Sync {
    /// The CQ overran publishing this writer's held completion.
    fn overran(self: Arc<Self>);
}

/// A completion the fault plan holds back: when it is due, what it is, who wrote it (no
/// one for a completion queued behind a held one by [`CqInner::push`]).
type Held = (std::time::Instant, CqeWords, Option<std::sync::Weak<dyn Overran>>);

impl CqInner {
    /// The CQ as the sanitizer keys it: its device and number.
    pub(crate) fn sanitizer_id(&self) -> crate::sanitizer::Id {
        crate::sanitizer::Id::new(self.ctx.endpoint.slot, self.id)
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.users.load(Ordering::Acquire) & DESTROYED != 0
    }

    /// A QP or SRQ starts completing to this CQ.
    pub(crate) fn attach(&self) -> Result<()> {
        self.users
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u & DESTROYED == 0).then_some(u + 1)
            })
            .map(|_| ())
            .map_err(|_| Error::Destroyed { what: "completion queue" })
    }

    pub(crate) fn detach(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Publishes a completion (see [`CqSeg::publish`] for the rules): an overrun raises
    /// CQ_ERR once; a fired notification queues one event on the channel.
    #[inline(always)]
    pub(crate) fn push(self: &Arc<Self>, cqe: Cqe) -> Result<(), Overrun> {
        // Encoded here, where the producer built it (`CqeWords`): no `Cqe` is left in
        // memory to be read back in other widths.
        let words = cqe.encode();
        if self.holding.load(Ordering::Relaxed) && self.queue_behind_held(&words) {
            return Ok(());
        }
        self.publish(&words)
    }

    /// Queues `cqe` behind the completions the fault plan holds back, if any are still
    /// held (a NIC's CQ is ordered: what comes later is polled later). Returns whether
    /// it was queued.
    #[cold]
    fn queue_behind_held(&self, cqe: &CqeWords) -> bool {
        let mut held = self.held.lock().expect("held completions");
        if held.is_empty() {
            return false;
        }
        held.push_back((std::time::Instant::now(), *cqe, None));
        true
    }

    /// Writes `cqe` to the CQ `delay` from now (the fault plan's `wc_delay=`,
    /// docs/fault-injection.md): until then it cannot be polled, and neither can the
    /// completions this process writes to the CQ after it. The progress thread publishes
    /// them in order when the time comes. An overrun then puts the CQ in error as any
    /// overrun does (CQ_ERR), and `writer` is told ([`Overran`]); the writers of the
    /// completions queued behind it are not known here and are not told.
    #[cold]
    pub(crate) fn push_held(self: &Arc<Self>, cqe: Cqe, delay: std::time::Duration, writer: std::sync::Weak<dyn Overran>) {
        let due = std::time::Instant::now() + delay;
        let mut held = self.held.lock().expect("held completions");
        self.holding.store(true, Ordering::Relaxed);
        let first = held.is_empty();
        held.push_back((due, cqe.encode(), Some(writer)));
        drop(held);
        if first {
            let me: std::sync::Weak<dyn crate::progress::Timed> = Arc::downgrade(self) as _;
            crate::progress::schedule(self.ctx.endpoint, due, me);
        }
    }

    /// Publishes the held completions that are due, in order; schedules the next.
    fn release_held(self: &Arc<Self>) {
        let now = std::time::Instant::now();
        let mut overran = Vec::new();
        let mut held = self.held.lock().expect("held completions");
        while let Some((due, cqe, _)) = held.front() {
            let (due, cqe) = (*due, *cqe);
            if due > now {
                let me: std::sync::Weak<dyn crate::progress::Timed> = Arc::downgrade(self) as _;
                crate::progress::schedule(self.ctx.endpoint, due, me);
                break;
            }
            let writer = held.pop_front().and_then(|h| h.2);
            if self.publish(&cqe).is_err() {
                overran.extend(writer.and_then(|w| w.upgrade()));
            }
        }
        if held.is_empty() {
            self.holding.store(false, Ordering::Relaxed);
        }
        drop(held);
        // Outside the lock: a writer failing flushes its queues into this CQ.
        for w in overran {
            w.overran();
        }
    }

    /// Writes `cqe` to the ring now (the body of [`CqInner::push`]).
    ///
    /// A thread of the process that created the CQ, marked as inside it
    /// ([`Reading::inside`], its outermost pin), publishes without counting itself in the
    /// gate ([`CqSeg::publish_uncounted`]); a resize under way makes it leave and try
    /// again, until the resize is over. The resize waits at most
    /// [`cq_segment::RESIZE_WAIT`] (for the counted producers, then for the threads
    /// inside): a resize flag still set after twice that was written by another process,
    /// and the CQ is in error, as [`CqSeg::publish`] finds. A thread already
    /// pinned by its caller (a pin inside another cannot mark it) counts itself in the
    /// gate, as peers do.
    fn publish(self: &Arc<Self>, cqe: &CqeWords) -> Result<(), Overrun> {
        let me = producer_of(self.ctx.endpoint);
        let what = self.insider_name();
        let mut resizing: Option<std::time::Instant> = None;
        let outcome = loop {
            let held = Reading::pin();
            let inside = if self.own_fence && crate::sys::forks_since_load() == self.forks { held.inside(what) } else { None };
            // The owner is this process, and this thread runs.
            let publish = |seg: &CqSeg| if inside.is_some() { seg.publish_uncounted(cqe) } else { seg.publish(cqe, me, || false) };
            let mut outcome = publish(self.gens.current(&held));
            // A resize replaced the generation: publish into the new one (bounded: resizes
            // happen under the consumer lock, one at a time).
            for _ in 0..64 {
                if !matches!(outcome, Publish::Moved(_)) {
                    break;
                }
                outcome = publish(self.gens.current(&held));
            }
            drop(inside);
            drop(held);
            if !matches!(outcome, Publish::Resizing) {
                break outcome;
            }
            let since = *resizing.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() > 2 * cq_segment::RESIZE_WAIT {
                let first = self.gens.current(&Reading::pin()).shm().errored.swap(1, Ordering::AcqRel) == 0;
                break Publish::Overrun { first };
            }
            std::thread::yield_now();
        };
        match outcome {
            Publish::Done { fire } => {
                if fire {
                    if let Some(ch) = &self.channel {
                        let (ch, id) = (ch.clone(), self.id);
                        crate::rings::deferred_notify::fire_or_hold(move || ch.fire(id));
                    }
                }
                Ok(())
            }
            Publish::Overrun { first } => {
                if first {
                    tracing::warn!(cq = self.id, "CQ overrun");
                    self.ctx.raise(EventType::CqErr, RawElement::Cq(self.id));
                }
                Err(Overrun)
            }
            Publish::Moved(_) | Publish::Resizing => Err(Overrun),
        }
    }

    /// Puts the CQ in error as an overrun does, for the fault plan's CQ_ERR
    /// (docs/fault-injection.md): CQ_ERR is raised once, every later poll fails.
    pub(crate) fn inject_error(&self) {
        if self.gens.current(&Reading::pin()).shm().errored.swap(1, Ordering::AcqRel) == 0 {
            self.ctx.raise(EventType::CqErr, RawElement::Cq(self.id));
        }
    }

    /// The current generation of the CQ's segment, for as long as `held` holds it.
    pub(crate) fn seg<'a>(&'a self, held: &'a Reading<'_>) -> &'a CqSeg {
        self.gens.current(held)
    }

    /// Whether the CQ reports to channel `ch`.
    pub(crate) fn channel_is(&self, ch: &Arc<ChannelInner>) -> bool {
        self.channel.as_ref().is_some_and(|c| Arc::ptr_eq(c, ch))
    }

    /// Makes the next empty poll look for a reservation left unpublished (`unstick`):
    /// completions pushed behind a dead producer's reservation (a QP's flush), or a
    /// poller about to sleep until an event (an arming).
    pub(crate) fn look_soon(&self) {
        self.quiet.look_soon();
    }

    fn errored(&self) -> bool {
        self.gens.current(&Reading::pin()).shm().errored.load(Ordering::Acquire) != 0
    }

    pub(crate) fn cq_context(&self) -> usize {
        self.cq_context.load(Ordering::Relaxed)
    }

    /// The consumer's lock, taken, unless the CQ is SINGLE_THREADED (ibv_create_cq_ex(3):
    /// the application serialises its polls). Inline: a call of its own measured 16
    /// instructions per poll.
    /// Without the lock (SINGLE_THREADED), a pin holds the generation it reads.
    #[inline(always)]
    fn hold_consumer_or_pin(&self) -> Reading<'_> {
        if self.flags.contains(CqCreateFlags::SINGLE_THREADED) {
            Reading::pin()
        } else {
            Reading::Lock(self.consumer.lock())
        }
    }

    /// Forgets the completions QP `qpn` wrote so far (the QP was reset).
    ///
    /// Rule: as mlx5 does on the transition to RESET (rxe does not), so a QP that is
    /// reset and reconnected does not see stale completions of its previous life
    /// (pyverbs' rereg tests rely on this). Destroying a QP does not purge, as on rxe
    /// (docs/completion-queues.md, "Purge on RESET").
    ///
    /// A resize in another thread (ibv_resize_cq(3)) moves the completions to a new
    /// generation, where positions start again, and forgets the records it applied on
    /// the way: a record names its generation (one read before the resize, pushed after
    /// it, dropped completions of the new one below a position of the old), and one made
    /// while a resize is under way is made again in the generation the resize ends with
    /// (the completions it moved before seeing the record are in there).
    pub(crate) fn purge(&self, qpn: u32) {
        let held = Reading::pin();
        loop {
            let seg = self.gens.current(&held);
            let until = seg.ring().tail();
            self.purges.lock().expect("cq purges").push((qpn, seg.gen, until));
            self.purging.store(true, Ordering::SeqCst);
            // Pairs with the fence after `moving` is set (`CqSeg::freeze`): a resize that
            // this misses sees the record in its drain.
            std::sync::atomic::fence(Ordering::SeqCst);
            if !seg.may_be_moving() {
                return;
            }
            // The resize holds the consumer lock until it is done; it waits for nothing
            // this thread holds (this is not inside a poll: no resize could run then).
            while seg.may_be_moving() && seg.shm().moved.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            if seg.shm().moved.load(Ordering::Acquire) == 0 {
                // Refused: the generation stays, and the record with it.
                return;
            }
        }
    }

    /// Whether the CQE at `pos` of generation `gen` for `qpn` was purged; drops expired
    /// records (of that generation below `pos`, and of older generations).
    fn purged(&self, qpn: u32, gen: u32, pos: u64) -> bool {
        let mut p = self.purges.lock().expect("cq purges");
        let hit = p.iter().any(|&(q, g, until)| q == qpn && g == gen && pos < until);
        p.retain(|&(_, g, until)| g > gen || (g == gen && pos < until));
        if p.is_empty() {
            self.purging.store(false, Ordering::Release);
        }
        hit
    }

    /// A completion was polled that carries `taken` (`rings::recv_count`): the CQ's
    /// [`Heard`] keeps the count for the queue's next post, and the regions the receive
    /// kept registered are let go (`rings::kept`: ibv_post_recv(3), its buffers are the
    /// program's once the completion is retrieved).
    #[inline(always)]
    pub(crate) fn polled(&self, taken: Option<TakenCount>, receive_or_error: bool, placed: u32) {
        self.heard.polled(taken, receive_or_error);
        crate::rings::kept::polled(taken, placed);
    }

    /// The next completion not purged, if any.
    #[inline(always)]
    pub(crate) fn pop_live(&self, seg: &CqSeg) -> Option<Cqe> {
        self.pop_live_from(seg, &seg.ring().consumer())
    }

    /// [`CqInner::pop_live`] through the consumer view `ring` of `seg`'s ring, made once
    /// for a poll that removes many.
    #[inline(always)]
    fn pop_live_from(&self, seg: &CqSeg, ring: &Consumer<'_>) -> Option<Cqe> {
        let cqe = Cqe::decode(&self.pop_words(seg, ring, usize::MAX, true)?);
        self.polled(cqe.rq_taken, cqe.receive_or_error(), cqe.placed());
        Some(cqe)
    }

    /// The words of the next completion not purged, if any, word `skip` left 0 (not
    /// loaded; `usize::MAX`: none). Not yet heard: the caller tells `heard`.
    ///
    /// `first`: nothing was removed before in this poll, so an empty ring is looked at
    /// closely: a `head` scribbled past `tail`, a reservation left unpublished
    /// ([`CqInner::unstick`]). A poll that removed completions leaves both to the next
    /// poll that finds none, which reads `tail` then ([`Consumer::pop_skipping`]).
    #[inline(always)]
    fn pop_words(&self, seg: &CqSeg, ring: &Consumer<'_>, skip: usize, first: bool) -> Option<[u64; CQE_WORDS]> {
        // At most one dead producer's reservation is skipped per poll: a `tail` another
        // process scribbled far ahead reads as a run of unpublished reservations, and
        // skipping them all in one call would not return.
        let mut skipped = false;
        loop {
            match ring.pop_skipping(skip, first) {
                Pop::Entry(words, pos) => {
                    if self.purging.load(Ordering::Acquire) && self.purged(Cqe::qp_num_of(&words), seg.gen, pos) {
                        continue;
                    }
                    return Some(words);
                }
                Pop::Empty => {
                    // Past a dead producer's reservation, what follows it is polled now.
                    if first && !skipped && seg.ring().stalled_at().is_some_and(|h| self.unstick(seg, h)) {
                        skipped = true;
                        continue;
                    }
                    return None;
                }
                Pop::Corrupt => {
                    // Another process scribbled over the ring: the CQ is in error, as
                    // after an overrun (ibv_poll_cq(3) then fails).
                    seg.shm().errored.store(1, Ordering::Release);
                    return None;
                }
            }
        }
    }

    /// The consumer is stuck at ring position `h`, reserved and not published: at once,
    /// and every [`STUCK_CHECK`] after while it stays there, skip it if no live producer
    /// is inside (the one that reserved it died: [`CqSeg::skip_dead`]; a live one is
    /// counted inside from before its reservation to after its publish). A producer
    /// between reserving and publishing takes nanoseconds, so this is rare. Whether it
    /// skipped it.
    #[cold]
    fn unstick(&self, seg: &CqSeg, h: u64) -> bool {
        let now = std::time::Instant::now();
        let mut stuck = self.stuck.lock().unwrap_or_else(|p| p.into_inner());
        match *stuck {
            Some((at, since)) if at == h && now.duration_since(since) < STUCK_CHECK => return false,
            _ => *stuck = Some((h, now)),
        }
        drop(stuck);
        let endpoint = self.ctx.endpoint;
        let skipped = self.skip_dead(seg, &|ep, pid| producer_alive(endpoint, ep, pid));
        if skipped {
            tracing::warn!(cq = self.id, pos = h, "a process died while completing to this CQ: its completion is lost (a receive's is flushed by its QP), the ones after it are delivered");
        }
        skipped
    }

    /// [`CqSeg::skip_dead`] of generation `seg` (the consumer lock held), the position
    /// skipped noted in `skipped` under its lock, which [`CqInner::was_published`] holds
    /// across its look. Whether it skipped one.
    ///
    /// A thread of this process publishing uncounted ([`CqSeg::publish_uncounted`]) is
    /// not in the gate: the reservation the consumer is stuck at may be its. It marked
    /// itself inside the CQ before reserving, and the reservation seen means the mark is
    /// visible, so the position is skipped only once the threads inside now have left (a
    /// few milliseconds at most; else the next look tries again).
    #[cold]
    fn skip_dead(&self, seg: &CqSeg, alive: &dyn Fn(u32, u32) -> bool) -> bool {
        let Some(at) = seg.ring().stalled_at() else { return false };
        if !self.own_publishers_left(OWN_PUBLISHERS_WAIT) {
            return false;
        }
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        let Some(pos) = seg.skip_dead(at, alive) else { return false };
        if skipped.len() == SKIPPED_KEPT {
            skipped.pop_front();
        }
        skipped.push_back((seg.gen, pos));
        true
    }

    /// Whether every thread of this process that may be inside an uncounted publish into
    /// this CQ ([`CqSeg::publish_uncounted`]: marked inside it now) has left, waiting at
    /// most `limit`; true at once if this process's threads count themselves in the gate.
    /// Called after a store the publishers must see (the resize flag) or a reservation
    /// the caller saw: an asymmetric fence (`grace::Insiders`). The threads pinned for
    /// anything else are not waited for.
    fn own_publishers_left(&self, limit: std::time::Duration) -> bool {
        !self.own_fence || grace::Insiders::now(self.insider_name()).is_some_and(|s| s.wait(limit))
    }

    /// What this CQ's uncounted publishers mark themselves inside (`grace::Pin::inside`)
    /// and its resize and skip look for: its address, unique while it lives.
    fn insider_name(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Whether the completion a receive's mark says is at `at` became visible: a taker
    /// that died between marking its take as completing and the one store that publishes
    /// the completion left it unpublished, at a reservation the consumer skips
    /// (docs/failure-model.md, the dead CQ producer), and the QP's flush completes that
    /// receive (`RecvRing::reclaim_placing`, `RecvRing::reclaim_recorded`). In the current
    /// generation the ring tells ([`CqSeg::published`]); in one a resize replaced, which
    /// moved what was published, only a skip noted says no. An unknown place (this
    /// process's own completion) was published. Any thread.
    ///
    /// Rule: ibv_modify_qp(3) to ERR completes every outstanding receive, once; a
    /// receive whose completion was lost with the process that was publishing it is
    /// outstanding.
    #[cold]
    pub(crate) fn was_published(&self, at: CqAt) -> bool {
        if at == CqAt::UNKNOWN {
            return true;
        }
        let skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        let held = Reading::pin();
        let seg = self.gens.current(&held);
        if at.of_gen(seg.gen) {
            return seg.published(at, |pos| skipped.contains(&(seg.gen, pos)));
        }
        !skipped.iter().any(|&(gen, pos)| CqAt::new(gen, pos) == at)
    }

    /// Sanitizer (docs/sanitizer.md): a poll of this CQ starts on this thread (`batch`:
    /// an `ibv_start_poll`). Ends a pending lost-wakeup arming; checks for an unfinished
    /// batch of this thread (cq-poll-unfinished) and, on a SINGLE_THREADED CQ, for
    /// another thread inside a poll (single-threaded-cq-shared). Returns whether this
    /// thread took the poller marker, to give back with [`CqInner::sanitize_poll_left`].
    #[cold]
    #[inline(never)]
    pub(crate) fn sanitize_poll_entered(&self, batch: bool) -> bool {
        // A load first: the flag is rarely set, and a swap would write the line per poll.
        if self.armed_full.load(Ordering::Relaxed) && self.armed_full.swap(false, Ordering::Relaxed) {
            crate::sanitizer::polled_after_arming(self.sanitizer_id());
        }
        let me = crate::sanitizer::thread_token();
        let verb = if batch { "ibv_start_poll" } else { "ibv_poll_cq" };
        if batch {
            crate::sanitizer::batch_starting(verb, self.sanitizer_id(), Some(me));
        }
        if !self.flags.contains(CqCreateFlags::SINGLE_THREADED) {
            return false;
        }
        match self.poller.compare_exchange(0, me, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => true,
            Err(t) if t == me => false,
            Err(other) => {
                crate::sanitizer::shared_poll(verb, self.sanitizer_id(), other);
                false
            }
        }
    }

    /// Sanitizer: the poll [`CqInner::sanitize_poll_entered`] marked is over.
    pub(crate) fn sanitize_poll_left(&self) {
        self.poller.store(0, Ordering::Release);
    }

    /// The look both empty checks start with: `seg` is not in error, nothing is
    /// published at the consumer's position, and no resize is moving its completions to
    /// a generation not current yet (four loads, no lock; the last of the header's line,
    /// which the first brought in).
    #[inline(always)]
    fn unpublished(seg: &CqSeg) -> bool {
        seg.shm().errored.load(Ordering::Relaxed) == 0 && seg.ring().nothing_published() && !seg.may_be_moving()
    }

    /// [`CqInner::surely_empty`]'s common case, without a call, so that the C entry point
    /// of the busy poller's empty poll needs no frame: not in error, nothing published,
    /// not the poll that looks for a stuck reservation, no network connection to receive
    /// for. Counts the poll when it answers [`Looked::Empty`]; [`Looked::Published`] (or
    /// in error) means the locked poll has something to do, [`Looked::Unsure`] "ask
    /// [`CqInner::surely_empty`]" (which counts it then).
    #[inline(always)]
    fn look(&self) -> Looked {
        // A thread that pins through its thread-local (or has not pinned yet) looks the
        // locked way: here nothing may be called (`grace::pin_here`).
        let Some(pinned) = grace::pin_here() else { return Looked::Unsure };
        if !Self::unpublished(self.gens.current(&Reading::Pin(pinned))) {
            return Looked::Published;
        }
        let n = self.quiet.polls.load(Ordering::Relaxed).wrapping_add(1);
        if n.is_multiple_of(CLOCK_CHECK) || crate::progress::net_active() {
            return Looked::Unsure;
        }
        self.quiet.polls.store(n, Ordering::Relaxed);
        Looked::Empty
    }

    /// Whether a poll would find nothing, known without the consumer lock: the CQ is not
    /// in error and nothing is published at the consumer's position (ibv_poll_cq(3) on
    /// an empty CQ, the busy poller's common case, pays three loads and a store, none of
    /// a line a producer writes before the completion itself: a poller spinning here
    /// never takes the ring's `tail` from a producer in another process). Every
    /// [`CLOCK_CHECK`]-th such poll, if the last look is [`LOOK_EVERY_MS`] old, also asks
    /// whether a position is reserved and not published, and if so takes the locked way,
    /// where a reservation of a producer that died is skipped (`unstick`). `false` means "take the lock and look", not "not
    /// empty". When it is empty, what the network holds for this process is received (a
    /// busy poller's next poll finds what it completes), as after a poll that found
    /// nothing under the lock.
    pub(crate) fn surely_empty(&self) -> bool {
        let held = Reading::pin();
        let seg = self.gens.current(&held);
        let empty = Self::unpublished(seg) && {
            let n = self.quiet.polls.load(Ordering::Relaxed).wrapping_add(1);
            self.quiet.polls.store(n, Ordering::Relaxed);
            !n.is_multiple_of(CLOCK_CHECK) || !self.quiet.look_due() || seg.ring().nothing_reserved()
        };
        if empty && crate::progress::net_active() {
            crate::progress::receive_inline(self.ctx.endpoint);
        }
        empty
    }

    /// [`CqInner::pop_into`] on a device that counts statistics: each CQE on its QP's
    /// record, then the poll on the CQ's (out of line: the plain poll only tests the
    /// switch).
    #[cold]
    #[inline(never)]
    fn pop_counted(&self, stats: &crate::shm::stats::Stats, out: &mut [Wc]) -> PollResult {
        stats.waiting(self.id, self.gens.current(&Reading::pin()).ring().len());
        let r = self.pop_into(out);
        match &r {
            &Ok(n) => {
                for wc in &out[..n] {
                    stats.completion(wc.qp_num(), Cqe::polled_of(wc));
                }
                stats.polled(self.id, n);
            }
            Err(e) if matches!(**e, Error::CqOverrun) => stats.overrun(self.id),
            Err(_) => {}
        }
        r
    }

    /// The error of a poll that found the CQ overrun, noted on its statistics.
    #[cold]
    pub(crate) fn overrun_seen(&self) -> Error {
        if let Some(stats) = self.stats {
            stats.overrun(self.id);
        }
        Error::CqOverrun
    }

    /// Removes up to `out.len()` CQEs, oldest first, into `out`; returns how many. The
    /// CQEs published in a row go by the ring's [`Consumer::pop_published`] (one read and
    /// one store of `head` per run); whatever stops it is left to [`CqInner::pop_words`],
    /// one CQE at a time.
    #[inline(always)]
    fn pop_into(&self, out: &mut [Wc]) -> PollResult {
        let held = self.hold_consumer_or_pin();
        let seg = self.gens.current(&held);
        if seg.shm().errored.load(Ordering::Acquire) != 0 {
            return Err(overran());
        }
        let ring = seg.ring().consumer();
        let keep = |r: WcRead, pos| {
            if self.purging.load(Ordering::Acquire) && self.purged(r.qp_num, seg.gen, pos) {
                return false;
            }
            self.polled(r.taken, r.receive_or_error, r.placed);
            true
        };
        let mut n = ring.pop_published(out, Cqe::read_wc, keep);
        while n < out.len() {
            let Some(words) = self.pop_words(seg, &ring, Cqe::TIMESTAMP_WORD, n == 0) else { break };
            let receive_or_error = Cqe::write_wc(&words, &mut out[n]);
            self.polled(Cqe::taken_of(&words), receive_or_error, Cqe::placed_of(&words));
            n += 1;
            n += ring.pop_published(&mut out[n..], Cqe::read_wc, keep);
        }
        Ok(n)
    }
}

/// What a poll answers: how many CQEs it wrote, or why it failed, boxed so that the
/// answer fits two registers (a poll fails only when the CQ overran, ibv_poll_cq(3)).
#[doc(hidden)]
pub type PollResult = std::result::Result<usize, Box<Error>>;

/// The error of a poll of an overrun CQ (out of line: the poll's path only tests for it).
#[cold]
#[inline(never)]
fn overran() -> Box<Error> {
    Box::new(Error::CqOverrun)
}

/// What [`Cq::look`], the empty poll without the lock, found.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Looked {
    /// The CQ is empty: the poll is done (and counted).
    Empty,
    /// A completion is published at the consumer's position, or the CQ is in error: the
    /// locked poll has something to do.
    Published,
    /// Not known without the slower look (the sanitizer or statistics are on, the
    /// periodic look for a stuck reservation, network connections to receive for).
    Unsure,
}

/// A completion queue (`struct ibv_cq` / `struct ibv_cq_ex`). Cloning shares it.
#[derive(Clone)]
pub struct Cq {
    repr: Repr,
}

/// What a [`Cq`] is: the soft device's, or (feature `rdma-core`) one of the rdma-core
/// backend. Without the feature the one variant costs nothing; with it the soft path pays
/// one predictable branch.
#[derive(Clone)]
enum Repr {
    Soft(Arc<CqInner>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn native::NativeCq>),
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").field("cqe", &self.cqe()).finish()
    }
}

impl Cq {
    /// A CQ of context `ctx` (ibv_create_cq(3)), published in the device's `cqs`.
    pub(crate) fn new(ctx: Arc<ContextCore>, cqs: &'static Table<CqInner>, init: &CqInit<'_>) -> Result<Self> {
        if init.cqe == 0 {
            return Err(Error::invalid("create_cq", Rule::CqeRange { cqe: 0, max: limits::MAX_CQE }));
        }
        if init.cqe > limits::MAX_CQE {
            return Err(Error::Limit {
                verb: "create_cq",
                what: "cqe",
                max: limits::MAX_CQE.into(),
                got: init.cqe.into(),
            });
        }
        if init.comp_vector >= limits::NUM_COMP_VECTORS {
            return Err(Error::invalid("create_cq", Rule::CompVector { vector: init.comp_vector, count: limits::NUM_COMP_VECTORS }));
        }
        let unsupported = init.wc_flags.difference(WcExFlags::SUPPORTED);
        if !unsupported.is_empty() {
            return Err(Error::unsupported("create_cq_ex", "wc_flags (cvlan, flow tag)"));
        }
        let channel = match init.channel {
            Some(ch) => Some(ch.inner().map_err(|_| Error::invalid("create_cq", Rule::ForeignContext { what: "completion channel" }))?),
            None => None,
        };
        if let Some(ch) = channel {
            if !ch.belongs_to(cqs, ctx.id) {
                return Err(Error::invalid("create_cq", Rule::ForeignContext { what: "completion channel" }));
            }
            if ch.is_destroyed() {
                return Err(Error::invalid("create_cq", Rule::Closed { what: "completion channel" }));
            }
        }
        let endpoint = ctx.endpoint;
        let id = cqs.reserve()?;
        if let Err(e) = endpoint.tables.reserve_cq(id) {
            cqs.remove(id);
            return Err(e);
        }
        if let Some(stats) = endpoint.stats {
            if let Err(e) = stats.claim_cq(id) {
                cqs.remove(id);
                return Err(e);
            }
        }
        let seg = match CqSeg::create(&endpoint.dir, id, 1, init.cqe as usize) {
            Ok(s) => s,
            Err(e) => {
                cqs.remove(id);
                return Err(e);
            }
        };
        let mut flags = 0;
        if init.flags.contains(CqCreateFlags::IGNORE_OVERRUN) {
            flags |= cq_segment::FLAG_IGNORE_OVERRUN;
        }
        if init.wc_flags.intersects(WcExFlags::COMPLETION_TIMESTAMP | WcExFlags::COMPLETION_TIMESTAMP_WALLCLOCK) {
            flags |= cq_segment::FLAG_TIMESTAMPS;
        }
        let sh = seg.shm();
        sh.flags.store(flags, Ordering::Release);
        sh.ctx.store(ctx.id, Ordering::Release);
        if let Some(ch) = channel {
            sh.channel.store(ch.id + 1, Ordering::Release);
            ch.attach();
        }
        let inner = Arc::new(CqInner {
                ctx,
                cqs,
                id,
                gens: Gens::new(seg),
                consumer: SpinMutex::new(()),
                flags: init.flags,
                wc_flags: init.wc_flags,
                channel: channel.cloned(),
                cq_context: AtomicUsize::new(init.cq_context),
                comp_events: EventCounter::default(),
                async_events: EventCounter::default(),
                users: AtomicU32::new(0),
                purges: Mutex::new(Vec::new()),
                purging: AtomicBool::new(false),
                cookie: AtomicUsize::new(0),
                polled: Default::default(),
                stuck: Mutex::new(None),
                skipped: Mutex::new(std::collections::VecDeque::new()),
                own_fence: grace::barrier_available(),
                forks: crate::sys::forks_since_load(),
                quiet: Default::default(),
                heard: Default::default(),
                parent: Mutex::new(None),
                poller: AtomicU64::new(0),
                armed_full: AtomicBool::new(false),
                held: Mutex::new(std::collections::VecDeque::new()),
                holding: AtomicBool::new(false),
                stats: endpoint.stats,
            });
        cqs.publish(id, &inner);
        let cq = Cq { repr: Repr::Soft(inner) };
        if let Some(stats) = endpoint.stats {
            stats.sized(id, cq.cqe());
        }
        if crate::sanitizer::on() {
            let id = crate::sanitizer::Id::new(endpoint.slot, id);
            crate::sanitizer::created(crate::sanitizer::Kind::Cq, id, None);
            crate::sanitizer::cq_sized(id, cq.cqe(), init.flags.contains(CqCreateFlags::IGNORE_OVERRUN), false);
        }
        let rec = endpoint.tables.cq(id);
        rec.gen.store(1, Ordering::Relaxed);
        rec.id.store(id + 1, Ordering::Release);
        Ok(cq)
    }

    pub(crate) fn from_inner(inner: Arc<CqInner>) -> Self {
        Cq { repr: Repr::Soft(inner) }
    }

    /// A CQ of the rdma-core backend.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(cq: Arc<dyn native::NativeCq>) -> Self {
        Cq { repr: Repr::Native(cq) }
    }

    /// The backend's CQ, for a CQ of the rdma-core backend.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn native(&self) -> Option<&Arc<dyn native::NativeCq>> {
        match &self.repr {
            Repr::Soft(_) => None,
            Repr::Native(cq) => Some(cq),
        }
    }

    /// The context the CQ belongs to, soft or the backend's.
    pub(crate) fn parent(&self) -> crate::mr::domain::ContextOf {
        match &self.repr {
            Repr::Soft(inner) => crate::mr::domain::ContextOf::Soft(inner.ctx.clone()),
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => crate::mr::domain::ContextOf::Native(cq.context()),
        }
    }

    /// The soft CQ's state; `EOPNOTSUPP` for a CQ of the rdma-core backend (what its
    /// caller does, the backend does not offer).
    pub(crate) fn inner(&self) -> Result<&Arc<CqInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(Error::native_unsupported("a verb of the soft device")),
        }
    }

    /// Keeps the verbs layer's hold on the parent domain the CQ was created on, until
    /// the CQ is destroyed or dropped (a soft CQ's: only those are made on a parent domain).
    pub(crate) fn set_parent(&self, hold: Box<dyn std::any::Any + Send + Sync>) {
        if let Ok(inner) = self.inner() {
            *inner.parent.lock().expect("cq parent") = Some(hold);
        }
    }

    /// Runs `f` on the hold given to [`Cq::set_parent`] (`None` without one, or once the
    /// CQ is destroyed).
    pub(crate) fn with_parent<R>(&self, f: impl FnOnce(Option<&(dyn std::any::Any + Send + Sync)>) -> R) -> R {
        match self.inner() {
            Ok(inner) => f(inner.parent.lock().expect("cq parent").as_deref()),
            Err(_) => f(None),
        }
    }

    /// Number of entries the CQ holds (≥ the `cqe` requested, a power of two; on the
    /// rdma-core backend, what the provider gave, `ibv_cq.cqe`).
    pub fn cqe(&self) -> u32 {
        match &self.repr {
            Repr::Soft(inner) => inner.gens.current(&Reading::pin()).ring().capacity() as u32,
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => cq.cqe(),
        }
    }

    /// The fields extended polling may read (none on the rdma-core backend, which makes
    /// no extended CQ).
    pub fn wc_flags(&self) -> WcExFlags {
        match &self.repr {
            Repr::Soft(inner) => inner.wc_flags,
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => WcExFlags::empty(),
        }
    }

    /// The creation flags (none on the rdma-core backend).
    pub fn create_flags(&self) -> CqCreateFlags {
        match &self.repr {
            Repr::Soft(inner) => inner.flags,
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => CqCreateFlags::empty(),
        }
    }

    /// The `cq_context` given at creation.
    pub fn cq_context(&self) -> usize {
        match &self.repr {
            Repr::Soft(inner) => inner.cq_context(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => cq.cq_context(),
        }
    }

    /// Whether an overrun put the CQ in the error state. Always false on the rdma-core
    /// backend: a provider reports an overrun as an asynchronous event (`CQ_ERR`), which
    /// the backend does not read.
    pub fn is_errored(&self) -> bool {
        match &self.repr {
            Repr::Soft(inner) => inner.errored(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => false,
        }
    }

    /// Removes up to `wc.len()` completions, oldest first, into `wc`; returns how many.
    ///
    /// Rule: ibv_poll_cq(3), RETURN VALUE: returns min(n, available); 0 when empty.
    /// Rule: ibv_poll_cq(3) NOTES: each polled completion is removed for good.
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    #[inline]
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        // The busy poller's common case, an empty CQ, inline, without a call and without
        // the frame of the rest.
        match self.look() {
            Looked::Empty => Ok(0),
            looked => self.poll_after(wc, looked).map_err(|e| *e),
        }
    }

    /// [`Cq::poll`] once [`Cq::look`] answered `looked`, not [`Looked::Empty`] (for a
    /// caller that looks first and keeps this out of line: the C entry point of
    /// `ibv_poll_cq`). The error comes boxed, so that the answer fits two registers (a
    /// poll fails only when the CQ overran, once).
    #[doc(hidden)]
    #[inline(never)]
    pub fn poll_after(&self, wc: &mut [Wc], looked: Looked) -> PollResult {
        self.poll_after_inline(wc, looked)
    }

    /// [`Cq::poll_after`] inline, for a caller that is itself the out-of-line part (the C
    /// entry point's `poll_found`: one frame instead of two).
    #[doc(hidden)]
    #[inline(always)]
    pub fn poll_after_inline(&self, wc: &mut [Wc], looked: Looked) -> PollResult {
        match &self.repr {
            // `surely_empty` is asked again after an unsure look (each empty poll counts
            // once: the look counted nothing), unless the sanitizer is on; not after a look
            // that saw a completion published (or the CQ in error): the locked poll
            // follows at once.
            Repr::Soft(inner) => {
                let sanitize = crate::sanitizer::on();
                Self::poll_soft(inner, wc, sanitize, !sanitize && looked == Looked::Unsure)
            }
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => cq.poll(wc).map_err(Box::new),
        }
    }

    /// [`Cq::poll`] of the soft device (`sanitize`: the sanitizer is on); `ask_empty`:
    /// look for the empty CQ without the lock first (always `!sanitize`: a separate
    /// argument because it measured 3 instructions per CQE fewer in the batched poll's
    /// loop than testing `!sanitize` there).
    #[inline]
    fn poll_soft(inner: &CqInner, wc: &mut [Wc], sanitize: bool, ask_empty: bool) -> PollResult {
        if ask_empty && inner.surely_empty() {
            if let Some(stats) = inner.stats {
                stats.polled(inner.id, 0);
            }
            return Ok(0);
        }
        let marked = sanitize && inner.sanitize_poll_entered(false);
        let r = match inner.stats {
            None => inner.pop_into(wc),
            Some(stats) => inner.pop_counted(stats, wc),
        };
        if sanitize {
            if marked {
                inner.sanitize_poll_left();
            }
            let polled = *r.as_ref().unwrap_or(&0);
            crate::rings::wc::sanitize_polled(inner.ctx.endpoint.slot, &wc[..polled]);
        }
        if matches!(r, Ok(0)) && crate::progress::net_active() {
            // Empty: receive what the network holds for this process; what it completes
            // is found by the next poll (a busy poller's next call).
            crate::progress::receive_inline(inner.ctx.endpoint);
        }
        r
    }

    /// The empty poll of [`Cq::poll`] alone, for a caller that keeps the rest out of line
    /// (the C entry point of `ibv_poll_cq`, whose busy poller's common case then needs no
    /// stack frame): [`Looked::Empty`] means a poll was made and found the CQ empty
    /// (ibv_poll_cq(3): returns 0), counted as [`Cq::poll`] counts it; otherwise nothing
    /// was done and the caller polls with [`Cq::poll_after`]. Never panics.
    #[doc(hidden)]
    #[inline]
    pub fn look(&self) -> Looked {
        match &self.repr {
            Repr::Soft(inner) if !crate::sanitizer::on() && inner.stats.is_none() => inner.look(),
            Repr::Soft(_) => Looked::Unsure,
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Looked::Unsure,
        }
    }

    /// Requests one completion event on the channel (ibv_req_notify_cq(3)): for the next
    /// completion, or for the next solicited one when `solicited_only`.
    ///
    /// Rule: completions already in the CQ do not fire the event; the usual pattern is
    /// arm, then poll once more (ibv_get_cq_event(3); the sanitizer's lost-wakeup).
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // The application is about to wait for an event: ACKs it holds leave now
        // (docs/network.md, "Coalesced ACKs").
        crate::progress::application_waits();
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => return cq.req_notify(solicited_only),
        };
        if inner.is_destroyed() {
            return Err(Error::Destroyed { what: "completion queue" });
        }
        if crate::sanitizer::on() {
            self.sanitize_arming(inner);
        }
        let mut bits = if solicited_only { cq_segment::NOTIFY_SOLICITED } else { cq_segment::NOTIFY_NEXT };
        // A resize that replaced the generation armed hands the arming back: carried
        // to the current one (a resize is rare; this loops once per resize met).
        let held = Reading::pin();
        while bits != 0 {
            bits = inner.gens.current(&held).arm(bits);
        }
        // The poll after arming looks for a dead producer's reservation: a completion
        // behind it fired its event already, and none would come again.
        inner.look_soon();
        Ok(())
    }

    /// Sanitizer (lost-wakeup): the CQ is about to be armed; what it holds now raises no
    /// event (counted before the arming: a completion published after it fires).
    #[cold]
    #[inline(never)]
    fn sanitize_arming(&self, inner: &CqInner) {
        let Some(ch) = &inner.channel else { return };
        let held = self.len();
        if held > 0 {
            inner.armed_full.store(true, Ordering::Relaxed);
            crate::sanitizer::armed_holding(inner.sanitizer_id(), ch.sanitizer_id(), held);
        } else if inner.armed_full.swap(false, Ordering::Relaxed) {
            crate::sanitizer::polled_after_arming(inner.sanitizer_id());
        }
    }

    /// Sanitizer (wc-field-not-requested): `read` (`ibv_wc_read_*`) reads the field that
    /// `field` (`flag`) requests; a finding if the CQ was created without it.
    #[cold]
    #[inline(never)]
    pub(crate) fn sanitize_wc_read(&self, field: WcExFlags, read: &'static str, flag: &'static str) {
        let Ok(inner) = self.inner() else { return };
        if !inner.wc_flags.contains(field) {
            crate::sanitizer::field_not_requested(inner.sanitizer_id(), inner.wc_flags.bits(), field.bits(), read, flag);
        }
    }

    /// Acknowledges `n` completion events (ibv_ack_cq_events(3)).
    pub fn ack_events(&self, n: u32) {
        match &self.repr {
            Repr::Soft(inner) => inner.comp_events.ack(n),
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => cq.ack_events(n),
        }
    }

    /// Acknowledges `n` asynchronous events about this CQ (ibv_ack_async_event(3)).
    /// Nothing on the rdma-core backend, which delivers no asynchronous event.
    pub fn ack_async_events(&self, n: u32) {
        if let Ok(inner) = self.inner() {
            inner.async_events.ack(n);
        }
    }

    /// Changes the size to at least `cqe` entries (ibv_resize_cq(3)); returns the new
    /// size. Completions in the CQ are kept.
    ///
    /// Errors: `EINVAL` if `cqe` is 0, above `max_cqe`, or smaller than the number of
    /// completions the CQ holds (rxe `rxe_cq_chk_attr`); `EAGAIN` if a live process
    /// stays inside a completion to this CQ for 2 s (stopped by a signal or a debugger
    /// while it completed here): the CQ is left as it was, every completion kept
    /// (docs/rxe-differences.md); `EOPNOTSUPP` on the rdma-core backend.
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        let inner = self.soft("resize_cq")?;
        if let Some(e) = crate::fault_plan::fatal(inner.ctx.endpoint.slot, "resize_cq") {
            return Err(e);
        }
        if cqe == 0 || cqe > limits::MAX_CQE {
            return Err(Error::invalid("resize_cq", Rule::CqeRange { cqe, max: limits::MAX_CQE }));
        }
        let held = Reading::Lock(inner.consumer.lock());
        let seg = inner.gens.current(&held);
        let endpoint = inner.ctx.endpoint;
        let alive = |ep, pid| producer_alive(endpoint, ep, pid);
        // This process's own publishers, not counted in the gate, see the flag `freeze`
        // sets or are seen inside the CQ, and are waited for as the gate's are, within
        // the same 2 s: a peer takes a flag set for twice that as written by another
        // process (`cq_segment::publish_in`).
        let started = std::time::Instant::now();
        if seg.freeze(&alive) == Frozen::TimedOut || !inner.own_publishers_left(cq_segment::RESIZE_WAIT.saturating_sub(started.elapsed())) {
            // Moving the ring now would lose the completion of the producer still inside
            // and, at its hole, every completion behind it: nothing moves, the CQ stays
            // as it was (docs/completion-queues.md, "Resize").
            seg.thaw();
            return Err(Error::Again { verb: "resize_cq", why: "a live process is still inside a completion to this CQ (stopped or descheduled for 2 s); nothing was moved, try again" });
        }
        if (cqe as usize) < seg.ring().len() {
            seg.thaw();
            return Err(Error::invalid("resize_cq", Rule::CqeBelowQueued { cqe, queued: seg.ring().len() as u32 }));
        }
        let new = match CqSeg::create(&endpoint.dir, inner.id, seg.gen + 1, cqe as usize) {
            Ok(n) => n,
            Err(e) => {
                seg.thaw();
                return Err(e);
            }
        };
        new.inherit(seg);
        let ignore = inner.flags.contains(CqCreateFlags::IGNORE_OVERRUN);
        // Purged completions are dropped on the way: the purge records hold positions of
        // the old ring, which mean nothing in the new one.
        // No live producer is inside: a reservation still unpublished is a dead one's,
        // skipped so the completions after it move too.
        loop {
            match inner.pop_live(seg) {
                Some(c) => {
                    let _ = new.ring().push(&c.encode(), ignore);
                }
                None if inner.skip_dead(seg, &alive) => {}
                None => break,
            }
        }
        inner.purges.lock().expect("cq purges").clear();
        inner.purging.store(false, Ordering::Release);
        // The new generation becomes current, then producers that meet the frozen one
        // follow the mark (this process's reload `current`; peers open the segment the
        // record names).
        let gen = new.gen;
        let new = inner.gens.advance(new, &held);
        endpoint.tables.cq(inner.id).gen.store(gen, Ordering::Release);
        seg.shm().moved.store(gen, Ordering::Release);
        seg.hand_over_arming(new);
        seg.unlink();
        let cqe = new.ring().capacity() as u32;
        if let Some(stats) = inner.stats {
            stats.sized(inner.id, cqe);
        }
        if crate::sanitizer::on() {
            crate::sanitizer::cq_sized(inner.sanitizer_id(), cqe, false, true);
        }
        Ok(cqe)
    }

    /// Destroys the CQ (ibv_destroy_cq(3)) after every completion event and
    /// asynchronous event delivered for it has been acknowledged (this blocks).
    ///
    /// Errors: `EBUSY` while a QP or SRQ still completes to it, `EINVAL` once destroyed.
    /// On the rdma-core backend, the provider's ibv_destroy_cq(3), after the calls in
    /// progress through other handles return; `EBUSY` also while an event handed out for
    /// it is not acknowledged (where the soft device waits); an error leaves the CQ
    /// usable (docs/rdma-core-backend.md).
    /// Rule: a CQ created on a parent domain gives it back here, so the parent domain can
    /// be deallocated next (ibv_alloc_parent_domain(3)).
    pub fn destroy(&self) -> Result<()> {
        #[cfg(feature = "rdma-core")]
        if let Repr::Native(cq) = &self.repr {
            return cq.destroy();
        }
        let inner = self.soft("destroy_cq")?;
        match inner.users.compare_exchange(0, DESTROYED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(u) if u & DESTROYED != 0 => {
                return Err(Error::Destroyed { what: "completion queue" })
            }
            Err(_) => return Err(Error::Busy { what: "completion queue" }),
        }
        if crate::sanitizer::on() {
            // Reported before the waits below, which block for ever without the acks
            // (ibv_get_cq_event(3)).
            let id = inner.sanitizer_id();
            let comp = inner.comp_events.unacked();
            if comp > 0 {
                crate::sanitizer::unacked(false, crate::sanitizer::Kind::Cq, id, comp, "ibv_destroy_cq");
            }
            let asynchronous = inner.async_events.unacked();
            if asynchronous > 0 {
                crate::sanitizer::unacked(true, crate::sanitizer::Kind::Cq, id, asynchronous, "ibv_destroy_cq");
            }
            crate::sanitizer::batch_starting("ibv_destroy_cq", id, None);
            crate::sanitizer::gone(crate::sanitizer::Kind::Cq, id);
        }
        inner.comp_events.wait_all_acked();
        inner.async_events.wait_all_acked();
        if let Some(ch) = &inner.channel {
            ch.detach();
        }
        inner.ctx.endpoint.tables.cq(inner.id).id.store(0, Ordering::Release);
        if let Some(stats) = inner.stats {
            stats.release_cq(inner.id);
        }
        inner.cqs.remove(inner.id);
        // The parent domain can be deallocated now (ibv_alloc_parent_domain(3)).
        inner.parent.lock().expect("cq parent").take();
        Ok(())
    }

    /// Number of completions waiting (a snapshot). 0 on the rdma-core backend, which
    /// cannot look into a provider's queue without polling it.
    ///
    /// Rule: as ibv_poll_cq(3), a resize in another thread (ibv_resize_cq(3)) hides no
    /// completion: the generation it is emptying reads as 0 until the next one is current,
    /// so a count of 0 there is taken again once the resize is done (under the consumer
    /// lock, which it holds; docs/completion-queues.md, "Resize").
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Soft(inner) => {
                let pinned = Reading::pin();
                let seg = inner.gens.current(&pinned);
                let n = seg.ring().len();
                if n > 0 || !seg.may_be_moving() {
                    return n;
                }
                drop(pinned);
                // Not `hold_consumer_or_pin`: a SINGLE_THREADED CQ's resize takes the lock too.
                let held = Reading::Lock(inner.consumer.lock());
                inner.gens.current(&held).ring().len()
            }
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => 0,
        }
    }

    /// Whether no completion is waiting (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The word the owner of the CQ attached with [`Cq::set_cookie`] (0 until then).
    ///
    /// Rule: every handle of the CQ, also one handed back by a completion event
    /// ([`channel::CompChannel::get_cq_event`]) or an asynchronous event, reads the same
    /// word; rverbs never interprets it (a language binding keeps the address of its own
    /// CQ object here, as `container_of` does for a C provider). Unlike
    /// [`Cq::cq_context`] it is not the application's value of the C API.
    pub fn cookie(&self) -> usize {
        match &self.repr {
            Repr::Soft(inner) => inner.cookie.load(Ordering::Acquire),
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => cq.cookie(),
        }
    }

    /// Attaches an opaque word to the CQ, read back by [`Cq::cookie`] on any handle.
    pub fn set_cookie(&self, value: usize) {
        match &self.repr {
            Repr::Soft(inner) => inner.cookie.store(value, Ordering::Release),
            #[cfg(feature = "rdma-core")]
            Repr::Native(cq) => cq.set_cookie(value),
        }
    }

    /// What the owner polled from this CQ ([`crate::CqStats`]; docs/device.md, "Per-QP
    /// and per-CQ statistics"): all zero unless the device counts statistics
    /// (`DeviceConfig::stats`, `RVERBS_STATS=1`).
    pub fn stats(&self) -> crate::shm::stats::CqStats {
        self.inner().ok().and_then(|inner| inner.stats.and_then(|s| s.cq_stats(inner.id))).unwrap_or_default()
    }

    /// Whether two handles name the same CQ.
    pub fn same_as(&self, other: &Cq) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Soft(a), Repr::Soft(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "rdma-core")]
            (Repr::Native(a), Repr::Native(b)) => a.same_as(&**b),
            #[cfg(feature = "rdma-core")]
            _ => false,
        }
    }

    /// The soft CQ's state; `EOPNOTSUPP` naming `verb` on the rdma-core backend.
    #[cfg_attr(not(feature = "rdma-core"), allow(unused_variables))]
    fn soft(&self, verb: &'static str) -> Result<&Arc<CqInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(Error::native_unsupported(verb)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_proto::verbs::WcOpcode;
    use std::sync::mpsc;

    fn cq(entries: u32) -> Cq {
        let ctx = crate::devices().unwrap()[0].open().unwrap();
        ctx.create_cq(&CqInit::new(entries)).unwrap()
    }

    fn ids(cq: &Cq) -> Vec<u64> {
        let mut wc = [Wc::default(); 8];
        let n = cq.poll(&mut wc).unwrap();
        wc[..n].iter().map(|w| w.wr_id()).collect()
    }

    // A thread of the CQ's own process publishes without counting itself in the gate,
    // marked as inside the CQ. A resize must then wait for the threads inside when it set
    // its flag (one of them may be between its look at the flag and its store), and call
    // itself off, moving nothing, if one stays inside past the time a resize waits for
    // producers. A thread pinned but not inside this CQ is not waited for.
    #[test]
    fn a_resize_waits_for_a_thread_of_this_process_that_may_be_inside_an_uncounted_publish() {
        let cq = cq(4);
        let inner = cq.inner().unwrap().clone();
        assert!(inner.own_fence, "membarrier(2) on this machine");
        inner.push(Cqe::success(1, 1, WcOpcode::Send, 0)).unwrap();
        let what = inner.insider_name();
        let hold = |release: mpsc::Receiver<()>, what: Option<usize>| {
            let (tx, rx) = mpsc::channel();
            let t = std::thread::spawn(move || {
                let pin = grace::pin();
                let inside = what.map(|w| pin.inside(w).expect("the outermost pin"));
                tx.send(()).unwrap();
                release.recv().unwrap();
                drop(inside);
                drop(pin);
            });
            rx.recv().unwrap();
            t
        };
        // Pinned, not inside: the resize does not wait.
        let (release, rx) = mpsc::channel();
        let t = hold(rx, None);
        cq.resize(8).unwrap();
        release.send(()).unwrap();
        t.join().unwrap();
        // Inside past the wait: called off, nothing moved.
        let (release, rx) = mpsc::channel();
        let t = hold(rx, Some(what));
        let started = std::time::Instant::now();
        assert!(matches!(cq.resize(64), Err(Error::Again { .. })), "a thread inside for the whole wait");
        assert!(started.elapsed() >= cq_segment::RESIZE_WAIT);
        release.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(ids(&cq), [1], "the completion stayed where it was");
        // Inside, then left during the wait: the resize goes through after it.
        inner.push(Cqe::success(2, 1, WcOpcode::Send, 0)).unwrap();
        let (release, rx) = mpsc::channel();
        let t = hold(rx, Some(what));
        let (done_tx, done) = mpsc::channel();
        let c2 = inner.clone();
        let resizer = std::thread::spawn(move || {
            let r = Cq::from_inner(c2).resize(64);
            done_tx.send(()).unwrap();
            r
        });
        assert!(done.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "the resize waits for the thread inside");
        release.send(()).unwrap();
        assert!(resizer.join().unwrap().is_ok());
        t.join().unwrap();
        inner.push(Cqe::success(3, 1, WcOpcode::Send, 0)).unwrap();
        assert_eq!(ids(&cq), [2, 3]);
    }

    // The consumer skips a reservation nobody will publish once no live producer can hold
    // it; a thread of its own process between reserving and publishing is not in the
    // gate. Its reservation must wait for it: skipped, the completion it then publishes
    // would land behind the consumer, lost, and the slot's next lap would read it.
    #[test]
    fn a_reservation_of_a_thread_of_this_process_is_waited_for_not_skipped() {
        let cq = cq(4);
        let inner = cq.inner().unwrap().clone();
        let (tx, rx) = mpsc::channel();
        let (publish_tx, publish) = mpsc::channel::<()>();
        let i2 = inner.clone();
        let t = std::thread::spawn(move || {
            let pin = Reading::pin();
            let inside = pin.inside(i2.insider_name()).expect("the outermost pin");
            // Reserved, the words not written yet (as `publish_uncounted` between the two).
            let seg = i2.gens.current(&pin);
            seg.ring().reserve_and_die();
            tx.send(()).unwrap();
            publish.recv().unwrap();
            let (_, _, seq) = seg.ring().raw_words(0);
            seq.store(1, Ordering::Release);
            drop(inside);
            drop(pin);
        });
        rx.recv().unwrap();
        inner.push(Cqe::success(2, 1, WcOpcode::Send, 0)).unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_millis(100);
        while std::time::Instant::now() < end {
            inner.look_soon();
            assert_eq!(ids(&cq), Vec::<u64>::new(), "skipped a reservation of a live thread of this process");
        }
        publish_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(ids(&cq), [0, 2], "both, in order");
    }
}
