//! Owned regions and leases (`rverbs::owned`, docs/rust-api.md "Owned buffers"): a
//! registered `Vec` comes back with the bytes the device wrote, a lease ends only with
//! its own completion (an error completion too), a closed region refuses the device and
//! an open one the program, and a forgotten lease leaves the region unreachable until its
//! completion or the end of the registration. What must not compile is in the module's
//! `compile_fail` doctests. The zero-copy file example runs here too.
mod common;

#[allow(dead_code)]
#[path = "../examples/zero_copy_file.rs"]
mod zero_copy_file;

use common::*;
use rverbs::owned::OwnedMr;
use rverbs::typed::{Rc, Remote, TypedQp};
use rverbs::*;

const TARGET_ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ);

/// A connected RC pair and typed handles of both QPs.
fn rc_pair() -> (Side, TypedQp<Rc>, Side, TypedQp<Rc>) {
    let (a, b) = pair(QpType::Rc);
    let qa = TypedQp::<Rc>::from_qp(a.qp.clone()).expect("RC");
    let qb = TypedQp::<Rc>::from_qp(b.qp.clone()).expect("RC");
    (a, qa, b, qb)
}

/// A region of `bytes`, closed, so that the program owns its bytes.
#[track_caller]
fn closed(pd: &Pd, bytes: &[u8]) -> OwnedMr<Vec<u8>> {
    let mut mr = pd.reg_owned(bytes.to_vec(), TARGET_ACCESS).unwrap();
    mr.close().unwrap();
    mr
}

#[track_caller]
fn assert_busy<T: std::fmt::Debug>(r: Result<T>) {
    match r {
        Err(e @ Error::Busy { .. }) => assert_eq!(e.errno(), libc::EBUSY),
        other => panic!("expected EBUSY, got {other:?}"),
    }
}

#[test]
fn into_inner_gives_back_the_vec_with_the_bytes_the_peer_wrote() {
    let (a, qa, b, _qb) = rc_pair();
    let mut v = Vec::with_capacity(200);
    v.resize(100, 0u8);
    let target = b.pd.reg_owned(v, TARGET_ACCESS).unwrap();
    assert!(target.is_open(), "registration gives the bytes to the device");
    let mut src = closed(&a.pd, b"zero copy");
    let lease = src.post_write(&qa, 1, .., target.remote(10)).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
    lease.complete(&wc).expect("the WRITE's completion");
    let back = target.into_inner().unwrap();
    assert_eq!((back.len(), back.capacity()), (100, 200), "the same Vec: length and capacity kept");
    assert_eq!(&back[10..19], b"zero copy");
    assert!(back[..10].iter().chain(&back[19..]).all(|&x| x == 0), "nothing else written");
}

#[test]
fn a_boxed_slice_is_filled_by_a_read_and_given_back() {
    let (a, qa, b, _qb) = rc_pair();
    let source = b.pd.reg_owned(b"remote bytes".to_vec().into_boxed_slice(), TARGET_ACCESS).unwrap();
    let mut into = a.pd.reg_owned(vec![0u8; 12].into_boxed_slice(), Access::LOCAL_WRITE).unwrap();
    let lease = into.post_read(&qa, 7, .., source.remote(0)).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.opcode(), wc.status()), (7, Some(WcOpcode::RdmaRead), WcStatus::Success));
    assert_eq!(lease.complete(&wc).unwrap().as_slice().unwrap(), b"remote bytes");
    let boxed: Box<[u8]> = into.into_inner().unwrap();
    assert_eq!(&*boxed, b"remote bytes");
    assert_eq!(&*source.into_inner().unwrap(), b"remote bytes");
}

#[test]
fn a_lease_ends_only_with_its_own_completion() {
    let (a, qa, b, qb) = rc_pair();
    let mut first = closed(&b.pd, &[0u8; 32]);
    let mut second = closed(&b.pd, &[0u8; 32]);
    let lease5 = first.post_recv(&qb, 5, 0..16).unwrap();
    let lease6 = second.post_recv(&qb, 6, ..).unwrap();
    // A SEND of b with the same wr_id as a receive of b: a send queue's completion.
    post_recv(&a, 100, 0, 64);
    let mut reply = closed(&b.pd, b"reply");
    let send6 = reply.post_send(&qb, 6, ..).unwrap();
    let sent6 = poll_one(&b.cq);
    assert_eq!((sent6.wr_id(), sent6.opcode()), (6, Some(WcOpcode::Send)));
    assert!(!lease6.is_completed_by(&sent6), "a send completion does not end a receive's lease");
    let lease6 = lease6.complete(&sent6).expect_err("the SEND's completion is not the receive's");
    send6.complete(&sent6).expect("the SEND's own completion");
    assert_eq!(poll_one(&a.cq).wr_id(), 100);

    let mut src = closed(&a.pd, b"for the receive");
    let send5 = src.post_send(&qa, 5, ..).unwrap();
    let sent5 = poll_one(&a.cq);
    assert_eq!(sent5.status(), WcStatus::Success);
    let lease5 = lease5.complete(&sent5).expect_err("same wr_id, another QP");
    send5.complete(&sent5).unwrap();
    let got5 = poll_one(&b.cq);
    assert_eq!((got5.wr_id(), got5.opcode(), got5.byte_len()), (5, Some(WcOpcode::Recv), Some(15)));
    let lease6 = lease6.complete(&got5).expect_err("same QP, another wr_id");
    let first = lease5.complete(&got5).expect("the receive's completion");
    assert!(!first.is_open() && !first.is_leased(), "the completion closed the region");
    assert_eq!(&first.as_slice().unwrap()[..15], b"for the receive");
    let mut more = closed(&a.pd, b"second");
    more.post_send(&qa, 8, ..).unwrap().complete(&poll_one(&a.cq)).unwrap();
    let got6 = poll_one(&b.cq);
    assert_eq!((got6.wr_id(), got6.byte_len()), (6, Some(6)));
    assert_eq!(&lease6.complete(&got6).unwrap().as_slice().unwrap()[..6], b"second");
}

