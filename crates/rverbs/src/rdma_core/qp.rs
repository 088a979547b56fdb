//! Queue pairs (ibv_create_qp(3)): RC, UC and UD; modified with ibv_modify_qp(3), posted
//! to through the context's ops table as verbs.h's inline `ibv_post_send` and
//! `ibv_post_recv` do.

use core::ffi::{c_int, c_void};
use std::sync::Arc;

use rverbs_abi::*;
use rverbs_proto::state::QpAttrMask;
use rverbs_proto::verbs::{QpState, QpType};

use super::cq::{Cq, CqInner};
use super::library::{check, last_errno, unsupported};
use super::life::{Entered, Life};
use super::pd::{Pd, PdInner};
use super::wr;
use crate::error::{Error, Result};
use crate::rings::qp_attr::{QpAttr, QpCap};
use crate::rings::wr::{PostError, RecvWr, SendWr};

/// The backend's CQ behind a public [`crate::Cq`]: a soft CQ is `EINVAL` (a CQ of
/// another device, ibv_create_qp(3)).
fn native_cq<'a>(verb: &'static str, cq: &'a crate::Cq) -> Result<&'a Cq> {
    Cq::of(cq).ok_or(Error::invalid(verb, crate::rule::Rule::ForeignContext { what: "CQ" }))
}

impl crate::QpInit<'_> {
    /// The `struct ibv_qp_init_attr` of these attributes, for a library that creates the
    /// QP itself with the rdma-core backend's CQs (rdma_create_qp(3)); the CQs are the
    /// ones `self` borrows, live until one of their handles destroys them
    /// ([`crate::rdma_core::Pd::create_qp_with`] keeps them live for the call). A soft CQ is
    /// `EINVAL`; an SRQ or `send_ops` `EOPNOTSUPP`, as for [`Pd::create_qp`]. (Feature
    /// `rdma-core`.)
    pub fn to_c(&self) -> Result<ibv_qp_init_attr> {
        if self.srq.is_some() || self.send_ops.is_some() {
            return Err(Error::native_unsupported("create_qp (SRQ, send_ops)"));
        }
        let (send, recv) = (native_cq("create_qp", self.send_cq)?, native_cq("create_qp", self.recv_cq)?);
        Ok(ibv_qp_init_attr {
            qp_context: self.qp_context as *mut c_void,
            send_cq: send.inner.cq,
            recv_cq: recv.inner.cq,
            srq: std::ptr::null_mut(),
            cap: crate::c_abi::cap_to_c(&self.cap),
            qp_type: self.qp_type.raw(),
            sq_sig_all: c_int::from(self.sq_sig_all),
        })
    }
}

struct QpInner {
    qp: *mut ibv_qp,
    pd: Arc<PdInner>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    qp_num: u32,
    qp_type: QpType,
    cap: QpCap,
    qp_context: usize,
    sq_sig_all: bool,
    /// The word the public [`crate::Qp::set_cookie`] attaches.
    cookie: std::sync::atomic::AtomicUsize,
    /// For a QP another library created ([`Qp::adopt`]): its destruction, called
    /// instead of ibv_destroy_qp(3).
    release: std::sync::Mutex<Option<Release>>,
    /// Whether the QP was adopted (`release` is, or was, its destruction).
    adopted: bool,
    life: Life,
}

/// How an adopted QP is destroyed (its creator's call, e.g. rdma_destroy_qp(3)).
pub type Release = Box<dyn FnOnce() -> Result<()> + Send + Sync>;

// SAFETY: `qp` is owned by this value; libibverbs' verbs are thread-safe (providers lock
// their queues).
unsafe impl Send for QpInner {}
// SAFETY: as for Send.
unsafe impl Sync for QpInner {}

