//! The work-request builder (the `ibv_qp_ex` / `ibv_wr_*` API): many opcodes posted
//! as one batch.
//!
//! A QP that will use the builder declares at creation which operations it may build
//! (`send_ops_flags` of ibv_create_qp_ex(3); here `QpInit::send_ops`). A batch opens
//! with ibv_wr_start, each `ibv_wr_<opcode>` call starts one work request (wr_id and
//! flags are given to it), the `ibv_wr_set_*` calls that follow complete it (SGE,
//! inline data, ...), and ibv_wr_complete posts the whole batch. The first error is
//! latched: ibv_wr_complete then returns it and nothing of the batch is posted;
//! ibv_wr_abort (or dropping the batch) discards it.
//!
//! The example posts one batch of ten requests from a to b:
//! SEND (SGE), SEND_WITH_IMM (inline data), RDMA WRITE, RDMA WRITE_WITH_IMM, RDMA
//! READ, atomic fetch-and-add, atomic compare-and-swap, ATOMIC_WRITE, an unsignaled
//! RDMA WRITE into a flushable region and a FLUSH of that region (global visibility).
//! ATOMIC_WRITE and FLUSH are used only if the device reports them in
//! `device_cap_flags_ex`. Every completion is checked in posting order (the
//! unsignaled write has none), then every byte at both ends. Then it shows a batch
//! with an operation outside `send_ops` failing as a whole, and an aborted batch.
//!
//! Rules followed: ibv_wr_post(3) (start/complete/abort, latched errors, operations
//! limited to `send_ops_flags`), ibv_create_qp_ex(3), ibv_query_device_ex(3),
//! ibv_post_send(3) (only SIGNALED requests complete; atomics on 8-byte aligned
//! words; FLUSH needs IBV_ACCESS_FLUSH_GLOBAL on the responder QP and region),
//! ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example wr_builder`

mod common;

use common::{
    bring_up, check_bytes, check_eq, expect_empty, expect_ok, open, pattern, Endpoint, Result, ALL_ACCESS, CAP, MR_LEN,
};
use rverbs::cap_flags;
use rverbs::{
    Access, CqInit, FlushPlacement, FlushSelectivity, FlushWr, Mr, QpInit, QpType, SendFlags, SendOps, WcOpcode,
};

const SIG: SendFlags = SendFlags::SIGNALED;

// Offsets in a's region (sources and read/atomic results) and b's region (targets).
const SEND_SRC: usize = 0;
const WRITE_SRC: usize = 4096;
const READ_DST: usize = 8192;
const FADD_RESULT: usize = 12 * 1024;
const CSWP_RESULT: usize = FADD_RESULT + 8;
const B_WRITE: usize = 16 * 1024;
const B_WRITE_IMM: usize = 20 * 1024;
const B_READ_SRC: usize = 24 * 1024;
const B_COUNTER: usize = 28 * 1024;
const B_ATOMIC_WRITE: usize = B_COUNTER + 8;

/// What the device offers beyond the classic operations.
struct Extras {
    atomic_write: bool,
    flush: bool,
}

fn main() -> Result {
    let a_ctx = open()?;
    let caps = a_ctx.query_device().device_cap_flags_ex;
    let extras =
        Extras { atomic_write: caps & cap_flags::EX_ATOMIC_WRITE != 0, flush: caps & cap_flags::EX_FLUSH_GLOBAL != 0 };
    println!("device offers ATOMIC_WRITE: {}, FLUSH (global): {}", extras.atomic_write, extras.flush);

    let mut ops = SendOps::SEND
        | SendOps::SEND_WITH_IMM
        | SendOps::RDMA_WRITE
        | SendOps::RDMA_WRITE_WITH_IMM
        | SendOps::RDMA_READ
        | SendOps::ATOMIC_FETCH_AND_ADD
        | SendOps::ATOMIC_CMP_AND_SWP;
    if extras.atomic_write {
        ops |= SendOps::ATOMIC_WRITE;
    }
    if extras.flush {
        ops |= SendOps::FLUSH;
    }
    let a = builder_endpoint(a_ctx, ops)?;
    let b = Endpoint::new(QpType::Rc)?;
    bring_up(&a.qp, &a.ctx, b.qp.qp_num(), ALL_ACCESS)?;
    // FLUSH placement types must be granted by the responder QP as well as the region.
    bring_up(&b.qp, &b.ctx, a.qp.qp_num(), ALL_ACCESS | Access::FLUSH_GLOBAL)?;
    let flushable = b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::FLUSH_GLOBAL)?;

    one_batch_of_every_opcode(&a, &b, &flushable, &extras)?;
    refused_batch_posts_nothing(&a, &b)?;
    aborted_batch_posts_nothing(&a, &b)?;
    println!("wr_builder: all checks passed");
    Ok(())
}

