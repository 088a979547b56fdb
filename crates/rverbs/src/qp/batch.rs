//! The work-request builder: batch posting in the `ibv_qp_ex` / `ibv_wr_*` model
//! (ibv_wr_post(3)).
//!
//! Rule: [`Qp::wr_start`] opens a batch (a per-QP critical section); each builder
//! (`send`, `rdma_write`, …) starts one work request with the `wr_id` and flags given to
//! it; setters (`set_sge`, `set_inline_data`, `set_ud_addr`, `set_xrc_srqn`, …) complete
//! the last one. [`WrBatch::complete`] posts the whole batch; [`WrBatch::abort`] (or
//! dropping the batch) discards it.
//! Rule: the first error is latched, later builders and setters do nothing, `complete`
//! returns the error and nothing of the batch is posted.
//! Rule: the operations a QP may build are chosen at creation (`send_ops_flags`); asking
//! for one the QP type does not support is EOPNOTSUPP at creation.

use crate::spin::SpinGuard;

use bitflags::bitflags;
use rverbs_proto::verbs::{QpState, QpType, SendFlags, WrOpcode};

use crate::ah::Ah;
use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::mr::{Mr, Sge};
use crate::mw::{Mw, MwBind};
use crate::qp::sq::SendQueue;
use crate::qp::wr::{BindMwWr, FlushWr, Payload, SendWr, UdDest};
use crate::qp::Qp;
use crate::Access;

bitflags! {
    /// The operations a QP's builder may post (`enum ibv_qp_create_send_ops_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendOps: u64 {
        /// RDMA WRITE.
        const RDMA_WRITE = 1;
        /// RDMA WRITE with immediate.
        const RDMA_WRITE_WITH_IMM = 1 << 1;
        /// SEND.
        const SEND = 1 << 2;
        /// SEND with immediate.
        const SEND_WITH_IMM = 1 << 3;
        /// RDMA READ.
        const RDMA_READ = 1 << 4;
        /// Atomic compare-and-swap.
        const ATOMIC_CMP_AND_SWP = 1 << 5;
        /// Atomic fetch-and-add.
        const ATOMIC_FETCH_AND_ADD = 1 << 6;
        /// Local invalidate.
        const LOCAL_INV = 1 << 7;
        /// Memory-window bind.
        const BIND_MW = 1 << 8;
        /// SEND with invalidate.
        const SEND_WITH_INV = 1 << 9;
        /// TCP segmentation offload (not supported).
        const TSO = 1 << 10;
        /// FLUSH (rdma-core ≥ 45 value).
        const FLUSH = 1 << 11;
        /// ATOMIC_WRITE.
        const ATOMIC_WRITE = 1 << 12;
    }
}

impl SendOps {
    /// The operations a QP type supports (rxe's per-type sets, rdma-core
    /// `providers/rxe/rxe.c` `check_qp_init_attr`; XRC initiators as RC).
    pub fn allowed_on(qp_type: QpType) -> SendOps {
        match qp_type {
            QpType::Rc | QpType::XrcSend => SendOps::all() - SendOps::TSO,
            QpType::Uc => {
                SendOps::RDMA_WRITE
                    | SendOps::RDMA_WRITE_WITH_IMM
                    | SendOps::SEND
                    | SendOps::SEND_WITH_IMM
                    | SendOps::BIND_MW
                    | SendOps::SEND_WITH_INV
            }
            QpType::Ud => SendOps::SEND | SendOps::SEND_WITH_IMM,
            _ => SendOps::empty(),
        }
    }

    fn of(op: WrOpcode) -> SendOps {
        match op {
            WrOpcode::RdmaWrite => SendOps::RDMA_WRITE,
            WrOpcode::RdmaWriteWithImm => SendOps::RDMA_WRITE_WITH_IMM,
            WrOpcode::Send => SendOps::SEND,
            WrOpcode::SendWithImm => SendOps::SEND_WITH_IMM,
            WrOpcode::RdmaRead => SendOps::RDMA_READ,
            WrOpcode::AtomicCmpAndSwp => SendOps::ATOMIC_CMP_AND_SWP,
            WrOpcode::AtomicFetchAndAdd => SendOps::ATOMIC_FETCH_AND_ADD,
            WrOpcode::LocalInv => SendOps::LOCAL_INV,
            WrOpcode::BindMw => SendOps::BIND_MW,
            WrOpcode::SendWithInv => SendOps::SEND_WITH_INV,
            WrOpcode::Tso => SendOps::TSO,
            WrOpcode::Flush => SendOps::FLUSH,
            WrOpcode::AtomicWrite => SendOps::ATOMIC_WRITE,
            WrOpcode::Driver1 => SendOps::empty(),
        }
    }
}

