//! The libibverbs loaded at run time: `dlopen` of `libibverbs.so.1` (or the file named by
//! `RVERBS_LIBIBVERBS`) through `libloading`, and the exported symbols the backend calls.
//!
//! Only the functions `<infiniband/verbs.h>` (rdma-core 44) declares as exported symbols
//! are looked up here. The verbs the header defines `static inline` over the context's ops
//! table (`ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv`) and the
//! macros (`ibv_query_port` over `verbs_context.query_port`, `ibv_reg_mr` over
//! `ibv_reg_mr_iova2` when the access flags are not a compile-time constant) are followed
//! where they are called, as the header does.

use core::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use rverbs_abi::*;

use crate::error::{Error, Result};

/// The environment variable naming the libibverbs file to load instead of
/// `libibverbs.so.1` (docs/rdma-core-backend.md).
pub(super) const LIBIBVERBS_VAR: &str = "RVERBS_LIBIBVERBS";

/// Declares the table of exported functions of a library loaded at run time, `Symbols`
/// (one field per function, `pub(super)` where it is invoked), and `Symbols::resolve`,
/// which looks each one up in a `libloading::Library` by its name. The one definition
/// for this backend's libibverbs and for rverbs-cm's librdmacm
/// (`rverbs_cm::rdma_core`), which invokes it as `rverbs::rdma_core_symbols!`; the
/// invoking crate depends on `libloading`. Not part of the API (hidden from the
/// documentation).
///
/// Each row is `name: fn(argument types) -> return type;`, the prototype the library's
/// header (rdma-core 44) declares for that exported name. The pointers are valid only
/// while the `Library` they were resolved in stays loaded: the holder of the table keeps
/// it beside the table.
#[doc(hidden)]
#[macro_export]
macro_rules! rdma_core_symbols {
    ($(#[$meta:meta])* $($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(super) struct Symbols {
            $(pub(super) $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl Symbols {
            /// Resolves every symbol of the table in `lib`.
            fn resolve(lib: &::libloading::Library) -> ::std::result::Result<Self, ::libloading::Error> {
                Ok(Symbols {
                    $(
                        // SAFETY: the type is the prototype the library's header declares
                        // for this name (the invocation's row); the pointer is used only
                        // while the table's holder keeps `lib` loaded.
                        $name: *unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        }?,
                    )*
                })
            }
        }
    };
}

crate::rdma_core_symbols! {
    /// The exported libibverbs functions the backend calls, resolved once at load.
    ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list: fn(*mut *mut ibv_device) -> ();
    ibv_get_device_name: fn(*mut ibv_device) -> *const c_char;
    ibv_get_device_guid: fn(*mut ibv_device) -> u64;
    ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device: fn(*mut ibv_context) -> c_int;
    ibv_query_device: fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    ibv_query_port: fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;
    ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    _ibv_query_gid_ex: fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int;
    ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr_iova2: fn(*mut ibv_pd, *mut c_void, usize, u64, u32) -> *mut ibv_mr;
    ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
    ibv_create_comp_channel: fn(*mut ibv_context) -> *mut ibv_comp_channel;
    ibv_destroy_comp_channel: fn(*mut ibv_comp_channel) -> c_int;
    ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
    ibv_get_cq_event: fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ibv_ack_cq_events: fn(*mut ibv_cq, u32) -> ();
    ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_query_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
    ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
    ibv_create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    ibv_destroy_ah: fn(*mut ibv_ah) -> c_int;
}

/// A loaded libibverbs: the library, kept mapped as long as anything made through it
/// lives (every object holds an `Arc<Verbs>` through its parents), and its symbols.
pub(super) struct Verbs {
    pub(super) sym: Symbols,
    _lib: libloading::Library,
}

impl Verbs {
    /// Loads libibverbs: the file named by `RVERBS_LIBIBVERBS` (an empty value counts as
    /// unset), else `libibverbs.so.1` as the dynamic loader finds it. A library that is
    /// missing or lacks a symbol is `EOPNOTSUPP` (no libibverbs, no backend).
    pub(super) fn load() -> Result<Arc<Verbs>> {
        let name = std::env::var_os(LIBIBVERBS_VAR)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "libibverbs.so.1".into());
        // SAFETY: loading runs the library's initialisers; libibverbs' (rdma-core's, or
        // rverbs' drop-in) only set up their own state. `Library::new` opens it
        // RTLD_LOCAL, so its symbols do not interpose on anything else in the process.
        let lib = unsafe { libloading::Library::new(&name) }
            .map_err(|_| Error::unsupported("rdma_core::devices", "libibverbs could not be loaded"))?;
        let sym = Symbols::resolve(&lib)
            .map_err(|_| Error::unsupported("rdma_core::devices", "libibverbs lacks a verb of rdma-core 44"))?;
        Ok(Arc::new(Verbs { sym, _lib: lib }))
    }
}

/// The error of a verb that returned NULL: `errno` as libibverbs set it (EIO if it set
/// none), as ibv_alloc_pd(3), ibv_create_cq(3), ibv_create_qp(3) … document.
pub(super) fn last_errno() -> Error {
    Error::Os(errno_or_eio())
}

/// `errno` as the C library a backend loaded set it on its failing call, or EIO if it set
/// none: the error of a libibverbs or librdmacm call that returned -1 or NULL (rverbs-cm's
/// backend over librdmacm takes it from here).
#[doc(hidden)]
pub fn errno_or_eio() -> std::io::Error {
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(0) | None => std::io::Error::from_raw_os_error(libc::EIO),
        Some(_) => e,
    }
}

/// The error of a verb that returns an errno value (ibv_modify_qp(3), ibv_post_send(3),
/// ibv_destroy_*(3): 0 on success, else the errno; some providers return -1 and set
/// `errno`, which is read then).
pub(super) fn check(rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        rc if rc < 0 => Err(last_errno()),
        rc => Err(Error::Os(std::io::Error::from_raw_os_error(rc))),
    }
}

/// `EOPNOTSUPP` for what the backend does not offer yet (docs/rdma-core-backend.md).
pub(super) fn unsupported(verb: &'static str, what: &'static str) -> Error {
    Error::unsupported(verb, what)
}
