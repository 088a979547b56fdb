//! Memory regions (and the device-memory import/unimport pair).
//!
//! rdma-core applies `ibv_dontfork_range` around registrations; rverbs pins nothing.

use core::ffi::{c_int, c_uint, c_void};
use std::cell::UnsafeCell;

use crate::abi::*;
use crate::live;
use crate::ffi::{ToErrno, not_supported_null, not_supported_void, null_errno, set_errno};
use crate::pd::PdObj;

/// An MR handed to C: `struct ibv_mr`, then the core MR, whether this `ibv_mr` was
/// imported (ibv_import_mr(3)), and the command file in which `mr->handle` names it.
#[repr(C)]
pub struct MrObj {
    mr: UnsafeCell<ibv_mr>,
    core: rverbs::Mr,
    imported: bool,
    file: std::sync::Arc<crate::cmd_file::CmdFile>,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for MrObj {
    const KIND: live::Kind = live::Kind::Mr;
}

impl MrObj {
    /// The MR behind an `ibv_mr *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `mr` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(mr: *mut ibv_mr) -> Option<&'a MrObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(mr) }
    }

    /// The core MR.
    pub fn core(&self) -> &rverbs::Mr {
        &self.core
    }

    /// Hands `core`, just registered on `pd` (`pd_ptr`, as C passed it), to C as a new live
    /// `struct ibv_mr` at `addr`; its handle, the lkey, names it in the command file.
    pub(crate) fn register_new(pd: &PdObj, pd_ptr: *mut ibv_pd, addr: *mut c_void, length: usize, core: rverbs::Mr) -> *mut MrObj {
        pd.file().add_mr(&core);
        Self::publish(pd, pd_ptr, addr, length, core, false)
    }

    fn publish(pd: &PdObj, pd_ptr: *mut ibv_pd, addr: *mut c_void, length: usize, core: rverbs::Mr, imported: bool) -> *mut MrObj {
        let mr = ibv_mr {
            context: pd.context_ptr(),
            pd: pd_ptr,
            addr,
            length,
            handle: core.lkey(),
            lkey: core.lkey(),
            rkey: core.rkey(),
        };
        let obj = MrObj { mr: UnsafeCell::new(mr), core, imported, file: pd.file().clone() };
        let p = Box::into_raw(Box::new(obj));
        live::register(p);
        p
    }
}

export! {
    /// Registers a memory region (`ibv_reg_mr(3)`); remote addresses equal local ones.
    /// Errors: NULL with `errno`.
    ///
    /// Rule: verbs.h: with non-constant access flags the `ibv_reg_mr` macro calls
    /// [`ibv_reg_mr_iova2`]`(pd, addr, length, (uintptr_t)addr, access)` instead.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut ibv_mr {
        // SAFETY: forwarded caller contract.
        unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
    }
}

export! {
    /// Registers a memory region whose remote address space starts at `iova`
    /// (`ibv_reg_mr_iova(3)`). Errors: NULL with `errno`.
    #[export("IBVERBS_1.7", null)]
    pub unsafe fn ibv_reg_mr_iova(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_int,
    ) -> *mut ibv_mr {
        // SAFETY: forwarded caller contract.
        unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
    }
}

