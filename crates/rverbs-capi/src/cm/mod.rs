//! The rdma_cm API (`<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`, rdma-core 44) inside
//! the drop-in `libibverbs.so.1`.
//!
//! # Why here
//!
//! The connection manager creates and transitions QPs of the contexts this library hands
//! out (`id->verbs`, `rdma_create_qp`), so it must share this library's single rverbs
//! core instance. The drop-in `librdmacm.so.1` (crate `rverbs-rdmacm`) is therefore only
//! a shim: it carries rdma-core's export table with its `RDMACM_1.x` version nodes and
//! forwards each call to the `__rv_<name>` entry point defined here. This library
//! defines no `RDMACM_*` version node and no public `rdma_*` name: every function below
//! is exported only as the unversioned `__rv_<name>` (macro `cm_export!`).
//!
//! # What is real, what is a stub
//!
//! Real (no connection engine needed):
//! * [`strs::rdma_event_str`];
//! * [`addrinfo::rdma_getaddrinfo`], [`addrinfo::rdma_freeaddrinfo`];
//! * [`addr::rdma_get_src_port`], [`addr::rdma_get_dst_port`];
//! * [`context::rdma_get_devices`], [`context::rdma_free_devices`] and
//!   [`context::cm_context`], the one process-wide `ibv_context` of `rverbs0` that every
//!   CM id uses as `id->verbs`.
//!
//! Stubs, one function each, answering `ENOSYS` in the function's convention (-1, NULL,
//! or nothing for `void`) until the connection-manager engine replaces them:
//! * [`channel`]: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//!   `rdma_get_cm_event`, `rdma_ack_cm_event`;
//! * [`id`]: `rdma_create_id`, `rdma_destroy_id`, `rdma_bind_addr`, `rdma_resolve_addr`,
//!   `rdma_resolve_route`, `rdma_migrate_id`, `rdma_set_option`;
//! * [`conn`]: `rdma_listen`, `rdma_get_request`, `rdma_connect`, `rdma_accept`,
//!   `rdma_reject`, `rdma_establish`, `rdma_disconnect`, `rdma_notify`;
//! * [`qp`]: `rdma_create_qp`, `rdma_create_qp_ex`, `rdma_destroy_qp`, `rdma_init_qp_attr`;
//! * [`srq`]: `rdma_create_srq`, `rdma_create_srq_ex`, `rdma_destroy_srq`;
//! * [`ep`]: `rdma_create_ep`, `rdma_destroy_ep`;
//! * [`mcast`]: `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`;
//! * [`ece`]: `rdma_set_local_ece`, `rdma_get_remote_ece`, `rdma_reject_ece`.
//!
//! The rsocket family (`rsocket`, `rsend`, …) is not here: the shim answers it itself.
//!
//! # Error conventions (rdma-core 44)
//!
//! `int` functions return 0 or -1 with `errno`; object-returning functions NULL with
//! `errno`; `rdma_getaddrinfo` returns 0, a `getaddrinfo` `EAI_*` code, or -1 with
//! `errno`. A panic becomes the convention's error value with `errno = EIO`
//! ([`ffi_guard!`](crate::ffi_guard)).

use core::ffi::c_int;

use crate::ffi::{minus_one_errno, null_errno, set_errno, Nullable};

/// Defines one rdma_cm entry point: an `extern "C"` function whose *symbol* is
/// `__rv_<name>` (`#[export_name]`, unversioned, no `.symver`: this library must not
/// define `RDMACM_*` version nodes), with the body wrapped in
/// [`ffi_guard!`](crate::ffi_guard) using the named convention (`null`, `errno`,
/// `minus_one`, `void`, `value(expr)`). The Rust name stays `<name>`, callable from
/// Rust and tests.
///
/// ```ignore
/// cm_export! {
///     /// Creates an event channel (rdma_create_event_channel(3)).
///     #[cm(null)]
///     pub unsafe fn rdma_create_event_channel() -> *mut rdma_event_channel {
///         enosys_null()
///     }
/// }
/// ```
///
/// `crates/rverbs-rdmacm` forwards `<name>@@RDMACM_x.y` to `__rv_<name>`; its
/// `tests/exports.rs` checks that every forwarded name has its `__rv_` export here.
macro_rules! cm_export {
    (
        $(#[doc = $doc:literal])*
        #[cm($conv:ident $(($val:expr))?)]
        pub unsafe fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        ///
        /// C entry point (reached as `__rv_` + this name through librdmacm.so.1). The
        /// caller must uphold the contract of the C function of the same name in
        /// `<rdma/rdma_cma.h>` / `<rdma/rdma_verbs.h>` (rdma-core 44): pointer arguments
        /// are valid for the access that function performs.
        #[export_name = concat!("__rv_", stringify!($name))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::ffi_guard!($conv $(($val))?, $body)
        }
    };
}

pub mod abi;

pub mod addr;
pub mod addrinfo;
pub mod context;
pub mod strs;

pub mod channel;
pub mod conn;
pub mod ece;
pub mod ep;
pub mod id;
pub mod mcast;
pub mod qp;
pub mod srq;

/// The function pointer `f` made opaque to the optimiser, for calling a function of
/// this crate that carries a `.symver` (every `export!`ed verb: `ibv_open_device`,
/// `ibv_create_qp`, …) from another module.
///
/// A direct call lets release ThinLTO import the callee into the caller's codegen unit,
/// and LLVM copies the `.symver` of the callee's module asm along with it, which then
/// fails to assemble ("default version symbol ibv_open_device@@IBVERBS_1.1 must be
/// defined"). Call through a pointer instead:
///
/// ```ignore
/// type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
/// let ctx = unsafe { verb(ibv_open_device as OpenDevice)(device) };
/// ```
///
/// `F` must be a function *pointer* (a function item is zero-sized, and hiding it
/// would hide nothing; the size check below refuses it at compile time). The cost is
/// one indirect call, on control paths.
#[inline(always)]
pub fn verb<F: Copy>(f: F) -> F {
    const {
        assert!(
            size_of::<F>() == size_of::<usize>(),
            "pass a function pointer"
        )
    };
    core::hint::black_box(f)
}

/// "Not implemented yet" for functions returning 0 / -1 + `errno`: -1, `errno = ENOSYS`.
#[inline]
pub fn enosys() -> c_int {
    minus_one_errno(libc::ENOSYS)
}

/// "Not implemented yet" for pointer-returning functions: NULL, `errno = ENOSYS`.
#[inline]
pub fn enosys_null<P: Nullable>() -> P {
    null_errno(libc::ENOSYS)
}

/// "Not implemented yet" for `void` functions: only `errno = ENOSYS`.
#[inline]
pub fn enosys_void() {
    set_errno(libc::ENOSYS);
}
