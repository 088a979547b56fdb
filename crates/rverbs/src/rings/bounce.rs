//! Receives placed by their owner (docs/memory.md, "Receives placed by their owner").
//!
//! A receive whose buffer is private memory (a region peers reach only with cross-memory
//! attach: a stack, a file or shared mapping, any caller memory with
//! `RVERBS_SHARED_MR=0`) would cost the peer process that sends into it a system call per
//! message. When the QP's writer is such a peer, the receive is posted instead with one
//! SGE into a slot of a region the library allocates for the queue (a shared segment:
//! the peer places the message with plain stores); the poll that retrieves the receive's
//! completion copies the message from the slot into the receive's own buffers, checking
//! their keys again, before the completion is returned (ibv_post_recv(3): the buffers are
//! the program's once the completion is retrieved, not before).
//!
//! The completion names its receive by the ring's tag and the count of receives taken
//! (`rings::recv_count`), which give the receive's position; positions, not ring slots,
//! name the slots here, since a ring slot is posted again as soon as its receive is taken,
//! possibly before that receive's completion is polled.
//!
//! A QP destroyed while completions of such receives wait in its CQ frees its slots'
//! region (so that its PD can be deallocated), but not their messages: once the destroy
//! has waited for the placements in progress, the messages of the slots still in use are
//! copied out and parked ([`Bounce::park`]) until the polls that retrieve their
//! completions place them ([`unpark`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rverbs_proto::verbs::Access;
use smallvec::SmallVec;

use crate::mr::domain::PdCore;
use crate::mr::endpoint::Endpoint;
use crate::mr::{Mr, Sge};

/// The largest receive placed by its owner, and each slot's size: beyond about 2 KiB the
/// message's second copy (and its cache lines crossing to the poller's core) costs more
/// than the peer's system call it saves (BENCHMARKS.md, "Receives placed by their owner").
pub(crate) const SLOT_LEN: u32 = 1024;

/// Slots per queue, at most: a receive posted while every slot is in use goes the way
/// of any private buffer (the peer's cross-memory attach).
const MAX_SLOTS: usize = 512;

/// A slot in use: the position of the receive posted through it, plus one, and the
/// receive's own scatter list.
#[derive(Default)]
struct InUse {
    at: u64,
    sges: SmallVec<[Sge; 2]>,
}

/// Which receive uses which slot: the receive at position `p` uses slot `p % len`, if that
/// slot is free when it is posted (its last receive's completion was polled, or that
/// receive was drained untaken); a receive whose slot is still in use gets none.
struct Slots(Vec<InUse>);

impl Slots {
    fn new(n: usize) -> Slots {
        Slots((0..n).map(|_| InUse::default()).collect())
    }

    fn slot_of(&self, at: u64) -> usize {
        (at % self.0.len() as u64) as usize
    }

    /// The slot of the receive at `at` with scatter list `sges`, if free.
    fn take(&mut self, at: u64, sges: &[Sge]) -> Option<usize> {
        let slot = self.slot_of(at);
        let s = &mut self.0[slot];
        if s.at != 0 {
            return None;
        }
        *s = InUse { at: at.wrapping_add(1), sges: sges.iter().copied().collect() };
        Some(slot)
    }

    /// Frees the slot of the receive at `at`, if it holds that receive: the slot and the
    /// receive's scatter list.
    fn free(&mut self, at: u64) -> Option<(usize, SmallVec<[Sge; 2]>)> {
        let slot = self.slot_of(at);
        if self.0[slot].at != at.wrapping_add(1) {
            return None;
        }
        Some((slot, std::mem::take(&mut self.0[slot]).sges))
    }

    /// The slots in use: each receive's position and scatter list.
    fn in_use(self) -> impl Iterator<Item = (usize, u64, SmallVec<[Sge; 2]>)> {
        self.0.into_iter().enumerate().filter(|(_, s)| s.at != 0).map(|(slot, s)| (slot, s.at - 1, s.sges))
    }

    /// Frees the slots of the receives at `from..to` that hold one.
    fn free_range(&mut self, from: u64, to: u64) {
        let n = to.wrapping_sub(from).min(self.0.len() as u64);
        for k in 0..n {
            self.free(to.wrapping_sub(1 + k));
        }
    }
}

/// A queue's slots and the receives posted through them, under the queue's posters' lock
/// (`rings::kept`).
pub(crate) struct Bounce {
    /// The slots, `SLOT_LEN` bytes each, `LOCAL_WRITE` in the queue's PD.
    mr: Mr,
    /// The PD the receives' own regions must be of.
    pd: u32,
    /// This process's endpoint, whose keys the receives' own SGEs are.
    me: &'static Endpoint,
    slots: Slots,
}