/// An RC endpoint whose QP may use the builder for `ops`.
fn builder_endpoint(ctx: rverbs::Context, ops: SendOps) -> Result<Endpoint> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(&CqInit::new(64))?;
    let qp = pd.create_qp(&QpInit { send_ops: Some(ops), ..QpInit::new(QpType::Rc, &cq, CAP) })?;
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
    Ok(Endpoint { ctx, pd, cq, qp, mr })
}

fn one_batch_of_every_opcode(a: &Endpoint, b: &Endpoint, flushable: &Mr, extras: &Extras) -> Result {
    let send_data = pattern(700, 1);
    let write_data = pattern(2000, 2);
    let read_data = pattern(1500, 3);
    let inline = b"inline SEND_WITH_IMM";
    let persist = b"made globally visible by FLUSH";
    a.mr.write(SEND_SRC, &send_data)?;
    a.mr.write(WRITE_SRC, &write_data)?;
    b.mr.write(B_READ_SRC, &read_data)?;
    b.mr.write(B_COUNTER, &10u64.to_ne_bytes())?;
    // Receives for the SEND, the SEND_WITH_IMM and the WRITE_WITH_IMM, in that order.
    b.post_recv(1, 0, 1024)?;
    b.post_recv(2, 1024, 1024)?;
    b.post_recv(4, 2048, 0)?;

    let (lkey, local, rkey, remote) = (a.mr.lkey(), a.mr.iova(), b.mr.rkey(), b.mr.iova());
    let at = |base: u64, off: usize| base + off as u64;
    let mut expected = vec![
        (1, WcOpcode::Send),
        (2, WcOpcode::Send),
        (3, WcOpcode::RdmaWrite),
        (4, WcOpcode::RdmaWrite),
        (5, WcOpcode::RdmaRead),
        (6, WcOpcode::FetchAdd),
        (7, WcOpcode::CompSwap),
    ];

    let mut w = a.qp.wr_start()?;
    w.send(1, SIG).set_sge(lkey, at(local, SEND_SRC), send_data.len() as u32);
    w.send_imm(2, SIG, 0xaa55).set_inline_data(inline);
    w.rdma_write(3, SIG, rkey, at(remote, B_WRITE)).set_sge(lkey, at(local, WRITE_SRC), write_data.len() as u32);
    w.rdma_write_imm(4, SIG, rkey, at(remote, B_WRITE_IMM), 0xbb66).set_sge(
        lkey,
        at(local, WRITE_SRC),
        write_data.len() as u32,
    );
    w.rdma_read(5, SIG, rkey, at(remote, B_READ_SRC)).set_sge(lkey, at(local, READ_DST), read_data.len() as u32);
    w.atomic_fetch_add(6, SIG, rkey, at(remote, B_COUNTER), 5).set_sge(lkey, at(local, FADD_RESULT), 8);
    w.atomic_cmp_swp(7, SIG, rkey, at(remote, B_COUNTER), 15, 42).set_sge(lkey, at(local, CSWP_RESULT), 8);
    if extras.atomic_write {
        w.atomic_write(8, SIG, rkey, at(remote, B_ATOMIC_WRITE), *b"ATOMICWR");
        expected.push((8, WcOpcode::AtomicWrite));
    }
    if extras.flush {
        // Unsignaled: no completion of its own; the FLUSH after it completes once the
        // written bytes are globally visible.
        w.rdma_write(9, SendFlags::empty(), flushable.rkey(), flushable.iova()).set_inline_data(persist);
        let range = FlushWr { len: 4096, placement: FlushPlacement::GLOBAL, selectivity: FlushSelectivity::Range };
        w.flush(10, SIG, flushable.rkey(), flushable.iova(), range);
        expected.push((10, WcOpcode::Flush));
    }
    w.complete()?;
    println!("posted one batch of {} work requests", expected.len() + usize::from(extras.flush));

    // Requester completions, in posting order.
    for (wr_id, opcode) in expected {
        let wc = expect_ok(&a.cq, wr_id, opcode)?;
        println!("  wr_id {wr_id:>2}: {opcode:?}, {} bytes", wc.byte_len().unwrap_or_default());
    }
    expect_empty(&a.cq, "the FLUSH's preceding WRITE was unsignaled")?;

    // Responder completions: the two SENDs and the WRITE_WITH_IMM consumed receives.
    let r = expect_ok(&b.cq, 1, WcOpcode::Recv)?;
    check_eq("SEND byte_len", r.byte_len(), Some(send_data.len() as u32))?;
    let r = expect_ok(&b.cq, 2, WcOpcode::Recv)?;
    check_eq("SEND_WITH_IMM imm", r.imm_data(), Some(0xaa55))?;
    let r = expect_ok(&b.cq, 4, WcOpcode::RecvRdmaWithImm)?;
    check_eq("WRITE_WITH_IMM imm", r.imm_data(), Some(0xbb66))?;

    // Every byte.
    check_bytes("SEND data", &b.mr, 0, &send_data)?;
    check_bytes("inline SEND data", &b.mr, 1024, inline)?;
    check_bytes("WRITE data", &b.mr, B_WRITE, &write_data)?;
    check_bytes("WRITE_WITH_IMM data", &b.mr, B_WRITE_IMM, &write_data)?;
    check_bytes("READ data", &a.mr, READ_DST, &read_data)?;
    check_eq("fetch-add returned", a.mr.read_u64(FADD_RESULT)?, 10)?;
    check_eq("compare-swap returned", a.mr.read_u64(CSWP_RESULT)?, 15)?;
    check_eq("counter after fetch-add 5 and swap 15 -> 42", b.mr.read_u64(B_COUNTER)?, 42)?;
    if extras.atomic_write {
        check_bytes("ATOMIC_WRITE data", &b.mr, B_ATOMIC_WRITE, b"ATOMICWR")?;
    }
    if extras.flush {
        check_bytes("flushed WRITE data", flushable, 0, persist)?;
    }
    println!("batch: every completion and every byte checked");
    Ok(())
}

