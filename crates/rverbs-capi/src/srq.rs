//! Shared receive queues: the out-of-line verbs, the `create_srq_ex` op and the
//! inline-dispatch op `post_srq_recv`.

use core::ffi::c_int;
use std::cell::UnsafeCell;

use rverbs::{SrqAttr, SrqAttrMask, SrqInit};

use crate::abi::*;
use crate::live;
use crate::cq::CqObj;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, null_errno};
use crate::pd::PdObj;
use crate::xrcd::XrcdObj;

/// An SRQ handed to C: `struct ibv_srq`, then the core SRQ.
#[repr(C)]
pub struct SrqObj {
    srq: UnsafeCell<ibv_srq>,
    core: rverbs::Srq,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for SrqObj {
    const KIND: live::Kind = live::Kind::Srq;
}

impl SrqObj {
    /// The SRQ behind an `ibv_srq *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `srq` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(srq: *const ibv_srq) -> Option<&'a SrqObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(srq) }
    }

    /// The `struct ibv_srq *` handed to C.
    pub fn as_ptr(&self) -> *mut ibv_srq {
        // The whole object, not just the field: C hands this pointer back to us.
        (self as *const Self).cast_mut().cast()
    }

    /// The core SRQ.
    pub fn core(&self) -> &rverbs::Srq {
        &self.core
    }
}

/// Creates the C object (shared by `ibv_create_srq` and the `create_srq_ex` op) and writes
/// the granted attributes back. With `xrc` (domain, CQ) the SRQ is an XRC SRQ.
fn create(
    pd: &PdObj,
    srq_context: *mut core::ffi::c_void,
    attr: &mut ibv_srq_attr,
    xrc: Option<(&XrcdObj, &CqObj)>,
    tm: Option<(rverbs::TmCap, &CqObj)>,
) -> *mut ibv_srq {
    let init = SrqInit {
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        srq_limit: attr.srq_limit,
        srq_context: srq_context as usize,
    };
    let made = match (xrc, tm) {
        (Some((xrcd, cq)), _) => pd.core().create_srq_xrc(&init, xrcd.core(), cq.core()),
        (None, Some((cap, cq))) => pd.core().create_srq_tm(&init, cap, cq.core()),
        (None, None) => pd.core().create_srq(&init),
    };
    let core = match made {
        Ok(s) => s,
        Err(e) => return null_errno(e.c_errno()),
    };
    let granted = core.query();
    attr.max_wr = granted.max_wr;
    attr.max_sge = granted.max_sge;
    let mut srq = ibv_srq::zeroed();
    srq.context = pd.context_ptr();
    srq.srq_context = srq_context;
    srq.pd = pd.as_ptr();
    let p = Box::into_raw(Box::new(SrqObj {
        srq: UnsafeCell::new(srq),
        core,
    }));
    // SAFETY: the allocation just made.
    unsafe { (*p).core.set_cookie(p as usize) };
    live::register(p);
    p.cast()
}

export! {
    /// Creates a shared receive queue (`ibv_create_srq(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: the inline `ibv_create_srq_ex` forwards basic SRQs here (verbs.h);
    /// the library sets context, srq_context, pd, mutex/cond, events_completed, and writes
    /// the granted `max_wr`/`max_sge` back.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
        // SAFETY: caller contract.
        let Some(pd) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: srq_init_attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { srq_init_attr.as_mut() }) else {
            return null_errno(libc::EINVAL);
        };
        create(pd, a.srq_context, &mut a.attr, None, None)
    }
}

/// `verbs_context.create_srq_ex` (`ibv_create_srq_ex(3)` beyond the basic forms).
///
/// Rule: rdma-core `ibv_cmd_create_srq_ex`: `comp_mask` bits at or above
/// `IBV_SRQ_INIT_ATTR_RESERVED` and a missing `IBV_SRQ_INIT_ATTR_PD` are `EINVAL`; an
/// XRC SRQ (`IBV_SRQT_XRC`) needs `IBV_SRQ_INIT_ATTR_XRCD` and `IBV_SRQ_INIT_ATTR_CQ`
/// (`EINVAL`), and every receive of it completes on that CQ. A tag-matching SRQ
/// (`IBV_SRQT_TM`) needs `IBV_SRQ_INIT_ATTR_TM` and `IBV_SRQ_INIT_ATTR_CQ` (`EINVAL`):
/// its receives and list operations complete on that CQ, `tm_cap` within `tm_caps`
/// (docs/tag-matching.md). For a basic SRQ `IBV_SRQ_INIT_ATTR_CQ` is accepted and unused.
pub(crate) unsafe extern "C" fn rverbs_create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return null_errno(libc::EINVAL);
        };
        let c = match srq_init_attr_ex_from_c(a) {
            Ok(c) => c,
            Err(e) => return null_errno(e),
        };
        // SAFETY: caller contract.
        let Some(pd) = (unsafe { PdObj::from_raw(c.pd) }) else {
            return null_errno(libc::EINVAL);
        };
        if !pd.in_file_of(ctx) {
            return null_errno(libc::EINVAL);
        }
        if let Some((cap, cq)) = c.tm {
            // SAFETY: caller contract: the CQ is a live object of ours (or refused unread).
            let Some(cq) = (unsafe { CqObj::from_raw(cq) }) else {
                return null_errno(libc::EINVAL);
            };
            let cap = rverbs::TmCap { max_num_tags: cap.max_num_tags, max_ops: cap.max_ops };
            return create(pd, a.srq_context, &mut a.attr, None, Some((cap, cq)));
        }
        let Some((xrcd, cq)) = c.xrc else {
            return create(pd, a.srq_context, &mut a.attr, None, None);
        };
        // SAFETY: caller contract: the domain and the CQ are live objects of ours.
        let (Some(xrcd), Some(cq)) = (unsafe { XrcdObj::from_raw(xrcd) }, unsafe {
            CqObj::from_raw(cq)
        }) else {
            return null_errno(libc::EINVAL);
        };
        create(pd, a.srq_context, &mut a.attr, Some((xrcd, cq)), None)
    })
}

