//! Memory windows: remote access to part of a region under a key the owner can
//! revoke without deregistering the region.
//!
//! Peer b registers a region with LOCAL_WRITE and MW_BIND only, so the region's own
//! rkey grants no remote access. b then opens windows on it:
//!
//! - type 1 (ibv_alloc_mw(3) with IBV_MW_TYPE_1): bound with the ibv_bind_mw(3) verb,
//!   which returns the new rkey (its low byte advances with every bind). A type 1
//!   window is never invalidated by a work request; binding it again (here with zero
//!   length, i.e. unbinding) retires the old key;
//! - type 2 (IBV_MW_TYPE_2): bound by a BIND_MW work request carrying a key the
//!   application picks (`ibv_inc_rkey` of the current one), usable only through the
//!   QP that bound it, and invalidated by LOCAL_INV (posted by the owner) or by a
//!   SEND_WITH_INV from the peer; once invalid it can be bound again.
//!
//! Each time the example checks that a's RDMA WRITE through the window succeeds and
//! lands in b's region, and that after the unbind/invalidation the same access fails
//! with REM_ACCESS_ERR. That error is fatal to an RC connection (both QPs go to ERR),
//! so the example resets both QPs and connects them again after each failing access.
//!
//! Rules followed: ibv_alloc_mw(3), ibv_bind_mw(3) (the region needs MW_BIND; remote
//! write through a window needs LOCAL_WRITE on the region; the returned key is valid
//! once the bind completes), ibv_post_send(3) (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV,
//! IBV_WR_SEND_WITH_INV), ibv_poll_cq(3) (IBV_WC_WITH_INV and `invalidated_rkey`),
//! ibv_modify_qp(3) (any state → RESET).
//!
//! Run: `cargo run -p rverbs --example memory_window`

mod common;

use common::{
    check_bytes, check_eq, connect, connected_pair, ensure, expect_ok, pattern, poll_one, reset, Endpoint, Result,
};
use rverbs::{inc_rkey, Access, Mr, Mw, MwBind, QpType, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus};

const WINDOW_LEN: u64 = 4096;

fn main() -> Result {
    let (a, b) = connected_pair(QpType::Rc)?;
    // b's region: windows may be bound to it, but its own key allows no remote access.
    let region = b.pd.alloc_mr(2 * WINDOW_LEN as usize, Access::LOCAL_WRITE | Access::MW_BIND)?;
    let status = remote_write(&a, region.rkey(), region.iova(), 1)?;
    check_eq("WRITE with the region's own rkey", status, WcStatus::RemAccessErr)?;
    println!("WRITE with the region's own rkey {:#x}: {status:?} (the region has no REMOTE_WRITE)", region.rkey());
    reconnect(&a, &b)?;

    type1(&a, &b, &region)?;
    type2(&a, &b, &region)?;
    println!("memory_window: all checks passed");
    Ok(())
}

/// Bind, write through, unbind, write fails.
fn type1(a: &Endpoint, b: &Endpoint, region: &Mr) -> Result {
    let mw = Mw::new(&b.pd, 1)?;
    let old = mw.rkey();
    let bind = MwBind { mr: Some(region), addr: region.iova(), length: WINDOW_LEN, access: Access::REMOTE_WRITE };
    let key = b.qp.bind_mw(&mw, &bind, 10, SendFlags::SIGNALED)?;
    expect_ok(&b.cq, 10, WcOpcode::BindMw)?;
    check_eq("type 1 key after bind", key, inc_rkey(old))?;
    check_eq("window rkey", mw.rkey(), key)?;
    println!("type 1 window bound over [0, {WINDOW_LEN}) of the region: rkey {old:#x} -> {key:#x}");

    write_through(a, region, key, 100, 11)?;

    // A zero-length bind without a region unbinds: the window gets yet another key and
    // the one handed to a is dead.
    let unbind = MwBind { mr: None, addr: 0, length: 0, access: Access::empty() };
    let unbound = b.qp.bind_mw(&mw, &unbind, 12, SendFlags::SIGNALED)?;
    expect_ok(&b.cq, 12, WcOpcode::BindMw)?;
    println!("type 1 window unbound: rkey now {unbound:#x}");
    expect_refused(a, b, region, key, 100, 13)
}

