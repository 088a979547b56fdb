//! Two RC QPs of the built-in device connected to each other in one process, and the
//! polling helpers every test of the CLI uses.
//!
//! Each side opens its own context, as two processes would; the only thing exchanged
//! "out of band" is what `ibv_rc_pingpong` exchanges: GID, QPN and PSN.

use std::time::{Duration, Instant};

use rverbs::{
    Access, Context, Cq, CqInit, Gid, Mr, Mtu, Qp, QpCap, QpInit, QpType, RemotePath, Wc, WcOpcode,
};

use crate::failure::Failure;

/// Every access right: each side's memory is a target of WRITE, READ and atomics.
pub const ALL_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// How long a poll waits for a completion before the step fails. In-process completions
/// are ready when `post_send` returns; this only bounds a broken run.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sizes of the objects of a [`Pair`].
#[derive(Clone, Copy, Debug)]
pub struct PairConfig {
    /// Bytes of registered memory per side.
    pub mr_len: usize,
    /// Send queue depth (the largest window a test may keep outstanding).
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
}

/// One side of the connection: what a process would own (the QP and the MR keep
/// their protection domain alive).
#[derive(Debug)]
pub struct Side {
    /// The context the side opened.
    pub ctx: Context,
    /// One CQ for both send and receive completions.
    pub cq: Cq,
    /// The RC QP.
    pub qp: Qp,
    /// Its registered memory, `PairConfig::mr_len` bytes, zero-filled.
    pub mr: Mr,
}

/// Two connected sides, both in RTS.
#[derive(Debug)]
pub struct Pair {
    /// The requester of one-sided tests (WRITE, READ, atomics) and the ping side.
    pub a: Side,
    /// The target of one-sided tests and the pong side.
    pub b: Side,
    /// The GID both sides address each other with.
    pub gid: Gid,
    /// Its index in the GID table.
    pub gid_index: u8,
}

impl Side {
    fn open(cfg: &PairConfig) -> Result<Side, Failure> {
        let devices = rverbs::devices()?;
        let dev = devices
            .first()
            .ok_or_else(|| Failure::Usage("no RDMA device is listed".into()))?;
        let ctx = dev.open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(&CqInit::new(cfg.max_send_wr + cfg.max_recv_wr))?;
        let cap = QpCap {
            max_send_wr: cfg.max_send_wr,
            max_recv_wr: cfg.max_recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap))?;
        let mr = pd.alloc_mr(cfg.mr_len, ALL_ACCESS)?;
        Ok(Side { ctx, cq, qp, mr })
    }

    /// RESET → INIT → RTR → RTS towards `dest_qpn` ([`Qp::connect`]: the attribute masks
    /// ibv_modify_qp(3) requires for RC), with MTU 4096 and read/atomic depth 16.
    fn connect(&self, dest_qpn: u32, gid: Gid, gid_index: u8) -> Result<(), Failure> {
        let path = RemotePath {
            access: ALL_ACCESS,
            path_mtu: Mtu::Mtu4096,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 16,
            ..RemotePath::new(gid, gid_index, dest_qpn)
        };
        self.qp.connect(&path)?;
        Ok(())
    }
}

impl Pair {
    /// Opens two sides and connects them through the loopback GID (or, on a host
    /// without one, the first IPv4-mapped GID).
    pub fn connect(cfg: &PairConfig) -> Result<Pair, Failure> {
        let a = Side::open(cfg)?;
        let b = Side::open(cfg)?;
        let table = a.ctx.query_gid_table();
        let entry = table
            .iter()
            .find(|e| e.gid.to_ipv4() == Some(std::net::Ipv4Addr::LOCALHOST))
            .or_else(|| table.iter().find(|e| e.gid.to_ipv4().is_some()))
            .or(table.first())
            .ok_or_else(|| Failure::Usage("the GID table is empty".into()))?;
        let gid_index = u8::try_from(entry.index)
            .map_err(|_| Failure::Usage(format!("GID index {} does not fit a u8", entry.index)))?;
        a.connect(b.qp.qp_num(), entry.gid, gid_index)?;
        b.connect(a.qp.qp_num(), entry.gid, gid_index)?;
        Ok(Pair {
            a,
            b,
            gid: entry.gid,
            gid_index,
        })
    }
}

/// Waits for the next completion on `cq` (bounded by [`POLL_TIMEOUT`]) and checks that it
/// succeeded and has opcode `expected`.
pub fn poll_expect(cq: &Cq, what: &'static str, expected: WcOpcode) -> Result<Wc, Failure> {
    let mut wc = [Wc::default(); 1];
    poll_batch(cq, what, &mut wc)?;
    check(&wc[0], what, expected)?;
    Ok(wc[0])
}

/// Waits until `cq` yields at least one completion (bounded by [`POLL_TIMEOUT`]) and
/// returns how many it put into `wc`. Statuses are not checked.
pub fn poll_batch(cq: &Cq, what: &'static str, wc: &mut [Wc]) -> Result<usize, Failure> {
    let mut deadline: Option<Instant> = None;
    loop {
        // Check the clock only every 1024 empty polls: in-process completions are
        // normally there on the first one.
        for _ in 0..1024 {
            let n = cq.poll(wc)?;
            if n > 0 {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
        let now = Instant::now();
        match deadline {
            None => deadline = Some(now + POLL_TIMEOUT),
            Some(d) if now >= d => {
                return Err(Failure::Timeout {
                    what,
                    timeout: POLL_TIMEOUT,
                })
            }
            Some(_) => std::thread::yield_now(),
        }
    }
}

/// Fails unless `wc` succeeded with opcode `expected`.
pub fn check(wc: &Wc, what: &'static str, expected: WcOpcode) -> Result<(), Failure> {
    if !wc.is_success() {
        return Err(Failure::Completion {
            what,
            wr_id: wc.wr_id(),
            status: wc.status(),
            vendor_err: wc.vendor_err(),
        });
    }
    if wc.opcode() != Some(expected) {
        return Err(Failure::WrongCompletion {
            what,
            expected,
            got: wc.opcode(),
            wr_id: wc.wr_id(),
        });
    }
    Ok(())
}

/// The test pattern byte at `offset` for a buffer tagged `seed` (never constant over a
/// 4 KiB page, different for different seeds).
pub fn pattern_byte(offset: usize, seed: u8) -> u8 {
    (offset as u8)
        ^ ((offset >> 8) as u8).wrapping_mul(31)
        ^ ((offset >> 16) as u8).wrapping_mul(7)
        ^ seed
}

/// `len` bytes of the pattern tagged `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(i, seed)).collect()
}

/// Compares `len` bytes of `mr` at `offset` with `expected`, byte for byte.
pub fn verify(mr: &Mr, offset: usize, expected: &[u8], what: &'static str) -> Result<(), Failure> {
    let mut got = vec![0u8; expected.len()];
    mr.read(offset, &mut got)?;
    match got.iter().zip(expected).position(|(g, e)| g != e) {
        None => Ok(()),
        Some(i) => Err(Failure::Data {
            what,
            offset: i,
            expected: expected[i],
            got: got[i],
        }),
    }
}
