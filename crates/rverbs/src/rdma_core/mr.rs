//! Memory regions (ibv_reg_mr(3)): caller memory, or an allocation the region owns.

use core::ffi::c_void;
use std::alloc::Layout;
use std::sync::Arc;

use rverbs_abi::ibv_mr;
use rverbs_proto::verbs::Access;

use super::library::{check, last_errno};
use super::life::Life;
use super::pd::{Pd, PdInner};
use crate::error::{Error, Result};
use crate::mr::Sge;

/// The alignment of the memory [`Pd::alloc_mr`] allocates: a page.
const ALLOC_ALIGN: usize = 4096;

struct MrInner {
    mr: *mut ibv_mr,
    pd: Arc<PdInner>,
    addr: *mut u8,
    len: usize,
    lkey: u32,
    rkey: u32,
    /// The access flags it was registered with.
    access: Access,
    /// The allocation the region owns, freed after deregistration.
    owned: Option<Layout>,
    life: Life,
}

// SAFETY: `mr` and the owned allocation belong to this value; libibverbs' verbs are
// thread-safe; the bytes are only touched through raw copies (see `Mr::read`).
unsafe impl Send for MrInner {}
// SAFETY: as for Send.
unsafe impl Sync for MrInner {}

impl MrInner {
    /// ibv_dereg_mr(3); on success the owned memory is freed and the region stops using
    /// its PD.
    ///
    /// # Safety
    ///
    /// Called once, with no call on the region in progress (under [`Life::destroy`], or
    /// in the last drop).
    unsafe fn dereg_raw(&self) -> Result<()> {
        // SAFETY: `mr` came from ibv_reg_mr_iova2; the caller's contract.
        check(unsafe { (self.pd.ctx.verbs.sym.ibv_dereg_mr)(self.mr) })?;
        if let Some(layout) = self.owned {
            // SAFETY: allocated in `Mr::alloc` with this layout; the device no longer
            // reaches it (ibv_dereg_mr(3) returned success); freed once, as this call
            // succeeds once.
            unsafe { std::alloc::dealloc(self.addr, layout) };
        }
        self.pd.life.detach();
        Ok(())
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if !self.life.is_destroyed() {
            // A region that failed to deregister keeps its owned memory (leaked): the
            // device may still reach it.
            // SAFETY: the last handle is gone; not deregistered yet.
            if let Err(e) = unsafe { self.dereg_raw() } {
                tracing::warn!("rdma_core: ibv_dereg_mr failed: {e}");
            }
        }
    }
}

/// A registered memory region (ibv_reg_mr(3)).
pub struct Mr {
    inner: MrInner,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.inner.addr)
            .field("len", &self.inner.len)
            .field("lkey", &self.inner.lkey)
            .field("rkey", &self.inner.rkey)
            .finish()
    }
}

impl Pd {
    /// Registers `len` bytes at `addr` (ibv_reg_mr(3); called as verbs.h's
    /// `ibv_reg_mr` does for flags that are not a compile-time constant:
    /// `ibv_reg_mr_iova2` with the address as IOVA).
    ///
    /// # Safety
    ///
    /// As the soft [`crate::Pd::reg_mr`]: the memory must stay valid, and be accessed only
    /// as the device may access it, until the region is deregistered (dropped or
    /// [`Mr::dereg`]); the device writes it when `access` allows (LOCAL_WRITE, REMOTE_*).
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller's contract.
        unsafe { Mr::register(self, addr, len, access, None) }
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them (like the soft
    /// [`crate::Pd::alloc_mr`]); the region owns the memory and frees it after
    /// deregistration.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        Mr::alloc(self, len, access)
    }

}

impl Mr {
    /// # Safety
    ///
    /// [`Pd::reg_mr`]'s contract for `addr`/`len`; `owned` is the layout `addr` was
    /// allocated with, when the region is to free it.
    unsafe fn register(pd: &Pd, addr: *mut u8, len: usize, access: Access, owned: Option<Layout>) -> Result<Mr> {
        let p = &pd.inner;
        // The PD stays live until the region is counted as its user.
        let _entered = p.life.enter()?;
        // SAFETY: the PD is live; the caller vouches for the memory.
        let mr = unsafe { (p.ctx.verbs.sym.ibv_reg_mr_iova2)(p.pd, addr.cast::<c_void>(), len, addr as u64, access.bits()) };
        if mr.is_null() {
            return Err(last_errno());
        }
        // SAFETY: ibv_reg_mr_iova2 returned a valid region, whose keys do not change.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        p.life.attach();
        Ok(Mr { inner: MrInner { mr, pd: p.clone(), addr, len, lkey, rkey, access, owned, life: Life::new("memory region") } })
    }

