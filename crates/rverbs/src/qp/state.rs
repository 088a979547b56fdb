//! `modify_qp` as validate → plan → apply (the one function that writes a QP's state is
//! `super::transition`'s).
//!
//! Read before editing: ibv_modify_qp(3), `rverbs_proto::state` (the IBTA table), the
//! locking note of the `qp` module and docs/queue-pairs.md.
//!
//! Writers. A QP's state lives in its shared record ([`QpRecord::state`]) and changes only
//! through [`QpRecord::transition`], whoever changes it: `modify_qp` (the application),
//! the requester (a failed send: SQE or ERR; an overrun of the send CQ), the responder
//! side (a request that broke a responder rule, an overrun of the receive CQ; run by this
//! process or by a peer process executing requests on this QP through the shared tables),
//! creation and destruction. Each change is traced (`tracing`, debug) with the QPN, the
//! old and the new state and its [`Cause`].
//!
//! `modify_qp`: [`QpInner::validate_modify`] checks the call against the state table and
//! the device's limits and writes nothing; [`QpInner::plan_modify`] computes what the call
//! changes (the attributes, the requester's view, its retry counters) and writes nothing;
//! [`QpInner::apply_modify`] wins the state change first and only then writes the plan.
//! If another writer (a peer moving the QP to ERR, the requester moving it to SQE) changed
//! the state since validation, the call fails and nothing it asked for has changed.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rverbs_proto::state::{check_modify, QpAttrMask};
use rverbs_proto::verbs::{Access, QpState, QpType};

use crate::rings::qp_attr::QpAttr;
use super::sq::ReqView;
use super::transition::{accepts_requests, Cause, Expect};
use super::QpInner;
use crate::error::{Error, Result};
use crate::gid::Gid;
use crate::limits::{self, check_port};
use crate::rule::Rule;
use crate::shm::tables::{QpRecord, QP_FLAG_COMM_EST};

/// The responder attributes peers read from the record (all of them only while the QP
/// accepts requests: `accepts_requests`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ResponderView {
    access: u32,
    min_rnr_timer: u32,
    max_dest_rd_atomic: u32,
    qkey: u32,
    path_mtu: u32,
    dest_qpn: u32,
    /// `None`: the record's destination GID is left as it is.
    dgid: Option<Gid>,
}

impl ResponderView {
    fn of(a: &QpAttr) -> ResponderView {
        ResponderView {
            access: a.qp_access_flags.bits(),
            min_rnr_timer: u32::from(a.min_rnr_timer),
            max_dest_rd_atomic: u32::from(a.max_dest_rd_atomic),
            qkey: a.qkey,
            path_mtu: a.path_mtu.bytes(),
            dest_qpn: a.dest_qp_num,
            dgid: a.ah_attr.grh.map(|g| g.dgid),
        }
    }

    fn load(rec: &QpRecord) -> ResponderView {
        ResponderView {
            access: rec.access.load(Ordering::Acquire),
            min_rnr_timer: rec.min_rnr_timer.load(Ordering::Acquire),
            max_dest_rd_atomic: rec.max_dest_rd_atomic.load(Ordering::Acquire),
            qkey: rec.qkey.load(Ordering::Acquire),
            path_mtu: rec.path_mtu.load(Ordering::Acquire),
            dest_qpn: rec.dest_qpn.load(Ordering::Acquire),
            dgid: Some(rec.dgid()),
        }
    }

    /// Writes the view into `q`'s record and counts the write
    /// ([`QpInner::view_written`]: a requester's lane reads the record again).
    fn store(&self, q: &QpInner) {
        let rec = q.rec;
        rec.access.store(self.access, Ordering::Release);
        rec.min_rnr_timer.store(self.min_rnr_timer, Ordering::Release);
        rec.max_dest_rd_atomic.store(self.max_dest_rd_atomic, Ordering::Release);
        rec.qkey.store(self.qkey, Ordering::Release);
        rec.path_mtu.store(self.path_mtu, Ordering::Release);
        rec.dest_qpn.store(self.dest_qpn, Ordering::Release);
        if let Some(g) = self.dgid {
            rec.set_dgid(g);
        }
        q.view_written();
    }
}

