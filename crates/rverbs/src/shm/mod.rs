//! Shared memory between the processes of one host (docs/device.md, docs/shared-state.md).
//!
//! Every process using rverbs is an *endpoint* of the host-wide device. Its objects that
//! peers must reach without its CPU — receive queues, completion rings, the memory-key
//! table, the QP table, the memory of shareable regions — live in *segments*: files in
//! the endpoint's directory under the per-user runtime directory, mapped shared. A peer
//! maps the same files and works on them directly (one-sided).
//!
//! Layouts placed in segments are `#[repr(C)]` structs made only of atomics and plain
//! integers ([`ShmSafe`]): any bit pattern is a valid value, so a peer that writes
//! garbage (or dies mid-write) can make the data wrong but never make this process's
//! reads undefined behaviour.
#![allow(unsafe_code)]

pub(crate) mod cma;
pub(crate) mod counters;
pub(crate) mod fifo;
pub(crate) mod latency;
pub(crate) mod lock;
pub(crate) mod registry;
pub(crate) mod stats;
pub(crate) mod tables;
pub(crate) mod view;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

use rustix::fs::{Mode, OFlags};

use crate::error::{Error, Result};

/// Types that may be read and written in a segment shared with other processes.
///
/// # Safety
/// Every bit pattern must be a valid value, the type must have no padding that matters,
/// no pointers or references, and interior mutability only through atomics.
pub(crate) unsafe trait ShmSafe {}

// SAFETY: atomics of plain integers accept every bit pattern and are shared by design.
unsafe impl ShmSafe for AtomicU64 {}
// SAFETY: as above.
unsafe impl ShmSafe for AtomicU32 {}
// SAFETY: as above.
unsafe impl ShmSafe for AtomicU8 {}

/// The per-user runtime directory of the device [`crate::devices`] lists:
/// `$RVERBS_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/rverbs`, else `/dev/shm/rverbs-<uid>`,
/// else `/tmp/rverbs-<uid>` (`config::runtime_dir_from`).
pub(crate) fn runtime_dir() -> PathBuf {
    crate::config::runtime_dir_from_env()
}

/// A shared mapping of a file in the runtime directory.
pub(crate) struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
    /// The creator removes the file when the segment is dropped.
    owner: bool,
    /// Known to the SIGBUS handler: a truncation by another process zero-fills the
    /// mapping instead of killing this one (`fault.rs`).
    watch: crate::fault::Watch,
    /// For a sparse segment, the file, whose pages are reserved as records come into use
    /// ([`Segment::reserve`]).
    sparse: Option<OwnedFd>,
}

// SAFETY: the mapping is plain shared memory; all access to it goes through `ShmSafe`
// types (atomics) or the device's copy primitives.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("path", &self.path).field("len", &self.len).finish()
    }
}

fn map(fd: &OwnedFd, len: usize) -> Result<NonNull<u8>> {
    use rustix::mm::{mmap, MapFlags, ProtFlags};
    // SAFETY: a fresh shared mapping of a file we hold open, at an address the kernel
    // chooses; no existing memory is affected.
    let p = unsafe {
        mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, 0)?
    };
    NonNull::new(p.cast::<u8>()).ok_or(Error::Bug("mmap returned null"))
}

/// A failed reservation of runtime-directory space: the file system is full (or the
/// file too large for it) is `ENOMEM` at the verb (`Error::Exhausted`).
fn space_error(e: rustix::io::Errno) -> Error {
    match e {
        rustix::io::Errno::NOSPC | rustix::io::Errno::FBIG | rustix::io::Errno::DQUOT => {
            Error::Exhausted { what: "runtime directory space (RVERBS_RUNTIME_DIR)" }
        }
        e => e.into(),
    }
}

impl Segment {
    fn new(ptr: NonNull<u8>, len: usize, path: &Path, owner: bool) -> Segment {
        let watch = crate::fault::watch(ptr.as_ptr() as usize, len);
        Segment { ptr, len, path: path.to_owned(), owner, watch, sparse: None }
    }

