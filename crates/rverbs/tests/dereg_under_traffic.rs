//! ibv_dereg_mr(3) while a peer keeps writing into the region: once the deregistration
//! returns, the device touches that memory no more, whoever writes (a thread of this
//! process on the same-host link, another process, another host). The program may reuse
//! the memory at once (free it, hand it to another library): a late write would
//! corrupt whatever lives there then.
//!
//! Each round registers the same caller memory (page-aligned, as a program's buffer)
//! and hands its key to a requester, which WRITEs a pattern over it (even rounds) or
//! READs it whole (odd rounds) again and again, each request polled before the next.
//! Once a few have completed the owner deregisters (in this process, one pair of rounds
//! in five moves the region to other memory with ibv_rereg_mr(3)
//! `IBV_REREG_MR_CHANGE_TRANSLATION` instead, one lets the requester in through a type 2
//! window over it and deallocates the window, ibv_dealloc_mw(3), one invalidates such a
//! window with a LOCAL_INV and polls its completion, and one has another requester
//! invalidate it with a SEND_WITH_INV into another QP and polls the receive's
//! completion; the child-process requester goes through a window invalidated by a
//! LOCAL_INV every other pair of rounds), then reuses the memory:
//! zeroes it (WRITE rounds) or stores a secret in it (READ rounds). Checked:
//! - the requester's requests end with IBV_WC_REM_ACCESS_ERR (its QP then in ERR; a new
//!   pair takes the next round), within 10 s;
//! - no request posted after the deregistration returned completes with success (where
//!   the requester is a thread of this process and can tell);
//! - the zeroed memory stays zero: nothing landed after the deregistration returned;
//! - every READ that succeeded returned the memory as it was registered, never a byte of
//!   the secret: nothing was read after the deregistration returned.

mod common;

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rverbs::*;

/// Bytes of the caller memory.
const LEN: usize = 1 << 16;
/// Registrations per test.
const ROUNDS: usize = 25;
/// How long the requester may keep going after the deregistration.
const WAIT: Duration = Duration::from_secs(10);
/// What the memory holds while a READ round's registration lasts, and what the owner
/// stores in it once the deregistration returned.
const PUBLIC: u8 = 0x11;
const SECRET: u8 = 0x5a;

/// What the requester does to the region in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Write,
    Read,
}

impl Dir {
    fn of_round(round: usize) -> Dir {
        if round.is_multiple_of(2) {
            Dir::Write
        } else {
            Dir::Read
        }
    }
}

/// Page-aligned caller memory, read and zeroed by 8-byte words (atomics: the device
/// may write it from another thread or process while we look).
struct UserMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the memory is only reached through atomic words (and by the device).
unsafe impl Sync for UserMem {}

impl UserMem {
    fn new() -> UserMem {
        UserMem::with_len(LEN)
    }

    /// `len` bytes (a multiple of 8).
    fn with_len(len: usize) -> UserMem {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        UserMem { ptr, len }
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is `len` bytes, 4096-aligned, alive as long as `self`; AtomicU64
        // has u64's size and alignment, and every access to the memory from this process
        // goes through these words.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU64>(), self.len / 8) }
    }

    fn fill(&self, byte: u8) {
        let word = u64::from_ne_bytes([byte; 8]);
        self.words().iter().for_each(|w| w.store(word, Ordering::Relaxed));
    }

    /// The offset of the first word that is not zero, if any.
    fn first_written(&self) -> Option<usize> {
        self.words().iter().position(|w| w.load(Ordering::Relaxed) != 0).map(|i| i * 8)
    }

    /// Registers it on `pd` for remote writes and reads, holding `PUBLIC` for a READ
    /// round.
    fn register(&self, pd: &Pd, dir: Dir) -> Mr {
        if dir == Dir::Read {
            self.fill(PUBLIC);
        }
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND;
        // SAFETY: the memory outlives every registration of it (each is deregistered
        // within the round, before `self` is dropped).
        unsafe { pd.reg_mr(self.ptr, self.len, access) }.unwrap()
    }
}

impl Drop for UserMem {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).unwrap();
        // SAFETY: allocated in `with_len` with this layout; no registration names it now.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// The requester's side of a round: WRITEs of `a`'s region's first LEN bytes (which
/// hold 0xa5) over the region (`addr`, `rkey`), or READs of it into them, one at a time,
/// until one fails. Each READ must return `PUBLIC` only. `landed` counts those that
/// succeeded; `gone` is set by the owner once its deregistration returned. Returns the
/// requests posted after `gone` was seen that succeeded (there must be none). `owner`:
/// the owner's context, if in this process (a failure names its device's counters).
fn hammer(a: &Side, owner: Option<&Context>, addr: u64, rkey: u32, dir: Dir, landed: &AtomicUsize, gone: &AtomicBool) -> usize {
    let sge = [a.mr.sge(0, LEN as u32).unwrap()];
    let deadline = Instant::now() + WAIT * 2;
    let mut late = 0;
    let mut back = vec![0u8; LEN];
    for id in 0.. {
        let after = gone.load(Ordering::SeqCst);
        let wr = match dir {
            Dir::Write => SendWr::write(id, &sge, addr, rkey),
            Dir::Read => SendWr::read(id, &sge, addr, rkey),
        };
        a.qp.post_send(&[wr.signaled()]).unwrap();
        let posted = Instant::now();
        let wc = poll_one(&a.cq);
        if dir == Dir::Read && wc.status() == WcStatus::Success {
            a.mr.read(0, &mut back).unwrap();
            let leaked = back.iter().position(|&b| b != PUBLIC);
            assert_eq!(leaked, None, "READ {id} returned bytes the memory held after it was taken from the device");
        }
        match wc.status() {
            WcStatus::Success if after => late += 1,
            WcStatus::Success => {
                landed.fetch_add(1, Ordering::SeqCst);
            }
            WcStatus::RemAccessErr => return late,
            s => panic!("{dir:?} {id}: {s:?} {:?} after its post (the memory taken: {after}){}", posted.elapsed(), counts(&a.ctx, owner)),
        }
        assert!(Instant::now() < deadline, "the WRITEs still land {:?} after the round began", WAIT * 2);
    }
    unreachable!()
}

