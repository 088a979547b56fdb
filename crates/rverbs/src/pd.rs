//! Protection domains.
//!
//! Rule: ibv_alloc_pd(3): memory regions, queue pairs, SRQs and address handles belong
//! to one PD; a local or remote key is only honoured for a QP of the same PD.
//! Rule: ibv_dealloc_pd(3): fails with EBUSY while objects still belong to the PD.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::mr::domain::{ContextCore, PdCore};
use crate::mr::{Mr, MrInit, ReregFlags};
use crate::mw::Mw;
use crate::qp::{Qp, QpInit};
use crate::srq::{Srq, SrqInit};
use crate::Access;

impl Context {
    /// Allocates a protection domain (ibv_alloc_pd(3)).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self.inner().clone())
    }
}

/// PD handles: the next never used, and those of dropped PDs (reused first, so a
/// process that allocates and frees PDs forever never runs out).
static NEXT_PD: AtomicU32 = AtomicU32::new(1);
static FREE_PDS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

// The core is the PD's only state (`mr::domain`): its handle goes back to the free list
// when the core goes.
impl Drop for PdCore {
    fn drop(&mut self) {
        // Nothing names the handle any more: its regions, QPs and SRQs held the PD.
        FREE_PDS.lock().expect("pd handles").push(self.id);
    }
}

/// A protection domain (`struct ibv_pd`). Cloning shares it.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdCore>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("handle", &self.inner.id).finish()
    }
}

impl Pd {
    pub(crate) fn new(ctx: Arc<ContextCore>) -> Result<Self> {
        let reused = FREE_PDS.lock().expect("pd handles").pop();
        let id = match reused {
            Some(id) => id,
            None => {
                let id = NEXT_PD.fetch_add(1, Ordering::Relaxed);
                if id > crate::limits::MAX_PD {
                    NEXT_PD.fetch_sub(1, Ordering::Relaxed);
                    return Err(Error::Exhausted { what: "protection domains" });
                }
                id
            }
        };
        Ok(Pd {
            inner: Arc::new(PdCore::new(ctx, id)),
        })
    }

    pub(crate) fn from_inner(inner: Arc<PdCore>) -> Self {
        Pd { inner }
    }

    pub(crate) fn inner(&self) -> &Arc<PdCore> {
        &self.inner
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> Context {
        Context::from_inner(self.inner.ctx.clone())
    }

    /// A number identifying the PD in the process (`ibv_pd.handle`).
    pub fn handle(&self) -> u32 {
        self.inner.id
    }

    /// Allocates a page-aligned, zero-filled buffer of `len` bytes and registers it
    /// (the safe way to get registered memory). The memory lives until the `Mr` and every
    /// work request naming it are gone.
    ///
    /// Rule: ibv_reg_mr(3): REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE.
    /// Errors: `EINVAL` for a zero length, an illegal access combination or unknown
    /// access bits; `EOPNOTSUPP` for ON_DEMAND.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        Mr::alloc(self.inner.clone(), len, access)
    }

    /// Registers caller memory `[addr, addr + len)` (ibv_reg_mr(3)); local and remote
    /// addresses of the region equal the process addresses.
    ///
    /// # Safety
    /// The range must be valid, writable memory that stays allocated until the returned
    /// `Mr` is deregistered or dropped and every work request naming it has completed.
    /// The device reads and writes it concurrently with the program, like a NIC.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.reg_mr_iova(addr, len, addr as u64, access) }
    }

    /// Registers caller memory whose device-visible addresses start at `iova`
    /// (ibv_reg_mr_iova(3): the offset of address `x` is `x - iova`).
    ///
    /// # Safety
    /// As for [`Pd::reg_mr`].
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_iova(
        &self,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<Mr> {
        Mr::register(self.inner.clone(), MrInit { addr: addr as usize, len, iova, access })
    }

    /// Creates a queue pair (ibv_create_qp(3)).
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        Qp::new(self.inner.clone(), init, crate::device::of(&self.inner.ctx))
    }

    /// Creates a shared receive queue (ibv_create_srq(3)).
    pub fn create_srq(&self, init: &SrqInit) -> Result<Srq> {
        Srq::new_in(self.inner.clone(), &crate::device::of(&self.inner.ctx).srqs, init, None)
    }

    /// Deallocates the PD (ibv_dealloc_pd(3)).
    ///
    /// Errors: `EBUSY` while MRs, QPs, SRQs or AHs still belong to it.
    pub fn dealloc(&self) -> Result<()> {
        self.inner.dealloc()
    }
}

// The verbs-layer accessors and calls of the objects that belong to a PD: the objects
// hold the PD's core (`mr::domain::PdCore`) and never name the handle.

impl Mr {
    /// The protection domain.
    pub fn pd(&self) -> Pd {
        Pd::from_inner(self.inner().pd())
    }

    /// Changes the PD and/or the access rights in place (ibv_rereg_mr(3)); the keys stay
    /// the same. Accesses in progress finish first.
    ///
    /// Rule: flags must be non-empty; `pd` is required with `PD` and `access` with
    /// `ACCESS`, whose rules are those of registration. Address changes need
    /// [`Mr::rereg_translation`].
    /// Errors: `EINVAL` for bad combinations or access flags, `EBUSY` while memory
    /// windows are bound.
    pub fn rereg(&self, flags: ReregFlags, pd: Option<&Pd>, access: Option<Access>) -> Result<()> {
        self.rereg_inner(flags, pd.map(Pd::inner), access, None)
    }

    /// As [`Mr::rereg`], also moving the region to caller memory `[addr, addr + len)`
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`); the IO virtual address becomes `addr`.
    ///
    /// # Safety
    /// As for [`Pd::reg_mr`]: the new range must stay valid until the region is
    /// deregistered, re-registered again or dropped, and every request using it completed.
    #[allow(unsafe_code)]
    pub unsafe fn rereg_translation(
        &self,
        flags: ReregFlags,
        addr: *mut u8,
        len: usize,
        pd: Option<&Pd>,
        access: Option<Access>,
    ) -> Result<()> {
        self.rereg_inner(flags | ReregFlags::TRANSLATION, pd.map(Pd::inner), access, Some((addr as usize, len)))
    }
}

impl Mw {
    /// Allocates a window of `mw_type` in `pd` (ibv_alloc_mw(3): 1 or 2).
    ///
    /// Errors: `EINVAL` for any other type (uverbs refuses it before the driver).
    pub fn new(pd: &Pd, mw_type: u32) -> Result<Mw> {
        Mw::new_in(pd.inner(), mw_type)
    }
}

impl Qp {
    /// The protection domain.
    pub fn pd(&self) -> Pd {
        Pd::from_inner(self.inner().pd.clone())
    }
}
