//! What a receive queue's pinned receives keep registered, and when they let go
//! (docs/memory.md, "Buffer lifetime").
//!
//! Rule: ibv_post_recv(3), NOTES: the buffers of a receive may be reused once its
//! completion was retrieved. The Rust API's `Qp::post_recv` and `Srq::post_recv` hold each
//! region a receive's scatter list names registered until then, so that a program that
//! drops its last `Mr` handle with a receive outstanding loses no message. The hold ends
//! when the owner polls the receive's completion: that completion carries the ring's tag
//! and the count of receives taken from it with this one (`rings::recv_count`), which
//! name the slot; the poll finds the queue by its tag here ([`polled`]) and lets the
//! slot's regions go. A region whose last handle is gone then deregisters, and a peer's
//! access with its keys fails. A receive completion that carries no count (one flushed,
//! one lost to an overrun CQ) leaves its slot's hold to the next post into the slot or to
//! the queue's drain. (A tag-matching SRQ's match carries its tag in the count's word,
//! but it lands in a tagged buffer of the SRQ's list, not in a receive of the queue.)
//!
//! Every take writes the completion after the message is placed, whoever takes (this
//! process, a peer process on the host, the network responder over several packets), so
//! a hold let go at the poll is never one a placement still needs. A peer that lies in a
//! completion's count makes a hold end early: that receive then fails its key check when
//! used, never a write outside a region (`tests/hostile_segments.rs`,
//! `a_forged_receive_count_ends_a_hold_early_and_the_receive_then_fails_its_key_check`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, RwLock, Weak};

use crate::mr::MrInner;
use crate::rings::bounce::{self, Bounce, Scatter};
use crate::rings::recv_count::{self, TakenCount};
use crate::spin::SpinMutex;

/// A queue's holds, slot by slot, under the queue's posters' lock.
pub(crate) struct Kept {
    /// SGEs per slot.
    per: usize,
    /// The regions held, `per` per slot.
    regions: Vec<Option<Arc<MrInner>>>,
    /// Per slot, the count of receives posted with the one whose regions it holds (its
    /// position + 1; 0: it holds none).
    posted: Vec<u64>,
    /// Receives ever posted to the queue (its ring's `tail`, as this queue's posts left it).
    tail: u64,
    /// Whether the queue is in [`QUEUES`] (under its ring's tag).
    listed: bool,
    /// The slots of receives placed by their owner (`rings::bounce`), once one was.
    bounce: Option<Box<Bounce>>,
}

/// A queue's holds behind its posters' lock, shared with [`QUEUES`] (see `RecvQueue`:
/// the lock is released with a Release store).
pub(crate) type Holds = SpinMutex<Kept, false>;

impl Kept {
    pub(crate) fn new(slots: usize, per: usize) -> Kept {
        Kept { per, regions: vec![None; slots * per], posted: vec![0; slots], tail: 0, listed: false, bounce: None }
    }

    /// Whether the queue is in [`QUEUES`] (it posted pinned receives).
    pub(crate) fn listed(&self) -> bool {
        self.listed
    }

    fn slots(&self) -> usize {
        self.posted.len()
    }

    /// The receive at position `at` (ring slot `at % slots`) holds `regions` (one per SGE,
    /// `None` for an SGE that names no region or one not held). What the slot held before
    /// is handed back, to be dropped after the lock.
    pub(crate) fn hold(&mut self, at: u64, mut regions: impl Iterator<Item = Option<Arc<MrInner>>>, gone: &mut Vec<Arc<MrInner>>) {
        let slot = (at % self.slots() as u64) as usize;
        let base = slot * self.per;
        for r in &mut self.regions[base..base + self.per] {
            let new = regions.next().flatten();
            if let Some(old) = std::mem::replace(r, new) {
                gone.push(old);
            }
        }
        self.posted[slot] = at.wrapping_add(1);
        self.tail = at.wrapping_add(1);
    }

    /// The queue's ring has had `tail` receives posted (a queue listed only now, whose
    /// earlier posts held nothing, learns where its positions are).
    pub(crate) fn posted_up_to(&mut self, tail: u64) {
        self.tail = tail;
    }