#[test]
fn an_error_completion_ends_the_lease() {
    let (a, qa, _b, _qb) = rc_pair();
    let mut src = closed(&a.pd, b"nowhere");
    // No region has this rkey: the responder NAKs, the WRITE completes in error.
    let lease = src.post_write(&qa, 3, .., Remote::new(0x1000, 0xdead_be00)).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::RemAccessErr), "{wc:?}");
    let src = lease.complete(&wc).expect("an error completion ends the lease too");
    assert!(!src.is_leased());
    assert_eq!(src.as_slice().unwrap(), b"nowhere");
}

#[test]
fn a_flushed_receive_ends_its_lease() {
    let (_a, _qa, b, qb) = rc_pair();
    let mut buf = closed(&b.pd, &[7u8; 16]);
    let lease = buf.post_recv(&qb, 11, ..).unwrap();
    qb.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status()), (11, WcStatus::WrFlushErr), "{wc:?}");
    let buf = lease.complete(&wc).expect("WR_FLUSH_ERR ends the lease");
    assert_eq!(buf.as_slice().unwrap(), &[7u8; 16]);
}

#[test]
fn an_open_region_refuses_the_program_and_a_closed_one_the_device() {
    let (a, qa, b, _qb) = rc_pair();
    let mut target = b.pd.reg_owned(vec![0u8; 64], TARGET_ACCESS).unwrap();
    assert_busy(target.as_slice());
    assert_busy(target.as_mut_slice());
    target.close().unwrap();
    target.as_mut_slice().unwrap()[..4].copy_from_slice(b"mine");
    // A peer's WRITE into the closed region is refused as to a deregistered one.
    let mut src = closed(&a.pd, b"theirs");
    let lease = src.post_write(&qa, 1, .., target.remote(0)).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.status(), WcStatus::RemAccessErr, "{wc:?}");
    lease.complete(&wc).unwrap();
    assert_eq!(&target.as_slice().unwrap()[..6], b"mine\0\0", "the closed bytes are untouched");
}

#[test]
fn reopening_lets_the_peer_write_again() {
    let (a, qa, b, _qb) = rc_pair();
    let mut target = b.pd.reg_owned(vec![0u8; 64], TARGET_ACCESS).unwrap();
    target.close().unwrap();
    target.as_mut_slice().unwrap()[..4].copy_from_slice(b"mine");
    target.open();
    let mut src = closed(&a.pd, b"theirs");
    src.post_write(&qa, 1, .., target.remote(2)).unwrap().complete(&poll_one(&a.cq)).unwrap();
    target.close().unwrap();
    assert_eq!(&target.as_slice().unwrap()[..8], b"mitheirs");
}

#[test]
fn a_raw_sge_naming_a_closed_region_fails_without_touching_it() {
    // The lkey is a number safe code can put in any SGE: the closed region's keys refuse
    // it while the program holds the bytes.
    let (a, qa, b, _qb) = rc_pair();
    let mut buf = closed(&b.pd, &[1u8; 32]);
    let lkey = buf.lkey();
    let iova = buf.iova();
    let bytes = buf.as_mut_slice().unwrap();
    let sge = [Sge { addr: iova, length: 32, lkey }];
    b.qp.post_recv(&[RecvWr::new(21, &sge)]).unwrap();
    let mut src = closed(&a.pd, &[2u8; 32]);
    let lease = src.post_send(&qa, 22, ..).unwrap();
    let sent = poll_one(&a.cq);
    let got = poll_one(&b.cq);
    assert_eq!(got.wr_id(), 21);
    assert_ne!(got.status(), WcStatus::Success, "the receive into a closed region failed: {got:?}");
    assert_ne!(sent.status(), WcStatus::Success, "and so did the SEND: {sent:?}");
    lease.complete(&sent).unwrap();
    bytes[0] = 9;
    assert!(bytes[1..].iter().all(|&x| x == 1), "the device wrote nothing");
}