impl QpInner {
    /// ibv_destroy_qp(3) (or an adopted QP's `release`); on success the QP stops using
    /// its PD and CQs.
    ///
    /// # Safety
    ///
    /// Called once, with no call on the QP in progress (under [`Life::destroy`], or in
    /// the last drop).
    unsafe fn destroy_raw(&self) -> Result<()> {
        let r = if self.adopted {
            // An adopted QP's release runs once (rdma_destroy_qp(3) returns nothing):
            // after it, the QP is its creator's no more.
            let release = self.release.lock().unwrap_or_else(|p| p.into_inner()).take();
            release.map_or(Ok(()), |release| release())
        } else {
            // SAFETY: `qp` came from ibv_create_qp; the caller's contract; its CQs and PD
            // are held until after.
            check(unsafe { (self.pd.ctx.verbs.sym.ibv_destroy_qp)(self.qp) })
        };
        if r.is_ok() {
            self.pd.life.detach();
            self.send_cq.life.detach();
            if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
                self.recv_cq.life.detach();
            }
        }
        r
    }

    /// Counts the QP as a user of its PD and CQs (once each).
    fn attach(&self) {
        self.pd.life.attach();
        self.send_cq.life.attach();
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.life.attach();
        }
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if !self.life.is_destroyed() {
            // SAFETY: the last handle is gone; not destroyed yet.
            if let Err(e) = unsafe { self.destroy_raw() } {
                tracing::warn!("rdma_core: ibv_destroy_qp failed: {e}");
            }
        }
    }
}

/// A queue pair (ibv_create_qp(3)). Clones share it; it keeps its PD and CQs alive.
#[derive(Clone)]
pub struct Qp {
    inner: Arc<QpInner>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qp_num", &self.qp_num()).field("qp_type", &self.inner.qp_type).finish()
    }
}

impl Pd {
    /// Creates a queue pair (ibv_create_qp(3)): RC, UC or UD, with CQs of this backend
    /// and context (others are `EINVAL`); other types, an SRQ or `send_ops` are
    /// `EOPNOTSUPP` in this backend. The capabilities the provider granted (at least those
    /// asked) are in [`Qp::cap`].
    pub fn create_qp(&self, init: &crate::QpInit<'_>) -> Result<Qp> {
        Qp::create(self, init)
    }

    /// Creates a QP with another library's call (rdma_create_qp(3) for a connection id):
    /// `create` gets the `struct ibv_qp_init_attr` of `init` ([`crate::QpInit::to_c`])
    /// and returns the QP it made in this PD with those attributes (writing the granted
    /// capabilities back into them, as ibv_create_qp(3) does). The PD and CQs are kept
    /// from being destroyed while `create` runs, so it never passes a destroyed one. The
    /// QP is then as one of [`Qp::adopt`]: destroyed by `release`. CQs that are not this
    /// backend's or of another context are `EINVAL` before `create` is called; an error
    /// of `create` is returned (and `release` dropped, never called).
    ///
    /// # Safety
    ///
    /// A QP `create` returns is a live QP of this process's libibverbs, made in this PD
    /// with the attributes it was given; nothing but `release` destroys it, and `release`
    /// does.
    pub unsafe fn create_qp_with(
        &self,
        init: &crate::QpInit<'_>,
        create: impl FnOnce(&mut ibv_qp_init_attr) -> Result<*mut ibv_qp>,
        release: Release,
    ) -> Result<Qp> {
        let cqs = (native_cq("create_qp", init.send_cq)?, native_cq("create_qp", init.recv_cq)?);
        for cq in [cqs.0, cqs.1] {
            if !Arc::ptr_eq(&cq.inner.ctx, &self.inner.ctx) {
                return Err(Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)));
            }
        }
        let _entered = Parents::enter(self, cqs)?;
        let mut attr = init.to_c()?;
        let qp = create(&mut attr)?;
        if qp.is_null() {
            return Err(Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)));
        }
        let cap = crate::c_abi::cap_from_c(&attr.cap);
        // SAFETY: the caller's contract; made while the PD and CQs were entered.
        Ok(unsafe { Qp::wrap(self, init, cqs, qp, cap, Some(release)) })
    }

}

