//! The send queue: validation of send work requests at post time and their storage
//! until completion.
//!
//! Rule: ibv_post_send(3) and rxe's `validate_send_wr`: a work request is refused with
//! EINVAL if its opcode is not allowed on the QP type, it has more SGEs than
//! `max_send_sge`, its length exceeds the port's `max_msg_sz`, an atomic is not exactly
//! 8 bytes or its remote address is not 8-byte aligned, or inline data is requested for
//! an opcode that carries none or exceeds `max_inline_data`; with ENOMEM if the queue is
//! full. The first refused request is reported; the ones before it stay posted.

use std::sync::Arc;

use rverbs_proto::verbs::{Access, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};

use crate::gid::Gid;
use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::mr::endpoint::Endpoint;
use crate::mr::{self, MrInner, Sge};
use crate::mw::MwInner;
use crate::rings::qp_attr::AddressVector;
use crate::rings::wr::{FlushWr, Payload, SendWr};
use crate::rings::wc::Cqe;

/// The requester's copy of the QP attributes it needs, updated by `modify_qp` under the
/// send-queue lock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReqView {
    pub(crate) dest_qpn: u32,
    pub(crate) dgid: Gid,
    pub(crate) sgid: Gid,
    pub(crate) timeout: u8,
    pub(crate) max_rd_atomic: u8,
    /// The destination is another host reached by the network transport (the path's
    /// destination GID is not this device's and a socket serves its source GID): the
    /// requester runs the protocol core's machine over UDP (`transport::net`).
    pub(crate) network: bool,
    /// Path MTU in bytes (the smaller of `path_mtu` and the port's active MTU).
    pub(crate) mtu: u32,
    /// `sq_psn`.
    pub(crate) sq_psn: u32,
    /// `retry_cnt` and `rnr_retry` (3 bits each).
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
}

/// A UD destination resolved at post time.
#[derive(Clone)]
pub(crate) struct UdAv {
    /// The address handle's resolved address vector (a copy: the handle may be
    /// destroyed while the work request is queued).
    pub(crate) ah: AddressVector,
    pub(crate) remote_qpn: u32,
    pub(crate) remote_qkey: u32,
}

/// A memory-window bind, resolved at post time.
#[derive(Clone)]
pub(crate) struct BindWqe {
    pub(crate) mw: Arc<MwInner>,
    pub(crate) rkey: u32,
    pub(crate) mr: Option<Arc<MrInner>>,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

/// What completing a work request needs once it leaves the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retired {
    pub(crate) wr_id: u64,
    pub(crate) flags: SendFlags,
    /// [`SendWqe::hold_ms`].
    pub(crate) hold_ms: u32,
}

/// A posted send work request.
#[derive(Clone, Default)]
pub(crate) struct SendWqe {
    pub(crate) wr_id: u64,
    pub(crate) opcode: Option<WrOpcode>,
    pub(crate) flags: SendFlags,
    pub(crate) imm: u32,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) ud: Option<UdAv>,
    pub(crate) bind: Option<BindWqe>,
    pub(crate) flush: Option<FlushWr>,
    pub(crate) xrc_srqn: u32,
    pub(crate) num_sge: usize,
    /// Inline payload length (the bytes live in the queue's inline area).
    pub(crate) inline_len: Option<usize>,
    pub(crate) total_len: u64,
    /// The fault plan completes it with this status, nothing sent
    /// (docs/fault-injection.md).
    pub(crate) injected: Option<WcStatus>,
    /// The fault plan holds its completion back this many milliseconds (0: not held;
    /// `wc_delay=`, docs/fault-injection.md).
    pub(crate) hold_ms: u32,
}

impl SendWqe {
    pub(crate) fn opcode(&self) -> WrOpcode {
        self.opcode.unwrap_or(WrOpcode::Send)
    }

