//! ibv_reg_mr(3), ibv_dereg_mr(3), ibv_alloc_pd(3).
mod common;
use common::*;
use rverbs::*;

#[test]
fn remote_write_or_atomic_needs_local_write() {
    let pd = open().alloc_pd().unwrap();
    for a in [Access::REMOTE_WRITE, Access::REMOTE_ATOMIC] {
        assert_eq!(pd.alloc_mr(64, a).unwrap_err().errno(), libc::EINVAL, "{a:?}");
        pd.alloc_mr(64, a | Access::LOCAL_WRITE).unwrap();
    }
    pd.alloc_mr(64, Access::REMOTE_READ).unwrap();
}

#[test]
fn bad_registrations_are_refused() {
    let pd = open().alloc_pd().unwrap();
    assert_eq!(pd.alloc_mr(0, Access::LOCAL_WRITE).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(pd.alloc_mr(64, Access::ON_DEMAND).unwrap_err().errno(), libc::EOPNOTSUPP);
    // Relaxed ordering is an optional flag: accepted and ignored.
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::RELAXED_ORDERING).unwrap();
    assert_eq!(mr.access(), Access::LOCAL_WRITE);
}

#[test]
fn keys_are_distinct_and_regions_page_aligned_and_zeroed() {
    let pd = open().alloc_pd().unwrap();
    let a = pd.alloc_mr(100, Access::LOCAL_WRITE).unwrap();
    let b = pd.alloc_mr(100, Access::LOCAL_WRITE).unwrap();
    assert_ne!(a.lkey(), b.lkey());
    assert_eq!(a.addr() as usize % 4096, 0);
    assert_eq!(a.iova(), a.addr() as u64);
    let mut buf = [1u8; 100];
    a.read(0, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 100]);
    assert_eq!(a.read(50, &mut buf).unwrap_err().errno(), libc::EINVAL, "out of range");
    assert_eq!(a.sge(90, 11).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn caller_memory_with_an_iova_is_addressed_through_it() {
    let (a, b) = pair(QpType::Rc);
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` outlives the region (deregistered below) and every request using it.
    let mr = unsafe {
        b.pd.reg_mr_iova(buf.as_mut_ptr(), buf.len(), 0x10_0000, ALL_ACCESS)
    }
    .unwrap();
    assert_eq!(mr.iova(), 0x10_0000);
    a.mr.write(0, b"via iova").unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, 0x10_0000 + 16, mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    // The process address is not a valid remote address of the region.
    a.qp.post_send(&[SendWr::write(2, &sge, buf.as_ptr() as u64, mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
    mr.dereg().unwrap();
    assert_eq!(&buf[16..24], b"via iova");
}

#[test]
fn zero_based_regions_start_at_zero() {
    let pd = open().alloc_pd().unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::ZERO_BASED).unwrap();
    assert_eq!(mr.iova(), 0);
    assert_eq!(mr.sge(8, 8).unwrap().addr, 8);
}

#[test]
fn dealloc_pd_is_busy_while_regions_exist() {
    let pd = open().alloc_pd().unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    assert_eq!(pd.dealloc().unwrap_err().errno(), libc::EBUSY);
    drop(mr);
    pd.dealloc().unwrap();
    assert!(pd.alloc_mr(64, Access::LOCAL_WRITE).is_err(), "a deallocated PD takes nothing");
}

/// PD handles of deallocated PDs are reused: a process that allocates and frees PDs
/// forever never exhausts `max_pd`, and live PDs never share a handle.
#[test]
fn pd_handles_are_reused_after_dealloc() {
    let ctx = open();
    let max_pd = ctx.query_device().max_pd as usize;
    let keep = ctx.alloc_pd().unwrap();
    for _ in 0..=max_pd {
        let pd = ctx.alloc_pd().unwrap();
        assert_ne!(pd.handle(), keep.handle());
        pd.dealloc().unwrap();
    }
}

#[test]
fn dereg_twice_fails() {
    let pd = open().alloc_pd().unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    mr.dereg().unwrap();
    assert!(!mr.is_valid());
    assert_eq!(mr.dereg().unwrap_err().errno(), libc::EINVAL);
    let mut b = [0u8; 1];
    assert!(mr.read(0, &mut b).is_err());
}
