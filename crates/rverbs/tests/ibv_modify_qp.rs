//! ibv_modify_qp(3) and ibv_query_qp(3): the state machine, attribute masks, values.
mod common;
use common::*;
use rverbs::*;

fn modify(qp: &Qp, attr: QpAttr, mask: QpAttrMask) -> Result<()> {
    qp.modify(&attr, mask)
}

#[test]
fn a_new_qp_is_in_reset_with_the_granted_caps() {
    let a = side(QpType::Rc);
    assert_eq!(a.qp.state(), QpState::Reset);
    let cap = a.qp.cap();
    assert!(cap.max_send_wr >= CAP.max_send_wr && cap.max_recv_wr >= CAP.max_recv_wr);
    assert!(cap.max_inline_data >= CAP.max_inline_data);
    assert_eq!(a.qp.query().cap, cap);
    assert!(a.qp.qp_num() > 1, "QPN 0 and 1 are reserved");
    assert!(a.qp.qp_num() < 1 << 24);
}

#[test]
fn qp_numbers_are_unique() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(4)).unwrap();
    let qps: Vec<Qp> = (0..50).map(|_| pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap()).collect();
    let mut n: Vec<u32> = qps.iter().map(Qp::qp_num).collect();
    n.sort_unstable();
    n.dedup();
    assert_eq!(n.len(), 50);
}

#[test]
fn create_qp_refuses_caps_above_the_device_limits() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(4)).unwrap();
    let attr = ctx.query_device();
    for cap in [
        QpCap { max_send_wr: attr.max_qp_wr + 1, ..CAP },
        QpCap { max_recv_sge: attr.max_sge + 1, ..CAP },
        QpCap { max_inline_data: attr.max_inline_data + 1, ..CAP },
    ] {
        let e = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{cap:?}");
    }
    let e = pd.create_qp(&QpInit::new(QpType::RawPacket, &cq, CAP)).unwrap_err();
    assert_eq!(e.errno(), libc::EOPNOTSUPP);
}

#[test]
fn the_rc_path_to_rts() {
    let (a, b) = pair(QpType::Rc);
    assert_eq!(a.qp.state(), QpState::Rts);
    let q = a.qp.query();
    assert_eq!(q.qp_state, QpState::Rts);
    assert_eq!(q.dest_qp_num, b.qp.qp_num());
    assert_eq!(q.path_mtu, Mtu::Mtu1024);
    assert_eq!(q.timeout, PATH.timeout);
    assert_eq!(q.retry_cnt, PATH.retry_cnt);
    assert_eq!(q.rnr_retry, PATH.rnr_retry);
    assert_eq!(q.max_rd_atomic, PATH.max_rd_atomic);
    assert_eq!(q.qp_access_flags, ALL_ACCESS);
    assert_eq!(q.port_num, 1);
    assert!(q.ah_attr.grh.is_some());
}

#[test]
fn missing_or_extra_attributes_are_einval_and_leave_the_state() {
    let a = side(QpType::Rc);
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, ..QpAttr::default() };
    let e = modify(&a.qp, init, QpAttrMask::STATE | QpAttrMask::PORT).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(matches!(e, Error::Transition(_)));
    let e = modify(
        &a.qp,
        init,
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS | QpAttrMask::QKEY,
    )
    .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "QKEY is not an RC attribute");
    assert_eq!(a.qp.state(), QpState::Reset);
}

#[test]
fn skipping_a_state_is_einval() {
    let a = side(QpType::Rc);
    let rtr = QpAttr { qp_state: QpState::Rtr, ah_attr: av(&a.ctx), ..QpAttr::default() };
    let all_rtr = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    assert_eq!(modify(&a.qp, rtr, all_rtr).unwrap_err().errno(), libc::EINVAL);
    let e = modify(&a.qp, QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE);
    assert_eq!(e.unwrap_err().errno(), libc::EINVAL, "RESET -> ERR is not in the table");
}

#[test]
fn roce_paths_need_a_grh_and_a_valid_sgid_index() {
    let a = side(QpType::Rc);
    to_init(&a.qp, ALL_ACCESS);
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    let mut attr = QpAttr { qp_state: QpState::Rtr, ah_attr: av(&a.ctx), dest_qp_num: 5, ..QpAttr::default() };
    attr.ah_attr.grh = None;
    assert_eq!(modify(&a.qp, attr, mask).unwrap_err().errno(), libc::EINVAL);
    attr.ah_attr = av(&a.ctx);
    attr.ah_attr.grh.as_mut().unwrap().sgid_index = 200;
    assert_eq!(modify(&a.qp, attr, mask).unwrap_err().errno(), libc::EINVAL);
    attr.ah_attr = av(&a.ctx);
    attr.ah_attr.port_num = 2;
    assert_eq!(modify(&a.qp, attr, mask).unwrap_err().errno(), libc::EINVAL);
    attr.ah_attr = av(&a.ctx);
    modify(&a.qp, attr, mask).unwrap();
    assert_eq!(a.qp.state(), QpState::Rtr);
}

