//! XRC: domains, XRC SRQs, initiator and target QPs (IBTA Annex A14, ibv_open_xrcd(3); what
//! ibv_xsrq_pingpong and pyverbs' XRC tests do).
mod common;
use common::*;
use rverbs::*;

/// One side of an XRC connection: a domain, an XRC SRQ completing to `cq`, a target QP
/// and an initiator QP.
struct XrcSide {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    xrcd: Xrcd,
    srq: Srq,
    recv_qp: Qp,
    send_qp: Qp,
}

fn xrc_side() -> XrcSide {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    let xrcd = ctx.open_xrcd(None, 0).unwrap();
    let srq = pd.create_srq_xrc(&SrqInit { max_wr: 16, max_sge: 1, ..SrqInit::default() }, &xrcd, &cq).unwrap();
    let recv_qp = xrcd.create_recv_qp(0).unwrap();
    let send_qp = pd.create_qp(&QpInit { sq_sig_all: true, ..QpInit::new(QpType::XrcSend, &cq, CAP) }).unwrap();
    XrcSide { ctx, pd, cq, mr, xrcd, srq, recv_qp, send_qp }
}

fn connect_xrc(a: &XrcSide, b: &XrcSide) {
    for (x, y) in [(a, b), (b, a)] {
        // Target: remote rights, connected to the peer's initiator; initiator: no
        // access, connected to the peer's target.
        x.recv_qp.connect(&remote(&x.ctx, y.send_qp.qp_num(), &PATH, ALL_ACCESS)).unwrap();
        x.send_qp.connect(&remote(&x.ctx, y.recv_qp.qp_num(), &PATH, Access::empty())).unwrap();
    }
}

fn xrc_pair() -> (XrcSide, XrcSide) {
    let a = xrc_side();
    let b = xrc_side();
    connect_xrc(&a, &b);
    (a, b)
}

#[test]
fn xrc_send_lands_in_the_named_srq_and_completes_on_its_cq() {
    let (a, b) = xrc_pair();
    let sge = [b.mr.sge(0, 64).unwrap()];
    b.srq.post_recv(&[RecvWr::new(11, &sge)]).unwrap();
    a.mr.write(0, b"xrc!").unwrap();
    let ss = [a.mr.sge(0, 4).unwrap()];
    a.send_qp.post_send(&[SendWr::send(1, &ss).with_imm(9).xrc(b.srq.srq_num())]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.status(), s.qp_num()), (WcStatus::Success, a.send_qp.qp_num()));
    let r = poll_one(&b.cq);
    assert_eq!(r.status(), WcStatus::Success);
    assert_eq!(r.wr_id(), 11);
    assert_eq!(r.qp_num(), b.recv_qp.qp_num(), "the target QP that received it");
    assert_eq!(r.imm_data(), Some(9));
    let mut got = [0u8; 4];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"xrc!");
}

