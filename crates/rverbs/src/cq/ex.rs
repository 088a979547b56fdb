//! Extended polling: the start/next/end batch of ibv_create_cq_ex(3) (`ibv_start_poll`).
//!
//! Rule: [`Cq::start_poll`] returns ENOENT when the CQ is empty and leaves it valid —
//! here `Ok(None)`, and no batch is open; otherwise the batch is open and positioned on
//! the oldest completion, removed from the CQ.
//! Rule: [`Cq::next_poll`] moves to the next completion, `Ok(None)` (ENOENT) when there
//! is none; the batch stays open until [`Cq::end_poll`], which the caller must call
//! after a successful `start_poll` whatever `next_poll` returned.
//! Rule: from `start_poll` to `end_poll` the CQ is locked for the poller (other polls
//! wait), as providers hold their CQ lock; a SINGLE_THREADED CQ takes no lock.
//! Rule: the read accessors ([`Cq::polled`], [`ExEntry`]) are valid for the current
//! completion; a field can only be read if the CQ was created with its `wc_flags` bit —
//! here an accessor of a field not requested returns `None`, never undefined behaviour.
//! Rule: `wr_id` and `status` are always available; `opcode`, `vendor_err` and
//! `wc_flags` too (ibv_wc_read_opcode, ibv_wc_read_vendor_err, ibv_wc_read_wc_flags).
//!
//! [`ExPoll`] ([`Cq::ex_poll`]) is the same batch as a guard: it calls these functions
//! and ends the batch when dropped.

use std::sync::atomic::Ordering;

use rverbs_proto::verbs::{WcFlags, WcOpcode, WcStatus};

use crate::cq::{Cq, CqCreateFlags, CqInner, WcExFlags};
use crate::error::Result;
use crate::rings::wc::Cqe;

/// One batch of extended polling as a guard, positioned on a completion
/// ([`Cq::ex_poll`]); dropping it ends the batch ([`Cq::end_poll`]).
pub struct ExPoll<'a> {
    cq: &'a Cq,
    entry: ExEntry,
}

impl std::fmt::Debug for ExPoll<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExPoll").field("wr_id", &self.entry.current.wr_id).finish()
    }
}

/// The completion a batch is positioned on, with the accessors of extended polling
/// (`ibv_wc_read_*`): a field the CQ was not created with reads as `None`.
#[derive(Clone, Copy, Debug)]
pub struct ExEntry {
    flags: WcExFlags,
    current: Cqe,
}

impl CqInner {
    /// Takes the consumer lock past this call (not for SINGLE_THREADED).
    fn hold_consumer(&self) {
        if !self.flags.contains(CqCreateFlags::SINGLE_THREADED) {
            self.consumer.lock_held();
        }
    }

    fn release_consumer(&self) {
        if !self.flags.contains(CqCreateFlags::SINGLE_THREADED) {
            self.consumer.unlock();
        }
    }

    /// Removes the oldest completion and makes it the current one of the batch (`first`:
    /// the batch's first, whose empty answer looks closely at the ring: `pop_words`).
    fn pop_polled(&self, first: bool) -> Option<ExEntry> {
        // A pin, not the lock the batch holds: the safe API cannot prove it is held (a
        // `next_poll` without `start_poll` reads too, as a misbehaving poller would).
        let held = super::Reading::pin();
        let seg = self.seg(&held);
        let words = self.pop_words(seg, &seg.ring().consumer(), usize::MAX, first)?;
        // What the `ibv_wc_read_*` functions read ([`Cq::polled`] decodes them): the
        // ring's words as they were, not the decoded CQE written back (decoding is a
        // function of the words, so the reader gets this same CQE). These are the steps
        // of `CqInner::pop_live_from` with the words kept between them; that helper
        // taking a closure for them measured 17 instructions more per poll here.
        for (slot, w) in self.polled.iter().zip(words) {
            slot.store(w, Ordering::Relaxed);
        }
        let current = Cqe::decode(&words);
        self.polled(current.rq_taken, current.receive_or_error(), current.placed());
        if crate::sanitizer::on() {
            current.sanitize_polled(self.ctx.endpoint.slot);
        }
        if let Some(stats) = self.stats {
            // What was waiting: the rest of the ring and this one.
            stats.waiting(self.id, seg.ring().len() + 1);
            stats.completion(current.qp_num, current.polled());
            stats.polled(self.id, 1);
        }
        Some(ExEntry { flags: self.wc_flags, current })
    }
}

