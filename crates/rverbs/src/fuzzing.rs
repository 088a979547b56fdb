//! Entries for the libFuzzer harnesses of `fuzz/` into code that is private to this
//! crate: the pure checks and decoders under the I/O of the UDP receive path and of the
//! shared-segment readers. Compiled only with the feature `fuzzing`, which only
//! `fuzz/Cargo.toml` enables (its harnesses also run as plain tests there, without
//! `--cfg fuzzing`), hidden from the documentation, and no part of the API: the
//! functions wrap the crate's own, converting to plain types, and add no logic of their
//! own beyond building the in-memory stand-ins for segments.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rverbs_proto::verbs::{Access, QpType};
use rverbs_proto::wire::roce::Repr;

use crate::gid::Gid;

/// The UDP receive path (`transport::udp`) and what follows it before the queues
/// (`transport::dispatch`).
pub mod udp {
    use super::*;
    use crate::transport::udp as u;

    /// Where a socket receives (`port == owner_port`: it owns the address's port).
    #[derive(Clone, Copy, Debug)]
    pub struct RxAddr {
        pub ip: IpAddr,
        pub port: u16,
        pub owner_port: u16,
    }

    /// A packet the receive checks passed.
    #[derive(Debug)]
    pub struct RxPacket<'b> {
        pub from: SocketAddr,
        pub id: u16,
        pub bytes: &'b [u8],
        pub repr: Repr,
    }

    /// The outcome of the receive checks of one datagram.
    #[derive(Debug)]
    pub struct Rx<'b> {
        /// What the trace records: source, destination, ID, bytes.
        pub seen: Option<(SocketAddr, SocketAddr, u16, &'b [u8])>,
        /// The packet, or why it was dropped (the `RxDrop` variant's name).
        pub verdict: Result<RxPacket<'b>, String>,
    }

    /// `udp::check_datagram`.
    pub fn check_datagram(rx: RxAddr, from: SocketAddr, datagram: &[u8]) -> Rx<'_> {
        let r = u::check_datagram(&mut u::IcrcKept::default(), u::RxAddr { ip: rx.ip, port: rx.port, owner_port: rx.owner_port }, from, datagram);
        Rx {
            seen: r.seen.map(|s| (s.from, s.to, s.id, s.bytes)),
            verdict: r
                .verdict
                .map(|c| RxPacket { from: c.from, id: c.id, bytes: c.packet.into_inner(), repr: c.repr })
                .map_err(|d| format!("{d:?}")),
        }
    }

    /// `udp::for_each_segment`.
    pub fn for_each_segment<'d>(datagram: &'d [u8], segment_size: Option<usize>, f: impl FnMut(&'d [u8])) {
        u::for_each_segment(datagram, segment_size, f)
    }

    /// Bytes of the relay header.
    pub const RELAY_LEN: usize = u::relay::LEN;

    /// `udp::relay::encode`.
    pub fn relay_encode(src: SocketAddr, id: u16, packet: &[u8], out: &mut Vec<u8>) {
        u::relay::encode(src, id, packet, out)
    }

    /// `udp::relay::decode`: (source, ID, packet).
    pub fn relay_decode(bytes: &[u8]) -> Option<(SocketAddr, u16, &[u8])> {
        u::relay::decode(bytes).map(|r| (r.src, r.id, r.packet))
    }

    /// Where a checked packet goes (`dispatch::Route`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Route {
        Mad { qkey: u32 },
        Relay { qpn: u32 },
        Request { qpn: u32 },
        Response { qpn: u32 },
        Ud { qpn: u32, qkey: u32 },
        Unserved,
    }

    /// `dispatch::route` in endpoint `ep`.
    pub fn route(ep: u32, repr: &Repr) -> Route {
        use crate::transport::dispatch as d;
        match d::route(ep, repr) {
            d::Route::Mad { qkey } => Route::Mad { qkey },
            d::Route::Relay { qpn } => Route::Relay { qpn },
            d::Route::Request { qpn } => Route::Request { qpn },
            d::Route::Response { qpn } => Route::Response { qpn },
            d::Route::Ud { qpn, qkey } => Route::Ud { qpn, qkey },
            d::Route::Unserved => Route::Unserved,
        }
    }

    /// The endpoint a QP number names.
    pub fn endpoint_of(qpn: u32) -> u32 {
        crate::table::endpoint_of(qpn)
    }

    /// The GRH area a UD receive gets for a packet from `src` to `dst` (`transport::grh`,
    /// as `dispatch::deliver` builds it).
    pub fn grh(src: IpAddr, dst: IpAddr, payload: usize, imm: bool) -> [u8; 40] {
        crate::transport::grh::build(&Gid::from_ip(src), &Gid::from_ip(dst), 0, 64, 0, payload, imm)
    }

    /// Bytes of a MAD.
    pub const MAD_LEN: usize = crate::transport::gsi::MAD_LEN;
    /// The GSI Q_Key.
    pub const GSI_QKEY: u32 = crate::transport::gsi::GSI_QKEY;

    /// `gsi::receiver`: `Some(Some(ep))` for an endpoint, `Some(None)` for the
    /// dispatcher, `None` for a MAD nobody here serves.
    pub fn mad_receiver(mad: &[u8; MAD_LEN]) -> Option<Option<u32>> {
        crate::transport::gsi::receiver(mad).map(|r| match r {
            crate::transport::gsi::Receiver::Endpoint(ep) => Some(ep),
            crate::transport::gsi::Receiver::Dispatcher => None,
        })
    }

    /// The QP1 receive record of a MAD from `peer` arrived at `local`, parsed back
    /// (`gsi::record`, `gsi::parse_record`): (peer, local, MAD).
    pub fn mad_record_round_trip(peer: IpAddr, local: IpAddr, mad: &[u8; MAD_LEN]) -> (IpAddr, IpAddr, [u8; MAD_LEN]) {
        use crate::transport::gsi::{parse_record, record, MadPeer};
        match parse_record(&record(MadPeer::Remote { peer, local }, mad)) {
            (MadPeer::Remote { peer, local }, m) => (peer, local, m),
            (MadPeer::Endpoint(ep), _) => panic!("a remote record parsed as endpoint {ep}"),
        }
    }

    /// A QP1 receive record of `bytes` (what a FIFO hands over), parsed: (endpoint, or
    /// the remote (peer, local) addresses).
    pub fn mad_record_parse(bytes: &[u8; crate::transport::gsi::RECORD_LEN]) -> Result<u32, (IpAddr, IpAddr)> {
        use crate::transport::gsi::{parse_record, MadPeer};
        match parse_record(bytes).0 {
            MadPeer::Endpoint(ep) => Ok(ep),
            MadPeer::Remote { peer, local } => Err((peer, local)),
        }
    }

    /// Bytes of a QP1 receive record.
    pub const RECORD_LEN: usize = crate::transport::gsi::RECORD_LEN;
}

