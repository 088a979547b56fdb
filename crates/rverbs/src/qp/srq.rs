//! Shared receive queues (ibv_create_srq(3), ibv_modify_srq(3), ibv_post_srq_recv(3)).
//!
//! Rule: receives posted to an SRQ are consumed by any QP attached to it. When
//! `srq_limit` is armed (non-zero) and a consumption leaves fewer than `srq_limit`
//! receives, SRQ_LIMIT_REACHED is raised once and the limit disarms; ibv_modify_srq(3)
//! with IBV_SRQ_LIMIT re-arms it. A QP attached to an SRQ that enters ERR raises
//! QP_LAST_WQE_REACHED instead of flushing the SRQ.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bitflags::bitflags;
use rverbs_proto::verbs::EventType;

use crate::cq::CqInner;
use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::notify::{EventCounter, RawElement};
use crate::mr::domain::{PdCore, XrcdCore};
use crate::rings::cq_segment::CqAt;
use crate::rings::recv_count::{Heard, TakenCount};
use crate::rings::recv_ring::{srq_segment_name, RecvQueue, RecvWqe};
use crate::rings::tag_list::{Header, TagList, TagOp, TagOpFlags, TagOpKind, TmCap};
use crate::rings::wc::Cqe;
use rverbs_proto::verbs::{WcFlags, WcOpcode, WcStatus};
use crate::shm::tables::SrqRecord;
use crate::rings::wr::{PostError, RecvWr};
use crate::table::Table;

/// Parameters of [`crate::Pd::create_srq`] (`struct ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SrqInit {
    /// Receive work requests the SRQ holds.
    pub max_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Initial limit (0 = not armed).
    pub srq_limit: u32,
    /// Opaque value returned with asynchronous events.
    pub srq_context: usize,
}

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Capacity.
    pub max_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Armed limit (0 = not armed).
    pub srq_limit: u32,
}

bitflags! {
    /// Which fields of [`SrqAttr`] a modify changes (`enum ibv_srq_attr_mask`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SrqAttrMask: u32 {
        /// Resize to `max_wr`.
        const MAX_WR = 1;
        /// Arm `srq_limit`.
        const LIMIT = 1 << 1;
    }
}

pub(crate) struct SrqInner {
    pub(crate) pd: Arc<PdCore>,
    /// The live SRQs of the device, where this one is published.
    srqs: &'static Table<SrqInner>,
    pub(crate) srqn: u32,
    /// XRC SRQs: the domain and the CQ every receive completes to.
    pub(crate) xrc: Option<(Arc<XrcdCore>, Arc<CqInner>)>,
    /// Tag-matching SRQs: the matching list and the CQ every receive and list operation
    /// completes to (ibv_create_srq_ex(3), `IBV_SRQT_TM`).
    pub(crate) tm: Option<(TagList, Arc<CqInner>)>,
    /// The queue and its generation (a resize makes a new one), and the receive CQs of
    /// the QPs attached ([`HeardBy`]).
    rq: Mutex<(Arc<RecvQueue>, u32, HeardBy)>,
    /// Queues a resize replaced while receives taken from them may still be being placed
    /// (their `placing` count not 0 at the last look): the destroy waits for those too.
    retired: Mutex<Vec<Arc<RecvQueue>>>,
    /// The SRQ's record in the endpoint's shared tables.
    rec: &'static SrqRecord,
    qps: AtomicU32,
    pub(crate) async_events: EventCounter,
    destroyed: AtomicBool,
    cookie: AtomicUsize,
    srq_context: usize,
}

/// The receive CQs of an SRQ's QPs, each with how many QPs complete to it: the count of
/// takes a CQ's poll heard (`rings::recv_count`) tells the SRQ's post of room when every
/// QP completes to that one CQ (perftest, UCX: one CQ for all), so that the count covers
/// every take whose completion was polled. With several CQs a count heard in one says
/// nothing of takes completed to the others: the post reads `head`.
#[derive(Default)]
struct HeardBy(Vec<(Arc<crossbeam_utils::CachePadded<Heard>>, u32)>);

