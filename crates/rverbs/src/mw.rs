//! Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_dealloc_mw(3)).
//!
//! Rule: a window gives remote access to a range of a memory region under its own rkey.
//! Type 1 windows are bound by the `bind_mw` verb (the key's low byte advances with
//! every bind; a zero-length bind unbinds) and are never invalidated by work requests.
//! Type 2 windows are bound by a BIND_MW work request with a key the caller chooses,
//! only while FREE, and only the QP that bound them can use them; LOCAL_INV and
//! SEND_WITH_INV return them to FREE. Remote access through a window needs the window
//! VALID, its PD equal to the responder QP's, the range inside the window and the access
//! inside the window's rights (rocev2-wire.md §3.3; rxe `rxe_mw.c`, notes §10, §15).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::device::DeviceInner;
use crate::error::{Error, Result};
use crate::mr::{Fault, KeyTarget, Mr, MrInner, Pinned};
use crate::pd::{Pd, PdInner};
use crate::Access;

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MwType {
    /// Bound by the `bind_mw` verb.
    Type1 = 1,
    /// Bound by a BIND_MW work request.
    Type2 = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MwStatus {
    Invalid,
    Free,
    Valid,
}

struct Binding {
    mr: Arc<MrInner>,
    /// First address of the window in the region's IO address space.
    addr: u64,
    len: u64,
    access: Access,
    /// Window addresses start at 0 (ZERO_BASED).
    zero_based: bool,
    /// The QP that bound a type 2 window.
    qpn: u32,
}

struct MwCore {
    rkey: u32,
    status: MwStatus,
    binding: Option<Binding>,
}

impl MwCore {
    fn unbind(&mut self) {
        if let Some(b) = self.binding.take() {
            b.mr.bound_mws.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

pub(crate) struct MwInner {
    dev: &'static DeviceInner,
    /// The key the last bind posted for this window will install (type 1: the next bind
    /// advances from it even while earlier binds are still queued).
    pub(crate) posted_rkey: std::sync::atomic::AtomicU32,
    pub(crate) pd: Arc<PdInner>,
    pub(crate) mw_type: MwType,
    core: Mutex<MwCore>,
    released: AtomicBool,
}

/// Why a bind failed (the work request completes with MW_BIND_ERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BindError;

/// What a bind asks for.
pub(crate) struct BindSpec {
    pub(crate) new_rkey: u32,
    pub(crate) mr: Option<Arc<MrInner>>,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

/// Access rights a window may carry (rxe `RXE_ACCESS_SUPPORTED_MW`).
const MW_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::MW_BIND)
    .union(Access::ZERO_BASED)
    .union(Access::FLUSH_GLOBAL)
    .union(Access::FLUSH_PERSISTENT);

impl MwInner {
    pub(crate) fn rkey(&self) -> u32 {
        self.core.lock().expect("mw").rkey
    }

    /// Executes a bind issued by QP `qpn` of PD `qp_pd` (rxe `rxe_bind_mw` checks).
    pub(crate) fn bind(&self, qp_pd: &PdInner, qpn: u32, spec: BindSpec) -> Result<(), BindError> {
        let mut core = self.core.lock().expect("mw");
        let access = spec.access;
        if !MW_ACCESS.contains(access.difference(Access::RELAXED_ORDERING)) {
            return Err(BindError);
        }
        match self.mw_type {
            MwType::Type1 => {
                if core.status != MwStatus::Valid || access.contains(Access::ZERO_BASED) {
                    return Err(BindError);
                }
            }
            MwType::Type2 => {
                if core.status != MwStatus::Free
                    || !std::ptr::eq(qp_pd, Arc::as_ptr(&self.pd))
                    || spec.mr.is_none()
                    || spec.len == 0
                {
                    return Err(BindError);
                }
            }
        }
        let binding = match (&spec.mr, spec.len) {
            (_, 0) if self.mw_type == MwType::Type1 => None,
            (None, _) => return Err(BindError),
            (Some(mr), len) => {
                if !mr.is_valid() {
                    return Err(BindError);
                }
                let d = mr.desc.read().expect("mr desc");
                let mr_access = d.access;
                if !Arc::ptr_eq(&d.pd, &self.pd)
                    || mr_access.contains(Access::ZERO_BASED)
                    || !mr_access.contains(Access::MW_BIND)
                    || (access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                        && !mr_access.contains(Access::LOCAL_WRITE))
                {
                    return Err(BindError);
                }
                let end = spec.addr.checked_add(len).ok_or(BindError)?;
                if spec.addr < d.iova || end > d.iova + d.len as u64 {
                    return Err(BindError);
                }
                Some(Binding {
                    mr: mr.clone(),
                    addr: spec.addr,
                    len,
                    access,
                    zero_based: access.contains(Access::ZERO_BASED),
                    qpn,
                })
            }
        };
        core.unbind();
        if let Some(b) = &binding {
            b.mr.bound_mws.fetch_add(1, Ordering::AcqRel);
        }
        core.binding = binding;
        let new = (core.rkey & !0xff) | (spec.new_rkey & 0xff);
        self.dev.keys.rekey(core.rkey, new);
        core.rkey = new;
        core.status = MwStatus::Valid;
        Ok(())
    }

    /// Invalidates the window through `rkey` (LOCAL_INV, SEND_WITH_INV): only a valid
    /// type 2 window of `pd` whose key matches.
    pub(crate) fn invalidate(&self, rkey: u32, pd: &PdInner) -> bool {
        let mut core = self.core.lock().expect("mw");
        if self.mw_type != MwType::Type2
            || core.status != MwStatus::Valid
            || core.rkey != rkey
            || !std::ptr::eq(pd, Arc::as_ptr(&self.pd))
        {
            return false;
        }
        core.unbind();
        core.status = MwStatus::Free;
        true
    }

    /// Pins `[va, va+len)` through the window for responder QP `qpn` of PD `pd`.
    pub(crate) fn pin(
        &self,
        rkey: u32,
        pd: &PdInner,
        qpn: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Pinned, Fault> {
        let core = self.core.lock().expect("mw");
        if core.rkey != rkey || core.status != MwStatus::Valid {
            return Err(Fault::Key);
        }
        if !std::ptr::eq(pd, Arc::as_ptr(&self.pd)) {
            return Err(Fault::Pd);
        }
        let b = core.binding.as_ref().ok_or(Fault::Bounds)?;
        if self.mw_type == MwType::Type2 && b.qpn != qpn {
            return Err(Fault::Pd);
        }
        if !b.access.contains(need) {
            return Err(Fault::Access);
        }
        let start = if b.zero_based { 0 } else { b.addr };
        let off = va.checked_sub(start).ok_or(Fault::Bounds)?;
        if off.checked_add(len).ok_or(Fault::Bounds)? > b.len {
            return Err(Fault::Bounds);
        }
        b.mr.pin(None, b.addr + off, len, Access::empty())
    }

    /// As [`MwInner::pin`] for a zero-length access at the window's first address.
    pub(crate) fn pin_base(&self, rkey: u32, pd: &PdInner, qpn: u32, need: Access) -> Result<Pinned, Fault> {
        let base = {
            let core = self.core.lock().expect("mw");
            match &core.binding {
                Some(b) if !b.zero_based => b.addr,
                _ => 0,
            }
        };
        self.pin(rkey, pd, qpn, base, 0, need)
    }

    fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            let mut core = self.core.lock().expect("mw");
            core.unbind();
            core.status = MwStatus::Invalid;
            self.dev.keys.remove(core.rkey);
            self.pd.release();
        }
    }
}

impl Drop for MwInner {
    fn drop(&mut self) {
        self.release();
    }
}

/// A memory window (`struct ibv_mw`). Cloning shares it.
#[derive(Clone)]
pub struct Mw {
    inner: Arc<MwInner>,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw").field("type", &self.inner.mw_type).field("rkey", &self.rkey()).finish()
    }
}

/// What to bind a window to (`struct ibv_mw_bind_info`).
#[derive(Clone, Copy, Debug)]
pub struct MwBind<'a> {
    /// The region (`None` with length 0 unbinds a type 1 window).
    pub mr: Option<&'a Mr>,
    /// First address, in the region's IO address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Rights granted through the window.
    pub access: Access,
}

impl Mw {
    /// Allocates a window of `mw_type` (ibv_alloc_mw(3): 1 or 2).
    ///
    /// Errors: `EINVAL` for any other type (uverbs refuses it before the driver).
    pub fn new(pd: &Pd, mw_type: u32) -> Result<Mw> {
        let mw_type = match mw_type {
            1 => MwType::Type1,
            2 => MwType::Type2,
            _ => return Err(Error::invalid("alloc_mw", "memory window types are 1 and 2")),
        };
        let pd_inner = pd.inner().clone();
        pd_inner.hold()?;
        let dev = pd_inner.ctx.dev;
        let status = if mw_type == MwType::Type1 { MwStatus::Valid } else { MwStatus::Free };
        let inner = Arc::new_cyclic(|weak: &Weak<MwInner>| {
            let rkey = dev.keys.insert(KeyTarget::Mw(weak.clone())).unwrap_or(0);
            MwInner {
                dev,
                posted_rkey: std::sync::atomic::AtomicU32::new(rkey),
                pd: pd_inner.clone(),
                mw_type,
                core: Mutex::new(MwCore { rkey, status, binding: None }),
                released: AtomicBool::new(false),
            }
        });
        if inner.rkey() == 0 {
            return Err(Error::Exhausted { what: "memory keys" });
        }
        Ok(Mw { inner })
    }

    pub(crate) fn inner(&self) -> &Arc<MwInner> {
        &self.inner
    }

    /// The current remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// The window type.
    pub fn mw_type(&self) -> MwType {
        self.inner.mw_type
    }

    /// Deallocates the window (ibv_dealloc_mw(3)): remote access through it fails from
    /// now on, and its region is no longer held.
    pub fn dealloc(&self) -> Result<()> {
        if self.inner.released.load(Ordering::Acquire) {
            return Err(Error::Destroyed { what: "memory window" });
        }
        self.inner.release();
        Ok(())
    }
}

/// `ibv_inc_rkey(3)`: the next key of a window (the low byte advances).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}
