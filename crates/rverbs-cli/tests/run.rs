//! `rverbs run` (docs/environment.md, "The launcher: rverbs run"), run as a user runs
//! it: the built `rverbs` executable, a program after `--`, and what that program sees
//! (its environment, its exit status, the drop-in device, the paths of the private mount
//! namespace) and what the host keeps.
//!
//! The drop-in libraries are the ones cargo builds for this package's dev-dependencies
//! (`rverbs-capi`, `rverbs-rdmacm`), put in a directory under their loader names, as the
//! other crates' tests do.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RVERBS: &str = env!("CARGO_BIN_EXE_rverbs");

/// A built library next to this test binary (cargo builds each dev-dependency's cdylib
/// into `target/<profile>/deps`).
fn built(file: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let candidates = [deps.join(file), deps.join("..").join(file)];
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!("{file} not found at {candidates:?}: run through `cargo test -p rverbs-cli`, which builds it")
    })
}

/// A fresh directory under the target's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// A drop-in directory: `libibverbs.so.1` and `librdmacm.so.1` -> the built libraries.
fn dropin(test: &str) -> PathBuf {
    let dir = scratch(&format!("{test}-dropin"));
    for (name, file) in [("libibverbs.so.1", "libibverbs.so"), ("librdmacm.so.1", "librdmacm.so")] {
        std::os::unix::fs::symlink(built(file), dir.join(name)).expect("symlink a built library");
    }
    dir
}

