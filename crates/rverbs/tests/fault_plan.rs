//! The fault plan of the verbs from Rust (docs/fault-injection.md): a plan installed with
//! `fault_plan::install` makes the verbs it names fail with their errno, makes chosen send
//! work requests complete with a chosen status (the QP then goes where that status sends
//! it), and every injection comes back as a value. The plan is process-wide: the tests
//! take turns.
mod common;
use common::*;
use rverbs::*;
use rverbs_proto::verb_fault::{Effect, Errno, Verb};

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