/// The non-zero counters of the requester's device `a` and the owner's (if given), for a
/// failure's message: whether the requests reached the owner's device, and what it did.
fn counts(a: &Context, owner: Option<&Context>) -> String {
    let of = |ctx: &Context| {
        let named = ctx.counters().named();
        named.iter().filter(|(_, v)| *v != 0).map(|(n, v)| format!("{n} {v}")).collect::<Vec<_>>().join(", ")
    };
    let owner = owner.map_or(String::new(), |o| format!("; the owner's device: {}", of(o)));
    format!("; the requester's device: {}{owner}", of(a))
}

/// How the owner takes the memory from the device in a round.
enum Retire<'a> {
    /// ibv_dereg_mr(3).
    Dereg,
    /// ibv_rereg_mr(3) `IBV_REREG_MR_CHANGE_TRANSLATION` to this memory: the requester's
    /// addresses are outside the region then.
    MoveTo(&'a UserMem),
    /// The requester reaches the memory through this type 2 window over it, and the
    /// owner deallocates the window (ibv_dealloc_mw(3)); the region stays registered.
    Dealloc(Mw),
    /// The same window, invalidated by a LOCAL_INV of its key on `qp` (completing to
    /// `cq`) instead: the memory is taken once its completion is polled.
    Invalidate { mw: Mw, key: u32, qp: &'a Qp, cq: &'a Cq },
    /// The same window, invalidated by a SEND_WITH_INV of its key into `to`, another QP of
    /// the window's PD (an empty receive posted there, completing to `cq`), from another
    /// requester, which `send` has send it and waits for: the memory is taken once the
    /// receive's completion, WITH_INV of the key, is polled. The requester that goes
    /// through the window is not the one that invalidates it, so its accesses run while
    /// the invalidation does.
    SendInv { mw: Mw, key: u32, to: &'a Qp, cq: &'a Cq, send: Box<dyn FnOnce() + 'a> },
}

/// The ways a round can take the memory, in the order the rounds of
/// [`rounds_in_this_process`] cycle through them (a pair of rounds each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Dereg,
    Move,
    Dealloc,
    LocalInv,
    SendInv,
}

const EVERY_WAY: [Way; 5] = [Way::Dereg, Way::Move, Way::Dealloc, Way::LocalInv, Way::SendInv];

/// The owner's side of a round: waits until a few requests completed, takes the memory
/// from the device (`retire`), reuses the memory (zero for a WRITE round, `SECRET` for a
/// READ round), then (once the requester is done) checks that a WRITE round's zeroes
/// are still there.
#[allow(clippy::too_many_arguments)]
fn owner_round(mem: &UserMem, mr: Mr, retire: Retire<'_>, dir: Dir, landed: &AtomicUsize, gone: &AtomicBool, requester_done: impl FnOnce()) {
    let deadline = Instant::now() + WAIT;
    while landed.load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "no {dir:?} completed within {WAIT:?}");
        std::thread::yield_now();
    }
    let how = match retire {
        Retire::Dereg => "ibv_dereg_mr",
        Retire::MoveTo(_) => "ibv_rereg_mr",
        Retire::Dealloc(_) => "ibv_dealloc_mw",
        Retire::Invalidate { .. } => "LOCAL_INV",
        Retire::SendInv { .. } => "SEND_WITH_INV",
    };
    match retire {
        Retire::Dereg => mr.dereg().unwrap(),
        // SAFETY: the memory outlives the region (the caller's, dropped after `mr`).
        Retire::MoveTo(new) => unsafe { mr.rereg_translation(ReregFlags::empty(), new.ptr, LEN, None, None) }.unwrap(),
        Retire::Dealloc(mw) => mw.dealloc().unwrap(),
        Retire::Invalidate { mw, key, qp, cq } => {
            qp.post_send(&[SendWr::local_inv(1, key).signaled()]).unwrap();
            let wc = poll_one(cq);
            assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, Some(WcOpcode::LocalInv)));
            drop(mw);
        }
        Retire::SendInv { mw, key, to, cq, send } => {
            to.post_recv(&[RecvWr::new(7, &[])]).unwrap();
            send();
            let wc = poll_one(cq);
            assert_eq!((wc.wr_id(), wc.status(), wc.invalidated_rkey()), (7, WcStatus::Success, Some(key)));
            drop(mw);
        }
    }
    gone.store(true, Ordering::SeqCst);
    mem.fill(if dir == Dir::Write { 0 } else { SECRET });
    requester_done();
    if dir == Dir::Write {
        assert_eq!(mem.first_written(), None, "a WRITE landed after {how} returned");
    }
    drop(mr);
}

/// A type 2 window over the whole of `mr`, bound by a BIND_MW on `qp` (which completes
/// to `cq`), with remote write and read: its key.
fn window_over(mr: &Mr, pd: &Pd, qp: &Qp, cq: &Cq) -> (Mw, u32) {
    let mw = Mw::new(pd, 2).unwrap();
    let key = inc_rkey(mw.rkey());
    let bind = MwBind { mr: Some(mr), addr: mr.iova(), length: mr.len() as u64, access: Access::REMOTE_WRITE | Access::REMOTE_READ };
    qp.post_send(&[SendWr::bind_mw(0, &mw, key, bind).signaled()]).unwrap();
    let wc = poll_one(cq);
    assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, Some(WcOpcode::BindMw)));
    (mw, key)
}

