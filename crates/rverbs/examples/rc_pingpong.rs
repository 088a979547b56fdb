//! RC (reliable connected) queue pairs: every operation of the transport, checked byte
//! for byte.
//!
//! Two peers, each with its own context, connect RC QPs to each other (ibv_modify_qp(3):
//! RESET → INIT → RTR → RTS) and then run:
//!
//! - SEND/RECV ping-pong for several sizes, from one byte to several MTUs: the
//!   receiver must have a receive posted (ibv_post_recv(3)); its completion reports
//!   the bytes received (`byte_len`);
//! - RDMA WRITE: places data in the peer's memory under its rkey; the peer sees no
//!   completion;
//! - RDMA WRITE_WITH_IMM: as WRITE, but consumes a receive at the peer, whose
//!   completion is RECV_RDMA_WITH_IMM and carries the immediate data;
//! - RDMA READ: fetches the peer's memory into local memory;
//! - atomic fetch-and-add and compare-and-swap on an 8-byte aligned word: the
//!   original value lands in the local buffer.
//!
//! Rules followed: ibv_post_send(3) (a send completion appears only for SIGNALED
//! requests; atomics move exactly 8 bytes at an 8-byte aligned address),
//! ibv_post_recv(3), ibv_poll_cq(3) (fields other than `wr_id`, `status`, `qp_num` and
//! `vendor_err` are valid only on success).
//!
//! Run: `cargo run -p rverbs --example rc_pingpong`

mod common;

use common::{check_bytes, check_eq, connected_pair, expect_empty, expect_ok, pattern, Endpoint, Result};
use rverbs::{QpType, SendWr, WcFlags, WcOpcode};

/// Message sizes of the ping-pong: tiny, one packet, exactly one MTU (1024), several.
const SIZES: [usize; 5] = [1, 64, 1024, 4000, 20_000];

/// Where things live in each peer's region. Ping-pong buffers are at the start.
const PONG_OFF: usize = 24 * 1024;
const RDMA_OFF: usize = 48 * 1024;
const ATOMIC_OFF: usize = 60 * 1024; // 8-byte aligned, as atomics require
const RESULT_OFF: usize = 61 * 1024;

pub fn main() -> Result {
    let (a, b) = connected_pair(QpType::Rc)?;
    println!("RC QPs connected: a = {:#x}, b = {:#x}", a.qp.qp_num(), b.qp.qp_num());

    for (i, &len) in SIZES.iter().enumerate() {
        ping_pong(&a, &b, len, i as u8)?;
    }
    rdma_write(&a, &b)?;
    rdma_write_with_imm(&a, &b)?;
    rdma_read(&a, &b)?;
    atomics(&a, &b)?;
    println!("rc_pingpong: all checks passed");
    Ok(())
}

/// Sends `len` bytes from `from` to `to`: the receive is posted before the send, as
/// the responder needs one (otherwise RC answers RNR NAK and the sender retries).
fn send(from: &Endpoint, to: &Endpoint, offset: usize, len: usize, wr_id: u64) -> Result {
    to.post_recv(wr_id, offset, len as u32)?;
    let sge = [from.mr.sge(offset, len as u32)?];
    from.qp.post_send(&[SendWr::send(wr_id, &sge).signaled()])?;

    let sent = expect_ok(&from.cq, wr_id, WcOpcode::Send)?;
    check_eq("send byte_len", sent.byte_len(), Some(len as u32))?;
    let recv = expect_ok(&to.cq, wr_id, WcOpcode::Recv)?;
    check_eq("recv byte_len", recv.byte_len(), Some(len as u32))?;
    check_eq("recv qp_num", recv.qp_num(), to.qp.qp_num())?;
    check_eq("recv wc_flags", recv.wc_flags(), Some(WcFlags::empty()))?;
    Ok(())
}

/// a → b (ping), then b answers with different bytes (pong).
fn ping_pong(a: &Endpoint, b: &Endpoint, len: usize, round: u8) -> Result {
    let ping = pattern(len, round);
    a.mr.write(0, &ping)?;
    send(a, b, 0, len, 2 * u64::from(round))?;
    check_bytes("ping at b", &b.mr, 0, &ping)?;

    let pong = pattern(len, round.wrapping_add(100));
    b.mr.write(PONG_OFF, &pong)?;
    send(b, a, PONG_OFF, len, 2 * u64::from(round) + 1)?;
    check_bytes("pong at a", &a.mr, PONG_OFF, &pong)?;
    println!("SEND/RECV ping-pong of {len:>5} bytes: ok");
    Ok(())
}