/// The environment variables' rules (`config`).
pub mod config {
    use std::ffi::OsStr;
    use std::path::PathBuf;

    /// `config::runtime_dir_from`.
    pub fn runtime_dir_from(rverbs: Option<&OsStr>, xdg: Option<&OsStr>, uid: u32, dev_shm: bool) -> PathBuf {
        crate::config::runtime_dir_from(rverbs, xdg, uid, dev_shm)
    }

    /// `config::is_off`.
    pub fn is_off(value: Option<&OsStr>) -> bool {
        crate::config::is_off(value)
    }

    /// `config::switch` (`RVERBS_SHARED_MR`, `RVERBS_BUSY_POLL`).
    pub fn shared_mr(value: Option<&OsStr>) -> Option<bool> {
        crate::config::switch(value)
    }

    /// `config::sanitize_from` (`RVERBS_SANITIZE`).
    pub fn sanitize_from(value: Option<&OsStr>) -> crate::sanitize::Mode {
        crate::config::sanitize_from(value)
    }

    /// `config::stats_from` (`RVERBS_STATS`).
    pub fn stats_from(value: Option<&OsStr>) -> bool {
        crate::config::stats_from(value)
    }
}

/// Readers of bytes other processes write: key records, QP records, receive rings,
/// completion rings, endpoint headers.
pub mod shm {
    use super::*;
    use crate::rings::completion_ring::{Pop, PushError, Ring, DATA_WORDS};
    use crate::mr::keyspace::{self as access, Fault, KeyUse};
    use crate::shm::tables::{KeyDesc, KeyRecord, QpRecord};

