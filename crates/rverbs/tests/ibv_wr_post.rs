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
    // The address handle's address vector is an address too.
    post_recv(&b, 3, 0, 100);
    let mut w = a.qp.wr_start().unwrap();
    w.send(3, SendFlags::SIGNALED).set_inline_data(b"by av").set_ud_addr(<&AddressVector>::from(&ah), b.qp.qp_num(), 0x1111_1111);
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 3);
    assert_eq!(poll_one(&b.cq).byte_len(), Some(45));
}

// The builder keeps a request's UD destination beside it (`BatchBuf::uds`): a second
// `ibv_wr_set_ud_addr` on the same request replaces the first, and each request of a
// batch keeps its own.
#[test]
fn ud_builder_takes_the_last_address_of_each_request() {
    let (a, b) = ex_pair(QpType::Ud, SendOps::SEND);
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    post_recv(&b, 1, 0, 100);
    post_recv(&b, 2, 100, 100);
    let mut w = a.qp.wr_start().unwrap();
    // A wrong Q_Key first: a datagram sent with it would be dropped by the receiver.
    w.send(1, SendFlags::SIGNALED).set_inline_data(b"first").set_ud_addr(&ah, b.qp.qp_num(), 0x2222_2222);
    w.set_ud_addr(&ah, b.qp.qp_num(), 0x1111_1111);
    w.send(2, SendFlags::SIGNALED).set_inline_data(b"second!").set_ud_addr(&ah, b.qp.qp_num(), 0x1111_1111);
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
    let (r1, r2) = (poll_one(&b.cq), poll_one(&b.cq));
    assert_eq!((r1.wr_id(), r1.byte_len()), (1, Some(40 + 5)), "both delivered, in order");
    assert_eq!((r2.wr_id(), r2.byte_len()), (2, Some(40 + 7)));
    let mut x = [0u8; 7];
    b.mr.read(100 + 40, &mut x).unwrap();
    assert_eq!(&x, b"second!");
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

// The owned batch (`Qp::start_batch`, what the C `ibv_wr_*` calls drive one to one).

#[test]
fn owned_batch_abort_posts_nothing() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    a.mr.write(0, b"aborted!").unwrap();
    let mut w = a.qp.start_batch().unwrap();
    w.rdma_write(1, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    w.rdma_write(2, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 8).set_inline_data(b"inline!!");
    w.abort();
    assert_eq!(a.qp.send_queue_len(), 0);
    assert_empty(&a.cq);
    let mut x = [0u8; 16];
    b.mr.read(0, &mut x).unwrap();
    assert_eq!(x, [0; 16], "no WRITE of the aborted batch reached the peer");
    // The QP takes the next batch (the aborted one's buffer is reused).
    let mut w = a.qp.start_batch().unwrap();
    w.rdma_write(3, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    w.complete().unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 3);
    b.mr.read(0, &mut x).unwrap();
    assert_eq!(&x, b"aborted!\0\0\0\0\0\0\0\0");
}

#[test]
fn owned_batch_error_at_complete_posts_neither_earlier_nor_later_requests() {
    // ibv_wr_post(3), RETURN VALUE: "the entire posting will be aborted".
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    a.mr.write(0, b"earlier!").unwrap();
    let too_many = vec![a.mr.sge(0, 1).unwrap(); a.qp.cap().max_send_sge as usize + 1];
    let mut w = a.qp.start_batch().unwrap();
    w.rdma_write(1, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    w.rdma_write(2, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 8).set_sge_list(&too_many);
    w.rdma_write(3, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 16).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    let e = w.complete().unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "more SGEs than max_send_sge: {e}");
    assert_eq!(a.qp.send_queue_len(), 0);
    assert_empty(&a.cq);
    let mut x = [0u8; 24];
    b.mr.read(0, &mut x).unwrap();
    assert_eq!(x, [0; 24], "neither the request before the failing one nor the one after it ran");
}

#[test]
fn owned_batch_larger_than_the_send_queue_is_enospc_and_posts_nothing() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    let room = a.qp.cap().max_send_wr as u64;
    let mut w = a.qp.start_batch().unwrap();
    for i in 0..=room {
        w.rdma_write(i, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova());
    }
    assert_eq!(w.complete().unwrap_err().errno(), libc::ENOSPC);
    assert_eq!(a.qp.send_queue_len(), 0);
    assert_empty(&a.cq);
}

#[test]
fn owned_batch_reports_the_first_error_in_call_order() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::SEND | SendOps::RDMA_WRITE);
    let too_many = vec![a.mr.sge(0, 1).unwrap(); a.qp.cap().max_send_sge as usize + 1];
    // The send queue refuses the first request (found at complete) before the second is
    // refused by the builder (found at once): the first one's error wins.
    let mut w = a.qp.start_batch().unwrap();
    w.send(1, SendFlags::empty()).set_sge_list(&too_many);
    w.rdma_read(2, SendFlags::empty(), b.mr.rkey(), b.mr.iova());
    assert_eq!(w.complete().unwrap_err().errno(), libc::ENOSPC);
    // And the other way round.
    let mut w = a.qp.start_batch().unwrap();
    w.rdma_read(1, SendFlags::empty(), b.mr.rkey(), b.mr.iova());
    w.send(2, SendFlags::empty()).set_sge_list(&too_many);
    assert_eq!(w.complete().unwrap_err().errno(), libc::EINVAL);
    // An error given by the caller (a binding's untranslatable argument) takes its place.
    let mut w = a.qp.start_batch().unwrap();
    w.send(1, SendFlags::empty()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    w.fail(Error::Again { verb: "test", why: "caller's error" });
    w.send(2, SendFlags::empty()).set_sge_list(&too_many);
    assert_eq!(w.complete().unwrap_err().errno(), libc::EAGAIN);
    assert_eq!(a.qp.send_queue_len(), 0);
    assert_empty(&a.cq);
}

