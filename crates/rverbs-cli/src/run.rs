//! `rverbs run [--sanitize[=abort]] [--faults SPEC] -- PROGRAM [ARGS…]`: runs an
//! unmodified program on the drop-in `libibverbs.so.1` and `librdmacm.so.1`
//! (docs/environment.md, "The launcher: rverbs run").
//!
//! In order, before anything runs: the drop-in directory is found (or the command says
//! where it looked), the fault spec is parsed (`rverbs_proto::fault`, the parser
//! `RVERBS_FAULTS` goes through), the program is looked up in `PATH`; then the GID table
//! is read (in a child process: the device starts a progress thread, and the launcher
//! must stay single-threaded to enter a user namespace), the private mount namespace is
//! entered ([`crate::namespace`]) and the launcher `execve`s the program. The program
//! keeps the launcher's process id, so its exit status, or the signal that ended it, is
//! what the caller sees (a shell reports a signal as 128 + its number), and signals sent
//! to that process id reach the program.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::namespace::{self, SysfsDevice, SysfsGid};

/// Exit status when the launcher itself fails before the program runs (as env(1) and
/// timeout(1) use it).
pub const EXIT_LAUNCHER: u8 = 125;
/// Exit status when the program was found but could not be executed (as a shell).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit status when the program was not found (as a shell).
pub const EXIT_NOT_FOUND: u8 = 127;

/// The drop-in libraries, by the names the dynamic loader looks for.
pub const LIBS: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// The name of the hidden subcommand that prints the GID table for [`sysfs_devices`].
pub const SYSFS_ATTRS: &str = "sysfs-attrs";

/// What `--sanitize` sets `RVERBS_SANITIZE` to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sanitize {
    /// `RVERBS_SANITIZE=1`: report every finding on stderr, the program continues.
    Report,
    /// `RVERBS_SANITIZE=abort`: the first finding ends the program.
    Abort,
}

impl Sanitize {
    fn value(self) -> &'static str {
        match self {
            Sanitize::Report => "1",
            Sanitize::Abort => "abort",
        }
    }
}

/// The options of `rverbs run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Switch the verbs sanitizer on for the program: sets RVERBS_SANITIZE=1 (report every
    /// finding on stderr), or =abort (the first finding ends the program).
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "report", value_name = "MODE")]
    pub sanitize: Option<Sanitize>,
    /// Inject faults: sets RVERBS_FAULTS=SPEC for the program (docs/environment.md), after
    /// checking SPEC, so that a typo stops here and not in the program.
    #[arg(long, value_name = "SPEC", value_parser = parse_faults)]
    pub faults: Option<String>,
    /// The directory holding libibverbs.so.1 and librdmacm.so.1 (default: beside the
    /// rverbs executable, its ../lib/rverbs/, or <cargo target>/dropin/).
    #[arg(long, value_name = "DIR")]
    pub lib_dir: Option<PathBuf>,
    /// Run the program in the caller's mount namespace, without /dev/infiniband/uverbs0 and
    /// /sys/class/infiniband/rverbs0.
    #[arg(long)]
    pub no_namespace: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM [ARGS]")]
    pub command: Vec<OsString>,
}

/// The `--help` text after the options.
pub const AFTER_HELP: &str = "\
The program runs with the drop-in directory first in LD_LIBRARY_PATH (the caller's value
kept after it) and keeps rverbs' process id (rverbs execs it): its exit status, or the
signal that ended it, is rverbs run's. rverbs run's own failures exit 2 (a usage error,
a --faults spec that does not parse among them), 125 (no drop-in libraries), 126 (the
program cannot be executed) or 127 (not found), before the program starts.