/// Rounds between a requester `a` and QPs of the owner's device `ctx` (made by
/// `connect`, which connects a new requester QP to a new owner QP), both in this process;
/// each pair of rounds takes the memory the next of `ways`.
fn rounds_in_this_process(ctx: &Context, new_requester: &dyn Fn() -> Side, connect: &dyn Fn(&Side, &Qp, &Context), ways: &[Way]) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    let (mem, elsewhere) = (UserMem::new(), UserMem::new());
    for round in 0..ROUNDS {
        let a = new_requester();
        let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
        connect(&a, &b, ctx);
        let dir = Dir::of_round(round);
        let mr = mem.register(&pd, dir);
        let (addr, mut rkey) = (mr.iova(), mr.rkey());
        // With every way: rounds 0 and 1 deregister, 2 and 3 move the region, 4 and 5
        // reach it through a window that is deallocated, 6 and 7 through one that is
        // invalidated by a LOCAL_INV, 8 and 9 by a SEND_WITH_INV, and so on.
        let way = ways[round / 2 % ways.len()];
        // The SEND_WITH_INV's requester and the QP it sends to.
        let via = (way == Way::SendInv).then(|| {
            let (via, to) = (new_requester(), pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap());
            connect(&via, &to, ctx);
            (via, to)
        });
        let retire = match way {
            Way::Dereg => Retire::Dereg,
            Way::Move => Retire::MoveTo(&elsewhere),
            way => {
                let (mw, key) = window_over(&mr, &pd, &b, &cq);
                rkey = key;
                match (way, &via) {
                    (Way::Dealloc, _) => Retire::Dealloc(mw),
                    (Way::SendInv, Some((via, to))) => Retire::SendInv { mw, key, to, cq: &cq, send: Box::new(move || send_inv(via, key, Some(ctx))) },
                    _ => Retire::Invalidate { mw, key, qp: &b, cq: &cq },
                }
            }
        };
        one_round(round, &a, Some(ctx), (addr, rkey), dir, &mem, mr, retire);
    }
}

/// A round of requester `a` WRITEing or READing (`dir`) the owner's memory `mem` at
/// `target` (address, key) through the owner's registration `mr` of it (on `owner`'s
/// device), which the owner takes from the device by `retire` ([`hammer`],
/// [`owner_round`]).
#[allow(clippy::too_many_arguments)]
fn one_round(round: usize, a: &Side, owner: Option<&Context>, target: (u64, u32), dir: Dir, mem: &UserMem, mr: Mr, retire: Retire<'_>) {
    a.mr.write(0, &vec![0xa5; LEN]).unwrap();
    let (landed, gone) = (AtomicUsize::new(0), AtomicBool::new(false));
    std::thread::scope(|s| {
        let requester = s.spawn(|| hammer(a, owner, target.0, target.1, dir, &landed, &gone));
        owner_round(mem, mr, retire, dir, &landed, &gone, || {
            let late = requester.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            assert_eq!(late, 0, "round {round}: {dir:?}s posted after the memory was taken from the device completed with success");
        });
    });
}

/// An empty SEND_WITH_INV of `key` from `via`, waited for (`owner`: the receiver's
/// context, if in this process, whose device's counters a failure names).
fn send_inv(via: &Side, key: u32, owner: Option<&Context>) {
    via.qp.post_send(&[SendWr::send(8, &[]).with_inv(key).signaled()]).unwrap();
    let posted = Instant::now();
    let status = poll_one(&via.cq).status();
    assert_eq!(status, WcStatus::Success, "the SEND_WITH_INV of {key:#x}, {:?} after its post{}", posted.elapsed(), counts(&via.ctx, owner));
}

/// The requester a thread of this process, on the same-host link (the express lane: it
/// places the bytes itself, inside its post).
#[test]
fn a_thread_on_this_host_reaches_deregistered_memory_no_more() {
    let ctx = open();
    let connect = |a: &Side, b: &Qp, ctx: &Context| {
        connect_qp(&a.qp, &a.ctx, b.qp_num(), &PATH);
        connect_qp(b, ctx, a.qp.qp_num(), &PATH);
    };
    rounds_in_this_process(&ctx, &|| side(QpType::Rc), &connect, &EVERY_WAY);
}

/// Every round through a type 2 window that a SEND_WITH_INV from a second requester of
/// this host invalidates while the first WRITEs or READs through it: once the receive's
/// completion says the key is invalidated, nothing goes through the window any more.
#[test]
fn a_window_invalidated_by_another_requester_reaches_memory_no_more() {
    let ctx = open();
    let connect = |a: &Side, b: &Qp, ctx: &Context| {
        connect_qp(&a.qp, &a.ctx, b.qp_num(), &PATH);
        connect_qp(b, ctx, a.qp.qp_num(), &PATH);
    };
    rounds_in_this_process(&ctx, &|| side(QpType::Rc), &connect, &[Way::SendInv]);
}

/// A window invalidated by a SEND_WITH_INV that another process sends (this binary run
/// again), whose post invalidates the window in this process's key table, while a thread
/// of this one WRITEs 8 MiB through it: once the receive's WITH_INV completion is seen,
/// nothing more lands. Each round the key goes to the other process once the WRITE is
/// visibly being copied (its first word there, its last not yet), so that the
/// invalidation meets it; a last word still zero when the completion is seen must stay
/// zero, and the requester's next WRITE must fail with IBV_WC_REM_ACCESS_ERR.
#[test]
fn a_window_invalidated_from_another_process_reaches_memory_no_more() {
    const TEST: &str = "a_window_invalidated_from_another_process_reaches_memory_no_more";
    const PROCESS_ROUNDS: usize = 8;
    if std::env::var_os("RVERBS_TEST_ROLE").is_some() {
        return invalidator_process();
    }
    let (mut child, mut stdin, lines) = spawn_child(TEST, &[("RVERBS_TEST_ROLE", "invalidator")]);
    let hear = || lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("the invalidator said nothing within {WAIT:?} ({e})"));
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    let to = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    connect_qp(&to, &ctx, hear().trim().parse().unwrap(), &PATH);
    writeln!(stdin, "{}", to.qp_num()).unwrap();
    let mem = UserMem::with_len(BIG_SLOT);
    let a = side(QpType::Rc);
    let src = a.pd.alloc_mr(BIG_SLOT, ALL_ACCESS).unwrap();
    src.write(0, &vec![0xa5; BIG_SLOT]).unwrap();
    let words = mem.words();
    let (first, last) = (&words[0], &words[words.len() - 1]);
    for round in 0..PROCESS_ROUNDS {
        let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
        if round > 0 {
            a.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
        }
        connect_qp(&a.qp, &a.ctx, b.qp_num(), &PATH);
        connect_qp(&b, &ctx, a.qp.qp_num(), &PATH);
        mem.fill(0);
        let mr = mem.register(&pd, Dir::Write);
        let (mw, key) = window_over(&mr, &pd, &b, &cq);
        to.post_recv(&[RecvWr::new(7, &[])]).unwrap();
        let gone = AtomicBool::new(false);
        std::thread::scope(|s| {
            let requester = s.spawn(|| {
                let sge = [src.sge(0, BIG_SLOT as u32).unwrap()];
                a.qp.post_send(&[SendWr::write(1, &sge, mr.iova(), key).signaled()]).unwrap();
                // Checked before the invalidation: it lands whole.
                assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "round {round}: the WRITE under way");
                while !gone.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                a.qp.post_send(&[SendWr::write(2, &sge, mr.iova(), key).signaled()]).unwrap();
                assert_eq!(poll_one(&a.cq).status(), WcStatus::RemAccessErr, "round {round}: a WRITE through the invalidated window");
            });
            let deadline = Instant::now() + WAIT;
            while first.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "round {round}: the WRITE did not start within {WAIT:?}");
                std::hint::spin_loop();
            }
            writeln!(stdin, "{key}").unwrap();
            stdin.flush().unwrap();
            let wc = poll_one(&cq);
            let unwritten = last.load(Ordering::SeqCst) == 0;
            assert_eq!((wc.wr_id(), wc.status(), wc.invalidated_rkey()), (7, WcStatus::Success, Some(key)), "round {round}");
            gone.store(true, Ordering::SeqCst);
            requester.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            if unwritten {
                assert_eq!(last.load(Ordering::SeqCst), 0, "round {round}: the WRITE went on after the SEND_WITH_INV's completion");
            }
        });
        assert_eq!(hear().trim(), "sent", "round {round}");
        drop((mw, b));
    }
    writeln!(stdin, "end").unwrap();
    stdin.flush().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the invalidator: {status}");
}

