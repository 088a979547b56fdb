//! IBTA annex A19 operations on RC: ATOMIC_WRITE and FLUSH (rxe semantics: `rxe_resp.c`,
//! `rxe_comp.c`; ibv_wr_post(3)).
mod common;
use common::*;
use rverbs::*;

#[test]
fn atomic_write_stores_eight_bytes_verbatim() {
    let (a, b) = pair(QpType::Rc);
    a.qp.post_send(&[SendWr::atomic_write(1, b.mr.iova() + 16, b.mr.rkey(), *b"cccccccc").signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, Some(WcOpcode::AtomicWrite), Some(8)));
    let mut got = [0u8; 8];
    b.mr.read(16, &mut got).unwrap();
    assert_eq!(&got, b"cccccccc");
}

#[test]
fn atomic_write_errors() {
    let (a, b) = pair(QpType::Rc);
    a.qp.post_send(&[SendWr::atomic_write(1, b.mr.iova() + 4, b.mr.rkey(), [1; 8]).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemInvReqErr, "misaligned");
    let (a, b) = pair(QpType::Rc);
    let ro = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC).unwrap();
    a.qp.post_send(&[SendWr::atomic_write(1, ro.iova(), ro.rkey(), [1; 8])]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr, "needs REMOTE_WRITE on the MR");
    let e = a.qp.post_send(&[SendWr { payload: Payload::Sge(&[a.mr.sge(0, 8).unwrap()]), ..SendWr::atomic_write(1, 0, 0, [0; 8]) }]);
    assert_eq!(e.unwrap_err().error.errno(), libc::EINVAL);
}

#[test]
fn flush_global_range_and_whole_mr() {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, b.qp.qp_num(), &PATH);
    to_rts(&a.qp, &PATH);
    to_init(&b.qp, ALL_ACCESS | Access::FLUSH_GLOBAL);
    to_rtr(&b.qp, &b.ctx, a.qp.qp_num(), &PATH);
    to_rts(&b.qp, &PATH);
    let m = b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL).unwrap();
    let f = FlushWr { len: 100, placement: FlushPlacement::GLOBAL, selectivity: FlushSelectivity::Range };
    a.qp.post_send(&[SendWr::flush(1, m.iova(), m.rkey(), f).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, Some(WcOpcode::Flush), Some(100)));
    // Whole-MR flushes ignore address and length.
    let f = FlushWr { len: 12_345_678, placement: FlushPlacement::GLOBAL, selectivity: FlushSelectivity::WholeMr };
    a.qp.post_send(&[SendWr::flush(2, 0, m.rkey(), f).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    // Out of range.
    let f = FlushWr { len: 5000, placement: FlushPlacement::GLOBAL, selectivity: FlushSelectivity::Range };
    a.qp.post_send(&[SendWr::flush(3, m.iova(), m.rkey(), f).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
}

#[test]
fn flush_needs_the_placement_type_on_qp_and_region() {
    let (a, b) = pair(QpType::Rc);
    let m = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::FLUSH_GLOBAL).unwrap();
    let f = FlushWr { len: 8, placement: FlushPlacement::GLOBAL, selectivity: FlushSelectivity::Range };
    a.qp.post_send(&[SendWr::flush(1, m.iova(), m.rkey(), f)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemInvReqErr, "QP without FLUSH_GLOBAL");
    // Persistent placement: this device registers no persistent memory.
    assert_eq!(b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::FLUSH_PERSISTENT).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn a19_operations_are_rc_only() {
    let (a, b) = pair(QpType::Uc);
    let e = a.qp.post_send(&[SendWr::atomic_write(1, b.mr.iova(), b.mr.rkey(), [0; 8])]).unwrap_err();
    assert_eq!(e.error.errno(), libc::EINVAL);
}
