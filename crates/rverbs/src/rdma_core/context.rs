//! An opened device (ibv_open_device(3)): its attributes, ports and GIDs, and the
//! factory of PDs, CQs and completion channels.

use core::ffi::c_int;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rverbs_abi::*;

use super::device::{Device, DeviceList};
use super::library::{check, last_errno, Verbs};
use crate::device::{DeviceAttr, PortAttr};
use crate::error::Result;
use crate::gid::Gid;

/// The shared state of a [`Context`]: the `struct ibv_context`, the library, and the
/// address handles made in it (for the UD work requests that name them).
pub(super) struct ContextInner {
    pub(super) ctx: *mut ibv_context,
    pub(super) verbs: Arc<Verbs>,
    /// As ibv_query_device(3) wrote it at the opening.
    attr: ibv_device_attr,
    /// Address handles by the address of their [`AddressVector`](crate::AddressVector),
    /// which a UD [`SendWr`](crate::SendWr) names. A post that names one holds the lock
    /// shared until it returns, a destruction alone (so no post passes a destroyed
    /// `struct ibv_ah`).
    pub(super) ahs: AhTable,
    /// The device's name (ibv_get_device_name(3)).
    name: &'static str,
    /// The context's id in the process: the upper half of the id space, apart from the
    /// soft device's contexts (which count up from 1).
    id: u32,
    /// What keeps the context open: the device list it was opened from (closed here when
    /// the last handle goes), or the owner of a context adopted from another library,
    /// which closes it itself.
    origin: Origin,
}

/// The address handles of a context, by the address of their [`AddressVector`].
/// Each entry is the `struct ibv_ah` (its address): entries are inserted at creation
/// and removed, with the table locked alone, when the handle is destroyed, so an entry
/// found under the shared lock is a live handle of this context.
pub(super) type AhTable = RwLock<HashMap<usize, usize>>;

/// Who opened a [`ContextInner`]'s context, and so who closes it.
enum Origin {
    /// ibv_open_device(3) on a device of this list: closed on the last drop.
    Opened(#[allow(dead_code)] Arc<DeviceList>),
    /// Another library (librdmacm) opened it and closes it; the value keeps that library
    /// loaded as long as the context is used.
    Adopted(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>),
}

// SAFETY: `ctx` is owned by this value and libibverbs' verbs are thread-safe (verbs(7),
// thread safety: any verb from any thread, on any object, except using an object while
// or after it is destroyed, which the ownership here rules out); the map is behind a lock.
unsafe impl Send for ContextInner {}
// SAFETY: as for Send.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if matches!(self.origin, Origin::Adopted(_)) {
            return;
        }
        // Every child holds an Arc of this value, so none is left (ibv_close_device(3)).
        // SAFETY: `ctx` came from ibv_open_device and is closed once, here.
        if let Err(e) = check(unsafe { (self.verbs.sym.ibv_close_device)(self.ctx) }) {
            tracing::warn!("rdma_core: ibv_close_device failed: {e}");
        }
    }
}

/// A new context id: the upper half of the id space, apart from the soft device's.
fn next_id() -> u32 {
    static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1 << 31);
    NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// An opened device (ibv_open_device(3)). Clones share it; it is closed when the last
/// clone and the last object made in it are gone.
#[derive(Clone)]
pub struct Context {
    pub(super) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("ctx", &self.inner.ctx).finish()
    }
}

impl Device {
    /// Opens the device (ibv_open_device(3)); the context keeps libibverbs loaded. A
    /// device that cannot be opened is the `errno` libibverbs set.
    pub fn open(&self) -> Result<Context> {
        Context::open(&self.list, self.dev, self.name)
    }
}

impl Context {
    fn open(list: &Arc<DeviceList>, dev: *mut ibv_device, name: &'static str) -> Result<Context> {
        let verbs = list.verbs.clone();
        // SAFETY: `dev` is a device of the live `list`.
        let ctx = unsafe { (verbs.sym.ibv_open_device)(dev) };
        if ctx.is_null() {
            return Err(last_errno());
        }
        let mut raw = ibv_device_attr::zeroed();
        // SAFETY: `ctx` is open; `raw` is a valid out-struct.
        let rc = unsafe { (verbs.sym.ibv_query_device)(ctx, &mut raw) };
        let inner = ContextInner {
            ctx,
            verbs,
            attr: raw,
            ahs: RwLock::new(HashMap::new()),
            name,
            id: next_id(),
            origin: Origin::Opened(list.clone()),
        };
        check(rc)?;
        Ok(Context { inner: Arc::new(inner) })
    }

