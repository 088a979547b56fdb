//! Listeners and connections with RAII: the safe way to use the connection manager from
//! Rust without handling events one by one.
//!
//! A [`Listener`] owns a listening id and its channel; [`Listener::next_request`] waits
//! for a connection request and gives a [`Request`] (the peer's private data, its
//! offered resources), which is accepted with a QP — giving a [`Connection`] once the
//! handshake completes — or rejected. [`connect`] resolves, connects a QP and returns the
//! [`Connection`] with the server's private data. Dropping a `Connection` disconnects and
//! destroys its id (the QP moves to ERR, the peer sees DISCONNECTED); dropping a
//! `Request` rejects it. Every wait is bounded by a timeout, and every channel has an fd
//! ([`Connection::fd`], [`Listener::fd`]) for poll/epoll or an async runtime's reactor.

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rverbs::{Qp, QpType};

use crate::channel::EventChannel;
use crate::error::{Error, Peer, Result};
use crate::rule::Rule;
use crate::event::{ConnParam, Event, EventKind};
use crate::handle::{CmId, PortSpace};

/// Waits up to `timeout` for the next event of `ch`, which should be `awaited` (the
/// step and the peer name the timeout).
fn wait_event(ch: &EventChannel, timeout: Duration, step: &'static str, peer: Option<SocketAddr>, awaited: EventKind) -> Result<Event> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(ev) = ch.try_get_event() {
            return Ok(ev);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::TimedOut { step, peer: Peer(peer), awaited, waited: timeout });
        }
        let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for event `want` of a connection step: another event is an
/// [`Error::Handshake`] that names the step, the peer and what happened.
fn expect_event(ch: &EventChannel, timeout: Duration, step: &'static str, peer: Option<SocketAddr>, want: EventKind) -> Result<Event> {
    let ev = wait_event(ch, timeout, step, peer, want)?;
    if ev.kind != want {
        return Err(Error::Handshake { step, peer: Peer(peer), event: ev.kind, status: ev.status });
    }
    Ok(ev)
}

/// A listening id (rdma_listen(3)) with its own event channel.
pub struct Listener {
    ch: EventChannel,
    id: CmId,
}

impl Listener {
    /// Binds `addr` (port 0: an ephemeral port) in the TCP port space and listens, on the
    /// listed device.
    pub fn bind(addr: SocketAddr, backlog: i32) -> Result<Listener> {
        Listener::listen_on(EventChannel::new()?, addr, backlog)
    }

    /// As [`Listener::bind`], on `device` (a device of its own configuration, such as a
    /// simulated host of `rverbs::DeviceConfig::addresses`): `addr` is one it serves
    /// ([`EventChannel::on`]). Requests and their connections stay on that device.
    pub fn bind_on(device: &rverbs::Device, addr: SocketAddr, backlog: i32) -> Result<Listener> {
        Listener::listen_on(EventChannel::on(device)?, addr, backlog)
    }

    fn listen_on(ch: EventChannel, addr: SocketAddr, backlog: i32) -> Result<Listener> {
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let l = Listener { ch, id };
        l.id.bind_addr(addr)?;
        l.id.listen(backlog)?;
        Ok(l)
    }

    /// The address listened on (with the port chosen).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.src_addr()
    }

    /// The channel's fd: readable while a request waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// Waits up to `timeout` for a connection request.
    pub fn next_request(&self, timeout: Duration) -> Result<Request> {
        let ev = wait_event(&self.ch, timeout, "listening on", self.local_addr(), EventKind::ConnectRequest)?;
        Request::from_event(ev)
    }

    /// The listener's channel (the async listener watches it).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn channel(&self) -> &EventChannel {
        &self.ch
    }
}

impl Request {
    /// The request that event `ev` of a listener announces, on a channel of its own.
    pub(crate) fn from_event(ev: Event) -> Result<Request> {
        if ev.kind != EventKind::ConnectRequest {
            return Err(Error::invalid("Listener::next_request", Rule::UnexpectedEvent { kind: ev.kind }));
        }
        let id = ev.id.clone();
        let param = ev.conn.clone();
        drop(ev);
        // The connection gets its own channel, so its events never mix with requests; of
        // the listener's device, as the id is.
        let ch = EventChannel::with_device(crate::engine::device_of(&id)?)?;
        id.migrate(&ch)?;
        Ok(Request { ch, id: Some(id), param })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.id.destroy();
    }
}

/// A connection request not yet answered. Dropping it rejects it.
pub struct Request {
    ch: EventChannel,
    id: Option<CmId>,
    param: ConnParam,
}

impl Request {
    /// The requester's private data (56 bytes, zero-padded) and offered resources.
    pub fn param(&self) -> &ConnParam {
        &self.param
    }

