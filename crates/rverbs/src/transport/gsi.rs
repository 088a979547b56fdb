//! QP1 across hosts: management datagrams (MADs) to and from the General Services QP of
//! another host, carried as RoCEv2 UD packets, and the QP1 receive records every
//! endpoint's `qp1` FIFO holds (`crate::qp1`).
//!
//! Rules (IBTA Vol 1 §13.4–§13.5, Annex A16/A17 for RoCE; rxe `rxe_recv.c`,
//! `check_keys`): QP1 is QP number 1 of every port; a MAD travels as a UD SEND_ONLY to
//! QP1 with P_Key 0xFFFF and the GSI Q_Key 0x8001_0000, from source QP 1, its 256 bytes
//! the whole payload. A RoCEv2 host is reached at `address:4791` (docs/rocev2-wire.md §1).
//!
//! Receiving: every process of a host is an endpoint of the host-wide device, and only
//! the owner of `address:4791` receives what the network sends there
//! (`super::udp`). It hands a MAD to the endpoint it is for through that endpoint's
//! `qp1` FIFO, as the IBTA's General Services Interface dispatches a MAD by class and by
//! what it names ([`receiver`]):
//! - a Communication Manager message that answers or continues a handshake names the
//!   receiver's local communication ID (REP, RTU, MRA, REJ, DREQ, DREP: the remote
//!   communication ID; SIDR_REP: the request ID), and rverbs' connection manager puts its
//!   endpoint in the top 8 bits of the IDs it hands out, as QPNs carry theirs;
//! - a request (REQ, SIDR_REQ) names a service, not a process: it goes to the *GSI
//!   dispatcher*, the lowest-numbered live endpoint with an open QP1, whose connection
//!   manager finds the listener in its host-wide table and forwards the MAD, with its
//!   origin, to that endpoint (`crate::qp1::Qp1::forward`), or answers it itself (nobody
//!   listens: REJ "invalid service ID").
//!
//! Other management classes and malformed MADs are dropped and counted as unserved.
//!
//! Sending: from the socket of the local address the connection uses, to `peer:4791`.
//! MADs are not retransmitted here; the connection manager keeps its response timeouts.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use rverbs_proto::wire::roce::{Packet, Repr};
use rverbs_proto::wire::{BthRepr, DethRepr, OpCode};

use super::udp::{Net, NetSock};
use crate::engine::Engine;
use crate::gid::Gid;

/// The QP number of the General Services QP (IBTA Vol 1 §3.9.6).
pub const GSI_QPN: u32 = 1;

/// The Q_Key of QP1 (IBTA Vol 1 §3.9.6.2: "the well-known Q_Key 0x8001_0000").
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Bytes of a MAD (IBTA Vol 1 §13.4.2).
pub const MAD_LEN: usize = 256;

/// The management class of the Communication Manager (IBTA Vol 1 Table 137).
const CLASS_CM: u8 = 0x07;

/// Bytes of the common MAD header, before the message (IBTA Vol 1 §13.4.3).
const MAD_HEADER_LEN: usize = 24;

/// Where a MAD came from, and where an answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MadPeer {
    /// QP1 of an endpoint (a process) of this host.
    Endpoint(u32),
    /// QP1 of another host, at IP address `peer`, reached from this host's `local`.
    Remote {
        /// The other host's address (the packet's source).
        peer: IpAddr,
        /// This host's address the packet was sent to (answers leave from it).
        local: IpAddr,
    },
}

/// Name of the QP1 receive FIFO in an endpoint directory.
pub(crate) const FIFO_NAME: &str = "qp1";

/// Bytes of a QP1 receive record: a tag word (the sending endpoint, or [`REMOTE`]), 4
/// reserved, the remote and local addresses as IPv6 (IPv4-mapped), then the MAD.
pub(crate) const RECORD_LEN: usize = 8 + 16 + 16 + MAD_LEN;

/// The tag of a record whose MAD came from another host.
const REMOTE: u32 = u32::MAX;

/// The receive record of `mad` from `from`. Shorter than `PIPE_BUF`, so a record is
/// written to a FIFO whole, never interleaved with another writer's.
pub(crate) fn record(from: MadPeer, mad: &[u8; MAD_LEN]) -> [u8; RECORD_LEN] {
    let mut rec = [0u8; RECORD_LEN];
    match from {
        MadPeer::Endpoint(ep) => rec[..4].copy_from_slice(&ep.to_ne_bytes()),
        MadPeer::Remote { peer, local } => {
            rec[..4].copy_from_slice(&REMOTE.to_ne_bytes());
            rec[8..24].copy_from_slice(&v6(peer).octets());
            rec[24..40].copy_from_slice(&v6(local).octets());
        }
    }
    rec[40..].copy_from_slice(mad);
    rec
}

