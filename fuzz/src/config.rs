//! `config`: the environment variables of the device besides `RVERBS_FAULTS` (which has
//! its own target), through the functions that interpret their values:
//! `RVERBS_RUNTIME_DIR` / `XDG_RUNTIME_DIR` (where endpoints live), the switches
//! `RVERBS_NET=off`, `RVERBS_CMA=off`, `RVERBS_SHARED_MR=1`, the sanitizer's
//! `RVERBS_SANITIZE=1|abort`, `RVERBS_STATS=1` (crate `rverbs`, `config`),
//! and `SYSFS_PATH` (crate `rverbs-capi`). `RVERBS_LOG` has a target of its own,
//! `log_filter`.
//!
//! Input: four records (u16 length, then bytes): the two runtime-directory variables
//! (each unset when its record starts with 0xff), a switch value, `SYSFS_PATH`; then a
//! uid (u32), whether `/dev/shm` is a directory.
//!
//! Asserts: the runtime directory is the documented choice (an empty variable counts as
//! unset, as the shell mirror in tests/conformance/lib/cm.bash has it), never the empty
//! path, absolute whenever the variable it came from is; a switch is on or off for
//! exactly its word, the sanitizer is on for exactly `1` and `abort`, statistics for
//! exactly `1`; the sysfs
//! path is the value's first 256 bytes less trailing slashes.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::input::Input;

fn var(bytes: &[u8]) -> Option<&OsStr> {
    // An environment value holds no NUL byte; 0xff first: unset.
    (bytes.first() != Some(&0xff) && !bytes.contains(&0)).then(|| OsStr::from_bytes(bytes))
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let rverbs = var(inp.record());
    let xdg = var(inp.record());
    let switch = var(inp.record());
    let sysfs = var(inp.record());
    let uid = inp.u32();
    let dev_shm = inp.u8() & 1 == 1;

    let dir = rverbs::fuzzing::config::runtime_dir_from(rverbs, xdg, uid, dev_shm);
    assert!(!dir.as_os_str().is_empty(), "never the current directory");
    let want = match (rverbs.filter(|v| !v.is_empty()), xdg.filter(|v| !v.is_empty())) {
        (Some(r), _) => PathBuf::from(r),
        (None, Some(x)) => Path::new(x).join("rverbs"),
        (None, None) if dev_shm => PathBuf::from(format!("/dev/shm/rverbs-{uid}")),
        (None, None) => PathBuf::from(format!("/tmp/rverbs-{uid}")),
    };
    assert_eq!(dir, want);
    let from_var = rverbs.filter(|v| !v.is_empty()).or(xdg.filter(|v| !v.is_empty()));
    assert_eq!(dir.is_absolute(), from_var.is_none_or(|v| Path::new(v).is_absolute()));

    assert_eq!(rverbs::fuzzing::config::is_off(switch), switch.is_some_and(|v| v.as_bytes() == b"off"));
    let want = match switch.map(OsStr::as_bytes) {
        Some(b"1") => Some(true),
        Some(b"0" | b"off") => Some(false),
        _ => None,
    };
    assert_eq!(rverbs::fuzzing::config::shared_mr(switch), want);
    let want = match switch.map(OsStr::as_bytes) {
        Some(b"1") => rverbs::sanitize::Mode::Report,
        Some(b"abort") => rverbs::sanitize::Mode::Abort,
        _ => rverbs::sanitize::Mode::Off,
    };
    assert_eq!(rverbs::fuzzing::config::sanitize_from(switch), want);
    assert_eq!(rverbs::fuzzing::config::stats_from(switch), switch.is_some_and(|v| v.as_bytes() == b"1"));

    let path = ibverbs::fuzzing::sysfs_path_from(sysfs);
    match sysfs {
        None => assert_eq!(path.as_bytes(), b"/sys"),
        Some(v) => {
            let kept = &v.as_bytes()[..v.len().min(ibverbs::fuzzing::SYSFS_PATH_MAX)];
            let p = path.as_bytes();
            assert!(kept.starts_with(p) && kept[p.len()..].iter().all(|&b| b == b'/'));
            assert!(!p.ends_with(b"/"), "no trailing slash");
        }
    }
}
