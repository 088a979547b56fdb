//! The device side of the protocol core's responder, for the same-host transport.
//!
//! Read before editing: `rverbs_proto::rc` (the responder decides *whether* and *where*,
//! in rxe's order of checks, rocev2-wire.md §3.3) and [`super::target`] (the responder QP
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
use crate::mr::cma::CmaError;
use crate::mr::{self, copy_message, KeySpace, KeyUse, PinList, Pinned, Source};
use crate::qp::rq::RecvWqe;

/// One request's conversation between the core's responder and the target QP.
pub(crate) struct Responding<'t, T: Target> {
    t: &'t T,
    keys: KeySpace<'t>,
    /// The receive WQE taken for this message (CHK_RESOURCE).
    pub(crate) recv: Option<RecvWqe>,
    /// Its scatter list, pinned with LOCAL_WRITE for the message.
    recv_pins: Option<PinList<'t>>,
    /// The remote memory checked for this message (CHK_RKEY).
    mem: Option<Pinned<'t>>,
    /// A data movement that failed inside an atomic (the owner unmapped the memory, or its
    /// process is gone).
    pub(crate) moved: Option<CmaError>,
}

impl<'t, T: Target> Responding<'t, T> {
    pub(crate) fn new(t: &'t T) -> Self {
        Responding { t, keys: t.keys(), recv: None, recv_pins: None, mem: None, moved: None }
    }

    fn used(&self) -> KeyUse {
        KeyUse::Remote { qpn: self.t.qpn() }
    }

    /// Carries out the core's placement: the payload `data` goes into the memory or the
    /// receive WQE this request checked. UD: the 40-byte GRH `header` first.
    pub(crate) fn place(&mut self, place: rc::Placement, header: Option<&[u8]>, data: Source<'_, '_>) -> Result<(), CmaError> {
        match place {
            rc::Placement::Memory { .. } => match self.mem.take() {
                Some(p) => copy_message(&PinList::one(p), 0, data).map(drop),
                None => Ok(()),
            },
            rc::Placement::Recv { offset, .. } => {
                let Some(dst) = &self.recv_pins else { return Ok(()) };
                if let Some(h) = header {
                    copy_message(dst, 0, Source::Bytes(h))?;
                }
                copy_message(dst, offset as usize, data).map(drop)
            }
        }
    }

    /// Copies the READ response's bytes (the memory CHK_RKEY pinned) into `dst`.
    pub(crate) fn read_into(&mut self, dst: &PinList<'_>) -> Result<(), CmaError> {
        match self.mem.take() {
            Some(p) => copy_message(dst, 0, Source::Pins(&PinList::one(p))).map(drop),
            None => Ok(()),
        }
    }
}

/// Whether a pinned word is 8-byte aligned where it lives.
fn aligned8(p: &Pinned<'_>) -> bool {
    match p.place {
        mr::access::Place::Local(a) => a % 8 == 0,
        mr::access::Place::Cma { addr, .. } => addr % 8 == 0,
        mr::access::Place::Proxy(r) => r.va % 8 == 0,
    }
}

impl<T: Target> rc::Target for Responding<'_, T> {
    fn check_rkey(&mut self, rkey: u32, va: u64, len: u64, access: Access) -> Result<(), Violation> {
        let p = self.keys.pin(rkey, self.t.pd(), self.used(), va, len, access).map_err(|f| f.remote())?;
        self.mem = Some(p);
        Ok(())
    }

    fn take_recv(&mut self) -> Option<RecvSlot> {
        let r = self.t.take_recv()?;
        let slot = RecvSlot { wr_id: r.wr_id, capacity: r.capacity() };
        self.recv = Some(r);
        Some(slot)
    }

    fn check_recv(&mut self, _slot: &RecvSlot, offset: u64, len: u64) -> Result<(), Violation> {
        let Some(r) = &self.recv else { return Err(Violation::RecvWqeMalformed) };
        let pins = mr::pin_sges(&self.keys, self.t.pd(), r.sges(), Access::LOCAL_WRITE, offset + len)
            .map_err(|_| Violation::RecvWqeMalformed)?;
        self.recv_pins = Some(pins);
        Ok(())
    }

    fn atomic(&mut self, _rkey: u32, _va: u64, op: rc::AtomicOp) -> Result<u64, Violation> {
        let Some(p) = &self.mem else { return Err(Violation::RkeyBounds) };
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
        let Some(p) = &self.mem else { return Err(Violation::RkeyBounds) };
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
}