impl HeardBy {
    fn attach(&mut self, heard: &Arc<crossbeam_utils::CachePadded<Heard>>) {
        match self.0.iter_mut().find(|(h, _)| Arc::ptr_eq(h, heard)) {
            Some((_, n)) => *n += 1,
            None => self.0.push((heard.clone(), 1)),
        }
    }

    fn detach(&mut self, heard: &Arc<crossbeam_utils::CachePadded<Heard>>) {
        if let Some(i) = self.0.iter().position(|(h, _)| Arc::ptr_eq(h, heard)) {
            self.0[i].1 -= 1;
            if self.0[i].1 == 0 {
                self.0.swap_remove(i);
            }
        }
    }

    /// The count heard for the ring tagged `tag`, if the QPs attached complete to one CQ.
    fn count_for(&self, tag: u32) -> Option<u32> {
        match self.0.as_slice() {
            [(h, _)] => h.count_for(tag),
            _ => None,
        }
    }
}

impl SrqInner {
    /// The SRQ as the sanitizer keys it: its device and number.
    pub(crate) fn sanitizer_id(&self) -> crate::sanitizer::Id {
        crate::sanitizer::Id::new(self.pd.endpoint().slot, self.srqn)
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// A QP whose receives complete to `recv_cq` takes from the SRQ.
    pub(crate) fn attach_qp(&self, recv_cq: &CqInner) {
        self.qps.fetch_add(1, Ordering::AcqRel);
        self.rq.lock().expect("srq").2.attach(&recv_cq.heard);
    }

    /// A QP attached with `recv_cq` ([`SrqInner::attach_qp`]) is gone.
    pub(crate) fn detach_qp(&self, recv_cq: &CqInner) {
        self.qps.fetch_sub(1, Ordering::AcqRel);
        self.rq.lock().expect("srq").2.detach(&recv_cq.heard);
    }

    fn queue(&self) -> Arc<RecvQueue> {
        self.rq.lock().expect("srq").0.clone()
    }

    /// The current queue, and the count of takes from it that the poll of its QPs'
    /// receive CQ heard, if they all complete to one CQ and the last receive completion
    /// it polled was one of this queue's (`rings::recv_count`; an XRC or tag-matching
    /// SRQ completes to a CQ of its own: none).
    fn queue_heard(&self) -> (Arc<RecvQueue>, Option<u32>) {
        let g = self.rq.lock().expect("srq");
        let heard = if self.xrc.is_none() && self.tm.is_none() { g.2.count_for(g.0.ring().tag()) } else { None };
        (g.0.clone(), heard)
    }

    /// After ibv_post_srq_recv(3) succeeded, one call per work request of `wr_ids`: an
    /// SRQ_LIMIT_REACHED the fault plan raises (docs/fault-injection.md). A call matches
    /// only while the limit is armed (a device never raises the event of an unarmed SRQ);
    /// raising it disarms the limit, as the device does (ibv_modify_srq(3)).
    fn raise_injected(self: &Arc<Self>, wr_ids: impl IntoIterator<Item = u64>) {
        if !crate::fault_plan::active() {
            return;
        }
        for w in wr_ids {
            let ring = self.queue();
            if ring.ring().limit() == 0 {
                return;
            }
            if crate::fault_plan::raise(self.pd.endpoint().slot, rverbs_proto::verb_fault::Verb::PostSrqRecv, None, Some(w))
                == Some(rverbs_proto::verb_fault::Event::SrqLimitReached)
            {
                ring.ring().set_limit(0);
                self.pd.ctx.raise(EventType::SrqLimitReached, RawElement::Srq(self.srqn));
            }
        }
    }

    /// Takes the receive a message whose first bytes are `head` (of `msg_len` in all)
    /// goes to: on a tag-matching SRQ the list decides (`rings::tag_list`), otherwise the oldest.
    /// Either is counted as being placed until dropped, so that ibv_destroy_srq(3) waits
    /// for it: a tagged buffer the list matched in the current queue's ring, as a take is
    /// (`None` once the SRQ is destroyed: the message is not placed).
    pub(crate) fn take_for(self: &Arc<Self>, head: &[u8], msg_len: u64) -> Option<RecvWqe> {
        let Some((list, _)) = &self.tm else { return self.take() };
        let mut wqe = list.deliver(Header::parse(head, msg_len), || self.take())?;
        // A resize closes the queue it replaces: count in the one that replaced it.
        self.in_current(|q| wqe.count_in(q.ring()).then_some(()))?;
        Some(wqe)
    }

    /// The express lane's take (docs/queue-pairs.md): the oldest receive only if `fits`
    /// (which places the message into it) says so, and only from an SRQ without tag
    /// matching (whose list decides); fires the limit event as [`SrqInner::take`] does.
    /// Returns the receive's `wr_id` and the count its completion carries
    /// ([`RecvWqe::taken`]).
    pub(crate) fn take_if(self: &Arc<Self>, fits: &mut dyn FnMut(&RecvWqe) -> bool) -> Option<(u64, Option<TakenCount>)> {
        if self.tm.is_some() {
            return None;
        }
        let t = self.in_current(|q| q.ring().take_if(|w| fits(w)))?;
        if t.limit_fired {
            self.pd.ctx.raise(EventType::SrqLimitReached, RawElement::Srq(self.srqn));
        }
        Some((t.wqe.wr_id, t.wqe.taken))
    }

    /// Takes the oldest receive and fires the limit event if armed and crossed.
    pub(crate) fn take(self: &Arc<Self>) -> Option<RecvWqe> {
        let t = self.in_current(|q| q.take())?;
        if t.limit_fired {
            self.pd.ctx.raise(EventType::SrqLimitReached, RawElement::Srq(self.srqn));
        }
        Some(t.wqe)
    }

    /// The receives of this SRQ that peers now dead took for QP `qpn` (for any QP: `None`)
    /// and were still placing, from the queue and from those earlier resizes replaced:
    /// their wr_ids with the counts their completions carry, and they count as placed no
    /// more (`RecvRing::reclaim_recorded`; a QP's flush completes them, its destroy and
    /// the SRQ's do not wait for them). A take marked as completing is among them if
    /// `published` (the CQ's `CqInner::was_published`) says its completion never became
    /// visible.
    pub(crate) fn reclaim_dead_takes(&self, qpn: Option<u32>, published: impl Fn(CqAt) -> bool) -> Vec<(u64, TakenCount)> {
        let endpoint = self.pd.endpoint();
        let alive = |ep, pid| endpoint.owner_alive(ep, pid);
        let mut ids = self.queue().ring().reclaim_recorded(qpn, alive, &published);
        for q in self.retired.lock().expect("srq retired").iter() {
            ids.extend(q.ring().reclaim_recorded(qpn, alive, &published));
        }
        ids
    }

    /// `f` on the current queue, and again on the queue that replaced it when a resize
    /// (another thread's ibv_modify_srq(3)) moved the receives out between the lookup and
    /// `f`: the old ring is empty then, and closed. A take that found it so would refuse
    /// the message (RNR, or a drop on UC and UD) with receives posted; a tag-matching
    /// match could not count itself there. `None` when `f` found nothing on a queue no
    /// resize replaced (empty, or closed by the SRQ's destroy). Bounded, as a peer's take
    /// following resizes is.
    fn in_current<T>(&self, mut f: impl FnMut(&RecvQueue) -> Option<T>) -> Option<T> {
        for _ in 0..64 {
            let q = self.queue();
            if let Some(t) = f(&q) {
                return Some(t);
            }
            if q.ring().moved() == 0 {
                return None;
            }
        }
        None
    }
}

/// A shared receive queue (`struct ibv_srq`). Cloning shares it.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq").field("attr", &self.query()).finish()
    }
}

