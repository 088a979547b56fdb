//! `log_filter`: `RVERBS_LOG`, the diagnostics filter of the drop-in libraries
//! (`rverbs-capi`, `device::log_filter`), which tracing-subscriber parses
//! (`EnvFilter::new`: directives that do not parse are ignored, with a line on stderr).
//!
//! Input: the variable's value (values with a NUL byte cannot be in the environment, and
//! non-UTF-8 ones are what `std::env::var` refuses before the parser: both skipped).
//!
//! Not a libFuzzer binary (yet): in a build with debug assertions, tracing-subscriber
//! 0.3.23 fails its own consistency check (`Ordering::Equal must imply a.fields ==
//! b.fields`: its `ValueMatch` orders two equal literal field values as equal but has no
//! equality arm for them) within seconds of fuzzing, on values such as
//! `w[{F=}],w[{F=}]`. The harness replays its corpus and the two regressions found
//! before that (`tests/corpus.rs`).
//!
//! Asserts: any value builds a filter, without a panic, a hang (libFuzzer's timeout: a
//! field value compiled as a regular expression once took 106 s) or a memory blow-up
//! (its RSS limit). Not asserted: that the filter's display parses back to
//! it — tracing-subscriber's does not always (`\u{b}nfo` shows as `\u{b}nfo=trace`,
//! which reads as `error`).

/// Runs one input.
pub fn run(data: &[u8]) {
    // An environment value holds no NUL byte.
    if data.contains(&0) {
        return;
    }
    if let Ok(value) = std::str::from_utf8(data) {
        let _ = ibverbs::fuzzing::log_filter(value);
    }
}
