//! Device contexts as C sees them.
//!
//! [`ContextObj`]: a 648-byte `struct verbs_context` with the `ibv_context` at +320,
//! `abi_compat = UINTPTR_MAX`, `sz = 648` (verbs.h `verbs_get_ctx`), then the core context.
//! Every op module finds its context here; `device.rs` creates and closes contexts and
//! fills their ops tables with those modules' functions, so the op modules never import
//! the module that names them (no import loop, `crates/rverbs/tests/architecture.rs`).

use core::ffi::c_int;
use core::mem::offset_of;
use std::cell::UnsafeCell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::ffi::ToErrno;
use crate::abi::*;
use crate::cmd_file::CmdFile;
use crate::live::{self, Kind};

/// A context handed to C: `struct verbs_context` (the `ibv_context` at +320), then the
/// core context. C gets `&vctx.context`.
#[repr(C)]
pub struct ContextObj {
    pub(crate) vctx: UnsafeCell<verbs_context>,
    pub(crate) core: rverbs::Context,
    /// The command file the context is one of (`cmd_file.rs`): shared with every context
    /// imported from it, and with the PDs and MRs made through them.
    pub(crate) file: Arc<CmdFile>,
    /// `cmd_fd`: a descriptor of the file (the memfd for an opened context, the duplicate
    /// it was given for an imported one), closed with the context (ibv_import_device(3)).
    pub(crate) cmd_fd: OwnedFd,
}

impl Drop for ContextObj {
    fn drop(&mut self) {
        self.file.detach(self.cmd_fd.as_raw_fd());
    }
}

pub(crate) const CONTEXT_OFFSET: usize = offset_of!(verbs_context, context);
const _: () = assert!(CONTEXT_OFFSET == 320 && size_of::<verbs_context>() == 648);

impl ContextObj {
    /// The context behind an `ibv_context *`; `None` for NULL or a pointer that is not a
    /// live context of this library (foreign or closed), refused without reading through
    /// it (`live.rs`).
    ///
    /// # Safety
    /// `ctx` is any pointer; if it is a live context of this library, it is not closed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(ctx: *mut ibv_context) -> Option<&'a ContextObj> {
        if !live::contains(Kind::Context, ctx) {
            return None;
        }
        let obj = ctx
            .cast::<u8>()
            .wrapping_sub(CONTEXT_OFFSET)
            .cast::<ContextObj>();
        // SAFETY: the registry holds only contexts not yet closed, and a live ContextObj
        // lies CONTEXT_OFFSET bytes before the `ibv_context` handed to C.
        Some(unsafe { &*obj })
    }

    /// The `struct ibv_context *` handed to C.
    pub fn as_ptr(&self) -> *mut ibv_context {
        // From the whole object, not the field: C hands this pointer back to us.
        (self as *const Self)
            .cast_mut()
            .cast::<u8>()
            .wrapping_add(CONTEXT_OFFSET)
            .cast()
    }

    /// The core context.
    pub fn core(&self) -> &rverbs::Context {
        &self.core
    }

    /// The command file of the context (`ibv_context.cmd_fd`).
    pub fn file(&self) -> &Arc<CmdFile> {
        &self.file
    }

    /// Locks `ibv_context.mutex` (rdma-core guards channel reference counts with it).
    pub fn lock(&self) -> ContextLock<'_> {
        // SAFETY: the mutex lives in our allocation, zero-initialised (a valid
        // PTHREAD_MUTEX_INITIALIZER on glibc).
        unsafe { libc::pthread_mutex_lock(&raw mut (*self.as_ptr()).mutex) };
        ContextLock { ctx: self }
    }
}

/// Holds `ibv_context.mutex`.
pub struct ContextLock<'a> {
    ctx: &'a ContextObj,
}

impl Drop for ContextLock<'_> {
    fn drop(&mut self) {
        // SAFETY: locked by ContextObj::lock.
        unsafe { libc::pthread_mutex_unlock(&raw mut (*self.ctx.as_ptr()).mutex) };
    }
}

/// The GID entry `index` of `port`, or the errno `_ibv_query_gid_ex` reports
/// (`ENODATA` for an empty slot).
pub(crate) fn gid_entry(ctx: &ContextObj, port: u32, index: u32) -> Result<rverbs::GidEntry, c_int> {
    let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    match ctx.core.query_gid_ex(port, index) {
        Ok(e) if e.gid.is_zero() => Err(libc::ENODATA),
        Ok(e) => Ok(e),
        Err(e) => Err(e.c_errno()),
    }
}

/// The type of GID `index` of `port` as sysfs names it, for `ibv_query_gid_type`
/// (private.rs).
pub(crate) fn gid_type_sysfs(
    context: *mut ibv_context,
    port: u8,
    index: u32,
) -> Result<ibv_gid_type_sysfs, c_int> {
    // SAFETY: the caller passes the application's context pointer (caller contract).
    let ctx = unsafe { ContextObj::from_raw(context) }.ok_or(libc::EINVAL)?;
    let e = gid_entry(ctx, port.into(), index)?;
    Ok(match e.gid_type {
        rverbs::GidType::RoceV2 => IBV_GID_TYPE_SYSFS_ROCE_V2,
        rverbs::GidType::Ib | rverbs::GidType::RoceV1 => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
    })
}
