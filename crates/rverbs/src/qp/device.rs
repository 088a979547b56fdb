//! The device as a QP sees it: what the engine asks of the layers above it, as traits
//! the engine defines and the device implements.
//!
//! Rule (ARCHITECTURE.md, "Layers"): no module imports a layer above its own, and device
//! state is passed down explicitly. A QP is given its device ([`QpDevice`]) when it is
//! created; the device gives each send queue its link ([`SendPath`]), the transports'
//! per-queue state, which holds the device state the transports use (the engine's
//! tables, the network sockets, the multicast groups). The engine names neither the
//! transports nor the device: the protocol core's requester of the send queue
//! (`super::send`) hands each request packet it builds to the queue's link, and takes
//! the responses the link brings back.

use std::sync::Arc;

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{Placed, Request, Response};

use super::sq::{ReqView, SendWqe};
use super::QpInner;
use crate::gid::{Gid, GidEntry};
use crate::mr::{PinList, Sge};
use crate::table::Table;

/// What a QP reaches of its device beyond its PD and CQs.
pub(crate) trait QpDevice: Sync {
    /// Live QPs by number (a QP is reserved, published and removed there).
    fn qps(&self) -> &Table<QpInner>;

    /// Live SRQs by number (an XRC target QP's flush looks for its takes in those of its
    /// domain).
    fn srqs(&self) -> &Table<crate::qp::srq::SrqInner>;

    /// The GID table of the port.
    fn gids(&self) -> &[GidEntry];

    /// Whether `gid` names this device (one of its GID table entries).
    fn owns_gid(&self, gid: &Gid) -> bool {
        self.gids().iter().any(|e| e.gid == *gid)
    }

    /// The link MTU of the network socket serving source GID `sgid`, if one does
    /// (a connected QP whose destination is another host runs over it).
    fn network_link(&self, sgid: &Gid) -> Option<u32>;

    /// A new send queue's link: the transports' state for it.
    fn new_path(&'static self) -> Box<dyn SendPath>;
}

/// How the requester runs on a link (docs/queue-pairs.md, "One requester, two links").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The MTU the requester segments messages at: the path MTU on the network;
    /// `rverbs_proto::rc::UNSEGMENTED_MTU` where there are no packets (one request and one
    /// response per message).
    pub(crate) mtu: u32,
    /// The most PSNs it keeps unacknowledged.
    pub(crate) window: u32,
    /// Whether XRC requests carry the XRCETH (the network); on the same host the link
    /// finds the SRQ with the responder, once per connection.
    pub(crate) xrceth: bool,
    /// Whether every request is answered (or known unanswered) inside
    /// [`SendPath::transmit`]: the same host. The requester then reads the clock only when
    /// a request is left waiting, and an RC request's scatter list is checked when its
    /// bytes are gathered, not also before.
    pub(crate) synchronous: bool,
}

/// One request packet on its way out: what the requester built, and the work request it
/// belongs to, whose bytes the link gathers.
pub(crate) struct Tx<'a> {
    pub(crate) request: &'a Request,
    pub(crate) wqe: &'a SendWqe,
    pub(crate) sges: &'a [Sge],
    pub(crate) inline: &'a [u8],
    /// The oldest PSN not yet acknowledged: where a responder the link starts for this
    /// connection expects the next request (a link without packets keeps the responder's
    /// machine itself).
    pub(crate) comp_psn: Psn,
}

/// A request offered to the express lane (docs/queue-pairs.md, "The express lane"): one
/// packet, nothing outstanding on the queue, the PSN the requester gave it.
pub(crate) struct Express<'a> {
    pub(crate) psn: Psn,
    pub(crate) op: ExpressOp,
    pub(crate) data: ExpressData<'a>,
    /// Its length (≤ the requester's MTU; a WRITE or a READ has at least 1 byte).
    pub(crate) len: u32,
}

/// What an express request does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ExpressOp {
    /// RDMA WRITE without immediate data.
    Write { rkey: u32, va: u64 },
    /// RDMA READ into the request's scatter list.
    Read { rkey: u32, va: u64 },
    /// CMP_SWAP or FETCH_ADD on the 8 bytes at `va`, the original value into the
    /// request's scatter list (8 bytes).
    Atomic { rkey: u32, va: u64, op: crate::mem::AtomicOp },
    /// SEND without invalidation; `solicited`: IBV_SEND_SOLICITED; `imm`: the immediate
    /// data of a SEND_WITH_IMM.
    Send { solicited: bool, imm: Option<u32> },
    /// RDMA WRITE with immediate data: the bytes at `va` (none for a zero-length one),
    /// then a receive of the responder consumed.
    WriteImm { rkey: u32, va: u64, imm: u32, solicited: bool },
}

