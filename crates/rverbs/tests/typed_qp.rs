//! Typed queue pairs (`rverbs::typed`): the requests each transport allows carry real
//! traffic, lists are posted in pieces with the first refused request named by its index
//! in the whole list, and a handle only takes the type its QP has. What must not compile
//! is in the module's `compile_fail` doctests.
mod common;
use common::*;
use rverbs::typed::{AtomicResult, CompareSwap, FetchAdd, Rc, Read, Remote, Send, TypedQp, Uc, Ud, UdSend, Write};
use rverbs::*;

const QKEY: u32 = 0x1111_1111;

/// Two typed QPs of transport `T`, each on its own side, connected to each other.
fn typed_pair<T: typed::Transport>(qp_type: QpType, cap: QpCap) -> (Side, TypedQp<T>, Side, TypedQp<T>) {
    let (a, b) = pair_with(qp_type, &PATH, 256, cap);
    let qa = TypedQp::<T>::from_qp(a.qp.clone()).expect("a's transport");
    let qb = TypedQp::<T>::from_qp(b.qp.clone()).expect("b's transport");
    (a, qa, b, qb)
}

#[test]
fn rc_write_read_and_atomics_by_type() {
    let (a, qa, b, _qb) = typed_pair::<Rc>(QpType::Rc, CAP);
    a.mr.write(0, b"typed write").unwrap();
    b.mr.write(64, &40u64.to_ne_bytes()).unwrap();
    let src = [a.mr.sge(0, 11).unwrap()];
    qa.post(&Write::new(1, &src, Remote::of(&b.mr, 0)).signaled()).unwrap();
    let back = [a.mr.sge(100, 11).unwrap()];
    qa.post(&Read::new(2, &back, Remote::of(&b.mr, 0)).signaled()).unwrap();
    let fetched = AtomicResult::in_mr(&a.mr, 200).unwrap();
    qa.post(&FetchAdd::new(3, fetched, Remote::of(&b.mr, 64), 2).signaled()).unwrap();
    let swapped = AtomicResult::in_mr(&a.mr, 208).unwrap();
    qa.post(&CompareSwap::new(4, swapped, Remote::of(&b.mr, 64), 42, 7).signaled()).unwrap();
    for (id, opcode) in [(1, WcOpcode::RdmaWrite), (2, WcOpcode::RdmaRead), (3, WcOpcode::FetchAdd), (4, WcOpcode::CompSwap)] {
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.opcode(), wc.status()), (id, Some(opcode), WcStatus::Success), "{wc:?}");
    }
    let mut got = [0u8; 11];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"typed write");
    a.mr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"typed write", "the READ brought the WRITE's bytes back");
    assert_eq!(a.mr.read_u64(200).unwrap(), 40, "fetch-and-add returned the original value");
    assert_eq!(a.mr.read_u64(208).unwrap(), 42, "compare-and-swap returned the value it compared");
    assert_eq!(b.mr.read_u64(64).unwrap(), 7, "40 + 2 = 42 was swapped for 7");
}

#[test]
fn rc_send_with_imm_and_inline_reach_the_receives() {
    let (a, qa, b, qb) = typed_pair::<Rc>(QpType::Rc, CAP);
    let sge = [b.mr.sge(0, 64).unwrap()];
    let sge2 = [b.mr.sge(64, 64).unwrap()];
    qb.post_recv(&[RecvWr::new(10, &sge), RecvWr::new(11, &sge2)]).unwrap();
    a.mr.write(0, b"from an sge").unwrap();
    let src = [a.mr.sge(0, 11).unwrap()];
    qa.post(&Send::new(1, &src).with_imm(0xfeed).signaled()).unwrap();
    qa.post(&Send::inline(2, b"inline bytes").signaled()).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
    let first = poll_one(&b.cq);
    assert_eq!((first.wr_id(), first.byte_len(), first.imm_data()), (10, Some(11), Some(0xfeed)), "{first:?}");
    let second = poll_one(&b.cq);
    assert_eq!((second.wr_id(), second.byte_len(), second.imm_data()), (11, Some(12), None), "{second:?}");
    let mut got = [0u8; 12];
    b.mr.read(64, &mut got).unwrap();
    assert_eq!(&got, b"inline bytes");
}

#[test]
fn uc_write_with_imm_consumes_a_receive() {
    let (a, qa, b, qb) = typed_pair::<Uc>(QpType::Uc, CAP);
    let sge = [b.mr.sge(512, 8).unwrap()];
    qb.post_recv(&[RecvWr::new(7, &sge)]).unwrap();
    qa.post(&Write::inline(1, b"uc bytes", Remote::of(&b.mr, 0)).with_imm(9).signaled()).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.opcode(), wc.imm_data()), (7, Some(WcOpcode::RecvRdmaWithImm), Some(9)), "{wc:?}");
    let mut got = [0u8; 8];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"uc bytes");
}

#[test]
fn ud_send_names_its_destination() {
    let (a, qa, b, qb) = typed_pair::<Ud>(QpType::Ud, CAP);
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    let sge = [b.mr.sge(0, 40 + 16).unwrap()];
    qb.post_recv(&[RecvWr::new(3, &sge)]).unwrap();
    let dest = UdDest { ah: (&ah).into(), remote_qpn: b.qp.qp_num(), remote_qkey: QKEY };
    qa.post(&UdSend::inline(1, b"a datagram", dest).with_imm(4).signaled()).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.byte_len(), wc.imm_data(), wc.src_qp()), (3, Some(40 + 10), Some(4), Some(a.qp.qp_num())), "{wc:?}");
    let mut got = [0u8; 10];
    b.mr.read(40, &mut got).unwrap();
    assert_eq!(&got, b"a datagram");
}

