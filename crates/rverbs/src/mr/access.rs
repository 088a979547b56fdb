//! Every access the device makes to registered memory: resolve a key, check PD, bounds
//! and rights, pin the region while bytes move, and move them.
//!
//! Rule: the network can never write outside a registered region. Bytes reach or leave
//! registered memory only through a [`Pinned`] range, and a `Pinned` is only made here,
//! after every check passed (a proof token: an unchecked access does not compile).
//!
//! Keys are resolved in a [`KeySpace`]: this process's key table, or a peer's (mapped
//! from its endpoint directory). Where the bytes are decides how they move ([`Place`]):
//! by plain loads and stores when they are in this process — its own memory, or a peer's
//! region that lives in a shared segment this process mapped — or by cross-memory
//! attach ([`cma`](super::cma)) when they are in a peer's private memory.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rverbs_proto::vendor_err;
use rverbs_proto::violation::Violation;

use crate::shm::cma::{self, CmaError};
use super::endpoint::Endpoint;
use crate::mem;
use crate::mr::Sge;
use crate::shm::registry::Peer;
use crate::shm::tables::{KeyDesc, Tables, KEY_KIND_MR, KEY_KIND_MW2, KEY_STATE_VALID};
use crate::shm::Segment;
use rverbs_proto::verbs::Access;

/// Where the bytes of a pinned range are.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place<'a> {
    /// At this address of this process (its own memory or a mapped shared segment).
    Local(usize),
    /// At this address of process `pid` (reached with cross-memory attach).
    Cma { pid: i32, addr: usize },
    /// In a peer's private memory that cross-memory attach cannot reach: the peer
    /// copies ([`proxy`](super::proxy)).
    Proxy(super::proxy::ProxyRef<'a>),
}

/// An access in progress: keeps the region registered until dropped.
pub(crate) struct Pinned<'a> {
    /// The count this access is in (`None`: a local key of this process's own memory,
    /// see [`KeySpace::hold`]).
    busy: Option<&'a AtomicU32>,
    pub(crate) place: Place<'a>,
    /// Length of the accessed range.
    pub(crate) len: usize,
    /// Atomics on these bytes take the host-wide atomic lock of this endpoint: peers
    /// reach them with cross-memory attach, which cannot execute a CPU atomic
    /// (IBV_ATOMIC_HCA: the device's atomics are atomic among themselves).
    host_atomics: Option<&'a Endpoint>,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.busy {
            b.fetch_sub(1, Ordering::SeqCst);
        }
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
}

impl<'a> KeySpace<'a> {
    /// This process's keys.
    pub(crate) fn local(me: &'a Endpoint) -> Self {
        KeySpace { tables: me.tables, me, peer: None }
    }

    /// A peer's keys, reached from this process's endpoint `me`.
    pub(crate) fn of_peer(me: &'a Endpoint, peer: &'a Peer, cache: &'a SegCache) -> Self {
        KeySpace { tables: peer.tables(), me, peer: Some((peer, cache)) }
    }

