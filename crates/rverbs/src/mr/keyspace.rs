//! Resolving a key: which region or window it names (this process's key table, or a
//! peer's), whether the access is allowed (PD, bounds, rights), where the bytes are
//! ([`Place`]), and the pin that keeps the region registered while they move
//! ([`Pinned`]). Moving the bytes is `mr::access`'s.
//!
//! Rule: the network can never write outside a registered region. Bytes reach or leave
//! registered memory only through a [`Pinned`] range, and a `Pinned` is only made here,
//! after every check passed (a proof token: an unchecked access does not compile).
//!
//! Where the bytes are decides how they move: by plain loads and stores when they are in
//! this process — its own memory, or a peer's region that lives in a shared segment this
//! process mapped — or by cross-memory attach (`shm::cma`) or the peer's own copy
//! (`mr::proxy`, [`ProxyRef`]) when they are in a peer's private memory.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rverbs_proto::vendor_err;
use rverbs_proto::violation::Violation;
use rverbs_proto::verbs::Access;

use super::endpoint::Endpoint;
use crate::shm::registry::Peer;
use crate::shm::tables::{KeyDesc, KeyRecord, Tables, ACCESS_COUNT_LOCAL, KEY_KIND_MR, KEY_KIND_MW2, KEY_STATE_VALID};
use crate::shm::Segment;

/// Where a piece of a peer's private memory is, for the peer to check and copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProxyRef<'a> {
    /// The peer whose memory it is (it serves the copy).
    pub(crate) peer: &'a Peer,
    pub(crate) key: u32,
    pub(crate) pd: u32,
    pub(crate) used: KeyUse,
    pub(crate) need: Access,
    pub(crate) va: u64,
}

/// Where the bytes of a pinned range are.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place<'a> {
    /// At this address of this process (its own memory or a mapped shared segment).
    Local(usize),
    /// At this address of process `pid` (reached with cross-memory attach); `counted`:
    /// this endpoint's count of such accesses, which a [`Pinned`] leaves when dropped
    /// ([`KeySpace::hold`]).
    Cma { pid: i32, addr: usize, counted: Option<&'a AtomicU64> },
    /// In a peer's private memory that cross-memory attach cannot reach: the peer
    /// copies (`mr::proxy`).
    Proxy(ProxyRef<'a>),
}

/// An access in progress: keeps the region registered until dropped.
pub(crate) struct Pinned<'a> {
    /// The count this access is in (`None`: a local key of this process's own memory,
    /// see [`KeySpace::hold`]).
    busy: Option<&'a AtomicU32>,
    /// The count in the record of the window the access goes through, if it goes through
    /// one (invalidating the window waits for it: `crate::mw`).
    window: Option<&'a AtomicU32>,
    pub(crate) place: Place<'a>,
    /// Length of the accessed range.
    pub(crate) len: usize,
    /// Atomics on these bytes take the host-wide atomic lock of this endpoint: peers
    /// reach them with cross-memory attach, which cannot execute a CPU atomic
    /// (IBV_ATOMIC_HCA: the device's atomics are atomic among themselves).
    host_atomics: Option<&'a Endpoint>,
}

impl<'a> Pinned<'a> {
    /// The endpoint whose host-wide atomic lock atomics on these bytes take, if any.
    #[inline]
    pub(crate) fn host_atomics(&self) -> Option<&'a Endpoint> {
        self.host_atomics
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        release(self.busy, self.window);
        // An access through cross-memory attach leaves this endpoint's count after the
        // region's ([`KeySpace::hold`]).
        if let Place::Cma { counted, .. } = self.place {
            uncount_cma(counted);
        }
    }
}

