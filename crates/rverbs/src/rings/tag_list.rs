//! Tag matching on a shared receive queue (ibv_create_srq_ex(3) with `IBV_SRQT_TM`,
//! ibv_post_srq_ops(3), docs/tag-matching.md).
//!
//! Rules, as the man pages and rdma-core's tag-matching documentation state them:
//! - a TM-SRQ holds a matching list of at most `max_num_tags` tagged buffers, added and
//!   removed by IBV_WR_TAG_ADD / IBV_WR_TAG_DEL; an ADD returns a handle;
//! - a SEND reaching the SRQ starts with a tag-matching header (TMH: operation, 3 reserved
//!   bytes, 32-bit application context, 64-bit tag, big endian). An EAGER or RNDV message
//!   whose tag matches an entry (`message tag & entry mask == entry tag & entry mask`)
//!   consumes the earliest-posted such entry: its payload goes to the tagged buffer without
//!   the TMH (EAGER), or the device reads it from the sender (RNDV, `struct ibv_rvh` after
//!   the TMH); anything else takes a plain SRQ receive, whole: a NO_TAG message completes
//!   as IBV_WC_TM_NO_TAG, an unmatched tagged one as IBV_WC_TM_RECV without
//!   IBV_WC_TM_MATCH ("unexpected"), a message without a TMH as IBV_WC_RECV;
//! - phase synchronisation: the device counts unexpected messages; software reports how
//!   many it has handled (`unexpected_cnt` with IBV_OPS_TM_SYNC). A tag posted while
//!   software had not seen every unexpected message (its `unexpected_cnt` is behind the
//!   device's count) does not match until a sync puts software and device in step again
//!   (tags posted before stay in use), and the list operations' completions carry
//!   IBV_WC_TM_SYNC_REQ when their `unexpected_cnt` is not the device's count.
//!
//! The list lives in a shared segment (`tm-<srqn>`), so that a process of this host that
//! delivers a message into the SRQ (docs/queue-pairs.md) matches it as the owner does.
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use bitflags::bitflags;

use crate::error::{Error, Result};
use crate::mr::endpoint::Endpoint;
use crate::mr::Sge;
use crate::rings::recv_ring::RecvWqe;
use crate::rings::tm_recv::{TmRecv, RVH_LEN, TMH_LEN};
use crate::shm::lock::ShmLock;
use crate::shm::{Segment, ShmSafe};


/// The TMH operation (`enum ibv_tmh_op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TmhOp {
    /// A message without a tag: always delivered to a plain SRQ receive.
    NoTag = 0,
    /// A rendezvous request: the receiver reads the data the RVH names.
    Rndv = 1,
    /// The rendezvous completion the receiver sends back.
    Fin = 2,
    /// An eager message: TMH then payload.
    Eager = 3,
}

/// The size limits of a TM-SRQ (`struct ibv_tm_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TmCap {
    /// Tagged buffers the matching list holds.
    pub max_num_tags: u32,
    /// Outstanding list operations (they complete at once on this device).
    pub max_ops: u32,
}

bitflags! {
    /// `enum ibv_ops_flags`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct TagOpFlags: u32 {
        /// Complete the operation to the SRQ's CQ (operations are unsignaled by default).
        const SIGNALED = 1;
        /// `unexpected_cnt` reports how many unexpected messages software handled.
        const TM_SYNC = 1 << 1;
    }
}

/// One tag-list operation (`enum ibv_ops_wr_opcode` with its arguments).
#[derive(Clone, Copy, Debug)]
pub enum TagOpKind<'a> {
    /// IBV_WR_TAG_ADD: a tagged buffer; receive completions carry `recv_wr_id`.
    Add {
        /// The `wr_id` of the buffer's receive completions.
        recv_wr_id: u64,
        /// The buffer.
        sg_list: &'a [Sge],
        /// Matching value.
        tag: u64,
        /// Bits of the tag compared.
        mask: u64,
    },
    /// IBV_WR_TAG_DEL: removes the entry an ADD returned `handle` for.
    Del {
        /// The ADD's handle.
        handle: u32,
    },
    /// IBV_WR_TAG_SYNC: only reports `unexpected_cnt`.
    Sync,
}