/// Runs `rverbs run --lib-dir <dropin> ARGS…` bounded by timeout(1).
fn run_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("timeout")
        .args(["60", RVERBS, "run", "--lib-dir"])
        .arg(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run rverbs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn assert_ran(out: &Output) -> String {
    assert!(out.status.success(), "{}: {}{}", out.status, text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn run_puts_the_dropin_first_in_ld_library_path_and_keeps_the_callers() {
    let dir = dropin("ldpath");
    let abs = dir.canonicalize().unwrap();
    let out = run_with(&dir, &["--", "sh", "-c", "echo \"$LD_LIBRARY_PATH\""], &[("LD_LIBRARY_PATH", "/x:/y")]);
    assert_eq!(assert_ran(&out).trim(), format!("{}:/x:/y", abs.display()));
    let out = run_with(&dir, &["--", "sh", "-c", "echo \"$LD_LIBRARY_PATH\""], &[("LD_LIBRARY_PATH", "")]);
    assert_eq!(assert_ran(&out).trim(), abs.display().to_string());
}

/// A copy of the `rverbs` executable at `dir/rel` (a hard link where possible), so that
/// its own directory is `dir/…`.
fn rverbs_at(dir: &Path, rel: &str) -> PathBuf {
    let exe = dir.join(rel);
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    if std::fs::hard_link(RVERBS, &exe).is_err() {
        std::fs::copy(RVERBS, &exe).expect("copy the rverbs executable");
    }
    exe
}

#[test]
fn run_finds_the_dropin_beside_in_lib_rverbs_and_in_the_cargo_dropin_dir() {
    for (case, libs) in [("beside", "bin"), ("install", "lib/rverbs"), ("cargo", "dropin")] {
        let root = scratch(&format!("find-{case}"));
        let exe = rverbs_at(&root, "bin/rverbs");
        let libs = root.join(libs);
        std::fs::create_dir_all(&libs).unwrap();
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            std::fs::write(libs.join(name), b"").unwrap();
        }
        let out = Command::new(&exe)
            .args(["run", "--no-namespace", "--", "sh", "-c", "echo \"$LD_LIBRARY_PATH\""])
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap();
        assert_eq!(assert_ran(&out).trim(), libs.canonicalize().unwrap().display().to_string(), "{case}");
    }
}

#[test]
fn run_without_a_dropin_says_where_it_looked_and_runs_nothing() {
    let root = scratch("find-none");
    let exe = rverbs_at(&root, "bin/rverbs");
    // Only one of the two libraries: not a drop-in directory.
    std::fs::write(root.join("bin/libibverbs.so.1"), b"").unwrap();
    let marker = root.join("ran");
    let out = Command::new(&exe)
        .args(["run", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!marker.exists(), "the program ran");
    for looked in ["bin", "bin/../lib/rverbs", "bin/../dropin"] {
        assert!(err.contains(&root.join(looked).display().to_string()), "{looked} not named: {err}");
    }
    assert!(err.contains("scripts/build-dropin.sh") && err.contains("--lib-dir"), "{err}");
    // The same for a --lib-dir without the libraries.
    let out = Command::new(&exe).args(["run", "--lib-dir"]).arg(&root).args(["--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("libibverbs.so.1 or librdmacm.so.1"), "{}", text(&out.stderr));
}

#[test]
fn faults_spec_is_checked_before_the_program_runs_and_reaches_it() {
    let dir = dropin("faults");
    let marker = scratch("faults").join("ran");
    let out = run_with(&dir, &["--faults", "seed=7,dorp=1%", "--", "touch", marker.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("dorp=1%"), "{}", text(&out.stderr));
    assert!(!marker.exists(), "the program ran despite a bad --faults");
    let out = run_with(&dir, &["--faults", "seed=7,drop=1%", "--", "sh", "-c", "echo \"$RVERBS_FAULTS\""], &[]);
    assert_eq!(assert_ran(&out).trim(), "seed=7,drop=1%");
    // The verb plan's items (docs/fault-injection.md) are checked too: an error the verb
    // never returns is refused up front, a good item goes through.
    let out = run_with(&dir, &["--faults", "fail=reg_mr:EBADF", "--", "touch", marker.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ibv_reg_mr does not return `EBADF`"), "{}", text(&out.stderr));
    assert!(!marker.exists(), "the program ran despite a bad --faults");
    let out = run_with(&dir, &["--faults", "fail=reg_mr:ENOMEM:nth=2", "--", "sh", "-c", "echo \"$RVERBS_FAULTS\""], &[]);
    assert_eq!(assert_ran(&out).trim(), "fail=reg_mr:ENOMEM:nth=2");
}

#[test]
fn sanitize_sets_rverbs_sanitize() {
    let dir = dropin("sanitize");
    let show = ["sh", "-c", "echo \"${RVERBS_SANITIZE-unset}\""];
    for (flag, want) in [(None, "unset"), (Some("--sanitize"), "1"), (Some("--sanitize=abort"), "abort")] {
        let args: Vec<&str> = flag.into_iter().chain(["--"]).chain(show).collect();
        let out = run_with(&dir, &args, &[]);
        assert_eq!(assert_ran(&out).trim(), want, "{flag:?}");
    }
    let out = run_with(&dir, &["--sanitize=loud", "--", "true"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sanitize_preloads_the_free_watch_of_the_dropin_dir_before_the_callers() {
    let dir = dropin("free-watch");
    let show = ["--", "sh", "-c", "echo \"${LD_PRELOAD-unset}\""];
    let caller = [("LD_PRELOAD", "/nonexistent/a.so")];
    // No watch in the directory: the caller's preload as it was.
    let out = run_with(&dir, &[&["--sanitize"][..], &show].concat(), &caller);
    assert_eq!(assert_ran(&out).trim(), "/nonexistent/a.so");
    // With one (an empty stand-in: ld.so says it cannot preload it and goes on), first;
    // without --sanitize, never.
    let watch = dir.join("librverbs_free.so");
    std::fs::write(&watch, b"").unwrap();
    let out = run_with(&dir, &[&["--sanitize"][..], &show].concat(), &caller);
    assert_eq!(assert_ran(&out).trim(), format!("{}:/nonexistent/a.so", watch.display()));
    let out = run_with(&dir, &show, &[]);
    assert_eq!(assert_ran(&out).trim(), "unset");
}

#[test]
fn the_programs_exit_status_and_signal_come_back() {
    let dir = dropin("status");
    assert_eq!(run_with(&dir, &["--", "sh", "-c", "exit 0"], &[]).status.code(), Some(0));
    assert_eq!(run_with(&dir, &["--", "sh", "-c", "exit 3"], &[]).status.code(), Some(3));
    // rverbs execs the program: a signal that ends it ends the process the caller waits
    // for, and a shell reports it as 128 + its number.
    let out = Command::new(RVERBS)
        .args(["run", "--lib-dir"])
        .arg(&dir)
        .args(["--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(15), "{}", out.status);
    let out = Command::new("sh")
        .args(["-c", "\"$0\" run --lib-dir \"$1\" -- sh -c 'kill -KILL $$'; echo $?", RVERBS])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "137");
}

#[test]
fn the_program_starts_with_sigpipe_at_its_default() {
    // The Rust runtime ignores SIGPIPE; an exec'd program must not inherit that (`yes |
    // head` would print an error instead of ending quietly).
    let out = run_with(&dropin("sigpipe"), &["--", "grep", "^SigIgn:", "/proc/self/status"], &[]);
    let line = assert_ran(&out);
    let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).expect(&line);
    assert_eq!(mask & (1 << (13 - 1)), 0, "SIGPIPE ignored in the program: {line}");
}

#[test]
fn a_missing_or_unexecutable_program_is_a_clear_error() {
    let dir = dropin("missing");
    let out = run_with(&dir, &["--", "no-such-program-rverbs-run"], &[]);
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("no-such-program-rverbs-run: command not found in PATH"), "{}", text(&out.stderr));
    let out = run_with(&dir, &["--", "/nonexistent/prog"], &[]);
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("/nonexistent/prog"), "{}", text(&out.stderr));
    let plain = scratch("missing").join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_with(&dir, &["--", plain.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(126));
    assert!(text(&out.stderr).contains("not an executable file"), "{}", text(&out.stderr));
}

#[test]
fn ibv_devices_lists_rverbs0_under_rverbs_run() {
    let prog = "/usr/bin/ibv_devices";
    assert!(Path::new(prog).is_file(), "{prog} is missing (apt-get install ibverbs-utils; .ci/run installs it)");
    let runtime = scratch("ibv_devices-runtime");
    let out = run_with(&dropin("ibv_devices"), &["--", "ibv_devices"], &[("RVERBS_RUNTIME_DIR", runtime.to_str().unwrap())]);
    let stdout = assert_ran(&out);
    assert!(stdout.lines().any(|l| l.split_whitespace().next() == Some("rverbs0")), "{stdout}");
}

/// What the host's mounts, /dev and /sys/class look like (to compare before and after).
fn host_view() -> (String, Vec<PathBuf>, Vec<PathBuf>, bool) {
    let ls = |d: &str| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    (
        std::fs::read_to_string("/proc/self/mountinfo").unwrap(),
        ls("/dev"),
        ls("/sys/class"),
        Path::new("/sys/class/infiniband/rverbs0").exists(),
    )
}

/// The interface name of `ifindex` (/sys/class/net/*/ifindex).
fn ifname(ifindex: u32) -> Option<String> {
    std::fs::read_dir("/sys/class/net").ok()?.flatten().find_map(|e| {
        let ix: u32 = std::fs::read_to_string(e.path().join("ifindex")).ok()?.trim().parse().ok()?;
        (ix == ifindex).then(|| e.file_name().to_string_lossy().into_owned())
    })
}

/// The script the namespace tests run: the uverbs node's type and numbers, then
/// `index type ndev` for each GID the device's own table has.
fn namespace_probe(gids: &[rverbs::GidEntry]) -> String {
    let mut s = String::from("stat -L -c '%F %t:%T' /dev/infiniband/uverbs0\n");
    for g in gids {
        let d = format!("/sys/class/infiniband/rverbs0/ports/{}/gid_attrs", g.port);
        s += &format!("echo \"{} $(cat {d}/types/{}) $(cat {d}/ndevs/{})\"\n", g.index, g.index, g.index);
    }
    s
}

/// What [`namespace_probe`] prints when the paths are there.
fn namespace_expected(gids: &[rverbs::GidEntry]) -> String {
    let mut s = String::from("character special file 1:3\n");
    for g in gids {
        let ty = match g.gid_type {
            rverbs::GidType::RoceV2 => "RoCE v2",
            rverbs::GidType::Ib | rverbs::GidType::RoceV1 => "IB/RoCE v1",
        };
        s += &format!("{} {ty} {}\n", g.index, ifname(g.ifindex).expect("the GID's interface has a name"));
    }
    s
}

fn gid_table() -> Vec<rverbs::GidEntry> {
    let ctx = rverbs::devices().unwrap()[0].open().unwrap();
    let gids: Vec<_> = ctx.query_gid_table().into_iter().filter(|g| !g.gid.is_zero()).collect();
    assert!(!gids.is_empty(), "the device has no GID");
    gids
}

#[test]
fn run_gives_the_program_uverbs0_and_gid_attrs_and_leaves_the_host_unchanged() {
    let gids = gid_table();
    let before = host_view();
    let dir = dropin("namespace");
    let out = run_with(&dir, &["--", "sh", "-c", &namespace_probe(&gids)], &[]);
    let stderr = text(&out.stderr);
    if rustix::process::geteuid().is_root() {
        assert_eq!(assert_ran(&out), namespace_expected(&gids), "{stderr}");
        assert!(!stderr.contains("without"), "{stderr}");
    } else {
        // Not root: a user namespace where the kernel allows one, else one line saying
        // what is missing; the program runs either way.
        assert!(
            out.stdout == namespace_expected(&gids).as_bytes() || stderr.contains("rverbs run: running sh without"),
            "{}\n{stderr}",
            text(&out.stdout)
        );
    }
    assert!(before == host_view(), "the host's mounts, /dev or /sys/class changed");
    // --no-namespace: the host's view, nothing added.
    let out = run_with(&dir, &["--no-namespace", "--", "sh", "-c", "test -e /sys/class/infiniband/rverbs0 && echo present || echo absent"], &[]);
    assert_eq!(assert_ran(&out).trim(), if before.3 { "present" } else { "absent" });
}

#[test]
fn in_the_namespace_dev_and_sys_class_are_still_the_hosts() {
    // /dev/null opens for writing with O_CREAT (every shell's `>`), /dev/shm is the host's
    // (the default runtime directory of the device is there), /sys/class/net lists the
    // host's interfaces.
    let shm = Path::new("/dev/shm").join(format!("rverbs-run-test-{}", std::process::id()));
    let script = format!("echo x > /dev/null && echo null-ok; echo shared > {}; ls /sys/class/net", shm.display());
    let out = run_with(&dropin("host-paths"), &["--", "sh", "-c", &script], &[]);
    let stdout = assert_ran(&out);
    let written = std::fs::read_to_string(&shm);
    let _ = std::fs::remove_file(&shm);
    assert_eq!(written.ok().as_deref(), Some("shared\n"), "/dev/shm in the namespace is not the host's");
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("null-ok"));
    let mut inside: Vec<&str> = lines.collect();
    inside.sort_unstable();
    let mut host: Vec<String> =
        std::fs::read_dir("/sys/class/net").unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    host.sort_unstable();
    assert_eq!(inside, host);
}

#[test]
fn rootless_run_uses_a_user_namespace_or_says_why() {
    if !rustix::process::geteuid().is_root() {
        // Already unprivileged: the namespace test above covers this case.
        return;
    }
    let setpriv = "/usr/bin/setpriv";
    assert!(Path::new(setpriv).is_file(), "{setpriv} is missing (util-linux)");
    // Everything nobody needs, in a directory nobody can reach (the target directory may
    // not be): the executable, placeholder libraries (sh loads neither), a runtime dir.
    let root = std::env::temp_dir().join(format!("rverbs-run-rootless-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::create_dir_all(root.join("runtime")).unwrap();
    let exe = root.join("rverbs");
    std::fs::copy(RVERBS, &exe).unwrap();
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        std::fs::write(root.join("lib").join(name), b"").unwrap();
    }
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(root.join("runtime"), Some(65534), Some(65534)).unwrap();
    let gids = gid_table();
    let out = Command::new("timeout")
        .args(["60", setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .arg("run")
        .arg("--lib-dir")
        .arg(root.join("lib"))
        .args(["--", "sh", "-c"])
        .arg(format!("id -u; {}", namespace_probe(&gids)))
        .env("RVERBS_RUNTIME_DIR", root.join("runtime"))
        .current_dir(&root)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&root);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{}: {stdout}{stderr}", out.status);
    let rest = stdout.strip_prefix("65534\n").unwrap_or_else(|| panic!("not run as nobody: {stdout}"));
    if rest == namespace_expected(&gids) {
        assert!(!stderr.contains("without"), "{stderr}");
    } else {
        // The kernel (or a security module) refuses unprivileged user namespaces: the
        // program ran all the same, and one line says so, with both refusals.
        assert!(
            stderr.contains("rverbs run: running sh without") && stderr.contains("with a user namespace"),
            "{stdout}\n{stderr}"
        );
    }
}

#[test]
fn without_any_namespace_the_program_runs_and_one_line_says_why() {
    if !rustix::process::geteuid().is_root() {
        return; // the rootless case of the namespace test above covers it
    }
    // A user namespace (unshare -r) that allows no further one, and a program without
    // CAP_SYS_ADMIN in it: both unshare calls of rverbs run are refused.
    let unshare = "/usr/bin/unshare";
    assert!(Path::new(unshare).is_file(), "{unshare} is missing (util-linux)");
    let dir = dropin("no-namespace-possible");
    let out = Command::new("timeout")
        .args(["60", unshare, "-r", "sh", "-c"])
        .arg(
            "echo 0 > /proc/sys/user/max_user_namespaces && \
             exec setpriv --bounding-set=-sys_admin \"$0\" run --lib-dir \"$1\" -- sh -c 'echo ran; exit 4'",
        )
        .arg(RVERBS)
        .arg(&dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(4), "{stdout}{stderr}");
    assert_eq!(stdout, "ran\n");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    for part in [
        "rverbs run: running sh without /dev/infiniband/uverbs*, /sys/class/infiniband/{rverbs0}",
        "unshare(CLONE_NEWNS): Operation not permitted",
        "with a user namespace: No space left on device",
    ] {
        assert!(lines[0].contains(part), "{part:?} not in {stderr}");
    }
}
