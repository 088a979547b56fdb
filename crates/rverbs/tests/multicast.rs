//! ibv_attach_mcast(3) / ibv_detach_mcast(3): UD multicast delivery.
mod common;
use common::*;
use rverbs::*;

/// A group of this process only: groups are host-wide, and another test run on the host
/// must not reach these QPs.
fn group() -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x0e;
    g[8..12].copy_from_slice(&std::process::id().to_be_bytes());
    g[15] = 0x42;
    Gid(g)
}

fn group_ah(s: &Side) -> Ah {
    let mut attr = av(&s.ctx);
    attr.grh.as_mut().unwrap().dgid = group();
    Ah::new(&s.pd, &attr).unwrap()
}

#[test]
fn a_send_to_a_group_reaches_every_member() {
    let (a, b) = pair(QpType::Ud);
    let c = side(QpType::Ud);
    to_init(&c.qp, ALL_ACCESS);
    to_rtr(&c.qp, &c.ctx, 0, &PATH);
    to_rts(&c.qp, &PATH);
    b.qp.attach_mcast(&group(), 0).unwrap();
    c.qp.attach_mcast(&group(), 0).unwrap();
    b.qp.attach_mcast(&group(), 0).unwrap(); // twice: one attachment
    post_recv(&b, 1, 0, 100);
    post_recv(&c, 2, 0, 100);
    let ah = group_ah(&a);
    let sge = [a.mr.sge(0, 10).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).ud(&ah, MULTICAST_QPN, 0x1111_1111).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let rb = poll_one(&b.cq);
    let rc = poll_one(&c.cq);
    assert_eq!((rb.wr_id(), rb.byte_len(), rb.src_qp()), (1, Some(50), Some(a.qp.qp_num())));
    assert_eq!((rc.wr_id(), rc.byte_len()), (2, Some(50)));
    assert_empty(&b.cq);
    // The GRH area names the group as destination.
    let mut grh = [0u8; 40];
    b.mr.read(0, &mut grh).unwrap();
    assert_eq!(&grh[24..40], &group().0);
    // Detached members get nothing more.
    b.qp.detach_mcast(&group(), 0).unwrap();
    post_recv(&b, 3, 0, 100);
    post_recv(&c, 4, 0, 100);
    a.qp.post_send(&[SendWr::send(2, &sge).ud(&ah, MULTICAST_QPN, 0x1111_1111)]).unwrap();
    assert_eq!(poll_one(&c.cq).wr_id(), 4);
    assert_empty(&b.cq);
}

#[test]
fn attach_rules() {
    let (a, _b) = pair(QpType::Rc);
    assert_eq!(a.qp.attach_mcast(&group(), 0).unwrap_err().errno(), libc::EINVAL, "RC");
    let u = side(QpType::Ud);
    let unicast = u.ctx.query_gid(1, 0).unwrap();
    assert_eq!(u.qp.attach_mcast(&unicast, 0).unwrap_err().errno(), libc::EINVAL);
    let v4 = Gid::from_ipv4(std::net::Ipv4Addr::new(239, 1, 2, 3));
    u.qp.attach_mcast(&v4, 0).unwrap();
    assert_eq!(u.qp.detach_mcast(&group(), 0).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(u.qp.destroy().unwrap_err().errno(), libc::EBUSY, "attached QPs cannot be destroyed");
    u.qp.detach_mcast(&v4, 0).unwrap();
    u.qp.destroy().unwrap();
}
