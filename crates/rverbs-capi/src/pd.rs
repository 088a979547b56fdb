//! Protection domains, thread domains and parent domains.
//!
//! A parent domain (ibv_alloc_parent_domain(3)) is a [`PdObj`] whose `parent` is set:
//! every verb that takes an `ibv_pd *` finds the protection domain it extends through
//! [`PdObj::core`], so MRs, MWs, QPs, SRQs and AHs created on it belong to that PD
//! (docs/memory.md, "Parent and thread domains").

use core::ffi::{c_int, c_void};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use crate::abi::*;
use crate::cmd_file::CmdFile;
use crate::live;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, null_errno, set_errno};

/// A PD handed to C: `struct ibv_pd`, then the core PD, and for a parent domain the
/// core parent domain (whose protection domain `core` is); then the command file of its
/// context (`cmd_file.rs`), in which `pd->handle` names the PD.
#[repr(C)]
pub struct PdObj {
    pd: UnsafeCell<ibv_pd>,
    core: rverbs::Pd,
    parent: Option<rverbs::ParentDomain>,
    file: Arc<CmdFile>,
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

    /// The core PD (for a parent domain, the protection domain it extends).
    pub fn core(&self) -> &rverbs::Pd {
        &self.core
    }

    /// The core parent domain, when this `ibv_pd` is one.
    pub fn parent(&self) -> Option<&rverbs::ParentDomain> {
        self.parent.as_ref()
    }

    /// The context pointer recorded in the public struct.
    pub fn context_ptr(&self) -> *mut ibv_context {
        // SAFETY: reading a field of our own allocation.
        unsafe { (*self.pd.get()).context }
    }

    /// The command file of the PD's context.
    pub fn file(&self) -> &Arc<CmdFile> {
        &self.file
    }

    /// Whether the PD belongs to `ctx`'s command file: to `ctx` or to a context imported
    /// from it or it from (the kernel checks objects against the uverbs file, not the
    /// `ibv_context`).
    pub fn in_file_of(&self, ctx: &ContextObj) -> bool {
        Arc::ptr_eq(&self.file, ctx.file())
    }

    fn publish(ctx: &ContextObj, core: rverbs::Pd, parent: Option<rverbs::ParentDomain>) -> *mut ibv_pd {
        let pd = ibv_pd { context: ctx.as_ptr(), handle: core.handle() };
        let obj = Box::new(PdObj { pd: UnsafeCell::new(pd), core, parent, file: ctx.file().clone() });
        let p = Box::into_raw(obj);
        live::register(p);
        p.cast()
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
        ctx.file().add_pd(&core);
        PdObj::publish(ctx, core, None)
    }
}

export! {
    /// Deallocates a protection domain (`ibv_dealloc_pd(3)`), or a parent domain
    /// (ibv_alloc_parent_domain(3)). Returns 0 or an errno.
    ///
    /// Rule: `EBUSY` while objects still use the PD, a parent domain among them; a parent
    /// domain is `EBUSY` while CQs created on it exist (the objects created through it
    /// otherwise belong to its protection domain, as with rdma-core's mlx5).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return libc::EINVAL;
        };
        let done = match &obj.parent {
            Some(parent) => parent.dealloc(),
            None => obj.core.dealloc(),
        };
        if let Err(e) = done {
            return e.c_errno();
        }
        if obj.parent.is_none() {
            // Its handle names nothing any more, in every context of the file.
            obj.file.remove_pd(obj.core.handle());
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<PdObj, _>(pd) };
        0
    }
}

export! {
    /// Another `ibv_pd` for a PD of the context's command file, named by its handle
    /// (`ibv_import_pd(3)`): the same protection domain (objects and keys of either are
    /// of one PD), in `context`. Errors: NULL with `errno`.
    ///
    /// Rule: ibv_import_pd(3): `pd_handle` is `pd->handle` of a PD of the context, or of a
    /// context sharing its command fd (ibv_import_device(3)); the import is released by
    /// `ibv_unimport_pd`, the PD destroyed by `ibv_dealloc_pd` of any of its `ibv_pd`s.
    /// Errors: `EINVAL` for a context that is not ours; `ENOENT` for a handle that names no
    /// PD of the file (never allocated, deallocated, or of another context's file): the
    /// kernel's uverbs lookup (`lookup_get_idr_uobject`) answers so.
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        match ctx.file().pd(pd_handle) {
            Some(core) => PdObj::publish(ctx, core, None),
            None => null_errno(libc::ENOENT),
        }
    }
}

