//! The host-wide port binding and listener table of the connection manager.
//!
//! The kernel's rdma_cm keeps, per network namespace and per port space, a list of the
//! ids bound to each port (`struct rdma_bind_list` in `drivers/infiniband/core/cma.c`),
//! so that rdma_bind_addr(3) can refuse a conflicting address, rdma_resolve_addr(3) can
//! give an active id an ephemeral port, and an incoming connection request can find the
//! id that rdma_listen(3) made a listener. rverbs has no kernel part: this table is
//! that list, shared by every process of the user through the runtime directory (the
//! one of the device, docs/device.md). It answers one question for the connection
//! manager: which endpoint process, and which id in it, listens on (port space,
//! address, port)? The kernel's own TCP and UDP ports are not consulted, as the kernel's
//! rdma_cm does not consult them either.
//!
//! # Storage
//!
//! ```text
//! <runtime>/cm/                      mode 0700
//! <runtime>/cm/lock                  flock(LOCK_EX) around check-and-create and removal
//! <runtime>/cm/<space>-<port>/       one directory per (port space, port) in use
//! <runtime>/cm/<space>-<port>/<ip>,ep<E>,pid<P>,id<I>     one file per binding
//! ```
//!
//! `<space>` is `tcp` (RDMA_PS_TCP, 0x0106), `udp` (RDMA_PS_UDP, 0x0111), `ib`
//! (RDMA_PS_IB, 0x013F), `ipoib` (RDMA_PS_IPOIB, 0x0002), else `ps` and four hex digits
//! (`ps1234`). `<ip>` is the bound address as `Ipv4Addr`/`Ipv6Addr` print it, with
//! `%<scope>` for a non-zero IPv6 scope id (`0.0.0.0`, `::`, `fe80::1%2`). Each file is
//! one text line of `key=value` words separated by single spaces:
//!
//! ```text
//! ep=3 pid=1234 id=17 listen=1 reuse=0 afonly=1 backlog=1024 addr=127.0.0.1:7174
//! ```
//!
//! `listen`, `reuse` and `afonly` are `0` or `1`; `backlog` is 0 until the binding
//! listens; `addr` is the bound socket address (`[v6%scope]:port` for IPv6). Readers
//! ignore keys they do not know. A file is written whole to a temporary file whose name
//! starts with `.` in the same directory and renamed into place, so a reader sees either
//! no entry, the old line or the new line, never a part; readers skip names starting
//! with `.`.
//!
//! **Writers** ([`Table::bind`], [`Binding::listen`], dropping a [`Binding`],
//! [`Table::reclaim`]) hold `cm/lock` exclusively (and, within one process, a mutex, as
//! flock does not exclude threads sharing an open file description) while they read a
//! port's entries, decide and write, so two processes binding the same port at once
//! cannot both win. Critical sections are a directory scan and a file or two; the
//! kernel drops the flock of a process however it dies.
//!
//! **Readers** ([`Table::lookup`], the shell helper `tests/conformance/lib/cm.bash`)
//! take no lock: they list the port's directory and read its entries.
//!
//! **Dead owners.** Every entry names its owner's endpoint and pid; `alive(ep, pid)`
//! (given to [`Table::open`]) tells whether the endpoint is still held by that process.
//! An entry whose owner is dead is never used and is removed by whoever meets it:
//! readers unlink it (safe without the lock: its name is unique to the dead owner, so
//! nobody else writes that name), writers also remove stale temporary files and empty
//! port directories (only under the lock, so a writer never loses the directory it is
//! creating an entry in). The table never depends on a dead process.
//!
//! # Conflict rule (the kernel's `cma_check_port`)
//!
//! A binding has an address, a `reuse` flag (rdma_set_option(3)
//! `RDMA_OPTION_ID_REUSEADDR`) and an `afonly` flag: always set for IPv4, as the kernel
//! sets it for every AF_INET bind; for IPv6 the caller's [`BindOpts::af_only`]
//! (`RDMA_OPTION_ID_AFONLY`, whose default is `net.ipv6.bindv6only`). A new binding N is
//! checked against each live binding C of the same port space and port:
//!
//! 1. if N asks for reuse and C has reuse, they may share the port;
//! 2. else if both are afonly and their families differ, they do not overlap;
//! 3. else if either address is a wildcard (`0.0.0.0` or `::`), the bind fails with
//!    `EADDRNOTAVAIL`;
//! 4. else if the addresses are equal (same family, same address, and for an IPv6
//!    link-local address the same scope id), it fails with `EADDRINUSE`;
//! 5. else they do not overlap.
//!
//! Rule 3 is the kernel's: it applies across families, so `0.0.0.0` also conflicts
//! with a specific IPv6 address that is not afonly, and an IPv4 address never conflicts
//! with its IPv4-mapped IPv6 form (rule 4 compares within a family). rdma_listen(3) on
//! a binding with reuse checks it again as if it did not ask for reuse and, if that
//! passes, clears its reuse flag (the kernel's `rdma_listen`: "once the ID reaches
//! RDMA_CM_LISTEN it is not allowed to be reusable any more, and has to be unique in
//! the bind list"). So, with reuse, several ids may share an address and port while
//! none listens; a listener shares its port with no overlapping binding. A binding
//! without reuse never shares with an overlapping one.
//!
//! Port 0 asks for an ephemeral port (the kernel's `cma_alloc_any_port`): starting at a
//! random port of `32768..=60999` and going up (wrapping), the first port of the port
//! space that has no live binding at all, skipping the port this table handed out last
//! (so a port just closed is not given again at once); `EADDRNOTAVAIL` when every port
//! is taken. Unlike the kernel (`cma_port_is_unique`), an ephemeral port is never shared
//! with another binding, even of another source address.
//!
//! # Lookup (the kernel's `cma_find_listener` / `cma_match_private_data`)
//!
//! A connection request to `dst` in port space `ps` reaches, among the live listeners of
//! `(ps, dst.port())`: a listener bound to exactly `dst`'s address; else the wildcard
//! of `dst`'s family; else, for an IPv4 `dst`, the IPv6 wildcard if it is not afonly
//! (IPv4-mapped). The conflict rule leaves at most one candidate, as in the kernel.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustix::fs::{flock, FlockOperation};

