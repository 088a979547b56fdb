//! The attacker (namespace B, its own address): seeded, bounded floods of malformed and
//! forged RoCEv2 packets and CM MADs at the victim's port 4791, each with a valid ICRC
//! unless the kind is about the ICRC (`rverbs_proto::wire` emitters and `icrc`).
//!
//! Rounds: `ARM` the victim (fresh PSNs for T1 and T2, `victim.rs`), send one valid WRITE
//! to T1 (its ACK proves the attack surface is reached: counted as `control_acked`), then
//! a burst of one kind, then read what came back. Every datagram from the victim is
//! searched for the canary marker (`common::CANARY_MARKER`): a READ response (or
//! anything else) carrying canary bytes is a leak.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use rverbs_proto::wire::{icrc, AethRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDtRepr, OpCode, RethRepr, RocePacket, RoceRepr, Syndrome};

use crate::common::{has_marker, parse_info, Args, Rng};
use crate::region::GUARD;
use crate::victim::ATTACKER_QPN_T1;

pub const ROCE_PORT: u16 = 4791;
const MTU: usize = 1024;

/// The attack kinds, in the order rounds cycle through them.
pub const KINDS: [&str; 15] = [
    "opcode", "truncated", "bad_icrc", "reth_oob", "va_wrap", "dma_len", "write_overrun", "forged_rkey", "wrong_pd",
    "read_neighbour", "psn_window", "no_qpn", "relay_hdr", "cm_mad", "atomic",
];

/// What `ARM` answered.
#[derive(Debug, Clone, Copy, Default)]
struct Target {
    t1: u32,
    t2: u32,
    psn1: u32,
    psn2: u32,
    rkey: u32,
    va: u64,
    len: u64,
    r2key: u32,
    r2va: u64,
    r2len: u64,
    lrkey: u32,
}

struct Attacker {
    sock: UdpSocket,
    local: Ipv4Addr,
    victim: Ipv4Addr,
    rng: Rng,
    sent: BTreeMap<&'static str, u64>,
    bytes_sent: u64,
    responses: BTreeMap<String, u64>,
    read_response_bytes: u64,
    leaks: u64,
    leak_example: Option<String>,
    /// (T1 QPN's PSN of the round's control WRITE) awaiting its ACK.
    control_psn: Option<u32>,
    control_acked: u64,
    /// Sweeps, so every value is covered once the run is long enough.
    sweep_op: u32,
    sweep_trunc: usize,
    sweep_mad: usize,
    sweep_ep: u32,
}

fn psn(p: u32) -> u32 {
    p & 0xff_ffff
}

fn bth(opcode: OpCode, qpn: u32, psn_: u32) -> BthRepr {
    BthRepr { opcode, solicited: false, migreq: false, pad_count: 0, pkey: 0xffff, fecn: false, becn: false, dest_qp: qpn, ack_req: true, psn: psn(psn_) }
}

fn reth(va: u64, rkey: u32, dma_len: u32) -> Option<RethRepr> {
    Some(RethRepr { va, rkey, dma_len })
}

impl Attacker {
    /// `roce` with its ICRC (the last 4 bytes) as the victim computes it for a datagram
    /// from our socket (`local:4791`, IPv4 ID 0).
    fn seal(&self, mut roce: Vec<u8>) -> Vec<u8> {
        if roce.len() >= 4 {
            let n = roce.len();
            let c = icrc::compute_ipv4_pseudo(self.local, self.victim, ROCE_PORT, ROCE_PORT, &roce[..n - 4]);
            roce[n - 4..].copy_from_slice(&c.to_le_bytes());
        }
        roce
    }

    /// A packet from a `Repr` (headers set by `f`) and payload, sealed.
    fn pkt(&mut self, b: BthRepr, payload: &[u8], f: impl FnOnce(&mut RoceRepr)) -> Vec<u8> {
        let mut repr = RoceRepr::new(b, payload.len());
        f(&mut repr);
        let mut buf = vec![0u8; repr.buffer_len()];
        let mut p = RocePacket::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        p.payload_mut().copy_from_slice(payload);
        self.seal(buf)
    }

