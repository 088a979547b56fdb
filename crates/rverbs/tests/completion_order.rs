//! The order of completion notifications across the two sides of one request: the
//! requester's send completion is written before the responder's completion channel
//! fires (crates/rverbs/src/rings/deferred_notify.rs). On a NIC the requester completes (on the ACK)
//! long before the responder's application can react to its receive; applications such
//! as librpma's shared-channel examples rely on it. The responder here is woken through
//! its channel and checks that the requester's completion is already in the requester's
//! CQ.

mod common;

use common::*;
use rverbs::*;

#[test]
fn the_requesters_completion_is_written_before_the_responders_channel_fires() {
    for round in 0..200u64 {
        let a = side(QpType::Rc);
        let ctx_b = open();
        let ch = ctx_b.create_comp_channel().unwrap();
        let pd_b = ctx_b.alloc_pd().unwrap();
        let cq_b = ctx_b.create_cq(&CqInit::new(16).channel(&ch)).unwrap();
        let qp_b = pd_b.create_qp(&QpInit::new(QpType::Rc, &cq_b, CAP)).unwrap();
        let mr_b = pd_b.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let b = Side { ctx: ctx_b, pd: pd_b, cq: cq_b, qp: qp_b, mr: mr_b };
        connect(&a, &b, &PATH);
        post_recv(&b, 1, 0, 64);
        b.cq.req_notify(false).unwrap();

        let send_cq = a.cq.clone();
        let waiter = std::thread::spawn(move || {
            let ev = ch.get_cq_event().unwrap();
            // Woken by the receive: the request's own completion must be there already.
            let mut wc = [Wc::default(); 1];
            let n = send_cq.poll(&mut wc).unwrap();
            ev.ack();
            (n, wc[0].wr_id())
        });
        let sge = [a.mr.sge(0, 8).unwrap()];
        a.qp.post_send(&[SendWr::send(round, &sge).signaled()]).unwrap();
        let (n, wr_id) = waiter.join().unwrap();
        assert_eq!((n, wr_id), (1, round), "round {round}: the responder was notified before the send completed");
        assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    }
}