/// Port space RDMA_PS_IPOIB (`enum rdma_ucm_port_space` of `<rdma/rdma_cma.h>`).
pub const PS_IPOIB: u16 = 0x0002;
/// Port space RDMA_PS_TCP: reliable connected ids (rdma_create_id(3)).
pub const PS_TCP: u16 = 0x0106;
/// Port space RDMA_PS_UDP: unreliable datagram ids (rdma_create_id(3)).
pub const PS_UDP: u16 = 0x0111;
/// Port space RDMA_PS_IB: any QP type (rdma_create_id(3)).
pub const PS_IB: u16 = 0x013F;

/// The ports [`Table::bind`] picks from for port 0: the kernel's default
/// `net.ipv4.ip_local_port_range`, which the kernel's rdma_cm uses too.
pub const EPHEMERAL_PORTS: RangeInclusive<u16> = 32768..=60999;

/// The largest backlog [`Binding::listen`] keeps: the default of the kernel's
/// `net.rdma_ucm.max_backlog`; the kernel's `ucma_listen` replaces a backlog that is
/// not in `1..max_backlog` with `max_backlog`.
pub const MAX_BACKLOG: i32 = 1024;

/// `alive(ep, pid)`: whether endpoint `ep` is still owned by process `pid`.
pub type Alive = Arc<dyn Fn(u32, i32) -> bool + Send + Sync>;

/// Who owns a binding: an endpoint, its pid (endpoint numbers are reused by later
/// processes), and an id number local to that process (the connection manager's
/// number for the `rdma_cm_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The endpoint number of the owning process (docs/device.md).
    pub ep: u32,
    /// The owning process.
    pub pid: i32,
    /// The id in the owning process.
    pub id: u64,
}

/// Options of a binding, as rdma_set_option(3) sets them before rdma_bind_addr(3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindOpts {
    /// `RDMA_OPTION_ID_REUSEADDR`: may share an address and port with other ids that
    /// also ask for reuse, while none of them listens (see the module documentation).
    pub reuse_addr: bool,
    /// `RDMA_OPTION_ID_AFONLY` for an IPv6 address: the binding covers IPv6 only. If
    /// false, an IPv6 wildcard also covers IPv4 (IPv4-mapped). Ignored for IPv4, which
    /// is always afonly, as in the kernel.
    pub af_only: bool,
}

