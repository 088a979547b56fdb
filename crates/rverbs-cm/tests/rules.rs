//! Every `EINVAL` of the connection manager names the rdma_cm rule it enforces, with the
//! values that broke it: one case per rule, matched by variant (`rverbs_cm::Rule`).

use std::net::SocketAddr;

use rverbs::*;
use rverbs_cm::{
    CmId, CmState, ConnParam, Error, EventChannel, EventKind, JoinFlag, PortSpace, Rule,
};

const CAP: QpCap = QpCap {
    max_send_wr: 4,
    max_recv_wr: 4,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 0,
};

/// The rule of `r`'s `EINVAL`, checking the errno and that the message names the verb.
fn rule<T: std::fmt::Debug>(r: Result<T, Error>, verb: &str) -> Rule {
    let err = r.expect_err("the call must be refused");
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    assert!(err.to_string().starts_with(verb), "{err} names {verb}");
    err.rule().expect("an EINVAL carries its rule")
}

fn next(ch: &EventChannel, kind: EventKind) {
    let mut fds = [rustix::event::PollFd::from_borrowed_fd(
        ch.fd(),
        rustix::event::PollFlags::IN,
    )];
    let ts = rustix::time::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    assert_eq!(
        rustix::event::poll(&mut fds, Some(&ts)).unwrap(),
        1,
        "no event within 10 s"
    );
    let ev = ch.try_get_event().unwrap();
    assert_eq!(ev.kind, kind, "{ev:?}");
}

fn id(ch: &EventChannel, t: QpType) -> CmId {
    let ps = if t == QpType::Ud {
        PortSpace::Udp
    } else {
        PortSpace::Tcp
    };
    CmId::new(ch, ps, t, 0).unwrap()
}

/// An id with its address resolved to this host (it has the device).
fn addr_resolved(ch: &EventChannel, t: QpType) -> CmId {
    let c = id(ch, t);
    c.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 2000)
        .unwrap();
    next(ch, EventKind::AddrResolved);
    c
}

fn route_resolved(ch: &EventChannel, t: QpType) -> CmId {
    let c = addr_resolved(ch, t);
    c.resolve_route(2000).unwrap();
    next(ch, EventKind::RouteResolved);
    c
}

#[test]
fn address_rules() {
    let ch = EventChannel::new().unwrap();
    let gone = id(&ch, QpType::Rc);
    gone.clone().destroy().unwrap();
    assert_eq!(
        rule(gone.bind_addr("127.0.0.1:0".parse().unwrap()), "rdma_cm"),
        Rule::Destroyed
    );

    let b = id(&ch, QpType::Rc);
    b.bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    let again = rule(
        b.bind_addr("127.0.0.1:0".parse().unwrap()),
        "rdma_bind_addr",
    );
    assert_eq!(
        again,
        Rule::AlreadyBound {
            state: CmState::Bound
        }
    );
    assert_eq!(
        rule(b.set_reuseaddr(true), "rdma_set_option"),
        Rule::AlreadyBound {
            state: CmState::Bound
        }
    );
    let bound = b.src_addr().unwrap();
    let dst: SocketAddr = "[::1]:9".parse().unwrap();
    assert_eq!(
        rule(b.resolve_addr(None, dst, 2000), "rdma_resolve_addr"),
        Rule::FamilyMismatch { bound, dst }
    );
    assert_eq!(
        rule(b.resolve_route(2000), "rdma_resolve_route"),
        Rule::ResolveRouteState {
            state: CmState::Bound
        }
    );

    let r = addr_resolved(&ch, QpType::Rc);
    let twice = rule(
        r.resolve_addr(None, "127.0.0.1:9".parse().unwrap(), 2000),
        "rdma_resolve_addr",
    );
    assert_eq!(
        twice,
        Rule::ResolveAddrState {
            state: CmState::AddrResolved
        }
    );
    assert_eq!(
        rule(r.listen(1), "rdma_listen"),
        Rule::NotBound {
            state: CmState::AddrResolved
        }
    );

    b.listen(1).unwrap();
    assert_eq!(rule(b.listen(1), "rdma_listen"), Rule::AlreadyListening);
    for i in [b, r] {
        i.destroy().unwrap();
    }
}