/// The child's side: a QP connected to the parent's, which sends an empty SEND_WITH_INV
/// of each key the parent names ("sent" once its completion is polled) until "end".
fn invalidator_process() {
    let mut lines = std::io::stdin().lock().lines();
    let mut next = move || lines.next().expect("the parent closed the pipe").unwrap();
    let via = side(QpType::Rc);
    say(&via.qp.qp_num().to_string());
    connect_qp(&via.qp, &via.ctx, next().trim().parse().unwrap(), &PATH);
    loop {
        let line = next();
        if line.trim() == "end" {
            return;
        }
        send_inv(&via, line.trim().parse().unwrap(), None);
        say("sent");
    }
}

/// The local ACK timeout of the RC pairs across the loopback whose requests must all be
/// answered: 18, 4.096 us << 18 = 1.07 s, seven retries 8.6 s (within `poll_one`'s
/// 10 s). This test checks what lands after the memory is taken, not how the device rides
/// out a stall; with `PATH`'s 67 ms, a host too loaded to run the responder's threads for
/// 0.54 s (CI's 2 cores, every test binary at once) ran a requester out of retries
/// (RETRY_EXC_ERR on a WRITE and on the SEND_WITH_INV of the same round, once). That
/// was most likely not the load but the responder's thread waiting 2 s on a pin it held
/// itself (docs/network.md, "Trains (UDP GSO/GRO)"; `tests/memory_windows.rs` has it).
const ACROSS_TIMEOUT: u8 = 18;

/// The requester on another device of this process, across the loopback (127.0.13.1 and
/// .2, served by this test only): the owner's network responder places the bytes.
#[test]
fn another_host_reaches_deregistered_memory_no_more() {
    let (da, db) = (device_on([127, 0, 13, 1], "dereg", None), device_on([127, 0, 13, 2], "dereg", None));
    let ctx = db.open().unwrap();
    let requester = || side_on(da.open().unwrap(), QpType::Rc, 16, CAP);
    let connect = |a: &Side, b: &Qp, ctx: &Context| {
        connect_across(&a.qp, ctx, b.qp_num(), ACROSS_TIMEOUT);
        connect_across(b, &a.ctx, a.qp.qp_num(), ACROSS_TIMEOUT);
    };
    rounds_in_this_process(&ctx, &requester, &connect, &EVERY_WAY);
}

/// The requester in another process of this host (this binary run again), which reaches
/// the memory as a peer does: through a shared mapping of the registration (the default)
/// or cross-memory attach (`RVERBS_SHARED_MR=0`, which the test suite runs too).
#[test]
fn another_process_reaches_deregistered_memory_no_more() {
    const TEST: &str = "another_process_reaches_deregistered_memory_no_more";
    const PROCESS_ROUNDS: usize = 10;
    if std::env::var_os("RVERBS_TEST_ROLE").is_some() {
        return requester_process(PROCESS_ROUNDS);
    }
    let (mut child, mut stdin, lines) = spawn_child(TEST, &[("RVERBS_TEST_ROLE", "requester")]);
    let hear = || lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("the requester said nothing within {WAIT:?} ({e})"));
    let b = side(QpType::Rc);
    let mem = UserMem::new();
    for round in 0..PROCESS_ROUNDS {
        let a_qpn: u32 = hear().trim().parse().unwrap();
        let qp = b.pd.create_qp(&QpInit::new(QpType::Rc, &b.cq, CAP)).unwrap();
        connect_qp(&qp, &b.ctx, a_qpn, &PATH);
        let dir = Dir::of_round(round);
        let mr = mem.register(&b.pd, dir);
        // Rounds 2 and 3 (of every 4) go through a type 2 window, invalidated by a LOCAL_INV:
        // the requester's accesses count in the window's record as a peer's.
        let (retire, rkey) = match round / 2 % 2 {
            0 => (Retire::Dereg, mr.rkey()),
            _ => {
                let (mw, key) = window_over(&mr, &b.pd, &qp, &b.cq);
                (Retire::Invalidate { mw, key, qp: &qp, cq: &b.cq }, key)
            }
        };
        writeln!(stdin, "{} {} {} {}", qp.qp_num(), mr.iova(), rkey, round % 2).unwrap();
        stdin.flush().unwrap();
        assert_eq!(hear().trim(), "landed", "round {round}");
        let (landed, gone) = (AtomicUsize::new(3), AtomicBool::new(false));
        owner_round(&mem, mr, retire, dir, &landed, &gone, || assert_eq!(hear().trim(), "stopped", "round {round}"));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "the requester: {status}");
}

/// A child's line to its parent (`common::spawn_child` hears the lines marked `@@`).
fn say(msg: &str) {
    println!("@@ {msg}");
    std::io::stdout().flush().unwrap();
}

