//! The verbs sanitizer (docs/sanitizer.md): checks of the rules the man pages give
//! programs, reported as AddressSanitizer reports memory errors, with the backtraces of
//! where each object involved was made.
//!
//! Switched on per process by `RVERBS_SANITIZE` (`1`: report and continue; `abort`:
//! the first finding is fatal), read once when the first context is opened ([`init`]),
//! or by [`set_mode`] from Rust. Off, every hook of the verbs is `if on() { … }` on one
//! relaxed load of a flag: nothing is tracked, captured, allocated or locked. The public
//! names are re-exported by `rverbs::sanitize`.
//!
//! The hooks take each object as an [`Id`], its device's slot and its number: numbers
//! repeat across the devices of a process, so every table is keyed by both.

pub(crate) mod early;
mod finding;
mod freed;
mod id;
mod report;
mod trace;
mod track;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use rverbs_proto::verbs::QpState;

pub use crate::config::Sanitize as Mode;
pub use finding::{Finding, FindingKind, Frame, Object, Queue, Site};
pub(crate) use track::{Remote, Watched, MAX_WATCHED};
pub(crate) use track::Kind;
pub(crate) use freed::{caller_region, caller_region_gone, released};
pub(crate) use id::Id;

/// The mode before the environment was read.
const UNREAD: u8 = u8::MAX;
static MODE: AtomicU8 = AtomicU8::new(UNREAD);
/// Whether the mode is `Report` or `Abort`: what the hooks test.
static ON: AtomicBool = AtomicBool::new(false);

fn encode(m: Mode) -> u8 {
    match m {
        Mode::Off => 0,
        Mode::Report => 1,
        Mode::Abort => 2,
    }
}

/// Whether the sanitizer is on: the hooks' one test, a relaxed load. Every hooked verb
/// runs on a context, and [`init`] ran when it was opened.
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Reads `RVERBS_SANITIZE` once, unless [`set_mode`] came first: called when a context
/// is opened (`Context::open`), before any object can be made.
pub(crate) fn init() {
    if MODE.load(Ordering::Relaxed) == UNREAD {
        read_env();
    }
}

#[cold]
fn read_env() {
    let m = crate::config::sanitize_from(std::env::var_os("RVERBS_SANITIZE").as_deref());
    // A mode set from Rust meanwhile wins.
    if MODE.compare_exchange(UNREAD, encode(m), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        if m != Mode::Off {
            track::guard_forks();
        }
        ON.store(m != Mode::Off, Ordering::Relaxed);
    }
}

/// Switches the sanitizer for this process, overriding `RVERBS_SANITIZE`.
///
/// Rule: docs/sanitizer.md, "Switching it on": set it before the first device is opened;
/// objects made and work requests posted while it was off are not tracked, so a finding
/// about them can be missed (never made up).
pub fn set_mode(mode: Mode) {
    MODE.store(encode(mode), Ordering::Relaxed);
    if mode != Mode::Off {
        track::guard_forks();
    }
    ON.store(mode != Mode::Off, Ordering::Relaxed);
}

/// The mode in force (`RVERBS_SANITIZE`, or the last [`set_mode`]).
pub fn mode() -> Mode {
    init();
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Report,
        2 => Mode::Abort,
        _ => Mode::Off,
    }
}

/// The findings reported since the last call, oldest first: the report of each was
/// printed already (docs/sanitizer.md, "From Rust").
pub fn take_findings() -> Vec<Finding> {
    report::take()
}

/// The leak-at-exit finding for the objects of this process alive now, as the report
/// at exit would list them (`None` if none is); nothing is printed or recorded.
pub fn leaks() -> Option<Finding> {
    leak_finding(survivors(&track::state()))
}

fn site(label: impl Into<String>, at: &trace::Trace) -> Site {
    Site { label: label.into(), frames: trace::frames(at) }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Context => "context",
        Kind::Pd => "pd",
        Kind::Mr => "mr",
        Kind::Cq => "cq",
        Kind::Qp => "qp",
        Kind::Srq => "srq",
        Kind::CompChannel => "completion channel",
    }
}

// ---- Object lifetimes (leak-at-exit) ----

std::thread_local! {
    /// Set while the library makes objects of its own ([`internal`]).
    static INTERNAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, whose objects are the library's own, kept for the life of the process (the
/// connection manager's context and PD, as librdmacm keeps its devices' open): not
/// tracked, so never reported as leaks (docs/sanitizer.md, "Findings").
pub fn internal<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            INTERNAL.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(INTERNAL.with(|c| c.replace(true)));
    f()
}

/// An object was made: its creation site is kept until [`gone`]. The first registers
/// the report at exit.
#[cold]
#[inline(never)]
pub(crate) fn created(kind: Kind, id: Id, object: Option<Object>) {
    if INTERNAL.with(|c| c.get()) {
        return;
    }
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| crate::sys::at_exit(exit_report));
    let at = trace::capture();
    let object = object.unwrap_or_else(|| kind.object(id.num));
    track::state().live.insert((kind, id), track::Live { object, pid: std::process::id(), at });
}

