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
    // On-demand paging is there (tests/on_demand.rs); its access rules come first.
    assert_eq!(pd.alloc_mr(64, Access::REMOTE_WRITE | Access::ON_DEMAND).unwrap_err().errno(), libc::EINVAL);
    pd.alloc_mr(64, Access::LOCAL_WRITE | Access::ON_DEMAND).unwrap();
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

// ibv_reg_mr(3) + the kernel's page pinning (rxe: ib_umem_get): memory that is not
// mapped with the access asked is refused with EFAULT.
#[test]
fn memory_that_is_not_mapped_with_the_access_asked_is_refused_with_efault() {
    let pd = open().alloc_pd().unwrap();
    let rw = map(3, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY (all registrations below): the device may only touch what registration
    // accepts; refused ranges are never touched, accepted ones are deregistered before
    // their pages go.
    let reg = |p: *mut u8, len: usize, a: Access| unsafe { pd.reg_mr(p, len, a) };
    // A hole in the middle of the range.
    // SAFETY: the middle page of the mapping above.
    let hole = unsafe { rw.add(4096) };
    unmap(hole, 1);
    assert_eq!(reg(rw, 3 * 4096, Access::LOCAL_WRITE).unwrap_err().errno(), libc::EFAULT);
    assert_eq!(reg(hole, 1, Access::empty()).unwrap_err().errno(), libc::EFAULT, "unmapped, read only");
    reg(rw, 4096, ALL_ACCESS).unwrap().dereg().unwrap();
    // PROT_NONE, even for reading.
    let none = map(1, libc::PROT_NONE);
    assert_eq!(reg(none, 64, Access::empty()).unwrap_err().errno(), libc::EFAULT);
    // Read-only memory: readable registrations only (ib_access_writable: LOCAL_WRITE,
    // REMOTE_WRITE, REMOTE_ATOMIC, MW_BIND need a writable pin).
    let ro = map(1, libc::PROT_READ);
    for a in [Access::LOCAL_WRITE, ALL_ACCESS, Access::MW_BIND] {
        assert_eq!(reg(ro, 4096, a).unwrap_err().errno(), libc::EFAULT, "{a:?}");
    }
    reg(ro, 4096, Access::REMOTE_READ).unwrap().dereg().unwrap();
    // Bad flags are reported before the range, as the kernel checks them first.
    assert_eq!(reg(none, 64, Access::REMOTE_WRITE).unwrap_err().errno(), libc::EINVAL);
    // rereg to a range that is not there: refused, the region unchanged.
    let mr = reg(rw, 4096, ALL_ACCESS).unwrap();
    // SAFETY: the new range is the hole: refused before it is used.
    let r = unsafe { mr.rereg_translation(ReregFlags::empty(), hole, 4096, None, None) };
    assert_eq!(r.unwrap_err().errno(), libc::EFAULT);
    assert_eq!(mr.addr(), rw);
    mr.dereg().unwrap();
    unmap(rw, 1);
    // SAFETY: the last page of the first mapping.
    unmap(unsafe { rw.add(2 * 4096) }, 1);
    unmap(none, 1);
    unmap(ro, 1);
}

// A NIC keeps writing the pages it pinned when the application unmaps them; rverbs
// reaches memory with the CPU, so an access to a registration whose memory the
// application gave back must end in an error completion, never in a signal.
#[test]
fn memory_unmapped_after_registration_gives_access_errors_not_signals() {
    // Another thread of the process (the progress thread mapping a peer's segment) may
    // map something into the hole before the checks: a later mapping reusing the addresses,
    // which a NIC's pinned pages would not see (docs/rxe-differences.md, "Registered
    // memory unmapped later"). Then the checks prove nothing and the scenario starts
    // again with a new hole; when the hole stayed empty throughout, every check must hold.
    for attempt in 0..8 {
        let (a, b) = pair(QpType::Rc);
        let target = map(2, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the application's mistake under test: the pages go while registered; the
        // device must not touch anything else.
        let mr = unsafe { b.pd.reg_mr(target, 2 * 4096, ALL_ACCESS) }.unwrap();
        unmap(target, 2);
        // The safe accessors report the fault as EFAULT.
        let mut buf = [0u8; 8];
        let read = mr.read(0, &mut buf).map_err(|e| e.errno());
        let write = mr.write(0, &buf).map_err(|e| e.errno());
        let word = mr.read_u64(0).map(drop).map_err(|e| e.errno());
        a.mr.fill(0, 64, 0x5A).unwrap();
        let sge = [a.mr.sge(0, 64).unwrap()];
        // RDMA WRITE into the vanished pages: the responder cannot place it.
        a.qp.post_send(&[SendWr::write(1, &sge, mr.iova(), mr.rkey()).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        if overlaps_a_mapping(target, 2 * 4096) {
            eprintln!("attempt {attempt}: the hole was mapped again by another thread; again");
            continue;
        }
        assert_eq!((read, write, word), (Err(libc::EFAULT), Err(libc::EFAULT), Err(libc::EFAULT)));
        assert_eq!(wc.wr_id(), 1);
        assert_eq!(wc.status(), WcStatus::RemAccessErr);
        // A local SGE over vanished pages, on a fresh connection (the first one is in error).
        let (c, d) = pair(QpType::Rc);
        let src = map(1, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: as above, for the source of a WRITE.
        let smr = unsafe { c.pd.reg_mr(src, 4096, ALL_ACCESS) }.unwrap();
        unmap(src, 1);
        let sge = [smr.sge(0, 64).unwrap()];
        c.qp.post_send(&[SendWr::write(2, &sge, d.mr.iova(), d.mr.rkey()).signaled()]).unwrap();
        let wc = poll_one(&c.cq);
        assert_eq!(wc.wr_id(), 2);
        if !overlaps_a_mapping(src, 4096) {
            assert_ne!(wc.status(), WcStatus::Success, "{:?}", wc.status());
        }
        return;
    }
    panic!("the hole was mapped again by another thread in 8 attempts out of 8");
}

// The memory of `alloc_mr` lives in the runtime directory: when the file system cannot
// hold it (a small tmpfs, or a length beyond any), the verb says ENOMEM at once instead
// of a later SIGBUS at the first store; nothing is left behind and the device goes on.
#[test]
fn alloc_mr_beyond_the_runtime_directory_space_is_enomem_and_leaves_nothing() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    // The runtime directory as docs/environment.md defines it.
    let dir = std::env::var_os("RVERBS_RUNTIME_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| {
        match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(x) => std::path::PathBuf::from(x).join("rverbs"),
            // SAFETY: getuid has no preconditions.
            None => format!("/dev/shm/rverbs-{}", unsafe { libc::getuid() }).into(),
        }
    });
    fn largest(d: &std::path::Path) -> u64 {
        std::fs::read_dir(d).map_or(0, |r| {
            r.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => largest(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .max()
                .unwrap_or(0)
        })
    }
    assert!(dir.is_dir(), "{dir:?}");
    let e = pd.alloc_mr(1 << 40, Access::LOCAL_WRITE).unwrap_err();
    assert_eq!(e.errno(), libc::ENOMEM, "{e}");
    assert!(largest(&dir) < 1 << 40, "the refused segment's file is removed");
    let mr = pd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    mr.fill(0, 1 << 20, 0xEE).unwrap();
    assert_eq!(mr.read_u64((1 << 20) - 8).unwrap(), u64::from_ne_bytes([0xEE; 8]));
}

/// WRITEs through one remote key, each checked: the first goes the queued way, the next
/// ones the express lane, which remembers the key (docs/shared-state.md, "Remembered
/// keys").
#[track_caller]
fn write_remembered(a: &Side, sge: &[Sge], iova: u64, rkey: u32) {
    for id in 0..4 {
        a.qp.post_send(&[SendWr::write(id, sge, iova, rkey).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
}

/// ibv_dereg_mr(3), ibv_reg_mr(3): a region deregistered and another registered in its
/// key slot between two WRITEs is checked anew, even once the slot's key byte has come
/// round to the remembered key again (256 registrations later): a WRITE through that key
/// reaches the new region, within its bounds only, and never the old buffer.
#[test]
fn dereg_then_reg_in_the_same_slot_after_traffic_takes_the_new_region() {
    let (a, b) = pair(QpType::Rc);
    a.mr.write(0, &[7u8; 8]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    let mut old = vec![0u8; 4096];
    // SAFETY: `old` outlives the region (deregistered below).
    let dst = unsafe { b.pd.reg_mr(old.as_mut_ptr(), old.len(), ALL_ACCESS) }.unwrap();
    let (rkey, iova) = (dst.rkey(), dst.iova());
    write_remembered(&a, &sge, iova + 1024, rkey);
    dst.dereg().unwrap();
    old.fill(0);
    let mut new = vec![0u8; 64];
    // SAFETY: `new` outlives every region over it (each deregistered below).
    let mut again = unsafe { b.pd.reg_mr(new.as_mut_ptr(), new.len(), ALL_ACCESS) }.unwrap();
    assert_eq!(again.rkey() >> 8, rkey >> 8, "the freed slot is reused");
    assert_ne!(again.rkey(), rkey, "with another key byte");
    // The slot's key byte comes round to the remembered key (no request in between: the
    // lane remembers one remote key).
    for _ in 0..256 {
        if again.rkey() == rkey {
            break;
        }
        again.dereg().unwrap();
        // SAFETY: as above.
        again = unsafe { b.pd.reg_mr(new.as_mut_ptr(), new.len(), ALL_ACCESS) }.unwrap();
    }
    assert_eq!(again.rkey(), rkey, "the key byte wrapped round");
    a.qp.post_send(&[SendWr::write(20, &sge, again.iova(), rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "the new region, at its own address");
    assert_eq!(&new[..8], &[7u8; 8]);
    a.qp.post_send(&[SendWr::write(21, &sge, iova + 1024, rkey).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr, "the old range is not the new region's");
    assert!(old.iter().all(|&x| x == 0), "the old buffer is not written");
    again.dereg().unwrap();
}

/// ibv_post_send(3): a remembered remote key bounds each request by itself — a WRITE
/// past the region's end after WRITEs inside it is REM_ACCESS_ERR, the byte after the
/// region untouched.
#[test]
fn write_past_a_remembered_region_is_rem_access_err() {
    let (a, b) = pair(QpType::Rc);
    a.mr.write(0, &[7u8; 8]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    let mut buf = vec![0u8; 128];
    // SAFETY: `buf` outlives the region (deregistered below).
    let dst = unsafe { b.pd.reg_mr(buf.as_mut_ptr(), 64, ALL_ACCESS) }.unwrap();
    write_remembered(&a, &sge, dst.iova() + 56, dst.rkey());
    buf.fill(0);
    a.qp.post_send(&[SendWr::write(9, &sge, dst.iova() + 57, dst.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
    dst.dereg().unwrap();
    assert!(buf.iter().all(|&x| x == 0), "nothing is written, inside the region or past it");
}

/// ibv_post_send(3): a remembered local key bounds each request's scatter list by itself —
/// after WRITEs from inside the region, a WRITE whose one SGE runs past the region's end
/// completes LOC_PROT_ERR, and nothing reaches the target.
#[test]
fn write_from_past_a_remembered_local_region_is_loc_prot_err() {
    let (a, b) = pair(QpType::Rc);
    let mut buf = vec![5u8; 128];
    // SAFETY: `buf` outlives the region (deregistered below).
    let src = unsafe { a.pd.reg_mr(buf.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    let dst = b.pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let inside = [src.sge(56, 8).unwrap()];
    write_remembered(&a, &inside, dst.iova(), dst.rkey());
    dst.write(0, &[0u8; 64]).unwrap();
    let past = [Sge { addr: inside[0].addr + 1, ..inside[0] }];
    a.qp.post_send(&[SendWr::write(9, &past, dst.iova(), dst.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::LocProtErr);
    let mut got = [1u8; 8];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [0u8; 8], "nothing is written");
    src.dereg().unwrap();
    drop(buf);
}

/// SENDs of 8 bytes into receives naming `recv`, each checked: the first goes the queued
/// way, the next ones the express lane, which remembers the receive's key
/// (docs/shared-state.md, "Remembered keys").
#[track_caller]
fn send_into_remembered(a: &Side, b: &Side, recv: &[Sge]) {
    a.mr.write(0, &[7u8; 8]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    for id in 0..4 {
        b.qp.post_recv(&[RecvWr::new(id, recv)]).unwrap();
        a.qp.post_send(&[SendWr::send(id, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    }
}

/// ibv_post_recv(3): a remembered receive key bounds each receive by itself — after SENDs
/// into the end of the region, a receive whose one SGE runs a byte past it takes nothing:
/// the receive completes LOC_QP_OP_ERR (rxe's malformed receive WQE), the SEND
/// REM_OP_ERR, and the byte after the region is untouched.
#[test]
fn a_receive_past_a_remembered_region_is_loc_qp_op_err() {
    let (a, b) = pair(QpType::Rc);
    let mut buf = vec![0u8; 128];
    // SAFETY: `buf` outlives the region (deregistered below).
    let dst = unsafe { b.pd.reg_mr(buf.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    let inside = [Sge { addr: dst.iova() + 56, length: 8, lkey: dst.lkey() }];
    send_into_remembered(&a, &b, &inside);
    let past = [Sge { addr: dst.iova() + 57, ..inside[0] }];
    b.qp.post_recv(&[RecvWr::new(9, &past)]).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(9, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::LocQpOpErr);
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemOpErr);
    dst.dereg().unwrap();
    assert_eq!(&buf[56..64], &[7u8; 8], "the SENDs before it landed");
    assert_eq!(buf[64], 0, "nothing past the region");
}

/// ibv_dereg_mr(3), ibv_reg_mr(3): a receive region deregistered and another registered
/// in its key slot, with the same key once the key byte has come round (256 registrations
/// later), is checked anew after SENDs into the old one: a receive naming the new region
/// takes the next SEND there, and one naming the old range is refused, the old buffer
/// untouched.
#[test]
fn a_receive_key_registered_again_takes_the_new_region_only() {
    let (a, b) = pair(QpType::Rc);
    let mut old = vec![0u8; 4096];
    // SAFETY: `old` outlives the region (deregistered below).
    let dst = unsafe { b.pd.reg_mr(old.as_mut_ptr(), old.len(), Access::LOCAL_WRITE) }.unwrap();
    let (lkey, iova) = (dst.lkey(), dst.iova());
    send_into_remembered(&a, &b, &[Sge { addr: iova + 1024, length: 8, lkey }]);
    dst.dereg().unwrap();
    old.fill(0);
    let mut new = vec![0u8; 64];
    // SAFETY: `new` outlives every region over it (each deregistered below).
    let mut again = unsafe { b.pd.reg_mr(new.as_mut_ptr(), new.len(), Access::LOCAL_WRITE) }.unwrap();
    for _ in 0..256 {
        if again.lkey() == lkey {
            break;
        }
        again.dereg().unwrap();
        // SAFETY: as above.
        again = unsafe { b.pd.reg_mr(new.as_mut_ptr(), new.len(), Access::LOCAL_WRITE) }.unwrap();
    }
    assert_eq!(again.lkey(), lkey, "the key byte wrapped round");
    let sge = [a.mr.sge(0, 8).unwrap()];
    b.qp.post_recv(&[RecvWr::new(20, &[Sge { addr: again.iova(), length: 8, lkey }])]).unwrap();
    a.qp.post_send(&[SendWr::send(20, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success, "the new region, at its own address");
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(&new[..8], &[7u8; 8]);
    b.qp.post_recv(&[RecvWr::new(21, &[Sge { addr: iova + 1024, length: 8, lkey }])]).unwrap();
    a.qp.post_send(&[SendWr::send(21, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::LocQpOpErr, "the old range is not the new region's");
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemOpErr);
    assert!(old.iter().all(|&x| x == 0), "the old buffer is not written");
    again.dereg().unwrap();
}
