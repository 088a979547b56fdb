//! ibv_create_cq_ex(3) — start/next/end polling and fields chosen by wc_flags.
mod common;
use common::*;
use rverbs::*;

/// A connected pair whose receiving side (b) completes to an extended CQ with `flags`.
fn pair_ex(flags: WcExFlags) -> (Side, Side) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let cq = b.ctx.create_cq(&CqInit::new(64).wc_flags(flags)).unwrap();
    let qp = b.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let b = Side { cq, qp, ..b };
    connect(&a, &b, &PATH);
    (a, b)
}

fn send_imm(a: &Side, b: &Side, wr_id: u64, len: u32, imm: u32) {
    post_recv(b, wr_id, 0, 4096);
    let sge = [a.mr.sge(0, len).unwrap()];
    a.qp.post_send(&[SendWr::send(wr_id, &sge).with_imm(imm)]).unwrap();
}

#[test]
fn start_poll_on_an_empty_cq_is_enoent_and_the_cq_stays_valid() {
    let (a, b) = pair_ex(WcExFlags::STANDARD);
    assert!(b.cq.ex_poll().unwrap().is_none());
    assert!(b.cq.ex_poll().unwrap().is_none());
    send_imm(&a, &b, 5, 16, 0x0102_0304);
    let p = b.cq.ex_poll().unwrap().expect("a completion");
    assert_eq!(p.wr_id(), 5);
    assert_eq!(p.status(), WcStatus::Success);
}

#[test]
fn next_poll_walks_the_batch_oldest_first_then_enoent() {
    let (a, b) = pair_ex(WcExFlags::STANDARD);
    for i in 0..3 {
        send_imm(&a, &b, i, 8, i as u32);
    }
    let mut ids = vec![];
    let mut p = b.cq.ex_poll().unwrap().unwrap();
    loop {
        ids.push(p.wr_id());
        match p.next().unwrap() {
            Some(n) => p = n,
            None => break,
        }
    }
    assert_eq!(ids, vec![0, 1, 2]);
    // The batch consumed them.
    assert!(b.cq.ex_poll().unwrap().is_none());
}

#[test]
fn requested_fields_are_readable() {
    let all = WcExFlags::BYTE_LEN
        | WcExFlags::IMM
        | WcExFlags::QP_NUM
        | WcExFlags::SRC_QP
        | WcExFlags::SLID
        | WcExFlags::SL
        | WcExFlags::DLID_PATH_BITS;
    let (a, b) = pair_ex(all);
    send_imm(&a, &b, 9, 100, 0xaabb_ccdd);
    let p = b.cq.ex_poll().unwrap().unwrap();
    assert_eq!(p.opcode(), Some(WcOpcode::Recv));
    assert_eq!(p.byte_len(), Some(100));
    assert_eq!(p.imm_data(), Some(0xaabb_ccdd));
    assert_eq!(p.invalidated_rkey(), None, "WITH_INV is not set");
    assert_eq!(p.qp_num(), Some(b.qp.qp_num()));
    assert_eq!(p.src_qp(), Some(0));
    assert_eq!(p.slid(), Some(0));
    assert_eq!(p.sl(), Some(0));
    assert_eq!(p.dlid_path_bits(), Some(0));
    assert!(p.wc_flags().contains(WcFlags::WITH_IMM));
    assert_eq!(p.vendor_err(), 0);
}

#[test]
fn fields_not_requested_read_as_none() {
    let (a, b) = pair_ex(WcExFlags::BYTE_LEN);
    send_imm(&a, &b, 1, 10, 7);
    let p = b.cq.ex_poll().unwrap().unwrap();
    assert_eq!(p.byte_len(), Some(10));
    assert_eq!(p.imm_data(), None);
    assert_eq!(p.qp_num(), None);
    assert_eq!(p.src_qp(), None);
    assert_eq!(p.slid(), None);
    assert_eq!(p.completion_ts(), None);
    assert_eq!(p.completion_wallclock_ns(), None);
    // wr_id, status, opcode and wc_flags are always there.
    assert_eq!(p.wr_id(), 1);
    assert!(p.wc_flags().contains(WcFlags::WITH_IMM));
}

#[test]
fn completion_timestamps_come_from_the_device_clock() {
    let flags = WcExFlags::COMPLETION_TIMESTAMP | WcExFlags::COMPLETION_TIMESTAMP_WALLCLOCK;
    let (a, b) = pair_ex(flags);
    let attr = b.ctx.query_device();
    assert_eq!(attr.hca_core_clock, 1_000_000, "1 GHz device clock, in kHz");
    let before = b.ctx.query_rt_values();
    send_imm(&a, &b, 1, 8, 0);
    send_imm(&a, &b, 2, 8, 0);
    let after = b.ctx.query_rt_values();
    let p = b.cq.ex_poll().unwrap().unwrap();
    let t1 = p.completion_ts().unwrap();
    let w1 = p.completion_wallclock_ns().unwrap();
    let p = p.next().unwrap().unwrap();
    let t2 = p.completion_ts().unwrap();
    assert!(before.raw_clock_ns <= t1 && t1 <= t2 && t2 <= after.raw_clock_ns);
    assert!(before.wallclock_ns <= w1 && w1 <= after.wallclock_ns);
}

