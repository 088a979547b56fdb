//! The few C structures of `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` (rdma-core 44,
//! x86_64/aarch64 LP64) the rsockets read or build, and the verbs they call.
//!
//! The `static inline` verbs (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`) go through the context's ops table, as inlined C code does; the
//! others are looked up by their public names in `libibverbs.so.1` ([`crate::resolve`]).
//! Offsets are asserted at compile time against the sizes rverbs-capi's mirrors document.

use core::ffi::{c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use std::sync::atomic::AtomicPtr;

/// `struct rdma_cm_id` (416 bytes).
#[repr(C)]
pub struct CmId {
    pub verbs: *mut c_void,
    pub channel: *mut EventChannel,
    pub context: *mut c_void,
    pub qp: *mut Qp,
    pub src_addr: libc::sockaddr_storage,
    pub dst_addr: libc::sockaddr_storage,
    pub ibaddr: [u64; 5],
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
    pub ps: c_uint,
    pub port_num: u8,
    pub event: *mut CmEvent,
    pub send_cq_channel: *mut CompChannel,
    pub send_cq: *mut Cq,
    pub recv_cq_channel: *mut CompChannel,
    pub recv_cq: *mut Cq,
    pub srq: *mut c_void,
    pub pd: *mut c_void,
    pub qp_type: c_uint,
}
const _: () = assert!(size_of::<CmId>() == 416 && offset_of!(CmId, pd) == 400);

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct EventChannel {
    pub fd: c_int,
}

/// `struct rdma_conn_param` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}
const _: () = assert!(size_of::<ConnParam>() == 24);

/// `struct rdma_cm_event` (80 bytes); `param` is the connection member of its union
/// (the UD member is 56 bytes).
#[repr(C)]
pub struct CmEvent {
    pub id: *mut CmId,
    pub listen_id: *mut CmId,
    pub event: c_uint,
    pub status: c_int,
    pub conn: ConnParam,
    _ud_rest: [u64; 4],
}
const _: () = assert!(size_of::<CmEvent>() == 80);

/// `enum rdma_cm_event_type` values the rsockets act on.
pub mod ev {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
}

/// `RDMA_PS_TCP`.
pub const RDMA_PS_TCP: c_uint = 0x0106;
/// `RDMA_OPTION_ID`, `RDMA_OPTION_ID_TOS`, `_REUSEADDR`, `_AFONLY`.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct CompChannel {
    pub context: *mut c_void,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_context`: the device pointer, then the ops table (only the slots called
/// by verbs.h inlines are named).
#[repr(C)]
pub struct Context {
    pub device: *mut c_void,
    _compat0: [usize; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut Cq, c_int, *mut Wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut Cq, c_int) -> c_int>,
    _compat1: [usize; 12],
    pub post_send: Option<unsafe extern "C" fn(*mut Qp, *mut SendWr, *mut *mut SendWr) -> c_int>,
    pub post_recv: Option<unsafe extern "C" fn(*mut Qp, *mut RecvWr, *mut *mut RecvWr) -> c_int>,
}
const _: () = assert!(offset_of!(Context, poll_cq) == 96 && offset_of!(Context, post_send) == 208);

/// `struct ibv_cq` (prefix).
#[repr(C)]
pub struct Cq {
    pub context: *mut Context,
}

/// `struct ibv_qp` (prefix).
#[repr(C)]
pub struct Qp {
    pub context: *mut Context,
    pub qp_context: *mut c_void,
    pub pd: *mut c_void,
    pub send_cq: *mut Cq,
    pub recv_cq: *mut Cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct Mr {
    pub context: *mut c_void,
    pub pd: *mut c_void,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes) with `wr.rdma` named.
#[repr(C)]
pub struct SendWr {
    pub wr_id: u64,
    pub next: *mut SendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// Big-endian on the wire (`__be32`).
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    _rest: [u32; 5],
    _tail: [u64; 7],
}
const _: () = assert!(size_of::<SendWr>() == 128 && offset_of!(SendWr, remote_addr) == 40);

impl SendWr {
    /// A zeroed request.
    pub fn new() -> Self {
        // SAFETY: plain C data (pointers may be NULL); all-zero is valid.
        unsafe { core::mem::zeroed() }
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct RecvWr {
    pub wr_id: u64,
    pub next: *mut RecvWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}
const _: () = assert!(size_of::<Wc>() == 48);

/// `struct ibv_qp_init_attr` (64 bytes).
#[repr(C)]
pub struct QpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut Cq,
    pub recv_cq: *mut Cq,
    pub srq: *mut c_void,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}
const _: () = assert!(size_of::<QpInitAttr>() == 64);

pub const IBV_QPT_RC: c_uint = 2;
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub const IBV_SEND_INLINE: c_uint = 8;
pub const IBV_WC_WITH_IMM: c_uint = 2;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;

/// Resolves `$name` in libibverbs.so.1 (cached) as the given function type, or fails
/// with ENOSYS.
macro_rules! verb {
    ($name:literal as $ty:ty) => {{
        static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
        match crate::resolve(&SLOT, concat!($name, "\0")) {
            // SAFETY: the public libibverbs function of that name has this C signature
            // (verbs.h, rdma-core 44).
            Some(f) => Ok(unsafe { core::mem::transmute::<*mut c_void, $ty>(f) }),
            None => Err(libc::ENOSYS),
        }
    }};
}

/// `ibv_create_comp_channel(3)`.
pub fn create_comp_channel(ctx: *mut c_void) -> Result<*mut CompChannel, c_int> {
    let f = verb!("ibv_create_comp_channel" as unsafe extern "C" fn(*mut c_void) -> *mut CompChannel)?;
    // SAFETY: `ctx` is the id's live verbs context.
    let ch = unsafe { f(ctx) };
    if ch.is_null() { Err(errno()) } else { Ok(ch) }
}

/// `ibv_destroy_comp_channel(3)`.
pub fn destroy_comp_channel(ch: *mut CompChannel) {
    if let Ok(f) = verb!("ibv_destroy_comp_channel" as unsafe extern "C" fn(*mut CompChannel) -> c_int) {
        // SAFETY: a channel we created, with no CQ left on it.
        unsafe { f(ch) };
    }
}

/// `ibv_create_cq(3)`.
pub fn create_cq(ctx: *mut c_void, cqe: c_int, ch: *mut CompChannel) -> Result<*mut Cq, c_int> {
    type F = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut CompChannel, c_int) -> *mut Cq;
    let f = verb!("ibv_create_cq" as F)?;
    // SAFETY: live context and channel.
    let cq = unsafe { f(ctx, cqe, core::ptr::null_mut(), ch, 0) };
    if cq.is_null() { Err(errno()) } else { Ok(cq) }
}

/// `ibv_destroy_cq(3)`.
pub fn destroy_cq(cq: *mut Cq) {
    if let Ok(f) = verb!("ibv_destroy_cq" as unsafe extern "C" fn(*mut Cq) -> c_int) {
        // SAFETY: a CQ we created, its QP destroyed.
        unsafe { f(cq) };
    }
}

/// `ibv_get_cq_event(3)` on a non-blocking channel, then `ibv_ack_cq_events(cq, 1)`:
/// true if an event was taken.
pub fn take_cq_event(ch: *mut CompChannel) -> bool {
    type G = unsafe extern "C" fn(*mut CompChannel, *mut *mut Cq, *mut *mut c_void) -> c_int;
    type A = unsafe extern "C" fn(*mut Cq, c_uint);
    let (Ok(get), Ok(ack)) = (verb!("ibv_get_cq_event" as G), verb!("ibv_ack_cq_events" as A)) else {
        return false;
    };
    let mut cq = core::ptr::null_mut();
    let mut ctx = core::ptr::null_mut();
    // SAFETY: live channel; out-parameters are valid.
    if unsafe { get(ch, &mut cq, &mut ctx) } != 0 {
        return false;
    }
    // SAFETY: `cq` was just returned by ibv_get_cq_event.
    unsafe { ack(cq, 1) };
    true
}

/// `ibv_reg_mr(3)`.
pub fn reg_mr(pd: *mut c_void, addr: *mut u8, len: usize, access: c_int) -> Result<*mut Mr, c_int> {
    type F = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut Mr;
    let f = verb!("ibv_reg_mr" as F)?;
    // SAFETY: `addr..addr+len` is memory the caller keeps alive while registered.
    let mr = unsafe { f(pd, addr.cast(), len, access) };
    if mr.is_null() { Err(errno()) } else { Ok(mr) }
}

/// `ibv_dereg_mr(3)`.
pub fn dereg_mr(mr: *mut Mr) {
    if let Ok(f) = verb!("ibv_dereg_mr" as unsafe extern "C" fn(*mut Mr) -> c_int) {
        // SAFETY: a registration we made.
        unsafe { f(mr) };
    }
}

/// `ibv_post_send` (verbs.h inline: the context's `ops.post_send`).
///
/// # Safety
/// `qp` is live; `wr` and its scatter list are valid for the call.
pub unsafe fn post_send(qp: *mut Qp, wr: &mut SendWr) -> c_int {
    let mut bad = core::ptr::null_mut();
    // SAFETY: caller contract; the context outlives its QPs.
    unsafe { ((*(*qp).context).post_send.expect("post_send op"))(qp, wr, &mut bad) }
}

/// `ibv_post_recv` (verbs.h inline).
///
/// # Safety
/// As [`post_send`].
pub unsafe fn post_recv(qp: *mut Qp, wr: &mut RecvWr) -> c_int {
    let mut bad = core::ptr::null_mut();
    // SAFETY: caller contract.
    unsafe { ((*(*qp).context).post_recv.expect("post_recv op"))(qp, wr, &mut bad) }
}

/// `ibv_poll_cq` (verbs.h inline) for one completion.
///
/// # Safety
/// `cq` is live.
pub unsafe fn poll_cq(cq: *mut Cq, wc: &mut Wc) -> c_int {
    // SAFETY: caller contract.
    unsafe { ((*(*cq).context).poll_cq.expect("poll_cq op"))(cq, 1, wc) }
}

/// `ibv_req_notify_cq(cq, 0)` (verbs.h inline).
///
/// # Safety
/// `cq` is live.
pub unsafe fn req_notify_cq(cq: *mut Cq) -> c_int {
    // SAFETY: caller contract.
    unsafe { ((*(*cq).context).req_notify_cq.expect("req_notify_cq op"))(cq, 0) }
}

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: __errno_location() returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() }
}