    /// Its successful completion on QP `qpn` (ibv_poll_cq(3): the opcode of the work
    /// request; `byte_len` its length, 8 for atomics, 0 for local operations).
    pub(crate) fn success(&self, qpn: u32) -> Cqe {
        let op = self.opcode();
        let opcode = op.wc_opcode().unwrap_or(WcOpcode::Send);
        let byte_len = match op {
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => 8,
            WrOpcode::BindMw | WrOpcode::LocalInv => 0,
            _ => self.total_len as u32,
        };
        Cqe::success(self.wr_id, qpn, opcode, byte_len)
    }
}

/// The send queue's storage: posted work requests, oldest first, with their scatter
/// lists and inline bytes, until they complete.
pub(crate) struct Ring {
    cap: usize,
    max_sge: usize,
    max_inline: usize,
    wqes: Vec<SendWqe>,
    sges: Vec<Sge>,
    keep: Vec<Option<Arc<MrInner>>>,
    /// Some posted request keeps regions alive (the Rust API): retiring clears them.
    keeps: bool,
    inline: Vec<u8>,
    head: usize,
    count: usize,
}

impl Ring {
    /// The scatter entries and inline bytes a work request of this queue may have.
    pub(crate) fn limits(&self) -> (usize, usize) {
        (self.max_sge, self.max_inline)
    }

