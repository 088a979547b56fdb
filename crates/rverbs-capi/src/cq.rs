//! Completion channels and completion queues: the out-of-line verbs, the inline-dispatch
//! ops `poll_cq`/`req_notify_cq`, the `create_cq_ex` op and the `ibv_cq_ex` polling
//! functions (`start_poll`/`next_poll`/`end_poll`/`read_*`).
//!
//! Every CQ is allocated as an `ibv_cq_ex` (as rdma-core's `struct verbs_cq` union), so
//! `ibv_cq_ex_to_cq` and mixed use work on any CQ.

use core::ffi::{c_int, c_uint, c_void};
use std::cell::UnsafeCell;
use std::os::fd::AsRawFd;

use rverbs::{CqCreateFlags, CqInit, WcExFlags};

use crate::abi::*;
use crate::live;
use crate::context::ContextObj;
use crate::pd::PdObj;
use crate::ffi::{ToErrno, getter_on_unknown_object, minus_one_errno, null_errno, set_errno};

// ---------------------------------------------------------------------------------------
// Completion channels
// ---------------------------------------------------------------------------------------

/// A completion channel handed to C: `struct ibv_comp_channel`, then the core channel.
#[repr(C)]
pub struct ChannelObj {
    ch: UnsafeCell<ibv_comp_channel>,
    core: rverbs::CompChannel,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for ChannelObj {
    const KIND: live::Kind = live::Kind::CompChannel;
}

impl ChannelObj {
    /// The channel behind an `ibv_comp_channel *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `ch` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(ch: *mut ibv_comp_channel) -> Option<&'a ChannelObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(ch) }
    }

    fn context(&self) -> Option<&ContextObj> {
        // SAFETY: `context` was set at creation to the live context that owns the channel.
        unsafe { ContextObj::from_raw((*self.ch.get()).context) }
    }

    /// `refcnt += delta` under the context mutex (rdma-core `verbs_init_cq` /
    /// `ibv_destroy_cq`).
    fn add_ref(&self, delta: c_int) {
        let _g = self.context().map(ContextObj::lock);
        // SAFETY: field of our allocation, written under the context mutex.
        unsafe { (*self.ch.get()).refcnt += delta };
    }
}

export! {
    /// Creates a completion channel (`ibv_create_comp_channel(3)`).
    /// Errors: NULL with `errno`.
    ///
    /// Rule: ibv_get_cq_event(3): `fd` is a real pollable fd, readable while an event is
    /// queued, blocking unless the application sets `O_NONBLOCK`; `refcnt` starts at 0.
    #[export("IBVERBS_1.0", null)]
    pub unsafe fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        let core = match ctx.core().create_comp_channel() {
            Ok(c) => c,
            Err(e) => return null_errno(e.c_errno()),
        };
        let ch = ibv_comp_channel { context: ctx.as_ptr(), fd: core.fd().as_raw_fd(), refcnt: 0 };
        let obj = Box::new(ChannelObj { ch: UnsafeCell::new(ch), core });
        let p = Box::into_raw(obj);
        live::register(p);
        p.cast()
    }
}

export! {
    /// Destroys a completion channel (`ibv_destroy_comp_channel(3)`). Returns 0 or an
    /// errno: `EBUSY` while CQs are attached (`refcnt > 0`).
    #[export("IBVERBS_1.0", errno)]
    pub unsafe fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { ChannelObj::from_raw(channel) }) else {
            return libc::EINVAL;
        };
        {
            let _g = obj.context().map(ContextObj::lock);
            // SAFETY: field of our allocation, read under the context mutex.
            if unsafe { (*obj.ch.get()).refcnt } != 0 {
                return libc::EBUSY;
            }
            if let Err(e) = obj.core.destroy() {
                return e.c_errno();
            }
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<ChannelObj, _>(channel) };
        0
    }
}

// ---------------------------------------------------------------------------------------
// Completion queues
// ---------------------------------------------------------------------------------------


/// A CQ handed to C: `struct ibv_cq_ex` (whose prefix is `struct ibv_cq`), then the core
/// CQ and the extended-polling state.
#[repr(C)]
pub struct CqObj {
    cq: UnsafeCell<ibv_cq_ex>,
    core: rverbs::Cq,
    channel: Option<&'static ChannelObj>,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for CqObj {
    const KIND: live::Kind = live::Kind::Cq;
}