    /// The descriptive fields of a key record as raw words (`tables::KeyFields`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct KeyWords {
        pub seq: u32,
        pub key: u32,
        pub kind: u32,
        pub state: u32,
        pub pd: u32,
        pub access: u32,
        pub qpn: u32,
        pub mr_index: u32,
        pub iova: u64,
        pub len: u64,
        pub va: u64,
        pub loc: u64,
        pub seg_off: u64,
    }

    /// A key record whose words are `w` (as another process left them), read with the
    /// seqlock reader (`KeyFields::read`; an odd `seq` reads as empty after 500 ms, so
    /// the harness gives even ones).
    pub fn key_read(w: &KeyWords) -> KeyWords {
        let r = KeyRecord::default();
        r.seq.store(w.seq, Ordering::Relaxed);
        r.key.store(w.key, Ordering::Relaxed);
        r.kind.store(w.kind, Ordering::Relaxed);
        r.state.store(w.state, Ordering::Relaxed);
        r.pd.store(w.pd, Ordering::Relaxed);
        r.access.store(w.access, Ordering::Relaxed);
        r.qpn.store(w.qpn, Ordering::Relaxed);
        r.mr_index.store(w.mr_index, Ordering::Relaxed);
        r.iova.store(w.iova, Ordering::Relaxed);
        r.len.store(w.len, Ordering::Relaxed);
        r.va.store(w.va, Ordering::Relaxed);
        r.loc.store(w.loc, Ordering::Relaxed);
        r.seg_off.store(w.seg_off, Ordering::Relaxed);
        KeyWords::of(&r.read())
    }

    impl KeyWords {
        /// The words of a record copy (`seq` 0: a copy has none).
        fn of(d: &KeyDesc) -> KeyWords {
            let KeyDesc { key, kind, state, pd, access, qpn, mr_index, iova, len, va, loc, seg_off } = *d;
            KeyWords { seq: 0, key, kind, state, pd, access, qpn, mr_index, iova, len, va, loc, seg_off }
        }

        /// The record copy these words make.
        fn desc(&self) -> KeyDesc {
            let KeyWords { seq: _, key, kind, state, pd, access, qpn, mr_index, iova, len, va, loc, seg_off } = *self;
            KeyDesc { key, kind, state, pd, access, qpn, mr_index, iova, len, va, loc, seg_off }
        }
    }

    /// `KEY_STATE_VALID`, `KEY_KIND_MR`, `KEY_KIND_MW2`.
    pub const KEY_STATE_VALID: u32 = crate::shm::tables::KEY_STATE_VALID;
    pub const KEY_KIND_MR: u32 = crate::shm::tables::KEY_KIND_MR;
    pub const KEY_KIND_MW2: u32 = crate::shm::tables::KEY_KIND_MW2;

    /// The checks of an access of `[va, va+len)` through `key` by a QP of PD `pd`
    /// (`remote_qpn`: an rkey used by that responder QP; `None`: an lkey) with rights
    /// `need`, on the record copy `d`, and where it lands in a shared segment of
    /// `seg_len` bytes (`mr::keyspace::{check_desc, offset_in, segment_offset}`): the offset
    /// in the key's range and in the segment, or the fault's name.
    #[allow(clippy::too_many_arguments)]
    pub fn key_access(d: &KeyWords, key: u32, pd: u32, remote_qpn: Option<u32>, need: u32, va: u64, len: u64, seg_len: usize) -> Result<(u64, usize), String> {
        let desc = d.desc();
        let used = remote_qpn.map_or(KeyUse::Local, |qpn| KeyUse::Remote { qpn });
        let go = || -> Result<(u64, usize), Fault> {
            access::check_desc(&desc, key, pd, used, Access::from_bits_truncate(need))?;
            let off = access::offset_in(&desc, va, len)?;
            Ok((off, access::segment_offset(&desc, off, len, seg_len)?))
        };
        go().map_err(|f| format!("{f:?}"))
    }

    /// What the readers of a QP record make of its words (`tables::QpRecord`): state
    /// (raw), type (raw), access bits, destination GID, whether it is live QP `qpn` of
    /// type `qp_type` (`route::is_qp`), and the responder attributes
    /// (`route::responder_config`: access bits, max_dest_rd_atomic, min_rnr_timer, qkey).
    #[derive(Debug)]
    pub struct QpView {
        pub state: u32,
        pub qp_type: Option<u32>,
        pub access: u32,
        pub dgid: [u8; 16],
        pub is_qp: bool,
        pub responder: (u32, u8, u8, u32),
    }

    /// Reads a QP record whose first 16 words are `w` and whose GID halves are `dgid`.
    pub fn qp_read(w: &[u32; 16], dgid: [u64; 2], qpn: u32, qp_type: u32) -> QpView {
        let r = QpRecord::default();
        let fields: [&AtomicU32; 16] = [
            &r.qpn, &r.state, &r.qp_type, &r.access, &r.qkey, &r.min_rnr_timer, &r.max_dest_rd_atomic, &r.pd, &r.srqn,
            &r.rq_gen, &r.recv_cq, &r.recv_cq, &r.ctx, &r.flags, &r.path_mtu, &r.dest_qpn,
        ];
        for (f, v) in fields.iter().zip(w) {
            f.store(*v, Ordering::Relaxed);
        }
        r.dgid[0].store(dgid[0], Ordering::Relaxed);
        r.dgid[1].store(dgid[1], Ordering::Relaxed);
        let want = QpType::from_raw(qp_type).unwrap_or(QpType::Rc);
        let cfg = crate::transport::route::responder_config(rverbs_proto::rc::Mode::Rc, &r, 4096);
        QpView {
            state: r.state().raw(),
            qp_type: r.qp_type().map(|t| t.raw()),
            access: r.access().bits(),
            dgid: r.dgid().0,
            is_qp: crate::transport::route::is_qp(&r, qpn, want),
            responder: (cfg.access.bits(), cfg.max_dest_rd_atomic, cfg.min_rnr_timer, cfg.qkey),
        }
    }

    /// A completion ring in process memory standing in for a CQ segment.
    pub struct FuzzRing(Ring);

    /// Words of a CQE.
    pub const CQE_WORDS: usize = DATA_WORDS;

    /// What a pop found (`completion_ring::Pop`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Popped {
        Entry([u64; CQE_WORDS], u64),
        Empty,
        Corrupt,
    }

    impl FuzzRing {
        /// A ring of at least `min_entries` (a power of two).
        pub fn new(min_entries: usize) -> FuzzRing {
            FuzzRing(Ring::new(min_entries))
        }
        pub fn capacity(&self) -> usize {
            self.0.capacity()
        }
        pub fn len(&self) -> usize {
            self.0.len()
        }
        pub fn is_empty(&self) -> bool {
            self.0.len() == 0
        }
        /// `Ok`, or `Err(true)` for full, `Err(false)` for corrupt indices.
        pub fn push(&self, data: &[u64; CQE_WORDS], overwrite: bool) -> Result<(), bool> {
            self.0.push(data, overwrite).map_err(|e| e == PushError::Full)
        }
        pub fn pop(&self) -> Popped {
            match self.0.pop() {
                Pop::Entry(d, p) => Popped::Entry(d, p),
                Pop::Empty => Popped::Empty,
                Pop::Corrupt => Popped::Corrupt,
            }
        }
        /// (tail, head).
        pub fn indices(&self) -> (u64, u64) {
            let (t, h, _) = self.0.raw_words(0);
            (t.load(Ordering::Relaxed), h.load(Ordering::Relaxed))
        }
        /// Another process writes `value` into the tail (0), the head (1) or the sequence
        /// word of slot `slot` (2).
        pub fn scribble(&self, what: u8, slot: usize, value: u64) {
            let (t, h, s) = self.0.raw_words(slot);
            [t, h, s][usize::from(what % 3)].store(value, Ordering::Relaxed);
        }
    }

    /// Receive rings (`rings::recv_ring`): the largest SGE count.
    pub const RQ_MAX_SGE: usize = crate::rings::recv_ring::MAX_SGE;

    /// `rq::geometry`.
    pub fn rq_geometry(cap: u32, max_sge: u32, seg_len: usize) -> Option<(usize, usize)> {
        crate::rings::recv_ring::geometry(cap, max_sge, seg_len)
    }

    /// `rq::slot_at`: byte offset and words of slot `i`.
    pub fn rq_slot_at(i: usize, max_sge: usize) -> (usize, usize) {
        crate::rings::recv_ring::slot_at(i, max_sge)
    }

    /// `rq::clamp_state`: (slot of the oldest receive, receives queued) of a ring's
    /// `head` and `tail`.
    pub fn rq_clamp_state(head: u64, tail: u64, cap: usize) -> (usize, usize) {
        crate::rings::recv_ring::clamp_state(head, tail, cap)
    }

    /// `rq::read_slot` over `words`: wr_id and SGEs (addr, length, lkey).
    pub fn rq_read_slot(words: &[u64], max_sge: usize) -> (u64, Vec<(u64, u32, u32)>) {
        let atomics: Vec<AtomicU64> = words.iter().map(|&w| AtomicU64::new(w)).collect();
        let w = crate::rings::recv_ring::read_slot(&atomics, max_sge);
        (w.wr_id, w.sges().iter().map(|s| (s.addr, s.length, s.lkey)).collect())
    }

    /// Words of an endpoint header.
    pub const HDR_WORDS: usize = crate::shm::registry::HDR_WORDS;

    /// `registry::header_info`: (pid, canary, refuses CMA) or the error.
    pub fn header_info(words: &[u64]) -> Result<(i32, (u64, u64), bool), String> {
        let atomics: Vec<AtomicU64> = words.iter().map(|&w| AtomicU64::new(w)).collect();
        crate::shm::registry::header_info(&atomics).map(|h| (h.pid, h.canary, h.refuses_cma)).map_err(|e| e.to_string())
    }

    /// `registry::find_net_port`, after `registry::publish_in` of `publish` (netns, ip,
    /// port) into the header `words` (which stay as another process wrote them
    /// otherwise): (published, found).
    pub fn net_port(words: &[u64], publish: Option<(u64, IpAddr, u16)>, netns: u64, ip: IpAddr) -> (bool, Option<u16>) {
        let atomics: Vec<AtomicU64> = words.iter().map(|&w| AtomicU64::new(w)).collect();
        let published = publish.is_some_and(|(n, i, p)| crate::shm::registry::publish_in(&atomics, n, i, p));
        (published, crate::shm::registry::find_net_port(&atomics, netns, ip))
    }
}

