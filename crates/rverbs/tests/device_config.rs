//! Several devices in one process (issue 23, `DeviceConfig`; docs/device.md, "Several
//! devices in one process"): each configured device is an endpoint of its own with its
//! own settings, beside the device `devices()` lists.

mod common;

use common::{ALL_ACCESS, CAP, MR_LEN, PATH};
use rverbs::*;

/// One side of a connection on device `dev`.
fn side_on(dev: &Device) -> common::Side {
    let ctx = dev.open().expect("open the device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    common::Side { ctx, pd, cq, qp, mr }
}

/// A fresh runtime directory of this test.
fn runtime_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rverbs-devcfg-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn one_mapping_of(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find(|l| {
            let (a, b) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
            let (a, b) = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
            a <= addr && addr < b
        })
        .expect("the buffer is mapped")
        .to_owned()
}

#[test]
fn two_devices_of_one_runtime_directory_reach_each_other_and_count_apart() {
    let listed = devices().unwrap()[0];
    let second = DeviceConfig::from_env().open().expect("a second device");
    assert_eq!(second.config().runtime_dir_path(), listed.config().runtime_dir_path());
    let (dir_a, dir_b) = (listed.endpoint_dir().unwrap(), second.endpoint_dir().unwrap());
    assert_ne!(dir_a, dir_b, "each device has an endpoint of its own");
    assert_eq!(dir_a.parent(), dir_b.parent());

    let a = side_on(&listed);
    let b = side_on(&second);
    assert_ne!(a.qp.qp_num() >> 16, b.qp.qp_num() >> 16, "QP numbers carry their endpoint");
    common::connect(&a, &b, &PATH);
    let (sends_a, sends_b) = (a.ctx.counters().rdma_sends, b.ctx.counters().rdma_sends);

    // SEND from the listed device to the second one.
    b.mr.write(0, b"to the second device").unwrap();
    common::post_recv(&b, 7, 4096, 64);
    a.mr.write(0, b"from the listed one!").unwrap();
    let sge = [a.mr.sge(0, 20).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(common::poll_one(&a.cq).status(), WcStatus::Success);
    let wc = common::poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (7, WcStatus::Success, Some(20)));
    let mut got = [0u8; 20];
    b.mr.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"from the listed one!");

    // An RDMA WRITE the other way, into the listed device's region.
    let sge = [b.mr.sge(0, 20).unwrap()];
    b.qp.post_send(&[SendWr::write(2, &sge, a.mr.addr() as u64 + 8192, a.mr.rkey()).signaled()]).unwrap();
    assert_eq!(common::poll_one(&b.cq).status(), WcStatus::Success);
    a.mr.read(8192, &mut got).unwrap();
    assert_eq!(&got, b"to the second device");

    // Each device counts in its own endpoint's segment (on one host the requester counts
    // both ends, docs/device.md, "Hardware counters"): the SEND in the listed device's.
    assert_eq!(a.ctx.counters().rdma_sends, sends_a + 1);
    assert_eq!(b.ctx.counters().rdma_sends, sends_b, "the second device sent no SEND");
    // Both endpoints are live in the runtime directory.
    let live: Vec<u32> = second.host_counters().iter().map(|e| e.ep).collect();
    for qp in [&a.qp, &b.qp] {
        assert!(live.contains(&(qp.qp_num() >> 16)), "endpoint of QP {:#x} not in {live:?}", qp.qp_num());
    }
}

