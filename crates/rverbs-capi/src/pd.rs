//! Protection domains.
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.

use core::ffi::c_int;

use crate::abi::*;
use crate::ffi::{not_supported_errno, not_supported_null, not_supported_void};

export! {
    /// Allocates a protection domain (`ibv_alloc_pd(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: verbs.c: the library sets `pd->context`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_alloc_pd(_context: *mut ibv_context) -> *mut ibv_pd {
        // TODO(core): allocate a core PD as `{ ibv_pd, private }`, set pd.context; return &pd.
        not_supported_null()
    }
}

export! {
    /// Deallocates a protection domain (`ibv_dealloc_pd(3)`). Returns 0 or an errno
    /// (`EBUSY` while objects still use it).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dealloc_pd(_pd: *mut ibv_pd) -> c_int {
        // TODO(core): recover the core PD from the pointer and destroy it (EBUSY if in use).
        not_supported_errno()
    }
}

export! {
    /// Imports a PD of another process by handle (`ibv_import_pd(3)`).
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_pd(_context: *mut ibv_context, _pd_handle: u32) -> *mut ibv_pd {
        // TODO(core): only with shareable contexts (see ibv_import_device); else EOPNOTSUPP.
        not_supported_null()
    }
}

export! {
    /// Releases an imported PD without destroying it (`ibv_unimport_pd(3)`).
    #[export("IBVERBS_1.10", void)]
    pub unsafe fn ibv_unimport_pd(_pd: *mut ibv_pd) {
        // TODO(core): free the local handle of an imported PD.
        not_supported_void()
    }
}
