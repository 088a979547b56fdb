//! Helpers of the integration tests: bounded runs, a connected pair in one process, and
//! waiting for completions.
#![allow(dead_code)]

use std::net::IpAddr;
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use rverbs_rpma::*;

/// How long any single wait of a test may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// Runs `f` on its own thread and fails the test if it does not finish within `secs`
/// (a hang is a bug; nothing that passes is timed).
pub fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            h.join().expect("test thread");
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the thread sent nothing and did not panic"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the test did not finish within {secs} s"),
    }
}

/// An IPv4 address of this host on an interface other than the loopback, taken from
/// rverbs0's GID table: the address a server listens on, as on a real host (a NIC's).
/// Not 127.0.0.1: rpma_utils_get_ibv_context(3) finds the server's device by binding
/// its address, and the kernel's rdma_cm attaches no device to a loopback bind
/// (docs/connection-manager.md, "Addresses"), so librpma cannot serve on the loopback.
///
/// Panics, failing the test with the reason, on a host without such an address.
pub fn host() -> &'static str {
    static ADDR: OnceLock<String> = OnceLock::new();
    ADDR.get_or_init(|| {
        let ctx = rverbs::devices().expect("devices")[0].open().expect("open rverbs0");
        ctx.query_gid_table()
            .iter()
            .map(|e| e.gid.to_ip())
            .find(|ip| matches!(ip, IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified()))
            .map(|ip| ip.to_string())
            .expect(
                "this test needs an IPv4 address of this host on an interface other than the loopback \
                 (librpma cannot serve on 127.0.0.1: a loopback bind has no device, as in the kernel's rdma_cm)",
            )
    })
}

/// A client and a server connection over [`host`]'s address, set up in one thread (the
/// connection manager's engine runs the handshake), each side with its own peer.
pub struct Pair {
    pub client: Conn,
    pub server: Conn,
    pub cpeer: Peer,
    pub speer: Peer,
    pub ep: Endpoint,
}

/// The two peers of a pair.
pub fn peers() -> (Peer, Peer) {
    let speer = Peer::new(host(), ContextType::Local).expect("server peer");
    let cpeer = Peer::new(host(), ContextType::Remote).expect("client peer");
    (speer, cpeer)
}

/// Connects a pair: `prep` sees the server's request before it is accepted (to post
/// receives); `spdata`/`cpdata` are the private data of the accept and the connect.
pub fn pair_with(
    speer: Peer,
    cpeer: Peer,
    scfg: Option<&ConnCfg>,
    ccfg: Option<&ConnCfg>,
    prep: impl FnOnce(&ConnReq),
    spdata: Option<&[u8]>,
    cpdata: Option<&[u8]>,
) -> Pair {
    let ep = Endpoint::listen(&speer, host(), 0).expect("listen");
    let port = ep.local_addr().expect("bound").port();
    let client = ConnReq::new(&cpeer, host(), port, ccfg).expect("conn req").connect(cpdata).expect("connect");
    let req = ep.next_conn_req_timeout(scfg, WAIT).expect("next_conn_req");
    prep(&req);
    let server = req.connect(spdata).expect("accept");
    assert_eq!(server.next_event_timeout(WAIT).expect("server event"), ConnEvent::Established);
    assert_eq!(client.next_event_timeout(WAIT).expect("client event"), ConnEvent::Established);
    Pair { client, server, cpeer, speer, ep }
}

/// A pair with default configurations and no private data.
pub fn pair() -> Pair {
    let (s, c) = peers();
    pair_with(s, c, None, None, |_| {}, None, None)
}

/// Waits (polling) for the next completion of `cq`.
pub fn next_wc(cq: &Cq) -> Wc {
    let deadline = Instant::now() + WAIT;
    loop {
        match cq.get_wc_one() {
            Ok(wc) => return wc,
            Err(Error::NoCompletion) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("get_wc: {e:?}"),
        }
    }
}

/// Asserts that `cq` has no completion now.
pub fn assert_empty(cq: &Cq) {
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.get_wc(&mut wc), Err(Error::NoCompletion));
}

/// Closes a pair as the examples do: the client disconnects, both see `Closed`, the
/// server disconnects too.
pub fn close(p: Pair) {
    p.client.disconnect().expect("client disconnect");
    assert_eq!(p.server.next_event_timeout(WAIT).expect("server closed"), ConnEvent::Closed);
    p.server.disconnect().expect("server disconnect");
    assert_eq!(p.client.next_event_timeout(WAIT).expect("client closed"), ConnEvent::Closed);
    p.client.delete().expect("client delete");
    p.server.delete().expect("server delete");
}
