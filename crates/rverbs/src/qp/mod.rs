//! Queue pairs: creation, the state machine, posting, flushing and queries.
//!
//! Read before editing: ibv_create_qp(3), ibv_modify_qp(3), ibv_post_send(3),
//! ibv_post_recv(3), ibv_query_qp_data_in_order(3), ibv_poll_cq(3) (statuses), rxe
//! `rxe_req.c` / `rxe_resp.c` / `rxe_comp.c`, and docs/queue-pairs.md.
//!
//! Locking: `attrs` (modify/query) → `sq` (the requester; one executor at a time) →
//! another QP's receive queue → CQ producer side. The data path reads a peer QP's
//! responder attributes from its record (`qp::state`, `ResponderView`) and never takes a peer's `attrs` or
//! `sq` lock; a peer is pushed into ERR with `QpInner::enter_error`, which only
//! try-locks its send queue and leaves the flush to the holder if it is busy.
//!
//! State: every change of a QP's state goes through `QpRecord::transition` (module
//! `state`), which traces it; `modify` is validate → plan → apply there.

pub(crate) mod acks;
pub mod batch;
pub mod connect;
pub(crate) mod device;
mod local;
pub(crate) mod send;
pub(crate) mod state;
pub(crate) mod transition;
pub(crate) mod sq;
pub(crate) mod srq;
#[cfg(feature = "rdma-core")]
pub(crate) mod native;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rverbs_proto::state::QpAttrMask;
use rverbs_proto::vendor_err;
use rverbs_proto::verb_fault::Verb;
use rverbs_proto::verbs::{Access, EventType, Mtu, QpState, QpType, SendFlags, WcStatus, WrOpcode};

use crate::cq::{Cq, CqInner};
use crate::gid::Gid;
use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::notify::{EventCounter, RawElement};
use crate::mr::domain::{PdCore, XrcdCore};
use crate::shm::tables::{QpRecord, QP_FLAG_COMM_EST, QP_FLAG_PORT_DOWN};
use self::srq::{Srq, SrqInner};
use crate::rings::wc::Cqe;
use crate::rings::qp_attr::{QpAttr, QpCap};
use device::QpDevice;
use crate::rings::recv_ring::{self, RecvQueue};
use send::SendQueue;
use crate::rings::wr::{self, PostError, RecvWr, SendWr};

