//! Every `#[repr(C)]` mirror (crate `rverbs-abi`, and `src/abi`'s kernel records) against the *installed* rdma-core headers.
//!
//! The tables below list each mirrored struct/union with every field (nested members of
//! anonymous C unions/structs by path), each enum alias and each constant. The test
//! turns them into a C include file of `V(expr)` lines, compiles `tests/layout.c` with
//! the system C compiler against `/usr/include/infiniband/verbs.h` (+ `sa.h`,
//! `rdma/ib_user_verbs.h`, `rdma/ib_user_sa.h`), runs it, and compares every printed value
//! with Rust's `size_of`/`align_of`/`offset_of!`/constant.
//!
//! A second test parses `../rverbs-abi/src/*.rs` and `src/abi/*.rs` and fails if a mirrored type, field, enum alias
//! or constant is missing from the tables, so nothing escapes the comparison.
//!
//! Missing header or compiler = failure, never a skip.

#[macro_use]
mod layout_harness;

use std::collections::BTreeSet;

use layout_harness::*;

use ibverbs::abi::*;

const HEADER: &str = "/usr/include/infiniband/verbs.h";

fn layout() -> Layout {
    let mut l = Layout::default();

    structs! { l;
        "union ibv_gid" => ibv_gid { raw, global, global.subnet_prefix, global.interface_id }
        "struct ibv_gid_entry" => ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        "struct _ibv_device_ops" => _ibv_device_ops { _dummy1, _dummy2 }
        "struct ibv_device" => ibv_device {
            _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
        }
        "struct ibv_device_attr" => ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
        }
        "struct ibv_query_device_ex_input" => ibv_query_device_ex_input { comp_mask }
        "struct ibv_odp_caps" => ibv_odp_caps {
            general_caps, per_transport_caps, per_transport_caps.rc_odp_caps,
            per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps,
        }
        "struct ibv_tso_caps" => ibv_tso_caps { max_tso, supported_qpts }
        "struct ibv_rss_caps" => ibv_rss_caps {
            supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
            rx_hash_fields_mask, rx_hash_function,
        }
        "struct ibv_packet_pacing_caps" => ibv_packet_pacing_caps {
            qp_rate_limit_min, qp_rate_limit_max, supported_qpts,
        }
        "struct ibv_tm_caps" => ibv_tm_caps {
            max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge,
        }
        "struct ibv_cq_moderation_caps" => ibv_cq_moderation_caps { max_cq_count, max_cq_period }
        "struct ibv_pci_atomic_caps" => ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
        "struct ibv_device_attr_ex" => ibv_device_attr_ex {
            orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
            device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
            raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
            phys_port_cnt_ex,
        }
        "struct ibv_port_attr" => ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
            qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
            port_cap_flags2,
        }
        // Not in the public header: must match the first 48 bytes of ibv_port_attr
        // (its size is checked against offsetof(port_cap_flags2) below).
        @fields "struct ibv_port_attr" => _compat_ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
            qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        }
        "struct ibv_values_ex" => ibv_values_ex { comp_mask, raw_clock }
        "struct ibv_context_ops" => ibv_context_ops {
            _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
            _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
            _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
            _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
            _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
            _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
            _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
        }
        "struct ibv_context" => ibv_context {
            device, ops, ops.poll_cq, ops.req_notify_cq, ops.post_srq_recv, ops.post_send,
            ops.post_recv, ops.alloc_mw, ops.bind_mw, ops.dealloc_mw, cmd_fd, async_fd,
            num_comp_vectors, mutex, abi_compat,
        }
        "struct verbs_context" => verbs_context {
            query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
            create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
            modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
            modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
            post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
            create_wq, query_rt_values, create_cq_ex, priv_ => "priv", query_device_ex,
            ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp,
            create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3,
            sz, context, context.ops.post_send, context.abi_compat,
        }
        "struct ibv_async_event" => ibv_async_event {
            element, element.cq, element.qp, element.srq, element.wq, element.port_num,
            event_type,
        }
        "struct ibv_pd" => ibv_pd { context, handle }
        "struct ibv_td_init_attr" => ibv_td_init_attr { comp_mask }
        "struct ibv_td" => ibv_td { context }
        "struct ibv_parent_domain_init_attr" => ibv_parent_domain_init_attr {
            pd, td, comp_mask, alloc, free, pd_context,
        }
        "struct ibv_xrcd_init_attr" => ibv_xrcd_init_attr { comp_mask, fd, oflags }
        "struct ibv_xrcd" => ibv_xrcd { context }
        "struct ibv_mr" => ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        "struct ibv_mw" => ibv_mw { context, pd, rkey, handle, type_ => "type" }
        "struct ibv_mw_bind_info" => ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        "struct ibv_mw_bind" => ibv_mw_bind { wr_id, send_flags, bind_info }
        "struct ibv_alloc_dm_attr" => ibv_alloc_dm_attr { length, log_align_req, comp_mask }
        "struct ibv_dm" => ibv_dm { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle }
        "struct ibv_counters_init_attr" => ibv_counters_init_attr { comp_mask }
        "struct ibv_counters" => ibv_counters { context }
        "struct ibv_counter_attach_attr" => ibv_counter_attach_attr {
            counter_desc, index, comp_mask,
        }
        "struct ibv_flow" => ibv_flow { comp_mask, context, handle }
        "struct ibv_flow_action" => ibv_flow_action { context }
        "struct ibv_global_route" => ibv_global_route {
            dgid, flow_label, sgid_index, hop_limit, traffic_class,
        }
        "struct ibv_grh" => ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
        "struct ibv_ah_attr" => ibv_ah_attr {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num,
        }
        "struct ibv_ah" => ibv_ah { context, pd, handle }
        "struct ibv_comp_channel" => ibv_comp_channel { context, fd, refcnt }
        "struct ibv_cq" => ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed,
        }
        "struct ibv_poll_cq_attr" => ibv_poll_cq_attr { comp_mask }
        "struct ibv_wc_tm_info" => ibv_wc_tm_info { tag, priv_ => "priv" }
        "struct ibv_cq_ex" => ibv_cq_ex {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
            read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num,
            read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits,
            read_completion_ts, read_cvlan, read_flow_tag, read_tm_info,
            read_completion_wallclock_ns,
        }
        "struct ibv_wc" => ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm_data,
            imm_data => "invalidated_rkey", qp_num, src_qp, wc_flags, pkey_index, slid, sl,
            dlid_path_bits,
        }
        "struct ibv_cq_init_attr_ex" => ibv_cq_init_attr_ex {
            cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
        }
        "struct ibv_moderate_cq" => ibv_moderate_cq { cq_count, cq_period }
        "struct ibv_modify_cq_attr" => ibv_modify_cq_attr { attr_mask, moderate }
        "struct ibv_qp" => ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed,
        }
        "struct ibv_qp_ex" => ibv_qp_ex {
            qp_base, qp_base.qp_num, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp,
            wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write,
            wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr,
            wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge,
            wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write,
        }
        "struct ibv_qp_cap" => ibv_qp_cap {
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
        }
        "struct ibv_qp_init_attr" => ibv_qp_init_attr {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
        }
        "struct ibv_rx_hash_conf" => ibv_rx_hash_conf {
            rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask,
        }
        "struct ibv_qp_init_attr_ex" => ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
            create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
        }
        "struct ibv_qp_open_attr" => ibv_qp_open_attr {
            comp_mask, qp_num, xrcd, qp_context, qp_type,
        }
        "struct ibv_qp_attr" => ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
            en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
            port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
        }
        "struct ibv_qp_rate_limit_attr" => ibv_qp_rate_limit_attr {
            rate_limit, max_burst_sz, typical_pkt_sz, comp_mask,
        }
        "struct ibv_ece" => ibv_ece { vendor_id, options, comp_mask }
        "struct ibv_sge" => ibv_sge { addr, length, lkey }
        "struct ibv_data_buf" => ibv_data_buf { addr, length }
        "struct ibv_send_wr" => ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data,
            imm_data => "invalidate_rkey", wr, wr.rdma, wr.rdma.remote_addr, wr.rdma.rkey,
            wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap,
            wr.atomic.rkey, wr.ud, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey, qp_type,
            qp_type.xrc, qp_type.xrc.remote_srqn,
            // C: an anonymous union; bind_mw is its largest member.
            bind_mw_tso => "bind_mw",
            bind_mw_tso.bind_mw => "bind_mw", bind_mw_tso.bind_mw.mw => "bind_mw.mw",
            bind_mw_tso.bind_mw.rkey => "bind_mw.rkey",
            bind_mw_tso.bind_mw.bind_info => "bind_mw.bind_info",
            bind_mw_tso.tso => "tso", bind_mw_tso.tso.hdr => "tso.hdr",
            bind_mw_tso.tso.hdr_sz => "tso.hdr_sz", bind_mw_tso.tso.mss => "tso.mss",
        }
        "struct ibv_recv_wr" => ibv_recv_wr { wr_id, next, sg_list, num_sge }
        "struct ibv_ops_wr" => ibv_ops_wr {
            wr_id, next, opcode, flags, tm, tm.unexpected_cnt, tm.handle, tm.add,
            tm.add.recv_wr_id, tm.add.sg_list, tm.add.num_sge, tm.add.tag, tm.add.mask,
        }
        "struct ibv_srq" => ibv_srq {
            context, srq_context, pd, handle, mutex, cond, events_completed,
        }
        "struct ibv_srq_attr" => ibv_srq_attr { max_wr, max_sge, srq_limit }
        "struct ibv_srq_init_attr" => ibv_srq_init_attr { srq_context, attr }
        "struct ibv_tm_cap" => ibv_tm_cap { max_num_tags, max_ops }
        "struct ibv_srq_init_attr_ex" => ibv_srq_init_attr_ex {
            srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap,
        }
        "struct ibv_wq" => ibv_wq {
            context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond,
            events_completed, comp_mask,
        }
        "struct ibv_wq_init_attr" => ibv_wq_init_attr {
            wq_context, wq_type, max_wr, max_sge, pd, cq, comp_mask, create_flags,
        }
        "struct ibv_wq_attr" => ibv_wq_attr {
            attr_mask, wq_state, curr_wq_state, flags, flags_mask,
        }
        "struct ibv_rwq_ind_table" => ibv_rwq_ind_table {
            context, ind_tbl_handle, ind_tbl_num, comp_mask,
        }
        "struct ibv_rwq_ind_table_init_attr" => ibv_rwq_ind_table_init_attr {
            log_ind_tbl_size, ind_tbl, comp_mask,
        }
        "struct ib_uverbs_global_route" => ib_uverbs_global_route {
            dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved,
        }
        "struct ib_uverbs_ah_attr" => ib_uverbs_ah_attr {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved,
        }
        "struct ib_uverbs_qp_attr" => ib_uverbs_qp_attr {
            qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn,
            sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr,
            max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, reserved,
        }
        "struct ib_user_path_rec" => ib_user_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey, hop_limit,
            traffic_class, numb_path, sl, mtu_selector, rate_selector, rate,
            packet_life_time_selector, packet_life_time, preference,
        }
        "struct ibv_sa_path_rec" => ibv_sa_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class,
            reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate,
            packet_life_time_selector, packet_life_time, preference,
        }
        "struct ib_uverbs_comp_event_desc" => ib_uverbs_comp_event_desc { cq_handle }
        "struct ib_uverbs_async_event_desc" => ib_uverbs_async_event_desc {
            element, event_type, reserved,
        }
    }

    // The compat port attr is exactly ibv_port_attr up to port_cap_flags2.
    l.row(
        "offsetof(struct ibv_port_attr, port_cap_flags2)".to_owned(),
        size_of::<_compat_ibv_port_attr>() as i64,
    );
    l.row(
        "sizeof(pthread_mutex_t)".to_owned(),
        size_of::<libc::pthread_mutex_t>() as i64,
    );
    l.row(
        "sizeof(pthread_cond_t)".to_owned(),
        size_of::<libc::pthread_cond_t>() as i64,
    );
    l.row(
        "(long long)(uintptr_t)__VERBS_ABI_IS_EXTENDED".to_owned(),
        VERBS_ABI_IS_EXTENDED as i64,
    );

    enums! { l;
        "enum ibv_gid_type" => ibv_gid_type,
        "enum ibv_node_type" => ibv_node_type,
        "enum ibv_transport_type" => ibv_transport_type,
        "enum ibv_device_cap_flags" => ibv_device_cap_flags,
        "enum ibv_fork_status" => ibv_fork_status,
        "enum ibv_atomic_cap" => ibv_atomic_cap,
        "enum ibv_dm_mask" => ibv_dm_mask,
        "enum ibv_odp_transport_cap_bits" => ibv_odp_transport_cap_bits,
        "enum ibv_odp_general_caps" => ibv_odp_general_caps,
        "enum ibv_raw_packet_caps" => ibv_raw_packet_caps,
        "enum ibv_tm_cap_flags" => ibv_tm_cap_flags,
        "enum ibv_pci_atomic_op_size" => ibv_pci_atomic_op_size,
        "enum ibv_mtu" => ibv_mtu,
        "enum ibv_port_state" => ibv_port_state,
        "enum ibv_port_cap_flags" => ibv_port_cap_flags,
        "enum ibv_port_cap_flags2" => ibv_port_cap_flags2,
        "enum ibv_event_type" => ibv_event_type,
        "enum ibv_wc_status" => ibv_wc_status,
        "enum ibv_wc_opcode" => ibv_wc_opcode,
        "enum ibv_create_cq_wc_flags" => ibv_create_cq_wc_flags,
        "enum ibv_wc_flags" => ibv_wc_flags,
        "enum ibv_access_flags" => ibv_access_flags,
        "enum ibv_rereg_mr_flags" => ibv_rereg_mr_flags,
        "enum ibv_rereg_mr_err_code" => ibv_rereg_mr_err_code,
        "enum ibv_mw_type" => ibv_mw_type,
        "enum ibv_xrcd_init_attr_mask" => ibv_xrcd_init_attr_mask,
        "enum ibv_rate" => ibv_rate,
        "enum ibv_srq_attr_mask" => ibv_srq_attr_mask,
        "enum ibv_srq_type" => ibv_srq_type,
        "enum ibv_srq_init_attr_mask" => ibv_srq_init_attr_mask,
        "enum ibv_wq_type" => ibv_wq_type,
        "enum ibv_wq_state" => ibv_wq_state,
        "enum ibv_wq_init_attr_mask" => ibv_wq_init_attr_mask,
        "enum ibv_wq_flags" => ibv_wq_flags,
        "enum ibv_wq_attr_mask" => ibv_wq_attr_mask,
        "enum ibv_qp_type" => ibv_qp_type,
        "enum ibv_qp_init_attr_mask" => ibv_qp_init_attr_mask,
        "enum ibv_qp_create_flags" => ibv_qp_create_flags,
        "enum ibv_qp_create_send_ops_flags" => ibv_qp_create_send_ops_flags,
        "enum ibv_qp_open_attr_mask" => ibv_qp_open_attr_mask,
        "enum ibv_qp_attr_mask" => ibv_qp_attr_mask,
        "enum ibv_qp_state" => ibv_qp_state,
        "enum ibv_mig_state" => ibv_mig_state,
        "enum ibv_wr_opcode" => ibv_wr_opcode,
        "enum ibv_send_flags" => ibv_send_flags,
        "enum ibv_ops_wr_opcode" => ibv_ops_wr_opcode,
        "enum ibv_ops_flags" => ibv_ops_flags,
        "enum ibv_cq_attr_mask" => ibv_cq_attr_mask,
        "enum ibv_cq_init_attr_mask" => ibv_cq_init_attr_mask,
        "enum ibv_create_cq_attr_flags" => ibv_create_cq_attr_flags,
        "enum ibv_parent_domain_init_attr_mask" => ibv_parent_domain_init_attr_mask,
        "enum ibv_values_mask" => ibv_values_mask,
        "enum ibv_advise_mr_advice" => ibv_advise_mr_advice,
        "enum ibv_counter_description" => ibv_counter_description,
    }

    consts! { l;
        IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX,
        IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2,
        IBV_NODE_UNKNOWN, IBV_NODE_CA, IBV_NODE_SWITCH, IBV_NODE_ROUTER, IBV_NODE_RNIC,
        IBV_NODE_USNIC, IBV_NODE_USNIC_UDP, IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN, IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP, IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP, IBV_TRANSPORT_UNSPECIFIED,
        IBV_DEVICE_RESIZE_MAX_WR, IBV_DEVICE_BAD_PKEY_CNTR, IBV_DEVICE_BAD_QKEY_CNTR,
        IBV_DEVICE_RAW_MULTI, IBV_DEVICE_AUTO_PATH_MIG, IBV_DEVICE_CHANGE_PHY_PORT,
        IBV_DEVICE_UD_AV_PORT_ENFORCE, IBV_DEVICE_CURR_QP_STATE_MOD, IBV_DEVICE_SHUTDOWN_PORT,
        IBV_DEVICE_INIT_TYPE, IBV_DEVICE_PORT_ACTIVE_EVENT, IBV_DEVICE_SYS_IMAGE_GUID,
        IBV_DEVICE_RC_RNR_NAK_GEN, IBV_DEVICE_SRQ_RESIZE, IBV_DEVICE_N_NOTIFY_CQ,
        IBV_DEVICE_MEM_WINDOW, IBV_DEVICE_UD_IP_CSUM, IBV_DEVICE_XRC,
        IBV_DEVICE_MEM_MGT_EXTENSIONS, IBV_DEVICE_MEM_WINDOW_TYPE_2A,
        IBV_DEVICE_MEM_WINDOW_TYPE_2B, IBV_DEVICE_RC_IP_CSUM, IBV_DEVICE_RAW_IP_CSUM,
        IBV_DEVICE_MANAGED_FLOW_STEERING, IBV_DEVICE_RAW_SCATTER_FCS,
        IBV_DEVICE_PCI_WRITE_END_PADDING,
        IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED,
        IBV_ATOMIC_NONE, IBV_ATOMIC_HCA, IBV_ATOMIC_GLOB,
        IBV_DM_MASK_HANDLE,
        IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_WRITE, IBV_ODP_SUPPORT_READ,
        IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_SRQ_RECV, IBV_ODP_SUPPORT,
        IBV_ODP_SUPPORT_IMPLICIT,
        IBV_RAW_PACKET_CAP_CVLAN_STRIPPING, IBV_RAW_PACKET_CAP_SCATTER_FCS,
        IBV_RAW_PACKET_CAP_IP_CSUM, IBV_RAW_PACKET_CAP_DELAY_DROP,
        IBV_TM_CAP_RC,
        IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP, IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP,
        IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096,
        IBV_PORT_NOP, IBV_PORT_DOWN, IBV_PORT_INIT, IBV_PORT_ARMED, IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET,
        IBV_PORT_SM, IBV_PORT_NOTICE_SUP, IBV_PORT_TRAP_SUP, IBV_PORT_OPT_IPD_SUP,
        IBV_PORT_AUTO_MIGR_SUP, IBV_PORT_SL_MAP_SUP, IBV_PORT_MKEY_NVRAM, IBV_PORT_PKEY_NVRAM,
        IBV_PORT_LED_INFO_SUP, IBV_PORT_SYS_IMAGE_GUID_SUP, IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP,
        IBV_PORT_EXTENDED_SPEEDS_SUP, IBV_PORT_CAP_MASK2_SUP, IBV_PORT_CM_SUP,
        IBV_PORT_SNMP_TUNNEL_SUP, IBV_PORT_REINIT_SUP, IBV_PORT_DEVICE_MGMT_SUP,
        IBV_PORT_VENDOR_CLASS_SUP, IBV_PORT_DR_NOTICE_SUP, IBV_PORT_CAP_MASK_NOTICE_SUP,
        IBV_PORT_BOOT_MGMT_SUP, IBV_PORT_LINK_LATENCY_SUP, IBV_PORT_CLIENT_REG_SUP,
        IBV_PORT_IP_BASED_GIDS,
        IBV_PORT_SET_NODE_DESC_SUP, IBV_PORT_INFO_EXT_SUP, IBV_PORT_VIRT_SUP,
        IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP, IBV_PORT_LINK_WIDTH_2X_SUP,
        IBV_PORT_LINK_SPEED_HDR_SUP, IBV_PORT_LINK_SPEED_NDR_SUP,
        IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE, IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED, IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE, IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR, IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR, IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_GENERAL_ERR, IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_TSO, IBV_WC_ATOMIC_WRITE, IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_TM_ADD, IBV_WC_TM_DEL, IBV_WC_TM_SYNC,
        IBV_WC_TM_RECV, IBV_WC_TM_NO_TAG, IBV_WC_DRIVER1, IBV_WC_DRIVER2, IBV_WC_DRIVER3,
        IBV_WC_IP_CSUM_OK_SHIFT,
        IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP, IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, IBV_WC_STANDARD_FLAGS,
        IBV_CREATE_CQ_SUP_WC_FLAGS,
        IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_IP_CSUM_OK, IBV_WC_WITH_INV, IBV_WC_TM_SYNC_REQ,
        IBV_WC_TM_MATCH, IBV_WC_TM_DATA_VALID,
        IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND, IBV_ACCESS_HUGETLB, IBV_ACCESS_OPTIONAL_FIRST,
        IBV_ACCESS_RELAXED_ORDERING, IBV_ACCESS_OPTIONAL_RANGE,
        IBV_REREG_MR_CHANGE_TRANSLATION, IBV_REREG_MR_CHANGE_PD, IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_FLAGS_SUPPORTED, IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_ERR_DONT_FORK_NEW,
        IBV_REREG_MR_ERR_DO_FORK_OLD, IBV_REREG_MR_ERR_CMD,
        IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW,
        IBV_MW_TYPE_1, IBV_MW_TYPE_2,
        IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS, IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_RATE_MAX, IBV_RATE_2_5_GBPS, IBV_RATE_5_GBPS, IBV_RATE_10_GBPS, IBV_RATE_20_GBPS,
        IBV_RATE_30_GBPS, IBV_RATE_40_GBPS, IBV_RATE_60_GBPS, IBV_RATE_80_GBPS,
        IBV_RATE_120_GBPS, IBV_RATE_14_GBPS, IBV_RATE_56_GBPS, IBV_RATE_112_GBPS,
        IBV_RATE_168_GBPS, IBV_RATE_25_GBPS, IBV_RATE_100_GBPS, IBV_RATE_200_GBPS,
        IBV_RATE_300_GBPS, IBV_RATE_28_GBPS, IBV_RATE_50_GBPS, IBV_RATE_400_GBPS,
        IBV_RATE_600_GBPS, IBV_RATE_800_GBPS, IBV_RATE_1200_GBPS,
        IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT,
        IBV_SRQT_BASIC, IBV_SRQT_XRC, IBV_SRQT_TM,
        IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQ_INIT_ATTR_PD, IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_TM, IBV_SRQ_INIT_ATTR_RESERVED,
        IBV_WQT_RQ, IBV_WQS_RESET, IBV_WQS_RDY, IBV_WQS_ERR, IBV_WQS_UNKNOWN,
        IBV_WQ_INIT_ATTR_FLAGS, IBV_WQ_INIT_ATTR_RESERVED,
        IBV_WQ_FLAGS_CVLAN_STRIPPING, IBV_WQ_FLAGS_SCATTER_FCS, IBV_WQ_FLAGS_DELAY_DROP,
        IBV_WQ_FLAGS_PCI_WRITE_END_PADDING, IBV_WQ_FLAGS_RESERVED,
        IBV_WQ_ATTR_STATE, IBV_WQ_ATTR_CURR_STATE, IBV_WQ_ATTR_FLAGS, IBV_WQ_ATTR_RESERVED,
        IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV, IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_XRCD, IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, IBV_QP_CREATE_SCATTER_FCS,
        IBV_QP_CREATE_CVLAN_STRIPPING, IBV_QP_CREATE_SOURCE_QPN,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING,
        IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO, IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_OPEN_ATTR_NUM, IBV_QP_OPEN_ATTR_XRCD, IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE, IBV_QP_OPEN_ATTR_RESERVED,
        IBV_QP_STATE, IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_AV, IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE,
        IBV_QPS_ERR, IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED,
        IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV, IBV_WR_TSO, IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_WR_TAG_ADD, IBV_WR_TAG_DEL, IBV_WR_TAG_SYNC, IBV_OPS_SIGNALED, IBV_OPS_TM_SYNC,
        IBV_CQ_ATTR_MODERATE, IBV_CQ_ATTR_RESERVED,
        IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        IBV_VALUES_MASK_RAW_CLOCK, IBV_VALUES_MASK_RESERVED,
        IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
        IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH,
        IBV_COUNTER_PACKETS, IBV_COUNTER_BYTES,
    }

    l
}

