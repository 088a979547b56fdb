//! ibv_post_send(3) on RC: every opcode with its data and completion fields, and the
//! completion status rxe gives each error path (ibv_poll_cq(3)).
mod common;
use common::*;
use rverbs::*;
use std::time::{Duration, Instant};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn send_places_data_and_completes_both_sides() {
    let (a, b) = pair(QpType::Rc);
    let data = pattern(3000, 1);
    a.mr.write(100, &data).unwrap();
    post_recv(&b, 77, 0, 4096);
    let sge = [a.mr.sge(100, 3000).unwrap()];
    a.qp.post_send(&[SendWr::send(5, &sge).signaled()]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.wr_id(), s.status(), s.opcode(), s.byte_len()), (5, WcStatus::Success, Some(WcOpcode::Send), Some(3000)));
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status(), r.opcode(), r.byte_len()), (77, WcStatus::Success, Some(WcOpcode::Recv), Some(3000)));
    assert_eq!(r.qp_num(), b.qp.qp_num());
    assert_eq!(r.wc_flags(), Some(WcFlags::empty()));
    let mut got = vec![0u8; 3000];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn send_with_imm_carries_the_immediate() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 1, 0, 64);
    let sge = [a.mr.sge(0, 4).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).with_imm(0x1234_5678)]).unwrap();
    let r = poll_one(&b.cq);
    assert_eq!(r.imm_data(), Some(0x1234_5678));
    assert!(r.wc_flags().unwrap().contains(WcFlags::WITH_IMM));
    assert_empty(&a.cq); // unsignaled
}

#[test]
fn gather_and_scatter_span_several_sges() {
    let (a, b) = pair(QpType::Rc);
    a.mr.write(0, b"abc").unwrap();
    a.mr.write(1000, b"defgh").unwrap();
    a.mr.write(2000, b"ij").unwrap();
    let rs = [b.mr.sge(0, 4).unwrap(), b.mr.sge(500, 2).unwrap(), b.mr.sge(900, 100).unwrap()];
    b.qp.post_recv(&[RecvWr::new(1, &rs)]).unwrap();
    let ss = [a.mr.sge(0, 3).unwrap(), a.mr.sge(1000, 5).unwrap(), a.mr.sge(2000, 2).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &ss)]).unwrap();
    assert_eq!(poll_one(&b.cq).byte_len(), Some(10));
    let mut x = [0u8; 4];
    b.mr.read(0, &mut x).unwrap();
    assert_eq!(&x, b"abcd");
    let mut y = [0u8; 2];
    b.mr.read(500, &mut y).unwrap();
    assert_eq!(&y, b"ef");
    b.mr.read(900, &mut x).unwrap();
    assert_eq!(&x, b"ghij");
}

#[test]
fn inline_send_needs_no_registered_memory() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 1, 0, 64);
    let mut payload = *b"inline payload";
    a.qp.post_send(&[SendWr::new(9, WrOpcode::Send).inline(&payload).signaled()]).unwrap();
    payload.fill(0); // the bytes were copied at post time
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).byte_len(), Some(14));
    let mut got = [0u8; 14];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"inline payload");
}

#[test]
fn rdma_write_places_data_without_a_receive() {
    let (a, b) = pair(QpType::Rc);
    let data = pattern(50_000, 3);
    a.mr.write(0, &data).unwrap();
    let sge = [a.mr.sge(0, 50_000).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, b.mr.iova() + 10, b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.opcode(), wc.byte_len()), (Some(WcOpcode::RdmaWrite), Some(50_000)));
    assert_empty(&b.cq);
    let mut got = vec![0u8; 50_000];
    b.mr.read(10, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 31, 0, 0);
    a.mr.write(0, b"12345678").unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, b.mr.iova() + 64, b.mr.rkey()).with_imm(0xfeed)]).unwrap();
    let r = poll_one(&b.cq);
    assert_eq!(r.wr_id(), 31);
    assert_eq!(r.opcode(), Some(WcOpcode::RecvRdmaWithImm));
    assert_eq!(r.byte_len(), Some(8));
    assert_eq!(r.imm_data(), Some(0xfeed));
    let mut got = [0u8; 8];
    b.mr.read(64, &mut got).unwrap();
    assert_eq!(&got, b"12345678");
}

