//! Work completions: the public [`Wc`] (layout-identical to `struct ibv_wc`) and the
//! CQE the device writes into a completion ring.

use crate::rings::recv_count::TakenCount;
#[cfg(rverbs_loom)]
use loom::sync::atomic::AtomicU64;
#[cfg(not(rverbs_loom))]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use rverbs_proto::verbs::{WcFlags, WcOpcode, WcStatus};

/// Number of 64-bit words a [`Cqe`] encodes into (a completion ring slot holds them
/// after its sequence word: one cache line).
pub(crate) const CQE_WORDS: usize = 7;

/// A completion ring slot's data words (loom's atomics under its models): what the ring
/// stores and what [`Cqe::read_wc`] decodes in place.
pub(crate) type SlotWords = [AtomicU64; CQE_WORDS];

/// A completion as the ring holds it ([`Cqe::encode`]), encoded where its producer built
/// it and passed down to the publish by reference. A [`Cqe`] passed down instead is read
/// back in wider pieces than its fields were written (the compiler merges adjacent
/// fields' loads, and copies the struct 16 bytes at a time); the CPU cannot forward such
/// a load from the stores still in its store buffer and waits for them to reach the
/// cache: a tenth of the in-process post + poll (BENCHMARKS.md, "A completion encoded
/// where it is built").
pub(crate) type CqeWords = [u64; CQE_WORDS];

/// What [`Cqe::read_wc`] found besides the `ibv_wc`: what the poll needs once the slot's
/// check has passed (the purge's QP number, the receive count for the CQ's `Heard`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WcRead {
    pub(crate) qp_num: u32,
    pub(crate) taken: Option<TakenCount>,
    pub(crate) receive_or_error: bool,
    /// [`Cqe::placed_by`] of the completion.
    pub(crate) placed: u32,
}

/// The table of the byte values of a C enum's variants (`ALL`; values of 256 and up fit no
/// byte and are left out), built at compile time.
macro_rules! known_bytes {
    ($enum:ty) => {{
        let mut t = [false; 256];
        let mut i = 0;
        while i < <$enum>::ALL.len() {
            let v = <$enum>::ALL[i] as u32;
            if v < 256 {
                t[v as usize] = true;
            }
            i += 1;
        }
        t
    }};
}

/// Which byte values are a `WcStatus` / a `WcOpcode` (the CQE stores each in one byte):
/// one load per field where the poll decodes a CQE a peer may have scribbled on.
const KNOWN_STATUS: [bool; 256] = known_bytes!(WcStatus);
const KNOWN_OPCODE: [bool; 256] = known_bytes!(WcOpcode);

/// A work completion (`struct ibv_wc`, 48 bytes, the same layout).
///
/// Rule: ibv_poll_cq(3): if the status is not `Success`, only `wr_id`, `status`,
/// `qp_num` and `vendor_err` are valid — the accessors of every other field return
/// `None` then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Wc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

const _: () = assert!(std::mem::size_of::<Wc>() == 48);

impl Wc {
    /// The `wr_id` of the completed work request (always valid).
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The completion status (always valid).
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.status).unwrap_or(WcStatus::GeneralErr)
    }

    /// Whether the status is `Success`.
    pub fn is_success(&self) -> bool {
        self.status == WcStatus::Success as u32
    }

    /// The local QP number (always valid).
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// The vendor error syndrome (always valid; see `rverbs_proto::vendor_err`).
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    fn ok<T>(&self, v: T) -> Option<T> {
        self.is_success().then_some(v)
    }

    /// The operation that completed (success only).
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.ok(()).and_then(|_| WcOpcode::from_raw(self.opcode))
    }

    /// Bytes transferred (success only).
    pub fn byte_len(&self) -> Option<u32> {
        self.ok(self.byte_len)
    }

    /// The completion flags (success only).
    pub fn wc_flags(&self) -> Option<WcFlags> {
        self.ok(WcFlags::from_bits_retain(self.wc_flags))
    }

    /// Immediate data, as the 4 bytes the sender put in `imm_data` (network byte order
    /// in C): success with `WITH_IMM` only.
    pub fn imm_data(&self) -> Option<u32> {
        self.wc_flags()
            .filter(|f| f.contains(WcFlags::WITH_IMM))
            .map(|_| self.imm_data)
    }

    /// The rkey a SEND_WITH_INV invalidated: success with `WITH_INV` only.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags()
            .filter(|f| f.contains(WcFlags::WITH_INV))
            .map(|_| self.imm_data)
    }

    /// The source QP number (meaningful for UD receives; success only).
    pub fn src_qp(&self) -> Option<u32> {
        self.ok(self.src_qp)
    }

    /// The P_Key index (success only).
    pub fn pkey_index(&self) -> Option<u16> {
        self.ok(self.pkey_index)
    }

    /// The source LID (0 on Ethernet; success only).
    pub fn slid(&self) -> Option<u16> {
        self.ok(self.slid)
    }

    /// The service level (success only).
    pub fn sl(&self) -> Option<u8> {
        self.ok(self.sl)
    }

    /// The DLID path bits (success only).
    pub fn dlid_path_bits(&self) -> Option<u8> {
        self.ok(self.dlid_path_bits)
    }
}

