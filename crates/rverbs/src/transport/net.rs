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
//! the machine's ACKs, NAKs and READ/atomic responses go back to the requester's address,
//! batched as its requests came ([`Batch`]; a READ's responses as GSO trains, issue 24).
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
use rverbs_proto::rc::{self, Mode, ReadSource, Request, Responder, Response};
use rverbs_proto::vendor_err;
use rverbs_proto::verbs::{Access, EventType, QpType, WcStatus};
use rverbs_proto::violation::Violation;
use rverbs_proto::wire::roce::{Packet, Repr};
use rverbs_proto::wire::{OpCode, Operation, Position, Transport};

use super::deliver::{complete_receive, count_delivery, mark_completing, of_receive, recv_cqe, responder_event, tm_completion};
use super::respond::{starts_send, Head, Responding};
use super::route::{accepts_requests, connected_mode, responder_config};
use super::route::xrc_target;
use super::target::{LocalTarget, Serving, SplitTarget, Target};
use super::udp::{Checked, Net};
use crate::engine::Engine;
use crate::rings::cq_segment::CqAt;
use crate::gid::Gid;
use crate::mr::{self, KeyMemo, KeySpace};
use crate::qp::device::Tx;
use crate::qp::sq::ReqView;
use crate::qp::QpInner;
use crate::rings::wc::Cqe;
use crate::shm::counters::{Counter, CounterBlock};

/// Packets for one peer, built one by one and sent together (`Net::send_batch`: one
/// `sendmmsg`, consecutive packets of one size as one GSO train, docs/network.md
/// "Trains"): `out[..queued]` wait, in the order they were built; the rest are spare
/// buffers kept for the next packets, so a long stream allocates only its first
/// [`BATCH`] buffers.
///
/// A responder's burst (the responses of a run of requests) sends its first
/// [`FIRST_BATCH`] packets as soon as they are built, and each full batch doubles the
/// next, up to [`BATCH`]: the requester places the start of a long READ while the rest is
/// read and built, and a long stream still pays one system call per [`BATCH`] packets
/// (docs/network.md, "Trains"). A requester's batches are [`BATCH`] throughout
/// ([`Batch::flat`]): its passes follow ACKs while the window is open, and smaller first
/// batches cost a bulk WRITE stream system calls without shortening anything.
#[derive(Default)]
pub(crate) struct Batch {
    out: Vec<Vec<u8>>,
    queued: usize,
    /// How many packets the batch holds before it is sent ([`Batch::commit`]); 0 at the
    /// start of a burst, read as [`FIRST_BATCH`] (or [`BATCH`] if `flat`).
    limit: usize,
    /// Every batch [`BATCH`] packets (a requester's).
    flat: bool,
}

impl Batch {
    /// A buffer of `len` zero bytes for the next packet; it waits only once
    /// [`Batch::commit`] queues it (a packet that could not be filled is never sent).
    fn next(&mut self, len: usize) -> &mut [u8] {
        let buf = self.next_unwritten(len);
        buf.fill(0);
        buf
    }

    /// As [`Batch::next`], the bytes not zeroed: they may hold an earlier packet's, so
    /// the caller writes every one of them before [`Batch::commit`] (a requester's packet:
    /// its headers, then the payload it gathers, which fills the rest, then the ICRC; a
    /// packet it cannot fill is never committed). The zeroing cost a bulk sender one more
    /// pass over every byte it sent.
    fn next_unwritten(&mut self, len: usize) -> &mut [u8] {
        if self.out.len() == self.queued {
            self.out.push(Vec::new());
        }
        let buf = &mut self.out[self.queued];
        // The length is the datagram's: cut to `len`, or grown (only the bytes added are
        // zeroed).
        buf.truncate(len);
        buf.resize(len, 0);
        buf
    }

    /// Queues the packet last built by [`Batch::next`]; returns whether the batch is full
    /// (time to send it: [`FIRST_BATCH`] packets in a burst's first batch, twice the
    /// previous one's after that, [`BATCH`] at most).
    fn commit(&mut self) -> bool {
        self.queued += 1;
        self.queued >= self.limit()
    }

    /// A batch of [`BATCH`] packets each time, without the growing start (a requester's).
    fn flat() -> Batch {
        Batch { flat: true, ..Batch::default() }
    }

    /// The size of a full batch now.
    fn limit(&self) -> usize {
        match self.limit {
            0 if self.flat => BATCH,
            0 => FIRST_BATCH,
            n => n,
        }
    }

    /// The packets waiting have been sent (or there were none): a full batch doubles the
    /// next one (up to [`BATCH`]); anything less ends the burst, and the next batch is a
    /// first one again.
    fn sent(&mut self) {
        self.limit = if self.queued >= self.limit() { (self.limit() * 2).min(BATCH) } else { 0 };
        self.queued = 0;
    }

    /// The packets waiting, oldest first.
    #[cfg(test)]
    fn queued(&self) -> &[Vec<u8>] {
        &self.out[..self.queued]
    }

