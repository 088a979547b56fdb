//! What the sanitizer tracks, and only while it is on (docs/sanitizer.md, "What is
//! tracked"): the live objects and their creation sites, the outstanding work requests
//! of every queue, each QP's state history, and where the last event about an object
//! was obtained, the checksums of the buffers outstanding sends read, and the CQs'
//! sizes against the depths of the queues completing to them, the open batches of
//! extended polling, and the CQs armed while they held completions. Every object is keyed
//! by its device and number ([`Id`]): numbers repeat across the devices of a process. One
//! lock, a leaf: nothing is called while it is held but captures of backtraces.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use rverbs_proto::verbs::QpState;

use super::finding::{Object, Queue};
use super::id::Id;
use super::trace::Trace;

// ---- The bytes of outstanding work requests (docs/sanitizer.md, send-buffer-changed):
// a checksum of each SGE the device reads, taken at the post and compared when the
// completion that releases the request is polled, and the ranges the device writes,
// which excuse a change of a watched range they overlap. The memory layer finds the
// ranges and reads the bytes (`mr::access::watch_sges`); the tracking holds what it
// found. Rule: ibv_post_send(3), NOTES: the buffers of a work request may be reused
// only once it has fully executed and its completion was retrieved; with
// IBV_SEND_INLINE at once (inline data is copied by the post, so it is never watched).

/// The bytes watched per work request: SGEs that would take a request past this many
/// bytes are not watched (a 64 KiB checksum at the post and again at the poll).
pub(crate) const MAX_WATCHED: usize = 64 * 1024;

/// The checksum of a watched range now, or `None` if its region is no longer valid,
/// has moved, or its memory faults (no finding then: dereg-mr-in-use covers the first).
pub(crate) type Recheck = Box<dyn Fn() -> Option<u32> + Send>;

/// One SGE of an outstanding request whose bytes are watched.
pub(crate) struct Watched {
    pub(crate) lkey: u32,
    /// The SGE's address as the application gave it (an iova of the region).
    pub(crate) iova: u64,
    pub(crate) len: u32,
    /// Where the bytes are in this process.
    pub(crate) addr: usize,
    /// The region's first byte and length in this process (for the report).
    pub(crate) region: (u64, u64),
    /// The checksum at the post.
    pub(crate) crc: u32,
    pub(crate) recheck: Recheck,
}

impl Watched {
    /// Whether the bytes differ from those at the post.
    pub(crate) fn changed(&self) -> bool {
        (self.recheck)().is_some_and(|c| c != self.crc)
    }
}

/// The region a remote key names on this host now: its first address (iova), length,
/// and access flags as text; `None` if no valid region of this process has the key
/// (remote-access-explained).
pub(crate) type KeyLookup = std::sync::Arc<dyn Fn() -> Option<(u64, u64, String)> + Send + Sync>;

/// The remote range an RDMA READ, WRITE or atomic asks for (remote-access-explained).
#[derive(Clone)]
pub(crate) struct Remote {
    pub(crate) rkey: u32,
    pub(crate) va: u64,
    pub(crate) len: u64,
    /// The operation, as ibv_post_send(3) names it (`IBV_WR_RDMA_WRITE`, ...).
    pub(crate) op: &'static str,
    /// The right the operation needs (`IBV_ACCESS_REMOTE_WRITE`, ...).
    pub(crate) need: &'static str,
    pub(crate) lookup: KeyLookup,
}

/// The kinds of object whose lives are tracked (the leak report's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Context,
    Pd,
    Mr,
    Cq,
    Qp,
    Srq,
    CompChannel,
}

impl Kind {
    /// The object an id of this kind names (an MR's range is filled in by its creator).
    pub(crate) fn object(self, id: u32) -> Object {
        match self {
            Kind::Context => Object::Context { id },
            Kind::Pd => Object::Pd { handle: id },
            Kind::Mr => Object::Mr { lkey: id, addr: 0, len: 0 },
            Kind::Cq => Object::Cq { id },
            Kind::Qp => Object::Qp { qpn: id, state: None },
            Kind::Srq => Object::Srq { srqn: id },
            Kind::CompChannel => Object::CompChannel { id },
        }
    }
}

/// A live object: what it is, the process that made it, where.
pub(crate) struct Live {
    pub(crate) object: Object,
    pub(crate) pid: u32,
    pub(crate) at: Trace,
}

