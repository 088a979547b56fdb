//! A simulated link between a requester and a responder, in virtual time (quinn's test
//! `Pair`, smoltcp's fault injector): seeded loss, duplication, reordering and delay, a
//! virtual clock the harness advances to the next deadline, no threads, sleeps or wall
//! clock. A failing seed replays exactly.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::{AtomicOp, Completion, Placement, RecvCompletion, RecvSlot, Request, Requester, RequesterConfig};
use super::{Responder, ResponderConfig, Response, SendWqe, Target};
use crate::verbs::{Access, WrOpcode};
use crate::fault::{Corrupt, FaultConfig, Injector};
use crate::violation::Violation;
use crate::wire::FethRepr;

/// Fault knobs of one direction.
#[derive(Clone, Copy, Debug)]
pub(super) struct Faults {
    pub(super) latency: Duration,
    pub(super) loss: f64,
    pub(super) duplicate: f64,
    /// Probability that a packet is held back by up to `reorder_by`.
    pub(super) reorder: f64,
    pub(super) reorder_by: Duration,
}

impl Faults {
    pub(super) const CLEAN: Faults = Faults {
        latency: Duration::from_micros(5),
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_by: Duration::from_micros(50),
    };
}

/// What a link filter decides for one packet (rustls `transfer_altered`, by verdict).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Pass,
    Drop,
}

type Filter<P> = Box<dyn FnMut(&P) -> Verdict>;

/// One direction of the link: the crate's fault injector, plus a filter the tests use to
/// drop chosen packets.
pub(super) struct Link<P: Clone + Corrupt> {
    inj: Injector<P>,
    /// Decides per packet before the random faults; `Drop` loses it.
    pub(super) filter: Option<Filter<P>>,
}

impl<P: Clone + Corrupt> Link<P> {
    fn new(f: Faults, seed: u64) -> Self {
        let cfg = FaultConfig {
            seed,
            drop: f.loss,
            duplicate: f.duplicate,
            reorder: f.reorder,
            reorder_by: f.reorder_by,
            corrupt: 0.0,
            delay: f.latency,
        };
        Link { inj: Injector::new(cfg), filter: None }
    }

    fn send(&mut self, now: Instant, p: P) {
        if let Some(f) = &mut self.filter {
            if f(&p) == Verdict::Drop {
                return;
            }
        }
        self.inj.send(now, p);
    }

    fn next_at(&self) -> Option<Instant> {
        self.inj.poll_timeout()
    }

    fn pop_due(&mut self, now: Instant) -> Option<P> {
        self.inj.pop_due(now)
    }
}

/// The simulated link carries descriptors, not bytes (no ICRC to catch a flipped bit): its
/// corruption rate is always 0, and a corrupted packet would be one the receiver's ICRC
/// check drops, which `loss` already models.
impl Corrupt for ReqPkt {
    fn corrupt(&mut self, _random: u64) {}
}

impl Corrupt for RespPkt {
    fn corrupt(&mut self, _random: u64) {}
}

#[derive(Clone, Debug)]
pub(super) struct ReqPkt {
    pub(super) req: Request,
    pub(super) payload: Vec<u8>,
}

#[derive(Clone, Debug)]
pub(super) struct RespPkt {
    pub(super) resp: Response,
    pub(super) payload: Vec<u8>,
}

/// Base VA and rkey of the responder's one memory region.
pub(super) const MR_BASE: u64 = 0x10_0000;
pub(super) const RKEY: u32 = 0x77;

/// The responder's device: one memory region, a receive queue, switches for faults.
pub(super) struct SimTarget {
    pub(super) mem: Vec<u8>,
    pub(super) mr_access: Access,
    pub(super) recvs: VecDeque<RecvSlot>,
    pub(super) recv_bufs: HashMap<u64, Vec<u8>>,
    pub(super) malformed_recv: bool,
    pub(super) invalidate_ok: bool,
    pub(super) atomics_executed: usize,
    /// XRC: the SRQs of the target QP's domain that requests may name.
    pub(super) xrc_srqs: Vec<u32>,
    /// XRC: every SRQ number the responder asked about, in order.
    pub(super) xrc_asked: Vec<u32>,
}

impl SimTarget {
    pub(super) fn new(size: usize) -> SimTarget {
        SimTarget {
            mem: (0..size).map(|i| (i * 7 + 3) as u8).collect(),
            mr_access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC
                | Access::FLUSH_GLOBAL,
            recvs: VecDeque::new(),
            recv_bufs: HashMap::new(),
            malformed_recv: false,
            invalidate_ok: true,
            atomics_executed: 0,
            xrc_srqs: Vec::new(),
            xrc_asked: Vec::new(),
        }
    }

    pub(super) fn post_recv(&mut self, wr_id: u64, capacity: u64) {
        self.recvs.push_back(RecvSlot { wr_id, capacity });
        self.recv_bufs.insert(wr_id, vec![0; capacity as usize]);
    }

    fn offset(&self, va: u64) -> usize {
        (va - MR_BASE) as usize
    }

