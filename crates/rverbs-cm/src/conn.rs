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
//!
//! With the feature `rdma-core`, the helpers run over librdmacm (the private
//! `rdma_core` module) when the QP is one of `rverbs`' rdma-core backend, and a listener when
//! `RVERBS_BACKEND=rdma-core` (or its device is the backend's): `examples/echo.rs` runs
//! unchanged on either (docs/rdma-core-backend.md, "rverbs-cm over librdmacm"). Each type
//! holds a private representation, the soft objects or the backend's.

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use rverbs::{Qp, QpType};

use crate::channel::EventChannel;
use crate::error::{Error, Peer, Result};
use crate::rule::Rule;
use crate::event::{ConnParam, Event, EventKind};
use crate::handle::{CmId, PortSpace};

/// Waits up to `timeout` for the next event of `ch`, which should be `awaited` (the
/// step and the peer name the timeout).
fn wait_event(ch: &EventChannel, timeout: Duration, step: &'static str, peer: Option<SocketAddr>, awaited: EventKind) -> Result<Event> {
    crate::wait::next_event(ch.fd(), timeout, step, peer, awaited, || Ok(ch.try_get_event()))
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
    repr: ListenerRepr,
}

enum ListenerRepr {
    Soft { ch: EventChannel, id: CmId },
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::conn::Listening),
}

/// Whether `RVERBS_BACKEND` asks for rverbs' rdma-core backend (as `rverbs::devices`
/// reads it): a listener made without a device then listens through librdmacm.
#[cfg(feature = "rdma-core")]
fn backend_wanted() -> Result<bool> {
    Ok(rverbs::listed_backend()? == rverbs::Backend::RdmaCore)
}

/// Whether `qp` is a QP of rverbs' rdma-core backend.
#[cfg(feature = "rdma-core")]
fn is_native(qp: &Qp) -> bool {
    qp.pd().context().backend() == rverbs::Backend::RdmaCore
}

/// `EOPNOTSUPP` of a soft helper's step given a QP of the rdma-core backend, or the
/// other way round.
#[cfg(feature = "rdma-core")]
fn foreign(what: &'static str) -> Error {
    Error::Verbs(rverbs::Error::Unsupported { verb: "rverbs_cm::conn", what })
}

impl Listener {
    /// Binds `addr` (port 0: an ephemeral port) in the TCP port space and listens, on the
    /// listed device.
    ///
    /// With the feature `rdma-core` and `RVERBS_BACKEND=rdma-core`, it listens through
    /// librdmacm instead, and its requests are accepted with QPs of that backend.
    pub fn bind(addr: SocketAddr, backlog: i32) -> Result<Listener> {
        #[cfg(feature = "rdma-core")]
        if backend_wanted()? {
            return Ok(Listener { repr: ListenerRepr::Native(crate::rdma_core::conn::Listening::bind(addr, backlog)?) });
        }
        Listener::listen_on(EventChannel::new()?, addr, backlog)
    }

    /// As [`Listener::bind`], on `device` (a device of its own configuration, such as a
    /// simulated host of `rverbs::DeviceConfig::addresses`): `addr` is one it serves
    /// ([`EventChannel::on`]). Requests and their connections stay on that device.
    ///
    /// A `device` of rverbs' rdma-core backend listens through librdmacm (which picks
    /// the device of `addr` itself).
    pub fn bind_on(device: &rverbs::Device, addr: SocketAddr, backlog: i32) -> Result<Listener> {
        #[cfg(feature = "rdma-core")]
        if device.backend() == rverbs::Backend::RdmaCore {
            return Ok(Listener { repr: ListenerRepr::Native(crate::rdma_core::conn::Listening::bind(addr, backlog)?) });
        }
        Listener::listen_on(EventChannel::on(device)?, addr, backlog)
    }

    fn listen_on(ch: EventChannel, addr: SocketAddr, backlog: i32) -> Result<Listener> {
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let bound = id.bind_addr(addr).and_then(|()| id.listen(backlog));
        if let Err(e) = bound {
            let _ = id.destroy();
            return Err(e);
        }
        Ok(Listener { repr: ListenerRepr::Soft { ch, id } })
    }

