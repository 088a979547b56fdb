//! Queue pairs: the out-of-line verbs, the `create_qp_ex` op and the inline-dispatch ops
//! `post_send`/`post_recv`, multicast attach/detach.
//!
//! Every QP is allocated as an `ibv_qp_ex` (as rdma-core's `struct verbs_qp` union). QPs
//! created through the `create_qp_ex` op are "extended" (`ibv_qp_to_qp_ex` returns them,
//! as rxe sets `VERBS_QP_EX`); with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` their builder table
//! (`ibv_wr_*`, wr.rs) holds the requested opcode builders.

use core::ffi::c_int;
use std::cell::UnsafeCell;

use rverbs::{
    BindMwWr, Payload, QpAttrMask, QpInit, QpType, SendFlags, SendOps, SendWr, Sge, UdDest,
    WrOpcode,
};

use crate::abi::*;
use crate::live;
use crate::ah::AhObj;
use crate::conv;
use crate::cq::CqObj;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, not_supported_errno, null_errno, set_errno};
use crate::mw::bind_from_c;
use crate::wrlist::{post_recv_list, refuse, sge_slice};
use crate::mw::MwObj;
use crate::pd::PdObj;
use crate::srq::SrqObj;
use crate::xrcd::XrcdObj;

pub(crate) mod wr;

/// A QP handed to C: `struct ibv_qp_ex` (whose prefix is `struct ibv_qp`), then the core QP.
#[repr(C)]
pub struct QpObj {
    qp: UnsafeCell<ibv_qp_ex>,
    core: rverbs::Qp,
    /// `wr.ud` is the union member of this QP's send work requests.
    ud: bool,
    /// `qp_type.xrc.remote_srqn` is meaningful in this QP's send work requests.
    xrc_send: bool,
    /// Created through `create_qp_ex`: `ibv_qp_to_qp_ex` returns it.
    extended: bool,
    /// The batch open since `ibv_wr_start` (wr.rs).
    batch: rverbs::WrSlot,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for QpObj {
    const KIND: live::Kind = live::Kind::Qp;
}

const _: () = assert!(size_of::<Sge>() == size_of::<ibv_sge>());
const _: () = assert!(align_of::<Sge>() == align_of::<ibv_sge>());

impl QpObj {
    /// The QP behind an `ibv_qp *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `qp` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(qp: *const ibv_qp) -> Option<&'a QpObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(qp) }
    }

    /// The `struct ibv_qp *` handed to C.
    pub fn as_ptr(&self) -> *mut ibv_qp {
        // The whole object, not just the field: C hands this pointer back to us.
        (self as *const Self).cast_mut().cast()
    }

    /// The core QP.
    pub fn core(&self) -> &rverbs::Qp {
        &self.core
    }

    /// The open `ibv_wr_*` batch.
    pub(crate) fn batch(&self) -> &rverbs::WrSlot {
        &self.batch
    }
}

// ---------------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------------

/// What `create_qp_ex` adds to the `ibv_qp_init_attr` prefix.
#[derive(Default)]
struct ExAttr {
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    send_ops: Option<SendOps>,
    /// Created through the `create_qp_ex` op.
    extended: bool,
}

/// The attributes and mask of an ibv_modify_qp(3) call as the core's: mask bits beyond
/// the standard ones are `EOPNOTSUPP`, an undefined enum value in a field the mask names
/// is `EINVAL` (`conv::qp_attr_from_c`).
pub(crate) fn modify_attr_from_c(a: &ibv_qp_attr, attr_mask: c_int) -> Result<(rverbs::QpAttr, QpAttrMask), c_int> {
    if attr_mask & !STANDARD_QP_ATTR_BITS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mask = QpAttrMask::from_bits_truncate(attr_mask as u32);
    Ok((conv::qp_attr_from_c(a, mask)?, mask))
}