    /// Wraps a context another library opened with this process's libibverbs (the one
    /// this backend loaded): librdmacm's, the `verbs` of its ids, which rdma_create_qp(3)
    /// wants the PD and CQs of a connection's QP to be made in. The context is never
    /// closed here (its opener does); `keep` is held as long as the context is used (the
    /// opener's library, say). Objects made in it are this backend's, as in a context of
    /// [`Device::open`].
    ///
    /// # Safety
    ///
    /// `ctx` is a context opened by the libibverbs this backend loaded
    /// ([`crate::rdma_core::ibv_get_device_list_address`] tells it), and stays open as
    /// long as `keep` lives.
    pub unsafe fn adopt(ctx: *mut ibv_context, keep: Box<dyn std::any::Any + Send + Sync>) -> Result<Context> {
        if ctx.is_null() {
            return Err(crate::error::Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)));
        }
        let verbs = super::device::verbs()?;
        let mut raw = ibv_device_attr::zeroed();
        // SAFETY: the caller's contract: an open context of this libibverbs, whose
        // `device` names its device.
        let (rc, name) = unsafe {
            let rc = (verbs.sym.ibv_query_device)(ctx, &mut raw);
            (rc, super::device::interned(super::conv::c_string((verbs.sym.ibv_get_device_name)((*ctx).device))))
        };
        check(rc)?;
        let inner = ContextInner { ctx, verbs, attr: raw, ahs: RwLock::new(HashMap::new()), name, id: next_id(), origin: Origin::Adopted(keep) };
        Ok(Context { inner: Arc::new(inner) })
    }

    /// The `struct ibv_context`, for a library that takes it (librdmacm); open as long
    /// as `self` lives.
    pub fn as_raw(&self) -> *mut ibv_context {
        self.inner.ctx
    }

    /// The name of the device the context is open on.
    pub fn device_name(&self) -> &'static str {
        self.inner.name
    }

    /// The context's id, unique in the process (and apart from the soft device's).
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// The device's attributes (ibv_query_device(3)), read once when it was opened: they
    /// do not change while it is open.
    pub fn query_device(&self) -> DeviceAttr {
        crate::c_abi::device_attr_from_c(&self.inner.attr)
    }

    /// Port `port`'s attributes (ibv_query_port(3)); as verbs.h's `ibv_query_port` does,
    /// through `verbs_context.query_port` when the provider's context is extended, else
    /// through the exported compatibility symbol. A port that does not exist is `EINVAL`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let ctx = self.inner.ctx;
        let mut raw = ibv_port_attr::zeroed();
        // SAFETY: `ctx` is open. `abi_compat` says whether a `verbs_context` sits in
        // front of it (verbs.h `verbs_get_ctx`); only then are `sz` and the op read, and
        // `sz` says whether the op lies within what the provider allocated.
        let rc = unsafe {
            let op = if (*ctx).abi_compat as usize == VERBS_ABI_IS_EXTENDED {
                let vctx = ctx.byte_sub(core::mem::offset_of!(verbs_context, context)).cast::<verbs_context>();
                let need = core::mem::size_of::<verbs_context>() - core::mem::offset_of!(verbs_context, query_port);
                if (*vctx).sz >= need { (*vctx).query_port } else { None }
            } else {
                None
            };
            match op {
                Some(query_port) => query_port(ctx, port, &mut raw, core::mem::size_of::<ibv_port_attr>()),
                None => (self.inner.verbs.sym.ibv_query_port)(ctx, port, (&mut raw as *mut ibv_port_attr).cast()),
            }
        };
        check(rc)?;
        Ok(crate::c_abi::port_attr_from_c(&raw))
    }

    /// Entry `index` of port `port`'s GID table (ibv_query_gid(3)); an index past the
    /// table is the provider's error (`EINVAL` or `ENODATA`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let index = c_int::try_from(index).map_err(|_| crate::error::Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        let mut raw = ibv_gid::zeroed();
        // SAFETY: `ctx` is open; `raw` is a valid out-union.
        check(unsafe { (self.inner.verbs.sym.ibv_query_gid)(self.inner.ctx, port, index, &mut raw) })?;
        Ok(crate::c_abi::gid_from_c(&raw))
    }

    /// Entry `index` of port `port`'s GID table with its type and interface
    /// (ibv_query_gid_ex(3), the exported `_ibv_query_gid_ex` the header's inline calls
    /// with `flags` 0); an empty entry is the provider's `ENODATA`.
    pub fn query_gid_ex(&self, port: u8, index: u32) -> Result<crate::gid::GidEntry> {
        let mut raw = core::mem::MaybeUninit::<ibv_gid_entry>::zeroed();
        // SAFETY: `ctx` is open; `raw` is a writable entry of the size passed.
        check(unsafe {
            (self.inner.verbs.sym._ibv_query_gid_ex)(self.inner.ctx, port.into(), index, raw.as_mut_ptr(), 0, core::mem::size_of::<ibv_gid_entry>())
        })?;
        // SAFETY: zero-initialised plain data the provider filled.
        Ok(crate::c_abi::gid_entry_from_c(unsafe { &raw.assume_init() }))
    }

    /// The context's asynchronous-event fd (`ibv_context.async_fd`, ibv_get_async_event(3)),
    /// open as long as the context.
    pub fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: `ctx` is open for as long as `self` lives, and libibverbs keeps its
        // `async_fd` open until ibv_close_device(3), which only the last drop calls.
        unsafe { std::os::fd::BorrowedFd::borrow_raw((*self.inner.ctx).async_fd) }
    }
}

impl crate::mr::native::NativeContext for Context {
    fn id(&self) -> u32 {
        Context::id(self)
    }

    fn device_name(&self) -> &'static str {
        Context::device_name(self)
    }

    fn device_attr(&self) -> ibv_device_attr {
        self.inner.attr
    }

    fn gid_table(&self) -> Vec<crate::gid::GidEntry> {
        let len = self.query_port(1).map_or(0, |p| p.gid_tbl_len);
        (0..len).filter_map(|i| self.query_gid_ex(1, i).ok()).collect()
    }

    fn async_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        Context::async_fd(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
