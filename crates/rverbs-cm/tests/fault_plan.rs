//! The fault plan's rdma_cm items (docs/fault-injection.md): `fail=resolve_addr|
//! resolve_route|connect:ERRNO` make the call end with its error event, as
//! rdma_get_cm_event(3) reports it; `event=DISCONNECTED` disconnects a connection on the
//! Nth call of a verb on its QP (both sides get DISCONNECTED, the QP enters ERR). The plan
//! is process-wide: the tests take turns.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs::*;
use rverbs_cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use rverbs_proto::verb_fault::{Effect, Errno, Event as PlanEvent, Verb};

const CAP: QpCap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Installs `spec` (fresh counts, nothing injected yet); [`off`] switches it off.
fn plan(spec: &str) {
    fault_plan::install(VerbPlan::parse(spec).unwrap());
    let _ = fault_plan::take_injected();
}

fn off() {
    fault_plan::install(VerbPlan::default());
}

struct Verbs {
    pd: Pd,
    cq: Cq,
}

fn verbs() -> Verbs {
    let ctx = devices().unwrap()[0].open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(64)).unwrap();
    Verbs { pd, cq }
}

fn qp(v: &Verbs) -> Qp {
    v.pd.create_qp(&QpInit::new(QpType::Rc, &v.cq, CAP)).unwrap()
}

fn next(ch: &EventChannel) -> Event {
    // Bounded wait: the channel fd must become readable within 10 s.
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(ch.fd(), rustix::event::PollFlags::IN)];
    let ts = rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 };
    let n = rustix::event::poll(&mut fds, Some(&ts)).unwrap();
    assert_eq!(n, 1, "no event within 10 s");
    ch.try_get_event().expect("readable channel has an event")
}

#[track_caller]
fn expect(ch: &EventChannel, kind: EventKind) -> Event {
    let ev = next(ch);
    assert_eq!(ev.kind, kind, "unexpected event {ev:?}");
    ev
}

fn listener(ch: &EventChannel) -> (CmId, SocketAddr) {
    let l = CmId::new(ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    l.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    l.listen(4).unwrap();
    let a = l.src_addr().unwrap();
    (l, a)
}

fn resolved(ch: &EventChannel, dst: SocketAddr) -> CmId {
    let c = CmId::new(ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    c.resolve_addr(None, dst, 2000).unwrap();
    expect(ch, EventKind::AddrResolved);
    c.resolve_route(2000).unwrap();
    expect(ch, EventKind::RouteResolved);
    c
}

fn param() -> ConnParam {
    ConnParam { responder_resources: 1, initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, ..ConnParam::default() }
}

#[test]
fn resolve_addr_failed_by_the_plan_ends_with_addr_error_and_can_be_retried() {
    let _turn = turn();
    let ch = EventChannel::new().unwrap();
    let c = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    plan("fail=resolve_addr:ETIMEDOUT");
    c.resolve_addr(None, "127.0.0.1:7471".parse().unwrap(), 2000).unwrap();
    let ev = expect(&ch, EventKind::AddrError);
    assert_eq!(ev.status, -libc::ETIMEDOUT);
    drop(ev);
    let injected = fault_plan::take_injected();
    off();
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].effect, Effect::Fail(Verb::ResolveAddr, Errno::Etimedout));
    assert!(injected[0].to_string().contains("RDMA_CM_EVENT_ADDR_ERROR"), "{}", injected[0]);
    // The id is as before the call (bound): resolving again works.
    c.resolve_addr(None, "127.0.0.1:7471".parse().unwrap(), 2000).unwrap();
    expect(&ch, EventKind::AddrResolved);
    c.destroy().unwrap();
}

#[test]
fn resolve_route_failed_by_the_plan_ends_with_route_error_etimedout() {
    let _turn = turn();
    let ch = EventChannel::new().unwrap();
    let c = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0).unwrap();
    c.resolve_addr(None, "127.0.0.1:7471".parse().unwrap(), 2000).unwrap();
    expect(&ch, EventKind::AddrResolved);
    plan("fail=rdma_resolve_route:ETIMEDOUT:nth=1");
    c.resolve_route(2000).unwrap();
    let ev = expect(&ch, EventKind::RouteError);
    assert_eq!(ev.status, -libc::ETIMEDOUT, "as the kernel's rdma_cm reports a route timeout");
    drop(ev);
    // Only the first call: the id stayed ADDR_RESOLVED, and the second resolves.
    c.resolve_route(2000).unwrap();
    expect(&ch, EventKind::RouteResolved);
    let injected = fault_plan::take_injected();
    off();
    assert_eq!(injected.iter().map(|i| i.call).collect::<Vec<_>>(), [1]);
    c.destroy().unwrap();
}

