//! The synchronous endpoint API (rdma_create_ep(3), rdma_destroy_ep(3)).
//!
//! `rdma_create_ep` makes a synchronous id of the `rdma_addrinfo`'s port space and QP
//! type. Passive (`RAI_PASSIVE`): bound to `ai_src_addr`; the PD and QP attributes are
//! kept for the requests `rdma_get_request` returns (the caller then listens). Active:
//! address and route resolved (2 s each) and, with `qp_init_attr`, the QP created (its
//! type set from the addrinfo, the caps written back); `ai_connect` data is sent ahead
//! of the next `rdma_connect`'s. `ai_route` (IB path records) is ignored: RoCE routes
//! are resolved. On failure everything made is destroyed.

use core::ffi::c_int;
use core::ptr::null_mut;

use super::abi::{rdma_addrinfo, rdma_cm_id, RAI_PASSIVE};
use super::id::{create, rdma_bind_addr, rdma_destroy_id, rdma_resolve_addr, rdma_resolve_route};
use super::obj::Id;
use super::qp::rdma_destroy_qp;
use super::srq::rdma_destroy_srq;
use crate::abi::{ibv_pd, ibv_qp_init_attr};
use crate::ffi::{errno, minus_one_errno, set_errno};

/// What `rdma_create_ep` does after creating the id; -1 with `errno` on failure.
///
/// # Safety
/// As `rdma_create_ep`.
unsafe fn setup(
    w: &Id,
    res: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let id = w.as_ptr();
    if res.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: our live id; the address is the addrinfo's (caller contract).
        let r = unsafe { rdma_bind_addr(id, res.ai_src_addr) };
        if r != 0 {
            return r;
        }
        if !pd.is_null() {
            // SAFETY: field of the live id.
            unsafe { (*w.c()).pd = pd };
        }
        // SAFETY: caller contract: NULL or valid.
        if let Some(a) = unsafe { qp_init_attr.as_ref() } {
            let mut a = *a;
            a.qp_type = res.ai_qp_type as u32;
            w.extra().qp_init_attr = Some(a);
        }
        return 0;
    }
    // SAFETY: our live id; the addresses are the addrinfo's (caller contract).
    let r = unsafe { rdma_resolve_addr(id, res.ai_src_addr, res.ai_dst_addr, 2000) };
    if r != 0 {
        return r;
    }
    // SAFETY: our live id.
    let r = unsafe { rdma_resolve_route(id, 2000) };
    if r != 0 {
        return r;
    }
    // SAFETY: caller contract: NULL or valid.
    if let Some(a) = unsafe { qp_init_attr.as_mut() } {
        a.qp_type = res.ai_qp_type as u32;
        // SAFETY: our live id; `a` is valid.
        let r = unsafe { super::qp::rdma_create_qp(id, pd, a) };
        if r != 0 {
            return r;
        }
    }
    // SAFETY: caller contract.
    let data = unsafe { connect_data(res) };
    if !data.is_empty() {
        w.extra().connect = data.to_vec();
    }
    0
}

/// The private data `rdma_create_ep` keeps for `rdma_connect` from an `rdma_addrinfo`:
/// `ai_connect_len` bytes at `ai_connect`, none when either is 0 / NULL.
///
/// # Safety
/// A non-NULL `ai_connect` holds `ai_connect_len` readable bytes (rdma_getaddrinfo(3)).
pub(crate) unsafe fn connect_data(res: &rdma_addrinfo) -> &[u8] {
    if res.ai_connect_len == 0 || res.ai_connect.is_null() {
        return &[];
    }
    // SAFETY: function contract.
    unsafe { core::slice::from_raw_parts(res.ai_connect.cast::<u8>(), res.ai_connect_len) }
}

cm_export! {
    /// Creates a synchronous id bound/resolved from `res`, with a QP when
    /// `qp_init_attr` is given (rdma_create_ep(3)). Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(res) = (unsafe { res.as_ref() }) else {
            return minus_one_errno(libc::EINVAL);
        };
        if id.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let w = match create(null_mut(), null_mut(), res.ai_port_space as u32, res.ai_qp_type as u32) {
            Ok(w) => w,
            Err(e) => return minus_one_errno(e),
        };
        // SAFETY: just created.
        let r = unsafe { setup(&*w, res, pd, qp_init_attr) };
        if r != 0 {
            let e = errno();
            // SAFETY: our live id, given up.
            unsafe { rdma_destroy_ep(w.cast()) };
            set_errno(e);
            return r;
        }
        // SAFETY: checked non-NULL; caller contract.
        unsafe { id.write(w.cast()) };
        0
    }
}

cm_export! {
    /// Destroys an endpoint: its QP, SRQ (with the CQs the library made) and the id
    /// (rdma_destroy_ep(3)).
    #[cm(void)]
    pub unsafe fn rdma_destroy_ep(id: *mut rdma_cm_id) {
        // SAFETY: caller contract.
        let Some(w) = (unsafe { Id::from_raw(id) }) else { return };
        // SAFETY: fields of the live id.
        let (qp, srq) = unsafe { ((*w.c()).qp, (*w.c()).srq) };
        if !qp.is_null() {
            // SAFETY: our live id.
            unsafe { rdma_destroy_qp(id) };
        }
        if !srq.is_null() {
            // SAFETY: our live id.
            unsafe { rdma_destroy_srq(id) };
        }
        w.extra().qp_init_attr = None;
        // SAFETY: our live id, given up.
        unsafe { rdma_destroy_id(id) };
    }
}
