//! On-demand paging (ibv_reg_mr(3) IBV_ACCESS_ON_DEMAND, ibv_advise_mr(3)): a region over
//! pages that are not mapped yet is registered, a peer's access to them fails until they
//! are mapped and then succeeds; an implicit region reaches memory allocated after it;
//! advice is checked and faults pages in.
mod common;
use common::*;
use rverbs::*;

const PAGE: usize = 4096;

/// Remote access to the region `rkey` names at `addr` by a WRITE of 8 bytes from `a`.
fn write_8(a: &Side, wr_id: u64, addr: u64, rkey: u32) -> WcStatus {
    a.mr.write(0, &wr_id.to_ne_bytes()).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::write(wr_id, &sge, addr, rkey).signaled()]).unwrap();
    poll_one(&a.cq).status()
}

#[test]
fn an_on_demand_region_reaches_pages_mapped_after_registration() {
    let (a, b) = pair(QpType::Rc);
    // Two pages reserved, then unmapped: the region covers nothing yet.
    let p = map(2, libc::PROT_READ | libc::PROT_WRITE);
    unmap(p, 2);
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::ON_DEMAND;
    // SAFETY: the range is ours (reserved above); the device writes it only when mapped.
    let mr = unsafe { b.pd.reg_mr(p, 2 * PAGE, access) }.expect("registered without its pages");
    // SAFETY: as above, without ON_DEMAND: the pages are checked.
    let plain = unsafe { b.pd.reg_mr(p, 2 * PAGE, Access::LOCAL_WRITE) };
    assert_eq!(plain.unwrap_err().errno(), libc::EFAULT, "a plain registration needs its pages");

    assert_ne!(write_8(&a, 1, p as u64 + 8, mr.rkey()), WcStatus::Success, "no page there yet");
    // The pages come back (a fresh mapping at the same address).
    // SAFETY: mapping the reserved address range again, fixed.
    let q = unsafe {
        libc::mmap(p.cast(), 2 * PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED, -1, 0)
    };
    assert_eq!(q as usize, p as usize);
    let (a, b) = pair(QpType::Rc); // the first pair's QPs are in ERR after the failure
    let mr = {
        // SAFETY: as above; the pages are mapped now.
        unsafe { b.pd.reg_mr(p, 2 * PAGE, access) }.unwrap()
    };
    // SAFETY: reading the mapped pages.
    let before = unsafe { std::ptr::read_volatile(p.add(PAGE + 16).cast::<u64>()) };
    assert_eq!(before, 0);
    assert_eq!(write_8(&a, 2, p as u64 + PAGE as u64 + 16, mr.rkey()), WcStatus::Success);
    // SAFETY: as above.
    assert_eq!(unsafe { std::ptr::read_volatile(p.add(PAGE + 16).cast::<u64>()) }, 2);
    drop(mr);
    unmap(p, 2);
}

#[test]
fn an_implicit_region_reaches_memory_allocated_after_it() {
    let (a, b) = pair(QpType::Rc);
    // SAFETY: the device may write the whole process through this key; the test only
    // writes into the buffer below.
    let mr = unsafe { b.pd.reg_mr_implicit(Access::LOCAL_WRITE | Access::REMOTE_WRITE) }.unwrap();
    assert_eq!((mr.iova(), mr.len()), (0, usize::MAX));
    let later = map(1, libc::PROT_READ | libc::PROT_WRITE);
    assert_eq!(write_8(&a, 7, later as u64 + 64, mr.rkey()), WcStatus::Success);
    // SAFETY: reading our own mapping.
    assert_eq!(unsafe { std::ptr::read_volatile(later.add(64).cast::<u64>()) }, 7);
    unmap(later, 1);
    drop(mr);
}

