//! Queue pairs: the out-of-line verbs, the `create_qp_ex` op and the inline-dispatch ops
//! `post_send`/`post_recv`.
//!
//! Every QP is allocated as an `ibv_qp_ex` (reference §4.4). The work-request builder
//! (`ibv_wr_*`, QPs created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`) is not available yet:
//! such QPs are refused with `EOPNOTSUPP`, and the `wr_*` slots of every QP hold stubs
//! that post nothing and make `ibv_wr_complete` fail with `EOPNOTSUPP` (never a NULL
//! call, never a fake success).

use core::ffi::{c_int, c_void};
use std::cell::UnsafeCell;

use rverbs::{
    Payload, QpAttrMask, QpInit, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode,
};

use crate::abi::*;
use crate::ah::AhObj;
use crate::conv;
use crate::cq::CqObj;
use crate::device::ContextObj;
use crate::ffi::{not_supported_errno, null_errno};
use crate::pd::PdObj;
use crate::srq::SrqObj;

const QP_MAGIC: u32 = u32::from_be_bytes(*b"rvQP");

/// A QP handed to C: `struct ibv_qp_ex` (whose prefix is `struct ibv_qp`), then the core QP.
#[repr(C)]
pub struct QpObj {
    qp: UnsafeCell<ibv_qp_ex>,
    magic: u32,
    core: rverbs::Qp,
    ud: bool,
}

const _: () = assert!(size_of::<Sge>() == size_of::<ibv_sge>());
const _: () = assert!(align_of::<Sge>() == align_of::<ibv_sge>());

