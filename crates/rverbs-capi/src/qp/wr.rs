//! The `ibv_qp_ex` work-request builder (`ibv_wr_*`, ibv_wr_post(3); rdma-core
//! `providers/rxe/rxe.c`) over the core's owned batch, [`rverbs::SendBatch`].
//!
//! Each C call is one core call on the QP object's [`rverbs::WrSlot`]: `ibv_wr_start` is
//! [`rverbs::WrSlot::start`], each builder and setter the batch method of the same name
//! ([`rverbs::WrSlot::with`]), `ibv_wr_complete` [`rverbs::WrSlot::complete`],
//! `ibv_wr_abort` [`rverbs::WrSlot::abort`]. Between the calls the open batch is kept in
//! the slot, whose lock is never held across a call.
//!
//! Rule: each opcode builder starts a new work request with `qpx->wr_id` and
//! `qpx->wr_flags` as they are at that call (ibv_wr_post(3)); setters apply to the
//! last one; data (SGE lists, inline bytes, the 8 bytes of `ibv_wr_atomic_write`) is
//! copied at the call.
//! Rule: `ibv_wr_complete` returns 0 or the first error (positive errno) and then nothing
//! of the batch is posted; `ibv_wr_abort` discards the batch.
//! Rule: only the opcode builders named in `send_ops_flags` are set (rxe
//! `set_qp_send_ops`); `wr_start`, `wr_complete`, `wr_abort` and every setter always are.
//! Deviation: a NULL or foreign object pointer given to a builder or setter (a window, a
//! region, an AH; rxe dereferences such pointers) or an SGE list longer than
//! `max_send_sge` is given to the batch as an `EINVAL` error ([`rverbs::SendBatch::fail`]),
//! so `ibv_wr_complete` fails (rxe: `ENOSPC` for the list); the core decides every other
//! error.
//! Deviation: `IBV_SEND_INLINE` in `wr_flags` is ignored; inline data comes from
//! `ibv_wr_set_inline_data[_list]` (as the rxe and mlx5 builders do).

use core::ffi::{c_int, c_void};

use rverbs::{Access, Error, MwBind, SendBatch, SendFlags, SendOps, Sge, WrSlot};

use crate::ffi::ToErrno;
use crate::abi::*;
use crate::ah::AhObj;
use crate::mr::MrObj;
use crate::mw::MwObj;
use crate::qp::QpObj;

