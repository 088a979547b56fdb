//! The `rdma-core` backend run for real on a libibverbs device, through the public types
//! (`rverbs::{Context, Pd, Cq, Qp, Mr, Ah, CompChannel}` on a device of
//! `devices_of(Backend::RdmaCore)`), and its own types (`rverbs::rdma_core`): their
//! destruction, and the raw device list.
//!
//! It loads the libibverbs named by `RVERBS_LIBIBVERBS` (scripts/test.sh points it at the
//! drop-in `libibverbs.so.1` of scripts/build-dropin.sh; any other device works too), so
//! the traffic below goes through a real libibverbs ABI: the exported verbs, and the ops
//! table the inline `ibv_post_send`/`ibv_poll_cq` call. No device is a failure, never a
//! skip. Every test is two QPs of one context, looped back over the device's own GID.
#![cfg(feature = "rdma-core")]

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rverbs::rdma_core::{self as backend, device_by_name, devices};
use rverbs::{Ah, Backend, CompChannel, Context, Cq, CqInit, Mr, Pd, Qp, QpInit};
use rverbs::{
    Access, AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, SendWr,
    UdDest, Wc, WcFlags, WcOpcode, WcStatus,
};

const PORT: u8 = 1;
const QKEY: u32 = 0x1111_1111;
/// How long a completion may take before the test fails (a bound, not a synchronisation).
const DEADLINE: Duration = Duration::from_secs(10);
/// The bytes a UD receive buffer reserves for the GRH (ibv_post_recv(3)).
const GRH_LEN: usize = 40;

/// A context of libibverbs' first device, through the public types.
fn open() -> Context {
    let devs = rverbs::devices_of(Backend::RdmaCore).expect("libibverbs loads (RVERBS_LIBIBVERBS or libibverbs.so.1)");
    assert!(!devs.is_empty(), "libibverbs lists no device: set RVERBS_LIBIBVERBS to the drop-in (scripts/build-dropin.sh)");
    let ctx = devs[0].open().expect("ibv_open_device");
    assert_eq!(ctx.backend(), Backend::RdmaCore);
    ctx
}

/// The GID index and GID the loopback paths use: 127.0.0.1's entry if the table has one
/// (rverbs' device), else the first non-zero entry (a NIC's own GID).
fn own_gid(ctx: &Context) -> (u8, Gid) {
    let len = ctx.query_port(PORT).expect("query_port").gid_tbl_len;
    let gids: Vec<(u8, Gid)> =
        (0..len.min(256)).filter_map(|i| Some((u8::try_from(i).ok()?, ctx.query_gid(PORT, i).ok()?))).collect();
    let lo = Gid::from_ipv4(Ipv4Addr::LOCALHOST);
    gids.iter()
        .find(|(_, g)| *g == lo)
        .or_else(|| gids.iter().find(|(_, g)| g.0 != [0; 16]))
        .copied()
        .expect("the port has a GID")
}

fn path(ctx: &Context) -> AhAttr {
    let (index, gid) = own_gid(ctx);
    AhAttr {
        grh: Some(GlobalRoute { dgid: gid, sgid_index: index, hop_limit: 64, ..GlobalRoute::default() }),
        port_num: PORT,
        ..AhAttr::default()
    }
}

fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

/// RESET → INIT → RTR → RTS with the attributes ibv_modify_qp(3) requires of a connected QP.
/// Two RC QPs of `pd` completing to `cq_a` and `cq_b`, connected to each other (LOCAL_WRITE).
fn connected_qps(ctx: &Context, pd: &Pd, cq_a: &Cq, cq_b: &Cq) -> (Qp, Qp) {
    let a = pd.create_qp(&QpInit::new(QpType::Rc, cq_a, cap())).unwrap();
    let b = pd.create_qp(&QpInit::new(QpType::Rc, cq_b, cap())).unwrap();
    let p = path(ctx);
    connect(&a, p, b.qp_num(), Access::LOCAL_WRITE);
    connect(&b, p, a.qp_num(), Access::LOCAL_WRITE);
    (a, b)
}

fn connect(qp: &Qp, ah: AhAttr, dest: u32, access: Access) {
    let init = QpAttr { qp_state: QpState::Init, port_num: PORT, qp_access_flags: access, ..QpAttr::default() };
    qp.modify(&init, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS)
        .expect("modify to INIT");
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: ah,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: dest,
        rq_psn: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    qp.modify(&rtr, m).expect("modify to RTR");
    let rts = QpAttr { qp_state: QpState::Rts, timeout: 14, retry_cnt: 7, rnr_retry: 7, sq_psn: 0, max_rd_atomic: 4, ..QpAttr::default() };
    let m = QpAttrMask::STATE
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    qp.modify(&rts, m).expect("modify to RTS");
    assert_eq!(qp.state(), QpState::Rts);
}

/// Polls `cq` until one completion arrives, failing after [`DEADLINE`].
fn one(cq: &Cq) -> Wc {
    let mut wc = [Wc::default()];
    let start = Instant::now();
    loop {
        if cq.poll(&mut wc).expect("poll_cq") == 1 {
            return wc[0];
        }
        assert!(start.elapsed() < DEADLINE, "no completion within {DEADLINE:?}");
        std::thread::yield_now();
    }
}

