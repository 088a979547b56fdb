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
    let outside = Sge { length: 4 * PAGE as u32, ..inside };
    assert_eq!(s.pd.advise_mr(Advice::Prefetch, &[outside]).unwrap_err().errno(), libc::EFAULT);
    let no_key = Sge { lkey: odp.lkey() ^ 0x100, ..inside };
    assert_eq!(s.pd.advise_mr(Advice::Prefetch, &[no_key]).unwrap_err().errno(), libc::EFAULT);
    let read_only = Sge { addr: p as u64, length: 64, lkey: ro.lkey() };
    assert_eq!(s.pd.advise_mr(Advice::PrefetchWrite, &[read_only]).unwrap_err().errno(), libc::EFAULT);
    s.pd.advise_mr(Advice::Prefetch, &[read_only]).unwrap();
    let plain = s.mr.sge(0, 64).unwrap();
    let err = s.pd.advise_mr(Advice::Prefetch, &[plain]).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::NotOnDemand { .. }, .. }), "{err:?}");
    drop((odp, ro));
    unmap(p, 4);
}