#[test]
fn advice_applies_to_on_demand_regions_inside_them() {
    let s = side(QpType::Rc);
    let p = map(4, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: our mapping, unmapped only after the regions are dropped.
    let odp = unsafe { s.pd.reg_mr(p, 4 * PAGE, Access::LOCAL_WRITE | Access::ON_DEMAND) }.unwrap();
    // SAFETY: as above.
    let ro = unsafe { s.pd.reg_mr(p, PAGE, Access::ON_DEMAND) }.unwrap();
    let inside = Sge { addr: p as u64 + 100, length: 3 * PAGE as u32, lkey: odp.lkey() };
    for advice in [Advice::Prefetch, Advice::PrefetchWrite, Advice::PrefetchNoFault] {
        s.pd.advise_mr(advice, &[inside]).unwrap();
    }
    // The errnos and their order are mlx5's (drivers/infiniband/hw/mlx5/odp.c).
    let outside = Sge { length: 4 * PAGE as u32, ..inside };
    let err = s.pd.advise_mr(Advice::Prefetch, &[outside]).unwrap_err();
    assert!(matches!(err, Error::OutOfRange { .. }) && err.errno() == libc::EFAULT, "{err:?}");
    let below = Sge { addr: p as u64 - 8, length: 16, ..inside };
    assert_eq!(s.pd.advise_mr(Advice::Prefetch, &[below]).unwrap_err().errno(), libc::EFAULT);
    let no_key = Sge { lkey: odp.lkey() ^ 1, ..inside }; // the index of odp, another key byte
    let err = s.pd.advise_mr(Advice::Prefetch, &[no_key]).unwrap_err();
    assert!(matches!(err, Error::NoSuchKey { .. }) && err.errno() == libc::ENOENT, "{err:?}");
    let read_only = Sge { addr: p as u64, length: 64, lkey: ro.lkey() };
    assert_eq!(s.pd.advise_mr(Advice::PrefetchWrite, &[read_only]).unwrap_err().errno(), libc::EPERM);
    s.pd.advise_mr(Advice::Prefetch, &[read_only]).unwrap();
    // A region without ON_DEMAND is not an on-demand key: ENOENT before its PD or range.
    let plain = s.mr.sge(0, 64).unwrap();
    let err = s.pd.advise_mr(Advice::Prefetch, &[plain]).unwrap_err();
    assert!(matches!(err, Error::NoSuchKey { key, .. } if key == plain.lkey) && err.errno() == libc::ENOENT, "{err:?}");
    // A window's key: EINVAL.
    let mw = Mw::new(&s.pd, 2).unwrap();
    let window = Sge { lkey: mw.rkey(), ..inside };
    let err = s.pd.advise_mr(Advice::Prefetch, &[window]).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::KeyNamesWindow { .. }, .. }), "{err:?}");
    // Another PD's on-demand region: EPERM, and the first bad SGE of a list decides.
    let other = s.ctx.alloc_pd().unwrap();
    let err = other.advise_mr(Advice::Prefetch, &[inside]).unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }) && err.errno() == libc::EPERM, "{err:?}");
    assert_eq!(s.pd.advise_mr(Advice::Prefetch, &[inside, no_key, outside]).unwrap_err().errno(), libc::ENOENT);
    drop(mw);
    drop((odp, ro));
    unmap(p, 4);
}

/// The range checks of an on-demand registration are the kernel's `ib_init_umem_odp`
/// (drivers/infiniband/core/umem_odp.c): nothing is pinned, so a range at address 0 is
/// registered (its accesses fault), and one whose end wraps is EOVERFLOW.
#[test]
fn an_on_demand_registration_pins_nothing_and_refuses_a_wrapping_range_with_eoverflow() {
    let (a, b) = pair(QpType::Rc);
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::ON_DEMAND;
    // SAFETY: page 0 is never mapped: the device reaches nothing through this key.
    let zero = unsafe { b.pd.reg_mr(std::ptr::null_mut(), 64, access) }.expect("ODP at address 0");
    assert_eq!(zero.iova(), 0);
    assert_ne!(write_8(&a, 9, 8, zero.rkey()), WcStatus::Success, "page 0 is not there");
    drop(zero);
    let p = map(1, libc::PROT_READ | libc::PROT_WRITE);
    for (addr, len) in [(p as usize, usize::MAX), (usize::MAX - PAGE + 1, 2 * PAGE), (usize::MAX - PAGE + 2, PAGE - 2), (0, 0)] {
        // SAFETY: refused before anything is registered.
        let err = unsafe { b.pd.reg_mr(addr as *mut u8, len, access) }.unwrap_err();
        assert!(matches!(err, Error::Overflow { .. }) && err.errno() == libc::EOVERFLOW, "{addr:#x}+{len}: {err:?}");
    }
    // Without ON_DEMAND the same range is the pinning path's EINVAL.
    // SAFETY: refused before anything is registered.
    let err = unsafe { b.pd.reg_mr(usize::MAX as *mut u8, 2, Access::LOCAL_WRITE) }.unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err:?}");
    // SAFETY: refused: no pages.
    assert_eq!(unsafe { b.pd.reg_mr(p, 0, access) }.unwrap_err().errno(), libc::EINVAL);
    unmap(p, 1);
}
