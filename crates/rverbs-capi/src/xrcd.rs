//! XRC domains: the `verbs_context` ops `open_xrcd` / `close_xrcd` behind the inline
//! `ibv_open_xrcd` / `ibv_close_xrcd` (verbs.h; the inline `ibv_close_xrcd` calls its op
//! unchecked, so both are set together), and `get_srq_num`.
//!
//! XRC SRQs are created by the `create_srq_ex` op (srq.rs), XRC initiator and target QPs
//! by `ibv_create_qp` / the `create_qp_ex` op (qp.rs).

use core::ffi::c_int;
use std::cell::UnsafeCell;
use std::os::fd::BorrowedFd;

use crate::abi::*;
use crate::live;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, null_errno};

/// An XRC domain handed to C: `struct ibv_xrcd`, then the core domain.
#[repr(C)]
pub struct XrcdObj {
    xrcd: UnsafeCell<ibv_xrcd>,
    core: rverbs::Xrcd,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for XrcdObj {
    const KIND: live::Kind = live::Kind::Xrcd;
}

impl XrcdObj {
    /// The domain behind an `ibv_xrcd *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `xrcd` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(xrcd: *const ibv_xrcd) -> Option<&'a XrcdObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(xrcd) }
    }

    /// The core domain.
    pub fn core(&self) -> &rverbs::Xrcd {
        &self.core
    }

    /// The context pointer recorded in the public struct.
    pub fn context_ptr(&self) -> *mut ibv_context {
        // SAFETY: reading a field of our own allocation.
        unsafe { (*self.xrcd.get()).context }
    }
}

/// `verbs_context.open_xrcd` (`ibv_open_xrcd(3)`). Errors: NULL with `errno`.
///
/// Rule: rdma-core `ibv_cmd_open_xrcd`: `comp_mask` bits at or above
/// `IBV_XRCD_INIT_ATTR_RESERVED` are `EOPNOTSUPP`; both `FD` and `OFLAGS` are required
/// (`EINVAL`).
/// Rule: uverbs `ib_uverbs_open_xrcd`: `fd == -1` opens a private domain; any other fd
/// must be open (`EBADF`) and names the file whose domain is shared (`O_CREAT`,
/// `O_EXCL` as in open(2); the core answers `EAGAIN` / `EINVAL`).
pub(crate) unsafe extern "C" fn rverbs_open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return null_errno(libc::EINVAL);
        };
        if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
            return null_errno(libc::EOPNOTSUPP);
        }
        let both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & both != both {
            return null_errno(libc::EINVAL);
        }
        let core = if a.fd == -1 {
            ctx.core().open_xrcd(None, a.oflags)
        } else {
            // SAFETY: F_GETFD only reads the descriptor table.
            if a.fd < 0 || unsafe { libc::fcntl(a.fd, libc::F_GETFD) } < 0 {
                return null_errno(libc::EBADF);
            }
            // SAFETY: the fd is open (checked just above) and the application keeps it
            // open during this call (ibv_open_xrcd(3)); it is only fstat'ed.
            let fd = unsafe { BorrowedFd::borrow_raw(a.fd) };
            ctx.core().open_xrcd(Some(fd), a.oflags)
        };
        let core = match core {
            Ok(x) => x,
            Err(e) => return null_errno(e.c_errno()),
        };
        let xrcd = ibv_xrcd {
            context: ctx.as_ptr(),
        };
        let obj = Box::new(XrcdObj {
            xrcd: UnsafeCell::new(xrcd),
            core,
        });
        let p = Box::into_raw(obj);
        live::register(p);
        p.cast()
    })
}

/// `verbs_context.close_xrcd` (`ibv_close_xrcd(3)`; the inline calls it unchecked).
/// Returns 0 or an errno: `EBUSY` while XRC SRQs or target QPs of the domain exist.
pub(crate) unsafe extern "C" fn rverbs_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { XrcdObj::from_raw(xrcd) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.close() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<XrcdObj, _>(xrcd) };
        0
    })
}

