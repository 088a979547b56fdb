//! The endpoint's tables: what peers read (and, for a few fields, write) to execute a
//! request on this process's objects without its help.
//!
//! One segment, `tables`, per endpoint, laid out as four arrays of fixed-size records:
//!
//! | array | records | bytes each | indexed by |
//! |---|---|---|---|
//! | queue pairs | 65 536 | 128 | local index of the QPN (`qpn & 0xffff`) |
//! | shared receive queues | 65 536 | 64 | local index of the SRQN |
//! | completion queues | 65 536 | 16 | CQ number |
//! | memory keys | 262 144 | 384 | key index (`key >> 8`) |
//!
//! About 109 MiB of address space; tmpfs commits a page only when a record in it is
//! written. A record names its object (the full QPN, SRQN, CQ number or key) so a peer
//! holding a stale number finds a mismatch, never another object's record.
//!
//! Writers: the owner writes every field when it creates, modifies or destroys the
//! object; peers write only the fields documented as theirs (a QP's `state` when they
//! push it into ERR and its `flags`, a key's `state` when they invalidate a window and
//! its `busy` count while they access the memory).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use rverbs_proto::verbs::{Access, QpState, QpType};

use super::{Segment, ShmSafe};
use crate::gid::Gid;
use crate::error::Result;
use crate::table::LOCAL_BITS;

/// QP records.
pub(crate) const QP_RECORDS: usize = 1 << LOCAL_BITS;
/// SRQ records.
pub(crate) const SRQ_RECORDS: usize = 1 << LOCAL_BITS;
/// CQ records.
pub(crate) const CQ_RECORDS: usize = 1 << LOCAL_BITS;
/// Bits of a memory key that index the key table (the low 8 bits are the key byte).
pub(crate) use crate::limits::KEY_INDEX_BITS;
/// Key records.
pub(crate) const KEY_RECORDS: usize = 1 << KEY_INDEX_BITS;

const QP_OFF: usize = 0;
const SRQ_OFF: usize = QP_OFF + QP_RECORDS * std::mem::size_of::<QpRecord>();
const CQ_OFF: usize = SRQ_OFF + SRQ_RECORDS * std::mem::size_of::<SrqRecord>();
const KEY_OFF: usize = CQ_OFF + CQ_RECORDS * std::mem::size_of::<CqRecord>();
const TOTAL: usize = KEY_OFF + KEY_RECORDS * std::mem::size_of::<KeyRecord>();

/// Name of the tables segment in the endpoint directory.
pub(crate) const NAME: &str = "tables";

/// What peers need of a queue pair: the responder's attributes.
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct QpRecord {
    /// The QPN while the QP exists, 0 otherwise.
    pub(crate) qpn: AtomicU32,
    /// `QpState` as a number. Written only by `QpRecord::transition` (`qp::state`), by
    /// the owner and by peers (which move it to ERR).
    pub(crate) state: AtomicU32,
    /// `QpType` as a number.
    pub(crate) qp_type: AtomicU32,
    /// `qp_access_flags`.
    pub(crate) access: AtomicU32,
    pub(crate) qkey: AtomicU32,
    pub(crate) min_rnr_timer: AtomicU32,
    pub(crate) max_dest_rd_atomic: AtomicU32,
    /// The PD's handle: memory keys of other PDs are refused.
    pub(crate) pd: AtomicU32,
    /// The SRQ number the QP receives from (0: its own receive queue).
    pub(crate) srqn: AtomicU32,
    /// Generation of the receive queue segment `rq-<qpn>-<gen>` (0: none).
    pub(crate) rq_gen: AtomicU32,
    /// The receive CQ's number.
    pub(crate) recv_cq: AtomicU32,
    _pad1: AtomicU32,
    /// The context whose async FIFO gets the QP's events.
    pub(crate) ctx: AtomicU32,
    /// `QP_FLAG_*` bits; peers set them.
    pub(crate) flags: AtomicU32,
    /// Path MTU in bytes.
    pub(crate) path_mtu: AtomicU32,
    /// The QP it is connected to (RC, UC, XRC): requests from any other QP are dropped.
    pub(crate) dest_qpn: AtomicU32,
    /// The destination GID of the QP's path, big-endian halves: RC/UC accept requests
    /// only from it.
    pub(crate) dgid: [AtomicU64; 2],
    /// The host-wide key of an XRC target's domain (0: none; `mr::domain::XrcdCore::key`).
    pub(crate) xrcd: AtomicU64,
}