impl Qp {
    fn create(pd: &Pd, init: &crate::QpInit<'_>) -> Result<Qp> {
        if !matches!(init.qp_type, QpType::Rc | QpType::Uc | QpType::Ud) {
            return Err(unsupported("create_qp", "QP types other than RC, UC and UD"));
        }
        let p = &pd.inner;
        let cqs = (native_cq("create_qp", init.send_cq)?, native_cq("create_qp", init.recv_cq)?);
        for cq in [cqs.0, cqs.1] {
            if !Arc::ptr_eq(&cq.inner.ctx, &p.ctx) {
                return Err(Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)));
            }
        }
        // The PD and CQs stay live until the QP is counted as their user.
        let _entered = Parents::enter(pd, cqs)?;
        let mut attr = init.to_c()?;
        // SAFETY: the PD and both CQs are live and of one context.
        let qp = unsafe { (p.ctx.verbs.sym.ibv_create_qp)(p.pd, &mut attr) };
        if qp.is_null() {
            return Err(last_errno());
        }
        // ibv_create_qp(3): "the actual capabilities ... are returned in cap".
        let cap = crate::c_abi::cap_from_c(&attr.cap);
        // SAFETY: ibv_create_qp returned a valid QP, made by this backend's library.
        Ok(unsafe { Qp::wrap(pd, init, cqs, qp, cap, None) })
    }

    /// # Safety
    ///
    /// `qp` is a live QP of this library, of `pd` and `cqs` (`init`'s), destroyed by
    /// nothing else than the value made here (by `release` if given, else
    /// ibv_destroy_qp(3)).
    unsafe fn wrap(pd: &Pd, init: &crate::QpInit<'_>, cqs: (&Cq, &Cq), qp: *mut ibv_qp, cap: QpCap, release: Option<Release>) -> Qp {
        let inner = QpInner {
            qp,
            pd: pd.inner.clone(),
            send_cq: cqs.0.inner.clone(),
            recv_cq: cqs.1.inner.clone(),
            // SAFETY: the caller's contract; `qp_num` never changes.
            qp_num: unsafe { (*qp).qp_num },
            qp_type: init.qp_type,
            cap,
            qp_context: init.qp_context,
            sq_sig_all: init.sq_sig_all,
            cookie: Default::default(),
            adopted: release.is_some(),
            release: std::sync::Mutex::new(release),
            life: Life::new("queue pair"),
        };
        inner.attach();
        Qp { inner: Arc::new(inner) }
    }

    /// Wraps a QP another library created with `pd` and `init`'s CQs and type
    /// (rdma_create_qp(3) makes it for a connection id, with these attributes as `struct
    /// ibv_qp_init_attr`, [`crate::QpInit::to_c`]). Its capabilities ([`Qp::cap`]) are
    /// the provider's, read with ibv_query_qp(3) (`IBV_QP_CAP`), not `init.cap`: the
    /// actual values may be greater than those asked (ibv_create_qp(3)); a query that
    /// fails is its error, and the QP is released. It is destroyed
    /// by `release`, its creator's call (rdma_destroy_qp(3)), when the last handle goes or
    /// by [`Qp::destroy`], never with ibv_destroy_qp(3); it holds its PD and CQs as a QP of
    /// [`Pd::create_qp`] does. CQs that are not this backend's are `EINVAL`, and the QP is
    /// released at once. (A library that creates the QP from [`crate::QpInit::to_c`]'s
    /// attributes wants [`Pd::create_qp_with`], which keeps the CQs from being destroyed
    /// in between.)
    ///
    /// # Safety
    ///
    /// `qp` is a live QP of this process's libibverbs (the one this backend loaded),
    /// created in `pd` with `init`'s CQs and type; nothing but `release` destroys it, and
    /// `release` does.
    pub unsafe fn adopt(pd: &Pd, init: &crate::QpInit<'_>, qp: *mut ibv_qp, release: Release) -> Result<Qp> {
        let cqs = (native_cq("create_qp", init.send_cq), native_cq("create_qp", init.recv_cq));
        // SAFETY: the caller's contract: `qp` is live.
        let cap = unsafe { Qp::granted(pd, qp) };
        let (cqs, cap) = match (cqs, cap) {
            ((Ok(s), Ok(r)), Ok(cap)) => ((s, r), cap),
            ((Err(e), _), _) | ((_, Err(e)), _) | (_, Err(e)) => {
                // Not this backend's CQs, or a QP the provider cannot tell about: it is
                // not kept, so it goes now.
                if let Err(r) = release() {
                    tracing::warn!("rdma_core: releasing an adopted QP failed: {r}");
                }
                return Err(e);
            }
        };
        // SAFETY: the caller's contract.
        Ok(unsafe { Qp::wrap(pd, init, cqs, qp, cap, Some(release)) })
    }

    /// The capabilities the provider gave `qp` (ibv_query_qp(3) with `IBV_QP_CAP`: the
    /// actual values, in `attr.cap`).
    ///
    /// # Safety
    ///
    /// `qp` is a live QP of `pd`'s library.
    unsafe fn granted(pd: &Pd, qp: *mut ibv_qp) -> Result<QpCap> {
        let mut attr = ibv_qp_attr::zeroed();
        let mut init = ibv_qp_init_attr::zeroed();
        let mask = c_int::try_from(QpAttrMask::CAP.bits()).unwrap_or(c_int::MAX);
        // SAFETY: the caller's contract; both out-structs are valid.
        check(unsafe { (pd.inner.ctx.verbs.sym.ibv_query_qp)(qp, &mut attr, mask, &mut init) })?;
        Ok(crate::c_abi::cap_from_c(&attr.cap))
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.inner.qp_num
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The capabilities the provider granted at creation (at least those asked).
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// The user value given at creation.
    pub fn qp_context(&self) -> usize {
        self.inner.qp_context
    }

    /// The PD the QP belongs to.
    pub fn pd(&self) -> Pd {
        Pd { inner: self.inner.pd.clone() }
    }

    /// The current state, as ibv_query_qp(3) reports it (the device may have moved the
    /// QP to ERR); a QP the provider cannot query, or destroyed, reads as `Err`.
    pub fn state(&self) -> QpState {
        self.query_mask(QpAttrMask::STATE).map_or(QpState::Err, |a| a.qp_state)
    }

    /// The QP's attributes (ibv_query_qp(3), every attribute asked).
    pub fn query(&self) -> Result<QpAttr> {
        self.query_mask(QpAttrMask::all())
    }

    fn query_mask(&self, mask: QpAttrMask) -> Result<QpAttr> {
        let mut attr = ibv_qp_attr::zeroed();
        let mut init = ibv_qp_init_attr::zeroed();
        let all = c_int::try_from(mask.bits()).unwrap_or(c_int::MAX);
        let _entered = self.inner.life.enter()?;
        // SAFETY: `qp` is live; both out-structs are valid.
        check(unsafe { (self.inner.pd.ctx.verbs.sym.ibv_query_qp)(self.inner.qp, &mut attr, all, &mut init) })?;
        Ok(crate::c_abi::qp_attr_from_query(&attr))
    }

    /// Modifies the attributes `mask` names (ibv_modify_qp(3)): the provider checks the
    /// state table and the required and optional attributes of each transition; a
    /// transition it refuses is its errno (`EINVAL`).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let mut raw = crate::c_abi::qp_attr_to_c(attr);
        let mask = c_int::try_from(mask.bits()).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        let _entered = self.inner.life.enter()?;
        // SAFETY: `qp` is live; `raw` is a valid attribute struct.
        check(unsafe { (self.inner.pd.ctx.verbs.sym.ibv_modify_qp)(self.inner.qp, &mut raw, mask) })
    }

    /// Posts send work requests (ibv_post_send(3), through `context->ops.post_send` as
    /// the inline function does). On failure, `index` is the first request not posted
    /// (the provider's `bad_wr`), and the requests before it were posted. Opcodes and
    /// features the backend does not carry (memory windows, FLUSH, ATOMIC_WRITE, XRC) are
    /// `EOPNOTSUPP` before anything is posted. Inline data is one `struct ibv_sge` per
    /// piece with `IBV_SEND_INLINE`, as C passes it: the pieces count against
    /// `max_send_sge` for the provider.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let _entered = self.inner.life.enter().map_err(|error| PostError { index: 0, error })?;
        // A UD request's address handle is not destroyed until the post returns.
        let ahs = wrs.iter().any(|w| w.ud.is_some()).then(|| self.inner.pd.ctx.ahs.read().unwrap_or_else(|p| p.into_inner()));
        let mut chain = wr::send_chain(ahs.as_deref(), wrs).map_err(|(index, error)| PostError { index, error })?;
        let qp = self.inner.qp;
        let base = chain.wrs.as_mut_ptr();
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: `qp` and its context are live; the chain and everything it points to
        // (scatter lists of registered memory, inline bytes, address handles) live until
        // the call returns.
        let rc = unsafe {
            match (*(*qp).context).ops.post_send {
                Some(post) => post(qp, base, &mut bad),
                None => return Err(PostError { index: 0, error: unsupported("post_send", "the provider has no post_send") }),
            }
        };
        check(rc).map_err(|error| PostError { index: bad_index(base, bad, wrs.len()), error })
    }

    /// Posts receive work requests (ibv_post_recv(3), through `context->ops.post_recv`);
    /// failure as for [`Qp::post_send`].
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let _entered = self.inner.life.enter().map_err(|error| PostError { index: 0, error })?;
        let mut chain = wr::recv_chain(wrs);
        let qp = self.inner.qp;
        let base = chain.as_mut_ptr();
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in `post_send`.
        let rc = unsafe {
            match (*(*qp).context).ops.post_recv {
                Some(post) => post(qp, base, &mut bad),
                None => return Err(PostError { index: 0, error: unsupported("post_recv", "the provider has no post_recv") }),
            }
        };
        check(rc).map_err(|error| PostError { index: bad_index(base, bad, wrs.len()), error })
    }

    /// Destroys the QP now (ibv_destroy_qp(3), or an adopted QP's release) and returns
    /// its error; `EINVAL` if it already is. Any handle may destroy it; the others' calls
    /// are then `EINVAL` (its state reads `Err`). A refusal leaves the QP usable; once
    /// destroyed, it no longer keeps its CQs and PD from being destroyed. Dropping the
    /// last handle destroys too, logging an error.
    pub fn destroy(&self) -> Result<()> {
        // SAFETY: under the QP's exclusive lock, once (Life::destroy).
        self.inner.life.destroy(|| unsafe { self.inner.destroy_raw() })
    }
}

