//! Completion queues (ibv_create_cq(3)); polled and armed through the context's ops
//! table, as verbs.h's inline `ibv_poll_cq` and `ibv_req_notify_cq` do.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use rverbs_abi::{ibv_cq, ibv_wc};

use super::channel::{ChannelInner, CompChannel};
use super::context::{Context, ContextInner};
use super::library::{check, last_errno, unsupported};
use super::life::Life;
use crate::error::{Error, Result};
use crate::rings::wc::Wc;

// The soft API's `Wc` is `struct ibv_wc` field for field (rings::wc): the provider
// writes completions straight into the caller's slice.
const _: () = assert!(core::mem::size_of::<Wc>() == core::mem::size_of::<ibv_wc>());
const _: () = assert!(core::mem::align_of::<Wc>() == core::mem::align_of::<ibv_wc>());

pub(super) struct CqInner {
    pub(super) cq: *mut ibv_cq,
    pub(super) ctx: Arc<ContextInner>,
    channel: Option<Arc<ChannelInner>>,
    cq_context: usize,
    /// `ibv_cq.cqe`, read at creation (only ibv_resize_cq(3), never called, changes it).
    cqe: u32,
    /// The word the public [`crate::Cq::set_cookie`] attaches.
    cookie: std::sync::atomic::AtomicUsize,
    /// Completion events handed out ([`CompChannel::get_cq_event`]) and not yet
    /// acknowledged.
    unacked: AtomicU32,
    /// Set while ibv_destroy_cq(3) runs: an event of the CQ read meanwhile is
    /// acknowledged at once (the destruction waits for it) instead of handed out.
    destroying: AtomicBool,
    /// Its QPs are its users.
    pub(super) life: Life,
}

// SAFETY: `cq` is owned by this value; libibverbs' verbs are thread-safe (a provider's
// poll_cq locks the CQ unless it was created single-threaded, which this backend never
// asks for).
unsafe impl Send for CqInner {}
// SAFETY: as for Send.
unsafe impl Sync for CqInner {}

impl CqInner {
    /// ibv_destroy_cq(3), which waits for the acknowledgement of every event read for the
    /// CQ; on success the CQ leaves its channel.
    ///
    /// # Safety
    ///
    /// Called once, with no QP of the CQ left and no call on it in progress (under
    /// [`Life::destroy`], or in the last drop).
    unsafe fn destroy_raw(&self) -> Result<()> {
        self.destroying.store(true, Ordering::SeqCst);
        // SAFETY: `cq` came from ibv_create_cq; the caller's contract.
        let r = check(unsafe { (self.ctx.verbs.sym.ibv_destroy_cq)(self.cq) });
        match &r {
            Ok(()) => {
                if let Some(ch) = &self.channel {
                    ch.forget(self.cq);
                    ch.life.detach();
                }
            }
            Err(_) => self.destroying.store(false, Ordering::SeqCst),
        }
        r
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if !self.life.is_destroyed() {
            // Events taken with `CqEvent::into_cq` and never acknowledged would make
            // ibv_destroy_cq(3) wait for ever: acknowledge them for the last handle.
            let unacked = self.unacked.swap(0, Ordering::AcqRel);
            if unacked > 0 {
                // SAFETY: `cq` is live (not destroyed); `unacked` events were read for it.
                unsafe { (self.ctx.verbs.sym.ibv_ack_cq_events)(self.cq, unacked) }
            }
            // SAFETY: the last handle, QP and event are gone (each holds an Arc of this
            // value); not destroyed yet.
            if let Err(e) = unsafe { self.destroy_raw() } {
                tracing::warn!("rdma_core: ibv_destroy_cq failed: {e}");
            }
        }
    }
}

/// A completion queue (ibv_create_cq(3)). Clones share it; QPs that use it and
/// undelivered events keep its memory alive; any handle may destroy it
/// ([`Cq::destroy`]).
#[derive(Clone)]
pub struct Cq {
    pub(super) inner: Arc<CqInner>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").field("cq", &self.inner.cq).finish()
    }
}

impl Context {
    /// Creates a completion queue (ibv_create_cq(3)) of at least `init.cqe` entries, with
    /// `init`'s `cq_context`, `comp_vector` and channel, which must be one of this
    /// backend (a soft channel is `EINVAL`; one of another context `EOPNOTSUPP`). Other
    /// `wc_flags` than the standard ones, or creation flags (an extended CQ,
    /// ibv_create_cq_ex(3)), are `EOPNOTSUPP`.
    pub fn create_cq(&self, init: &crate::CqInit<'_>) -> Result<Cq> {
        if !crate::cq::WcExFlags::STANDARD.contains(init.wc_flags) || !init.flags.is_empty() {
            return Err(Error::native_unsupported("create_cq_ex"));
        }
        let channel = match init.channel {
            Some(ch) => {
                let native = ch.native().and_then(|c| c.as_any().downcast_ref::<CompChannel>());
                Some(native.ok_or(Error::invalid("create_cq", crate::rule::Rule::ForeignContext { what: "completion channel" }))?)
            }
            None => None,
        };
        Cq::create(self, init.cqe, init.cq_context, channel, init.comp_vector)
    }
}