/// What one process reads from a segment a peer writes besides the records of `shm`: the
/// proxy channel's request header (`mr::proxy`), a CQ segment's header and producers'
/// gate (`rings::cq_segment`, `rings::producer_gate`), and shared lock words (`shm::lock`).
pub mod peer {
    use super::*;
    use crate::rings::producer_gate::{Frozen, Gate, Producer, ENDPOINTS};
    use crate::rings::completion_ring::Ring;
    use crate::rings::cq_segment::{self, CqShm, Publish};
    use crate::mr::keyspace::KeyUse;
    use crate::mr::proxy::{self, RequestWords};
    use crate::shm::lock::ShmLock;

    /// A proxy request header's words (`proxy::RequestWords`): op, key, pd, remote, qpn,
    /// need, va, len.
    pub type ProxyWords = (u32, u32, u32, u32, u32, u32, u64, u64);

    /// A request the server goes on with: (write, key, pd, remote QP or `None` for a
    /// local key, rights, va, len).
    pub type ProxyChecked = (bool, u32, u32, Option<u32>, u32, u64, usize);

    /// `proxy::check_request` of a header in a channel segment of `seg_len` bytes.
    pub fn proxy_check(w: ProxyWords, seg_len: usize) -> Option<ProxyChecked> {
        let (op, key, pd, remote, qpn, need, va, len) = w;
        let c = proxy::check_request(&RequestWords { op, key, pd, remote, qpn, need, va, len }, seg_len)?;
        let remote = match c.used {
            KeyUse::Local => None,
            KeyUse::Remote { qpn } => Some(qpn),
        };
        Some((c.write, c.key, c.pd, remote, c.need.bits(), c.va, c.len))
    }

