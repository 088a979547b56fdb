//! ibv_alloc_mw(3), ibv_bind_mw(3), BIND_MW / LOCAL_INV / SEND_WITH_INV work requests:
//! the steps of pyverbs' MWTest, asserted on completions.
mod common;
use common::*;
use rverbs::*;

/// A pair whose memory regions allow binding windows but no remote access themselves.
fn mw_pair() -> (Side, Side, Mr, Mr) {
    let (a, b) = pair(QpType::Rc);
    let ma = a.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    let mb = b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    (a, b, ma, mb)
}

fn write_through(a: &Side, rkey: u32, addr: u64) -> WcStatus {
    a.mr.write(0, b"window").unwrap();
    let sge = [a.mr.sge(0, 6).unwrap()];
    a.qp.post_send(&[SendWr::write(99, &sge, addr, rkey).signaled()]).unwrap();
    poll_one(&a.cq).status()
}

fn bind_info(mr: &Mr, access: Access) -> MwBind<'_> {
    MwBind { mr: Some(mr), addr: mr.iova(), length: 4096, access }
}

#[test]
fn type1_window_gives_remote_access_the_region_lacks() {
    // Without a window the region's own key refuses remote writes.
    let (a, _b, _ma, mb) = mw_pair();
    assert_eq!(write_through(&a, mb.rkey(), mb.iova()), WcStatus::RemAccessErr);
    // With a bound type 1 window, the window's key allows them.
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 1).unwrap();
    let old = mw.rkey();
    let info = bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    let new = b.qp.bind_mw(&mw, &info, 7, SendFlags::SIGNALED).unwrap();
    assert_eq!(new, inc_rkey(old));
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (7, WcStatus::Success, Some(WcOpcode::BindMw)));
    assert_eq!(mw.rkey(), new);
    assert_eq!(write_through(&a, new, mb.iova()), WcStatus::Success);
    assert_eq!(write_through(&a, old, mb.iova()), WcStatus::RemAccessErr, "the old key is stale");
}

#[test]
fn type1_bind_then_write_then_zero_length_rebind_invalidates() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 1).unwrap();
    let rkey = b.qp.bind_mw(&mw, &bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE), 1, SendFlags::SIGNALED).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    assert_eq!(write_through(&a, rkey, mb.iova() + 100), WcStatus::Success);
    let mut got = [0u8; 6];
    mb.read(100, &mut got).unwrap();
    assert_eq!(&got, b"window");
    assert_eq!(mb.dereg().unwrap_err().errno(), libc::EINVAL, "a bound region cannot be deregistered");
    // Unbind: zero length, no region.
    let unbind = MwBind { mr: None, addr: 0, length: 0, access: Access::empty() };
    let rkey2 = b.qp.bind_mw(&mw, &unbind, 2, SendFlags::SIGNALED).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    assert_eq!(write_through(&a, rkey2, mb.iova()), WcStatus::RemAccessErr);
    mb.dereg().unwrap();
}

#[test]
fn stale_window_key_is_refused() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 1).unwrap();
    let first = b.qp.bind_mw(&mw, &bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE), 1, SendFlags::empty()).unwrap();
    let second = b.qp.bind_mw(&mw, &bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE), 2, SendFlags::empty()).unwrap();
    assert_ne!(first, second);
    assert_eq!(write_through(&a, first, mb.iova()), WcStatus::RemAccessErr);
}

#[test]
fn type2_bind_by_work_request_and_local_invalidate() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    let wr = SendWr::bind_mw(5, &mw, key, bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE)).signaled();
    b.qp.post_send(&[wr]).unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, Some(WcOpcode::BindMw), Some(0)));
    assert_eq!(mw.rkey(), key);
    assert_eq!(write_through(&a, key, mb.iova()), WcStatus::Success);
    // A bound type 2 window cannot be bound again until invalidated.
    b.qp.post_send(&[SendWr::bind_mw(6, &mw, inc_rkey(key), bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE))]).unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::MwBindErr, vendor_err::MW_BIND));
    assert_eq!(b.qp.state(), QpState::Err);
}

#[test]
fn local_inv_frees_a_type2_window() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    b.qp.post_send(&[SendWr::bind_mw(5, &mw, key, bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE))]).unwrap();
    b.qp.post_send(&[SendWr::local_inv(6, key).signaled()]).unwrap();
    let wc = poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (6, WcStatus::Success, Some(WcOpcode::LocalInv)));
    assert_eq!(write_through(&a, key, mb.iova()), WcStatus::RemAccessErr);
}

#[test]
fn local_inv_of_a_region_key_is_loc_qp_op_err() {
    let (_a, b, _ma, mb) = mw_pair();
    b.qp.post_send(&[SendWr::local_inv(1, mb.rkey())]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::LocQpOpErr);
}

