//! XRC (eXtended Reliable Connected): one connection, several receive queues chosen
//! by the sender.
//!
//! Peer b opens an XRC domain (ibv_open_xrcd(3)) and creates in it two XRC SRQs, each
//! completing to its own CQ, and one XRC target QP (`IBV_QPT_XRC_RECV`, created from
//! the domain, with no queues of its own). Peer a creates an XRC initiator QP
//! (`IBV_QPT_XRC_SEND`, which only sends) and connects it to b's target QP.
//!
//! Every request a sends names the XRC SRQ it is for by number (`remote_srqn`,
//! ibv_get_srq_num(3)): over the single connection, messages land in the SRQ they
//! name and complete on that SRQ's CQ, reporting the target QP in `qp_num`. One-sided
//! operations name an SRQ too: its PD is the one the rkey is checked against.
//!
//! The example shows:
//! - SEND to SRQ 1, SEND_WITH_IMM to SRQ 2, SEND to SRQ 1 again: each completes on
//!   the named SRQ's CQ only, with that SRQ's receives, in order;
//! - an RDMA WRITE through the same connection into b's memory.
//!
//! Rules followed: ibv_open_xrcd(3), ibv_create_srq_ex(3) (IBV_SRQT_XRC with xrcd and
//! cq), ibv_create_qp_ex(3) (XRC_RECV QPs belong to a domain, XRC_SEND QPs to a PD
//! and have no receive queue), ibv_modify_qp(3) (initiator: RTR with the UC-style
//! mask, then RTS like RC; target: INIT with remote access, RTR with the RC-style
//! mask, which is all a receiver needs), ibv_post_send(3) (`qp_type.xrc.remote_srqn`),
//! ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example xrc`

mod common;

use common::{
    check_bytes, check_eq, expect_empty, expect_ok, open, pattern, to_init, to_rtr, to_rts, Result, ALL_ACCESS, CAP,
    MR_LEN,
};
use rverbs::{
    Access, Context, Cq, CqInit, Mr, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, Srq, SrqInit, WcOpcode, Xrcd,
};

/// The sending peer: an XRC initiator QP.
struct Initiator {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

/// The receiving peer: a domain with two SRQs (each with its CQ) and a target QP.
struct Target {
    ctx: Context,
    mr: Mr,
    /// Stays open while its SRQs and target QP exist (ibv_close_xrcd(3) would be EBUSY).
    _xrcd: Xrcd,
    srqs: [(Srq, Cq); 2],
    qp: Qp,
}

fn initiator() -> Result<Initiator> {
    let ctx = open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(&CqInit::new(32))?;
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
    // An initiator only sends: no receive queue.
    let cap = QpCap { max_recv_wr: 0, max_recv_sge: 0, ..CAP };
    let qp = pd.create_qp(&QpInit::new(QpType::XrcSend, &cq, cap))?;
    Ok(Initiator { ctx, cq, mr, qp })
}

fn target() -> Result<Target> {
    let ctx = open()?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
    let xrcd = ctx.open_xrcd(None, 0)?; // private domain (no file to share it through)
    let xrc_srq = || -> Result<(Srq, Cq)> {
        let cq = ctx.create_cq(&CqInit::new(16))?;
        let srq = pd.create_srq_xrc(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }, &xrcd, &cq)?;
        Ok((srq, cq))
    };
    let srqs = [xrc_srq()?, xrc_srq()?];
    let qp = xrcd.create_recv_qp(0)?;
    Ok(Target { ctx, mr, _xrcd: xrcd, srqs, qp })
}

