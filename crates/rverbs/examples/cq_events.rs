//! Waiting for completions instead of spinning, and the extended CQ.
//!
//! Part 1, completion channel: b's CQ is attached to a completion channel
//! (ibv_create_comp_channel(3)). A waiter thread follows the loop of
//! ibv_get_cq_event(3): arm the CQ (ibv_req_notify_cq(3)), poll it empty, block in
//! ibv_get_cq_event until the armed CQ gets a completion, acknowledge the event
//! (ibv_ack_cq_events(3)), re-arm, poll again. Arming fires at most one event, and
//! only for a completion added after it; re-arming before polling is what makes sure
//! a completion arriving between the poll and the wait is not missed. The main thread
//! sends one message at a time and waits (bounded) for the waiter to report it.
//!
//! Part 2, extended CQ (ibv_create_cq_ex(3)): the CQ is created with the `wc_flags`
//! of the fields it will be asked for, including completion timestamps. Polling goes
//! start_poll → read fields → next_poll … → end_poll (here the `ExPoll` guard of
//! `Cq::ex_poll`, which calls them); a field that was not requested
//! reads as `None` here (undefined in C).
//!
//! The example checks every received byte, one event per message, the `cq_context`
//! the event carries, the extended fields (byte_len, imm_data, qp_num, src_qp), that
//! timestamps increase and fall between two ibv_query_rt_values_ex(3) readings of the
//! device clock, and that the wall-clock timestamps fall between the wall-clock
//! readings.
//!
//! Rules followed: ibv_req_notify_cq(3), ibv_get_cq_event(3), ibv_ack_cq_events(3),
//! ibv_create_cq_ex(3), ibv_start_poll(3) / ibv_next_poll(3) / ibv_end_poll(3)
//! (ENOENT on an empty CQ, here `None`), ibv_query_rt_values_ex(3), ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example cq_events`

mod common;

use std::sync::mpsc;
use std::thread;

use common::{
    check_bytes, check_eq, connect, ensure, expect_ok, fail, open, pattern, Endpoint, Result, ALL_ACCESS, CAP,
    DEADLINE, MR_LEN,
};
use rverbs::{CompChannel, Context, Cq, CqInit, QpInit, QpType, SendWr, Wc, WcExFlags, WcOpcode};

const MESSAGES: u64 = 4;
const CQ_CONTEXT: usize = 0xb0b;

pub fn main() -> Result {
    completion_channel()?;
    // Extended CQs are the soft device's: the rdma-core backend makes none
    // (docs/rdma-core-backend.md), so on a libibverbs device part 2 is left out.
    if open()?.backend() == rverbs::Backend::RdmaCore {
        println!("-- extended CQ: not offered by the rdma-core backend, left out");
        return Ok(());
    }
    extended_cq()?;
    println!("cq_events: all checks passed");
    Ok(())
}

/// A peer on `ctx` whose QP completes to the CQ `init` describes.
fn endpoint_with_cq(ctx: Context, init: &CqInit) -> Result<Endpoint> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(init)?;
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP))?;
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
    Ok(Endpoint { ctx, pd, cq, qp, mr })
}

/// What the waiter thread tells the main thread.
enum Report {
    /// The CQ is armed and was polled empty: the waiter is about to block, and the
    /// next completion will fire an event.
    Waiting,
    /// A completion, and how many events the waiter had consumed when it polled it.
    Polled(Wc, u64),
    /// A verb failed in the waiter.
    Failed(String),
}

fn completion_channel() -> Result {
    println!("-- completion channel");
    let ctx = open()?;
    let channel = ctx.create_comp_channel()?;
    let b = endpoint_with_cq(ctx, &CqInit::new(64).channel(&channel).cq_context(CQ_CONTEXT))?;
    let a = Endpoint::new(QpType::Rc)?;
    connect(&a, &b)?;

    let (tx, rx) = mpsc::channel();
    let (ch, cq) = (channel.clone(), b.cq.clone());
    let waiter = thread::spawn(move || {
        if let Err(e) = wait_for_receives(&ch, &cq, &tx) {
            let _ = tx.send(Report::Failed(e));
        }
    });
    let next_report = |what: &str| -> Result<Report> {
        match rx.recv_timeout(DEADLINE) {
            Ok(Report::Failed(e)) => fail(format!("waiter: {e}")),
            Ok(r) => Ok(r),
            Err(_) => fail(format!("waiter: no {what} within {DEADLINE:?}")),
        }
    };

    for k in 1..=MESSAGES {
        // Send only while the waiter is armed and blocking, so every message is
        // delivered through exactly one event.
        let Report::Waiting = next_report("wait")? else {
            return fail("the waiter polled a completion nobody sent");
        };
        let msg = format!("message {k}, delivered while the waiter blocks");
        b.post_recv(k, 0, 256)?;
        a.mr.write(0, msg.as_bytes())?;
        let sge = [a.mr.sge(0, msg.len() as u32)?];
        a.qp.post_send(&[SendWr::send(k, &sge).signaled()])?;
        expect_ok(&a.cq, k, WcOpcode::Send)?;

        let Report::Polled(wc, events) = next_report(&format!("completion for message {k}"))? else {
            return fail(format!("the waiter went back to waiting without polling message {k}"));
        };
        check_eq("wr_id", wc.wr_id(), k)?;
        check_eq("opcode", wc.opcode(), Some(WcOpcode::Recv))?;
        check_eq("byte_len", wc.byte_len(), Some(msg.len() as u32))?;
        check_bytes("received message", &b.mr, 0, msg.as_bytes())?;
        check_eq("events consumed", events, k)?;
        println!("waiter woke on event {events}, polled wr_id {k}: {msg:?}");
    }
    waiter.join().map_err(|_| "the waiter thread panicked")?;
    Ok(())
}

