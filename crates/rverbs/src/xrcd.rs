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
//! rules (O_CREAT, O_EXCL) are applied per process.

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
use crate::srq::{Srq, SrqInit};
use crate::QpCap;
use crate::QpType;

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
        let Some(fd) = file else {
            return Ok(Xrcd::handle(XrcdInner::new(self, None)?));
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
        if oflags & libc::O_CREAT == 0 {
            return Err(Error::Again { verb: "open_xrcd", why: "no domain for the file and no O_CREAT" });
        }
        let inner = XrcdInner::new(self, Some(file_key(id)))?;
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
        let ctx = &pd.inner().ctx;
        if !Arc::ptr_eq(&xrcd.inner.ctx, ctx) || !Arc::ptr_eq(&cq.inner().ctx, ctx) {
            return Err(Error::invalid("create_srq_ex", Rule::ForeignContext { what: "XRC domain or CQ" }));
        }
        let srqs = &pd.context().dev().srqs;
        Srq::new_in(pd.inner().clone(), srqs, init, Some((xrcd.inner.core.clone(), cq.inner().clone())))
    }
}

impl XrcdInner {
    fn new(ctx: &Context, key: Option<u64>) -> Result<Arc<Self>> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(&CqInit::new(1))?;
        let private = 1 << 62 | u64::from(ctx.dev().ep()) << 32 | u64::from(pd.inner().id);
        Ok(Arc::new(XrcdInner {
            core: Arc::new(XrcdCore::new(key.unwrap_or(private))),
            ctx: ctx.inner().clone(),
            pd: pd.inner().clone(),
            cq: cq.inner().clone(),
            shared: std::sync::atomic::AtomicBool::new(false),
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
        Qp::new_in(pd.inner().clone(), &init, Some(self.inner.core.clone()), pd.context().dev())
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
