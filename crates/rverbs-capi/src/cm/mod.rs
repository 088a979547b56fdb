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
//! Without the connection-manager engine:
//! * [`strs::rdma_event_str`];
//! * [`addrinfo::rdma_getaddrinfo`], [`addrinfo::rdma_freeaddrinfo`];
//! * [`addr::rdma_get_src_port`], [`addr::rdma_get_dst_port`];
//! * [`context::rdma_get_devices`], [`context::rdma_free_devices`],
//!   [`context::cm_context`] (the one process-wide `ibv_context` of `rverbs0` that every
//!   CM id uses as `id->verbs`) and [`context::cm_pd`] (the PD librdmacm gives every id
//!   on the device as `id->pd`).
//!
//! On the connection manager of crate `rverbs_cm` (its [`EventChannel`], [`CmId`] and
//! [`Event`] behind the C objects of [`obj`]):
//! * [`channel`]: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//!   `rdma_get_cm_event`, `rdma_ack_cm_event`;
//! * [`id`]: `rdma_create_id`, `rdma_destroy_id`, `rdma_bind_addr`, `rdma_resolve_addr`,
//!   `rdma_resolve_route`, `rdma_migrate_id`, `rdma_set_option`;
//! * [`conn`]: `rdma_listen`, `rdma_get_request`, `rdma_connect`, `rdma_accept`,
//!   `rdma_reject`, `rdma_establish`, `rdma_disconnect`, `rdma_notify`;
//! * [`qp`]: `rdma_create_qp`, `rdma_create_qp_ex`, `rdma_destroy_qp`, `rdma_init_qp_attr`;
//! * [`srq`]: `rdma_create_srq`, `rdma_create_srq_ex`, `rdma_destroy_srq`;
//! * [`ep`]: `rdma_create_ep`, `rdma_destroy_ep`;
//! * [`mcast`]: `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`
//!   (groups are host-wide: every attached QP of the host receives what is sent to one).
//!
//! Synchronous ids (`rdma_create_id(NULL, …)`, `rdma_create_ep`) own a private channel:
//! the calls librdmacm completes wait there for their event and park it in `id->event`
//! (see [`obj::Id::complete`]).
//!
//! Not supported: `AF_IB` addresses (`EINVAL`, as librdmacm on a host without AF_IB
//! support), `RDMA_OPTION_IB_PATH` (`ENOSYS`). `IBV_QPT_XRC_RECV` ids and XRC SRQs that
//! name no XRC domain get the one librdmacm opens per device ([`context::cm_xrcd`]).
//!
//! [`EventChannel`]: rverbs_cm::EventChannel
//! [`CmId`]: rverbs_cm::CmId
//! [`Event`]: rverbs_cm::Event
//!
//! The rsocket family (`rsocket`, `rsend`, …) is not here: the shim implements it over
//! these functions (docs/rsockets.md).
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

/// The address of one of this library's `export!`ed verbs (`ibv_alloc_pd`,
/// `ibv_destroy_qp`, …) as a function pointer of type `$ty`, for calling it from the CM.
///
/// ```ignore
/// type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
/// let pd = unsafe { own_verb!(crate::pd, ibv_alloc_pd as AllocPd)(ctx) };
/// ```
///
/// Why not a plain call, nor even a call through an opaque pointer: each verb carries a
/// `.symver __rv_<name>, <name>@@IBVERBS_x` in its module's asm. When release ThinLTO
/// imports *anything* from that module into another codegen unit, LLVM copies the
/// `.symver` of every symbol the importing unit *names* (`FunctionImport`: "import any
/// symver directives for symbols in DestM"), defined there or not — and a `.symver`
/// for a symbol only declared fails to assemble ("default version symbol
/// ibv_alloc_pd@@IBVERBS_1.1 must be defined"). Which units import what changes with
/// unrelated edits, so the only safe reference is one LLVM cannot see: the address is
/// loaded from the GOT by inline asm that names `__rv_<name>` in its text only.
///
/// The `const` item checks at compile time that `$ty` is the verb's type (it is
/// evaluated, never emitted, so it names nothing in the object code).
macro_rules! own_verb {
    ($($module:ident)::+, $name:ident as $ty:ty) => {{
        const _: $ty = $($module)::+::$name as $ty;
        let addr: usize;
        #[cfg(target_arch = "x86_64")]
        #[allow(unused_unsafe)]
        // SAFETY: loads a GOT entry of this library: the address of the exported
        // function `__rv_<name>` (which `export!` defines for every verb).
        unsafe {
            ::core::arch::asm!(
                concat!("mov {0}, qword ptr [rip + __rv_", stringify!($name), "@GOTPCREL]"),
                out(reg) addr,
                options(nostack, pure, readonly, preserves_flags),
            )
        };
        #[cfg(target_arch = "aarch64")]
        #[allow(unused_unsafe)]
        // SAFETY: as above.
        unsafe {
            ::core::arch::asm!(
                concat!(
                    "adrp {0}, :got:__rv_", stringify!($name), "\n",
                    "ldr {0}, [{0}, :got_lo12:__rv_", stringify!($name), "]"
                ),
                out(reg) addr,
                options(nostack, pure, readonly, preserves_flags),
            )
        };
        // SAFETY: `addr` is the address of the function `$name`, whose type is `$ty`
        // (checked above).
        #[allow(unused_unsafe)]
        let f = unsafe { ::core::mem::transmute::<usize, $ty>(addr) };
        f
    }};
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
pub mod obj;
pub mod qp;
pub mod srq;

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