    pub(crate) fn new(max_wr: u32, max_sge: u32, max_inline: u32) -> Self {
        let cap = max_wr.max(1) as usize;
        let max_sge = max_sge.max(1) as usize;
        Ring {
            cap,
            max_sge,
            max_inline: max_inline as usize,
            wqes: vec![SendWqe::default(); cap],
            sges: vec![Sge::default(); cap * max_sge],
            keep: vec![None; cap * max_sge],
            keeps: false,
            inline: vec![0; cap * max_inline as usize],
            head: 0,
            count: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The slot of position `i` of the ring, `i < 2 × cap` (a head and an offset within
    /// the count): one compare instead of a division on every post, hand-over and retire.
    #[inline]
    fn wrap(&self, i: usize) -> usize {
        debug_assert!(i < 2 * self.cap);
        if i >= self.cap { i - self.cap } else { i }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The oldest work request, with its scatter list and inline bytes.
    #[inline]
    pub(crate) fn head(&self) -> Option<(&SendWqe, &[Sge], &[u8])> {
        (self.count != 0).then(|| self.slot_parts(self.head))
    }

    /// The work request `i` places after the oldest (0 is the oldest), with its scatter
    /// list and inline bytes.
    #[inline]
    pub(crate) fn nth(&self, i: usize) -> Option<(&SendWqe, &[Sge], &[u8])> {
        (i < self.count).then(|| self.slot_parts(self.wrap(self.head + i)))
    }

    /// The WQE of `slot` with its scatter list and inline bytes.
    #[inline]
    fn slot_parts(&self, slot: usize) -> (&SendWqe, &[Sge], &[u8]) {
        let w = &self.wqes[slot];
        let base = slot * self.max_sge;
        let inl = w.inline_len.map(|n| &self.inline[slot * self.max_inline..slot * self.max_inline + n]).unwrap_or(&[]);
        (w, &self.sges[base..base + w.num_sge], inl)
    }

    /// Removes the oldest work request.
    pub(crate) fn pop(&mut self) -> Option<Retired> {
        if self.count == 0 {
            return None;
        }
        // Retire in place: only the handles the WQE holds are released (the rest is
        // overwritten by the next post), so nothing large is moved.
        let w = &mut self.wqes[self.head];
        let retired = Retired { wr_id: w.wr_id, flags: w.flags, hold_ms: w.hold_ms };
        w.ud = None;
        w.bind = None;
        if self.keeps {
            let base = self.head * self.max_sge;
            for k in &mut self.keep[base..base + self.max_sge] {
                *k = None;
            }
        }
        self.head = self.wrap(self.head + 1);
        self.count -= 1;
        Some(retired)
    }

    /// The newest work request completes with `status` instead of running (the fault
    /// plan, docs/fault-injection.md).
    pub(crate) fn fail_newest(&mut self, status: WcStatus) {
        if self.count > 0 {
            let slot = self.wrap(self.head + self.count - 1);
            self.wqes[slot].injected = Some(status);
        }
    }

    /// The newest work request's completion is held back `delay` (the fault plan's
    /// `wc_delay=`, docs/fault-injection.md).
    pub(crate) fn hold_newest(&mut self, delay: std::time::Duration) {
        if self.count > 0 {
            let slot = self.wrap(self.head + self.count - 1);
            self.wqes[slot].hold_ms = u32::try_from(delay.as_millis()).unwrap_or(u32::MAX);
        }
    }

    /// Removes the newest work requests until `count` remain (an aborted batch).
    pub(crate) fn truncate(&mut self, count: usize) {
        while self.count > count {
            let slot = self.wrap(self.head + self.count - 1);
            self.wqes[slot] = SendWqe::default();
            let base = slot * self.max_sge;
            for k in &mut self.keep[base..base + self.max_sge] {
                *k = None;
            }
            self.count -= 1;
        }
    }

    /// Validates `wr` (from a QP of PD `pd`, whose keys are `endpoint`'s) and appends it.
    pub(crate) fn push(
        &mut self,
        endpoint: &Endpoint,
        pd: u32,
        qp_type: QpType,
        wr: &SendWr<'_>,
        keep: bool,
    ) -> Result<()> {
        let verb = "post_send";
        let op = wr.opcode;
        if !op.allowed_on(qp_type) {
            return Err(Error::invalid(verb, Rule::OpcodeForQpType { opcode: op, qp_type }));
        }
        if matches!(op, WrOpcode::Tso | WrOpcode::Driver1) {
            return Err(Error::unsupported(verb, "this work request opcode"));
        }
        let inline_flag = wr.flags.contains(SendFlags::INLINE)
            || matches!(wr.payload, Payload::Inline(_) | Payload::InlineList(_));
        let (num_sge, mut total): (usize, u64) = match wr.payload {
            Payload::Sge(s) => (s.len(), s.iter().map(|s| u64::from(s.length)).sum()),
            Payload::Inline(b) => (0, b.len() as u64),
            Payload::InlineList(l) => (0, l.iter().map(|b| b.len() as u64).sum()),
        };
        match op {
            WrOpcode::BindMw
                // rxe provider: a bind carries no data and no immediate.
                if (total != 0 || num_sge != 0 || wr.imm_data != 0 || wr.bind.is_none()) => {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
            WrOpcode::LocalInv
                if (total != 0 || num_sge != 0) => {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
            WrOpcode::AtomicWrite => {
                if total != 0 || num_sge != 0 {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
                total = 8;
            }
            WrOpcode::Flush => {
                let Some(f) = wr.flush else {
                    return Err(Error::invalid(verb, Rule::FlushParams));
                };
                if num_sge != 0 {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
                total = u64::from(f.len);
            }
            _ => {}
        }
        if num_sge > self.max_sge {
            return Err(Error::TooManySge { max: self.max_sge as u32, got: num_sge as u32 });
        }
        if total > u64::from(limits::MAX_MSG_SZ) {
            return Err(Error::Limit {
                verb,
                what: "message length",
                max: limits::MAX_MSG_SZ.into(),
                got: total,
            });
        }
        if op.is_atomic() {
            if total != 8 {
                return Err(Error::invalid(verb, Rule::AtomicLength { len: total }));
            }
            if !wr.remote_addr.is_multiple_of(8) {
                return Err(Error::invalid(verb, Rule::AtomicAlignment { addr: wr.remote_addr }));
            }
        }
        if inline_flag && !op.carries_payload() {
            return Err(Error::invalid(verb, Rule::InlineWithoutData { opcode: op }));
        }
        if inline_flag && total > self.max_inline as u64 {
            return Err(Error::Limit {
                verb,
                what: "inline data",
                max: self.max_inline as u64,
                got: total,
            });
        }
        if qp_type == QpType::Ud && wr.ud.is_none() {
            return Err(Error::invalid(verb, Rule::UdNeedsAh));
        }
        if self.count == self.cap {
            return Err(Error::QueueFull { verb, max: self.cap as u32 });
        }
        let slot = self.wrap(self.head + self.count);
        // Written in place: a work request is a few hundred bytes, posted on the hot path.
        let wqe = &mut self.wqes[slot];
        wqe.wr_id = wr.wr_id;
        wqe.opcode = Some(op);
        wqe.flags = wr.flags;
        wqe.imm = wr.imm_data;
        wqe.remote_addr = wr.remote_addr;
        wqe.rkey = wr.rkey;
        wqe.compare_add = wr.compare_add;
        wqe.swap = wr.swap;
        wqe.ud = wr.ud.map(|u| UdAv { ah: *u.ah, remote_qpn: u.remote_qpn, remote_qkey: u.remote_qkey });
        wqe.bind = wr.bind.map(|b| BindWqe {
            mw: b.mw.inner().clone(),
            rkey: b.rkey,
            mr: b.bind.mr.map(|m| m.inner().clone()),
            addr: b.bind.addr,
            len: b.bind.length,
            access: b.bind.access,
        });
        wqe.flush = wr.flush;
        wqe.xrc_srqn = wr.xrc_remote_srqn;
        wqe.num_sge = 0;
        wqe.inline_len = None;
        wqe.total_len = total;
        wqe.injected = None;
        wqe.hold_ms = 0;
        if inline_flag {
            let dst = &mut self.inline[slot * self.max_inline..(slot + 1) * self.max_inline];
            let mut off = 0;
            match wr.payload {
                Payload::Inline(b) => {
                    dst[..b.len()].copy_from_slice(b);
                    off = b.len();
                }
                Payload::InlineList(list) => {
                    for b in list {
                        dst[off..off + b.len()].copy_from_slice(b);
                        off += b.len();
                    }
                }
                Payload::Sge(sges) => {
                    // The Rust API reads inline SGEs through the usual local checks.
                    let keys = mr::KeySpace::local(endpoint);
                    for s in sges {
                        let outside = || Error::invalid(verb, Rule::InlineOutsideRegion);
                        let p = keys
                            .pin(s.lkey, pd, mr::KeyUse::Local, s.addr, s.length.into(), Access::empty())
                            .map_err(|_| outside())?;
                        mr::copy_out(&p, &mut dst[off..off + p.len]).map_err(|_| outside())?;
                        off += p.len;
                    }
                }
            }
            wqe.inline_len = Some(off);
        } else if let Payload::Sge(sges) = wr.payload {
            let base = slot * self.max_sge;
            if let [one] = sges {
                // Most requests have one entry: a store, not a call to memcpy.
                self.sges[base] = *one;
            } else {
                self.sges[base..base + sges.len()].copy_from_slice(sges);
            }
            if keep {
                self.keeps = true;
                for (i, s) in sges.iter().enumerate() {
                    self.keep[base + i] = endpoint.keys.mr(s.lkey);
                }
            } else if self.keeps {
                self.keep[base..base + sges.len()].iter_mut().for_each(|k| *k = None);
            }
            wqe.num_sge = sges.len();
        }
        self.count += 1;
        Ok(())
    }
}

/// The capacity a QP really gets for a requested `max_inline_data` (shared with the SGE
/// area, as rxe does: at least `max_send_sge` × 16 bytes).
pub(crate) fn granted_inline(max_send_sge: u32, max_inline: u32) -> u32 {
    max_inline.max(max_send_sge.saturating_mul(16)).min(limits::MAX_INLINE_DATA)
}
