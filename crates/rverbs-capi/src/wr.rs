//! The `ibv_qp_ex` work-request builder (`ibv_wr_*`, ibv_wr_post(3); rdma-core
//! `providers/rxe/rxe.c`) over the core's [`rverbs::WrBatch`].
//!
//! The C builder is a sequence of separate calls (`ibv_wr_start`, builders, setters,
//! `ibv_wr_complete`), while the core's batch borrows the QP's send queue for its whole
//! life. So the calls are *recorded* in the QP object ([`Batch`], behind a mutex of its
//! own, never held across a call) and *replayed* into one core batch by `wr_complete`:
//! `wr_start` … `wr_complete` posts everything or nothing, exactly as the core decides.
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
//! `max_send_sge` makes `ibv_wr_complete` fail with `EINVAL` whatever else the batch held
//! (rxe: `ENOSPC` for the list); the core decides every other error.
//! Deviation: `IBV_SEND_INLINE` in `wr_flags` is ignored; inline data comes from
//! `ibv_wr_set_inline_data[_list]` (as the rxe and mlx5 builders do).

use core::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use rverbs::{Access, MwBind, SendFlags, SendOps, Sge};

use crate::abi::*;
use crate::ah::AhObj;
use crate::mr::MrObj;
use crate::mw::MwObj;
use crate::qp::QpObj;

/// The `send_ops_flags` rdma-core 44 defines (`IBV_QP_EX_WITH_*`, bits 0–10 and 12; bit 11
/// is FLUSH from v45 on, whose builder slot a v44 `ibv_qp_ex` does not have).
pub(crate) const V44_SEND_OPS: u64 =
    (((IBV_QP_EX_WITH_TSO << 1) - 1) | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

/// One opcode builder call.
enum Build {
    Send,
    SendImm(u32),
    SendInv(u32),
    RdmaWrite {
        rkey: u32,
        addr: u64,
    },
    RdmaWriteImm {
        rkey: u32,
        addr: u64,
        imm: u32,
    },
    RdmaRead {
        rkey: u32,
        addr: u64,
    },
    CmpSwp {
        rkey: u32,
        addr: u64,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        rkey: u32,
        addr: u64,
        add: u64,
    },
    AtomicWrite {
        rkey: u32,
        addr: u64,
        value: [u8; 8],
    },
    LocalInv(u32),
    BindMw {
        mw: rverbs::Mw,
        rkey: u32,
        mr: Option<rverbs::Mr>,
        addr: u64,
        length: u64,
        access: Access,
    },
}

/// One recorded call.
enum Op {
    Build {
        wr_id: u64,
        flags: SendFlags,
        build: Build,
    },
    Sge {
        lkey: u32,
        addr: u64,
        length: u32,
    },
    /// `sges[start..start + len]`.
    SgeList {
        start: usize,
        len: usize,
    },
    /// `inline[start..start + len]` (a list is concatenated at the call).
    Inline {
        start: usize,
        len: usize,
    },
    UdAddr {
        ah: rverbs::Ah,
        remote_qpn: u32,
        remote_qkey: u32,
    },
    XrcSrqn(u32),
}

/// The calls since `ibv_wr_start`, kept in the QP object between C calls.
#[derive(Default)]
pub(crate) struct Batch {
    open: bool,
    ops: Vec<Op>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    /// The first error found by this library itself (an unusable pointer argument, an
    /// SGE list longer than the queue takes); see the module's Deviation.
    refused: Option<c_int>,
}

impl Batch {
    fn reset(&mut self, open: bool) {
        self.open = open;
        self.ops.clear();
        self.sges.clear();
        self.inline.clear();
        self.refused = None;
    }

    /// Latches an error found by this library (the first one wins).
    fn refuse(&mut self, err: c_int) {
        self.refused.get_or_insert(err);
    }
}

/// The QP's batch, also after a panic of an earlier holder (the batch is plain data).
fn lock(qp: &QpObj) -> MutexGuard<'_, Batch> {
    qp.batch().lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the QP behind `qpx` and its batch (ignored for a foreign pointer or
/// outside `wr_start` … `wr_complete`).
///
/// # Safety
/// `qpx` is a live `ibv_qp_ex` of this library (C contract of the `ibv_wr_*` calls).
unsafe fn with_batch(qpx: *mut ibv_qp_ex, f: impl FnOnce(&QpObj, &mut Batch)) {
    // SAFETY: caller contract; the ibv_qp_ex is the first field of the QP object.
    let Some(qp) = (unsafe { QpObj::from_raw(qpx.cast()) }) else {
        return;
    };
    let mut b = lock(qp);
    if b.open {
        f(qp, &mut b);
    }
}

/// Records an opcode builder, latching `qpx->wr_id` and `qpx->wr_flags` now.
///
/// # Safety
/// As [`with_batch`].
unsafe fn build(qpx: *mut ibv_qp_ex, build: Result<Build, ()>) {
    // SAFETY: caller contract: qpx points to a live ibv_qp_ex; the application wrote
    // wr_id / wr_flags before this call (ibv_wr_post(3)).
    let (wr_id, flags) = unsafe { ((*qpx).wr_id, (*qpx).wr_flags) };
    let flags = SendFlags::from_bits_truncate(flags) - SendFlags::INLINE;
    // SAFETY: forwarded.
    unsafe {
        with_batch(qpx, |_, b| match build {
            Ok(build) => b.ops.push(Op::Build {
                wr_id,
                flags,
                build,
            }),
            Err(()) => b.refuse(libc::EINVAL),
        })
    }
}

macro_rules! builder {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $build:expr) => {
        $(#[$m])*
        unsafe extern "C" fn $name(qpx: *mut ibv_qp_ex, $($arg: $ty),*) {
            ffi_guard!(void, {
                // SAFETY: C contract of the ibv_wr_* call.
                unsafe { build(qpx, Ok($build)) }
            })
        }
    };
}

builder!(/// `ibv_wr_send`.
    fn wr_send() => Build::Send);
builder!(/// `ibv_wr_send_imm` (`imm_data` is big-endian, carried verbatim).
    fn wr_send_imm(imm: u32) => Build::SendImm(imm));
builder!(/// `ibv_wr_send_inv`.
    fn wr_send_inv(rkey: u32) => Build::SendInv(rkey));
builder!(/// `ibv_wr_rdma_write`.
    fn wr_rdma_write(rkey: u32, addr: u64) => Build::RdmaWrite { rkey, addr });
builder!(/// `ibv_wr_rdma_write_imm`.
    fn wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) => Build::RdmaWriteImm { rkey, addr, imm });
builder!(/// `ibv_wr_rdma_read`.
    fn wr_rdma_read(rkey: u32, addr: u64) => Build::RdmaRead { rkey, addr });
builder!(/// `ibv_wr_atomic_cmp_swp`.
    fn wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) =>
        Build::CmpSwp { rkey, addr, compare, swap });