    /// Checks an access of `[va, va+len)` with rights `need` through `key` for a QP of
    /// PD `pd`, and pins it.
    pub(crate) fn pin(&self, key: u32, pd: u32, used: KeyUse, va: u64, len: u64, need: Access) -> Result<Pinned<'a>, Fault> {
        let d = self.check(key, pd, used, need)?;
        let off = offset_in(&d, va, len)?;
        let via = Via { key, pd, used, need, va };
        self.hold(key, &d, off, len, via, |p| p)
    }

    /// As [`KeySpace::pin`], appending the pinned range to `out`: the pin is built where it
    /// stays (the data path pins into lists it keeps in place).
    pub(crate) fn pin_into(&self, via: Via, len: u64, out: &mut PinList<'a>) -> Result<(), Fault> {
        let d = self.check(via.key, via.pd, via.used, via.need)?;
        let off = offset_in(&d, via.va, len)?;
        self.hold(via.key, &d, off, len, via, |p| out.push(p))
    }

    /// As [`KeySpace::pin`] for a zero-length access at the key's first address (a
    /// whole-region FLUSH).
    pub(crate) fn pin_base(&self, key: u32, pd: u32, used: KeyUse, need: Access) -> Result<Pinned<'a>, Fault> {
        let d = self.check(key, pd, used, need)?;
        let via = Via { key, pd, used, need, va: d.iova };
        self.hold(key, &d, 0, 0, via, |p| p)
    }

    fn check(&self, key: u32, pd: u32, used: KeyUse, need: Access) -> Result<KeyDesc, Fault> {
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
    /// of a peer — is always counted: deregistration must stop it. The pin goes to `sink`.
    #[inline]
    fn hold<R>(&self, key: u32, d: &KeyDesc, off: u64, len: u64, via: Via, sink: impl FnOnce(Pinned<'a>) -> R) -> Result<R, Fault> {
        let rec = self.tables.key(key >> 8).ok_or(Fault::Key)?;
        let mr = if d.kind == KEY_KIND_MR { rec } else { self.tables.key(d.mr_index).ok_or(Fault::Key)? };
        let busy: Option<&'a AtomicU32> = match (self.peer.is_some(), via.used) {
            (false, KeyUse::Local) => None,
            (false, _) => Some(&mr.busy_local),
            (true, _) => Some(&mr.busy_remote),
        };
        if let Some(b) = busy {
            b.fetch_add(1, Ordering::SeqCst);
        }
        let still = rec.state.load(Ordering::SeqCst) == KEY_STATE_VALID
            && rec.key.load(Ordering::SeqCst) == key
            && mr.state.load(Ordering::SeqCst) == KEY_STATE_VALID;
        let placed = if still { self.place(d, off, len, via) } else { Err(Fault::Key) };
        match placed {
            Ok(place) => {
                let host_atomics = (d.loc == 0 && self.me.shared()).then_some(self.me);
                Ok(sink(Pinned { busy, place, len: len as usize, host_atomics }))
            }
            Err(f) => {
                if let Some(b) = busy {
                    b.fetch_sub(1, Ordering::SeqCst);
                }
                Err(f)
            }
        }
    }

    fn place(&self, d: &KeyDesc, off: u64, len: u64, via: Via) -> Result<Place<'a>, Fault> {
        let Some((peer, cache)) = self.peer else {
            return Ok(Place::Local((d.va + off) as usize));
        };
        if d.loc == 0 {
            if !peer.cma {
                let r = super::proxy::ProxyRef { peer, key: via.key, pd: via.pd, used: via.used, need: via.need, va: via.va };
                return Ok(Place::Proxy(r));
            }
            return Ok(Place::Cma { pid: peer.pid, addr: d.va.wrapping_add(off) as usize });
        }
        let (base, seg_len) = cache.get(peer, d.loc).ok_or(Fault::Key)?;
        let start = segment_offset(d, off, len, seg_len)?;
        // Mapped until the cache drops, which outlives every `Pinned` of this key space.
        Ok(Place::Local(base + start))
    }
}

/// Whether the key record copy `d` grants an access through `key` by a QP of PD `pd`
/// used as `used` with rights `need` (after the key and its state were found to match:
/// [`KeySpace::check`]): a local key names a region, the PD matches, a type 2 window is
/// used by the QP it is bound to, the rights are granted. Pure: `d` may come from another
/// process.
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
    Some(LocalRange { addr, access: Access::from_bits_truncate(d.access), region: (d.va, d.len) })
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

/// Rights under which a peer may write a region: the sanitizer never watches its ranges
/// (an RDMA WRITE or atomic from the peer, or through a window bound to it, changes them
/// legitimately and leaves no trace in this process).
const REMOTELY_WRITABLE: Access = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC).union(Access::MW_BIND);

/// The SGEs of a SEND or RDMA WRITE the sanitizer watches (docs/sanitizer.md,
/// send-buffer-changed): each in a valid region of this process that no peer may write,
/// with the checksum of its bytes, as long as the request's total stays within
/// `MAX_WATCHED`.
pub(crate) fn watch_sges(me: &'static Endpoint, sges: &[Sge]) -> Vec<crate::sanitizer::Watched> {
    let mut out = Vec::new();
    let mut total = 0usize;
    for g in sges {
        let len = g.length as usize;
        if len == 0 || total + len > crate::sanitizer::MAX_WATCHED {
            continue;
        }
        let Some(r) = local_range(me, g.lkey, g.addr, u64::from(g.length)) else { continue };
        if r.access.intersects(REMOTELY_WRITABLE) {
            continue;
        }
        let Some(crc) = checksum(r.addr, len) else { continue };
        total += len;
        let (key, iova, at) = (g.lkey, g.addr, r.addr);
        let recheck = Box::new(move || match local_range(me, key, iova, len as u64) {
            Some(now) if now.addr == at => checksum(at, len),
            _ => None,
        });
        out.push(crate::sanitizer::Watched { lkey: g.lkey, iova: g.addr, len: g.length, addr: r.addr, region: r.region, crc, recheck });
    }
    out
}

