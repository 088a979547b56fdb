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
//! key the table here, since a ring slot is posted again as soon as its receive is taken,
//! possibly before that receive's completion is polled.

use std::collections::HashMap;
use std::sync::Arc;

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

/// A receive posted through a slot: the slot and the receive's own scatter list.
struct Held {
    slot: u32,
    sges: SmallVec<[Sge; 2]>,
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
    free: Vec<u32>,
    by_pos: HashMap<u64, Held>,
}

/// What a poll copies into a receive's buffers once the posters' lock is left.
pub(crate) struct Scatter {
    bytes: Box<[u8]>,
    sges: SmallVec<[Sge; 2]>,
    pd: u32,
    me: &'static Endpoint,
}

impl Bounce {
    /// The slots of a queue of `cap` receives in PD `pd` (a region of the library, made at
    /// the queue's first receive placed this way).
    pub(crate) fn new(pd: &Arc<PdCore>, cap: usize) -> Option<Bounce> {
        let slots = cap.clamp(1, MAX_SLOTS);
        let mr = Mr::alloc(pd.clone(), slots * SLOT_LEN as usize, Access::LOCAL_WRITE).ok()?;
        Some(Bounce { mr, pd: pd.id, me: pd.endpoint(), free: (0..slots as u32).rev().collect(), by_pos: HashMap::new() })
    }

    /// The SGE that replaces `sges` for the receive at position `at`, if a slot is free;
    /// the caller checked the list ([`wants`]).
    pub(crate) fn take(&mut self, at: u64, sges: &[Sge], total: u32) -> Option<Sge> {
        let slot = self.free.pop()?;
        if let Some(old) = self.by_pos.insert(at, Held { slot, sges: sges.iter().copied().collect() }) {
            self.free.push(old.slot);
        }
        Some(Sge { addr: self.mr.addr() as u64 + u64::from(slot) * u64::from(SLOT_LEN), length: total, lkey: self.mr.lkey() })
    }

    /// The receive at position `at` was not posted after all (the post refused it).
    pub(crate) fn untake(&mut self, at: u64) {
        if let Some(h) = self.by_pos.remove(&at) {
            self.free.push(h.slot);
        }
    }

    /// The completion of the receive at position `at` was polled: its slot is free again,
    /// and the first `placed` bytes of the message (0: nothing to place, an error or a
    /// receive that takes no bytes) are to be copied into its buffers.
    pub(crate) fn polled(&mut self, at: u64, placed: u32) -> Option<Scatter> {
        let h = self.by_pos.remove(&at)?;
        self.free.push(h.slot);
        if placed == 0 {
            return None;
        }
        let mut bytes = vec![0u8; placed.min(SLOT_LEN) as usize].into_boxed_slice();
        self.mr.read(h.slot as usize * SLOT_LEN as usize, &mut bytes).ok()?;
        Some(Scatter { bytes, sges: h.sges, pd: self.pd, me: self.me })
    }

    /// The receives at positions `from..to` were removed without being taken (the queue
    /// was drained): their slots are free. Receives taken before keep theirs until their
    /// completions are polled.
    pub(crate) fn drained(&mut self, from: u64, to: u64) {
        let gone: Vec<u64> = self.by_pos.keys().copied().filter(|p| (from..to).contains(p)).collect();
        for p in gone {
            self.untake(p);
        }
    }
}

impl Scatter {
    /// Copies the message into the receive's buffers, as the responder places one: each
    /// SGE in turn, through its key, which must still name a region of the receive's PD
    /// granting LOCAL_WRITE over the range (a region deregistered meanwhile receives
    /// nothing: the device never writes outside a registered region).
    pub(crate) fn place(&self) {
        let mut off = 0usize;
        for g in &self.sges {
            if off >= self.bytes.len() {
                break;
            }
            let len = (g.length as usize).min(self.bytes.len() - off);
            if len > 0 {
                let fits = crate::mr::local_range(self.me, g.lkey, g.addr, len as u64)
                    .is_some_and(|r| r.pd == self.pd && r.access.contains(Access::LOCAL_WRITE));
                if fits {
                    crate::mr::access::write_local(self.me, g.lkey, g.addr, &self.bytes[off..off + len]);
                }
            }
            off += len;
        }
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
