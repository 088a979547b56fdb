//! Connection identifiers (`struct rdma_cm_id`): the application's handle on one
//! endpoint of a connection, a listener, or a datagram service.
//!
//! Rule (rdma_cm(7)): an id is created on an event channel for a port space and QP type;
//! it is bound to an address (rdma_bind_addr(3)) or resolved towards a destination
//! (rdma_resolve_addr(3), rdma_resolve_route(3)), then either listens
//! (rdma_listen(3), each connection request creating a new id) or connects
//! (rdma_connect(3)); a passive id accepts (rdma_accept(3)) or rejects (rdma_reject(3));
//! either side disconnects (rdma_disconnect(3)). The connection manager moves the id's QP
//! through INIT, RTR and RTS as the handshake progresses and into ERR when the connection
//! ends, so the application never calls ibv_modify_qp(3) unless it manages its QP itself
//! (rdma_init_qp_attr(3), rdma_establish(3)).

use std::net::SocketAddr;

use rverbs::{Gid, Mtu, Qp, QpAttr, QpAttrMask, QpState, QpType};

use crate::channel::EventChannel;
use crate::engine;
use crate::error::Result;
use crate::event::ConnParam;
use crate::handle::{CmId, PortSpace, Route};

impl CmId {
    /// Creates an id whose events go to `channel` (rdma_create_id(3)). `context` is the
    /// application's cookie (`id->context`), inherited by the ids of connection
    /// requests a listener receives.
    ///
    /// Errors: `ENODEV` when the device cannot serve connection management (no QP1).
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: QpType, context: usize) -> Result<CmId> {
        engine::create_id(channel, ps, qp_type, context)
    }

    /// The channel the id's events go to.
    pub fn channel(&self) -> Option<EventChannel> {
        engine::with_id(self, |s| s.channel.clone()).ok().flatten()
    }

    /// Binds the id to a local address and port (rdma_bind_addr(3)); port 0 picks an
    /// ephemeral port. A wildcard address leaves the id without a device.
    ///
    /// Errors: `EADDRINUSE`; `EADDRNOTAVAIL` (not an address of this host); `EINVAL`
    /// (already bound).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        engine::bind_addr(self, addr)
    }

    /// Resolves `dst` to the device and a source address (rdma_resolve_addr(3)); the
    /// result arrives as ADDR_RESOLVED or ADDR_ERROR. An unbound id is bound to `src`
    /// (or the source the host would use) with an ephemeral port.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr, timeout_ms: i32) -> Result<()> {
        engine::resolve_addr(self, src, dst, timeout_ms)
    }

    /// Resolves the route to the destination (rdma_resolve_route(3)): ROUTE_RESOLVED.
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        engine::resolve_route(self, timeout_ms)
    }

    /// Listens for connection requests (rdma_listen(3)); `backlog` ≤ 0 means the
    /// maximum. Requests beyond the backlog of not yet retrieved CONNECT_REQUEST events
    /// are rejected.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        engine::listen(self, backlog)
    }

    /// Sends a connection request (rdma_connect(3)); the answer arrives as ESTABLISHED
    /// (or CONNECT_RESPONSE without a QP), REJECTED or UNREACHABLE.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        engine::connect(self, param)
    }

    /// Accepts the connection request this id was created for (rdma_accept(3)). With a
    /// QP on the id, the QP is moved to RTR and RTS before the reply is sent.
    pub fn accept(&self, param: Option<&ConnParam>) -> Result<()> {
        engine::accept(self, param)
    }

    /// Rejects the connection request (rdma_reject(3)): the peer sees REJECTED with
    /// status 28 (consumer reject) and `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        engine::reject(self, private_data, engine::Reason::CONSUMER_DEFINED)
    }

    /// Rejects the connection request because its ECE options are not supported
    /// (rdma_reject_ece(3)): the peer sees REJECTED with status 35
    /// (IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED).
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        engine::reject(self, private_data, engine::Reason::VENDOR_OPTION_NOT_SUPPORTED)
    }

    /// Sets the ECE (vendor ID, options) sent with this side's REQ or REP
    /// (rdma_set_local_ece(3)): the vendor ID in the message's 24-bit vendor field, the
    /// options in the MAD's attribute modifier, as the kernel's CM carries them.
    pub fn set_local_ece(&self, vendor_id: u32, options: u32) -> Result<()> {
        engine::with_id(self, |s| s.local_ece = (vendor_id & 0xff_ffff, options))
    }

    /// The ECE (vendor ID, options) the peer's REQ or REP carried
    /// (rdma_get_remote_ece(3)); zeros if it carried none.
    pub fn remote_ece(&self) -> (u32, u32) {
        engine::with_id(self, |s| s.remote_ece).unwrap_or((0, 0))
    }

    /// Disconnects (rdma_disconnect(3)): the QP moves to ERR (its work requests flush),
    /// the peer is told, and DISCONNECTED follows on both sides once.
    pub fn disconnect(&self) -> Result<()> {
        engine::disconnect(self)
    }

    /// Completes the handshake of an active id whose application moved its own QP
    /// (rdma_establish(3)), after CONNECT_RESPONSE.
    pub fn establish(&self) -> Result<()> {
        engine::establish(self)
    }

    /// The attributes that move the id's QP to `state` (rdma_init_qp_attr(3)).
    pub fn init_qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
        engine::init_qp_attr(self, state)
    }

    /// Associates `qp` with the id (the verbs half of rdma_create_qp(3)): a connected QP
    /// moves to INIT, a datagram QP to RTS, with the attributes of
    /// [`CmId::init_qp_attr`].
    pub fn attach_qp(&self, qp: Qp) -> Result<()> {
        engine::attach_qp(self, qp)
    }

    /// Forgets the id's QP and returns it (rdma_destroy_qp(3) destroys it).
    pub fn detach_qp(&self) -> Option<Qp> {
        engine::with_id(self, |s| s.qp.take()).ok().flatten()
    }

    /// The id's QP.
    pub fn qp(&self) -> Option<Qp> {
        engine::with_id(self, |s| s.qp.clone()).ok().flatten()
    }

    /// Moves the id to another channel (rdma_migrate_id(3)): its queued events move
    /// with it; returns once the events already retrieved on the old channel are
    /// acknowledged.
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        engine::migrate(self, channel)
    }

    /// The local address (with port), once bound or resolved.
    pub fn src_addr(&self) -> Option<SocketAddr> {
        engine::with_id(self, |s| s.src).ok().flatten()
    }

    /// The remote address, once resolved or connected.
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        engine::with_id(self, |s| s.dst).ok().flatten()
    }

    /// Whether the id is bound to the device (`id->verbs` non-NULL): its address is a
    /// specific address of this host.
    pub fn has_device(&self) -> bool {
        engine::with_id(self, |s| s.sgid.is_some()).unwrap_or(false)
    }

    /// What is known of the route.
    pub fn route(&self) -> Route {
        engine::with_id(self, |s| s.route()).unwrap_or(Route {
            sgid: Gid([0; 16]),
            dgid: Gid([0; 16]),
            sgid_index: 0,
            pkey: 0xffff,
            mtu: Mtu::Mtu4096,
            hop_limit: 64,
            traffic_class: 0,
            num_paths: 0,
        })
    }

    /// Sets the type of service (RDMA_OPTION_ID_TOS): the traffic class of the path.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        engine::with_id(self, |s| s.tos = tos)
    }

    /// Sets the QP's local ACK timeout code (RDMA_OPTION_ID_ACK_TIMEOUT).
    pub fn set_ack_timeout(&self, code: u8) -> Result<()> {
        engine::with_id(self, |s| s.ack_timeout = Some(code.min(31)))
    }

    /// Allows binding a port other ids use (RDMA_OPTION_ID_REUSEADDR); before binding.
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        engine::set_bind_opt(self, Some(on), None)
    }

    /// Restricts an IPv6 binding to IPv6 (RDMA_OPTION_ID_AFONLY); before binding.
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        engine::set_bind_opt(self, None, Some(on))
    }

    /// Sets the CM response timeout code (IBTA: 4.096 µs × 2^code per attempt, 20 by
    /// default as rdma_cm uses) and the retries after which an unanswered request or
    /// disconnect gives up (15 by default). An rverbs extension, for tests and
    /// applications that want to learn of a stuck peer sooner.
    pub fn set_cm_timeout(&self, code: u8, retries: u8) -> Result<()> {
        engine::with_id(self, |s| {
            s.cm_timeout = code.min(31);
            s.cm_retries = retries.min(15);
        })
    }

    /// Joins the multicast group of IP address `addr` (rdma_join_multicast(3),
    /// rdma_join_multicast_ex(3)); the id must be bound or address-resolved and UD.
    /// MULTICAST_JOIN follows (carrying `context` and the group's address vector), once
    /// the id's QP, if any and unless `flag` is send-only, is attached to the group.
    ///
    /// Errors: `EINVAL` (state, QP type, wildcard address), `EOPNOTSUPP` (an IPv6 group).
    pub fn join_multicast(&self, addr: SocketAddr, flag: engine::JoinFlag, context: usize) -> Result<()> {
        engine::join_multicast(self, addr, flag, context)
    }

    /// Leaves the group joined with `addr` (rdma_leave_multicast(3)): the QP is detached
    /// and the join's unretrieved events are discarded.
    ///
    /// Errors: `EADDRNOTAVAIL` if the id did not join `addr`.
    pub fn leave_multicast(&self, addr: SocketAddr) -> Result<()> {
        engine::leave_multicast(self, addr)
    }

    /// Ends the id (rdma_destroy_id(3)): a connection is disconnected (the peer sees
    /// DISCONNECTED) or a pending request rejected, its multicast groups are left, its
    /// queued events are discarded, and the call returns once the events retrieved for it
    /// are acknowledged.
    pub fn destroy(&self) -> Result<()> {
        engine::destroy(self)
    }
}
