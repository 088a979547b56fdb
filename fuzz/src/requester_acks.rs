//! `requester_acks`: the send side fed arbitrary response packets (ACK, NAK, RNR NAK, READ
//! responses, ATOMIC ACK) after posting a few work requests.
//!
//! Input: a 6-byte configuration ([`config`]: MTU and whether AckReq is coalesced,
//! `max_rd_atomic`, `sq_psn`, timer and retry knobs), the number of WRs to post and each
//! WR ([`wqe`]: opcode, length, flags), then records:
//! - tags 0..=3: a datagram (16-bit length, bytes) through `RocePacket::new_checked`,
//!   `RoceRepr::parse` and `Response::from_repr` to `Requester::handle_response`;
//! - tag 4: transmit everything the requester will send now; tag 5: one packet;
//! - tag 6: advance time to the next timer deadline and run the timers;
//! - tag 7: post one more WR.
//!
//! Asserts, after every step: `comp.psn` never beyond the highest PSN transmitted, `req.psn`
//! within the PSNs the posted WRs use from `sq_psn`; every request gathers only bytes of its own WR
//! (`payload_offset + payload_len ≤ length`) and at most an MTU; every READ placement
//! names a READ WR not yet completed and lies within its length; every completion names a
//! posted WR, once, in posting order; a READ completes with success only once responses
//! covered all its bytes, an atomic only with an original value.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{packets, Mode, Requester, RequesterConfig, Response, SendWqe};
use rverbs_proto::verbs::{SendFlags, WcStatus, WrOpcode};
use rverbs_proto::wire::{RocePacket, RoceRepr};

use crate::input::Input;

/// Opcodes the harness posts (every RC opcode the core runs).
pub const OPCODES: [WrOpcode; 10] = [
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::SendWithInv,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicFetchAndAdd,
    WrOpcode::AtomicWrite,
    WrOpcode::Flush,
];

/// The requester's configuration from 6 bytes (the first: MTU in bits 0–1, AckReq
/// coalescing in bit 2).
pub fn config(inp: &mut Input<'_>) -> RequesterConfig {
    let first = inp.u8();
    let mtu = [256, 1024, 4096, 512][usize::from(first % 4)];
    let max_rd_atomic = inp.u8() % 17;
    let sq_psn = Psn::new(inp.u24());
    let knobs = inp.u8();
    RequesterConfig {
        mode: Mode::Rc,
        mtu,
        sq_psn,
        timeout: if knobs & 1 == 0 { 14 } else { 0 },
        retry_cnt: (knobs >> 1) & 7,
        rnr_retry: (knobs >> 4) & 7,
        max_rd_atomic,
        max_send_wr: 16,
        sq_sig_all: knobs & 0x80 != 0,
        // A bit the MTU leaves free: half the inputs ask only where the requester stops.
        ack_req_coalescing: first & 4 != 0,
        ..RequesterConfig::TEMPLATE
    }
}

/// A WR from 4 bytes: opcode, length (16 bits, cut to 4 MTUs), flags.
pub fn wqe(inp: &mut Input<'_>, id: u64, mtu: u32) -> SendWqe {
    let opcode = OPCODES[usize::from(inp.u8()) % OPCODES.len()];
    let length = u32::from(inp.u16()) % (4 * mtu + 1);
    let f = inp.u8();
    let mut flags = SendFlags::empty();
    if f & 1 == 0 {
        flags |= SendFlags::SIGNALED;
    }
    if f & 2 != 0 {
        flags |= SendFlags::FENCE;
    }
    SendWqe {
        id,
        opcode,
        length,
        // The region of the `responder` harness, so that its answers make good seeds.
        remote_va: crate::responder::BASE + 64 * u64::from(f >> 4),
        rkey: crate::responder::RKEY,
        imm: 0x0102_0304,
        compare_add: 1,
        swap: 2,
        flags,
        flush: (opcode == WrOpcode::Flush).then_some(rverbs_proto::wire::FethRepr {
            selectivity: rverbs_proto::wire::Selectivity::MemoryRange,
            placement: rverbs_proto::wire::Placement::GLOBAL_VISIBILITY,
        }),
        ud: None,
        xrc_srq: None,
    }
}

