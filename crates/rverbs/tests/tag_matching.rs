//! Tag matching (ibv_create_srq_ex(3) with IBV_SRQT_TM, ibv_post_srq_ops(3),
//! ibv_wc_read_tm_info; docs/tag-matching.md) through the Rust API: eager messages into
//! tagged buffers, unexpected and NO_TAG messages into plain receives, phase
//! synchronisation, a DEL racing a consumed tag, and the rendezvous read with its FIN.
mod common;
use common::*;
use rverbs::*;

/// The receiver: a TM-SRQ on its own CQ (with tag-matching information) and an RC QP on
/// it, connected to a plain sender.
struct Tm {
    sender: Side,
    recv: Side,
    srq: Srq,
    tm_cq: Cq,
}

fn tm_pair() -> Tm {
    let sender = side(QpType::Rc);
    let r = side(QpType::Rc);
    let tm_cq = r.ctx.create_cq(&CqInit::new(64).wc_flags(WcExFlags::STANDARD | WcExFlags::TM_INFO)).unwrap();
    let tm = TmCap { max_num_tags: 16, max_ops: 16 };
    let srq = r.pd.create_srq_tm(&SrqInit { max_wr: 16, max_sge: 1, ..SrqInit::default() }, tm, &tm_cq).unwrap();
    assert!(srq.is_tag_matching());
    let qp = r.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &r.cq, CAP) }).unwrap();
    let recv = Side { qp, ..r };
    connect(&sender, &recv, &PATH);
    Tm { sender, recv, srq, tm_cq }
}

fn tmh(op: TmhOp, tag: u64, app_ctx: u32) -> [u8; TMH_LEN] {
    let mut h = [0u8; TMH_LEN];
    h[0] = op as u8;
    h[4..8].copy_from_slice(&app_ctx.to_be_bytes());
    h[8..16].copy_from_slice(&tag.to_be_bytes());
    h
}

/// Adds a tagged buffer at `offset` of the receiver's MR.
fn add(t: &Tm, wr_id: u64, tag: u64, offset: usize, len: u32, unexpected_cnt: u32) -> u32 {
    let sge = [t.recv.mr.sge(offset, len).unwrap()];
    let kind = TagOpKind::Add { recv_wr_id: wr_id, sg_list: &sge, tag, mask: u64::MAX };
    t.srq.post_tag_op(&TagOp { wr_id, kind, flags: TagOpFlags::SIGNALED, unexpected_cnt }).unwrap().expect("a handle")
}

/// Sends `len` bytes at `offset` of the sender's MR and checks its send completion.
fn send(t: &Tm, offset: usize, len: u32) {
    t.sender.qp.post_send(&[SendWr::send(0x5e, &[t.sender.mr.sge(offset, len).unwrap()]).signaled()]).unwrap();
    let wc = poll_one(&t.sender.cq);
    assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, Some(WcOpcode::Send)));
}