/// Two RC QPs of one context connected to each other, each with its own CQ, granting
/// `access` to the other.
struct Pair {
    ctx: Context,
    pd: Pd,
    a: Qp,
    b: Qp,
    cq_a: Cq,
    cq_b: Cq,
}

fn rc_pair(access: Access) -> Pair {
    let ctx = open();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq_a = ctx.create_cq(&CqInit::new(32)).expect("create_cq");
    let cq_b = ctx.create_cq(&CqInit::new(32)).expect("create_cq");
    let a = pd.create_qp(&QpInit::new(QpType::Rc, &cq_a, cap())).expect("create_qp");
    let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq_b, cap())).expect("create_qp");
    assert_eq!(a.state(), QpState::Reset);
    let p = path(&ctx);
    connect(&a, p, b.qp_num(), access);
    connect(&b, p, a.qp_num(), access);
    Pair { ctx, pd, a, b, cq_a, cq_b }
}

fn remote_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

fn region(pd: &Pd, len: usize) -> Mr {
    pd.alloc_mr(len, remote_access()).expect("alloc_mr")
}

#[test]
fn the_backend_lists_opens_and_queries_the_device() {
    let devs = devices().expect("libibverbs loads");
    assert!(!devs.is_empty(), "no device");
    assert!(!devs[0].name().is_empty());
    let ctx = devs[0].open().expect("open");
    let attr = ctx.query_device();
    assert!(attr.max_qp > 0 && attr.max_cqe > 0 && attr.phys_port_cnt >= 1, "{attr:?}");
    assert_eq!(attr.node_guid, devs[0].guid(), "ibv_query_device and ibv_get_device_guid agree");
    let port = ctx.query_port(PORT).expect("query_port");
    assert_eq!(port.state, rverbs::PortState::Active);
    assert!(port.gid_tbl_len > 0);
    let gid = ctx.query_gid(PORT, 0).expect("query_gid");
    assert_ne!(gid.0, [0; 16]);
    assert!(ctx.query_port(0).is_err(), "port 0 does not exist");
    // Chosen at run time by name.
    let by_name = device_by_name(devs[0].name()).expect("device_by_name");
    assert_eq!(by_name.guid(), devs[0].guid());
    assert_eq!(device_by_name("no-such-device").expect_err("unknown").errno(), libc::EINVAL);
}

#[test]
fn rc_send_with_immediate_arrives_with_its_bytes() {
    let p = rc_pair(remote_access());
    let src = region(&p.pd, 64);
    let dst = region(&p.pd, 64);
    src.write(0, b"hello over libibverbs").unwrap();
    p.b.post_recv(&[RecvWr::new(7, &[dst.sge(0, 64).unwrap()])]).expect("post_recv");
    let sge = [src.sge(0, 21).unwrap()];
    p.a.post_send(&[SendWr::send(1, &sge).with_imm(0x1234_5678).signaled()]).expect("post_send");
    let s = one(&p.cq_a);
    assert_eq!((s.status(), s.wr_id(), s.opcode()), (WcStatus::Success, 1, Some(WcOpcode::Send)));
    let r = one(&p.cq_b);
    assert_eq!((r.status(), r.wr_id(), r.opcode()), (WcStatus::Success, 7, Some(WcOpcode::Recv)));
    assert_eq!(r.byte_len(), Some(21));
    assert!(r.wc_flags().unwrap().contains(WcFlags::WITH_IMM));
    assert_eq!(r.imm_data(), Some(0x1234_5678));
    assert_eq!(r.qp_num(), p.b.qp_num());
    let mut got = [0u8; 21];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got, b"hello over libibverbs");
}

#[test]
fn an_inline_send_needs_no_region_on_the_sending_side() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    // Each inline piece is one `struct ibv_sge`, counted against max_send_sge.
    let cap = QpCap { max_inline_data: 64, max_send_sge: 2, ..cap() };
    let a = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
    assert!(a.cap().max_inline_data >= 64, "the provider grants at least what was asked");
    let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
    let p = path(&ctx);
    connect(&a, p, b.qp_num(), Access::LOCAL_WRITE);
    connect(&b, p, a.qp_num(), Access::LOCAL_WRITE);
    let dst = region(&pd, 64);
    b.post_recv(&[RecvWr::new(1, &[dst.whole()])]).unwrap();
    let pieces: [&[u8]; 2] = [b"in", b"line"];
    let mut wr = SendWr::new(2, rverbs::WrOpcode::Send).signaled();
    wr.payload = rverbs::Payload::InlineList(&pieces);
    a.post_send(&[wr]).expect("inline post_send");
    let mut seen = [one(&cq), one(&cq)];
    seen.sort_by_key(|w| w.wr_id());
    assert!(seen.iter().all(|w| w.is_success()), "{seen:?}");
    assert_eq!(seen[0].byte_len(), Some(6));
    let mut got = [0u8; 6];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got, b"inline");
}

