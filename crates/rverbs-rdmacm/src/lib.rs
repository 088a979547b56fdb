//! The drop-in `librdmacm.so.1` of rverbs: rdma-core 44's librdmacm export table
//! (Debian 12), with no connection-manager logic of its own.
//!
//! # Why a shim
//!
//! The connection manager must share the one rverbs core instance of the drop-in
//! `libibverbs.so.1` (`id->verbs` is a verbs context, `rdma_create_qp` creates verbs
//! QPs), so it lives *inside* that library (crate `rverbs-capi`, module `cm`), exported
//! there only as unversioned `__rv_<name>` entry points. This library carries the public
//! names with their exact version nodes (`RDMACM_1.0` … `RDMACM_1.3`, version script
//! `librdmacm.map`, soname `librdmacm.so.1`) and forwards:
//!
//! * [`forward`]: the 41 `rdma_*` functions, each a forwarder with the C signature
//!   (pointers as `*mut c_void`/`*const c_void`, integers and return types exact) that
//!   calls `__rv_<name>` in `libibverbs.so.1`;
//! * [`rsocket`]: the 27 rsocket functions (`rsocket`, `rsend`, …), implemented here
//!   over the `rdma_*` forwarders and the verbs of `libibverbs.so.1`
//!   (docs/rsockets.md).
//!
//! # Finding libibverbs.so.1
//!
//! Once per process: `dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD)` (the library
//! the program already uses; every rdma_cm program links libibverbs); failing that the
//! file `libibverbs.so.1` in this library's own directory (from `dladdr`), then plain
//! `dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL)`. Each `__rv_<name>` is then
//! looked up on first call and cached in a static `AtomicPtr`. If the library or the
//! symbol is missing (typically rdma-core's own `libibverbs.so.1` got loaded), the call
//! fails in its convention (`ENOSYS`; `ENODEV` for `rdma_getaddrinfo` and
//! `rdma_get_devices`, as rdma-core reports a missing RDMA stack) and one line is
//! printed to stderr, once per process.
//!
//! No panic crosses the boundary: the lookup runs under `catch_unwind` (a panic counts
//! as a missing symbol) and the forwarded call lands in `ffi_guard!`ed code.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("rverbs-rdmacm builds a Linux librdmacm.so.1 and supports Linux only");

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr::null_mut;
use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::OnceLock;

/// The dynamic library the `__rv_*` entry points live in.
const LIBIBVERBS: &CStr = c"libibverbs.so.1";

/// The line printed (once) when a forwarded call cannot reach the rverbs drop-in.
const NOT_RVERBS: &str = "librdmacm (rverbs): libibverbs.so.1 is not the rverbs drop-in";

/// Sets the calling thread's `errno`.
fn set_errno(err: c_int) {
    // SAFETY: __errno_location() returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() = err };
}

/// The `libibverbs.so.1` handle (NULL if none could be opened), resolved once.
fn libibverbs() -> *mut c_void {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| open_libibverbs() as usize) as *mut c_void
}

