//! Rules as types: an invalid argument is reported as `Error::Invalid` with the
//! [`Rule`] it broke and the values that broke it, so callers can tell rules apart by
//! matching. One test per object kind, each naming the values it expects.

mod common;

use common::*;
use rverbs::*;

/// The rule an `EINVAL` carries; panics if the error is another kind.
fn rule_of<T: std::fmt::Debug>(r: Result<T>) -> (Rule, String) {
    match r {
        Err(e @ Error::Invalid { .. }) => {
            assert_eq!(e.errno(), libc::EINVAL);
            let Error::Invalid { rule, .. } = e else { unreachable!() };
            (rule, e.to_string())
        }
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn device_tables_name_the_index_and_the_table() {
    let ctx = open();
    let len = ctx.query_gid_table().len() as u32;
    let (rule, msg) = rule_of(ctx.query_gid(1, len + 3));
    assert_eq!(rule, Rule::GidIndex { index: len + 3, len });
    assert!(msg.contains(&format!("{}", len + 3)), "{msg}");
    assert_eq!(rule_of(ctx.query_pkey(1, 1)).0, Rule::PkeyIndex { index: 1 });
    assert_eq!(rule_of(ctx.query_pkey(2, 0)).0, Rule::PortNumber { port: 2 });
}

#[test]
fn cq_rules_carry_the_requested_and_the_limit() {
    let ctx = open();
    let attr = ctx.query_device();
    let (rule, _) = rule_of(ctx.create_cq(&CqInit::new(0)));
    assert!(matches!(rule, Rule::CqeRange { cqe: 0, max } if max == attr.max_cqe), "{rule:?}");
    let mut init = CqInit::new(4);
    init.comp_vector = 5;
    assert_eq!(rule_of(ctx.create_cq(&init)).0, Rule::CompVector { vector: 5, count: 1 });
}

#[test]
fn memory_rules_name_the_range() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(rule_of(pd.alloc_mr(4096, Access::REMOTE_WRITE)).0, Rule::RemoteWriteNeedsLocalWrite);
    // Unknown access bits are EINVAL (the kernel's ib_check_mr_access), before ODP's
    // EOPNOTSUPP.
    let unknown = Access::from_bits_retain(Access::LOCAL_WRITE.bits() | Access::ON_DEMAND.bits() | 1 << 15);
    assert_eq!(rule_of(pd.alloc_mr(4096, unknown)).0, Rule::UnknownAccessFlags { flags: 1 << 15 });
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    assert_eq!(rule_of(mr.read_u64(4)).0, Rule::Unaligned { offset: 4 });
    assert_eq!(rule_of(mr.read_u64(4096)).0, Rule::OutsideRegion { offset: 4096, len: 8, region_len: 4096 });
    assert_eq!(rule_of(Mw::new(&pd, 3)).0, Rule::MwType { mw_type: 3 });
}

#[test]
fn qp_rules_name_the_attribute_and_the_opcode() {
    let (a, b) = pair(QpType::Rc);
    // RTS → RTS may change the access flags (ibv_modify_qp(3)); ZERO_BASED is not one.
    let attr = QpAttr { qp_access_flags: Access::ZERO_BASED, ..QpAttr::default() };
    let (rule, _) = rule_of(a.qp.modify(&attr, QpAttrMask::ACCESS_FLAGS));
    assert_eq!(rule, Rule::AccessFlags { flags: Access::ZERO_BASED.bits() });
    // RTR → RTS sets the timeout, 5 bits: the ladder stops at that step.
    let c = side(QpType::Rc);
    let path = RemotePath { timeout: 32, ..remote(&c.ctx, b.qp.qp_num(), &PATH, ALL_ACCESS) };
    let (rule, msg) = rule_of(c.qp.connect(&path));
    assert_eq!(rule, Rule::AttrLimit { attr: "timeout", value: 32, max: 31 });
    assert!(msg.contains("timeout 32"), "{msg}");
    assert_eq!(c.qp.state(), QpState::Rtr, "the refused step leaves the QP where the ladder got");
    assert_eq!(rule_of(a.qp.attach_mcast(&Gid([0xff; 16]), 0)).0, Rule::McastNeedsUd);

    let sge = [Sge { addr: a.mr.addr() as u64, length: 8, lkey: a.mr.lkey() }];
    let mut wr = SendWr::new(7, WrOpcode::AtomicFetchAndAdd);
    wr.payload = Payload::Sge(&sge);
    wr.remote_addr = b.mr.addr() as u64 + 4;
    wr.rkey = b.mr.rkey();
    let err = a.qp.post_send(&[wr]).unwrap_err();
    assert_eq!(err.index, 0);
    assert!(
        matches!(err.error, Error::Invalid { rule: Rule::AtomicAlignment { addr }, .. } if addr == b.mr.addr() as u64 + 4),
        "{:?}",
        err.error
    );
    let (ud, _peer) = pair(QpType::Ud);
    let err = ud.qp.post_send(&[SendWr::new(8, WrOpcode::RdmaWrite)]).unwrap_err();
    assert!(
        matches!(err.error, Error::Invalid { rule: Rule::OpcodeForQpType { opcode: WrOpcode::RdmaWrite, qp_type: QpType::Ud }, .. }),
        "{:?}",
        err.error
    );
}

#[test]
fn srq_rules_name_the_tag_list_and_its_limits() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let init = SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() };
    // ibv_post_srq_ops(3) on an SRQ that is not IBV_SRQT_TM.
    let plain = pd.create_srq(&init).unwrap();
    let sync = TagOp { wr_id: 1, kind: TagOpKind::Sync, flags: TagOpFlags::empty(), unexpected_cnt: 0 };
    assert_eq!(rule_of(plain.post_tag_op(&sync)).0, Rule::NotTagMatching);
    // tm_cap beyond tm_caps is a limit, not a rule (ibv_create_srq_ex(3)).
    let too_many = TmCap { max_num_tags: 100_000, max_ops: 1 };
    let e = pd.create_srq_tm(&init, too_many, &cq).unwrap_err();
    assert!(matches!(e, Error::Limit { what: "max_num_tags", got: 100_000, .. }), "{e:?}");
    // The tag list holds max_num_tags: one more ADD is refused (ENOMEM), the list unchanged.
    let tm = pd.create_srq_tm(&init, TmCap { max_num_tags: 1, max_ops: 4 }, &cq).unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [Sge { addr: mr.addr() as u64, length: 64, lkey: mr.lkey() }];
    let add = |tag| TagOp {
        wr_id: tag,
        kind: TagOpKind::Add { recv_wr_id: tag, sg_list: &sge, tag, mask: u64::MAX },
        flags: TagOpFlags::empty(),
        unexpected_cnt: 0,
    };
    let handle = tm.post_tag_op(&add(1)).unwrap().expect("an ADD gives a handle");
    let full = tm.post_tag_op(&add(2)).unwrap_err();
    assert!(matches!(full, Error::QueueFull { verb: "post_srq_ops", max: 1 }), "{full:?}");
    assert_eq!(full.errno(), libc::ENOMEM);
    let del = TagOp { wr_id: 3, kind: TagOpKind::Del { handle }, flags: TagOpFlags::empty(), unexpected_cnt: 0 };
    tm.post_tag_op(&del).unwrap();
    tm.post_tag_op(&add(4)).unwrap().expect("the freed slot takes a new tag");
    // An ADD with more SGEs than a tagged buffer holds.
    let sges = vec![sge[0]; 16];
    let wide = TagOp {
        wr_id: 5,
        kind: TagOpKind::Add { recv_wr_id: 5, sg_list: &sges, tag: 5, mask: u64::MAX },
        flags: TagOpFlags::empty(),
        unexpected_cnt: 0,
    };
    let e = tm.post_tag_op(&wide).unwrap_err();
    assert!(matches!(e, Error::TooManySge { got: 16, .. }), "{e:?}");
}