/// The host-wide binding table, in `<runtime dir>/cm` (see the module documentation).
///
/// Cheap to share: [`Binding`]s keep what they need of it alive.
pub struct Table {
    inner: Arc<Inner>,
}

struct Inner {
    /// `<runtime>/cm`.
    dir: PathBuf,
    /// `<runtime>/cm/lock`, opened by this table; the mutex excludes this process's
    /// threads, the flock other processes (and other tables).
    lock: Mutex<OwnedFd>,
    ep: u32,
    pid: i32,
    alive: Alive,
    /// The ephemeral port handed out last (0: none yet), as the kernel's
    /// `last_used_port`.
    last_port: AtomicU32,
    /// Numbers temporary file names.
    tmp_seq: AtomicU64,
}

/// One binding as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    owner: Owner,
    addr: SocketAddr,
    listen: bool,
    reuse: bool,
    afonly: bool,
    backlog: i32,
}

/// Holds `cm/lock`: the flock is released before the mutex.
struct LockGuard<'a> {
    fd: MutexGuard<'a, OwnedFd>,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        let _ = flock(&*self.fd, FlockOperation::Unlock);
    }
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("dir", &self.inner.dir)
            .field("ep", &self.inner.ep)
            .field("pid", &self.inner.pid)
            .finish_non_exhaustive()
    }
}

