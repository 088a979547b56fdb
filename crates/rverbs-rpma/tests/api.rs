//! The objects' rules other than completions: error codes, descriptors, usage → access,
//! configurations, flush and atomic write emulation, zero-byte operations.

mod common;

use common::*;
use rverbs::{Access, WcOpcode};
use rverbs_rpma::*;

/// `RPMA_E_*` have the values of the installed `<librpma.h>`.
/// The value of `#define NAME <expression>` in `header`: numbers, `a << b`, `|` and
/// names of other defines, in parentheses or not.
fn define(header: &str, name: &str) -> i64 {
    let line = header
        .lines()
        .find(|l| l.starts_with("#define") && l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("{name} not in librpma.h"));
    let expr = line.split_once(name).unwrap().1;
    let expr = expr.split("/*").next().unwrap().replace(['(', ')'], "");
    expr.split('|')
        .map(|t| {
            let t = t.trim();
            if let Some((a, b)) = t.split_once("<<") {
                a.trim().parse::<i64>().unwrap() << b.trim().parse::<u32>().unwrap()
            } else if let Ok(v) = t.parse::<i64>() {
                v
            } else {
                define(header, t)
            }
        })
        .fold(0, |a, b| a | b)
}

/// `RPMA_E_*`, `RPMA_F_*`, `RPMA_MR_USAGE_*` and the atomic-write alignment have the
/// values of the installed `<librpma.h>`.
#[test]
fn error_codes_are_librpmas() {
    let header = std::fs::read_to_string("/usr/include/librpma.h").expect("/usr/include/librpma.h (install librpma-dev)");
    let value = |name: &str| define(&header, name);
    for (name, e) in [
        ("RPMA_E_UNKNOWN", Error::Unknown),
        ("RPMA_E_NOSUPP", Error::NoSupp),
        ("RPMA_E_PROVIDER", Error::Provider(5)),
        ("RPMA_E_NOMEM", Error::NoMem),
        ("RPMA_E_INVAL", Error::Inval),
        ("RPMA_E_NO_COMPLETION", Error::NoCompletion),
        ("RPMA_E_NO_EVENT", Error::NoEvent),
        ("RPMA_E_AGAIN", Error::Again),
        ("RPMA_E_SHARED_CHANNEL", Error::SharedChannel),
        ("RPMA_E_NOT_SHARED_CHNL", Error::NotSharedChnl),
    ] {
        assert_eq!(i64::from(e.code()), value(name), "{name}");
    }
    assert_eq!(Error::Provider(5).errno(), Some(5));
    assert_eq!(Error::from_code(0), None);
    assert_eq!(CompletionFlags::OnError as i64, value("RPMA_F_COMPLETION_ON_ERROR"));
    assert_eq!(CompletionFlags::Always as i64, value("RPMA_F_COMPLETION_ALWAYS"));
    assert_eq!(ATOMIC_WRITE_ALIGNMENT as i64, value("RPMA_ATOMIC_WRITE_ALIGNMENT"));
    for (name, u) in [
        ("RPMA_MR_USAGE_READ_SRC", Usage::READ_SRC),
        ("RPMA_MR_USAGE_READ_DST", Usage::READ_DST),
        ("RPMA_MR_USAGE_WRITE_SRC", Usage::WRITE_SRC),
        ("RPMA_MR_USAGE_WRITE_DST", Usage::WRITE_DST),
        ("RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY", Usage::FLUSH_TYPE_VISIBILITY),
        ("RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT", Usage::FLUSH_TYPE_PERSISTENT),
        ("RPMA_MR_USAGE_SEND", Usage::SEND),
        ("RPMA_MR_USAGE_RECV", Usage::RECV),
    ] {
        assert_eq!(i64::from(u.bits()), value(name), "{name}");
    }
}

