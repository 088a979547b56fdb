//! The examples through the rdma-core backend: with `RVERBS_BACKEND=rdma-core` the
//! public types (`rverbs::devices()`, `Context`, `Qp`, …) are libibverbs' objects, here
//! the drop-in's (`RVERBS_LIBIBVERBS`, set by scripts/test.sh), and the examples run
//! unchanged. Each test fails unless the backend did the work: the listed device is the
//! backend's, and the drop-in's copy of the soft device, the only endpoint this process
//! owns in the runtime directory (the test never starts the in-crate device), counted the
//! transfers.
#![cfg(feature = "rdma-core")]
#![allow(dead_code)] // the examples' helpers they do not all use
// Each example is a program of its own with its own `mod common;`: included together, the
// helpers are compiled once per example, as they are when the examples are built.
#![allow(clippy::duplicate_mod)]

#[path = "../examples/cq_events.rs"]
mod cq_events;
#[path = "../examples/rc_pingpong.rs"]
mod rc_pingpong;
#[path = "../examples/typed_atomics.rs"]
mod typed_atomics;
#[path = "../examples/uc_write.rs"]
mod uc_write;
#[path = "../examples/ud_send.rs"]
mod ud_send;

use rverbs::Backend;

type Example = fn() -> Result<(), Box<dyn std::error::Error>>;

/// The `local_requests` counted by this process's endpoints in the runtime directory.
fn local_requests() -> (usize, u64) {
    let pid = std::process::id();
    let mine: Vec<_> = rverbs::host_counters().into_iter().filter(|e| e.pid == pid).collect();
    (mine.len(), mine.iter().map(|e| e.counters.local_requests).sum())
}

/// Runs `example` with `devices()` listing libibverbs' devices.
fn through_the_backend(example: Example) {
    // Every test of the binary sets the same value, before anything lists devices (each
    // test is a process of its own under nextest).
    std::env::set_var("RVERBS_BACKEND", "rdma-core");
    let devs = rverbs::devices().expect("libibverbs loads (RVERBS_LIBIBVERBS)");
    let dev = devs.first().expect("libibverbs lists a device");
    assert_eq!(dev.backend(), Backend::RdmaCore, "the example's device is the backend's");
    let (_, before) = local_requests();
    example().expect("the example's checks pass");
    let (endpoints, after) = local_requests();
    assert_eq!(endpoints, 1, "one endpoint of this process: the drop-in's, not the in-crate device's");
    assert!(after > before, "the drop-in's device carried the requests ({before} → {after})");
}

#[test]
fn rc_pingpong_runs_through_the_backend() {
    through_the_backend(rc_pingpong::main);
}

#[test]
fn ud_send_runs_through_the_backend() {
    through_the_backend(ud_send::main);
}

#[test]
fn uc_write_runs_through_the_backend() {
    through_the_backend(uc_write::main);
}

#[test]
fn cq_events_runs_through_the_backend() {
    through_the_backend(cq_events::main);
}

#[test]
fn typed_atomics_run_through_the_backend() {
    through_the_backend(typed_atomics::main);
}
