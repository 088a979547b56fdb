//! The command file behind `ibv_context.cmd_fd`, and what is shared through it
//! (ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3); docs/device.md, "Sharing a
//! context through its command fd").
//!
//! In the kernel the command fd is the uverbs file: objects belong to the file, not to the
//! `ibv_context`, and `ibv_import_device` makes a second context over the same file, in
//! which `pd->handle` and `mr->handle` (the kernel's object handles) name the same PD and
//! MR. Here the file is a [`CmdFile`]: one per `ibv_open_device`, shared by every context
//! imported from it, holding the core context and the live PDs and MRs by handle. Its
//! descriptor is a sealed memfd, so that a duplicate of it (`dup`, `SCM_RIGHTS`, `fork`)
//! still names it: this process finds the file by the memfd's inode, and the memfd's first
//! bytes (the magic, the owner's pid) let any process tell an rverbs command fd from
//! another descriptor.
//!
//! Rule: ibv_import_device(3): the fd must be a duplicate of a context's `cmd_fd`; the
//! imported context closes it. ibv_import_pd(3), ibv_import_mr(3): a handle is looked up in
//! the context's file; the uverbs lookup (`lookup_get_idr_uobject`, the kernel's
//! drivers/infiniband/core/rdma_core.c) answers `ENOENT` for a handle that names nothing.

use core::ffi::c_int;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

/// The first bytes of every command file; then the owner's pid (u32, native order).
const MAGIC: [u8; 16] = *b"rverbs cmd_fd v1";
/// The header's length: the magic and the pid.
const HEADER_LEN: usize = MAGIC.len() + 4;

/// What one command fd names: a file every context imported from it shares.
pub struct CmdFile {
    /// The process that opened the file (a forked child inherits the table, not the file).
    pid: u32,
    /// The core context every `ibv_context` of the file shares.
    core: rverbs::Context,
    /// The descriptors the contexts of the file own (an fd passed to `ibv_import_device`
    /// that one of them owns was not duplicated: refused, or two contexts would close it).
    fds: Mutex<Vec<RawFd>>,
    /// The live PDs of the file by `pd->handle` (allocated, not yet deallocated).
    pds: Mutex<HashMap<u32, rverbs::Pd>>,
    /// The live MRs of the file by `mr->handle` (registered, not yet deregistered).
    mrs: Mutex<HashMap<u32, rverbs::Mr>>,
}

/// The command files of this process by memfd inode, (st_dev, st_ino): how a duplicate of
/// a `cmd_fd` finds its file. Weak: a file lives while a context, PD or MR of it does.
static FILES: Mutex<Vec<(InodeKey, Weak<CmdFile>)>> = Mutex::new(Vec::new());

/// (st_dev, st_ino) of a descriptor's file.
type InodeKey = (u64, u64);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// (st_dev, st_ino) and the file type (`S_IFMT` bits) of `fd`, or `None` if it is not an
/// open descriptor.
fn stat_key(fd: RawFd) -> Option<(InodeKey, libc::mode_t)> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into the buffer; any fd value is allowed.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so the buffer is initialised.
    let st = unsafe { st.assume_init() };
    Some(((st.st_dev, st.st_ino), st.st_mode & libc::S_IFMT))
}

/// The pid in the header of `fd` if it is an rverbs command file (a sealed memfd that
/// starts with [`MAGIC`]). Reads nothing from any other kind of descriptor: only a memfd
/// answers `F_GET_SEALS`, so pipes, sockets and devices are never read.
fn header_pid(fd: RawFd) -> Option<u32> {
    // SAFETY: F_GET_SEALS takes no argument and has no effect on the descriptor.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_WRITE == 0 {
        return None;
    }
    let mut buf = [0u8; HEADER_LEN];
    // SAFETY: `buf` is writable for its length; pread does not move the file offset.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != HEADER_LEN as isize || buf[..MAGIC.len()] != MAGIC {
        return None;
    }
    Some(u32::from_ne_bytes(buf[MAGIC.len()..].try_into().ok()?))
}

fn getpid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