builder!(/// `ibv_wr_atomic_fetch_add`.
    fn wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) => Build::FetchAdd { rkey, addr, add });
builder!(/// `ibv_wr_local_inv`.
    fn wr_local_inv(rkey: u32) => Build::LocalInv(rkey));

/// `ibv_wr_atomic_write`: the 8 bytes at `value` are copied now.
unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    value: *const c_void,
) {
    ffi_guard!(void, {
        let b = if value.is_null() {
            Err(())
        } else {
            // SAFETY: C contract: `value` points to 8 readable bytes (any alignment).
            let value = unsafe { value.cast::<[u8; 8]>().read_unaligned() };
            Ok(Build::AtomicWrite { rkey, addr, value })
        };
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe { build(qpx, b) }
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
        let b = match unsafe { (MwObj::from_raw(mw), info.as_ref()) } {
            (Some(mw), Some(info)) => {
                let mr = if info.mr.is_null() {
                    Ok(None)
                } else {
                    // SAFETY: C contract: a live MR of ours.
                    unsafe { MrObj::from_raw(info.mr) }
                        .map(|m| Some(m.core().clone()))
                        .ok_or(())
                };
                mr.map(|mr| Build::BindMw {
                    mw: mw.core().clone(),
                    rkey,
                    mr,
                    addr: info.addr,
                    length: info.length,
                    access: Access::from_bits_retain(info.mw_access_flags),
                })
            }
            _ => Err(()),
        };
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe { build(qpx, b) }
    })
}

/// `ibv_wr_set_sge`.
unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe { with_batch(qpx, |_, b| b.ops.push(Op::Sge { lkey, addr, length })) }
    })
}

/// `ibv_wr_set_sge_list`: the list is copied now.
///
/// Rule: rxe checks `num_sge` against the queue's `max_send_sge` before reading the list,
/// so a wild count is refused without reading past the caller's array (the core refuses
/// such a list too, with `EINVAL`).
unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num_sge: usize, list: *const ibv_sge) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |qp, b| {
                if num_sge > qp.core().cap().max_send_sge as usize
                    || (num_sge != 0 && list.is_null())
                {
                    b.refuse(libc::EINVAL);
                    return;
                }
                let start = b.sges.len();
                if num_sge != 0 {
                    // SAFETY: C contract: `list` holds num_sge entries; ibv_sge and Sge have
                    // the same layout (asserted in qp.rs).
                    let src = core::slice::from_raw_parts(list.cast::<Sge>(), num_sge);
                    b.sges.extend_from_slice(src);
                }
                b.ops.push(Op::SgeList {
                    start,
                    len: num_sge,
                });
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
                if num_buf != 0 && list.is_null() {
                    b.refuse(libc::EINVAL);
                    return;
                }
                let start = b.inline.len();
                let pieces = if num_buf == 0 {
                    &[][..]
                } else {
                    // SAFETY: C contract: `list` holds num_buf entries.
                    core::slice::from_raw_parts(list, num_buf)
                };
                for p in pieces {
                    if p.length == 0 {
                        continue;
                    }
                    if p.addr.is_null() {
                        b.refuse(libc::EINVAL);
                        return;
                    }
                    // SAFETY: C contract: each piece names `length` readable bytes.
                    b.inline.extend_from_slice(core::slice::from_raw_parts(
                        p.addr.cast::<u8>(),
                        p.length,
                    ));
                }
                b.ops.push(Op::Inline {
                    start,
                    len: b.inline.len() - start,
                });
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
        let ah = unsafe { AhObj::from_raw(ah) }.map(|a| a.core().clone());
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe {
            with_batch(qpx, |_, b| match ah {
                Some(ah) => b.ops.push(Op::UdAddr {
                    ah,
                    remote_qpn,
                    remote_qkey,
                }),
                None => b.refuse(libc::EINVAL),
            })
        }
    })
}

