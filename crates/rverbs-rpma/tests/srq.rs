//! Shared receive queues (rpma_srq_new(3), rpma_srq_recv(3), rpma_srq_get_rcq(3),
//! rpma_conn_cfg_set_srq(3)) and the rules of their use with connections.

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

/// rpma_srq_cfg_new(3): librpma's defaults, and the setters.
#[test]
fn srq_cfg_defaults() {
    let c = SrqCfg::new();
    assert_eq!((c.rq_size(), c.rcq_size()), (100, 100));
    let mut c = SrqCfg::new();
    c.set_rq_size(7).set_rcq_size(0);
    assert_eq!((c.rq_size(), c.rcq_size()), (7, 0));
}

/// The receive CQ exists unless `rcq_size` is 0; a configuration names the queue it
/// was given.
#[test]
fn srq_rcq_and_conn_cfg() {
    let (speer, _) = peers();
    let with = Srq::new(&speer, None).unwrap();
    assert!(with.get_rcq().is_some());
    let without = Srq::new(&speer, Some(SrqCfg::new().set_rcq_size(0))).unwrap();
    assert!(without.get_rcq().is_none());
    let mut cfg = ConnCfg::new();
    assert!(cfg.srq().is_none());
    cfg.set_srq(Some(&with));
    assert_eq!(cfg.srq(), Some(&with));
    assert_ne!(cfg.srq(), Some(&without));
    cfg.set_srq(None);
    assert!(cfg.srq().is_none());
    assert_eq!(Srq::new(&speer, Some(SrqCfg::new().set_rq_size(0))).err().map(|e| e.code()), Some(Error::Provider(0).code()));
    with.delete().unwrap();
    without.delete().unwrap();
}

/// docs/rpma-rdmacm.md §1.3: a shared completion channel together with an SRQ that has its
/// own receive CQ is `Inval` when the connection request is created, on both sides (the
/// passive request is rejected); with an SRQ without a receive CQ it is allowed.
#[test]
fn shared_channel_with_srq_rcq_is_inval() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let srq = Srq::new(&cpeer, None).unwrap();
        let mut cfg = ConnCfg::new();
        cfg.set_compl_channel(true).set_srq(Some(&srq));
        let ep = Endpoint::listen(&speer, host(), 0).unwrap();
        let port = ep.local_addr().unwrap().port();
        assert_eq!(ConnReq::new(&cpeer, host(), port, Some(&cfg)).err(), Some(Error::Inval));

        // Passive: the request fails and is rejected.
        let ssrq = Srq::new(&speer, None).unwrap();
        let mut scfg = ConnCfg::new();
        scfg.set_compl_channel(true).set_srq(Some(&ssrq));
        let client = ConnReq::new(&cpeer, host(), port, None).unwrap().connect(None).unwrap();
        assert_eq!(ep.next_conn_req_timeout(Some(&scfg), WAIT).err(), Some(Error::Inval));
        assert_eq!(client.next_event_timeout(WAIT).unwrap(), ConnEvent::Rejected);
        drop(client);

        // Without the SRQ's own receive CQ the channel may be shared.
        let plain = Srq::new(&cpeer, Some(SrqCfg::new().set_rcq_size(0))).unwrap();
        cfg.set_srq(Some(&plain)).set_rcq_size(4);
        let req = ConnReq::new(&cpeer, host(), port, Some(&cfg)).unwrap();
        drop(req);
    });
}

