//! The handshake in virtual time: two hosts' state machines joined by a network that the
//! test drives and that loses the MADs it is told to lose, each host reading a fake
//! world. No QP1, no thread, no clock: a resend or a timeout happens exactly when the
//! test moves the time, so the IBTA timing rules are checked to the microsecond.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rverbs::capi_support::qp1::{Mad, MadPeer};
use rverbs::QpType;

use super::world::{Action, Cx, World};
use super::{handshake, St, State};
use crate::addr::{gid_of, LocalGid};
use crate::channel::EventChannel;
use crate::event::{ConnParam, Event, EventKind};
use crate::handle::{CmId, PortSpace};
use crate::mad::CmMessage;
use crate::table::Owner;

/// What a host's world says: one address, one endpoint, at most one listener.
struct Facts {
    ip: IpAddr,
    ep: u32,
    listener: Option<(SocketAddr, u64)>,
}

impl World for Facts {
    fn endpoint(&self) -> u32 {
        self.ep
    }
    fn max_rd_atom(&self) -> u8 {
        16
    }
    fn node_guid(&self) -> u64 {
        u64::from(self.ep)
    }
    fn local_gid(&self, ip: IpAddr) -> Option<LocalGid> {
        (ip == self.ip).then(|| LocalGid { index: 1, gid: gid_of(ip) })
    }
    fn listener(&self, _ps: PortSpace, dst: SocketAddr) -> Option<Owner> {
        self.listener.filter(|(a, _)| *a == dst).map(|(_, id)| Owner { ep: self.ep, pid: 1000, id })
    }
    fn owner_pid(&self, _ep: u32) -> Option<i32> {
        Some(1000)
    }
    fn link_mtu(&self, _local: IpAddr) -> u32 {
        1500
    }
}

struct Host {
    facts: Facts,
    st: State,
    ch: EventChannel,
}

/// The name of a CM message, for the log of what crossed the network.
fn name(bytes: &[u8; 256]) -> &'static str {
    match CmMessage::decode_with_modifier(bytes).expect("well-formed").2 {
        CmMessage::Req(_) => "REQ",
        CmMessage::Mra(_) => "MRA",
        CmMessage::Rej(_) => "REJ",
        CmMessage::Rep(_) => "REP",
        CmMessage::Rtu(_) => "RTU",
        CmMessage::Dreq(_) => "DREQ",
        CmMessage::Drep(_) => "DREP",
        CmMessage::SidrReq(_) => "SIDR_REQ",
        CmMessage::SidrRep(_) => "SIDR_REP",
    }
}

/// Two hosts, A (index 0) and B (index 1), and the MADs on the way between them.
struct Net {
    hosts: [Host; 2],
    now: Instant,
    wire: VecDeque<(usize, Mad)>,
    /// Every message sent: "A:REQ", "B:MRA", …, lost ones too.
    log: Vec<String>,
    /// Messages to lose, by sender and name, each once.
    lose: Vec<(usize, &'static str)>,
    /// Lose everything A sends.
    cut: bool,
}

const PORT: u16 = 7471;

impl Net {
    fn new() -> Net {
        let host = |i: u8| Host {
            facts: Facts { ip: IpAddr::from([10, 0, 0, i + 1]), ep: u32::from(i) + 1, listener: None },
            st: State::new(0x9e37_79b9 + u64::from(i), 0),
            ch: EventChannel::new().unwrap(),
        };
        Net { hosts: [host(0), host(1)], now: Instant::now(), wire: VecDeque::new(), log: Vec::new(), lose: Vec::new(), cut: false }
    }

    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::new(self.hosts[i].facts.ip, PORT)
    }

    /// Hands host `i` one input at the current time and carries out its actions.
    fn input<T>(&mut self, i: usize, f: impl FnOnce(&mut Cx, &mut State) -> T) -> T {
        let now = self.now;
        let h = &mut self.hosts[i];
        let mut cx = Cx::new(&h.facts, now);
        let r = f(&mut cx, &mut h.st);
        for a in cx.out {
            self.act(i, a);
        }
        r
    }

