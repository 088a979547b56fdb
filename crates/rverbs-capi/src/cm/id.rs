//! Ids, address and route resolution, options (rdma_create_id(3), rdma_destroy_id(3),
//! rdma_bind_addr(3), rdma_resolve_addr(3), rdma_resolve_route(3), rdma_migrate_id(3),
//! rdma_set_option(3)). All return 0 or -1 with `errno` (rdma-core 44).
//!
//! A synchronous id (`rdma_create_id(NULL, …)`) owns a private channel; the calls that
//! librdmacm completes (`ucma_complete`: resolve addr/route, connect, accept,
//! disconnect) wait there for the matching event and park it in `id->event` until the
//! next call or destroy.

use core::ffi::{c_int, c_void};
use std::sync::Arc;

use libc::sockaddr;
use rverbs_cm::soft::CmId;

use super::abi::*;
use super::obj::{fail, ps_and_qp_type, sockaddr_from_c, Chan, Id};
use crate::ffi::{ToErrno, minus_one_errno};

/// Creates an id on `channel` (NULL: synchronous) with port space `ps` and C QP type
/// `qp_type` (librdmacm's `rdma_create_id2`). Returns the wrapper or an errno.
pub(super) fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
    qp_type: u32,
) -> Result<*mut Id, c_int> {
    let (space, core_type) = ps_and_qp_type(ps, qp_type)?;
    let (ch, sync) = if channel.is_null() {
        let ch = Chan::new()?;
        (ch.clone(), Some(ch))
    } else {
        // SAFETY: caller contract: a channel of ours.
        (
            unsafe { Chan::from_raw(channel) }.ok_or(libc::EINVAL)?,
            None,
        )
    };
    let core = CmId::new(ch.core(), space, core_type, context as usize).map_err(|e| e.c_errno())?;
    Ok(Id::create(core, channel, sync, context, ps, qp_type))
}

/// The id behind `id`, or -1 with `EINVAL`.
///
/// # Safety
/// `id` is NULL or an id of ours that was not destroyed.
pub(super) unsafe fn id_or_einval<'a>(id: *mut rdma_cm_id) -> Result<&'a Id, c_int> {
    // SAFETY: caller contract.
    unsafe { Id::from_raw(id) }.ok_or_else(|| minus_one_errno(libc::EINVAL))
}

cm_export! {
    /// Creates an id (rdma_create_id(3)); `channel` NULL = synchronous id. The QP type
    /// follows the port space (UD for `RDMA_PS_UDP`/`RDMA_PS_IPOIB`, RC otherwise).
    /// Errors: `EINVAL` (unknown port space, NULL `id`), `ENODEV` (no device).
    #[cm(minus_one)]
    pub unsafe fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int {
        if id.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let qp_type = if ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP {
            crate::abi::IBV_QPT_UD
        } else {
            crate::abi::IBV_QPT_RC
        };
        match create(channel, context, ps, qp_type) {
            Ok(w) => {
                // SAFETY: checked non-NULL; caller contract.
                unsafe { id.write(w.cast()) };
                0
            }
            Err(e) => minus_one_errno(e),
        }
    }
}

cm_export! {
    /// Destroys an id (rdma_destroy_id(3)): a connection is disconnected, a pending
    /// request rejected; blocks until its retrieved events are acked (the parked event
    /// of a synchronous id is acked first). Its QP is not destroyed (as librdmacm).
    #[cm(minus_one)]
    pub unsafe fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        w.ack_parked();
        if let Err(e) = w.core().destroy() {
            return fail(&e);
        }
        // SAFETY: the caller gives the id up; its events are all acknowledged.
        unsafe { Id::free(id.cast()) };
        0
    }
}

