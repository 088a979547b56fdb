//! Endpoints (`struct rpma_ep`) and connection requests (`struct rpma_conn_req`).
//!
//! How librpma uses rdma_cm(7), and so how these types use [`rverbs_cm`]: a listening
//! id on its own event channel ([`Endpoint::listen`], `rdma_listen(id, 0)`); each
//! CONNECT_REQUEST taken from it gets a CQ (and optionally a receive CQ), a QP created on
//! the new id (`rdma_create_qp_ex`: [`CmId::attach_qp`], the QP goes to INIT so receives
//! can be posted before the connection is accepted), and is acknowledged before
//! accepting; each connection has its own event channel (`rdma_migrate_id`). An active
//! request resolves the address and route with the configuration's timeout and creates
//! its queues the same way. Accept and connect both offer responder resources and
//! initiator depth 0xFF (the device maximum), flow control 1, retry count 7 and RNR
//! retry count 7.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rverbs::QpType;
use rverbs_cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};

use crate::cfg::ConnCfg;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::mr::MrLocal;
use crate::peer::Peer;
use crate::queues::Queues;
use crate::recv::post_recv;
use crate::util;

/// The connection parameters librpma connects and accepts with.
fn conn_param(private_data: Option<&[u8]>) -> Result<ConnParam> {
    let pd = match private_data {
        // rpma_conn_req_connect(3): a private data structure with no bytes is invalid;
        // its length is a uint8_t.
        Some(p) if p.is_empty() || p.len() > usize::from(u8::MAX) => return Err(Error::Inval),
        Some(p) => p.to_vec(),
        None => Vec::new(),
    };
    Ok(ConnParam {
        private_data: pd,
        responder_resources: 0xff,
        initiator_depth: 0xff,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    })
}

/// A listening endpoint (`struct rpma_ep`, rpma_ep_listen(3)): a listening connection
/// id of the TCP port space on its own event channel. Dropping it shuts it down;
/// established connections survive.
#[derive(Debug)]
pub struct Endpoint {
    peer: Peer,
    ch: EventChannel,
    id: CmId,
    shut: bool,
}

impl Endpoint {
    /// Listens at `addr` (an address of this host; a wildcard address listens on all)
    /// and `port` (0: an ephemeral port, see [`Endpoint::local_addr`]) for connection
    /// requests (rpma_ep_listen(3)), with the maximum backlog.
    ///
    /// Errors: `Provider` if the address cannot be bound (`EADDRINUSE`,
    /// `EADDRNOTAVAIL`) or listened on.
    pub fn listen(peer: &Peer, addr: &str, port: u16) -> Result<Endpoint> {
        let sa = util::lookup(addr, port)?;
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let ep = Endpoint { peer: peer.clone(), ch, id, shut: false };
        ep.id.bind_addr(sa)?;
        ep.id.listen(0)?;
        Ok(ep)
    }

    /// The address listened on, with the port chosen.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.src_addr()
    }

    /// The descriptor of the endpoint's event channel (rpma_ep_get_fd(3)): readable
    /// exactly while a connection request waits. It may be made non-blocking; then
    /// [`Endpoint::next_conn_req`] fails with `NoEvent` when none waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// Takes the next connection request (rpma_ep_next_conn_req(3)), blocking until one
    /// arrives unless the fd is non-blocking. The request gets the queues `cfg` (or the
    /// default configuration) describes and its own event channel; it carries the
    /// requester's private data ([`ConnReq::private_data`]).
    ///
    /// Errors: `NoEvent` (non-blocking fd, no request); `Inval` if the event is not a
    /// connection request (the event is acknowledged); `Provider` if taking the event or
    /// creating the queues fails (the request is then rejected).
    pub fn next_conn_req(&self, cfg: Option<&ConnCfg>) -> Result<ConnReq> {
        self.take_request(cfg, None)
    }

    /// As [`Endpoint::next_conn_req`], waiting at most `timeout` (an rverbs extension).
    ///
    /// Errors: those of [`Endpoint::next_conn_req`]; `Provider(ETIMEDOUT)` when the
    /// timeout passes.
    pub fn next_conn_req_timeout(&self, cfg: Option<&ConnCfg>, timeout: Duration) -> Result<ConnReq> {
        self.take_request(cfg, Some(timeout))
    }

    fn take_request(&self, cfg: Option<&ConnCfg>, timeout: Option<Duration>) -> Result<ConnReq> {
        let ev = util::cm_event(&self.ch, timeout)?;
        if ev.kind != EventKind::ConnectRequest {
            return Err(Error::Inval);
        }
        let id = ev.id.clone();
        let private_data = ev.conn.private_data.clone();
        let cfg = cfg.cloned().unwrap_or_default();
        let built = (|| -> Result<(Queues, EventChannel)> {
            let q = Queues::new(&self.peer, &id, &cfg)?;
            Ok((q, EventChannel::new()?))
        })();
        // librpma acknowledges the request before accepting it.
        drop(ev);
        let (q, ch) = match built {
            Ok(b) => b,
            Err(e) => {
                let _ = id.reject(&[]);
                let _ = id.destroy();
                return Err(e);
            }
        };
        let req = ConnReq { peer: self.peer.clone(), id: Some(id), ch, q: Some(q), private_data: Some(private_data) };
        // The connection's own channel: its events never mix with the requests.
        req.id().migrate(&req.ch)?;
        Ok(req)
    }

    /// Shuts the endpoint down (rpma_ep_shutdown(3)): destroys the listening id (requests
    /// not yet taken are rejected). Dropping the endpoint does the same.
    ///
    /// Errors: `Provider` if rdma_destroy_id(3) fails.
    pub fn shutdown(mut self) -> Result<()> {
        self.shut = true;
        self.id.clone().destroy().map_err(Error::from)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if !self.shut {
            let _ = self.id.clone().destroy();
        }
    }
}

