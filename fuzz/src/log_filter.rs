//! `log_filter`: `RVERBS_LOG`, the diagnostics filter of the drop-in libraries
//! (`rverbs-capi`, `device::log_filter`, rverbs's own parser into tracing-subscriber's
//! `Targets`; the grammar is in its doc and README.md's environment table).
//!
//! Input: a target name to ask about, as a record (u16 length, then bytes), then the
//! variable's value (values with a NUL byte cannot be in the environment, and non-UTF-8
//! ones are what `std::env::var` refuses before the parser: both skipped).
//!
//! Asserts, against a model of the documented grammar written here: exactly the
//! directives the grammar accepts make the filter (a target's last directive counts, as
//! does the last `level`), exactly the others are reported ignored, in order; an event
//! of the asked target is enabled at a level exactly when the directive with the longest
//! target prefixing it (else the `level` directive) allows that level. And, from
//! libFuzzer, no panic, hang or memory blow-up.

use crate::input::Input;

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// The model: a directive's (target, level index) or `None` when it does not parse.
fn model(d: &str) -> Option<(Option<&str>, usize)> {
    let level = |l: &str| LEVELS.iter().position(|n| n.eq_ignore_ascii_case(l));
    let (t, l) = match d.find('=') {
        Some(i) => (&d[..i], Some(&d[i + 1..])),
        None => (d, None),
    };
    let bad_char = |c: char| c.is_whitespace() || "[]{}=".contains(c);
    if t.is_empty() || t.chars().any(bad_char) {
        return None;
    }
    match l {
        Some(l) => Some((Some(t), level(l)?)),
        None => Some(level(t).map_or((Some(t), 5), |i| (None, i))),
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let asked = String::from_utf8_lossy(inp.record()).into_owned();
    let data = inp.bytes(usize::MAX);
    // An environment value holds no NUL byte.
    if data.contains(&0) {
        return;
    }
    let Ok(value) = std::str::from_utf8(data) else { return };
    let (dirs, default, ignored, enabled) = ibverbs::fuzzing::log_filter(value, &asked);

    let mut want_dirs: Vec<(String, usize)> = Vec::new();
    let mut want_default = None;
    let mut want_ignored = Vec::new();
    for d in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match model(d) {
            None => want_ignored.push(d.to_owned()),
            Some((None, l)) => want_default = Some(l),
            Some((Some(t), l)) => match want_dirs.iter_mut().find(|(w, _)| w == t) {
                Some(e) => e.1 = l,
                None => want_dirs.push((t.to_owned(), l)),
            },
        }
    }
    assert_eq!(ignored, want_ignored, "exactly the directives that do not parse, in order");
    let name = |l: usize| LEVELS[l].to_owned();
    assert_eq!(default, want_default.map(name));
    let mut got = dirs.clone();
    got.sort();
    let mut want: Vec<(String, String)> = want_dirs.iter().map(|(t, l)| (t.clone(), name(*l))).collect();
    want.sort();
    assert_eq!(got, want, "exactly the target directives, the last for each target");

    // The longest target that prefixes the asked one decides, else the default.
    let decides = want_dirs.iter().filter(|(t, _)| asked.starts_with(t.as_str())).max_by_key(|(t, _)| t.len()).map(|(_, l)| *l);
    let allowed = decides.or(want_default);
    for (i, e) in enabled.iter().enumerate() {
        // Level i + 1: error … trace.
        assert_eq!(*e, allowed.is_some_and(|a| a > i), "{asked:?} at {}", LEVELS[i + 1]);
    }
}