impl Table {
    /// Opens (creating it, mode 0700) the table in `runtime_dir` for the process that
    /// owns endpoint `ep` and has pid `pid`, and removes the entries of dead owners
    /// ([`Table::reclaim`]).
    ///
    /// `alive(ep, pid)` tells whether endpoint `ep` is still owned by process `pid`. It
    /// is called with the table's lock held, so it must not use a [`Table`]; entries of
    /// `(ep, pid)` itself are always taken as alive without asking it.
    pub fn open(runtime_dir: &Path, ep: u32, pid: i32, alive: Alive) -> io::Result<Table> {
        let dir = runtime_dir.join("cm");
        DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("lock"))?;
        let table = Table {
            inner: Arc::new(Inner {
                dir,
                lock: Mutex::new(OwnedFd::from(lock)),
                ep,
                pid,
                alive,
                last_port: AtomicU32::new(0),
                tmp_seq: AtomicU64::new(0),
            }),
        };
        table.reclaim();
        Ok(table)
    }

    /// The table's directory, `<runtime dir>/cm`.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Reserves `(ps, addr)` for id `id` of this process: rdma_bind_addr(3), or the
    /// implicit bind of rdma_resolve_addr(3) (port 0).
    ///
    /// Port 0 picks a free ephemeral port from [`EPHEMERAL_PORTS`], starting at a random
    /// point, like the kernel's `cma_alloc_any_port`; [`Binding::addr`] tells which.
    /// A non-zero port is checked against the live bindings of the port by the rule of
    /// the kernel's `cma_check_port` (module documentation). Port numbers below 1024
    /// need no privilege (the kernel asks for CAP_NET_BIND_SERVICE).
    ///
    /// # Errors
    ///
    /// `EADDRINUSE` if a binding of the same address conflicts, `EADDRNOTAVAIL` if a
    /// conflicting binding or this one is a wildcard, or no ephemeral port is free,
    /// `EINVAL` if this id already has this very binding, and I/O errors of the runtime
    /// directory. Errors are `io::Error::from_raw_os_error`, so `raw_os_error()` gives
    /// the errno rdma_bind_addr(3) would set.
    pub fn bind(&self, ps: u16, addr: SocketAddr, id: u64, opts: BindOpts) -> io::Result<Binding> {
        let inner = &self.inner;
        let afonly = addr.is_ipv4() || opts.af_only;
        let _guard = inner.lock()?;
        let mut addr = addr;
        if addr.port() == 0 {
            addr.set_port(inner.pick_port(ps)?);
        }
        let entry = Entry {
            owner: Owner {
                ep: inner.ep,
                pid: inner.pid,
                id,
            },
            addr,
            listen: false,
            reuse: opts.reuse_addr,
            afonly,
            backlog: 0,
        };
        let dir = inner.port_dir(ps, addr.port());
        let name = file_name(&entry);
        for (other, cur) in inner.scan(&dir, true) {
            if other == name {
                return Err(errno(libc::EINVAL));
            }
            check(&entry, &cur, opts.reuse_addr)?;
        }
        inner.write(&dir, &name, &entry)?;
        Ok(Binding {
            inner: Arc::clone(inner),
            ps,
            path: dir.join(name),
            state: Mutex::new(entry),
        })
    }

    /// The listening owner for a connection request to `dst` in port space `ps`: a
    /// listener bound to `dst`'s exact address first, then the wildcard of the same
    /// family (`0.0.0.0` for IPv4, `::` for IPv6), then, for an IPv4 `dst`, the IPv6
    /// wildcard unless it is afonly (the kernel's `cma_match_private_data`). Bindings
    /// that do not listen (rdma_listen(3)) are not found. Entries of dead owners are
    /// removed when met, never returned. Takes no lock.
    ///
    /// An IPv4-mapped IPv6 `dst` is an IPv6 destination here, as in the kernel (the
    /// request's header carries IP version 6); convert it first to reach IPv4
    /// listeners.
    pub fn lookup(&self, ps: u16, dst: SocketAddr) -> Option<Owner> {
        let dir = self.inner.port_dir(ps, dst.port());
        let listeners: Vec<Entry> = self
            .inner
            .scan(&dir, false)
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| e.listen)
            .collect();
        let exact = listeners.iter().find(|e| same_addr(e.addr, dst));
        let wild = || {
            listeners
                .iter()
                .find(|e| e.addr.is_ipv4() == dst.is_ipv4() && e.addr.ip().is_unspecified())
        };
        let mapped = || {
            listeners.iter().find(|e| {
                dst.is_ipv4() && e.addr.is_ipv6() && e.addr.ip().is_unspecified() && !e.afonly
            })
        };
        exact.or_else(wild).or_else(mapped).map(|e| e.owner)
    }

    /// Removes every entry whose owner is dead, stale temporary files and empty port
    /// directories. Called by [`Table::open`], and by the connection manager when it
    /// sees a peer die. Errors are ignored (the next writer or reader tries again).
    pub fn reclaim(&self) {
        let inner = &self.inner;
        let Ok(_guard) = inner.lock() else { return };
        let Ok(dirs) = fs::read_dir(&inner.dir) else {
            return;
        };
        for d in dirs.flatten() {
            if d.file_type().is_ok_and(|t| t.is_dir()) {
                let path = d.path();
                let _ = inner.scan(&path, true);
                let _ = fs::remove_dir(&path);
            }
        }
    }
}

