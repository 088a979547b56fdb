//! Two hosts in one process: RC over RoCEv2 on the loopback interface, without a second
//! machine, a network namespace or privilege.
//!
//! `rverbs::DeviceConfig` starts soft devices beside the listed one, each with settings
//! of its own. Two devices in runtime directories of their own are two hosts (devices
//! of one directory reach each other through shared memory; of two, only through the
//! network). Given their addresses (`DeviceConfig::addresses`), each serves exactly
//! those: here 127.0.9.1 and 127.0.9.2, which the kernel delivers locally without any
//! configuration. A QP of one reaches a QP of the other as a QP of another host does:
//! RoCEv2 packets in UDP datagrams to port 4791, acknowledged, retransmitted when lost.
//!
//! The example shows:
//! - each device's GID table: GID 0 and its one address;
//! - a SEND of 16 KiB (sixteen 1024-byte packets) and an RDMA READ of it back;
//! - the hardware counters of each device (`sent_pkts`, `rcvd_pkts`), which only the
//!   network moves;
//! - a third device with packet faults (one packet in three lost): the same SEND still
//!   arrives whole, through RC's retransmissions.
//!
//! Rules followed: ibv_query_gid(3) (RoCE v2 GIDs are the interface addresses, IPv4 as
//! IPv4-mapped IPv6), ibv_modify_qp(3) (RTR needs the path to the peer's GID), ibv_post_send(3),
//! ibv_poll_cq(3).
//!
//! Run: `cargo run -p rverbs --example two_hosts`

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{check_bytes, check_eq, ensure, expect_ok, pattern, Result, ALL_ACCESS, CAP, MR_LEN};
use rverbs::{Context, CqInit, Device, DeviceConfig, QpInit, QpType, RemotePath, SendWr, WcOpcode};

const LEN: usize = 16 * 1024;

/// A simulated host serving `ip` only, in a runtime directory of its own.
fn host(name: &str, ip: Ipv4Addr, faults: Option<&str>) -> Result<(Device, std::path::PathBuf)> {
    let dir = std::env::temp_dir().join(format!("rverbs-example-{name}-{}", std::process::id()));
    let faults = faults.map(rverbs_proto::fault::FaultConfig::parse).transpose()?;
    let dev = DeviceConfig::new()
        .name(name)
        .runtime_dir(&dir)
        .addresses(Some(vec![IpAddr::V4(ip)]))
        .net_faults(faults)
        .open()?;
    Ok((dev, dir))
}

/// A peer on `dev`: its context, a CQ, an RC QP and a registered region.
struct Peer {
    ctx: Context,
    cq: rverbs::Cq,
    qp: rverbs::Qp,
    mr: rverbs::Mr,
}

impl Peer {
    fn on(dev: &Device) -> Result<Peer> {
        let ctx = dev.open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(&CqInit::new(64))?;
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP))?;
        let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
        Ok(Peer { ctx, cq, qp, mr })
    }
}

/// Connects `a` and `b` to each other over their hosts' addresses (GID index 1).
fn connect(a: &Peer, b: &Peer) -> Result {
    for (x, y) in [(a, b), (b, a)] {
        let dgid = y.ctx.query_gid(1, 1)?;
        x.qp.connect(&RemotePath { access: ALL_ACCESS, ..RemotePath::new(dgid, 1, y.qp.qp_num()) })?;
    }
    Ok(())
}

/// A SEND of `LEN` bytes from `a` to `b`, then an RDMA READ of `b`'s copy back into `a`.
fn send_and_read_back(a: &Peer, b: &Peer, seed: u8) -> Result {
    let data = pattern(LEN, seed);
    a.mr.write(0, &data)?;
    let recv = [b.mr.sge(0, LEN as u32)?];
    b.qp.post_recv(&[rverbs::RecvWr::new(7, &recv)])?;
    let sge = [a.mr.sge(0, LEN as u32)?];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()])?;
    expect_ok(&a.cq, 1, WcOpcode::Send)?;
    let wc = expect_ok(&b.cq, 7, WcOpcode::Recv)?;
    check_eq("bytes received", wc.byte_len(), Some(LEN as u32))?;
    check_bytes("the receiver's buffer", &b.mr, 0, &data)?;
    let back = [a.mr.sge(LEN, LEN as u32)?];
    a.qp.post_send(&[SendWr::read(2, &back, b.mr.iova(), b.mr.rkey()).signaled()])?;
    expect_ok(&a.cq, 2, WcOpcode::RdmaRead)?;
    check_bytes("what the READ brought back", &a.mr, LEN, &data)
}

fn main() -> Result {
    let (ha, dir_a) = host("host-a", Ipv4Addr::new(127, 0, 9, 1), None)?;
    let (hb, dir_b) = host("host-b", Ipv4Addr::new(127, 0, 9, 2), None)?;
    let (a, b) = (Peer::on(&ha)?, Peer::on(&hb)?);
    for p in [&a, &b] {
        let table = p.ctx.query_gid_table();
        println!("{}: GID table {:?}", p.ctx.device_name(), table.iter().map(|e| e.gid.to_string()).collect::<Vec<_>>());
        check_eq("GID entries (GID 0 and the one address)", table.len(), 2)?;
    }
    connect(&a, &b)?;
    let (sent, rcvd) = (a.ctx.counters().sent_pkts, b.ctx.counters().rcvd_pkts);
    send_and_read_back(&a, &b, 3)?;
    let (sent, rcvd) = (a.ctx.counters().sent_pkts - sent, b.ctx.counters().rcvd_pkts - rcvd);
    println!("host-a sent {sent} packets, host-b received {rcvd}: 16 KiB in 1024-byte packets, and the READ");
    ensure(sent >= 16 && rcvd >= 16, || format!("the SEND crossed the network: sent {sent}, received {rcvd}"))?;

    // A third host whose every third packet is lost on the way out.
    let (hc, dir_c) = host("host-c", Ipv4Addr::new(127, 0, 9, 3), Some("seed=9,drop=33%"))?;
    let c = Peer::on(&hc)?;
    let b2 = Peer::on(&hb)?;
    connect(&c, &b2)?;
    send_and_read_back(&c, &b2, 5)?;
    let retried = c.ctx.counters().completer_retry_err;
    println!("host-c (33 % of its packets lost): the SEND and the READ arrived whole, {retried} retransmission(s)");
    ensure(retried > 0, || "packets were lost, so the requester must have retransmitted".into())?;

    drop((a, b, c, b2));
    for d in [dir_a, dir_b, dir_c] {
        let _ = std::fs::remove_dir_all(d);
    }
    println!("two_hosts: ok");
    Ok(())
}
