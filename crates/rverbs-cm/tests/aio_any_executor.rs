//! `rverbs_cm::aio` without tokio (feature `async-io`): listening, accepting, connecting
//! and the disconnection awaited on async-io's reactor, each side driven by a minimal
//! `block_on` on a thread of its own (an executor that only parks its thread until a
//! waker unparks it).

use std::pin::pin;
use std::time::Duration;

use rverbs::QpState;
use rverbs_cm::aio::{connect, AsyncListener};

mod common;
use common::{block_on, pd, poll_once, qp};

#[test]
fn a_connection_is_accepted_and_its_disconnection_awaited_on_any_executor() {
    let pd = pd();
    // No tokio runtime anywhere: the channels go to async-io's reactor.
    let listener = AsyncListener::bind("127.0.0.1:0".parse().unwrap(), 4).unwrap();
    let addr = listener.local_addr().unwrap();
    {
        // Nothing requested yet: the listener's future waits (and, dropped, loses nothing).
        let mut next = pin!(listener.next_request());
        assert!(poll_once(next.as_mut()).is_pending());
    }
    let client_qp = qp(&pd);
    let client = std::thread::spawn(move || block_on(connect(addr, client_qp, b"hello", Duration::from_secs(5))));
    let server = block_on(async {
        let req = listener.next_request().await.unwrap();
        assert_eq!(&req.param().private_data[..5], b"hello");
        req.accept(qp(&pd), b"welcome").await.unwrap()
    });
    let client = client.join().unwrap().unwrap();
    assert_eq!(&client.peer_private_data()[..7], b"welcome");
    assert_eq!((client.qp().state(), server.qp().state()), (QpState::Rts, QpState::Rts));
    // rdma_disconnect(3) on the client: the server's task wakes with DISCONNECTED and
    // answers with its own disconnect, and then the client's wakes.
    let mut gone = pin!(server.disconnected());
    assert!(poll_once(gone.as_mut()).is_pending(), "still connected");
    client.disconnect().unwrap();
    block_on(gone).unwrap();
    let mut client_done = pin!(client.disconnected());
    assert!(poll_once(client_done.as_mut()).is_pending(), "not before the server's answer");
    server.disconnect().unwrap();
    block_on(client_done).unwrap();
}