impl Srq {
    /// An SRQ of PD `pd`, published in the device's `srqs` (ibv_create_srq(3)); an XRC
    /// SRQ with `xrc`, its domain and the CQ its receives complete to (the caller checked
    /// that they are of the PD's context).
    pub(crate) fn new_in(
        pd: Arc<PdCore>,
        srqs: &'static Table<SrqInner>,
        init: &SrqInit,
        xrc: Option<(Arc<XrcdCore>, Arc<CqInner>)>,
        tm: Option<(TmCap, Arc<CqInner>)>,
    ) -> Result<Self> {
        if let Some(e) = crate::fault_plan::fail(pd.endpoint().slot, rverbs_proto::verb_fault::Verb::CreateSrq, None, None) {
            return Err(e);
        }
        let verb = "create_srq";
        if init.max_wr == 0 || init.max_wr > limits::MAX_SRQ_WR {
            return Err(Error::Limit {
                verb,
                what: "max_wr",
                max: limits::MAX_SRQ_WR.into(),
                got: init.max_wr.into(),
            });
        }
        if init.max_sge > limits::MAX_SRQ_SGE {
            return Err(Error::Limit {
                verb,
                what: "max_sge",
                max: limits::MAX_SRQ_SGE.into(),
                got: init.max_sge.into(),
            });
        }
        if init.srq_limit > init.max_wr {
            return Err(Error::invalid(verb, Rule::SrqLimit { limit: init.srq_limit, max_wr: init.max_wr }));
        }
        if let Some((cap, _)) = &tm {
            crate::rings::tag_list::check_cap(cap)?;
        }
        let endpoint = pd.endpoint();
        let srqn = srqs.reserve()?;
        if let Err(e) = endpoint.tables.reserve_srq(srqn) {
            srqs.remove(srqn);
            return Err(e);
        }
        if let Err(e) = pd.hold() {
            srqs.remove(srqn);
            return Err(e);
        }
        if let Some((x, cq)) = &xrc {
            if let Err(e) = cq.attach() {
                pd.release();
                srqs.remove(srqn);
                return Err(e);
            }
            x.hold();
        }
        let tm_cq = tm.as_ref().map(|(_, cq)| cq.clone());
        if let Some(cq) = &tm_cq {
            if let Err(e) = cq.attach() {
                if let Some((x, cq)) = &xrc {
                    x.release();
                    cq.detach();
                }
                pd.release();
                srqs.remove(srqn);
                return Err(e);
            }
        }
        let list = match &tm {
            Some((cap, _)) => {
                let path = endpoint.dir.join(crate::rings::tag_list::segment_name(srqn));
                Some(TagList::create(&path, cap.max_num_tags, limits::TM_MAX_SGE, endpoint))
            }
            None => None,
        };
        let queue = RecvQueue::new_shared(&endpoint.dir.join(srq_segment_name(srqn, 1)), init.max_wr, init.max_sge.max(1), endpoint)
            .and_then(|q| list.transpose().map(|l| (q, l)));
        let (queue, list) = match queue {
            Ok(q) => q,
            Err(e) => {
                if let Some((x, cq)) = &xrc {
                    x.release();
                    cq.detach();
                }
                if let Some(cq) = &tm_cq {
                    cq.detach();
                }
                pd.release();
                srqs.remove(srqn);
                return Err(e);
            }
        };
        queue.ring().set_limit(init.srq_limit);
        let rec = endpoint.tables.srq(srqn);
        rec.pd.store(pd.id, Ordering::Relaxed);
        rec.rq_gen.store(1, Ordering::Relaxed);
        rec.xrc_cq.store(xrc.as_ref().map_or(0, |(_, cq)| cq.id + 1), Ordering::Relaxed);
        rec.xrcd.store(xrc.as_ref().map_or(0, |(x, _)| x.key), Ordering::Relaxed);
        rec.tm_cq.store(tm_cq.as_ref().map_or(0, |cq| cq.id + 1), Ordering::Relaxed);
        rec.ctx.store(pd.ctx.id, Ordering::Relaxed);
        rec.srqn.store(srqn, Ordering::Release);
        let srq = Srq {
            inner: Arc::new(SrqInner {
                pd,
                srqs,
                srqn,
                xrc,
                tm: list.zip(tm_cq),
                rq: Mutex::new((Arc::new(queue), 1, HeardBy::default())),
                retired: Mutex::new(Vec::new()),
                rec,
                qps: AtomicU32::new(0),
                async_events: EventCounter::default(),
                destroyed: AtomicBool::new(false),
                cookie: AtomicUsize::new(0),
                srq_context: init.srq_context,
            }),
        };
        srqs.publish(srqn, &srq.inner);
        if crate::sanitizer::on() {
            crate::sanitizer::created(crate::sanitizer::Kind::Srq, srq.inner.sanitizer_id(), None);
            // An XRC SRQ's receives complete to its own CQ.
            if let Some((_, cq)) = &srq.inner.xrc {
                crate::sanitizer::completes_to(srq.inner.pd.endpoint().slot, &[(cq.id, crate::sanitizer::Queue::SharedRecv, srqn, init.max_wr)]);
            }
        }
        Ok(srq)
    }

