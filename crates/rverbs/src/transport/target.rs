//! The responder side of a request, wherever it is: a QP of this process, or a QP of a
//! peer process on this host reached through its shared tables and FIFOs.
//!
//! The responder logic ([`super::host`]) is written once, against [`Target`]; each
//! implementation supplies how to read the responder's attributes, take its receives,
//! complete to its CQ, raise its events and resolve its memory keys. A peer target does all
//! of that without the peer's CPU (docs/queue-pairs.md, "One requester, two links"): the only thing left
//! to the peer is flushing its own send queue when a request pushed the QP into ERR, which
//! the doorbell asks its progress thread to do.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rverbs_proto::verbs::EventType;

use crate::cq::channel;
use crate::rings::cq_segment::{self, CqAt, CqSeg, Publish};
use crate::cq::{CqInner, Overrun};
use crate::notify::{async_fifo_name, RawAsyncEvent, RawElement};
use crate::mr::keyspace::SegCache;
use crate::mr::endpoint::Endpoint;
use crate::mr::KeySpace;
use crate::shm::registry::bell;
use crate::rings::recv_ring::{qp_segment_name, srq_segment_name, Counted, RecvRing, RecvWqe};
use crate::qp::QpInner;
use crate::shm::fifo::send_on;
use crate::shm::registry::Peer;
use crate::shm::tables::{QpRecord, QP_FLAG_COMM_EST};
use crate::qp::srq::SrqInner;
use crate::rings::recv_count::TakenCount;
use crate::rings::tag_list::{Header, TagList};
use crate::rings::wc::Cqe;

/// What the responder logic needs of the QP a request reached.
pub(crate) trait Target {
    /// The responder QP's number.
    fn qpn(&self) -> u32;
    /// Its attributes (state, access, Q_Key, RNR timer, read/atomic resources).
    fn rec(&self) -> &QpRecord;
    /// The PD memory checks use (XRC: the SRQ's).
    fn pd(&self) -> u32;
    /// Its memory keys.
    fn keys(&self) -> KeySpace<'_>;
    /// Takes a receive, from its SRQ or its own receive queue.
    fn take_recv(&self) -> Option<RecvWqe>;
    /// Whether its receives come from a tag-matching SRQ, where a message's first bytes
    /// decide which receive it takes (`crate::rings::tag_list`).
    fn tag_matching(&self) -> bool {
        false
    }
    /// Takes the receive for a message of `msg_len` bytes whose first bytes are `head`
    /// (a tag-matching SRQ matches its header; anything else takes the next receive).
    fn take_for(&self, head: &[u8], msg_len: u64) -> Option<RecvWqe> {
        let _ = (head, msg_len);
        self.take_recv()
    }
    /// The express lane (docs/queue-pairs.md): takes the next receive of the QP's own
    /// receive queue, or of its SRQ (not a tag-matching one, whose list decides), only if
    /// `fits` (which places the message into it) says so; `None` for anything else (an
    /// empty queue, a receive that does not fit), nothing taken. Gives the receive's
    /// `wr_id` and, for the QP's own queue, the count its completion carries to the
    /// queue's owner (`rings::recv_count`). An SRQ's take raises SRQ_LIMIT_REACHED as the
    /// queued way's does.
    fn express_recv(&self, fits: &mut dyn FnMut(&RecvWqe) -> bool) -> Option<(u64, Option<TakenCount>)> {
        let _ = fits;
        None
    }
    /// The completion of the receive [`Target::express_recv`] took is about to be
    /// published at `at`: a peer's take is marked so in the ring
    /// ([`RecvRing::express_completing`], [`RecvRing::express_record_completing`]: the
    /// owner's flush must not complete it again once the CQ shows `at` published).
    fn express_completing(&self, at: CqAt) {
        let _ = at;
    }
    /// The completion of the receive [`Target::express_recv`] took was published (or lost
    /// to an overrun CQ): a peer's take of an SRQ frees its record.
    fn express_completed(&self) {}
    /// Writes a receive completion to its CQ.
    fn complete(&self, cqe: Cqe) -> Result<(), Overrun>;
    /// [`Target::complete`] of the completion of a receive taken, calling `mark` with
    /// where the completion is right before it becomes visible (its words written, the
    /// store that publishes them not yet made). `mark` marks the take as completed in its
    /// ring, with that place ([`RecvWqe::completing`], [`Target::express_completing`]): a
    /// peer that dies before it leaves the receive to the flush of the QP, one that dies
    /// after it has published the completion (the CQ shows that place published), and
    /// one that dies in between leaves the receive to the flush too, so the receive
    /// completes once (docs/failure-model.md, the dead CQ producer). Before, the mark came
    /// before the whole publish — the gate, the reservation, the first write of a slot
    /// line the poller holds — and a peer killed there lost the receive; then, with no
    /// place, a peer killed between the mark and the publish lost it.
    ///
    /// This process's own completions are marked with no place ([`CqAt::UNKNOWN`]): their
    /// producer never dies without the queue's owner.
    fn complete_marking(&self, cqe: Cqe, mark: &dyn Fn(CqAt)) -> Result<(), Overrun> {
        mark(CqAt::UNKNOWN);
        self.complete(cqe)
    }
    /// Moves it to ERR because of a responder-side fault, raising `event` if given.
    fn enter_error(&self, event: Option<EventType>);
    /// A request arrived (COMM_EST for the first one in RTR).
    fn note_inbound(&self);
    /// Invalidates a type 2 memory window of its PD through `rkey` (SEND_WITH_INV).
    fn invalidate(&self, rkey: u32) -> bool;
}

