//! Several producers at once into one CQ and one SRQ (ibv_poll_cq(3), ibv_create_srq(3)):
//! a CQ that several QPs complete to is written by whoever runs their work, threads of
//! this process or other processes of the host (docs/completion-queues.md), while its
//! owner polls it and posts receives to the SRQ. Whatever the interleaving:
//! - every work request completes exactly once, on the CQ of its queue, and the
//!   completions of one queue come in the order it was posted (ibv_poll_cq(3));
//! - with an SRQ, the messages of one QP take receives in the order they were sent, so
//!   their completions come in that order; each receive holds its own message;
//! - every byte a WRITE placed is where the QP's order put it, and a READ after a WRITE
//!   on the same QP returns what the WRITE placed;
//! - every FETCH_ADD on the counter all requesters share adds once and returns its own
//!   original (0, 1, … each once);
//! - a CQ resized while they write into it (ibv_resize_cq(3)) keeps every completion, an
//!   SRQ resized while they take from it (ibv_modify_srq(3)) every receive;
//! - nothing hangs: every wait is bounded.
//!
//! The processes test re-executes this binary as each requester (`RVERBS_TEST_ROLE`),
//! talking over the child's stdin/stdout with `@@ `-prefixed lines (`common::spawn_child`).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use rverbs::*;

/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(30);
/// Bytes of one receive.
const SLOT: usize = 512;
/// Receives kept posted to the SRQ (each in its own slot of the receive region): fewer
/// than the requesters' messages in flight, so that some find none and are refused with
/// an RNR NAK and sent again (rnr_retry 7: for ever, `common::PATH`).
const SLOTS: usize = 8;

/// The bytes of message `seq` from requester `who`, `len` long: a header of its origin
/// and length, then a pattern of both.
fn message(who: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len).map(|i| (i as u32).wrapping_mul(131).wrapping_add(seq * 7 + u32::from(who)) as u8).collect();
    let head = [&[who][..], &seq.to_le_bytes(), &(len as u32).to_le_bytes()].concat();
    let n = head.len().min(len);
    m[..n].copy_from_slice(&head[..n]);
    m
}

/// The length of message `seq`: at least the 9-byte header, at most a receive.
fn message_len(who: u8, seq: u32) -> usize {
    9 + (seq as usize * 37 + usize::from(who) * 11) % (SLOT - 9 + 1)
}

/// The immediate data of WRITE_WITH_IMM `seq` from requester `who`.
fn imm_of(who: u8, seq: u32) -> u32 {
    u32::from(who) << 24 | seq
}

/// What the receive completions from each requester must be, checked as they come: in
/// the order sent, each message in its own receive.
struct Receipts {
    /// Per requester: the next message expected.
    next: HashMap<u8, u32>,
    /// Per requester: which of its messages are SENDs (else WRITE_WITH_IMM), in order.
    sends: HashMap<u8, Vec<bool>>,
    seen: usize,
}

impl Receipts {
    /// Receipts of the messages `sends` names per requester ([`messages`]).
    fn new(sends: HashMap<u8, Vec<bool>>) -> Receipts {
        Receipts { next: HashMap::new(), sends, seen: 0 }
    }

    /// Whether every message `sends` names arrived.
    fn all_in(&self) -> bool {
        self.seen == self.sends.values().map(Vec::len).sum::<usize>()
    }