#[test]
fn xrc_rdma_and_atomics_use_the_srq_pd() {
    let (a, b) = xrc_pair();
    let srqn = b.srq.srq_num();
    let ss = [a.mr.sge(0, 8).unwrap()];
    a.mr.write(0, &7u64.to_ne_bytes()).unwrap();
    a.send_qp.post_send(&[SendWr::write(1, &ss, b.mr.iova() + 64, b.mr.rkey()).xrc(srqn)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(b.mr.read_u64(64).unwrap(), 7);
    a.send_qp.post_send(&[SendWr::fetch_add(2, &ss, b.mr.iova() + 64, b.mr.rkey(), 3).xrc(srqn)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(a.mr.read_u64(0).unwrap(), 7);
    assert_eq!(b.mr.read_u64(64).unwrap(), 10);
    // A region of another PD than the SRQ's is refused.
    let other = b.ctx.alloc_pd().unwrap().alloc_mr(64, ALL_ACCESS).unwrap();
    a.send_qp.post_send(&[SendWr::write(3, &ss, other.iova(), other.rkey()).xrc(srqn)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
}

/// A request naming an SRQ of another XRC domain than the target QP's is refused as an
/// invalid request (docs/rocev2-wire.md §1.8), on one host as across hosts: the sender's
/// completion is REM_INV_REQ_ERR naming the rule, the target QP enters ERR, and nothing
/// completes on the CQ of the foreign SRQ (its receive was not taken).
#[test]
fn an_srq_of_another_domain_is_refused_as_an_invalid_request() {
    let a = xrc_side();
    let b = xrc_side();
    connect_xrc(&a, &b);
    let foreign = b.ctx.open_xrcd(None, 0).unwrap();
    let srq2 = b.pd.create_srq_xrc(&SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() }, &foreign, &b.cq).unwrap();
    let sge = [b.mr.sge(0, 64).unwrap()];
    srq2.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
    a.send_qp.post_send(&[SendWr::send(1, &[]).xrc(srq2.srq_num())]).unwrap();
    let c = poll_one(&a.cq);
    assert_eq!((c.status(), c.vendor_err()), (WcStatus::RemInvReqErr, rverbs::vendor_err::REMOTE_XRC_SRQ));
    assert_eq!(b.recv_qp.state(), QpState::Err, "the target QP refused it and entered ERR");
    assert_empty(&b.cq);
}

#[test]
fn xrc_objects_and_their_rules() {
    let x = xrc_side();
    // Targets have no queues of their own; initiators do not receive.
    assert_eq!(x.recv_qp.cap(), QpCap::default());
    assert_eq!(x.send_qp.cap().max_recv_wr, 0);
    let sge = [x.mr.sge(0, 8).unwrap()];
    assert!(x.recv_qp.post_recv(&[RecvWr::new(1, &sge)]).is_err());
    assert!(x.send_qp.post_recv(&[RecvWr::new(1, &sge)]).is_err());
    assert!(x.srq.is_xrc());
    assert_ne!(x.srq.srq_num(), 0);
    // A target QP cannot be made from a PD.
    assert!(x.pd.create_qp(&QpInit::new(QpType::XrcRecv, &x.cq, CAP)).is_err());
    // The domain is busy while its SRQ and target QP exist.
    assert_eq!(x.xrcd.close().unwrap_err().errno(), libc::EBUSY);
    x.recv_qp.destroy().unwrap();
    x.srq.destroy().unwrap();
    x.xrcd.close().unwrap();
    // A closed handle opens nothing and cannot be closed again.
    assert_eq!(x.xrcd.create_recv_qp(0).unwrap_err().errno(), libc::EINVAL);
    let init = SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() };
    assert_eq!(x.pd.create_srq_xrc(&init, &x.xrcd, &x.cq).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(x.xrcd.close().unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn domains_are_shared_per_file() {
    let ctx = open();
    let dir = std::env::temp_dir().join(format!("rverbs-xrcd-{}", std::process::id()));
    let f = std::fs::File::create(&dir).unwrap();
    use std::os::fd::AsFd;
    let e = ctx.open_xrcd(Some(f.as_fd()), 0).unwrap_err();
    assert_eq!(e.errno(), libc::EAGAIN, "no domain yet and no O_CREAT");
    let d1 = ctx.open_xrcd(Some(f.as_fd()), libc::O_CREAT).unwrap();
    let d2 = ctx.open_xrcd(Some(f.as_fd()), libc::O_CREAT).unwrap();
    assert!(d1.same_as(&d2));
    let e = ctx.open_xrcd(Some(f.as_fd()), libc::O_CREAT | libc::O_EXCL).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let private = ctx.open_xrcd(None, 0).unwrap();
    assert!(!private.same_as(&d1));
    // Closing one opener of a shared domain in use only drops that reference.
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(4)).unwrap();
    let srq = pd.create_srq_xrc(&SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() }, &d1, &cq).unwrap();
    d2.close().unwrap();
    drop(srq);
    std::fs::remove_file(&dir).unwrap();
}