export! {
    /// Releases an `ibv_pd` without destroying the PD (`ibv_unimport_pd(3)`): the PD stays
    /// in its command file, importable by handle, until `ibv_dealloc_pd`.
    ///
    /// Rule: ibv_unimport_pd(3) undoes what the import did without going to the kernel;
    /// as in rdma-core's mlx5, any `ibv_pd` of a PD may be released so.
    /// Errors (`errno`, nothing released): `EINVAL` for a pointer that is not a live PD of
    /// ours, or a parent domain (ibv_alloc_parent_domain(3): not an object of the command
    /// file, so never imported; `ibv_dealloc_pd` releases it).
    #[export("IBVERBS_1.10", void)]
    pub unsafe fn ibv_unimport_pd(pd: *mut ibv_pd) {
        // SAFETY: caller contract.
        match unsafe { PdObj::from_raw(pd) } {
            Some(obj) if obj.parent.is_none() => {
                // SAFETY: the caller gives the `ibv_pd` up; `obj` is not used after this.
                unsafe { live::free::<PdObj, _>(pd) };
            }
            _ => set_errno(libc::EINVAL),
        }
    }
}

/// A thread domain handed to C: `struct ibv_td`, then the core thread domain.
#[repr(C)]
pub struct TdObj {
    td: UnsafeCell<ibv_td>,
    core: rverbs::Td,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for TdObj {
    const KIND: live::Kind = live::Kind::Td;
}

impl TdObj {
    /// The thread domain behind an `ibv_td *`; `None` for NULL, a foreign pointer or a
    /// deallocated one, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// As [`PdObj::from_raw`].
    pub unsafe fn from_raw<'a>(td: *mut ibv_td) -> Option<&'a TdObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(td) }
    }
}

/// `verbs_context.alloc_td` (`ibv_alloc_td(3)`). Errors: NULL with `errno`.
///
/// Rule: `struct ibv_td_init_attr` defines no `comp_mask` bit: any bit, or a NULL
/// `init_attr`, is `EINVAL` (rdma-core's mlx5 checks the mask against 0 the same way).
pub(crate) unsafe extern "C" fn rverbs_alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: init_attr is NULL or valid (caller contract).
        match unsafe { init_attr.as_ref() } {
            Some(a) if a.comp_mask == 0 => {}
            _ => return null_errno(libc::EINVAL),
        }
        let core = match ctx.core().alloc_td() {
            Ok(td) => td,
            Err(e) => return null_errno(e.c_errno()),
        };
        let obj = Box::new(TdObj { td: UnsafeCell::new(ibv_td { context: ctx.as_ptr() }), core });
        let p = Box::into_raw(obj);
        live::register(p);
        p.cast()
    })
}

/// `verbs_context.dealloc_td` (`ibv_dealloc_td(3)`): 0 or an errno.
///
/// Rule: ibv_dealloc_td(3): `EBUSY` while a parent domain uses the thread domain.
pub(crate) unsafe extern "C" fn rverbs_dealloc_td(td: *mut ibv_td) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { TdObj::from_raw(td) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.dealloc() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up; `obj` is not used after this.
        unsafe { live::free::<TdObj, _>(td) };
        0
    })
}

