//! The engine's share of the device: this process's endpoint (the memory layer's part)
//! and the live objects the engine and the transports find by number — CQs, QPs and
//! SRQs — with the GID table requests are addressed by.
//!
//! Rule (ARCHITECTURE.md, "Layers"): a layer owns the state it uses. The device
//! (`device::DeviceInner`) is this engine state plus what only the verbs objects use; it
//! hands `&'static Engine` down to the code that looks objects up (routing a request,
//! delivering a completion event), which never names the device.

use crate::cq::CqInner;
use crate::gid::{Gid, GidEntry};
use crate::mr::endpoint::Endpoint;
use crate::qp::QpInner;
use crate::qp::srq::SrqInner;
use crate::table::Table;

/// This process's endpoint with its live objects (one per process generation).
pub(crate) struct Engine {
    /// This process's endpoint of the host-wide device.
    pub(crate) endpoint: Endpoint,
    /// Live CQs by number (events and peers name CQs by number).
    pub(crate) cqs: Table<CqInner>,
    /// Live QPs by number.
    pub(crate) qps: Table<QpInner>,
    /// Live SRQs by number.
    pub(crate) srqs: Table<SrqInner>,
    /// The GID table of the port (ibv_query_gid(3)).
    pub(crate) gids: Vec<GidEntry>,
    /// The port's active MTU (`limits::ActiveMtu`): also the largest UD message.
    pub(crate) active_mtu: crate::limits::ActiveMtu,
    /// The QPs whose network responders hold ACKs (docs/network.md, "Coalesced ACKs").
    pub(crate) acks_due: crate::qp::acks::AcksDue,
}

impl std::ops::Deref for Engine {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl Engine {
    /// The engine of `endpoint`, with GID table `gids`, the port's active MTU
    /// `active_mtu` and no objects yet; QP and SRQ numbers carry the endpoint's number.
    pub(crate) fn new(endpoint: Endpoint, gids: Vec<GidEntry>, active_mtu: crate::limits::ActiveMtu) -> Engine {
        let ep = endpoint.ep();
        Engine {
            endpoint,
            cqs: Table::new("completion queues", 0),
            qps: Table::new("queue pairs", ep),
            srqs: Table::new("shared receive queues", ep),
            gids,
            active_mtu,
            acks_due: Default::default(),
        }
    }

    /// Whether `gid` names this device (one of its GID table entries).
    pub(crate) fn owns_gid(&self, gid: &Gid) -> bool {
        self.gids.iter().any(|e| e.gid == *gid)
    }
}
