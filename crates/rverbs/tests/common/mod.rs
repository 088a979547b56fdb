//! Fixtures shared by the integration tests: contexts, memory, and QP pairs brought to
//! a given state (smoltcp-style fixtures that build on each other).
#![allow(dead_code)]

use rverbs::*;

/// Default capacities of test QPs.
pub const CAP: QpCap = QpCap {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 4,
    max_recv_sge: 4,
    max_inline_data: 64,
};

/// Everything one side of a connection owns.
pub struct Side {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

pub const MR_LEN: usize = 1 << 16;

pub const ALL_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

pub fn open() -> Context {
    let devs = devices().expect("device list");
    assert!(!devs.is_empty(), "the built-in device must be listed");
    devs[0].open().expect("open rverbs0")
}

/// One side with its own context, a CQ of `cqe` entries and a QP in RESET.
pub fn side_with(qp_type: QpType, cqe: u32, cap: QpCap) -> Side {
    side_on(open(), qp_type, cqe, cap)
}

/// [`side_with`] on the context `ctx` (of any device, [`device_on`]).
pub fn side_on(ctx: Context, qp_type: QpType, cqe: u32, cap: QpCap) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(cqe)).unwrap();
    let qp = pd.create_qp(&QpInit::new(qp_type, &cq, cap)).unwrap();
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    Side { ctx, pd, cq, qp, mr }
}

pub fn side(qp_type: QpType) -> Side {
    side_with(qp_type, 256, CAP)
}

/// The GID index both sides use (the loopback address is always present).
pub fn gid_index(ctx: &Context) -> u8 {
    ctx.query_gid_table()
        .iter()
        .find(|e| e.gid.to_ipv4() == Some(std::net::Ipv4Addr::LOCALHOST))
        .expect("loopback GID")
        .index as u8
}

pub fn av(ctx: &Context) -> AhAttr {
    let idx = gid_index(ctx);
    AhAttr {
        grh: Some(GlobalRoute {
            dgid: ctx.query_gid(1, idx.into()).unwrap(),
            sgid_index: idx,
            hop_limit: 64,
            ..GlobalRoute::default()
        }),
        port_num: 1,
        ..AhAttr::default()
    }
}

/// The path these tests connect `qp`'s side with: towards `dest_qpn` over the loopback
/// GID, MTU 1024, the values of `path`, and `access` granted by its responder.
pub fn remote(ctx: &Context, dest_qpn: u32, path: &Path, access: Access) -> RemotePath {
    RemotePath {
        access,
        ah_attr: av(ctx),
        path_mtu: Mtu::Mtu1024,
        timeout: path.timeout,
        retry_cnt: path.retry_cnt,
        rnr_retry: path.rnr_retry,
        min_rnr_timer: path.min_rnr_timer,
        max_rd_atomic: path.max_rd_atomic,
        max_dest_rd_atomic: path.max_rd_atomic,
        ..RemotePath::new(Gid::default(), 0, dest_qpn)
    }
}

/// RESET → INIT (only the INIT attributes of the path count: access, port, Q_Key).
pub fn to_init(qp: &Qp, access: Access) {
    let p = RemotePath { access, ..RemotePath::new(Gid::default(), 0, 0) };
    qp.connect_until(&p, QpState::Init).unwrap();
}

/// Attributes used for RTR/RTS in these tests (pyverbs' values: retry 7, timeout 14).
pub struct Path {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
}

pub const PATH: Path = Path { timeout: 14, retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 1, max_rd_atomic: 4 };

/// INIT → RTR towards `dest_qpn`.
pub fn to_rtr(qp: &Qp, ctx: &Context, dest_qpn: u32, path: &Path) {
    qp.connect_until(&remote(ctx, dest_qpn, path, Access::empty()), QpState::Rtr).unwrap();
}

/// RTR → RTS (only the RTS attributes of the path count).
pub fn to_rts(qp: &Qp, path: &Path) {
    let p = RemotePath {
        timeout: path.timeout,
        retry_cnt: path.retry_cnt,
        rnr_retry: path.rnr_retry,
        max_rd_atomic: path.max_rd_atomic,
        ..RemotePath::new(Gid::default(), 0, 0)
    };
    qp.connect_until(&p, QpState::Rts).unwrap();
}

/// Two sides connected to each other and in RTS.
pub fn pair_with(qp_type: QpType, path: &Path, cqe: u32, cap: QpCap) -> (Side, Side) {
    let a = side_with(qp_type, cqe, cap);
    let b = side_with(qp_type, cqe, cap);
    connect(&a, &b, path);
    (a, b)
}

pub fn connect(a: &Side, b: &Side, path: &Path) {
    for (x, y) in [(a, b), (b, a)] {
        connect_qp(&x.qp, &x.ctx, y.qp.qp_num(), path);
    }
}

/// Connects `qp` of `ctx` to QP `dest_qpn` of this host over `path`, RESET to RTS.
pub fn connect_qp(qp: &Qp, ctx: &Context, dest_qpn: u32, path: &Path) {
    qp.connect(&remote(ctx, dest_qpn, path, ALL_ACCESS)).unwrap();
}

/// A connected RC pair whose requester `a` is in RTS and whose responder `b` stays in
/// RTR (its first request raises COMM_EST).
pub fn requester_rts_responder_rtr() -> (Side, Side) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, b.qp.qp_num(), &PATH);
    to_rts(&a.qp, &PATH);
    to_init(&b.qp, ALL_ACCESS);
    to_rtr(&b.qp, &b.ctx, a.qp.qp_num(), &PATH);
    (a, b)
}