impl QpRecord {
    /// The state (a value no state has reads as ERR: the QP accepts nothing).
    pub(crate) fn state(&self) -> QpState {
        QpState::from_raw(self.state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    pub(crate) fn qp_type(&self) -> Option<QpType> {
        QpType::from_raw(self.qp_type.load(Ordering::Acquire))
    }

    pub(crate) fn access(&self) -> Access {
        Access::from_bits_truncate(self.access.load(Ordering::Acquire))
    }

    /// The destination GID of the QP's path.
    pub(crate) fn dgid(&self) -> Gid {
        let hi = self.dgid[0].load(Ordering::Acquire).to_be_bytes();
        let lo = self.dgid[1].load(Ordering::Acquire).to_be_bytes();
        let mut g = [0u8; 16];
        g[..8].copy_from_slice(&hi);
        g[8..].copy_from_slice(&lo);
        Gid(g)
    }

    pub(crate) fn set_dgid(&self, g: Gid) {
        self.dgid[0].store(u64::from_be_bytes(g.0[..8].try_into().expect("8")), Ordering::Release);
        self.dgid[1].store(u64::from_be_bytes(g.0[8..].try_into().expect("8")), Ordering::Release);
    }
}

/// `QpRecord::flags`: COMM_EST was raised since the QP left RESET.
pub(crate) const QP_FLAG_COMM_EST: u32 = 1;
/// `QpRecord::flags`: the port of the owner's view of the device is down (an injected
/// PORT_ERR or DEVICE_FATAL, docs/fault-injection.md): requests for the QP are not
/// taken, by the owner or by peers, as nothing reaches a port whose link is down.
pub(crate) const QP_FLAG_PORT_DOWN: u32 = 2;

impl QpRecord {
    /// Whether the QP's owner has its port down ([`QP_FLAG_PORT_DOWN`]).
    pub(crate) fn port_down(&self) -> bool {
        self.flags.load(Ordering::Acquire) & QP_FLAG_PORT_DOWN != 0
    }
}

/// What peers need of a shared receive queue.
#[repr(C, align(64))]
#[derive(Default)]
pub(crate) struct SrqRecord {
    /// The SRQN while the SRQ exists, 0 otherwise.
    pub(crate) srqn: AtomicU32,
    pub(crate) pd: AtomicU32,
    /// Generation of the queue segment `srq-<srqn>-<gen>`.
    pub(crate) rq_gen: AtomicU32,
    /// XRC SRQs: the CQ their receives complete to, plus one (0: not XRC).
    pub(crate) xrc_cq: AtomicU32,
    /// The context whose async FIFO gets SRQ_LIMIT_REACHED.
    pub(crate) ctx: AtomicU32,
    /// Tag-matching SRQs: the CQ their receives complete to, plus one (0: not TM).
    pub(crate) tm_cq: AtomicU32,
    /// XRC SRQs: the host-wide key of their domain (0: not XRC; `mr::domain::XrcdCore::key`).
    pub(crate) xrcd: AtomicU64,
}

/// What peers need of a completion queue: which segment generation is current.
#[repr(C)]
#[derive(Default)]
pub(crate) struct CqRecord {
    /// The CQ number plus one while the CQ exists, 0 otherwise.
    pub(crate) id: AtomicU32,
    /// The current generation of `cq-<id>-<gen>`.
    pub(crate) gen: AtomicU32,
    _pad: AtomicU64,
}

/// A memory key: a region or a window, what it grants and where its bytes are.
///
/// The owner changes the descriptive fields under the seqlock `seq` (odd while
/// writing); readers copy them out with [`KeyRecord::read`] and retry on a change.
/// The access counts are on cache lines of their own, one for this process's accesses
/// and one for peers': a count written on every access must not evict the descriptor
/// every reader needs, nor bounce between the owner and a peer writing into the
/// region while the owner sends from it (what a latency ping-pong does).
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct KeyRecord {
    pub(crate) desc: KeyFields,
    /// Accesses in progress by the owner: through the region's keys for a region's record,
    /// through the window for a window's (which counts in its region's record as well).
    pub(crate) busy_local: Line,
    /// Accesses in progress by peers (as `busy_local`).
    pub(crate) busy_remote: Line,
}

/// A counter alone on its pair of cache lines (x86's adjacent-line prefetcher moves
/// lines in aligned pairs).
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct Line(AtomicU32);

impl std::ops::Deref for Line {
    type Target = AtomicU32;

    fn deref(&self) -> &AtomicU32 {
        &self.0
    }
}

impl std::ops::Deref for KeyRecord {
    type Target = KeyFields;

    fn deref(&self) -> &KeyFields {
        &self.desc
    }
}

impl KeyRecord {
    /// Accesses in progress, by anyone (deregistration waits for 0).
    pub(crate) fn busy(&self) -> u32 {
        self.busy_local.load(Ordering::SeqCst).wrapping_add(self.busy_remote.load(Ordering::SeqCst))
    }
}

/// The descriptive fields of a [`KeyRecord`].
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct KeyFields {
    pub(crate) seq: AtomicU32,
    /// The key (index << 8 | key byte); 0 while the slot is free.
    pub(crate) key: AtomicU32,
    /// `KEY_KIND_*`.
    pub(crate) kind: AtomicU32,
    /// `KEY_STATE_*`; peers invalidate type 2 windows (VALID → FREE).
    pub(crate) state: AtomicU32,
    pub(crate) pd: AtomicU32,
    pub(crate) access: AtomicU32,
    /// Type 2 windows: the QP that bound it (only it may use it).
    pub(crate) qpn: AtomicU32,
    /// Windows: the index of the region they are bound to (whose accesses they count).
    pub(crate) mr_index: AtomicU32,
    /// First address of the key's range in its IO address space.
    pub(crate) iova: AtomicU64,
    /// Length of the range.
    pub(crate) len: AtomicU64,
    /// The owner's process address of the byte at `iova`.
    pub(crate) va: AtomicU64,
    /// Where peers find the bytes: 0 = the owner's process memory (cross-memory attach),
    /// else the id of the shared segment `mr-<id>` that holds them.
    pub(crate) loc: AtomicU64,
    /// Offset of the byte at `iova` in that segment.
    pub(crate) seg_off: AtomicU64,
}

/// How long [`KeyFields::read`] waits for a consistent copy.
const KEY_READ_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

pub(crate) const KEY_KIND_MR: u32 = 1;
pub(crate) const KEY_KIND_MW1: u32 = 2;
pub(crate) const KEY_KIND_MW2: u32 = 3;

/// Grants nothing.
pub(crate) const KEY_STATE_INVALID: u32 = 0;
/// Grants what the record says.
pub(crate) const KEY_STATE_VALID: u32 = 1;
/// A type 2 window not bound (grants nothing; can be bound).
pub(crate) const KEY_STATE_FREE: u32 = 2;

/// A bit of a region record's `access` that no `IBV_ACCESS_*` flag uses (those end
/// below bit 30, `IBV_ACCESS_OPTIONAL_RANGE`): this process's own accesses through the
/// region's local key are counted in `busy_local` too, so that waiting for `busy` to
/// drain waits for every access in progress (an owned region, `crate::owned`; other
/// regions leave local accesses uncounted, `mr::keyspace`). Part of the owner's
/// fingerprint (`mr::keys`), so another process cannot clear it.
pub(crate) const ACCESS_COUNT_LOCAL: u32 = 1 << 31;

/// A consistent copy of a key record's descriptive fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyDesc {
    pub(crate) key: u32,
    pub(crate) kind: u32,
    pub(crate) state: u32,
    pub(crate) pd: u32,
    pub(crate) access: u32,
    pub(crate) qpn: u32,
    pub(crate) mr_index: u32,
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) va: u64,
    pub(crate) loc: u64,
    pub(crate) seg_off: u64,
}