/// The child's side: per round, a new QP connected to the parent's, WRITEs or READs
/// until one fails with IBV_WC_REM_ACCESS_ERR ("landed" once three succeeded, "stopped"
/// after; a READ that returns the parent's secret fails the child).
fn requester_process(rounds: usize) {
    let mut lines = std::io::stdin().lock().lines();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(LEN, ALL_ACCESS).unwrap();
    mr.write(0, &vec![0xa5; LEN]).unwrap();
    for _ in 0..rounds {
        let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
        say(&qp.qp_num().to_string());
        let line = lines.next().expect("the parent closed the pipe").unwrap();
        let w: Vec<u64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
        let [b_qpn, addr, rkey, odd] = w[..] else { panic!("the parent's QP, address, R_Key and round's parity") };
        let dir = Dir::of_round(odd as usize);
        connect_qp(&qp, &ctx, b_qpn as u32, &PATH);
        let a = Side { ctx: ctx.clone(), pd: pd.clone(), cq, qp, mr: mr.clone() };
        let (landed, gone) = (AtomicUsize::new(0), AtomicBool::new(false));
        std::thread::scope(|s| {
            let h = s.spawn(|| hammer(&a, None, addr, rkey as u32, dir, &landed, &gone));
            let deadline = Instant::now() + WAIT;
            while landed.load(Ordering::SeqCst) < 3 {
                assert!(Instant::now() < deadline, "no WRITE landed within {WAIT:?}");
                std::thread::yield_now();
            }
            say("landed");
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        });
        say("stopped");
    }
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Bytes of each receive of a round of [`sends_into_a_qp_destroyed_under_them`], and how
/// many are posted: the requester's next SEND then waits for one (RNR, retried for
/// ever), so the destroy finds it under way.
const SLOT: usize = 1024;
const RECVS: usize = 4;

/// ibv_destroy_qp(3) while a requester SENDs into its receives, which name caller memory
/// of a region that stays registered: once the destroy returns, no message is placed
/// into those receives any more (the program may free their buffers), and the
/// requester's SENDs end in an error. Rounds as [`rounds_in_this_process`]'s, the owner's
/// QP with its own receive queue, its receives posted as the C library posts them.
/// The destroy comes once three SENDs completed: the fourth may be placing, the fifth
/// waits for a receive that never comes. A watcher reads the receive buffers all along:
/// one it found empty after the destroy returned must stay so. (Zeroing the memory once
/// the destroy returned, as this test did before, wiped a message placed during the
/// zeroing itself, the very moments after the return.)
fn sends_into_a_qp_destroyed_under_them(ctx: &Context, new_requester: &dyn Fn() -> Side, connect: &dyn Fn(&Side, &Qp, &Context)) {
    let pd = ctx.alloc_pd().unwrap();
    // Every round's receive completions, never polled: no overrun.
    let cq = ctx.create_cq(&CqInit::new((ROUNDS / 2 * RECVS + 16) as u32)).unwrap();
    let mem = UserMem::new();
    let cap = QpCap { max_recv_wr: (LEN / SLOT) as u32, ..CAP };
    for round in 0..ROUNDS / 2 {
        let a = new_requester();
        a.mr.write(0, &vec![0xa5; SLOT]).unwrap();
        let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
        connect(&a, &b, ctx);
        mem.fill(0);
        let mr = mem.register(&pd, Dir::Write);
        for slot in 0..RECVS {
            let sge = [mr.sge(slot * SLOT, SLOT as u32).unwrap()];
            b.post_recv_unpinned(&[RecvWr::new(slot as u64, &sge)]).unwrap();
        }
        let (landed, gone, finished) = (AtomicUsize::new(0), AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            // The first receive written while the watcher had seen it empty since the
            // destroy returned: a message placed after ibv_destroy_qp returned.
            let watcher = s.spawn(|| {
                let words = mem.words();
                let written = |slot: usize| words[slot * SLOT / 8..(slot + 1) * SLOT / 8].iter().any(|w| w.load(Ordering::Relaxed) != 0);
                let mut empty_since_gone = [false; RECVS];
                loop {
                    let after = gone.load(Ordering::SeqCst);
                    let last = finished.load(Ordering::SeqCst);
                    for (slot, empty) in empty_since_gone.iter_mut().enumerate() {
                        match written(slot) {
                            true if *empty => return Some(slot),
                            false if after => *empty = true,
                            _ => {}
                        }
                    }
                    if last {
                        return None;
                    }
                    std::thread::yield_now();
                }
            });
            // Ends the watcher however this round ends (a failed assertion too).
            let stop = SetOnDrop(&finished);
            let requester = s.spawn(|| {
                let sge = [a.mr.sge(0, SLOT as u32).unwrap()];
                let mut late = 0;
                for id in 0.. {
                    let after = gone.load(Ordering::SeqCst);
                    a.qp.post_send(&[SendWr::send(id, &sge).signaled()]).unwrap();
                    match poll_one(&a.cq).status() {
                        WcStatus::Success if after => late += 1,
                        WcStatus::Success => {
                            landed.fetch_add(1, Ordering::SeqCst);
                        }
                        // A requester whose responder is gone hears nothing: its retries
                        // run out (IBV_WC_RETRY_EXC_ERR).
                        s => {
                            assert_eq!(s, WcStatus::RetryExcErr, "round {round}: SEND {id}");
                            return late;
                        }
                    }
                }
                unreachable!()
            });
            let deadline = Instant::now() + WAIT;
            while landed.load(Ordering::SeqCst) < 3 {
                assert!(Instant::now() < deadline, "no SEND completed within {WAIT:?}");
                std::thread::yield_now();
            }
            b.destroy().unwrap();
            gone.store(true, Ordering::SeqCst);
            let late = requester.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            // The requester's retries ran out: nothing of its is on the way any more.
            drop(stop);
            let placed = watcher.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            assert_eq!(late, 0, "round {round}: SENDs posted after ibv_destroy_qp returned completed with success");
            assert_eq!(placed, None, "round {round}: a message was placed into this receive after ibv_destroy_qp returned");
        });
        drop(mr);
    }
}