    /// Any opcode byte: a BTH written by hand (random SE/M/pad bits, TVer 0), `body`
    /// after it, sealed.
    fn raw(&mut self, opcode: u8, qpn: u32, psn_: u32, body: &[u8]) -> Vec<u8> {
        let flags = (self.rng.next_u32() as u8) & 0xf0;
        let mut b = vec![opcode, flags, 0xff, 0xff, 0];
        b.extend_from_slice(&qpn.to_be_bytes()[1..]);
        b.push(0x80);
        b.extend_from_slice(&psn(psn_).to_be_bytes()[1..]);
        b.extend_from_slice(body);
        b.extend_from_slice(&[0; 4]);
        self.seal(b)
    }

    fn write_only(&mut self, qpn: u32, p: u32, va: u64, rkey: u32, dma: u32, payload_len: usize) -> Vec<u8> {
        let payload = self.rng.bytes(payload_len);
        self.pkt(bth(OpCode::RcRdmaWriteOnly, qpn, p), &payload, |r| r.reth = reth(va, rkey, dma))
    }

    fn read_req(&mut self, qpn: u32, p: u32, va: u64, rkey: u32, dma: u32) -> Vec<u8> {
        self.pkt(bth(OpCode::RcRdmaReadRequest, qpn, p), &[], |r| r.reth = reth(va, rkey, dma))
    }

    fn atomic(&mut self, op: OpCode, qpn: u32, p: u32, va: u64, rkey: u32) -> Vec<u8> {
        let (swap_add, compare) = (self.rng.next_u64() & 0x00ff_00ff_00ff_00ff, self.rng.next_u64());
        self.pkt(bth(op, qpn, p), &[], |r| r.atomic_eth = Some(AtomicEthRepr { va, rkey, swap_add, compare }))
    }

    fn send(&mut self, kind: &'static str, datagram: &[u8]) -> Result<(), String> {
        match self.sock.send_to(datagram, SocketAddrV4::new(self.victim, ROCE_PORT)) {
            Ok(_) => {}
            // A full socket buffer or an oversize datagram: not sent, not counted.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::MSGSIZE.raw_os_error()) => return Ok(()),
            Err(e) => return Err(format!("send: {e}")),
        }
        *self.sent.entry(kind).or_default() += 1;
        self.bytes_sent += datagram.len() as u64;
        Ok(())
    }

