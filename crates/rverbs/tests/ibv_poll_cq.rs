//! ibv_poll_cq(3), and the CQ rules of ibv_create_cq_ex(3).
mod common;
use common::*;
use rverbs::*;

/// Posts `n` signaled zero-length RDMA WRITEs with wr_ids start..start+n.
fn post_writes(s: &Side, peer: &Side, start: u64, n: u64) {
    for i in start..start + n {
        let wr = SendWr::write(i, &[], peer.mr.iova(), peer.mr.rkey()).signaled();
        s.qp.post_send(&[wr]).unwrap();
    }
}

#[test]
fn poll_returns_min_of_n_and_available() {
    let (a, b) = pair(QpType::Rc);
    post_writes(&a, &b, 0, 5);
    let mut wc = [Wc::default(); 3];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 3);
    let mut wc = [Wc::default(); 10];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 2);
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 0);
}

#[test]
fn poll_returns_oldest_first() {
    let (a, b) = pair(QpType::Rc);
    post_writes(&a, &b, 100, 8);
    let mut wc = [Wc::default(); 8];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 8);
    let ids: Vec<u64> = wc.iter().map(Wc::wr_id).collect();
    assert_eq!(ids, (100..108).collect::<Vec<_>>());
    for w in &wc {
        assert_eq!(w.status(), WcStatus::Success);
        assert_eq!(w.opcode(), Some(WcOpcode::RdmaWrite));
        assert_eq!(w.qp_num(), a.qp.qp_num());
    }
}

#[test]
fn polled_completions_are_removed_for_good() {
    let (a, b) = pair(QpType::Rc);
    post_writes(&a, &b, 0, 1);
    assert_eq!(poll_one(&a.cq).wr_id(), 0);
    assert_empty(&a.cq);
    post_writes(&a, &b, 1, 1);
    assert_eq!(poll_one(&a.cq).wr_id(), 1);
}

#[test]
fn poll_with_empty_array_returns_zero_and_keeps_entries() {
    let (a, b) = pair(QpType::Rc);
    post_writes(&a, &b, 0, 1);
    assert_eq!(a.cq.poll(&mut []).unwrap(), 0);
    assert_eq!(poll_one(&a.cq).wr_id(), 0);
}

#[test]
fn error_completion_has_only_wr_id_status_qp_num_vendor_err() {
    let (a, b) = pair(QpType::Rc);
    let sge = [a.mr.sge(0, 8).unwrap()];
    // Same key index, another key byte: a key no region has (flipping an index bit could
    // name a live region of another PD and report REMOTE_PD instead).
    let wr = SendWr::write(42, &sge, b.mr.iova(), b.mr.rkey() ^ 0x01).signaled();
    a.qp.post_send(&[wr]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.wr_id(), 42);
    assert_eq!(wc.status(), WcStatus::RemAccessErr);
    assert_eq!(wc.qp_num(), a.qp.qp_num());
    assert_eq!(wc.vendor_err(), vendor_err::REMOTE_RKEY);
    assert!(vendor_err::describe(wc.vendor_err()).is_some());
    assert_eq!(wc.opcode(), None);
    assert_eq!(wc.byte_len(), None);
    assert_eq!(wc.wc_flags(), None);
    assert_eq!(wc.src_qp(), None);
}

#[test]
fn cq_reports_its_real_size() {
    let ctx = open();
    let cq = ctx.create_cq(&CqInit::new(10)).unwrap();
    assert!(cq.cqe() >= 10);
    assert!(cq.cqe().is_power_of_two());
    let big = ctx.create_cq(&CqInit::new(2000)).unwrap();
    assert!(big.cqe() >= 2000);
}

