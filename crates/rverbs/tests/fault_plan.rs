//! The fault plan of the verbs from Rust (docs/fault-injection.md): a plan installed with
//! `fault_plan::install` makes the verbs it names fail with their errno, makes chosen send
//! work requests complete with a chosen status (the QP then goes where that status sends
//! it), and every injection comes back as a value. The plan is process-wide: the tests
//! take turns.
mod common;
use common::*;
use rverbs::*;
use rverbs_proto::verb_fault::{Effect, Errno, Event, Verb};

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn: no other test of the binary runs its verbs meanwhile (under `cargo
/// test` they share the process, and so the plan).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` with `spec` installed, and the plan switched off after.
fn with_plan<T>(spec: &str, f: impl FnOnce() -> T) -> T {
    fault_plan::install(VerbPlan::parse(spec).unwrap());
    let _ = fault_plan::take_injected();
    let out = f();
    fault_plan::install(VerbPlan::default());
    out
}

#[test]
fn a_creating_verb_fails_on_the_call_the_plan_names_with_its_errno() {
    let _turn = turn();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let got = with_plan("fail=reg_mr:ENOMEM:nth=2", || {
        let first = pd.alloc_mr(4096, Access::LOCAL_WRITE);
        let second = pd.alloc_mr(4096, Access::LOCAL_WRITE);
        let third = pd.alloc_mr(4096, Access::LOCAL_WRITE);
        (first.is_ok(), second.map(drop), third.is_ok(), fault_plan::take_injected())
    });
    assert!(got.0 && got.2, "only the second registration fails");
    let e = got.1.unwrap_err();
    assert_eq!(e.errno(), libc::ENOMEM);
    assert!(e.to_string().contains("fail=reg_mr:ENOMEM:nth=2"), "{e}");
    assert_eq!(got.3.len(), 1);
    assert_eq!((got.3[0].effect, got.3[0].call), (Effect::Fail(Verb::RegMr, Errno::Enomem), 2));
    // The plan is off again: registrations succeed, nothing is recorded.
    pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    assert!(fault_plan::take_injected().is_empty());
}

#[test]
fn every_creating_verb_can_be_made_to_fail() {
    let _turn = turn();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
    with_plan("fail=alloc_pd:ENOMEM,fail=create_cq:EINVAL,fail=create_qp:ENOMEM,fail=create_srq:ENOMEM,fail=create_ah:EINVAL", || {
        assert_eq!(ctx.alloc_pd().unwrap_err().errno(), libc::ENOMEM);
        assert_eq!(ctx.create_cq(&CqInit::new(16)).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap_err().errno(), libc::ENOMEM);
        let srq = SrqInit { max_wr: 16, max_sge: 1, srq_limit: 0, srq_context: 0 };
        assert_eq!(pd.create_srq(&srq).unwrap_err().errno(), libc::ENOMEM);
        assert_eq!(Ah::new(&pd, &av(&ctx)).unwrap_err().errno(), libc::EINVAL);
        let verbs: Vec<_> = fault_plan::take_injected().iter().map(|i| i.effect).collect();
        assert_eq!(verbs.len(), 5, "{verbs:?}");
    });
}

#[test]
fn a_refused_post_names_its_request_and_keeps_the_ones_before_it() {
    let _turn = turn();
    let (a, b) = pair(QpType::Rc);
    for i in 0..3 {
        post_recv(&b, 100 + i, 0, 64);
    }
    let sge = [a.mr.sge(0, 8).unwrap()];
    let wrs = [SendWr::send(1, &sge).signaled(), SendWr::send(2, &sge).signaled(), SendWr::send(3, &sge).signaled()];
    let err = with_plan("fail=post_send:ENOMEM:wr_id=2", || a.qp.post_send(&wrs).unwrap_err());
    assert_eq!((err.index, err.error.errno()), (1, libc::ENOMEM));
    assert_eq!(poll_one(&a.cq).wr_id(), 1, "the request before it was posted and ran");
    assert_eq!(poll_one(&b.cq).wr_id(), 100);
    assert_empty(&a.cq);
    assert_empty(&b.cq);
    // The QP is untouched: the next post goes through.
    a.qp.post_send(&wrs[1..2]).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id(), 2);
}

#[test]
fn a_chosen_send_completes_with_the_chosen_status_and_the_qp_fails_as_it_would() {
    let _turn = turn();
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let qpn = a.qp.qp_num();
    let wrs = [SendWr::send(1, &sge).signaled(), SendWr::send(2, &sge).signaled(), SendWr::send(3, &sge).signaled()];
    let spec = format!("wc=RETRY_EXC_ERR:qp={qpn:#x}:nth=2");
    let injected = with_plan(&spec, || {
        a.qp.post_send(&wrs).unwrap();
        fault_plan::take_injected()
    });
    let first = poll_one(&a.cq);
    assert_eq!((first.wr_id(), first.status()), (1, WcStatus::Success));
    let second = poll_one(&a.cq);
    assert_eq!((second.wr_id(), second.status(), second.vendor_err()), (2, WcStatus::RetryExcErr, vendor_err::INJECTED));
    let third = poll_one(&a.cq);
    assert_eq!((third.wr_id(), third.status()), (3, WcStatus::WrFlushErr));
    assert_eq!(a.qp.state(), QpState::Err);
    // The responder saw the first request only: the injected one was never sent.
    assert_eq!(poll_one(&b.cq).wr_id(), 100);
    assert_empty(&b.cq);
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].qp, injected[0].wr_id), (Some(qpn), Some(2)));
}

#[test]
fn a_uc_send_failed_by_the_plan_stops_only_the_send_queue() {
    let _turn = turn();
    let (a, b) = pair(QpType::Uc);
    post_recv(&b, 100, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    with_plan("wc=LOC_PROT_ERR", || a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap());
    let wc = poll_one(&a.cq);
    assert_eq!((wc.status(), wc.vendor_err()), (WcStatus::LocProtErr, vendor_err::INJECTED));
    assert_eq!(a.qp.state(), QpState::Sqe, "UC send errors stop the send queue (SQE)");
}

#[test]
fn probabilistic_plans_replay_from_their_seed() {
    let _turn = turn();
    let run = || {
        with_plan("seed=42,fail=reg_mr:ENOMEM:p=40%", || {
            let ctx = open();
            let pd = ctx.alloc_pd().unwrap();
            (0..40).map(|_| pd.alloc_mr(4096, Access::LOCAL_WRITE).is_err()).collect::<Vec<_>>()
        })
    };
    let (one, two) = (run(), run());
    assert_eq!(one, two, "the same plan and seed fail the same calls");
    assert!(one.iter().any(|f| *f) && one.iter().any(|f| !*f), "{one:?}");
}

fn nonblocking(ctx: &Context) {
    rustix::io::ioctl_fionbio(ctx.async_fd(), true).unwrap();
}

#[track_caller]
fn next_event(ctx: &Context) -> AsyncEvent {
    match ctx.get_async_event() {
        Ok(ev) => ev,
        Err(e) => panic!("no asynchronous event: {e}"),
    }
}

#[test]
fn an_injected_qp_fatal_puts_the_qp_in_err_flushes_it_and_names_it() {
    let _turn = turn();
    let (a, b) = pair(QpType::Rc);
    nonblocking(&a.ctx);
    post_recv(&a, 200, 0, 64);
    post_recv(&a, 201, 0, 64);
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let qpn = a.qp.qp_num();
    let injected = with_plan(&format!("event=QP_FATAL:qp={qpn:#x}:nth=2"), || {
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        assert!(matches!(a.ctx.get_async_event(), Err(Error::WouldBlock)), "not on the first send");
        a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
        fault_plan::take_injected()
    });
    let ev = next_event(&a.ctx);
    assert_eq!(ev.event_type(), EventType::QpFatal);
    assert!(matches!(ev.element(), AsyncElement::Qp(q) if q.qp_num() == qpn), "{:?}", ev.element());
    drop(ev);
    assert!(matches!(a.ctx.get_async_event(), Err(Error::WouldBlock)), "one event");
    assert_eq!(a.qp.state(), QpState::Err);
    // The verb itself succeeded (both sends ran); the receives outstanding on the QP flush.
    let mut got: Vec<_> = (0..4).map(|_| poll_one(&a.cq)).map(|w| (w.wr_id(), w.status())).collect();
    got.sort_by_key(|w| w.0);
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success), (200, WcStatus::WrFlushErr), (201, WcStatus::WrFlushErr)]);
    assert_eq!((poll_one(&b.cq).wr_id(), poll_one(&b.cq).wr_id()), (100, 101));
    // Later posts flush too (the QP stays in ERR).
    a.qp.post_send(&[SendWr::send(3, &sge).signaled()]).unwrap();
    let w = poll_one(&a.cq);
    assert_eq!((w.wr_id(), w.status()), (3, WcStatus::WrFlushErr));
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].effect, injected[0].call, injected[0].qp, injected[0].wr_id), (Effect::Raise(Event::QpFatal, Verb::PostSend), 2, Some(qpn), Some(2)));
}

#[test]
fn an_injected_access_error_after_modify_qp_names_the_qp() {
    let _turn = turn();
    let a = side(QpType::Rc);
    nonblocking(&a.ctx);
    let qpn = a.qp.qp_num();
    with_plan("event=QP_ACCESS_ERR:on=modify_qp:nth=1", || to_init(&a.qp, ALL_ACCESS));
    let ev = next_event(&a.ctx);
    assert_eq!(ev.event_type(), EventType::QpAccessErr);
    assert!(matches!(ev.element(), AsyncElement::Qp(q) if q.qp_num() == qpn));
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn an_injected_cq_error_fails_the_cq_as_an_overrun_does() {
    let _turn = turn();
    let (a, b) = pair(QpType::Rc);
    nonblocking(&a.ctx);
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let injected = with_plan("event=CQ_ERR:nth=1", || {
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        fault_plan::take_injected()
    });
    assert_eq!(injected.len(), 1);
    let ev = next_event(&a.ctx);
    assert_eq!(ev.event_type(), EventType::CqErr);
    assert!(matches!(ev.element(), AsyncElement::Cq(_)));
    drop(ev);
    assert!(a.cq.is_errored());
    let mut wc = [Wc::default(); 4];
    assert!(matches!(a.cq.poll(&mut wc), Err(Error::CqOverrun)), "polling a CQ in error fails");
    // The next completion the CQ cannot take is lost, and its QP enters ERR (QP_FATAL).
    a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    let ev = next_event(&a.ctx);
    assert_eq!(ev.event_type(), EventType::QpFatal);
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn an_injected_srq_limit_is_raised_only_on_an_armed_srq_and_disarms_it() {
    let _turn = turn();
    let ctx = open();
    nonblocking(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let srq = pd.create_srq(&SrqInit { max_wr: 16, max_sge: 1, srq_limit: 0, srq_context: 0 }).unwrap();
    let sge = [mr.sge(0, 64).unwrap()];
    let injected = with_plan("event=SRQ_LIMIT_REACHED:nth=2", || {
        // Not armed: the calls do not match (a device never raises it then).
        srq.post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)]).unwrap();
        assert!(matches!(ctx.get_async_event(), Err(Error::WouldBlock)));
        srq.modify(&SrqAttr { srq_limit: 1, ..SrqAttr::default() }, SrqAttrMask::LIMIT).unwrap();
        srq.post_recv(&[RecvWr::new(3, &sge)]).unwrap();
        assert!(matches!(ctx.get_async_event(), Err(Error::WouldBlock)), "the first armed call is not the 2nd");
        srq.post_recv(&[RecvWr::new(4, &sge)]).unwrap();
        fault_plan::take_injected()
    });
    let ev = next_event(&ctx);
    assert_eq!(ev.event_type(), EventType::SrqLimitReached);
    assert!(matches!(ev.element(), AsyncElement::Srq(_)));
    drop(ev);
    assert_eq!(srq.query().srq_limit, 0, "disarmed, as the device does");
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].call, injected[0].wr_id), (2, Some(4)));
}

#[track_caller]
fn assert_no_event(ctx: &Context) {
    match ctx.get_async_event() {
        Err(Error::WouldBlock) => {}
        Ok(ev) => panic!("unexpected event {:?} on {:?}", ev.event_type(), ev.element()),
        Err(e) => panic!("get_async_event failed: {e}"),
    }
}

#[track_caller]
fn assert_port_event(ctx: &Context, want: EventType) {
    let ev = next_event(ctx);
    assert_eq!(ev.event_type(), want);
    assert!(matches!(ev.element(), AsyncElement::Port(1)), "{:?}", ev.element());
}

#[test]
fn an_injected_port_err_takes_port_1_down_for_every_context_and_an_rc_send_runs_out_of_retries() {
    let _turn = turn();
    let path = Path { timeout: 1, retry_cnt: 1, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 256, CAP);
    let other = open();
    for ctx in [&a.ctx, &b.ctx, &other] {
        nonblocking(ctx);
    }
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let qpn = a.qp.qp_num();
    let before = a.ctx.counters();
    let injected = with_plan(&format!("event=PORT_ERR:qp={qpn:#x}:nth=1"), || {
        assert_eq!(a.ctx.query_port(1).unwrap().state, PortState::Active);
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        // The send that raised it ran; then the port is down, for every context.
        let w = poll_one(&a.cq);
        assert_eq!((w.wr_id(), w.status()), (1, WcStatus::Success));
        assert_eq!(poll_one(&b.cq).wr_id(), 100);
        for ctx in [&a.ctx, &b.ctx, &other] {
            let port = ctx.query_port(1).unwrap();
            assert_eq!((port.state, port.phys_state), (PortState::Down, 2), "DOWN, physical state POLLING");
            assert_port_event(ctx, EventType::PortErr);
            assert_no_event(ctx);
        }
        // A send while the port is down never leaves: no answer, retries, RETRY_EXC_ERR.
        a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
        let w = poll_one(&a.cq);
        assert_eq!((w.wr_id(), w.status()), (2, WcStatus::RetryExcErr));
        assert_eq!(a.qp.state(), QpState::Err);
        assert_empty(&b.cq);
        fault_plan::take_injected()
    });
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].effect, Effect::Raise(Event::PortErr, Verb::PostSend));
    // docs/device.md, "Hardware counters": the port went down once; the one SEND that
    // completed, the one retry (retry_cnt 1) and the request that ran out of them.
    let after = a.ctx.counters();
    let moved = |f: fn(&Counters) -> u64| f(&after) - f(&before);
    assert_eq!(moved(|c| c.link_downed), 1);
    assert_eq!(moved(|c| c.rdma_sends), 1);
    assert_eq!(moved(|c| c.completer_retry_err), 1);
    assert_eq!(moved(|c| c.retry_exceeded_err), 1);
}

#[test]
fn while_the_port_is_down_a_uc_send_completes_and_nothing_arrives() {
    let _turn = turn();
    let (a, b) = pair(QpType::Uc);
    nonblocking(&a.ctx);
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    with_plan("event=PORT_ERR:nth=1", || {
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        assert_port_event(&a.ctx, EventType::PortErr);
        assert_eq!(poll_one(&b.cq).wr_id(), 100, "the send that raised it arrived");
        a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
        let w = poll_one(&a.cq);
        assert_eq!((w.wr_id(), w.status()), (1, WcStatus::Success));
        let w = poll_one(&a.cq);
        assert_eq!((w.wr_id(), w.status()), (2, WcStatus::Success), "UC completes at transmit");
        // Same-host delivery happens inside post_send: had it left, it would be here.
        assert_empty(&b.cq);
    });
}

#[test]
fn port_active_brings_the_port_back_and_a_send_retrying_meanwhile_succeeds() {
    let _turn = turn();
    // ACK timeout 268 ms, 7 retries: the retry budget outlasts the test's steps.
    let path = Path { timeout: 16, retry_cnt: 7, ..PATH };
    let (a, b) = pair_with(QpType::Rc, &path, 256, CAP);
    nonblocking(&a.ctx);
    nonblocking(&b.ctx);
    for i in 0..3 {
        post_recv(&b, 100 + i, 0, 64);
    }
    let sge = [a.mr.sge(0, 8).unwrap()];
    let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
    let spec = format!("event=PORT_ERR:qp={qa:#x}:nth=1,event=PORT_ACTIVE:on=post_recv:qp={qb:#x}:nth=1");
    with_plan(&spec, || {
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).wr_id(), 1);
        assert_port_event(&a.ctx, EventType::PortErr);
        a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
        // Not delivered: the same host would have answered inside post_send.
        assert_empty(&a.cq);
        assert_eq!(poll_one(&b.cq).wr_id(), 100);
        assert_empty(&b.cq);
        // A receive posted on B brings the port up.
        post_recv(&b, 103, 0, 64);
        assert_port_event(&a.ctx, EventType::PortActive);
        assert_port_event(&b.ctx, EventType::PortErr);
        assert_port_event(&b.ctx, EventType::PortActive);
        assert_eq!(a.ctx.query_port(1).unwrap().state, PortState::Active);
        assert_eq!(a.ctx.query_port(1).unwrap().phys_state, 5);
        // The request still retrying gets through at its next retry.
        let w = poll_one(&a.cq);
        assert_eq!((w.wr_id(), w.status()), (2, WcStatus::Success));
        assert_eq!(poll_one(&b.cq).wr_id(), 101);
        // And a new one flows at once.
        a.qp.post_send(&[SendWr::send(3, &sge).signaled()]).unwrap();
        let w = poll_one(&a.cq);
        assert_eq!((w.wr_id(), w.status()), (3, WcStatus::Success));
        assert_eq!(poll_one(&b.cq).wr_id(), 102);
        // A second PORT_ACTIVE on an active port changes nothing and raises nothing.
        assert_no_event(&a.ctx);
    });
}

#[test]
fn an_injected_device_fatal_reaches_every_context_flushes_every_qp_and_fails_later_verbs_with_eio() {
    let _turn = turn();
    let (a, b) = pair(QpType::Rc);
    nonblocking(&a.ctx);
    nonblocking(&b.ctx);
    post_recv(&a, 200, 0, 64);
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let qpn = a.qp.qp_num();
    let injected = with_plan(&format!("event=DEVICE_FATAL:qp={qpn:#x}:nth=1"), || {
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        for ctx in [&a.ctx, &b.ctx] {
            let ev = next_event(ctx);
            assert_eq!(ev.event_type(), EventType::DeviceFatal);
            assert!(matches!(ev.element(), AsyncElement::Device), "{:?}", ev.element());
            drop(ev);
            assert_no_event(ctx);
        }
        // Every QP of the process is in ERR, and what was outstanding flushed.
        assert_eq!((a.qp.state(), b.qp.state()), (QpState::Err, QpState::Err));
        let mut got: Vec<_> = (0..2).map(|_| poll_one(&a.cq)).map(|w| (w.wr_id(), w.status())).collect();
        got.sort_by_key(|w| w.0);
        assert_eq!(got, [(1, WcStatus::Success), (200, WcStatus::WrFlushErr)]);
        let w = poll_one(&b.cq);
        assert_eq!((w.wr_id(), w.status()), (100, WcStatus::Success));
        let w = poll_one(&b.cq);
        assert_eq!((w.wr_id(), w.status()), (101, WcStatus::WrFlushErr));
        // Creating and posting verbs fail with EIO from now on.
        assert_eq!(a.ctx.alloc_pd().unwrap_err().errno(), libc::EIO);
        assert_eq!(a.ctx.create_cq(&CqInit::new(16)).unwrap_err().errno(), libc::EIO);
        assert_eq!(a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap_err().errno(), libc::EIO);
        assert_eq!(a.pd.create_qp(&QpInit::new(QpType::Rc, &a.cq, CAP)).unwrap_err().errno(), libc::EIO);
        let e = a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (0, libc::EIO));
        let rsge = [b.mr.sge(0, 64).unwrap()];
        assert_eq!(b.qp.post_recv(&[RecvWr::new(102, &rsge)]).unwrap_err().error.errno(), libc::EIO);
        assert_eq!(devices().unwrap()[0].open().unwrap_err().errno(), libc::EIO);
        // So do the creating verbs the plan has no name for.
        assert_eq!(a.ctx.create_comp_channel().unwrap_err().errno(), libc::EIO);
        assert_eq!(Mw::new(&a.pd, 1).unwrap_err().errno(), libc::EIO);
        assert_eq!(a.ctx.open_xrcd(None, 0).unwrap_err().errno(), libc::EIO);
        assert_eq!(a.cq.resize(32).unwrap_err().errno(), libc::EIO);
        assert_eq!(a.mr.rereg(ReregFlags::ACCESS, None, Some(Access::LOCAL_WRITE)).unwrap_err().errno(), libc::EIO);
        assert_eq!(a.ctx.query_port(1).unwrap().state, PortState::Down);
        assert_empty(&a.cq);
        // Clean-up works: the program can destroy everything and exit.
        for s in [&a, &b] {
            s.qp.destroy().unwrap();
            s.mr.dereg().unwrap();
            s.cq.destroy().unwrap();
            s.pd.dealloc().unwrap();
        }
        fault_plan::take_injected()
    });
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].effect, Effect::Raise(Event::DeviceFatal, Verb::PostSend));
}

#[test]
fn a_held_completion_is_polled_after_its_delay_and_later_completions_of_its_cq_wait_behind_it() {
    let _turn = turn();
    // One CQ for both queues of each side (`side`).
    let (a, b) = pair(QpType::Rc);
    post_recv(&a, 300, 0, 64);
    post_recv(&b, 100, 0, 64);
    post_recv(&b, 101, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    let bsge = [b.mr.sge(0, 8).unwrap()];
    let qpn = a.qp.qp_num();
    let delay = std::time::Duration::from_millis(150);
    let start = std::time::Instant::now();
    let injected = with_plan(&format!("wc_delay=150:qp={qpn:#x}:nth=1"), || {
        a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
        // The request ran (same host: inside post_send), its completion is held.
        assert_eq!(poll_one(&b.cq).wr_id(), 100);
        assert_empty(&a.cq);
        // A later send of the QP, and a receive of the same CQ, wait behind it.
        a.qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
        assert_eq!(poll_one(&b.cq).wr_id(), 101);
        b.qp.post_send(&[SendWr::send(50, &bsge).signaled()]).unwrap();
        let w = poll_one(&b.cq);
        assert_eq!((w.wr_id(), w.status()), (50, WcStatus::Success), "other CQs are not held");
        assert_empty(&a.cq);
        fault_plan::take_injected()
    });
    let got: Vec<_> = (0..3).map(|_| poll_one(&a.cq)).map(|w| (w.wr_id(), w.status(), w.opcode())).collect();
    assert!(start.elapsed() >= delay, "polled after {:?}", start.elapsed());
    assert_eq!(
        got,
        [(1, WcStatus::Success, Some(WcOpcode::Send)), (2, WcStatus::Success, Some(WcOpcode::Send)), (300, WcStatus::Success, Some(WcOpcode::Recv))]
    );
    assert_empty(&a.cq);
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].effect, injected[0].wr_id), (Effect::Hold(150), Some(1)));
}

#[test]
fn a_held_completion_that_overruns_its_cq_when_published_fails_its_qp_as_an_overrun_does() {
    let _turn = turn();
    let (a, b) = pair_with(QpType::Rc, &PATH, 4, CAP);
    nonblocking(&a.ctx);
    let room = a.cq.cqe() as u64;
    let sge = [a.mr.sge(0, 8).unwrap()];
    // The CQ is full of completions nobody polled.
    for i in 0..room {
        a.qp.post_send(&[SendWr::write(i, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    }
    let qpn = a.qp.qp_num();
    with_plan(&format!("wc_delay=30:qp={qpn:#x}:nth=1"), || {
        a.qp.post_send(&[SendWr::write(99, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    });
    // When it is published it finds no room: CQ_ERR for the CQ, then QP_FATAL for the QP.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut events = Vec::new();
    while events.len() < 2 {
        match a.ctx.get_async_event() {
            Ok(ev) => {
                events.push(ev.event_type());
                if let AsyncElement::Qp(qp) = ev.element() {
                    assert_eq!(qp.qp_num(), qpn);
                }
            }
            Err(_) => {
                assert!(std::time::Instant::now() < deadline, "events so far: {events:?}");
                std::thread::yield_now();
            }
        }
    }
    assert_eq!(events, [EventType::CqErr, EventType::QpFatal]);
    assert_eq!(a.qp.state(), QpState::Err);
}

/// Waits until `fd` is readable, at most 10 s.
#[track_caller]
fn wait_readable(fd: std::os::fd::BorrowedFd<'_>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 };
    assert_eq!(poll(&mut fds, Some(&ts)).unwrap(), 1, "not readable within 10 s");
}

#[test]
fn a_held_completion_wakes_an_armed_completion_channel_when_it_is_published() {
    let _turn = turn();
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let ch = a.ctx.create_comp_channel().unwrap();
    let cq = a.ctx.create_cq(&CqInit::new(64).channel(&ch)).unwrap();
    let qp = a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let a = Side { cq, qp, ..a };
    connect(&a, &b, &PATH);
    post_recv(&b, 100, 0, 64);
    let sge = [a.mr.sge(0, 8).unwrap()];
    a.cq.req_notify(false).unwrap();
    with_plan("wc_delay=50", || a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap());
    assert_empty(&a.cq);
    // An event-driven program sleeps in the channel: the publication wakes it.
    wait_readable(ch.fd());
    let ev = ch.get_cq_event().unwrap();
    assert!(ev.cq().same_as(&a.cq));
    ev.ack();
    let w = poll_one(&a.cq);
    assert_eq!((w.wr_id(), w.status()), (1, WcStatus::Success));
}
