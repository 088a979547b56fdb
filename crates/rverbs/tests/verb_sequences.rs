//! Random sequences of RC, UC and UD work requests against a model of both sides' memory:
//! a device that programs hand their memory to must never mis-write it, lose or duplicate
//! a completion, or hang, whatever the requests ask (proptest generates them, and shrinks
//! a failing sequence to a short one).
//!
//! Each case connects a pair of QPs (RC, or UC or UD below), fills both regions with a byte
//! pattern, and runs up to 40 operations: RDMA WRITE and SEND gathered from up to three
//! pieces or inline (IBV_SEND_INLINE), either with immediate data or without, RDMA READ
//! scattering into up to three pieces, atomic fetch-and-add and compare-and-swap, receives
//! scattering into up to three pieces (posted with `Qp::post_recv` or, as the C library
//! posts, `post_recv_unpinned`), type 2 memory windows the responder binds over part of its
//! region (ibv_bind_mw(3)), which RDMA requests reach half the time when they fit and a
//! SEND_WITH_INV ends, and now and then one side's region replaced by a new one (the old
//! one's last handle dropped). About one in six carries one fault: a local piece outside
//! its region or under an unknown or stale L_Key, a remote range past the region's end or
//! the window's (inside the region or not), or under an unknown R_Key, the R_Key of a
//! replaced region no receive keeps or the key of a window that ended, a SEND longer than
//! its receive; one receive in twenty has an unknown L_Key. A receive posted pinned keeps
//! the region it names registered until its completion is polled (docs/memory.md, "Buffer
//! lifetime"): a SEND into it after its region was replaced lands in the old region, and
//! one into an unpinned receive of a region gone is refused as a bad scatter list is. A
//! range made faulty ends one byte past its region half the time, where an off-by-one would
//! hide. Checked after each completion that covers them (an RC completion covers every
//! request posted before it, ibv_poll_cq(3)), and once more at the end:
//! - the completions of the requester's CQ are exactly the signaled requests and the
//!   failed one, in order, with the status the rule names: IBV_WC_LOC_PROT_ERR for a local
//!   fault, IBV_WC_REM_ACCESS_ERR for a remote one, IBV_WC_REM_INV_REQ_ERR for a SEND too
//!   long (the receive: IBV_WC_LOC_LEN_ERR), IBV_WC_REM_OP_ERR for a SEND into a receive
//!   with a bad scatter list (the receive: IBV_WC_LOC_QP_OP_ERR);
//! - the responder's CQ has each consumed receive once, in order, with its opcode
//!   (IBV_WC_RECV, or IBV_WC_RECV_RDMA_WITH_IMM for a WRITE with immediate), length and
//!   immediate data; when a remote fault put the responder in the error state, every
//!   receive it still held completes with IBV_WC_WR_FLUSH_ERR (ibv_modify_qp(3), "Error"
//!   state), and with a local fault the responder keeps them;
//! - every byte of both regions is what the successful requests made it: a failed request
//!   writes nothing, except where no rule says what it leaves: the buffer of a receive
//!   that completed in error (ibv_poll_cq(3) makes only its wr_id, status, qp_num and
//!   vendor_err valid), and the remote slot of an atomic whose local result buffer was
//!   refused (the responder may have run it first);
//! - nothing takes longer than 10 s.
//!
//! After a failure both QPs are destroyed (their CQs must then be empty) and a new pair
//! is connected over the same CQs and regions.
//!
//! The same model runs over the same-host link and over RoCEv2 between two devices of
//! this process on the loopback (127.0.11.1 and 127.0.11.2, served by this test only),
//! where messages longer than the path MTU (1024) travel as several packets; the one rule
//! that differs between them is in docs/rxe-differences.md, "A refused WRITE with
//! immediate on the same host takes its receive". And once more across hosts (127.0.11.3
//! and .4) through the packet fault injector (docs/fault-injection.md: 2 % dropped, 2 %
//! duplicated, 5 % held back up to 200 us, 1 % corrupted), where everything sent again
//! must be placed once; there the NAK of a refused request may be lost, and the requester
//! then ends with IBV_WC_RETRY_EXC_ERR instead of the NAK's status. The same-host and the
//! plain RoCEv2 runs are repeated with the responder's receives in an SRQ (127.0.11.5 and
//! .6 for the latter), which keeps them when the QP taking from it fails: they are not
//! flushed, and the next QP on the SRQ takes them. And the same-host link once more, with
//! and without an SRQ, to a responder in a child process (`responder.rs`): the requester
//! then reaches the responder's memory and receive ring as a peer process does (cross-
//! memory attach, or a shared segment with `RVERBS_SHARED_MR=1`).
//!
//! UC runs the same model on the same-host link, in this process and (through an SRQ) in
//! a child, with WRITE and SEND only (ibv_post_send(3)): its requester completes every
//! message it sent, successfully unless a local fault stops it; a message the responder
//! refuses after taking a receive completes that receive in error and ends the responder,
//! which flushes its other receives and drops every message after, unseen by the
//! requester (docs/rxe-differences.md, "A UC receive already taken completes in error");
//! one refused before (a plain WRITE) is dropped and changes nothing. On the same-host
//! links the message is placed before the requester's completion is written
//! (docs/rxe-differences.md, "A UC or UD send completion on the same host comes after its
//! placement"); across hosts (127.0.11.9 and .10; with an SRQ .11 and .12) that
//! completion says only that it left, so there the model waits (10 s at most) after each
//! request for the responder's region to show what it says, and every message that takes
//! a receive is signaled (see `Model::signals_each_receive`).
//!
//! UD the same way, with SEND only (every one signaled, at most one path MTU) and pinned
//! receives: a receive gets the 40-byte GRH area first (left undefined by the model) and
//! the payload after it, `byte_len` counting both; one too small completes with
//! IBV_WC_REM_INV_REQ_ERR and the QP goes on (docs/rxe-differences.md, "A UD receive too
//! small"); one the responder cannot use ends it, as UC's. A message under a Q_Key that is
//! not the responder's, one above the path MTU (never sent) and one that finds no receive
//! posted are dropped unseen: the requester completes them with success, no receive is
//! taken, and the next message lands in the receive that was next. UD runs across hosts
//! too (127.0.11.7 and .8; with an SRQ .13 and .14), where the network responder places
//! each SEND and the model waits for it through the receive's completion (see that test
//! for the fault left out there).

mod common;
#[path = "verb_sequences/responder.rs"]
mod responder;

use common::*;
use responder::{ChildProcess, Responder, Served};
use proptest::prelude::*;
use rverbs::*;
use std::time::{Duration, Instant};

/// The bytes of each side's region.
const LEN: usize = 8192;
/// What the test's regions allow: every remote access, and windows bound over them.
const REGION_ACCESS: Access = ALL_ACCESS.union(Access::MW_BIND);
/// The GRH area at the start of a UD receive.
const GRH: usize = 40;
/// The largest UD message the model sends (one path MTU: a larger one is not sent).
const UD_MAX: usize = 1024;
/// The Q_Key of the test's UD QPs (the fixtures' default).
const QKEY: u32 = 0x1111_1111;
/// An R_Key or L_Key no region of the test has (keys are table slots, never this high).
const UNKNOWN_KEY: u32 = 0xffff_ff00;

/// The one thing wrong with an operation, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// A local piece past the end of its region.
    LocalRange,
    /// A local piece under an L_Key nobody has.
    LocalKey,
    /// The remote range past the end of the peer's region (a UD SEND: a message above
    /// the path MTU; another SEND: none).
    RemoteRange,
    /// An R_Key nobody has (a UD SEND: a Q_Key that is not the responder's; another SEND:
    /// none).
    RemoteKey,
    /// A SEND longer than the receive it lands in.
    Short,
}

/// How a WRITE or SEND carries its data: gathered by the device from the pieces, or
/// copied at the post (IBV_SEND_INLINE, when it fits `max_inline_data`); and the immediate
/// data it carries, if any (a WRITE with one consumes a receive).
#[derive(Clone, Copy, Debug)]
struct Carry {
    inline: bool,
    imm: Option<u32>,
}

