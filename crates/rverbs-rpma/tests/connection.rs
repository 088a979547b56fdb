//! Connections in one process: a server thread and a client thread over an address of
//! this host ([`common::host`], not the loopback, as librpma needs on a real host),
//! each listening endpoint on its own (ephemeral, so distinct) port; every wait is
//! bounded.

mod common;

use std::time::Duration;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

/// rpma_conn_req_connect(3), rpma_conn_get_private_data(3), rpma_conn_next_event(3),
/// rpma_conn_disconnect(3): private data both ways (padded as rdma_cm reports it: REQ
/// 56 bytes, REP 196), the server disconnects, both sides see CLOSED.
#[test]
fn private_data_both_ways_and_server_initiated_disconnect() {
    bounded(60, || {
        let speer = Peer::new(host(), ContextType::Local).unwrap();
        let ep = Endpoint::listen(&speer, host(), 0).unwrap();
        let port = ep.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let req = ep.next_conn_req_timeout(None, WAIT).unwrap();
            assert!(req.is_passive());
            let pd = req.private_data().unwrap().to_vec();
            let conn = req.connect(Some(b"Hello client!\0")).unwrap();
            assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
            assert_eq!(conn.private_data(), Some(&pd[..]), "the request's data stays the connection's");
            conn.disconnect().unwrap();
            assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
            conn.delete().unwrap();
            ep.shutdown().unwrap();
            pd
        });
        let cpeer = Peer::new(host(), ContextType::Remote).unwrap();
        let req = ConnReq::new(&cpeer, host(), port, None).unwrap();
        assert!(!req.is_passive());
        assert_eq!(req.private_data(), None);
        let conn = req.connect(Some(b"Hello server!\0")).unwrap();
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
        let got = conn.private_data().unwrap().to_vec();
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
        conn.disconnect().unwrap();
        conn.delete().unwrap();
        let sent = server.join().unwrap();
        assert_eq!(&sent[..14], b"Hello server!\0");
        assert_eq!(sent.len(), 56);
        assert!(sent[14..].iter().all(|&b| b == 0));
        assert_eq!(&got[..14], b"Hello client!\0");
        assert_eq!(got.len(), 196);
    });
}

/// rpma_conn_next_event(3): REJECTED → `Rejected` — nobody listens on the port (status
/// 8, as RoCE reports it).
#[test]
fn rejected_when_nobody_listens() {
    bounded(60, || {
        let peer = Peer::new(host(), ContextType::Local).unwrap();
        let port = {
            let ep = Endpoint::listen(&peer, host(), 0).unwrap();
            let p = ep.local_addr().unwrap().port();
            ep.shutdown().unwrap();
            p
        };
        let conn = ConnReq::new(&peer, host(), port, None).unwrap().connect(None).unwrap();
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Rejected);
        conn.delete().unwrap();
    });
}

/// rpma_conn_req_delete(3): deleting a passive request rejects it.
#[test]
fn dropping_a_passive_request_rejects_it() {
    bounded(60, || {
        let speer = Peer::new(host(), ContextType::Local).unwrap();
        let ep = Endpoint::listen(&speer, host(), 0).unwrap();
        let port = ep.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let req = ep.next_conn_req_timeout(None, WAIT).unwrap();
            drop(req);
        });
        let cpeer = Peer::new(host(), ContextType::Remote).unwrap();
        let conn = ConnReq::new(&cpeer, host(), port, None).unwrap().connect(None).unwrap();
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Rejected);
        server.join().unwrap();
    });
}

