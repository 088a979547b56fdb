//! Shareable registrations: making caller memory reachable by peers with plain loads and
//! stores (the default where the endpoint directory is a memory filesystem;
//! `RVERBS_SHARED_MR=0` turns it off, `=1` on anywhere).
//!
//! Cross-memory attach costs a system call per access (about a microsecond), which a
//! one-sided write cannot afford if it is to compete with shared-memory transports. So a
//! registration may move the pages of `[addr, addr+len)` onto a file in the endpoint
//! directory: the page range is copied into a new file `mr-<id>`, then the file is
//! mapped over the same addresses (`MAP_FIXED`), contents preserved. The application
//! sees the same bytes at the same addresses; peers map the file and write into it.
//!
//! What keeps the move invisible to the application (docs/memory.md, "Shareable
//! registrations"):
//! - **No store is lost.** During the copy the range is read-only; a store to it by any
//!   thread of the process faults and waits in the fault handler until the file is in
//!   place, then runs again on it (`fault::moving`). Moves are one at a time ([`MOVES`]).
//! - **Deregistration gives the memory back as it was:** the last registration of a
//!   range copies it onto private anonymous pages moved over the same addresses
//!   (`mremap`), the same way, so `MADV_DONTNEED` zero-fills and `fork` copies on write
//!   again.
//! - **A forked child gets its own copy** of every range moved at the fork, taken in the
//!   child (a `pthread_atfork` handler) before `fork` returns there, as the kernel's
//!   copy-on-write gives a child of a process whose pages a NIC pinned
//!   (ibv_fork_init(3), `IBV_FORK_UNNEEDED`). No move runs across a fork.
//!
//! Limits that remain:
//! - Whole pages move, including bytes around the region (partial first and last
//!   pages): they become shared too (peers still cannot reach them: keys are checked).
//! - While registered, `madvise(MADV_DONTNEED)` does not zero-fill the pages (the file
//!   keeps its contents): a NIC's pinned pages would also keep the device's view.
//! - A store the kernel makes on the application's behalf into the range during the copy
//!   (a `read(2)` into a buffer on the same pages, on another thread) fails with EFAULT
//!   instead of waiting; `fork` through a raw system call (no `pthread_atfork`) shares
//!   the pages with the child.
//! - While the file exists, any process of the user can truncate it. The moved range is
//!   known to the SIGBUS handler meanwhile (`fault::watch`), like a segment: the next
//!   access, the application's own included, finds zero-filled private pages instead of
//!   dying of SIGBUS; the bytes on those pages (the region's, and any others on its first
//!   and last pages) are lost.
//!
//! Only private anonymous memory (heap, `mmap(MAP_ANONYMOUS|MAP_PRIVATE)`) and pages a
//! previous registration already moved are moved, and only where the fault handler can
//! hold a store (`fault::GUARDED`); anything else (stacks, file or shared mappings,
//! ranges overlapping a live shared registration partially) stays where it is and peers
//! reach it with cross-memory attach.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, MprotectFlags, MremapFlags, ProtFlags};

use crate::mem;

/// One moved page range.
struct Moved {
    end: usize,
    id: u64,
    path: PathBuf,
    /// Registrations using it.
    refs: usize,
    /// The range, known to the SIGBUS handler while its file can be opened by name.
    watch: crate::fault::Watch,
}

/// The page ranges this process moved onto files, by start address.
#[derive(Default)]
pub(crate) struct Shares {
    moved: Mutex<BTreeMap<usize, Moved>>,
    /// Every file this process ever moved pages onto (released ones are unlinked but
    /// their pages remain: they may be moved again).
    files: Mutex<std::collections::HashSet<String>>,
}

/// A registration's hold on a moved range; [`Shares::release`] gives it back.
#[derive(Debug)]
pub(crate) struct ShareHold {
    start: usize,
}