/// Uncounts an access through cross-memory attach from this endpoint's header.
#[inline]
fn uncount_cma(c: Option<&AtomicU64>) {
    if let Some(c) = c {
        c.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts an access in `busy` and `window` (the counts a [`Pinned`] is in).
#[inline(always)]
fn count(busy: Option<&AtomicU32>, window: Option<&AtomicU32>) {
    if let Some(b) = busy {
        b.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(w) = window {
        w.fetch_add(1, Ordering::SeqCst);
    }
}

/// Ends an access counted by [`count`].
#[inline(always)]
fn release(busy: Option<&AtomicU32>, window: Option<&AtomicU32>) {
    if let Some(w) = window {
        w.fetch_sub(1, Ordering::SeqCst);
    }
    if let Some(b) = busy {
        b.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No live region or window has this key.
    Key,
    /// The region or window belongs to another PD (or a type 2 window to another QP).
    Pd,
    /// The range leaves the region or window.
    Bounds,
    /// The region or window lacks the access right.
    Access,
}

impl Fault {
    /// The responder-side violation for a remote (rkey) access.
    pub(crate) fn remote(self) -> Violation {
        match self {
            Fault::Key => Violation::RkeyUnknown,
            Fault::Pd => Violation::RkeyWrongPd,
            Fault::Bounds => Violation::RkeyBounds,
            Fault::Access => Violation::RkeyAccess,
        }
    }

    /// The `vendor_err` of a local (lkey) access.
    pub(crate) fn local_vendor_err(self) -> u32 {
        match self {
            Fault::Key => vendor_err::LOCAL_LKEY,
            Fault::Pd => vendor_err::LOCAL_PD,
            Fault::Bounds => vendor_err::LOCAL_BOUNDS,
            Fault::Access => vendor_err::LOCAL_ACCESS,
        }
    }
}

/// How an access was asked for (what a peer serving it must check again): through
/// `key`, for a QP of PD `pd`, used as `used`, with rights `need`, from address `va`.
#[derive(Clone, Copy)]
pub(crate) struct Via {
    pub(crate) key: u32,
    pub(crate) pd: u32,
    pub(crate) used: KeyUse,
    pub(crate) need: Access,
    pub(crate) va: u64,
}

/// How a key is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyUse {
    /// A local key in an SGE: memory regions only (ibv_post_send(3)).
    Local,
    /// A remote key, for responder QP `qpn`: regions and windows.
    Remote { qpn: u32 },
}

/// The shared segments of a peer a requester reached memory in, kept mapped for the
/// cache's life (a requester keeps one per connection): pinned ranges in them stay
/// valid without taking a reference per access, and the lookup by name is skipped.
#[derive(Default)]
pub(crate) struct SegCache {
    /// Append-only: an entry is never dropped before the cache.
    segs: std::cell::RefCell<Vec<(u64, Arc<Segment>)>>,
}

impl SegCache {
    /// The address and length of peer segment `id`, mapped until the cache drops.
    fn get(&self, peer: &Peer, id: u64) -> Option<(usize, usize)> {
        if let Some((_, s)) = self.segs.borrow().iter().rev().find(|(i, _)| *i == id) {
            return Some((s.addr(), s.len()));
        }
        let seg = peer.segment(&super::segment_name(id)).ok()?;
        let at = (seg.addr(), seg.len());
        self.segs.borrow_mut().push((id, seg));
        Some(at)
    }
}

/// The memory keys of one endpoint and the way to its memory, as this process's
/// endpoint `me` reaches them.
#[derive(Clone, Copy)]
pub(crate) struct KeySpace<'a> {
    tables: &'a Tables,
    /// This process's endpoint (its atomic lock, whether peers take part).
    me: &'a Endpoint,
    /// `None`: this process's own keys and memory.
    peer: Option<(&'a Peer, &'a SegCache)>,
    /// The requester's memo of the last own key it checked here ([`KeyMemo`]).
    memo: Option<&'a KeyMemo>,
}

/// A requester's memo of the last key of this process it checked in one key space: what
/// the checks of its record derived when it was read and vouched for
/// ([`KeyTable::vouches`](super::keys::KeyTable::vouches)) — the record's and its
/// region's addresses, PD, kind, rights, bounds and the place's base — with the count of
/// this process's writes of that record at the time
/// ([`KeyTable::writes`](super::keys::KeyTable::writes)). While the count has not moved,
/// the record holds what the memo was derived from, as far as this process wrote it, so
/// the next access through the same key checks the request against the memo instead of
/// reading the shared record again (docs/shared-state.md, "Remembered keys").
///
/// Only process memory decides that a memo holds: the count and the memo itself, never
/// the shared record, which another process of the user can rewrite (a rewrite after
/// the memo was taken is not seen, and not needed: the memo is what this process wrote).
/// What changes without a write of the record — the state words (a region closed or
/// being deregistered, a window invalidated, by this process or a peer) and the key —
/// [`KeySpace::hold`] and [`KeySpace::pin_held`] read from the record on every access,
/// memo or not; the PD, rights, use and bounds of the request are checked against the
/// memo on every access.
#[derive(Default)]
pub(crate) struct KeyMemo {
    /// Which key table (its address; 0: nothing remembered): a memo of one key space is
    /// never taken in another.
    tables: std::cell::Cell<usize>,
    /// The count of this process's writes of the record when it was read.
    writes: std::cell::Cell<u64>,
    /// The key remembered.
    key: std::cell::Cell<u32>,
    /// What the checks derived from the record (`None`: nothing remembered).
    held: std::cell::Cell<Option<Held>>,
}

/// The memos a responder keeps for one connection ([`KeyMemo`]): its two checks of keys
/// of this process go through different keys, so each remembers its own.
#[derive(Default)]
pub(crate) struct ResponderMemos {
    /// The last remote key checked: the target of a WRITE, READ, atomic or FLUSH.
    pub(crate) remote: KeyMemo,
    /// The last local key of a receive WQE checked, for a SEND's bytes.
    pub(crate) recv: KeyMemo,
}

/// What the checks of a key record of this process derive that only a write of the
/// record by this process changes ([`KeyMemo`]).
#[derive(Clone, Copy)]
struct Held {
    /// The key's record and the record of the region it names (itself for a region):
    /// in this process's tables, mapped for the process's life.
    rec: &'static KeyRecord,
    mr: &'static KeyRecord,
    pd: u32,
    /// The rights granted ([`Access`] bits).
    access: u32,
    /// A memory region (a local key may name only one).
    is_mr: bool,
    /// The QP a type 2 window is bound to (`None`: any QP of the PD).
    mw2_qpn: Option<u32>,
    /// This process's local accesses are counted ([`ACCESS_COUNT_LOCAL`]).
    count_local: bool,
    /// Atomics on the bytes take the host-wide lock (the record's bytes are in this
    /// process's private memory, `loc == 0`, and peers take part).
    host_atomics: bool,
    /// The range `[iova, iova+len)` and where `iova` is in this process.
    iova: u64,
    len: u64,
    va: u64,
}

impl Held {
    /// [`check_desc`] of the remembered record: the same rules in the same order (the
    /// key and its state are compared by [`KeyMemo::held`] and re-read by the hold).
    #[inline(always)]
    fn check(&self, pd: u32, used: KeyUse, need: Access) -> Result<(), Fault> {
        if used == KeyUse::Local && !self.is_mr {
            return Err(Fault::Key);
        }
        if self.pd != pd {
            return Err(Fault::Pd);
        }
        if let (KeyUse::Remote { qpn }, Some(bound)) = (used, self.mw2_qpn) {
            if bound != qpn {
                return Err(Fault::Pd);
            }
        }
        if !Access::from_bits_truncate(self.access).contains(need) {
            return Err(Fault::Access);
        }
        Ok(())
    }
}

impl KeyMemo {
    /// What the memo holds of `key` in key table `tables`, if it is of that key and still
    /// holds: this process's count of writes of the record is `writes` (read before any
    /// read of the record, so a write between them leaves the memo with the older count).
    #[inline(always)]
    fn held(&self, tables: &Tables, writes: u64, key: u32) -> Option<Held> {
        if self.tables.get() == std::ptr::from_ref(tables) as usize && self.writes.get() == writes && self.key.get() == key {
            self.held.get()
        } else {
            None
        }
    }

    /// Remembers what `d`, read from this process's key table `tables` and vouched for
    /// when this process's count of writes of the record was `writes`, derives
    /// (`u64::MAX`: a record past the table, never remembered; nor a record whose region
    /// is past it).
    #[inline]
    fn remember(&self, tables: &'static Tables, shared: bool, writes: u64, d: &KeyDesc) {
        if writes == u64::MAX {
            return;
        }
        let Some(rec) = tables.key(d.key >> 8) else { return };
        let mr = if d.kind == KEY_KIND_MR { Some(rec) } else { tables.key(d.mr_index) };
        let Some(mr) = mr else { return };
        self.tables.set(std::ptr::from_ref(tables) as usize);
        self.writes.set(writes);
        self.key.set(d.key);
        self.held.set(Some(Held {
            rec,
            mr,
            pd: d.pd,
            access: d.access,
            is_mr: d.kind == KEY_KIND_MR,
            mw2_qpn: (d.kind == KEY_KIND_MW2).then_some(d.qpn),
            count_local: d.access & ACCESS_COUNT_LOCAL != 0,
            host_atomics: d.loc == 0 && shared,
            iova: d.iova,
            len: d.len,
            va: d.va,
        }));
    }
}

impl<'a> KeySpace<'a> {
    /// This process's keys.
    #[inline]
    pub(crate) fn local(me: &'a Endpoint) -> Self {
        KeySpace { tables: me.tables, me, peer: None, memo: None }
    }

    /// A peer's keys, reached from this process's endpoint `me`.
    #[inline]
    pub(crate) fn of_peer(me: &'a Endpoint, peer: &'a Peer, cache: &'a SegCache) -> Self {
        KeySpace { tables: peer.tables(), me, peer: Some((peer, cache)), memo: None }
    }

    /// This key space, checking this process's own keys through `memo` ([`KeyMemo`]);
    /// a peer's keys are checked as before.
    #[inline]
    pub(crate) fn remembering(self, memo: &'a KeyMemo) -> Self {
        KeySpace { memo: Some(memo), ..self }
    }

    /// Checks an access of `[va, va+len)` with rights `need` through `key` for a QP of
    /// PD `pd`, and pins it.
    #[inline]
    pub(crate) fn pin(&self, key: u32, pd: u32, used: KeyUse, va: u64, len: u64, need: Access) -> Result<Pinned<'a>, Fault> {
        let d = self.check(key, pd, used, need)?;
        let off = offset_in(&d, va, len)?;
        let via = Via { key, pd, used, need, va };
        self.hold(key, &d, off, len, via, |p| p)
    }

    /// As [`KeySpace::pin`], appending the pinned range to `out`: the pin is built where it
    /// stays (the data path pins into lists it keeps in place).
    ///
    /// A key this key space remembers ([`KeyMemo`]) is checked against the memo while
    /// this process has not written its record since: the rights, the bounds, the hold
    /// ([`KeySpace::pin_held`]); else the record is read, vouched for and remembered.
    #[inline]
    pub(crate) fn pin_into(&self, via: Via, len: u64, out: &mut PinList<'a>) -> Result<(), Fault> {
        self.pin_with(via, len, |p| out.push(p))
    }

    /// As [`KeySpace::pin_into`] for one range, the pin returned instead of appended to a
    /// list (a WRITE's target, moved with [`copy_to`](super::access::copy_to)).
    #[inline]
    pub(crate) fn pin_one(&self, via: Via, len: u64) -> Result<Pinned<'a>, Fault> {
        self.pin_with(via, len, |p| p)
    }

    /// [`KeySpace::pin_into`] and [`KeySpace::pin_one`]: the pin goes to `sink`.
    #[inline(always)]
    fn pin_with<R>(&self, via: Via, len: u64, sink: impl FnOnce(Pinned<'a>) -> R) -> Result<R, Fault> {
        if let (None, Some(memo)) = (self.peer, self.memo) {
            let writes = self.me.keys.writes(via.key >> 8);
            if let Some(h) = memo.held(self.me.tables, writes, via.key) {
                if let Some(p) = self.pin_held(&h, via, len, writes)? {
                    return Ok(sink(p));
                }
                // The record was written again between the memo's check and the hold
                // (ibv_rereg_mr(3) moved the region): read it again.
            }
            return self.pin_fresh(memo, via, len, sink);
        }
        let d = self.check(via.key, via.pd, via.used, via.need)?;
        self.pin_desc(&d, via, len, sink)
    }

    /// [`KeySpace::pin_with`] of a key of this process from its record, remembered in
    /// `memo` for the next access.
    #[inline]
    fn pin_fresh<R>(&self, memo: &KeyMemo, via: Via, len: u64, sink: impl FnOnce(Pinned<'a>) -> R) -> Result<R, Fault> {
        // Read before the record: a write between them leaves the memo with the older
        // count, so the next access reads the record again.
        let writes = self.me.keys.writes(via.key >> 8);
        let d = self.check_record(via.key, via.pd, via.used, via.need)?;
        memo.remember(self.me.tables, self.me.shared(), writes, &d);
        self.pin_desc(&d, via, len, sink)
    }

    /// [`KeySpace::pin_with`] once `d` is the record of `via.key`, read and vouched for:
    /// the rights, the bounds, the hold.
    #[inline(always)]
    fn pin_desc<R>(&self, d: &KeyDesc, via: Via, len: u64, sink: impl FnOnce(Pinned<'a>) -> R) -> Result<R, Fault> {
        check_desc(d, via.key, via.pd, via.used, via.need)?;
        let off = offset_in(d, via.va, len)?;
        self.hold(via.key, d, off, len, via, sink)
    }

    /// [`KeySpace::pin_with`] of a key of this process whose record this process had not
    /// written (count `writes`) when `h` was derived from it: the rules of [`check_desc`]
    /// and the bounds against `h`, then [`KeySpace::hold`]'s protocol on the remembered
    /// records — the access counted where it is counted, the record's state and key and
    /// the region's state read again (ibv_dereg_mr(3): no access once it returns) — and
    /// the count: `None` if the record was written since (ibv_rereg_mr(3) closes the
    /// record, waits for the accesses counted, then publishes the new translation valid:
    /// an access counted after the close that finds the state valid again must not use
    /// the old translation; `KeyTable::publish` counts before it writes, so such an
    /// access sees the count moved).
    #[inline(always)]
    fn pin_held(&self, h: &Held, via: Via, len: u64, writes: u64) -> Result<Option<Pinned<'a>>, Fault> {
        h.check(via.pd, via.used, via.need)?;
        let off = via.va.checked_sub(h.iova).ok_or(Fault::Bounds)?;
        if off.checked_add(len).ok_or(Fault::Bounds)? > h.len {
            return Err(Fault::Bounds);
        }
        let busy: Option<&'a AtomicU32> = match via.used {
            KeyUse::Local if !h.count_local => None,
            _ => Some(&h.mr.busy_local),
        };
        let window: Option<&'a AtomicU32> = (!h.is_mr).then_some(&h.rec.busy_local);
        count(busy, window);
        let still = h.rec.state.load(Ordering::SeqCst) == KEY_STATE_VALID
            && h.rec.key.load(Ordering::SeqCst) == via.key
            && h.mr.state.load(Ordering::SeqCst) == KEY_STATE_VALID;
        if !still {
            release(busy, window);
            return Err(Fault::Key);
        }
        if self.me.keys.writes(via.key >> 8) != writes {
            release(busy, window);
            return Ok(None);
        }
        let place = Place::Local((h.va + off) as usize);
        let host_atomics = h.host_atomics.then_some(self.me);
        Ok(Some(Pinned { busy, window, place, len: len as usize, host_atomics }))
    }

    /// As [`KeySpace::pin`] for a zero-length access at the key's first address (a
    /// whole-region FLUSH).
    pub(crate) fn pin_base(&self, key: u32, pd: u32, used: KeyUse, need: Access) -> Result<Pinned<'a>, Fault> {
        let d = self.check(key, pd, used, need)?;
        let via = Via { key, pd, used, need, va: d.iova };
        self.hold(key, &d, 0, 0, via, |p| p)
    }

    /// The record of `key`, read and checked (a memo is used by [`KeySpace::pin_into`]
    /// only).
    #[inline]
    fn check(&self, key: u32, pd: u32, used: KeyUse, need: Access) -> Result<KeyDesc, Fault> {
        self.check_record(key, pd, used, need)
    }

    /// [`KeySpace::check`] from the shared record.
    fn check_record(&self, key: u32, pd: u32, used: KeyUse, need: Access) -> Result<KeyDesc, Fault> {
        let rec = self.tables.key(key >> 8).ok_or(Fault::Key)?;
        let d = rec.read();
        if d.key != key || d.state != KEY_STATE_VALID {
            return Err(Fault::Key);
        }
        // This process's own keys: the shared record must be the one this process wrote
        // (another process of the user can rewrite it, and its addresses decide where
        // the device writes here: `mr::keys`).
        if self.peer.is_none() && !self.me.keys.vouches(key >> 8, &d) {
            return Err(Fault::Key);
        }
        check_desc(&d, key, pd, used, need)?;
        Ok(d)
    }

    /// Counts the access in the region's `busy`, confirms the key is still valid (the
    /// owner invalidates first, then waits for `busy` to drain), and resolves the place.
    ///
    /// A local key of this process's own memory is not counted: such an access runs
    /// inside the call that posted its work request, and ibv_dereg_mr(3) on a region a
    /// request still names breaks the caller's contract (the Rust API keeps its regions
    /// registered until completion). What the network writes — remote keys, and any key
    /// of a peer — is always counted: deregistration must stop it; so is every access to
    /// an owned region ([`ACCESS_COUNT_LOCAL`]), whose bytes go back to the program. The
    /// pin goes to `sink`.
    #[inline(always)]
    fn hold<R>(&self, key: u32, d: &KeyDesc, off: u64, len: u64, via: Via, sink: impl FnOnce(Pinned<'a>) -> R) -> Result<R, Fault> {
        let rec = self.tables.key(key >> 8).ok_or(Fault::Key)?;
        let mr = if d.kind == KEY_KIND_MR { rec } else { self.tables.key(d.mr_index).ok_or(Fault::Key)? };
        let busy: Option<&'a AtomicU32> = match (self.peer.is_some(), via.used) {
            // An owned region counts this process's accesses too (`crate::owned`: the
            // bytes go back to the program only once every access has finished).
            (false, KeyUse::Local) if d.access & ACCESS_COUNT_LOCAL == 0 => None,
            (false, _) => Some(&mr.busy_local),
            (true, _) => Some(&mr.busy_remote),
        };
        // An access through a window counts in the window's record too: invalidating the
        // window waits for its own accesses only (`crate::mw`).
        let window: Option<&'a AtomicU32> = match (d.kind == KEY_KIND_MR, self.peer.is_some()) {
            (true, _) => None,
            (false, false) => Some(&rec.busy_local),
            (false, true) => Some(&rec.busy_remote),
        };
        count(busy, window);
        // A peer's private memory reached with cross-memory attach: counted in this
        // endpoint's header too, after the region's count and before its state is read
        // (both SeqCst). An owner whose region's count does not drain reads the header,
        // once its state store is long done, and waits while this process is stopped
        // (`Endpoint::wait_accesses`); if it gave up on a process stopped before this
        // count, the state read next finds its deregistration and nothing is accessed.
        let cma = match self.peer {
            Some((peer, _)) if d.loc == 0 && peer.cma => self.me.cma_accesses(),
            _ => None,
        };
        if let Some(c) = cma {
            c.fetch_add(1, Ordering::SeqCst);
        }
        let still = rec.state.load(Ordering::SeqCst) == KEY_STATE_VALID
            && rec.key.load(Ordering::SeqCst) == key
            && mr.state.load(Ordering::SeqCst) == KEY_STATE_VALID;
        let placed = if still { self.place(d, off, len, via, cma) } else { Err(Fault::Key) };
        match placed {
            // A `Place::Cma` pin carries `cma` and uncounts it when dropped.
            Ok(place) => {
                let host_atomics = (d.loc == 0 && self.me.shared()).then_some(self.me);
                Ok(sink(Pinned { busy, window, place, len: len as usize, host_atomics }))
            }
            Err(f) => {
                release(busy, window);
                uncount_cma(cma);
                Err(f)
            }
        }
    }

    #[inline]
    fn place(&self, d: &KeyDesc, off: u64, len: u64, via: Via, cma: Option<&'a AtomicU64>) -> Result<Place<'a>, Fault> {
        let Some((peer, cache)) = self.peer else {
            return Ok(Place::Local((d.va + off) as usize));
        };
        if d.loc == 0 {
            if !peer.cma {
                let r = ProxyRef { peer, key: via.key, pd: via.pd, used: via.used, need: via.need, va: via.va };
                return Ok(Place::Proxy(r));
            }
            return Ok(Place::Cma { pid: peer.pid, addr: d.va.wrapping_add(off) as usize, counted: cma });
        }
        let (base, seg_len) = cache.get(peer, d.loc).ok_or(Fault::Key)?;
        let start = segment_offset(d, off, len, seg_len)?;
        // Mapped until the cache drops, which outlives every `Pinned` of this key space.
        Ok(Place::Local(base + start))
    }
}

