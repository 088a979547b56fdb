//! Connected QPs (RC, UC, XRC) whose peer is on another host: the protocol core's
//! machines driven over RoCEv2/UDP (issue 12; the sockets are [`super::udp`]'s).
//!
//! Read before editing: `rverbs_proto::rc` (the machines and their calling order),
//! docs/rocev2-wire.md §1.6 (segmentation), §1.8 (XRC), §3.2–§3.4 (requester, responder,
//! completer), §4 (statuses), and docs/network.md.
//!
//! XRC is RC with an XRCETH (docs/rocev2-wire.md §1.8): an XRC_SEND QP's requester is RC's,
//! each work request handed over with its `xrc_remote_srqn`, so the core emits XRC
//! opcodes and the XRCETH on every request packet; an XRC_RECV QP's responder is RC's
//! with `ResponderConfig::xrc`, and each request is served by the XRC SRQ its XRCETH
//! names ([`super::route::xrc_target`]: an SRQ of the QP's domain, in this process or in
//! another of the host), whose receives, PD and CQ it uses; a request naming no such SRQ
//! is NAKed invalid request by the core.
//!
//! Requester: the send queue's one requester (`crate::qp::send`, the core's
//! [`rverbs_proto::rc::Requester`]) runs over this link with the path MTU and a window of
//! [`WINDOW`] PSNs; each request packet it builds is filled here ([`transmit`]) from the
//! work request's scatter list (or inline bytes), which stay in the send queue until the
//! request completes, and sent in batches. Responses arrive on the progress thread
//! ([`handle_response`]) and go to the same requester; its retransmit and RNR timers run
//! on the progress thread.
//!
//! Responder: requests arrive on the progress thread ([`handle_requests`], a train at a time) and go through
//! the QP's [`rverbs_proto::rc::Responder`] (in `QpInner::net_resp`), which checks them in
//! rxe's order; the payload is placed packet by packet (a SEND keeps its receive WQE
//! until its last packet; a WRITE's later packets are looked up again under its R_Key) and
//! the machine's ACKs, NAKs and READ/atomic responses go back to the requester's address.
//!
//! Any process of the host can have such QPs: a packet for a QP of a process that does
//! not own the address's port 4791 reaches it relayed by the owner, with its original
//! source address ([`super::udp`], "Demultiplexing"), so [`handle_requests`] and
//! [`handle_response`] run in the QP's own process and see the peer's address; what they
//! send leaves from that process's own socket, straight to the peer's port 4791.
//!
//! Limits of this slice: when the owner of an address's port 4791 exits, RC/UC QPs of the
//! other processes are unreachable on that address until one of them takes the port over
//! (within `udp::takeover::TAKEOVER_PERIOD`, [`super::udp`] "Takeover"; the requester's
//! retransmits cover the gap when its timeout × retry count is longer); XRC has no
//! FLUSH or ATOMIC_WRITE (no opcode: LOC_QP_OP_ERR).

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{self, Mode, Request, Responder, Response};
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpType, WcStatus};
use rverbs_proto::wire::roce::{Packet, Repr};
use rverbs_proto::wire::{Position, Transport};

use super::deliver::{recv_cqe, responder_event, tm_completion};
use super::respond::{starts_send, Head, Responding};
use super::route::{accepts_requests, connected_mode, responder_config};
use super::route::xrc_target;
use super::target::{LocalTarget, Serving, SplitTarget, Target};
use super::udp::{Checked, Net};
use crate::engine::Engine;
use crate::gid::Gid;
use crate::mr::{self, KeySpace};
use crate::qp::device::Tx;
use crate::qp::sq::ReqView;
use crate::qp::QpInner;
use crate::rings::wc::Cqe;

/// The packets of one connection to another host: where they go, and the batch being
/// built. Made at the connection's first request; dropped with the send queue's
/// requester (`crate::qp::send`).
pub(crate) struct NetTx {
    /// The peer's address (the path's destination GID) and this side's source GID.
    dst: IpAddr,
    sgid: Gid,
    dest_qpn: u32,
    /// The packets built by one pass, sent together (`Net::send_batch`); `out[..queued]`
    /// are waiting, the rest are spare buffers.
    out: Vec<Vec<u8>>,
    queued: usize,
    /// Counted while it lives (`progress::net_active`).
    _live: crate::progress::NetConnection,
}

