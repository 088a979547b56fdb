//! Two processes on one host (docs/device.md): a QP reaches a QP of another process
//! knowing only its GID and QPN, and every operation executes without the target's CPU.
//!
//! Each test re-executes this test binary as the peer (`RVERBS_TEST_ROLE` names the
//! role); the two talk over the child's stdin/stdout with `@@ `-prefixed lines, the way
//! `ibv_rc_pingpong` exchanges QP numbers over TCP. Every wait is bounded.

mod common;

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::*;
use rverbs::*;

const LINE_TIMEOUT: Duration = Duration::from_secs(20);

/// The peer process.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Peer {
    /// Starts this binary again, running test `test` in role `role`.
    fn spawn(test: &str, role: &str) -> Peer {
        Peer::spawn_with(test, role, &[])
    }

    /// As [`Peer::spawn`], with extra environment variables.
    fn spawn_with(test: &str, role: &str, env: &[(&str, &str)]) -> Peer {
        let env: Vec<(&str, &str)> = [("RVERBS_TEST_ROLE", role)].into_iter().chain(env.iter().copied()).collect();
        let (child, stdin, lines) = spawn_child(test, &env);
        Peer { child, stdin: Some(stdin), lines }
    }

    fn send(&mut self, msg: &str) {
        let stdin = self.stdin.as_mut().expect("pipe open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    #[track_caller]
    fn recv(&mut self) -> Vec<String> {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(l) => l.split_whitespace().map(str::to_owned).collect(),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                panic!("the peer said nothing for {LINE_TIMEOUT:?}");
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().unwrap();
                panic!("the peer exited ({status}) before answering");
            }
        }
    }

    /// Waits for the peer to exit successfully.
    fn finish(mut self) {
        self.stdin = None;
        let deadline = Instant::now() + LINE_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "peer failed: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "peer did not exit");
            std::thread::yield_now();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side of the conversation.
struct Parent {
    lines: std::io::Lines<std::io::StdinLock<'static>>,
}

impl Parent {
    fn new() -> Parent {
        Parent { lines: std::io::stdin().lock().lines() }
    }

    fn say(&self, msg: &str) {
        println!("@@ {msg}");
        std::io::stdout().flush().unwrap();
    }

    fn hear(&mut self) -> Vec<String> {
        let line = self.lines.next().expect("parent closed the pipe").unwrap();
        line.split_whitespace().map(str::to_owned).collect()
    }
}

fn role() -> Option<String> {
    std::env::var("RVERBS_TEST_ROLE").ok()
}

fn num(s: &str) -> u64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

/// Waits until `fd` is readable, at most `LINE_TIMEOUT` (a real kernel fd: the event
/// arrives without this process polling the CQ).
fn wait_readable(fd: std::os::fd::BorrowedFd<'_>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = rustix::time::Timespec { tv_sec: LINE_TIMEOUT.as_secs() as i64, tv_nsec: 0 };
    let n = poll(&mut fds, Some(&ts)).unwrap();
    assert_eq!(n, 1, "no event within {LINE_TIMEOUT:?}");
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Page-aligned caller memory (registered with `reg_mr`: peers reach it with
/// cross-memory attach unless the registration makes it shareable).
struct UserMem {
    ptr: *mut u8,
    len: usize,
}

impl UserMem {
    fn new(len: usize) -> UserMem {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        UserMem { ptr, len }
    }
}

impl Drop for UserMem {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).unwrap();
        // SAFETY: allocated in `new` with this layout; the regions naming it are gone.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

const USER_LEN: usize = 1 << 16;

/// RC between two processes: WRITE, READ and atomics into the peer's library-allocated
/// region (a shared segment) and its caller-memory region (cross-memory attach), SEND
/// with immediate delivered into the peer's receive queue and CQ while the peer sleeps in
/// its completion channel, and SEND back.
#[test]
fn rc_operations_reach_a_peer_process() {
    if role().as_deref() == Some("rc") {
        return rc_child();
    }
    // Caller memory left where it is: peers reach it with cross-memory attach.
    rc_parent(Peer::spawn_with("rc_operations_reach_a_peer_process", "rc", &[("RVERBS_SHARED_MR", "0")]), "private");
}

/// The same with `RVERBS_SHARED_MR=1` in the peer: its caller-memory region is moved onto
/// a shared file at registration, and reached with plain stores instead of system calls.
#[test]
fn rc_operations_reach_a_peer_process_with_shareable_registrations() {
    if role().as_deref() == Some("rc") {
        return rc_child();
    }
    let test = "rc_operations_reach_a_peer_process_with_shareable_registrations";
    rc_parent(Peer::spawn_with(test, "rc", &[("RVERBS_SHARED_MR", "1")]), "shared");
}

/// With no setting, shareable registrations are the default where the runtime directory
/// is a memory filesystem (docs/memory.md, "Shareable registrations"; /dev/shm is, unless
/// RVERBS_RUNTIME_DIR or XDG_RUNTIME_DIR name another), and caller memory stays private
/// elsewhere.
#[test]
fn rc_operations_reach_a_peer_process_with_the_default_setting() {
    if role().as_deref() == Some("rc") {
        return rc_child();
    }
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let dir = nonempty("RVERBS_RUNTIME_DIR").map(std::path::PathBuf::from).or_else(|| nonempty("XDG_RUNTIME_DIR").map(|x| std::path::Path::new(&x).join("rverbs")));
    let dir = dir.unwrap_or_else(|| {
        let uid = rustix::process::getuid().as_raw();
        std::path::PathBuf::from(if std::path::Path::new("/dev/shm").is_dir() { format!("/dev/shm/rverbs-{uid}") } else { format!("/tmp/rverbs-{uid}") })
    });
    // The directory, or the one it will be made in.
    let existing = dir.ancestors().find(|d| d.exists()).expect("/ exists");
    let fs = rustix::fs::statfs(existing).unwrap();
    let in_memory = matches!(fs.f_type as u64, 0x0102_1994 | 0x8584_58f6); // tmpfs, ramfs
    let test = "rc_operations_reach_a_peer_process_with_the_default_setting";
    let mut peer = Peer::spawn(test, "rc");
    if std::env::var_os("RVERBS_SHARED_MR").is_some() {
        peer.child.kill().ok();
        return; // the setting was given: the tests above cover both values
    }
    rc_parent(peer, if in_memory { "shared" } else { "private" });
}

/// The same with `RVERBS_CMA=off` in the peer: its caller-memory region cannot be reached
/// with cross-memory attach, so the peer's progress thread copies for us (the fallback
/// for peers the kernel does not let us attach to).
#[test]
fn rc_operations_reach_a_peer_process_that_refuses_cross_memory_attach() {
    if role().as_deref() == Some("rc") {
        return rc_child();
    }
    let test = "rc_operations_reach_a_peer_process_that_refuses_cross_memory_attach";
    rc_parent(Peer::spawn_with(test, "rc", &[("RVERBS_CMA", "off"), ("RVERBS_SHARED_MR", "0")]), "private");
}

/// Whether the page at `addr` of this process is a shared mapping (/proc/self/maps).
fn mapping_kind(addr: usize) -> &'static str {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        let (s, e) = range.split_once('-').unwrap();
        let (s, e) = (usize::from_str_radix(s, 16).unwrap(), usize::from_str_radix(e, 16).unwrap());
        if (s..e).contains(&addr) {
            return if perms.ends_with('s') { "shared" } else { "private" };
        }
    }
    panic!("{addr:#x} is not mapped");
}

fn rc_parent(mut peer: Peer, kind: &str) {
    let a = side(QpType::Rc);
    let hello = peer.recv();
    let (qpn, lib_rkey, lib_addr, user_rkey, user_addr) =
        (num(&hello[0]) as u32, num(&hello[1]) as u32, num(&hello[2]), num(&hello[3]) as u32, num(&hello[4]));
    assert_eq!(hello[5], kind, "the peer's caller memory mapping");
    assert_ne!(qpn >> 16, a.qp.qp_num() >> 16, "the peer is another endpoint");
    peer.send(&format!("{}", a.qp.qp_num()));
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, qpn, &PATH);
    to_rts(&a.qp, &PATH);
    assert_eq!(peer.recv(), ["ready"]);

    // WRITE into both of the peer's regions, then READ them back.
    for (i, (rkey, addr)) in [(lib_rkey, lib_addr), (user_rkey, user_addr)].into_iter().enumerate() {
        let data = pattern(i as u8 + 1, 5000);
        a.mr.write(0, &data).unwrap();
        let sge = [a.mr.sge(0, 5000).unwrap()];
        a.qp.post_send(&[SendWr::write(10 + i as u64, &sge, addr + 100, rkey).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (10 + i as u64, WcStatus::Success));
        let back = [a.mr.sge(8192, 5000).unwrap()];
        a.qp.post_send(&[SendWr::read(20 + i as u64, &back, addr + 100, rkey).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.status(), wc.byte_len()), (WcStatus::Success, Some(5000)));
        let mut got = vec![0u8; 5000];
        a.mr.read(8192, &mut got).unwrap();
        assert_eq!(got, data, "region {i}: READ returns what WRITE placed");
    }

    // Atomics on a word of each region: fetch-add returns the old value, compare-swap
    // swaps only on a match.
    for (rkey, addr) in [(lib_rkey, lib_addr), (user_rkey, user_addr)] {
        let word = addr + 64 * 1024 - 8;
        let res = [a.mr.sge(0, 8).unwrap()];
        for k in 0..3u64 {
            a.qp.post_send(&[SendWr::fetch_add(30, &res, word, rkey, 5).signaled()]).unwrap();
            assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
            assert_eq!(a.mr.read_u64(0).unwrap(), 5 * k);
        }
        a.qp.post_send(&[SendWr::compare_swap(31, &res, word, rkey, 14, 99).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        assert_eq!(a.mr.read_u64(0).unwrap(), 15, "no swap on a mismatch");
        a.qp.post_send(&[SendWr::compare_swap(32, &res, word, rkey, 15, 99).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        assert_eq!(a.mr.read_u64(0).unwrap(), 15);
    }

    // SEND with immediate: the peer waits in its completion channel.
    let msg = pattern(7, 3000);
    a.mr.write(0, &msg).unwrap();
    let sge = [a.mr.sge(0, 3000).unwrap()];
    a.qp.post_send(&[SendWr::send(40, &sge).with_imm(0xfeed).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let sum: u64 = msg.iter().map(|&b| u64::from(b)).sum();
    assert_eq!(peer.recv(), ["got", "3000", &0xfeedu32.to_string(), &sum.to_string()]);

    // The peer's view of its regions after our writes, atomics and SEND (received at
    // offset 32768 of its library region).
    let expect = |seed: u8, received: bool| -> u64 {
        let mut v = vec![0u8; USER_LEN];
        v[100..5100].copy_from_slice(&pattern(seed, 5000));
        v[USER_LEN - 8..].copy_from_slice(&99u64.to_ne_bytes());
        if received {
            v[32768..35768].copy_from_slice(&msg);
        }
        v.iter().map(|&b| u64::from(b)).sum()
    };
    assert_eq!(peer.recv(), ["sums", &expect(1, true).to_string(), &expect(2, false).to_string()]);

    // SEND the other way: into our receive queue, from the peer's process.
    post_recv(&a, 50, 0, 4096);
    peer.send("send");
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (50, WcStatus::Success, Some(1234)));
    let mut got = vec![0u8; 1234];
    a.mr.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(9, 1234));
    peer.finish();
    // Every access through cross-memory attach (the private region's) uncounted itself
    // from this endpoint's header: a count left there would make the owners this process
    // reaches wait for it whenever it is stopped (`Registry::cma_accesses`).
    assert_eq!(own_cma_accesses(), 0, "accesses through cross-memory attach left counted");
}

/// This process's count of accesses in progress through cross-memory attach, read from
/// its endpoint header (`shm::registry`: the word at byte 40).
fn own_cma_accesses() -> u64 {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let hdr = maps.lines().filter_map(|l| l.find('/').map(|i| &l[i..])).find(|p| p.contains("/ep-") && p.ends_with("/hdr")).expect("the endpoint header is mapped");
    let mut w = [0u8; 8];
    std::fs::File::open(hdr).unwrap().read_exact_at(&mut w, 40).unwrap();
    u64::from_ne_bytes(w)
}

fn rc_child() {
    let mut parent = Parent::new();
    let b = side(QpType::Rc);
    let ch = b.ctx.create_comp_channel().unwrap();
    let cq = b.ctx.create_cq(&CqInit::new(64).channel(&ch)).unwrap();
    let qp = b.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let user = UserMem::new(USER_LEN);
    // SAFETY: `user` outlives the region (dropped after it at the end of this function).
    let umr = unsafe { b.pd.reg_mr(user.ptr, USER_LEN, ALL_ACCESS) }.unwrap();
    let kind = mapping_kind(user.ptr as usize);
    parent.say(&format!("{} {} {} {} {} {kind}", qp.qp_num(), b.mr.rkey(), b.mr.iova(), umr.rkey(), umr.iova()));
    let parent_qpn = num(&parent.hear()[0]) as u32;
    to_init(&qp, ALL_ACCESS);
    to_rtr(&qp, &b.ctx, parent_qpn, &PATH);
    to_rts(&qp, &PATH);
    let rsge = [b.mr.sge(32768, 4096).unwrap()];
    qp.post_recv(&[RecvWr::new(1, &rsge)]).unwrap();
    cq.req_notify(false).unwrap();
    parent.say("ready");

    // Sleep in the channel until the parent's SEND completes here.
    wait_readable(ch.fd());
    let ev = ch.get_cq_event().unwrap();
    assert!(ev.cq().same_as(&cq));
    ev.ack();
    let mut wc = [Wc::default(); 2];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].status(), WcStatus::Success);
    assert_eq!(wc[0].opcode(), Some(WcOpcode::Recv));
    let len = wc[0].byte_len().unwrap() as usize;
    let mut got = vec![0u8; len];
    b.mr.read(32768, &mut got).unwrap();
    let sum: u64 = got.iter().map(|&x| u64::from(x)).sum();
    parent.say(&format!("got {len} {} {sum}", wc[0].imm_data().unwrap()));

    let mut lib = vec![0u8; USER_LEN];
    b.mr.read(0, &mut lib).unwrap();
    let mut usr = vec![0u8; USER_LEN];
    umr.read(0, &mut usr).unwrap();
    let s = |v: &[u8]| v.iter().map(|&x| u64::from(x)).sum::<u64>();
    parent.say(&format!("sums {} {}", s(&lib), s(&usr)));

    assert_eq!(parent.hear(), ["send"]);
    b.mr.write(40000, &pattern(9, 1234)).unwrap();
    let sge = [b.mr.sge(40000, 1234).unwrap()];
    qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    let wc = poll_one(&cq);
    assert_eq!(wc.status(), WcStatus::Success);
    drop(umr);
    drop(user);
}

/// ibv_post_recv(3) across processes, in perftest's shape: a receive queue of 4 kept full,
/// each receive posted again once its completion is polled, filled by SENDs of a peer
/// process (whose takes report the count in the completion, docs/shared-state.md, "The
/// consumed count in the completion"). Every repost is taken, one more is ENOMEM, and
/// each message lands in its own receive, in order.
#[test]
fn a_receive_queue_kept_full_by_a_peers_sends_takes_each_repost_and_refuses_one_more() {
    const DEPTH: u64 = 4;
    const MESSAGES: u64 = 40;
    if role().as_deref() == Some("full_rq") {
        let mut parent = Parent::new();
        let b = side(QpType::Rc);
        parent.say(&format!("{}", b.qp.qp_num()));
        let pq = num(&parent.hear()[0]) as u32;
        to_init(&b.qp, ALL_ACCESS);
        to_rtr(&b.qp, &b.ctx, pq, &PATH);
        to_rts(&b.qp, &PATH);
        for m in 0..MESSAGES {
            assert_eq!(parent.hear(), ["send", &m.to_string()]);
            b.mr.write(0, &(m + 1000).to_le_bytes()).unwrap();
            let sge = [b.mr.sge(0, 8).unwrap()];
            b.qp.post_send(&[SendWr::send(m, &sge).signaled()]).unwrap();
            assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
            parent.say("sent");
        }
        return;
    }
    let mut peer = Peer::spawn("a_receive_queue_kept_full_by_a_peers_sends_takes_each_repost_and_refuses_one_more", "full_rq");
    let a = side_with(QpType::Rc, 64, QpCap { max_recv_wr: DEPTH as u32, ..CAP });
    let at = |wr_id: u64| (wr_id % DEPTH) as usize * 8;
    let recv = |wr_id: u64| [a.mr.sge(at(wr_id), 8).unwrap()];
    let qpn = num(&peer.recv()[0]) as u32;
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, qpn, &PATH);
    to_rts(&a.qp, &PATH);
    for k in 0..DEPTH {
        a.qp.post_recv(&[RecvWr::new(k, &recv(k))]).unwrap();
    }
    peer.send(&format!("{}", a.qp.qp_num()));
    for m in 0..MESSAGES {
        peer.send(&format!("send {m}"));
        assert_eq!(peer.recv(), ["sent"]);
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (m, WcStatus::Success, Some(8)));
        let mut got = [0u8; 8];
        a.mr.read(at(m), &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), m + 1000, "message {m} in its own receive");
        a.qp.post_recv(&[RecvWr::new(m + DEPTH, &recv(m + DEPTH))]).unwrap();
        let e = a.qp.post_recv(&[RecvWr::new(99, &recv(0))]).unwrap_err();
        assert_eq!(e.error.errno(), libc::ENOMEM, "message {m}: the queue is full again");
    }
    peer.finish();
}