/// Wraps a core QP into the C object, filling the public fields from the attributes.
fn publish(
    core: rverbs::Qp,
    attr: &ibv_qp_init_attr,
    pd: *mut ibv_pd,
    ctx: *mut ibv_context,
    ex: &ExAttr,
) -> *mut ibv_qp {
    // SAFETY: all-zero is a valid ibv_qp_ex (Zeroed).
    let mut q = ibv_qp_ex::zeroed();
    q.qp_base.context = ctx;
    q.qp_base.qp_context = attr.qp_context;
    q.qp_base.pd = pd;
    // rdma-core mirrors the attributes into the public struct (cmd_qp.c `set_qp`).
    q.qp_base.send_cq = attr.send_cq;
    q.qp_base.recv_cq = attr.recv_cq;
    q.qp_base.srq = attr.srq;
    q.qp_base.handle = core.qp_num();
    q.qp_base.qp_num = core.qp_num();
    q.qp_base.state = IBV_QPS_RESET;
    q.qp_base.qp_type = attr.qp_type;
    // Opcode builders per send_ops_flags; start/complete/abort and the setters always.
    wr::fill(&mut q, ex.send_ops.unwrap_or_default());
    let qp_type = core.qp_type();
    let p = Box::into_raw(Box::new(QpObj {
        qp: UnsafeCell::new(q),
        core,
        ud: qp_type == QpType::Ud,
        xrc_send: qp_type == QpType::XrcSend,
        extended: ex.extended,
        batch: wr::new_batch(),
    }));
    // SAFETY: the allocation just made.
    unsafe { (*p).core.set_cookie(p as usize) };
    live::register(p);
    p.cast()
}

/// Creates an XRC target QP (`IBV_QPT_XRC_RECV`) in `xrcd`: no PD, CQs, SRQ or caps of its
/// own (IBTA Annex A14); `init_attr->cap` comes back zero.
fn create_xrc_recv(
    xrcd: &XrcdObj,
    attr: &mut ibv_qp_init_attr,
    pd: *mut ibv_pd,
    ex: &ExAttr,
) -> *mut ibv_qp {
    if ex.send_ops.is_some_and(|o| !o.is_empty()) {
        return null_errno(libc::EOPNOTSUPP);
    }
    let core = match xrcd.core().create_recv_qp(attr.qp_context as usize) {
        Ok(q) => q,
        Err(e) => return null_errno(e.c_errno()),
    };
    attr.cap = conv::cap_to_c(&core.cap());
    publish(core, attr, pd, xrcd.context_ptr(), ex)
}

/// The type of a QP `ibv_create_qp` (or `create_qp_ex` in a PD) creates: RC, UC, UD or
/// XRC_SEND.
///
/// Errors: `EINVAL` for XRC_RECV (target QPs live in an XRC domain, which only
/// `create_qp_ex` can name); `EOPNOTSUPP` for known transports the core does not run (raw
/// packet, driver QPs) and for unknown types (rxe: kernel rxe_qp.c `rxe_qp_chk_init`).
pub(crate) fn qp_type_from_c(raw: u32) -> Result<QpType, c_int> {
    match QpType::from_raw(raw) {
        Some(t @ (QpType::Rc | QpType::Uc | QpType::Ud | QpType::XrcSend)) => Ok(t),
        Some(QpType::XrcRecv) => Err(libc::EINVAL),
        Some(_) | None => Err(libc::EOPNOTSUPP),
    }
}

/// Where `create_qp_ex` creates a QP: an XRC domain (XRC_RECV) or a PD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpHome {
    Xrcd(*mut ibv_xrcd),
    Pd(*mut ibv_pd),
}

/// What `create_qp_ex` takes from an `ibv_qp_init_attr_ex`, checked before any object it
/// names is looked up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpExAttr {
    /// The `ibv_qp_init_attr` prefix the creation reads (and whose caps it writes back).
    pub(crate) prefix: ibv_qp_init_attr,
    /// `send_ops_flags` when `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` is in the mask.
    pub(crate) send_ops: Option<SendOps>,
    /// `pd` when `IBV_QP_INIT_ATTR_PD` is in the mask, else NULL.
    pub(crate) pd: *mut ibv_pd,
    pub(crate) home: QpHome,
}

/// Reads and checks an `ibv_qp_init_attr_ex` (rules: [`rverbs_create_qp_ex`]): `comp_mask`
/// bits beyond `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` are `EINVAL`; TSO headers, RSS,
/// indirection tables, non-zero create flags and `send_ops_flags` rdma-core 44 does not
/// define are `EOPNOTSUPP`; XRC_RECV without `IBV_QP_INIT_ATTR_XRCD`, or another type
/// without `IBV_QP_INIT_ATTR_PD`, is `EINVAL`.
pub(crate) fn qp_init_attr_ex_from_c(a: &ibv_qp_init_attr_ex) -> Result<QpExAttr, c_int> {
    let known = (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS << 1) - 1;
    if a.comp_mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    let unsupported = IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    if a.comp_mask & unsupported != 0 || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0) {
        return Err(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        if a.send_ops_flags & !wr::V44_SEND_OPS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        Some(SendOps::from_bits_truncate(a.send_ops_flags))
    } else {
        None
    };
    let prefix = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 { a.pd } else { core::ptr::null_mut() };
    let home = if a.qp_type == IBV_QPT_XRC_RECV {
        if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
            return Err(libc::EINVAL);
        }
        QpHome::Xrcd(a.xrcd)
    } else {
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        QpHome::Pd(a.pd)
    };
    Ok(QpExAttr { prefix, send_ops, pd, home })
}

