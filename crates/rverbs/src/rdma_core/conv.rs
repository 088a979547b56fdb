//! Field-by-field translation between the soft API's value types and the C structs of
//! `<infiniband/verbs.h>` the backend hands libibverbs. Pure data mapping: the provider
//! behind libibverbs decides every verbs rule.

use core::ffi::{c_char, c_int};

use rverbs_abi::*;
use rverbs_proto::verbs::{Access, Mtu, QpState};

use crate::device::{DeviceAttr, PortAttr, PortState};
use crate::gid::Gid;
use crate::rings::qp_attr::{AhAttr, GlobalRoute, MigState, QpAttr, QpCap};

/// A C `int` limit as the `u32` the soft API reports (negative reads as 0).
fn uint(v: c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `struct ibv_device_attr` (ibv_query_device(3)) as [`DeviceAttr`]; the GUIDs from
/// network order. What the legacy struct lacks (`device_cap_flags_ex`,
/// `hca_core_clock`, `max_inline_data`) reads 0.
pub(super) fn device_attr(d: &ibv_device_attr) -> DeviceAttr {
    let fw: Vec<u8> = d.fw_ver.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    DeviceAttr {
        fw_ver: String::from_utf8_lossy(&fw).into_owned(),
        node_guid: u64::from_be(d.node_guid),
        sys_image_guid: u64::from_be(d.sys_image_guid),
        max_mr_size: d.max_mr_size,
        page_size_cap: d.page_size_cap,
        vendor_id: d.vendor_id,
        vendor_part_id: d.vendor_part_id,
        hw_ver: d.hw_ver,
        max_qp: uint(d.max_qp),
        max_qp_wr: uint(d.max_qp_wr),
        device_cap_flags: d.device_cap_flags,
        device_cap_flags_ex: 0,
        max_sge: uint(d.max_sge),
        max_sge_rd: uint(d.max_sge_rd),
        max_cq: uint(d.max_cq),
        max_cqe: uint(d.max_cqe),
        max_mr: uint(d.max_mr),
        max_pd: uint(d.max_pd),
        max_qp_rd_atom: uint(d.max_qp_rd_atom),
        max_res_rd_atom: uint(d.max_res_rd_atom),
        max_qp_init_rd_atom: uint(d.max_qp_init_rd_atom),
        atomic_cap: d.atomic_cap,
        max_mw: uint(d.max_mw),
        max_mcast_grp: uint(d.max_mcast_grp),
        max_mcast_qp_attach: uint(d.max_mcast_qp_attach),
        max_total_mcast_qp_attach: uint(d.max_total_mcast_qp_attach),
        max_ah: uint(d.max_ah),
        max_srq: uint(d.max_srq),
        max_srq_wr: uint(d.max_srq_wr),
        max_srq_sge: uint(d.max_srq_sge),
        max_pkeys: d.max_pkeys,
        local_ca_ack_delay: d.local_ca_ack_delay,
        phys_port_cnt: d.phys_port_cnt,
        hca_core_clock: 0,
        max_inline_data: 0,
    }
}

/// `struct ibv_port_attr` (ibv_query_port(3)) as [`PortAttr`]. A state or MTU code the
/// soft API has no name for reads as `Nop` / 256 bytes.
pub(super) fn port_attr(p: &ibv_port_attr) -> PortAttr {
    let state = match p.state {
        1 => PortState::Down,
        2 => PortState::Init,
        3 => PortState::Armed,
        4 => PortState::Active,
        5 => PortState::ActiveDefer,
        _ => PortState::Nop,
    };
    PortAttr {
        state,
        max_mtu: Mtu::from_raw(p.max_mtu).unwrap_or(Mtu::Mtu256),
        active_mtu: Mtu::from_raw(p.active_mtu).unwrap_or(Mtu::Mtu256),
        gid_tbl_len: uint(p.gid_tbl_len),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer,
        flags: p.flags,
        port_cap_flags2: p.port_cap_flags2,
    }
}

/// A `union ibv_gid` as a [`Gid`].
pub(super) fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern of the 16-byte union is a valid [u8; 16].
    Gid(unsafe { g.raw })
}

