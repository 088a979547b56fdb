//! The CM's device context and `rdma_get_devices` / `rdma_free_devices`.
//!
//! rdma_cm hands out one `ibv_context` per device, opened by the library, shared by every
//! id on that device (`id->verbs`) and never closed (docs/rpma-rdmacm.md §2.7):
//! `rdma_create_qp` compares a PD's context with `id->verbs`, applications allocate
//! PDs/CQs on `id->verbs` and on `rdma_get_devices()` entries interchangeably.
//! [`cm_context`] is that context for `rverbs0`.

use core::ffi::{c_char, c_int, CStr};
use core::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use crate::abi::{ibv_context, ibv_device, ibv_pd};
use crate::ffi::{errno, null_errno, set_errno};

// The signatures of the verbs called through `own_verb!` (see there why).
pub(super) type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
pub(super) type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
type GetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;

/// The device the CM uses.
const CM_DEVICE: &CStr = c"rverbs0";

// One context and PD per process generation: a child that fork created has a device
// (endpoint) of its own and must not use its parent's (rverbs::capi_support::process_generation).
static CONTEXT: [AtomicPtr<ibv_context>; rverbs::capi_support::GENERATIONS] =
    [const { AtomicPtr::new(null_mut()) }; rverbs::capi_support::GENERATIONS];
static OPENING: Mutex<()> = Mutex::new(());
static PD: [AtomicPtr<ibv_pd>; rverbs::capi_support::GENERATIONS] =
    [const { AtomicPtr::new(null_mut()) }; rverbs::capi_support::GENERATIONS];
static XRCD: [AtomicPtr<crate::abi::ibv_xrcd>; rverbs::capi_support::GENERATIONS] =
    [const { AtomicPtr::new(null_mut()) }; rverbs::capi_support::GENERATIONS];

fn gen() -> usize {
    rverbs::capi_support::process_generation()
}

/// The process-wide `ibv_context *` of `rverbs0` that every CM id uses as `id->verbs`:
/// opened once, on first use, through
/// [`ibv_open_device`](crate::device::ibv_open_device) (so it is an ordinary context of
/// this library: PDs, CQs and QPs created on it are ours) and never closed.
///
/// Returns NULL with `errno` if the device cannot be opened (`ENODEV` when there is no
/// `rverbs0`); a later call tries again.
pub fn cm_context() -> *mut ibv_context {
    let ctx = CONTEXT[gen()].load(Ordering::Acquire);
    if !ctx.is_null() {
        return ctx;
    }
    let _opening = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = CONTEXT[gen()].load(Ordering::Acquire);
    if !ctx.is_null() {
        return ctx;
    }
    // Librdmacm's own, never closed: not a leak of the application's.
    let ctx = rverbs::capi_support::sanitizer_internal(open_cm_device);
    if !ctx.is_null() {
        CONTEXT[gen()].store(ctx, Ordering::Release);
    }
    ctx
}

/// The PD librdmacm allocates per device and gives every id on it (`id->pd` once the
/// id's address names the device; `rdma_create_qp(id, NULL, …)`, `rdma_create_ep` with
/// no PD and rdma_verbs.h's `rdma_reg_msgs` use it): allocated on [`cm_context`] on
/// first use and never freed. NULL with `errno` on failure (a later call tries again).
pub fn cm_pd() -> *mut ibv_pd {
    let pd = PD[gen()].load(Ordering::Acquire);
    if !pd.is_null() {
        return pd;
    }
    let ctx = cm_context();
    if ctx.is_null() {
        return null_mut();
    }
    let _opening = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    let pd = PD[gen()].load(Ordering::Acquire);
    if !pd.is_null() {
        return pd;
    }
    // SAFETY: `ctx` is our immortal CM context.
    let pd = rverbs::capi_support::sanitizer_internal(|| unsafe { own_verb!(crate::pd, ibv_alloc_pd as AllocPd)(ctx) });
    if !pd.is_null() {
        PD[gen()].store(pd, Ordering::Release);
    }
    pd
}