/// Receives placed by their owner (docs/memory.md, "Receives placed by their owner"): a
/// receive into private memory (a shared anonymous mapping, which registration never
/// moves) of a QP connected to another process is posted through a slot of a library
/// region; the peer's SEND fills the slot with plain stores and completes the receive,
/// and the poll that retrieves the completion copies the message into the receive's two
/// SGEs. So the completion is in the CQ while the buffers are still untouched (the
/// peer's cross-memory attach would have written them first), and after the poll they
/// hold the message. Receives posted while earlier ones' completions wait keep their own
/// slots (8 in flight on a queue of 4); a receive posted in INIT moves to a slot at RTR;
/// a WRITE with immediate consumes a receive and scatters nothing into it; a receive
/// larger than a slot is still written by the peer.
#[test]
fn sends_from_a_peer_process_into_private_memory_are_placed_by_the_poll() {
    const DEPTH: u32 = 4;
    const AREA: usize = 512;
    const PAGES: usize = 8;
    if role().as_deref() == Some("placed_by_poll") {
        let mut parent = Parent::new();
        let b = side(QpType::Rc);
        parent.say(&format!("{}", b.qp.qp_num()));
        let pq = num(&parent.hear()[0]) as u32;
        b.qp.connect(&remote(&b.ctx, pq, &PATH, ALL_ACCESS)).unwrap();
        loop {
            let w = parent.hear();
            if w[0] == "done" {
                break;
            }
            let (seed, len) = (num(&w[1]) as u8, num(&w[2]) as usize);
            b.mr.write(0, &pattern(seed, len)).unwrap();
            let sge = [b.mr.sge(0, len as u32).unwrap()];
            let wr = match w[0].as_str() {
                "send" => SendWr::send(1, &sge),
                _ => SendWr::write(2, &sge, num(&w[3]), num(&w[4]) as u32).with_imm(7),
            };
            b.qp.post_send(&[wr.signaled()]).unwrap();
            parent.say(&format!("{:?}", poll_one(&b.cq).status()));
        }
        return;
    }
    let mut peer = Peer::spawn("sends_from_a_peer_process_into_private_memory_are_placed_by_the_poll", "placed_by_poll");
    let a = side_with(QpType::Rc, 64, QpCap { max_recv_wr: DEPTH, ..CAP });
    let len = PAGES * 4096;
    // SAFETY: a new shared anonymous mapping at an address the kernel chooses.
    let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
    assert_ne!(base, libc::MAP_FAILED);
    let base = base as *mut u8;
    // SAFETY: the mapping is ours and outlives the region (unmapped after it is dropped).
    let mr = unsafe { a.pd.reg_mr(base, len, ALL_ACCESS) }.unwrap();
    assert_eq!(mapping_kind(base as usize), "shared", "private memory: peers reach it with cross-memory attach");
    mr.fill(0, len, 0xee).unwrap();
    // Receive `i`: 64 bytes at the start of area `i`, then 300 from its byte 128.
    let sges = |i: usize| [mr.sge(i * AREA, 64).unwrap(), mr.sge(i * AREA + 128, 300).unwrap()];
    let area = |i: usize| {
        let mut v = vec![0u8; AREA];
        mr.read(i * AREA, &mut v).unwrap();
        v
    };
    let expected = |seed: u8, n: usize| {
        let (msg, mut v) = (pattern(seed, n), vec![0xeeu8; AREA]);
        let first = n.min(64);
        v[..first].copy_from_slice(&msg[..first]);
        v[128..128 + n - first].copy_from_slice(&msg[first..]);
        v
    };
    let post = |i: usize| a.qp.post_recv(&[RecvWr::new(i as u64, &sges(i))]).unwrap();
    let sizes = [1usize, 63, 64, 65, 200, 364];

    // A receive posted in INIT, before the QP knows its writer, is moved to a slot at RTR.
    let qpn = num(&peer.recv()[0]) as u32;
    to_init(&a.qp, ALL_ACCESS);
    post(17);
    to_rtr(&a.qp, &a.ctx, qpn, &PATH);
    to_rts(&a.qp, &PATH);
    peer.send(&format!("{}", a.qp.qp_num()));
    assert_eq!(a.qp.data_in_order(WrOpcode::Send, 0), 0, "a peer process places SENDs late or unordered");
    peer.send("send 5 364");
    assert_eq!(peer.recv(), ["Success"]);
    assert_eq!(a.cq.len(), 1);
    assert!(area(17).iter().all(|&b| b == 0xee), "the receive posted in INIT is written by the poll");
    assert_eq!(poll_one(&a.cq).wr_id(), 17);
    assert_eq!(area(17), expected(5, 364));
    mr.fill(0, len, 0xee).unwrap();

    // One at a time: the completion waits in the CQ, the buffers untouched, until polled.
    for r in 0..12 {
        let (i, n, seed) = (r % 8, sizes[r % sizes.len()], 10 + r as u8);
        post(i);
        peer.send(&format!("send {seed} {n}"));
        assert_eq!(peer.recv(), ["Success"], "round {r}");
        assert_eq!(a.cq.len(), 1, "round {r}: the receive completed");
        assert!(area(i).iter().all(|&b| b == 0xee), "round {r}: the buffers are written by the poll, not before");
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (i as u64, WcStatus::Success, Some(n as u32)));
        assert_eq!(area(i), expected(seed, n), "round {r}: the message in the receive's two SGEs");
        mr.fill(0, len, 0xee).unwrap();
    }

    // Eight in flight on a queue of four: each receive keeps its own slot.
    for i in 8..12 {
        post(i);
    }
    for i in 8..12 {
        peer.send(&format!("send {} 300", 40 + i));
        assert_eq!(peer.recv(), ["Success"]);
    }
    for i in 12..16 {
        post(i);
    }
    for i in 12..16 {
        peer.send(&format!("send {} 300", 40 + i));
        assert_eq!(peer.recv(), ["Success"]);
    }
    for i in 8..16 {
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (i as u64, WcStatus::Success));
        assert_eq!(area(i), expected(40 + i as u8, 300), "receive {i}");
    }

    // A WRITE with immediate consumes a receive and places its bytes where it writes.
    post(16);
    peer.send(&format!("write_imm 70 100 {} {}", mr.iova() + 20 * AREA as u64, mr.rkey()));
    assert_eq!(peer.recv(), ["Success"]);
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (16, Some(WcOpcode::RecvRdmaWithImm), Some(100)));
    assert!(area(16).iter().all(|&b| b == 0xee), "nothing scattered into the consumed receive");
    assert_eq!(&area(20)[..100], &pattern(70, 100)[..]);

    // Larger than a slot: the peer writes it, before the completion.
    let big = [mr.sge(4 * 4096, 8192).unwrap()];
    a.qp.post_recv(&[RecvWr::new(99, &big)]).unwrap();
    peer.send("send 80 5000");
    assert_eq!(peer.recv(), ["Success"]);
    let mut got = vec![0u8; 5000];
    mr.read(4 * 4096, &mut got).unwrap();
    assert_eq!(got, pattern(80, 5000), "placed by the peer before the poll");
    assert_eq!(poll_one(&a.cq).byte_len(), Some(5000));

    // The QP destroyed before its completions are polled: the polls after the destroy
    // still place the messages of the receives taken, except into a region deregistered
    // meanwhile (the device never writes outside a registered region).
    mr.fill(0, len, 0xee).unwrap();
    // SAFETY: the mapping is ours and outlives the region (dropped before the unmap).
    let gone = unsafe { a.pd.reg_mr(base.add(6 * 4096), 4096, ALL_ACCESS) }.unwrap();
    post(0);
    post(1);
    a.qp.post_recv(&[RecvWr::new(2, &[gone.sge(0, 200).unwrap()])]).unwrap();
    for (i, n) in [(0usize, 364usize), (1, 9), (2, 200)] {
        peer.send(&format!("send {} {n}", 90 + i));
        assert_eq!(peer.recv(), ["Success"], "message {i}");
    }
    a.qp.destroy().unwrap();
    drop(gone);
    assert!(area(0).iter().chain(&area(1)).all(|&b| b == 0xee), "written by the polls, not by the destroy");
    for (i, n) in [(0usize, 364u32), (1, 9), (2, 200)] {
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (i as u64, WcStatus::Success, Some(n)));
    }
    assert_eq!(area(0), expected(90, 364));
    assert_eq!(area(1), expected(91, 9));
    let mut page = vec![0u8; 4096];
    mr.read(6 * 4096, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == 0xee), "nothing placed into the region deregistered before the poll");

    peer.send("done");
    peer.finish();
    drop(mr);
    // SAFETY: the region naming the mapping is gone.
    unsafe { libc::munmap(base.cast(), len) };
}

