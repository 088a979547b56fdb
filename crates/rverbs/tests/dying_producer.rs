//! Death at any instant (the hardening issue; `tests/chaos/kill.sh` is the harness): a
//! process that completes to another process's CQ can be killed between reserving a ring
//! position and publishing it. The CQ's owner must not stay stuck behind that hole: the
//! completions after it are delivered, once no live producer can be holding it
//! (docs/completion-queues.md, "A producer that dies inside publish").
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
