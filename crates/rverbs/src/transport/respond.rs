//! The device side of the protocol core's responder, for the same-host transport.
//!
//! Read before editing: `rverbs_proto::rc` (the responder decides *whether* and *where*,
//! in rxe's order of checks, docs/rocev2-wire.md §3.3) and [`super::target`] (the responder QP
//! wherever it is). [`Responding`] answers the core's questions — keys, receive WQEs,
//! atomics, flushes, invalidations — against a [`Target`], and keeps what each answer
//! pinned so that the placement that follows copies into exactly the memory that was
//! checked, without a second lookup.

use rverbs_proto::rc::{self, RecvSlot};
use rverbs_proto::verbs::Access;
use rverbs_proto::violation::Violation;
use rverbs_proto::wire::{FethRepr, Placement as FlushPlacement, Selectivity};

use super::target::Target;
use crate::mem::AtomicOp;
use crate::shm::cma::CmaError;
use crate::mr::{self, copy_message, KeyMemo, KeySpace, KeyUse, PinList, Pinned, ResponderMemos, Source, Via};
use crate::rings::recv_ring::RecvWqe;
use crate::rings::tm_recv::{TmRecv, RVH_LEN, TMH_LEN};

/// One request's conversation between the core's responder and the target QP.
pub(crate) struct Responding<'t, T: Target> {
    t: &'t T,
    keys: KeySpace<'t>,
    /// The link's memos of the last keys of this process checked for a remote access and
    /// for a receive ([`mr::ResponderMemos`], [`Responding::remembering`]).
    memos: Option<&'t ResponderMemos>,
    /// The receive WQE taken for this message (CHK_RESOURCE).
    pub(crate) recv: Option<RecvWqe>,
    /// Its scatter list, pinned with LOCAL_WRITE for the message (empty until checked).
    recv_pins: PinList<'t>,
    /// The remote memory checked for this message (CHK_RKEY; empty until checked). Both
    /// lists are filled where they are: moving a pin costs more than the check.
    mem: PinList<'t>,
    /// A data movement that failed inside an atomic (the owner unmapped the memory, or its
    /// process is gone).
    pub(crate) moved: Option<CmaError>,
    /// XRC: the SRQ the target serves the request from (the driver found it from the
    /// XRCETH); the core's [`rc::Target::select_xrc_srq`] must name it.
    pub(crate) xrc_srq: Option<u32>,
    /// A tag-matching target: the message's first bytes (TMH and RVH) and its length,
    /// which choose its receive (`crate::rings::tag_list`); set by the link before the request.
    pub(crate) head: Option<Head>,
}

/// Whether `op` starts a SEND message (the packet a receive is taken for).
pub(crate) fn starts_send(op: rverbs_proto::wire::OpCode) -> bool {
    use rverbs_proto::wire::Operation as O;
    matches!(op.operation(), Some(O::SendFirst | O::SendOnly | O::SendOnlyWithImmediate | O::SendOnlyWithInvalidate))
}

/// The first bytes of a message, for a tag-matching SRQ to match.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head {
    bytes: [u8; TMH_LEN + RVH_LEN],
    n: usize,
    msg_len: u64,
    /// Whether the link can carry out a rendezvous read (the same host): otherwise a
    /// matched RNDV request is handed to software (IBV_WC_TM_RNDV_INCOMPLETE).
    rndv: bool,
}

impl Head {
    /// The first bytes of `first` (a message of `msg_len` bytes, or its first packet);
    /// `rndv`: whether the link reads a matched rendezvous request's data itself.
    pub(crate) fn of(first: &[u8], msg_len: u64, rndv: bool) -> Head {
        let mut bytes = [0; TMH_LEN + RVH_LEN];
        let n = first.len().min(bytes.len());
        bytes[..n].copy_from_slice(&first[..n]);
        Head { bytes, n, msg_len, rndv }
    }

    /// The first bytes of a message gathered from pinned memory.
    pub(crate) fn gathered(src: &PinList<'_>, msg_len: u64) -> Head {
        let mut bytes = [0; TMH_LEN + RVH_LEN];
        let n = (msg_len.min(bytes.len() as u64)) as usize;
        if mr::gather_at(src, 0, &mut bytes[..n]).is_err() {
            // Unreadable: the message fails when its bytes are moved; no header here.
            return Head { bytes, n: 0, msg_len, rndv: true };
        }
        Head { bytes, n, msg_len, rndv: true }
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes[..self.n]
    }
}

