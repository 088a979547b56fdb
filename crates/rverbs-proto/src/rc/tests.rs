//! Virtual-time tests, one per rule of docs/rocev2-wire.md §3 (named `subject_condition_outcome`).

use std::time::{Duration, Instant};

use super::sim::{Faults, Pair, Verdict, MR_BASE, RKEY};
use super::*;
use crate::rnr::{ack_timeout, rnr_delay};
use crate::vendor_err;
use crate::verbs::Access;
use crate::wire::{NakCode, Operation};
use crate::violation::Violation;

const MTU: u32 = 256;

fn req_cfg() -> RequesterConfig {
    RequesterConfig { mtu: MTU, timeout: 10, ..RequesterConfig::TEMPLATE }
}

fn resp_cfg() -> ResponderConfig {
    ResponderConfig { mtu: MTU, ..ResponderConfig::TEMPLATE }
}

fn pair() -> Pair {
    Pair::new(req_cfg(), resp_cfg())
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn op(r: &Request) -> Operation {
    r.opcode.operation().expect("known opcode")
}

fn rop(r: &Response) -> Operation {
    r.opcode.operation().expect("known opcode")
}

#[track_caller]
fn assert_all_success(p: &Pair, ids: &[u64]) {
    let got: Vec<(u64, WcStatus)> = p.completions.iter().map(|c| (c.id, c.status)).collect();
    let want: Vec<(u64, WcStatus)> = ids.iter().map(|&i| (i, WcStatus::Success)).collect();
    assert_eq!(got, want);
}

/// Drops request packets for which `f` says so, once each.
fn drop_requests_once(p: &mut Pair, psns: &'static [u32]) {
    let mut seen = Vec::new();
    p.fwd.filter = Some(Box::new(move |pkt| {
        let psn = pkt.req.psn.get();
        if psns.contains(&psn) && !seen.contains(&psn) {
            seen.push(psn);
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
}

fn drop_responses_once(p: &mut Pair, pred: impl Fn(&Response) -> bool + 'static) {
    let mut done = false;
    p.back.filter = Some(Box::new(move |pkt| {
        if !done && pred(&pkt.resp) {
            done = true;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
}

// ---- §3.3 CHK_PSN and §3.2 go-back-N ----

#[test]
fn rc_psn_gap_naks_once_with_expected_psn_then_go_back_n() {
    let mut p = pair();
    for i in 0..4 {
        p.target.post_recv(100 + i, 4096);
    }
    let ids: Vec<u64> = (0..4).map(|i| p.post_send(bytes(100, i))).collect();
    drop_requests_once(&mut p, &[0]);
    p.drive();
    // One NAK-sequence for the three packets ahead of PSN 0, carrying the expected PSN.
    let naks: Vec<&Response> = p
        .responses
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.syndrome == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .collect();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].psn.get(), 0);
    // Go-back-N: PSNs 0..4 sent, then 0..4 again, before any timeout elapsed.
    let psns: Vec<u32> = p.sent.iter().map(|(_, r)| r.psn.get()).collect();
    assert_eq!(psns, [0, 1, 2, 3, 0, 1, 2, 3]);
    assert!(p.sent[4].0 - p.t0 < ack_timeout(10).unwrap());
    assert_eq!(p.executed, [0, 1, 2, 3]);
    assert_all_success(&p, &ids);
    for i in 0..4u8 {
        assert_eq!(p.target.recv_bufs[&(100 + u64::from(i))][..100], bytes(100, i)[..]);
    }
}

#[test]
fn rc_psn_gap_in_multi_packet_send_resends_from_the_gap() {
    let mut p = pair();
    p.target.post_recv(1, 4096);
    let id = p.post_send(bytes(4 * MTU as usize, 9));
    drop_requests_once(&mut p, &[2]);
    p.drive();
    let psns: Vec<u32> = p.sent.iter().map(|(_, r)| r.psn.get()).collect();
    // The responder NAKs PSN 2 when 3 arrives; the requester resends 2 and 3 only.
    assert_eq!(psns, [0, 1, 2, 3, 2, 3]);
    assert_eq!(op(&p.sent[4].1), Operation::SendMiddle);
    assert_eq!(p.sent[4].1.payload_offset, 2 * u64::from(MTU));
    assert_all_success(&p, &[id]);
    assert_eq!(p.target.recv_bufs[&1][..4 * MTU as usize], bytes(4 * MTU as usize, 9)[..]);
}

/// A second loss inside a go-back-N, before any ACK: the responder NAKs the new gap, and
/// that NAK — which moves `comp.psn` forward — starts the next go-back-N at once instead
/// of waiting for the retransmit timer (deviation from rxe, docs/rxe-differences.md, "A sequence NAK refills the retry
/// counters"), and it
/// refills the retry budget, which counts consecutive failures only.
#[test]
fn rc_second_gap_before_any_ack_is_retried_on_its_nak_not_on_the_timer() {
    let mut p = Pair::new(RequesterConfig { retry_cnt: 1, ..req_cfg() }, resp_cfg());
    p.target.post_recv(1, 4096);
    let id = p.post_send(bytes(8 * MTU as usize, 3));
    // PSN 1 is lost the first time it is sent, PSN 5 the second time (inside the resend).
    let mut seen = std::collections::HashMap::<u32, u32>::new();
    p.fwd.filter = Some(Box::new(move |pkt| {
        let psn = pkt.req.psn.get();
        let n = seen.entry(psn).or_insert(0);
        *n += 1;
        if (psn == 1 && *n == 1) || (psn == 5 && *n == 2) {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    p.drive();
    let naks: Vec<u32> = p
        .responses
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.syndrome == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .map(|r| r.psn.get())
        .collect();
    assert_eq!(naks, [1, 5]);
    // Every packet went out before a single ACK timeout elapsed: no timer retry.
    let last = p.sent.last().expect("sent").0;
    assert!(last - p.t0 < ack_timeout(10).unwrap(), "a retransmission waited for the timer");
    // With retry_cnt 1, two NAK-driven retries succeed because the first NAK was progress.
    assert_all_success(&p, &[id]);
    assert_eq!(p.target.recv_bufs[&1][..8 * MTU as usize], bytes(8 * MTU as usize, 3)[..]);
}

#[test]
fn rc_duplicate_send_and_write_are_reacked_not_reexecuted() {
    let mut p = pair();
    p.target.post_recv(1, 4096);
    p.target.post_recv(2, 4096);
    // Lose each ACK once: each request times out, is resent, and is a duplicate there.
    p.back.filter = Some(Box::new({
        let mut seen = Vec::new();
        move |pkt| {
            let psn = pkt.resp.psn.get();
            if seen.contains(&psn) {
                Verdict::Pass
            } else {
                seen.push(psn);
                Verdict::Drop
            }
        }
    }));
    let s = p.post_send(bytes(10, 1));
    p.drive();
    let w = p.post_write(MR_BASE + 64, bytes(16, 2));
    p.drive();
    assert_eq!(p.sent.len(), 4, "each sent twice");
    assert_eq!(p.executed, [0, 1], "duplicates are not executed again");
    assert_eq!(p.recv_completions.len(), 1, "one receive consumed");
    // Each duplicate (AckReq: each is a message's only packet) was re-ACKed with its own PSN.
    let acks: Vec<u32> = p.responses.iter().map(|(_, r)| r.psn.get()).collect();
    assert_eq!(acks, [0, 0, 1, 1]);
    assert_all_success(&p, &[s, w]);
    assert_eq!(p.target.recvs.len(), 1, "the second receive is still posted");
}

#[test]
fn rc_duplicate_reack_never_names_a_read_psn() {
    let mut resp = Responder::new(resp_cfg());
    let mut t = ZeroTarget;
    let now = Instant::now();
    let mut w = Request::new(OpCode::RcRdmaWriteOnly, Psn::new(0));
    w.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY, dma_len: 0 });
    w.ack_req = true;
    assert!(resp.handle_request(now, &w, &mut t).executed);
    let mut r = Request::new(OpCode::RcRdmaReadRequest, Psn::new(1));
    r.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY, dma_len: 8 });
    assert!(resp.handle_request(now, &r, &mut t).executed);
    while resp.poll_transmit(now).is_some() {}
    // A duplicate of the WRITE is re-ACKed with PSN 0, not with the READ's PSN 1.
    assert!(!resp.handle_request(now, &w, &mut t).executed);
    assert_eq!(resp.poll_transmit(now).map(|a| a.psn.get()), Some(0));
}

/// The sequence that wedged rxe 6.1 in `proto_rxe.sh`'s 64 KiB ping-pongs (capture of
/// 2026-11-29, rxe as rc_pingpong's server; tests/interop/README.md, "rxe's stalled send
/// queue"): rxe sends a 64-packet SEND (PSNs 0x9f973e..0x9f977d, AckReq on the LAST only),
/// a stale retransmit timer fires at once and it sends the message again from its FIRST.
/// Only a duplicate asking for an ACK is re-ACKed, with its own PSN: before, each of the 62
/// duplicates that rxe got out answered with an ACK of 0x9f977d, and the second such ACK
/// made rxe complete the WQE it was still re-sending; its requester never sent again.
#[test]
fn rc_go_back_n_duplicates_are_reacked_only_where_ackreq_asks() {
    let now = Instant::now();
    let mtu = 1024;
    let first = Psn::new(0x9f_973e);
    let mut resp = Responder::new(ResponderConfig { mtu, rq_psn: first, ..resp_cfg() });
    let mut t = sim::SimTarget::new(4096);
    t.post_recv(56, 64 * mtu as u64);
    t.post_recv(57, 64 * mtu as u64);
    let packet = |i: u32| {
        let opcode = match i {
            0 => OpCode::RcSendFirst,
            63 => OpCode::RcSendLast,
            _ => OpCode::RcSendMiddle,
        };
        let mut r = Request::new(opcode, first.add(i));
        r.payload_len = mtu;
        r.ack_req = i == 63;
        r
    };
    let acks = |resp: &mut Responder| -> Vec<(u32, u32)> {
        std::iter::from_fn(|| resp.poll_transmit(now)).map(|a| (a.psn.get(), a.msn)).collect()
    };
    // The message, whole: one receive completes, one ACK (of its LAST).
    let mut completed = Vec::new();
    for i in 0..64 {
        let d = resp.handle_request(now, &packet(i), &mut t);
        assert!(d.executed);
        completed.extend(d.recv.map(|c| c.wr_id));
    }
    assert_eq!(completed, [56]);
    assert_eq!(acks(&mut resp), [(0x9f_977d, 1)]);
    // rxe's go-back-N from the FIRST, as far as it got (0x9f973e..0x9f977b): duplicates
    // without AckReq, neither executed nor answered.
    for i in 0..62 {
        let d = resp.handle_request(now, &packet(i), &mut t);
        assert!(!d.executed && d.recv.is_none() && d.place.is_none());
    }
    assert_eq!(acks(&mut resp), [], "duplicates without AckReq are not re-ACKed one by one");
    // rxe's AckReq counter runs on across an interrupted re-send, so a MIDDLE of the next
    // re-send can ask for an ACK (CI capture of 2026-11-29: the stall came back that way).
    // Its re-ACK names its own PSN: an ACK of 0x9f977d here would be the second one that
    // completes the WQE under rxe's requester.
    let mut middle = packet(10);
    middle.ack_req = true;
    assert!(!resp.handle_request(now, &middle, &mut t).executed);
    assert_eq!(acks(&mut resp), [(0x9f_9748, 1)]);
    // Had it gone on, its LAST (AckReq) gets the ACK of the last PSN, its own.
    assert!(!resp.handle_request(now, &packet(62), &mut t).executed);
    assert!(!resp.handle_request(now, &packet(63), &mut t).executed);
    assert_eq!(acks(&mut resp), [(0x9f_977d, 1)]);
    assert_eq!(resp.expected_psn(), first.add(64));
    assert_eq!(t.recvs.len(), 1, "receive 57 is still posted");
}

// ---- §3.3 READ and ATOMIC replay ----

#[test]
fn rc_lost_read_response_resumes_with_va_advanced_and_responder_replays_subrange() {
    let mut p = pair();
    let len = 4 * MTU;
    let id = p.post_read(MR_BASE + 1000, len);
    drop_responses_once(&mut p, |r| r.psn.get() == 1);
    p.drive();
    let reads: Vec<&Request> = p.sent.iter().map(|(_, r)| r).filter(|r| op(r) == Operation::RdmaReadRequest).collect();
    assert_eq!(reads.len(), 2);
    let again = reads[1];
    assert_eq!(again.psn.get(), 1, "reissued at comp.psn");
    let reth = again.reth.unwrap();
    assert_eq!(reth.va, MR_BASE + 1000 + u64::from(MTU), "VA += bytes done");
    assert_eq!(reth.dma_len, 3 * MTU, "len = remaining");
    // The replay starts at PSN 1 as a new stream (FIRST), not re-executed (msn counts once).
    let replay: Vec<(u32, Operation)> = p.responses.iter().skip(4).map(|(_, r)| (r.psn.get(), rop(r))).collect();
    assert_eq!(
        replay,
        [
            (1, Operation::RdmaReadResponseFirst),
            (2, Operation::RdmaReadResponseMiddle),
            (3, Operation::RdmaReadResponseLast)
        ]
    );
    assert_eq!(p.server.msn(), 1);
    assert_all_success(&p, &[id]);
    let o = 1000;
    assert_eq!(p.bufs[&id][..], p.target.mem[o..o + len as usize]);
}

/// The READ requests `p`'s requester sent, with their times: (PSN, RETH VA, RETH length).
fn read_requests(p: &Pair) -> Vec<(Duration, u32, u64, u32)> {
    p.sent
        .iter()
        .filter(|(_, r)| op(r) == Operation::RdmaReadRequest)
        .map(|(t, r)| {
            let reth = r.reth.expect("READ REQUEST carries a RETH");
            (*t - p.t0, r.psn.get(), reth.va, reth.dma_len)
        })
        .collect()
}

/// Drops the READ responses whose PSN is `psn`, the first `times` times each is sent.
fn drop_read_response(p: &mut Pair, psn: u32, times: usize) {
    let mut seen = 0;
    p.back.filter = Some(Box::new(move |pkt| {
        if pkt.resp.psn.get() == psn && pkt.resp.source.is_some() && seen < times {
            seen += 1;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
}

/// docs/rocev2-wire.md §3.4 "READ responses": response 10 of a 64-packet READ is lost.
/// Response 11 shows the gap and the READ is asked again at once (long before the
/// retransmit timer) from PSN 10, VA + 10 MTUs, for the 54 MTUs left: responses 0–9 are
/// not asked again, and responses 11–63 of the abandoned stream, arriving after the
/// re-read was asked, ask nothing more.
#[test]
fn rc_lost_read_response_is_reread_at_once_from_the_gap_only_once() {
    let mut p = pair();
    let len = 64 * MTU;
    let id = p.post_read(MR_BASE, len);
    drop_read_response(&mut p, 10, 1);
    p.drive();
    let reads = read_requests(&p);
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert_eq!((reads[0].1, reads[0].2, reads[0].3), (0, MR_BASE, len));
    let (at, psn, va, dma_len) = reads[1];
    assert_eq!((psn, va, dma_len), (10, MR_BASE + 10 * u64::from(MTU), 54 * MTU));
    assert!(at < ack_timeout(10).unwrap(), "asked at {at:?}, not on the timer");
    // The responder sent 0..63, then 10..63 again; nothing below 10 twice.
    let psns: Vec<u32> = p.responses.iter().map(|(_, r)| r.psn.get()).collect();
    assert_eq!(psns, (0..64).chain(10..64).collect::<Vec<u32>>());
    assert_eq!(rop(&p.responses[64].1), Operation::RdmaReadResponseFirst, "the re-read is a new stream");
    assert_eq!(p.server.msn(), 1, "a duplicate READ is not a new message");
    assert_all_success(&p, &[id]);
    assert_eq!(p.bufs[&id][..], p.target.mem[..len as usize]);
    assert_eq!(p.client.take_counts().retries, 1, "the re-read is one retry (completer_retry_err)");
}

/// docs/rocev2-wire.md §3.4 "READ responses": with four READs in flight, a response lost
/// in the first asks again for the rest of the first only; the responses of the three
/// later READs are taken from the stream they came in, not asked for again (rxe's
/// go-back-N would re-send every later READ REQUEST, and the responder all their data).
#[test]
fn rc_lost_read_response_rereads_that_read_only_not_the_later_ones() {
    let mut p = pair();
    let len = 8 * MTU;
    let ids: Vec<u64> = (0..4).map(|i| p.post_read(MR_BASE + u64::from(i * len), len)).collect();
    drop_read_response(&mut p, 3, 1);
    p.drive();
    let reads: Vec<(u32, u64, u32)> = read_requests(&p).into_iter().map(|(_, psn, va, l)| (psn, va, l)).collect();
    let mut want: Vec<(u32, u64, u32)> = (0..4).map(|i| (i * 8, MR_BASE + u64::from(i * len), len)).collect();
    want.push((3, MR_BASE + 3 * u64::from(MTU), 5 * MTU));
    assert_eq!(reads, want);
    assert_eq!(p.responses.len(), 32 + 5, "each response sent once, the five re-read ones twice");
    assert_all_success(&p, &ids);
    for (i, id) in ids.iter().enumerate() {
        let o = i * len as usize;
        assert_eq!(p.bufs[id][..], p.target.mem[o..o + len as usize], "READ {i}");
    }
}

/// docs/rocev2-wire.md §3.4 "READ responses": the re-read's own first response is lost
/// too. Its stream then restarts below where the abandoned one had reached, which shows
/// it is not the abandoned stream: asked again from the same PSN, still before the timer.
#[test]
fn rc_reread_whose_first_response_is_lost_is_asked_again_before_the_timer() {
    let mut p = pair();
    let len = 64 * MTU;
    let id = p.post_read(MR_BASE, len);
    drop_read_response(&mut p, 10, 2);
    p.drive();
    let reads = read_requests(&p);
    assert_eq!(reads.len(), 3, "{reads:?}");
    for &(at, psn, va, dma_len) in &reads[1..] {
        assert_eq!((psn, va, dma_len), (10, MR_BASE + 10 * u64::from(MTU), 54 * MTU));
        assert!(at < ack_timeout(10).unwrap(), "asked at {at:?}, not on the timer");
    }
    assert_all_success(&p, &[id]);
    assert_eq!(p.bufs[&id][..], p.target.mem[..len as usize]);
}

/// docs/rocev2-wire.md §3.4 "READ responses": the LAST response of a READ is lost; the
/// next READ's responses end its stream, so it is asked again for that one packet, and
/// the next READ (whose responses arrived) is not asked again.
#[test]
fn rc_lost_last_read_response_is_reread_when_the_next_read_answers() {
    let mut p = pair();
    let len = 4 * MTU;
    let a = p.post_read(MR_BASE, len);
    let b = p.post_read(MR_BASE + u64::from(len), len);
    drop_read_response(&mut p, 3, 1);
    p.drive();
    let reads: Vec<(u32, u64, u32)> = read_requests(&p).into_iter().map(|(_, psn, va, l)| (psn, va, l)).collect();
    assert_eq!(reads, [(0, MR_BASE, len), (4, MR_BASE + u64::from(len), len), (3, MR_BASE + 3 * u64::from(MTU), MTU)]);
    let last = p.responses.last().expect("responses").1;
    assert_eq!((last.psn.get(), rop(&last)), (3, Operation::RdmaReadResponseOnly));
    assert_all_success(&p, &[a, b]);
    assert_eq!(p.bufs[&a][..], p.target.mem[..len as usize]);
    assert_eq!(p.bufs[&b][..], p.target.mem[len as usize..2 * len as usize]);
}

/// docs/rocev2-wire.md §3.4 "READ responses": one response of the fourth READ shows three
/// earlier READs short at once (the last of the first, all of the second, the last of the
/// third). The three re-reads are one retry: with `retry_cnt` 1 every READ completes, each
/// short READ asked again from its own first missing response, before the timer.
#[test]
fn rc_rereads_found_together_use_one_retry() {
    let mut p = Pair::new(RequesterConfig { retry_cnt: 1, ..req_cfg() }, resp_cfg());
    let len = 4 * MTU;
    let ids: Vec<u64> = (0..4).map(|i| p.post_read(MR_BASE + u64::from(i * len), len)).collect();
    let mut dropped = Vec::new();
    p.back.filter = Some(Box::new(move |pkt| {
        let psn = pkt.resp.psn.get();
        if [3, 4, 5, 6, 7, 11].contains(&psn) && !dropped.contains(&psn) {
            dropped.push(psn);
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    p.drive();
    let reads = read_requests(&p);
    let again: Vec<(u32, u64, u32)> = reads[4..].iter().map(|&(_, psn, va, l)| (psn, va, l)).collect();
    let m = u64::from(MTU);
    assert_eq!(again, [(3, MR_BASE + 3 * m, MTU), (4, MR_BASE + 4 * m, len), (11, MR_BASE + 11 * m, MTU)]);
    assert!(reads.iter().all(|&(at, ..)| at < ack_timeout(10).unwrap()), "{reads:?}");
    assert_all_success(&p, &ids);
    for (i, id) in ids.iter().enumerate() {
        let o = i * len as usize;
        assert_eq!(p.bufs[id][..], p.target.mem[o..o + len as usize], "READ {i}");
    }
}

#[test]
fn rc_duplicate_read_outside_the_original_range_is_dropped() {
    let mut resp = Responder::new(resp_cfg());
    let mut t = ZeroTarget;
    let now = Instant::now();
    let mut r = Request::new(OpCode::RcRdmaReadRequest, Psn::new(0));
    r.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY, dma_len: 2 * MTU });
    r.ack_req = true;
    assert!(resp.handle_request(now, &r, &mut t).executed);
    while resp.poll_transmit(now).is_some() {}
    // Same PSN, VA before the original: not a sub-range.
    let mut bad = r;
    bad.reth = Some(crate::wire::RethRepr { va: MR_BASE - 8, rkey: RKEY, dma_len: MTU });
    let _ = resp.handle_request(now, &bad, &mut t);
    assert_eq!(resp.poll_transmit(now), None);
    // Another rkey: dropped too.
    bad.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY + 1, dma_len: MTU });
    let _ = resp.handle_request(now, &bad, &mut t);
    assert_eq!(resp.poll_transmit(now), None);
    // A proper sub-range at PSN 1 is replayed from PSN 1.
    let mut good = r;
    good.psn = Psn::new(1);
    good.reth = Some(crate::wire::RethRepr { va: MR_BASE + u64::from(MTU), rkey: RKEY, dma_len: MTU });
    let _ = resp.handle_request(now, &good, &mut t);
    let out = resp.poll_transmit(now).unwrap();
    assert_eq!((out.psn.get(), rop(&out)), (1, Operation::RdmaReadResponseOnly));
    assert_eq!(out.source.unwrap().va, MR_BASE + u64::from(MTU));
}

#[test]
fn rc_duplicate_atomic_replays_saved_original_without_reexecuting() {
    let mut p = pair();
    let va = MR_BASE + 512;
    let before = p.target.word(va);
    let id = p.post_fetch_add(va, 5);
    drop_responses_once(&mut p, |r| rop(r) == Operation::AtomicAcknowledge);
    p.drive();
    assert_eq!(p.sent.len(), 2, "the atomic was retransmitted after the timeout");
    assert_eq!(p.target.atomics_executed, 1);
    assert_eq!(p.target.word(va), before.wrapping_add(5));
    let acks: Vec<u64> = p.responses.iter().filter_map(|(_, r)| r.atomic_original).collect();
    assert_eq!(acks, [before, before], "the replay carries the saved original");
    assert_all_success(&p, &[id]);
    assert_eq!(p.completions[0].atomic_original, Some(before));
}

// ---- §3.3 ACK generation, §3.4 implicit ACK / NAK ----

#[test]
fn rc_responder_acks_only_packets_with_ackreq() {
    let mut resp = Responder::new(resp_cfg());
    let mut t = ZeroTarget;
    let now = Instant::now();
    let mut w = Request::new(OpCode::RcRdmaWriteFirst, Psn::new(0));
    w.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY, dma_len: 3 * MTU });
    w.payload_len = MTU;
    assert!(resp.handle_request(now, &w, &mut t).executed);
    assert_eq!(resp.poll_transmit(now), None, "no AckReq, no ACK");
    let mut m = Request::new(OpCode::RcRdmaWriteMiddle, Psn::new(1));
    m.payload_len = MTU;
    m.ack_req = true;
    assert!(resp.handle_request(now, &m, &mut t).executed);
    let ack = resp.poll_transmit(now).unwrap();
    assert_eq!((ack.psn.get(), ack.syndrome), (1, Some(Syndrome::ACK)));
    let mut l = Request::new(OpCode::RcRdmaWriteLast, Psn::new(2));
    l.payload_len = MTU;
    assert!(resp.handle_request(now, &l, &mut t).executed);
    assert_eq!(resp.poll_transmit(now), None);
    assert_eq!(resp.msn(), 1);
}

#[test]
fn rc_ackreq_on_message_end_and_every_65th_packet() {
    let mut req = Requester::new(RequesterConfig { mtu: MTU, ..RequesterConfig::TEMPLATE });
    req.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 100 * MTU, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    let now = Instant::now();
    let mut with_ackreq = Vec::new();
    let mut n = 0;
    while let Some(r) = req.poll_transmit(now) {
        if r.ack_req {
            with_ackreq.push(n);
        }
        n += 1;
    }
    assert_eq!(n, 100);
    assert_eq!(with_ackreq, [64, 99]);
}

/// docs/rocev2-wire.md §1.2 (network.md, "ACKs where the requester stops"): with
/// coalescing, a SEND's or WRITE's last packet asks for an ACK only with nothing queued
/// behind it; every 65th packet, every READ request and every FLUSH still ask.
#[test]
fn a_coalescing_requester_asks_where_it_stops() {
    let cfg = RequesterConfig { mtu: MTU, ack_req_coalescing: true, max_unacked_psns: 512, ..RequesterConfig::TEMPLATE };
    let mut req = Requester::new(cfg);
    let now = Instant::now();
    let asks = |req: &mut Requester| -> Vec<(Operation, bool)> {
        std::iter::from_fn(|| req.poll_transmit(now)).map(|r| (op(&r), r.ack_req)).collect()
    };
    // The indices of the packets that asked.
    let asked_at = |got: &[(Operation, bool)]| -> Vec<usize> { got.iter().enumerate().filter(|(_, (_, a))| *a).map(|(i, _)| i).collect() };
    for _ in 0..3 {
        req.post(SendWqe { opcode: WrOpcode::Send, length: 100, ..SendWqe::TEMPLATE }).unwrap();
    }
    assert_eq!(asks(&mut req), [(Operation::SendOnly, false), (Operation::SendOnly, false), (Operation::SendOnly, true)]);
    // A READ asks though a WRITE follows it; the WRITE, the last, asks.
    req.post(SendWqe { opcode: WrOpcode::RdmaRead, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    req.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    assert_eq!(asks(&mut req), [(Operation::RdmaReadRequest, true), (Operation::RdmaWriteOnly, true)]);
    // So does a FLUSH (answered by a READ response anyway) with a SEND behind it.
    req.post(SendWqe { opcode: WrOpcode::Flush, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    req.post(SendWqe { opcode: WrOpcode::Send, length: 8, ..SendWqe::TEMPLATE }).unwrap();
    assert_eq!(asks(&mut req), [(Operation::Flush, true), (Operation::SendOnly, true)]);
    // 100 one-packet SENDs queued at once: the 64th without a request asks (a message end
    // that makes 64), and the last.
    for _ in 0..100 {
        req.post(SendWqe { opcode: WrOpcode::Send, length: 8, ..SendWqe::TEMPLATE }).unwrap();
    }
    let got = asks(&mut req);
    let asked = asked_at(&got);
    assert_eq!(got.len(), 100);
    assert_eq!(asked, [63, 99]);
    // Three 64-packet WRITEs: each asks at its end, as without coalescing, and no packet
    // inside one asks. Three-packet SENDs: no end makes 64, so the 65th packet asks.
    for _ in 0..3 {
        req.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 64 * MTU, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    }
    let got = asks(&mut req);
    let asked = asked_at(&got);
    assert_eq!(asked, [63, 127, 191]);
    for _ in 0..30 {
        req.post(SendWqe { opcode: WrOpcode::Send, length: 3 * MTU, ..SendWqe::TEMPLATE }).unwrap();
    }
    let got = asks(&mut req);
    let asked = asked_at(&got);
    // The 21st message ends at packet 62 (63 without asking), packet 63 starts the 22nd
    // and packet 64, the 65th, asks; then only the last (89).
    assert_eq!(asked, [64, 89]);
    // Without coalescing (rxe's rule) every message end asks.
    let mut rxe_like = Requester::new(RequesterConfig { ack_req_coalescing: false, ..cfg });
    for _ in 0..3 {
        rxe_like.post(SendWqe { opcode: WrOpcode::Send, length: 100, ..SendWqe::TEMPLATE }).unwrap();
    }
    assert!(asks(&mut rxe_like).iter().all(|(_, a)| *a));
}

/// §3.3 "ACK generation": a message that ended without AckReq owes an ACK of its last PSN
/// (with the MSN after it) until a response at or after it is queued; a duplicate's
/// re-ACK names an earlier PSN and pays nothing; UC owes nothing.
#[test]
fn a_message_that_did_not_ask_is_acknowledged_once_its_run_is_handled() {
    let mut resp = Responder::new(resp_cfg());
    let mut t = ZeroTarget;
    let now = Instant::now();
    let write = |psn: u32, ack_req: bool| {
        let mut w = Request::new(OpCode::RcRdmaWriteOnly, Psn::new(psn));
        w.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY, dma_len: 0 });
        w.ack_req = ack_req;
        w
    };
    assert!(resp.handle_request(now, &write(0, false), &mut t).executed);
    assert!(resp.handle_request(now, &write(1, false), &mut t).executed);
    assert_eq!(resp.poll_transmit(now), None, "nothing asked");
    assert!(resp.acknowledge_owed());
    let ack = resp.poll_transmit(now).expect("the ACK owed");
    assert_eq!((ack.psn.get(), ack.syndrome, ack.msn), (1, Some(Syndrome::ACK), 2));
    assert_eq!(resp.poll_transmit(now), None);
    assert!(!resp.acknowledge_owed());
    assert_eq!(resp.poll_transmit(now), None, "paid once");
    // A later request that asks covers what the one before it owed.
    assert!(resp.handle_request(now, &write(2, false), &mut t).executed);
    assert!(resp.handle_request(now, &write(3, true), &mut t).executed);
    assert_eq!(resp.poll_transmit(now).map(|a| a.psn.get()), Some(3));
    assert!(!resp.acknowledge_owed());
    assert_eq!(resp.poll_transmit(now), None, "covered by the ACK of PSN 3");
    // A duplicate's re-ACK (PSN 3) does not cover PSN 4's debt.
    assert!(resp.handle_request(now, &write(4, false), &mut t).executed);
    assert!(!resp.handle_request(now, &write(3, true), &mut t).executed);
    assert_eq!(resp.poll_transmit(now).map(|a| a.psn.get()), Some(3));
    assert!(resp.acknowledge_owed());
    assert_eq!(resp.poll_transmit(now).map(|a| a.psn.get()), Some(4));
    // UC acknowledges nothing, owed or not.
    let mut uc = Responder::new(ResponderConfig { mode: Mode::Uc, ..resp_cfg() });
    let mut w = Request::new(OpCode::UcRdmaWriteOnly, Psn::new(0));
    w.reth = Some(crate::wire::RethRepr { va: MR_BASE, rkey: RKEY, dma_len: 0 });
    assert!(uc.handle_request(now, &w, &mut t).executed);
    assert!(!uc.acknowledge_owed());
    assert_eq!(uc.poll_transmit(now), None);
}

/// A message that did not ask, whose owed ACK is lost, while the request behind it never
/// arrives (as one whose bytes cannot be gathered never leaves): its go-back-N asks, as
/// rxe's does, so its duplicate is re-ACKed and it completes; only the request that never
/// arrived runs out of retries. (Re-sent without AckReq, the duplicate went unanswered
/// and the first message ended in RETRY_EXC_ERR too: CI, `verb_sequences`' lossy run.)
#[test]
fn a_coalesced_message_whose_ack_is_lost_asks_when_it_is_sent_again() {
    let mut p = Pair::new(RequesterConfig { ack_req_coalescing: true, retry_cnt: 2, ..req_cfg() }, resp_cfg());
    p.target.post_recv(100, 4096);
    p.target.post_recv(101, 4096);
    let first = p.post_send(bytes(100, 1));
    let second = p.post_send(bytes(100, 2));
    p.fwd.filter = Some(Box::new(|pkt| if pkt.req.psn.get() == 1 { Verdict::Drop } else { Verdict::Pass }));
    drop_responses_once(&mut p, |r| r.syndrome == Some(Syndrome::ACK));
    p.drive();
    let first_sends: Vec<bool> = p.sent.iter().filter(|(_, r)| r.psn.get() == 0).map(|(_, r)| r.ack_req).collect();
    assert_eq!(first_sends[..2], [false, true], "asked only when sent again: {first_sends:?}");
    let got: Vec<(u64, WcStatus)> = p.completions.iter().map(|c| (c.id, c.status)).collect();
    assert_eq!(got, [(first, WcStatus::Success), (second, WcStatus::RetryExcErr)]);
}

/// A message that did not ask, followed by a request the responder refuses, whose NAK is
/// lost: the responder (in ERR, silent from then on) sent the owed ACK ahead of the NAK,
/// so the message it executed completes and only the refused request runs out of retries
/// (as when every message asked; without the ACK first the executed message failed with
/// RETRY_EXC_ERR: `verb_sequences`' lossy run). The same holds for a placement that fails.
#[test]
fn an_owed_ack_goes_ahead_of_the_nak_that_ends_the_responder() {
    for lose_placement in [false, true] {
        let mut p = Pair::new(RequesterConfig { ack_req_coalescing: true, retry_cnt: 2, ..req_cfg() }, resp_cfg());
        let good = p.post_write(MR_BASE, bytes(100, 1));
        let bad = if lose_placement {
            p.lose_placement_of = Some(1);
            p.post_write(MR_BASE + 200, bytes(100, 2))
        } else {
            p.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 100, remote_va: MR_BASE, rkey: RKEY + 1, ..SendWqe::TEMPLATE }, bytes(100, 2))
        };
        drop_responses_once(&mut p, |r| matches!(r.syndrome, Some(Syndrome::Nak(_))));
        p.drive();
        assert!(!p.sent[0].1.ack_req, "the first WRITE did not ask");
        let responses: Vec<(u32, bool)> = p.responses.iter().map(|(_, r)| (r.psn.get(), r.syndrome.is_some_and(|s| s.is_ack()))).collect();
        assert_eq!(responses[..2], [(0, true), (1, false)], "the owed ACK, then the NAK (placement lost: {lose_placement})");
        let got: Vec<(u64, WcStatus)> = p.completions.iter().map(|c| (c.id, c.status)).collect();
        assert_eq!(got, [(good, WcStatus::Success), (bad, WcStatus::RetryExcErr)], "placement lost: {lose_placement}");
        assert_eq!(p.target.mem[..100], bytes(100, 1)[..]);
    }
}

/// A coalescing requester against a responder that acknowledges each run's debt: a stream
/// of SENDs completes with far fewer ACKs than messages, and a request lost in it is
/// resent (go-back-N) and completes as well.
#[test]
fn a_coalescing_stream_completes_with_fewer_acks_and_survives_a_loss() {
    for lose in [None, Some(3u32)] {
        let mut p = Pair::new(RequesterConfig { ack_req_coalescing: true, ..req_cfg() }, resp_cfg());
        for i in 0..8 {
            p.target.post_recv(100 + i, 4096);
        }
        let ids: Vec<u64> = (0..8).map(|i| p.post_send(bytes(100, i))).collect();
        if lose.is_some() {
            drop_requests_once(&mut p, &[3]);
        }
        p.drive();
        assert_all_success(&p, &ids);
        let acks = p.responses.iter().filter(|(_, r)| r.syndrome == Some(Syndrome::ACK)).count();
        assert!((1..8).contains(&acks), "{acks} ACKs for 8 messages (loss {lose:?})");
        for i in 0..8u8 {
            assert_eq!(p.target.recv_bufs[&(100 + u64::from(i))][..100], bytes(100, i)[..]);
        }
    }
}

#[test]
fn rc_one_ack_retires_many_wqes_implicitly() {
    let mut p = pair();
    let ids: Vec<u64> = (0..3).map(|i| p.post_write(MR_BASE + 100 * i, bytes(10, i as u8))).collect();
    // Lose the ACKs of PSN 0 and 1: the ACK of PSN 2 acknowledges all three.
    p.back.filter = Some(Box::new(|pkt| if pkt.resp.psn.get() < 2 { Verdict::Drop } else { Verdict::Pass }));
    p.drive();
    assert_eq!(p.sent.len(), 3, "no retransmission needed");
    assert_all_success(&p, &ids);
}

#[test]
fn rc_later_response_is_implicit_nak_for_read() {
    let mut p = pair();
    p.target.post_recv(1, 64);
    let r = p.post_read(MR_BASE, 64);
    let s = p.post_send(bytes(8, 1));
    drop_responses_once(&mut p, |r| rop(r) == Operation::RdmaReadResponseOnly);
    p.drive();
    // The SEND's ACK (PSN 1) skipped the READ (PSN 0): retry at once, not after a timeout.
    let again = p.sent.iter().filter(|(_, r)| op(r) == Operation::RdmaReadRequest).nth(1).expect("READ reissued");
    assert!(again.0 - p.t0 < ack_timeout(10).unwrap());
    assert_all_success(&p, &[r, s]);
    assert_eq!(p.bufs[&r][..], p.target.mem[..64]);
    assert_eq!(p.recv_completions.len(), 1, "the SEND was not executed twice");
}

// ---- §3.4 ERROR_RETRY: retry_cnt and the timer ----

#[test]
fn rc_retry_exhausted_after_retry_cnt_timeouts_completes_retry_exc_err() {
    let mut p = Pair::new(RequesterConfig { retry_cnt: 3, ..req_cfg() }, resp_cfg());
    p.fwd.filter = Some(Box::new(|_| Verdict::Drop));
    let a = p.post_write(MR_BASE, bytes(8, 1));
    let b = p.post_write(MR_BASE, bytes(8, 2));
    p.drive();
    let t = ack_timeout(10).unwrap();
    let times: Vec<Duration> = p.sent.iter().filter(|(_, r)| r.psn.get() == 0).map(|(at, _)| *at - p.t0).collect();
    assert_eq!(times, [Duration::ZERO, t, 2 * t, 3 * t], "first try and exactly retry_cnt retries");
    assert_eq!(p.elapsed(), 4 * t);
    let got: Vec<(u64, WcStatus, u32)> = p.completions.iter().map(|c| (c.id, c.status, c.vendor_err)).collect();
    assert_eq!(got, [(a, WcStatus::RetryExcErr, vendor_err::RETRY_EXHAUSTED), (b, WcStatus::WrFlushErr, vendor_err::FLUSHED)]);
    assert_eq!(p.client.state(), RequesterState::Error);
}

#[test]
fn rc_retry_cnt_7_is_seven_retries_by_default() {
    let mut p = Pair::new(RequesterConfig { retry_cnt: 7, ..req_cfg() }, resp_cfg());
    p.fwd.filter = Some(Box::new(|_| Verdict::Drop));
    p.post_write(MR_BASE, bytes(8, 1));
    p.drive();
    assert_eq!(p.sent.len(), 8);
    assert_eq!(p.completions[0].status, WcStatus::RetryExcErr);
}

#[test]
fn rc_retry_cnt_7_with_rxe_quirk_retries_forever() {
    let cfg = RequesterConfig { retry_cnt: 7, retry_cnt_7_infinite: true, ..req_cfg() };
    let mut p = Pair::new(cfg, resp_cfg());
    p.fwd.filter = Some(Box::new(|_| Verdict::Drop));
    p.post_write(MR_BASE, bytes(8, 1));
    let until = p.now + ack_timeout(10).unwrap() * 200;
    p.run_until(until);
    assert!(p.sent.len() > 150, "{} transmissions", p.sent.len());
    assert!(p.completions.is_empty());
    assert_eq!(p.client.retries_left(), None);
}

#[test]
fn rc_progress_refills_retry_cnt() {
    let mut p = Pair::new(RequesterConfig { retry_cnt: 1, ..req_cfg() }, resp_cfg());
    // Each WRITE loses its first transmission: one retry each. Without the refill on
    // progress the second loss would exhaust retry_cnt 1.
    drop_requests_once(&mut p, &[0, 1, 2]);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(p.post_write(MR_BASE, bytes(8, i)));
        p.drive();
    }
    assert_eq!(p.sent.len(), 6);
    assert_all_success(&p, &ids);
}

#[test]
fn rc_timeout_0_never_retransmits() {
    let mut p = Pair::new(RequesterConfig { timeout: 0, ..req_cfg() }, resp_cfg());
    p.fwd.filter = Some(Box::new(|_| Verdict::Drop));
    p.post_write(MR_BASE, bytes(8, 1));
    p.drive();
    assert_eq!(p.sent.len(), 1);
    assert_eq!(p.client.poll_timeout(), None);
    assert!(p.completions.is_empty());
    assert_eq!(p.client.outstanding(), 1);
    assert_eq!(p.client.state(), RequesterState::Ready);
}

// ---- §3.4 RNR ----

#[test]
fn rc_rnr_nak_waits_min_rnr_timer_then_retries() {
    let mut p = Pair::new(req_cfg(), ResponderConfig { min_rnr_timer: 12, ..resp_cfg() });
    let id = p.post_send(bytes(20, 1));
    while p.step() {}
    let until = p.now + Duration::from_micros(100);
    p.run_until(until);
    let (nak_at, nak) = p.responses[0];
    assert_eq!((nak.psn.get(), nak.syndrome), (0, Some(Syndrome::RnrNak { timer: 12 })));
    assert_eq!(p.server.expected_psn().get(), 0, "expected PSN unchanged");
    assert_eq!(p.client.state(), RequesterState::RnrWait);
    p.target.post_recv(7, 64);
    p.drive();
    assert_eq!(p.sent.len(), 2);
    // The NAK reached the requester one link latency after it left.
    assert_eq!(p.sent[1].0, nak_at + Faults::CLEAN.latency + rnr_delay(12));
    assert_all_success(&p, &[id]);
    assert_eq!(p.recv_completions[0].wr_id, 7);
}

#[test]
fn rc_rnr_retry_exhausted_completes_rnr_retry_exc_err() {
    let mut p = Pair::new(RequesterConfig { rnr_retry: 2, ..req_cfg() }, ResponderConfig { min_rnr_timer: 1, ..resp_cfg() });
    let id = p.post_send(bytes(20, 1));
    p.drive();
    assert_eq!(p.sent.len(), 3, "first try and two RNR retries");
    let rnr = p.responses.iter().filter(|(_, r)| matches!(r.syndrome, Some(Syndrome::RnrNak { .. }))).count();
    assert_eq!(rnr, 3);
    assert_eq!(p.completions[0].id, id);
    assert_eq!(p.completions[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(p.completions[0].vendor_err, vendor_err::RNR_EXHAUSTED);
}

#[test]
fn rc_rnr_retry_7_is_infinite() {
    let mut p = Pair::new(RequesterConfig { rnr_retry: 7, ..req_cfg() }, ResponderConfig { min_rnr_timer: 1, ..resp_cfg() });
    p.post_send(bytes(20, 1));
    let until = p.now + Duration::from_millis(20);
    p.run_until(until);
    assert!(p.sent.len() > 100, "{}", p.sent.len());
    assert!(p.completions.is_empty());
    assert_eq!(p.client.rnr_retries_left(), None);
}

// ---- §3.2 window, credits, fences ----

#[test]
fn rc_requester_stalls_beyond_128_unacked_psns() {
    let mut req = Requester::new(RequesterConfig { max_send_wr: 300, ..req_cfg() });
    for i in 0..200 {
        req.post(SendWqe { id: i, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    }
    let now = Instant::now();
    let mut n = 0;
    while req.poll_transmit(now).is_some() {
        n += 1;
    }
    assert_eq!(n, 129, "PSNs 0..=128: stall once req.psn > comp.psn + 128");
    assert_eq!(req.handle_response(now, &Response::ack(Psn::new(9), Syndrome::ACK, 10)), None);
    let mut more = 0;
    while req.poll_transmit(now).is_some() {
        more += 1;
    }
    assert_eq!(more, 10);
}

#[test]
fn rc_requester_window_follows_its_config() {
    let mut req = Requester::new(RequesterConfig { max_send_wr: 600, max_unacked_psns: 512, ..req_cfg() });
    for i in 0..600 {
        req.post(SendWqe { id: i, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    }
    let now = Instant::now();
    let mut n = 0;
    while req.poll_transmit(now).is_some() {
        n += 1;
    }
    assert_eq!(n, 513, "PSNs 0..=512: stall once req.psn > comp.psn + 512");
}

#[test]
fn rc_rd_atomic_credits_limit_outstanding_reads() {
    let mut p = Pair::new(RequesterConfig { max_rd_atomic: 2, ..req_cfg() }, resp_cfg());
    let ids: Vec<u64> = (0..4).map(|i| p.post_read(MR_BASE + 64 * i, 64)).collect();
    // Hold every response: only two READs may be outstanding.
    let now = p.now;
    let mut reqs = 0;
    while p.client.poll_transmit(now).is_some() {
        reqs += 1;
    }
    assert_eq!(reqs, 2);
    assert_eq!(p.client.rd_atomic_credits(), 0);
    let mut p = Pair::new(RequesterConfig { max_rd_atomic: 2, ..req_cfg() }, resp_cfg());
    let ids2: Vec<u64> = (0..4).map(|i| p.post_read(MR_BASE + 64 * i, 64)).collect();
    p.drive();
    assert_all_success(&p, &ids2);
    assert_eq!(p.client.rd_atomic_credits(), 2);
    let _ = ids;
    // max_rd_atomic 3 is rounded up to 4 (§3.1).
    assert_eq!(Requester::new(RequesterConfig { max_rd_atomic: 3, ..req_cfg() }).rd_atomic_credits(), 4);
}

#[test]
fn rc_fence_waits_for_earlier_reads() {
    let mut req = Requester::new(req_cfg());
    let now = Instant::now();
    req.post(SendWqe { id: 1, opcode: WrOpcode::RdmaRead, length: 64, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    req.post(SendWqe { id: 2, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, flags: SendFlags::SIGNALED | SendFlags::FENCE, ..SendWqe::TEMPLATE }).unwrap();
    let first = req.poll_transmit(now).unwrap();
    assert_eq!(op(&first), Operation::RdmaReadRequest);
    assert_eq!(req.poll_transmit(now), None, "the fenced WRITE waits");
    let mut resp = Response::ack(Psn::new(0), Syndrome::ACK, 1);
    resp.opcode = OpCode::RcRdmaReadResponseOnly;
    resp.payload_len = 64;
    assert!(req.handle_response(now, &resp).is_some());
    let second = req.poll_transmit(now).unwrap();
    assert_eq!(op(&second), Operation::RdmaWriteOnly);
    // Without FENCE a WRITE overtakes nothing but need not wait.
    let mut req = Requester::new(req_cfg());
    req.post(SendWqe { id: 1, opcode: WrOpcode::RdmaRead, length: 64, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    req.post(SendWqe { id: 2, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    assert!(req.poll_transmit(now).is_some());
    assert!(req.poll_transmit(now).is_some());
}

#[test]
fn rc_fence_after_a_go_back_n_waits_only_for_reads_before_it() {
    // A SEND, a fenced WRITE (no READ before it: it goes at once) and a READ (which takes
    // a credit). The SEND's packet is lost: the responder NAKs the WRITE's, the requester
    // goes back to the SEND and sends the WRITE again. The READ behind it was sent and
    // keeps its credit; the fence must not wait for it (it is sent after the WRITE).
    let mut p = pair();
    p.target.post_recv(100, 4096);
    let s = p.post_send(bytes(100, 1));
    let w = p.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 8, remote_va: MR_BASE, rkey: RKEY, flags: SendFlags::SIGNALED | SendFlags::FENCE, ..SendWqe::TEMPLATE }, bytes(8, 2));
    let r = p.post_read(MR_BASE + 64, 64);
    drop_requests_once(&mut p, &[0]);
    p.drive();
    let psns: Vec<u32> = p.sent.iter().map(|(_, r)| r.psn.get()).collect();
    assert_eq!(psns[..3], [0, 1, 2], "the fenced WRITE went at once, the READ after it");
    assert_all_success(&p, &[s, w, r]);
    assert_eq!(p.client.rd_atomic_credits(), crate::state::rd_atomic_depth(req_cfg().max_rd_atomic), "every credit back");
}

// ---- §3.3 errors → NAK → §4 statuses; flush ----

#[test]
fn rc_write_whose_memory_goes_before_the_copy_is_naked_not_left_to_the_timer() {
    // A WRITE of three packets whose region is deregistered after the machine checked
    // the second: the driver cannot place it, and the requester hears the NAK at once.
    let mut p = pair();
    let w = p.post_write(MR_BASE, bytes(3 * MTU as usize, 5));
    let s = p.post_send(bytes(8, 6));
    p.lose_placement_of = Some(1);
    p.drive();
    let got: Vec<(u64, WcStatus)> = p.completions.iter().map(|c| (c.id, c.status)).collect();
    assert_eq!(got, [(w, WcStatus::RemAccessErr), (s, WcStatus::WrFlushErr)]);
    assert!(p.elapsed() < ack_timeout(10).unwrap(), "answered before any retransmit timer");
    assert_eq!(p.server.state(), ResponderState::Error);
    let naks: Vec<(u32, Option<Syndrome>)> = p.responses.iter().map(|(_, r)| (r.psn.get(), r.syndrome)).filter(|(_, s)| matches!(s, Some(Syndrome::Nak(_)))).collect();
    assert_eq!(naks, [(1, Some(Syndrome::Nak(NakCode::RemoteAccessError)))]);
}

#[test]
fn rc_nak_invalid_request_completes_rem_inv_req_err_and_flushes_the_rest() {
    let mut p = Pair::new(req_cfg(), ResponderConfig { access: Access::LOCAL_WRITE | Access::REMOTE_READ, ..resp_cfg() });
    let w = p.post_write(MR_BASE, bytes(8, 1));
    let r = p.post_read(MR_BASE, 8);
    p.drive();
    assert_eq!(p.responses[0].1.syndrome, Some(Syndrome::Nak(NakCode::InvalidRequest)));
    let got: Vec<(u64, WcStatus)> = p.completions.iter().map(|c| (c.id, c.status)).collect();
    assert_eq!(got, [(w, WcStatus::RemInvReqErr), (r, WcStatus::WrFlushErr)]);
    assert_eq!(p.server.state(), ResponderState::Error);
    // A WQE posted after the error is flushed too, signaled or not.
    let late = p.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, flags: SendFlags::empty(), ..SendWqe::TEMPLATE }, bytes(8, 2));
    p.drive();
    assert_eq!((p.completions[2].id, p.completions[2].status), (late, WcStatus::WrFlushErr));
}

#[test]
fn rc_recv_too_small_naks_invalid_request_and_completes_recv_loc_len_err() {
    let mut p = pair();
    p.target.post_recv(5, 8);
    p.target.post_recv(6, 64);
    let s = p.post_send(bytes(20, 1));
    p.drive();
    assert_eq!(p.completions[0].id, s);
    assert_eq!(p.completions[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.recv_completions.len(), 1);
    assert_eq!((p.recv_completions[0].wr_id, p.recv_completions[0].status), (5, WcStatus::LocLenErr));
    assert_eq!(p.server.state(), ResponderState::Error);
}

#[test]
fn rc_bad_rkey_naks_remote_access_and_completes_write_with_imm_recv_rem_access_err() {
    let mut p = pair();
    p.target.post_recv(5, 64);
    let w = SendWqe { opcode: WrOpcode::RdmaWriteWithImm, length: 16, remote_va: MR_BASE, rkey: RKEY + 1, imm: 9, ..SendWqe::TEMPLATE };
    let id = p.post(w, bytes(16, 1));
    p.drive();
    assert_eq!(p.responses[0].1.syndrome, Some(Syndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!((p.completions[0].id, p.completions[0].status), (id, WcStatus::RemAccessErr));
    assert_eq!(p.recv_completions[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.recv_completions[0].vendor_err, vendor_err::REMOTE_RKEY);
    assert_eq!(p.server.state(), ResponderState::Error);
}

#[test]
fn rc_malformed_recv_naks_remote_operational_and_completes_recv_loc_qp_op_err() {
    let mut p = pair();
    p.target.post_recv(5, 64);
    p.target.malformed_recv = true;
    let s = p.post_send(bytes(20, 1));
    p.drive();
    assert_eq!(p.responses[0].1.syndrome, Some(Syndrome::Nak(NakCode::RemoteOperationalError)));
    assert_eq!((p.completions[0].id, p.completions[0].status), (s, WcStatus::RemOpErr));
    assert_eq!(p.recv_completions[0].status, WcStatus::LocQpOpErr);
    assert_eq!(p.server.state(), ResponderState::Error);
}

#[test]
fn rc_unknown_nak_code_completes_rem_op_err() {
    let mut req = Requester::new(req_cfg());
    let now = Instant::now();
    req.post(SendWqe { id: 1, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    let _ = req.poll_transmit(now).unwrap();
    let _ = req.handle_response(now, &Response::ack(Psn::new(0), Syndrome::Nak(NakCode::Unknown(0x1d)), 0));
    assert_eq!(req.poll_completion().map(|c| c.status), Some(WcStatus::RemOpErr));
}

#[test]
fn rc_send_with_invalid_invalidate_fails_recv_but_acks() {
    let mut p = pair();
    p.target.post_recv(5, 64);
    p.target.invalidate_ok = false;
    let w = SendWqe { opcode: WrOpcode::SendWithInv, length: 4, imm: 0x1234, ..SendWqe::TEMPLATE };
    let id = p.post(w, bytes(4, 1));
    p.drive();
    assert_all_success(&p, &[id]);
    assert_eq!(p.recv_completions[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.server.state(), ResponderState::Error);
}

#[test]
fn rc_opcode_sequence_missing_first_naks_invalid_request() {
    let mut resp = Responder::new(resp_cfg());
    let mut t = ZeroTarget;
    let now = Instant::now();
    let mut m = Request::new(OpCode::RcSendMiddle, Psn::new(0));
    m.payload_len = MTU;
    assert!(!resp.handle_request(now, &m, &mut t).executed);
    let nak = resp.poll_transmit(now).unwrap();
    assert_eq!((nak.psn.get(), nak.syndrome), (0, Some(Syndrome::Nak(NakCode::InvalidRequest))));
    assert_eq!(resp.state(), ResponderState::Error);
}

// ---- §3.5 UC and UD ----

#[test]
fn uc_completes_at_transmit_and_drops_a_message_with_a_psn_gap() {
    let req = RequesterConfig { mode: Mode::Uc, ..req_cfg() };
    let resp = ResponderConfig { mode: Mode::Uc, ..resp_cfg() };
    let mut p = Pair::new(req, resp);
    p.target.post_recv(1, 4096);
    p.target.post_recv(2, 4096);
    let a = p.post_send(bytes(3 * MTU as usize, 1));
    let b = p.post_send(bytes(10, 2));
    drop_requests_once(&mut p, &[1]);
    p.drive();
    assert_eq!(p.sent.len(), 4, "no retransmission");
    assert!(p.sent.iter().all(|(_, r)| !r.ack_req));
    assert!(p.responses.is_empty(), "no ACKs or NAKs");
    assert_all_success(&p, &[a, b]);
    // The first message lost its middle: dropped; its receive WQE takes the next message.
    assert_eq!(p.recv_completions.len(), 1);
    assert_eq!(p.recv_completions[0].wr_id, 1);
    assert_eq!(p.recv_completions[0].byte_len, 10);
    assert_eq!(p.target.recv_bufs[&1][..10], bytes(10, 2)[..]);
}

#[test]
fn uc_bad_rkey_drops_silently() {
    let mut p = Pair::new(RequesterConfig { mode: Mode::Uc, ..req_cfg() }, ResponderConfig { mode: Mode::Uc, ..resp_cfg() });
    let w = SendWqe { opcode: WrOpcode::RdmaWrite, length: 8, remote_va: MR_BASE, rkey: 1, ..SendWqe::TEMPLATE };
    let id = p.post(w, bytes(8, 1));
    p.drive();
    assert!(p.responses.is_empty());
    assert_all_success(&p, &[id]);
    assert_eq!(p.server.state(), ResponderState::Ready);
}

fn ud_pair() -> Pair {
    let req = RequesterConfig { mode: Mode::Ud, ..req_cfg() };
    let resp = ResponderConfig { mode: Mode::Ud, qkey: 0x42, ..resp_cfg() };
    Pair::new(req, resp)
}

fn ud_send(p: &mut Pair, len: usize, qkey: u32) -> u64 {
    let w = SendWqe { length: len as u32, ud: Some(UdDest { remote_qpn: 9, remote_qkey: qkey }), ..SendWqe::TEMPLATE };
    p.post(w, bytes(len, 3))
}

#[test]
fn ud_wrong_qkey_and_missing_recv_drop_silently() {
    let mut p = ud_pair();
    let a = ud_send(&mut p, 10, 0x43);
    let b = ud_send(&mut p, 10, 0x42);
    p.drive();
    assert_all_success(&p, &[a, b]);
    assert!(p.recv_completions.is_empty() && p.responses.is_empty());
    p.target.post_recv(1, 100);
    let c = ud_send(&mut p, 10, 0x42);
    p.drive();
    assert_eq!(p.completions.last().map(|x| x.id), Some(c));
    let rc = p.recv_completions[0];
    assert_eq!((rc.wr_id, rc.byte_len, rc.src_qp), (1, 40 + 10, req_cfg().qpn));
    assert!(rc.flags.contains(WcFlags::GRH));
    assert_eq!(p.target.recv_bufs[&1][40..50], bytes(10, 3)[..]);
    assert_eq!(p.sent[2].1.deth.map(|d| d.qkey), Some(0x42));
    assert_eq!(p.sent[2].1.dest_qpn, Some(9));
}

#[test]
fn ud_message_above_mtu_completes_without_sending() {
    let mut p = ud_pair();
    let id = ud_send(&mut p, MTU as usize + 1, 0x42);
    p.drive();
    assert!(p.sent.is_empty());
    assert_all_success(&p, &[id]);
}

// ---- descriptors ↔ wire ----

#[test]
fn request_and_response_round_trip_through_the_wire_repr() {
    let mut req = Requester::new(req_cfg());
    let now = Instant::now();
    req.post(SendWqe { id: 1, opcode: WrOpcode::RdmaWriteWithImm, length: 2 * MTU, remote_va: MR_BASE, rkey: RKEY, imm: 7, ..SendWqe::TEMPLATE }).unwrap();
    req.post(SendWqe { id: 2, opcode: WrOpcode::AtomicCmpAndSwp, remote_va: MR_BASE, rkey: RKEY, compare_add: 1, swap: 2, ..SendWqe::TEMPLATE }).unwrap();
    while let Some(r) = req.poll_transmit(now) {
        let repr = r.to_repr(0x99);
        assert!(repr.headers_match_opcode(), "{:?}", r.opcode);
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut crate::wire::RocePacket::new_unchecked(&mut buf[..]));
        let parsed = crate::wire::RoceRepr::parse(&crate::wire::RocePacket::new_checked(&buf[..]).unwrap()).unwrap();
        let back = Request::from_repr(&parsed, &[]);
        assert_eq!(Request { wqe_id: r.wqe_id, payload_offset: r.payload_offset, ..back }, r);
    }
    let resp = Response { atomic_original: Some(5), ..Response::ack(Psn::new(3), Syndrome::ACK, 4) };
    let resp = Response { opcode: OpCode::RcAtomicAcknowledge, ..resp };
    let repr = resp.to_repr(0x11);
    assert!(repr.headers_match_opcode());
    assert_eq!(Response::from_repr(&repr), resp);
}

// ---- soak: random loss, duplication, reordering ----

fn soak(seed: u64) {
    let faults = Faults {
        latency: Duration::from_micros(5),
        loss: 0.08,
        duplicate: 0.05,
        reorder: 0.15,
        reorder_by: Duration::from_micros(40),
    };
    let cfg = RequesterConfig { retry_cnt_7_infinite: true, max_rd_atomic: 4, ..req_cfg() };
    let mut p = Pair::with_faults(cfg, resp_cfg(), faults, faults, seed);
    let mut rng = crate::fault::Rng::new(seed ^ 0xabcd);
    let counter = MR_BASE + 8 * 1024;
    let start = p.target.word(counter);
    let mut ids = Vec::new();
    let mut sends = Vec::new();
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    let mut adds = 0u64;
    for i in 0..24u64 {
        match rng.below(4) {
            0 => {
                let data = bytes(rng.below(3 * u64::from(MTU) + 1) as usize, i as u8);
                p.target.post_recv(1000 + i, 4096);
                let id = p.post_send(data.clone());
                sends.push((1000 + i, data));
                ids.push(id);
            }
            1 => {
                let data = bytes(1 + rng.below(3 * u64::from(MTU)) as usize, i as u8);
                let va = MR_BASE + 16 * 1024 + i * 1024;
                ids.push(p.post_write(va, data.clone()));
                writes.push((va, data));
            }
            2 => {
                let len = rng.below(3 * u64::from(MTU)) as u32;
                let va = MR_BASE + 40 * 1024 + i * 8;
                let id = p.post_read(va, len);
                reads.push((id, va, len));
                ids.push(id);
            }
            _ => {
                ids.push(p.post_fetch_add(counter, i + 1));
                adds += i + 1;
            }
        }
    }
    p.drive_bounded(200_000);
    assert_all_success(&p, &ids);
    // Every message delivered exactly once, in order.
    let recv_ids: Vec<u64> = p.recv_completions.iter().map(|c| c.wr_id).collect();
    let want: Vec<u64> = sends.iter().map(|(w, _)| *w).collect();
    assert_eq!(recv_ids, want, "seed {seed}");
    for (c, (wr, data)) in p.recv_completions.iter().zip(&sends) {
        assert_eq!((c.status, c.byte_len as usize), (WcStatus::Success, data.len()), "seed {seed}");
        assert_eq!(p.target.recv_bufs[wr][..data.len()], data[..], "seed {seed}");
    }
    for (va, data) in &writes {
        let o = (va - MR_BASE) as usize;
        assert_eq!(p.target.mem[o..o + data.len()], data[..], "seed {seed}");
    }
    for (id, va, len) in &reads {
        let o = (va - MR_BASE) as usize;
        assert_eq!(p.bufs[id][..], p.target.mem[o..o + *len as usize], "seed {seed}");
    }
    assert_eq!(p.target.word(counter), start.wrapping_add(adds), "atomics executed exactly once (seed {seed})");
    // PSNs executed by the responder strictly increase: nothing executed twice.
    assert!(p.executed.windows(2).all(|w| Psn::new(w[1]).diff(Psn::new(w[0])) > 0), "seed {seed}");
}

#[test]
fn soak_fixed_seeds_deliver_exactly_once_in_order() {
    for seed in 0..40 {
        soak(seed);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, failure_persistence: None, ..Default::default() })]
    #[test]
    fn soak_random_seeds_deliver_exactly_once_in_order(seed in proptest::prelude::any::<u64>()) {
        soak(seed);
    }
}

/// A target with no memory rules, for responder unit tests.
struct ZeroTarget;

impl Target for ZeroTarget {
    fn check_rkey(&mut self, _: u32, _: u64, _: u64, _: Access) -> Result<(), crate::violation::Violation> {
        Ok(())
    }
    fn take_recv(&mut self) -> Option<RecvSlot> {
        Some(RecvSlot { wr_id: 1, capacity: 1 << 20 })
    }
    fn atomic(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, crate::violation::Violation> {
        Ok(0)
    }
    fn atomic_write(&mut self, _: u32, _: u64, _: u64) -> Result<(), crate::violation::Violation> {
        Ok(())
    }
    fn flush(&mut self, _: u32, _: u64, _: u32, _: crate::wire::FethRepr) -> Result<(), crate::violation::Violation> {
        Ok(())
    }
    fn invalidate(&mut self, _: u32) -> bool {
        true
    }
}

// ---- Whole messages: the same-host transport's use of the machines ----

fn wqe(opcode: WrOpcode, length: u32) -> SendWqe {
    SendWqe { opcode, length, remote_va: MR_BASE, rkey: RKEY, imm: 0x1234, ..SendWqe::TEMPLATE }
}

#[test]
fn message_is_one_only_request_with_ackreq() {
    let w = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::RdmaWrite, 1 << 20), Psn::new(7));
    assert_eq!((op(&w), w.psn, w.ack_req, w.payload_len), (Operation::RdmaWriteOnly, Psn::new(7), true, 1 << 20));
    assert_eq!(w.reth.map(|r| (r.va, r.rkey, r.dma_len)), Some((MR_BASE, RKEY, 1 << 20)));

    let s = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::SendWithImm, 5000), Psn::new(0));
    assert_eq!((op(&s), s.imm, s.payload_len), (Operation::SendOnlyWithImmediate, Some(0x1234), 5000));

    let r = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::RdmaRead, 1 << 31), Psn::new(0));
    assert_eq!((op(&r), r.reth.map(|r| r.dma_len)), (Operation::RdmaReadRequest, Some(1 << 31)));

    let uc = Request::message(Mode::Uc, 0x11, &wqe(WrOpcode::Send, 10), Psn::new(0));
    assert!(!uc.ack_req, "UC asks for no ACK");

    let ud_wqe = SendWqe { ud: Some(UdDest { remote_qpn: 0x22, remote_qkey: 9 }), ..wqe(WrOpcode::Send, 10) };
    let ud = Request::message(Mode::Ud, 0x11, &ud_wqe, Psn::new(0));
    assert_eq!(ud.deth.map(|d| (d.qkey, d.src_qp)), Some((9, 0x11)));
    assert_eq!(ud.dest_qpn, Some(0x22));
}

#[test]
fn unsegmented_responder_executes_whole_message_and_acks() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(1 << 16);
    let mut resp = Responder::new(ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE });
    let w = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::RdmaWrite, 40_000), resp.expected_psn());
    let d = resp.handle_request(now, &w, &mut t);
    assert_eq!(d.place, Some(Placement::Memory { rkey: RKEY, va: MR_BASE }));
    assert!(d.executed && d.violation.is_none());
    let ack = resp.poll_transmit(now).expect("an ACK");
    assert_eq!((ack.syndrome, ack.psn), (Some(Syndrome::ACK), w.psn));
    assert!(resp.poll_transmit(now).is_none());
    assert_eq!(resp.expected_psn(), Psn::new(1), "one PSN per message");

    let r = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::RdmaRead, 40_000), resp.expected_psn());
    let _ = resp.handle_request(now, &r, &mut t);
    let only = resp.poll_transmit(now).expect("a READ response");
    assert_eq!((rop(&only), only.payload_len), (Operation::RdmaReadResponseOnly, 40_000));
    assert_eq!(resp.expected_psn(), Psn::new(2));
}

#[test]
fn refusal_names_the_violation_in_the_delivery() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(4096);
    let mut resp = Responder::new(ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE });
    let send = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::Send, 8), resp.expected_psn());
    let d = resp.handle_request(now, &send, &mut t);
    assert_eq!(d.violation, Some(Violation::ReceiveNotReady), "no receive posted: RNR");
    assert_eq!(resp.state(), ResponderState::Ready, "RNR is not fatal");
    let _ = resp.poll_transmit(now);

    let bad = SendWqe { rkey: RKEY + 1, ..wqe(WrOpcode::RdmaWrite, 8) };
    let w = Request::message(Mode::Rc, 0x11, &bad, resp.expected_psn());
    let d = resp.handle_request(now, &w, &mut t);
    assert_eq!(d.violation, Some(Violation::RkeyUnknown));
    assert_eq!(resp.state(), ResponderState::Error);
}

#[test]
fn reconfigure_keeps_sequence_and_applies_new_access() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(4096);
    let cfg = ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE };
    let mut resp = Responder::new(cfg);
    let w = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::RdmaWrite, 8), resp.expected_psn());
    assert!(resp.handle_request(now, &w, &mut t).executed);
    let _ = resp.poll_transmit(now);
    resp.reconfigure(ResponderConfig { access: Access::REMOTE_READ, ..cfg });
    assert_eq!(resp.expected_psn(), Psn::new(1), "sequence state kept");
    let w = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::RdmaWrite, 8), resp.expected_psn());
    assert_eq!(resp.handle_request(now, &w, &mut t).violation, Some(Violation::QpAccessDenied));
}

