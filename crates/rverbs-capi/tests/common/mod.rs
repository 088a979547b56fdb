//! Helpers shared by the integration tests that run programs against the built
//! `libibverbs.so` through `LD_LIBRARY_PATH` (no Debian consumer has an RPATH or RUNPATH).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built cdylib: cargo compiles the library once with both crate types, so
/// `target/<profile>/deps/libibverbs.so` is the build this test was linked with.
/// `RVERBS_CAPI_CDYLIB` overrides the path.
pub fn our_lib() -> PathBuf {
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

/// A directory (one per test: they run in parallel) holding `libibverbs.so.1` (and the
/// link-time name `libibverbs.so`) -> the built cdylib.
pub fn dropin_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("dropin")
        .join(test);
    std::fs::create_dir_all(&dir).expect("create drop-in dir");
    for name in ["libibverbs.so.1", "libibverbs.so"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(our_lib(), &link).expect("symlink the cdylib");
    }
    dir
}

/// Runs `program` with `LD_LIBRARY_PATH=dir`; fails if it could not load against the
/// drop-in. Returns the output and its stdout/stderr as text.
pub fn run(
    dir: &Path,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Output, String, String) {
    assert!(
        Path::new(program).is_file(),
        "{program} is missing (install ibverbs-utils, perftest, python3-pyverbs, libibverbs-dev)"
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

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// Compiles `tests/c/<name>.c` into `dir` (gnu11, warnings are errors) linked with `libs`
/// from `dir`; returns the executable.
pub fn compile_c(name: &str, dir: &Path, libs: &[&str]) -> PathBuf {
    let src = repo_root().join("tests/c").join(format!("{name}.c"));
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-pthread", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-L")
        .arg(dir)
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(out.status.success(), "{cc} {}:\n{}", src.display(), String::from_utf8_lossy(&out.stderr));
    exe
}

/// Runs `exe` (under `wrapper`, e.g. valgrind, if not empty) on the libraries of `dir`
/// with `env` set (and the variables that change the device's behaviour removed
/// otherwise), bounded by `timeout 120`; asserts that it exits 0, prints
/// `# <name>: all checks passed` and no `FAIL`. Returns stdout and stderr.
pub fn run_c(name: &str, exe: &Path, dir: &Path, wrapper: &[&str], env: &[(&str, &str)]) -> (String, String) {
    // `timeout` bounds a hang (a bug) without timing anything that passes.
    let out = Command::new("timeout")
        .arg("120")
        .args(wrapper)
        .arg(exe)
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("RVERBS_SHARED_MR")
        .env_remove("RVERBS_CMA")
        .env_remove("RVERBS_LOG")
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name} failed ({}):\n{stdout}{stderr}", out.status);
    assert!(
        stdout.contains(&format!("# {name}: all checks passed")),
        "{name} did not finish:\n{stdout}{stderr}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    (stdout, stderr)
}

/// Compiles `tests/c/<name>.c` into `dir` linked with `libs` from `dir` and runs it there
/// with `env` set (`compile_c`, `run_c`).
pub fn compile_and_run_c(name: &str, dir: &Path, libs: &[&str], env: &[(&str, &str)]) {
    let exe = compile_c(name, dir, libs);
    run_c(name, &exe, dir, &[], env);
}