/// Tells the sanitizer the application polled these completions (`ibv_poll_cq`) of a CQ
/// of the device in slot `slot` (its QPs are that device's): their work requests are no
/// longer outstanding (docs/sanitizer.md). Out of line: the poll path only tests the
/// switch.
#[cold]
#[inline(never)]
pub(crate) fn sanitize_polled(slot: usize, wc: &[Wc]) {
    for w in wc {
        let qpn = crate::sanitizer::Id::new(slot, w.qp_num);
        if w.status == WcStatus::RemAccessErr as u32 || w.status == WcStatus::RemInvReqErr as u32 {
            crate::sanitizer::remote_error(qpn, w.wr_id, w.status, w.vendor_err);
        }
        let placed = if w.status == 0 && w.opcode == WcOpcode::Recv as u32 { w.byte_len as usize } else { 0 };
        crate::sanitizer::completed(qpn, w.wr_id, w.status == 0, w.opcode & 0x80 != 0, placed);
    }
}

/// A completion as the device produces it, before it is written into a ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cqe {
    pub(crate) wr_id: u64,
    pub(crate) status: u8,
    pub(crate) opcode: u8,
    pub(crate) wc_flags: u8,
    pub(crate) sl: u8,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    pub(crate) imm: u32,
    pub(crate) qp_num: u32,
    pub(crate) src_qp: u32,
    pub(crate) pkey_index: u16,
    pub(crate) slid: u16,
    pub(crate) dlid_path_bits: u8,
    /// Device clock at completion (0 unless the CQ asked for timestamps).
    pub(crate) timestamp: u64,
    /// Whether the completion may fire a solicited-only notification.
    pub(crate) solicited: bool,
    /// A tag-matched receive (IBV_WC_TM_MATCH): the message's tag; its TMH application
    /// context travels in `imm` (such a completion has no immediate data).
    pub(crate) tm_tag: u64,
    /// A receive taken from a ring (a QP's own queue or an SRQ's): the count of receives
    /// taken from it, for its owner's posts (`rings::recv_count`) and holds
    /// (`rings::kept`). It travels in the tag's word, flagged by bit 41 of word 4 (a
    /// receive taken from a queue's ring is never tag-matched: a match lands in a tagged
    /// buffer of a TM-SRQ's list).
    pub(crate) rq_taken: Option<TakenCount>,
}

/// Bit of CQE word 4 that says word 6 carries a [`TakenCount`] instead of a tag.
const RQ_TAKEN_BIT: u64 = 1 << 41;

impl Cqe {
    /// A successful completion.
    pub(crate) fn success(wr_id: u64, qp_num: u32, opcode: WcOpcode, byte_len: u32) -> Self {
        Cqe {
            wr_id,
            qp_num,
            opcode: opcode as u32 as u8,
            byte_len,
            ..Cqe::default()
        }
    }

    /// An error completion: only wr_id, status, qp_num and vendor_err are set
    /// (ibv_poll_cq(3); rxe leaves opcode and byte_len 0).
    pub(crate) fn error(wr_id: u64, qp_num: u32, status: WcStatus, vendor_err: u32) -> Self {
        Cqe { wr_id, qp_num, status: status as u32 as u8, vendor_err, ..Cqe::default() }
    }

    pub(crate) fn status(&self) -> WcStatus {
        WcStatus::from_raw(u32::from(self.status)).unwrap_or(WcStatus::GeneralErr)
    }