    /// Reads what the victim sent back, for up to `wait` after the socket runs dry.
    fn drain(&mut self, wait: Duration) {
        let mut buf = vec![0u8; 65536];
        let mut until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let _ = self.sock.set_read_timeout(Some(left.max(Duration::from_micros(100))));
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    self.response(&buf[..n], from);
                    until = until.max(Instant::now() + Duration::from_millis(1).min(wait));
                }
                Err(_) => {
                    if Instant::now() >= until {
                        return;
                    }
                }
            }
        }
    }

    fn response(&mut self, d: &[u8], from: std::net::SocketAddr) {
        if from.ip() != std::net::IpAddr::V4(self.victim) {
            *self.responses.entry("not from the victim".into()).or_default() += 1;
            return;
        }
        if has_marker(d) {
            self.leaks += 1;
            self.leak_example.get_or_insert_with(|| format!("{} bytes: {:02x?}", d.len(), &d[..d.len().min(64)]));
        }
        let Ok(p) = RocePacket::new_checked(d) else {
            *self.responses.entry("malformed".into()).or_default() += 1;
            return;
        };
        let Ok(r) = RoceRepr::parse(&p) else {
            *self.responses.entry("malformed".into()).or_default() += 1;
            return;
        };
        let name = match (r.bth.opcode, r.aeth) {
            (OpCode::RcAcknowledge, Some(AethRepr { syndrome: Syndrome::Ack { .. }, .. })) => {
                if r.bth.dest_qp == ATTACKER_QPN_T1 && Some(r.bth.psn) == self.control_psn {
                    self.control_acked += 1;
                    self.control_psn = None;
                }
                "ACK".to_owned()
            }
            (OpCode::RcAcknowledge, Some(a)) => format!("{:?}", a.syndrome),
            (op, _) => format!("{op:?}"),
        };
        if matches!(
            r.bth.opcode,
            OpCode::RcRdmaReadResponseFirst | OpCode::RcRdmaReadResponseMiddle | OpCode::RcRdmaReadResponseLast | OpCode::RcRdmaReadResponseOnly
        ) {
            self.read_response_bytes += r.payload_len as u64;
        }
        *self.responses.entry(name).or_default() += 1;
    }

    /// The datagrams of one round of `kind` against `t`; the control WRITE took PSN
    /// `t.psn1`, so T1 expects `t.psn1 + 1`.
    fn burst(&mut self, kind: &'static str, t: &Target) -> Vec<Vec<u8>> {
        let e1 = psn(t.psn1 + 1);
        let (start, end) = (t.va, t.va + t.len);
        let mut out = Vec::new();
        match kind {
            "opcode" => {
                for _ in 0..8 {
                    let op = (self.sweep_op % 256) as u8;
                    self.sweep_op += 1;
                    let n = 4 * self.rng.below(30) as usize;
                    let body = self.rng.bytes(n);
                    let (qpn, p) = match self.rng.below(4) {
                        0 => (t.t2, t.psn2),
                        1 => (self.rng.next_u32() & 0xff_ffff, self.rng.next_u32()),
                        _ => (t.t1, e1),
                    };
                    out.push(self.raw(op, qpn, p, &body));
                }
            }
            "truncated" => {
                let base = match self.rng.below(5) {
                    0 => self.write_only(t.t1, e1, start + 256, t.rkey, 64, 64),
                    1 => self.read_req(t.t1, e1, start, t.rkey, 64),
                    2 => self.pkt(bth(OpCode::RcSendOnly, t.t1, e1), &[7; 32], |_| {}),
                    3 => self.atomic(OpCode::RcCompareSwap, t.t1, e1, start + 8, t.rkey),
                    _ => self.pkt(bth(OpCode::UdSendOnly, 1, 0), &[1; 256], |r| r.deth = Some(DethRepr { qkey: 0x8001_0000, src_qp: 1 })),
                };
                for _ in 0..8 {
                    let l = self.sweep_trunc % base.len();
                    self.sweep_trunc += 1;
                    let cut = base[..l].to_vec();
                    // Half re-sealed (a valid ICRC over the short packet), half as cut.
                    out.push(if self.rng.below(2) == 0 { self.seal(cut) } else { cut });
                }
            }
            "bad_icrc" => {
                for _ in 0..4 {
                    let mut d = self.write_only(t.t1, e1, start + 512, t.rkey, 64, 64);
                    let bit = self.rng.below(8 * d.len() as u64) as usize;
                    d[bit / 8] ^= 1 << (bit % 8);
                    out.push(d);
                }
            }
            "reth_oob" => {
                let g = GUARD as u64;
                let cases: [(u64, u32); 9] =
                    [(end - 8, 16), (end, 1), (end, 8), (start - 8, 16), (start - 1, 1), (start - g, 64), (end + 4096, 64), (start - 4096, 8192 + t.len as u32), (end - 1, 2)];
                for (va, len) in cases {
                    let d = if self.rng.below(2) == 0 { self.write_only(t.t1, e1, va, t.rkey, len, (len as usize).min(MTU)) } else { self.read_req(t.t1, e1, va, t.rkey, len) };
                    out.push(d);
                }
            }
            "va_wrap" => {
                for _ in 0..4 {
                    let k = self.rng.below(64);
                    let va = u64::MAX - k;
                    out.push(self.write_only(t.t1, e1, va, t.rkey, 128, 128));
                    out.push(self.read_req(t.t1, e1, va, t.rkey, 4096));
                }
                out.push(self.write_only(t.t1, e1, end - 16, t.rkey, u32::MAX, 64));
                out.push(self.read_req(t.t1, e1, start + 8, t.rkey, u32::MAX - 7));
            }
            "dma_len" => {
                out.push(self.write_only(t.t1, e1, start, t.rkey, 0, 64));
                out.push(self.write_only(t.t1, e1, end, t.rkey, 0, 64));
                out.push(self.write_only(t.t1, e1, start, t.rkey, u32::MAX, 64));
                out.push(self.write_only(t.t1, e1, start, t.rkey, 1 << 31, 1024));
                out.push(self.write_only(t.t1, e1, start, t.rkey, 64, 0));
                out.push(self.write_only(t.t1, e1, start, t.rkey, 8, 64));
                out.push(self.read_req(t.t1, e1, end, t.rkey, 0));
                out.push(self.read_req(t.t1, e1, start, t.rkey, u32::MAX));
                out.push(self.read_req(t.t1, e1, start, t.rkey, 1 << 31));
            }
            "write_overrun" => {
                // A multi-packet WRITE whose first packet is in bounds and whose later
                // packets carry more than its DMA length, or run past the region's end.
                let va = end - MTU as u64;
                let first = self.rng.bytes(MTU);
                out.push(self.pkt(bth(OpCode::RcRdmaWriteFirst, t.t1, e1), &first, |r| r.reth = reth(va, t.rkey, MTU as u32)));
                let mid = self.rng.bytes(MTU);
                out.push(self.pkt(bth(OpCode::RcRdmaWriteMiddle, t.t1, e1 + 1), &mid, |_| {}));
                let n = 4 * (1 + self.rng.below(64) as usize);
                let last = self.rng.bytes(n);
                out.push(self.pkt(bth(OpCode::RcRdmaWriteLast, t.t1, e1 + 2), &last, |_| {}));
                // The same with LAST right after FIRST, 4 bytes too many.
                out.push(self.pkt(bth(OpCode::RcRdmaWriteFirst, t.t1, e1), &first, |r| r.reth = reth(va, t.rkey, MTU as u32)));
                out.push(self.pkt(bth(OpCode::RcRdmaWriteLast, t.t1, e1 + 1), &[9; 4], |_| {}));
                // A SEND longer than every receive (1 KiB), and a MIDDLE/LAST with no FIRST.
                out.push(self.pkt(bth(OpCode::RcSendFirst, t.t1, e1), &first, |_| {}));
                out.push(self.pkt(bth(OpCode::RcSendMiddle, t.t1, e1 + 1), &mid, |_| {}));
                out.push(self.pkt(bth(OpCode::RcSendLast, t.t1, e1 + 2), &last, |_| {}));
                out.push(self.pkt(bth(OpCode::RcRdmaWriteMiddle, t.t1, e1), &mid, |_| {}));
                out.push(self.pkt(bth(OpCode::RcSendLast, t.t1, e1), &last, |_| {}));
                // SEND with invalidate of the region's own key (only type 2 windows may be).
                out.push(self.pkt(bth(OpCode::RcSendOnlyWithInvalidate, t.t1, e1), &[5; 16], |r| r.ieth = Some(IethRepr { rkey: t.rkey })));
                out.push(self.pkt(bth(OpCode::RcRdmaWriteOnlyWithImmediate, t.t1, e1), &[6; 64], |r| {
                    r.reth = reth(end - 8, t.rkey, 64);
                    r.immdt = Some(ImmDtRepr { imm: 0xdead_beef });
                }));
            }
            "forged_rkey" => {
                let random_key = self.rng.next_u32();
                let keys = [t.rkey.wrapping_add(1), t.rkey.wrapping_sub(1), t.rkey ^ 1, t.rkey.wrapping_add(0x100), t.rkey.wrapping_sub(0x100), t.rkey ^ 0x8000_0000, t.r2key, t.lrkey, random_key, 0];
                for k in keys {
                    let d = match self.rng.below(3) {
                        0 => self.write_only(t.t1, e1, start + 64, k, 64, 64),
                        1 => self.read_req(t.t1, e1, start, k, 256),
                        _ => self.atomic(OpCode::RcFetchAdd, t.t1, e1, start + 64, k),
                    };
                    out.push(d);
                }
            }
            "wrong_pd" => {
                // R's real key through T2 (PD 2), R2's through T1 (PD 1).
                out.push(self.write_only(t.t2, t.psn2, start + 64, t.rkey, 64, 64));
                out.push(self.read_req(t.t2, t.psn2, start, t.rkey, 512));
                out.push(self.atomic(OpCode::RcCompareSwap, t.t2, t.psn2, start + 64, t.rkey));
                out.push(self.write_only(t.t1, e1, t.r2va, t.r2key, 64, 64));
                out.push(self.read_req(t.t1, e1, t.r2va, t.r2key, 64));
                // The legitimate connection's region key, through both.
                out.push(self.read_req(t.t2, t.psn2, t.r2va, t.lrkey, 64));
                // R2 through its own QP, across its end.
                out.push(self.write_only(t.t2, t.psn2, t.r2va + t.r2len - 8, t.r2key, 64, 64));
            }
            "read_neighbour" => {
                let g = GUARD as u64;
                // One in bounds first: READ responses must come back at all.
                out.push(self.read_req(t.t1, e1, start + 16, t.rkey, 64));
                let cases: [(u64, u32); 8] = [(start - 8, 8), (start - 1, 2), (end - 1, 2), (end, 8), (end - 8, 16), (start, t.len as u32 + 1), (start - g, g as u32), (end, g as u32)];
                for (i, (va, len)) in cases.into_iter().enumerate() {
                    // At the next PSN (after the good READ) and at the good READ's own
                    // (a duplicate READ, which a responder answers again).
                    let p = if i % 2 == 0 { e1 + 1 } else { e1 };
                    out.push(self.read_req(t.t1, p, va, t.rkey, len));
                }
            }
            "psn_window" => {
                for d in [1u32, 2, 100, 1 << 22, (1 << 23) - 1, 1 << 23, 0xff_ffff, 0xff_fffe, (1 << 24) - (1 << 22)] {
                    out.push(self.write_only(t.t1, e1.wrapping_add(d), start + 1024, t.rkey, 64, 64));
                }
                // A multi-packet READ, then duplicates inside its PSN range with other RETHs.
                out.push(self.read_req(t.t1, e1, start, t.rkey, 4096));
                out.push(self.read_req(t.t1, e1 + 1, end - 8, t.rkey, 4096));
                out.push(self.read_req(t.t1, e1 + 2, start - 64, t.rkey, 128));
                out.push(self.read_req(t.t1, e1, start, t.rkey ^ 0x100, 64));
            }
            "no_qpn" => {
                for _ in 0..8 {
                    let ep = self.sweep_ep % 256;
                    self.sweep_ep += 1;
                    let qpn = ep << 16 | (2 + self.rng.below(0xfffe) as u32);
                    let p = self.rng.next_u32();
                    out.push(self.write_only(qpn, p, start, t.rkey, 64, 64));
                }
                for qpn in [0, 0xff_ffff, t.t1 ^ 1, t.t1.wrapping_add(0x1_0000) & 0xff_ffff, t.t1.wrapping_sub(0x1_0000) & 0xff_ffff] {
                    out.push(self.write_only(qpn, e1, start, t.rkey, 64, 64));
                }
                let qkey = self.rng.next_u32();
                let qpn = self.rng.next_u32() & 0xff_ffff;
                out.push(self.pkt(bth(OpCode::UdSendOnly, qpn, 0), &[3; 64], |r| r.deth = Some(DethRepr { qkey, src_qp: 0xa3 })));
            }
            "relay_hdr" => {
                // The relay header of a process of the host (magic ff 'r' 'l' 'y'), from
                // the network: to the owner it is an ordinary datagram with opcode 0xff.
                for _ in 0..6 {
                    let family = *self.rng.pick(&[4u8, 6, 0, 5, 255]);
                    let mut d = vec![0xff, b'r', b'l', b'y', 1, family];
                    d.extend_from_slice(&(self.rng.next_u32() as u16).to_be_bytes());
                    d.extend_from_slice(&[0; 4]);
                    d.extend_from_slice(&self.rng.bytes(16));
                    if self.rng.below(2) == 0 {
                        let inner = self.write_only(t.t1, e1, start, t.rkey, 64, 64);
                        d.extend_from_slice(&inner);
                    } else {
                        let n = self.rng.below(80) as usize;
                        d.extend_from_slice(&self.rng.bytes(n));
                    }
                    let keep = self.rng.below(d.len() as u64 + 1) as usize;
                    d.truncate(keep);
                    out.push(if d.len() >= 16 { self.seal(d) } else { d });
                }
            }
            "cm_mad" => {
                for _ in 0..6 {
                    let size = self.sweep_mad % 300;
                    self.sweep_mad += 1;
                    let mut m = self.rng.bytes(size);
                    if size >= 24 && self.rng.below(2) == 0 {
                        // A MAD header of the CM class with a random method and attribute.
                        m[0] = 1;
                        m[1] = 0x07;
                        m[2] = 2;
                        m[3] = *self.rng.pick(&[0x01u8, 0x03, 0x06, 0x81, 0x7f]);
                        m[16..18].copy_from_slice(&(0x0010 + self.rng.below(12) as u16).to_be_bytes());
                    }
                    let (qkey, qpn) = match self.rng.below(5) {
                        0 => (self.rng.next_u32(), 1),
                        1 => (0x8001_0000, 0),
                        _ => (0x8001_0000, 1),
                    };
                    let op = if self.rng.below(4) == 0 { OpCode::UdSendOnlyWithImmediate } else { OpCode::UdSendOnly };
                    let p = self.rng.next_u32();
                    out.push(self.pkt(bth(op, qpn, p), &m, |r| {
                        r.deth = Some(DethRepr { qkey, src_qp: 1 });
                        if op == OpCode::UdSendOnlyWithImmediate {
                            r.immdt = Some(ImmDtRepr { imm: 1 });
                        }
                    }));
                }
                // RC opcodes at QP1.
                out.push(self.write_only(1, 0, start, t.rkey, 64, 64));
                out.push(self.pkt(bth(OpCode::RcSendOnly, 1, 0), &[0; 256], |_| {}));
            }
            "atomic" => {
                for off in 1..8u64 {
                    let op = if off % 2 == 0 { OpCode::RcCompareSwap } else { OpCode::RcFetchAdd };
                    out.push(self.atomic(op, t.t1, e1, start + off, t.rkey));
                }
                for va in [end - 4, end, start - 8, end - 8 + 4096, u64::MAX - 7] {
                    out.push(self.atomic(OpCode::RcFetchAdd, t.t1, e1, va, t.rkey));
                }
                // ATOMIC WRITE (RETH + 8 bytes) and FLUSH (FETH + RETH) out of bounds.
                let mut aw = Vec::new();
                aw.extend_from_slice(&end.to_be_bytes());
                aw.extend_from_slice(&t.rkey.to_be_bytes());
                aw.extend_from_slice(&8u32.to_be_bytes());
                aw.extend_from_slice(&[0x41; 8]);
                out.push(self.raw(0x1d, t.t1, e1, &aw));
                let mut fl = vec![0, 0, 0, 0x11];
                fl.extend_from_slice(&(start - 64).to_be_bytes());
                fl.extend_from_slice(&t.rkey.to_be_bytes());
                fl.extend_from_slice(&(1u32 << 20).to_be_bytes());
                out.push(self.raw(0x1c, t.t1, e1, &fl));
            }
            _ => unreachable!("unknown kind {kind}"),
        }
        out
    }
}