    /// Whether the queue has slots for receives placed by their owner (`rings::bounce`).
    pub(crate) fn has_bounce(&self) -> bool {
        self.bounce.is_some()
    }

    /// Gives the queue the slots `made`, unless it has some already.
    pub(crate) fn set_bounce(&mut self, made: Option<Bounce>) {
        if self.bounce.is_none() {
            self.bounce = made.map(Box::new);
        }
    }

    /// The queue's slots for receives placed by their owner, if it has them.
    pub(crate) fn bounce_mut(&mut self) -> Option<&mut Bounce> {
        self.bounce.as_deref_mut()
    }

    /// Lets go of the slot of the receive whose take left `count` receives taken (low 32
    /// bits), if it still holds that receive's regions; a receive placed by its owner
    /// gives its first `placed` bytes to copy into its buffers.
    fn release(&mut self, count: u32, placed: u32, gone: &mut Vec<Arc<MrInner>>) -> Option<Scatter> {
        let full = recv_count::widen(self.tail, count);
        if full == 0 {
            return None;
        }
        let scatter = self.bounce.as_mut().and_then(|b| b.polled(full - 1, placed));
        self.release_regions(full, gone);
        scatter
    }

    fn release_regions(&mut self, full: u64, gone: &mut Vec<Arc<MrInner>>) {
        let slot = ((full - 1) % self.slots() as u64) as usize;
        if self.posted[slot] != full {
            return;
        }
        self.posted[slot] = 0;
        gone.extend(self.regions[slot * self.per..(slot + 1) * self.per].iter_mut().filter_map(Option::take));
    }

    /// Lets go of everything (the queue was drained of its `removed` receives not taken,
    /// the newest ones). Receives placed by their owner that were taken keep their
    /// slots until their completions are polled.
    pub(crate) fn clear(&mut self, removed: usize, gone: &mut Vec<Arc<MrInner>>) {
        gone.extend(self.regions.iter_mut().filter_map(Option::take));
        self.posted.iter_mut().for_each(|p| *p = 0);
        if let Some(b) = self.bounce.as_mut() {
            b.drained(self.tail.wrapping_sub(removed as u64), self.tail);
        }
    }

    /// The slots of receives placed by their owner, taken away (the queue is being
    /// destroyed: its region is freed before its PD can be), and the count of receives
    /// posted to the queue.
    pub(crate) fn close_bounce(&mut self) -> Option<(Box<Bounce>, u64)> {
        self.bounce.take().map(|b| (b, self.tail))
    }

    /// Takes the holds of the receive at position `from` of `old` as position `to` of this
    /// queue (an SRQ resize moves its receives).
    pub(crate) fn move_from(&mut self, old: &mut Kept, from: u64, to: u64) {
        let (of, os) = (old.per, (from % old.slots() as u64) as usize);
        let (nf, ns) = (self.per, (to % self.slots() as u64) as usize);
        let held = old.posted[os] == from.wrapping_add(1);
        for j in 0..self.per.min(old.per) {
            let r = old.regions[os * of + j].take();
            self.regions[ns * nf + j] = r.filter(|_| held);
        }
        old.posted[os] = 0;
        self.posted[ns] = if held { to.wrapping_add(1) } else { 0 };
        self.tail = to.wrapping_add(1);
    }
}

/// The queues of this process with holds, by their ring's tag (a queue enters at its
/// first pinned post and leaves when it is destroyed).
static QUEUES: LazyLock<RwLock<HashMap<u32, Weak<Holds>>>> = LazyLock::new(Default::default);

/// How many queues [`QUEUES`] lists: a poll in a process that pins nothing (every C
/// program) pays this one load per receive completion.
static LISTED: AtomicUsize = AtomicUsize::new(0);

/// Lists the queue whose holds are `holds` and whose ring is tagged `tag` (its first
/// pinned post; the caller holds its lock, `kept`).
pub(crate) fn list(holds: &Arc<Holds>, kept: &mut Kept, tag: u32) {
    if kept.listed {
        return;
    }
    kept.listed = true;
    QUEUES.write().unwrap_or_else(|p| p.into_inner()).insert(tag, Arc::downgrade(holds));
    // Before the post stores the ring's tail (Release): a poll that sees one of its
    // receives' completions sees this.
    LISTED.fetch_add(1, Ordering::Release);
}