#[test]
fn a_forgotten_lease_keeps_the_bytes_from_the_program_until_its_completion() {
    let (a, qa, b, qb) = rc_pair();
    let mut buf = closed(&b.pd, &[0u8; 16]);
    // A lease has no destructor: forgetting it is dropping it, and safe either way.
    #[allow(clippy::forget_non_drop)]
    std::mem::forget(buf.post_recv(&qb, 31, ..).unwrap());
    assert!(buf.is_leased());
    assert_busy(buf.as_slice());
    assert_busy(buf.as_mut_slice());
    assert_busy(buf.close());
    assert_busy(buf.post_recv(&qb, 32, ..).map(drop));
    let mut src = closed(&a.pd, b"late");
    src.post_send(&qa, 1, ..).unwrap().complete(&poll_one(&a.cq)).unwrap();
    let wc = poll_one(&b.cq);
    assert!(!buf.end_lease(&Wc::default()), "a completion of another request (wr_id 0, QP 0)");
    assert!(buf.end_lease(&wc), "the receive's completion ends the forgotten lease");
    assert_eq!(&buf.as_slice().unwrap()[..4], b"late");
}

#[test]
fn into_inner_ends_a_forgotten_lease_and_its_request_fails() {
    let (a, qa, b, qb) = rc_pair();
    let mut buf = closed(&b.pd, &[5u8; 16]);
    drop(buf.post_recv(&qb, 41, ..).unwrap());
    let back = buf.into_inner().unwrap();
    assert_eq!(back, vec![5u8; 16]);
    let mut src = closed(&a.pd, b"too late");
    let send = src.post_send(&qa, 2, ..).unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!(wc.wr_id(), 41);
    assert_ne!(wc.status(), WcStatus::Success, "the receive names a deregistered region: {wc:?}");
    send.complete(&poll_one(&a.cq)).unwrap();
    assert_eq!(back, vec![5u8; 16], "the Vec given back was not written");
}

#[test]
fn reg_owned_refuses_mw_bind_on_demand_and_empty_buffers() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    for flags in [Access::MW_BIND, Access::ON_DEMAND] {
        match pd.reg_owned(vec![0u8; 8], Access::LOCAL_WRITE | flags) {
            Err(Error::Invalid { rule: Rule::OwnedMrAccess { flags: f }, .. }) => assert_eq!(f, flags.bits()),
            other => panic!("{flags:?}: {other:?}"),
        }
    }
    match pd.reg_owned(Vec::new(), Access::LOCAL_WRITE) {
        Err(e) => assert_eq!(e.errno(), libc::EINVAL, "{e:?}"),
        Ok(m) => panic!("an empty buffer was registered: {m:?}"),
    }
    match pd.reg_owned(vec![0u8; 8], Access::REMOTE_WRITE) {
        Err(Error::Invalid { rule: Rule::RemoteWriteNeedsLocalWrite, .. }) => {}
        other => panic!("REMOTE_WRITE without LOCAL_WRITE: {other:?}"),
    }
}

#[test]
fn a_range_outside_the_region_is_refused_before_posting() {
    let (_a, qa, b, _qb) = rc_pair();
    let mut src = closed(&b.pd, &[0u8; 16]);
    match src.post_send(&qa, 1, 8..17) {
        Err(Error::Invalid { rule: Rule::OutsideRegion { offset: 8, len: 9, region_len: 16 }, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(!src.is_open() && !src.is_leased(), "a refused post leaves the region closed");
    assert_eq!(src.as_slice().unwrap().len(), 16);
}

#[cfg(feature = "bytes")]
#[test]
fn a_bytes_mut_is_given_back_with_the_bytes_the_peer_wrote() {
    let (a, qa, b, _qb) = rc_pair();
    let target = b.pd.reg_owned(bytes::BytesMut::zeroed(32), TARGET_ACCESS).unwrap();
    let mut src = closed(&a.pd, b"bytes");
    src.post_write(&qa, 1, .., target.remote(0)).unwrap().complete(&poll_one(&a.cq)).unwrap();
    let back: bytes::BytesMut = target.into_inner().unwrap();
    assert_eq!(&back[..5], b"bytes");
}

#[test]
fn the_zero_copy_file_example_copies_a_file_byte_for_byte() {
    // Not a multiple of a staging Vec nor of a peer's Vec: the last WRITE of each is short.
    let len = 3 * zero_copy_file::TARGET + zero_copy_file::STAGE / 2 + 5;
    let path = zero_copy_file::generate(len).unwrap();
    let copied = zero_copy_file::copy_file(&path);
    let _ = std::fs::remove_file(&path);
    let copied = copied.unwrap();
    assert_eq!(copied.bytes, len);
    assert_eq!(copied.targets, 4);
    let per_target = zero_copy_file::TARGET / zero_copy_file::STAGE;
    assert_eq!(copied.writes, 3 * per_target + 1);
}
