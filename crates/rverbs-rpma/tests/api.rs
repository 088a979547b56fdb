//! The objects' rules other than completions: error codes, descriptors, usage → access,
//! configurations, flush and atomic write (native and emulated, and the decision),
//! zero-byte operations.

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
/// (docs/rpma-rdmacm.md §1.2).
#[test]
fn usage_maps_to_access_as_librpma_does() {
    let peer = Peer::new(host(), ContextType::Local).unwrap();
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
    let peer = Peer::new(host(), ContextType::Local).unwrap();
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
    target_pair_with(usage, Native::ALL)
}

/// As [`target_pair`], both peers' native operations limited to `allow`.
fn target_pair_with(usage: Usage, allow: Native) -> (Pair, MrRemote, MrLocal, MrLocal) {
    let speer = Peer::new_with(host(), ContextType::Local, allow).unwrap();
    let cpeer = Peer::new_with(host(), ContextType::Remote, allow).unwrap();
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
        assert!(!p.cpeer.native().flush, "the rverbs device reports no FLUSH_PERSISTENT: librpma emulates");
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

/// rpma_atomic_write(3), native (the rverbs device reports ATOMIC_WRITE:
/// `IBV_WR_ATOMIC_WRITE`, completing as `IBV_WC_ATOMIC_WRITE`) and emulated (librpma
/// 1.2: fenced inline 8-byte RDMA WRITE, completing as `IBV_WC_RDMA_WRITE`): INVAL
/// unless the offset is 8-aligned; the 8 bytes land, no source region is needed; an
/// unsignaled success yields no completion.
#[test]
fn atomic_write() {
    bounded(60, || {
        for (allow, opcode) in [(Native::ALL, WcOpcode::AtomicWrite), (Native::EMULATED, WcOpcode::RdmaWrite)] {
            let (p, remote, _src, target) = target_pair_with(Usage::WRITE_DST, allow);
            assert_eq!(p.cpeer.native().atomic_write, opcode == WcOpcode::AtomicWrite);
            let c = &p.client;
            assert_eq!(c.atomic_write(&remote, 4, *b"12345678", CompletionFlags::Always, 1), Err(Error::Inval));
            c.atomic_write(&remote, 8, *b"ABCDEFGH", CompletionFlags::Always, 2).unwrap();
            let wc = next_wc(c.get_cq());
            assert!(wc.is_success(), "{wc:?}");
            assert_eq!((wc.wr_id(), wc.opcode()), (2, Some(opcode)));
            assert_eq!(target.to_vec(8, 8).unwrap(), b"ABCDEFGH");
            assert_eq!(target.as_verbs().read_u64(8).unwrap(), u64::from_ne_bytes(*b"ABCDEFGH"));
            c.atomic_write(&remote, 16, *b"unsignal", CompletionFlags::OnError, 3).unwrap();
            // A signaled operation after it: its completion is the next one, so the
            // unsignaled success produced none.
            c.atomic_write(&remote, 24, *b"signaled", CompletionFlags::Always, 4).unwrap();
            assert_eq!(next_wc(c.get_cq()).wr_id(), 4);
            assert_empty(c.get_cq());
            assert_eq!(target.to_vec(16, 16).unwrap(), b"unsignalsignaled");
            close(p);
        }
    });
}

/// A native atomic write to a region the owner did not register for remote writes
/// fails with a remote access error completion (the device checks the real
/// registration), and the bytes stay.
#[test]
fn native_atomic_write_needs_write_dst() {
    bounded(60, || {
        let (p, remote, _src, target) = target_pair(Usage::READ_SRC);
        assert!(p.cpeer.native().atomic_write);
        p.client.atomic_write(&remote, 0, *b"forbidn!", CompletionFlags::OnError, 9).unwrap();
        let wc = next_wc(p.client.get_cq());
        assert_eq!((wc.wr_id(), wc.status()), (9, rverbs::WcStatus::RemAccessErr));
        assert_eq!(target.to_vec(0, 8).unwrap(), [0; 8]);
    });
}

/// librpma's decision (`rpma_peer_new`, 1.3.0): atomic write native iff the device
/// reports IB_UVERBS_DEVICE_ATOMIC_WRITE; flush native only with both FLUSH_GLOBAL and
/// FLUSH_PERSISTENT. The rverbs device reports ATOMIC_WRITE and FLUSH_GLOBAL only (it
/// registers no persistent memory), so its peers emulate the flush; `allow` only ever
/// turns native operations off.
#[test]
fn native_operations_are_decided_as_librpma_does() {
    use rverbs::cap_flags::{EX_ATOMIC_WRITE, EX_FLUSH_GLOBAL};
    const EX_FLUSH_PERSISTENT: u64 = 1 << 39;
    let n = |atomic_write, flush| Native { atomic_write, flush };
    for (flags, want) in [
        (0, n(false, false)),
        (EX_ATOMIC_WRITE, n(true, false)),
        (EX_FLUSH_GLOBAL, n(false, false)),
        (EX_FLUSH_PERSISTENT, n(false, false)),
        (EX_FLUSH_GLOBAL | EX_FLUSH_PERSISTENT, n(false, true)),
        (EX_ATOMIC_WRITE | EX_FLUSH_GLOBAL | EX_FLUSH_PERSISTENT | 0xffff, n(true, true)),
    ] {
        assert_eq!(Native::from_cap_flags_ex(flags), want, "{flags:#x}");
    }
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let caps = peer.context().query_device().device_cap_flags_ex;
    assert_eq!(peer.native(), Native::from_cap_flags_ex(caps));
    assert_eq!(peer.native(), n(true, false), "rverbs: ATOMIC_WRITE and FLUSH_GLOBAL, no FLUSH_PERSISTENT");
    let emu = Peer::new_with(host(), ContextType::Local, Native::EMULATED).unwrap();
    assert_eq!(emu.native(), Native::EMULATED);
    let only_flush = Peer::new_with(host(), ContextType::Local, n(false, true)).unwrap();
    assert_eq!(only_flush.native(), Native::EMULATED, "allowing never enables what the device lacks");
}

/// `rpma_peer_usage2access` (1.3.0): with a native flush the flush usages map to
/// FLUSH_GLOBAL / FLUSH_PERSISTENT instead of REMOTE_READ; READ_SRC keeps REMOTE_READ.
#[test]
fn native_flush_maps_flush_usages_to_flush_access() {
    let cases = [
        (Usage::FLUSH_TYPE_VISIBILITY, Access::FLUSH_GLOBAL),
        (Usage::FLUSH_TYPE_PERSISTENT, Access::FLUSH_PERSISTENT),
        (Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY, Access::REMOTE_READ | Access::FLUSH_GLOBAL),
        (Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY, Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::FLUSH_GLOBAL),
        (Usage::READ_DST, Access::LOCAL_WRITE),
    ];
    for (usage, native) in cases {
        assert_eq!(usage.access_for(true), native, "{usage:?}");
        assert_eq!(usage.access_for(false), usage.access(), "{usage:?}");
    }
    assert_eq!(Usage::FLUSH_TYPE_VISIBILITY.access_for(false), Access::REMOTE_READ);
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let mr = MrLocal::new(&peer, 64, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY).unwrap();
    assert_eq!(mr.as_verbs().access(), Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::REMOTE_READ, "rverbs peers emulate the flush");
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
