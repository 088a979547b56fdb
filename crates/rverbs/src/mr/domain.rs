//! The cores of the domain objects — a context, a protection domain, an XRC domain — as
//! the layers below the verbs objects hold them: what regions, windows, CQs, QPs, SRQs
//! and the transports read of the objects they belong to, and nothing of the public
//! handles (`context::Context`, `pd::Pd`, `xrcd::Xrcd`), which wrap these cores.
//!
//! Rule (ARCHITECTURE.md, "Layers"): no module imports a layer above its own. A
//! region checks keys against its PD's number and reaches its device's endpoint through
//! the PD it holds; an event is raised on the context a CQ, QP or SRQ holds; a QP or SRQ
//! of an XRC domain knows the domain by its key. The verbs layer builds these cores and
//! reads its own handles back from them (`Mr::pd`, `Cq::context`, `Qp::pd` are written
//! there, from [`ContextOf`] and [`PdOf`]: the core, or the rdma-core backend's object).
//!
//! Rule: ibv_dealloc_pd(3), ibv_close_xrcd(3): fail with EBUSY while objects still belong
//! to the domain — the `users` counts here.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rverbs_proto::verbs::EventType;

use super::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::notify::{RawAsyncEvent, RawElement};
use crate::shm::fifo::Fifo;

/// The context a CQ belongs to, as the verbs layer makes its handle of it
/// (`Cq::context`): the soft device's core, or (feature `rdma-core`) the backend's
/// context. Every CQ has one of the two, so the handle is always made.
pub(crate) enum ContextOf {
    Soft(Arc<ContextCore>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn super::native::NativeContext>),
}

/// The PD a region or QP belongs to, as the verbs layer makes its handle of it
/// (`Mr::pd`, `Qp::pd`): the soft device's core, or (feature `rdma-core`) the backend's
/// PD.
pub(crate) enum PdOf {
    Soft(Arc<PdCore>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn super::native::NativePd>),
}

/// The core of an open device context (`struct ibv_context`).
pub(crate) struct ContextCore {
    /// Opaque per-context id, unique on the endpoint.
    pub(crate) id: u32,
    /// The endpoint of the context's device.
    pub(crate) endpoint: &'static Endpoint,
    /// The asynchronous event FIFO (`async-<id>` in the endpoint directory), so peers
    /// can raise events on this context's objects.
    events: Fifo,
    /// The device the context is open on, as the verbs layer knows it; this layer never
    /// looks inside (`context::Context` reads it back).
    pub(crate) device: &'static (dyn Any + Send + Sync),
}

impl Drop for ContextCore {
    fn drop(&mut self) {
        if crate::sanitizer::on() {
            crate::sanitizer::gone(crate::sanitizer::Kind::Context, crate::sanitizer::Id::new(self.endpoint.slot, self.id));
        }
    }
}

impl ContextCore {
    pub(crate) fn new(id: u32, endpoint: &'static Endpoint, events: Fifo, device: &'static (dyn Any + Send + Sync)) -> Self {
        ContextCore { id, endpoint, events, device }
    }

    /// Queues an asynchronous event (ibv_get_async_event(3)).
    pub(crate) fn raise(&self, kind: EventType, element: RawElement) {
        tracing::debug!(?kind, ?element, "async event");
        self.events.send(&RawAsyncEvent { kind, element }.encode());
    }

    /// The event FIFO, which `Context::get_async_event` reads.
    pub(crate) fn events(&self) -> &Fifo {
        &self.events
    }

    /// Lists the context among the open contexts of the process, which events of the
    /// device itself reach ([`ContextCore::raise_everywhere`]).
    pub(crate) fn listed(self: Arc<Self>) -> Arc<Self> {
        let mut all = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&self));
        self
    }

    /// Queues an event of the device (a port's, DEVICE_FATAL) on every context of the
    /// process still open: ibv_get_async_event(3), "affiliated" events go to the
    /// context of the object, the device's to every context open on it.
    pub(crate) fn raise_everywhere(kind: EventType, element: RawElement) {
        let live: Vec<Arc<ContextCore>> = OPEN.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect();
        for ctx in live {
            ctx.raise(kind, element);
        }
    }
}

/// The open contexts of the process ([`ContextCore::listed`]); a closed one's entry is
/// dropped at the next listing.
static OPEN: Mutex<Vec<Weak<ContextCore>>> = Mutex::new(Vec::new());

/// The core of a protection domain (`struct ibv_pd`).
pub(crate) struct PdCore {
    pub(crate) ctx: Arc<ContextCore>,
    /// The PD handle; keys record it and are only honoured for a QP of the same PD.
    pub(crate) id: u32,
    /// Objects belonging to the PD; the top bit marks it deallocated.
    users: AtomicU32,
}

const DEALLOCATED: u32 = 1 << 31;

impl PdCore {
    pub(crate) fn new(ctx: Arc<ContextCore>, id: u32) -> Self {
        PdCore { ctx, id, users: AtomicU32::new(0) }
    }

    /// Registers one more object in the PD.
    pub(crate) fn hold(&self) -> Result<()> {
        self.users
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| (u & DEALLOCATED == 0).then_some(u + 1))
            .map(|_| ())
            .map_err(|_| Error::Destroyed { what: "protection domain" })
    }

    /// An object of the PD went away.
    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Marks the PD deallocated (ibv_dealloc_pd(3)).
    ///
    /// Errors: `EBUSY` while objects still belong to it.
    pub(crate) fn dealloc(&self) -> Result<()> {
        match self.users.compare_exchange(0, DEALLOCATED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(u) if u & DEALLOCATED != 0 => Err(Error::Destroyed { what: "protection domain" }),
            Err(_) => Err(Error::Busy { what: "protection domain" }),
        }
    }

    /// The endpoint of the PD's device, whose keys name the PD's regions and windows.
    pub(crate) fn endpoint(&self) -> &'static Endpoint {
        self.ctx.endpoint
    }
}

/// The core of an XRC domain: its host-wide key and the XRC SRQs and target QPs using
/// it. Each domain has one core, so `Arc::ptr_eq` on cores says "the same domain".
pub(crate) struct XrcdCore {
    /// The domain's host-wide identity, published with every XRC target QP and XRC SRQ
    /// (see `xrcd`).
    pub(crate) key: u64,
    users: AtomicU32,
}

impl XrcdCore {
    pub(crate) fn new(key: u64) -> Self {
        XrcdCore { key, users: AtomicU32::new(0) }
    }

    pub(crate) fn hold(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether XRC SRQs or target QPs still use the domain.
    pub(crate) fn in_use(&self) -> bool {
        self.users.load(Ordering::Acquire) != 0
    }
}
