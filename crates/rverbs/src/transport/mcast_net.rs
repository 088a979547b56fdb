//! UD multicast across hosts: the delivery of what a group's sockets receive from the
//! network to this process's members, and the send of a message to a group's IP address
//! (the group sockets themselves, and the options of a send, are the UDP link's:
//! `transport::udp`'s `group` module).
//!
//! Read before editing: `crate::mcast` (who is a member: the attachment rules),
//! docs/rocev2-wire.md §1 (packets), §2.5 (the ICRC covers the destination address: the
//! group's), §5.3 (the GRH area of a UD receive), and ip(7) / ipv6(7) (IP_ADD_MEMBERSHIP,
//! IPV6_JOIN_GROUP, IP_MULTICAST_IF/LOOP/TTL).
//!
//! On RoCEv2 a send to a group is one packet to the group's IP address (an IPv4-mapped
//! GID as IPv4, any other as IPv6), UDP port 4791, DestQP 0xFFFFFF; every host with a
//! member receives it.
//!
//! Receiving: while this process has at least one QP attached to a group
//! (`mcast::Groups`), it holds one UDP socket bound to `group:4791` with SO_REUSEADDR,
//! joined to the group (IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP) on the interface of each
//! address the network transport serves of the group's family. Linux gives every socket
//! bound to a group a copy of what arrives for it, so every process of the host with
//! members receives the packet itself: nothing is relayed between processes, and no
//! process owns a group. The socket closes when the process's last member of the group
//! detaches. A packet goes through the receive checks of unicast ([`NetSock::receive`]:
//! parse, ICRC with the group as destination; drops counted in `NetStats`); then it must
//! be a UD SEND (with or without immediate) to QPN 0xFFFFFF with a DETH, and is delivered
//! to each of this process's members that accepts requests and whose Q_Key matches, its
//! receive's GRH area holding the packet's IP header (source = the sender, destination =
//! the group). Anything else, and a packet for a group with no member left, is dropped and
//! counted as unserved.
//!
//! Sending ([`send`]): a UD send to a group is delivered to this host's members by the
//! same-host transport, and goes once on the network from the socket of the source GID
//! to `group:4791` with IP_MULTICAST_LOOP off (this host's members already have it),
//! IP_MULTICAST_IF the source address's interface (no multicast route is needed), and the
//! address handle's hop limit as TTL / hop limit (0 is sent as 1).
//!
//! Deviation (rxe `rxe_mcast.c`, `rxe_net.c`): rxe filters the group's MAC on its netdev
//! (`dev_mc_add`) and the kernel's rdma_cm joins the IPv4 group (IGMP) for an
//! rdma_join_multicast; here every attach joins at the IP level (IGMP / MLD reports
//! leave the host), since a socket receives only groups it joined. rxe puts the hop
//! limit in the IP header as it is, 0 too (a TTL-0 packet still reaches the link); a socket
//! cannot send with TTL 0 beyond the host, so 0 becomes 1 (the link only). rxe takes a
//! packet to a group address with another DestQP as unicast to that QP; here the group's
//! socket takes only DestQP 0xFFFFFF.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rverbs_proto::rc::Request;
use rverbs_proto::wire::roce::Repr;
use rverbs_proto::wire::{Operation, Transport};

use super::grh;
use super::deliver::{deliver_ud, ud_accepts, UdMessage};
use super::target::LocalTarget;
use super::udp::{Checked, GroupSock, Net, NetSock, NetStats};
use crate::gid::Gid;
use crate::limits;
use crate::mcast::{Groups, MULTICAST_QPN};
use crate::mr::Source;

/// The progress thread found group socket `slot` readable: receives and delivers what
/// waits to this process's members (`groups`).
pub(crate) fn readable(net: &Net, groups: &Groups, slot: usize) {
    if let Some(g) = net.mcast.slot(slot) {
        let _rx = net.rx.lock().expect("receive lock");
        receive(net, groups, &g);
    }
}

/// An application thread found its CQ empty (`progress::receive_inline`): receives what
/// waits on every group socket, unless another thread is receiving (which delivers it).
pub(crate) fn receive_now(net: &Net, groups: &Groups) {
    if !net.mcast.any_open() {
        return;
    }
    let socks = net.mcast.open_socks();
    if socks.is_empty() {
        return;
    }
    let Ok(_rx) = net.rx.try_lock() else { return };
    for g in socks {
        receive(net, groups, &g);
    }
}

