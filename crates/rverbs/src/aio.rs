//! Completions and asynchronous events as futures and streams, on tokio's reactor
//! (feature `tokio`) or on async-io's (feature `async-io`), which wakes the tasks of any
//! executor: smol, `futures::executor`, or a hand-written `block_on`.
//!
//! A completion channel's fd and a context's `async_fd` are real fds, readable while an
//! event is queued (ibv_get_cq_event(3), ibv_get_async_event(3)), so an async program
//! registers them with its reactor instead of blocking a thread in `get_cq_event`:
//!
//! - [`AsyncCq`]: the completions of one CQ, as `completions(&mut [Wc]).await` or as a
//!   [`Stream`] of [`Wc`]. It follows ibv_get_cq_event(3)'s example: poll; when the CQ is
//!   empty, arm it (ibv_req_notify_cq(3)) and poll once more, since completions already
//!   in the CQ raise no event; only then wait for the channel; acknowledge each event
//!   (ibv_ack_cq_events(3)) and poll again.
//! - [`AsyncChannel`]: the events of a channel that serves several CQs.
//! - [`AsyncEvents`]: a context's asynchronous events (QP_FATAL, CQ_ERR, …).
//!
//! **Cancellation.** Dropping a future loses nothing: a completion stays in its CQ until a
//! poll returns it, and an event is read from the fd only inside the poll that returns it
//! (a CQ's event is acknowledged there and its CQ polled at once). What an [`AsyncCq`]
//! remembers between futures (whether the CQ is armed) lives in the value, not in the
//! future.
//!
//! **No empty wake-ups.** A future resolves only with at least one completion or event:
//! a wake-up whose read finds nothing (another reader took the event, or the event was of
//! an arming whose completion an earlier poll already returned) clears the readiness and
//! waits again.
//!
//! **Which reactor.** A type created inside a tokio runtime with I/O enabled registers
//! its fd with that runtime (`tokio::io::unix::AsyncFd`). Elsewhere, with the feature
//! `async-io`, it registers with async-io's reactor (`async_io::Async`), whose thread
//! wakes whatever executor polls the future; with `tokio` alone, creating one outside a
//! runtime is an error.
//!
//! The fds are made non-blocking, so the blocking `get_cq_event` / `get_async_event` of
//! the same channel or context return `Error::WouldBlock` afterwards.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context as TaskContext, Poll};

use futures_core::Stream;
#[cfg(feature = "tokio")]
use tokio::io::{unix::AsyncFd, Interest};

use crate::cq::channel::{CompChannel, CqEvent};
use crate::cq::Cq;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::AsyncEvent;
use crate::rule::Rule;
use crate::rings::wc::Wc;

/// An object whose fd stays the same open descriptor for as long as the object lives, so
/// that a reactor may watch it.
///
/// # Safety
///
/// Every call of `as_fd` on a value returns the same descriptor, open from the value's
/// creation until it is dropped (and its clones, if it shares the descriptor with them).
#[allow(unsafe_code)]
pub unsafe trait StableFd: AsFd {}

// SAFETY: a channel's FIFO fd is opened with it and closed when its last clone drops.
#[allow(unsafe_code)]
unsafe impl StableFd for CompChannel {}

// SAFETY: a context's async-event FIFO fd is opened with it and closed when its last
// clone drops.
#[allow(unsafe_code)]
unsafe impl StableFd for Context {}

/// The object as the reactors want it (tokio: `AsRawFd`; async-io: `AsFd`).
#[derive(Debug)]
struct Watched<T>(T);

impl<T: AsFd> AsRawFd for Watched<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl<T: AsFd> AsFd for Watched<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The reactor an [`AsyncSource`] is registered with (module doc, "Which reactor").
#[derive(Debug)]
enum Registered<T: StableFd> {
    #[cfg(feature = "tokio")]
    Tokio(AsyncFd<Watched<T>>),
    #[cfg(feature = "async-io")]
    AsyncIo(async_io::Async<Watched<T>>),
}

/// An object whose fd is readable while it holds something to read (a completion
/// channel, a context's async events, an rdma_cm event channel), registered with a
/// reactor (module doc, "Which reactor"): the building block of the async types here and
/// in `rverbs-cm`.
#[derive(Debug)]
pub struct AsyncSource<T: StableFd> {
    fd: Registered<T>,
}

impl<T: StableFd> AsyncSource<T> {
    /// Makes `inner`'s fd non-blocking and registers it for reading: with the current
    /// tokio runtime if there is one (feature `tokio`), else with async-io's reactor
    /// (feature `async-io`).
    ///
    /// Errors: `Os` if registering fails, or (without the feature `async-io`) if there is
    /// no tokio runtime with I/O enabled.
    pub fn new(inner: T) -> io::Result<AsyncSource<T>> {
        #[cfg(all(feature = "tokio", feature = "async-io"))]
        if tokio::runtime::Handle::try_current().is_ok() {
            return Self::on_tokio(inner);
        }
        #[cfg(all(feature = "tokio", not(feature = "async-io")))]
        {
            // Without a runtime tokio would panic; say so instead.
            tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
            Self::on_tokio(inner)
        }
        #[cfg(feature = "async-io")]
        {
            // async_io::Async::new makes the fd non-blocking; it deregisters the fd before
            // dropping `inner` (`StableFd` keeps the fd the same meanwhile).
            Ok(AsyncSource { fd: Registered::AsyncIo(async_io::Async::new(Watched(inner))?) })
        }
    }