/// `ibv_wr_set_xrc_srqn`.
unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut ibv_qp_ex, remote_srqn: u32) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        unsafe { with_batch(qpx, |_, b| b.ops.push(Op::XrcSrqn(remote_srqn))) }
    })
}

/// `ibv_wr_start`: opens a batch (a batch left open is discarded).
unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        if let Some(qp) = unsafe { QpObj::from_raw(qpx.cast()) } {
            lock(qp).reset(true);
        }
    })
}

/// `ibv_wr_abort`: discards the batch; nothing was posted.
unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    ffi_guard!(void, {
        // SAFETY: C contract of the ibv_wr_* call.
        if let Some(qp) = unsafe { QpObj::from_raw(qpx.cast()) } {
            lock(qp).reset(false);
        }
    })
}

/// `ibv_wr_complete`: posts the batch through one core batch. Returns 0 or the first
/// error (nothing posted); `EINVAL` without `ibv_wr_start` or for a foreign pointer.
unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: C contract of the ibv_wr_* call.
        let Some(qp) = (unsafe { QpObj::from_raw(qpx.cast()) }) else {
            return libc::EINVAL;
        };
        let mut b = lock(qp);
        let refused = if b.open {
            b.refused
        } else {
            Some(libc::EINVAL)
        };
        if let Some(e) = refused {
            b.reset(false);
            return e;
        }
        let ret = replay(qp.core(), &b);
        b.reset(false);
        ret
    })
}

/// Builds and completes one core batch from the recorded calls.
fn replay(qp: &rverbs::Qp, b: &Batch) -> c_int {
    let mut w = match qp.wr_start() {
        Ok(w) => w,
        Err(e) => return e.errno(),
    };
    for op in &b.ops {
        match op {
            Op::Build {
                wr_id,
                flags,
                build,
            } => {
                let (id, f) = (*wr_id, *flags);
                match build {
                    Build::Send => w.send(id, f),
                    Build::SendImm(imm) => w.send_imm(id, f, *imm),
                    Build::SendInv(rkey) => w.send_inv(id, f, *rkey),
                    Build::RdmaWrite { rkey, addr } => w.rdma_write(id, f, *rkey, *addr),
                    Build::RdmaWriteImm { rkey, addr, imm } => {
                        w.rdma_write_imm(id, f, *rkey, *addr, *imm)
                    }
                    Build::RdmaRead { rkey, addr } => w.rdma_read(id, f, *rkey, *addr),
                    Build::CmpSwp {
                        rkey,
                        addr,
                        compare,
                        swap,
                    } => w.atomic_cmp_swp(id, f, *rkey, *addr, *compare, *swap),
                    Build::FetchAdd { rkey, addr, add } => {
                        w.atomic_fetch_add(id, f, *rkey, *addr, *add)
                    }
                    Build::AtomicWrite { rkey, addr, value } => {
                        w.atomic_write(id, f, *rkey, *addr, *value)
                    }
                    Build::LocalInv(rkey) => w.local_inv(id, f, *rkey),
                    Build::BindMw {
                        mw,
                        rkey,
                        mr,
                        addr,
                        length,
                        access,
                    } => {
                        let bind = MwBind {
                            mr: mr.as_ref(),
                            addr: *addr,
                            length: *length,
                            access: *access,
                        };
                        w.bind_mw(id, f, mw, *rkey, &bind)
                    }
                };
            }
            Op::Sge { lkey, addr, length } => {
                w.set_sge(*lkey, *addr, *length);
            }
            Op::SgeList { start, len } => {
                w.set_sge_list(&b.sges[*start..*start + *len]);
            }
            Op::Inline { start, len } => {
                w.set_inline_data(&b.inline[*start..*start + *len]);
            }
            Op::UdAddr {
                ah,
                remote_qpn,
                remote_qkey,
            } => {
                w.set_ud_addr(ah, *remote_qpn, *remote_qkey);
            }
            Op::XrcSrqn(n) => {
                w.set_xrc_srqn(*n);
            }
        }
    }
    match w.complete() {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
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

/// A fresh, closed batch for a new QP.
pub(crate) fn new_batch() -> Mutex<Batch> {
    Mutex::new(Batch::default())
}
