//! Multicast joins (rdma_join_multicast(3), rdma_join_multicast_ex(3),
//! rdma_leave_multicast(3)) as the kernel's rdma_cm gives them on RoCE v2: who may join,
//! the MULTICAST_JOIN event, the QP attached to the group, leave and destroy.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs::*;
use rverbs_cm::{CmId, Event, EventChannel, EventKind, JoinFlag, PortSpace, RDMA_UDP_QKEY};

const CAP: QpCap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };

fn next(ch: &EventChannel) -> Event {
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
    let ts = rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 };
    assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1, "no event within 10 s");
    ch.try_get_event().expect("readable channel has an event")
}

/// Resolves the loopback from 127.0.0.1, which attaches rverbs0 to `id`.
fn on_loopback(ch: &EventChannel, id: &CmId) {
    id.resolve_addr(Some("127.0.0.1:0".parse().unwrap()), "127.0.0.1:9".parse().unwrap(), 2000).unwrap();
    expect(ch, EventKind::AddrResolved);
    assert!(id.has_device());
}

fn expect(ch: &EventChannel, kind: EventKind) -> Event {
    let ev = next(ch);
    assert_eq!(ev.kind, kind, "unexpected event {ev:?}");
    ev
}

/// A group address of this process only (groups are host-wide): 239.x.y.z from the pid.
fn group(salt: u8) -> SocketAddr {
    let p = std::process::id().to_be_bytes();
    SocketAddr::new(std::net::Ipv4Addr::new(239, p[2] ^ salt, p[3], 17).into(), 0)
}

fn mgid(addr: SocketAddr) -> Gid {
    let std::net::IpAddr::V4(v4) = addr.ip() else { unreachable!() };
    Gid::from_ipv4(v4)
}

struct Member {
    ch: EventChannel,
    id: CmId,
    qp: Qp,
    cq: Cq,
    pd: Pd,
    mr: Mr,
}

/// A UD id with rverbs0 attached through the loopback and a QP (RTS). An id only bound
/// to 127.0.0.1 has no device (as in the kernel); resolving the loopback attaches one.
fn member() -> Member {
    let ctx = devices().unwrap()[0].open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Ud, &cq, CAP)).unwrap();
    let mr = pd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    on_loopback(&ch, &id);
    id.attach_qp(qp.clone()).unwrap();
    Member { ch, id, qp, cq, pd, mr }
}

fn poll(cq: &Cq, within: Duration) -> Option<Wc> {
    let deadline = Instant::now() + within;
    let mut wc = [Wc::default(); 1];
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return Some(wc[0]);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::yield_now();
    }
}

/// Sends 8 bytes from `m` to the group the join event `ud` describes.
fn send(m: &Member, ud: &rverbs_cm::UdParam) {
    let ah = Ah::new(&m.pd, &ud.ah_attr).unwrap();
    let sge = [m.mr.sge(4096, 8).unwrap()];
    m.qp.post_send(&[SendWr::send(77, &sge).ud(&ah, ud.qp_num, ud.qkey).signaled()]).unwrap();
    loop {
        let wc = poll(&m.cq, Duration::from_secs(10)).expect("send completion");
        if wc.wr_id() == 77 {
            assert_eq!(wc.status(), WcStatus::Success);
            return;
        }
    }
}

fn post_recv(m: &Member, wr_id: u64) {
    let sge = [m.mr.sge(0, 2048).unwrap()];
    m.qp.post_recv(&[RecvWr::new(wr_id, &sge)]).unwrap();
}

