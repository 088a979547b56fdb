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
    repr: Repr,
}

/// What an [`Ah`] is: the soft device's, or (feature `rdma-core`) one of the rdma-core
/// backend.
#[derive(Clone)]
enum Repr {
    Soft(Arc<AhInner>),
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::Ah),
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah").field("attr", &self.attr()).finish()
    }
}

impl Ah {
    /// Creates an address handle (ibv_create_ah(3)).
    pub fn new(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        #[cfg(feature = "rdma-core")]
        if let Some(pd) = pd.native() {
            return Ok(Ah { repr: Repr::Native(crate::rdma_core::Ah::new(pd, attr)?) });
        }
        let core = pd.inner()?;
        if let Some(e) = crate::fault_plan::fail(core.endpoint().slot, rverbs_proto::verb_fault::Verb::CreateAh, None, None) {
            return Err(e);
        }
        attr.check("create_ah", crate::device::of(&core.ctx).gids.len())?;
        core.hold()?;
        Ok(Ah {
            repr: Repr::Soft(Arc::new(AhInner {
                pd: core.clone(),
                av: AddressVector { attr: *attr, pd: core.id },
                destroyed: AtomicBool::new(false),
            })),
        })
    }

    /// The soft handle's state; `EOPNOTSUPP` (naming `verb`) on the rdma-core backend.
    #[cfg_attr(not(feature = "rdma-core"), allow(unused_variables))]
    fn soft(&self, verb: &'static str) -> Result<&Arc<AhInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(crate::Error::native_unsupported(verb)),
        }
    }

    /// The address vector.
    pub fn attr(&self) -> AhAttr {
        match &self.repr {
            Repr::Soft(inner) => inner.av.attr,
            #[cfg(feature = "rdma-core")]
            Repr::Native(ah) => ah.attr(),
        }
    }

    /// Destroys the handle (ibv_destroy_ah(3)); sends already posted keep working.
    /// `EINVAL` once destroyed. On the rdma-core backend, the provider's
    /// ibv_destroy_ah(3), once no post naming the handle is in progress; a UD request
    /// naming it later is `EINVAL` (docs/rdma-core-backend.md).
    pub fn destroy(&self) -> Result<()> {
        #[cfg(feature = "rdma-core")]
        if let Repr::Native(ah) = &self.repr {
            return ah.destroy();
        }
        let inner = self.soft("destroy_ah")?;
        if inner.destroyed.swap(true, Ordering::AcqRel) {
            return Err(Error::Destroyed { what: "address handle" });
        }
        inner.pd.release();
        Ok(())
    }
}

/// The resolved address vector a UD send through the handle uses: what a work request
/// carries (`SendWr::ud(&ah, …)`, `WrBatch::set_ud_addr(&ah, …)`, [`crate::UdDest`]).
impl<'a> From<&'a Ah> for &'a AddressVector {
    fn from(ah: &'a Ah) -> &'a AddressVector {
        match &ah.repr {
            Repr::Soft(inner) => &inner.av,
            #[cfg(feature = "rdma-core")]
            Repr::Native(ah) => ah.into(),
        }
    }
}