/// A response naming a PSN that was never sent (a "ghost") is dropped: it acknowledges
/// nothing, does not move `comp.psn` past `req.psn`, and leaves the retransmit timer
/// running. Found by the `requester_acks` fuzz target (fuzz/regressions/requester_acks/):
/// with only the FIRST packet of a three-packet SEND sent, an ACK for PSN 2 set
/// `comp.psn` to 3 while `req.psn` was 1.
#[test]
fn rc_response_for_unsent_psn_is_dropped() {
    let now = Instant::now();
    let mut r = Requester::new(req_cfg());
    r.post(SendWqe { id: 1, opcode: WrOpcode::Send, length: 3 * MTU, ..SendWqe::TEMPLATE }).unwrap();
    let first = r.poll_transmit(now).expect("SEND FIRST");
    assert_eq!((op(&first), first.psn.get()), (Operation::SendFirst, 0));
    let timer = r.poll_timeout();
    assert!(timer.is_some());
    for syndrome in [Syndrome::ACK, Syndrome::Nak(NakCode::PsnSequenceError)] {
        assert_eq!(r.handle_response(now, &Response::ack(Psn::new(2), syndrome, 1)), None);
        assert_eq!((r.comp_psn().get(), r.req_psn().get()), (0, 1), "{syndrome:?}");
        assert_eq!(r.state(), RequesterState::Ready);
        assert_eq!(r.poll_timeout(), timer);
        assert_eq!(r.poll_completion(), None);
    }
    // The rest of the SEND goes out as usual, and the real ACK completes it.
    let rest: Vec<u32> = std::iter::from_fn(|| r.poll_transmit(now)).map(|q| q.psn.get()).collect();
    assert_eq!(rest, [1, 2]);
    assert_eq!(r.handle_response(now, &Response::ack(Psn::new(2), Syndrome::ACK, 1)), None);
    assert_eq!(r.poll_completion().map(|c| (c.id, c.status)), Some((1, WcStatus::Success)));
    assert_eq!(r.comp_psn().get(), 3);
}