    /// The address listened on (with the port chosen).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.repr {
            ListenerRepr::Soft { id, .. } => id.src_addr(),
            #[cfg(feature = "rdma-core")]
            ListenerRepr::Native(l) => l.local_addr(),
        }
    }

    /// The channel's fd: readable while a request waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match &self.repr {
            ListenerRepr::Soft { ch, .. } => ch.fd(),
            #[cfg(feature = "rdma-core")]
            ListenerRepr::Native(l) => l.fd(),
        }
    }

    /// Waits up to `timeout` for a connection request.
    pub fn next_request(&self, timeout: Duration) -> Result<Request> {
        match &self.repr {
            ListenerRepr::Soft { ch, .. } => {
                let ev = wait_event(ch, timeout, "listening on", self.local_addr(), EventKind::ConnectRequest)?;
                Request::from_soft_event(ev)
            }
            #[cfg(feature = "rdma-core")]
            ListenerRepr::Native(l) => {
                let (pending, param) = l.next_request(timeout)?;
                Ok(Request { repr: RequestRepr::Native(pending), param })
            }
        }
    }

    /// The listener's channel (the async listener watches it).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn channel(&self) -> crate::objects::EventChannel {
        match &self.repr {
            ListenerRepr::Soft { ch, .. } => crate::objects::EventChannel::from(ch.clone()),
            #[cfg(feature = "rdma-core")]
            ListenerRepr::Native(l) => crate::objects::EventChannel::from(l.channel().clone()),
        }
    }
}

impl Request {
    /// The request that event `ev` of a listener's channel ([`Listener::channel`])
    /// announces, on a channel of its own.
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn from_event(ev: crate::objects::Event) -> Result<Request> {
        if ev.kind != EventKind::ConnectRequest {
            return Err(Error::invalid("Listener::next_request", Rule::UnexpectedEvent { kind: ev.kind }));
        }
        // The public event holds the parameters (moved out of the held one).
        let param = ev.conn.clone();
        match ev.into_held() {
            crate::objects::Held::Soft(ev) => {
                let id = ev.id.clone();
                drop(ev);
                Request::soft(id, param)
            }
            #[cfg(feature = "rdma-core")]
            crate::objects::Held::Native(ev) => {
                let (pending, _) = crate::rdma_core::conn::Pending::of_event(ev)?;
                Ok(Request { repr: RequestRepr::Native(pending), param })
            }
        }
    }

    /// The request that soft event `ev` of a listener announces, on a channel of its own.
    fn from_soft_event(ev: Event) -> Result<Request> {
        if ev.kind != EventKind::ConnectRequest {
            return Err(Error::invalid("Listener::next_request", Rule::UnexpectedEvent { kind: ev.kind }));
        }
        let id = ev.id.clone();
        let param = ev.conn.clone();
        drop(ev);
        Request::soft(id, param)
    }

    /// The request of soft id `id` (of a connection request) with the requester's
    /// `param`, on a channel of its own.
    fn soft(id: CmId, param: ConnParam) -> Result<Request> {
        // The connection gets its own channel, so its events never mix with requests; of
        // the listener's device, as the id is.
        let ch = EventChannel::with_device(crate::engine::device_of(&id)?)?;
        id.migrate(&ch)?;
        Ok(Request { repr: RequestRepr::Soft(SoftPending { ch, id, answered: false }), param })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        match &self.repr {
            ListenerRepr::Soft { id, .. } => {
                let _ = id.destroy();
            }
            // The backend's id is destroyed when dropped.
            #[cfg(feature = "rdma-core")]
            ListenerRepr::Native(_) => {}
        }
    }
}

/// A connection request not yet answered. Dropping it rejects it.
pub struct Request {
    repr: RequestRepr,
    param: ConnParam,
}

enum RequestRepr {
    Soft(SoftPending),
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::conn::Pending),
}

/// A soft request's id on its own channel: dropping it unanswered rejects the request
/// and destroys the id.
struct SoftPending {
    ch: EventChannel,
    id: CmId,
    /// Accepted or rejected: dropping no longer rejects.
    answered: bool,
}

impl Drop for SoftPending {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.id.reject(&[]);
            let _ = self.id.destroy();
        }
    }
}

impl Request {
    /// The requester's private data (56 bytes, zero-padded) and offered resources.
    pub fn param(&self) -> &ConnParam {
        &self.param
    }