    /// Checks the receive completion `wc` of the receive in slot `wc.wr_id()` of `rmr`,
    /// taken by the QP of requester `qp_of` (by its QPN).
    fn check(&mut self, wc: &Wc, rmr: &Mr, qp_of: Option<u8>) {
        assert_eq!(wc.status(), WcStatus::Success, "a receive: {wc:?}");
        let slot = wc.wr_id() as usize;
        let (who, seq) = match wc.opcode() {
            Some(WcOpcode::Recv) => {
                let mut head = [0u8; 9];
                rmr.read(slot * SLOT, &mut head).unwrap();
                (head[0], u32::from_le_bytes(head[1..5].try_into().unwrap()))
            }
            Some(WcOpcode::RecvRdmaWithImm) => {
                let imm = wc.imm_data().expect("WRITE_WITH_IMM carries its immediate");
                ((imm >> 24) as u8, imm & 0xff_ffff)
            }
            other => panic!("a receive completion with opcode {other:?}"),
        };
        assert_eq!(Some(who), qp_of, "message {seq} of requester {who}: taken by the QP it was sent to");
        let next = self.next.entry(who).or_insert(0);
        assert_eq!(seq, *next, "requester {who}: its messages take receives in the order it sent them");
        *next += 1;
        let is_send = self.sends.get(&who).and_then(|s| s.get(seq as usize)).copied();
        if wc.opcode() == Some(WcOpcode::Recv) {
            assert_eq!(is_send, Some(true), "requester {who}, message {seq}: a SEND");
            let len = message_len(who, seq);
            assert_eq!(wc.byte_len(), Some(len as u32), "requester {who}, message {seq}: its length");
            let mut got = vec![0u8; len];
            rmr.read(slot * SLOT, &mut got).unwrap();
            assert!(got == message(who, seq, len), "requester {who}, message {seq}: the bytes of slot {slot} are another message's");
        } else {
            assert_eq!(is_send, Some(false), "requester {who}, message {seq}: a WRITE_WITH_IMM");
        }
        self.seen += 1;
    }
}

/// The receive region's slot `slot` posted to `srq` (wr_id: the slot).
fn post_slot(srq: &Srq, rmr: &Mr, slot: usize) {
    let sge = [rmr.sge(slot * SLOT, SLOT as u32).unwrap()];
    srq.post_recv(&[RecvWr::new(slot as u64, &sge)]).unwrap();
}

/// What requester `who` posts as its `k`-th work request: WRITE, SEND, WRITE_WITH_IMM,
/// READ back of what it wrote, or FETCH_ADD of 1 to the counter all requesters share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    Send,
    WriteImm,
    Read,
    FetchAdd,
}

fn kind(who: u8, k: u32) -> Kind {
    match (k + u32::from(who)) % 6 {
        0 | 1 => Kind::Write,
        2 => Kind::Send,
        3 => Kind::WriteImm,
        4 => Kind::Read,
        _ => Kind::FetchAdd,
    }
}

/// How many FETCH_ADDs the first `n` requests of `who` hold.
fn fetch_adds(who: u8, n: u32) -> usize {
    (0..n).filter(|&k| kind(who, k) == Kind::FetchAdd).count()
}

/// The responder's memory a requester reaches: its own target region, and the counter
/// every requester adds to (an 8-byte word), each as R_Key and address.
#[derive(Clone, Copy, Debug)]
struct Remote {
    target: (u32, u64),
    counter: (u32, u64),
}

/// Checks the originals the FETCH_ADDs of every requester returned, and the counter's
/// final value: each add ran once (a duplicate answered with its saved original,
/// docs/rocev2-wire.md §3.3), so the originals are 0, 1, … each once, and the counter is
/// their number.
fn check_counter(mut originals: Vec<u64>, counter: u64) {
    originals.sort_unstable();
    let n = originals.len() as u64;
    assert!(originals.iter().copied().eq(0..n), "every FETCH_ADD returned its own original: {originals:?}");
    assert_eq!(counter, n, "every FETCH_ADD added once");
}

/// Which of the first `n` requests of `who` carry a message (SEND: true, WRITE_WITH_IMM:
/// false), in order.
fn messages(who: u8, n: u32) -> Vec<bool> {
    (0..n)
        .filter_map(|k| match kind(who, k) {
            Kind::Send => Some(true),
            Kind::WriteImm => Some(false),
            _ => None,
        })
        .collect()
}

/// Bytes of each requester's target region.
const TARGET: usize = 1 << 16;
/// Bytes of each request's own part of a requester's source region (the longest WRITE
/// or READ).
const PART: usize = 4096;