    // Always inline: encoded out of line, the `Cqe` is passed in memory and its fields
    // read back in merged loads (`CqeWords`).
    #[inline(always)]
    pub(crate) fn encode(&self) -> CqeWords {
        [
            self.wr_id,
            u64::from(self.byte_len) | u64::from(self.imm) << 32,
            u64::from(self.qp_num) | u64::from(self.src_qp) << 32,
            u64::from(self.vendor_err)
                | u64::from(self.status) << 32
                | u64::from(self.opcode) << 40
                | u64::from(self.wc_flags) << 48
                | u64::from(self.sl) << 56,
            u64::from(self.pkey_index)
                | u64::from(self.slid) << 16
                | u64::from(self.dlid_path_bits) << 32
                | u64::from(self.solicited) << 40
                | if self.rq_taken.is_some() { RQ_TAKEN_BIT } else { 0 },
            self.timestamp,
            match self.rq_taken {
                Some(t) => t.word(),
                None => self.tm_tag,
            },
        ]
    }

    /// Decodes a CQE that another process may have written: a status or opcode byte that
    /// is no value of its enum (a peer that scribbled over the ring) reads as
    /// IBV_WC_GENERAL_ERR, never as a value an application cannot handle.
    #[inline]
    pub(crate) fn decode(w: &[u64; CQE_WORDS]) -> Self {
        let mut cqe = Self::decode_raw(w);
        if !KNOWN_STATUS[usize::from(cqe.status)] || !KNOWN_OPCODE[usize::from(cqe.opcode)] {
            cqe.status = WcStatus::GeneralErr as u32 as u8;
        }
        cqe
    }

    /// [`Cqe::decode`] followed by [`Cqe::to_wc`], straight from the ring's words into
    /// the caller's `ibv_wc` (the batched poll's loop: no `Cqe` in between, and none of
    /// the words only the extended poll and the receive count read). Returns whether the
    /// completion is a receive or an error ([`Cqe::receive_or_error`] of the decoded CQE).
    #[inline(always)]
    pub(crate) fn write_wc(w: &[u64; CQE_WORDS], out: &mut Wc) -> bool {
        let (status, opcode) = Self::status_opcode(w[3]);
        *out = Wc {
            wr_id: w[0],
            status,
            opcode,
            vendor_err: w[3] as u32,
            byte_len: w[1] as u32,
            imm_data: (w[1] >> 32) as u32,
            qp_num: w[2] as u32,
            src_qp: (w[2] >> 32) as u32,
            wc_flags: u32::from((w[3] >> 48) as u8),
            pkey_index: w[4] as u16,
            slid: (w[4] >> 16) as u16,
            sl: (w[3] >> 56) as u8,
            dlid_path_bits: (w[4] >> 32) as u8,
        };
        opcode & 0x80 != 0 || status != 0
    }

    /// [`Cqe::write_wc`] reading the words from the ring's slot itself, one at a time as
    /// the `ibv_wc` needs them (the batched poll's loop, [`Consumer::pop_published`](crate::rings::completion_ring::Consumer::pop_published):
    /// fewer values held at once than a copy of the slot first). The words may be torn by
    /// a racing overwrite, so this only computes: what it answers counts once the slot's
    /// sequence check has passed ([`WcRead`]). The `ibv_wc` is built here again rather
    /// than by one helper taking the words: that order of loads measured 4 instructions
    /// per CQE more in `post_poll.c drain 32` (82.2 against 78.2).
    #[inline(always)]
    pub(crate) fn read_wc(w: &SlotWords, out: &mut Wc) -> WcRead {
        let w3 = w[3].load(Ordering::Relaxed);
        let w4 = w[4].load(Ordering::Relaxed);
        let w2 = w[2].load(Ordering::Relaxed);
        let (status, opcode) = Self::status_opcode(w3);
        let w1 = w[1].load(Ordering::Relaxed);
        *out = Wc {
            wr_id: w[0].load(Ordering::Relaxed),
            status,
            opcode,
            vendor_err: w3 as u32,
            byte_len: w1 as u32,
            imm_data: (w1 >> 32) as u32,
            qp_num: w2 as u32,
            src_qp: (w2 >> 32) as u32,
            wc_flags: u32::from((w3 >> 48) as u8),
            pkey_index: w4 as u16,
            slid: (w4 >> 16) as u16,
            sl: (w3 >> 56) as u8,
            dlid_path_bits: (w4 >> 32) as u8,
        };
        let taken = (w4 & RQ_TAKEN_BIT != 0).then(|| TakenCount::from_word(w[6].load(Ordering::Relaxed)));
        WcRead { qp_num: w2 as u32, taken, receive_or_error: opcode & 0x80 != 0 || status != 0, placed: Self::placed_by(status, opcode, w1 as u32) }
    }

