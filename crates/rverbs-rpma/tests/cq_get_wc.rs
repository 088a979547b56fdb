//! rpma_cq_get_wc(3), one test per sentence of the man page (seed
//! `003_ee8deb624c203bf2`), over real connections in one process.
//!
//! Each test names the sentence it checks. The operations are RDMA WRITEs and READs
//! between a client and a server connection; a failing operation is a write past the
//! end of the server's region (the responder answers with a remote access error).

mod common;

use common::*;
use rverbs::{WcFlags, WcOpcode, WcStatus};
use rverbs_rpma::*;

/// A pair whose server exposes a 64-byte WRITE_DST|READ_SRC region, and the client's
/// 64-byte source/destination region.
fn rw_pair(ccfg: Option<&ConnCfg>) -> (Pair, MrRemote, MrLocal, MrLocal) {
    let (speer, cpeer) = peers();
    let target = MrLocal::new(&speer, 64, Usage::WRITE_DST | Usage::READ_SRC).unwrap();
    let desc = target.descriptor();
    let p = pair_with(speer, cpeer, None, ccfg, |_| {}, Some(&desc), None);
    let remote = MrRemote::from_descriptor(p.client.private_data().unwrap()).unwrap();
    let local = MrLocal::new(&p.cpeer, 64, Usage::WRITE_SRC | Usage::READ_DST).unwrap();
    (p, remote, local, target)
}

/// "rpma_cq_get_wc() polls the CQ for completions and returns the first num_entries
/// ... in the wc array exactly like ibv_poll_cq(3) does": three completions, room for
/// two then one — the oldest come first.
#[test]
fn returns_the_first_num_entries_oldest_first() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        for id in 1..=3u64 {
            p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, id).unwrap();
        }
        let cq = p.client.get_cq();
        // Every write executed inside its post: all three are in the CQ now.
        let mut two = [Wc::default(); 2];
        assert_eq!(cq.get_wc(&mut two), Ok(2));
        assert_eq!([two[0].wr_id(), two[1].wr_id()], [1, 2], "oldest first");
        let mut one = [Wc::default(); 1];
        assert_eq!(cq.get_wc(&mut one), Ok(1));
        assert_eq!(one[0].wr_id(), 3);
        for wc in two.iter().chain(&one) {
            assert!(wc.is_success());
            assert_eq!(wc.opcode(), Some(WcOpcode::RdmaWrite));
        }
        assert_empty(cq);
        close(p);
    });
}

/// "... (or all available completions if the CQ contains fewer than this number)":
/// room for eight, two available — two returned.
#[test]
fn returns_all_available_completions_if_fewer() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 10).unwrap();
        p.client.read(&local, 8, &remote, 0, 8, CompletionFlags::Always, 11).unwrap();
        let _ = next_wc_peek(&p);
        let mut wc = [Wc::default(); 8];
        let n = p.client.get_cq().get_wc(&mut wc).unwrap();
        assert_eq!(n, 2);
        assert_eq!(wc[0].wr_id(), 10);
        assert_eq!(wc[1].wr_id(), 11);
        assert_eq!(wc[1].opcode(), Some(WcOpcode::RdmaRead));
        close(p);
    });
}

/// Waits until the client's CQ holds two completions without taking them.
fn next_wc_peek(p: &Pair) -> usize {
    let deadline = std::time::Instant::now() + WAIT;
    while p.client.get_cq().as_verbs().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "completions did not arrive");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    2
}

/// "The argument wc is a pointer to an array of ibv_wc structs, as defined in
/// <infiniband/verbs.h>": `Wc` is `struct ibv_wc` (48 bytes) and its verbs view holds
/// the same fields.
#[test]
fn wc_is_an_ibv_wc() {
    assert_eq!(std::mem::size_of::<Wc>(), 48);
    assert_eq!(std::mem::align_of::<Wc>(), 8);
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 0xabc).unwrap();
        let wc = next_wc(p.client.get_cq());
        let v = wc.as_verbs();
        assert_eq!(v.wr_id(), wc.wr_id());
        assert_eq!(v.status(), wc.status());
        assert_eq!(v.qp_num(), p.client.qp_num());
        assert_eq!(v.opcode(), wc.opcode());
        close(p);
    });
}