#[test]
fn create_cq_refuses_zero_and_above_max() {
    let ctx = open();
    let max = ctx.query_device().max_cqe;
    assert_eq!(ctx.create_cq(&CqInit::new(0)).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(ctx.create_cq(&CqInit::new(max + 1)).unwrap_err().errno(), libc::EINVAL);
    // The maximum itself works (memory is committed lazily).
    assert!(ctx.create_cq(&CqInit::new(max)).unwrap().cqe() >= max);
}

#[test]
fn create_cq_refuses_a_bad_comp_vector() {
    let ctx = open();
    let init = CqInit { comp_vector: 1, ..CqInit::new(4) };
    assert_eq!(ctx.create_cq(&init).unwrap_err().errno(), libc::EINVAL);
}

fn overrun_pair(flags: CqCreateFlags) -> (Side, Side) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    // Replace a's QP with one completing to a tiny CQ.
    let cq = a.ctx.create_cq(&CqInit::new(4).flags(flags)).unwrap();
    let qp = a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let a = Side { cq, qp, ..a };
    connect(&a, &b, &PATH);
    (a, b)
}

#[test]
fn overrun_puts_the_cq_in_error_with_cq_err_and_qp_fatal() {
    let (a, b) = overrun_pair(CqCreateFlags::empty());
    let cap = a.cq.cqe() as u64;
    post_writes(&a, &b, 0, cap);
    assert!(!a.cq.is_errored());
    // One more completion than the CQ holds.
    post_writes(&a, &b, cap, 1);
    assert!(a.cq.is_errored());
    let mut wc = [Wc::default(); 4];
    assert!(matches!(a.cq.poll(&mut wc), Err(Error::CqOverrun)));
    assert!(matches!(a.cq.start_poll(), Err(Error::CqOverrun)));
    // The async events: CQ_ERR for the CQ, QP_FATAL for the QP completing to it.
    let ev = a.ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type(), EventType::CqErr);
    assert!(matches!(ev.element(), AsyncElement::Cq(c) if c.same_as(&a.cq)));
    drop(ev);
    let ev = a.ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type(), EventType::QpFatal);
    assert!(matches!(ev.element(), AsyncElement::Qp(q) if q.qp_num() == a.qp.qp_num()));
    drop(ev);
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn ignore_overrun_keeps_the_newest_and_never_errors() {
    let (a, b) = overrun_pair(CqCreateFlags::IGNORE_OVERRUN);
    let cap = a.cq.cqe() as u64;
    post_writes(&a, &b, 0, cap + 3);
    assert!(!a.cq.is_errored());
    let mut wc = vec![Wc::default(); cap as usize + 3];
    let n = a.cq.poll(&mut wc).unwrap();
    assert_eq!(n as u64, cap, "the ring holds exactly its capacity");
    // The oldest three were overwritten; the rest arrive oldest first.
    let ids: Vec<u64> = wc[..n].iter().map(Wc::wr_id).collect();
    assert_eq!(ids, (3..cap + 3).collect::<Vec<_>>());
    assert_eq!(a.qp.state(), QpState::Rts);
    rustix::io::ioctl_fionbio(a.ctx.async_fd(), true).unwrap();
    assert!(matches!(a.ctx.get_async_event(), Err(Error::WouldBlock)));
}

#[test]
fn single_threaded_cq_polls() {
    let (a, b) = overrun_pair(CqCreateFlags::SINGLE_THREADED);
    post_writes(&a, &b, 0, 3);
    let mut wc = [Wc::default(); 8];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 3);
    assert_eq!(a.cq.create_flags(), CqCreateFlags::SINGLE_THREADED);
}

#[test]
fn destroy_is_refused_while_a_qp_uses_the_cq() {
    let a = side(QpType::Rc);
    assert_eq!(a.cq.destroy().unwrap_err().errno(), libc::EBUSY);
    a.qp.destroy().unwrap();
    a.cq.destroy().unwrap();
    // A destroyed CQ cannot be reused.
    assert!(a.pd.create_qp(&QpInit::new(QpType::Rc, &a.cq, CAP)).is_err());
}

