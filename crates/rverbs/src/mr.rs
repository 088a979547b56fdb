//! Memory regions, their keys, and the checks every device access goes through.
//!
//! Rule: ibv_reg_mr(3): a region is addressed through its lkey/rkey in the IO virtual
//! address space starting at `iova` (the process address unless registered with
//! ibv_reg_mr_iova(3) or ZERO_BASED); local read access is always enabled;
//! REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
//! Rule: the network can never write outside a registered region: every access the
//! device makes is resolved here, checking key, PD, bounds and access rights, and the
//! resolution holds the region alive (and blocks deregistration) while the copy runs.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use rverbs_proto::vendor_err;
use rverbs_proto::violation::Violation;

use crate::device::DeviceInner;
use crate::error::{Error, Result};
use crate::mem;
use crate::pd::{Pd, PdInner};
use crate::sys::SharedMem;
use crate::Access;

/// A scatter/gather entry (`struct ibv_sge`): `length` bytes at IO virtual address
/// `addr` of the region named by `lkey`.
///
/// An `Sge` is plain data: the device checks it when the work request executes, so a
/// wrong one yields an error completion, never a stray access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// IO virtual address of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// What a key names.
#[derive(Clone)]
pub(crate) enum KeyTarget {
    Mr(Weak<MrInner>),
}

struct KeySlot {
    generation: u8,
    target: Option<KeyTarget>,
}

/// The device's table of memory keys: key = index << 8 | generation byte, so a stale
/// key of a freed and reused index does not match (like hardware key tags).
pub(crate) struct KeyTable {
    slots: RwLock<Vec<KeySlot>>,
    free: Mutex<Vec<u32>>,
}

impl KeyTable {
    pub(crate) fn new() -> Self {
        // Index 0 is never handed out, so key 0..=255 never names anything.
        KeyTable {
            slots: RwLock::new(vec![KeySlot { generation: 0, target: None }]),
            free: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn insert(&self, target: KeyTarget) -> Result<u32> {
        let reuse = self.free.lock().expect("key table").pop();
        let mut slots = self.slots.write().expect("key table");
        let index = match reuse {
            Some(i) => i,
            None => {
                if slots.len() as u32 > crate::device::limits::MAX_MR {
                    return Err(Error::Exhausted { what: "memory keys" });
                }
                slots.push(KeySlot { generation: 0, target: None });
                slots.len() as u32 - 1
            }
        };
        let slot = &mut slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.target = Some(target);
        Ok(index << 8 | u32::from(slot.generation))
    }

    pub(crate) fn get(&self, key: u32) -> Option<KeyTarget> {
        let slots = self.slots.read().expect("key table");
        let slot = slots.get((key >> 8) as usize)?;
        if slot.generation != key as u8 {
            return None;
        }
        slot.target.clone()
    }

    pub(crate) fn remove(&self, key: u32) {
        let mut slots = self.slots.write().expect("key table");
        if let Some(slot) = slots.get_mut((key >> 8) as usize) {
            if slot.generation == key as u8 && slot.target.take().is_some() {
                self.free.lock().expect("key table").push(key >> 8);
            }
        }
    }

    /// The region named by `key`, if it is a live memory region.
    pub(crate) fn mr(&self, key: u32) -> Option<Arc<MrInner>> {
        match self.get(key)? {
            KeyTarget::Mr(w) => w.upgrade(),
        }
    }
}

pub(crate) struct MrInit {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) iova: u64,
    pub(crate) access: Access,
}

pub(crate) struct MrInner {
    pub(crate) pd: Arc<PdInner>,
    dev: &'static DeviceInner,
    key: u32,
    addr: usize,
    len: usize,
    iova: u64,
    access: Access,
    /// Library-allocated backing memory, if any.
    _mem: Option<SharedMem>,
    /// False once deregistered: no further access is granted.
    valid: AtomicBool,
    /// Device accesses in progress (deregistration waits for zero).
    busy: AtomicU32,
    released: AtomicBool,
}

impl MrInner {
    /// Stops granting access and waits for accesses in progress to finish; removes the
    /// key. Idempotent.
    fn invalidate(&self) {
        if self.valid.swap(false, Ordering::SeqCst) {
            while self.busy.load(Ordering::SeqCst) != 0 {
                std::thread::yield_now();
            }
            self.dev.keys.remove(self.key);
        }
        if !self.released.swap(true, Ordering::AcqRel) {
            self.pd.release();
        }
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.invalidate();
    }
}

/// Checks of ibv_reg_mr(3) on the access flags.
fn check_access(verb: &'static str, access: Access) -> Result<Access> {
    let raw = access.bits();
    let known = Access::all().bits() & !Access::OPTIONAL_RANGE;
    if raw & !(known | Access::OPTIONAL_RANGE) != 0 {
        return Err(Error::unsupported(verb, "unknown access flags"));
    }
    if access.contains(Access::ON_DEMAND) || access.contains(Access::HUGETLB) {
        return Err(Error::unsupported(verb, "on-demand paging"));
    }
    if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(Error::invalid(verb, "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE"));
    }
    // Optional-range flags (relaxed ordering) are accepted and ignored, as rdma-core does.
    Ok(Access::from_bits_truncate(raw & !Access::OPTIONAL_RANGE))
}

