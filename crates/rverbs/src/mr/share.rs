//! Shareable registrations: making caller memory reachable by peers with plain loads and
//! stores (opt-in with `RVERBS_SHARED_MR=1`).
//!
//! Cross-memory attach costs a system call per access (about a microsecond), which a
//! one-sided write cannot afford if it is to compete with shared-memory transports. So a
//! registration may move the pages of `[addr, addr+len)` onto a file in the endpoint
//! directory: the page range is copied into a new file `mr-<id>`, then the file is
//! mapped over the same addresses (`MAP_FIXED`), contents preserved. The application
//! sees the same bytes at the same addresses; peers map the file and write into it.
//!
//! Hazards (docs/memory.md, "Shareable registrations"), why it is not the default:
//! - Registration is not atomic with respect to other threads writing the same pages:
//!   a store that lands between the copy and the remap is lost.
//! - Whole pages move, including bytes around the region (partial first and last
//!   pages): they become shared too (peers still cannot reach them: keys are checked).
//! - After `fork`, parent and child share these pages instead of copying them on write.
//! - `madvise(MADV_DONTNEED)` no longer zero-fills them (the file keeps its contents),
//!   which breaks allocators that count on it (e.g. calloc after a heap trim).
//! - Deregistration leaves the pages on the (now unlinked) file; they stay valid memory.
//! - While the file exists, any process of the user can truncate it. The moved range is
//!   known to the SIGBUS handler meanwhile (`fault::watch`), like a segment: the next
//!   access, the application's own included, finds zero-filled private pages instead of
//!   dying of SIGBUS; the bytes on those pages (the region's, and any others on its first
//!   and last pages) are lost.
//!
//! Only private anonymous memory (heap, `mmap(MAP_ANONYMOUS|MAP_PRIVATE)`) and pages a
//! previous registration already moved are moved; anything else (stacks, file or shared
//! mappings, ranges overlapping a live shared registration partially) stays where it is
//! and peers reach it with cross-memory attach.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, ProtFlags};

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

    /// Gives back a registration's hold: the last one unlinks the file (the pages stay
    /// mapped and keep their contents).
    pub(crate) fn release(&self, hold: ShareHold) {
        let mut moved = self.moved.lock().expect("shares");
        if let Some(m) = moved.get_mut(&hold.start) {
            m.refs -= 1;
            if m.refs == 0 {
                let _ = std::fs::remove_file(&m.path);
                crate::fault::unwatch(&m.watch);
                moved.remove(&hold.start);
            }
        }
    }
}

/// Whether every page of `[p0, p1)` is private anonymous memory (or pages an earlier
/// registration of this process moved onto one of `files`), according to
/// /proc/self/maps.
fn movable(p0: usize, p1: usize, files: &std::collections::HashSet<String>) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let mut covered = p0;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) = (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.collect::<Vec<_>>().join(" ");
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else { continue };
        if e <= covered || s >= p1 {
            continue;
        }
        if s > covered {
            return false; // a hole
        }
        let anonymous = perms == "rw-p" && inode == "0" && (path.is_empty() || path == "[heap]");
        let moved_before = perms == "rw-s" && files.contains(path.trim_end_matches(" (deleted)"));
        if !(anonymous || moved_before) {
            return false;
        }
        covered = e;
        if covered >= p1 {
            return true;
        }
    }
    false
}

/// Copies the pages `[p0, p0+len)` into a new file at `path` and maps the file over them.
fn move_pages(path: &Path, p0: usize, len: usize) -> rustix::io::Result<()> {
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    // SAFETY: a fresh shared mapping of the new file at an address the kernel chooses.
    let tmp = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &fd, 0)? };
    // SAFETY: `[p0, p0+len)` is mapped readable (checked in /proc/self/maps by the
    // caller) and `tmp` is our fresh mapping of the same length.
    let copied = unsafe { mem::copy(tmp.cast(), p0 as *const u8, len) };
    if copied.is_err() {
        // SAFETY: unmapping exactly the temporary mapping made above.
        unsafe { rustix::mm::munmap(tmp, len)? };
        return Err(rustix::io::Errno::FAULT);
    }
    // SAFETY: unmapping exactly the temporary mapping made above.
    unsafe { rustix::mm::munmap(tmp, len)? };
    // SAFETY: replaces the caller's pages at the same addresses with the file holding
    // their contents; the range is the registration's own page range, private anonymous
    // memory of this process (checked by the caller), so no other mapping is affected.
    unsafe {
        rustix::mm::mmap(
            p0 as *mut std::ffi::c_void,
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED | MapFlags::FIXED,
            &fd,
            0,
        )?
    };
    Ok(())
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
}