    /// Bytes of a proxy channel segment, and the most one request moves.
    pub const PROXY_CHANNEL_BYTES: usize = proxy::CHANNEL_BYTES;
    pub const PROXY_MAX_PIECE: usize = proxy::MAX_PIECE;

    /// `cq_segment::open_capacity`.
    pub fn cq_open_capacity(cap: u64, seg_len: usize) -> Option<usize> {
        cq_segment::open_capacity(cap, seg_len)
    }

    /// Bytes of a CQ ring slot, of the ring's header, and before the ring.
    pub const CQ_SLOT_BYTES: usize = std::mem::size_of::<crate::rings::completion_ring::Slot>();
    pub const CQ_RING_HDR_BYTES: usize = crate::rings::completion_ring::HDR_BYTES;
    pub const CQ_SHM_BYTES: usize = cq_segment::SHM_BYTES;

    /// Endpoint words of a gate.
    pub const GATE_ENDPOINTS: usize = ENDPOINTS;

    /// `FLAG_IGNORE_OVERRUN`, `FLAG_TIMESTAMPS`, `NOTIFY_SOLICITED`, `NOTIFY_NEXT`.
    pub const FLAG_IGNORE_OVERRUN: u32 = cq_segment::FLAG_IGNORE_OVERRUN;
    pub const FLAG_TIMESTAMPS: u32 = cq_segment::FLAG_TIMESTAMPS;
    pub const NOTIFY_SOLICITED: u32 = cq_segment::NOTIFY_SOLICITED;
    pub const NOTIFY_NEXT: u32 = cq_segment::NOTIFY_NEXT;