#[derive(Clone, Debug)]
enum Op {
    /// RDMA WRITE of the pieces `src` (offset, length) of the requester's region to `dst`
    /// (with `via`, through the responder's memory window if one is bound and the range
    /// fits it: [`Op::Window`]).
    Write { src: Vec<(usize, usize)>, dst: usize, signaled: bool, carry: Carry, fault: Fault, via: bool },
    /// RDMA READ at `src` of the responder's region, scattered into the pieces `dst` of
    /// the requester's (in order, not overlapping; as many bytes as they hold); `via`: as
    /// a WRITE's.
    Read { dst: Vec<(usize, usize)>, src: usize, fault: Fault, via: bool },
    /// SEND of the pieces `src` into the oldest receive; with `inv`, SEND_WITH_INV of the
    /// responder's window when one is bound (and the SEND carries no immediate data, has
    /// no fault and fits a receive it can use), which ends the window.
    Send { src: Vec<(usize, usize)>, signaled: bool, carry: Carry, fault: Fault, inv: bool },
    /// A receive scattering into the pieces `dst` of the responder's region (in order,
    /// not overlapping); `bad`: its first piece under an L_Key nobody has; `pinned`:
    /// posted with `Qp::post_recv`, which keeps its region registered until its
    /// completion is polled (docs/memory.md, "Buffer lifetime"), else with
    /// `post_recv_unpinned`, as the C library posts.
    Recv { dst: Vec<(usize, usize)>, bad: bool, pinned: bool },
    /// A side's region deregistered (its last handle dropped) and a new one registered in
    /// its place, after every request before has completed: the requester's, or with
    /// `responder` the responder's. The old L_Key is stale, and the local key faults after
    /// it use it half the time; the responder's old R_Key is stale once no receive keeps
    /// its region (see [`Held::keeps`]), and the remote key faults after that use it half
    /// the time.
    NewRegion { responder: bool },
    /// Fetch-and-add (`swap: None`) or compare-and-swap at the 8-byte slot `slot`, the
    /// original value into the requester's slot `result`; `hit` compares with the value
    /// there; `via`: as a WRITE's.
    Atomic { slot: usize, result: usize, add: u64, swap: Option<(bool, u64)>, fault: Fault, via: bool },
    /// A type 2 memory window bound by the responder (ibv_bind_mw(3), a BIND_MW work
    /// request) over `len` bytes at `off` of its region, with every remote right, after
    /// every request before has completed; the window bound before is deallocated. Its
    /// key reaches exactly its range: a range that ends past it is refused
    /// (IBV_WC_REM_ACCESS_ERR) even inside the region, and so is its key once it is
    /// deallocated or invalidated (the remote key faults use it half the time). Replacing
    /// the responder's region or its QP deallocates it too.
    Window { off: usize, len: usize },
}

fn pieces() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((0..LEN - 1, 0usize..1400), 1..=3)
        .prop_map(|v| v.into_iter().map(|(off, len)| (off, len.min(LEN - off))).collect())
}

/// Up to three pieces in increasing order that do not overlap (a scatter list whose
/// pieces overlap leaves the order of their bytes to the device).
fn scatter() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((0usize..600, 0usize..2000), 1..=3).prop_map(|v| {
        let mut at = 0;
        let mut out = Vec::new();
        for (gap, len) in v {
            let off = (at + gap).min(LEN);
            let len = len.min(LEN - off);
            out.push((off, len));
            at = off + len;
        }
        out
    })
}

fn carry() -> impl Strategy<Value = Carry> {
    (prop::bool::weighted(0.25), prop::option::weighted(0.25, any::<u32>())).prop_map(|(inline, imm)| Carry { inline, imm })
}

fn fault(choices: &'static [Fault]) -> impl Strategy<Value = Fault> {
    prop_oneof![10 => Just(Fault::None), 2 => prop::sample::select(choices)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (pieces(), 0..LEN, any::<bool>(), carry(), fault(&[Fault::LocalRange, Fault::LocalKey, Fault::RemoteRange, Fault::RemoteKey]), any::<bool>())
            .prop_map(|(src, dst, signaled, carry, fault, via)| Op::Write { src, dst, signaled, carry, fault, via }),
        2 => (scatter(), 0..LEN, fault(&[Fault::LocalRange, Fault::LocalKey, Fault::RemoteRange, Fault::RemoteKey]), any::<bool>())
            .prop_map(|(dst, src, fault, via)| Op::Read { dst, src, fault, via }),
        3 => (pieces(), any::<bool>(), carry(), fault(&[Fault::LocalRange, Fault::LocalKey, Fault::Short, Fault::RemoteKey, Fault::RemoteRange]), prop::bool::weighted(0.5))
            .prop_map(|(src, signaled, carry, fault, inv)| Op::Send { src, signaled, carry, fault, inv }),
        2 => (0..LEN / 8, 1usize..=LEN / 8).prop_map(|(at, n)| Op::Window { off: at * 8, len: (n * 8).min(LEN - at * 8) }),
        3 => (scatter(), prop::bool::weighted(0.05), any::<bool>()).prop_map(|(dst, bad, pinned)| Op::Recv { dst, bad, pinned }),
        1 => any::<bool>().prop_map(|responder| Op::NewRegion { responder }),
        2 => (0..LEN / 8, 0..LEN / 8, any::<u64>(), prop::option::of((any::<bool>(), any::<u64>())),
              fault(&[Fault::LocalKey, Fault::RemoteRange, Fault::RemoteKey]), any::<bool>())
            .prop_map(|(slot, result, add, swap, fault, via)| Op::Atomic { slot, result, add, swap, fault, via }),
    ]
}

/// What one side's region should hold: `None` where the rules leave a byte undefined.
struct Image(Vec<Option<u8>>);

/// The bytes of a region of the test.
fn contents(mr: &Mr) -> Vec<u8> {
    let mut b = vec![0; LEN];
    mr.read(0, &mut b).unwrap();
    b
}

impl Image {
    fn of(bytes: Vec<u8>) -> Image {
        Image(bytes.into_iter().map(Some).collect())
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.0[off..off + len].iter().map(|b| b.expect("a source byte the model knows")).collect()
    }

    fn put(&mut self, off: usize, data: &[u8]) {
        for (k, b) in data.iter().enumerate() {
            self.0[off + k] = Some(*b);
        }
    }

    /// `len` bytes at `off` left undefined.
    fn forget(&mut self, off: usize, len: usize) {
        self.0[off..off + len].iter_mut().for_each(|b| *b = None);
    }

    fn u64_at(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.bytes(off, 8).try_into().unwrap())
    }

    /// Whether a region's bytes are what the model says (a byte left undefined agrees
    /// with anything).
    fn agrees(&self, bytes: &[u8]) -> bool {
        self.0.iter().zip(bytes).all(|(want, got)| want.is_none_or(|w| w == *got))
    }

    /// Compares with a region's bytes; a byte the model left undefined takes the region's
    /// value.
    fn check(&mut self, bytes: &[u8], who: &str, step: usize) -> std::result::Result<(), TestCaseError> {
        for (i, (want, got)) in self.0.iter_mut().zip(bytes).enumerate() {
            match want {
                Some(w) if w != got => {
                    return Err(TestCaseError::fail(format!("after step {step}: {who}'s byte {i} is {got:#04x}, the model says {w:#04x}")));
                }
                Some(_) => {}
                None => *want = Some(*got),
            }
        }
        Ok(())
    }
}

/// The responder's memory window: its key and range in the region.
#[derive(Clone, Copy, Debug)]
struct Win {
    key: u32,
    off: usize,
    len: usize,
}

/// A receive the responder holds.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    id: u64,
    dst: Vec<(usize, usize)>,
    bad: bool,
    pinned: bool,
    /// The generation of the responder's region its pieces name.
    gen: u32,
}

impl Held {
    /// Whether it keeps its region registered: posted pinned (`Qp::post_recv`), with a
    /// piece under the region's L_Key. It does until its completion is polled, or the
    /// queue flushes or drops it (docs/memory.md, "Buffer lifetime").
    fn keeps(&self) -> bool {
        self.pinned && (!self.bad || self.dst.len() > 1)
    }

    fn room(&self) -> usize {
        self.dst.iter().map(|p| p.1).sum()
    }

    /// UD: the 40-byte GRH area (left undefined: the model does not build headers), then
    /// `data`, scattered into the pieces in order (docs/rocev2-wire.md §5.3).
    fn place_after_grh(&self, image: &mut Image, data: &[u8]) {
        let mut at = 0;
        for &(off, len) in &self.dst {
            for k in 0..len {
                match (at + k).checked_sub(GRH) {
                    None => image.forget(off + k, 1),
                    Some(i) if i < data.len() => image.put(off + k, &data[i..i + 1]),
                    Some(_) => {}
                }
            }
            at += len;
        }
    }

    /// Scatters `data` into the pieces, in order (the model's side of a SEND).
    fn place(&self, image: &mut Image, data: &[u8]) {
        let mut rest = data;
        for &(off, len) in &self.dst {
            let n = len.min(rest.len());
            image.put(off, &rest[..n]);
            rest = &rest[n..];
        }
    }

