//! The work-request builder: batch posting in the `ibv_qp_ex` / `ibv_wr_*` model
//! (ibv_wr_post(3)).
//!
//! Rule: [`Qp::start_batch`] opens a batch ([`SendBatch`], owned, holding no lock while
//! it is filled: ibv_wr_start); each builder (`send`, `rdma_write`, …) starts one work
//! request with the `wr_id` and flags given to it; setters (`set_sge`,
//! `set_inline_data`, `set_ud_addr`, `set_xrc_srqn`, …) complete the last one.
//! [`SendBatch::complete`] validates and posts the whole batch under the send queue's
//! lock (ibv_wr_complete); [`SendBatch::abort`] (or dropping the batch) discards it
//! (ibv_wr_abort). Batches of `post_send` and of this builder interleave only between
//! batches, never inside one: a batch enters the send queue in one piece.
//! Rule: ibv_wr_post(3), RETURN VALUE: the builders report no error; the first error is
//! latched, later builders and setters do nothing, `complete` returns the error and
//! "the entire posting will be aborted": nothing of the batch is posted.
//! Rule: the operations a QP may build are chosen at creation (`send_ops_flags`); asking
//! for one the QP type does not support is EOPNOTSUPP at creation.
//!
//! [`Qp::wr_start`] returns the same batch as a guard borrowing the QP ([`WrBatch`]).


use bitflags::bitflags;
use rverbs_proto::verbs::{QpState, QpType, SendFlags, WrOpcode};

use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::mr::{Mr, Sge};
use crate::mw::{Mw, MwBind};
use crate::rings::qp_attr::AddressVector;
use crate::qp::send::SendQueue;
use crate::rings::wr::{BindMwWr, FlushWr, Payload, SendWr, UdDest};
use crate::qp::{Qp, QpInner};
use rverbs_proto::verbs::Access;

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

/// A work request being built; its scatter list, inline bytes and the arguments only a
/// few opcodes have (a UD destination, a window bind) live in the batch's shared buffers
/// ([`BatchBuf`]). It holds no handle, so emptying a batch drops nothing but the binds,
/// and it is small enough to be written in place by each builder.
#[derive(Clone, Copy)]
struct Pending {
    wr_id: u64,
    remote_addr: u64,
    compare_add: u64,
    swap: u64,
    opcode: WrOpcode,
    flags: SendFlags,
    imm: u32,
    rkey: u32,
    xrc_srqn: u32,
    /// `BatchBuf::sges[sge_start..sge_start + num_sge]`.
    sge_start: u32,
    num_sge: u32,
    /// `BatchBuf::inline[start..start + len]` when the data is inline.
    inline: Option<(u32, u32)>,
    /// `BatchBuf::uds[i]`: the UD destination (`ibv_wr_set_ud_addr`).
    ud: Option<u32>,
    /// `BatchBuf::binds[i]`: a BIND_MW's window and arguments.
    bind: Option<u32>,
    flush: Option<FlushWr>,
}

/// What a BIND_MW work request binds: the window, its new R_Key, the region, the range
/// and the access.
type BindArgs = (Mw, u32, Option<Mr>, u64, u64, Access);

/// The storage of a batch: its work requests, their scatter lists and inline bytes, and
/// the UD destinations and window binds some of them name. A QP keeps the buffer of its
/// last batch for the next one, so a steady stream of batches allocates nothing.
#[derive(Default)]
pub(crate) struct BatchBuf {
    wrs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    uds: Vec<(AddressVector, u32, u32)>,
    binds: Vec<BindArgs>,
}

impl BatchBuf {
    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.uds.clear();
        // Skipped when empty, as it almost always is: its drop glue's call costs a few
        // instructions on every `ibv_wr_complete`.
        if !self.binds.is_empty() {
            self.binds.clear();
        }
    }
}

