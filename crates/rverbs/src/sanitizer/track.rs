//! What the sanitizer tracks, and only while it is on (docs/sanitizer.md, "What is
//! tracked"): the live objects and their creation sites, the outstanding work requests
//! of every queue, each QP's state history, and where the last event about an object
//! was obtained. One lock, a leaf: nothing is called while it is held but captures of
//! backtraces.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use rverbs_proto::verbs::QpState;

use super::finding::{Object, Queue};
use super::trace::Trace;

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

/// One work request as the tracking takes it: (wr_id, signaled, SGEs as (lkey, addr,
/// length)).
pub(crate) type Wr = (u64, bool, Vec<(u32, u64, u32)>);

/// A posted work request not yet completed (polled).
pub(crate) struct Posted {
    pub(crate) seq: u64,
    pub(crate) wr_id: u64,
    /// Whether its completion is written on success (SIGNALED or `sq_sig_all`; every
    /// receive).
    pub(crate) signaled: bool,
    /// (lkey, addr, length) of each SGE.
    pub(crate) sges: Vec<(u32, u64, u32)>,
    pub(crate) at: Trace,
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
    pub(crate) live: BTreeMap<(Kind, u32), Live>,
    pub(crate) queues: BTreeMap<(Queue, u32), VecDeque<Posted>>,
    /// The SRQ each QP takes its receives from.
    pub(crate) qp_srq: BTreeMap<u32, u32>,
    pub(crate) history: BTreeMap<u32, Vec<Step>>,
    /// Where the last event was obtained: (asynchronous, kind, id).
    pub(crate) events: BTreeMap<(bool, Kind, u32), Trace>,
    next_seq: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    live: BTreeMap::new(),
    queues: BTreeMap::new(),
    qp_srq: BTreeMap::new(),
    history: BTreeMap::new(),
    events: BTreeMap::new(),
    next_seq: 0,
});

/// The tracking tables (a poisoned lock is taken over: the tables stay consistent, each
/// change is one map operation).
pub(crate) fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// As [`state`], for exit-time code: gives up after a bounded number of attempts rather
/// than wait for a thread that may never run again.
pub(crate) fn try_state() -> Option<MutexGuard<'static, State>> {
    for _ in 0..10_000 {
        match STATE.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
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
    pub(crate) fn post(&mut self, queue: Queue, num: u32, wrs: Vec<Wr>, at: &Trace) -> u64 {
        let q = self.queues.entry((queue, num)).or_default();
        let first = self.next_seq + 1;
        for (wr_id, signaled, sges) in wrs {
            self.next_seq += 1;
            q.push_back(Posted { seq: self.next_seq, wr_id, signaled, sges, at: at.clone() });
        }
        first
    }

    /// Forgets the work requests numbered `seqs` (refused by the post).
    pub(crate) fn unpost(&mut self, queue: Queue, num: u32, seqs: std::ops::Range<u64>) {
        if let Some(q) = self.queues.get_mut(&(queue, num)) {
            q.retain(|p| !seqs.contains(&p.seq));
        }
    }

    /// A completion of QP `qpn` for `wr_id` was polled. A success names its queue (a
    /// receive opcode or not); an error may come from any of the QP's queues, which are
    /// asked in the order send, receive, SRQ. On the send queue the completion also ends
    /// the unsignaled requests posted before it (ibv_post_send(3): their completion is
    /// implied by a later one of the same queue).
    pub(crate) fn complete(&mut self, qpn: u32, wr_id: u64, ok: bool, recv: bool) {
        let srq = self.qp_srq.get(&qpn).copied();
        let mut order: smallvec::SmallVec<[(Queue, u32); 3]> = smallvec::SmallVec::new();
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
                    q.drain(..=i);
                } else {
                    q.remove(i);
                }
                return;
            }
        }
        // A receive from an SRQ the QP was not created with (an XRC target QP takes its
        // receives from the SRQ each sender names): the first SRQ holding the wr_id. A
        // wrong pick can hide a finding, never make one up.
        if !ok || recv {
            for ((queue, _), q) in self.queues.iter_mut() {
                if *queue == Queue::SharedRecv {
                    if let Some(i) = q.iter().position(|p| p.wr_id == wr_id) {
                        q.remove(i);
                        return;
                    }
                }
            }
        }
    }

    /// The first outstanding work request one of whose SGEs names `lkey`.
    pub(crate) fn user_of(&self, lkey: u32) -> Option<(Queue, u32, &Posted, (u64, u32))> {
        self.queues.iter().find_map(|(&(queue, num), q)| {
            q.iter().find_map(|p| p.sges.iter().find(|s| s.0 == lkey).map(|s| (queue, num, p, (s.1, s.2))))
        })
    }

    /// A transition of QP `qpn`: kept in its history; to RESET (ibv_modify_qp(3), and
    /// destruction) its queues are emptied without completions.
    pub(crate) fn transition(&mut self, qpn: u32, step: Step) {
        let created = step.cause == "created";
        if step.to == QpState::Reset {
            self.queues.remove(&(Queue::Send, qpn));
            self.queues.remove(&(Queue::Recv, qpn));
        }
        let h = self.history.entry(qpn).or_default();
        if created {
            h.clear();
        }
        if h.len() >= HISTORY {
            h.remove(1);
        }
        h.push(step);
    }
}
