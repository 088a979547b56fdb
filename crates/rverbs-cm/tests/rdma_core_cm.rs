//! rverbs-cm over librdmacm (feature `rdma-core`), run for real: the libibverbs and
//! librdmacm loaded are the ones `RVERBS_LIBIBVERBS` and `RVERBS_LIBRDMACM` name
//! (scripts/test.sh points them at the drop-ins of scripts/build-dropin.sh; without
//! `RVERBS_LIBRDMACM`, the `librdmacm.so.1` beside `RVERBS_LIBIBVERBS` is used), with
//! `RVERBS_BACKEND=rdma-core`, so `rverbs::devices()` lists libibverbs' devices, and the
//! public `rverbs_cm::{EventChannel, CmId, Event}`, the RAII helpers and (with the
//! feature `tokio`) the awaited helpers and the byte stream run over librdmacm.
//!
//! Each test fails unless the backend did the work: the device is the backend's, and the
//! drop-in's copy of the soft device is the only endpoint this process owns in the
//! runtime directory (the soft connection manager would have started the in-crate
//! device, a second one) and counted the requests. A missing library is a failure, never
//! a skip.
#![cfg(feature = "rdma-core")]
#![allow(dead_code)] // the example's helpers the tests do not all use

#[path = "../examples/echo.rs"]
mod echo;
#[cfg(feature = "tokio")]
#[path = "../examples/async_echo.rs"]
mod async_echo;
#[cfg(feature = "tokio")]
#[path = "../examples/stream_echo.rs"]
mod stream_echo;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs::{Access, Backend, Cq, CqInit, Mr, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, Wc, WcOpcode, WcStatus};
use rverbs_cm::{CmId, EventChannel, EventKind, PortSpace};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Taken by every test for its whole run: under `cargo test` the tests share one
/// process, and one of them installs a fault plan, which is process-wide.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Points the backends at the libraries to test and asks for the rdma-core backend;
/// every test of the binary sets the same values before anything loads (each test is a
/// process of its own under nextest). Returns the test's turn.
fn through_the_backend() -> std::sync::MutexGuard<'static, ()> {
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let verbs = std::env::var_os("RVERBS_LIBIBVERBS")
        .filter(|v| !v.is_empty())
        .expect("RVERBS_LIBIBVERBS names the libibverbs to test (scripts/test.sh: the drop-in of scripts/build-dropin.sh)");
    if std::env::var_os("RVERBS_LIBRDMACM").is_none_or(|v| v.is_empty()) {
        let dir = std::path::Path::new(&verbs).parent().expect("RVERBS_LIBIBVERBS is a path");
        std::env::set_var("RVERBS_LIBRDMACM", dir.join("librdmacm.so.1"));
    }
    std::env::set_var("RVERBS_BACKEND", "rdma-core");
    let devs = rverbs::devices().expect("libibverbs loads (RVERBS_LIBIBVERBS)");
    assert_eq!(devs.first().expect("libibverbs lists a device").backend(), Backend::RdmaCore);
    turn
}

/// This process's endpoints in the runtime directory and the requests they counted.
fn local_requests() -> (usize, u64) {
    let pid = std::process::id();
    let mine: Vec<_> = rverbs::host_counters().into_iter().filter(|e| e.pid == pid).collect();
    (mine.len(), mine.iter().map(|e| e.counters.local_requests).sum())
}

/// The backend did the work: one endpoint (the drop-in's), whose requests moved.
fn assert_backend_did_it(before: u64) {
    let (endpoints, after) = local_requests();
    assert_eq!(endpoints, 1, "one endpoint of this process: the drop-in's, not the in-crate device's");
    assert!(after > before, "the drop-in's device carried the requests ({before} → {after})");
}

#[test]
fn the_echo_example_runs_over_librdmacm() {
    let _turn = through_the_backend();
    let (_, before) = local_requests();
    echo::main().expect("the example's checks pass");
    assert_backend_did_it(before);
}

/// One end: a PD, a CQ, an RC QP and a registered buffer, on libibverbs' first device.
struct End {
    pd: Pd,
    cq: Cq,
    mr: Mr,
}

impl End {
    fn new() -> End {
        let ctx = rverbs::devices().unwrap()[0].open().unwrap();
        assert_eq!(ctx.backend(), Backend::RdmaCore);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
        let mr = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
        End { pd, cq, mr }
    }