/// A pinned receive's hold across processes (docs/memory.md, "Buffer lifetime"): a peer
/// process takes the receive, places the message and completes it, and cannot drop this
/// process's hold itself; polling the completion lets it go. A region whose every handle
/// was dropped, before the poll or after, is then deregistered: the peer's RDMA WRITE with
/// its R_Key fails with IBV_WC_REM_ACCESS_ERR. Four rounds, each on a new connection
/// (the failed WRITE ends one): the SEND is the connection's first request (the queued
/// way) or follows one (the express lane), with each order of drop and poll.
#[test]
fn a_receive_completed_by_a_peer_process_lets_its_region_go_when_polled() {
    const ROUNDS: u64 = 4;
    if role().as_deref() == Some("gone_region") {
        let mut parent = Parent::new();
        for _ in 0..ROUNDS {
            let b = side(QpType::Rc);
            parent.say(&format!("{}", b.qp.qp_num()));
            let pq = num(&parent.hear()[0]) as u32;
            b.qp.connect(&remote(&b.ctx, pq, &PATH, ALL_ACCESS)).unwrap();
            let sge = [b.mr.sge(0, 8).unwrap()];
            loop {
                let words = parent.hear();
                let wr = match words[0].as_str() {
                    "send" => SendWr::send(1, &sge),
                    "write" => SendWr::write(2, &sge, num(&words[1]), num(&words[2]) as u32),
                    _ => break,
                };
                b.qp.post_send(&[wr.signaled()]).unwrap();
                parent.say(&format!("{:?}", poll_one(&b.cq).status()));
            }
        }
        return;
    }
    let mut peer = Peer::spawn("a_receive_completed_by_a_peer_process_lets_its_region_go_when_polled", "gone_region");
    for round in 0..ROUNDS {
        let (express, dropped_first) = (round >= 2, round % 2 == 1);
        let a = side(QpType::Rc);
        let qpn = num(&peer.recv()[0]) as u32;
        a.qp.connect(&remote(&a.ctx, qpn, &PATH, ALL_ACCESS)).unwrap();
        peer.send(&format!("{}", a.qp.qp_num()));
        if express {
            peer.send(&format!("write {} {}", a.mr.iova(), a.mr.rkey()));
            assert_eq!(peer.recv(), ["Success"], "round {round}: the first request");
        }
        let m = a.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        let (iova, rkey) = (m.iova(), m.rkey());
        a.qp.post_recv(&[RecvWr::new(round, &[m.sge(0, 64).unwrap()])]).unwrap();
        let mut last = Some(m);
        if dropped_first {
            drop(last.take());
        }
        peer.send("send");
        assert_eq!(peer.recv(), ["Success"], "round {round}");
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (round, WcStatus::Success));
        drop(last);
        peer.send(&format!("write {iova} {rkey}"));
        let express_or_queued = if express { "express lane" } else { "queued way" };
        assert_eq!(peer.recv(), ["RemAccessErr"], "round {round} ({express_or_queued}): the region outlived its receive's completion");
        peer.send("next");
    }
    peer.finish();
}

