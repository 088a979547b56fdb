//! Extended polling: the start/next/end batch of ibv_create_cq_ex(3) (`ibv_start_poll`).
//!
//! Rule: `start_poll` returns ENOENT when the CQ is empty and leaves it valid — here
//! `Ok(None)`; `next_poll` likewise — here `Ok(None)` from [`ExPoll::next`], which also
//! ends the batch; `end_poll` closes the batch — here dropping the [`ExPoll`].
//! Rule: a field can only be read if the CQ was created with its `wc_flags` bit; here an
//! accessor of a field not requested returns `None` — never undefined behaviour.
//! Rule: `wr_id` and `status` are always available; `opcode`, `vendor_err` and
//! `wc_flags` too (ibv_wc_read_opcode, ibv_wc_read_vendor_err, ibv_wc_read_wc_flags).

use crate::spin::SpinGuard;

use rverbs_proto::verbs::{WcFlags, WcOpcode, WcStatus};

use crate::cq::{Cq, CqInner, WcExFlags};
use crate::error::{Error, Result};
use crate::wc::Cqe;

/// One batch of extended polling, positioned on a completion.
///
/// While the batch lives it holds the CQ's consumer lock (unless the CQ is
/// SINGLE_THREADED), as providers do between start_poll and end_poll.
pub struct ExPoll<'a> {
    cq: &'a CqInner,
    _consumer: Option<SpinGuard<'a, ()>>,
    entry: ExEntry,
}

impl std::fmt::Debug for ExPoll<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExPoll").field("wr_id", &self.entry.current.wr_id).finish()
    }
}

/// One completion removed by [`Cq::poll_ex_one`], with the accessors of [`ExPoll`]: a
/// field the CQ was not created with reads as `None`.
///
/// This is the building block for bindings whose start/next/end calls cannot hold a
/// Rust borrow between them (the C ABI): each call removes one completion, so
/// concurrent pollers still see every completion exactly once.
#[derive(Clone, Copy, Debug)]
pub struct ExEntry {
    flags: WcExFlags,
    current: Cqe,
}

impl Cq {
    /// Removes the oldest completion for extended reading (see [`ExEntry`]); `Ok(None)`
    /// when the CQ is empty (ENOENT).
    ///
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    pub fn poll_ex_one(&self) -> Result<Option<ExEntry>> {
        let cq: &CqInner = self.inner();
        if cq.errored() {
            return Err(Error::CqOverrun);
        }
        let _g = cq.lock_consumer();
        Ok(pop_one(cq).map(|current| ExEntry { flags: cq.wc_flags, current }))
    }

    /// Starts a batch (ibv_start_poll(3)): `Ok(None)` is ENOENT, the CQ is empty.
    ///
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    pub fn start_poll(&self) -> Result<Option<ExPoll<'_>>> {
        let cq: &CqInner = self.inner();
        if cq.errored() {
            return Err(Error::CqOverrun);
        }
        let guard = cq.lock_consumer();
        match pop_one(cq) {
            Some(current) => Ok(Some(ExPoll {
                cq,
                _consumer: guard,
                entry: ExEntry { flags: cq.wc_flags, current },
            })),
            None => Ok(None),
        }
    }
}

fn pop_one(cq: &CqInner) -> Option<Cqe> {
    cq.pop_live(cq.seg().ring())
}

impl<'a> ExPoll<'a> {
    /// Moves to the next completion (ibv_next_poll(3)); `Ok(None)` is ENOENT and ends
    /// the batch (ibv_end_poll(3)).
    pub fn next(mut self) -> Result<Option<ExPoll<'a>>> {
        match pop_one(self.cq) {
            Some(c) => {
                self.entry.current = c;
                Ok(Some(self))
            }
            None => Ok(None),
        }
    }

    /// Ends the batch (ibv_end_poll(3)); dropping does the same.
    pub fn end(self) {}

    /// The current completion.
    pub fn entry(&self) -> &ExEntry {
        &self.entry
    }
}

impl std::ops::Deref for ExPoll<'_> {
    type Target = ExEntry;

    fn deref(&self) -> &ExEntry {
        &self.entry
    }
}