    /// The `ibv_wc` status and opcode of word 3: a byte that is no value of its enum (a
    /// peer that scribbled over the ring) makes the status IBV_WC_GENERAL_ERR.
    #[inline(always)]
    fn status_opcode(w3: u64) -> (u32, u32) {
        let status = (w3 >> 32) as u8;
        let opcode = (w3 >> 40) as u8;
        let known = KNOWN_STATUS[usize::from(status)] & KNOWN_OPCODE[usize::from(opcode)];
        (if known { u32::from(status) } else { WcStatus::GeneralErr as u32 }, u32::from(opcode))
    }

    /// The QP number of the CQE in `w` (the purge's test, without decoding the rest).
    #[inline(always)]
    pub(crate) fn qp_num_of(w: &[u64; CQE_WORDS]) -> u32 {
        w[2] as u32
    }

    /// The receive count the CQE in `w` carries (`rings::recv_count`).
    #[inline(always)]
    pub(crate) fn taken_of(w: &[u64; CQE_WORDS]) -> Option<TakenCount> {
        (w[4] & RQ_TAKEN_BIT != 0).then(|| TakenCount::from_word(w[6]))
    }

    /// Whether a decoded CQE is a receive or an error completion: what its CQ's
    /// [`Heard`](crate::rings::recv_count::Heard) is told with the count it carries.
    #[inline(always)]
    pub(crate) fn receive_or_error(&self) -> bool {
        self.opcode_raw() & WcOpcode::Recv as u32 != 0 || self.status != 0
    }

    /// The bytes of its message a successful IBV_WC_RECV completion says its receive
    /// took (0 for any other completion): what the poll copies into a receive placed by
    /// its owner (`rings::bounce`).
    #[inline(always)]
    pub(crate) fn placed_by(status: u32, opcode: u32, byte_len: u32) -> u32 {
        if status == 0 && opcode == WcOpcode::Recv as u32 {
            byte_len
        } else {
            0
        }
    }

    /// [`Cqe::placed_by`] of the CQE in `w`.
    #[inline(always)]
    pub(crate) fn placed_of(w: &[u64; CQE_WORDS]) -> u32 {
        Self::placed_by(u32::from((w[3] >> 32) as u8), u32::from((w[3] >> 40) as u8), w[1] as u32)
    }

    /// [`Cqe::placed_by`] of a decoded CQE.
    #[inline(always)]
    pub(crate) fn placed(&self) -> u32 {
        Self::placed_by(u32::from(self.status), self.opcode_raw(), self.byte_len)
    }

    /// The word of a CQE that only the extended poll reads (the timestamp): a poll into
    /// `ibv_wc` need not load it ([`Consumer::pop_skipping`](crate::rings::completion_ring::Consumer::pop_skipping)).
    pub(crate) const TIMESTAMP_WORD: usize = 5;

    /// Whether the completion encoded in `w` may fire a solicited-only notification
    /// ([`Cqe::solicited`]).
    #[inline]
    pub(crate) fn solicited_in(w: &CqeWords) -> bool {
        (w[4] >> 40) & 1 == 1
    }

    fn decode_raw(w: &[u64; CQE_WORDS]) -> Self {
        let taken = w[4] & RQ_TAKEN_BIT != 0;
        Cqe {
            wr_id: w[0],
            byte_len: w[1] as u32,
            imm: (w[1] >> 32) as u32,
            qp_num: w[2] as u32,
            src_qp: (w[2] >> 32) as u32,
            vendor_err: w[3] as u32,
            status: (w[3] >> 32) as u8,
            opcode: (w[3] >> 40) as u8,
            wc_flags: (w[3] >> 48) as u8,
            sl: (w[3] >> 56) as u8,
            pkey_index: w[4] as u16,
            slid: (w[4] >> 16) as u16,
            dlid_path_bits: (w[4] >> 32) as u8,
            solicited: Self::solicited_in(w),
            timestamp: w[Self::TIMESTAMP_WORD],
            tm_tag: if taken { 0 } else { w[6] },
            rq_taken: taken.then(|| TakenCount::from_word(w[6])),
        }
    }

