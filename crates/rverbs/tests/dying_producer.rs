//! Death at any instant (the hardening issue; `tests/chaos/kill.sh` is the harness): a
//! process that completes to another process's CQ can be killed between reserving a ring
//! position and publishing it. The CQ's owner must not stay stuck behind that hole: the
//! completions after it are delivered, once no live producer can be holding it
//! (docs/completion-queues.md, "A producer that dies inside publish"). A process can also
//! be stopped at any instant (SIGSTOP, a debugger) and go on later: what it holds then is
//! waited for, never taken from it.
//!
//! The dead producer is played by this test writing the CQ segment as that process left
//! it: its gate word (its endpoint number, its pid, one thread inside) and one more
//! reserved position in the ring's tail. Layout: `crates/rverbs/src/rings/cq_segment.rs` and
//! `rings/producer_gate.rs` (gate at byte 256: a resize word, a pad word, then one word per
//! endpoint), `rings/completion_ring.rs` (the tail is the ring's first word, at byte 4096).

mod common;

use std::os::unix::fs::FileExt;

use common::*;
use rverbs::*;

const GATE_WORDS: u64 = 256 + 8;
const TAIL: u64 = 4096;

/// The CQ segments this process maps.
fn mapped_cqs() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut v: Vec<String> = maps
        .lines()
        .filter_map(|l| l.find('/').map(|i| l[i..].to_owned()))
        .filter(|p| p.contains("/ep-") && p.rsplit('/').next().is_some_and(|f| f.starts_with("cq-")))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The CQ segments of a new pair: `a`'s first (created first, its id is the lower one).
/// Pairs are made one at a time, so that the CQs that appear are this pair's.
fn pair_with_cq_files() -> (Side, Side, String) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let before = mapped_cqs();
    let (a, b) = pair(QpType::Rc);
    let new: Vec<String> = mapped_cqs().into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 2, "a's and b's CQs: {new:?}");
    // cq-<id>-<generation>
    let id = |p: &String| -> u32 { p.rsplit('/').next().unwrap().split('-').nth(1).unwrap().parse().unwrap() };
    let a_cq = new.iter().min_by_key(|p| id(p)).unwrap().clone();
    (a, b, a_cq)
}

/// This process's endpoint number, from the path of a segment it maps.
fn own_ep(path: &str) -> u64 {
    let dir = path.rsplit('/').nth(1).unwrap();
    dir.strip_prefix("ep-").unwrap().parse().unwrap()
}

fn read_u64(f: &std::fs::File, at: u64) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at).unwrap();
    u64::from_ne_bytes(b)
}

fn write_u64(f: &std::fs::File, at: u64, v: u64) {
    f.write_all_at(&v.to_ne_bytes(), at).unwrap();
}

/// Polls `cq` until `until` passes; the completions found.
fn poll_for(cq: &Cq, until: std::time::Duration) -> Vec<Wc> {
    let end = std::time::Instant::now() + until;
    let mut got = vec![];
    let mut wc = [Wc::default(); 4];
    while std::time::Instant::now() < end {
        let n = cq.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
        std::thread::yield_now();
    }
    got
}

