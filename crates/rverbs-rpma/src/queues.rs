//! The queues of a connection (librpma's `rpma_conn_req_new_from_id`): its completion
//! channel(s), CQ(s) and RC QP, made for an endpoint's request and handed to the
//! connection it becomes.

use rverbs::{CompChannel, Qp, QpCap, QpInit, QpType, SendOps};
use rverbs_cm::CmId;

use crate::cfg::ConnCfg;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::peer::{Native, Peer};
use crate::srq::Srq;

/// librpma's `max_send_sge` and `max_recv_sge` (`RPMA_MAX_SGE`).
const MAX_SGE: u32 = 1;
/// librpma's `max_inline_data` (`RPMA_MAX_INLINE_DATA`): the 8 bytes of an emulated
/// atomic write.
const MAX_INLINE_DATA: u32 = 8;

/// The queues of a connection: its QP, main CQ, optional receive CQ, optional shared
/// completion channel and optional shared receive queue (held, not owned).
pub(crate) struct Queues {
    pub(crate) qp: Qp,
    pub(crate) cq: Cq,
    pub(crate) rcq: Option<Cq>,
    pub(crate) shared: Option<CompChannel>,
    /// Held so the queue outlives the QP that takes receives from it.
    _srq: Option<Srq>,
    /// The A19 operations the QP was created for (its `send_ops_flags`), which
    /// the connection then posts natively, as librpma tests `qpx->wr_atomic_write` and
    /// `qpx->wr_flush`.
    pub(crate) native: Native,
}

impl Queues {
    /// Creates the completion channel(s), CQ(s) and the RC QP of `cfg` on `peer` and
    /// attaches the QP to `id` (librpma's `rpma_conn_req_new_from_id`). With a shared
    /// receive queue that has a receive CQ of its own, the receives complete there and
    /// the connection gets no receive CQ; a shared completion channel cannot be had
    /// then (`Inval`).
    pub(crate) fn new(peer: &Peer, id: &CmId, cfg: &ConnCfg) -> Result<Queues> {
        let srq = cfg.srq().cloned();
        let srq_rcq = srq.as_ref().and_then(Srq::get_rcq);
        if cfg.compl_channel() && srq_rcq.is_some() {
            return Err(Error::Inval);
        }
        let ctx = peer.context();
        let shared = if cfg.compl_channel() { Some(ctx.create_comp_channel()?) } else { None };
        let cq = Cq::new(ctx, cfg.cq_size(), shared.as_ref())?;
        let rcq = match cfg.rcq_size() {
            n if n == 0 || srq_rcq.is_some() => None,
            n => Some(Cq::new(ctx, n, shared.as_ref())?),
        };
        let cap = QpCap {
            max_send_wr: cfg.sq_size(),
            max_recv_wr: cfg.rq_size(),
            max_send_sge: MAX_SGE,
            max_recv_sge: MAX_SGE,
            max_inline_data: MAX_INLINE_DATA,
        };
        let mut init = QpInit::new(QpType::Rc, cq.as_verbs(), cap);
        if let Some(r) = srq_rcq.or(rcq.as_ref()) {
            init.recv_cq = r.as_verbs();
        }
        init.srq = srq.as_ref().map(Srq::as_verbs);
        // librpma 1.3.0: IBV_QP_EX_WITH_ATOMIC_WRITE / IBV_QP_EX_WITH_FLUSH in the QP's
        // send_ops_flags for what the peer does natively (the work-request builder
        // posts them; every other operation goes through ibv_post_send).
        let native = peer.native();
        let mut ops = SendOps::empty();
        if native.atomic_write {
            ops |= SendOps::ATOMIC_WRITE;
        }
        if native.flush {
            ops |= SendOps::FLUSH;
        }
        init.send_ops = (!ops.is_empty()).then_some(ops);
        let qp = peer.pd().create_qp(&init)?;
        let q = Queues { qp, cq, rcq, shared, _srq: srq, native };
        if let Err(e) = id.attach_qp(q.qp.clone()) {
            let _ = q.destroy(None);
            return Err(e.into());
        }
        Ok(q)
    }

    /// Destroys the QP (detaching it from `id` first), the CQs and the channels, in
    /// librpma's order; reports the first failure.
    pub(crate) fn destroy(&self, id: Option<&CmId>) -> Result<()> {
        if let Some(id) = id {
            let _ = id.detach_qp();
        }
        let mut first = Ok(());
        let mut keep = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        keep(self.qp.destroy().map_err(Error::from));
        keep(self.cq.destroy());
        if let Some(r) = &self.rcq {
            keep(r.destroy());
        }
        if let Some(s) = &self.shared {
            keep(s.destroy().map_err(Error::from));
        }
        first
    }
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues").field("qp_num", &self.qp.qp_num()).finish_non_exhaustive()
    }
}
