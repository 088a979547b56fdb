//! Address handles (ibv_create_ah(3)).
//!
//! Rule: on an Ethernet (RoCE) port an address handle must carry a GRH (`is_global`),
//! whose `sgid_index` names an entry of the GID table (pyverbs `test_create_ah_roce`;
//! ib_core `rdma_check_ah_attr`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::pd::{Pd, PdInner};
use crate::qp::attr::AhAttr;

pub(crate) struct AhInner {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) attr: AhAttr,
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
        f.debug_struct("Ah").field("attr", &self.inner.attr).finish()
    }
}

impl Ah {
    /// Creates an address handle (ibv_create_ah(3)).
    pub fn new(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        attr.check("create_ah", pd.inner().ctx.dev.gids.len())?;
        pd.inner().hold()?;
        Ok(Ah {
            inner: Arc::new(AhInner {
                pd: pd.inner().clone(),
                attr: *attr,
                destroyed: AtomicBool::new(false),
            }),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<AhInner> {
        &self.inner
    }

    /// The address vector.
    pub fn attr(&self) -> AhAttr {
        self.inner.attr
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