/// Parameters of [`crate::Pd::create_qp`] (`struct ibv_qp_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct QpInit<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue, if receives come from one.
    pub srq: Option<&'a Srq>,
    /// Requested capacities.
    pub cap: QpCap,
    /// Signal every send work request, not only those with `SIGNALED`.
    pub sq_sig_all: bool,
    /// Opaque value returned with asynchronous events (`qp_context`).
    pub qp_context: usize,
    /// The operations the work-request builder may post ([`Qp::wr_start`]);
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` of ibv_create_qp_ex(3). `None`: no builder.
    pub send_ops: Option<batch::SendOps>,
}

impl<'a> QpInit<'a> {
    /// A QP of `qp_type` completing to `cq` for both queues.
    pub fn new(qp_type: QpType, cq: &'a Cq, cap: QpCap) -> Self {
        QpInit {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
            qp_context: 0,
            send_ops: None,
        }
    }
}

/// The receive side of a connected QP whose requester is on another host (the network
/// transport, `transport::net`): the protocol core's responder machine, made at the first
/// request after RTR from `rq_psn`, and the receive WQE a SEND of several packets is
/// being placed into (docs/rocev2-wire.md §3.3).
#[derive(Default)]
pub(crate) struct NetResponder {
    /// `rq_psn` as of the last move to RTR.
    pub(crate) rq_psn: u32,
    pub(crate) machine: Option<rverbs_proto::rc::Responder>,
    pub(crate) held: Option<recv_ring::RecvWqe>,
    /// Set by ibv_destroy_qp(3) under this lock, with `held` let go: no request from the
    /// network is served any more (in particular, none takes a receive from the SRQ).
    pub(crate) closed: bool,
    /// Counted while the QP has a network peer (`progress::net_active`): set with the
    /// machine, or by a UD send to another host; dropped at RESET/RTR and destroy.
    pub(crate) live: Option<crate::progress::NetConnection>,
    /// ACKs held back to leave with the next requests (`acks`, docs/network.md,
    /// "Coalesced ACKs"); sent before this responder is replaced.
    pub(crate) held_acks: acks::HeldAcks,
    /// The last keys of this process the responder checked for a remote access and for a
    /// receive (`transport::respond::Responding::remembering`).
    pub(crate) memos: crate::mr::ResponderMemos,
}

/// A QP's hold on the parent domain it was created on (made by `crate::pd`, a layer
/// above, as the CQ's is), with the parent domain's allocator, if it has one.
pub(crate) struct ParentHold {
    /// Released when the QP is destroyed.
    pub(crate) hold: Box<dyn std::any::Any + Send + Sync>,
    /// Gives the send queue's ring (docs/memory.md, "Custom allocators").
    pub(crate) alloc: Option<sq::mem::SharedAllocator>,
}

pub(crate) struct QpInner {
    pub(crate) pd: Arc<PdCore>,
    /// The device, given at creation (the engine's tables and the transports).
    pub(crate) dev: &'static dyn QpDevice,
    pub(crate) qp_type: QpType,
    pub(crate) qpn: u32,
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
    pub(crate) srq: Option<Arc<SrqInner>>,
    /// XRC target QPs: their domain.
    pub(crate) xrcd: Option<Arc<XrcdCore>>,
    pub(crate) sq_sig_all: bool,
    pub(crate) cap: QpCap,
    pub(crate) send_ops: Option<batch::SendOps>,
    /// The responder attributes every deliverer reads (this process's threads and
    /// peers alike), in the endpoint's shared tables.
    pub(crate) rec: &'static QpRecord,
    attrs: Mutex<QpAttr>,
    pub(crate) sq: crate::spin::SpinMutex<SendQueue>,
    sq_pending: AtomicBool,
    /// The buffer of the last `ibv_wr_*` batch, kept for the next one (boxed: the post
    /// and poll paths do not touch it).
    batch_spare: Box<crate::spin::SpinMutex<batch::BatchBuf>>,
    pub(crate) rq: Option<RecvQueue>,
    /// The responder state for requests from the network (lock order: after `attrs`; the
    /// receive path releases it before moving the QP to ERR, whose flush takes it).
    pub(crate) net_resp: Mutex<NetResponder>,
    /// The receive queue was flushed (or QP_LAST_WQE_REACHED raised) for the current
    /// entry into ERR.
    rq_flushed: AtomicBool,
    /// An RC or UC QP whose last `modify_qp` connected it to a QP of another process of
    /// this host: receives into private memory are then placed by their owner
    /// (`rings::bounce`) once the QP takes requests.
    pub(crate) host_peer_writes: AtomicBool,
    sqd_notified: AtomicBool,
    /// Multicast groups the QP is attached to (destroy is refused while any).
    pub(crate) mcast_attached: AtomicU32,
    pub(crate) async_events: EventCounter,
    destroyed: AtomicBool,
    /// How many times this process has written the responder view in `rec` (access,
    /// Q_Key, RNR timer, responder resources, path MTU, destination QPN and GID: what
    /// `modify_qp` sets for requesters to read): a requester's lane that found this QP
    /// answering it with those attributes holds while the count has not moved
    /// (docs/shared-state.md, "A lane per connection"). Process memory.
    view_writes: AtomicU64,
    cookie: AtomicUsize,
    qp_context: AtomicUsize,
    /// The parent domain the QP was created on, held until it is destroyed (declared
    /// after `sq`: a QP dropped without destroy gives its ring back first).
    parent: Mutex<Option<ParentHold>>,
    /// The PD's endpoint (`PdCore::endpoint`), one load from the QP instead of three
    /// dependent ones; every path of a QP reads it here, not through its PD.
    pub(crate) endpoint: &'static crate::mr::endpoint::Endpoint,
}

/// What the device does for one of its own events the fault plan raised
/// (docs/fault-injection.md, "Port and device events"); `qps` are the device's QPs in
/// this process, the plan's view of the device being the process's:
///
/// - PORT_ERR: port 1 goes DOWN (`fault_plan::port_down`: sends do not leave, arrivals
///   are dropped), every QP's record says so (peers' requests are not taken), and every
///   open context gets IBV_EVENT_PORT_ERR with element port 1;
/// - PORT_ACTIVE: the port is ACTIVE again, IBV_EVENT_PORT_ACTIVE, traffic flows (RC
///   requests still retrying succeed at their next retry);
/// - DEVICE_FATAL: the device is dead for the process (creating and posting verbs fail
///   with EIO), every context gets IBV_EVENT_DEVICE_FATAL, every QP enters ERR and
///   flushes (no QP event: the device's event says it, ibv_get_async_event(3)).
///
/// A port already in the state asked, or a dead device, changes nothing and raises
/// nothing (a NIC reports changes).
/// A port that goes down counts in `counters` (rxe `link_downed`, docs/device.md, "Hardware counters").
pub(crate) fn device_event(slot: usize, qps: &crate::table::Table<QpInner>, event: rverbs_proto::verb_fault::Event, counters: &crate::shm::counters::CounterBlock) {
    use crate::mr::domain::ContextCore;
    use rverbs_proto::verb_fault::Event;
    let live = || qps.live().into_iter().filter(|q| !q.is_destroyed());
    match event {
        Event::PortErr | Event::PortActive => {
            let up = event == Event::PortActive;
            if !crate::fault_plan::set_port(slot, up) {
                return;
            }
            if !up {
                counters.add(crate::shm::counters::Counter::LinkDowned);
            }
            for qp in live() {
                qp.set_port_down(!up);
            }
            let kind = if up { EventType::PortActive } else { EventType::PortErr };
            ContextCore::raise_everywhere(kind, RawElement::Port(1));
        }
        Event::DeviceFatal => {
            if !crate::fault_plan::kill(slot) {
                return;
            }
            let all: Vec<_> = live().collect();
            for qp in &all {
                qp.set_port_down(true);
            }
            ContextCore::raise_everywhere(EventType::DeviceFatal, RawElement::Device);
            for qp in &all {
                qp.enter_error(None, transition::Cause::Injected);
            }
        }
        _ => {}
    }
}

impl QpInner {
    pub(crate) fn state(&self) -> QpState {
        self.rec.state()
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// How many times this process has written the QP's responder view in its record
    /// ([`QpInner::view_written`]). Read before the record: a write between the two
    /// leaves the reader with the older count, so its next look reads the record again.
    #[inline]
    pub(crate) fn view_writes(&self) -> u64 {
        self.view_writes.load(Ordering::Acquire)
    }

    /// Counts a write of the responder view in the record, once its stores are done: a
    /// reader that sees the new count reads the new view (or a newer one, whose count it
    /// will see move next time).
    pub(crate) fn view_written(&self) {
        self.view_writes.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn raise(self: &Arc<Self>, kind: EventType) {
        self.pd.ctx.raise(kind, RawElement::Qp(self.qpn));
    }

    /// A request arrived: IBTA raises COMM_EST for the first one a QP in RTR receives.
    pub(crate) fn note_inbound(self: &Arc<Self>) {
        if self.state() == QpState::Rtr && self.rec.flags.fetch_or(QP_FLAG_COMM_EST, Ordering::AcqRel) & QP_FLAG_COMM_EST == 0 {
            self.raise(EventType::CommEst);
        }
    }

    /// Moves the QP to ERR because of a device-side fault (overrun, responder error),
    /// raising `event` if given, flushing the receive queue and making the send queue
    /// flush. Does nothing if the QP is in RESET or already in ERR.
    pub(crate) fn enter_error(self: &Arc<Self>, event: Option<EventType>, cause: transition::Cause) {
        if self.move_to_error(cause) {
            self.after_error(event);
        }
    }

    /// The state change of [`QpInner::enter_error`] alone: whether the QP moved to ERR
    /// (not if it is in RESET or already in ERR). [`QpInner::after_error`] must follow.
    pub(crate) fn move_to_error(&self, cause: transition::Cause) -> bool {
        self.transition(transition::Expect::NotIn(transition::ERR_FROM_ANY_BUT), QpState::Err, cause).is_ok()
    }

    /// What follows a move to ERR: `event` raised if given, the receive queue flushed,
    /// the send queue made to flush.
    pub(crate) fn after_error(self: &Arc<Self>, event: Option<EventType>) {
        if let Some(e) = event {
            self.raise(e);
        }
        self.flush_rq_once();
        self.kick();
    }

    /// The slot of the QP's device (`sys::MAX_DEVICES`): whose fault plan and port it has.
    #[inline]
    pub(crate) fn slot(&self) -> usize {
        self.endpoint.slot
    }

    /// The QP as the sanitizer keys it: its device and QPN.
    pub(crate) fn sanitizer_id(&self) -> crate::sanitizer::Id {
        crate::sanitizer::Id::new(self.slot(), self.qpn)
    }

    /// After a call of `verb` on this QP that succeeded, one call per entry of `wr_ids`
    /// (the work requests it posted; one `None` for `modify_qp`): does what the device
    /// does for each event the fault plan raises (docs/fault-injection.md). QP events:
    /// ERR, the event, the flushes (`enter_error`). CQ_ERR: the CQ of the verb's work (the
    /// receive CQ for `post_recv`) enters error as after an overrun
    /// (docs/completion-queues.md). DISCONNECTED: the connection manager's hook. The
    /// device's events (PORT_ERR, PORT_ACTIVE, DEVICE_FATAL): [`device_event`].
    /// Without a plan, one relaxed load, inlined into the post (the rest is out of line).
    #[inline]
    pub(crate) fn raise_injected(self: &Arc<Self>, verb: Verb, wr_ids: impl IntoIterator<Item = Option<u64>>) {
        if crate::fault_plan::active() {
            self.raise_planned(verb, wr_ids);
        }
    }

    /// [`QpInner::raise_injected`] with a plan in force.
    #[cold]
    #[inline(never)]
    fn raise_planned(self: &Arc<Self>, verb: Verb, wr_ids: impl IntoIterator<Item = Option<u64>>) {
        use rverbs_proto::verb_fault::Event;
        for w in wr_ids {
            let event = match crate::fault_plan::raise(self.slot(), verb, Some(self.qpn), w) {
                Some(Event::QpFatal) => EventType::QpFatal,
                Some(Event::QpReqErr) => EventType::QpReqErr,
                Some(Event::QpAccessErr) => EventType::QpAccessErr,
                Some(Event::CqErr) => {
                    let cq = if verb == Verb::PostRecv { &self.recv_cq } else { &self.send_cq };
                    cq.inject_error();
                    continue;
                }
                Some(Event::Disconnected) => {
                    crate::fault_plan::disconnect(self.slot(), self.qpn);
                    continue;
                }
                Some(e) if e.is_device() => {
                    device_event(self.slot(), self.dev.qps(), e, self.endpoint.counters);
                    continue;
                }
                // None, or an event of another object (the parser refuses it here).
                _ => continue,
            };
            self.enter_error(Some(event), transition::Cause::Injected);
        }
    }

    /// Marks the QP's record with its owner's port state (`QP_FLAG_PORT_DOWN`).
    fn set_port_down(&self, down: bool) {
        if down {
            self.rec.flags.fetch_or(QP_FLAG_PORT_DOWN, Ordering::AcqRel);
        } else {
            self.rec.flags.fetch_and(!QP_FLAG_PORT_DOWN, Ordering::AcqRel);
        }
    }

    /// A peer moved the QP to ERR (it raised the event): flush what only this process
    /// can flush, once.
    pub(crate) fn errored_by_peer(self: &Arc<Self>) {
        if self.state() == QpState::Err {
            self.flush_rq_once();
        }
        self.kick();
    }

    fn flush_rq_once(self: &Arc<Self>) {
        if !self.rq_flushed.swap(true, Ordering::AcqRel) {
            self.flush_rq();
        }
    }

    /// Whether receives posted now in state `state` may be placed by their owner
    /// (docs/memory.md, "Receives placed by their owner"): the QP takes requests from a
    /// QP of another process of the host, which would reach private memory of this
    /// process with cross-memory attach, whose copies are not ordered (so
    /// ibv_query_qp_data_in_order(3) answers 0 for SENDs already, and placing them late
    /// makes no promise false); not with the sanitizer, which stages receives itself, nor
    /// under a fault plan (the slots' region would be a registration the plan counts).
    #[inline]
    pub(crate) fn bounces_receives(&self, state: QpState) -> bool {
        self.host_peer_writes.load(Ordering::Relaxed)
            && transition::accepts_requests(state)
            && self.endpoint.peers_copy_unordered()
            && !crate::sanitizer::on()
            && !crate::fault_plan::active()
    }

    /// Completes every queued receive with WR_FLUSH_ERR; with an SRQ, raises
    /// QP_LAST_WQE_REACHED instead (ibv_modify_qp(3), ibv_get_async_event(3)). The
    /// receives of an SRQ that a peer now dead took for the QP complete too (an XRC
    /// target QP's: in the XRC SRQs of its domain in this process).
    fn flush_rq(self: &Arc<Self>) {
        // A receive WQE a network SEND was being placed into left its queue already.
        let held = self.net_resp.lock().expect("net responder").held.take();
        if let Some(w) = held {
            // With the count of its take, as its completion would have (an SRQ's receive:
            // the poll lets its regions go, `rings::kept`).
            let cqe = Cqe { rq_taken: w.completion_count(), ..Cqe::error(w.wr_id, self.qpn, WcStatus::WrFlushErr, vendor_err::FLUSHED) };
            let _ = self.recv_cq.push(cqe);
        }
        if let Some(rq) = &self.rq {
            for wr_id in self.reclaim_from_dead_peer(rq).into_iter().chain(rq.drain()) {
                let cqe = Cqe::error(wr_id, self.qpn, WcStatus::WrFlushErr, vendor_err::FLUSHED);
                let _ = self.recv_cq.push(cqe);
            }
        } else if let Some(srq) = &self.srq {
            // The SRQ's receives that a peer now dead took for this QP and was placing
            // (`SrqInner::reclaim_dead_takes`), to the CQ they would have completed to.
            let cq = srq.tm.as_ref().map_or(&self.recv_cq, |(_, cq)| cq);
            self.flush_dead_takes(srq, cq);
            self.raise(EventType::QpLastWqeReached);
        } else if let Some(x) = &self.xrcd {
            // An XRC target QP takes from the XRC SRQ each request names: a dead peer's
            // takes for it are looked for in the XRC SRQs of its domain in this process
            // (one of another process is out of reach here), completed on the SRQ's CQ.
            for srq in self.dev.srqs().live() {
                if let Some((_, cq)) = srq.xrc.as_ref().filter(|(d, _)| d.key == x.key) {
                    self.flush_dead_takes(&srq, cq);
                }
            }
        }
        // A peer that died while completing to the CQ left a reservation the flushes
        // are behind: the next poll looks for it (`CqInner::look_soon`).
        self.recv_cq.look_soon();
    }

    /// Completes with WR_FLUSH_ERR, on `cq`, the receives of `srq` that a peer now dead
    /// took for this QP and was placing (`SrqInner::reclaim_dead_takes`), each with the
    /// count of its take as its completion would have carried; a CQ other than the QP's
    /// receive CQ is told to look for the dead peer's reservation (`CqInner::look_soon`).
    fn flush_dead_takes(&self, srq: &SrqInner, cq: &Arc<CqInner>) {
        for (wr_id, taken) in srq.reclaim_dead_takes(Some(self.qpn), |at| cq.was_published(at)) {
            let _ = cq.push(Cqe { rq_taken: Some(taken), ..Cqe::error(wr_id, self.qpn, WcStatus::WrFlushErr, vendor_err::FLUSHED) });
        }
        if !Arc::ptr_eq(cq, &self.recv_cq) {
            cq.look_soon();
        }
    }

    /// The receives of `rq` that the connected peer, a process of this host, took and was
    /// still placing when it died (docs/failure-model.md, the dead CQ producer): no
    /// completion would ever come for them, so the flush completes them first (they are
    /// the oldest), as a NIC flushes the receive a message was arriving into, and the
    /// QP's destroy does not wait for their placement. Empty while the peer lives (it
    /// completes them itself; stopped, it goes on later) or is on another host (this
    /// process's responder holds that receive).
    fn reclaim_from_dead_peer(&self, rq: &crate::rings::recv_ring::RecvQueue) -> Vec<u64> {
        if !self.host_peer_writes.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let endpoint = self.endpoint;
        rq.reclaim_placing(|ep, pid| endpoint.owner_alive(ep, pid), |at| self.recv_cq.was_published(at))
    }

    /// Runs the send queue whose lock the caller took (`sq`), then releases it. A kick
    /// that came before the lock was taken is served by this run; one that came while it
    /// was held found the queue busy and left the run to us: its store precedes its
    /// failed try-lock, which precedes our release, which precedes our load (all
    /// sequentially consistent), so it is passed on after the release ([`QpInner::kick`]).
    /// `run`: whether the queue needs a run of its own (a kick served here makes one).
    pub(crate) fn progress_and_release(self: &Arc<Self>, mut sq: crate::spin::SpinGuard<'_, SendQueue>, run: bool) {
        let kicked = self.sq_pending.load(Ordering::Relaxed);
        if kicked {
            self.sq_pending.store(false, Ordering::SeqCst);
        }
        if run || kicked {
            self.progress(&mut sq);
        }
        drop(sq);
        if self.sq_pending.load(Ordering::SeqCst) {
            self.kick();
        }
    }

    /// Makes the send queue progress (after a post, a timer, a state change). If another
    /// thread holds the queue, it will see `sq_pending` and run again.
    pub(crate) fn kick(self: &Arc<Self>) {
        self.sq_pending.store(true, Ordering::SeqCst);
        loop {
            let Some(mut sq) = self.sq.try_lock() else { return };
            if !self.sq_pending.swap(false, Ordering::SeqCst) {
                return;
            }
            self.progress(&mut sq);
            drop(sq);
            if !self.sq_pending.load(Ordering::SeqCst) {
                return;
            }
        }
    }
}

/// `r`, with a success made anew rather than copied: a result written by a callee, or
/// kept in memory across the post, is copied 16 bytes at a time over its narrower stores,
/// a load the CPU cannot forward from its store buffer (`rings::wc::CqeWords`); the
/// error, rare, is moved out of line.
#[inline(always)]
fn fresh(r: Result<(), PostError>) -> Result<(), PostError> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(moved(e)),
    }
}

/// The error of [`fresh`], moved out of line (`#[cold]`): the success path keeps no copy.
#[cold]
#[inline(never)]
fn moved(e: PostError) -> PostError {
    e
}

