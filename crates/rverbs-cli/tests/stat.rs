//! `rverbs stat` (docs/device.md, "Hardware counters"), run as a user runs it: the built `rverbs` executable
//! lists a live peer process that holds the device, with the counters its known traffic
//! moved, in text and JSON, and with `--qp` each of its QPs with what its traffic
//! posted and polled and its send latency's percentiles, and with `--cq` each of its CQs
//! (docs/device.md, "Per-QP and per-CQ statistics"); once the peer exits, nothing.
//!
//! The peer is this test binary again (`RVERBS_TEST_ROLE=peer`), in a runtime directory
//! of its own that `rverbs stat` is pointed at (`RVERBS_RUNTIME_DIR`); it reports
//! `@@ ready` on stdout and exits when its stdin closes. Every wait is bounded.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rverbs::*;

const RVERBS: &str = env!("CARGO_BIN_EXE_rverbs");
const WRITES: u64 = 7;
const SENDS: u64 = 2;

/// A fresh runtime directory under the target's temporary directory.
fn runtime_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stat").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a runtime directory");
    dir
}

/// Runs `rverbs stat ARGS…` on runtime directory `dir`, bounded by timeout(1); its stdout.
fn stat(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("timeout").args(["60", RVERBS, "stat"]).args(args).env("RVERBS_RUNTIME_DIR", dir).output().expect("run rverbs stat");
    assert!(out.status.success(), "rverbs stat failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The peer's part: two RC QPs of one process, WRITES RDMA WRITEs and SENDS SENDs
/// between them, then wait for stdin to close.
fn peer() {
    let ctx = devices().unwrap()[0].open().unwrap();
    let side = || {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
        let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
        let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        (pd, cq, qp, mr)
    };
    let (a, b) = (side(), side());
    let gid = ctx.query_gid_table().iter().find(|e| e.gid.to_ipv4() == Some(std::net::Ipv4Addr::LOCALHOST)).expect("loopback GID").index as u8;
    for (x, y) in [(&a, &b), (&b, &a)] {
        let ah_attr = AhAttr {
            grh: Some(GlobalRoute { dgid: ctx.query_gid(1, gid.into()).unwrap(), sgid_index: gid, hop_limit: 64, ..GlobalRoute::default() }),
            port_num: 1,
            ..AhAttr::default()
        };
        let path = RemotePath {
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            ah_attr,
            path_mtu: Mtu::Mtu1024,
            ..RemotePath::new(Gid::default(), 0, y.2.qp_num())
        };
        x.2.connect(&path).unwrap();
    }
    let poll = |cq: &Cq| {
        let mut wc = [Wc::default(); 1];
        for _ in 0..10_000_000 {
            if cq.poll(&mut wc).unwrap() == 1 {
                assert_eq!(wc[0].status(), WcStatus::Success);
                return;
            }
            std::thread::yield_now();
        }
        panic!("no completion");
    };
    let sge = [a.3.sge(0, 64).unwrap()];
    for i in 0..WRITES {
        a.2.post_send(&[SendWr::write(i, &sge, b.3.iova(), b.3.rkey()).signaled()]).unwrap();
        poll(&a.1);
    }
    for i in 0..SENDS {
        let rsge = [b.3.sge(0, 64).unwrap()];
        b.2.post_recv(&[RecvWr::new(i, &rsge)]).unwrap();
        a.2.post_send(&[SendWr::send(i, &sge).signaled()]).unwrap();
        poll(&a.1);
        poll(&b.1);
    }
    println!("@@ ready");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}

/// Starts the peer in runtime directory `dir` and waits (bounded) for it to be ready.
fn spawn_peer(dir: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["stat_lists_a_live_peer_with_its_counters", "--exact", "--nocapture", "--test-threads", "1"])
        .env("RVERBS_TEST_ROLE", "peer")
        .env("RVERBS_RUNTIME_DIR", dir)
        .env("RVERBS_NET", "off")
        .env("RVERBS_STATS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the peer");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("@@ ready") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the peer did not get ready");
    }
    child
}

