//! The host-wide endpoint registry: which processes take part in the device, and how to
//! reach them.
//!
//! Every process claims an endpoint number N (0..=255) by holding an exclusive `flock`
//! on `<runtime dir>/ep-N.lock` for its whole life; the kernel releases it when the
//! process dies, however it dies, so a lock that can be taken means the endpoint is
//! free. The endpoint's segments and FIFOs live in `<runtime dir>/ep-N/`, and its
//! header segment `hdr` records the owner's pid. QP and SRQ numbers carry N in their top
//! 8 bits (`crate::table`), so a peer knowing only (GID, QPN) finds the process.
//!
//! Claiming also reclaims: directories of endpoints whose lock is free are removed, so
//! the memory a crashed process left in tmpfs is returned.
//!
//! Peers are watched through a pidfd each (the progress thread polls them: the device
//! gives the registry the progress thread's `watch_peer` when it claims the endpoint); a
//! dead peer is marked at once, and requests towards it go unanswered, so RC requesters
//! end in RETRY_EXC_ERR after their timeout and retry count, never in a hang.
//!
//! Each endpoint also has a doorbell ([`bell`]): a FIFO in its directory that peers write
//! records to, read by the endpoint's progress thread.
//!
//! The header also publishes, per local IP address, the UDP port the endpoint's network
//! transport sends from when another process owns that address's RoCEv2 port
//! ([`Registry::publish_net_port`], [`Peer::net_port`]): the owner relays the endpoint's
//! RC/UC packets there (`crate::transport::udp`). The entries go with the header, so they
//! are reclaimed with the endpoint.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{FlockOperation, Mode, OFlags};

use super::Segment;
use crate::error::{Error, Result};

/// Endpoints one host can have (`limits::MAX_ENDPOINTS`).
pub(crate) const MAX_ENDPOINTS: u32 = crate::limits::MAX_ENDPOINTS;

const HDR_MAGIC: u64 = 0x7276_6572_6273_0001; // "rverbs" v1

/// A word of this process whose address and value the endpoint header publishes.
static CANARY: AtomicU64 = AtomicU64::new(0x6361_6e61_7279_2121);
/// Where the header's table of network ports starts, and its entries: 4 words each, the
/// address (16 bytes, IPv4 as IPv4-mapped IPv6), the network namespace, and last the tag
/// (`PORT_VALID | family << 16 | port`, 0 while the entry is free).
const PORTS_OFF: usize = 64;
/// Where the header counts the accesses this endpoint has in progress through
/// cross-memory attach into other processes' memory ([`Registry::cma_accesses`]).
const CMA_ACCESSES_OFF: usize = 40;
const _: () = assert!(CMA_ACCESSES_OFF + 8 <= PORTS_OFF);
/// Addresses whose port one endpoint can publish (more are not relayed to).
const MAX_NET_PORTS: usize = 32;
const PORT_WORDS: usize = 4;
const PORT_VALID: u64 = 1 << 32;
const HDR_LEN: usize = PORTS_OFF + MAX_NET_PORTS * PORT_WORDS * 8;

/// Held while this process removes a dead endpoint's directory, so that the sweep at
/// exit ([`Registry::reclaim_dead`]) does not race a reclaim of the progress thread
/// ([`Registry::forget`]) that exit would cut short, leaving part of the directory (the
/// kill harness found such remains, 2–7 files, about 1 round in 400).
static RECLAIMING: Mutex<()> = Mutex::new(());

/// What the registry calls with each peer it maps first (the progress thread's
/// `watch_peer` of the device).
type WatchPeer = Box<dyn Fn(&Arc<Peer>) + Send + Sync>;

/// An endpoint of this process (one per device).
pub(crate) struct Registry {
    pub(crate) ep: u32,
    /// The pid the endpoint header names: the process that claimed the endpoint (a
    /// forked child acting with its parent's objects acts as it).
    pub(crate) pid: u32,
    pub(crate) root: PathBuf,
    pub(crate) dir: PathBuf,
    /// `RVERBS_CMA=off`: peers must not use cross-memory attach on this process (the
    /// header says so to them).
    pub(crate) refuses_cma: bool,
    _lock: OwnedFd,
    hdr: Segment,
    peers: Mutex<HashMap<u32, Arc<Peer>>>,
    /// Called with each peer when it is first mapped, to watch its death (the progress
    /// thread's; given at [`Registry::claim`], so the registry does not reach up to it).
    watch: WatchPeer,
    /// Segments this endpoint keeps for its peers, shared with every [`Peer`].
    home: Arc<HomeSegments>,
}

/// Segments in this endpoint's directory that it keeps for its peers (the proxy channels
/// of `crate::mr::proxy`), by name, each used by one thread at a time. They live as long
/// as the endpoint: a later process on a dead peer's endpoint number gets the same one.
struct HomeSegments {
    dir: PathBuf,
    map: Mutex<HashMap<String, Arc<Mutex<Segment>>>>,
}

impl HomeSegments {
    /// Segment `name` (`len` bytes, created zero-filled on first use).
    fn get(&self, name: &str, len: usize) -> Result<Arc<Mutex<Segment>>> {
        let mut m = self.map.lock().expect("home segments");
        if let Some(s) = m.get(name) {
            return Ok(s.clone());
        }
        let seg = Arc::new(Mutex::new(Segment::create(&self.dir.join(name), len)?));
        m.insert(name.to_owned(), seg.clone());
        Ok(seg)
    }
}

