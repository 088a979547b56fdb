//! Grace periods: when memory that lock-free readers reach through a pointer may be let
//! go after the pointer moved on (a CQ's replaced generations, `cq::Gens`).
//!
//! A reader [`pin`]s for as long as it uses what it loaded: its thread's record turns odd,
//! and even again when the [`Pin`] drops (nested pins count once). The one who replaced
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

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// One thread's reader record: `seq` is odd while the thread is pinned. Written by its
/// thread only, read by snapshots; a line of its own.
#[repr(align(128))]
struct Record {
    seq: AtomicU64,
    /// Whether a live thread owns the record (a thread that exits gives it back).
    in_use: AtomicBool,
}

/// Every record ever made (they are never freed: a thread's exit makes its record free
/// for the next thread).
static RECORDS: Mutex<Vec<&'static Record>> = Mutex::new(Vec::new());

/// Set for good by a reader that could not have a record (one pinning while its thread's
/// locals are being destroyed): from then on no snapshot is taken.
static UNTRACKED: AtomicBool = AtomicBool::new(false);

/// This thread's record and how deeply it is pinned. Constant-initialised and without a
/// destructor, so that reaching it costs one thread-local access and no lazy check.
struct Local {
    record: Cell<Option<&'static Record>>,
    depth: Cell<u32>,
}

thread_local! {
    static LOCAL: Local = const { Local { record: Cell::new(None), depth: Cell::new(0) } };
    /// Gives the thread's record back when the thread exits (registered the first time the
    /// thread pins).
    static OWNER: Owner = const { Owner };
}

/// The thread-exit hook of [`OWNER`].
struct Owner;

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| {
            if let Some(r) = l.record.take() {
                r.in_use.store(false, Ordering::Release);
            }
        });
    }
}

/// A reader's hold: while it lives, what the reader loaded after [`pin`] is not let go.
/// Dropped on the thread that made it.
#[must_use]
pub(crate) struct Pin {
    record: Option<&'static Record>,
    _not_send: PhantomData<*const ()>,
}

/// Announces this thread as a reader until the [`Pin`] drops; load the shared pointer
/// after this call.
#[inline(always)]
pub(crate) fn pin() -> Pin {
    let record = LOCAL.try_with(|l| {
        let r = match l.record.get() {
            Some(r) => r,
            None => register(l)?,
        };
        let d = l.depth.get();
        if d == 0 {
            r.seq.store(r.seq.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        l.depth.set(d + 1);
        Some(r)
    });
    match record {
        Ok(Some(r)) => {
            // The store above before the caller's load of the pointer: made a full fence by
            // the snapshot's membarrier (module docs).
            compiler_fence(Ordering::SeqCst);
            Pin { record: Some(r), _not_send: PhantomData }
        }
        _ => untracked(),
    }
}

/// A pin without a record: turns snapshots off for good, before the caller loads.
#[cold]
#[inline(never)]
fn untracked() -> Pin {
    UNTRACKED.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    Pin { record: None, _not_send: PhantomData }
}

/// Gives this thread a record, a free one if there is one. `None` if the thread is
/// exiting (its exit hook can no longer be registered).
#[cold]
#[inline(never)]
fn register(l: &Local) -> Option<&'static Record> {
    OWNER.try_with(|_| ()).ok()?;
    let mut all = RECORDS.lock().unwrap_or_else(|p| p.into_inner());
    let r = match all.iter().find(|r| {
        r.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }) {
        Some(r) => *r,
        None => {
            let r: &'static Record =
                Box::leak(Box::new(Record { seq: AtomicU64::new(0), in_use: AtomicBool::new(true) }));
            all.push(r);
            r
        }
    };
    l.record.set(Some(r));
    Some(r)
}

impl Drop for Pin {
    #[inline(always)]
    fn drop(&mut self) {
        let Some(r) = self.record else { return };
        compiler_fence(Ordering::SeqCst);
        let _ = LOCAL.try_with(|l| {
            let d = l.depth.get() - 1;
            l.depth.set(d);
            if d == 0 {
                // Release: what the reader read comes before a snapshot seeing it move on.
                r.seq.store(r.seq.load(Ordering::Relaxed) + 1, Ordering::Release);
            }
        });
    }
}

/// The readers that may hold what a pointer pointed to before it was replaced.
pub(crate) struct Snapshot {
    pinned: Vec<(&'static Record, u64)>,
}

/// Whether membarrier(2) serves this process (registered once, on the first snapshot).
fn barrier_available() -> bool {
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
        let all = RECORDS.lock().unwrap_or_else(|p| p.into_inner());
        let pinned = all
            .iter()
            .filter_map(|r| {
                let s = r.seq.load(Ordering::Acquire);
                (s % 2 == 1).then_some((*r, s))
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

    #[test]
    fn an_exited_threads_record_serves_the_next_thread() {
        std::thread::spawn(|| drop(pin())).join().unwrap();
        let before = RECORDS.lock().unwrap().len();
        for _ in 0..20 {
            std::thread::spawn(|| drop(pin())).join().unwrap();
        }
        // Other tests' threads may register meanwhile (in one process under `cargo test`):
        // without reuse these 20 threads alone would add 20.
        let after = RECORDS.lock().unwrap().len();
        assert!(after < before + 20, "records {before} -> {after}");
    }
}