/// What `create_srq_ex` takes from an `ibv_srq_init_attr_ex`, checked before any object
/// it names is looked up: the PD, and for an XRC SRQ its domain and CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SrqExAttr {
    pub(crate) pd: *mut ibv_pd,
    pub(crate) xrc: Option<(*mut ibv_xrcd, *mut ibv_cq)>,
    /// A tag-matching SRQ: its `tm_cap` and CQ.
    pub(crate) tm: Option<(ibv_tm_cap, *mut ibv_cq)>,
}

/// Reads and checks an `ibv_srq_init_attr_ex` (rules: [`rverbs_create_srq_ex`]):
/// `comp_mask` bits at or above `IBV_SRQ_INIT_ATTR_RESERVED`, an unknown type, a basic
/// SRQ with `IBV_SRQ_INIT_ATTR_TM`, a missing PD, an XRC SRQ without domain or CQ, a
/// tag-matching SRQ without `tm_cap` or CQ are `EINVAL`.
pub(crate) fn srq_init_attr_ex_from_c(a: &ibv_srq_init_attr_ex) -> Result<SrqExAttr, c_int> {
    if a.comp_mask & !(IBV_SRQ_INIT_ATTR_RESERVED - 1) != 0 {
        return Err(libc::EINVAL);
    }
    let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 { a.srq_type } else { IBV_SRQT_BASIC };
    let (xrc, tm) = match srq_type {
        IBV_SRQT_BASIC if a.comp_mask & IBV_SRQ_INIT_ATTR_TM == 0 => (false, false),
        IBV_SRQT_XRC => (true, false),
        IBV_SRQT_TM => (false, true),
        _ => return Err(libc::EINVAL),
    };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if xrc && a.comp_mask & need != need {
        return Err(libc::EINVAL);
    }
    let need = IBV_SRQ_INIT_ATTR_TM | IBV_SRQ_INIT_ATTR_CQ;
    if tm && a.comp_mask & need != need {
        return Err(libc::EINVAL);
    }
    Ok(SrqExAttr { pd: a.pd, xrc: xrc.then_some((a.xrcd, a.cq)), tm: tm.then_some((a.tm_cap, a.cq)) })
}

export! {
    /// Modifies an SRQ (`ibv_modify_srq(3)`: `IBV_SRQ_MAX_WR`, `IBV_SRQ_LIMIT`).
    /// Returns 0 or an errno (`EINVAL` for unknown mask bits).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_modify_srq(
        srq: *mut ibv_srq,
        srq_attr: *mut ibv_srq_attr,
        srq_attr_mask: c_int,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { SrqObj::from_raw(srq) }) else {
            return libc::EINVAL;
        };
        // SAFETY: srq_attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { srq_attr.as_ref() }) else {
            return libc::EINVAL;
        };
        let Some(mask) = SrqAttrMask::from_bits(srq_attr_mask as u32) else {
            return libc::EINVAL;
        };
        let attr = SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit };
        match obj.core.modify(&attr, mask) {
            Ok(()) => 0,
            Err(e) => e.c_errno(),
        }
    }
}

export! {
    /// Queries SRQ attributes (`ibv_query_srq(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { SrqObj::from_raw(srq) }) else {
            return libc::EINVAL;
        };
        if srq_attr.is_null() {
            return libc::EINVAL;
        }
        let a = obj.core.query();
        // SAFETY: srq_attr is writable (caller contract, checked non-NULL).
        unsafe {
            srq_attr.write(ibv_srq_attr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit })
        };
        0
    }
}

export! {
    /// Destroys an SRQ (`ibv_destroy_srq(3)`). Returns 0 or an errno (`EBUSY` while QPs
    /// use it).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { SrqObj::from_raw(srq) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.destroy() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<SrqObj, _>(srq) };
        0
    }
}