impl<'t, T: Target> Responding<'t, T> {
    pub(crate) fn new(t: &'t T) -> Self {
        Responding { t, keys: t.keys(), memos: None, recv: None, recv_pins: PinList::new(), mem: PinList::new(), moved: None, xrc_srq: None, head: None }
    }

    /// This conversation, checking keys of this process through `memos` (the remote key's
    /// and the receive's, kept by the link for the connection: [`mr::KeyMemo`]); a peer's
    /// keys are checked as before.
    pub(crate) fn remembering(self, memos: &'t ResponderMemos) -> Self {
        Responding { memos: Some(memos), ..self }
    }

    /// The key space a check goes through: remembering in the memo `pick` chooses of
    /// [`Responding::remembering`]'s, if any.
    #[inline]
    fn keys_via(&self, pick: impl FnOnce(&'t ResponderMemos) -> &'t KeyMemo) -> KeySpace<'t> {
        match self.memos {
            Some(m) => self.keys.remembering(pick(m)),
            None => self.keys,
        }
    }

    fn used(&self) -> KeyUse {
        KeyUse::Remote { qpn: self.t.qpn() }
    }

    /// Carries out the core's placement: the payload `data` goes into the memory or the
    /// receive WQE this request checked. UD: the 40-byte GRH `header` first.
    pub(crate) fn place(&self, place: rc::Placement, header: Option<&[u8]>, data: Source<'_, '_>) -> Result<(), CmaError> {
        match place {
            rc::Placement::Memory { .. } => {
                if self.mem.is_empty() {
                    return Ok(());
                }
                copy_message(&self.mem, 0, data).map(drop)
            }
            rc::Placement::Recv { offset, .. } => {
                if self.recv_pins.is_empty() {
                    return Ok(());
                }
                if let Some(h) = header {
                    copy_message(&self.recv_pins, 0, Source::Bytes(h))?;
                }
                // A tag-matched EAGER message goes in without its TMH.
                let skip = self.tm_skip();
                let (at, from) = (offset.saturating_sub(skip), skip.saturating_sub(offset));
                mr::copy_message_from(&self.recv_pins, at as usize, data, from as usize).map(drop)
            }
        }
    }

    /// Places one packet's payload `data` (the network transport, whose messages come in
    /// MTU-sized packets): a SEND packet goes into the receive WQE at its offset; the first
    /// packet of a WRITE into the memory CHK_RKEY pinned for the whole message; a later
    /// one into its own range, looked up again under the message's R_Key (rxe resolves
    /// the MR per packet, docs/rocev2-wire.md §3.3 "Execute").
    ///
    /// Errors: the violation the responder answers a failed placement with.
    pub(crate) fn place_packet(&self, place: rc::Placement, data: &[u8]) -> Result<(), Violation> {
        match place {
            rc::Placement::Memory { rkey, va } if self.mem.is_empty() => {
                let p = self
                    .keys_via(|m| &m.remote)
                    .pin(rkey, self.t.pd(), self.used(), va, data.len() as u64, Access::REMOTE_WRITE)
                    .map_err(|f| f.remote())?;
                let mut one = PinList::new();
                one.push(p);
                copy_message(&one, 0, Source::Bytes(data)).map(drop).map_err(|_| Violation::RkeyBounds)
            }
            rc::Placement::Memory { .. } => self.place(place, None, Source::Bytes(data)).map_err(|_| Violation::RkeyBounds),
            rc::Placement::Recv { .. } => self.place(place, None, Source::Bytes(data)).map_err(|_| Violation::RecvWqeMalformed),
        }
    }