    /// Tells the sanitizer the application polled this completion of a CQ of the device
    /// in slot `slot` (its work request is no longer outstanding). RECV opcodes have bit
    /// 7 set (`IBV_WC_RECV` is 128).
    pub(crate) fn sanitize_polled(&self, slot: usize) {
        let qpn = crate::sanitizer::Id::new(slot, self.qp_num);
        if u32::from(self.status) == WcStatus::RemAccessErr as u32 || u32::from(self.status) == WcStatus::RemInvReqErr as u32 {
            crate::sanitizer::remote_error(qpn, self.wr_id, u32::from(self.status), self.vendor_err);
        }
        let placed = if self.status == 0 && self.opcode_raw() == WcOpcode::Recv as u32 { self.byte_len as usize } else { 0 };
        crate::sanitizer::completed(qpn, self.wr_id, self.status == 0, self.opcode & 0x80 != 0, placed);
    }

    /// The opcode as the C enum value (RECV is 128, so one byte holds every opcode).
    pub(crate) fn opcode_raw(&self) -> u32 {
        u32::from(self.opcode)
    }

    /// [`Cqe::polled`] of the completion a poll wrote into `wc` ([`Cqe::write_wc`] keeps
    /// what it reads: the status, the opcode's receive bit, the byte count).
    pub(crate) fn polled_of(wc: &Wc) -> crate::shm::stats::Polled {
        Self::polled_by(wc.status, wc.opcode, wc.byte_len)
    }

    /// What the completion counts as on its QP's statistics (`shm::stats::Polled`,
    /// whose doc gives the rule).
    pub(crate) fn polled(&self) -> crate::shm::stats::Polled {
        Self::polled_by(u32::from(self.status), self.opcode_raw(), self.byte_len)
    }

    /// The statistics' rule ([`Cqe::polled`]) on a completion's status, opcode and byte
    /// count.
    fn polled_by(status: u32, opcode: u32, bytes: u32) -> crate::shm::stats::Polled {
        use crate::shm::stats::Polled;
        if status != 0 {
            Polled::Error
        } else if opcode & WcOpcode::Recv as u32 != 0 {
            Polled::Recv { bytes }
        } else {
            Polled::Send { bytes }
        }
    }

