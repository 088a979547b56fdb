//! Grace periods: when memory that lock-free readers reach through a pointer may be let
//! go after the pointer moved on (a CQ's replaced generations, `cq::Gens`).
//!
//! A reader [`pin`]s for as long as it uses what it loaded: its thread's record turns odd,
//! and even again when the [`Pin`] drops (a pin inside another of the same thread leaves
//! the record to the outer one). The one who replaced
//! the pointer takes a [`Snapshot`] after the store: the records odd then are the readers
//! that may still hold the old value, and the old memory may go once every one of them
//! has moved on ([`Snapshot::passed`]). Nobody waits: the replaced memory is kept until a
//! later look finds the grace period over.
//!
//! A pin costs no atomic read-modify-write and no fence, only stores to the thread's own
//! record: the fence a reader would need between announcing itself and loading the
//! pointer is made by the snapshot on every thread at once, with membarrier(2)
//! (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`, Linux 4.14), as asymmetric read-copy-update does.
//! Either the reader's odd record is visible to the snapshot, or the reader's load comes
//! after the barrier and finds the new pointer. Where membarrier is refused (an older
//! kernel, a seccomp filter) there is no snapshot and nothing is ever let go: the memory
//! stays until its owner drops it, as it did before grace periods
//! (docs/completion-queues.md, "Resize").
//!
//! The records are a fixed table, so that an empty `ibv_poll_cq` through the C ABI pays
//! no `__tls_get_addr` call: a thread's home slot is found from its thread pointer (the
//! TCB address, one instruction on x86-64 and AArch64), and is its own when the slot's
//! owner word holds that pointer. A thread whose home slot another live thread has takes
//! the next free one and finds it through a thread-local. A thread gives its slot back
//! when it exits (before its TCB can serve another thread); a forked child frees, in a
//! fork handler, the slots of the threads it does not have. With every slot taken, a
//! reader has no record and snapshots stop for good (nothing is let go any more).

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// One thread's reader record: `seq` is odd while the thread is pinned. Written by its
/// thread only (and by a forked child's fork handler), read by snapshots; a line of its
/// own.
#[repr(align(128))]
struct Record {
    seq: AtomicU64,
    /// What the thread is inside ([`Pin::inside`]), 0 for nothing.
    inside: AtomicUsize,
    /// The owning thread's thread pointer (`thread_pointer`), 0 while the slot is free.
    owner: AtomicUsize,
}

/// Reader records: threads that pin at once, at most.
const SLOTS: usize = 256;

/// Every record (a slot is a thread's from its first pin to its exit).
static TABLE: [Record; SLOTS] = [const { Record { seq: AtomicU64::new(0), inside: AtomicUsize::new(0), owner: AtomicUsize::new(0) } }; SLOTS];

/// Set for good by a reader that could not have a record (every slot taken, or pinning
/// while its thread's locals are being destroyed): from then on no snapshot is taken.
static UNTRACKED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's record, once it has one (the way to it when it is not the home slot).
    /// Constant-initialised and without a destructor: no lazy check.
    static LOCAL: Cell<Option<&'static Record>> = const { Cell::new(None) };
    /// Gives the thread's record back when the thread exits (registered the first time the
    /// thread pins).
    static OWNER: Owner = const { Owner };
}

/// The thread-exit hook of [`OWNER`].
struct Owner;

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| {
            if let Some(r) = l.take() {
                r.owner.store(0, Ordering::Release);
            }
        });
    }
}

/// The calling thread's thread pointer: the address of its thread control block, unique
/// among live threads and never 0. `None` where it is not read (the thread-local serves).
#[inline(always)]
#[allow(unsafe_code)]
fn thread_pointer() -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let tp: usize;
        // SAFETY: the x86-64 TLS ABI keeps the thread pointer at %fs:0 (the TCB's pointer
        // to itself) for the thread's whole life; one load, no stack, no flags.
        unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags, pure)) };
        Some(tp)
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    {
        let tp: usize;
        // SAFETY: reads the thread-pointer register, which the AArch64 TLS ABI sets for
        // every thread; no memory, no stack, no flags.
        unsafe { std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags, pure)) };
        Some(tp)
    }
    #[cfg(not(all(any(target_arch = "x86_64", target_arch = "aarch64"), not(miri))))]
    {
        None
    }
}

/// The slot a thread looks at first.
#[inline(always)]
fn home(tp: usize) -> usize {
    // TCBs are page-aligned or nearly: mix the bits above the low ones.
    const _: () = assert!(SLOTS == 1 << 8);
    ((tp as u64 >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 8)) as usize
}

/// A reader's hold: while it lives, what the reader loaded after [`pin`] is not let go.
/// Dropped on the thread that made it. `record` is `None` for a pin inside another one
/// of the same thread (the outer one holds) and for an untracked one.
#[must_use]
pub(crate) struct Pin {
    record: Option<&'static Record>,
    _not_send: PhantomData<*const ()>,
}