/// Removes the queue tagged `tag` from [`QUEUES`] (it is being destroyed).
pub(crate) fn unlist(tag: u32) {
    if QUEUES.write().unwrap_or_else(|p| p.into_inner()).remove(&tag).is_some() {
        LISTED.fetch_sub(1, Ordering::Release);
    }
}

/// A receive completion carrying `taken` was polled: its queue, if it is one of this
/// process's with holds, lets go of that receive's regions; a receive placed by its
/// owner (`rings::bounce`) gets the first `placed` bytes of its message (those of a
/// successful IBV_WC_RECV; 0 for anything else) in its buffers before the poll returns.
#[inline(always)]
pub(crate) fn polled(taken: Option<TakenCount>, placed: u32) {
    if let Some(t) = taken {
        if LISTED.load(Ordering::Relaxed) != 0 || bounce::any_parked() {
            release(t, placed);
        }
    }
}

#[cold]
#[inline(never)]
fn release(t: TakenCount, placed: u32) {
    let holds = QUEUES.read().unwrap_or_else(|p| p.into_inner()).get(&t.ring()).and_then(Weak::upgrade);
    let mut gone = Vec::new();
    let scatter = match holds {
        Some(holds) => {
            let mut kept = holds.lock();
            let scatter = kept.release(t.count(), placed, &mut gone);
            let slots_closed = !kept.has_bounce();
            drop(kept);
            // A QP destroyed after the receive was taken parked its message
            // (`Bounce::park`, under the lock just left).
            if slots_closed { scatter.or_else(|| bounce::unpark(t.ring(), t.count(), placed)) } else { scatter }
        }
        None => bounce::unpark(t.ring(), t.count(), placed),
    };
    // Dropped here, after the lock: the last hold of a region whose handles are gone
    // deregisters it, which waits for accesses in progress.
    drop(gone);
    if let Some(s) = scatter {
        s.place();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Positions and counts only: regions are `None` (what `MrInner` holds needs a device).
    #[test]
    fn a_release_names_the_slot_of_its_receive_and_never_a_later_one() {
        let mut k = Kept::new(4, 2);
        let mut gone = Vec::new();
        for at in 0..4 {
            k.hold(at, std::iter::empty(), &mut gone);
        }
        assert_eq!(k.posted, [1, 2, 3, 4]);
        k.release(2, 0, &mut gone);
        assert_eq!(k.posted, [1, 0, 3, 4], "count 2 is position 1");
        // Position 4 reuses slot 0; the late completion of position 0 lets nothing go.
        k.hold(4, std::iter::empty(), &mut gone);
        k.release(1, 0, &mut gone);
        assert_eq!(k.posted, [5, 0, 3, 4]);
        k.release(5, 0, &mut gone);
        assert_eq!(k.posted, [0, 0, 3, 4]);
        k.release(0, 0, &mut gone);
        assert_eq!(k.posted, [0, 0, 3, 4], "count 0 names no receive");
    }

    #[test]
    fn counts_widen_across_the_32_bit_boundary() {
        let mut k = Kept::new(3, 1);
        let mut gone = Vec::new();
        let at = (1u64 << 32) + 1;
        k.hold(at, std::iter::empty(), &mut gone);
        let count = (at + 1) as u32;
        k.release(count, 0, &mut gone);
        assert_eq!(k.posted[(at % 3) as usize], 0);
    }

    #[test]
    fn a_move_keeps_a_held_receive_at_its_new_position() {
        let (mut old, mut new) = (Kept::new(4, 1), Kept::new(8, 2));
        let mut gone = Vec::new();
        for at in 0..3 {
            old.hold(at, std::iter::empty(), &mut gone);
        }
        old.release(2, 0, &mut gone);
        for (k, from) in (1..3).enumerate() {
            new.move_from(&mut old, from, k as u64);
        }
        assert_eq!(&new.posted[..2], [0, 2], "position 1 was let go; position 2 is now 1");
        assert_eq!(old.posted, [1, 0, 0, 0]);
        assert_eq!(new.tail, 2);
    }
}
