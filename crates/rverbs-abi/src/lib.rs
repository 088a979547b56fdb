//! `#[repr(C)]` mirrors of `<infiniband/verbs.h>` (rdma-core 44), hand-written: the C
//! layouts and constants shared by the drop-in `libibverbs.so.1` (`rverbs-capi`, which
//! implements them) and the `rdma-core` backend of `rverbs` (`rverbs::rdma_core`, which
//! calls a real libibverbs through them).
//!
//! Names are the C names (`ibv_qp`, `IBV_QPS_RTS`) so the code reads like the man pages;
//! C anonymous unions/structs get a Rust name made of the parent's name and the member
//! (`ibv_send_wr_rdma` is `ibv_send_wr.wr.rdma`). Members that C spells as Rust keywords
//! get a trailing underscore (`type_`, `priv_`). Enums are `c_int`/`c_uint` aliases with
//! `pub const` values (an out-of-range value from C must never be UB in Rust).
//!
//! Layout is checked twice:
//! * `asserts.rs`: `const` asserts of the sizes/offsets gcc gives the v44 headers
//!   (x86_64);
//! * `crates/rverbs-capi/tests/layout.rs`: every mirrored struct, field and constant
//!   against the *installed* header, via a C program compiled at test time (it reads this
//!   crate's sources to find them all).
//!
//! Structs the ABI only passes by pointer and rverbs never looks into are opaque.

#![no_std]
#![allow(non_camel_case_types, missing_docs)]

mod ah;
mod consts;
mod context;
mod cq;
mod device;
mod objects;
mod qp;
pub mod rdma_cm;
mod sa;
mod srq;
mod wr;

#[cfg(target_arch = "x86_64")]
#[rustfmt::skip] // one `layout!` per struct reads like Appendix A
mod asserts;

pub use ah::*;
pub use consts::*;
pub use context::*;
pub use cq::*;
pub use device::*;
pub use objects::*;
pub use qp::*;
pub use sa::*;
pub use srq::*;
pub use wr::*;

/// Declares types that are only ever handled through pointers (never dereferenced by
/// rverbs): zero-sized, `!Send`, `!Sync`, `!Unpin`, not constructible.
macro_rules! opaque {
    ($($(#[doc = $doc:literal])* $name:ident;)*) => {
        $(
            $(#[doc = $doc])*
            #[repr(C)]
            pub struct $name {
                _data: [u8; 0],
                _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
            }
        )*
    };
}

opaque! {
    /// `struct ibv_flow_attr` (+ trailing flow specs); flow steering is not supported.
    ibv_flow_attr;
    /// `struct ibv_flow_action_esp_attr`; IPsec flow actions are not supported.
    ibv_flow_action_esp_attr;
    /// `struct verbs_ex_private`: private to rdma-core's libibverbs.
    verbs_ex_private;
    /// `struct verbs_device_ops` (driver.h): a provider's registration table, passed to
    /// `verbs_register_driver_34` by libmlx5/libefa constructors.
    verbs_device_ops;
    /// `struct verbs_context_ops` (driver.h): a provider's ops table (`verbs_set_ops`).
    verbs_context_ops;
    /// `struct verbs_sysfs_dev` (driver.h).
    verbs_sysfs_dev;
    /// `struct ibv_command_buffer` (cmd_ioctl.h): a kernel ioctl command under construction.
    ibv_command_buffer;
}

/// Types whose all-zero bit pattern is a valid value: every pointer NULL, every
/// `Option<fn>` `None`, every integer 0, and `pthread_{mutex,cond}_t` zero, which glibc
/// defines as `PTHREAD_{MUTEX,COND}_INITIALIZER`.
///
/// # Safety
///
/// Implement only for `#[repr(C)]` plain-old-data made of such fields.
pub unsafe trait Zeroed: Sized {
    /// The all-zero value (what C's `= {}` / `memset(p, 0, sizeof *p)` produce).
    #[inline]
    fn zeroed() -> Self {
        // SAFETY: the trait's contract: all-zero bytes are a valid Self.
        unsafe { core::mem::zeroed() }
    }
}

macro_rules! zeroed {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: $t is a repr(C) mirror made only of integers, raw pointers,
            // Option<extern fn>, arrays/unions/structs thereof, and glibc pthread types.
            unsafe impl Zeroed for $t {}
        )*
    };
}

zeroed!(
    ibv_gid,
    ibv_sa_path_rec,
    ibv_gid_global,
    ibv_gid_entry,
    _ibv_device_ops,
    ibv_device,
    ibv_device_attr,
    ibv_query_device_ex_input,
    ibv_odp_caps,
    ibv_odp_caps_per_transport,
    ibv_tso_caps,
    ibv_rss_caps,
    ibv_packet_pacing_caps,
    ibv_tm_caps,
    ibv_cq_moderation_caps,
    ibv_pci_atomic_caps,
    ibv_device_attr_ex,
    ibv_port_attr,
    _compat_ibv_port_attr,
    ibv_values_ex,
    ibv_context_ops,
    ibv_context,
    verbs_context,
    ibv_async_event,
    ibv_async_event_element,
    ibv_pd,
    ibv_td_init_attr,
    ibv_td,
    ibv_parent_domain_init_attr,
    ibv_xrcd_init_attr,
    ibv_xrcd,
    ibv_mr,
    ibv_mw,
    ibv_mw_bind_info,
    ibv_mw_bind,
    ibv_alloc_dm_attr,
    ibv_dm,
    ibv_counters_init_attr,
    ibv_counters,
    ibv_counter_attach_attr,
    ibv_flow,
    ibv_flow_action,
    ibv_global_route,
    ibv_grh,
    ibv_ah_attr,
    ibv_ah,
    ibv_comp_channel,
    ibv_cq,
    ibv_poll_cq_attr,
    ibv_wc_tm_info,
    ibv_cq_ex,
    ibv_wc,
    ibv_cq_init_attr_ex,
    ibv_moderate_cq,
    ibv_modify_cq_attr,
    ibv_qp,
    ibv_qp_ex,
    ibv_qp_cap,
    ibv_qp_init_attr,
    ibv_rx_hash_conf,
    ibv_qp_init_attr_ex,
    ibv_qp_open_attr,
    ibv_qp_attr,
    ibv_qp_rate_limit_attr,
    ibv_ece,
    ibv_sge,
    ibv_data_buf,
    ibv_send_wr,
    ibv_send_wr_wr,
    ibv_send_wr_rdma,
    ibv_send_wr_atomic,
    ibv_send_wr_ud,
    ibv_send_wr_qp_type,
    ibv_send_wr_xrc,
    ibv_send_wr_bind_mw_tso,
    ibv_send_wr_bind_mw,
    ibv_send_wr_tso,
    ibv_recv_wr,
    ibv_ops_wr,
    ibv_ops_wr_tm,
    ibv_ops_wr_tm_add,
    ibv_srq,
    ibv_srq_attr,
    ibv_srq_init_attr,
    ibv_tm_cap,
    ibv_srq_init_attr_ex,
    ibv_wq,
    ibv_wq_init_attr,
    ibv_wq_attr,
    ibv_rwq_ind_table,
    ibv_rwq_ind_table_init_attr,
);
