//! Compile-time checks of the x86_64 sizes and offsets gcc 12 gives the v44 headers
//! (`offsetof`/`sizeof` of `<infiniband/verbs.h>`). `tests/layout.rs` checks
//! the same (and every other field) against the installed header at test time.

use core::mem::{align_of, offset_of, size_of};

use super::*;

macro_rules! layout {
    ($t:ty, size = $size:expr, align = $align:expr $(, $($f:ident).+ = $off:expr)* $(,)?) => {
        const _: () = assert!(size_of::<$t>() == $size);
        const _: () = assert!(align_of::<$t>() == $align);
        $(const _: () = assert!(offset_of!($t, $($f).+) == $off);)*
    };
}

const _: () = assert!(size_of::<libc::pthread_mutex_t>() == 40);
const _: () = assert!(size_of::<libc::pthread_cond_t>() == 48);

layout!(ibv_device, size = 664, align = 8,
    _ops = 0, node_type = 16, transport_type = 20, name = 24, dev_name = 88, dev_path = 152,
    ibdev_path = 408);
layout!(ibv_context_ops, size = 256, align = 8,
    alloc_mw = 56, bind_mw = 64, dealloc_mw = 72, poll_cq = 88, req_notify_cq = 96,
    post_srq_recv = 160, post_send = 200, post_recv = 208, _compat_async_event = 248);
layout!(ibv_context, size = 328, align = 8,
    device = 0, ops = 8, ops.poll_cq = 96, ops.req_notify_cq = 104, ops.post_srq_recv = 168,
    ops.post_send = 208, ops.post_recv = 216, ops.alloc_mw = 64, ops.bind_mw = 72,
    ops.dealloc_mw = 80, cmd_fd = 264, async_fd = 268, num_comp_vectors = 272, mutex = 280,
    abi_compat = 320);
layout!(verbs_context, size = 648, align = 8,
    query_port = 0, advise_mr = 8, alloc_null_mr = 16, read_counters = 24,
    attach_counters_point_flow = 32, create_counters = 40, destroy_counters = 48,
    reg_dm_mr = 56, alloc_dm = 64, free_dm = 72, modify_flow_action_esp = 80,
    destroy_flow_action = 88, create_flow_action_esp = 96, modify_qp_rate_limit = 104,
    alloc_parent_domain = 112, dealloc_td = 120, alloc_td = 128, modify_cq = 136,
    post_srq_ops = 144, destroy_rwq_ind_table = 152, create_rwq_ind_table = 160,
    destroy_wq = 168, modify_wq = 176, create_wq = 184, query_rt_values = 192,
    create_cq_ex = 200, priv_ = 208, query_device_ex = 216, ibv_destroy_flow = 224,
    ABI_placeholder2 = 232, ibv_create_flow = 240, ABI_placeholder1 = 248, open_qp = 256,
    create_qp_ex = 264, get_srq_num = 272, create_srq_ex = 280, open_xrcd = 288,
    close_xrcd = 296, _ABI_placeholder3 = 304, sz = 312, context = 320);
layout!(ibv_comp_channel, size = 16, align = 8, context = 0, fd = 8, refcnt = 12);
layout!(ibv_pd, size = 16, align = 8, context = 0, handle = 8);
layout!(ibv_xrcd, size = 8, align = 8, context = 0);
layout!(ibv_mr, size = 48, align = 8,
    context = 0, pd = 8, addr = 16, length = 24, handle = 32, lkey = 36, rkey = 40);
layout!(ibv_mw, size = 32, align = 8, context = 0, pd = 8, rkey = 16, handle = 20, type_ = 24);
layout!(ibv_ah, size = 24, align = 8, context = 0, pd = 8, handle = 16);
layout!(ibv_cq, size = 128, align = 8,
    context = 0, channel = 8, cq_context = 16, handle = 24, cqe = 28, mutex = 32, cond = 72,
    comp_events_completed = 120, async_events_completed = 124);
layout!(ibv_cq_ex, size = 288, align = 8,
    context = 0, channel = 8, cq_context = 16, handle = 24, cqe = 28, mutex = 32, cond = 72,
    comp_events_completed = 120, async_events_completed = 124, comp_mask = 128, status = 132,
    wr_id = 136, start_poll = 144, next_poll = 152, end_poll = 160, read_opcode = 168,
    read_vendor_err = 176, read_byte_len = 184, read_imm_data = 192, read_qp_num = 200,
    read_src_qp = 208, read_wc_flags = 216, read_slid = 224, read_sl = 232,
    read_dlid_path_bits = 240, read_completion_ts = 248, read_cvlan = 256,
    read_flow_tag = 264, read_tm_info = 272, read_completion_wallclock_ns = 280);
layout!(ibv_srq, size = 128, align = 8,
    context = 0, srq_context = 8, pd = 16, handle = 24, mutex = 32, cond = 72,
    events_completed = 120);