/// An object was destroyed (or its last handle dropped): what was kept about it goes.
#[cold]
#[inline(never)]
pub(crate) fn gone(kind: Kind, id: Id) {
    if kind == Kind::Qp {
        // Before the tables' lock: the staging's lock is never taken under it (a fork
        // takes the staging's, then the tables').
        early::qp_gone(id);
    }
    let mut st = track::state();
    st.live.remove(&(kind, id));
    if kind == Kind::Mr {
        st.caller_mrs.remove(&id);
        freed::counted(&st);
    }
    st.events.remove(&(false, kind, id));
    st.events.remove(&(true, kind, id));
    match kind {
        Kind::Srq => {
            st.queues.remove(&(Queue::SharedRecv, id));
            st.demand.retain(|&(_, q, n), _| !(q == Queue::SharedRecv && n == id));
        }
        Kind::Qp => {
            st.filled.remove(&id);
            st.history.remove(&id);
            st.qp_srq.remove(&id);
            st.demand.retain(|&(_, q, n), _| !(q != Queue::SharedRecv && n == id));
        }
        Kind::Cq => {
            st.cqs.remove(&id);
            st.demand.retain(|&(cq, _, _), _| cq != id);
            st.batches.retain(|&(cq, _), _| cq != id);
            st.shared.remove(&id);
            st.armed.remove(&id);
            st.fields.retain(|&(cq, _)| cq != id);
        }
        _ => {}
    }
}

/// The objects this process made that are alive, with their creation sites (taken
/// under the lock; symbolized after it).
fn survivors(st: &track::State) -> Vec<(Object, usize, trace::Trace)> {
    let pid = std::process::id();
    st.live.iter().filter(|(_, l)| l.pid == pid).map(|(&(_, id), l)| (l.object.clone(), id.slot, l.at.clone())).collect()
}

fn leak_finding(alive: Vec<(Object, usize, trace::Trace)>) -> Option<Finding> {
    if alive.is_empty() {
        return None;
    }
    let sites = alive.iter().map(|(o, slot, at)| site(format!("{}{} created at", report::describe(o), report::on_device(Some(*slot))), at)).collect();
    Some(Finding {
        kind: FindingKind::LeakAtExit,
        device: None,
        page: "ibv_open_device(3)",
        rule: "every object a program creates is destroyed by it (ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_cq, ibv_destroy_qp, ibv_destroy_srq, ibv_destroy_comp_channel, ibv_close_device); what is alive at exit was leaked",
        headline: format!("{} object(s) still alive at exit", alive.len()),
        objects: alive.into_iter().map(|(o, ..)| o).collect(),
        sites,
    })
}

/// The report at exit (atexit(3)): never panics, never waits for ever for the lock.
extern "C" fn exit_report() {
    let _ = std::panic::catch_unwind(|| {
        if !on() {
            return;
        }
        let Some(st) = track::try_state() else {
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("=={}==RVERBS SANITIZER: leak check skipped: the tracking tables are held by a thread that did not finish\n", std::process::id()).as_bytes());
            return;
        };
        let alive = survivors(&st);
        drop(st);
        if let Some(f) = leak_finding(alive) {
            report::emit(f);
        }
    });
}

// ---- Work requests (dereg-mr-in-use) ----

pub(crate) use track::Wr;

/// The work requests one post recorded: sequence numbers `first..first + count` (plain
/// data, so the post path carries no drop).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    first: u64,
    count: usize,
}

/// Work requests about to be posted to `queue` `num`; returns the ticket for
/// [`unposted`].
#[cold]
#[inline(never)]
pub(crate) fn posting(queue: Queue, num: Id, wrs: Vec<Wr>) -> Ticket {
    let at = trace::capture();
    let count = wrs.len();
    let mut st = track::state();
    let first = st.post(queue, num, wrs, &at);
    // cq-too-small is reported at the first post that can lead to the overrun (a QP made
    // only to probe the device, never posted to, is no finding).
    let over: Vec<(Id, (u32, Vec<track::Depth>))> = st.cqs_fed_by(queue, num).into_iter().filter_map(|cq| Some((cq, st.overcommitted(cq)?))).collect();
    drop(st);
    for (cq, (cqe, queues)) in over {
        cq_too_small(queue.post_verb(), cq, cqe, queues);
    }
    Ticket { first, count }
}

/// The post refused the work requests from `index` on (`PostError::index`).
#[cold]
#[inline(never)]
pub(crate) fn unposted(queue: Queue, num: Id, ticket: Ticket, index: usize) {
    if index < ticket.count {
        track::state().unpost(queue, num, ticket.first + index as u64..ticket.first + ticket.count as u64);
    }
}

/// A completion was polled (`ibv_poll_cq`, `ibv_start_poll`/`ibv_next_poll`): the
/// send requests it released are checked for changed buffers after the lock is left.
#[cold]
#[inline(never)]
pub(crate) fn completed(qpn: Id, wr_id: u64, ok: bool, recv: bool, bytes: usize) {
    let (released, staged) = track::state().complete(qpn, wr_id, ok, recv);
    if staged != 0 {
        early::polled(staged, bytes);
    }
    for p in released {
        if let Some(w) = p.watched.iter().find(|w| w.changed()) {
            buffer_changed(qpn, &p, w);
        }
    }
}

/// The bytes of watched SGE `w` of send request `p` of QP `qpn` changed between its
/// post and the poll of the completion that released it (send-buffer-changed).
fn buffer_changed(qpn: Id, p: &track::Posted, w: &track::Watched) {
    let registered = track::state().live.get(&(Kind::Mr, qpn.with(w.lkey))).map(|l| l.at.clone());
    let mut sites = vec![site("posted at", &p.at), site("completion polled at", &trace::capture())];
    if let Some(r) = registered {
        sites.push(site("mr registered at", &r));
    }
    let (wr_id, end) = (p.wr_id, w.iova.saturating_add(u64::from(w.len)));
    report::emit(Finding {
        kind: FindingKind::SendBufferChanged,
        device: Some(qpn.slot),
        page: "ibv_post_send(3)",
        rule: "the buffers used by a work request can only be safely reused after the request is fully executed and a work completion has been retrieved from the CQ (NOTES; with IBV_SEND_INLINE at once): bytes changed meanwhile may be sent as they were, as they are, or mixed",
        headline: format!("the buffer [{:#x}-{end:#x}) of work request wr_id {wr_id:#x} on QPN {qpn:#x} (send queue) changed before its completion was polled", w.iova),
        objects: vec![
            Object::Mr { lkey: w.lkey, addr: w.region.0, len: w.region.1 },
            Object::WorkRequest { wr_id, queue: Queue::Send, num: qpn.num, sge: Some((w.iova, w.len)) },
        ],
        sites,
    });
}

