//! QPs on ids (rdma_create_qp(3), rdma_create_qp_ex(3), rdma_destroy_qp(3),
//! rdma_init_qp_attr(3)).
//!
//! Contract (librdmacm): `rdma_create_qp(_ex)` takes the id's PD when given none (the
//! CM's PD once the id has a device) and refuses a PD of another context than
//! `id->verbs` (`EINVAL`); when the caller passes no CQs it creates them — a completion
//! channel and a CQ each for the send and the receive side, sized by `max_send_wr` and
//! `max_recv_wr`, with the id as `cq_context` — and records them in
//! `id->send_cq/recv_cq/send_cq_channel/recv_cq_channel` (rdma_verbs.h's
//! `rdma_get_send_comp`/`rdma_get_recv_comp` use them); the id's SRQ is used when the
//! caller names none. The QP is an ordinary QP of this library (`ibv_create_qp` when
//! only the PD is named, the `create_qp_ex` op otherwise, as verbs.h's
//! `ibv_create_qp_ex` dispatches), moved by the connection manager to INIT (RTS for UD);
//! the granted caps are written back. `rdma_destroy_qp` destroys the QP and the CQs and
//! channels the library made.

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use rverbs::QpState;

use super::abi::rdma_cm_id;
use super::id::id_or_einval;
use super::obj::{fail, Id};
use crate::abi::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_qp_init_attr_ex, Zeroed, IBV_QPT_XRC_RECV, IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_XRCD,
};
use crate::ffi::{errno, minus_one_errno, set_errno};
use crate::qp::{rverbs_create_qp_ex, QpObj};

// The signatures of the verbs called through `own_verb!` (see there why).
type CreateCompChannel = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel;
type DestroyCompChannel = unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut ibv_context,
    c_int,
    *mut c_void,
    *mut ibv_comp_channel,
    c_int,
) -> *mut ibv_cq;
type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;

/// Destroys the CQs and completion channels recorded in the id (librdmacm's
/// `ucma_destroy_cqs`: they are the ones it created).
pub(super) fn destroy_cqs(w: &Id) {
    let c = w.c();
    // SAFETY: fields of the live id; the objects were created by `create_cqs` and the
    // QP using them is gone.
    unsafe {
        if (*c).qp_type == IBV_QPT_XRC_RECV && !(*c).srq.is_null() {
            return;
        }
        let (recv, send) = ((*c).recv_cq, (*c).send_cq);
        if !recv.is_null() {
            own_verb!(crate::cq, ibv_destroy_cq as DestroyCq)(recv);
        }
        if !send.is_null() && send != recv {
            own_verb!(crate::cq, ibv_destroy_cq as DestroyCq)(send);
        }
        (*c).recv_cq = null_mut();
        (*c).send_cq = null_mut();
        let (rch, sch) = ((*c).recv_cq_channel, (*c).send_cq_channel);
        if !rch.is_null() {
            own_verb!(crate::cq, ibv_destroy_comp_channel as DestroyCompChannel)(rch);
        }
        if !sch.is_null() && sch != rch {
            own_verb!(crate::cq, ibv_destroy_comp_channel as DestroyCompChannel)(sch);
        }
        (*c).recv_cq_channel = null_mut();
        (*c).send_cq_channel = null_mut();
    }
}

/// Creates a completion channel and a CQ of `size` entries on the id's context for the
/// receive side (`recv`) or the send side; `Err` with `errno` set.
fn create_cq(w: &Id, size: u32, recv: bool) -> Result<(), ()> {
    let c = w.c();
    // SAFETY: fields of the live id; `verbs` is our CM context.
    unsafe {
        let ch = own_verb!(crate::cq, ibv_create_comp_channel as CreateCompChannel)((*c).verbs);
        if ch.is_null() {
            return Err(());
        }
        if recv {
            (*c).recv_cq_channel = ch;
        } else {
            (*c).send_cq_channel = ch;
        }
        let cqe = c_int::try_from(size).unwrap_or(c_int::MAX);
        let cq = own_verb!(crate::cq, ibv_create_cq as CreateCq)((*c).verbs, cqe, c.cast(), ch, 0);
        if cq.is_null() {
            return Err(());
        }
        if recv {
            (*c).recv_cq = cq;
        } else {
            (*c).send_cq = cq;
        }
    }
    Ok(())
}