#[test]
fn resize_keeps_completions_and_refuses_too_small() {
    let (a, b) = pair(QpType::Rc);
    post_writes(&a, &b, 0, 6);
    assert_eq!(a.cq.resize(4).unwrap_err().errno(), libc::EINVAL);
    let n = a.cq.resize(1000).unwrap();
    assert!(n >= 1000);
    assert_eq!(a.cq.cqe(), n);
    let mut wc = [Wc::default(); 8];
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 6);
    assert_eq!(wc[0].wr_id(), 0);
    assert_eq!(wc[5].wr_id(), 5);
    assert_eq!(a.cq.resize(0).unwrap_err().errno(), libc::EINVAL);
}

/// A poll racing a resize in another thread finds the completion the CQ held before the
/// poll began (ibv_resize_cq(3) keeps completions; ibv_poll_cq(3) returns what the CQ
/// holds). The resize moves the completions into the new generation before making it
/// current: the empty look without the lock (the busy poller's), reading the old one
/// between the two, once answered "empty", and a waiter that armed the CQ and polled once
/// more then slept on a completion that would never raise an event (the lost wake-up of
/// tests/c/threads.c).
#[test]
fn a_poll_racing_a_resize_finds_the_completion_held_before_it() {
    // Bounded: a poller descheduled while pinned keeps every generation replaced
    // meanwhile mapped (one mapping each) until a resize after it runs again.
    const RESIZES: u32 = 4_000;
    let (a, b) = pair_with(QpType::Rc, &PATH, 64, CAP);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (polls, missed, uncounted) = std::thread::scope(|s| {
        s.spawn(|| {
            for k in 0..RESIZES {
                a.cq.resize(if k.is_multiple_of(2) { 16 } else { 64 }).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut wc = [Wc::default(); 1];
        let (mut polls, mut missed) = (0u64, 0u64);
        let mut uncounted = 0u64;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            // In-process: the completion is in the CQ when the post returns.
            post_writes(&a, &b, polls, 1);
            // The poll comes 0 to 100 us later, so that it meets every step of a resize
            // (which takes tens of microseconds) now and then.
            let until = std::time::Instant::now() + std::time::Duration::from_nanos(polls % 101 * 1000);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            // ibv_poll_cq(3)'s count of what is waiting (the Rust API's `len`) too.
            if a.cq.is_empty() {
                uncounted += 1;
            }
            if a.cq.poll(&mut wc).unwrap() == 0 {
                missed += 1;
                wc[0] = poll_one(&a.cq);
            }
            assert_eq!(wc[0].wr_id(), polls, "each completion once, in order");
            polls += 1;
        }
        (polls, missed, uncounted)
    });
    assert_eq!(missed, 0, "polls that found no completion in a CQ holding one (of {polls}, {RESIZES} resizes)");
    assert_eq!(uncounted, 0, "a CQ holding a completion read as empty (of {polls}, {RESIZES} resizes)");
}

/// ibv_resize_cq(3) any number of times: a replaced generation of the CQ is unmapped
/// once no poller or producer can still be reading it (docs/completion-queues.md,
/// "Resize"), so a CQ resized in a loop, beside a thread posting to it and polling it,
/// does not use up the process's mappings (`vm.max_map_count`: each generation is one)
/// or its memory. Kept until the CQ was destroyed, the 1 000 generations here were 1 000
/// mappings more.
#[test]
fn a_cq_resized_in_a_loop_beside_its_poller_lets_its_old_generations_go() {
    const RESIZES: u32 = 1_000;
    let (a, b) = pair_with(QpType::Rc, &PATH, 64, CAP);
    let mappings = || std::fs::read_to_string("/proc/self/maps").unwrap().lines().count();
    // One resize first: its generation is the one a later resize lets go.
    a.cq.resize(32).unwrap();
    let before = mappings();
    // Each resize waits for a poll that ended after the resize before it: the poller
    // then unpinned since that resize's snapshot, and the next resize may let that
    // generation go. (Paced only by a count, the poller could be a thousand polls ahead,
    // descheduled while pinned on two busy CPUs, and every generation replaced meanwhile
    // would wait for the first resize after it runs again.)
    let polled = std::sync::atomic::AtomicU64::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let polls = std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let mut seen = 0;
            for k in 0..RESIZES {
                while polled.load(std::sync::atomic::Ordering::Acquire) <= seen {
                    assert!(std::time::Instant::now() < deadline, "the poller stopped");
                    std::thread::yield_now();
                }
                a.cq.resize(if k.is_multiple_of(2) { 16 } else { 64 }).unwrap();
                seen = polled.load(std::sync::atomic::Ordering::Acquire);
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut polls = 0u64;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            post_writes(&a, &b, polls, 1);
            assert_eq!(poll_one(&a.cq).wr_id(), polls, "each completion once, in order");
            polls += 1;
            polled.store(polls, std::sync::atomic::Ordering::Release);
        }
        polls
    });
    // The poller stopped: one more resize lets go of what the last ones replaced.
    a.cq.resize(32).unwrap();
    let after = mappings();
    // Other mappings may come and go meanwhile (a thread's stack, an allocator arena).
    assert!(after < before + 16, "mappings {before} -> {after} after {RESIZES} resizes ({polls} completions polled meanwhile)");
    // The CQ still works.
    post_writes(&a, &b, 7, 1);
    assert_eq!(poll_one(&a.cq).wr_id(), 7);
}

