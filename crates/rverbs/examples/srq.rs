//! A shared receive queue (SRQ) serving several RC QPs, and its low-watermark event.
//!
//! Peer b creates one SRQ and three RC QPs attached to it; peer a connects one RC QP
//! to each. Receives are posted to the SRQ, not to the QPs: whichever QP a message
//! arrives on takes the oldest receive of the SRQ, and the completion's `qp_num` says
//! which QP that was.
//!
//! The SRQ limit is a low-watermark: once armed with ibv_modify_srq(3) (IBV_SRQ_LIMIT),
//! the first time a message leaves fewer than `srq_limit` receives in the SRQ the
//! device raises the asynchronous event IBV_EVENT_SRQ_LIMIT_REACHED and disarms the
//! limit (it then reads 0). The application reacts by posting more receives and
//! re-arming.
//!
//! The example shows:
//! - a QP attached to an SRQ refuses ibv_post_recv (EINVAL);
//! - five messages over three QPs consume the SRQ's receives in posting order;
//! - the limit stays armed while 4 receives are left and fires when 3 are left; the
//!   event names the SRQ; the limit reads 0 afterwards;
//! - the reaction: replenish and re-arm.
//!
//! Rules followed: ibv_create_srq(3), ibv_modify_srq(3), ibv_post_srq_recv(3),
//! ibv_get_async_event(3) (every event is acknowledged; here by dropping it),
//! ibv_create_qp(3) (with `srq` the QP's receive capacities are ignored),
//! ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example srq`

mod common;

use common::{
    blocking_with_deadline, bring_up, check_bytes, check_eq, expect_ok, open, Result, ALL_ACCESS, CAP, MR_LEN,
};
use rverbs::{
    AsyncElement, Context, Cq, CqInit, EventType, Mr, Pd, Qp, QpInit, QpType, RecvWr, SendWr, Srq, SrqAttr,
    SrqAttrMask, SrqInit, WcOpcode,
};

const QPS: usize = 3;
const RECEIVES: u64 = 8;
const LIMIT: u32 = 4;
/// Each receive gets its own slot of the region.
const SLOT: usize = 512;

/// One peer: one CQ and one region for all its QPs.
struct Peer {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qps: Vec<Qp>,
}

impl Peer {
    fn open() -> Result<Peer> {
        let ctx = open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(&CqInit::new(64))?;
        let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
        Ok(Peer { ctx, pd, cq, mr, qps: Vec::new() })
    }

    fn add_qp(&mut self, srq: Option<&Srq>) -> Result {
        let qp = self.pd.create_qp(&QpInit { srq, ..QpInit::new(QpType::Rc, &self.cq, CAP) })?;
        self.qps.push(qp);
        Ok(())
    }
}