#[test]
fn rdma_write_and_read_move_the_bytes() {
    let p = rc_pair(remote_access());
    let local = region(&p.pd, 4096);
    let remote = region(&p.pd, 4096);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    local.write(0, &pattern).unwrap();
    let sge = [local.whole()];
    p.a.post_send(&[SendWr::write(2, &sge, remote.addr() as u64, remote.rkey()).signaled()]).unwrap();
    let wc = one(&p.cq_a);
    assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, Some(WcOpcode::RdmaWrite)));
    let mut got = vec![0u8; 4096];
    remote.read(0, &mut got).unwrap();
    assert_eq!(got, pattern);

    // READ it back into a third region, at an offset.
    remote.fill(100, 10, 0xab).unwrap();
    let back = region(&p.pd, 4096);
    let sge = [back.sge(0, 200).unwrap()];
    p.a.post_send(&[SendWr::read(3, &sge, remote.addr() as u64, remote.rkey()).signaled()]).unwrap();
    let wc = one(&p.cq_a);
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, Some(WcOpcode::RdmaRead), Some(200)));
    let mut got = vec![0u8; 200];
    back.read(0, &mut got).unwrap();
    let mut want = pattern[..200].to_vec();
    want[100..110].fill(0xab);
    assert_eq!(got, want);
}

#[test]
fn compare_and_swap_swaps_when_equal_and_returns_the_old_value() {
    let p = rc_pair(remote_access());
    assert_ne!(p.ctx.query_device().atomic_cap, 0, "the drop-in offers atomics (IBV_ATOMIC_HCA)");
    let target = region(&p.pd, 8);
    let result = region(&p.pd, 8);
    target.write(0, &41u64.to_ne_bytes()).unwrap();
    let sge = [result.sge(0, 8).unwrap()];
    p.a.post_send(&[SendWr::compare_swap(4, &sge, target.addr() as u64, target.rkey(), 41, 99).signaled()]).unwrap();
    let wc = one(&p.cq_a);
    assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, Some(WcOpcode::CompSwap)));
    assert_eq!(result.read_u64(0).unwrap(), 41);
    assert_eq!(target.read_u64(0).unwrap(), 99);
    // Unequal: no swap, the old value comes back again.
    p.a.post_send(&[SendWr::compare_swap(5, &sge, target.addr() as u64, target.rkey(), 41, 7).signaled()]).unwrap();
    assert_eq!(one(&p.cq_a).status(), WcStatus::Success);
    assert_eq!(result.read_u64(0).unwrap(), 99);
    assert_eq!(target.read_u64(0).unwrap(), 99);
}

#[test]
fn a_bad_rkey_completes_in_remote_access_error() {
    let p = rc_pair(remote_access());
    let local = region(&p.pd, 64);
    let remote = region(&p.pd, 64);
    let sge = [local.whole()];
    p.a.post_send(&[SendWr::write(6, &sge, remote.addr() as u64, remote.rkey() ^ 0x5a5a_0000).signaled()]).unwrap();
    let wc = one(&p.cq_a);
    assert_eq!(wc.wr_id(), 6);
    assert_eq!(wc.status(), WcStatus::RemAccessErr);
    assert_eq!(p.a.state(), QpState::Err, "an RC error completion moves the requester to ERR");
}

#[test]
fn a_modify_to_a_state_the_table_forbids_is_einval() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap())).unwrap();
    let rts = QpAttr { qp_state: QpState::Rts, ..QpAttr::default() };
    let err = qp.modify(&rts, QpAttrMask::STATE).expect_err("RESET → RTS is not a transition");
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(qp.state(), QpState::Reset);
}

#[test]
fn ud_send_goes_through_an_address_handle() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    let ud = || {
        let qp = pd.create_qp(&QpInit::new(QpType::Ud, &cq, cap())).unwrap();
        let init = QpAttr { qp_state: QpState::Init, port_num: PORT, qkey: QKEY, ..QpAttr::default() };
        qp.modify(&init, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY).unwrap();
        qp.modify(&QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
        let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 0, ..QpAttr::default() };
        qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN).unwrap();
        qp
    };
    let a = ud();
    let b = ud();
    let ah = Ah::new(&pd, &path(&ctx)).expect("create_ah");
    let src = region(&pd, 64);
    let dst = region(&pd, GRH_LEN + 64);
    src.write(0, b"datagram").unwrap();
    b.post_recv(&[RecvWr::new(8, &[dst.whole()])]).unwrap();
    let sge = [src.sge(0, 8).unwrap()];
    let mut wr = SendWr::send(9, &sge).signaled();
    wr.ud = Some(UdDest { ah: (&ah).into(), remote_qpn: b.qp_num(), remote_qkey: QKEY });
    a.post_send(&[wr]).expect("UD post_send");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(one(&cq));
    }
    let recv = seen.iter().find(|w| w.wr_id() == 8).expect("the receive completed");
    assert_eq!(recv.status(), WcStatus::Success);
    assert_eq!(recv.byte_len(), Some((GRH_LEN + 8) as u32));
    assert_eq!(recv.src_qp(), Some(a.qp_num()));
    let mut got = [0u8; 8];
    dst.read(GRH_LEN, &mut got).unwrap();
    assert_eq!(&got, b"datagram");
    assert!(seen.iter().any(|w| w.wr_id() == 9 && w.is_success()));

    // An address handle of another context is not this QP's: EINVAL, nothing posted.
    let other = open();
    let other_ah = Ah::new(&other.alloc_pd().unwrap(), &path(&other)).unwrap();
    let mut wr = SendWr::send(10, &sge);
    wr.ud = Some(UdDest { ah: (&other_ah).into(), remote_qpn: b.qp_num(), remote_qkey: QKEY });
    let err = a.post_send(&[wr]).expect_err("foreign AH");
    assert_eq!((err.index, err.error.errno()), (0, libc::EINVAL));
}

