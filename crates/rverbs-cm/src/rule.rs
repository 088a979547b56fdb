//! The rdma_cm rules a call breaks, as values.
//!
//! Every `EINVAL` the connection manager returns is an
//! [`Error::Invalid`](crate::Error::Invalid) carrying one `Rule`: the variant names the
//! rule, its fields the values that broke it (the id's state, the length asked, the
//! limit), so that a caller or a test tells the rules apart by matching and a message
//! says what to change. Each variant cites the man page or the kernel behaviour it
//! follows (the kernel's rdma_cm, which librdmacm passes every call to).

use std::net::SocketAddr;

use rverbs::QpState;

use crate::cm_state::CmState;
use crate::event::EventKind;

/// A rule of rdma_cm(7) that a call broke (always reported as `EINVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rule {
    // ---- the id itself (rdma_destroy_id(3))
    /// The id was destroyed: no call but its own drop may name it.
    #[error("the id was destroyed")]
    Destroyed,
    /// An id works on the device of the channel it was created on
    /// ([`EventChannel::on`](crate::EventChannel::on); the listed device otherwise) for
    /// its life: it moves only to a channel of that device (rdma_migrate_id(3)) and
    /// takes only that device's QPs (rdma_create_qp(3): the PD is of the id's device).
    #[error("the id works on device slot {id_device}; this is of device slot {other}")]
    OtherDevice {
        /// The device slot of the id's engine.
        id_device: usize,
        /// The device slot of the channel or QP given.
        other: usize,
    },

    // ---- addresses (rdma_bind_addr(3), rdma_set_option(3), rdma_resolve_addr(3))
    /// An id is bound once, from the IDLE state; the bind options (REUSEADDR, AFONLY)
    /// are set before the bind.
    #[error("the id is already bound (state {state:?})")]
    AlreadyBound {
        /// The id's state.
        state: CmState,
    },
    /// rdma_resolve_addr(3) starts from IDLE or ADDR_BOUND, and once (the kernel's
    /// `resolve_prepare_src`).
    #[error("the address can be resolved only from IDLE or ADDR_BOUND, once (state {state:?})")]
    ResolveAddrState {
        /// The id's state.
        state: CmState,
    },
    /// The destination of rdma_resolve_addr(3) has the bound address's family (the
    /// kernel's `cma_family` check).
    #[error("destination {dst} is not of the family of the bound address {bound}")]
    FamilyMismatch {
        /// The bound address.
        bound: SocketAddr,
        /// The destination asked for.
        dst: SocketAddr,
    },
    /// rdma_resolve_route(3) needs ADDR_RESOLVED (a resolved route is not resolved again).
    #[error("the route is resolved from ADDR_RESOLVED only (state {state:?})")]
    ResolveRouteState {
        /// The id's state.
        state: CmState,
    },
    /// rdma_listen(3) on an id that already listens (a listening id cannot be bound
    /// again either).
    #[error("the id already listens")]
    AlreadyListening,
    /// rdma_listen(3) needs a bound id (IDLE ids are bound to the wildcard first).
    #[error("the id is not bound (state {state:?})")]
    NotBound {
        /// The id's state.
        state: CmState,
    },

    // ---- the handshake (rdma_connect(3), rdma_accept(3), rdma_reject(3), rdma_establish(3),
    // rdma_disconnect(3))
    /// rdma_connect(3) needs ROUTE_RESOLVED.
    #[error("the route is not resolved (state {state:?})")]
    RouteNotResolved {
        /// The id's state.
        state: CmState,
    },
    /// Private data is limited by the message that carries it (rdma_connect(3),
    /// rdma_accept(3), rdma_reject(3): the IBTA field less the RDMA CM IP header).
    #[error("{len} bytes of private data, at most {max}")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// The message's limit.
        max: usize,
    },
    /// A connected id without a QP must name one in `conn_param.qp_num` (rdma_connect(3),
    /// rdma_accept(3): parameters are optional only with a QP on the id).
    #[error("no QP on the id and no QP number in the parameters")]
    NoQp,
    /// Responder resources and initiator depth are at most the device's
    /// `max_qp_rd_atom` (or 0xFF, "as many as allowed").
    #[error("{asked} outstanding RDMA READ/atomic asked, the device allows {max}")]
    RdmaDepth {
        /// The value asked.
        asked: u8,
        /// The device's maximum.
        max: u8,
    },
    /// rdma_accept(3) and rdma_reject(3) answer a CONNECT_REQUEST not yet answered.
    #[error("the id has no connection request to answer (state {state:?})")]
    NoRequest {
        /// The id's state.
        state: CmState,
    },
    /// rdma_disconnect(3) needs a connection begun.
    #[error("the id is not connected (state {state:?})")]
    NotConnected {
        /// The id's state.
        state: CmState,
    },
    /// rdma_establish(3) completes a CONNECT_RESPONSE (an id connected without a QP).
    #[error("no connection response to complete (state {state:?})")]
    NoResponse {
        /// The id's state.
        state: CmState,
    },

    // ---- QPs (rdma_create_qp(3), rdma_init_qp_attr(3))
    /// An id has one QP.
    #[error("the id already has a QP")]
    QpExists,
    /// A QP needs the id's device: bind or resolve to an address of the device first
    /// (unbound and wildcard-bound ids have none).
    #[error("the id has no device (bind or resolve it to an address of the device)")]
    NoDevice,
    /// RTR and RTS attributes of a connected QP come from the peer's answer.
    #[error("{state:?} attributes need the peer's answer")]
    NotNegotiated {
        /// The QP state asked for.
        state: QpState,
    },
    /// rdma_init_qp_attr(3) gives attributes for INIT, RTR, RTS, ERR and RESET only.
    #[error("no attributes for QP state {state:?}")]
    NoAttrs {
        /// The QP state asked for.
        state: QpState,
    },

    // ---- multicast (rdma_join_multicast(3))
    /// A group address is a multicast address, not the wildcard.
    #[error("the group address is a wildcard")]
    WildcardGroup,
    /// rdma_join_multicast(3) needs an id bound or address-resolved to the device.
    #[error("the id is not bound or address-resolved to the device (state {state:?})")]
    JoinState {
        /// The id's state.
        state: CmState,
    },
    /// Only UD ids (RDMA_PS_UDP, RDMA_PS_IPOIB) join multicast groups.
    #[error("only UD ids join multicast groups")]
    NotUd,

    // ---- the Rust helpers (`conn`)
    /// A listener's channel carries CONNECT_REQUEST events only.
    #[error("a {kind:?} event where a CONNECT_REQUEST was expected")]
    UnexpectedEvent {
        /// The event received.
        kind: EventKind,
    },
    /// A stream accepts only the connection requests of streams (`stream::MAGIC` in the
    /// private data); it rejected this one.
    #[error("the connection request is not an rverbs stream's")]
    NotAStream,
}