/// A work request of ibv_post_srq_ops(3) (`struct ibv_ops_wr`).
#[derive(Clone, Copy, Debug)]
pub struct TagOp<'a> {
    /// Identifies the operation's completion.
    pub wr_id: u64,
    /// What to do.
    pub kind: TagOpKind<'a>,
    /// SIGNALED, TM_SYNC.
    pub flags: TagOpFlags,
    /// Unexpected messages software has handled.
    pub unexpected_cnt: u32,
}

/// What a list operation did: its completion's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpDone {
    /// ADD: the new entry's handle.
    pub(crate) handle: Option<u32>,
    /// DEL of an entry that a message consumed meanwhile (IBV_WC_TM_ERR).
    pub(crate) failed: bool,
    /// Software and device are out of sync (IBV_WC_TM_SYNC_REQ).
    pub(crate) sync_req: bool,
}

/// A parsed TMH (and RVH) at the start of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) op: u8,
    pub(crate) app_ctx: u32,
    pub(crate) tag: u64,
    /// RNDV: (va, rkey, len).
    pub(crate) rvh: Option<(u64, u32, u32)>,
}

impl Header {
    /// The headers at the start of a message of `msg_len` bytes whose first bytes are
    /// `head`; `None` if the message is too short for a TMH.
    pub(crate) fn parse(head: &[u8], msg_len: u64) -> Option<Header> {
        if msg_len < TMH_LEN as u64 || head.len() < TMH_LEN {
            return None;
        }
        let be32 = |b: &[u8]| u32::from_be_bytes(b[..4].try_into().expect("4 bytes"));
        let be64 = |b: &[u8]| u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        let rvh = (head[0] == TmhOp::Rndv as u8 && head.len() >= TMH_LEN + RVH_LEN && msg_len >= (TMH_LEN + RVH_LEN) as u64)
            .then(|| (be64(&head[16..]), be32(&head[24..]), be32(&head[28..])));
        Some(Header { op: head[0], app_ctx: be32(&head[4..]), tag: be64(&head[8..]), rvh })
    }
}

/// The list's header, at byte 0 of the segment.
#[repr(C, align(64))]
#[derive(Default)]
struct ListHdr {
    lock: ShmLock,
    max_tags: AtomicU32,
    max_sge: AtomicU32,
    /// Messages the device deemed unexpected.
    hw_unexpected: AtomicU32,
    /// The last `unexpected_cnt` software reported with IBV_OPS_TM_SYNC.
    sw_synced: AtomicU32,
    /// Order of the ADDs (the earliest matching entry wins).
    seq: AtomicU64,
}

// SAFETY: atomics only.
unsafe impl ShmSafe for ListHdr {}

const HDR_BYTES: usize = std::mem::size_of::<ListHdr>();

/// Words of one entry: state (0 free, else generation << 1 | 1), seq, tag, mask,
/// recv_wr_id, active (1: the entry may match), num_sge, then (addr, length | lkey << 32)
/// per SGE.
const FIXED_WORDS: usize = 7;

fn entry_words(max_sge: usize) -> usize {
    FIXED_WORDS + 2 * max_sge
}

/// A handle: the entry's index and the generation of its slot (a DEL of a consumed
/// entry never removes a later one that reuses the slot).
fn handle_of(index: usize, gen: u64) -> u32 {
    ((gen as u32 & 0xffff) << 16) | index as u32
}

/// The matching list of a TM-SRQ, as its owner or a peer process maps it.
pub(crate) struct TagList {
    seg: Arc<Segment>,
    me: &'static Endpoint,
    max_tags: usize,
    max_sge: usize,
}

/// The name of an SRQ's tag-list segment.
pub(crate) fn segment_name(srqn: u32) -> String {
    format!("tm-{srqn}")
}