/// "The number of got completions is returned in the num_entries_got argument if it is
/// not NULL. It can be NULL only if num_entries equals 1.": `get_wc` always returns the
/// count; `get_wc_one` is the one-entry form without a count.
#[test]
fn the_count_is_returned_and_the_one_entry_form_needs_none() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        for id in [5, 6] {
            p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, id).unwrap();
        }
        let cq = p.client.get_cq();
        assert_eq!(cq.get_wc_one().map(|w| w.wr_id()), Ok(5));
        let mut wc = [Wc::default(); 3];
        assert_eq!(cq.get_wc(&mut wc), Ok(1));
        assert_eq!(wc[0].wr_id(), 6);
        close(p);
    });
}

/// "All operations generate completions on error.": writes and reads posted with
/// ON_ERROR that fail each give a completion with an error status (the first with the
/// remote access error, the ones after it flushed).
#[test]
fn all_operations_complete_on_error() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        let cq = p.client.get_cq();
        // Past the end of the 64-byte target.
        p.client.write(&remote, 4096, &local, 0, 8, CompletionFlags::OnError, 21).unwrap();
        let wc = next_wc(cq);
        assert_eq!(wc.wr_id(), 21);
        assert_eq!(wc.status(), WcStatus::RemAccessErr);
        // The QP is in error now: what follows is flushed, and completes although
        // posted ON_ERROR.
        p.client.read(&local, 0, &remote, 0, 8, CompletionFlags::OnError, 22).unwrap();
        p.client.send(None, 0, 0, CompletionFlags::OnError, 23).unwrap();
        for id in [22, 23] {
            let wc = next_wc(cq);
            assert_eq!(wc.wr_id(), id);
            assert_eq!(wc.status(), WcStatus::WrFlushErr);
        }
        assert_empty(cq);
        drop(p);
    });
}

/// "The operations posted with the RPMA_F_COMPLETION_ALWAYS flag also generate
/// completions on success.": an ALWAYS write completes; a successful ON_ERROR write
/// never does (its data arrives; the ALWAYS read after it is the only completion).
#[test]
fn only_always_operations_complete_on_success() {
    bounded(60, || {
        let (p, remote, local, target) = rw_pair(None);
        let cq = p.client.get_cq();
        local.write(0, b"unsigned").unwrap();
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::OnError, 31).unwrap();
        p.client.read(&local, 8, &remote, 0, 8, CompletionFlags::Always, 32).unwrap();
        let wc = next_wc(cq);
        assert_eq!(wc.wr_id(), 32, "the successful ON_ERROR write has no completion");
        assert_empty(cq);
        assert_eq!(target.to_vec(0, 8).unwrap(), b"unsigned");
        assert_eq!(local.to_vec(8, 8).unwrap(), b"unsigned");
        local.write(0, b"signaled").unwrap();
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 33).unwrap();
        let wc = next_wc(cq);
        assert_eq!((wc.wr_id(), wc.opcode()), (33, Some(WcOpcode::RdmaWrite)));
        assert_empty(cq);
        assert!(!CompletionFlags::OnError.signaled());
        assert!(CompletionFlags::Always.signaled());
        close(p);
    });
}