    fn qp(&self) -> Qp {
        let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        self.pd.create_qp(&QpInit::new(QpType::Rc, &self.cq, cap)).unwrap()
    }

    /// The next completion within TIMEOUT (polled: the bound, not a synchronisation).
    fn next(&self) -> Wc {
        first_success(|wc| self.cq.poll(wc).unwrap())
    }
}

#[test]
fn private_data_and_a_send_cross_a_librdmacm_connection() {
    let _turn = through_the_backend();
    let (_, before) = local_requests();
    let listener = rverbs_cm::Listener::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
    let addr = listener.local_addr().expect("the listener has its address");
    assert_ne!(addr.port(), 0, "librdmacm chose a port");
    let server = std::thread::spawn(move || {
        let end = End::new();
        let req = listener.next_request(TIMEOUT).unwrap();
        assert!(req.param().private_data.starts_with(b"from the client"), "{:?}", req.param().private_data);
        assert_eq!(req.peer_addr().map(|a| a.ip()), Some(addr.ip()));
        let conn = req
            .accept_with(end.qp(), b"from the server", TIMEOUT, |qp| {
                let sge = [end.mr.sge(0, 64)?];
                qp.post_recv(&[RecvWr::new(7, &sge)])?;
                Ok(())
            })
            .unwrap();
        let wc = end.next();
        assert_eq!((wc.wr_id(), wc.opcode()), (7, Some(WcOpcode::Recv)));
        let mut got = vec![0; wc.byte_len().unwrap() as usize];
        end.mr.read(0, &mut got).unwrap();
        assert_eq!(got, b"a send over librdmacm");
        conn.wait_disconnected(TIMEOUT).unwrap();
    });
    let end = End::new();
    let conn = rverbs_cm::connect(addr, end.qp(), b"from the client", TIMEOUT).unwrap();
    assert!(conn.peer_private_data().starts_with(b"from the server"), "{:?}", conn.peer_private_data());
    end.mr.write(0, b"a send over librdmacm").unwrap();
    let sge = [end.mr.sge(0, 21).unwrap()];
    conn.qp().post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(end.next().wr_id(), 1);
    conn.disconnect().unwrap();
    assert_eq!(conn.qp().state(), rverbs::QpState::Err, "disconnecting moved the QP to ERR");
    server.join().unwrap();
    assert_backend_did_it(before);
}

#[test]
fn a_reject_over_librdmacm_reaches_the_client_with_its_errno() {
    let _turn = through_the_backend();
    // A device of the backend listens through librdmacm too (`bind_on`).
    let dev = rverbs::devices().unwrap()[0];
    let listener = rverbs_cm::Listener::bind_on(&dev, "127.0.0.1:0".parse().unwrap(), 0).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(TIMEOUT).unwrap();
        req.reject(b"not now").unwrap();
        // A request dropped unanswered is rejected too.
        drop(listener.next_request(TIMEOUT).unwrap());
    });
    let end = End::new();
    let err = rverbs_cm::connect(addr, end.qp(), b"may I", TIMEOUT).err().expect("the server rejected");
    assert_eq!(err.errno(), libc::ECONNREFUSED, "{err}");
    let end = End::new();
    let err = rverbs_cm::connect(addr, end.qp(), b"and now?", TIMEOUT).err().expect("the server dropped the request");
    assert_eq!(err.errno(), libc::ECONNREFUSED, "{err}");
    server.join().unwrap();
    let (endpoints, _) = local_requests();
    assert_eq!(endpoints, 1, "the soft connection manager never started");
}

