//! The environment variables the device reads, as pure functions of their values (the
//! callers read the environment): so the rules are stated once and can be tested with
//! any value (the `config` fuzz target). `RVERBS_FAULTS` has its parser in
//! `rverbs_proto::fault`.

use std::ffi::OsStr;
use std::path::PathBuf;

/// The per-user runtime directory from `RVERBS_RUNTIME_DIR` (`rverbs`) and
/// `XDG_RUNTIME_DIR` (`xdg`): the first, else `<xdg>/rverbs`, else
/// `/dev/shm/rverbs-<uid>` where `/dev/shm` is a directory (`dev_shm`), else
/// `/tmp/rverbs-<uid>`. A variable set to the empty string counts as unset (as the XDG
/// base directory specification has it for `XDG_RUNTIME_DIR`, and as the shell mirror
/// `cm_runtime_dir` of tests/conformance/lib/cm.bash reads both): an empty path would
/// put the endpoints in the current directory of each process.
pub(crate) fn runtime_dir_from(rverbs: Option<&OsStr>, xdg: Option<&OsStr>, uid: u32, dev_shm: bool) -> PathBuf {
    if let Some(d) = rverbs.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = xdg.filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("rverbs");
    }
    if dev_shm {
        PathBuf::from(format!("/dev/shm/rverbs-{uid}"))
    } else {
        PathBuf::from(format!("/tmp/rverbs-{uid}"))
    }
}

/// An `on`/`off` switch that is on unless set to exactly `off` (`RVERBS_NET`,
/// `RVERBS_CMA`): whether it is off.
pub(crate) fn is_off(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| v == "off")
}

/// `RVERBS_SHARED_MR` (docs/memory.md, "Shareable registrations"): `1` on, `0` or `off`
/// off, unset or anything else: the device decides (`None`).
pub(crate) fn shared_mr(value: Option<&OsStr>) -> Option<bool> {
    match value {
        Some(v) if v == "1" => Some(true),
        Some(v) if v == "0" || v == "off" => Some(false),
        _ => None,
    }
}

/// `RVERBS_BUSY_POLL` (docs/progress-and-events.md, "Busy-polling applications"): `1`
/// on; unset or anything else off.
pub(crate) fn busy_poll(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| v == "1")
}

/// What the verbs sanitizer does (`RVERBS_SANITIZE`, docs/sanitizer.md); the public
/// name is `rverbs::sanitize::Mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Sanitize {
    /// No checks, nothing tracked (the default).
    #[default]
    Off,
    /// Each finding is reported and recorded; the program continues.
    Report,
    /// The first finding is reported, then the process aborts (`SIGABRT`).
    Abort,
}

/// `RVERBS_SANITIZE`: `1` reports and continues, `abort` reports the first finding and
/// aborts; unset or any other value leaves the sanitizer off.
pub(crate) fn sanitize_from(value: Option<&OsStr>) -> Sanitize {
    match value {
        Some(v) if v == "1" => Sanitize::Report,
        Some(v) if v == "abort" => Sanitize::Abort,
        _ => Sanitize::Off,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_runtime_dir_variable_counts_as_unset() {
        // Found writing the `config` fuzz target: `RVERBS_RUNTIME_DIR=` put the
        // endpoints in each process's current directory (the path ""), where the shell
        // mirror in tests/conformance/lib/cm.bash looked under XDG_RUNTIME_DIR.
        let e = Some(OsStr::new(""));
        assert_eq!(runtime_dir_from(e, Some(OsStr::new("/run/user/7")), 7, true), PathBuf::from("/run/user/7/rverbs"));
        assert_eq!(runtime_dir_from(e, e, 7, true), PathBuf::from("/dev/shm/rverbs-7"));
        assert_eq!(runtime_dir_from(None, e, 7, false), PathBuf::from("/tmp/rverbs-7"));
        assert_eq!(runtime_dir_from(Some(OsStr::new("/r")), e, 7, true), PathBuf::from("/r"));
    }

    #[test]
    fn switches_take_exactly_their_word() {
        assert!(is_off(Some(OsStr::new("off"))) && !is_off(Some(OsStr::new("OFF"))) && !is_off(None));
        assert_eq!(shared_mr(Some(OsStr::new("1"))), Some(true));
        assert_eq!((shared_mr(Some(OsStr::new("0"))), shared_mr(Some(OsStr::new("off")))), (Some(false), Some(false)));
        assert_eq!((shared_mr(Some(OsStr::new("yes"))), shared_mr(None)), (None, None));
    }

    #[test]
    fn busy_polling_is_on_only_with_one() {
        assert!(busy_poll(Some(OsStr::new("1"))));
        for other in [None, Some(""), Some("0"), Some("yes"), Some("1 ")] {
            assert!(!busy_poll(other.map(OsStr::new)), "{other:?}");
        }
    }

    #[test]
    fn the_sanitizer_switch_takes_one_or_abort_and_nothing_else() {
        assert_eq!(sanitize_from(None), Sanitize::Off);
        assert_eq!(sanitize_from(Some(OsStr::new("1"))), Sanitize::Report);
        assert_eq!(sanitize_from(Some(OsStr::new("abort"))), Sanitize::Abort);
        for other in ["", "0", "yes", "ABORT", "1 ", "true"] {
            assert_eq!(sanitize_from(Some(OsStr::new(other))), Sanitize::Off, "{other:?}");
        }
    }
}
