//! The objects of the rdma-core backend as the public [`Mr`](crate::Mr),
//! [`Pd`](crate::Pd) and [`Context`](crate::Context) hold them (feature `rdma-core`): the
//! backend, a layer above, implements the traits, so that this layer names none of its
//! types, and a region gives back its PD, a PD its context, as the public types hold them
//! (docs/rdma-core-backend.md).

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use crate::error::Result;
use crate::gid::GidEntry;
use crate::mr::MrInfo;

/// A context libibverbs opened (ibv_open_device(3)). What it gives in types of the layers
/// above (PDs, CQs, channels) the verbs layer reaches through [`NativeContext::as_any`].
pub(crate) trait NativeContext: Send + Sync {
    /// The context's id, unique in the process (apart from the soft device's).
    fn id(&self) -> u32;
    /// The name of the device it is open on.
    fn device_name(&self) -> &'static str;
    /// `struct ibv_device_attr` as ibv_query_device(3) wrote it when the device was opened.
    fn device_attr(&self) -> rverbs_abi::ibv_device_attr;
    /// Port 1's GID entries (ibv_query_gid_ex(3)) up to its `gid_tbl_len`.
    fn gid_table(&self) -> Vec<GidEntry>;
    /// `ibv_context.async_fd`.
    fn async_fd(&self) -> BorrowedFd<'_>;
    /// The backend's context.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A protection domain libibverbs allocated (ibv_alloc_pd(3)). What it makes in types of
/// the layers above (QPs, address handles) the verbs layer reaches through
/// [`NativePd::as_any`].
pub(crate) trait NativePd: Send + Sync {
    /// `ibv_pd.handle`.
    fn handle(&self) -> u32;
    /// The context it was allocated in.
    fn context(&self) -> Arc<dyn NativeContext>;
    /// ibv_dealloc_pd(3): `EBUSY` while a region, QP or address handle of it is live.
    fn dealloc(&self) -> Result<()>;
    /// The backend's PD.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A region libibverbs registered (ibv_reg_mr(3)).
pub(crate) trait NativeMr: Send + Sync {
    /// `ibv_mr.lkey`.
    fn lkey(&self) -> u32;
    /// `ibv_mr.rkey`.
    fn rkey(&self) -> u32;
    /// What the region covers: address, length, IO virtual address (its address),
    /// access, lkey as `key`, its PD's handle.
    fn info(&self) -> MrInfo;
    /// Copies out of the region at `offset` (a plain copy: docs/rdma-core-backend.md).
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()>;
    /// Copies into the region at `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// The aligned 64-bit word at `offset`, read atomically.
    fn read_u64(&self, offset: usize) -> Result<u64>;
    /// ibv_dereg_mr(3).
    fn dereg(&self) -> Result<()>;
    /// Whether the region is still registered.
    fn is_valid(&self) -> bool;
    /// The PD it was registered in.
    fn pd(&self) -> Arc<dyn NativePd>;
}