const MAX_SGE: usize = limits::MAX_SGE as usize;
const MAX_INLINE: usize = limits::MAX_INLINE_DATA as usize;

/// The work request being built, owning its data until it is pushed.
struct Pending {
    wr_id: u64,
    opcode: WrOpcode,
    flags: SendFlags,
    imm: u32,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    ud: Option<(Ah, u32, u32)>,
    bind: Option<(Mw, u32, Option<Mr>, u64, u64, Access)>,
    flush: Option<FlushWr>,
    xrc_srqn: u32,
    sges: [Sge; MAX_SGE],
    num_sge: usize,
    inline: Option<usize>,
}

/// A batch of work requests under construction (`ibv_wr_start` … `ibv_wr_complete`).
pub struct WrBatch<'q> {
    qp: &'q Qp,
    sq: SpinGuard<'q, SendQueue>,
    /// Work requests queued before the batch started.
    mark: usize,
    error: Option<Error>,
    cur: Option<Box<Pending>>,
    inline: Box<[u8; MAX_INLINE]>,
}

impl std::fmt::Debug for WrBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrBatch").field("error", &self.error).finish_non_exhaustive()
    }
}

impl Qp {
    /// Opens a batch (ibv_wr_start(3)).
    ///
    /// Errors: `EINVAL` if the QP was created without `send_ops`.
    pub fn wr_start(&self) -> Result<WrBatch<'_>> {
        if self.inner().send_ops.is_none() {
            return Err(Error::invalid("wr_start", Rule::NoSendOps));
        }
        let sq = self.inner().sq.lock();
        let mark = sq.len();
        Ok(WrBatch { qp: self, sq, mark, error: None, cur: None, inline: Box::new([0; MAX_INLINE]) })
    }
}