    pub(super) fn word(&self, va: u64) -> u64 {
        let o = self.offset(va);
        u64::from_ne_bytes(self.mem[o..o + 8].try_into().expect("8 bytes"))
    }

    fn set_word(&mut self, va: u64, v: u64) {
        let o = self.offset(va);
        self.mem[o..o + 8].copy_from_slice(&v.to_ne_bytes());
    }
}

impl Target for SimTarget {
    fn check_rkey(&mut self, rkey: u32, va: u64, len: u64, access: Access) -> Result<(), Violation> {
        if rkey != RKEY {
            return Err(Violation::RkeyUnknown);
        }
        if va < MR_BASE || va.saturating_add(len) > MR_BASE + self.mem.len() as u64 {
            return Err(Violation::RkeyBounds);
        }
        if !self.mr_access.contains(access) {
            return Err(Violation::RkeyAccess);
        }
        Ok(())
    }

    fn take_recv(&mut self) -> Option<RecvSlot> {
        self.recvs.pop_front()
    }

    fn check_recv(&mut self, _slot: &RecvSlot, _offset: u64, _len: u64) -> Result<(), Violation> {
        if self.malformed_recv {
            Err(Violation::RecvWqeMalformed)
        } else {
            Ok(())
        }
    }

    fn atomic(&mut self, _rkey: u32, va: u64, op: AtomicOp) -> Result<u64, Violation> {
        self.atomics_executed += 1;
        let old = self.word(va);
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
        self.set_word(va, new);
        Ok(old)
    }

    fn atomic_write(&mut self, _rkey: u32, va: u64, value: u64) -> Result<(), Violation> {
        self.set_word(va, value);
        Ok(())
    }

    fn flush(&mut self, rkey: u32, va: u64, len: u32, _feth: FethRepr) -> Result<(), Violation> {
        self.check_rkey(rkey, va, u64::from(len), Access::empty())
    }

    fn invalidate(&mut self, _rkey: u32) -> bool {
        self.invalidate_ok
    }

    fn select_xrc_srq(&mut self, srqn: u32) -> Result<(), Violation> {
        self.xrc_asked.push(srqn);
        if self.xrc_srqs.contains(&srqn) {
            Ok(())
        } else {
            Err(Violation::XrcSrqInvalid)
        }
    }
}

/// A requester and a responder joined by two lossy links, in virtual time.
pub(super) struct Pair {
    pub(super) t0: Instant,
    pub(super) now: Instant,
    pub(super) client: Requester,
    pub(super) server: Responder,
    pub(super) target: SimTarget,
    /// Per WQE id: the message (SEND/WRITE payload, READ destination).
    pub(super) bufs: HashMap<u64, Vec<u8>>,
    pub(super) fwd: Link<ReqPkt>,
    pub(super) back: Link<RespPkt>,
    pub(super) completions: Vec<Completion>,
    pub(super) recv_completions: Vec<RecvCompletion>,
    /// Every request the client transmitted, with its time.
    pub(super) sent: Vec<(Instant, Request)>,
    /// Every response the server transmitted, with its time.
    pub(super) responses: Vec<(Instant, Response)>,
    /// PSNs of the requests the server executed, in order.
    pub(super) executed: Vec<u32>,
    /// A PSN whose memory placement the driver finds gone (deregistered between the
    /// machine's check and the copy): the sim reports it with `placement_failed`.
    pub(super) lose_placement_of: Option<u32>,
    next_id: u64,
}

impl Pair {
    pub(super) fn new(req: RequesterConfig, resp: ResponderConfig) -> Pair {
        Pair::with_faults(req, resp, Faults::CLEAN, Faults::CLEAN, 1)
    }

    pub(super) fn with_faults(req: RequesterConfig, resp: ResponderConfig, fwd: Faults, back: Faults, seed: u64) -> Pair {
        let t0 = Instant::now();
        Pair {
            t0,
            now: t0,
            client: Requester::new(req),
            server: Responder::new(resp),
            target: SimTarget::new(64 * 1024),
            bufs: HashMap::new(),
            fwd: Link::new(fwd, seed.wrapping_mul(2).wrapping_add(1)),
            back: Link::new(back, seed.wrapping_mul(2).wrapping_add(2)),
            completions: Vec::new(),
            recv_completions: Vec::new(),
            sent: Vec::new(),
            responses: Vec::new(),
            executed: Vec::new(),
            lose_placement_of: None,
            next_id: 1,
        }
    }

    /// Virtual time since the start.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    #[track_caller]
    pub(super) fn post(&mut self, wqe: SendWqe, data: Vec<u8>) -> u64 {
        let id = if wqe.id == 0 { self.next_id } else { wqe.id };
        self.next_id = self.next_id.max(id) + 1;
        self.bufs.insert(id, data);
        self.client.post(SendWqe { id, ..wqe }).expect("post");
        id
    }

    pub(super) fn post_send(&mut self, data: Vec<u8>) -> u64 {
        let length = data.len() as u32;
        self.post(SendWqe { opcode: WrOpcode::Send, length, ..SendWqe::TEMPLATE }, data)
    }

