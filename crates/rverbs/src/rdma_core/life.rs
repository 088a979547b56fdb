//! The life of a backend object that any of its handles may destroy (`destroy(&self)`,
//! as the soft types): calls through a handle run under a shared lock, a destruction
//! takes it alone, so no call ever reaches a `struct ibv_*` that is being or has been
//! destroyed; and the live children that name the object (a QP its PD and CQs, a region
//! or an address handle its PD, a CQ its channel) are counted, so that destroying an
//! object still in use is refused with `EBUSY` before the provider is asked
//! (ibv_destroy_cq(3), ibv_dealloc_pd(3), ibv_destroy_comp_channel(3)).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use crate::error::{Error, Result};

/// Whether an object is destroyed, behind the lock its calls share, and how many live
/// children use it.
pub(super) struct Life {
    /// `true` once destroyed.
    gate: RwLock<bool>,
    /// Live (not destroyed) children that name the object.
    users: AtomicU32,
    /// What the object is, for the errors (`"queue pair"`).
    what: &'static str,
}

/// A call in progress on a live object: the object is not destroyed until it is dropped.
pub(super) type Entered<'a> = RwLockReadGuard<'a, bool>;

impl Life {
    pub(super) fn new(what: &'static str) -> Life {
        Life { gate: RwLock::new(false), users: AtomicU32::new(0), what }
    }

    /// Enters a call on the object: `EINVAL` (`Error::Destroyed`) once it is destroyed.
    pub(super) fn enter(&self) -> Result<Entered<'_>> {
        let g = self.gate.read().unwrap_or_else(|p| p.into_inner());
        if *g {
            return Err(Error::Destroyed { what: self.what });
        }
        Ok(g)
    }

    /// Whether the object was destroyed (by [`Life::destroy`]).
    pub(super) fn is_destroyed(&self) -> bool {
        *self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A child that names the object was made (called while the object is entered, so
    /// that no destruction runs between the check and the count).
    pub(super) fn attach(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// A child that named the object was destroyed.
    pub(super) fn detach(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Destroys the object with `verb` once no call is in progress: `EINVAL`
    /// (`Error::Destroyed`) if it already is, `EBUSY` while a child uses it, else
    /// `verb`'s result. An error leaves the object as it was, usable.
    pub(super) fn destroy(&self, verb: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut g = self.gate.write().unwrap_or_else(|p| p.into_inner());
        if *g {
            return Err(Error::Destroyed { what: self.what });
        }
        if self.users.load(Ordering::Acquire) > 0 {
            return Err(Error::Busy { what: self.what });
        }
        verb()?;
        *g = true;
        Ok(())
    }
}
