//! Typed atomics: a spin lock and a counter in a peer's memory, driven through a
//! `TypedQp<Rc>` (rverbs::typed), where an atomic is only what IBTA allows it to be.
//!
//! The example shows:
//! - the transport in the type: `TypedQp::<Rc>` takes READ and the atomics, which a
//!   `TypedQp<Uc>` would refuse at compile time (see the `rverbs::typed` docs);
//! - an atomic's result buffer as an `AtomicResult`: one SGE of exactly 8 bytes, checked
//!   when it is made, not a list;
//! - a lock taken with COMPARE_SWAP (0 → 1, the original value says whether we got it),
//!   a counter bumped with FETCH_ADD under it, the lock released with COMPARE_SWAP
//!   (1 → 0), and the counter read back with a READ;
//! - a failed acquisition: COMPARE_SWAP on a held lock leaves it as it is and returns 1.
//!
//! Rules followed: ibv_post_send(3) (atomics are RC/XRC only; `wr.atomic.remote_addr`
//! 8-byte aligned; the local buffer is 8 bytes), IBTA Vol 1 §9.4.5 (the original value
//! returned), ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example typed_atomics`

mod common;

use common::{check_eq, connected_pair, expect_ok, Result};
use rverbs::typed::{AtomicResult, CompareSwap, FetchAdd, Rc, Read, Remote, TypedQp};
use rverbs::{QpType, WcOpcode};

const LOCK: u64 = 0;
const COUNTER: u64 = 8;
const ROUNDS: u64 = 50;

pub fn main() -> Result {
    let (client, server) = connected_pair(QpType::Rc)?;
    let qp = match TypedQp::<Rc>::from_qp(client.qp.clone()) {
        Ok(qp) => qp,
        Err(_) => return common::fail("connected_pair(Rc) made no RC QP"),
    };
    let result = AtomicResult::in_mr(&client.mr, 0)?;
    let lock = Remote::of(&server.mr, LOCK);
    let counter = Remote::of(&server.mr, COUNTER);

    let mut wr_id = 0;
    for round in 0..ROUNDS {
        // Acquire: 0 → 1; the original value is 0 when the lock was ours to take.
        wr_id += 1;
        qp.post(&CompareSwap::new(wr_id, result, lock, 0, 1).signaled())?;
        expect_ok(&client.cq, wr_id, WcOpcode::CompSwap)?;
        check_eq("lock before acquiring", client.mr.read_u64(0)?, 0)?;

        // A second acquisition fails and changes nothing.
        wr_id += 1;
        qp.post(&CompareSwap::new(wr_id, result, lock, 0, 1).signaled())?;
        expect_ok(&client.cq, wr_id, WcOpcode::CompSwap)?;
        check_eq("lock seen by a second taker", client.mr.read_u64(0)?, 1)?;

        // The critical section: fetch-and-add returns the counter before the add.
        wr_id += 1;
        qp.post(&FetchAdd::new(wr_id, result, counter, 3).signaled())?;
        expect_ok(&client.cq, wr_id, WcOpcode::FetchAdd)?;
        check_eq("counter before the add", client.mr.read_u64(0)?, round * 3)?;

        // Release: 1 → 0.
        wr_id += 1;
        qp.post(&CompareSwap::new(wr_id, result, lock, 1, 0).signaled())?;
        expect_ok(&client.cq, wr_id, WcOpcode::CompSwap)?;
        check_eq("lock before releasing", client.mr.read_u64(0)?, 1)?;
    }

    // Read both words back.
    wr_id += 1;
    let into = [client.mr.sge(64, 16)?];
    qp.post(&Read::new(wr_id, &into, lock).signaled())?;
    expect_ok(&client.cq, wr_id, WcOpcode::RdmaRead)?;
    check_eq("lock at the end", client.mr.read_u64(64)?, 0)?;
    check_eq("counter at the end", client.mr.read_u64(72)?, ROUNDS * 3)?;
    check_eq("counter in the server's memory", server.mr.read_u64(COUNTER as usize)?, ROUNDS * 3)?;
    println!("typed_atomics: {ROUNDS} rounds of lock / fetch-add / unlock, counter {}", ROUNDS * 3);
    Ok(())
}