#[test]
fn rdma_read_fetches_remote_data() {
    let (a, b) = pair(QpType::Rc);
    let data = pattern(9000, 7);
    b.mr.write(5, &data).unwrap();
    let sge = [a.mr.sge(100, 9000).unwrap()];
    a.qp.post_send(&[SendWr::read(4, &sge, b.mr.iova() + 5, b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, Some(WcOpcode::RdmaRead), Some(9000)));
    let mut got = vec![0u8; 9000];
    a.mr.read(100, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn atomics_return_the_original_value() {
    let (a, b) = pair(QpType::Rc);
    b.mr.write(64, &10u64.to_ne_bytes()).unwrap();
    let res = [a.mr.sge(0, 8).unwrap()];
    let r = b.mr.iova() + 64;
    a.qp.post_send(&[SendWr::fetch_add(1, &res, r, b.mr.rkey(), 5).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.opcode(), wc.byte_len()), (Some(WcOpcode::FetchAdd), Some(8)));
    assert_eq!(a.mr.read_u64(0).unwrap(), 10);
    assert_eq!(b.mr.read_u64(64).unwrap(), 15);
    // Compare-and-swap that does not match leaves memory alone.
    a.qp.post_send(&[SendWr::compare_swap(2, &res, r, b.mr.rkey(), 99, 1).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).opcode(), Some(WcOpcode::CompSwap));
    assert_eq!(a.mr.read_u64(0).unwrap(), 15);
    assert_eq!(b.mr.read_u64(64).unwrap(), 15);
    // One that matches swaps.
    a.qp.post_send(&[SendWr::compare_swap(3, &res, r, b.mr.rkey(), 15, 77).signaled()]).unwrap();
    poll_one(&a.cq);
    assert_eq!(a.mr.read_u64(0).unwrap(), 15);
    assert_eq!(b.mr.read_u64(64).unwrap(), 77);
}

#[test]
fn zero_length_operations_complete() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 1, 0, 0);
    a.qp.post_send(&[SendWr::send(1, &[]).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).byte_len(), Some(0));
    assert_eq!(poll_one(&b.cq).byte_len(), Some(0));
    // Zero-length RDMA skips the rkey check (C9-88).
    a.qp.post_send(&[SendWr::write(2, &[], 0, 0).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    a.qp.post_send(&[SendWr::read(3, &[], 0, 0).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
}

#[test]
fn sq_sig_all_signals_every_request_and_unsignaled_ones_are_silent() {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let qp = a.pd.create_qp(&QpInit { sq_sig_all: true, ..QpInit::new(QpType::Rc, &a.cq, CAP) }).unwrap();
    let a2 = Side { qp, ..side(QpType::Rc) };
    let a2 = Side { ctx: a.ctx.clone(), pd: a.pd.clone(), cq: a.cq.clone(), mr: a.mr.clone(), ..a2 };
    connect(&a2, &b, &PATH);
    a2.qp.post_send(&[SendWr::write(1, &[], 0, 0)]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    // Without sq_sig_all (the plain pair) an unsignaled write completes silently.
    let (c, d) = pair(QpType::Rc);
    c.qp.post_send(&[SendWr::write(1, &[], d.mr.iova(), d.mr.rkey())]).unwrap();
    assert_empty(&c.cq);
}

// --- post-time errors (EINVAL / ENOMEM, the first refused request reported) ---

#[test]
fn post_errors_name_the_first_refused_request() {
    let (a, b) = pair_with(QpType::Rc, &PATH, 256, QpCap { max_send_wr: 2, ..CAP });
    let five: Vec<Sge> = (0..5).map(|i| a.mr.sge(i * 8, 8).unwrap()).collect();
    let ok = SendWr::write(1, &[], b.mr.iova(), b.mr.rkey());
    let err = a.qp.post_send(&[ok, SendWr::send(2, &five)]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (1, libc::EINVAL));
    assert!(matches!(err.error, Error::TooManySge { max: 4, got: 5 }));

    let big = vec![0u8; 100];
    let err = a.qp.post_send(&[SendWr::new(1, WrOpcode::Send).inline(&big)]).unwrap_err();
    assert_eq!(err.error.errno(), libc::EINVAL, "{}", err.error);

    let nine = [a.mr.sge(0, 9).unwrap()];
    let err = a.qp.post_send(&[SendWr::fetch_add(1, &nine, b.mr.iova(), b.mr.rkey(), 1)]).unwrap_err();
    assert_eq!(err.error.errno(), libc::EINVAL, "atomics move exactly 8 bytes");
    let eight = [a.mr.sge(0, 8).unwrap()];
    let err = a.qp.post_send(&[SendWr::fetch_add(1, &eight, b.mr.iova() + 4, b.mr.rkey(), 1)]).unwrap_err();
    assert_eq!(err.error.errno(), libc::EINVAL, "misaligned atomic");
}

#[test]
fn a_full_send_queue_is_enomem() {
    let (a, b) = pair_with(QpType::Rc, &PATH, 256, QpCap { max_send_wr: 2, ..CAP });
    // Block the queue: sends with no receive posted wait on RNR (rnr_retry 7).
    let sge = [a.mr.sge(0, 8).unwrap()];
    let s = SendWr::send(1, &sge);
    a.qp.post_send(&[s, s]).unwrap();
    let err = a.qp.post_send(&[s]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, libc::ENOMEM));
    drop(b);
}

#[test]
fn posting_before_rts_is_einval() {
    let a = side(QpType::Rc);
    let s = SendWr::write(1, &[], 0, 0);
    assert_eq!(a.qp.post_send(&[s]).unwrap_err().error.errno(), libc::EINVAL);
    to_init(&a.qp, ALL_ACCESS);
    assert_eq!(a.qp.post_send(&[s]).unwrap_err().error.errno(), libc::EINVAL);
}

// --- error completions ---

#[test]
fn bad_local_key_is_loc_prot_err_and_moves_the_qp_to_err() {
    let (a, b) = pair(QpType::Rc);
    let bad = [Sge { addr: a.mr.iova(), length: 8, lkey: a.mr.lkey() + 1 }];
    a.qp.post_send(&[SendWr::write(1, &bad, b.mr.iova(), b.mr.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.status(), WcStatus::LocProtErr);
    assert_eq!(wc.vendor_err(), vendor_err::LOCAL_LKEY);
    assert_eq!(a.qp.state(), QpState::Err);
    // Errors stick: later requests are flushed.
    a.qp.post_send(&[SendWr::write(2, &[], 0, 0)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::WrFlushErr);
}

#[test]
fn local_range_outside_the_region_is_loc_prot_err() {
    let (a, b) = pair(QpType::Rc);
    let bad = [Sge { addr: a.mr.iova() + MR_LEN as u64 - 4, length: 8, lkey: a.mr.lkey() }];
    a.qp.post_send(&[SendWr::write(1, &bad, b.mr.iova(), b.mr.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::LocProtErr, vendor_err::LOCAL_BOUNDS));
}

#[test]
fn read_into_memory_without_local_write_is_loc_prot_err() {
    let (a, b) = pair(QpType::Rc);
    let ro = a.pd.alloc_mr(64, Access::empty()).unwrap();
    let sge = [ro.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::read(1, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::LocProtErr, vendor_err::LOCAL_ACCESS));
}

#[test]
fn remote_key_faults_are_rem_access_err_and_the_responder_errs() {
    type Target = Box<dyn Fn(&Side) -> (u64, u32)>;
    let cases: Vec<(&str, Target, u32)> = vec![
        ("unknown rkey", Box::new(|b: &Side| (b.mr.iova(), b.mr.rkey() + 1)), vendor_err::REMOTE_RKEY),
        ("out of bounds", Box::new(|b: &Side| (b.mr.iova() + MR_LEN as u64 - 2, b.mr.rkey())), vendor_err::REMOTE_BOUNDS),
    ];
    for (what, target, code) in cases {
        let (a, b) = pair(QpType::Rc);
        let (addr, rkey) = target(&b);
        let sge = [a.mr.sge(0, 8).unwrap()];
        a.qp.post_send(&[SendWr::write(1, &sge, addr, rkey)]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::RemAccessErr, code), "{what}");
        assert_eq!(b.qp.state(), QpState::Err, "{what}: class C error moves the responder to ERR");
        let ev = b.ctx.get_async_event().unwrap();
        assert_eq!(ev.event_type(), EventType::QpAccessErr);
    }
}

#[test]
fn memory_region_without_remote_write_is_rem_access_err() {
    let (a, b) = pair(QpType::Rc);
    let ro = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, ro.iova(), ro.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::RemAccessErr, vendor_err::REMOTE_MR_ACCESS));
}

#[test]
fn rkey_of_another_pd_is_rem_access_err() {
    let (a, b) = pair(QpType::Rc);
    let other = b.ctx.alloc_pd().unwrap().alloc_mr(64, ALL_ACCESS).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, other.iova(), other.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::RemAccessErr, vendor_err::REMOTE_PD));
}

fn pair_with_responder_access(access: Access) -> (Side, Side) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, b.qp.qp_num(), &PATH);
    to_rts(&a.qp, &PATH);
    to_init(&b.qp, access);
    to_rtr(&b.qp, &b.ctx, a.qp.qp_num(), &PATH);
    to_rts(&b.qp, &PATH);
    (a, b)
}

#[test]
fn qp_access_flags_gate_remote_operations_with_rem_inv_req_err() {
    for (op, code) in [
        (WrOpcode::RdmaWrite, vendor_err::REMOTE_QP_ACCESS),
        (WrOpcode::RdmaRead, vendor_err::REMOTE_QP_ACCESS),
        (WrOpcode::AtomicFetchAndAdd, vendor_err::REMOTE_QP_ACCESS),
    ] {
        let (a, b) = pair_with_responder_access(Access::LOCAL_WRITE);
        let sge = [a.mr.sge(0, 8).unwrap()];
        let wr = SendWr { payload: Payload::Sge(&sge), remote_addr: b.mr.iova(), rkey: b.mr.rkey(), ..SendWr::new(1, op) };
        a.qp.post_send(&[wr]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::RemInvReqErr, code), "{op:?}");
        assert_eq!(b.qp.state(), QpState::Err);
    }
}

#[test]
fn receive_too_small_is_rem_inv_req_at_the_sender_and_loc_len_at_the_receiver() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 8, 0, 16);
    post_recv(&b, 9, 0, 16);
    let sge = [a.mr.sge(0, 17).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge)]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.status(), s.vendor_err()), (WcStatus::RemInvReqErr, vendor_err::RECV_TOO_SMALL));
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status()), (8, WcStatus::LocLenErr));
    // The receiver is in ERR: its other receive is flushed.
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status()), (9, WcStatus::WrFlushErr));
    assert_eq!(b.qp.state(), QpState::Err);
}

