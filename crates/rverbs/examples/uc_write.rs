//! UC (unreliable connected) queue pairs: SEND and RDMA WRITE, with and without
//! immediate data, and what UC does not do.
//!
//! A UC QP is connected to one peer like RC, but nothing is acknowledged: the sender's
//! completion means "transmitted", not "delivered", and there are no retries and no
//! RNR: a SEND that finds no receive posted is silently dropped.
//!
//! The example shows:
//! - SEND and SEND_WITH_IMM into posted receives;
//! - RDMA WRITE (no completion at the responder) and RDMA WRITE_WITH_IMM (consumes a
//!   receive, completes as RECV_RDMA_WITH_IMM);
//! - a SEND without a receive posted: completes successfully at the sender, nothing
//!   arrives;
//! - RDMA READ refused at post time with EINVAL: READ and atomics need a responder that
//!   answers, so they are RC/XRC only.
//!
//! Rules followed: ibv_post_send(3) (opcodes allowed per transport; a rejected request
//! is reported through `bad_wr` and nothing after it is posted), ibv_modify_qp(3)
//! (UC RTR needs AV, PATH_MTU, DEST_QPN, RQ_PSN; RTS only SQ_PSN), ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example uc_write`

mod common;

use common::{check_bytes, check_eq, connected_pair, ensure, expect_empty, expect_ok, pattern, Endpoint, Result};
use rverbs::{QpState, QpType, SendWr, WcFlags, WcOpcode};

const WRITE_OFF: usize = 32 * 1024;

pub fn main() -> Result {
    let (a, b) = connected_pair(QpType::Uc)?;
    println!("UC QPs connected: a = {:#x}, b = {:#x}", a.qp.qp_num(), b.qp.qp_num());

    send(&a, &b, 1, None)?;
    send(&a, &b, 2, Some(0xfeed_f00d))?;
    write(&a, &b, 3, None)?;
    write(&a, &b, 4, Some(0x0bad_cafe))?;
    send_without_receive(&a, &b)?;
    read_is_refused(&a, &b)?;
    println!("uc_write: all checks passed");
    Ok(())
}

/// SEND (or SEND_WITH_IMM) of 1500 bytes into a posted receive.
fn send(a: &Endpoint, b: &Endpoint, wr_id: u64, imm: Option<u32>) -> Result {
    let data = pattern(1500, wr_id as u8);
    a.mr.write(0, &data)?;
    b.post_recv(wr_id, 0, 4096)?;
    let sge = [a.mr.sge(0, data.len() as u32)?];
    let wr = SendWr::send(wr_id, &sge).signaled();
    let wr = match imm {
        Some(imm) => wr.with_imm(imm),
        None => wr,
    };
    a.qp.post_send(&[wr])?;

    expect_ok(&a.cq, wr_id, WcOpcode::Send)?;
    let r = expect_ok(&b.cq, wr_id, WcOpcode::Recv)?;
    check_eq("byte_len", r.byte_len(), Some(data.len() as u32))?;
    check_eq("imm_data", r.imm_data(), imm)?;
    check_bytes("received data", &b.mr, 0, &data)?;
    match imm {
        Some(imm) => println!("SEND_WITH_IMM of {} bytes, imm {imm:#x}: ok", data.len()),
        None => println!("SEND of {} bytes: ok", data.len()),
    }
    Ok(())
}

/// RDMA WRITE (or WRITE_WITH_IMM) of 3000 bytes to b's region.
fn write(a: &Endpoint, b: &Endpoint, wr_id: u64, imm: Option<u32>) -> Result {
    let data = pattern(3000, wr_id as u8);
    a.mr.write(WRITE_OFF, &data)?;
    if imm.is_some() {
        // The immediate needs a receive; its buffer is not touched.
        b.post_recv(wr_id, 0, 0)?;
    }
    let sge = [a.mr.sge(WRITE_OFF, data.len() as u32)?];
    let wr = SendWr::write(wr_id, &sge, b.mr.iova() + WRITE_OFF as u64, b.mr.rkey()).signaled();
    let wr = match imm {
        Some(imm) => wr.with_imm(imm),
        None => wr,
    };
    a.qp.post_send(&[wr])?;

    expect_ok(&a.cq, wr_id, WcOpcode::RdmaWrite)?;
    match imm {
        Some(imm) => {
            let r = expect_ok(&b.cq, wr_id, WcOpcode::RecvRdmaWithImm)?;
            check_eq("imm_data", r.imm_data(), Some(imm))?;
            check_eq("byte_len", r.byte_len(), Some(data.len() as u32))?;
            ensure(r.wc_flags().is_some_and(|f| f.contains(WcFlags::WITH_IMM)), || {
                "WITH_IMM missing from wc_flags".into()
            })?;
        }
        None => expect_empty(&b.cq, "a plain RDMA WRITE completes only at the requester")?,
    }
    check_bytes("written data", &b.mr, WRITE_OFF, &data)?;
    match imm {
        Some(imm) => println!("RDMA WRITE_WITH_IMM of {} bytes, imm {imm:#x}: ok", data.len()),
        None => println!("RDMA WRITE of {} bytes: ok", data.len()),
    }
    Ok(())
}

/// No receive posted: RC would retry on RNR; UC drops the message and both QPs carry
/// on (the sender's completion is still a success).
fn send_without_receive(a: &Endpoint, b: &Endpoint) -> Result {
    let sge = [a.mr.sge(0, 8)?];
    a.qp.post_send(&[SendWr::send(5, &sge).signaled()])?;
    expect_ok(&a.cq, 5, WcOpcode::Send)?;
    expect_empty(&b.cq, "UC drops a message that finds no receive")?;
    check_eq("b's state", b.qp.state(), QpState::Rts)?;
    println!("SEND without a receive posted: sender completed, nothing delivered, b still in RTS: ok");
    Ok(())
}

/// READ needs a response, which UC never sends: the post itself is refused.
fn read_is_refused(a: &Endpoint, b: &Endpoint) -> Result {
    let sge = [a.mr.sge(0, 64)?];
    let read = SendWr::read(6, &sge, b.mr.iova(), b.mr.rkey());
    match a.qp.post_send(&[read]) {
        Ok(()) => common::fail("RDMA READ was accepted on a UC QP"),
        Err(e) => {
            println!("RDMA READ on UC refused: {e} (errno {})", e.error.errno());
            check_eq("errno", e.error.errno(), libc::EINVAL)?;
            check_eq("bad_wr index", e.index, 0)?;
            check_eq("send queue", a.qp.send_queue_len(), 0)
        }
    }
}