impl QpObj {
    /// The QP behind an `ibv_qp *`; `None` for NULL or a foreign object.
    ///
    /// # Safety
    /// `qp` is NULL or was returned by a QP-creating verb and not destroyed.
    pub unsafe fn from_raw<'a>(qp: *const ibv_qp) -> Option<&'a QpObj> {
        // SAFETY: caller contract: NULL or a live QpObj (C struct first).
        let obj = unsafe { qp.cast::<QpObj>().as_ref()? };
        (obj.magic == QP_MAGIC).then_some(obj)
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
}

// ---------------------------------------------------------------------------------------
// ibv_qp_ex builder stubs
// ---------------------------------------------------------------------------------------

/// `wr_start` … `wr_set_*`, `wr_abort`: the builder is not available; nothing is queued.
unsafe extern "C" fn wr_noop(_qp: *mut ibv_qp_ex) {}
unsafe extern "C" fn wr_noop_u32(_qp: *mut ibv_qp_ex, _a: u32) {}
unsafe extern "C" fn wr_noop_u32_u64(_qp: *mut ibv_qp_ex, _a: u32, _b: u64) {}
unsafe extern "C" fn wr_noop_u32_u64_u32(_qp: *mut ibv_qp_ex, _a: u32, _b: u64, _c: u32) {}
unsafe extern "C" fn wr_noop_u32_u64_u64(_qp: *mut ibv_qp_ex, _a: u32, _b: u64, _c: u64) {}
unsafe extern "C" fn wr_noop_cas(_qp: *mut ibv_qp_ex, _a: u32, _b: u64, _c: u64, _d: u64) {}
unsafe extern "C" fn wr_noop_bind(
    _qp: *mut ibv_qp_ex,
    _mw: *mut ibv_mw,
    _rkey: u32,
    _info: *const ibv_mw_bind_info,
) {
}
unsafe extern "C" fn wr_noop_tso(_qp: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {}
unsafe extern "C" fn wr_noop_ud(_qp: *mut ibv_qp_ex, _ah: *mut ibv_ah, _qpn: u32, _qkey: u32) {}
unsafe extern "C" fn wr_noop_inline(_qp: *mut ibv_qp_ex, _addr: *mut c_void, _len: usize) {}
unsafe extern "C" fn wr_noop_inline_list(_qp: *mut ibv_qp_ex, _n: usize, _l: *const ibv_data_buf) {}
unsafe extern "C" fn wr_noop_sge_list(_qp: *mut ibv_qp_ex, _n: usize, _l: *const ibv_sge) {}
unsafe extern "C" fn wr_noop_atomic_write(
    _qp: *mut ibv_qp_ex,
    _a: u32,
    _b: u64,
    _c: *const c_void,
) {
}

/// `wr_complete`: nothing was queued; the builder is not supported.
unsafe extern "C" fn wr_complete_unsupported(_qp: *mut ibv_qp_ex) -> c_int {
    not_supported_errno()
}

fn fill_builder_stubs(q: &mut ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_noop_cas);
    q.wr_atomic_fetch_add = Some(wr_noop_u32_u64_u64);
    q.wr_bind_mw = Some(wr_noop_bind);
    q.wr_local_inv = Some(wr_noop_u32);
    q.wr_rdma_read = Some(wr_noop_u32_u64);
    q.wr_rdma_write = Some(wr_noop_u32_u64);
    q.wr_rdma_write_imm = Some(wr_noop_u32_u64_u32);
    q.wr_send = Some(wr_noop);
    q.wr_send_imm = Some(wr_noop_u32);
    q.wr_send_inv = Some(wr_noop_u32);
    q.wr_send_tso = Some(wr_noop_tso);
    q.wr_set_ud_addr = Some(wr_noop_ud);
    q.wr_set_xrc_srqn = Some(wr_noop_u32);
    q.wr_set_inline_data = Some(wr_noop_inline);
    q.wr_set_inline_data_list = Some(wr_noop_inline_list);
    q.wr_set_sge = Some(wr_noop_u32_u64_u32);
    q.wr_set_sge_list = Some(wr_noop_sge_list);
    q.wr_start = Some(wr_noop);
    q.wr_complete = Some(wr_complete_unsupported);
    q.wr_abort = Some(wr_noop);
    q.wr_atomic_write = Some(wr_noop_atomic_write);
}

// ---------------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------------

/// Creates the C object (shared by `ibv_create_qp` and the `create_qp_ex` op), reading
/// only the `ibv_qp_init_attr` prefix and writing the granted caps back.
fn create(pd: &PdObj, attr: &mut ibv_qp_init_attr) -> *mut ibv_qp {
    let qp_type = match QpType::from_raw(attr.qp_type) {
        Some(t @ (QpType::Rc | QpType::Uc | QpType::Ud)) => t,
        // Known transports the core does not run yet (XRC, raw packet, driver QPs).
        Some(_) => return null_errno(libc::EOPNOTSUPP),
        None => return null_errno(libc::EINVAL),
    };
    // SAFETY: caller contract: CQs/SRQ named by the attributes are live objects of ours.
    let (send_cq, recv_cq) =
        unsafe { (CqObj::from_raw(attr.send_cq), CqObj::from_raw(attr.recv_cq)) };
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
    };
    let core = match pd.core().create_qp(&init) {
        Ok(q) => q,
        Err(e) => return null_errno(e.errno()),
    };
    attr.cap = conv::cap_to_c(&core.cap());
    // SAFETY: all-zero is a valid ibv_qp_ex (Zeroed).
    let mut q = ibv_qp_ex::zeroed();
    q.qp_base.context = pd.context_ptr();
    q.qp_base.qp_context = attr.qp_context;
    q.qp_base.pd = pd.as_ptr();
    q.qp_base.send_cq = attr.send_cq;
    q.qp_base.recv_cq = attr.recv_cq;
    q.qp_base.srq = attr.srq;
    q.qp_base.handle = core.qp_num();
    q.qp_base.qp_num = core.qp_num();
    q.qp_base.state = IBV_QPS_RESET;
    q.qp_base.qp_type = attr.qp_type;
    fill_builder_stubs(&mut q);
    let p = Box::into_raw(Box::new(QpObj {
        qp: UnsafeCell::new(q),
        magic: QP_MAGIC,
        core,
        ud: qp_type == QpType::Ud,
    }));
    // SAFETY: the allocation just made.
    unsafe { (*p).core.set_cookie(p as usize) };
    p.cast()
}