/// librdmacm's `ucma_create_cqs`: a receive and a send CQ of the given sizes (0: none).
/// On failure everything recorded is destroyed and `errno` kept.
pub(super) fn create_cqs(w: &Id, send: u32, recv: u32) -> Result<(), c_int> {
    let r = (|| -> Result<(), ()> {
        if recv != 0 {
            create_cq(w, recv, true)?;
        }
        if send != 0 {
            create_cq(w, send, false)?;
        }
        Ok(())
    })();
    if r.is_err() {
        let e = errno();
        destroy_cqs(w);
        return Err(minus_one_errno(e));
    }
    Ok(())
}

/// The body of `rdma_create_qp_ex` (librdmacm's order of checks and effects).
fn create_qp_ex(w: &Id, attr: &mut ibv_qp_init_attr_ex) -> c_int {
    let c = w.c();
    // SAFETY: fields of the live id.
    let (verbs, qp, pd, send_cq, recv_cq, srq) = unsafe {
        (
            (*c).verbs,
            (*c).qp,
            (*c).pd,
            (*c).send_cq,
            (*c).recv_cq,
            (*c).srq,
        )
    };
    if !qp.is_null() || verbs.is_null() {
        return minus_one_errno(libc::EINVAL);
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr.pd = pd;
    } else {
        // SAFETY: a PD of this library (caller contract).
        let ctx = unsafe { (*attr.pd).context };
        if ctx != verbs {
            return minus_one_errno(libc::EINVAL);
        }
    }
    if attr.pd.is_null() {
        return minus_one_errno(libc::EINVAL);
    }
    if (!recv_cq.is_null() && !attr.recv_cq.is_null() && recv_cq != attr.recv_cq)
        || (!send_cq.is_null() && !attr.send_cq.is_null() && send_cq != attr.send_cq)
    {
        return minus_one_errno(libc::EINVAL);
    }
    if attr.qp_type == IBV_QPT_XRC_RECV
        && (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null())
    {
        // librdmacm's per-device XRC domain.
        let x = super::context::cm_xrcd();
        if x.is_null() {
            return -1; // errno set
        }
        attr.xrcd = x;
        attr.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    }
    let send = if attr.send_cq.is_null() && send_cq.is_null() {
        attr.cap.max_send_wr
    } else {
        0
    };
    let recv = if attr.recv_cq.is_null() && recv_cq.is_null() {
        attr.cap.max_recv_wr
    } else {
        0
    };
    if let Err(e) = create_cqs(w, send, recv) {
        return e;
    }
    // SAFETY: fields of the live id (possibly just set by create_cqs).
    unsafe {
        if attr.send_cq.is_null() {
            attr.send_cq = (*c).send_cq;
        }
        if attr.recv_cq.is_null() {
            attr.recv_cq = (*c).recv_cq;
        }
        if !srq.is_null() && attr.srq.is_null() {
            attr.srq = srq;
        }
    }
    let qp = if attr.comp_mask == IBV_QP_INIT_ATTR_PD {
        // SAFETY: the prefix of ibv_qp_init_attr_ex is an ibv_qp_init_attr (verbs.h's
        // inline ibv_create_qp_ex makes the same call).
        unsafe {
            own_verb!(crate::qp, ibv_create_qp as CreateQp)(
                attr.pd,
                (attr as *mut ibv_qp_init_attr_ex).cast(),
            )
        }
    } else {
        // SAFETY: our context and a valid attribute struct.
        unsafe { rverbs_create_qp_ex(verbs, attr) }
    };
    if qp.is_null() {
        let e = errno();
        destroy_cqs(w);
        return minus_one_errno(e);
    }
    // SAFETY: just created by this library.
    let obj = unsafe { QpObj::from_raw(qp) }.expect("a QP of this library");
    if let Err(e) = w.core().attach_qp(obj.core().clone()) {
        // SAFETY: the QP just created, never handed out.
        unsafe { own_verb!(crate::qp, ibv_destroy_qp as DestroyQp)(qp) };
        destroy_cqs(w);
        return fail(&e);
    }
    // SAFETY: the live QP and id.
    unsafe {
        (*qp).state = obj.core().state().raw();
        (*c).pd = (*qp).pd;
        (*c).qp = qp;
    }
    0
}