    pub(super) fn post_write(&mut self, va: u64, data: Vec<u8>) -> u64 {
        let length = data.len() as u32;
        let w = SendWqe { opcode: WrOpcode::RdmaWrite, length, remote_va: va, rkey: RKEY, ..SendWqe::TEMPLATE };
        self.post(w, data)
    }

    pub(super) fn post_read(&mut self, va: u64, length: u32) -> u64 {
        let w = SendWqe { opcode: WrOpcode::RdmaRead, length, remote_va: va, rkey: RKEY, ..SendWqe::TEMPLATE };
        self.post(w, vec![0; length as usize])
    }

    pub(super) fn post_fetch_add(&mut self, va: u64, add: u64) -> u64 {
        let w = SendWqe { opcode: WrOpcode::AtomicFetchAndAdd, remote_va: va, rkey: RKEY, compare_add: add, ..SendWqe::TEMPLATE };
        self.post(w, vec![0; 8])
    }

    /// Moves every packet and completion that can move at `now`; true if anything did.
    pub(super) fn step(&mut self) -> bool {
        let now = self.now;
        let mut progress = false;
        while let Some(r) = self.client.poll_transmit(now) {
            let payload = if r.opcode.has_payload() && r.atomic_write.is_none() {
                let b = &self.bufs[&r.wqe_id];
                b[r.payload_offset as usize..r.payload_offset as usize + r.payload_len as usize].to_vec()
            } else {
                Vec::new()
            };
            self.sent.push((now, r));
            self.fwd.send(now, ReqPkt { req: r, payload });
            progress = true;
        }
        while let Some(r) = self.server.poll_transmit(now) {
            let payload = match r.source {
                Some(src) => {
                    let o = (src.va - MR_BASE) as usize;
                    self.target.mem[o..o + src.len as usize].to_vec()
                }
                None => Vec::new(),
            };
            self.responses.push((now, r));
            self.back.send(now, RespPkt { resp: r, payload });
            progress = true;
        }
        while let Some(p) = self.fwd.pop_due(now) {
            let d = self.server.handle_request(now, &p.req, &mut self.target);
            if d.executed {
                self.executed.push(p.req.psn.get());
            }
            match d.place {
                Some(Placement::Memory { .. }) if self.lose_placement_of == Some(p.req.psn.get()) => {
                    self.server.placement_failed(p.req.psn, crate::violation::Violation::RkeyUnknown);
                }
                Some(Placement::Memory { va, .. }) => {
                    let o = (va - MR_BASE) as usize;
                    self.target.mem[o..o + p.payload.len()].copy_from_slice(&p.payload);
                }
                Some(Placement::Recv { wr_id, offset }) => {
                    let b = self.target.recv_bufs.get_mut(&wr_id).expect("recv buffer");
                    b[offset as usize..offset as usize + p.payload.len()].copy_from_slice(&p.payload);
                }
                None => {}
            }
            if let Some(c) = d.recv {
                self.recv_completions.push(c);
            }
            progress = true;
        }
        // The requests due now are one received run: what its messages that did not ask
        // for an ACK owe is answered after it, as the network responder does.
        let _ = self.server.acknowledge_owed();
        while let Some(p) = self.back.pop_due(now) {
            if let Some(pl) = self.client.handle_response(now, &p.resp) {
                let b = self.bufs.get_mut(&pl.wqe_id).expect("read buffer");
                b[pl.offset as usize..pl.offset as usize + pl.len as usize].copy_from_slice(&p.payload);
            }
            progress = true;
        }
        while let Some(c) = self.client.poll_completion() {
            if let Some(v) = c.atomic_original {
                self.bufs.insert(c.id, v.to_ne_bytes().to_vec());
            }
            self.completions.push(c);
            progress = true;
        }
        progress
    }

    /// The next instant anything is due: a packet or a requester timer.
    pub(super) fn next_wakeup(&self) -> Option<Instant> {
        [self.fwd.next_at(), self.back.next_at(), self.client.poll_timeout()].into_iter().flatten().min()
    }

    /// Steps at `now` until nothing moves, then jumps to the next wakeup (running the
    /// timers due there); false when nothing is left to wait for or `limit` is passed.
    pub(super) fn advance(&mut self, limit: Instant) -> bool {
        while self.step() {}
        let Some(at) = self.next_wakeup() else { return false };
        if at > limit {
            return false;
        }
        if at > self.now {
            self.now = at;
        }
        if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
            self.client.handle_timeout(self.now);
        }
        true
    }

    /// Runs until idle; panics after `max` wakeups (a livelock).
    #[track_caller]
    pub(super) fn drive_bounded(&mut self, max: usize) {
        let far = self.now + Duration::from_secs(3600);
        for _ in 0..max {
            if !self.advance(far) {
                return;
            }
        }
        panic!("not idle after {max} wakeups at {:?}", self.elapsed());
    }

    pub(super) fn drive(&mut self) {
        self.drive_bounded(100_000);
    }

    /// Runs until virtual time `until` (or idle).
    pub(super) fn run_until(&mut self, until: Instant) {
        while self.advance(until) {}
        while self.step() {}
    }
}
