//! Backtraces of the sanitizer: captured (unresolved, cheap-ish) when an object is made
//! or a work request posted, symbolized only when a finding names them
//! (docs/sanitizer.md, "Backtraces").

use std::backtrace::Backtrace;
use std::sync::Arc;

use super::finding::Frame;

/// A captured backtrace, shared between the tracking tables and the findings.
pub(crate) type Trace = Arc<Backtrace>;

/// The frames shown per site: the application's innermost ones.
const MAX_FRAMES: usize = 12;

/// Held (shared) while a backtrace is captured or symbolized, and exclusively by a thread
/// about to fork: the standard library's backtrace lock (and the unwinder's) must not be
/// inherited held by the child, whose first capture would wait for ever
/// ([`super::track::guard_forks`]).
pub(crate) static TRACING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Captures the current stack (only ever called with the sanitizer on).
pub(crate) fn capture() -> Trace {
    let _busy = super::Busy::enter();
    let _tracing = TRACING.read().unwrap_or_else(|p| p.into_inner());
    Arc::new(Backtrace::force_capture())
}

/// The application's frames of `bt`, innermost first: frames of the standard library,
/// of rverbs' own crates and of the inline wrappers of `<infiniband/verbs.h>` are left
/// out, and so is the C runtime's start-up below `main`.
pub(crate) fn frames(bt: &Backtrace) -> Vec<Frame> {
    // std has no stable frame API: its full text form is parsed, "N: function" lines
    // each followed by an optional "at file:line:column" line (inlined functions are
    // further function lines of the same frame).
    let _busy = super::Busy::enter();
    let text = {
        let _tracing = TRACING.read().unwrap_or_else(|p| p.into_inner());
        format!("{bt:#}")
    };
    parse(&text).into_iter().filter(|f| !internal(f)).take(MAX_FRAMES).collect()
}

/// Frames of the text form of a `std::backtrace::Backtrace`.
fn parse(text: &str) -> Vec<Frame> {
    let mut out: Vec<Frame> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(at) = t.strip_prefix("at ") {
            if let Some(f) = out.last_mut() {
                let (file, line) = split_location(at);
                f.file = Some(file.to_owned());
                f.line = line;
            }
            continue;
        }
        let name = match t.split_once(": ") {
            Some((n, rest)) if n.bytes().all(|b| b.is_ascii_digit()) => rest.trim_start(),
            _ => t,
        };
        // The full form puts the address first: "0x55d0c0ffee - main".
        let name = match name.split_once(" - ") {
            Some((addr, rest)) if addr.starts_with("0x") => rest,
            _ => name,
        };
        out.push(Frame { function: name.to_owned(), file: None, line: None });
    }
    out
}

/// `file:line:column` (or `file:line`) → (file, line).
fn split_location(at: &str) -> (&str, Option<u32>) {
    let mut parts = at.rsplitn(3, ':');
    let last = parts.next();
    let mid = parts.next();
    match (last, mid, parts.next()) {
        (Some(_col), Some(line), Some(file)) if line.parse::<u32>().is_ok() => (file, line.parse().ok()),
        (Some(line), Some(file), None) if line.parse::<u32>().is_ok() => (file, line.parse().ok()),
        _ => (at, None),
    }
}

/// Whether a frame is the sanitizer's, the library's, the standard library's or the C
/// runtime's, not the application's.
fn internal(f: &Frame) -> bool {
    const CRATES: &[&str] = &["std::", "core::", "alloc::", "rverbs::", "rverbs_capi::", "rverbs_proto::", "rverbs_cm::", "rverbs_rdmacm::", "backtrace::"];
    const RUNTIME: &[&str] = &["__rust", "rust_begin", "rust_panic", "__libc_start", "_start", "start_thread", "clone", "clone3", "__clone", "<unknown>", "__restore_rt"];
    let name = f.function.trim_start_matches('<');
    if CRATES.iter().any(|c| name.starts_with(c)) || RUNTIME.iter().any(|r| f.function == *r || f.function.starts_with(&format!("{r}_"))) {
        return true;
    }
    match &f.file {
        Some(file) => {
            file.contains("/rustc/")
                || file.contains("/.cargo/registry/")
                || file.contains("/library/std/")
                || (file.contains("crates/rverbs") && file.contains("/src/"))
                || file.ends_with("infiniband/verbs.h")
                || file.ends_with("rdma/rdma_cma.h")
                || file.ends_with("preload/free_watch.c")
        }
        // The drop-in's exports without line tables: the verbs the application called.
        None => ["ibv_", "rdma_", "__rv_", "rverbs_", "_ZN"].iter().any(|p| f.function.starts_with(p)),
    }
}

/// One frame as a report line: `function (file:line)`.
pub(crate) fn render(f: &Frame) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{} ({file}:{line})", f.function),
        (Some(file), None) => format!("{} ({file})", f.function),
        _ => f.function.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_parses_into_frames_and_only_the_applications_remain() {
        let text = "   0:     0x55d0c0ffee00 - std::backtrace::Backtrace::force_capture\n             at /rustc/abc/library/std/src/backtrace.rs:312:13\n   1: rverbs::sanitizer::trace::capture\n             at /w/crates/rverbs/src/sanitizer/trace.rs:20:5\n   2: ibv_post_send\n             at /usr/include/infiniband/verbs.h:3290:9\n   3:     0x55d0c0ffee42 - main\n             at /w/tests/sanitizer/prog.c:42:5\n   4: __libc_start_call_main\n   5: _start\n   6:                0x0 - <unknown>\n";
        let all = parse(text);
        assert_eq!(all.len(), 7);
        assert_eq!(all[0].function, "std::backtrace::Backtrace::force_capture");
        assert_eq!(all[3], Frame { function: "main".into(), file: Some("/w/tests/sanitizer/prog.c".into()), line: Some(42) });
        let shown: Vec<Frame> = all.into_iter().filter(|f| !internal(f)).collect();
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!(render(&shown[0]), "main (/w/tests/sanitizer/prog.c:42)");
    }

    #[test]
    fn a_location_without_a_column_still_gives_the_line() {
        assert_eq!(split_location("a.c:7"), ("a.c", Some(7)));
        assert_eq!(split_location("a.c:7:3"), ("a.c", Some(7)));
        assert_eq!(split_location("weird"), ("weird", None));
    }
}