#[test]
fn send_with_inv_invalidates_at_the_receiver_and_reports_the_key() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    b.qp.post_send(&[SendWr::bind_mw(5, &mw, key, bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE))]).unwrap();
    post_recv(&b, 8, 0, 16);
    a.qp.post_send(&[SendWr::send(1, &[]).with_inv(key).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let r = poll_one(&b.cq);
    assert_eq!(r.status(), WcStatus::Success);
    assert!(r.wc_flags().unwrap().contains(WcFlags::WITH_INV));
    assert_eq!(r.invalidated_rkey(), Some(key));
    assert_eq!(r.imm_data(), None);
    assert_eq!(write_through(&a, key, mb.iova()), WcStatus::RemAccessErr);
}

#[test]
fn send_with_inv_of_a_bad_key_fails_the_receiver_only() {
    let (a, b, _ma, _mb) = mw_pair();
    post_recv(&b, 8, 0, 16);
    a.qp.post_send(&[SendWr::send(1, &[]).with_inv(0x1234_5600).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "rxe sends no NAK");
    let r = poll_one(&b.cq);
    assert_eq!((r.status(), r.vendor_err()), (WcStatus::RemInvReqErr, vendor_err::REMOTE_INVALIDATE));
    assert_eq!(b.qp.state(), QpState::Err);
}

#[test]
fn receiver_reconnected_after_a_failed_send_with_inv_takes_requests_again() {
    // The requester stays in RTS (no NAK); the responder, in ERR, is reset and connected
    // again to the same requester, which never left RTS: its next SEND is delivered.
    let (a, b, _ma, _mb) = mw_pair();
    post_recv(&b, 8, 0, 16);
    a.qp.post_send(&[SendWr::send(1, &[]).with_inv(0x1234_5600).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).status(), WcStatus::RemInvReqErr);
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Err));
    b.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    b.qp.connect(&remote(&b.ctx, a.qp.qp_num(), &PATH, ALL_ACCESS)).unwrap();
    post_recv(&b, 9, 0, 16);
    a.mr.write(0, b"again").unwrap();
    let sge = [a.mr.sge(0, 5).unwrap()];
    a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.wr_id(), s.status()), (2, WcStatus::Success));
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status(), r.byte_len()), (9, WcStatus::Success, Some(5)));
}

#[test]
fn dealloc_ends_remote_access() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    b.qp.post_send(&[SendWr::bind_mw(5, &mw, key, bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE))]).unwrap();
    mw.dealloc().unwrap();
    assert_eq!(write_through(&a, key, mb.iova()), WcStatus::RemAccessErr);
    mb.dereg().unwrap();
}

#[test]
fn window_rights_limit_remote_access() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    // pyverbs test_qp_ex_rc_bind_mw: a window without REMOTE_WRITE.
    b.qp.post_send(&[SendWr::bind_mw(5, &mw, key, bind_info(&mb, Access::LOCAL_WRITE))]).unwrap();
    assert_eq!(write_through(&a, key, mb.iova()), WcStatus::RemAccessErr);
}

#[test]
fn bind_checks_and_type_three() {
    let (_a, b, ma, mb) = mw_pair();
    assert_eq!(Mw::new(&b.pd, 3).unwrap_err().errno(), libc::EINVAL);
    let t2 = Mw::new(&b.pd, 2).unwrap();
    let t1 = Mw::new(&b.pd, 1).unwrap();
    let info = bind_info(&mb, Access::REMOTE_WRITE);
    assert_eq!(b.qp.bind_mw(&t2, &info, 1, SendFlags::empty()).unwrap_err().errno(), libc::EINVAL);
    let other = MwBind { mr: Some(&ma), ..info };
    assert_eq!(b.qp.bind_mw(&t1, &other, 1, SendFlags::empty()).unwrap_err().errno(), libc::EPERM);
    // A region without MW_BIND fails at execution with MW_BIND_ERR.
    let plain = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let bad = MwBind { mr: Some(&plain), addr: plain.iova(), length: 64, access: Access::REMOTE_READ };
    b.qp.bind_mw(&t1, &bad, 1, SendFlags::empty()).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::MwBindErr);
}

