//! Kernel ABI structs (`<rdma/ib_user_verbs.h>`, `<rdma/ib_user_sa.h>`): what the
//! historical `ibv_copy_*` exports convert from and to (the SA path record of
//! `<infiniband/sa.h>` is `rverbs-abi`'s), plus the record formats read from the
//! completion-channel and async fds.

/// `struct ib_uverbs_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr` (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec` (64 bytes; `ibv_kern_path_rec` in sa-kern-abi.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    /// `__be16`
    pub dlid: u16,
    /// `__be16`
    pub slid: u16,
    pub raw_traffic: u32,
    /// `__be32`
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    /// `__be16`
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_uverbs_comp_event_desc`: the 8-byte record `ibv_get_cq_event` reads from a
/// completion channel fd (one per armed-CQ notification).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_comp_event_desc {
    pub cq_handle: u64,
}

/// `struct ib_uverbs_async_event_desc`: the 16-byte record `ibv_get_async_event` reads
/// from `ibv_context.async_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_async_event_desc {
    pub element: u64,
    pub event_type: u32,
    pub reserved: u32,
}