/// The origin and MAD of a receive record.
pub(crate) fn parse_record(rec: &[u8; RECORD_LEN]) -> (MadPeer, [u8; MAD_LEN]) {
    let tag = u32::from_ne_bytes(rec[..4].try_into().expect("4 bytes"));
    let from = if tag == REMOTE {
        let ip = |b: &[u8]| canonical(Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes")));
        MadPeer::Remote { peer: ip(&rec[8..24]), local: ip(&rec[24..40]) }
    } else {
        MadPeer::Endpoint(tag)
    };
    let mut mad = [0u8; MAD_LEN];
    mad.copy_from_slice(&rec[40..]);
    (from, mad)
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn canonical(ip: Ipv6Addr) -> IpAddr {
    ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4)
}

/// The RoCEv2 packet (BTH to ICRC, ICRC not yet computed) that carries `mad` to QP1:
/// UD SEND_ONLY, P_Key 0xFFFF, PSN `psn`, DETH with the GSI Q_Key from source QP 1.
pub(crate) fn packet(mad: &[u8; MAD_LEN], psn: u32) -> Vec<u8> {
    let bth = BthRepr {
        opcode: OpCode::UdSendOnly,
        solicited: false,
        migreq: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: GSI_QPN,
        ack_req: false,
        psn: psn & 0xff_ffff,
    };
    let mut repr = Repr::new(bth, MAD_LEN);
    repr.deth = Some(DethRepr { qkey: GSI_QKEY, src_qp: GSI_QPN });
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(mad);
    buf
}

/// Sends `mad` to QP1 of the host at `peer`, from this host's address `local`. Fails
/// with `EHOSTUNREACH` when the network transport has no socket for `local`.
pub(crate) fn send(net: &Net, local: IpAddr, peer: IpAddr, mad: &[u8; MAD_LEN]) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PSN: AtomicU32 = AtomicU32::new(0);
    let sgid = Gid::from_ip(local);
    if net.sock_of(&sgid).is_none() {
        return Err(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH));
    }
    let mut p = packet(mad, PSN.fetch_add(1, Ordering::Relaxed));
    net.send(&sgid, peer, &mut p);
    Ok(())
}

/// Whom a MAD received from the network is for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Receiver {
    /// The endpoint whose number the MAD names.
    Endpoint(u32),
    /// A request for a service: the GSI dispatcher.
    Dispatcher,
}

/// The receiver of `mad` (module docs), or `None` for a MAD this host does not serve.
pub(crate) fn receiver(mad: &[u8; MAD_LEN]) -> Option<Receiver> {
    // Base version 1, the CM class, class version 2 (IBTA Vol 1 §12.6.1).
    if mad[0] != 1 || mad[1] != CLASS_CM || mad[2] != 2 {
        return None;
    }
    let attr = u16::from_be_bytes([mad[16], mad[17]]);
    let word = |at: usize| u32::from_be_bytes(mad[MAD_HEADER_LEN + at..MAD_HEADER_LEN + at + 4].try_into().expect("4 bytes"));
    let named = match attr {
        // REQ, SIDR_REQ
        0x0010 | 0x0017 => return Some(Receiver::Dispatcher),
        // MRA, REJ, REP, RTU, DREQ, DREP: local then remote communication ID.
        0x0011..=0x0016 => word(4),
        // SIDR_REP: the request ID the requester chose.
        0x0018 => word(0),
        _ => return None,
    };
    Some(Receiver::Endpoint(named >> 24))
}

/// Delivers the MAD a UD packet to QP1 carried (`payload`, checked by the receive path;
/// from `from`, arrived on `sock`) into the `qp1` FIFO of the endpoint it is for. Returns
/// whether it was delivered.
pub(crate) fn deliver(engine: &'static Engine, sock: &NetSock, from: SocketAddr, qkey: u32, payload: &[u8]) -> bool {
    let Ok(mad) = <&[u8; MAD_LEN]>::try_from(payload) else { return false };
    if qkey != GSI_QKEY {
        return false;
    }
    let Some(to) = receiver(mad) else { return false };
    let rec = record(MadPeer::Remote { peer: canonical(v6(from.ip())), local: sock.ip }, mad);
    let ep = match to {
        Receiver::Endpoint(ep) => ep,
        Receiver::Dispatcher => match dispatcher(engine) {
            Some(ep) => ep,
            None => return false,
        },
    };
    write_to(engine, ep, &rec)
}