    fn act(&mut self, i: usize, a: Action) {
        let j = 1 - i;
        let (me, peer) = (self.hosts[i].facts.ip, self.hosts[j].facts.ip);
        match a {
            Action::Send { to, mad, .. } => {
                assert_eq!(to, MadPeer::Remote { peer, local: me }, "sent to the other host");
                let n = name(&mad);
                self.log.push(format!("{}:{n}", ["A", "B"][i]));
                let lost = match self.lose.iter().position(|l| *l == (i, n)) {
                    Some(k) => {
                        self.lose.remove(k);
                        true
                    }
                    None => self.cut && i == 0,
                };
                if !lost {
                    self.wire.push_back((j, Mad { from: MadPeer::Remote { peer: me, local: peer }, bytes: mad }));
                }
            }
            Action::Deliver { channel, event } => channel.push(event),
            // Another host's process is not watched (its death is learnt by timeouts).
            Action::Watch { peer, .. } | Action::Unwatch { peer, .. } => {
                assert!(matches!(peer, MadPeer::Remote { .. }));
            }
            Action::Forward { .. } => panic!("nothing to hand on between two hosts"),
            Action::QpToErr(_) => panic!("these ids have no QP"),
        }
    }

    /// Delivers every MAD on the wire, and those they cause.
    fn deliver(&mut self) {
        while let Some((j, mad)) = self.wire.pop_front() {
            self.input(j, |cx, st| handshake::receive(cx, st, &mad));
        }
    }

    /// Moves the clock by `d` and lets both hosts' timers fire.
    fn advance(&mut self, d: Duration) {
        self.now += d;
        for i in 0..2 {
            self.input(i, handshake::tick);
        }
    }

    /// The events queued on host `i`'s channel, taken.
    fn events(&mut self, i: usize) -> Vec<Event> {
        std::iter::from_fn(|| self.hosts[i].ch.try_get_event()).collect()
    }

    fn kinds(&mut self, i: usize) -> Vec<(EventKind, i32)> {
        self.events(i).iter().map(|e| (e.kind, e.status)).collect()
    }

    fn state(&self, i: usize, id: &CmId) -> St {
        self.hosts[i].st.ids[&id.number()].st()
    }

    /// A listening id on B.
    fn listen(&mut self) -> CmId {
        let addr = self.addr(1);
        let h = &mut self.hosts[1];
        let id = h.st.new_id(PortSpace::Tcp, QpType::Rc, 0, Some(h.ch.clone()));
        let s = h.st.ids.get_mut(&id.number()).unwrap();
        s.src = Some(addr);
        s.sgid = h.facts.local_gid(addr.ip());
        s.backlog = 8;
        s.enter(St::Bound);
        s.enter(St::Listen);
        h.facts.listener = Some((addr, id.number()));
        id
    }

    /// An id on A with its route to B resolved, `cm_timeout` and `cm_retries` set.
    fn client(&mut self, cm_timeout: u8, cm_retries: u8) -> CmId {
        let (src, dst) = (SocketAddr::new(self.hosts[0].facts.ip, 40000), self.addr(1));
        let h = &mut self.hosts[0];
        let id = h.st.new_id(PortSpace::Tcp, QpType::Rc, 0, Some(h.ch.clone()));
        let s = h.st.ids.get_mut(&id.number()).unwrap();
        (s.src, s.dst, s.sgid, s.dgid) = (Some(src), Some(dst), h.facts.local_gid(src.ip()), Some(gid_of(dst.ip())));
        (s.cm_timeout, s.cm_retries) = (cm_timeout, cm_retries);
        for next in [St::Bound, St::AddrResolved, St::RouteResolved] {
            s.enter(next);
        }
        id
    }