/// `verbs_context.alloc_parent_domain` (`ibv_alloc_parent_domain(3)`). Errors: NULL
/// with `errno`.
///
/// Rule: `comp_mask` bits beyond ALLOCATORS | PD_CONTEXT are `EINVAL` (rdma-core's mlx5
/// `check_comp_mask`); `pd` cannot be NULL (`EINVAL`), and must be a protection domain
/// of this context, not a parent domain; `td`, when set, a thread domain of this context
/// (`EINVAL`). `pd_context` is kept only with PD_CONTEXT (0 without).
/// Rule: with ALLOCATORS and both callbacks set (mlx5's `mlx5_is_custom_alloc`; one of
/// them NULL: no custom allocation), `alloc` is asked for the send queue's ring of every
/// QP created on the parent domain (`ibv_create_qp`, `ibv_create_qp_ex`), with the parent
/// domain as `pd`, its `pd_context`, alignment 64 and `resource_type` 1
/// (`RDMA_DRIVER_UNKNOWN << 32 | 1`: rverbs has no kernel driver id; 1 is the code mlx5
/// gives its QP buffer). NULL fails the create with `ENOMEM`, `IBV_ALLOCATOR_USE_DEFAULT`
/// lets rverbs allocate it; `free` gets the same pointer and type once, in
/// `ibv_destroy_qp` (or when the create fails after `alloc`). The parent domain stays
/// `EBUSY` while such QPs exist, so `pd` is valid in `free`.
/// Deviation: no other buffer is asked for: the CQ, receive-queue and SRQ rings are
/// shared segments other processes map, allocated as if `alloc` had answered
/// `IBV_ALLOCATOR_USE_DEFAULT`, and rverbs has no doorbell record
/// (docs/memory.md, "Custom allocators").
pub(crate) unsafe extern "C" fn rverbs_alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return null_errno(libc::EINVAL);
        };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            return null_errno(libc::EINVAL);
        }
        // SAFETY: caller contract (a live PD of ours, or anything, refused unread).
        let pd = match unsafe { PdObj::from_raw(a.pd) } {
            Some(pd) if pd.parent.is_none() && pd.in_file_of(ctx) => pd,
            _ => return null_errno(libc::EINVAL),
        };
        let td = if a.td.is_null() {
            None
        } else {
            // SAFETY: caller contract, as for `pd`.
            match unsafe { TdObj::from_raw(a.td) } {
                // Of this context's command file: one core context.
                Some(td) if td.core.context().id() == ctx.core().id() => Some(&td.core),
                _ => return null_errno(libc::EINVAL),
            }
        };
        let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
            a.pd_context as usize
        } else {
            0
        };
        let callbacks = match (a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0, a.alloc, a.free) {
            (true, Some(alloc), Some(free)) => Some(Arc::new(CAllocator {
                alloc,
                free,
                pd: AtomicPtr::new(core::ptr::null_mut()),
                pd_context,
            })),
            _ => None,
        };
        let init = rverbs::ParentDomainInit {
            pd: &pd.core,
            td,
            pd_context,
            alloc: callbacks.clone().map(|c| c as Arc<dyn rverbs::QueueAllocator>),
        };
        let parent = match ctx.core().alloc_parent_domain(&init) {
            Ok(p) => p,
            Err(e) => return null_errno(e.c_errno()),
        };
        let p = PdObj::publish(ctx, parent.pd().clone(), Some(parent));
        if let Some(c) = callbacks {
            // Before the pointer reaches the application, so before any QP can ask.
            c.pd.store(p, Ordering::Release);
        }
        p
    })
}

/// `IBV_ALLOCATOR_USE_DEFAULT` of verbs.h (`(void *)-1`): `alloc` leaves the buffer to
/// the provider (ibv_alloc_parent_domain(3)). A pointer, so not among the integer
/// constants of `abi` that tests/layout.rs compares with the header.
const IBV_ALLOCATOR_USE_DEFAULT: *mut c_void = core::ptr::without_provenance_mut(usize::MAX);

/// `alloc` / `free` of an `ibv_parent_domain_init_attr`, as the core's allocator.
struct CAllocator {
    alloc: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void,
    free: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64),
    /// The parent domain's `ibv_pd *`, set once it is published.
    pd: AtomicPtr<ibv_pd>,
    /// `attr->pd_context` with PD_CONTEXT, NULL without (as mlx5 passes it).
    pd_context: usize,
}

// SAFETY: ibv_alloc_parent_domain(3) makes the application's `alloc` promise a buffer of
// the size and alignment asked (the core also checks the alignment), owned by the
// provider until it calls `free`; NULL and IBV_ALLOCATOR_USE_DEFAULT are told apart
// below. The callbacks are called from any thread, as a provider calls them.
unsafe impl rverbs::QueueAllocator for CAllocator {
    fn alloc(&self, buf: &rverbs::QueueBuffer) -> rverbs::Allocation {
        let pd = self.pd.load(Ordering::Acquire);
        // SAFETY: the application's callback, called as ibv_alloc_parent_domain(3) says.
        let p = unsafe { (self.alloc)(pd, self.pd_context as *mut c_void, buf.size, buf.alignment, buf.resource_type) };
        if p == IBV_ALLOCATOR_USE_DEFAULT {
            return rverbs::Allocation::UseDefault;
        }
        match core::ptr::NonNull::new(p.cast::<u8>()) {
            Some(p) => rverbs::Allocation::Buffer(p),
            None => rverbs::Allocation::Failed,
        }
    }

    fn free(&self, ptr: core::ptr::NonNull<u8>, buf: &rverbs::QueueBuffer) {
        let pd = self.pd.load(Ordering::Acquire);
        // SAFETY: the application's callback, with a pointer its `alloc` returned.
        unsafe { (self.free)(pd, self.pd_context as *mut c_void, ptr.as_ptr().cast(), buf.resource_type) };
    }
}