export! {
    /// Registers a memory region (`ibv_reg_mr_iova2`, what perftest always calls).
    /// Errors: NULL with `errno`.
    ///
    /// Rule: verbs.h: `IBV_ACCESS_OPTIONAL_RANGE` bits are ignored (the core
    /// masks them); remote VA `x` maps to `addr + (x - iova)`; fill context, pd, addr,
    /// length, lkey, rkey.
    /// Errors: `EINVAL` for a NULL PD, `EFAULT` for a NULL `addr` without
    /// IBV_ACCESS_ON_DEMAND (as rxe: the kernel fails to pin page 0); the core's errno
    /// otherwise (on demand: `EOVERFLOW` for a range that wraps, as `ib_umem_odp_get`).
    #[export("IBVERBS_1.8", null)]
    pub unsafe fn ibv_reg_mr_iova2(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_uint,
    ) -> *mut ibv_mr {
        // SAFETY: caller contract.
        let Some(pd_obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        let access = rverbs::Access::from_bits_retain(access);
        let odp = access.contains(rverbs::Access::ON_DEMAND);
        // Implicit on-demand paging (ibv_reg_mr(3)): NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND.
        if addr.is_null() && !odp {
            // The kernel's `ib_umem_get`: no pages is EINVAL, pinning page 0 fails EFAULT.
            // An on-demand registration pins nothing (`ib_umem_odp_get`): page 0 is a
            // range like any other, whose accesses fault (the core's rules).
            return null_errno(if length == 0 { libc::EINVAL } else { libc::EFAULT });
        }
        if !odp {
            if let Err(e) = check_pages(addr as usize, length) {
                return null_errno(e);
            }
        }
        // SAFETY: the C contract of ibv_reg_mr(3): [addr, addr + length) is memory of
        // the caller that stays valid until ibv_dereg_mr; the device accesses it
        // concurrently like a NIC.
        let core =
            match unsafe { pd_obj.core().reg_mr_iova(addr.cast(), length, iova, access) } {
                Ok(mr) => mr,
                Err(e) => return null_errno(e.c_errno()),
            };
        MrObj::register_new(pd_obj, pd, addr, length, core).cast()
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
        // The device has no dma-buf importer: EOPNOTSUPP (pyverbs skips).
        not_supported_null()
    }
}

export! {
    /// Re-registers a memory region (`ibv_rereg_mr(3)`). Returns 0 or a negative
    /// `IBV_REREG_MR_ERR_*` code with `errno`.
    ///
    /// Rule: verbs.c (`ibv_rereg_mr`): not a plain MR (an imported one,
    /// `IBV_MR_TYPE_IMPORTED_MR`), unknown flags, CHANGE_TRANSLATION
    /// with a NULL `addr` or 0 `length`, or `access` without CHANGE_ACCESS give
    /// `IBV_REREG_MR_ERR_INPUT` with `errno = EINVAL` and leave the MR as it was.
    /// Rule: otherwise the core changes the region in place (the keys stay the same) and
    /// the library updates `mr->pd` (CHANGE_PD) and `mr->addr`/`mr->length`
    /// (CHANGE_TRANSLATION); a failure is `IBV_REREG_MR_ERR_CMD` with the core's errno
    /// (`EINVAL` for bad access flags or a PD that is not ours or of another context,
    /// `EBUSY` while memory windows are bound).
    #[export("IBVERBS_1.1", value(IBV_REREG_MR_ERR_CMD))]
    pub unsafe fn ibv_rereg_mr(
        mr: *mut ibv_mr,
        flags: c_int,
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { MrObj::from_raw(mr) }) else {
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        };
        let flags = flags as c_uint;
        let bad_input = obj.imported
            || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (length == 0 || addr.is_null()))
            || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0);
        if bad_input {
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        }
        let cmd_err = |e: c_int| {
            set_errno(e);
            IBV_REREG_MR_ERR_CMD
        };
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: caller contract.
            match unsafe { PdObj::from_raw(pd) } {
                // uverbs looks the PD handle up in the MR's own context's file.
                // Contexts sharing a command file share it (ibv_import_device(3)).
                Some(p) if std::sync::Arc::ptr_eq(p.file(), &obj.file) => Some(p),
                _ => return cmd_err(libc::EINVAL),
            }
        } else {
            None
        };
        let core_flags = rverbs::ReregFlags::from_bits_truncate(flags)
            - rverbs::ReregFlags::TRANSLATION;
        let new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS != 0)
            .then(|| rverbs::Access::from_bits_retain(access as c_uint));
        let core_pd = new_pd.map(PdObj::core);
        if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            if let Err(e) = check_pages(addr as usize, length) {
                return cmd_err(e);
            }
        }
        let r = if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            // SAFETY: the C contract of ibv_rereg_mr(3) with CHANGE_TRANSLATION: the new
            // range is memory of the caller that stays valid until the region is
            // deregistered or re-registered again (as for ibv_reg_mr).
            unsafe {
                obj.core.rereg_translation(core_flags, addr.cast(), length, core_pd, new_access)
            }
        } else {
            obj.core.rereg(core_flags, core_pd, new_access)
        };
        if let Err(e) = r {
            return cmd_err(e.c_errno());
        }
        // SAFETY: fields of our allocation (rdma-core updates them the same way).
        unsafe {
            let m = obj.mr.get();
            if let Some(p) = new_pd {
                (*m).pd = p.as_ptr();
            }
            if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
                (*m).addr = addr;
                (*m).length = length;
            }
        }
        0
    }
}

export! {
    /// Deregisters a memory region (`ibv_dereg_mr(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { MrObj::from_raw(mr) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.dereg() {
            return e.c_errno();
        }
        // Its handle names nothing any more, in every context of the file.
        obj.file.remove_mr(obj.core.lkey());
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<MrObj, _>(mr) };
        0
    }
}

