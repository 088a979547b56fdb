//! Multicast (rdma_join_multicast(3), rdma_join_multicast_ex(3),
//! rdma_leave_multicast(3)) over the connection manager's joins
//! ([`rverbs_cm::CmId::join_multicast`]). All return 0 or -1 with `errno`.
//!
//! Contract (librdmacm `rdma_join_multicast2`, `rdma_join_multicast_ex`,
//! `rdma_leave_multicast`, `ucma_process_join`; the kernel's `ucma_join_multicast` and
//! `rdma_join_multicast`):
//! * the address is `AF_INET` or `AF_INET6` (NULL or another family, `AF_IB` included
//!   here: `EINVAL`);
//! * `rdma_join_multicast_ex`: a `comp_mask` with bits beyond ADDRESS | JOIN_FLAGS is
//!   `ENOTSUP`; without ADDRESS, without JOIN_FLAGS, or with a flag other than
//!   FULLMEMBER / SENDONLY_FULLMEMBER, `EINVAL`; `rdma_join_multicast` joins as
//!   FULLMEMBER;
//! * the engine's rules (the id bound or address-resolved, UD; `EINVAL` otherwise);
//! * the result is MULTICAST_JOIN (or MULTICAST_ERROR when the id's QP cannot be
//!   attached) with `param.ud.private_data` = the join's `context` and
//!   `private_data_len` 0 (`ucma_process_join` reports the context there); a
//!   synchronous id waits for it (`ucma_complete`);
//! * leave: by the address joined; `EADDRNOTAVAIL` if the id did not join it; the QP is
//!   detached, no event.

use core::ffi::{c_int, c_void};

use libc::sockaddr;
use rverbs_cm::JoinFlag;

use super::abi::{
    rdma_cm_id, rdma_cm_join_mc_attr_ex, RDMA_CM_JOIN_MC_ATTR_ADDRESS,
    RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS, RDMA_CM_JOIN_MC_ATTR_RESERVED,
};
use super::id::id_or_einval;
use super::obj::{fail, sockaddr_from_c};
use crate::ffi::minus_one_errno;

/// Joins `addr` with `flag` and `context`, then (synchronous id) waits for the result.
///
/// # Safety
/// `id` is NULL or a live id; `addr` NULL or a socket address of its family's size.
unsafe fn join(id: *mut rdma_cm_id, addr: *const sockaddr, flag: JoinFlag, context: *mut c_void) -> c_int {
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
    if let Err(e) = w.core().join_multicast(a, flag, context as usize) {
        return fail(&e);
    }
    w.complete()
}

cm_export! {
    /// Joins a multicast group as a full member (rdma_join_multicast(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_join_multicast(
        id: *mut rdma_cm_id,
        addr: *mut sockaddr,
        context: *mut c_void,
    ) -> c_int {
        // SAFETY: caller contract.
        unsafe { join(id, addr, JoinFlag::FullMember, context) }
    }
}

cm_export! {
    /// Joins a multicast group with join flags (rdma_join_multicast_ex(3), RDMACM_1.1).
    #[cm(minus_one)]
    pub unsafe fn rdma_join_multicast_ex(
        id: *mut rdma_cm_id,
        mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void,
    ) -> c_int {
        // SAFETY: caller contract: NULL or a valid attribute struct.
        let Some(attr) = (unsafe { mc_join_attr.as_ref() }) else {
            return minus_one_errno(libc::EINVAL);
        };
        if attr.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return minus_one_errno(libc::ENOTSUP);
        }
        if attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 {
            return minus_one_errno(libc::EINVAL);
        }
        let flag = match JoinFlag::from_raw(attr.join_flags) {
            Some(f) if attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS != 0 => f,
            _ => return minus_one_errno(libc::EINVAL),
        };
        // SAFETY: caller contract.
        unsafe { join(id, attr.addr, flag, context) }
    }
}

cm_export! {
    /// Leaves a multicast group (rdma_leave_multicast(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
        // SAFETY: caller contract.
        let a = match unsafe { sockaddr_from_c(addr) } {
            Ok(a) => a,
            Err(e) => return minus_one_errno(e),
        };
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        match w.core().leave_multicast(a) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}