    #[cfg(feature = "tokio")]
    #[allow(unsafe_code)]
    fn on_tokio(inner: T) -> io::Result<AsyncSource<T>> {
        rustix::io::ioctl_fionbio(inner.as_fd(), true)?;
        // SAFETY: `StableFd`: the fd stays the same open descriptor while `inner`
        // lives, and the `AsyncFd` owns `inner`.
        let fd = unsafe { AsyncFd::register_with_interest(Watched(inner), Interest::READABLE) };
        Ok(AsyncSource { fd: Registered::Tokio(fd.map_err(io::Error::from)?) })
    }

    /// The object.
    pub fn get_ref(&self) -> &T {
        match &self.fd {
            #[cfg(feature = "tokio")]
            Registered::Tokio(fd) => &fd.get_ref().0,
            #[cfg(feature = "async-io")]
            Registered::AsyncIo(fd) => &fd.get_ref().0,
        }
    }

    /// Once the fd is readable, reads with `read`, which returns `None` when there was
    /// nothing after all (the fd's readiness is then cleared and the wait goes on): so
    /// `Pending`, or `Ready` with what `read` found, never an empty wake-up.
    pub fn poll_read_with<R>(&self, cx: &mut TaskContext<'_>, mut read: impl FnMut(&T) -> Option<R>) -> Poll<io::Result<R>> {
        match &self.fd {
            #[cfg(feature = "tokio")]
            Registered::Tokio(fd) => loop {
                let mut guard = ready!(fd.poll_read_ready(cx))?;
                match guard.try_io(|fd| read(&fd.get_ref().0).ok_or_else(|| io::ErrorKind::WouldBlock.into())) {
                    Ok(r) => return Poll::Ready(r),
                    Err(_would_block) => continue,
                }
            },
            // async-io reports a readiness once per event of its reactor: after a read
            // that found nothing, the next poll_readable waits for a new one.
            #[cfg(feature = "async-io")]
            Registered::AsyncIo(fd) => loop {
                ready!(fd.poll_readable(cx))?;
                if let Some(r) = read(&fd.get_ref().0) {
                    return Poll::Ready(Ok(r));
                }
            },
        }
    }
}

/// Reads one event with `read` (a non-blocking `get_*_event`): `WouldBlock` waits again.
fn poll_read<T: StableFd, E>(src: &AsyncSource<T>, cx: &mut TaskContext<'_>, read: impl Fn(&T) -> Result<E>) -> Poll<Result<E>> {
    let r = ready!(src.poll_read_with(cx, |t| match read(t) {
        Err(Error::WouldBlock) => None,
        other => Some(other),
    }));
    Poll::Ready(r.map_err(Error::from).and_then(|r| r))
}

/// How many CQs report to `channel`, `cq` among them (else `Invalid`): for a CQ and a
/// channel of the rdma-core backend, the backend's count.
fn reporting_cqs(cq: &Cq, channel: &CompChannel) -> Result<u32> {
    #[cfg(feature = "rdma-core")]
    if let (Some(cq), Some(ch)) = (crate::rdma_core::Cq::of(cq), crate::rdma_core::CompChannel::of(channel)) {
        return cq.channel_users(ch).ok_or(Error::invalid("AsyncCq::new", Rule::NotTheCqsChannel));
    }
    if !cq.inner()?.channel_is(channel.inner()?) {
        return Err(Error::invalid("AsyncCq::new", Rule::NotTheCqsChannel));
    }
    Ok(channel.inner()?.users())
}

/// A completion channel's events, awaited (ibv_get_cq_event(3)).
///
/// Each [`CqEvent`] is acknowledged when dropped (ibv_ack_cq_events(3)); the CQ it names
/// must be re-armed (ibv_req_notify_cq(3)) for the next one and polled after arming.
#[derive(Debug)]
pub struct AsyncChannel {
    fd: AsyncSource<CompChannel>,
}

impl AsyncChannel {
    /// Registers `channel` with a reactor ([`AsyncSource::new`]) and makes its fd
    /// non-blocking.
    ///
    /// Errors: those of [`AsyncSource::new`].
    pub fn new(channel: CompChannel) -> Result<AsyncChannel> {
        Ok(AsyncChannel { fd: AsyncSource::new(channel)? })
    }

    /// The channel.
    pub fn channel(&self) -> &CompChannel {
        self.fd.get_ref()
    }

