//! The bounded soak (tests/chaos/soak.sh): many RC QPs in many processes, mixed opcodes,
//! every byte and every completion checked.
//!
//! ```text
//! rverbs-chaos soak        --dir D [--workers 8] [--qps 64] [--ops 150] [--window 8] [--max-len 2048]
//!                          [--seed 1] [--seconds 120] [--wr-ms 10000] [--timeout 14] [--retry 7]
//!                          [--ns-a A --ns-b B --ip-a IP --ip-b IP --rt-a DIR --rt-b DIR]
//! rverbs-chaos soak-worker --dir D --rank R --workers N --local IP [same options]
//! ```
//!
//! **Workers.** Worker `r` connects `m = ceil(qps / (workers - 1))` RC QPs to every other
//! worker (QP `j` of the pair (r, p) to QP `j` of the pair (p, r)), all on one CQ, and one
//! region laid out per QP as: TGT (2·window slots the peer's QP WRITEs and READs back),
//! LOC (2·window slots: this QP's WRITE sources, READ destinations, atomic results),
//! RCV (window receive slots), CNT (the 8-byte counter only the peer's QP touches). QPNs,
//! PSNs, keys, addresses and IPs go through `w<r>.info` in the work directory; traffic
//! starts when every `w<r>.ready` exists. Each QP then runs `--ops` operations, kinds drawn
//! from a generator seeded by (seed, rank, QP): WRITE of the pattern of (rank, QP, seq)
//! then a READ of the same slot checked byte for byte (the READ is after the WRITE on one
//! RC QP, so it sees it); SEND of a header (rank, QP, message number, length) and the
//! pattern, the receiver checking every byte, the length, and that message numbers arrive
//! 0, 1, 2, … on that QP; FETCH_AND_ADD 1 on the QP's counter (the returned values must be
//! 0, 1, 2, … exactly); CMP_AND_SWP on it, three in four with the right compare value
//! (must swap), one in four with a wrong one (must not). At most `--window` WRs are
//! outstanding per QP, all signaled; each must complete exactly once, successfully, with
//! its opcode, in posting order (the low half of the `wr_id` is the QP's WR sequence),
//! within `--wr-ms`. Receives complete in posting order too. When its own WRs are done a
//! worker writes `w<r>.done` (messages sent per QP); it ends when every partner's is there
//! and every message was received, after checking that its CQ then stays empty (no
//! duplicate completion arrives late).
//!
//! **Memory.** VmRSS (/proc/self/status) is sampled when a fifth of the operations have
//! been posted (by then every ring has wrapped many times and every region page was
//! touched: the working set is complete) and at the end. The driver fails a worker whose
//! RSS grew by more than 10 % + 8 MiB: steady-state traffic allocates nothing per
//! operation, and the slack covers allocator noise and pages of the peers' shared tables
//! first touched late; a leak of a few hundred bytes per operation exceeds it.
//!
//! **Driver.** Starts the workers (same host: all in the caller's namespace; with
//! `--ns-a/--ns-b`: even ranks in A, odd ranks in B, each with its namespace's address and
//! runtime directory, so about half of each worker's partners are across the link), waits
//! (bounded by `--seconds` + 30 s), writes `abort` for the others when one fails, then
//! checks and sums the `SOAK worker` lines and prints `SOAK total ...`.

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rverbs::{Access, CqInit, Gid, Mr, Qp, QpCap, QpInit, QpType, RecvWr, RemotePath, SendWr, Wc, WcOpcode};

use crate::common::{get, parse_info, read_info, wait_file, write_info, Args, Rng};
use crate::victim::gid_index;

