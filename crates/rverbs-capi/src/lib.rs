//! The C ABI of rverbs: a drop-in `libibverbs.so.1` for binaries built against
//! rdma-core 44 (Debian 12). The contract is rdma-core's: `libibverbs/verbs.h` (the inline
//! ABI and struct layouts), `libibverbs/libibverbs.map.in` (the export map) and the man
//! pages; docs/capi.md describes this crate.
//!
//! # What this crate is (and is not)
//!
//! * [`abi`]: hand-written `#[repr(C)]` mirrors of `<infiniband/verbs.h>` (v44) and of
//!   the kernel ABI structs the `ibv_copy_*` helpers touch, plus the enum/flag values.
//!   `tests/layout.rs` compares every size, alignment, offset and constant with the
//!   installed header.
//! * The 145 default-version functions and the one data object of rdma-core 44's
//!   export map, each with its exact version node (`export!`, version script
//!   `libibverbs.map`). One module per verbs family; [`private`] holds the
//!   `IBVERBS_PRIVATE_34` stubs that the real `libmlx5.so.1`/`libefa.so.1` need in order
//!   to *load* next to us.
//! * No verbs logic lives here: every verb recovers its Rust object from the C pointer
//!   (one `from_raw` per type: the C struct is the first field of a `#[repr(C)]`
//!   wrapper holding the core object, like rxe's `to_rcq`; the pointer is first looked
//!   up in the private `live` registry of objects handed to C and not yet destroyed, so
//!   a foreign or freed pointer is refused without being read), translates the arguments
//!   (the private `conv` module), calls the core (`rverbs`) and maps its `Error` to the
//!   verb's errno convention. Features the core does not have (device memory, flows,
//!   WQs, counters, import/export, ODP, TSO, raw packet QPs, `open_qp`)
//!   answer `EOPNOTSUPP` in rdma-core's convention for that verb, or are left NULL in
//!   `verbs_context` where the inline wrapper turns NULL into `EOPNOTSUPP`.
//! * Objects handed to C (rdma-core `libibverbs/driver.h` layouts): devices are immortal;
//!   contexts are a 648-byte `verbs_context` (the `ibv_context` at +320,
//!   `abi_compat = UINTPTR_MAX`); every CQ is an `ibv_cq_ex` and every QP an `ibv_qp_ex`.
//!   The inline-dispatch ops
//!   (`ibv_context.ops.poll_cq/req_notify_cq/post_send/post_recv/post_srq_recv`), the
//!   memory-window ops (`alloc_mw/bind_mw/dealloc_mw`) and the `verbs_context` ops
//!   (`query_port`, `query_device_ex`, `create_cq_ex`, `create_qp_ex`, `create_srq_ex`,
//!   `get_srq_num`, `open_xrcd`, `close_xrcd`, `query_rt_values`) are set; QPs created
//!   with `send_ops_flags` carry the `ibv_wr_*` builder (private module `wr`).
//! * Hot paths (`poll_cq`, `post_send`, `post_recv`, `post_srq_recv`) allocate nothing
//!   and take no lock of their own: completions land in the caller's `ibv_wc` array
//!   (the core's `Wc` has its layout) and C work-request lists are translated into
//!   fixed-size stack chunks (`ibv_sge` is the core's `Sge`).
//!
//! # Panics
//!
//! No panic crosses the FFI boundary: every exported body and every op reachable through
//! a function pointer (`ibv_context.ops`, `verbs_context`, `ibv_cq_ex`) runs inside
//! [`ffi_guard!`],
//! which turns a panic into the verb's error convention with `errno = EIO`
//! (NULL for pointer-returning verbs, `EIO` for verbs returning a positive errno,
//! -1 for verbs returning -1).
//!
//! # Platform
//!
//! Linux only. The fixed-arity definition of the variadic `__verbs_log` is ABI-safe on
//! x86_64 SysV and aarch64; the Appendix A size asserts are checked on x86_64.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("rverbs-capi builds a Linux libibverbs.so.1 and supports Linux only");