/// A responder QP of this process. For RC/UC/UD the PD, receives and CQ are the QP's
/// own; for XRC those of the XRC SRQ the request names (IBTA Annex A14).
pub(crate) struct LocalTarget {
    pub(crate) qp: Arc<QpInner>,
    /// The PD memory checks use.
    pub(crate) pd: u32,
    /// This process's endpoint, whose keys the PD's regions and windows have.
    pub(crate) endpoint: &'static Endpoint,
    pub(crate) srq: Option<Arc<SrqInner>>,
    pub(crate) cq: Arc<CqInner>,
}

impl LocalTarget {
    pub(crate) fn of(qp: Arc<QpInner>) -> LocalTarget {
        // A tag-matching SRQ's receives complete to the SRQ's CQ.
        let cq = match qp.srq.as_ref().and_then(|s| s.tm.as_ref()) {
            Some((_, cq)) => cq.clone(),
            None => qp.recv_cq.clone(),
        };
        LocalTarget { pd: qp.pd.id, endpoint: qp.endpoint, srq: qp.srq.clone(), cq, qp }
    }
}

impl Target for LocalTarget {
    fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    fn rec(&self) -> &QpRecord {
        self.qp.rec
    }

    fn pd(&self) -> u32 {
        self.pd
    }

    fn keys(&self) -> KeySpace<'_> {
        KeySpace::local(self.endpoint)
    }

    fn take_recv(&self) -> Option<RecvWqe> {
        match &self.srq {
            Some(srq) => srq.take(),
            None => self.qp.rq.as_ref()?.take().map(|t| t.wqe),
        }
    }

    fn tag_matching(&self) -> bool {
        self.srq.as_ref().is_some_and(|s| s.tm.is_some())
    }

    fn express_recv(&self, fits: &mut dyn FnMut(&RecvWqe) -> bool) -> Option<(u64, Option<TakenCount>)> {
        match &self.srq {
            None => self.qp.rq.as_ref()?.ring().take_if(|w| fits(w)).map(|t| (t.wqe.wr_id, t.wqe.taken)),
            Some(srq) => srq.take_if(fits),
        }
    }

    fn take_for(&self, head: &[u8], msg_len: u64) -> Option<RecvWqe> {
        match &self.srq {
            Some(srq) => srq.take_for(head, msg_len),
            None => self.take_recv(),
        }
    }

    // Inline: the completion is then encoded where its builder left it in registers
    // (`rings::wc::CqeWords`).
    #[inline]
    fn complete(&self, cqe: Cqe) -> Result<(), Overrun> {
        self.cq.push(cqe)
    }

    fn enter_error(&self, event: Option<EventType>) {
        self.qp.enter_error(event, crate::qp::transition::Cause::ResponderFault);
    }

    fn note_inbound(&self) {
        self.qp.note_inbound();
    }

    fn invalidate(&self, rkey: u32) -> bool {
        self.endpoint.keys.invalidate_mw(rkey, self.pd)
    }
}