const ALL: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC);
/// Bit 63 of a `wr_id`: a receive. Bits 32..63: the QP's local index. Bits 0..32: sequence.
const RECV: u64 = 1 << 63;
/// A SEND's header: rank u32, QP u32, message number u64, length u32, marker u32.
const HDR: usize = 24;
const HDR_MARK: u32 = 0x50a4_50a4;
/// The value an atomic's result slot holds before the result lands.
const POISON: u64 = 0xdead_beef_dead_beef;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The bytes of (rank, QP, seq): eight at a time from a generator seeded by the three.
fn pattern(rank: u64, qp: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut g = Rng::new(rank << 48 ^ qp << 32 ^ seq ^ 0x70a7_7e27);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&g.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// VmRSS, RssAnon, RssFile and RssShmem of this process, KiB.
fn rss_kib() -> (u64, u64, u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"), field("RssShmem:"))
}

/// The options a worker takes and the driver passes on.
#[derive(Clone, Copy, Debug)]
struct Config {
    workers: u64,
    qps: u64,
    ops: u64,
    window: u64,
    max_len: u64,
    seed: u64,
    seconds: u64,
    wr_ms: u64,
    /// The RC local ACK timeout code (4.096 µs · 2^t) and retry count of every QP.
    timeout: u64,
    retry: u64,
}

impl Config {
    fn parse(a: &Args) -> Result<Config, String> {
        let c = Config {
            workers: a.num("workers", 8)?,
            qps: a.num("qps", 64)?,
            ops: a.num("ops", 150)?,
            window: a.num("window", 8)?,
            max_len: a.num("max-len", 2048)?,
            seed: a.num("seed", 1)?,
            seconds: a.num("seconds", 120)?,
            wr_ms: a.num("wr-ms", 10_000)?,
            timeout: a.num("timeout", 14)?,
            retry: a.num("retry", 7)?,
        };
        if c.timeout > 31 || c.retry > 7 {
            return Err("--timeout: 0..=31, --retry: 0..=7".into());
        }
        if c.workers < 2 || c.workers > 64 {
            return Err("--workers: 2..=64".into());
        }
        if c.qps == 0 || c.ops == 0 || c.ops > 1 << 28 {
            return Err("--qps and --ops: at least 1 (ops at most 2^28)".into());
        }
        if !(2..=256).contains(&c.window) {
            return Err("--window: 2..=256".into());
        }
        if c.max_len < 64 || !c.max_len.is_multiple_of(64) || c.max_len > 1 << 20 {
            return Err("--max-len: a multiple of 64 in 64..=1 MiB".into());
        }
        Ok(c)
    }

    fn args(&self) -> Vec<String> {
        let kv = [
            ("workers", self.workers),
            ("qps", self.qps),
            ("ops", self.ops),
            ("window", self.window),
            ("max-len", self.max_len),
            ("seed", self.seed),
            ("seconds", self.seconds),
            ("wr-ms", self.wr_ms),
            ("timeout", self.timeout),
            ("retry", self.retry),
        ];
        kv.iter().flat_map(|(k, v)| [format!("--{k}"), v.to_string()]).collect()
    }

    /// QPs between each pair of workers.
    fn per_pair(&self) -> u64 {
        self.qps.div_ceil(self.workers - 1)
    }

    /// Bytes of one QP's part of the region: TGT, LOC, RCV, CNT.
    fn per_qp(&self) -> usize {
        (5 * self.window * self.max_len + 64) as usize
    }
    fn tgt(&self, i: usize, slot: u64) -> usize {
        i * self.per_qp() + (slot * self.max_len) as usize
    }
    fn loc(&self, i: usize, slot: u64) -> usize {
        i * self.per_qp() + ((2 * self.window + slot) * self.max_len) as usize
    }
    fn rcv(&self, i: usize, slot: u64) -> usize {
        i * self.per_qp() + ((4 * self.window + slot) * self.max_len) as usize
    }
    fn cnt(&self, i: usize) -> usize {
        i * self.per_qp() + (5 * self.window * self.max_len) as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    Read,
    Send,
    Faa,
    Cas,
}

impl Kind {
    fn opcode(self) -> WcOpcode {
        match self {
            Kind::Write => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::Send => WcOpcode::Send,
            Kind::Faa => WcOpcode::FetchAdd,
            Kind::Cas => WcOpcode::CompSwap,
        }
    }
}

/// One outstanding WR: its sequence, kind, when it was posted, and what to check.
struct Pending {
    seq: u64,
    kind: Kind,
    posted: Instant,
    /// READ: bytes and the WR sequence whose pattern they must be.
    len: usize,
    of_seq: u64,
    /// Atomics: the value the result must be.
    expect: u64,
}

struct QpState {
    qp: Qp,
    qpn: u32,
    partner: u64,
    /// The index of this QP's peer QP among the partner's QPs.
    peer_idx: u64,
    rkey: u32,
    /// The partner's region address for this connection (its part for `peer_idx`).
    tgt_va: u64,
    cnt_va: u64,
    rng: Rng,
    ops_left: u64,
    next_seq: u64,
    pending: VecDeque<Pending>,
    counter: u64,
    sent: u64,
    /// Receives: the next posting sequence expected to complete; messages received.
    recv_next: u64,
    received: u64,
}

#[derive(Default)]
struct Counts {
    writes: u64,
    reads: u64,
    sends: u64,
    recvs: u64,
    faa: u64,
    cas_ok: u64,
    cas_fail: u64,
    bytes_written: u64,
    bytes_checked: u64,
    completions: u64,
    recv_completions: u64,
    max_wr_ms: f64,
}

pub fn worker(a: &Args) -> Result<(), String> {
    let c = Config::parse(a)?;
    let dir = a.path("dir")?;
    let rank = a.num("rank", 0)?;
    let local = a.ip("local")?;
    if rank >= c.workers {
        return Err("--rank must be below --workers".into());
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(c.seconds);
    let wr_limit = Duration::from_millis(c.wr_ms);
    let abort = dir.join("abort");
    let m = c.per_pair();
    let partners: Vec<u64> = (0..c.workers).filter(|&p| p != rank).collect();
    let nqps = partners.len() * m as usize;
    let w = c.window;

    let dev = rverbs::devices().map_err(err)?.into_iter().next().ok_or("no device")?;
    let ctx = dev.open().map_err(err)?;
    let sgid = gid_index(&ctx, local)?;
    let pd = ctx.alloc_pd().map_err(err)?;
    let cq = ctx.create_cq(&CqInit::new((nqps as u64 * 2 * w + 256) as u32)).map_err(err)?;
    let mr: Mr = pd.alloc_mr(nqps * c.per_qp(), ALL).map_err(err)?;
    let cap = QpCap { max_send_wr: w as u32, max_recv_wr: w as u32, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let mut psn_rng = Rng::new(c.seed ^ rank.wrapping_mul(0x9e37) ^ 0x50a4);
    let mut qps = Vec::with_capacity(nqps);
    let mut info: Vec<(String, u64)> = vec![
        ("ip".into(), u64::from(u32::from(local))),
        ("rkey".into(), u64::from(mr.rkey())),
        ("va".into(), mr.iova()),
        ("nqps".into(), nqps as u64),
    ];
    let mut psns = Vec::with_capacity(nqps);
    for i in 0..nqps {
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).map_err(|e| format!("QP {i} of {nqps}: {e}"))?;
        let psn = psn_rng.next_u32() & 0xff_ffff;
        info.push((format!("qpn{i}"), u64::from(qp.qp_num())));
        info.push((format!("psn{i}"), u64::from(psn)));
        qps.push(qp);
        psns.push(psn);
    }
    let kv: Vec<(&str, u64)> = info.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    write_info(&dir.join(format!("w{rank}.info")), &kv).map_err(err)?;

    // Connect each QP to its peer QP: QP i talks to partner i / m, pair index j = i % m;
    // on the partner that is QP (index of this rank among its partners) · m + j.
    let mut peers = BTreeMap::new();
    for &p in &partners {
        peers.insert(p, read_info(&dir.join(format!("w{p}.info")), Duration::from_secs(60))?);
    }
    let mut states = Vec::with_capacity(nqps);
    for (i, qp) in qps.into_iter().enumerate() {
        let partner = partners[i / m as usize];
        let j = i as u64 % m;
        let peer_idx = (if rank < partner { rank } else { rank - 1 }) * m + j;
        let pi = &peers[&partner];
        if get(pi, "nqps")? != nqps as u64 {
            return Err(format!("worker {partner} has {} QPs, this one {nqps}: options differ", get(pi, "nqps")?));
        }
        let ip = Ipv4Addr::from(get(pi, "ip")? as u32);
        let path = RemotePath {
            access: ALL,
            rq_psn: get(pi, &format!("psn{peer_idx}"))? as u32,
            sq_psn: psns[i],
            timeout: c.timeout as u8,
            retry_cnt: c.retry as u8,
            ..RemotePath::new(Gid::from_ipv4(ip), sgid, get(pi, &format!("qpn{peer_idx}"))? as u32)
        };
        qp.connect(&path).map_err(|e| format!("connect QP {i} to worker {partner}: {e}"))?;
        let va = get(pi, "va")?;
        let st = QpState {
            qpn: qp.qp_num(),
            qp,
            partner,
            peer_idx,
            rkey: get(pi, "rkey")? as u32,
            tgt_va: va + c.tgt(peer_idx as usize, 0) as u64,
            cnt_va: va + c.cnt(peer_idx as usize) as u64,
            rng: Rng::new(c.seed ^ rank << 40 ^ (i as u64) << 20 ^ 0x0bad_5eed),
            ops_left: c.ops,
            next_seq: 0,
            pending: VecDeque::new(),
            counter: 0,
            sent: 0,
            recv_next: 0,
            received: 0,
        };
        for s in 0..w {
            post_recv(&st, &mr, &c, i, s)?;
        }
        states.push(st);
    }
    let qpn_idx: BTreeMap<u32, usize> = states.iter().enumerate().map(|(i, s)| (s.qpn, i)).collect();
    write_info(&dir.join(format!("w{rank}.ready")), &[("qps", nqps as u64)]).map_err(err)?;
    for &p in &partners {
        wait_file(&dir.join(format!("w{p}.ready")), Duration::from_secs(60))?;
    }
    let setup_ms = start.elapsed().as_millis();
    let traffic = Instant::now();

    let total_ops = c.ops * nqps as u64;
    let warm_at = total_ops / 5;
    let mut posted_ops = 0u64;
    let mut rss_warm = None;
    let mut n = Counts::default();
    let mut wcs = [Wc::default(); 64];
    let mut last_check = Instant::now();
    let mut done_written = false;
    let mut partner_sent: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    let ctx_of = |i: usize, s: &QpState| format!("QP {i} (qpn {:#x}, to worker {} QP {})", s.qpn, s.partner, s.peer_idx);
    loop {
        let mut busy = false;
        // Post: each QP as far as its window allows.
        for (i, s) in states.iter_mut().enumerate() {
            while s.ops_left > 0 {
                let room = w as usize - s.pending.len();
                if room < 2 {
                    break;
                }
                post_op(s, &mr, &c, rank, i, &mut n).map_err(|e| format!("{}: post: {e}", ctx_of(i, s)))?;
                s.ops_left -= 1;
                posted_ops += 1;
                busy = true;
                if rss_warm.is_none() && posted_ops >= warm_at {
                    rss_warm = Some(rss_kib());
                }
            }
        }
        // Completions.
        let got = cq.poll(&mut wcs).map_err(err)?;
        for wc in &wcs[..got] {
            busy = true;
            let i = ((wc.wr_id() & !RECV) >> 32) as usize;
            let Some(s) = states.get_mut(i) else {
                return Err(format!("completion with wr_id {:#x}: no QP {i}", wc.wr_id()));
            };
            if qpn_idx.get(&wc.qp_num()) != Some(&i) {
                return Err(format!("completion with wr_id {:#x} names qpn {:#x}, posted on {}", wc.wr_id(), wc.qp_num(), ctx_of(i, s)));
            }
            if !wc.is_success() {
                return Err(format!("{}: wr_id {:#x} completed {} (vendor_err {:#x})", ctx_of(i, s), wc.wr_id(), wc.status(), wc.vendor_err()));
            }
            let r = if wc.wr_id() & RECV != 0 {
                on_recv(s, wc, &mr, &c, i, &mut n)
            } else {
                on_send_wc(s, wc, &mr, &c, rank, i, &mut n)
            };
            r.map_err(|e| format!("{}: {e}", ctx_of(i, s)))?;
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(50));
        }
        if last_check.elapsed() < Duration::from_millis(50) {
            continue;
        }
        last_check = Instant::now();
        // Deadlines: every WR's, the run's; another worker's failure.
        for (i, s) in states.iter().enumerate() {
            if let Some(p) = s.pending.front() {
                if p.posted.elapsed() > wr_limit {
                    return Err(format!(
                        "{}: WR seq {} ({:?}) posted {} ms ago has not completed ({} outstanding): lost completion or hang",
                        ctx_of(i, s),
                        p.seq,
                        p.kind,
                        p.posted.elapsed().as_millis(),
                        s.pending.len()
                    ));
                }
            }
        }
        if Instant::now() >= deadline {
            let left: u64 = states.iter().map(|s| s.ops_left + s.pending.len() as u64).sum();
            return Err(format!("not done within {}s ({left} ops/WRs left, done file written: {done_written})", c.seconds));
        }
        if abort.exists() {
            return Err("aborted: another worker failed".into());
        }
        let own_done = states.iter().all(|s| s.ops_left == 0 && s.pending.is_empty());
        if own_done && !done_written {
            let kv: Vec<(String, u64)> = states.iter().enumerate().map(|(i, s)| (format!("sent{i}"), s.sent)).collect();
            let kv: Vec<(&str, u64)> = kv.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            write_info(&dir.join(format!("w{rank}.done")), &kv).map_err(err)?;
            done_written = true;
        }
        if !done_written {
            continue;
        }
        for &p in &partners {
            if let std::collections::btree_map::Entry::Vacant(e) = partner_sent.entry(p) {
                let f = dir.join(format!("w{p}.done"));
                if f.exists() {
                    e.insert(parse_info(&std::fs::read_to_string(&f).map_err(err)?));
                }
            }
        }
        if partner_sent.len() < partners.len() {
            continue;
        }
        let mut all_in = true;
        for (i, s) in states.iter().enumerate() {
            let sent = get(&partner_sent[&s.partner], &format!("sent{}", s.peer_idx))?;
            if s.received > sent {
                return Err(format!("{}: {} messages received, the peer sent {sent}: duplicates", ctx_of(i, s), s.received));
            }
            all_in &= s.received == sent;
        }
        if all_in {
            break;
        }
    }
    let secs = traffic.elapsed().as_secs_f64();
    // Quiet: everything sent to this worker has been received and every WR completed;
    // nothing more may arrive (a late duplicate completion would).
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(200) {
        let got = cq.poll(&mut wcs).map_err(err)?;
        if got > 0 {
            return Err(format!("{got} completions after the end, first wr_id {:#x} status {}: duplicates", wcs[0].wr_id(), wcs[0].status()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let rss_end = rss_kib();
    let rss_warm = rss_warm.unwrap_or(rss_end);
    println!(
        "SOAK worker rank={rank} local={local} qps={nqps} partners={} ops={total_ops} writes={} reads={} sends={} recvs={} faa={} cas_ok={} cas_fail={} \
         bytes_written={} bytes_checked={} completions={} recv_completions={} max_wr_ms={:.1} setup_ms={setup_ms} secs={secs:.2} \
         rss_warm_kib={} rss_end_kib={} anon_warm_kib={} anon_end_kib={} file_warm_kib={} file_end_kib={} shmem_warm_kib={} shmem_end_kib={}",
        partners.len(),
        n.writes,
        n.reads,
        n.sends,
        n.recvs,
        n.faa,
        n.cas_ok,
        n.cas_fail,
        n.bytes_written,
        n.bytes_checked,
        n.completions,
        n.recv_completions,
        n.max_wr_ms,
        rss_warm.0,
        rss_end.0,
        rss_warm.1,
        rss_end.1,
        rss_warm.2,
        rss_end.2,
        rss_warm.3,
        rss_end.3
    );
    Ok(())
}

fn post_recv(s: &QpState, mr: &Mr, c: &Config, i: usize, seq: u64) -> Result<(), String> {
    let slot = seq % c.window;
    let sge = [mr.sge(c.rcv(i, slot), c.max_len as u32).map_err(err)?];
    s.qp.post_recv(&[RecvWr::new(RECV | (i as u64) << 32 | seq, &sge)]).map_err(err)
}

fn wr_id(i: usize, seq: u64) -> u64 {
    (i as u64) << 32 | (seq & 0xffff_ffff)
}

/// Posts the QP's next operation (one WR, or two for WRITE + READ).
fn post_op(s: &mut QpState, mr: &Mr, c: &Config, rank: u64, i: usize, n: &mut Counts) -> Result<(), String> {
    let two_w = 2 * c.window;
    let seq = s.next_seq;
    let now = Instant::now();
    let roll = s.rng.below(100);
    let pend = |seq, kind| Pending { seq, kind, posted: now, len: 0, of_seq: 0, expect: 0 };
    if roll < 36 {
        // WRITE then READ of the same remote slot.
        let len = 1 + s.rng.below(c.max_len) as usize;
        let slot = seq % two_w;
        mr.write(c.loc(i, slot), &pattern(rank, i as u64, seq, len)).map_err(err)?;
        let back = (seq + 1) % two_w;
        mr.fill(c.loc(i, back), len, 0).map_err(err)?;
        let src = [mr.sge(c.loc(i, slot), len as u32).map_err(err)?];
        let dst = [mr.sge(c.loc(i, back), len as u32).map_err(err)?];
        let remote = s.tgt_va + slot * c.max_len;
        s.qp.post_send(&[
            SendWr::write(wr_id(i, seq), &src, remote, s.rkey).signaled(),
            SendWr::read(wr_id(i, seq + 1), &dst, remote, s.rkey).signaled(),
        ])
        .map_err(err)?;
        s.pending.push_back(pend(seq, Kind::Write));
        s.pending.push_back(Pending { len, of_seq: seq, ..pend(seq + 1, Kind::Read) });
        s.next_seq += 2;
        n.writes += 1;
        n.reads += 1;
        n.bytes_written += len as u64;
    } else if roll < 72 {
        let len = HDR + s.rng.below(c.max_len - HDR as u64 + 1) as usize;
        let slot = seq % two_w;
        let mut msg = pattern(rank, i as u64, s.sent, len);
        msg[0..4].copy_from_slice(&(rank as u32).to_le_bytes());
        msg[4..8].copy_from_slice(&(i as u32).to_le_bytes());
        msg[8..16].copy_from_slice(&s.sent.to_le_bytes());
        msg[16..20].copy_from_slice(&(len as u32).to_le_bytes());
        msg[20..24].copy_from_slice(&HDR_MARK.to_le_bytes());
        mr.write(c.loc(i, slot), &msg).map_err(err)?;
        let sge = [mr.sge(c.loc(i, slot), len as u32).map_err(err)?];
        s.qp.post_send(&[SendWr::send(wr_id(i, seq), &sge).signaled()]).map_err(err)?;
        s.pending.push_back(pend(seq, Kind::Send));
        s.next_seq += 1;
        s.sent += 1;
        n.sends += 1;
        n.bytes_written += len as u64;
    } else {
        let slot = seq % two_w;
        mr.write(c.loc(i, slot), &POISON.to_ne_bytes()).map_err(err)?;
        let res = [mr.sge(c.loc(i, slot), 8).map_err(err)?];
        let (wr, kind, swaps) = if roll < 92 {
            n.faa += 1;
            (SendWr::fetch_add(wr_id(i, seq), &res, s.cnt_va, s.rkey, 1), Kind::Faa, true)
        } else if s.rng.below(4) != 0 {
            n.cas_ok += 1;
            (SendWr::compare_swap(wr_id(i, seq), &res, s.cnt_va, s.rkey, s.counter, s.counter + 1), Kind::Cas, true)
        } else {
            n.cas_fail += 1;
            let wrong = s.counter + 1 + s.rng.below(1 << 20);
            (SendWr::compare_swap(wr_id(i, seq), &res, s.cnt_va, s.rkey, wrong, wrong ^ 0x5555), Kind::Cas, false)
        };
        s.qp.post_send(&[wr.signaled()]).map_err(err)?;
        s.pending.push_back(Pending { expect: s.counter, ..pend(seq, kind) });
        if swaps {
            s.counter += 1;
        }
        s.next_seq += 1;
    }
    Ok(())
}

/// A send-queue completion: the oldest outstanding WR of its QP, with its opcode; a READ's
/// bytes and an atomic's result checked.
fn on_send_wc(s: &mut QpState, wc: &Wc, mr: &Mr, c: &Config, rank: u64, i: usize, n: &mut Counts) -> Result<(), String> {
    let seq = wc.wr_id() & 0xffff_ffff;
    let Some(p) = s.pending.front() else {
        return Err(format!("completion of WR seq {seq} with nothing outstanding (next seq {}): duplicate", s.next_seq));
    };
    if seq != p.seq & 0xffff_ffff {
        let what = if seq < p.seq & 0xffff_ffff { "duplicate" } else { "lost or out of order" };
        return Err(format!("completion of WR seq {seq}, the oldest outstanding is {}: {what}", p.seq));
    }
    if wc.opcode() != Some(p.kind.opcode()) {
        return Err(format!("WR seq {seq} ({:?}) completed with opcode {:?}", p.kind, wc.opcode()));
    }
    match p.kind {
        Kind::Read => {
            let mut got = vec![0u8; p.len];
            mr.read(c.loc(i, seq % (2 * c.window)), &mut got).map_err(err)?;
            let want = pattern(rank, i as u64, p.of_seq, p.len);
            if got != want {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                return Err(format!(
                    "READ seq {seq} of WRITE seq {}: {} bytes, first difference at {at}: got {:#04x}, wrote {:#04x}",
                    p.of_seq, p.len, got[at], want[at]
                ));
            }
            n.bytes_checked += p.len as u64;
        }
        Kind::Faa | Kind::Cas => {
            let got = mr.read_u64(c.loc(i, seq % (2 * c.window))).map_err(err)?;
            if got != p.expect {
                return Err(format!("{:?} seq {seq} returned {got:#x}, the counter must have been {:#x}", p.kind, p.expect));
            }
            n.bytes_checked += 8;
        }
        Kind::Write | Kind::Send => {}
    }
    n.max_wr_ms = n.max_wr_ms.max(p.posted.elapsed().as_secs_f64() * 1e3);
    n.completions += 1;
    s.pending.pop_front();
    Ok(())
}

/// A receive: the oldest posted receive of its QP, holding the partner's next message.
fn on_recv(s: &mut QpState, wc: &Wc, mr: &Mr, c: &Config, i: usize, n: &mut Counts) -> Result<(), String> {
    let seq = wc.wr_id() & 0xffff_ffff;
    if seq != s.recv_next & 0xffff_ffff {
        return Err(format!("receive seq {seq} completed, the oldest posted is {}", s.recv_next));
    }
    if wc.opcode() != Some(WcOpcode::Recv) {
        return Err(format!("receive seq {seq} completed with opcode {:?}", wc.opcode()));
    }
    let len = wc.byte_len().unwrap_or(0) as usize;
    if !(HDR..=c.max_len as usize).contains(&len) {
        return Err(format!("receive seq {seq}: {len} bytes"));
    }
    let mut got = vec![0u8; len];
    mr.read(c.rcv(i, seq % c.window), &mut got).map_err(err)?;
    let u32_at = |k: usize| u32::from_le_bytes(got[k..k + 4].try_into().expect("4"));
    let (from, qp, msg, hlen, mark) = (u32_at(0), u32_at(4), u64::from_le_bytes(got[8..16].try_into().expect("8")), u32_at(16), u32_at(20));
    if mark != HDR_MARK || u64::from(from) != s.partner || u64::from(qp) != s.peer_idx || hlen as usize != len {
        return Err(format!(
            "receive seq {seq}: header rank {from} QP {qp} len {hlen} mark {mark:#x}, expected rank {} QP {} len {len}",
            s.partner, s.peer_idx
        ));
    }
    if msg != s.received {
        let what = if msg < s.received { "duplicate" } else { "gap (lost message)" };
        return Err(format!("receive seq {seq}: message {msg}, expected {}: {what}", s.received));
    }
    let want = pattern(s.partner, s.peer_idx, msg, len);
    if got[HDR..] != want[HDR..] {
        let at = HDR + got[HDR..].iter().zip(&want[HDR..]).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("message {msg}: {len} bytes, first difference at {at}: got {:#04x}, sent {:#04x}", got[at], want[at]));
    }
    n.bytes_checked += len as u64;
    n.recvs += 1;
    n.recv_completions += 1;
    s.received += 1;
    s.recv_next += 1;
    post_recv(s, mr, c, i, seq + c.window).map_err(|e| format!("repost receive: {e}"))
}

/// Where one worker runs: its namespace (none: the caller's), address, runtime directory.
struct Place {
    ns: Option<String>,
    ip: Ipv4Addr,
    rt: Option<String>,
}

pub fn driver(a: &Args) -> Result<(), String> {
    let c = Config::parse(a)?;
    let dir = a.path("dir")?;
    let exe = std::env::current_exe().map_err(err)?;
    let places: Vec<Place> = match a.str("ns-a") {
        Err(_) => (0..c.workers).map(|_| Place { ns: None, ip: Ipv4Addr::LOCALHOST, rt: None }).collect(),
        Ok(ns_a) => {
            let ns = [ns_a.to_owned(), a.str("ns-b")?.to_owned()];
            let ip = [a.ip("ip-a")?, a.ip("ip-b")?];
            let rt = [a.str("rt-a")?.to_owned(), a.str("rt-b")?.to_owned()];
            (0..c.workers as usize)
                .map(|r| Place { ns: Some(ns[r % 2].clone()), ip: ip[r % 2], rt: Some(rt[r % 2].clone()) })
                .collect()
        }
    };
    println!(
        "SOAK start workers={} qps_per_worker={} ops_per_qp={} window={} max_len={} seed={} cap_s={} wr_ms={} timeout={} retry={} places={}",
        c.workers,
        c.per_pair() * (c.workers - 1),
        c.ops,
        c.window,
        c.max_len,
        c.seed,
        c.seconds,
        c.wr_ms,
        c.timeout,
        c.retry,
        places.iter().map(|p| format!("{}@{}", p.ip, p.ns.as_deref().unwrap_or("-"))).collect::<Vec<_>>().join(",")
    );
    let start = Instant::now();
    let mut children: Vec<(Child, Option<std::process::ExitStatus>)> = Vec::new();
    for (r, p) in places.iter().enumerate() {
        let log = std::fs::File::create(dir.join(format!("w{r}.log"))).map_err(err)?;
        let mut cmd = match &p.ns {
            None => Command::new(&exe),
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(&exe);
                cmd
            }
        };
        if let Some(rt) = &p.rt {
            cmd.env("RVERBS_RUNTIME_DIR", rt);
        }
        cmd.arg("soak-worker")
            .args(["--dir", &dir.to_string_lossy(), "--rank", &r.to_string(), "--local", &p.ip.to_string()])
            .args(c.args())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(err)?)
            .stderr(log);
        let child = cmd.spawn().map_err(|e| format!("start worker {r}: {e}"))?;
        children.push((child, None));
    }
    // Wait for every worker (bounded: its own limit and 30 s more), telling the others
    // to stop when one fails.
    let limit = Duration::from_secs(c.seconds + 30);
    let mut failures: Vec<String> = Vec::new();
    loop {
        let mut running = 0;
        for (r, (child, status)) in children.iter_mut().enumerate() {
            if status.is_some() {
                continue;
            }
            match child.try_wait().map_err(err)? {
                Some(st) => {
                    *status = Some(st);
                    if !st.success() {
                        if failures.is_empty() {
                            let _ = std::fs::write(dir.join("abort"), b"");
                        }
                        failures.push(format!("worker {r}: {st}: {}", fail_line(&dir.join(format!("w{r}.log")))));
                    }
                }
                None => running += 1,
            }
        }
        if running == 0 {
            break;
        }
        if start.elapsed() > limit {
            for (r, (child, status)) in children.iter_mut().enumerate() {
                if status.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                    failures.push(format!("worker {r}: still running after {limit:?}: killed"));
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let wall = start.elapsed().as_secs_f64();

    // The workers' counts.
    let keys = [
        "qps",
        "ops",
        "writes",
        "reads",
        "sends",
        "recvs",
        "faa",
        "cas_ok",
        "cas_fail",
        "bytes_written",
        "bytes_checked",
        "completions",
        "recv_completions",
    ];
    let mut total: BTreeMap<&str, u64> = keys.iter().map(|k| (*k, 0)).collect();
    let mut max_wr_ms = 0f64;
    let mut max_secs = 0f64;
    let mut rss_lines = Vec::new();
    for r in 0..c.workers {
        let log = std::fs::read_to_string(dir.join(format!("w{r}.log"))).unwrap_or_default();
        let Some(line) = log.lines().find(|l| l.starts_with("SOAK worker ")) else {
            if failures.is_empty() {
                failures.push(format!("worker {r}: no SOAK worker line"));
            }
            continue;
        };
        let kv: BTreeMap<&str, &str> = line.split_whitespace().filter_map(|w| w.split_once('=')).collect();
        let num = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| format!("worker {r}: no {k} in its SOAK line"));
        let flt = |k: &str| kv.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        for k in keys {
            *total.get_mut(k).expect("key") += num(k)?;
        }
        max_wr_ms = max_wr_ms.max(flt("max_wr_ms"));
        max_secs = max_secs.max(flt("secs"));
        let (warm, end) = (num("rss_warm_kib")?, num("rss_end_kib")?);
        let bound = warm + warm / 10 + 8 * 1024;
        rss_lines.push(format!("{r}:{warm}->{end}"));
        if end > bound {
            failures.push(format!(
                "worker {r}: VmRSS grew from {warm} KiB after warm-up to {end} KiB (bound {bound} KiB = +10 % + 8 MiB; anon {}->{}, file {}->{}, shmem {}->{})",
                num("anon_warm_kib")?,
                num("anon_end_kib")?,
                num("file_warm_kib")?,
                num("file_end_kib")?,
                num("shmem_warm_kib")?,
                num("shmem_end_kib")?
            ));
        }
    }
    if failures.is_empty() && total["sends"] != total["recvs"] {
        failures.push(format!("{} messages sent, {} received", total["sends"], total["recvs"]));
    }
    let wrs = total["writes"] + total["reads"] + total["sends"] + total["faa"] + total["cas_ok"] + total["cas_fail"];
    if failures.is_empty() && total["completions"] != wrs {
        failures.push(format!("{wrs} WRs posted, {} completed", total["completions"]));
    }
    println!(
        "SOAK total workers={} qps={} ops={} writes={} reads={} sends={} recvs={} faa={} cas_ok={} cas_fail={} bytes_written={} bytes_checked={} \
         completions={} recv_completions={} max_wr_ms={max_wr_ms:.1} traffic_s={max_secs:.1} wall_s={wall:.1}",
        c.workers,
        total["qps"],
        total["ops"],
        total["writes"],
        total["reads"],
        total["sends"],
        total["recvs"],
        total["faa"],
        total["cas_ok"],
        total["cas_fail"],
        total["bytes_written"],
        total["bytes_checked"],
        total["completions"],
        total["recv_completions"]
    );
    println!("SOAK rss_kib warm->end {}", rss_lines.join(" "));
    if failures.is_empty() {
        println!("SOAK ok");
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// The worker's `FAIL` line, or its last line.
fn fail_line(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().find(|l| l.starts_with("FAIL")).or_else(|| text.lines().last()).unwrap_or("(empty log)").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_rank_qp_and_seq() {
        let p = pattern(1, 2, 3, 100);
        assert_eq!(p, pattern(1, 2, 3, 100));
        assert_eq!(&pattern(1, 2, 3, 37)[..], &p[..37]);
        assert_ne!(p, pattern(0, 2, 3, 100));
        assert_ne!(p, pattern(1, 1, 3, 100));
        assert_ne!(p, pattern(1, 2, 4, 100));
    }

    #[test]
    fn the_layout_keeps_parts_apart_and_counters_aligned() {
        let a = Args::parse(&["--window".into(), "4".into(), "--max-len".into(), "128".into()]).expect("args");
        let c = Config::parse(&a).expect("config");
        assert_eq!(c.loc(0, 0), c.tgt(0, 8));
        assert_eq!(c.rcv(0, 0), c.loc(0, 8));
        assert_eq!(c.cnt(0), c.rcv(0, 4));
        assert_eq!(c.tgt(1, 0), c.cnt(0) + 64);
        assert_eq!(c.cnt(3) % 8, 0);
    }
}