    /// Forgets the packets waiting (their buffers stay for the next ones); the next
    /// batch is a burst's first.
    fn clear(&mut self) {
        self.queued = 0;
        self.limit = 0;
    }

    /// Queues `packet`, built elsewhere (an ACK held back, [`crate::qp::acks`]); returns
    /// the idle buffer it took the place of, if any.
    fn push(&mut self, packet: Vec<u8>) -> Option<Vec<u8>> {
        let displaced = if self.out.len() > self.queued {
            Some(std::mem::replace(&mut self.out[self.queued], packet))
        } else {
            self.out.push(packet);
            None
        };
        self.queued += 1;
        displaced
    }

    /// Keeps `bufs` as idle buffers for the packets to come ([`Batch::next`]).
    fn give(&mut self, bufs: impl IntoIterator<Item = Vec<u8>>) {
        self.out.extend(bufs);
    }

    /// Takes the packets waiting, oldest first (their buffers go with them).
    fn take_queued(&mut self) -> impl Iterator<Item = Vec<u8>> + '_ {
        let n = std::mem::take(&mut self.queued);
        self.out.drain(..n)
    }

    /// Sends the packets waiting from the socket of local GID `sgid` to `dst`, in the
    /// order they were built.
    fn send(&mut self, net: &Net, sgid: &Gid, dst: IpAddr) {
        if self.queued > 0 {
            net.send_batch(sgid, dst, &mut self.out[..self.queued]);
        }
        self.sent();
    }
}

/// The packets of one connection to another host: where they go, and the batch being
/// built. Made at the connection's first request; dropped with the send queue's
/// requester (`crate::qp::send`).
pub(crate) struct NetTx {
    /// The peer's address (the path's destination GID) and this side's source GID.
    dst: IpAddr,
    sgid: Gid,
    dest_qpn: u32,
    /// The packets built by one pass, sent together.
    out: Batch,
    /// The last key of this process a request's payload was gathered through
    /// ([`mr::KeyMemo`]).
    memo: KeyMemo,
    /// Counted while it lives (`progress::net_active`).
    _live: crate::progress::NetConnection,
}

impl NetTx {
    fn new(r: &ReqView) -> NetTx {
        NetTx {
            dst: r.dgid.to_ip(),
            sgid: r.sgid,
            dest_qpn: r.dest_qpn,
            out: Batch::flat(),
            memo: KeyMemo::default(),
            _live: crate::progress::NetConnection::open(),
        }
    }

    /// Sends the packets built so far; the ACKs `qp`'s responder holds for the same peer
    /// leave with them, after them, in the same system call (docs/network.md, "Coalesced
    /// ACKs").
    pub(crate) fn send_queued(&mut self, net: &Net, qp: &QpInner) {
        if self.out.queued == 0 {
            return;
        }
        // Never wait for the responder here: a thread serving requests holds it, and takes
        // the held ACKs along itself.
        if let Ok(mut nr) = qp.net_resp.try_lock() {
            if nr.held_acks.route() == Some((self.sgid, self.dst)) {
                nr.held_acks.drain_into(|p| self.out.push(p));
            }
        }
        self.out.send(net, &self.sgid, self.dst);
    }
}

/// Sends the ACKs `qp`'s network responder holds (docs/network.md, "Coalesced ACKs"), at
/// once: their time has come, the QP leaves RTS/RTR, or the process exits. `wait`: wait
/// for the responder's lock (not at exit, where its holder may never run again).
/// Returns how many it sent.
pub(crate) fn send_held_acks(net: &Net, qp: &QpInner, wait: bool) -> usize {
    let nr = if wait {
        qp.net_resp.lock().ok()
    } else {
        qp.net_resp.try_lock().ok()
    };
    let Some(mut nr) = nr else { return 0 };
    let Some((sgid, dst)) = nr.held_acks.route() else { return 0 };
    let mut packets = nr.held_acks.take();
    drop(nr);
    net.send_batch(&sgid, dst, &mut packets);
    packets.len()
}

/// Sends the held ACKs of the QPs whose time has come at `now` (`None`: of every QP that
/// holds some): the progress thread at its deadline, an application thread at its next
/// inline receive, the process at exit (`wait` false).
pub(crate) fn send_due_acks(engine: &Engine, net: &Net, now: Option<Instant>, wait: bool) {
    // A busy poller asks at every empty poll; most find nothing held (one load).
    if !engine.acks_due.any() {
        return;
    }
    for qpn in engine.acks_due.take_due(now) {
        if let Some(qp) = engine.qps.get(qpn) {
            let sent = send_held_acks(net, &qp, wait);
            if sent > 0 && now.is_some() {
                tracing::debug!(qpn, sent, "held ACKs sent at their deadline");
            }
        }
    }
}