// `rverbs::Wc` is declared layout-identical to `struct ibv_wc`; the poll path relies on it.
const _: () = assert!(size_of::<rverbs::Wc>() == size_of::<ibv_wc>());
const _: () = assert!(align_of::<rverbs::Wc>() == align_of::<ibv_wc>());

impl CqObj {
    /// The CQ behind an `ibv_cq *` / `ibv_cq_ex *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `cq` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(cq: *const ibv_cq) -> Option<&'a CqObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(cq) }
    }

    /// The `struct ibv_cq *` handed to C.
    pub fn as_ptr(&self) -> *mut ibv_cq {
        // The whole object, not just the field: C hands this pointer back to us.
        (self as *const Self).cast_mut().cast()
    }

    /// The core CQ.
    pub fn core(&self) -> &rverbs::Cq {
        &self.core
    }

    fn ex(&self) -> *mut ibv_cq_ex {
        self.as_ptr().cast()
    }

    /// Publishes the current completion's `status` and `wr_id` in the public struct
    /// (verbs.h: applications read `cq->status` and `cq->wr_id` directly) after a
    /// start/next_poll of the core; returns 0, `ENOENT` or an errno.
    fn polled(&self, r: rverbs::Result<Option<rverbs::ExEntry>>) -> c_int {
        match r {
            Ok(Some(e)) => {
                // SAFETY: only the batch owner (the caller of start/next_poll, serialised
                // by the core's CQ lock or by the SINGLE_THREADED contract) writes these.
                unsafe {
                    (*self.ex()).status = e.status() as u32;
                    (*self.ex()).wr_id = e.wr_id();
                }
                0
            }
            Ok(None) => libc::ENOENT,
            Err(e) => e.c_errno(),
        }
    }
}

/// The CQ behind an `ibv_cq_ex *` in the polling functions (`None` if foreign/NULL).
///
/// # Safety
/// As [`CqObj::from_raw`].
unsafe fn ex_obj<'a>(cq: *mut ibv_cq_ex) -> Option<&'a CqObj> {
    // SAFETY: forwarded.
    unsafe { CqObj::from_raw(cq.cast()) }
}

unsafe extern "C" fn rverbs_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { ex_obj(cq) }) else {
            return libc::EINVAL;
        };
        // SAFETY: attr is NULL or valid (caller contract).
        if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
            return libc::EINVAL;
        }
        obj.polled(obj.core.start_poll())
    })
}

unsafe extern "C" fn rverbs_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        match unsafe { ex_obj(cq) } {
            Some(obj) => obj.polled(obj.core.next_poll()),
            None => libc::EINVAL,
        }
    })
}

unsafe extern "C" fn rverbs_end_poll(cq: *mut ibv_cq_ex) {
    ffi_guard!(void, {
        // SAFETY: caller contract.
        if let Some(obj) = unsafe { ex_obj(cq) } {
            obj.core.end_poll();
        }
    })
}

/// Defines an `ibv_cq_ex.read_*` function returning a field of the current completion
/// ([`rverbs::Cq::polled`]); with `needs FLAG`, the field is one the CQ's `wc_flags`
/// must request (ibv_create_cq_ex(3)), which the verbs sanitizer checks
/// (`sanitizer_wc_read`: one relaxed load when it is off).
macro_rules! read_fn {
    ($name:ident -> $ty:ty, |$c:ident| $e:expr) => {
        read_fn!(@ $name -> $ty, |$c| $e, |_obj| {});
    };
    ($name:ident -> $ty:ty, needs $flag:ident ($read:literal, $cname:literal), |$c:ident| $e:expr) => {
        read_fn!(@ $name -> $ty, |$c| $e, |obj| {
            rverbs::capi_support::sanitizer_wc_read(&obj.core, WcExFlags::$flag, $read, $cname)
        });
    };
    (@ $name:ident -> $ty:ty, |$c:ident| $e:expr, |$obj:ident| $check:expr) => {
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            ffi_guard!(value(0), {
                // SAFETY: caller contract.
                match unsafe { ex_obj(cq) } {
                    Some($obj) => {
                        $check;
                        let $c = $obj.core.polled();
                        $e
                    }
                    None => {
                        set_errno(libc::EINVAL);
                        0
                    }
                }
            })
        }
    };
}