/// A peer that dies leaves its partner with RETRY_EXC_ERR after the QP's timeout and
/// retry count — never a hang — and its endpoint directory is reclaimed.
#[test]
fn a_dead_peer_ends_in_retry_exc_err_and_is_reclaimed() {
    if role().as_deref() == Some("dies") {
        let mut parent = Parent::new();
        let b = side(QpType::Rc);
        parent.say(&format!("{} {}", b.qp.qp_num(), rverbs::endpoint_dir().display()));
        let pq = num(&parent.hear()[0]) as u32;
        to_init(&b.qp, ALL_ACCESS);
        to_rtr(&b.qp, &b.ctx, pq, &PATH);
        to_rts(&b.qp, &PATH);
        post_recv(&b, 1, 0, 64);
        parent.say("ready");
        // Wait to be killed.
        let _ = parent.hear();
        return;
    }
    let mut peer = Peer::spawn("a_dead_peer_ends_in_retry_exc_err_and_is_reclaimed", "dies");
    let a = side(QpType::Rc);
    let hello = peer.recv();
    let (qpn, dir) = (num(&hello[0]) as u32, std::path::PathBuf::from(&hello[1]));
    assert!(dir.is_dir());
    peer.send(&a.qp.qp_num().to_string());
    // timeout 8: 4.096 µs × 2^8 ≈ 1 ms per try; 2 retries.
    let path = Path { timeout: 8, retry_cnt: 2, ..PATH };
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, qpn, &path);
    to_rts(&a.qp, &path);
    assert_eq!(peer.recv(), ["ready"]);

    // Alive: a SEND lands.
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);

    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::RetryExcErr));
    assert_eq!(a.qp.state(), QpState::Err);

    // The survivor noticed the death and removed what the peer left behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    while dir.exists() {
        assert!(Instant::now() < deadline, "{} was not reclaimed", dir.display());
        std::thread::yield_now();
    }
}