/// A batch of work requests under construction, owned by the caller
/// (`ibv_wr_start` … `ibv_wr_complete` / `ibv_wr_abort`).
///
/// Rule: ibv_wr_post(3): nothing is executed before `complete` returns success;
/// `abort` (or dropping the batch) discards everything prepared since the start.
/// The batch holds no lock while it is filled; `complete` takes the send queue once.
#[must_use = "a batch posts nothing until complete()"]
pub struct SendBatch {
    /// The soft QP (the work-request builder is the soft device's: `start_batch` on a QP
    /// of the rdma-core backend is EOPNOTSUPP).
    q: std::sync::Arc<QpInner>,
    buf: BatchBuf,
    /// The first error and how many work requests were closed before it (their own
    /// errors, found when `complete` pushes them, come first).
    error: Option<(usize, Error)>,
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("wrs", &self.buf.wrs.len())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Qp {
    /// Opens a batch owned by the caller (ibv_wr_start(3)).
    ///
    /// Rule: ibv_wr_post(3): only a QP created with `send_ops_flags` builds work requests.
    /// Errors: `EINVAL` if the QP was created without `send_ops`.
    pub fn start_batch(&self) -> Result<SendBatch> {
        let q = self.inner()?;
        if q.send_ops.is_none() {
            return Err(Error::invalid("wr_start", Rule::NoSendOps));
        }
        let buf = std::mem::take(&mut *q.batch_spare.lock());
        Ok(SendBatch { q: q.clone(), buf, error: None })
    }

    /// Opens a batch as a guard borrowing the QP (ibv_wr_start(3)); see [`SendBatch`].
    ///
    /// Errors: `EINVAL` if the QP was created without `send_ops`.
    pub fn wr_start(&self) -> Result<WrBatch<'_>> {
        Ok(WrBatch { batch: self.start_batch()?, _qp: std::marker::PhantomData })
    }
}

impl SendBatch {
    /// Latches `e` as the batch's error unless one came first; `closed` work requests
    /// precede it.
    fn latch(&mut self, closed: usize, e: Error) {
        if self.error.is_none() {
            self.error = Some((closed, e));
        }
    }

    /// Records an error found by the caller while translating a builder's or setter's
    /// arguments (a binding that could not read an argument); `complete` reports the
    /// first error of the batch and posts nothing.
    ///
    /// Rule: ibv_wr_post(3), RETURN VALUE: builders and setters report nothing; the
    /// failure comes from `complete`.
    pub fn fail(&mut self, error: Error) {
        // Like a setter's error: the last work request is still open.
        let closed = self.buf.wrs.len().saturating_sub(1);
        self.latch(closed, error);
    }

    fn begin(&mut self, wr_id: u64, flags: SendFlags, opcode: WrOpcode) -> Option<&mut Pending> {
        if self.error.is_some() {
            return None;
        }
        let allowed = self.q.send_ops.unwrap_or_default();
        if !allowed.contains(SendOps::of(opcode)) {
            let closed = self.buf.wrs.len();
            self.latch(closed, Error::invalid("wr_*", Rule::OpNotInSendOps));
            return None;
        }
        // A batch of more requests than the send queue holds can never be posted
        // (`complete` would refuse it with ENOSPC, as rxe's builders report any lack of
        // room): refused here, so a batch holds at most `max_send_wr` requests, their
        // entries and inline bytes within the device limits, and u32 positions fit.
        if self.buf.wrs.len() >= self.q.cap.max_send_wr as usize {
            let closed = self.buf.wrs.len();
            self.latch(closed, Error::NoSpace { verb: "wr_*", why: "send queue full" });
            return None;
        }
        let sge_start = self.buf.sges.len() as u32;
        self.buf.wrs.push(Pending {
            wr_id,
            remote_addr: 0,
            compare_add: 0,
            swap: 0,
            opcode,
            flags,
            imm: 0,
            rkey: 0,
            xrc_srqn: 0,
            sge_start,
            num_sge: 0,
            inline: None,
            ud: None,
            bind: None,
            flush: None,
        });
        self.buf.wrs.last_mut()
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
        let at = self.buf.binds.len() as u32;
        if let Some(p) = self.begin(wr_id, flags, WrOpcode::BindMw) {
            p.bind = Some(at);
            self.buf.binds.push((mw.clone(), rkey, bind.mr.cloned(), bind.addr, bind.length, bind.access));
        }
        self
    }

