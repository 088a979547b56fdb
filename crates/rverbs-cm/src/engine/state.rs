//! The state of one id: where it is in the rdma_cm state machine and what the handshake
//! negotiated.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs::{Gid, Mtu, Qp};

use crate::addr::LocalGid;
use crate::channel::EventChannel;
use crate::id::{CmId, PortSpace, Route};
use crate::table::Binding;

/// The states of an id, named after the kernel's `enum rdma_cm_state` and the IBTA CM
/// states they stand for (IBTA Vol 1 §12.9, Figure 158: the communication state
/// diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum St {
    /// Created (RDMA_CM_IDLE).
    Idle,
    /// Bound to an address (RDMA_CM_ADDR_BOUND).
    Bound,
    /// Address resolved (RDMA_CM_ADDR_RESOLVED).
    AddrResolved,
    /// Route resolved (RDMA_CM_ROUTE_RESOLVED).
    RouteResolved,
    /// Listening (RDMA_CM_LISTEN).
    Listen,
    /// Active: REQ (or SIDR_REQ) sent, waiting for REP/REJ (IBTA REQ Sent).
    ReqSent,
    /// Active without a QP: REP received, CONNECT_RESPONSE delivered, waiting for
    /// rdma_establish (IBTA REP Rcvd).
    RepRcvd,
    /// Passive: REQ received, CONNECT_REQUEST delivered, waiting for accept or reject
    /// (IBTA REQ Rcvd / MRA Sent).
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU (IBTA REP Sent).
    RepSent,
    /// Connected (IBTA Established; for datagram ids: the SIDR exchange is done).
    Established,
    /// This side sent DREQ, waiting for DREP (IBTA DREQ Sent).
    DreqSent,
    /// The peer sent DREQ; DISCONNECTED delivered; this side's rdma_disconnect sends
    /// DREP (IBTA DREQ Rcvd).
    DreqRcvd,
    /// The connection is over (IBTA TimeWait/Idle): DISCONNECTED was delivered.
    Disconnected,
    /// The request was rejected, timed out or failed.
    Failed,
}

/// What a pending timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimerKind {
    /// REQ or SIDR_REQ unanswered.
    Req,
    /// REP sent, no RTU.
    Rep,
    /// DREQ sent, no DREP.
    Dreq,
}

/// Everything the engine keeps for an id.
pub(crate) struct IdState {
    pub(crate) handle: CmId,
    pub(crate) ps: PortSpace,
    pub(crate) st: St,
    pub(crate) channel: Option<EventChannel>,
    pub(crate) binding: Option<Binding>,
    pub(crate) reuse_addr: bool,
    pub(crate) af_only: bool,
    /// Local address (with port).
    pub(crate) src: Option<SocketAddr>,
    /// Remote address (with port).
    pub(crate) dst: Option<SocketAddr>,
    /// The local GID (None: unbound or bound to a wildcard: no device).
    pub(crate) sgid: Option<LocalGid>,
    pub(crate) dgid: Option<Gid>,
    pub(crate) num_paths: u32,
    pub(crate) tos: u8,
    pub(crate) ack_timeout: Option<u8>,
    pub(crate) cm_timeout: u8,
    pub(crate) cm_retries: u8,
    pub(crate) qp: Option<Qp>,
    /// Listener: how many CONNECT_REQUEST events may wait unretrieved.
    pub(crate) backlog: usize,
    /// Child: the listener it came from (number), for backlog accounting.
    pub(crate) listener: Option<u64>,
    pub(crate) local_comm: Option<u32>,
    pub(crate) remote_comm: Option<u32>,
    pub(crate) remote_ep: Option<u32>,
    /// Our starting PSN (chosen when the request is sent or received, so
    /// rdma_init_qp_attr(RTS) works before accept).
    pub(crate) psn: u32,
    pub(crate) remote_qpn: u32,
    pub(crate) remote_psn: u32,
    pub(crate) remote_qkey: u32,
    /// Our QP number as announced in REQ/REP (the id's QP or `conn_param.qp_num`).
    pub(crate) local_qpn: u32,
    /// Negotiated: outstanding READ/atomic we accept as target.
    pub(crate) responder_resources: u8,
    /// Negotiated: outstanding READ/atomic we issue.
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) path_mtu: Mtu,
    pub(crate) srq: bool,
    pub(crate) timer: Option<Instant>,
    pub(crate) timer_kind: Option<TimerKind>,
    /// Transaction id of the exchange (REQ/REP/RTU share one; DREQ/DREP another).
    pub(crate) tid: u64,
    /// ECE (vendor ID, options) this side sends in its REQ or REP (rdma_set_local_ece(3)).
    pub(crate) local_ece: (u32, u32),
    /// ECE the peer sent (rdma_get_remote_ece(3)); zeros from a peer that sends none.
    pub(crate) remote_ece: (u32, u32),
}

impl IdState {
    pub(crate) fn new(handle: &CmId, channel: Option<EventChannel>) -> IdState {
        IdState {
            handle: handle.clone(),
            ps: handle.ps(),
            st: St::Idle,
            channel,
            binding: None,
            reuse_addr: false,
            af_only: false,
            src: None,
            dst: None,
            sgid: None,
            dgid: None,
            num_paths: 0,
            tos: 0,
            ack_timeout: None,
            cm_timeout: 20,
            cm_retries: 15,
            qp: None,
            backlog: 0,
            listener: None,
            local_comm: None,
            remote_comm: None,
            remote_ep: None,
            psn: 0,
            remote_qpn: 0,
            remote_psn: 0,
            remote_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: Mtu::Mtu4096,
            srq: false,
            timer: None,
            timer_kind: None,
            tid: 0,
            local_ece: (0, 0),
            remote_ece: (0, 0),
        }
    }

    pub(crate) fn route(&self) -> Route {
        Route {
            sgid: self.sgid.map_or(Gid([0; 16]), |g| g.gid),
            dgid: self.dgid.unwrap_or(Gid([0; 16])),
            sgid_index: self.sgid.map_or(0, |g| g.index),
            pkey: 0xffff,
            mtu: self.path_mtu,
            hop_limit: 64,
            traffic_class: self.tos,
            num_paths: self.num_paths,
        }
    }

    /// How long the peer has to answer: IBTA's CM response timeout (4.096 µs ×
    /// 2^code) for each of the retries plus the first attempt. Delivery on this host is
    /// reliable, so the attempts are not resent; the wait is as long as the kernel's
    /// rdma_cm would wait in all.
    pub(crate) fn response_wait(&self) -> Duration {
        let one = Duration::from_nanos(4096u64 << self.cm_timeout.min(31));
        one * (u32::from(self.cm_retries) + 1)
    }

    pub(crate) fn arm(&mut self, kind: TimerKind, after: Duration) {
        self.timer = Some(Instant::now() + after);
        self.timer_kind = Some(kind);
    }

    pub(crate) fn disarm(&mut self) {
        self.timer = None;
        self.timer_kind = None;
    }

    /// The ACK timeout code the QP uses (RDMA_OPTION_ID_ACK_TIMEOUT, else 14: about
    /// 67 ms, the order rdma_cm derives from a RoCE path's packet lifetime).
    pub(crate) fn qp_timeout(&self) -> u8 {
        self.ack_timeout.unwrap_or(14)
    }
}
