//! Reports of the sanitizer: one block per finding on stderr, in the manner of
//! AddressSanitizer, also appended to `RVERBS_SANITIZE_LOG` when set; the findings kept
//! for [`take_findings`](super::take_findings); the abort of `RVERBS_SANITIZE=abort`
//! (docs/sanitizer.md, "Report").

use std::io::Write;
use std::sync::{Mutex, OnceLock};

use super::finding::{Finding, Object};
use super::trace;

/// Findings kept for `take_findings`; beyond this many the oldest are dropped (a
/// program that repeats a mistake in a loop must not grow without bound).
const KEPT: usize = 4096;

static FINDINGS: Mutex<Vec<Finding>> = Mutex::new(Vec::new());

/// The findings recorded since the last call, oldest first.
pub(crate) fn take() -> Vec<Finding> {
    let _busy = super::Busy::enter();
    std::mem::take(&mut *FINDINGS.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Reports `f`: the block on stderr (and the log file), the finding kept; with
/// `RVERBS_SANITIZE=abort`, the process aborts after the report.
pub(crate) fn emit(f: Finding) {
    let _busy = super::Busy::enter();
    let text = render(&f);
    write_out(&text);
    {
        let mut kept = FINDINGS.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push(f);
    }
    if super::mode() == super::Mode::Abort {
        write_out(&format!("=={}==ABORTING\n", std::process::id()));
        std::process::abort();
    }
}

/// Writes a block to stderr in one call, and appends it to `RVERBS_SANITIZE_LOG`.
fn write_out(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
    static LOG: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    let log = LOG.get_or_init(|| std::env::var_os("RVERBS_SANITIZE_LOG").filter(|v| !v.is_empty()).map(Into::into));
    if let Some(path) = log {
        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = file.write_all(text.as_bytes());
        }
    }
}

/// One object as the report names it.
pub(crate) fn describe(o: &Object) -> String {
    match o {
        Object::Context { id } => format!("context {id}"),
        Object::Pd { handle } => format!("pd handle {handle}"),
        Object::Mr { lkey, addr, len } => format!("mr lkey {lkey:#x} [{addr:#x}-{:#x})", addr.saturating_add(*len)),
        Object::Cq { id } => format!("cq {id}"),
        Object::Qp { qpn, state: Some(s) } => format!("qp QPN {qpn:#x} in {s:?}"),
        Object::Qp { qpn, state: None } => format!("qp QPN {qpn:#x}"),
        Object::Srq { srqn } => format!("srq {srqn:#x}"),
        Object::CompChannel { id } => format!("completion channel {id}"),
        Object::WorkRequest { wr_id, queue, num, sge } => {
            let on = match queue {
                super::Queue::SharedRecv => format!("SRQ {num:#x}"),
                _ => format!("QPN {num:#x}"),
            };
            let sge = sge.map_or(String::new(), |(a, l)| format!(", sge [{a:#x}-{:#x})", a.saturating_add(u64::from(l))));
            format!("wr_id {wr_id:#x} on {on} ({}){sge}", queue.describe())
        }
        Object::RemoteRange { rkey, addr, len } => format!("remote range [{addr:#x}-{:#x}) through rkey {rkey:#x}", addr.saturating_add(*len)),
        Object::Mw { rkey } => format!("mw rkey {rkey:#x}"),
        Object::WcField { cq, read, flag, wc_flags } => format!("cq {cq} created with wc_flags {wc_flags:#x}, without {flag}: {read} reads a field not requested"),
        Object::Read { addr, lkey } => format!("read of {addr:#x} (sge of lkey {lkey:#x})"),
        Object::Events { unacked } => format!("{unacked} unacknowledged event(s)"),
        Object::CqCapacity { id, cqe, demand } => format!("cq {id}: {cqe} entries, {demand} work requests can be outstanding on the queues completing to it"),
        Object::QueueDepth { queue: queue @ (super::Queue::Send | super::Queue::Recv), num, depth } => {
            let cap = if *queue == super::Queue::Send { "max_send_wr" } else { "max_recv_wr" };
            format!("QPN {num:#x} {}: {cap} {depth}", queue.describe())
        }
        Object::QueueDepth { num, depth, .. } => format!("XRC SRQ {num:#x}: max_wr {depth}"),
    }
}

/// ` (device slot N)` for a device other than the listed one (whose reports stay as
/// they were before devices were named), else nothing.
pub(crate) fn on_device(slot: Option<usize>) -> String {
    match slot {
        Some(s) if s != crate::sys::default_device_slot() => format!(" (device slot {s})"),
        _ => String::new(),
    }
}

/// The text block of a finding.
pub(crate) fn render(f: &Finding) -> String {
    use std::fmt::Write as _;
    let pid = std::process::id();
    let mut s = String::new();
    let _ = writeln!(s, "=={pid}==RVERBS SANITIZER: {}: {}{}", f.kind.name(), f.headline, on_device(f.device));
    let _ = writeln!(s, "  rule: {}: {}", f.page, f.rule);
    for o in &f.objects {
        let _ = writeln!(s, "  {}", describe(o));
    }
    for site in &f.sites {
        let _ = writeln!(s, "  {}:", site.label);
        if site.frames.is_empty() {
            let _ = writeln!(s, "    (no frame of the application)");
        }
        for (i, fr) in site.frames.iter().enumerate() {
            let _ = writeln!(s, "    #{i} {}", trace::render(fr));
        }
    }
    let top = f.sites.first().and_then(|s| s.frames.first()).map_or(String::new(), |fr| format!(" {}", trace::render(fr)));
    let _ = writeln!(s, "SUMMARY: RVERBS SANITIZER: {}{top}", f.kind.name());
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sanitizer::{FindingKind, Object};

    fn finding(device: Option<usize>) -> Finding {
        Finding { kind: FindingKind::CqPollUnfinished, device, page: "p(3)", rule: "r", headline: "h of cq 2".into(), objects: vec![Object::Cq { id: 2 }], sites: vec![] }
    }

    #[test]
    fn the_device_is_named_only_when_it_is_not_the_listed_one() {
        let listed = crate::sys::default_device_slot();
        let plain = render(&finding(Some(listed)));
        assert_eq!(plain, render(&finding(None)), "the listed device's report is as without devices");
        assert!(plain.lines().next().unwrap().ends_with("cq-poll-unfinished: h of cq 2"), "{plain}");
        let other = render(&finding(Some(listed + 9)));
        assert!(other.lines().next().unwrap().ends_with(&format!("cq-poll-unfinished: h of cq 2 (device slot {})", listed + 9)), "{other}");
        assert_eq!(other.lines().skip(1).collect::<Vec<_>>(), plain.lines().skip(1).collect::<Vec<_>>());
    }
}