/// The next completion of the TM CQ: (wr_id, status, opcode, flags, byte_len, tm_info).
fn next(cq: &Cq) -> (u64, WcStatus, u32, WcFlags, u32, (u64, u32)) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(p) = cq.ex_poll().unwrap() {
            let e = p.entry();
            let opcode = e.opcode().map_or(u32::MAX, |o| o as u32);
            return (e.wr_id(), e.status(), opcode, e.wc_flags(), e.byte_len().unwrap_or(0), e.tm_info().unwrap());
        }
        assert!(std::time::Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

#[test]
fn an_eager_message_lands_in_its_tagged_buffer_without_the_header() {
    let t = tm_pair();
    assert_eq!(add(&t, 1, 0x10, 0, 64, 0) & 0xffff, 0);
    let op = next(&t.tm_cq);
    assert_eq!((op.0, op.2, op.3), (1, WcOpcode::TmAdd as u32, WcFlags::empty()));
    add(&t, 2, 0x20, 64, 64, 0);
    next(&t.tm_cq);
    t.sender.mr.write(0, &tmh(TmhOp::Eager, 0x20, 0xabcd)).unwrap();
    t.sender.mr.write(TMH_LEN, b"payload!").unwrap();
    send(&t, 0, (TMH_LEN + 8) as u32);
    let (wr_id, status, opcode, flags, len, info) = next(&t.tm_cq);
    assert_eq!((wr_id, status, opcode), (2, WcStatus::Success, WcOpcode::TmRecv as u32));
    assert_eq!(flags, WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID);
    assert_eq!((len, info), (8, (0x20, 0xabcd)));
    let mut got = [0u8; 8];
    t.recv.mr.read(64, &mut got).unwrap();
    assert_eq!(&got, b"payload!");
    // The receive went to the SRQ's CQ, not the QP's.
    assert_empty(&t.recv.cq);
}

/// A resize closes the ring it replaces (ibv_modify_srq(3) with IBV_SRQ_MAX_WR): a match
/// counts itself in the new one (`SrqInner::take_for`) and lands as before, each resize
/// in between.
#[test]
fn eager_messages_land_in_their_tagged_buffers_across_resizes() {
    let t = tm_pair();
    for (k, max_wr) in [(1u64, 32u32), (2, 8), (3, 24)] {
        add(&t, k, 0x100 + k, 64 * k as usize, 64, 0);
        next(&t.tm_cq);
        t.srq.modify(&SrqAttr { max_wr, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
        t.sender.mr.write(0, &tmh(TmhOp::Eager, 0x100 + k, k as u32)).unwrap();
        t.sender.mr.write(TMH_LEN, &[k as u8; 8]).unwrap();
        send(&t, 0, (TMH_LEN + 8) as u32);
        let (wr_id, status, opcode, _, len, info) = next(&t.tm_cq);
        assert_eq!((wr_id, status, opcode, len, info), (k, WcStatus::Success, WcOpcode::TmRecv as u32, 8, (0x100 + k, k as u32)));
        let mut got = [0u8; 8];
        t.recv.mr.read(64 * k as usize, &mut got).unwrap();
        assert_eq!(got, [k as u8; 8], "resize {k}");
    }
}

#[test]
fn unmatched_and_no_tag_messages_take_plain_receives_and_sync_restores_matching() {
    let t = tm_pair();
    let sge = [t.recv.mr.sge(1024, 256).unwrap()];
    t.srq.post_recv(&[RecvWr::new(100, &sge), RecvWr::new(101, &sge)]).unwrap();
    // Unexpected: no tag posted for 0x30. The whole message, header included.
    t.sender.mr.write(0, &tmh(TmhOp::Eager, 0x30, 7)).unwrap();
    send(&t, 0, 24);
    let (wr_id, _, opcode, flags, len, info) = next(&t.tm_cq);
    assert_eq!((wr_id, opcode, flags, len, info), (100, WcOpcode::TmRecv as u32, WcFlags::empty(), 24, (0, 0)));
    // A tag posted before software saw that message (count 0, device 1) asks for a sync
    // and does not match.
    add(&t, 3, 0x30, 0, 64, 0);
    let op = next(&t.tm_cq);
    assert_eq!((op.2, op.3), (WcOpcode::TmAdd as u32, WcFlags::TM_SYNC_REQ));
    send(&t, 0, 24);
    let (wr_id, _, opcode, flags, ..) = next(&t.tm_cq);
    assert_eq!((wr_id, opcode, flags), (101, WcOpcode::TmRecv as u32, WcFlags::empty()), "the stale tag is not used");
    let sync = TagOp { wr_id: 27, kind: TagOpKind::Sync, flags: TagOpFlags::SIGNALED | TagOpFlags::TM_SYNC, unexpected_cnt: 2 };
    assert_eq!(t.srq.post_tag_op(&sync).unwrap(), None);
    let op = next(&t.tm_cq);
    assert_eq!((op.0, op.2, op.3), (27, WcOpcode::TmSync as u32, WcFlags::empty()));
    send(&t, 0, 24);
    let (wr_id, _, opcode, flags, len, info) = next(&t.tm_cq);
    assert_eq!((wr_id, opcode, flags, len, info.0), (3, WcOpcode::TmRecv as u32, WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID, 8, 0x30));
    // NO_TAG always takes a plain receive.
    t.srq.post_recv(&[RecvWr::new(102, &sge)]).unwrap();
    t.sender.mr.write(0, &tmh(TmhOp::NoTag, 0x30, 0)).unwrap();
    send(&t, 0, 20);
    let (wr_id, _, opcode, ..) = next(&t.tm_cq);
    assert_eq!((wr_id, opcode), (102, WcOpcode::TmNoTag as u32));
}

#[test]
fn a_tag_removed_before_its_message_is_not_used_and_a_second_del_fails() {
    let t = tm_pair();
    let h = add(&t, 4, 0x40, 0, 64, 0);
    next(&t.tm_cq);
    let del = TagOp { wr_id: 5, kind: TagOpKind::Del { handle: h }, flags: TagOpFlags::SIGNALED, unexpected_cnt: 0 };
    t.srq.post_tag_op(&del).unwrap();
    let op = next(&t.tm_cq);
    assert_eq!((op.0, op.1, op.2), (5, WcStatus::Success, WcOpcode::TmDel as u32));
    // Unsignaled, but failed: it completes with TM_ERR.
    let again = TagOp { flags: TagOpFlags::empty(), ..del };
    t.srq.post_tag_op(&again).unwrap();
    let op = next(&t.tm_cq);
    assert_eq!((op.0, op.1), (5, WcStatus::TmErr));
    let sge = [t.recv.mr.sge(1024, 64).unwrap()];
    t.srq.post_recv(&[RecvWr::new(200, &sge)]).unwrap();
    t.sender.mr.write(0, &tmh(TmhOp::Eager, 0x40, 0)).unwrap();
    send(&t, 0, 16);
    let (wr_id, _, opcode, flags, ..) = next(&t.tm_cq);
    assert_eq!((wr_id, opcode, flags), (200, WcOpcode::TmRecv as u32, WcFlags::empty()));
    // List operations on a plain SRQ are refused.
    let plain = t.recv.pd.create_srq(&SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() }).unwrap();
    let sync = TagOp { wr_id: 0, kind: TagOpKind::Sync, flags: TagOpFlags::empty(), unexpected_cnt: 0 };
    assert_eq!(plain.post_tag_op(&sync).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn a_rendezvous_request_is_read_into_the_tagged_buffer_and_answered_with_a_fin() {
    let t = tm_pair();
    add(&t, 6, 0x60, 4096, 4096, 0);
    next(&t.tm_cq);
    // The sender's data, and the request naming it.
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    t.sender.mr.write(8192, &data).unwrap();
    let mut req = tmh(TmhOp::Rndv, 0x60, 99).to_vec();
    req.extend_from_slice(&(t.sender.mr.addr() as u64 + 8192).to_be_bytes());
    req.extend_from_slice(&t.sender.mr.rkey().to_be_bytes());
    req.extend_from_slice(&3000u32.to_be_bytes());
    t.sender.mr.write(0, &req).unwrap();
    post_recv(&t.sender, 77, 16384, 64);
    send(&t, 0, req.len() as u32);
    let (wr_id, _, opcode, flags, _, info) = next(&t.tm_cq);
    assert_eq!((wr_id, opcode, flags, info), (6, WcOpcode::TmRecv as u32, WcFlags::TM_MATCH, (0x60, 99)));
    let (wr_id, status, opcode, flags, len, info) = next(&t.tm_cq);
    assert_eq!((wr_id, status, opcode, flags, len, info), (6, WcStatus::Success, WcOpcode::TmRecv as u32, WcFlags::TM_DATA_VALID, 3000, (0, 0)));
    let mut got = vec![0u8; 3000];
    t.recv.mr.read(4096, &mut got).unwrap();
    assert_eq!(got, data);
    // The FIN: the request's headers with the FIN operation, after the send completion.
    let fin = poll_one(&t.sender.cq);
    assert_eq!((fin.wr_id(), fin.opcode(), fin.byte_len()), (77, Some(WcOpcode::Recv), Some(32)));
    let mut f = [0u8; 32];
    t.sender.mr.read(16384, &mut f).unwrap();
    assert_eq!(f[0], TmhOp::Fin as u8);
    assert_eq!(&f[1..], &req[1..]);
}

#[test]
fn a_rendezvous_into_a_small_buffer_is_left_to_software() {
    let t = tm_pair();
    add(&t, 8, 0x80, 0, 64, 0);
    next(&t.tm_cq);
    let mut req = tmh(TmhOp::Rndv, 0x80, 1).to_vec();
    req.extend_from_slice(&(t.sender.mr.addr() as u64).to_be_bytes());
    req.extend_from_slice(&t.sender.mr.rkey().to_be_bytes());
    req.extend_from_slice(&4096u32.to_be_bytes());
    t.sender.mr.write(0, &req).unwrap();
    send(&t, 0, req.len() as u32);
    let (wr_id, status, ..) = next(&t.tm_cq);
    assert_eq!((wr_id, status), (8, WcStatus::TmRndvIncomplete));
    let mut got = [0u8; 32];
    t.recv.mr.read(0, &mut got).unwrap();
    assert_eq!(&got[..], &req[..], "the headers are in the tagged buffer");
    assert_empty(&t.sender.cq);
}

/// docs/memory.md, "Buffer lifetime": a receive of a TM-SRQ's own queue that took an
/// unexpected, a NO_TAG or an untagged message keeps the region it names registered until
/// its completion is polled, and no longer: with its last handle dropped before the
/// message, a WRITE with the region's R_Key after the poll is refused. (Such a completion
/// carries the take's count; only a match's carries a tag, and a match lands in a tagged
/// buffer of the list, which holds nothing.)
#[test]
fn a_dropped_region_of_a_plain_receive_goes_once_its_tm_completion_is_polled() {
    for (what, head, opcode) in [
        ("unexpected", tmh(TmhOp::Eager, 0x90, 1).to_vec(), WcOpcode::TmRecv),
        ("NO_TAG", tmh(TmhOp::NoTag, 0, 0).to_vec(), WcOpcode::TmNoTag),
        ("untagged", b"four".to_vec(), WcOpcode::Recv),
    ] {
        let t = tm_pair();
        let m = t.recv.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        let (iova, rkey) = (m.iova(), m.rkey());
        t.srq.post_recv(&[RecvWr::new(300, &[m.sge(0, 64).unwrap()])]).unwrap();
        drop(m);
        t.sender.mr.write(0, &head).unwrap();
        send(&t, 0, head.len() as u32);
        let (wr_id, status, op, ..) = next(&t.tm_cq);
        assert_eq!((wr_id, status, op), (300, WcStatus::Success, opcode as u32), "{what}");
        let sge = [t.sender.mr.sge(0, 8).unwrap()];
        t.sender.qp.post_send(&[SendWr::write(301, &sge, iova, rkey).signaled()]).unwrap();
        assert_eq!(poll_one(&t.sender.cq).status(), WcStatus::RemAccessErr, "{what}: the region went with the poll");
    }
}