#[test]
fn a_list_goes_in_pieces_and_the_first_refusal_is_named_in_the_whole_list() {
    let cap = QpCap { max_send_wr: 40, ..CAP };
    let (a, qa, b, _qb) = typed_pair::<Rc>(QpType::Rc, cap);
    let sges: Vec<[Sge; 1]> = (0..40).map(|i| [a.mr.sge(i * 8, 8).unwrap()]).collect();
    let wrs: Vec<Write<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| Write::new(i as u64, s, Remote::of(&b.mr, i as u64 * 8)).signaled())
        .collect();
    for i in 0..40u64 {
        a.mr.write(i as usize * 8, &(i * 3).to_ne_bytes()).unwrap();
    }
    qa.post_list(&wrs).unwrap();
    for i in 0..40u64 {
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (i, WcStatus::Success), "completions in posting order");
        assert_eq!(b.mr.read_u64(i as usize * 8).unwrap(), i * 3);
    }

    // The 41st request (in the third piece of 16) carries more inline bytes than the QP
    // takes: refused, named by its index in the whole list; the 40 before it are posted.
    let big = [0u8; 65];
    let mut more: Vec<Write<'_>> = (0..40).map(|i| Write::new(100 + i, &sges[0], Remote::of(&b.mr, 0)).signaled()).collect();
    more.push(Write::inline(140, &big, Remote::of(&b.mr, 0)).signaled());
    let err = qa.post_list(&more).unwrap_err();
    assert_eq!(err.index, 40, "{err}");
    assert_eq!(err.error.errno(), libc::EINVAL, "{err}");
    for i in 0..40 {
        assert_eq!(poll_one(&a.cq).wr_id(), 100 + i);
    }
    assert_empty(&a.cq);
}

#[test]
fn a_handle_takes_only_the_type_its_qp_has() {
    let s = side(QpType::Uc);
    let qp = TypedQp::<Rc>::from_qp(s.qp.clone()).expect_err("a UC QP is no RC QP");
    assert_eq!(qp.qp_type(), QpType::Uc);
    let uc = TypedQp::<Uc>::from_qp(qp).expect("a UC QP");
    assert_eq!(uc.untyped().qp_type(), QpType::Uc);
    let created = TypedQp::<Ud>::create(&s.pd, &s.cq, CAP).unwrap();
    assert_eq!(created.untyped().qp_type(), QpType::Ud);
    let init = QpInit { sq_sig_all: true, ..QpInit::new(QpType::Uc, &s.cq, CAP) };
    let rc = TypedQp::<Rc>::create_with(&s.pd, &init).unwrap();
    assert_eq!(rc.untyped().qp_type(), QpType::Rc, "the type decides, not init.qp_type");
    assert!(rc.untyped().sq_sig_all());
}

#[test]
fn an_atomic_result_is_eight_bytes() {
    let s = side(QpType::Rc);
    let err = AtomicResult::new(s.mr.sge(0, 4).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::AtomicLength { len: 4 }, .. }), "{err:?}");
    assert_eq!(AtomicResult::new(s.mr.sge(0, 8).unwrap()).unwrap().sge().length, 8);
    assert!(AtomicResult::in_mr(&s.mr, MR_LEN - 4).is_err(), "past the region's end");
}

#[test]
fn xrc_requests_name_their_srq() {
    use rverbs::typed::{ToSrq, Xrc};
    // One side with the target (domain, XRC SRQ, target QP), the other with the typed
    // initiator; connected both ways as ibv_xsrq_pingpong does.
    let t = side(QpType::Rc);
    let xrcd = t.ctx.open_xrcd(None, 0).unwrap();
    let srq = t.pd.create_srq_xrc(&SrqInit { max_wr: 16, max_sge: 1, ..SrqInit::default() }, &xrcd, &t.cq).unwrap();
    let target = xrcd.create_recv_qp(0).unwrap();
    let i = side(QpType::Rc);
    let init = QpInit { sq_sig_all: true, ..QpInit::new(QpType::Rc, &i.cq, CAP) };
    let qp = TypedQp::<Xrc>::create_with(&i.pd, &init).unwrap();
    assert_eq!(qp.untyped().qp_type(), QpType::XrcSend);
    target.connect(&remote(&t.ctx, qp.qp_num(), &PATH, ALL_ACCESS)).unwrap();
    qp.connect(&remote(&i.ctx, target.qp_num(), &PATH, Access::empty())).unwrap();

    let rs = [t.mr.sge(0, 64).unwrap()];
    srq.post_recv(&[RecvWr::new(21, &rs)]).unwrap();
    i.mr.write(0, b"to an srq").unwrap();
    let ss = [i.mr.sge(0, 9).unwrap()];
    qp.post(&ToSrq::new(srq.srq_num(), Send::new(1, &ss).with_imm(3))).unwrap();
    qp.post(&ToSrq::new(srq.srq_num(), Write::new(2, &ss, Remote::of(&t.mr, 128)))).unwrap();
    let fetched = AtomicResult::in_mr(&i.mr, 256).unwrap();
    qp.post(&ToSrq::new(srq.srq_num(), FetchAdd::new(3, fetched, Remote::of(&t.mr, 512), 5))).unwrap();
    for id in 1..=3 {
        let wc = poll_one(&i.cq);
        assert_eq!((wc.wr_id(), wc.status()), (id, WcStatus::Success), "{wc:?}");
    }
    let r = poll_one(&t.cq);
    assert_eq!((r.wr_id(), r.imm_data(), r.qp_num()), (21, Some(3), target.qp_num()), "{r:?}");
    let mut got = [0u8; 9];
    t.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"to an srq");
    t.mr.read(128, &mut got).unwrap();
    assert_eq!(&got, b"to an srq");
    assert_eq!(t.mr.read_u64(512).unwrap(), 5);
}