/// A late ACK of a WQE's last PSN that arrives while a go-back-N is re-sending the WQE
/// completes it. Found by the `requester_acks` fuzz target: the WQE stayed uncompleted with
/// `comp.psn` past its last PSN, and the next rewind sent an empty SEND LAST with a new
/// PSN (shifting every later PSN by one; the responder NAKs it as out of sequence).
#[test]
fn rc_late_ack_of_last_psn_completes_wqe_being_resent() {
    let now = Instant::now();
    let mut r = Requester::new(req_cfg());
    r.post(SendWqe { id: 1, opcode: WrOpcode::Send, length: 3 * MTU, ..SendWqe::TEMPLATE }).unwrap();
    let sent: Vec<u32> = std::iter::from_fn(|| r.poll_transmit(now)).map(|q| q.psn.get()).collect();
    assert_eq!(sent, [0, 1, 2]);
    // The ACK is late: the retransmit timer fires and the go-back-N re-sends PSN 0.
    let at = r.poll_timeout().expect("retransmit timer");
    r.handle_timeout(at);
    let again = r.poll_transmit(at).expect("go-back-N");
    assert_eq!((op(&again), again.psn.get()), (Operation::SendFirst, 0));
    // Now the ACK of the first transmission arrives.
    assert_eq!(r.handle_response(at, &Response::ack(Psn::new(2), Syndrome::ACK, 1)), None);
    assert_eq!(r.poll_completion().map(|c| (c.id, c.status)), Some((1, WcStatus::Success)));
    assert_eq!((r.comp_psn().get(), r.req_psn().get()), (3, 3));
    assert_eq!(r.poll_transmit(at), None);
    assert!(r.is_idle());
}

