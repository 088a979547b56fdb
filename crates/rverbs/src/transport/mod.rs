//! Transports: how a send work request reaches the QP it is for.
//!
//! The transport is chosen from the destination GID (docs/queue-pairs.md, "Route"):
//! - [`host`], for QPs of this host — of this process or of a peer process, whose QPN
//!   names its endpoint — hands each request straight to its responder and the answer
//!   straight back to the requester, inside the caller;
//! - the network, for GIDs of other hosts: [`udp`] (the link: RoCEv2 sockets, the receive
//!   checks, the relay between processes of the host, port takeover, fault injection,
//!   capture), [`dispatch`] (where each received packet goes: UD delivery, MADs, relays,
//!   and the connections'), [`net`] (RC and UC connections driven by the protocol core's
//!   machines, with completions that arrive later) and [`mcast_net`] (UD multicast groups
//!   across hosts).
//!
//! A destination the device cannot reach behaves like a peer that never answers: RC
//! retries until `retry_cnt` is exhausted (RETRY_EXC_ERR); UC and UD complete as sent.

pub(crate) mod dispatch;
pub(crate) mod grh;
pub(crate) mod gsi;
pub(crate) mod deliver;
pub(crate) mod host;
pub(crate) mod link;
pub(crate) mod mcast_net;
pub(crate) mod net;
pub(crate) mod rendezvous;
pub(crate) mod respond;
pub(crate) mod route;
pub(crate) mod target;
pub(crate) mod udp;