/// "Note that if the provided cq is the main CQ and the receive CQ is present on the
/// same connection this function won't return IBV_WC_RECV and IBV_WC_RECV_RDMA_WITH_IMM
/// at any time. The receive CQ has to be used instead to collect these completions."
#[test]
fn with_a_receive_cq_the_main_cq_never_returns_receives() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let target = MrLocal::new(&speer, 64, Usage::WRITE_DST | Usage::RECV).unwrap();
        let desc = target.descriptor();
        let mut scfg = ConnCfg::new();
        scfg.set_rcq_size(8);
        let p = pair_with(
            speer,
            cpeer,
            Some(&scfg),
            None,
            |req| {
                req.recv(&target, 32, 16, 1).unwrap();
                req.recv(&target, 48, 16, 2).unwrap();
            },
            Some(&desc),
            None,
        );
        let remote = MrRemote::from_descriptor(p.client.private_data().unwrap()).unwrap();
        let src = MrLocal::new(&p.cpeer, 16, Usage::SEND | Usage::WRITE_SRC).unwrap();
        src.write(0, b"ping").unwrap();
        p.client.send(&src, 0, 4, CompletionFlags::Always, 100).unwrap();
        p.client.write_with_imm(&remote, 0, &src, 0, 4, CompletionFlags::Always, 0x1234, 101).unwrap();
        let rcq = p.server.get_rcq().expect("the server has a receive CQ");
        let a = next_wc(rcq);
        let b = next_wc(rcq);
        assert_eq!(a.opcode(), Some(WcOpcode::Recv));
        assert_eq!(a.byte_len(), Some(4));
        assert_eq!(b.opcode(), Some(WcOpcode::RecvRdmaWithImm));
        assert_eq!(b.imm_data(), Some(0x1234));
        assert_eq!(a.qp_num(), p.server.qp_num());
        // Nothing of it on the server's main CQ.
        assert_empty(p.server.get_cq());
        // Without a receive CQ (the client) receives go to the main CQ.
        assert!(p.client.get_rcq().is_none());
        let cq = p.client.get_cq();
        assert_eq!(next_wc(cq).opcode(), Some(WcOpcode::Send));
        assert_eq!(next_wc(cq).opcode(), Some(WcOpcode::RdmaWrite));
        let back = MrLocal::new(&p.cpeer, 16, Usage::RECV).unwrap();
        p.client.recv(&back, 0, 16, 200).unwrap();
        let reply = MrLocal::new(&p.speer, 16, Usage::SEND).unwrap();
        p.server.send(&reply, 0, 2, CompletionFlags::Always, 201).unwrap();
        let wc = next_wc(cq);
        assert_eq!((wc.wr_id(), wc.opcode()), (200, Some(WcOpcode::Recv)));
        assert_eq!(next_wc(p.server.get_cq()).opcode(), Some(WcOpcode::Send));
        close(p);
    });
}

/// "The rpma_cq_get_wc() function returns 0 on success or a negative error code on
/// failure.": success is `Ok`, every error has a negative librpma code.
#[test]
fn success_or_a_negative_error_code() {
    for e in [
        Error::Unknown,
        Error::NoSupp,
        Error::Provider(libc::EIO),
        Error::NoMem,
        Error::Inval,
        Error::NoCompletion,
        Error::NoEvent,
        Error::Again,
        Error::SharedChannel,
        Error::NotSharedChnl,
    ] {
        assert!(e.code() < 0, "{e:?}");
        assert_eq!(Error::from_code(e.code()).map(Error::code), Some(e.code()));
    }
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        let cq = p.client.get_cq();
        assert_eq!(cq.get_wc_one().map_err(Error::code), Err(-100005));
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 1).unwrap();
        assert!(cq.get_wc_one().is_ok());
        close(p);
    });
}

/// "On success, it saves all got completions and their number into the wc and
/// num_entries_got respectively.": the first `n` entries are written, the rest of the
/// array is left as it was.
#[test]
fn saves_the_completions_got_and_only_those() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        let cq = p.client.get_cq();
        let mut wc = [Wc::default(); 4];
        for id in [41, 42] {
            p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, id).unwrap();
        }
        assert_eq!(cq.get_wc(&mut wc[..2]), Ok(2));
        let before = wc;
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 43).unwrap();
        assert_eq!(cq.get_wc(&mut wc[1..]), Ok(1));
        assert_eq!(wc[0], before[0], "entries before the array untouched");
        assert_eq!(wc[1].wr_id(), 43);
        assert_eq!(&wc[2..], &before[2..], "entries past the count untouched");
        close(p);
    });
}