/// A plain ACK naming the PSN of a READ or an atomic does not complete it: they complete
/// only with their data. Found by the `requester_acks` fuzz target: a CMP_SWAP completed
/// with success and no original value, a one-packet READ with nothing placed.
#[test]
fn rc_plain_ack_does_not_complete_read_or_atomic() {
    let now = Instant::now();
    for opcode in [WrOpcode::RdmaRead, WrOpcode::AtomicCmpAndSwp, WrOpcode::AtomicFetchAndAdd] {
        let mut r = Requester::new(req_cfg());
        let w = SendWqe { id: 1, opcode, length: 8, remote_va: MR_BASE, rkey: RKEY, ..SendWqe::TEMPLATE };
        r.post(w).unwrap();
        let q = r.poll_transmit(now).expect("request");
        assert_eq!(r.handle_response(now, &Response::ack(q.psn, Syndrome::ACK, 1)), None);
        assert_eq!(r.poll_completion(), None, "{opcode:?}");
        assert_eq!(r.comp_psn().get(), 0, "{opcode:?}");
        assert!(r.poll_timeout().is_some(), "{opcode:?}: the timer still runs");
        // Its real response completes it.
        let resp = if opcode == WrOpcode::RdmaRead {
            Response { opcode: OpCode::RcRdmaReadResponseOnly, payload_len: 8, ..Response::ack(q.psn, Syndrome::ACK, 1) }
        } else {
            Response { opcode: OpCode::RcAtomicAcknowledge, atomic_original: Some(5), ..Response::ack(q.psn, Syndrome::ACK, 1) }
        };
        let _ = r.handle_response(now, &resp);
        let c = r.poll_completion().expect("completion");
        assert_eq!(c.status, WcStatus::Success, "{opcode:?}");
        assert_eq!(c.atomic_original, (opcode != WrOpcode::RdmaRead).then_some(5));
    }
}