/// The live regions over caller memory (of any device of the process) that overlap
/// `[start, end)`: (device and lkey, first byte, length).
pub(crate) fn caller_regions_over(start: usize, end: usize) -> Vec<(Id, u64, u64)> {
    let (start, end) = (start as u64, end as u64);
    track::state().caller_mrs.iter().filter(|(_, &(a, l))| a < end && start < a.saturating_add(l)).map(|(&k, &(a, l))| (k, a, l)).collect()
}

/// Whether QP `qpn` is alive as the tracking knows it (created with the sanitizer on,
/// not destroyed yet).
pub(crate) fn qp_alive(qpn: Id) -> bool {
    track::state().live.contains_key(&(Kind::Qp, qpn))
}

/// QP `qpn` takes its receives from SRQ `srqn`.
#[cold]
#[inline(never)]
pub(crate) fn qp_uses_srq(qpn: Id, srqn: Id) {
    track::state().qp_srq.insert(qpn, srqn);
}

/// `ibv_dereg_mr` of the region `lkey` covering `[addr, addr+len)`: a finding if an
/// outstanding work request names it (dereg-mr-in-use), or if its memory was unmapped
/// while registered (not for an on-demand region, `odp`, whose pages may come and go).
#[cold]
#[inline(never)]
pub(crate) fn dereg(lkey: Id, addr: u64, len: u64, odp: bool) {
    early::region_gone(lkey);
    mr_in_use(false, lkey, addr, len);
    if odp {
        track::state().unmapped.remove(&lkey);
        return;
    }
    if let Some(first) = crate::sys::first_unmapped(addr as usize, len as usize) {
        memory_unmapped("ibv_dereg_mr", lkey, (addr, len), first, None);
    }
    // The key may name a new region from now on.
    track::state().unmapped.remove(&lkey);
}

/// The memory of region `lkey` (`region`: its first byte and length in this process) is
/// not mapped from page `first` on, found by `verb` (the post of work request `wr` that
/// names it, or the deregistration): mr-memory-unmapped, once per region.
#[cold]
#[inline(never)]
pub(crate) fn memory_unmapped(verb: &'static str, lkey: Id, region: (u64, u64), first: usize, wr: Option<(Queue, u32, u64)>) {
    let mut st = track::state();
    if !st.unmapped.insert(lkey) {
        return;
    }
    let registered = st.live.get(&(Kind::Mr, lkey)).map(|l| l.at.clone());
    drop(st);
    let label = if wr.is_some() { "posted at" } else { "deregistered at" };
    let mut sites = vec![site(label, &trace::capture())];
    if let Some(r) = registered {
        sites.push(site("mr registered at", &r));
    }
    let (addr, len) = region;
    let mut objects = vec![Object::Mr { lkey: lkey.num, addr, len }];
    let by = match wr {
        Some((queue, num, wr_id)) => {
            objects.push(Object::WorkRequest { wr_id, queue, num, sge: None });
            format!("{verb} of work request wr_id {wr_id:#x} to {}", queue.describe())
        }
        None => verb.to_string(),
    };
    report::emit(Finding {
        kind: FindingKind::MrMemoryUnmapped,
        device: Some(lkey.slot),
        page: "ibv_reg_mr(3)",
        rule: "a registered region's memory stays mapped until ibv_dereg_mr: a NIC pins its pages and keeps their translation for the whole registration, so after munmap (or a free that returns the pages to the system) it still reads and writes the old pages, where the program no longer sees them (rverbs fails such an access instead: IBV_WC_LOC_PROT_ERR, or a remote access error for a peer; docs/memory.md)",
        headline: format!(
            "the memory of mr lkey {lkey:#x} [{addr:#x}-{:#x}) is not mapped from {first:#x} on, while the region is registered ({by})",
            addr.saturating_add(len)
        ),
        objects,
        sites,
    });
}

// ---- mr-memory-freed: heap blocks released under a registered region ----

std::thread_local! {
    /// How deep this thread is in the sanitizer's own code (its tables' lock held, a
    /// backtrace, a report): a block freed meanwhile is not checked, since the check
    /// would take those locks again.
    pub(super) static BUSY: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// This thread inside the sanitizer's own code while the value lives ([`released`]).
pub(crate) struct Busy(());

impl Busy {
    pub(crate) fn enter() -> Busy {
        let _ = BUSY.try_with(|b| b.set(b.get() + 1));
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(b.get().saturating_sub(1)));
    }
}

/// `ibv_rereg_mr` changing the translation or the PD of the region `lkey` covering
/// `[addr, addr+len)`: a finding if an outstanding work request names it
/// (rereg-mr-in-use). ibv_rereg_mr(3): "conceptually, this call performs the functions
/// deregister memory region followed by register memory region".
#[cold]
#[inline(never)]
pub(crate) fn rereg(lkey: Id, addr: u64, len: u64) {
    early::region_gone(lkey);
    mr_in_use(true, lkey, addr, len);
}

