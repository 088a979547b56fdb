//! The state of one id: where it is in the rdma_cm state machine and what the handshake
//! negotiated.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rverbs::capi_support::qp1::MadPeer;
use rverbs::{Gid, Mtu, Qp, QpType};

use crate::addr::LocalGid;
pub(crate) use crate::cm_state::CmState as St;
use crate::channel::EventChannel;
use crate::handle::{CmId, PortSpace, Route};
use crate::error::{Error, Result};
use crate::event::{Event, EventKind};
use crate::rule::Rule;
use crate::table::Binding;
use super::joins::Joins;
use super::world::{Action, Cx};

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
    /// Written only by [`IdState::enter`].
    st: St,
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
    /// The peer's QP1: an endpoint of this host, or another host.
    pub(crate) remote: Option<MadPeer>,
    /// The process that held the peer's endpoint when the connection began (endpoint
    /// numbers are reused; `None` for another host).
    pub(crate) remote_pid: Option<i32>,
    /// The PSN this side sends with (the QP's sq_psn): the REP's starting PSN on the
    /// active side, the REQ's on the passive side (IBTA §12.7.20, §12.7.33, as the
    /// kernel's CM reads them), so rdma_init_qp_attr(RTS) works before accept.
    pub(crate) psn: u32,
    pub(crate) remote_qpn: u32,
    /// The PSN this side receives with (the QP's rq_psn): the peer's send PSN.
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
    /// A message to another host that waits for its answer, resent until it comes.
    pub(crate) resend: Option<Resend>,
    /// An address resolution waiting for the next hop's neighbour (`neigh.rs`).
    pub(crate) resolving: Option<rverbs::capi_support::neigh::Resolving>,
}

/// A request (REQ, REP, DREQ) sent to another host, kept to be sent again while no
/// answer comes (IBTA Vol 1 §12.7.27: the CM retransmits a message that expects an
/// answer when the response timeout expires, up to Max CM Retries times; the network
/// may lose any MAD). Between endpoints of this host delivery is reliable and nothing is
/// resent.
pub(crate) struct Resend {
    pub(crate) mad: [u8; 256],
    /// The state the id is in while the answer is awaited (else the resend is over).
    pub(crate) while_in: St,
    pub(crate) at: Instant,
    pub(crate) every: Duration,
    pub(crate) left: u8,
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
            remote: None,
            remote_pid: None,
            resend: None,
            resolving: None,
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

    /// Moves the id's QP, if it has a connected one, to ERR (an action: `cx`).
    pub(crate) fn qp_to_err(&self, cx: &mut Cx) {
        if let Some(qp) = self.qp.as_ref().filter(|q| q.qp_type() != rverbs::QpType::Ud) {
            cx.out.push(Action::QpToErr(qp.clone()));
        }
    }

    /// The id's state.
    pub(crate) fn st(&self) -> St {
        self.st
    }

    /// Moves the id to state `to`: the one place the state is written, so every
    /// transition is an edge of [`St::can_enter`] (checked in debug builds; logged as an
    /// engine bug otherwise, and taken, so that a release build behaves as before).
    pub(crate) fn enter(&mut self, to: St) {
        let from = self.st;
        if !from.can_enter(to) {
            debug_assert!(false, "rdma_cm state {from:?} -> {to:?} is not a transition");
            tracing::error!(?from, ?to, "connection manager bug: not a transition of the state machine");
        }
        tracing::trace!(id = self.handle.number(), ?from, ?to, "rdma_cm state");
        self.st = to;
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
    /// reliable, so the attempts are not resent there (to another host they are:
    /// [`IdState::resend_until_answered`]); the wait is as long as the kernel's rdma_cm
    /// would wait in all.
    pub(crate) fn response_wait(&self) -> Duration {
        let one = Duration::from_nanos(4096u64 << self.cm_timeout.min(31));
        one * (u32::from(self.cm_retries) + 1)
    }

    /// Arms the id's timer for `kind`, to expire at `at`.
    pub(crate) fn arm(&mut self, kind: TimerKind, at: Instant) {
        self.timer = Some(at);
        self.timer_kind = Some(kind);
    }

    pub(crate) fn disarm(&mut self) {
        self.timer = None;
        self.timer_kind = None;
        self.resend = None;
    }

    /// Keeps `mad`, just sent to another host while the id is in state `while_in`, to be
    /// resent every CM response timeout, at most `cm_retries` times, until the answer
    /// comes (`disarm`) or the id leaves that state. Nothing for a peer of this host.
    pub(crate) fn resend_until_answered(&mut self, mad: &[u8; 256], now: Instant) {
        if !matches!(self.remote, Some(MadPeer::Remote { .. })) {
            return;
        }
        let every = Duration::from_nanos(4096u64 << self.cm_timeout.min(31));
        self.resend = Some(Resend { mad: *mad, while_in: self.st, at: now + every, every, left: self.cm_retries });
    }

    /// The earliest of the id's deadlines.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [self.timer, self.resend.as_ref().map(|r| r.at), self.resolving.as_ref().map(|r| r.next)]
            .into_iter()
            .flatten()
            .min()
    }

