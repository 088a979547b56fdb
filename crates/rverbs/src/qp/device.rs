//! The device as a QP sees it: what the engine asks of the layers above it, as traits
//! the engine defines and the device implements.
//!
//! Rule (ARCHITECTURE.md, "Layers"): no module imports a layer above its own, and
//! device state is passed down explicitly. A QP is given its device ([`QpDevice`]) when
//! it is created; the device gives each send queue its [`SendPath`], the transports'
//! per-queue state, which holds the device state the transports use (the engine's
//! tables, the network sockets, the multicast groups). The engine names neither the
//! transports nor the device: it executes a work request through the send queue's path
//! (one dynamic call per executed request) and runs a network connection through the
//! device.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use super::sq::{ReqView, SendQueue, SendWqe};
use super::QpInner;
use crate::gid::{Gid, GidEntry};
use crate::mr::Sge;
use crate::table::Table;
use crate::wc::Cqe;

/// What a QP reaches of its device beyond its PD and CQs.
pub(crate) trait QpDevice: Sync {
    /// Live QPs by number (a QP is reserved, published and removed there).
    fn qps(&self) -> &Table<QpInner>;

    /// The GID table of the port.
    fn gids(&self) -> &[GidEntry];

    /// Whether `gid` names this device (one of its GID table entries).
    fn owns_gid(&self, gid: &Gid) -> bool {
        self.gids().iter().any(|e| e.gid == *gid)
    }

    /// The link MTU of the network socket serving source GID `sgid`, if one does
    /// (a connected QP whose destination is another host runs over it).
    fn network_link(&self, sgid: &Gid) -> Option<u32>;

    /// A new send queue's path: the transports' state for it.
    fn new_path(&'static self) -> Box<dyn SendPath>;
}

/// A send queue's way to its responders: the transports' state for one send queue (the
/// responder found for its connection, the protocol machines, a network connection's
/// requester) with the device state the transports reach through it. Kept in the send
/// queue (`SendQueue::route`) and used with the queue locked.
pub(crate) trait SendPath: Send {
    /// Executes the head work request `wqe` (scatter list `sges`, inline bytes `inline`)
    /// of `qp`'s send queue, whose requester's view is `req`, on this host.
    fn execute(&mut self, qp: &Arc<QpInner>, req: &ReqView, wqe: &SendWqe, sges: &[Sge], inline: &[u8]) -> Exec;

    /// Runs the queue's connection to another host (`req.network`): hands new work
    /// requests (none while `draining`), sends, retires what completed. The path is
    /// `sq`'s own, taken out of it for the call. Returns whether requests are in flight.
    fn progress_net(&mut self, qp: &Arc<QpInner>, sq: &mut SendQueue, draining: bool) -> bool;

    /// Forgets the responder (`modify_qp` changed the path or the QP restarted).
    fn forget_route(&mut self);

    /// Drops the network connection's requester (the queue was flushed or reset).
    fn drop_net(&mut self);

    /// The path as the transport that made it knows it (the receive path finds a
    /// connection's requester through it).
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The path a send queue holds while its own is out for [`SendPath::progress_net`]:
/// goes nowhere (zero-sized, so swapping it in allocates nothing).
pub(crate) struct NoPath;

impl SendPath for NoPath {
    fn execute(&mut self, _: &Arc<QpInner>, _: &ReqView, _: &SendWqe, _: &[Sge], _: &[u8]) -> Exec {
        Exec::Lost
    }

    fn progress_net(&mut self, _: &Arc<QpInner>, _: &mut SendQueue, _: bool) -> bool {
        false
    }

    fn forget_route(&mut self) {}

    fn drop_net(&mut self) {}

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// What executing the head work request of a send queue led to.
#[derive(Debug)]
pub(crate) enum Exec {
    /// The request is finished: its completion (success or error).
    Done(Cqe),
    /// The responder had no receive posted (RNR NAK): retry after the delay.
    Rnr(Duration),
    /// No response (unreachable or not-ready peer, dropped request): retry after the
    /// ACK timeout.
    Lost,
    /// The request cannot start yet and no timer will change that (no read/atomic
    /// credit: `max_rd_atomic` is 0).
    Stall,
}