#[test]
fn handshake_rules() {
    let ch = EventChannel::new().unwrap();
    let idle = id(&ch, QpType::Rc);
    let p = ConnParam {
        qp_num: 5,
        ..ConnParam::default()
    };
    assert_eq!(
        rule(idle.connect(&p), "rdma_connect"),
        Rule::RouteNotResolved {
            state: CmState::Idle
        }
    );
    assert_eq!(
        rule(idle.accept(Some(&p)), "rdma_accept"),
        Rule::NoRequest {
            state: CmState::Idle
        }
    );
    assert_eq!(
        rule(idle.reject(b""), "rdma_reject"),
        Rule::NoRequest {
            state: CmState::Idle
        }
    );
    assert_eq!(
        rule(idle.disconnect(), "rdma_disconnect"),
        Rule::NotConnected {
            state: CmState::Idle
        }
    );
    assert_eq!(
        rule(idle.establish(), "rdma_establish"),
        Rule::NoResponse {
            state: CmState::Idle
        }
    );

    let c = route_resolved(&ch, QpType::Rc);
    let long = ConnParam {
        private_data: vec![0; 57],
        ..p.clone()
    };
    assert_eq!(
        rule(c.connect(&long), "rdma_connect"),
        Rule::PrivateDataTooLong { len: 57, max: 56 }
    );
    assert_eq!(
        rule(c.connect(&ConnParam::default()), "rdma_connect"),
        Rule::NoQp
    );
    let max = devices().unwrap()[0]
        .open()
        .unwrap()
        .query_device()
        .max_qp_rd_atom
        .min(255) as u8;
    assert!(
        max < 0xfe,
        "the device's maximum leaves room for a value beyond it"
    );
    let deep = ConnParam {
        responder_resources: max + 1,
        ..p.clone()
    };
    assert_eq!(
        rule(c.connect(&deep), "rdma_connect"),
        Rule::RdmaDepth {
            asked: max + 1,
            max
        }
    );
    // 0xFF is "as many as the device allows", not a value beyond it.
    c.connect(&ConnParam {
        responder_resources: 0xff,
        initiator_depth: 0xff,
        ..p
    })
    .unwrap();
    // Nobody listens on port 9: the request is rejected, and the id is no longer resolved.
    next(&ch, EventKind::Rejected);
    for i in [idle, c] {
        i.destroy().unwrap();
    }
}

#[test]
fn qp_rules() {
    let ctx = devices().unwrap()[0].open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let qp = || pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let ch = EventChannel::new().unwrap();

    let idle = id(&ch, QpType::Rc);
    assert_eq!(rule(idle.attach_qp(qp()), "rdma_create_qp"), Rule::NoDevice);
    assert_eq!(
        rule(idle.init_qp_attr(QpState::Init), "rdma_init_qp_attr"),
        Rule::NoDevice
    );

    let r = addr_resolved(&ch, QpType::Rc);
    r.attach_qp(qp()).unwrap();
    assert_eq!(rule(r.attach_qp(qp()), "rdma_create_qp"), Rule::QpExists);
    for state in [QpState::Rtr, QpState::Rts] {
        assert_eq!(
            rule(r.init_qp_attr(state), "rdma_init_qp_attr"),
            Rule::NotNegotiated { state }
        );
    }
    for state in [QpState::Sqd, QpState::Sqe] {
        assert_eq!(
            rule(r.init_qp_attr(state), "rdma_init_qp_attr"),
            Rule::NoAttrs { state }
        );
    }
    r.init_qp_attr(QpState::Init).unwrap();
    for i in [idle, r] {
        i.destroy().unwrap();
    }
}

#[test]
fn multicast_rules() {
    let ch = EventChannel::new().unwrap();
    let group: SocketAddr = "239.1.2.3:0".parse().unwrap();
    let idle = id(&ch, QpType::Ud);
    let join = |c: &CmId, a| c.join_multicast(a, JoinFlag::FullMember, 0);
    assert_eq!(
        rule(join(&idle, group), "rdma_join_multicast"),
        Rule::JoinState {
            state: CmState::Idle
        }
    );
    let rc = addr_resolved(&ch, QpType::Rc);
    assert_eq!(rule(join(&rc, group), "rdma_join_multicast"), Rule::NotUd);
    let ud = addr_resolved(&ch, QpType::Ud);
    assert_eq!(
        rule(
            join(&ud, "0.0.0.0:0".parse().unwrap()),
            "rdma_join_multicast"
        ),
        Rule::WildcardGroup
    );
    for i in [idle, rc, ud] {
        i.destroy().unwrap();
    }
}

#[test]
fn connection_errors_name_the_step_the_peer_and_what_happened() {
    let ctx = devices().unwrap()[0].open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let dst: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let err = rverbs_cm::connect(dst, qp, b"", std::time::Duration::from_secs(5)).err().expect("nobody listens on port 9");
    assert_eq!(err.errno(), libc::ECONNREFUSED);
    assert!(
        matches!(err, Error::Handshake { step: "connecting to", peer: rverbs_cm::Peer(Some(p)), event: EventKind::Rejected, status: 8 } if p == dst),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("127.0.0.1:9") && text.contains("nobody listens"), "{text}");

    let l = rverbs_cm::Listener::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let err = l.next_request(std::time::Duration::from_millis(20)).err().expect("no request comes");
    assert_eq!(err.errno(), libc::ETIMEDOUT);
    assert!(matches!(err, Error::TimedOut { step: "listening on", awaited: EventKind::ConnectRequest, .. }), "{err:?}");
    assert!(err.to_string().contains(&l.local_addr().unwrap().to_string()), "{err}");
}