impl Cq {
    fn create(ctx: &Context, cqe: u32, cq_context: usize, chan: Option<&CompChannel>, comp_vector: u32) -> Result<Cq> {
        let cqe = c_int::try_from(cqe).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        let vector = c_int::try_from(comp_vector).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        if let Some(ch) = chan {
            if !Arc::ptr_eq(&ch.inner.ctx, &ctx.inner) {
                return Err(unsupported("create_cq", "a completion channel of another context"));
            }
        }
        let channel = chan.map(|c| c.inner.clone());
        // The channel stays live until the CQ is counted as its user.
        let _entered = chan.map(|c| c.inner.life.enter()).transpose()?;
        let ch_ptr = channel.as_ref().map_or(std::ptr::null_mut(), |c| c.channel);
        let c = &ctx.inner;
        // SAFETY: the context is open; the channel (if any) is live and of it.
        let cq = unsafe { (c.verbs.sym.ibv_create_cq)(c.ctx, cqe, cq_context as *mut c_void, ch_ptr, vector) };
        if cq.is_null() {
            return Err(last_errno());
        }
        // SAFETY: ibv_create_cq returned a valid CQ.
        let granted = u32::try_from(unsafe { (*cq).cqe }).unwrap_or(0);
        let inner = Arc::new(CqInner {
            cq,
            ctx: c.clone(),
            channel,
            cq_context,
            cqe: granted,
            cookie: Default::default(),
            unacked: AtomicU32::new(0),
            destroying: AtomicBool::new(false),
            life: Life::new("completion queue"),
        });
        if let Some(ch) = &inner.channel {
            ch.life.attach();
            let weak: std::sync::Weak<dyn std::any::Any + Send + Sync> = Arc::downgrade(&inner) as _;
            ch.register(cq, weak);
        }
        Ok(Cq { inner })
    }

    /// The backend's CQ behind a public [`crate::Cq`] (`None` for a soft CQ), e.g. to check
    /// the context of a [`crate::QpInit`]'s CQs.
    pub fn of(cq: &crate::Cq) -> Option<&Cq> {
        cq.native().and_then(|c| c.as_any().downcast_ref::<Cq>())
    }

    /// The number of entries the provider gave the CQ (`cqe`, at least the number asked).
    pub fn cqe(&self) -> u32 {
        self.inner.cqe
    }

    /// The context the CQ was created in.
    pub fn context(&self) -> Context {
        Context { inner: self.inner.ctx.clone() }
    }

    /// The CQ's user value.
    pub fn cq_context(&self) -> usize {
        self.inner.cq_context
    }

    /// Polls up to `wc.len()` completions, oldest first (ibv_poll_cq(3), through
    /// `context->ops.poll_cq` as the inline function does); returns how many it wrote. A
    /// provider's failure (a negative return) is `EIO`; a destroyed CQ `EINVAL`.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let _entered = self.inner.life.enter()?;
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        let cq = self.inner.cq;
        // SAFETY: `cq` and its context are live; `Wc` is `struct ibv_wc` (asserted
        // above, and every field a plain integer, so any bits the provider writes are a
        // valid `Wc`); at most `n` entries are written.
        let rc = unsafe {
            let poll = (*(*cq).context).ops.poll_cq.ok_or_else(|| unsupported("poll_cq", "the provider has no poll_cq"))?;
            poll(cq, n, wc.as_mut_ptr().cast::<ibv_wc>())
        };
        usize::try_from(rc).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EIO)))
    }

    /// Arms the CQ for one completion event on its channel (ibv_req_notify_cq(3), through
    /// `context->ops.req_notify_cq`): the next completion, or the next solicited one.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let _entered = self.inner.life.enter()?;
        let cq = self.inner.cq;
        // SAFETY: `cq` and its context are live.
        let rc = unsafe {
            let arm = (*(*cq).context).ops.req_notify_cq.ok_or_else(|| unsupported("req_notify_cq", "the provider has no req_notify_cq"))?;
            arm(cq, c_int::from(solicited_only))
        };
        check(rc)
    }

    /// Acknowledges `n` completion events of the CQ (ibv_ack_cq_events(3)), at most as
    /// many as were handed out and not acknowledged; a [`crate::CqEvent`] acknowledges
    /// its own, so this is for events taken with [`crate::CqEvent::into_cq`].
    pub fn ack_events(&self, n: u32) {
        let taken = self.inner.unacked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| Some(u - u.min(n)));
        let n = taken.map_or(0, |u| u.min(n));
        if n > 0 {
            // Not under the CQ's lock: ibv_destroy_cq(3) waits for this call, and a CQ
            // with unacknowledged events is not destroyed otherwise.
            // SAFETY: `cq` is live: an event counted in `unacked` keeps ibv_destroy_cq
            // from returning until it is acknowledged.
            unsafe { (self.inner.ctx.verbs.sym.ibv_ack_cq_events)(self.inner.cq, n) }
        }
    }

    /// Whether `self` and `other` are the same CQ.
    pub fn same_as(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// How many CQs report to `ch` if this CQ is one of them (`None` if it reports
    /// elsewhere or nowhere): `aio::AsyncCq::new` wants a channel of the CQ's own.
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn channel_users(&self, ch: &CompChannel) -> Option<u32> {
        let mine = self.inner.channel.as_ref()?;
        Arc::ptr_eq(mine, &ch.inner).then(|| ch.inner.life.users())
    }

    /// Destroys the CQ now (ibv_destroy_cq(3): "fails if any queue pair is still
    /// associated with this CQ") and returns its error: `EBUSY` while a QP of it is not
    /// destroyed or an event handed out for it is not acknowledged (where
    /// ibv_get_cq_event(3)'s destroy would wait), `EINVAL` if it already is. Any handle
    /// may destroy it; the others' calls are then `EINVAL`. A refusal leaves the CQ
    /// usable. Dropping the last handle, QP and event destroys too, logging an error.
    pub fn destroy(&self) -> Result<()> {
        let inner = &self.inner;
        inner.life.destroy(|| {
            if inner.unacked.load(Ordering::Acquire) > 0 {
                return Err(Error::Busy { what: "completion queue" });
            }
            // SAFETY: under the CQ's exclusive lock, once (Life::destroy).
            unsafe { inner.destroy_raw() }
        })
    }
}

