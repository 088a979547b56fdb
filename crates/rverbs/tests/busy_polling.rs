//! Busy polling found out (docs/progress-and-events.md, "Busy-polling applications";
//! docs/network.md, "Coalesced ACKs"): a polling SEND ping-pong between two devices of
//! this process, across "hosts" on loopback addresses. Once a device found out that the
//! application busy-polls, a request its poll received has its ACK held for the next SEND,
//! which leaves first; with `RVERBS_BUSY_POLL=0` (`busy_poll(Some(false))`) the ACK always
//! leaves first, before the receive completion is published. Read from device A's capture.

mod common;

use common::*;
use rverbs::*;

/// BTH opcodes (docs/rocev2-wire.md): RC SEND Only and Acknowledge.
const SEND_ONLY: u8 = 0x04;
const ACKNOWLEDGE: u8 = 0x11;

/// A device on `ip` with busy polling `busy` (`None`: found out), capturing to `pcap`.
fn device(ip: [u8; 4], tag: &str, busy: Option<bool>, pcap: Option<std::path::PathBuf>) -> Device {
    config_on(ip, tag).busy_poll(busy).pcap(pcap).open().unwrap()
}

/// Polls `s`'s CQ (busily: every empty poll receives from the network) until a receive
/// completes; checks every completion found on the way.
fn wait_receive(s: &Side, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut wc = [Wc::default(); 4];
    loop {
        let n = s.cq.poll(&mut wc).unwrap();
        for c in &wc[..n] {
            assert_eq!(c.status(), WcStatus::Success, "{what}: {c:?}");
            if c.opcode() == Some(WcOpcode::Recv) {
                return;
            }
        }
        assert!(std::time::Instant::now() < deadline, "{what}: no receive within 10 s");
    }
}

/// `n` SEND ping-pongs between two devices on `net.1` and `net.2`, busy polling `busy` on
/// both; returns, in A's capture, how many times A's next packet after a SEND from B was
/// A's own SEND (the ACK held) and how many times it was the ACK.
fn pingpong(net: [u8; 3], busy: Option<bool>, n: usize) -> (usize, usize) {
    let [x, y, z] = net;
    let pcap = std::env::temp_dir().join(format!("rverbs-busy-{z}-{}.pcap", std::process::id()));
    let da = device([x, y, z, 1], "busy", busy, Some(pcap.clone()));
    let db = device([x, y, z, 2], "busy", busy, None);
    let (a, b) = (side_on(da.open().unwrap(), QpType::Rc, 256, CAP), side_on(db.open().unwrap(), QpType::Rc, 256, CAP));
    connect_across(&a.qp, &b.ctx, b.qp.qp_num(), 14);
    connect_across(&b.qp, &a.ctx, a.qp.qp_num(), 14);
    for s in [&a, &b] {
        for i in 0..16 {
            post_recv(s, i, 64 * i as usize, 64);
        }
    }
    let (sa, sb) = ([a.mr.sge(4096, 8).unwrap()], [b.mr.sge(4096, 8).unwrap()]);
    for i in 0..n {
        a.qp.post_send(&[SendWr::send(i as u64, &sa).signaled()]).unwrap();
        wait_receive(&b, "B");
        post_recv(&b, i as u64, 64 * (i % 16), 64);
        b.qp.post_send(&[SendWr::send(i as u64, &sb).signaled()]).unwrap();
        wait_receive(&a, "A");
        post_recv(&a, i as u64, 64 * (i % 16), 64);
    }
    // Both QPs go (their last held ACK leaves) before the capture is read.
    for s in [a, b] {
        s.qp.destroy().unwrap();
    }
    let file = std::fs::read(&pcap).unwrap();
    let _ = std::fs::remove_file(&pcap);
    let (_, records) = rverbs_proto::pcap::records(&file).expect("a pcap file");
    let me = [x, y, z, 1];
    let (mut held, mut acked, mut after_request) = (0, 0, false);
    for r in records {
        // Raw IPv4 records: the IPv4 header, UDP's 8 bytes, then the BTH.
        let ihl = usize::from(r.data[0] & 0x0f) * 4;
        let (src, opcode) = (&r.data[12..16], r.data[ihl + 8]);
        if src != me {
            // B's SEND; B's own held ACK rides behind it and changes nothing.
            after_request |= opcode == SEND_ONLY;
        } else if after_request {
            after_request = false;
            match opcode {
                SEND_ONLY => held += 1,
                ACKNOWLEDGE => acked += 1,
                other => panic!("A sent opcode {other:#x}"),
            }
        }
    }
    (held, acked)
}

#[test]
fn a_busy_polling_device_found_out_holds_acks_for_its_next_send() {
    // Found out after 1 ms of polling: many more ping-pongs than that takes.
    let (held, acked) = pingpong([127, 0, 18], None, 3000);
    assert!(held + acked >= 2900, "only {} requests answered in the capture", held + acked);
    assert!(held >= 1, "A never sent its SEND ahead of the ACK ({acked} ACKs first): no ACK was held");
}

#[test]
fn with_busy_polling_switched_off_every_ack_leaves_first() {
    let (held, acked) = pingpong([127, 0, 19], Some(false), 1000);
    assert!(acked >= 990, "only {acked} requests answered by an ACK in the capture");
    assert_eq!(held, 0, "A sent its SEND ahead of the ACK {held} times with busy polling off");
}