    /// [`Responding::place_packet`] for a packet of a run of received packets (the
    /// network transport hands them on a GSO train at a time): a WRITE's later packet is
    /// placed through `span`, the pin of the range that it and the run's later packets of
    /// the same WRITE cover (`ahead`: its bytes and theirs), taken under the message's
    /// R_Key in `keys` (this process's) once for the run, as rxe would check each of those
    /// packets' ranges at that moment: one check, count and release for the run instead of
    /// one per packet. A range the span does not hold (another R_Key, or a span refused,
    /// say because the packets ahead end past the region) is checked on its own, as before.
    /// Holding the span delays a deregistration of the region until the run is placed,
    /// as a packet being placed does.
    ///
    /// Errors: as [`Responding::place_packet`].
    pub(crate) fn place_packet_in_run(
        &self,
        place: rc::Placement,
        data: &[u8],
        keys: KeySpace<'static>,
        span: &mut Option<SpanPin>,
        ahead: impl FnOnce() -> u64,
    ) -> Result<(), Violation> {
        let rc::Placement::Memory { rkey, va } = place else { return self.place_packet(place, data) };
        if !self.mem.is_empty() {
            return self.place_packet(place, data);
        }
        let len = data.len() as u64;
        if !span.as_ref().is_some_and(|s| s.holds(rkey, va, len)) {
            *span = None;
            let ahead = ahead();
            if ahead > len {
                if let Ok(p) = keys.pin(rkey, self.t.pd(), self.used(), va, ahead, Access::REMOTE_WRITE) {
                    let mut pins = PinList::new();
                    pins.push(p);
                    *span = Some(SpanPin { rkey, start: va, end: va + ahead, pins });
                }
            }
        }
        match span.as_ref().filter(|s| s.holds(rkey, va, len)) {
            Some(s) => copy_message(&s.pins, (va - s.start) as usize, Source::Bytes(data)).map(drop).map_err(|_| Violation::RkeyBounds),
            None => self.place_packet(place, data),
        }
    }

    /// The bytes at the start of the message the receive does not take (a tag-matched
    /// EAGER message's TMH).
    fn tm_skip(&self) -> u64 {
        self.recv.as_ref().and_then(|r| r.tm).map_or(0, |t| t.skip())
    }

    /// Copies the bytes a READ response packet carries (`src`: the READ's R_Key and the
    /// packet's range, looked up again per packet) into `out`.
    ///
    /// Errors: the R_Key no longer grants REMOTE_READ on the range.
    pub(crate) fn read_source(&self, src: rc::ReadSource, out: &mut [u8]) -> Result<(), Violation> {
        if src.len == 0 {
            return Ok(());
        }
        let p = self
            .keys
            .pin(src.rkey, self.t.pd(), self.used(), src.va, u64::from(src.len), Access::REMOTE_READ)
            .map_err(|f| f.remote())?;
        mr::copy_out(&p, out).map_err(|_| Violation::RkeyBounds)
    }

    /// Copies the READ response's bytes (the memory CHK_RKEY pinned) into `dst`, from its
    /// byte `offset` on.
    pub(crate) fn read_into(&self, dst: &PinList<'_>, offset: usize) -> Result<(), CmaError> {
        if self.mem.is_empty() {
            return Ok(());
        }
        copy_message(dst, offset, Source::Pins(self.mem.as_slice())).map(drop)
    }
}

/// The memory a run of a WRITE's later packets goes into, checked and pinned once for
/// the run ([`Responding::place_packet_in_run`]).
pub(crate) struct SpanPin {
    rkey: u32,
    /// The span's first address, and the address past it.
    start: u64,
    end: u64,
    pins: PinList<'static>,
}

impl SpanPin {
    /// Whether `len` bytes at `va` under `rkey` lie inside the span.
    fn holds(&self, rkey: u32, va: u64, len: u64) -> bool {
        rkey == self.rkey && va >= self.start && va.checked_add(len).is_some_and(|e| e <= self.end)
    }
}

/// Whether a pinned word is 8-byte aligned where it lives.
pub(crate) fn aligned8(p: &Pinned<'_>) -> bool {
    match p.place {
        mr::keyspace::Place::Local(a) => a % 8 == 0,
        mr::keyspace::Place::Cma { addr, .. } => addr % 8 == 0,
        mr::keyspace::Place::Proxy(r) => r.va % 8 == 0,
    }
}