/// Whether `fd` is readable now, without waiting.
fn readable_now(fd: std::os::fd::RawFd) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
}

/// Waits until `ch`'s fd is readable, failing after [`DEADLINE`].
fn readable(ch: &CompChannel) -> bool {
    let mut pfd = libc::pollfd { fd: ch.fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, DEADLINE.as_millis() as libc::c_int) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

#[test]
fn an_armed_cq_wakes_its_completion_channel() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().expect("create_comp_channel");
    let cq_a = ctx.create_cq(&CqInit::new(8)).unwrap();
    let cq_b = ctx.create_cq(&CqInit::new(8).channel(&ch).cq_context(0xfeed)).unwrap();
    let (a, b) = connected_qps(&ctx, &pd, &cq_a, &cq_b);
    let buf = region(&pd, 16);
    b.post_recv(&[RecvWr::new(1, &[buf.whole()])]).unwrap();
    cq_b.req_notify(false).expect("req_notify_cq");
    let sge = [buf.sge(0, 4).unwrap()];
    a.post_send(&[SendWr::send(2, &sge)]).unwrap();
    assert!(readable(&ch), "the channel's fd became readable");
    // The event is the public `CqEvent`, over the backend's CQ.
    let ev = ch.get_cq_event().expect("get_cq_event");
    assert!(ev.cq().same_as(&cq_b));
    assert_eq!(ev.cq_context(), 0xfeed);
    ev.ack();
    assert_eq!(one(&cq_b).wr_id(), 1);
}

/// `aio::AsyncCq` over the backend's CQ and channel: the checks of its constructor, and
/// a completion awaited on tokio's reactor through the channel's fd.
#[cfg(feature = "tokio")]
#[test]
fn an_async_cq_awaits_the_backends_completions() {
    use rverbs::aio::AsyncCq;
    use rverbs::{Error, Rule};
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq(&CqInit::new(8)).unwrap();
    let cq_b = ctx.create_cq(&CqInit::new(8).channel(&ch)).unwrap();
    let err = AsyncCq::new(cq_a.clone(), ch.clone()).expect_err("cq_a reports to no channel");
    assert!(matches!(err, Error::Invalid { rule: Rule::NotTheCqsChannel, .. }), "{err:?}");
    let shared = ctx.create_cq(&CqInit::new(8).channel(&ch)).unwrap();
    let err = AsyncCq::new(cq_b.clone(), ch.clone()).expect_err("two CQs report to the channel");
    assert!(matches!(err, Error::Invalid { rule: Rule::SharedChannel { cqs: 2 }, .. }), "{err:?}");
    shared.destroy().unwrap();
    let (a, b) = connected_qps(&ctx, &pd, &cq_a, &cq_b);
    let buf = region(&pd, 16);
    b.post_recv(&[RecvWr::new(7, &[buf.whole()])]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap();
    rt.block_on(async {
        let mut acq = AsyncCq::new(cq_b, ch).expect("a CQ alone on its channel");
        let mut next = std::pin::pin!(acq.next_completion());
        // Nothing sent yet: the future arms the CQ and waits, it does not return empty.
        let waker = std::task::Waker::noop();
        assert!(std::future::Future::poll(next.as_mut(), &mut std::task::Context::from_waker(waker)).is_pending());
        let sge = [buf.sge(0, 4).unwrap()];
        a.post_send(&[SendWr::send(2, &sge)]).unwrap();
        let wc = tokio::time::timeout(DEADLINE, next).await.expect("the channel woke the task").unwrap();
        assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (7, WcStatus::Success, Some(WcOpcode::Recv)));
    });
}

#[test]
fn children_keep_their_parents() {
    let p = rc_pair(Access::LOCAL_WRITE);
    let Pair { ctx, pd, a, b, cq_a, cq_b } = p;
    // The context, PD and CQs are held by the QPs: dropping the handles destroys nothing
    // yet, and the QPs still work.
    drop((ctx, cq_a));
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.post_recv(&[RecvWr::new(1, &[mr.sge(0, 8).unwrap()])]).unwrap();
    a.post_send(&[SendWr::send(2, &[mr.sge(8, 8).unwrap()]).signaled()]).unwrap();
    assert_eq!(one(&cq_b).wr_id(), 1);
    assert_eq!(mr.pd().handle(), pd.handle());
    assert_eq!(a.pd().context().backend(), Backend::RdmaCore);
    // A clone destroys what every handle shares: the others' calls are then EINVAL.
    mr.clone().dereg().expect("ibv_dereg_mr through a clone");
    assert!(!mr.is_valid());
    assert_eq!(mr.read_u64(0).expect_err("a deregistered region").errno(), libc::EINVAL);
    a.clone().destroy().expect("ibv_destroy_qp through a clone");
    assert_eq!(a.state(), QpState::Err, "a destroyed QP reads as ERR");
    let err = a.post_send(&[SendWr::send(3, &[]).signaled()]).expect_err("a destroyed QP");
    assert_eq!((err.index, err.error.errno()), (0, libc::EINVAL));
    assert_eq!(a.destroy().expect_err("twice").errno(), libc::EINVAL);
}

