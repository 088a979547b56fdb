//! ibv_alloc_td(3), ibv_alloc_parent_domain(3), and the CQ on a parent domain of
//! ibv_create_cq_ex(3) (`IBV_CQ_INIT_ATTR_MASK_PD`).
mod common;
use common::*;
use rverbs::*;

#[track_caller]
fn assert_errno<T: std::fmt::Debug>(r: Result<T>, errno: i32) {
    match r {
        Err(e) => assert_eq!(e.errno(), errno, "{e}"),
        Ok(v) => panic!("expected errno {errno}, got Ok({v:?})"),
    }
}

/// One side whose CQ, QP and MR are all created on a parent domain over its PD.
fn parent_side(td: bool) -> (Side, ParentDomain) {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = td.then(|| ctx.alloc_td().unwrap());
    let parent = ctx
        .alloc_parent_domain(&ParentDomainInit { td: td.as_ref(), pd_context: 0x5eed, ..ParentDomainInit::new(&pd) })
        .unwrap();
    let cq = parent.create_cq(&CqInit::new(256)).unwrap();
    let qp = parent.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let mr = parent.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    (Side { ctx, pd, cq, qp, mr }, parent)
}

#[test]
fn objects_created_on_a_parent_domain_belong_to_its_pd() {
    let (s, parent) = parent_side(false);
    assert_eq!(parent.handle(), s.pd.handle());
    assert_eq!(s.qp.pd().handle(), s.pd.handle());
    assert_eq!(s.mr.pd().handle(), s.pd.handle());
    assert_eq!(parent.pd_context(), 0x5eed);
    assert!(parent.td().is_none());
    assert!(s.cq.parent_domain().is_some_and(|p| p.same(&parent)));
}

#[test]
fn rc_send_between_parent_domains_delivers_the_bytes() {
    for td in [false, true] {
        let (a, _pa) = parent_side(td);
        let (b, _pb) = parent_side(td);
        connect(&a, &b, &PATH);
        let msg = b"parent domain traffic";
        a.mr.write(0, msg).unwrap();
        post_recv(&b, 7, 128, 64);
        let sge = [a.mr.sge(0, msg.len() as u32).unwrap()];
        a.qp.post_send(&[SendWr::send(9, &sge).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::Success));
        let wc = poll_one(&b.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (7, WcStatus::Success, Some(msg.len() as u32)));
        let mut got = [0u8; 21];
        b.mr.read(128, &mut got).unwrap();
        assert_eq!(&got, msg, "td = {td}");
    }
}

#[test]
fn a_key_of_the_protection_domain_serves_a_qp_of_its_parent_domain() {
    let (a, _pa) = parent_side(false);
    let (b, _pb) = parent_side(false);
    connect(&a, &b, &PATH);
    // The target region is registered on b's plain PD, the QPs live on parent domains.
    let plain = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    a.mr.write(0, &[0xab; 16]).unwrap();
    let sge = [a.mr.sge(0, 16).unwrap()];
    a.qp.post_send(&[SendWr::write(3, &sge, plain.iova(), plain.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::Success));
    let mut got = [0u8; 16];
    plain.read(0, &mut got).unwrap();
    assert_eq!(got, [0xab; 16]);
}

#[test]
fn dealloc_pd_is_busy_while_a_parent_domain_uses_it() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    assert_errno(pd.dealloc(), libc::EBUSY);
    parent.dealloc().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn dealloc_td_is_busy_while_a_parent_domain_uses_it() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }).unwrap();
    assert_errno(td.dealloc(), libc::EBUSY);
    parent.dealloc().unwrap();
    td.dealloc().unwrap();
    assert_errno(td.dealloc(), libc::EINVAL);
    pd.dealloc().unwrap();
}

#[test]
fn dropping_a_parent_domain_never_deallocated_gives_its_domains_back() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    drop(ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }).unwrap());
    td.dealloc().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn dealloc_parent_domain_is_busy_while_its_cq_exists() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    let cq = parent.create_cq(&CqInit::new(8)).unwrap();
    assert_errno(parent.dealloc(), libc::EBUSY);
    cq.destroy().unwrap();
    assert!(cq.parent_domain().is_none());
    parent.dealloc().unwrap();
    assert_errno(parent.dealloc(), libc::EINVAL);
}

#[test]
fn a_deallocated_parent_domain_creates_no_cq() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    parent.dealloc().unwrap();
    assert_errno(parent.create_cq(&CqInit::new(8)), libc::EINVAL);
}

#[test]
fn a_deallocated_pd_or_td_makes_no_parent_domain() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    td.dealloc().unwrap();
    assert_errno(ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }), libc::EINVAL);
    // The failed allocation gave the PD back.
    pd.dealloc().unwrap();
    assert_errno(ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)), libc::EINVAL);
}

#[test]
fn cq_on_a_parent_domain_with_a_td_is_single_threaded() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    let plain = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    let with_td = ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }).unwrap();
    let cq = plain.create_cq(&CqInit::new(8)).unwrap();
    assert!(!cq.create_flags().contains(CqCreateFlags::SINGLE_THREADED));
    let cq_td = with_td.create_cq(&CqInit::new(8)).unwrap();
    assert!(cq_td.create_flags().contains(CqCreateFlags::SINGLE_THREADED));
    // Polling and extended polling work as on any CQ.
    let mut wc = [Wc::default(); 2];
    assert_eq!(cq_td.poll(&mut wc).unwrap(), 0);
}

#[test]
fn domains_of_another_context_are_refused() {
    let a = open();
    let b = open();
    let pd_a = a.alloc_pd().unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let td_a = a.alloc_td().unwrap();
    assert_errno(b.alloc_parent_domain(&ParentDomainInit::new(&pd_a)), libc::EINVAL);
    assert_errno(b.alloc_parent_domain(&ParentDomainInit { td: Some(&td_a), ..ParentDomainInit::new(&pd_b) }), libc::EINVAL);
    // Neither refusal kept a hold on the domains.
    td_a.dealloc().unwrap();
    pd_a.dealloc().unwrap();
    pd_b.dealloc().unwrap();
}