/// [`sends_into_a_qp_destroyed_under_them`] with the requester a thread on the same-host
/// link. Its local ACK timeout is short (timeout 8, ~1 ms: its seven retries into a
/// destroyed QP end in a few milliseconds).
#[test]
fn a_destroyed_qp_of_this_host_places_no_more_messages() {
    let ctx = open();
    let connect = |a: &Side, b: &Qp, ctx: &Context| {
        connect_qp(&a.qp, &a.ctx, b.qp_num(), &Path { timeout: 8, ..PATH });
        connect_qp(b, ctx, a.qp.qp_num(), &PATH);
    };
    sends_into_a_qp_destroyed_under_them(&ctx, &|| side(QpType::Rc), &connect);
}

/// [`sends_into_a_qp_destroyed_under_them`] with the requester on another device of this
/// process (127.0.13.3 and .4): the owner's network responder places the messages.
#[test]
fn a_destroyed_qp_places_no_more_messages_from_another_host() {
    let (da, db) = (device_on([127, 0, 13, 3], "destroy", None), device_on([127, 0, 13, 4], "destroy", None));
    let ctx = db.open().unwrap();
    let requester = || side_on(da.open().unwrap(), QpType::Rc, 16, CAP);
    let connect = |a: &Side, b: &Qp, ctx: &Context| {
        connect_across(&a.qp, ctx, b.qp_num(), 8);
        connect_across(b, &a.ctx, a.qp.qp_num(), 8);
    };
    sends_into_a_qp_destroyed_under_them(&ctx, &requester, &connect);
}

/// Bytes of each message of the UC destroy tests and how many receives a round posts:
/// large, so that the destroy meets one being placed.
const BIG_SLOT: usize = 8 << 20;
const BIG_RECVS: usize = 4;

/// The owner's side of a round of the UC destroy tests: ibv_destroy_qp(3) of the UC QP
/// `b` (connected, no receive posted yet) while a requester SENDs 8 MiB messages into its
/// receives, caller memory `mem` of a region that stays registered; with `srq`, the
/// receives are the SRQ's, which `b` takes from, and ibv_destroy_srq(3) follows (the
/// SRQ's buffers are the program's again once it returned, not at the QP's destroy),
/// every other time after a resize. UC takes the queued
/// path (no ACK: the requester places the message and moves on), where the receive is
/// taken from the queue before its bytes are copied. The destroy comes once the first
/// receive completed and the second message's first bytes are seen in the second
/// receive: while it is placed. Then `more_then_stop` has the requester, whose SENDs
/// complete locally, post three more and stop. A receive whose last word (the last a
/// message's copy writes) was still zero when the destroy returned must still have it
/// zero: neither the message being placed then nor a later one reached it once
/// ibv_destroy_qp returned, after which the program may free the buffers.
fn destroy_uc_while_placing(round: usize, mem: &UserMem, pd: &Pd, cq: &Cq, b: Qp, srq: Option<Srq>, more_then_stop: impl FnOnce()) {
    mem.fill(0);
    let mr = mem.register(pd, Dir::Write);
    for slot in 0..BIG_RECVS {
        let sge = [mr.sge(slot * BIG_SLOT, BIG_SLOT as u32).unwrap()];
        let wr = [RecvWr::new(slot as u64, &sge)];
        match &srq {
            Some(srq) => srq.post_recv_unpinned(&wr).unwrap(),
            None => b.post_recv_unpinned(&wr).unwrap(),
        }
    }
    assert_eq!(poll_one(cq).status(), WcStatus::Success, "round {round}: the first message is received");
    wait_until_placing(round, mem, 1);
    // Every other SRQ round, the SRQ is resized first (ibv_modify_srq(3)): the receive
    // being placed was taken from the generation the resize replaces.
    if let Some(srq) = srq.as_ref().filter(|_| round % 4 == 3) {
        srq.modify(&SrqAttr { max_wr: 2 * BIG_RECVS as u32, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
    }
    b.destroy().unwrap();
    if let Some(srq) = srq {
        srq.destroy().unwrap();
    }
    unfilled_stay_so(round, mem, more_then_stop, "receive", "ibv_destroy_qp (and ibv_destroy_srq)");
    let mut wc = [Wc::default(); 16];
    while cq.poll(&mut wc).unwrap() > 0 {}
}

/// Waits until a message is seen being placed into slot `slot` of `mem` (of BIG_SLOT
/// bytes each): its first word is there.
fn wait_until_placing(round: usize, mem: &UserMem, slot: usize) {
    let deadline = Instant::now() + WAIT;
    while mem.words()[slot * BIG_SLOT / 8].load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "round {round}: no message was placed into slot {slot} within {WAIT:?}");
        std::hint::spin_loop();
    }
}

/// Once `verb` returned: the slots of `mem` (`what`s of BIG_SLOT bytes each) whose last
/// word was still zero stay so after `more_then_stop` (the requester sent more, then
/// stopped).
fn unfilled_stay_so(round: usize, mem: &UserMem, more_then_stop: impl FnOnce(), what: &str, verb: &str) {
    let last_word = |slot: usize| mem.words()[((slot + 1) * BIG_SLOT) / 8 - 1].load(Ordering::SeqCst);
    let unfilled: Vec<usize> = (0..BIG_RECVS).filter(|&k| last_word(k) == 0).collect();
    more_then_stop();
    for k in unfilled {
        assert_eq!(last_word(k), 0, "round {round}: {what} {k} was written after {verb} returned");
    }
}