fn open_libibverbs() -> *mut c_void {
    // SAFETY: NUL-terminated name; RTLD_NOLOAD only returns an already-loaded object.
    let handle = unsafe { libc::dlopen(LIBIBVERBS.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if !handle.is_null() {
        return handle;
    }
    if let Some(path) = sibling_libibverbs() {
        // SAFETY: NUL-terminated path of an existing file.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if !handle.is_null() {
            return handle;
        }
    }
    // SAFETY: NUL-terminated name.
    unsafe { libc::dlopen(LIBIBVERBS.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
}

/// `<directory of this library>/libibverbs.so.1`, if that file exists.
fn sibling_libibverbs() -> Option<CString> {
    // SAFETY: Dl_info is plain C data; all-zero is valid.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let addr = open_libibverbs as fn() -> *mut c_void as *const c_void;
    // SAFETY: `addr` is code of this library; `info` is a valid out-parameter.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path that lives as long as the mapping.
    let me = unsafe { CStr::from_ptr(info.dli_fname) };
    let dir = Path::new(OsStr::from_bytes(me.to_bytes())).parent()?;
    let candidate = dir.join(OsStr::from_bytes(LIBIBVERBS.to_bytes()));
    if !candidate.is_file() {
        return None;
    }
    CString::new(candidate.into_os_string().into_encoded_bytes()).ok()
}

/// The address of `symbol` (NUL-terminated `__rv_<name>`) in `libibverbs.so.1`, cached
/// in `slot`; `None` if the library or the symbol is missing.
#[doc(hidden)]
pub fn resolve(slot: &AtomicPtr<c_void>, symbol: &'static str) -> Option<*mut c_void> {
    let cached = slot.load(Ordering::Acquire);
    if !cached.is_null() {
        return Some(cached);
    }
    let found = std::panic::catch_unwind(|| {
        let handle = libibverbs();
        if handle.is_null() {
            return null_mut();
        }
        // SAFETY: live handle (never closed); `symbol` is NUL-terminated.
        unsafe { libc::dlsym(handle, symbol.as_ptr().cast::<c_char>()) }
    })
    .unwrap_or(null_mut());
    if found.is_null() {
        return None;
    }
    slot.store(found, Ordering::Release);
    Some(found)
}

/// The failure path of a forwarder whose target is missing: prints [`NOT_RVERBS`] once
/// per process, then sets `errno = err`.
#[doc(hidden)]
pub fn missing(err: c_int) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if !REPORTED.swap(true, Ordering::Relaxed) {
        let _ = writeln!(std::io::stderr(), "{NOT_RVERBS}");
    }
    set_errno(err);
}

/// The value a forwarder returns when its target is missing (after [`missing`]):
/// `minus_one` (-1, `ENOSYS`), `null` (NULL, `ENOSYS`), `zero` (0, `ENOSYS`), `void`
/// (`ENOSYS`), or `with { block }` (the block, which may use the arguments and must
/// call [`missing`] itself).
macro_rules! on_missing {
    (minus_one) => {{
        $crate::missing(libc::ENOSYS);
        -1
    }};
    (null) => {{
        $crate::missing(libc::ENOSYS);
        ::core::ptr::null_mut()
    }};
    (zero) => {{
        $crate::missing(libc::ENOSYS);
        0
    }};
    (void) => {{
        $crate::missing(libc::ENOSYS);
    }};
    (with $body:block) => {
        $body
    };
}

/// Exports the Rust function `$name` (an `extern "C"` fn with a mangled, non-exported
/// symbol) as `$name@@$node`: the assembler defines a global alias `__rvcm_$name` of it
/// and `.symver` binds that alias to the versioned public name, in the same module (a
/// `.symver` in another codegen unit fails to link in debug builds). The alias itself
/// is not exported: rustc's version script does not list it (it is no Rust export) and
/// `librdmacm.map` ends in `local: *`, so the dynamic symbol table holds exactly the
/// public versioned names, like rdma-core's. Same `.symver` technique as
/// rverbs-capi's `export!`, minus its unversioned `__rv_*` twins.
macro_rules! bind_version {
    ($name:ident, $node:literal) => {
        ::core::arch::global_asm!(
            concat!(".globl __rvcm_", stringify!($name)),
            concat!(".type __rvcm_", stringify!($name), ", @function"),
            concat!(".set __rvcm_", stringify!($name), ", {f}"),
            concat!(".symver __rvcm_", stringify!($name), ", ", stringify!($name), "@@", $node),
            f = sym $name,
        );
    };
}

/// Defines forwarders: for each
///
/// ```ignore
/// #[forward("RDMACM_1.0", minus_one)]
/// fn rdma_listen(id: *mut c_void, backlog: c_int) -> c_int;
/// ```
///
/// an `extern "C"` function `rdma_listen` that calls `__rv_rdma_listen` of
/// `libibverbs.so.1` with the same arguments, or returns the [`on_missing!`] value of
/// the named convention when that cannot be found, exported as
/// `rdma_listen@@RDMACM_1.0` (see [`bind_version!`]).
/// `librdmacm.map` must list the public name in the same node (tests/exports.rs).
macro_rules! forward {
    ($(
        $(#[doc = $doc:literal])*
        #[forward($node:literal, $conv:ident $($fail:block)?)]
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {$(
        $(#[doc = $doc])*
        ///
        /// # Safety
        ///
        /// C entry point: the contract of the C function of the same name in
        /// `<rdma/rdma_cma.h>` / `<rdma/rdma_verbs.h>` (rdma-core 44).
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            static TARGET: ::std::sync::atomic::AtomicPtr<::core::ffi::c_void> =
                ::std::sync::atomic::AtomicPtr::new(::core::ptr::null_mut());
            type Target = unsafe extern "C" fn($($ty),*) $(-> $ret)?;
            match $crate::resolve(&TARGET, concat!("__rv_", stringify!($name), "\0")) {
                Some(f) => {
                    // SAFETY: `__rv_<name>` of the rverbs libibverbs.so.1 is defined
                    // with this C signature (typed pointers there, `void *` here).
                    let f = unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, Target>(f) };
                    // SAFETY: the caller's contract is the callee's.
                    unsafe { f($($arg),*) }
                }
                None => on_missing!($conv $($fail)?),
            }
        }
        bind_version!($name, $node);
    )*};
}

/// Defines functions implemented in this library: for each
///
/// ```ignore
/// #[export("RDMACM_1.0")]
/// fn rclose(socket: c_int) -> c_int { enosys() }
/// ```
///
/// an `extern "C"` function `rclose` exported as `rclose@@RDMACM_1.0` (see
/// [`bind_version!`]).
macro_rules! export {
    ($(
        $(#[doc = $doc:literal])*
        #[export($node:literal)]
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    )*) => {$(
        $(#[doc = $doc])*
        ///
        /// # Safety
        ///
        /// C entry point: the contract of the C function of the same name in
        /// `<rdma/rsocket.h>` (rdma-core 44).
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? $body
        bind_version!($name, $node);
    )*};
}

pub mod forward;
pub mod rsocket;