/// The current completion as a `struct ibv_wc` (every field, whatever the CQ's
/// `wc_flags`, as the read_* functions have always returned them).
#[inline(always)]
fn wc(e: &rverbs::ExEntry) -> ibv_wc {
    // SAFETY: rverbs::Wc is layout-identical to struct ibv_wc (asserted above and
    // documented by the core).
    unsafe { core::mem::transmute::<rverbs::Wc, ibv_wc>(e.to_wc()) }
}

// Always available (ibv_create_cq_ex(3)): wr_id and status in the struct, opcode,
// vendor_err and wc_flags through their readers.
read_fn!(rverbs_read_opcode -> ibv_wc_opcode, |c| wc(&c).opcode);
read_fn!(rverbs_read_vendor_err -> u32, |c| wc(&c).vendor_err);
read_fn!(rverbs_read_wc_flags -> c_uint, |c| wc(&c).wc_flags);
// ibv_wc_read_invalidated_rkey is ibv_wc_read_imm_data (verbs.h), under the same flag.
read_fn!(rverbs_read_byte_len -> u32, needs BYTE_LEN("ibv_wc_read_byte_len", "IBV_WC_EX_WITH_BYTE_LEN"), |c| wc(&c).byte_len);
read_fn!(rverbs_read_imm_data -> u32, needs IMM("ibv_wc_read_imm_data", "IBV_WC_EX_WITH_IMM"), |c| wc(&c).imm_data);
read_fn!(rverbs_read_qp_num -> u32, needs QP_NUM("ibv_wc_read_qp_num", "IBV_WC_EX_WITH_QP_NUM"), |c| wc(&c).qp_num);
read_fn!(rverbs_read_src_qp -> u32, needs SRC_QP("ibv_wc_read_src_qp", "IBV_WC_EX_WITH_SRC_QP"), |c| wc(&c).src_qp);
read_fn!(rverbs_read_slid -> u32, needs SLID("ibv_wc_read_slid", "IBV_WC_EX_WITH_SLID"), |c| u32::from(wc(&c).slid));
read_fn!(rverbs_read_sl -> u8, needs SL("ibv_wc_read_sl", "IBV_WC_EX_WITH_SL"), |c| wc(&c).sl);
read_fn!(rverbs_read_dlid_path_bits -> u8, needs DLID_PATH_BITS("ibv_wc_read_dlid_path_bits", "IBV_WC_EX_WITH_DLID_PATH_BITS"), |c| wc(&c).dlid_path_bits);
read_fn!(rverbs_read_completion_ts -> u64, needs COMPLETION_TIMESTAMP("ibv_wc_read_completion_ts", "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP"), |c| c.completion_ts().unwrap_or(0));
read_fn!(
    rverbs_read_completion_wallclock_ns -> u64,
    needs COMPLETION_TIMESTAMP_WALLCLOCK("ibv_wc_read_completion_wallclock_ns", "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK"),
    |c| c.completion_wallclock_ns().unwrap_or(0)
);
// No VLANs or flow tags on this device (the CQ refuses those wc_flags).
read_fn!(rverbs_read_cvlan -> u16, needs CVLAN("ibv_wc_read_cvlan", "IBV_WC_EX_WITH_CVLAN"), |_c| 0);
read_fn!(rverbs_read_flow_tag -> u32, needs FLOW_TAG("ibv_wc_read_flow_tag", "IBV_WC_EX_WITH_FLOW_TAG"), |_c| 0);