Programs written for a kernel RDMA device look for paths the kernel creates: UCX wants
/dev/infiniband/uverbs0 and reads /sys/class/infiniband/rverbs0/ports/1/gid_attrs; pyverbs
reads /sys/class/infiniband/rverbs0/device/net/. rverbs run gives the program those paths
in a private mount namespace (as root; otherwise in a user namespace where the kernel
allows one, the caller's uid and gid mapped to themselves), from the device's own GID
table. Nothing outside the program sees them. This is what a test harness would set up,
not behaviour of the library, which never reads them. Where no namespace can be made the
program runs without them and one line on stderr says which are missing and why.
docs/environment.md, \"The launcher: rverbs run\", has the details.";

/// Checks a fault spec with the parsers `RVERBS_FAULTS` goes through: the packet faults
/// and the verb plan (docs/fault-injection.md).
fn parse_faults(spec: &str) -> Result<String, String> {
    rverbs::FaultConfig::parse(spec).map_err(|e| e.to_string())?;
    rverbs::VerbPlan::parse(spec).map_err(|e| e.to_string())?;
    Ok(spec.to_string())
}

/// Where the drop-in libraries are looked for, relative to the directory of the `rverbs`
/// executable: that directory, `../lib/rverbs/` (an install), `../dropin/` (the cargo
/// target layout scripts/build-dropin.sh makes: `<target>/release/rverbs`,
/// `<target>/dropin/`).
pub fn candidate_dirs(exe_dir: &Path) -> [PathBuf; 3] {
    [exe_dir.to_path_buf(), exe_dir.join("../lib/rverbs"), exe_dir.join("../dropin")]
}

/// The libraries of [`LIBS`] missing from `dir`.
fn missing_libs(dir: &Path) -> Vec<&'static str> {
    LIBS.iter().copied().filter(|l| !dir.join(l).is_file()).collect()
}

