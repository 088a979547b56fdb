//! UC queue pairs: SEND and RDMA WRITE (with and without immediate); no READ or atomics;
//! no ACKs and no retries (IBTA vol. 1, ch. 9; rxe completes UC sends at transmit).
mod common;
use common::*;
use rverbs::*;

#[test]
fn uc_send_and_write_with_imm_deliver() {
    let (a, b) = pair(QpType::Uc);
    post_recv(&b, 1, 0, 64);
    a.mr.write(0, b"uc data").unwrap();
    let sge = [a.mr.sge(0, 7).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).with_imm(3).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).opcode(), Some(WcOpcode::Send));
    let r = poll_one(&b.cq);
    assert_eq!((r.byte_len(), r.imm_data()), (Some(7), Some(3)));
    post_recv(&b, 2, 0, 0);
    a.qp.post_send(&[SendWr::write(2, &sge, b.mr.iova() + 100, b.mr.rkey()).with_imm(4).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!((r.opcode(), r.imm_data()), (Some(WcOpcode::RecvRdmaWithImm), Some(4)));
    let mut got = [0u8; 7];
    b.mr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"uc data");
}

#[test]
fn uc_refuses_read_and_atomics() {
    let (a, b) = pair(QpType::Uc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    for wr in [
        SendWr::read(1, &sge, b.mr.iova(), b.mr.rkey()),
        SendWr::fetch_add(1, &sge, b.mr.iova(), b.mr.rkey(), 1),
        SendWr::local_inv(1, 5),
    ] {
        assert_eq!(a.qp.post_send(&[wr]).unwrap_err().error.errno(), libc::EINVAL, "{:?}", wr.opcode);
    }
}

#[test]
fn uc_has_no_rnr_and_no_retries_a_message_without_receive_is_dropped() {
    let path = Path { rnr_retry: 0, retry_cnt: 0, ..PATH };
    let (a, b) = pair_with(QpType::Uc, &path, 64, CAP);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "UC completes at transmit");
    assert_empty(&b.cq);
    // A bad rkey is dropped silently too; the responder stays usable.
    a.qp.post_send(&[SendWr::write(2, &sge, 0, 0xbad00).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(b.qp.state(), QpState::Rts);
    post_recv(&b, 3, 0, 8);
    a.qp.post_send(&[SendWr::send(3, &sge)]).unwrap();
    assert_eq!(poll_one(&b.cq).wr_id(), 3);
}

#[test]
fn uc_to_a_missing_peer_completes_as_sent() {
    let (a, b) = pair(QpType::Uc);
    b.qp.destroy().unwrap();
    a.qp.post_send(&[SendWr::write(1, &[], 0, 0).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
}

// UC has no SEND with Invalidate on the wire (IBTA opcode table: RC and XRC only). rxe
// accepts the post (its opcode table admits it for UC) and its requester finds no UC
// opcode for it (`next_opcode_uc`): the WR completes with LOC_QP_OP_ERR. rverbs executed
// it on the same host and, across hosts, sent an opcode byte the peer's UC QP drops,
// completing it with success. (A UC send error stops the send queue: SQE, section 10.)
#[test]
fn uc_send_with_invalidate_fails_as_in_rxe() {
    let (a, b) = pair(QpType::Uc);
    post_recv(&b, 1, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(5, &sge).with_inv(b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (5, WcStatus::LocQpOpErr));
    assert_eq!(a.qp.query().qp_state, QpState::Sqe);
    assert_empty(&b.cq);
}