    /// The work request the setters complete (the last one begun).
    fn current(&mut self) -> Option<&mut Pending> {
        if self.error.is_some() {
            return None;
        }
        if self.buf.wrs.is_empty() {
            self.latch(0, Error::invalid("wr_set_*", Rule::NoWrToSet));
        }
        self.buf.wrs.last_mut()
    }

    /// Replaces the current work request's data by the scatter list `sges`.
    fn put_sges(&mut self, sges: &[Sge]) {
        let Some(p) = self.current() else { return };
        let start = p.sge_start as usize;
        p.num_sge = sges.len() as u32;
        let inline = p.inline.take();
        // The current work request is the last: its entries and bytes end the buffers.
        if let Some((at, _)) = inline {
            self.buf.inline.truncate(at as usize);
        }
        self.buf.sges.truncate(start);
        self.buf.sges.extend_from_slice(sges);
    }

    /// One scatter/gather entry (ibv_wr_set_sge); length 0 leaves none.
    pub fn set_sge(&mut self, lkey: u32, addr: u64, length: u32) -> &mut Self {
        let sge = [Sge { addr, length, lkey }];
        self.put_sges(&sge[..usize::from(length != 0)]);
        self
    }

    /// A scatter/gather list (ibv_wr_set_sge_list).
    ///
    /// Errors (at `complete`): ENOSPC for more entries than the device's `max_sge`
    /// (rxe's builders report every lack of room so).
    pub fn set_sge_list(&mut self, sges: &[Sge]) -> &mut Self {
        if sges.len() > MAX_SGE {
            let closed = self.buf.wrs.len().saturating_sub(1);
            self.latch(closed, Error::NoSpace { verb: "wr_set_sge_list", why: "more SGEs than max_send_sge" });
            return self;
        }
        self.put_sges(sges);
        self
    }

    /// Inline data copied now (ibv_wr_set_inline_data).
    pub fn set_inline_data(&mut self, data: &[u8]) -> &mut Self {
        self.set_inline_data_list(&[data])
    }

    /// Several inline pieces, concatenated (ibv_wr_set_inline_data_list).
    ///
    /// Errors (at `complete`): ENOSPC for more than `max_inline_data` bytes.
    pub fn set_inline_data_list(&mut self, list: &[&[u8]]) -> &mut Self {
        let total: usize = list.iter().map(|b| b.len()).sum();
        if total > MAX_INLINE {
            let closed = self.buf.wrs.len().saturating_sub(1);
            self.latch(closed, Error::NoSpace { verb: "wr_set_inline_data", why: "more than max_inline_data" });
            return self;
        }
        let end = self.buf.inline.len() as u32;
        let Some(p) = self.current() else { return self };
        let start = p.sge_start as usize;
        p.num_sge = 0;
        let at = match p.inline {
            Some((at, _)) => at,
            None => end,
        };
        p.inline = Some((at, total as u32));
        // The current work request is the last: its bytes (and entries) end the buffers.
        self.buf.sges.truncate(start);
        self.buf.inline.truncate(at as usize);
        for b in list {
            self.buf.inline.extend_from_slice(b);
        }
        self
    }

