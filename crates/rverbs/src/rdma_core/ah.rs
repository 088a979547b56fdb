//! Address handles (ibv_create_ah(3)): the destination of UD sends.

use std::sync::Arc;

use rverbs_abi::ibv_ah;

use super::context::AddressHandle;
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
    destroyed: bool,
}

// SAFETY: `ah` is owned by this value; libibverbs' verbs are thread-safe.
unsafe impl Send for AhInner {}
// SAFETY: as for Send.
unsafe impl Sync for AhInner {}

impl AhInner {
    fn destroy(&mut self) -> Result<()> {
        self.destroyed = true;
        self.pd.ctx.ahs.lock().unwrap_or_else(|p| p.into_inner()).remove(&(&*self.av as *const AddressVector as usize));
        // SAFETY: `ah` came from ibv_create_ah and is destroyed once, here.
        check(unsafe { (self.pd.ctx.verbs.sym.ibv_destroy_ah)(self.ah) })
    }

}

impl AddressHandle for AhInner {
    fn raw(&self) -> *mut ibv_ah {
        self.ah
    }

    fn is(&self, av: &AddressVector) -> bool {
        std::ptr::eq(&*self.av, av)
    }
}

impl Drop for AhInner {
    fn drop(&mut self) {
        if !self.destroyed {
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
        let mut raw = crate::c_abi::ah_attr_to_c(attr);
        // SAFETY: the PD is live; `raw` is a valid attribute struct.
        let ah = unsafe { (p.ctx.verbs.sym.ibv_create_ah)(p.pd, &mut raw) };
        if ah.is_null() {
            return Err(last_errno());
        }
        // SAFETY: `pd` is live; its `handle` never changes.
        let handle = unsafe { (*p.pd).handle };
        let inner = Arc::new(AhInner { ah, av: Box::new(AddressVector { attr: *attr, pd: handle }), pd: p.clone(), destroyed: false });
        p.ctx.ahs.lock().unwrap_or_else(|e| e.into_inner()).insert(&*inner.av as *const AddressVector as usize, Arc::downgrade(&inner) as std::sync::Weak<dyn AddressHandle>);
        Ok(Ah { inner })
    }

    /// The attributes the handle was created with.
    pub fn attr(&self) -> AhAttr {
        self.inner.av.attr
    }

    /// Destroys the handle now (ibv_destroy_ah(3)) and returns its error; `EBUSY`
    /// without destroying while another handle holds it.
    pub fn destroy(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.destroy(),
            Err(_) => Err(Error::Busy { what: "address handle" }),
        }
    }
}

impl<'a> From<&'a Ah> for &'a AddressVector {
    fn from(ah: &'a Ah) -> &'a AddressVector {
        &ah.inner.av
    }
}