/// `ibv_cq_ex.read_tm_info` (`ibv_wc_read_tm_info`, seed ibv_create_cq_ex.3): the tag and
/// the TMH's application context of a tag-matched receive (IBV_WC_TM_MATCH); zeros for
/// any other completion ([`rverbs::ExEntry::tm_info`]).
unsafe extern "C" fn rverbs_read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) {
    ffi_guard!(void, {
        // SAFETY: caller contract.
        let info = match unsafe { ex_obj(cq) } {
            Some(obj) => {
                rverbs::capi_support::sanitizer_wc_read(&obj.core, WcExFlags::TM_INFO, "ibv_wc_read_tm_info", "IBV_WC_EX_WITH_TM_INFO");
                obj.core.polled().tm_info().unwrap_or((0, 0))
            }
            None => (0, 0),
        };
        // SAFETY: tm_info is NULL or writable (caller contract).
        if let Some(t) = unsafe { tm_info.as_mut() } {
            *t = ibv_wc_tm_info { tag: info.0, priv_: info.1 };
        }
    })
}

/// `cqe` and `comp_vector` of ibv_create_cq(3) as the core's counts: `None` (`EINVAL`)
/// when either is negative.
pub(crate) fn cq_counts(cqe: c_int, comp_vector: c_int) -> Option<(u32, u32)> {
    Some((u32::try_from(cqe).ok()?, u32::try_from(comp_vector).ok()?))
}

/// What `create_cq_ex` takes from an `ibv_cq_init_attr_ex`, checked (rules:
/// [`rverbs_create_cq_ex`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CqExAttr {
    /// `cqe` and `comp_vector` as ibv_create_cq(3)'s (-1 beyond `c_int`: refused there).
    pub(crate) cqe: c_int,
    pub(crate) comp_vector: c_int,
    pub(crate) wc_flags: WcExFlags,
    pub(crate) flags: CqCreateFlags,
    /// `parent_domain` when `IBV_CQ_INIT_ATTR_MASK_PD` is set (checked by the caller:
    /// it must be a live parent domain of the context).
    pub(crate) parent_domain: Option<*mut ibv_pd>,
}

/// Reads and checks an `ibv_cq_init_attr_ex`: `wc_flags` beyond
/// `IBV_CREATE_CQ_SUP_WC_FLAGS` are `EOPNOTSUPP`, `comp_mask` bits beyond FLAGS|PD
/// `EINVAL`, PD with a NULL `parent_domain` `EINVAL`, unknown creation flags `EOPNOTSUPP`.
pub(crate) fn cq_init_attr_ex_from_c(a: &ibv_cq_init_attr_ex) -> Result<CqExAttr, c_int> {
    if a.wc_flags & !u64::from(IBV_CREATE_CQ_SUP_WC_FLAGS) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return Err(libc::EINVAL);
    }
    let parent_domain = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
        if a.parent_domain.is_null() {
            return Err(libc::EINVAL);
        }
        Some(a.parent_domain)
    } else {
        None
    };
    let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 { a.flags } else { 0 };
    let flags = CqCreateFlags::from_bits(flags).ok_or(libc::EOPNOTSUPP)?;
    Ok(CqExAttr {
        cqe: c_int::try_from(a.cqe).unwrap_or(-1),
        comp_vector: c_int::try_from(a.comp_vector).unwrap_or(-1),
        wc_flags: WcExFlags::from_bits_retain(a.wc_flags),
        flags,
        parent_domain,
    })
}