/// rpma_ep_get_fd(3), rpma_conn_get_event_fd(3): the descriptors may be made
/// non-blocking; with nothing queued the calls report `NoEvent`; they are readable
/// exactly while something is queued.
#[test]
fn non_blocking_fds_report_no_event() {
    bounded(60, || {
        let speer = Peer::new(host(), ContextType::Local).unwrap();
        let ep = Endpoint::listen(&speer, host(), 0).unwrap();
        rustix::fs::fcntl_setfl(ep.fd(), rustix::fs::OFlags::NONBLOCK).unwrap();
        assert_eq!(ep.next_conn_req(None).err(), Some(Error::NoEvent));
        let port = ep.local_addr().unwrap().port();
        let cpeer = Peer::new(host(), ContextType::Remote).unwrap();
        let client = ConnReq::new(&cpeer, host(), port, None).unwrap().connect(None).unwrap();
        let mut fds = [rustix::event::PollFd::from_borrowed_fd(ep.fd(), rustix::event::PollFlags::IN)];
        let ts = rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 };
        assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1, "the request makes the fd readable");
        let server = ep.next_conn_req(None).unwrap().connect(None).unwrap();
        assert_eq!(server.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
        assert_eq!(client.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
        rustix::fs::fcntl_setfl(client.fd(), rustix::fs::OFlags::NONBLOCK).unwrap();
        assert_eq!(client.next_event(), Err(Error::NoEvent));
        server.disconnect().unwrap();
        assert_eq!(client.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
        client.disconnect().unwrap();
        assert_eq!(server.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
    });
}

/// rpma_conn_req_recv(3): a receive posted before the request is accepted takes the
/// first message, sent by the client as soon as the connection is established.
#[test]
fn receive_posted_before_accept_takes_the_first_message() {
    bounded(60, || {
        let speer = Peer::new(host(), ContextType::Local).unwrap();
        let ep = Endpoint::listen(&speer, host(), 0).unwrap();
        let port = ep.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let buf = MrLocal::new(&speer, 32, Usage::RECV).unwrap();
            let req = ep.next_conn_req_timeout(None, WAIT).unwrap();
            req.recv(&buf, 0, 32, 77).unwrap();
            let conn = req.connect(None).unwrap();
            assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
            let cq = conn.get_cq();
            cq.wait_timeout(WAIT).unwrap();
            let wc = cq.get_wc_one().unwrap();
            assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (77, Some(WcOpcode::Recv), Some(5)));
            assert_eq!(wc.qp_num(), conn.qp_num());
            assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
            conn.disconnect().unwrap();
            buf.to_vec(0, 5).unwrap()
        });
        let cpeer = Peer::new(host(), ContextType::Remote).unwrap();
        let msg = MrLocal::new(&cpeer, 8, Usage::SEND).unwrap();
        msg.write(0, b"first").unwrap();
        let conn = ConnReq::new(&cpeer, host(), port, None).unwrap().connect(None).unwrap();
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
        // Unsignaled, right before the disconnect (rpma example 08's "I'm done").
        conn.send(&msg, 0, 5, CompletionFlags::OnError, 1).unwrap();
        conn.disconnect().unwrap();
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
        assert_eq!(server.join().unwrap(), b"first");
    });
}

/// rpma_conn_req_connect(3) ERRORS: INVAL for a private data structure without bytes;
/// PROVIDER when the connection manager refuses the data (over 56 bytes to connect);
/// the request is consumed either way.
#[test]
fn private_data_limits() {
    bounded(60, || {
        let speer = Peer::new(host(), ContextType::Local).unwrap();
        let ep = Endpoint::listen(&speer, host(), 0).unwrap();
        let port = ep.local_addr().unwrap().port();
        let req = ConnReq::new(&speer, host(), port, None).unwrap();
        assert_eq!(req.connect(Some(&[])).err(), Some(Error::Inval));
        let req = ConnReq::new(&speer, host(), port, None).unwrap();
        assert_eq!(req.connect(Some(&[1; 256])).err(), Some(Error::Inval));
        let req = ConnReq::new(&speer, host(), port, None).unwrap();
        assert_eq!(req.connect(Some(&[1; 57])).err(), Some(Error::Provider(libc::EINVAL)));
        // Nothing reached the endpoint.
        assert_eq!(ep.next_conn_req_timeout(None, Duration::from_millis(100)).err(), Some(Error::Provider(libc::ETIMEDOUT)));
        // 56 bytes connect; 197 bytes do not accept, and the requester is rejected.
        let client = ConnReq::new(&speer, host(), port, None).unwrap().connect(Some(&[2; 56])).unwrap();
        let req = ep.next_conn_req_timeout(None, WAIT).unwrap();
        assert_eq!(req.private_data(), Some(&[2u8; 56][..]));
        assert_eq!(req.connect(Some(&[3; 197])).err(), Some(Error::Provider(libc::EINVAL)));
        assert_eq!(client.next_event_timeout(WAIT).unwrap(), ConnEvent::Rejected);
    });
}