    pub(crate) fn to_wc(self) -> Wc {
        Wc {
            wr_id: self.wr_id,
            status: u32::from(self.status),
            opcode: self.opcode_raw(),
            vendor_err: self.vendor_err,
            byte_len: self.byte_len,
            imm_data: self.imm,
            qp_num: self.qp_num,
            src_qp: self.src_qp,
            wc_flags: u32::from(self.wc_flags),
            pkey_index: self.pkey_index,
            slid: self.slid,
            sl: self.sl,
            dlid_path_bits: self.dlid_path_bits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_no_status_or_opcode_has_decodes_as_general_error() {
        for status in 0..=u8::MAX {
            for opcode in [0u8, WcOpcode::Recv as u32 as u8, 7, 0x7f, 0xff] {
                let c = Cqe::decode(&Cqe { status, opcode, ..Cqe::default() }.encode());
                let valid = WcStatus::from_raw(u32::from(status)).is_some() && WcOpcode::from_raw(u32::from(opcode)).is_some();
                let want = if valid { status } else { WcStatus::GeneralErr as u32 as u8 };
                assert_eq!(c.status, want, "status {status}, opcode {opcode}");
            }
        }
    }

    #[test]
    fn write_wc_and_taken_of_agree_with_decode() {
        // Every status and opcode byte (valid or scribbled), with the other words set so
        // that a field read from the wrong bits shows.
        for status in 0..=u8::MAX {
            for opcode in 0..=u8::MAX {
                for taken in [None, Some(TakenCount::new(7, 0x8000_0001))] {
                    let c = Cqe {
                        wr_id: 0x1122_3344_5566_7788,
                        status,
                        opcode,
                        wc_flags: 0x5a,
                        sl: 0xa5,
                        vendor_err: 0xdead_beef,
                        byte_len: 0x0102_0304,
                        imm: 0x0506_0708,
                        qp_num: 0x00ab_cdef,
                        src_qp: 0x0012_3456,
                        pkey_index: 0xfedc,
                        slid: 0xba98,
                        dlid_path_bits: 0x76,
                        timestamp: 0x1357_9bdf,
                        solicited: true,
                        tm_tag: if taken.is_some() { 0 } else { 0x2468_ace0 },
                        rq_taken: taken,
                    };
                    let w = c.encode();
                    let d = Cqe::decode(&w);
                    let mut wc = Wc::default();
                    let receive_or_error = Cqe::write_wc(&w, &mut wc);
                    assert_eq!(wc, d.to_wc(), "status {status}, opcode {opcode}");
                    let heard = d.opcode_raw() & WcOpcode::Recv as u32 != 0 || d.status != 0;
                    assert_eq!(receive_or_error, heard, "status {status}, opcode {opcode}");
                    assert_eq!(d.receive_or_error(), heard);
                    assert_eq!(Cqe::taken_of(&w), d.rq_taken);
                    // The batched poll does not load the timestamp word.
                    let mut w0 = w;
                    w0[Cqe::TIMESTAMP_WORD] = 0;
                    let mut wc0 = Wc::default();
                    Cqe::write_wc(&w0, &mut wc0);
                    assert_eq!(wc0, wc);
                    assert_eq!(Cqe::qp_num_of(&w), d.qp_num);
                    // The run of the batched poll reads the slot's words itself.
                    let slot = w.map(AtomicU64::new);
                    let mut wc1 = Wc::default();
                    let r = Cqe::read_wc(&slot, &mut wc1);
                    assert_eq!(wc1, wc, "status {status}, opcode {opcode}");
                    assert_eq!((r.qp_num, r.taken, r.receive_or_error), (d.qp_num, d.rq_taken, heard));
                    assert_eq!(Cqe::polled_of(&wc1), d.polled());
                }
            }
        }
    }

    #[test]
    fn cqe_round_trips_through_ring_words() {
        let c = Cqe {
            wr_id: 0xdead_beef_0102_0304,
            status: WcStatus::RemAccessErr as u32 as u8,
            opcode: WcOpcode::RecvRdmaWithImm as u32 as u8,
            wc_flags: (WcFlags::WITH_IMM | WcFlags::GRH).bits() as u8,
            sl: 3,
            vendor_err: 0x22,
            byte_len: 4096,
            imm: 0x1122_3344,
            qp_num: 0xff_fffe,
            src_qp: 0x12_3456,
            pkey_index: 0,
            slid: 7,
            dlid_path_bits: 1,
            timestamp: u64::MAX - 5,
            solicited: true,
            tm_tag: 0x0123_4567_89ab_cdef,
            rq_taken: None,
        };
        assert_eq!(Cqe::decode(&c.encode()), c);
        let r = Cqe { tm_tag: 0, rq_taken: Some(TakenCount::new(0xfeed_0001, u32::MAX - 2)), ..c };
        assert_eq!(Cqe::decode(&r.encode()), r);
    }

    #[test]
    fn error_completion_hides_invalid_fields() {
        let wc = Cqe::error(9, 0x11, WcStatus::WrFlushErr, 1).to_wc();
        assert_eq!(wc.wr_id(), 9);
        assert_eq!(wc.qp_num(), 0x11);
        assert_eq!(wc.status(), WcStatus::WrFlushErr);
        assert_eq!(wc.vendor_err(), 1);
        assert_eq!(wc.opcode(), None);
        assert_eq!(wc.byte_len(), None);
        assert_eq!(wc.imm_data(), None);
        assert_eq!(wc.src_qp(), None);
    }

    #[test]
    fn imm_is_only_readable_with_the_flag() {
        let mut c = Cqe::success(1, 2, WcOpcode::Recv, 10);
        c.imm = 0xabcd;
        assert_eq!(c.to_wc().imm_data(), None);
        c.wc_flags = WcFlags::WITH_IMM.bits() as u8;
        assert_eq!(c.to_wc().imm_data(), Some(0xabcd));
        assert_eq!(c.to_wc().invalidated_rkey(), None);
        assert_eq!(c.to_wc().opcode(), Some(WcOpcode::Recv));
    }
}