/// The sanitizer's check that the memory of each SGE's region of this process is still
/// mapped when a work request naming it is posted (docs/sanitizer.md,
/// mr-memory-unmapped): `wr` is the request's queue, number and wr_id.
pub(crate) fn check_mapped(me: &Endpoint, verb: &'static str, wr: (crate::sanitizer::Queue, u32, u64), sges: &[Sge]) {
    for g in sges.iter().filter(|g| g.length > 0) {
        let Some(r) = local_range(me, g.lkey, g.addr, u64::from(g.length)) else { continue };
        if r.access.contains(Access::ON_DEMAND) {
            // Pages of an on-demand region may come and go: only the access finds out.
            continue;
        }
        if let Some(first) = crate::sys::first_unmapped(r.addr, g.length as usize) {
            crate::sanitizer::memory_unmapped(verb, g.lkey, r.region, first, Some(wr));
        }
    }
}

/// The ranges of this process the device writes for a request (receive buffers, RDMA
/// READ and atomic results), `[start, end)`, for the sanitizer.
pub(crate) fn sink_ranges(me: &Endpoint, sges: &[Sge]) -> Vec<(usize, usize)> {
    sges.iter()
        .filter(|g| g.length > 0)
        .filter_map(|g| local_range(me, g.lkey, g.addr, u64::from(g.length)).map(|r| (r.addr, r.addr + g.length as usize)))
        .collect()
}

/// The CRC-32 of `len` bytes at `addr` of this process, read with the guarded copy
/// (`None` if the memory faults).
fn checksum(addr: usize, len: usize) -> Option<u32> {
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is a distinct Rust buffer of `len` bytes. The source is application
    // memory inside a registered region of this process (`local_range` just found it
    // valid), read as the device reads it; no Rust reference of ours covers it. A
    // concurrent change gives other bytes, an unmap a fault that the copy returns.
    unsafe { mem::copy(buf.as_mut_ptr(), addr as *const u8, len) }.ok()?;
    Some(crc32fast::hash(&buf))
}

/// Where the bytes `[off, off+len)` of the key's range are in its shared segment of
/// `seg_len` bytes (the record's `seg_off` names the range's first byte), or
/// `Fault::Bounds`: the record comes from another process, never trust it to stay in the
/// mapping.
pub(crate) fn segment_offset(d: &KeyDesc, off: u64, len: u64, seg_len: usize) -> Result<usize, Fault> {
    let start = d.seg_off.checked_add(off).ok_or(Fault::Bounds)?;
    if start.checked_add(len).is_none_or(|end| end > seg_len as u64) {
        return Err(Fault::Bounds);
    }
    usize::try_from(start).map_err(|_| Fault::Bounds)
}

/// The pinned ranges of one message's scatter or gather list (up to `MAX_SGE`; most
/// messages have one or two, kept inline).
pub(crate) struct PinList<'a> {
    items: smallvec::SmallVec<[Pinned<'a>; 2]>,
}

impl<'a> PinList<'a> {
    pub(crate) fn new() -> Self {
        PinList { items: smallvec::SmallVec::new() }
    }

    pub(crate) fn push(&mut self, p: Pinned<'a>) {
        self.items.push(p);
    }

    /// The first range (a remote access pins one).
    pub(crate) fn first(&self) -> Option<&Pinned<'a>> {
        self.items.first()
    }

    /// Whether nothing is pinned.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &Pinned<'a>> {
        self.items.iter()
    }
}

/// Pins the entries of `sges` needed to cover `need` bytes (zero-length entries are
/// skipped unchecked, as rxe's `copy_data` does), each for `access` in PD `pd`.
pub(crate) fn pin_sges<'a>(
    keys: &KeySpace<'a>,
    pd: u32,
    sges: &[Sge],
    access: Access,
    need: u64,
) -> Result<PinList<'a>, Fault> {
    let mut list = PinList::new();
    pin_sges_into(keys, pd, sges, access, need, &mut list)?;
    Ok(list)
}

/// As [`pin_sges`], into `list` (empty), which the caller keeps where it is: the list is
/// a few hundred bytes inline and the data path does not move it.
pub(crate) fn pin_sges_into<'a>(
    keys: &KeySpace<'a>,
    pd: u32,
    sges: &[Sge],
    access: Access,
    need: u64,
    list: &mut PinList<'a>,
) -> Result<(), Fault> {
    let mut covered = 0u64;
    for s in sges {
        if covered >= need {
            break;
        }
        if s.length == 0 {
            continue;
        }
        let take = u64::from(s.length).min(need - covered);
        let via = Via { key: s.lkey, pd, used: KeyUse::Local, need: access, va: s.addr };
        keys.pin_into(via, take, list)?;
        covered += take;
    }
    Ok(())
}