/// One work request as the tracking takes it.
pub(crate) struct Wr {
    pub(crate) wr_id: u64,
    /// Whether its completion is written on success.
    pub(crate) signaled: bool,
    /// (lkey, addr, length) of each SGE that names a region.
    pub(crate) sges: Vec<(u32, u64, u32)>,
    /// The SGEs the device reads, with their checksums at the post (send-buffer-changed).
    pub(crate) watched: Vec<Watched>,
    /// The ranges of this process the device writes for it, `[start, end)`: receive
    /// buffers, RDMA READ and atomic results.
    pub(crate) sinks: Vec<(usize, usize)>,
    /// The remote range it asks for, if it names one.
    pub(crate) remote: Option<Remote>,
    /// The window a BIND_MW request binds (its `MwInner`'s address; dealloc-mw-in-use).
    pub(crate) mw: Option<usize>,
    /// The id of its staging (a receive placed late, read-before-completion), 0 if none.
    pub(crate) staged: u64,
}

/// A posted work request not yet completed (polled).
pub(crate) struct Posted {
    pub(crate) seq: u64,
    pub(crate) wr_id: u64,
    /// Whether its completion is written on success (SIGNALED or `sq_sig_all`; every
    /// receive).
    pub(crate) signaled: bool,
    /// (lkey, addr, length) of each SGE.
    pub(crate) sges: Vec<(u32, u64, u32)>,
    /// As [`Wr::watched`].
    pub(crate) watched: Vec<Watched>,
    /// As [`Wr::sinks`].
    pub(crate) sinks: Vec<(usize, usize)>,
    /// A device write (a receive, an RDMA READ or atomic result) may have reached a
    /// watched range while the request was outstanding: a change is then no finding.
    pub(crate) touched: bool,
    /// As [`Wr::remote`].
    pub(crate) remote: Option<Remote>,
    /// As [`Wr::mw`].
    pub(crate) mw: Option<usize>,
    /// As [`Wr::staged`].
    pub(crate) staged: u64,
    pub(crate) at: Trace,
}

/// Whether a range of `a` and one of `b` overlap (`[start, end)` each).
fn overlap(a: &[(usize, usize)], b: &[Watched]) -> bool {
    a.iter().any(|&(s, e)| b.iter().any(|w| s < w.addr + w.len as usize && w.addr < e))
}

/// A queue completing to a CQ: (queue, QPN or SRQ number on the CQ's device, depth).
pub(crate) type Depth = (Queue, u32, u32);

/// A CQ's size as the sanitizer keeps it (cq-too-small).
pub(crate) struct CqSize {
    pub(crate) cqe: u32,
    pub(crate) ignore_overrun: bool,
    /// Reported already: once per CQ.
    pub(crate) reported: bool,
}

/// One change of a QP's state.
pub(crate) struct Step {
    pub(crate) from: QpState,
    pub(crate) to: QpState,
    pub(crate) cause: &'static str,
    pub(crate) at: Trace,
}

/// The transitions kept per QP (the oldest are dropped, after the creation).
const HISTORY: usize = 16;

#[derive(Default)]
pub(crate) struct State {
    pub(crate) live: BTreeMap<(Kind, Id), Live>,
    pub(crate) queues: BTreeMap<(Queue, Id), VecDeque<Posted>>,
    /// The SRQ each QP takes its receives from.
    pub(crate) qp_srq: BTreeMap<Id, Id>,
    pub(crate) history: BTreeMap<Id, Vec<Step>>,
    /// Where the last event was obtained: (asynchronous, kind, id).
    pub(crate) events: BTreeMap<(bool, Kind, Id), Trace>,
    /// The CQs and their sizes.
    pub(crate) cqs: BTreeMap<Id, CqSize>,
    /// The work that can complete to each CQ: (CQ id, queue, QPN or SRQ number) → the
    /// queue's depth.
    pub(crate) demand: BTreeMap<(Id, Queue, Id), u32>,
    /// The open batches of extended polling (cq-poll-unfinished): (CQ id, thread token)
    /// → where `ibv_start_poll` opened it.
    pub(crate) batches: BTreeMap<(Id, u64), Trace>,
    /// The SINGLE_THREADED CQs reported as polled by two threads at once (once per CQ).
    pub(crate) shared: BTreeSet<Id>,
    /// The CQs armed while they held completions and not polled since (lost-wakeup): CQ
    /// id → the arming.
    pub(crate) armed: BTreeMap<Id, Armed>,
    /// unsignaled-fill: per QPN, the sequence number of the first request of the
    /// unsignaled run already reported (once per run).
    pub(crate) filled: BTreeMap<Id, u64>,
    /// wc-field-not-requested: the (CQ id, `IBV_WC_EX_WITH_*` bit) pairs reported (once
    /// per CQ and field).
    pub(crate) fields: BTreeSet<(Id, u64)>,
    /// mr-memory-unmapped and mr-memory-freed: the regions (lkeys) reported, until
    /// deregistered (once per region, for either).
    pub(crate) unmapped: BTreeSet<Id>,
    /// mr-memory-freed: the live regions over caller memory, not on-demand: lkey →
    /// (first byte in this process, length).
    pub(crate) caller_mrs: BTreeMap<Id, (u64, u64)>,
    next_seq: u64,
}

