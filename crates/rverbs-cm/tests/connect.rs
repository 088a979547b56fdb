//! rdma_cm semantics of rverbs-cm, one test per rule: event order, private data limits
//! and padding, reject reasons, QP transitions, disconnect once on both sides, datagram
//! (SIDR) services, acknowledgements, migration, fd readiness, and a peer process that
//! dies. Client and server are two ids of this process unless the test says otherwise
//! (the handshake still goes through QP1 MADs).

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rverbs::*;
use rverbs_cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};

const CAP: QpCap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };

struct Verbs {
    pd: Pd,
    cq: Cq,
}

fn verbs() -> Verbs {
    let ctx = devices().unwrap()[0].open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
    Verbs { pd, cq }
}

fn qp(v: &Verbs, t: QpType) -> Qp {
    v.pd.create_qp(&QpInit::new(t, &v.cq, CAP)).unwrap()
}

fn next(ch: &EventChannel) -> Event {
    // Bounded wait: the channel fd must become readable within 10 s.
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
    let ts = rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 };
    let n = rustix::event::poll(&mut fds, Some(&ts)).unwrap();
    assert_eq!(n, 1, "no event within 10 s");
    ch.try_get_event().expect("readable channel has an event")
}

fn expect(ch: &EventChannel, kind: EventKind) -> Event {
    let ev = next(ch);
    assert_eq!(ev.kind, kind, "unexpected event {ev:?}");
    ev
}

fn listener(ch: &EventChannel, ps: PortSpace, t: QpType) -> (CmId, SocketAddr) {
    let l = CmId::new(ch, ps, t, 0x5e).unwrap();
    l.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    l.listen(4).unwrap();
    let a = l.src_addr().unwrap();
    assert_ne!(a.port(), 0, "an ephemeral port was chosen");
    (l, a)
}

fn resolved(ch: &EventChannel, ps: PortSpace, t: QpType, dst: SocketAddr) -> CmId {
    let c = CmId::new(ch, ps, t, 0).unwrap();
    c.resolve_addr(None, dst, 2000).unwrap();
    expect(ch, EventKind::AddrResolved);
    assert!(c.has_device());
    c.resolve_route(2000).unwrap();
    expect(ch, EventKind::RouteResolved);
    assert_eq!(c.route().unwrap().num_paths, 1);
    c
}

