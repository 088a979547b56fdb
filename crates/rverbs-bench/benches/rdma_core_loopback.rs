//! The `rdma-core` backend's data path against the soft API's, in one run: `write_lat/8`
//! (post one signaled 8-byte RDMA WRITE, poll its completion) on two RC QPs of one
//! context,
//!
//! - `soft`: through `rverbs::Qp`/`rverbs::Cq` straight into the soft device (the peer);
//! - `rdma_core`: through `rverbs::rdma_core` into the libibverbs named by
//!   `RVERBS_LIBIBVERBS` (the drop-in of scripts/build-dropin.sh: the same soft device
//!   behind the C ABI, `context->ops.post_send`/`poll_cq`), so the difference is the
//!   backend's translation plus the drop-in's.
//!
//! All setup happens before the clock starts; the written bytes are checked after.
//!
//! Run: `RVERBS_LIBIBVERBS=$(scripts/build-dropin.sh)/libibverbs.so.1 cargo bench -p
//! rverbs-bench --features rverbs/rdma-core --bench rdma_core_loopback`

mod common;

use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rverbs::rdma_core::{devices, Cq, Mr, Qp};
use rverbs::{CqInit, QpInit};
use rverbs::{AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, SendWr, Wc};

const SIZE: usize = 8;

/// Polls `cq` until one completion arrives.
fn poll_one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default()];
    while cq.poll(&mut wc).expect("poll_cq") == 0 {}
    assert!(wc[0].is_success(), "{:?}", wc[0]);
    wc[0]
}

/// RESET → INIT → RTR → RTS towards `dest` over the loopback GID at `index`.
fn connect(qp: &Qp, gid: Gid, index: u8, dest: u32) {
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    qp.modify(&QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: common::ALL_ACCESS, ..QpAttr::default() }, m)
        .expect("INIT");
    let ah = AhAttr { grh: Some(GlobalRoute { dgid: gid, sgid_index: index, hop_limit: 64, ..GlobalRoute::default() }), port_num: 1, ..AhAttr::default() };
    let rtr = QpAttr { qp_state: QpState::Rtr, ah_attr: ah, path_mtu: Mtu::Mtu4096, dest_qp_num: dest, max_dest_rd_atomic: 16, min_rnr_timer: 1, ..QpAttr::default() };
    let m = QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    qp.modify(&rtr, m).expect("RTR");
    let rts = QpAttr { qp_state: QpState::Rts, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16, ..QpAttr::default() };
    let m = QpAttrMask::STATE | QpAttrMask::TIMEOUT | QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY | QpAttrMask::SQ_PSN | QpAttrMask::MAX_QP_RD_ATOMIC;
    qp.modify(&rts, m).expect("RTS");
}

fn write_lat(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_lat");

    // The peer: the soft API, as rc_loopback's write_lat.
    let p = common::pair(64, 16, 1, SIZE);
    p.a.mr.write(0, &[7; SIZE]).unwrap();
    let sge = [p.a.mr.sge(0, SIZE as u32).unwrap()];
    let (remote, rkey) = (p.b.mr.iova(), p.b.mr.rkey());
    g.bench_function(BenchmarkId::new("soft", SIZE), |bench| {
        bench.iter(|| {
            p.a.qp.post_send(&[SendWr::write(0, &sge, remote, rkey).signaled()]).unwrap();
            common::poll_one(&p.a.cq)
        })
    });

    // The backend over the libibverbs of RVERBS_LIBIBVERBS.
    let dev = devices().expect("libibverbs (RVERBS_LIBIBVERBS)").into_iter().next().expect("a device");
    let ctx = dev.open().expect("open");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(&CqInit::new(64)).expect("create_cq");
    let public_cq = rverbs::Cq::from(cq.clone());
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let a = pd.create_qp(&QpInit::new(QpType::Rc, &public_cq, cap)).expect("create_qp");
    let b = pd.create_qp(&QpInit::new(QpType::Rc, &public_cq, cap)).expect("create_qp");
    let lo = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
    let len = ctx.query_port(1).expect("query_port").gid_tbl_len;
    let index = (0..len).find(|&i| ctx.query_gid(1, i).ok() == Some(lo)).expect("loopback GID") as u8;
    connect(&a, lo, index, b.qp_num());
    connect(&b, lo, index, a.qp_num());
    let src: Mr = pd.alloc_mr(SIZE, common::ALL_ACCESS).expect("alloc_mr");
    let dst: Mr = pd.alloc_mr(SIZE, common::ALL_ACCESS).expect("alloc_mr");
    src.write(0, &[9; SIZE]).unwrap();
    let sge = [src.whole()];
    let (remote, rkey) = (dst.addr() as u64, dst.rkey());
    g.bench_function(BenchmarkId::new("rdma_core", SIZE), |bench| {
        bench.iter(|| {
            a.post_send(&[SendWr::write(0, &sge, remote, rkey).signaled()]).unwrap();
            poll_one(&cq)
        })
    });
    g.finish();
    let mut got = [0u8; SIZE];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [9; SIZE], "written bytes");
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, [7; SIZE], "written bytes");
}

criterion_group!(benches, write_lat);
criterion_main!(benches);