// ---- §1.8 XRC: RC with an XRCETH on every request ----

const XRC_SRQ: u32 = 0x42;

fn xrc_pair() -> Pair {
    let mut p = Pair::new(req_cfg(), ResponderConfig { xrc: true, ..resp_cfg() });
    p.target.xrc_srqs.push(XRC_SRQ);
    p
}

/// The bytes of `r` to `dest_qp` as the network transport sends them (ICRC left zero).
fn emitted(r: &Request, dest_qp: u32) -> Vec<u8> {
    let repr = r.to_repr(dest_qp);
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut crate::wire::roce::Packet::new_unchecked(&mut buf[..]));
    buf
}

#[test]
fn xrc_requests_carry_xrceth_on_every_packet_and_round_trip_the_wire() {
    let mut p = xrc_pair();
    p.target.post_recv(1, 4096);
    let x = Some(XRC_SRQ);
    let data = bytes(3 * MTU as usize + 5, 4);
    let send = p.post(SendWqe { opcode: WrOpcode::Send, length: data.len() as u32, xrc_srq: x, ..SendWqe::TEMPLATE }, data.clone());
    let wdata = bytes(2 * MTU as usize, 8);
    let w = SendWqe { opcode: WrOpcode::RdmaWrite, length: wdata.len() as u32, remote_va: MR_BASE, rkey: RKEY, xrc_srq: x, ..SendWqe::TEMPLATE };
    let write = p.post(w, wdata.clone());
    let r = SendWqe { opcode: WrOpcode::RdmaRead, length: 2 * MTU, remote_va: MR_BASE, rkey: RKEY, xrc_srq: x, ..SendWqe::TEMPLATE };
    let read = p.post(r, vec![0; 2 * MTU as usize]);
    let before = p.target.word(MR_BASE + 1024);
    let fa = SendWqe { opcode: WrOpcode::AtomicFetchAndAdd, remote_va: MR_BASE + 1024, rkey: RKEY, compare_add: 3, xrc_srq: x, ..SendWqe::TEMPLATE };
    let atomic = p.post(fa, vec![0; 8]);
    p.drive();
    assert_all_success(&p, &[send, write, read, atomic]);
    assert_eq!(p.target.recv_bufs[&1][..data.len()], data[..]);
    assert_eq!(p.target.mem[..wdata.len()], wdata[..]);
    assert_eq!(p.bufs[&read], wdata[..2 * MTU as usize]);
    assert_eq!(p.bufs[&atomic], before.to_ne_bytes());
    assert_eq!(p.target.word(MR_BASE + 1024), before + 3);
    // SEND FIRST/MIDDLE/MIDDLE/LAST, WRITE FIRST/LAST, READ, FETCH_ADD.
    assert_eq!(p.sent.len(), 8);
    for (_, q) in &p.sent {
        assert_eq!(q.opcode.transport(), crate::wire::Transport::Xrc, "{:?}", q.opcode);
        assert_eq!(q.xrc_srq, x);
        // BTH, then the XRCETH: a reserved byte and the 24-bit SRQ number.
        let b = emitted(q, 0x99);
        assert_eq!(b[0], 0xa0 | op(q) as u8);
        assert_eq!(b[12..16], [0, 0, 0, 0x42]);
        let parsed = crate::wire::roce::Repr::parse(&crate::wire::roce::Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(parsed.xrceth.map(|h| h.xrc_srq), x);
        let back = Request::from_repr(&parsed, &b[parsed.header_len()..parsed.header_len() + parsed.payload_len]);
        assert_eq!((back.opcode, back.psn, back.xrc_srq, back.reth, back.atomic), (q.opcode, q.psn, q.xrc_srq, q.reth, q.atomic));
    }
    // The responder asked for the SRQ once per request packet it executed.
    assert_eq!(p.target.xrc_asked, [XRC_SRQ; 8]);
    // Responses are XRC's too (ACK, READ responses, ATOMIC ACK) and carry no XRCETH.
    assert!(!p.responses.is_empty());
    for (_, r) in &p.responses {
        assert_eq!(r.opcode.transport(), crate::wire::Transport::Xrc, "{:?}", r.opcode);
        assert!(r.to_repr(0x11).xrceth.is_none());
    }
    let ops: Vec<Operation> = p.responses.iter().map(|(_, r)| rop(r)).collect();
    assert!(ops.contains(&Operation::RdmaReadResponseFirst) && ops.contains(&Operation::AtomicAcknowledge));
}

#[test]
fn xrc_unknown_srq_naks_invalid_request_and_takes_no_receive() {
    let mut p = xrc_pair();
    p.target.post_recv(1, 4096);
    let id = p.post(SendWqe { opcode: WrOpcode::Send, length: 16, xrc_srq: Some(XRC_SRQ + 1), ..SendWqe::TEMPLATE }, bytes(16, 1));
    p.drive();
    assert_eq!(p.target.xrc_asked, [XRC_SRQ + 1]);
    let nak: Vec<Option<Syndrome>> = p.responses.iter().map(|(_, r)| r.syndrome).collect();
    assert_eq!(nak, [Some(Syndrome::Nak(NakCode::InvalidRequest))]);
    assert_eq!(p.responses[0].1.opcode, OpCode::XrcAcknowledge);
    let c: Vec<(u64, WcStatus)> = p.completions.iter().map(|c| (c.id, c.status)).collect();
    assert_eq!(c, [(id, WcStatus::RemInvReqErr)]);
    assert_eq!(p.server.state(), ResponderState::Error, "invalid request is fatal at the responder");
    assert_eq!(p.target.recvs.len(), 1, "no receive was taken");
    assert!(p.recv_completions.is_empty());
}

#[test]
fn xrc_write_to_unknown_srq_is_refused_before_the_rkey_check() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(4096);
    let mut resp = Responder::new(ResponderConfig { xrc: true, ..resp_cfg() });
    // An RKEY the target does not know: the SRQ check comes first, so the NAK is an
    // invalid request, not a remote access error.
    let w = SendWqe { xrc_srq: Some(7), rkey: RKEY + 1, ..wqe(WrOpcode::RdmaWrite, 8) };
    let mut r = Request::new(OpCode::Unknown(0), resp.expected_psn());
    requester::segment(Mode::Rc, 0x11, &w, 0, MTU, &mut r);
    assert_eq!(r.opcode, OpCode::XrcRdmaWriteOnly);
    let d = resp.handle_request(now, &r, &mut t);
    assert_eq!(d.violation, Some(Violation::XrcSrqInvalid));
    assert_eq!(Violation::XrcSrqInvalid.nak().requester_status(), Some(WcStatus::RemInvReqErr));
    assert_eq!(Violation::XrcSrqInvalid.vendor_err(), vendor_err::REMOTE_XRC_SRQ);
    let nak = resp.poll_transmit(now).expect("a NAK");
    assert_eq!((nak.opcode, nak.syndrome), (OpCode::XrcAcknowledge, Some(Syndrome::Nak(NakCode::InvalidRequest))));
}