impl ExEntry {
    fn has(&self, flag: WcExFlags) -> bool {
        self.flags.contains(flag)
    }

    fn ok(&self) -> bool {
        self.current.status == WcStatus::Success as u32 as u8
    }

    /// The `wr_id` (`ibv_cq_ex.wr_id`).
    pub fn wr_id(&self) -> u64 {
        self.current.wr_id
    }

    /// The status (`ibv_cq_ex.status`).
    pub fn status(&self) -> WcStatus {
        self.current.status()
    }

    /// The opcode (ibv_wc_read_opcode); `None` on an error completion.
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.ok().then(|| WcOpcode::from_raw(self.current.opcode_raw())).flatten()
    }

    /// The vendor error (ibv_wc_read_vendor_err).
    pub fn vendor_err(&self) -> u32 {
        self.current.vendor_err
    }

    /// The completion flags (ibv_wc_read_wc_flags); empty on an error completion.
    pub fn wc_flags(&self) -> WcFlags {
        if self.ok() {
            WcFlags::from_bits_retain(u32::from(self.current.wc_flags))
        } else {
            WcFlags::empty()
        }
    }

    /// Bytes transferred: requires `BYTE_LEN`.
    pub fn byte_len(&self) -> Option<u32> {
        (self.has(WcExFlags::BYTE_LEN) && self.ok()).then_some(self.current.byte_len)
    }

    /// Immediate data: requires `IMM` and a completion with `WITH_IMM`.
    pub fn imm_data(&self) -> Option<u32> {
        (self.has(WcExFlags::IMM) && self.wc_flags().contains(WcFlags::WITH_IMM))
            .then_some(self.current.imm)
    }

    /// The invalidated rkey: requires `IMM` and a completion with `WITH_INV`.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.has(WcExFlags::IMM) && self.wc_flags().contains(WcFlags::WITH_INV))
            .then_some(self.current.imm)
    }

    /// The local QP number: requires `QP_NUM`.
    pub fn qp_num(&self) -> Option<u32> {
        self.has(WcExFlags::QP_NUM).then_some(self.current.qp_num)
    }

    /// The source QP: requires `SRC_QP`.
    pub fn src_qp(&self) -> Option<u32> {
        (self.has(WcExFlags::SRC_QP) && self.ok()).then_some(self.current.src_qp)
    }

    /// The source LID: requires `SLID`.
    pub fn slid(&self) -> Option<u16> {
        (self.has(WcExFlags::SLID) && self.ok()).then_some(self.current.slid)
    }

    /// The service level: requires `SL`.
    pub fn sl(&self) -> Option<u8> {
        (self.has(WcExFlags::SL) && self.ok()).then_some(self.current.sl)
    }

    /// The DLID path bits: requires `DLID_PATH_BITS`.
    pub fn dlid_path_bits(&self) -> Option<u8> {
        (self.has(WcExFlags::DLID_PATH_BITS) && self.ok()).then_some(self.current.dlid_path_bits)
    }

    /// The P_Key index (no flag gates it; 0 on this device).
    pub fn pkey_index(&self) -> u16 {
        self.current.pkey_index
    }

    /// Completion time in device clock units (ns, `hca_core_clock` 1 GHz): requires
    /// `COMPLETION_TIMESTAMP`.
    pub fn completion_ts(&self) -> Option<u64> {
        self.has(WcExFlags::COMPLETION_TIMESTAMP).then_some(self.current.timestamp)
    }

    /// Completion time in wall-clock nanoseconds: requires
    /// `COMPLETION_TIMESTAMP_WALLCLOCK`.
    pub fn completion_wallclock_ns(&self) -> Option<u64> {
        self.has(WcExFlags::COMPLETION_TIMESTAMP_WALLCLOCK)
            .then(|| crate::clock::to_wallclock_ns(self.current.timestamp))
    }

    /// The current completion as a plain [`crate::Wc`] (every field, whatever the flags;
    /// what ibv_poll_cq on an extended CQ returns).
    pub fn to_wc(&self) -> crate::Wc {
        self.current.to_wc()
    }
}