/// An arming of a CQ that held completions (lost-wakeup).
pub(crate) struct Armed {
    /// The completion channel the CQ reports to.
    pub(crate) channel: Id,
    /// The completions it held when armed.
    pub(crate) held: usize,
    /// Where `ibv_req_notify_cq` was called.
    pub(crate) at: Trace,
}

static STATE: Mutex<State> = Mutex::new(State {
    live: BTreeMap::new(),
    queues: BTreeMap::new(),
    qp_srq: BTreeMap::new(),
    history: BTreeMap::new(),
    events: BTreeMap::new(),
    cqs: BTreeMap::new(),
    demand: BTreeMap::new(),
    batches: BTreeMap::new(),
    shared: BTreeSet::new(),
    armed: BTreeMap::new(),
    filled: BTreeMap::new(),
    fields: BTreeSet::new(),
    unmapped: BTreeSet::new(),
    caller_mrs: BTreeMap::new(),
    next_seq: 0,
});

/// The tracking tables held, with this thread marked busy in the sanitizer
/// ([`super::Busy`]) until the guard goes.
pub(crate) struct StateGuard {
    tables: MutexGuard<'static, State>,
    _busy: super::Busy,
}

impl std::ops::Deref for StateGuard {
    type Target = State;
    fn deref(&self) -> &State {
        &self.tables
    }
}

impl std::ops::DerefMut for StateGuard {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.tables
    }
}

/// The tracking tables (a poisoned lock is taken over: the tables stay consistent, each
/// change is one map operation).
pub(crate) fn state() -> StateGuard {
    let busy = super::Busy::enter();
    StateGuard { tables: STATE.lock().unwrap_or_else(|p| p.into_inner()), _busy: busy }
}

/// What the forking thread holds from the fork's prepare handler to its parent or child
/// handler: the tables' lock, then no backtrace being captured or symbolized.
type HeldAcrossFork = (StateGuard, std::sync::RwLockWriteGuard<'static, ()>);

thread_local! {
    static HELD_ACROSS_FORK: std::cell::RefCell<Option<HeldAcrossFork>> = const { std::cell::RefCell::new(None) };
}

/// Keeps every fork (fork(2), pthread_atfork(3)) from happening while another thread holds
/// the tables' lock or is inside a backtrace (the standard library's lock): the child
/// would inherit the lock held with no thread to release it, and its first tracked verb
/// would wait for ever. The forking thread takes the tables, then waits out the
/// backtraces (in that order: a thread holding the tables may still capture one; a
/// capture never waits for the tables) before the fork, and releases both after, in the
/// parent and in the child. Registered once, when the sanitizer is first switched on.
pub(crate) fn guard_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn prepare() {
        let tables = state();
        let tracing = super::trace::TRACING.write().unwrap_or_else(|p| p.into_inner());
        HELD_ACROSS_FORK.with(|h| *h.borrow_mut() = Some((tables, tracing)));
    }
    extern "C" fn after() {
        HELD_ACROSS_FORK.with(|h| drop(h.borrow_mut().take()));
    }
    ONCE.call_once(|| crate::sys::at_fork(prepare, after, after));
}

