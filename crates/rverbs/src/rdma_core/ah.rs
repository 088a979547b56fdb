//! Address handles (ibv_create_ah(3)): the destination of UD sends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rverbs_abi::ibv_ah;

use super::library::{check, last_errno};
use super::pd::{Pd, PdInner};
use crate::error::{Error, Result};
use crate::rings::qp_attr::{AddressVector, AhAttr};

struct AhInner {
    ah: *mut ibv_ah,
    /// What a UD [`SendWr`](crate::SendWr) names (`UdDest::ah`); its address finds this
    /// handle in the context's table (boxed: the address stays when the value moves).
    av: Box<AddressVector>,
    pd: Arc<PdInner>,
    /// Set, under the context's table locked alone, once the handle is destroyed.
    destroyed: AtomicBool,
}

// SAFETY: `ah` is owned by this value; libibverbs' verbs are thread-safe.
unsafe impl Send for AhInner {}
// SAFETY: as for Send.
unsafe impl Sync for AhInner {}

impl AhInner {
    /// ibv_destroy_ah(3), with the context's table locked alone: no post naming the
    /// handle is in progress, and none can find it after. `EINVAL` once destroyed; an
    /// error leaves the handle as it was.
    fn destroy(&self) -> Result<()> {
        let mut table = self.pd.ctx.ahs.write().unwrap_or_else(|p| p.into_inner());
        if self.destroyed.load(Ordering::Acquire) {
            return Err(Error::Destroyed { what: "address handle" });
        }
        // SAFETY: `ah` came from ibv_create_ah and is not destroyed; no post uses it (the
        // table is locked alone).
        check(unsafe { (self.pd.ctx.verbs.sym.ibv_destroy_ah)(self.ah) })?;
        self.destroyed.store(true, Ordering::Release);
        table.remove(&(&*self.av as *const AddressVector as usize));
        self.pd.life.detach();
        Ok(())
    }
}

impl Drop for AhInner {
    fn drop(&mut self) {
        if !self.destroyed.load(Ordering::Acquire) {
            if let Err(e) = self.destroy() {
                tracing::warn!("rdma_core: ibv_destroy_ah failed: {e}");
            }
        }
    }
}

/// An address handle (ibv_create_ah(3)). A UD [`SendWr`](crate::SendWr) names it as
/// `(&ah).into()`, as with the soft [`crate::Ah`].
#[derive(Clone)]
pub struct Ah {
    inner: Arc<AhInner>,
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah").field("attr", &self.inner.av.attr).finish()
    }
}

impl Ah {
    /// Creates an address handle for `attr` in `pd` (ibv_create_ah(3)).
    pub fn new(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        let p = &pd.inner;
        // The PD stays live until the handle is counted as its user.
        let _entered = p.life.enter()?;
        let mut raw = crate::c_abi::ah_attr_to_c(attr);
        // SAFETY: the PD is live; `raw` is a valid attribute struct.
        let ah = unsafe { (p.ctx.verbs.sym.ibv_create_ah)(p.pd, &mut raw) };
        if ah.is_null() {
            return Err(last_errno());
        }
        let inner = Arc::new(AhInner {
            ah,
            av: Box::new(AddressVector { attr: *attr, pd: p.handle }),
            pd: p.clone(),
            destroyed: AtomicBool::new(false),
        });
        p.life.attach();
        p.ctx.ahs.write().unwrap_or_else(|e| e.into_inner()).insert(&*inner.av as *const AddressVector as usize, ah as usize);
        Ok(Ah { inner })
    }

    /// The attributes the handle was created with.
    pub fn attr(&self) -> AhAttr {
        self.inner.av.attr
    }

    /// Destroys the handle now (ibv_destroy_ah(3)) and returns its error; `EINVAL` if it
    /// already is. Any handle may destroy it, once no post naming it is in progress; a UD
    /// request that names it later is `EINVAL`. A refusal leaves it usable. Dropping the
    /// last handle destroys too, logging an error.
    pub fn destroy(&self) -> Result<()> {
        self.inner.destroy()
    }
}

impl<'a> From<&'a Ah> for &'a AddressVector {
    fn from(ah: &'a Ah) -> &'a AddressVector {
        &ah.inner.av
    }
}
