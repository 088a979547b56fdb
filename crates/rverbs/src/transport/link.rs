//! A send queue's link to its responders ([`SendPath`], the contract `crate::qp::send`
//! drives the one requester through): the same host ([`super::host`]) or another host
//! over RoCEv2 ([`super::net`]), chosen by the path's destination GID
//! (`ReqView::network`, decided by `modify_qp`; docs/queue-pairs.md, "One requester, two
//! links").

use std::sync::Arc;

use rverbs_proto::rc::{MAX_UNACKED_PSNS, UNSEGMENTED_MTU};

use super::host::HostLink;
use super::net::NetTx;
use super::udp::Net;
use crate::engine::Engine;
use crate::mcast::Groups;
use crate::qp::device::{Answers, Express, Expressed, SendPath, Shape, Tx};
use crate::qp::sq::ReqView;
use crate::qp::QpInner;

/// The transports' state for one send queue, made by the device: the same-host link's
/// (the responder of the connection with the core's machine for it, one UD machine) and
/// the network link's (the packets being batched), with the device state both reach.
pub(crate) struct Path {
    host: HostLink,
    /// The network transport's sockets, if the device has any.
    net: Option<&'static Net>,
    /// The packets of a connection to another host being batched, from its first request
    /// until the queue is flushed or reset.
    net_tx: Option<NetTx>,
}

impl Path {
    pub(crate) fn new(engine: &'static Engine, net: Option<&'static Net>, mcast: &'static Groups) -> Path {
        Path { host: HostLink::new(engine, net, mcast), net, net_tx: None }
    }
}

impl SendPath for Path {
    fn shape(&self, _qp: &QpInner, req: &ReqView) -> Shape {
        if req.network {
            Shape { mtu: req.mtu, window: super::net::WINDOW, xrceth: true, synchronous: false }
        } else {
            Shape { mtu: UNSEGMENTED_MTU, window: MAX_UNACKED_PSNS, xrceth: false, synchronous: true }
        }
    }

    fn transmit(&mut self, qp: &Arc<QpInner>, req: &ReqView, tx: Tx<'_>, answers: &mut dyn Answers) -> Result<(), u32> {
        // The port of this process's view of the device is down (docs/fault-injection.md):
        // the request does not leave, as on a NIC whose link is down. Nobody answers: an
        // RC request retries on its ACK timer until the port is up or its retries run out
        // (RETRY_EXC_ERR); UC and UD complete at transmit, successfully, and nothing
        // arrives.
        if crate::fault_plan::port_down(qp.endpoint.slot) {
            return Ok(());
        }
        match (req.network, self.net) {
            (true, Some(net)) => super::net::transmit(&mut self.net_tx, net, qp, req, tx),
            // A network path without sockets: nobody answers.
            (true, None) => Ok(()),
            (false, _) => super::host::transmit(&mut self.host, qp, req, tx, answers),
        }
    }

    fn express(&mut self, qp: &Arc<QpInner>, req: &ReqView, w: &Express<'_>) -> Expressed {
        if req.network || crate::fault_plan::port_down(qp.endpoint.slot) {
            return Expressed::No;
        }
        super::host::express(&mut self.host, qp, req, w)
    }

    fn flush(&mut self, qp: &QpInner) {
        if let (Some(net), Some(t)) = (self.net, self.net_tx.as_mut()) {
            t.send_queued(net, qp);
        }
    }

    fn release_acks(&mut self, qp: &QpInner) {
        if let Some(net) = self.net {
            super::net::send_held_acks(net, qp, true);
        }
    }

    fn forget_route(&mut self) {
        self.host.forget_route();
    }

    fn reset(&mut self) {
        self.host.forget_route();
        self.net_tx = None;
    }
}