cm_export! {
    /// Creates the id's QP (rdma_create_qp(3)); `pd` NULL = the id's PD. The caller's
    /// attributes get the CQs used and the granted caps. Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_qp(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        let Some(a) = (unsafe { qp_init_attr.as_mut() }) else {
            return minus_one_errno(libc::EINVAL);
        };
        let mut ex = ibv_qp_init_attr_ex::zeroed();
        ex.qp_context = a.qp_context;
        ex.send_cq = a.send_cq;
        ex.recv_cq = a.recv_cq;
        ex.srq = a.srq;
        ex.cap = a.cap;
        ex.qp_type = a.qp_type;
        ex.sq_sig_all = a.sq_sig_all;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        // SAFETY: field of the live id.
        ex.pd = if pd.is_null() { unsafe { (*w.c()).pd } } else { pd };
        let r = create_qp_ex(w, &mut ex);
        let err = errno();
        a.qp_context = ex.qp_context;
        a.send_cq = ex.send_cq;
        a.recv_cq = ex.recv_cq;
        a.srq = ex.srq;
        a.cap = ex.cap;
        a.qp_type = ex.qp_type;
        a.sq_sig_all = ex.sq_sig_all;
        set_errno(err);
        r
    }
}

cm_export! {
    /// Creates the id's QP from extended attributes (rdma_create_qp_ex(3)).
    /// Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_qp_ex(
        id: *mut rdma_cm_id,
        qp_init_attr: *mut ibv_qp_init_attr_ex,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        match unsafe { qp_init_attr.as_mut() } {
            Some(a) => create_qp_ex(w, a),
            None => minus_one_errno(libc::EINVAL),
        }
    }
}

cm_export! {
    /// Destroys the id's QP and the CQs/channels `rdma_create_qp` made for it
    /// (rdma_destroy_qp(3)).
    #[cm(void)]
    pub unsafe fn rdma_destroy_qp(id: *mut rdma_cm_id) {
        // SAFETY: caller contract.
        let Ok(w) = (unsafe { id_or_einval(id) }) else { return };
        w.core().detach_qp();
        let c = w.c();
        // SAFETY: field of the live id: NULL or the QP rdma_create_qp made.
        let qp = unsafe { core::mem::replace(&mut (*c).qp, null_mut()) };
        if !qp.is_null() {
            // SAFETY: as above; the id gives it up.
            unsafe { own_verb!(crate::qp, ibv_destroy_qp as DestroyQp)(qp) };
        }
        destroy_cqs(w);
    }
}

cm_export! {
    /// The attributes to move a caller-managed QP to `qp_attr->qp_state`
    /// (rdma_init_qp_attr(3), RDMACM_1.2): the whole struct is written, `*qp_attr_mask`
    /// names the attributes that matter. Returns 0 or -1 with `errno` (`EINVAL`: no
    /// device yet, or the state needs the peer's answer).
    #[cm(minus_one)]
    pub unsafe fn rdma_init_qp_attr(
        id: *mut rdma_cm_id,
        qp_attr: *mut ibv_qp_attr,
        qp_attr_mask: *mut c_int,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; caller contract.
        let Some(state) = QpState::from_raw(unsafe { (*qp_attr).qp_state }) else {
            return minus_one_errno(libc::EINVAL);
        };
        match w.core().init_qp_attr(state) {
            Ok((a, m)) => {
                // SAFETY: checked non-NULL; caller contract.
                unsafe {
                    qp_attr.write(crate::conv::qp_attr_to_c(&a));
                    qp_attr_mask.write(m.bits() as c_int);
                }
                0
            }
            Err(e) => fail(&e),
        }
    }
}