/// Where a shared registration's bytes are for peers.
pub(crate) struct SharedAt {
    pub(crate) hold: ShareHold,
    /// The segment id (`mr-<id>`).
    pub(crate) id: u64,
    /// Offset of the registration's first byte in the segment.
    pub(crate) offset: u64,
}

impl Shares {
    /// Makes `[addr, addr+len)` shareable (see the module doc), or says why not.
    pub(crate) fn share(&self, dir: &Path, id: u64, addr: usize, len: usize) -> Option<SharedAt> {
        let page = rustix::param::page_size();
        let p0 = addr & !(page - 1);
        let p1 = addr.checked_add(len)?.checked_next_multiple_of(page)?;
        let mut moved = self.moved.lock().expect("shares");
        // Inside a range moved before: share its file.
        if let Some((&start, m)) = moved.range_mut(..=p0).next_back() {
            if p1 <= m.end {
                m.refs += 1;
                return Some(SharedAt { hold: ShareHold { start }, id: m.id, offset: (addr - start) as u64 });
            }
        }
        if moved.range(..p1).next_back().is_some_and(|(_, m)| m.end > p0) {
            return None; // overlaps a live moved range partially
        }
        if !movable(p0, p1, &self.files.lock().expect("shares")) {
            return None;
        }
        let path = dir.join(super::segment_name(id));
        match move_pages(&path, p0, p1 - p0) {
            Ok(()) => {
                self.files.lock().expect("shares").insert(path.display().to_string());
                let watch = crate::fault::watch(p0, p1 - p0);
                moved.insert(p0, Moved { end: p1, id, path, refs: 1, watch });
                Some(SharedAt { hold: ShareHold { start: p0 }, id, offset: (addr - p0) as u64 })
            }
            Err(e) => {
                tracing::warn!(%e, "could not make a registration shareable; peers will use cross-memory attach");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Gives back a registration's hold: the last one moves the range back onto private
    /// anonymous pages with the same contents and unlinks the file.
    pub(crate) fn release(&self, hold: ShareHold) {
        let mut moved = self.moved.lock().expect("shares");
        if let Some(m) = moved.get_mut(&hold.start) {
            m.refs -= 1;
            if m.refs == 0 {
                let len = m.end - hold.start;
                match unmove_pages(hold.start, len, &m.path) {
                    Ok(()) => crate::fault::unwatch(&m.watch),
                    // The pages stay on the file, still known to the SIGBUS handler.
                    Err(e) => tracing::warn!(%e, "could not give a deregistered range back to private memory"),
                }
                let _ = std::fs::remove_file(&m.path);
                moved.remove(&hold.start);
            }
        }
    }
}

/// Whether files in `dir` live in memory (tmpfs, ramfs): the default for shareable
/// registrations, whose pages would otherwise be written back to a disk.
pub(crate) fn in_memory(dir: &Path) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    rustix::fs::statfs(dir).is_ok_and(|s| matches!(s.f_type as u64, TMPFS_MAGIC | RAMFS_MAGIC))
}

/// One line of /proc/self/maps.
struct Mapping<'a> {
    start: usize,
    end: usize,
    perms: &'a str,
    inode: &'a str,
    /// The path or pseudo-path, " (deleted)" removed; empty for anonymous memory.
    name: String,
}

/// Whether the mappings of /proc/self/maps cover `[p0, p1)` without a hole, each of
/// those that overlap it accepted by `ok`, which is also told whether the mapping starts
/// right where an inaccessible anonymous one ends (a thread stack lies right above its
/// guard page, pthread_create(3) with the default guard size).
fn maps_cover(p0: usize, p1: usize, mut ok: impl FnMut(&Mapping<'_>, bool) -> bool) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let mut covered = p0;
    let mut guard_end = None;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) = (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else { continue };
        let joined = f.collect::<Vec<_>>().join(" ");
        let m = Mapping { start, end, perms, inode, name: joined.trim_end_matches(" (deleted)").to_owned() };
        let after_guard = guard_end == Some(m.start);
        guard_end = (m.perms == "---p" && m.inode == "0" && m.name.is_empty()).then_some(m.end);
        if m.end <= covered || m.start >= p1 {
            continue;
        }
        if m.start > covered || !ok(&m, after_guard) {
            return false; // a hole, or a mapping that does not qualify
        }
        covered = m.end;
        if covered >= p1 {
            return true;
        }
    }
    false
}

/// Whether every page of `[p0, p1)` is private anonymous memory (or pages an earlier
/// registration of this process moved onto one of `files`), according to
/// /proc/self/maps.
fn movable(p0: usize, p1: usize, files: &std::collections::HashSet<String>) -> bool {
    if !crate::fault::GUARDED {
        return false; // no handler to hold a store during the move
    }
    // This thread's stack: the move makes its range read-only, and the mover's own store
    // there could not wait for itself.
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    maps_cover(p0, p1, |m, after_guard| {
        let anonymous = m.perms == "rw-p" && m.inode == "0" && (m.name.is_empty() || m.name == "[heap]");
        let moved_before = m.perms == "rw-s" && files.contains(&m.name);
        // A stack must not move (the kernel writes signal frames there).
        let stack = (m.start..m.end).contains(&sp) || (anonymous && m.name.is_empty() && after_guard);
        (anonymous || moved_before) && !stack
    })
}

/// Serialises moves (onto a file and back) with each other and with `fork`: the
/// forking thread holds it from the prepare handler to the parent and child handlers
/// ([`guard_forks`]), so a child never inherits a range in the middle of a move.
static MOVES: Mutex<()> = Mutex::new(());

/// The ranges moved onto files, `(start, len)`, start 0 when free: what a forked child
/// copies ([`guard_forks`]). Written under [`MOVES`], read by the child handler while
/// the forking thread holds it.
const RANGE_SLOTS: usize = 1 << 13;
static RANGES: [(AtomicUsize, AtomicUsize); RANGE_SLOTS] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; RANGE_SLOTS];