/// The drop-in directory, absolute (the program may change directory before it loads a
/// library): `explicit` if given, else the first of [`candidate_dirs`] holding both
/// libraries. There is no fallback to the system's libraries.
pub fn find_lib_dir(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(dir) = explicit {
        let missing = missing_libs(dir);
        if !missing.is_empty() {
            return Err(format!(
                "--lib-dir {}: no {} there (scripts/build-dropin.sh builds them and prints their directory)",
                dir.display(),
                missing.join(" or ")
            ));
        }
        return std::fs::canonicalize(dir).map_err(|e| format!("--lib-dir {}: {e}", dir.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the rverbs executable: {e}"))?;
    let exe_dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = candidate_dirs(exe_dir);
    for dir in &candidates {
        if missing_libs(dir).is_empty() {
            if let Ok(abs) = std::fs::canonicalize(dir) {
                return Ok(abs);
            }
        }
    }
    let looked: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "the drop-in libraries ({}) are in none of {}; build them with scripts/build-dropin.sh \
         (it puts them in <target>/dropin/, beside <target>/release/rverbs), or name their directory with --lib-dir",
        LIBS.join(", "),
        looked.join(", ")
    ))
}

/// Is `p` a regular file with an execute bit?
fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `program` as execvp(3) would (a name with a `/` is a path; otherwise the first
/// executable file of that name in `PATH`); the error is the exit status and the message.
pub fn resolve_program(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, (u8, String)> {
    let shown = Path::new(program).display();
    if program.as_bytes().contains(&b'/') {
        let p = Path::new(program);
        return match std::fs::metadata(p) {
            Err(e) => Err((EXIT_NOT_FOUND, format!("{shown}: {e}"))),
            Ok(_) if !is_executable(p) => Err((EXIT_CANNOT_EXECUTE, format!("{shown}: not an executable file"))),
            Ok(_) => Ok(p.to_path_buf()),
        };
    }
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err((EXIT_NOT_FOUND, format!("{shown}: command not found in PATH")))
}

/// The verbs sanitizer's watch of free(3) in the drop-in directory (docs/sanitizer.md,
/// mr-memory-freed), preloaded under `--sanitize`.
pub const FREE_WATCH: &str = "librverbs_free.so";

/// `LD_PRELOAD` with `lib` first and the caller's value (if any) after it (ld.so(8):
/// entries are separated by spaces or colons).
pub fn preload(lib: &Path, old: Option<&OsStr>) -> OsString {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// `LD_LIBRARY_PATH` with `dir` first and the caller's value (if any) after it.
pub fn library_path(dir: &Path, old: Option<&OsStr>) -> OsString {
    let mut v = dir.as_os_str().to_os_string();
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// Prints the GID table for [`sysfs_devices`], one line per device (`device INDEX NAME`)
/// and per non-empty GID (`gid PORT INDEX GID NDEV TYPE`, NDEV `-` when the interface has
/// no name); the hidden subcommand `sysfs-attrs`.
pub fn print_sysfs_attrs() -> Result<(), rverbs::Error> {
    let names = interface_names();
    for (i, d) in rverbs::devices()?.iter().enumerate() {
        let ctx = d.open()?;
        println!("device {i} {}", ctx.device_name());
        for e in ctx.query_gid_table() {
            if e.gid.is_zero() {
                continue;
            }
            let ndev = names.iter().find(|(ix, _)| *ix == e.ifindex).map_or("-", |(_, n)| n.as_str());
            // The kernel's gid_attrs/types: "IB/RoCE v1" for IB and RoCE v1 GIDs.
            let ty = match e.gid_type {
                rverbs::GidType::RoceV2 => "RoCE v2",
                rverbs::GidType::Ib | rverbs::GidType::RoceV1 => "IB/RoCE v1",
            };
            println!("gid {} {} {} {ndev} {ty}", e.port, e.index, e.gid);
        }
    }
    Ok(())
}

/// The host's network interfaces as (ifindex, name), from /sys/class/net/*/ifindex.
fn interface_names() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else { return Vec::new() };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let ix = std::fs::read_to_string(e.path().join("ifindex")).ok()?.trim().parse().ok()?;
        Some((ix, e.file_name().to_string_lossy().into_owned()))
    })
    .collect()
}

/// Parses the output of [`print_sysfs_attrs`].
pub fn parse_sysfs_attrs(text: &str) -> Result<Vec<SysfsDevice>, String> {
    let mut devices: Vec<SysfsDevice> = Vec::new();
    for line in text.lines() {
        let bad = || format!("unexpected line from `rverbs {SYSFS_ATTRS}`: {line:?}");
        let mut f = line.splitn(6, ' ');
        match f.next() {
            Some("device") => {
                let index = f.next().and_then(|i| i.parse().ok()).ok_or_else(bad)?;
                let name = f.next().filter(|n| !n.is_empty()).ok_or_else(bad)?.to_string();
                devices.push(SysfsDevice { index, name, gids: Vec::new() });
            }
            Some("gid") => {
                let port = f.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
                let index = f.next().and_then(|i| i.parse().ok()).ok_or_else(bad)?;
                let gid = f.next().and_then(|g| g.parse().ok()).ok_or_else(bad)?;
                let ndev = f.next().ok_or_else(bad)?;
                let gid_type = f.next().filter(|t| !t.is_empty()).ok_or_else(bad)?.to_string();
                let ndev = (ndev != "-").then(|| ndev.to_string());
                devices.last_mut().ok_or_else(bad)?.gids.push(SysfsGid { port, index, gid, gid_type, ndev });
            }
            _ => return Err(bad()),
        }
    }
    Ok(devices)
}

/// The device's GID table, from this executable's hidden `sysfs-attrs` subcommand run as
/// a child process: opening the device starts its progress thread and an endpoint, which
/// the launcher must not have (it enters a user namespace, which needs a single thread,
/// and then becomes the program). The child gets no network transport and none of the
/// variables that would make it write or inject anything.
fn sysfs_devices() -> Result<Vec<SysfsDevice>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the rverbs executable: {e}"))?;
    let out = Command::new(exe)
        .arg(SYSFS_ATTRS)
        .env("RVERBS_NET", "off")
        .env_remove("RVERBS_FAULTS")
        .env_remove("RVERBS_PCAP")
        .env_remove("RVERBS_SANITIZE")
        .env_remove("RVERBS_LOG")
        .output()
        .map_err(|e| format!("cannot run `rverbs {SYSFS_ATTRS}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`rverbs {SYSFS_ATTRS}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_sysfs_attrs(&String::from_utf8_lossy(&out.stdout))
}

/// `rverbs run`: returns only when the program could not be started.
pub fn launch(args: RunArgs) -> ExitCode {
    let fail = |code: u8, msg: String| {
        eprintln!("rverbs run: {msg}");
        ExitCode::from(code)
    };
    let lib_dir = match find_lib_dir(args.lib_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => return fail(EXIT_LAUNCHER, e),
    };
    let (program, rest) = args.command.split_first().expect("clap requires PROGRAM");
    let path = std::env::var_os("PATH");
    let resolved = match resolve_program(program, path.as_deref()) {
        Ok(p) => p,
        Err((code, e)) => return fail(code, e),
    };
    if !args.no_namespace {
        let devices = sysfs_devices();
        match namespace::enter(&devices) {
            Ok(outcome) if !outcome.missing.is_empty() => eprintln!(
                "rverbs run: running {} without {} (programs that look for them, such as UCX, will not see the device; docs/environment.md)",
                Path::new(program).display(),
                outcome.missing.join("; ")
            ),
            Ok(_) => {}
            Err(e) => return fail(EXIT_LAUNCHER, e),
        }
    }
    let mut cmd = Command::new(&resolved);
    cmd.arg0(program).args(rest);
    cmd.env("LD_LIBRARY_PATH", library_path(&lib_dir, std::env::var_os("LD_LIBRARY_PATH").as_deref()));
    if let Some(s) = args.sanitize {
        cmd.env("RVERBS_SANITIZE", s.value());
        // The sanitizer's watch of free(3) (mr-memory-freed), where build-dropin.sh made it.
        let watch = lib_dir.join(FREE_WATCH);
        if watch.is_file() {
            cmd.env("LD_PRELOAD", preload(&watch, std::env::var_os("LD_PRELOAD").as_deref()));
        }
    }
    if let Some(spec) = &args.faults {
        cmd.env("RVERBS_FAULTS", spec);
    }
    // Only returns on failure; std restores SIGPIPE's default disposition for the program.
    let e = cmd.exec();
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXECUTE,
    };
    fail(code, format!("cannot execute {}: {e}", resolved.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_watch_is_preloaded_first_and_the_callers_preloads_kept() {
        let w = Path::new("/d/librverbs_free.so");
        assert_eq!(preload(w, None), OsString::from("/d/librverbs_free.so"));
        assert_eq!(preload(w, Some(OsStr::new(""))), OsString::from("/d/librverbs_free.so"));
        assert_eq!(preload(w, Some(OsStr::new("/x/a.so"))), OsString::from("/d/librverbs_free.so:/x/a.so"));
    }

    #[test]
    fn library_path_puts_the_dropin_first_and_keeps_the_callers() {
        let d = Path::new("/opt/rverbs/lib");
        assert_eq!(library_path(d, None), OsString::from("/opt/rverbs/lib"));
        assert_eq!(library_path(d, Some(OsStr::new(""))), OsString::from("/opt/rverbs/lib"));
        assert_eq!(library_path(d, Some(OsStr::new("/a:/b"))), OsString::from("/opt/rverbs/lib:/a:/b"));
    }

    #[test]
    fn candidate_dirs_cover_beside_install_and_cargo_target() {
        let c = candidate_dirs(Path::new("/t/release"));
        assert_eq!(c[0], Path::new("/t/release"));
        assert_eq!(c[1], Path::new("/t/release/../lib/rverbs"));
        assert_eq!(c[2], Path::new("/t/release/../dropin"));
    }

    #[test]
    fn sysfs_attrs_round_trip_and_refuse_garbage() {
        let d = parse_sysfs_attrs("device 0 rverbs0\ngid 1 0 fe80::1 eth0 RoCE v2\ngid 1 1 ::ffff:10.0.0.1 - IB/RoCE v1\n").unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "rverbs0");
        assert_eq!(d[0].gids[0], SysfsGid { port: 1, index: 0, gid: "fe80::1".parse().unwrap(), gid_type: "RoCE v2".into(), ndev: Some("eth0".into()) });
        assert_eq!(d[0].gids[1].ndev, None);
        assert_eq!(d[0].gids[1].gid_type, "IB/RoCE v1");
        for bad in ["gid 1 0 fe80::1 eth0 RoCE v2", "device x rverbs0", "device 0", "hello", "device 0 r\ngid 1 0 fe80::1 eth0", "device 0 r\ngid 1 0 eth0 RoCE v2"] {
            assert!(parse_sysfs_attrs(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn faults_spec_is_checked_by_the_rverbs_faults_parser() {
        assert_eq!(parse_faults("seed=7,drop=1%"), Ok("seed=7,drop=1%".into()));
        assert!(parse_faults("drop=lots").is_err());
        assert!(parse_faults("dorp=1%").is_err());
    }

    #[test]
    fn programs_resolve_like_execvp() {
        assert_eq!(resolve_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin"))), Ok(PathBuf::from("/bin/sh")));
        assert_eq!(resolve_program(OsStr::new("no-such-program-rverbs"), Some(OsStr::new("/bin"))).unwrap_err().0, EXIT_NOT_FOUND);
        assert_eq!(resolve_program(OsStr::new("/nonexistent/x"), None).unwrap_err().0, EXIT_NOT_FOUND);
        assert_eq!(resolve_program(OsStr::new("/etc/passwd"), None).unwrap_err().0, EXIT_CANNOT_EXECUTE);
        assert_eq!(resolve_program(OsStr::new("/bin/sh"), None), Ok(PathBuf::from("/bin/sh")));
    }
}