/// What a poll copies into a receive's buffers once the posters' lock is left.
pub(crate) struct Scatter {
    bytes: [u8; SLOT_LEN as usize],
    len: usize,
    sges: SmallVec<[Sge; 2]>,
    pd: u32,
    me: &'static Endpoint,
}

impl Bounce {
    /// The slots of a queue of `cap` receives in PD `pd` (a region of the library, made at
    /// the queue's first receive placed this way).
    pub(crate) fn new(pd: &Arc<PdCore>, cap: usize) -> Option<Bounce> {
        let n = cap.clamp(1, MAX_SLOTS);
        let mr = Mr::alloc(pd.clone(), n * SLOT_LEN as usize, Access::LOCAL_WRITE).ok()?;
        Some(Bounce { mr, pd: pd.id, me: pd.endpoint(), slots: Slots::new(n) })
    }

    /// The SGE that replaces `sges` for the receive at position `at`, if its slot is
    /// free; the caller checked the list ([`wants`]).
    pub(crate) fn take(&mut self, at: u64, sges: &[Sge], total: u32) -> Option<Sge> {
        let slot = self.slots.take(at, sges)?;
        Some(Sge { addr: self.mr.addr() as u64 + (slot as u64) * u64::from(SLOT_LEN), length: total, lkey: self.mr.lkey() })
    }

    /// The receive at position `at` was not posted after all (the post refused it): its
    /// slot is free.
    pub(crate) fn untake(&mut self, at: u64) {
        self.slots.free(at);
    }

    /// The completion of the receive at position `at` was polled: its slot is free again,
    /// and the first `placed` bytes of the message (0: nothing to place, an error or a
    /// receive that takes no bytes) are to be copied into its buffers.
    pub(crate) fn polled(&mut self, at: u64, placed: u32) -> Option<Scatter> {
        let (slot, sges) = self.slots.free(at)?;
        if placed == 0 {
            return None;
        }
        let len = placed.min(SLOT_LEN) as usize;
        let mut out = Scatter { bytes: [0; SLOT_LEN as usize], len, sges, pd: self.pd, me: self.me };
        self.mr.read(slot * SLOT_LEN as usize, &mut out.bytes[..len]).ok()?;
        Some(out)
    }

    /// The receives at positions `from..to` were removed without being taken (the queue
    /// was drained): their slots are free. Receives taken before keep theirs until their
    /// completions are polled.
    pub(crate) fn drained(&mut self, from: u64, to: u64) {
        self.slots.free_range(from, to);
    }

    /// The queue's QP is destroyed and no message is being placed into a slot any more
    /// (the destroy waited for the placements in progress): the receives whose slots are
    /// still in use were taken and their completions are not polled yet; their messages
    /// are copied out of the slots, under the ring's tag `tag` and the queue's count of
    /// receives posted `tail`, to wait for those polls ([`unpark`]). Returns the slots'
    /// region, for the caller to free after its lock.
    pub(crate) fn park(self, tag: u32, tail: u64) -> Mr {
        let Bounce { mr, pd, me, slots } = self;
        let mut parked = HashMap::new();
        for (slot, at, sges) in slots.in_use() {
            let len = sges.iter().map(|g| g.length).sum::<u32>().min(SLOT_LEN) as usize;
            let mut bytes = vec![0u8; len].into_boxed_slice();
            if mr.read(slot * SLOT_LEN as usize, &mut bytes).is_ok() {
                parked.insert(at, Parked { bytes, sges });
            }
        }
        if !parked.is_empty() {
            PARKED.park(tag, ParkedQueue { tail, pd, me, at: parked });
        }
        mr
    }
}

/// A message parked by [`Bounce::park`]: the receive's bytes (as many as it takes) and
/// its scatter list.
struct Parked {
    bytes: Box<[u8]>,
    sges: SmallVec<[Sge; 2]>,
}

/// The parked messages of one destroyed queue.
struct ParkedQueue {
    /// The queue's count of receives posted, to widen a completion's 32-bit count.
    tail: u64,
    pd: u32,
    me: &'static Endpoint,
    /// By receive position.
    at: HashMap<u64, Parked>,
}

/// Messages parked at most, over every destroyed queue: completions that are never
/// polled (their CQ destroyed first, or never polled) leave their messages here until
/// newer ones push the oldest queue's out, and the oldest queue's then place nothing.
const MAX_PARKED: usize = 4096;

/// The parked messages by ring tag (tags are never reused in a process: the oldest queue
/// has the lowest), and how many there are (read without the lock by [`unpark`]).
struct Graveyard {
    queues: Mutex<BTreeMap<u32, ParkedQueue>>,
    count: AtomicUsize,
}

static PARKED: Graveyard = Graveyard { queues: Mutex::new(BTreeMap::new()), count: AtomicUsize::new(0) };

