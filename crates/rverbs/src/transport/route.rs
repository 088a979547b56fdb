//! Finding the responder of a connected (RC, UC, XRC) request, and keeping it.
//!
//! Rule (rxe `rxe_recv.c`: `rxe_chk_dgid`, `check_type_state`, `check_addr`): the
//! destination GID must be this device's; the QP must exist with the matching transport
//! (XRC initiators reach XRC targets) and accept requests (RTR or later, not ERR); and, as
//! rxe checks the packet's IP addresses, its path must point back at the requester's
//! source GID, and — standing in for the PSN check a stray packet would fail — it must be
//! connected to the requesting QP. An XRC request must name an XRC SRQ of the target's
//! domain; otherwise the target refuses it as an invalid request ([`xrc_refusal`] finds
//! the target for that; from another host the target QP's responder NAKs it the same way,
//! docs/rocev2-wire.md §1.8, and [`xrc_target`] finds the SRQ for it). Any other request
//! that finds no responder goes unanswered.
//!
//! The QP is in this process or in the peer process its number names (`crate::table`).
//! A send queue keeps the responder it found ([`Route`]) until `modify_qp` changes its
//! path, and checks it is still valid before each request: the lookups, and a peer's
//! mappings, are paid once per connection, not per work request. With it the send queue
//! keeps the protocol core's responder machine of the connection (`rverbs_proto::rc`):
//! a connected responder takes requests from its one requester only, and the same-host
//! transport executes them one whole message at a time, so the requester's side can hold
//! the machine. A new route (the responder was reset, reconnected or replaced) starts a
//! new machine.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rverbs_proto::rc::{Mode, Responder, ResponderConfig, UNSEGMENTED_MTU};
use rverbs_proto::psn::Psn;
use rverbs_proto::verbs::QpType;

use super::target::{LocalTarget, PeerRecv, PeerTarget, QpPart, SplitTarget, SrqPart, Target};
use crate::engine::Engine;
use crate::shm::registry::Peer;
use crate::shm::tables::QpRecord;
use crate::qp::sq::{ReqView, SendWqe};
use crate::qp::QpInner;
pub(crate) use crate::qp::transition::accepts_requests;
pub(crate) use crate::table::endpoint_of;

/// A responder found for a connected request.
pub(crate) enum Routed {
    Local(LocalTarget),
    Peer(PeerTarget),
    /// XRC: the target QP and the named SRQ in different processes.
    Split(SplitTarget),
}

/// A connected responder and the core's machine that answers for it.
pub(crate) struct Route {
    pub(crate) to: Routed,
    pub(crate) responder: Responder,
    /// The express lane's memo (docs/shared-state.md, "A lane per connection"): the
    /// target's count of this process's writes of its responder view
    /// ([`QpInner::view_writes`]) when the lane last found it answering this requester
    /// ([`answers`]) and gave `responder` its attributes; `None` until then, and for a
    /// target in a peer process. While the count has not moved, the path GID, the
    /// destination QPN and the responder's attributes are as they were then.
    pub(crate) seen: Option<u64>,
}

/// The responder attributes of the QP whose record is `rec`, read now (they change with
/// `modify_qp` on the responder), for a machine of `mode` with `mtu`.
pub(crate) fn responder_config(mode: Mode, rec: &QpRecord, mtu: u32) -> ResponderConfig {
    ResponderConfig {
        mode,
        mtu,
        rq_psn: Psn::new(0),
        access: rec.access(),
        max_dest_rd_atomic: rec.max_dest_rd_atomic.load(Ordering::Acquire) as u8,
        min_rnr_timer: rec.min_rnr_timer.load(Ordering::Acquire) as u8,
        qkey: rec.qkey.load(Ordering::Acquire),
        xrc: false,
    }
}

/// The core's mode for a connected QP type (XRC runs the RC machines).
pub(crate) fn connected_mode(qp_type: QpType) -> Mode {
    if qp_type == QpType::Uc {
        Mode::Uc
    } else {
        Mode::Rc
    }
}

impl Routed {
    fn rec(&self) -> &QpRecord {
        match self {
            Routed::Local(t) => t.rec(),
            Routed::Peer(t) => t.rec(),
            Routed::Split(t) => t.rec(),
        }
    }
}

/// Whether the QP whose record is `rec` answers requests from QP `me` with path `req`:
/// it accepts requests, its path points back at the requester's source GID, and it is
/// connected to the requester; and its owner's port is up (docs/fault-injection.md).
pub(crate) fn answers(rec: &QpRecord, me: u32, req: &ReqView) -> bool {
    takes_requests(rec) && rec.dgid() == req.sgid && rec.dest_qpn.load(Ordering::Acquire) == me
}

/// The part of [`answers`] that others than the QP's owner write (the state, moved to
/// ERR by peers; the port-down flag): whether the QP accepts requests and its owner's
/// port is up. Read on every request, [`Route::seen`] or not.
#[inline]
pub(crate) fn takes_requests(rec: &QpRecord) -> bool {
    accepts_requests(rec.state()) && !rec.port_down()
}

