//! Field-by-field translation between the C structs of `<infiniband/verbs.h>` and the
//! core's types. Pure data mapping: no verbs rule is decided here (the core validates).

use core::ffi::{c_char, c_int};

use rverbs::{AhAttr, DeviceAttr, Gid, GidEntry, GidType, GlobalRoute, PortAttr, QpAttr};

use crate::abi::*;

/// A core GID as `union ibv_gid`.
pub fn gid(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

/// A `union ibv_gid` as a core GID.
pub fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern of the 16-byte union is a valid [u8; 16].
    Gid(unsafe { g.raw })
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
    d.max_dm_size = rverbs::limits::MAX_DM_SIZE;
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
        max_rndv_hdr_size: rverbs::limits::TM_MAX_RNDV_HDR,
        max_num_tags: rverbs::limits::TM_MAX_TAGS,
        flags: IBV_TM_CAP_RC,
        max_ops: rverbs::limits::TM_MAX_OPS,
        max_sge: rverbs::limits::TM_MAX_SGE,
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
pub fn cap_from_c(c: &ibv_qp_cap) -> rverbs::QpCap {
    rverbs::QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// Core caps → `struct ibv_qp_cap`.
pub fn cap_to_c(c: &rverbs::QpCap) -> ibv_qp_cap {
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
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: rverbs::QpAttrMask) -> Result<QpAttr, c_int> {
    use rverbs::QpAttrMask as M;
    let state = |raw: u32, bit: M| -> Result<rverbs::QpState, c_int> {
        if mask.contains(bit) {
            rverbs::QpState::from_raw(raw).ok_or(libc::EINVAL)
        } else {
            Ok(rverbs::QpState::Reset)
        }
    };
    let mut q = QpAttr {
        qp_state: state(a.qp_state, M::STATE)?,
        cur_qp_state: state(a.cur_qp_state, M::CUR_STATE)?,
        ..QpAttr::default()
    };
    if mask.contains(M::PATH_MTU) {
        q.path_mtu = rverbs::Mtu::from_raw(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    if mask.contains(M::PATH_MIG_STATE) {
        q.path_mig_state = match a.path_mig_state {
            IBV_MIG_MIGRATED => rverbs::MigState::Migrated,
            IBV_MIG_REARM => rverbs::MigState::Rearm,
            IBV_MIG_ARMED => rverbs::MigState::Armed,
            _ => return Err(libc::EINVAL),
        };
    }
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = rverbs::Access::from_bits_retain(a.qp_access_flags);
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

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs::QpAttrMask as M;

    #[test]
    fn ah_attr_round_trips_and_is_global_means_grh() {
        let mut c = ibv_ah_attr::zeroed();
        c.is_global = 1;
        c.grh.dgid = ibv_gid { raw: [7; 16] };
        c.grh.flow_label = 0x12345;
        c.grh.sgid_index = 2;
        c.grh.hop_limit = 64;
        c.grh.traffic_class = 3;
        c.dlid = 9;
        c.sl = 1;
        c.port_num = 1;
        let r = ah_attr_from_c(&c);
        assert_eq!(r.grh.unwrap().dgid, Gid([7; 16]));
        let back = ah_attr_to_c(&r);
        // SAFETY: ibv_ah_attr is plain data; compare the named fields.
        assert_eq!(unsafe { back.grh.dgid.raw }, [7; 16]);
        assert_eq!(
            (
                back.is_global,
                back.grh.flow_label,
                back.grh.sgid_index,
                back.dlid,
                back.port_num
            ),
            (1, 0x12345, 2, 9, 1)
        );
        c.is_global = 0;
        assert!(ah_attr_from_c(&c).grh.is_none());
    }

    #[test]
    fn enum_fields_are_only_decoded_when_masked() {
        let mut c = qp_attr_to_c(&QpAttr::default());
        c.qp_state = 42;
        c.path_mtu = 9;
        assert!(
            qp_attr_from_c(&c, M::QKEY).is_ok(),
            "unmasked garbage is ignored"
        );
        assert_eq!(qp_attr_from_c(&c, M::STATE).err(), Some(libc::EINVAL));
        assert_eq!(qp_attr_from_c(&c, M::PATH_MTU).err(), Some(libc::EINVAL));
        c.qp_state = IBV_QPS_RTS;
        c.path_mtu = IBV_MTU_1024;
        c.sq_psn = 77;
        let q = qp_attr_from_c(&c, M::STATE | M::PATH_MTU | M::SQ_PSN).unwrap();
        assert_eq!(q.qp_state, rverbs::QpState::Rts);
        assert_eq!(q.path_mtu, rverbs::Mtu::Mtu1024);
        assert_eq!(qp_attr_to_c(&q).sq_psn, 77);
    }
}