/// Creates the C object (shared by `ibv_create_qp` and the `create_qp_ex` op), reading
/// only the `ibv_qp_init_attr` prefix and writing the granted caps back.
///
/// Rule: XRC initiators (`IBV_QPT_XRC_SEND`) need a send CQ and no SRQ; their receive CQ
/// is ignored (uverbs `create_qp`: XRC_INI has no receive side).
fn create(pd: &PdObj, attr: &mut ibv_qp_init_attr, ex: &ExAttr) -> *mut ibv_qp {
    let qp_type = match qp_type_from_c(attr.qp_type) {
        Ok(t) => t,
        Err(e) => return null_errno(e),
    };
    // SAFETY: caller contract: CQs/SRQ named by the attributes are live objects of ours.
    let send_cq = unsafe { CqObj::from_raw(attr.send_cq) };
    let recv_cq = if qp_type == QpType::XrcSend {
        send_cq
    } else {
        // SAFETY: as above.
        unsafe { CqObj::from_raw(attr.recv_cq) }
    };
    let (Some(send_cq), Some(recv_cq)) = (send_cq, recv_cq) else {
        return null_errno(libc::EINVAL);
    };
    let srq = if attr.srq.is_null() {
        None
    } else {
        // SAFETY: as above.
        match unsafe { SrqObj::from_raw(attr.srq) } {
            Some(s) => Some(s),
            None => return null_errno(libc::EINVAL),
        }
    };
    let init = QpInit {
        qp_type,
        send_cq: send_cq.core(),
        recv_cq: recv_cq.core(),
        srq: srq.map(SrqObj::core),
        cap: conv::cap_from_c(&attr.cap),
        sq_sig_all: attr.sq_sig_all != 0,
        qp_context: attr.qp_context as usize,
        send_ops: ex.send_ops,
    };
    // On a parent domain: its allocator gives the send queue's ring (docs/memory.md,
    // "Custom allocators"), and the QP holds it.
    let created = match pd.parent() {
        Some(parent) => parent.create_qp(&init),
        None => pd.core().create_qp(&init),
    };
    let core = match created {
        Ok(q) => q,
        Err(e) => return null_errno(e.c_errno()),
    };
    attr.cap = conv::cap_to_c(&core.cap());
    publish(core, attr, pd.as_ptr(), pd.context_ptr(), ex)
}