export! {
    /// Creates a queue pair (`ibv_create_qp(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: reference §7 item 9: the inline `ibv_create_qp_ex` forwards here when
    /// `comp_mask == IBV_QP_INIT_ATTR_PD`, so only the `ibv_qp_init_attr` prefix is read;
    /// the actual caps are written back into `init_attr->cap`.
    /// Errors: `EOPNOTSUPP` for XRC/raw-packet/driver QPs; `EINVAL` for a missing CQ.
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
        create(pd, attr)
    }
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex(3)` when `comp_mask != PD`).
///
/// Rule: `comp_mask` must name a PD of this context; bits beyond
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` are `EINVAL`; XRCD, TSO headers, RSS, indirection
/// tables, the work-request builder (SEND_OPS_FLAGS) and non-zero create flags are
/// `EOPNOTSUPP` (not available on this device yet).
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
        let known = (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS << 1) - 1;
        if a.comp_mask & !known != 0 {
            return null_errno(libc::EINVAL);
        }
        let unsupported = IBV_QP_INIT_ATTR_XRCD
            | IBV_QP_INIT_ATTR_MAX_TSO_HEADER
            | IBV_QP_INIT_ATTR_IND_TABLE
            | IBV_QP_INIT_ATTR_RX_HASH
            | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & unsupported != 0
            || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
        {
            return null_errno(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return null_errno(libc::EINVAL);
        }
        // SAFETY: caller contract.
        let Some(pd) = (unsafe { PdObj::from_raw(a.pd) }) else {
            return null_errno(libc::EINVAL);
        };
        if pd.context_ptr() != ctx.as_ptr() {
            return null_errno(libc::EINVAL);
        }
        let mut prefix = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let qp = create(pd, &mut prefix);
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
        if attr_mask & !STANDARD_QP_ATTR_BITS != 0 {
            return libc::EOPNOTSUPP;
        }
        let mask = QpAttrMask::from_bits_truncate(attr_mask as u32);
        let core_attr = match conv::qp_attr_from_c(a, mask) {
            Ok(c) => c,
            Err(e) => return e,
        };
        if let Err(e) = obj.core.modify(&core_attr, mask) {
            return e.errno();
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
            return e.errno();
        }
        // SAFETY: allocated by Box in `create` (the C struct is at offset 0); the caller
        // gives it up.
        let mut obj = unsafe { Box::from_raw(qp.cast::<QpObj>()) };
        obj.magic = 0;
        0
    }
}

export! {
    /// Returns the extended view of a QP (`ibv_qp_to_qp_ex(3)`): every QP of this library
    /// is allocated as an `ibv_qp_ex`, so this is the same address; its builder slots hold
    /// stubs (`ibv_wr_complete` fails with `EOPNOTSUPP`) until the builder exists.
    /// Errors: NULL with `errno = EINVAL` for a foreign pointer.
    #[export("IBVERBS_1.6", null)]
    pub unsafe fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        // SAFETY: caller contract.
        match unsafe { QpObj::from_raw(qp) } {
            Some(obj) => obj.as_ptr().cast(),
            None => null_errno(libc::EINVAL),
        }
    }
}

export! {
    /// Attaches a UD QP to a multicast group (`ibv_attach_mcast(3)`). Returns 0 or an
    /// errno: `EOPNOTSUPP`, the device has no multicast yet.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
        not_supported_errno()
    }
}

export! {
    /// Detaches a UD QP from a multicast group (`ibv_detach_mcast(3)`). Returns 0 or an
    /// errno: `EOPNOTSUPP`, the device has no multicast yet.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
        not_supported_errno()
    }
}