    /// The UD destination (ibv_wr_set_ud_addr): the address handle (`&Ah`, or its
    /// address vector), the destination QP and its Q_Key.
    pub fn set_ud_addr<'a>(&mut self, ah: impl Into<&'a AddressVector>, remote_qpn: u32, remote_qkey: u32) -> &mut Self {
        let at = self.buf.uds.len() as u32;
        if let Some(p) = self.current() {
            let dest = (*ah.into(), remote_qpn, remote_qkey);
            match p.ud {
                // The current request is the last, so its destination ends the list: a
                // second call replaces it.
                Some(i) => self.buf.uds[i as usize] = dest,
                None => {
                    p.ud = Some(at);
                    self.buf.uds.push(dest);
                }
            }
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

    /// Validates and posts the batch (ibv_wr_complete(3)).
    ///
    /// Rule: ibv_wr_post(3), RETURN VALUE: on failure "the entire posting will be
    /// aborted": no work request of the batch is posted, also those before the failing
    /// one.
    /// Errors: the first error of the batch, in the order of the calls (a work request
    /// the send queue refuses — ENOSPC when it is full —, an operation outside
    /// `send_ops`, a setter without a work request, an error given to [`SendBatch::fail`]);
    /// then `EINVAL` if the QP is in RESET, INIT or RTR.
    pub fn complete(mut self) -> Result<()> {
        self.complete_and_keep()
    }

    /// As [`SendBatch::complete`], keeping the batch, emptied, for the next one on the same
    /// QP ([`SendBatch::restart`]): a caller that posts batch after batch (the C builder's
    /// [`WrSlot`]) neither gives the buffers back nor takes them again.
    ///
    /// Errors: as [`SendBatch::complete`].
    pub fn complete_and_keep(&mut self) -> Result<()> {
        let result = self.post();
        self.restart();
        result
    }

    /// Empties the batch, as a new [`Qp::start_batch`] on its QP would give it
    /// (ibv_wr_start(3) after ibv_wr_complete or ibv_wr_abort): what it held is discarded,
    /// the latched error with it.
    pub fn restart(&mut self) {
        self.buf.clear();
        self.error = None;
    }

    fn post(&mut self) -> Result<()> {
        let (latched, error) = match self.error.take() {
            Some((closed, e)) => (closed, Some(e)),
            None => (self.buf.wrs.len(), None),
        };
        if crate::sanitizer::on() {
            return self.post_sanitized(latched, error);
        }
        self.post_plain(latched, error)
    }

    /// [`SendBatch::complete`] with the sanitizer on (docs/sanitizer.md): as
    /// `Qp::post_send_sanitized`, the batch's requests are checked and recorded before
    /// they are pushed, and forgotten if the batch fails (it then posts nothing).
    #[cold]
    #[inline(never)]
    fn post_sanitized(&mut self, latched: usize, error: Option<Error>) -> Result<()> {
        use crate::sanitizer::Queue;
        let q: &QpInner = &self.q;
        let state = q.state();
        if error.is_none() && latched > 0 && matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            crate::sanitizer::bad_state_post("ibv_wr_complete", Queue::Send, q.sanitizer_id(), state, Some(self.buf.wrs[0].wr_id));
            return self.post_plain(latched, error);
        }
        if latched == 0 {
            return self.post_plain(latched, error);
        }
        crate::sanitizer::send_posting(q.sanitizer_id(), q.cap.max_send_wr);
        let wrs: Vec<SendWr<'_>> = self.buf.wrs[..latched].iter().map(|p| wr_of(&self.buf, p)).collect();
        let ticket = crate::rings::wr::track_sends(q.endpoint, q.qpn, q.sq_sig_all, &wrs);
        drop(wrs);
        let (qpn, result) = (q.sanitizer_id(), self.post_plain(latched, error));
        if result.is_err() {
            crate::sanitizer::unposted(Queue::Send, qpn, ticket, 0);
        }
        result
    }

    fn post_plain(&mut self, latched: usize, error: Option<Error>) -> Result<()> {
        if latched == 1 && error.is_none() && self.express_one() {
            return Ok(());
        }
        let q: &QpInner = &self.q;
        let mut sq = q.sq.lock();
        let mark = sq.len();
        let mut error = match push_all(&mut sq, q, &self.buf, latched) {
            Err(e) => Some(e),
            Ok(()) => error,
        };
        if error.is_none() {
            let state = q.state();
            if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
                error = Some(Error::QpStateForbids { verb: "wr_complete", state });
            }
        }
        if let Some(e) = error {
            sq.truncate(mark);
            return Err(e);
        }
        let q = &self.q;
        q.progress_and_release(sq, true);
        let wr_ids = self.buf.wrs[..latched].iter().map(|p| Some(p.wr_id));
        q.raise_injected(rverbs_proto::verb_fault::Verb::PostSend, wr_ids);
        Ok(())
    }

    /// The express lane (docs/queue-pairs.md, "The express lane") for a batch of one
    /// request, as `ibv_post_send` takes it: RTS, no fault plan, no sanitizer, and the
    /// lane's own conditions ([`QpInner::express`]). A batch of more requests is posted
    /// whole or not at all (ibv_wr_post(3)), which requests executed one by one inside
    /// the call could not honour, so it takes the queued way. Whether the request is done.
    fn express_one(&self) -> bool {
        let q = &self.q;
        if q.state() != QpState::Rts || crate::fault_plan::active() || crate::sanitizer::on() {
            return false;
        }
        let wr = wr_of(&self.buf, &self.buf.wrs[0]);
        let mut sq = q.sq.lock();
        let done = match q.endpoint.stats {
            None => q.express(&mut sq, &wr),
            Some(stats) => q.express_counted(stats, &mut sq, &wr),
        };
        if !done {
            return false;
        }
        // The lane completed the request: the queue runs only for a kick.
        q.progress_and_release(sq, false);
        true
    }

    /// Discards the batch (ibv_wr_abort(3)); dropping it does the same.
    ///
    /// Rule: ibv_wr_post(3): abort discards all work prepared since the start; nothing
    /// of it is posted.
    pub fn abort(self) {}
}

