//! `Qp::connect` / `Qp::connect_until` (RemotePath): the RESET → INIT → RTR → RTS ladder
//! with the masks ibv_modify_qp(3) requires, taken from rverbs-proto's state table.
mod common;
use common::*;
use rverbs::*;

/// A path towards `dest` with every field away from its default, so an attribute that
/// was given shows in `query` and one that was not keeps its zero.
fn path_to(s: &Side, dest: u32) -> RemotePath {
    RemotePath {
        access: ALL_ACCESS,
        qkey: 0x2222_3333,
        path_mtu: Mtu::Mtu2048,
        rq_psn: 0x11,
        sq_psn: 0x22,
        timeout: 15,
        retry_cnt: 5,
        rnr_retry: 6,
        min_rnr_timer: 3,
        max_rd_atomic: 2,
        max_dest_rd_atomic: 8,
        ah_attr: av(&s.ctx),
        ..RemotePath::new(Gid::default(), 0, dest)
    }
}

fn connected(qp_type: QpType) -> (Side, Side) {
    let a = side(qp_type);
    let b = side(qp_type);
    a.qp.connect(&path_to(&a, b.qp.qp_num())).unwrap();
    b.qp.connect(&path_to(&b, a.qp.qp_num())).unwrap();
    (a, b)
}

#[test]
fn connect_brings_rc_to_rts_with_every_required_attribute() {
    let (a, b) = connected(QpType::Rc);
    assert_eq!(a.qp.state(), QpState::Rts);
    let q = a.qp.query();
    assert_eq!(q.qp_access_flags, ALL_ACCESS);
    assert_eq!(q.port_num, 1);
    assert_eq!(q.dest_qp_num, b.qp.qp_num());
    assert_eq!(q.path_mtu, Mtu::Mtu2048);
    assert_eq!((q.rq_psn, q.sq_psn), (0x11, 0x22));
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (15, 5, 6));
    assert_eq!((q.min_rnr_timer, q.max_rd_atomic, q.max_dest_rd_atomic), (3, 2, 8));
    assert_eq!(q.ah_attr, av(&a.ctx));
    assert_eq!(q.qkey, 0, "RC takes no Q_Key");
    // The connection carries traffic both ways.
    post_recv(&b, 7, 0, 8);
    a.mr.write(0, b"rc-conn!").unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).wr_id(), 7);
}

#[test]
fn connect_gives_uc_only_what_uc_requires() {
    let (a, b) = connected(QpType::Uc);
    assert_eq!(a.qp.state(), QpState::Rts);
    let q = a.qp.query();
    assert_eq!(q.dest_qp_num, b.qp.qp_num());
    assert_eq!((q.path_mtu, q.rq_psn, q.sq_psn), (Mtu::Mtu2048, 0x11, 0x22));
    assert_eq!(q.qp_access_flags, ALL_ACCESS);
    // Reliable-only attributes are optional or forbidden for UC: not given.
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (0, 0, 0));
    assert_eq!((q.min_rnr_timer, q.max_rd_atomic, q.max_dest_rd_atomic), (0, 0, 0));
    post_recv(&b, 9, 0, 8);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).wr_id(), 9);
}

#[test]
fn connect_gives_ud_its_qkey_and_no_path() {
    // The path grants access and names a peer: UD takes neither (ACCESS_FLAGS in a UD
    // INIT mask would be refused, so connecting at all shows it was left out).
    let (a, b) = connected(QpType::Ud);
    assert_eq!(a.qp.state(), QpState::Rts);
    let q = a.qp.query();
    assert_eq!(q.qkey, 0x2222_3333);
    assert_eq!(q.sq_psn, 0x22);
    assert_eq!((q.dest_qp_num, q.qp_access_flags), (0, Access::empty()));
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    post_recv(&b, 3, 0, 40 + 8);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).ud(&ah, b.qp.qp_num(), 0x2222_3333).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).wr_id(), 3);
}

#[test]
fn connect_brings_xrc_target_and_initiator_to_rts() {
    let a = side(QpType::Rc);
    let xrcd = a.ctx.open_xrcd(None, 0).unwrap();
    let target = xrcd.create_recv_qp(0).unwrap();
    let initiator = a.pd.create_qp(&QpInit::new(QpType::XrcSend, &a.cq, CAP)).unwrap();
    target.connect(&path_to(&a, initiator.qp_num())).unwrap();
    initiator.connect(&RemotePath { access: Access::empty(), ..path_to(&a, target.qp_num()) }).unwrap();
    assert_eq!((target.state(), initiator.state()), (QpState::Rts, QpState::Rts));
    let t = target.query();
    // An XRC target's RTS requires TIMEOUT and SQ_PSN, not the retry counts.
    assert_eq!((t.timeout, t.sq_psn, t.retry_cnt), (15, 0x22, 0));
    assert_eq!((t.max_dest_rd_atomic, t.min_rnr_timer), (8, 3));
    let i = initiator.query();
    assert_eq!((i.retry_cnt, i.rnr_retry, i.max_rd_atomic), (5, 6, 2));
    assert_eq!(i.max_dest_rd_atomic, 0, "an XRC initiator has no responder");
}

#[test]
fn connect_until_stops_in_the_state_and_connect_continues_from_it() {
    let a = side(QpType::Rc);
    let p = path_to(&a, 0x1234);
    a.qp.connect_until(&p, QpState::Init).unwrap();
    assert_eq!(a.qp.state(), QpState::Init);
    a.qp.connect_until(&p, QpState::Rtr).unwrap();
    assert_eq!(a.qp.state(), QpState::Rtr);
    assert_eq!(a.qp.query().dest_qp_num, 0x1234);
    a.qp.connect(&p).unwrap();
    assert_eq!(a.qp.state(), QpState::Rts);
}

#[test]
fn connect_refuses_a_qp_already_there_or_off_the_ladder() {
    let (a, _b) = connected(QpType::Rc);
    let p = path_to(&a, 0);
    let e = a.qp.connect(&p).unwrap_err();
    assert!(matches!(e, Error::QpStateForbids { state: QpState::Rts, .. }), "{e:?}");
    assert_eq!(e.errno(), libc::EINVAL);
    let e = a.qp.connect_until(&p, QpState::Init).unwrap_err();
    assert!(matches!(e, Error::QpStateForbids { .. }), "{e:?}");
    let c = side(QpType::Rc);
    for last in [QpState::Reset, QpState::Sqd, QpState::Err] {
        let e = c.qp.connect_until(&p, last).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{last:?}");
    }
    assert_eq!(c.qp.state(), QpState::Reset, "a refused connect changes nothing");
}

#[test]
fn connect_stops_at_the_step_modify_refuses() {
    let a = side(QpType::Rc);
    // INIT accepts the path; RTR refuses an address vector without a GRH on RoCE.
    let p = RemotePath { ah_attr: AhAttr { port_num: 1, ..AhAttr::default() }, ..path_to(&a, 5) };
    let e = a.qp.connect(&p).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(a.qp.state(), QpState::Init);
}