/// The XRC domain librdmacm opens per device for `IBV_QPT_XRC_RECV` ids and the XRC
/// SRQs created on them when the application names none (librdmacm's `ucma_get_xrcd`: a
/// private domain, `fd` -1 with `O_CREAT`): opened on [`cm_context`] on first use and
/// never closed. NULL with `errno` on failure (a later call tries again).
pub fn cm_xrcd() -> *mut crate::abi::ibv_xrcd {
    let x = XRCD[gen()].load(Ordering::Acquire);
    if !x.is_null() {
        return x;
    }
    let ctx = cm_context();
    if ctx.is_null() {
        return null_mut();
    }
    let _opening = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    let x = XRCD[gen()].load(Ordering::Acquire);
    if !x.is_null() {
        return x;
    }
    let mut attr = crate::abi::ibv_xrcd_init_attr {
        comp_mask: crate::abi::IBV_XRCD_INIT_ATTR_FD | crate::abi::IBV_XRCD_INIT_ATTR_OFLAGS,
        fd: -1,
        oflags: libc::O_CREAT,
    };
    // SAFETY: `ctx` is our immortal CM context and `attr` a valid, initialised struct;
    // `rverbs_open_xrcd` is this library's own op (not an exported symbol).
    let x = unsafe { crate::xrcd::rverbs_open_xrcd(ctx, &mut attr) };
    if !x.is_null() {
        XRCD[gen()].store(x, Ordering::Release);
    }
    x
}

/// Opens `rverbs0` (NULL with `errno` on failure).
fn open_cm_device() -> *mut ibv_context {
    let mut num: c_int = 0;
    // SAFETY: `num` is a valid out-parameter.
    let list = unsafe { own_verb!(crate::device, ibv_get_device_list as GetDeviceList)(&mut num) };
    if list.is_null() {
        return null_mut(); // errno set
    }
    let mut device: *mut ibv_device = null_mut();
    for i in 0..usize::try_from(num).unwrap_or(0) {
        // SAFETY: the list holds `num` devices followed by NULL.
        let d = unsafe { *list.add(i) };
        // SAFETY: `d` is one of our immortal devices.
        let name = unsafe { own_verb!(crate::device, ibv_get_device_name as GetDeviceName)(d) };
        // SAFETY: a NUL-terminated name inside the immortal device, when non-NULL.
        if !name.is_null() && unsafe { CStr::from_ptr(name) } == CM_DEVICE {
            device = d;
            break;
        }
    }
    let ctx = if device.is_null() {
        null_errno(libc::ENODEV)
    } else {
        // SAFETY: a device of ours, from the list above (devices are immortal).
        unsafe { own_verb!(crate::device, ibv_open_device as OpenDevice)(device) }
    };
    let err = errno();
    // SAFETY: the list came from ibv_get_device_list and is freed once.
    unsafe { own_verb!(crate::device, ibv_free_device_list as FreeDeviceList)(list) };
    set_errno(err);
    ctx
}

cm_export! {
    /// The CM's device contexts (rdma_get_devices(3)): a `malloc`'d NULL-terminated
    /// array holding [`cm_context`], freed by `rdma_free_devices`. `*num_devices` (if
    /// non-NULL) gets the count, 0 on failure. Errors: NULL with `errno` (`ENODEV`: no
    /// device, `ENOMEM`).
    #[cm(null)]
    pub unsafe fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
        let set_num = |n: c_int| {
            if !num_devices.is_null() {
                // SAFETY: non-NULL out-parameter (caller contract).
                unsafe { num_devices.write(n) };
            }
        };
        let ctx = cm_context();
        if ctx.is_null() {
            set_num(0);
            return null_mut(); // errno set by cm_context
        }
        // SAFETY: malloc has no preconditions; the result is checked.
        let arr = unsafe { libc::malloc(2 * size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if arr.is_null() {
            set_num(0);
            return null_errno(libc::ENOMEM);
        }
        // SAFETY: arr holds two pointers.
        unsafe {
            arr.write(ctx);
            arr.add(1).write(null_mut());
        }
        set_num(1);
        arr
    }
}

cm_export! {
    /// Frees an array returned by `rdma_get_devices` (rdma_free_devices(3)); the
    /// contexts stay open (they belong to the CM).
    #[cm(void)]
    pub unsafe fn rdma_free_devices(list: *mut *mut ibv_context) {
        // SAFETY: `list` came from malloc in rdma_get_devices (or is NULL).
        unsafe { libc::free(list.cast()) };
    }
}
