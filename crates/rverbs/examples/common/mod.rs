//! Set-up and checks shared by the examples (each example does `mod common;`).
//!
//! Every example plays both peers of a connection inside one process. Each peer opens
//! its own context, as a separate process would, and the only things "exchanged out of
//! band" are what `ibv_rc_pingpong` exchanges: QP numbers, GIDs and, for one-sided
//! operations, an address and an rkey.
//!
//! Waits are bounded: a completion that does not arrive within [`DEADLINE`] fails the
//! example instead of hanging it. No wait sleeps; polling loops yield the CPU.
#![allow(dead_code)] // not every example uses every helper

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rverbs::{
    Access, AhAttr, Context, Cq, CqInit, Gid, GlobalRoute, Mr, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpInit, QpState,
    QpType, RemotePath, Wc, WcOpcode,
};

/// What every example's `main` returns: any error, printed by the runtime, exits 1.
pub type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How long any single wait (a completion, an event) may take before the example
/// fails. In-process traffic completes inside `post_send`; this only bounds a bug.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Port 1 is the only port of the built-in device.
pub const PORT: u8 = 1;

/// The Q_Key UD examples give their QPs and put in their sends.
pub const QKEY: u32 = 0x1111_1111;

/// Every remote right: the memory of each peer is a target of WRITE, READ and atomics.
/// ibv_reg_mr(3): REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
pub const ALL_ACCESS: Access =
    Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC);

/// Bytes of registered memory per peer.
pub const MR_LEN: usize = 64 * 1024;

/// Queue sizes that comfortably hold what any example keeps outstanding.
pub const CAP: QpCap =
    QpCap { max_send_wr: 32, max_recv_wr: 32, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };

/// A failed check: `Debug` prints the bare message, so `main` returning it prints
/// `Error: <message>`.
pub struct Failure(String);

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// Fails the example with `msg`.
pub fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(Box::new(Failure(msg.into())))
}

/// Fails unless `got == want`.
pub fn check_eq<T: PartialEq + fmt::Debug>(what: &str, got: T, want: T) -> Result {
    if got == want {
        Ok(())
    } else {
        fail(format!("{what}: got {got:?}, expected {want:?}"))
    }
}

/// Fails with `msg` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result {
    if cond {
        Ok(())
    } else {
        fail(msg())
    }
}

/// `len` bytes that differ with `seed`, so a misplaced or stale buffer shows.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Fails unless the region holds `want` at `offset`.
pub fn check_bytes(what: &str, mr: &Mr, offset: usize, want: &[u8]) -> Result {
    let mut got = vec![0u8; want.len()];
    mr.read(offset, &mut got)?;
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => fail(format!("{what}: byte {i} of {} is {:#04x}, expected {:#04x}", want.len(), got[i], want[i])),
    }
}

/// Opens the first device [`rverbs::devices`] lists: the built-in `rverbs0`, or, with
/// the feature `rdma-core` and `RVERBS_BACKEND=rdma-core`, libibverbs' first device (an
/// example runs unchanged on either, docs/rdma-core-backend.md).
pub fn open() -> Result<Context> {
    let devices = rverbs::devices()?;
    let Some(dev) = devices.first() else {
        return fail("no RDMA device is listed");
    };
    Ok(dev.open()?)
}

/// The GID table entry both peers address each other with: the IPv4 loopback address
/// (RoCE v2 GIDs are IPv4-mapped IPv6 addresses).
pub fn loopback_gid(ctx: &Context) -> Result<(Gid, u8)> {
    match ctx.gid_entry_of(Ipv4Addr::LOCALHOST.into()) {
        Some(e) => Ok((e.gid, u8::try_from(e.index)?)),
        None => fail("the GID table has no 127.0.0.1 entry"),
    }
}

/// An address vector towards the peer (ibv_create_ah(3), ibv_modify_qp(3)): on a
/// RoCE port the path is always global, so it carries a GRH naming the source GID
/// index and the destination GID.
pub fn path_to_peer(ctx: &Context) -> Result<AhAttr> {
    let (gid, index) = loopback_gid(ctx)?;
    Ok(AhAttr {
        grh: Some(GlobalRoute { dgid: gid, sgid_index: index, hop_limit: 64, ..GlobalRoute::default() }),
        port_num: PORT,
        ..AhAttr::default()
    })
}

/// The path towards `dest_qpn` every example connects with: over the loopback GID
/// ([`path_to_peer`]), `access` granted by this side's responder, and
/// [`RemotePath::new`]'s transport parameters (MTU 1024, timeout 14, retry 7, RNR retry 7
/// — forever while the peer has no receive posted — read/atomic depth 4, Q_Key [`QKEY`]).
pub fn remote(ctx: &Context, dest_qpn: u32, access: Access) -> Result<RemotePath> {
    Ok(RemotePath { access, qkey: QKEY, ah_attr: path_to_peer(ctx)?, ..RemotePath::new(Gid::default(), 0, dest_qpn) })
}

/// RESET → INIT (ibv_modify_qp(3)): UD QPs take a Q_Key, connected QPs the remote
/// access rights their responder grants (XRC initiators grant none).
pub fn to_init(qp: &Qp, access: Access) -> Result {
    let path = RemotePath { access, qkey: QKEY, ..RemotePath::new(Gid::default(), 0, 0) };
    Ok(qp.connect_until(&path, QpState::Init)?)
}