/// A backend CQ's context, and a backend region's or QP's PD, are the objects that made
/// them, as public handles of the backend: the same context id, the same PD handle, and
/// the same object to destroy (deallocating the PD through `mr.pd()` is `EBUSY` while the
/// QP and region use it, and once done the creator's handle finds it deallocated).
#[test]
fn the_parent_a_child_gives_back_is_the_one_that_created_it() {
    let ctx = open();
    let other = open();
    assert_ne!(ctx.id(), other.id(), "two contexts of one device are two contexts");
    let pd = ctx.alloc_pd().unwrap();
    let other_pd = other.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let other_cq = other.create_cq(&CqInit::new(8)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap())).unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    for (got, want) in [(cq.context(), &ctx), (other_cq.context(), &other), (qp.pd().context(), &ctx), (mr.pd().context(), &ctx)] {
        assert_eq!((got.backend(), got.id(), got.device_name()), (Backend::RdmaCore, want.id(), want.device_name()));
    }
    assert_eq!(cq.context().query_device().node_guid, ctx.query_device().node_guid);
    assert_eq!((qp.pd().handle(), mr.pd().handle()), (pd.handle(), pd.handle()));
    assert_eq!(other_pd.context().id(), other.id());
    // The same PD object, not one that looks alike.
    assert_eq!(mr.pd().dealloc().expect_err("its region and QP use it").errno(), libc::EBUSY);
    qp.destroy().expect("ibv_destroy_qp");
    assert_eq!(qp.pd().dealloc().expect_err("its region uses it").errno(), libc::EBUSY);
    let parent = mr.pd();
    mr.dereg().expect("ibv_dereg_mr");
    parent.dealloc().expect("ibv_dealloc_pd through the region's parent");
    assert_eq!(pd.dealloc().expect_err("the creator's handle: already deallocated").errno(), libc::EINVAL);
    // A context given back creates in the context that made the CQ.
    let cq2 = cq.context().create_cq(&CqInit::new(8)).expect("ibv_create_cq in the CQ's context");
    assert_eq!(cq2.context().id(), ctx.id());
}

/// A QP another library created (here the loaded libibverbs' own ibv_create_qp, as
/// rdma_create_qp(3) does) and `Qp::adopt` wrapped reports the capabilities the provider
/// gave it, which may be greater than those asked (ibv_create_qp(3)), not the request.
#[test]
fn an_adopted_qp_reports_the_capabilities_the_provider_granted() {
    use rverbs_abi::{ibv_pd, ibv_qp, ibv_qp_init_attr};
    type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> core::ffi::c_int;
    let ctx = devices().expect("libibverbs loads")[0].open().expect("open");
    let path = std::env::var("RVERBS_LIBIBVERBS").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "libibverbs.so.1".into());
    // SAFETY: the library the backend loaded; opening it again maps nothing new.
    let lib = unsafe { libloading::Library::new(&path) }.expect("dlopen the backend's libibverbs");
    // SAFETY: rdma-core 44's signatures.
    let (create, destroy, list) = unsafe {
        (
            *lib.get::<CreateQp>(b"ibv_create_qp\0").unwrap(),
            *lib.get::<DestroyQp>(b"ibv_destroy_qp\0").unwrap(),
            *lib.get::<unsafe extern "C" fn()>(b"ibv_get_device_list\0").unwrap(),
        )
    };
    assert_eq!(list as usize, backend::ibv_get_device_list_address().unwrap(), "the library the backend loaded");
    let pd = ctx.alloc_pd().unwrap();
    let cq = Cq::from(ctx.create_cq(&CqInit::new(64)).unwrap());
    let asked = QpCap { max_send_wr: 3, max_recv_wr: 5, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 1 };
    let init = QpInit::new(QpType::Rc, &cq, asked);
    let mut attr = init.to_c().unwrap();
    // SAFETY: a live PD and CQ of this library, attributes from `to_c`.
    let raw = unsafe { create(pd.as_raw(), &mut attr) };
    assert!(!raw.is_null(), "ibv_create_qp");
    let returned = QpCap {
        max_send_wr: attr.cap.max_send_wr,
        max_recv_wr: attr.cap.max_recv_wr,
        max_send_sge: attr.cap.max_send_sge,
        max_recv_sge: attr.cap.max_recv_sge,
        max_inline_data: attr.cap.max_inline_data,
    };
    assert_ne!(returned, asked, "the provider grants more than asked (else this test proves nothing)");
    let addr = raw as usize;
    // SAFETY: `raw` is live and released once, by this.
    let release: backend::Release = Box::new(move || match unsafe { destroy(addr as *mut ibv_qp) } {
        0 => Ok(()),
        e => Err(rverbs::Error::Os(std::io::Error::from_raw_os_error(e))),
    });
    // SAFETY: made just above in `pd` with `init`'s CQs and type; only `release` destroys it.
    let qp = unsafe { backend::Qp::adopt(&pd, &init, raw, release) }.expect("adopt");
    assert_eq!(qp.cap(), returned, "what ibv_create_qp wrote back");
    assert_eq!(Qp::from(qp.clone()).cap(), returned);
    qp.destroy().expect("released by its creator's call");
    pd.dealloc().expect("nothing uses the PD");
}