fn arm(rd: &mut BufReader<TcpStream>, w: &mut TcpStream) -> Result<Target, String> {
    w.write_all(b"ARM\n").map_err(|e| format!("control: {e} (victim gone?)"))?;
    let mut line = String::new();
    rd.read_line(&mut line).map_err(|e| format!("control: {e}"))?;
    let rest = line.strip_prefix("ARMED ").ok_or_else(|| format!("control: unexpected answer {line:?} (victim gone?)"))?;
    let m = parse_info(&rest.split_whitespace().collect::<Vec<_>>().join("\n"));
    let g = |k: &str| m.get(k).copied().ok_or_else(|| format!("control: no {k} in {line:?}"));
    Ok(Target {
        t1: g("t1")? as u32,
        t2: g("t2")? as u32,
        psn1: g("psn1")? as u32,
        psn2: g("psn2")? as u32,
        rkey: g("rkey")? as u32,
        va: g("va")?,
        len: g("len")?,
        r2key: g("r2key")? as u32,
        r2va: g("r2va")?,
        r2len: g("r2len")?,
        lrkey: g("lrkey")? as u32,
    })
}

pub fn run(a: &Args) -> Result<(), String> {
    let local = a.ip("local")?;
    let victim = a.ip("victim")?;
    let ctl_port = a.num("ctl-port", 18990)? as u16;
    let seed = a.num("seed", 1)?;
    let count = a.num("count", 3000)?;
    let limit = Duration::from_secs(a.num("seconds", 60)?);
    let deadline = Instant::now() + limit;

    let sock = UdpSocket::bind(SocketAddrV4::new(local, ROCE_PORT)).map_err(|e| format!("bind {local}:{ROCE_PORT}: {e}"))?;
    rustix::net::sockopt::set_ip_mtu_discover(&sock, rustix::net::sockopt::Ipv4PathMtuDiscovery::DO).map_err(|e| e.to_string())?;
    let ctl = TcpStream::connect_timeout(&SocketAddrV4::new(victim, ctl_port).into(), Duration::from_secs(5)).map_err(|e| format!("control connect: {e}"))?;
    ctl.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut w = ctl.try_clone().map_err(|e| e.to_string())?;
    let mut rd = BufReader::new(ctl);
    let mut at = Attacker {
        sock,
        local,
        victim,
        rng: Rng::new(seed),
        sent: BTreeMap::new(),
        bytes_sent: 0,
        responses: BTreeMap::new(),
        read_response_bytes: 0,
        leaks: 0,
        leak_example: None,
        control_psn: None,
        control_acked: 0,
        sweep_op: 0,
        sweep_trunc: 0,
        sweep_mad: 0,
        sweep_ep: 0,
    };
    let mut rounds = 0u64;
    let total = |at: &Attacker| at.sent.iter().filter(|(k, _)| **k != "control").map(|(_, v)| v).sum::<u64>();
    let mut capped = false;
    while total(&at) < count {
        if Instant::now() >= deadline {
            capped = true;
            break;
        }
        let t = arm(&mut rd, &mut w)?;
        // The control WRITE, in bounds at T1's expected PSN: must be ACKed.
        at.control_psn = Some(psn(t.psn1));
        let off = 8 * at.rng.below((t.len - 64) / 8);
        let c = at.write_only(t.t1, t.psn1, t.va + off, t.rkey, 64, 64);
        at.send("control", &c)?;
        at.drain(Duration::from_millis(2));
        let kind = KINDS[(rounds % KINDS.len() as u64) as usize];
        for d in at.burst(kind, &t) {
            at.send(kind, &d)?;
        }
        at.drain(Duration::from_micros(500));
        rounds += 1;
    }
    at.drain(Duration::from_millis(300));
    // One last ARM: the victim must still answer.
    arm(&mut rd, &mut w)?;
    println!(
        "ATTACK seed={seed} rounds={rounds} datagrams={} bytes={} control_acked={}/{rounds} read_response_bytes={} leaks={}{}",
        total(&at),
        at.bytes_sent,
        at.control_acked,
        at.read_response_bytes,
        at.leaks,
        if capped { " (stopped by the time cap)" } else { "" }
    );
    println!("ATTACK sent by kind: {:?}", at.sent);
    println!("ATTACK received by kind: {:?}", at.responses);
    if at.leaks > 0 {
        return Err(format!("{} datagrams from the victim carry canary bytes: {}", at.leaks, at.leak_example.unwrap_or_default()));
    }
    if rounds > 0 && at.control_acked * 2 < rounds {
        return Err(format!("only {} of {rounds} control WRITEs were ACKed: the attack did not reach the responder", at.control_acked));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attacker(seed: u64) -> Attacker {
        Attacker {
            sock: UdpSocket::bind("127.0.0.1:0").unwrap(),
            local: Ipv4Addr::new(10, 71, 0, 3),
            victim: Ipv4Addr::new(10, 71, 0, 1),
            rng: Rng::new(seed),
            sent: BTreeMap::new(),
            bytes_sent: 0,
            responses: BTreeMap::new(),
            read_response_bytes: 0,
            leaks: 0,
            leak_example: None,
            control_psn: None,
            control_acked: 0,
            sweep_op: 0,
            sweep_trunc: 0,
            sweep_mad: 0,
            sweep_ep: 0,
        }
    }

    const T: Target = Target {
        t1: 0x2,
        t2: 0x3,
        psn1: 0xff_fffe,
        psn2: 7,
        rkey: 0x1234,
        va: 0x7f00_0000_2000,
        len: 65536,
        r2key: 0x2234,
        r2va: 0x7f00_0010_0000,
        r2len: 4096,
        lrkey: 0x3234,
    };

    /// What the victim's receive path accepts: parses, and its ICRC holds with the IPv4
    /// ID 0 our socket sends.
    fn accepted(a: &Attacker, d: &[u8]) -> bool {
        let Ok(p) = RocePacket::new_checked(d) else { return false };
        RoceRepr::parse(&p).is_ok()
            && icrc::solve_ipv4_id(a.local, a.victim, ROCE_PORT, ROCE_PORT, p.without_icrc(), p.icrc()) == Some(0)
    }

    /// Every kind makes datagrams that fit the 1500-byte link; the structured kinds are
    /// packets the victim accepts (the attack is about their contents), and `bad_icrc`'s
    /// never are.
    #[test]
    fn every_kind_makes_datagrams_that_reach_the_checks_it_aims_at() {
        let mut a = attacker(3);
        for kind in KINDS {
            let burst = a.burst(kind, &T);
            assert!(!burst.is_empty(), "{kind}");
            assert!(burst.iter().all(|d| d.len() <= 1472), "{kind}: a datagram exceeds the link");
            let ok = burst.iter().filter(|d| accepted(&a, d)).count();
            match kind {
                "bad_icrc" => assert_eq!(ok, 0, "{kind}"),
                "reth_oob" | "va_wrap" | "dma_len" | "write_overrun" | "forged_rkey" | "wrong_pd" | "read_neighbour" | "psn_window" | "cm_mad" => {
                    assert_eq!(ok, burst.len(), "{kind}: every packet must parse and check")
                }
                _ => {}
            }
        }
        let w = a.write_only(T.t1, T.psn1, T.va, T.rkey, 64, 64);
        assert!(accepted(&a, &w));
        let r = RoceRepr::parse(&RocePacket::new_checked(&w[..]).unwrap()).unwrap();
        assert_eq!((r.bth.dest_qp, r.bth.psn, r.reth.unwrap().va, r.payload_len), (T.t1, T.psn1, T.va, 64));
    }

    /// The sweeps cover every opcode byte, every truncation length and every MAD size.
    #[test]
    fn sweeps_cover_every_opcode_and_size() {
        let mut a = attacker(1);
        let mut ops = std::collections::BTreeSet::new();
        for _ in 0..32 {
            for d in a.burst("opcode", &T) {
                ops.insert(d[0]);
            }
        }
        assert_eq!(ops.len(), 256);
        for _ in 0..50 {
            a.burst("cm_mad", &T);
        }
        assert!(a.sweep_mad >= 300);
    }

    #[test]
    fn a_seed_makes_the_same_attack() {
        let (mut a, mut b) = (attacker(9), attacker(9));
        for kind in KINDS {
            assert_eq!(a.burst(kind, &T), b.burst(kind, &T), "{kind}");
        }
        assert_ne!(attacker(9).burst("opcode", &T), attacker(10).burst("opcode", &T));
    }
}