/// Bind by work request, write through, LOCAL_INV, write fails; bind again, write
/// through, SEND_WITH_INV from a, write fails.
fn type2(a: &Endpoint, b: &Endpoint, region: &Mr) -> Result {
    let mw = Mw::new(&b.pd, 2)?;
    let second_half = region.iova() + WINDOW_LEN;
    let bind = MwBind { mr: Some(region), addr: second_half, length: WINDOW_LEN, access: Access::REMOTE_WRITE };

    let key = inc_rkey(mw.rkey());
    b.qp.post_send(&[SendWr::bind_mw(20, &mw, key, bind).signaled()])?;
    expect_ok(&b.cq, 20, WcOpcode::BindMw)?;
    println!("type 2 window bound over [{WINDOW_LEN}, {}) by BIND_MW: rkey {key:#x}", 2 * WINDOW_LEN);
    write_through(a, region, key, WINDOW_LEN as usize + 8, 21)?;

    // The owner revokes the key with LOCAL_INV.
    b.qp.post_send(&[SendWr::local_inv(22, key).signaled()])?;
    expect_ok(&b.cq, 22, WcOpcode::LocalInv)?;
    println!("LOCAL_INV of {key:#x}: ok");
    expect_refused(a, b, region, key, WINDOW_LEN as usize + 8, 23)?;

    // Invalidated windows are free to be bound again, with the next key.
    let key = inc_rkey(key);
    b.qp.post_send(&[SendWr::bind_mw(24, &mw, key, bind).signaled()])?;
    expect_ok(&b.cq, 24, WcOpcode::BindMw)?;
    println!("type 2 window bound again: rkey {key:#x}");
    write_through(a, region, key, WINDOW_LEN as usize + 64, 25)?;

    // The peer gives the key back with SEND_WITH_INV: b's receive completion reports
    // which key was invalidated.
    b.post_recv(26, 0, 64)?;
    a.qp.post_send(&[SendWr::send(26, &[]).with_inv(key).signaled()])?;
    expect_ok(&a.cq, 26, WcOpcode::Send)?;
    let r = expect_ok(&b.cq, 26, WcOpcode::Recv)?;
    let flags = r.wc_flags().unwrap_or_default();
    ensure(flags.contains(WcFlags::WITH_INV), || format!("WITH_INV missing: {flags:?}"))?;
    check_eq("invalidated_rkey", r.invalidated_rkey(), Some(key))?;
    println!("SEND_WITH_INV from a: b's receive reports invalidated rkey {key:#x}");
    expect_refused(a, b, region, key, WINDOW_LEN as usize + 64, 27)
}

/// a's RDMA WRITE of 16 bytes to b's `addr` under `rkey`; returns its status.
fn remote_write(a: &Endpoint, rkey: u32, addr: u64, wr_id: u64) -> Result<WcStatus> {
    let sge = [a.mr.sge(0, 16)?];
    a.qp.post_send(&[SendWr::write(wr_id, &sge, addr, rkey).signaled()])?;
    let wc = poll_one(&a.cq)?;
    check_eq("wr_id", wc.wr_id(), wr_id)?;
    Ok(wc.status())
}

/// A WRITE through the window at `offset` of the region succeeds and lands there.
fn write_through(a: &Endpoint, region: &Mr, rkey: u32, offset: usize, wr_id: u64) -> Result {
    let data = pattern(16, wr_id as u8);
    a.mr.write(0, &data)?;
    let status = remote_write(a, rkey, region.iova() + offset as u64, wr_id)?;
    check_eq("WRITE through the window", status, WcStatus::Success)?;
    check_bytes("bytes written through the window", region, offset, &data)?;
    println!("  WRITE through rkey {rkey:#x} at offset {offset}: ok, bytes in place");
    Ok(())
}

/// A WRITE with the dead key, at `offset` where it used to work, fails with
/// REM_ACCESS_ERR; the pair is then reconnected.
fn expect_refused(a: &Endpoint, b: &Endpoint, region: &Mr, rkey: u32, offset: usize, wr_id: u64) -> Result {
    let status = remote_write(a, rkey, region.iova() + offset as u64, wr_id)?;
    check_eq("WRITE with a revoked window key", status, WcStatus::RemAccessErr)?;
    println!("  WRITE through revoked rkey {rkey:#x}: {status:?} (\"{status}\")");
    reconnect(a, b)
}

/// REM_ACCESS_ERR put both QPs in ERR: RESET them and bring them up again.
fn reconnect(a: &Endpoint, b: &Endpoint) -> Result {
    reset(&a.qp)?;
    reset(&b.qp)?;
    connect(a, b)
}
