//! The RAII helpers' steps over librdmacm ([`crate::Listener`], [`crate::connect`],
//! [`crate::Request`], [`crate::Connection`] hold these for a QP of `rverbs`' rdma-core
//! backend): the same handshake as the soft helpers, every wait bounded.
//!
//! The application's QP was created on its own context of the device, and librdmacm
//! opens its own (an id's `verbs`), so the QP is not made on the id (rdma_create_qp(3)
//! wants the id's context): the helpers manage it as rdma_cm(7) lets an application do,
//! moving it with the attributes of rdma_init_qp_attr(3) and naming it by number in the
//! connection parameters (`qp_num`). The active side gets CONNECT_RESPONSE, moves the
//! QP to RTR and RTS and completes with rdma_establish(3); the passive side moves it to
//! INIT, RTR and RTS before rdma_accept(3); a disconnection moves it to ERR, which
//! librdmacm does only for a QP it made.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rverbs::{Qp, QpAttr, QpAttrMask, QpState, QpType};

use super::channel::EventChannel;
use super::event::Event;
use super::id::CmId;
use crate::error::{Error, Peer, Result, ACCEPTING, CONNECTING};
use crate::event::{ConnParam, EventKind};
use crate::handle::PortSpace;
use crate::rule::Rule;

/// Waits up to `timeout` for the next event of `ch` (the step, the peer and the event
/// awaited name the timeout).
fn wait_event(ch: &EventChannel, timeout: Duration, step: &'static str, peer: Option<SocketAddr>, awaited: EventKind) -> Result<Event> {
    crate::wait::next_event(ch.fd(), timeout, step, peer, awaited, || ch.poll_event())
}

/// Waits for event `want`: another is an [`Error::Handshake`].
fn expect_event(ch: &EventChannel, timeout: Duration, step: &'static str, peer: Option<SocketAddr>, want: EventKind) -> Result<Event> {
    let ev = wait_event(ch, timeout, step, peer, want)?;
    if ev.kind != want {
        return Err(Error::Handshake { step, peer: Peer(peer), event: ev.kind, status: ev.status });
    }
    Ok(ev)
}

/// A timeout in the milliseconds rdma_resolve_addr(3) takes (at most `i32::MAX`).
fn millis(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)
}

/// Moves `qp` to `state` with the attributes librdmacm gives for the connection of `id`
/// (rdma_init_qp_attr(3)).
fn move_qp(id: &CmId, qp: &Qp, state: QpState) -> Result<()> {
    let (attr, mask) = id.init_qp_attr(state)?;
    qp.modify(&attr, mask)?;
    Ok(())
}

/// Moves `qp` to ERR: its work requests flush (what rdma_disconnect(3) does to a QP
/// librdmacm made).
fn qp_to_err(qp: &Qp) -> Result<()> {
    qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, QpAttrMask::STATE)?;
    Ok(())
}

/// A listening id on its own channel.
pub(crate) struct Listening {
    ch: EventChannel,
    id: CmId,
}

impl Listening {
    /// Binds `addr` in the TCP port space and listens (rdma_bind_addr(3),
    /// rdma_listen(3)).
    pub(crate) fn bind(addr: SocketAddr, backlog: i32) -> Result<Listening> {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        id.bind_addr(addr)?;
        id.listen(backlog)?;
        Ok(Listening { ch, id })
    }

    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.id.src_addr()
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// Waits up to `timeout` for a connection request, whose id then gets a channel of
    /// its own (rdma_migrate_id(3)).
    pub(crate) fn next_request(&self, timeout: Duration) -> Result<(Pending, ConnParam)> {
        let ev = wait_event(&self.ch, timeout, "listening on", self.local_addr(), EventKind::ConnectRequest)?;
        Pending::of_event(ev)
    }

    /// The listening id's channel (the awaited listener watches it).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn channel(&self) -> &EventChannel {
        &self.ch
    }
}

impl Pending {
    /// The request that event `ev` of a listener announces, its id moved to a channel of
    /// its own (rdma_migrate_id(3)), and the requester's parameters.
    pub(crate) fn of_event(ev: Event) -> Result<(Pending, ConnParam)> {
        if ev.kind != EventKind::ConnectRequest {
            return Err(Error::invalid("Listener::next_request", Rule::UnexpectedEvent { kind: ev.kind }));
        }
        let id = ev.id.clone();
        let param = ev.conn.clone();
        drop(ev);
        let ch = EventChannel::new()?;
        id.migrate(&ch)?;
        Ok((Pending { ch, id, answered: false }, param))
    }
}

/// A connection request not yet answered: dropping it rejects it.
pub(crate) struct Pending {
    ch: EventChannel,
    id: CmId,
    /// Accepted or rejected: dropping no longer rejects.
    answered: bool,
}

