//! The threads rverbs starts for itself (each device's progress thread, the connection
//! manager's thread) and the one way they start: [`spawn`] returns only once the new
//! thread has done its start-up, so the verb that started it returns with no thread of
//! ours in the middle of that start-up.
//!
//! Why (docs/progress-and-events.md, "Starting a thread"): a thread's start-up ends in
//! memory system calls. glibc gives a thread an arena at its first `malloc` or `free`:
//! `mmap` of a large reservation, then `munmap` of the part outside the alignment it
//! needs. rdma-core's providers start no threads, so a program may take itself to be
//! single-threaded right after a verb returns, and some do more than assume it:
//! libfabric's memory monitor (`memhooks`, the default `FI_MR_CACHE_MONITOR` of its
//! verbs provider) overwrites the first bytes of libc's `mmap`, `munmap`, `mremap`,
//! `madvise`, `brk`, `shmat` and `shmdt` with a jump when a domain opens. A thread inside
//! one of those system calls at that moment returns into the middle of the new bytes: in
//! glibc 2.36's `munmap` it resumes at offset 7, decodes the patch's bytes there as an
//! `add` to `[rcx - 1]`, where `rcx` holds that return address, and dies of SIGSEGV
//! (SEGV_ACCERR at `munmap+6`, the page being read-and-execute again). A new thread
//! of ours, still creating its arena while the program went on to `fi_domain`, died so.
//! After [`spawn`] the thread has its arena; what it does before it first sleeps
//! (epoll_wait) takes small blocks from that arena, which needs no `mmap` or `munmap`.

use std::io;

/// Starts a thread named `name` that runs `body`, and returns once that thread has made
/// its first heap allocation and freed it (the arena and cache glibc gives a new thread),
/// after the start-up the standard library runs on a new thread (naming it, its signal
/// stack). The thread is detached; `body` is meant to run for the life of the process.
///
/// Errors: the error of creating the thread (`EAGAIN` at the process's thread limit).
pub fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let (ready, started) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new().name(name.into()).spawn(move || {
        warm_up();
        // The spawner waits for this message (or for `ready` to be dropped).
        let _ = ready.send(());
        drop(ready);
        body();
    })?;
    // Err only if the thread ended without sending, which leaves nothing to wait for.
    let _ = started.recv();
    Ok(())
}

/// The calling thread's first allocation and free: glibc makes the thread's arena
/// (mmap, munmap) and its per-thread cache here, if the standard library's own start-up
/// did not already.
fn warm_up() {
    // `black_box`: the compiler may otherwise drop an allocation nobody reads.
    drop(std::hint::black_box(Box::new([0u8; 64])));
    #[cfg(test)]
    tests::WARMED.lock().expect("warmed").push(std::thread::current().id());
}

#[cfg(test)]
mod tests {
    use super::spawn;
    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    /// The threads that finished [`super::warm_up`].
    pub(super) static WARMED: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

    #[test]
    fn spawn_returns_after_the_new_thread_warmed_up() {
        // Twenty times: the list of warmed threads is read right after `spawn` returns,
        // and must hold the thread, whose body then reports its id.
        for i in 0..20 {
            let (id_tx, id_rx) = mpsc::channel();
            let (end_tx, end_rx) = mpsc::channel::<()>();
            spawn(&format!("warm-{i}"), move || {
                id_tx.send(std::thread::current().id()).expect("send id");
                let _ = end_rx.recv();
            })
            .expect("spawn");
            let warmed_at_return = WARMED.lock().expect("warmed").clone();
            let id = id_rx.recv().expect("id");
            assert!(warmed_at_return.contains(&id), "spawn {i} returned before its thread's warm-up");
            drop(end_tx);
        }
    }

    #[test]
    fn the_body_runs_on_a_new_thread_of_the_given_name() {
        let (tx, rx) = mpsc::channel();
        spawn("rverbs-named", move || {
            let me = std::thread::current();
            tx.send((me.id(), me.name().map(str::to_owned))).expect("send");
        })
        .expect("spawn");
        let (id, name) = rx.recv().expect("id and name");
        assert_ne!(id, std::thread::current().id());
        assert_eq!(name.as_deref(), Some("rverbs-named"));
    }
}