/// What the express lane made of a request ([`SendPath::express`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expressed {
    /// Not taken: nothing moved, the queued way decides its outcome.
    No,
    /// Executed and acknowledged: it completes with success.
    Done,
    /// An atomic executed and acknowledged whose original value could not be stored into
    /// the request's buffer (its memory unmapped by its owner after the check): it
    /// completes LOC_PROT_ERR (`vendor_err`), as the queued way's completer has it.
    LocalFault { vendor_err: u32 },
}

/// Where an express request's bytes are (a READ's or an atomic's: where its response's
/// bytes go).
pub(crate) enum ExpressData<'a> {
    /// Registered memory of the requester's PD.
    Sges(&'a [Sge]),
    /// Inline bytes.
    Inline(&'a [u8]),
}

/// The payload of a READ response, wherever the link holds it (a packet's bytes, or the
/// responder's registered memory on the same host).
pub(crate) trait ResponseBytes {
    /// Copies `len` bytes of it into `dst`, at byte `offset` of that list, and says what
    /// the completer is to make of the response ([`Placed`]).
    fn copy_into(&self, dst: &PinList<'_>, offset: usize, len: u32) -> Placed;
}

/// A packet's payload as [`ResponseBytes`] (empty for responses without one).
pub(crate) struct PacketBytes<'a>(pub(crate) &'a [u8]);

/// Where a link hands the responses that come back for a request: at once on the same
/// host (inside [`SendPath::transmit`]); from the network they arrive later through the
/// receive path, which hands them to the same requester (`QpInner::on_response`).
pub(crate) trait Answers {
    /// One response, with its payload.
    fn answer(&mut self, response: &Response, bytes: &dyn ResponseBytes);
}

/// A send queue's link to its responders: the transports' state for one send queue (the
/// responder found for its connection and its machine, the network's packet batch) with
/// the device state the transports reach through it. Kept in the send queue
/// (`SendQueue::link`) and used with the queue locked.
pub(crate) trait SendPath: Send {
    /// How a requester runs on this link for a QP whose requester's view is `req`.
    fn shape(&self, qp: &QpInner, req: &ReqView) -> Shape;

    /// Sends `tx` towards the responder of `qp` (view `req`); responses that come back
    /// at once go to `answers`. A request nobody answers is simply not answered: the
    /// requester's timers decide what follows.
    ///
    /// Errors: the vendor error of a LOC_PROT_ERR when the work request's bytes can no
    /// longer be gathered (its region went away after the request was handed over).
    fn transmit(&mut self, qp: &Arc<QpInner>, req: &ReqView, tx: Tx<'_>, answers: &mut dyn Answers) -> Result<(), u32>;

    /// The express lane: executes `w` on the connection's responder and has it
    /// acknowledged at once, if the link can (the same host, a responder of this process
    /// that expects it and takes it) and everything about it passes; [`Expressed::No`]
    /// changes nothing, and the request takes the queued way, which decides its outcome.
    fn express(&mut self, qp: &Arc<QpInner>, req: &ReqView, w: &Express<'_>) -> Expressed {
        let _ = (qp, req, w);
        Expressed::No
    }
    /// Sends what [`SendPath::transmit`] batched; ACKs `qp`'s responder holds for the same
    /// peer go with it (docs/network.md, "Coalesced ACKs").
    fn flush(&mut self, qp: &QpInner);

    /// Sends the ACKs `qp`'s responder holds, at once (the QP leaves RTS/RTR or is
    /// destroyed: docs/network.md, "Coalesced ACKs").
    fn release_acks(&mut self, qp: &QpInner) {
        let _ = qp;
    }

    /// Forgets the responder (`modify_qp` changed the path or the QP restarted).
    fn forget_route(&mut self);

    /// Forgets the connection: a new requester starts (RTS after RESET, or after an
    /// error), or the queue was flushed.
    fn reset(&mut self);
}
