//! SRQs on ids (`<rdma/rdma_verbs.h>`: `rdma_create_srq`, `rdma_create_srq_ex`,
//! `rdma_destroy_srq`).
//!
//! Contract (librdmacm): `IBV_SRQ_INIT_ATTR_TYPE` is required (`EINVAL`); the id's PD is
//! used when none is named; an XRC SRQ gets a receive CQ made by the library when it
//! names none, and the per-device XRC domain ([`super::context::cm_xrcd`]) when it names
//! none; the SRQ
//! is created as verbs.h's `ibv_create_srq_ex` dispatches (basic ones through
//! `ibv_create_srq`) and recorded in `id->srq` (and `id->pd` if unset), so
//! `rdma_create_qp` uses it. `rdma_destroy_srq` destroys it and the library's CQs.

use core::ffi::c_int;
use core::ptr::null_mut;

use super::abi::rdma_cm_id;
use super::id::id_or_einval;
use super::obj::Id;
use super::qp::{create_cqs, destroy_cqs};
use crate::abi::{
    ibv_pd, ibv_srq, ibv_srq_init_attr, ibv_srq_init_attr_ex, Zeroed, IBV_QPT_XRC_RECV,
    IBV_SRQT_BASIC, IBV_SRQT_XRC, IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_PD,
    IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQ_INIT_ATTR_XRCD,
};
use crate::ffi::{errno, minus_one_errno, set_errno};
use crate::srq::rverbs_create_srq_ex;

type CreateSrq = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
type DestroySrq = unsafe extern "C" fn(*mut ibv_srq) -> c_int;

fn create_srq_ex(w: &Id, attr: &mut ibv_srq_init_attr_ex) -> c_int {
    let c = w.c();
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return minus_one_errno(libc::EINVAL);
    }
    // SAFETY: fields of the live id.
    let (verbs, pd) = unsafe { ((*c).verbs, (*c).pd) };
    if verbs.is_null() {
        return minus_one_errno(libc::EINVAL);
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.pd = pd;
        attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if attr.srq_type == IBV_SRQT_XRC {
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null() {
            // librdmacm's per-device XRC domain.
            let x = super::context::cm_xrcd();
            if x.is_null() {
                return -1; // errno set
            }
            attr.xrcd = x;
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || attr.cq.is_null() {
            if let Err(e) = create_cqs(w, 0, attr.attr.max_wr) {
                return e;
            }
            // SAFETY: field of the live id, just set.
            attr.cq = unsafe { (*c).recv_cq };
        }
        attr.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    }
    let mask = attr.comp_mask;
    let basic = mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE) == 0
        && mask & IBV_SRQ_INIT_ATTR_PD != 0
        && (mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || attr.srq_type == IBV_SRQT_BASIC);
    let srq = if basic {
        // SAFETY: the prefix of ibv_srq_init_attr_ex is an ibv_srq_init_attr (verbs.h's
        // inline ibv_create_srq_ex makes the same call).
        unsafe {
            own_verb!(crate::srq, ibv_create_srq as CreateSrq)(
                attr.pd,
                (attr as *mut ibv_srq_init_attr_ex).cast(),
            )
        }
    } else {
        // SAFETY: our context and a valid attribute struct.
        unsafe { rverbs_create_srq_ex(verbs, attr) }
    };
    if srq.is_null() {
        let e = errno();
        destroy_cqs(w);
        return minus_one_errno(e);
    }
    // SAFETY: fields of the live id.
    unsafe {
        if (*c).pd.is_null() {
            (*c).pd = attr.pd;
        }
        (*c).srq = srq;
    }
    0
}

cm_export! {
    /// Creates an SRQ for the id (`id->srq`); `pd` NULL = the id's PD. The caller's
    /// attributes get the granted sizes. Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_srq(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_srq_init_attr,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return minus_one_errno(libc::EINVAL);
        };
        let mut ex = ibv_srq_init_attr_ex::zeroed();
        ex.srq_context = a.srq_context;
        ex.attr = a.attr;
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        // SAFETY: field of the live id.
        ex.srq_type = if unsafe { (*w.c()).qp_type } == IBV_QPT_XRC_RECV { IBV_SRQT_XRC } else { IBV_SRQT_BASIC };
        ex.pd = pd;
        let r = create_srq_ex(w, &mut ex);
        let err = errno();
        a.srq_context = ex.srq_context;
        a.attr = ex.attr;
        set_errno(err);
        r
    }
}

cm_export! {
    /// Creates an SRQ for the id from extended attributes. Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        match unsafe { attr.as_mut() } {
            Some(a) => create_srq_ex(w, a),
            None => minus_one_errno(libc::EINVAL),
        }
    }
}

cm_export! {
    /// Destroys the id's SRQ and the CQs the library made.
    #[cm(void)]
    pub unsafe fn rdma_destroy_srq(id: *mut rdma_cm_id) {
        // SAFETY: caller contract.
        let Ok(w) = (unsafe { id_or_einval(id) }) else { return };
        let c = w.c();
        // SAFETY: field of the live id: NULL or the SRQ rdma_create_srq made.
        let srq = unsafe { core::mem::replace(&mut (*c).srq, null_mut()) };
        if !srq.is_null() {
            // SAFETY: as above; the id gives it up.
            unsafe { own_verb!(crate::srq, ibv_destroy_srq as DestroySrq)(srq) };
        }
        destroy_cqs(w);
    }
}