impl KeyFields {
    /// Copies the record out consistently (seqlock read).
    ///
    /// The owner's write is a few stores long. A record that stays odd (being written)
    /// or keeps changing for [`KEY_READ_WAIT`] was written by another process of the
    /// user: it reads as an empty record, which grants nothing, instead of a wait for
    /// ever inside a verb.
    pub(crate) fn read(&self) -> KeyDesc {
        let mut tries = 0u32;
        let mut since: Option<std::time::Instant> = None;
        loop {
            tries = tries.wrapping_add(1);
            if tries.is_multiple_of(1024) {
                if since.get_or_insert_with(std::time::Instant::now).elapsed() > KEY_READ_WAIT {
                    return KeyDesc::default();
                }
                std::thread::yield_now();
            }
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let d = KeyDesc {
                key: self.key.load(Ordering::Relaxed),
                kind: self.kind.load(Ordering::Relaxed),
                state: self.state.load(Ordering::Relaxed),
                pd: self.pd.load(Ordering::Relaxed),
                access: self.access.load(Ordering::Relaxed),
                qpn: self.qpn.load(Ordering::Relaxed),
                mr_index: self.mr_index.load(Ordering::Relaxed),
                iova: self.iova.load(Ordering::Relaxed),
                len: self.len.load(Ordering::Relaxed),
                va: self.va.load(Ordering::Relaxed),
                loc: self.loc.load(Ordering::Relaxed),
                seg_off: self.seg_off.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return d;
            }
        }
    }