#[test]
fn a_reservation_left_by_a_dead_producer_is_skipped_and_a_live_ones_is_not() {
    let (a, b, a_cq) = pair_with_cq_files();
    let seg = std::fs::OpenOptions::new().read(true).write(true).open(&a_cq).unwrap();
    let me = own_ep(&a_cq);

    // A process that has exited: its pid is dead.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = u64::from(child.id());
    child.wait().unwrap();

    // First a live producer holds the reservation: this process itself, one more thread
    // of it counted inside (as while one of its threads is between reserving and
    // publishing). Its completion after the hole must wait.
    let tail = read_u64(&seg, TAIL);
    let my_word = GATE_WORDS + 8 * me;
    assert_eq!(read_u64(&seg, my_word) & 0xffff_ffff, 0, "nobody of this process inside");
    write_u64(&seg, my_word, u64::from(std::process::id()) << 32 | 1);
    write_u64(&seg, TAIL, tail + 1);

    post_recv(&b, 1, 0, 64);
    let sge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(7, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success, "the SEND itself went through");
    // Many times the owner's check interval (10 ms): a live producer is never skipped.
    assert!(poll_for(&a.cq, std::time::Duration::from_millis(300)).is_empty(), "skipped past a live producer's reservation");

    // Now the holder is a dead process (endpoint 255, nobody's; the pid of an exited
    // child): the owner skips the hole and delivers what follows.
    write_u64(&seg, my_word, u64::from(std::process::id()) << 32);
    write_u64(&seg, GATE_WORDS + 8 * 255, dead_pid << 32 | 1);
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (7, WcStatus::Success));

    // The CQ goes on working, and a resize does not wait for the dead producer.
    post_recv(&b, 2, 0, 64);
    a.qp.post_send(&[SendWr::send(8, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    post_recv(&b, 3, 0, 64);
    a.qp.post_send(&[SendWr::send(9, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    a.cq.resize(512).unwrap();
    let wcs: Vec<u64> = [poll_one(&a.cq), poll_one(&a.cq)].iter().map(|w| w.wr_id()).collect();
    assert_eq!(wcs, [8, 9], "the completions moved with the resize");
    assert_empty(&a.cq);
}

/// A dead process's reservation in `cq_file` (endpoint `ep`, nobody's, the pid of an
/// exited child): its gate word counts one thread inside, and the next position is
/// reserved.
fn leave_a_dead_reservation(cq_file: &str, ep: u64) {
    let seg = std::fs::OpenOptions::new().read(true).write(true).open(cq_file).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = u64::from(child.id());
    child.wait().unwrap();
    write_u64(&seg, GATE_WORDS + 8 * ep, dead_pid << 32 | 1);
    let tail = read_u64(&seg, TAIL);
    write_u64(&seg, TAIL, tail + 1);
}

// A poller that looks rarely: one that sleeps until an event (arm, poll once, wait) and
// one whose QP's flush put its receives behind the hole. The owner looked for a dead
// producer's reservation once in 4 096 empty polls, and skipped it only at a second look
// 10 ms after the first: an event-driven program (whose completion behind the hole had
// fired its event already) or one polling every 10 ms waited for ever, or for minutes.
// Now arming and the flush make the next poll look, and a look skips a reservation no
// live producer holds at once (tests/chaos/kill.py's receive accounting found it).
#[test]
fn the_poll_after_arming_or_after_a_flush_finds_what_is_behind_a_dead_producers_hole() {
    let (a, b, a_cq) = pair_with_cq_files();
    leave_a_dead_reservation(&a_cq, 253);
    let sge = [a.mr.sge(0, 64).unwrap()];
    post_recv(&b, 31, 0, 64);
    a.qp.post_send(&[SendWr::send(31, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    a.cq.req_notify(false).unwrap();
    let mut wc = [Wc::default(); 2];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 1, "the poll after arming");
    assert_eq!((wc[0].wr_id(), wc[0].status()), (31, WcStatus::Success));

    leave_a_dead_reservation(&a_cq, 252);
    post_recv(&a, 32, 0, 64);
    a.qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 1, "the poll after the flush");
    assert_eq!((wc[0].wr_id(), wc[0].status()), (32, WcStatus::WrFlushErr));
    assert_empty(&a.cq);
}

#[test]
fn a_resize_skips_the_hole_a_dead_producer_left() {
    let (a, b, a_cq) = pair_with_cq_files();
    let seg = std::fs::OpenOptions::new().read(true).write(true).open(&a_cq).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = u64::from(child.id());
    child.wait().unwrap();

    // The dead producer's hole, then two completions behind it; resize before polling.
    write_u64(&seg, GATE_WORDS + 8 * 254, dead_pid << 32 | 1);
    let tail = read_u64(&seg, TAIL);
    write_u64(&seg, TAIL, tail + 1);
    let sge = [a.mr.sge(0, 64).unwrap()];
    for id in [11, 12] {
        post_recv(&b, id, 0, 64);
        a.qp.post_send(&[SendWr::send(id, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    }
    a.cq.resize(1024).unwrap();
    let wcs: Vec<u64> = [poll_one(&a.cq), poll_one(&a.cq)].iter().map(|w| w.wr_id()).collect();
    assert_eq!(wcs, [11, 12]);
    assert_empty(&a.cq);
}

// A producer that is alive but does not leave: a process stopped (SIGSTOP, a debugger's
// breakpoint) between reserving a position and publishing it. A resize then waited its
// 2 s and moved the ring anyway, stopping at the hole: the stopped producer's completion
// and the two published behind it were lost. Now the resize is called off (EAGAIN) with
// the CQ as it was; once the producer publishes and leaves, everything is polled in order
// and the resize goes through.
#[test]
fn a_resize_meeting_a_stopped_producer_inside_is_called_off_and_loses_nothing() {
    let (a, b, a_cq) = pair_with_cq_files();
    let seg = std::fs::OpenOptions::new().read(true).write(true).open(&a_cq).unwrap();
    let my_word = GATE_WORDS + 8 * own_ep(&a_cq);

    // The stopped producer: one more thread of this live process counted inside, and the
    // next position reserved.
    let hole = read_u64(&seg, TAIL);
    write_u64(&seg, my_word, u64::from(std::process::id()) << 32 | 1);
    write_u64(&seg, TAIL, hole + 1);
    let sge = [a.mr.sge(0, 64).unwrap()];
    for id in [21, 22] {
        post_recv(&b, id, 0, 64);
        a.qp.post_send(&[SendWr::send(id, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    }
    let err = a.cq.resize(1024).expect_err("a resize past a live producer's reservation");
    assert!(matches!(err, Error::Again { verb: "resize_cq", .. }), "{err:?}");
    assert_eq!(err.errno(), libc::EAGAIN, "{err}");

    // The producer goes on where it stopped: it writes its slot (the CQE's seven words,
    // then the sequence word, docs/completion-queues.md) and leaves the gate.
    let slots = TAIL + 256;
    let cap = u64::from(a.cq.cqe());
    let at = slots + 64 * (hole % cap);
    let words: [u64; 7] = [0x5709, 0, u64::from(a.qp.qp_num()), 0, 0, 0, 0];
    for (i, w) in words.iter().enumerate() {
        write_u64(&seg, at + 8 + 8 * i as u64, *w);
    }
    write_u64(&seg, at, hole + 1);
    write_u64(&seg, my_word, u64::from(std::process::id()) << 32);

    let wcs: Vec<u64> = (0..3).map(|_| poll_one(&a.cq).wr_id()).collect();
    assert_eq!(wcs, [0x5709, 21, 22], "every completion kept, in order");
    post_recv(&b, 23, 0, 64);
    a.qp.post_send(&[SendWr::send(23, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    assert!(a.cq.resize(1024).unwrap() >= 1024);
    assert_eq!(poll_one(&a.cq).wr_id(), 23, "the completion moved with the resize");
    assert_empty(&a.cq);
}

/// Byte offset of a receive ring's lock word in its segment (`rq-<qpn>-<gen>`,
/// `rings/recv_ring.rs`: the configuration line, then the takers' line, lock first).
const RQ_LOCK: u64 = 64;

/// The receive ring segment of QP `qpn` of this process (`rq-<qpn>-<generation>`, which
/// this process maps), opened for reading and writing.
fn rq_segment(qpn: u32) -> std::fs::File {
    ring_segment(&format!("rq-{qpn}-"))
}

/// The one receive ring segment this process maps whose name starts with `prefix`,
/// opened for reading and writing.
fn ring_segment(prefix: &str) -> std::fs::File {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let rq = maps
        .lines()
        .filter_map(|l| l.find('/').map(|i| &l[i..]))
        .find(|p| p.contains("/ep-") && p.rsplit('/').next().is_some_and(|f| f.starts_with(prefix)))
        .unwrap_or_else(|| panic!("a receive ring {prefix}* is mapped"));
    std::fs::OpenOptions::new().read(true).write(true).open(rq).unwrap()
}

/// The child of `a_stopped_lock_holder_is_waited_for_not_taken_over`: a process of the
/// device that says its endpoint number and then waits for its stdin to close.
fn stopped_holder_child() {
    use std::io::Read;
    let ctx = open();
    let _pd = ctx.alloc_pd().unwrap();
    let ep = own_ep(&own_hdr());
    println!("@@ {ep}");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// This process's endpoint header, found among its mappings.
fn own_hdr() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter_map(|l| l.find('/').map(|i| l[i..].to_owned())).find(|p| p.contains("/ep-") && p.ends_with("/hdr")).expect("the endpoint header is mapped")
}

/// A child process of the device (this test binary again, in role `role`) that the test
/// stops and continues: its stdin, its `@@ ` lines, and its pid. Dropped, it is continued
/// and killed however the test ended (a failed assertion must not leave a stopped process
/// behind).
struct Stoppable {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Stoppable {
    fn spawn(test: &str, role: &str) -> Stoppable {
        let (child, stdin, lines) = spawn_child(test, &[("RVERBS_TEST_ROLE", role)]);
        Stoppable { child, stdin: Some(stdin), lines }
    }

    /// Its next `@@ ` line.
    fn line(&self) -> String {
        self.lines.recv_timeout(std::time::Duration::from_secs(20)).expect("a line from the child").trim().to_owned()
    }

    fn signal(&self, s: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(), s).unwrap();
    }

    fn stop(&self) {
        self.signal(rustix::process::Signal::STOP);
    }

    fn cont(&self) {
        self.signal(rustix::process::Signal::CONT);
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(), rustix::process::Signal::CONT);
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// A process stopped (SIGSTOP, a debugger) inside the critical section of a receive ring's
// lock was, after 1 s, taken over like a word another process scribbled: when it ran
// again it finished its stores beside the new holder's. The lock word here names the
// stopped process (as its stores would have left it): a SEND that must take a receive
// from that ring waits while the holder is stopped, and goes through once it runs again
// (its word, never released by this stand-in, is then taken over after 1 s).
#[test]
fn a_stopped_lock_holder_is_waited_for_not_taken_over() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("stopped-holder") {
        return stopped_holder_child();
    }
    let child = Stoppable::spawn("a_stopped_lock_holder_is_waited_for_not_taken_over", "stopped-holder");
    let holder: u64 = child.line().parse().unwrap();

    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 31, 0, 64);
    let seg = rq_segment(b.qp.qp_num());
    assert_eq!(read_u64(&seg, RQ_LOCK) as u32, 0, "the lock is free");

    child.stop();
    let stopped_at = std::time::Instant::now();
    seg.write_all_at(&(holder as u32 + 1).to_ne_bytes(), RQ_LOCK).unwrap();
    let sender = std::thread::spawn(move || {
        let sge = [a.mr.sge(0, 64).unwrap()];
        a.qp.post_send(&[SendWr::send(31, &sge).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        (wc.status(), std::time::Instant::now())
    });
    // Three times the 1 s a live holder keeps the word: the SEND is still waiting.
    while stopped_at.elapsed() < std::time::Duration::from_secs(3) && !sender.is_finished() {
        std::thread::yield_now();
    }
    assert!(!sender.is_finished(), "the lock was taken over from the stopped holder after {:?}", stopped_at.elapsed());
    let resumed = std::time::Instant::now();
    child.cont();
    let (status, done) = sender.join().unwrap();
    assert_eq!(status, WcStatus::Success);
    assert!(done.duration_since(resumed) >= std::time::Duration::from_millis(900), "the resumed holder was given its second");
    assert_eq!(poll_one(&b.cq).wr_id(), 31);
}

/// Byte offset of key record `index` in the `tables` segment (docs/shared-state.md, "The
/// `tables` segment": 65 536 QP records of 128 bytes, 65 536 SRQ records of 64, 65 536 CQ
/// records of 16, then keys of 384), and of its count of peers' accesses in it (after the
/// descriptor's 128 bytes and this process's count's 128).
fn key_busy_remote(index: u32) -> u64 {
    (65_536 * 128 + 65_536 * 64 + 65_536 * 16 + index as usize * 384 + 256) as u64
}

/// Where an endpoint header counts the accesses its process has in progress through
/// cross-memory attach (`shm::registry`, `CMA_ACCESSES_OFF`).
const HDR_CMA_ACCESSES: u64 = 40;

// A peer stopped (SIGSTOP, a debugger) in the middle of an access through cross-memory
// attach holds the region's count of peers' accesses. Deregistration gave up on it after
// 2 s, as on a peer that died in an access, and returned: the peer, running again, wrote
// into memory the program had taken back. The stopped peer is a child process of the
// device, its header counting one such access in progress, and the count it holds one more
// peer access in the region's record: ibv_dereg_mr waits while the child is stopped, and
// gives the count 2 s again once it runs (this count never drains: then it returns).
#[test]
fn deregistration_waits_for_a_peer_stopped_in_an_access() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("stopped-accessor") {
        return stopped_holder_child();
    }
    let child = Stoppable::spawn("deregistration_waits_for_a_peer_stopped_in_an_access", "stopped-accessor");
    let peer_ep: u64 = child.line().parse().unwrap();

    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let hdr = std::path::PathBuf::from(own_hdr());
    let tables = std::fs::OpenOptions::new().read(true).write(true).open(hdr.with_file_name("tables")).unwrap();
    let peer_hdr = std::fs::OpenOptions::new().read(true).write(true).open(hdr.parent().unwrap().with_file_name(format!("ep-{peer_ep}")).join("hdr")).unwrap();
    let busy = key_busy_remote(mr.lkey() >> 8);
    assert_eq!(read_u64(&tables, busy) as u32, 0, "no peer access to the new region");
    assert_eq!(read_u64(&peer_hdr, HDR_CMA_ACCESSES), 0, "the child has no access in progress");

    child.stop();
    tables.write_all_at(&1u32.to_ne_bytes(), busy).unwrap();
    write_u64(&peer_hdr, HDR_CMA_ACCESSES, 1);
    deregistration_waits_while_stopped(mr, &child, "with a stopped peer in an access");
}

/// Deregisters `mr`, whose count of accesses `child` (stopped) may hold: the wait must
/// go on past the 2 s a dead accessor is given, and once more, and end once the child is
/// continued (the count, the test's, never drains: given 2 s again, it is given up on).
fn deregistration_waits_while_stopped(mr: Mr, child: &Stoppable, why: &str) {
    let stopped_at = std::time::Instant::now();
    let dereg = std::thread::spawn(move || {
        mr.dereg().unwrap();
        std::time::Instant::now()
    });
    while stopped_at.elapsed() < std::time::Duration::from_millis(4_500) && !dereg.is_finished() {
        std::thread::yield_now();
    }
    assert!(!dereg.is_finished(), "the wait gave up after {:?} {why}", stopped_at.elapsed());
    let resumed = std::time::Instant::now();
    child.cont();
    let done = dereg.join().unwrap();
    assert!(done.duration_since(resumed) < std::time::Duration::from_secs(10), "the running peer's count was given up on");
}

/// The child of `a_wait_for_accesses_waits_for_a_stopped_peer_that_maps_the_region`: maps
/// the segment whose path comes on its stdin, as a peer that reaches the region with plain
/// stores does, says so, and waits for its stdin to close.
fn region_mapper_child() {
    use std::io::BufRead;
    use std::os::fd::AsRawFd;
    let mut stdin = std::io::stdin().lock();
    let mut path = String::new();
    stdin.read_line(&mut path).unwrap();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path.trim()).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a shared mapping of a file this process opened, never dereferenced.
    let at = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    assert_ne!(at, libc::MAP_FAILED);
    println!("@@ mapped");
    let _ = std::io::Read::read_to_end(&mut stdin, &mut Vec::new());
}

// A peer stopped (SIGSTOP, a debugger) in the middle of plain stores into a region it maps
// holds the region's count of peers' accesses. Its stores land in the region's pages when
// it runs again: after a window's end or a QP's destroy, which leave the region
// registered, into the program's memory. The waits gave up after 2 s. The stopped peer is
// a child process of the device that maps this region's segment, and the count it holds
// one more peer access in the region's record: the wait for the region's accesses
// (ibv_dereg_mr's, here) goes on while the child is stopped, and gives the count 2 s again
// once it runs.
#[test]
fn a_wait_for_accesses_waits_for_a_stopped_peer_that_maps_the_region() {
    use std::io::Write;
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("region-mapper") {
        let _ctx = open();
        return region_mapper_child();
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let before: Vec<String> = std::fs::read_to_string("/proc/self/maps").unwrap().lines().map(str::to_owned).collect();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let segment = maps
        .lines()
        .filter(|l| !before.iter().any(|b| b == l))
        .filter_map(|l| l.find('/').map(|i| &l[i..]))
        .find(|p| p.contains("/ep-") && p.rsplit('/').next().is_some_and(|f| f.starts_with("mr-")))
        .expect("the region's memory is a segment")
        .to_owned();

    let mut child = Stoppable::spawn("a_wait_for_accesses_waits_for_a_stopped_peer_that_maps_the_region", "region-mapper");
    let stdin = child.stdin.as_mut().unwrap();
    writeln!(stdin, "{segment}").unwrap();
    stdin.flush().unwrap();
    assert_eq!(child.line(), "mapped");

    let hdr = std::path::PathBuf::from(own_hdr());
    let tables = std::fs::OpenOptions::new().read(true).write(true).open(hdr.with_file_name("tables")).unwrap();
    let busy = key_busy_remote(mr.lkey() >> 8);
    assert_eq!(read_u64(&tables, busy) as u32, 0, "no peer access to the new region");
    child.stop();
    tables.write_all_at(&1u32.to_ne_bytes(), busy).unwrap();
    deregistration_waits_while_stopped(mr, &child, "with a stopped peer mapping the region");
}

/// Where a receive ring's takers keep the count of receives still being placed, the
/// count of receives ever taken, the count taken with the last receive whose completion
/// its taker was about to publish, and who took last (`rings/recv_ring.rs`: the takers'
/// line at byte 64 holds the lock word, `placing`, `head`, `completed`, then `taker`, as
/// `pid << 32 | endpoint`).
const RQ_PLACING: u64 = 68;
const RQ_HEAD: u64 = 72;
const RQ_COMPLETED: u64 = 80;
const RQ_TAKER: u64 = 88;
const RQ_COMPLETED_AT: u64 = 112;

/// How far the child got with the receive it took.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Taker {
    /// Placing it, alive.
    Placing,
    /// Died placing it.
    DiedPlacing,
    /// Died placing it, and its endpoint number is a live process's now (this process
    /// stands in for the next one to open the device, which claims the lowest free number).
    DiedEndpointTaken,
    /// Died after publishing its completion, before uncounting it.
    DiedCompleted,
    /// Died between marking its take as completing (with the place of the completion: a
    /// reservation in the CQ) and the store that publishes the completion.
    DiedPublishing,
    /// The same, and the owner's poll skipped the dead producer's reservation before the
    /// QP's flush.
    DiedPublishingSkipped,
}

/// A CQ of `ctx` and its segment file.
fn cq_with_file(ctx: &Context, entries: u32) -> (Cq, String) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let before = mapped_cqs();
    let cq = ctx.create_cq(&CqInit::new(entries)).unwrap();
    let new: Vec<String> = mapped_cqs().into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "the CQ's segment: {new:?}");
    (cq, new[0].clone())
}

/// A dead producer's reservation at the next position of `cq_file` (the segment of a CQ
/// nobody else completes to: [`leave_a_dead_reservation`]), as the place a receive's mark
/// keeps (`rings::cq_segment::CqAt`: the generation's low 16 bits above the position plus
/// one).
fn dead_reservation_place(cq_file: &str) -> u64 {
    let seg = std::fs::OpenOptions::new().read(true).open(cq_file).unwrap();
    let pos = read_u64(&seg, TAIL);
    leave_a_dead_reservation(cq_file, 251);
    let gen: u64 = cq_file.rsplit('-').next().unwrap().parse().unwrap();
    (gen & 0xffff) << 48 | (pos + 1)
}

/// The child of `a_receive_a_dead_peer_was_placing_is_flushed_with_the_others` (and of
/// the SRQ's): a process of the device with an RC QP, which says the QP's number and its
/// endpoint's and then waits for its stdin to close (and exits: its endpoint dies).
fn taker_child() {
    use std::io::Read;
    let s = side(QpType::Rc);
    println!("@@ {} {}", s.qp.qp_num(), own_ep(&own_hdr()));
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// The QP number and the endpoint number a [`taker_child`] said.
fn taker_said(lines: &std::sync::mpsc::Receiver<String>) -> (u32, u64) {
    let line = lines.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    let mut words = line.split_whitespace().map(|w| w.parse::<u64>().unwrap());
    (words.next().unwrap() as u32, words.next().unwrap())
}

/// A [`taker_child`] of test `test`: the child, its stdin, its QP's number and its
/// endpoint's.
fn spawn_taker(test: &str) -> (std::process::Child, Option<std::process::ChildStdin>, u32, u64) {
    let (child, stdin, lines) = spawn_child(test, &[("RVERBS_TEST_ROLE", "taker")]);
    let (qpn, ep) = taker_said(&lines);
    (child, Some(stdin), qpn, ep)
}

/// The child exits if it `dies` (its stdin closed, its exit awaited), then `qp` is moved
/// to ERR if `err`.
fn end_child_then_fail(child: &mut std::process::Child, stdin: &mut Option<std::process::ChildStdin>, qp: &Qp, dies: bool, err: bool) {
    if dies {
        drop(stdin.take());
        assert!(child.wait().unwrap().success());
    }
    if err {
        qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    }
}

/// Every completion `cq` holds now, in the order polled.
fn drain(cq: &Cq) -> Vec<Wc> {
    let mut got = Vec::new();
    let mut wc = [Wc::default(); 4];
    loop {
        let n = cq.poll(&mut wc).unwrap();
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&wc[..n]);
    }
}

/// A QP of this process connected to a QP of a child process, three receives posted, the
/// first of them taken by the child and being placed (the ring's `head`, `placing` and
/// `taker` written as the child's take leaves them, and `completed` as well if the child
/// got as far as its completion); the child then exits or lives on (`taker`), and the QP
/// is moved to ERR (`err`; else destroyed as it is). Returns the flushed receives (wr_id,
/// status) in the order polled, and how long the QP's destroy took.
fn flushed_after_a_take(taker: Taker, err: bool) -> (Vec<(u64, WcStatus)>, std::time::Duration) {
    let dies = taker != Taker::Placing;
    let (mut child, mut stdin, peer_qpn, peer_ep) = spawn_taker("a_receive_a_dead_peer_was_placing_is_flushed_with_the_others");
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (cq, cq_file) = cq_with_file(&ctx, 16);
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    connect_qp(&qp, &ctx, peer_qpn, &PATH);
    for wr_id in 1..=3 {
        qp.post_recv(&[RecvWr::new(wr_id, &[])]).unwrap();
    }
    let seg = rq_segment(qp.qp_num());
    assert_eq!((read_u64(&seg, RQ_HEAD), read_u64(&seg, RQ_PLACING) as u32), (0, 0), "nothing taken yet");
    assert_eq!(read_u64(&seg, RQ_COMPLETED), 0);
    write_u64(&seg, RQ_HEAD, 1);
    seg.write_all_at(&1u32.to_ne_bytes(), RQ_PLACING).unwrap();
    let taker_ep = if taker == Taker::DiedEndpointTaken { own_ep(&own_hdr()) } else { peer_ep };
    write_u64(&seg, RQ_TAKER, u64::from(child.id()) << 32 | taker_ep);
    if matches!(taker, Taker::DiedCompleted | Taker::DiedPublishing | Taker::DiedPublishingSkipped) {
        if taker != Taker::DiedCompleted {
            write_u64(&seg, RQ_COMPLETED_AT, dead_reservation_place(&cq_file));
        }
        write_u64(&seg, RQ_COMPLETED, 1);
    }
    if taker == Taker::DiedPublishingSkipped {
        assert_empty(&cq);
    }
    end_child_then_fail(&mut child, &mut stdin, &qp, dies, err);
    // The flush completes what it completes inside the call.
    let flushed: Vec<_> = drain(&cq).iter().map(|w| (w.wr_id(), w.status())).collect();
    if !dies {
        // The living taker finishes its placement (and would complete its receive).
        seg.write_all_at(&0u32.to_ne_bytes(), RQ_PLACING).unwrap();
    }
    let t = std::time::Instant::now();
    qp.destroy().unwrap();
    let destroyed = t.elapsed();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    (flushed, destroyed)
}

// A peer process that took a receive and died while placing its message (the queued
// way: take, copy, then complete) left that receive neither in the ring nor completed:
// the QP's flush completed the other receives only, so a program waiting for every
// outstanding receive to come back (as it must before freeing their buffers) waited for
// ever, and ibv_destroy_qp waited 2 s for the placement. A NIC flushes the receive a
// message was arriving into. Now the flush completes it first (it is the oldest), with
// IBV_WC_WR_FLUSH_ERR, once the taker is known dead; a living one keeps it (it completes
// it itself), and so does one that died once its completion was published (the ring
// says so): its receive is not flushed twice. The taker is asked about by its pid too: an
// endpoint number is claimed again by the next process that opens the device, at once,
// and a new process there made the dead taker look alive (a failure of this test in a
// full parallel run).
#[test]
fn a_receive_a_dead_peer_was_placing_is_flushed_with_the_others() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("taker") {
        return taker_child();
    }
    let flush = WcStatus::WrFlushErr;
    let (flushed, _) = flushed_after_a_take(Taker::DiedPlacing, true);
    assert_eq!(flushed, [(1, flush), (2, flush), (3, flush)], "with the taker dead");
    let (flushed, _) = flushed_after_a_take(Taker::DiedEndpointTaken, true);
    assert_eq!(flushed, [(1, flush), (2, flush), (3, flush)], "with the taker dead and its endpoint number taken");
    let (flushed, _) = flushed_after_a_take(Taker::Placing, true);
    assert_eq!(flushed, [(2, flush), (3, flush)], "with the taker alive");
    let (flushed, _) = flushed_after_a_take(Taker::DiedCompleted, true);
    assert_eq!(flushed, [(2, flush), (3, flush)], "with the taker dead after its completion");
    let (flushed, _) = flushed_after_a_take(Taker::DiedPublishing, true);
    assert_eq!(flushed, [(1, flush), (2, flush), (3, flush)], "with the taker dead between its mark and its publish");
    let (flushed, _) = flushed_after_a_take(Taker::DiedPublishingSkipped, true);
    assert_eq!(flushed, [(1, flush), (2, flush), (3, flush)], "the same, its reservation skipped before the flush");
    // Destroyed without a flush (nothing completes), the QP does not wait the 2 s a
    // placement in progress is given for the dead taker's.
    let (flushed, destroyed) = flushed_after_a_take(Taker::DiedPlacing, false);
    assert_eq!(flushed, [], "completions without a flush");
    assert!(destroyed < std::time::Duration::from_secs(1), "the destroy waited {destroyed:?} for a dead taker's placement");
}

/// Where a shared receive queue's ring keeps the records of the takes being placed
/// (`rings/recv_ring.rs`: after the configuration, takers' and poster's lines, at byte
/// 192, 32 bytes each: the taker as `pid << 32 | endpoint`, with bit 31 once it is
/// publishing the completion; the QP with the count taken `<< 32`; the wr_id; the place of
/// the completion once it is publishing it).
const RQ_RECORDS: u64 = 192;
const RQ_RECORD_DONE: u64 = 1 << 31;

/// What [`srq_flushed_after_a_take`] saw: the receives the QP's flush completed (wr_id,
/// status, QP), the receives left in the SRQ, and how long destroying the QP and the SRQ
/// took.
struct SrqAfter {
    flushed: Vec<(u64, WcStatus, u32)>,
    left: usize,
    destroyed: std::time::Duration,
}

/// A QP of this process on an SRQ, connected to a QP of a child process; three receives
/// posted to the SRQ, the first taken by the child for that QP and being placed (the
/// ring's `head`, `placing` and the take's record written as the child's take leaves
/// them; the record marked if the child got as far as its completion); the SRQ
/// resized afterwards (`resize`: the take is then in a ring the resize replaced); the
/// child then exits or lives on (`taker`), and the QP is moved to ERR (`err`; else
/// destroyed as it is).
fn srq_flushed_after_a_take(taker: Taker, resize: bool, err: bool) -> SrqAfter {
    let dies = taker != Taker::Placing;
    let (mut child, mut stdin, peer_qpn, peer_ep) = spawn_taker("a_receive_of_an_srq_a_dead_peer_was_placing_is_flushed_by_its_qp");
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (cq, cq_file) = cq_with_file(&ctx, 16);
    let srq = pd.create_srq(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }).unwrap();
    let qp = pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &cq, CAP) }).unwrap();
    connect_qp(&qp, &ctx, peer_qpn, &PATH);
    for wr_id in 1..=3 {
        srq.post_recv(&[RecvWr::new(wr_id, &[])]).unwrap();
    }
    let seg = ring_segment(&format!("srq-{}-", srq.srq_num()));
    assert_eq!((read_u64(&seg, RQ_HEAD), read_u64(&seg, RQ_PLACING) as u32), (0, 0), "nothing taken yet");
    assert_eq!(read_u64(&seg, RQ_RECORDS), 0, "no take recorded");
    write_u64(&seg, RQ_HEAD, 1);
    seg.write_all_at(&1u32.to_ne_bytes(), RQ_PLACING).unwrap();
    write_u64(&seg, RQ_RECORDS + 8, u64::from(qp.qp_num()) | 1 << 32);
    write_u64(&seg, RQ_RECORDS + 16, 1);
    let done = if matches!(taker, Taker::DiedCompleted | Taker::DiedPublishing | Taker::DiedPublishingSkipped) { RQ_RECORD_DONE } else { 0 };
    if matches!(taker, Taker::DiedPublishing | Taker::DiedPublishingSkipped) {
        write_u64(&seg, RQ_RECORDS + 24, dead_reservation_place(&cq_file));
    }
    write_u64(&seg, RQ_RECORDS, u64::from(child.id()) << 32 | peer_ep | done);
    if taker == Taker::DiedPublishingSkipped {
        assert_empty(&cq);
    }
    if resize {
        srq.modify(&SrqAttr { max_wr: 16, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
    }
    end_child_then_fail(&mut child, &mut stdin, &qp, dies, err);
    // The flush completes what it completes inside the call.
    let flushed: Vec<_> = drain(&cq).iter().map(|w| (w.wr_id(), w.status(), w.qp_num())).collect();
    if !dies {
        // The living taker finishes its placement (and would complete its receive).
        write_u64(&seg, RQ_RECORDS, 0);
        seg.write_all_at(&0u32.to_ne_bytes(), RQ_PLACING).unwrap();
    }
    let left = srq.len();
    let t = std::time::Instant::now();
    qp.destroy().unwrap();
    srq.destroy().unwrap();
    let destroyed = t.elapsed();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    SrqAfter { flushed, left, destroyed }
}

// A peer process that took a receive of an SRQ and died while placing its message (the
// queued way) left that receive neither in the SRQ nor completed: many peers take from an
// SRQ at once, so its ring could not tell whose a receive being placed was, and the QP's
// flush completed nothing (docs/failure-model.md listed it as a known limitation), while
// ibv_destroy_srq waited 2 s for the placement. A NIC flushes the receive a message was
// arriving into with the QP's work. Now each such take is recorded in the ring with its
// taker and its QP, and the QP's flush completes it, with IBV_WC_WR_FLUSH_ERR, once the
// taker is known dead, also from a ring a resize replaced; the SRQ's other receives stay
// queued. A living taker keeps it, and so does one that died once it marked the record
// right before publishing the completion (that take is only uncounted).
#[test]
fn a_receive_of_an_srq_a_dead_peer_was_placing_is_flushed_by_its_qp() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("taker") {
        return taker_child();
    }
    let flush = WcStatus::WrFlushErr;
    let after = srq_flushed_after_a_take(Taker::DiedPlacing, false, true);
    let qpn = after.flushed.first().map_or(0, |f| f.2);
    assert_eq!(after.flushed, [(1, flush, qpn)], "with the taker dead");
    assert_ne!(qpn, 0);
    assert_eq!(after.left, 2, "the SRQ's other receives stay queued");
    let after = srq_flushed_after_a_take(Taker::DiedPlacing, true, true);
    assert_eq!(after.flushed.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(), [(1, flush)], "taken from a ring a resize replaced");
    assert_eq!(after.left, 2);
    let after = srq_flushed_after_a_take(Taker::Placing, false, true);
    assert_eq!(after.flushed, [], "with the taker alive");
    let after = srq_flushed_after_a_take(Taker::DiedCompleted, false, true);
    assert_eq!(after.flushed, [], "with the taker dead after its completion");
    assert!(after.destroyed < std::time::Duration::from_secs(1), "the destroys waited {:?} for a dead taker's count", after.destroyed);
    let after = srq_flushed_after_a_take(Taker::DiedPublishing, false, true);
    assert_eq!(after.flushed.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(), [(1, flush)], "with the taker dead between its mark and its publish");
    assert_eq!(after.left, 2);
    let after = srq_flushed_after_a_take(Taker::DiedPublishingSkipped, true, true);
    assert_eq!(after.flushed.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(), [(1, flush)], "the same, its reservation skipped, from a ring a resize replaced");
    // Destroyed without a flush (nothing completes), the QP and the SRQ do not wait the
    // 2 s a placement in progress is given for the dead taker's.
    let after = srq_flushed_after_a_take(Taker::DiedPlacing, false, false);
    assert_eq!(after.flushed, [], "completions without a flush");
    assert!(after.destroyed < std::time::Duration::from_secs(1), "the destroys waited {:?} for a dead taker's placement", after.destroyed);
}

// An XRC target QP takes from the XRC SRQ each request names, so it has no SRQ of its
// own to look in: a peer that died while placing into a receive of an XRC SRQ it took for
// the target QP left that receive neither queued nor completed, even once the target QP
// was moved to ERR (docs/failure-model.md listed it). Now the target QP's flush looks in
// the XRC SRQs of its domain in this process and completes the dead taker's take there,
// on the SRQ's CQ.
#[test]
fn a_receive_of_an_xrc_srq_a_dead_peer_was_placing_is_flushed_by_the_target_qp() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("taker") {
        return taker_child();
    }
    let (mut child, mut stdin, _, peer_ep) = spawn_taker("a_receive_of_an_xrc_srq_a_dead_peer_was_placing_is_flushed_by_the_target_qp");
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    let xrcd = ctx.open_xrcd(None, 0).unwrap();
    let srq = pd.create_srq_xrc(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }, &xrcd, &cq).unwrap();
    // An XRC SRQ of another domain, with a record naming the same QP: not the target's.
    let other_xrcd = ctx.open_xrcd(None, 0).unwrap();
    let other = pd.create_srq_xrc(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }, &other_xrcd, &cq).unwrap();
    let target = xrcd.create_recv_qp(0).unwrap();
    to_init(&target, ALL_ACCESS);
    for s in [&srq, &other] {
        for wr_id in 1..=3 {
            s.post_recv(&[RecvWr::new(wr_id, &[])]).unwrap();
        }
        let seg = ring_segment(&format!("srq-{}-", s.srq_num()));
        write_u64(&seg, RQ_HEAD, 1);
        seg.write_all_at(&1u32.to_ne_bytes(), RQ_PLACING).unwrap();
        write_u64(&seg, RQ_RECORDS + 8, u64::from(target.qp_num()) | 1 << 32);
        write_u64(&seg, RQ_RECORDS + 16, 1);
        write_u64(&seg, RQ_RECORDS, u64::from(child.id()) << 32 | peer_ep);
    }
    end_child_then_fail(&mut child, &mut stdin, &target, true, true);
    let flushed: Vec<_> = drain(&cq).iter().map(|w| (w.wr_id(), w.status(), w.qp_num())).collect();
    assert_eq!(flushed, [(1, WcStatus::WrFlushErr, target.qp_num())], "the dead taker's take in the target's domain, once");
    assert_eq!((srq.len(), other.len()), (2, 2), "the SRQs' other receives stay queued");
    drop(stdin);
}

/// The child of `an_express_send_from_another_process_is_named_in_the_ring_until_its_completion`:
/// a process of the device with an RC QP, which says the QP's number and its endpoint's,
/// reads the number of the QP to connect to, sends it two SENDs of no bytes, one after
/// the other (the second the express lane's: RC, RTS, nothing queued, a QP of this host
/// whose route the first found), says so once they completed, and then waits for its
/// stdin to close.
fn sender_child() {
    use std::io::{BufRead, Read};
    let s = side(QpType::Rc);
    println!("@@ {} {}", s.qp.qp_num(), own_ep(&own_hdr()));
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).unwrap();
    connect_qp(&s.qp, &s.ctx, line.trim().parse().unwrap(), &PATH);
    for wr_id in 1..=2 {
        s.qp.post_send(&[SendWr::send(wr_id, &[]).signaled()]).unwrap();
        let sent = poll_for_one(&s.cq);
        assert_eq!((sent.wr_id(), sent.status()), (wr_id, WcStatus::Success));
    }
    println!("@@ sent");
    let _ = stdin.read_to_end(&mut Vec::new());
}

/// The first completion `cq` gives within 10 s.
fn poll_for_one(cq: &Cq) -> Wc {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut wc = [Wc::default(); 1];
    while cq.poll(&mut wc).unwrap() == 0 {
        assert!(std::time::Instant::now() < end, "no completion within 10 s");
        std::thread::yield_now();
    }
    wc[0]
}

// The express lane of a peer process took a receive of this process's QP and committed
// the take once the message was placed, then published the completion: a peer that died
// in between (a back-to-back sender spends much of its time there) left the receive
// neither queued nor completed, and the QP's flush did not know it (docs/failure-model.md
// listed it). Now the express lane's take names its taker and is remembered in the
// ring's `express` word (no count to move: the message is placed inside the take), and
// is marked in `completed` right before its completion is published: the flush completes
// a dead taker's unmarked one (`rings::recv_ring`'s unit test of `reclaim_placing`). Seen
// here from the ring's words once the second SEND (the first finds the route, the queued
// way) completed.
#[test]
fn an_express_send_from_another_process_is_named_in_the_ring_until_its_completion() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("sender") {
        return sender_child();
    }
    let two = two_sends_from_a_child("an_express_send_from_another_process_is_named_in_the_ring_until_its_completion", false);
    let seg = rq_segment(two.qp.qp_num());
    assert_eq!(read_u64(&seg, RQ_HEAD), 2, "both taken");
    assert_eq!(read_u64(&seg, RQ_COMPLETED), 2, "the second marked as completing before its completion was published");
    assert_eq!(read_u64(&seg, RQ_TAKER), u64::from(two.child.id()) << 32 | two.ep, "its taker named");
    assert_eq!(read_u64(&seg, RQ_PLACING) as u32, 0, "nothing counted as being placed");
    two.end();
}

/// A [`sender_child`]'s two SENDs, received by a QP of this process (on an SRQ if
/// `srq`), both completed: the child, its stdin and endpoint number, and the QP and its
/// SRQ (kept until the end of the test).
struct TwoSends {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    ep: u64,
    qp: Qp,
    srq: Option<Srq>,
    _cq: Cq,
}

impl TwoSends {
    /// The child told to exit, and its exit checked.
    fn end(mut self) {
        drop(self.stdin);
        assert!(self.child.wait().unwrap().success());
    }
}

/// [`TwoSends`] with the child of test `test`.
fn two_sends_from_a_child(test: &str, srq: bool) -> TwoSends {
    use std::io::Write;
    let (child, mut stdin, lines) = spawn_child(test, &[("RVERBS_TEST_ROLE", "sender")]);
    let (peer_qpn, ep) = taker_said(&lines);
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    let srq = srq.then(|| pd.create_srq(&SrqInit { max_wr: 8, max_sge: 1, ..SrqInit::default() }).unwrap());
    let qp = pd.create_qp(&QpInit { srq: srq.as_ref(), ..QpInit::new(QpType::Rc, &cq, CAP) }).unwrap();
    connect_qp(&qp, &ctx, peer_qpn, &PATH);
    let recvs = [RecvWr::new(7, &[]), RecvWr::new(8, &[])];
    match &srq {
        Some(s) => s.post_recv(&recvs).unwrap(),
        None => qp.post_recv(&recvs).unwrap(),
    }
    writeln!(stdin, "{}", qp.qp_num()).unwrap();
    assert_eq!(lines.recv_timeout(std::time::Duration::from_secs(10)).unwrap().trim(), "sent");
    for wr_id in [7, 8] {
        let got = poll_for_one(&cq);
        assert_eq!((got.wr_id(), got.status(), got.qp_num()), (wr_id, WcStatus::Success, qp.qp_num()));
    }
    TwoSends { child, stdin, ep, qp, srq, _cq: cq }
}

// The same two SENDs into a QP on an SRQ: the express lane's take of an SRQ by a peer is
// recorded in the ring (with its taker and QP, marked as an express take) until its
// completion is published, so that the QP's flush completes it should the peer die in
// between (`rings::recv_ring`'s unit test of `reclaim_recorded`); once the completion is
// published the record is free again, and nothing was counted as being placed.
#[test]
fn an_express_send_into_an_srq_from_another_process_leaves_its_record_free() {
    if std::env::var("RVERBS_TEST_ROLE").as_deref() == Ok("sender") {
        return sender_child();
    }
    let two = two_sends_from_a_child("an_express_send_into_an_srq_from_another_process_leaves_its_record_free", true);
    let seg = ring_segment(&format!("srq-{}-", two.srq.as_ref().unwrap().srq_num()));
    assert_eq!(read_u64(&seg, RQ_HEAD), 2, "both taken");
    assert!((0..16).all(|i| read_u64(&seg, RQ_RECORDS + 32 * i) == 0), "every take record free");
    assert_eq!(read_u64(&seg, RQ_PLACING) as u32, 0, "nothing counted as being placed");
    two.end();
}