/// Doorbell records, `[kind: u32, arg: u32]`, written to an endpoint's FIFO [`bell::NAME`]
/// ([`Peer::ring`]) and read by its progress thread.
pub(crate) mod bell {
    /// A peer changed QP `arg` of this process: run its send queue (flush on ERR).
    pub(crate) const KICK_QP: u32 = 1;
    /// Endpoint `arg` queued a copy in its proxy channel to this process
    /// (`crate::mr::proxy`).
    pub(crate) const PROXY: u32 = 2;
    /// Bytes of one record.
    pub(crate) const LEN: usize = 8;
    /// Name of the doorbell FIFO in the endpoint directory.
    pub(crate) const NAME: &str = "bell";

    pub(crate) fn record(kind: u32, arg: u32) -> [u8; LEN] {
        let mut r = [0u8; LEN];
        r[..4].copy_from_slice(&kind.to_ne_bytes());
        r[4..].copy_from_slice(&arg.to_ne_bytes());
        r
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("ep", &self.ep).field("dir", &self.dir).finish()
    }
}

fn lock_path(root: &Path, ep: u32) -> PathBuf {
    root.join(format!("ep-{ep}.lock"))
}

/// The directory of endpoint `ep`.
pub(crate) fn ep_dir(root: &Path, ep: u32) -> PathBuf {
    root.join(format!("ep-{ep}"))
}

/// What [`probe_lock`] found at an endpoint's lock file.
enum Probe {
    /// No lock file: the endpoint number was never claimed in this runtime directory.
    Absent,
    /// A live process holds the lock.
    Held,
    /// Nobody holds it (its owner died); held by the returned descriptor until dropped.
    Free(OwnedFd),
}

/// How long the exit sweep waits for the lock of a dead endpoint that is still held (by a
/// forked child that has not run yet: [`Registry::reclaim_dead`]).
const FORKED_CHILD_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether the process the endpoint header in `dir` names is gone (`false` when the
/// header cannot be read or names no process: nothing is known).
fn header_pid_dead(dir: &Path) -> bool {
    header_pid(dir).is_some_and(process_gone)
}

/// Whether process `pid` no longer exists (signal 0 says ESRCH).
fn process_gone(pid: rustix::process::Pid) -> bool {
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}

/// The pid the endpoint header in `dir` names, read from the file now (not from a
/// mapping: a later owner of the number writes a new file); `None` when the header cannot
/// be read or names no process (not written yet).
fn header_pid(dir: &Path) -> Option<rustix::process::Pid> {
    i32::try_from(header_word(dir, 8)?).ok().and_then(rustix::process::Pid::from_raw)
}

/// The word at byte `at` of the endpoint header in `dir`, read from the file now;
/// `None` when the header cannot be read.
fn header_word(dir: &Path, at: usize) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    let f = std::fs::File::open(dir.join("hdr")).ok()?;
    f.read_exact_at(&mut b, at as u64).ok()?;
    Some(u64::from_ne_bytes(b))
}

/// Whether the process of `pidfd` has exited (the pidfd is readable, pidfd_open(2)),
/// asked now.
fn pidfd_exited(pidfd: std::os::fd::BorrowedFd<'_>) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

/// Tries the lock at `path` without ever creating the file.
///
/// Rule: asking whether an endpoint is alive, or reclaiming a dead one, must not change
/// the runtime directory: the endpoint number comes from a QPN, which any datagram from
/// the network can name (`transport::udp` asks about the endpoint of every packet it
/// might relay). Only [`Registry::claim`] creates lock files.
fn probe_lock(path: &Path) -> Result<Probe> {
    let fd = match rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Probe::Absent),
        Err(e) => return Err(e.into()),
    };
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Probe::Free(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(Probe::Held),
        Err(e) => Err(e.into()),
    }
}

