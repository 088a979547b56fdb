//! Queue pairs of the rdma-core backend as the public [`Qp`](crate::Qp) holds them
//! (feature `rdma-core`): the backend, a layer above, implements the trait, so that this
//! layer names none of its types (docs/rdma-core-backend.md).

use rverbs_proto::verbs::{QpState, QpType};

use crate::error::Result;
use crate::rings::qp_attr::{QpAttr, QpCap};
use crate::rings::wr::{PostError, RecvWr, SendWr};
use rverbs_proto::state::QpAttrMask;

/// A QP of libibverbs (ibv_create_qp(3)).
pub(crate) trait NativeQp: Send + Sync {
    /// `ibv_qp.qp_num`.
    fn qp_num(&self) -> u32;
    /// The transport it was created with.
    fn qp_type(&self) -> QpType;
    /// The state (`ibv_qp.state`, as the last modify left it).
    fn state(&self) -> QpState;
    /// The capabilities the provider granted.
    fn cap(&self) -> QpCap;
    /// The `qp_context` given at creation.
    fn qp_context(&self) -> usize;
    /// Whether every send request completes signaled (`sq_sig_all` at creation).
    fn sq_sig_all(&self) -> bool;
    /// The word [`crate::Qp::set_cookie`] attached.
    fn cookie(&self) -> usize;
    /// Attaches the word [`crate::Qp::cookie`] reads.
    fn set_cookie(&self, value: usize);
    /// ibv_modify_qp(3).
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// ibv_query_qp(3).
    fn query(&self) -> Result<QpAttr>;
    /// ibv_post_send(3), through the context's ops table.
    fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError>;
    /// ibv_post_recv(3), through the context's ops table.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError>;
    /// The PD it was created in.
    fn pd(&self) -> std::sync::Arc<dyn crate::mr::native::NativePd>;
    /// ibv_destroy_qp(3).
    fn destroy(&self) -> Result<()>;
}