impl NetTx {
    fn new(r: &ReqView) -> NetTx {
        NetTx {
            dst: r.dgid.to_ip(),
            sgid: r.sgid,
            dest_qpn: r.dest_qpn,
            out: Vec::new(),
            queued: 0,
            _live: crate::progress::NetConnection::open(),
        }
    }

    /// Sends the packets built so far.
    pub(crate) fn send_queued(&mut self, net: &Net) {
        if self.queued > 0 {
            net.send_batch(&self.sgid, self.dst, &mut self.out[..self.queued]);
            self.queued = 0;
        }
    }
}

/// The most PSNs a connection keeps unacknowledged (rxe: 128, `RequesterConfig`'s
/// default). 128 MTU-1024 packets are 128 KiB in flight, less than a veth's
/// bandwidth-delay product once both ends' per-packet work is counted: a 1 MiB
/// `ib_write_bw` across two namespaces went from ~1100 to ~1450 MB/s with 512 (1024 and
/// 2048 gained nothing more; 64 KiB messages, ACKed every message, did not change). The
/// responder, rxe's included, checks sequence, not distance, so a peer sees nothing but
/// more packets between ACKs; a loss costs a go-back-N of up to this many packets.
pub(crate) const WINDOW: u32 = 512;

/// Request packets sent with one system call, at most.
const BATCH: usize = 64;

/// The network link's [`crate::qp::device::SendPath::transmit`]: builds one request
/// packet into the connection's batch — the core's headers, then the payload gathered
/// from the work request it belongs to — and sends the batch once it is full. Responses
/// come back later, through [`handle_response`].
///
/// Errors: the vendor error of a LOC_PROT_ERR when the request's region went away after
/// it was handed over.
pub(crate) fn transmit(slot: &mut Option<NetTx>, net: &Net, qp: &QpInner, req: &ReqView, tx: Tx<'_>) -> Result<(), u32> {
    let conn = slot.get_or_insert_with(|| NetTx::new(req));
    let r = tx.request;
    let repr = r.to_repr(conn.dest_qpn);
    let n = repr.buffer_len();
    if conn.out.len() == conn.queued {
        conn.out.push(Vec::new());
    }
    let buf = &mut conn.out[conn.queued];
    buf.clear();
    buf.resize(n, 0);
    let mut packet = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut packet);
    let payload = packet.payload_mut();
    let filled = if let Some(v) = r.atomic_write {
        // docs/rocev2-wire.md §1.3: ATOMIC_WRITE's 8 bytes go verbatim.
        payload.copy_from_slice(&v.to_ne_bytes());
        true
    } else if r.payload_len == 0 {
        true
    } else if tx.wqe.inline_len.is_some() {
        let off = r.payload_offset as usize;
        payload.copy_from_slice(&tx.inline[off..off + payload.len()]);
        true
    } else {
        let own = KeySpace::local(qp.pd.endpoint());
        mr::pin_sges(&own, qp.pd.id, tx.sges, Access::empty(), tx.wqe.total_len)
            .ok()
            .is_some_and(|list| mr::gather_at(&list, r.payload_offset as usize, payload).is_ok())
    };
    if !filled {
        return Err(vendor_err::LOCAL_LKEY);
    }
    conn.queued += 1;
    if conn.queued == BATCH {
        conn.send_queued(net);
    }
    Ok(())
}

/// A response (ACK, NAK, READ response, atomic ACK) from the network for QP `qpn` of this
/// process: handed to its requester (`QpInner::on_response`: READ data scattered into the
/// request's list), then the send queue runs. Responses from another address, or for a
/// QP without a requester on the network, are dropped (rxe `check_addr`). Returns whether
/// it was taken.
pub(crate) fn handle_response(engine: &'static Engine, src: IpAddr, repr: &Repr, payload: &[u8]) -> bool {
    let Some(qp) = engine.qps.get(repr.bth.dest_qp) else { return false };
    // rxe `check_type_state`: the response's transport is the QP's (XRC answers XRC).
    if (repr.bth.opcode.transport() == Transport::Xrc) != (qp.qp_type == QpType::XrcSend) {
        return false;
    }
    qp.on_response(&Gid::from_ip(src), &Response::from_repr(repr), payload)
}

