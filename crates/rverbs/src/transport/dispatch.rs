//! The receive dispatch of the network transport: where each packet the UDP link
//! (`super::udp`) checked goes, from its headers, and handing it there — RC/UC requests
//! to their responder and responses to their requester (`super::net`), UD messages into a
//! QP's queues (`super::host`), MADs to QP1 (`super::gsi`), packets for another process of
//! the host relayed to it (`super::udp::relay`), multicast to the group's members
//! (`super::mcast_net`). It stands above all of them, so that the link below imports none.
//!
//! Read before editing: docs/rocev2-wire.md §1.8 (XRC packets go where RC's do) and §3.5
//! (what a destination QP must be to take a packet), §5.3 (the GRH area of a UD receive),
//! and docs/network.md.
//!
//! The progress thread enters here when a socket is readable ([`readable`]), an
//! application thread when its CQ is empty while network connections exist
//! ([`receive_now`]); both hold `Net::rx`, so packets of a connection are delivered in the
//! order they arrived.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rverbs_proto::rc::Request;
use rverbs_proto::verbs::QpType;
use rverbs_proto::wire::roce::{Packet, Repr};
use rverbs_proto::wire::{Operation, Transport};

use super::grh;
use super::deliver::{deliver_ud, ud_target, UdMessage, UdTarget};
use super::udp::{with_rx_batch, Checked, Net, NetSock};
use crate::engine::Engine;
use crate::gid::Gid;
use crate::limits;
use crate::mcast::Groups;
use crate::mr::Source;
use crate::table::endpoint_of;

/// The progress thread found socket `index` readable (a unicast socket, `Net::rx_sock`,
/// or a multicast group's, `super::udp::group_slot`): receives and delivers what waits,
/// a group's packets to this process's members (`groups`).
pub(crate) fn readable(engine: &'static Engine, net: &Net, groups: &Groups, index: usize) {
    match super::udp::group_slot(index) {
        Some(slot) => super::mcast_net::readable(net, groups, slot),
        None => {
            let _rx = net.rx.lock().expect("receive lock");
            receive_on(engine, net, index, false);
        }
    }
}

/// An application thread found its CQ empty while network connections exist
/// (`progress::receive_inline`): receives what waits on every socket, then on every
/// multicast group's, unless another thread is receiving (which delivers it).
pub(crate) fn receive_now(engine: &'static Engine, net: &Net, groups: &Groups) {
    receive_unicast_now(engine, net);
    super::mcast_net::receive_now(net, groups);
}

/// [`receive_now`] on the unicast sockets. The ACKs this process held back go first: the
/// application polls an empty CQ, so it has nothing to send them with for now; this
/// receive holds new ones if the application busy-polls (`busy_poll`; docs/network.md,
/// "Coalesced ACKs").
fn receive_unicast_now(engine: &'static Engine, net: &Net) {
    super::net::send_due_acks(engine, net, None, true);
    let Ok(_rx) = net.rx.try_lock() else {
        let _ = receiver_busy();
        return;
    };
    let hold = crate::progress::holds_acks(&engine.endpoint);
    let mut any = false;
    for index in 0..2 * net.socks().len() {
        any |= receive_on(engine, net, index, hold);
    }
    if any {
        receiver_free();
    } else {
        let _ = receiver_busy();
    }
}