impl Inner {
    /// Takes `cm/lock`: this process's threads, then other processes.
    fn lock(&self) -> io::Result<LockGuard<'_>> {
        let fd = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match flock(&*fd, FlockOperation::LockExclusive) {
                Ok(()) => return Ok(LockGuard { fd }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn alive(&self, ep: u32, pid: i32) -> bool {
        (ep == self.ep && pid == self.pid) || (self.alive)(ep, pid)
    }

    fn port_dir(&self, ps: u16, port: u16) -> PathBuf {
        let space = match ps {
            PS_TCP => "tcp".to_owned(),
            PS_UDP => "udp".to_owned(),
            PS_IB => "ib".to_owned(),
            PS_IPOIB => "ipoib".to_owned(),
            other => format!("ps{other:04x}"),
        };
        self.dir.join(format!("{space}-{port}"))
    }

    /// The live entries of a port directory, by file name, sorted by name. Entries of
    /// dead owners are unlinked. `locked`: the caller holds the lock, so temporary files
    /// are stale and removed too.
    fn scan(&self, dir: &Path, locked: bool) -> Vec<(String, Entry)> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(dir) else {
            return out;
        };
        for d in rd.flatten() {
            let Ok(name) = d.file_name().into_string() else {
                continue;
            };
            let path = d.path();
            if name.starts_with('.') {
                if locked {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            let Some(entry) = read_entry(&path) else {
                continue;
            };
            if self.alive(entry.owner.ep, entry.owner.pid) {
                out.push((name, entry));
            } else {
                tracing::debug!(path = %path.display(), "removing the binding of a dead owner");
                let _ = fs::remove_file(&path);
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Writes `entry` as `dir/name` (temporary file + rename). Needs the lock.
    fn write(&self, dir: &Path, name: &str, entry: &Entry) -> io::Result<()> {
        match DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".tmp-{}-{seq}", self.pid));
        let res = (|| {
            // Under the lock, a file of this name is the leftover of a crashed writer
            // that had this pid: overwrite it.
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(format_entry(entry).as_bytes())?;
            drop(f);
            fs::rename(&tmp, dir.join(name))
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res
    }

    /// A free ephemeral port of `ps` (the kernel's `cma_alloc_any_port`). Needs the
    /// lock.
    fn pick_port(&self, ps: u16) -> io::Result<u16> {
        let (low, high) = (
            u32::from(*EPHEMERAL_PORTS.start()),
            u32::from(*EPHEMERAL_PORTS.end()),
        );
        let count = high - low + 1;
        let mut h = RandomState::new().build_hasher();
        h.write_i32(self.pid);
        h.write_u64(self.tmp_seq.fetch_add(1, Ordering::Relaxed));
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        let start = (h.finish() % u64::from(count)) as u32;
        let last = self.last_port.load(Ordering::Relaxed);
        for i in 0..count {
            let port = low + (start + i) % count;
            if port == last {
                continue;
            }
            let port = port as u16;
            if self.scan(&self.port_dir(ps, port), true).is_empty() {
                self.last_port.store(u32::from(port), Ordering::Relaxed);
                return Ok(port);
            }
        }
        Err(errno(libc::EADDRNOTAVAIL))
    }
}

/// One binding in the table (rdma_bind_addr(3)); its entry is removed when it is
/// dropped (rdma_destroy_id(3) releases the port).
pub struct Binding {
    inner: Arc<Inner>,
    ps: u16,
    path: PathBuf,
    /// The entry as this process last wrote it.
    state: Mutex<Entry>,
}

impl fmt::Debug for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.entry();
        f.debug_struct("Binding")
            .field("ps", &self.ps)
            .field("addr", &e.addr)
            .field("owner", &e.owner)
            .field("listen", &e.listen)
            .field("reuse", &e.reuse)
            .field("afonly", &e.afonly)
            .finish()
    }
}

impl Binding {
    fn entry(&self) -> Entry {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bound address, with the port actually bound (the ephemeral port chosen for
    /// port 0): what rdma_get_local_addr(3) returns.
    pub fn addr(&self) -> SocketAddr {
        self.entry().addr
    }

    /// The port space (`RDMA_PS_*`, e.g. [`PS_TCP`]).
    pub fn ps(&self) -> u16 {
        self.ps
    }

    /// The owner of the binding: this process's endpoint, pid and the id given to
    /// [`Table::bind`].
    pub fn owner(&self) -> Owner {
        self.entry().owner
    }

    /// rdma_listen(3): from now on [`Table::lookup`] finds this binding.
    ///
    /// A binding made with `reuse_addr` is first checked again as if it had not asked
    /// for reuse, then loses its reuse flag, as in the kernel's `rdma_listen`: a
    /// listener shares its port with no overlapping binding. `backlog` is kept as the
    /// kernel's `ucma_listen` keeps it: a value outside `1..MAX_BACKLOG` becomes
    /// [`MAX_BACKLOG`].
    ///
    /// # Errors
    ///
    /// `EINVAL` if it already listens; `EADDRINUSE` / `EADDRNOTAVAIL` (as
    /// [`Table::bind`]) if a binding reusing the address is still there; I/O errors.
    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.listen {
            return Err(errno(libc::EINVAL));
        }
        let _guard = self.inner.lock()?;
        let dir = self.path.parent().expect("entry in a port directory");
        let name = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("UTF-8 entry name");
        if state.reuse {
            for (other, cur) in self.inner.scan(dir, true) {
                if other != name {
                    check(&state, &cur, false)?;
                }
            }
        }
        let mut next = *state;
        next.listen = true;
        next.reuse = false;
        next.backlog = if backlog > 0 && backlog < MAX_BACKLOG {
            backlog
        } else {
            MAX_BACKLOG
        };
        self.inner.write(dir, name, &next)?;
        *state = next;
        Ok(())
    }

    /// Whether [`Binding::listen`] succeeded.
    pub fn is_listening(&self) -> bool {
        self.entry().listen
    }

    /// The backlog [`Binding::listen`] kept (0 before it listens).
    pub fn backlog(&self) -> i32 {
        self.entry().backlog
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        let guard = self.inner.lock();
        if let Err(e) = fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove a binding");
            }
        }
        if guard.is_ok() {
            if let Some(dir) = self.path.parent() {
                let _ = fs::remove_dir(dir);
            }
        }
    }
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// The kernel's `cma_check_port` for one pair: may `new` be bound (or listen) while
/// `cur` is bound? `reuse`: whether `new` asks for reuse now.
fn check(new: &Entry, cur: &Entry, reuse: bool) -> io::Result<()> {
    if reuse && cur.reuse {
        return Ok(());
    }
    if new.afonly && cur.afonly && new.addr.is_ipv4() != cur.addr.is_ipv4() {
        return Ok(());
    }
    if new.addr.ip().is_unspecified() || cur.addr.ip().is_unspecified() {
        return Err(errno(libc::EADDRNOTAVAIL));
    }
    if same_addr(new.addr, cur.addr) {
        return Err(errno(libc::EADDRINUSE));
    }
    Ok(())
}

/// The kernel's `cma_addr_cmp` == 0: same family and address, and for an IPv6
/// link-local address the same scope id. Ports are not compared.
fn same_addr(a: SocketAddr, b: SocketAddr) -> bool {
    match (a, b) {
        (SocketAddr::V4(a), SocketAddr::V4(b)) => a.ip() == b.ip(),
        (SocketAddr::V6(a), SocketAddr::V6(b)) => {
            a.ip() == b.ip() && (!a.ip().is_unicast_link_local() || a.scope_id() == b.scope_id())
        }
        _ => false,
    }
}

/// `<ip>,ep<E>,pid<P>,id<I>`, unique per owner and address.
fn file_name(e: &Entry) -> String {
    let ip = match e.addr {
        SocketAddr::V6(a) if a.scope_id() != 0 => format!("{}%{}", a.ip(), a.scope_id()),
        a => a.ip().to_string(),
    };
    format!("{ip},ep{},pid{},id{}", e.owner.ep, e.owner.pid, e.owner.id)
}

fn format_entry(e: &Entry) -> String {
    format!(
        "ep={} pid={} id={} listen={} reuse={} afonly={} backlog={} addr={}\n",
        e.owner.ep,
        e.owner.pid,
        e.owner.id,
        u8::from(e.listen),
        u8::from(e.reuse),
        u8::from(e.afonly),
        e.backlog,
        e.addr,
    )
}

fn parse_entry(line: &str) -> Option<Entry> {
    let (mut ep, mut pid, mut id, mut addr) = (None, None, None, None);
    let (mut listen, mut reuse, mut afonly, mut backlog) = (false, false, false, 0);
    let flag = |v: &str| match v {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    };
    for word in line.split_whitespace() {
        let (k, v) = word.split_once('=')?;
        match k {
            "ep" => ep = Some(v.parse().ok()?),
            "pid" => pid = Some(v.parse().ok()?),
            "id" => id = Some(v.parse().ok()?),
            "addr" => addr = Some(v.parse::<SocketAddr>().ok()?),
            "listen" => listen = flag(v)?,
            "reuse" => reuse = flag(v)?,
            "afonly" => afonly = flag(v)?,
            "backlog" => backlog = v.parse().ok()?,
            _ => {}
        }
    }
    let addr = addr?;
    Some(Entry {
        owner: Owner {
            ep: ep?,
            pid: pid?,
            id: id?,
        },
        addr,
        listen,
        reuse,
        // IPv4 is afonly whatever the file says.
        afonly: afonly || matches!(addr.ip(), IpAddr::V4(_)),
        backlog,
    })
}

fn read_entry(path: &Path) -> Option<Entry> {
    let mut text = String::new();
    File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    parse_entry(text.lines().next()?)
}
