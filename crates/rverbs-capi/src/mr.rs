//! Memory regions (and the device-memory import/unimport pair).
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.
//! rdma-core applies `ibv_dontfork_range` around registrations; rverbs pins nothing.

use core::ffi::{c_int, c_uint, c_void};

use crate::abi::*;
use crate::ffi::{not_supported_errno, not_supported_null, not_supported_void, set_errno};

export! {
    /// Registers a memory region (`ibv_reg_mr(3)`); remote addresses equal local ones.
    /// Errors: NULL with `errno`.
    ///
    /// Rule: verbs.h: with non-constant access flags the `ibv_reg_mr` macro calls
    /// [`ibv_reg_mr_iova2`]`(pd, addr, length, (uintptr_t)addr, access)` instead.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_reg_mr(
        _pd: *mut ibv_pd,
        _addr: *mut c_void,
        _length: usize,
        _access: c_int,
    ) -> *mut ibv_mr {
        // TODO(core): same as ibv_reg_mr_iova2(pd, addr, length, addr as u64, access).
        not_supported_null()
    }
}

export! {
    /// Registers a memory region whose remote address space starts at `iova`
    /// (`ibv_reg_mr_iova(3)`). Errors: NULL with `errno`.
    #[export("IBVERBS_1.7", null)]
    pub unsafe fn ibv_reg_mr_iova(
        _pd: *mut ibv_pd,
        _addr: *mut c_void,
        _length: usize,
        _iova: u64,
        _access: c_int,
    ) -> *mut ibv_mr {
        // TODO(core): same as ibv_reg_mr_iova2 with `access as c_uint`.
        not_supported_null()
    }
}

export! {
    /// Registers a memory region (`ibv_reg_mr_iova2`, what perftest always calls).
    /// Errors: NULL with `errno`.
    ///
    /// Rule: reference §4.4: ignore `IBV_ACCESS_OPTIONAL_RANGE` bits; remote VA `x` maps
    /// to `addr + (x - iova)`; fill context, pd, addr, length, lkey, rkey.
    #[export("IBVERBS_1.8", null)]
    pub unsafe fn ibv_reg_mr_iova2(
        _pd: *mut ibv_pd,
        _addr: *mut c_void,
        _length: usize,
        _iova: u64,
        _access: c_uint,
    ) -> *mut ibv_mr {
        // TODO(core): register [addr, addr+length) at iova with the core MR table.
        not_supported_null()
    }
}

export! {
    /// Registers a dma-buf backed memory region (`ibv_reg_dmabuf_mr(3)`).
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.12", null)]
    pub unsafe fn ibv_reg_dmabuf_mr(
        _pd: *mut ibv_pd,
        _offset: u64,
        _length: usize,
        _iova: u64,
        _fd: c_int,
        _access: c_int,
    ) -> *mut ibv_mr {
        // TODO(core): mmap the dma-buf fd range and register it, or keep EOPNOTSUPP.
        not_supported_null()
    }
}

export! {
    /// Re-registers a memory region (`ibv_rereg_mr(3)`). Returns 0 or a negative
    /// `IBV_REREG_MR_ERR_*` code with `errno`.
    #[export("IBVERBS_1.1", value(IBV_REREG_MR_ERR_CMD))]
    pub unsafe fn ibv_rereg_mr(
        _mr: *mut ibv_mr,
        _flags: c_int,
        _pd: *mut ibv_pd,
        _addr: *mut c_void,
        _length: usize,
        _access: c_int,
    ) -> c_int {
        // TODO(core): validate flags (ERR_INPUT), then re-register the core MR.
        set_errno(libc::EOPNOTSUPP);
        IBV_REREG_MR_ERR_INPUT
    }
}

export! {
    /// Deregisters a memory region (`ibv_dereg_mr(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dereg_mr(_mr: *mut ibv_mr) -> c_int {
        // TODO(core): remove the MR from the core MR table and free it (EBUSY if MWs are bound).
        not_supported_errno()
    }
}

export! {
    /// Imports an MR of another process by handle (`ibv_import_mr(3)`).
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_mr(_pd: *mut ibv_pd, _mr_handle: u32) -> *mut ibv_mr {
        // TODO(core): only with shareable contexts (see ibv_import_device); else EOPNOTSUPP.
        not_supported_null()
    }
}

export! {
    /// Releases an imported MR without deregistering it (`ibv_unimport_mr(3)`).
    #[export("IBVERBS_1.10", void)]
    pub unsafe fn ibv_unimport_mr(_mr: *mut ibv_mr) {
        // TODO(core): free the local handle of an imported MR.
        not_supported_void()
    }
}

export! {
    /// Imports device memory of another process by handle (`ibv_import_dm(3)`).
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.13", null)]
    pub unsafe fn ibv_import_dm(_context: *mut ibv_context, _dm_handle: u32) -> *mut ibv_dm {
        // TODO(core): only with shareable contexts and device memory; else EOPNOTSUPP.
        not_supported_null()
    }
}

export! {
    /// Releases imported device memory without freeing it (`ibv_unimport_dm(3)`).
    #[export("IBVERBS_1.13", void)]
    pub unsafe fn ibv_unimport_dm(_dm: *mut ibv_dm) {
        // TODO(core): free the local handle of imported device memory.
        not_supported_void()
    }
}