#[test]
fn the_backend_event_loop_reports_ids_params_and_listen_ids() {
    let _turn = through_the_backend();
    let lch = EventChannel::new().unwrap();
    assert_eq!(lch.backend(), Backend::RdmaCore, "RVERBS_BACKEND=rdma-core: the public channel is librdmacm's");
    let listen = CmId::new(&lch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    assert_eq!(listen.backend(), Backend::RdmaCore);
    listen.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    listen.listen(1).unwrap();
    let addr: SocketAddr = listen.src_addr().unwrap();
    let cch = EventChannel::new().unwrap();
    let client = CmId::new(&cch, PortSpace::Tcp, QpType::Rc, 0x5eed).unwrap();
    assert_eq!(client.context(), 0x5eed);
    client.resolve_addr(None, addr, 2000).unwrap();
    let ev = cch.get_event().unwrap();
    assert_eq!((ev.kind, ev.status), (EventKind::AddrResolved, 0));
    assert!(ev.id == client, "the event names the client's id");
    drop(ev);
    assert!(client.has_device(), "resolving bound the id to a device");
    assert_eq!(client.route().unwrap_err().errno(), libc::EINVAL, "no path record before the route resolves");
    client.resolve_route(2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::RouteResolved);
    // The path record librdmacm resolved: both ends are this host's 127.0.0.1.
    let route = client.route().unwrap();
    let lo = rverbs_cm::addr::gid_of(addr.ip());
    assert_eq!((route.num_paths, route.sgid, route.dgid, route.pkey), (1, lo, lo, 0xffff));
    let ctx = client.verbs().unwrap();
    assert_eq!(Some(u32::from(route.sgid_index)), ctx.gid_entry_of(addr.ip()).map(|e| e.index), "the source GID's index");
    assert!(route.mtu as u32 >= rverbs::Mtu::Mtu1024 as u32, "a RoCE path MTU: {:?}", route.mtu);
    // No QP on either id: the client names a QP number, as an application managing its
    // own QP does; the server rejects, so no QP is needed.
    let param = rverbs_cm::ConnParam { private_data: b"low level".to_vec(), qp_num: 0x123, retry_count: 7, ..Default::default() };
    client.connect(&param).unwrap();
    let req = lch.get_event().unwrap();
    assert_eq!(req.kind, EventKind::ConnectRequest);
    assert!(req.listen_id.as_ref() == Some(&listen), "the request names its listener");
    assert!(req.id != listen, "and a new id");
    assert!(req.conn.private_data.starts_with(b"low level"));
    assert_eq!(req.conn.qp_num, 0x123, "the QP number the client named");
    req.id.reject(b"no").unwrap();
    let rej = cch.get_event().unwrap();
    assert_eq!(rej.kind, EventKind::Rejected);
    assert_eq!(rej.status, 28, "a consumer reject (IBTA reason 28)");
    assert!(rej.conn.private_data.starts_with(b"no"));
}

#[test]
fn what_librdmacm_cannot_carry_is_eopnotsupp() {
    let _turn = through_the_backend();
    let ch = EventChannel::new().unwrap();
    let err = CmId::new(&ch, PortSpace::Udp, QpType::Rc, 0).unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{err}");
    // A fault plan's rdma_cm failure cannot be injected into librdmacm: refused, not
    // ignored. Without the plan the same call goes through.
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    let dst: SocketAddr = "127.0.0.1:9".parse().unwrap();
    rverbs::fault_plan::install(rverbs::VerbPlan::parse("fail=resolve_addr:ETIMEDOUT").unwrap());
    let err = id.resolve_addr(None, dst, 1000).unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{err}");
    rverbs::fault_plan::install(rverbs::VerbPlan::default());
    id.resolve_addr(None, dst, 1000).unwrap();
    assert_eq!(ch.get_event().unwrap().kind, EventKind::AddrResolved);
    // The soft connection manager's extras, refused on librdmacm's id (not ignored).
    let eopnotsupp = |r: rverbs_cm::Result<()>, what: &str| {
        assert_eq!(r.expect_err(what).errno(), libc::EOPNOTSUPP, "{what}");
    };
    eopnotsupp(id.set_cm_timeout(10, 3), "set_cm_timeout");
    let end = End::new();
    eopnotsupp(id.attach_qp(end.qp()), "attach_qp of a QP made elsewhere");
    assert!(id.qp().is_none() && id.detach_qp().is_none(), "no QP is attached over librdmacm");
    // An id never moves to a channel of the other connection manager.
    let soft = EventChannel::on(&rverbs::devices_of(Backend::Soft).unwrap()[0]).unwrap();
    assert_eq!(soft.backend(), Backend::Soft);
    assert_eq!(id.migrate(&soft).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn options_and_ece_reach_librdmacm() {
    let _turn = through_the_backend();
    // rdma_set_option(3): accepted before binding; REUSEADDR refused once bound (EINVAL,
    // the manager's answer, not a local one).
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    id.set_tos(8).unwrap();
    id.set_ack_timeout(14).unwrap();
    id.set_reuseaddr(true).unwrap();
    id.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(id.set_reuseaddr(false).unwrap_err().errno(), libc::EINVAL, "REUSEADDR after binding");
    // ECE: the client's (vendor ID, options) reach the server's id, whose ECE reject
    // reaches the client as status 35.
    let lch = EventChannel::new().unwrap();
    let listen = CmId::new(&lch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    listen.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    listen.listen(1).unwrap();
    let cch = EventChannel::new().unwrap();
    let client = CmId::new(&cch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    client.resolve_addr(None, listen.src_addr().unwrap(), 2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::AddrResolved);
    client.resolve_route(2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::RouteResolved);
    client.set_local_ece(0x15b3, 0x1234).unwrap();
    client.connect(&rverbs_cm::ConnParam { qp_num: 0x321, retry_count: 7, ..Default::default() }).unwrap();
    let req = lch.get_event().unwrap();
    assert_eq!(req.kind, EventKind::ConnectRequest);
    assert_eq!(req.id.remote_ece().unwrap(), (0x15b3, 0x1234), "the REQ carried the client's ECE");
    req.id.reject_ece(b"no such options").unwrap();
    let rej = cch.get_event().unwrap();
    assert_eq!((rej.kind, rej.status), (EventKind::Rejected, 35), "IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED");
}

/// A UD id on a channel of its own, given the device by resolving the loopback, with a
/// QP librdmacm made on it (rdma_create_qp(3)) and a buffer.
struct UdMember {
    ch: EventChannel,
    id: CmId,
    pd: Pd,
    qp: Qp,
    cq: Cq,
    mr: Mr,
}

fn ud_member() -> UdMember {
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    id.resolve_addr(Some("127.0.0.1:0".parse().unwrap()), "127.0.0.1:9".parse().unwrap(), 2000).unwrap();
    assert_eq!(ch.get_event().unwrap().kind, EventKind::AddrResolved);
    let ctx = id.verbs().expect("resolving gave the id a device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = id.create_qp(&pd, &QpInit::new(QpType::Ud, &cq, cap)).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    UdMember { ch, id, pd, qp, cq, mr }
}

#[test]
fn a_multicast_datagram_over_librdmacm_reaches_the_joined_qp() {
    let _turn = through_the_backend();
    let (_, before) = local_requests();
    // Groups are host-wide: one of this process only.
    let p = std::process::id().to_be_bytes();
    let group = SocketAddr::new(std::net::Ipv4Addr::new(239, p[2], p[3], 23).into(), 0);
    let (a, b) = (ud_member(), ud_member());
    let sge = [a.mr.sge(0, 2048).unwrap()];
    a.qp.post_recv(&[RecvWr::new(5, &sge)]).unwrap();
    a.id.join_multicast(group, rverbs_cm::JoinFlag::FullMember, 0xa).unwrap();
    let joined = a.ch.get_event().unwrap();
    assert_eq!((joined.kind, joined.status, joined.mc_context), (EventKind::MulticastJoin, 0, 0xa));
    assert_eq!((joined.ud.qp_num, joined.ud.qkey), (0xff_ffff, rverbs_cm::RDMA_UDP_QKEY));
    drop(joined);
    b.id.join_multicast(group, rverbs_cm::JoinFlag::SendOnlyFullMember, 0xb).unwrap();
    let joined = b.ch.get_event().unwrap();
    assert_eq!((joined.kind, joined.mc_context), (EventKind::MulticastJoin, 0xb));
    // librdmacm attached a's QP (made on its id) to the group: b's datagram reaches it.
    let ah = rverbs::Ah::new(&b.pd, &joined.ud.ah_attr).unwrap();
    b.mr.write(0, b"to group").unwrap();
    let sge = [b.mr.sge(0, 8).unwrap()];
    b.qp.post_send(&[SendWr::send(6, &sge).ud(&ah, joined.ud.qp_num, joined.ud.qkey).signaled()]).unwrap();
    assert_eq!(first_success(|wc| b.cq.poll(wc).unwrap()).wr_id(), 6);
    let wc = first_success(|wc| a.cq.poll(wc).unwrap());
    assert_eq!((wc.wr_id(), wc.byte_len()), (5, Some(40 + 8)), "a GRH and the 8 bytes");
    let mut got = [0; 8];
    a.mr.read(40, &mut got).unwrap();
    assert_eq!(&got, b"to group");
    a.id.leave_multicast(group).unwrap();
    assert_eq!(a.id.leave_multicast(group).unwrap_err().errno(), libc::EADDRNOTAVAIL, "left already");
    assert_backend_did_it(before);
}

/// The QP rdma_create_qp(3) made on an id, in a PD and CQ of the id's context, as a
/// public `rverbs::Qp`; with a registered buffer for it.
struct IdQp {
    qp: Qp,
    cq: Cq,
    mr: Mr,
}

fn qp_on(id: &CmId) -> IdQp {
    let ctx = id.verbs().expect("the id has a device");
    assert_eq!(ctx.backend(), Backend::RdmaCore);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = id.create_qp(&pd, &QpInit::new(QpType::Rc, &cq, cap)).unwrap();
    assert_eq!(qp.state(), rverbs::QpState::Init, "rdma_create_qp(3) moved it to INIT");
    // A PD of another context of the device is not the id's: librdmacm refuses it.
    let other = rverbs::devices().unwrap()[0].open().unwrap();
    let (opd, ocq) = (other.alloc_pd().unwrap(), other.create_cq(&CqInit::new(8)).unwrap());
    let err = id.create_qp(&opd, &QpInit::new(QpType::Rc, &ocq, cap)).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    let mr = qp.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    IdQp { qp, cq, mr }
}

/// The first completion of `cq` within TIMEOUT (polled: a bound, not a synchronisation).
fn poll_one(cq: &Cq) -> Wc {
    first_success(|wc| cq.poll(wc).unwrap())
}

/// The first completion `poll` finds within TIMEOUT, which must be a success (polled: a
/// bound, not a synchronisation).
fn first_success(mut poll: impl FnMut(&mut [Wc]) -> usize) -> Wc {
    let deadline = Instant::now() + TIMEOUT;
    let mut wc = [Wc::default()];
    while poll(&mut wc) == 0 {
        assert!(Instant::now() < deadline, "no completion within {TIMEOUT:?}");
        std::thread::yield_now();
    }
    assert_eq!(wc[0].status(), WcStatus::Success, "completion {:?}", wc[0]);
    wc[0]
}

#[test]
fn qps_librdmacm_creates_on_ids_connect_and_carry_a_send() {
    let _turn = through_the_backend();
    let (_, before) = local_requests();
    let lch = EventChannel::new().unwrap();
    let listen = CmId::new(&lch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    listen.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    listen.listen(1).unwrap();
    let addr = listen.src_addr().unwrap();
    let cch = EventChannel::new().unwrap();
    let client = CmId::new(&cch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    assert!(client.verbs().is_none(), "no device before resolving");
    client.resolve_addr(None, addr, 2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::AddrResolved);
    client.resolve_route(2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::RouteResolved);
    let c = qp_on(&client);
    let param = rverbs_cm::ConnParam { private_data: b"hi".to_vec(), retry_count: 7, rnr_retry_count: 7, ..Default::default() };
    client.connect(&param).unwrap();

    let req = lch.get_event().unwrap();
    assert_eq!(req.kind, EventKind::ConnectRequest);
    let server = req.id.clone();
    drop(req);
    let s = qp_on(&server);
    let sge = [s.mr.sge(0, 64).unwrap()];
    s.qp.post_recv(&[RecvWr::new(9, &sge)]).unwrap();
    server.accept(Some(&rverbs_cm::ConnParam { private_data: b"ho".to_vec(), ..Default::default() })).unwrap();
    let est = cch.get_event().unwrap();
    assert_eq!(est.kind, EventKind::Established, "the client's QP is on its id: librdmacm completes the handshake");
    assert!(est.conn.private_data.starts_with(b"ho"));
    drop(est);
    assert_eq!(lch.get_event().unwrap().kind, EventKind::Established);
    assert_eq!(c.qp.state(), rverbs::QpState::Rts, "librdmacm moved the client's QP to RTS");

    c.mr.write(0, b"on librdmacm's QP").unwrap();
    let sge = [c.mr.sge(0, 17).unwrap()];
    c.qp.post_send(&[SendWr::send(3, &sge).signaled()]).unwrap();
    let wc = poll_one(&c.cq);
    assert_eq!(wc.wr_id(), 3);
    let wc = poll_one(&s.cq);
    assert_eq!((wc.wr_id(), wc.byte_len()), (9, Some(17)));
    let mut got = [0; 17];
    s.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"on librdmacm's QP");
    assert_backend_did_it(before);
}

/// The awaited helpers over librdmacm (feature `tokio`): each test runs on tokio's
/// current-thread runtime, every wait bounded.
#[cfg(feature = "tokio")]
mod awaited {
    use std::future::Future;
    use std::time::Duration;

    use rverbs::aio::AsyncCq;
    use rverbs::{Access, Backend, Context, CqInit, Mr, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, WcOpcode, WcStatus};
    use rverbs_cm::aio::{connect_with, AsyncEventChannel, AsyncListener};
    use rverbs_cm::{CmId, EventChannel, EventKind, PortSpace};

    use super::{assert_backend_did_it, local_requests, through_the_backend, TIMEOUT};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap()
    }

    /// Bounds a wait that must end: the deadline only turns a hang into a failure.
    async fn bounded<T>(fut: impl Future<Output = T>) -> T {
        tokio::time::timeout(TIMEOUT, fut).await.expect("no result within TIMEOUT")
    }

    const MSG: usize = 64;

    /// One end of a connection: a CQ awaited on its own channel, an RC QP, a buffer
    /// (sent from its first half, received into its second).
    struct End {
        cq: AsyncCq,
        qp: Qp,
        mr: Mr,
    }

    impl End {
        fn new(ctx: &Context, pd: &Pd) -> End {
            let ch = ctx.create_comp_channel().unwrap();
            let cq = ctx.create_cq(&CqInit::new(8).channel(&ch)).unwrap();
            let cap = QpCap { max_send_wr: 2, max_recv_wr: 2, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
            let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
            let mr = pd.alloc_mr(2 * MSG, Access::LOCAL_WRITE).unwrap();
            End { cq: AsyncCq::new(cq, ch).unwrap(), qp, mr }
        }

        fn post_recv(&self, qp: &Qp) -> rverbs_cm::Result<()> {
            let sge = [self.mr.sge(MSG, MSG as u32)?];
            qp.post_recv(&[RecvWr::new(2, &sge)])?;
            Ok(())
        }

        fn send(&self, text: &[u8]) {
            self.mr.write(0, text).unwrap();
            let sge = [self.mr.sge(0, text.len() as u32).unwrap()];
            self.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        }

        /// The next completion, which must be a success; a receive's bytes with it.
        async fn next(&mut self) -> (WcOpcode, Vec<u8>) {
            let wc = bounded(self.cq.next_completion()).await.unwrap();
            assert_eq!(wc.status(), WcStatus::Success, "completion {wc:?}");
            let op = wc.opcode().expect("a successful completion has its opcode");
            let mut got = Vec::new();
            if op == WcOpcode::Recv {
                got = vec![0; wc.byte_len().unwrap() as usize];
                self.mr.read(MSG, &mut got).unwrap();
            }
            (op, got)
        }
    }

    const CONNECTIONS: usize = 8;

    #[test]
    fn an_async_echo_on_one_thread_runs_over_librdmacm() {
        let _turn = through_the_backend();
        let (_, before) = local_requests();
        let ctx = rverbs::devices().unwrap()[0].open().unwrap();
        assert_eq!(ctx.backend(), Backend::RdmaCore);
        let pd = ctx.alloc_pd().unwrap();
        runtime().block_on(async {
            let listener = AsyncListener::bind("127.0.0.1:0".parse().unwrap(), CONNECTIONS as i32).unwrap();
            let addr = listener.local_addr().expect("librdmacm bound the listener");
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..CONNECTIONS {
                let (ctx, pd) = (ctx.clone(), pd.clone());
                tasks.spawn(async move {
                    let mut end = End::new(&ctx, &pd);
                    let qp = end.qp.clone();
                    let conn = connect_with(addr, qp, b"echo client", Duration::from_secs(5), |qp| end.post_recv(qp)).await.unwrap();
                    assert!(conn.peer_private_data().starts_with(b"echo server"), "{:?}", conn.peer_private_data());
                    assert_eq!(conn.qp().state(), rverbs::QpState::Rts, "the client moved its QP to RTS on CONNECT_RESPONSE");
                    let text = format!("client {n} over librdmacm");
                    end.send(text.as_bytes());
                    let mut echoed = None;
                    // The send's completion and the echo's, in either order.
                    for _ in 0..2 {
                        if let (WcOpcode::Recv, got) = end.next().await {
                            echoed = Some(got);
                        }
                    }
                    assert_eq!(echoed.expect("the echo came"), text.as_bytes());
                    conn.disconnect().unwrap();
                });
            }
            for _ in 0..CONNECTIONS {
                let req = bounded(listener.next_request()).await.unwrap();
                assert!(req.param().private_data.starts_with(b"echo client"));
                let (ctx, pd) = (ctx.clone(), pd.clone());
                tasks.spawn(async move {
                    let mut end = End::new(&ctx, &pd);
                    let conn = bounded(req.accept_with(end.qp.clone(), b"echo server", |qp| end.post_recv(qp))).await.unwrap();
                    let (op, got) = end.next().await;
                    assert_eq!(op, WcOpcode::Recv);
                    end.send(&got);
                    assert_eq!(end.next().await.0, WcOpcode::Send);
                    bounded(conn.disconnected()).await.unwrap();
                    assert_eq!(conn.qp().state(), rverbs::QpState::Err, "DISCONNECTED moved the server's QP to ERR");
                });
            }
            while let Some(r) = bounded(tasks.join_next()).await {
                r.unwrap();
            }
        });
        assert_backend_did_it(before);
    }

    #[test]
    fn the_awaited_event_stream_of_a_librdmacm_channel_yields_only_events() {
        let _turn = through_the_backend();
        runtime().block_on(async {
            let listen_ch = EventChannel::new().unwrap();
            let listen = CmId::new(&listen_ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
            listen.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
            listen.listen(1).unwrap();
            let ch = EventChannel::new().unwrap();
            assert_eq!(ch.backend(), Backend::RdmaCore);
            let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
            let mut events = AsyncEventChannel::new(ch).unwrap();
            {
                // Nothing asked yet: the future waits instead of yielding an empty event.
                let mut next = std::pin::pin!(events.event());
                let waker = std::task::Waker::noop();
                assert!(next.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_pending());
                id.resolve_addr(None, listen.src_addr().unwrap(), 2000).unwrap();
                let ev = bounded(next).await.unwrap();
                assert_eq!((ev.kind, ev.status), (EventKind::AddrResolved, 0));
                assert!(ev.id == id, "the event names the id");
            }
            id.resolve_route(2000).unwrap();
            let ev = bounded(std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut events), cx))).await;
            assert_eq!(ev.expect("the stream never ends").unwrap().kind, EventKind::RouteResolved);
        });
    }

    #[test]
    fn the_async_echo_example_runs_over_librdmacm() {
        let _turn = through_the_backend();
        let (_, before) = local_requests();
        crate::async_echo::main().expect("64 connections echo on one thread over librdmacm");
        assert_backend_did_it(before);
    }

    #[test]
    fn the_stream_echo_example_runs_over_librdmacm() {
        let _turn = through_the_backend();
        let (_, before) = local_requests();
        crate::stream_echo::main().expect("4 MiB cross RdmaStream over librdmacm through tokio::io::copy");
        assert_backend_did_it(before);
    }
}

#[test]
fn a_udp_id_resolves_its_peer_by_sidr_with_the_datagram_parameters() {
    let _turn = through_the_backend();
    let lch = EventChannel::new().unwrap();
    let listen = CmId::new(&lch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    listen.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    listen.listen(1).unwrap();
    let addr = listen.src_addr().unwrap();
    let cch = EventChannel::new().unwrap();
    let client = CmId::new(&cch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    assert_eq!(client.qp_type(), QpType::Ud);
    client.resolve_addr(None, addr, 2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::AddrResolved);
    client.resolve_route(2000).unwrap();
    assert_eq!(cch.get_event().unwrap().kind, EventKind::RouteResolved);
    // Neither id has a QP: each names one by number, as an application managing its own.
    client.connect(&rverbs_cm::ConnParam { private_data: b"sidr".to_vec(), qp_num: 0x77, ..Default::default() }).unwrap();
    let req = lch.get_event().unwrap();
    assert_eq!(req.kind, EventKind::ConnectRequest);
    assert!(req.ud.private_data.starts_with(b"sidr"), "a UD request's private data is in its UdParam: {:?}", req.ud);
    req.id.accept(Some(&rverbs_cm::ConnParam { private_data: b"ok".to_vec(), qp_num: 0x88, ..Default::default() })).unwrap();
    let est = cch.get_event().unwrap();
    assert_eq!((est.kind, est.status), (EventKind::Established, 0));
    assert_eq!(est.ud.qp_num, 0x88, "the server's QP number");
    assert_eq!(est.ud.qkey, rverbs_cm::RDMA_UDP_QKEY);
    assert!(est.ud.private_data.starts_with(b"ok"));
}