impl Pin {
    /// Marks this thread as inside `what` (a nonzero word naming it, such as a CQ's
    /// address) until the [`Inside`] drops, as cheaply as a pin: a plain store to the
    /// thread's record, which [`Insiders::now`]'s membarrier orders before the thread's
    /// next loads. `None` unless this is the outermost tracked pin (a pin inside another
    /// has no record; the one who marked the outer one would be cleared too early).
    #[inline(always)]
    pub(crate) fn inside(&self, what: usize) -> Option<Inside<'_>> {
        let record = self.record?;
        record.inside.store(what, Ordering::Relaxed);
        // The store above before the caller's loads: made a full fence by the waiter's
        // membarrier (module docs).
        compiler_fence(Ordering::SeqCst);
        Some(Inside { record, _pin: PhantomData })
    }
}

/// Announces this thread as a reader until the [`Pin`] drops; load the shared pointer
/// after this call.
#[inline(always)]
pub(crate) fn pin() -> Pin {
    match pin_here() {
        Some(p) => p,
        None => pin_elsewhere(),
    }
}

/// [`pin`] for a thread whose record is its home slot or the next one, `None` for any
/// other (which [`pin`] finds through the thread-local, registering it the first time).
/// It calls nothing: an empty `ibv_poll_cq` needs no stack frame (`CqInner::look`, which
/// takes the locked way on `None`).
#[inline(always)]
pub(crate) fn pin_here() -> Option<Pin> {
    let tp = thread_pointer()?;
    let h = home(tp);
    let mut r = &TABLE[h];
    if r.owner.load(Ordering::Relaxed) != tp {
        r = &TABLE[(h + 1) % SLOTS];
        if r.owner.load(Ordering::Relaxed) != tp {
            return None;
        }
    }
    Some(pin_with(r))
}

/// [`pin`] for a thread without its home slot, or without a record yet.
#[cold]
#[inline(never)]
fn pin_elsewhere() -> Pin {
    match LOCAL.try_with(|l| l.get().or_else(|| register(l))) {
        Ok(Some(r)) => pin_with(r),
        _ => untracked(),
    }
}

/// Pins on this thread's record `r`.
#[inline(always)]
fn pin_with(r: &'static Record) -> Pin {
    // Only this thread writes its record: odd means a pin of this thread is live, and it
    // holds until it drops, after this one.
    let s = r.seq.load(Ordering::Relaxed);
    if s % 2 == 1 {
        return Pin { record: None, _not_send: PhantomData };
    }
    r.seq.store(s + 1, Ordering::Relaxed);
    // The store above before the caller's load of the pointer: made a full fence by the
    // snapshot's membarrier (module docs).
    compiler_fence(Ordering::SeqCst);
    Pin { record: Some(r), _not_send: PhantomData }
}

/// A pin without a record: turns snapshots off for good, before the caller loads.
#[cold]
#[inline(never)]
fn untracked() -> Pin {
    UNTRACKED.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    Pin { record: None, _not_send: PhantomData }
}

/// Gives this thread a record: its home slot if free, else the next free one (the one
/// after home is the last [`pin_here`] finds). `None` if
/// every slot is taken or the thread is exiting (its exit hook can no longer be
/// registered).
#[cold]
#[inline(never)]
fn register(l: &Cell<Option<&'static Record>>) -> Option<&'static Record> {
    OWNER.try_with(|_| ()).ok()?;
    forks_free_slots();
    // Where the thread pointer is not read, the thread-local's address names the thread.
    let me = thread_pointer().unwrap_or(l as *const _ as usize);
    let start = home(me);
    let r = (0..SLOTS).map(|k| &TABLE[(start + k) % SLOTS]).find(|r| {
        r.owner.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok()
    })?;
    l.set(Some(r));
    Some(r)
}

/// Registers, once, the fork handler that frees in a child the slots of the threads the
/// child does not have (only the forking thread goes on there): their records might be
/// odd, and a snapshot would wait for them for ever, or a new thread of the child with
/// the same thread pointer would take one as its own, odd, and never pin.
fn forks_free_slots() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn none() {}
    extern "C" fn child() {
        // Atomics only (a fork child handler must be async-signal-safe). The forking
        // thread goes on in the child with the same thread pointer and keeps its slot.
        let me = thread_pointer().or_else(|| LOCAL.try_with(|l| l as *const _ as usize).ok());
        for r in &TABLE {
            if me.is_some_and(|me| r.owner.load(Ordering::Relaxed) == me) {
                continue;
            }
            let s = r.seq.load(Ordering::Relaxed);
            r.seq.store(s + (s % 2), Ordering::Relaxed);
            r.inside.store(0, Ordering::Relaxed);
            r.owner.store(0, Ordering::Release);
        }
    }
    ONCE.call_once(|| crate::sys::at_fork(none, none, child));
}