    /// Replaces the descriptive fields (owner only; one writer at a time, which the
    /// owner's own locking guarantees).
    pub(crate) fn write(&self, d: &KeyDesc) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.key.store(d.key, Ordering::Relaxed);
        self.kind.store(d.kind, Ordering::Relaxed);
        self.pd.store(d.pd, Ordering::Relaxed);
        self.access.store(d.access, Ordering::Relaxed);
        self.qpn.store(d.qpn, Ordering::Relaxed);
        self.mr_index.store(d.mr_index, Ordering::Relaxed);
        self.iova.store(d.iova, Ordering::Relaxed);
        self.len.store(d.len, Ordering::Relaxed);
        self.va.store(d.va, Ordering::Relaxed);
        self.loc.store(d.loc, Ordering::Relaxed);
        self.seg_off.store(d.seg_off, Ordering::Relaxed);
        // The state goes last and sequentially consistent: an access that counted itself
        // in `busy` and then sees the state still valid may proceed (see `mr::keyspace`).
        self.state.store(d.state, Ordering::SeqCst);
        self.seq.store((s.wrapping_add(1) | 1).wrapping_add(1), Ordering::Release);
    }
}

// SAFETY: every field of the records is an atomic of a plain integer (any bit pattern
// is a valid value); alignment padding is never read.
unsafe impl ShmSafe for QpRecord {}
// SAFETY: as above.
unsafe impl ShmSafe for SrqRecord {}
// SAFETY: as above.
unsafe impl ShmSafe for CqRecord {}
// SAFETY: as above (the padding of the cache-padded counters is never read).
unsafe impl ShmSafe for KeyRecord {}

const _: () = assert!(std::mem::size_of::<QpRecord>() == 128);
const _: () = assert!(std::mem::size_of::<SrqRecord>() == 64);
const _: () = assert!(std::mem::size_of::<CqRecord>() == 16);
const _: () = assert!(std::mem::size_of::<KeyRecord>() == 384);

/// The tables of one endpoint (this process's, or a peer's mapped).
pub(crate) struct Tables {
    seg: Segment,
}

impl Tables {
    /// Whether the owner truncated the file under this mapping (`Segment::poisoned`).
    pub(crate) fn poisoned(&self) -> bool {
        self.seg.poisoned()
    }
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables").field("seg", &self.seg).finish()
    }
}

impl Tables {
    /// Creates the tables of this endpoint in `dir`.
    pub(crate) fn create(dir: &std::path::Path) -> Result<Tables> {
        Ok(Tables { seg: Segment::create_sparse(&dir.join(NAME), TOTAL)? })
    }

    /// Maps a peer's tables.
    pub(crate) fn open(dir: &std::path::Path) -> Result<Tables> {
        let seg = Segment::open(&dir.join(NAME))?;
        if seg.len() < TOTAL {
            return Err(crate::error::Error::Bug("peer tables segment too short"));
        }
        Ok(Tables { seg })
    }

    /// Reserves the file pages of the record of QP `qpn` before it is first written
    /// (`Segment::reserve`: a full runtime directory is ENOMEM, not SIGBUS).
    pub(crate) fn reserve_qp(&self, qpn: u32) -> Result<()> {
        let i = (qpn as usize) & (QP_RECORDS - 1);
        self.seg.reserve(QP_OFF + i * std::mem::size_of::<QpRecord>(), std::mem::size_of::<QpRecord>())
    }