/// Where a peer QP's receives come from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PeerRecv {
    /// Its own receive queue (generation of the segment).
    Rq(u32),
    /// A shared receive queue, by number.
    Srq(u32),
}

/// A responder QP of a peer process, with the peer's segments it uses kept mapped (a
/// requester keeps its target across work requests: see [`super::route`]).
pub(crate) struct PeerTarget {
    /// This process's endpoint, which reaches the peer.
    me: &'static Endpoint,
    pub(crate) peer: Arc<Peer>,
    pub(crate) qpn: u32,
    pub(crate) pd: u32,
    pub(crate) recv: PeerRecv,
    /// The CQ receives complete to.
    pub(crate) cq: u32,
    segs: SegCache,
    /// The receive ring in use and its generation.
    ring: RefCell<Option<(u32, RecvRing)>>,
    /// The CQ segment in use.
    cq_seg: RefCell<Option<CqSeg>>,
    /// A tag-matching SRQ's list, once mapped.
    tags: RefCell<Option<TagList>>,
}

impl PeerTarget {
    pub(crate) fn new(me: &'static Endpoint, peer: Arc<Peer>, qpn: u32, pd: u32, recv: PeerRecv, cq: u32) -> PeerTarget {
        PeerTarget {
            me,
            peer,
            qpn,
            pd,
            recv,
            cq,
            segs: SegCache::default(),
            ring: RefCell::new(None),
            cq_seg: RefCell::new(None),
            tags: RefCell::new(None),
        }
    }

    /// Queues an asynchronous event on the peer's context `ctx`.
    fn raise(&self, ctx: u32, kind: EventType, element: RawElement) {
        raise_on(&self.peer, ctx, kind, element);
    }

    /// QP `qpn` of `peer` with its own receives (its RQ or its SRQ), PD and CQ, as its
    /// record names them, reached from this process's endpoint `me`.
    pub(crate) fn of_qp(me: &'static Endpoint, peer: Arc<Peer>, qpn: u32) -> PeerTarget {
        let rec = peer.tables().qp(qpn);
        let srqn = rec.srqn.load(Ordering::Acquire);
        let recv = if srqn != 0 { PeerRecv::Srq(srqn) } else { PeerRecv::Rq(rec.rq_gen.load(Ordering::Acquire)) };
        let (pd, mut cq) = (rec.pd.load(Ordering::Acquire), rec.recv_cq.load(Ordering::Acquire));
        if srqn != 0 {
            // A tag-matching SRQ's receives complete to the SRQ's CQ.
            let tm_cq = peer.tables().srq(srqn).tm_cq.load(Ordering::Acquire);
            if tm_cq != 0 {
                cq = tm_cq - 1;
            }
        }
        PeerTarget::new(me, peer, qpn, pd, recv, cq)
    }

    /// Whether the peer is alive (for a target used only for its SRQ side).
    pub(crate) fn still_valid_peer(&self) -> bool {
        self.peer.is_alive()
    }

    /// Whether the QP is still the one this target was made for, in a live process.
    pub(crate) fn still_valid(&self) -> bool {
        self.peer.is_alive() && self.rec().qpn.load(Ordering::Acquire) == self.qpn
    }

