//! The connection manager awaited on tokio's reactor (feature `tokio`) or on async-io's,
//! for any executor (feature `async-io`; which one as in `rverbs::aio`): the events of a
//! channel as a stream, and listening, accepting and connecting as `async fn`s.
//!
//! An event channel's fd is readable exactly while an event is queued
//! (rdma_create_event_channel(3)), so these types register it with the reactor
//! ([`rverbs::aio::AsyncSource`]) instead of waiting in `rdma_get_cm_event`; the fd
//! becomes non-blocking. Every future resolves only with an event (a wake-up that finds
//! the queue empty waits again), and dropping one loses nothing: an event is taken from
//! its queue only inside the poll that returns it, and a half-made connection dropped
//! mid-handshake destroys its id as the blocking API's error paths do.
//!
//! They run over either connection manager, as the blocking helpers do: the soft one,
//! or (feature `rdma-core`) librdmacm for a QP of `rverbs`' rdma-core backend and a
//! listener under `RVERBS_BACKEND=rdma-core` ([`crate::Listener`]); librdmacm's event
//! channel fd is as readable as the soft one's.
//!
//! The waits need no timer: resolving ends within the `timeout` given to
//! rdma_resolve_addr(3) / rdma_resolve_route(3), and a connection request ends in
//! ESTABLISHED, REJECTED or UNREACHABLE after the CM's retries. To bound a wait further,
//! wrap the future in the runtime's timeout.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context as TaskContext, Poll};
use std::time::Duration;

use futures_core::Stream;
use rverbs::aio::{AsyncSource, StableFd};
use rverbs::Qp;

use crate::conn::{Connection, Listener, Request, ACCEPTING, CONNECTING};
use crate::error::{Error, Peer, Result};
use crate::event::{ConnParam, EventKind};
use crate::{Event, EventChannel};

// SAFETY: a soft channel's eventfd is created with it and closed when its last clone
// drops; librdmacm's channel fd is opened by rdma_create_event_channel(3) and closed by
// rdma_destroy_event_channel(3), which only the drop of its last clone (and id) calls.
#[allow(unsafe_code)]
unsafe impl StableFd for EventChannel {}

/// An event channel's events, awaited (rdma_get_cm_event(3)); each is acknowledged when
/// dropped (rdma_ack_cm_event(3)).
#[derive(Debug)]
pub struct AsyncEventChannel {
    src: AsyncSource<EventChannel>,
}

impl AsyncEventChannel {
    /// Registers `ch` with a reactor ([`AsyncSource::new`]; its fd becomes non-blocking).
    ///
    /// Errors: those of [`AsyncSource::new`].
    pub fn new(ch: EventChannel) -> Result<AsyncEventChannel> {
        Ok(AsyncEventChannel { src: AsyncSource::new(ch)? })
    }

    /// The channel.
    pub fn channel(&self) -> &EventChannel {
        self.src.get_ref()
    }

    /// Polls for the next event: `Ready` only with an event (or an error).
    pub fn poll_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<Event>> {
        let ev = ready!(self.src.poll_read_with(cx, |ch| ch.take_event().transpose()));
        Poll::Ready(ev.map_err(Error::from).and_then(|ev| ev))
    }

    /// The next event. Cancellation-safe: an event is taken only when it is returned.
    pub async fn event(&self) -> Result<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The next event, which should be `want`; another one is an [`Error::Handshake`]
    /// naming the step and the peer.
    async fn expect(&self, step: &'static str, peer: Option<SocketAddr>, want: EventKind) -> Result<Event> {
        let ev = self.event().await?;
        if ev.kind != want {
            return Err(Error::Handshake { step, peer: Peer(peer), event: ev.kind, status: ev.status });
        }
        Ok(ev)
    }
}

/// The channel's events; the stream never ends.
impl Stream for AsyncEventChannel {
    type Item = Result<Event>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx).map(Some)
    }
}

/// A listener ([`Listener`]) whose connection requests are awaited.
pub struct AsyncListener {
    listener: Listener,
    events: AsyncEventChannel,
}

impl AsyncListener {
    /// Binds `addr` (port 0: an ephemeral port) in the TCP port space and listens
    /// (rdma_bind_addr(3), rdma_listen(3)), registered with a reactor ([`AsyncSource::new`]).
    pub fn bind(addr: SocketAddr, backlog: i32) -> Result<AsyncListener> {
        AsyncListener::of(Listener::bind(addr, backlog)?)
    }

    /// As [`AsyncListener::bind`], on `device` ([`Listener::bind_on`]).
    pub fn bind_on(device: &rverbs::Device, addr: SocketAddr, backlog: i32) -> Result<AsyncListener> {
        AsyncListener::of(Listener::bind_on(device, addr, backlog)?)
    }

    fn of(listener: Listener) -> Result<AsyncListener> {
        let events = AsyncEventChannel::new(listener.channel())?;
        Ok(AsyncListener { listener, events })
    }

