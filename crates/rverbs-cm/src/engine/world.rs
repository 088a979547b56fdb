//! The boundary between the handshake and the world: what the state machine reads
//! ([`World`]) and what it asks to be done ([`Action`]).
//!
//! The handshake (`handshake.rs`) is sans I/O, like the RC protocol core: its inputs are
//! a verbs call, a MAD, a timer that expired or a peer that died, each with the time it
//! happens at; it reads facts of the host through [`World`] (this process's endpoint, the
//! device's limits, the GID table, the listener table, who holds an endpoint), changes
//! the ids' state, and pushes [`Action`]s: MADs to send or hand on, peers to watch,
//! events to deliver, QPs to flush. The engine (`mod.rs`) is the shell that executes
//! them on QP1, epoll and the event channels; a test drives two machines with a fake
//! world and a virtual clock (`tests.rs`).
//!
//! One input is fed back: a MAD that could not be sent to the peer of an id counts as
//! the peer's death ([`super::handshake::peer_gone`]), which is what the engine did
//! inline before (an endpoint of this host that no longer takes MADs is a process that
//! exited; another host's sends only fail when the host is unreachable).

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rverbs::capi_support::qp1::{Mad, MadPeer, MAD_LEN};
use rverbs::Qp;

use crate::addr::LocalGid;
use crate::channel::EventChannel;
use crate::event::Event;
use crate::handle::PortSpace;
use crate::table::Owner;

/// Facts of the host the handshake reads (never changes).
pub(crate) trait World {
    /// This process's endpoint (the top 8 bits of its communication ids).
    fn endpoint(&self) -> u32;
    /// The device's `max_qp_rd_atom`, at most 255.
    fn max_rd_atom(&self) -> u8;
    /// The device's node GUID (the REQ's and REP's CA GUID).
    fn node_guid(&self) -> u64;
    /// The GID-table entry of `ip`, if it is an address of this host's device.
    fn local_gid(&self, ip: IpAddr) -> Option<LocalGid>;
    /// Who listens on `dst` in port space `ps` on this host.
    fn listener(&self, ps: PortSpace, dst: SocketAddr) -> Option<Owner>;
    /// The process that holds endpoint `ep` of this host now.
    fn owner_pid(&self, ep: u32) -> Option<i32>;
    /// The MTU of the link behind local address `local`, in bytes.
    fn link_mtu(&self, local: IpAddr) -> u32;
}

/// What the handshake asks the engine to do, in order.
pub(crate) enum Action {
    /// Send `mad` to `to`'s QP1; if it cannot be sent and `id` is given, that id's peer
    /// is gone.
    Send { to: MadPeer, mad: [u8; MAD_LEN], id: Option<u64> },
    /// Hand a request from another host on to endpoint `ep` of this host, which serves
    /// it (this process is the host's GSI dispatcher); if that fails, send `refuse`.
    Forward { ep: u32, mad: Box<Mad>, refuse: [u8; MAD_LEN] },
    /// Watch the process `pid` behind endpoint `peer` (its death is an input).
    Watch { peer: MadPeer, pid: Option<i32> },
    /// Stop one watch of that process.
    Unwatch { peer: MadPeer, pid: Option<i32> },
    /// Queue `event` on `channel`.
    Deliver { channel: EventChannel, event: Event },
    /// Move `qp` to ERR (its work requests flush).
    QpToErr(Qp),
}

/// One input's context: the world to read, the time, and the actions produced.
pub(crate) struct Cx<'a> {
    pub(crate) world: &'a dyn World,
    pub(crate) now: Instant,
    pub(crate) out: Vec<Action>,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(world: &'a dyn World, now: Instant) -> Cx<'a> {
        Cx { world, now, out: Vec::new() }
    }

    /// Sends `mad` to `to`; a failure is not fed back.
    pub(crate) fn send(&mut self, to: MadPeer, mad: [u8; MAD_LEN]) {
        self.out.push(Action::Send { to, mad, id: None });
    }

    /// Sends `mad` to id `n`'s peer `to`; a failure means the peer is gone.
    pub(crate) fn send_for(&mut self, n: u64, to: MadPeer, mad: [u8; MAD_LEN]) {
        self.out.push(Action::Send { to, mad, id: Some(n) });
    }
}