    /// Every byte the pieces cover left undefined (a receive that completed in error).
    fn spoil(&self, image: &mut Image) {
        for &(off, len) in &self.dst {
            image.forget(off, len);
        }
    }
}

/// Takes the oldest receive from `held` for a message, noting the region it keeps until
/// its completion is polled.
fn take(held: &mut std::collections::VecDeque<Held>, unpolled: &mut Vec<u32>) -> Held {
    let r = held.pop_front().unwrap();
    if r.keeps() {
        unpolled.push(r.gen);
    }
    r
}

/// What the responder's CQ should give for a receive: wr_id, status, and for a success
/// the opcode, byte_len and immediate data.
type RecvWant = (u64, WcStatus, Option<(WcOpcode, u32, Option<u32>)>);

/// Posts `r` to the responder.
fn post_held(b: &mut Responder, r: &Held, step: usize) -> std::result::Result<(), TestCaseError> {
    b.post(r).map_err(|e| TestCaseError::fail(format!("step {step}: {e}")))
}

/// Where the two sides' QPs meet.
enum Wire {
    /// The same-host link (the fixtures of `common`).
    SameHost,
    /// Two devices of this process, each serving its own loopback address: RoCEv2 over
    /// UDP, through the packet fault injector when `lossy`.
    Hosts { lossy: bool, _devs: (Device, Device) },
    /// The same-host link to a responder in another process ([`ChildProcess`]).
    Process,
}

/// The requester `a` and the responder `b` (whose QPs may take receives from an SRQ),
/// connected over `wire`.
struct Link {
    a: Side,
    b: Responder,
    wire: Wire,
    /// RC, or UC or UD (same-host links only: there a request is placed before the
    /// requester's completion, which over the network nothing tells a UC or UD requester).
    qp_type: QpType,
    /// The responder's QP number (set by [`renew`]).
    b_qpn: u32,
    /// UD: the requester's address handle towards the responder's device.
    ah: Option<Ah>,
}

impl Link {
    /// Connects the requester's QP and the responder's QP `b_qpn`.
    fn connect(&mut self, b_qpn: u32) {
        // A UD QP is not connected (`responder::path_to`).
        let (Wire::Hosts { lossy, .. }, Responder::Here(b), false) = (&self.wire, &self.b, self.qp_type == QpType::Ud) else {
            self.a.qp.connect(&responder::path_to(&self.a.ctx, b_qpn, self.qp_type)).unwrap();
            return self.b.connect(self.a.qp.qp_num());
        };
        let lossy = *lossy;
        for (x, y) in [(&self.a, &b.side), (&b.side, &self.a)] {
            let dgid = y.ctx.query_gid(1, 1).unwrap();
            let path = RemotePath {
                access: ALL_ACCESS,
                path_mtu: Mtu::Mtu1024,
                // A lost packet is sent again after ~17 ms (4.096 us << 12) on the lossy
                // network, instead of the 67 ms of pyverbs' timeout: short enough for a
                // few lost packets a case, long enough that a machine busy with other
                // tests does not starve a peer through all seven retries.
                timeout: if lossy { 12 } else { PATH.timeout },
                retry_cnt: PATH.retry_cnt,
                rnr_retry: PATH.rnr_retry,
                min_rnr_timer: PATH.min_rnr_timer,
                max_rd_atomic: PATH.max_rd_atomic,
                max_dest_rd_atomic: PATH.max_rd_atomic,
                ..RemotePath::new(dgid, 1, y.qp.qp_num())
            };
            x.qp.connect(&path).unwrap();
        }
    }

    /// Whether the link is the network between two devices, not the same host. There
    /// messages travel as packets of the path MTU (1024) (docs/rxe-differences.md, "A
    /// refused WRITE with immediate on the same host takes its receive"), and a UC or UD
    /// requester's completion says the message left, not that it was placed
    /// (docs/rxe-differences.md, "A UC or UD send completion on the same host comes after
    /// its placement").
    fn across_hosts(&self) -> bool {
        matches!(self.wire, Wire::Hosts { .. })
    }

    /// Whether packets may be lost, duplicated, reordered or corrupted on the way.
    fn lossy(&self) -> bool {
        matches!(self.wire, Wire::Hosts { lossy: true, .. })
    }

}

/// A new SRQ of `b`'s PD.
fn srq_of(b: &Side) -> Srq {
    b.pd.create_srq(&SrqInit { max_wr: 256, max_sge: CAP.max_recv_sge, srq_limit: 0, srq_context: 0 }).unwrap()
}

/// A side's objects on the device `ctx` is open on.
fn side_on_device(ctx: Context) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(256)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let mr = pd.alloc_mr(LEN, REGION_ACCESS).unwrap();
    Side { ctx, pd, cq, qp, mr }
}

/// The same-host link; with `srq`, the responder's QPs take receives from an SRQ. Each
/// case connects a new pair ([`renew`]).
fn same_host(srq: bool, qp_type: QpType) -> Link {
    let (a, b) = (side_on_device(open()), side_on_device(open()));
    let ah = (qp_type == QpType::Ud).then(|| Ah::new(&a.pd, &av(&a.ctx)).unwrap());
    Link { a, b: Responder::Here(Served::new(b, srq, qp_type)), wire: Wire::SameHost, qp_type, b_qpn: 0, ah }
}

/// The same-host link to a responder in a child process, started in test `test` (which
/// serves there: [`responder::serve_if_child`]).
fn another_process(test: &str, srq: bool, qp_type: QpType) -> Link {
    let a = side_on_device(open());
    // The child's device is this host's: the same address.
    let ah = (qp_type == QpType::Ud).then(|| Ah::new(&a.pd, &av(&a.ctx)).unwrap());
    Link { a, b: Responder::Child(ChildProcess::spawn(test, srq, qp_type)), wire: Wire::Process, qp_type, b_qpn: 0, ah }
}

