//! Shared by the benchmarks: two RC QPs of the built-in device connected in one process,
//! as `tests/common` builds them, and the polling helper the timed loops use.
//!
//! Everything here runs outside the timed sections.
#![allow(dead_code)]

use rverbs::{Access, Context, Cq, CqCreateFlags, CqInit, Mr, Mtu, Qp, QpCap, QpInit, QpType, RemotePath, Wc};

/// Every access right on both sides' memory.
pub const ALL_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// One side of the connection.
pub struct Side {
    pub ctx: Context,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

/// Two connected sides in RTS.
pub struct Pair {
    pub a: Side,
    pub b: Side,
}

fn side(cqe: u32, flags: CqCreateFlags, max_send_wr: u32, max_recv_wr: u32, mr_len: usize) -> Side {
    let ctx = rverbs::devices().expect("device list")[0]
        .open()
        .expect("open rverbs0");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx
        .create_cq(&CqInit::new(cqe).flags(flags))
        .expect("create_cq");
    let cap = QpCap {
        max_send_wr,
        max_recv_wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, cap))
        .expect("create_qp");
    let mr = pd.alloc_mr(mr_len, ALL_ACCESS).expect("alloc_mr");
    Side { ctx, cq, qp, mr }
}

/// RESET → INIT → RTR → RTS towards `dest_qpn` over the loopback GID, with MTU 4096 and
/// read/atomic depth 16 ([`Qp::connect`] gives the masks).
fn connect(s: &Side, dest_qpn: u32) {
    let table = s.ctx.query_gid_table();
    let e = table
        .iter()
        .find(|e| e.gid.to_ipv4() == Some(std::net::Ipv4Addr::LOCALHOST))
        .expect("loopback GID");
    let path = RemotePath {
        access: ALL_ACCESS,
        path_mtu: Mtu::Mtu4096,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        ..RemotePath::new(e.gid, e.index as u8, dest_qpn)
    };
    s.qp.connect(&path).expect("connect");
}

/// A connected RC pair: CQs of at least `cqe` entries, the given queue depths, and
/// `mr_len` bytes of registered memory per side.
pub fn pair(cqe: u32, max_send_wr: u32, max_recv_wr: u32, mr_len: usize) -> Pair {
    pair_with(
        cqe,
        CqCreateFlags::empty(),
        max_send_wr,
        max_recv_wr,
        mr_len,
    )
}

/// As [`pair`], with CQs created with `flags`.
pub fn pair_with(
    cqe: u32,
    flags: CqCreateFlags,
    max_send_wr: u32,
    max_recv_wr: u32,
    mr_len: usize,
) -> Pair {
    let a = side(cqe, flags, max_send_wr, max_recv_wr, mr_len);
    let b = side(cqe, flags, max_send_wr, max_recv_wr, mr_len);
    connect(&a, b.qp.qp_num());
    connect(&b, a.qp.qp_num());
    Pair { a, b }
}

/// Polls until one completion arrives and asserts it succeeded. In-process completions
/// are there when `post_send` returns, so this spins at most a few times.
#[inline]
pub fn poll_one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default(); 1];
    loop {
        if cq.poll(&mut wc).expect("poll") == 1 {
            assert!(wc[0].is_success(), "completion failed: {:?}", wc[0]);
            return wc[0];
        }
        std::hint::spin_loop();
    }
}