cm_export! {
    /// Binds an id to a local address (rdma_bind_addr(3)): `AF_INET` or `AF_INET6`
    /// (anything else `EINVAL`, as librdmacm without AF_IB support); a specific address
    /// of this host sets `id->verbs`, a wildcard leaves it NULL.
    #[cm(minus_one)]
    pub unsafe fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        let a = match unsafe { sockaddr_from_c(addr) } {
            Ok(a) => a,
            Err(e) => return minus_one_errno(e),
        };
        // The kernel's cma_check_linklocal: a link-local IPv6 address names no interface
        // without its scope id.
        if let std::net::SocketAddr::V6(v6) = a {
            if v6.ip().segments()[0] & 0xffc0 == 0xfe80 && v6.scope_id() == 0 {
                return minus_one_errno(libc::EINVAL);
            }
        }
        let r = w.core().bind_addr(a);
        w.refresh();
        match r {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Resolves a destination address (rdma_resolve_addr(3)): ADDR_RESOLVED or
    /// ADDR_ERROR follows (a synchronous id waits for it: -1 with the error's errno).
    #[cm(minus_one)]
    pub unsafe fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut sockaddr,
        dst_addr: *mut sockaddr,
        timeout_ms: c_int,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        let dst = match unsafe { sockaddr_from_c(dst_addr) } {
            Ok(a) => a,
            Err(e) => return minus_one_errno(e),
        };
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: caller contract.
            match unsafe { sockaddr_from_c(src_addr) } {
                Ok(a) => Some(a),
                Err(e) => return minus_one_errno(e),
            }
        };
        let r = w.core().resolve_addr(src, dst, timeout_ms);
        w.refresh();
        match r {
            Ok(()) => w.complete(),
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Resolves the route to the resolved destination (rdma_resolve_route(3)):
    /// ROUTE_RESOLVED follows (a synchronous id waits for it).
    #[cm(minus_one)]
    pub unsafe fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let r = w.core().resolve_route(timeout_ms);
        w.refresh();
        match r {
            Ok(()) => w.complete(),
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Moves an id to another event channel (rdma_migrate_id(3)): its queued events
    /// move with it and the call returns once the events already retrieved on the old
    /// channel are acked. NULL makes the id synchronous (`EINVAL` if it already is);
    /// migrating a synchronous id acks its parked event and closes its private channel.
    #[cm(minus_one)]
    pub unsafe fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let was_sync = w.sync_channel().is_some();
        if was_sync && channel.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let (target, new_sync): (Arc<Chan>, Option<Arc<Chan>>) = if channel.is_null() {
            match Chan::new() {
                Ok(ch) => (ch.clone(), Some(ch)),
                Err(e) => return minus_one_errno(e),
            }
        } else {
            // SAFETY: caller contract: a channel of ours.
            match unsafe { Chan::from_raw(channel) } {
                Some(ch) => (ch, None),
                None => return minus_one_errno(libc::EINVAL),
            }
        };
        if was_sync {
            w.ack_parked();
        }
        if let Err(e) = w.core().migrate(target.core()) {
            return fail(&e);
        }
        let ptr = new_sync.as_ref().map_or(channel, Chan::as_ptr);
        // SAFETY: field of our live allocation.
        unsafe { (*w.c()).channel = ptr };
        w.extra().sync = new_sync;
        0
    }
}

/// The kernel's `KMALLOC_MAX_SIZE` on x86-64 and arm64 with 4 KiB pages (2^(10 + 12)):
/// `ucma_set_option` refuses longer values with `EINVAL` before reading them.
const KMALLOC_MAX_SIZE: usize = 4 << 20;

/// `struct ib_path_rec_data` (`<rdma/ib_user_sa.h>`), librdmacm's `ibv_path_data`.
const IB_PATH_REC_DATA_LEN: usize = size_of::<ibv_path_data>();

/// The errno of an `RDMA_OPTION_IB` option. `RDMA_OPTION_IB_PATH` is not supported
/// (`ENOSYS`: rverbs is RoCE and resolves routes itself), but a malformed value is
/// `EINVAL` first, as the kernel's `ucma_set_ib_path` checks (a length that is not a
/// whole number of `ib_path_rec_data`, or none); other names `ENOSYS`.
fn ib_option_errno(optname: c_int, optlen: usize) -> c_int {
    if optname == RDMA_OPTION_IB_PATH && (optlen == 0 || !optlen.is_multiple_of(IB_PATH_REC_DATA_LEN)) {
        libc::EINVAL
    } else {
        libc::ENOSYS
    }
}

cm_export! {
    /// Sets an option of an id (rdma_set_option(3)), as the kernel's `ucma_set_option`:
    /// `RDMA_OPTION_ID` with `TOS` (`u8`), `REUSEADDR` (`int`), `AFONLY` (`int`),
    /// `ACK_TIMEOUT` (`u8`, RC ids only) — a wrong `optlen` is `EINVAL`, another name
    /// `ENOSYS`;
    /// `RDMA_OPTION_IB_PATH` (IB path records; rverbs is RoCE) and other levels are
    /// `ENOSYS` (a malformed path value `EINVAL`). First, as the kernel: `optlen`
    /// beyond 4 MiB is `EINVAL`, a NULL `optval` with a length `EFAULT`.
    #[cm(minus_one)]
    pub unsafe fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: usize,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // The kernel's ucma_set_option checks in this order: the length against
        // KMALLOC_MAX_SIZE, then copies the value in (NULL: EFAULT, unless 0 bytes), then
        // the level and the name (ENOSYS), then the name's length (EINVAL).
        if optlen > KMALLOC_MAX_SIZE {
            return minus_one_errno(libc::EINVAL);
        }
        if optval.is_null() && optlen != 0 {
            return minus_one_errno(libc::EFAULT);
        }
        if level == RDMA_OPTION_IB {
            return minus_one_errno(ib_option_errno(optname, optlen));
        }
        if level != RDMA_OPTION_ID {
            return minus_one_errno(libc::ENOSYS);
        }
        let want = match optname {
            RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT => size_of::<u8>(),
            RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY => size_of::<c_int>(),
            _ => return minus_one_errno(libc::ENOSYS),
        };
        if optlen != want {
            return minus_one_errno(libc::EINVAL);
        }
        // SAFETY: field of the live id.
        let qp_type = unsafe { (*w.c()).qp_type };
        if optname == RDMA_OPTION_ID_ACK_TIMEOUT
            && qp_type != crate::abi::IBV_QPT_RC
            && qp_type != crate::abi::IBV_QPT_XRC_SEND
        {
            // The kernel's rdma_set_ack_timeout: RC and XRC initiator ids only.
            return minus_one_errno(libc::EINVAL);
        }
        let core = w.core();
        let r = match optname {
            // SAFETY: optlen checked: one byte.
            RDMA_OPTION_ID_TOS => core.set_tos(unsafe { *optval.cast::<u8>() }),
            // SAFETY: as above.
            RDMA_OPTION_ID_ACK_TIMEOUT => core.set_ack_timeout(unsafe { *optval.cast::<u8>() }),
            // SAFETY: optlen checked: an int (possibly unaligned).
            RDMA_OPTION_ID_REUSEADDR => core.set_reuseaddr(unsafe { optval.cast::<c_int>().read_unaligned() } != 0),
            // SAFETY: as above.
            _ => core.set_afonly(unsafe { optval.cast::<c_int>().read_unaligned() } != 0),
        };
        match r {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}
