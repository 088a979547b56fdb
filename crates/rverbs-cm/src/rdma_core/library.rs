//! The librdmacm loaded at run time: `dlopen` of `librdmacm.so.1` (or the file named by
//! `RVERBS_LIBRDMACM`) through `libloading`, after `rverbs`' backend has loaded its
//! libibverbs, and the exported functions the backend calls (`<rdma/rdma_cma.h>`,
//! rdma-core 44). What the header defines `static inline` (`rdma_get_local_addr`,
//! `rdma_get_peer_addr`: the id's route addresses) is read from the struct, as it does.

use core::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use libc::sockaddr;
use rverbs_abi::rdma_cm::*;
use rverbs_abi::{ibv_ece, ibv_pd, ibv_qp_attr, ibv_qp_init_attr};

use crate::error::{Error, Result};

/// The environment variable naming the librdmacm file to load instead of
/// `librdmacm.so.1` (docs/rdma-core-backend.md, "rverbs-cm over librdmacm").
pub(super) const LIBRDMACM_VAR: &str = "RVERBS_LIBRDMACM";

// The table and its loader: the one definition, rverbs' (its rdma_core::library).
rverbs::rdma_core_symbols! {
    /// The exported librdmacm functions the backend calls, resolved once at load.
    rdma_create_event_channel: fn() -> *mut rdma_event_channel;
    rdma_destroy_event_channel: fn(*mut rdma_event_channel) -> ();
    rdma_create_id: fn(*mut rdma_event_channel, *mut *mut rdma_cm_id, *mut c_void, rdma_port_space) -> c_int;
    rdma_destroy_id: fn(*mut rdma_cm_id) -> c_int;
    rdma_bind_addr: fn(*mut rdma_cm_id, *mut sockaddr) -> c_int;
    rdma_resolve_addr: fn(*mut rdma_cm_id, *mut sockaddr, *mut sockaddr, c_int) -> c_int;
    rdma_resolve_route: fn(*mut rdma_cm_id, c_int) -> c_int;
    rdma_listen: fn(*mut rdma_cm_id, c_int) -> c_int;
    rdma_connect: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    rdma_accept: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    rdma_reject: fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
    rdma_disconnect: fn(*mut rdma_cm_id) -> c_int;
    rdma_establish: fn(*mut rdma_cm_id) -> c_int;
    rdma_init_qp_attr: fn(*mut rdma_cm_id, *mut ibv_qp_attr, *mut c_int) -> c_int;
    rdma_get_cm_event: fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int;
    rdma_ack_cm_event: fn(*mut rdma_cm_event) -> c_int;
    rdma_migrate_id: fn(*mut rdma_cm_id, *mut rdma_event_channel) -> c_int;
    rdma_create_qp: fn(*mut rdma_cm_id, *mut ibv_pd, *mut ibv_qp_init_attr) -> c_int;
    rdma_destroy_qp: fn(*mut rdma_cm_id) -> ();
    rdma_join_multicast_ex: fn(*mut rdma_cm_id, *mut rdma_cm_join_mc_attr_ex, *mut c_void) -> c_int;
    rdma_leave_multicast: fn(*mut rdma_cm_id, *mut sockaddr) -> c_int;
    rdma_set_option: fn(*mut rdma_cm_id, c_int, c_int, *mut c_void, usize) -> c_int;
    rdma_set_local_ece: fn(*mut rdma_cm_id, *mut ibv_ece) -> c_int;
    rdma_get_remote_ece: fn(*mut rdma_cm_id, *mut ibv_ece) -> c_int;
    rdma_reject_ece: fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
}

/// A loaded librdmacm: the library, kept mapped as long as anything made through it
/// lives (every channel and id holds an `Arc<Rdmacm>`), and its symbols.
pub(super) struct Rdmacm {
    pub(super) sym: Symbols,
    _lib: libloading::Library,
}