/// `RVERBS_FUZZ_TRACE=1` prints each step when a regression replays under `cargo test`
/// (compiled out of the fuzzing build).
macro_rules! trace {
    ($($arg:tt)*) => {
        #[cfg(not(fuzzing))]
        if std::env::var_os("RVERBS_FUZZ_TRACE").is_some() {
            eprintln!($($arg)*);
        }
    };
}

struct Harness {
    req: Requester,
    cfg: RequesterConfig,
    /// Posted WRs: id → (opcode, length as the requester sees it).
    posted: HashMap<u64, (WrOpcode, u32)>,
    completed: HashMap<u64, ()>,
    /// Byte ranges of each READ WR that READ responses were placed into.
    read_placed: HashMap<u64, Vec<(u64, u64)>>,
    last_completed: u64,
    next_id: u64,
    /// PSNs the posted WRs use, from `sq_psn`.
    psns: u32,
    /// One past the highest PSN transmitted (a READ REQUEST: all its response PSNs).
    sent_end: Psn,
    now: Instant,
}

impl Harness {
    fn post(&mut self, inp: &mut Input<'_>) {
        let id = self.next_id;
        self.next_id += 1;
        let w = wqe(inp, id, self.cfg.mtu);
        trace!("post {w:?}");
        if self.req.post(w).is_ok() {
            let length = if w.opcode.is_atomic() || w.opcode == WrOpcode::AtomicWrite {
                8
            } else {
                w.length
            };
            self.posted.insert(id, (w.opcode, length));
            self.psns += if w.opcode == WrOpcode::Flush || w.opcode.is_atomic() || w.opcode == WrOpcode::AtomicWrite {
                1
            } else {
                packets(length, self.cfg.mtu)
            };
        }
    }

    fn transmit(&mut self, all: bool) {
        let mut n = 0u32;
        while let Some(r) = self.req.poll_transmit(self.now) {
            trace!("  sent {:?} psn {} len {}", r.opcode, r.psn.get(), r.payload_len);
            let &(opcode, length) = self
                .posted
                .get(&r.wqe_id)
                .unwrap_or_else(|| panic!("request for WR {} never posted", r.wqe_id));
            assert!(
                !self.completed.contains_key(&r.wqe_id),
                "request for completed WR {}",
                r.wqe_id
            );
            if r.opcode.has_payload() && r.atomic_write.is_none() {
                let end = r.payload_offset.checked_add(u64::from(r.payload_len)).expect("wraps");
                assert!(
                    end <= u64::from(length),
                    "{opcode:?} WR {}: gathers [{}, {end}) of {length}",
                    r.wqe_id,
                    r.payload_offset
                );
                assert!(r.payload_len <= self.cfg.mtu);
            }
            let span = match r.reth {
                Some(reth) if opcode == WrOpcode::RdmaRead => packets(reth.dma_len, self.cfg.mtu),
                _ => 1,
            };
            if r.psn.add(span).diff(self.sent_end) > 0 {
                self.sent_end = r.psn.add(span);
            }
            let d = r.psn.diff(self.cfg.sq_psn);
            assert!(
                d >= 0 && (d as u32) < self.psns.max(1),
                "request PSN {} outside the {} posted from {}",
                r.psn.get(),
                self.psns,
                self.cfg.sq_psn.get()
            );
            n += 1;
            assert!(n < 1 << 20, "poll_transmit never runs dry");
            if !all {
                break;
            }
        }
    }