layout!(ibv_qp, size = 160, align = 8,
    context = 0, qp_context = 8, pd = 16, send_cq = 24, recv_cq = 32, srq = 40, handle = 48,
    qp_num = 52, state = 56, qp_type = 60, mutex = 64, cond = 104, events_completed = 152);
layout!(ibv_qp_ex, size = 352, align = 8,
    qp_base = 0, comp_mask = 160, wr_id = 168, wr_flags = 176, wr_atomic_cmp_swp = 184,
    wr_atomic_fetch_add = 192, wr_bind_mw = 200, wr_local_inv = 208, wr_rdma_read = 216,
    wr_rdma_write = 224, wr_rdma_write_imm = 232, wr_send = 240, wr_send_imm = 248,
    wr_send_inv = 256, wr_send_tso = 264, wr_set_ud_addr = 272, wr_set_xrc_srqn = 280,
    wr_set_inline_data = 288, wr_set_inline_data_list = 296, wr_set_sge = 304,
    wr_set_sge_list = 312, wr_start = 320, wr_complete = 328, wr_abort = 336,
    wr_atomic_write = 344);
layout!(ibv_wq, size = 152, align = 8,
    context = 0, wq_context = 8, pd = 16, cq = 24, wq_num = 32, handle = 36, state = 40,
    wq_type = 44, post_recv = 48, mutex = 56, cond = 96, events_completed = 144,
    comp_mask = 148);
layout!(ibv_sge, size = 16, align = 8, addr = 0, length = 8, lkey = 12);
layout!(ibv_send_wr, size = 128, align = 8,
    wr_id = 0, next = 8, sg_list = 16, num_sge = 24, opcode = 28, send_flags = 32,
    imm_data = 36, wr = 40, wr.rdma.remote_addr = 40, wr.rdma.rkey = 48,
    wr.atomic.remote_addr = 40, wr.atomic.compare_add = 48, wr.atomic.swap = 56,
    wr.atomic.rkey = 64, wr.ud.ah = 40, wr.ud.remote_qpn = 48, wr.ud.remote_qkey = 52,
    qp_type = 72, qp_type.xrc.remote_srqn = 72, bind_mw_tso = 80, bind_mw_tso.bind_mw = 80,
    bind_mw_tso.tso = 80);
const _: () = assert!(size_of::<ibv_send_wr_bind_mw>() == 48);
const _: () = assert!(size_of::<ibv_send_wr_tso>() == 16);
layout!(ibv_recv_wr, size = 32, align = 8, wr_id = 0, next = 8, sg_list = 16, num_sge = 24);
layout!(ibv_wc, size = 48, align = 8,
    wr_id = 0, status = 8, opcode = 12, vendor_err = 16, byte_len = 20, imm_data = 24,
    qp_num = 28, src_qp = 32, wc_flags = 36, pkey_index = 40, slid = 42, sl = 44,
    dlid_path_bits = 45);
layout!(ibv_global_route, size = 24, align = 8,
    dgid = 0, flow_label = 16, sgid_index = 20, hop_limit = 21, traffic_class = 22);
layout!(ibv_ah_attr, size = 32, align = 8,
    grh = 0, dlid = 24, sl = 26, src_path_bits = 27, static_rate = 28, is_global = 29,
    port_num = 30);
layout!(ibv_qp_cap, size = 20, align = 4,
    max_send_wr = 0, max_recv_wr = 4, max_send_sge = 8, max_recv_sge = 12,
    max_inline_data = 16);
layout!(ibv_qp_init_attr, size = 64, align = 8,
    qp_context = 0, send_cq = 8, recv_cq = 16, srq = 24, cap = 32, qp_type = 52,
    sq_sig_all = 56);
layout!(ibv_qp_init_attr_ex, size = 136, align = 8,
    qp_context = 0, send_cq = 8, recv_cq = 16, srq = 24, cap = 32, qp_type = 52,
    sq_sig_all = 56, comp_mask = 60, pd = 64, xrcd = 72, create_flags = 80,
    max_tso_header = 84, rwq_ind_tbl = 88, rx_hash_conf = 96, source_qpn = 120,
    send_ops_flags = 128);
layout!(ibv_qp_attr, size = 144, align = 8,
    qp_state = 0, cur_qp_state = 4, path_mtu = 8, path_mig_state = 12, qkey = 16,
    rq_psn = 20, sq_psn = 24, dest_qp_num = 28, qp_access_flags = 32, cap = 36,
    ah_attr = 56, alt_ah_attr = 88, pkey_index = 120, alt_pkey_index = 122,
    en_sqd_async_notify = 124, sq_draining = 125, max_rd_atomic = 126,
    max_dest_rd_atomic = 127, min_rnr_timer = 128, port_num = 129, timeout = 130,
    retry_cnt = 131, rnr_retry = 132, alt_port_num = 133, alt_timeout = 134,
    rate_limit = 136);