/// Takes the lock at `path`, creating the file (claiming only).
fn try_lock(path: &Path) -> Result<Option<OwnedFd>> {
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The live endpoints under `root`, lowest number first, each with the pid its header
/// names: the number's lock is held, the header written and its process there. Asked
/// without claiming a number or creating a file (`probe_lock`), for readers that are no
/// endpoint themselves (`rverbs stat`, [`crate::host_counters`]).
pub(crate) fn live_endpoints(root: &Path) -> Vec<(u32, u32)> {
    (0..MAX_ENDPOINTS)
        .filter_map(|ep| {
            if !matches!(probe_lock(&lock_path(root, ep)), Ok(Probe::Held)) {
                return None;
            }
            let pid = header_pid(&ep_dir(root, ep))?;
            (!process_gone(pid)).then(|| (ep, pid.as_raw_nonzero().get() as u32))
        })
        .collect()
}

impl Registry {
    /// Claims the lowest free endpoint number under `root` (created if missing); `watch`
    /// is called with every peer when it is first mapped. `refuses_cma`: peers must not
    /// use cross-memory attach on this process (`RVERBS_CMA=off`), published in the header.
    pub(crate) fn claim(root: &Path, refuses_cma: bool, watch: impl Fn(&Arc<Peer>) + Send + Sync + 'static) -> Result<Registry> {
        std::fs::create_dir_all(root)?;
        let _ = std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        let mut mine: Option<(u32, OwnedFd)> = None;
        for ep in 0..MAX_ENDPOINTS {
            let path = lock_path(root, ep);
            let dir = ep_dir(root, ep);
            // Endpoints that never existed have no lock file: nothing to check.
            if mine.is_some() && !path.exists() {
                continue;
            }
            let Some(fd) = try_lock(&path)? else { continue };
            // Free: whatever its directory holds belongs to a dead process.
            let _ = std::fs::remove_dir_all(&dir);
            if mine.is_none() {
                mine = Some((ep, fd));
            }
            // Other free endpoints are unlocked again when `fd` drops.
        }
        let (ep, lock) = mine.ok_or(Error::Exhausted { what: "endpoints on this host" })?;
        Self::claimed(root, ep, lock, refuses_cma, Box::new(watch))
    }

    /// Removes the directory of every endpoint under `root` whose lock is free: what
    /// processes that died left there. Run at normal exit (`device`'s `atexit` hook), so
    /// that a peer killed before this process ever reached it (its pidfd never watched:
    /// `Registry::forget` never runs for it) leaves nothing once the last process of the
    /// device has exited; [`Registry::claim`] does the same on the way in. Taking the
    /// lock first makes it safe against a process claiming the number meanwhile.
    pub(crate) fn reclaim_dead(root: &Path) {
        // Waits for a reclaim the progress thread is doing (it holds that endpoint's lock,
        // so this sweep would skip it, and exit would stop the thread half-way through).
        let _one_at_a_time = RECLAIMING.lock().unwrap_or_else(|p| p.into_inner());
        for ep in 0..MAX_ENDPOINTS {
            let path = lock_path(root, ep);
            // Endpoints that never existed have no lock file (`Probe::Absent`).
            // No logging here: this runs in an atexit handler, after the thread-locals
            // of the main thread are gone (tracing's would panic, and abort).
            match probe_lock(&path) {
                Ok(Probe::Free(_lock)) => {
                    let _ = std::fs::remove_dir_all(ep_dir(root, ep));
                }
                Ok(Probe::Held) if header_pid_dead(&ep_dir(root, ep)) => {
                    // The owner is dead but the lock is held: by a child it forked that
                    // has not run yet (it drops its inherited copy of the lock first
                    // thing, `sys::release_in_children`; on a busy machine a new process
                    // can wait long for a CPU), or by a process claiming the number right
                    // now (which removes the directory itself). Give the child a moment;
                    // never remove while the lock is held.
                    let until = std::time::Instant::now() + FORKED_CHILD_GRACE;
                    while std::time::Instant::now() < until {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        if let Ok(Probe::Free(_lock)) = probe_lock(&path) {
                            let _ = std::fs::remove_dir_all(ep_dir(root, ep));
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The rest of [`Registry::claim`], once endpoint `ep` is locked.
    fn claimed(root: &Path, ep: u32, lock: OwnedFd, refuses_cma: bool, watch: WatchPeer) -> Result<Registry> {
        // The lock is this process's alone: a forked child must not hold it (it would
        // keep this endpoint "alive" after this process died).
        crate::sys::release_in_children(lock.as_fd());
        let dir = ep_dir(root, ep);
        // Owner only, like the runtime directory and every file in it (should the
        // runtime directory's mode be opened up, other users still find nothing).
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&dir)?;
        let hdr = Segment::create(&dir.join("hdr"), HDR_LEN)?;
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        hdr.get::<AtomicU64>(8).store(u64::from(pid), Ordering::Release);
        // The canary peers read with cross-memory attach to learn whether the kernel
        // lets them (ptrace access rules differ between pairs of processes).
        hdr.get::<AtomicU64>(16).store(&CANARY as *const AtomicU64 as u64, Ordering::Release);
        hdr.get::<AtomicU64>(24).store(CANARY.load(Ordering::Relaxed), Ordering::Release);
        hdr.get::<AtomicU64>(32).store(u64::from(refuses_cma), Ordering::Release);
        hdr.get::<AtomicU64>(0).store(HDR_MAGIC, Ordering::Release);
        let home = Arc::new(HomeSegments { dir: dir.clone(), map: Mutex::new(HashMap::new()) });
        Ok(Registry { ep, pid, root: root.to_owned(), dir, refuses_cma, _lock: lock, hdr, peers: Mutex::new(HashMap::new()), watch, home })
    }

    /// Publishes that this endpoint receives relayed RoCEv2 packets for local address `ip`
    /// on UDP port `port` of network namespace `netns` (`crate::transport::udp`). Each
    /// address is published once, at device start; `false` when the table is full.
    ///
    /// Rule: the entry's tag is written last (Release), so a peer that reads a valid tag
    /// (Acquire) reads the whole entry.
    pub(crate) fn publish_net_port(&self, netns: u64, ip: IpAddr, port: u16) -> bool {
        publish_in(self.hdr.slice::<AtomicU64>(0, HDR_WORDS), netns, ip, port)
    }

    /// Whether endpoint `ep` is alive: this process, a known live peer, or an endpoint
    /// whose lock is held.
    pub(crate) fn alive(&self, ep: u32) -> bool {
        if ep == self.ep {
            return true;
        }
        if let Some(p) = self.peers.lock().expect("peers").get(&ep) {
            // The flag is cleared by the progress thread when the pidfd fires; asked
            // here by a `ShmLock` waiter, which may be that very thread (spinning on a
            // lock the dead peer held: it would wait for itself), so ask the pidfd too.
            if p.is_alive() && p.exited() {
                p.alive.store(false, Ordering::Release);
            }
            return p.is_alive();
        }
        // Free (we could take it; released on drop), absent or unreadable: not alive.
        matches!(probe_lock(&lock_path(&self.root, ep)), Ok(Probe::Held))
    }

    /// This endpoint's count of the accesses it has in progress through cross-memory
    /// attach into another process's memory (`mr::keyspace`: counted before the access
    /// counts in the region's record, uncounted after it left it). The owner of a region
    /// whose accesses do not drain reads it to tell a peer stopped in the middle of one
    /// from one that died there ([`Registry::accessor_stopped`]).
    pub(crate) fn cma_accesses(&self) -> &AtomicU64 {
        self.hdr.get::<AtomicU64>(CMA_ACCESSES_OFF)
    }

    /// Whether the process of another endpoint of the host is stopped (a signal, a
    /// debugger) while it may be in the middle of an access to this process's memory: it
    /// has an access in progress through cross-memory attach (its header's count), or it
    /// maps a segment of this endpoint's region memory (`mr-*`, which it reaches with plain
    /// stores). Such a process goes on with the access when it runs again, so a count of
    /// accesses that does not drain must be waited for while this holds (a process that
    /// maps a region and is stopped elsewhere is waited for too: the question is asked
    /// only of a count that did not drain in its bound). Read from the header files and
    /// `/proc/<pid>/maps` (asked only once a wait reached its bound).
    pub(crate) fn accessor_stopped(&self) -> bool {
        let Ok(dirs) = std::fs::read_dir(&self.root) else { return false };
        let regions = format!("{}/mr-", self.dir.display());
        dirs.flatten().filter_map(|e| e.file_name().to_str()?.strip_prefix("ep-")?.parse::<u32>().ok()).any(|ep| {
            let Some(pid) = self.stopped_pid(ep) else { return false };
            header_word(&ep_dir(&self.root, ep), CMA_ACCESSES_OFF).is_some_and(|n| n != 0)
                || std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.lines().any(|l| l.contains(&regions)))
        })
    }

    /// Whether the process that owns endpoint `ep` (another than this one; its header
    /// names it) is stopped now, by a signal or a debugger (`sys::process_stopped`): it
    /// goes on from where it stopped when it runs again.
    pub(crate) fn stopped(&self, ep: u32) -> bool {
        self.stopped_pid(ep).is_some()
    }

    /// The pid of endpoint `ep`'s process if it is another than this one and stopped now
    /// ([`Registry::stopped`]).
    fn stopped_pid(&self, ep: u32) -> Option<i32> {
        if ep == self.ep || ep >= MAX_ENDPOINTS {
            return None;
        }
        let pid = header_pid(&ep_dir(&self.root, ep))?.as_raw_nonzero().get();
        crate::sys::process_stopped(pid).then_some(pid)
    }

    /// Whether process `pid` is alive as the owner of endpoint `ep`: for this endpoint,
    /// whether `pid` is this process; for another, whether the host says `pid` owns it
    /// now ([`Registry::owner`]: the number locked, its header naming `pid`, `pid` not
    /// exited; a word another process of the same number left says it is dead). Asked of
    /// the host, not of the mapped peers: a number reused by a process still starting
    /// has no mapping yet, and counting that as the old owner alive kept a killed XRC
    /// domain holder alive. When the header cannot be read while the number is held,
    /// alive: the answer decides whether a CQ may skip that process's reservation, and a
    /// wrong "dead" loses a completion, a wrong "alive" only delays. A process that no
    /// longer exists is dead whatever its number says: a killed XRC domain holder was
    /// kept alive by a test process claiming its number before writing its header.
    pub(crate) fn owner_alive(&self, ep: u32, pid: u32) -> bool {
        if ep == self.ep {
            return pid == self.pid;
        }
        if i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw).is_some_and(process_gone) {
            return false;
        }
        if header_pid(&ep_dir(&self.root, ep)).is_none() {
            return self.alive(ep);
        }
        self.owner(ep).is_some_and(|(owner, _)| owner as u32 == pid)
    }

    /// The process that owns endpoint `ep` (another than this one) now: its pid and a
    /// pidfd of it (pidfd_open(2)); `None` if nobody does.
    ///
    /// Rule: asked of the host, not of the mapped peers. Endpoint numbers are reused (the
    /// next process to claim one takes the lowest free number), and a mapped peer is
    /// marked dead only when the progress thread gets to its pidfd, which on a busy host
    /// can come after the next process took the number and sent this one a MAD. The
    /// owner writes its pid into its header before it can send anything, so the header
    /// file names it; the answer holds if, after the pidfd was opened, the number is
    /// still locked, the process has not exited and the header still names it. The
    /// mapped peers are left as they are (their death stays the progress thread's).
    pub(crate) fn owner(&self, ep: u32) -> Option<(i32, OwnedFd)> {
        if ep == self.ep || ep >= MAX_ENDPOINTS {
            return None;
        }
        let dir = ep_dir(&self.root, ep);
        let pid = header_pid(&dir)?;
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
        let owns = self.alive_unlocked(ep) && !pidfd_exited(pidfd.as_fd()) && header_pid(&dir) == Some(pid);
        owns.then(|| (pid.as_raw_nonzero().get(), pidfd))
    }

    /// Makes this endpoint's header name `pid` (tests: the number as another process,
    /// one that exits, holds it).
    #[cfg(test)]
    pub(crate) fn set_header_pid(&self, pid: u32) {
        self.hdr.get::<AtomicU64>(8).store(u64::from(pid), Ordering::Release);
    }

    /// The live peer `ep`, mapped on first use.
    pub(crate) fn peer(&self, ep: u32) -> Result<Arc<Peer>> {
        let mut peers = self.peers.lock().expect("peers");
        if let Some(p) = peers.get(&ep) {
            if p.is_alive() {
                return Ok(p.clone());
            }
            peers.remove(&ep);
        }
        if ep == self.ep || ep >= MAX_ENDPOINTS || !self.alive_unlocked(ep) {
            return Err(Error::Again { verb: "reach peer", why: "no such endpoint" });
        }
        let dir = ep_dir(&self.root, ep);
        let hdr = Segment::open(&dir.join("hdr"))?;
        if hdr.len() < HDR_LEN {
            return Err(Error::Bug("peer endpoint header too short"));
        }
        let info = header_info(hdr.slice::<AtomicU64>(0, HDR_LEN / 8))?;
        let pid = info.pid;
        let pidfd = rustix::process::Pid::from_raw(pid)
            .ok_or(Error::Bug("bad pid in endpoint header"))
            .and_then(|p| Ok(rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())?))?;
        // The pid could have been reused between the header read and pidfd_open; the
        // endpoint lock being still held after pidfd_open proves the owner is alive.
        if !self.alive_unlocked(ep) {
            return Err(Error::Again { verb: "reach peer", why: "endpoint died" });
        }
        let tables = super::tables::Tables::open(&dir)?;
        let cma = !info.refuses_cma && probe_cma(pid, info.canary);
        if !cma {
            tracing::info!(ep, pid, "cross-memory attach to this peer is refused: its private memory is reached through it (proxy)");
        }
        let peer = Arc::new(Peer {
            ep,
            pid,
            cma,
            tables,
            hdr,
            dir,
            alive: AtomicBool::new(true),
            pidfd,
            segments: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            home_ep: self.ep,
            home_pid: self.pid,
            home: self.home.clone(),
        });
        peers.insert(ep, peer.clone());
        (self.watch)(&peer);
        Ok(peer)
    }

    fn alive_unlocked(&self, ep: u32) -> bool {
        matches!(probe_lock(&lock_path(&self.root, ep)), Ok(Probe::Held))
    }

    /// Forgets a peer that died and returns what it left in the runtime directory
    /// (called by the progress thread when the peer's pidfd fires).
    pub(crate) fn forget(&self, ep: u32) {
        let mut peers = self.peers.lock().expect("peers");
        // The death names a number only: a peer mapped under it that owns it now is
        // the number's next owner, and the death was its predecessor's.
        if peers.get(&ep).is_some_and(|p| self.owns_now(p)) {
            return;
        }
        if let Some(p) = peers.remove(&ep) {
            p.alive.store(false, Ordering::Release);
        }
        drop(peers);
        self.reclaim(ep);
    }

    /// Whether mapped peer `p` owns its number now: its process has not exited and the
    /// number's lock is held (by it: a process holds its number until it exits).
    pub(crate) fn owns_now(&self, p: &Peer) -> bool {
        !p.exited() && matches!(probe_lock(&lock_path(&self.root, p.ep)), Ok(Probe::Held))
    }

    /// Removes the directory of endpoint `ep` if its lock is free (its owner is dead and
    /// nobody claimed the number since). Mappings peers still hold stay valid: the files
    /// go, the memory goes with the last mapping.
    pub(crate) fn reclaim(&self, ep: u32) {
        if ep == self.ep {
            return;
        }
        let _one_at_a_time = RECLAIMING.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(Probe::Free(_lock)) = probe_lock(&lock_path(&self.root, ep)) {
            let _ = std::fs::remove_dir_all(ep_dir(&self.root, ep));
        }
    }
}

/// `ip` as the table of network ports stores it: (family 4 or 6, the address as
/// IPv4-mapped IPv6 in two big-endian words).
fn ip_words(ip: IpAddr) -> (u64, u64, u64) {
    let (family, octets) = match ip {
        IpAddr::V4(v4) => (4, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (6, v6.octets()),
    };
    let hi = u64::from_be_bytes(octets[..8].try_into().expect("8 bytes"));
    let lo = u64::from_be_bytes(octets[8..].try_into().expect("8 bytes"));
    (family, hi, lo)
}

/// Words of an endpoint header.
pub(crate) const HDR_WORDS: usize = HDR_LEN / 8;

/// What a peer's endpoint header says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeaderInfo {
    /// Its process (not checked here: `pidfd_open` refuses a pid that names nobody).
    pub(crate) pid: i32,
    /// The canary's address and value in its memory (`probe_cma`).
    pub(crate) canary: (u64, u64),
    /// It refuses cross-memory attach (`RVERBS_CMA=off`).
    pub(crate) refuses_cma: bool,
}

/// Reads a peer's endpoint header `words` (at least [`HDR_WORDS`]; another process
/// wrote them): `Again` while its magic is not there yet, `Bug` for a header too short
/// or a pid no process can have.
pub(crate) fn header_info(words: &[AtomicU64]) -> Result<HeaderInfo> {
    if words.len() < HDR_WORDS {
        return Err(Error::Bug("peer endpoint header too short"));
    }
    if words[0].load(Ordering::Acquire) != HDR_MAGIC {
        return Err(Error::Again { verb: "reach peer", why: "endpoint still starting" });
    }
    let pid = i32::try_from(words[1].load(Ordering::Acquire))
        .ok()
        .filter(|&p| p > 0)
        .ok_or(Error::Bug("bad pid in endpoint header"))?;
    Ok(HeaderInfo {
        pid,
        canary: (words[2].load(Ordering::Acquire), words[3].load(Ordering::Acquire)),
        refuses_cma: words[4].load(Ordering::Acquire) & 1 != 0,
    })
}

/// Publishes `port` for `ip` in `netns` in the first free entry of the header `words`
/// ([`Registry::publish_net_port`]); `false` when the table is full.
pub(crate) fn publish_in(words: &[AtomicU64], netns: u64, ip: IpAddr, port: u16) -> bool {
    let (family, hi, lo) = ip_words(ip);
    let Some(table) = words.get(PORTS_OFF / 8..HDR_WORDS) else { return false };
    for e in table.chunks_exact(PORT_WORDS) {
        if e[3].load(Ordering::Acquire) != 0 {
            continue;
        }
        e[0].store(hi, Ordering::Relaxed);
        e[1].store(lo, Ordering::Relaxed);
        e[2].store(netns, Ordering::Relaxed);
        e[3].store(PORT_VALID | family << 16 | u64::from(port), Ordering::Release);
        return true;
    }
    false
}

/// The UDP port a peer's endpoint header `words` publishes for local address `ip` in
/// network namespace `netns` ([`Peer::net_port`]); never 0 (a peer could write garbage:
/// port 0 names no socket).
pub(crate) fn find_net_port(words: &[AtomicU64], netns: u64, ip: IpAddr) -> Option<u16> {
    let (family, hi, lo) = ip_words(ip);
    let table = words.get(PORTS_OFF / 8..HDR_WORDS)?;
    table.chunks_exact(PORT_WORDS).find_map(|e| {
        let tag = e[3].load(Ordering::Acquire);
        let same = tag & PORT_VALID != 0
            && (tag >> 16) & 0xffff == family
            && e[0].load(Ordering::Relaxed) == hi
            && e[1].load(Ordering::Relaxed) == lo
            && e[2].load(Ordering::Relaxed) == netns;
        (same && tag & 0xffff != 0).then_some(tag as u16)
    })
}

/// Whether process_vm_readv(2) on `pid` works, reading its published canary `(addr,
/// value)`. If the kernel refuses (EPERM: Yama `ptrace_scope`, a non-dumpable peer, no
/// ptrace rights), or the peer refuses with `RVERBS_CMA=off`, the peer's private memory
/// is reached through the peer instead (`crate::mr::proxy`).
fn probe_cma(pid: i32, (addr, value): (u64, u64)) -> bool {
    let mut got = [0u8; 8];
    // SAFETY: `got` is a live 8-byte buffer of this process.
    let r = unsafe { crate::shm::cma::read(pid, got.as_mut_ptr(), addr as usize, 8) };
    r.is_ok() && u64::from_ne_bytes(got) == value
}

/// Another process of the device, as this process reaches it.
pub(crate) struct Peer {
    pub(crate) ep: u32,
    pub(crate) pid: i32,
    /// Whether this process may use cross-memory attach on the peer: the kernel allows it
    /// (probed when the peer is first reached) and the peer did not refuse it
    /// (`RVERBS_CMA=off` in the peer).
    pub(crate) cma: bool,
    tables: super::tables::Tables,
    /// The peer's header segment (its published network ports).
    hdr: Segment,
    dir: PathBuf,
    alive: AtomicBool,
    pidfd: OwnedFd,
    segments: Mutex<HashMap<String, Arc<Segment>>>,
    writers: Mutex<HashMap<String, Arc<OwnedFd>>>,
    /// The endpoint of this process, which reaches the peer, and the pid its header names.
    home_ep: u32,
    home_pid: u32,
    /// The segments this process keeps for its peers.
    home: Arc<HomeSegments>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("ep", &self.ep).field("pid", &self.pid).finish()
    }
}

impl Peer {
    /// Whether the peer is alive and its shared state readable: a peer that truncated
    /// its tables or header under this process's mappings (which now read as zeros,
    /// `fault.rs`) is treated as gone.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.tables.poisoned() && !self.hdr.poisoned()
    }

    pub(crate) fn mark_dead(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// The UDP port on which the peer receives relayed RoCEv2 packets for local address
    /// `ip` in network namespace `netns`, as it published it
    /// ([`Registry::publish_net_port`]); `None` if it published none.
    pub(crate) fn net_port(&self, netns: u64, ip: IpAddr) -> Option<u16> {
        find_net_port(self.hdr.slice::<AtomicU64>(0, HDR_LEN / 8), netns, ip)
    }

    /// The peer's shared tables.
    pub(crate) fn tables(&self) -> &super::tables::Tables {
        &self.tables
    }

    /// Whether the peer's process has exited (its pidfd is readable), asked now.
    pub(crate) fn exited(&self) -> bool {
        pidfd_exited(self.pidfd.as_fd())
    }

    pub(crate) fn pidfd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The peer's segment `name`, mapped once and cached.
    pub(crate) fn segment(&self, name: &str) -> Result<Arc<Segment>> {
        let mut s = self.segments.lock().expect("peer segments");
        if let Some(seg) = s.get(name) {
            return Ok(seg.clone());
        }
        let seg = Arc::new(Segment::open(&self.dir.join(name))?);
        s.insert(name.to_owned(), seg.clone());
        Ok(seg)
    }

    /// Forgets a cached segment (the peer replaced it, e.g. a resized CQ).
    pub(crate) fn drop_segment(&self, name: &str) {
        self.segments.lock().expect("peer segments").remove(name);
    }

    /// A write descriptor on the peer's FIFO `name`, opened once and cached.
    pub(crate) fn writer(&self, name: &str) -> Result<Arc<OwnedFd>> {
        let mut w = self.writers.lock().expect("peer fifos");
        if let Some(fd) = w.get(name) {
            return Ok(fd.clone());
        }
        let fd = Arc::new(super::fifo::open_writer(&self.dir.join(name))?);
        w.insert(name.to_owned(), fd.clone());
        Ok(fd)
    }

    /// The endpoint number of this process (the one reaching the peer).
    pub(crate) fn home_ep(&self) -> u32 {
        self.home_ep
    }

    /// The pid of the endpoint that reaches the peer, as its header names it.
    pub(crate) fn home_pid(&self) -> u32 {
        self.home_pid
    }

    /// The segment `name` this process keeps for the peer in its own directory (`len`
    /// bytes, created on first use and kept for the endpoint's life).
    pub(crate) fn home_segment(&self, name: &str, len: usize) -> Result<Arc<Mutex<Segment>>> {
        self.home.get(name, len)
    }

    /// Rings the peer's doorbell with a `kind` record about `arg` (lost if the peer's
    /// FIFO cannot be opened: the peer is gone).
    pub(crate) fn ring(&self, kind: u32, arg: u32) {
        if let Ok(fd) = self.writer(bell::NAME) {
            super::fifo::send_on(fd.as_fd(), &bell::record(kind, arg));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("rverbs-reg-{tag}-{}", std::process::id()))
    }

    #[test]
    fn endpoints_are_exclusive_and_released_with_their_lock() {
        let r = root("excl");
        let a = Registry::claim(&r, false, |_| {}).unwrap();
        let b = Registry::claim(&r, false, |_| {}).unwrap();
        assert_ne!(a.ep, b.ep);
        assert!(a.alive(b.ep));
        assert!(b.dir.join("hdr").exists());
        // Hostile-segment harness, other-user check: the endpoint directory was created
        // with the umask's mode (0755), not owner-only.
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&b.dir).unwrap().permissions().mode() & 0o777, 0o700);
        let (ep_b, dir_b) = (b.ep, b.dir.clone());
        drop(b);
        assert!(!a.alive(ep_b), "a released lock means a dead endpoint");
        // The next claim reuses the number and clears what the dead one left.
        std::fs::write(dir_b.join("stale"), b"x").unwrap();
        let c = Registry::claim(&r, false, |_| {}).unwrap();
        assert_eq!(c.ep, ep_b);
        assert!(!dir_b.join("stale").exists());
        drop((a, c));
        std::fs::remove_dir_all(&r).unwrap();
    }

    /// Asking about endpoint numbers that were never claimed (a QPN from the network
    /// names any of 0..=255) answers "not alive" and leaves the runtime directory as it
    /// was: no `ep-N.lock` is created by `alive`, `peer` or `reclaim` (hostile-network
    /// defect 5: 2 lock files before a run, 106 after).
    #[test]
    fn asking_about_endpoints_that_never_existed_creates_no_file() {
        let r = root("probe");
        let a = Registry::claim(&r, false, |_| {}).unwrap();
        let listing = || {
            let mut v: Vec<String> = std::fs::read_dir(&r).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            v.sort();
            v
        };
        let before = listing();
        for ep in (0..MAX_ENDPOINTS).filter(|&ep| ep != a.ep) {
            assert!(!a.alive(ep), "endpoint {ep} never existed");
            assert!(a.peer(ep).is_err());
            a.reclaim(ep);
        }
        assert!(!a.alive(MAX_ENDPOINTS + 7));
        assert_eq!(listing(), before, "the runtime directory changed");
        // A real peer is still seen alive, and dead once it is gone.
        let b = Registry::claim(&r, false, |_| {}).unwrap();
        assert!(a.alive(b.ep));
        let ep_b = b.ep;
        drop(b);
        assert!(!a.alive(ep_b));
        drop(a);
        std::fs::remove_dir_all(&r).unwrap();
    }

    /// An endpoint's published network ports are found by its peers by (namespace,
    /// address), IPv4 and IPv6, and go with the endpoint: the next process on its number
    /// publishes nothing until it does so itself.
    /// A mapped peer whose process exited is dead to `alive` at once, before the
    /// progress thread handles its pidfd: a `ShmLock` waiter (the device-atomic lock, a
    /// receive ring) may be that thread, spinning on a lock the peer died holding (the
    /// kill harness, tests/chaos/kill.py, hung there: a survivor's progress thread
    /// retrying an atomic towards a peer killed inside one).
    #[test]
    fn a_mapped_peer_that_exited_is_dead_before_its_pidfd_is_handled() {
        use rustix::event::{poll, PollFd, PollFlags};
        let r = root("exited");
        let a = Registry::claim(&r, false, |_| {}).unwrap();
        let b = Registry::claim(&r, false, |_| {}).unwrap(); // its progress thread never runs
        let _tables_a = super::super::tables::Tables::create(&a.dir).unwrap();
        // `a`'s process, as its header names it, has exited (a zombie: not reaped yet).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        assert_eq!(poll(&mut fds, None).unwrap(), 1);
        a.hdr.get::<AtomicU64>(8).store(u64::from(child.id()), Ordering::Release);
        let pa = b.peer(a.ep).unwrap();
        assert!(pa.is_alive(), "nobody has marked it dead");
        assert!(!b.alive(a.ep), "its process has exited");
        assert!(!pa.is_alive());
        child.wait().unwrap();
        drop((pa, a, b));
        std::fs::remove_dir_all(&r).unwrap();
    }

    /// The owner of an endpoint number is the process that holds it now, even while a
    /// peer mapped under that number still looks alive because nobody has handled its
    /// death yet (the connection manager's view of who sent a MAD; flaky rdma_accept
    /// EINVAL of the rpma interop tests, clients in turn on one number).
    #[test]
    fn the_owner_of_a_reused_number_is_read_from_the_host_not_from_the_mapped_peer() {
        let r = root("owner");
        let a = Registry::claim(&r, false, |_| {}).unwrap();
        let b = Registry::claim(&r, false, |_| {}).unwrap(); // its progress thread never runs
        let tables_a = super::super::tables::Tables::create(&a.dir).unwrap();
        let me = std::process::id() as i32;
        assert!(b.owner(b.ep).is_none(), "not asked of the own endpoint");
        assert_eq!(b.owner(a.ep).map(|(pid, _)| pid), Some(me));
        // `a`'s process, as its header names it, exits while `b` has it mapped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id() as i32;
        a.set_header_pid(child.id());
        let pa = b.peer(a.ep).unwrap();
        assert_eq!(pa.pid, dead);
        let pidfd = rustix::process::pidfd_open(rustix::process::Pid::from_raw(dead).unwrap(), rustix::process::PidfdFlags::empty()).unwrap();
        let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
        assert_eq!(rustix::event::poll(&mut fds, None).unwrap(), 1);
        assert_eq!(b.owner(a.ep).map(|(pid, _)| pid), None, "exited, the number still locked");
        // The number is released and claimed again by a live process.
        let ep_a = a.ep;
        drop((tables_a, a));
        assert_eq!(b.owner(ep_a).map(|(pid, _)| pid), None, "free");
        let c = Registry::claim(&r, false, |_| {}).unwrap();
        assert_eq!(c.ep, ep_a);
        assert!(pa.is_alive() && b.peer(ep_a).unwrap().pid == dead, "the mapped peer is stale: nobody handled its death");
        let (pid, fd) = b.owner(ep_a).expect("the new owner");
        assert_eq!(pid, me);
        assert!(!pidfd_exited(fd.as_fd()));
        child.wait().unwrap();
        drop((pa, b, c));
        std::fs::remove_dir_all(&r).unwrap();
    }

    /// The death of an endpoint's process is known by its number only (the pidfd's
    /// event): when it is handled after a new process claimed the number and was mapped,
    /// the new owner stays alive and mapped (notes of stop 27: `peer_died` keyed by
    /// endpoint could mark a new owner dead).
    #[test]
    fn a_late_death_of_a_number_leaves_its_new_owner_alive() {
        let r = root("late");
        let a = Registry::claim(&r, false, |_| {}).unwrap();
        let b = Registry::claim(&r, false, |_| {}).unwrap(); // its progress thread never runs
        let tables_a = super::super::tables::Tables::create(&a.dir).unwrap();
        // `a`'s process, as its header names it, has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
        let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
        assert_eq!(rustix::event::poll(&mut fds, None).unwrap(), 1);
        a.set_header_pid(child.id());
        let old = b.peer(a.ep).unwrap();
        // The number goes to a new, live process, which `b` maps before the death of the
        // old one is handled.
        let ep = a.ep;
        drop((tables_a, a));
        let c = Registry::claim(&r, false, |_| {}).unwrap();
        let _tables_c = super::super::tables::Tables::create(&c.dir).unwrap();
        assert_eq!(c.ep, ep);
        assert!(!b.alive(ep), "the mapped old peer has exited");
        let new = b.peer(ep).unwrap();
        assert_eq!(new.pid, std::process::id() as i32);
        // The old process's death, handled now.
        b.forget(ep);
        assert!(new.is_alive(), "the new owner was marked dead");
        assert!(b.alive(ep));
        assert!(Arc::ptr_eq(&b.peer(ep).unwrap(), &new), "the new owner was unmapped");
        child.wait().unwrap();
        drop((old, new, b, c));
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn published_net_ports_are_found_per_namespace_and_address_and_reclaimed() {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let r = root("ports");
        let a = Registry::claim(&r, false, |_| {}).unwrap();
        let b = Registry::claim(&r, false, |_| {}).unwrap();
        // A peer is mapped with its tables.
        let tables_a = super::super::tables::Tables::create(&a.dir).unwrap();
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 67, 0, 1));
        let v6 = IpAddr::V6("fd67::1".parse::<Ipv6Addr>().unwrap());
        // The IPv4-mapped form of v4 is another address, not v4.
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 67, 0, 1).to_ipv6_mapped());
        assert!(a.publish_net_port(7, v4, 40001));
        assert!(a.publish_net_port(7, v6, 40002));
        let pa = b.peer(a.ep).unwrap();
        assert_eq!(pa.net_port(7, v4), Some(40001));
        assert_eq!(pa.net_port(7, v6), Some(40002));
        assert_eq!(pa.net_port(8, v4), None, "another namespace");
        assert_eq!(pa.net_port(7, mapped), None);
        assert_eq!(pa.net_port(7, IpAddr::V4(Ipv4Addr::new(10, 67, 0, 2))), None);
        // Published after the peer was mapped: still found (read at each look-up).
        let late = IpAddr::V4(Ipv4Addr::new(10, 68, 0, 1));
        assert_eq!(pa.net_port(7, late), None);
        assert!(a.publish_net_port(7, late, 40003));
        assert_eq!(pa.net_port(7, late), Some(40003));
        // The table is bounded.
        for i in 3..MAX_NET_PORTS {
            assert!(a.publish_net_port(9, v4, 41000 + i as u16));
        }
        assert!(!a.publish_net_port(9, v6, 42000), "full");
        let ep_a = a.ep;
        drop((pa, tables_a, a));
        b.forget(ep_a);
        let c = Registry::claim(&r, false, |_| {}).unwrap();
        assert_eq!(c.ep, ep_a);
        let _tables_c = super::super::tables::Tables::create(&c.dir).unwrap();
        assert_eq!(b.peer(c.ep).unwrap().net_port(7, v4), None);
        drop((b, c));
        std::fs::remove_dir_all(&r).unwrap();
    }
}