    /// The requester's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match &self.repr {
            RequestRepr::Soft(p) => p.id.dst_addr(),
            #[cfg(feature = "rdma-core")]
            RequestRepr::Native(p) => p.peer_addr(),
        }
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
        match &conn.repr {
            ConnRepr::Soft { ch, id } => {
                expect_event(ch, timeout, ACCEPTING, id.dst_addr(), EventKind::Established)?;
            }
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => crate::rdma_core::conn::Pending::finish_accept(link, timeout)?,
        }
        Ok(conn)
    }

    /// Accepting up to the wait for ESTABLISHED: the QP attached, `ready` called, the
    /// reply sent. A request over librdmacm takes a QP of rverbs' rdma-core backend, a
    /// soft request a soft QP: the other is `EOPNOTSUPP`.
    pub(crate) fn start_accept(
        self,
        qp: Qp,
        private_data: &[u8],
        ready: impl FnOnce(&Qp) -> Result<()>,
    ) -> Result<Connection> {
        let p = ConnParam {
            private_data: private_data.to_vec(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        match self.repr {
            RequestRepr::Soft(mut pending) => {
                // A mismatched QP drops `pending` unanswered: the request is rejected.
                #[cfg(feature = "rdma-core")]
                if is_native(&qp) {
                    return Err(foreign("a QP of the rdma-core backend on a request of the soft device"));
                }
                // From here the connection answers: dropped on an error, it disconnects
                // and destroys the id.
                pending.answered = true;
                let (ch, id) = (pending.ch.clone(), pending.id.clone());
                let conn = Connection { repr: ConnRepr::Soft { ch, id: id.clone() }, qp: qp.clone(), peer_data: Vec::new() };
                id.attach_qp(qp)?;
                if let Err(e) = ready(&conn.qp) {
                    let _ = id.reject(&[]);
                    return Err(e);
                }
                id.accept(Some(&p))?;
                Ok(conn)
            }
            #[cfg(feature = "rdma-core")]
            RequestRepr::Native(pending) => {
                if !is_native(&qp) {
                    return Err(foreign("a soft QP on a request over librdmacm"));
                }
                let link = pending.start_accept(&qp, p, ready)?;
                Ok(Connection { repr: ConnRepr::Native(link), qp, peer_data: Vec::new() })
            }
        }
    }

    /// Rejects with `private_data` (≤ 148 bytes): the requester sees REJECTED, 28.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        match self.repr {
            RequestRepr::Soft(mut pending) => {
                pending.answered = true;
                let r = pending.id.reject(private_data);
                let _ = pending.id.destroy();
                r
            }
            #[cfg(feature = "rdma-core")]
            RequestRepr::Native(pending) => pending.reject(private_data),
        }
    }
}

/// Connects `qp` (an RC QP, in RESET) to the listener at `dst`, sending `private_data`
/// (≤ 56 bytes); each step waits up to `timeout`. The connection manager of the QP's
/// device runs the handshake (a QP of a configured device connects from the addresses
/// that device serves, [`EventChannel::on`]); a QP of rverbs' rdma-core backend
/// connects through librdmacm (feature `rdma-core`).
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
    #[cfg(feature = "rdma-core")]
    if is_native(&qp) {
        let (link, peer_data) = crate::rdma_core::conn::Link::connect(dst, &qp, request_param(private_data), timeout, ready)?;
        return Ok(Connection { repr: ConnRepr::Native(link), qp, peer_data });
    }
    let mut conn = Connection::start_connect(dst, qp, timeout)?;
    let (ch, id) = conn.parts()?;
    expect_event(ch, timeout, CONNECTING, Some(dst), EventKind::AddrResolved)?;
    id.resolve_route(timeout.as_millis() as i32)?;
    expect_event(ch, timeout, CONNECTING, Some(dst), EventKind::RouteResolved)?;
    conn.send_request(private_data, ready)?;
    let (ch, _) = conn.parts()?;
    let ev = expect_event(ch, timeout, CONNECTING, Some(dst), EventKind::Established)?;
    conn.peer_data = ev.conn.private_data.clone();
    Ok(conn)
}

