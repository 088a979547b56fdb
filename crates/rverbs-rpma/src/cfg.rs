//! Connection configurations (`struct rpma_conn_cfg`, rpma_conn_cfg_new(3)).

use std::time::Duration;

use crate::srq::Srq;

/// How a connection's queues are sized and how long its setup may wait
/// (rpma_conn_cfg_new(3)). The defaults are librpma's: timeout 1000 ms, CQ 10, no
/// receive CQ, SQ 10, RQ 10, no shared completion channel, no shared receive queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConnCfg {
    timeout: Duration,
    cq_size: u32,
    rcq_size: u32,
    sq_size: u32,
    rq_size: u32,
    shared_comp_channel: bool,
    srq: Option<Srq>,
}

impl Default for ConnCfg {
    fn default() -> Self {
        ConnCfg {
            timeout: Duration::from_millis(1000),
            cq_size: 10,
            rcq_size: 0,
            sq_size: 10,
            rq_size: 10,
            shared_comp_channel: false,
            srq: None,
        }
    }
}

impl ConnCfg {
    /// The default configuration (rpma_conn_cfg_new(3)).
    pub fn new() -> ConnCfg {
        ConnCfg::default()
    }

    /// Sets how long address and route resolution of an active connection request may
    /// take (rpma_conn_cfg_set_timeout(3)).
    pub fn set_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = timeout;
        self
    }

    /// The resolution timeout (rpma_conn_cfg_get_timeout(3)).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets the size of the main CQ (rpma_conn_cfg_set_cq_size(3)).
    pub fn set_cq_size(&mut self, n: u32) -> &mut Self {
        self.cq_size = n;
        self
    }

    /// The size of the main CQ (rpma_conn_cfg_get_cq_size(3)).
    pub fn cq_size(&self) -> u32 {
        self.cq_size
    }

    /// Sets the size of the receive CQ; 0 means no receive CQ, so receives complete to
    /// the main CQ (rpma_conn_cfg_set_rcq_size(3)).
    pub fn set_rcq_size(&mut self, n: u32) -> &mut Self {
        self.rcq_size = n;
        self
    }

    /// The size of the receive CQ (rpma_conn_cfg_get_rcq_size(3)).
    pub fn rcq_size(&self) -> u32 {
        self.rcq_size
    }

    /// Sets the size of the send queue (rpma_conn_cfg_set_sq_size(3)).
    pub fn set_sq_size(&mut self, n: u32) -> &mut Self {
        self.sq_size = n;
        self
    }

    /// The size of the send queue (rpma_conn_cfg_get_sq_size(3)).
    pub fn sq_size(&self) -> u32 {
        self.sq_size
    }

    /// Sets the size of the receive queue (rpma_conn_cfg_set_rq_size(3)).
    pub fn set_rq_size(&mut self, n: u32) -> &mut Self {
        self.rq_size = n;
        self
    }

    /// The size of the receive queue (rpma_conn_cfg_get_rq_size(3)).
    pub fn rq_size(&self) -> u32 {
        self.rq_size
    }

    /// Makes the main CQ and the receive CQ share one completion channel
    /// (rpma_conn_cfg_set_compl_channel(3)); the connection is then waited on with
    /// [`crate::Conn::wait`], and [`crate::Cq::wait`] fails with `SharedChannel`.
    pub fn set_compl_channel(&mut self, shared: bool) -> &mut Self {
        self.shared_comp_channel = shared;
        self
    }

    /// Whether the completion channel is shared (rpma_conn_cfg_get_compl_channel(3)).
    pub fn compl_channel(&self) -> bool {
        self.shared_comp_channel
    }

    /// Makes the connections take their receives from `srq` (or from their own receive
    /// queue again: `None`) (rpma_conn_cfg_set_srq(3)). If the shared queue has a
    /// receive CQ of its own ([`Srq::get_rcq`]), the receives complete there and the
    /// connection gets no receive CQ whatever [`ConnCfg::rcq_size`] says; a shared
    /// completion channel ([`ConnCfg::set_compl_channel`]) cannot be combined with such
    /// a queue: creating a connection request fails with `Inval`. Posting receives
    /// goes through [`Srq::recv`]; [`crate::Conn::recv`] fails (`Provider`).
    pub fn set_srq(&mut self, srq: Option<&Srq>) -> &mut Self {
        self.srq = srq.cloned();
        self
    }

    /// The shared receive queue (rpma_conn_cfg_get_srq(3)).
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }
}