/// A queue pair (`struct ibv_qp`). Cloning shares it.
#[derive(Clone)]
pub struct Qp {
    repr: Repr,
}

/// What a [`Qp`] is: the soft device's, or (feature `rdma-core`) one of the rdma-core
/// backend. Without the feature the one variant costs nothing; with it the soft post
/// path pays one predictable branch.
#[derive(Clone)]
enum Repr {
    Soft(Arc<QpInner>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn native::NativeQp>),
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qp_num", &self.qp_num())
            .field("qp_type", &self.qp_type())
            .field("state", &self.state())
            .finish()
    }
}

/// The capabilities a QP is granted for a request (ibv_create_qp(3) writes them back).
fn grant_cap(init: &QpInit<'_>) -> Result<QpCap> {
    let c = init.cap;
    let lim = |what, got: u32, max: u32| {
        if got > max {
            Err(Error::Limit { verb: "create_qp", what, max: max.into(), got: got.into() })
        } else {
            Ok(())
        }
    };
    lim("max_send_wr", c.max_send_wr, limits::MAX_QP_WR)?;
    lim("max_send_sge", c.max_send_sge, limits::MAX_SGE)?;
    lim("max_inline_data", c.max_inline_data, limits::MAX_INLINE_DATA)?;
    if init.qp_type == QpType::XrcRecv {
        // XRC targets have no queues of their own (IBTA Annex A14).
        return Ok(QpCap::default());
    }
    // XRC initiators are send-only: their receive caps are forced to 0.
    let no_rq = init.srq.is_some() || init.qp_type == QpType::XrcSend;
    if !no_rq {
        lim("max_recv_wr", c.max_recv_wr, limits::MAX_QP_WR)?;
        lim("max_recv_sge", c.max_recv_sge, limits::MAX_SGE)?;
    }
    let send_sge = c.max_send_sge.max(1);
    Ok(QpCap {
        max_send_wr: c.max_send_wr.max(1),
        max_recv_wr: if no_rq { 0 } else { c.max_recv_wr.max(1) },
        max_send_sge: send_sge,
        max_recv_sge: if no_rq { 0 } else { c.max_recv_sge.max(1) },
        max_inline_data: sq::granted_inline(send_sge, c.max_inline_data),
    })
}