/// INIT → RTR (ibv_modify_qp(3)): a connected QP learns its peer (path, QP number,
/// expected PSN); responders of reliable transports (RC, XRC targets) also get their
/// read/atomic depth and RNR timer. A UD QP needs nothing but the state.
pub fn to_rtr(qp: &Qp, ctx: &Context, dest_qpn: u32) -> Result {
    Ok(qp.connect_until(&remote(ctx, dest_qpn, Access::empty())?, QpState::Rtr)?)
}

/// RTR → RTS (ibv_modify_qp(3)): every sender sets its first PSN; reliable senders
/// (RC, XRC initiators) also their ACK timeout, retry counts and read/atomic depth.
pub fn to_rts(qp: &Qp) -> Result {
    Ok(qp.connect_until(&RemotePath::new(Gid::default(), 0, 0), QpState::Rts)?)
}

/// RESET → INIT → RTR → RTS towards `dest_qpn` (for UD, `dest_qpn` is unused: every
/// send names its destination), with the masks ibv_modify_qp(3) requires ([`Qp::connect`]).
pub fn bring_up(qp: &Qp, ctx: &Context, dest_qpn: u32, access: Access) -> Result {
    Ok(qp.connect(&remote(ctx, dest_qpn, access)?)?)
}

/// Any state → RESET (ibv_modify_qp(3)): outstanding work requests are discarded
/// without completions, so the QP can be brought up again, e.g. after an error.
pub fn reset(qp: &Qp) -> Result {
    let attr = QpAttr { qp_state: QpState::Reset, ..QpAttr::default() };
    Ok(qp.modify(&attr, QpAttrMask::STATE)?)
}

/// What one peer owns: its context, a PD, one CQ for both queues, a QP and
/// [`MR_LEN`] bytes of registered memory with [`ALL_ACCESS`].
pub struct Endpoint {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

impl Endpoint {
    /// A peer with a QP of `qp_type` in RESET.
    pub fn new(qp_type: QpType) -> Result<Endpoint> {
        let ctx = open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(&CqInit::new(64))?;
        let qp = pd.create_qp(&QpInit::new(qp_type, &cq, CAP))?;
        let mr = pd.alloc_mr(MR_LEN, ALL_ACCESS)?;
        Ok(Endpoint { ctx, pd, cq, qp, mr })
    }

    /// Posts one receive of `len` bytes at `offset` of the peer's region.
    pub fn post_recv(&self, wr_id: u64, offset: usize, len: u32) -> Result {
        let sge = [self.mr.sge(offset, len)?];
        self.qp.post_recv(&[rverbs::RecvWr::new(wr_id, &sge)])?;
        Ok(())
    }
}

/// Connects two peers' QPs to each other and brings both to RTS, each responder
/// granting [`ALL_ACCESS`].
pub fn connect(a: &Endpoint, b: &Endpoint) -> Result {
    bring_up(&a.qp, &a.ctx, b.qp.qp_num(), ALL_ACCESS)?;
    bring_up(&b.qp, &b.ctx, a.qp.qp_num(), ALL_ACCESS)
}

/// Two connected peers with QPs of `qp_type`.
pub fn connected_pair(qp_type: QpType) -> Result<(Endpoint, Endpoint)> {
    let a = Endpoint::new(qp_type)?;
    let b = Endpoint::new(qp_type)?;
    connect(&a, &b)?;
    Ok((a, b))
}

/// Polls one completion (ibv_poll_cq(3) with one entry), yielding between empty polls,
/// and fails after [`DEADLINE`].
pub fn poll_one(cq: &Cq) -> Result<Wc> {
    let mut wc = [Wc::default()];
    let deadline = Instant::now() + DEADLINE;
    loop {
        if cq.poll(&mut wc)? == 1 {
            return Ok(wc[0]);
        }
        if Instant::now() > deadline {
            return fail(format!("no completion within {DEADLINE:?}"));
        }
        std::thread::yield_now();
    }
}

/// Polls the next completion and checks it is the successful completion of `wr_id`
/// with `opcode`. ibv_poll_cq(3): only a successful completion has valid `opcode`,
/// `byte_len`, `imm_data`, `wc_flags`, `src_qp`…; an error completion carries just
/// `wr_id`, `status`, `qp_num` and `vendor_err`.
pub fn expect_ok(cq: &Cq, wr_id: u64, opcode: WcOpcode) -> Result<Wc> {
    let wc = poll_one(cq)?;
    if !wc.is_success() {
        return fail(format!(
            "wr_id {}: completed with \"{}\" (vendor_err {:#x}), expected {opcode:?} to succeed",
            wc.wr_id(),
            wc.status(),
            wc.vendor_err()
        ));
    }
    check_eq("wr_id", wc.wr_id(), wr_id)?;
    check_eq("opcode", wc.opcode(), Some(opcode))?;
    Ok(wc)
}

/// Fails if the CQ holds a completion.
pub fn expect_empty(cq: &Cq, why: &str) -> Result {
    let mut wc = [Wc::default()];
    match cq.poll(&mut wc)? {
        0 => Ok(()),
        _ => fail(format!("unexpected completion ({why}): {:?}", wc[0])),
    }
}

/// Runs a blocking verb (e.g. ibv_get_async_event(3)) on a helper
/// thread and waits at most [`DEADLINE`] for its result, so a missing event fails the
/// example instead of hanging it. On timeout the helper stays blocked; the process
/// exits with the error anyway.
pub fn blocking_with_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The receiver is gone only if we already timed out.
        let _ = tx.send(f());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(v) => Ok(v),
        Err(_) => fail(format!("{what}: nothing within {DEADLINE:?}")),
    }
}