#[test]
fn connect_failed_by_the_plan_is_unreachable_and_sends_no_request() {
    let _turn = turn();
    let v = verbs();
    let sch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let (l, addr) = listener(&sch);
    let c = resolved(&cch, addr);
    let q = qp(&v);
    c.attach_qp(q.clone()).unwrap();
    plan("fail=connect:ETIMEDOUT");
    c.connect(&param()).unwrap();
    let ev = expect(&cch, EventKind::Unreachable);
    assert_eq!(ev.status, -libc::ETIMEDOUT);
    drop(ev);
    assert_eq!(q.state(), QpState::Err, "the QP of a failed connect is in ERR");
    assert_eq!(fault_plan::take_injected().len(), 1);
    off();
    // The listener never saw the failed request: the first request it gets is the next.
    let c2 = resolved(&cch, addr);
    let q2 = qp(&v);
    c2.attach_qp(q2.clone()).unwrap();
    c2.connect(&param()).unwrap();
    let ev = expect(&sch, EventKind::ConnectRequest);
    assert_eq!(ev.conn.qp_num, q2.qp_num());
    let child = ev.id.clone();
    drop(ev);
    child.reject(b"").unwrap();
    expect(&cch, EventKind::Rejected);
    for id in [c, c2, child, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn connect_refused_by_the_plan_is_rejected_as_a_consumer_reject() {
    let _turn = turn();
    let v = verbs();
    let sch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let (l, addr) = listener(&sch);
    let c = resolved(&cch, addr);
    let q = qp(&v);
    c.attach_qp(q.clone()).unwrap();
    plan("fail=connect:ECONNREFUSED");
    c.connect(&param()).unwrap();
    let ev = expect(&cch, EventKind::Rejected);
    assert_eq!(ev.status, 28, "IB_CM_REJ_CONSUMER_DEFINED, what rdma_reject(3) sends");
    drop(ev);
    off();
    assert_eq!(q.state(), QpState::Err);
    for id in [c, l] {
        id.destroy().unwrap();
    }
}

#[test]
fn an_injected_disconnect_ends_the_connection_on_both_sides() {
    let _turn = turn();
    let v = verbs();
    let sch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let (l, addr) = listener(&sch);
    let c = resolved(&cch, addr);
    let cqp = qp(&v);
    c.attach_qp(cqp.clone()).unwrap();
    c.connect(&param()).unwrap();
    let ev = expect(&sch, EventKind::ConnectRequest);
    let child = ev.id.clone();
    drop(ev);
    let sqp = qp(&v);
    child.attach_qp(sqp.clone()).unwrap();
    let mr = v.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        sqp.post_recv(&[RecvWr::new(100 + i, &[mr.sge(0, 64).unwrap()])]).unwrap();
    }
    child.accept(Some(&param())).unwrap();
    expect(&cch, EventKind::Established);
    expect(&sch, EventKind::Established);
    let cqpn = cqp.qp_num();
    plan(&format!("event=DISCONNECTED:qp={cqpn:#x}:nth=2"));
    let sge = [mr.sge(0, 8).unwrap()];
    cqp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    assert_eq!(cqp.state(), QpState::Rts, "not on the first send");
    cqp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    // The client disconnected as rdma_disconnect(3) does: the server learns it, and the
    // client does once the server disconnects too (its DREP), as an application does on
    // DISCONNECTED. The client's QP is in ERR.
    expect(&sch, EventKind::Disconnected);
    assert_eq!(cqp.state(), QpState::Err);
    child.disconnect().unwrap();
    assert_eq!(sqp.state(), QpState::Err);
    expect(&cch, EventKind::Disconnected);
    let injected = fault_plan::take_injected();
    off();
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].effect, injected[0].qp, injected[0].call), (Effect::Raise(PlanEvent::Disconnected, Verb::PostSend), Some(cqpn), 2));
    // Both sends ran before (the verb itself succeeded): two sends and two receives.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ok = 0;
    let mut wc = [Wc::default(); 8];
    while ok < 4 {
        assert!(Instant::now() < deadline, "{ok} successful completions within 10 s");
        let n = v.cq.poll(&mut wc).unwrap();
        ok += wc[..n].iter().filter(|w| w.status() == WcStatus::Success).count();
    }
    for id in [c, child, l] {
        id.destroy().unwrap();
    }
}