/// The requester of the UC destroy tests: SENDs of [`BIG_SLOT`] bytes of 0xa5 from
/// `src` on `qp`, each polled on `cq` (UC completes them locally, successfully), until
/// three more were posted after `gone` was set. With `tm`, each is an eager message of
/// the tag-matching protocol: a header (tag: the message's number modulo BIG_RECVS) in
/// `src`'s first [`TMH_LEN`] bytes, then the BIG_SLOT bytes.
fn send_big_until_gone(qp: &Qp, cq: &Cq, src: &Mr, tm: bool, gone: &AtomicBool) {
    let head = if tm { TMH_LEN } else { 0 };
    src.write(head, &vec![0xa5; BIG_SLOT]).unwrap();
    let sge = [src.sge(0, (head + BIG_SLOT) as u32).unwrap()];
    let mut after = 0;
    for id in 0.. {
        if gone.load(Ordering::SeqCst) {
            after += 1;
            if after > 3 {
                return;
            }
        }
        if tm {
            let mut tmh = [0u8; TMH_LEN];
            tmh[0] = TmhOp::Eager as u8;
            tmh[8..16].copy_from_slice(&(id % BIG_RECVS as u64).to_be_bytes());
            src.write(0, &tmh).unwrap();
        }
        qp.post_send(&[SendWr::send(id, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(cq).status(), WcStatus::Success, "UC SEND {id} completes locally");
    }
}

/// The owner's side of a round of the tag-matching destroy tests: ibv_destroy_srq(3) of
/// the tag-matching SRQ `srq` (its list completing to `tm_cq`) while a requester's eager
/// messages of 8 MiB ([`send_big_until_gone`] with headers) land in its tagged buffers
/// (ibv_post_srq_ops(3) ADD of tags 0 to BIG_RECVS - 1 over `mem`): a matched buffer is
/// placed into after the match, as a queued take is, so the destroy waits for it too. The
/// UC QP `b` on the SRQ is destroyed first, once the first message completed and the next
/// is seen being placed; a buffer still unfilled then stays so.
#[allow(clippy::too_many_arguments)]
fn destroy_tm_srq_while_placing(round: usize, mem: &UserMem, pd: &Pd, tm_cq: &Cq, srq: Srq, b: Qp, more_then_stop: impl FnOnce()) {
    mem.fill(0);
    let mr = mem.register(pd, Dir::Write);
    for slot in 0..BIG_RECVS {
        let sge = [mr.sge(slot * BIG_SLOT, BIG_SLOT as u32).unwrap()];
        let kind = TagOpKind::Add { recv_wr_id: slot as u64, sg_list: &sge, tag: slot as u64, mask: u64::MAX };
        srq.post_tag_op(&TagOp { wr_id: 100 + slot as u64, kind, flags: TagOpFlags::empty(), unexpected_cnt: 0 }).unwrap();
    }
    // The first message matched: the one after it goes to the next tag.
    let first = poll_one(tm_cq);
    assert_eq!(first.status(), WcStatus::Success, "round {round}: the first message is received");
    wait_until_placing(round, mem, (first.wr_id() as usize + 1) % BIG_RECVS);
    b.destroy().unwrap();
    srq.destroy().unwrap();
    unfilled_stay_so(round, mem, more_then_stop, "tagged buffer", "ibv_destroy_srq");
    let mut wc = [Wc::default(); 16];
    while tm_cq.poll(&mut wc).unwrap() > 0 {}
}

/// A UC QP completing to `cq` on a tag-matching SRQ (returned too) for the tagged buffers
/// of [`destroy_tm_srq_while_placing`], whose list completes to `tm_cq`.
fn tm_qp(pd: &Pd, cq: &Cq, tm_cq: &Cq) -> (Qp, Srq) {
    let tm = TmCap { max_num_tags: BIG_RECVS as u32, max_ops: 16 };
    let srq = pd.create_srq_tm(&SrqInit { max_wr: 4, max_sge: 1, ..SrqInit::default() }, tm, tm_cq).unwrap();
    let b = pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Uc, cq, CAP) }).unwrap();
    (b, srq)
}

/// A CQ for a tag-matching SRQ's list (with its tag-matching information).
fn tm_cq(ctx: &Context) -> Cq {
    ctx.create_cq(&CqInit::new(64).wc_flags(WcExFlags::STANDARD | WcExFlags::TM_INFO)).unwrap()
}

/// [`destroy_tm_srq_while_placing`] with the requester a thread of this process.
#[test]
fn a_destroyed_tm_srq_places_no_more_messages() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (cq, tm_cq) = (ctx.create_cq(&CqInit::new(16)).unwrap(), tm_cq(&ctx));
    let mem = UserMem::with_len(BIG_SLOT * BIG_RECVS);
    let rounds = Rounds { ctx: &ctx, count: ROUNDS / 4, tm: true, across: None };
    rounds.with_a_thread(
        |_| tm_qp(&pd, &cq, &tm_cq),
        |round, b, srq, stop| destroy_tm_srq_while_placing(round, &mem, &pd, &tm_cq, srq, b, stop),
    );
}

/// [`destroy_tm_srq_while_placing`] with the requester another process, which matches
/// the tagged buffers in this one's list and places the messages into its memory.
#[test]
fn a_destroyed_tm_srq_places_no_more_messages_from_another_process() {
    const TEST: &str = "a_destroyed_tm_srq_places_no_more_messages_from_another_process";
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (cq, tm_cq) = (ctx.create_cq(&CqInit::new(16)).unwrap(), tm_cq(&ctx));
    let mem = UserMem::with_len(BIG_SLOT * BIG_RECVS);
    let rounds = Rounds { ctx: &ctx, count: 6, tm: true, across: None };
    rounds.with_a_process(
        TEST,
        |_| tm_qp(&pd, &cq, &tm_cq),
        |round, b, srq, stop| destroy_tm_srq_while_placing(round, &mem, &pd, &tm_cq, srq, b, stop),
    );
}

/// [`destroy_uc_while_placing`] with the requester a thread of this process; every other
/// round with an SRQ.
#[test]
fn a_destroyed_uc_qp_places_no_more_messages() {
    let ctx = open();
    let (pd, cq, mem) = uc_owner(&ctx);
    let rounds = Rounds { ctx: &ctx, count: ROUNDS / 2, tm: false, across: None };
    rounds.with_a_thread(|round| uc_qp(round, &pd, &cq), |round, b, srq, stop| destroy_uc_while_placing(round, &mem, &pd, &cq, b, srq, stop));
}

/// [`destroy_uc_while_placing`] with the requester another process, which places the
/// messages into this one's memory; every other round with an SRQ (which that process
/// maps and takes from).
#[test]
fn a_destroyed_uc_qp_places_no_more_messages_from_another_process() {
    const TEST: &str = "a_destroyed_uc_qp_places_no_more_messages_from_another_process";
    let ctx = open();
    let (pd, cq, mem) = uc_owner(&ctx);
    let rounds = Rounds { ctx: &ctx, count: 6, tm: false, across: None };
    rounds.with_a_process(TEST, |round| uc_qp(round, &pd, &cq), |round, b, srq, stop| destroy_uc_while_placing(round, &mem, &pd, &cq, b, srq, stop));
}

