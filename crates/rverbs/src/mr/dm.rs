//! Device memory (ibv_alloc_dm(3)): memory "on the device", which the program reaches
//! only through `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm`, and peers through a memory
//! region registered over it (`ibv_reg_dm_mr`, zero-based addresses).
//!
//! Here the device's memory is a shared segment of the endpoint directory, named as
//! library-allocated regions are (`mr-<id>`): a region over it carries the segment as its
//! location, so peer processes of the host map it and reach it with plain loads and
//! stores (docs/memory.md, "Device memory").
//!
//! Rule: ibv_alloc_dm(3): one allocation is at most the device's `max_dm_size`
//! ([`limits::MAX_DM_SIZE`]; EINVAL beyond, as mlx5's `alloc_dm_memic` in rdma-core's
//! providers/mlx5/verbs.c); the allocation fails with ENOMEM when "the device has no
//! more free device memory left", here when this process's allocations together would
//! exceed `max_dm_size` (the kernel's mlx5 `mlx5_cmd_alloc_memic`, no free pages);
//! `comp_mask` must be 0 (EINVAL, checked by the C layer).
//! Rule: ibv_memcpy_to_dm / ibv_memcpy_from_dm: the range inside the allocation
//! (EFAULT otherwise), then offsets and lengths in 4-byte units (EINVAL otherwise): the
//! order, errnos and granularity of mlx5's `mlx5_access_dm` (rdma-core
//! providers/mlx5/verbs.c), whose 4-byte units pyverbs' tests check.
//! Rule: ibv_free_dm(3) while a memory region uses the memory is EBUSY (the kernel keeps
//! the memory referenced by its regions).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::limits;
use crate::rule::Rule;
use crate::shm::Segment;

use super::endpoint::Endpoint;
use super::segment_name;

/// Bytes of device memory this process has allocated and not freed.
static IN_USE: AtomicU64 = AtomicU64::new(0);

/// The unit of device-memory copies, in bytes.
pub(crate) const DM_COPY_UNIT: u64 = 4;

/// The largest alignment an allocation can ask for (`log_align_req`): a page.
const MAX_LOG_ALIGN: u32 = 12;

pub(crate) struct DmInner {
    seg: Segment,
    /// The segment's id: `mr-<id>` in the endpoint directory.
    id: u64,
    len: usize,
    /// Memory regions registered over it.
    mrs: AtomicU32,
    freed: AtomicBool,
}

impl DmInner {
    /// The segment's id and the address this process maps it at.
    pub(crate) fn location(&self) -> (u64, usize) {
        (self.id, self.seg.addr())
    }

    /// A region starts using the memory.
    pub(crate) fn hold(&self) {
        self.mrs.fetch_add(1, Ordering::AcqRel);
    }

    /// A region over it went away.
    pub(crate) fn release(&self) {
        self.mrs.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for DmInner {
    fn drop(&mut self) {
        IN_USE.fetch_sub(self.len as u64, Ordering::AcqRel);
    }
}

/// Device memory (`struct ibv_dm`). Cloning shares it; the memory goes when the last
/// handle and the last region over it are gone (or at [`Dm::free`]).
#[derive(Clone)]
pub struct Dm {
    inner: Arc<DmInner>,
}

impl std::fmt::Debug for Dm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dm").field("len", &self.inner.len).field("handle", &self.handle()).finish()
    }
}