/// The payload bytes of the first packets of `run` that continue one RDMA WRITE (MIDDLE
/// packets, and the LAST that ends it), from its first: the range a span pin of the run
/// covers ([`Responding::place_packet_in_run`]).
fn write_ahead(run: &[Checked<'_>]) -> u64 {
    let mut bytes = 0;
    for a in run {
        let op = a.repr.bth.opcode;
        if !continues_write(op) {
            break;
        }
        bytes += a.packet.payload().len() as u64;
        if op.position() == Some(Position::Last) {
            break;
        }
    }
    bytes
}

/// Whether a packet of opcode `op` continues an RDMA WRITE (a MIDDLE or LAST packet): the
/// only packets a span pin of the run serves. Any other packet is handled with the span
/// released: a SEND_WITH_INV may invalidate the window the span was taken through, and
/// the invalidation waits for that window's accesses to end (`mw::invalidate_record`),
/// which the span, held by the thread that invalidates, would never do.
fn continues_write(op: OpCode) -> bool {
    matches!(op.operation(), Some(Operation::RdmaWriteMiddle | Operation::RdmaWriteLast | Operation::RdmaWriteLastWithImmediate))
}

/// The most PSNs a connection keeps unacknowledged (rxe: 128, `RequesterConfig`'s
/// default). 128 MTU-1024 packets are 128 KiB in flight, less than a veth's
/// bandwidth-delay product once both ends' per-packet work is counted: a 1 MiB
/// `ib_write_bw` across two namespaces went from ~1100 to ~1450 MB/s with 512 (1024 and
/// 2048 gained nothing more; 64 KiB messages, ACKed every message, did not change). The
/// responder, rxe's included, checks sequence, not distance, so a peer sees nothing but
/// more packets between ACKs; a loss costs a go-back-N of up to this many packets.
pub(crate) const WINDOW: u32 = 512;

/// Packets sent with one system call, at most: a pass's requests, or the responses of a
/// run of requests (a READ's responses among them, [`queue_responses`]).
const BATCH: usize = 64;

/// The first batch of a responder's burst ([`Batch`]): a 64 KiB READ's responses (64
/// packets at MTU 1024) leave as 16, 32 and 16, so the requester places the first while
/// the responder builds the rest (BENCHMARKS.md, "READ responses start sooner": one such
/// READ at a time across two namespaces, a READ every ~90 µs instead of ~120).
const FIRST_BATCH: usize = 16;

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
    let len = repr.buffer_len();
    let buf = conn.out.next_unwritten(len);
    // The headers' bytes zeroed first (a field `emit` leaves alone, reserved bits among
    // them, must not carry an earlier packet's bytes); `emit` writes the pad and ICRC, and
    // the payload is filled whole below, or the packet is not committed.
    buf[..repr.header_len()].fill(0);
    let mut packet = Packet::new_unchecked(buf);
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
        let own = KeySpace::local(qp.endpoint).remembering(&conn.memo);
        // Only a list that holds the whole payload: one that ends short would leave
        // bytes of an earlier packet unwritten.
        mr::pin_sges(&own, qp.pd.id, tx.sges, Access::empty(), tx.wqe.total_len).ok().is_some_and(|list| {
            list.iter().map(|p| p.len).sum::<usize>() >= r.payload_offset as usize + payload.len()
                && mr::gather_at(&list, r.payload_offset as usize, payload).is_ok()
        })
    };
    if !filled {
        return Err(vendor_err::LOCAL_LKEY);
    }
    if conn.out.commit() {
        conn.out.send(net, &conn.sgid, conn.dst);
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
/// does. The responses of the run are batched as a requester's packets are
/// ([`queue_responses`]: a READ's responses leave as GSO trains, up to [`BATCH`] packets
/// per system call), and the batch is sent before any completion is published and before
/// the QP leaves for ERR, so a receive completion follows its ACK — unless `hold`: an
/// application thread receiving inline keeps a run's plain ACKs for the QP's next
/// requests (docs/network.md, "Coalesced ACKs"; [`crate::qp::acks`]).
pub(crate) fn handle_requests(engine: &'static Engine, net: &Net, local: &Gid, src: IpAddr, run: &[Checked<'_>], hold: bool) -> usize {
    with_response_batch(|out| {
        // Anything left by a run that did not finish (a panic) was for its peer, not this one.
        out.clear();
        let taken = serve_run(engine, net, local, src, run, out, hold);
        out.send(net, local, src);
        taken
    })
}

/// Runs `f` with this thread's batch of responses (one per receiving thread: the progress
/// thread, or an application thread polling an empty CQ), or a new one should the
/// thread's be in use.
fn with_response_batch<R>(f: impl FnOnce(&mut Batch) -> R) -> R {
    thread_local! {
        static OUT: std::cell::RefCell<Batch> = std::cell::RefCell::new(Batch::default());
    }
    OUT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut out) => f(&mut out),
        Err(_) => f(&mut Batch::default()),
    })
}

