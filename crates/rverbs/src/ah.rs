//! Address handles (ibv_create_ah(3)).
//!
//! Rule: on an Ethernet (RoCE) port an address handle must carry a GRH (`is_global`),
//! whose `sgid_index` names an entry of the GID table (pyverbs `test_create_ah_roce`;
//! ib_core `rdma_check_ah_attr`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::mr::domain::PdCore;
use crate::pd::Pd;
use crate::rings::qp_attr::{AddressVector, AhAttr};

/// The state of an address handle: its PD (held until the handle is destroyed) and the
/// resolved address vector sends through it use.
struct AhInner {
    pd: Arc<PdCore>,
    av: AddressVector,
    destroyed: AtomicBool,
}

impl Drop for AhInner {
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            self.pd.release();
        }
    }
}

/// An address handle (`struct ibv_ah`). Cloning shares it.
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
    /// Creates an address handle (ibv_create_ah(3)).
    pub fn new(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        if let Some(e) = crate::fault_plan::fail(pd.inner().endpoint().slot, rverbs_proto::verb_fault::Verb::CreateAh, None, None) {
            return Err(e);
        }
        attr.check("create_ah", crate::device::of(&pd.inner().ctx).gids.len())?;
        pd.inner().hold()?;
        Ok(Ah {
            inner: Arc::new(AhInner {
                pd: pd.inner().clone(),
                av: AddressVector { attr: *attr, pd: pd.inner().id },
                destroyed: AtomicBool::new(false),
            }),
        })
    }

    /// The address vector.
    pub fn attr(&self) -> AhAttr {
        self.inner.av.attr
    }

    /// Destroys the handle (ibv_destroy_ah(3)); sends already posted keep working.
    pub fn destroy(&self) -> Result<()> {
        if self.inner.destroyed.swap(true, Ordering::AcqRel) {
            return Err(Error::Destroyed { what: "address handle" });
        }
        self.inner.pd.release();
        Ok(())
    }
}

/// The resolved address vector a UD send through the handle uses: what a work request
/// carries (`SendWr::ud(&ah, …)`, `WrBatch::set_ud_addr(&ah, …)`, [`crate::UdDest`]).
impl<'a> From<&'a Ah> for &'a AddressVector {
    fn from(ah: &'a Ah) -> &'a AddressVector {
        &ah.inner.av
    }
}