impl CmdFile {
    /// A new file for a context just opened on `core`, and its descriptor (`cmd_fd`).
    /// Errors: the errno of `memfd_create`, `write` or `fcntl`.
    pub fn create(core: rverbs::Context) -> Result<(Arc<CmdFile>, OwnedFd), c_int> {
        let os_err = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        // SAFETY: the name is a NUL-terminated literal; the result is checked.
        let fd = unsafe {
            libc::memfd_create(c"rverbs-cmd".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(os_err());
        }
        // SAFETY: a descriptor just created, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let pid = getpid();
        let mut header = [0u8; HEADER_LEN];
        header[..MAGIC.len()].copy_from_slice(&MAGIC);
        header[MAGIC.len()..].copy_from_slice(&pid.to_ne_bytes());
        // SAFETY: `header` is readable for its length; `fd` is open.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), header.as_ptr().cast(), header.len(), 0) };
        if n != HEADER_LEN as isize {
            return Err(if n < 0 { os_err() } else { libc::EIO });
        }
        // The header can no longer change, whoever holds a duplicate.
        let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on our own memfd.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os_err());
        }
        let (key, _) = stat_key(fd.as_raw_fd()).ok_or(libc::EBADF)?;
        let file = Arc::new(CmdFile {
            pid,
            core,
            fds: Mutex::new(Vec::new()),
            pds: Mutex::new(HashMap::new()),
            mrs: Mutex::new(HashMap::new()),
        });
        let mut files = lock(&FILES);
        files.retain(|(k, w)| w.strong_count() > 0 && *k != key);
        files.push((key, Arc::downgrade(&file)));
        Ok((file, fd))
    }

    /// The file a duplicate of a context's `cmd_fd` names (ibv_import_device(3)).
    ///
    /// Errors: `EINVAL` for a descriptor that is not open or not an rverbs command fd
    /// (rdma-core's `ibv_import_device`: `fstat` fails or the fd is not a character
    /// device), or for the very descriptor a context owns (not duplicated); `ENODEV` for a
    /// character device (rdma-core: no verbs device has that device number);
    /// `EOPNOTSUPP` for the command fd of a context of another process (passed with
    /// `SCM_RIGHTS`, or inherited over `fork`), or of a file none of whose contexts, PDs
    /// and MRs is left: their objects cannot be reached from here.
    pub fn find(fd: RawFd) -> Result<Arc<CmdFile>, c_int> {
        let Some((key, kind)) = stat_key(fd) else {
            return Err(libc::EINVAL);
        };
        if kind == libc::S_IFCHR {
            return Err(libc::ENODEV);
        }
        let regular = kind == libc::S_IFREG;
        let found = if regular {
            lock(&FILES).iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade())
        } else {
            None
        };
        match found {
            Some(file) if file.pid == getpid() => {
                if lock(&file.fds).contains(&fd) {
                    return Err(libc::EINVAL);
                }
                Ok(file)
            }
            // Inherited over fork: the child's copies are not the parent's objects.
            Some(_) => Err(libc::EOPNOTSUPP),
            None if regular && header_pid(fd).is_some() => Err(libc::EOPNOTSUPP),
            None => Err(libc::EINVAL),
        }
    }

    /// The core context the file's contexts share.
    pub fn core(&self) -> &rverbs::Context {
        &self.core
    }

    /// Records that a context of the file owns `fd` (its `cmd_fd`).
    pub fn attach(&self, fd: RawFd) {
        lock(&self.fds).push(fd);
    }

    /// A context of the file closed `fd`.
    pub fn detach(&self, fd: RawFd) {
        lock(&self.fds).retain(|f| *f != fd);
    }

    /// Records a PD allocated on the file (its handle is `pd->handle`).
    pub fn add_pd(&self, pd: &rverbs::Pd) {
        lock(&self.pds).insert(pd.handle(), pd.clone());
    }

    /// The PD was deallocated: its handle names nothing any more.
    pub fn remove_pd(&self, handle: u32) {
        lock(&self.pds).remove(&handle);
    }

    /// The live PD of the file named `handle`.
    pub fn pd(&self, handle: u32) -> Option<rverbs::Pd> {
        lock(&self.pds).get(&handle).cloned()
    }

    /// Records an MR registered on the file (its handle is `mr->handle`, its lkey).
    pub fn add_mr(&self, mr: &rverbs::Mr) {
        lock(&self.mrs).insert(mr.lkey(), mr.clone());
    }

    /// An MR named `handle` was deregistered: its entry goes, unless a registration made
    /// since took the handle over (only a deregistered region's entry is removed).
    pub fn remove_mr(&self, handle: u32) {
        let mut mrs = lock(&self.mrs);
        if mrs.get(&handle).is_some_and(|m| !m.is_valid()) {
            mrs.remove(&handle);
        }
    }

    /// The live MR of the file named `handle`.
    pub fn mr(&self, handle: u32) -> Option<rverbs::Mr> {
        lock(&self.mrs).get(&handle).filter(|m| m.is_valid()).cloned()
    }
}

impl Drop for CmdFile {
    fn drop(&mut self) {
        // This file's entry is the one whose weak reference is dead now.
        lock(&FILES).retain(|(_, w)| w.strong_count() > 0);
    }
}