fn mr_in_use(rereg: bool, lkey: Id, addr: u64, len: u64) {
    let st = track::state();
    let Some((queue, num, p, sge)) = st.user_of(lkey) else { return };
    let (wr_id, posted) = (p.wr_id, p.at.clone());
    let registered = st.live.get(&(Kind::Mr, lkey)).map(|l| l.at.clone());
    drop(st);
    let label = if rereg { "re-registered at" } else { "deregistered at" };
    let mut sites = vec![site("posted at", &posted), site(label, &trace::capture())];
    if let Some(r) = registered {
        sites.push(site("mr registered at", &r));
    }
    let qp = if queue == Queue::SharedRecv { format!("SRQ {num:#x}") } else { format!("QPN {num:#x}") };
    let (kind, page, rule, verb) = if rereg {
        (
            FindingKind::ReregMrInUse,
            "ibv_rereg_mr(3)",
            "ibv_rereg_mr conceptually deregisters the region and registers it again: with IBV_REREG_MR_CHANGE_TRANSLATION or IBV_REREG_MR_CHANGE_PD it moves the region's memory or protection domain, so, as for ibv_dereg_mr, the buffers of a work request naming it may be changed only once the request has fully executed and its completion was retrieved from the CQ (ibv_post_send(3), ibv_post_recv(3), NOTES)",
            "ibv_rereg_mr (changing translation or PD)",
        )
    } else {
        (
            FindingKind::DeregMrInUse,
            "ibv_dereg_mr(3)",
            "the buffers of a work request may be reused only once it has fully executed and its completion was retrieved from the CQ (ibv_post_send(3), ibv_post_recv(3), NOTES): deregistering their region before then takes them from the device while it may still use them",
            "ibv_dereg_mr",
        )
    };
    report::emit(Finding {
        kind,
        device: Some(lkey.slot),
        page,
        rule,
        headline: format!("{verb} of mr lkey {lkey:#x} while work request wr_id {wr_id:#x} on {qp} ({}) uses it", queue.describe()),
        objects: vec![Object::Mr { lkey: lkey.num, addr, len }, Object::WorkRequest { wr_id, queue, num: num.num, sge: Some(sge) }],
        sites,
    });
}

/// `ibv_dealloc_mw` of the window at `mw` (its `MwInner`'s address), of rkey `rkey`: a
/// finding if an outstanding BIND_MW work request binds it (dealloc-mw-in-use).
#[cold]
#[inline(never)]
pub(crate) fn dealloc_mw(mw: usize, rkey: u32) {
    let st = track::state();
    let Some((qpn, p)) = st.binder_of(mw) else { return };
    let (wr_id, posted) = (p.wr_id, p.at.clone());
    drop(st);
    report::emit(Finding {
        kind: FindingKind::DeallocMwInUse,
        device: Some(qpn.slot),
        page: "ibv_dealloc_mw(3)",
        rule: "a bind (ibv_bind_mw(3), or an IBV_WR_BIND_MW work request, ibv_post_send(3)) is a work request on the send queue: it has executed only once its completion was retrieved from the CQ (an unsignaled one: a later completion of its send queue); deallocating the window before then takes from the device the object the bind is still changing, and the rkey the bind returned may never have been valid",
        headline: format!("ibv_dealloc_mw of mw rkey {rkey:#x} while the bind work request wr_id {wr_id:#x} on QPN {qpn:#x} (send queue) is outstanding"),
        objects: vec![Object::Mw { rkey }, Object::WorkRequest { wr_id, queue: Queue::Send, num: qpn.num, sge: None }],
        sites: vec![site("bind posted at", &posted), site("deallocated at", &trace::capture())],
    });
}

/// `ibv_destroy_qp` of QP `qpn` in `state`, before its queues are discarded, while the
/// device still holds the send requests `unfinished` (their wr_ids, oldest first): a
/// finding if there is one (destroy-qp-in-use). Requests the device finished, whose
/// completions wait in the CQ unpolled, are not: the device is done with them (a flushed
/// one too). Receives are not asked: a QP destroyed with receives posted is what every
/// server does (docs/sanitizer.md, destroy-qp-in-use).
#[cold]
#[inline(never)]
pub(crate) fn destroying_qp(qpn: Id, state: QpState, unfinished: &[u64]) {
    let Some(&wr_id) = unfinished.first() else { return };
    let st = track::state();
    let first = st.first_unfinished(qpn, unfinished).map(|p| (p.signaled, p.at.clone()));
    let created = st.live.get(&(Kind::Qp, qpn)).map(|l| l.at.clone());
    drop(st);
    let mut sites = vec![site("ibv_destroy_qp called at", &trace::capture())];
    if let Some((_, posted)) = &first {
        sites.push(site("posted at", posted));
    }
    if let Some(c) = created {
        sites.push(site(format!("qp QPN {qpn:#x} created at"), &c));
    }
    let which = match first {
        Some((true, _)) => ", signaled",
        Some((false, _)) => ", unsignaled",
        None => "",
    };
    let count = unfinished.len();
    report::emit(Finding {
        kind: FindingKind::DestroyQpInUse,
        device: Some(qpn.slot),
        page: "ibv_destroy_qp(3)",
        rule: "a send work request is outstanding from its post until its completion is retrieved from the CQ, and its buffers are the device's until then (ibv_post_send(3), NOTES); destroying the QP discards the requests the device has not finished without completions: the messages may never be sent, and the program cannot know. Wait for their completions (or move the QP to ERR, which flushes them with completions) before ibv_destroy_qp; receives still posted at destroy are normal and not reported",
        headline: format!("ibv_destroy_qp of QPN {qpn:#x} while the device has not finished {count} send work request(s) (the first: wr_id {wr_id:#x}{which}): they are discarded without completions"),
        objects: vec![Object::Qp { qpn: qpn.num, state: Some(state) }, Object::WorkRequest { wr_id, queue: Queue::Send, num: qpn.num, sge: None }],
        sites,
    });
}