impl Qp {
    /// A QP of PD `pd` on device `dev` (ibv_create_qp(3)).
    pub(crate) fn new(pd: Arc<PdCore>, init: &QpInit<'_>, dev: &'static dyn QpDevice) -> Result<Self> {
        if init.qp_type == QpType::XrcRecv {
            return Err(Error::invalid("create_qp", Rule::XrcTgtNeedsXrcd));
        }
        Self::new_in(pd, init, None, dev, None)
    }

    /// As [`Qp::new`], for a QP created on the parent domain `parent` holds.
    pub(crate) fn new_on_parent(
        pd: Arc<PdCore>,
        init: &QpInit<'_>,
        dev: &'static dyn QpDevice,
        parent: ParentHold,
    ) -> Result<Self> {
        if init.qp_type == QpType::XrcRecv {
            return Err(Error::invalid("create_qp", Rule::XrcTgtNeedsXrcd));
        }
        Self::new_in(pd, init, None, dev, Some(parent))
    }

    /// Runs `f` with the hold on the parent domain the QP was created on, if any.
    pub(crate) fn parent_use<R>(&self, f: impl FnOnce(Option<&ParentHold>) -> R) -> R {
        match self.inner() {
            Ok(q) => f(q.parent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref()),
            Err(_) => f(None),
        }
    }

    /// As [`Qp::new`], for an XRC target QP of domain `xrcd` too, and for a QP created on
    /// a parent domain (`parent`, held until the QP is destroyed), whose allocator, if
    /// any, gives the send queue's ring (docs/memory.md, "Custom allocators").
    pub(crate) fn new_in(
        pd: Arc<PdCore>,
        init: &QpInit<'_>,
        xrcd: Option<Arc<XrcdCore>>,
        dev: &'static dyn QpDevice,
        parent: Option<ParentHold>,
    ) -> Result<Self> {
        if let Some(e) = crate::fault_plan::fail(pd.endpoint().slot, Verb::CreateQp, None, None) {
            return Err(e);
        }
        match init.qp_type {
            QpType::Rc | QpType::Uc | QpType::Ud | QpType::XrcSend | QpType::XrcRecv => {}
            _ => return Err(Error::unsupported("create_qp", "this QP type")),
        }
        if init.qp_type == QpType::XrcSend && init.srq.is_some() {
            return Err(Error::invalid("create_qp", Rule::XrcIniReceives));
        }
        if let Some(ops) = init.send_ops {
            if !batch::SendOps::allowed_on(init.qp_type).contains(ops) {
                return Err(Error::unsupported("create_qp_ex", "send_ops_flags for this QP type"));
            }
        }
        let ctx = &pd.ctx;
        for cq in [init.send_cq, init.recv_cq] {
            if !Arc::ptr_eq(&cq.inner()?.ctx, ctx) {
                return Err(Error::invalid("create_qp", Rule::ForeignContext { what: "CQ" }));
            }
        }
        if let Some(srq) = init.srq {
            if !Arc::ptr_eq(&srq.inner().pd.ctx, ctx) {
                return Err(Error::invalid("create_qp", Rule::ForeignContext { what: "SRQ" }));
            }
        }
        let cap = grant_cap(init)?;
        // Asked before anything else is taken: a failure here leaves nothing to undo, and
        // a later failure drops the ring, which gives the buffer back to the allocator.
        let ring = sq::Ring::new(
            cap.max_send_wr,
            cap.max_send_sge,
            cap.max_inline_data,
            parent.as_ref().and_then(|p| p.alloc.as_ref()),
        )?;
        let (qps, endpoint) = (dev.qps(), pd.endpoint());
        let qpn = qps.reserve()?;
        if let Err(e) = endpoint.tables.reserve_qp(qpn) {
            qps.remove(qpn);
            return Err(e);
        }
        let attach = || -> Result<()> {
            pd.hold()?;
            if let Err(e) = init.send_cq.inner()?.attach() {
                pd.release();
                return Err(e);
            }
            if let Err(e) = init.recv_cq.inner()?.attach() {
                init.send_cq.inner()?.detach();
                pd.release();
                return Err(e);
            }
            Ok(())
        };
        if let Err(e) = attach() {
            qps.remove(qpn);
            return Err(e);
        }
        if let Some(srq) = init.srq {
            srq.inner().attach_qp(init.recv_cq.inner()?);
        }
        if let Some(x) = &xrcd {
            x.hold();
        }
        let attrs = QpAttr { cap, ..QpAttr::default() };
        let rq = if cap.max_recv_wr > 0 {
            match RecvQueue::new(&endpoint.dir.join(recv_ring::qp_segment_name(qpn, 1)), cap.max_recv_wr, cap.max_recv_sge, endpoint) {
                Ok(rq) => Some(rq),
                Err(e) => {
                    init.send_cq.inner()?.detach();
                    init.recv_cq.inner()?.detach();
                    if let Some(srq) = init.srq {
                        srq.inner().detach_qp(init.recv_cq.inner()?);
                    }
                    if let Some(x) = &xrcd {
                        x.release();
                    }
                    pd.release();
                    qps.remove(qpn);
                    return Err(e);
                }
            }
        } else {
            None
        };
        if let Some(stats) = endpoint.stats {
            // Without room for the record's page the QP is simply not counted: creating
            // it must not fail for an observation.
            if let Err(e) = stats.claim_qp(qpn) {
                tracing::warn!(%e, qpn, "no stats record: this QP is not counted");
            }
        }
        let rec = endpoint.tables.qp(qpn);
        let _ = rec.transition(qpn, || Some(endpoint.slot), transition::Expect::Any, QpState::Reset, transition::Cause::Create);
        rec.qp_type.store(init.qp_type.raw(), Ordering::Relaxed);
        rec.access.store(0, Ordering::Relaxed);
        rec.qkey.store(0, Ordering::Relaxed);
        rec.min_rnr_timer.store(0, Ordering::Relaxed);
        rec.max_dest_rd_atomic.store(0, Ordering::Relaxed);
        rec.pd.store(pd.id, Ordering::Relaxed);
        rec.srqn.store(init.srq.map_or(0, |s| s.srq_num()), Ordering::Relaxed);
        rec.rq_gen.store(u32::from(rq.is_some()), Ordering::Relaxed);
        rec.recv_cq.store(init.recv_cq.inner()?.id, Ordering::Relaxed);
        rec.xrcd.store(xrcd.as_ref().map_or(0, |x| x.key), Ordering::Relaxed);
        rec.ctx.store(ctx.id, Ordering::Relaxed);
        // A QP made while the port is down takes nothing either (docs/fault-injection.md).
        rec.flags.store(if crate::fault_plan::port_down(pd.endpoint().slot) { QP_FLAG_PORT_DOWN } else { 0 }, Ordering::Relaxed);
        rec.path_mtu.store(Mtu::Mtu256.bytes(), Ordering::Relaxed);
        rec.dest_qpn.store(0, Ordering::Relaxed);
        rec.set_dgid(Gid::default());
        rec.qpn.store(qpn, Ordering::Release);
        let inner = Arc::new(QpInner {
            pd: pd.clone(),
            dev,
            qp_type: init.qp_type,
            qpn,
            send_cq: init.send_cq.inner()?.clone(),
            recv_cq: init.recv_cq.inner()?.clone(),
            srq: init.srq.map(|s| s.inner().clone()),
            xrcd,
            sq_sig_all: init.sq_sig_all,
            cap,
            send_ops: init.send_ops,
            rec,
            attrs: Mutex::new(attrs),
            sq: crate::spin::SpinMutex::new(SendQueue::new(ring, dev.new_path())),
            batch_spare: Box::new(crate::spin::SpinMutex::new(batch::BatchBuf::default())),
            sq_pending: AtomicBool::new(false),
            host_peer_writes: AtomicBool::new(false),
            rq,
            net_resp: Mutex::new(NetResponder::default()),
            rq_flushed: AtomicBool::new(false),
            sqd_notified: AtomicBool::new(false),
            mcast_attached: AtomicU32::new(0),
            async_events: EventCounter::default(),
            destroyed: AtomicBool::new(false),
            view_writes: AtomicU64::new(0),
            cookie: AtomicUsize::new(0),
            qp_context: AtomicUsize::new(init.qp_context),
            parent: Mutex::new(parent),
            endpoint,
        });
        qps.publish(qpn, &inner);
        if crate::sanitizer::on() {
            let id = crate::sanitizer::Id::new(endpoint.slot, qpn);
            crate::sanitizer::created(crate::sanitizer::Kind::Qp, id, None);
            if let Some(srq) = init.srq {
                crate::sanitizer::qp_uses_srq(id, id.with(srq.srq_num()));
            }
            // Every receive completes; a send only when signaled, which only sq_sig_all
            // promises at creation (an application that signals one send in n sizes
            // its CQ for those: ibv_xsrq_pingpong, perftest).
            let (send_cq, recv_cq) = (init.send_cq.inner()?.id, init.recv_cq.inner()?.id);
            let sends = if init.sq_sig_all { cap.max_send_wr } else { 0 };
            use crate::sanitizer::Queue;
            crate::sanitizer::completes_to(endpoint.slot, &[(send_cq, Queue::Send, qpn, sends), (recv_cq, Queue::Recv, qpn, cap.max_recv_wr)]);
        }
        Ok(Qp { repr: Repr::Soft(inner) })
    }

