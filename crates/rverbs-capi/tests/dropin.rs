//! Unmodified Debian 12 binaries *load* against the built library via `LD_LIBRARY_PATH`
//! and run into it (reference §1, §2): every import of every object they pull in —
//! including the real `libmlx5.so.1`/`libefa.so.1` that perftest `NEEDED`s, all linked
//! `-z now` — must resolve with the right version. No device exists yet, so each program
//! ends with the skeleton's "Operation not supported".
//!
//! Needs ibverbs-utils, perftest and python3-pyverbs (the project's target environment);
//! a missing program is a failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn our_lib() -> PathBuf {
    if let Some(path) = std::env::var_os("RVERBS_CAPI_CDYLIB") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    [deps.join("libibverbs.so"), deps.join("../libibverbs.so")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("built cdylib not found next to the test binary")
}

/// A directory (one per test: they run in parallel) holding `libibverbs.so.1` -> the
/// built cdylib.
fn dropin_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("dropin")
        .join(test);
    std::fs::create_dir_all(&dir).expect("create drop-in dir");
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(our_lib(), &link).expect("symlink libibverbs.so.1");
    dir
}

fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, String, String) {
    assert!(
        Path::new(program).is_file(),
        "{program} is missing (install ibverbs-utils, perftest, python3-pyverbs)"
    );
    let out = Command::new(program)
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains("symbol lookup error") && !text.contains("not found (required by"),
            "{program} failed to load against the drop-in:\n{text}"
        );
    }
    (out, stdout, stderr)
}

#[test]
fn ibv_devices_loads_and_reaches_the_skeleton() {
    let dir = dropin_dir("ibv_devices_loads_and_reaches_the_skeleton");
    let (out, _, stderr) = run(&dir, "/usr/bin/ibv_devices", &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Failed to get IB devices list: Operation not supported"),
        "{stderr}"
    );
}

#[test]
fn ibv_devinfo_loads_and_reaches_the_skeleton() {
    let dir = dropin_dir("ibv_devinfo_loads_and_reaches_the_skeleton");
    let (_, _, stderr) = run(&dir, "/usr/bin/ibv_devinfo", &[], &[]);
    assert!(
        stderr.contains("Failed to get IB devices list: Operation not supported"),
        "{stderr}"
    );
}

#[test]
fn perftest_loads_with_real_mlx5_and_efa_providers() {
    let dir = dropin_dir("perftest_loads_with_real_mlx5_and_efa_providers");
    let (out, stdout, stderr) = run(
        &dir,
        "/usr/bin/ib_write_bw",
        &["-h"],
        &[("LD_DEBUG", "bindings")],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "ib_write_bw -h exits 1, as with rdma-core"
    );
    assert!(stdout.contains("Usage:"), "{stdout}");
    // The providers' ELF constructors called our no-op verbs_register_driver_34.
    let ours = dir.join("libibverbs.so.1");
    for provider in ["libmlx5.so.1", "libefa.so.1"] {
        let bound = stderr.lines().any(|l| {
            l.contains(provider)
                && l.contains(&format!("to {}", ours.display()))
                && l.contains("`verbs_register_driver_34' [IBVERBS_PRIVATE_34]")
        });
        assert!(
            bound,
            "{provider} did not bind verbs_register_driver_34 to the drop-in"
        );
    }
}

#[test]
fn pyverbs_imports() {
    let dir = dropin_dir("pyverbs_imports");
    let (out, _, stderr) = run(
        &dir,
        "/usr/bin/python3",
        &[
            "-c",
            "import pyverbs.device, pyverbs.pd, pyverbs.cq, pyverbs.qp, pyverbs.mr",
        ],
        &[],
    );
    assert!(out.status.success(), "{stderr}");
}