/// The `send_ops_flags` rdma-core 44 defines (`IBV_QP_EX_WITH_*`, bits 0–10 and 12; bit 11
/// is FLUSH from v45 on, whose builder slot a v44 `ibv_qp_ex` does not have).
pub(crate) const V44_SEND_OPS: u64 =
    (((IBV_QP_EX_WITH_TSO << 1) - 1) | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

/// The error a pointer argument this library cannot use gives the batch (see the
/// module's Deviation).
fn unusable(what: &'static str) -> Error {
    Error::Invalid { verb: "ibv_wr_*", rule: rverbs::Rule::UnusablePointer { what } }
}

/// Runs `f` on the batch open on the QP behind `qpx` and its QP (ignored for a foreign
/// pointer or outside `wr_start` … `wr_complete`).
///
/// # Safety
/// `qpx` is a live `ibv_qp_ex` of this library (C contract of the `ibv_wr_*` calls).
unsafe fn with_batch(qpx: *mut ibv_qp_ex, f: impl FnOnce(&QpObj, &mut SendBatch)) {
    // SAFETY: caller contract; the ibv_qp_ex is the first field of the QP object.
    let Some(qp) = (unsafe { QpObj::from_raw(qpx.cast()) }) else {
        return;
    };
    qp.batch().with(|b| f(qp, b));
}

/// The send flags of a builder's request from `qpx->wr_flags`: the known ones, less
/// `IBV_SEND_INLINE` (see the module's Deviation).
pub(crate) fn builder_flags(wr_flags: u32) -> SendFlags {
    SendFlags::from_bits_truncate(wr_flags) - SendFlags::INLINE
}

/// The value `ibv_wr_atomic_write` copies: the 8 bytes at `value`, `None` for NULL.
///
/// # Safety
/// A non-NULL `value` points to 8 readable bytes (any alignment; C contract).
pub(crate) unsafe fn atomic_write_value(value: *const c_void) -> Option<[u8; 8]> {
    // SAFETY: function contract.
    (!value.is_null()).then(|| unsafe { value.cast::<[u8; 8]>().read_unaligned() })
}

/// The list `ibv_wr_set_sge_list` copies, or `None` (refused before reading it: rxe
/// checks `num_sge` against the queue's `max_send_sge` first) for a count above
/// `max_send_sge` or a NULL list with entries.
///
/// # Safety
/// A non-NULL `list` holds `num_sge` entries when `num_sge <= max_send_sge` (C contract).
pub(crate) unsafe fn sge_list_arg<'a>(num_sge: usize, list: *const ibv_sge, max_send_sge: usize) -> Option<&'a [Sge]> {
    if num_sge > max_send_sge || (num_sge != 0 && list.is_null()) {
        return None;
    }
    if num_sge == 0 {
        return Some(&[]);
    }
    // SAFETY: function contract; ibv_sge and Sge have the same layout (asserted in qp.rs).
    Some(unsafe { core::slice::from_raw_parts(list.cast::<Sge>(), num_sge) })
}

/// The pieces `ibv_wr_set_inline_data_list` reads, or why they are refused: a NULL list
/// with entries, or a piece with bytes at NULL.
///
/// # Safety
/// A non-NULL `list` holds `num_buf` entries (C contract).
pub(crate) unsafe fn inline_list_arg<'a>(num_buf: usize, list: *const ibv_data_buf) -> Result<&'a [ibv_data_buf], &'static str> {
    if num_buf != 0 && list.is_null() {
        return Err("inline data list is NULL");
    }
    let bufs = if num_buf == 0 {
        &[][..]
    } else {
        // SAFETY: function contract.
        unsafe { core::slice::from_raw_parts(list, num_buf) }
    };
    if bufs.iter().any(|p| p.length != 0 && p.addr.is_null()) {
        return Err("inline data piece is NULL");
    }
    Ok(bufs)
}

/// The bytes of `ibv_wr_set_inline_data_list`'s pieces, concatenated (the fuzz harness;
/// the builder hands the pieces to the batch without copying them here).
///
/// # Safety
/// As [`inline_list_arg`]; each piece names `length` readable bytes.
#[cfg(feature = "fuzzing")]
pub(crate) unsafe fn inline_data(num_buf: usize, list: *const ibv_data_buf) -> Result<Vec<u8>, &'static str> {
    // SAFETY: function contract.
    let bufs = unsafe { inline_list_arg(num_buf, list) }?;
    // SAFETY: function contract (NULL pieces with bytes were refused).
    Ok(bufs.iter().flat_map(|p| unsafe { inline_piece(p) }).copied().collect())
}

/// Runs an opcode builder with `qpx->wr_id` and `qpx->wr_flags` as they are now.
///
/// # Safety
/// As [`with_batch`].
unsafe fn build(qpx: *mut ibv_qp_ex, f: impl FnOnce(&mut SendBatch, u64, SendFlags)) {
    // SAFETY: caller contract: qpx points to a live ibv_qp_ex; the application wrote
    // wr_id / wr_flags before this call (ibv_wr_post(3)).
    let (wr_id, flags) = unsafe { ((*qpx).wr_id, (*qpx).wr_flags) };
    let flags = builder_flags(flags);
    // SAFETY: forwarded.
    unsafe { with_batch(qpx, |_, b| f(b, wr_id, flags)) }
}

macro_rules! builder {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $method:ident) => {
        $(#[$m])*
        unsafe extern "C" fn $name(qpx: *mut ibv_qp_ex, $($arg: $ty),*) {
            ffi_guard!(void, {
                // SAFETY: C contract of the ibv_wr_* call.
                unsafe { build(qpx, |b, id, f| { b.$method(id, f, $($arg),*); }) }
            })
        }
    };
}

builder!(/// `ibv_wr_send`.
    fn wr_send() => send);
builder!(/// `ibv_wr_send_imm` (`imm_data` is big-endian, carried verbatim).
    fn wr_send_imm(imm: u32) => send_imm);
builder!(/// `ibv_wr_send_inv`.
    fn wr_send_inv(rkey: u32) => send_inv);