/// [`handle_requests`], the responses queued into `out` (sent when it fills, before a
/// completion is published unless they are ACKs to hold, and before the QP enters ERR;
/// what is left at the end is the caller's to send, or, `hold` and only plain ACKs, held
/// by the QP's responder).
fn serve_run(engine: &'static Engine, net: &Net, local: &Gid, src: IpAddr, run: &[Checked<'_>], out: &mut Batch, hold: bool) -> usize {
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
    let counters = qp.endpoint.counters;
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
    let mut last_words = Batch::default();
    let mut taken = 0;
    {
        let mut guard = qp.net_resp.lock().expect("net responder");
        let nr = &mut *guard;
        // Destroyed since the state was read above (ibv_destroy_qp(3) sets it under this
        // lock): nothing more is served, no receive taken.
        if nr.closed {
            return 0;
        }
        let mut cfg = responder_config(mode, qp.rec, mtu);
        cfg.xrc = xrc;
        cfg.rq_psn = Psn::new(nr.rq_psn);
        if nr.machine.is_none() {
            nr.live = Some(crate::progress::NetConnection::open());
        }
        let machine = nr.machine.get_or_insert_with(|| Responder::new(cfg));
        machine.reconfigure(cfg);
        // ACKs held from earlier runs go first, with this run's responses (kept in order):
        // held again at the end, or sent with them.
        match nr.held_acks.route() {
            Some(r) if r == (*local, src) => nr.held_acks.drain_into(|p| out.push(p)),
            Some((sgid, dst)) => net.send_batch(&sgid, dst, &mut nr.held_acks.take()),
            None => {}
        }
        // Whether everything queued in `out` is a plain ACK (which `hold` keeps back).
        let mut only_acks = mode == Mode::Rc || xrc;
        let machine = nr.machine.as_mut().expect("made above");
        // A WRITE's later packets in this run are placed through one pin of the range they
        // cover (`Responding::place_packet_in_run`), released with the run.
        let own_keys = KeySpace::local(qp.endpoint);
        let mut span = None;
        // The receive completions of the QP's own receives whose messages did not ask for
        // an ACK, in order: published once the ACK they are owed is out (docs/network.md,
        // "ACKs where the requester stops"), or right before any other receive completion
        // of the run. A message that asked is published right after its own ACK.
        let mut done = Done::new();
        for (i, a) in run.iter().enumerate() {
            debug_assert_eq!(a.repr.bth.dest_qp, qp.qpn, "a run is for one QP");
            taken += 1;
            let payload = a.packet.payload();
            if !continues_write(a.repr.bth.opcode) {
                span = None;
            }
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
            let mut at = Responding::new(&served).remembering(&nr.memos);
            at.xrc_srq = split.and(request.xrc_srq);
            at.recv = nr.held.take();
            if served.tag_matching() && starts_send(request.opcode) {
                // The first packet's bytes choose the receive (a rendezvous read over the
                // network is left to software, docs/tag-matching.md).
                let len = if request.opcode.position() == Some(Position::Only) { payload.len() as u64 } else { u64::MAX };
                at.head = Some(Head::of(payload, len, false));
            }
            let d = machine.handle_request(now, &request, &mut at);
            count_delivery(counters, machine, mode, &d);
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
                    out.send(net, local, src);
                    if !done.publish(&t, counters) {
                        machine.enter_error();
                        fail = Some(Some(EventType::QpFatal));
                    }
                    let _ = complete_receive(&served, recv_cqe(&served, &c, at.recv.as_ref()), at.recv.as_ref());
                }
                if v.responder_fatal() && (mode == Mode::Rc || d.recv.is_some()) {
                    // IBTA: a responder error no receive completion reports is raised as
                    // an asynchronous event (as the same-host path does).
                    let event = (d.recv.is_none() && mode == Mode::Rc).then_some(responder_event(v));
                    fail = Some(event);
                }
            } else if d.executed {
                let placed = d.place.map_or(Ok(()), |place| match served {
                    Serving::Own(_) => at.place_packet_in_run(place, payload, own_keys, &mut span, || write_ahead(&run[i..])),
                    Serving::Xrc(_) => at.place_packet(place, payload),
                });
                match (placed, d.recv) {
                    (Err(v), _) => {
                        // The memory failed between the check and the copy (deregistered):
                        // the QP ends, as for a failed check, and (RC) the requester hears
                        // the NAK, sent once the QP is in ERR (below).
                        machine.placement_failed(request.psn, v);
                        if let Some(r) = at.recv.take() {
                            out.send(net, local, src);
                            // The completions before it first (a CQ that overruns on one
                            // of them changes nothing here: the QP fails below anyway).
                            let _ = done.publish(&t, counters);
                            let _ = complete_receive(&served, of_receive(Cqe::error(r.wr_id, t.qpn(), WcStatus::LocQpOpErr, v.vendor_err()), Some(&r)), Some(&r));
                        }
                        fail = Some(Some(EventType::QpAccessErr));
                    }
                    // SEND_WITH_INV whose invalidation failed (rxe "class J"): the receive
                    // completes in error, the responder enters ERR below.
                    (Ok(()), Some(c)) if c.status != WcStatus::Success => {
                        out.send(net, local, src);
                        let _ = done.publish(&t, counters);
                        let _ = complete_receive(&served, recv_cqe(&served, &c, at.recv.as_ref()), at.recv.as_ref());
                    }
                    // Published once the ACK is out (below).
                    (Ok(()), Some(c)) => {
                        let mut cqe = recv_cqe(&served, &c, at.recv.as_ref());
                        // This process's own take, let go before the publish below:
                        // marked now.
                        mark_completing(at.recv.as_ref(), cqe.wr_id, CqAt::UNKNOWN);
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
            // Responses go back to the requester, READ data gathered per packet. The NAK of
            // an error that ends the QP leaves once the QP is in ERR (below), as on the same
            // host: a requester that hears it and tells the application, which tells the
            // target's, finds the target QP in ERR.
            let mut read = |s, payload: &mut [u8]| at.read_source(s, payload);
            let unreadable = if fail.is_some() {
                queue_responses(machine, now, dest_qpn, &mut read, &mut last_words, |_| {}).unreadable
            } else {
                let q = queue_responses(machine, now, dest_qpn, &mut read, out, |full| full.send(net, local, src));
                only_acks &= q.only_acks;
                q.unreadable
            };
            if let Some((psn, v)) = unreadable {
                // A READ's region went away between the check and this packet's copy: as
                // a failed check, the NAK of that packet, sent once the QP is in ERR. What
                // left before it stays sent.
                machine.placement_failed(psn, v);
                fail = Some(Some(EventType::QpAccessErr));
                queue_responses(machine, now, dest_qpn, &mut read, &mut last_words, |_| {});
            }
            drop(at);
            nr.held = held;
            // docs/rxe-differences.md, "The receive completion after the ACK": the receive
            // completion is published after the ACK is sent (rxe completes first): the
            // application may exit the instant it sees the completion, and a message it saw
            // must not be left unacknowledged. A receive CQ that overruns still ends the QP
            // (QP_FATAL), though its message was ACKed.
            if let Some(cqe) = completed {
                match served {
                    // A message that did not ask for an ACK: its completion waits for the
                    // run's end, after the ACK it is owed.
                    Serving::Own(_) if !request.ack_req => done.push(cqe),
                    _ => {
                        if !(hold && only_acks) {
                            out.send(net, local, src);
                        }
                        if !(done.publish(&t, counters) && Done::publish_one(&served, cqe, counters)) {
                            machine.enter_error();
                            fail = Some(Some(EventType::QpFatal));
                        }
                    }
                }
            }
            if fail.is_some() {
                // The responder is in ERR: what follows in the run is not for a live
                // responder (the QP leaves RTS below and drops it, as a later run would).
                break;
            }
        }
        // What the run's messages that did not ask for an ACK owe (the requester asks only
        // where it stops), before their completions are published.
        if fail.is_none() && machine.acknowledge_owed() {
            let q = queue_responses(machine, now, dest_qpn, &mut |_, _: &mut [u8]| Ok(()), out, |full| full.send(net, local, src));
            only_acks &= q.only_acks;
        }
        if !done.is_empty() {
            if !(hold && only_acks) {
                out.send(net, local, src);
            }
            if !done.publish(&t, counters) {
                machine.enter_error();
                fail = Some(Some(EventType::QpFatal));
            }
        }
        if hold && only_acks && fail.is_none() && out.queued > 0 {
            // docs/network.md, "Coalesced ACKs": they leave with the QP's next requests, at
            // this thread's next inline receive, or after `acks::ACK_DELAY`.
            nr.held_acks.hold(*local, src, out.take_queued());
            // Buffers earlier held ACKs displaced take the place of those just held.
            out.give(nr.held_acks.spares());
            if engine.acks_due.add(qp.qpn, now) {
                // The progress thread may be waiting past the deadline (no datagram wakes
                // it: this thread took them); a wait that ends before it needs no wake-up.
                let at = crate::clock::device_ns().saturating_add(crate::qp::acks::ACK_DELAY.as_nanos() as u64);
                crate::progress::deadline_added(engine.endpoint.slot, at);
            }
        }
    }
    if let Some(event) = fail {
        // What answered the packets before the failing one leaves first.
        out.send(net, local, src);
        t.enter_error(event);
    }
    last_words.send(net, local, src);
    taken
}

/// The receive completions a run finished on the QP's own receives whose messages did not
/// ask for an ACK ([`serve_run`]), published together once the ACK they are owed is sent:
/// each still after an ACK of its message (docs/rxe-differences.md, "The receive
/// completion after the ACK").
struct Done(smallvec::SmallVec<[Cqe; 4]>);

impl Done {
    fn new() -> Self {
        Done(smallvec::SmallVec::new())
    }

    fn push(&mut self, cqe: Cqe) {
        self.0.push(cqe);
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Publishes the kept completions on `t`'s receive CQ, in order; `false` if the CQ
    /// overran (which ends the responder: QP_FATAL), the rest dropped with it.
    fn publish<T: Target>(&mut self, t: &T, counters: &CounterBlock) -> bool {
        self.0.drain(..).all(|cqe| Self::publish_one(t, cqe, counters))
    }

    /// Publishes `cqe` on `t`'s receive CQ, counted as rxe's `rdma_recvs` (its responder's
    /// `do_complete`, status success); `false` if the CQ overran.
    fn publish_one<T: Target + ?Sized>(t: &T, cqe: Cqe, counters: &CounterBlock) -> bool {
        let ok = t.complete(cqe).is_ok();
        if ok {
            counters.add(Counter::RdmaRecvs);
        }
        ok
    }
}

/// Builds the responses `machine` has ready into `out`, in PSN order (a READ's FIRST,
/// MIDDLE…, LAST), READ data copied per packet by `read` (the region looked up again for
/// each, docs/rocev2-wire.md §3.3 "Execute"); `full` gets the batch each time it fills
/// ([`BATCH`] packets) and sends it. Nothing paces a READ's responses but the link (IBTA
/// has no response window; the requester's ACK timeout and retries cover a loss), so a
/// READ of many packets leaves as full batches — GSO trains of MIDDLE packets — instead
/// of one system call per packet.
///
/// When `read` fails (the region was deregistered during the READ) the packet is not
/// queued and nothing more is built: the caller answers as for a failed key check
/// (`Responder::placement_failed` with the packet's PSN, docs/rocev2-wire.md §3.3).
fn queue_responses(
    machine: &mut Responder,
    now: Instant,
    dest_qpn: u32,
    mut read: impl FnMut(ReadSource, &mut [u8]) -> Result<(), Violation>,
    out: &mut Batch,
    mut full: impl FnMut(&mut Batch),
) -> Queued {
    let mut q = Queued { only_acks: true, unreadable: None };
    while let Some(resp) = machine.poll_transmit(now) {
        q.only_acks &= resp.opcode.operation() == Some(rverbs_proto::wire::Operation::Acknowledge)
            && matches!(resp.syndrome, Some(rverbs_proto::wire::Syndrome::Ack { .. }));
        let repr = resp.to_repr(dest_qpn);
        let mut packet = Packet::new_unchecked(out.next(repr.buffer_len()));
        repr.emit(&mut packet);
        if let Some(s) = resp.source {
            if let Err(v) = read(s, packet.payload_mut()) {
                q.unreadable = Some((resp.psn, v));
                break;
            }
        }
        if out.commit() {
            full(out);
        }
    }
    q
}

/// What [`queue_responses`] built.
struct Queued {
    /// Every response was a plain ACK (no NAK, READ response or atomic ACK), which an
    /// inline receive may hold ([`crate::qp::acks`]).
    only_acks: bool,
    /// The READ response whose bytes could not be read, which stopped it: its PSN and why.
    unreadable: Option<(Psn, Violation)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_proto::rc::{AtomicOp, RecvSlot, ResponderConfig, Target};
    use rverbs_proto::wire::{FethRepr, OpCode, Operation, RethRepr};

    const MTU: u32 = 1024;
    const RKEY: u32 = 0x77;
    const VA: u64 = 0x10_0000;
    const DEST_QPN: u32 = 0x12;

    /// A responder's target that grants every key (the checks are the core's to test).
    struct AnyKey;

    impl Target for AnyKey {
        fn check_rkey(&mut self, _: u32, _: u64, _: u64, _: Access) -> Result<(), Violation> {
            Ok(())
        }
        fn take_recv(&mut self) -> Option<RecvSlot> {
            None
        }
        fn atomic(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, Violation> {
            Err(Violation::RkeyAccess)
        }
        fn atomic_write(&mut self, _: u32, _: u64, _: u64) -> Result<(), Violation> {
            Err(Violation::RkeyAccess)
        }
        fn flush(&mut self, _: u32, _: u64, _: u32, _: FethRepr) -> Result<(), Violation> {
            Err(Violation::RkeyAccess)
        }
        fn invalidate(&mut self, _: u32) -> bool {
            false
        }
    }

    /// A responder (RC, MTU 1024) that executed an RDMA READ of `len` bytes at [`VA`] with
    /// PSN 0.
    fn responder_after_read(len: u32) -> Responder {
        let mut machine = Responder::new(ResponderConfig { mtu: MTU, ..ResponderConfig::TEMPLATE });
        let d = machine.handle_request(Instant::now(), &read_request(0, VA, len), &mut AnyKey);
        assert!(d.executed && d.violation.is_none());
        machine
    }

    fn read_request(psn: u32, va: u64, len: u32) -> Request {
        let mut r = Request::new(OpCode::RcRdmaReadRequest, Psn::new(psn));
        r.reth = Some(RethRepr { va, rkey: RKEY, dma_len: len });
        r.ack_req = true;
        r
    }

    /// The bytes a READ response carries for the range at `va`: each byte the low byte of
    /// its MTU-sized block's number, so a packet read from the wrong place shows.
    fn fill(s: ReadSource, payload: &mut [u8]) -> Result<(), Violation> {
        assert_eq!(payload.len(), s.len as usize);
        payload.fill(((s.va - VA) / u64::from(MTU)) as u8);
        Ok(())
    }

    /// Drains `machine`'s responses as the network responder does ([`queue_responses`]),
    /// each packet's data by `read`: the batches handed over full, then what is left to
    /// send at the end of the run.
    fn drain(machine: &mut Responder, read: impl FnMut(ReadSource, &mut [u8]) -> Result<(), Violation>) -> Drained {
        drain_or_stop(machine, read).0
    }

    /// The batches handed over full, then what is left to send at the end of the run.
    type Drained = (Vec<Vec<Vec<u8>>>, Vec<Vec<u8>>);

    /// [`drain`], with the READ response whose bytes could not be read, if one stopped it.
    fn drain_or_stop(
        machine: &mut Responder,
        read: impl FnMut(ReadSource, &mut [u8]) -> Result<(), Violation>,
    ) -> (Drained, Option<(Psn, Violation)>) {
        let mut out = Batch::default();
        let mut handed = Vec::new();
        let q = queue_responses(machine, Instant::now(), DEST_QPN, read, &mut out, |full| {
            handed.push(full.queued().to_vec());
            full.sent();
        });
        ((handed, out.queued().to_vec()), q.unreadable)
    }

    /// Each packet's opcode, PSN, payload length and first payload byte (parsed back).
    #[track_caller]
    fn parsed(packets: &[Vec<u8>]) -> Vec<(Operation, u32, usize, u8)> {
        packets
            .iter()
            .map(|b| {
                let p = Packet::new_checked(&b[..]).expect("a whole packet");
                let r = Repr::parse(&p).expect("a valid packet");
                assert_eq!(r.bth.dest_qp, DEST_QPN);
                let op = r.bth.opcode.operation().expect("a known opcode");
                (op, r.bth.psn, r.payload_len, p.payload().first().copied().unwrap_or(0))
            })
            .collect()
    }

    /// The packets of a READ of `n` MTU-sized blocks from PSN `from`: FIRST, MIDDLE…, LAST
    /// (or ONLY), block `k`'s bytes in packet `k`.
    fn read_stream(from: u32, n: u32) -> Vec<(Operation, u32, usize, u8)> {
        (from..from + n)
            .map(|psn| {
                let op = match (psn == from, psn == from + n - 1) {
                    (true, true) => Operation::RdmaReadResponseOnly,
                    (true, false) => Operation::RdmaReadResponseFirst,
                    (false, false) => Operation::RdmaReadResponseMiddle,
                    (false, true) => Operation::RdmaReadResponseLast,
                };
                (op, psn, MTU as usize, psn as u8)
            })
            .collect()
    }

    /// docs/network.md, "Coalesced ACKs": only plain ACKs may be held by an inline
    /// receive. A WRITE that asks for an ACK gets one (holdable); a SEND with no receive
    /// posted gets an RNR NAK, and a READ its response (neither holdable).
    #[test]
    fn only_plain_acks_may_be_held() {
        let held = |req: &Request| {
            let mut machine = Responder::new(ResponderConfig { mtu: MTU, ..ResponderConfig::TEMPLATE });
            let _ = machine.handle_request(Instant::now(), req, &mut AnyKey);
            let mut out = Batch::default();
            let only_acks = queue_responses(&mut machine, Instant::now(), DEST_QPN, fill, &mut out, |_| {}).only_acks;
            (only_acks, out.queued().len())
        };
        let mut write = Request::new(OpCode::RcRdmaWriteOnly, Psn::new(0));
        write.reth = Some(RethRepr { va: VA, rkey: RKEY, dma_len: 0 });
        write.ack_req = true;
        assert_eq!(held(&write), (true, 1));
        let mut send = Request::new(OpCode::RcSendOnly, Psn::new(0));
        send.ack_req = true;
        assert_eq!(held(&send), (false, 1), "an RNR NAK");
        assert_eq!(held(&read_request(0, VA, 8)), (false, 1), "a READ response");
    }

    /// Held ACKs join a batch after the packets built there, in order, and leave it with them.
    #[test]
    fn packets_pushed_into_a_batch_follow_those_built_there() {
        let mut out = Batch::default();
        out.next(3).copy_from_slice(&[1, 1, 1]);
        out.commit();
        out.push(vec![2]);
        out.push(vec![3]);
        assert_eq!(out.queued(), [vec![1, 1, 1], vec![2], vec![3]]);
        assert_eq!(out.take_queued().collect::<Vec<_>>(), [vec![1, 1, 1], vec![2], vec![3]]);
        assert!(out.queued().is_empty());
        out.push(vec![4]);
        assert_eq!(out.queued(), [vec![4]]);
        // An idle buffer a pushed packet takes the place of is handed back; one given is
        // where the next packet is built.
        out.clear();
        out.give([vec![9; 32]]);
        assert_eq!(out.push(vec![5]), Some(vec![4]), "the buffer of the packet sent before");
        assert_eq!(out.push(vec![6]), Some(vec![9; 32]));
        assert_eq!(out.push(vec![7]), None);
    }

    /// Issue 24: the responses of one READ go to the socket layer in batches (one
    /// `sendmmsg` each, their MIDDLE packets GSO trains), not one system call per packet:
    /// [`FIRST_BATCH`] first, each full batch doubling the next up to [`BATCH`]; in PSN
    /// order, every packet with its own range's bytes. 64 KiB at MTU 1024 is 16 and 32
    /// handed over and 16 left for the end of the run; 1 MiB 16, 32 and fifteen of 64,
    /// 16 left; 65 packets 16 and 32, 17 left.
    #[test]
    fn read_responses_are_handed_over_in_growing_batches_in_psn_order() {
        let mut sizes_1m = vec![FIRST_BATCH, 2 * FIRST_BATCH];
        sizes_1m.extend([BATCH; 15]);
        for (len, sizes, left) in [(64 << 10, vec![16, 32], 16), (1 << 20, sizes_1m, 16), (65 << 10, vec![16, 32], 17)] {
            let mut machine = responder_after_read(len);
            let (handed, rest) = drain(&mut machine, fill);
            assert_eq!(handed.iter().map(Vec::len).collect::<Vec<_>>(), sizes, "{len} bytes");
            assert_eq!(rest.len(), left, "{len} bytes");
            let all: Vec<Vec<u8>> = handed.into_iter().flatten().chain(rest).collect();
            assert_eq!(parsed(&all), read_stream(0, len / MTU), "{len} bytes");
            // The MIDDLE packets are of one size: they leave as GSO trains.
            let middle = &all[1..all.len() - 1];
            assert!(middle.iter().all(|p| p.len() == middle[0].len()));
            assert!(!machine.has_transmit());
        }
    }

    /// A responder's burst's batches grow 16, 32, 64, 64…; a batch sent before it is full
    /// ends the burst, and so does a burst that ends on a full batch (nothing left to
    /// send): the next burst starts at [`FIRST_BATCH`] again, as does a batch cleared. A
    /// requester's batches are [`BATCH`] throughout.
    #[test]
    fn batches_grow_within_a_burst_and_start_small_after_it() {
        let mut out = Batch::default();
        let fill_until_full = |out: &mut Batch| {
            let mut n = 0;
            loop {
                out.next(8);
                n += 1;
                if out.commit() {
                    return n;
                }
            }
        };
        let mut sizes = Vec::new();
        for _ in 0..4 {
            sizes.push(fill_until_full(&mut out));
            out.sent();
        }
        assert_eq!(sizes, [FIRST_BATCH, 2 * FIRST_BATCH, BATCH, BATCH]);
        out.sent();
        assert_eq!(fill_until_full(&mut out), FIRST_BATCH, "after a burst that ended on a full batch");
        out.sent();
        out.next(8);
        out.commit();
        out.sent();
        assert_eq!(fill_until_full(&mut out), FIRST_BATCH, "after a batch sent before it was full");
        out.sent();
        out.clear();
        assert_eq!(fill_until_full(&mut out), FIRST_BATCH, "after a clear");
        // A requester's batch is full at BATCH from the start.
        let mut flat = Batch::flat();
        assert_eq!(fill_until_full(&mut flat), BATCH);
        flat.sent();
        assert_eq!(fill_until_full(&mut flat), BATCH);
    }

    /// docs/rocev2-wire.md §3.3: a region deregistered during a READ stops its stream: the
    /// packets before the one whose bytes could not be read leave, that one and the rest do
    /// not, and the caller learns which one (to answer with its NAK, as rxe's
    /// `read_reply` does when its region check fails).
    #[test]
    fn a_read_whose_region_went_away_stops_at_that_packet() {
        let mut machine = responder_after_read(64 << 10);
        let gone = |s: ReadSource, p: &mut [u8]| if s.va < VA + 10 * u64::from(MTU) { fill(s, p) } else { Err(Violation::RkeyUnknown) };
        let ((handed, rest), unreadable) = drain_or_stop(&mut machine, gone);
        assert!(handed.is_empty());
        assert_eq!(parsed(&rest), read_stream(0, 64)[..10]);
        assert_eq!(unreadable, Some((Psn::new(10), Violation::RkeyUnknown)));
        machine.placement_failed(Psn::new(10), Violation::RkeyUnknown);
        let (handed, rest) = drain(&mut machine, fill);
        assert!(handed.is_empty());
        assert_eq!(parsed(&rest), [(Operation::Acknowledge, 10, 0, 0)], "the NAK of that packet, and nothing after");
        assert_eq!(machine.state(), rverbs_proto::rc::ResponderState::Error);
    }

    /// docs/rocev2-wire.md §3.3 "duplicate": a duplicate READ inside the original is
    /// answered again from its own PSN, its bytes read again, batched as the first time.
    #[test]
    fn a_duplicate_read_is_replayed_from_its_psn_in_batches() {
        let mut machine = responder_after_read(128 << 10);
        let (handed, rest) = drain(&mut machine, fill);
        assert_eq!((handed.len(), rest.len()), (3, 16));
        let dup = read_request(32, VA + 32 * u64::from(MTU), 96 << 10);
        let d = machine.handle_request(Instant::now(), &dup, &mut AnyKey);
        assert!(d.violation.is_none());
        let (handed, rest) = drain(&mut machine, fill);
        assert_eq!((handed.len(), rest.len()), (2, 48));
        let all: Vec<Vec<u8>> = handed.into_iter().flatten().chain(rest).collect();
        assert_eq!(parsed(&all), read_stream(32, 96));
    }
}