/// LOCAL_INV is not in the QP's send_ops: the error is latched, complete() returns
/// it, and the valid SEND before it is not posted either.
fn refused_batch_posts_nothing(a: &Endpoint, b: &Endpoint) -> Result {
    let mut w = a.qp.wr_start()?;
    w.rdma_write(20, SIG, b.mr.rkey(), b.mr.iova()).set_inline_data(b"never sent");
    w.local_inv(21, SIG, 0x1234);
    match w.complete() {
        Ok(()) => return common::fail("a batch with an operation outside send_ops was posted"),
        Err(e) => {
            println!("batch with LOCAL_INV outside send_ops refused: {e} (errno {})", e.errno());
            check_eq("errno", e.errno(), libc::EINVAL)?;
        }
    }
    check_eq("send queue after the refused batch", a.qp.send_queue_len(), 0)?;
    expect_empty(&a.cq, "nothing of a refused batch is posted")
}

/// An aborted batch (ibv_wr_abort) leaves nothing behind.
fn aborted_batch_posts_nothing(a: &Endpoint, b: &Endpoint) -> Result {
    let mut w = a.qp.wr_start()?;
    w.rdma_write(30, SIG, b.mr.rkey(), b.mr.iova()).set_inline_data(b"aborted");
    w.abort();
    check_eq("send queue after abort", a.qp.send_queue_len(), 0)?;
    expect_empty(&a.cq, "an aborted batch posts nothing")?;
    println!("aborted batch: nothing posted");
    Ok(())
}
