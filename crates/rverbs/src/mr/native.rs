//! Memory regions of the rdma-core backend as the public [`Mr`](crate::Mr) holds them
//! (feature `rdma-core`): the backend, a layer above, implements the trait, so that this
//! layer names none of its types (docs/rdma-core-backend.md).

use crate::error::Result;
use crate::mr::MrInfo;

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
    /// The backend's region.
    fn as_any(&self) -> &dyn std::any::Any;
}