    /// The SRQ number (ibv_get_srq_num(3)): what XRC initiators name as `remote_srqn`.
    pub fn srq_num(&self) -> u32 {
        self.inner.srqn
    }

    /// Whether this is a tag-matching SRQ.
    pub fn is_tag_matching(&self) -> bool {
        self.inner.tm.is_some()
    }

    /// Carries out one operation on a tag-matching SRQ's list (ibv_post_srq_ops(3)) and
    /// returns the handle of an ADD. A signaled operation completes to the SRQ's CQ with
    /// IBV_WC_TM_ADD / TM_DEL / TM_SYNC, carrying IBV_WC_TM_SYNC_REQ while software has
    /// not reported every unexpected message; a DEL whose entry a message consumed
    /// meanwhile completes with IBV_WC_TM_ERR, signaled or not.
    ///
    /// Rule: a tagged buffer is checked when a message lands in it, as a receive posted
    /// with [`Srq::post_recv_unpinned`] is: a region gone by then completes it in error.
    ///
    /// Errors: `EINVAL` on an SRQ that is not tag matching or an ADD with more SGEs than
    /// `tm_caps.max_sge`; `ENOMEM` when the list is full.
    pub fn post_tag_op(&self, op: &TagOp<'_>) -> Result<Option<u32>> {
        let Some((list, cq)) = &self.inner.tm else {
            return Err(Error::invalid("post_srq_ops", Rule::NotTagMatching));
        };
        let done = list.apply(op)?;
        if op.flags.contains(TagOpFlags::SIGNALED) || done.failed {
            let opcode = match op.kind {
                TagOpKind::Add { .. } => WcOpcode::TmAdd,
                TagOpKind::Del { .. } => WcOpcode::TmDel,
                TagOpKind::Sync => WcOpcode::TmSync,
            };
            let mut cqe = Cqe::success(op.wr_id, 0, opcode, 0);
            if done.failed {
                cqe = Cqe::error(op.wr_id, 0, WcStatus::TmErr, 0);
            } else if done.sync_req {
                cqe.wc_flags |= WcFlags::TM_SYNC_REQ.bits() as u8;
            }
            // An overrun is the CQ's to report (CQ_ERR); the operation itself is done.
            let _ = cq.push(cqe);
        }
        Ok(done.handle)
    }