export! {
    /// Creates a queue pair (`ibv_create_qp(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: verbs.h: the inline `ibv_create_qp_ex` forwards here when
    /// `comp_mask == IBV_QP_INIT_ATTR_PD`, so only the `ibv_qp_init_attr` prefix is read
    /// and every type that path may carry is accepted — RC, UC, UD and XRC_SEND
    /// (ibv_xsrq_pingpong); the actual caps are written back into `init_attr->cap`.
    /// Errors: `EOPNOTSUPP` for raw-packet/driver QPs; `EINVAL` for a missing CQ or an
    /// XRC_RECV QP (it needs an XRC domain: `ibv_create_qp_ex`).
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        // SAFETY: caller contract.
        let Some(pd) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: qp_init_attr is NULL or valid (caller contract).
        let Some(attr) = (unsafe { qp_init_attr.as_mut() }) else {
            return null_errno(libc::EINVAL);
        };
        create(pd, attr, &ExAttr::default())
    }
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex(3)` when `comp_mask != PD`).
///
/// Rule: rdma-core `ibv_cmd_create_qp_ex2`: XRC_RECV needs `IBV_QP_INIT_ATTR_XRCD`, every
/// other type `IBV_QP_INIT_ATTR_PD` (`EINVAL`); the PD / domain must belong to this
/// context; `comp_mask` bits beyond `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` are `EINVAL`.
/// Rule: rxe `check_qp_init_attr`: TSO headers, RSS, indirection tables and non-zero
/// create flags are `EOPNOTSUPP`; so are `send_ops_flags` the QP type cannot post
/// (`SendOps::allowed_on`) or rdma-core 44 does not define.
pub(crate) unsafe extern "C" fn rverbs_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return null_errno(libc::EINVAL);
        };
        let q = match qp_init_attr_ex_from_c(a) {
            Ok(q) => q,
            Err(e) => return null_errno(e),
        };
        let mut prefix = q.prefix;
        let ex = ExAttr {
            send_ops: q.send_ops,
            extended: true,
        };
        let qp = match q.home {
            QpHome::Xrcd(x) => {
                // SAFETY: caller contract.
                let Some(xrcd) = (unsafe { XrcdObj::from_raw(x) }) else {
                    return null_errno(libc::EINVAL);
                };
                if xrcd.context_ptr() != ctx.as_ptr() {
                    return null_errno(libc::EINVAL);
                }
                create_xrc_recv(xrcd, &mut prefix, q.pd, &ex)
            }
            QpHome::Pd(p) => {
                // SAFETY: caller contract.
                let Some(pd) = (unsafe { PdObj::from_raw(p) }) else {
                    return null_errno(libc::EINVAL);
                };
                if !pd.in_file_of(ctx) {
                    return null_errno(libc::EINVAL);
                }
                create(pd, &mut prefix, &ex)
            }
        };
        if !qp.is_null() {
            a.cap = prefix.cap;
        }
        qp
    })
}

// ---------------------------------------------------------------------------------------
// Modify / query / destroy
// ---------------------------------------------------------------------------------------

/// The attribute bits rdma-core's legacy modify command carries (bits 0..=20); anything
/// above (`IBV_QP_RATE_LIMIT`) is `EOPNOTSUPP` there (`ibv_cmd_modify_qp`, used by rxe).
const STANDARD_QP_ATTR_BITS: c_int = (IBV_QP_DEST_QPN << 1) as c_int - 1;

export! {
    /// Modifies a queue pair (`ibv_modify_qp(3)`). Returns 0 or an errno.
    ///
    /// Rule: verbs.c: on success with `IBV_QP_STATE` in the mask, `qp->state = attr->qp_state`.
    /// Rule: rdma-core `ibv_cmd_modify_qp`: mask bits beyond `IBV_QP_DEST_QPN` are
    /// `EOPNOTSUPP`.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            return libc::EINVAL;
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return libc::EINVAL;
        };
        let (core_attr, mask) = match modify_attr_from_c(a, attr_mask) {
            Ok(c) => c,
            Err(e) => return e,
        };
        if let Err(e) = obj.core.modify(&core_attr, mask) {
            return e.c_errno();
        }
        if mask.contains(QpAttrMask::STATE) {
            // SAFETY: field of our allocation (rdma-core updates it the same way).
            unsafe { (*obj.as_ptr()).state = a.qp_state };
        }
        0
    }
}

export! {
    /// Queries queue-pair attributes (`ibv_query_qp(3)`). Returns 0 or an errno.
    ///
    /// Rule: every attribute is filled whatever `attr_mask` says (as the kernel does);
    /// `init_attr` gets qp_context, CQs, SRQ, caps, type and sq_sig_all; with
    /// `IBV_QP_STATE` in the mask `qp->state` is refreshed (verbs.c).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            return libc::EINVAL;
        };
        if attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        let q = obj.core.query();
        let c = conv::qp_attr_to_c(&q);
        let p = obj.as_ptr();
        // SAFETY: attr/init_attr are writable (caller contract, checked non-NULL); `p` is
        // our allocation.
        unsafe {
            attr.write(c);
            init_attr.write(ibv_qp_init_attr {
                qp_context: (*p).qp_context,
                send_cq: (*p).send_cq,
                recv_cq: (*p).recv_cq,
                srq: (*p).srq,
                cap: c.cap,
                qp_type: (*p).qp_type,
                sq_sig_all: c_int::from(obj.core.sq_sig_all()),
            });
            if attr_mask & IBV_QP_STATE as c_int != 0 {
                (*p).state = c.qp_state;
            }
        }
        0
    }
}

export! {
    /// Destroys a queue pair (`ibv_destroy_qp(3)`). Returns 0 or an errno.
    ///
    /// Rule: waits until every async event delivered for the QP is acked (rdma-core).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.destroy() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<QpObj, _>(qp) };
        0
    }
}

export! {
    /// Returns the extended view of a QP (`ibv_qp_to_qp_ex(3)`): the same object for QPs
    /// created through `ibv_create_qp_ex` (every QP is allocated as an `ibv_qp_ex`), NULL
    /// for QPs from `ibv_create_qp` (rdma-core: only `VERBS_QP_EX` QPs, which rxe sets in
    /// its `create_qp_ex`). Errors: NULL with `errno = EINVAL` for a foreign pointer.
    #[export("IBVERBS_1.6", null)]
    pub unsafe fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        // SAFETY: caller contract.
        match unsafe { QpObj::from_raw(qp) } {
            Some(obj) if obj.extended => obj.as_ptr().cast(),
            Some(_) => core::ptr::null_mut(),
            None => null_errno(libc::EINVAL),
        }
    }
}

export! {
    /// Attaches a UD QP to a multicast group (`ibv_attach_mcast(3)`). Returns 0 or an
    /// errno.
    ///
    /// Rule: kernel `ib_attach_mcast`, rxe `rxe_mcast.c`: only UD QPs (`EINVAL`), only
    /// multicast GIDs (`EINVAL`); the LID is ignored on RoCE; attaching twice keeps one
    /// attachment; `ENOMEM` beyond the group limits. A QP still attached cannot be
    /// destroyed (`EBUSY`).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
        // SAFETY: caller contract.
        let (Some(obj), Some(gid)) = (unsafe { QpObj::from_raw(qp) }, unsafe { gid.as_ref() }) else {
            return libc::EINVAL;
        };
        match obj.core.attach_mcast(&conv::gid_from_c(gid), lid) {
            Ok(()) => 0,
            Err(e) => e.c_errno(),
        }
    }
}

export! {
    /// Detaches a UD QP from a multicast group (`ibv_detach_mcast(3)`). Returns 0 or an
    /// errno: `EINVAL` if the QP is not a member.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
        // SAFETY: caller contract.
        let (Some(obj), Some(gid)) = (unsafe { QpObj::from_raw(qp) }, unsafe { gid.as_ref() }) else {
            return libc::EINVAL;
        };
        match obj.core.detach_mcast(&conv::gid_from_c(gid), lid) {
            Ok(()) => 0,
            Err(e) => e.c_errno(),
        }
    }
}

export! {
    /// Reads the QP's enhanced connection establishment options (`ibv_query_ece(3)`).
    /// Returns 0 or an errno.
    ///
    /// Rule: ibv_query_ece(3): `EOPNOTSUPP` when the provider does not support ECE, as
    /// here (rdma-core's default `query_ece`, which rxe keeps); `EINVAL` for an invalid QP.
    /// Errors: `EINVAL` for a pointer that is not a live QP of ours or a NULL `ece` (rdma-core
    /// reads through both); `EOPNOTSUPP` otherwise, `*ece` untouched.
    #[export("IBVERBS_1.10", errno)]
    pub unsafe fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
        // SAFETY: caller contract (any pointer; a live QP stays alive during the call).
        if unsafe { QpObj::from_raw(qp) }.is_none() || ece.is_null() {
            return libc::EINVAL;
        }
        libc::EOPNOTSUPP
    }
}

export! {
    /// Sets the QP's enhanced connection establishment options (`ibv_set_ece(3)`).
    /// Returns 0 or an errno.
    ///
    /// Rule: ibv_set_ece(3): `EOPNOTSUPP` when the provider does not support ECE, as here;
    /// `EINVAL` for an invalid QP. rdma-core's `ibv_set_ece` answers `EOPNOTSUPP` with
    /// `errno` set for `vendor_id` 0 before it looks at the QP, and its default `set_ece`
    /// (which rxe keeps) `EOPNOTSUPP` for any other.
    /// Errors: `EINVAL` for a NULL `ece` (rdma-core reads through it); `EOPNOTSUPP` for
    /// `vendor_id` 0; `EINVAL` for a pointer that is not a live QP of ours; `EOPNOTSUPP`
    /// otherwise. `errno` is set with each; `*ece` is left untouched.
    #[export("IBVERBS_1.10", errno)]
    pub unsafe fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
        // SAFETY: caller contract: `ece` is NULL or a valid `struct ibv_ece`.
        let Some(e) = (unsafe { ece.as_ref() }) else {
            set_errno(libc::EINVAL);
            return libc::EINVAL;
        };
        if e.vendor_id == 0 {
            return not_supported_errno();
        }
        // SAFETY: caller contract (any pointer; a live QP stays alive during the call).
        if unsafe { QpObj::from_raw(qp) }.is_none() {
            set_errno(libc::EINVAL);
            return libc::EINVAL;
        }
        not_supported_errno()
    }
}

export! {
    /// Says whether data of `op` is placed in address order (`ibv_query_qp_data_in_order(3)`).
    ///
    /// Rule: ibv_query_qp_data_in_order(3) of rdma-core ≥ 46:
    /// `flags & IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS` returns a mask of
    /// `IBV_QUERY_QP_DATA_IN_ORDER_{WHOLE_MSG,ALIGNED_128_BYTES}`, else 1/0; unknown flag
    /// bits and unknown opcodes give 0 (the core answers).
    #[export("IBVERBS_1.14", value(0))]
    pub unsafe fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            return 0;
        };
        match WrOpcode::from_raw(op) {
            Some(op) => obj.core.data_in_order(op, flags) as c_int,
            None => 0,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Posting (hot path: no allocation, no lock of our own)
// ---------------------------------------------------------------------------------------

/// Work requests translated per call of the core's post (bounded stack use).
const SEND_CHUNK: usize = 4;
/// Inline pieces (one per SGE of an `IBV_SEND_INLINE` request) per chunk.
const INLINE_SLOTS: usize = rverbs::limits::MAX_SGE as usize;
/// Why a C send work request could not be translated.
pub(crate) enum Refused {
    /// Refuse the request with this errno.
    Errno(c_int),
    /// The chunk's inline area is full: post the chunk, then retry the request.
    NoRoom,
}

/// Translates one C send work request. Inline pieces are carved out of `inline_rest`.
///
/// Rule: the union members are read per opcode and QP type: `wr.rdma` (RDMA), `wr.atomic`
/// (CMP_SWP, FETCH_ADD), `bind_mw.{mw, rkey, bind_info}` (BIND_MW), `invalidate_rkey`
/// (the `imm_data` union: LOCAL_INV, SEND_WITH_INV), `wr.ud` (UD QPs),
/// `qp_type.xrc.remote_srqn` (XRC_SEND QPs).
/// Errors: `EINVAL` for an unknown opcode or a window / region / AH that is not ours;
/// `EOPNOTSUPP` for ATOMIC_WRITE (its value has no `ibv_send_wr` member) and FLUSH.
///
/// # Safety
/// `wr` and everything it points to are valid under the C contract of ibv_post_send(3)
/// for the duration of the post call.
/// What translating a C send work request needs of its QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendShape {
    /// The QP's `max_send_sge` (inline pieces count against it).
    pub(crate) max_send_sge: usize,
    /// `wr.ud` is the union member of this QP's send work requests.
    pub(crate) ud: bool,
    /// `qp_type.xrc.remote_srqn` is meaningful in this QP's send work requests.
    pub(crate) xrc_send: bool,
}

impl QpObj {
    /// What translating this QP's send work requests needs.
    fn send_shape(&self) -> SendShape {
        SendShape {
            max_send_sge: self.core.cap().max_send_sge as usize,
            ud: self.ud,
            xrc_send: self.xrc_send,
        }
    }
}

// Inlined: the request is then built where the post reads it (returned, it was copied).
#[inline(always)]
pub(crate) unsafe fn translate_send<'a>(
    qp: SendShape,
    wr: &'a ibv_send_wr,
    inline_rest: &mut &'a mut [&'a [u8]],
) -> Result<SendWr<'a>, Refused> {
    let opcode = WrOpcode::from_raw(wr.opcode).ok_or(Refused::Errno(libc::EINVAL))?;
    if matches!(opcode, WrOpcode::AtomicWrite | WrOpcode::Flush) {
        // verbs.h: `struct ibv_send_wr` has no member for ATOMIC_WRITE's 8-byte value
        // (nor for FLUSH's placement, an rdma-core ≥ 45 opcode); they are only reachable
        // through the ibv_wr_* builder. Refused, never half-posted.
        return Err(Refused::Errno(libc::EOPNOTSUPP));
    }
    let flags = SendFlags::from_bits_truncate(wr.send_flags);
    // SAFETY: caller contract.
    let sges = unsafe { sge_slice(wr.sg_list, wr.num_sge) }.map_err(Refused::Errno)?;
    let payload = if flags.contains(SendFlags::INLINE) {
        // ibv_post_send(3): inline data is copied from the addresses at post time and the
        // lkeys are not checked; the pieces count as SGEs against max_send_sge.
        if sges.len() > qp.max_send_sge {
            return Err(Refused::Errno(libc::EINVAL));
        }
        if sges.len() > INLINE_SLOTS {
            return Err(Refused::Errno(libc::EINVAL));
        }
        if sges.len() > inline_rest.len() {
            return Err(Refused::NoRoom);
        }
        let (pieces, rest) = core::mem::take(inline_rest).split_at_mut(sges.len());
        *inline_rest = rest;
        for (piece, s) in pieces.iter_mut().zip(sges) {
            *piece = if s.length == 0 {
                &[]
            } else if s.addr == 0 {
                return Err(Refused::Errno(libc::EINVAL));
            } else {
                // SAFETY: C contract: an inline SGE names `length` readable bytes at `addr`.
                unsafe {
                    core::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
                }
            };
        }
        Payload::InlineList(pieces)
    } else {
        Payload::Sge(sges)
    };
    let mut out = SendWr {
        flags,
        payload,
        imm_data: wr.imm_data,
        ..SendWr::new(wr.wr_id, opcode)
    };
    match opcode {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            // SAFETY: the C union member for RDMA opcodes.
            let r = unsafe { wr.wr.rdma };
            out.remote_addr = r.remote_addr;
            out.rkey = r.rkey;
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            // SAFETY: the C union member for atomic opcodes.
            let a = unsafe { wr.wr.atomic };
            out.remote_addr = a.remote_addr;
            out.rkey = a.rkey;
            out.compare_add = a.compare_add;
            out.swap = a.swap;
        }
        WrOpcode::BindMw => {
            // SAFETY: the C union member for BIND_MW.
            let b = unsafe { wr.bind_mw_tso.bind_mw };
            // SAFETY: C contract: the window and the bind's region are live objects.
            let mw = unsafe { MwObj::from_raw(b.mw) }.ok_or(Refused::Errno(libc::EINVAL))?;
            // SAFETY: as above.
            let bind = unsafe { bind_from_c(&b.bind_info) }.map_err(Refused::Errno)?;
            out.bind = Some(BindMwWr {
                mw: mw.core(),
                rkey: b.rkey,
                bind,
            });
        }
        // LOCAL_INV and SEND_WITH_INV: `invalidate_rkey` shares the `imm_data` union,
        // already carried in `imm_data` (the core reads it there).
        _ => {}
    }
    if qp.xrc_send {
        // SAFETY: the C union member for XRC initiators.
        out.xrc_remote_srqn = unsafe { wr.qp_type.xrc.remote_srqn };
    }
    if qp.ud {
        // SAFETY: the C union member for UD QPs.
        let ud = unsafe { wr.wr.ud };
        // SAFETY: C contract: the AH is live for the duration of the post.
        let ah = unsafe { AhObj::from_raw(ud.ah) }.ok_or(Refused::Errno(libc::EINVAL))?;
        out.ud = Some(UdDest {
            ah: ah.core().into(),
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        });
    }
    Ok(out)
}

/// `ibv_context.ops.post_send` (`ibv_post_send(3)`). Returns 0 or an errno with
/// `*bad_wr` = the first refused request; the ones before it stay posted (rxe).
///
/// Rule (rdma-core `providers/rxe/rxe.c` `rxe_post_send`): a NULL `bad_wr` is EINVAL
/// with nothing posted; a NULL `wr` is EINVAL with `*bad_wr` = NULL.
pub(crate) unsafe extern "C" fn rverbs_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    ffi_guard!(errno, {
        if bad_wr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: caller contract: bad_wr is writable.
        unsafe { bad_wr.write(core::ptr::null_mut()) };
        if wr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, wr, libc::EINVAL) };
        };
        // SAFETY: forwarded C contract.
        unsafe { post_send_list(wr, bad_wr, obj.send_shape(), |w| obj.core.post_send_unpinned(w)) }
    })
}

/// Translates a C send list for a QP of `shape` and posts it through `post` in
/// stack-sized chunks (at most `SEND_CHUNK` requests, and as many inline pieces as one
/// request may have), reporting the first refused request in `*bad_wr`: one the
/// translation refused (its errno), or the one `post` refused (the core's errno). The
/// requests before it stay posted (rxe).
///
/// # Safety
/// `wr` is a valid C send list (ibv_post_send(3)), `bad_wr` NULL or writable.
pub(crate) unsafe fn post_send_list(
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
    shape: SendShape,
    post: impl Fn(&[SendWr<'_>]) -> Result<(), rverbs::PostError>,
) -> c_int {
    // One request (the common case): no chunk arrays to fill.
    // SAFETY: C contract: every request of the list is valid during the call.
    if let Some(c) = unsafe { wr.as_ref() }.filter(|c| c.next.is_null()) {
        let mut store: [&[u8]; 2] = [&[]; 2];
        let mut rest: &mut [&[u8]] = &mut store;
        // SAFETY: as above.
        match unsafe { translate_send(shape, c, &mut rest) } {
            Ok(w) => {
                return match post(std::slice::from_ref(&w)) {
                    Ok(()) => 0,
                    // SAFETY: bad_wr is NULL or writable.
                    Err(pe) => unsafe { refuse(bad_wr, wr, pe.error.c_errno()) },
                };
            }
            // SAFETY: bad_wr is NULL or writable.
            Err(Refused::Errno(e)) => return unsafe { refuse(bad_wr, wr, e) },
            // More inline pieces than this store holds: the general path below.
            Err(Refused::NoRoom) => {}
        }
    }
    let mut next = wr;
    while !next.is_null() {
        let mut store: [&[u8]; INLINE_SLOTS] = [&[]; INLINE_SLOTS];
        let mut rest: &mut [&[u8]] = &mut store;
        let mut wrs = [SendWr::new(0, WrOpcode::Send); SEND_CHUNK];
        let mut ptrs = [core::ptr::null_mut::<ibv_send_wr>(); SEND_CHUNK];
        let mut n = 0;
        let mut refused = None;
        while n < SEND_CHUNK && !next.is_null() {
            // SAFETY: C contract: every request of the list is valid during the call.
            let c = unsafe { &*next };
            // SAFETY: as above.
            match unsafe { translate_send(shape, c, &mut rest) } {
                Ok(w) => {
                    wrs[n] = w;
                    ptrs[n] = next;
                    n += 1;
                    next = c.next;
                }
                Err(Refused::NoRoom) => break,
                Err(Refused::Errno(e)) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // n == 0: the batch's first request was refused before anything was posted.
        let posted = if n == 0 { Ok(()) } else { post(&wrs[..n]) };
        if let Err(pe) = posted {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, ptrs[pe.index], pe.error.c_errno()) };
        }
        if let Some(e) = refused {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, next, e) };
        }
    }
    0
}

/// `ibv_context.ops.post_recv` (`ibv_post_recv(3)`). Returns 0 or an errno with
/// `*bad_wr` = the first refused request.
///
/// Rule (rdma-core `providers/rxe/rxe.c` `rxe_post_recv`): a NULL `bad_wr` is EINVAL
/// with nothing posted; a NULL `wr` is EINVAL with `*bad_wr` = NULL.
pub(crate) unsafe extern "C" fn rverbs_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi_guard!(errno, {
        if bad_wr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: caller contract: bad_wr is writable.
        unsafe { bad_wr.write(core::ptr::null_mut()) };
        if wr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, wr, libc::EINVAL) };
        };
        // SAFETY: forwarded C contract.
        unsafe { post_recv_list(wr, bad_wr, |w| obj.core.post_recv_unpinned(w)) }
    })
}

/// Acknowledges one asynchronous event about a QP (`ibv_ack_async_event`).
pub(crate) fn ack_async(qp: &QpObj) {
    let p = qp.as_ptr();
    // SAFETY: mutex/cond/counter live in our allocation; zeroed = initialised.
    unsafe {
        libc::pthread_mutex_lock(&raw mut (*p).mutex);
        (*p).events_completed = (*p).events_completed.wrapping_add(1);
        libc::pthread_cond_signal(&raw mut (*p).cond);
        libc::pthread_mutex_unlock(&raw mut (*p).mutex);
    }
    qp.core.ack_async_events(1);
}

/// `ibv_context.ops.bind_mw` (`ibv_bind_mw(3)`, type 1 windows). Returns 0 or an errno
/// (also stored in `errno`, as rdma-core's provider does).
///
/// Rule: the inline wrapper already refused a type 2 window (EINVAL), a missing region
/// with a range (EINVAL) and a region of another PD (EPERM); the core repeats those
/// checks, so a direct call through the slot gets the same answers.
/// Rule: on a successful post `mw->rkey` becomes the new key (`ibv_inc_rkey` of the old
/// one) at once; a bind that then fails completes with `IBV_WC_MW_BIND_ERR` and the
/// caller must restore the old key (ibv_bind_mw(3)).
pub(crate) unsafe extern "C" fn rverbs_bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract (live objects of ours, or garbage we refuse).
        let (qp_obj, mw_obj) = unsafe { (QpObj::from_raw(qp), MwObj::from_raw(mw)) };
        // SAFETY: mw_bind is NULL or valid (caller contract).
        let (Some(qp_obj), Some(mw_obj), Some(b)) = (qp_obj, mw_obj, unsafe { mw_bind.as_ref() })
        else {
            set_errno(libc::EINVAL);
            return libc::EINVAL;
        };
        // SAFETY: the bind info's MR is NULL or live (caller contract).
        let info = match unsafe { bind_from_c(&b.bind_info) } {
            Ok(i) => i,
            Err(e) => {
                set_errno(e);
                return e;
            }
        };
        let flags = SendFlags::from_bits_truncate(b.send_flags);
        match qp_obj.core().bind_mw(mw_obj.core(), &info, b.wr_id, flags) {
            Ok(rkey) => {
                // SAFETY: field of our allocation; rdma-core's provider writes it the same
                // way right after posting.
                unsafe { (*mw_obj.as_ptr()).rkey = rkey };
                0
            }
            Err(e) => {
                set_errno(e.c_errno());
                e.c_errno()
            }
        }
    })
}