impl Cq {
    /// Starts a batch of extended polling (ibv_start_poll(3)): removes the oldest
    /// completion and positions the batch on it; `Ok(None)` is ENOENT, the CQ is empty,
    /// and then no batch is open.
    ///
    /// Rule: ibv_create_cq_ex(3): ENOENT leaves the CQ valid; after ENOENT (or an
    /// error) `end_poll` is not called; after success it must be.
    /// Rule: the CQ stays locked for this poller until [`Cq::end_poll`] (other polls of
    /// this CQ wait); a SINGLE_THREADED CQ takes no lock.
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    pub fn start_poll(&self) -> Result<Option<ExEntry>> {
        let cq: &CqInner = self.inner()?;
        if cq.errored() {
            return Err(cq.overrun_seen());
        }
        let sanitize = crate::sanitizer::on();
        if !sanitize && cq.surely_empty() {
            // ENOENT without taking the consumer lock (the busy poller's common case).
            if let Some(stats) = cq.stats {
                stats.polled(cq.id, 0);
            }
            return Ok(None);
        }
        let marked = sanitize && cq.sanitize_poll_entered(true);
        cq.hold_consumer();
        let entry = cq.pop_polled(true);
        if sanitize && entry.is_some() {
            crate::sanitizer::batch_opened(cq.sanitizer_id(), crate::sanitizer::thread_token());
        }
        if entry.is_none() {
            if let Some(stats) = cq.stats {
                stats.polled(cq.id, 0);
            }
            if marked {
                // ENOENT: no batch is open, the poll is over.
                cq.sanitize_poll_left();
            }
            cq.release_consumer();
            if crate::progress::net_active() {
                // Empty: receive what the network holds for this process (no lock held);
                // what it completes is found by the next poll.
                crate::progress::receive_inline(cq.ctx.endpoint);
            }
        }
        Ok(entry)
    }

    /// Moves the open batch to the next completion, removing it (ibv_next_poll(3));
    /// `Ok(None)` is ENOENT.
    ///
    /// Rule: ibv_create_cq_ex(3): called between `start_poll` and `end_poll`; after
    /// ENOENT or an error the batch is still ended with `end_poll`.
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    pub fn next_poll(&self) -> Result<Option<ExEntry>> {
        let cq: &CqInner = self.inner()?;
        if cq.errored() {
            return Err(cq.overrun_seen());
        }
        Ok(cq.pop_polled(false))
    }

    /// Ends the batch a successful [`Cq::start_poll`] opened (ibv_end_poll(3)),
    /// releasing the CQ for other pollers.
    ///
    /// Rule: ibv_create_cq_ex(3): after `end_poll` a new batch starts with `start_poll`.
    /// Calling it without an open batch releases a batch another thread holds (as with a
    /// provider's lock): its completions stay whole, but that poller loses its exclusion.
    pub fn end_poll(&self) {
        // A CQ of the rdma-core backend never opens a batch (`start_poll` is EOPNOTSUPP).
        let Ok(cq) = self.inner() else { return };
        if crate::sanitizer::on() {
            // Before the lock is released: the next batch's record is not ours.
            crate::sanitizer::batch_ended(cq.sanitizer_id(), crate::sanitizer::thread_token());
            if cq.flags.contains(CqCreateFlags::SINGLE_THREADED) {
                cq.sanitize_poll_left();
            }
        }
        cq.release_consumer();
    }

    /// The completion the open batch is positioned on (what the `ibv_wc_read_*`
    /// functions read); outside a batch, the last one polled (an empty entry on the
    /// rdma-core backend, which has no extended polling).
    pub fn polled(&self) -> ExEntry {
        let mut words = [0u64; crate::rings::completion_ring::DATA_WORDS];
        let Ok(cq) = self.inner() else {
            return ExEntry { flags: WcExFlags::empty(), current: Cqe::decode(&words) };
        };
        for (w, slot) in words.iter_mut().zip(cq.polled.iter()) {
            *w = slot.load(Ordering::Relaxed);
        }
        ExEntry { flags: cq.wc_flags, current: Cqe::decode(&words) }
    }

    /// Starts a batch as a guard ([`Cq::start_poll`]); `Ok(None)` is ENOENT.
    ///
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    pub fn ex_poll(&self) -> Result<Option<ExPoll<'_>>> {
        Ok(self.start_poll()?.map(|entry| ExPoll { cq: self, entry }))
    }
}