export! {
    /// Another `ibv_mr` for an MR of the command file of `pd`'s context, named by its
    /// handle (`ibv_import_mr(3)`): the same registration (keys, length), on `pd`.
    /// Errors: NULL with `errno`.
    ///
    /// Rule: ibv_import_mr(3): `mr_handle` is `mr->handle` of an MR of the context, or of a
    /// context sharing its command fd; NOTES: the imported MR's `addr` is NULL. As the
    /// kernel's query of the handle (`ibv_cmd_query_mr`), the MR is not checked against
    /// `pd`, which becomes `mr->pd`. The import is released by `ibv_unimport_mr`, the MR
    /// destroyed by `ibv_dereg_mr` of any of its `ibv_mr`s; `ibv_rereg_mr` refuses an
    /// imported MR (rdma-core's `ibv_rereg_mr`: not `IBV_MR_TYPE_MR`).
    /// Errors: `EINVAL` for a PD that is not ours; `ENOENT` for a handle that names no MR
    /// of the file (never registered, deregistered, or of another context's file: the
    /// kernel's uverbs lookup, `lookup_get_idr_uobject`).
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr {
        // SAFETY: caller contract.
        let Some(pd_obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        let Some(core) = pd_obj.file().mr(mr_handle) else {
            return null_errno(libc::ENOENT);
        };
        let length = core.len();
        MrObj::publish(pd_obj, pd, core::ptr::null_mut(), length, core, true).cast()
    }
}

export! {
    /// Releases an `ibv_mr` without deregistering the MR (`ibv_unimport_mr(3)`): the MR
    /// stays in its command file, importable by handle, until `ibv_dereg_mr`.
    ///
    /// Rule: ibv_unimport_mr(3) undoes what the import did without going to the kernel;
    /// as in rdma-core's mlx5 (it frees the `ibv_mr`), any `ibv_mr` may be released so.
    /// Errors (`errno`, nothing released): `EINVAL` for a pointer that is not a live MR of
    /// ours.
    #[export("IBVERBS_1.10", void)]
    pub unsafe fn ibv_unimport_mr(mr: *mut ibv_mr) {
        // SAFETY: the caller gives the `ibv_mr` up; a pointer that is not a live MR of ours
        // is refused unread.
        if !unsafe { live::free::<MrObj, _>(mr) } {
            set_errno(libc::EINVAL);
        }
    }
}

export! {
    /// Imports device memory of another process by handle (`ibv_import_dm(3)`).
    /// Errors: NULL with `errno = EOPNOTSUPP` (no device memory, no shared contexts).
    #[export("IBVERBS_1.13", null)]
    pub unsafe fn ibv_import_dm(_context: *mut ibv_context, _dm_handle: u32) -> *mut ibv_dm {
        not_supported_null()
    }
}

export! {
    /// Releases imported device memory without freeing it (`ibv_unimport_dm(3)`).
    #[export("IBVERBS_1.13", void)]
    pub unsafe fn ibv_unimport_dm(_dm: *mut ibv_dm) {
        // Nothing can have been imported.
        not_supported_void()
    }
}

/// Rule: a registration spans at most 2^32 - 1 pages: the kernel's `ib_umem_get`
/// (drivers/infiniband/core/umem.c), which rdma-core's `ibv_reg_mr` and `ibv_rereg_mr`
/// reach on rxe, refuses more with EINVAL before pinning anything. Empty and wrapping
/// ranges are left to the core (EINVAL there too).
fn check_pages(addr: usize, length: usize) -> Result<(), c_int> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let Some(last) = addr.checked_add(length.saturating_sub(1)) else {
        return Ok(());
    };
    let pages = (last / page - addr / page) as u64 + 1;
    if length != 0 && pages > u64::from(u32::MAX) {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `verbs_context.advise_mr` (`ibv_advise_mr(3)`): 0 or an errno.
///
/// Rule: ibv_advise_mr(3): `EINVAL` for an invalid PD or flags (only
/// `IBV_ADVISE_MR_FLAG_FLUSH`, which asks for the prefetch to be done on return: it always
/// is here), or an empty list (the kernel's UVERBS_METHOD_ADVISE_MR, uverbs_std_types_mr.c:
/// `uverbs_get_flags32`, the SGE list's minimum size); `EOPNOTSUPP` for an advice outside
/// `enum ibv_advise_mr_advice` (mlx5's `mlx5_ib_advise_mr`); then the core's rules per SGE
/// (`Pd::advise_mr`: `ENOENT`, `EINVAL`, `EPERM`, `EFAULT`, in mlx5's order).
pub(crate) unsafe extern "C" fn rverbs_advise_mr(
    pd: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(pd_obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return libc::EINVAL;
        };
        if flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0 || num_sge == 0 || sg_list.is_null() {
            return libc::EINVAL;
        }
        let advice = match advice {
            IBV_ADVISE_MR_ADVICE_PREFETCH => rverbs::Advice::Prefetch,
            IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE => rverbs::Advice::PrefetchWrite,
            IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => rverbs::Advice::PrefetchNoFault,
            _ => return libc::EOPNOTSUPP,
        };
        // SAFETY: C contract: `sg_list` holds `num_sge` entries; `ibv_sge` is `Sge`.
        let sges = unsafe { core::slice::from_raw_parts(sg_list.cast::<rverbs::Sge>(), num_sge as usize) };
        match pd_obj.core().advise_mr(advice, sges) {
            Ok(()) => 0,
            Err(e) => e.c_errno(),
        }
    })
}
