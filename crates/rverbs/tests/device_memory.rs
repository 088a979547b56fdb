//! Device memory (ibv_alloc_dm(3)): allocation limits, the copies' 4-byte units and
//! bounds, zero-based regions over it that a peer QP writes and reads through its rkey,
//! and EBUSY while a region holds it.
mod common;
use common::*;
use rverbs::*;

#[test]
fn copies_go_in_four_byte_units_inside_the_allocation() {
    let ctx = open();
    let dm = ctx.alloc_dm(256, 0).unwrap();
    assert_eq!(dm.len(), 256);
    let data: Vec<u8> = (0..64u8).collect();
    dm.copy_to(16, &data).unwrap();
    let mut back = [0u8; 64];
    dm.copy_from(16, &mut back).unwrap();
    assert_eq!(&back[..], &data[..]);
    let mut zeros = [0xffu8; 16];
    dm.copy_from(0, &mut zeros).unwrap();
    assert_eq!(zeros, [0u8; 16], "fresh device memory reads as zeros");

    // mlx5's order (rdma-core providers/mlx5/verbs.c `mlx5_access_dm`): the range first,
    // EFAULT, then the 4-byte units, EINVAL.
    for (offset, len) in [(2u64, 4usize), (4, 6)] {
        let err = dm.copy_to(offset, &data[..len]).unwrap_err();
        assert!(matches!(err, Error::Invalid { rule: Rule::DmCopyUnit { .. }, .. }), "{err:?}");
    }
    for (offset, len) in [(256u64, 4usize), (252, 8), (u64::MAX - 3, 4), (254, 6), (257, 0)] {
        let err = dm.copy_from(offset, &mut back[..len]).unwrap_err();
        assert!(matches!(err, Error::OutOfRange { size: 256, .. }) && err.errno() == libc::EFAULT, "{offset}+{len}: {err:?}");
    }
    dm.copy_to(256, &[]).expect("nothing, at the end");
    assert_eq!(dm.copy_to(2, &[]).unwrap_err().errno(), libc::EINVAL, "an empty copy's offset in 4-byte units");
    dm.copy_to(252, &data[..4]).unwrap();
}

#[test]
fn an_allocation_is_refused_past_max_dm_size_and_for_nothing() {
    let ctx = open();
    // One allocation above max_dm_size: EINVAL (mlx5's `alloc_dm_memic`); ENOMEM is for
    // one that fits but finds too little left (tests/c/bad_args.c, a process of its own).
    let err = ctx.alloc_dm(limits::MAX_DM_SIZE as usize + 1, 0).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::DmTooLarge { .. }, .. }), "{err:?}");
    assert_eq!(ctx.alloc_dm(0, 0).unwrap_err().errno(), libc::EINVAL);
    let err = ctx.alloc_dm(64, 13).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::DmAlignment { log_align_req: 13, .. }, .. }), "{err:?}");
    ctx.alloc_dm(64, 12).unwrap();
}

#[test]
fn a_peer_writes_and_reads_device_memory_through_a_zero_based_region() {
    let (a, b) = pair(QpType::Rc);
    let dm = b.ctx.alloc_dm(4096, 0).unwrap();
    let access = Access::ZERO_BASED | ALL_ACCESS;
    let err = b.pd.reg_dm_mr(&dm, 0, 64, ALL_ACCESS).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::DmMrZeroBased, .. }), "{err:?}");
    let err = b.pd.reg_dm_mr(&dm, 4000, 100, access).unwrap_err();
    assert!(matches!(err, Error::Invalid { rule: Rule::DmRange { .. }, .. }), "{err:?}");
    b.pd.reg_dm_mr(&dm, 8, 0, access).expect("a zero-length region").dereg().unwrap();
    // mlx5's MLX5_DM_ALLOWED_ACCESS: nothing but read, write, atomic, ZERO_BASED and the
    // optional range; refused before ZERO_BASED is looked at.
    for extra in [Access::ON_DEMAND, Access::MW_BIND, Access::HUGETLB, Access::from_bits_retain(1 << 15)] {
        let err = b.pd.reg_dm_mr(&dm, 0, 64, (access | extra) - Access::ZERO_BASED).unwrap_err();
        assert!(matches!(err, Error::Invalid { rule: Rule::DmMrAccess { flags }, .. } if flags == extra.bits()), "{err:?}");
    }
    let relaxed = Access::from_bits_retain(access.bits() | Access::OPTIONAL_RANGE);
    b.pd.reg_dm_mr(&dm, 0, 64, relaxed).expect("optional-range flags are ignored").dereg().unwrap();

    // The region covers [1024, 2048) of the device memory; its address 0 is byte 1024.
    let mr = b.pd.reg_dm_mr(&dm, 1024, 1024, access).unwrap();
    assert_eq!(mr.iova(), 0);
    a.mr.write(0, b"into device memory").unwrap();
    let sge = [a.mr.sge(0, 18).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, 100, mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let mut got = [0u8; 20];
    dm.copy_from(1124, &mut got).unwrap();
    assert_eq!(&got[..18], b"into device memory");

    dm.copy_to(1024 + 512, b"from the owner's copy").unwrap_err(); // 21 bytes: not 4-byte units
    dm.copy_to(1024 + 512, b"from the owner copy!").unwrap();
    let into = [a.mr.sge(64, 20).unwrap()];
    a.qp.post_send(&[SendWr::read(2, &into, 512, mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let mut read = [0u8; 20];
    a.mr.read(64, &mut read).unwrap();
    assert_eq!(&read, b"from the owner copy!");

    // Outside the region (past its 1024 bytes): a remote access error, nothing written.
    a.qp.post_send(&[SendWr::write(3, &sge, 1020, mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr);
}

#[test]
fn device_memory_is_busy_while_a_region_holds_it_and_gone_after_free() {
    let s = side(QpType::Rc);
    let dm = s.ctx.alloc_dm(128, 0).unwrap();
    // Refused registrations hold nothing (the free below succeeds).
    s.pd.reg_dm_mr(&dm, 0, 128, Access::ZERO_BASED | Access::ON_DEMAND).unwrap_err();
    s.pd.reg_dm_mr(&dm, 0, 128, Access::ZERO_BASED | Access::REMOTE_WRITE).unwrap_err();
    let mr = s.pd.reg_dm_mr(&dm, 0, 128, Access::ZERO_BASED | Access::LOCAL_WRITE).unwrap();
    assert_eq!(dm.free().unwrap_err().errno(), libc::EBUSY);
    mr.dereg().unwrap();
    dm.free().unwrap();
    assert!(dm.is_freed());
    assert_eq!(dm.copy_to(0, &[1, 2, 3, 4]).unwrap_err().errno(), libc::EINVAL);
    assert!(s.pd.reg_dm_mr(&dm, 0, 4, Access::ZERO_BASED).is_err());
}