/// Runs `$body` (a block) under `catch_unwind` and maps a panic to the error value of
/// the calling verb's convention, always setting `errno = EIO`:
///
/// | convention      | on panic returns                       | used by                       |
/// |-----------------|----------------------------------------|-------------------------------|
/// | `null`          | NULL                                   | pointer-returning verbs       |
/// | `errno`         | `EIO` (positive)                       | verbs returning 0 / errno     |
/// | `minus_one`     | `-1`                                   | verbs returning 0 / -1+errno  |
/// | `void`          | nothing                                | `void` functions              |
/// | `value(expr)`   | `expr`                                 | anything else                 |
///
/// The body must not rely on unwinding for cleanup across the boundary; a panic is a
/// bug: a panic becomes EIO, or NULL with errno EIO, and never crosses into C.
///
/// In the `null`, `errno` and `minus_one` conventions a call that succeeds (non-NULL, 0,
/// not -1) leaves the caller's `errno` as it found it: internal work that may fail
/// without failing the verb (binding UDP port 4791 while another process owns it, a
/// probe of a file) must not leave an `errno` the application would print as its own.
#[macro_export]
macro_rules! ffi_guard {
    (null, $body:block) => {
        $crate::ffi::SavedErrno::save()
            .after_ptr($crate::ffi_guard!(@run $body, $crate::ffi::panicked_null()))
    };
    (errno, $body:block) => {
        $crate::ffi::SavedErrno::save()
            .after_errno($crate::ffi_guard!(@run $body, $crate::ffi::panicked_errno()))
    };
    (minus_one, $body:block) => {
        $crate::ffi::SavedErrno::save()
            .after_minus_one($crate::ffi_guard!(@run $body, $crate::ffi::panicked_minus_one()))
    };
    (void, $body:block) => {
        $crate::ffi_guard!(@run $body, $crate::ffi::panicked_void())
    };
    (value($val:expr), $body:block) => {
        $crate::ffi_guard!(@run $body, $crate::ffi::panicked_value($val))
    };
    (@run $body:block, $on_panic:expr) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(move || $body)) {
            Ok(ret) => ret,
            Err(_) => $on_panic,
        }
    };
}

/// Defines one exported C entry point with an exact symbol version
/// (a `#[no_mangle]` function plus a `.symver` in the same module, linked by rust-lld
/// with `libibverbs.map`).
///
/// ```ignore
/// export! {
///     /// Imports a PD of another process (ibv_import_pd(3)).
///     #[export("IBVERBS_1.10", null)]
///     pub unsafe fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
///         not_supported_null()
///     }
/// }
/// ```
///
/// expands to
///
/// * a Rust function `ibv_import_pd` (callable from Rust and tests) whose *symbol* is
///   `__rv_ibv_import_pd` (`#[export_name]`), `extern "C"`, with the body wrapped in
///   [`ffi_guard!`] using the convention named in `#[export(node, convention)]`;
/// * `global_asm!(".symver __rv_ibv_import_pd, ibv_import_pd@@IBVERBS_1.10")` in the *same*
///   module (a `.symver` in another codegen unit fails to link in debug builds).
///
/// `libibverbs.map` must list the public name in the same node (tests/exports.rs
/// checks it). The `__rv_*` names additionally appear as unversioned (Base) exports
/// because rustc writes its own version script; they are harmless.
#[macro_export]
macro_rules! export {
    (
        $(#[doc = $doc:literal])*
        #[export($node:literal, $conv:ident $(($val:expr))?)]
        pub unsafe fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        ///
        /// C entry point. The caller must uphold the contract of the C function of the
        /// same name in `<infiniband/verbs.h>` / `driver.h` (rdma-core 44): pointer
        /// arguments are valid for the access that function performs.
        #[export_name = concat!("__rv_", stringify!($name))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::ffi_guard!($conv $(($val))?, $body)
        }
        ::core::arch::global_asm!(concat!(
            ".symver __rv_", stringify!($name), ", ", stringify!($name), "@@", $node
        ));
    };
    (
        $(#[doc = $doc:literal])*
        #[export($node:literal, $conv:ident $(($val:expr))?)]
        pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[doc = $doc])*
        #[export_name = concat!("__rv_", stringify!($name))]
        pub extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::ffi_guard!($conv $(($val))?, $body)
        }
        ::core::arch::global_asm!(concat!(
            ".symver __rv_", stringify!($name), ", ", stringify!($name), "@@", $node
        ));
    };
}

pub mod abi;
pub mod ffi;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub mod ah;
pub mod cm;
pub mod cmd_file;
mod conv;
pub mod context;
pub mod cq;
pub mod device;
pub mod dm;
pub mod event;
pub mod free_watch;
mod live;
pub mod misc;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod private;
pub mod qp;
pub mod srq;
pub mod strs;
mod wrlist;
pub mod xrcd;
