//! Transports: how a send work request reaches the QP it is for.
//!
//! The transport is chosen from the destination GID (ARCHITECTURE.md §6):
//! - [`host`], for QPs of this host — of this process or of a peer process, whose QPN
//!   names its endpoint — executes the whole operation (requester, responder and
//!   completer) inside the caller;
//! - the network, for GIDs of other hosts: [`udp`] (the RoCEv2 sockets, the receive path,
//!   UD) and [`net`] (RC and UC connections driven by the protocol core's machines, with
//!   completions that arrive later).
//!
//! A destination the device cannot reach behaves like a peer that never answers: RC
//! retries until `retry_cnt` is exhausted (RETRY_EXC_ERR); UC and UD complete as sent.

pub(crate) mod grh;
pub(crate) mod gsi;
pub(crate) mod host;
pub(crate) mod local;
pub(crate) mod net;
pub(crate) mod respond;
pub(crate) mod route;
pub(crate) mod target;
pub(crate) mod udp;

use std::sync::Arc;
use std::time::Duration;

use crate::mr::Sge;
use crate::qp::sq::{ReqView, SendWqe};
use crate::qp::QpInner;
use crate::wc::Cqe;

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

/// Executes the head work request of `qp`'s send queue.
pub(crate) fn execute(
    qp: &Arc<QpInner>,
    req: &ReqView,
    wqe: &SendWqe,
    sges: &[Sge],
    inline: &[u8],
    path: &mut route::Path,
) -> Exec {
    host::execute(qp, req, wqe, sges, inline, path)
}