/// Where WRITE or READ `k` of `who` reaches in its target region, and how long it is.
fn range(who: u8, k: u32) -> (usize, usize) {
    let len = 1 + (k as usize * 733 + usize::from(who) * 97) % PART;
    let off = (k as usize * 1_543 + usize::from(who) * 211) % (TARGET - len);
    (off, len)
}

/// The bytes WRITE `k` of `who` places.
fn write_data(who: u8, k: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 ^ k.wrapping_mul(2_654_435_761) >> 8) as u8 ^ who).collect()
}

/// `who`'s target region after its first `n` requests (a WRITE or WRITE_WITH_IMM places
/// its bytes; the region starts zeroed).
fn target_after(who: u8, n: u32) -> Vec<u8> {
    let mut t = vec![0u8; TARGET];
    for k in (0..n).filter(|&k| matches!(kind(who, k), Kind::Write | Kind::WriteImm)) {
        let (off, len) = range(who, k);
        t[off..off + len].copy_from_slice(&write_data(who, k, len));
    }
    t
}

/// One requester's work: `rounds` batches of `batch` signaled requests on `qp` into its
/// target region (`rkey`, `addr`) and the responder's SRQ, from `src` (a part of
/// [`PART`] bytes per request of a batch); `done` gives the batch's completions, which
/// must come in the order posted. A READ must return what the WRITEs before it on the
/// QP placed. With `fence`, a WRITE after a READ of its batch waits for the READ
/// (IBV_SEND_FENCE): on a lossy network a READ whose responses are lost is asked for
/// again, and the responder reads the memory again then (a duplicate READ is executed
/// anew, docs/rocev2-wire.md §3.3), after any WRITE posted behind it without a fence.
/// Returns the originals its FETCH_ADDs returned.
fn requester(who: u8, qp: &Qp, src: &Mr, remote: Remote, rounds: u32, fence: bool, done: &mut dyn FnMut() -> Wc) -> Vec<u64> {
    let (batch, (rkey, addr)) = (BATCH, remote.target);
    let mut originals = Vec::new();
    let mut target = vec![0u8; TARGET];
    let mut seq = 0u32;
    for round in 0..rounds {
        let (mut reads, mut adds) = (Vec::new(), Vec::new());
        for j in 0..batch {
            let k = round * batch + j;
            let (id, at) = (u64::from(k), j as usize * PART);
            let (off, len) = range(who, k);
            let kind = kind(who, k);
            let len = match kind {
                Kind::Send => message_len(who, seq),
                Kind::FetchAdd => 8,
                _ => len,
            };
            match kind {
                Kind::Write | Kind::WriteImm => {
                    let data = write_data(who, k, len);
                    src.write(at, &data).unwrap();
                    target[off..off + len].copy_from_slice(&data);
                }
                Kind::Send => src.write(at, &message(who, seq, len)).unwrap(),
                Kind::Read => reads.push((at, target[off..off + len].to_vec())),
                Kind::FetchAdd => adds.push(at),
            }
            let sge = [src.sge(at, len as u32).unwrap()];
            let (remote, counter) = (addr + off as u64, remote.counter);
            let wr = match kind {
                Kind::Write => SendWr::write(id, &sge, remote, rkey),
                Kind::WriteImm => SendWr::write(id, &sge, remote, rkey).with_imm(imm_of(who, seq)),
                Kind::Send => SendWr::send(id, &sge),
                Kind::Read => SendWr::read(id, &sge, remote, rkey),
                Kind::FetchAdd => SendWr::fetch_add(id, &sge, counter.1, counter.0, 1),
            };
            if matches!(kind, Kind::Send | Kind::WriteImm) {
                seq += 1;
            }
            let wr = if fence && !reads.is_empty() && matches!(kind, Kind::Write | Kind::WriteImm) { wr.flags(SendFlags::FENCE) } else { wr };
            qp.post_send(&[wr.signaled()]).unwrap();
        }
        for j in 0..batch {
            let wc = done();
            assert_eq!((wc.wr_id(), wc.status()), (u64::from(round * batch + j), WcStatus::Success), "requester {who}: its completions, in order");
        }
        for (at, want) in reads {
            let mut got = vec![0u8; want.len()];
            src.read(at, &mut got).unwrap();
            assert!(got == want, "requester {who}: a READ after WRITEs on its QP returns what they placed");
        }
        originals.extend(adds.into_iter().map(|at| src.read_u64(at).unwrap()));
    }
    originals
}