    /// The address listened on (with the port chosen).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection request (CONNECT_REQUEST). Cancellation-safe.
    pub async fn next_request(&self) -> Result<AsyncRequest> {
        let ev = self.events.event().await?;
        Ok(AsyncRequest { req: Request::from_event(ev)? })
    }
}

/// A connection request not yet answered ([`Request`]). Dropping it rejects it.
pub struct AsyncRequest {
    req: Request,
}

impl AsyncRequest {
    /// The requester's private data (56 bytes, zero-padded) and offered resources.
    pub fn param(&self) -> &ConnParam {
        self.req.param()
    }

    /// The requester's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.req.peer_addr()
    }

    /// Accepts with `qp` (moved to RTS) and `private_data` (≤ 196 bytes) and waits for
    /// the requester's RTU (rdma_accept(3), ESTABLISHED).
    pub async fn accept(self, qp: Qp, private_data: &[u8]) -> Result<AsyncConnection> {
        self.accept_with(qp, private_data, |_| Ok(())).await
    }

    /// As [`AsyncRequest::accept`], calling `ready` with the QP in INIT before the reply
    /// is sent: the place to post the receives the requester's first messages need.
    pub async fn accept_with(self, qp: Qp, private_data: &[u8], ready: impl FnOnce(&Qp) -> Result<()>) -> Result<AsyncConnection> {
        let conn = AsyncConnection::new(self.req.start_accept(qp, private_data, ready)?)?;
        let peer = conn.peer_addr();
        conn.events.expect(ACCEPTING, peer, EventKind::Established).await?;
        Ok(conn)
    }

    /// Rejects with `private_data` (≤ 148 bytes): the requester sees REJECTED, 28.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.req.reject(private_data)
    }
}

/// Connects `qp` (an RC QP of the device, in RESET) to the listener at `dst`, sending
/// `private_data` (≤ 56 bytes); resolving the address and the route each end within
/// `timeout` (rdma_resolve_addr(3), rdma_resolve_route(3), rdma_connect(3)).
pub async fn connect(dst: SocketAddr, qp: Qp, private_data: &[u8], timeout: Duration) -> Result<AsyncConnection> {
    connect_with(dst, qp, private_data, timeout, |_| Ok(())).await
}

/// As [`connect`], calling `ready` with the QP in INIT before the request is sent: the
/// place to post the receives the server's first messages need.
pub async fn connect_with(
    dst: SocketAddr,
    qp: Qp,
    private_data: &[u8],
    timeout: Duration,
    ready: impl FnOnce(&Qp) -> Result<()>,
) -> Result<AsyncConnection> {
    let mut conn = AsyncConnection::new(Connection::start_connect(dst, qp, timeout)?)?;
    conn.events.expect(CONNECTING, Some(dst), EventKind::AddrResolved).await?;
    conn.conn.resolve_route(timeout)?;
    conn.events.expect(CONNECTING, Some(dst), EventKind::RouteResolved).await?;
    conn.conn.send_request(private_data, ready)?;
    let ev = conn.events.expect(CONNECTING, Some(dst), conn.conn.answer()).await?;
    let peer_data = ev.conn.private_data.clone();
    drop(ev);
    conn.conn.complete(peer_data)?;
    Ok(conn)
}

/// An established connection ([`Connection`]) whose events are awaited. Dropping it
/// disconnects (if still connected) and destroys its id.
pub struct AsyncConnection {
    conn: Connection,
    events: AsyncEventChannel,
}

impl AsyncConnection {
    fn new(conn: Connection) -> Result<AsyncConnection> {
        let events = AsyncEventChannel::new(conn.channel())?;
        Ok(AsyncConnection { conn, events })
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.conn.dst_addr()
    }

    /// The connected QP.
    pub fn qp(&self) -> &Qp {
        self.conn.qp()
    }

    /// The private data the server accepted with (196 bytes, zero-padded); empty on the
    /// server side.
    pub fn peer_private_data(&self) -> &[u8] {
        self.conn.peer_private_data()
    }

    /// Waits for the peer to disconnect (DISCONNECTED; the QP is then in ERR); other
    /// events are skipped.
    pub async fn disconnected(&self) -> Result<()> {
        std::future::poll_fn(|cx| self.poll_disconnected(cx)).await
    }

    /// Polls for the peer's disconnection (DISCONNECTED); other events are skipped.
    pub fn poll_disconnected(&self, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        loop {
            if ready!(self.events.poll_event(cx))?.kind == EventKind::Disconnected {
                return Poll::Ready(self.conn.peer_disconnected());
            }
        }
    }

    /// Disconnects (rdma_disconnect(3)): the QP moves to ERR; the peer sees
    /// DISCONNECTED.
    pub fn disconnect(&self) -> Result<()> {
        self.conn.disconnect()
    }
}
