//! Completion channels, CQs (plain and extended), work completions.

use core::ffi::{c_int, c_uint, c_void};

use super::{ibv_context, ibv_pd, ibv_wc_opcode, ibv_wc_status};

/// `struct ibv_comp_channel`. `fd` must be a real pollable fd (ibv_get_cq_event(3)).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    /// Number of CQs attached; `ibv_destroy_comp_channel` fails with `EBUSY` while > 0.
    pub refcnt: c_int,
}

/// `struct ibv_cq` (128 bytes). Allocate every CQ as an [`ibv_cq_ex`] (same prefix) so
/// both APIs work on one object (rdma-core's `struct verbs_cq` is the same union).
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`; `comp_mask` must be 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc_tm_info {
    /// Tag from the TMH.
    pub tag: u64,
    /// Opaque user data from the TMH.
    pub priv_: u32,
}

/// `struct ibv_cq_ex` (288 bytes): the `ibv_cq` fields, then the polling state and the
/// function table the `ibv_start_poll`/`ibv_next_poll`/`ibv_wc_read_*` inlines call.
/// `start_poll`/`next_poll` publish the current completion's `status` and `wr_id`
/// into the struct (applications read them as fields; verbs.h `ibv_start_poll`).
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,

    pub comp_mask: u32,
    pub status: ibv_wc_status,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> ibv_wc_opcode>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    /// Returns `__be32`; also serves `ibv_wc_read_invalidated_rkey`.
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C: `union { __be32 imm_data; uint32_t invalidated_rkey; }` — both 32-bit, so one
    /// field; see [`ibv_wc::invalidated_rkey`].
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `enum ibv_wc_flags`
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

impl ibv_wc {
    /// The `invalidated_rkey` member of the C union (valid with `IBV_WC_WITH_INV`).
    #[inline]
    pub fn invalidated_rkey(&self) -> u32 {
        self.imm_data
    }

    /// Sets the `invalidated_rkey` member of the C union.
    #[inline]
    pub fn set_invalidated_rkey(&mut self, rkey: u32) {
        self.imm_data = rkey;
    }
}

/// `struct ibv_cq_init_attr_ex` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask`
    pub comp_mask: u32,
    /// `enum ibv_create_cq_attr_flags`
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_moderate_cq {
    pub cq_count: u16,
    /// microseconds
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_modify_cq_attr {
    /// `enum ibv_cq_attr_mask`
    pub attr_mask: u32,
    pub moderate: ibv_moderate_cq,
}
