//! Protection domains.
//!
//! Rule: ibv_alloc_pd(3): memory regions, queue pairs, SRQs and address handles belong
//! to one PD; a local or remote key is only honoured for a QP of the same PD.
//! Rule: ibv_dealloc_pd(3): fails with EBUSY while objects still belong to the PD.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::mr::endpoint::Endpoint;
use crate::mr::{Mr, MrInit};
use crate::qp::{Qp, QpInit};
use crate::srq::{Srq, SrqInit};

pub(crate) struct PdInner {
    pub(crate) ctx: Arc<ContextInner>,
    pub(crate) id: u32,
    /// Objects belonging to the PD; the top bit marks it deallocated.
    users: AtomicU32,
}

const DEALLOCATED: u32 = 1 << 31;

impl PdInner {
    /// Registers one more object in the PD.
    pub(crate) fn hold(&self) -> Result<()> {
        self.users
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u & DEALLOCATED == 0).then_some(u + 1)
            })
            .map(|_| ())
            .map_err(|_| Error::Destroyed { what: "protection domain" })
    }

    /// An object of the PD went away.
    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// The endpoint of the PD's device, whose keys name the PD's regions and windows.
    pub(crate) fn endpoint(&self) -> &'static Endpoint {
        self.ctx.dev
    }
}

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

impl Drop for PdInner {
    fn drop(&mut self) {
        // Nothing names the handle any more: its regions, QPs and SRQs held the PD.
        FREE_PDS.lock().expect("pd handles").push(self.id);
    }
}

/// A protection domain (`struct ibv_pd`). Cloning shares it.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("handle", &self.inner.id).finish()
    }
}

impl Pd {
    pub(crate) fn new(ctx: Arc<ContextInner>) -> Result<Self> {
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
            inner: Arc::new(PdInner { ctx, id, users: AtomicU32::new(0) }),
        })
    }

    pub(crate) fn from_inner(inner: Arc<PdInner>) -> Self {
        Pd { inner }
    }

    pub(crate) fn inner(&self) -> &Arc<PdInner> {
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
    /// Errors: `EINVAL` for a zero length or an illegal access combination;
    /// `EOPNOTSUPP` for ON_DEMAND or unknown access bits.
    pub fn alloc_mr(&self, len: usize, access: crate::Access) -> Result<Mr> {
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
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: crate::Access) -> Result<Mr> {
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
        access: crate::Access,
    ) -> Result<Mr> {
        Mr::register(self.inner.clone(), MrInit { addr: addr as usize, len, iova, access })
    }

    /// Creates a queue pair (ibv_create_qp(3)).
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        Qp::new(self.inner.clone(), init)
    }

    /// Creates a shared receive queue (ibv_create_srq(3)).
    pub fn create_srq(&self, init: &SrqInit) -> Result<Srq> {
        Srq::new(self.inner.clone(), init)
    }

    /// Deallocates the PD (ibv_dealloc_pd(3)).
    ///
    /// Errors: `EBUSY` while MRs, QPs, SRQs or AHs still belong to it.
    pub fn dealloc(&self) -> Result<()> {
        match self.inner.users.compare_exchange(0, DEALLOCATED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(u) if u & DEALLOCATED != 0 => Err(Error::Destroyed { what: "protection domain" }),
            Err(_) => Err(Error::Busy { what: "protection domain" }),
        }
    }
}