/// Requests (RC/UC/XRC) from the network, all for QP `run[0].repr.bth.dest_qp` of this
/// process and all from `src`, in arrival order (a UDP GSO train usually, or the
/// datagrams of one `recvmmsg`), which arrived on the socket of local GID `local`:
/// checked as rxe's `rxe_rcv` does (the QP exists with the packets' transport, accepts
/// requests, and its path names `src`), then run through the QP's responder one by one;
/// each payload is placed and the responses are sent back to `src`. Returns how many
/// were taken (a run is taken whole, or, when a packet puts the responder into ERR, up
/// to that packet).
///
/// The QP is looked up, its responder locked and its attributes read once for the run,
/// not per packet: a train of 64 packets costs one lookup, as a NIC's QP context cache
/// does.
pub(crate) fn handle_requests(engine: &'static Engine, net: &Net, local: &Gid, src: IpAddr, run: &[Checked<'_>]) -> usize {
    let Some(first) = run.first() else { return 0 };
    let Some(qp) = engine.qps.get(first.repr.bth.dest_qp) else { return 0 };
    let want = match first.repr.bth.opcode.transport() {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Xrc => QpType::XrcRecv,
        _ => return 0,
    };
    let xrc = want == QpType::XrcRecv;
    if qp.qp_type != want || !accepts_requests(qp.state()) || qp.rec.dgid() != Gid::from_ip(src) {
        return 0;
    }
    let t = LocalTarget::of(qp.clone());
    t.note_inbound();
    let now = Instant::now();
    let mode = connected_mode(want);
    // An XRC request is served by the SRQ its XRCETH names (docs/rocev2-wire.md §1.8),
    // found once per SRQ number the run names in a row.
    let mut xrc_srq: Option<(u32, Option<SplitTarget>)> = None;
    let dest_qpn = qp.rec.dest_qpn.load(Ordering::Acquire);
    // The responder's MTU is the requester's: the path MTU, within the port's largest and
    // the link's.
    let link_mtu = net.sock_of(local).map_or(u32::MAX, |s| s.link_mtu);
    let mtu = qp.rec.path_mtu.load(Ordering::Acquire).min(crate::limits::MAX_MTU.bytes()).min(link_mtu);
    // Whether to move the QP to ERR (raising this event, if any) once the responder's lock
    // is released: the flush that follows takes that lock.
    let mut fail: Option<Option<EventType>> = None;
    // The responses to the packet that set `fail`, sent after the QP entered ERR.
    let mut last_words: Vec<Vec<u8>> = Vec::new();
    let mut taken = 0;
    {
        let mut guard = qp.net_resp.lock().expect("net responder");
        let nr = &mut *guard;
        let mut cfg = responder_config(mode, qp.rec, mtu);
        cfg.xrc = xrc;
        cfg.rq_psn = Psn::new(nr.rq_psn);
        if nr.machine.is_none() {
            nr.live = Some(crate::progress::NetConnection::open());
        }
        let machine = nr.machine.get_or_insert_with(|| Responder::new(cfg));
        machine.reconfigure(cfg);
        let mut buf = Vec::new();
        for a in run {
            debug_assert_eq!(a.repr.bth.dest_qp, qp.qpn, "a run is for one QP");
            taken += 1;
            let payload = a.packet.payload();
            let request = Request::from_repr(&a.repr, payload);
            if let (true, Some(n)) = (xrc, request.xrc_srq) {
                if xrc_srq.as_ref().is_none_or(|(m, _)| *m != n) {
                    xrc_srq = Some((n, xrc_target(engine, &qp, n)));
                }
            }
            let split = xrc_srq.as_ref().and_then(|(n, s)| s.as_ref().filter(|_| request.xrc_srq == Some(*n)));
            let served = match split {
                Some(s) => Serving::Xrc(s),
                None => Serving::Own(&t),
            };
            let mut at = Responding::new(&served);
            at.xrc_srq = split.and(request.xrc_srq);
            at.recv = nr.held.take();
            if served.tag_matching() && starts_send(request.opcode) {
                // The first packet's bytes choose the receive (a rendezvous read over the
                // network is left to software, docs/tag-matching.md).
                let len = if request.opcode.position() == Some(Position::Only) { payload.len() as u64 } else { u64::MAX };
                at.head = Some(Head::of(payload, len, false));
            }
            let d = machine.handle_request(now, &request, &mut at);
            let mut completed = None;
            if d.violation.is_some() || !d.executed {
                tracing::debug!(
                    qpn = qp.qpn,
                    psn = request.psn.get(),
                    opcode = ?request.opcode,
                    expected = machine.expected_psn().get(),
                    violation = ?d.violation,
                    executed = d.executed,
                    "network request not executed"
                );
            }
            if let Some(v) = d.violation {
                if let Some(c) = d.recv {
                    let _ = served.complete(recv_cqe(&served, &c));
                }
                if v.responder_fatal() && (mode == Mode::Rc || d.recv.is_some()) {
                    // IBTA: a responder error no receive completion reports is raised as
                    // an asynchronous event (as the same-host path does).
                    let event = (d.recv.is_none() && mode == Mode::Rc).then_some(responder_event(v));
                    fail = Some(event);
                }
            } else if d.executed {
                let placed = d.place.map_or(Ok(()), |place| at.place_packet(place, payload));
                match (placed, d.recv) {
                    (Err(v), _) => {
                        // The memory failed between the check and the copy (deregistered):
                        // the QP ends, as for a failed check.
                        machine.enter_error();
                        if let Some(r) = at.recv.take() {
                            let _ = served.complete(Cqe::error(r.wr_id, t.qpn(), WcStatus::LocQpOpErr, v.vendor_err()));
                        }
                        fail = Some(Some(EventType::QpAccessErr));
                    }
                    // SEND_WITH_INV whose invalidation failed (rxe "class J"): the receive
                    // completes in error, the responder enters ERR below.
                    (Ok(()), Some(c)) if c.status != WcStatus::Success => {
                        let _ = served.complete(recv_cqe(&served, &c));
                    }
                    // Published once the ACK is out (below).
                    (Ok(()), Some(c)) => {
                        let mut cqe = recv_cqe(&served, &c);
                        if let Some(tm) = at.recv.as_ref().and_then(|r| r.tm) {
                            tm_completion(&mut cqe, tm);
                        }
                        completed = Some(cqe);
                    }
                    (Ok(()), None) => {}
                }
            }
            if machine.state() == rc::ResponderState::Error && fail.is_none() {
                fail = Some(None);
            }
            // The receive WQE stays taken while its message goes on (or, UC, while the
            // core keeps it for the next message); one that completed is gone.
            let held = at.recv.take().filter(|w| d.recv.is_none_or(|c| c.wr_id != w.wr_id));
            // Responses go back to the requester, READ data gathered per packet.
            while let Some(resp) = machine.poll_transmit(now) {
                let repr = resp.to_repr(dest_qpn);
                buf.clear();
                buf.resize(repr.buffer_len(), 0);
                let mut packet = Packet::new_unchecked(&mut buf[..]);
                repr.emit(&mut packet);
                if let Some(s) = resp.source {
                    if at.read_source(s, packet.payload_mut()).is_err() {
                        // The region was deregistered during the READ: nothing more is
                        // sent; the requester times out.
                        break;
                    }
                }
                if fail.is_some() {
                    // The NAK of an error that ends the QP leaves once the QP is in ERR
                    // (below), as on the same host: a requester that hears it and tells the
                    // application, which tells the target's, finds the target QP in ERR.
                    last_words.push(buf.clone());
                } else {
                    net.send(local, src, &mut buf);
                }
            }
            drop(at);
            nr.held = held;
            // docs/rxe-differences.md, "The receive completion after the ACK": the receive
            // completion is published after the ACK is sent (rxe completes first): the
            // application may exit the instant it sees the completion, and a message it saw
            // must not be left unacknowledged. A receive CQ that overruns still ends the QP
            // (QP_FATAL), though its message was ACKed.
            if let Some(cqe) = completed {
                if served.complete(cqe).is_err() {
                    machine.enter_error();
                    fail = Some(Some(EventType::QpFatal));
                }
            }
            if fail.is_some() {
                // The responder is in ERR: what follows in the run is not for a live
                // responder (the QP leaves RTS below and drops it, as a later run would).
                break;
            }
        }
    }
    if let Some(event) = fail {
        t.enter_error(event);
    }
    for mut packet in last_words {
        net.send(local, src, &mut packet);
    }
    taken
}