    fn response(&mut self, resp: &Response) {
        trace!(
            "response {:?} psn {} {:?} len {}",
            resp.opcode,
            resp.psn.get(),
            resp.syndrome,
            resp.payload_len
        );
        if let Some(p) = self.req.handle_response(self.now, resp) {
            let &(opcode, length) = self
                .posted
                .get(&p.wqe_id)
                .unwrap_or_else(|| panic!("READ placement for WR {} never posted", p.wqe_id));
            assert_eq!(opcode, WrOpcode::RdmaRead, "READ data placed into a {opcode:?} WR");
            assert!(
                !self.completed.contains_key(&p.wqe_id),
                "READ data placed into completed WR {}",
                p.wqe_id
            );
            assert_eq!(p.len, resp.payload_len);
            let end = p.offset.checked_add(u64::from(p.len)).expect("wraps");
            assert!(
                end <= u64::from(length),
                "READ WR {}: places [{}, {end}) into {length} bytes",
                p.wqe_id,
                p.offset
            );
            self.read_placed.entry(p.wqe_id).or_default().push((p.offset, end));
        }
    }

    fn completions(&mut self) {
        while let Some(c) = self.req.poll_completion() {
            trace!("  completion {c:?}");
            assert!(
                self.posted.contains_key(&c.id),
                "completion of WR {} never posted",
                c.id
            );
            assert!(self.completed.insert(c.id, ()).is_none(), "WR {} completed twice", c.id);
            assert!(
                c.id > self.last_completed,
                "WR {} completed after WR {}",
                c.id,
                self.last_completed
            );
            self.last_completed = c.id;
            let (opcode, length) = self.posted[&c.id];
            if c.status == WcStatus::Success {
                // A READ succeeds only once all its bytes were placed; an atomic only
                // with the original value its ATOMIC ACKNOWLEDGE carried.
                if opcode == WrOpcode::RdmaRead {
                    let mut ranges = self.read_placed.remove(&c.id).unwrap_or_default();
                    ranges.sort_unstable();
                    let mut covered = 0;
                    for (start, end) in ranges {
                        if start <= covered {
                            covered = covered.max(end);
                        }
                    }
                    assert!(
                        covered >= u64::from(length),
                        "READ WR {} succeeded with {covered} of {length} bytes placed",
                        c.id
                    );
                }
                if opcode.is_atomic() {
                    assert!(
                        c.atomic_original.is_some(),
                        "{opcode:?} WR {} succeeded without an original value",
                        c.id
                    );
                }
            }
        }
    }

    fn check_psns(&self) {
        let (sq, req, comp) = (self.cfg.sq_psn, self.req.req_psn(), self.req.comp_psn());
        trace!(
            "  req.psn {} comp.psn {} state {:?}",
            req.get(),
            comp.get(),
            self.req.state()
        );
        // Nothing is acknowledged that was not sent (`req.psn` itself may fall behind
        // `comp.psn` when a late ACK follows a go-back-N rewind).
        assert!(
            comp.diff(self.sent_end) <= 0,
            "comp.psn {} beyond the PSNs sent ({})",
            comp.get(),
            self.sent_end.get()
        );
        assert!(comp.diff(sq) >= 0, "comp.psn {} behind sq_psn {}", comp.get(), sq.get());
        assert!(
            req.diff(sq) as u32 <= self.psns,
            "req.psn {} beyond the {} PSNs posted from {}",
            req.get(),
            self.psns,
            sq.get()
        );
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let cfg = config(&mut inp);
    let mut h = Harness {
        req: Requester::new(cfg),
        cfg,
        posted: HashMap::new(),
        completed: HashMap::new(),
        read_placed: HashMap::new(),
        last_completed: 0,
        next_id: 1,
        psns: 0,
        sent_end: cfg.sq_psn,
        now: Instant::now(),
    };
    for _ in 0..(inp.u8() % 8) + 1 {
        h.post(&mut inp);
    }
    while !inp.is_empty() {
        match inp.u8() % 8 {
            0..=3 => {
                let dgram = inp.record();
                if let Ok(packet) = RocePacket::new_checked(dgram) {
                    if let Ok(repr) = RoceRepr::parse(&packet) {
                        h.response(&Response::from_repr(&repr));
                    }
                }
            }
            4 => h.transmit(true),
            5 => h.transmit(false),
            6 => {
                trace!("timeout");
                let at = h.req.poll_timeout().unwrap_or(h.now + Duration::from_millis(1));
                h.now = h.now.max(at);
                h.req.handle_timeout(h.now);
            }
            _ => h.post(&mut inp),
        }
        h.completions();
        h.check_psns();
    }
}