/// Work request `p` of `buf` as `ibv_post_send` takes it.
fn wr_of<'a>(buf: &'a BatchBuf, p: &'a Pending) -> SendWr<'a> {
    let payload = match p.inline {
        Some((at, len)) => Payload::Inline(&buf.inline[at as usize..(at + len) as usize]),
        None => Payload::Sge(&buf.sges[p.sge_start as usize..(p.sge_start + p.num_sge) as usize]),
    };
    let bind = p.bind.map(|i| {
        let (mw, rkey, mr, addr, length, access) = &buf.binds[i as usize];
        BindMwWr { mw, rkey: *rkey, bind: MwBind { mr: mr.as_ref(), addr: *addr, length: *length, access: *access } }
    });
    let inline = if p.inline.is_some() { SendFlags::INLINE } else { SendFlags::empty() };
    SendWr {
        wr_id: p.wr_id,
        opcode: p.opcode,
        flags: p.flags | inline,
        payload,
        imm_data: p.imm,
        remote_addr: p.remote_addr,
        rkey: p.rkey,
        compare_add: p.compare_add,
        swap: p.swap,
        ud: p.ud.map(|i| {
            let (ah, qpn, qkey) = &buf.uds[i as usize];
            UdDest { ah, remote_qpn: *qpn, remote_qkey: *qkey }
        }),
        bind,
        flush: p.flush,
        xrc_remote_srqn: p.xrc_srqn,
    }
}

/// Pushes the first `n` work requests of `buf` into the send queue, in order.
fn push_all(sq: &mut SendQueue, q: &QpInner, buf: &BatchBuf, n: usize) -> Result<()> {
    let endpoint = q.endpoint;
    for p in &buf.wrs[..n] {
        // The fault plan (docs/fault-injection.md): a refused request fails the whole
        // batch, as any error of ibv_wr_complete(3) does.
        if let Some(e) = crate::fault_plan::fail(q.slot(), rverbs_proto::verb_fault::Verb::PostSend, Some(q.qpn), Some(p.wr_id)) {
            return Err(e);
        }
        let wr = wr_of(buf, p);
        sq.push(endpoint, q.pd.id, q.qp_type, &wr, true).map_err(|e| match e {
            // rxe's builders report every lack of room as ENOSPC (`providers/rxe/rxe.c`).
            Error::QueueFull { .. } => Error::NoSpace { verb: "wr_*", why: "send queue full" },
            Error::TooManySge { .. } => Error::NoSpace { verb: "wr_set_sge_list", why: "more SGEs than max_send_sge" },
            Error::Limit { what: "inline data", .. } => {
                Error::NoSpace { verb: "wr_set_inline_data", why: "more than max_inline_data" }
            }
            e => e,
        })?;
        if crate::fault_plan::active() {
            if let Some(status) = crate::fault_plan::complete(q.slot(), q.qpn, p.wr_id) {
                sq.ring.fail_newest(status);
            }
            if let Some(delay) = crate::fault_plan::hold(q.slot(), q.qpn, p.wr_id) {
                sq.ring.hold_newest(delay);
            }
        }
    }
    Ok(())
}