impl TagList {
    /// An empty list of `max_tags` entries of up to `max_sge` SGEs at `path`.
    pub(crate) fn create(path: &Path, max_tags: u32, max_sge: u32, me: &'static Endpoint) -> Result<TagList> {
        let (max_tags, max_sge) = (max_tags.max(1) as usize, max_sge.max(1) as usize);
        let seg = Arc::new(Segment::create(path, HDR_BYTES + max_tags * entry_words(max_sge) * 8)?);
        let h = seg.get::<ListHdr>(0);
        h.max_tags.store(max_tags as u32, Ordering::Relaxed);
        h.max_sge.store(max_sge as u32, Ordering::Release);
        Ok(TagList { seg, me, max_tags, max_sge })
    }

    /// A peer's view of a list another endpoint created (its geometry checked against
    /// the segment: a peer may have written anything).
    pub(crate) fn open(seg: Arc<Segment>, me: &'static Endpoint) -> Result<TagList> {
        let h = seg.get::<ListHdr>(0);
        let (t, s) = (h.max_tags.load(Ordering::Acquire) as usize, h.max_sge.load(Ordering::Acquire) as usize);
        let fits = t > 0
            && (1..=crate::limits::TM_MAX_SGE as usize).contains(&s)
            && t <= crate::limits::TM_MAX_TAGS as usize
            && HDR_BYTES + t * entry_words(s) * 8 <= seg.len();
        if !fits {
            return Err(Error::Bug("malformed tag list segment"));
        }
        Ok(TagList { seg, me, max_tags: t, max_sge: s })
    }

    fn hdr(&self) -> &ListHdr {
        self.seg.get(0)
    }

    fn entry(&self, i: usize) -> &[AtomicU64] {
        let w = entry_words(self.max_sge);
        self.seg.slice(HDR_BYTES + i * w * 8, w)
    }

