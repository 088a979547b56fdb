//! Protection domains (ibv_alloc_pd(3)): the scope of memory regions, QPs and address
//! handles.

use std::sync::Arc;

use rverbs_abi::ibv_pd;

use super::context::{Context, ContextInner};
use super::library::{check, last_errno};
use super::life::Life;
use crate::error::Result;

pub(super) struct PdInner {
    pub(super) pd: *mut ibv_pd,
    pub(super) ctx: Arc<ContextInner>,
    /// `ibv_pd.handle`, read at allocation (it never changes).
    pub(super) handle: u32,
    /// Its regions, QPs and address handles are its users.
    pub(super) life: Life,
}

// SAFETY: `pd` is owned by this value; libibverbs' verbs are thread-safe.
unsafe impl Send for PdInner {}
// SAFETY: as for Send.
unsafe impl Sync for PdInner {}

impl PdInner {
    /// ibv_dealloc_pd(3).
    ///
    /// # Safety
    ///
    /// Called once, with no call on the PD in progress (under [`Life::destroy`], or
    /// in the last drop).
    unsafe fn dealloc_raw(&self) -> Result<()> {
        // SAFETY: `pd` came from ibv_alloc_pd; the caller's contract.
        check(unsafe { (self.ctx.verbs.sym.ibv_dealloc_pd)(self.pd) })
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if !self.life.is_destroyed() {
            // SAFETY: the last handle and child are gone (each holds an Arc of this
            // value); not deallocated yet.
            if let Err(e) = unsafe { self.dealloc_raw() } {
                tracing::warn!("rdma_core: ibv_dealloc_pd failed: {e}");
            }
        }
    }
}

/// A protection domain (ibv_alloc_pd(3)). Clones share it; regions, QPs and address
/// handles made in it keep it alive.
#[derive(Clone)]
pub struct Pd {
    pub(super) inner: Arc<PdInner>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("pd", &self.inner.pd).finish()
    }
}

impl Context {
    /// Allocates a protection domain (ibv_alloc_pd(3)).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::alloc(self)
    }
}

impl Pd {
    fn alloc(ctx: &Context) -> Result<Pd> {
        // SAFETY: the context is open.
        let pd = unsafe { (ctx.inner.verbs.sym.ibv_alloc_pd)(ctx.inner.ctx) };
        if pd.is_null() {
            return Err(last_errno());
        }
        // SAFETY: ibv_alloc_pd returned a valid PD.
        let handle = unsafe { (*pd).handle };
        Ok(Pd { inner: Arc::new(PdInner { pd, ctx: ctx.inner.clone(), handle, life: Life::new("protection domain") }) })
    }

    /// The PD's handle (`ibv_pd.handle`), the number the provider gave it.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The `struct ibv_pd`, for a library that takes it (rdma_create_qp(3)); allocated
    /// until the PD is deallocated.
    pub fn as_raw(&self) -> *mut ibv_pd {
        self.inner.pd
    }

    /// The context the PD was allocated in.
    pub fn context(&self) -> Context {
        Context { inner: self.inner.ctx.clone() }
    }

    /// Deallocates the PD now (ibv_dealloc_pd(3): "fails if any other resource is still
    /// associated with the PD") and returns its error: `EBUSY` while a region, a QP or an
    /// address handle of it is not destroyed, `EINVAL` if it already is. Any handle may
    /// deallocate it; the others' calls are then `EINVAL`. A refusal leaves the PD usable.
    /// Dropping the last handle and child deallocates too, logging an error.
    pub fn dealloc(&self) -> Result<()> {
        // SAFETY: under the PD's exclusive lock, once (Life::destroy).
        self.inner.life.destroy(|| unsafe { self.inner.dealloc_raw() })
    }
}

impl crate::mr::native::NativePd for Pd {
    fn handle(&self) -> u32 {
        Pd::handle(self)
    }

    fn context(&self) -> Arc<dyn crate::mr::native::NativeContext> {
        Arc::new(Pd::context(self))
    }

    fn dealloc(&self) -> Result<()> {
        Pd::dealloc(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