impl Dm {
    /// Allocates `len` bytes on the endpoint, aligned to `2^log_align_req` bytes.
    pub(crate) fn alloc(endpoint: &'static Endpoint, len: usize, log_align_req: u32) -> Result<Dm> {
        if len == 0 {
            return Err(Error::invalid("alloc_dm", Rule::ZeroLength));
        }
        if log_align_req > MAX_LOG_ALIGN {
            return Err(Error::invalid("alloc_dm", Rule::DmAlignment { log_align_req, max: MAX_LOG_ALIGN }));
        }
        let len64 = len as u64;
        if len64 > limits::MAX_DM_SIZE {
            return Err(Error::invalid("alloc_dm", Rule::DmTooLarge { len: len64, max: limits::MAX_DM_SIZE }));
        }
        let reserved = IN_USE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(len64).filter(|&total| total <= limits::MAX_DM_SIZE)
        });
        if reserved.is_err() {
            return Err(Error::Exhausted { what: "device memory (max_dm_size)" });
        }
        // A forked child allocating through its parent's context counts ids from the
        // parent's counter, as its siblings do (docs/device.md, "Fork"): a name taken is
        // skipped, not an error (pyverbs runs five children at once).
        let mut tries = 0;
        let (id, seg) = loop {
            let id = u64::from(endpoint.new_id());
            match Segment::create(&endpoint.dir.join(segment_name(id)), len) {
                Ok(s) => break (id, s),
                Err(Error::Os(e)) if e.raw_os_error() == Some(libc::EEXIST) && tries < 1024 => tries += 1,
                Err(e) => {
                    IN_USE.fetch_sub(len64, Ordering::AcqRel);
                    return Err(e);
                }
            }
        };
        Ok(Dm { inner: Arc::new(DmInner { seg, id, len, mrs: AtomicU32::new(0), freed: AtomicBool::new(false) }) })
    }

    pub(crate) fn inner(&self) -> &Arc<DmInner> {
        &self.inner
    }

    /// The allocation's length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the allocation is empty (never: allocations are at least 1 byte).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The handle `struct ibv_dm` reports (the segment's id, unique on the endpoint).
    pub fn handle(&self) -> u32 {
        self.inner.id as u32
    }

    /// Checks `[offset, offset + len)` for a copy: not freed, inside the allocation
    /// (EFAULT), in 4-byte units (EINVAL), in mlx5's order (the module's rules; a range
    /// that wraps is outside, where mlx5's unchecked sum would wrap). Returns the start
    /// as a `usize`.
    fn check(&self, verb: &'static str, offset: u64, len: usize) -> Result<usize> {
        if self.inner.freed.load(Ordering::Acquire) {
            return Err(Error::invalid(verb, Rule::Closed { what: "device memory" }));
        }
        let (len64, size) = (len as u64, self.inner.len as u64);
        if offset.checked_add(len64).is_none_or(|end| end > size) {
            return Err(Error::OutOfRange { verb, offset, len: len64, size });
        }
        if !offset.is_multiple_of(DM_COPY_UNIT) || !len64.is_multiple_of(DM_COPY_UNIT) {
            return Err(Error::invalid(verb, Rule::DmCopyUnit { offset, len: len64 }));
        }
        Ok(offset as usize)
    }

    /// Copies `data` into the device memory at `offset` (ibv_memcpy_to_dm).
    ///
    /// Errors: `EFAULT` ([`Error::OutOfRange`]) for a range outside the allocation, then
    /// `EINVAL` ([`Rule::DmCopyUnit`]) for an offset or length that is not a multiple of
    /// 4 bytes.
    pub fn copy_to(&self, offset: u64, data: &[u8]) -> Result<()> {
        let start = self.check("memcpy_to_dm", offset, data.len())?;
        // SAFETY: `[start, start + len)` is inside the segment (checked), mapped while
        // `inner` lives; `data` is a slice, not in the segment. Peers may load and store
        // these bytes concurrently (as they may a NIC's device memory): the copy is the
        // device's guarded one, not a Rust reference to shared memory.
        unsafe { crate::mem::copy((self.inner.seg.addr() + start) as *mut u8, data.as_ptr(), data.len()) }
            .map_err(|_| Error::BadAddress { verb: "memcpy_to_dm", addr: data.as_ptr() as u64, len: data.len() as u64 })
    }

    /// Copies device memory at `offset` into `out` (ibv_memcpy_from_dm).
    ///
    /// Errors: as [`Dm::copy_to`].
    pub fn copy_from(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let start = self.check("memcpy_from_dm", offset, out.len())?;
        // SAFETY: as in `copy_to`, the other way.
        unsafe { crate::mem::copy(out.as_mut_ptr(), (self.inner.seg.addr() + start) as *const u8, out.len()) }
            .map_err(|_| Error::BadAddress { verb: "memcpy_from_dm", addr: out.as_ptr() as u64, len: out.len() as u64 })
    }

    /// Frees the device memory (ibv_free_dm(3)); later copies fail.
    ///
    /// Errors: `EBUSY` while a memory region is registered over it.
    pub fn free(&self) -> Result<()> {
        if self.inner.mrs.load(Ordering::Acquire) != 0 {
            return Err(Error::Busy { what: "device memory (a memory region uses it)" });
        }
        self.inner.freed.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`Dm::free`] was called.
    pub fn is_freed(&self) -> bool {
        self.inner.freed.load(Ordering::Acquire)
    }
}