impl Drop for SendBatch {
    fn drop(&mut self) {
        // The buffer goes back to the QP for its next batch, emptied (the handles it
        // holds are released now); taking it leaves empty vectors, which allocate nothing.
        self.buf.clear();
        *self.q.batch_spare.lock() = std::mem::take(&mut self.buf);
    }
}

/// The batch a QP's `ibv_wr_*` calls build between `ibv_wr_start` and `ibv_wr_complete`
/// or `ibv_wr_abort`, for a binding whose builder calls arrive one at a time (the C ABI
/// keeps one in each QP object).
///
/// Rule: ibv_wr_post(3): the calls from `ibv_wr_start` to `ibv_wr_complete` are the
/// application's to serialize; each one here takes the slot's lock for its own length
/// (a spin lock released by a plain store: an uncontended call makes one locked
/// instruction), so calls that race are serialized, never torn. The batch stays in the
/// slot after it is posted or discarded, emptied, and serves the next `start` on the same
/// QP without taking the QP's spare buffers again.
pub struct WrSlot {
    state: crate::spin::SpinMutex<WrState, false>,
}

impl Default for WrSlot {
    fn default() -> Self {
        WrSlot { state: crate::spin::SpinMutex::new(WrState::default()) }
    }
}

#[derive(Default)]
struct WrState {
    batch: Option<SendBatch>,
    /// Between `start` and `complete`/`abort`.
    open: bool,
}

impl std::fmt::Debug for WrSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrSlot").finish_non_exhaustive()
    }
}

impl WrSlot {
    /// Opens a batch on `qp` (ibv_wr_start(3)): the slot's batch emptied, or a new one;
    /// a batch already open is discarded, as a second `ibv_wr_start` restarts the
    /// posting.
    ///
    /// Errors: as [`Qp::start_batch`] (nothing is open then).
    pub fn start(&self, qp: &Qp) -> Result<()> {
        let mut s = self.state.lock();
        s.open = false;
        match s.batch.as_mut() {
            Some(b) if qp.inner().is_ok_and(|q| std::sync::Arc::ptr_eq(q, &b.q)) => b.restart(),
            _ => s.batch = Some(qp.start_batch()?),
        }
        s.open = true;
        Ok(())
    }

    /// Runs `f` on the open batch (a builder or setter); outside `start` … `complete` or
    /// `abort` nothing is done.
    pub fn with(&self, f: impl FnOnce(&mut SendBatch)) {
        let mut s = self.state.lock();
        if s.open {
            if let Some(b) = s.batch.as_mut() {
                f(b);
            }
        }
    }

    /// Posts the open batch ([`SendBatch::complete`]) and closes it; `None` if none is
    /// open.
    pub fn complete(&self) -> Option<Result<()>> {
        let mut s = self.state.lock();
        if !std::mem::replace(&mut s.open, false) {
            return None;
        }
        s.batch.as_mut().map(SendBatch::complete_and_keep)
    }

    /// Discards the open batch, if any (ibv_wr_abort(3)).
    pub fn abort(&self) {
        let mut s = self.state.lock();
        if std::mem::replace(&mut s.open, false) {
            if let Some(b) = s.batch.as_mut() {
                b.restart();
            }
        }
    }
}

/// A [`SendBatch`] as a guard borrowing its QP ([`Qp::wr_start`]); it derefs to the
/// batch for the builders and setters.
#[must_use = "a batch posts nothing until complete()"]
pub struct WrBatch<'q> {
    batch: SendBatch,
    _qp: std::marker::PhantomData<&'q Qp>,
}

impl std::fmt::Debug for WrBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.batch.fmt(f)
    }
}

impl std::ops::Deref for WrBatch<'_> {
    type Target = SendBatch;

    fn deref(&self) -> &SendBatch {
        &self.batch
    }
}

impl std::ops::DerefMut for WrBatch<'_> {
    fn deref_mut(&mut self) -> &mut SendBatch {
        &mut self.batch
    }
}

impl WrBatch<'_> {
    /// Posts the batch (ibv_wr_complete(3)); see [`SendBatch::complete`].
    pub fn complete(self) -> Result<()> {
        self.batch.complete()
    }

    /// Discards the batch (ibv_wr_abort(3)); dropping it does the same.
    pub fn abort(self) {
        self.batch.abort()
    }
}