/// ibv_resize_cq(3) while another thread's SENDs complete into the CQ (their receive
/// completions, written by the sender's thread) and a third polls it: the writers and the
/// poller read the generation without the CQ's lock, and the generations they may hold
/// are still let go (docs/completion-queues.md, "Resize"). Every completion arrives once,
/// in order, and the process's mappings do not grow with the resizes: a generation
/// unmapped under a writer would have crashed the test, one never unmapped shows here.
#[test]
fn a_cq_resized_beside_a_writer_thread_and_a_poller_loses_nothing_and_lets_go() {
    const SENDS: u64 = 3_000;
    const RECVS: u64 = 16;
    let (a, b) = pair_with(QpType::Rc, &PATH, 64, CAP);
    let mappings = || std::fs::read_to_string("/proc/self/maps").unwrap().lines().count();
    let rsge = [a.mr.sge(0, 8).unwrap()];
    for i in 0..RECVS {
        a.qp.post_recv(&[RecvWr::new(i, &rsge)]).unwrap();
    }
    a.cq.resize(32).unwrap();
    let before = mappings();
    let polled = std::sync::atomic::AtomicU64::new(0);
    let resized = std::sync::atomic::AtomicU32::new(0);
    let resizes = std::thread::scope(|s| {
        // The writer: b's SENDs, one outstanding, each completing into a's CQ from here.
        s.spawn(|| {
            let ssge = [b.mr.sge(0, 8).unwrap()];
            for i in 0..SENDS {
                b.qp.post_send(&[SendWr::send(i, &ssge).signaled()]).unwrap();
                let wc = poll_one(&b.cq);
                assert_eq!((wc.wr_id(), wc.status()), (i, WcStatus::Success), "SEND {i}");
            }
        });
        // The resizer, paced as in a_cq_resized_in_a_loop_beside_its_poller_lets_its_old_generations_go.
        let resizer = s.spawn(|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let (mut seen, mut k) = (0, 0u32);
            while seen < SENDS {
                while polled.load(std::sync::atomic::Ordering::Acquire) <= seen && seen < SENDS {
                    assert!(std::time::Instant::now() < deadline, "the poller stopped");
                    std::thread::yield_now();
                }
                a.cq.resize(if k.is_multiple_of(2) { 32 } else { 64 }).unwrap();
                k += 1;
                resized.store(k, std::sync::atomic::Ordering::Release);
                seen = polled.load(std::sync::atomic::Ordering::Acquire);
            }
            k
        });
        // The poller: each receive completion once, in order, its receive posted again;
        // every 100th waits for a resize after it, so that the traffic cannot end before
        // the resizer runs (a descheduled resizer met 9 in one loaded run).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        for i in 0..SENDS {
            let wc = poll_one(&a.cq);
            assert_eq!((wc.wr_id(), wc.opcode(), wc.status()), (i % RECVS, Some(WcOpcode::Recv), WcStatus::Success), "receive {i}");
            a.qp.post_recv(&[RecvWr::new(i % RECVS, &rsge)]).unwrap();
            polled.store(i + 1, std::sync::atomic::Ordering::Release);
            if i % 100 == 99 {
                let want = (i / 100 + 1) as u32;
                while resized.load(std::sync::atomic::Ordering::Acquire) < want {
                    assert!(std::time::Instant::now() < deadline, "the resizer stopped");
                    std::thread::yield_now();
                }
            }
        }
        resizer.join().unwrap()
    });
    a.cq.resize(32).unwrap();
    assert_empty(&a.cq);
    let after = mappings();
    assert!(resizes > 10, "only {resizes} resizes met the traffic");
    assert!(after < before + 16, "mappings {before} -> {after} after {resizes} resizes");
}

