//! ibv_get_device_list(3), ibv_query_device(3), ibv_query_port(3), ibv_query_gid(3).
mod common;
use common::*;
use rverbs::*;

#[test]
fn the_built_in_device_is_listed_and_opens() {
    let devs = devices().unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].name(), "rverbs0");
    assert_ne!(devs[0].guid(), 0);
    let ctx = devs[0].open().unwrap();
    assert_eq!(ctx.device_name(), "rverbs0");
    assert!(device_by_name("rverbs0").is_ok());
    assert!(device_by_name("mlx5_0").is_err());
}

#[test]
fn device_limits_are_generous_and_honest() {
    let a = open().query_device();
    assert!(a.max_cqe >= 2000 && a.max_qp_wr >= 1000 && a.max_sge >= 2, "{a:?}");
    assert!(a.max_qp > 0 && a.max_cq > 0 && a.max_mr > 0 && a.max_pd > 0);
    assert_ne!(a.vendor_id, 0);
    assert_ne!(a.vendor_id, 0x02c9, "not Mellanox");
    assert_ne!(a.vendor_id, 0x1d0f, "not Amazon");
    assert_eq!(a.phys_port_cnt, 1);
    assert_eq!(a.atomic_cap, 1, "IBV_ATOMIC_HCA");
    assert!(a.max_mr_size > 4096 && a.page_size_cap >= 4096);
    assert_eq!(a.node_guid, devices().unwrap()[0].guid());
}

#[test]
fn port_one_is_active_ethernet() {
    let ctx = open();
    let p = ctx.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.link_layer, 2, "IBV_LINK_LAYER_ETHERNET");
    assert_eq!(p.lid, 0);
    assert!(p.gid_tbl_len >= 2);
    assert!(p.max_msg_sz > 4096);
    assert_eq!(p.active_mtu, Mtu::Mtu4096);
    assert!(p.pkey_tbl_len >= 1);
    assert_eq!(ctx.query_port(2).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(ctx.query_port(0).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn gid_table_link_local_then_ipv4_mapped_then_ipv6() {
    let ctx = open();
    let len = ctx.query_port(1).unwrap().gid_tbl_len;
    let g0 = ctx.query_gid(1, 0).unwrap();
    assert_eq!(&g0.0[..8], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    assert_ne!(g0.interface_id(), 0);
    // Every entry belongs to a network interface, GID 0 included (RoCE: each GID entry
    // is a netdev's; sideway's show_gids looks the name up and failed on ifindex 0).
    for e in ctx.query_gid_table() {
        assert_ne!(e.ifindex, 0, "GID {} belongs to no interface", e.index);
    }
    let mut ipv6 = false;
    for i in 1..len {
        let e = ctx.query_gid_ex(1, i).unwrap();
        assert_eq!(e.gid_type, GidType::RoceV2);
        if e.gid.to_ipv4().is_some() {
            assert!(!ipv6, "IPv4-mapped entries come first: {}", e.gid);
        } else {
            ipv6 = true;
            assert_ne!(&e.gid.0[..2], &[0xfe, 0x80], "one link-local entry only");
        }
    }
    assert_eq!(ctx.query_gid(1, len).unwrap_err().errno(), libc::EINVAL);
    let lo = ctx.query_gid(1, gid_index(&ctx).into()).unwrap();
    assert_eq!(lo.to_string(), "::ffff:127.0.0.1");
}

#[test]
fn pkey_table_has_the_default_key() {
    let ctx = open();
    assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xffff);
    assert_eq!(ctx.query_pkey(1, 1).unwrap_err().errno(), libc::EINVAL);
}