pub fn pair(qp_type: QpType) -> (Side, Side) {
    pair_with(qp_type, &PATH, 256, CAP)
}

/// Polls one completion, failing after a bounded number of attempts (completions of
/// in-process traffic are ready when post returns; RNR retries need the timer).
#[track_caller]
pub fn poll_one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default(); 1];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(std::time::Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

/// Asserts the CQ holds no completion.
#[track_caller]
pub fn assert_empty(cq: &Cq) {
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "unexpected completion: {:?}", wc[0]);
}

pub fn post_recv(s: &Side, wr_id: u64, offset: usize, len: u32) {
    let sge = [s.mr.sge(offset, len).unwrap()];
    s.qp.post_recv(&[RecvWr::new(wr_id, &sge)]).unwrap();
}

/// `pages` new anonymous pages of 4 KiB with protection `prot`.
pub fn map(pages: usize, prot: i32) -> *mut u8 {
    // SAFETY: a new mapping at an address the kernel chooses; nothing else is affected.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), pages * 4096, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

/// Unmaps `pages` pages at `p` that the test mapped.
pub fn unmap(p: *mut u8, pages: usize) {
    // SAFETY: unmapping pages this test mapped; no Rust reference covers them.
    assert_eq!(unsafe { libc::munmap(p.cast(), pages * 4096) }, 0);
}

/// Whether `[p, p+len)` overlaps a mapping of this process now (/proc/self/maps): a hole
/// a test made may have been mapped again by another thread.
pub fn overlaps_a_mapping(p: *mut u8, len: usize) -> bool {
    let (lo, hi) = (p as usize, p as usize + len);
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().any(|l| {
        let range = l.split_whitespace().next().unwrap_or("");
        let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
        let (a, b) = (usize::from_str_radix(a, 16).unwrap_or(0), usize::from_str_radix(b, 16).unwrap_or(0));
        a < hi && lo < b
    })
}


/// A connected RC pair whose receiver `b` completes to a CQ on its own channel (the
/// async tests).
pub fn pair_on_channel() -> (Side, Side, CompChannel) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let ch = b.ctx.create_comp_channel().unwrap();
    let cq = b.ctx.create_cq(&CqInit::new(64).channel(&ch)).unwrap();
    let qp = b.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let b = Side { cq, qp, ..b };
    connect(&a, &b, &PATH);
    (a, b, ch)
}

/// One 8-byte SEND from `a` into a receive `b` posts first, both with `wr_id`.
pub fn send_one(a: &Side, b: &Side, wr_id: u64) {
    post_recv(b, wr_id, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.qp.post_send(&[SendWr::send(wr_id, &sge)]).unwrap();
}

/// Polls `fut` once with a waker that does nothing (the async tests).
pub fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

/// This test binary run again as test `test` alone, with `env` (which names the role it
/// plays), for a test of two processes: its stdin is the caller's to write, and each line
/// it prints after "@@ " comes to the receiver (libtest's own output is left out).
pub fn spawn_child(test: &str, env: &[(&str, &str)]) -> (std::process::Child, std::process::ChildStdin, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child process");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may print "test name ... " before a line without a newline.
            if let Some(at) = line.find("@@ ") {
                if tx.send(line[at + 3..].to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    (child, stdin, lines)
}

/// A device of this process alone on the loopback address `ip` (another "host" for
/// RoCEv2 between two devices of one test), its runtime directory private to the test
/// and named after `tag`, sending through the packet fault injector `faults` if given
/// (`RVERBS_FAULTS` syntax, docs/fault-injection.md).
pub fn device_on(ip: [u8; 4], tag: &str, faults: Option<&str>) -> Device {
    let faults = faults.map(|f| rverbs_proto::fault::FaultConfig::parse(f).unwrap());
    config_on(ip, tag).net_faults(faults).open().unwrap()
}

/// The configuration of [`device_on`] before its faults: the device alone on `ip`, its
/// runtime directory private to the test and named after `tag`, for a test that sets more.
pub fn config_on(ip: [u8; 4], tag: &str) -> DeviceConfig {
    let tag = format!("{tag}-{}", ip[3]);
    let dir = std::env::temp_dir().join(format!("rverbs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    DeviceConfig::new().name(&tag).runtime_dir(&dir).addresses(Some(vec![std::net::IpAddr::from(ip)]))
}

/// Connects RC `qp` to QP `dest_qpn` of the device `dest_ctx` is open on, another device
/// of this process ([`device_on`]): towards its first address's GID, path MTU 1024, the
/// local ACK `timeout`, the rest as [`PATH`].
pub fn connect_across(qp: &Qp, dest_ctx: &Context, dest_qpn: u32, timeout: u8) {
    let path = RemotePath {
        access: ALL_ACCESS,
        path_mtu: Mtu::Mtu1024,
        timeout,
        retry_cnt: PATH.retry_cnt,
        rnr_retry: PATH.rnr_retry,
        min_rnr_timer: PATH.min_rnr_timer,
        max_rd_atomic: PATH.max_rd_atomic,
        max_dest_rd_atomic: PATH.max_rd_atomic,
        ..RemotePath::new(dest_ctx.query_gid(1, 1).unwrap(), 1, dest_qpn)
    };
    qp.connect(&path).unwrap();
}