thread_local! {
    /// How many inline receives of this thread in a row delivered nothing.
    static MISSED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// After this many inline receives in a row that delivered nothing, the application
/// thread yields its CPU once ([`receiver_busy`]).
const MISSED_BEFORE_YIELD: u32 = 16;

/// An inline receive delivered something: the count of misses starts again.
fn receiver_free() {
    MISSED.set(0);
}

/// An inline receive delivered nothing: another thread held the receive lock (the
/// progress thread, which delivers what arrived), or the sockets were empty. If that
/// keeps happening on a machine with fewer cores than busy threads, the thread that
/// should move things may be waiting for this very CPU: our progress thread preempted
/// while it holds the lock and the datagrams it took, or the peer's thread that would
/// answer. The application's polls then find nothing until the scheduler's next tick
/// (milliseconds; BENCHMARKS, "Preempted receivers"). So every [`MISSED_BEFORE_YIELD`]th
/// time in a row this thread yields: a thread that waits for this CPU runs at once, and
/// on an idle CPU the yield costs one system call. Returns whether it yielded.
fn receiver_busy() -> bool {
    let n = MISSED.get() + 1;
    let yields = n >= MISSED_BEFORE_YIELD;
    MISSED.set(if yields { 0 } else { n });
    if yields {
        std::thread::yield_now();
    }
    yields
}

/// Receives and delivers what waits on socket `index` (the caller holds `net.rx`);
/// `hold`: an application thread, which keeps plain ACKs for its next requests. Returns
/// whether anything arrived.
fn receive_on(engine: &'static Engine, net: &Net, index: usize, hold: bool) -> bool {
    let Some(sock) = net.rx_sock(index) else { return false };
    let mut any = false;
    with_rx_batch(|buf| {
        sock.receive(&net.stats, buf, |run| {
            any = true;
            deliver_run(engine, net, sock, run, hold)
        })
    });
    any
}

/// Delivers a run of checked packets, in order: a stretch of RC/UC requests for one QP
/// of this process from one address goes to its responder together
/// ([`super::net::handle_requests`]: one lookup per train), every other packet alone
/// ([`deliver`]). Each packet's [`route`] is found once (the packet that ends a stretch
/// keeps the route found for it there).
fn deliver_run(engine: &'static Engine, net: &Net, sock: &NetSock, run: &[Checked<'_>], hold: bool) {
    let ep = engine.ep();
    let port_down = crate::fault_plan::port_down(engine.endpoint.slot);
    let mut rest = run;
    let mut next = rest.first().map(|c| route(ep, &c.repr));
    while let (Some(c), Some(r)) = (rest.first(), next) {
        // The route of the packet after the ones taken here, when a stretch found it.
        let mut ahead = None;
        let n = if port_down && for_this_endpoint(ep, r) {
            // docs/fault-injection.md: the port of this process's view of the device is
            // down; what arrives for its QPs is dropped (relayed packets and MADs for
            // other processes of the host still pass).
            net.stats.unserved.fetch_add(1, Ordering::Relaxed);
            1
        } else if !matches!(r, Route::Request { .. }) {
            deliver(engine, net, sock, c, r);
            1
        } else {
            // The stretch: the packets that follow from the same address with the same
            // route (RC/UC requests for the same QP of this process).
            let src = c.from.ip();
            let mut n = 1;
            while let Some(d) = rest.get(n) {
                let rd = route(ep, &d.repr);
                if d.from.ip() != src || rd != r {
                    ahead = Some(rd);
                    break;
                }
                n += 1;
            }
            let taken = super::net::handle_requests(engine, net, &sock.gid, src, &rest[..n], hold);
            net.stats.delivered.fetch_add(taken as u64, Ordering::Relaxed);
            net.stats.unserved.fetch_add((n - taken) as u64, Ordering::Relaxed);
            n
        };
        rest = &rest[n..];
        next = ahead.or_else(|| rest.first().map(|c| route(ep, &c.repr)));
    }
}

/// Whether a packet routed `r` is for a QP of endpoint `ep` (an RC/UC request or
/// response, a UD message), the packets a port that is down does not take.
fn for_this_endpoint(ep: u32, r: Route) -> bool {
    match r {
        Route::Request { .. } | Route::Response { .. } => true,
        Route::Ud { qpn, .. } => endpoint_of(qpn) == ep,
        Route::Mad { .. } | Route::Relay { .. } | Route::Unserved => false,
    }
}

/// Where a checked packet goes ([`route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A UD SEND_ONLY to QP1: a MAD, with the Q_Key its DETH names (0: none), for
    /// `super::gsi::deliver`.
    Mad { qkey: u32 },
    /// An RC/UC packet for a QP of another endpoint of this host: relayed to it.
    Relay { qpn: u32 },
    /// An RC/UC request for QP `qpn` of this endpoint: to its responder.
    Request { qpn: u32 },
    /// An RC/UC response for QP `qpn` of this endpoint: to its requester.
    Response { qpn: u32 },
    /// A UD SEND (with or without immediate) for QP `qpn`, with the DETH's Q_Key.
    Ud { qpn: u32, qkey: u32 },
    /// Nothing here serves it (counted as unserved).
    Unserved,
}