/// A registered memory region (`struct ibv_mr`). Cloning shares the registration;
/// it ends when the last handle and the last work request naming it are gone, or at an
/// explicit [`Mr::dereg`].
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.inner.key)
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .finish()
    }
}

impl Mr {
    pub(crate) fn alloc(pd: Arc<PdInner>, len: usize, access: Access) -> Result<Self> {
        if len == 0 {
            return Err(Error::invalid("alloc_mr", "zero length"));
        }
        if len as u64 > crate::device::limits::MAX_MR_SIZE {
            return Err(Error::Limit {
                verb: "alloc_mr",
                what: "length",
                max: crate::device::limits::MAX_MR_SIZE,
                got: len as u64,
            });
        }
        let mem = SharedMem::new("rverbs-mr", len)?;
        let addr = mem.addr();
        Self::build(pd, MrInit { addr, len, iova: addr as u64, access }, Some(mem))
    }

    pub(crate) fn register(pd: Arc<PdInner>, init: MrInit) -> Result<Self> {
        if init.len == 0 {
            return Err(Error::invalid("reg_mr", "zero length"));
        }
        if init.addr.checked_add(init.len).is_none() {
            return Err(Error::invalid("reg_mr", "the range wraps the address space"));
        }
        if init.len as u64 > crate::device::limits::MAX_MR_SIZE {
            return Err(Error::Limit {
                verb: "reg_mr",
                what: "length",
                max: crate::device::limits::MAX_MR_SIZE,
                got: init.len as u64,
            });
        }
        Self::build(pd, init, None)
    }

    fn build(pd: Arc<PdInner>, mut init: MrInit, mem: Option<SharedMem>) -> Result<Self> {
        init.access = check_access("reg_mr", init.access)?;
        if init.access.contains(Access::ZERO_BASED) {
            init.iova = 0;
        }
        if init.iova.checked_add(init.len as u64).is_none() {
            return Err(Error::invalid("reg_mr", "iova + length wraps"));
        }
        pd.hold()?;
        let dev = pd.ctx.dev;
        let inner = Arc::new_cyclic(|weak: &Weak<MrInner>| {
            let key = dev.keys.insert(KeyTarget::Mr(weak.clone()));
            let valid = key.is_ok();
            MrInner {
                pd: pd.clone(),
                dev,
                key: key.unwrap_or(0),
                addr: init.addr,
                len: init.len,
                iova: init.iova,
                access: init.access,
                _mem: mem,
                valid: AtomicBool::new(valid),
                busy: AtomicU32::new(0),
                released: AtomicBool::new(false),
            }
        });
        if inner.key == 0 {
            return Err(Error::Exhausted { what: "memory keys" });
        }
        Ok(Mr { inner })
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.inner.key
    }

    /// The remote key (equal to the local key on this device).
    pub fn rkey(&self) -> u32 {
        self.inner.key
    }

    /// The process address of the first byte (`ibv_mr.addr`).
    pub fn addr(&self) -> *mut u8 {
        self.inner.addr as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty (never: registration refuses zero lengths).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The IO virtual address of the first byte, which SGEs and remote peers use.
    pub fn iova(&self) -> u64 {
        self.inner.iova
    }

    /// The access rights.
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// The protection domain.
    pub fn pd(&self) -> Pd {
        Pd::from_inner(self.inner.pd.clone())
    }

    /// An SGE for `len` bytes at `offset` into the region.
    ///
    /// Errors: `EINVAL` if the range leaves the region.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        self.check_range("sge", offset, len as usize)?;
        Ok(Sge { addr: self.inner.iova + offset as u64, length: len, lkey: self.inner.key })
    }

    /// An SGE covering the whole region (lengths above 4 GiB are clamped).
    pub fn whole(&self) -> Sge {
        Sge {
            addr: self.inner.iova,
            length: self.inner.len.min(u32::MAX as usize) as u32,
            lkey: self.inner.key,
        }
    }