/// Where a message's bytes come from.
pub(crate) enum Source<'s, 'a> {
    /// A Rust buffer (inline data, a synthesized header, an atomic result).
    Bytes(&'s [u8]),
    /// Pinned registered memory.
    Pins(&'s PinList<'a>),
}

/// Moves one contiguous piece.
fn move_piece(dst: Place<'_>, src: Place<'_>, n: usize) -> Result<(), CmaError> {
    match (dst, src) {
        (Place::Local(d), Place::Local(s)) => {
            // SAFETY: both pieces lie inside pinned ranges (kept registered, and mapped,
            // by the `Pinned` guards the caller holds) or inside a live Rust slice
            // borrowed for the call.
            unsafe { mem::copy(d as *mut u8, s as *const u8, n) }.map_err(|_| CmaError::Fault)
        }
        // SAFETY: the local source lies inside a pinned range or a borrowed slice.
        (Place::Cma { pid, addr }, Place::Local(s)) => unsafe { cma::write(pid, addr, s as *const u8, n) },
        (Place::Local(d), Place::Cma { pid, addr }) => read_ordered(pid, d, addr, n),
        (Place::Proxy(r), Place::Local(s)) => super::proxy::write(r, s as *const u8, n),
        (Place::Local(d), Place::Proxy(r)) => super::proxy::read(r, d as *mut u8, n),
        // A request moves bytes between the requester's own memory and one responder:
        // never between two other processes.
        _ => Err(CmaError::Denied),
    }
}

/// Copies `src` into the ranges of `dst`, starting `dst_offset` bytes into them, in
/// message order; returns the bytes copied (limited by the room in `dst`).
pub(crate) fn copy_message(dst: &PinList<'_>, dst_offset: usize, src: Source<'_, '_>) -> Result<usize, CmaError> {
    // One range to one range, the common case: no piece list.
    if let ([d], 0) = (dst.items.as_slice(), dst_offset) {
        let (sp, sl) = match src {
            Source::Bytes(b) => (Place::Local(b.as_ptr() as usize), b.len()),
            Source::Pins(PinList { items }) if items.len() == 1 => (items[0].place, items[0].len),
            Source::Pins(_) => return copy_pieces(dst, dst_offset, src),
        };
        let n = d.len.min(sl);
        if n > 0 {
            move_piece(d.place, sp, n)?;
        }
        return Ok(n);
    }
    copy_pieces(dst, dst_offset, src)
}

fn copy_pieces(dst: &PinList<'_>, dst_offset: usize, src: Source<'_, '_>) -> Result<usize, CmaError> {
    let src_pieces: smallvec::SmallVec<[(Place<'_>, usize); 2]> = match src {
        Source::Bytes(b) => smallvec::smallvec![(Place::Local(b.as_ptr() as usize), b.len())],
        Source::Pins(l) => l.iter().map(|p| (p.place, p.len)).collect(),
    };
    let src_n = src_pieces.len();
    let mut copied = 0;
    let mut skip = dst_offset;
    let (mut si, mut s_off) = (0usize, 0usize);
    for d in dst.iter() {
        if skip >= d.len {
            skip -= d.len;
            continue;
        }
        let mut d_off = skip;
        skip = 0;
        while d_off < d.len && si < src_n {
            let (sp, sl) = src_pieces[si];
            let n = (d.len - d_off).min(sl - s_off);
            move_piece(advance(d.place, d_off), advance(sp, s_off), n)?;
            d_off += n;
            s_off += n;
            copied += n;
            if s_off == sl {
                si += 1;
                s_off = 0;
            }
        }
        if si >= src_n {
            break;
        }
    }
    Ok(copied)
}

/// Reads `n` bytes of process `pid` at `addr` into this process's `dst`, writing `dst`
/// in increasing address order: the kernel's copy makes no ordering promise, so it fills
/// a bounce buffer, which [`mem::copy`] then places (RDMA READ is claimed in order).
fn read_ordered(pid: i32, dst: usize, addr: usize, n: usize) -> Result<(), CmaError> {
    const CHUNK: usize = 64 * 1024;
    thread_local! {
        static BOUNCE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BOUNCE.with_borrow_mut(|b| {
        if b.len() < CHUNK.min(n) {
            b.resize(CHUNK.min(n), 0);
        }
        let mut off = 0;
        while off < n {
            let piece = (n - off).min(CHUNK);
            // SAFETY: `b` holds at least `piece` bytes and is this thread's own buffer.
            unsafe { cma::read(pid, b.as_mut_ptr(), addr + off, piece)? };
            // SAFETY: the destination piece lies inside a pinned range; the source is
            // the bounce buffer just filled.
            unsafe { mem::copy((dst + off) as *mut u8, b.as_ptr(), piece) }.map_err(|_| CmaError::Fault)?;
            off += piece;
        }
        Ok(())
    })
}

fn advance(p: Place<'_>, by: usize) -> Place<'_> {
    match p {
        Place::Local(a) => Place::Local(a + by),
        Place::Cma { pid, addr } => Place::Cma { pid, addr: addr + by },
        Place::Proxy(r) => Place::Proxy(super::proxy::ProxyRef { va: r.va + by as u64, ..r }),
    }
}

/// Copies the pinned ranges of `src`, in order, into `dst` (at most `dst.len()` bytes).
pub(crate) fn gather(src: &PinList<'_>, dst: &mut [u8]) -> Result<(), CmaError> {
    let mut off = 0;
    for p in src.iter() {
        if off >= dst.len() {
            break;
        }
        let n = p.len.min(dst.len() - off);
        move_piece(Place::Local(dst[off..].as_mut_ptr() as usize), p.place, n)?;
        off += n;
    }
    Ok(())
}

/// Copies the bytes of the pinned ranges of `src` that start `skip` bytes into them, in
/// order, into `dst` (at most `dst.len()` bytes): one packet's share of a message.
pub(crate) fn gather_at(src: &PinList<'_>, mut skip: usize, dst: &mut [u8]) -> Result<(), CmaError> {
    let mut off = 0;
    for p in src.iter() {
        if off >= dst.len() {
            break;
        }
        if skip >= p.len {
            skip -= p.len;
            continue;
        }
        let n = (p.len - skip).min(dst.len() - off);
        move_piece(Place::Local(dst[off..].as_mut_ptr() as usize), advance(p.place, skip), n)?;
        skip = 0;
        off += n;
    }
    Ok(())
}

/// Copies a pinned range out into a Rust buffer (at most `dst.len()` bytes).
pub(crate) fn copy_out(p: &Pinned<'_>, dst: &mut [u8]) -> Result<(), CmaError> {
    let n = dst.len().min(p.len);
    move_piece(Place::Local(dst.as_mut_ptr() as usize), p.place, n)
}

/// Executes a 64-bit atomic on the 8 pinned bytes of `p` and returns the original value.
pub(crate) fn atomic(p: &Pinned<'_>, op: mem::AtomicOp) -> Result<u64, CmaError> {
    debug_assert!(p.len >= 8);
    // A progress thread waiting for the lock serves its own proxy requests meanwhile.
    let _g = p.host_atomics.map(|e| e.atomic_lock(super::proxy::serve_own_pending));
    match p.place {
        Place::Local(addr) if p.host_atomics.is_none() => {
            debug_assert_eq!(addr % 8, 0);
            // SAFETY: `p` pins 8 aligned bytes of a live registration; the device's
            // atomics on memory shared this way always use CPU atomics.
            unsafe { mem::atomic_op(addr, op) }.map_err(|_| CmaError::Fault)
        }
        place => {
            // Read-modify-write under the host-wide lock: every device atomic on this
            // memory (this process's and its peers') takes the same lock.
            let mut old = [0u8; 8];
            let local_old = Place::Local(old.as_mut_ptr() as usize);
            move_piece(local_old, place, 8)?;
            let v = u64::from_ne_bytes(old);
            let new = match op {
                mem::AtomicOp::FetchAdd(a) => Some(v.wrapping_add(a)),
                mem::AtomicOp::CompareSwap { compare, swap } => (v == compare).then_some(swap),
                mem::AtomicOp::Write(w) => Some(w),
            };
            if let Some(n) = new {
                let bytes = n.to_ne_bytes();
                move_piece(place, Place::Local(bytes.as_ptr() as usize), 8)?;
            }
            Ok(v)
        }
    }
}

/// Makes every store to pinned memory so far globally visible (FLUSH with the global
/// visibility placement type: a full memory barrier; cross-memory copies are complete
/// when their system call returns).
pub(crate) fn flush_global() {
    std::sync::atomic::fence(Ordering::SeqCst);
}