/// The backend's own types take the public init types (whose CQs and channel are public
/// handles over the backend's: a soft CQ is `EINVAL`) and follow the same destruction
/// rule: `EBUSY` while a child uses the object (a region or QP its PD, a QP its CQ, a CQ
/// its channel), whatever other handles exist; in the verbs' order each goes; a second
/// destroy is `EINVAL`.
#[test]
fn the_backends_own_destroy_is_ebusy_while_a_child_uses_it() {
    let ctx = devices().expect("libibverbs loads")[0].open().expect("open");
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8).channel(&CompChannel::from(ch.clone()))).unwrap();
    let public_cq = Cq::from(cq.clone());
    let soft = rverbs::devices_of(Backend::Soft).unwrap()[0].open().unwrap();
    let soft_cq = soft.create_cq(&CqInit::new(8)).unwrap();
    let err = pd.create_qp(&QpInit::new(QpType::Rc, &soft_cq, cap())).expect_err("a soft CQ");
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(QpInit::new(QpType::Rc, &soft_cq, cap()).to_c().expect_err("a soft CQ").errno(), libc::EINVAL);
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &public_cq, cap())).unwrap();
    assert_eq!(backend::Cq::of(&public_cq).map(|c| c.same_as(&cq)), Some(true));
    let raw = QpInit::new(QpType::Rc, &public_cq, cap()).to_c().expect("the backend's CQ");
    assert_eq!(raw.send_cq, raw.recv_cq);
    assert!(!raw.send_cq.is_null());
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    assert_eq!(pd.dealloc().expect_err("in use").errno(), libc::EBUSY);
    assert_eq!(cq.destroy().expect_err("used by the QP").errno(), libc::EBUSY);
    assert_eq!(ch.destroy().expect_err("used by the CQ").errno(), libc::EBUSY);
    mr.dereg().expect("dereg_mr");
    assert_eq!(pd.dealloc().expect_err("the QP is left").errno(), libc::EBUSY);
    qp.clone().destroy().expect("destroy_qp");
    cq.destroy().expect("destroy_cq");
    ch.destroy().expect("destroy_comp_channel");
    pd.dealloc().expect("dealloc_pd");
    assert_eq!(qp.destroy().expect_err("twice").errno(), libc::EINVAL);
    assert_eq!(pd.dealloc().expect_err("twice").errno(), libc::EINVAL);
    assert_eq!(mr.dereg().expect_err("twice").errno(), libc::EINVAL);
}

/// A QP another library creates (`create_qp_with`, as rverbs-cm's rdma_create_qp(3)):
/// the creator's error comes back, its release is never called, and the PD and CQ are
/// not left counted as used.
#[test]
fn create_qp_with_returns_the_creators_error_and_keeps_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let ctx = devices().expect("libibverbs loads")[0].open().expect("open");
    let pd = ctx.alloc_pd().unwrap();
    let cq = Cq::from(ctx.create_cq(&CqInit::new(8)).unwrap());
    let released = Arc::new(AtomicBool::new(false));
    let flag = released.clone();
    let release: backend::Release = Box::new(move || {
        flag.store(true, Ordering::SeqCst);
        Ok(())
    });
    let mut seen = None;
    // SAFETY: `create` makes no QP.
    let err = unsafe {
        pd.create_qp_with(
            &QpInit::new(QpType::Rc, &cq, cap()),
            |attr| {
                seen = Some((attr.send_cq, attr.qp_type));
                Err(rverbs::Error::Os(std::io::Error::from_raw_os_error(libc::ENOMEM)))
            },
            release,
        )
    }
    .expect_err("the creator failed");
    assert_eq!(err.errno(), libc::ENOMEM);
    let (send_cq, qp_type) = seen.expect("create was called with the attributes");
    assert_eq!((send_cq.is_null(), qp_type), (false, QpType::Rc.raw()));
    assert!(!released.load(Ordering::SeqCst), "no QP, no release");
    cq.destroy().expect("the CQ is not counted as used");
    pd.dealloc().expect("the PD is not counted as used");
}

/// The environment variable that makes a test run as the child of
/// [`destroying_in_order_frees_the_providers_objects`].
const CHILD: &str = "RVERBS_TEST_DESTROY_CHILD";

/// The drop-in's live QPs and CQs, as its statistics segment in the runtime directory
/// lists them (`rverbs stat`): the endpoints this process owns (the drop-in's copy of
/// the soft device; the test never starts the in-crate one).
fn drop_in_objects() -> (usize, usize) {
    let pid = std::process::id();
    let mine: Vec<_> = rverbs::host_stats().into_iter().filter(|e| e.pid == pid).collect();
    assert_eq!(mine.len(), 1, "one endpoint of this process counts statistics: the drop-in's");
    (mine[0].qps.len(), mine[0].cqs.len())
}