/// Whether `rec` is the record of live QP `qpn` of type `qp_type` (a peer's record may
/// name another QP by now).
pub(crate) fn is_qp(rec: &QpRecord, qpn: u32, qp_type: QpType) -> bool {
    rec.qpn.load(Ordering::Acquire) == qpn && rec.qp_type() == Some(qp_type)
}

/// The PD and CQ of XRC SRQ `srqn` of `peer`, if it is live and in the domain `key`.
fn peer_xrc_srq(peer: &Peer, srqn: u32, key: u64) -> Option<(u32, u32)> {
    let srec = peer.tables().srq(srqn);
    let xrc_cq = srec.xrc_cq.load(Ordering::Acquire);
    if srec.srqn.load(Ordering::Acquire) != srqn || xrc_cq == 0 || srec.xrcd.load(Ordering::Acquire) != key {
        return None;
    }
    Some((srec.pd.load(Ordering::Acquire), xrc_cq - 1))
}

impl Routed {
    /// Whether this responder still takes `wqe` from a requester with path `req`.
    fn still_valid(&self, me: u32, req: &ReqView, wqe: &SendWqe, xrc: bool) -> bool {
        match self {
            Routed::Local(t) => {
                !t.qp.is_destroyed()
                    && answers(t.qp.rec, me, req)
                    && (!xrc || t.srq.as_ref().is_some_and(|s| s.srqn == wqe.xrc_srqn && !s.is_destroyed()))
            }
            Routed::Peer(t) => {
                t.still_valid()
                    && answers(t.rec(), me, req)
                    && (!xrc
                        || matches!(t.recv, PeerRecv::Srq(n) if n == wqe.xrc_srqn
                            && t.peer.tables().srq(n).srqn.load(Ordering::Acquire) == n))
            }
            Routed::Split(t) => {
                let qp_alive = match &t.qp {
                    QpPart::Local(q) => !q.is_destroyed(),
                    QpPart::Peer { peer, qpn } => {
                        peer.is_alive() && peer.tables().qp(*qpn).qpn.load(Ordering::Acquire) == *qpn
                    }
                };
                let srq_alive = match &t.srq {
                    SrqPart::Local { srq, .. } => srq.srqn == wqe.xrc_srqn && !srq.is_destroyed(),
                    SrqPart::Peer(p) => {
                        p.still_valid_peer()
                            && matches!(p.recv, PeerRecv::Srq(n) if n == wqe.xrc_srqn
                                && p.peer.tables().srq(n).srqn.load(Ordering::Acquire) == n)
                    }
                };
                qp_alive && srq_alive && answers(t.rec(), me, req)
            }
        }
    }
}

/// The responder of `wqe` from `qp` (path `req`): the one in `cache` if still valid,
/// else a new one with a new machine expecting PSN `start` (the requester's oldest
/// unacknowledged one), which `cache` keeps.
pub(crate) fn connected<'c>(
    dev: &'static Engine,
    qp: &QpInner,
    req: &ReqView,
    wqe: &SendWqe,
    start: Psn,
    cache: &'c mut Option<Route>,
) -> Option<&'c mut Route> {
    let xrc = qp.qp_type == QpType::XrcSend;
    if !cache.as_ref().is_some_and(|r| r.to.still_valid(qp.qpn, req, wqe, xrc)) {
        *cache = find(dev, qp, req, wqe).map(|to| {
            let mut cfg = responder_config(connected_mode(qp.qp_type), to.rec(), UNSEGMENTED_MTU);
            cfg.rq_psn = start;
            Route { responder: Responder::new(cfg), to, seen: None }
        });
    }
    cache.as_mut()
}

fn find(dev: &'static Engine, qp: &QpInner, req: &ReqView, wqe: &SendWqe) -> Option<Routed> {
    if !dev.owns_gid(&req.dgid) {
        return None;
    }
    let peer_type = if qp.qp_type == QpType::XrcSend { QpType::XrcRecv } else { qp.qp_type };
    let ep = endpoint_of(req.dest_qpn);
    if qp.qp_type == QpType::XrcSend && endpoint_of(wqe.xrc_srqn) != ep {
        return find_split(dev, qp.qpn, req, wqe).map(Routed::Split);
    }
    if ep != dev.ep() {
        return find_peer(dev, ep, peer_type, qp.qpn, req, wqe).map(Routed::Peer);
    }
    let t = dev.qps.get(req.dest_qpn)?;
    if t.qp_type != peer_type || !answers(t.rec, qp.qpn, req) {
        return None;
    }
    if qp.qp_type != QpType::XrcSend {
        return Some(Routed::Local(LocalTarget::of(t)));
    }
    let srq = dev.srqs.get(wqe.xrc_srqn)?;
    let (xrcd, cq) = srq.xrc.clone()?;
    if !t.xrcd.as_ref().is_some_and(|x| Arc::ptr_eq(x, &xrcd)) {
        return None;
    }
    Some(Routed::Local(LocalTarget { pd: srq.pd.id, endpoint: srq.pd.endpoint(), srq: Some(srq), cq, qp: t }))
}

