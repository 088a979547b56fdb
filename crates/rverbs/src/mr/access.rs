//! Every access the device makes to registered memory, past the key checks
//! (`mr::keyspace`): pinning the entries of a scatter or gather list, and moving the bytes
//! between [`Place`]s — plain loads and stores in this process, cross-memory attach
//! (`shm::cma`) or the peer's own copy (`mr::proxy`) for a peer's private memory — and
//! the device's atomics; the sanitizer's looks at work-request buffers.

use std::sync::atomic::Ordering;

use crate::shm::cma::{self, CmaError};
use super::endpoint::Endpoint;
use super::keyspace::{local_range, Fault, LocalRange, KeySpace, KeyUse, PinList, Pinned, Place, ProxyRef, Via};
use crate::mem;
use crate::mr::Sge;
use rverbs_proto::verbs::Access;

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
            crate::sanitizer::memory_unmapped(verb, crate::sanitizer::Id::new(me.slot, g.lkey), r.region, first, Some(wr));
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


/// Copies `bytes` into the scatter list `sges` through local keys of this process's
/// endpoint `me`, each SGE in turn, as the device places a receive (a receive placed late:
/// the sanitizer's staging, docs/sanitizer.md, read-before-completion; one placed by its
/// owner, docs/memory.md, "Receives placed by their owner"). An SGE whose key names no
/// valid region covering its part, or whose region `ok` refuses, receives nothing; a
/// fault (memory unmapped since) ends that SGE's copy.
pub(crate) fn scatter_local(me: &Endpoint, sges: &[Sge], bytes: &[u8], ok: impl Fn(&Sge, &LocalRange) -> bool) {
    let mut off = 0usize;
    for g in sges {
        if off >= bytes.len() {
            break;
        }
        let len = (g.length as usize).min(bytes.len() - off);
        if len > 0 {
            if let Some(r) = local_range(me, g.lkey, g.addr, len as u64).filter(|r| ok(g, r)) {
                // SAFETY: `bytes` is a distinct Rust buffer; the destination is
                // application memory inside a valid registered region of this process
                // (`local_range` just found it), written as the device writes a receive
                // buffer; no Rust reference of ours covers it, and a fault there ends the
                // guarded copy.
                let _ = unsafe { mem::copy(r.addr as *mut u8, bytes[off..].as_ptr(), len) };
            }
        }
        off += len;
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
#[derive(Clone, Copy)]
pub(crate) enum Source<'s, 'a> {
    /// A Rust buffer (inline data, a synthesized header, an atomic result).
    Bytes(&'s [u8]),
    /// Pinned registered memory, its ranges in message order.
    Pins(&'s [Pinned<'a>]),
}

/// Moves one contiguous piece. The places are borrowed where they were written: a
/// `Place` passed by value is copied 16 bytes at a time over a tag and an address written
/// apart, a load the CPU cannot forward from its store buffer (`rings::wc::CqeWords`).
fn move_piece(dst: &Place<'_>, src: &Place<'_>, n: usize) -> Result<(), CmaError> {
    match (dst, src) {
        (&Place::Local(d), &Place::Local(s)) => {
            // SAFETY: both pieces lie inside pinned ranges (kept registered, and mapped,
            // by the `Pinned` guards the caller holds) or inside a live Rust slice
            // borrowed for the call.
            unsafe { mem::copy(d as *mut u8, s as *const u8, n) }.map_err(|_| CmaError::Fault)
        }
        // SAFETY: the local source lies inside a pinned range or a borrowed slice.
        (&Place::Cma { pid, addr, .. }, &Place::Local(s)) => unsafe { cma::write(pid, addr, s as *const u8, n) },
        (&Place::Local(d), &Place::Cma { pid, addr, .. }) => read_ordered(pid, d, addr, n),
        (&Place::Proxy(r), &Place::Local(s)) => super::proxy::write(r, s as *const u8, n),
        (&Place::Local(d), &Place::Proxy(r)) => super::proxy::read(r, d as *mut u8, n),
        // A request moves bytes between the requester's own memory and one responder:
        // never between two other processes.
        _ => Err(CmaError::Denied),
    }
}

/// Copies `src` into the ranges of `dst`, starting `dst_offset` bytes into them, in
/// message order; returns the bytes copied (limited by the room in `dst`).
#[inline]
pub(crate) fn copy_message(dst: &PinList<'_>, dst_offset: usize, src: Source<'_, '_>) -> Result<usize, CmaError> {
    copy_message_from(dst, dst_offset, src, 0)
}

/// As [`copy_message`], leaving out the first `src_skip` bytes of `src` (a tag-matching
/// header that is not delivered, `crate::rings::tag_list`).
#[inline]
pub(crate) fn copy_message_from(dst: &PinList<'_>, dst_offset: usize, src: Source<'_, '_>, src_skip: usize) -> Result<usize, CmaError> {
    if src_skip > 0 {
        return copy_pieces(dst.as_slice(), dst_offset, src, src_skip);
    }
    // One range to one range, the common case: no piece list.
    if let ([d], 0) = (dst.as_slice(), dst_offset) {
        return copy_to(d, &src);
    }
    copy_pieces(dst.as_slice(), dst_offset, src, 0)
}

/// As [`copy_message`] into the one pinned range `d` (a WRITE's target, pinned without a
/// list by [`KeySpace::pin_one`]).
#[inline]
pub(crate) fn copy_to(d: &Pinned<'_>, src: &Source<'_, '_>) -> Result<usize, CmaError> {
    let bytes;
    let (sp, sl) = match *src {
        Source::Bytes(b) => {
            bytes = Place::Local(b.as_ptr() as usize);
            (&bytes, b.len())
        }
        Source::Pins([ref s]) => (&s.place, s.len),
        Source::Pins(_) => return copy_pieces(std::slice::from_ref(d), 0, *src, 0),
    };
    let n = d.len.min(sl);
    if n > 0 {
        move_piece(&d.place, sp, n)?;
    }
    Ok(n)
}

fn copy_pieces(dst: &[Pinned<'_>], dst_offset: usize, src: Source<'_, '_>, mut src_skip: usize) -> Result<usize, CmaError> {
    let mut src_pieces: smallvec::SmallVec<[(Place<'_>, usize); 2]> = match src {
        Source::Bytes(b) => smallvec::smallvec![(Place::Local(b.as_ptr() as usize), b.len())],
        Source::Pins(l) => l.iter().map(|p| (p.place, p.len)).collect(),
    };
    // The source's first `src_skip` bytes are left out.
    src_pieces.retain(|(p, len)| {
        if src_skip >= *len {
            src_skip -= *len;
            return false;
        }
        *p = advance(*p, src_skip);
        *len -= src_skip;
        src_skip = 0;
        true
    });
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
            move_piece(&advance(d.place, d_off), &advance(sp, s_off), n)?;
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
        Place::Cma { pid, addr, counted } => Place::Cma { pid, addr: addr + by, counted },
        Place::Proxy(r) => Place::Proxy(ProxyRef { va: r.va + by as u64, ..r }),
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
        move_piece(&Place::Local(dst[off..].as_mut_ptr() as usize), &p.place, n)?;
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
        move_piece(&Place::Local(dst[off..].as_mut_ptr() as usize), &advance(p.place, skip), n)?;
        skip = 0;
        off += n;
    }
    Ok(())
}

/// Copies a pinned range out into a Rust buffer (at most `dst.len()` bytes).
pub(crate) fn copy_out(p: &Pinned<'_>, dst: &mut [u8]) -> Result<(), CmaError> {
    let n = dst.len().min(p.len);
    move_piece(&Place::Local(dst.as_mut_ptr() as usize), &p.place, n)
}

/// Executes a 64-bit atomic on the 8 pinned bytes of `p` and returns the original value.
pub(crate) fn atomic(p: &Pinned<'_>, op: mem::AtomicOp) -> Result<u64, CmaError> {
    debug_assert!(p.len >= 8);
    // A progress thread waiting for the lock serves its own proxy requests meanwhile.
    let _g = p.host_atomics().map(|e| e.atomic_lock(super::proxy::serve_own_pending));
    match p.place {
        Place::Local(addr) if p.host_atomics().is_none() => {
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
            move_piece(&local_old, &place, 8)?;
            let v = u64::from_ne_bytes(old);
            let new = match op {
                mem::AtomicOp::FetchAdd(a) => Some(v.wrapping_add(a)),
                mem::AtomicOp::CompareSwap { compare, swap } => (v == compare).then_some(swap),
                mem::AtomicOp::Write(w) => Some(w),
            };
            if let Some(n) = new {
                let bytes = n.to_ne_bytes();
                move_piece(&place, &Place::Local(bytes.as_ptr() as usize), 8)?;
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