builder!(/// `ibv_wr_rdma_write`.
    fn wr_rdma_write(rkey: u32, addr: u64) => rdma_write);
builder!(/// `ibv_wr_rdma_write_imm`.
    fn wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) => rdma_write_imm);
builder!(/// `ibv_wr_rdma_read`.
    fn wr_rdma_read(rkey: u32, addr: u64) => rdma_read);
builder!(/// `ibv_wr_atomic_cmp_swp`.
    fn wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) => atomic_cmp_swp);
builder!(/// `ibv_wr_atomic_fetch_add`.
    fn wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) => atomic_fetch_add);
builder!(/// `ibv_wr_local_inv`.
    fn wr_local_inv(rkey: u32) => local_inv);

/// `ibv_wr_atomic_write`: the 8 bytes at `value` are copied now.
unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    value: *const c_void,
) {
    ffi_guard!(void, {
        // SAFETY: C contract: a non-NULL `value` points to 8 readable bytes.
        let value = unsafe { atomic_write_value(value) };
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            build(qpx, |b, id, f| match value {
                Some(v) => {
                    b.atomic_write(id, f, rkey, addr, v);
                }
                None => b.fail(unusable("atomic write value is NULL")),
            })
        }
    })
}

/// `ibv_wr_bind_mw` (type 2 windows): the window, the region and the bind are taken now.
unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    ffi_guard!(void, {
        // SAFETY: C contract: mw and info are live objects of ours / readable.
        let (mw, info) = unsafe { (MwObj::from_raw(mw), info.as_ref()) };
        let mr = match info {
            Some(i) if !i.mr.is_null() => {
                // SAFETY: C contract: a live MR of ours.
                unsafe { MrObj::from_raw(i.mr) }.map(|m| Some(m.core()))
            }
            _ => Some(None),
        };
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            build(qpx, |b, id, f| match (mw, info, mr) {
                (Some(mw), Some(info), Some(mr)) => {
                    let bind = MwBind {
                        mr,
                        addr: info.addr,
                        length: info.length,
                        access: Access::from_bits_retain(info.mw_access_flags),
                    };
                    b.bind_mw(id, f, mw.core(), rkey, &bind);
                }
                _ => b.fail(unusable("bind_mw: NULL or foreign window, region or bind info")),
            })
        }
    })
}

/// `ibv_wr_set_sge`.
unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |_, b| {
                b.set_sge(lkey, addr, length);
            })
        }
    })
}

/// `ibv_wr_set_sge_list`: the list is copied now.
///
/// Rule: rxe checks `num_sge` against the queue's `max_send_sge` before reading the list,
/// so a wild count is refused without reading past the caller's array.
unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num_sge: usize, list: *const ibv_sge) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |qp, b| {
                // SAFETY: C contract: `list` holds num_sge entries.
                match sge_list_arg(num_sge, list, qp.core().cap().max_send_sge as usize) {
                    Some(sges) => {
                        b.set_sge_list(sges);
                    }
                    None => b.fail(unusable("sge list: NULL or longer than max_send_sge")),
                }
            })
        }
    })
}

/// `ibv_wr_set_inline_data`: the bytes are copied now.
unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: forwarded C contract (one piece).
    unsafe { wr_set_inline_data_list(qpx, 1, &buf) }
}

/// The bytes of one `ibv_data_buf` (none when empty).
///
/// # Safety
/// A non-empty piece names `length` readable bytes at a non-NULL `addr` (C contract of
/// `ibv_wr_set_inline_data_list`; NULL is checked by the caller).
unsafe fn inline_piece(p: &ibv_data_buf) -> &[u8] {
    if p.length == 0 {
        &[]
    } else {
        // SAFETY: function contract.
        unsafe { core::slice::from_raw_parts(p.addr.cast::<u8>(), p.length) }
    }
}

/// The pieces `ibv_wr_set_inline_data_list` gathers without allocating.
const INLINE_PIECES: usize = 16;

