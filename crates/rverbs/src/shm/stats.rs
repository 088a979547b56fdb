//! Per-QP and per-CQ statistics (issue 23, observability): what the owner of each QP and
//! CQ posted and polled, in a segment `stats` of the endpoint directory that other
//! processes (`rverbs stat --qp`) read (docs/device.md, "Per-QP and per-CQ statistics").
//!
//! Rule (as the `counters` segment, `shm::counters`): only the owner process writes,
//! with relaxed atomic adds; other processes only read. The segment exists only on a
//! device opened with statistics on (`DeviceConfig::stats`, `RVERBS_STATS=1`): off, the
//! post and poll paths test one `Option` of the endpoint and count nothing.
//!
//! Layout: a header (magic, written last with Release; the highest QP and CQ slot used
//! plus one, so a reader scans only those), then one [`QpStatsRecord`] per QP slot (the
//! QP table index, the low [`crate::table::LOCAL_BITS`] bits of the QPN, docs/device.md
//! "Numbers"), then one [`CqStatsRecord`] per CQ slot, then one [`LatencyRecord`] per QP
//! slot (`shm::latency`). A record is tagged with its object's number plus one while the
//! object lives (0: free); the segment is sparse and a record's pages are reserved when
//! its object is created.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::latency::{Latency, LatencyRecord};
use super::{Segment, ShmSafe};
use crate::error::{Error, Result};

/// Name of the statistics segment in the endpoint directory.
pub(crate) const NAME: &str = "stats";

/// "rvstat" and the layout's version (2: the records below, with the latency buckets).
const MAGIC: u64 = 0x7276_7374_6174_0002;

/// Records of each kind: one per slot of the QP and CQ tables.
const RECORDS: usize = 1 << crate::table::LOCAL_BITS;

/// The segment's first cache line.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    /// The highest QP slot ever tagged, plus one.
    qp_high: AtomicU64,
    /// The highest CQ slot ever tagged, plus one.
    cq_high: AtomicU64,
    _spare: [AtomicU64; 5],
}

/// The counts of one QP slot, one cache line.
#[repr(C)]
pub(crate) struct QpStatsRecord {
    /// The QPN plus one while the QP lives; 0 when free.
    tag: AtomicU64,
    send_wrs: AtomicU64,
    recv_wrs: AtomicU64,
    send_ok: AtomicU64,
    send_bytes: AtomicU64,
    recv_ok: AtomicU64,
    recv_bytes: AtomicU64,
    errors: AtomicU64,
}

/// The counts of one CQ slot, one cache line.
#[repr(C)]
pub(crate) struct CqStatsRecord {
    /// The CQ number plus one while the CQ lives; 0 when free.
    tag: AtomicU64,
    polled: AtomicU64,
    empty_polls: AtomicU64,
    /// 1 once a poll found the CQ overrun.
    overrun: AtomicU64,
    /// The most completions a poll found waiting.
    deepest: AtomicU64,
    /// The CQ's size (`cqe` of ibv_create_cq(3), ibv_resize_cq(3)).
    size: AtomicU64,
    _spare: [AtomicU64; 2],
}

// SAFETY: `#[repr(C)]` structs of `AtomicU64` only, without padding: every bit pattern is
// a valid value and all mutation goes through the atomics.
unsafe impl ShmSafe for Header {}
// SAFETY: as above.
unsafe impl ShmSafe for QpStatsRecord {}
// SAFETY: as above.
unsafe impl ShmSafe for CqStatsRecord {}

const _: () = assert!(std::mem::size_of::<Header>() == 64);
const _: () = assert!(std::mem::size_of::<QpStatsRecord>() == 64);
const _: () = assert!(std::mem::size_of::<CqStatsRecord>() == 64);

const QP_OFF: usize = std::mem::size_of::<Header>();
const CQ_OFF: usize = QP_OFF + RECORDS * std::mem::size_of::<QpStatsRecord>();
const LAT_OFF: usize = CQ_OFF + RECORDS * std::mem::size_of::<CqStatsRecord>();
const TOTAL: usize = LAT_OFF + RECORDS * std::mem::size_of::<LatencyRecord>();

/// The slot of a QP or CQ number (its endpoint bits dropped).
fn slot(num: u32) -> usize {
    num as usize & (RECORDS - 1)
}

