//! A byte stream over an RC connection: [`RdmaStream`] implements tokio's `AsyncRead` and
//! `AsyncWrite` (feature `tokio`) and the `futures` traits of the same names (feature
//! `async-io`: smol, async-std, `futures::io`), so a program (`tokio::io::copy`, a codec,
//! an HTTP or gRPC stack over any `AsyncRead + AsyncWrite`) runs over RDMA.
//!
//! **The protocol** (both ends are `RdmaStream`s; the connection request's private data
//! starts with [`MAGIC`], anything else is rejected). Each end registers one region of
//! [`SLOTS`] receive and [`SLOTS`] send buffers of [`SLOT_LEN`] bytes and keeps every
//! receive posted (rdma_accept(3) / rdma_connect(3): posted before the handshake
//! completes). A message is one SEND: an 8-byte header (payload length, credits
//! returned, flags) and up to `SLOT_LEN − 8` bytes of the stream.
//!
//! - **Credits.** An end may send only into a receive the peer has posted: it starts with
//!   `SLOTS` credits and spends one per message. A receive buffer is posted again once
//!   the application has read all of it (a credit-only message at once); the credits of
//!   those re-posts travel back in the header of the next message. Data and `FIN` keep
//!   one credit in reserve for a credit-only message, sent when half the receives wait to
//!   be announced, or when any do and the peer may be unable to send (this end's count of
//!   the peer's credits, an upper bound, is below 2). So no end ever sends into a missing
//!   receive (no RNR), a reader that stops reading stops its writer (backpressure, as a
//!   TCP window), and a writer whose reader reads always gets its credits back.
//! - **End of stream.** `poll_shutdown` sends a message flagged `FIN`; the peer's reads
//!   return 0 once everything before it was read. A failed completion (the peer's
//!   disconnection flushes the QP) makes reads and writes fail with `ConnectionReset`
//!   (reads first return what had arrived); the stream watches its connection's events,
//!   and the peer's DISCONNECTED moves its QP to ERR so that this happens (so do not also
//!   await `connection().disconnected()`).
//!
//! One CQ on its own channel ([`rverbs::aio::AsyncCq`]) holds both queues' completions;
//! a reader task and a writer task (`tokio::io::split`) both make progress from it, and a
//! wake-up of the channel wakes both.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;

use rverbs::aio::AsyncCq;
use rverbs::typed::QpDomain;
use rverbs::{Access, CqInit, Mr, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, Wc, WcOpcode, WcStatus};

use crate::aio::{connect_with, AsyncConnection, AsyncRequest};
use crate::error::{Error, Result};
use crate::rule::Rule;

/// The first bytes of a stream's connection request (private data, ≤ 56 bytes).
pub const MAGIC: &[u8] = b"rverbs-stream/1";
/// Receive (and send) buffers of each end.
pub const SLOTS: usize = 16;
/// Bytes of one buffer: a message's header and payload.
pub const SLOT_LEN: usize = 64 * 1024;
const HEADER: usize = 8;
const FIN: u16 = 1;
const RECV_TAG: u64 = 0;
const SEND_TAG: u64 = 1 << 32;

/// A message's header: payload bytes, credits returned, flags.
fn header(len: usize, credits: usize, flags: u16) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4..6].copy_from_slice(&(credits as u16).to_le_bytes());
    h[6..].copy_from_slice(&flags.to_le_bytes());
    h
}

/// The tasks to wake when the CQ has news: the reader's and the writer's, so that two
/// tasks sharing the stream (`tokio::io::split`) both hear the channel, which keeps one
/// waker.
#[derive(Default)]
struct Wakers {
    reader: Mutex<Option<Waker>>,
    writer: Mutex<Option<Waker>>,
}

impl Wake for Wakers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        for w in [&self.reader, &self.writer] {
            if let Some(w) = w.lock().unwrap_or_else(|p| p.into_inner()).take() {
                w.wake();
            }
        }
    }
}

/// A message received and not yet read in full.
struct Filled {
    slot: usize,
    len: usize,
    read: usize,
}