    fn lock(&self) -> crate::shm::lock::ShmGuard<'_> {
        let me = self.me;
        self.hdr().lock.lock(me.ep(), me)
    }

    fn in_sync(&self) -> bool {
        let h = self.hdr();
        h.hw_unexpected.load(Ordering::Acquire) == h.sw_synced.load(Ordering::Acquire)
    }

    /// Carries out one list operation (ibv_post_srq_ops(3)). A DEL of a handle no ADD
    /// returned, or whose entry is gone, completes with IBV_WC_TM_ERR (the entry may have
    /// been consumed by a message meanwhile).
    ///
    /// Errors: an ADD with more SGEs than the list's `max_sge` (EINVAL), or into a full
    /// list (ENOMEM).
    pub(crate) fn apply(&self, op: &TagOp<'_>) -> Result<OpDone> {
        let _g = self.lock();
        let h = self.hdr();
        if op.flags.contains(TagOpFlags::TM_SYNC) {
            h.sw_synced.store(op.unexpected_cnt, Ordering::Release);
            if self.in_sync() {
                // Software has handled every unexpected message: the tags it posted
                // meanwhile may match from now on.
                for i in 0..self.max_tags {
                    self.entry(i)[5].store(1, Ordering::Relaxed);
                }
            }
        }
        let hw = h.hw_unexpected.load(Ordering::Acquire);
        let mut done = OpDone { handle: None, failed: false, sync_req: false };
        match op.kind {
            TagOpKind::Add { recv_wr_id, sg_list, tag, mask } => {
                if sg_list.len() > self.max_sge {
                    return Err(Error::TooManySge { max: self.max_sge as u32, got: sg_list.len() as u32 });
                }
                let free = (0..self.max_tags).find(|&i| self.entry(i)[0].load(Ordering::Relaxed) & 1 == 0);
                let Some(i) = free else {
                    return Err(Error::QueueFull { verb: "post_srq_ops", max: self.max_tags as u32 });
                };
                let e = self.entry(i);
                let gen = (e[0].load(Ordering::Relaxed) >> 1).wrapping_add(1);
                e[1].store(h.seq.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
                e[2].store(tag & mask, Ordering::Relaxed);
                e[3].store(mask, Ordering::Relaxed);
                e[4].store(recv_wr_id, Ordering::Relaxed);
                // A tag posted while software had not seen every unexpected message might
                // belong to one of them: it waits for the next sync.
                e[5].store(u64::from(op.unexpected_cnt == hw || self.in_sync()), Ordering::Relaxed);
                e[6].store(sg_list.len() as u64, Ordering::Relaxed);
                for (k, s) in sg_list.iter().enumerate() {
                    e[FIXED_WORDS + 2 * k].store(s.addr, Ordering::Relaxed);
                    e[FIXED_WORDS + 2 * k + 1].store(u64::from(s.length) | u64::from(s.lkey) << 32, Ordering::Relaxed);
                }
                e[0].store(gen << 1 | 1, Ordering::Release);
                done.handle = Some(handle_of(i, gen));
                done.sync_req = op.unexpected_cnt != hw;
            }
            TagOpKind::Del { handle } => {
                let i = (handle & 0xffff) as usize;
                let live = i < self.max_tags && {
                    let state = self.entry(i)[0].load(Ordering::Acquire);
                    state & 1 == 1 && handle_of(i, state >> 1) == handle
                };
                if live {
                    let e = self.entry(i);
                    e[0].store(e[0].load(Ordering::Relaxed) & !1, Ordering::Release);
                } else {
                    done.failed = true;
                }
                done.sync_req = op.unexpected_cnt != hw;
            }
            TagOpKind::Sync => done.sync_req = !self.in_sync(),
        }
        Ok(done)
    }

    /// Decides how a message whose headers are `hdr` is delivered, under the list's lock:
    /// a matching, eligible entry is consumed and returned as the receive; otherwise
    /// `plain` is asked for a plain SRQ receive, and a tagged message that gets one counts
    /// as unexpected. `None`: no receive at all (RNR; nothing is counted).
    pub(crate) fn deliver(&self, hdr: Option<Header>, plain: impl FnOnce() -> Option<RecvWqe>) -> Option<RecvWqe> {
        let _g = self.lock();
        let h = self.hdr();
        let tagged = hdr.filter(|x| x.op == TmhOp::Eager as u8 || x.op == TmhOp::Rndv as u8);
        if let Some(x) = tagged {
            if let Some(mut wqe) = self.take_match(x.tag) {
                wqe.tm = Some(match x.rvh {
                    Some((va, rkey, len)) if x.op == TmhOp::Rndv as u8 => {
                        TmRecv::Rndv { tag: x.tag, app_ctx: x.app_ctx, va, rkey, len, offload: wqe.capacity() >= u64::from(len) }
                    }
                    // A RNDV request too short for its RVH is handed over as is.
                    None if x.op == TmhOp::Rndv as u8 => {
                        TmRecv::Rndv { tag: x.tag, app_ctx: x.app_ctx, va: 0, rkey: 0, len: 0, offload: false }
                    }
                    _ => TmRecv::Eager { tag: x.tag, app_ctx: x.app_ctx },
                });
                return Some(wqe);
            }
        }
        let mut wqe = plain()?;
        wqe.tm = Some(match hdr {
            Some(_) if tagged.is_some() => {
                h.hw_unexpected.fetch_add(1, Ordering::AcqRel);
                TmRecv::Unexpected
            }
            Some(x) if x.op == TmhOp::NoTag as u8 => TmRecv::NoTag,
            _ => TmRecv::Plain,
        });
        Some(wqe)
    }

    /// Removes and returns the earliest-posted active entry matching `tag` (caller holds
    /// the lock). An entry is active when it was posted knowing every unexpected message
    /// so far, or once a sync put software and device back in step.
    fn take_match(&self, tag: u64) -> Option<RecvWqe> {
        let mut best: Option<(u64, usize)> = None;
        for i in 0..self.max_tags {
            let e = self.entry(i);
            if e[0].load(Ordering::Acquire) & 1 == 0 {
                continue;
            }
            let (seq, want, mask) = (e[1].load(Ordering::Relaxed), e[2].load(Ordering::Relaxed), e[3].load(Ordering::Relaxed));
            let eligible = e[5].load(Ordering::Relaxed) == 1;
            if eligible && tag & mask == want & mask && best.is_none_or(|(s, _)| seq < s) {
                best = Some((seq, i));
            }
        }
        let (_, i) = best?;
        let e = self.entry(i);
        let n = (e[6].load(Ordering::Relaxed) as usize).min(self.max_sge);
        let sges = (0..n)
            .map(|k| {
                let lk = e[FIXED_WORDS + 2 * k + 1].load(Ordering::Relaxed);
                Sge { addr: e[FIXED_WORDS + 2 * k].load(Ordering::Relaxed), length: lk as u32, lkey: (lk >> 32) as u32 }
            })
            .collect();
        let wr_id = e[4].load(Ordering::Relaxed);
        e[0].store(e[0].load(Ordering::Relaxed) & !1, Ordering::Release);
        Some(RecvWqe::new(wr_id, sges))
    }

    /// Entries in the list (a snapshot).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        (0..self.max_tags).filter(|&i| self.entry(i)[0].load(Ordering::Acquire) & 1 == 1).count()
    }
}