/// The responder's side: a receive CQ and an SRQ its QPs share, and the region the SRQ's
/// receives scatter into, [`SLOTS`] receives posted.
struct Shared {
    rcq: Cq,
    srq: Srq,
    rmr: Mr,
    receipts: Receipts,
    /// The receives after which [`Shared::resize_now_and_then`] resizes next, and how
    /// many times it did.
    next_resize: usize,
    resizes: usize,
}

impl Shared {
    fn new(ctx: &Context, pd: &Pd, sends: HashMap<u8, Vec<bool>>) -> Shared {
        let rcq = ctx.create_cq(&CqInit::new(CQ_SIZES[0])).unwrap();
        let srq = pd.create_srq(&SrqInit { max_wr: SRQ_SIZES[0], max_sge: 1, ..SrqInit::default() }).unwrap();
        let rmr = pd.alloc_mr(SLOTS * SLOT, ALL_ACCESS).unwrap();
        for slot in 0..SLOTS {
            post_slot(&srq, &rmr, slot);
        }
        Shared { rcq, srq, rmr, receipts: Receipts::new(sends), next_resize: RESIZE_EVERY, resizes: 0 }
    }

    /// A responder QP taking from the SRQ.
    fn qp(&self, pd: &Pd) -> Qp {
        pd.create_qp(&QpInit { srq: Some(&self.srq), ..QpInit::new(QpType::Rc, &self.rcq, CAP) }).unwrap()
    }