/// A peer killed before any other process reached it (so no process watches its pidfd)
/// leaves nothing behind once the last process of the device exits normally: exiting
/// reclaims the directories of dead endpoints, not only its own (the kill harness,
/// tests/chaos/kill.py, found such directories left until the next process opened the
/// device).
#[test]
fn a_peer_killed_before_anyone_reached_it_is_reclaimed_when_the_last_process_exits() {
    const TEST: &str = "a_peer_killed_before_anyone_reached_it_is_reclaimed_when_the_last_process_exits";
    if matches!(role().as_deref(), Some("bystander" | "killed")) {
        let mut parent = Parent::new();
        let _ctx = open();
        parent.say(&rverbs::endpoint_dir().display().to_string());
        // Wait to exit (bystander) or to be killed.
        let _ = parent.hear();
        return;
    }
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
    let rt = base.join(format!("rverbs-reclaim-at-exit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&rt);
    let env = [("RVERBS_RUNTIME_DIR", rt.to_str().unwrap())];
    let mut bystander = Peer::spawn_with(TEST, "bystander", &env);
    let bystander_dir = std::path::PathBuf::from(&bystander.recv()[0]);
    let mut killed = Peer::spawn_with(TEST, "killed", &env);
    let killed_dir = std::path::PathBuf::from(&killed.recv()[0]);
    assert!(killed_dir.is_dir() && bystander_dir.is_dir());
    assert_ne!(killed_dir, bystander_dir);

    killed.child.kill().unwrap(); // SIGKILL
    killed.child.wait().unwrap();
    assert!(killed_dir.is_dir(), "nobody has reclaimed it yet");
    bystander.send("exit");
    bystander.finish();
    let left: Vec<_> = std::fs::read_dir(&rt)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir() && e.file_name().to_string_lossy().starts_with("ep-"))
        .map(|e| e.file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&rt);
    assert!(left.is_empty(), "endpoint directories left once every process is gone: {left:?}");
}

/// A process killed while a child it forked lives on is dead to the device: the child
/// does not keep its endpoint (lock and directory) alive, so the next process to open
/// the device reclaims it (the kill harness found the victim's directory left for as
/// long as its forked child lived, and for good once that child exited).
#[test]
fn a_killed_process_whose_forked_child_lives_on_is_reclaimed() {
    const TEST: &str = "a_killed_process_whose_forked_child_lives_on_is_reclaimed";
    match role().as_deref() {
        Some("forks") => {
            let mut parent = Parent::new();
            let _ctx = open();
            // SAFETY: the child only calls poll and _exit (async-signal-safe) before it
            // exits, as a child of a multi-threaded process must.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                // Live until stdin's writer (the test) is gone, at most 60 s.
                for _ in 0..300 {
                    let mut p = libc::pollfd { fd: 0, events: 0, revents: 0 };
                    // SAFETY: one valid pollfd.
                    if unsafe { libc::poll(&mut p, 1, 200) } > 0 {
                        break;
                    }
                }
                // SAFETY: ends the child without running the parent's atexit hooks.
                unsafe { libc::_exit(0) };
            }
            parent.say(&format!("{} {pid}", rverbs::endpoint_dir().display()));
            let _ = parent.hear(); // killed meanwhile
            return;
        }
        Some("opens") => {
            let _ctx = open();
            return;
        }
        _ => {}
    }
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
    let rt = base.join(format!("rverbs-fork-reclaim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&rt);
    let env = [("RVERBS_RUNTIME_DIR", rt.to_str().unwrap())];
    let mut victim = Peer::spawn_with(TEST, "forks", &env);
    let hello = victim.recv();
    let (dir, child) = (std::path::PathBuf::from(&hello[0]), num(&hello[1]) as i32);
    assert!(dir.is_dir());
    victim.child.kill().unwrap(); // SIGKILL; its forked child lives on
    victim.child.wait().unwrap();
    // SAFETY: signal 0 only asks whether the process exists.
    assert_eq!(unsafe { libc::kill(child, 0) }, 0, "the forked child is alive");

    // The next process to open the device reclaims the dead endpoint.
    Peer::spawn_with(TEST, "opens", &env).finish();
    let reclaimed = !dir.exists();
    drop(victim); // closes the child's stdin: it exits
    let _ = std::fs::remove_dir_all(&rt);
    assert!(reclaimed, "{} was kept alive by the forked child of its dead owner", dir.display());
}

/// A responder error caused by a peer reaches the owner: its QP enters ERR, the
/// asynchronous event arrives on its async fd and its receives are flushed by its own
/// progress thread (the doorbell).
#[test]
fn responder_errors_caused_by_a_peer_reach_the_owner() {
    if role().as_deref() == Some("victim") {
        let mut parent = Parent::new();
        let b = side(QpType::Rc);
        parent.say(&b.qp.qp_num().to_string());
        let pq = num(&parent.hear()[0]) as u32;
        to_init(&b.qp, ALL_ACCESS);
        to_rtr(&b.qp, &b.ctx, pq, &PATH);
        to_rts(&b.qp, &PATH);
        post_recv(&b, 7, 0, 64);
        post_recv(&b, 8, 64, 64);
        parent.say("ready");
        wait_readable(b.ctx.async_fd());
        let ev = b.ctx.get_async_event().unwrap();
        let kind = ev.event_type();
        drop(ev);
        let flushed: Vec<u64> = (0..2)
            .map(|_| {
                let wc = poll_one(&b.cq);
                assert_eq!(wc.status(), WcStatus::WrFlushErr);
                wc.wr_id()
            })
            .collect();
        parent.say(&format!("{kind:?} {:?} {:?} {:?}", b.qp.state(), flushed[0], flushed[1]));
        return;
    }
    let mut peer = Peer::spawn("responder_errors_caused_by_a_peer_reach_the_owner", "victim");
    let a = side(QpType::Rc);
    let qpn = num(&peer.recv()[0]) as u32;
    peer.send(&a.qp.qp_num().to_string());
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, qpn, &PATH);
    to_rts(&a.qp, &PATH);
    assert_eq!(peer.recv(), ["ready"]);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::write(1, &sge, 0x1000, 0xdead_be00).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.status(), WcStatus::RemAccessErr);
    assert_eq!(peer.recv(), ["QpAccessErr", "Err", "7", "8"]);
    peer.finish();
}

