//! UD queue pairs: address handles, Q_Keys, the 40-byte GRH area (`union rdma_network_hdr`).
mod common;
use common::*;
use rverbs::*;

const QKEY: u32 = 0x1111_1111;

fn ud_pair() -> (Side, Side, Ah) {
    let (a, b) = pair(QpType::Ud);
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    (a, b, ah)
}

#[test]
fn ud_send_delivers_grh_and_payload() {
    let (a, b, ah) = ud_pair();
    post_recv(&b, 1, 0, 40 + 100);
    a.mr.write(0, b"datagram").unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).ud(&ah, b.qp.qp_num(), QKEY).with_imm(5).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!(r.status(), WcStatus::Success);
    assert_eq!(r.byte_len(), Some(48), "byte_len includes the 40-byte GRH");
    assert_eq!(r.src_qp(), Some(a.qp.qp_num()));
    assert!(r.wc_flags().unwrap().contains(WcFlags::GRH | WcFlags::WITH_IMM));
    assert_eq!(r.imm_data(), Some(5));
    let mut grh = [0u8; 40];
    b.mr.read(0, &mut grh).unwrap();
    assert!(grh[..20].iter().all(|&x| x == 0), "IPv4: 20 zero bytes first");
    assert_eq!(grh[20], 0x45);
    assert_eq!(&grh[32..36], &[127, 0, 0, 1]);
    let mut p = [0u8; 8];
    b.mr.read(40, &mut p).unwrap();
    assert_eq!(&p, b"datagram");
}

#[test]
fn a_wrong_qkey_or_no_receive_drops_silently() {
    let (a, b, ah) = ud_pair();
    let sge = [a.mr.sge(0, 8).unwrap()];
    // No receive posted.
    a.qp.post_send(&[SendWr::send(1, &sge).ud(&ah, b.qp.qp_num(), QKEY).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    post_recv(&b, 1, 0, 100);
    a.qp.post_send(&[SendWr::send(2, &sge).ud(&ah, b.qp.qp_num(), QKEY + 1).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_empty(&b.cq);
    assert_eq!(b.qp.recv_queue_len(), 1, "the receive is still there");
}

/// IBTA C10-93.1.1 (rxe `rxe_req.c`): a UD message above the port's active MTU
/// (ibv_query_port(3), the host's smallest link) is not sent and completes as sent; one
/// of exactly the MTU arrives.
#[test]
fn messages_above_the_port_mtu_are_not_sent() {
    let (a, b, ah) = ud_pair();
    let mtu = a.ctx.query_port(1).unwrap().active_mtu.bytes();
    let big = a.pd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    post_recv(&b, 1, 0, 10_000);
    let sge = [big.sge(0, mtu + 1).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).ud(&ah, b.qp.qp_num(), QKEY).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_empty(&b.cq);
    let sge = [big.sge(0, mtu).unwrap()];
    a.qp.post_send(&[SendWr::send(2, &sge).ud(&ah, b.qp.qp_num(), QKEY).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!((r.status(), r.byte_len()), (WcStatus::Success, Some(40 + mtu)));
}

#[test]
fn ud_allows_only_sends_and_needs_an_ah() {
    let (a, b, _ah) = ud_pair();
    let e = a.qp.post_send(&[SendWr::write(1, &[], b.mr.iova(), b.mr.rkey())]).unwrap_err();
    assert_eq!(e.error.errno(), libc::EINVAL);
    let e = a.qp.post_send(&[SendWr::send(1, &[])]).unwrap_err();
    assert_eq!(e.error.errno(), libc::EINVAL);
}

#[test]
fn address_handles_need_a_grh_on_roce() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut attr = av(&ctx);
    attr.grh = None;
    assert_eq!(Ah::new(&pd, &attr).unwrap_err().errno(), libc::EINVAL);
    let ah = Ah::new(&pd, &av(&ctx)).unwrap();
    assert_eq!(pd.dealloc().unwrap_err().errno(), libc::EBUSY);
    ah.destroy().unwrap();
}

/// A UD work request carries the address handle's address vector: `&Ah` converts into
/// it, and a send or a builder request given the address vector itself reaches the same
/// destination as one given the handle.
#[test]
fn a_ud_destination_is_the_handles_address_vector() {
    let (a, b, ah) = ud_pair();
    let dest: &AddressVector = (&ah).into();
    assert_eq!(dest.attr(), ah.attr());
    post_recv(&b, 1, 0, 40 + 5);
    a.mr.write(0, b"by av").unwrap();
    let sge = [a.mr.sge(0, 5).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).ud(dest, b.qp.qp_num(), QKEY).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!((r.status(), r.byte_len(), r.src_qp()), (WcStatus::Success, Some(45), Some(a.qp.qp_num())));
    let mut p = [0u8; 5];
    b.mr.read(40, &mut p).unwrap();
    assert_eq!(&p, b"by av");
}

/// The address vector keeps the PD of its handle: a send through an AH of another PD
/// completes LOC_QP_OP_ERR (rxe) and delivers nothing.
#[test]
fn a_send_through_an_ah_of_another_pd_fails() {
    let (a, b) = pair(QpType::Ud);
    let other = a.ctx.alloc_pd().unwrap();
    let ah = Ah::new(&other, &av(&a.ctx)).unwrap();
    post_recv(&b, 1, 0, 100);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(7, &sge).ud(&ah, b.qp.qp_num(), QKEY).signaled()]).unwrap();
    let r = poll_one(&a.cq);
    assert_eq!((r.wr_id(), r.status(), r.vendor_err()), (7, WcStatus::LocQpOpErr, vendor_err::LOCAL_PD));
    assert_empty(&b.cq);
}