/// A connection request (`struct rpma_conn_req`): an id with its QP and CQs, not yet
/// connected. Active ones come from [`ConnReq::new`], passive ones from
/// [`Endpoint::next_conn_req`]. [`ConnReq::connect`] consumes it; dropping it instead
/// deletes it (rpma_conn_req_delete(3): a passive request is rejected).
#[derive(Debug)]
pub struct ConnReq {
    peer: Peer,
    id: Option<CmId>,
    ch: EventChannel,
    q: Option<Queues>,
    /// The requester's private data (passive requests only).
    private_data: Option<Vec<u8>>,
}

impl ConnReq {
    /// An active connection request to `addr`:`port` (rpma_conn_req_new(3)): resolves
    /// the address and the route, each within `cfg`'s timeout, and creates the queues.
    ///
    /// Errors: `Provider` if the address cannot be looked up or resolved (e.g.
    /// `ETIMEDOUT`, `EHOSTUNREACH`) or the queues cannot be created.
    pub fn new(peer: &Peer, addr: &str, port: u16, cfg: Option<&ConnCfg>) -> Result<ConnReq> {
        let cfg = cfg.cloned().unwrap_or_default();
        let dst = util::lookup(addr, port)?;
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
        let ms = i32::try_from(cfg.timeout().as_millis()).unwrap_or(i32::MAX);
        let setup = (|| -> Result<Queues> {
            id.resolve_addr(None, dst, ms)?;
            for want in [EventKind::AddrResolved, EventKind::RouteResolved] {
                let ev = util::cm_event(&ch, Some(cfg.timeout()))?;
                if ev.kind != want {
                    return Err(Error::Provider(if ev.status < 0 { -ev.status } else { libc::EHOSTUNREACH }));
                }
                drop(ev);
                if want == EventKind::AddrResolved {
                    id.resolve_route(ms)?;
                }
            }
            Queues::new(peer, &id, &cfg)
        })();
        match setup {
            Ok(q) => Ok(ConnReq { peer: peer.clone(), id: Some(id), ch, q: Some(q), private_data: None }),
            Err(e) => {
                let _ = id.destroy();
                Err(e)
            }
        }
    }

    fn id(&self) -> &CmId {
        self.id.as_ref().expect("a request has its id until consumed")
    }

    fn queues(&self) -> &Queues {
        self.q.as_ref().expect("a request has its queues until consumed")
    }

    /// Whether the request came from an endpoint (the passive side).
    pub fn is_passive(&self) -> bool {
        self.private_data.is_some()
    }

    /// The requester's private data (rpma_conn_req_get_private_data(3)): on the passive
    /// side the bytes the requester connected with, zero-padded to the 56 bytes of the
    /// transport's field as rdma_cm reports them; `None` on the active side.
    pub fn private_data(&self) -> Option<&[u8]> {
        self.private_data.as_deref()
    }

    /// Posts a receive into `len` bytes of `dst` at `offset` before the connection
    /// exists (rpma_conn_req_recv(3)), so the peer's first message finds it; `op_context`
    /// comes back as the completion's `wr_id`. `dst` `None` with `offset` and `len` 0
    /// posts a 0-byte receive.
    ///
    /// Errors: `Inval` if `dst` is `None` with a non-zero offset or length; `Provider` if
    /// ibv_post_recv(3) fails.
    pub fn recv<'a>(&self, dst: impl Into<Option<&'a MrLocal>>, offset: usize, len: usize, op_context: u64) -> Result<()> {
        post_recv(&self.queues().qp, dst.into(), offset, len, op_context)
    }

    /// Connects (active: rdma_connect(3)) or accepts (passive: rdma_accept(3)) with
    /// `private_data` (rpma_conn_req_connect(3)); always consumes the request. The
    /// result is a connection whose first event ([`Conn::next_event`]) says whether it
    /// was established.
    ///
    /// Errors: `Inval` if `private_data` is `Some` but empty or longer than 255 bytes;
    /// `Provider` if connecting or accepting fails (e.g. `EINVAL` for private data over
    /// the transport's limit: 56 bytes to connect, 196 to accept).
    pub fn connect(mut self, private_data: Option<&[u8]>) -> Result<Conn> {
        let param = conn_param(private_data)?;
        let id = self.id.take().expect("a request has its id until consumed");
        let q = self.q.take().expect("a request has its queues until consumed");
        let ch = self.ch.clone();
        let peer = self.peer.clone();
        if let Some(req_data) = self.private_data.take() {
            if let Err(e) = id.accept(Some(&param)) {
                let _ = q.destroy(Some(&id));
                let _ = id.reject(&[]);
                let _ = id.destroy();
                return Err(e.into());
            }
            Conn::new(peer, id, ch, q, Some(req_data))
        } else {
            let conn = Conn::new(peer, id, ch, q, None)?;
            conn.cm_id().connect(&param)?;
            Ok(conn)
        }
    }
}

impl Drop for ConnReq {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        if let Some(q) = self.q.take() {
            let _ = q.destroy(Some(&id));
        }
        if self.private_data.is_some() {
            let _ = id.reject(&[]);
        }
        let _ = id.destroy();
    }
}