/// ibv_post_srq_recv(3): an SRQ holds at most `max_wr` receives (ENOMEM). An SRQ kept
/// full as `ib_send_lat --use-srq` keeps it takes every repost, refuses one more, and each
/// SEND lands in its own receive, in order: with its QPs completing to one CQ (whose poll
/// tells the post of room, docs/shared-state.md, "The consumed count in the completion"),
/// then with a second QP completing to another CQ (the post reads the takers' `head`:
/// a count heard in one CQ says nothing of takes completed to the other), then with that
/// QP gone again.
#[test]
fn an_srq_kept_full_takes_each_repost_and_refuses_one_more() {
    const DEPTH: u64 = 4;
    let a = side(QpType::Rc);
    let c = side(QpType::Rc);
    let b = side(QpType::Rc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: DEPTH as u32, max_sge: 1, ..SrqInit::default() }).unwrap();
    let on_srq = |cq: &Cq| b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, cq, CAP) }).unwrap();
    let qp1 = on_srq(&b.cq);
    connect_qp(&a.qp, &a.ctx, qp1.qp_num(), &PATH);
    connect_qp(&qp1, &b.ctx, a.qp.qp_num(), &PATH);
    let at = |wr_id: u64| (wr_id % DEPTH) as usize * 8;
    let recv = |wr_id: u64| [b.mr.sge(at(wr_id), 8).unwrap()];
    for k in 0..DEPTH {
        srq.post_recv(&[RecvWr::new(k, &recv(k))]).unwrap();
    }
    let e = srq.post_recv(&[RecvWr::new(99, &recv(0))]).unwrap_err();
    assert_eq!(e.error.errno(), libc::ENOMEM, "{e:?}");
    // Message m from `from` to the SRQ, polled from `cq`, then its receive posted again.
    let deliver = |m: u64, from: &Side, cq: &Cq| {
        from.mr.write(0, &(m + 1000).to_le_bytes()).unwrap();
        let sge = [from.mr.sge(0, 8).unwrap()];
        let wr = SendWr::send(m, &sge).signaled();
        from.qp.post_send(&[if m % 2 == 1 { wr.with_imm(m as u32) } else { wr }]).unwrap();
        assert_eq!(poll_one(&from.cq).wr_id(), m);
        let wc = poll_one(cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (m, WcStatus::Success, Some(8)));
        let mut got = [0u8; 8];
        b.mr.read(at(m), &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), m + 1000, "message {m} in its own receive");
        srq.post_recv(&[RecvWr::new(m + DEPTH, &recv(m + DEPTH))]).unwrap();
        let e = srq.post_recv(&[RecvWr::new(99, &recv(0))]).unwrap_err();
        assert_eq!(e.error.errno(), libc::ENOMEM, "message {m}: the SRQ is full again");
    };
    for m in 0..20 {
        deliver(m, &a, &b.cq);
    }
    let other_cq = b.ctx.create_cq(&CqInit::new(64)).unwrap();
    let qp2 = on_srq(&other_cq);
    connect_qp(&c.qp, &c.ctx, qp2.qp_num(), &PATH);
    connect_qp(&qp2, &b.ctx, c.qp.qp_num(), &PATH);
    for m in 20..40 {
        if m % 2 == 0 {
            deliver(m, &a, &b.cq);
        } else {
            deliver(m, &c, &other_cq);
        }
    }
    drop(qp2);
    for m in 40..60 {
        deliver(m, &a, &b.cq);
    }
}

