//! Connection-manager events (`struct rdma_cm_event`) and the parameters they carry.
//!
//! Rule (rdma_get_cm_event(3), rdma_ack_cm_event(3)): every event retrieved must be
//! acknowledged; `rdma_destroy_id` waits until the events retrieved for that id are
//! acknowledged. A CONNECT_REQUEST is accounted to the listening id (acknowledging it
//! completes the listener's count, not the new id's). Private data is reported with the
//! length of the whole transport field (REQ 56, REP 196, REJ 148 bytes for the TCP port
//! space), zero-padded, and lives until the event is acknowledged. Here an [`Event`] is
//! acknowledged when it is dropped (or by [`Event::ack`]).

use std::sync::Arc;

use rverbs::AhAttr;

use crate::handle::{AckCount, CmId};

/// The event types of rdma_cm(7), with the values of `enum rdma_cm_event_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventKind {
    /// rdma_resolve_addr(3) completed.
    AddrResolved = 0,
    /// rdma_resolve_addr(3) failed (status: -errno).
    AddrError = 1,
    /// rdma_resolve_route(3) completed.
    RouteResolved = 2,
    /// rdma_resolve_route(3) failed.
    RouteError = 3,
    /// A connection request arrived on a listener (`event.id` is the new id).
    ConnectRequest = 4,
    /// A reply to a connection request arrived on an id without a QP (the application
    /// moves its QP itself, then calls `establish`).
    ConnectResponse = 5,
    /// An error happened while establishing the connection (status: -errno).
    ConnectError = 6,
    /// The remote side did not answer (status: -errno, -ETIMEDOUT for a timeout).
    Unreachable = 7,
    /// The remote side rejected the request (status: the IBTA reject reason; 8 = no
    /// listener, 28 = consumer reject).
    Rejected = 8,
    /// The connection is established.
    Established = 9,
    /// The connection was disconnected.
    Disconnected = 10,
    /// The device was removed.
    DeviceRemoval = 11,
    /// A multicast join completed.
    MulticastJoin = 12,
    /// A multicast group error.
    MulticastError = 13,
    /// The address of the id changed.
    AddrChange = 14,
    /// The QP of a disconnected connection left timewait.
    TimewaitExit = 15,
}

/// Connection parameters (`struct rdma_conn_param`): given to connect/accept, reported
/// by CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED and REJECTED.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data (connect: ≤ 56 bytes in the TCP port space, 180 in UDP; accept:
    /// ≤ 196 / 136; reject: ≤ 148). Reported zero-padded to the transport field.
    pub private_data: Vec<u8>,
    /// Outstanding RDMA READ/atomic this side accepts as target (0xFF: device maximum).
    pub responder_resources: u8,
    /// Outstanding RDMA READ/atomic this side issues (0xFF: device maximum).
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry_count: u8,
    /// Whether the QP uses an SRQ.
    pub srq: u8,
    /// The QP number when the application manages its own QP (no QP on the id); in
    /// events, the remote QP number.
    pub qp_num: u32,
}

/// Unreliable-datagram parameters (`struct rdma_ud_param`): reported by the
/// ESTABLISHED event of a UD id and by multicast joins.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UdParam {
    /// Private data of the SIDR exchange (≤ 180 request, ≤ 136 reply), zero-padded.
    pub private_data: Vec<u8>,
    /// How to reach the remote QP.
    pub ah_attr: AhAttr,
    /// The remote QP number.
    pub qp_num: u32,
    /// The remote Q_Key.
    pub qkey: u32,
}

/// A connection-manager event. Dropping it acknowledges it (rdma_ack_cm_event(3)).
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// 0, a negative errno, or (REJECTED) the reject reason.
    pub status: i32,
    /// The id the event is about (for CONNECT_REQUEST: the new id of the connection).
    pub id: CmId,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmId>,
    /// Connection parameters (connected port spaces).
    pub conn: ConnParam,
    /// Datagram parameters (UD ids and multicast).
    pub ud: UdParam,
    /// MULTICAST_JOIN / MULTICAST_ERROR: the context given to the join (librdmacm reports
    /// it as `param.ud.private_data`); 0 otherwise.
    pub mc_context: usize,
    pub(crate) acct: Arc<AckCount>,
    pub(crate) retrieved: bool,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("kind", &self.kind)
            .field("status", &self.status)
            .field("id", &self.id.number())
            .finish()
    }
}

impl Event {
    pub(crate) fn new(kind: EventKind, status: i32, id: &CmId, acct: Arc<AckCount>) -> Event {
        Event {
            kind,
            status,
            id: id.clone(),
            listen_id: None,
            conn: ConnParam::default(),
            ud: UdParam::default(),
            mc_context: 0,
            acct,
            retrieved: false,
        }
    }

    pub(crate) fn mark_retrieved(&mut self) {
        self.retrieved = true;
        self.acct.retrieved();
    }

    /// Whether the event belongs to `id`: it is about `id`, or it is accounted to it (a
    /// listener's connection requests, whose `id` is the new id). Such events move with
    /// `id` (migrate) and go with it (destroy).
    pub(crate) fn concerns(&self, id: &CmId) -> bool {
        self.id == *id || Arc::ptr_eq(&self.acct, &id.shared.acks)
    }

    /// Acknowledges the event (the same as dropping it).
    pub fn ack(self) {}
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.retrieved {
            self.acct.acked();
        }
    }
}