#[test]
fn xrc_target_drops_rc_requests_and_rc_responder_drops_xrc_requests() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(4096);
    t.xrc_srqs.push(XRC_SRQ);
    t.post_recv(1, 64);
    let rc = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::Send, 8), Psn::new(0));
    let xrc = Request::message(Mode::Rc, 0x11, &SendWqe { xrc_srq: Some(XRC_SRQ), ..wqe(WrOpcode::Send, 8) }, Psn::new(0));
    assert_eq!(xrc.opcode, OpCode::XrcSendOnly);
    for (cfg, req) in [(ResponderConfig { xrc: true, ..resp_cfg() }, rc), (resp_cfg(), xrc)] {
        let mut resp = Responder::new(cfg);
        let d = resp.handle_request(now, &req, &mut t);
        assert_eq!(d, Delivery::default(), "{:?} to xrc={}", req.opcode, cfg.xrc);
        assert!(resp.poll_transmit(now).is_none());
        assert_eq!(resp.expected_psn(), Psn::new(0));
    }
    assert!(t.xrc_asked.is_empty());
    assert_eq!(t.recvs.len(), 1);
}

#[test]
fn xrc_requester_refuses_flush_atomic_write_and_non_rc_modes() {
    let mut r = Requester::new(req_cfg());
    for opcode in [WrOpcode::Flush, WrOpcode::AtomicWrite] {
        let w = SendWqe { xrc_srq: Some(XRC_SRQ), ..wqe(opcode, 8) };
        assert_eq!(r.post(w), Err(PostError::Opcode(opcode)));
    }
    let mut uc = Requester::new(RequesterConfig { mode: Mode::Uc, ..req_cfg() });
    let w = SendWqe { xrc_srq: Some(XRC_SRQ), ..wqe(WrOpcode::Send, 8) };
    assert_eq!(uc.post(w), Err(PostError::Opcode(WrOpcode::Send)));
}