impl Graveyard {
    fn park(&self, tag: u32, q: ParkedQueue) {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = self.count.load(Ordering::Relaxed) + q.at.len();
        while n > MAX_PARKED {
            let Some((old, gone)) = queues.pop_first() else { break };
            tracing::debug!(tag = old, messages = gone.at.len(), "parked receives of a destroyed QP dropped, never polled");
            n -= gone.at.len();
        }
        queues.insert(tag, q);
        self.count.store(n, Ordering::Release);
    }

    fn take(&self, tag: u32, count: u32) -> Option<(ParkedQueueRef, Parked)> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let q = queues.get_mut(&tag)?;
        let at = crate::rings::recv_count::widen(q.tail, count).checked_sub(1)?;
        let m = q.at.remove(&at)?;
        let r = ParkedQueueRef { pd: q.pd, me: q.me };
        if q.at.is_empty() {
            queues.remove(&tag);
        }
        self.count.fetch_sub(1, Ordering::Release);
        Some((r, m))
    }
}

/// What placing a parked message needs of its queue.
struct ParkedQueueRef {
    pd: u32,
    me: &'static Endpoint,
}

/// A receive completion carrying `count` of the ring tagged `tag`, whose queue has no
/// slots (any more), was polled: if its message was parked when its QP was destroyed
/// ([`Bounce::park`]), the first `placed` bytes of it (0: an error, nothing to place) are
/// to be copied into the receive's buffers. One load when nothing is parked.
pub(crate) fn unpark(tag: u32, count: u32, placed: u32) -> Option<Scatter> {
    if PARKED.count.load(Ordering::Acquire) == 0 {
        return None;
    }
    let (q, m) = PARKED.take(tag, count)?;
    if placed == 0 {
        return None;
    }
    let len = (placed as usize).min(m.bytes.len());
    let mut out = Scatter { bytes: [0; SLOT_LEN as usize], len, sges: m.sges, pd: q.pd, me: q.me };
    out.bytes[..len].copy_from_slice(&m.bytes[..len]);
    Some(out)
}

/// Whether messages are parked (a poll must then look completions up even when no queue
/// with holds is listed).
pub(crate) fn any_parked() -> bool {
    PARKED.count.load(Ordering::Relaxed) != 0
}

impl Scatter {
    /// Copies the message into the receive's buffers, as the responder places one: each
    /// SGE in turn, through its key, which must still name a region of the receive's PD
    /// granting LOCAL_WRITE over the range (a region deregistered meanwhile receives
    /// nothing: the device never writes outside a registered region).
    pub(crate) fn place(&self) {
        let ok = |_: &Sge, r: &crate::mr::LocalRange| r.pd == self.pd && r.access.contains(Access::LOCAL_WRITE);
        crate::mr::access::scatter_local(self.me, &self.sges, &self.bytes[..self.len], ok);
    }
}