/// `ibv_wr_set_inline_data_list`: the pieces are concatenated and copied now.
unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    num_buf: usize,
    list: *const ibv_data_buf,
) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |_, b| {
                // SAFETY: C contract: `list` holds num_buf entries.
                let bufs = match inline_list_arg(num_buf, list) {
                    Ok(bufs) => bufs,
                    Err(why) => {
                        b.fail(unusable(why));
                        return;
                    }
                };
                // C contract: each piece names `length` readable bytes, non-NULL when not
                // empty (checked above), as inline_piece requires.
                if bufs.len() <= INLINE_PIECES {
                    let mut pieces: [&[u8]; INLINE_PIECES] = [&[]; INLINE_PIECES];
                    for (d, p) in pieces.iter_mut().zip(bufs) {
                        *d = inline_piece(p);
                    }
                    b.set_inline_data_list(&pieces[..bufs.len()]);
                } else {
                    let pieces: Vec<&[u8]> = bufs.iter().map(|p| inline_piece(p)).collect();
                    b.set_inline_data_list(&pieces);
                }
            })
        }
    })
}

/// `ibv_wr_set_ud_addr`.
unsafe extern "C" fn wr_set_ud_addr(
    qpx: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    ffi_guard!(void, {
        // SAFETY: C contract: the AH is a live object of ours.
        let ah = unsafe { AhObj::from_raw(ah) };
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |_, b| match ah {
                Some(ah) => {
                    b.set_ud_addr(ah.core(), remote_qpn, remote_qkey);
                }
                None => b.fail(unusable("set_ud_addr: NULL or foreign AH")),
            })
        }
    })
}

/// `ibv_wr_set_xrc_srqn`.
unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut ibv_qp_ex, remote_srqn: u32) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |_, b| {
                b.set_xrc_srqn(remote_srqn);
            })
        }
    })
}

/// `ibv_wr_start`: opens a batch (a batch left open is discarded). On a QP the core
/// refuses a batch (no `send_ops_flags`) none is open and `ibv_wr_complete` says `EINVAL`.
unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        if let Some(qp) = unsafe { QpObj::from_raw(qpx.cast()) } {
            // A QP without send_ops has no builder table; nothing opens then, and its
            // ibv_wr_complete is EINVAL.
            let _ = qp.batch().start(qp.core());
        }
    })
}

/// `ibv_wr_abort`: discards the batch; nothing was posted.
unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        if let Some(qp) = unsafe { QpObj::from_raw(qpx.cast()) } {
            qp.batch().abort();
        }
    })
}

/// `ibv_wr_complete`: posts the batch. Returns 0 or the first error (nothing posted);
/// `EINVAL` without an open batch or for a foreign pointer.
unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: C contract of the ibv_wr_* call.
        let Some(qp) = (unsafe { QpObj::from_raw(qpx.cast()) }) else {
            return libc::EINVAL;
        };
        match qp.batch().complete() {
            Some(Ok(())) => 0,
            Some(Err(e)) => e.c_errno(),
            None => libc::EINVAL,
        }
    })
}

/// Fills the builder table of a QP created with `send_ops` (rxe `set_qp_send_ops`).
pub(crate) fn fill(q: &mut ibv_qp_ex, ops: SendOps) {
    let has = |o: SendOps| ops.contains(o);
    if has(SendOps::ATOMIC_CMP_AND_SWP) {
        q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    }
    if has(SendOps::ATOMIC_FETCH_AND_ADD) {
        q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    }
    if has(SendOps::BIND_MW) {
        q.wr_bind_mw = Some(wr_bind_mw);
    }
    if has(SendOps::LOCAL_INV) {
        q.wr_local_inv = Some(wr_local_inv);
    }
    if has(SendOps::ATOMIC_WRITE) {
        q.wr_atomic_write = Some(wr_atomic_write);
    }
    if has(SendOps::RDMA_READ) {
        q.wr_rdma_read = Some(wr_rdma_read);
    }
    if has(SendOps::RDMA_WRITE) {
        q.wr_rdma_write = Some(wr_rdma_write);
    }
    if has(SendOps::RDMA_WRITE_WITH_IMM) {
        q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    }
    if has(SendOps::SEND) {
        q.wr_send = Some(wr_send);
    }
    if has(SendOps::SEND_WITH_IMM) {
        q.wr_send_imm = Some(wr_send_imm);
    }
    if has(SendOps::SEND_WITH_INV) {
        q.wr_send_inv = Some(wr_send_inv);
    }
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
}

/// A fresh, closed batch slot for a new QP.
pub(crate) fn new_batch() -> WrSlot {
    WrSlot::default()
}
