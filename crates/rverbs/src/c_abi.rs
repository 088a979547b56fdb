//! Field-by-field translation between the C structs of `<infiniband/verbs.h>`
//! (`rverbs-abi`) and this crate's value types, both ways: the drop-in C library
//! (`rverbs-capi`) turns a program's structs into the soft device's values and back, and
//! the rdma-core backend (`crate::rdma_core`) turns its values into what it hands
//! libibverbs and back. Pure data mapping: no verbs rule is decided here (the device
//! behind validates). Feature `c-abi` (which `rdma-core` implies); not for applications.

use core::ffi::{c_char, c_int};

use rverbs_abi::*;
use rverbs_proto::verbs::{Access, Mtu, QpState};

use crate::device::{DeviceAttr, PortAttr, PortState};
use crate::gid::{Gid, GidEntry, GidType};
use crate::rings::qp_attr::{AhAttr, GlobalRoute, MigState, QpAttr, QpCap};

/// A core GID as `union ibv_gid`.
pub fn gid(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

/// A `union ibv_gid` as a core GID.
pub fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern of the 16-byte union is a valid [u8; 16].
    #[allow(unsafe_code)]
    let raw = unsafe { g.raw };
    Gid(raw)
}

/// A core GID table entry as `struct ibv_gid_entry`.
pub fn gid_entry(e: &GidEntry) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: gid(e.gid),
        gid_index: e.index,
        port_num: e.port,
        gid_type: match e.gid_type {
            GidType::Ib => IBV_GID_TYPE_IB,
            GidType::RoceV1 => IBV_GID_TYPE_ROCE_V1,
            GidType::RoceV2 => IBV_GID_TYPE_ROCE_V2,
        },
        ndev_ifindex: e.ifindex,
    }
}

/// A `struct ibv_gid_entry` as a core GID table entry; a type this crate does not name
/// (none other exists in rdma-core 44) reads as RoCE v2.
pub fn gid_entry_from_c(e: &ibv_gid_entry) -> GidEntry {
    GidEntry {
        gid: gid_from_c(&e.gid),
        index: e.gid_index,
        port: e.port_num,
        gid_type: match e.gid_type {
            IBV_GID_TYPE_IB => GidType::Ib,
            IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            _ => GidType::RoceV2,
        },
        ifindex: e.ndev_ifindex,
    }
}

