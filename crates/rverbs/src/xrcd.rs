//! XRC domains (ibv_open_xrcd(3), ibv_close_xrcd(3)).
//!
//! Rule: an XRC domain groups XRC SRQs and XRC target (XRC_RECV) QPs; a message from an
//! XRC initiator reaches the target QP it is connected to, which steers it into the XRC
//! SRQ the request names — only an SRQ of the target's domain (IBTA Annex A14).
//! Rule: domains opened with an fd are shared per file (inode) on the device: an
//! existing one is reused; none existing and no O_CREAT is EAGAIN; one existing with
//! O_EXCL is EINVAL. Without an fd each open creates a private domain. Closing a domain
//! that QPs or SRQs still use is EBUSY.
//!
//! Across processes a domain is its *key*, published with every XRC target QP and XRC
//! SRQ: processes that opened the same file have domains with the same key, so a
//! target QP of one process steers messages into an XRC SRQ of another, as the kernel's
//! shared domains allow (ibv_xsrq_pingpong with several clients). The file-existence
//! rules (O_CREAT, O_EXCL) are applied per host, as the kernel's one table per device
//! does: `host` records which processes hold the domain of each file.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use crate::context::Context;
use crate::cq::{Cq, CqInit, CqInner};
use crate::error::{Error, Result};
use crate::mr::domain::{ContextCore, PdCore, XrcdCore};
use crate::rule::Rule;
use crate::pd::Pd;
use crate::qp::{Qp, QpInit};
use crate::qp::srq::{Srq, SrqInit};
use crate::rings::qp_attr::QpCap;
use rverbs_proto::verbs::QpType;

/// Domains shared per (st_dev, st_ino) of the file they were opened with, per process
/// generation (each has its device, `sys::process_generation`). The table is the XRC
/// layer's own state, like the PD handles of `pd.rs`, so the device does not name the
/// domains (the verbs layer's components import each other without a loop: device →
/// context → pd → xrcd).
static FILES: [XrcdFiles; crate::sys::GENERATIONS] = [const { Mutex::new(BTreeMap::new()) }; crate::sys::GENERATIONS];

/// One generation's table of [`FILES`]: (st_dev, st_ino) → the domain.
type XrcdFiles = Mutex<BTreeMap<(u64, u64), Weak<XrcdInner>>>;

pub(crate) struct XrcdInner {
    /// What the domain's XRC SRQs and target QPs hold: its key and their count. The key
    /// is the domain's host-wide identity: bit 63 and a hash of the file's (st_dev,
    /// st_ino) for a domain opened with a file, bit 62 and (endpoint, PD handle) for a
    /// private one.
    pub(crate) core: Arc<XrcdCore>,
    pub(crate) ctx: Arc<ContextCore>,
    /// The PD of the domain's target QPs. Their memory checks use the SRQ's PD instead;
    /// this one only carries the context and keeps object accounting uniform.
    pub(crate) pd: Arc<PdCore>,
    /// Target QPs complete nothing (their receives complete on the SRQ's CQ); they are
    /// given this internal CQ, which is never written, because every QP has one.
    pub(crate) cq: Arc<CqInner>,
    /// Shared through a file: closing drops this opener's reference only.
    shared: std::sync::atomic::AtomicBool,
    /// This process's entry in the host-wide table of file domains (removed with the
    /// domain).
    _host: Option<host::Entry>,
}

/// The key of a domain shared through the file `(st_dev, st_ino)`.
fn file_key(id: (u64, u64)) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    1 << 63 | h.finish() >> 2
}

/// An XRC domain (`struct ibv_xrcd`). Cloning shares it.
#[derive(Clone)]
pub struct Xrcd {
    inner: Arc<XrcdInner>,
    /// This opener's handle was closed (each `open_xrcd` returns its own handle, even
    /// for a domain shared through a file).
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Xrcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xrcd").finish_non_exhaustive()
    }
}