/// Two connections take their receives from one SRQ whose receive CQ gets them all:
/// each completion's `qp_num` is the local QP of the connection the message came
/// through (librpma 08srq compares it with rpma_conn_get_qp_num(3)); the connections
/// have no receive CQ of their own (even with `rcq_size` set) and their main CQs get
/// no receives; rpma_recv(3) on such a connection fails; the SRQ cannot be deleted
/// while a connection uses it.
#[test]
fn srq_rcq_collects_receives_of_all_connections() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let srq = Srq::new(&speer, None).unwrap();
        let mut scfg = ConnCfg::new();
        scfg.set_srq(Some(&srq)).set_rcq_size(5);
        let mr = MrLocal::new(&speer, 64, Usage::RECV).unwrap();
        for i in 0..4 {
            srq.recv(&mr, i * 8, 8, 100 + i as u64).unwrap();
        }
        assert_eq!(srq.recv(None, 0, 8, 0), Err(Error::Inval));
        let p1 = pair_with(speer.clone(), cpeer.clone(), Some(&scfg), None, |_| {}, None, None);
        let p2 = pair_with(speer, cpeer, Some(&scfg), None, |_| {}, None, None);
        assert!(p1.server.get_rcq().is_none() && p2.server.get_rcq().is_none());
        assert!(matches!(p1.server.recv(&mr, 0, 8, 0), Err(Error::Provider(_))));
        assert_ne!(p1.server.qp_num(), p2.server.qp_num());

        let src = MrLocal::new(&p1.cpeer, 8, Usage::SEND).unwrap();
        let rcq = srq.get_rcq().unwrap();
        for (p, word) in [(&p1, 1u64), (&p2, 2), (&p1, 3)] {
            src.write(0, &word.to_ne_bytes()).unwrap();
            p.client.send(&src, 0, 8, CompletionFlags::Always, 0).unwrap();
            assert!(next_wc(p.client.get_cq()).is_success());
            rcq.wait_timeout(WAIT).unwrap();
            let wc = next_wc(rcq);
            assert!(wc.is_success(), "{wc:?}");
            assert_eq!(wc.opcode(), Some(WcOpcode::Recv));
            assert_eq!(wc.byte_len(), Some(8));
            assert_eq!(wc.qp_num(), p.server.qp_num());
            let at = (wc.wr_id() - 100) as usize * 8;
            assert_eq!(mr.as_verbs().read_u64(at).unwrap(), word);
        }
        assert_empty(rcq);
        assert_empty(p1.server.get_cq());
        assert_empty(p2.server.get_cq());

        assert_eq!(srq.clone().delete(), Err(Error::Provider(libc::EBUSY)));
        close(p1);
        close(p2);
        drop(scfg);
        srq.delete().unwrap();
    });
}

/// Without its own receive CQ the SRQ's receives complete to each connection's
/// receive CQ, or to its main CQ when it has none.
#[test]
fn srq_without_rcq_completes_to_the_connection() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let srq = Srq::new(&speer, Some(SrqCfg::new().set_rcq_size(0))).unwrap();
        let mr = MrLocal::new(&speer, 16, Usage::RECV).unwrap();
        srq.recv(&mr, 0, 8, 1).unwrap();
        srq.recv(&mr, 8, 8, 2).unwrap();
        let mut main_cfg = ConnCfg::new();
        main_cfg.set_srq(Some(&srq));
        let mut rcq_cfg = main_cfg.clone();
        rcq_cfg.set_rcq_size(3);
        let pm = pair_with(speer.clone(), cpeer.clone(), Some(&main_cfg), None, |_| {}, None, None);
        let pr = pair_with(speer, cpeer, Some(&rcq_cfg), None, |_| {}, None, None);
        assert!(pm.server.get_rcq().is_none());
        for (p, cq) in [(&pm, pm.server.get_cq()), (&pr, pr.server.get_rcq().unwrap())] {
            p.client.send(None, 0, 0, CompletionFlags::OnError, 0).unwrap();
            let wc = next_wc(cq);
            assert!(wc.is_success(), "{wc:?}");
            assert_eq!(wc.opcode(), Some(WcOpcode::Recv));
            assert_eq!(wc.qp_num(), p.server.qp_num());
        }
        assert_empty(pr.server.get_cq());
        close(pm);
        close(pr);
        drop((main_cfg, rcq_cfg));
        srq.delete().unwrap();
    });
}