/// Mirrored names that the v44 public headers do not have, with the reason.
const NOT_IN_V44_HEADERS: &[(&str, &str)] = &[
    (
        "VERBS_ABI_IS_EXTENDED",
        "checked above as (uintptr_t)__VERBS_ABI_IS_EXTENDED",
    ),
    (
        "ibv_gid_type_sysfs",
        "libibverbs/driver.h is not installed (ibv_query_gid_type)",
    ),
    (
        "IBV_GID_TYPE_SYSFS_IB_ROCE_V1",
        "libibverbs/driver.h is not installed",
    ),
    (
        "IBV_GID_TYPE_SYSFS_ROCE_V2",
        "libibverbs/driver.h is not installed",
    ),
    (
        "IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS",
        "added in rdma-core 46 (commit ac676d8b1)",
    ),
    (
        "IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG",
        "added in rdma-core 46 (commit ac676d8b1)",
    ),
    (
        "IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES",
        "added in rdma-core 46 (commit ac676d8b1)",
    ),
];

/// Rust-named types for C anonymous members: (Rust type, parent Rust type, path in parent).
const ANONYMOUS: &[(&str, &str, &str)] = &[
    ("ibv_gid_global", "ibv_gid", "global"),
    (
        "ibv_odp_caps_per_transport",
        "ibv_odp_caps",
        "per_transport_caps",
    ),
    ("ibv_async_event_element", "ibv_async_event", "element"),
    ("ibv_send_wr_wr", "ibv_send_wr", "wr"),
    ("ibv_send_wr_rdma", "ibv_send_wr", "wr.rdma"),
    ("ibv_send_wr_atomic", "ibv_send_wr", "wr.atomic"),
    ("ibv_send_wr_ud", "ibv_send_wr", "wr.ud"),
    ("ibv_send_wr_qp_type", "ibv_send_wr", "qp_type"),
    ("ibv_send_wr_xrc", "ibv_send_wr", "qp_type.xrc"),
    ("ibv_send_wr_bind_mw_tso", "ibv_send_wr", "bind_mw_tso"),
    ("ibv_send_wr_bind_mw", "ibv_send_wr", "bind_mw_tso.bind_mw"),
    ("ibv_send_wr_tso", "ibv_send_wr", "bind_mw_tso.tso"),
    ("ibv_ops_wr_tm", "ibv_ops_wr", "tm"),
    ("ibv_ops_wr_tm_add", "ibv_ops_wr", "tm.add"),
];

