//! rdma-core 44's pyverbs suite (Debian python3-pyverbs) over the drop-in, through
//! `tests/conformance/run_pyverbs.sh` (rdma-core `tests/run_tests.py`), on the generic
//! verbs modules. Every test must pass or skip with EOPNOTSUPP-style reasons listed in
//! `tests/conformance/README.md`; `MIN_PASSED` is the floor that catches a regression
//! turning passes into skips (raise it as features land).

mod common;

use common::{dropin_dir, repo_root, run};

/// Passing tests over the module set below, as of the last measurement (131 passed,
/// 0 failed, 20 skipped: device-memory import, dma-buf, raw packet QPs, one GID-table
/// bad flow, the parent-domain and two ODP tests that need 2 MiB huge pages;
/// tests/conformance/README.md).
const MIN_PASSED: &str = "131";

#[test]
fn pyverbs_suite_passes() {
    let dir = dropin_dir("pyverbs_suite_passes");
    let script = repo_root().join("tests/conformance/run_pyverbs.sh");
    let script = script.to_str().expect("utf-8 path");
    let dir_arg = dir.to_str().expect("utf-8 path");
    let (out, stdout, stderr) = run(
        &dir,
        script,
        &[
            dir_arg,
            "rverbs0",
            MIN_PASSED,
            "test_device",
            "test_pd",
            "test_cq",
            "test_cq_events",
            "test_cqex",
            "test_qp",
            "test_qpex",
            "test_mr",
            "test_atomic",
            "test_addr",
            "test_fork",
            "test_parent_domain",
            "test_odp",
            "test_tag_matching",
            "test_shared_pd",
        ],
        &[],
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(out.status.success(), "{summary}\n{stdout}\n{stderr}");
    assert!(summary.contains(" passed, 0 failed, "), "{summary}");
}