/// A byte stream over an RC connection (module docs).
pub struct RdmaStream {
    conn: AsyncConnection,
    cq: AsyncCq,
    mr: Mr,
    wakers: Arc<Wakers>,
    /// Messages received in order, not yet read in full.
    filled: VecDeque<Filled>,
    /// Receives posted again whose credits the peer has not been told of.
    returned: usize,
    /// Receives of the peer this end may send into.
    credits: usize,
    /// What the peer may send into this end's receives, as far as this end knows: what
    /// it was told, less what arrived (an upper bound: announcements in flight have not
    /// reached it, messages in flight have not reached us).
    peer_credits: usize,
    /// Send buffers free (their SEND completed).
    free: Vec<usize>,
    /// The peer's FIN arrived (reads end once `filled` is empty).
    peer_done: bool,
    /// This end sent its FIN.
    done: bool,
    /// A failed completion: the connection is gone.
    broken: Option<WcStatus>,
    /// The peer's DISCONNECTED arrived (and this end disconnected too).
    disconnected: bool,
}

impl RdmaStream {
    /// Connects to the stream listener at `dst` (an [`crate::aio::AsyncListener`] whose
    /// requests are given to [`RdmaStream::accept`]) with a QP, CQ and buffers of `pd` (a
    /// [`rverbs::Pd`], or a [`rverbs::ParentDomain`], whose allocator then supplies the
    /// QP's send ring and which the QP holds); address and route resolution each end
    /// within `timeout`.
    pub async fn connect<D: QpDomain>(pd: &D, dst: SocketAddr, timeout: Duration) -> Result<RdmaStream> {
        let (qp, cq, mr) = resources(pd)?;
        let conn = connect_with(dst, qp, MAGIC, timeout, |qp| post_all(qp, &mr)).await?;
        Ok(RdmaStream::new(conn, cq, mr))
    }

    /// Accepts connection request `req` as a stream (with resources of `pd`, a PD or a
    /// parent domain as for [`RdmaStream::connect`]); a request that is not a stream's (its
    /// private data lacks [`MAGIC`]) is rejected.
    pub async fn accept<D: QpDomain>(pd: &D, req: AsyncRequest) -> Result<RdmaStream> {
        if !req.param().private_data.starts_with(MAGIC) {
            req.reject(b"not an rverbs stream")?;
            return Err(Error::invalid("RdmaStream::accept", Rule::NotAStream));
        }
        let (qp, cq, mr) = resources(pd)?;
        let conn = req.accept_with(qp, MAGIC, |qp| post_all(qp, &mr)).await?;
        Ok(RdmaStream::new(conn, cq, mr))
    }

    fn new(conn: AsyncConnection, cq: AsyncCq, mr: Mr) -> RdmaStream {
        RdmaStream {
            conn,
            cq,
            mr,
            wakers: Arc::default(),
            filled: VecDeque::new(),
            returned: 0,
            credits: SLOTS,
            peer_credits: SLOTS,
            free: (0..SLOTS).rev().collect(),
            peer_done: false,
            done: false,
            broken: None,
            disconnected: false,
        }
    }

    /// The connection (its QP, the peer's private data, the disconnection).
    pub fn connection(&self) -> &AsyncConnection {
        &self.conn
    }

