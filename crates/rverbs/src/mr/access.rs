//! Every access the device makes to registered memory: resolve a key, check PD, bounds
//! and rights, pin the region while bytes move, and move them.
//!
//! Rule: the network can never write outside a registered region. Bytes reach or leave
//! registered memory only through a [`Pinned`] range, and a `Pinned` is only made here,
//! after every check passed (the proof-token pattern of STYLE.md §5).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rverbs_proto::vendor_err;
use rverbs_proto::violation::Violation;

use crate::device::DeviceInner;
use crate::mem;
use crate::mr::keys::KeyTarget;
use crate::mr::{MrInner, Sge};
use crate::pd::PdInner;
use crate::Access;

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

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No live region or window has this key.
    Key,
    /// The region or window belongs to another PD (or a type 2 window to another QP).
    Pd,
    /// The range leaves the region or window.
    Bounds,
    /// The region or window lacks the access right.
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

impl MrInner {
    /// Pins `[va, va+len)` of this region if it is valid, in `pd` (when given), inside
    /// the region and allowed `need`.
    pub(crate) fn pin(
        self: &Arc<Self>,
        pd: Option<&PdInner>,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Pinned, Fault> {
        let d = self.desc.read().expect("mr desc");
        if let Some(pd) = pd {
            if !std::ptr::eq(Arc::as_ptr(&d.pd), pd) {
                return Err(Fault::Pd);
            }
        }
        if !d.access.contains(need) {
            return Err(Fault::Access);
        }
        let off = va.checked_sub(d.iova).ok_or(Fault::Bounds)?;
        let end = off.checked_add(len).ok_or(Fault::Bounds)?;
        if end > d.len as u64 {
            return Err(Fault::Bounds);
        }
        self.busy.fetch_add(1, Ordering::SeqCst);
        if !self.valid.load(Ordering::SeqCst) {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            return Err(Fault::Key);
        }
        Ok(Pinned { mr: self.clone(), ptr: d.addr + off as usize, len: len as usize })
    }
}

/// Resolves a local SGE's range `[va, va+len)` through `lkey` for a QP of `pd` that needs
/// `need` (ibv_post_send(3): local keys name memory regions only).
pub(crate) fn pin_local(
    dev: &DeviceInner,
    pd: &PdInner,
    lkey: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<Pinned, Fault> {
    let mr = dev.keys.mr(lkey).ok_or(Fault::Key)?;
    mr.pin(Some(pd), va, len, need)
}

/// Resolves a remote range through `rkey` (a memory region or a memory window) for the
/// responder QP `qpn`, whose accesses are checked against `pd`.
pub(crate) fn pin_remote(
    dev: &DeviceInner,
    pd: &PdInner,
    qpn: u32,
    rkey: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<Pinned, Fault> {
    match dev.keys.get(rkey).ok_or(Fault::Key)? {
        KeyTarget::Mr(w) => w.upgrade().ok_or(Fault::Key)?.pin(Some(pd), va, len, need),
        KeyTarget::Mw(w) => w.upgrade().ok_or(Fault::Key)?.pin(rkey, pd, qpn, va, len, need),
    }
}

/// Checks `rkey` for the responder QP `qpn` of `pd` and the rights `need`, without a
/// range (a whole-MR FLUSH): a window checks against its own base address.
pub(crate) fn pin_remote_key(
    dev: &DeviceInner,
    pd: &PdInner,
    qpn: u32,
    rkey: u32,
    need: Access,
) -> Result<Pinned, Fault> {
    match dev.keys.get(rkey).ok_or(Fault::Key)? {
        KeyTarget::Mr(w) => {
            let mr = w.upgrade().ok_or(Fault::Key)?;
            let iova = mr.desc.read().expect("mr desc").iova;
            mr.pin(Some(pd), iova, 0, need)
        }
        KeyTarget::Mw(w) => w.upgrade().ok_or(Fault::Key)?.pin_base(rkey, pd, qpn, need),
    }
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
        list.push(pin_local(dev, pd, s.lkey, s.addr, take, access)?);
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
    let mut src_pieces = [(0usize, 0usize); crate::qp::rq::MAX_SGE];
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
        if skip >= d.len {
            skip -= d.len;
            continue;
        }
        let mut d_off = skip;
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

/// Copies a pinned range out into a Rust buffer (at most `dst.len()` bytes).
pub(crate) fn copy_out(p: &Pinned, dst: &mut [u8]) {
    let n = dst.len().min(p.len);
    // SAFETY: `p` pins `[p.ptr, p.ptr + p.len)` of a live registration; `dst` is a
    // distinct Rust buffer of at least `n` bytes.
    unsafe { mem::copy(dst.as_mut_ptr(), p.ptr as *const u8, n) };
}

/// Executes a 64-bit atomic on the 8 pinned bytes of `p` and returns the original value.
pub(crate) fn atomic(p: &Pinned, op: mem::AtomicOp) -> u64 {
    debug_assert!(p.len >= 8 && p.ptr % 8 == 0);
    // SAFETY: `p` pins 8 aligned bytes of a live registration; remote atomics on this
    // device always use this path, so the word is accessed atomically by the device.
    unsafe { mem::atomic_op(p.ptr, op) }
}

/// Makes every store to pinned memory so far globally visible (FLUSH with the global
/// visibility placement type: a full memory barrier).
pub(crate) fn flush_global() {
    std::sync::atomic::fence(Ordering::SeqCst);
}