/// Checks a TM-SRQ's `tm_cap` against the device's (ibv_create_srq_ex(3)).
pub(crate) fn check_cap(cap: &TmCap) -> Result<()> {
    let verb = "create_srq_ex";
    if cap.max_num_tags == 0 || cap.max_num_tags > crate::limits::TM_MAX_TAGS {
        return Err(Error::Limit { verb, what: "max_num_tags", max: crate::limits::TM_MAX_TAGS.into(), got: cap.max_num_tags.into() });
    }
    if cap.max_ops > crate::limits::TM_MAX_OPS {
        return Err(Error::Limit { verb, what: "max_ops", max: crate::limits::TM_MAX_OPS.into(), got: cap.max_ops.into() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> &'static Endpoint {
        &crate::device::device().endpoint
    }

    fn list(tag: &str, n: u32) -> (TagList, std::path::PathBuf) {
        let d = std::env::temp_dir().join(format!("rverbs-tm-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        (TagList::create(&d.join("tm"), n, 2, me()).unwrap(), d)
    }

    fn tmh(op: TmhOp, tag: u64, app_ctx: u32) -> Vec<u8> {
        let mut h = vec![op as u8, 0, 0, 0];
        h.extend_from_slice(&app_ctx.to_be_bytes());
        h.extend_from_slice(&tag.to_be_bytes());
        h
    }

    fn add(l: &TagList, wr_id: u64, tag: u64, cnt: u32) -> OpDone {
        let s = [Sge { addr: 0x1000, length: 64, lkey: 5 }];
        let kind = TagOpKind::Add { recv_wr_id: wr_id, sg_list: &s, tag, mask: 0xffff };
        l.apply(&TagOp { wr_id, kind, flags: TagOpFlags::SIGNALED, unexpected_cnt: cnt }).unwrap()
    }

    fn plain() -> Option<RecvWqe> {
        Some(RecvWqe::new(77, Default::default()))
    }

    #[test]
    fn the_earliest_matching_entry_is_consumed_and_the_tmh_is_skipped() {
        let (l, d) = list("order", 4);
        add(&l, 1, 0x10, 0);
        add(&l, 2, 0x20, 0);
        add(&l, 3, 0x1_0020, 0); // masked to 0x20, posted later
        let h = tmh(TmhOp::Eager, 0x20, 9);
        let w = l.deliver(Header::parse(&h, 100), plain).unwrap();
        assert_eq!(w.wr_id, 2);
        assert_eq!(w.tm, Some(TmRecv::Eager { tag: 0x20, app_ctx: 9 }));
        assert_eq!(w.tm.unwrap().skip(), 16);
        let w = l.deliver(Header::parse(&h, 100), plain).unwrap();
        assert_eq!(w.wr_id, 3);
        assert_eq!(l.len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unmatched_no_tag_and_headerless_messages_take_plain_receives() {
        let (l, d) = list("plain", 2);
        add(&l, 1, 0x10, 0);
        let w = l.deliver(Header::parse(&tmh(TmhOp::Eager, 0x99, 0), 16), plain).unwrap();
        assert_eq!((w.wr_id, w.tm), (77, Some(TmRecv::Unexpected)));
        let w = l.deliver(Header::parse(&tmh(TmhOp::NoTag, 0x10, 0), 16), plain).unwrap();
        assert_eq!(w.tm, Some(TmRecv::NoTag));
        let w = l.deliver(Header::parse(&[3u8; 8], 8), plain).unwrap();
        assert_eq!(w.tm, Some(TmRecv::Plain));
        // No plain receive: RNR, and the message is not counted as unexpected.
        assert!(l.deliver(Header::parse(&tmh(TmhOp::Eager, 0x98, 0), 16), || None).is_none());
        assert_eq!(l.hdr().hw_unexpected.load(Ordering::Relaxed), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_tag_posted_before_an_unexpected_message_stays_in_use() {
        let (l, d) = list("before", 4);
        add(&l, 1, 0x10, 0);
        let w = l.deliver(Header::parse(&tmh(TmhOp::Eager, 0x50, 0), 16), plain).unwrap();
        assert_eq!(w.tm, Some(TmRecv::Unexpected));
        let w = l.deliver(Header::parse(&tmh(TmhOp::Eager, 0x10, 0), 16), plain).unwrap();
        assert_eq!(w.wr_id, 1, "posted in step with the device: still matches");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_tag_posted_behind_the_unexpected_count_waits_for_the_sync() {
        let (l, d) = list("phase", 4);
        // One unexpected message: the device's count is 1, software reported 0.
        l.deliver(Header::parse(&tmh(TmhOp::Eager, 0x50, 0), 16), plain).unwrap();
        let stale = add(&l, 1, 0x10, 0);
        assert!(stale.sync_req, "ADD behind the count asks for a sync");
        let m = tmh(TmhOp::Eager, 0x10, 0);
        let w = l.deliver(Header::parse(&m, 16), plain).unwrap();
        assert_eq!(w.tm, Some(TmRecv::Unexpected), "the stale tag does not match");
        let sync = TagOp { wr_id: 9, kind: TagOpKind::Sync, flags: TagOpFlags::TM_SYNC, unexpected_cnt: 2 };
        assert!(!l.apply(&sync).unwrap().sync_req);
        let w = l.deliver(Header::parse(&m, 16), plain).unwrap();
        assert_eq!(w.wr_id, 1, "in sync again: the tag matches");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn del_of_a_consumed_entry_fails_and_never_removes_its_successor() {
        let (l, d) = list("del", 1);
        let h1 = add(&l, 1, 0x10, 0).handle.unwrap();
        l.deliver(Header::parse(&tmh(TmhOp::Eager, 0x10, 0), 16), plain).unwrap();
        let h2 = add(&l, 2, 0x10, 0).handle.unwrap();
        assert_ne!(h1, h2);
        let del = |handle| TagOp { wr_id: 0, kind: TagOpKind::Del { handle }, flags: TagOpFlags::empty(), unexpected_cnt: 0 };
        assert!(l.apply(&del(h1)).unwrap().failed);
        assert_eq!(l.len(), 1);
        assert!(!l.apply(&del(h2)).unwrap().failed);
        assert_eq!(l.len(), 0);
        // A full list refuses an ADD.
        add(&l, 3, 1, 0);
        let s = [Sge { addr: 0, length: 1, lkey: 1 }];
        let kind = TagOpKind::Add { recv_wr_id: 4, sg_list: &s, tag: 1, mask: 1 };
        let e = l.apply(&TagOp { wr_id: 4, kind, flags: TagOpFlags::empty(), unexpected_cnt: 0 }).unwrap_err();
        assert_eq!(e.errno(), libc::ENOMEM);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_rendezvous_request_names_the_senders_buffer() {
        let (l, d) = list("rndv", 2);
        add(&l, 1, 0x7, 0);
        let mut m = tmh(TmhOp::Rndv, 0x7, 3);
        m.extend_from_slice(&0xdead_0000u64.to_be_bytes());
        m.extend_from_slice(&0x1234u32.to_be_bytes());
        m.extend_from_slice(&32u32.to_be_bytes());
        let w = l.deliver(Header::parse(&m, 64), plain).unwrap();
        let want = TmRecv::Rndv { tag: 7, app_ctx: 3, va: 0xdead_0000, rkey: 0x1234, len: 32, offload: true };
        assert_eq!(w.tm, Some(want));
        assert!(!want.places());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