/// What one polled completion was, for its QP's record ([`Stats::completion`]).
///
/// Rule (ibv_poll_cq(3)): a completion in error has only `wr_id`, `status`, `qp_num`
/// and `vendor_err` valid, so it is an `Error` without a direction or bytes; a
/// successful one is a `Recv` when its opcode has `IBV_WC_RECV` set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// A successful send-side completion and its `byte_len`.
    Send { bytes: u32 },
    /// A successful receive completion and its `byte_len`.
    Recv { bytes: u32 },
    /// A completion in error.
    Error,
}

/// The statistics segment of one endpoint (this process's, or a peer's mapped).
pub(crate) struct Stats {
    seg: Segment,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").field("seg", &self.seg).finish()
    }
}

impl Stats {
    /// Creates the segment of the endpoint in `dir` (all zero, sparse), kept for the life
    /// of the process.
    pub(crate) fn create(dir: &Path) -> Result<&'static Stats> {
        let seg = Segment::create_sparse(&dir.join(NAME), TOTAL)?;
        seg.reserve(0, QP_OFF)?;
        let stats: &'static Stats = Box::leak(Box::new(Stats { seg }));
        stats.header().magic.store(MAGIC, Ordering::Release);
        Ok(stats)
    }

    fn header(&self) -> &Header {
        self.seg.get(0)
    }

    fn qp(&self, num: u32) -> &QpStatsRecord {
        self.seg.get(QP_OFF + slot(num) * std::mem::size_of::<QpStatsRecord>())
    }

    fn cq(&self, num: u32) -> &CqStatsRecord {
        self.seg.get(CQ_OFF + slot(num) * std::mem::size_of::<CqStatsRecord>())
    }

    fn latency(&self, num: u32) -> &LatencyRecord {
        self.seg.get(LAT_OFF + slot(num) * std::mem::size_of::<LatencyRecord>())
    }

    /// Starts the counts of QP `qpn` (at its creation): its record zeroed and tagged.
    /// Errors: ENOMEM when the runtime directory has no room for the record's page.
    pub(crate) fn claim_qp(&self, qpn: u32) -> Result<()> {
        let off = QP_OFF + slot(qpn) * std::mem::size_of::<QpStatsRecord>();
        self.seg.reserve(off, std::mem::size_of::<QpStatsRecord>())?;
        let lat = LAT_OFF + slot(qpn) * std::mem::size_of::<LatencyRecord>();
        self.seg.reserve(lat, std::mem::size_of::<LatencyRecord>())?;
        let r = self.qp(qpn);
        for w in [&r.send_wrs, &r.recv_wrs, &r.send_ok, &r.send_bytes, &r.recv_ok, &r.recv_bytes, &r.errors] {
            w.store(0, Ordering::Relaxed);
        }
        self.latency(qpn).clear();
        r.tag.store(u64::from(qpn) + 1, Ordering::Release);
        self.header().qp_high.fetch_max(slot(qpn) as u64 + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Ends the counts of QP `qpn` (destroyed): its record is free.
    pub(crate) fn release_qp(&self, qpn: u32) {
        let _ = self.qp(qpn).tag.compare_exchange(u64::from(qpn) + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// As [`Stats::claim_qp`], for CQ `id`.
    pub(crate) fn claim_cq(&self, id: u32) -> Result<()> {
        let off = CQ_OFF + slot(id) * std::mem::size_of::<CqStatsRecord>();
        self.seg.reserve(off, std::mem::size_of::<CqStatsRecord>())?;
        let r = self.cq(id);
        for w in [&r.polled, &r.empty_polls, &r.overrun, &r.deepest, &r.size] {
            w.store(0, Ordering::Relaxed);
        }
        r.tag.store(u64::from(id) + 1, Ordering::Release);
        self.header().cq_high.fetch_max(slot(id) as u64 + 1, Ordering::Relaxed);
        Ok(())
    }

    /// As [`Stats::release_qp`], for CQ `id`.
    pub(crate) fn release_cq(&self, id: u32) {
        let _ = self.cq(id).tag.compare_exchange(u64::from(id) + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Counts `n` send work requests posted on QP `qpn`.
    #[inline]
    pub(crate) fn sends_posted(&self, qpn: u32, n: usize) {
        if n != 0 {
            self.qp(qpn).send_wrs.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Counts `n` receive work requests posted on QP `qpn`.
    #[inline]
    pub(crate) fn recvs_posted(&self, qpn: u32, n: usize) {
        if n != 0 {
            self.qp(qpn).recv_wrs.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Counts the latency of one send work request of QP `qpn` that completed
    /// successfully, `ns` nanoseconds from its post to its completion.
    #[inline]
    pub(crate) fn send_latency(&self, qpn: u32, ns: u64) {
        if self.qp(qpn).tag.load(Ordering::Relaxed) == u64::from(qpn) + 1 {
            self.latency(qpn).record(ns);
        }
    }

    /// Notes the size of CQ `id` (created or resized).
    pub(crate) fn sized(&self, id: u32, size: u32) {
        self.cq(id).size.store(u64::from(size), Ordering::Relaxed);
    }

    /// Notes that a poll of CQ `id` found `waiting` completions (before taking any).
    #[inline]
    pub(crate) fn waiting(&self, id: u32, waiting: usize) {
        self.cq(id).deepest.fetch_max(waiting as u64, Ordering::Relaxed);
    }

    /// Notes that a poll of CQ `id` found it overrun.
    pub(crate) fn overrun(&self, id: u32) {
        self.cq(id).overrun.store(1, Ordering::Relaxed);
    }

    /// Counts one poll of CQ `id` that returned `n` completions (0: an empty poll).
    #[inline]
    pub(crate) fn polled(&self, id: u32, n: usize) {
        let cq = self.cq(id);
        if n == 0 {
            cq.empty_polls.fetch_add(1, Ordering::Relaxed);
        } else {
            cq.polled.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Counts one polled completion of QP `qpn` on its record, if that QP is one of this
    /// endpoint's and still lives (a completion of a destroyed QP counts on its CQ only).
    /// The caller (`cq`) decides what the completion is ([`Polled`]).
    #[inline]
    pub(crate) fn completion(&self, qpn: u32, what: Polled) {
        let r = self.qp(qpn);
        if r.tag.load(Ordering::Relaxed) != u64::from(qpn) + 1 {
            return;
        }
        match what {
            Polled::Send { bytes } => {
                r.send_ok.fetch_add(1, Ordering::Relaxed);
                r.send_bytes.fetch_add(u64::from(bytes), Ordering::Relaxed);
            }
            Polled::Recv { bytes } => {
                r.recv_ok.fetch_add(1, Ordering::Relaxed);
                r.recv_bytes.fetch_add(u64::from(bytes), Ordering::Relaxed);
            }
            Polled::Error => {
                r.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The counts of QP `qpn` (`None` if its record is not tagged with it).
    pub(crate) fn qp_stats(&self, qpn: u32) -> Option<QpStats> {
        let r = self.qp(qpn);
        if r.tag.load(Ordering::Acquire) != u64::from(qpn) + 1 {
            return None;
        }
        let v = |w: &AtomicU64| w.load(Ordering::Relaxed);
        Some(QpStats {
            qpn,
            send_wrs: v(&r.send_wrs),
            recv_wrs: v(&r.recv_wrs),
            send_completions: v(&r.send_ok),
            send_bytes: v(&r.send_bytes),
            recv_completions: v(&r.recv_ok),
            recv_bytes: v(&r.recv_bytes),
            error_completions: v(&r.errors),
            send_latency: Latency::from_buckets(&self.latency(qpn).snapshot()),
        })
    }

    /// The counts of CQ `id` (`None` if its record is not tagged with it).
    pub(crate) fn cq_stats(&self, id: u32) -> Option<CqStats> {
        let r = self.cq(id);
        if r.tag.load(Ordering::Acquire) != u64::from(id) + 1 {
            return None;
        }
        let v = |w: &AtomicU64| w.load(Ordering::Relaxed);
        Some(CqStats {
            cq: id,
            size: u32::try_from(v(&r.size)).unwrap_or(u32::MAX),
            polled: v(&r.polled),
            empty_polls: v(&r.empty_polls),
            deepest: v(&r.deepest),
            overrun: v(&r.overrun) != 0,
        })
    }

    /// Every live QP's counts, lowest slot first.
    fn live_qps(&self) -> Vec<QpStats> {
        live(&self.header().qp_high, |i| &self.qp(i).tag, |qpn| self.qp_stats(qpn))
    }

    /// Every live CQ's counts, lowest slot first.
    fn live_cqs(&self) -> Vec<CqStats> {
        live(&self.header().cq_high, |i| &self.cq(i).tag, |id| self.cq_stats(id))
    }
}

/// The records of the slots below `high` whose tag names a live object: `tag(slot)` reads
/// a slot's tag, `read(number)` the object's record.
fn live<'a, T>(high: &AtomicU64, tag: impl Fn(u32) -> &'a AtomicU64, read: impl Fn(u32) -> Option<T>) -> Vec<T> {
    let high = (high.load(Ordering::Relaxed) as usize).min(RECORDS);
    (0..high)
        .filter_map(|i| {
            let t = tag(i as u32).load(Ordering::Acquire);
            // A tag names its own slot; another value is a peer's garbage.
            let num = u32::try_from(t.checked_sub(1)?).ok().filter(|n| slot(*n) == i)?;
            read(num)
        })
        .collect()
}

/// The live QPs' and CQs' counts of the endpoint whose directory is `dir` (another
/// process's): mapped, read and unmapped.
///
/// Errors: `Again` while the segment is not there (statistics off, or an endpoint still
/// starting) or not written yet (or written by another version of rverbs); `Bug` for a
/// segment too short.
pub(crate) fn read_live(dir: &Path) -> Result<(Vec<QpStats>, Vec<CqStats>)> {
    let seg = Segment::open_record(dir, NAME, std::mem::size_of::<Header>(), "read stats", "the endpoint counts no statistics")?;
    let stats = Stats { seg };
    if stats.header().magic.load(Ordering::Acquire) != MAGIC {
        return Err(Error::Again { verb: "read stats", why: "the endpoint's statistics are not written yet (or by another layout)" });
    }
    if stats.seg.len() < TOTAL {
        return Err(Error::Bug("stats segment too short"));
    }
    Ok((stats.live_qps(), stats.live_cqs()))
}

/// What the owner of one QP posted on it and polled of its completions, counted while
/// the device's statistics are on (`DeviceConfig::stats`, `RVERBS_STATS=1`;
/// docs/device.md, "Per-QP and per-CQ statistics"); all zero when they are off.
///
/// Rule: completions count when the application polls them (ibv_poll_cq(3)), on any of
/// the process's CQs, whoever wrote them: a completion still in the CQ is not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct QpStats {
    /// The QP number.
    pub qpn: u32,
    /// Send work requests posted (ibv_post_send(3); those refused by the post not).
    pub send_wrs: u64,
    /// Receive work requests posted (ibv_post_recv(3); those refused by the post not).
    pub recv_wrs: u64,
    /// Successful send-side completions polled (SEND, RDMA WRITE, READ, atomics, bind,
    /// local invalidate: any opcode without `IBV_WC_RECV`).
    pub send_completions: u64,
    /// The `byte_len` of those completions (ibv_poll_cq(3): READ and atomics report the
    /// bytes they returned; the soft device reports the posted length of the others).
    pub send_bytes: u64,
    /// Successful receive completions polled (`IBV_WC_RECV`, `IBV_WC_RECV_RDMA_WITH_IMM`).
    pub recv_completions: u64,
    /// Their `byte_len`: the bytes received (ibv_poll_cq(3)).
    pub recv_bytes: u64,
    /// Completions in error polled, sends and receives alike: ibv_poll_cq(3) makes a
    /// failed completion's opcode and `byte_len` undefined, so neither is counted.
    pub error_completions: u64,
    /// How long its send work requests took, from `ibv_post_send` to the device's
    /// completion of each (ibv_post_send(3): the completion is generated when the work
    /// request is complete; for RC, when the responder's ACK or response arrived):
    /// successful ones only, signaled or not. The time the completion then waited in the
    /// CQ is the application's, not counted.
    pub send_latency: Latency,
}

impl QpStats {
    /// Each count with its name (the field's), in the fields' order after `qpn`: what
    /// `rverbs stat --qp` prints.
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("send_wrs", self.send_wrs),
            ("recv_wrs", self.recv_wrs),
            ("send_completions", self.send_completions),
            ("send_bytes", self.send_bytes),
            ("recv_completions", self.recv_completions),
            ("recv_bytes", self.recv_bytes),
            ("error_completions", self.error_completions),
        ]
    }
}

/// What the owner of one CQ polled from it, counted while the device's statistics are on;
/// all zero when they are off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CqStats {
    /// The CQ's number (the `cq` of `rverbs stat --cq`; 0 when statistics are off).
    pub cq: u32,
    /// Its size (`cqe`, ibv_create_cq(3), ibv_resize_cq(3); 0 when statistics are off).
    pub size: u32,
    /// Completions polled (ibv_poll_cq(3), and each entry of an extended poll
    /// batch, ibv_start_poll(3)).
    pub polled: u64,
    /// Polls that found the CQ empty (ibv_poll_cq(3) returned 0; ibv_start_poll(3)
    /// returned ENOENT).
    pub empty_polls: u64,
    /// The most completions a poll found waiting: how close the CQ came to its size.
    pub deepest: u64,
    /// Whether a poll found the CQ overrun (ibv_poll_cq(3) NOTES: a completion arriving
    /// at a full CQ puts it in error; `IBV_EVENT_CQ_ERR`).
    pub overrun: bool,
}

impl CqStats {
    /// Each count with its name (the field's), after `cq` and `size`: what `rverbs stat
    /// --cq` prints.
    pub fn named(&self) -> [(&'static str, u64); 4] {
        [("polled", self.polled), ("empty_polls", self.empty_polls), ("deepest", self.deepest), ("overrun", u64::from(self.overrun))]
    }
}

/// The live QPs' and CQs' statistics of one endpoint of the device ([`crate::host_stats`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// The endpoint number (the top 8 bits of its QPNs, docs/device.md "Registry").
    pub ep: u32,
    /// The process that owns it.
    pub pid: u32,
    /// Its live QPs, lowest slot first.
    pub qps: Vec<QpStats>,
    /// Its live CQs, lowest slot first.
    pub cqs: Vec<CqStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_the_live_qps_and_what_their_owner_polled() {
        let dir = std::env::temp_dir().join(format!("rverbs-stats-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(read_live(&dir), Err(Error::Again { .. })));
        let s = Stats::create(&dir).unwrap();
        let (a, b, cq) = (0x03_0002, 0x03_0005, 0x03_0002);
        s.claim_qp(a).unwrap();
        s.claim_qp(b).unwrap();
        s.claim_cq(cq).unwrap();
        s.sized(cq, 16);
        s.sends_posted(a, 2);
        s.recvs_posted(b, 1);
        s.polled(cq, 0);
        s.waiting(cq, 5);
        s.waiting(cq, 3);
        s.polled(cq, 4);
        s.send_latency(a, 1000);
        s.send_latency(a, 1000);
        s.send_latency(a, 3000);
        s.send_latency(b, 7);
        s.completion(a, Polled::Send { bytes: 16 });
        s.completion(b, Polled::Recv { bytes: 16 });
        s.completion(a, Polled::Error);
        // Another endpoint's QP in the same slot: not ours.
        s.completion(0x04_0002, Polled::Send { bytes: 99 });
        s.release_qp(b);
        let (qps, cqs) = read_live(&dir).unwrap();
        assert_eq!(qps.len(), 1);
        let q = qps[0];
        assert_eq!((q.qpn, q.send_wrs, q.send_completions, q.send_bytes, q.error_completions), (a, 2, 1, 16, 1));
        let near = |v: u64, want: u64| v.abs_diff(want) * 8 <= want;
        assert_eq!(q.send_latency.count, 3);
        assert!(near(q.send_latency.p50_ns, 1000) && near(q.send_latency.max_ns, 3000), "{:?}", q.send_latency);
        let want = CqStats { cq, size: 16, polled: 4, empty_polls: 1, deepest: 5, overrun: false };
        assert_eq!(cqs, [want]);
        s.overrun(cq);
        assert_eq!(s.cq_stats(cq), Some(CqStats { overrun: true, ..want }));
        // A QP slot used again starts with empty buckets.
        s.claim_qp(b).unwrap();
        assert_eq!(s.qp_stats(b).unwrap().send_latency.count, 0);
        s.release_qp(b);
        assert_eq!(s.qp_stats(b), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