#[test]
fn owned_batch_holds_no_lock_while_filled() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    let mut w = a.qp.start_batch().unwrap();
    w.rdma_write(1, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova());
    // post_send on the same QP, from the same thread, while the batch is open: it does
    // not wait for the batch, and nothing of the batch runs before complete.
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(2, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
    assert_empty(&a.cq);
    // The batch is owned: another thread completes it.
    std::thread::spawn(move || w.complete().unwrap()).join().unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
}

// ---- WrSlot: the batch the C builder keeps in each QP object ----

/// ibv_wr_post(3): batches posted one after another through a QP's slot are each their
/// own: what one held (its requests, a latched error) is not in the next; a completed or
/// aborted slot posts nothing more, and `complete` without `start` is no batch at all
/// (the C ABI's EINVAL).
#[test]
fn a_slot_posts_each_batch_on_its_own() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE | SendOps::SEND);
    let slot = WrSlot::default();
    assert!(slot.complete().is_none(), "no batch is open");
    a.mr.write(0, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    for round in 0..3u64 {
        slot.start(&a.qp).unwrap();
        slot.with(|w| {
            w.rdma_write(round, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 8 * round).set_sge(a.mr.lkey(), a.mr.iova(), 8);
        });
        slot.complete().expect("open").unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (round, WcStatus::Success));
        assert_empty(&a.cq);
        assert!(slot.complete().is_none(), "closed by complete");
    }
    // A batch whose error latched: refused whole; the next batch starts without it.
    slot.start(&a.qp).unwrap();
    slot.with(|w| {
        w.send(10, SendFlags::SIGNALED).set_inline_data(&[0u8; 2000]);
    });
    assert_eq!(slot.complete().expect("open").unwrap_err().errno(), libc::ENOSPC);
    slot.start(&a.qp).unwrap();
    slot.with(|w| {
        w.rdma_write(11, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 64).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    });
    slot.complete().expect("open").unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 11, "only the new batch's request");
    assert_empty(&a.cq);
    // A latched error goes with the batch that aborted or started again.
    for discard in [WrSlot::abort as fn(&WrSlot), |_: &WrSlot| {}] {
        slot.start(&a.qp).unwrap();
        slot.with(|w| {
            w.send(12, SendFlags::SIGNALED).set_inline_data(&[0u8; 2000]);
        });
        discard(&slot);
        slot.start(&a.qp).unwrap();
        slot.with(|w| {
            w.rdma_write(13, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova() + 64).set_sge(a.mr.lkey(), a.mr.iova(), 8);
        });
        slot.complete().expect("open").expect("the earlier batch's error is not this one's");
        assert_eq!(poll_one(&a.cq).wr_id(), 13);
    }
    // Aborted, then started again: the aborted request is gone; builders outside a batch
    // do nothing.
    slot.start(&a.qp).unwrap();
    slot.with(|w| {
        w.rdma_write(20, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    });
    slot.abort();
    slot.with(|w| {
        w.rdma_write(21, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    });
    assert!(slot.complete().is_none(), "closed by abort");
    slot.start(&a.qp).unwrap();
    slot.with(|w| {
        w.rdma_write(22, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    });
    // A second start discards what the first began.
    slot.start(&a.qp).unwrap();
    slot.with(|w| {
        w.rdma_write(23, SendFlags::SIGNALED, b.mr.rkey(), b.mr.iova()).set_sge(a.mr.lkey(), a.mr.iova(), 8);
    });
    slot.complete().expect("open").unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 23);
    assert_empty(&a.cq);
    assert_eq!(a.qp.send_queue_len(), 0);
}

/// A slot used for another QP takes that QP's batch; one on a QP created without
/// `send_ops` opens nothing (EINVAL).
#[test]
fn a_slot_follows_the_qp_it_is_started_on() {
    let (a, b) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    let (c, d) = ex_pair(QpType::Rc, SendOps::RDMA_WRITE);
    let slot = WrSlot::default();
    for (id, (x, y)) in [(1u64, (&a, &b)), (2, (&c, &d)), (3, (&a, &b))] {
        slot.start(&x.qp).unwrap();
        slot.with(|w| {
            w.rdma_write(id, SendFlags::SIGNALED, y.mr.rkey(), y.mr.iova()).set_sge(x.mr.lkey(), x.mr.iova(), 8);
        });
        slot.complete().expect("open").unwrap();
        assert_eq!(poll_one(&x.cq).wr_id(), id, "posted on the QP it was started on");
    }
    assert_empty(&a.cq);
    assert_empty(&c.cq);
    let plain = side(QpType::Rc);
    assert_eq!(slot.start(&plain.qp).unwrap_err().errno(), libc::EINVAL);
    assert!(slot.complete().is_none());
}
