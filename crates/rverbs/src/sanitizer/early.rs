//! read-before-completion (docs/sanitizer.md): a receive buffer read before the
//! completion of its receive was polled, on a QP for which ibv_query_qp_data_in_order(3)
//! answers 0 (so the bytes are not guaranteed to be there until then, ibv_poll_cq(3)).
//!
//! The receive is placed by the device into a staging region the library owns (the
//! engine makes it, `rings::staging`); the pages the receive's buffers cover whole are
//! made `PROT_NONE` until the completion is polled. A load of one of them faults: the
//! handler (`fault.rs` calls [`on_fault`]) reports it, gives the pages back and lets the
//! load run again, on the bytes from before the post (the "stale bytes" of a NIC that
//! places late). At the poll the pages are given back, the staged bytes scattered into
//! the receive's buffers, and only then is the completion returned to the program.
//!
//! Everything a signal handler reads is in [`SLOTS`] and [`RECENT`] (atomics only); the
//! rest is behind [`STATE`], which the handler only tries to take.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::trace::{self, Trace};
use super::{report, site, Finding, FindingKind, Id, Object, Queue};

/// Copies the first `n` staged bytes into the receive's buffers, leaving out the SGEs of
/// the lkeys given (regions deregistered meanwhile); dropping it frees the staging region.
pub(crate) type Scatter = Box<dyn FnOnce(usize, &[u32]) + Send>;

/// A receive staged by the engine.
pub(crate) struct Stage {
    /// Its QP (device and QPN); the lkeys of `sges` are of that device.
    pub(crate) qpn: Id,
    pub(crate) wr_id: u64,
    /// Its SGEs as the application gave them: (lkey, address, length).
    pub(crate) sges: Vec<(u32, u64, u32)>,
    /// The page ranges to watch, `[start, end)`: whole pages inside the SGEs.
    pub(crate) extents: Vec<(usize, usize)>,
    pub(crate) scatter: Scatter,
}

struct Entry {
    qpn: Id,
    wr_id: u64,
    sges: Vec<(u32, u64, u32)>,
    /// The slots of its watched extents (given back when the pages are).
    slots: Vec<usize>,
    extents: Vec<(usize, usize)>,
    scatter: Option<Scatter>,
    /// lkeys deregistered while it was outstanding: nothing is scattered there.
    dead: Vec<u32>,
    at: Trace,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<u64, Entry>,
    /// How many watched extents cover each protected page.
    pages: BTreeMap<usize, u32>,
    /// QPs for which ibv_query_qp_data_in_order answered 1 for a SEND: never staged.
    in_order: BTreeSet<Id>,
    next: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let _busy = super::Busy::enter();
    f(state().get_or_insert_with(State::default))
}

// ---- What the signal handler reads ----

/// One watched extent: `[start, start + len)`, of entry `id`, made by process `pid`.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    id: AtomicU64,
    pid: AtomicU32,
}
const NSLOTS: usize = 4096;
#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), id: AtomicU64::new(0), pid: AtomicU32::new(0) };
static SLOTS: [Slot; NSLOTS] = [FREE; NSLOTS];
/// A slot's start while its owner fills it.
const CLAIMING: usize = 1;

/// Extents given back lately, `(start, len, retries)`: a load that faulted just before may
/// reach the handler after; it runs again (as `fault.rs` does for moves), at most
/// [`LATE_RETRIES`] times per extent.
const NRECENT: usize = 64;
const LATE_RETRIES: u32 = 64;
#[allow(clippy::declare_interior_mutable_const)]
const NONE: (AtomicUsize, AtomicUsize, AtomicU32) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicU32::new(0));
static RECENT: [(AtomicUsize, AtomicUsize, AtomicU32); NRECENT] = [NONE; NRECENT];
static RECENT_NEXT: AtomicUsize = AtomicUsize::new(0);

fn page() -> usize {
    rustix::param::page_size()
}

/// `mprotect` of whole pages; async-signal-safe.
fn protect(start: usize, len: usize, none: bool) -> bool {
    let prot = if none { libc::PROT_NONE } else { libc::PROT_READ | libc::PROT_WRITE };
    // SAFETY: changes the protection of pages of this process that hold a receive buffer
    // of the application (checked `rw-p`/`rw-s` when staged); no Rust reference covers
    // them, and every access the library makes to them is a guarded one (`fault.rs`),
    // which the handler lets through.
    unsafe { libc::mprotect(start as *mut libc::c_void, len, prot) == 0 }
}

