//! Leases: a work request posted from an owned region borrows the region mutably until
//! the completion that ends it is handed back ([`Lease::complete`]).
//!
//! Rule: ibv_post_send(3), ibv_post_recv(3): the buffers a work request names must not be
//! touched until the request's completion is polled (ibv_poll_cq(3)). The lease makes
//! that a borrow: while it lives the region cannot be read, written, posted from again,
//! given back or dropped (the module's `compile_fail` doctests). Every leased request is
//! signaled, so that it has a completion to end the lease.

use std::ops::RangeBounds;

use rverbs_proto::verbs::{WcOpcode, WcStatus};

use super::buf::StableBuf;
use super::region::{OwnedMr, Pending};
use crate::error::{Error, Result};
use crate::rings::wc::Wc;
use crate::rings::wr::{PostError, RecvWr};
use crate::typed::{Connected, Read, Receives, Reliable, Remote, Send, TypedQp, Write};

/// A leased work request: the region it was posted from, borrowed until its completion.
///
/// [`Lease::complete`] with the request's completion (success or error: a flushed or
/// failed request is over too) ends the lease and lends the region back, closed, its
/// bytes the program's. A completion of another request gives the lease back unchanged.
/// Dropping or forgetting a lease ends the borrow but not the request: the region then
/// refuses its bytes until [`OwnedMr::end_lease`] sees the completion or
/// [`OwnedMr::into_inner`] deregisters it.
#[must_use = "a lease ends with its completion (Lease::complete); dropped, it leaves the region leased"]
#[derive(Debug)]
pub struct Lease<'a, B: StableBuf> {
    region: &'a mut OwnedMr<B>,
    pending: Pending,
}

impl<'a, B: StableBuf> Lease<'a, B> {
    /// The leased request's `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.pending.wr_id
    }

    /// The QP the request was posted to.
    pub fn qp_num(&self) -> u32 {
        self.pending.qp_num
    }

    /// Whether `wc` is this request's completion: its `wr_id` and QP number, and, for a
    /// successful completion, a receive's opcode for a leased receive and a send queue's
    /// for the others (ibv_poll_cq(3): an error completion's opcode is not valid).
    pub fn is_completed_by(&self, wc: &Wc) -> bool {
        ends(&self.pending, wc)
    }

    /// Ends the lease with its completion `wc`, whatever its status: the region is
    /// closed (its keys grant nothing, [`OwnedMr::close`]) and lent back, its bytes the
    /// program's. Another request's completion gives the lease back (`Err`).
    ///
    /// If an access to the region by a peer is still in progress after two seconds, the
    /// region stays open ([`OwnedMr::as_slice`] says `EBUSY`; [`OwnedMr::close`] waits
    /// again).
    pub fn complete(self, wc: &Wc) -> std::result::Result<&'a mut OwnedMr<B>, Self> {
        if !ends(&self.pending, wc) {
            return Err(self);
        }
        self.region.pending = None;
        let _ = self.region.close_keys();
        Ok(self.region)
    }
}

/// Whether `wc` completes the request `p`.
fn ends(p: &Pending, wc: &Wc) -> bool {
    if wc.wr_id() != p.wr_id || wc.qp_num() != p.qp_num {
        return false;
    }
    match wc.opcode() {
        // <infiniband/verbs.h>: receive completions have IBV_WC_RECV (128) set.
        Some(op) if wc.status() == WcStatus::Success => (op as u32 & WcOpcode::Recv as u32 != 0) == p.recv,
        _ => true,
    }
}

impl<B: StableBuf> OwnedMr<B> {
    /// Ends the request a dropped or forgotten lease left outstanding, with its
    /// completion `wc` (as [`Lease::complete`]): whether `wc` was it.
    pub fn end_lease(&mut self, wc: &Wc) -> bool {
        match self.pending {
            Some(p) if ends(&p, wc) => {
                self.pending = None;
                let _ = self.close_keys();
                true
            }
            _ => false,
        }
    }

    /// Posts a signaled SEND of `range` of the region on `qp` (ibv_post_send(3)) and
    /// leases the region to it.
    ///
    /// Errors: `EBUSY` while a dropped lease's request is outstanding; `EINVAL` for a
    /// range outside the region; as [`TypedQp::post`] (the region is closed again if it
    /// was).
    pub fn post_send<T: Connected>(&mut self, qp: &TypedQp<T>, wr_id: u64, range: impl RangeBounds<usize>) -> Result<Lease<'_, B>> {
        let sge = [self.sge("post_send", range)?];
        self.lease(Pending { wr_id, qp_num: qp.qp_num(), recv: false }, || qp.post(&Send::new(wr_id, &sge).signaled()))
    }

    /// Posts a signaled RDMA WRITE of `range` of the region to `to` on `qp`
    /// (ibv_post_send(3)) and leases the region to it.
    ///
    /// Errors: as [`OwnedMr::post_send`].
    pub fn post_write<T: Connected>(&mut self, qp: &TypedQp<T>, wr_id: u64, range: impl RangeBounds<usize>, to: Remote) -> Result<Lease<'_, B>> {
        let sge = [self.sge("post_write", range)?];
        self.lease(Pending { wr_id, qp_num: qp.qp_num(), recv: false }, || qp.post(&Write::new(wr_id, &sge, to).signaled()))
    }

    /// Posts a signaled RDMA READ from `from` into `range` of the region on `qp`
    /// (ibv_post_send(3); RC only) and leases the region to it.
    ///
    /// Errors: as [`OwnedMr::post_send`].
    pub fn post_read<T: Reliable>(&mut self, qp: &TypedQp<T>, wr_id: u64, range: impl RangeBounds<usize>, from: Remote) -> Result<Lease<'_, B>> {
        let sge = [self.sge("post_read", range)?];
        self.lease(Pending { wr_id, qp_num: qp.qp_num(), recv: false }, || qp.post(&Read::new(wr_id, &sge, from).signaled()))
    }

    /// Posts a receive into `range` of the region on `qp` (ibv_post_recv(3)) and leases
    /// the region to it.
    ///
    /// Errors: as [`OwnedMr::post_send`], and as [`TypedQp::post_recv`].
    pub fn post_recv<T: Receives>(&mut self, qp: &TypedQp<T>, wr_id: u64, range: impl RangeBounds<usize>) -> Result<Lease<'_, B>> {
        let sge = [self.sge("post_recv", range)?];
        self.lease(Pending { wr_id, qp_num: qp.qp_num(), recv: true }, || qp.post_recv(&[RecvWr::new(wr_id, &sge)]))
    }

    /// Opens the region, posts with `post`, and leases the region to the request.
    fn lease(&mut self, pending: Pending, post: impl FnOnce() -> std::result::Result<(), PostError>) -> Result<Lease<'_, B>> {
        if self.pending.is_some() {
            return Err(Error::Busy { what: "owned memory region with a leased work request outstanding (its completion ends the lease)" });
        }
        let was_open = self.open;
        self.open();
        if let Err(e) = post() {
            if !was_open {
                // Nothing was posted: nothing to wait for.
                let _ = self.close_keys();
            }
            return Err(e.error);
        }
        self.pending = Some(pending);
        Ok(Lease { region: self, pending })
    }
}