    /// The requester's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.as_ref().and_then(|i| i.dst_addr())
    }

    /// Accepts with `qp` (moved to RTS) and `private_data` (≤ 196 bytes); waits up to
    /// `timeout` for the requester's RTU.
    pub fn accept(self, qp: Qp, private_data: &[u8], timeout: Duration) -> Result<Connection> {
        self.accept_with(qp, private_data, timeout, |_| Ok(()))
    }

    /// As [`Request::accept`], calling `ready` with the QP once it is attached to the
    /// request's id and in INIT, before the reply is sent: the place to post the receives
    /// the requester's first messages need (rdma_accept(3): receives posted before
    /// accepting; a QP in RESET refuses them). An error from `ready` rejects the request
    /// and is returned.
    pub fn accept_with(
        self,
        qp: Qp,
        private_data: &[u8],
        timeout: Duration,
        ready: impl FnOnce(&Qp) -> Result<()>,
    ) -> Result<Connection> {
        let conn = self.start_accept(qp, private_data, ready)?;
        expect_event(&conn.ch, timeout, ACCEPTING, conn.id.dst_addr(), EventKind::Established)?;
        Ok(conn)
    }

    /// Accepting up to the wait for ESTABLISHED: the QP attached, `ready` called, the
    /// reply sent.
    pub(crate) fn start_accept(
        mut self,
        qp: Qp,
        private_data: &[u8],
        ready: impl FnOnce(&Qp) -> Result<()>,
    ) -> Result<Connection> {
        let id = self.id.take().expect("a request has its id until answered");
        let conn = Connection { ch: self.ch.clone(), id, qp: qp.clone(), peer_data: Vec::new() };
        conn.id.attach_qp(qp)?;
        if let Err(e) = ready(&conn.qp) {
            let _ = conn.id.reject(&[]);
            return Err(e);
        }
        let p = ConnParam {
            private_data: private_data.to_vec(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        conn.id.accept(Some(&p))?;
        Ok(conn)
    }

    /// Rejects with `private_data` (≤ 148 bytes): the requester sees REJECTED, 28.
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let id = self.id.take().expect("a request has its id until answered");
        let r = id.reject(private_data);
        let _ = id.destroy();
        r
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = id.reject(&[]);
            let _ = id.destroy();
        }
    }
}

/// Connects `qp` (an RC QP, in RESET) to the listener at `dst`, sending `private_data`
/// (≤ 56 bytes); each step waits up to `timeout`. The connection manager of the QP's
/// device runs the handshake (a QP of a configured device connects from the addresses
/// that device serves, [`EventChannel::on`]).
pub fn connect(dst: SocketAddr, qp: Qp, private_data: &[u8], timeout: Duration) -> Result<Connection> {
    connect_with(dst, qp, private_data, timeout, |_| Ok(()))
}

/// As [`connect`], calling `ready` with the QP once it is attached and in INIT, before the
/// connection request is sent: the place to post the receives the server's first
/// messages need (rdma_connect(3)). An error from `ready` ends the attempt and is
/// returned.
pub fn connect_with(
    dst: SocketAddr,
    qp: Qp,
    private_data: &[u8],
    timeout: Duration,
    ready: impl FnOnce(&Qp) -> Result<()>,
) -> Result<Connection> {
    let mut conn = Connection::start_connect(dst, qp, timeout)?;
    expect_event(&conn.ch, timeout, CONNECTING, Some(dst), EventKind::AddrResolved)?;
    conn.id.resolve_route(timeout.as_millis() as i32)?;
    expect_event(&conn.ch, timeout, CONNECTING, Some(dst), EventKind::RouteResolved)?;
    conn.send_request(private_data, ready)?;
    let ev = expect_event(&conn.ch, timeout, CONNECTING, Some(dst), EventKind::Established)?;
    conn.peer_data = ev.conn.private_data.clone();
    Ok(conn)
}

/// The steps of a connection, named in errors.
pub(crate) const CONNECTING: &str = "connecting to";
pub(crate) const ACCEPTING: &str = "accepting from";

impl Connection {
    /// Connecting, first step: an id on a channel of its own, resolving `dst` (its
    /// ADDR_RESOLVED or ADDR_ERROR comes within `timeout`).
    pub(crate) fn start_connect(dst: SocketAddr, qp: Qp, timeout: Duration) -> Result<Connection> {
        let ch = EventChannel::with_device(rverbs::capi_support::device_of_qp(&qp))?;
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let conn = Connection { ch, id, qp, peer_data: Vec::new() };
        conn.id.resolve_addr(None, dst, timeout.as_millis() as i32)?;
        Ok(conn)
    }

    /// Connecting, once the route is resolved: the QP attached, `ready` called, the
    /// request sent (rdma_connect(3)).
    pub(crate) fn send_request(&self, private_data: &[u8], ready: impl FnOnce(&Qp) -> Result<()>) -> Result<()> {
        self.id.attach_qp(self.qp.clone())?;
        ready(&self.qp)?;
        let p = ConnParam {
            private_data: private_data.to_vec(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        self.id.connect(&p)
    }

    /// The connection's channel and id (the async connection waits on them).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn parts(&self) -> (&EventChannel, &CmId) {
        (&self.ch, &self.id)
    }

    /// Keeps the server's private data of ESTABLISHED.
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn set_peer_data(&mut self, data: Vec<u8>) {
        self.peer_data = data;
    }
}

/// An established connection. Dropping it disconnects (if still connected) and destroys
/// its id.
pub struct Connection {
    ch: EventChannel,
    id: CmId,
    qp: Qp,
    peer_data: Vec<u8>,
}

impl Connection {
    /// The connected QP.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }

    /// The private data the server accepted with (196 bytes, zero-padded); empty on the
    /// server side.
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer_data
    }

    /// The connection's event fd: readable when the peer disconnects.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// Waits up to `timeout` for the peer to disconnect (DISCONNECTED).
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        loop {
            let ev = wait_event(&self.ch, timeout, "waiting for the disconnection of", self.id.dst_addr(), EventKind::Disconnected)?;
            if ev.kind == EventKind::Disconnected {
                return Ok(());
            }
        }
    }

    /// Disconnects (rdma_disconnect(3)): the QP moves to ERR; the peer sees
    /// DISCONNECTED.
    pub fn disconnect(&self) -> Result<()> {
        self.id.disconnect()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.id.disconnect();
        let _ = self.id.destroy();
    }
}

/// The listener's event fd ([`Listener::fd`]): readable while a connection request waits.
impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

/// The connection's event fd ([`Connection::fd`]): readable when the peer disconnects.
impl AsFd for Connection {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