/// The parameters of a connection request: `private_data`, the most resources, 7
/// retries and RNR retries.
fn request_param(private_data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: private_data.to_vec(),
        responder_resources: 0xff,
        initiator_depth: 0xff,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

pub(crate) use crate::error::{ACCEPTING, CONNECTING};

impl Connection {
    /// Connecting, first step: an id on a channel of its own, resolving `dst` (its
    /// ADDR_RESOLVED or ADDR_ERROR comes within `timeout`); over librdmacm for a QP of
    /// the rdma-core backend.
    pub(crate) fn start_connect(dst: SocketAddr, qp: Qp, timeout: Duration) -> Result<Connection> {
        #[cfg(feature = "rdma-core")]
        if is_native(&qp) {
            let link = crate::rdma_core::conn::Link::start(dst, timeout)?;
            return Ok(Connection { repr: ConnRepr::Native(link), qp, peer_data: Vec::new() });
        }
        let ch = EventChannel::with_device(rverbs::capi_support::device_of_qp(&qp))?;
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let conn = Connection { repr: ConnRepr::Soft { ch, id }, qp, peer_data: Vec::new() };
        conn.parts()?.1.resolve_addr(None, dst, timeout.as_millis() as i32)?;
        Ok(conn)
    }

    /// Connecting, once the address is resolved: rdma_resolve_route(3), ROUTE_RESOLVED
    /// or ROUTE_ERROR within `timeout`.
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn resolve_route(&self, timeout: Duration) -> Result<()> {
        match &self.repr {
            ConnRepr::Soft { id, .. } => id.resolve_route(timeout.as_millis() as i32),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.resolve_route(timeout),
        }
    }

    /// Connecting, once the route is resolved: the QP attached (over librdmacm: moved to
    /// INIT), `ready` called, the request sent (rdma_connect(3)); [`Connection::answer`]
    /// follows.
    pub(crate) fn send_request(&self, private_data: &[u8], ready: impl FnOnce(&Qp) -> Result<()>) -> Result<()> {
        match &self.repr {
            ConnRepr::Soft { id, .. } => {
                id.attach_qp(self.qp.clone())?;
                ready(&self.qp)?;
                id.connect(&request_param(private_data))
            }
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.send_request(&self.qp, request_param(private_data), ready),
        }
    }

    /// The event that answers the request: ESTABLISHED (the soft connection manager
    /// moves the attached QP), or CONNECT_RESPONSE over librdmacm (an id without a QP).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn answer(&self) -> EventKind {
        match &self.repr {
            ConnRepr::Soft { .. } => EventKind::Established,
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(_) => crate::rdma_core::conn::Link::ANSWER,
        }
    }

    /// Connecting, once [`Connection::answer`] arrived with the server's `peer_data`:
    /// over librdmacm the QP moves to RTR and RTS and the RTU goes (rdma_establish(3)).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn complete(&mut self, peer_data: Vec<u8>) -> Result<()> {
        #[cfg(feature = "rdma-core")]
        if let ConnRepr::Native(link) = &self.repr {
            link.complete(&self.qp)?;
        }
        self.peer_data = peer_data;
        Ok(())
    }

    /// The connection's channel (the awaited connection watches it).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn channel(&self) -> crate::objects::EventChannel {
        match &self.repr {
            ConnRepr::Soft { ch, .. } => crate::objects::EventChannel::from(ch.clone()),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => crate::objects::EventChannel::from(link.channel().clone()),
        }
    }

    /// The peer disconnected (DISCONNECTED arrived): over librdmacm the QP moves to ERR
    /// (the soft connection manager moved it already).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn peer_disconnected(&self) -> Result<()> {
        match &self.repr {
            ConnRepr::Soft { .. } => Ok(()),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.peer_disconnected(&self.qp),
        }
    }

    /// The connection's channel and id (the soft helpers wait on them); `EOPNOTSUPP` for
    /// a connection over librdmacm.
    pub(crate) fn parts(&self) -> Result<(&EventChannel, &CmId)> {
        match &self.repr {
            ConnRepr::Soft { ch, id } => Ok((ch, id)),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(_) => Err(foreign("the soft connection's channel and id over librdmacm")),
        }
    }

}

/// An established connection. Dropping it disconnects (if still connected) and destroys
/// its id.
pub struct Connection {
    repr: ConnRepr,
    qp: Qp,
    peer_data: Vec<u8>,
}

enum ConnRepr {
    Soft { ch: EventChannel, id: CmId },
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::conn::Link),
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
        match &self.repr {
            ConnRepr::Soft { ch, .. } => ch.fd(),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.fd(),
        }
    }

    /// The peer's address.
    pub(crate) fn dst_addr(&self) -> Option<SocketAddr> {
        match &self.repr {
            ConnRepr::Soft { id, .. } => id.dst_addr(),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.dst_addr(),
        }
    }

    /// Waits up to `timeout` for the peer to disconnect (DISCONNECTED).
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        match &self.repr {
            ConnRepr::Soft { ch, .. } => loop {
                let ev = wait_event(ch, timeout, "waiting for the disconnection of", self.dst_addr(), EventKind::Disconnected)?;
                if ev.kind == EventKind::Disconnected {
                    return Ok(());
                }
            },
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.wait_disconnected(&self.qp, timeout),
        }
    }

    /// Disconnects (rdma_disconnect(3)): the QP moves to ERR; the peer sees
    /// DISCONNECTED.
    pub fn disconnect(&self) -> Result<()> {
        match &self.repr {
            ConnRepr::Soft { id, .. } => id.disconnect(),
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(link) => link.disconnect(&self.qp),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.disconnect();
        match &self.repr {
            ConnRepr::Soft { id, .. } => {
                let _ = id.destroy();
            }
            // The backend's id is destroyed when dropped.
            #[cfg(feature = "rdma-core")]
            ConnRepr::Native(_) => {}
        }
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