/// Creates the C object for `a` (shared by `ibv_create_cq` and `create_cq_ex`), on
/// `parent` when the CQ is created on a parent domain.
///
/// Rule: rdma-core `verbs_init_cq`: context, channel, cq_context set; counters 0;
/// mutex/cond initialised; `++channel->refcnt` under the context mutex; `cqe` is the
/// real size.
fn create(
    ctx: &ContextObj,
    a: &CqExAttr,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    parent: Option<&rverbs::ParentDomain>,
) -> *mut ibv_cq_ex {
    let (wc_flags, flags) = (a.wc_flags, a.flags);
    let Some((cqe, comp_vector)) = cq_counts(a.cqe, a.comp_vector) else {
        return null_errno(libc::EINVAL);
    };
    let chan = if channel.is_null() {
        None
    } else {
        // SAFETY: caller contract: a live channel of ours.
        match unsafe { ChannelObj::from_raw(channel) } {
            // SAFETY: the channel outlives the CQ: ibv_destroy_comp_channel fails with
            // EBUSY while refcnt > 0, so the 'static borrow ends before it is freed.
            Some(c) => Some(unsafe { &*(c as *const ChannelObj) }),
            None => return null_errno(libc::EINVAL),
        }
    };
    let mut init = CqInit::new(cqe)
        .wc_flags(wc_flags)
        .flags(flags)
        .cq_context(cq_context as usize);
    init.comp_vector = comp_vector;
    if let Some(c) = chan {
        init = init.channel(&c.core);
    }
    let core = match parent {
        Some(p) => p.create_cq(&init),
        None => ctx.core().create_cq(&init),
    };
    let core = match core {
        Ok(cq) => cq,
        Err(e) => return null_errno(e.c_errno()),
    };
    let mut cq = ibv_cq_ex::zeroed();
    cq.context = ctx.as_ptr();
    cq.channel = channel;
    cq.cq_context = cq_context;
    cq.cqe = c_int::try_from(core.cqe()).unwrap_or(c_int::MAX);
    cq.start_poll = Some(rverbs_start_poll);
    cq.next_poll = Some(rverbs_next_poll);
    cq.end_poll = Some(rverbs_end_poll);
    cq.read_opcode = Some(rverbs_read_opcode);
    cq.read_vendor_err = Some(rverbs_read_vendor_err);
    cq.read_byte_len = Some(rverbs_read_byte_len);
    cq.read_imm_data = Some(rverbs_read_imm_data);
    cq.read_qp_num = Some(rverbs_read_qp_num);
    cq.read_src_qp = Some(rverbs_read_src_qp);
    cq.read_wc_flags = Some(rverbs_read_wc_flags);
    cq.read_slid = Some(rverbs_read_slid);
    cq.read_sl = Some(rverbs_read_sl);
    cq.read_dlid_path_bits = Some(rverbs_read_dlid_path_bits);
    cq.read_completion_ts = Some(rverbs_read_completion_ts);
    cq.read_cvlan = Some(rverbs_read_cvlan);
    cq.read_flow_tag = Some(rverbs_read_flow_tag);
    cq.read_tm_info = Some(rverbs_read_tm_info);
    cq.read_completion_wallclock_ns = Some(rverbs_read_completion_wallclock_ns);
    let p = Box::into_raw(Box::new(CqObj {
        cq: UnsafeCell::new(cq),
        core,
        channel: chan,
    }));
    // SAFETY: the allocation just made.
    unsafe { (*p).core.set_cookie(p as usize) };
    if let Some(c) = chan {
        c.add_ref(1);
    }
    live::register(p);
    p.cast()
}

export! {
    /// Creates a completion queue (`ibv_create_cq(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: allocated as an `ibv_cq_ex` with the standard fields (as rdma-core's
    /// `verbs_cq`), so the extended polling functions work on it too.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        let a = CqExAttr {
            cqe,
            comp_vector,
            wc_flags: WcExFlags::STANDARD,
            flags: CqCreateFlags::empty(),
            parent_domain: None,
        };
        create(ctx, &a, cq_context, channel, None).cast()
    }
}