fn main() -> Result {
    let mut a = Peer::open()?;
    let mut b = Peer::open()?;
    let srq = b.pd.create_srq(&SrqInit { max_wr: 16, max_sge: 1, srq_limit: 0, srq_context: 0 })?;
    for _ in 0..QPS {
        a.add_qp(None)?;
        b.add_qp(Some(&srq))?;
    }
    for (qa, qb) in a.qps.iter().zip(&b.qps) {
        bring_up(qa, &a.ctx, qb.qp_num(), ALL_ACCESS)?;
        bring_up(qb, &b.ctx, qa.qp_num(), ALL_ACCESS)?;
    }
    let qpns: Vec<String> = b.qps.iter().map(|q| format!("{:#x}", q.qp_num())).collect();
    println!("SRQ {:#x} shared by b's QPs {}", srq.srq_num(), qpns.join(", "));

    qp_on_srq_has_no_receive_queue(&b)?;
    for i in 0..RECEIVES {
        let sge = [b.mr.sge(slot(i), SLOT as u32)?];
        srq.post_recv(&[RecvWr::new(i, &sge)])?;
    }
    srq.modify(&SrqAttr { srq_limit: LIMIT, ..SrqAttr::default() }, SrqAttrMask::LIMIT)?;
    println!("posted {RECEIVES} receives to the SRQ, armed srq_limit = {}", srq.query().srq_limit);

    // Four messages leave four receives: not fewer than the limit, still armed.
    for k in 0..4 {
        send_and_check(&a, &b, k)?;
    }
    check_eq("srq_limit with 4 receives left", srq.query().srq_limit, LIMIT)?;
    println!("4 receives left: limit still armed");

    // The fifth leaves three: the event fires once and the limit disarms.
    send_and_check(&a, &b, 4)?;
    wait_for_limit_event(&b.ctx, &srq)?;
    check_eq("srq_limit after the event", srq.query().srq_limit, 0)?;

    // React: refill the SRQ, then re-arm.
    for i in RECEIVES..RECEIVES + 5 {
        let sge = [b.mr.sge(slot(i), SLOT as u32)?];
        srq.post_recv(&[RecvWr::new(i, &sge)])?;
    }
    srq.modify(&SrqAttr { srq_limit: LIMIT, ..SrqAttr::default() }, SrqAttrMask::LIMIT)?;
    check_eq("receives after refilling", srq.len(), 8)?;
    println!("refilled to {} receives and re-armed srq_limit = {}", srq.len(), srq.query().srq_limit);
    println!("srq: all checks passed");
    Ok(())
}

fn slot(wr_id: u64) -> usize {
    wr_id as usize * SLOT
}

/// Message `k` goes over QP `k % QPS` and must land in the k-th receive posted.
fn send_and_check(a: &Peer, b: &Peer, k: u64) -> Result {
    let which = k as usize % QPS;
    let msg = format!("message {k} over QP pair {which}");
    a.mr.write(slot(k), msg.as_bytes())?;
    let sge = [a.mr.sge(slot(k), msg.len() as u32)?];
    a.qps[which].post_send(&[SendWr::send(k, &sge).signaled()])?;

    expect_ok(&a.cq, k, WcOpcode::Send)?;
    let r = expect_ok(&b.cq, k, WcOpcode::Recv)?; // wr_id k: receives go in SRQ order
    check_eq("receiving QP", r.qp_num(), b.qps[which].qp_num())?;
    check_eq("byte_len", r.byte_len(), Some(msg.len() as u32))?;
    check_bytes("received message", &b.mr, slot(k), msg.as_bytes())?;
    println!("{msg:?}: receive {k} on QP {:#x}", r.qp_num());
    Ok(())
}

/// Receives come from the SRQ only: posting to the QP itself is refused.
fn qp_on_srq_has_no_receive_queue(b: &Peer) -> Result {
    let sge = [b.mr.sge(0, 8)?];
    match b.qps[0].post_recv(&[RecvWr::new(99, &sge)]) {
        Ok(()) => common::fail("post_recv on a QP attached to an SRQ was accepted"),
        Err(e) => {
            println!("post_recv on a QP with an SRQ: {e}");
            check_eq("errno", e.error.errno(), libc::EINVAL)
        }
    }
}

/// Reads the next asynchronous event (blocking, bounded) and checks it is the SRQ's
/// limit event. Dropping the event acknowledges it (ibv_ack_async_event(3)).
fn wait_for_limit_event(ctx: &Context, srq: &Srq) -> Result {
    let ctx = ctx.clone();
    let event = blocking_with_deadline("SRQ_LIMIT_REACHED", move || {
        ctx.get_async_event().map(|ev| {
            let srqn = match ev.element() {
                AsyncElement::Srq(s) => Some(s.srq_num()),
                _ => None,
            };
            (ev.event_type(), srqn)
        })
    })?;
    let (kind, srqn) = event?;
    println!("async event {kind:?} for SRQ {:#x} with {} receives left", srqn.unwrap_or_default(), srq.len());
    check_eq("event type", kind, EventType::SrqLimitReached)?;
    check_eq("event's SRQ", srqn, Some(srq.srq_num()))
}