layout!(ibv_srq_attr, size = 12, align = 4, max_wr = 0, max_sge = 4, srq_limit = 8);
layout!(ibv_srq_init_attr, size = 24, align = 8, srq_context = 0, attr = 8);
layout!(ibv_srq_init_attr_ex, size = 64, align = 8,
    srq_context = 0, attr = 8, comp_mask = 20, srq_type = 24, pd = 32, xrcd = 40, cq = 48,
    tm_cap = 56);
layout!(ibv_cq_init_attr_ex, size = 56, align = 8,
    cqe = 0, cq_context = 8, channel = 16, comp_vector = 24, wc_flags = 32, comp_mask = 40,
    flags = 44, parent_domain = 48);
layout!(ibv_device_attr, size = 232, align = 8,
    fw_ver = 0, node_guid = 64, sys_image_guid = 72, max_mr_size = 80, page_size_cap = 88,
    vendor_id = 96, vendor_part_id = 100, hw_ver = 104, max_qp = 108, max_qp_wr = 112,
    device_cap_flags = 116, max_sge = 120, max_sge_rd = 124, max_cq = 128, max_cqe = 132,
    max_mr = 136, max_pd = 140, max_qp_rd_atom = 144, max_ee_rd_atom = 148,
    max_res_rd_atom = 152, max_qp_init_rd_atom = 156, max_ee_init_rd_atom = 160,
    atomic_cap = 164, max_ee = 168, max_rdd = 172, max_mw = 176, max_raw_ipv6_qp = 180,
    max_raw_ethy_qp = 184, max_mcast_grp = 188, max_mcast_qp_attach = 192,
    max_total_mcast_qp_attach = 196, max_ah = 200, max_fmr = 204, max_map_per_fmr = 208,
    max_srq = 212, max_srq_wr = 216, max_srq_sge = 220, max_pkeys = 224,
    local_ca_ack_delay = 226, phys_port_cnt = 227);
layout!(ibv_device_attr_ex, size = 400, align = 8,
    orig_attr = 0, comp_mask = 232, odp_caps = 240, completion_timestamp_mask = 264,
    hca_core_clock = 272, device_cap_flags_ex = 280, tso_caps = 288, rss_caps = 296,
    max_wq_type_rq = 328, packet_pacing_caps = 332, raw_packet_caps = 344, tm_caps = 348,
    cq_mod_caps = 368, max_dm_size = 376, pci_atomic_caps = 384, xrc_odp_caps = 392,
    phys_port_cnt_ex = 396);
layout!(ibv_port_attr, size = 52, align = 4,
    state = 0, max_mtu = 4, active_mtu = 8, gid_tbl_len = 12, port_cap_flags = 16,
    max_msg_sz = 20, bad_pkey_cntr = 24, qkey_viol_cntr = 28, pkey_tbl_len = 32, lid = 34,
    sm_lid = 36, lmc = 38, max_vl_num = 39, sm_sl = 40, subnet_timeout = 41,
    init_type_reply = 42, active_width = 43, active_speed = 44, phys_state = 45,
    link_layer = 46, flags = 47, port_cap_flags2 = 48);
// The exported ibv_query_port writes exactly the first 48 bytes of an ibv_port_attr.
layout!(_compat_ibv_port_attr, size = 48, align = 4,
    state = 0, max_mtu = 4, active_mtu = 8, gid_tbl_len = 12, port_cap_flags = 16,
    max_msg_sz = 20, bad_pkey_cntr = 24, qkey_viol_cntr = 28, pkey_tbl_len = 32, lid = 34,
    sm_lid = 36, lmc = 38, max_vl_num = 39, sm_sl = 40, subnet_timeout = 41,
    init_type_reply = 42, active_width = 43, active_speed = 44, phys_state = 45,
    link_layer = 46, flags = 47);
layout!(ibv_async_event, size = 16, align = 8, element = 0, event_type = 8);
layout!(ibv_gid, size = 16, align = 8);
layout!(ibv_gid_entry, size = 32, align = 8,
    gid = 0, gid_index = 16, port_num = 20, gid_type = 24, ndev_ifindex = 28);
layout!(ibv_grh, size = 40, align = 8,
    version_tclass_flow = 0, paylen = 4, next_hdr = 6, hop_limit = 7, sgid = 8, dgid = 24);
layout!(ibv_query_device_ex_input, size = 4, align = 4, comp_mask = 0);
layout!(ibv_poll_cq_attr, size = 4, align = 4, comp_mask = 0);
layout!(ibv_data_buf, size = 16, align = 8, addr = 0, length = 8);
layout!(ibv_mw_bind_info, size = 32, align = 8, mr = 0, addr = 8, length = 16,
    mw_access_flags = 24);
layout!(ibv_xrcd_init_attr, size = 12, align = 4, comp_mask = 0, fd = 4, oflags = 8);
layout!(ibv_ece, size = 12, align = 4, vendor_id = 0, options = 4, comp_mask = 8);
layout!(ibv_dm, size = 32, align = 8,
    context = 0, memcpy_to_dm = 8, memcpy_from_dm = 16, comp_mask = 24, handle = 28);