impl Context {
    /// Opens an XRC domain (ibv_open_xrcd(3)): shared through `file` if given (with
    /// `oflags` O_CREAT / O_EXCL as open(2) uses them), private otherwise.
    ///
    /// Errors: `EAGAIN` when no domain exists for the file and `oflags` lacks O_CREAT;
    /// `EINVAL` when one exists and `oflags` has O_EXCL; `EBADF` for a bad fd.
    pub fn open_xrcd(&self, file: Option<BorrowedFd<'_>>, oflags: i32) -> Result<Xrcd> {
        if let Some(e) = crate::fault_plan::fatal(self.inner()?.endpoint.slot, "open_xrcd") {
            return Err(e);
        }
        let Some(fd) = file else {
            return Ok(Xrcd::handle(XrcdInner::new(self, None, None)?));
        };
        let st = rustix::fs::fstat(fd)?;
        let id = (st.st_dev, st.st_ino);
        let mut map = FILES[crate::sys::process_generation()].lock().expect("xrcd files");
        if let Some(existing) = map.get(&id).and_then(Weak::upgrade) {
            if oflags & libc::O_EXCL != 0 {
                return Err(Error::invalid("open_xrcd", Rule::XrcdExists));
            }
            return Ok(Xrcd::handle(existing));
        }
        // Not in this process: other processes may hold it (without a registry, the
        // runtime directory being unusable, only this process's domains are known).
        let entry = match &self.inner()?.endpoint.reg {
            Some(reg) => Some(host::open(reg, id, oflags)?),
            None if oflags & libc::O_CREAT == 0 => return Err(no_domain()),
            None => None,
        };
        let inner = XrcdInner::new(self, Some(file_key(id)), entry)?;
        inner.shared.store(true, Ordering::Release);
        map.insert(id, Arc::downgrade(&inner));
        Ok(Xrcd::handle(inner))
    }
}

impl Pd {
    /// Creates an XRC SRQ (ibv_create_srq_ex(3), IBV_SRQT_XRC) in `xrcd` completing to
    /// `cq`.
    pub fn create_srq_xrc(&self, init: &SrqInit, xrcd: &Xrcd, cq: &Cq) -> Result<Srq> {
        Srq::new_xrc(self, init, xrcd, cq)
    }
}

impl Srq {
    /// Creates an XRC SRQ in `xrcd` whose receives complete to `cq`
    /// (ibv_create_srq_ex(3) with IBV_SRQT_XRC). Memory checks of messages steered into
    /// it use this SRQ's PD.
    pub fn new_xrc(pd: &Pd, init: &SrqInit, xrcd: &Xrcd, cq: &Cq) -> Result<Self> {
        xrcd.check_open("create_srq_ex")?;
        let ctx = &pd.inner()?.ctx;
        if !Arc::ptr_eq(&xrcd.inner.ctx, ctx) || !Arc::ptr_eq(&cq.inner()?.ctx, ctx) {
            return Err(Error::invalid("create_srq_ex", Rule::ForeignContext { what: "XRC domain or CQ" }));
        }
        let srqs = &pd.context().dev()?.srqs;
        Srq::new_in(pd.inner()?.clone(), srqs, init, Some((xrcd.inner.core.clone(), cq.inner()?.clone())), None)
    }
}

impl XrcdInner {
    fn new(ctx: &Context, key: Option<u64>, host: Option<host::Entry>) -> Result<Arc<Self>> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(&CqInit::new(1))?;
        let private = 1 << 62 | u64::from(ctx.dev()?.ep()) << 32 | u64::from(pd.inner()?.id);
        Ok(Arc::new(XrcdInner {
            core: Arc::new(XrcdCore::new(key.unwrap_or(private))),
            ctx: ctx.inner()?.clone(),
            pd: pd.inner()?.clone(),
            cq: cq.inner()?.clone(),
            shared: std::sync::atomic::AtomicBool::new(false),
            _host: host,
        }))
    }
}

impl Xrcd {
    fn handle(inner: Arc<XrcdInner>) -> Xrcd {
        Xrcd { inner, closed: Arc::default() }
    }