/// The waiter: the arm / poll / wait / ack / re-arm loop of ibv_get_cq_event(3), until
/// [`MESSAGES`] receives were polled. Blocks in `get_cq_event` (the channel fd is
/// blocking, as created).
fn wait_for_receives(channel: &CompChannel, cq: &Cq, tx: &mpsc::Sender<Report>) -> std::result::Result<(), String> {
    let send = |r: Report| tx.send(r).map_err(|_| "main thread gone".to_string());
    let err = |e: rverbs::Error| e.to_string();
    let mut events = 0;
    let mut polled = 0;
    cq.req_notify(false).map_err(err)?;
    loop {
        // Poll after arming: completions already in the CQ when it was armed fire
        // nothing, so they must be picked up here.
        let mut wc = [Wc::default(); 4];
        loop {
            let n = cq.poll(&mut wc).map_err(err)?;
            for c in &wc[..n] {
                polled += 1;
                send(Report::Polled(*c, events))?;
            }
            if n == 0 {
                break;
            }
        }
        if polled >= MESSAGES {
            return Ok(());
        }
        send(Report::Waiting)?;
        let event = channel.get_cq_event().map_err(err)?; // blocks
        events += 1;
        if event.cq_context() != CQ_CONTEXT || !event.cq().same_as(cq) {
            return Err(format!("event for another CQ (cq_context {:#x})", event.cq_context()));
        }
        event.ack(); // every event is acknowledged; destroying the CQ waits for that
        cq.req_notify(false).map_err(err)?; // re-arm, then poll again
    }
}

fn extended_cq() -> Result {
    println!("-- extended CQ");
    let flags = WcExFlags::BYTE_LEN
        | WcExFlags::IMM
        | WcExFlags::QP_NUM
        | WcExFlags::SRC_QP
        | WcExFlags::COMPLETION_TIMESTAMP
        | WcExFlags::COMPLETION_TIMESTAMP_WALLCLOCK;
    let b = endpoint_with_cq(open()?, &CqInit::new(64).wc_flags(flags))?;
    let a = Endpoint::new(QpType::Rc)?;
    connect(&a, &b)?;
    let clock_khz = b.ctx.query_device().hca_core_clock;
    println!("device clock: {clock_khz} kHz");

    // Three SEND_WITH_IMM of 100, 200 and 300 bytes, each into its own 4 KiB slot.
    let slot = |k: u64| 4096 * k as usize;
    let messages: Vec<Vec<u8>> = (0..3u8).map(|k| pattern(100 * (usize::from(k) + 1), k)).collect();
    let before = b.ctx.query_rt_values();
    for (k, data) in (0..).zip(&messages) {
        a.mr.write(slot(k), data)?;
        b.post_recv(k, slot(k), data.len() as u32)?;
        let sge = [a.mr.sge(slot(k), data.len() as u32)?];
        a.qp.post_send(&[SendWr::send(k, &sge).with_imm(0x100 + k as u32)])?;
    }
    let after = b.ctx.query_rt_values();

    let mut last_ts = before.raw_clock_ns;
    let mut seen = 0u64;
    let mut batch = b.cq.ex_poll()?; // start_poll; None would be ENOENT: nothing to poll
    while let Some(entry) = batch {
        let k = seen;
        if k as usize >= messages.len() {
            return fail("more completions than messages sent");
        }
        check_eq("wr_id", entry.wr_id(), k)?;
        check_eq("opcode", entry.opcode(), Some(WcOpcode::Recv))?;
        check_eq("byte_len", entry.byte_len(), Some(messages[k as usize].len() as u32))?;
        check_bytes("received message", &b.mr, slot(k), &messages[k as usize])?;
        check_eq("imm_data", entry.imm_data(), Some(0x100 + k as u32))?;
        check_eq("qp_num", entry.qp_num(), Some(b.qp.qp_num()))?;
        check_eq("src_qp (RC reports 0)", entry.src_qp(), Some(0))?;
        check_eq("slid (not requested)", entry.slid(), None)?;
        let (Some(ts), Some(wall)) = (entry.completion_ts(), entry.completion_wallclock_ns()) else {
            return fail("timestamps were requested but not reported");
        };
        ensure(last_ts <= ts && ts <= after.raw_clock_ns, || {
            format!("timestamp {ts} outside [{last_ts}, {}]", after.raw_clock_ns)
        })?;
        ensure(before.wallclock_ns <= wall && wall <= after.wallclock_ns, || {
            format!("wall-clock {wall} outside [{}, {}]", before.wallclock_ns, after.wallclock_ns)
        })?;
        println!(
            "wr_id {k}: {} bytes, imm {:#x}, qp {:#x}, completed {} ns after the first clock reading",
            entry.byte_len().unwrap_or_default(),
            entry.imm_data().unwrap_or_default(),
            entry.qp_num().unwrap_or_default(),
            ts - before.raw_clock_ns
        );
        last_ts = ts;
        seen += 1;
        batch = entry.next()?; // next_poll; None (ENOENT) ends the batch: end_poll
    }
    check_eq("completions in the batch", seen, messages.len() as u64)?;
    // The batch consumed every completion.
    ensure(b.cq.ex_poll()?.is_none(), || "completions left after the batch".into())?;
    Ok(())
}