fn moves() -> MutexGuard<'static, ()> {
    MOVES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `step` with `[p0, p0+len)` read-only, a store to it by another thread waiting
/// in the fault handler until `step` is done (`fault::moving`). `step` must leave the
/// range readable and writable when it succeeds (a new mapping), and must not allocate
/// or take a lock: a thread waiting on the range may hold the allocator's. Called
/// under [`MOVES`].
fn with_range_held(p0: usize, len: usize, step: impl FnOnce() -> rustix::io::Result<()>) -> rustix::io::Result<()> {
    crate::fault::moving(p0, len);
    // SAFETY: the range is this process's own mapping (checked by the caller); only its
    // protection changes, and it is restored below or replaced by `step`.
    let held = unsafe { rustix::mm::mprotect(p0 as *mut _, len, MprotectFlags::READ) };
    let result = held.and_then(|()| step());
    if result.is_err() {
        // SAFETY: as above: the original protection of private read-write memory.
        let _ = unsafe { rustix::mm::mprotect(p0 as *mut _, len, MprotectFlags::READ | MprotectFlags::WRITE) };
    }
    crate::fault::moved();
    result
}

/// Whether every page of `[p0, p1)` is still this process's shared mapping of `path`
/// (/proc/self/maps), as [`move_pages`] left it.
fn still_on(p0: usize, p1: usize, path: &Path) -> bool {
    let want = path.display().to_string();
    maps_cover(p0, p1, |m, _| m.perms == "rw-s" && m.name == want)
}

