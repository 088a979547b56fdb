//! Completion queues and channels of the rdma-core backend as the public [`Cq`] and
//! [`CompChannel`] hold them (feature `rdma-core`): the backend, a layer above, implements
//! these traits, so that this layer names none of its types (docs/rdma-core-backend.md).
//!
//! [`Cq`]: crate::Cq
//! [`CompChannel`]: crate::CompChannel

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use crate::error::Result;
use crate::rings::wc::Wc;

/// A CQ of libibverbs (ibv_create_cq(3)).
pub(crate) trait NativeCq: Send + Sync {
    /// The number of entries (`ibv_cq.cqe`).
    fn cqe(&self) -> u32;
    /// The `cq_context` given at creation.
    fn cq_context(&self) -> usize;
    /// ibv_poll_cq(3), through the context's ops table.
    fn poll(&self, wc: &mut [Wc]) -> Result<usize>;
    /// ibv_req_notify_cq(3), through the context's ops table.
    fn req_notify(&self, solicited_only: bool) -> Result<()>;
    /// ibv_ack_cq_events(3).
    fn ack_events(&self, n: u32);
    /// The word [`crate::Cq::set_cookie`] attached.
    fn cookie(&self) -> usize;
    /// Attaches the word [`crate::Cq::cookie`] reads.
    fn set_cookie(&self, value: usize);
    /// The context it was created in.
    fn context(&self) -> Arc<dyn crate::mr::native::NativeContext>;
    /// Whether `other` is the same CQ.
    fn same_as(&self, other: &dyn NativeCq) -> bool;
    /// ibv_destroy_cq(3): `EBUSY` while a QP uses it or an event of it is unacknowledged.
    fn destroy(&self) -> Result<()>;
    /// The backend's CQ.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A completion channel of libibverbs (ibv_create_comp_channel(3)).
pub(crate) trait NativeChannel: Send + Sync {
    /// The channel's fd.
    fn fd(&self) -> BorrowedFd<'_>;
    /// ibv_get_cq_event(3): the CQ of the next event, which the caller acknowledges.
    fn get_cq_event(&self) -> Result<Arc<dyn NativeCq>>;
    /// ibv_destroy_comp_channel(3): `EBUSY` while a CQ uses it.
    fn destroy(&self) -> Result<()>;
    /// The backend's channel.
    fn as_any(&self) -> &dyn std::any::Any;
}