    /// Polls for the next event: `Ready` only with an event (or an error).
    pub fn poll_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<CqEvent>> {
        poll_read(&self.fd, cx, CompChannel::get_cq_event)
    }

    /// The next event. Cancellation-safe: an event is read only when it is returned.
    pub async fn event(&self) -> Result<CqEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }
}

/// The completions of one CQ, awaited (ibv_poll_cq(3) with ibv_req_notify_cq(3) and
/// ibv_get_cq_event(3), in the order of ibv_get_cq_event(3)'s example).
///
/// The CQ's completion channel serves this CQ alone: the constructor refuses a channel
/// other CQs use, and a CQ created on it later would have its events read (and dropped)
/// here. For a channel shared by CQs, use [`AsyncChannel`].
#[derive(Debug)]
pub struct AsyncCq {
    cq: Cq,
    channel: AsyncChannel,
    /// Armed since the last event was consumed: an empty poll waits for the channel.
    armed: bool,
}

impl AsyncCq {
    /// The CQ `cq`, whose completion channel is `channel`, registered with a reactor
    /// ([`AsyncSource::new`]).
    ///
    /// Errors: `Invalid` if `cq` does not report to `channel`, or other CQs do;
    /// those of [`AsyncChannel::new`].
    pub fn new(cq: Cq, channel: CompChannel) -> Result<AsyncCq> {
        let cqs = reporting_cqs(&cq, &channel)?;
        if cqs != 1 {
            return Err(Error::invalid("AsyncCq::new", Rule::SharedChannel { cqs }));
        }
        Ok(AsyncCq { cq, channel: AsyncChannel::new(channel)?, armed: false })
    }

    /// The CQ, for what the async API does not cover (resize, query, ex polling).
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// Polls for completions into `wc`: `Ready(Ok(n))` with `1 ≤ n ≤ wc.len()`, oldest
    /// first, or `Pending` (the waker is woken by the channel).
    ///
    /// Errors: those of [`Cq::poll`] (`CqOverrun` once the CQ is in error) and
    /// [`Cq::req_notify`]; `Invalid` if `wc` is empty.
    pub fn poll_completions(&mut self, cx: &mut TaskContext<'_>, wc: &mut [Wc]) -> Poll<Result<usize>> {
        if wc.is_empty() {
            return Poll::Ready(Err(Error::invalid("AsyncCq::poll_completions", Rule::NoRoomForCompletion)));
        }
        loop {
            let n = self.cq.poll(wc)?;
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            if !self.armed {
                // Arm, then poll once more: what arrived before the arming fires nothing.
                self.cq.req_notify(false)?;
                self.armed = true;
                continue;
            }
            let event = ready!(self.channel.poll_event(cx))?;
            // Acknowledged here; the arming it answered is spent.
            drop(event);
            self.armed = false;
        }
    }

    /// Waits for completions into `wc` and returns how many (at least one).
    /// Cancellation-safe ([module docs](self)).
    pub async fn completions(&mut self, wc: &mut [Wc]) -> Result<usize> {
        std::future::poll_fn(|cx| self.poll_completions(cx, wc)).await
    }

    /// The next completion. Cancellation-safe.
    pub async fn next_completion(&mut self) -> Result<Wc> {
        let mut wc = [Wc::default()];
        self.completions(&mut wc).await?;
        Ok(wc[0])
    }
}

/// The CQ's completions one by one; the stream never ends (an error is an item: a CQ in
/// error keeps returning `CqOverrun`).
impl Stream for AsyncCq {
    type Item = Result<Wc>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let mut wc = [Wc::default()];
        let this = self.get_mut();
        this.poll_completions(cx, &mut wc).map(|r| Some(r.map(|_| wc[0])))
    }
}

/// A context's asynchronous events, awaited (ibv_get_async_event(3)); each is
/// acknowledged when dropped (ibv_ack_async_event(3)).
#[derive(Debug)]
pub struct AsyncEvents {
    fd: AsyncSource<Context>,
}

impl AsyncEvents {
    /// The events of `ctx`, registered with a reactor ([`AsyncSource::new`]; its
    /// `async_fd` becomes non-blocking).
    ///
    /// Errors: those of [`AsyncChannel::new`].
    pub fn new(ctx: Context) -> Result<AsyncEvents> {
        Ok(AsyncEvents { fd: AsyncSource::new(ctx)? })
    }

    /// The context.
    pub fn context(&self) -> &Context {
        self.fd.get_ref()
    }

    /// Polls for the next event: `Ready` only with an event (or an error).
    pub fn poll_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<AsyncEvent>> {
        poll_read(&self.fd, cx, Context::get_async_event)
    }

    /// The next event. Cancellation-safe: an event is read only when it is returned.
    pub async fn event(&self) -> Result<AsyncEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }
}

/// The context's events; the stream never ends.
impl Stream for AsyncEvents {
    type Item = Result<AsyncEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx).map(Some)
    }
}

impl AsFd for AsyncCq {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.channel.channel().fd()
    }
}