/// Two devices on `ips`, each sending through the packet fault injector `faults` if given
/// (`RVERBS_FAULTS` syntax, docs/fault-injection.md).
fn two_hosts(ips: [[u8; 4]; 2], faults: Option<&str>, srq: bool, qp_type: QpType) -> Link {
    let host = |ip: [u8; 4]| {
        let tag = format!("seq-{}", ip[3]);
        let dir = std::env::temp_dir().join(format!("rverbs-verbseq-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let faults = faults.map(|f| rverbs_proto::fault::FaultConfig::parse(f).unwrap());
        DeviceConfig::new().name(&tag).runtime_dir(&dir).addresses(Some(vec![std::net::IpAddr::from(ip)])).net_faults(faults).open().unwrap()
    };
    let (da, db) = (host(ips[0]), host(ips[1]));
    let (a, b) = (side_on_device(da.open().unwrap()), side_on_device(db.open().unwrap()));
    // UD: towards the responder's device's address (GID index 1), from the requester's.
    let ah = (qp_type == QpType::Ud).then(|| {
        let dgid = b.ctx.query_gid(1, 1).unwrap();
        let grh = GlobalRoute { dgid, sgid_index: 1, hop_limit: 64, ..GlobalRoute::default() };
        Ah::new(&a.pd, &AhAttr { grh: Some(grh), port_num: 1, ..AhAttr::default() }).unwrap()
    });
    Link { a, b: Responder::Here(Served::new(b, srq, qp_type)), wire: Wire::Hosts { lossy: faults.is_some(), _devs: (da, db) }, qp_type, b_qpn: 0, ah }
}

/// Polls `cq` until it has given `n` completions or 10 s passed.
fn poll_n(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [Wc::default(); 8];
    while got.len() < n && Instant::now() < deadline {
        let k = cq.poll(&mut wc[..(n - got.len()).min(8)]).unwrap();
        got.extend_from_slice(&wc[..k]);
        if k == 0 {
            std::thread::yield_now();
        }
    }
    got
}

/// What a CQ must hold now that the model expects nothing more: nothing, in 5 ms of
/// looking (time for a late completion to show up).
fn expect_nothing(cq: &Cq, who: &str, step: usize) -> std::result::Result<(), TestCaseError> {
    match extra_completion(cq) {
        Some(wc) => Err(TestCaseError::fail(format!("after step {step}: an extra completion on {who}'s CQ: {wc:?}"))),
        None => Ok(()),
    }
}

/// A completion that arrives on `cq` within 5 ms of looking (time for a late one to show
/// up), if any.
fn extra_completion(cq: &Cq) -> Option<Wc> {
    let deadline = Instant::now() + Duration::from_millis(5);
    let mut wc = [Wc::default(); 1];
    while Instant::now() < deadline {
        if cq.poll(&mut wc).unwrap() > 0 {
            return Some(wc[0]);
        }
        std::thread::yield_now();
    }
    None
}

/// How far past its region's end a range of `len` (> 0) bytes made faulty ends, chosen by
/// `off`: one byte (the boundary, where an off-by-one would hide) half the time, else
/// anything up to all of it.
fn past(off: usize, len: usize) -> usize {
    if off.is_multiple_of(2) {
        1
    } else {
        1 + off / 2 % len
    }
}

/// Runs the sequence `ops` over `link`, then a signaled zero-length WRITE that covers
/// the unsignaled requests before it.
fn run(link: &mut Link, ops: &[Op]) -> std::result::Result<(), TestCaseError> {
    // A signaled zero-length WRITE: when it completes, so has everything before it.
    let sync = Op::Write { src: vec![(0, 0)], dst: 0, signaled: true, carry: Carry { inline: false, imm: None }, fault: Fault::None, via: false };
    let ops: Vec<&Op> = ops
        .iter()
        .flat_map(|op| match op {
            Op::NewRegion { .. } | Op::Window { .. } => vec![&sync, op],
            _ => vec![op],
        })
        .chain([&sync])
        .collect();
    let mut m = Model::new(link);
    for (step, &op) in ops.iter().enumerate() {
        if !m.carries(op) {
            continue;
        }
        let mut e = match op {
            Op::Window { off, len } => {
                m.bind(&mut link.b, *off, *len, step)?;
                continue;
            }
            Op::NewRegion { responder } => {
                m.new_region(link, *responder);
                continue;
            }
            Op::Recv { dst, bad, pinned } => {
                m.recv(&mut link.b, dst, *bad, *pinned, step)?;
                continue;
            }
            Op::Write { .. } | Op::Send { .. } if m.resp_err => m.dropped_by_ended_responder(link, op, step)?,
            Op::Send { fault, inv, .. } if m.ud_drops(*fault, *inv) => m.ud_dropped(link, op, step)?,
            Op::Write { .. } => m.write(link, op, step)?,
            Op::Read { .. } => m.read(link, op, step)?,
            Op::Send { .. } => m.send(link, op, step)?,
            Op::Atomic { .. } => m.atomic(link, op, step)?,
        };
        m.unacknowledged(&mut e);
        if !e.signaled {
            m.unsignaled.push(e.wr_id);
            continue;
        }
        m.check(link, op, e, step)?;
    }
    m.finish(link, ops.len())
}

/// What the model holds through one run: both regions' bytes, the responder's keys,
/// regions, receives and window, and what its CQ owes.
struct Model {
    /// The requester's and the responder's regions, byte by byte.
    am: Image,
    bm: Image,
    /// The responder's region's keys.
    bk: responder::Keys,
    /// The receives the responder holds, oldest first.
    held: std::collections::VecDeque<Held>,
    /// The responder's regions: the current one's generation, the R_Key and generation of
    /// the last one replaced, and the generations kept by consumed receives whose
    /// completions are not polled yet.
    bgen: u32,
    stale_rkey: Option<(u32, u32)>,
    unpolled: Vec<u32>,
    /// The responder's memory window, if one is bound, and the key of the last one that
    /// ended.
    window: Option<Win>,
    dead_wkey: Option<u32>,
    /// The L_Key of the requester's replaced region.
    stale_lkey: Option<u32>,
    /// Regions replaced so far (each new one's bytes differ).
    generation: u32,
    /// UC, UD: the responder is in the error state (a fault ended it; its requester, which
    /// hears nothing, goes on), and the receive whose status is the length's or the key's
    /// refusal, either (see [`Expect::either_refusal`]).
    resp_err: bool,
    uc_either: Option<u64>,
    /// What the responder's CQ should give since the last check.
    consumed: Vec<RecvWant>,
    /// The unsignaled requests since the last completion, in posting order.
    unsignaled: Vec<u64>,
    /// The next work request's wr_id.
    next_id: u64,
    /// The link's: UC, UD, receives from an SRQ, [`Link::across_hosts`], [`Link::lossy`].
    uc: bool,
    ud: bool,
    srq: bool,
    across_hosts: bool,
    lossy: bool,
    /// UD: the requester's port's active MTU, the largest message it sends.
    ud_mtu: usize,
}

/// What a request should complete with, at the requester and at the responder.
struct Expect {
    wr_id: u64,
    status: WcStatus,
    /// Whether it completes at the requester (a failed request does, signaled or not).
    signaled: bool,
    /// A SEND refused for its length or for its receive's key, either.
    either_refusal: bool,
    /// The receive it took that completes in error, and its status there.
    recv_fail: Option<(u64, WcStatus)>,
}

impl Expect {
    fn of(wr_id: u64, status: WcStatus, signaled: bool) -> Expect {
        Expect { wr_id, status, signaled, either_refusal: false, recv_fail: None }
    }
}

impl Model {
    /// Both regions filled with a byte pattern, no receive posted, no window bound.
    fn new(link: &mut Link) -> Model {
        let seed: Vec<u8> = (0..2 * LEN).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        link.a.mr.write(0, &seed[..LEN]).unwrap();
        link.b.fill(&seed[LEN..]);
        let (uc, ud) = (link.qp_type == QpType::Uc, link.qp_type == QpType::Ud);
        Model {
            am: Image::of(contents(&link.a.mr)),
            bm: Image::of(seed[LEN..].to_vec()),
            bk: link.b.keys(),
            held: Default::default(),
            bgen: 0,
            stale_rkey: None,
            unpolled: Vec::new(),
            window: None,
            dead_wkey: None,
            stale_lkey: None,
            generation: 0,
            resp_err: false,
            uc_either: None,
            consumed: Vec::new(),
            unsignaled: Vec::new(),
            next_id: 1,
            uc,
            ud,
            srq: link.b.has_srq(),
            across_hosts: link.across_hosts(),
            lossy: link.lossy(),
            ud_mtu: link.a.ctx.query_port(1).unwrap().active_mtu.bytes() as usize,
        }
    }

    /// Whether the link's QP type carries `op`. ibv_post_send(3): UC carries neither READ
    /// nor atomics; windows are left to RC. UD carries SEND only, and messages of one
    /// packet.
    fn carries(&self, op: &Op) -> bool {
        let unreliable = self.uc || self.ud;
        !(unreliable && matches!(op, Op::Read { .. } | Op::Atomic { .. } | Op::Window { .. }) || self.ud && matches!(op, Op::Write { .. }))
    }

    /// Whether every request that takes a receive is signaled. UD: every SEND (no
    /// zero-length WRITE syncs a UD QP). UC across hosts: the requester's completion says
    /// only that the message left, and a check that polled the receive of an unsignaled
    /// message before could end that receive's hold (docs/memory.md, "Buffer lifetime")
    /// while the checked message is still on its way, into a receive whose region only
    /// that hold kept: the device then refuses that receive, rightly, where the model
    /// thought the region alive. (Found by CI: an unsignaled SEND into a pinned receive
    /// after its region was replaced, then a SEND into an unpinned one of that region.)
    fn signals_each_receive(&self) -> bool {
        self.ud || self.uc && self.across_hosts
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// [`Op::Window`].
    fn bind(&mut self, b: &mut Responder, off: usize, len: usize, step: usize) -> std::result::Result<(), TestCaseError> {
        let key = b.bind(off, len).map_err(|e| TestCaseError::fail(format!("step {step}: {e}")))?;
        if let Some(w) = self.window.replace(Win { key, off, len }) {
            self.dead_wkey = Some(w.key);
        }
        Ok(())
    }

    /// [`Op::NewRegion`].
    fn new_region(&mut self, link: &mut Link, responder: bool) {
        self.generation += 1;
        let fill: Vec<u8> = (0..LEN).map(|i| (i.wrapping_mul(40503) >> 7) as u8 ^ self.generation as u8).collect();
        if responder {
            // The window over the old region goes with it.
            self.dead_wkey = self.window.take().map(|w| w.key).or(self.dead_wkey);
            self.stale_rkey = Some((self.bk.rkey, self.bgen));
            self.bgen += 1;
            self.bk = link.b.new_region(&fill);
            self.bm = Image::of(fill);
        } else {
            let a = &mut link.a;
            let mr = a.pd.alloc_mr(LEN, ALL_ACCESS).unwrap();
            mr.write(0, &fill).unwrap();
            self.stale_lkey = Some(std::mem::replace(&mut a.mr, mr).lkey());
            self.am = Image::of(fill);
        }
    }

    /// [`Op::Recv`].
    fn recv(&mut self, b: &mut Responder, dst: &[(usize, usize)], bad: bool, pinned: bool, step: usize) -> std::result::Result<(), TestCaseError> {
        // UD: pinned only, so that no receive outlives its region (which of a receive too
        // small and a key gone is refused first is not a rule).
        let r = Held { id: self.new_id(), dst: dst.to_vec(), bad, pinned: pinned || self.ud, gen: self.bgen };
        post_held(b, &r, step)?;
        if self.resp_err && !self.srq {
            // ibv_post_recv(3): a QP in the error state flushes it at once.
            self.consumed.push((r.id, WcStatus::WrFlushErr, None));
        } else {
            self.held.push_back(r);
        }
        Ok(())
    }

    /// Posts a receive into the responder's region that takes `len` bytes, when it holds
    /// none for a message to land in (an RNR wait, not tested here).
    fn recv_for(&mut self, b: &mut Responder, len: usize, step: usize) -> std::result::Result<(), TestCaseError> {
        if self.held.is_empty() {
            let r = Held { id: self.new_id(), dst: vec![(0, len.min(LEN))], bad: false, pinned: true, gen: self.bgen };
            post_held(b, &r, step)?;
            self.held.push_back(r);
        }
        Ok(())
    }

    /// Whether the responder's region of generation `g` is still registered: the current
    /// one, or one a receive keeps.
    fn alive(&self, g: u32) -> bool {
        g == self.bgen || self.unpolled.contains(&g) || self.held.iter().any(|r| r.gen == g && r.keeps())
    }

    /// A receive the responder cannot use: a bad scatter list, or pieces under the L_Key
    /// of a region gone.
    fn broken(&self, r: &Held) -> bool {
        r.bad || !self.alive(r.gen)
    }

    /// A key no access may pass: one nobody has, or (as `off` picks) the R_Key of a
    /// replaced region gone or the key of a window that ended, if there is one.
    fn refused_key(&self, off: usize) -> u32 {
        let dead_rkey = self.stale_rkey.filter(|&(_, g)| !self.alive(g)).map(|(k, _)| k);
        match off % 3 {
            0 => UNKNOWN_KEY,
            1 => dead_rkey.or(self.dead_wkey).unwrap_or(UNKNOWN_KEY),
            _ => self.dead_wkey.or(dead_rkey).unwrap_or(UNKNOWN_KEY),
        }
    }

    /// The piece `(off, len)` of the requester's region `a` as a scatter/gather entry,
    /// made faulty by `fault` if it is a local one.
    fn local(&self, a: &Side, (off, len): (usize, usize), fault: Fault) -> Sge {
        let lkey = a.mr.lkey();
        match fault {
            Fault::LocalRange => {
                let len = len.max(1);
                Sge { addr: a.mr.iova() + (LEN - len + past(off, len)) as u64, length: len as u32, lkey }
            }
            Fault::LocalKey => Sge { addr: a.mr.iova() + off as u64, length: len.max(1) as u32, lkey: self.stale_lkey.filter(|_| off % 2 == 1).unwrap_or(UNKNOWN_KEY) },
            _ => Sge { addr: a.mr.iova() + off as u64, length: len as u32, lkey },
        }
    }

    /// The pieces `src` as scatter/gather entries, the first made faulty by `fault`.
    fn locals(&self, a: &Side, src: &[(usize, usize)], fault: Fault) -> Vec<Sge> {
        src.iter().enumerate().map(|(k, p)| self.local(a, *p, if k == 0 { fault } else { Fault::None })).collect()
    }

    /// The responder's range of `len` bytes at `off` of its region, or with `via` inside
    /// its window (at a place `off` picks) if one is bound and the range fits, made faulty
    /// by `fault` if it is a remote one (an `atomic`'s slot stays 8-byte aligned): the
    /// region's offset the request reaches (its bytes), its address and R_Key.
    fn remote(&self, off: usize, len: usize, fault: Fault, via: bool, atomic: bool) -> (usize, u64, u32) {
        let bk = self.bk;
        let Some(w) = self.window.filter(|w| via && len <= w.len) else {
            return match fault {
                // An atomic's slot stays 8-byte aligned (a misaligned one is another error).
                Fault::RemoteRange if atomic => (off, bk.iova + LEN as u64, bk.rkey),
                Fault::RemoteRange => (off, bk.iova + (LEN - len.min(LEN) + past(off, len)) as u64, bk.rkey),
                Fault::RemoteKey => (off, bk.iova + off as u64, self.refused_key(off)),
                _ => (off, bk.iova + off as u64, bk.rkey),
            };
        };
        let at = if atomic { w.off + off / 8 % (w.len / 8) * 8 } else { w.off + off % (w.len - len + 1) };
        match fault {
            // Past the window's end, in the region or not.
            Fault::RemoteRange if atomic => (at, bk.iova + (w.off + w.len) as u64, w.key),
            Fault::RemoteRange => (at, bk.iova + (w.off + w.len - len + past(off, len)) as u64, w.key),
            Fault::RemoteKey => (at, bk.iova + at as u64, self.refused_key(off)),
            _ => (at, bk.iova + at as u64, w.key),
        }
    }

    /// Takes the oldest receive for a message ([`take`]).
    fn take(&mut self) -> Held {
        take(&mut self.held, &mut self.unpolled)
    }

    /// UC, UD: a WRITE or SEND to a responder in the error state, which drops every
    /// message; nothing tells the requester.
    fn dropped_by_ended_responder(&mut self, link: &mut Link, op: &Op, step: usize) -> std::result::Result<Expect, TestCaseError> {
        let (Op::Write { src, signaled, fault, .. } | Op::Send { src, signaled, fault, .. }) = op else { unreachable!("a WRITE or SEND") };
        let wr_id = self.new_id();
        let sges = self.locals(&link.a, src, *fault);
        let local_fault = matches!(fault, Fault::LocalRange | Fault::LocalKey);
        let status = if local_fault { WcStatus::LocProtErr } else { WcStatus::Success };
        // UD: every SEND signaled (no zero-length WRITE syncs a UD QP).
        let signaled = *signaled || self.unsignaled.len() >= 8 || local_fault || self.ud;
        let wr = match op {
            Op::Write { .. } => SendWr::write(wr_id, &sges, self.bk.iova, self.bk.rkey),
            _ => addressed(SendWr::send(wr_id, &sges), link.ah.as_ref(), link.b_qpn),
        };
        post(&link.a.qp, if signaled { wr.signaled() } else { wr }, step)?;
        Ok(Expect::of(wr_id, status, signaled))
    }

    /// Whether a UD SEND with `fault` and `inv` is one the responder drops unseen
    /// ([`Model::ud_dropped`]). A missing receive is left out across hosts: it is dropped
    /// when it arrives, which may be after the model's next post.
    fn ud_drops(&self, fault: Fault, inv: bool) -> bool {
        self.ud && (matches!(fault, Fault::RemoteKey | Fault::RemoteRange) || self.held.is_empty() && inv && fault == Fault::None && !self.across_hosts)
    }

    /// UD: a message the responder drops unseen, which the requester completes with
    /// success all the same (ibv_post_send(3): no acknowledgement): one under a Q_Key that
    /// is not the responder's, one above the path MTU (not even sent: IBTA C10-93.1.1,
    /// docs/device.md "Active MTU"), one that finds no receive posted (UD has no RNR
    /// wait). No receive is taken, and the ones posted later stay for the messages after.
    fn ud_dropped(&mut self, link: &mut Link, op: &Op, step: usize) -> std::result::Result<Expect, TestCaseError> {
        let Op::Send { src, fault, .. } = op else { unreachable!("a SEND") };
        let wr_id = self.new_id();
        let a = &link.a;
        let (sges, qkey) = match fault {
            Fault::RemoteRange => {
                let over = self.ud_mtu + 1 + src.iter().map(|p| p.1).sum::<usize>() % 64;
                (vec![Sge { addr: a.mr.iova(), length: over as u32, lkey: a.mr.lkey() }], QKEY)
            }
            _ => (self.locals(a, src, Fault::None), if *fault == Fault::RemoteKey { QKEY ^ 0x10 } else { QKEY }),
        };
        let Some(ah) = &link.ah else { unreachable!("a UD link has an address handle") };
        post(&a.qp, SendWr::send(wr_id, &sges).signaled().ud(ah, link.b_qpn, qkey), step)?;
        Ok(Expect::of(wr_id, WcStatus::Success, true))
    }

    /// [`Op::Write`].
    fn write(&mut self, link: &mut Link, op: &Op, step: usize) -> std::result::Result<Expect, TestCaseError> {
        let Op::Write { src, dst, signaled, carry, fault, via } = op else { unreachable!("a WRITE") };
        let wr_id = self.new_id();
        // A zero-length WRITE reads no remote memory, so no remote fault applies.
        let empty = src.iter().all(|p| p.1 == 0);
        let fault = if empty && matches!(fault, Fault::RemoteRange | Fault::RemoteKey) { Fault::None } else { *fault };
        let local_fault = matches!(fault, Fault::LocalRange | Fault::LocalKey);
        let sges = self.locals(&link.a, src, fault);
        let total: usize = sges.iter().map(|s| s.length as usize).sum();
        let (dst, addr, rkey) = self.remote((*dst).min(LEN - total.min(LEN)), total, fault, *via, false);
        let data: Vec<u8> = if local_fault { Vec::new() } else { src.iter().flat_map(|&(o, l)| self.am.bytes(o, l)).collect() };
        let inline = carry.inline && data.len() <= CAP.max_inline_data as usize && !local_fault;
        // With immediate data the WRITE consumes a receive (none bad: whether a receive's
        // scatter list is checked when no data lands in it is not a rule).
        let imm = carry.imm.filter(|_| self.held.front().is_none_or(|r| !self.broken(r)));
        if imm.is_some() {
            self.recv_for(&mut link.b, 0, step)?;
        }
        let mut recv_fail = None;
        let status = match fault {
            Fault::None => {
                self.bm.put(dst, &data);
                if let Some(imm) = imm {
                    let r = self.take();
                    self.consumed.push((r.id, WcStatus::Success, Some((WcOpcode::RecvRdmaWithImm, total as u32, Some(imm)))));
                }
                WcStatus::Success
            }
            Fault::LocalRange | Fault::LocalKey => WcStatus::LocProtErr,
            _ => {
                // The receive of a WRITE with immediate data is taken with the packet that
                // carries the immediate: when that is the only one (the message fits the
                // path MTU, 1024, or the link does not cut messages), the receive completes
                // with the responder's error, else the error came first and it is flushed
                // with the others.
                if imm.is_some() && (total <= 1024 || !self.across_hosts) {
                    recv_fail = Some((self.take().id, WcStatus::RemAccessErr));
                }
                WcStatus::RemAccessErr
            }
        };
        // A failed request completes whether signaled or not.
        let signaled = *signaled || self.unsignaled.len() >= 8 || status != WcStatus::Success || imm.is_some() && self.signals_each_receive();
        let wr = carried(SendWr::write(wr_id, &sges, addr, rkey), inline.then_some(&data[..]), imm, signaled);
        post(&link.a.qp, wr, step)?;
        Ok(Expect { recv_fail, ..Expect::of(wr_id, status, signaled) })
    }

    /// [`Op::Read`].
    fn read(&mut self, link: &mut Link, op: &Op, step: usize) -> std::result::Result<Expect, TestCaseError> {
        let Op::Read { dst, src, fault, via } = op else { unreachable!("a READ") };
        let wr_id = self.new_id();
        // A zero-length READ reads no remote memory, so no remote fault applies.
        let empty = dst.iter().all(|p| p.1 == 0);
        let fault = if empty && matches!(fault, Fault::RemoteRange | Fault::RemoteKey) { Fault::None } else { *fault };
        let sges = self.locals(&link.a, dst, fault);
        let len: usize = sges.iter().map(|s| s.length as usize).sum::<usize>().min(LEN);
        let (src, addr, rkey) = self.remote((*src).min(LEN - len), len, fault, *via, false);
        post(&link.a.qp, SendWr::read(wr_id, &sges, addr, rkey).signaled(), step)?;
        let status = match fault {
            Fault::None => {
                let mut data = &self.bm.bytes(src, len)[..];
                for &(off, n) in dst {
                    self.am.put(off, &data[..n]);
                    data = &data[n..];
                }
                WcStatus::Success
            }
            Fault::LocalRange | Fault::LocalKey => WcStatus::LocProtErr,
            _ => WcStatus::RemAccessErr,
        };
        Ok(Expect::of(wr_id, status, true))
    }

    /// [`Op::Send`] (a UD one the responder drops: [`Model::ud_dropped`]).
    fn send(&mut self, link: &mut Link, op: &Op, step: usize) -> std::result::Result<Expect, TestCaseError> {
        let Op::Send { src, signaled, carry, fault, inv } = op else { unreachable!("a SEND") };
        let wr_id = self.new_id();
        let (ud, a) = (self.ud, &link.a);
        let mut src = src.clone();
        // The UD drops are UD's (above); another SEND has no remote fault.
        let mut fault = if matches!(fault, Fault::RemoteKey | Fault::RemoteRange) { Fault::None } else { *fault };
        // Whether a message of `n` bytes fits the receive (UD: after the GRH area).
        let grh = if ud { GRH } else { 0 };
        self.recv_for(&mut link.b, src.iter().map(|p| p.1).sum::<usize>().max(1) + grh, step)?;
        let into_broken = self.broken(&self.held[0]);
        let mut either_refusal = false;
        // Into a receive whose region is gone: one byte, which fits any receive with room;
        // into one without, whether the length or the key is refused first is not a rule.
        if into_broken && !self.held[0].bad {
            src = vec![(0, 1)];
            either_refusal = self.held[0].room() == 0;
        }
        if into_broken {
            // Into a receive with a bad scatter list: data to place (an empty message may
            // never look at the list), and no length fault besides.
            if src.iter().all(|p| p.1 == 0) {
                src = vec![(0, 1)];
            }
            if fault == Fault::Short {
                fault = Fault::None;
            }
        }
        let fits = |n: usize, r: &Held| n + grh <= r.room();
        // Longer than the receive: one byte more than it takes.
        let too_long = (self.held[0].room() + 1).saturating_sub(grh).max(1);
        if ud {
            // One packet: cut at UD_MAX, and no length fault past it.
            let mut left = UD_MAX;
            for p in &mut src {
                p.1 = p.1.min(left);
                left -= p.1;
            }
            if fault == Fault::Short && too_long > UD_MAX {
                fault = Fault::None;
            }
        }
        let data: Vec<u8> = src.iter().flat_map(|&(o, l)| self.am.bytes(o, l)).collect();
        let sges: Vec<Sge> = if fault == Fault::Short {
            let (addr, lkey) = (a.mr.iova(), a.mr.lkey());
            if too_long > LEN {
                vec![Sge { addr, length: LEN as u32, lkey }, Sge { addr, length: (too_long - LEN) as u32, lkey }]
            } else {
                vec![Sge { addr, length: too_long as u32, lkey }]
            }
        } else {
            self.locals(a, &src, fault)
        };
        let inline = carry.inline && data.len() <= CAP.max_inline_data as usize && fault == Fault::None;
        // The window key a SEND_WITH_INV invalidates.
        let mut inv_key = None;
        let mut recv_fail = None;
        let status = match fault {
            Fault::None if into_broken => {
                // ibv_poll_cq(3): the responder cannot use the receive (a local QP
                // operation error there, a remote operation error here).
                let r = self.take();
                if r.gen == self.bgen {
                    r.spoil(&mut self.bm);
                }
                recv_fail = Some((r.id, WcStatus::LocQpOpErr));
                WcStatus::RemOpErr
            }
            Fault::None if fits(data.len(), &self.held[0]) => {
                if let Some(w) = self.window.filter(|_| *inv && carry.imm.is_none()) {
                    inv_key = Some(w.key);
                    self.dead_wkey = inv_key;
                    self.window = None;
                }
                let r = self.take();
                if r.gen == self.bgen && ud {
                    r.place_after_grh(&mut self.bm, &data);
                } else if r.gen == self.bgen {
                    r.place(&mut self.bm, &data);
                }
                let op = Some((WcOpcode::Recv, (data.len() + grh) as u32, carry.imm));
                self.consumed.push((r.id, WcStatus::Success, op));
                WcStatus::Success
            }
            Fault::None | Fault::Short => {
                let r = self.take();
                if r.gen == self.bgen {
                    r.spoil(&mut self.bm);
                }
                recv_fail = Some((r.id, WcStatus::LocLenErr));
                WcStatus::RemInvReqErr
            }
            _ => WcStatus::LocProtErr,
        };
        // A failed request completes whether signaled or not.
        let signaled = *signaled || self.unsignaled.len() >= 8 || status != WcStatus::Success || self.signals_each_receive();
        let mut wr = addressed(carried(SendWr::send(wr_id, &sges), inline.then_some(&data[..]), carry.imm, signaled), link.ah.as_ref(), link.b_qpn);
        if let Some(key) = inv_key {
            wr = wr.with_inv(key);
        }
        post(&link.a.qp, wr, step)?;
        Ok(Expect { either_refusal, recv_fail, ..Expect::of(wr_id, status, signaled) })
    }

    /// [`Op::Atomic`].
    fn atomic(&mut self, link: &mut Link, op: &Op, step: usize) -> std::result::Result<Expect, TestCaseError> {
        let Op::Atomic { slot, result, add, swap, fault, via } = op else { unreachable!("an atomic") };
        let wr_id = self.new_id();
        let result = result * 8;
        let sge = [self.local(&link.a, (result, 8), *fault)];
        let (slot, addr, rkey) = self.remote(slot * 8, 8, *fault, *via, true);
        let old = self.bm.u64_at(slot);
        let wr = match swap {
            None => SendWr::fetch_add(wr_id, &sge, addr, rkey, *add),
            Some((hit, value)) => SendWr::compare_swap(wr_id, &sge, addr, rkey, if *hit { old } else { old ^ 1 }, *value),
        };
        post(&link.a.qp, wr.signaled(), step)?;
        let status = match fault {
            Fault::None => {
                let new = match swap {
                    None => old.wrapping_add(*add),
                    Some((true, value)) => *value,
                    Some((false, _)) => old,
                };
                self.bm.put(slot, &new.to_ne_bytes());
                self.am.put(result, &old.to_ne_bytes());
                WcStatus::Success
            }
            Fault::LocalKey => {
                // Whether the responder ran the operation before the requester found it
                // cannot place the result is not a rule: the slot is left undefined.
                self.bm.forget(slot, 8);
                WcStatus::LocProtErr
            }
            _ => WcStatus::RemAccessErr,
        };
        Ok(Expect::of(wr_id, status, true))
    }

    /// UC, UD: the requester completes once the message is sent, whatever the responder
    /// makes of it (ibv_poll_cq(3): no acknowledgement). A message refused after it took
    /// a receive completes that receive in error and ends the responder, which flushes
    /// the rest (docs/rxe-differences.md, "A UC receive already taken completes in
    /// error"); one that took none is dropped.
    fn unacknowledged(&mut self, e: &mut Expect) {
        if !(self.uc || self.ud) || !matches!(e.status, WcStatus::RemAccessErr | WcStatus::RemInvReqErr | WcStatus::RemOpErr) {
            return;
        }
        e.status = WcStatus::Success;
        if let Some((id, st)) = e.recv_fail.take() {
            // UD: a receive too small completes as the invalid request it is, and the QP
            // goes on (docs/rxe-differences.md, "A UD receive too small").
            let (st, ends) = match st {
                WcStatus::LocLenErr if self.ud => (WcStatus::RemInvReqErr, false),
                _ => (st, true),
            };
            self.consumed.push((id, st, None));
            if e.either_refusal {
                self.uc_either = Some(id);
            }
            self.resp_err = ends;
            if ends && !self.srq {
                self.consumed.extend(self.held.drain(..).map(|r| (r.id, WcStatus::WrFlushErr, None)));
            }
        }
    }

    /// After a signaled request (or a failed one): its completion at the requester, and
    /// nothing before it (every earlier one was unsignaled or checked); the receives the
    /// SENDs since the last check consumed at the responder, then the failed one and the
    /// flushed rest if the request failed there; both regions. A failed request leaves
    /// the requester in the error state: a new pair takes over.
    fn check(&mut self, link: &mut Link, op: &Op, mut e: Expect, step: usize) -> std::result::Result<(), TestCaseError> {
        let got = poll_n(&link.a.cq, 1);
        prop_assert_eq!(got.len(), 1, "step {}: no completion of {:?} within 10 s", step, op);
        // On a lossy network the NAK of a refused request may be lost: the requester sends
        // it again to a responder that is in the error state and answers nothing, until its
        // retries run out (ibv_poll_cq(3), IBV_WC_RETRY_EXC_ERR). The responder refused it
        // all the same.
        let unsignaled = std::mem::take(&mut self.unsignaled);
        let remote_fault = matches!(e.status, WcStatus::RemAccessErr | WcStatus::RemInvReqErr | WcStatus::RemOpErr);
        let nak_lost = self.lossy && remote_fault && got[0].status() == WcStatus::RetryExcErr;
        // The NAK lost and so was the ACK of an unsignaled WRITE or SEND before the refused
        // request (or, asked only where the requester stops, the ACK it owed): the retries
        // end that earlier message, and the rest, the refused one among them, are flushed
        // (ibv_poll_cq(3): a failed request completes, signaled or not). The responder
        // executed it all the same: it takes requests in PSN order, and refused a later one.
        let mut seen_id = got[0].wr_id();
        if nak_lost && unsignaled.contains(&seen_id) {
            let rest: Vec<(u64, WcStatus)> =
                unsignaled.iter().skip_while(|&&id| id != seen_id).skip(1).chain([&e.wr_id]).map(|&id| (id, WcStatus::WrFlushErr)).collect();
            let flushed: Vec<(u64, WcStatus)> = poll_n(&link.a.cq, rest.len()).iter().map(|w| (w.wr_id(), w.status())).collect();
            prop_assert_eq!(&flushed, &rest, "step {}: {:?}: flushed after the retries of {} ran out", step, op, seen_id);
            seen_id = e.wr_id;
        }
        if e.either_refusal && got[0].status() == WcStatus::RemInvReqErr {
            e.status = WcStatus::RemInvReqErr;
            e.recv_fail = e.recv_fail.map(|(id, _)| (id, WcStatus::LocLenErr));
        }
        let seen = if nak_lost { e.status } else { got[0].status() };
        prop_assert_eq!((seen_id, seen), (e.wr_id, e.status), "step {}: {:?}: {:?}", step, op, got[0]);
        let mut want: Vec<RecvWant> = std::mem::take(&mut self.consumed);
        if let Some((id, st)) = e.recv_fail {
            want.push((id, st, None));
        }
        // An SRQ's receives stay in it when a QP that takes from it enters the error
        // state (ibv_create_srq(3): the SRQ is not the QP's).
        if remote_fault && !self.srq {
            want.extend(self.held.drain(..).map(|r| (r.id, WcStatus::WrFlushErr, None)));
        }
        let b = &mut link.b;
        let got = b.poll(want.len());
        // Polled: what the consumed receives kept is let go.
        self.unpolled.clear();
        // Which refusal the responder chose shows only at its CQ when no NAK told the
        // requester: UC, or a NAK lost.
        let either = self.uc_either.take().or(e.recv_fail.filter(|_| nak_lost && e.either_refusal).map(|(id, _)| id));
        if let Some(id) = either {
            if got.iter().any(|g| g.0 == id && g.1 == WcStatus::LocLenErr) {
                want.iter_mut().filter(|w| w.0 == id).for_each(|w| w.1 = WcStatus::LocLenErr);
            }
        }
        prop_assert_eq!(&got, &want, "step {}: {:?}: the responder's completions", step, op);
        self.am.check(&contents(&link.a.mr), "the requester", step)?;
        if self.uc && self.across_hosts {
            // UC across hosts: the requester's completion says the message left, not that
            // it was placed; wait (10 s at most) for the responder's region to show it.
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut bytes = b.contents();
            while !self.bm.agrees(&bytes) && Instant::now() < deadline {
                std::thread::yield_now();
                bytes = b.contents();
            }
            self.bm.check(&bytes, "the responder", step)?;
        } else {
            self.bm.check(&b.contents(), "the responder", step)?;
        }
        if e.status != WcStatus::Success {
            expect_nothing(&link.a.cq, "the requester", step)?;
            renew(link, step)?;
            self.resp_err = false;
            // The responder's new QP comes without the window.
            self.dead_wkey = self.window.take().map(|w| w.key).or(self.dead_wkey);
            if !self.srq {
                self.held.clear();
            }
        }
        Ok(())
    }

    /// At the end: what the last check did not cover (UD has no sync: receives flushed
    /// after it), and nothing more on either CQ.
    fn finish(&mut self, link: &mut Link, steps: usize) -> std::result::Result<(), TestCaseError> {
        if !self.consumed.is_empty() {
            let got = link.b.poll(self.consumed.len());
            prop_assert_eq!(&got, &self.consumed, "at the end: the responder's completions");
        }
        expect_nothing(&link.a.cq, "the requester", steps)?;
        responder_expects_nothing(&mut link.b, steps)
    }
}

/// Destroys both QPs (their CQs must then hold nothing: a destroyed QP's receives leave
/// no completion) and connects a new pair over the same CQs, regions and SRQ. Destroyed
/// by the verb, not by dropping the handle: ibv_destroy_qp(3) returns once nothing more
/// lands through the QP, whereas a dropped handle's QP lives on while the device still
/// serves a run of packets for it (its last reference).
fn renew(link: &mut Link, step: usize) -> std::result::Result<(), TestCaseError> {
    replace_qps(link);
    expect_nothing(&link.a.cq, "the requester", step)?;
    responder_expects_nothing(&mut link.b, step)?;
    link.connect(link.b_qpn);
    Ok(())
}

/// Destroys both QPs and creates their successors, not yet connected.
fn replace_qps(link: &mut Link) {
    let qp = link.a.pd.create_qp(&QpInit::new(link.qp_type, &link.a.cq, CAP)).unwrap();
    std::mem::replace(&mut link.a.qp, qp).destroy().unwrap();
    link.b_qpn = link.b.new_qp();
}

/// [`expect_nothing`] of the responder's CQ.
fn responder_expects_nothing(b: &mut Responder, step: usize) -> std::result::Result<(), TestCaseError> {
    b.nothing().map_err(|wc| TestCaseError::fail(format!("after step {step}: an extra completion on the responder's CQ: {wc}")))
}

/// `wr` sent to the responder's UD QP `qpn` through `ah`, if there is one (UD).
fn addressed<'a>(wr: SendWr<'a>, ah: Option<&'a Ah>, qpn: u32) -> SendWr<'a> {
    match ah {
        Some(ah) => wr.ud(ah, qpn, QKEY),
        None => wr,
    }
}

/// A WRITE or SEND as [`Carry`] and `signaled` say: its data `inline` instead of its
/// scatter list, with immediate data `imm`.
fn carried<'a>(mut wr: SendWr<'a>, inline: Option<&'a [u8]>, imm: Option<u32>, signaled: bool) -> SendWr<'a> {
    if let Some(data) = inline {
        wr = wr.inline(data);
    }
    if let Some(imm) = imm {
        wr = wr.with_imm(imm);
    }
    if signaled {
        wr = wr.signaled();
    }
    wr
}

fn post(qp: &Qp, wr: SendWr<'_>, step: usize) -> std::result::Result<(), TestCaseError> {
    qp.post_send(&[wr]).map_err(|e| TestCaseError::fail(format!("step {step}: post_send: {e:?}")))
}

/// Runs `cases` random sequences over `link`, one after the other on a new QP pair
/// each (a device is made once per test: a process has a bounded number of them).
fn check_random_sequences(mut link: Link, cases: u32) {
    // PROPTEST_CASES, as proptest reads it, for a longer hunt than CI's.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let link = std::cell::RefCell::new(&mut link);
    let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        let mut l = link.borrow_mut();
        // A case starts with none of the last case's receives.
        l.b.new_srq();
        // What a failed case left behind (a passing one leaves nothing: `run` checks):
        // its QPs go first, so that nothing of theirs lands after the drain (else the
        // leftovers of a failed case would fail the next one at its start, and proptest,
        // shrinking, would report that instead of the first failure).
        replace_qps(&mut l);
        while l.a.cq.poll(&mut [Wc::default(); 8]).unwrap() > 0 {}
        l.b.drain();
        let b_qpn = l.b_qpn;
        l.connect(b_qpn);
        run(&mut l, &ops)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Runs `cases` random sequences to a responder in a child process (this test binary run
/// again as test `test`, which serves there instead: [`responder::serve_if_child`]).
fn check_with_a_child(test: &str, srq: bool, qp_type: QpType, cases: u32) {
    if responder::serve_if_child() {
        return;
    }
    check_random_sequences(another_process(test, srq, qp_type), cases);
}

#[test]
fn random_requests_on_the_same_host_match_the_model() {
    check_random_sequences(same_host(false, QpType::Rc), 48);
}

/// The same with the responder's receives in an SRQ, which keeps them when its QP fails.
#[test]
fn random_requests_on_the_same_host_through_an_srq_match_the_model() {
    check_random_sequences(same_host(true, QpType::Rc), 24);
}

/// The same with the responder in another process of this host, which the requester
/// reaches as a peer (its memory by cross-memory attach or a shared segment, its receives
/// in their shared ring; docs/queue-pairs.md).
#[test]
fn random_requests_to_a_responder_in_another_process_match_the_model() {
    check_with_a_child("random_requests_to_a_responder_in_another_process_match_the_model", false, QpType::Rc, 24);
}

/// The same through an SRQ of the responder's process.
#[test]
fn random_requests_to_a_responder_in_another_process_through_an_srq_match_the_model() {
    check_with_a_child("random_requests_to_a_responder_in_another_process_through_an_srq_match_the_model", true, QpType::Rc, 24);
}

#[test]
fn random_requests_across_hosts_match_the_model() {
    check_random_sequences(two_hosts([[127, 0, 11, 1], [127, 0, 11, 2]], None, false, QpType::Rc), 24);
}

#[test]
fn random_requests_across_hosts_through_an_srq_match_the_model() {
    check_random_sequences(two_hosts([[127, 0, 11, 5], [127, 0, 11, 6]], None, true, QpType::Rc), 24);
}

/// The same over a network that drops, duplicates, reorders and corrupts packets: what
/// the requester sends again must be placed once (a duplicate atomic answered from the
/// responder's resources, not run twice; a duplicate SEND consuming no second receive).
#[test]
fn random_requests_across_a_lossy_network_match_the_model() {
    let faults = "seed=11,drop=2%,dup=2%,reorder=5%,reorder_by=200us,corrupt=1%";
    check_random_sequences(two_hosts([[127, 0, 11, 3], [127, 0, 11, 4]], Some(faults), false, QpType::Rc), 24);
}

/// UC (WRITE and SEND only) on the same-host link: the requester completes every message
/// it sent, and a responder that a refused message ended drops the rest.
#[test]
fn random_uc_requests_on_the_same_host_match_the_model() {
    check_random_sequences(same_host(false, QpType::Uc), 24);
}

/// UC to a responder in another process, its receives in an SRQ.
#[test]
fn random_uc_requests_to_a_responder_in_another_process_through_an_srq_match_the_model() {
    check_with_a_child("random_uc_requests_to_a_responder_in_another_process_through_an_srq_match_the_model", true, QpType::Uc, 24);
}

/// UD (SEND only, one packet each) on the same-host link: the receive gets the 40-byte
/// GRH area first; one too small completes with IBV_WC_REM_INV_REQ_ERR and the QP goes on.
#[test]
fn random_ud_requests_on_the_same_host_match_the_model() {
    check_random_sequences(same_host(false, QpType::Ud), 24);
}

/// UD to a responder in another process, its receives in an SRQ.
#[test]
fn random_ud_requests_to_a_responder_in_another_process_through_an_srq_match_the_model() {
    check_with_a_child("random_ud_requests_to_a_responder_in_another_process_through_an_srq_match_the_model", true, QpType::Ud, 24);
}

/// UC across hosts (127.0.11.9 and .10): messages longer than the path MTU (1024) travel
/// as several packets; a WRITE has nothing the responder reports, so after each request
/// the model waits (10 s at most) for the responder's region to show what it says. A
/// message the device placed where the model says it must not shows at that check or a
/// later one.
#[test]
fn random_uc_requests_across_hosts_match_the_model() {
    check_random_sequences(two_hosts([[127, 0, 11, 9], [127, 0, 11, 10]], None, false, QpType::Uc), 24);
}

/// The same through an SRQ (127.0.11.11 and .12): an ended responder's receives stay in
/// the SRQ for the next QP.
#[test]
fn random_uc_requests_across_hosts_through_an_srq_match_the_model() {
    check_random_sequences(two_hosts([[127, 0, 11, 11], [127, 0, 11, 12]], None, true, QpType::Uc), 24);
}

/// UD across hosts (127.0.11.7 and .8): each SEND one RoCEv2 packet, placed by the
/// network responder, which the model waits for through the receive's completion. One
/// fault of the same-host runs is left out, as timing's and not a rule's: a message that
/// finds no receive is dropped when it arrives, which over the network may be after the
/// model's next post. (A receive the responder cannot use completes in error just before
/// its QP enters the error state; a post that beats that state change is flushed with the
/// queue a moment later, the same completion in the same order.)
#[test]
fn random_ud_requests_across_hosts_match_the_model() {
    check_random_sequences(two_hosts([[127, 0, 11, 7], [127, 0, 11, 8]], None, false, QpType::Ud), 24);
}

/// The same through an SRQ (127.0.11.13 and .14).
#[test]
fn random_ud_requests_across_hosts_through_an_srq_match_the_model() {
    check_random_sequences(two_hosts([[127, 0, 11, 13], [127, 0, 11, 14]], None, true, QpType::Ud), 24);
}