/// UD between processes (GRH and source QP at the receiver), an SRQ whose limit event is
/// raised by the peer's consumption, and a CQ the peer overruns (CQ_ERR and QP_FATAL on
/// the owner's async fd).
#[test]
fn ud_srq_and_overrun_across_processes() {
    if role().as_deref() == Some("ud") {
        let mut parent = Parent::new();
        let b = side(QpType::Ud);
        let srq = b.pd.create_srq(&SrqInit { max_wr: 16, max_sge: 1, srq_limit: 0, srq_context: 0 }).unwrap();
        let small = b.ctx.create_cq(&CqInit::new(2)).unwrap();
        let rc = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &small, CAP) }).unwrap();
        to_init(&b.qp, ALL_ACCESS);
        to_rtr(&b.qp, &b.ctx, 0, &PATH);
        to_rts(&b.qp, &PATH);
        post_recv(&b, 5, 0, 2048);
        parent.say(&format!("{} {}", b.qp.qp_num(), rc.qp_num()));
        let pq = num(&parent.hear()[0]) as u32;
        to_init(&rc, ALL_ACCESS);
        to_rtr(&rc, &b.ctx, pq, &PATH);
        to_rts(&rc, &PATH);
        for i in 0..4u64 {
            let s = [b.mr.sge(8192 + 128 * i as usize, 128).unwrap()];
            srq.post_recv(&[RecvWr::new(100 + i, &s)]).unwrap();
        }
        srq.modify(&SrqAttr { srq_limit: 3, ..SrqAttr::default() }, SrqAttrMask::LIMIT).unwrap();
        parent.say("ready");

        let wc = poll_one(&b.cq);
        assert_eq!(wc.status(), WcStatus::Success);
        assert!(wc.wc_flags().unwrap().contains(WcFlags::GRH));
        let mut payload = [0u8; 11];
        b.mr.read(40, &mut payload).unwrap();
        parent.say(&format!("ud {} {} {}", wc.byte_len().unwrap(), wc.src_qp().unwrap(), String::from_utf8_lossy(&payload)));

        // Events in order: the limit (first SEND), then the overrun of the 2-entry CQ
        // (third SEND): CQ_ERR, then QP_FATAL.
        let mut kinds = Vec::new();
        for _ in 0..3 {
            wait_readable(b.ctx.async_fd());
            let ev = b.ctx.get_async_event().unwrap();
            kinds.push(format!("{:?}", ev.event_type()));
        }
        parent.say(&kinds.join(" "));
        assert!(small.is_errored());
        return;
    }
    let mut peer = Peer::spawn("ud_srq_and_overrun_across_processes", "ud");
    let a = side(QpType::Ud);
    let hello = peer.recv();
    let (ud_qpn, rc_qpn) = (num(&hello[0]) as u32, num(&hello[1]) as u32);
    let rc = a.pd.create_qp(&QpInit::new(QpType::Rc, &a.cq, CAP)).unwrap();
    peer.send(&rc.qp_num().to_string());
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, 0, &PATH);
    to_rts(&a.qp, &PATH);
    let path = Path { timeout: 8, retry_cnt: 1, ..PATH };
    to_init(&rc, ALL_ACCESS);
    to_rtr(&rc, &a.ctx, rc_qpn, &path);
    to_rts(&rc, &path);
    assert_eq!(peer.recv(), ["ready"]);

    a.mr.write(0, b"hello, peer").unwrap();
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    let sge = [a.mr.sge(0, 11).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).ud(&ah, ud_qpn, 0x1111_1111).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(peer.recv(), ["ud", "51", &a.qp.qp_num().to_string(), "hello,", "peer"]);

    // Three SENDs into the peer's SRQ: the first leaves 3 (< limit? no: 3 left is not
    // below 3), the second leaves 2 (below: SRQ_LIMIT_REACHED); the third overruns the
    // 2-entry CQ.
    for i in 0..3u64 {
        rc.post_send(&[SendWr::send(10 + i, &sge).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        if i < 2 {
            assert_eq!(wc.status(), WcStatus::Success, "send {i}");
        } else {
            // The responder could not complete: no ACK, the requester retries and gives up.
            assert_eq!(wc.status(), WcStatus::RetryExcErr, "send {i}");
        }
    }
    assert_eq!(peer.recv(), ["SrqLimitReached", "CqErr", "QpFatal"]);
    peer.finish();
}

/// XRC domains shared through a file across processes (what `ibv_xsrq_pingpong -c 2`
/// needs): a message to the target QP of one process that names an XRC SRQ of another
/// process of the same domain lands in that SRQ and completes on its CQ; an SRQ of a
/// domain opened with another file is never reached.
#[test]
fn xrc_domains_shared_through_a_file_span_processes() {
    let test = "xrc_domains_shared_through_a_file_span_processes";
    let file = |tag: &str| std::env::temp_dir().join(format!("rverbs-xrcd-{tag}-{}", std::process::id()));
    match role().as_deref() {
        Some("xrc_target") => {
            let mut parent = Parent::new();
            let path = std::path::PathBuf::from(&parent.hear()[0]);
            let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
            let ctx = open();
            let xrcd = ctx.open_xrcd(Some(std::os::fd::AsFd::as_fd(&f)), libc::O_CREAT).unwrap();
            let qp = xrcd.create_recv_qp(0).unwrap();
            parent.say(&qp.qp_num().to_string());
            let initiator = num(&parent.hear()[0]) as u32;
            to_init(&qp, ALL_ACCESS);
            to_rtr(&qp, &ctx, initiator, &PATH);
            parent.say("ready");
            let _ = parent.hear(); // until the parent is done
            return;
        }
        Some("xrc_srq") => {
            let mut parent = Parent::new();
            let path = std::path::PathBuf::from(&parent.hear()[0]);
            let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
            let ctx = open();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
            let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
            let xrcd = ctx.open_xrcd(Some(std::os::fd::AsFd::as_fd(&f)), libc::O_CREAT).unwrap();
            let srq = pd.create_srq_xrc(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }, &xrcd, &cq).unwrap();
            let sge = [mr.sge(0, 256).unwrap()];
            srq.post_recv(&[RecvWr::new(77, &sge)]).unwrap();
            parent.say(&srq.srq_num().to_string());
            if parent.hear()[0] == "expect" {
                let wc = poll_one(&cq);
                let mut got = [0u8; 9];
                mr.read(0, &mut got).unwrap();
                parent.say(&format!(
                    "{:?} {} {} {}",
                    wc.status(),
                    wc.wr_id(),
                    wc.qp_num(),
                    String::from_utf8_lossy(&got)
                ));
            } else {
                assert_empty(&cq);
                parent.say("nothing");
            }
            return;
        }
        _ => {}
    }
    let shared = file("shared");
    let other = file("other");
    let mut target = Peer::spawn(test, "xrc_target");
    let mut in_domain = Peer::spawn(test, "xrc_srq");
    let mut foreign = Peer::spawn(test, "xrc_srq");
    target.send(&shared.display().to_string());
    in_domain.send(&shared.display().to_string());
    foreign.send(&other.display().to_string());
    let target_qpn = num(&target.recv()[0]) as u32;
    let srqn = num(&in_domain.recv()[0]) as u32;
    let foreign_srqn = num(&foreign.recv()[0]) as u32;
    assert_ne!(target_qpn >> 16, srqn >> 16, "target QP and SRQ in different processes");

    let a = side(QpType::Rc);
    let send = a.pd.create_qp(&QpInit { sq_sig_all: true, ..QpInit::new(QpType::XrcSend, &a.cq, CAP) }).unwrap();
    target.send(&send.qp_num().to_string());
    assert_eq!(target.recv(), ["ready"]);
    let path = Path { timeout: 8, retry_cnt: 1, ..PATH };
    to_init(&send, Access::empty());
    to_rtr(&send, &a.ctx, target_qpn, &path);
    to_rts(&send, &path);

    a.mr.write(0, b"xrc cross").unwrap();
    let sge = [a.mr.sge(0, 9).unwrap()];
    in_domain.send("expect");
    send.post_send(&[SendWr::send(1, &sge).xrc(srqn)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let got = in_domain.recv();
    assert_eq!(got, ["Success", "77", &target_qpn.to_string(), "xrc", "cross"]);

    // The same target QP cannot steer into an SRQ of another domain: refused as an
    // invalid request (docs/rocev2-wire.md §1.8), as across hosts.
    send.post_send(&[SendWr::send(2, &sge).xrc(foreign_srqn)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::RemInvReqErr);
    foreign.send("none");
    assert_eq!(foreign.recv(), ["nothing"]);
    target.send("done");
    in_domain.finish();
    foreign.finish();
    target.finish();
    let _ = std::fs::remove_file(shared);
    let _ = std::fs::remove_file(other);
}

// ibv_open_xrcd(3): O_CREAT / O_EXCL see the domains of every process, as the kernel's
// one table per device does (they were applied per process: a second process opening
// with O_CREAT | O_EXCL got a domain of its own instead of EINVAL).
#[test]
fn xrc_domain_file_rules_apply_across_processes() {
    let test = "xrc_domain_file_rules_apply_across_processes";
    if role().as_deref() == Some("xrcd_holder") {
        let mut parent = Parent::new();
        let path = std::path::PathBuf::from(&parent.hear()[0]);
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
        let ctx = open();
        let xrcd = ctx.open_xrcd(Some(std::os::fd::AsFd::as_fd(&f)), libc::O_CREAT | libc::O_EXCL).unwrap();
        parent.say("held");
        let _ = parent.hear(); // until the parent is done (or kills this process)
        drop(xrcd);
        return;
    }
    let path = std::env::temp_dir().join(format!("rverbs-xrcd-rules-{}", std::process::id()));
    let f = std::fs::File::create(&path).unwrap();
    let fd = || std::os::fd::AsFd::as_fd(&f);
    let ctx = open();
    let errno = |r: rverbs::Result<Xrcd>| r.map(|_| 0).unwrap_or_else(|e| e.errno());
    assert_eq!(errno(ctx.open_xrcd(Some(fd()), 0)), libc::EAGAIN, "nobody holds it yet");

    // Held by another process that exits normally.
    let mut holder = Peer::spawn(test, "xrcd_holder");
    holder.send(&path.display().to_string());
    assert_eq!(holder.recv(), ["held"]);
    assert_eq!(errno(ctx.open_xrcd(Some(fd()), libc::O_CREAT | libc::O_EXCL)), libc::EINVAL, "O_EXCL on a domain another process holds");
    let shared = ctx.open_xrcd(Some(fd()), 0).expect("the other process's domain exists");
    drop(shared);
    holder.send("done");
    holder.finish();
    assert_eq!(errno(ctx.open_xrcd(Some(fd()), 0)), libc::EAGAIN, "the holder closed it when it exited");

    // Held by a process that is killed: its entry does not keep the domain alive.
    let mut holder = Peer::spawn(test, "xrcd_holder");
    holder.send(&path.display().to_string());
    assert_eq!(holder.recv(), ["held"]);
    assert_eq!(errno(ctx.open_xrcd(Some(fd()), libc::O_CREAT | libc::O_EXCL)), libc::EINVAL);
    drop(holder); // SIGKILL, then reaped
    assert_eq!(errno(ctx.open_xrcd(Some(fd()), 0)), libc::EAGAIN, "a killed holder holds nothing");
    let mine = ctx.open_xrcd(Some(fd()), libc::O_CREAT | libc::O_EXCL).expect("created anew");
    mine.close().unwrap();
    drop(mine);
    let _ = std::fs::remove_file(path);
}

/// A multicast group of this test run (ff0e::/16, the parent's pid in the low bits), so
/// concurrent runs on the host never share it.
fn run_group(pid: u32) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x0e;
    g[8..12].copy_from_slice(b"rvxp");
    g[12..].copy_from_slice(&pid.to_be_bytes());
    Gid(g)
}

/// The host-wide record of group `gid` (docs/queue-pairs.md, "Multicast"): the entry names
/// under `<runtime dir>/mcast/<gid hex>/`.
fn group_entries(gid: &Gid) -> Vec<String> {
    let root = rverbs::endpoint_dir().parent().unwrap().to_owned();
    let hex: String = gid.0.iter().map(|b| format!("{b:02x}")).collect();
    match std::fs::read_dir(root.join("mcast").join(hex)) {
        Ok(d) => d.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(_) => Vec::new(),
    }
}

/// The member's side of the multicast tests: a UD QP attached to the parent's group,
/// receiving what the parent sends, detaching when told.
fn mcast_member() {
    let mut parent = Parent::new();
    let gid = run_group(num(&parent.hear()[0]) as u32);
    let b = side(QpType::Ud);
    to_init(&b.qp, ALL_ACCESS);
    to_rtr(&b.qp, &b.ctx, 0, &PATH);
    to_rts(&b.qp, &PATH);
    post_recv(&b, 1, 0, 2048);
    post_recv(&b, 2, 2048, 2048);
    b.qp.attach_mcast(&gid, 0).unwrap();
    parent.say(&format!("{} {}", b.qp.qp_num(), std::process::id()));
    loop {
        let cmd = parent.hear();
        match cmd[0].as_str() {
            "recv" => {
                let wc = poll_one(&b.cq);
                assert_eq!(wc.status(), WcStatus::Success);
                assert!(wc.wc_flags().unwrap().contains(WcFlags::GRH));
                let off = 2048 * (wc.wr_id() as usize - 1);
                let mut grh = [0u8; 40];
                b.mr.read(off, &mut grh).unwrap();
                let mut payload = vec![0u8; wc.byte_len().unwrap() as usize - 40];
                b.mr.read(off + 40, &mut payload).unwrap();
                assert_eq!(&grh[24..40], &gid.0, "the GRH names the group as destination");
                parent.say(&format!("got {} {}", wc.src_qp().unwrap(), String::from_utf8_lossy(&payload)));
            }
            "detach" => {
                b.qp.detach_mcast(&gid, 0).unwrap();
                parent.say("detached");
            }
            "empty?" => {
                assert_empty(&b.cq);
                parent.say("empty");
            }
            "wait" => {} // until killed
            "bye" => return,
            other => panic!("unknown command {other}"),
        }
    }
}

/// Sends `msg` to group `gid` from `a`'s UD QP (remote QPN 0xFFFFFF) and waits for the
/// send's completion (delivery is done by then: it happens inside post_send); returns the
/// other completions met on the way (`a`'s own copy, if it is a member).
fn send_to_group(a: &Side, gid: &Gid, msg: &str) -> Vec<Wc> {
    let mut attr = av(&a.ctx);
    attr.grh.as_mut().unwrap().dgid = *gid;
    let ah = Ah::new(&a.pd, &attr).unwrap();
    a.mr.write(0, msg.as_bytes()).unwrap();
    let sge = [a.mr.sge(0, msg.len() as u32).unwrap()];
    a.qp.post_send(&[SendWr::send(9, &sge).ud(&ah, MULTICAST_QPN, 0x1111_1111).signaled()]).unwrap();
    let mut others = Vec::new();
    loop {
        let wc = poll_one(&a.cq);
        if wc.wr_id() == 9 {
            assert_eq!(wc.status(), WcStatus::Success);
            return others;
        }
        others.push(wc);
    }
}

fn ud_rts() -> Side {
    let a = side(QpType::Ud);
    to_init(&a.qp, ALL_ACCESS);
    to_rtr(&a.qp, &a.ctx, 0, &PATH);
    to_rts(&a.qp, &PATH);
    a
}

/// A UD send to a multicast group reaches a member QP of another process (host-wide
/// groups), and the sender's own attached QP as well; once the member process dies
/// without detaching, its entry in the host-wide record is removed by the next send.
#[test]
fn multicast_reaches_members_in_other_processes() {
    if role().as_deref() == Some("mcast") {
        return mcast_member();
    }
    let test = "multicast_reaches_members_in_other_processes";
    let gid = run_group(std::process::id());
    let mut peer = Peer::spawn(test, "mcast");
    peer.send(&std::process::id().to_string());
    let hello = peer.recv();
    let (qpn, pid) = (num(&hello[0]) as u32, num(&hello[1]));
    let a = ud_rts();
    assert_ne!(qpn >> 16, a.qp.qp_num() >> 16, "the member is another endpoint");
    assert_eq!(group_entries(&gid), [format!("{qpn:06x}.{pid}")]);
    // Our own QP is a member too: it gets its copy (loopback).
    post_recv(&a, 7, 4096, 2048);
    a.qp.attach_mcast(&gid, 0).unwrap();
    assert_eq!(group_entries(&gid).len(), 2);

    let own = send_to_group(&a, &gid, "hello, group");
    peer.send("recv");
    assert_eq!(peer.recv(), ["got", &a.qp.qp_num().to_string(), "hello,", "group"]);
    assert_eq!(own.len(), 1);
    assert_eq!((own[0].wr_id(), own[0].status(), own[0].byte_len()), (7, WcStatus::Success, Some(52)));

    // The member dies attached: its entry stays until a send finds its endpoint dead.
    peer.send("wait");
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    let deadline = Instant::now() + LINE_TIMEOUT;
    loop {
        send_to_group(&a, &gid, "anyone?");
        if group_entries(&gid).len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the dead member's entry was not removed");
        std::thread::sleep(Duration::from_millis(10));
    }
    a.qp.detach_mcast(&gid, 0).unwrap();
    assert!(group_entries(&gid).is_empty());
}

/// A member of another process that detaches no longer receives what is sent to the
/// group, and its host-wide entry is gone.
#[test]
fn a_detached_member_in_another_process_no_longer_receives() {
    if role().as_deref() == Some("mcast") {
        return mcast_member();
    }
    let test = "a_detached_member_in_another_process_no_longer_receives";
    let gid = run_group(std::process::id() ^ 0x8000_0000);
    let mut peer = Peer::spawn(test, "mcast");
    peer.send(&(std::process::id() ^ 0x8000_0000).to_string());
    let _ = peer.recv();
    let a = ud_rts();
    send_to_group(&a, &gid, "first");
    peer.send("recv");
    assert_eq!(peer.recv(), ["got", &a.qp.qp_num().to_string(), "first"]);
    peer.send("detach");
    assert_eq!(peer.recv(), ["detached"]);
    assert!(group_entries(&gid).is_empty());
    send_to_group(&a, &gid, "second");
    peer.send("empty?");
    assert_eq!(peer.recv(), ["empty"]);
    peer.send("bye");
    peer.finish();
}

/// The fault plan's port state is the process's own (docs/fault-injection.md): a peer
/// whose port an injected PORT_ERR took down takes no request (a SEND to it ends in
/// RETRY_EXC_ERR here, its receive untouched) and sends none (its SEND ends in
/// RETRY_EXC_ERR there and nothing arrives here), while this process's port stays up.
#[test]
fn a_peer_whose_port_is_down_neither_takes_nor_sends_requests() {
    // timeout 8: 4.096 µs × 2^8 ≈ 1 ms per try; 2 retries.
    let path = Path { timeout: 8, retry_cnt: 2, ..PATH };
    if role().as_deref() == Some("port-down") {
        let mut parent = Parent::new();
        let (b1, b2) = (side(QpType::Rc), side(QpType::Rc));
        parent.say(&format!("{} {}", b1.qp.qp_num(), b2.qp.qp_num()));
        let qpns = parent.hear();
        for (b, q) in [(&b1, &qpns[0]), (&b2, &qpns[1])] {
            to_init(&b.qp, ALL_ACCESS);
            to_rtr(&b.qp, &b.ctx, num(q) as u32, &path);
            to_rts(&b.qp, &path);
        }
        // The process's first receive raises PORT_ERR (RVERBS_FAULTS, set by the parent).
        post_recv(&b1, 1, 0, 64);
        let port = b1.ctx.query_port(1).unwrap();
        assert_eq!(port.state, PortState::Down);
        parent.say("down");
        assert_eq!(parent.hear(), ["send"]);
        let sge = [b2.mr.sge(0, 64).unwrap()];
        b2.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
        let wc = poll_one(&b2.cq);
        parent.say(&format!("sent {} {}", wc.wr_id(), wc.status() as u32));
        assert_eq!(parent.hear(), ["check"]);
        assert_empty(&b1.cq);
        assert_eq!(b1.qp.state(), QpState::Rts, "the requests never reached the QP");
        parent.say("done");
        return;
    }
    let mut peer = Peer::spawn_with(
        "a_peer_whose_port_is_down_neither_takes_nor_sends_requests",
        "port-down",
        &[("RVERBS_FAULTS", "event=PORT_ERR:on=post_recv:nth=1")],
    );
    let (a1, a2) = (side(QpType::Rc), side(QpType::Rc));
    let qpns = peer.recv();
    peer.send(&format!("{} {}", a1.qp.qp_num(), a2.qp.qp_num()));
    for (a, q) in [(&a1, &qpns[0]), (&a2, &qpns[1])] {
        to_init(&a.qp, ALL_ACCESS);
        to_rtr(&a.qp, &a.ctx, num(q) as u32, &path);
        to_rts(&a.qp, &path);
    }
    post_recv(&a2, 20, 0, 64);
    assert_eq!(peer.recv(), ["down"]);
    assert_eq!(a1.ctx.query_port(1).unwrap().state, PortState::Active, "this process's port is its own");

    // The peer's SEND never leaves it: its retries run out, nothing arrives here.
    peer.send("send");
    assert_eq!(peer.recv(), ["sent", "2", &(WcStatus::RetryExcErr as u32).to_string()]);
    assert_empty(&a2.cq);
    assert_eq!(a2.qp.state(), QpState::Rts);

    // A SEND to the peer is not taken: RETRY_EXC_ERR here.
    let sge = [a1.mr.sge(0, 64).unwrap()];
    a1.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    let wc = poll_one(&a1.cq);
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::RetryExcErr));
    peer.send("check");
    assert_eq!(peer.recv(), ["done"]);
    peer.finish();
}