/// rpma_mr_reg(3) with the access rights librpma 1.2 derives from the usage
/// (rpma-rdmacm.md §1.2).
#[test]
fn usage_maps_to_access_as_librpma_does() {
    let peer = Peer::new("127.0.0.1", ContextType::Local).unwrap();
    let cases = [
        (Usage::READ_SRC, Access::REMOTE_READ),
        (Usage::FLUSH_TYPE_VISIBILITY, Access::REMOTE_READ),
        (Usage::FLUSH_TYPE_PERSISTENT, Access::REMOTE_READ),
        (Usage::READ_DST, Access::LOCAL_WRITE),
        (Usage::WRITE_SRC, Access::LOCAL_WRITE),
        (Usage::WRITE_DST, Access::REMOTE_WRITE | Access::LOCAL_WRITE),
        (Usage::RECV, Access::LOCAL_WRITE),
        (Usage::SEND, Access::empty()),
        (Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT, Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::REMOTE_READ),
    ];
    for (usage, access) in cases {
        assert_eq!(usage.access(), access, "{usage:?}");
        let mr = MrLocal::new(&peer, 100, usage).unwrap();
        assert_eq!(mr.as_verbs().access(), access, "{usage:?}");
        assert_eq!(mr.usage(), usage);
        assert_eq!(mr.size(), 100);
    }
    assert_eq!(MrLocal::new(&peer, 0, Usage::SEND).err(), Some(Error::Inval));
    assert_eq!(MrLocal::new(&peer, 8, Usage::empty()).err(), Some(Error::Inval));
}

/// rpma_mr_get_descriptor(3), rpma_mr_remote_from_descriptor(3): 21 bytes,
/// little-endian address, length, rkey, usage; INVAL below 21 bytes or with usage 0.
#[test]
fn mr_descriptors() {
    let peer = Peer::new("127.0.0.1", ContextType::Local).unwrap();
    let mr = MrLocal::new(&peer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY).unwrap();
    let d = mr.descriptor();
    assert_eq!(d.len(), MR_DESCRIPTOR_SIZE);
    assert_eq!(mr.descriptor_size(), 21);
    assert_eq!(u64::from_le_bytes(d[0..8].try_into().unwrap()), mr.as_verbs().addr() as u64);
    assert_eq!(u64::from_le_bytes(d[8..16].try_into().unwrap()), 4096);
    assert_eq!(u32::from_le_bytes(d[16..20].try_into().unwrap()), mr.as_verbs().rkey());
    assert_eq!(d[20], 8 | 16);
    let r = MrRemote::from_descriptor(&d).unwrap();
    assert_eq!((r.addr(), r.size(), r.rkey(), r.usage()), (mr.addr(), 4096, mr.as_verbs().rkey(), mr.usage()));
    assert_eq!(r.flush_type(), Usage::FLUSH_TYPE_VISIBILITY);
    assert_eq!(r.descriptor(), d);
    let mut longer = d.to_vec();
    longer.extend_from_slice(&[0xee; 8]);
    assert_eq!(MrRemote::from_descriptor(&longer), Ok(r));
    assert_eq!(MrRemote::from_descriptor(&d[..20]), Err(Error::Inval));
    let mut no_usage = d;
    no_usage[20] = 0;
    assert_eq!(MrRemote::from_descriptor(&no_usage), Err(Error::Inval));
}

/// rpma_peer_cfg_get_descriptor(3) and _from_descriptor(3): one byte.
#[test]
fn peer_cfg_descriptor() {
    let mut cfg = PeerCfg::new();
    assert!(!cfg.direct_write_to_pmem());
    assert_eq!(cfg.descriptor(), [0]);
    cfg.set_direct_write_to_pmem(true);
    assert_eq!(cfg.descriptor(), [1]);
    assert_eq!(PeerCfg::DESCRIPTOR_SIZE, 1);
    assert!(PeerCfg::from_descriptor(&[1]).unwrap().direct_write_to_pmem());
    assert!(!PeerCfg::from_descriptor(&[0, 1]).unwrap().direct_write_to_pmem());
    assert_eq!(PeerCfg::from_descriptor(&[]), Err(Error::Inval));
}