/// `ibv_context.ops.post_srq_recv` (`ibv_post_srq_recv(3)`). Returns 0 or an errno with
/// `*bad_recv_wr` = the first refused request.
pub(crate) unsafe extern "C" fn rverbs_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi_guard!(errno, {
        if !bad_wr.is_null() {
            // SAFETY: caller contract: bad_wr is writable.
            unsafe { bad_wr.write(core::ptr::null_mut()) };
        }
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { SrqObj::from_raw(srq) }) else {
            if !bad_wr.is_null() {
                // SAFETY: as above.
                unsafe { bad_wr.write(wr) };
            }
            return libc::EINVAL;
        };
        // SAFETY: forwarded C contract.
        unsafe { crate::wrlist::post_recv_list(wr, bad_wr, |w| obj.core.post_recv_unpinned(w)) }
    })
}

/// Acknowledges one asynchronous event about an SRQ (`ibv_ack_async_event`).
pub(crate) fn ack_async(srq: &SrqObj) {
    let p = srq.as_ptr();
    // SAFETY: mutex/cond/counter live in our allocation; zeroed = initialised.
    unsafe {
        libc::pthread_mutex_lock(&raw mut (*p).mutex);
        (*p).events_completed = (*p).events_completed.wrapping_add(1);
        libc::pthread_cond_signal(&raw mut (*p).cond);
        libc::pthread_mutex_unlock(&raw mut (*p).mutex);
    }
    srq.core.ack_async_events(1);
}

/// `verbs_context.get_srq_num` (`ibv_get_srq_num(3)`). Returns 0 or an errno.
///
/// Rule: the 24-bit SRQ number XRC initiators name as `remote_srqn`; every SRQ has one
/// (as on mlx5), XRC or not.
pub(crate) unsafe extern "C" fn rverbs_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { SrqObj::from_raw(srq) }) else {
            return libc::EINVAL;
        };
        if srq_num.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: srq_num is writable (caller contract, checked non-NULL).
        unsafe { srq_num.write(obj.core().srq_num()) };
        0
    })
}

/// `verbs_context.post_srq_ops` (`ibv_post_srq_ops(3)`): the tag-list operations of a
/// tag-matching SRQ, in list order ([`rverbs::Srq::post_tag_op`]); an ADD writes its
/// handle into `tm.handle`. Returns 0 or an errno with `*bad_op` = the first refused
/// operation (those before it are done): `EINVAL` for an SRQ that is not tag matching,
/// an unknown opcode or flag, a bad scatter list; `ENOMEM` when the list is full.
pub(crate) unsafe extern "C" fn rverbs_post_srq_ops(
    srq: *mut ibv_srq,
    op: *mut ibv_ops_wr,
    bad_op: *mut *mut ibv_ops_wr,
) -> c_int {
    ffi_guard!(errno, {
        if !bad_op.is_null() {
            // SAFETY: caller contract: bad_op is writable.
            unsafe { bad_op.write(core::ptr::null_mut()) };
        }
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { SrqObj::from_raw(srq) }) else {
            // SAFETY: bad_op is NULL or writable.
            return unsafe { crate::wrlist::refuse(bad_op, op, libc::EINVAL) };
        };
        let mut next = op;
        while !next.is_null() {
            // SAFETY: C contract: every operation of the list is valid during the call.
            let c = unsafe { &mut *next };
            let Some(flags) = rverbs::TagOpFlags::from_bits(c.flags as u32) else {
                // SAFETY: bad_op is NULL or writable.
                return unsafe { crate::wrlist::refuse(bad_op, next, libc::EINVAL) };
            };
            let kind = match c.opcode {
                IBV_WR_TAG_ADD => {
                    // SAFETY: C contract: sg_list holds num_sge entries.
                    let sg_list = match unsafe { crate::wrlist::sge_slice(c.tm.add.sg_list, c.tm.add.num_sge) } {
                        Ok(s) => s,
                        // SAFETY: bad_op is NULL or writable.
                        Err(e) => return unsafe { crate::wrlist::refuse(bad_op, next, e) },
                    };
                    let a = c.tm.add;
                    rverbs::TagOpKind::Add { recv_wr_id: a.recv_wr_id, sg_list, tag: a.tag, mask: a.mask }
                }
                IBV_WR_TAG_DEL => rverbs::TagOpKind::Del { handle: c.tm.handle },
                IBV_WR_TAG_SYNC => rverbs::TagOpKind::Sync,
                // SAFETY: bad_op is NULL or writable.
                _ => return unsafe { crate::wrlist::refuse(bad_op, next, libc::EINVAL) },
            };
            let wr = rverbs::TagOp { wr_id: c.wr_id, kind, flags, unexpected_cnt: c.tm.unexpected_cnt };
            match obj.core.post_tag_op(&wr) {
                Ok(handle) => {
                    if let Some(h) = handle {
                        c.tm.handle = h;
                    }
                }
                // SAFETY: bad_op is NULL or writable.
                Err(e) => return unsafe { crate::wrlist::refuse(bad_op, next, e.c_errno()) },
            }
            next = c.next;
        }
        0
    })
}