/// An XRC target QP of this host that answers `qp` (path `req`) although no responder was
/// found for `wqe`: the SRQ the request names is missing, or of another XRC domain than the
/// QP's. Its responder refuses the request as an invalid request, as it does for a request
/// from the network (docs/rocev2-wire.md §1.8, [`xrc_target`]), so both links agree.
pub(crate) fn xrc_refusal(dev: &'static Engine, qp: &QpInner, req: &ReqView) -> Option<Routed> {
    if qp.qp_type != QpType::XrcSend || !dev.owns_gid(&req.dgid) {
        return None;
    }
    let qpn = req.dest_qpn;
    let ep = endpoint_of(qpn);
    if ep == dev.ep() {
        let t = dev.qps.get(qpn)?;
        (t.qp_type == QpType::XrcRecv && answers(t.rec, qp.qpn, req)).then(|| Routed::Local(LocalTarget::of(t)))
    } else {
        let peer = dev.reg.as_ref()?.peer(ep).ok()?;
        let rec = peer.tables().qp(qpn);
        (is_qp(rec, qpn, QpType::XrcRecv) && answers(rec, qp.qpn, req)).then(|| Routed::Peer(PeerTarget::of_qp(dev, peer, qpn)))
    }
}

/// An XRC responder whose target QP and named SRQ are in different processes: both must
/// be in the same domain (equal keys: the domain was opened with the same file).
fn find_split(dev: &'static Engine, me: u32, req: &ReqView, wqe: &SendWqe) -> Option<SplitTarget> {
    let (qpn, srqn) = (req.dest_qpn, wqe.xrc_srqn);
    let reg = dev.reg.as_ref()?;
    let (qp, key) = if endpoint_of(qpn) == dev.ep() {
        let t = dev.qps.get(qpn)?;
        let key = t.xrcd.as_ref()?.key;
        (QpPart::Local(t), key)
    } else {
        let peer = reg.peer(endpoint_of(qpn)).ok()?;
        let key = peer.tables().qp(qpn).xrcd.load(Ordering::Acquire);
        (QpPart::Peer { peer, qpn }, key)
    };
    let rec = match &qp {
        QpPart::Local(t) => t.rec,
        QpPart::Peer { peer, .. } => peer.tables().qp(qpn),
    };
    if !is_qp(rec, qpn, QpType::XrcRecv) || !answers(rec, me, req) || key == 0 {
        return None;
    }
    let srq = xrc_srq_part(dev, qpn, srqn, key)?;
    Some(SplitTarget { qp, srq })
}

/// XRC SRQ `srqn` of this process or of a peer of the host, if it is live and of the
/// domain `key`, as the receive side of target QP `qpn`.
fn xrc_srq_part(dev: &'static Engine, qpn: u32, srqn: u32, key: u64) -> Option<SrqPart> {
    if endpoint_of(srqn) == dev.ep() {
        let s = dev.srqs.get(srqn)?;
        let (x, cq) = s.xrc.clone()?;
        if x.key != key {
            return None;
        }
        Some(SrqPart::Local { pd: s.pd.id, endpoint: s.pd.endpoint(), srq: s, cq })
    } else {
        let peer = dev.reg.as_ref()?.peer(endpoint_of(srqn)).ok()?;
        let (pd, cq) = peer_xrc_srq(&peer, srqn, key)?;
        Some(SrqPart::Peer(Box::new(PeerTarget::new(dev, peer, qpn, pd, PeerRecv::Srq(srqn), cq))))
    }
}

/// The responder of an XRC request from the network for target QP `qp` of this process
/// whose XRCETH names SRQ `srqn` (docs/rocev2-wire.md §1.8): the QP's state, errors and
/// COMM_EST; the receives, CQ, PD and memory of the SRQ, which must be an XRC SRQ of the
/// QP's domain, in this process or another of the host. `None`: there is no such SRQ
/// (the core NAKs the request, invalid request).
pub(crate) fn xrc_target(dev: &'static Engine, qp: &Arc<QpInner>, srqn: u32) -> Option<SplitTarget> {
    let key = qp.xrcd.as_ref()?.key;
    let srq = xrc_srq_part(dev, qp.qpn, srqn, key)?;
    Some(SplitTarget { qp: QpPart::Local(qp.clone()), srq })
}

/// As [`find`], for a QP of peer endpoint `ep`, read from its tables.
fn find_peer(dev: &'static Engine, ep: u32, peer_type: QpType, me: u32, req: &ReqView, wqe: &SendWqe) -> Option<PeerTarget> {
    let peer = dev.reg.as_ref()?.peer(ep).ok()?;
    let qpn = req.dest_qpn;
    let rec = peer.tables().qp(qpn);
    if !is_qp(rec, qpn, peer_type) || !answers(rec, me, req) {
        return None;
    }
    if peer_type != QpType::XrcRecv {
        return Some(PeerTarget::of_qp(dev, peer, qpn));
    }
    let srqn = wqe.xrc_srqn;
    if endpoint_of(srqn) != ep {
        return None;
    }
    let (pd, cq) = peer_xrc_srq(&peer, srqn, rec.xrcd.load(Ordering::Acquire))?;
    Some(PeerTarget::new(dev, peer, qpn, pd, PeerRecv::Srq(srqn), cq))
}