    fn check_range(&self, verb: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(Error::invalid(verb, "range outside the memory region")),
        }
    }

    /// Copies `buf.len()` bytes out of the region at `offset`.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check_range("read", offset, buf.len())?;
        let _g = self.inner.begin().ok_or(Error::Destroyed { what: "memory region" })?;
        // SAFETY: the range is inside the live registration (checked above; `begin`
        // holds off deregistration) and `buf` is a distinct Rust buffer.
        unsafe { mem::copy(buf.as_mut_ptr(), (self.inner.addr + offset) as *const u8, buf.len()) };
        Ok(())
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range("write", offset, data.len())?;
        let _g = self.inner.begin().ok_or(Error::Destroyed { what: "memory region" })?;
        // SAFETY: as in `read`.
        unsafe { mem::copy((self.inner.addr + offset) as *mut u8, data.as_ptr(), data.len()) };
        Ok(())
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check_range("fill", offset, len)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The 64-bit word at `offset` (8-byte aligned), read atomically.
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        self.check_range("read_u64", offset, 8)?;
        if (self.inner.addr + offset) % 8 != 0 {
            return Err(Error::invalid("read_u64", "offset not 8-byte aligned"));
        }
        let _g = self.inner.begin().ok_or(Error::Destroyed { what: "memory region" })?;
        // SAFETY: aligned, inside the live registration.
        Ok(unsafe { mem::atomic_u64(self.inner.addr + offset) }.load(Ordering::SeqCst))
    }

    /// The region's bytes as a slice.
    ///
    /// # Safety
    /// No device access (a remote write, a receive, a READ response) may write the bytes
    /// while the slice is alive, and the region must not be deregistered.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::slice::from_raw_parts(self.inner.addr as *const u8, self.inner.len) }
    }

    /// The region's bytes as a mutable slice.
    ///
    /// # Safety
    /// As for [`Mr::as_slice`], and no other reference to the bytes may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.inner.addr as *mut u8, self.inner.len) }
    }

    /// Deregisters the region now (ibv_dereg_mr(3)): later accesses through its keys
    /// fail, and the call returns only after accesses in progress finished. Work requests
    /// that still name it complete with an error.
    pub fn dereg(&self) -> Result<()> {
        if !self.inner.valid.load(Ordering::Acquire) {
            return Err(Error::Destroyed { what: "memory region" });
        }
        self.inner.invalidate();
        Ok(())
    }

    /// Whether the registration is still valid.
    pub fn is_valid(&self) -> bool {
        self.inner.valid.load(Ordering::Acquire)
    }
}

/// An access in progress: keeps the region registered and mapped until dropped.
pub(crate) struct Pinned {
    mr: Arc<MrInner>,
    /// Process address of the first byte of the accessed range.
    pub(crate) ptr: usize,
    /// Length of the accessed range.
    pub(crate) len: usize,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.mr.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Guard of an access through the Rust API.
pub(crate) struct Busy<'a>(&'a MrInner);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MrInner {
    fn begin(&self) -> Option<Busy<'_>> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        if self.valid.load(Ordering::SeqCst) {
            Some(Busy(self))
        } else {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            None
        }
    }

    /// Pins `[va, va+len)` of this region if it is valid, in `pd`, inside the
    /// region and allowed `need`.
    fn pin(self: &Arc<Self>, pd: &PdInner, va: u64, len: u64, need: Access) -> Result<Pinned, Fault> {
        if !std::ptr::eq(Arc::as_ptr(&self.pd), pd) {
            return Err(Fault::Pd);
        }
        if !self.access.contains(need) {
            return Err(Fault::Access);
        }
        let off = va.checked_sub(self.iova).ok_or(Fault::Bounds)?;
        let end = off.checked_add(len).ok_or(Fault::Bounds)?;
        if end > self.len as u64 {
            return Err(Fault::Bounds);
        }
        self.busy.fetch_add(1, Ordering::SeqCst);
        if !self.valid.load(Ordering::SeqCst) {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            return Err(Fault::Key);
        }
        Ok(Pinned { mr: self.clone(), ptr: self.addr + off as usize, len: len as usize })
    }
}

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No live region has this key.
    Key,
    /// The region belongs to another PD.
    Pd,
    /// The range leaves the region.
    Bounds,
    /// The region lacks the access right.
    Access,
}

impl Fault {
    /// The responder-side violation for a remote (rkey) access.
    pub(crate) fn remote(self) -> Violation {
        match self {
            Fault::Key => Violation::RkeyUnknown,
            Fault::Pd => Violation::RkeyWrongPd,
            Fault::Bounds => Violation::RkeyBounds,
            Fault::Access => Violation::RkeyAccess,
        }
    }

    /// The `vendor_err` of a local (lkey) access.
    pub(crate) fn local_vendor_err(self) -> u32 {
        match self {
            Fault::Key => vendor_err::LOCAL_LKEY,
            Fault::Pd => vendor_err::LOCAL_PD,
            Fault::Bounds => vendor_err::LOCAL_BOUNDS,
            Fault::Access => vendor_err::LOCAL_ACCESS,
        }
    }
}