    /// Takes from the ring of generation `gen` of segment `name`, mapping it if needed,
    /// the receive at its head only if `fits` accepts it ([`RecvRing::take_if`]);
    /// The take is counted as `how` says ([`RecvRing::take_counted`]).
    fn take_from(&self, gen: u32, name: impl FnOnce() -> String, fits: impl FnOnce(&RecvWqe) -> bool, how: Counted) -> Take {
        let mut cached = self.ring.borrow_mut();
        let Some(ring) = self.ring_of(&mut cached, gen, name) else { return Take::Empty };
        if let Some(t) = ring.take_counted(fits, how) {
            return Take::Got(t);
        }
        let next = ring.moved();
        if next != 0 {
            *cached = None;
            return Take::Moved(next);
        }
        Take::Empty
    }

    /// Generation `gen` of the peer's ring (segment `name`), from `cached` or mapped into it.
    fn ring_of<'c>(&self, cached: &'c mut Option<(u32, RecvRing)>, gen: u32, name: impl FnOnce() -> String) -> Option<&'c RecvRing> {
        if cached.as_ref().is_none_or(|(g, _)| *g != gen) {
            let ring = self.peer.segment(&name()).ok().and_then(|s| RecvRing::open(s, self.me).ok())?;
            *cached = Some((gen, ring));
        }
        cached.as_ref().map(|(_, r)| r)
    }
}

/// What taking from a peer's receive ring found.
enum Take {
    Got(crate::rings::recv_ring::Taken),
    Empty,
    /// The ring was replaced (SRQ resize): look in the generation it names.
    Moved(u32),
}

/// Moves QP `qpn` of `peer` to ERR (a responder fault), raising `event` on its context
/// and ringing its doorbell: its receive and send queues are flushed by its own process.
fn peer_enter_error(peer: &Peer, qpn: u32, event: Option<EventType>) {
    use crate::qp::transition::{Cause, Expect, ERR_FROM_ANY_BUT};
    let rec = peer.tables().qp(qpn);
    let to = rverbs_proto::verbs::QpState::Err;
    if rec.transition(qpn, || None, Expect::NotIn(ERR_FROM_ANY_BUT), to, Cause::ResponderFault).is_err() {
        return;
    }
    if let Some(e) = event {
        raise_on(peer, rec.ctx.load(Ordering::Acquire), e, RawElement::Qp(qpn));
    }
    peer.ring(bell::KICK_QP, qpn);
}

/// A request reached QP `qpn` of `peer`: COMM_EST for the first one in RTR.
fn peer_note_inbound(peer: &Peer, qpn: u32) {
    let rec = peer.tables().qp(qpn);
    if rec.state() == rverbs_proto::verbs::QpState::Rtr
        && rec.flags.fetch_or(QP_FLAG_COMM_EST, Ordering::AcqRel) & QP_FLAG_COMM_EST == 0
    {
        raise_on(peer, rec.ctx.load(Ordering::Acquire), EventType::CommEst, RawElement::Qp(qpn));
    }
}

/// The target QP of an XRC request whose SRQ is in another process ([`SplitTarget`]).
pub(crate) enum QpPart {
    Local(Arc<QpInner>),
    Peer { peer: Arc<Peer>, qpn: u32 },
}

