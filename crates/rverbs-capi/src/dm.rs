//! Device memory (`ibv_alloc_dm(3)`): `verbs_context.alloc_dm`, `free_dm`, `reg_dm_mr`,
//! and the two copy functions `struct ibv_dm` carries for the inline
//! `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm` (which call them unchecked).
//!
//! The memory is the core's [`rverbs::Dm`]: a shared segment that peer processes of the
//! host map through a region registered over it (docs/memory.md, "Device memory").

use core::ffi::{c_int, c_uint, c_void};
use std::cell::UnsafeCell;

use crate::abi::*;
use crate::context::ContextObj;
use crate::ffi::{null_errno, ToErrno};
use crate::live;
use crate::mr::MrObj;
use crate::pd::PdObj;

/// Device memory handed to C: `struct ibv_dm`, then the core allocation.
#[repr(C)]
pub struct DmObj {
    dm: UnsafeCell<ibv_dm>,
    core: rverbs::Dm,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for DmObj {
    const KIND: live::Kind = live::Kind::Dm;
}

impl DmObj {
    /// The device memory behind an `ibv_dm *`; `None` for NULL, a foreign pointer or
    /// freed memory, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `dm` is any pointer; if it is a live object of this library, it is not freed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(dm: *mut ibv_dm) -> Option<&'a DmObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(dm) }
    }
}

/// `verbs_context.alloc_dm` (`ibv_alloc_dm(3)`). Errors: NULL with `errno`.
///
/// Rule: `struct ibv_alloc_dm_attr` defines no `comp_mask` bit: any bit, or a NULL
/// `attr`, is `EINVAL` (mlx5's `_mlx5dv_alloc_dm`, `check_comp_mask`); a length beyond
/// `max_dm_size` is `EINVAL`, one that fits it but not what is left `ENOMEM` (the core's
/// rules).
pub(crate) unsafe extern "C" fn rverbs_alloc_dm(context: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let a = match unsafe { attr.as_ref() } {
            Some(a) if a.comp_mask == 0 => *a,
            _ => return null_errno(libc::EINVAL),
        };
        let core = match ctx.core().alloc_dm(a.length, a.log_align_req) {
            Ok(dm) => dm,
            Err(e) => return null_errno(e.c_errno()),
        };
        let dm = ibv_dm {
            context: ctx.as_ptr(),
            memcpy_to_dm: Some(rverbs_memcpy_to_dm),
            memcpy_from_dm: Some(rverbs_memcpy_from_dm),
            comp_mask: 0,
            handle: core.handle(),
        };
        let p = Box::into_raw(Box::new(DmObj { dm: UnsafeCell::new(dm), core }));
        live::register(p);
        p.cast()
    })
}

/// `verbs_context.free_dm` (`ibv_free_dm(3)`): 0 or an errno (`EBUSY` while a memory
/// region uses it; `EINVAL` for what is not live device memory).
pub(crate) unsafe extern "C" fn rverbs_free_dm(dm: *mut ibv_dm) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { DmObj::from_raw(dm) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.free() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up; `obj` is not used after this.
        unsafe { live::free::<DmObj, _>(dm) };
        0
    })
}

/// The body both copies share: the live device memory, a NULL host address with a
/// length `EFAULT`, then `copy` with the host bytes (an empty slice for a zero length,
/// whose offset the core still checks, as mlx5 does) and the core's errno.
///
/// # Safety
/// `host_addr` is NULL or points to `length` bytes `copy` may read or write.
unsafe fn dm_copy(dm: *mut ibv_dm, host_addr: *mut u8, length: usize, copy: impl FnOnce(&rverbs::Dm, *mut u8) -> rverbs::Result<()>) -> c_int {
    // SAFETY: caller contract.
    let Some(obj) = (unsafe { DmObj::from_raw(dm) }) else {
        return libc::EINVAL;
    };
    if host_addr.is_null() && length != 0 {
        return libc::EFAULT;
    }
    // A slice may not start at NULL, even an empty one.
    let host = if length == 0 { core::ptr::NonNull::dangling().as_ptr() } else { host_addr };
    match copy(&obj.core, host) {
        Ok(()) => 0,
        Err(e) => e.c_errno(),
    }
}

/// `ibv_dm.memcpy_to_dm` (`ibv_memcpy_to_dm`): 0 or an errno (`EFAULT` for a range
/// outside the allocation or a NULL source, then `EINVAL` for an offset or length not in
/// 4-byte units: the core's rules, mlx5's order).
unsafe extern "C" fn rverbs_memcpy_to_dm(dm: *mut ibv_dm, dm_offset: u64, host_addr: *const c_void, length: usize) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: C contract: `host_addr` points to `length` readable bytes; `dm_copy`
        // hands a non-null `p` (dangling only for a zero length).
        unsafe {
            dm_copy(dm, host_addr.cast_mut().cast(), length, |core, p| {
                core.copy_to(dm_offset, core::slice::from_raw_parts(p, length))
            })
        }
    })
}

/// `ibv_dm.memcpy_from_dm` (`ibv_memcpy_from_dm`): as [`rverbs_memcpy_to_dm`], the other
/// way.
unsafe extern "C" fn rverbs_memcpy_from_dm(host_addr: *mut c_void, dm: *mut ibv_dm, dm_offset: u64, length: usize) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: C contract: `host_addr` points to `length` writable bytes; `dm_copy`
        // hands a non-null `p` (dangling only for a zero length).
        unsafe {
            dm_copy(dm, host_addr.cast(), length, |core, p| {
                core.copy_from(dm_offset, core::slice::from_raw_parts_mut(p, length))
            })
        }
    })
}

/// `verbs_context.reg_dm_mr` (`ibv_reg_dm_mr`, in ibv_alloc_dm(3)). Errors: NULL with
/// `errno` (`EINVAL` for access bits a region over device memory cannot have, without
/// IBV_ACCESS_ZERO_BASED, or for a range outside the allocation: the core's rules).
pub(crate) unsafe extern "C" fn rverbs_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let (Some(pd_obj), Some(dm_obj)) = (unsafe { PdObj::from_raw(pd) }, unsafe { DmObj::from_raw(dm) }) else {
            return null_errno(libc::EINVAL);
        };
        let access = rverbs::Access::from_bits_retain(access);
        let core = match pd_obj.core().reg_dm_mr(&dm_obj.core, dm_offset, length, access) {
            Ok(mr) => mr,
            Err(e) => return null_errno(e.c_errno()),
        };
        // Zero-based: the region's address in the C struct is 0, as mlx5 reports it.
        let p = MrObj::register_new(pd_obj, pd, core::ptr::null_mut(), length, core);
        p.cast()
    })
}