/// The librdmacm of this process, loaded at the first call that needs it.
pub(super) fn rdmacm() -> Result<Arc<Rdmacm>> {
    static LOADED: OnceLock<Arc<Rdmacm>> = OnceLock::new();
    if let Some(l) = LOADED.get() {
        return Ok(l.clone());
    }
    let l = load()?;
    Ok(LOADED.get_or_init(|| l).clone())
}

/// Loads librdmacm: the file named by `RVERBS_LIBRDMACM` (empty counts as unset), else
/// `librdmacm.so.1` as the dynamic loader finds it.
///
/// librdmacm opens libibverbs' devices itself (its ids' `verbs` are contexts it opened),
/// so it must use the one libibverbs `rverbs`' backend loaded: `rverbs` loads it first
/// (`RVERBS_LIBIBVERBS`, else `libibverbs.so.1`), and librdmacm reaches libibverbs by
/// the soname `libibverbs.so.1` (rdma-core's as its `NEEDED` entry, the drop-in's with
/// `dlopen`), which the dynamic loader then resolves to that object, already in the
/// process under that soname. The load checks it: the process's `libibverbs.so.1`, once
/// librdmacm is loaded, must be the backend's (the same `ibv_get_device_list`). Another
/// copy (a backend libibverbs without that soname, say) is `EOPNOTSUPP`, as is a
/// librdmacm that is missing or lacks a function of rdma-core 44.
fn load() -> Result<Arc<Rdmacm>> {
    let verbs = rverbs::rdma_core::ibv_get_device_list_address().map_err(Error::Verbs)?;
    let name = std::env::var_os(LIBRDMACM_VAR).filter(|v| !v.is_empty()).unwrap_or_else(|| "librdmacm.so.1".into());
    // SAFETY: loading runs the library's initialisers; librdmacm's (rdma-core's, or
    // rverbs' drop-in shim) only set up their own state. `Library::new` opens it
    // RTLD_LOCAL, so its symbols do not interpose on anything else in the process.
    let lib = unsafe { libloading::Library::new(&name) }.map_err(|_| unsupported("librdmacm could not be loaded"))?;
    let sym = Symbols::resolve(&lib).map_err(|_| unsupported("librdmacm lacks a function of rdma-core 44"))?;
    if process_libibverbs() != Some(verbs) {
        return Err(unsupported("librdmacm would use another libibverbs than rverbs' backend (RVERBS_LIBIBVERBS)"));
    }
    Ok(Arc::new(Rdmacm { sym, _lib: lib }))
}

/// The address of `ibv_get_device_list` in the object the process knows as
/// `libibverbs.so.1`, if one is loaded (`RTLD_NOLOAD`: never loads one).
fn process_libibverbs() -> Option<usize> {
    use libloading::os::unix::{Library, RTLD_NOW};
    // SAFETY: RTLD_NOLOAD only finds an object already loaded (its initialisers ran).
    let lib = unsafe { Library::open(Some("libibverbs.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }.ok()?;
    // SAFETY: only the symbol's address is read, never called through this type.
    unsafe { lib.get::<*const c_void>(b"ibv_get_device_list\0") }.ok().map(|s| *s as usize)
}

/// `EOPNOTSUPP` for what the backend cannot do (docs/rdma-core-backend.md).
pub(super) fn unsupported(what: &'static str) -> Error {
    Error::Verbs(rverbs::Error::Unsupported { verb: "rverbs_cm::rdma_core", what })
}

/// The error of a librdmacm call that returned -1 (or NULL): `errno` as it set it (EIO if
/// it set none), as rdma_cm(3)'s functions document.
pub(super) fn last_errno() -> Error {
    Error::Os(rverbs::rdma_core::errno_or_eio())
}

/// The result of a librdmacm call that returns 0 or -1 with `errno`.
pub(super) fn check(rc: c_int) -> Result<()> {
    if rc == 0 { Ok(()) } else { Err(last_errno()) }
}
