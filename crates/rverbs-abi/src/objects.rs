//! Small objects: PD, TD, parent domain, XRCD, MR, MW, DM, counters, flows.
//!
//! Every object this library hands out embeds the public struct as its first field
//! (`#[repr(C)] struct Wrapper { public: ibv_x, private… }`), and fills the public fields
//! apps read (rdma-core does the same; see each verb's man page).

use core::ffi::{c_int, c_uint, c_void};

use super::{ibv_context, ibv_mw_type};

/// `struct ibv_pd`. Apps read `context`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td` (thread domain).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_parent_domain_init_attr {
    /// Must not be NULL.
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    /// `enum ibv_parent_domain_init_attr_mask`
    pub comp_mask: u32,
    pub alloc:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void>,
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    pub pd_context: *mut c_void,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_xrcd_init_attr {
    /// `enum ibv_xrcd_init_attr_mask`
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `struct ibv_xrcd`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_mr`. Apps read `addr`, `length`, `lkey`, `rkey` (and exchange them).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// C name `type`.
    pub type_: ibv_mw_type,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    /// `enum ibv_access_flags`
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (`ibv_bind_mw`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    /// `enum ibv_send_flags`
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// `struct ibv_dm` (device memory). The inline `ibv_memcpy_{to,from}_dm` call the two
/// function pointers unchecked.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int>,
    pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int>,
    /// `enum ibv_dm_mask`
    pub comp_mask: u32,
    pub handle: u32,
}

/// `struct ibv_counters_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_counters_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_counters`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_counters {
    pub context: *mut ibv_context,
}

/// `struct ibv_counter_attach_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_counter_attach_attr {
    /// `enum ibv_counter_description`
    pub counter_desc: c_uint,
    pub index: u32,
    pub comp_mask: u32,
}

/// `struct ibv_flow` (flow steering is not supported; the struct is tiny).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_flow {
    pub comp_mask: u32,
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_flow_action`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_flow_action {
    pub context: *mut ibv_context,
}