impl CompChannel {
    /// Waits for the next completion event (ibv_get_cq_event(3)); blocks unless the fd
    /// was made non-blocking, in which case no event is `EAGAIN`.
    pub fn get_cq_event(&self) -> Result<crate::CqEvent> {
        Ok(crate::CqEvent::of_native(Arc::new(self.next_event()?)))
    }

    /// The CQ of the next event, unacknowledged (ibv_get_cq_event(3)).
    fn next_event(&self) -> Result<Cq> {
        let _entered = self.inner.life.enter()?;
        let sym = &self.inner.ctx.verbs.sym;
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut user: *mut core::ffi::c_void = std::ptr::null_mut();
            // SAFETY: the channel is live; both out-pointers are valid.
            if unsafe { (sym.ibv_get_cq_event)(self.inner.channel, &mut cq, &mut user) } != 0 {
                // A non-blocking channel without an event: the soft channel's error.
                return Err(match last_errno() {
                    Error::Os(e) if e.raw_os_error() == Some(libc::EAGAIN) => Error::WouldBlock,
                    e => e,
                });
            }
            let found = self.inner.lookup(cq).and_then(|any| any.downcast::<CqInner>().ok());
            match found {
                Some(inner) if !inner.destroying.load(Ordering::SeqCst) => {
                    inner.unacked.fetch_add(1, Ordering::AcqRel);
                    return Ok(Cq { inner });
                }
                // The CQ is being destroyed, and ibv_destroy_cq(3) waits for this event's
                // acknowledgement: give it, and wait for the next event.
                _ => {
                    // SAFETY: the CQ's destroy waits for this acknowledgement, so the
                    // `struct ibv_cq` is still live.
                    unsafe { (sym.ibv_ack_cq_events)(cq, 1) }
                }
            }
        }
    }

}

impl crate::cq::native::NativeCq for Cq {
    fn cqe(&self) -> u32 {
        Cq::cqe(self)
    }

    fn cq_context(&self) -> usize {
        Cq::cq_context(self)
    }

    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        Cq::poll(self, wc)
    }

    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        Cq::req_notify(self, solicited_only)
    }

    fn ack_events(&self, n: u32) {
        Cq::ack_events(self, n)
    }

    fn cookie(&self) -> usize {
        self.inner.cookie.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_cookie(&self, value: usize) {
        self.inner.cookie.store(value, std::sync::atomic::Ordering::Release)
    }

    fn destroy(&self) -> Result<()> {
        Cq::destroy(self)
    }

    fn context(&self) -> Arc<dyn crate::mr::native::NativeContext> {
        Arc::new(Cq::context(self))
    }

    fn same_as(&self, other: &dyn crate::cq::native::NativeCq) -> bool {
        other.as_any().downcast_ref::<Cq>().is_some_and(|o| Cq::same_as(self, o))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl crate::cq::native::NativeChannel for CompChannel {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        CompChannel::fd(self)
    }

    fn get_cq_event(&self) -> Result<Arc<dyn crate::cq::native::NativeCq>> {
        Ok(Arc::new(self.next_event()?))
    }

    fn destroy(&self) -> Result<()> {
        CompChannel::destroy(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The public [`crate::Cq`] over this CQ (what [`crate::Context::create_cq`] gives on a
/// device of the backend), e.g. for a [`crate::QpInit`] of [`crate::rdma_core::Pd::create_qp`].
impl From<Cq> for crate::cq::Cq {
    fn from(cq: Cq) -> crate::cq::Cq {
        crate::cq::Cq::from_native(Arc::new(cq))
    }
}

/// The public [`crate::CompChannel`] over this channel, e.g. for a [`crate::CqInit`].
impl From<CompChannel> for crate::CompChannel {
    fn from(ch: CompChannel) -> crate::CompChannel {
        crate::CompChannel::from_native(Arc::new(ch))
    }
}