/// Resolves `[va, va+len)` through `key` for an access by a QP of `pd` that needs
/// `need`.
pub(crate) fn pin(
    dev: &DeviceInner,
    pd: &PdInner,
    key: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<Pinned, Fault> {
    let mr = dev.keys.mr(key).ok_or(Fault::Key)?;
    mr.pin(pd, va, len, need)
}

/// Copies a pinned range out into a Rust buffer (at most `dst.len()` bytes).
pub(crate) fn copy_out(p: &Pinned, dst: &mut [u8]) {
    let n = dst.len().min(p.len);
    // SAFETY: `p` pins `[p.ptr, p.ptr + p.len)` of a live registration; `dst` is a
    // distinct Rust buffer of at least `n` bytes.
    unsafe { mem::copy(dst.as_mut_ptr(), p.ptr as *const u8, n) };
}

/// Up to `MAX_SGE` pinned ranges: the scatter or gather list of one message.
pub(crate) struct PinList {
    items: [Option<Pinned>; crate::qp::rq::MAX_SGE],
    n: usize,
}

impl PinList {
    pub(crate) fn new() -> Self {
        PinList { items: std::array::from_fn(|_| None), n: 0 }
    }

    pub(crate) fn one(p: Pinned) -> Self {
        let mut l = PinList::new();
        l.push(p);
        l
    }

    fn push(&mut self, p: Pinned) {
        self.items[self.n] = Some(p);
        self.n += 1;
    }

    fn iter(&self) -> impl Iterator<Item = &Pinned> {
        self.items[..self.n].iter().flatten()
    }

}

/// Pins the entries of `sges` needed to cover `need` bytes (zero-length entries are
/// skipped unchecked, as rxe's `copy_data` does), each for `access` in `pd`.
pub(crate) fn pin_sges(
    dev: &DeviceInner,
    pd: &PdInner,
    sges: &[Sge],
    access: Access,
    need: u64,
) -> Result<PinList, Fault> {
    let mut list = PinList::new();
    let mut covered = 0u64;
    for s in sges {
        if covered >= need {
            break;
        }
        if s.length == 0 {
            continue;
        }
        let take = u64::from(s.length).min(need - covered);
        list.push(pin(dev, pd, s.lkey, s.addr, take, access)?);
        covered += take;
    }
    Ok(list)
}

/// Where a message's bytes come from.
pub(crate) enum Source<'a> {
    /// A Rust buffer (inline data, a synthesized header, an atomic result).
    Bytes(&'a [u8]),
    /// Pinned registered memory.
    Pins(&'a PinList),
}

/// Copies `src` into the ranges of `dst`, starting `dst_offset` bytes into them, in
/// message order; returns the bytes copied (limited by the room in `dst`).
pub(crate) fn copy_message(dst: &PinList, dst_offset: usize, src: Source<'_>) -> usize {
    // Flatten both sides into (address, length) pieces and walk them together.
    let mut src_pieces: [(usize, usize); crate::qp::rq::MAX_SGE] = [(0, 0); crate::qp::rq::MAX_SGE];
    let src_n = match src {
        Source::Bytes(b) => {
            src_pieces[0] = (b.as_ptr() as usize, b.len());
            1
        }
        Source::Pins(l) => {
            for (i, p) in l.iter().enumerate() {
                src_pieces[i] = (p.ptr, p.len);
            }
            l.n
        }
    };
    let mut copied = 0;
    let mut skip = dst_offset;
    let (mut si, mut s_off) = (0usize, 0usize);
    for d in dst.iter() {
        let mut d_off = 0;
        if skip >= d.len {
            skip -= d.len;
            continue;
        }
        d_off += skip;
        skip = 0;
        while d_off < d.len && si < src_n {
            let (sp, sl) = src_pieces[si];
            let n = (d.len - d_off).min(sl - s_off);
            // SAFETY: the destination piece lies inside a pinned range of `dst` (kept
            // registered by the `Pinned` guards the caller holds); the source piece lies
            // inside a pinned range or a live Rust slice borrowed for this call.
            unsafe { mem::copy((d.ptr + d_off) as *mut u8, (sp + s_off) as *const u8, n) };
            d_off += n;
            s_off += n;
            copied += n;
            if s_off == sl {
                si += 1;
                s_off = 0;
            }
        }
        if si >= src_n {
            break;
        }
    }
    copied
}

/// Executes a 64-bit atomic on the 8 pinned bytes of `p` and returns the original value.
pub(crate) fn atomic(p: &Pinned, op: mem::AtomicOp) -> u64 {
    debug_assert!(p.len >= 8 && p.ptr % 8 == 0);
    // SAFETY: `p` pins 8 aligned bytes of a live registration; remote atomics on this
    // device always use this path, so the word is accessed atomically by the device.
    unsafe { mem::atomic_op(p.ptr, op) }
}