    /// Resizes the receive CQ (ibv_resize_cq(3)) and the SRQ (ibv_modify_srq(3),
    /// `max_wr`) once every [`RESIZE_EVERY`] receives, between [`CQ_SIZES`] and
    /// [`SRQ_SIZES`], while the requesters write into the one and take from the other.
    fn resize_now_and_then(&mut self) {
        if self.receipts.seen >= self.next_resize {
            self.next_resize += RESIZE_EVERY;
            self.resizes += 1;
            self.rcq.resize(CQ_SIZES[self.resizes % 2]).unwrap();
            let max_wr = SRQ_SIZES[self.resizes % 2];
            self.srq.modify(&SrqAttr { max_wr, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
        }
    }

    /// Polls the receive CQ once: each completion checked, its slot posted again. The
    /// number it found.
    fn poll(&mut self, owners: &HashMap<u32, u8>) -> usize {
        let mut wc = [Wc::default(); 16];
        let n = self.rcq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            let who = owners.get(&w.qp_num()).copied();
            self.receipts.check(w, &self.rmr, who);
            post_slot(&self.srq, &self.rmr, w.wr_id() as usize);
        }
        n
    }
}

/// The sizes the tests' CQs alternate between: each holds every completion that can be
/// outstanding (a batch per requester, a completion per receive).
const CQ_SIZES: [u32; 2] = [1024, 256];
/// The sizes the SRQ alternates between (it holds at most [`SLOTS`] receives).
const SRQ_SIZES: [u32; 2] = [SLOTS as u32, 4 * SLOTS as u32];
/// Completions between two resizes of a CQ (and receives between two of the SRQ).
const RESIZE_EVERY: usize = 50;

/// Requests per batch, and batches per requester.
const BATCH: u32 = 8;
const ROUNDS: u32 = 400;

/// Threads of one process, each with its QP pair, complete to one send CQ and one
/// receive CQ and take receives from one SRQ, while the main thread polls both CQs
/// (handing each send completion to its thread) and posts the receives again.
#[test]
fn threads_completing_to_one_cq_and_taking_from_one_srq_lose_and_repeat_nothing() {
    let ctx = open();
    threads(&ctx, &ctx, ROUNDS, PATH.timeout, false);
}

/// The same between two devices of this process on the loopback (127.0.12.1 and .2,
/// served by this test only): the requests travel as RoCEv2 packets, the receive
/// completions are written by the responder device's network side and the send
/// completions when the ACKs arrive, by whichever thread takes them.
#[test]
fn threads_across_hosts_completing_to_one_cq_and_taking_from_one_srq_lose_and_repeat_nothing() {
    let (da, db) = (device_on([127, 0, 12, 1], "producers", None), device_on([127, 0, 12, 2], "producers", None));
    threads(&da.open().unwrap(), &db.open().unwrap(), ROUNDS, PATH.timeout, false);
}

/// The same through the packet fault injector (127.0.12.3 and .4; docs/fault-injection.md:
/// 2 % dropped, 2 % duplicated, 5 % held back up to 200 us, 1 % corrupted): what is sent
/// again is placed and completed once, in order, whichever thread takes it. A lost packet
/// is sent again after ~17 ms (timeout 12), a quarter of the rounds.
#[test]
fn threads_across_a_lossy_network_completing_to_one_cq_and_taking_from_one_srq_lose_and_repeat_nothing() {
    let faults = "seed=12,drop=2%,dup=2%,reorder=5%,reorder_by=200us,corrupt=1%";
    let (da, db) = (device_on([127, 0, 12, 3], "producers", Some(faults)), device_on([127, 0, 12, 4], "producers", Some(faults)));
    threads(&da.open().unwrap(), &db.open().unwrap(), ROUNDS / 4, 12, true);
}

/// Connects `qp` of `ctx` to QP `dest` of `dest_ctx` (the same device, or another one of
/// this process, with the local ACK `timeout`).
fn connect_pair_side(qp: &Qp, ctx: &Context, dest: &Qp, dest_ctx: &Context, timeout: u8) {
    if std::ptr::eq(ctx, dest_ctx) {
        connect_qp(qp, ctx, dest.qp_num(), &PATH);
    } else {
        connect_across(qp, dest_ctx, dest.qp_num(), timeout);
    }
}

/// The threads tests: requesters on `a`, the responder's QPs, receive CQ and SRQ on `b`,
/// `rounds` batches each, the local ACK `timeout` across hosts; `lossy`: packets are
/// lost on the way (the requesters fence their WRITEs behind READs, see [`requester`]).
fn threads(a: &Context, b: &Context, rounds: u32, timeout: u8, lossy: bool) {
    let fence = lossy;
    // More requesters than CPUs (2 in CI): one preempted inside a completion's publish
    // while the others publish.
    const THREADS: u8 = 4;
    let (apd, bpd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let scq = a.create_cq(&CqInit::new(CQ_SIZES[0])).unwrap();
    let sends: HashMap<u8, Vec<bool>> = (0..THREADS).map(|w| (w, messages(w, rounds * BATCH))).collect();
    let mut shared = Shared::new(b, &bpd, sends);
    let mut owners = HashMap::new();
    let mut pairs = Vec::new();
    for who in 0..THREADS {
        let aq = apd.create_qp(&QpInit::new(QpType::Rc, &scq, CAP)).unwrap();
        let bq = shared.qp(&bpd);
        connect_pair_side(&aq, a, &bq, b, timeout);
        connect_pair_side(&bq, b, &aq, a, timeout);
        owners.insert(bq.qp_num(), who);
        let src = apd.alloc_mr(BATCH as usize * PART, ALL_ACCESS).unwrap();
        let dst = bpd.alloc_mr(TARGET, ALL_ACCESS).unwrap();
        pairs.push((aq, bq, src, dst));
    }
    let counter = bpd.alloc_mr(8, ALL_ACCESS).unwrap();
    let failed = AtomicBool::new(false);
    let originals = std::thread::scope(|s| {
        let (mut route, mut workers) = (HashMap::new(), Vec::new());
        for (who, (qp, _, src, dst)) in pairs.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Wc>();
            route.insert(qp.qp_num(), tx);
            let (failed, remote) = (&failed, Remote { target: (dst.rkey(), dst.iova()), counter: (counter.rkey(), counter.iova()) });
            workers.push(s.spawn(move || {
                let _flag = FailFlag(failed);
                let mut n = 0u32;
                let mut done = || {
                    let w = rx.recv_timeout(WAIT).unwrap_or_else(|e| panic!("requester {who}: no completion within {WAIT:?} after {n} ({e}), its QP in {:?}", qp.state()));
                    n += 1;
                    w
                };
                requester(who as u8, qp, src, remote, rounds, fence, &mut done)
            }));
        }
        let want = usize::from(THREADS) * (rounds * BATCH) as usize;
        let (mut sent, deadline) = (0, Instant::now() + WAIT * 2);
        let mut wc = [Wc::default(); 16];
        // A requester that failed ends the wait (the scope then reports its panic).
        while (sent < want || !shared.receipts.all_in()) && !failed.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "{sent} of {want} send completions, {} receives, after {:?}", shared.receipts.seen, WAIT * 2);
            let n = scq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                route[&w.qp_num()].send(*w).expect("its requester is waiting");
            }
            if (sent + n) / RESIZE_EVERY > sent / RESIZE_EVERY {
                scq.resize(CQ_SIZES[(sent + n) / RESIZE_EVERY % 2]).unwrap();
            }
            sent += n;
            shared.resize_now_and_then();
            if n + shared.poll(&owners) == 0 {
                std::thread::yield_now();
            }
        }
        let joined = workers.into_iter().map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        joined.flatten().collect::<Vec<u64>>()
    });
    assert_eq!(originals.len(), (0..THREADS).map(|w| fetch_adds(w, rounds * BATCH)).sum::<usize>());
    check_counter(originals, counter.read_u64(0).unwrap());
    for (who, (_, _, _, dst)) in pairs.iter().enumerate() {
        let mut got = vec![0u8; TARGET];
        dst.read(0, &mut got).unwrap();
        assert!(got == target_after(who as u8, rounds * BATCH), "requester {who}: its target region is what its WRITEs placed, in order");
    }
    let mut wc = [Wc::default(); 1];
    assert_eq!(scq.poll(&mut wc).unwrap(), 0, "no completion beyond the requests");
    assert_eq!(shared.rcq.poll(&mut wc).unwrap(), 0, "no receive completion beyond the messages");
    assert_eq!(shared.srq.len(), SLOTS, "every receive posted again");
}

