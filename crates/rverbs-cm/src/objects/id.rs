//! The public connection id (rdma_create_id(3)): the soft connection manager's or
//! librdmacm's, with the verbs of rdma_cm(7) on it.
//!
//! Rule (rdma_cm(7)): an id is created on an event channel for a port space and QP type;
//! it is bound (rdma_bind_addr(3)) or resolved towards a destination
//! (rdma_resolve_addr(3), rdma_resolve_route(3)), then listens (rdma_listen(3)) or
//! connects (rdma_connect(3)); a passive id accepts (rdma_accept(3)) or rejects
//! (rdma_reject(3)); either side disconnects (rdma_disconnect(3)).

use std::net::SocketAddr;

use rverbs::{Qp, QpAttr, QpAttrMask, QpInit, QpState, QpType};

use super::channel::{EventChannel, Repr as ChannelRepr};
#[cfg(feature = "rdma-core")]
use super::{mixed, over_librdmacm};
use crate::engine::JoinFlag;
use crate::error::Result;
use crate::event::ConnParam;
use crate::handle::{PortSpace, Route};

/// A connection id (`struct rdma_cm_id`). Cloning shares the id.
///
/// Over the soft connection manager [`CmId::destroy`] ends it for every clone; over
/// librdmacm it is destroyed (rdma_destroy_id(3)) when the last handle, the last event
/// about it and the QP made on it are gone, and `destroy` is `EBUSY` while another holds
/// it.
#[derive(Clone, Debug, PartialEq)]
pub struct CmId {
    repr: Repr,
}

#[derive(Clone, Debug, PartialEq)]
enum Repr {
    Soft(crate::handle::CmId),
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::CmId),
}

impl From<crate::handle::CmId> for CmId {
    fn from(id: crate::handle::CmId) -> CmId {
        CmId { repr: Repr::Soft(id) }
    }
}

#[cfg(feature = "rdma-core")]
impl From<crate::rdma_core::CmId> for CmId {
    fn from(id: crate::rdma_core::CmId) -> CmId {
        CmId { repr: Repr::Native(id) }
    }
}

/// `$soft` on the soft id, `$native` on librdmacm's (`id` names either).
macro_rules! on {
    ($self:expr, $id:ident => $soft:expr, $native:expr) => {
        match &$self.repr {
            Repr::Soft($id) => $soft,
            #[cfg(feature = "rdma-core")]
            Repr::Native($id) => $native,
        }
    };
    ($self:expr, $id:ident => $both:expr) => {
        on!($self, $id => $both, $both)
    };
}