/// Replaces the mapping `[p0, p0+len)` with private anonymous pages holding its
/// contents: a fresh private mapping, the copy, then `mremap` of the copy over the range.
/// Async-signal-safe (system calls and a leaf copy routine), as the fork child handler
/// needs; on failure the range is left as it was.
fn replace_with_private_copy(p0: usize, len: usize) -> rustix::io::Result<()> {
    // SAFETY: a fresh private anonymous mapping at an address the kernel chooses.
    let tmp = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)? };
    // SAFETY: the range is readable (a mapping of this process the callers name), `tmp`
    // our fresh mapping of the same length.
    let copied = unsafe { mem::copy(tmp.cast(), p0 as *const u8, len) }.map_err(|_| rustix::io::Errno::FAULT);
    // SAFETY: moves our private copy over the range, replacing exactly the mapping the
    // caller names; `tmp` is no longer mapped afterwards.
    let result = copied.and_then(|()| unsafe { rustix::mm::mremap_fixed(tmp, len, len, MremapFlags::MAYMOVE, p0 as *mut _) }.map(drop));
    if result.is_err() {
        // SAFETY: the copy or the move failed, so `tmp` is still our temporary mapping.
        let _ = unsafe { rustix::mm::munmap(tmp, len) };
    }
    result
}

/// Copies the pages `[p0, p0+len)` into a new file at `path` and maps the file over them.
fn move_pages(path: &Path, p0: usize, len: usize) -> rustix::io::Result<()> {
    guard_forks();
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    // SAFETY: a fresh shared mapping of the new file at an address the kernel chooses.
    let tmp = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &fd, 0)? };
    let _one = moves();
    let Some(slot) = RANGES.iter().find(|(start, _)| start.load(Ordering::Relaxed) == 0) else {
        // SAFETY: unmapping exactly the temporary mapping made above.
        unsafe { rustix::mm::munmap(tmp, len)? };
        return Err(rustix::io::Errno::NOSPC);
    };
    let result = with_range_held(p0, len, || {
        // SAFETY: `[p0, p0+len)` is mapped readable (checked in /proc/self/maps by the
        // caller) and `tmp` is our fresh mapping of the same length.
        unsafe { mem::copy(tmp.cast(), p0 as *const u8, len) }.map_err(|_| rustix::io::Errno::FAULT)?;
        // SAFETY: replaces the caller's pages at the same addresses with the file holding
        // their contents; the range is the registration's own page range, private
        // anonymous memory of this process (checked by the caller), so no other mapping
        // is affected.
        unsafe {
            rustix::mm::mmap(p0 as *mut std::ffi::c_void, len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED | MapFlags::FIXED, &fd, 0)?
        };
        Ok(())
    });
    // SAFETY: unmapping exactly the temporary mapping made above.
    unsafe { rustix::mm::munmap(tmp, len)? };
    if result.is_ok() {
        slot.1.store(len, Ordering::Relaxed);
        slot.0.store(p0, Ordering::Release);
    }
    result
}

/// Moves the range `[p0, p0+len)`, on file `path` since [`move_pages`], back onto
/// private anonymous pages with the same contents — if it is still there: an application
/// that unmapped (or mapped something else over) registered memory before deregistering
/// it keeps what it has now, and the range is forgotten.
fn unmove_pages(p0: usize, len: usize, path: &Path) -> rustix::io::Result<()> {
    let forget = || {
        if let Some(slot) = RANGES.iter().find(|(start, _)| start.load(Ordering::Relaxed) == p0) {
            slot.0.store(0, Ordering::Release);
        }
    };
    if !still_on(p0, p0 + len, path) {
        let _one = moves();
        forget();
        return Ok(());
    }
    let _one = moves();
    let result = with_range_held(p0, len, || replace_with_private_copy(p0, len));
    if result.is_ok() {
        forget();
    }
    result
}

thread_local! {
    /// The forking thread's hold on [`MOVES`], from the prepare handler to the parent's
    /// or the child's.
    static HELD_ACROSS_FORK: std::cell::RefCell<Option<MutexGuard<'static, ()>>> = const { std::cell::RefCell::new(None) };
}