    pub(crate) fn from_inner(inner: Arc<QpInner>) -> Self {
        Qp { repr: Repr::Soft(inner) }
    }

    /// A QP of the rdma-core backend.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(qp: Arc<dyn native::NativeQp>) -> Self {
        Qp { repr: Repr::Native(qp) }
    }

    /// The PD the QP belongs to, soft or the backend's.
    pub(crate) fn parent(&self) -> crate::mr::domain::PdOf {
        match &self.repr {
            Repr::Soft(inner) => crate::mr::domain::PdOf::Soft(inner.pd.clone()),
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => crate::mr::domain::PdOf::Native(qp.pd()),
        }
    }

    /// The soft QP's state; `EOPNOTSUPP` for a QP of the rdma-core backend (what its
    /// caller does, the backend does not offer).
    pub(crate) fn inner(&self) -> Result<&Arc<QpInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(Error::native_unsupported("a verb of the soft device")),
        }
    }

    /// The QP number (24 bits, unique on the device).
    pub fn qp_num(&self) -> u32 {
        match &self.repr {
            Repr::Soft(inner) => inner.qpn,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.qp_num(),
        }
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        match &self.repr {
            Repr::Soft(inner) => inner.qp_type,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.qp_type(),
        }
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        match &self.repr {
            Repr::Soft(inner) => inner.state(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.state(),
        }
    }

    /// The capabilities granted at creation (ibv_create_qp(3) writes them back).
    pub fn cap(&self) -> QpCap {
        match &self.repr {
            Repr::Soft(inner) => inner.cap,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.cap(),
        }
    }

    /// The `qp_context` given at creation.
    pub fn qp_context(&self) -> usize {
        match &self.repr {
            Repr::Soft(inner) => inner.qp_context.load(Ordering::Relaxed),
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.qp_context(),
        }
    }

    /// Whether signaling is for all send work requests.
    pub fn sq_sig_all(&self) -> bool {
        match &self.repr {
            Repr::Soft(inner) => inner.sq_sig_all,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.sq_sig_all(),
        }
    }

    /// Changes attributes and possibly the state (ibv_modify_qp(3)).
    ///
    /// Rule: the transition and the attribute mask must match the IBTA state table
    /// (`rverbs_proto::state`); otherwise `EINVAL`.
    /// Rule: on Ethernet (RoCE) ports an address vector needs a GRH; `path_mtu` ≤ 4096;
    /// `max_rd_atomic` ≤ 128; `timeout` ≤ 31 (rxe `rxe_qp_chk_attr`); `max_rd_atomic`
    /// and `max_dest_rd_atomic` are rounded up to a power of two (rxe).
    /// Rule: → ERR flushes every outstanding work request with WR_FLUSH_ERR; → RESET
    /// discards them without completions; RTS → SQD stops starting new sends and raises
    /// SQ_DRAINED once none is in progress.
    /// Rule: the call is validated, then planned, then applied once its state change is
    /// won (`qp::state`): if another writer (a peer's ERR, a failed send's SQE) changed the
    /// state in between, the call fails and no attribute it named has changed.
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let q = match &self.repr {
            Repr::Soft(q) => q,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => return qp.modify(attr, mask),
        };
        if let Some(e) = crate::fault_plan::fail(q.slot(), Verb::ModifyQp, Some(q.qpn), None) {
            return Err(e);
        }
        let mut a = q.attrs.lock().expect("qp attrs");
        let cur = q.state();
        let (to, mask) = q.validate_modify(cur, attr, mask)?;
        let plan = q.plan_modify(&a, attr, cur, to, mask);
        if let Some(ip) = plan.new_network_destination() {
            // The kernel gives the neighbour one second (rdma_addr_find_l2_eth_by_grh).
            crate::neigh::resolve_blocking(ip, std::time::Duration::from_secs(1))
                .map_err(|errno| Error::Unreachable { verb: "modify_qp", dgid: crate::gid::Gid::from_ip(ip), errno })?;
        }
        #[cfg(test)]
        q.run_before_apply();
        q.apply_modify(&mut a, plan, attr)?;
        drop(a);
        q.raise_injected(Verb::ModifyQp, [None]);
        Ok(())
    }

    /// The QP's attributes (ibv_query_qp(3)); `cur_qp_state` and `qp_state` are the real
    /// state and `sq_draining` says whether an SQD drain is under way. On the rdma-core
    /// backend, ibv_query_qp(3) with every attribute; should the provider fail it (a QP
    /// it lost), the default attributes with the state the QP was last left in.
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn query(&self) -> QpAttr {
        let q = match &self.repr {
            Repr::Soft(q) => q,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => {
                return qp.query().unwrap_or_else(|_| QpAttr { qp_state: qp.state(), cur_qp_state: qp.state(), cap: qp.cap(), ..QpAttr::default() })
            }
        };
        let mut a = *q.attrs.lock().expect("qp attrs");
        let state = q.state();
        a.qp_state = state;
        a.cur_qp_state = state;
        a.cap = q.cap;
        if state == QpState::Sqd {
            a.sq_draining = u8::from(!q.sq.lock().is_empty());
        }
        a
    }

    /// Posts send work requests (ibv_post_send(3)). Each executes at once if the QP can
    /// run it (in-process peers complete inside this call), else when it can.
    ///
    /// Rule: posting in RESET, INIT or RTR is refused with EINVAL (rxe `rxe_post_send`);
    /// in ERR the requests are accepted and flushed.
    /// Errors: [`PostError`] names the first refused request; the ones before it stay
    /// posted.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.post_send_inner(wrs, true)
    }

    /// Posts send work requests as [`Qp::post_send`], naming memory regions by key only:
    /// the requests do not keep their regions registered until they complete.
    ///
    /// Rule: ibv_post_send(3) / ibv_dereg_mr(3) in C: a request holds no reference to
    /// the regions its lkeys name, so a region deregistered while the request is pending
    /// is gone when it executes and the request completes in error, where
    /// [`Qp::post_send`] keeps the region registered until the request completes.
    /// Errors: as [`Qp::post_send`].
    pub fn post_send_unpinned(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.post_send_inner(wrs, false)
    }

    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    fn post_send_inner(&self, wrs: &[SendWr<'_>], keep: bool) -> Result<(), PostError> {
        let q = match &self.repr {
            Repr::Soft(q) => q,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => return qp.post_send(wrs),
        };
        if crate::sanitizer::on() {
            return self.post_send_sanitized(q, wrs, keep);
        }
        self.post_send_plain(q, wrs, keep)
    }

    /// [`Qp::post_send`] with the sanitizer on (docs/sanitizer.md): a post the QP's state
    /// cannot execute is reported (the verb's answer unchanged); the work requests are
    /// recorded before the post, so a completion another thread polls meanwhile finds
    /// them, and those the post refused are forgotten after it. Out of line: the post
    /// path only tests the switch.
    #[cold]
    #[inline(never)]
    fn post_send_sanitized(&self, q: &Arc<QpInner>, wrs: &[SendWr<'_>], keep: bool) -> Result<(), PostError> {
        let state = q.state();
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            crate::sanitizer::bad_state_post("ibv_post_send", crate::sanitizer::Queue::Send, q.sanitizer_id(), state, wrs.first().map(|w| w.wr_id));
            return self.post_send_plain(q, wrs, keep);
        }
        if !wrs.is_empty() {
            crate::sanitizer::send_posting(q.sanitizer_id(), q.cap.max_send_wr);
        }
        let ticket = wr::track_sends(q.endpoint, q.qpn, q.sq_sig_all, wrs);
        let result = self.post_send_plain(q, wrs, keep);
        if let Err(e) = &result {
            crate::sanitizer::unposted(crate::sanitizer::Queue::Send, q.sanitizer_id(), ticket, e.index);
        }
        result
    }

    #[inline(always)]
    fn post_send_plain(&self, q: &Arc<QpInner>, wrs: &[SendWr<'_>], keep: bool) -> Result<(), PostError> {
        let state = q.state();
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError { index: 0, error: Error::QpStateForbids { verb: "post_send", state } });
        }
        // The fault plan's refusal, if any: the requests before the one it names are posted.
        let (wrs, mut result) = match crate::fault_plan::fail_post(q.slot(), Verb::PostSend, Some(q.qpn), wrs.iter().map(|w| w.wr_id)) {
            Some((index, error)) => (&wrs[..index], Err(PostError { index, error })),
            None => (wrs, Ok(())),
        };
        let endpoint = q.endpoint;
        let mut sq = q.sq.lock();
        // The express lane (docs/queue-pairs.md): RTS, no fault plan, no sanitizer (its
        // tracking follows the queue); each request it takes is complete on return.
        let express = state == QpState::Rts && !crate::fault_plan::active() && !crate::sanitizer::on();
        let mut queued = false;
        for (index, wr) in wrs.iter().enumerate() {
            if express && !queued {
                let done = match endpoint.stats {
                    None => q.express(&mut sq, wr),
                    Some(stats) => q.express_counted(stats, &mut sq, wr),
                };
                if done {
                    continue;
                }
            }
            queued = true;
            if let Err(error) = sq.push(endpoint, q.pd.id, q.qp_type, wr, keep) {
                result = Err(PostError { index, error });
                break;
            }
            // The fault plan's failed or held-back completion, if any
            // (docs/fault-injection.md); without a plan, one relaxed load.
            if crate::fault_plan::active() {
                if let Some(status) = crate::fault_plan::complete(q.slot(), q.qpn, wr.wr_id) {
                    sq.ring.fail_newest(status);
                }
                if let Some(delay) = crate::fault_plan::hold(q.slot(), q.qpn, wr.wr_id) {
                    sq.ring.hold_newest(delay);
                }
            }
        }
        // Requests the express lane completed left nothing for the queue to run.
        q.progress_and_release(sq, queued || !express || wrs.is_empty());
        let posted = result.as_ref().err().map_or(wrs.len(), |e| e.index);
        if let Some(stats) = endpoint.stats {
            stats.sends_posted(q.qpn, posted);
        }
        q.raise_injected(Verb::PostSend, wrs[..posted].iter().map(|w| Some(w.wr_id)));
        fresh(result)
    }

    /// Posts receive work requests (ibv_post_recv(3)).
    ///
    /// Rule: refused with EINVAL in RESET and on a QP that uses an SRQ; in ERR the
    /// receives are accepted and flushed at once. Each region the scatter lists name
    /// stays registered until the receive's completion is polled, even if every `Mr`
    /// handle is dropped before (NOTES: the buffers are the program's once the
    /// completion is retrieved; docs/memory.md, "Buffer lifetime").
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_inner(wrs, true)
    }

    /// Posts receive work requests as [`Qp::post_recv`], naming memory regions by key
    /// only.
    ///
    /// Rule: as [`Qp::post_send_unpinned`]: a region deregistered while the receive is
    /// pending makes the receive complete in error instead of staying registered.
    /// Errors: as [`Qp::post_recv`].
    pub fn post_recv_unpinned(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_inner(wrs, false)
    }

    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    fn post_recv_inner(&self, wrs: &[RecvWr<'_>], keep: bool) -> Result<(), PostError> {
        let q = match &self.repr {
            Repr::Soft(q) => q,
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => return qp.post_recv(wrs),
        };
        if crate::sanitizer::on() {
            return self.post_recv_sanitized(q, wrs, keep);
        }
        self.post_recv_plain(q, wrs, keep)
    }

    /// [`Qp::post_recv`] with the sanitizer on, as [`Qp::post_send_sanitized`].
    #[cold]
    #[inline(never)]
    fn post_recv_sanitized(&self, q: &Arc<QpInner>, wrs: &[RecvWr<'_>], keep: bool) -> Result<(), PostError> {
        let state = q.state();
        if state == QpState::Reset {
            crate::sanitizer::bad_state_post("ibv_post_recv", crate::sanitizer::Queue::Recv, q.sanitizer_id(), state, wrs.first().map(|w| w.wr_id));
            return self.post_recv_plain(q, wrs, keep);
        }
        // read-before-completion (docs/sanitizer.md): receives of the C ABI on a QP that
        // answers 0 for SENDs are placed late, through a staging region.
        let staged = (!keep
            && crate::fault::GUARDED
            && !crate::fault_plan::active()
            && q.srq.is_none()
            && q.rq.is_some()
            && state != QpState::Err
            && self.in_order_caps(WrOpcode::Send, 0) == 0
            && crate::sanitizer::early::may_stage(q.sanitizer_id()))
        .then(|| crate::rings::staging::stage(&q.pd, q.qpn, wrs));
        let ticket = wr::track_recvs(q.endpoint, crate::sanitizer::Queue::Recv, q.qpn, wrs, staged.as_ref().map(|s| &s.ids[..]));
        let r = match &staged {
            Some(s) => self.post_recv_plain(q, &s.apply(wrs), keep),
            None => self.post_recv_plain(q, wrs, keep),
        };
        if let Err(e) = &r {
            crate::sanitizer::unposted(crate::sanitizer::Queue::Recv, q.sanitizer_id(), ticket, e.index);
            if let Some(s) = &staged {
                crate::sanitizer::early::discard(s.ids.get(e.index..).unwrap_or(&[]));
            }
        }
        r
    }

    #[inline(always)]
    fn post_recv_plain(&self, q: &Arc<QpInner>, wrs: &[RecvWr<'_>], keep: bool) -> Result<(), PostError> {
        let state = q.state();
        if state == QpState::Reset {
            return Err(PostError { index: 0, error: Error::QpStateForbids { verb: "post_recv", state } });
        }
        let Some(rq) = &q.rq else {
            return Err(PostError {
                index: 0,
                error: Error::invalid("post_recv", Rule::NoReceiveQueue),
            });
        };
        let keys = keep.then_some(&q.endpoint.keys);
        // A count of takes the receive CQ's poll heard spares the post the takers' line
        // (`rings::recv_count`).
        let heard = q.recv_cq.heard.count_for(rq.ring().tag());
        let r = match crate::fault_plan::fail_post(q.slot(), Verb::PostRecv, Some(q.qpn), wrs.iter().map(|w| w.wr_id)) {
            // The fault plan's refusal: the requests before the one it names are posted.
            Some((index, error)) => rq.post(&wrs[..index], keys, "post_recv", heard).and(Err(PostError { index, error })),
            None if q.bounces_receives(state) => rq.post_bounced(wrs, keys, "post_recv", heard, &q.pd),
            None => rq.post(wrs, keys, "post_recv", heard),
        };
        if q.state() == QpState::Err {
            q.flush_rq();
        }
        let posted = r.as_ref().err().map_or(wrs.len(), |e| e.index);
        if let Some(stats) = q.endpoint.stats {
            stats.recvs_posted(q.qpn, posted);
        }
        q.raise_injected(Verb::PostRecv, wrs[..posted].iter().map(|w| Some(w.wr_id)));
        fresh(r)
    }

    /// Binds a type 1 memory window (ibv_bind_mw(3)) by posting a BIND_MW work request;
    /// returns the window's new rkey (`ibv_inc_rkey` of the old one), which remote peers
    /// use once the bind completed. A zero-length bind with no region unbinds.
    ///
    /// Errors: `EINVAL` for a type 2 window, a region missing with a non-zero range, or
    /// ZERO_BASED; `EPERM` if the region and the window are in different PDs; post errors
    /// as [`Qp::post_send`]. A bind that fails its checks completes with MW_BIND_ERR.
    pub fn bind_mw(
        &self,
        mw: &crate::mw::Mw,
        bind: &crate::mw::MwBind<'_>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<u32> {
        let verb = "bind_mw";
        if mw.mw_type() != crate::mw::MwType::Type1 {
            return Err(Error::invalid(verb, Rule::BindType1Only));
        }
        if bind.mr.is_none() && (bind.addr != 0 || bind.length != 0) {
            return Err(Error::invalid(verb, Rule::BindNeedsMr));
        }
        if let Some(mr) = bind.mr {
            if !Arc::ptr_eq(&mr.inner()?.pd(), &mw.inner().pd) {
                return Err(Error::PermissionDenied { verb, why: "region and window in different PDs" });
            }
        }
        if bind.access.contains(Access::ZERO_BASED) {
            return Err(Error::invalid(verb, Rule::Type1ZeroBased));
        }
        let posted = &mw.inner().posted_rkey;
        let rkey = crate::mw::inc_rkey(posted.load(Ordering::Acquire));
        let wr = SendWr { flags, ..SendWr::bind_mw(wr_id, mw, rkey, *bind) };
        self.post_send_unpinned(&[wr]).map_err(|e| e.error)?;
        posted.store(rkey, Ordering::Release);
        Ok(rkey)
    }

    /// Whether data placed for `op` at this QP is written in order
    /// (ibv_query_qp_data_in_order(3)).
    ///
    /// Rule: with `flags` 0 the answer is 1 if whole messages are written in order, else
    /// 0; with `IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS` (1) it is a mask of WHOLE_MSG (1)
    /// and ALIGNED_128_BYTES (2); unknown flag bits give 0. Only RDMA READ (data placed
    /// at this QP by its own reads), RDMA WRITE and SEND (data placed by peers) are
    /// answered, for the QP types that carry them; other opcodes give 0.
    /// rverbs places data with its ordered copy (`mem::copy`), in increasing address order on
    /// x86-64; elsewhere it claims nothing. One path is not ordered: a peer process
    /// writing into this process's private memory with cross-memory attach (a kernel
    /// copy). So RDMA WRITE and SEND, which peers place here, are claimed only if the
    /// QP's writer is this process (a connected QP whose destination is here), or no
    /// region of this process is reached that way now (regions allocated by the library
    /// or made shareable, `RVERBS_SHARED_MR=1`, or `RVERBS_CMA=off`). RDMA READ responses
    /// are always placed by this process's ordered copy.
    ///
    /// On the rdma-core backend: 0, no guarantee (rverbs does not know the provider's).
    /// With the sanitizer on, SENDs are answered 0 while receives it places late are
    /// outstanding, and once 1 was answered for them the QP's receives are never placed
    /// late (docs/sanitizer.md, read-before-completion).
    pub fn data_in_order(&self, op: WrOpcode, flags: u32) -> u32 {
        if crate::sanitizer::on() && matches!(op, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv) {
            return self.data_in_order_sanitized(op, flags);
        }
        self.in_order_caps(op, flags)
    }

    #[cold]
    #[inline(never)]
    fn data_in_order_sanitized(&self, op: WrOpcode, flags: u32) -> u32 {
        let Ok(q) = self.inner() else { return 0 };
        if crate::sanitizer::early::staged_on(q.sanitizer_id()) {
            return 0;
        }
        let a = self.in_order_caps(op, flags);
        if a != 0 {
            crate::sanitizer::early::told_in_order(q.sanitizer_id());
        }
        a
    }

    fn in_order_caps(&self, op: WrOpcode, flags: u32) -> u32 {
        let Ok(q) = self.inner() else { return 0 };
        const RETURN_CAPS: u32 = 1;
        const WHOLE_MSG: u32 = 1;
        const ALIGNED_128: u32 = 2;
        if flags & !RETURN_CAPS != 0 {
            return 0;
        }
        // Every transport places a message with the same ordered copy (UD: the GRH area
        // first, then the payload), so the answer depends on the opcode only — and on the
        // opcode being legal on this QP type.
        let answered = matches!(
            op,
            WrOpcode::RdmaRead
                | WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
                | WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::SendWithInv
        ) && (op.allowed_on(q.qp_type) || q.qp_type == QpType::XrcRecv);
        let placed_by_peers = op != WrOpcode::RdmaRead;
        let ordered = crate::mem::ORDERED && (!placed_by_peers || Self::writer_is_here(q) || !q.endpoint.peers_copy_unordered());
        let caps = if answered && ordered { WHOLE_MSG | ALIGNED_128 } else { 0 };
        if flags & RETURN_CAPS != 0 {
            caps
        } else {
            u32::from(caps & WHOLE_MSG != 0)
        }
    }

    /// Whether only this process can write into this QP: it is connected (RTR or later)
    /// to a QP of this process.
    fn writer_is_here(q: &QpInner) -> bool {
        if !matches!(q.qp_type, QpType::Rc | QpType::Uc | QpType::XrcRecv) {
            return false;
        }
        let dest = q.attrs.lock().expect("qp attrs").dest_qp_num;
        transition::accepts_requests(q.state())
            && crate::table::endpoint_of(dest) == q.endpoint.ep()
    }

    /// Destroys the QP (ibv_destroy_qp(3)) after every asynchronous event delivered for
    /// it has been acknowledged. Outstanding work requests are discarded without
    /// completions; peers sending to it see no response.
    ///
    /// Errors: `EINVAL` once destroyed (then every call through any handle is `EINVAL`);
    /// `EBUSY` while attached to a multicast group. On the rdma-core backend, the
    /// provider's ibv_destroy_qp(3), after the calls in progress through other handles
    /// return; an error leaves the QP usable (docs/rdma-core-backend.md).
    pub fn destroy(&self) -> Result<()> {
        #[cfg(feature = "rdma-core")]
        if let Repr::Native(qp) = &self.repr {
            return qp.destroy();
        }
        let q = self.soft("destroy_qp")?;
        if q.mcast_attached.load(Ordering::Acquire) != 0 {
            return Err(Error::Busy { what: "queue pair attached to a multicast group" });
        }
        if q.destroyed.swap(true, Ordering::AcqRel) {
            return Err(Error::Destroyed { what: "queue pair" });
        }
        if crate::sanitizer::on() {
            // Before the move to RESET discards them (docs/sanitizer.md): the requests the
            // device still holds.
            let unfinished: Vec<u64> = {
                let sq = q.sq.lock();
                (0..sq.len()).filter_map(|i| sq.ring.nth(i).map(|(w, ..)| w.wr_id)).collect()
            };
            crate::sanitizer::destroying_qp(q.sanitizer_id(), q.state(), &unfinished);
        }
        // docs/network.md, "Coalesced ACKs": what the responder holds leaves before the QP goes.
        q.sq.lock().link.release_acks(q);
        q.rec.qpn.store(0, Ordering::Release);
        if let Some(stats) = q.endpoint.stats {
            stats.release_qp(q.qpn);
        }
        // Read while the QP still names its peer (the move to RESET forgets it): a dead
        // peer's placement is not waited for below.
        if let Some(rq) = &q.rq {
            drop(q.reclaim_from_dead_peer(rq));
        }
        let _ = q.transition(transition::Expect::Any, QpState::Reset, transition::Cause::Destroy);
        q.dev.qps().remove(q.qpn);
        let lent = {
            let mut sq = q.sq.lock();
            sq.clear();
            // A ring from the parent domain's allocator goes back to it now, outside the
            // lock (ibv_alloc_parent_domain(3): buffers are freed with the resource).
            sq.ring.lent().then(|| {
                let empty = sq.ring.emptied();
                std::mem::replace(&mut sq.ring, empty)
            })
        };
        drop(lent);
        // Nothing is taken from the queue any more; a SEND from another host that was
        // half placed is dropped (its receive discarded, as the others), and the network
        // responder serves nothing more: with an SRQ too, whose receive it holds counts
        // in the SRQ's ring (ibv_destroy_srq(3) waited for it, 2 s, before this). Then the
        // messages being placed into receives taken before (the queued way) finish: the
        // program may free the receive buffers once this returns.
        if let Some(rq) = &q.rq {
            rq.close();
        }
        {
            let mut nr = q.net_resp.lock().expect("net responder");
            nr.closed = true;
            drop(nr.held.take());
        }
        if let Some(rq) = &q.rq {
            rq.ring().wait_placed();
            rq.park_placed();
        }
        if crate::sanitizer::on() {
            let unacked = q.async_events.unacked();
            if unacked > 0 {
                crate::sanitizer::unacked(true, crate::sanitizer::Kind::Qp, q.sanitizer_id(), unacked, "ibv_destroy_qp");
            }
            crate::sanitizer::gone(crate::sanitizer::Kind::Qp, q.sanitizer_id());
            crate::rings::staging::qp_gone(&q.pd, q.qpn);
        }
        q.async_events.wait_all_acked();
        q.send_cq.detach();
        q.recv_cq.detach();
        if let Some(srq) = &q.srq {
            // A dead peer's takes for this QP complete nowhere now, nor hold the SRQ's
            // destroy (`SrqInner::reclaim_dead_takes`).
            srq.reclaim_dead_takes(Some(q.qpn), |_| true);
            srq.detach_qp(&q.recv_cq);
        }
        if let Some(x) = &q.xrcd {
            x.release();
        }
        q.pd.release();
        drop(q.parent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        Ok(())
    }

    /// Acknowledges `n` asynchronous events about this QP (ibv_ack_async_event(3)).
    /// Nothing on the rdma-core backend, which delivers no asynchronous event.
    pub fn ack_async_events(&self, n: u32) {
        if let Ok(q) = self.inner() {
            q.async_events.ack(n);
        }
    }

    /// The word the owner of the QP attached with [`Qp::set_cookie`] (0 until then).
    ///
    /// Rule: every handle of the QP, also one handed back by an asynchronous event
    /// ([`crate::AsyncElement`]), reads the same word; rverbs never interprets it (a
    /// language binding keeps the address of its own QP object here, as `container_of`
    /// does for a C provider).
    pub fn cookie(&self) -> usize {
        match &self.repr {
            Repr::Soft(q) => q.cookie.load(Ordering::Acquire),
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.cookie(),
        }
    }

    /// Attaches an opaque word to the QP, read back by [`Qp::cookie`] on any handle.
    pub fn set_cookie(&self, value: usize) {
        match &self.repr {
            Repr::Soft(q) => q.cookie.store(value, Ordering::Release),
            #[cfg(feature = "rdma-core")]
            Repr::Native(qp) => qp.set_cookie(value),
        }
    }

    /// What the owner posted on this QP and polled of its completions
    /// ([`crate::QpStats`]; docs/device.md, "Per-QP and per-CQ statistics"): all zero
    /// unless the device counts statistics (`DeviceConfig::stats`, `RVERBS_STATS=1`).
    pub fn stats(&self) -> crate::shm::stats::QpStats {
        let Ok(q) = self.inner() else { return crate::shm::stats::QpStats { qpn: self.qp_num(), ..Default::default() } };
        q.endpoint.stats.and_then(|s| s.qp_stats(q.qpn)).unwrap_or(crate::shm::stats::QpStats { qpn: q.qpn, ..Default::default() })
    }

    /// Send work requests waiting to complete (a snapshot; 0 on the rdma-core backend,
    /// which does not see into a provider's queues).
    pub fn send_queue_len(&self) -> usize {
        self.inner().map_or(0, |q| q.sq.lock().len())
    }

    /// Receive work requests waiting (a snapshot; 0 with an SRQ, and on the rdma-core
    /// backend).
    pub fn recv_queue_len(&self) -> usize {
        self.inner().map_or(0, |q| q.rq.as_ref().map_or(0, RecvQueue::len))
    }

    /// The soft QP's state; `EOPNOTSUPP` naming `verb` on the rdma-core backend.
    #[cfg_attr(not(feature = "rdma-core"), allow(unused_variables))]
    fn soft(&self, verb: &'static str) -> Result<&Arc<QpInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(Error::native_unsupported(verb)),
        }
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            self.rec.qpn.store(0, Ordering::Release);
            if let Some(stats) = self.endpoint.stats {
                stats.release_qp(self.qpn);
            }
            let _ = self.transition(transition::Expect::Any, QpState::Reset, transition::Cause::Destroy);
            if crate::sanitizer::on() {
                crate::sanitizer::gone(crate::sanitizer::Kind::Qp, self.sanitizer_id());
            }
            self.dev.qps().remove(self.qpn);
            self.send_cq.detach();
            self.recv_cq.detach();
            if let Some(srq) = &self.srq {
                srq.detach_qp(&self.recv_cq);
            }
            if let Some(x) = &self.xrcd {
                x.release();
            }
            self.pd.release();
        }
    }
}

impl crate::progress::Timed for QpInner {
    fn fire(self: Arc<Self>) {
        self.kick();
    }
}

impl crate::progress::Kicks for crate::table::Table<QpInner> {
    fn errored_by_peer(&self, qpn: u32) {
        if let Some(qp) = self.get(qpn) {
            qp.errored_by_peer();
        }
    }
}