/// `read` (`ibv_wc_read_*`) of CQ `cq`, created with `wc_flags`, read the field that
/// `bit` (`flag`) requests, which those flags lack (wc-field-not-requested); once per CQ
/// and field.
#[cold]
#[inline(never)]
pub(crate) fn field_not_requested(cq: Id, wc_flags: u64, bit: u64, read: &'static str, flag: &'static str) {
    let mut st = track::state();
    if !st.fields.insert((cq, bit)) {
        return;
    }
    let created = st.live.get(&(Kind::Cq, cq)).map(|l| l.at.clone());
    drop(st);
    let mut sites = vec![site(format!("{read} called at"), &trace::capture())];
    if let Some(c) = created {
        sites.push(site(format!("cq {cq} created at"), &c));
    }
    report::emit(Finding {
        kind: FindingKind::WcFieldNotRequested,
        device: Some(cq.slot),
        page: "ibv_create_cq_ex(3)",
        rule: "only the fields the user requested via wc_flags in ibv_create_cq_ex can be queried (wr_id, status, opcode, vendor_err and wc_flags always can): a provider fills only the requested fields, so another field read is undefined (rverbs returns the field, a NIC's provider what its CQE holds or nothing)",
        headline: format!("{read} of cq {cq}, created without {flag} in its wc_flags"),
        objects: vec![Object::WcField { cq: cq.num, read, flag, wc_flags }],
        sites,
    });
}

// ---- Events (unacked-cq-events, unacked-async-events) ----

/// An event about object `id` of `kind` was handed to the application.
#[cold]
#[inline(never)]
pub(crate) fn event_obtained(asynchronous: bool, kind: Kind, id: Id) {
    let at = trace::capture();
    track::state().events.insert((asynchronous, kind, id), at);
}

/// `verb` destroys object `id` of `kind` with `unacked` events about it not
/// acknowledged: reported before the verb starts waiting for the acknowledgements.
#[cold]
#[inline(never)]
pub(crate) fn unacked(asynchronous: bool, kind: Kind, id: Id, unacked: u64, verb: &'static str) {
    let st = track::state();
    let last = st.events.get(&(asynchronous, kind, id)).cloned();
    let created = st.live.get(&(kind, id)).map(|l| l.at.clone());
    drop(st);
    let what = kind_name(kind);
    let mut sites = vec![site(format!("{verb} called at"), &trace::capture())];
    if let Some(c) = created {
        sites.push(site(format!("{what} created at"), &c));
    }
    if let Some(l) = last {
        sites.push(site("last unacknowledged event obtained at", &l));
    }
    let (fkind, page, rule, ack) = if asynchronous {
        (FindingKind::UnackedAsyncEvents, "ibv_get_async_event(3)", "every event ibv_get_async_event returns must be acknowledged with ibv_ack_async_event; destroying the object an event names waits until all are", "ibv_ack_async_event")
    } else {
        (FindingKind::UnackedCqEvents, "ibv_get_cq_event(3)", "all completion events ibv_get_cq_event returns must be acknowledged with ibv_ack_cq_events; destroying a CQ waits for all its completion events to be acknowledged", "ibv_ack_cq_events")
    };
    report::emit(Finding {
        kind: fkind,
        device: Some(id.slot),
        page,
        rule,
        headline: format!("{verb} of {} with {unacked} event(s) not acknowledged: it waits for {ack} for ever", report::describe(&kind.object(id.num))),
        objects: vec![kind.object(id.num), Object::Events { unacked }],
        sites,
    });
}

// ---- QP states (post-in-bad-state) ----

/// A transition of QP `qpn` (`QpRecord::transition`), with its cause.
#[cold]
#[inline(never)]
pub(crate) fn transition(qpn: Id, from: QpState, to: QpState, cause: &'static str) {
    let at = trace::capture();
    let staged = track::state().transition(qpn, track::Step { from, to, cause, at });
    early::discard(&staged);
    if to == QpState::Err {
        early::qp_failed(qpn);
    }
}

/// A transition of QP `qpn` of another endpoint, made by this process (a responder fault,
/// `transport::target`): recorded as [`transition`] for the QP of this process with that
/// number when exactly one of its devices has one (a QP of another process has none here;
/// QPNs repeat only across runtime directories, and then nothing is recorded).
#[cold]
#[inline(never)]
pub(crate) fn peer_transition(qpn: u32, from: QpState, to: QpState, cause: &'static str) {
    let ids: Vec<Id> = track::state().live.keys().filter(|&&(k, id)| k == Kind::Qp && id.num == qpn).map(|&(_, id)| id).collect();
    if let [id] = ids[..] {
        transition(id, from, to, cause);
    }
}

fn step_text(s: &track::Step) -> String {
    if s.cause == "created" {
        format!("created in {:?}", s.to)
    } else {
        format!("{:?} -> {:?} ({})", s.from, s.to, s.cause)
    }
}