/// The pinned ranges of one message's scatter or gather list (up to `MAX_SGE`; most
/// messages have one or two, kept inline).
pub(crate) struct PinList<'a> {
    items: smallvec::SmallVec<[Pinned<'a>; 2]>,
}

impl<'a> PinList<'a> {
    #[inline]
    pub(crate) fn new() -> Self {
        PinList { items: smallvec::SmallVec::new() }
    }

    #[inline]
    pub(crate) fn push(&mut self, p: Pinned<'a>) {
        self.items.push(p);
    }

    /// The first range (a remote access pins one).
    #[inline]
    pub(crate) fn first(&self) -> Option<&Pinned<'a>> {
        self.items.first()
    }

    /// The pinned ranges, in list order.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[Pinned<'a>] {
        self.items.as_slice()
    }

    /// Whether nothing is pinned.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    #[inline]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Pinned<'a>> {
        self.items.iter()
    }
}

/// Whether the key record copy `d` grants an access through `key` by a QP of PD `pd`
/// used as `used` with rights `need` (after the key and its state were found to match:
/// [`KeySpace::check`]): a local key names a region, the PD matches, a type 2 window is
/// used by the QP it is bound to, the rights are granted. Pure: `d` may come from another
/// process.
#[inline]
pub(crate) fn check_desc(d: &KeyDesc, key: u32, pd: u32, used: KeyUse, need: Access) -> Result<(), Fault> {
    if d.key != key || d.state != KEY_STATE_VALID {
        return Err(Fault::Key);
    }
    if used == KeyUse::Local && d.kind != KEY_KIND_MR {
        return Err(Fault::Key);
    }
    if d.pd != pd {
        return Err(Fault::Pd);
    }
    if let KeyUse::Remote { qpn } = used {
        if d.kind == KEY_KIND_MW2 && d.qpn != qpn {
            return Err(Fault::Pd);
        }
    }
    if !Access::from_bits_truncate(d.access).contains(need) {
        return Err(Fault::Access);
    }
    Ok(())
}