/// Registers, once, the fork handlers that give a forked child private copies of the
/// moved ranges (module doc). The child's copy is taken in the child before `fork`
/// returns there; only the child's one thread runs then.
fn guard_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn prepare() {
        let g = moves();
        HELD_ACROSS_FORK.with(|h| *h.borrow_mut() = Some(g));
    }
    extern "C" fn parent() {
        HELD_ACROSS_FORK.with(|h| drop(h.borrow_mut().take()));
    }
    extern "C" fn child() {
        for (start, len) in &RANGES {
            let (p0, n) = (start.load(Ordering::Acquire), len.load(Ordering::Relaxed));
            if p0 == 0 {
                continue;
            }
            if replace_with_private_copy(p0, n).is_err() {
                continue;
            }
            start.store(0, Ordering::Relaxed);
        }
        HELD_ACROSS_FORK.with(|h| drop(h.borrow_mut().take()));
    }
    ONCE.call_once(|| crate::sys::at_fork(prepare, parent, child));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_pages_keep_their_contents_and_are_shared_with_the_file() {
        let dir = std::env::temp_dir().join(format!("rverbs-share-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = rustix::param::page_size();
        // SAFETY: a fresh private anonymous mapping of three pages.
        let base = unsafe {
            rustix::mm::mmap_anonymous(std::ptr::null_mut(), 3 * page, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
                .unwrap()
        } as usize;
        // SAFETY: inside the mapping.
        let buf = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, 3 * page) };
        buf.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let shares = Shares::default();
        let at = shares.share(&dir, 7, base + 100, 2 * page).expect("anonymous memory is movable");
        assert_eq!((at.id, at.offset), (7, 100));
        assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8), "contents preserved");
        // A write through the file (what a peer does) appears in our memory.
        let peer = crate::shm::Segment::open(&dir.join("mr-7")).unwrap();
        assert_eq!(peer.len(), 3 * page);
        let word = peer.get::<std::sync::atomic::AtomicU64>(page);
        word.store(0x1122_3344_5566_7788, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(buf[page], 0x88);
        // A second registration inside shares the same file.
        let inner = shares.share(&dir, 8, base + page, 8).unwrap();
        assert_eq!((inner.id, inner.offset), (7, page as u64));
        shares.release(inner.hold);
        shares.release(at.hold);
        assert!(!dir.join("mr-7").exists(), "the last release unlinks the file");
        assert_eq!(buf[page], 0x88, "the pages stay valid");
        // Pages moved before and released can move again (a new registration).
        let again = shares.share(&dir, 10, base, 8).unwrap();
        assert_eq!(again.id, 10);
        assert_eq!(buf[page], 0x88);
        shares.release(again.hold);
        // A shared file mapping of something else is not moved.
        let other = crate::shm::Segment::create(&dir.join("other"), page).unwrap();
        assert!(shares.share(&dir, 9, other.addr(), 64).is_none());
        assert!(!dir.join("mr-9").exists());
        drop((peer, other));
        // SAFETY: unmapping the test's own mapping; nothing refers to it any more.
        unsafe { rustix::mm::munmap(base as *mut _, 3 * page).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // Hostile-segment harness (tests/chaos/hostile_seg.sh), truncate: another process
    // truncated the file a shared registration had moved the application's pages onto;
    // the application's next access to its own buffer died of SIGBUS.
    #[test]
    fn moved_pages_whose_file_is_truncated_read_as_zeros_instead_of_sigbus() {
        crate::fault::arm();
        let dir = std::env::temp_dir().join(format!("rverbs-share-trunc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = rustix::param::page_size();
        // SAFETY: a fresh private anonymous mapping of two pages.
        let base = unsafe {
            rustix::mm::mmap_anonymous(std::ptr::null_mut(), 2 * page, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
                .unwrap()
        } as usize;
        // SAFETY: inside the mapping; written before it is shared.
        unsafe { std::ptr::write_bytes(base as *mut u8, 7, 2 * page) };
        let shares = Shares::default();
        let at = shares.share(&dir, 11, base, 2 * page).expect("movable");
        std::fs::OpenOptions::new().write(true).open(dir.join("mr-11")).unwrap().set_len(0).unwrap();
        // The application reads its own buffer (a volatile read: what C code does).
        // SAFETY: the range is mapped (the file's pages, or the handler's zeros).
        let b = unsafe { std::ptr::read_volatile((base + page + 5) as *const u8) };
        assert_eq!(b, 0, "zeros, not SIGBUS");
        shares.release(at.hold);
        // SAFETY: unmapping the test's own mapping.
        unsafe { rustix::mm::munmap(base as *mut _, 2 * page).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn anonymous_pages(n: usize) -> usize {
        let len = n * rustix::param::page_size();
        // SAFETY: a fresh private anonymous mapping of `n` pages.
        let p = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE) };
        p.unwrap() as usize
    }

    /// The mapping that holds `addr`, as /proc/self/maps shows it: its permissions and
    /// inode.
    fn mapping_of(addr: usize) -> (String, String) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (s, e) = f[0].split_once('-').unwrap();
            let (s, e) = (usize::from_str_radix(s, 16).unwrap(), usize::from_str_radix(e, 16).unwrap());
            if (s..e).contains(&addr) {
                return (f[1].to_owned(), f[4].to_owned());
            }
        }
        panic!("{addr:#x} is not mapped");
    }

    /// Issue 24's first hazard: threads storing inside the region and around it on the
    /// same pages while it is registered and deregistered, again and again; every store
    /// is found afterwards (the copy used to lose those landing between the copy and the
    /// remap).
    #[test]
    fn stores_during_moves_are_never_lost() {
        crate::fault::arm();
        let dir = std::env::temp_dir().join(format!("rverbs-share-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = rustix::param::page_size();
        let base = anonymous_pages(2);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // One counter inside the registered bytes, one before them on the same page, one
        // on the second page after them.
        let spots = [base + 64, base + 8, base + page + 512];
        let writers: Vec<_> = spots
            .iter()
            .map(|&at| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    // SAFETY: an aligned word of the test's mapping, only this thread's.
                    let word = unsafe { &*(at as *const std::sync::atomic::AtomicU64) };
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) && n < 50_000_000 {
                        // A plain read and write, as C code increments: a store lost to a
                        // move leaves the word behind `n`.
                        word.store(word.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let shares = Shares::default();
        for id in 0..300 {
            let at = shares.share(&dir, 100 + id, base + 64, page).expect("anonymous memory is movable");
            shares.release(at.hold);
        }
        stop.store(true, Ordering::Relaxed);
        for (w, &at) in writers.into_iter().zip(&spots) {
            let n = w.join().unwrap();
            // SAFETY: as above; the writer is done.
            let word = unsafe { &*(at as *const std::sync::atomic::AtomicU64) }.load(Ordering::Relaxed);
            assert_eq!(word, n, "stores at {:#x} lost during the moves", at - base);
        }
        // SAFETY: unmapping the test's own mapping; nothing refers to it any more.
        unsafe { rustix::mm::munmap(base as *mut _, 2 * page).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 24's third hazard: after the last deregistration the pages are private
    /// anonymous memory again, with their contents: `MADV_DONTNEED` zero-fills them.
    #[test]
    fn a_released_range_is_private_anonymous_memory_again() {
        crate::fault::arm();
        let dir = std::env::temp_dir().join(format!("rverbs-share-back-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = rustix::param::page_size();
        let base = anonymous_pages(1);
        // SAFETY: inside the mapping.
        unsafe { std::ptr::write_bytes(base as *mut u8, 0x5a, page) };
        let shares = Shares::default();
        let at = shares.share(&dir, 200, base, 128).unwrap();
        assert_eq!(mapping_of(base).0, "rw-s", "moved onto the file");
        shares.release(at.hold);
        assert_eq!(mapping_of(base), ("rw-p".to_owned(), "0".to_owned()), "private anonymous again");
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { std::ptr::read_volatile((base + 100) as *const u8) }, 0x5a, "contents kept");
        // SAFETY: advice on the test's own mapping.
        unsafe { rustix::mm::madvise(base as *mut _, page, rustix::mm::Advice::LinuxDontNeed).unwrap() };
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { std::ptr::read_volatile((base + 100) as *const u8) }, 0, "MADV_DONTNEED zero-fills");
        // SAFETY: unmapping the test's own mapping.
        unsafe { rustix::mm::munmap(base as *mut _, page).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 24's second hazard: a forked child gets its own copy of registered pages, as
    /// copy-on-write gives it: what the child stores stays the child's, what the parent
    /// stores after the fork stays the parent's.
    #[test]
    fn a_forked_child_gets_private_copies_of_registered_pages() {
        crate::fault::arm();
        let dir = std::env::temp_dir().join(format!("rverbs-share-fork-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = rustix::param::page_size();
        let base = anonymous_pages(1);
        // SAFETY: inside the mapping.
        unsafe { std::ptr::write_bytes(base as *mut u8, 1, page) };
        let shares = Shares::default();
        let at = shares.share(&dir, 300, base, 64).unwrap();
        let (mut to_child, mut to_parent) = ([0i32; 2], [0i32; 2]);
        // SAFETY: two pipes of the test's own.
        assert_eq!(unsafe { libc::pipe(to_child.as_mut_ptr()) }, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::pipe(to_parent.as_mut_ptr()) }, 0);
        let byte = |at: usize| {
            // SAFETY: inside the test's mapping.
            unsafe { std::ptr::read_volatile(at as *const u8) }
        };
        let put = |at: usize, v: u8| {
            // SAFETY: inside the test's mapping.
            unsafe { std::ptr::write_volatile(at as *mut u8, v) }
        };
        // SAFETY: the child runs only system calls and volatile accesses before _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // The child stores 2; then, once the parent stored 3, still reads its own 2.
            put(base + 10, 2);
            let mut b = [0u8; 1];
            // SAFETY: the pipes are open in the child.
            unsafe {
                libc::write(to_parent[1], b"x".as_ptr().cast(), 1);
                libc::read(to_child[0], b.as_mut_ptr().cast(), 1);
            }
            let code = if byte(base + 10) == 2 && byte(base + 20) == 1 && (mapping_of(base).0 == "rw-p") { 0 } else { 1 };
            // SAFETY: leaves the child without running the test harness's exit path.
            unsafe { libc::_exit(code) };
        }
        let mut b = [0u8; 1];
        // SAFETY: the pipes are open.
        unsafe { libc::read(to_parent[0], b.as_mut_ptr().cast(), 1) };
        assert_eq!(byte(base + 10), 1, "the child's store reached the parent");
        put(base + 20, 3);
        // SAFETY: as above.
        unsafe { libc::write(to_child[1], b"x".as_ptr().cast(), 1) };
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child saw the parent's store, or no private copy: {status:#x}");
        assert_eq!(mapping_of(base).0, "rw-s", "the parent's pages stay on the file");
        shares.release(at.hold);
        // SAFETY: unmapping the test's own mapping.
        unsafe { rustix::mm::munmap(base as *mut _, page).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Stacks stay where they are (the kernel writes signal frames there, and the mover's
    /// own stack could not wait for its move): this thread's, and another thread's,
    /// found by the guard page below it.
    #[test]
    fn thread_stacks_are_not_moved() {
        crate::fault::arm();
        let dir = std::env::temp_dir().join(format!("rverbs-share-stack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shares = std::sync::Arc::new(Shares::default());
        let mine = [0u8; 64];
        assert!(shares.share(&dir, 400, mine.as_ptr() as usize, 64).is_none(), "this thread's stack");
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let theirs = [0u8; 64];
            tx.send(theirs.as_ptr() as usize).unwrap();
            done_rx.recv().unwrap();
            std::hint::black_box(&theirs);
        });
        let at = rx.recv().unwrap();
        assert!(shares.share(&dir, 401, at, 64).is_none(), "another thread's stack");
        done_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(!dir.join("mr-400").exists() && !dir.join("mr-401").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