impl Pending {
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.dst_addr()
    }

    /// Accepting up to the wait for ESTABLISHED: `qp` to INIT, `ready`, RTR and RTS, the
    /// reply sent naming it.
    pub(crate) fn start_accept(mut self, qp: &Qp, param: ConnParam, ready: impl FnOnce(&Qp) -> Result<()>) -> Result<Link> {
        self.answered = true;
        let link = Link { ch: self.ch.clone(), id: self.id.clone() };
        let prepared = move_qp(&link.id, qp, QpState::Init).and_then(|()| ready(qp));
        let prepared = prepared.and_then(|()| move_qp(&link.id, qp, QpState::Rtr)).and_then(|()| move_qp(&link.id, qp, QpState::Rts));
        if let Err(e) = prepared {
            let _ = link.id.reject(&[]);
            return Err(e);
        }
        link.id.accept(Some(&ConnParam { qp_num: qp.qp_num(), ..param }))?;
        Ok(link)
    }

    /// Waits for the requester's RTU (ESTABLISHED).
    pub(crate) fn finish_accept(link: &Link, timeout: Duration) -> Result<()> {
        expect_event(&link.ch, timeout, ACCEPTING, link.id.dst_addr(), EventKind::Established)?;
        Ok(())
    }

    /// Rejects with `private_data` (rdma_reject(3)).
    pub(crate) fn reject(mut self, private_data: &[u8]) -> Result<()> {
        self.answered = true;
        self.id.reject(private_data)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.id.reject(&[]);
        }
    }
}

/// A connection's id on its own channel: established, or being connected.
pub(crate) struct Link {
    ch: EventChannel,
    id: CmId,
}

impl Link {
    /// Connects `qp` to the listener at `dst` (rdma_resolve_addr(3),
    /// rdma_resolve_route(3), rdma_connect(3), rdma_establish(3)); returns the server's
    /// private data.
    pub(crate) fn connect(dst: SocketAddr, qp: &Qp, param: ConnParam, timeout: Duration, ready: impl FnOnce(&Qp) -> Result<()>) -> Result<(Link, Vec<u8>)> {
        let link = Link::start(dst, timeout)?;
        expect_event(&link.ch, timeout, CONNECTING, Some(dst), EventKind::AddrResolved)?;
        link.resolve_route(timeout)?;
        expect_event(&link.ch, timeout, CONNECTING, Some(dst), EventKind::RouteResolved)?;
        link.send_request(qp, param, ready)?;
        let ev = expect_event(&link.ch, timeout, CONNECTING, Some(dst), Link::ANSWER)?;
        let peer_data = ev.conn.private_data.clone();
        drop(ev);
        link.complete(qp)?;
        Ok((link, peer_data))
    }

    /// Connecting, first step: an id on a channel of its own, resolving `dst`
    /// (rdma_resolve_addr(3)); ADDR_RESOLVED or ADDR_ERROR follows within `timeout`.
    pub(crate) fn start(dst: SocketAddr, timeout: Duration) -> Result<Link> {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let link = Link { ch, id };
        link.id.resolve_addr(None, dst, millis(timeout))?;
        Ok(link)
    }

    /// Connecting, once the address is resolved: rdma_resolve_route(3).
    pub(crate) fn resolve_route(&self, timeout: Duration) -> Result<()> {
        self.id.resolve_route(millis(timeout))
    }

    /// Connecting, once the route is resolved: `qp` to INIT, `ready`, the request sent
    /// naming it (rdma_connect(3)); CONNECT_RESPONSE ([`Link::ANSWER`]) follows.
    pub(crate) fn send_request(&self, qp: &Qp, param: ConnParam, ready: impl FnOnce(&Qp) -> Result<()>) -> Result<()> {
        move_qp(&self.id, qp, QpState::Init)?;
        ready(qp)?;
        self.id.connect(&ConnParam { qp_num: qp.qp_num(), ..param })
    }

    /// The event that answers a request of an id without a QP (rdma_connect(3)).
    pub(crate) const ANSWER: EventKind = EventKind::ConnectResponse;

    /// Connecting, after CONNECT_RESPONSE: `qp` to RTR and RTS, then the RTU
    /// (rdma_establish(3)). A QP that cannot move rejects, so the server does not wait
    /// for an RTU that will not come.
    pub(crate) fn complete(&self, qp: &Qp) -> Result<()> {
        let moved = move_qp(&self.id, qp, QpState::Rtr).and_then(|()| move_qp(&self.id, qp, QpState::Rts));
        if let Err(e) = moved {
            let _ = self.id.reject(&[]);
            return Err(e);
        }
        self.id.establish()
    }

    /// The connection's channel (the awaited connection watches it).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn channel(&self) -> &EventChannel {
        &self.ch
    }

    /// The peer disconnected (DISCONNECTED arrived): `qp` moves to ERR, as librdmacm
    /// does only for a QP it made.
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn peer_disconnected(&self, qp: &Qp) -> Result<()> {
        qp_to_err(qp)
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    pub(crate) fn dst_addr(&self) -> Option<SocketAddr> {
        self.id.dst_addr()
    }

    /// Waits up to `timeout` for DISCONNECTED; `qp` then moves to ERR.
    pub(crate) fn wait_disconnected(&self, qp: &Qp, timeout: Duration) -> Result<()> {
        loop {
            let ev = wait_event(&self.ch, timeout, "waiting for the disconnection of", self.dst_addr(), EventKind::Disconnected)?;
            if ev.kind == EventKind::Disconnected {
                return qp_to_err(qp);
            }
        }
    }

    /// Disconnects (rdma_disconnect(3)) and moves `qp` to ERR.
    pub(crate) fn disconnect(&self, qp: &Qp) -> Result<()> {
        let r = self.id.disconnect();
        qp_to_err(qp)?;
        r
    }
}