/// Where a checked packet goes, from its headers alone, in endpoint `ep` (rxe
/// `rxe_rcv`): the QP's number names its endpoint; QP1 takes only UD SEND_ONLY; other
/// UD QPs only UD SENDs with a DETH.
pub(crate) fn route(ep: u32, repr: &Repr) -> Route {
    let qpn = repr.bth.dest_qp;
    let operation = repr.bth.opcode.operation();
    match repr.bth.opcode.transport() {
        Transport::Ud if qpn == super::gsi::GSI_QPN => match operation {
            Some(Operation::SendOnly) => Route::Mad { qkey: repr.deth.map_or(0, |d| d.qkey) },
            _ => Route::Unserved,
        },
        Transport::Rc | Transport::Uc | Transport::Xrc if endpoint_of(qpn) != ep => Route::Relay { qpn },
        Transport::Rc | Transport::Uc | Transport::Xrc if repr.bth.opcode.is_request() => Route::Request { qpn },
        Transport::Rc | Transport::Uc | Transport::Xrc => Route::Response { qpn },
        Transport::Ud => match (operation, repr.deth) {
            (Some(Operation::SendOnly | Operation::SendOnlyWithImmediate), Some(deth)) => Route::Ud { qpn, qkey: deth.qkey },
            _ => Route::Unserved,
        },
        _ => Route::Unserved,
    }
}

/// Delivers one checked packet, whose [`route`] is `route` (rxe `rxe_rcv`: the destination
/// QP must exist with the packet's transport, accept requests and match the DETH's Q_Key;
/// docs/rocev2-wire.md §3.5).
///
/// The QP may be of another process of this host (its number names its endpoint): the
/// process that owns the port delivers a UD message into that process's queues through
/// shared memory, as the same-host transport does, and relays an RC/UC packet to that
/// process's socket ([`relay_packet`]), so every process is reachable from the network.
fn deliver(engine: &'static Engine, net: &Net, sock: &NetSock, c: &Checked<'_>, route: Route) {
    let Checked { from, id, ref packet, ref repr } = *c;
    let unserved = || {
        net.stats.unserved.fetch_add(1, Ordering::Relaxed);
    };
    let src = from.ip();
    let (qpn, qkey) = match route {
        Route::Mad { qkey } => {
            // A MAD for QP1: to the endpoint it is for (`super::gsi`).
            if super::gsi::deliver(engine, sock, from, qkey, packet.payload()) {
                net.stats.delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                unserved();
            }
            return;
        }
        Route::Relay { .. } => {
            if relay_packet(engine, net, sock, from, id, packet, repr) {
                net.stats.relayed.fetch_add(1, Ordering::Relaxed);
            } else {
                unserved();
            }
            return;
        }
        Route::Response { .. } => {
            // Connected QPs: responses to their requesters (requests went to their
            // responders in runs, `deliver_run`).
            if super::net::handle_response(engine, src, repr, packet.payload()) {
                net.stats.delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                unserved();
            }
            return;
        }
        Route::Request { .. } | Route::Unserved => return unserved(),
        Route::Ud { qpn, qkey } => (qpn, qkey),
    };
    let Some(target) = ud_target(engine, qpn, qkey) else { return unserved() };
    let request = Request::from_repr(repr, packet.payload());
    // docs/rocev2-wire.md §5.3: the receive's GRH area holds the packet's IP header.
    let header = grh::build(&Gid::from_ip(src), &sock.gid, 0, 64, 0, repr.payload_len, repr.immdt.is_some());
    let msg = UdMessage { request: &request, header: &header, data: Source::Bytes(packet.payload()), sl: 0 };
    let mut slot = net.ud_responder.lock().expect("UD responder");
    // rxe does not check a UD message's size on receive: anything up to the largest
    // MTU is taken (the sender's port kept it within its link).
    let mtu = limits::MAX_MTU.bytes();
    match target {
        UdTarget::Local(t) => deliver_ud(&t, &mut slot, Instant::now(), mtu, msg, engine.endpoint.counters),
        UdTarget::Peer(t) => deliver_ud(&t, &mut slot, Instant::now(), mtu, msg, engine.endpoint.counters),
    }
    net.stats.delivered.fetch_add(1, Ordering::Relaxed);
}

