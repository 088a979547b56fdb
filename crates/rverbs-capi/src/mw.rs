//! Memory windows: the `ibv_context.ops` slots `alloc_mw` and `dealloc_mw` behind the
//! inline `ibv_alloc_mw` / `ibv_dealloc_mw` (verbs.h); `bind_mw`, which posts on a QP, is
//! `qp.rs`'s.
//!
//! Rule: the inline `ibv_alloc_mw` NULL-checks `alloc_mw`; `ibv_bind_mw` and
//! `ibv_dealloc_mw` call their slots unchecked, so all three are set together.
//! Rule: `struct ibv_mw { context, pd, rkey, handle, type }` is kept current: a type 1
//! bind writes the new rkey into `mw->rkey` right after the bind is posted (rxe
//! `rxe_bind_mw`); a type 2 window's `rkey` is what the application chose in its BIND_MW
//! work request and is not written back (rdma-core `providers/rxe/rxe.c`).

use core::ffi::c_int;
use std::cell::UnsafeCell;

use rverbs::{Access, MwBind};

use crate::abi::*;
use crate::live;
use crate::ffi::{ToErrno, null_errno};
use crate::mr::MrObj;
use crate::pd::PdObj;

/// A memory window handed to C: `struct ibv_mw`, then the core window.
#[repr(C)]
pub struct MwObj {
    mw: UnsafeCell<ibv_mw>,
    core: rverbs::Mw,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for MwObj {
    const KIND: live::Kind = live::Kind::Mw;
}

impl MwObj {
    /// The window behind an `ibv_mw *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `mw` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(mw: *const ibv_mw) -> Option<&'a MwObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(mw) }
    }

    /// The core window.
    pub fn core(&self) -> &rverbs::Mw {
        &self.core
    }

    /// The `struct ibv_mw *` handed to C.
    pub(crate) fn as_ptr(&self) -> *mut ibv_mw {
        // The whole object, not just the field: C hands this pointer back to us.
        (self as *const Self).cast_mut().cast()
    }
}

/// `ibv_mw_bind_info` as the core's bind. `Err(EINVAL)` for an MR pointer that is not
/// one of ours (NULL is "no region", which only a zero-length type 1 bind accepts).
///
/// # Safety
/// `info.mr` is NULL or a live MR of this library (C contract).
pub(crate) unsafe fn bind_from_c<'a>(info: &ibv_mw_bind_info) -> Result<MwBind<'a>, c_int> {
    let mr = if info.mr.is_null() {
        None
    } else {
        // SAFETY: caller contract.
        Some(
            unsafe { MrObj::from_raw(info.mr) }
                .ok_or(libc::EINVAL)?
                .core(),
        )
    };
    Ok(MwBind {
        mr,
        addr: info.addr,
        length: info.length,
        access: Access::from_bits_retain(info.mw_access_flags),
    })
}

/// `ibv_context.ops.alloc_mw` (`ibv_alloc_mw(3)`). Errors: NULL with `errno`.
///
/// Rule: types 1 and 2 only; any other type is `EINVAL` (uverbs refuses it before the
/// driver, `ib_uverbs_alloc_mw`). The library fills context, pd, rkey, handle and type.
pub(crate) unsafe extern "C" fn rverbs_alloc_mw(
    pd: *mut ibv_pd,
    mw_type: ibv_mw_type,
) -> *mut ibv_mw {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(pd_obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        let core = match rverbs::Mw::new(pd_obj.core(), mw_type) {
            Ok(mw) => mw,
            Err(e) => return null_errno(e.c_errno()),
        };
        let rkey = core.rkey();
        let mw = ibv_mw {
            context: pd_obj.context_ptr(),
            pd,
            rkey,
            handle: rkey >> 8,
            type_: mw_type,
        };
        let obj = Box::new(MwObj {
            mw: UnsafeCell::new(mw),
            core,
        });
        let p = Box::into_raw(obj);
        live::register(p);
        p.cast()
    })
}

/// `ibv_context.ops.dealloc_mw` (`ibv_dealloc_mw(3)`). Returns 0 or an errno.
///
/// Rule: remote access through the window fails from now on and its region is no longer
/// held (rxe `rxe_mw.c` unbinds at dealloc).
pub(crate) unsafe extern "C" fn rverbs_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { MwObj::from_raw(mw) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.dealloc() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<MwObj, _>(mw) };
        0
    })
}