/// As [`state`], for exit-time code and the free watch: gives up after a bounded number of attempts rather
/// than wait for a thread that may never run again.
pub(crate) fn try_state() -> Option<StateGuard> {
    for _ in 0..10_000 {
        let busy = super::Busy::enter();
        match STATE.try_lock() {
            Ok(g) => return Some(StateGuard { tables: g, _busy: busy }),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(StateGuard { tables: p.into_inner(), _busy: busy }),
            Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    None
}

impl State {
    /// Records work requests posted to `queue` `num`, before the post runs (a completion
    /// polled by another thread meanwhile then finds them); returns the first one's
    /// sequence number (the others follow it), for [`State::unpost`] of those the post
    /// refused.
    /// A request that the device writes into a range another outstanding request
    /// watches touches that one; one that watches a range an outstanding request writes
    /// into is touched from its post (send-buffer-changed: two requests' lives overlap
    /// exactly when one is posted while the other is outstanding).
    pub(crate) fn post(&mut self, queue: Queue, num: Id, wrs: Vec<Wr>, at: &Trace) -> u64 {
        let first = self.next_seq + 1;
        for w in wrs {
            let mut touched = false;
            if !w.sinks.is_empty() || !w.watched.is_empty() {
                for p in self.queues.values_mut().flat_map(|q| q.iter_mut()) {
                    if !p.watched.is_empty() && overlap(&w.sinks, &p.watched) {
                        p.touched = true;
                    }
                    touched |= overlap(&p.sinks, &w.watched);
                }
            }
            self.next_seq += 1;
            let posted = Posted { seq: self.next_seq, wr_id: w.wr_id, signaled: w.signaled, sges: w.sges, watched: w.watched, sinks: w.sinks, touched, remote: w.remote, mw: w.mw, staged: w.staged, at: at.clone() };
            self.queues.entry((queue, num)).or_default().push_back(posted);
        }
        first
    }

    /// The first request of the send queue of QP `qpn` when at least `depth` requests
    /// are outstanding there and none of them is signaled, and that run was not reported
    /// yet (it is then marked reported): unsignaled-fill.
    pub(crate) fn unsignaled_run(&mut self, qpn: Id, depth: u32) -> Option<(u64, Trace, usize)> {
        let q = self.queues.get(&(Queue::Send, qpn))?;
        let first = q.front()?;
        if depth == 0 || q.len() < depth as usize || q.iter().any(|p| p.signaled) || self.filled.get(&qpn) == Some(&first.seq) {
            return None;
        }
        let found = (first.wr_id, first.at.clone(), q.len());
        self.filled.insert(qpn, first.seq);
        Some(found)
    }

    /// Forgets the work requests numbered `seqs` (refused by the post).
    pub(crate) fn unpost(&mut self, queue: Queue, num: Id, seqs: std::ops::Range<u64>) {
        if let Some(q) = self.queues.get_mut(&(queue, num)) {
            q.retain(|p| !seqs.contains(&p.seq));
        }
    }

    /// A completion of QP `qpn` for `wr_id` was polled. A success names its queue (a
    /// receive opcode or not); an error may come from any of the QP's queues, which are
    /// asked in the order send, receive, SRQ. On the send queue the completion also ends
    /// the unsignaled requests posted before it (ibv_post_send(3): their completion is
    /// implied by a later one of the same queue). Returns the send requests a successful
    /// completion released whose watched ranges no device write touched, to be checked
    /// (send-buffer-changed), and the staging of the receive it ended (0 if none).
    pub(crate) fn complete(&mut self, qpn: Id, wr_id: u64, ok: bool, recv: bool) -> (Vec<Posted>, u64) {
        let srq = self.qp_srq.get(&qpn).copied();
        let mut order: smallvec::SmallVec<[(Queue, Id); 3]> = smallvec::SmallVec::new();
        if !ok || !recv {
            order.push((Queue::Send, qpn));
        }
        if !ok || recv {
            order.push((Queue::Recv, qpn));
            if let Some(s) = srq {
                order.push((Queue::SharedRecv, s));
            }
        }
        for key in order {
            let Some(q) = self.queues.get_mut(&key) else { continue };
            let hit = if key.0 == Queue::Send {
                q.iter().position(|p| p.wr_id == wr_id && (p.signaled || !ok)).or_else(|| q.iter().position(|p| p.wr_id == wr_id))
            } else {
                q.iter().position(|p| p.wr_id == wr_id)
            };
            if let Some(i) = hit {
                if key.0 == Queue::Send {
                    return (q.drain(..=i).filter(|p| ok && !p.touched && !p.watched.is_empty()).collect(), 0);
                }
                let staged = q.remove(i).map_or(0, |p| p.staged);
                return (Vec::new(), staged);
            }
        }
        // A receive from an SRQ the QP was not created with (an XRC target QP takes its
        // receives from the SRQ each sender names): the first SRQ of its device holding
        // the wr_id. A wrong pick can hide a finding, never make one up.
        if !ok || recv {
            for ((queue, srqn), q) in self.queues.iter_mut() {
                if *queue == Queue::SharedRecv && srqn.slot == qpn.slot {
                    if let Some(i) = q.iter().position(|p| p.wr_id == wr_id) {
                        q.remove(i);
                        return (Vec::new(), 0);
                    }
                }
            }
        }
        (Vec::new(), 0)
    }

    /// The remote range and post site of the outstanding send request `wr_id` of QP
    /// `qpn` (the first such, as [`State::complete`] matches errors).
    pub(crate) fn remote_of(&self, qpn: Id, wr_id: u64) -> Option<(Remote, Trace)> {
        let p = self.queues.get(&(Queue::Send, qpn))?.iter().find(|p| p.wr_id == wr_id)?;
        Some((p.remote.clone()?, p.at.clone()))
    }

    /// The first outstanding work request of `lkey`'s device one of whose SGEs names it.
    pub(crate) fn user_of(&self, lkey: Id) -> Option<(Queue, Id, &Posted, (u64, u32))> {
        self.queues.iter().filter(|((_, num), _)| num.slot == lkey.slot).find_map(|(&(queue, num), q)| {
            q.iter().find_map(|p| p.sges.iter().find(|s| s.0 == lkey.num).map(|s| (queue, num, p, (s.1, s.2))))
        })
    }

    /// The first outstanding BIND_MW request that binds window `mw` (its QPN).
    pub(crate) fn binder_of(&self, mw: usize) -> Option<(Id, &Posted)> {
        self.queues.iter().filter(|((queue, _), _)| *queue == Queue::Send).find_map(|(&(_, qpn), q)| q.iter().find(|p| p.mw == Some(mw)).map(|p| (qpn, p)))
    }

    /// The tracked send request of QP `qpn` that is the first of the `unfinished` ones
    /// (the wr_ids of the requests the device still holds, oldest first): the device
    /// finishes a send queue in order, so they are the last `unfinished.len()` tracked
    /// ones; with a wr_id that does not match there (requests posted while the sanitizer
    /// was off), the first tracked one with that wr_id.
    pub(crate) fn first_unfinished(&self, qpn: Id, unfinished: &[u64]) -> Option<&Posted> {
        let q = self.queues.get(&(Queue::Send, qpn))?;
        let wr_id = *unfinished.first()?;
        q.len().checked_sub(unfinished.len()).and_then(|i| q.get(i)).filter(|p| p.wr_id == wr_id).or_else(|| q.iter().find(|p| p.wr_id == wr_id))
    }

    /// A transition of QP `qpn`: kept in its history; to RESET (ibv_modify_qp(3), and
    /// destruction) its queues are emptied without completions. Returns the stagings of
    /// the receives so discarded.
    pub(crate) fn transition(&mut self, qpn: Id, step: Step) -> Vec<u64> {
        let created = step.cause == "created";
        let mut staged = Vec::new();
        if step.to == QpState::Reset {
            self.queues.remove(&(Queue::Send, qpn));
            if let Some(q) = self.queues.remove(&(Queue::Recv, qpn)) {
                staged.extend(q.iter().map(|p| p.staged).filter(|&s| s != 0));
            }
        }
        let h = self.history.entry(qpn).or_default();
        if created {
            h.clear();
        }
        if h.len() >= HISTORY {
            h.remove(1);
        }
        h.push(step);
        staged
    }

    /// The queues of CQ `cq` and their depths, when they exceed its size and it was not
    /// reported yet (it is then marked reported): cq-too-small.
    pub(crate) fn overcommitted(&mut self, cq: Id) -> Option<(u32, Vec<Depth>)> {
        let size = self.cqs.get_mut(&cq)?;
        if size.ignore_overrun || size.reported {
            return None;
        }
        let queues: Vec<Depth> = self.demand.range((cq, Queue::Send, cq.with(0))..=(cq, Queue::SharedRecv, cq.with(u32::MAX))).map(|(&(_, q, n), &d)| (q, n.num, d)).collect();
        let demand: u64 = queues.iter().map(|&(_, _, d)| u64::from(d)).sum();
        if demand <= u64::from(size.cqe) {
            return None;
        }
        size.reported = true;
        Some((size.cqe, queues))
    }

    /// The CQs that the queues of QP or SRQ `num` (posted to on `queue`) complete work
    /// to and that they contribute to: those to check when it is posted to.
    pub(crate) fn cqs_fed_by(&self, queue: Queue, num: Id) -> Vec<Id> {
        let srq = queue == Queue::SharedRecv;
        let mut cqs: Vec<Id> =
            self.demand.keys().filter(|&&(_, q, n)| n == num && (q == Queue::SharedRecv) == srq).map(|&(cq, ..)| cq).collect();
        cqs.dedup();
        cqs
    }
}