    /// A's REQ reaches B's listener: B's new id for it.
    fn request(&mut self, c: &CmId) -> CmId {
        let p = ConnParam { qp_num: 0x11, private_data: b"hello".to_vec(), ..ConnParam::default() };
        self.input(0, |cx, st| handshake::connect(cx, st, c, &p, None)).unwrap();
        self.deliver();
        let evs = self.events(1);
        assert_eq!(evs.len(), 1, "one CONNECT_REQUEST");
        assert_eq!(evs[0].kind, EventKind::ConnectRequest);
        assert_eq!(evs[0].conn.qp_num, 0x11, "the REQ carries the QPN");
        assert_eq!(&evs[0].conn.private_data[..5], b"hello");
        evs[0].id.clone()
    }

    /// A connection between a client of A and a child of B's listener, established.
    fn established(&mut self) -> (CmId, CmId) {
        self.listen();
        let c = self.client(10, 3);
        let child = self.request(&c);
        let p = ConnParam { qp_num: 0x22, ..ConnParam::default() };
        self.input(1, |cx, st| handshake::accept(cx, st, &child, Some(&p))).unwrap();
        self.deliver();
        let evs = self.events(0);
        assert_eq!(evs.iter().map(|e| e.kind).collect::<Vec<_>>(), [EventKind::ConnectResponse]);
        assert_eq!(evs[0].conn.qp_num, 0x22, "the REP carries the QPN");
        self.input(0, |cx, st| handshake::establish(cx, st, &c)).unwrap();
        self.deliver();
        assert_eq!(self.kinds(1), [(EventKind::Established, 0)]);
        assert_eq!((self.state(0, &c), self.state(1, &child)), (St::Established, St::Established));
        (c, child)
    }
}

/// The response timeout of code `t` (IBTA: 4.096 µs × 2^t).
fn every(t: u8) -> Duration {
    Duration::from_nanos(4096 << t)
}

#[test]
fn a_connection_is_made_and_released_with_each_message_once() {
    let mut net = Net::new();
    let (c, child) = net.established();
    net.input(0, |cx, st| handshake::disconnect(cx, st, &c)).unwrap();
    net.deliver();
    assert_eq!(net.kinds(1), [(EventKind::Disconnected, 0)]);
    assert_eq!(net.state(1, &child), St::DreqRcvd);
    net.input(1, |cx, st| handshake::disconnect(cx, st, &child)).unwrap();
    net.deliver();
    assert_eq!(net.kinds(0), [(EventKind::Disconnected, 0)]);
    assert_eq!((net.state(0, &c), net.state(1, &child)), (St::Disconnected, St::Disconnected));
    assert_eq!(net.log, ["A:REQ", "B:MRA", "B:REP", "A:RTU", "A:DREQ", "B:DREP"]);
    // Nothing is left to resend or time out.
    net.advance(every(10) * 100);
    assert_eq!(net.log.len(), 6);
    assert!(net.kinds(0).is_empty() && net.kinds(1).is_empty());
}

#[test]
fn an_unanswered_request_is_resent_each_timeout_then_unreachable_exactly_at_the_deadline() {
    let mut net = Net::new();
    net.listen();
    let c = net.client(10, 3);
    net.cut = true;
    let p = ConnParam { qp_num: 0x11, ..ConnParam::default() };
    net.input(0, |cx, st| handshake::connect(cx, st, &c, &p, None)).unwrap();
    let tick = Duration::from_micros(1);
    for k in 1..=3 {
        net.advance(every(10) - tick);
        assert_eq!(net.log.len(), k, "no resend before the timeout");
        net.advance(tick);
        assert_eq!(net.log.len(), k + 1, "resend {k} at {k} timeouts");
    }
    net.advance(every(10) - tick);
    assert!(net.kinds(0).is_empty(), "still waiting before (retries + 1) timeouts");
    net.advance(tick);
    assert_eq!(net.kinds(0), [(EventKind::Unreachable, -libc::ETIMEDOUT)]);
    assert_eq!(net.log, ["A:REQ", "A:REQ", "A:REQ", "A:REQ", "A:REJ"], "then a REJ (timeout) for the peer");
    assert_eq!(net.state(0, &c), St::Failed);
}

