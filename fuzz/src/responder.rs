//! `responder`: the network receive path from datagram to placement, at the protocol core.
//!
//! Input: an 8-byte configuration (mode, MTU, QP access, `max_dest_rd_atomic`, `rq_psn`,
//! RNR timer), then records, each a tag byte and its operands:
//! - tags 0..=4: a datagram (a 16-bit length and its bytes) that goes through
//!   `RocePacket::new_checked`, `RoceRepr::parse` and `Request::from_repr`, as the UDP
//!   transport does, to `Responder::handle_request`; its `Delivery` is carried out;
//! - tag 5: post a receive WQE (16-bit capacity);
//! - tag 6: send every queued response; tag 7: send one.
//!
//! The target (the device side) is one 4 KiB memory region with canaries on both sides and
//! a receive queue. Asserts that nothing the responder plans lies outside what exists:
//! every `Placement::Memory` of a payload, every READ response source, every atomic and
//! ATOMIC_WRITE word lies inside the region under its rkey; every `Placement::Recv` names a
//! receive WQE the responder took and has not completed, within its capacity (UD: after
//! the 40-byte GRH area); a receive WQE completes at most once; responses carry at most an
//! MTU of payload; the canaries are intact at the end.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use rverbs_proto::psn::Psn;
use rverbs_proto::rc::{AtomicOp, Delivery, Mode, Placement, RecvSlot, Request, Responder, ResponderConfig, Target};
use rverbs_proto::rc::{Response, UD_GRH_LEN};
use rverbs_proto::verbs::{Access, WcOpcode, WcStatus};
use rverbs_proto::violation::Violation;
use rverbs_proto::wire::{FethRepr, RocePacket, RoceRepr};

use crate::input::Input;

/// The region's first byte.
pub const BASE: u64 = 0x7f00_1000_0000;
/// The region's length.
pub const LEN: u64 = 4096;
/// The region's rkey.
pub const RKEY: u32 = 0x0000_1234;
/// Q_Key of the UD QP.
pub const QKEY: u32 = 0x1111_1111;
const CANARY: usize = 64;
const CANARY_BYTE: u8 = 0xa5;

/// The device side: the region (with canaries) and the receive queue.
pub struct FuzzTarget {
    mem: Vec<u8>,
    recvs: VecDeque<RecvSlot>,
    /// Receive WQEs the responder took and has not completed: wr_id → capacity.
    taken: HashMap<u64, u64>,
    next_wr: u64,
}

impl Default for FuzzTarget {
    fn default() -> FuzzTarget {
        FuzzTarget::new()
    }
}

impl FuzzTarget {
    /// The region filled with a pattern, canaries around it, no receive WQE.
    pub fn new() -> FuzzTarget {
        let mut mem = vec![CANARY_BYTE; LEN as usize + 2 * CANARY];
        for (i, b) in mem[CANARY..CANARY + LEN as usize].iter_mut().enumerate() {
            *b = (i * 13 + 1) as u8;
        }
        FuzzTarget {
            mem,
            recvs: VecDeque::new(),
            taken: HashMap::new(),
            next_wr: 1,
        }
    }

    /// Posts a receive WQE of `capacity` bytes; returns its wr_id.
    pub fn post_recv(&mut self, capacity: u64) -> u64 {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        self.recvs.push_back(RecvSlot { wr_id, capacity });
        wr_id
    }

    /// The `len` bytes of the region at `va` (a READ response's payload).
    pub fn read(&self, va: u64, len: u32) -> &[u8] {
        let o = self.region("read", RKEY, va, u64::from(len));
        &self.mem[o..o + len as usize]
    }

