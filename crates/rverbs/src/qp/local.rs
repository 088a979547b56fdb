//! Local work requests: operations the requester executes on its own device state,
//! in send-queue order, with no peer (BIND_MW, LOCAL_INV).
//!
//! Rule (rxe `rxe_req.c` `rxe_do_local_ops`, `rxe_mw.c`): a failed bind completes with
//! MW_BIND_ERR, a failed invalidation with LOC_QP_OP_ERR; successes complete (if
//! signaled) with opcode BIND_MW / LOCAL_INV and byte_len 0. LOCAL_INV only invalidates
//! type 2 memory windows of the QP's PD (rxe: memory regions registered by applications
//! cannot be invalidated).

use rverbs_proto::vendor_err;
use rverbs_proto::verbs::WcStatus;

use super::sq::SendWqe;
use super::QpInner;
use crate::mw::BindSpec;
use crate::rings::wc::Cqe;

/// BIND_MW: binds the window the work request names (ibv_post_send(3) `bind_mw`).
pub(crate) fn bind_mw(qp: &QpInner, wqe: &SendWqe) -> Cqe {
    let Some(b) = &wqe.bind else {
        return Cqe::error(wqe.wr_id, qp.qpn, WcStatus::MwBindErr, vendor_err::MW_BIND);
    };
    let spec = BindSpec {
        new_rkey: b.rkey,
        mr: b.mr.clone(),
        addr: b.addr,
        len: b.len,
        access: b.access,
    };
    match b.mw.bind(&qp.pd, qp.qpn, spec) {
        Ok(()) => wqe.success(qp.qpn),
        Err(_) => Cqe::error(wqe.wr_id, qp.qpn, WcStatus::MwBindErr, vendor_err::MW_BIND),
    }
}

/// LOCAL_INV: invalidates the type 2 window whose rkey the work request names; its
/// completion comes once no access through the window is in progress.
pub(crate) fn local_inv(qp: &QpInner, wqe: &SendWqe) -> Cqe {
    let rkey = wqe.imm;
    if qp.endpoint.keys.invalidate_mw(rkey, qp.pd.id) {
        wqe.success(qp.qpn)
    } else {
        Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::LOCAL_LKEY)
    }
}