/// The offset of `[va, va+len)` in the range of the key record copy `d`
/// (`[iova, iova+len)`), or `Fault::Bounds` if it leaves it.
#[inline]
pub(crate) fn offset_in(d: &KeyDesc, va: u64, len: u64) -> Result<u64, Fault> {
    let off = va.checked_sub(d.iova).ok_or(Fault::Bounds)?;
    if off.checked_add(len).ok_or(Fault::Bounds)? > d.len {
        return Err(Fault::Bounds);
    }
    Ok(off)
}

/// A range of a memory region of this process, as [`local_range`] finds it.
pub(crate) struct LocalRange {
    /// Where the range's first byte is in this process.
    pub(crate) addr: usize,
    /// The region's rights.
    pub(crate) access: Access,
    /// The region's first byte in this process and its length.
    pub(crate) region: (u64, u64),
    /// The handle of the region's PD.
    pub(crate) pd: u32,
    /// Whether the region is private memory of this process (in no shared segment: peers
    /// reach it with cross-memory attach or the proxy).
    pub(crate) private: bool,
}

/// Where `[va, va+len)` through local key `key` of this process's endpoint `me` is in
/// this process, or `None` if `key` names no valid memory region of this process
/// covering it. Only looks: nothing is pinned or counted (the sanitizer's checksums of
/// work-request buffers, docs/sanitizer.md).
pub(crate) fn local_range(me: &Endpoint, key: u32, va: u64, len: u64) -> Option<LocalRange> {
    let d = me.tables.key(key >> 8)?.read();
    if d.key != key || d.state != KEY_STATE_VALID || d.kind != KEY_KIND_MR || !me.keys.vouches(key >> 8, &d) {
        return None;
    }
    let off = offset_in(&d, va, len).ok()?;
    let addr = usize::try_from(d.va.checked_add(off)?).ok()?;
    Some(LocalRange { addr, access: Access::from_bits_truncate(d.access), region: (d.va, d.len), pd: d.pd, private: d.loc == 0 })
}