#[test]
fn a_device_in_its_own_runtime_directory_is_a_host_of_its_own() {
    let dir = runtime_dir("own");
    let dev = DeviceConfig::new().name("rverbs-own").runtime_dir(&dir).net(false).open().unwrap();
    assert_eq!(dev.name(), "rverbs-own");
    let ep_dir = dev.endpoint_dir().unwrap();
    assert!(ep_dir.starts_with(&dir), "{} is not under {}", ep_dir.display(), dir.display());
    let ctx = dev.open().unwrap();
    assert_eq!(ctx.device_name(), "rverbs-own");
    let pid = std::process::id();
    let own: Vec<_> = dev.host_counters().into_iter().map(|e| (e.ep, e.pid)).collect();
    assert_eq!(own.len(), 1, "only this device's endpoint lives there: {own:?}");
    assert_eq!(own[0].1, pid);
    // The listed device's directory does not hold it.
    let listed = devices().unwrap()[0];
    assert!(!listed.endpoint_dir().unwrap().starts_with(&dir));
    // Loopback traffic between two QPs of the device.
    let a = side_on(&dev);
    let b = side_on(&dev);
    common::connect(&a, &b, &PATH);
    common::send_one(&a, &b, 11);
    assert_eq!(common::poll_one(&b.cq).wr_id(), 11);
    drop((a, b, ctx));
    // The device lives on (as long as the process); this test's directory goes now.
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_device_shares_caller_memory_as_its_settings_say() {
    let never = DeviceConfig::from_env().shared_mr(Some(false)).open().unwrap();
    let always = DeviceConfig::from_env().shared_mr(Some(true)).open().unwrap();
    let page = 4096;
    for (dev, shared) in [(never, false), (always, true)] {
        let pd = dev.open().unwrap().alloc_pd().unwrap();
        let buf = common::map(4, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: `buf` is 4 mapped pages this test owns and touches only through the MR
        // until it is deregistered.
        let mr = unsafe { pd.reg_mr(buf, 4 * page, ALL_ACCESS) }.unwrap();
        let line = one_mapping_of(buf as usize + page);
        let ep_dir = dev.endpoint_dir().unwrap();
        assert_eq!(line.contains(ep_dir.to_str().unwrap()), shared, "shared_mr {shared}: {line}");
        drop(mr);
        common::unmap(buf, 4);
    }
}

#[test]
fn a_runtime_directory_that_cannot_be_made_is_an_error_for_a_configured_device() {
    let err = DeviceConfig::new().runtime_dir("/proc/self/no-such-dir/rverbs").open().unwrap_err();
    assert!(err.errno() != 0, "{err}");
}

/// A simulated host: a device in a runtime directory of its own serving loopback address
/// `ip` only, so that what reaches it from another such device crosses UDP.
/// Tests run at once, each in a process of its own: each test takes addresses no other
/// test uses (127.0.1.x, 127.0.2.x, 127.0.4.x here; 127.0.3.x in rverbs-cm), since two
/// runtime directories serving one address are two hosts claiming one IP and the port's
/// owner cannot deliver to the other's QPs.
fn host(tag: &str, ip: [u8; 4]) -> (Device, std::path::PathBuf) {
    let dir = runtime_dir(tag);
    let addr = std::net::IpAddr::from(ip);
    let dev = DeviceConfig::new().name(tag).runtime_dir(&dir).addresses(Some(vec![addr])).open().unwrap();
    (dev, dir)
}

/// Connects `a` to `b` (RC) over their GIDs at index 1, with ACK timeout code `timeout`
/// and `retry_cnt` retries.
fn connect_hosts(a: &common::Side, b: &common::Side, timeout: u8, retry_cnt: u8) {
    for (x, y) in [(a, b), (b, a)] {
        let dgid = y.ctx.query_gid(1, 1).unwrap();
        let path = RemotePath { access: ALL_ACCESS, timeout, retry_cnt, ..RemotePath::new(dgid, 1, y.qp.qp_num()) };
        x.qp.connect(&path).unwrap();
    }
}

#[test]
fn two_hosts_in_one_process_talk_rocev2_over_the_loopback() {
    let (ha, dir_a) = host("host-a", [127, 0, 1, 1]);
    let (hb, dir_b) = host("host-b", [127, 0, 1, 2]);
    let a = side_on(&ha);
    let b = side_on(&hb);
    // Each serves its own address and not the other's.
    let gid_a = a.ctx.query_gid(1, 1).unwrap();
    assert_eq!(gid_a.to_ipv4(), Some(std::net::Ipv4Addr::new(127, 0, 1, 1)));
    assert_eq!(a.ctx.query_gid_table().len(), 2, "GID 0 and the served address");
    assert!(b.ctx.gid_entry_of("127.0.1.1".parse().unwrap()).is_none());
    assert_eq!(b.ctx.gid_entry_of("127.0.1.2".parse().unwrap()).map(|e| e.index), Some(1));
    connect_hosts(&a, &b, 14, 7);

    let (sent_a, rcvd_b) = (a.ctx.counters().sent_pkts, b.ctx.counters().rcvd_pkts);
    b.mr.write(0, b"written by host b...").unwrap();
    common::post_recv(&b, 3, 4096, 4096);
    a.mr.write(0, b"sent by host a, 4 KiB").unwrap();
    let sge = [a.mr.sge(0, 4096).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    let wc = common::poll_one(&a.cq);
    assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
    let wc = common::poll_one(&b.cq);
    assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (3, WcStatus::Success, Some(4096)));
    let mut got = [0u8; 21];
    b.mr.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"sent by host a, 4 KiB");
    // An RDMA READ of host b's region from host a.
    let sge = [a.mr.sge(8192, 20).unwrap()];
    a.qp.post_send(&[SendWr::read(2, &sge, b.mr.addr() as u64, b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(common::poll_one(&a.cq).status(), WcStatus::Success);
    let mut got = [0u8; 20];
    a.mr.read(8192, &mut got).unwrap();
    assert_eq!(&got, b"written by host b...");
    // It crossed the network: four 1024-byte packets at least left host a and reached b.
    assert!(a.ctx.counters().sent_pkts >= sent_a + 4, "{:?}", a.ctx.counters());
    assert!(b.ctx.counters().rcvd_pkts >= rcvd_b + 4, "{:?}", b.ctx.counters());
    drop((a, b));
    for d in [dir_a, dir_b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The network link remembers the last keys of this process it checked
/// (docs/shared-state.md, "Remembered keys"): the requester's local key, at hand-over, at
/// gather and when a READ response is placed; the responder's remote key and receive key.
/// After traffic through the same keys between two hosts, each change of a region takes
/// effect at the next request, as on one host: a local key moved to another PD is
/// LOC_PROT_ERR; a remote key that lost REMOTE_WRITE is REM_ACCESS_ERR; a receive region,
/// a WRITE target and a READ's local region moved to new buffers take the next SEND, WRITE
/// and READ there, the old buffers untouched; a deregistered remote key grants nothing.
#[test]
fn keys_remembered_across_hosts_are_checked_again_after_each_change() {
    use common::poll_one;
    let (ha, dir_a) = host("memo-a", [127, 0, 4, 1]);
    let (hb, dir_b) = host("memo-b", [127, 0, 4, 2]);
    let connected = || {
        let (a, b) = (side_on(&ha), side_on(&hb));
        connect_hosts(&a, &b, 14, 7);
        (a, b)
    };
    let write = |a: &common::Side, id: u64, sge: &[Sge], iova: u64, rkey: u32| {
        a.qp.post_send(&[SendWr::write(id, sge, iova, rkey).signaled()]).unwrap();
        poll_one(&a.cq).status()
    };

    // The local key moves to another PD.
    let (a, b) = connected();
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [src.sge(0, 8).unwrap()];
    for id in 0..4 {
        assert_eq!(write(&a, id, &sge, b.mr.iova(), b.mr.rkey()), WcStatus::Success);
    }
    let other = a.ctx.alloc_pd().unwrap();
    src.rereg(ReregFlags::PD, Some(&other), None).unwrap();
    assert_eq!(write(&a, 9, &sge, b.mr.iova(), b.mr.rkey()), WcStatus::LocProtErr);
    src.dereg().unwrap();

    // The remote key loses REMOTE_WRITE.
    let (a, b) = connected();
    let dst = b.pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let sge = [a.mr.sge(0, 8).unwrap()];
    for id in 0..4 {
        assert_eq!(write(&a, id, &sge, dst.iova(), dst.rkey()), WcStatus::Success);
    }
    dst.rereg(ReregFlags::ACCESS, None, Some(Access::LOCAL_WRITE)).unwrap();
    assert_eq!(write(&a, 9, &sge, dst.iova(), dst.rkey()), WcStatus::RemAccessErr);

    // A receive region, a WRITE target and a READ's local region move.
    let (a, b) = connected();
    let (mut recv_old, mut dst_old, mut into_old) = (vec![0u8; 64], vec![0u8; 64], vec![0u8; 64]);
    // SAFETY: the three buffers outlive their regions (deregistered below).
    let recv = unsafe { b.pd.reg_mr(recv_old.as_mut_ptr(), 64, ALL_ACCESS) }.unwrap();
    // SAFETY: as above.
    let dst = unsafe { b.pd.reg_mr(dst_old.as_mut_ptr(), 64, ALL_ACCESS) }.unwrap();
    // SAFETY: as above.
    let into = unsafe { a.pd.reg_mr(into_old.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    a.mr.write(0, b"12345678").unwrap();
    b.mr.write(0, b"abcdefgh").unwrap();
    let traffic = |id: u64| {
        b.qp.post_recv(&[RecvWr::new(id, &[recv.sge(0, 8).unwrap()])]).unwrap();
        let sge = [a.mr.sge(0, 8).unwrap()];
        a.qp.post_send(&[SendWr::send(id, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
        assert_eq!(write(&a, id, &sge, dst.iova(), dst.rkey()), WcStatus::Success);
        let sge = [into.sge(0, 8).unwrap()];
        a.qp.post_send(&[SendWr::read(id, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    };
    for id in 0..4 {
        traffic(id);
    }
    let keys = (recv.lkey(), dst.rkey(), into.lkey());
    let (mut recv_new, mut dst_new, mut into_new) = (vec![0u8; 64], vec![0u8; 64], vec![0u8; 64]);
    // SAFETY: the new buffers outlive the regions (deregistered below).
    unsafe {
        recv.rereg_translation(ReregFlags::TRANSLATION, recv_new.as_mut_ptr(), 64, None, None).unwrap();
        dst.rereg_translation(ReregFlags::TRANSLATION, dst_new.as_mut_ptr(), 64, None, None).unwrap();
        into.rereg_translation(ReregFlags::TRANSLATION, into_new.as_mut_ptr(), 64, None, None).unwrap();
    }
    assert_eq!((recv.lkey(), dst.rkey(), into.lkey()), keys, "the keys stay");
    for old in [&mut recv_old, &mut dst_old, &mut into_old] {
        old.fill(0);
    }
    traffic(9);
    assert_eq!((&recv_new[..8], &dst_new[..8], &into_new[..8]), (&b"12345678"[..], &b"12345678"[..], &b"abcdefgh"[..]));
    assert!([&recv_old, &dst_old, &into_old].iter().all(|old| old.iter().all(|&x| x == 0)), "no old buffer is written");

    // A deregistered remote key grants nothing.
    let (rkey, iova) = (dst.rkey(), dst.iova());
    dst.dereg().unwrap();
    assert_eq!(write(&a, 10, &[a.mr.sge(0, 8).unwrap()], iova, rkey), WcStatus::RemAccessErr);
    for m in [recv, into] {
        m.dereg().unwrap();
    }
    drop((a, b, recv_old, dst_old, into_old, recv_new, dst_new, into_new));
    for d in [dir_a, dir_b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn packet_faults_of_one_device_leave_another_alone() {
    let (hb, dir_b) = host("host-fb", [127, 0, 2, 2]);
    let lossy = DeviceConfig::new()
        .runtime_dir(runtime_dir("host-fa"))
        .addresses(Some(vec!["127.0.2.1".parse().unwrap()]))
        .net_faults(Some(rverbs_proto::fault::FaultConfig::parse("drop=100%").unwrap()))
        .open()
        .unwrap();
    let (clean, dir_c) = host("host-fc", [127, 0, 2, 3]);
    let b1 = side_on(&hb);
    let b2 = side_on(&hb);
    let (l, c) = (side_on(&lossy), side_on(&clean));
    // Every packet of the lossy device is lost: its request fails after one retry of a
    // 1 ms timeout; the clean one has pyverbs' patience (67 ms, 7 retries).
    connect_hosts(&l, &b1, 8, 1);
    connect_hosts(&c, &b2, 14, 7);
    for (s, r, want) in [(&c, &b2, WcStatus::Success), (&l, &b1, WcStatus::RetryExcErr)] {
        common::post_recv(r, 5, 0, 64);
        let sge = [s.mr.sge(0, 8).unwrap()];
        s.qp.post_send(&[SendWr::send(6, &sge).signaled()]).unwrap();
        let wc = common::poll_one(&s.cq);
        assert_eq!(wc.status(), want, "{wc:?}");
    }
    drop((l, c, b1, b2));
    for d in [dir_b, dir_c, lossy.config().runtime_dir_path().to_owned()] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_fault_plan_of_one_device_leaves_the_others_alone() {
    use rverbs_proto::verb_fault::VerbPlan;
    let plan = VerbPlan::parse("fail=alloc_pd:ENOMEM,event=PORT_ERR:on=open_device").unwrap();
    let faulty = DeviceConfig::from_env().fault_plan(Some(plan)).open().unwrap();
    let listed = devices().unwrap()[0];
    let (f, l) = (faulty.open().unwrap(), listed.open().unwrap());
    // The event the plan raised at the faulty device's open took its port down only.
    assert_eq!(f.query_port(1).unwrap().state, PortState::Down);
    assert_eq!(l.query_port(1).unwrap().state, PortState::Active);
    assert_eq!(f.alloc_pd().unwrap_err().errno(), libc::ENOMEM, "the faulty device's plan");
    l.alloc_pd().expect("the listed device has no plan");
    let injected = rverbs::fault_plan::take_injected();
    assert_eq!(injected.len(), 2, "{injected:?}");
}

#[test]
fn a_device_configuration_switches_the_processs_sanitizer_on() {
    use rverbs::sanitize::{self, FindingKind, Mode};
    let dev = DeviceConfig::from_env().sanitize(Some(Mode::Report)).open().unwrap();
    assert_eq!(sanitize::mode(), Mode::Report);
    // It checks: a CQ of 4 entries under a QP of 16 receives is found at the first post.
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(4)).unwrap();
    let cap = QpCap { max_send_wr: 1, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    common::to_init(&qp, Access::LOCAL_WRITE);
    let sge = [mr.sge(0, 8).unwrap()];
    qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
    let found = sanitize::take_findings();
    assert!(found.iter().any(|f| f.kind == FindingKind::CqTooSmall), "{found:#?}");
}

#[test]
fn addresses_a_device_cannot_serve_are_refused_and_leave_no_endpoint() {
    let dir = runtime_dir("bad-addresses");
    let none = DeviceConfig::new().runtime_dir(&dir).addresses(Some(vec![])).open().unwrap_err();
    assert!(matches!(none, Error::Invalid { rule: Rule::NoAddresses, .. }), "{none:?}");
    // An address no interface of the host holds (TEST-NET-3, RFC 5737), not a loopback one.
    let foreign = DeviceConfig::new().runtime_dir(&dir).addresses(Some(vec!["203.0.113.7".parse().unwrap()])).open().unwrap_err();
    assert_eq!(foreign.errno(), libc::EADDRNOTAVAIL, "{foreign:?}");
    // Neither claimed an endpoint there.
    assert!(!dir.exists() || std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with("ep-")));
    let _ = std::fs::remove_dir_all(&dir);
}