#[test]
fn stat_lists_a_live_peer_with_its_counters() {
    if std::env::var_os("RVERBS_TEST_ROLE").is_some_and(|r| r == "peer") {
        return peer();
    }
    let dir = runtime_dir("live-peer");
    assert_eq!(stat(&dir, &[]), "", "no endpoint yet");
    let mut child = spawn_peer(&dir);
    let pid = child.id();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap().trim_end().to_owned();

    let text = stat(&dir, &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one endpoint: {text}");
    let words: Vec<&str> = lines[0].split(' ').collect();
    let value = |name: &str| words.iter().position(|w| *w == name).map(|i| words[i + 1]);
    assert_eq!(words[..2], ["link", "rverbs0/1"]);
    assert_eq!(value("pid"), Some(pid.to_string().as_str()));
    assert_eq!(value("comm"), Some(comm.as_str()));
    assert_eq!(value("local_requests"), Some((WRITES + SENDS).to_string().as_str()));
    assert_eq!(value("rdma_sends"), Some(SENDS.to_string().as_str()));
    assert_eq!(value("rdma_recvs"), Some(SENDS.to_string().as_str()));
    for zero in ["sent_pkts", "rcvd_pkts", "send_rnr_err", "rcvd_rnr_err", "retry_exceeded_err"] {
        assert_eq!(value(zero), Some("0"), "{zero}");
    }

    let json = stat(&dir, &["--json"]);
    assert!(json.starts_with("[{\"ifname\":\"rverbs0\",\"port\":1,\"ep\":"), "{json}");
    assert!(json.contains(&format!("\"pid\":{pid},")), "{json}");
    assert!(json.contains(&format!("\"local_requests\":{}}}]", WRITES + SENDS)), "{json}");
    assert!(json.contains(&format!("\"rdma_sends\":{SENDS},")), "{json}");

    // Per QP: `a` posted and polled every WRITE and SEND, `b` every receive.
    let text = stat(&dir, &["--qp"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "two QPs: {text}");
    let counts = |line: &str| -> Vec<(String, String)> {
        let w: Vec<&str> = line.split(' ').collect();
        assert_eq!(w[..3], ["link", "rverbs0/1", "lqpn"]);
        assert_eq!(w[6..8], ["pid".to_string(), pid.to_string()]);
        w[10..].chunks(2).map(|c| (c[0].to_owned(), c[1].to_owned())).collect()
    };
    let n = |v: u64| v.to_string();
    let want_a = [("send_wrs", n(WRITES + SENDS)), ("recv_wrs", n(0)), ("send_completions", n(WRITES + SENDS)), ("send_bytes", n(64 * (WRITES + SENDS))), ("recv_completions", n(0)), ("recv_bytes", n(0)), ("error_completions", n(0))];
    let want_b = [("send_wrs", n(0)), ("recv_wrs", n(SENDS)), ("send_completions", n(0)), ("send_bytes", n(0)), ("recv_completions", n(SENDS)), ("recv_bytes", n(64 * SENDS)), ("error_completions", n(0))];
    // Then the send latency: one value per successful send work request.
    let lat = ["send_lat_count", "send_lat_min_ns", "send_lat_p50_ns", "send_lat_p99_ns", "send_lat_p999_ns", "send_lat_max_ns"];
    for (line, want, sent) in [(lines[0], want_a, WRITES + SENDS), (lines[1], want_b, 0)] {
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let got = counts(line);
        assert_eq!(got[..7], want, "{line}");
        let names: Vec<&str> = got[7..].iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, lat, "{line}");
        assert_eq!(got[7].1, n(sent), "{line}");
        let figures: Vec<u64> = got[8..].iter().map(|(_, v)| v.parse().unwrap()).collect();
        assert!(figures.windows(2).all(|w| w[0] <= w[1]), "min <= p50 <= p99 <= p99.9 <= max: {line}");
        assert_eq!(figures.iter().all(|v| *v == 0), sent == 0, "{line}");
    }
    let json = stat(&dir, &["--qp", "--json"]);
    assert!(json.starts_with("[{\"ifname\":\"rverbs0\",\"port\":1,\"lqpn\":"), "{json}");
    assert!(json.contains(&format!("\"send_wrs\":{},", WRITES + SENDS)), "{json}");
    assert!(json.contains(&format!("\"recv_bytes\":{},\"error_completions\":0,\"send_lat_count\":0,", 64 * SENDS)), "{json}");
    assert!(json.contains(&format!("\"send_lat_count\":{},", WRITES + SENDS)), "{json}");

    // Per CQ: `a`'s CQ polled every WRITE and SEND, `b`'s every receive, one at a time.
    let text = stat(&dir, &["--cq"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "two CQs: {text}");
    for (line, polled) in [(lines[0], WRITES + SENDS), (lines[1], SENDS)] {
        let w: Vec<&str> = line.split(' ').collect();
        assert_eq!(w[..3], ["link", "rverbs0/1", "cqn"], "{line}");
        let values: Vec<(&str, &str)> = w[10..].chunks(2).map(|c| (c[0], c[1])).collect();
        let cqe: u64 = values[0].1.parse().unwrap();
        assert!(values[0].0 == "cqe" && cqe >= 64, "{line}");
        assert_eq!(values[1..], [("polled", n(polled).as_str()), ("empty_polls", "0"), ("deepest", "1"), ("overrun", "0")], "{line}");
    }
    let json = stat(&dir, &["--cq", "--json"]);
    assert!(json.starts_with("[{\"ifname\":\"rverbs0\",\"port\":1,\"cqn\":"), "{json}");
    assert!(json.contains(&format!("\"polled\":{},\"empty_polls\":0,\"deepest\":1,\"overrun\":0}}", WRITES + SENDS)), "{json}");

    drop(child.stdin.take());
    let status = child.wait().expect("the peer exits");
    assert!(status.success(), "peer: {status}");
    assert_eq!(stat(&dir, &[]), "", "a peer that exited is not listed");
    assert_eq!(stat(&dir, &["--json"]), "[]\n");
    assert_eq!(stat(&dir, &["--qp"]), "", "nor are its QPs");
    assert_eq!(stat(&dir, &["--cq"]), "", "nor its CQs");
}