impl<'a> ExPoll<'a> {
    /// Moves to the next completion ([`Cq::next_poll`]); `Ok(None)` is ENOENT and, like
    /// an error, ends the batch ([`Cq::end_poll`]).
    ///
    /// Errors: `Error::CqOverrun` once an overrun put the CQ in error.
    pub fn next(mut self) -> Result<Option<ExPoll<'a>>> {
        Ok(self.cq.next_poll()?.map(|entry| {
            self.entry = entry;
            self
        }))
    }

    /// Ends the batch ([`Cq::end_poll`]); dropping does the same.
    pub fn end(self) {}

    /// The current completion.
    pub fn entry(&self) -> &ExEntry {
        &self.entry
    }
}

impl Drop for ExPoll<'_> {
    fn drop(&mut self) {
        self.cq.end_poll();
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

    /// The tag and the TMH application context of a tag-matched receive
    /// (ibv_wc_read_tm_info, `struct ibv_wc_tm_info`): requires `TM_INFO`. A completion
    /// without IBV_WC_TM_MATCH (an unexpected message, a list operation, the data
    /// completion of a rendezvous) reads as tag 0, context 0.
    pub fn tm_info(&self) -> Option<(u64, u32)> {
        if !self.has(WcExFlags::TM_INFO) {
            return None;
        }
        let matched = WcFlags::from_bits_retain(u32::from(self.current.wc_flags)).contains(WcFlags::TM_MATCH);
        Some(if matched { (self.current.tm_tag, self.current.imm) } else { (0, 0) })
    }

    /// Completion time in wall-clock nanoseconds: requires
    /// `COMPLETION_TIMESTAMP_WALLCLOCK`.
    pub fn completion_wallclock_ns(&self) -> Option<u64> {
        self.has(WcExFlags::COMPLETION_TIMESTAMP_WALLCLOCK)
            .then(|| crate::clock::to_wallclock_ns(self.current.timestamp))
    }

    /// The current completion as a plain [`crate::Wc`] (every field, whatever the flags;
    /// what ibv_poll_cq on an extended CQ returns).
    pub fn to_wc(&self) -> crate::rings::wc::Wc {
        self.current.to_wc()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::CqInit;
    use rverbs_proto::verbs::WcOpcode;

    fn cq_with(flags: CqCreateFlags, n: u64) -> Cq {
        let ctx = crate::devices().unwrap()[0].open().unwrap();
        let cq = ctx.create_cq(&CqInit::new(8).flags(flags)).unwrap();
        for wr_id in 0..n {
            cq.inner().unwrap().push(Cqe::success(wr_id, 1, WcOpcode::Send, 0)).unwrap();
        }
        cq
    }

    fn locked(cq: &Cq) -> bool {
        cq.inner().unwrap().consumer.try_lock().is_none()
    }

    #[test]
    fn start_poll_locks_the_cq_until_end_poll() {
        let cq = cq_with(CqCreateFlags::empty(), 2);
        assert_eq!(cq.start_poll().unwrap().map(|e| e.wr_id()), Some(0));
        assert!(locked(&cq), "the batch holds the CQ between calls");
        assert!(cq.next_poll().unwrap().is_some());
        assert!(cq.next_poll().unwrap().is_none());
        assert!(locked(&cq), "ENOENT from next_poll does not end the batch");
        cq.end_poll();
        assert!(!locked(&cq));
    }

    #[test]
    fn start_poll_enoent_leaves_the_cq_unlocked() {
        let cq = cq_with(CqCreateFlags::empty(), 0);
        assert!(cq.start_poll().unwrap().is_none());
        assert!(!locked(&cq));
    }

    #[test]
    fn single_threaded_batches_take_no_lock() {
        let cq = cq_with(CqCreateFlags::SINGLE_THREADED, 1);
        assert!(cq.start_poll().unwrap().is_some());
        assert!(!locked(&cq));
        cq.end_poll();
        assert!(!locked(&cq), "end_poll on a SINGLE_THREADED CQ releases nothing");
    }

    #[test]
    fn the_guard_ends_its_batch_when_dropped() {
        let cq = cq_with(CqCreateFlags::empty(), 2);
        let p = cq.ex_poll().unwrap().unwrap();
        assert!(locked(&cq));
        let p = p.next().unwrap().unwrap();
        assert!(locked(&cq));
        assert!(p.next().unwrap().is_none(), "ENOENT ends the guard's batch");
        assert!(!locked(&cq));
    }
}