/// A log line written into a shared buffer (a `tracing` writer for the test below).
struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// As librpma logs the step that failed, a peer that cannot be made says which address
/// and which step: the error alone is librpma's code and errno.
#[test]
fn a_peer_that_cannot_be_made_logs_the_address_and_the_step() {
    let (bind, device) = bounded(60, || {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || Log(sink.clone())).finish();
        // The subscriber is this thread's: the peer is made on it.
        tracing::subscriber::with_default(subscriber, || {
            let bind = Peer::new("192.0.2.77", ContextType::Local).err();
            let at_bind = String::from_utf8(buf.lock().unwrap().split_off(0)).unwrap();
            let device = Peer::new("127.0.0.1", ContextType::Local).err();
            let at_device = String::from_utf8(buf.lock().unwrap().split_off(0)).unwrap();
            ((bind, at_bind), (device, at_device))
        })
    });
    assert_eq!(bind.0, Some(Error::Provider(libc::EADDRNOTAVAIL)));
    assert!(bind.1.contains("192.0.2.77") && bind.1.contains("rdma_bind_addr"), "{}", bind.1);
    assert_eq!(device.0, Some(Error::Provider(libc::ENODEV)));
    assert!(device.1.contains("127.0.0.1") && device.1.contains("the id's device"), "{}", device.1);
}

/// rpma_utils_get_ibv_context(3) + rpma_peer_new(3), rpma_ep_listen(3): an address of
/// no local interface, or a wildcard, names no device; a port listened on is in use.
/// A local loopback address names no device either (the kernel's rdma_cm attaches none
/// to a loopback bind; librpma then gets a NULL context), while resolving it as a remote
/// address does (cma_resolve_loopback), and an endpoint may listen on it.
#[test]
fn peers_and_endpoints_from_addresses() {
    bounded(60, || {
        assert_eq!(Peer::new("192.0.2.77", ContextType::Local).err(), Some(Error::Provider(libc::EADDRNOTAVAIL)));
        assert_eq!(Peer::new("0.0.0.0", ContextType::Local).err(), Some(Error::Provider(libc::ENODEV)));
        assert_eq!(Peer::new("127.0.0.1", ContextType::Local).err(), Some(Error::Provider(libc::ENODEV)));
        assert_eq!(context_for("127.0.0.1", ContextType::Local).err(), Some(Error::Provider(libc::ENODEV)));
        let lo = Peer::new("127.0.0.1", ContextType::Remote).unwrap();
        assert_eq!(lo.context().device_name(), "rverbs0");
        Endpoint::listen(&lo, "127.0.0.1", 0).unwrap().shutdown().unwrap();
        let peer = Peer::new(host(), ContextType::Local).unwrap();
        assert_eq!(peer.context().device_name(), "rverbs0");
        let remote = Peer::new(host(), ContextType::Remote).unwrap();
        assert_eq!(remote.context().device_name(), "rverbs0");
        let ep = Endpoint::listen(&peer, host(), 0).unwrap();
        let port = ep.local_addr().unwrap().port();
        assert_eq!(Endpoint::listen(&peer, host(), port).err(), Some(Error::Provider(libc::EADDRINUSE)));
        ep.shutdown().unwrap();
        let again = Endpoint::listen(&peer, host(), port).unwrap();
        drop(again);
        // A region keeps the protection domain busy (rpma_peer_delete(3) fails).
        let mr = MrLocal::new(&remote, 8, Usage::SEND).unwrap();
        assert_eq!(remote.clone().delete(), Err(Error::Provider(libc::EBUSY)));
        mr.dereg().unwrap();
    });
}

/// rpma_conn_delete(3): deleting an established connection disconnects it; the other
/// side sees CLOSED and its outstanding receives flush.
#[test]
fn deleting_a_connection_closes_it() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let buf = MrLocal::new(&speer, 8, Usage::RECV).unwrap();
        let p = pair_with(speer, cpeer, None, None, |r| r.recv(&buf, 0, 8, 5).unwrap(), None, None);
        let Pair { client, server, .. } = p;
        client.delete().unwrap();
        assert_eq!(server.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
        server.disconnect().unwrap();
        let wc = next_wc(server.get_cq());
        assert_eq!(wc.wr_id(), 5);
        assert_eq!(wc.status(), rverbs::WcStatus::WrFlushErr);
    });
}
