//! `rverbs_cm::aio` (feature `tokio`): the connection manager awaited on tokio's reactor.
//! The happy path with 64 connections is `examples/async_echo.rs`; here, the errors and
//! the event stream.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use rverbs::{QpState, QpType};
use rverbs_cm::aio::{connect, AsyncEventChannel, AsyncListener};

mod common;

#[path = "../examples/async_echo.rs"]
mod async_echo;
use common::{pd, poll_once, qp};
use rverbs_cm::{CmId, EventChannel, EventKind, Error, PortSpace};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap()
}

/// Bounds a wait that must end: the deadline only turns a hang into a failure.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut).await.expect("no result within 10 s")
}

#[test]
fn the_async_echo_example_serves_sixty_four_connections_on_one_thread() {
    async_echo::main().unwrap();
}

#[test]
fn connecting_to_a_port_nobody_listens_on_names_the_step_the_peer_and_the_event() {
    let pd = pd();
    // A port nobody binds: bind one, then release it.
    let ch = EventChannel::new().unwrap();
    let probe = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    probe.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = probe.src_addr().unwrap();
    probe.destroy().unwrap();
    let q = qp(&pd);
    let err = runtime().block_on(bounded(connect(addr, q.clone(), b"", Duration::from_secs(2)))).err().expect("nobody listens");
    match &err {
        Error::Handshake { step, event: EventKind::Rejected, status: 8, .. } => assert_eq!(*step, "connecting to"),
        e => panic!("expected REJECTED 8 (invalid service id), got {e:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&addr.to_string()), "the message names the peer: {text}");
    assert_eq!(q.state(), QpState::Err, "the rejected QP is in ERR, as rdma_connect(3) leaves it");
}

#[test]
fn a_request_is_accepted_and_the_disconnection_awaited_from_both_ends() {
    let pd = pd();
    runtime().block_on(async {
        let listener = AsyncListener::bind("127.0.0.1:0".parse().unwrap(), 4).unwrap();
        let addr = listener.local_addr().unwrap();
        // Nothing requested yet: the listener's future waits.
        let mut next = pin!(listener.next_request());
        assert!(poll_once(next.as_mut()).is_pending());
        let client = connect(addr, qp(&pd), b"hello", Duration::from_secs(2));
        let server = async {
            let req = bounded(next).await.unwrap();
            assert_eq!(&req.param().private_data[..5], b"hello");
            req.accept(qp(&pd), b"welcome").await.unwrap()
        };
        let (client, server) = tokio::join!(client, server);
        let client = client.unwrap();
        assert_eq!(&client.peer_private_data()[..7], b"welcome");
        assert_eq!(client.qp().state(), QpState::Rts);
        assert_eq!(server.qp().state(), QpState::Rts);
        // rdma_disconnect(3): the server sees DISCONNECTED, answers with its own
        // disconnect, and then the client sees it.
        client.disconnect().unwrap();
        bounded(server.disconnected()).await.unwrap();
        let mut client_done = pin!(client.disconnected());
        assert!(poll_once(client_done.as_mut()).is_pending(), "not before the server's answer");
        server.disconnect().unwrap();
        bounded(client_done).await.unwrap();
    });
}

#[test]
fn a_rejected_request_ends_the_clients_connect() {
    let pd = pd();
    runtime().block_on(async {
        let listener = AsyncListener::bind("127.0.0.1:0".parse().unwrap(), 4).unwrap();
        let addr = listener.local_addr().unwrap();
        let client = connect(addr, qp(&pd), b"", Duration::from_secs(2));
        let server = async { listener.next_request().await.unwrap().reject(b"no").unwrap() };
        let (client, ()) = bounded(async { tokio::join!(client, server) }).await;
        assert!(matches!(client.err(), Some(Error::Handshake { event: EventKind::Rejected, status: 28, .. })));
    });
}

#[test]
fn an_event_channel_is_a_stream_of_events() {
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    runtime().block_on(async {
        let mut events = AsyncEventChannel::new(ch.clone()).unwrap();
        let mut first = pin!(std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut events), cx)));
        assert!(poll_once(first.as_mut()).is_pending(), "no event yet");
        id.resolve_addr(None, "127.0.0.1:7471".parse().unwrap(), 2000).unwrap();
        let ev = bounded(first).await.expect("the stream never ends").unwrap();
        assert_eq!(ev.kind, EventKind::AddrResolved);
    });
    id.destroy().unwrap();
}