    /// The ACK timeout code the QP uses (RDMA_OPTION_ID_ACK_TIMEOUT, else 14: about
    /// 67 ms, the order rdma_cm derives from a RoCE path's packet lifetime).
    pub(crate) fn qp_timeout(&self) -> u8 {
        self.ack_timeout.unwrap_or(14)
    }
}

/// Everything the engine knows, under one lock.
pub(crate) struct State {
    pub(crate) ids: HashMap<u64, IdState>,
    /// Local communication id → id number.
    pub(crate) by_comm: HashMap<u32, u64>,
    /// Peers this process has connections with: (endpoint, pid) → its pidfd and how many
    /// ids depend on it. The pid is part of the key because endpoint numbers are reused:
    /// a process that took over the number of one that died is another peer.
    pub(crate) watches: HashMap<(u32, i32), (OwnedFd, usize)>,
    /// Peers found dead when a watch was asked for, for the thread to handle as deaths.
    pub(crate) dead: Vec<(u32, i32)>,
    next_id: u64,
    next_comm: u32,
    rng: u64,
    /// Events the thread delivers, not the call that caused them (address and route
    /// resolution: the kernel's rdma_cm completes them from a work queue, never inside
    /// the call).
    pub(crate) deferred: Vec<(u64, EventKind, i32)>,
    /// Multicast joins of the ids.
    pub(crate) mcast: Joins,
    /// The device slot of the engine (each id carries it).
    slot: usize,
}

impl State {
    /// No ids yet, for the engine of device slot `slot`; `seed` starts the PSN generator.
    /// Id numbers start at `slot << 48`, so ids of different devices' engines differ.
    pub(crate) fn new(seed: u64, slot: usize) -> State {
        State {
            slot,
            ids: HashMap::new(),
            by_comm: HashMap::new(),
            watches: HashMap::new(),
            dead: Vec::new(),
            next_id: ((slot as u64) << 48) | 1,
            next_comm: 1,
            rng: seed | 1,
            deferred: Vec::new(),
            mcast: Joins::default(),
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.ids.values().filter_map(|s| s.next_deadline()).min()
    }

    pub(crate) fn id(&mut self, id: &CmId) -> Result<&mut IdState> {
        self.ids.get_mut(&id.number()).ok_or(Error::invalid("rdma_cm", Rule::Destroyed))
    }

    /// A random 24-bit PSN (IBTA: the starting PSN should be random).
    pub(crate) fn random_psn(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng as u32) & 0xff_ffff
    }

    /// A new local communication id: this endpoint in the top 8 bits, so the peer's
    /// messages find this process (docs/device.md, "Numbers": like QPNs), and a counter that
    /// cycles through 2^24 values before reuse.
    pub(crate) fn new_comm_id(&mut self, ep: u32) -> u32 {
        loop {
            let c = self.next_comm & 0xff_ffff;
            self.next_comm = self.next_comm.wrapping_add(1);
            if c == 0 {
                continue;
            }
            let id = (ep << 24) | c;
            if !self.by_comm.contains_key(&id) {
                return id;
            }
        }
    }

    pub(crate) fn new_id(&mut self, ps: PortSpace, qp_type: QpType, context: usize, channel: Option<EventChannel>) -> CmId {
        let n = self.next_id;
        self.next_id += 1;
        let id = CmId::with_number(n, self.slot, ps, qp_type, context);
        self.ids.insert(n, IdState::new(&id, channel));
        id
    }
}

/// Queues an event for the id's channel.
pub(crate) fn emit(cx: &mut Cx, st: &State, n: u64, event: Event) {
    match st.ids.get(&n).and_then(|s| s.channel.clone()) {
        Some(channel) => cx.out.push(Action::Deliver { channel, event }),
        None => tracing::debug!(?event, "event for an id without a channel dropped"),
    }
}

/// A simple event of `kind` with `status` for id `n`.
pub(crate) fn simple_event(cx: &mut Cx, st: &State, n: u64, kind: EventKind, status: i32) {
    if let Some(s) = st.ids.get(&n) {
        let ev = Event::new(kind, status, &s.handle, s.handle.shared.acks.clone());
        emit(cx, st, n, ev);
    }
}