impl Drop for Pin {
    #[inline(always)]
    fn drop(&mut self) {
        let Some(r) = self.record else { return };
        compiler_fence(Ordering::SeqCst);
        // Release: what the reader read comes before a snapshot seeing it move on.
        r.seq.store(r.seq.load(Ordering::Relaxed) + 1, Ordering::Release);
    }
}

/// The readers that may hold what a pointer pointed to before it was replaced.
pub(crate) struct Snapshot {
    pinned: Vec<(&'static Record, u64)>,
}

/// Whether membarrier(2) serves this process (registered once, on the first snapshot, or
/// the first call): snapshots, and [`Insiders::now`], are possible.
pub(crate) fn barrier_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        use rustix::thread::{membarrier, MembarrierCommand};
        let ok = membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok();
        if !ok {
            tracing::debug!("membarrier(2) refused: replaced CQ generations stay mapped until the CQ is destroyed");
        }
        ok
    })
}

impl Snapshot {
    /// Takes the snapshot; call after storing the new pointer. `None`: the old memory
    /// can never be proven unused (no membarrier, or an untracked reader).
    pub(crate) fn take() -> Option<Snapshot> {
        if !barrier_available() {
            return None;
        }
        use rustix::thread::{membarrier, MembarrierCommand};
        membarrier(MembarrierCommand::PrivateExpedited).ok()?;
        if UNTRACKED.load(Ordering::SeqCst) {
            return None;
        }
        let pinned = TABLE
            .iter()
            .filter_map(|r| {
                let s = r.seq.load(Ordering::Acquire);
                (s % 2 == 1).then_some((r, s))
            })
            .collect();
        Some(Snapshot { pinned })
    }

    /// Whether every reader the snapshot saw pinned has unpinned since: what they may
    /// have held can go (the unpin's Release pairs with the Acquire here).
    pub(crate) fn passed(&self) -> bool {
        self.pinned.iter().all(|(r, s)| r.seq.load(Ordering::Acquire) != *s)
    }
}

/// The threads of this process inside one thing (a CQ's uncounted publish,
/// [`Pin::inside`]) when [`Insiders::now`] looked.
pub(crate) struct Insiders {
    what: usize,
    records: Vec<&'static Record>,
}

impl Insiders {
    /// The threads inside `what` now: as an asymmetric fence with a store made before this
    /// call (membarrier(2), module docs), either a thread's [`Pin::inside`] made before it
    /// is seen here, or that thread's loads after its `inside` see the store. `None`
    /// without membarrier.
    pub(crate) fn now(what: usize) -> Option<Insiders> {
        if !barrier_available() {
            return None;
        }
        use rustix::thread::{membarrier, MembarrierCommand};
        membarrier(MembarrierCommand::PrivateExpedited).ok()?;
        let records = TABLE.iter().filter(|r| r.inside.load(Ordering::Acquire) == what).collect();
        Some(Insiders { what, records })
    }

    /// Whether every thread seen inside has left since (its leave's Release pairs with the
    /// Acquire here: what it wrote inside is visible).
    pub(crate) fn left(&self) -> bool {
        self.records.iter().all(|r| r.inside.load(Ordering::Acquire) != self.what)
    }

    /// Waits until [`Insiders::left`], at most `limit` (yielding the CPU between looks):
    /// whether they did.
    pub(crate) fn wait(&self, limit: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        while !self.left() {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }
}

/// A thread inside something until it drops ([`Pin::inside`]).
#[must_use]
pub(crate) struct Inside<'p> {
    record: &'static Record,
    _pin: PhantomData<&'p Pin>,
}