/// rpma_conn_cfg_new(3): librpma's defaults.
#[test]
fn conn_cfg_defaults() {
    let c = ConnCfg::new();
    assert_eq!(c.timeout(), std::time::Duration::from_millis(1000));
    assert_eq!((c.cq_size(), c.rcq_size(), c.sq_size(), c.rq_size()), (10, 0, 10, 10));
    assert!(!c.compl_channel());
    let mut c = ConnCfg::new();
    c.set_cq_size(3).set_rcq_size(4).set_sq_size(5).set_rq_size(6).set_compl_channel(true);
    assert_eq!((c.cq_size(), c.rcq_size(), c.sq_size(), c.rq_size(), c.compl_channel()), (3, 4, 5, 6, true));
}

/// A pair whose server exposes `usage` over 64 bytes.
fn target_pair(usage: Usage) -> (Pair, MrRemote, MrLocal, MrLocal) {
    let (speer, cpeer) = peers();
    let target = MrLocal::new(&speer, 64, usage).unwrap();
    let desc = target.descriptor();
    let p = pair_with(speer, cpeer, None, None, |_| {}, Some(&desc), None);
    let remote = MrRemote::from_descriptor(p.client.private_data().unwrap()).unwrap();
    let src = MrLocal::new(&p.cpeer, 64, Usage::WRITE_SRC).unwrap();
    (p, remote, src, target)
}

/// rpma_flush(3) (librpma 1.2 emulation): NOSUPP unless the region allows the flush
/// type and, for PERSISTENT, the remote peer configuration declares direct write to
/// pmem; the flush is an 8-byte RDMA READ after the writes, so it completes after they
/// are placed.
#[test]
fn flush_checks_types_and_reads_after_the_writes() {
    bounded(60, || {
        let (p, remote, src, target) = target_pair(Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY);
        let c = &p.client;
        assert_eq!(c.flush(&remote, 0, 8, FlushType::Persistent, CompletionFlags::Always, 1), Err(Error::NoSupp));
        let mut pmem = PeerCfg::new();
        pmem.set_direct_write_to_pmem(true);
        c.apply_remote_peer_cfg(&pmem);
        assert_eq!(
            c.flush(&remote, 0, 8, FlushType::Persistent, CompletionFlags::Always, 1),
            Err(Error::NoSupp),
            "the region lacks FLUSH_TYPE_PERSISTENT"
        );
        src.write(0, b"Hello world!").unwrap();
        c.write(&remote, 0, &src, 0, 12, CompletionFlags::OnError, 2).unwrap();
        c.flush(&remote, 0, 12, FlushType::Visibility, CompletionFlags::Always, 3).unwrap();
        let wc = next_wc(c.get_cq());
        assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (3, Some(WcOpcode::RdmaRead), Some(8)));
        assert_eq!(target.to_vec(0, 12).unwrap(), b"Hello world!");
        assert_empty(c.get_cq());
        close(p);

        let (p, remote, _src, _t) = target_pair(Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT);
        assert_eq!(p.client.flush(&remote, 0, 8, FlushType::Visibility, CompletionFlags::Always, 1), Err(Error::NoSupp));
        assert_eq!(p.client.flush(&remote, 0, 8, FlushType::Persistent, CompletionFlags::Always, 1), Err(Error::NoSupp));
        p.client.apply_remote_peer_cfg(&pmem);
        p.client.flush(&remote, 0, 8, FlushType::Persistent, CompletionFlags::Always, 4).unwrap();
        assert_eq!(next_wc(p.client.get_cq()).wr_id(), 4);
        close(p);
    });
}