/// One-sided WRITE: b posts nothing and sees no completion.
fn rdma_write(a: &Endpoint, b: &Endpoint) -> Result {
    let data = pattern(10_000, 7);
    a.mr.write(RDMA_OFF, &data)?;
    let sge = [a.mr.sge(RDMA_OFF, data.len() as u32)?];
    let remote = b.mr.iova() + RDMA_OFF as u64;
    a.qp.post_send(&[SendWr::write(100, &sge, remote, b.mr.rkey()).signaled()])?;

    let wc = expect_ok(&a.cq, 100, WcOpcode::RdmaWrite)?;
    check_eq("write byte_len", wc.byte_len(), Some(data.len() as u32))?;
    expect_empty(&b.cq, "an RDMA WRITE completes only at the requester")?;
    check_bytes("written data at b", &b.mr, RDMA_OFF, &data)?;
    println!("RDMA WRITE of {} bytes to {remote:#x} (rkey {:#x}): ok", data.len(), b.mr.rkey());
    Ok(())
}

/// WRITE_WITH_IMM: the data goes where the requester says, the receive only reports
/// the immediate and the length (its scatter list may be empty).
fn rdma_write_with_imm(a: &Endpoint, b: &Endpoint) -> Result {
    const IMM: u32 = 0x1234_abcd;
    let data = pattern(300, 9);
    a.mr.write(RDMA_OFF, &data)?;
    b.post_recv(101, 0, 0)?;
    let sge = [a.mr.sge(RDMA_OFF, data.len() as u32)?];
    let remote = b.mr.iova() + RDMA_OFF as u64 + 512;
    a.qp.post_send(&[SendWr::write(101, &sge, remote, b.mr.rkey()).with_imm(IMM).signaled()])?;

    expect_ok(&a.cq, 101, WcOpcode::RdmaWrite)?;
    let r = expect_ok(&b.cq, 101, WcOpcode::RecvRdmaWithImm)?;
    check_eq("imm_data", r.imm_data(), Some(IMM))?;
    check_eq("byte_len", r.byte_len(), Some(data.len() as u32))?;
    check_bytes("written data at b", &b.mr, RDMA_OFF + 512, &data)?;
    println!("RDMA WRITE_WITH_IMM of {} bytes, imm {IMM:#x}: ok", data.len());
    Ok(())
}

/// READ: b's bytes land in a's region; b sees nothing.
fn rdma_read(a: &Endpoint, b: &Endpoint) -> Result {
    let data = pattern(5000, 21);
    b.mr.write(RDMA_OFF, &data)?;
    let sge = [a.mr.sge(RDMA_OFF, data.len() as u32)?];
    let remote = b.mr.iova() + RDMA_OFF as u64;
    a.qp.post_send(&[SendWr::read(102, &sge, remote, b.mr.rkey()).signaled()])?;

    let wc = expect_ok(&a.cq, 102, WcOpcode::RdmaRead)?;
    check_eq("read byte_len", wc.byte_len(), Some(data.len() as u32))?;
    expect_empty(&b.cq, "an RDMA READ completes only at the requester")?;
    check_bytes("read data at a", &a.mr, RDMA_OFF, &data)?;
    println!("RDMA READ of {} bytes: ok", data.len());
    Ok(())
}

/// Fetch-and-add, then a compare-and-swap that matches and one that does not. Every
/// atomic returns the word's value before the operation.
fn atomics(a: &Endpoint, b: &Endpoint) -> Result {
    let result = [a.mr.sge(RESULT_OFF, 8)?];
    let word = b.mr.iova() + ATOMIC_OFF as u64;
    let rkey = b.mr.rkey();
    b.mr.write(ATOMIC_OFF, &100u64.to_ne_bytes())?;

    a.qp.post_send(&[SendWr::fetch_add(200, &result, word, rkey, 23).signaled()])?;
    let wc = expect_ok(&a.cq, 200, WcOpcode::FetchAdd)?;
    check_eq("fetch-add byte_len", wc.byte_len(), Some(8))?;
    check_eq("fetch-add original", a.mr.read_u64(RESULT_OFF)?, 100)?;
    check_eq("word after fetch-add", b.mr.read_u64(ATOMIC_OFF)?, 123)?;
    println!("atomic fetch-and-add 100 + 23: returned 100, word now 123: ok");

    a.qp.post_send(&[SendWr::compare_swap(201, &result, word, rkey, 123, 7).signaled()])?;
    expect_ok(&a.cq, 201, WcOpcode::CompSwap)?;
    check_eq("compare-swap original", a.mr.read_u64(RESULT_OFF)?, 123)?;
    check_eq("word after matching compare-swap", b.mr.read_u64(ATOMIC_OFF)?, 7)?;

    a.qp.post_send(&[SendWr::compare_swap(202, &result, word, rkey, 123, 99).signaled()])?;
    expect_ok(&a.cq, 202, WcOpcode::CompSwap)?;
    check_eq("compare-swap original", a.mr.read_u64(RESULT_OFF)?, 7)?;
    check_eq("word after failed compare-swap", b.mr.read_u64(ATOMIC_OFF)?, 7)?;
    println!("atomic compare-and-swap: 123 → 7 swapped, 123 → 99 left 7 alone: ok");
    Ok(())
}