/// The PD and CQs of a QP being made, entered (none destroyed meanwhile).
struct Parents<'a> {
    _pd: Entered<'a>,
    _send_cq: Entered<'a>,
    _recv_cq: Option<Entered<'a>>,
}

impl<'a> Parents<'a> {
    fn enter(pd: &'a Pd, cqs: (&'a Cq, &'a Cq)) -> Result<Parents<'a>> {
        let (send, recv) = (&cqs.0.inner, &cqs.1.inner);
        Ok(Parents {
            _pd: pd.inner.life.enter()?,
            _send_cq: send.life.enter()?,
            // One CQ is entered once (a read lock taken twice may wait on a writer).
            _recv_cq: if Arc::ptr_eq(send, recv) { None } else { Some(recv.life.enter()?) },
        })
    }
}

/// The index of `bad` in the chain starting at `base` (`len` long); a pointer outside it
/// (a provider that did not set it) counts as the first.
fn bad_index<T>(base: *mut T, bad: *mut T, len: usize) -> usize {
    let (b, x) = (base as usize, bad as usize);
    let size = core::mem::size_of::<T>();
    if x >= b && x < b + len * size { (x - b) / size } else { 0 }
}

/// The public [`crate::Qp`] over this QP (what [`crate::Pd::create_qp`] gives on a
/// device of the backend), e.g. for a QP librdmacm created ([`Qp::adopt`]).
impl From<Qp> for crate::qp::Qp {
    fn from(qp: Qp) -> crate::qp::Qp {
        crate::qp::Qp::from_native(Arc::new(qp))
    }
}

impl crate::qp::native::NativeQp for Qp {
    fn qp_num(&self) -> u32 {
        Qp::qp_num(self)
    }

    fn qp_type(&self) -> QpType {
        Qp::qp_type(self)
    }

    fn state(&self) -> QpState {
        Qp::state(self)
    }

    fn cap(&self) -> QpCap {
        Qp::cap(self)
    }

    fn qp_context(&self) -> usize {
        Qp::qp_context(self)
    }

    fn sq_sig_all(&self) -> bool {
        self.inner.sq_sig_all
    }

    fn cookie(&self) -> usize {
        self.inner.cookie.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_cookie(&self, value: usize) {
        self.inner.cookie.store(value, std::sync::atomic::Ordering::Release)
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        Qp::modify(self, attr, mask)
    }

    fn query(&self) -> Result<QpAttr> {
        Qp::query(self)
    }

    fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        Qp::post_send(self, wrs)
    }

    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        Qp::post_recv(self, wrs)
    }

    fn destroy(&self) -> Result<()> {
        Qp::destroy(self)
    }

    fn pd(&self) -> Arc<dyn crate::mr::native::NativePd> {
        Arc::new(Qp::pd(self))
    }
}