/// "If the status of a completion is not equal to IBV_WC_SUCCESS then only the
/// following attributes are valid: wr_id, status, qp_num, and vendor_err."
#[test]
fn an_error_completion_answers_only_its_valid_fields() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let target = MrLocal::new(&speer, 64, Usage::WRITE_DST | Usage::RECV).unwrap();
        let desc = target.descriptor();
        // A receive for the immediate data, so the responder gets to the range check
        // (without one it would answer RNR, as rxe does).
        let p = pair_with(speer, cpeer, None, None, |r| r.recv(&target, 0, 8, 50).unwrap(), Some(&desc), None);
        let remote = MrRemote::from_descriptor(p.client.private_data().unwrap()).unwrap();
        let local = MrLocal::new(&p.cpeer, 8, Usage::WRITE_SRC).unwrap();
        p.client.write_with_imm(&remote, 1 << 20, &local, 0, 8, CompletionFlags::OnError, 7, 51).unwrap();
        let wc = next_wc(p.client.get_cq());
        assert!(!wc.is_success());
        assert_eq!(wc.wr_id(), 51);
        assert_eq!(wc.op_context(), 51);
        assert_eq!(wc.status(), WcStatus::RemAccessErr);
        assert_eq!(wc.qp_num(), p.client.qp_num());
        assert_ne!(wc.vendor_err(), 0, "the device reports a syndrome");
        assert_eq!(wc.opcode(), None);
        assert_eq!(wc.byte_len(), None);
        assert_eq!(wc.wc_flags(), None);
        assert_eq!(wc.imm_data(), None);
        // A successful completion answers them all.
        let (q, remote, local, _t) = rw_pair(None);
        q.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 52).unwrap();
        let ok = next_wc(q.client.get_cq());
        assert_eq!(ok.opcode(), Some(WcOpcode::RdmaWrite));
        assert!(ok.wc_flags().is_some_and(|f| !f.contains(WcFlags::WITH_IMM)));
        assert!(ok.byte_len().is_some());
        close(q);
        drop(p);
    });
}

/// ERRORS: "RPMA_E_INVAL - num_entries < 1, cq or wc is NULL, num_entries > 1 and
/// num_entries_got is NULL": an empty array is `Inval` (a NULL CQ, array or count
/// cannot be expressed in Rust).
#[test]
fn inval_for_fewer_than_one_entry() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 1).unwrap();
        let cq = p.client.get_cq();
        assert_eq!(cq.get_wc(&mut []), Err(Error::Inval));
        assert_eq!(Error::Inval.code(), -100004);
        // The completion is still there: INVAL polls nothing.
        assert_eq!(next_wc(cq).wr_id(), 1);
        close(p);
    });
}

/// ERRORS: "RPMA_E_NO_COMPLETION - no completions available".
#[test]
fn no_completion_when_none_is_available() {
    bounded(60, || {
        let p = pair();
        for cq in [p.client.get_cq(), p.server.get_cq()] {
            let mut wc = [Wc::default(); 3];
            assert_eq!(cq.get_wc(&mut wc), Err(Error::NoCompletion));
            assert_eq!(cq.get_wc_one(), Err(Error::NoCompletion));
        }
        close(p);
    });
}

/// ERRORS: "RPMA_E_PROVIDER - ibv_poll_cq(3) failed with a provider error": a CQ that
/// overran is in error, and polling it fails with EIO.
#[test]
fn provider_error_when_polling_fails() {
    bounded(60, || {
        let mut ccfg = ConnCfg::new();
        ccfg.set_cq_size(1).set_sq_size(64);
        let (p, remote, local, _t) = rw_pair(Some(&ccfg));
        let cq = p.client.get_cq();
        let cap = cq.as_verbs().cqe() as u64;
        for id in 0..=cap {
            p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, id).unwrap();
        }
        assert_eq!(cq.get_wc_one(), Err(Error::Provider(libc::EIO)));
        let mut wc = [Wc::default(); 2];
        assert_eq!(cq.get_wc(&mut wc).map_err(|e| e.code()), Err(-100002));
        drop(p);
    });
}