fn main() -> Result {
    let a = initiator()?;
    let b = target()?;

    // Target: remote rights at INIT, the initiator as its peer at RTR.
    to_init(&b.qp, ALL_ACCESS)?;
    to_rtr(&b.qp, &b.ctx, a.qp.qp_num())?;
    // Initiator: grants nothing (it never responds), connects to the target, sends.
    to_init(&a.qp, Access::empty())?;
    to_rtr(&a.qp, &a.ctx, b.qp.qp_num())?;
    to_rts(&a.qp)?;
    println!(
        "XRC initiator {:#x} -> target {:#x}; XRC SRQs {:#x} and {:#x}",
        a.qp.qp_num(),
        b.qp.qp_num(),
        b.srqs[0].0.srq_num(),
        b.srqs[1].0.srq_num()
    );

    // Receives: 10 and 11 in SRQ 1, 20 in SRQ 2; each its own 1 KiB slot.
    post_srq_recv(&b, 0, 10)?;
    post_srq_recv(&b, 0, 11)?;
    post_srq_recv(&b, 1, 20)?;

    send_to_srq(&a, &b, 0, 10, None)?;
    send_to_srq(&a, &b, 1, 20, Some(0xc0de))?;
    send_to_srq(&a, &b, 0, 11, None)?;
    write_through_srq(&a, &b)?;
    println!("xrc: all checks passed");
    Ok(())
}

/// The region slot a receive `wr_id` uses.
fn slot(wr_id: u64) -> usize {
    wr_id as usize * 1024
}

fn post_srq_recv(b: &Target, which: usize, wr_id: u64) -> Result {
    let sge = [b.mr.sge(slot(wr_id), 1024)?];
    b.srqs[which].0.post_recv(&[RecvWr::new(wr_id, &sge)])?;
    Ok(())
}

/// Sends to SRQ `which` (by its number) and expects receive `wr_id` of that SRQ to
/// complete on that SRQ's CQ, and nothing on the other one.
fn send_to_srq(a: &Initiator, b: &Target, which: usize, wr_id: u64, imm: Option<u32>) -> Result {
    let (srq, cq) = &b.srqs[which];
    let (_, other_cq) = &b.srqs[1 - which];
    let msg = format!("to XRC SRQ {:#x}, receive {wr_id}", srq.srq_num());
    a.mr.write(0, msg.as_bytes())?;
    let sge = [a.mr.sge(0, msg.len() as u32)?];
    let wr = SendWr::send(wr_id, &sge).xrc(srq.srq_num()).signaled();
    let wr = match imm {
        Some(imm) => wr.with_imm(imm),
        None => wr,
    };
    a.qp.post_send(&[wr])?;

    let s = expect_ok(&a.cq, wr_id, WcOpcode::Send)?;
    check_eq("send qp_num", s.qp_num(), a.qp.qp_num())?;
    let r = expect_ok(cq, wr_id, WcOpcode::Recv)?;
    check_eq("receiving (target) QP", r.qp_num(), b.qp.qp_num())?;
    check_eq("byte_len", r.byte_len(), Some(msg.len() as u32))?;
    check_eq("imm_data", r.imm_data(), imm)?;
    expect_empty(other_cq, "the message named the other SRQ")?;
    check_bytes("received message", &b.mr, slot(wr_id), msg.as_bytes())?;
    println!("{msg:?}{}: completed on that SRQ's CQ via target QP {:#x}", imm_note(imm), r.qp_num());
    Ok(())
}

fn imm_note(imm: Option<u32>) -> String {
    imm.map(|i| format!(" (imm {i:#x})")).unwrap_or_default()
}

/// One-sided requests name an SRQ too; the rkey is checked against its PD. No
/// receive is consumed and no completion appears at b.
fn write_through_srq(a: &Initiator, b: &Target) -> Result {
    let data = pattern(2000, 5);
    a.mr.write(4096, &data)?;
    let sge = [a.mr.sge(4096, data.len() as u32)?];
    let remote = b.mr.iova() + 32 * 1024;
    let srqn = b.srqs[0].0.srq_num();
    a.qp.post_send(&[SendWr::write(30, &sge, remote, b.mr.rkey()).xrc(srqn).signaled()])?;

    expect_ok(&a.cq, 30, WcOpcode::RdmaWrite)?;
    for (_, cq) in &b.srqs {
        expect_empty(cq, "an RDMA WRITE completes only at the requester")?;
    }
    check_bytes("written data", &b.mr, 32 * 1024, &data)?;
    println!("RDMA WRITE of {} bytes via SRQ {srqn:#x}'s PD: ok", data.len());
    Ok(())
}