    /// Takes every completion the CQ holds: `Ready` if there was one, `Pending` (the
    /// reader and the writer registered with the channel) if none.
    fn progress(&mut self) -> Poll<io::Result<()>> {
        let waker = Waker::from(self.wakers.clone());
        let mut tcx = TaskContext::from_waker(&waker);
        let mut wc = [Wc::default(); 2 * SLOTS];
        let mut any = false;
        if !self.disconnected {
            if let Poll::Ready(r) = self.conn.poll_disconnected(&mut tcx) {
                // The peer disconnected (rdma_disconnect(3) leaves our QP to us): ours
                // goes to ERR, so its posted receives and sends flush, and the stream
                // breaks once what had arrived is read.
                r.map_err(io::Error::other)?;
                self.disconnected = true;
                self.conn.disconnect().map_err(io::Error::other)?;
                any = true;
            }
        }
        loop {
            match self.cq.poll_completions(&mut tcx, &mut wc) {
                Poll::Ready(Ok(n)) => {
                    any = true;
                    for w in &wc[..n] {
                        self.completed(w)?;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                Poll::Pending if any => return Poll::Ready(self.return_credits()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn completed(&mut self, w: &Wc) -> io::Result<()> {
        if w.status() != WcStatus::Success {
            self.broken.get_or_insert(w.status());
            return Ok(());
        }
        let id = w.wr_id();
        if id >= SEND_TAG {
            self.free.push((id - SEND_TAG) as usize);
            return Ok(());
        }
        let slot = (id - RECV_TAG) as usize;
        let got = w.byte_len().unwrap_or(0) as usize;
        let mut h = [0u8; HEADER];
        if got < HEADER || w.opcode() != Some(WcOpcode::Recv) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a message without a stream header"));
        }
        self.mr.read(slot * SLOT_LEN, &mut h).map_err(io::Error::other)?;
        let len = u32::from_le_bytes(h[..4].try_into().expect("4 bytes")) as usize;
        self.credits += usize::from(u16::from_le_bytes([h[4], h[5]]));
        self.peer_credits = self.peer_credits.saturating_sub(1);
        let flags = u16::from_le_bytes([h[6], h[7]]);
        if len != got - HEADER {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a stream header that does not match its message"));
        }
        if flags & FIN != 0 {
            self.peer_done = true;
        }
        if len > 0 {
            self.filled.push_back(Filled { slot, len, read: 0 });
        } else {
            self.repost(slot)?;
        }
        Ok(())
    }

    /// Posts receive `slot` again; its credit goes back with the next message, or in a
    /// credit-only message ([`RdmaStream::return_credits`]).
    fn repost(&mut self, slot: usize) -> io::Result<()> {
        post_recv(self.conn.qp(), &self.mr, slot).map_err(io::Error::other)?;
        self.returned += 1;
        self.return_credits()
    }

    /// Sends the credits of the re-posted receives in a credit-only message (with the
    /// reserved credit) when half the receives wait to be announced, or when any do and
    /// the peer may be unable to send data (fewer than 2 credits by this end's count);
    /// called after each re-post and after each pass over the CQ (a send buffer may have
    /// come free).
    fn return_credits(&mut self) -> io::Result<()> {
        let due = self.returned >= SLOTS / 2 || (self.returned > 0 && self.peer_credits < 2);
        if due && self.credits >= 1 {
            if let Some(s) = self.free.pop() {
                self.send(s, &[], 0)?;
            }
        }
        Ok(())
    }

    /// Sends `data` from send buffer `slot` with the credits to return and `flags`.
    fn send(&mut self, slot: usize, data: &[u8], flags: u16) -> io::Result<()> {
        let at = (SLOTS + slot) * SLOT_LEN;
        self.mr.write(at, &header(data.len(), self.returned, flags)).map_err(io::Error::other)?;
        self.mr.write(at + HEADER, data).map_err(io::Error::other)?;
        let sge = [self.mr.sge(at, (HEADER + data.len()) as u32).map_err(io::Error::other)?];
        self.conn.qp().post_send(&[SendWr::send(SEND_TAG + slot as u64, &sge).signaled()]).map_err(|e| io::Error::other(e.error))?;
        self.peer_credits += self.returned;
        self.returned = 0;
        self.credits -= 1;
        Ok(())
    }

    fn broken_error(&self) -> io::Error {
        io::Error::new(io::ErrorKind::ConnectionReset, format!("the RDMA connection failed ({:?})", self.broken))
    }
}

/// The stream's QP, its CQ on a channel of its own, and its buffers.
fn resources<D: QpDomain>(domain: &D) -> Result<(Qp, AsyncCq, Mr)> {
    let pd = domain.pd_here();
    let ctx = pd.context();
    let ch = ctx.create_comp_channel()?;
    let cq = ctx.create_cq(&CqInit::new(4 * SLOTS as u32).channel(&ch))?;
    let n = SLOTS as u32;
    let cap = QpCap { max_send_wr: n, max_recv_wr: n, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = domain.create_qp_here(&QpInit::new(QpType::Rc, &cq, cap))?;
    let mr = pd.alloc_mr(2 * SLOTS * SLOT_LEN, Access::LOCAL_WRITE)?;
    Ok((qp, AsyncCq::new(cq, ch)?, mr))
}

fn post_recv(qp: &Qp, mr: &Mr, slot: usize) -> Result<()> {
    let sge = [mr.sge(slot * SLOT_LEN, SLOT_LEN as u32)?];
    qp.post_recv(&[RecvWr::new(RECV_TAG + slot as u64, &sge)])?;
    Ok(())
}

fn post_all(qp: &Qp, mr: &Mr) -> Result<()> {
    (0..SLOTS).try_for_each(|s| post_recv(qp, mr, s))
}

impl RdmaStream {
    /// Reads into `out` what has arrived (what tokio's and futures' `poll_read` share):
    /// `Ready(Ok(0))` at the end of the stream (or for an empty `out`).
    fn poll_read_into(&mut self, cx: &mut TaskContext<'_>, out: &mut [u8]) -> Poll<io::Result<usize>> {
        *self.wakers.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        loop {
            if let Some(f) = self.filled.front_mut() {
                let n = (f.len - f.read).min(out.len());
                let at = f.slot * SLOT_LEN + HEADER + f.read;
                self.mr.read(at, &mut out[..n]).map_err(io::Error::other)?;
                f.read += n;
                if f.read == f.len {
                    let slot = f.slot;
                    self.filled.pop_front();
                    self.repost(slot)?;
                }
                return Poll::Ready(Ok(n));
            }
            if self.peer_done {
                return Poll::Ready(Ok(0));
            }
            if self.broken.is_some() {
                return Poll::Ready(Err(self.broken_error()));
            }
            std::task::ready!(self.progress())?;
        }
    }

    /// Sends what of `data` one message holds, once a credit and a buffer are free.
    fn poll_write_from(&mut self, cx: &mut TaskContext<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        *self.wakers.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        if self.done {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "the stream was shut down")));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            if self.broken.is_some() {
                return Poll::Ready(Err(self.broken_error()));
            }
            // One credit stays in reserve for a credit-only message.
            if self.credits >= 2 {
                if let Some(slot) = self.free.pop() {
                    let n = data.len().min(SLOT_LEN - HEADER);
                    self.send(slot, &data[..n], 0)?;
                    return Poll::Ready(Ok(n));
                }
            }
            std::task::ready!(self.progress())?;
        }
    }

    /// Sends `FIN` (the peer's reads then end), once.
    fn poll_finish(&mut self, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        *self.wakers.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.broken.is_some() {
                return Poll::Ready(Err(self.broken_error()));
            }
            // The reserved credit stays for credit-only messages: the peer may still write.
            if self.credits >= 2 {
                if let Some(slot) = self.free.pop() {
                    self.send(slot, &[], FIN)?;
                    self.done = true;
                    return Poll::Ready(Ok(()));
                }
            }
            std::task::ready!(self.progress())?;
        }
    }
}

/// tokio's `AsyncRead`: a read of 0 bytes is the end of the stream.
#[cfg(feature = "tokio")]
impl tokio::io::AsyncRead for RdmaStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        let n = std::task::ready!(self.get_mut().poll_read_into(cx, buf.initialize_unfilled()))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// tokio's `AsyncWrite`; `poll_shutdown` sends `FIN`.
#[cfg(feature = "tokio")]
impl tokio::io::AsyncWrite for RdmaStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_from(cx, data)
    }

    /// Every accepted byte is already in a posted SEND: nothing to flush.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_finish(cx)
    }
}

/// The `futures` traits' `AsyncRead` (smol, async-std, `futures::io`): a read of 0 bytes
/// is the end of the stream.
#[cfg(feature = "async-io")]
impl futures_io::AsyncRead for RdmaStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_read_into(cx, buf)
    }
}

/// The `futures` traits' `AsyncWrite`; `poll_close` sends `FIN`.
#[cfg(feature = "async-io")]
impl futures_io::AsyncWrite for RdmaStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_from(cx, data)
    }

    /// Every accepted byte is already in a posted SEND: nothing to flush.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_finish(cx)
    }
}