/// Through the public types: a CQ still used by a QP is refused with EBUSY and stays
/// usable; destroyed in the verbs' order (QPs, region, address handle, CQs, channel, PD)
/// everything goes, and the drop-in's statistics show its QPs and CQs gone. Runs in a
/// child process with `RVERBS_STATS=1`, which the drop-in reads when it starts.
#[test]
fn destroying_in_order_frees_the_providers_objects() {
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["destroying_in_order_frees_the_providers_objects", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("RVERBS_STATS", "1")
            .output()
            .expect("run the child");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "the child failed:\n{text}");
        assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
        return;
    }
    // The child process holds nothing else: the drop-in's endpoint has just these.
    let p = rc_pair(Access::LOCAL_WRITE);
    let ch = p.ctx.create_comp_channel().expect("create_comp_channel");
    let cq_ev = p.ctx.create_cq(&CqInit::new(4).channel(&ch)).expect("create_cq");
    let mr = p.pd.alloc_mr(64, Access::LOCAL_WRITE).expect("alloc_mr");
    let ah = rverbs::Ah::new(&p.pd, &path(&p.ctx)).expect("create_ah");
    assert_eq!(drop_in_objects(), (2, 3));
    // Refused while used, losing nothing: the CQ still completes the next request.
    assert_eq!(p.cq_b.destroy().expect_err("a QP uses it").errno(), libc::EBUSY);
    assert_eq!(p.pd.dealloc().expect_err("QPs, a region and a handle use it").errno(), libc::EBUSY);
    assert_eq!(ch.destroy().expect_err("a CQ uses it").errno(), libc::EBUSY);
    p.b.post_recv(&[RecvWr::new(1, &[mr.sge(0, 8).unwrap()])]).unwrap();
    p.a.post_send(&[SendWr::send(2, &[mr.sge(8, 8).unwrap()]).signaled()]).unwrap();
    assert_eq!(one(&p.cq_b).wr_id(), 1, "the refused CQ still works");
    assert_eq!(one(&p.cq_a).wr_id(), 2);
    // In the verbs' order, through the handles the test holds (the QPs still hold their
    // PD and CQs as memory, not as users).
    p.a.destroy().expect("destroy_qp a");
    p.b.destroy().expect("destroy_qp b");
    assert_eq!(drop_in_objects(), (0, 3), "the drop-in's QPs are gone");
    mr.dereg().expect("dereg_mr");
    ah.destroy().expect("destroy_ah");
    p.cq_a.destroy().expect("destroy_cq a");
    p.cq_b.destroy().expect("destroy_cq b");
    cq_ev.destroy().expect("destroy_cq with a channel");
    assert_eq!(drop_in_objects(), (0, 0), "the drop-in's CQs are gone");
    ch.destroy().expect("destroy_comp_channel");
    p.pd.dealloc().expect("dealloc_pd");
    let mut wc = [Wc::default()];
    assert_eq!(p.cq_b.poll(&mut wc).expect_err("a destroyed CQ").errno(), libc::EINVAL);
    assert_eq!(p.pd.alloc_mr(8, Access::LOCAL_WRITE).expect_err("a deallocated PD").errno(), libc::EINVAL);
}

/// A CQ with a completion event handed out and not acknowledged is refused (where
/// ibv_destroy_cq(3) would wait for the acknowledgement); acknowledged, it goes.
#[test]
fn a_cq_with_an_unacknowledged_event_is_busy_until_acknowledged() {
    let p = rc_pair(Access::LOCAL_WRITE);
    let ch = p.ctx.create_comp_channel().unwrap();
    let cq = p.ctx.create_cq(&CqInit::new(8).channel(&ch)).unwrap();
    let qp = p.pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap())).unwrap();
    let sender = p.pd.create_qp(&QpInit::new(QpType::Rc, &p.cq_a, cap())).unwrap();
    let route = path(&p.ctx);
    connect(&qp, route, sender.qp_num(), Access::LOCAL_WRITE);
    connect(&sender, route, qp.qp_num(), Access::LOCAL_WRITE);
    let mr = p.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    cq.req_notify(false).unwrap();
    qp.post_recv(&[RecvWr::new(1, &[mr.sge(0, 8).unwrap()])]).unwrap();
    sender.post_send(&[SendWr::send(2, &[mr.sge(8, 8).unwrap()]).signaled()]).unwrap();
    assert!(readable(&ch), "the armed CQ's event arrives");
    let ev = ch.get_cq_event().expect("get_cq_event");
    assert_eq!(one(&cq).wr_id(), 1);
    qp.destroy().expect("destroy_qp");
    assert_eq!(cq.destroy().expect_err("an event is unacknowledged").errno(), libc::EBUSY);
    ev.ack();
    cq.destroy().expect("destroy_cq once acknowledged");
    ch.destroy().expect("destroy_comp_channel");
}

#[test]
fn what_the_backend_does_not_carry_is_eopnotsupp() {
    let p = rc_pair(remote_access());
    let err = p.a.post_send(&[SendWr::local_inv(1, 0x1234)]).expect_err("LOCAL_INV");
    assert_eq!((err.index, err.error.errno()), (0, libc::EOPNOTSUPP));
    let err = p.pd.create_qp(&QpInit::new(QpType::XrcSend, &p.cq_a, cap())).expect_err("XRC");
    assert_eq!(err.errno(), libc::EOPNOTSUPP);
}