fn receive(net: &Net, groups: &Groups, g: &GroupSock) {
    receive_group(&g.sock, &net.stats, |c| deliver(net, groups, &g.group, c));
}

/// Receives what waits on group socket `sock` ([`NetSock::receive`]: checked, drops
/// counted in `stats`) and hands each packet to `deliver`, which says whether it reached a
/// member (counted as delivered, else as unserved).
fn receive_group(sock: &NetSock, stats: &NetStats, mut deliver: impl FnMut(&Checked<'_>) -> bool) {
    super::udp::with_rx_batch(|buf| {
        sock.receive(stats, buf, |run| {
            for c in run {
                let counter = if deliver(c) { &stats.delivered } else { &stats.unserved };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        })
    });
}

/// The Q_Key of a packet a group takes (rxe `rxe_rcv`, `check_type_state`, `check_keys`):
/// a UD SEND_ONLY or SEND_ONLY_WITH_IMMEDIATE to DestQP 0xFFFFFF, with a DETH; `None`
/// for anything else.
pub(crate) fn group_qkey(repr: &Repr) -> Option<u32> {
    let send = matches!(repr.bth.opcode.operation(), Some(Operation::SendOnly | Operation::SendOnlyWithImmediate));
    if repr.bth.opcode.transport() != Transport::Ud || !send || repr.bth.dest_qp != MULTICAST_QPN {
        return None;
    }
    repr.deth.map(|d| d.qkey)
}

/// Delivers one checked packet for `group` to every member of this process that accepts
/// requests and whose Q_Key matches (docs/rocev2-wire.md §3.5 for each); whether any did.
fn deliver(net: &Net, groups: &Groups, group: &Gid, c: &Checked<'_>) -> bool {
    let Some(qkey) = group_qkey(&c.repr) else {
        return false;
    };
    let members: Vec<_> = groups
        .members(group)
        .into_iter()
        .filter(|t| t.qp_type == rverbs_proto::verbs::QpType::Ud && ud_accepts(t.rec, qkey))
        .collect();
    if members.is_empty() {
        return false;
    }
    let request = Request::from_repr(&c.repr, c.packet.payload());
    // docs/rocev2-wire.md §5.3: the packet's IP header, to the group.
    let header = grh::build(&Gid::from_ip(c.from.ip()), group, 0, 64, 0, c.repr.payload_len, c.repr.immdt.is_some());
    let mut slot = net.ud_responder.lock().expect("UD responder");
    for t in members {
        let msg = UdMessage { request: &request, header: &header, data: Source::Bytes(c.packet.payload()), sl: 0 };
        // As for unicast: no size check on receive (the sender's port kept it within its
        // link).
        let counters = t.pd.endpoint().counters;
        deliver_ud(&LocalTarget::of(t), &mut slot, Instant::now(), limits::MAX_MTU.bytes(), msg, counters);
    }
    true
}

/// Sends the RoCEv2 packet `packet` (BTH to ICRC; the ICRC written here) once on the
/// network from the socket of local GID `sgid` to `group:4791`, with hop limit
/// `hop_limit` (0: 1), multicast loopback off, leaving on the source address's interface
/// (module doc). Without a socket for `sgid` nothing is sent.
pub(crate) fn send(net: &Net, sgid: &Gid, group: IpAddr, hop_limit: u8, packet: &mut [u8]) {
    let Some(sock) = net.sock_of(sgid) else {
        return;
    };
    net.mcast.configured(sock, hop_limit, || net.send(sgid, group, packet));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, UdpSocket};

    use crate::mcast::Reception;
    use super::super::udp::ROCE_PORT;

    use rverbs_proto::wire::roce::Packet;
    use rverbs_proto::wire::{BthRepr, DethRepr, OpCode};

    const QKEY: u32 = 0x1111_2222;

    fn repr(opcode: OpCode, dest_qp: u32, deth: bool, len: usize) -> Repr {
        let bth = BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn: 0,
        };
        let mut r = Repr::new(bth, len);
        r.deth = deth.then_some(DethRepr { qkey: QKEY, src_qp: 0x34 });
        r
    }

    /// A UD SEND_ONLY packet to `dest_qp` carrying `payload` (its ICRC not written).
    fn packet(dest_qp: u32, payload: &[u8]) -> Vec<u8> {
        let r = repr(OpCode::UdSendOnly, dest_qp, true, payload.len());
        let mut buf = vec![0; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(payload);
        buf
    }

    /// rxe `rxe_rcv`: a group takes UD SENDs (with or without immediate) to QPN 0xFFFFFF
    /// that carry a DETH, with the DETH's Q_Key; nothing else.
    #[test]
    fn a_group_takes_only_ud_sends_to_the_multicast_qpn() {
        assert_eq!(group_qkey(&repr(OpCode::UdSendOnly, MULTICAST_QPN, true, 8)), Some(QKEY));
        assert_eq!(group_qkey(&repr(OpCode::UdSendOnlyWithImmediate, MULTICAST_QPN, true, 8)), Some(QKEY));
        assert_eq!(group_qkey(&repr(OpCode::UdSendOnly, 0x12, true, 8)), None, "another QPN");
        assert_eq!(group_qkey(&repr(OpCode::UdSendOnly, MULTICAST_QPN, false, 8)), None, "no DETH");
        assert_eq!(group_qkey(&repr(OpCode::UcSendOnly, MULTICAST_QPN, false, 8)), None, "UC");
        assert_eq!(group_qkey(&repr(OpCode::RcSendOnly, MULTICAST_QPN, false, 8)), None, "RC");
    }

    /// A multicast send leaves from the source GID's socket to `group:4791` with loopback
    /// off and the hop limit as TTL (0: 1); on the loopback interface it comes back to the
    /// group's socket anyway, whose receive checks its ICRC with the group as destination.
    /// A packet for another QPN is counted unserved, a corrupted one as a bad ICRC.
    #[test]
    fn a_multicast_send_reaches_the_group_socket_whose_checks_count_drops() {
        let net = Net::loopback_for_tests();
        let group = Ipv4Addr::new(239, 255, 77, 2);
        let ggid = Gid::from_ipv4(group);
        net.join(&ggid).unwrap();
        let sgid = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
        send(&net, &sgid, IpAddr::V4(group), 0, &mut packet(MULTICAST_QPN, b"to the group"));
        let sock = net.sock_of(&sgid).unwrap();
        assert!(!rustix::net::sockopt::ip_multicast_loop(sock.fd()).unwrap());
        assert_eq!(rustix::net::sockopt::ip_multicast_ttl(sock.fd()).unwrap(), 1, "hop limit 0 is sent as 1");
        send(&net, &sgid, IpAddr::V4(group), 64, &mut packet(0x12, b"not for a group"));
        assert_eq!(rustix::net::sockopt::ip_multicast_ttl(sock.fd()).unwrap(), 64);
        // Sealed for another destination: the ICRC does not check at the group.
        let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
        rustix::net::sockopt::set_ip_multicast_if(&raw, &Ipv4Addr::LOCALHOST).unwrap();
        let mut bad = packet(MULTICAST_QPN, b"corrupted");
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&[1, 2, 3, 4]);
        raw.send_to(&bad, (group, ROCE_PORT)).unwrap();

        let g = net.mcast.slot(0).unwrap();
        let stats = NetStats::default();
        let mut got = Vec::new();
        for _ in 0..10_000 {
            receive_group(&g.sock, &stats, |c| {
                got.push((c.from.ip(), c.packet.payload().to_vec(), group_qkey(&c.repr)));
                group_qkey(&c.repr).is_some()
            });
            if got.len() == 2 && stats.bad_icrc.load(Ordering::Relaxed) == 1 {
                break;
            }
            std::thread::yield_now();
        }
        got.sort();
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(got, [(lo, b"not for a group".to_vec(), None), (lo, b"to the group".to_vec(), Some(QKEY))]);
        assert_eq!(stats.bad_icrc.load(Ordering::Relaxed), 1);
        assert_eq!(stats.delivered.load(Ordering::Relaxed), 1);
        assert_eq!(stats.unserved.load(Ordering::Relaxed), 1);
    }
}
