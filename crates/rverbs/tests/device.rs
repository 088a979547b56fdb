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
    assert_eq!(p.max_mtu, Mtu::Mtu4096);
    assert!(p.pkey_tbl_len >= 1);
    assert_eq!(ctx.query_port(2).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(ctx.query_port(0).unwrap_err().errno(), libc::EINVAL);
}

/// The largest IB MTU a link of netdev MTU `mtu` carries, as rxe computes its port's
/// active MTU (`rxe_set_mtu`: the netdev MTU less `RXE_MAX_HDR_LENGTH`, 80 bytes, down to
/// an IB MTU, at least 256).
fn rxe_ib_mtu(mtu: u32) -> u32 {
    let room = mtu.saturating_sub(80);
    [4096, 2048, 1024, 512, 256].into_iter().find(|&m| m <= room).unwrap_or(256)
}

#[test]
fn rxe_ib_mtu_matches_the_kernels_examples() {
    assert_eq!((rxe_ib_mtu(1500), rxe_ib_mtu(9000), rxe_ib_mtu(1400), rxe_ib_mtu(2128)), (1024, 4096, 1024, 2048));
}

/// ibv_query_port(3): the port's active MTU is what rxe would report for the smallest
/// link behind the GID table (every interface that is up, is not a loopback and holds
/// a GID), 4096 with none; `max_mtu` is 4096. Computed here from /sys/class/net (index,
/// flags, MTU of each interface), not from the library's own reading.
#[test]
fn active_mtu_is_the_smallest_link_behind_the_gid_table() {
    let ctx = open();
    let p = ctx.query_port(1).unwrap();
    let read = |dir: &std::path::Path, f: &str| std::fs::read_to_string(dir.join(f)).unwrap().trim().to_string();
    let mut links = std::collections::HashMap::new();
    for e in std::fs::read_dir("/sys/class/net").unwrap() {
        let dir = e.unwrap().path();
        let index: u32 = read(&dir, "ifindex").parse().unwrap();
        let flags = u32::from_str_radix(read(&dir, "flags").trim_start_matches("0x"), 16).unwrap();
        let mtu: u32 = read(&dir, "mtu").parse().unwrap();
        links.insert(index, (dir, flags, mtu));
    }
    let mut expected: Option<u32> = None;
    let mut behind = Vec::new();
    for g in ctx.query_gid_table() {
        let (dir, flags, mtu) = links
            .get(&g.ifindex)
            .unwrap_or_else(|| panic!("GID {} names interface {}, not in /sys/class/net", g.gid, g.ifindex));
        const IFF_UP: u32 = 0x1;
        const IFF_LOOPBACK: u32 = 0x8;
        if flags & IFF_UP == 0 || flags & IFF_LOOPBACK != 0 {
            continue;
        }
        behind.push(format!("{} (MTU {mtu})", dir.display()));
        expected = Some(expected.map_or(rxe_ib_mtu(*mtu), |m| m.min(rxe_ib_mtu(*mtu))));
    }
    let expected = expected.unwrap_or(4096);
    assert_eq!(p.active_mtu.bytes(), expected, "links behind the GID table: {behind:?}");
    assert_eq!(p.max_mtu, Mtu::Mtu4096);
    eprintln!("active_mtu {expected} from {behind:?}");
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

#[test]
fn gid_entry_of_finds_the_entry_of_each_address_of_the_host() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ctx = devices().unwrap()[0].open().unwrap();
    let table = ctx.query_gid_table();
    // Every IP entry of the table is found from its address, IPv4 as IPv4.
    for e in table.iter().filter(|e| e.index > 0) {
        let ip = e.gid.to_ip();
        assert_eq!(ctx.gid_entry_of(ip), Some(*e), "{ip}");
    }
    let lo = ctx.gid_entry_of(Ipv4Addr::LOCALHOST.into()).expect("127.0.0.1 has an entry");
    // The loopback net and the IPv4-mapped form name the same entry.
    assert_eq!(ctx.gid_entry_of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))), Some(lo));
    assert_eq!(ctx.gid_entry_of(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped())), Some(lo));
    assert_eq!(ctx.gid_entry_of(IpAddr::V6(Ipv6Addr::LOCALHOST)), Some(lo));
    // An address of no interface of this host has none.
    assert_eq!(ctx.gid_entry_of(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77))), None);
    assert_eq!(ctx.gid_entry_of(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x77))), None);
}