    /// The offset in `mem` of `[va, va + len)`, asserting it lies in the region.
    #[track_caller]
    fn region(&self, what: &str, rkey: u32, va: u64, len: u64) -> usize {
        assert_eq!(rkey, RKEY, "{what}: unknown rkey {rkey:#x}");
        let end = va
            .checked_add(len)
            .unwrap_or_else(|| panic!("{what}: {va:#x}+{len} wraps"));
        assert!(
            va >= BASE && end <= BASE + LEN,
            "{what}: [{va:#x}, {end:#x}) outside the region"
        );
        CANARY + (va - BASE) as usize
    }

    fn word(&mut self, what: &str, rkey: u32, va: u64) -> &mut [u8] {
        let o = self.region(what, rkey, va, 8);
        &mut self.mem[o..o + 8]
    }
}

impl Target for FuzzTarget {
    fn check_rkey(&mut self, rkey: u32, va: u64, len: u64, _access: Access) -> Result<(), Violation> {
        if rkey != RKEY {
            return Err(Violation::RkeyUnknown);
        }
        match va.checked_add(len) {
            Some(end) if va >= BASE && end <= BASE + LEN => Ok(()),
            _ => Err(Violation::RkeyBounds),
        }
    }

    fn take_recv(&mut self) -> Option<RecvSlot> {
        let slot = self.recvs.pop_front()?;
        assert!(self.taken.insert(slot.wr_id, slot.capacity).is_none());
        Some(slot)
    }

    fn check_recv(&mut self, slot: &RecvSlot, offset: u64, len: u64) -> Result<(), Violation> {
        assert_eq!(
            self.taken.get(&slot.wr_id),
            Some(&slot.capacity),
            "check_recv of a WQE not taken"
        );
        match offset.checked_add(len) {
            Some(end) if end <= slot.capacity => Ok(()),
            _ => Err(Violation::RecvWqeMalformed),
        }
    }

    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, Violation> {
        if !va.is_multiple_of(8) {
            return Err(Violation::MisalignedAtomic);
        }
        let w = self.word("atomic", rkey, va);
        let old = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd(add) => old.wrapping_add(add),
        };
        w.copy_from_slice(&new.to_ne_bytes());
        Ok(old)
    }

    fn atomic_write(&mut self, rkey: u32, va: u64, value: u64) -> Result<(), Violation> {
        self.word("atomic_write", rkey, va)
            .copy_from_slice(&value.to_ne_bytes());
        Ok(())
    }

    fn flush(&mut self, rkey: u32, va: u64, len: u32, _feth: FethRepr) -> Result<(), Violation> {
        self.check_rkey(rkey, va, u64::from(len), Access::empty())
    }

    fn invalidate(&mut self, rkey: u32) -> bool {
        rkey.is_multiple_of(2)
    }
}