    /// Reserves the file pages under `[offset, offset + len)` of a sparse segment before
    /// its first store there, so that a full runtime directory is `ENOMEM` at the verb
    /// that needs the record, not SIGBUS at the store (a no-op for other segments, whose
    /// pages are all reserved when created).
    pub(crate) fn reserve(&self, offset: usize, len: usize) -> Result<()> {
        let Some(fd) = &self.sparse else { return Ok(()) };
        match rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::KEEP_SIZE, offset as u64, len as u64) {
            Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
            Err(e) => Err(space_error(e)),
        }
    }

    /// Whether another process truncated the file under the mapping, which now reads as
    /// zeros (`fault.rs`): the objects in it are gone for this process.
    pub(crate) fn poisoned(&self) -> bool {
        crate::fault::poisoned(&self.watch)
    }

    /// Creates the file `path` of `len` bytes (rounded up to pages, zero-filled) and maps
    /// it, with every page reserved in the file system: a runtime directory that is full
    /// (a small tmpfs such as Docker's 64 MiB `/dev/shm`) refuses the segment here with
    /// `ENOMEM`, instead of a SIGBUS at the first store into a page it cannot supply.
    pub(crate) fn create(path: &Path, len: usize) -> Result<Segment> {
        Self::create_with(path, len, true)
    }

    /// As [`Segment::create`], with pages committed only when touched: for large,
    /// mostly empty tables whose used part is small (`shm::tables`).
    pub(crate) fn create_sparse(path: &Path, len: usize) -> Result<Segment> {
        Self::create_with(path, len, false)
    }

    fn create_with(path: &Path, len: usize, reserve: bool) -> Result<Segment> {
        let page = rustix::param::page_size();
        let len = len.max(1).div_ceil(page) * page;
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let sized = if reserve {
            rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, len as u64).or_else(|e| match e {
                // File systems without fallocate (not tmpfs): size it as before.
                rustix::io::Errno::OPNOTSUPP => rustix::fs::ftruncate(&fd, len as u64),
                e => Err(e),
            })
        } else {
            rustix::fs::ftruncate(&fd, len as u64)
        };
        if let Err(e) = sized {
            let _ = std::fs::remove_file(path);
            return Err(space_error(e));
        }
        let ptr = match map(&fd, len) {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        let mut seg = Segment::new(ptr, len, path, true);
        if !reserve {
            seg.sparse = Some(fd);
        }
        Ok(seg)
    }

    /// Maps the segment `path`, creating it (zero-filled, `len` bytes) if it does not
    /// exist; it is never removed (host-wide state every endpoint shares).
    pub(crate) fn open_or_create(path: &Path, len: usize) -> Result<Segment> {
        let page = rustix::param::page_size();
        let len = len.max(1).div_ceil(page) * page;
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
        // Growing is idempotent: racing creators all truncate to the same length.
        if (rustix::fs::fstat(fd.as_fd())?.st_size as usize) < len {
            rustix::fs::ftruncate(&fd, len as u64)?;
        }
        let ptr = map(&fd, len)?;
        Ok(Segment::new(ptr, len, path, false))
    }

    /// Maps an existing segment created by another endpoint.
    pub(crate) fn open(path: &Path) -> Result<Segment> {
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let len = rustix::fs::fstat(fd.as_fd())?.st_size as usize;
        if len == 0 {
            return Err(Error::Bug("empty shared segment"));
        }
        let ptr = map(&fd, len)?;
        Ok(Segment::new(ptr, len, path, false))
    }

    /// Maps `name` in another endpoint's directory `dir` to read what its owner records
    /// there (its counters, its statistics), at least `header` bytes long: a segment the
    /// owner has not created is `Error::Again` with `absent` as the reason, for `verb`.
    pub(crate) fn open_record(dir: &Path, name: &str, header: usize, verb: &'static str, absent: &'static str) -> Result<Segment> {
        let seg = match Segment::open(&dir.join(name)) {
            Ok(s) => s,
            Err(Error::Os(e)) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::Again { verb, why: absent }),
            Err(e) => return Err(e),
        };
        if seg.len() < header {
            return Err(Error::Bug("record segment shorter than its header"));
        }
        Ok(seg)
    }

    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Removes the file now (the mapping stays valid; peers can no longer open it).
    pub(crate) fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// The shared value of type `T` at byte `offset`.
    ///
    /// Panics if the value does not fit or is misaligned: offsets come from this crate's
    /// own layouts, never from peers.
    #[inline]
    pub(crate) fn get<T: ShmSafe>(&self, offset: usize) -> &T {
        self.slice::<T>(offset, 1).first().expect("one element")
    }

    /// `n` shared values of type `T` from byte `offset`.
    #[inline]
    pub(crate) fn slice<T: ShmSafe>(&self, offset: usize, n: usize) -> &[T] {
        let size = std::mem::size_of::<T>();
        let end = n.checked_mul(size).and_then(|b| b.checked_add(offset)).expect("segment range");
        assert!(end <= self.len, "segment access out of range");
        assert_eq!((self.addr() + offset) % std::mem::align_of::<T>(), 0, "misaligned segment access");
        // SAFETY: the range lies inside the live mapping (checked), is aligned for T
        // (checked), and T is ShmSafe: every bit pattern is valid and all mutation goes
        // through atomics, so shared references are sound even while peers write.
        unsafe { std::slice::from_raw_parts((self.addr() + offset) as *const T, n) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        crate::fault::unwatch(&self.watch);
        // SAFETY: unmapping exactly the mapping made in create/open; references into it
        // borrow `self` and cannot outlive it.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    // Issue 20, defect 4: a same-user process truncated a segment file under another's
    // mapping, whose next access died of SIGBUS.
    #[test]
    fn a_segment_truncated_by_another_process_reads_as_zeros_instead_of_sigbus() {
        crate::fault::arm();
        let dir = std::env::temp_dir().join(format!("rverbs-trunc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let page = rustix::param::page_size();
        let a = Segment::create(&path, 4 * page).unwrap();
        let b = Segment::open(&path).unwrap();
        a.get::<AtomicU64>(3 * page).store(7, Ordering::Release);
        assert_eq!(b.get::<AtomicU64>(3 * page).load(Ordering::Acquire), 7);
        assert!(!b.poisoned());
        // The hostile part: shrink the file to one page.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(page as u64).unwrap();
        assert_eq!(b.get::<AtomicU64>(3 * page).load(Ordering::Acquire), 0, "zeros, not SIGBUS");
        assert!(b.poisoned());
        // The whole mapping was replaced: even the page still in the file reads zeros now,
        // and writes land in private memory.
        b.get::<AtomicU64>(0).store(9, Ordering::Release);
        assert_eq!(a.get::<AtomicU64>(0).load(Ordering::Acquire), 0);
        drop(b);
        drop(a);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_segment_is_shared_between_mappings_and_removed_by_its_owner() {
        let dir = std::env::temp_dir().join(format!("rverbs-seg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let a = Segment::create(&path, 100).unwrap();
        assert_eq!(a.len() % rustix::param::page_size(), 0);
        let b = Segment::open(&path).unwrap();
        a.get::<AtomicU64>(8).store(42, Ordering::Release);
        assert_eq!(b.get::<AtomicU64>(8).load(Ordering::Acquire), 42);
        assert!(Segment::create(&path, 100).is_err(), "exclusive create");
        drop(b);
        drop(a);
        assert!(!path.exists());
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn out_of_range_access_panics() {
        let dir = std::env::temp_dir().join(format!("rverbs-seg2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = Segment::create(&dir.join("s"), 10).unwrap();
        let _ = a.get::<AtomicU64>(a.len());
    }
}