    /// As [`Tables::reserve_qp`], for SRQ `srqn`.
    pub(crate) fn reserve_srq(&self, srqn: u32) -> Result<()> {
        let i = (srqn as usize) & (SRQ_RECORDS - 1);
        self.seg.reserve(SRQ_OFF + i * std::mem::size_of::<SrqRecord>(), std::mem::size_of::<SrqRecord>())
    }

    /// As [`Tables::reserve_qp`], for CQ `id`.
    pub(crate) fn reserve_cq(&self, id: u32) -> Result<()> {
        let i = (id as usize) & (CQ_RECORDS - 1);
        self.seg.reserve(CQ_OFF + i * std::mem::size_of::<CqRecord>(), std::mem::size_of::<CqRecord>())
    }

    /// As [`Tables::reserve_qp`], for key index `index` (inside the table).
    pub(crate) fn reserve_key(&self, index: u32) -> Result<()> {
        let i = (index as usize).min(KEY_RECORDS - 1);
        self.seg.reserve(KEY_OFF + i * std::mem::size_of::<KeyRecord>(), std::mem::size_of::<KeyRecord>())
    }

    /// The record of QP number `qpn` (any endpoint bits are ignored).
    pub(crate) fn qp(&self, qpn: u32) -> &QpRecord {
        let i = (qpn as usize) & (QP_RECORDS - 1);
        self.seg.get(QP_OFF + i * std::mem::size_of::<QpRecord>())
    }

    /// The record of SRQ number `srqn`.
    pub(crate) fn srq(&self, srqn: u32) -> &SrqRecord {
        let i = (srqn as usize) & (SRQ_RECORDS - 1);
        self.seg.get(SRQ_OFF + i * std::mem::size_of::<SrqRecord>())
    }

    /// The record of CQ number `id`.
    pub(crate) fn cq(&self, id: u32) -> &CqRecord {
        let i = (id as usize) & (CQ_RECORDS - 1);
        self.seg.get(CQ_OFF + i * std::mem::size_of::<CqRecord>())
    }

    /// The record of key index `index` (`None` beyond the table).
    #[inline]
    pub(crate) fn key(&self, index: u32) -> Option<&KeyRecord> {
        let i = index as usize;
        (i < KEY_RECORDS).then(|| self.seg.get(KEY_OFF + i * std::mem::size_of::<KeyRecord>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_shared_and_key_reads_are_consistent() {
        let dir = std::env::temp_dir().join(format!("rverbs-tables-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = Tables::create(&dir).unwrap();
        let b = Tables::open(&dir).unwrap();
        a.qp(0x01_0005).qpn.store(0x01_0005, Ordering::Release);
        assert_eq!(b.qp(5).qpn.load(Ordering::Acquire), 0x01_0005);
        let d = KeyDesc { key: 0x305, kind: KEY_KIND_MR, state: KEY_STATE_VALID, len: 64, ..Default::default() };
        a.key(3).unwrap().write(&d);
        assert_eq!(b.key(3).unwrap().read(), d);
        assert!(a.key(KEY_RECORDS as u32).is_none());
        drop((a, b));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // Hostile-segment harness (tests/chaos/hostile_seg.sh), key_rec: another process
    // left a key record's seqlock odd ("being written"); every access through the key,
    // the owner's and its peers', spun in `read` for ever.
    #[test]
    fn a_key_record_left_odd_reads_as_empty_instead_of_spinning() {
        let dir = std::env::temp_dir().join(format!("rverbs-tables-odd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = std::sync::Arc::new(Tables::create(&dir).unwrap());
        let d = KeyDesc { key: 0x405, kind: KEY_KIND_MR, state: KEY_STATE_VALID, len: 64, ..Default::default() };
        a.key(4).unwrap().write(&d);
        a.key(4).unwrap().seq.fetch_or(1, Ordering::AcqRel);
        let (tx, rx) = std::sync::mpsc::channel();
        let a2 = a.clone();
        std::thread::spawn(move || {
            let _ = tx.send(a2.key(4).unwrap().read());
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("read returned");
        assert_eq!(got, KeyDesc::default(), "grants nothing");
        drop(a);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