/// What a `modify_qp` call changes, computed before anything is written.
#[derive(Debug)]
pub(crate) struct ModifyPlan {
    /// The state validated against.
    from: QpState,
    /// The state after the call.
    to: QpState,
    /// The mask, with the attributes XRC ignores removed.
    mask: QpAttrMask,
    /// The QP's attributes after the call (before the entry action of `to`).
    attrs: QpAttr,
    /// The requester's view after the call.
    req: ReqView,
    /// New `timeout` (TIMEOUT given), for a running requester.
    timeout: Option<u8>,
    /// New `retry_cnt` (RETRY_CNT given): a fresh retry budget.
    retry: Option<u8>,
    /// New `rnr_retry` (RNR_RETRY given): a fresh RNR budget.
    rnr: Option<u8>,
    /// New `max_rd_atomic` (MAX_QP_RD_ATOMIC given): a request waiting for read/atomic
    /// credit goes on once there is some.
    max_rd_atomic: Option<u8>,
}

impl ModifyPlan {
    /// The address of another host this call connects the QP to (INIT → RTR with an
    /// address vector, over the network), whose neighbour must answer first
    /// (ibv_modify_qp(3) on RoCE: the kernel's `ib_resolve_eth_dmac`; `neigh`).
    pub(crate) fn new_network_destination(&self) -> Option<std::net::IpAddr> {
        (self.to == QpState::Rtr && self.mask.contains(QpAttrMask::AV) && self.req.network).then(|| self.req.dgid.to_ip())
    }
}

/// The read/atomic depth a QP gets (rverbs_proto::state::rd_atomic_depth), within the
/// device limit.
fn rd_atomic_depth(v: u8) -> u8 {
    rverbs_proto::state::rd_atomic_depth(v).min(limits::MAX_QP_RD_ATOM) as u8
}

/// A test hook run between plan and apply (where another writer may change the state).
#[cfg(test)]
type Hook = Box<dyn FnOnce(&QpInner)>;