#[test]
fn xrc_srq_changed_inside_a_message_naks_invalid_request_and_fails_its_receive() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(4096);
    t.xrc_srqs.extend([XRC_SRQ, XRC_SRQ + 1]);
    t.post_recv(1, 4096);
    let mut resp = Responder::new(ResponderConfig { xrc: true, ..resp_cfg() });
    let w = SendWqe { xrc_srq: Some(XRC_SRQ), ..wqe(WrOpcode::Send, 2 * MTU) };
    let mut first = Request::new(OpCode::Unknown(0), Psn::new(0));
    requester::segment(Mode::Rc, 0x11, &w, 0, MTU, &mut first);
    assert_eq!(first.opcode, OpCode::XrcSendFirst);
    assert!(resp.handle_request(now, &first, &mut t).executed);
    // The LAST packet names another SRQ (of the same domain): refused, and the receive the
    // message holds completes in error.
    let mut last = Request::new(OpCode::Unknown(0), Psn::new(1));
    requester::segment(Mode::Rc, 0x11, &SendWqe { xrc_srq: Some(XRC_SRQ + 1), ..w }, MTU, MTU, &mut last);
    assert_eq!((last.opcode, last.xrc_srq), (OpCode::XrcSendLast, Some(XRC_SRQ + 1)));
    let d = resp.handle_request(now, &last, &mut t);
    assert_eq!(d.violation, Some(Violation::XrcSrqInvalid));
    assert_eq!(d.recv.map(|c| (c.wr_id, c.status)), Some((1, WcStatus::RemInvReqErr)));
    assert_eq!(t.xrc_asked, [XRC_SRQ], "the second SRQ was not even looked up");
    assert_eq!(resp.state(), ResponderState::Error);
}

// ---- The driver's part of a READ response; modify_qp on a running requester ----

/// A READ's response whose bytes the driver could not have (`Placed::Dropped`) changes
/// nothing: the READ stays outstanding, and the same response taken later completes it.
/// One the driver failed (`Placed::Failed`) completes the READ with that status, before
/// any success could be seen, and flushes the rest.
#[test]
fn read_response_placed_by_the_driver_before_the_completer_takes_it() {
    let now = Instant::now();
    let read = |id| SendWqe { id, opcode: WrOpcode::RdmaRead, length: 64, rkey: RKEY, ..SendWqe::TEMPLATE };
    let resp = Response { opcode: OpCode::RcRdmaReadResponseOnly, payload_len: 64, ..Response::ack(Psn::new(0), Syndrome::ACK, 1) };

    let mut r = Requester::new(req_cfg());
    r.post(read(1)).unwrap();
    let _ = r.poll_transmit(now).expect("READ REQUEST");
    let mut asked = 0;
    r.handle_response_placing(now, &resp, &mut |p| {
        asked += 1;
        assert_eq!((p.wqe_id, p.offset, p.len), (1, 0, 64));
        Placed::Dropped
    });
    assert_eq!(asked, 1);
    assert_eq!((r.outstanding(), r.comp_psn()), (1, Psn::new(0)), "a dropped response changes nothing");
    assert!(r.poll_completion().is_none());
    assert!(r.poll_timeout().is_some(), "the retransmit timer still runs");
    r.handle_response_placing(now, &resp, &mut |_| Placed::Done);
    let c = r.poll_completion().expect("completed");
    assert_eq!((c.id, c.status, c.byte_len), (1, WcStatus::Success, 64));

    let mut r = Requester::new(req_cfg());
    r.post(read(1)).unwrap();
    r.post(read(2)).unwrap();
    let _ = r.poll_transmit(now);
    let _ = r.poll_transmit(now);
    let failed = Placed::Failed { status: WcStatus::LocProtErr, vendor_err: vendor_err::LOCAL_ACCESS };
    r.handle_response_placing(now, &resp, &mut |_| failed);
    let got: Vec<(u64, WcStatus, u32)> = std::iter::from_fn(|| r.poll_completion()).map(|c| (c.id, c.status, c.vendor_err)).collect();
    assert_eq!(got, [(1, WcStatus::LocProtErr, vendor_err::LOCAL_ACCESS), (2, WcStatus::WrFlushErr, vendor_err::FLUSHED)]);
    assert_eq!(r.state(), RequesterState::Error);
}

/// A NAK that kept the responder's rule (`Response::reason`, the same host) puts the rule's
/// vendor error into the completion; from the wire the NAK code's generic one.
#[test]
fn nak_reason_names_the_vendor_error() {
    let now = Instant::now();
    for (reason, vendor) in [(None, vendor_err::REMOTE_ACCESS), (Some(Violation::RkeyBounds), Violation::RkeyBounds.vendor_err())] {
        let mut r = Requester::new(req_cfg());
        r.post(SendWqe { id: 7, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
        let _ = r.poll_transmit(now);
        let nak = Response { reason, ..Response::ack(Psn::new(0), Syndrome::Nak(NakCode::RemoteAccessError), 0) };
        r.handle_response(now, &nak);
        let c = r.poll_completion().expect("completed");
        assert_eq!((c.status, c.vendor_err), (WcStatus::RemAccessErr, vendor));
    }
    // The responder machine keeps the rule on the NAK it queues.
    let mut p = pair();
    let w = p.post(SendWqe { opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY + 1, ..SendWqe::TEMPLATE }, bytes(8, 1));
    p.drive();
    assert_eq!(p.responses[0].1.reason, Some(Violation::RkeyUnknown));
    assert_eq!((p.completions[0].id, p.completions[0].vendor_err), (w, Violation::RkeyUnknown.vendor_err()));
}

/// `modify_qp` on a running requester (RTS → RTS): `max_rd_atomic` 0 holds a READ with no
/// timer; granting credit lets it go. A new `retry_cnt` is a fresh budget, a new
/// `timeout` the next timer's.
#[test]
fn modify_reaches_a_running_requester() {
    let now = Instant::now();
    let mut r = Requester::new(RequesterConfig { max_rd_atomic: 0, ..req_cfg() });
    r.post(SendWqe { id: 1, opcode: WrOpcode::RdmaRead, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    assert_eq!(r.poll_transmit(now), None, "no credit");
    assert_eq!(r.poll_timeout(), None, "and nothing a timer would change");
    r.set_max_rd_atomic(1);
    assert_eq!(r.rd_atomic_credits(), 1);
    assert!(r.poll_transmit(now).is_some(), "credit granted: the READ goes");
    assert_eq!(r.rd_atomic_credits(), 0);
    r.set_max_rd_atomic(4);
    assert_eq!(r.rd_atomic_credits(), 3, "the outstanding READ keeps its credit");

    let mut r = Requester::new(RequesterConfig { retry_cnt: 1, ..req_cfg() });
    r.set_retry_cnt(5);
    assert_eq!(r.retries_left(), Some(5));
    r.set_rnr_retry(2);
    assert_eq!(r.rnr_retries_left(), Some(2));
    r.set_timeout(12);
    r.post(SendWqe { id: 1, opcode: WrOpcode::RdmaWrite, length: 8, rkey: RKEY, ..SendWqe::TEMPLATE }).unwrap();
    let _ = r.poll_transmit(now);
    assert_eq!(r.poll_timeout(), Some(now + ack_timeout(12).unwrap()));
}

// ---- The express lane: the same state as the queued way ----

/// What a requester exposes of its state.
#[derive(Debug, PartialEq)]
struct Seen {
    psns: (Psn, Psn),
    retries: (Option<u8>, Option<u8>),
    timeout: Option<Instant>,
    state: RequesterState,
    outstanding: usize,
    idle: bool,
}

fn requester_state(r: &Requester) -> Seen {
    Seen {
        psns: (r.req_psn(), r.comp_psn()),
        retries: (r.retries_left(), r.rnr_retries_left()),
        timeout: r.poll_timeout(),
        state: r.state(),
        outstanding: r.outstanding(),
        idle: r.is_idle(),
    }
}

/// A WRITE of `len` bytes the queued way: posted, its ONLY packet transmitted and handled by
/// `resp`, the ACK handed back; returns its completion.
fn queued_write(req: &mut Requester, resp: &mut Responder, t: &mut sim::SimTarget, id: u64, len: u32, now: Instant) -> Completion {
    req.post(SendWqe { id, ..wqe(WrOpcode::RdmaWrite, len) }).unwrap();
    let r = req.poll_transmit(now).expect("the WRITE");
    assert_eq!((op(&r), r.ack_req), (Operation::RdmaWriteOnly, true));
    assert!(resp.handle_request(now, &r, t).executed);
    let ack = resp.poll_transmit(now).expect("its ACK");
    assert!(resp.poll_transmit(now).is_none());
    req.handle_response(now, &ack);
    req.poll_completion().expect("its completion")
}

#[test]
fn express_write_leaves_both_machines_as_the_queued_way_does() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(1 << 16);
    let rcfg = RequesterConfig { mtu: UNSEGMENTED_MTU, timeout: 10, ..RequesterConfig::TEMPLATE };
    let scfg = ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE };
    let (mut qa, mut ra) = (Requester::new(rcfg), Responder::new(scfg));
    let (mut qb, mut rb) = (Requester::new(rcfg), Responder::new(scfg));
    for i in 0..5u64 {
        let c = queued_write(&mut qa, &mut ra, &mut t, i, 64, now);
        assert_eq!(c.status, WcStatus::Success);
        let psn = qb.express_psn(64).expect("idle: the express lane is open");
        assert!(rb.express_write_ok(psn, 64));
        rb.express_write_done(psn);
        qb.express_acked();
        assert_eq!(requester_state(&qa), requester_state(&qb), "after WRITE {i}");
        assert_eq!((ra.expected_psn(), ra.msn(), ra.state()), (rb.expected_psn(), rb.msn(), rb.state()));
    }
    // Then both take the queued way and build the same packets.
    let a = queued_write(&mut qa, &mut ra, &mut t, 9, 8, now);
    let b = queued_write(&mut qb, &mut rb, &mut t, 9, 8, now);
    assert_eq!((a.id, a.status, a.byte_len), (b.id, b.status, b.byte_len));
    assert_eq!(requester_state(&qa), requester_state(&qb));
}

#[test]
fn express_lane_is_closed_while_anything_is_outstanding_or_not_plain() {
    let now = Instant::now();
    let rcfg = RequesterConfig { mtu: 1024, timeout: 10, ..RequesterConfig::TEMPLATE };
    let mut q = Requester::new(rcfg);
    assert!(q.express_psn(1024).is_some());
    assert!(q.express_psn(1025).is_none(), "more than one packet");
    q.post(SendWqe { id: 1, ..wqe(WrOpcode::RdmaWrite, 8) }).unwrap();
    assert!(q.express_psn(8).is_none(), "a WQE is queued");
    let _ = q.poll_transmit(now).unwrap();
    assert!(q.express_psn(8).is_none(), "a WQE is outstanding, its timer armed");
    let uc = Requester::new(RequesterConfig { mode: Mode::Uc, ..rcfg });
    assert!(uc.express_psn(8).is_none(), "RC only");

    let scfg = ResponderConfig { mtu: 1024, ..ResponderConfig::TEMPLATE };
    let r = Responder::new(scfg);
    let psn = r.expected_psn();
    assert!(r.express_write_ok(psn, 8));
    assert!(!r.express_write_ok(psn.add(1), 8), "not the expected PSN");
    assert!(!r.express_write_ok(psn, 0), "a zero-length WRITE takes the queued way");
    assert!(!r.express_write_ok(psn, 1025), "more than one packet");
    let ro = Responder::new(ResponderConfig { access: Access::REMOTE_READ, ..scfg });
    assert!(!ro.express_write_ok(psn, 8), "no REMOTE_WRITE access: the queued way NAKs");
}

/// A READ of `len` bytes at `MR_BASE + at` the queued way: posted, its request transmitted
/// and handled by `resp`, its one response handed back; returns its completion.
fn queued_read(req: &mut Requester, resp: &mut Responder, t: &mut sim::SimTarget, id: u64, len: u32, at: u64, now: Instant) -> Completion {
    req.post(SendWqe { id, remote_va: MR_BASE + at, ..wqe(WrOpcode::RdmaRead, len) }).unwrap();
    let r = req.poll_transmit(now).expect("the READ");
    assert_eq!((op(&r), r.ack_req), (Operation::RdmaReadRequest, true));
    assert!(resp.handle_request(now, &r, t).executed);
    let answer = resp.poll_transmit(now).expect("its response");
    assert!(resp.poll_transmit(now).is_none());
    assert_eq!((answer.opcode.operation(), answer.payload_len), (Some(Operation::RdmaReadResponseOnly), len));
    assert!(req.handle_response(now, &answer).is_some(), "its bytes placed");
    req.poll_completion().expect("its completion")
}

#[test]
fn express_read_leaves_both_machines_as_the_queued_way_does() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(1 << 16);
    let rcfg = RequesterConfig { mtu: UNSEGMENTED_MTU, timeout: 10, max_rd_atomic: 2, ..RequesterConfig::TEMPLATE };
    let scfg = ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE };
    let (mut qa, mut ra) = (Requester::new(rcfg), Responder::new(scfg));
    let (mut qb, mut rb) = (Requester::new(rcfg), Responder::new(scfg));
    for i in 0..5u64 {
        let c = queued_read(&mut qa, &mut ra, &mut t, i, 64, 64 * i, now);
        assert_eq!((c.status, c.opcode), (WcStatus::Success, Some(crate::verbs::WcOpcode::RdmaRead)));
        let psn = qb.express_rd_atomic_psn(64).expect("idle: the express lane is open");
        assert!(rb.express_read_ok(psn, 64));
        rb.express_read_done(psn, RKEY, MR_BASE + 64 * i, 64);
        qb.express_acked();
        assert_eq!(requester_state(&qa), requester_state(&qb), "after READ {i}");
        assert_eq!(qa.rd_atomic_credits(), qb.rd_atomic_credits());
        assert_eq!((ra.expected_psn(), ra.msn(), ra.state()), (rb.expected_psn(), rb.msn(), rb.state()));
    }
    // Both remember the READs alike: a duplicate of the last one (its response lost) is
    // replayed from the resource ring with the same response.
    let dup_psn = ra.expected_psn().add(Psn::MASK);
    let mut dup = Request::message(Mode::Rc, 0x11, &SendWqe { remote_va: MR_BASE + 256, ..wqe(WrOpcode::RdmaRead, 64) }, dup_psn);
    dup.ack_req = true;
    assert!(!ra.handle_request(now, &dup, &mut t).executed);
    assert!(!rb.handle_request(now, &dup, &mut t).executed);
    let (a, b) = (ra.poll_transmit(now).expect("replayed"), rb.poll_transmit(now).expect("replayed"));
    assert_eq!((a.opcode, a.psn, a.msn, a.payload_len), (b.opcode, b.psn, b.msn, b.payload_len));
    assert_eq!(a.source.map(|s| (s.rkey, s.va, s.len)), b.source.map(|s| (s.rkey, s.va, s.len)));
    // Then both take the queued way alike.
    let a = queued_read(&mut qa, &mut ra, &mut t, 9, 8, 0, now);
    let b = queued_read(&mut qb, &mut rb, &mut t, 9, 8, 0, now);
    assert_eq!((a.id, a.status, a.byte_len), (b.id, b.status, b.byte_len));
    assert_eq!(requester_state(&qa), requester_state(&qb));
}