/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex(3)`).
///
/// Rule: verbs.c `__lib_ibv_create_cq_ex`: `wc_flags` beyond `IBV_CREATE_CQ_SUP_WC_FLAGS`
/// are `EOPNOTSUPP`; the core also refuses the ones it cannot fill (CVLAN, FLOW_TAG)
/// with `EOPNOTSUPP`. `comp_mask` bits beyond FLAGS|PD are `EINVAL`; creation
/// flags other than SINGLE_THREADED and IGNORE_OVERRUN are `EOPNOTSUPP`.
/// Rule: ibv_create_cq_ex(3): with `IBV_CQ_INIT_ATTR_MASK_PD`, `parent_domain` must be a
/// parent domain (ibv_alloc_parent_domain(3)) of this context, else `EINVAL`; the CQ
/// keeps it (`ibv_dealloc_pd` on it is `EBUSY` until the CQ is destroyed) and is
/// SINGLE_THREADED when it has a thread domain (docs/memory.md, "Parent and thread domains").
pub(crate) unsafe extern "C" fn rverbs_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    ffi_guard!(null, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return null_errno(libc::EINVAL);
        };
        let c = match cq_init_attr_ex_from_c(a) {
            Ok(c) => c,
            Err(e) => return null_errno(e),
        };
        let parent = match c.parent_domain {
            None => None,
            // SAFETY: caller contract (a live PD of ours, or anything, refused unread).
            Some(p) => match unsafe { PdObj::from_raw(p) } {
                Some(pd) if pd.in_file_of(ctx) && pd.parent().is_some() => pd.parent(),
                _ => return null_errno(libc::EINVAL),
            },
        };
        create(ctx, &c, a.cq_context, a.channel, parent)
    })
}

/// `ibv_context.ops.poll_cq` (`ibv_poll_cq(3)`): up to `num_entries` completions, oldest
/// first, removed for good; `ibv_wc` is the core's `Wc`, so they land in place.
///
/// Rule: ibv_poll_cq(3): returns min(num_entries, available); a negative value on failure —
/// here `-EIO` once an overrun put the CQ in error (pyverbs reports `-rc`).
pub(crate) unsafe extern "C" fn rverbs_poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    // The busy poller's common case, an empty CQ, before the panic guard: nothing on this
    // path can panic (the live-object lookup and the empty look use no index that checks
    // bounds, and call nothing), so it needs no landing pad and no stack frame. Anything
    // else, bad arguments included, takes the guarded way.
    if num_entries > 0 && !wc.is_null() {
        // SAFETY: caller contract (any pointer; a live CQ stays alive during the call).
        if let Some(obj) = unsafe { CqObj::from_raw(cq) } {
            return match obj.core.look() {
                rverbs::Looked::Empty => 0,
                // SAFETY: `obj` is live, the arguments checked; the caller's contract.
                rverbs::Looked::Published => unsafe { poll_found(obj, num_entries, wc, false) },
                // SAFETY: as above.
                rverbs::Looked::Unsure => unsafe { poll_found(obj, num_entries, wc, true) },
            };
        }
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { poll_guarded(cq, num_entries, wc) }
}

/// [`rverbs_poll_cq`] of a live CQ whose empty look did not find it empty (`unsure`: it
/// could not tell), `num_entries > 0` and `wc` not NULL, in the panic guard: out of line
/// and `extern "C"` as [`poll_guarded`].
///
/// # Safety
/// `obj` is live for the call; `wc` points to `num_entries` writable `ibv_wc`.
#[inline(never)]
unsafe extern "C" fn poll_found(obj: &CqObj, num_entries: c_int, wc: *mut ibv_wc, unsure: bool) -> c_int {
    ffi_guard!(value(-libc::EIO), {
        let looked = if unsure { rverbs::Looked::Unsure } else { rverbs::Looked::Published };
        // SAFETY: `wc` points to `num_entries` (> 0) writable ibv_wc (caller contract),
        // which have the layout of rverbs::Wc (asserted above).
        let out = unsafe { core::slice::from_raw_parts_mut(wc.cast::<rverbs::Wc>(), num_entries as usize) };
        match obj.core.poll_after_inline(out, looked) {
            Ok(k) => k as c_int,
            Err(e) => -e.c_errno(),
        }
    })
}

/// [`rverbs_poll_cq`] when its first look found no live CQ or bad arguments, in the panic
/// guard: the argument checks and their errors, then [`poll_found`] without a look.
/// `extern "C"` (it never unwinds: its guard catches), so that the call needs no landing
/// pad and is a jump.
///
/// # Safety
/// As `ibv_poll_cq`: `wc` points to `num_entries` writable `ibv_wc`.
#[inline(never)]
unsafe extern "C" fn poll_guarded(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    ffi_guard!(value(-libc::EIO), {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { CqObj::from_raw(cq) }) else {
            return -libc::EINVAL;
        };
        if num_entries <= 0 {
            return 0;
        }
        if wc.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: `obj` is live, `num_entries > 0`, `wc` not NULL; the caller's contract.
        unsafe { poll_found(obj, num_entries, wc, true) }
    })
}

/// `ibv_context.ops.req_notify_cq` (`ibv_req_notify_cq(3)`). Returns 0 or an errno.
pub(crate) unsafe extern "C" fn rverbs_req_notify_cq(
    cq: *mut ibv_cq,
    solicited_only: c_int,
) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { CqObj::from_raw(cq) }) else {
            return libc::EINVAL;
        };
        match obj.core.req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => e.c_errno(),
        }
    })
}

export! {
    /// Resizes a completion queue (`ibv_resize_cq(3)`). Returns 0 or an errno.
    ///
    /// Rule: verbs.c/cmd: on success `cq->cqe` is the new real size.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { CqObj::from_raw(cq) }) else {
            return libc::EINVAL;
        };
        let Ok(cqe) = u32::try_from(cqe) else {
            return libc::EINVAL;
        };
        match obj.core.resize(cqe) {
            Ok(n) => {
                let n = c_int::try_from(n).unwrap_or(c_int::MAX);
                // SAFETY: field of our allocation; rdma-core writes it the same way.
                unsafe { (*obj.ex()).cqe = n };
                0
            }
            Err(e) => e.c_errno(),
        }
    }
}

export! {
    /// Destroys a completion queue (`ibv_destroy_cq(3)`). Returns 0 or an errno
    /// (`EBUSY` while a QP or SRQ uses it).
    ///
    /// Rule: rdma-core waits until all delivered completion and async events are acked,
    /// then `--channel->refcnt` under the context mutex.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { CqObj::from_raw(cq) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.destroy() {
            return e.c_errno();
        }
        if let Some(c) = obj.channel {
            c.add_ref(-1);
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<CqObj, _>(cq) };
        0
    }
}

export! {
    /// Waits for the next completion event on a channel (`ibv_get_cq_event(3)`).
    /// Returns 0, or -1 with `errno` (`EAGAIN` on an `O_NONBLOCK` fd with nothing queued).
    ///
    /// Rule: the event is not counted as acknowledged: the application calls
    /// `ibv_ack_cq_events` (and `ibv_destroy_cq` waits for that).
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(ch) = (unsafe { ChannelObj::from_raw(channel) }) else {
            return getter_on_unknown_object();
        };
        if cq.is_null() || cq_context.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let ev = match ch.core.get_cq_event() {
            Ok(ev) => ev,
            Err(e) => return minus_one_errno(e.c_errno()),
        };
        let core = ev.into_cq();
        let ptr = core.cookie() as *mut ibv_cq;
        // SAFETY: the cookie is the live CqObj of this CQ (set at creation; the CQ cannot
        // be destroyed before this event is acked); the out-parameters are writable.
        unsafe {
            cq.write(ptr);
            cq_context.write((*ptr).cq_context);
        }
        0
    }
}

export! {
    /// Acknowledges `nevents` completion events (`ibv_ack_cq_events(3)`).
    ///
    /// Rule: verbs.c: `comp_events_completed += nevents` under `cq->mutex`, then
    /// `pthread_cond_signal(&cq->cond)` (ibv_destroy_cq waits on it).
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { CqObj::from_raw(cq) }) else {
            set_errno(libc::EINVAL);
            return;
        };
        let p = obj.as_ptr();
        // SAFETY: mutex/cond/counter live in our allocation; zeroed = initialised.
        unsafe {
            libc::pthread_mutex_lock(&raw mut (*p).mutex);
            (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(nevents);
            libc::pthread_cond_signal(&raw mut (*p).cond);
            libc::pthread_mutex_unlock(&raw mut (*p).mutex);
        }
        obj.core.ack_events(nevents);
    }
}

/// Acknowledges one asynchronous event about a CQ (`ibv_ack_async_event`, CQ_ERR).
pub(crate) fn ack_async(cq: &CqObj) {
    let p = cq.as_ptr();
    // SAFETY: mutex/cond/counter live in our allocation; zeroed = initialised.
    unsafe {
        libc::pthread_mutex_lock(&raw mut (*p).mutex);
        (*p).async_events_completed = (*p).async_events_completed.wrapping_add(1);
        libc::pthread_cond_signal(&raw mut (*p).cond);
        libc::pthread_mutex_unlock(&raw mut (*p).mutex);
    }
    cq.core.ack_async_events(1);
}