    fn alloc(pd: &Pd, len: usize, access: Access) -> Result<Mr> {
        let layout = Layout::from_size_align(len.max(1), ALLOC_ALIGN).map_err(|_| Error::Exhausted { what: "memory" })?;
        // SAFETY: the layout has a non-zero size.
        let addr = unsafe { std::alloc::alloc_zeroed(layout) };
        if addr.is_null() {
            return Err(Error::Exhausted { what: "memory" });
        }
        // SAFETY: the allocation is this region's alone, valid until `MrInner::dereg`
        // frees it after deregistration.
        let r = unsafe { Mr::register(pd, addr, len, access, Some(layout)) };
        if r.is_err() {
            // SAFETY: allocated above with `layout`, never registered.
            unsafe { std::alloc::dealloc(addr, layout) };
        }
        r
    }

    /// The local key (ibv_reg_mr(3) `lkey`).
    pub fn lkey(&self) -> u32 {
        self.inner.lkey
    }

    /// The remote key (ibv_reg_mr(3) `rkey`).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey
    }

    /// The first byte of the region (also its IOVA).
    pub fn addr(&self) -> *mut u8 {
        self.inner.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The PD the region belongs to.
    pub fn pd(&self) -> Pd {
        Pd { inner: self.inner.pd.clone() }
    }

    fn range(&self, verb: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(Error::OutOfRange { verb, offset: offset as u64, len: len as u64, size: self.inner.len as u64 }),
        }
    }

    /// An SGE of `len` bytes at `offset` (`EFAULT` outside the region).
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        self.range("sge", offset, len as usize)?;
        Ok(Sge { addr: self.inner.addr as u64 + offset as u64, length: len, lkey: self.inner.lkey })
    }

    /// An SGE of the whole region (lengths past `u32::MAX` are cut there).
    pub fn whole(&self) -> Sge {
        Sge { addr: self.inner.addr as u64, length: u32::try_from(self.inner.len).unwrap_or(u32::MAX), lkey: self.inner.lkey }
    }

    /// Copies `buf.len()` bytes at `offset` out of the region. The device may be writing
    /// them (a request in flight): the bytes are then some mix, as on any RDMA device.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.range("read", offset, buf.len())?;
        let _entered = self.inner.life.enter()?;
        // SAFETY: in bounds of the registered memory, valid while the region lives (an
        // owned allocation, or the caller's promise at `reg_mr`); raw copy, no reference
        // to the region's bytes is formed.
        unsafe { std::ptr::copy_nonoverlapping(self.inner.addr.add(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.range("write", offset, data.len())?;
        let _entered = self.inner.life.enter()?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.inner.addr.add(offset), data.len()) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.range("fill", offset, len)?;
        let _entered = self.inner.life.enter()?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::write_bytes(self.inner.addr.add(offset), byte, len) };
        Ok(())
    }

    /// The 8 bytes at `offset` as a native-endian `u64` (an atomic's target or result).
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Deregisters the region now (ibv_dereg_mr(3)) and returns its error; `EINVAL` if
    /// it already is. A handle that shares the region (the public [`crate::Mr`]'s
    /// clones) may deregister it; the others' reads and writes are then `EINVAL`. A
    /// refusal leaves the region usable. Dropping it deregisters too, logging an error.
    /// Owned memory is freed only after a successful deregistration.
    pub fn dereg(&self) -> Result<()> {
        // SAFETY: under the region's exclusive lock, once (Life::destroy).
        self.inner.life.destroy(|| unsafe { self.inner.dereg_raw() })
    }
}

impl crate::mr::native::NativeMr for Mr {
    fn lkey(&self) -> u32 {
        Mr::lkey(self)
    }

    fn rkey(&self) -> u32 {
        Mr::rkey(self)
    }

    fn info(&self) -> crate::mr::MrInfo {
        crate::mr::MrInfo {
            addr: self.inner.addr as usize,
            len: self.inner.len,
            // Registered with ibv_reg_mr_iova2(addr, …, iova = addr).
            iova: self.inner.addr as u64,
            access: self.inner.access,
            key: self.inner.lkey,
            pd_handle: self.pd().handle(),
        }
    }

    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        Mr::read(self, offset, buf)
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        Mr::write(self, offset, data)
    }

    fn read_u64(&self, offset: usize) -> Result<u64> {
        Mr::read_u64(self, offset)
    }

    fn dereg(&self) -> Result<()> {
        Mr::dereg(self)
    }

    fn is_valid(&self) -> bool {
        !self.inner.life.is_destroyed()
    }

    fn pd(&self) -> Arc<dyn crate::mr::native::NativePd> {
        Arc::new(Mr::pd(self))
    }
}