/// The public types over the backend: a device of `devices_of(Backend::RdmaCore)` opens
/// through libibverbs, and what it returns is the provider's (here the drop-in's).
#[test]
fn the_public_types_open_a_libibverbs_device_and_create_in_it() {
    use rverbs::Backend;
    let devs = rverbs::devices_of(Backend::RdmaCore).expect("libibverbs loads");
    let dev = *devs.first().expect("libibverbs lists a device");
    assert_eq!(dev.backend(), Backend::RdmaCore);
    assert_eq!(dev.guid(), devices().unwrap()[0].guid(), "the same device as the backend lists");
    assert_eq!(rverbs::device_by_name("no-such-device").expect_err("unknown").errno(), libc::EINVAL);
    assert!(dev.endpoint_dir().is_err_and(|e| e.errno() == libc::EOPNOTSUPP), "no endpoint of the soft device");
    let ctx = dev.open().expect("ibv_open_device");
    assert_eq!((ctx.backend(), ctx.device_name()), (Backend::RdmaCore, dev.name()));
    assert_eq!(ctx.query_device().node_guid, dev.guid());
    let port = ctx.query_port(PORT).expect("query_port");
    assert!(ctx.query_port(0).is_err(), "port 0 does not exist");
    // ibv_query_gid_ex reads the same table as ibv_query_gid.
    let table = ctx.query_gid_table();
    assert!(!table.is_empty() && table.len() <= port.gid_tbl_len as usize);
    for e in &table {
        assert_eq!(ctx.query_gid(PORT, e.index).expect("query_gid"), e.gid);
    }
    let lo = ctx.gid_entry_of(Ipv4Addr::LOCALHOST.into()).expect("the drop-in's table has 127.0.0.1");
    assert_eq!((lo.gid, lo.gid_type), (Gid::from_ipv4(Ipv4Addr::LOCALHOST), rverbs::GidType::RoceV2));
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    assert_eq!(pd.context().backend(), Backend::RdmaCore);
    let attr = path_of(lo);
    let ah = rverbs::Ah::new(&pd, &attr).expect("ibv_create_ah");
    assert_eq!(ah.attr(), attr);
    // Verbs of the soft device the backend does not carry are EOPNOTSUPP, not a panic.
    assert_eq!(ctx.get_async_event().expect_err("async events").errno(), libc::EOPNOTSUPP);
    assert_eq!(ctx.alloc_td().expect_err("thread domains").errno(), libc::EOPNOTSUPP);
    assert_eq!(pd.dealloc().expect_err("the address handle uses it").errno(), libc::EBUSY);
    // CQs and completion channels.
    let ch = ctx.create_comp_channel().expect("ibv_create_comp_channel");
    let cq = ctx.create_cq(&rverbs::CqInit::new(8).channel(&ch).cq_context(0xfeed)).expect("ibv_create_cq");
    assert!(cq.cqe() >= 8);
    assert_eq!((cq.cq_context(), cq.context().backend()), (0xfeed, Backend::RdmaCore));
    assert!(cq.same_as(&cq.clone()) && !cq.same_as(&ctx.create_cq(&rverbs::CqInit::new(8)).unwrap()));
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc).expect("ibv_poll_cq"), 0);
    cq.req_notify(false).expect("ibv_req_notify_cq");
    assert!(!readable_now(ch.fd().as_raw_fd()), "no completion, no event");
    cq.set_cookie(7);
    assert_eq!(cq.clone().cookie(), 7, "every handle reads the same word");
    let soft = rverbs::devices_of(Backend::Soft).unwrap()[0].open().unwrap();
    let soft_ch = soft.create_comp_channel().unwrap();
    let err = ctx.create_cq(&rverbs::CqInit::new(8).channel(&soft_ch)).expect_err("a soft channel");
    assert_eq!(err.errno(), libc::EINVAL);
    let err = ctx.create_cq(&rverbs::CqInit::new(8).wc_flags(rverbs::WcExFlags::COMPLETION_TIMESTAMP)).expect_err("extended");
    assert_eq!(err.errno(), libc::EOPNOTSUPP);
    assert_eq!(cq.resize(16).expect_err("resize").errno(), libc::EOPNOTSUPP);
    assert_eq!(cq.start_poll().expect_err("extended polling").errno(), libc::EOPNOTSUPP);
    assert_eq!(ch.destroy().expect_err("a CQ uses it").errno(), libc::EBUSY);
    cq.destroy().expect("ibv_destroy_cq");
    ch.destroy().expect("ibv_destroy_comp_channel");
    ah.destroy().expect("ibv_destroy_ah");
    pd.dealloc().expect("ibv_dealloc_pd");
}

fn path_of(e: rverbs::GidEntry) -> AhAttr {
    let index = u8::try_from(e.index).expect("a small GID index");
    AhAttr {
        grh: Some(GlobalRoute { dgid: e.gid, sgid_index: index, hop_limit: 64, ..GlobalRoute::default() }),
        port_num: PORT,
        ..AhAttr::default()
    }
}