/// ibv_dereg_mr(3) racing ibv_bind_mw(3) on the same region, from two threads started
/// together (bounded loops, no sleeps): a deregistration fails (EINVAL) while the
/// window is bound and succeeds only while it is not; a bind after it fails
/// (MW_BIND_ERR, as the bind of a region that is not valid), and every bind that
/// succeeded did so while the region was registered. (Before the lock order of
/// `MrInner::windows` the two could deadlock.)
#[test]
fn type1_bind_racing_dereg_of_its_region() {
    let unbind = MwBind { mr: None, addr: 0, length: 0, access: Access::empty() };
    for _ in 0..50 {
        let (_a, b, _ma, mb) = mw_pair();
        let mw = Mw::new(&b.pd, 1).unwrap();
        let info = bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
        // Bound to start with: the first deregistrations meet a bound window.
        b.qp.bind_mw(&mw, &info, 0, SendFlags::SIGNALED).unwrap();
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
        let start = std::sync::Barrier::new(2);
        let (bind_failed, dereg_ok) = std::thread::scope(|s| {
            let binder = s.spawn(|| {
                start.wait();
                for i in 0..100 {
                    b.qp.bind_mw(&mw, &unbind, 1, SendFlags::SIGNALED).unwrap();
                    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success, "unbinding never fails");
                    b.qp.bind_mw(&mw, &info, 2, SendFlags::SIGNALED).unwrap();
                    match poll_one(&b.cq).status() {
                        // Bound: the region stays registered at least until the next unbind.
                        WcStatus::Success => assert!(mb.is_valid(), "region deregistered while a window was bound (step {i})"),
                        // The only reason this bind fails: the region is gone, for good
                        // (and the QP is in ERR: nothing more to bind).
                        WcStatus::MwBindErr => {
                            assert!(!mb.is_valid(), "bind refused while the region was registered (step {i})");
                            return true;
                        }
                        other => panic!("bind completed {other:?}"),
                    }
                }
                b.qp.bind_mw(&mw, &unbind, 3, SendFlags::SIGNALED).unwrap();
                assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
                false
            });
            let dereg = s.spawn(|| {
                start.wait();
                for _ in 0..100 {
                    match mb.dereg() {
                        Ok(()) => return true,
                        Err(e) => assert_eq!(e.errno(), libc::EINVAL, "dereg failed otherwise: {e:?}"),
                    }
                }
                false
            });
            (binder.join().unwrap(), dereg.join().unwrap())
        });
        // The window is unbound now: a region still registered deregisters.
        if !dereg_ok {
            mb.dereg().unwrap();
        }
        assert!(!mb.is_valid());
        if !bind_failed {
            // The QP is still in RTS: a bind to the deregistered region fails.
            b.qp.bind_mw(&mw, &info, 4, SendFlags::SIGNALED).unwrap();
            assert_eq!(poll_one(&b.cq).status(), WcStatus::MwBindErr);
        }
    }
}

