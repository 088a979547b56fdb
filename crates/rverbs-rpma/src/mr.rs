//! Memory regions: local registrations (`struct rpma_mr_local`) and the remote regions
//! their descriptors describe (`struct rpma_mr_remote`).
//!
//! Descriptor (rpma_mr_get_descriptor(3), docs/rpma-rdmacm.md §1.4): 21 bytes, little-endian,
//! `u64 addr ‖ u64 length ‖ u32 rkey ‖ u8 usage`, the address being the one the remote
//! side puts in its work requests. Like librpma's, the descriptor has no integrity
//! protection: a peer can describe any region; the device still checks every access
//! against the real registration.

use rverbs::{Mr, Sge};

use crate::error::{Error, Result};
use crate::flags::Usage;
use crate::peer::Peer;

/// The size of a memory-region descriptor (rpma_mr_get_descriptor_size(3)).
pub const MR_DESCRIPTOR_SIZE: usize = 21;

fn encode(addr: u64, len: u64, rkey: u32, usage: Usage) -> [u8; MR_DESCRIPTOR_SIZE] {
    let mut d = [0u8; MR_DESCRIPTOR_SIZE];
    d[0..8].copy_from_slice(&addr.to_le_bytes());
    d[8..16].copy_from_slice(&len.to_le_bytes());
    d[16..20].copy_from_slice(&rkey.to_le_bytes());
    d[20] = usage.bits();
    d
}

/// rpma_mr_reg(3)'s argument checks: `Inval` for size 0, usage 0 or unknown usage bits.
fn check_reg(size: usize, usage: Usage) -> Result<()> {
    if size == 0 || usage.is_empty() || usage.bits() & !Usage::all().bits() != 0 {
        return Err(Error::Inval);
    }
    Ok(())
}

/// A registered local memory region (`struct rpma_mr_local`, rpma_mr_reg(3)).
///
/// The memory is either allocated by the registration (page-aligned, zero-filled:
/// [`MrLocal::new`]) or the caller's (rpma_mr_reg(3) proper: [`MrLocal::reg`], `unsafe`,
/// and [`MrLocal::from_static`] over memory that is never freed). Either way the
/// device reads and writes it concurrently with the program, like a NIC;
/// [`MrLocal::read`] and [`MrLocal::write`] copy through the registration. Cloning
/// shares the region.
#[derive(Clone, Debug)]
pub struct MrLocal {
    mr: Mr,
    usage: Usage,
}

impl MrLocal {
    /// Registers `size` bytes for `usage` (rpma_mr_reg(3)), with the access rights
    /// the peer maps the usage to ([`Peer::usage_to_access`]).
    ///
    /// Errors: `Inval` if `size` is 0, `usage` is empty or has unknown bits; `NoMem`
    /// if memory or keys are exhausted; `Provider` if the device refuses.
    pub fn new(peer: &Peer, size: usize, usage: Usage) -> Result<MrLocal> {
        check_reg(size, usage)?;
        let mr = peer.pd().alloc_mr(size, peer.usage_to_access(usage)).map_err(|e| Error::alloc(e.errno()))?;
        Ok(MrLocal { mr, usage })
    }

    /// Registers the caller's `size` bytes at `ptr` for `usage` (rpma_mr_reg(3)), with
    /// the access rights the peer maps the usage to ([`Peer::usage_to_access`]); the region's address
    /// ([`MrLocal::addr`], the descriptor's) is `ptr` itself, as `ibv_reg_mr` gives it.
    ///
    /// Errors: `Inval` if `ptr` is null, `size` is 0, `usage` is empty or has unknown
    /// bits (checked before anything is registered, as librpma does); `NoMem` if keys
    /// are exhausted; `Provider` if the device refuses (e.g. a range that wraps).
    ///
    /// # Safety
    /// As for [`rverbs::Pd::reg_mr`]: `[ptr, ptr + size)` must be valid, writable memory
    /// that stays allocated (not freed, not unmapped, not moved) until the region is
    /// deregistered ([`MrLocal::dereg`]) or its last clone dropped, and every work
    /// request naming it has completed. The device reads and writes the bytes
    /// concurrently with the program; the caller must not hold Rust references to them
    /// across operations that may write them.
    #[allow(unsafe_code)]
    pub unsafe fn reg(peer: &Peer, ptr: *mut u8, size: usize, usage: Usage) -> Result<MrLocal> {
        if ptr.is_null() {
            return Err(Error::Inval);
        }
        check_reg(size, usage)?;
        // SAFETY: forwarded from the caller's contract, which is reg_mr's.
        let mr = unsafe { peer.pd().reg_mr(ptr, size, peer.usage_to_access(usage)) }.map_err(|e| Error::alloc(e.errno()))?;
        Ok(MrLocal { mr, usage })
    }

