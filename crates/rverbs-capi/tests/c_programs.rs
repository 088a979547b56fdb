//! The C conformance programs of `tests/c/` (repository root): compiled with the system
//! C compiler against the *installed* `/usr/include/infiniband/verbs.h` (rdma-core 44),
//! linked against the built library, run with `LD_LIBRARY_PATH` pointing at it. Each
//! program prints one `ok - …` line per rule it checks and exits non-zero at the first
//! failure; the test fails with the program's output.
//!
//! What each program covers is in its header comment: ibv_poll_cq(3),
//! ibv_query_qp_data_in_order(3), ibv_create_cq_ex(3), parent and thread domains
//! (ibv_alloc_parent_domain(3), ibv_alloc_td(3)) and their custom allocators
//! (`parent_domain_alloc`), completion channels, RC
//! traffic and error statuses, devices/contexts/object lifecycles, memory windows,
//! ibv_rereg_mr, XRC, the ibv_wr_* builder, UD multicast, sharing a context through its
//! command fd (`import`), many threads at once on shared CQs and an SRQ (`threads`) and the fault plan's
//! asynchronous events (of objects, and of the port and the device); `bad_args` is the
//! bad-argument matrix (one row per verb and case, each citing the source of its
//! expected errno), run under Valgrind's memcheck; `errno_kept` checks that verbs that
//! succeed leave the caller's `errno` alone.
//!
//! Missing compiler or header = failure, never a skip.

mod common;

use std::path::Path;

use common::{compile_and_run_c, compile_c, dropin_dir, run_c};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

fn compile_and_run(name: &str) {
    run_with(name, &[]);
}

/// Compiles and runs `name` with `env` set (and the variables that change the device's
/// behaviour removed otherwise, so the outcome does not depend on the caller's shell).
fn run_with(name: &str, env: &[(&str, &str)]) {
    assert!(
        Path::new(HEADER).is_file(),
        "{HEADER} missing: install libibverbs-dev"
    );
    // The tag names a directory of LD_LIBRARY_PATH, where ':' would split it.
    let tag: String = env.iter().map(|(k, v)| format!("_{k}={v}")).collect::<String>().replace([':', ','], "_");
    let dir = dropin_dir(&format!("c_{name}{tag}"));
    compile_and_run_c(name, &dir, &["-libverbs"], env);
}

#[test]
fn poll_cq() {
    compile_and_run("poll_cq");
}

#[test]
fn cq_ex() {
    compile_and_run("cq_ex");
}

#[test]
fn parent_domain() {
    compile_and_run("parent_domain");
}

#[test]
fn parent_domain_alloc() {
    compile_and_run("parent_domain_alloc");
}

#[test]
fn comp_channel() {
    compile_and_run("comp_channel");
}

/// With caller memory left where it is (`RVERBS_SHARED_MR=0`), regions are reached with
/// kernel copies, so UD SEND is not claimed in order.
#[test]
fn data_in_order() {
    run_with("data_in_order", &[("RVERBS_SHARED_MR", "0")]);
}

/// With shareable registrations no region is reached with kernel copies, so UD SEND is
/// claimed in order too.
#[test]
fn data_in_order_with_shareable_registrations() {
    run_with("data_in_order", &[("RVERBS_SHARED_MR", "1")]);
}

/// The fault plan's asynchronous events (docs/fault-injection.md) as a C program sees
/// them: CQ_ERR and QP_FATAL through ibv_get_async_event(3).
#[test]
fn fault_events() {
    run_with("fault_events", &[("RVERBS_FAULTS", "event=CQ_ERR:on=post_recv:nth=3,event=QP_FATAL:nth=2")]);
}

/// The fault plan's port and device events (docs/fault-injection.md): PORT_ERR on every
/// context and ibv_query_port DOWN, PORT_ACTIVE, DEVICE_FATAL with its flushes, EIO and
/// a clean teardown, as a C program sees them.
#[test]
fn device_events() {
    run_with(
        "device_events",
        &[("RVERBS_FAULTS", "event=PORT_ERR:on=open_device:nth=3,event=PORT_ACTIVE:on=post_recv:nth=1,event=DEVICE_FATAL:nth=1")],
    );
}

#[test]
fn rc_traffic() {
    compile_and_run("rc_traffic");
}

#[test]
fn objects() {
    compile_and_run("objects");
}

/// ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3) and their unimport calls
/// (docs/device.md, "Sharing a context through its command fd"); ECE not offered.
#[test]
fn import() {
    compile_and_run("import");
}

/// Device memory: ibv_alloc_dm, the inline copies, ibv_reg_dm_mr and a peer QP's WRITE
/// and READ through the zero-based region, ibv_free_dm's EBUSY (`tests/c/dm.c`).
#[test]
fn dm() {
    compile_and_run("dm");
}

/// Device memory and an implicit on-demand region of one process, reached by a forked
/// peer process's RC QP: WRITEs and a READ, the bytes checked on both sides
/// (`tests/c/peer_memory.c`).
#[test]
fn peer_memory() {
    compile_and_run("peer_memory");
}

/// Tag matching across two processes: eager, unexpected, rendezvous with its FIN,
/// NO_TAG, a tag removed before its message, phase sync and `ibv_wc_read_tm_info`
/// (`tests/c/tag_matching.c`, docs/tag-matching.md).
#[test]
fn tag_matching() {
    compile_and_run("tag_matching");
}

#[test]
fn mw() {
    compile_and_run("mw");
}

#[test]
fn rereg() {
    compile_and_run("rereg");
}

#[test]
fn xrc() {
    compile_and_run("xrc");
}

#[test]
fn wr_builder() {
    compile_and_run("wr_builder");
}

#[test]
fn mcast() {
    compile_and_run("mcast");
}

/// Threads at once (`tests/c/threads.c`): four requester threads on one send CQ that two
/// threads poll, an SRQ and a receive CQ drained through a completion channel, both CQs
/// and the SRQ resized and objects created and destroyed meanwhile; every completion
/// once, in each QP's order, with its bytes, immediate data and atomic original.
#[test]
fn threads() {
    compile_and_run("threads");
}

/// Foreign pointers (4 bytes before a PROT_NONE page, after one, a malloc(4), a stack
/// byte) and destroyed objects passed to every verb that takes an object: refused with
/// the verb's EINVAL, and nothing is read through them (a read would fault).
#[test]
fn foreign_ptr() {
    compile_and_run("foreign_ptr");
}

/// The bad-argument matrix (`tests/c/bad_args.c`): every row's errno, no partial side
/// effect, no crash; under Valgrind's memcheck (`--error-exitcode`: an invalid read or
/// write, in the program or in the library, fails the test; about 5 s).
#[test]
fn bad_args_under_valgrind() {
    assert!(
        Path::new("/usr/bin/valgrind").is_file(),
        "/usr/bin/valgrind missing: install valgrind"
    );
    let dir = dropin_dir("c_bad_args");
    let exe = compile_c("bad_args", &dir, &["-libverbs"]);
    run_c("bad_args", &exe, &dir, &["/usr/bin/valgrind", "-q", "--error-exitcode=99"], &[]);
}

/// A verb refused through the C ABI says why on stderr with `RVERBS_LOG=debug`: the
/// errno alone does not (ibv_rc_pingpong without `-g` only prints "Failed to modify QP
/// to RTR").
#[test]
fn bad_args_log_the_reason_with_rverbs_log_debug() {
    let dir = dropin_dir("c_bad_args_log");
    let exe = compile_c("bad_args", &dir, &["-libverbs"]);
    let (_, stderr) = run_c("bad_args", &exe, &dir, &[], &[("RVERBS_LOG", "debug")]);
    for reason in [
        "modify_qp: invalid argument: RoCE address vectors need a GRH",
        "unknown access flags 0x8000",
        "(errno 22)",
    ] {
        assert!(stderr.contains(reason), "no {reason:?} in the log:\n{stderr}");
    }
}

/// Verbs that succeed leave `errno` alone though UDP port 4791 was taken (the device's
/// bind failed with EADDRINUSE on the way, which the log shows).
#[test]
fn errno_kept_when_port_4791_is_taken() {
    let dir = dropin_dir("c_errno_kept");
    let exe = compile_c("errno_kept", &dir, &["-libverbs"]);
    let (_, stderr) = run_c("errno_kept", &exe, &dir, &[], &[("RVERBS_LOG", "rverbs=debug")]);
    assert!(
        stderr.contains("RoCEv2 port owned by another process"),
        "the device's bind of port 4791 did not fail, the test proves nothing:\n{stderr}"
    );
}