    /// What a publish led to (`cq_segment::Publish`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Published {
        Done { fire: bool },
        Overrun { first: bool },
        Moved(u32),
    }

    /// A CQ segment's header, gate and ring in process memory.
    pub struct FuzzCq {
        sh: CqShm,
        gate: Box<Gate>,
        ring: Ring,
    }

    impl FuzzCq {
        /// A CQ of at least `min_entries`.
        pub fn new(min_entries: usize) -> FuzzCq {
            FuzzCq { sh: CqShm::default(), gate: Box::new(Gate::new()), ring: Ring::new(min_entries) }
        }

        /// The ring's capacity.
        pub fn capacity(&self) -> usize {
            self.ring.capacity()
        }

        /// The header's words: errored, notify, channel, flags, ctx, id, moved.
        pub fn header(&self) -> [u32; 7] {
            let h = &self.sh;
            [&h.errored, &h.notify, &h.channel, &h.flags, &h.ctx, &h.id, &h.moved].map(|w| w.load(Ordering::Relaxed))
        }

        /// Another process writes header word `i` (as [`FuzzCq::header`]).
        pub fn set_header(&self, i: usize, v: u32) {
            let h = &self.sh;
            [&h.errored, &h.notify, &h.channel, &h.flags, &h.ctx, &h.id, &h.moved][i % 7].store(v, Ordering::Relaxed);
        }

        /// The gate's resize flag and the `inside` word of endpoint `ep`.
        pub fn gate_word(&self, ep: usize) -> (u32, u64) {
            let (r, inside) = self.gate.words();
            (r.load(Ordering::Relaxed), inside[ep % ENDPOINTS].load(Ordering::Relaxed))
        }

        /// Another process writes the resize flag or the `inside` word of endpoint `ep`.
        pub fn set_gate(&self, resizing: Option<u32>, ep: usize, inside: Option<u64>) {
            let (r, words) = self.gate.words();
            if let Some(v) = resizing {
                r.store(v, Ordering::Relaxed);
            }
            if let Some(v) = inside {
                words[ep % ENDPOINTS].store(v, Ordering::Relaxed);
            }
        }

        /// `cq_segment::publish_in` by producer (`ep`, `pid`), waiting at most `resize_wait` for a
        /// resize (the device waits 2 s).
        pub fn publish(&self, ep: u32, pid: u32, wr_id: u64, solicited: bool, resize_wait: std::time::Duration) -> Published {
            let cqe = crate::rings::wc::Cqe { wr_id, solicited, ..Default::default() };
            match cq_segment::publish_in(&self.sh, &self.gate, &self.ring, &cqe.encode(), Producer { ep, pid }, resize_wait, || false, |_| {}) {
                Publish::Done { fire } => Published::Done { fire },
                Publish::Overrun { first } => Published::Overrun { first },
                Publish::Moved(g) => Published::Moved(g),
                // Only the owner's uncounted publish (`CqSeg::publish_uncounted`) stops so.
                Publish::Resizing => unreachable!("publish_in follows a resize, it never reports one"),
            }
        }

        /// The next completion's `wr_id` (`None`: empty or corrupt).
        pub fn pop(&self) -> Option<u64> {
            match self.ring.pop() {
                crate::rings::completion_ring::Pop::Entry(d, _) => Some(crate::rings::wc::Cqe::decode(&d).wr_id),
                _ => None,
            }
        }

        /// Arms the notification as `CqSeg::arm` does.
        pub fn arm(&self, solicited_only: bool) {
            let flag = if solicited_only { NOTIFY_SOLICITED } else { NOTIFY_NEXT };
            self.sh.notify.fetch_or(flag, Ordering::AcqRel);
        }

        /// `Gate::live_inside` with `alive(ep, pid)`.
        pub fn live_inside(&self, alive: &dyn Fn(u32, u32) -> bool) -> bool {
            self.gate.live_inside(alive)
        }

        /// `Gate::freeze` waiting at most `wait`: whether no live producer was inside.
        pub fn freeze(&self, alive: &dyn Fn(u32, u32) -> bool, wait: std::time::Duration) -> bool {
            self.gate.freeze(alive, wait) == Frozen::Quiet
        }

        /// `Gate::thaw`.
        pub fn thaw(&self) {
            self.gate.thaw()
        }

        /// `CqSeg::skip_dead`'s decision: moves the consumer past a stalled position when
        /// no live producer is inside.
        pub fn skip_dead(&self, alive: &dyn Fn(u32, u32) -> bool) -> bool {
            let Some(h) = self.ring.stalled_at() else { return false };
            !self.gate.live_inside(alive) && self.ring.skip(h)
        }

        /// Reserves a ring position and never publishes it (a producer killed inside).
        pub fn reserve_only(&self) {
            let (t, _, _) = self.ring.raw_words(0);
            t.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The largest endpoint number plus one (`limits::MAX_ENDPOINTS`).
    pub const MAX_ENDPOINTS: u32 = crate::limits::MAX_ENDPOINTS;

    /// Takes a lock whose word another process left as `word`, for endpoint `me`, with
    /// `alive(ep)` and a holder kept at most `stuck` (`ShmLock::lock_with`): the word while
    /// held, the endpoints asked about, and the word after the guard is dropped.
    pub fn lock_word(word: u32, me: u32, alive: impl Fn(u32) -> bool, stuck: std::time::Duration) -> (u32, Vec<u32>, u32) {
        let l = ShmLock::default();
        l.set_word(word);
        let asked = std::cell::RefCell::new(Vec::new());
        let g = l.lock_with(
            me,
            &|ep| {
                asked.borrow_mut().push(ep);
                alive(ep)
            },
            stuck,
            || {},
        );
        let held = l.word();
        drop(g);
        (held, asked.into_inner(), l.word())
    }
}

/// The readers of what the kernel answers about routes and neighbours (`neigh`): the
/// text of `/proc/net/route`, `/proc/net/ipv6_route` and `/proc/net/arp`, and
/// `RTM_GETNEIGH` dump replies.
pub mod neigh {
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// `neigh::next_hop`.
    pub fn next_hop(dst: Ipv4Addr, table: &str) -> Option<Ipv4Addr> {
        crate::neigh::next_hop(dst, table)
    }

    /// `neigh::next_hop6`.
    pub fn next_hop6(dst: Ipv6Addr, table: &str) -> Option<Ipv6Addr> {
        crate::neigh::next_hop6(dst, table)
    }

    /// `neigh::arp_complete`.
    pub fn arp_complete(ip: Ipv4Addr, table: &str) -> bool {
        crate::neigh::arp_complete(ip, table)
    }

    /// `neigh::parse_neighbours`: (state of `ip`'s entry, the dump ended).
    pub fn parse_neighbours(buf: &[u8], ip: Ipv6Addr) -> (Option<u16>, bool) {
        crate::neigh::parse_neighbours(buf, ip)
    }
}