/// WRITEs through a type 2 window's key, the next ones remembered by the express lane
/// (docs/shared-state.md, "Remembered keys"), then LOCAL_INV by the window's owner: the
/// next WRITE through the key is REM_ACCESS_ERR (ibv_post_send(3), IBV_WR_LOCAL_INV),
/// the region untouched.
#[test]
fn remembered_type2_window_key_invalidated_is_refused() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    b.qp.post_send(&[SendWr::bind_mw(5, &mw, key, bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE))]).unwrap();
    for _ in 0..4 {
        assert_eq!(write_through(&a, key, mb.iova() + 100), WcStatus::Success);
    }
    mb.write(100, &[0u8; 6]).unwrap();
    b.qp.post_send(&[SendWr::local_inv(6, key).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    assert_eq!(write_through(&a, key, mb.iova() + 100), WcStatus::RemAccessErr);
    let mut got = [1u8; 6];
    mb.read(100, &mut got).unwrap();
    assert_eq!(got, [0u8; 6], "the invalidated window wrote nothing");
}

/// ibv_bind_mw(3), type 2: a window invalidated and bound again under the same key to a
/// narrower range, after WRITEs the express lane remembered, takes WRITEs in the new
/// range only: inside the old range but outside the new one is REM_ACCESS_ERR.
#[test]
fn remembered_type2_window_bound_again_with_the_same_key_takes_its_new_range() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    let rights = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    b.qp.post_send(&[SendWr::bind_mw(5, &mw, key, bind_info(&mb, rights))]).unwrap();
    for _ in 0..4 {
        assert_eq!(write_through(&a, key, mb.iova() + 100), WcStatus::Success);
    }
    b.qp.post_send(&[SendWr::local_inv(6, key)]).unwrap();
    let narrow = MwBind { mr: Some(&mb), addr: mb.iova() + 1024, length: 512, access: rights };
    b.qp.post_send(&[SendWr::bind_mw(7, &mw, key, narrow).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    assert_eq!(mw.rkey(), key, "bound again under the same key");
    mb.write(0, &[0u8; 4096]).unwrap();
    assert_eq!(write_through(&a, key, mb.iova() + 1024), WcStatus::Success);
    let mut got = [0u8; 6];
    mb.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"window");
    assert_eq!(write_through(&a, key, mb.iova() + 100), WcStatus::RemAccessErr, "outside the new range");
    mb.read(100, &mut got).unwrap();
    assert_eq!(got, [0u8; 6]);
}

/// ibv_bind_mw(3): a type 1 window bound again gets a new key and the old one stops
/// matching, also while the express lane remembers the new one: after WRITEs through
/// the new key, a WRITE through the old key is REM_ACCESS_ERR.
#[test]
fn remembered_type1_window_rebound_refuses_the_old_key() {
    let (a, b, _ma, mb) = mw_pair();
    let mw = Mw::new(&b.pd, 1).unwrap();
    let info = bind_info(&mb, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    let old = b.qp.bind_mw(&mw, &info, 1, SendFlags::SIGNALED).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    for _ in 0..2 {
        assert_eq!(write_through(&a, old, mb.iova()), WcStatus::Success);
    }
    let new = b.qp.bind_mw(&mw, &info, 2, SendFlags::SIGNALED).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    assert_eq!(new >> 8, old >> 8, "the same key slot");
    for _ in 0..2 {
        assert_eq!(write_through(&a, new, mb.iova()), WcStatus::Success);
    }
    mb.write(0, &[0u8; 6]).unwrap();
    assert_eq!(write_through(&a, old, mb.iova()), WcStatus::RemAccessErr, "the old key is stale");
    let mut got = [1u8; 6];
    mb.read(0, &mut got).unwrap();
    assert_eq!(got, [0u8; 6]);
}

/// Across hosts, a SEND_WITH_INV right behind a WRITE of several packets through the
/// window it invalidates, posted together so that the responder's network thread takes
/// them in one run: the WRITE's later packets are placed through one pin of their range
/// (docs/network.md, "Trains (UDP GSO/GRO)"), and the invalidation, which waits for
/// the window's accesses to end (ibv_post_send(3): the receive's completion means the key
/// reaches nothing any more), must not wait for a pin the invalidating thread holds
/// itself. It did, for the 2 s bound, past the requester's retries (timeout 15: eight
/// tries of 134 ms), which then ended in RETRY_EXC_ERR.
#[test]
fn send_with_inv_right_behind_a_write_through_its_window_across_hosts() {
    let (da, db) = (device_on([127, 0, 16, 1], "mw-inv", None), device_on([127, 0, 16, 2], "mw-inv", None));
    let (a, b) = (side_on(da.open().unwrap(), QpType::Rc, 64, CAP), side_on(db.open().unwrap(), QpType::Rc, 64, CAP));
    connect_across(&a.qp, &b.ctx, b.qp.qp_num(), 15);
    connect_across(&b.qp, &a.ctx, a.qp.qp_num(), 15);
    invalidate_right_behind_writes(&a, &b);
}

/// The same on this host, where the requester's thread places the WRITE and performs
/// the invalidation.
#[test]
fn send_with_inv_right_behind_a_write_through_its_window() {
    let (a, b) = pair(QpType::Rc);
    invalidate_right_behind_writes(&a, &b);
}

/// Rounds of a WRITE of 3000 bytes through a type 2 window of `b` and, in the same post,
/// a SEND_WITH_INV of the window: both complete, the receive reports the key, the bytes
/// landed. Each round binds the window again under the next key.
fn invalidate_right_behind_writes(a: &Side, b: &Side) {
    const ROUNDS: u32 = 24;
    const LEN: usize = 3000;
    let mb = b.pd.alloc_mr(8192, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    let mw = Mw::new(&b.pd, 2).unwrap();
    let mut key = mw.rkey();
    for round in 0..ROUNDS {
        key = inc_rkey(key);
        let bind = MwBind { mr: Some(&mb), addr: mb.iova(), length: 8192, access: Access::REMOTE_WRITE | Access::LOCAL_WRITE };
        b.qp.post_send(&[SendWr::bind_mw(1, &mw, key, bind).signaled()]).unwrap();
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success, "round {round}: the bind");
        post_recv(b, 2, 0, 16);
        let data: Vec<u8> = (0..LEN).map(|i| (i as u32 * 7 + round) as u8).collect();
        a.mr.write(0, &data).unwrap();
        let at = 1000 + round as u64 * 8;
        let sge = [a.mr.sge(0, LEN as u32).unwrap()];
        a.qp.post_send(&[SendWr::write(3, &sge, mb.iova() + at, key), SendWr::send(4, &[]).with_inv(key).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (4, WcStatus::Success), "round {round}: the SEND_WITH_INV");
        let r = poll_one(&b.cq);
        assert_eq!((r.wr_id(), r.status(), r.invalidated_rkey()), (2, WcStatus::Success, Some(key)), "round {round}: the receive");
        let mut got = vec![0u8; LEN];
        mb.read(at as usize, &mut got).unwrap();
        assert!(got == data, "round {round}: the WRITE's bytes");
    }
    assert_empty(&a.cq);
    assert_empty(&b.cq);
}