fn param(pdata: &[u8]) -> ConnParam {
    ConnParam {
        private_data: pdata.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(len, 0);
    v
}

fn poll_one(cq: &Cq) -> Wc {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [Wc::default(); 1];
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

#[test]
fn rc_connect_accept_send_and_disconnect_once_on_both_sides() {
    let v = verbs();
    let sch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let (l, addr) = listener(&sch, PortSpace::Tcp, QpType::Rc);
    let c = resolved(&cch, PortSpace::Tcp, QpType::Rc, addr);
    let cqp = qp(&v, QpType::Rc);
    c.attach_qp(cqp.clone()).unwrap();
    assert_eq!(cqp.state(), QpState::Init, "rdma_create_qp leaves the QP in INIT");
    let req_data: Vec<u8> = (1..=56).collect();
    c.connect(&param(&req_data)).unwrap();

    let ev = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(ev.listen_id.as_ref(), Some(&l));
    let child = ev.id.clone();
    assert_eq!(child.context(), 0x5e, "the child inherits the listener's context");
    assert_eq!(ev.conn.private_data, req_data, "REQ private data, 56 bytes exactly");
    assert_eq!(ev.conn.qp_num, cqp.qp_num());
    assert_eq!(child.dst_addr(), c.src_addr());
    assert_eq!(child.src_addr(), Some(addr));
    let sqp = qp(&v, QpType::Rc);
    child.attach_qp(sqp.clone()).unwrap();
    let mr = v.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    sqp.post_recv(&[RecvWr::new(1, &[mr.sge(0, 64).unwrap()])]).unwrap();
    drop(ev);
    child.accept(Some(&param(b"welcome"))).unwrap();
    assert_eq!(sqp.state(), QpState::Rts, "accept moves the QP to RTS before REP");

    let ev = expect(&cch, EventKind::Established);
    assert_eq!(ev.conn.private_data, padded(b"welcome", 196), "REP private data padded to 196");
    assert_eq!(cqp.state(), QpState::Rts);
    drop(ev);
    let ev = expect(&sch, EventKind::Established);
    assert!(ev.conn.private_data.is_empty(), "the passive ESTABLISHED carries no private data");
    assert_eq!(ev.id, child);
    drop(ev);

    // Data flows on the connected QPs.
    let smr = v.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    smr.write(0, b"ping").unwrap();
    cqp.post_send(&[SendWr::send(7, &[smr.sge(0, 4).unwrap()]).signaled()]).unwrap();
    let a = poll_one(&v.cq);
    let b = poll_one(&v.cq);
    let recv = if a.wr_id() == 1 { a } else { b };
    assert_eq!(recv.status(), WcStatus::Success);
    assert_eq!(recv.byte_len(), Some(4));

    // The client disconnects: both sides see DISCONNECTED once, the client's QP is in
    // ERR at once and the server's when it calls rdma_disconnect itself.
    sqp.post_recv(&[RecvWr::new(2, &[mr.sge(0, 64).unwrap()])]).unwrap();
    c.disconnect().unwrap();
    assert_eq!(cqp.state(), QpState::Err);
    expect(&sch, EventKind::Disconnected);
    assert_eq!(sqp.state(), QpState::Rts, "a DREQ does not move the peer's QP");
    child.disconnect().unwrap();
    assert_eq!(sqp.state(), QpState::Err);
    let flushed = poll_one(&v.cq);
    assert_eq!((flushed.wr_id(), flushed.status()), (2, WcStatus::WrFlushErr));
    expect(&cch, EventKind::Disconnected);
    c.disconnect().unwrap();
    child.disconnect().unwrap();
    assert!(cch.try_get_event().is_none() && sch.try_get_event().is_none(), "exactly one DISCONNECTED each");
    for id in [c, child, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn nobody_listening_is_rejected_with_reason_8() {
    let v = verbs();
    let ch = EventChannel::new().unwrap();
    // A port nobody binds: bind one, then release it.
    let probe = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    probe.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = probe.src_addr().unwrap();
    probe.destroy().unwrap();
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    let q = qp(&v, QpType::Rc);
    c.attach_qp(q.clone()).unwrap();
    c.connect(&param(b"")).unwrap();
    let ev = expect(&ch, EventKind::Rejected);
    assert_eq!(ev.status, 8, "IB_CM_REJ_INVALID_SERVICE_ID");
    assert_eq!(q.state(), QpState::Err);
    drop(ev);
    c.destroy().unwrap();
}

#[test]
fn a_consumer_reject_reaches_the_client_with_reason_28_and_its_private_data() {
    let ch = EventChannel::new().unwrap();
    let (l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    c.connect(&ConnParam { qp_num: 0x1234, ..param(b"hi") }).unwrap();
    let ev = expect(&ch, EventKind::ConnectRequest);
    let child = ev.id.clone();
    drop(ev);
    assert!(child.reject(&[9u8; 149]).is_err(), "REJ private data is at most 148 bytes");
    child.reject(b"go away").unwrap();
    let ev = expect(&ch, EventKind::Rejected);
    assert_eq!(ev.status, 28);
    assert_eq!(ev.conn.private_data, padded(b"go away", 148));
    drop(ev);
    for id in [c, child, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn private_data_limits_are_enforced() {
    let ch = EventChannel::new().unwrap();
    let (l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    assert_eq!(c.connect(&ConnParam { qp_num: 5, ..param(&[0; 57]) }).unwrap_err().errno(), libc::EINVAL);
    c.connect(&ConnParam { qp_num: 5, ..param(&[0; 56]) }).unwrap();
    let ev = expect(&ch, EventKind::ConnectRequest);
    let child = ev.id.clone();
    drop(ev);
    assert_eq!(child.accept(Some(&ConnParam { qp_num: 6, ..param(&[0; 197]) })).unwrap_err().errno(), libc::EINVAL);
    child.accept(Some(&ConnParam { qp_num: 6, ..param(&[1; 196]) })).unwrap();
    let ev = expect(&ch, EventKind::ConnectResponse);
    assert_eq!(ev.conn.private_data, vec![1; 196]);
    assert_eq!(ev.conn.qp_num, 6);
    drop(ev);
    c.establish().unwrap();
    expect(&ch, EventKind::Established);
    for id in [c, child, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn init_qp_attr_gives_the_ladder_for_an_application_managed_qp() {
    let v = verbs();
    let ch = EventChannel::new().unwrap();
    let (l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    let cq = qp(&v, QpType::Rc);
    c.connect(&ConnParam { qp_num: cq.qp_num(), ..param(b"") }).unwrap();
    let ev = expect(&ch, EventKind::ConnectRequest);
    let child = ev.id.clone();
    drop(ev);
    let sq = qp(&v, QpType::Rc);
    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let (a, m) = child.init_qp_attr(s).unwrap();
        sq.modify(&a, m).unwrap();
    }
    child.accept(Some(&ConnParam { qp_num: sq.qp_num(), ..param(b"") })).unwrap();
    expect(&ch, EventKind::ConnectResponse);
    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let (a, m) = c.init_qp_attr(s).unwrap();
        cq.modify(&a, m).unwrap();
    }
    let (rts, _) = c.init_qp_attr(QpState::Rts).unwrap();
    let (srtr, _) = child.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(rts.sq_psn, srtr.rq_psn, "the PSNs of both sides agree");
    let (srts, _) = child.init_qp_attr(QpState::Rts).unwrap();
    let (rtr, _) = c.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(srts.sq_psn, rtr.rq_psn, "and the other way");
    c.establish().unwrap();
    expect(&ch, EventKind::Established);
    assert_eq!(sq.state(), QpState::Rts);
    for id in [c, child, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn ud_service_resolution_gives_the_client_qpn_and_qkey_and_the_server_no_event() {
    let v = verbs();
    let sch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let (l, addr) = listener(&sch, PortSpace::Udp, QpType::Ud);
    let c = resolved(&cch, PortSpace::Udp, QpType::Ud, addr);
    let cq = qp(&v, QpType::Ud);
    c.attach_qp(cq.clone()).unwrap();
    assert_eq!(cq.state(), QpState::Rts, "a UD QP is ready at creation");
    c.connect(&param(b"sidr")).unwrap();
    let ev = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(ev.ud.private_data, padded(b"sidr", 180));
    let child = ev.id.clone();
    drop(ev);
    let sq = qp(&v, QpType::Ud);
    child.attach_qp(sq.clone()).unwrap();
    child.accept(Some(&ConnParam { qp_num: sq.qp_num(), ..param(b"ok") })).unwrap();
    let ev = expect(&cch, EventKind::Established);
    assert_eq!(ev.ud.qp_num, sq.qp_num());
    assert_eq!(ev.ud.qkey, rverbs_cm::RDMA_UDP_QKEY);
    assert_eq!(ev.ud.private_data, padded(b"ok", 136));
    assert!(ev.ud.ah_attr.grh.is_some());
    drop(ev);
    assert!(sch.try_get_event().is_none(), "the UD server gets no ESTABLISHED");
    for id in [c, child, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn port_spaces_are_separate_and_binds_conflict_within_one() {
    let ch = EventChannel::new().unwrap();
    let (l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
    let u = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    u.bind_addr(addr).unwrap();
    let t = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    assert_eq!(t.bind_addr(addr).unwrap_err().errno(), libc::EADDRINUSE);
    let bad = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    assert_eq!(bad.bind_addr("192.0.2.1:1".parse().unwrap()).unwrap_err().errno(), libc::EADDRNOTAVAIL);
    for id in [u, t, bad, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn the_channel_fd_is_readable_exactly_while_events_are_queued_and_nonblocking_gives_eagain() {
    let ch = EventChannel::new().unwrap();
    rustix::io::ioctl_fionbio(ch.fd(), true).unwrap();
    assert_eq!(ch.get_event().unwrap_err().errno(), libc::EAGAIN);
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    id.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 100).unwrap();
    let ready = |ch: &EventChannel| {
        let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
    };
    // ADDR_RESOLVED comes from the engine thread (not inside the call): wait for it.
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
    assert_eq!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 })).unwrap(), 1);
    assert!(ready(&ch));
    let ev = ch.get_event().unwrap();
    assert_eq!(ev.kind, EventKind::AddrResolved);
    assert!(!ready(&ch), "no readiness without an event behind it");
    drop(ev);
    id.destroy().unwrap();
}

#[test]
fn destroy_waits_for_the_acknowledgement_of_retrieved_events() {
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    id.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 100).unwrap();
    let ev = ch.get_event().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let id2 = id.clone();
    let t = std::thread::spawn(move || {
        id2.destroy().unwrap();
        tx.send(()).unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "destroy returned before the ack");
    drop(ev);
    rx.recv_timeout(Duration::from_secs(10)).expect("destroy returns after the ack");
    t.join().unwrap();
}

#[test]
fn migrate_moves_queued_events_to_the_new_channel() {
    let ch = EventChannel::new().unwrap();
    let other = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    id.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 100).unwrap();
    // Wait until ADDR_RESOLVED is queued on the first channel, then move the id.
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
    assert_eq!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 })).unwrap(), 1);
    id.migrate(&other).unwrap();
    assert!(ch.try_get_event().is_none(), "the queued event left the old channel");
    assert_eq!(other.try_get_event().unwrap().kind, EventKind::AddrResolved);
    assert_eq!(id.channel(), Some(other));
    id.destroy().unwrap();
}

// ---- across processes ----

fn role() -> Option<String> {
    std::env::var("RVERBS_CM_TEST_ROLE").ok()
}

struct Peer {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

fn spawn(test: &str, role: &str) -> Peer {
    spawn_with(test, role, &[])
}

/// [`spawn`] with extra environment variables for the child.
fn spawn_with(test: &str, role: &str, env: &[(&str, &std::ffi::OsStr)]) -> Peer {
    use std::io::BufRead;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("RVERBS_CM_TEST_ROLE", role)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // libtest may print "test name ... " before our line without a newline.
            if let Some(at) = line.find("PEER ") {
                if tx.send(line[at + 5..].trim().to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    Peer { child, lines }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn say(msg: &str) {
    use std::io::Write;
    println!("PEER {msg}");
    std::io::stdout().flush().unwrap();
}

fn read_line(peer: &mut Peer) -> String {
    peer.lines.recv_timeout(Duration::from_secs(20)).expect("the peer said nothing for 20 s or exited")
}

/// The server runs in a child process; it accepts, says so, then is killed. The client
/// sees DISCONNECTED and its QP flushes: a dead peer never leaves it hanging.
#[test]
fn a_peer_process_that_dies_disconnects_its_partner() {
    if role().as_deref() == Some("server") {
        let v = verbs();
        let ch = EventChannel::new().unwrap();
        let (_l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
        say(&addr.to_string());
        let ev = expect(&ch, EventKind::ConnectRequest);
        let child = ev.id.clone();
        drop(ev);
        child.attach_qp(qp(&v, QpType::Rc)).unwrap();
        child.accept(None).unwrap();
        expect(&ch, EventKind::Established);
        say("established");
        let mut s = String::new();
        let _ = std::io::stdin().read_line(&mut s); // until killed
        return;
    }
    let mut server = spawn("a_peer_process_that_dies_disconnects_its_partner", "server");
    let addr: SocketAddr = read_line(&mut server).parse().unwrap();
    let v = verbs();
    let ch = EventChannel::new().unwrap();
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    let q = qp(&v, QpType::Rc);
    c.attach_qp(q.clone()).unwrap();
    let mr = v.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    q.post_recv(&[RecvWr::new(3, &[mr.sge(0, 64).unwrap()])]).unwrap();
    c.connect(&param(b"")).unwrap();
    expect(&ch, EventKind::Established);
    assert_eq!(read_line(&mut server), "established");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let ev = expect(&ch, EventKind::Disconnected);
    assert_eq!(ev.status, 0);
    drop(ev);
    assert_eq!(q.state(), QpState::Err);
    let wc = poll_one(&v.cq);
    assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::WrFlushErr));
    c.destroy().unwrap();
}

/// A listener in another process: the request crosses processes through the host-wide
/// listener table and QP1 of the listener's endpoint; so do REP, RTU and DREQ/DREP.
#[test]
fn a_connection_across_processes_with_server_initiated_disconnect() {
    if role().as_deref() == Some("server") {
        let v = verbs();
        let ch = EventChannel::new().unwrap();
        let (_l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
        say(&addr.to_string());
        let ev = expect(&ch, EventKind::ConnectRequest);
        assert_eq!(ev.conn.private_data, padded(b"from the client", 56));
        let child = ev.id.clone();
        drop(ev);
        child.attach_qp(qp(&v, QpType::Rc)).unwrap();
        child.accept(Some(&param(b"from the server"))).unwrap();
        expect(&ch, EventKind::Established);
        child.disconnect().unwrap();
        expect(&ch, EventKind::Disconnected);
        say("done");
        return;
    }
    let mut server = spawn("a_connection_across_processes_with_server_initiated_disconnect", "server");
    let addr: SocketAddr = read_line(&mut server).parse().unwrap();
    let v = verbs();
    let ch = EventChannel::new().unwrap();
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    c.attach_qp(qp(&v, QpType::Rc)).unwrap();
    c.connect(&param(b"from the client")).unwrap();
    let ev = expect(&ch, EventKind::Established);
    assert_eq!(ev.conn.private_data, padded(b"from the server", 196));
    drop(ev);
    expect(&ch, EventKind::Disconnected);
    c.disconnect().unwrap();
    assert_eq!(read_line(&mut server), "done");
    assert!(server.child.wait().unwrap().success());
    c.destroy().unwrap();
    let _ = ch.fd().as_fd();
}

#[test]
fn the_raii_api_connects_exchanges_private_data_and_disconnects_on_drop() {
    let v = verbs();
    let l = rverbs_cm::Listener::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
    let addr = l.local_addr().unwrap();
    let cq = qp(&v, QpType::Rc);
    let sq = qp(&v, QpType::Rc);
    let t = Duration::from_secs(10);
    let client = std::thread::spawn(move || rverbs_cm::connect(addr, cq, b"hello", t).unwrap());
    let req = l.next_request(t).unwrap();
    assert_eq!(req.param().private_data, padded(b"hello", 56));
    let server = req.accept(sq.clone(), b"world", t).unwrap();
    let client = client.join().unwrap();
    assert_eq!(client.peer_private_data(), &padded(b"world", 196)[..]);
    assert_eq!(client.qp().state(), QpState::Rts);
    assert_eq!(sq.state(), QpState::Rts);
    drop(client);
    server.wait_disconnected(t).unwrap();

    // A dropped request is a reject.
    let cq2 = qp(&v, QpType::Rc);
    let c2 = std::thread::spawn(move || rverbs_cm::connect(addr, cq2, b"", t).map(|_| ()));
    drop(l.next_request(t).unwrap());
    assert_eq!(c2.join().unwrap().unwrap_err().errno(), libc::ECONNREFUSED);
}

/// A listener whose process is stopped never answers: after the CM response timeout
/// (here 4.096 µs × 2^12 × 2 ≈ 34 ms) the client gets UNREACHABLE, -ETIMEDOUT, and its
/// QP goes to ERR.
#[test]
fn an_unanswered_request_times_out_as_unreachable() {
    if role().as_deref() == Some("server") {
        let ch = EventChannel::new().unwrap();
        let (_l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
        say(&addr.to_string());
        let mut s = String::new();
        let _ = std::io::stdin().read_line(&mut s); // until killed
        return;
    }
    let mut server = spawn("an_unanswered_request_times_out_as_unreachable", "server");
    let addr: SocketAddr = read_line(&mut server).parse().unwrap();
    let pid = rustix::process::Pid::from_raw(server.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let v = verbs();
    let ch = EventChannel::new().unwrap();
    let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
    let q = qp(&v, QpType::Rc);
    c.attach_qp(q.clone()).unwrap();
    c.set_cm_timeout(12, 1).unwrap();
    let t0 = Instant::now();
    c.connect(&param(b"")).unwrap();
    let ev = expect(&ch, EventKind::Unreachable);
    assert_eq!(ev.status, -libc::ETIMEDOUT);
    assert!(t0.elapsed() >= Duration::from_millis(30), "not before the response timeout");
    drop(ev);
    assert_eq!(q.state(), QpState::Err);
    c.destroy().unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
}

/// Endpoint numbers are reused: a client process that starts after another died takes
/// the lowest free endpoint, so the dead one's number, and its first communication ID is
/// the same number too. The server, which keeps the dead client's id (DISCONNECTED by the
/// death), must take the new client's REQ as a new request, not as a repeat of the old
/// one (and a late notice of the old process's death must not fail the new connection):
/// ids know the peer's process, not only its endpoint. All three processes use a private
/// runtime directory, so the numbers are certain.
#[test]
fn a_client_reusing_a_dead_clients_endpoint_and_ids_is_a_new_peer() {
    const TEST: &str = "a_client_reusing_a_dead_clients_endpoint_and_ids_is_a_new_peer";
    match role().as_deref() {
        Some("server") => {
            let v = verbs();
            let ch = EventChannel::new().unwrap();
            let (_l, addr) = listener(&ch, PortSpace::Tcp, QpType::Rc);
            say(&addr.to_string());
            let mut kept = Vec::new();
            for round in 0..2 {
                let ev = expect(&ch, EventKind::ConnectRequest);
                let child = ev.id.clone();
                drop(ev);
                child.attach_qp(qp(&v, QpType::Rc)).unwrap();
                child.accept(None).unwrap();
                expect(&ch, EventKind::Established);
                say(&format!("accepted {round}"));
                if round == 0 {
                    // The first client exits without disconnecting: its death disconnects.
                    expect(&ch, EventKind::Disconnected);
                    say("disconnected 0");
                }
                kept.push(child); // not destroyed: the old id stays while the new client comes
            }
            return;
        }
        Some("client") => {
            let addr: SocketAddr = std::env::var("RVERBS_CM_TEST_ADDR").unwrap().parse().unwrap();
            let v = verbs();
            let ch = EventChannel::new().unwrap();
            let c = resolved(&ch, PortSpace::Tcp, QpType::Rc, addr);
            let q = qp(&v, QpType::Rc);
            c.attach_qp(q.clone()).unwrap();
            c.set_cm_timeout(18, 1).unwrap(); // an unanswered REQ ends in about 2 s, not 69
            c.connect(&param(b"")).unwrap();
            let ev = expect(&ch, EventKind::Established);
            drop(ev);
            say(&format!("established ep {}", q.qp_num() >> 16));
            return;
        }
        _ => {}
    }
    let dir = std::env::temp_dir().join(format!("rverbs-cm-reuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spawn_in = |role: &str, addr: Option<&str>| {
        let mut env = vec![("RVERBS_RUNTIME_DIR", dir.as_os_str())];
        if let Some(a) = addr {
            env.push(("RVERBS_CM_TEST_ADDR", std::ffi::OsStr::new(a)));
        }
        spawn_with(TEST, role, &env)
    };
    let mut server = spawn_in("server", None);
    let addr = read_line(&mut server);
    let mut first = spawn_in("client", Some(&addr));
    let ep_first = read_line(&mut first);
    assert!(first.child.wait().unwrap().success());
    assert_eq!(read_line(&mut server), "accepted 0");
    assert_eq!(read_line(&mut server), "disconnected 0");
    let mut second = spawn_in("client", Some(&addr));
    let ep_second = read_line(&mut second);
    assert_eq!(ep_second, ep_first, "the second client took the first one's endpoint number");
    assert!(second.child.wait().unwrap().success(), "the second client connected");
    assert_eq!(read_line(&mut server), "accepted 1");
    assert!(server.child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The event channel is `AsFd` (issue 23): an event loop watches it as it is.
#[test]
fn the_event_channel_is_a_source_an_event_loop_can_watch() {
    use std::os::fd::AsFd;
    let ch = EventChannel::new().unwrap();
    let poll = |ch: &EventChannel, secs| {
        let fd = ch.as_fd();
        let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: secs, tv_nsec: 0 })).unwrap() == 1
    };
    assert!(!poll(&ch, 0));
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    id.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 100).unwrap();
    assert!(poll(&ch, 10), "ADDR_RESOLVED arrives");
    assert_eq!(ch.get_event().unwrap().kind, EventKind::AddrResolved);
    assert!(!poll(&ch, 0));
    id.destroy().unwrap();
}

/// `connect_with` and `Request::accept_with` hand the QP over attached and in INIT, before
/// the request or the reply is sent: receives can be posted there (rdma_connect(3),
/// rdma_accept(3)), and a message sent the moment the connection is up finds one at once.
/// An error from the preparation ends the attempt and is returned (the server's rejects).
#[test]
fn receives_are_posted_before_the_handshake_with_the_with_variants() {
    let v = verbs();
    let l = rverbs_cm::Listener::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
    let addr = l.local_addr().unwrap();
    let (cq, sq) = (qp(&v, QpType::Rc), qp(&v, QpType::Rc));
    let t = Duration::from_secs(10);
    let mr = v.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 8).unwrap()];
    let seen = std::sync::Mutex::new(Vec::new());
    let (client, _server) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            rverbs_cm::connect_with(addr, cq, b"", t, |qp| {
                seen.lock().unwrap().push(("client", qp.state()));
                Ok(())
            })
            .unwrap()
        });
        let server = l
            .next_request(t)
            .unwrap()
            .accept_with(sq.clone(), b"", t, |qp| {
                seen.lock().unwrap().push(("server", qp.state()));
                qp.post_recv(&[RecvWr::new(7, &sge)])?;
                Ok(())
            })
            .unwrap();
        (client.join().unwrap(), server)
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort_by_key(|s| s.0);
    assert_eq!(seen, [("client", QpState::Init), ("server", QpState::Init)]);
    // The receive posted before accepting takes the first message.
    client.qp().post_send(&[SendWr::send(1, &[]).signaled()]).unwrap();
    let mut wc = [Wc::default(); 2];
    let deadline = std::time::Instant::now() + t;
    let mut got = Vec::new();
    while got.len() < 2 && std::time::Instant::now() < deadline {
        let n = v.cq.poll(&mut wc).unwrap();
        got.extend(wc[..n].iter().map(|w| (w.wr_id(), w.status())));
    }
    got.sort_by_key(|g| g.0);
    assert_eq!(got, [(1, WcStatus::Success), (7, WcStatus::Success)]);

    // A preparation that fails: the attempt ends with its error, the requester is rejected.
    let cq2 = qp(&v, QpType::Rc);
    let c2 = std::thread::spawn(move || rverbs_cm::connect(addr, cq2, b"", t).map(|_| ()));
    let err = l.next_request(t).unwrap().accept_with(qp(&v, QpType::Rc), b"", t, |_| Err(rverbs_cm::Error::WouldBlock));
    assert!(matches!(err, Err(rverbs_cm::Error::WouldBlock)));
    assert_eq!(c2.join().unwrap().unwrap_err().errno(), libc::ECONNREFUSED);
}

/// Without `RVERBS_BACKEND=rdma-core` the public objects are the soft connection
/// manager's, and `create_qp` (rdma_create_qp(3)) is a QP of the given PD attached to the
/// id: moved to INIT (RC) or RTS (UD), and the one `qp()` returns.
#[test]
fn create_qp_on_a_soft_id_attaches_a_qp_of_the_pd() {
    let v = verbs();
    let ch = EventChannel::new().unwrap();
    assert_eq!(ch.backend(), Backend::Soft);
    let rc = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    assert_eq!(rc.backend(), Backend::Soft);
    assert!(rc.verbs().is_none(), "a soft id takes a QP of any context of its device");
    rc.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 2000).unwrap();
    assert_eq!(next(&ch).kind, EventKind::AddrResolved);
    let qp = rc.create_qp(&v.pd, &QpInit::new(QpType::Rc, &v.cq, CAP)).unwrap();
    assert_eq!(qp.state(), QpState::Init, "attached: moved to INIT");
    assert_eq!(qp.pd().handle(), v.pd.handle(), "a QP of the PD given");
    assert_eq!(rc.qp().map(|q| q.qp_num()), Some(qp.qp_num()), "the id's QP");
    let ud = CmId::new(&ch, PortSpace::Udp, QpType::Ud, 0).unwrap();
    ud.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 2000).unwrap();
    assert_eq!(next(&ch).kind, EventKind::AddrResolved);
    let uqp = ud.create_qp(&v.pd, &QpInit::new(QpType::Ud, &v.cq, CAP)).unwrap();
    assert_eq!(uqp.state(), QpState::Rts, "a datagram QP is ready at once");
    // A second QP on the same id is refused, and the first stays the id's.
    assert!(rc.create_qp(&v.pd, &QpInit::new(QpType::Rc, &v.cq, CAP)).is_err());
    assert_eq!(rc.qp().map(|q| q.qp_num()), Some(qp.qp_num()));
    rc.destroy().unwrap();
    ud.destroy().unwrap();
}