/// The region or window remote key `key` names among this process's keys now: its first
/// address (iova), length and rights as text, or `None` if no valid one has the key. Only
/// looks (the sanitizer's explanation of a remote access error, docs/sanitizer.md).
pub(crate) fn key_record(me: &Endpoint, key: u32) -> Option<(u64, u64, String)> {
    let d = me.tables.key(key >> 8)?.read();
    if d.key != key || d.state != KEY_STATE_VALID || !me.keys.vouches(key >> 8, &d) {
        return None;
    }
    Some((d.iova, d.len, format!("{:?}", Access::from_bits_truncate(d.access))))
}

/// Where the bytes `[off, off+len)` of the key's range are in its shared segment of
/// `seg_len` bytes (the record's `seg_off` names the range's first byte), or
/// `Fault::Bounds`: the record comes from another process, never trust it to stay in the
/// mapping.
#[inline]
pub(crate) fn segment_offset(d: &KeyDesc, off: u64, len: u64, seg_len: usize) -> Result<usize, Fault> {
    let start = d.seg_off.checked_add(off).ok_or(Fault::Bounds)?;
    if start.checked_add(len).is_none_or(|end| end > seg_len as u64) {
        return Err(Fault::Bounds);
    }
    usize::try_from(start).map_err(|_| Fault::Bounds)
}