/// The total length of a receive with scatter list `sges` of PD `pd` if it is one to
/// place through a slot: not empty, at most [`SLOT_LEN`], every SGE with bytes through a
/// key the responder would accept (a region of this process in `pd` granting
/// LOCAL_WRITE over the range: one it would refuse is posted as it is, to fail as it
/// would), and at least one of them private memory.
pub(crate) fn wants(me: &Endpoint, pd: u32, sges: &[Sge]) -> Option<u32> {
    let total: u64 = sges.iter().map(|g| u64::from(g.length)).sum();
    if total == 0 || total > u64::from(SLOT_LEN) {
        return None;
    }
    let mut private = false;
    for g in sges.iter().filter(|g| g.length > 0) {
        let r = crate::mr::local_range(me, g.lkey, g.addr, u64::from(g.length))?;
        if r.pd != pd || !r.access.contains(Access::LOCAL_WRITE) {
            return None;
        }
        private |= r.private;
    }
    private.then_some(total as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(n: u64) -> [Sge; 1] {
        [Sge { addr: n, length: 8, lkey: 1 }]
    }

    #[test]
    fn a_slot_serves_one_receive_until_that_receive_is_polled() {
        let mut s = Slots::new(4);
        assert_eq!(s.take(0, &sge(10)), Some(0));
        assert_eq!(s.take(1, &sge(11)), Some(1));
        // Position 4 is slot 0 again: still in use by position 0.
        assert_eq!(s.take(4, &sge(14)), None);
        // A completion naming another position of the slot frees nothing.
        assert!(s.free(4).is_none());
        let (slot, sges) = s.free(0).expect("position 0 holds slot 0");
        assert_eq!((slot, sges[0].addr), (0, 10));
        assert!(s.free(0).is_none(), "freed once");
        assert_eq!(s.take(4, &sge(14)), Some(0));
        assert_eq!(s.free(4).map(|(_, g)| g[0].addr), Some(14));
    }

    /// A completion is another process's words: a count naming no receive taken through a
    /// slot (never taken, or the same slot a lap later) places nothing, and a byte count
    /// past the receive's length and the slot's writes no byte outside the receive's own
    /// scatter list (the device never writes outside a receive's buffers).
    #[test]
    fn a_forged_completion_places_nothing_outside_the_receives_buffers() {
        let pd = crate::devices().unwrap()[0].open().unwrap().alloc_pd().unwrap();
        let mem = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
        let mut b = Bounce::new(pd.inner().unwrap(), 4).unwrap();
        let at = |off: u64, length: u32| Sge { addr: mem.addr() as u64 + off, length, lkey: mem.lkey() };
        let slot = b.take(0, &[at(100, 16), at(300, 8)], 24).expect("slot 0 is free");
        // The peer fills the whole slot, past the receive's 24 bytes.
        let off = (slot.addr - b.mr.addr() as u64) as usize;
        b.mr.write(off, &[0xab; SLOT_LEN as usize]).unwrap();

        assert!(b.polled(1, 24).is_none(), "position 1 was never taken");
        assert!(b.polled(4, 24).is_none(), "position 4 is slot 0 a lap later, not taken yet");
        b.polled(0, u32::MAX).expect("the receive at 0 was taken").place();
        assert!(b.polled(0, 24).is_none(), "placed once");

        let mut got = vec![0u8; 4096];
        mem.read(0, &mut got).unwrap();
        for (i, &v) in got.iter().enumerate() {
            let inside = (100..116).contains(&i) || (300..308).contains(&i);
            assert_eq!(v, if inside { 0xab } else { 0 }, "byte {i}");
        }
    }

    fn parked(at: &[u64], tail: u64) -> ParkedQueue {
        let me = &crate::device::device().endpoint;
        let at = at.iter().map(|&a| (a, Parked { bytes: vec![a as u8; 16].into_boxed_slice(), sges: sge(a).iter().copied().collect() })).collect();
        ParkedQueue { tail, pd: 1, me, at }
    }

    /// A parked message is found by its queue's tag and its completion's 32-bit count
    /// (position + 1, widened by the queue's tail), once; past [`MAX_PARKED`] the oldest
    /// queue's messages go. One test: the graveyard is process-wide.
    #[test]
    fn parked_messages_are_taken_once_by_tag_and_count_and_the_oldest_queue_goes_first() {
        let g = Graveyard { queues: Mutex::new(BTreeMap::new()), count: AtomicUsize::new(0) };
        let top = (3u64 << 32) + 5;
        g.park(7, parked(&[top - 2, top - 1], top));
        assert!(g.take(8, 1).is_none(), "another queue's tag");
        assert!(g.take(7, (top - 3) as u32).is_none(), "a position that was not parked");
        let (_, m) = g.take(7, top as u32).expect("count = position + 1 of the last receive");
        assert_eq!((m.bytes[0], m.sges[0].addr), ((top - 1) as u8, top - 1));
        assert!(g.take(7, top as u32).is_none(), "taken once");
        assert_eq!(g.count.load(Ordering::Relaxed), 1);
        assert!(g.take(7, (top - 1) as u32).is_some());
        assert!(g.queues.lock().unwrap().is_empty(), "an emptied queue leaves");

        let many: Vec<u64> = (0..MAX_PARKED as u64 - 2).collect();
        g.park(10, parked(&[0, 1], 2));
        g.park(11, parked(&many, many.len() as u64));
        assert_eq!(g.count.load(Ordering::Relaxed), MAX_PARKED, "full, nothing pushed out yet");
        g.park(12, parked(&[0], 1));
        assert_eq!(g.count.load(Ordering::Relaxed), MAX_PARKED - 1);
        assert!(g.take(10, 1).is_none(), "the oldest queue's messages were pushed out");
        assert!(g.take(11, 1).is_some() && g.take(12, 1).is_some());
        assert_eq!(g.count.load(Ordering::Relaxed), MAX_PARKED - 3);
    }

    #[test]
    fn a_drain_frees_the_untaken_range_only() {
        let mut s = Slots::new(8);
        for at in 0..6 {
            assert!(s.take(at, &sge(at)).is_some());
        }
        // Positions 0..3 were taken (their completions still to be polled), 3..6 drained.
        s.free_range(3, 6);
        for at in 0..3 {
            assert!(s.0[at as usize].at == at + 1, "position {at} keeps its slot");
        }
        for at in 3..6 {
            assert!(s.free(at).is_none(), "position {at} was freed by the drain");
        }
        // Positions past a wrap of the counter.
        let top = u64::MAX - 1;
        assert!(s.take(top, &sge(1)).is_some());
        s.free_range(top, top.wrapping_add(1));
        assert!(s.free(top).is_none());
    }
}