export! {
    /// Reads the QP's enhanced connection establishment options (`ibv_query_ece(3)`).
    /// Returns 0 or an errno: `EOPNOTSUPP`, the device has no ECE.
    #[export("IBVERBS_1.10", errno)]
    pub unsafe fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
        not_supported_errno()
    }
}

export! {
    /// Sets the QP's enhanced connection establishment options (`ibv_set_ece(3)`).
    /// Returns 0 or an errno (with `errno` set, as rdma-core does): `EOPNOTSUPP`, the
    /// device has no ECE.
    #[export("IBVERBS_1.10", errno)]
    pub unsafe fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
        not_supported_errno()
    }
}

export! {
    /// Says whether data of `op` is placed in address order (`ibv_query_qp_data_in_order(3)`).
    ///
    /// Rule: reference §4.9 (v46 semantics): `flags & IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS`
    /// returns a mask of `IBV_QUERY_QP_DATA_IN_ORDER_{WHOLE_MSG,ALIGNED_128_BYTES}`, else
    /// 1/0; unknown flag bits and unknown opcodes give 0 (the core answers).
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
const SEND_CHUNK: usize = 16;
/// Inline pieces (one per SGE of an `IBV_SEND_INLINE` request) per chunk.
const INLINE_SLOTS: usize = 64;
/// Receive work requests translated per call of the core's post.
const RECV_CHUNK: usize = 32;

/// More scatter/gather entries than any queue of the device accepts: refused before a
/// slice is formed, so a wild `num_sge` never makes us read past the caller's array.
const MAX_ANY_SGE: usize = {
    let (a, b) = (
        rverbs::device::limits::MAX_SGE,
        rverbs::device::limits::MAX_SRQ_SGE,
    );
    (if a > b { a } else { b }) as usize
};

/// The scatter list of a C work request as core SGEs (same layout).
///
/// Errors: `EINVAL` for a negative `num_sge`, one above every queue's limit, or a NULL
/// list with entries.
///
/// # Safety
/// `sg_list` points to `num_sge` valid `ibv_sge` (the C contract) when `num_sge > 0`.
pub(crate) unsafe fn sge_slice<'a>(
    sg_list: *const ibv_sge,
    num_sge: c_int,
) -> Result<&'a [Sge], c_int> {
    match usize::try_from(num_sge) {
        Ok(0) => Ok(&[]),
        Ok(n) if n <= MAX_ANY_SGE && !sg_list.is_null() => {
            // SAFETY: ibv_sge and Sge have the same layout (asserted above); the list is
            // valid for n entries (caller contract).
            Ok(unsafe { core::slice::from_raw_parts(sg_list.cast::<Sge>(), n) })
        }
        _ => Err(libc::EINVAL),
    }
}

/// Why a C send work request could not be translated.
enum Refused {
    /// Refuse the request with this errno.
    Errno(c_int),
    /// The chunk's inline area is full: post the chunk, then retry the request.
    NoRoom,
}

/// Translates one C send work request. Inline pieces are carved out of `inline_rest`.
///
/// # Safety
/// `wr` and everything it points to are valid under the C contract of ibv_post_send(3)
/// for the duration of the post call.
unsafe fn translate_send<'a>(
    qp: &QpObj,
    wr: &'a ibv_send_wr,
    inline_rest: &mut &'a mut [&'a [u8]],
) -> Result<SendWr<'a>, Refused> {
    let opcode = WrOpcode::from_raw(wr.opcode).ok_or(Refused::Errno(libc::EINVAL))?;
    if matches!(
        opcode,
        WrOpcode::BindMw | WrOpcode::AtomicWrite | WrOpcode::Flush
    ) {
        // Their C operands (`wr.bind_mw`, ATOMIC_WRITE's 8-byte value, FLUSH's
        // placement) are not translated yet: refused, never half-posted.
        return Err(Refused::Errno(libc::EOPNOTSUPP));
    }
    let flags = SendFlags::from_bits_truncate(wr.send_flags);
    // SAFETY: caller contract.
    let sges = unsafe { sge_slice(wr.sg_list, wr.num_sge) }.map_err(Refused::Errno)?;
    let payload = if flags.contains(SendFlags::INLINE) {
        // ibv_post_send(3): inline data is copied from the addresses at post time and the
        // lkeys are not checked; the pieces count as SGEs against max_send_sge.
        if sges.len() > qp.core.cap().max_send_sge as usize {
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
        _ => {}
    }
    if qp.ud {
        // SAFETY: the C union member for UD QPs.
        let ud = unsafe { wr.wr.ud };
        // SAFETY: C contract: the AH is live for the duration of the post.
        let ah = unsafe { AhObj::from_raw(ud.ah) }.ok_or(Refused::Errno(libc::EINVAL))?;
        out.ud = Some(UdDest {
            ah: ah.core(),
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        });
    }
    Ok(out)
}