#[test]
fn a_lost_reply_is_sent_again_and_the_connection_completes() {
    let mut net = Net::new();
    net.listen();
    let c = net.client(10, 3);
    let child = net.request(&c);
    net.lose.push((1, "REP"));
    let p = ConnParam { qp_num: 0x22, ..ConnParam::default() };
    net.input(1, |cx, st| handshake::accept(cx, st, &child, Some(&p))).unwrap();
    net.deliver();
    assert!(net.kinds(0).is_empty(), "the REP was lost");
    // The passive side resends with its own response timeout (code 20 by default).
    net.advance(every(20) - Duration::from_micros(1));
    assert_eq!(net.log.len(), 3, "not before");
    net.advance(Duration::from_micros(1));
    net.deliver();
    assert_eq!(net.kinds(0), [(EventKind::ConnectResponse, 0)], "{:?}", net.log);
    net.input(0, |cx, st| handshake::establish(cx, st, &c)).unwrap();
    net.deliver();
    assert_eq!(net.kinds(1), [(EventKind::Established, 0)]);
    // The MRA stopped A's REQ resends: only B's REP went twice.
    assert_eq!(net.log, ["A:REQ", "B:MRA", "B:REP", "B:REP", "A:RTU"]);
}

#[test]
fn both_sides_disconnecting_at_once_see_one_disconnected_each() {
    let mut net = Net::new();
    let (c, child) = net.established();
    net.input(0, |cx, st| handshake::disconnect(cx, st, &c)).unwrap();
    net.input(1, |cx, st| handshake::disconnect(cx, st, &child)).unwrap();
    net.deliver();
    assert_eq!(net.kinds(0), [(EventKind::Disconnected, 0)]);
    assert_eq!(net.kinds(1), [(EventKind::Disconnected, 0)]);
    assert_eq!((net.state(0, &c), net.state(1, &child)), (St::Disconnected, St::Disconnected));
    net.advance(every(10) * 100);
    assert!(net.kinds(0).is_empty() && net.kinds(1).is_empty(), "no second DISCONNECTED");
}

#[test]
fn a_lost_drep_is_answered_again_when_the_dreq_is_resent() {
    let mut net = Net::new();
    let (c, child) = net.established();
    net.input(0, |cx, st| handshake::disconnect(cx, st, &c)).unwrap();
    net.deliver();
    net.lose.push((1, "DREP"));
    net.input(1, |cx, st| handshake::disconnect(cx, st, &child)).unwrap();
    net.deliver();
    assert!(net.kinds(0).is_empty(), "the DREP was lost");
    net.advance(every(10));
    net.deliver();
    assert_eq!(net.kinds(0), [(EventKind::Disconnected, 0)]);
    assert_eq!(net.kinds(1), [(EventKind::Disconnected, 0)], "B's one DISCONNECTED came with the first DREQ");
    assert_eq!(&net.log[4..], ["A:DREQ", "B:DREP", "A:DREQ", "B:DREP"]);
}

#[test]
fn a_request_for_a_port_nobody_listens_on_is_rejected_with_reason_8() {
    let mut net = Net::new();
    let c = net.client(10, 3);
    let p = ConnParam { qp_num: 0x11, ..ConnParam::default() };
    net.input(0, |cx, st| handshake::connect(cx, st, &c, &p, None)).unwrap();
    net.deliver();
    assert_eq!(net.kinds(0), [(EventKind::Rejected, 8)]);
    assert_eq!(net.log, ["A:REQ", "B:REJ"]);
    assert_eq!(net.state(0, &c), St::Failed);
}
