//! ibv_rereg_mr(3): PD, access and translation change in place, keys stay; MR query.
mod common;
use common::*;
use rverbs::*;

#[test]
fn rereg_access_keeps_the_key_and_changes_rights() {
    let (a, b) = pair(QpType::Rc);
    let m = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let key = m.rkey();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, m.iova(), key).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);

    let (a, b) = pair(QpType::Rc);
    let m = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let key = m.rkey();
    m.rereg(ReregFlags::ACCESS, None, Some(Access::LOCAL_WRITE | Access::REMOTE_WRITE)).unwrap();
    assert_eq!(m.rkey(), key);
    assert_eq!(m.access(), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, m.iova(), key).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    // And back: the same key loses the right.
    m.rereg(ReregFlags::ACCESS, None, Some(Access::LOCAL_WRITE)).unwrap();
    a.qp.post_send(&[SendWr::write(2, &sge, m.iova(), key).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
    drop(b);
}

#[test]
fn rereg_pd_makes_a_posted_receive_fail_remote_op_err() {
    let (a, b) = pair(QpType::Rc);
    let m = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [m.sge(0, 64).unwrap()];
    b.qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
    let other = b.ctx.alloc_pd().unwrap();
    m.rereg(ReregFlags::PD, Some(&other), None).unwrap();
    assert_eq!(m.query().pd_handle, other.handle());
    assert_eq!(other.dealloc().unwrap_err().errno(), libc::EBUSY);
    a.qp.post_send(&[SendWr::send(1, &[a.mr.sge(0, 8).unwrap()])]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemOpErr);
    // Back to the original PD, after resetting both QPs (their stale completions are
    // purged, as mlx5 does), traffic works again.
    m.rereg(ReregFlags::PD, Some(&b.pd), None).unwrap();
    for s in [&a, &b] {
        s.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    }
    connect(&a, &b, &PATH);
    assert_empty(&a.cq);
    assert_empty(&b.cq);
    b.qp.post_recv(&[RecvWr::new(2, &sge)]).unwrap();
    a.qp.post_send(&[SendWr::send(2, &[a.mr.sge(0, 8).unwrap()]).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).wr_id(), 2);
}

#[test]
fn rereg_translation_moves_the_region() {
    let (a, b) = pair(QpType::Rc);
    let m = b.pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let key = m.rkey();
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` outlives the region (deregistered below).
    unsafe { m.rereg_translation(ReregFlags::TRANSLATION, buf.as_mut_ptr(), 256, None, None) }.unwrap();
    let info = m.query();
    assert_eq!((info.addr, info.len, info.iova, info.key), (buf.as_ptr() as usize, 256, buf.as_ptr() as u64, key));
    a.mr.write(0, b"moved").unwrap();
    let sge = [a.mr.sge(0, 5).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, m.iova() + 200, key).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    m.dereg().unwrap();
    assert_eq!(&buf[200..205], b"moved");
}

/// The keys a requester has used are checked again after a re-registration
/// (docs/shared-state.md, "Remembered keys"). After WRITEs through the same local and
/// remote keys (the first of a QP goes the queued way, the next ones the express lane,
/// which remembers the keys): a remote key that lost REMOTE_WRITE is refused at once, a
/// local key moved to another PD is refused at once, and WRITEs after both regions moved
/// read the new source and land in the new target, the old target untouched; after
/// deregistration the rkey grants nothing.
#[test]
fn rereg_after_traffic_takes_effect_at_once() {
    let warm = |a: &Side, sge: &[Sge], iova: u64, rkey: u32| {
        for id in 0..4 {
            a.qp.post_send(&[SendWr::write(id, sge, iova, rkey).signaled()]).unwrap();
            assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        }
    };
    // The remote key loses its right.
    let (a, b) = pair(QpType::Rc);
    let dst = b.pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    warm(&a, &sge, dst.iova(), dst.rkey());
    dst.rereg(ReregFlags::ACCESS, None, Some(Access::LOCAL_WRITE)).unwrap();
    a.qp.post_send(&[SendWr::write(9, &sge, dst.iova(), dst.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);

    // The local key moves to another PD.
    let (a, b) = pair(QpType::Rc);
    let dst = b.pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [src.sge(0, 8).unwrap()];
    warm(&a, &sge, dst.iova(), dst.rkey());
    let other = a.ctx.alloc_pd().unwrap();
    src.rereg(ReregFlags::PD, Some(&other), None).unwrap();
    a.qp.post_send(&[SendWr::write(9, &sge, dst.iova(), dst.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::LocProtErr);
    src.dereg().unwrap();

    // Both regions move.
    let (a, b) = pair(QpType::Rc);
    let mut src_old = vec![1u8; 64];
    let mut dst_old = vec![0u8; 64];
    // SAFETY: both buffers outlive their regions (deregistered below).
    let src = unsafe { a.pd.reg_mr(src_old.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: as above.
    let dst = unsafe { b.pd.reg_mr(dst_old.as_mut_ptr(), 64, ALL_ACCESS) }.unwrap();
    let (lkey, rkey) = (src.lkey(), dst.rkey());
    warm(&a, &[src.sge(0, 8).unwrap()], dst.iova(), rkey);
    let mut src_new = vec![2u8; 64];
    let mut dst_new = vec![0u8; 64];
    // SAFETY: the new buffers outlive the regions (deregistered below).
    unsafe { src.rereg_translation(ReregFlags::TRANSLATION, src_new.as_mut_ptr(), 64, None, None) }.unwrap();
    // SAFETY: as above.
    unsafe { dst.rereg_translation(ReregFlags::TRANSLATION, dst_new.as_mut_ptr(), 64, None, None) }.unwrap();
    assert_eq!((src.lkey(), dst.rkey()), (lkey, rkey), "keys stay");
    dst_old.fill(0);
    let sge = [src.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(9, &sge, dst.iova(), rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(&dst_new[..8], &[2u8; 8], "the new source's bytes, in the new target");
    assert!(dst_old.iter().all(|&x| x == 0), "the old target is not written");
    let iova = dst.iova();
    dst.dereg().unwrap();
    a.qp.post_send(&[SendWr::write(10, &sge, iova, rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
    src.dereg().unwrap();
    drop((src_old, src_new));
}

#[test]
fn rereg_input_errors() {
    let pd = open().alloc_pd().unwrap();
    let m = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    assert_eq!(m.rereg(ReregFlags::empty(), None, None).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(m.rereg(ReregFlags::PD, None, None).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(m.rereg(ReregFlags::ACCESS, None, Some(Access::REMOTE_WRITE)).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(m.rereg(ReregFlags::TRANSLATION, None, None).unwrap_err().errno(), libc::EINVAL);
}

/// ibv_rereg_mr(3): the old translation is never used once the call returns. After
/// WRITEs the express lane remembered, a region moved to a shorter buffer (the key
/// stays) takes a WRITE at its new address, and a WRITE inside the old range but
/// outside the new one is REM_ACCESS_ERR, the old buffer untouched.
#[test]
fn rereg_to_a_shorter_buffer_after_traffic_bounds_the_next_write() {
    let (a, b) = pair(QpType::Rc);
    a.mr.write(0, &[3u8; 8]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    let mut old = vec![0u8; 4096];
    // SAFETY: `old` outlives the region (deregistered below).
    let dst = unsafe { b.pd.reg_mr(old.as_mut_ptr(), old.len(), ALL_ACCESS) }.unwrap();
    let (rkey, old_iova) = (dst.rkey(), dst.iova());
    for id in 0..4 {
        a.qp.post_send(&[SendWr::write(id, &sge, old_iova + 1024, rkey).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
    let mut new = vec![0u8; 64];
    // SAFETY: `new` outlives the region (deregistered below).
    unsafe { dst.rereg_translation(ReregFlags::TRANSLATION, new.as_mut_ptr(), 64, None, None) }.unwrap();
    assert_eq!(dst.rkey(), rkey, "the key stays");
    old.fill(0);
    a.qp.post_send(&[SendWr::write(10, &sge, dst.iova(), rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "the new translation");
    assert_eq!(&new[..8], &[3u8; 8]);
    a.qp.post_send(&[SendWr::write(11, &sge, old_iova + 1024, rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr, "the old range is gone");
    assert!(old.iter().all(|&x| x == 0), "the old buffer is not written");
    dst.dereg().unwrap();
}