/// rpma_atomic_write(3) (librpma 1.2 emulation: fenced inline 8-byte RDMA WRITE): INVAL
/// unless the offset is 8-aligned; the 8 bytes land, no source region is needed.
#[test]
fn atomic_write() {
    bounded(60, || {
        let (p, remote, _src, target) = target_pair(Usage::WRITE_DST);
        let c = &p.client;
        assert_eq!(c.atomic_write(&remote, 4, *b"12345678", CompletionFlags::Always, 1), Err(Error::Inval));
        c.atomic_write(&remote, 8, *b"ABCDEFGH", CompletionFlags::Always, 2).unwrap();
        let wc = next_wc(c.get_cq());
        assert_eq!((wc.wr_id(), wc.opcode()), (2, Some(WcOpcode::RdmaWrite)));
        assert_eq!(target.to_vec(8, 8).unwrap(), b"ABCDEFGH");
        assert_eq!(target.as_verbs().read_u64(8).unwrap(), u64::from_ne_bytes(*b"ABCDEFGH"));
        c.atomic_write(&remote, 16, *b"unsignal", CompletionFlags::OnError, 3).unwrap();
        assert_empty(c.get_cq());
        assert_eq!(target.to_vec(16, 8).unwrap(), b"unsignal");
        close(p);
    });
}

/// rpma_read(3), rpma_write(3), rpma_send(3), rpma_recv(3): the 0-byte forms (no
/// regions, offsets and length 0) are valid operations; a half-given form is INVAL.
#[test]
fn zero_byte_operations() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let p = pair_with(speer, cpeer, None, None, |r| r.recv(None, 0, 0, 90).unwrap(), None, None);
        let c = &p.client;
        let local = MrLocal::new(&p.cpeer, 8, Usage::READ_DST).unwrap();
        let remote = MrRemote::from_descriptor(&local.descriptor()).unwrap();
        assert_eq!(c.read(None, 0, None, 0, 1, CompletionFlags::Always, 1), Err(Error::Inval));
        assert_eq!(c.read(&local, 0, None, 0, 0, CompletionFlags::Always, 1), Err(Error::Inval));
        assert_eq!(c.write(&remote, 0, None, 0, 0, CompletionFlags::Always, 1), Err(Error::Inval));
        assert_eq!(c.write(None, 1, None, 0, 0, CompletionFlags::Always, 1), Err(Error::Inval));
        assert_eq!(c.send(None, 0, 1, CompletionFlags::Always, 1), Err(Error::Inval));
        assert_eq!(c.recv(None, 1, 0, 1), Err(Error::Inval));
        assert_eq!(p.server.recv(None, 0, 4, 1), Err(Error::Inval));
        c.read(None, 0, None, 0, 0, CompletionFlags::Always, 11).unwrap();
        c.write(None, 0, None, 0, 0, CompletionFlags::Always, 12).unwrap();
        c.send_with_imm(None, 0, 0, CompletionFlags::Always, 4321, 13).unwrap();
        let cq = c.get_cq();
        for (id, op) in [(11, WcOpcode::RdmaRead), (12, WcOpcode::RdmaWrite), (13, WcOpcode::Send)] {
            let wc = next_wc(cq);
            assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (id, Some(op), Some(0)), "{id}");
        }
        let wc = next_wc(p.server.get_cq());
        assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len(), wc.imm_data()), (90, Some(WcOpcode::Recv), Some(0), Some(4321)));
        assert_eq!(wc.as_verbs().imm_data(), Some(4321u32.to_be()), "network byte order in the verbs completion");
        close(p);
    });
}

/// rpma_conn_get_qp_num(3), rpma_conn_get_cq(3)/_rcq(3), ConnEvent strings
/// (rpma_utils_conn_event_2str(3)).
#[test]
fn connection_accessors() {
    bounded(60, || {
        let p = pair();
        assert_ne!(p.client.qp_num(), p.server.qp_num());
        assert!(p.client.get_rcq().is_none());
        assert_eq!(ConnEvent::Established.to_string(), "Connection established");
        assert_eq!(ConnEvent::Closed as i32, 1);
        assert_eq!(ConnEvent::from_cm(rverbs_cm::EventKind::TimewaitExit), Some(ConnEvent::Closed));
        assert_eq!(ConnEvent::from_cm(rverbs_cm::EventKind::ConnectError), Some(ConnEvent::Lost));
        assert_eq!(ConnEvent::from_cm(rverbs_cm::EventKind::AddrResolved), None);
        close(p);
    });
}
