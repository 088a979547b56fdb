//! Local work requests: operations the requester executes on its own device state,
//! in send-queue order, with no peer (BIND_MW, LOCAL_INV).
//!
//! Rule (rxe `rxe_req.c` `rxe_do_local_ops`, `rxe_mw.c`): a failed bind completes with
//! MW_BIND_ERR, a failed invalidation with LOC_QP_OP_ERR; successes complete (if
//! signaled) with opcode BIND_MW / LOCAL_INV and byte_len 0. LOCAL_INV only invalidates
//! type 2 memory windows of the QP's PD (rxe: memory regions registered by applications
//! cannot be invalidated).

use std::sync::Arc;

use rverbs_proto::vendor_err;
use rverbs_proto::verbs::WcStatus;

use crate::mw::BindSpec;
use crate::qp::sq::SendWqe;
use crate::qp::QpInner;
use crate::transport::host::sent;
use crate::transport::Exec;
use crate::wc::Cqe;

pub(crate) fn bind_mw(qp: &Arc<QpInner>, wqe: &SendWqe) -> Exec {
    let Some(b) = &wqe.bind else {
        return Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::MwBindErr, vendor_err::MW_BIND));
    };
    let spec = BindSpec {
        new_rkey: b.rkey,
        mr: b.mr.clone(),
        addr: b.addr,
        len: b.len,
        access: b.access,
    };
    match b.mw.bind(&qp.pd, qp.qpn, spec) {
        Ok(()) => Exec::Done(sent(qp, wqe)),
        Err(_) => Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::MwBindErr, vendor_err::MW_BIND)),
    }
}

pub(crate) fn local_inv(qp: &Arc<QpInner>, wqe: &SendWqe) -> Exec {
    let rkey = wqe.imm;
    if qp.pd.endpoint().keys.invalidate_mw(rkey, qp.pd.id) {
        Exec::Done(sent(qp, wqe))
    } else {
        Exec::Done(Cqe::error(wqe.wr_id, qp.qpn, WcStatus::LocQpOpErr, vendor_err::LOCAL_LKEY))
    }
}