#[test]
fn values_out_of_range_are_einval() {
    let (a, _b) = pair(QpType::Rc);
    let sqd = QpAttr { qp_state: QpState::Sqd, ..QpAttr::default() };
    modify(&a.qp, sqd, QpAttrMask::STATE).unwrap();
    let bad = QpAttr { qp_state: QpState::Sqd, timeout: 32, ..QpAttr::default() };
    assert_eq!(modify(&a.qp, bad, QpAttrMask::TIMEOUT).unwrap_err().errno(), libc::EINVAL);
    let bad = QpAttr { max_rd_atomic: 200, ..QpAttr::default() };
    assert_eq!(modify(&a.qp, bad, QpAttrMask::MAX_QP_RD_ATOMIC).unwrap_err().errno(), libc::EINVAL);
    // In range: rounded up to a power of two (rxe).
    let ok = QpAttr { max_rd_atomic: 3, ..QpAttr::default() };
    modify(&a.qp, ok, QpAttrMask::MAX_QP_RD_ATOMIC).unwrap();
    assert_eq!(a.qp.query().max_rd_atomic, 4);
}

#[test]
fn cur_state_must_match() {
    let (a, _b) = pair(QpType::Rc);
    let attr = QpAttr { qp_state: QpState::Rts, cur_qp_state: QpState::Sqd, ..QpAttr::default() };
    let e = modify(&a.qp, attr, QpAttrMask::STATE | QpAttrMask::CUR_STATE).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let attr = QpAttr { qp_state: QpState::Rts, cur_qp_state: QpState::Rts, ..QpAttr::default() };
    modify(&a.qp, attr, QpAttrMask::STATE | QpAttrMask::CUR_STATE).unwrap();
}

#[test]
fn rts_attributes_change_in_place() {
    let (a, _b) = pair(QpType::Rc);
    let attr = QpAttr { min_rnr_timer: 20, qp_access_flags: Access::REMOTE_READ, ..QpAttr::default() };
    modify(&a.qp, attr, QpAttrMask::MIN_RNR_TIMER | QpAttrMask::ACCESS_FLAGS).unwrap();
    let q = a.qp.query();
    assert_eq!((q.min_rnr_timer, q.qp_access_flags, q.qp_state), (20, Access::REMOTE_READ, QpState::Rts));
}