/// `verb` posted to `queue` of QP `qpn` in `state`, which cannot execute it.
#[cold]
#[inline(never)]
pub(crate) fn bad_state_post(verb: &'static str, queue: Queue, qpn: Id, state: QpState, wr_id: Option<u64>) {
    let st = track::state();
    let history: Vec<(String, trace::Trace)> = st
        .history
        .get(&qpn)
        .map(|h| h.iter().map(|s| (step_text(s), s.at.clone())).collect())
        .unwrap_or_default();
    drop(st);
    let mut sites = vec![site(format!("{verb} called at"), &trace::capture())];
    for (i, (what, at)) in history.iter().enumerate() {
        sites.push(site(format!("state change {}: {what}, at", i + 1), at));
    }
    let (page, rule) = match queue {
        Queue::Send => ("ibv_modify_qp(3)", "a QP executes send work requests once it is in RTS (Reset --> Init --> RTR --> RTS); in RESET, INIT or RTR ibv_post_send is an error (rdma-core's rxe refuses it with EINVAL)"),
        _ => ("ibv_modify_qp(3)", "a QP takes receive work requests once it is in INIT; in RESET ibv_post_recv is an error (rdma-core's rxe refuses it with EINVAL)"),
    };
    let mut objects = vec![Object::Qp { qpn: qpn.num, state: Some(state) }];
    if let Some(wr_id) = wr_id {
        objects.push(Object::WorkRequest { wr_id, queue, num: qpn.num, sge: None });
    }
    report::emit(Finding {
        kind: FindingKind::PostInBadState,
        device: Some(qpn.slot),
        page,
        rule,
        headline: format!("{verb} to QPN {qpn:#x} in state {state:?}, which cannot execute it"),
        objects,
        sites,
    });
}

// ---- CQ sizes (cq-too-small) ----

/// CQ `id` was created (or resized, `resized`) to hold `cqe` completions; one created
/// with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN (`ignore_overrun`) is never reported. A
/// resize to a smaller size checks the CQ again.
#[cold]
#[inline(never)]
pub(crate) fn cq_sized(id: Id, cqe: u32, ignore_overrun: bool, resized: bool) {
    let mut st = track::state();
    let smaller = match st.cqs.get_mut(&id) {
        Some(c) if resized => {
            let smaller = cqe < c.cqe;
            c.cqe = cqe;
            smaller
        }
        Some(_) => false,
        None if resized => return,
        None => {
            st.cqs.insert(id, track::CqSize { cqe, ignore_overrun, reported: false });
            false
        }
    };
    if smaller {
        let over = st.overcommitted(id);
        drop(st);
        if let Some((cqe, queues)) = over {
            cq_too_small("ibv_resize_cq", id, cqe, queues);
        }
    }
}

/// Queues of the device in slot `slot` that complete to CQs of it were made (a QP's send
/// and receive queues, an XRC SRQ): each `(cq, queue, num, depth)`, a depth of 0 for none. The CQs they complete to are
/// checked at their first post ([`posting`]): a QP made only to probe what the device
/// grants (libfabric's `fi_getinfo` makes some on one-entry CQs) can overrun nothing.
#[cold]
#[inline(never)]
pub(crate) fn completes_to(slot: usize, queues: &[(u32, Queue, u32, u32)]) {
    let mut st = track::state();
    for &(cq, queue, num, depth) in queues {
        if depth > 0 {
            st.demand.insert((Id::new(slot, cq), queue, Id::new(slot, num)), depth);
        }
    }
}

/// The queues `queues` completing to CQ `cq` of `cqe` entries can have more work
/// outstanding than it holds.
fn cq_too_small(verb: &'static str, cq: Id, cqe: u32, queues: Vec<track::Depth>) {
    let demand: u64 = queues.iter().map(|&(_, _, d)| u64::from(d)).sum();
    let st = track::state();
    let created = st.live.get(&(Kind::Cq, cq)).map(|l| l.at.clone());
    let mut owners: Vec<(Kind, Id)> = queues.iter().map(|&(q, n, _)| (if q == Queue::SharedRecv { Kind::Srq } else { Kind::Qp }, cq.with(n))).collect();
    owners.sort();
    owners.dedup();
    let made: Vec<(Kind, Id, trace::Trace)> = owners.iter().filter_map(|&(k, n)| st.live.get(&(k, n)).map(|l| (k, n, l.at.clone()))).collect();
    drop(st);
    let mut sites = vec![site(format!("{verb} called at"), &trace::capture())];
    if let Some(c) = created {
        sites.push(site(format!("cq {cq} created at"), &c));
    }
    for (k, n, at) in &made {
        sites.push(site(format!("{} created at", report::describe(&k.object(n.num))), at));
    }
    let mut objects = vec![Object::CqCapacity { id: cq.num, cqe, demand }];
    objects.extend(queues.into_iter().map(|(queue, num, depth)| Object::QueueDepth { queue, num, depth }));
    report::emit(Finding {
        kind: FindingKind::CqTooSmall,
        device: Some(cq.slot),
        page: "ibv_create_cq(3)",
        rule: "a CQ must hold every completion the application may have to poll: the completions its queues can have outstanding (max_recv_wr of the QPs it is the receive CQ of without an SRQ, max_wr of the XRC SRQs completing to it, and max_send_wr of the QPs it is the send CQ of that signal every send, sq_sig_all) must fit in its cqe entries; an overrun is an error that moves the QPs to the error state (ibv_create_cq_ex(3), IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: an application must be designed to avoid ever overflowing the CQ; docs/completion-queues.md)",
        headline: format!("cq {cq} holds {cqe} completions, but the queues completing to it can have {demand} completing work requests outstanding"),
        objects,
        sites,
    });
}

// ---- Polling (cq-poll-unfinished, single-threaded-cq-shared) ----