/// The child's side of [`processes_completing_to_one_cq_and_taking_from_one_srq_lose_and_repeat_nothing`]:
/// a requester of its own device, connected to the parent's QP it names.
fn requester_process(who: u8) {
    let say = |msg: &str| {
        println!("@@ {msg}");
        std::io::stdout().flush().unwrap();
    };
    let mut lines = std::io::stdin().lock().lines();
    let mut hear = || -> Vec<u64> {
        let line = lines.next().expect("the parent closed the pipe").unwrap();
        line.split_whitespace().map(|w| w.parse().unwrap()).collect()
    };
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(256)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let src = pd.alloc_mr(BATCH as usize * PART, ALL_ACCESS).unwrap();
    say(&qp.qp_num().to_string());
    let [b_qpn, rkey, addr, counter_rkey, counter_addr] = hear()[..] else { panic!("the parent's QP, R_Keys and addresses") };
    connect_qp(&qp, &ctx, b_qpn as u32, &PATH);
    say("ready");
    assert!(hear().is_empty(), "go");
    let mut done = || poll_one(&cq);
    let remote = Remote { target: (rkey as u32, addr), counter: (counter_rkey as u32, counter_addr) };
    let originals = requester(who, &qp, &src, remote, ROUNDS, false, &mut done);
    let list: Vec<String> = originals.iter().map(u64::to_string).collect();
    say(&format!("done {}", list.join(" ")));
}