/// ibv_post_recv(3): a queue holds at most `max_recv_wr` receives (ENOMEM). A queue kept
/// full as perftest keeps it — each receive posted again once its completion is polled,
/// its room learned from that completion (docs/shared-state.md, "The consumed count in
/// the completion") — takes every repost, refuses one more, and each SEND lands in its
/// own receive, in order: plain SENDs (the express lane) and SENDs with immediate data
/// (the queued way) alike.
#[test]
fn a_receive_queue_kept_full_takes_each_repost_and_refuses_one_more() {
    const DEPTH: u64 = 4;
    let (a, b) = pair_with(QpType::Rc, &PATH, 64, QpCap { max_recv_wr: DEPTH as u32, ..CAP });
    let at = |wr_id: u64| (wr_id % DEPTH) as usize * 8;
    let recv = |wr_id: u64| [b.mr.sge(at(wr_id), 8).unwrap()];
    for k in 0..DEPTH {
        b.qp.post_recv(&[RecvWr::new(k, &recv(k))]).unwrap();
    }
    let e = b.qp.post_recv(&[RecvWr::new(99, &recv(0))]).unwrap_err();
    assert_eq!(e.error.errno(), libc::ENOMEM, "{e:?}");
    for m in 0..40u64 {
        a.mr.write(0, &(m + 1000).to_le_bytes()).unwrap();
        let sge = [a.mr.sge(0, 8).unwrap()];
        let wr = SendWr::send(m, &sge).signaled();
        a.qp.post_send(&[if m % 2 == 1 { wr.with_imm(m as u32) } else { wr }]).unwrap();
        assert_eq!(poll_one(&a.cq).wr_id(), m);
        let wc = poll_one(&b.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (m, WcStatus::Success, Some(8)));
        let mut got = [0u8; 8];
        b.mr.read(at(m), &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), m + 1000, "message {m} in its own receive");
        b.qp.post_recv(&[RecvWr::new(m + DEPTH, &recv(m + DEPTH))]).unwrap();
        let e = b.qp.post_recv(&[RecvWr::new(99, &recv(0))]).unwrap_err();
        assert_eq!(e.error.errno(), libc::ENOMEM, "message {m}: the queue is full again");
    }
}