#[test]
fn express_atomic_leaves_both_machines_as_the_queued_way_does() {
    let now = Instant::now();
    let mut t = sim::SimTarget::new(1 << 16);
    let rcfg = RequesterConfig { mtu: UNSEGMENTED_MTU, timeout: 10, max_rd_atomic: 1, ..RequesterConfig::TEMPLATE };
    let scfg = ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE };
    let (mut qa, mut ra) = (Requester::new(rcfg), Responder::new(scfg));
    let (mut qb, mut rb) = (Requester::new(rcfg), Responder::new(scfg));
    for i in 0..4u64 {
        qa.post(SendWqe { id: i, compare_add: 5, ..wqe(WrOpcode::AtomicFetchAndAdd, 8) }).unwrap();
        let r = qa.poll_transmit(now).expect("the atomic");
        assert!(ra.handle_request(now, &r, &mut t).executed);
        let ack = ra.poll_transmit(now).expect("its ATOMIC ACKNOWLEDGE");
        let original = ack.atomic_original.expect("the original value");
        qa.handle_response(now, &ack);
        let c = qa.poll_completion().expect("its completion");
        assert_eq!((c.status, c.atomic_original), (WcStatus::Success, Some(original)));
        let psn = qb.express_rd_atomic_psn(8).expect("idle: the express lane is open");
        assert!(rb.express_atomic_ok(psn, MR_BASE));
        rb.express_atomic_done(psn, original);
        qb.express_acked();
        assert_eq!(requester_state(&qa), requester_state(&qb), "after atomic {i}");
        assert_eq!(qa.rd_atomic_credits(), qb.rd_atomic_credits());
        assert_eq!((ra.expected_psn(), ra.msn(), ra.state()), (rb.expected_psn(), rb.msn(), rb.state()));
    }
    // A duplicate of the last one is answered from the resource ring alike, with the
    // saved original, and not executed again.
    let dup_psn = ra.expected_psn().add(Psn::MASK);
    let dup = Request::message(Mode::Rc, 0x11, &SendWqe { compare_add: 5, ..wqe(WrOpcode::AtomicFetchAndAdd, 8) }, dup_psn);
    let before = t.mem[..8].to_vec();
    assert!(!ra.handle_request(now, &dup, &mut t).executed);
    assert!(!rb.handle_request(now, &dup, &mut t).executed);
    assert_eq!(t.mem[..8], before[..], "a duplicate atomic is not executed");
    let (a, b) = (ra.poll_transmit(now).expect("replayed"), rb.poll_transmit(now).expect("replayed"));
    assert_eq!((a.opcode, a.psn, a.msn, a.atomic_original), (b.opcode, b.psn, b.msn, b.atomic_original));
}

#[test]
fn express_atomic_is_refused_where_the_queued_way_would_refuse() {
    let scfg = ResponderConfig { mtu: 1024, ..ResponderConfig::TEMPLATE };
    let r = Responder::new(scfg);
    let psn = r.expected_psn();
    assert!(r.express_atomic_ok(psn, MR_BASE));
    assert!(!r.express_atomic_ok(psn.add(1), MR_BASE), "not the expected PSN");
    assert!(!r.express_atomic_ok(psn, MR_BASE + 4), "misaligned: the queued way NAKs");
    let rw = Responder::new(ResponderConfig { access: Access::REMOTE_READ | Access::REMOTE_WRITE, ..scfg });
    assert!(!rw.express_atomic_ok(psn, MR_BASE), "no REMOTE_ATOMIC access: the queued way NAKs");
    let none = Responder::new(ResponderConfig { max_dest_rd_atomic: 0, ..scfg });
    assert!(!none.express_atomic_ok(psn, MR_BASE), "no responder resource: the queued way NAKs");
}

#[test]
fn express_read_is_refused_where_the_queued_way_would_wait_or_refuse() {
    let rcfg = RequesterConfig { mtu: 1024, timeout: 10, ..RequesterConfig::TEMPLATE };
    assert!(Requester::new(rcfg).express_rd_atomic_psn(8).is_some());
    let held = Requester::new(RequesterConfig { max_rd_atomic: 0, ..rcfg });
    assert!(held.express_psn(8).is_some(), "a WRITE may go");
    assert!(held.express_rd_atomic_psn(8).is_none(), "max_rd_atomic 0: the queued way holds the READ");

    let scfg = ResponderConfig { mtu: 1024, ..ResponderConfig::TEMPLATE };
    let r = Responder::new(scfg);
    let psn = r.expected_psn();
    assert!(r.express_read_ok(psn, 8));
    assert!(!r.express_read_ok(psn.add(1), 8), "not the expected PSN");
    assert!(!r.express_read_ok(psn, 0), "a zero-length READ takes the queued way");
    assert!(!r.express_read_ok(psn, 1025), "more than one response");
    let wo = Responder::new(ResponderConfig { access: Access::REMOTE_WRITE, ..scfg });
    assert!(!wo.express_read_ok(psn, 8), "no REMOTE_READ access: the queued way NAKs");
    let none = Responder::new(ResponderConfig { max_dest_rd_atomic: 0, ..scfg });
    assert!(!none.express_read_ok(psn, 8), "no responder resource: the queued way NAKs");
}

#[test]
fn express_send_completes_the_receive_and_moves_the_responder_as_the_queued_way() {
    let now = Instant::now();
    let scfg = ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE };
    let (mut ra, mut rb) = (Responder::new(scfg), Responder::new(scfg));
    let mut t = sim::SimTarget::new(1 << 16);
    for (i, solicited) in [(0u64, false), (1, true), (2, false)] {
        t.post_recv(10 + i, 4096);
        let mut r = Request::message(Mode::Rc, 0x11, &wqe(WrOpcode::Send, 100), ra.expected_psn());
        r.solicited = solicited;
        let d = ra.handle_request(now, &r, &mut t);
        let queued = d.recv.expect("a receive completion");
        let _ = ra.poll_transmit(now).expect("the ACK");
        assert!(rb.express_send_ok(rb.expected_psn(), 100));
        let psn = rb.expected_psn();
        let express = rb.express_send_done(psn, 10 + i, 100, solicited, None);
        assert_eq!(queued, express);
        assert_eq!((ra.expected_psn(), ra.msn(), ra.state()), (rb.expected_psn(), rb.msn(), rb.state()));
    }
    assert!(!rb.express_send_ok(rb.expected_psn().add(3), 8), "not the expected PSN");
}

#[test]
fn express_sends_and_writes_with_immediate_complete_their_receive_as_the_queued_way() {
    let now = Instant::now();
    let scfg = ResponderConfig { mtu: UNSEGMENTED_MTU, ..ResponderConfig::TEMPLATE };
    let (mut ra, mut rb) = (Responder::new(scfg), Responder::new(scfg));
    let mut t = sim::SimTarget::new(1 << 16);
    for (i, (op, len, solicited)) in
        [(WrOpcode::SendWithImm, 100u32, false), (WrOpcode::RdmaWriteWithImm, 64, true), (WrOpcode::RdmaWriteWithImm, 0, false), (WrOpcode::SendWithImm, 0, true)]
            .into_iter()
            .enumerate()
    {
        let id = 20 + i as u64;
        t.post_recv(id, 4096);
        let mut r = Request::message(Mode::Rc, 0x11, &SendWqe { imm: 0x1234_0000 + i as u32, ..wqe(op, len) }, ra.expected_psn());
        r.solicited = solicited;
        let d = ra.handle_request(now, &r, &mut t);
        let queued = d.recv.expect("a receive completion");
        let _ = ra.poll_transmit(now).expect("the ACK");
        let psn = rb.expected_psn();
        let express = if op == WrOpcode::SendWithImm {
            assert!(rb.express_send_ok(psn, len));
            rb.express_send_done(psn, id, len, solicited, Some(0x1234_0000 + i as u32))
        } else {
            assert!(rb.express_write_imm_ok(psn, len));
            rb.express_write_imm_done(psn, id, len, solicited, 0x1234_0000 + i as u32)
        };
        assert_eq!(queued, express, "{op:?} of {len} bytes");
        assert_eq!((ra.expected_psn(), ra.msn(), ra.state()), (rb.expected_psn(), rb.msn(), rb.state()));
    }
    let wo = Responder::new(ResponderConfig { access: Access::REMOTE_READ, ..scfg });
    assert!(!wo.express_write_imm_ok(wo.expected_psn(), 8), "no REMOTE_WRITE access: the queued way NAKs");
    assert!(wo.express_send_ok(wo.expected_psn(), 8));
}

// ---- Counts for the driver's hardware counters (rxe_hw_counters.c names) ----

/// A gap at PSN 0: the responder counts one out-of-sequence request (its one NAK), the
/// requester one go-back-N; the NAK names `comp.psn` itself, which rxe does not count as
/// `rcvd_seq_err`. Taking the counts starts them again from zero.
#[test]
fn rc_counts_a_gap_as_one_out_of_sequence_request_and_one_retry() {
    let mut p = pair();
    for i in 0..4 {
        p.target.post_recv(100 + i, 4096);
    }
    let ids: Vec<u64> = (0..4).map(|i| p.post_send(bytes(100, i))).collect();
    drop_requests_once(&mut p, &[0]);
    p.drive();
    assert_all_success(&p, &ids);
    assert_eq!(p.server.take_counts(), ResponderCounts { duplicates: 0, out_of_sequence: 1 });
    assert_eq!(p.client.take_counts(), RequesterCounts { retries: 1, rnr_naks: 0, seq_naks: 0 });
    assert_eq!(p.server.take_counts(), ResponderCounts::default());
    assert_eq!(p.client.take_counts(), RequesterCounts::default());
}

/// A gap inside a multi-packet SEND: the NAK names PSN 2 while `comp.psn` is 0, so it
/// acknowledges new PSNs (`rcvd_seq_err`) and starts one go-back-N.
#[test]
fn rc_counts_a_sequence_nak_that_acknowledges_new_psns() {
    let mut p = pair();
    p.target.post_recv(1, 4096);
    let id = p.post_send(bytes(4 * MTU as usize, 9));
    drop_requests_once(&mut p, &[2]);
    p.drive();
    assert_all_success(&p, &[id]);
    assert_eq!(p.server.take_counts(), ResponderCounts { duplicates: 0, out_of_sequence: 1 });
    assert_eq!(p.client.take_counts(), RequesterCounts { retries: 1, rnr_naks: 0, seq_naks: 1 });
}

/// Lost ACKs: each request is sent again on the timer (a retry each) and is a
/// duplicate at the responder.
#[test]
fn rc_counts_timeout_retries_and_the_duplicates_they_make() {
    let mut p = pair();
    p.target.post_recv(1, 4096);
    p.back.filter = Some(Box::new({
        let mut seen = Vec::new();
        move |pkt| {
            let psn = pkt.resp.psn.get();
            if seen.contains(&psn) {
                Verdict::Pass
            } else {
                seen.push(psn);
                Verdict::Drop
            }
        }
    }));
    let s = p.post_send(bytes(10, 1));
    p.drive();
    let w = p.post_write(MR_BASE + 64, bytes(16, 2));
    p.drive();
    assert_all_success(&p, &[s, w]);
    assert_eq!(p.server.take_counts(), ResponderCounts { duplicates: 2, out_of_sequence: 0 });
    assert_eq!(p.client.take_counts(), RequesterCounts { retries: 2, rnr_naks: 0, seq_naks: 0 });
}

/// Every RNR NAK the completer takes is counted, the one that exhausts `rnr_retry` too;
/// RNR retries are not go-back-N retries.
#[test]
fn rc_counts_every_rnr_nak_taken() {
    let mut p = Pair::new(RequesterConfig { rnr_retry: 2, ..req_cfg() }, ResponderConfig { min_rnr_timer: 1, ..resp_cfg() });
    let id = p.post_send(bytes(20, 1));
    p.drive();
    assert_eq!((p.completions[0].id, p.completions[0].status), (id, WcStatus::RnrRetryExcErr));
    assert_eq!(p.client.take_counts(), RequesterCounts { retries: 0, rnr_naks: 3, seq_naks: 0 });
}
