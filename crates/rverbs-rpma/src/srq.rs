//! Shared receive queues (`struct rpma_srq`, `struct rpma_srq_cfg`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rverbs::SrqInit;

use crate::cq::Cq;
use crate::recv::post_recv_to;
use crate::error::{Error, Result};
use crate::mr::MrLocal;
use crate::peer::Peer;

/// How a shared receive queue is sized (rpma_srq_cfg_new(3)). The defaults are
/// librpma's: 100 receives, a receive CQ of 100 entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqCfg {
    rq_size: u32,
    rcq_size: u32,
}

impl Default for SrqCfg {
    fn default() -> Self {
        SrqCfg { rq_size: 100, rcq_size: 100 }
    }
}

impl SrqCfg {
    /// The default configuration (rpma_srq_cfg_new(3)).
    pub fn new() -> SrqCfg {
        SrqCfg::default()
    }

    /// Sets how many receives the queue holds (rpma_srq_cfg_set_rq_size(3)).
    pub fn set_rq_size(&mut self, n: u32) -> &mut Self {
        self.rq_size = n;
        self
    }

    /// How many receives the queue holds (rpma_srq_cfg_get_rq_size(3)).
    pub fn rq_size(&self) -> u32 {
        self.rq_size
    }

    /// Sets the size of the queue's own receive CQ; 0 means none, so the receives of a
    /// connection complete to the connection's receive CQ or main CQ
    /// (rpma_srq_cfg_set_rcq_size(3)).
    pub fn set_rcq_size(&mut self, n: u32) -> &mut Self {
        self.rcq_size = n;
        self
    }

    /// The size of the queue's own receive CQ (rpma_srq_cfg_get_rcq_size(3)).
    pub fn rcq_size(&self) -> u32 {
        self.rcq_size
    }
}

/// A shared receive queue (`struct rpma_srq`, rpma_srq_new(3)): one receive queue for
/// the connections whose configuration names it ([`crate::ConnCfg::set_srq`]), and,
/// unless its configuration's `rcq_size` is 0, a receive CQ of its own that all their
/// receives complete to. A completion's [`crate::Wc::qp_num`] tells which connection's
/// QP ([`crate::Conn::qp_num`]) the message came through.
///
/// Cloning shares the queue (a [`crate::ConnCfg`] holding it keeps it alive); the
/// last clone dropped destroys it unless [`Srq::delete`] did.
#[derive(Clone, Debug)]
pub struct Srq(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    srq: rverbs::Srq,
    rcq: Option<Cq>,
    deleted: AtomicBool,
}

impl Inner {
    fn teardown(&self) -> Result<()> {
        if self.deleted.load(Ordering::Acquire) {
            return Ok(());
        }
        // The queue first: while a connection's QP uses it (and so its CQ) this fails
        // with EBUSY and nothing is destroyed.
        self.srq.destroy().map_err(Error::from)?;
        self.deleted.store(true, Ordering::Release);
        self.rcq.as_ref().map_or(Ok(()), Cq::destroy)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

impl PartialEq for Srq {
    fn eq(&self, other: &Srq) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Srq {}

impl std::hash::Hash for Srq {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.0).hash(state)
    }
}

impl Srq {
    /// Creates a shared receive queue on `peer` as `cfg` (or the default configuration)
    /// describes (rpma_srq_new(3)): `ibv_create_srq` with `max_wr = rq_size`, one
    /// scatter/gather entry and no limit, and a receive CQ of `rcq_size` entries (armed,
    /// on a completion channel of its own) unless that is 0.
    ///
    /// Errors: `NoMem` or `Provider` if the queue or its CQ cannot be created (e.g.
    /// `rq_size` 0 or over the device's maximum).
    pub fn new(peer: &Peer, cfg: Option<&SrqCfg>) -> Result<Srq> {
        let cfg = cfg.copied().unwrap_or_default();
        let init = SrqInit { max_wr: cfg.rq_size(), max_sge: 1, srq_limit: 0, srq_context: 0 };
        let srq = peer.pd().create_srq(&init).map_err(|e| Error::alloc(e.errno()))?;
        let rcq = match cfg.rcq_size() {
            0 => None,
            n => match Cq::new(peer.context(), n, None) {
                Ok(c) => Some(c),
                Err(e) => {
                    let _ = srq.destroy();
                    return Err(e);
                }
            },
        };
        Ok(Srq(Arc::new(Inner { srq, rcq, deleted: AtomicBool::new(false) })))
    }

    /// Posts a receive into `len` bytes of `dst` at `offset` (rpma_srq_recv(3)); any
    /// connection using the queue may consume it. Receives are an unordered set. `dst`
    /// `None` with offset and length 0 is a 0-byte receive.
    ///
    /// Errors: `Inval` for a non-zero 0-byte form or a range outside `dst`; `Provider` if
    /// ibv_post_srq_recv(3) fails (e.g. `ENOMEM`: the queue is full).
    pub fn recv<'a>(&self, dst: impl Into<Option<&'a MrLocal>>, offset: usize, len: usize, op_context: u64) -> Result<()> {
        post_recv_to(|wr| self.0.srq.post_recv(wr), dst.into(), offset, len, op_context)
    }

    /// The queue's own receive CQ (rpma_srq_get_rcq(3)); `None` if its configuration's
    /// `rcq_size` was 0.
    pub fn get_rcq(&self) -> Option<&Cq> {
        self.0.rcq.as_ref()
    }

    /// The verbs shared receive queue.
    pub fn as_verbs(&self) -> &rverbs::Srq {
        &self.0.srq
    }

    /// Deletes the queue (rpma_srq_delete(3)): destroys its receive CQ and the verbs
    /// queue, now, even if clones remain (a connection request made afterwards with a
    /// configuration naming it fails).
    ///
    /// Errors: `Provider(EBUSY)` while a connection still uses the queue (nothing is
    /// destroyed then); `Provider` if a destroy fails.
    pub fn delete(self) -> Result<()> {
        self.0.teardown()
    }
}