impl WrBatch<'_> {
    fn latch(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Pushes the work request being built into the send queue.
    fn push_current(&mut self) {
        let Some(p) = self.cur.take() else { return };
        if self.error.is_some() {
            return;
        }
        let q = self.qp.inner();
        let inline_bytes = p.inline.map(|n| &self.inline[..n]);
        let payload = match inline_bytes {
            Some(b) => Payload::Inline(b),
            None => Payload::Sge(&p.sges[..p.num_sge]),
        };
        let (mw_holder, mr_holder);
        let bind = match &p.bind {
            Some((mw, rkey, mr, addr, length, access)) => {
                mw_holder = mw;
                mr_holder = mr.as_ref();
                Some(BindMwWr {
                    mw: mw_holder,
                    rkey: *rkey,
                    bind: MwBind { mr: mr_holder, addr: *addr, length: *length, access: *access },
                })
            }
            None => None,
        };
        let wr = SendWr {
            wr_id: p.wr_id,
            opcode: p.opcode,
            flags: p.flags | if inline_bytes.is_some() { SendFlags::INLINE } else { SendFlags::empty() },
            payload,
            imm_data: p.imm,
            remote_addr: p.remote_addr,
            rkey: p.rkey,
            compare_add: p.compare_add,
            swap: p.swap,
            ud: p.ud.as_ref().map(|(ah, qpn, qkey)| UdDest { ah, remote_qpn: *qpn, remote_qkey: *qkey }),
            bind,
            flush: p.flush,
            xrc_remote_srqn: p.xrc_srqn,
        };
        let dev = q.pd.ctx.dev;
        if let Err(e) = self.sq.push(dev, &q.pd, q.qp_type, &wr, true) {
            // rxe's builders report every lack of room as ENOSPC (`providers/rxe/rxe.c`).
            let e = match e {
                Error::QueueFull { .. } => Error::NoSpace { verb: "wr_*", why: "send queue full" },
                Error::TooManySge { .. } => Error::NoSpace { verb: "wr_set_sge_list", why: "more SGEs than max_send_sge" },
                Error::Limit { what: "inline data", .. } => {
                    Error::NoSpace { verb: "wr_set_inline_data", why: "more than max_inline_data" }
                }
                e => e,
            };
            self.latch(e);
        }
    }

    fn begin(&mut self, wr_id: u64, flags: SendFlags, opcode: WrOpcode) -> Option<&mut Pending> {
        self.push_current();
        if self.error.is_some() {
            return None;
        }
        let allowed = self.qp.inner().send_ops.unwrap_or_default();
        if !allowed.contains(SendOps::of(opcode)) {
            self.latch(Error::invalid("wr_*", Rule::OpNotInSendOps));
            return None;
        }
        self.cur = Some(Box::new(Pending {
            wr_id,
            opcode,
            flags,
            imm: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            bind: None,
            flush: None,
            xrc_srqn: 0,
            sges: [Sge::default(); MAX_SGE],
            num_sge: 0,
            inline: None,
        }));
        self.cur.as_deref_mut()
    }

    /// SEND (ibv_wr_send).
    pub fn send(&mut self, wr_id: u64, flags: SendFlags) -> &mut Self {
        self.begin(wr_id, flags, WrOpcode::Send);
        self
    }

    /// SEND with immediate (ibv_wr_send_imm).
    pub fn send_imm(&mut self, wr_id: u64, flags: SendFlags, imm: u32) -> &mut Self {
        if let Some(p) = self.begin(wr_id, flags, WrOpcode::SendWithImm) {
            p.imm = imm;
        }
        self
    }

    /// SEND with invalidate of the peer's `rkey` (ibv_wr_send_inv).
    pub fn send_inv(&mut self, wr_id: u64, flags: SendFlags, rkey: u32) -> &mut Self {
        if let Some(p) = self.begin(wr_id, flags, WrOpcode::SendWithInv) {
            p.imm = rkey;
        }
        self
    }

    fn remote(&mut self, wr_id: u64, flags: SendFlags, op: WrOpcode, rkey: u32, addr: u64) -> Option<&mut Pending> {
        let p = self.begin(wr_id, flags, op)?;
        p.rkey = rkey;
        p.remote_addr = addr;
        Some(p)
    }

    /// RDMA WRITE (ibv_wr_rdma_write).
    pub fn rdma_write(&mut self, wr_id: u64, flags: SendFlags, rkey: u32, addr: u64) -> &mut Self {
        self.remote(wr_id, flags, WrOpcode::RdmaWrite, rkey, addr);
        self
    }

    /// RDMA WRITE with immediate (ibv_wr_rdma_write_imm).
    pub fn rdma_write_imm(&mut self, wr_id: u64, flags: SendFlags, rkey: u32, addr: u64, imm: u32) -> &mut Self {
        if let Some(p) = self.remote(wr_id, flags, WrOpcode::RdmaWriteWithImm, rkey, addr) {
            p.imm = imm;
        }
        self
    }

    /// RDMA READ (ibv_wr_rdma_read).
    pub fn rdma_read(&mut self, wr_id: u64, flags: SendFlags, rkey: u32, addr: u64) -> &mut Self {
        self.remote(wr_id, flags, WrOpcode::RdmaRead, rkey, addr);
        self
    }

    /// Atomic compare-and-swap (ibv_wr_atomic_cmp_swp).
    pub fn atomic_cmp_swp(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        rkey: u32,
        addr: u64,
        compare: u64,
        swap: u64,
    ) -> &mut Self {
        if let Some(p) = self.remote(wr_id, flags, WrOpcode::AtomicCmpAndSwp, rkey, addr) {
            p.compare_add = compare;
            p.swap = swap;
        }
        self
    }

    /// Atomic fetch-and-add (ibv_wr_atomic_fetch_add).
    pub fn atomic_fetch_add(&mut self, wr_id: u64, flags: SendFlags, rkey: u32, addr: u64, add: u64) -> &mut Self {
        if let Some(p) = self.remote(wr_id, flags, WrOpcode::AtomicFetchAndAdd, rkey, addr) {
            p.compare_add = add;
        }
        self
    }

    /// ATOMIC_WRITE of 8 bytes stored verbatim (ibv_wr_atomic_write).
    pub fn atomic_write(&mut self, wr_id: u64, flags: SendFlags, rkey: u32, addr: u64, value: [u8; 8]) -> &mut Self {
        if let Some(p) = self.remote(wr_id, flags, WrOpcode::AtomicWrite, rkey, addr) {
            p.swap = u64::from_ne_bytes(value);
        }
        self
    }

    /// FLUSH (ibv_wr_flush, rdma-core ≥ 45).
    pub fn flush(&mut self, wr_id: u64, flags: SendFlags, rkey: u32, addr: u64, flush: FlushWr) -> &mut Self {
        if let Some(p) = self.remote(wr_id, flags, WrOpcode::Flush, rkey, addr) {
            p.flush = Some(flush);
        }
        self
    }

    /// LOCAL_INV (ibv_wr_local_inv).
    pub fn local_inv(&mut self, wr_id: u64, flags: SendFlags, rkey: u32) -> &mut Self {
        if let Some(p) = self.begin(wr_id, flags, WrOpcode::LocalInv) {
            p.imm = rkey;
        }
        self
    }

    /// BIND_MW of a type 2 window (ibv_wr_bind_mw).
    pub fn bind_mw(&mut self, wr_id: u64, flags: SendFlags, mw: &Mw, rkey: u32, bind: &MwBind<'_>) -> &mut Self {
        if let Some(p) = self.begin(wr_id, flags, WrOpcode::BindMw) {
            p.bind = Some((mw.clone(), rkey, bind.mr.cloned(), bind.addr, bind.length, bind.access));
        }
        self
    }

    fn current(&mut self) -> Option<&mut Pending> {
        if self.error.is_some() {
            return None;
        }
        if self.cur.is_none() {
            self.latch(Error::invalid("wr_set_*", Rule::NoWrToSet));
        }
        self.cur.as_deref_mut()
    }

    /// One scatter/gather entry (ibv_wr_set_sge); length 0 leaves none.
    pub fn set_sge(&mut self, lkey: u32, addr: u64, length: u32) -> &mut Self {
        if let Some(p) = self.current() {
            p.num_sge = usize::from(length != 0);
            p.sges[0] = Sge { addr, length, lkey };
            p.inline = None;
        }
        self
    }

    /// A scatter/gather list (ibv_wr_set_sge_list).
    pub fn set_sge_list(&mut self, sges: &[Sge]) -> &mut Self {
        if sges.len() > MAX_SGE {
            self.latch(Error::NoSpace { verb: "wr_set_sge_list", why: "more SGEs than max_send_sge" });
            return self;
        }
        if let Some(p) = self.current() {
            p.sges[..sges.len()].copy_from_slice(sges);
            p.num_sge = sges.len();
            p.inline = None;
        }
        self
    }

    /// Inline data copied now (ibv_wr_set_inline_data).
    pub fn set_inline_data(&mut self, data: &[u8]) -> &mut Self {
        self.set_inline_data_list(&[data])
    }

    /// Several inline pieces, concatenated (ibv_wr_set_inline_data_list).
    pub fn set_inline_data_list(&mut self, list: &[&[u8]]) -> &mut Self {
        let total: usize = list.iter().map(|b| b.len()).sum();
        if total > MAX_INLINE {
            self.latch(Error::NoSpace { verb: "wr_set_inline_data", why: "more than max_inline_data" });
            return self;
        }
        if self.current().is_none() {
            return self;
        }
        let mut off = 0;
        for b in list {
            self.inline[off..off + b.len()].copy_from_slice(b);
            off += b.len();
        }
        if let Some(p) = self.cur.as_deref_mut() {
            p.inline = Some(off);
            p.num_sge = 0;
        }
        self
    }

    /// The UD destination (ibv_wr_set_ud_addr).
    pub fn set_ud_addr(&mut self, ah: &Ah, remote_qpn: u32, remote_qkey: u32) -> &mut Self {
        if let Some(p) = self.current() {
            p.ud = Some((ah.clone(), remote_qpn, remote_qkey));
        }
        self
    }

    /// The SRQ at the XRC target (ibv_wr_set_xrc_srqn).
    pub fn set_xrc_srqn(&mut self, remote_srqn: u32) -> &mut Self {
        if let Some(p) = self.current() {
            p.xrc_srqn = remote_srqn;
        }
        self
    }

    /// Posts the batch (ibv_wr_complete(3)).
    ///
    /// Errors: the first error of the batch (nothing is posted then); `EINVAL` if the QP
    /// is in RESET, INIT or RTR.
    pub fn complete(mut self) -> Result<()> {
        self.push_current();
        let q = self.qp.inner().clone();
        let state = q.state();
        if self.error.is_none() && matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            self.latch(Error::QpStateForbids { verb: "wr_complete", state });
        }
        if let Some(e) = self.error.take() {
            self.sq.truncate(self.mark);
            return Err(e);
        }
        q.progress(&mut self.sq);
        drop(self);
        q.kick();
        Ok(())
    }

    /// Discards the batch (ibv_wr_abort(3)); dropping it does the same.
    pub fn abort(self) {}
}

impl Drop for WrBatch<'_> {
    fn drop(&mut self) {
        // An aborted (or never completed) batch leaves nothing behind. After `complete`
        // the mark equals the queue length minus what progress already retired, so
        // nothing is removed.
        if self.error.is_some() || self.cur.is_some() {
            let mark = self.mark;
            self.sq.truncate(mark);
        }
    }
}