/// ERRORS: "RPMA_E_UNKNOWN - ibv_poll_cq(3) failed but no provider error is available"
/// (and, in librpma 1.2, ibv_poll_cq(3) returning more than asked). rverbs always has an
/// errno and never returns more than the array holds: whatever the array's size, the
/// count stays within it and `Unknown` never comes.
#[test]
fn never_more_than_asked() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        for id in 0..5 {
            p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, id).unwrap();
        }
        let cq = p.client.get_cq();
        let mut got = Vec::new();
        for room in [3usize, 1, 4] {
            let mut wc = vec![Wc::default(); room];
            match cq.get_wc(&mut wc) {
                Ok(n) => {
                    assert!(n >= 1 && n <= room, "{n} completions in room for {room}");
                    got.extend(wc[..n].iter().map(Wc::wr_id));
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
        assert_eq!(Error::Unknown.code(), -100000);
        close(p);
    });
}

/// rpma_cq_wait(3) and rpma_cq_get_fd(3) (SEE ALSO): the fd becomes readable with a
/// completion, `wait` takes the event and re-arms; with nothing to report `wait` on a
/// non-blocking fd is `NoCompletion`; with a shared channel it is `SharedChannel` and
/// `Conn::wait` names the CQ.
#[test]
fn wait_and_fd() {
    bounded(60, || {
        let (p, remote, local, _t) = rw_pair(None);
        let cq = p.client.get_cq();
        assert_eq!(cq.wait_timeout(std::time::Duration::from_millis(50)), Err(Error::NoCompletion));
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 1).unwrap();
        cq.wait_timeout(WAIT).unwrap();
        assert_eq!(cq.get_wc_one().map(|w| w.wr_id()), Ok(1));
        // Re-armed: the next completion fires again.
        p.client.write(&remote, 0, &local, 0, 8, CompletionFlags::Always, 2).unwrap();
        cq.wait().unwrap();
        assert_eq!(cq.get_wc_one().map(|w| w.wr_id()), Ok(2));
        rustix::fs::fcntl_setfl(cq.fd(), rustix::fs::OFlags::NONBLOCK).unwrap();
        assert_eq!(cq.wait(), Err(Error::NoCompletion));
        assert_eq!(p.client.wait().err(), Some(Error::NotSharedChnl));
        assert_eq!(p.client.compl_fd().err(), Some(Error::NotSharedChnl));
        close(p);

        let mut cfg = ConnCfg::new();
        cfg.set_rcq_size(4).set_compl_channel(true);
        let (speer, cpeer) = peers();
        let target = MrLocal::new(&speer, 64, Usage::WRITE_DST | Usage::RECV).unwrap();
        let desc = target.descriptor();
        let p = pair_with(speer, cpeer, Some(&cfg), Some(&cfg), |r| r.recv(&target, 0, 8, 9).unwrap(), Some(&desc), None);
        let src = MrLocal::new(&p.cpeer, 8, Usage::SEND).unwrap();
        assert_eq!(p.server.get_cq().wait(), Err(Error::SharedChannel));
        assert_eq!(p.server.get_rcq().unwrap().wait(), Err(Error::SharedChannel));
        assert!(p.server.compl_fd().is_ok());
        p.client.send(&src, 0, 8, CompletionFlags::Always, 8).unwrap();
        let (rcq, is_rcq) = p.server.wait_timeout(WAIT).unwrap();
        assert!(is_rcq);
        assert_eq!(rcq.get_wc_one().map(|w| (w.wr_id(), w.opcode())), Ok((9, Some(WcOpcode::Recv))));
        let (cq, is_rcq) = p.client.wait_timeout(WAIT).unwrap();
        assert!(!is_rcq);
        assert_eq!(cq.get_wc_one().map(|w| w.wr_id()), Ok(8));
        close(p);
    });
}
