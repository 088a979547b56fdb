//! `rverbs stat`: the hardware counters of every live endpoint (process) of the device,
//! as `rdma statistic show` prints a port's (one line per endpoint, rxe's counter names;
//! `--json` as `rdma -j statistic show`), read from the counters segments in the runtime
//! directory (`RVERBS_RUNTIME_DIR`) without opening the device (docs/device.md, "Hardware counters").
//! `rverbs stat --qp`: one line per live QP of every endpoint that counts statistics
//! (`RVERBS_STATS=1`), as `rdma statistic qp show` prints per-QP counters, with the
//! percentiles of its send latency; `rverbs stat --cq` one line per live CQ (docs/device.md,
//! "Per-QP and per-CQ statistics").

use std::fmt::Write as _;

use rverbs::{CqStats, EndpointCounters, EndpointStats, QpStats};

/// The name of process `pid` (`/proc/<pid>/comm`, without its newline); `?` when it
/// cannot be read (the process exited meanwhile).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or_else(|_| "?".into(), |s| s.trim_end_matches('\n').to_owned())
}

/// One endpoint as one line: `link rverbs0/1 ep N pid P comm NAME` and each counter's
/// name and value.
fn line(device: &str, e: &EndpointCounters, comm: &str) -> String {
    let mut s = format!("link {device}/1 ep {} pid {} comm {}", e.ep, e.pid, comm);
    for (name, value) in e.counters.named() {
        let _ = write!(s, " {name} {value}");
    }
    s
}

/// `s` as a JSON string (RFC 8259 §7: quote, backslash and control characters escaped).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Every endpoint as a JSON array of objects, as `rdma -j statistic show` prints ports:
/// `ifname`, `port`, then `ep`, `pid`, `comm` and the counters.
fn json(device: &str, all: &[(EndpointCounters, String)]) -> String {
    let mut s = String::from("[");
    for (i, (e, comm)) in all.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{{\"ifname\":{},\"port\":1,\"ep\":{},\"pid\":{},\"comm\":{}", json_string(device), e.ep, e.pid, json_string(comm));
        for (name, value) in e.counters.named() {
            let _ = write!(s, ",\"{name}\":{value}");
        }
        s.push('}');
    }
    s.push(']');
    s
}

/// Prints the counters of every live endpoint (`json`: as one JSON array). Nothing
/// (`[]`) when no process has the device open.
pub fn print(device: &str, as_json: bool) {
    let all: Vec<(EndpointCounters, String)> = rverbs::host_counters().into_iter().map(|e| (e, comm(e.pid))).collect();
    if as_json {
        println!("{}", json(device, &all));
    } else {
        for (e, comm) in &all {
            println!("{}", line(device, e, comm));
        }
    }
}

/// The named values of one QP: its counts, then the figures of its send latency, named
/// `send_lat_…`.
fn qp_values(q: &QpStats) -> Vec<(String, u64)> {
    let counts = q.named().into_iter().map(|(n, v)| (n.to_owned(), v));
    counts.chain(q.send_latency.named().into_iter().map(|(n, v)| (format!("send_lat_{n}"), v))).collect()
}

/// The named values of one CQ: its size, then its counts.
fn cq_values(c: &CqStats) -> Vec<(String, u64)> {
    std::iter::once(("cqe".to_owned(), u64::from(c.size))).chain(c.named().into_iter().map(|(n, v)| (n.to_owned(), v))).collect()
}

/// The QPs (`Kind::Qp`) or CQs of an endpoint, each as its number and named values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// `--qp`: named `lqpn`, as `rdma statistic qp show` names a QP.
    Qp,
    /// `--cq`: named `cqn`, as `rdma resource show cq` names a CQ.
    Cq,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Qp => "lqpn",
            Kind::Cq => "cqn",
        }
    }

    fn objects(self, e: &EndpointStats) -> Vec<(u32, Vec<(String, u64)>)> {
        match self {
            Kind::Qp => e.qps.iter().map(|q| (q.qpn, qp_values(q))).collect(),
            Kind::Cq => e.cqs.iter().map(|c| (c.cq, cq_values(c))).collect(),
        }
    }
}

/// One QP or CQ as one line: `link rverbs0/1 lqpn Q ep N pid P comm NAME` (`cqn` for a
/// CQ) and each value's name and value.
fn object_line(device: &str, kind: Kind, num: u32, e: &EndpointStats, values: &[(String, u64)], comm: &str) -> String {
    let mut s = format!("link {device}/1 {} {num} ep {} pid {} comm {}", kind.key(), e.ep, e.pid, comm);
    for (name, value) in values {
        let _ = write!(s, " {name} {value}");
    }
    s
}

/// Every QP or CQ as one JSON array of objects: `ifname`, `port`, `lqpn` or `cqn`, `ep`,
/// `pid`, `comm` and the values.
fn objects_json(device: &str, kind: Kind, all: &[(EndpointStats, String)]) -> String {
    let mut s = String::from("[");
    let mut first = true;
    for (e, comm) in all {
        for (num, values) in kind.objects(e) {
            if !first {
                s.push(',');
            }
            first = false;
            let _ = write!(
                s,
                "{{\"ifname\":{},\"port\":1,\"{}\":{num},\"ep\":{},\"pid\":{},\"comm\":{}",
                json_string(device),
                kind.key(),
                e.ep,
                e.pid,
                json_string(comm)
            );
            for (name, value) in values {
                let _ = write!(s, ",\"{name}\":{value}");
            }
            s.push('}');
        }
    }
    s.push(']');
    s
}

/// Prints every live QP or CQ of the endpoints that count statistics (`json`: as one
/// JSON array). Nothing (`[]`) when none does.
pub fn print_objects(device: &str, kind: Kind, as_json: bool) {
    let all: Vec<(EndpointStats, String)> = rverbs::host_stats().into_iter().map(|e| {
        let c = comm(e.pid);
        (e, c)
    }).collect();
    if as_json {
        println!("{}", objects_json(device, kind, &all));
    } else {
        for (e, comm) in &all {
            for (num, values) in kind.objects(e) {
                println!("{}", object_line(device, kind, num, e, &values, comm));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\u000a\\u0001\"");
        assert_eq!(json_string("rverbs0"), "\"rverbs0\"");
    }

    #[test]
    fn no_endpoint_is_an_empty_json_array() {
        assert_eq!(json("rverbs0", &[]), "[]");
        assert_eq!(objects_json("rverbs0", Kind::Qp, &[]), "[]");
        assert_eq!(objects_json("rverbs0", Kind::Cq, &[]), "[]");
    }
}