/// Processes of this host, each a requester with its QP, send to QPs of this process
/// that complete to one receive CQ and take receives from one SRQ: their receive
/// completions are written into this process's CQ by the requesters' processes, at the
/// same time, while this process polls it and posts the receives again.
#[test]
fn processes_completing_to_one_cq_and_taking_from_one_srq_lose_and_repeat_nothing() {
    // More requesters than CPUs, as with threads.
    const PROCESSES: u8 = 3;
    const TEST: &str = "processes_completing_to_one_cq_and_taking_from_one_srq_lose_and_repeat_nothing";
    if let Ok(who) = std::env::var("RVERBS_TEST_ROLE") {
        return requester_process(who.parse().unwrap());
    }
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let sends: HashMap<u8, Vec<bool>> = (0..PROCESSES).map(|w| (w, messages(w, ROUNDS * BATCH))).collect();
    let mut shared = Shared::new(&ctx, &pd, sends);
    let mut owners = HashMap::new();
    let mut peers = Vec::new();
    let counter = pd.alloc_mr(8, ALL_ACCESS).unwrap();
    for who in 0..PROCESSES {
        let (child, mut stdin, lines) = spawn_child(TEST, &[("RVERBS_TEST_ROLE", &who.to_string())]);
        let child = KillOnDrop(child);
        let hear = |lines: &mpsc::Receiver<String>| lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("requester {who} said nothing within {WAIT:?} ({e})"));
        let a_qpn: u32 = hear(&lines).trim().parse().unwrap();
        let b = shared.qp(&pd);
        let dst = pd.alloc_mr(TARGET, ALL_ACCESS).unwrap();
        writeln!(stdin, "{} {} {} {} {}", b.qp_num(), dst.rkey(), dst.iova(), counter.rkey(), counter.iova()).unwrap();
        stdin.flush().unwrap();
        connect_qp(&b, &ctx, a_qpn, &PATH);
        assert_eq!(hear(&lines).trim(), "ready");
        owners.insert(b.qp_num(), who);
        peers.push((child, stdin, lines, b, dst));
    }
    // Every requester starts once all are connected.
    for (_, stdin, ..) in &mut peers {
        writeln!(stdin).unwrap();
        stdin.flush().unwrap();
    }
    let deadline = Instant::now() + WAIT * 2;
    while !shared.receipts.all_in() {
        assert!(Instant::now() < deadline, "{} receives after {:?}", shared.receipts.seen, WAIT * 2);
        shared.resize_now_and_then();
        if shared.poll(&owners) == 0 {
            for (who, (child, ..)) in peers.iter_mut().enumerate() {
                if let Some(status) = child.0.try_wait().unwrap() {
                    assert!(status.success(), "requester {who}: {status}");
                }
            }
            std::thread::yield_now();
        }
    }
    let mut originals = Vec::new();
    for (who, (child, _, lines, _, dst)) in peers.iter_mut().enumerate() {
        let done = lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("requester {who} did not finish within {WAIT:?} ({e})"));
        let mut words = done.split_whitespace();
        assert_eq!(words.next(), Some("done"), "requester {who}");
        let theirs: Vec<u64> = words.map(|w| w.parse().unwrap()).collect();
        assert_eq!(theirs.len(), fetch_adds(who as u8, ROUNDS * BATCH), "requester {who}: an original per FETCH_ADD");
        originals.extend(theirs);
        let status = child.0.wait().unwrap();
        assert!(status.success(), "requester {who}: {status}");
        let mut got = vec![0u8; TARGET];
        dst.read(0, &mut got).unwrap();
        assert!(got == target_after(who as u8, ROUNDS * BATCH), "requester {who}: its target region is what its WRITEs placed, in order");
    }
    check_counter(originals, counter.read_u64(0).unwrap());
    let mut wc = [Wc::default(); 1];
    assert_eq!(shared.rcq.poll(&mut wc).unwrap(), 0, "no receive completion beyond the messages");
    assert_eq!(shared.srq.len(), SLOTS, "every receive posted again");
}

/// Sets its flag if its thread panics.
struct FailFlag<'a>(&'a AtomicBool);

impl Drop for FailFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A child process killed if the test ends before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