impl Drop for Inside<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        // Release: what the thread wrote inside comes before a waiter seeing it leave.
        self.record.inside.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_snapshot_waits_for_a_reader_pinned_before_it_and_not_for_one_pinned_after() {
        let (pinned_tx, pinned_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let p = pin();
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(p);
            pinned_tx.send(()).unwrap();
            // Pinned again after the snapshot: not waited for.
            let _again = pin();
            go_rx.recv().unwrap();
        });
        pinned_rx.recv().unwrap();
        let snap = Snapshot::take().expect("membarrier(2) on this machine");
        assert!(!snap.passed(), "the reader pinned before the snapshot still is");
        go_tx.send(()).unwrap();
        pinned_rx.recv().unwrap();
        assert!(snap.passed(), "the reader unpinned");
        go_tx.send(()).unwrap();
        reader.join().unwrap();
    }

    // The asymmetric fence of a CQ's own publishers (`CqSeg::publish_uncounted`): the
    // waiter looks only at the threads inside what it names, pinned or not for anything
    // else, and waits for each to leave; a pin inside another cannot mark its thread (the
    // outer pin's holder would be cleared when the inner one left).
    #[test]
    fn insiders_are_the_threads_inside_what_is_named_until_they_leave() {
        const WHAT: usize = 0x5eed;
        // Pinned, inside nothing: not waited for.
        let other = pin();
        assert!(Insiders::now(WHAT).expect("membarrier(2) on this machine").left(), "nobody inside yet");
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let inside = std::thread::spawn(move || {
            let p = pin();
            let nested = pin();
            assert!(nested.inside(WHAT).is_none(), "a nested pin marks nothing");
            let i = p.inside(WHAT).expect("the outermost pin");
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(i);
            drop(nested);
            go_rx.recv().unwrap();
        });
        rx.recv().unwrap();
        assert!(Insiders::now(WHAT + 1).unwrap().left(), "inside something else");
        let snap = Insiders::now(WHAT).unwrap();
        assert!(!snap.wait(std::time::Duration::from_millis(20)), "the other thread is inside");
        go_tx.send(()).unwrap();
        assert!(snap.wait(std::time::Duration::from_secs(10)));
        // Left, still pinned: not inside.
        assert!(Insiders::now(WHAT).unwrap().left());
        go_tx.send(()).unwrap();
        inside.join().unwrap();
        drop(other);
    }

    #[test]
    fn nested_pins_hold_until_the_outermost_drops() {
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let outer = pin();
            drop(pin());
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(outer);
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
        let snap = Snapshot::take().expect("membarrier(2) on this machine");
        assert!(!snap.passed(), "the inner pin's drop does not end the outer one");
        go_tx.send(()).unwrap();
        rx.recv().unwrap();
        assert!(snap.passed());
        reader.join().unwrap();
    }

    fn taken() -> usize {
        TABLE.iter().filter(|r| r.owner.load(Ordering::Acquire) != 0).count()
    }

    /// `n` threads with stacks of `stack` bytes, pinned at once, then gone.
    fn pinned_at_once(n: usize, stack: usize) {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let b = barrier.clone();
                std::thread::Builder::new()
                    .stack_size(stack)
                    .spawn(move || {
                        let p = pin();
                        b.wait();
                        drop(p);
                    })
                    .unwrap()
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn an_exited_thread_gives_its_record_back() {
        // 2 × 200 threads, each 200 alive at once: more than the slots together. The
        // second 200 have larger stacks, so that they do not reuse the first ones' thread
        // control blocks (a new thread at a dead one's address adopts its slot anyway).
        pinned_at_once(200, 1 << 16);
        pinned_at_once(200, 1 << 21);
        assert!(!UNTRACKED.load(Ordering::SeqCst), "a thread found no free slot");
        // Other tests' threads may hold slots meanwhile (one process under `cargo test`).
        assert!(taken() < 32, "{} slots taken", taken());
    }

    #[test]
    fn threads_sharing_a_home_slot_each_have_a_record() {
        // 64 threads alive at once: some share a home slot (the birthday bound) and find
        // theirs through the thread-local; each pin must still mark its own record.
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
        let threads: Vec<_> = (0..64)
            .map(|_| {
                let (tx, go_rx) = (tx.clone(), go_rx.clone());
                std::thread::spawn(move || {
                    let p = pin();
                    tx.send(p.record.map(|r| r as *const Record as usize)).unwrap();
                    let _ = go_rx.lock().unwrap().recv();
                    drop(p);
                })
            })
            .collect();
        let mut records: Vec<usize> = (0..64).map(|_| rx.recv().unwrap().expect("a record")).collect();
        records.sort_unstable();
        records.dedup();
        assert_eq!(records.len(), 64, "two threads on one record");
        let snap = Snapshot::take().expect("membarrier(2) on this machine");
        assert!(snap.pinned.len() >= 64, "the snapshot saw {} pinned", snap.pinned.len());
        for _ in 0..64 {
            go_tx.send(()).unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert!(snap.passed());
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_forked_child_does_not_wait_for_the_parents_other_threads() {
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        // A thread pinned across the fork: it does not exist in the child.
        let reader = std::thread::spawn(move || {
            let p = pin();
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(p);
        });
        rx.recv().unwrap();
        drop(pin());
        // SAFETY: the child only takes a snapshot (membarrier, an allocation, which
        // glibc's fork handlers keep usable) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = match Snapshot::take() {
                Some(s) if s.passed() => 0,
                Some(_) => 1,
                None => 2,
            };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork");
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        go_tx.send(()).unwrap();
        reader.join().unwrap();
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "1: the child's snapshot waited for a thread it does not have; 2: no snapshot");
    }
}