/// The GSI dispatcher: the lowest-numbered live endpoint with an open QP1.
fn dispatcher(engine: &'static Engine) -> Option<u32> {
    let Some(reg) = engine.reg.as_ref() else {
        return engine.dir.join(FIFO_NAME).exists().then_some(engine.ep());
    };
    (0..crate::shm::registry::MAX_ENDPOINTS)
        .find(|&ep| crate::shm::registry::ep_dir(&reg.root, ep).join(FIFO_NAME).exists() && reg.alive(ep))
}

/// Writes a receive record into endpoint `ep`'s `qp1` FIFO (this endpoint's included).
fn write_to(engine: &'static Engine, ep: u32, rec: &[u8; RECORD_LEN]) -> bool {
    let fd = if ep == engine.ep() {
        match crate::shm::fifo::open_writer(&engine.dir.join(FIFO_NAME)) {
            Ok(fd) => std::sync::Arc::new(fd),
            Err(_) => return false,
        }
    } else {
        let Some(peer) = engine.reg.as_ref().and_then(|r| r.peer(ep).ok()) else { return false };
        match peer.writer(FIFO_NAME) {
            Ok(fd) => fd,
            Err(_) => return false,
        }
    };
    matches!(crate::sys::write_no_sigpipe(std::os::fd::AsFd::as_fd(&*fd), rec), Ok(n) if n == rec.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm_mad(attr: u16) -> [u8; MAD_LEN] {
        let mut m = [0u8; MAD_LEN];
        m[0] = 1;
        m[1] = CLASS_CM;
        m[2] = 2;
        m[3] = 3;
        m[16..18].copy_from_slice(&attr.to_be_bytes());
        m
    }

    #[test]
    fn records_carry_the_origin_and_the_mad_whole() {
        let mut mad = cm_mad(0x0013);
        mad[255] = 0xa5;
        for from in [
            MadPeer::Endpoint(7),
            MadPeer::Remote { peer: "10.66.0.2".parse().unwrap(), local: "10.66.0.1".parse().unwrap() },
            MadPeer::Remote { peer: "fd00::2".parse().unwrap(), local: "fd00::1".parse().unwrap() },
        ] {
            let (got, m) = parse_record(&record(from, &mad));
            assert_eq!(got, from);
            assert_eq!(m, mad);
        }
        const { assert!(RECORD_LEN <= 4096, "a record is written whole (PIPE_BUF)") };
    }

    #[test]
    fn requests_go_to_the_dispatcher_and_answers_to_the_named_endpoint() {
        assert_eq!(receiver(&cm_mad(0x0010)), Some(Receiver::Dispatcher));
        assert_eq!(receiver(&cm_mad(0x0017)), Some(Receiver::Dispatcher));
        for attr in 0x0011..=0x0016u16 {
            let mut m = cm_mad(attr);
            m[24..28].copy_from_slice(&0x0900_0001u32.to_be_bytes()); // the sender's id
            m[28..32].copy_from_slice(&0x0300_0002u32.to_be_bytes()); // ours: endpoint 3
            assert_eq!(receiver(&m), Some(Receiver::Endpoint(3)), "attribute {attr:#x}");
        }
        let mut sidr_rep = cm_mad(0x0018);
        sidr_rep[24..28].copy_from_slice(&0x0500_0009u32.to_be_bytes());
        assert_eq!(receiver(&sidr_rep), Some(Receiver::Endpoint(5)));
    }

    #[test]
    fn other_classes_versions_and_attributes_are_not_served() {
        let mut sa = cm_mad(0x0010);
        sa[1] = 0x03; // subnet administration
        assert_eq!(receiver(&sa), None);
        let mut v1 = cm_mad(0x0010);
        v1[2] = 1;
        assert_eq!(receiver(&v1), None);
        assert_eq!(receiver(&cm_mad(0x0019)), None, "LAP: no alternate paths here");
        assert_eq!(receiver(&cm_mad(0x0001)), None, "ClassPortInfo");
    }

    #[test]
    fn a_mad_packet_is_a_ud_send_only_to_qp1_with_the_gsi_qkey() {
        let mad = cm_mad(0x0010);
        let buf = packet(&mad, 0x1234_5678);
        let p = Packet::new_checked(&buf[..]).unwrap();
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(repr.bth.opcode, OpCode::UdSendOnly);
        assert_eq!(repr.bth.dest_qp, 1);
        assert_eq!(repr.bth.pkey, 0xffff);
        assert_eq!(repr.bth.psn, 0x34_5678);
        assert_eq!(repr.deth, Some(DethRepr { qkey: GSI_QKEY, src_qp: 1 }));
        assert_eq!(p.payload(), &mad[..]);
    }
}
