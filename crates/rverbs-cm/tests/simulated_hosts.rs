//! rdma_cm between simulated hosts of one process (docs/connection-manager.md, "Several
//! devices"): two devices in runtime directories of their own, each serving one loopback
//! address (`rverbs::DeviceConfig::addresses`), are two hosts; a listener on one and a
//! QP of the other connect through each device's own connection manager, the MADs and
//! then the traffic crossing RoCEv2 over UDP, without root or a network namespace. An id
//! keeps the device of its channel.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use rverbs::*;
use rverbs_cm::{CmId, EventChannel, Listener, PortSpace};

const CAP: QpCap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
const WAIT: Duration = Duration::from_secs(10);

/// A fresh runtime directory of this test.
fn runtime_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rverbs-cm-hosts-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A simulated host: a device in a runtime directory of its own serving loopback
/// address `ip` only.
fn host(tag: &str, ip: [u8; 4]) -> (Device, PathBuf) {
    let dir = runtime_dir(tag);
    let dev = DeviceConfig::new().name(tag).runtime_dir(&dir).addresses(Some(vec![std::net::IpAddr::from(ip)])).open().unwrap();
    (dev, dir)
}

/// What one side of a connection needs: a context, a PD, a CQ, an RC QP and a region.
struct Side {
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    _pd: Pd,
}

fn side(dev: &Device) -> Side {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    Side { ctx, cq, qp, mr, _pd: pd }
}

/// The one completion of `cq`, within 10 s.
fn poll_one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default(); 1];
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        std::thread::yield_now();
    }
    panic!("no completion within 10 s");
}

#[test]
fn two_simulated_hosts_connect_through_their_own_connection_managers() {
    let (ha, dir_a) = host("cm-a", [127, 0, 3, 1]);
    let (hb, dir_b) = host("cm-b", [127, 0, 3, 2]);
    let listener = Listener::bind_on(&hb, "127.0.3.2:0".parse().unwrap(), 4).unwrap();
    let dst = listener.local_addr().unwrap();
    assert_eq!(dst.ip(), std::net::IpAddr::from([127, 0, 3, 2]));

    let server = std::thread::spawn(move || {
        let b = side(&hb);
        let req = listener.next_request(WAIT).unwrap();
        let from = req.peer_addr().unwrap();
        assert!(req.param().private_data.starts_with(b"from host a"));
        let conn = req
            .accept_with(b.qp.clone(), b"from host b", WAIT, |qp| {
                let sge = [b.mr.sge(0, 64).unwrap()];
                qp.post_recv(&[RecvWr::new(7, &sge)]).map_err(|e| rverbs_cm::Error::from(e.error))
            })
            .unwrap();
        let wc = poll_one(&b.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (7, WcStatus::Success, Some(20)));
        let mut got = [0u8; 20];
        b.mr.read(0, &mut got).unwrap();
        assert_eq!(&got, b"sent over rdma_cm...");
        let rcvd = b.ctx.counters().rcvd_pkts;
        conn.wait_disconnected(WAIT).unwrap();
        (from, rcvd)
    });

    let a = side(&ha);
    let sent_before = a.ctx.counters().sent_pkts;
    let conn = rverbs_cm::connect(dst, a.qp.clone(), b"from host a", WAIT).unwrap();
    assert!(conn.peer_private_data().starts_with(b"from host b"));
    a.mr.write(0, b"sent over rdma_cm...").unwrap();
    let sge = [a.mr.sge(0, 20).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    // The SEND crossed UDP from host a (the connection manager's MADs too).
    assert!(a.ctx.counters().sent_pkts > sent_before, "{:?}", a.ctx.counters());
    conn.disconnect().unwrap();
    let (from, rcvd) = server.join().unwrap();
    // The request came from host a's address, not the listed device's.
    assert_eq!(from.ip(), std::net::IpAddr::from([127, 0, 3, 1]));
    assert!(rcvd > 0);
    drop((conn, a));
    for d in [dir_a, dir_b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn an_id_keeps_the_device_of_its_channel() {
    let (h, dir) = host("cm-keep", [127, 0, 3, 5]);
    let ch = EventChannel::on(&h).unwrap();
    assert!(ch.device().is_some());
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    // It binds the address its device serves...
    id.bind_addr(SocketAddr::from(([127, 0, 3, 5], 0))).unwrap();
    // ...moves to no channel of another device...
    let listed = EventChannel::new().unwrap();
    let err = id.migrate(&listed).unwrap_err();
    assert!(matches!(err.rule(), Some(rverbs_cm::Rule::OtherDevice { .. })), "{err}");
    // ...and takes no QP of another device.
    let other = side(&devices().unwrap()[0]);
    let err = id.attach_qp(other.qp.clone()).unwrap_err();
    assert!(matches!(err.rule(), Some(rverbs_cm::Rule::OtherDevice { .. })), "{err}");
    assert!(id.qp().is_none());
    // A QP of its own device is attached.
    let own = side(&h);
    id.attach_qp(own.qp.clone()).unwrap();
    id.destroy().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_configured_device_does_not_bind_an_address_it_does_not_serve() {
    let (h, dir) = host("cm-foreign", [127, 0, 3, 7]);
    let ch = EventChannel::on(&h).unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    let err = id.bind_addr(SocketAddr::from(([127, 0, 3, 8], 0))).unwrap_err();
    assert_eq!(err.errno(), libc::EADDRNOTAVAIL, "{err}");
    id.destroy().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
