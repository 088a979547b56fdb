//! ibv_destroy_qp(3): the completions a QP left in its CQs outlive it.
//!
//! ibv_destroy_qp(3) says nothing of them. rxe leaves them in the CQ (rdma-core's rxe
//! provider and the kernel's QP cleanup never touch the CQ), mlx5 removes them; rverbs
//! follows rxe (docs/completion-queues.md, "Purge on RESET"). libfabric's verbs provider
//! counts on it: closing an endpoint destroys the QP, then polls the CQ for the
//! completions still there and reports them. A message that arrived just before the
//! peer disconnected is delivered that way instead of being lost.
mod common;
use common::*;
use rverbs::*;

/// A receive completed before the destroy is still polled after it, once.
#[test]
fn destroy_keeps_the_completions_already_in_the_cq() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 7, 0, 64);
    post_recv(&b, 8, 64, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let qpn = b.qp.qp_num();
    b.qp.destroy().unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.byte_len(), wc.qp_num()), (7, WcStatus::Success, Some(8), qpn));
    // The receive that never completed leaves nothing: outstanding work requests are
    // discarded without completions at destroy.
    assert_empty(&b.cq);
}

/// Only a move to RESET purges them (what a QP reset and reconnected must not see).
#[test]
fn reset_then_destroy_leaves_nothing() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 7, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    b.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    b.qp.destroy().unwrap();
    assert_empty(&b.cq);
}