fn claim(start: usize, len: usize, id: u64) -> Option<usize> {
    let pid = std::process::id();
    for (i, s) in SLOTS.iter().enumerate() {
        if s.start.compare_exchange(0, CLAIMING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            s.len.store(len, Ordering::Relaxed);
            s.id.store(id, Ordering::Relaxed);
            s.pid.store(pid, Ordering::Relaxed);
            s.start.store(start, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Frees slot `i`, remembering its extent among the recent ones first.
fn free_slot(i: usize) {
    let s = &SLOTS[i];
    let (start, len) = (s.start.load(Ordering::Acquire), s.len.load(Ordering::Relaxed));
    if start > CLAIMING {
        let r = &RECENT[RECENT_NEXT.fetch_add(1, Ordering::Relaxed) % NRECENT];
        r.0.store(0, Ordering::Release);
        r.1.store(len, Ordering::Relaxed);
        r.2.store(0, Ordering::Relaxed);
        r.0.store(start, Ordering::Release);
    }
    let _ = s.start.compare_exchange(start, 0, Ordering::AcqRel, Ordering::Relaxed);
}

// ---- The engine's side ----

/// Set once an on-demand region with remote rights was registered: peers may then reach
/// any page of the process (an implicit region covers them all), and a protected page
/// would fail their access; no receive is staged from then on.
static PEERS_REACH_ANYWHERE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// An on-demand region with remote rights was registered ([`PEERS_REACH_ANYWHERE`]).
pub(crate) fn peers_reach_anywhere() {
    PEERS_REACH_ANYWHERE.store(true, Ordering::Relaxed);
}

/// Whether receives of QP `qpn` may be staged: ibv_query_qp_data_in_order never told the
/// program that SENDs land in order there, and no on-demand region opens every page to
/// peers.
pub(crate) fn may_stage(qpn: Id) -> bool {
    !PEERS_REACH_ANYWHERE.load(Ordering::Relaxed) && with(|st| !st.in_order.contains(&qpn))
}

/// ibv_query_qp_data_in_order answered 1 for a SEND on QP `qpn`.
pub(crate) fn told_in_order(qpn: Id) {
    with(|st| st.in_order.insert(qpn));
}

/// Whether QP `qpn` has staged receives outstanding: its SENDs are then placed late, and
/// ibv_query_qp_data_in_order answers 0 for them.
pub(crate) fn staged_on(qpn: Id) -> bool {
    with(|st| st.entries.values().any(|e| e.qpn == qpn))
}

/// The whole pages inside `[start, end)`, `None` if there is none.
pub(crate) fn whole_pages(start: usize, end: usize) -> Option<(usize, usize)> {
    let p = page();
    let a = start.checked_add(p - 1)? & !(p - 1);
    let b = end & !(p - 1);
    (a < b).then_some((a, b))
}

/// Records a staged receive and protects its extents; returns its id (0: none was
/// watched, the receive is not staged and the caller posts it as it is).
pub(crate) fn stage(s: Stage) -> u64 {
    static HOOKED: std::sync::Once = std::sync::Once::new();
    HOOKED.call_once(|| {
        crate::sys::at_fork(fork_prepare, fork_parent, fork_child);
        crate::fault::set_read_watch(on_fault, reported);
    });
    let at = trace::capture();
    let mut st_guard = state();
    let _busy = super::Busy::enter();
    let st = st_guard.get_or_insert_with(State::default);
    st.next += 1;
    let id = st.next;
    let (mut slots, mut extents) = (Vec::new(), Vec::new());
    for &(a, b) in &s.extents {
        let Some(i) = claim(a, b - a, id) else { continue };
        if !protect(a, b - a, true) {
            free_slot(i);
            continue;
        }
        for pg in (a..b).step_by(page()) {
            *st.pages.entry(pg).or_default() += 1;
        }
        slots.push(i);
        extents.push((a, b));
    }
    if slots.is_empty() {
        return 0;
    }
    st.entries.insert(id, Entry { qpn: s.qpn, wr_id: s.wr_id, sges: s.sges, slots, extents, scatter: Some(s.scatter), dead: Vec::new(), at });
    id
}

/// Gives back the pages of entry `e`: its slots freed, each page whose last watch this
/// was made readable and writable again.
fn release(st: &mut State, slots: Vec<usize>, extents: Vec<(usize, usize)>) {
    for i in slots {
        free_slot(i);
    }
    for (a, b) in extents {
        for pg in (a..b).step_by(page()) {
            if let Some(n) = st.pages.get_mut(&pg) {
                *n -= 1;
                if *n == 0 {
                    st.pages.remove(&pg);
                    protect(pg, page(), false);
                }
            }
        }
    }
}

fn unwatch(st: &mut State, id: u64) {
    let Some(e) = st.entries.get_mut(&id) else { return };
    let (slots, extents) = (std::mem::take(&mut e.slots), std::mem::take(&mut e.extents));
    release(st, slots, extents);
}

/// Pages of other entries overlapping `[a, b)` lose their watch (a miss, never a report
/// of bytes the program may read).
fn unwatch_overlapping(st: &mut State, ranges: &[(usize, usize)]) {
    let p = page();
    let hit: Vec<u64> = st
        .entries
        .iter()
        .filter(|(_, e)| e.extents.iter().any(|&(a, b)| ranges.iter().any(|&(s, t)| (s & !(p - 1)) < b && a < t)))
        .map(|(&id, _)| id)
        .collect();
    for id in hit {
        unwatch(st, id);
    }
}

/// The completion of staged receive `id` was polled: its pages are given back (and those
/// of receives sharing them), then `n` staged bytes are scattered into its buffers.
#[cold]
#[inline(never)]
pub(crate) fn polled(id: u64, n: usize) {
    let Some((scatter, dead)) = with(|st| {
        let ranges: Vec<(usize, usize)> = st.entries.get(&id)?.extents.clone();
        unwatch(st, id);
        unwatch_overlapping(st, &ranges);
        let mut e = st.entries.remove(&id)?;
        Some((e.scatter.take()?, e.dead))
    }) else {
        return;
    };
    scatter(n, &dead);
}

/// Staged receives ended without a completion (RESET, destruction, a refused post):
/// their pages are given back, nothing is scattered, their staging regions freed.
#[cold]
#[inline(never)]
pub(crate) fn discard(ids: &[u64]) {
    let gone: Vec<Entry> = with(|st| {
        ids.iter()
            .filter_map(|&id| {
                unwatch(st, id);
                st.entries.remove(&id)
            })
            .collect()
    });
    drop(gone);
}

/// QP `qpn` was destroyed: what it was told goes with it.
pub(crate) fn qp_gone(qpn: Id) {
    with(|st| st.in_order.remove(&qpn));
}

/// QP `qpn` moved to ERR: no more data will be placed for its receives (they are flushed),
/// so their pages are given back; completions already made still scatter at their poll.
#[cold]
#[inline(never)]
pub(crate) fn qp_failed(qpn: Id) {
    with(|st| {
        let ids: Vec<u64> = st.entries.iter().filter(|(_, e)| e.qpn == qpn).map(|(&id, _)| id).collect();
        for id in ids {
            unwatch(st, id);
        }
    });
}

/// Region `lkey` is being deregistered: staged receives of its device naming it give
/// their pages back, and nothing will be scattered into it.
#[cold]
#[inline(never)]
pub(crate) fn region_gone(lkey: Id) {
    with(|st| {
        let ids: Vec<u64> = st.entries.iter().filter(|(_, e)| e.qpn.slot == lkey.slot && e.sges.iter().any(|s| s.0 == lkey.num)).map(|(&id, _)| id).collect();
        for id in ids {
            unwatch(st, id);
            if let Some(e) = st.entries.get_mut(&id) {
                e.dead.push(lkey.num);
            }
        }
    });
}

/// `[addr, addr+len)` is about to be reached otherwise than through a staged receive (a
/// registration, a receive posted as it is): watched pages there are given back first,
/// since a peer's cross-memory attach or a kernel check of them would fail on a
/// protected page.
#[cold]
#[inline(never)]
pub(crate) fn range_reached(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    with(|st| {
        if !st.entries.is_empty() {
            unwatch_overlapping(st, &[(addr, addr.saturating_add(len))]);
        }
    });
}

/// Whether every page of `[start, end)` is mapped plainly readable and writable
/// (`rw-p` or `rw-s`), which is the protection given back.
pub(crate) fn plain_rw(start: usize, end: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let mut at = start;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if b <= at || a > at {
            continue;
        }
        if !(perms == "rw-p" || perms == "rw-s") {
            return false;
        }
        at = b;
        if at >= end {
            return true;
        }
    }
    false
}

// ---- The fault ----

/// The SIGSEGV handler's part (`fault.rs`): a fault at `addr` on a watched page. A load
/// by the program (not a store, not the library's guarded copy, not a move of the pages
/// by `mr::share`, in the process that staged it, not inside the sanitizer) is to be
/// reported, which [`reported`] does on the thread's own stack; any other fault there gives
/// the page back. Either way the access runs again. Async-signal-safe: atomics and
/// `mprotect`.
pub(crate) fn on_fault(addr: usize, write: bool, guarded: bool) -> crate::fault::WatchSays {
    use crate::fault::WatchSays as Watched;
    let pid = std::process::id();
    for s in &SLOTS {
        let start = s.start.load(Ordering::Acquire);
        if start <= CLAIMING || addr < start || addr - start >= s.len.load(Ordering::Relaxed) {
            continue;
        }
        let id = s.id.load(Ordering::Relaxed);
        let ours = s.pid.load(Ordering::Relaxed) == pid;
        let inside = super::BUSY.try_with(|b| b.get()).unwrap_or(1) != 0;
        if ours && !write && !guarded && !inside && !crate::fault::moving_here() {
            return Watched::Report(id, addr as u64);
        }
        let p = page();
        protect(addr & !(p - 1), p, false);
        return Watched::Again;
    }
    let late = RECENT.iter().any(|r| {
        let s = r.0.load(Ordering::Acquire);
        if s != 0 && addr >= s && addr - s < r.1.load(Ordering::Relaxed) && r.2.fetch_add(1, Ordering::Relaxed) < LATE_RETRIES {
            // SAFETY: sched_yield has no arguments and is async-signal-safe.
            unsafe { libc::sched_yield() };
            return true;
        }
        false
    });
    if late {
        Watched::Again
    } else {
        Watched::NotOurs
    }
}

/// The report of a load at `addr` of the buffer of staged receive `id` (called by the
/// fault's trampoline on the faulting thread's stack, before the load runs again), then
/// its pages given back; the page of `addr` is given back in any case.
fn reported(id: u64, addr: u64) {
    let addr = addr as usize;
    read_early(id, addr);
    let p = page();
    protect(addr & !(p - 1), p, false);
}

/// The report of a load at `addr` of the buffer of staged receive `id`, its pages given
/// back; nothing if the receive ended meanwhile (its pages were given back then).
fn read_early(id: u64, addr: usize) {
    let _busy = super::Busy::enter();
    let read = trace::capture();
    let mut g = state();
    let Some(st) = g.as_mut() else { return };
    let Some(e) = st.entries.get(&id) else { return };
    let (qpn, wr_id, at) = (e.qpn, e.wr_id, e.at.clone());
    let sge = e.sges.iter().find(|s| (addr as u64) >= s.1 && (addr as u64) - s.1 < u64::from(s.2)).copied();
    unwatch(st, id);
    drop(g);
    let (lkey, sa, sl) = sge.unwrap_or((0, addr as u64, 1));
    report::emit(Finding {
        kind: FindingKind::ReadBeforeCompletion,
        device: Some(qpn.slot),
        page: "ibv_query_qp_data_in_order(3), ibv_poll_cq(3)",
        rule: "ibv_query_qp_data_in_order answers 0 for SENDs on this QP, so the data of a receive is guaranteed to be in its buffer only once its completion was polled: a read before may see old bytes, part of the message, or a mix",
        headline: format!(
            "read of {addr:#x} in the buffer [{sa:#x}-{:#x}) of receive work request wr_id {wr_id:#x} on QPN {qpn:#x} before its completion was polled",
            sa.saturating_add(u64::from(sl))
        ),
        objects: vec![
            Object::Qp { qpn: qpn.num, state: None },
            Object::WorkRequest { wr_id, queue: Queue::Recv, num: qpn.num, sge: Some((sa, sl)) },
            Object::Read { addr: addr as u64, lkey },
        ],
        sites: vec![site("read at", &read), site("posted at", &at)],
    });
}

thread_local! {
    /// The tables held by the forking thread from the fork's prepare handler to its
    /// parent or child handler (no child inherits them held by another thread).
    static HELD: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Option<State>>>> = const { std::cell::RefCell::new(None) };
}

extern "C" fn fork_prepare() {
    let g = state();
    HELD.with(|h| *h.borrow_mut() = Some(g));
}

extern "C" fn fork_parent() {
    HELD.with(|h| drop(h.borrow_mut().take()));
}

/// A forked child: the watches are its parent's. Its copies of the pages are made
/// readable and writable again, and the tables forgotten (the staging regions are the
/// parent's: nothing is freed).
extern "C" fn fork_child() {
    let held = HELD.with(|h| h.borrow_mut().take());
    let Some(mut g) = held else { return };
    for (i, s) in SLOTS.iter().enumerate() {
        let (start, len) = (s.start.load(Ordering::Acquire), s.len.load(Ordering::Relaxed));
        if start > CLAIMING {
            protect(start, len, false);
            free_slot(i);
        }
    }
    if let Some(st) = g.take() {
        std::mem::forget(st);
    }
}