#[test]
fn who_may_join() {
    let ch = EventChannel::new().unwrap();
    let g = group(1);
    let unbound = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    assert_eq!(unbound.join_multicast(g, JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EINVAL, "no device");
    let wild = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    wild.bind_addr("0.0.0.0:0".parse().unwrap()).unwrap();
    assert_eq!(wild.join_multicast(g, JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EINVAL, "bound to a wildcard");
    let rc = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    rc.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(rc.join_multicast(g, JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EINVAL, "not UD");
    let lo = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    lo.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(lo.join_multicast(g, JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EINVAL, "bound to loopback: no device");
    let ud = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    on_loopback(&ch, &ud);
    let zero: SocketAddr = "0.0.0.0:0".parse().unwrap();
    assert_eq!(ud.join_multicast(zero, JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EINVAL, "0.0.0.0");
    let v6: SocketAddr = "[ff0e::1]:0".parse().unwrap();
    assert_eq!(ud.join_multicast(v6, JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EOPNOTSUPP, "IPv6 on RoCE v2");
    assert_eq!(ud.leave_multicast(g).unwrap_err().errno(), libc::EADDRNOTAVAIL, "not joined");
    // Route resolved: too late (the kernel accepts ADDR_BOUND and ADDR_RESOLVED only).
    let r = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    r.resolve_addr(Some("127.0.0.1:0".parse().unwrap()), SocketAddr::new(g.ip(), 0), 2000).unwrap();
    expect(&ch, EventKind::AddrResolved);
    r.join_multicast(g, JoinFlag::FullMember, 5).unwrap();
    assert_eq!(expect(&ch, EventKind::MulticastJoin).mc_context, 5, "address-resolved ids join");
    r.resolve_route(2000).unwrap();
    expect(&ch, EventKind::RouteResolved);
    assert_eq!(r.join_multicast(group(2), JoinFlag::FullMember, 0).unwrap_err().errno(), libc::EINVAL);
    assert!(ch.try_get_event().is_none(), "a refused join queues nothing");
    for id in [unbound, wild, rc, ud, r] {
        id.destroy().unwrap();
    }
}

#[test]
fn a_join_attaches_the_qp_and_reports_the_group_address_vector() {
    let (a, b) = (member(), member());
    let g = group(3);
    b.id.join_multicast(g, JoinFlag::FullMember, 0xb0b).unwrap();
    let ev = expect(&b.ch, EventKind::MulticastJoin);
    assert_eq!((ev.status, ev.mc_context, ev.id.number()), (0, 0xb0b, b.id.number()));
    assert_eq!((ev.ud.qp_num, ev.ud.qkey), (0xff_ffff, RDMA_UDP_QKEY));
    assert!(ev.ud.private_data.is_empty());
    let grh = ev.ud.ah_attr.grh.expect("a GRH");
    assert_eq!(grh.dgid, mgid(g), "the IPv4-mapped group address");
    assert_eq!((grh.sgid_index, grh.hop_limit, grh.traffic_class), (b.id.route().unwrap().sgid_index, 64, 0));
    assert_eq!((ev.ud.ah_attr.port_num, ev.ud.ah_attr.dlid, ev.ud.ah_attr.sl), (1, 0, 0));
    drop(ev);

    // A send-only join attaches nothing but gives the same address vector to send with.
    a.id.join_multicast(g, JoinFlag::SendOnlyFullMember, 0xa).unwrap();
    let ev = expect(&a.ch, EventKind::MulticastJoin);
    post_recv(&a, 1);
    post_recv(&b, 2);
    send(&a, &ev.ud);
    let wc = poll(&b.cq, Duration::from_secs(10)).expect("the member received");
    assert_eq!((wc.wr_id(), wc.status(), wc.src_qp()), (2, WcStatus::Success, Some(a.qp.qp_num())));
    assert!(poll(&a.cq, Duration::ZERO).is_none(), "the send-only member is not attached");

    // Leave: detached, no event.
    b.id.leave_multicast(g).unwrap();
    assert_eq!(b.id.leave_multicast(g).unwrap_err().errno(), libc::EADDRNOTAVAIL);
    send(&a, &ev.ud);
    assert!(poll(&b.cq, Duration::from_millis(50)).is_none(), "a member that left receives nothing");
    assert!(b.ch.try_get_event().is_none(), "leave queues no event");
    drop(ev);
    for m in [a, b] {
        m.id.destroy().unwrap();
    }
}

#[test]
fn leave_discards_the_unretrieved_join_event_and_destroy_leaves_every_group() {
    let m = member();
    let (g1, g2) = (group(4), group(5));
    m.id.join_multicast(g1, JoinFlag::FullMember, 1).unwrap();
    // Let the engine thread queue the event, then leave before retrieving it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rustix::event::poll(
        &mut [rustix::event::PollFd::from_borrowed_fd(m.ch.fd(), rustix::event::PollFlags::IN)],
        Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 }),
    )
    .is_ok_and(|n| n == 1)
    {
        assert!(Instant::now() < deadline);
        std::thread::yield_now();
    }
    m.id.leave_multicast(g1).unwrap();
    assert!(m.ch.try_get_event().is_none(), "the join's event went with it");

    m.id.join_multicast(g2, JoinFlag::FullMember, 2).unwrap();
    drop(expect(&m.ch, EventKind::MulticastJoin));
    assert_eq!(m.qp.destroy().unwrap_err().errno(), libc::EBUSY, "attached to g2");
    m.id.destroy().unwrap();
    m.qp.destroy().expect("destroying the id left the group");
}

#[test]
fn a_qp_that_cannot_attach_gives_multicast_error() {
    let m = member();
    // Not a multicast address: the join is accepted (as the kernel does) but the QP
    // cannot attach to a unicast GID.
    let not_mc: SocketAddr = "10.1.2.3:0".parse().unwrap();
    m.id.join_multicast(not_mc, JoinFlag::FullMember, 9).unwrap();
    let ev = expect(&m.ch, EventKind::MulticastError);
    assert_eq!((ev.status, ev.mc_context), (-libc::EINVAL, 9));
    drop(ev);
    m.id.leave_multicast(not_mc).unwrap();
    m.id.destroy().unwrap();
}

/// `cm_wait_mcast` of tests/conformance/lib/cm.bash (how the conformance scripts know a
/// receiver joined) reads the device's host-wide record of this join: exit 0 while a
/// live process's QP is attached to the group, 1 after the timeout, 2 on bad arguments.
#[test]
fn cm_wait_mcast_sees_the_members_of_a_group() {
    let cm_bash = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/lib/cm.bash");
    let m = member();
    let root = rverbs::endpoint_dir().parent().unwrap().to_owned();
    let g = group(6);
    let wait = |args: &str| {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("source '{}' && cm_wait_mcast {args}", cm_bash.display()))
            .env("RVERBS_RUNTIME_DIR", &root)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .code()
    };
    assert_eq!(wait(&format!("{} 0", g.ip())), Some(1), "nobody joined yet");
    m.id.join_multicast(g, JoinFlag::FullMember, 0).unwrap();
    drop(expect(&m.ch, EventKind::MulticastJoin));
    assert_eq!(wait(&format!("{} 5", g.ip())), Some(0));
    m.id.leave_multicast(g).unwrap();
    assert_eq!(wait(&format!("{} 0", g.ip())), Some(1), "left");
    assert_eq!(wait("ff0e::1"), Some(2));
    m.id.destroy().unwrap();
}