/// The XRC SRQ of a [`SplitTarget`]: its receives, CQ, PD and memory keys.
pub(crate) enum SrqPart {
    /// An SRQ of this process: its PD, in this process's endpoint.
    Local { pd: u32, endpoint: &'static Endpoint, srq: Arc<SrqInner>, cq: Arc<CqInner> },
    /// A peer's SRQ, through a peer target whose QP number is the target QP's (used for
    /// window bindings); only its receive, completion and memory sides are used. Boxed:
    /// a peer target keeps its mapped rings.
    Peer(Box<PeerTarget>),
}

/// An XRC responder split over two processes: the target QP in one, the XRC SRQ the
/// request names in another, both in one domain shared through a file (IBTA Annex A14;
/// the kernel shares such domains between processes). State, errors and COMM_EST are the
/// QP's; receives, the CQ, the PD and the memory are the SRQ's.
pub(crate) struct SplitTarget {
    pub(crate) qp: QpPart,
    pub(crate) srq: SrqPart,
}

impl Target for SplitTarget {
    fn qpn(&self) -> u32 {
        match &self.qp {
            QpPart::Local(q) => q.qpn,
            QpPart::Peer { qpn, .. } => *qpn,
        }
    }

    fn rec(&self) -> &QpRecord {
        match &self.qp {
            QpPart::Local(q) => q.rec,
            QpPart::Peer { peer, qpn } => peer.tables().qp(*qpn),
        }
    }

    fn pd(&self) -> u32 {
        match &self.srq {
            SrqPart::Local { pd, .. } => *pd,
            SrqPart::Peer(t) => t.pd,
        }
    }

    fn keys(&self) -> KeySpace<'_> {
        match &self.srq {
            SrqPart::Local { endpoint, .. } => KeySpace::local(endpoint),
            SrqPart::Peer(t) => t.keys(),
        }
    }

    fn take_recv(&self) -> Option<RecvWqe> {
        match &self.srq {
            SrqPart::Local { srq, .. } => srq.take(),
            SrqPart::Peer(t) => t.take_recv(),
        }
    }

    fn complete(&self, cqe: Cqe) -> Result<(), Overrun> {
        match &self.srq {
            SrqPart::Local { cq, .. } => cq.push(cqe),
            SrqPart::Peer(t) => t.complete(cqe),
        }
    }

    fn complete_marking(&self, cqe: Cqe, mark: &dyn Fn(CqAt)) -> Result<(), Overrun> {
        match &self.srq {
            SrqPart::Local { cq, .. } => {
                mark(CqAt::UNKNOWN);
                cq.push(cqe)
            }
            SrqPart::Peer(t) => t.complete_marking(cqe, mark),
        }
    }

    fn enter_error(&self, event: Option<EventType>) {
        match &self.qp {
            QpPart::Local(q) => q.enter_error(event, crate::qp::transition::Cause::ResponderFault),
            QpPart::Peer { peer, qpn } => peer_enter_error(peer, *qpn, event),
        }
    }

    fn note_inbound(&self) {
        match &self.qp {
            QpPart::Local(q) => q.note_inbound(),
            QpPart::Peer { peer, qpn } => peer_note_inbound(peer, *qpn),
        }
    }

    fn invalidate(&self, rkey: u32) -> bool {
        match &self.srq {
            SrqPart::Local { pd, endpoint, .. } => endpoint.keys.invalidate_mw(rkey, *pd),
            SrqPart::Peer(t) => t.invalidate(rkey),
        }
    }
}