#[test]
fn receive_with_a_bad_lkey_is_rem_op_err() {
    let (a, b) = pair(QpType::Rc);
    let bad = [Sge { addr: b.mr.iova(), length: 64, lkey: 0x7fff_ff00 }];
    b.qp.post_recv(&[RecvWr::new(3, &bad)]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemOpErr);
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status(), r.vendor_err()), (3, WcStatus::LocQpOpErr, vendor_err::RECV_WQE_BAD));
}

#[test]
fn rnr_retries_exhausted_is_rnr_retry_exc_err() {
    let path = Path { rnr_retry: 2, min_rnr_timer: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge)]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::RnrRetryExcErr, vendor_err::RNR_EXHAUSTED));
    assert_eq!(a.qp.state(), QpState::Err);
    assert_eq!(b.qp.state(), QpState::Rts, "RNR does not hurt the responder");
}

#[test]
fn rnr_with_zero_retries_fails_at_once() {
    let path = Path { rnr_retry: 0, ..PATH };
    let (a, _b) = pair_with(QpType::Rc, &path, 64, CAP);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RnrRetryExcErr);
}

#[test]
fn infinite_rnr_retry_delivers_once_a_receive_is_posted() {
    let path = Path { rnr_retry: 7, min_rnr_timer: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    a.mr.write(0, b"late").unwrap();
    let sge = [a.mr.sge(0, 4).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_empty(&a.cq);
    post_recv(&b, 2, 0, 16);
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!(r.byte_len(), Some(4));
}

#[test]
fn requests_queued_behind_an_rnr_wait_keep_their_order() {
    let path = Path { rnr_retry: 7, min_rnr_timer: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    let sge = [a.mr.sge(0, 4).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    a.qp.post_send(&[SendWr::write(2, &[], 0, 0).signaled()]).unwrap();
    assert_empty(&a.cq);
    post_recv(&b, 1, 0, 16);
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
}

#[test]
fn unreachable_peer_ends_in_retry_exc_err() {
    // timeout 1 = 8.2 µs, retry_cnt 3: gives up after four attempts.
    let path = Path { timeout: 1, retry_cnt: 3, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    b.qp.destroy().unwrap();
    let start = Instant::now();
    a.qp.post_send(&[SendWr::write(1, &[], 0, 0)]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::RetryExcErr, vendor_err::RETRY_EXHAUSTED));
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn a_peer_in_reset_does_not_answer() {
    let path = Path { timeout: 1, retry_cnt: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    b.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    a.qp.post_send(&[SendWr::write(1, &[], 0, 0)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RetryExcErr);
}

/// A QP connected to another QP does not answer a third one aiming at it (RC carries no
/// source QPN; on the wire the stray requests would fail the PSN check).
#[test]
fn a_qp_answers_only_the_qp_it_is_connected_to() {
    let path = Path { timeout: 1, retry_cnt: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    let stray = side(QpType::Rc);
    to_init(&stray.qp, ALL_ACCESS);
    to_rtr(&stray.qp, &stray.ctx, b.qp.qp_num(), &path);
    to_rts(&stray.qp, &path);
    let sge = [stray.mr.sge(0, 8).unwrap()];
    let rkey = b.mr.rkey();
    stray.qp.post_send(&[SendWr::write(1, &sge, b.mr.iova(), rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&stray.cq).status(), WcStatus::RetryExcErr);
    // The connected requester still is.
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(2, &sge, b.mr.iova(), rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
}

#[test]
fn entering_err_flushes_every_outstanding_request() {
    let path = Path { rnr_retry: 7, min_rnr_timer: 31, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 64, CAP);
    let sge = [a.mr.sge(0, 4).unwrap()];
    // Three requests stuck behind an RNR wait of 491 ms, two of them unsignaled.
    a.qp.post_send(&[SendWr::send(1, &sge), SendWr::send(2, &sge).signaled(), SendWr::send(3, &sge)]).unwrap();
    post_recv(&a, 10, 0, 8);
    post_recv(&a, 11, 0, 8);
    assert_empty(&a.cq);
    a.qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    let mut got = vec![];
    for _ in 0..5 {
        let wc = poll_one(&a.cq);
        assert_eq!(wc.status(), WcStatus::WrFlushErr);
        assert_eq!(wc.vendor_err(), vendor_err::FLUSHED);
        got.push(wc.wr_id());
    }
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3, 10, 11]);
    assert_empty(&a.cq);
    // Receives posted in ERR are flushed at once.
    post_recv(&a, 12, 0, 8);
    assert_eq!(poll_one(&a.cq).wr_id(), 12);
    drop(b);
}

#[test]
fn reset_discards_outstanding_requests_without_completions() {
    let path = Path { rnr_retry: 7, min_rnr_timer: 31, ..PATH };
    let (a, _b) = pair_with(QpType::Rc, &path, 64, CAP);
    let sge = [a.mr.sge(0, 4).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    post_recv(&a, 10, 0, 8);
    a.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    assert_empty(&a.cq);
    assert_eq!(a.qp.send_queue_len(), 0);
    assert_eq!(a.qp.recv_queue_len(), 0);
}

#[test]
fn dropping_memory_handles_does_not_free_buffers_of_posted_requests() {
    let (a, b) = pair(QpType::Rc);
    let recv_mr = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [recv_mr.sge(0, 64).unwrap()];
    b.qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
    let keep_reading = recv_mr.clone();
    drop(recv_mr);
    // The only handle left is ours to check the data; the posted receive kept the
    // registration alive on its own (see the next assert on a region dropped entirely).
    a.mr.write(0, b"still here").unwrap();
    let ss = [a.mr.sge(0, 10).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &ss)]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    let mut got = [0u8; 10];
    keep_reading.read(0, &mut got).unwrap();
    assert_eq!(&got, b"still here");

    // A region whose every handle is dropped stays registered until its receive is used.
    let gone = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [gone.sge(0, 64).unwrap()];
    b.qp.post_recv(&[RecvWr::new(2, &sge)]).unwrap();
    drop(gone);
    a.qp.post_send(&[SendWr::send(2, &ss)]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
}

/// The R_Key of a region whose handles are all dropped stops working once the receive
/// that kept it registered has completed and its completion was polled (ibv_post_recv(3),
/// NOTES: the buffers are the program's again then; `Pd::reg_mr`'s safety contract lets
/// the program free the memory), whether the last handle went before the completion was
/// polled or after. Both ways of the same-host link: the queued way (a connection's first
/// request), which takes the receive and then places the message, and the express lane
/// (the requests after it), which places the message as it takes the receive.
#[test]
fn a_dropped_region_is_deregistered_once_its_receive_completion_is_polled() {
    for dropped_first in [false, true] {
        for express in [false, true] {
            let (a, b) = pair(QpType::Rc);
            let ss = [a.mr.sge(0, 8).unwrap()];
            if express {
                a.qp.post_send(&[SendWr::write(9, &ss, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
                assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
            }
            let m = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
            let (iova, rkey) = (m.iova(), m.rkey());
            b.qp.post_recv(&[RecvWr::new(1, &[m.sge(0, 64).unwrap()])]).unwrap();
            let mut last = Some(m.clone());
            drop(m);
            if dropped_first {
                drop(last.take());
            }
            a.qp.post_send(&[SendWr::send(2, &ss).signaled()]).unwrap();
            assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
            drop(last);
            assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
            a.qp.post_send(&[SendWr::write(3, &ss, iova, rkey).signaled()]).unwrap();
            let wc = poll_one(&a.cq);
            assert_eq!(wc.status(), WcStatus::RemAccessErr, "express lane: {express}, last handle dropped before the poll: {dropped_first}");
        }
    }
}

/// A receive still outstanding keeps its region while another receive's completion is
/// polled: a completion lets go of its own receive's hold only.
#[test]
fn a_polled_completion_lets_go_of_its_own_receive_only() {
    let (a, b) = pair(QpType::Rc);
    let first = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let second = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(&[RecvWr::new(1, &[first.sge(0, 64).unwrap()]), RecvWr::new(2, &[second.sge(0, 64).unwrap()])]).unwrap();
    drop(second);
    let ss = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &ss).signaled()]).unwrap();
    assert_eq!((poll_one(&b.cq).wr_id(), poll_one(&a.cq).status()), (1, WcStatus::Success));
    a.qp.post_send(&[SendWr::send(2, &ss).signaled()]).unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::Success), "the second receive's region is still registered");
    drop(first);
}

#[test]
fn dereg_makes_pending_requests_fail_instead_of_touching_memory() {
    let (a, b) = pair(QpType::Rc);
    let m = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [m.sge(0, 64).unwrap()];
    b.qp.post_recv_unpinned(&[RecvWr::new(1, &sge)]).unwrap();
    m.dereg().unwrap();
    let ss = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &ss)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemOpErr);
    assert_eq!(poll_one(&b.cq).status(), WcStatus::LocQpOpErr);
}

// ---- RDMA READ on the express lane (docs/queue-pairs.md, "The express lane") ----
// The first request of a connection takes the queued way (it finds the route); a READ
// posted on an empty send queue after it is executed inside the post. Each test below
// warms the lane up first, so the case it checks is the lane's, and names what the
// queued way gives, which the lane must give too.

/// Warms the lane up: READs of 8 bytes from `b`'s region into `a`'s, each a success.
#[track_caller]
fn read_warm(a: &Side, b: &Side) {
    for id in 0..3 {
        let sge = [a.mr.sge(8 * id as usize, 8).unwrap()];
        a.qp.post_send(&[SendWr::read(id, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
}

/// ibv_post_send(3), ibv_poll_cq(3): READs after the first place the remote bytes into
/// one or several SGEs and complete as RDMA_READ with the message's length; unsignaled
/// ones give no completion; WRITEs and READs interleave in order.
#[test]
fn reads_on_the_express_lane_place_their_bytes_and_complete() {
    let (a, b) = pair(QpType::Rc);
    read_warm(&a, &b);
    let data = pattern(4000, 3);
    b.mr.write(1000, &data).unwrap();
    for (id, (off, len)) in [(10u64, (1000usize, 4000u32)), (11, (1500, 1)), (12, (4999, 1))] {
        let sge = [a.mr.sge(8192, len).unwrap()];
        a.qp.post_send(&[SendWr::read(id, &sge, b.mr.iova() + off as u64, b.mr.rkey()).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len()), (id, WcStatus::Success, Some(WcOpcode::RdmaRead), Some(len)));
        let mut got = vec![0u8; len as usize];
        a.mr.read(8192, &mut got).unwrap();
        assert_eq!(got, data[off - 1000..off - 1000 + len as usize], "READ {id}");
    }
    // Two SGEs, the second in another region of the PD: the bytes split across them.
    let other = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let sges = [a.mr.sge(0, 1000).unwrap(), other.sge(16, 3000).unwrap()];
    a.qp.post_send(&[SendWr::read(20, &sges, b.mr.iova() + 1000, b.mr.rkey())]).unwrap();
    let w = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(21, &w, b.mr.iova() + 8000, b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.opcode()), (21, Some(WcOpcode::RdmaWrite)), "the unsignaled READ gives no completion");
    assert_empty(&a.cq);
    let (mut first, mut second) = (vec![0u8; 1000], vec![0u8; 3000]);
    a.mr.read(0, &mut first).unwrap();
    other.read(16, &mut second).unwrap();
    assert_eq!(first, data[..1000]);
    assert_eq!(second, data[1000..]);
    let mut written = [0u8; 8];
    b.mr.read(8000, &mut written).unwrap();
    assert_eq!(written, data[..8], "the WRITE after the READ carried what the READ placed");
}

/// ibv_post_send(3): a READ whose scatter list lacks LOCAL_WRITE is LOC_PROT_ERR on the
/// lane as on the queued way, and nothing is placed.
#[test]
fn read_after_reads_into_memory_without_local_write_is_loc_prot_err() {
    let (a, b) = pair(QpType::Rc);
    read_warm(&a, &b);
    b.mr.write(0, &[9u8; 8]).unwrap();
    let ro = a.pd.alloc_mr(64, Access::empty()).unwrap();
    let sge = [ro.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::read(7, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.vendor_err()), (7, WcStatus::LocProtErr, vendor_err::LOCAL_ACCESS));
    assert_eq!(ro.read_u64(0).unwrap(), 0, "nothing is placed");
}

/// ibv_post_send(3): a READ through an R_Key without REMOTE_READ, after READs through
/// one with it, is REM_ACCESS_ERR, and the responder enters ERR (rxe class C).
#[test]
fn read_after_reads_through_a_key_without_remote_read_is_rem_access_err() {
    let (a, b) = pair(QpType::Rc);
    read_warm(&a, &b);
    let wo = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    wo.write(0, &[9u8; 8]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.mr.write(0, &[0u8; 8]).unwrap();
    a.qp.post_send(&[SendWr::read(7, &sge, wo.iova(), wo.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (7, WcStatus::RemAccessErr));
    assert_eq!(b.qp.state(), QpState::Err);
    assert_eq!(a.mr.read_u64(0).unwrap(), 0, "nothing is placed");
}

/// ibv_modify_qp(3) (RTS to RTS): a responder whose QP no longer grants REMOTE_READ
/// refuses the next READ as an invalid request (rxe CHK_OP_VALID), after READs it
/// answered.
#[test]
fn read_after_the_responder_drops_remote_read_is_rem_inv_req_err() {
    let (a, b) = pair(QpType::Rc);
    read_warm(&a, &b);
    let attr = QpAttr { qp_access_flags: Access::REMOTE_WRITE, ..QpAttr::default() };
    b.qp.modify(&attr, QpAttrMask::ACCESS_FLAGS).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::read(7, &sge, b.mr.iova(), b.mr.rkey())]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (7, WcStatus::RemInvReqErr));
}

/// ibv_modify_qp(3): with `max_rd_atomic` 0 a READ has no credit and waits (rxe holds
/// it; the lane, open after WRITEs, must not run it), and the WRITE posted behind it waits
/// in order; a credit given in SQD lets both complete once in RTS, the READ first.
#[test]
fn read_without_a_credit_waits_until_a_modify_gives_one() {
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    // `a` sends no READ (max_rd_atomic 0); `b` answers them (max_dest_rd_atomic 4).
    let held = RemotePath { max_rd_atomic: 0, ..remote(&a.ctx, b.qp.qp_num(), &PATH, ALL_ACCESS) };
    a.qp.connect(&held).unwrap();
    b.qp.connect(&remote(&b.ctx, a.qp.qp_num(), &PATH, ALL_ACCESS)).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    for id in 0..3 {
        a.qp.post_send(&[SendWr::write(id, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
    a.qp.post_send(&[SendWr::read(7, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    a.qp.post_send(&[SendWr::write(8, &sge, b.mr.iova() + 64, b.mr.rkey()).signaled()]).unwrap();
    assert_empty(&a.cq);
    let sqd = QpAttr { qp_state: QpState::Sqd, ..QpAttr::default() };
    a.qp.modify(&sqd, QpAttrMask::STATE).unwrap();
    let credit = QpAttr { qp_state: QpState::Sqd, max_rd_atomic: 1, ..QpAttr::default() };
    a.qp.modify(&credit, QpAttrMask::STATE | QpAttrMask::MAX_QP_RD_ATOMIC).unwrap();
    assert_empty(&a.cq);
    let rts = QpAttr { qp_state: QpState::Rts, ..QpAttr::default() };
    a.qp.modify(&rts, QpAttrMask::STATE).unwrap();
    let (r, w) = (poll_one(&a.cq), poll_one(&a.cq));
    assert_eq!((r.wr_id(), r.status(), r.opcode()), (7, WcStatus::Success, Some(WcOpcode::RdmaRead)));
    assert_eq!((w.wr_id(), w.status()), (8, WcStatus::Success));
}

// ---- Atomics on the express lane (docs/queue-pairs.md, "The express lane") ----

/// ibv_post_send(3): FETCH_ADD and CMP_SWAP after the first return the word's original
/// value into the scatter list and complete with 8 bytes; a CMP_SWAP that does not match
/// leaves the word alone.
#[test]
fn atomics_on_the_express_lane_return_the_original() {
    let (a, b) = pair(QpType::Rc);
    let word = b.mr.iova() + 64;
    b.mr.write(64, &100u64.to_ne_bytes()).unwrap();
    let res = [a.mr.sge(8, 8).unwrap()];
    for (i, id) in (1..=4u64).enumerate() {
        a.qp.post_send(&[SendWr::fetch_add(id, &res, word, b.mr.rkey(), 3).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len()), (id, WcStatus::Success, Some(WcOpcode::FetchAdd), Some(8)));
        assert_eq!(a.mr.read_u64(8).unwrap(), 100 + 3 * i as u64, "the original value");
    }
    assert_eq!(b.mr.read_u64(64).unwrap(), 112, "each executed once");
    a.qp.post_send(&[SendWr::compare_swap(5, &res, word, b.mr.rkey(), 112, 7).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.opcode(), wc.byte_len()), (Some(WcOpcode::CompSwap), Some(8)));
    assert_eq!((a.mr.read_u64(8).unwrap(), b.mr.read_u64(64).unwrap()), (112, 7));
    a.qp.post_send(&[SendWr::compare_swap(6, &res, word, b.mr.rkey(), 112, 9)]).unwrap();
    a.qp.post_send(&[SendWr::write(7, &[a.mr.sge(0, 8).unwrap()], b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 7, "the unsignaled CMP_SWAP gives no completion");
    assert_eq!((a.mr.read_u64(8).unwrap(), b.mr.read_u64(64).unwrap()), (7, 7), "no match: the word is left");
}

/// ibv_post_send(3): after atomics through keys that allow them, an atomic through an
/// R_Key without REMOTE_ATOMIC is REM_ACCESS_ERR and leaves the word; one whose scatter
/// list lacks LOCAL_WRITE is LOC_PROT_ERR; a misaligned one is refused at the post.
#[test]
fn atomics_after_atomics_fail_as_the_queued_way() {
    let warm = |a: &Side, b: &Side| {
        let res = [a.mr.sge(0, 8).unwrap()];
        for id in 0..3 {
            a.qp.post_send(&[SendWr::fetch_add(id, &res, b.mr.iova(), b.mr.rkey(), 1).signaled()]).unwrap();
            assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        }
    };
    let (a, b) = pair(QpType::Rc);
    warm(&a, &b);
    let rw = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    rw.write(0, &5u64.to_ne_bytes()).unwrap();
    let res = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::fetch_add(9, &res, rw.iova(), rw.rkey(), 1)]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::RemAccessErr));
    assert_eq!(rw.read_u64(0).unwrap(), 5, "the word is left");

    let (a, b) = pair(QpType::Rc);
    warm(&a, &b);
    let ro = a.pd.alloc_mr(64, Access::empty()).unwrap();
    let res = [ro.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::fetch_add(9, &res, b.mr.iova(), b.mr.rkey(), 1)]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::LocProtErr));
    assert_eq!(a.qp.state(), QpState::Err);
    assert_eq!(ro.read_u64(0).unwrap(), 0, "nothing is stored");

    let (a, b) = pair(QpType::Rc);
    warm(&a, &b);
    let res = [a.mr.sge(0, 8).unwrap()];
    let e = a.qp.post_send(&[SendWr::fetch_add(9, &res, b.mr.iova() + 4, b.mr.rkey(), 1)]).unwrap_err();
    assert_eq!(e.error.errno(), libc::EINVAL, "{e:?}");
    assert_empty(&a.cq);
}

/// ibv_post_send(3), ibv_poll_cq(3): an atomic whose result buffer its owner unmapped
/// after registering it (the registration stays) is executed once — the word changes by
/// one add, never two — and completes LOC_PROT_ERR when its original value cannot be
/// stored; the QP enters ERR and what is posted after it is flushed.
#[test]
fn an_atomic_whose_result_buffer_is_gone_executes_once_and_is_loc_prot_err() {
    let (a, b) = pair(QpType::Rc);
    let page = 4096;
    // SAFETY: a fresh anonymous mapping, registered below and unmapped by this test only.
    let area = unsafe {
        libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(area, libc::MAP_FAILED);
    // SAFETY: the mapping is live now; the device checks it on each access after the
    // test unmaps it.
    let res_mr = unsafe { a.pd.reg_mr(area.cast(), page, Access::LOCAL_WRITE) }.unwrap();
    let res = [res_mr.sge(0, 8).unwrap()];
    b.mr.write(0, &10u64.to_ne_bytes()).unwrap();
    for id in 0..3 {
        a.qp.post_send(&[SendWr::fetch_add(id, &res, b.mr.iova(), b.mr.rkey(), 1).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
    assert_eq!(b.mr.read_u64(0).unwrap(), 13);
    // SAFETY: nothing of this test reads the area again; the registration outlives it.
    assert_eq!(unsafe { libc::munmap(area, page) }, 0);
    a.qp.post_send(&[SendWr::fetch_add(5, &res, b.mr.iova(), b.mr.rkey(), 100)]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (5, WcStatus::LocProtErr));
    assert_eq!(b.mr.read_u64(0).unwrap(), 113, "executed once");
    assert_eq!(a.qp.state(), QpState::Err);
    let w = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(6, &w, b.mr.iova() + 64, b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (6, WcStatus::WrFlushErr));
    assert_empty(&a.cq);
    drop(res_mr);
}

// ---- Immediate data on the express lane (docs/queue-pairs.md, "The express lane") ----

/// ibv_post_send(3), ibv_poll_cq(3): after the first request, SEND_WITH_IMM places its
/// bytes into the receive and completes it with the immediate data (IBV_WC_WITH_IMM);
/// RDMA_WRITE_WITH_IMM places its bytes into memory and consumes a receive, which
/// completes as RECV_RDMA_WITH_IMM with the WRITE's length and its own buffer untouched;
/// a zero-length one consumes a receive too. The sender sees SEND and RDMA_WRITE.
#[test]
fn immediate_data_on_the_express_lane_reaches_the_receive() {
    let (a, b) = pair(QpType::Rc);
    let ss = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &ss, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let data = pattern(300, 5);
    a.mr.write(0, &data).unwrap();
    for k in 0..3u64 {
        post_recv(&b, 10 + k, 4096 + 512 * k as usize, 512);
    }
    b.mr.write(4096, &[0xAAu8; 1536]).unwrap();
    let sge = [a.mr.sge(0, 300).unwrap()];
    a.qp.post_send(&[SendWr::send(2, &sge).with_imm(0x0102_0304).signaled()]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.wr_id(), s.status(), s.opcode()), (2, WcStatus::Success, Some(WcOpcode::Send)));
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status(), r.opcode(), r.byte_len()), (10, WcStatus::Success, Some(WcOpcode::Recv), Some(300)));
    assert_eq!((r.imm_data(), r.wc_flags().map(|f| f.contains(WcFlags::WITH_IMM))), (Some(0x0102_0304), Some(true)));
    let mut got = vec![0u8; 300];
    b.mr.read(4096, &mut got).unwrap();
    assert_eq!(got, data);

    a.qp.post_send(&[SendWr::write(3, &sge, b.mr.iova() + 8192, b.mr.rkey()).with_imm(0x0506_0708).signaled()]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.wr_id(), s.status(), s.opcode()), (3, WcStatus::Success, Some(WcOpcode::RdmaWrite)));
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status(), r.opcode(), r.byte_len()), (11, WcStatus::Success, Some(WcOpcode::RecvRdmaWithImm), Some(300)));
    assert_eq!(r.imm_data(), Some(0x0506_0708));
    b.mr.read(8192, &mut got).unwrap();
    assert_eq!(got, data, "the WRITE's bytes are in memory");
    let mut untouched = [0u8; 512];
    b.mr.read(4096 + 512, &mut untouched).unwrap();
    assert!(untouched.iter().all(|&x| x == 0xAA), "the receive's buffer takes nothing");

    a.qp.post_send(&[SendWr::write(4, &[], 0, 0).with_imm(9).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.opcode(), r.byte_len(), r.imm_data()), (12, Some(WcOpcode::RecvRdmaWithImm), Some(0), Some(9)));
    assert_empty(&b.cq);
}

/// ibv_post_send(3): after requests that went, a WRITE with immediate data that finds no
/// receive waits (RNR) without writing, then writes and completes once one is posted;
/// one through an R_Key that does not grant REMOTE_WRITE is REM_ACCESS_ERR and writes
/// nothing.
#[test]
fn a_write_with_immediate_after_requests_waits_for_a_receive_or_fails_its_key() {
    let (a, b) = pair(QpType::Rc);
    let ss = [a.mr.sge(0, 8).unwrap()];
    a.mr.write(0, &[7u8; 8]).unwrap();
    a.qp.post_send(&[SendWr::write(1, &ss, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    a.qp.post_send(&[SendWr::write(2, &ss, b.mr.iova() + 64, b.mr.rkey()).with_imm(1).signaled()]).unwrap();
    assert_empty(&a.cq);
    assert_eq!(b.mr.read_u64(64).unwrap(), 0, "nothing written while no receive takes it");
    post_recv(&b, 20, 0, 64);
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).wr_id(), 20);
    assert_eq!(b.mr.read_u64(64).unwrap(), u64::from_ne_bytes([7; 8]));

    let ro = b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    post_recv(&b, 21, 0, 64);
    a.qp.post_send(&[SendWr::write(3, &ss, ro.iova(), ro.rkey()).with_imm(2).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
    assert_eq!(ro.read_u64(0).unwrap(), 0, "nothing written");
    assert_eq!(b.qp.state(), QpState::Err);
}

/// An RDMA WRITE across hosts (path MTU 1024) is placed packet by packet: its first
/// packet into the memory checked for the whole message, its later ones, handed on a GSO
/// train at a time, through one pin of the range the train covers (docs/network.md, "RC
/// and UC across hosts"). Every byte lands where the RETH says, whatever the offset and
/// length, with and without immediate data, and nothing around it changes.
#[test]
fn a_write_of_many_packets_across_hosts_lands_whole_at_its_address() {
    let (da, db) = (device_on([127, 0, 15, 1], "write-span", None), device_on([127, 0, 15, 2], "write-span", None));
    let a = side_on(da.open().unwrap(), QpType::Rc, 16, CAP);
    let b = side_on(db.open().unwrap(), QpType::Rc, 16, CAP);
    connect_across(&a.qp, &b.ctx, b.qp.qp_num(), PATH.timeout);
    connect_across(&b.qp, &a.ctx, a.qp.qp_num(), PATH.timeout);
    let cases = [(0, MR_LEN, false), (1000, 50_000, false), (7, 5_000, true), (4096, 1025, false), (3, MR_LEN - 3, true)];
    for (k, (off, len, imm)) in cases.into_iter().enumerate() {
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + k * 13 + i / 1024) as u8).collect();
        a.mr.write(0, &pattern).unwrap();
        b.mr.write(0, &vec![0xee; MR_LEN]).unwrap();
        if imm {
            post_recv(&b, 100 + k as u64, 0, 0);
        }
        let sge = [a.mr.sge(0, len as u32).unwrap()];
        let wr = SendWr::write(k as u64, &sge, b.mr.addr() as u64 + off as u64, b.mr.rkey()).signaled();
        let wr = if imm { wr.with_imm(0x5eed_0000 + k as u32) } else { wr };
        a.qp.post_send(&[wr]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (k as u64, WcStatus::Success), "case {k}");
        if imm {
            let wc = poll_one(&b.cq);
            assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (100 + k as u64, WcStatus::Success, Some(len as u32)), "case {k}");
        }
        let mut got = vec![0u8; MR_LEN];
        b.mr.read(0, &mut got).unwrap();
        assert!(got[..off].iter().all(|&x| x == 0xee), "case {k}: bytes before the range");
        assert!(got[off..off + len] == pattern[..], "case {k}: the range ({off}, {len})");
        assert!(got[off + len..].iter().all(|&x| x == 0xee), "case {k}: bytes after the range");
    }
}