/// A number naming the calling thread, never 0 (the CQs' poller markers hold it).
pub(crate) fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    std::thread_local! {
        static TOKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    TOKEN.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

const BATCH_RULE: &str = "after ibv_start_poll returns 0, ibv_end_poll must be called once the completions are processed, before the next ibv_start_poll and before the CQ is destroyed (the provider holds the CQ's lock from start_poll to end_poll: a second start_poll of the same thread waits for ever on rdma-core's providers)";

/// `verb` (`ibv_start_poll`, `ibv_destroy_cq`) of CQ `cq` by thread `me`: a finding if
/// a batch of this thread (for `ibv_destroy_cq`, of any thread) is open. Reported
/// before the verb takes the CQ's lock.
#[cold]
#[inline(never)]
pub(crate) fn batch_starting(verb: &'static str, cq: Id, me: Option<u64>) {
    let st = track::state();
    let open = match me {
        Some(t) => st.batches.get(&(cq, t)).cloned(),
        None => st.batches.range((cq, 0)..=(cq, u64::MAX)).next().map(|(_, at)| at.clone()),
    };
    let Some(started) = open else { return };
    let created = st.live.get(&(Kind::Cq, cq)).map(|l| l.at.clone());
    drop(st);
    let mut sites = vec![site(format!("{verb} called at"), &trace::capture()), site("unfinished poll started at", &started)];
    if let Some(c) = created {
        sites.push(site(format!("cq {cq} created at"), &c));
    }
    report::emit(Finding {
        kind: FindingKind::CqPollUnfinished,
        device: Some(cq.slot),
        page: "ibv_create_cq_ex(3)",
        rule: BATCH_RULE,
        headline: format!("{verb} of cq {cq} while a batch ibv_start_poll opened was not ended with ibv_end_poll"),
        objects: vec![Object::Cq { id: cq.num }],
        sites,
    });
}

/// `ibv_start_poll` of thread `me` opened a batch on CQ `cq`.
#[cold]
#[inline(never)]
pub(crate) fn batch_opened(cq: Id, me: u64) {
    let at = trace::capture();
    track::state().batches.insert((cq, me), at);
}

/// `ibv_end_poll` of thread `me` on CQ `cq`: its batch ends (one another thread opened
/// if this one has none: the provider's lock is released whoever calls).
#[cold]
#[inline(never)]
pub(crate) fn batch_ended(cq: Id, me: u64) {
    let mut st = track::state();
    if st.batches.remove(&(cq, me)).is_none() {
        st.batches.retain(|&(c, _), _| c != cq);
    }
}

/// Thread `me` entered a poll of SINGLE_THREADED CQ `cq` while thread `other` was
/// inside one (single-threaded-cq-shared); reported once per CQ.
#[cold]
#[inline(never)]
pub(crate) fn shared_poll(verb: &'static str, cq: Id, other: u64) {
    let mut st = track::state();
    if !st.shared.insert(cq) {
        return;
    }
    let theirs = st.batches.get(&(cq, other)).cloned();
    let created = st.live.get(&(Kind::Cq, cq)).map(|l| l.at.clone());
    drop(st);
    let mut sites = vec![site(format!("{verb} called at"), &trace::capture())];
    if let Some(t) = theirs {
        sites.push(site("the other thread's poll started at", &t));
    }
    if let Some(c) = created {
        sites.push(site(format!("cq {cq} created at"), &c));
    }
    report::emit(Finding {
        kind: FindingKind::SingleThreadedCqShared,
        device: Some(cq.slot),
        page: "ibv_create_cq_ex(3)",
        rule: "IBV_CREATE_CQ_ATTR_SINGLE_THREADED: the CQ is accessed from a single thread, so the provider takes no lock: two threads polling it at once corrupt its state (completions lost, returned twice, or torn)",
        headline: format!("{verb} of single-threaded cq {cq} while another thread is inside a poll of it"),
        objects: vec![Object::Cq { id: cq.num }],
        sites,
    });
}

// ---- Notification (lost-wakeup) ----

/// CQ `cq`, reporting to completion channel `channel`, is armed while it holds `held`
/// completions (counted before the arming).
#[cold]
#[inline(never)]
pub(crate) fn armed_holding(cq: Id, channel: Id, held: usize) {
    let at = trace::capture();
    track::state().armed.insert(cq, track::Armed { channel, held, at });
}

/// CQ `cq` was polled (or armed empty) after an arming that held completions.
#[cold]
#[inline(never)]
pub(crate) fn polled_after_arming(cq: Id) {
    track::state().armed.remove(&cq);
}

/// `ibv_get_cq_event` on completion channel `channel`, before it waits: a finding for
/// each CQ of the channel armed while it held completions and not polled since (once
/// per such arming).
#[cold]
#[inline(never)]
pub(crate) fn waiting_for_event(channel: Id) {
    let mut st = track::state();
    let cqs: Vec<Id> = st.armed.iter().filter(|(_, a)| a.channel == channel).map(|(&cq, _)| cq).collect();
    let mut found = Vec::new();
    for cq in cqs {
        if let Some(a) = st.armed.remove(&cq) {
            let created = st.live.get(&(Kind::Cq, cq)).map(|l| l.at.clone());
            found.push((cq, a, created));
        }
    }
    drop(st);
    for (cq, a, created) in found {
        let mut sites = vec![site("ibv_get_cq_event called at", &trace::capture()), site(format!("cq {cq} armed at"), &a.at)];
        if let Some(c) = created {
            sites.push(site(format!("cq {cq} created at"), &c));
        }
        report::emit(Finding {
            kind: FindingKind::LostWakeup,
            device: Some(cq.slot),
            page: "ibv_get_cq_event(3)",
            rule: "ibv_req_notify_cq arms the CQ for the next completion: completions already in the CQ raise no event, so after arming the CQ must be polled again (the man page's example: arm, then poll) before waiting for an event",
            headline: format!("ibv_get_cq_event on completion channel {channel} while cq {cq} was armed holding {} completion(s) and not polled since: they raise no event", a.held),
            objects: vec![Object::CompChannel { id: channel.num }, Object::Cq { id: cq.num }],
            sites,
        });
    }
}
// ---- Send queues (unsignaled-fill) ----

/// A post to the send queue of QP `qpn` of depth `depth` (`max_send_wr`) is about to
/// run: a finding if the queue holds `depth` outstanding requests already, none of them
/// signaled, so that no slot is free for the post nor will be. Rule: ibv_post_send(3):
/// an unsignaled request's slot is freed only when a later completion of its send queue
/// is polled (docs/sanitizer.md, "unsignaled-fill").
#[cold]
#[inline(never)]
pub(crate) fn send_posting(qpn: Id, depth: u32) {
    let Some((wr_id, first, outstanding)) = track::state().unsignaled_run(qpn, depth) else { return };
    report::emit(Finding {
        kind: FindingKind::UnsignaledFill,
        device: Some(qpn.slot),
        page: "ibv_post_send(3)",
        rule: "the slot of an unsignaled send work request (no IBV_SEND_SIGNALED, and the QP made without sq_sig_all, ibv_create_qp(3)) is freed only when a later completion of the same send queue is polled: a send queue filled with unsignaled requests, with no signaled one outstanding, never drains, and a NIC refuses every further post (ENOMEM); signal one request in every max_send_wr at least, and poll its completion",
        headline: format!("ibv_post_send to QPN {qpn:#x} finds its send queue of depth {depth} full of {outstanding} unsignaled work requests, with no signaled one whose completion would free their slots"),
        objects: vec![
            Object::Qp { qpn: qpn.num, state: None },
            Object::QueueDepth { queue: Queue::Send, num: qpn.num, depth },
            Object::WorkRequest { wr_id, queue: Queue::Send, num: qpn.num, sge: None },
        ],
        sites: vec![site("ibv_post_send called at", &trace::capture()), site("first unsignaled work request of the run posted at", &first)],
    });
}

// ---- Remote access errors (remote-access-explained) ----

/// A completion of QP `qpn` for `wr_id` with IBV_WC_REM_ACCESS_ERR or REM_INV_REQ_ERR
/// (`status`) and `vendor_err` was polled: explained if the request asked for a remote
/// range (ibv_post_send(3), ibv_reg_mr(3); docs/sanitizer.md, "remote-access-explained").
#[cold]
#[inline(never)]
pub(crate) fn remote_error(qpn: Id, wr_id: u64, status: u32, vendor_err: u32) {
    use rverbs_proto::vendor_err as ve;
    let st = track::state();
    let Some((r, posted)) = st.remote_of(qpn, wr_id) else { return };
    let registered = st.live.get(&(Kind::Mr, qpn.with(r.rkey))).filter(|l| l.pid == std::process::id()).map(|l| l.at.clone());
    drop(st);
    // A REM_INV_REQ_ERR is explained only for a length the responder refused.
    let inv_req = status == rverbs_proto::verbs::WcStatus::RemInvReqErr as u32;
    if inv_req && !matches!(vendor_err, ve::REMOTE_LENGTH | ve::REMOTE_BOUNDS | ve::REMOTE_INVALID) {
        return;
    }
    let region = (r.lookup)();
    let end = r.va.saturating_add(r.len);
    let why = match (vendor_err, &region) {
        (ve::REMOTE_RKEY, _) => format!("no region or window of the target has rkey {:#x} (never registered, deregistered, or invalidated)", r.rkey),
        (ve::REMOTE_BOUNDS, Some((start, len, _))) => format!("the range [{:#x}-{end:#x}) leaves the region, which covers [{start:#x}-{:#x})", r.va, start.saturating_add(*len)),
        (ve::REMOTE_MR_ACCESS, Some((_, _, flags))) => format!("the region does not grant {} (its access flags: {flags})", r.need),
        (ve::REMOTE_QP_ACCESS, _) => format!("the responder QP's qp_access_flags (ibv_modify_qp(3)) do not allow {}: {} is missing there", r.op, r.need),
        (ve::REMOTE_PD, _) => "the region belongs to another protection domain than the responder QP".to_string(),
        (code, _) => match ve::ALL.iter().find(|e| e.0 == code) {
            Some((_, name, text)) => format!("{text} (vendor_err {name})"),
            None => format!("vendor_err {code:#x}"),
        },
    };
    let region_text = match &region {
        _ if matches!(vendor_err, ve::REMOTE_BOUNDS | ve::REMOTE_MR_ACCESS) => String::new(),
        Some((start, len, flags)) => format!("; the region of rkey {:#x} on this host covers [{start:#x}-{:#x}) with {flags}", r.rkey, start.saturating_add(*len)),
        None => String::new(),
    };
    let mut sites = vec![site("posted at", &posted), site("error completion polled at", &trace::capture())];
    if let Some(at) = registered {
        sites.push(site("target region registered at", &at));
    }
    let status_name = if inv_req { "IBV_WC_REM_INV_REQ_ERR" } else { "IBV_WC_REM_ACCESS_ERR" };
    report::emit(Finding {
        kind: FindingKind::RemoteAccessExplained,
        device: Some(qpn.slot),
        page: "ibv_post_send(3)",
        rule: "an RDMA READ, WRITE or atomic names remote memory by rkey and address: the range must lie in a region (or window) of the responder's PD registered with the matching remote right (ibv_reg_mr(3): IBV_ACCESS_REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC), and the responder QP must allow the operation (ibv_modify_qp(3), qp_access_flags); otherwise the request completes with IBV_WC_REM_ACCESS_ERR (ibv_poll_cq(3)). Informative: the program may handle the error",
        headline: format!("work request wr_id {wr_id:#x} ({}) on QPN {qpn:#x} completed with {status_name}: {why}{region_text}", r.op),
        objects: vec![
            Object::WorkRequest { wr_id, queue: Queue::Send, num: qpn.num, sge: None },
            Object::RemoteRange { rkey: r.rkey, addr: r.va, len: r.len },
        ],
        sites,
    });
}
