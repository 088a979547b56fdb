//! Protection domains.

use core::ffi::c_int;
use std::cell::UnsafeCell;

use crate::abi::*;
use crate::live;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, not_supported_null, not_supported_void, null_errno};

/// A PD handed to C: `struct ibv_pd`, then the core PD.
#[repr(C)]
pub struct PdObj {
    pd: UnsafeCell<ibv_pd>,
    core: rverbs::Pd,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for PdObj {
    const KIND: live::Kind = live::Kind::Pd;
}

impl PdObj {
    /// The PD behind an `ibv_pd *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `pd` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(pd: *mut ibv_pd) -> Option<&'a PdObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(pd) }
    }

    /// The `struct ibv_pd *` handed to C.
    pub fn as_ptr(&self) -> *mut ibv_pd {
        // The whole object, not just the field: C hands this pointer back to us.
        (self as *const Self).cast_mut().cast()
    }

    /// The core PD.
    pub fn core(&self) -> &rverbs::Pd {
        &self.core
    }

    /// The context pointer recorded in the public struct.
    pub fn context_ptr(&self) -> *mut ibv_context {
        // SAFETY: reading a field of our own allocation.
        unsafe { (*self.pd.get()).context }
    }
}

export! {
    /// Allocates a protection domain (`ibv_alloc_pd(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: verbs.c: the library sets `pd->context`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        let core = match ctx.core().alloc_pd() {
            Ok(pd) => pd,
            Err(e) => return null_errno(e.c_errno()),
        };
        let pd = ibv_pd { context: ctx.as_ptr(), handle: core.handle() };
        let obj = Box::new(PdObj { pd: UnsafeCell::new(pd), core });
        let p = Box::into_raw(obj);
        live::register(p);
        p.cast()
    }
}

export! {
    /// Deallocates a protection domain (`ibv_dealloc_pd(3)`). Returns 0 or an errno
    /// (`EBUSY` while objects still use it).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.dealloc() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<PdObj, _>(pd) };
        0
    }
}

export! {
    /// Imports a PD of another process by handle (`ibv_import_pd(3)`).
    /// Errors: NULL with `errno = EOPNOTSUPP` (contexts cannot be imported).
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_pd(_context: *mut ibv_context, _pd_handle: u32) -> *mut ibv_pd {
        not_supported_null()
    }
}

export! {
    /// Releases an imported PD without destroying it (`ibv_unimport_pd(3)`); nothing can
    /// have been imported, so this only sets `errno = EOPNOTSUPP`.
    #[export("IBVERBS_1.10", void)]
    pub unsafe fn ibv_unimport_pd(_pd: *mut ibv_pd) {
        not_supported_void()
    }
}