    /// Whether this is an XRC SRQ.
    pub fn is_xrc(&self) -> bool {
        self.inner.xrc.is_some()
    }

    pub(crate) fn from_inner(inner: Arc<SrqInner>) -> Self {
        Srq { inner }
    }

    pub(crate) fn inner(&self) -> &Arc<SrqInner> {
        &self.inner
    }

    /// The attributes (ibv_query_srq(3)); `srq_limit` reads 0 once the event fired.
    pub fn query(&self) -> SrqAttr {
        let rq = self.inner.queue();
        SrqAttr {
            max_wr: rq.capacity(),
            max_sge: rq.max_sge(),
            srq_limit: rq.ring().limit(),
        }
    }

    /// The `srq_context` given at creation.
    pub fn srq_context(&self) -> usize {
        self.inner.srq_context
    }

    /// Arms the limit or resizes (ibv_modify_srq(3)).
    ///
    /// Errors: `EINVAL` for a limit above the capacity, or a size below the receives
    /// queued or above `max_srq_wr`.
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let verb = "modify_srq";
        let mut guard = self.inner.rq.lock().expect("srq");
        let (rq, gen, _) = &mut *guard;
        let mut cap = rq.capacity();
        if mask.contains(SrqAttrMask::MAX_WR) {
            if attr.max_wr == 0 || attr.max_wr > limits::MAX_SRQ_WR {
                return Err(Error::invalid(verb, Rule::SrqMaxWr { max_wr: attr.max_wr, max: limits::MAX_SRQ_WR }));
            }
            let queued = rq.len() as u32;
            if attr.max_wr < queued {
                return Err(Error::invalid(verb, Rule::SrqBelowQueued { max_wr: attr.max_wr, queued }));
            }
            cap = attr.max_wr;
        }
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit > cap {
            return Err(Error::invalid(verb, Rule::SrqLimit { limit: attr.srq_limit, max_wr: cap }));
        }
        if mask.contains(SrqAttrMask::MAX_WR) && cap != rq.capacity() {
            let next = *gen + 1;
            let endpoint = self.inner.pd.endpoint();
            let new = Arc::new(RecvQueue::new_shared(&endpoint.dir.join(srq_segment_name(self.inner.srqn, next)), cap, rq.max_sge(), endpoint)?);
            // Peers that took the old generation's lock after this see it empty and
            // marked: they follow `moved` to the new one. A post that looked the queue up
            // before this call may have added to `queued` since: the count is checked
            // again where no post runs, and the new generation (its file) goes.
            if let Err(queued) = new.absorb(rq, next, cap as usize) {
                return Err(Error::invalid(verb, Rule::SrqBelowQueued { max_wr: cap, queued: queued as u32 }));
            }
            self.inner.rec.rq_gen.store(next, Ordering::Release);
            let old = std::mem::replace(rq, new);
            *gen = next;
            // A receive taken from the old queue before the resize may still be being
            // placed: the destroy waits for it (kept mapped until then; the ones done
            // are let go here). Its ring closed, the old queue counts nothing more (a
            // tag-matching match counts in the new one: `SrqInner::take_for`), so a count
            // of 0 stays 0. (Its ring is empty; the regions it keeps for receives taken
            // and not yet polled stay kept.)
            old.ring().close();
            let mut retired = self.inner.retired.lock().expect("srq retired");
            retired.retain(|q| q.ring().placing() != 0);
            retired.push(old);
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            rq.ring().set_limit(attr.srq_limit);
        }
        Ok(())
    }

    /// Posts receives (ibv_post_srq_recv(3)); any state of the attached QPs. Each region
    /// the scatter lists name stays registered until the receive's completion is
    /// polled, as [`crate::Qp::post_recv`]'s.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_inner(wrs, true)
    }

    /// Posts `wrs` to the SRQ's current queue. A resize that replaced the queue between
    /// the lookup and the post (another thread's ibv_modify_srq(3)) makes that queue
    /// refuse the post, nothing posted, and the post goes to the queue that replaced it:
    /// written into the old ring, the receives would be lost (nothing takes from it).
    ///
    /// A queue kept full learns that a receive was taken from the count its CQ's poll
    /// heard, as a QP's own queue does, instead of from the takers' `head`, a line a
    /// taker in another process writes for the very message the post replaces
    /// (`rings::recv_count`).
    fn post_current(&self, wrs: &[RecvWr<'_>], keys: Option<&crate::mr::KeyTable>) -> Result<(), PostError> {
        loop {
            let (queue, heard) = self.inner.queue_heard();
            if let Some(r) = queue.post_unless_replaced(wrs, keys, "post_srq_recv", heard) {
                return r;
            }
        }
    }

    fn post_recv_inner(&self, wrs: &[RecvWr<'_>], keep: bool) -> Result<(), PostError> {
        let keys = keep.then_some(&self.inner.pd.endpoint().keys);
        // Tracked by the sanitizer when it is on, before the post (docs/sanitizer.md).
        let ticket = if crate::sanitizer::on() { Some(crate::rings::wr::track_recvs(self.inner.pd.endpoint(), crate::sanitizer::Queue::SharedRecv, self.inner.srqn, wrs, None)) } else { None };
        let verb = rverbs_proto::verb_fault::Verb::PostSrqRecv;
        let r = match crate::fault_plan::fail_post(self.inner.pd.endpoint().slot, verb, None, wrs.iter().map(|w| w.wr_id)) {
            // The fault plan's refusal: the requests before the one it names are posted.
            Some((index, error)) => self.post_current(&wrs[..index], keys).and(Err(PostError { index, error })),
            None => self.post_current(wrs, keys),
        };
        let posted = r.as_ref().err().map_or(wrs.len(), |e| e.index);
        self.inner.raise_injected(wrs[..posted].iter().map(|w| w.wr_id));
        if let (Some(t), Err(e)) = (ticket, &r) {
            crate::sanitizer::unposted(crate::sanitizer::Queue::SharedRecv, self.inner.sanitizer_id(), t, e.index);
        }
        r
    }

    /// Posts receives as [`Srq::post_recv`], naming memory regions by key only.
    ///
    /// Rule: as [`crate::Qp::post_send_unpinned`]: a region deregistered while the
    /// receive is pending makes it complete in error instead of staying registered.
    /// Errors: as [`Srq::post_recv`].
    pub fn post_recv_unpinned(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.post_recv_inner(wrs, false)
    }

    /// Destroys the SRQ (ibv_destroy_srq(3)).
    ///
    /// Rule: once it returned, no message is placed into the SRQ's receives any more
    /// (the program may free their buffers): the receives still queued are discarded, and
    /// the messages being placed into receives taken before it (the queued way, by this
    /// process or a peer, from the queue or from one an earlier resize replaced) finish
    /// first (docs/queue-pairs.md, "Receive queues and SRQs").
    /// Errors: `EBUSY` while QPs are attached.
    pub fn destroy(&self) -> Result<()> {
        if self.inner.qps.load(Ordering::Acquire) != 0 {
            return Err(Error::Busy { what: "shared receive queue" });
        }
        if self.inner.destroyed.swap(true, Ordering::AcqRel) {
            return Err(Error::Destroyed { what: "shared receive queue" });
        }
        if crate::sanitizer::on() {
            let unacked = self.inner.async_events.unacked();
            if unacked > 0 {
                crate::sanitizer::unacked(true, crate::sanitizer::Kind::Srq, self.inner.sanitizer_id(), unacked, "ibv_destroy_srq");
            }
            crate::sanitizer::gone(crate::sanitizer::Kind::Srq, self.inner.sanitizer_id());
        }
        self.inner.async_events.wait_all_acked();
        // No receive is taken any more, by this process or a peer that still maps the
        // ring (an XRC target QP elsewhere); the messages being placed into receives
        // taken before finish: the program may free the buffers once this returns.
        // The same for the queues earlier resizes replaced (empty, but a receive taken
        // from one before its resize may still be being placed).
        let mut queues = self.inner.retired.lock().expect("srq retired").clone();
        queues.push(self.inner.queue());
        for q in &queues {
            q.close();
        }
        // A peer that died while placing never finishes: its recorded takes are not
        // waited for (`SrqInner::reclaim_dead_takes`, of every queue).
        drop(self.inner.reclaim_dead_takes(None, |_| true));
        self.inner.retired.lock().expect("srq retired").clear();
        for q in &queues {
            q.ring().wait_placed();
        }
        self.inner.teardown();
        Ok(())
    }

    /// Acknowledges `n` asynchronous events about this SRQ.
    pub fn ack_async_events(&self, n: u32) {
        self.inner.async_events.ack(n);
    }

    /// The word the owner of the SRQ attached with [`Srq::set_cookie`] (0 until then).
    ///
    /// Rule: every handle of the SRQ, also one handed back by an asynchronous event,
    /// reads the same word; rverbs never interprets it (a language binding keeps the
    /// address of its own SRQ object here).
    pub fn cookie(&self) -> usize {
        self.inner.cookie.load(Ordering::Acquire)
    }

    /// Attaches an opaque word to the SRQ, read back by [`Srq::cookie`] on any handle.
    pub fn set_cookie(&self, value: usize) {
        self.inner.cookie.store(value, Ordering::Release);
    }

    /// Receives queued (a snapshot).
    pub fn len(&self) -> usize {
        self.inner.queue().len()
    }

    /// Whether no receive is queued (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SrqInner {
    fn teardown(&self) {
        self.rec.srqn.store(0, Ordering::Release);
        self.srqs.remove(self.srqn);
        self.pd.release();
        if let Some((x, cq)) = &self.xrc {
            x.release();
            cq.detach();
        }
        if let Some((_, cq)) = &self.tm {
            cq.detach();
        }
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            if crate::sanitizer::on() {
                crate::sanitizer::gone(crate::sanitizer::Kind::Srq, self.sanitizer_id());
            }
            self.teardown();
        }
    }
}