    /// Registers caller memory that lives for the rest of the program (rpma_mr_reg(3)
    /// over e.g. `Box::leak(vec.into_boxed_slice())` or a `static`): the safe form of
    /// [`MrLocal::reg`], as the memory is never freed and the exclusive borrow is
    /// given to the registration. Its bytes are read and written through
    /// [`MrLocal::read`] and [`MrLocal::write`].
    ///
    /// Errors: those of [`MrLocal::reg`] (`Inval` for an empty slice).
    pub fn from_static(peer: &Peer, mem: &'static mut [u8], usage: Usage) -> Result<MrLocal> {
        #[allow(unsafe_code)]
        // SAFETY: the memory is never freed ('static) and this call takes the only
        // reference to it, so no Rust reference aliases what the device writes.
        unsafe {
            MrLocal::reg(peer, mem.as_mut_ptr(), mem.len(), usage)
        }
    }

    /// The size in bytes (rpma_mr_get_size(3)).
    pub fn size(&self) -> usize {
        self.mr.len()
    }

    /// The usage given at registration.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The address of the region's first byte as work requests name it (`ibv_mr->addr`;
    /// rpma_mr_get_ptr(3) gives the same address as a pointer).
    pub fn addr(&self) -> u64 {
        self.mr.iova()
    }

    /// The verbs registration.
    pub fn as_verbs(&self) -> &Mr {
        &self.mr
    }

    /// The descriptor (rpma_mr_get_descriptor(3)): 21 bytes, little-endian address,
    /// length, rkey and usage.
    pub fn descriptor(&self) -> [u8; MR_DESCRIPTOR_SIZE] {
        encode(self.mr.iova(), self.mr.len() as u64, self.mr.rkey(), self.usage)
    }

    /// The size of the descriptor (rpma_mr_get_descriptor_size(3)): 21.
    pub fn descriptor_size(&self) -> usize {
        MR_DESCRIPTOR_SIZE
    }

    /// Copies `buf.len()` bytes out of the region at `offset`.
    ///
    /// Errors: `Inval` if the range leaves the region.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.mr.read(offset, buf).map_err(|_| Error::Inval)
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// Errors: `Inval` if the range leaves the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.mr.write(offset, data).map_err(|_| Error::Inval)
    }

    /// The bytes `[offset, offset + len)` as a vector.
    ///
    /// Errors: `Inval` if the range leaves the region.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// The scatter/gather entry of `len` bytes at `offset`, as librpma builds it: not
    /// checked here (a range outside the region fails the work request with a local
    /// protection error completion, as on hardware).
    pub(crate) fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        let length = u32::try_from(len).map_err(|_| Error::Inval)?;
        Ok(Sge { addr: self.mr.iova().wrapping_add(offset as u64), length, lkey: self.mr.lkey() })
    }

    /// Deregisters the region (rpma_mr_dereg(3)); work requests still naming it keep it
    /// registered until they complete.
    ///
    /// Errors: `Provider` if ibv_dereg_mr(3) fails.
    pub fn dereg(self) -> Result<()> {
        self.mr.dereg().map_err(Error::from)
    }
}

/// A remote memory region (`struct rpma_mr_remote`): what a descriptor says — address,
/// size, rkey, usage. Pure data: no verbs object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrRemote {
    addr: u64,
    size: u64,
    rkey: u32,
    usage: Usage,
}

impl MrRemote {
    /// The region a descriptor describes (rpma_mr_remote_from_descriptor(3)); bytes past
    /// the 21st are ignored.
    ///
    /// Errors: `Inval` if `desc` is shorter than 21 bytes or its usage byte is 0.
    pub fn from_descriptor(desc: &[u8]) -> Result<MrRemote> {
        if desc.len() < MR_DESCRIPTOR_SIZE {
            return Err(Error::Inval);
        }
        let u64_at = |i: usize| u64::from_le_bytes(desc[i..i + 8].try_into().expect("8 bytes"));
        let usage = Usage::from_bits_retain(desc[20]);
        if usage.is_empty() {
            return Err(Error::Inval);
        }
        Ok(MrRemote {
            addr: u64_at(0),
            size: u64_at(8),
            rkey: u32::from_le_bytes(desc[16..20].try_into().expect("4 bytes")),
            usage,
        })
    }

    /// The size in bytes (rpma_mr_remote_get_size(3)).
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// The remote address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The usage the owner registered the region with.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The flush types the region supports (rpma_mr_remote_get_flush_type(3)): its usage
    /// restricted to FLUSH_TYPE_PERSISTENT and FLUSH_TYPE_VISIBILITY.
    pub fn flush_type(&self) -> Usage {
        self.usage & (Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY)
    }

    /// The descriptor of this region (the one it was made from).
    pub fn descriptor(&self) -> [u8; MR_DESCRIPTOR_SIZE] {
        encode(self.addr, self.size, self.rkey, self.usage)
    }
}