/// The target a request from the network is served by: the QP itself (RC, UC, and an
/// XRC request whose SRQ was not found, which the core refuses), or an XRC target QP
/// with the SRQ the request names.
pub(crate) enum Serving<'a> {
    Own(&'a LocalTarget),
    Xrc(&'a SplitTarget),
}

impl Target for Serving<'_> {
    fn qpn(&self) -> u32 {
        match self {
            Serving::Own(t) => t.qpn(),
            Serving::Xrc(t) => t.qpn(),
        }
    }

    fn rec(&self) -> &QpRecord {
        match self {
            Serving::Own(t) => t.rec(),
            Serving::Xrc(t) => t.rec(),
        }
    }

    fn pd(&self) -> u32 {
        match self {
            Serving::Own(t) => t.pd(),
            Serving::Xrc(t) => t.pd(),
        }
    }

    fn keys(&self) -> KeySpace<'_> {
        match self {
            Serving::Own(t) => t.keys(),
            Serving::Xrc(t) => t.keys(),
        }
    }

    fn take_recv(&self) -> Option<RecvWqe> {
        match self {
            Serving::Own(t) => t.take_recv(),
            Serving::Xrc(t) => t.take_recv(),
        }
    }

    fn tag_matching(&self) -> bool {
        match self {
            Serving::Own(t) => t.tag_matching(),
            Serving::Xrc(t) => t.tag_matching(),
        }
    }

    fn take_for(&self, head: &[u8], msg_len: u64) -> Option<RecvWqe> {
        match self {
            Serving::Own(t) => t.take_for(head, msg_len),
            Serving::Xrc(t) => t.take_for(head, msg_len),
        }
    }

    fn complete(&self, cqe: Cqe) -> Result<(), Overrun> {
        match self {
            Serving::Own(t) => t.complete(cqe),
            Serving::Xrc(t) => t.complete(cqe),
        }
    }

    fn complete_marking(&self, cqe: Cqe, mark: &dyn Fn(CqAt)) -> Result<(), Overrun> {
        match self {
            Serving::Own(t) => t.complete_marking(cqe, mark),
            Serving::Xrc(t) => t.complete_marking(cqe, mark),
        }
    }

    fn enter_error(&self, event: Option<EventType>) {
        match self {
            Serving::Own(t) => t.enter_error(event),
            Serving::Xrc(t) => t.enter_error(event),
        }
    }

    fn note_inbound(&self) {
        match self {
            Serving::Own(t) => t.note_inbound(),
            Serving::Xrc(t) => t.note_inbound(),
        }
    }

    fn invalidate(&self, rkey: u32) -> bool {
        match self {
            Serving::Own(t) => t.invalidate(rkey),
            Serving::Xrc(t) => t.invalidate(rkey),
        }
    }
}

/// Queues an asynchronous event on context `ctx` of `peer`.
pub(crate) fn raise_on(peer: &Peer, ctx: u32, kind: EventType, element: RawElement) {
    if let Ok(fd) = peer.writer(&async_fifo_name(ctx)) {
        send_on(std::os::fd::AsFd::as_fd(&*fd), &RawAsyncEvent { kind, element }.encode());
    }
}

/// Publishes `cqe` into CQ `id` of `peer`, following resizes, firing its channel and
/// raising CQ_ERR on overrun — what [`CqInner::push`] does for this process's CQs.
/// `cached` holds the segment used last; `mark` is called right before the completion
/// becomes visible ([`CqSeg::publish_marking`]), in the generation it is published in.
fn publish_on(peer: &Peer, id: u32, cqe: Cqe, cached: &mut Option<CqSeg>, mark: &dyn Fn(CqAt)) -> Result<(), Overrun> {
    let cqe = cqe.encode();
    let rec = peer.tables().cq(id);
    let mut gen = rec.gen.load(Ordering::Acquire);
    // Bounded: each step follows one resize; a CQ resized this often while we publish
    // is not one we can keep up with, and its completion is dropped as an overrun.
    for _ in 0..64 {
        if rec.id.load(Ordering::Acquire) != id + 1 {
            return Err(Overrun);
        }
        let name = || cq_segment::name(id, gen);
        if cached.as_ref().is_none_or(|c| c.gen != gen) {
            let Some(c) = peer.segment(&name()).ok().and_then(|s| CqSeg::open(s, gen)) else {
                // The owner may have resized the CQ since we read the generation, and
                // unlinked that generation's segment: follow the record to the next one.
                // Only a generation that is still current and will not open is lost.
                let now = rec.gen.load(Ordering::Acquire);
                if now == gen {
                    return Err(Overrun);
                }
                gen = now;
                continue;
            };
            *cached = Some(c);
        }
        let cq = cached.as_ref().expect("just mapped");
        let me = crate::rings::producer_gate::Producer { ep: peer.home_ep(), pid: peer.home_pid() };
        match cq.publish_marking(&cqe, me, || crate::sys::process_stopped(peer.pid), mark) {
            Publish::Done { fire } => {
                if fire {
                    let ch = cq.shm().channel.load(Ordering::Acquire);
                    if ch != 0 {
                        if let Ok(fd) = peer.writer(&channel::fifo_name(ch - 1)) {
                            crate::rings::deferred_notify::fire_or_hold(move || {
                                send_on(std::os::fd::AsFd::as_fd(&*fd), &channel::record(id))
                            });
                        }
                    }
                }
                return Ok(());
            }
            Publish::Overrun { first } => {
                if first {
                    let ctx = cq.shm().ctx.load(Ordering::Acquire);
                    raise_on(peer, ctx, EventType::CqErr, RawElement::Cq(id));
                }
                return Err(Overrun);
            }
            Publish::Moved(g) => {
                peer.drop_segment(&name());
                *cached = None;
                gen = g;
            }
            // Never from this counted publish (only the owner's uncounted one stops at a
            // resize); were it to, the loop tries again, as for a move.
            Publish::Resizing => {}
        }
    }
    Err(Overrun)
}