/// A QP reset while another thread resizes its CQ: the completions it wrote before the
/// reset are purged (as mlx5 does; docs/completion-queues.md, "Purge on RESET") and the
/// first of its next life is polled. The purge notes the ring position the reset came
/// at; a resize moves the completions to a new generation where positions start again,
/// so a note of the old generation's position, taken before the resize and stored after
/// it, dropped the new life's completions, and one stored while the resize moved them
/// missed those already moved.
#[test]
fn a_qp_reset_while_its_cq_is_resized_purges_its_old_completions_only() {
    const ROUNDS: u64 = 1500;
    let (a, b) = pair_with(QpType::Rc, &PATH, 64, CAP);
    // Resizes at most: a generation replaced while the poller was descheduled pinned
    // stays mapped until a resize after it runs again.
    const RESIZES: u32 = 20_000;
    let done = std::sync::atomic::AtomicBool::new(false);
    let (wrong, resizes) = std::thread::scope(|s| {
        let resizer = s.spawn(|| {
            let mut k = 0u32;
            while k < RESIZES && !done.load(std::sync::atomic::Ordering::Acquire) {
                a.cq.resize(if k.is_multiple_of(2) { 32 } else { 64 }).unwrap();
                k += 1;
            }
            k
        });
        let mut wrong = Vec::new();
        let mut wc = [Wc::default(); 1];
        for round in 0..ROUNDS {
            // Completions of this life, left in the CQ.
            post_writes(&a, &b, 0, 4);
            for s in [&a, &b] {
                s.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
            }
            connect(&a, &b, &PATH);
            // The next life's first completion, in the CQ when the post returns.
            post_writes(&a, &b, 1000 + round, 1);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            let got = loop {
                if a.cq.poll(&mut wc).unwrap() == 1 {
                    break Some(wc[0].wr_id());
                }
                if std::time::Instant::now() > deadline {
                    break None;
                }
            };
            if got != Some(1000 + round) {
                wrong.push((round, got));
                // Whatever is left goes before the next round.
                while a.cq.poll(&mut wc).unwrap() > 0 {}
            }
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        (wrong, resizer.join().unwrap())
    });
    assert!(resizes > 0, "the CQ was resized while the QP was reset");
    assert!(wrong.is_empty(), "rounds whose first poll after the reset was not the new completion ({resizes} resizes): {wrong:?}");
}

#[test]
fn many_threads_polling_see_each_completion_once() {
    let (a, b) = pair_with(QpType::Rc, &PATH, 4096, QpCap { max_send_wr: 2048, ..CAP });
    post_writes(&a, &b, 0, 2000);
    let seen = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut wc = [Wc::default(); 7];
                loop {
                    let n = a.cq.poll(&mut wc).unwrap();
                    if n == 0 {
                        break;
                    }
                    seen.lock().unwrap().extend(wc[..n].iter().map(Wc::wr_id));
                }
            });
        }
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..2000).collect::<Vec<_>>());
}