#[test]
fn unsupported_wc_flags_are_refused_with_eopnotsupp() {
    let ctx = open();
    for f in [WcExFlags::CVLAN, WcExFlags::FLOW_TAG] {
        let err = ctx.create_cq(&CqInit::new(8).wc_flags(WcExFlags::BYTE_LEN | f)).unwrap_err();
        assert_eq!(err.errno(), libc::EOPNOTSUPP, "{f:?}");
    }
    // Tag-matching information is offered (tests/tag_matching.rs reads it).
    ctx.create_cq(&CqInit::new(8).wc_flags(WcExFlags::BYTE_LEN | WcExFlags::TM_INFO)).unwrap();
}

#[test]
fn error_completions_expose_status_wr_id_vendor_err() {
    let (a, b) = pair_ex(WcExFlags::STANDARD);
    // No receive posted and no RNR retries: the sender fails, the receiver gets nothing.
    post_recv(&b, 1, 0, 4);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(3, &sge)]).unwrap();
    let p = b.cq.ex_poll().unwrap().unwrap();
    assert_eq!(p.wr_id(), 1);
    assert_eq!(p.status(), WcStatus::LocLenErr);
    assert_eq!(p.vendor_err(), vendor_err::RECV_TOO_SMALL);
    assert_eq!(p.opcode(), None);
    assert_eq!(p.byte_len(), None);
    assert!(p.wc_flags().is_empty());
}

#[test]
fn poll_on_an_extended_cq_returns_every_field() {
    let (a, b) = pair_ex(WcExFlags::BYTE_LEN);
    send_imm(&a, &b, 4, 12, 99);
    let wc = poll_one(&b.cq);
    assert_eq!(wc.byte_len(), Some(12));
    assert_eq!(wc.imm_data(), Some(99));
}

// The explicit calls (`Cq::start_poll` / `next_poll` / `end_poll`, what the C
// `ibv_start_poll` … `ibv_end_poll` call one to one).

#[test]
fn explicit_start_poll_on_an_empty_cq_is_enoent_and_opens_no_batch() {
    let (a, b) = pair_ex(WcExFlags::STANDARD);
    assert!(b.cq.start_poll().unwrap().is_none());
    // No batch is open (no end_poll follows ENOENT): a plain poll proceeds and finds the
    // next completion.
    send_imm(&a, &b, 7, 8, 0);
    assert_eq!(poll_one(&b.cq).wr_id(), 7);
}

#[test]
fn explicit_next_poll_after_the_last_is_enoent_and_end_poll_releases() {
    let (a, b) = pair_ex(WcExFlags::STANDARD | WcExFlags::BYTE_LEN);
    send_imm(&a, &b, 1, 8, 0);
    send_imm(&a, &b, 2, 16, 0);
    let first = b.cq.start_poll().unwrap().expect("a completion");
    assert_eq!((first.wr_id(), first.byte_len()), (1, Some(8)));
    // The read accessors see the current completion.
    assert_eq!((b.cq.polled().wr_id(), b.cq.polled().byte_len()), (1, Some(8)));
    let second = b.cq.next_poll().unwrap().expect("the second completion");
    assert_eq!(second.wr_id(), 2);
    assert_eq!((b.cq.polled().wr_id(), b.cq.polled().byte_len()), (2, Some(16)));
    assert!(b.cq.next_poll().unwrap().is_none(), "ENOENT after the last");
    assert!(b.cq.next_poll().unwrap().is_none(), "and again: the batch stays valid");
    b.cq.end_poll();
    // Released: another thread polls the CQ (it would wait for end_poll otherwise), and
    // the batch removed both completions.
    send_imm(&a, &b, 3, 8, 0);
    let cq = b.cq.clone();
    let ids = std::thread::spawn(move || poll_one(&cq).wr_id()).join().unwrap();
    assert_eq!(ids, 3);
    assert_empty(&b.cq);
}

#[test]
fn explicit_and_guard_batches_share_one_position() {
    let (a, b) = pair_ex(WcExFlags::STANDARD);
    for i in 0..3 {
        send_imm(&a, &b, i, 8, i as u32);
    }
    let p = b.cq.ex_poll().unwrap().unwrap();
    assert_eq!(p.wr_id(), 0);
    let p = p.next().unwrap().unwrap();
    assert_eq!((p.wr_id(), b.cq.polled().wr_id()), (1, 1));
    drop(p); // end_poll
    let e = b.cq.start_poll().unwrap().unwrap();
    assert_eq!(e.wr_id(), 2);
    b.cq.end_poll();
    assert!(b.cq.start_poll().unwrap().is_none());
}