/// Relays the RC/UC packet `packet` (from `from`, checked with IPv4 ID `id`) for a QP of
/// another process of the host to that process: only the owner of the port relays, and
/// only to a live endpoint whose record shows an RC/UC QP of that number and which
/// published a port for the socket's address in this network namespace. Returns whether
/// it was sent.
fn relay_packet(engine: &'static Engine, net: &Net, sock: &NetSock, from: SocketAddr, id: u16, packet: &Packet<&[u8]>, repr: &Repr) -> bool {
    let qpn = repr.bth.dest_qp;
    let want = match repr.bth.opcode.transport() {
        Transport::Rc => QpType::Rc,
        // XRC requests are for target QPs, responses for initiators.
        Transport::Xrc if repr.bth.opcode.is_request() => QpType::XrcRecv,
        Transport::Xrc => QpType::XrcSend,
        _ => QpType::Uc,
    };
    if !sock.owns_port() {
        return false;
    }
    let Some(peer) = engine.reg.as_ref().and_then(|r| r.peer(endpoint_of(qpn)).ok()) else { return false };
    if !super::route::is_qp(peer.tables().qp(qpn), qpn, want) {
        return false;
    }
    let Some(port) = peer.net_port(net.netns(), sock.ip) else { return false };
    sock.relay_to(port, from, id, packet.clone().into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_proto::wire::{BthRepr, OpCode};

    /// An application thread yields once per [`MISSED_BEFORE_YIELD`] inline receives in a
    /// row that delivered nothing, and a receive that delivered something starts the count
    /// again (so a busy poller that keeps receiving never yields).
    #[test]
    fn an_inline_receiver_yields_only_after_missing_many_times_in_a_row() {
        receiver_free();
        let yields = |n: u32| (0..n).filter(|_| receiver_busy()).count();
        assert_eq!(yields(MISSED_BEFORE_YIELD - 1), 0);
        assert!(receiver_busy(), "the {MISSED_BEFORE_YIELD}th miss in a row yields");
        assert_eq!(yields(3 * MISSED_BEFORE_YIELD), 3, "once per {MISSED_BEFORE_YIELD} misses");
        assert_eq!(yields(MISSED_BEFORE_YIELD - 1), 0);
        receiver_free();
        assert_eq!(yields(MISSED_BEFORE_YIELD - 1), 0, "the count starts again");
        assert!(receiver_busy());
    }

    /// docs/rocev2-wire.md §1.8: XRC packets go where RC's do — requests to the target
    /// QP's responder, responses to the initiator's requester, another endpoint's relayed.
    #[test]
    fn route_takes_xrc_packets_as_rc() {
        let mine = 5 << crate::table::LOCAL_BITS | 0x12;
        let theirs = 6 << crate::table::LOCAL_BITS | 0x12;
        let of = |opcode, dest_qp| {
            let bth = BthRepr { opcode, solicited: false, migreq: false, pad_count: 0, pkey: 0xffff, fecn: false, becn: false, dest_qp, ack_req: false, psn: 0 };
            route(5, &Repr::new(bth, 0))
        };
        for op in [OpCode::XrcSendOnly, OpCode::XrcRdmaWriteFirst, OpCode::XrcRdmaReadRequest, OpCode::XrcFetchAdd] {
            assert_eq!(of(op, mine), Route::Request { qpn: mine }, "{op:?}");
            assert_eq!(of(op, theirs), Route::Relay { qpn: theirs }, "{op:?}");
        }
        for op in [OpCode::XrcAcknowledge, OpCode::XrcRdmaReadResponseOnly, OpCode::XrcAtomicAcknowledge] {
            assert_eq!(of(op, mine), Route::Response { qpn: mine }, "{op:?}");
            assert_eq!(of(op, theirs), Route::Relay { qpn: theirs }, "{op:?}");
        }
    }
}