/// [`destroy_uc_while_placing`] with the requester on another device of this process
/// (127.0.13.5 and .6): the owner's network responder places each 8 MiB message packet by
/// packet, holding the receive between them, and the destroy comes while one is half
/// placed (the held receive must be let go, the packets after it placed nowhere).
#[test]
fn a_destroyed_uc_qp_places_no_more_messages_from_another_host() {
    let (da, db) = (device_on([127, 0, 13, 5], "destroy-uc", None), device_on([127, 0, 13, 6], "destroy-uc", None));
    let ctx = db.open().unwrap();
    let (pd, cq, mem) = uc_owner(&ctx);
    let rounds = Rounds { ctx: &ctx, count: 4, tm: false, across: Some(&da) };
    rounds.with_a_thread(|round| uc_qp(round, &pd, &cq), |round, b, srq, stop| destroy_uc_while_placing(round, &mem, &pd, &cq, b, srq, stop));
}

/// The owner's PD, CQ and memory of the UC destroy tests on `ctx`.
fn uc_owner(ctx: &Context) -> (Pd, Cq, UserMem) {
    let cq = ctx.create_cq(&CqInit::new(BIG_RECVS as u32 + 16)).unwrap();
    (ctx.alloc_pd().unwrap(), cq, UserMem::with_len(BIG_SLOT * BIG_RECVS))
}

/// The owner's UC QP of round `round` of the UC destroy tests, on its own receive queue,
/// or every other round on an SRQ (returned too).
fn uc_qp(round: usize, pd: &Pd, cq: &Cq) -> (Qp, Option<Srq>) {
    let srq = (round % 2 == 1).then(|| pd.create_srq(&SrqInit { max_wr: BIG_RECVS as u32, max_sge: 1, ..SrqInit::default() }).unwrap());
    let cap = QpCap { max_recv_wr: BIG_RECVS as u32, ..CAP };
    let b = pd.create_qp(&QpInit { srq: srq.as_ref(), ..QpInit::new(QpType::Uc, cq, cap) }).unwrap();
    (b, srq)
}

/// The rounds of the UC destroy tests, on device `ctx`: `count` of them, the requester's
/// messages eager messages of the tag-matching protocol if `tm`
/// ([`send_big_until_gone`]).
struct Rounds<'a> {
    ctx: &'a Context,
    count: usize,
    tm: bool,
    /// The requester's device when it is another host (`None`: this one, the same-host
    /// link).
    across: Option<&'a Device>,
}

impl Rounds<'_> {
    /// The rounds with the requester a UC QP of a thread of this process, connected anew
    /// each round to the owner's UC QP that `setup` makes (with what else the round
    /// needs); `owner` runs the owner's side, given the function that stops the requester
    /// and waits for it.
    fn with_a_thread<T>(&self, mut setup: impl FnMut(usize) -> (Qp, T), mut owner: impl FnMut(usize, Qp, T, &mut dyn FnMut())) {
        let a = match self.across {
            Some(d) => side_on(d.open().unwrap(), QpType::Uc, 16, CAP),
            None => side(QpType::Uc),
        };
        let src = a.pd.alloc_mr(TMH_LEN + BIG_SLOT, ALL_ACCESS).unwrap();
        for round in 0..self.count {
            let (b, with) = setup(round);
            if round > 0 {
                a.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
            }
            if self.across.is_some() {
                connect_across(&a.qp, self.ctx, b.qp_num(), PATH.timeout);
                connect_across(&b, &a.ctx, a.qp.qp_num(), PATH.timeout);
            } else {
                connect_qp(&a.qp, &a.ctx, b.qp_num(), &PATH);
                connect_qp(&b, self.ctx, a.qp.qp_num(), &PATH);
            }
            let gone = AtomicBool::new(false);
            std::thread::scope(|s| {
                let mut requester = Some(s.spawn(|| send_big_until_gone(&a.qp, &a.cq, &src, self.tm, &gone)));
                owner(round, b, with, &mut || {
                    gone.store(true, Ordering::SeqCst);
                    let r = requester.take().expect("stopped once");
                    r.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                });
            });
        }
    }

    /// As [`Rounds::with_a_thread`] with the requester another process (this binary, test
    /// `test`, run again: [`uc_requester_process`]), which places the messages into this
    /// one's memory.
    fn with_a_process<T>(&self, test: &str, mut setup: impl FnMut(usize) -> (Qp, T), mut owner: impl FnMut(usize, Qp, T, &mut dyn FnMut())) {
        if std::env::var_os("RVERBS_TEST_ROLE").is_some() {
            return uc_requester_process(self.count, self.tm);
        }
        let (mut child, mut stdin, lines) = spawn_child(test, &[("RVERBS_TEST_ROLE", "requester")]);
        let hear = || lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("the requester said nothing within {WAIT:?} ({e})"));
        for round in 0..self.count {
            let a_qpn: u32 = hear().trim().parse().unwrap();
            let (b, with) = setup(round);
            connect_qp(&b, self.ctx, a_qpn, &PATH);
            writeln!(stdin, "{}", b.qp_num()).unwrap();
            stdin.flush().unwrap();
            owner(round, b, with, &mut || {
                writeln!(stdin, "stop").unwrap();
                stdin.flush().unwrap();
                assert_eq!(hear().trim(), "stopped", "round {round}");
            });
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "the requester: {status}");
    }
}

/// The child's side: per round, a new UC QP connected to the parent's, which SENDs until
/// the parent says "stop" (then three more; "stopped" after); with `tm`, eager messages
/// of the tag-matching protocol ([`send_big_until_gone`]).
fn uc_requester_process(rounds: usize, tm: bool) {
    let mut lines = std::io::stdin().lock().lines();
    let mut next = move || lines.next().expect("the parent closed the pipe").unwrap();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(TMH_LEN + BIG_SLOT, ALL_ACCESS).unwrap();
    for _ in 0..rounds {
        let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Uc, &cq, CAP)).unwrap();
        say(&qp.qp_num().to_string());
        let b_qpn: u32 = next().trim().parse().unwrap();
        connect_qp(&qp, &ctx, b_qpn, &PATH);
        let gone = AtomicBool::new(false);
        std::thread::scope(|s| {
            let h = s.spawn(|| send_big_until_gone(&qp, &cq, &src, tm, &gone));
            assert_eq!(next().trim(), "stop");
            gone.store(true, Ordering::SeqCst);
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        });
        say("stopped");
    }
}