#[test]
fn layout_matches_installed_verbs_h() {
    let l = layout();
    let c = run_c_dumper("layout", HEADER, "libibverbs-dev", include_str!("layout.c"), &l.rows);
    assert_matches(&l, &c, HEADER, 1500);
}

#[test]
fn every_mirrored_item_is_compared() {
    let l = layout();
    // The mirrors live in crate `rverbs-abi`; the kernel records only the drop-in uses
    // stay in `src/abi` here. Both are compared.
    let sources: Vec<_> = ["../rverbs-abi/src", "src/abi"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(manifest_dir().join(dir)).expect(dir))
        .map(|e| e.expect("dir entry").path())
        // librdmacm's mirrors are compared by tests/layout_cm.rs.
        .filter(|p| !p.ends_with("rdma_cm.rs"))
        .collect();
    let d = parse_abi_sources(&sources);
    assert!(d.types.len() > 90, "parser found only {} types", d.types.len());
    let not_in_headers: BTreeSet<&str> = NOT_IN_V44_HEADERS.iter().map(|(n, _)| *n).collect();
    let missing = not_compared(&l, &d, ANONYMOUS, &not_in_headers);
    assert!(
        missing.is_empty(),
        "mirrored in rverbs-abi or src/abi but not compared with the header by tests/layout.rs:\n  {}",
        missing.join("\n  ")
    );
}