/// A `u32` limit as the `int` field C declares.
fn int(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// The legacy device attributes.
pub fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let mut d = ibv_device_attr::zeroed();
    let fw = a.fw_ver.as_bytes();
    let n = fw.len().min(d.fw_ver.len() - 1);
    for (dst, b) in d.fw_ver.iter_mut().zip(&fw[..n]) {
        *dst = *b as c_char;
    }
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.sys_image_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    d.max_qp = int(a.max_qp);
    d.max_qp_wr = int(a.max_qp_wr);
    d.device_cap_flags = a.device_cap_flags;
    d.max_sge = int(a.max_sge);
    d.max_sge_rd = int(a.max_sge_rd);
    d.max_cq = int(a.max_cq);
    d.max_cqe = int(a.max_cqe);
    d.max_mr = int(a.max_mr);
    d.max_pd = int(a.max_pd);
    d.max_qp_rd_atom = int(a.max_qp_rd_atom);
    d.max_res_rd_atom = int(a.max_res_rd_atom);
    d.max_qp_init_rd_atom = int(a.max_qp_init_rd_atom);
    d.atomic_cap = a.atomic_cap;
    d.max_mw = int(a.max_mw);
    d.max_mcast_grp = int(a.max_mcast_grp);
    d.max_mcast_qp_attach = int(a.max_mcast_qp_attach);
    d.max_total_mcast_qp_attach = int(a.max_total_mcast_qp_attach);
    d.max_ah = int(a.max_ah);
    d.max_srq = int(a.max_srq);
    d.max_srq_wr = int(a.max_srq_wr);
    d.max_srq_sge = int(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = a.local_ca_ack_delay;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

/// The extended device attributes (`struct ibv_device_attr_ex`, 400 bytes).
///
/// Rule: rdma-core `tests/test_device.py` `test_phys_port_cnt_ex`: `phys_port_cnt_ex` equals
/// `phys_port_cnt`; completion timestamps count the device clock (`hca_core_clock` kHz,
/// all 64 bits valid); no ODP, TSO, RSS, tag matching, device memory.
pub fn device_attr_ex(a: &DeviceAttr) -> ibv_device_attr_ex {
    let mut d = ibv_device_attr_ex::zeroed();
    d.orig_attr = device_attr(a);
    d.completion_timestamp_mask = u64::MAX;
    d.hca_core_clock = a.hca_core_clock;
    d.device_cap_flags_ex = u64::from(a.device_cap_flags);
    d.phys_port_cnt_ex = u32::from(a.phys_port_cnt);
    d.max_dm_size = crate::limits::MAX_DM_SIZE;
    // On-demand paging, implicit too, for every operation of every transport: a
    // registration never pins, and every access goes through the device's guarded copy
    // (docs/memory.md, "On-demand paging").
    let all = IBV_ODP_SUPPORT_SEND
        | IBV_ODP_SUPPORT_RECV
        | IBV_ODP_SUPPORT_WRITE
        | IBV_ODP_SUPPORT_READ
        | IBV_ODP_SUPPORT_ATOMIC
        | IBV_ODP_SUPPORT_SRQ_RECV;
    d.odp_caps.general_caps = u64::from(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
    d.odp_caps.per_transport_caps.rc_odp_caps = all;
    d.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
    d.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    d.xrc_odp_caps = all;
    // Tag matching on RC (docs/tag-matching.md): the limits of `rverbs::limits`.
    d.tm_caps = ibv_tm_caps {
        max_rndv_hdr_size: crate::limits::TM_MAX_RNDV_HDR,
        max_num_tags: crate::limits::TM_MAX_TAGS,
        flags: IBV_TM_CAP_RC,
        max_ops: crate::limits::TM_MAX_OPS,
        max_sge: crate::limits::TM_MAX_SGE,
    };
    d
}

/// Port attributes (`struct ibv_port_attr`, v44 layout).
pub fn port_attr(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state as u32,
        max_mtu: p.max_mtu.raw(),
        active_mtu: p.active_mtu.raw(),
        gid_tbl_len: int(p.gid_tbl_len),
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

/// `struct ibv_ah_attr` → core address vector (`is_global` ↔ `grh: Some`).
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
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

/// Core address vector → `struct ibv_ah_attr`.
pub fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    let mut c = ibv_ah_attr::zeroed();
    if let Some(g) = a.grh {
        c.is_global = 1;
        c.grh.dgid = gid(g.dgid);
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

/// `struct ibv_qp_cap` ↔ core caps.
pub fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// Core caps → `struct ibv_qp_cap`.
pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_qp_attr` + mask → core attributes. Enum fields are only decoded when the
/// mask names them; an undefined value there is `EINVAL`.
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: crate::QpAttrMask) -> Result<QpAttr, c_int> {
    use crate::QpAttrMask as M;
    let state = |raw: u32, bit: M| -> Result<QpState, c_int> {
        if mask.contains(bit) {
            QpState::from_raw(raw).ok_or(libc::EINVAL)
        } else {
            Ok(QpState::Reset)
        }
    };
    let mut q = QpAttr {
        qp_state: state(a.qp_state, M::STATE)?,
        cur_qp_state: state(a.cur_qp_state, M::CUR_STATE)?,
        ..QpAttr::default()
    };
    if mask.contains(M::PATH_MTU) {
        q.path_mtu = Mtu::from_raw(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    if mask.contains(M::PATH_MIG_STATE) {
        q.path_mig_state = match a.path_mig_state {
            IBV_MIG_MIGRATED => MigState::Migrated,
            IBV_MIG_REARM => MigState::Rearm,
            IBV_MIG_ARMED => MigState::Armed,
            _ => return Err(libc::EINVAL),
        };
    }
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = Access::from_bits_retain(a.qp_access_flags);
    q.cap = cap_from_c(&a.cap);
    q.ah_attr = ah_attr_from_c(&a.ah_attr);
    q.alt_ah_attr = ah_attr_from_c(&a.alt_ah_attr);
    q.pkey_index = a.pkey_index;
    q.alt_pkey_index = a.alt_pkey_index;
    q.en_sqd_async_notify = a.en_sqd_async_notify;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.port_num = a.port_num;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.alt_port_num = a.alt_port_num;
    q.alt_timeout = a.alt_timeout;
    q.rate_limit = a.rate_limit;
    Ok(q)
}

/// Core attributes → `struct ibv_qp_attr` (every field).
pub fn qp_attr_to_c(q: &QpAttr) -> ibv_qp_attr {
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
        cap: cap_to_c(&q.cap),
        ah_attr: ah_attr_to_c(&q.ah_attr),
        alt_ah_attr: ah_attr_to_c(&q.alt_ah_attr),
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

/// A C `int` limit as the `u32` the soft API reports (negative reads as 0).
fn uint(v: c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `struct ibv_device_attr` (ibv_query_device(3)) as [`DeviceAttr`]; the GUIDs from
/// network order. What the legacy struct lacks (`device_cap_flags_ex`,
/// `hca_core_clock`, `max_inline_data`) reads 0.
pub fn device_attr_from_c(d: &ibv_device_attr) -> DeviceAttr {
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
pub fn port_attr_from_c(p: &ibv_port_attr) -> PortAttr {
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

/// `struct ibv_qp_attr` as filled by ibv_query_qp(3) as a [`QpAttr`]; a state, MTU or
/// migration code the soft API has no name for reads as `Err` / 256 / `Migrated`.
pub fn qp_attr_from_query(a: &ibv_qp_attr) -> QpAttr {
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

