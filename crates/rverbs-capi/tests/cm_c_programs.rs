//! The rdma_cm C conformance programs of `tests/c/cm_*.c` (repository root): compiled
//! with the system C compiler against the *installed* `<rdma/rdma_cma.h>` and
//! `<rdma/rdma_verbs.h>` (rdma-core 44), linked `-lrdmacm -libverbs`, run with
//! `LD_LIBRARY_PATH` at a directory holding the drop-in pair: this crate's
//! `libibverbs.so` (where the connection manager lives) and the `librdmacm.so` shim of
//! `crates/rverbs-rdmacm`. Each program prints one `ok - …` line per rule it checks and
//! exits non-zero at the first failure; the test fails with the program's output.
//!
//! * `cm_async`: client and server over 127.0.0.1 on two event channels — resolution,
//!   `rdma_create_qp` with the library's CQs, connect/accept with private data,
//!   ESTABLISHED, SEND/RECV, DISCONNECTED on both sides, teardown.
//! * `cm_sync`: `rdma_create_ep`/`rdma_get_request`/blocking connect, accept and
//!   disconnect (rdma_server/rdma_client style), ECONNREFUSED, sync → async migration.
//! * `cm_errors`: REJECTED 8 and 28 (+ private data), O_NONBLOCK → EAGAIN, option and
//!   address errors.
//! * `cm_mcast`: multicast joins — argument checks, MULTICAST_JOIN's `param.ud` (the
//!   join's context, the group's address vector), traffic to a full and a send-only
//!   member, leave, a synchronous join.
//! * `cm_foreign_ptr`: foreign pointers (4 bytes before a PROT_NONE page, a malloc(4), a
//!   stack byte) and destroyed channels/ids are refused with -1/EINVAL, never read.
//! * `cm_exit_race`: rping's exit race (docs/capi.md, "Threads racing with exit"): once
//!   the library's exit handlers run, another thread's `rdma_get_cm_event` or
//!   `ibv_get_cq_event` on a destroyed channel waits for the exit instead of failing;
//!   the exiting thread's own, and any before exit, are -1/EINVAL.
//! * `cm_bad_args`: the librdmacm half of the bad-argument matrix (one row per call and
//!   case, each citing librdmacm's cma.c or the kernel's ucma.c/cma.c for its errno),
//!   also run under Valgrind's memcheck.
//!
//! This crate does not depend on the shim, so the shim is built here, once per test
//! run, into its own target directory under `CARGO_TARGET_TMPDIR` (a `cargo build` in
//! the target directory `cargo test` holds would wait for its lock);
//! `RVERBS_RDMACM_CDYLIB` names a prebuilt one instead.
//!
//! Missing compiler or header = failure, never a skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{compile_and_run_c, compile_c, our_lib, repo_root, run_c};

const HEADER: &str = "/usr/include/rdma/rdma_cma.h";

/// The shim `librdmacm.so`, built once per test process.
fn rdmacm_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(path) = std::env::var_os("RVERBS_RDMACM_CDYLIB") {
            return PathBuf::from(path);
        }
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdmacm-shim");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(&cargo)
            .current_dir(repo_root())
            .args([
                "build",
                "--quiet",
                "-p",
                "rverbs-rdmacm",
                "--lib",
                "--target-dir",
            ])
            .arg(&target)
            .output()
            .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
        assert!(
            out.status.success(),
            "building the librdmacm shim failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = target.join("debug/librdmacm.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
    .clone()
}

/// A directory (one per test) with both drop-in libraries under their runtime and
/// link-time names.
fn dropin_pair(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("dropin")
        .join(test);
    std::fs::create_dir_all(&dir).expect("create drop-in dir");
    for (name, target) in [
        ("libibverbs.so.1", our_lib()),
        ("libibverbs.so", our_lib()),
        ("librdmacm.so.1", rdmacm_lib()),
        ("librdmacm.so", rdmacm_lib()),
    ] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).expect("symlink a built library");
    }
    dir
}

fn compile_and_run(name: &str) {
    assert!(
        Path::new(HEADER).is_file(),
        "{HEADER} missing: install librdmacm-dev"
    );
    let dir = dropin_pair(&format!("c_{name}"));
    compile_and_run_c(name, &dir, &["-lrdmacm", "-libverbs"], &[]);
}

#[test]
fn cm_async() {
    compile_and_run("cm_async");
}

#[test]
fn cm_sync() {
    compile_and_run("cm_sync");
}

#[test]
fn cm_errors() {
    compile_and_run("cm_errors");
}

#[test]
fn cm_mcast() {
    compile_and_run("cm_mcast");
}

#[test]
fn cm_foreign_ptr() {
    compile_and_run("cm_foreign_ptr");
}

#[test]
fn cm_exit_race() {
    compile_and_run("cm_exit_race");
}

#[test]
fn cm_bad_args() {
    compile_and_run("cm_bad_args");
}

/// The librdmacm bad-argument matrix under Valgrind's memcheck (`--error-exitcode`: an
/// invalid read or write, in the program or in either library, fails the test; a few
/// seconds).
#[test]
fn cm_bad_args_under_valgrind() {
    assert!(
        Path::new("/usr/bin/valgrind").is_file(),
        "/usr/bin/valgrind missing: install valgrind"
    );
    assert!(Path::new(HEADER).is_file(), "{HEADER} missing: install librdmacm-dev");
    let dir = dropin_pair("c_cm_bad_args_valgrind");
    let exe = compile_c("cm_bad_args", &dir, &["-lrdmacm", "-libverbs"]);
    run_c(
        "cm_bad_args",
        &exe,
        &dir,
        &["/usr/bin/valgrind", "-q", "--error-exitcode=99"],
        &[],
    );
}