impl PeerTarget {
    /// Takes the oldest receive of the peer's SRQ `srqn` if `fits` says so, following its
    /// resizes; raises SRQ_LIMIT_REACHED in the peer when the take crosses an armed limit.
    /// The take is counted as `how` says, an SRQ's take recorded as this process's for the
    /// QP (`RecvRing::reclaim_recorded`: the QP's flush completes it should this process
    /// die before its completion).
    fn take_from_srq(&self, srqn: u32, fits: &mut dyn FnMut(&RecvWqe) -> bool, how: Counted) -> Option<RecvWqe> {
        let rec = self.peer.tables().srq(srqn);
        let mut gen = rec.rq_gen.load(Ordering::Acquire);
        for _ in 0..64 {
            if rec.srqn.load(Ordering::Acquire) != srqn {
                return None;
            }
            match self.take_from(gen, || srq_segment_name(srqn, gen), |w| fits(w), how) {
                Take::Got(t) => {
                    if t.limit_fired {
                        let ctx = rec.ctx.load(Ordering::Acquire);
                        self.raise(ctx, EventType::SrqLimitReached, RawElement::Srq(srqn));
                    }
                    return Some(t.wqe);
                }
                // A resize moved the receives to the next generation, which the old ring
                // names as soon as they are there; the SRQ's record names it only once
                // the owner is done with the resize (the regions the receives keep moved
                // too), and reading the record again found the old one all that time.
                Take::Moved(next) => {
                    self.peer.drop_segment(&srq_segment_name(srqn, gen));
                    gen = next;
                }
                // Empty, or not there any more (a later resize removed the generation
                // followed): the answer, unless the record names another generation now.
                Take::Empty => {
                    let now = rec.rq_gen.load(Ordering::Acquire);
                    if now == gen {
                        return None;
                    }
                    gen = now;
                }
            }
        }
        None
    }
}

impl Target for PeerTarget {
    fn qpn(&self) -> u32 {
        self.qpn
    }

    fn rec(&self) -> &QpRecord {
        self.peer.tables().qp(self.qpn)
    }

    fn pd(&self) -> u32 {
        self.pd
    }