/// An [`AhAttr`] as `struct ibv_ah_attr` (`grh: Some` is `is_global = 1`).
pub(super) fn ah_attr(a: &AhAttr) -> ibv_ah_attr {
    let mut c = ibv_ah_attr::zeroed();
    if let Some(g) = a.grh {
        c.is_global = 1;
        c.grh.dgid = ibv_gid { raw: g.dgid.0 };
        c.grh.flow_label = g.flow_label;
        c.grh.sgid_index = g.sgid_index;
        c.grh.hop_limit = g.hop_limit;
        c.grh.traffic_class = g.traffic_class;
    }
    c.dlid = a.dlid;
    c.sl = a.sl;
    c.src_path_bits = a.src_path_bits;
    c.static_rate = a.static_rate;
    c.port_num = a.port_num;
    c
}

/// `struct ibv_ah_attr` as an [`AhAttr`].
pub(super) fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        grh: (a.is_global != 0).then(|| GlobalRoute {
            dgid: gid_from_c(&a.grh.dgid),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
    }
}

/// A [`QpCap`] as `struct ibv_qp_cap`.
pub(super) fn cap(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_qp_cap` as a [`QpCap`].
pub(super) fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// A [`QpAttr`] as `struct ibv_qp_attr` (every field; the mask given to ibv_modify_qp(3)
/// says which count).
pub(super) fn qp_attr(q: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: q.qp_state.raw(),
        cur_qp_state: q.cur_qp_state.raw(),
        path_mtu: q.path_mtu.raw(),
        path_mig_state: q.path_mig_state as u32,
        qkey: q.qkey,
        rq_psn: q.rq_psn,
        sq_psn: q.sq_psn,
        dest_qp_num: q.dest_qp_num,
        qp_access_flags: q.qp_access_flags.bits(),
        cap: cap(&q.cap),
        ah_attr: ah_attr(&q.ah_attr),
        alt_ah_attr: ah_attr(&q.alt_ah_attr),
        pkey_index: q.pkey_index,
        alt_pkey_index: q.alt_pkey_index,
        en_sqd_async_notify: q.en_sqd_async_notify,
        sq_draining: q.sq_draining,
        max_rd_atomic: q.max_rd_atomic,
        max_dest_rd_atomic: q.max_dest_rd_atomic,
        min_rnr_timer: q.min_rnr_timer,
        port_num: q.port_num,
        timeout: q.timeout,
        retry_cnt: q.retry_cnt,
        rnr_retry: q.rnr_retry,
        alt_port_num: q.alt_port_num,
        alt_timeout: q.alt_timeout,
        rate_limit: q.rate_limit,
    }
}

/// `struct ibv_qp_attr` as filled by ibv_query_qp(3) as a [`QpAttr`]; a state, MTU or
/// migration code the soft API has no name for reads as `Err` / 256 / `Migrated`.
pub(super) fn qp_attr_from_c(a: &ibv_qp_attr) -> QpAttr {
    QpAttr {
        qp_state: QpState::from_raw(a.qp_state).unwrap_or(QpState::Err),
        cur_qp_state: QpState::from_raw(a.cur_qp_state).unwrap_or(QpState::Err),
        path_mtu: Mtu::from_raw(a.path_mtu).unwrap_or(Mtu::Mtu256),
        path_mig_state: match a.path_mig_state {
            IBV_MIG_REARM => MigState::Rearm,
            IBV_MIG_ARMED => MigState::Armed,
            _ => MigState::Migrated,
        },
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: Access::from_bits_retain(a.qp_access_flags),
        cap: cap_from_c(&a.cap),
        ah_attr: ah_attr_from_c(&a.ah_attr),
        alt_ah_attr: ah_attr_from_c(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        rate_limit: a.rate_limit,
    }
}

/// A NUL-terminated C string as an owned `String` (lossy).
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string.
pub(super) unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