    /// Fails once this handle was closed.
    pub(crate) fn check_open(&self, verb: &'static str) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::invalid(verb, Rule::Closed { what: "XRC domain" }));
        }
        Ok(())
    }

    /// Creates an XRC target QP (`IBV_QPT_XRC_RECV`): it has no send or receive queue
    /// and no CQs; messages it receives land in the XRC SRQ they name.
    pub fn create_recv_qp(&self, qp_context: usize) -> Result<Qp> {
        self.check_open("create_qp")?;
        let pd = Pd::from_inner(self.inner.pd.clone());
        let cq = Cq::from_inner(self.inner.cq.clone());
        let init = QpInit {
            qp_context,
            ..QpInit::new(QpType::XrcRecv, &cq, QpCap::default())
        };
        Qp::new_in(pd.inner()?.clone(), &init, Some(self.inner.core.clone()), pd.context().dev()?, None)
    }

    /// Closes the domain (ibv_close_xrcd(3)).
    ///
    /// Errors: `EBUSY` while XRC SRQs or target QPs use a private domain (a domain
    /// shared through a file only loses this opener's reference, as in the kernel);
    /// `EINVAL` if this handle is already closed.
    pub fn close(&self) -> Result<()> {
        if !self.inner.shared.load(Ordering::Acquire) && self.inner.core.in_use() {
            return Err(Error::Busy { what: "XRC domain" });
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return Err(Error::Destroyed { what: "XRC domain" });
        }
        Ok(())
    }

    /// Whether two handles name the same domain.
    pub fn same_as(&self, other: &Xrcd) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// `EAGAIN`: no process holds a domain for the file and `oflags` lacks O_CREAT.
fn no_domain() -> Error {
    Error::Again { verb: "open_xrcd", why: "no domain for the file and no O_CREAT" }
}

/// The host-wide table of XRC domains shared through files.
///
/// Rule: ibv_open_xrcd(3) with an fd: the kernel keeps one table of such domains per
/// device (`ib_uverbs_open_xrcd`: EAGAIN when none exists for the inode and O_CREAT is
/// missing, EINVAL when one exists and O_EXCL is given), so the rules see the domains of
/// every process. Here the table is `<runtime dir>/xrcd/<st_dev>-<st_ino>/<ep>.<pid>`:
/// one entry per process holding the domain, created under the flock of
/// `<runtime dir>/xrcd/lock` (two processes opening with O_CREAT | O_EXCL at once: one
/// gets EINVAL) and removed when the process's domain goes. An entry whose process is
/// dead (`Registry::owner_alive`) is removed by whoever finds it, so a killed holder
/// does not keep the domain "existing".
mod host {
    use std::path::{Path, PathBuf};

    use rustix::fs::{FlockOperation, Mode, OFlags};

    use crate::error::{Error, Result};
    use crate::rule::Rule;
    use crate::shm::registry::Registry;

    /// This process's entry for one file's domain; removed when dropped.
    pub(crate) struct Entry {
        path: PathBuf,
    }

    impl Drop for Entry {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
            // The last holder removes the file's directory (fails while others hold it).
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    /// Whether a live process holds the domain whose entries are in `dir`; removes the
    /// entries of dead processes.
    fn held(reg: &Registry, dir: &Path) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else { return false };
        let mut live = false;
        for e in entries.flatten() {
            let name = e.file_name();
            let holder = name.to_str().and_then(|n| n.split_once('.')).and_then(|(ep, pid)| Some((ep.parse().ok()?, pid.parse().ok()?)));
            match holder {
                Some((ep, pid)) if reg.owner_alive(ep, pid) => live = true,
                _ => {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        live
    }

    /// Applies O_CREAT / O_EXCL to the domain of file `(dev, ino)` across the host and
    /// records this process as a holder.
    pub(crate) fn open(reg: &Registry, (dev, ino): (u64, u64), oflags: i32) -> Result<Entry> {
        let table = reg.root.join("xrcd");
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).recursive(true).create(&table)?;
        let lock = rustix::fs::open(table.join("lock"), OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
        // Held for a few file operations by each opener; released by the kernel if the
        // holder dies.
        rustix::fs::flock(&lock, FlockOperation::LockExclusive)?;
        let dir = table.join(format!("{dev:x}-{ino:x}"));
        let exists = held(reg, &dir);
        if exists && oflags & libc::O_EXCL != 0 {
            return Err(Error::invalid("open_xrcd", Rule::XrcdExists));
        }
        if !exists && oflags & libc::O_CREAT == 0 {
            return Err(super::no_domain());
        }
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        let path = dir.join(format!("{}.{}", reg.ep, std::process::id()));
        std::os::unix::fs::OpenOptionsExt::mode(std::fs::OpenOptions::new().write(true).create(true).truncate(false), 0o600).open(&path)?;
        Ok(Entry { path })
    }
}