    fn keys(&self) -> KeySpace<'_> {
        KeySpace::of_peer(self.me, &self.peer, &self.segs)
    }

    fn take_recv(&self) -> Option<RecvWqe> {
        match self.recv {
            // The queued way: the message is placed after the take (`RecvRing::take`).
            PeerRecv::Rq(gen) => match self.take_from(gen, || qp_segment_name(self.qpn, gen), |_| true, Counted::Placing { for_qp: None }) {
                Take::Got(t) => Some(t.wqe),
                _ => None,
            },
            PeerRecv::Srq(srqn) => self.take_from_srq(srqn, &mut |_| true, Counted::Placing { for_qp: Some(self.qpn) }),
        }
    }

    fn tag_matching(&self) -> bool {
        match self.recv {
            PeerRecv::Srq(srqn) => self.peer.tables().srq(srqn).tm_cq.load(Ordering::Acquire) != 0,
            PeerRecv::Rq(_) => false,
        }
    }

    fn express_recv(&self, fits: &mut dyn FnMut(&RecvWqe) -> bool) -> Option<(u64, Option<TakenCount>)> {
        match self.recv {
            // Named with its taker until its completion is marked (`Counted::Express`).
            PeerRecv::Rq(gen) => match self.take_from(gen, || qp_segment_name(self.qpn, gen), |w| fits(w), Counted::Express) {
                Take::Got(t) => Some((t.wqe.wr_id, t.wqe.taken)),
                _ => None,
            },
            PeerRecv::Srq(_) if self.tag_matching() => None,
            PeerRecv::Srq(srqn) => self.take_from_srq(srqn, fits, Counted::ExpressFor { qpn: self.qpn }).map(|w| (w.wr_id, w.taken)),
        }
    }

    fn express_completing(&self, at: CqAt) {
        match (self.recv, &*self.ring.borrow()) {
            (PeerRecv::Rq(_), Some((_, ring))) => ring.express_completing(at),
            (PeerRecv::Srq(_), Some((_, ring))) => ring.express_record_completing(at),
            _ => {}
        }
    }

    fn express_completed(&self) {
        if let (PeerRecv::Srq(_), Some((_, ring))) = (self.recv, &*self.ring.borrow()) {
            ring.express_record_done();
        }
    }

    fn take_for(&self, head: &[u8], msg_len: u64) -> Option<RecvWqe> {
        let PeerRecv::Srq(srqn) = self.recv else { return self.take_recv() };
        if !self.tag_matching() {
            return self.take_recv();
        }
        let mut tags = self.tags.borrow_mut();
        if tags.is_none() {
            let seg = self.peer.segment(&crate::rings::tag_list::segment_name(srqn)).ok()?;
            *tags = Some(TagList::open(seg, self.me).ok()?);
        }
        let list = tags.as_ref()?;
        let mut wqe = list.deliver(Header::parse(head, msg_len), || self.take_recv())?;
        // A matched tagged buffer counts in the SRQ's current ring, as a take does: its
        // destroy waits for the placement (`SrqInner::take_for`). A resize closes the ring
        // it replaces: count in the generation the record names then. A ring that will not
        // open, or a current one closed (the SRQ destroyed), places nothing.
        let rec = self.peer.tables().srq(srqn);
        let mut cached = self.ring.borrow_mut();
        for _ in 0..64 {
            let gen = rec.rq_gen.load(Ordering::Acquire);
            if wqe.count_in(self.ring_of(&mut cached, gen, || srq_segment_name(srqn, gen))?) {
                return Some(wqe);
            }
            if rec.rq_gen.load(Ordering::Acquire) == gen {
                return None;
            }
        }
        None
    }

    fn complete(&self, cqe: Cqe) -> Result<(), Overrun> {
        publish_on(&self.peer, self.cq, cqe, &mut self.cq_seg.borrow_mut(), &|_| {})
    }

    fn complete_marking(&self, cqe: Cqe, mark: &dyn Fn(CqAt)) -> Result<(), Overrun> {
        publish_on(&self.peer, self.cq, cqe, &mut self.cq_seg.borrow_mut(), mark)
    }

    fn enter_error(&self, event: Option<EventType>) {
        peer_enter_error(&self.peer, self.qpn, event);
    }

    fn note_inbound(&self) {
        peer_note_inbound(&self.peer, self.qpn);
    }

    fn invalidate(&self, rkey: u32) -> bool {
        self.peer
            .tables()
            .key(rkey >> 8)
            .is_some_and(|r| crate::mw::invalidate_record(self.me, r, rkey, self.pd))
    }
}