/// Stores the refused request into `*bad_wr` (if the caller gave one) and returns `err`.
///
/// # Safety
/// `bad_wr` is NULL or writable.
unsafe fn refuse<T>(bad_wr: *mut *mut T, wr: *mut T, err: c_int) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: caller contract.
        unsafe { bad_wr.write(wr) };
    }
    err
}

/// `ibv_context.ops.post_send` (`ibv_post_send(3)`). Returns 0 or an errno with
/// `*bad_wr` = the first refused request; the ones before it stay posted (rxe).
pub(crate) unsafe extern "C" fn rverbs_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    ffi_guard!(errno, {
        if !bad_wr.is_null() {
            // SAFETY: caller contract: bad_wr is writable.
            unsafe { bad_wr.write(core::ptr::null_mut()) };
        }
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { QpObj::from_raw(qp) }) else {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, wr, libc::EINVAL) };
        };
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
                match unsafe { translate_send(obj, c, &mut rest) } {
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
            let posted = if n == 0 {
                Ok(())
            } else {
                obj.core.post_send_unpinned(&wrs[..n])
            };
            if let Err(pe) = posted {
                // SAFETY: bad_wr is NULL or writable.
                return unsafe { refuse(bad_wr, ptrs[pe.index], pe.error.errno()) };
            }
            if let Some(e) = refused {
                // SAFETY: bad_wr is NULL or writable.
                return unsafe { refuse(bad_wr, next, e) };
            }
        }
        0
    })
}

/// Posts a C receive list through `post` in stack-sized chunks, reporting the first
/// refused request in `*bad_wr` (shared by QPs and SRQs).
///
/// # Safety
/// `wr` is a valid C receive list, `bad_wr` NULL or writable (C contract).
pub(crate) unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(&[RecvWr<'_>]) -> Result<(), rverbs::PostError>,
) -> c_int {
    let mut next = wr;
    while !next.is_null() {
        let mut wrs = [RecvWr::new(0, &[]); RECV_CHUNK];
        let mut ptrs = [core::ptr::null_mut::<ibv_recv_wr>(); RECV_CHUNK];
        let mut n = 0;
        let mut refused = None;
        while n < RECV_CHUNK && !next.is_null() {
            // SAFETY: C contract: every request of the list is valid during the call.
            let c = unsafe { &*next };
            // SAFETY: as above.
            match unsafe { sge_slice(c.sg_list, c.num_sge) } {
                Ok(sges) => {
                    wrs[n] = RecvWr::new(c.wr_id, sges);
                    ptrs[n] = next;
                    n += 1;
                    next = c.next;
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // n == 0: the batch's first request was refused before anything was posted.
        let posted = if n == 0 { Ok(()) } else { post(&wrs[..n]) };
        if let Err(pe) = posted {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, ptrs[pe.index], pe.error.errno()) };
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
pub(crate) unsafe extern "C" fn rverbs_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi_guard!(errno, {
        if !bad_wr.is_null() {
            // SAFETY: caller contract: bad_wr is writable.
            unsafe { bad_wr.write(core::ptr::null_mut()) };
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