#[cfg(test)]
thread_local! {
    static BEFORE_APPLY: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

impl QpInner {
    /// Checks a `modify_qp` call against the state table (the QP being in `cur`) and the
    /// device's limits; returns the target state and the mask that counts. Writes nothing.
    pub(crate) fn validate_modify(&self, cur: QpState, attr: &QpAttr, mask: QpAttrMask) -> Result<(QpState, QpAttrMask)> {
        let verb = "modify_qp";
        // uverbs `modify_qp_mask`: attributes that do not apply to one side of XRC are
        // dropped silently (ibv_xsrq_pingpong passes them).
        let mask = match self.qp_type {
            QpType::XrcSend => mask - (QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER),
            QpType::XrcRecv => {
                mask - (QpAttrMask::MAX_QP_RD_ATOMIC | QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY)
            }
            _ => mask,
        };
        let to = check_modify(self.qp_type, cur, mask, attr.qp_state, attr.cur_qp_state).map_err(Error::Transition)?;
        if mask.contains(QpAttrMask::PORT) {
            check_port(verb, attr.port_num)?;
        }
        if mask.contains(QpAttrMask::AV) {
            attr.ah_attr.check(verb, self.dev.gids().len())?;
        }
        if mask.contains(QpAttrMask::ALT_PATH) {
            return Err(Error::invalid(verb, Rule::NoAlternatePath));
        }
        if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) && u32::from(attr.max_rd_atomic) > limits::MAX_QP_RD_ATOM {
            return Err(Error::invalid(verb, Rule::AttrLimit { attr: "max_rd_atomic", value: attr.max_rd_atomic.into(), max: limits::MAX_QP_RD_ATOM }));
        }
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) && u32::from(attr.max_dest_rd_atomic) > limits::MAX_QP_RD_ATOM
        {
            return Err(Error::invalid(verb, Rule::AttrLimit { attr: "max_dest_rd_atomic", value: attr.max_dest_rd_atomic.into(), max: limits::MAX_QP_RD_ATOM }));
        }
        if mask.contains(QpAttrMask::TIMEOUT) && attr.timeout > 31 {
            return Err(Error::invalid(verb, Rule::AttrLimit { attr: "timeout", value: attr.timeout.into(), max: 31 }));
        }
        if mask.contains(QpAttrMask::ACCESS_FLAGS) {
            let known = Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC
                | Access::MW_BIND
                | Access::FLUSH_GLOBAL
                | Access::FLUSH_PERSISTENT
                // A memory-region flag a QP has no use for, accepted and ignored as mlx5
                // does (pyverbs' ODP tests give a QP their regions' access flags).
                | Access::ON_DEMAND;
            if !known.contains(attr.qp_access_flags.difference(Access::RELAXED_ORDERING)) {
                return Err(Error::invalid(verb, Rule::AccessFlags { flags: attr.qp_access_flags.bits() }));
            }
        }
        Ok((to, mask))
    }

    /// Computes what a validated `modify_qp` call changes, from the QP's attributes
    /// `old`: the attributes the mask names (with rxe's roundings and truncations), the
    /// requester's view and its retry counters. Writes nothing.
    pub(crate) fn plan_modify(&self, old: &QpAttr, attr: &QpAttr, from: QpState, to: QpState, mask: QpAttrMask) -> ModifyPlan {
        let m = mask;
        let mut a = *old;
        if m.contains(QpAttrMask::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if m.contains(QpAttrMask::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if m.contains(QpAttrMask::PORT) {
            a.port_num = attr.port_num;
        }
        if m.contains(QpAttrMask::QKEY) {
            a.qkey = attr.qkey;
        }
        if m.contains(QpAttrMask::AV) {
            a.ah_attr = attr.ah_attr;
        }
        if m.contains(QpAttrMask::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if m.contains(QpAttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if m.contains(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt & 7;
        }
        if m.contains(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry & 7;
        }
        if m.contains(QpAttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn & 0xff_ffff;
        }
        if m.contains(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn & 0xff_ffff;
        }
        if m.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = rd_atomic_depth(attr.max_rd_atomic);
        }
        if m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = rd_atomic_depth(attr.max_dest_rd_atomic);
        }
        if m.contains(QpAttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer & 0x1f;
        }
        if m.contains(QpAttrMask::PATH_MIG_STATE) {
            a.path_mig_state = attr.path_mig_state;
        }
        if m.contains(QpAttrMask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num & 0xff_ffff;
        }
        if m.contains(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if m.contains(QpAttrMask::RATE_LIMIT) {
            a.rate_limit = attr.rate_limit;
        }
        let dev = self.dev;
        let dgid = a.ah_attr.grh.map(|g| g.dgid).unwrap_or_default();
        let sgid = a.ah_attr.grh.and_then(|g| dev.gids().get(usize::from(g.sgid_index))).map(|e| e.gid).unwrap_or_default();
        // docs/network.md, "RC and UC across hosts": a connected QP whose destination is not this
        // device goes over the network if a socket serves its source GID.
        let link = dev.network_link(&sgid);
        let network = matches!(self.qp_type, QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv)
            && dgid != Gid::default()
            && !dev.owns_gid(&dgid)
            && link.is_some();
        // A network connection's packets must also fit its link (docs/network.md, "MTU of a network
        // connection").
        let link_mtu = link.filter(|_| network).unwrap_or(u32::MAX);
        let req = ReqView {
            dest_qpn: a.dest_qp_num,
            dgid,
            sgid,
            timeout: a.timeout,
            max_rd_atomic: a.max_rd_atomic,
            network,
            mtu: a.path_mtu.bytes().min(limits::MAX_MTU.bytes()).min(link_mtu),
            sq_psn: a.sq_psn,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
        };
        ModifyPlan {
            from,
            to,
            mask,
            attrs: a,
            req,
            timeout: m.contains(QpAttrMask::TIMEOUT).then_some(a.timeout),
            retry: m.contains(QpAttrMask::RETRY_CNT).then_some(a.retry_cnt),
            rnr: m.contains(QpAttrMask::RNR_RETRY).then_some(a.rnr_retry),
            max_rd_atomic: m.contains(QpAttrMask::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        }
    }

    /// Carries out `plan` on the QP whose attributes are `a` (the caller holds them
    /// locked): wins the state change, then writes the attributes, the responder view
    /// peers read, the requester's view, and runs the entry action of the new state.
    ///
    /// Rule: → ERR flushes every outstanding work request with WR_FLUSH_ERR; → RESET
    /// discards them without completions and forgets the attributes; → SQD stops
    /// starting sends (SQ_DRAINED once none is in progress); → RTS runs the send queue.
    /// Errors: the state is no longer `plan.from` (another writer changed it): the
    /// table's verdict for the call from the state found (`Error::Transition`), else
    /// `Error::QpStateForbids`; nothing the call asked for has changed.
    pub(crate) fn apply_modify(
        self: &Arc<Self>,
        a: &mut QpAttr,
        plan: ModifyPlan,
        attr: &QpAttr,
    ) -> Result<()> {
        let verb = "modify_qp";
        let mut sq = self.sq.lock();
        let changed = plan.to != plan.from;
        let view = ResponderView::of(&plan.attrs);
        // A QP that refuses requests (RESET, INIT) has a responder view nobody reads
        // (every reader checks the state first, `accepts_requests`), so
        // a QP entering RTR has its view staged before the state says RTR: a peer that
        // sees RTR sees the view. If the state change is lost, the staged view is put
        // back before anything could have read it.
        let staged = changed && !accepts_requests(plan.from);
        let before = staged.then(|| ResponderView::load(self.rec));
        if staged {
            view.store(self);
        }
        if changed {
            if let Err(now) = self.transition(Expect::Is(plan.from), plan.to, Cause::Modify) {
                if let Some(b) = before {
                    b.store(self);
                }
                drop(sq);
                check_modify(self.qp_type, now, plan.mask, attr.qp_state, attr.cur_qp_state)
                    .map_err(Error::Transition)?;
                return Err(Error::QpStateForbids { verb, state: now });
            }
        }
        // The state change is won (or there is none): the plan takes effect.
        *a = plan.attrs;
        if !staged {
            view.store(self);
        }
        sq.link.forget_route();
        if changed && matches!(plan.to, QpState::Reset | QpState::Rtr) {
            // A new connection: requests from the network start at rq_psn (the old one's
            // held ACKs leave first).
            sq.link.release_acks(self);
            *self.net_resp.lock().expect("net responder") = super::NetResponder { rq_psn: a.rq_psn, ..Default::default() };
        }
        // docs/memory.md, "Receives placed by their owner".
        let peer = matches!(self.qp_type, QpType::Rc | QpType::Uc)
            && !plan.req.network
            && crate::table::endpoint_of(plan.req.dest_qpn) != self.endpoint.ep();
        self.host_peer_writes.store(peer, Ordering::Relaxed);
        if changed && plan.to == QpState::Rtr && self.bounces_receives(QpState::Rtr) {
            if let Some(rq) = &self.rq {
                rq.bounce_queued(&self.pd);
            }
        }
        sq.req = plan.req;
        if let Some(c) = &mut sq.conn {
            c.modified(plan.timeout, plan.retry, plan.rnr, plan.max_rd_atomic);
        }
        match plan.to {
            QpState::Reset if changed => {
                self.send_cq.purge(self.qpn);
                self.recv_cq.purge(self.qpn);
                sq.clear();
                if let Some(rq) = &self.rq {
                    rq.drain();
                }
                self.rec.flags.fetch_and(!QP_FLAG_COMM_EST, Ordering::AcqRel);
                self.rq_flushed.store(false, Ordering::Release);
                *a = QpAttr { cap: self.cap, ..QpAttr::default() };
                self.rec.access.store(0, Ordering::Release);
                self.view_written();
            }
            QpState::Err if changed => {
                self.flush_sq(&mut sq);
                drop(sq);
                self.flush_rq_once();
            }
            QpState::Sqd if changed => {
                self.sqd_notified.store(false, Ordering::Release);
                self.progress(&mut sq);
            }
            QpState::Rts => self.progress(&mut sq),
            _ => {}
        }
        Ok(())
    }

    /// Test hook: `f` runs in the next `modify_qp` of this thread between plan and apply.
    #[cfg(test)]
    pub(crate) fn before_apply(f: impl FnOnce(&QpInner) + 'static) {
        BEFORE_APPLY.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    #[cfg(test)]
    pub(crate) fn run_before_apply(&self) {
        if let Some(f) = BEFORE_APPLY.with(|h| h.borrow_mut().take()) {
            f(self);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::transition::ERR_FROM_ANY_BUT;
    use crate::qp::{Qp, QpInit};
    use crate::{devices, Context, Cq, CqInit, Pd, QpCap, RemotePath};

    struct Fixture {
        _ctx: Context,
        _pd: Pd,
        _cq: Cq,
        qp: Qp,
    }

    fn rc_qp() -> Fixture {
        let ctx = devices().unwrap()[0].open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
        let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
        Fixture { _ctx: ctx, _pd: pd, _cq: cq, qp }
    }

    fn path(ctx_gid: Gid) -> RemotePath {
        RemotePath { access: Access::REMOTE_WRITE | Access::LOCAL_WRITE, timeout: 20, ..RemotePath::new(ctx_gid, 0, 0x42) }
    }

    /// What a peer's responder fault does to the record (`transport::target::peer_enter_error`).
    fn peer_moves_to_err(q: &QpInner) {
        q.rec.transition(q.qpn, || None, Expect::NotIn(ERR_FROM_ANY_BUT), QpState::Err, Cause::ResponderFault).unwrap();
    }

    #[test]
    fn modify_that_loses_its_state_change_to_a_peer_err_changes_nothing() {
        let f = rc_qp();
        let p = path(Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST));
        f.qp.connect_until(&p, QpState::Init).unwrap();
        let q = f.qp.inner().unwrap();
        let attrs_before = f.qp.query();
        let view_before = ResponderView::load(q.rec);
        let req_before = q.sq.lock().req;
        QpInner::before_apply(peer_moves_to_err);
        let e = f.qp.connect_until(&p, QpState::Rtr).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(matches!(e, Error::Transition(_)), "{e:?}: ERR → RTR is not in the table");
        assert_eq!(f.qp.state(), QpState::Err);
        let attrs_after = f.qp.query();
        assert_eq!((attrs_after.dest_qp_num, attrs_after.path_mtu), (attrs_before.dest_qp_num, attrs_before.path_mtu));
        assert_eq!(attrs_after.ah_attr, attrs_before.ah_attr);
        assert_eq!(attrs_after.max_dest_rd_atomic, attrs_before.max_dest_rd_atomic);
        assert_eq!(ResponderView::load(q.rec), view_before, "the staged responder view is put back");
        assert_eq!(q.sq.lock().req.dest_qpn, req_before.dest_qpn);
    }

    #[test]
    fn modify_from_rtr_that_loses_to_a_peer_err_keeps_the_requester_view() {
        let f = rc_qp();
        let p = path(Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST));
        f.qp.connect_until(&p, QpState::Rtr).unwrap();
        let q = f.qp.inner().unwrap();
        let view_before = ResponderView::load(q.rec);
        QpInner::before_apply(peer_moves_to_err);
        // RTR → RTS with a changed min_rnr_timer (optional) and the required attributes.
        let attr = QpAttr { min_rnr_timer: 9, ..p.attr(QpState::Rts) };
        let mask = QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER;
        let e = f.qp.modify(&attr, mask).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(f.qp.state(), QpState::Err);
        let a = f.qp.query();
        assert_eq!((a.timeout, a.retry_cnt, a.max_rd_atomic, a.min_rnr_timer), (0, 0, 0, p.min_rnr_timer));
        assert_eq!(q.sq.lock().req.timeout, 0);
        assert_eq!(ResponderView::load(q.rec), view_before);
    }

    #[test]
    fn modify_without_a_race_applies_the_plan() {
        // The same call as above, with no other writer: it takes effect (the tests above
        // fail for the race, not for the call).
        let f = rc_qp();
        let p = path(Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST));
        f.qp.connect(&p).unwrap();
        let a = f.qp.query();
        assert_eq!((a.dest_qp_num, a.timeout), (0x42, 20));
        assert_eq!(f.qp.inner().unwrap().rec.dest_qpn.load(Ordering::Acquire), 0x42);
        assert_eq!(f.qp.inner().unwrap().sq.lock().req.timeout, 20);
    }

    #[test]
    fn transition_changes_only_from_an_admitted_state() {
        let f = rc_qp();
        let q = f.qp.inner().unwrap();
        assert_eq!(q.transition(Expect::Is(QpState::Init), QpState::Rtr, Cause::Modify), Err(QpState::Reset));
        assert_eq!(q.state(), QpState::Reset);
        let err = Expect::NotIn(ERR_FROM_ANY_BUT);
        assert_eq!(q.transition(err, QpState::Err, Cause::ResponderFault), Err(QpState::Reset), "RESET does not enter ERR");
        assert_eq!(q.transition(Expect::Is(QpState::Reset), QpState::Init, Cause::Modify), Ok(QpState::Reset));
        assert_eq!(q.transition(err, QpState::Err, Cause::ResponderFault), Ok(QpState::Init));
        assert_eq!(q.transition(err, QpState::Err, Cause::ResponderFault), Err(QpState::Err), "only once");
        // A value no state has is none of the listed states, and reads as ERR.
        q.rec.state.store(99, Ordering::Release);
        assert_eq!(q.transition(Expect::Is(QpState::Err), QpState::Reset, Cause::Modify), Err(QpState::Err));
        assert_eq!(q.transition(err, QpState::Err, Cause::ResponderFault), Ok(QpState::Err));
        assert_eq!(q.rec.state.load(Ordering::Acquire), QpState::Err.raw());
        assert_eq!(q.transition(Expect::Any, QpState::Reset, Cause::Destroy), Ok(QpState::Err));
    }
}