#[test]
fn sqd_drains_and_raises_sq_drained_then_back_to_rts() {
    let (a, b) = pair(QpType::Rc);
    let sqd = QpAttr { qp_state: QpState::Sqd, en_sqd_async_notify: 1, ..QpAttr::default() };
    modify(&a.qp, sqd, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY).unwrap();
    assert_eq!(a.qp.state(), QpState::Sqd);
    let ev = a.ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type(), EventType::SqDrained);
    drop(ev);
    // New requests wait in SQD.
    a.qp.post_send(&[SendWr::write(1, &[], b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_empty(&a.cq);
    assert_eq!(a.qp.query().sq_draining, 1);
    modify(&a.qp, QpAttr { qp_state: QpState::Rts, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
}

#[test]
fn reset_then_reconnect_works_again() {
    let (a, b) = pair(QpType::Rc);
    for s in [&a, &b] {
        modify(&s.qp, QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
        assert_eq!(s.qp.query().qp_access_flags, Access::empty());
    }
    connect(&a, &b, &PATH);
    post_recv(&b, 1, 0, 8);
    a.qp.post_send(&[SendWr::send(1, &[a.mr.sge(0, 8).unwrap()]).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
}

#[test]
fn post_recv_in_reset_is_einval_and_in_init_is_accepted() {
    let a = side(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    assert_eq!(a.qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap_err().error.errno(), libc::EINVAL);
    to_init(&a.qp, ALL_ACCESS);
    a.qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
    assert_eq!(a.qp.recv_queue_len(), 1);
}

#[test]
fn destroy_releases_the_pd_and_cq() {
    let a = side(QpType::Rc);
    assert_eq!(a.pd.dealloc().unwrap_err().errno(), libc::EBUSY);
    a.qp.destroy().unwrap();
    assert_eq!(a.qp.destroy().unwrap_err().errno(), libc::EINVAL);
    a.mr.dereg().unwrap();
    drop(a.mr);
    a.pd.dealloc().unwrap();
    a.cq.destroy().unwrap();
}

// A modify of the responder between two requests of a connection (ibv_modify_qp(3): the
// attributes apply once the call returns). Once the express lane has carried a request,
// it keeps the responder's path and attributes while this process has not written them
// (docs/shared-state.md, "A lane per connection"), so the request after the modify must
// make it look again; the outcome is the queued way's. A lane that missed the modify
// fails the access and reconnection tests; one that did not read the state word on every
// request fails `responder_in_err_by_its_own_failed_request_does_not_answer` (a state
// change without a modify).

/// A path whose unanswered request fails at once: RETRY_EXC_ERR after one ACK timeout of
/// 8 µs, no retry.
const NO_RETRY: Path = Path { timeout: 1, retry_cnt: 0, ..PATH };

/// One signaled 8-byte WRITE from `a` into `b`'s region; the status of its completion.
#[track_caller]
fn write_status(a: &Side, b: &Side, wr_id: u64) -> WcStatus {
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(wr_id, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.wr_id(), wr_id);
    wc.status()
}

/// Two WRITEs from `a` to `b` that succeed: the first finds the route (the queued way),
/// the second takes the express lane, which remembers what it checked of `b`.
#[track_caller]
fn lane_in_use(a: &Side, b: &Side) {
    assert_eq!(write_status(a, b, 1), WcStatus::Success);
    assert_eq!(write_status(a, b, 2), WcStatus::Success);
}

/// Takes REMOTE_WRITE from `b`'s QP (RTS → RTS, access flags only).
fn revoke_remote_write(b: &Side) {
    let attr = QpAttr { qp_access_flags: Access::LOCAL_WRITE, ..QpAttr::default() };
    modify(&b.qp, attr, QpAttrMask::ACCESS_FLAGS).unwrap();
}

#[test]
fn responder_access_revoked_between_writes_refuses_the_second() {
    // The status a responder without REMOTE_WRITE gives (its first request, queued way).
    let (a0, b0) = pair(QpType::Rc);
    revoke_remote_write(&b0);
    let refused = write_status(&a0, &b0, 1);
    assert_ne!(refused, WcStatus::Success);

    let (a, b) = pair(QpType::Rc);
    lane_in_use(&a, &b);
    revoke_remote_write(&b);
    assert_eq!(write_status(&a, &b, 3), refused);
    assert_eq!(b.qp.state(), b0.qp.state());
}

#[test]
fn responder_reconnected_elsewhere_between_writes_does_not_answer() {
    let (a, b) = pair_with(QpType::Rc, &NO_RETRY, 256, CAP);
    lane_in_use(&a, &b);
    // b starts a new connection, with c: same state (RTS), another destination QPN.
    let c = side(QpType::Rc);
    modify(&b.qp, QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    b.qp.connect(&remote(&b.ctx, c.qp.qp_num(), &NO_RETRY, ALL_ACCESS)).unwrap();
    assert_eq!(b.qp.state(), QpState::Rts);
    b.mr.write(0, &[0; 8]).unwrap();
    a.mr.write(0, &[0xa5; 8]).unwrap();
    assert_eq!(write_status(&a, &b, 3), WcStatus::RetryExcErr);
    let mut after = [1u8; 8];
    b.mr.read(0, &mut after).unwrap();
    assert_eq!(after, [0; 8], "nothing written through a connection b left");
}

#[test]
fn responder_in_err_between_writes_does_not_answer() {
    let (a, b) = pair_with(QpType::Rc, &NO_RETRY, 256, CAP);
    lane_in_use(&a, &b);
    modify(&b.qp, QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    assert_eq!(write_status(&a, &b, 3), WcStatus::RetryExcErr);
}

#[test]
fn responder_destroyed_between_writes_does_not_answer() {
    let (a, b) = pair_with(QpType::Rc, &NO_RETRY, 256, CAP);
    lane_in_use(&a, &b);
    b.qp.destroy().unwrap();
    assert_eq!(write_status(&a, &b, 3), WcStatus::RetryExcErr);
}

#[test]
fn responder_in_err_by_its_own_failed_request_does_not_answer() {
    let (a, b) = pair_with(QpType::Rc, &NO_RETRY, 256, CAP);
    lane_in_use(&a, &b);
    // b's own WRITE fails on its side (its scatter list leaves its region): b enters ERR
    // without a modify, so only the state word, read on every request, tells the lane.
    let bad = [Sge { addr: b.mr.iova() + MR_LEN as u64 - 4, length: 8, lkey: b.mr.lkey() }];
    b.qp.post_send(&[SendWr::write(9, &bad, a.mr.iova(), a.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::LocProtErr);
    assert_eq!(b.qp.state(), QpState::Err);
    assert_eq!(write_status(&a, &b, 3), WcStatus::RetryExcErr);
}