/// Builds the responder's configuration from the first 8 bytes.
pub fn config(inp: &mut Input<'_>) -> ResponderConfig {
    let mode = match inp.u8() % 3 {
        0 => Mode::Rc,
        1 => Mode::Uc,
        _ => Mode::Ud,
    };
    let mtu = [256, 1024, 4096, 512][usize::from(inp.u8() % 4)];
    let bits = inp.u8();
    let mut access = Access::LOCAL_WRITE;
    for (bit, a) in [
        Access::REMOTE_WRITE,
        Access::REMOTE_READ,
        Access::REMOTE_ATOMIC,
        Access::FLUSH_GLOBAL,
        Access::FLUSH_PERSISTENT,
    ]
    .into_iter()
    .enumerate()
    {
        // Bit clear grants it, so that the all-zero configuration grants everything.
        if bits & (1 << bit) == 0 {
            access |= a;
        }
    }
    let max_dest_rd_atomic = inp.u8() % 17;
    let rq_psn = Psn::new(inp.u24());
    let min_rnr_timer = inp.u8();
    ResponderConfig {
        mode,
        mtu,
        rq_psn,
        access,
        max_dest_rd_atomic,
        min_rnr_timer,
        qkey: QKEY,
        xrc: false,
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let now = Instant::now();
    let mut inp = Input::new(data);
    let cfg = config(&mut inp);
    let mut resp = Responder::new(cfg);
    let mut t = FuzzTarget::new();
    while !inp.is_empty() {
        match inp.u8() % 8 {
            0..=4 => {
                let dgram = inp.record();
                let Ok(packet) = RocePacket::new_checked(dgram) else {
                    continue;
                };
                let Ok(repr) = RoceRepr::parse(&packet) else { continue };
                let payload = packet.payload();
                let req = Request::from_repr(&repr, payload);
                let d = resp.handle_request(now, &req, &mut t);
                deliver(&cfg, &mut t, &d, payload);
            }
            5 => {
                t.post_recv(u64::from(inp.u16()));
            }
            6 => {
                while let Some(r) = resp.poll_transmit(now) {
                    transmit(&cfg, &t, &r);
                }
            }
            _ => {
                if let Some(r) = resp.poll_transmit(now) {
                    transmit(&cfg, &t, &r);
                }
            }
        }
    }
    // Everything still queued is sent, and stays inside the region.
    let mut left = 0u64;
    while let Some(r) = resp.poll_transmit(now) {
        transmit(&cfg, &t, &r);
        left += 1;
        assert!(left < 1 << 24, "poll_transmit never runs dry");
    }
    assert!(
        t.mem[..CANARY].iter().all(|&b| b == CANARY_BYTE),
        "canary before the region"
    );
    assert!(
        t.mem[CANARY + LEN as usize..].iter().all(|&b| b == CANARY_BYTE),
        "canary after the region"
    );
}

/// Carries out a `Delivery` as a driver would, asserting it stays within what exists.
pub fn deliver(cfg: &ResponderConfig, t: &mut FuzzTarget, d: &Delivery, payload: &[u8]) {
    match d.place {
        Some(Placement::Memory { rkey, va }) => {
            assert!(d.executed, "placement of a request not executed");
            let o = t.region("payload placement", rkey, va, payload.len() as u64);
            t.mem[o..o + payload.len()].copy_from_slice(payload);
        }
        Some(Placement::Recv { wr_id, offset }) => {
            assert!(d.executed, "placement of a request not executed");
            let cap = *t
                .taken
                .get(&wr_id)
                .unwrap_or_else(|| panic!("placement into receive {wr_id}, not taken or already completed"));
            if cfg.mode == Mode::Ud {
                // The driver writes the GRH area first.
                assert_eq!(offset, UD_GRH_LEN, "UD payload lands after the GRH area");
            }
            let end = offset.checked_add(payload.len() as u64).expect("offset + len wraps");
            assert!(end <= cap, "receive {wr_id}: [{offset}, {end}) beyond its {cap} bytes");
        }
        None => {}
    }
    if let Some(c) = d.recv {
        let cap = t
            .taken
            .remove(&c.wr_id)
            .unwrap_or_else(|| panic!("completion of receive {}, not taken or already completed", c.wr_id));
        if c.status == WcStatus::Success && c.opcode == Some(WcOpcode::Recv) {
            assert!(
                u64::from(c.byte_len) <= cap,
                "receive {}: {} bytes completed in {cap}",
                c.wr_id,
                c.byte_len
            );
        }
    }
}

/// A response about to be sent: its payload comes from the region.
fn transmit(cfg: &ResponderConfig, t: &FuzzTarget, r: &Response) {
    assert!(
        r.payload_len <= cfg.mtu,
        "response of {} bytes above the MTU",
        r.payload_len
    );
    if let Some(src) = r.source {
        assert_eq!(src.len, r.payload_len);
        if src.len == 0 {
            // A zero-length READ names no memory: CHK_RKEY is skipped for it.
            return;
        }
        let o = t.region("READ response source", src.rkey, src.va, u64::from(src.len));
        let _ = &t.mem[o..o + src.len as usize];
    } else {
        // Empty READ responses (FLUSH, ATOMIC_WRITE) and ACKs carry nothing.
        assert_eq!(r.payload_len, 0, "{r:?}");
    }
}