impl CmId {
    /// Creates an id whose events go to `channel` (rdma_create_id(3)), on the channel's
    /// connection manager. `context` is the application's cookie (`id->context`),
    /// inherited by the ids of connection requests a listener receives.
    ///
    /// Errors: `ENODEV` when the soft device cannot serve connection management (no
    /// QP1). Over librdmacm, a `qp_type` other than its port space's (rdma_create_id(3)
    /// derives it: UD for `Udp` and `Ipoib`, else RC) is `EOPNOTSUPP`.
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: QpType, context: usize) -> Result<CmId> {
        Ok(match &channel.repr {
            ChannelRepr::Soft(ch) => CmId::from(crate::handle::CmId::new(ch, ps, qp_type, context)?),
            #[cfg(feature = "rdma-core")]
            ChannelRepr::Native(ch) => CmId::from(crate::rdma_core::CmId::new(ch, ps, qp_type, context)?),
        })
    }

    /// Which connection manager the id belongs to ([`EventChannel::backend`]).
    pub fn backend(&self) -> rverbs::Backend {
        on!(self, _id => rverbs::Backend::Soft, rverbs::Backend::RdmaCore)
    }

    /// The id's number: unique in this process for its life (over librdmacm, the address
    /// of its `struct rdma_cm_id`).
    pub fn number(&self) -> u64 {
        on!(self, id => id.number(), id.number())
    }

    /// The channel the id's events go to.
    pub fn channel(&self) -> Option<EventChannel> {
        on!(self, id => id.channel().map(EventChannel::from), id.channel().map(EventChannel::from))
    }

    /// The port space.
    pub fn ps(&self) -> PortSpace {
        on!(self, id => id.ps())
    }

    /// The QP type.
    pub fn qp_type(&self) -> QpType {
        on!(self, id => id.qp_type())
    }

    /// The application's cookie (`id->context`).
    pub fn context(&self) -> usize {
        on!(self, id => id.context())
    }

    /// Binds the id to a local address and port (rdma_bind_addr(3)); port 0 picks an
    /// ephemeral port.
    ///
    /// Errors: `EADDRINUSE`; `EADDRNOTAVAIL` (not an address of this host); `EINVAL`
    /// (already bound).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        on!(self, id => id.bind_addr(addr))
    }

    /// Resolves `dst` to a device and a source address (rdma_resolve_addr(3)): ADDR_RESOLVED
    /// or ADDR_ERROR follows. Over librdmacm a fault plan that fails it is `EOPNOTSUPP`.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr, timeout_ms: i32) -> Result<()> {
        on!(self, id => id.resolve_addr(src, dst, timeout_ms))
    }

    /// Resolves the route (rdma_resolve_route(3)): ROUTE_RESOLVED or ROUTE_ERROR follows.
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        on!(self, id => id.resolve_route(timeout_ms))
    }

    /// Listens for connection requests (rdma_listen(3)); `backlog` ≤ 0 means the maximum.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        on!(self, id => id.listen(backlog))
    }

    /// Sends a connection request (rdma_connect(3)); the answer arrives as ESTABLISHED
    /// (or CONNECT_RESPONSE on an id without a QP, whose number `param.qp_num` names),
    /// REJECTED or UNREACHABLE.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        on!(self, id => id.connect(param))
    }

    /// Accepts the connection request this id was created for (rdma_accept(3)).
    pub fn accept(&self, param: Option<&ConnParam>) -> Result<()> {
        on!(self, id => id.accept(param))
    }

    /// Rejects the connection request (rdma_reject(3)): the peer sees REJECTED with
    /// status 28 (consumer reject) and `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        on!(self, id => id.reject(private_data))
    }

    /// Rejects because the request's ECE options are not supported (rdma_reject_ece(3)):
    /// status 35.
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        on!(self, id => id.reject_ece(private_data))
    }

    /// Sets the ECE (vendor ID, options) of this side's REQ or REP
    /// (rdma_set_local_ece(3)); the soft manager keeps the vendor ID's 24 bits, the
    /// message's field.
    pub fn set_local_ece(&self, vendor_id: u32, options: u32) -> Result<()> {
        on!(self, id => id.set_local_ece(vendor_id, options))
    }

    /// The ECE (vendor ID, options) the peer's REQ or REP carried (rdma_get_remote_ece(3));
    /// zeros if it carried none.
    pub fn remote_ece(&self) -> Result<(u32, u32)> {
        on!(self, id => Ok(id.remote_ece()), id.remote_ece())
    }

    /// Disconnects (rdma_disconnect(3)): the id's QP moves to ERR, the peer sees
    /// DISCONNECTED. Over librdmacm only a QP made on the id ([`CmId::create_qp`]) is
    /// moved; one the application manages is its to move.
    pub fn disconnect(&self) -> Result<()> {
        on!(self, id => id.disconnect())
    }

    /// Completes the handshake of an active id whose application moved its own QP
    /// (rdma_establish(3)), after CONNECT_RESPONSE.
    pub fn establish(&self) -> Result<()> {
        on!(self, id => id.establish())
    }

    /// The attributes that move the connection's QP to `state` (rdma_init_qp_attr(3)).
    pub fn init_qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
        on!(self, id => id.init_qp_attr(state))
    }

    /// Creates the id's QP in `pd` (rdma_create_qp(3)) with `init`'s CQs, type and
    /// capabilities; the connection manager moves it to INIT now (RTS for a datagram
    /// QP over the soft one), and to RTR and RTS as the connection is accepted or
    /// established.
    ///
    /// Over librdmacm `pd` and the CQs must be of the id's context ([`CmId::verbs`]),
    /// else `EINVAL`; an SRQ or `send_ops` is `EOPNOTSUPP`; the QP holds the id and its
    /// last handle destroys it (rdma_destroy_qp(3)). Over the soft connection manager it
    /// is `pd.create_qp(init)` then [`CmId::attach_qp`].
    pub fn create_qp(&self, pd: &rverbs::Pd, init: &QpInit<'_>) -> Result<Qp> {
        on!(self, id => {
            let qp = pd.create_qp(init)?;
            id.attach_qp(qp.clone())?;
            Ok(qp)
        }, {
            let pd = pd.native().ok_or_else(mixed)?;
            Ok(Qp::from(id.create_qp(pd, init)?))
        })
    }

    /// The verbs context librdmacm opened for the id's device (`id->verbs`), once the id
    /// has one: the context of [`CmId::create_qp`]'s PD and CQs, the same for every id of
    /// the device. `None` over the soft connection manager, whose ids take a QP of any
    /// context of their device.
    pub fn verbs(&self) -> Option<rverbs::Context> {
        on!(self, id => {
            let _ = id;
            None
        }, id.verbs().map(rverbs::Context::from))
    }

    /// Associates `qp` with the id (the verbs half of rdma_create_qp(3)): a connected QP
    /// moves to INIT, a datagram QP to RTS. `EOPNOTSUPP` over librdmacm, which moves
    /// only the QPs it makes ([`CmId::create_qp`]); a QP the application manages there
    /// is moved with [`CmId::init_qp_attr`] and named by `ConnParam::qp_num`.
    pub fn attach_qp(&self, qp: Qp) -> Result<()> {
        on!(self, id => id.attach_qp(qp), {
            let _ = (id, qp);
            Err(over_librdmacm("attaching a QP made elsewhere (rdma_create_qp makes it)"))
        })
    }

    /// Forgets the QP [`CmId::attach_qp`] attached and returns it (`None` over
    /// librdmacm, where none is attached).
    pub fn detach_qp(&self) -> Option<Qp> {
        on!(self, id => id.detach_qp(), {
            let _ = id;
            None
        })
    }

    /// The QP [`CmId::attach_qp`] attached (`None` over librdmacm).
    pub fn qp(&self) -> Option<Qp> {
        on!(self, id => id.qp(), {
            let _ = id;
            None
        })
    }

    /// Moves the id to `channel` (rdma_migrate_id(3)): its queued events move with it;
    /// returns once the events already retrieved on the old channel are acknowledged.
    /// A channel of the other connection manager is `EINVAL`.
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        match (&self.repr, &channel.repr) {
            (Repr::Soft(id), ChannelRepr::Soft(ch)) => id.migrate(ch),
            #[cfg(feature = "rdma-core")]
            (Repr::Native(id), ChannelRepr::Native(ch)) => id.migrate(ch),
            #[cfg(feature = "rdma-core")]
            _ => Err(mixed()),
        }
    }

    /// The local address (with port), once bound or resolved.
    pub fn src_addr(&self) -> Option<SocketAddr> {
        on!(self, id => id.src_addr())
    }

    /// The remote address, once resolved or connected.
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        on!(self, id => id.dst_addr())
    }

    /// Whether the id is bound to a device (`id->verbs` non-NULL).
    pub fn has_device(&self) -> bool {
        on!(self, id => id.has_device())
    }

    /// What is known of the route (`struct rdma_route`). Over librdmacm: the path record
    /// once the route is resolved (`EINVAL` before).
    pub fn route(&self) -> Result<Route> {
        on!(self, id => Ok(id.route()), id.route())
    }

    /// Sets the type of service (rdma_set_option(3), RDMA_OPTION_ID_TOS): the traffic
    /// class of the path.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        on!(self, id => id.set_tos(tos))
    }

    /// Sets the QP's local ACK timeout code (rdma_set_option(3),
    /// RDMA_OPTION_ID_ACK_TIMEOUT).
    pub fn set_ack_timeout(&self, code: u8) -> Result<()> {
        on!(self, id => id.set_ack_timeout(code))
    }

    /// Allows binding a port other ids use (rdma_set_option(3),
    /// RDMA_OPTION_ID_REUSEADDR); before binding, else `EINVAL`.
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        on!(self, id => id.set_reuseaddr(on))
    }

    /// Restricts an IPv6 binding to IPv6 (rdma_set_option(3), RDMA_OPTION_ID_AFONLY);
    /// before binding, else `EINVAL`.
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        on!(self, id => id.set_afonly(on))
    }

    /// Sets the CM response timeout code and retries (an rverbs extension, see the soft
    /// connection manager's docs/connection-manager.md). `EOPNOTSUPP` over librdmacm.
    pub fn set_cm_timeout(&self, code: u8, retries: u8) -> Result<()> {
        on!(self, id => id.set_cm_timeout(code, retries), {
            let _ = (id, code, retries);
            Err(over_librdmacm("the CM response timeout (an rverbs extension)"))
        })
    }

    /// Joins the multicast group of IP address `addr` (rdma_join_multicast(3),
    /// rdma_join_multicast_ex(3)); the id must be bound or address-resolved and UD.
    /// MULTICAST_JOIN follows (carrying `context` and the group's address vector), once
    /// the id's QP, if any and unless `flag` is send-only, is attached to the group (over
    /// librdmacm: the QP made by [`CmId::create_qp`]).
    ///
    /// Errors: `EINVAL` (state, QP type, wildcard address), `EOPNOTSUPP` (an IPv6 group
    /// on the soft manager).
    pub fn join_multicast(&self, addr: SocketAddr, flag: JoinFlag, context: usize) -> Result<()> {
        on!(self, id => id.join_multicast(addr, flag, context),
            id.join_multicast(addr, flag == JoinFlag::SendOnlyFullMember, context))
    }

    /// Leaves the group joined with `addr` (rdma_leave_multicast(3)): the QP is detached.
    ///
    /// Errors: `EADDRNOTAVAIL` if the id did not join `addr`.
    pub fn leave_multicast(&self, addr: SocketAddr) -> Result<()> {
        on!(self, id => id.leave_multicast(addr))
    }

    /// Ends the id (rdma_destroy_id(3)). Soft: a connection is disconnected or a pending
    /// request rejected, groups are left, queued events discarded, and the call returns
    /// once the events retrieved for it are acknowledged; every clone is ended. Over
    /// librdmacm: `EBUSY`, destroying nothing, while another handle or an unacknowledged
    /// event holds the id (dropping the last one destroys it).
    pub fn destroy(self) -> Result<()> {
        match self.repr {
            Repr::Soft(id) => id.destroy(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(id) => id.destroy(),
        }
    }
}
