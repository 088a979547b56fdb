//! `ibv_context`, its inline-dispatch ops table, `verbs_context`, async events.
//!
//! The hard ABI (the `static inline` functions of verbs.h): code inlined into applications
//! from verbs.h calls `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`, `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw` through
//! [`ibv_context_ops`], and every `verbs_get_ctx_op()` inline (query_port,
//! query_device_ex, create_cq_ex, create_qp_ex, XRC, DM, …) through [`verbs_context`],
//! which sits *in front of* the `ibv_context` (context at +320, `sz` = 648,
//! `abi_compat` = [`VERBS_ABI_IS_EXTENDED`](super::VERBS_ABI_IS_EXTENDED)).

use core::ffi::{c_int, c_uint, c_void};

use super::{
    _compat_ibv_port_attr, ibv_advise_mr_advice, ibv_alloc_dm_attr, ibv_counter_attach_attr,
    ibv_counters, ibv_counters_init_attr, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device,
    ibv_device_attr, ibv_device_attr_ex, ibv_dm, ibv_event_type, ibv_flow, ibv_flow_action,
    ibv_flow_action_esp_attr, ibv_flow_attr, ibv_modify_cq_attr, ibv_mr, ibv_mw, ibv_mw_bind,
    ibv_mw_type, ibv_ops_wr, ibv_parent_domain_init_attr, ibv_pd, ibv_port_attr, ibv_qp,
    ibv_qp_init_attr_ex, ibv_qp_open_attr, ibv_qp_rate_limit_attr, ibv_query_device_ex_input,
    ibv_recv_wr, ibv_rwq_ind_table, ibv_rwq_ind_table_init_attr, ibv_send_wr, ibv_sge, ibv_srq,
    ibv_srq_init_attr_ex, ibv_td, ibv_td_init_attr, ibv_values_ex, ibv_wc, ibv_wq, ibv_wq_attr,
    ibv_wq_init_attr, ibv_xrcd, ibv_xrcd_init_attr, verbs_ex_private,
};

/// An obsolete `void *(*)(void)` slot of [`ibv_context_ops`].
pub type ibv_compat_fn = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops` (256 bytes). Only the non-`_compat_` slots are called by
/// inline code; `alloc_mw` is NULL-checked by `ibv_alloc_mw`, the others are not.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context_ops {
    pub _compat_query_device:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int>,
    pub _compat_query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int>,
    pub _compat_alloc_pd: ibv_compat_fn,
    pub _compat_dealloc_pd: ibv_compat_fn,
    pub _compat_reg_mr: ibv_compat_fn,
    pub _compat_rereg_mr: ibv_compat_fn,
    pub _compat_dereg_mr: ibv_compat_fn,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: ibv_compat_fn,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _compat_cq_event: ibv_compat_fn,
    pub _compat_resize_cq: ibv_compat_fn,
    pub _compat_destroy_cq: ibv_compat_fn,
    pub _compat_create_srq: ibv_compat_fn,
    pub _compat_modify_srq: ibv_compat_fn,
    pub _compat_query_srq: ibv_compat_fn,
    pub _compat_destroy_srq: ibv_compat_fn,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub _compat_create_qp: ibv_compat_fn,
    pub _compat_query_qp: ibv_compat_fn,
    pub _compat_modify_qp: ibv_compat_fn,
    pub _compat_destroy_qp: ibv_compat_fn,
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _compat_create_ah: ibv_compat_fn,
    pub _compat_destroy_ah: ibv_compat_fn,
    pub _compat_attach_mcast: ibv_compat_fn,
    pub _compat_detach_mcast: ibv_compat_fn,
    pub _compat_async_event: ibv_compat_fn,
}

/// `struct ibv_context` (328 bytes). Always embedded at offset 320 of a
/// [`verbs_context`] by this library.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    /// Real fd; `ibv_get_async_event` reads 16-byte `ib_uverbs_async_event_desc` records.
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// [`VERBS_ABI_IS_EXTENDED`](super::VERBS_ABI_IS_EXTENDED) (as a pointer).
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context` (648 bytes): the extended ops, "growing up" in front of the
/// `ibv_context`. `verbs_get_ctx_op(ctx, op)` checks `abi_compat`, then `sz` against the
/// op's distance from the end, then the op for NULL.
#[repr(C)]
#[allow(non_snake_case)]
pub struct verbs_context {
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
    pub advise_mr: Option<
        unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int,
    >,
    pub alloc_null_mr: Option<unsafe extern "C" fn(*mut ibv_pd) -> *mut ibv_mr>,
    pub read_counters: Option<unsafe extern "C" fn(*mut ibv_counters, *mut u64, u32, u32) -> c_int>,
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(
            *mut ibv_counters,
            *mut ibv_counter_attach_attr,
            *mut ibv_flow,
        ) -> c_int,
    >,
    pub create_counters: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_counters_init_attr) -> *mut ibv_counters,
    >,
    pub destroy_counters: Option<unsafe extern "C" fn(*mut ibv_counters) -> c_int>,
    pub reg_dm_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr>,
    pub alloc_dm:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
    pub free_dm: Option<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
    pub modify_flow_action_esp:
        Option<unsafe extern "C" fn(*mut ibv_flow_action, *mut ibv_flow_action_esp_attr) -> c_int>,
    pub destroy_flow_action: Option<unsafe extern "C" fn(*mut ibv_flow_action) -> c_int>,
    pub create_flow_action_esp: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *mut ibv_flow_action_esp_attr,
        ) -> *mut ibv_flow_action,
    >,
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int>,
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd,
    >,
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    pub alloc_td:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    pub modify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int>,
    pub post_srq_ops:
        Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int>,
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int>,
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *mut ibv_rwq_ind_table_init_attr,
        ) -> *mut ibv_rwq_ind_table,
    >,
    pub destroy_wq: Option<unsafe extern "C" fn(*mut ibv_wq) -> c_int>,
    pub modify_wq: Option<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int>,
    pub create_wq:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq>,
    pub query_rt_values:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    /// C name `priv` (a reserved word in Rust). Never read by inline code.
    pub priv_: *mut verbs_ex_private,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
    /// Called by apps compiled against libibverbs 1.1.8 instead of `ibv_destroy_flow`.
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    pub ibv_create_flow:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow>,
    /// Called by apps compiled against libibverbs 1.1.8 instead of `ibv_create_flow`.
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    pub open_qp:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    pub create_srq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    pub open_xrcd:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    /// Called by the inline `ibv_close_xrcd` *without* a NULL check.
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    pub _ABI_placeholder3: u64,
    /// `sizeof(struct verbs_context)` = 648; must be immediately before `context`.
    pub sz: usize,
    /// Must be the last field.
    pub context: ibv_context,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}

/// `struct ibv_async_event.element` (anonymous union in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: c_int,
}
