//! Protection domains (ibv_alloc_pd(3)): the scope of memory regions, QPs and address
//! handles.

use std::sync::Arc;

use rverbs_abi::ibv_pd;

use super::context::{Context, ContextInner};
use super::library::{check, last_errno};
use crate::error::Result;

pub(super) struct PdInner {
    pub(super) pd: *mut ibv_pd,
    pub(super) ctx: Arc<ContextInner>,
    destroyed: bool,
}

// SAFETY: `pd` is owned by this value; libibverbs' verbs are thread-safe.
unsafe impl Send for PdInner {}
// SAFETY: as for Send.
unsafe impl Sync for PdInner {}

impl PdInner {
    fn dealloc(&mut self) -> Result<()> {
        self.destroyed = true;
        // SAFETY: `pd` came from ibv_alloc_pd; no region, QP or AH of it is left (each
        // holds an Arc of this value); deallocated once.
        check(unsafe { (self.ctx.verbs.sym.ibv_dealloc_pd)(self.pd) })
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.dealloc() {
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
        Ok(Pd { inner: Arc::new(PdInner { pd, ctx: ctx.inner.clone(), destroyed: false }) })
    }

    /// The PD's handle (`ibv_pd.handle`), the number the provider gave it.
    pub fn handle(&self) -> u32 {
        // SAFETY: `pd` is allocated for as long as `self` lives.
        unsafe { (*self.inner.pd).handle }
    }

    /// The `struct ibv_pd`, for a library that takes it (rdma_create_qp(3)); allocated
    /// as long as `self` lives.
    pub fn as_raw(&self) -> *mut ibv_pd {
        self.inner.pd
    }

    /// The context the PD was allocated in.
    pub fn context(&self) -> Context {
        Context { inner: self.inner.ctx.clone() }
    }

    /// Deallocates the PD now (ibv_dealloc_pd(3)) and returns its error; `EBUSY` without
    /// deallocating while another handle, a region, a QP or an address handle of it
    /// lives (they hold it). Dropping the last handle deallocates too, logging an error.
    pub fn dealloc(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.dealloc(),
            Err(_) => Err(crate::error::Error::Busy { what: "protection domain" }),
        }
    }
}