impl<T: Target> rc::Target for Responding<'_, T> {
    fn check_rkey(&mut self, rkey: u32, va: u64, len: u64, access: Access) -> Result<(), Violation> {
        let via = Via { key: rkey, pd: self.t.pd(), used: self.used(), need: access, va };
        self.keys_via(|m| &m.remote).pin_into(via, len, &mut self.mem).map_err(|f| f.remote())
    }

    fn take_recv(&mut self) -> Option<RecvSlot> {
        let mut r = match &self.head {
            Some(h) => self.t.take_for(h.bytes(), h.msg_len)?,
            None => self.t.take_recv()?,
        };
        if let (Some(TmRecv::Rndv { offload, .. }), Some(h)) = (&mut r.tm, &self.head) {
            *offload &= h.rndv;
        }
        // A tag-matched message: its TMH is not placed (EAGER), or nothing is (a
        // rendezvous request, whose data the device reads).
        let capacity = match r.tm {
            Some(t) if !t.places() => u64::from(u32::MAX),
            Some(t) => r.capacity() + t.skip(),
            None => r.capacity(),
        };
        let slot = RecvSlot { wr_id: r.wr_id, capacity };
        self.recv = Some(r);
        Some(slot)
    }

    fn check_recv(&mut self, _slot: &RecvSlot, offset: u64, len: u64) -> Result<(), Violation> {
        let Some(r) = &self.recv else { return Err(Violation::RecvWqeMalformed) };
        if r.tm.is_some_and(|t| !t.places()) {
            return Ok(());
        }
        let need = (offset + len).saturating_sub(self.tm_skip());
        mr::pin_sges_into(&self.keys_via(|m| &m.recv), self.t.pd(), r.sges(), Access::LOCAL_WRITE, need, &mut self.recv_pins)
            .map_err(|_| Violation::RecvWqeMalformed)
    }

    fn atomic(&mut self, _rkey: u32, _va: u64, op: rc::AtomicOp) -> Result<u64, Violation> {
        let Some(p) = self.mem.first() else { return Err(Violation::RkeyBounds) };
        if !aligned8(p) {
            return Err(Violation::MisalignedAtomic);
        }
        let op = match op {
            rc::AtomicOp::CompareSwap { compare, swap } => AtomicOp::CompareSwap { compare, swap },
            rc::AtomicOp::FetchAdd(v) => AtomicOp::FetchAdd(v),
        };
        let done = mr::atomic(p, op);
        done.map_err(|e| {
            self.moved = Some(e);
            Violation::RkeyBounds
        })
    }

    fn atomic_write(&mut self, _rkey: u32, _va: u64, value: u64) -> Result<(), Violation> {
        let Some(p) = self.mem.first() else { return Err(Violation::RkeyBounds) };
        if !aligned8(p) {
            return Err(Violation::MisalignedAtomic);
        }
        let done = mr::atomic(p, AtomicOp::Write(value));
        done.map(drop).map_err(|e| {
            self.moved = Some(e);
            Violation::RkeyBounds
        })
    }

    fn flush(&mut self, rkey: u32, va: u64, len: u32, feth: FethRepr) -> Result<(), Violation> {
        let mut need = Access::empty();
        if feth.placement.contains(FlushPlacement::GLOBAL_VISIBILITY) {
            need |= Access::FLUSH_GLOBAL;
        }
        if feth.placement.contains(FlushPlacement::PERSISTENCE) {
            need |= Access::FLUSH_PERSISTENT;
        }
        let pinned = if feth.selectivity == Selectivity::WholeMr {
            self.keys.pin_base(rkey, self.t.pd(), self.used(), need)
        } else {
            self.keys.pin(rkey, self.t.pd(), self.used(), va, u64::from(len), need)
        };
        pinned.map_err(|f| f.remote())?;
        // Global visibility is a full memory barrier on this host.
        mr::flush_global();
        Ok(())
    }

    fn invalidate(&mut self, rkey: u32) -> bool {
        self.t.invalidate(rkey)
    }

    fn select_xrc_srq(&mut self, srqn: u32) -> Result<(), Violation> {
        if self.xrc_srq == Some(srqn) {
            Ok(())
        } else {
            Err(Violation::XrcSrqInvalid)
        }
    }
}
