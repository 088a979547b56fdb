//! ibv_wr_post(3): the work-request builder (`ibv_qp_ex` model) — batches, setters,
//! latched errors, send_ops_flags.
mod common;
use common::*;
use rverbs::*;

fn ex_pair(qp_type: QpType, ops: SendOps) -> (Side, Side) {
    let a = side(qp_type);
    let b = side(qp_type);
    let qp = a.pd.create_qp(&QpInit { send_ops: Some(ops), ..QpInit::new(qp_type, &a.cq, CAP) }).unwrap();
    let a = Side { qp, ..a };
    connect(&a, &b, &PATH);
    (a, b)
}

#[test]
fn a_batch_posts_every_request_in_order() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::SEND | SendOps::RDMA_WRITE | SendOps::RDMA_READ);
    post_recv(&b, 1, 0, 64);
    a.mr.write(0, b"batched").unwrap();
    b.mr.write(500, b"remote!").unwrap();
    let mut w = a.qp.wr_start().unwrap();
    w.send(1, SendFlags::SIGNALED).set_sge(a.mr.lkey(), a.mr.iova(), 7);
    w.rdma_write(2, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 100).set_inline_data(b"inline");
    w.rdma_read(3, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 500).set_sge(a.mr.lkey(), a.mr.iova() + 64, 7);
    w.complete().unwrap();
    for id in 1..=3 {
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (id, WcStatus::Success));
    }
    assert_eq!(poll_one(&b.cq).byte_len(), Some(7));
    let mut x = [0u8; 7];
    b.mr.read(0, &mut x).unwrap();
    assert_eq!(&x, b"batched");
    b.mr.read(100, &mut x[..6]).unwrap();
    assert_eq!(&x[..6], b"inline");
    a.mr.read(64, &mut x).unwrap();
    assert_eq!(&x, b"remote!");
}

#[test]
fn an_error_posts_nothing_of_the_batch() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::SEND | SendOps::RDMA_WRITE);
    let mut w = a.qp.wr_start().unwrap();
    w.rdma_write(1, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    let big = vec![0u8; 2000];
    w.send(2, SendFlags::SIGNALED).set_inline_data(&big);
    w.send(3, SendFlags::SIGNALED);
    let e = w.complete().unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "rxe's builders report ENOSPC: {e}");
    assert_empty(&a.cq);
    assert_eq!(a.qp.send_queue_len(), 0);
}

#[test]
fn abort_discards_the_batch() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    let mut w = a.qp.wr_start().unwrap();
    w.rdma_write(1, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova());
    w.rdma_write(2, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova());
    w.abort();
    assert_eq!(a.qp.send_queue_len(), 0);
    assert_empty(&a.cq);
    // Dropping without complete is an abort too.
    {
        let mut w = a.qp.wr_start().unwrap();
        w.rdma_write(3, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova());
    }
    assert_empty(&a.cq);
    let mut w = a.qp.wr_start().unwrap();
    w.rdma_write(4, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova());
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 4);
}

#[test]
fn operations_outside_send_ops_are_refused() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::SEND);
    let mut w = a.qp.wr_start().unwrap();
    w.rdma_write(1, SendFlags::empty(), b.mr.rkey(), b.mr.iova());
    assert_eq!(w.complete().unwrap_err().errno(), libc::EINVAL);
    // A QP without send_ops has no builder.
    let (c, _d) = pair(QpType::Rc);
    assert_eq!(c.qp.wr_start().unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn send_ops_the_qp_type_lacks_are_eopnotsupp_at_creation() {
    let s = side(QpType::Ud);
    for (t, ops) in [
        (QpType::Ud, SendOps::RDMA_WRITE),
        (QpType::Uc, SendOps::RDMA_READ),
        (QpType::Rc, SendOps::TSO),
    ] {
        let e = s.pd.create_qp(&QpInit { send_ops: Some(ops), ..QpInit::new(t, &s.cq, CAP) }).unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{t:?} {ops:?}");
    }
}

#[test]
fn ud_builder_needs_an_address() {
    let (a, b) = ex_pair(QpType::Ud, SendOps::SEND);
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    post_recv(&b, 1, 0, 100);
    let mut w = a.qp.wr_start().unwrap();
    w.send(1, SendFlags::SIGNALED).set_inline_data(b"dgram").set_ud_addr(&ah, b.qp.qp_num(), 0x1111_1111);
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).byte_len(), Some(45));
    let mut w = a.qp.wr_start().unwrap();
    w.send(2, SendFlags::SIGNALED).set_inline_data(b"dgram");
    assert_eq!(w.complete().unwrap_err().errno(), libc::EINVAL, "no UD address");
}

#[test]
fn atomic_write_and_bind_through_the_builder() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::ATOMIC_WRITE | SendOps::BIND_MW | SendOps::RDMA_WRITE);
    let mut w = a.qp.wr_start().unwrap();
    w.atomic_write(1, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 8, *b"cccccccc");
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).opcode(), Some(WcOpcode::AtomicWrite));
    let mut x = [0u8; 8];
    b.mr.read(8, &mut x).unwrap();
    assert_eq!(&x, b"cccccccc");
    // pyverbs test_qp_ex_rc_bind_mw: a window bound without REMOTE_WRITE refuses writes.
    let m = a.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND).unwrap();
    let mw = Mw::new(&a.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    let mut w = a.qp.wr_start().unwrap();
    w.bind_mw(2, SendFlags::SIGNALED, &mw, key, &MwBind { mr: Some(&m), addr: m.iova(), length: 64, access: Access::LOCAL_WRITE });
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).opcode(), Some(WcOpcode::BindMw));
    let sge = [b.mr.sge(0, 8).unwrap()];
    b.qp.post_send(&[SendWr::write(3, &sge, m.iova(), key).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::RemAccessErr);
}

#[test]
fn complete_before_rts_is_einval() {
    let a = side(QpType::Rc);
    let qp = a.pd.create_qp(&QpInit { send_ops: Some(SendOps::SEND), ..QpInit::new(QpType::Rc, &a.cq, CAP) }).unwrap();
    let mut w = qp.wr_start().unwrap();
    w.send(1, SendFlags::empty());
    assert_eq!(w.complete().unwrap_err().errno(), libc::EINVAL);
    assert_eq!(qp.send_queue_len(), 0);
}
