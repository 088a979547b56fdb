//! Connections (`struct rpma_conn`): events, private data, and the data path.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use rverbs::{FlushPlacement, FlushSelectivity, FlushWr, Mr, Payload, SendFlags, SendWr, Sge, WrOpcode};
use rverbs_cm::{CmId, EventChannel, EventKind};

use crate::cq::Cq;
use crate::queues::Queues;
use crate::recv::post_recv;
use crate::error::{Error, Result};
use crate::flags::{CompletionFlags, FlushType, Usage};
use crate::mr::{MrLocal, MrRemote};
use crate::peer::{Peer, PeerCfg};
use crate::util;

/// The alignment an atomic write's destination needs (`RPMA_ATOMIC_WRITE_ALIGNMENT`).
pub const ATOMIC_WRITE_ALIGNMENT: usize = 8;

/// The bytes the emulated flush reads back (librpma 1.2's read-after-write size).
const RAW_SIZE: usize = 8;

/// Connection events (`enum rpma_conn_event`), as rpma_conn_next_event(3) maps the
/// connection manager's: ESTABLISHED → `Established`; CONNECT_ERROR and DEVICE_REMOVAL
/// → `Lost`; DISCONNECTED and TIMEWAIT_EXIT → `Closed`; REJECTED → `Rejected`;
/// UNREACHABLE → `Unreachable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ConnEvent {
    /// `RPMA_CONN_ESTABLISHED` (0): the connection is established.
    Established = 0,
    /// `RPMA_CONN_CLOSED` (1): the connection was closed (by either side).
    Closed = 1,
    /// `RPMA_CONN_LOST` (2): the connection was lost.
    Lost = 2,
    /// `RPMA_CONN_REJECTED` (3): the connection request was rejected (e.g. nobody
    /// listens at the address).
    Rejected = 3,
    /// `RPMA_CONN_UNREACHABLE` (4): the other side did not answer.
    Unreachable = 4,
}

impl ConnEvent {
    /// The event a connection-manager event stands for; `None` for the others
    /// (rpma_conn_next_event(3) reports those as `RPMA_E_UNKNOWN`).
    pub fn from_cm(kind: EventKind) -> Option<ConnEvent> {
        Some(match kind {
            EventKind::Established => ConnEvent::Established,
            EventKind::ConnectError | EventKind::DeviceRemoval => ConnEvent::Lost,
            EventKind::Disconnected | EventKind::TimewaitExit => ConnEvent::Closed,
            EventKind::Rejected => ConnEvent::Rejected,
            EventKind::Unreachable => ConnEvent::Unreachable,
            _ => return None,
        })
    }

    /// A description of the event (rpma_utils_conn_event_2str(3)).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnEvent::Established => "Connection established",
            ConnEvent::Closed => "Connection closed",
            ConnEvent::Lost => "Connection lost",
            ConnEvent::Rejected => "Connection rejected",
            ConnEvent::Unreachable => "Connection unreachable",
        }
    }
}

impl std::fmt::Display for ConnEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connection (`struct rpma_conn`), made by [`crate::ConnReq::connect`]: its id on an
/// event channel of its own, its QP and CQs, the private data of the other side, and the
/// buffer its emulated flushes read into.
///
/// The data-path functions post one work request each and return once it is posted;
/// `op_context` becomes the work request id the completion carries; `flags` says
/// whether a successful operation completes ([`CompletionFlags`]). Memory ranges are
/// not checked at post time, as in librpma: a bad range fails the operation with an
/// error completion. Dropping the connection deletes it ([`Conn::delete`]).
#[derive(Debug)]
pub struct Conn {
    id: CmId,
    ch: EventChannel,
    q: Queues,
    raw: Mr,
    private_data: OnceLock<Vec<u8>>,
    direct_write_to_pmem: AtomicBool,
    deleted: bool,
}

impl Conn {
    pub(crate) fn new(peer: Peer, id: CmId, ch: EventChannel, q: Queues, private_data: Option<Vec<u8>>) -> Result<Conn> {
        // librpma 1.2's flush object: a registered buffer the 8-byte read lands in.
        let raw = match peer.pd().alloc_mr(RAW_SIZE, Usage::READ_DST.access()) {
            Ok(m) => m,
            Err(e) => {
                let _ = q.destroy(Some(&id));
                let _ = id.destroy();
                return Err(Error::alloc(e.errno()));
            }
        };
        let conn = Conn {
            id,
            ch,
            q,
            raw,
            private_data: OnceLock::new(),
            direct_write_to_pmem: AtomicBool::new(false),
            deleted: false,
        };
        if let Some(d) = private_data.filter(|d| !d.is_empty()) {
            let _ = conn.private_data.set(d);
        }
        Ok(conn)
    }

    pub(crate) fn cm_id(&self) -> &CmId {
        &self.id
    }

    /// The descriptor of the connection's event channel (rpma_conn_get_event_fd(3)):
    /// readable exactly while an event waits. It may be made non-blocking; then
    /// [`Conn::next_event`] fails with `NoEvent` when none waits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// The next connection event (rpma_conn_next_event(3)), blocking until one arrives
    /// unless the fd is non-blocking. The private data of the first ESTABLISHED is kept
    /// if the connection has none yet (the active side gets the accepter's here). The
    /// event is acknowledged before returning.
    ///
    /// Errors: `NoEvent` (non-blocking fd, no event); `Unknown` for a
    /// connection-manager event with no connection event; `Provider` if taking the event
    /// fails.
    pub fn next_event(&self) -> Result<ConnEvent> {
        self.take_event(None)
    }

    /// As [`Conn::next_event`], waiting at most `timeout` (an rverbs extension).
    ///
    /// Errors: those of [`Conn::next_event`]; `Provider(ETIMEDOUT)` when the timeout
    /// passes.
    pub fn next_event_timeout(&self, timeout: Duration) -> Result<ConnEvent> {
        self.take_event(Some(timeout))
    }

    fn take_event(&self, timeout: Option<Duration>) -> Result<ConnEvent> {
        let ev = util::cm_event(&self.ch, timeout)?;
        if ev.kind == EventKind::Established && !ev.conn.private_data.is_empty() {
            let _ = self.private_data.set(ev.conn.private_data.clone());
        }
        let kind = ev.kind;
        drop(ev);
        ConnEvent::from_cm(kind).ok_or(Error::Unknown)
    }

    /// The other side's private data (rpma_conn_get_private_data(3)): the requester's on
    /// the passive side, the accepter's (after ESTABLISHED) on the active side, padded
    /// with zeros to the transport's field (56 and 196 bytes) as rdma_cm reports it;
    /// `None` if there is none.
    pub fn private_data(&self) -> Option<&[u8]> {
        self.private_data.get().map(Vec::as_slice)
    }

    /// Applies the other side's peer configuration (rpma_conn_apply_remote_peer_cfg(3)):
    /// whether [`Conn::flush`] may flush to persistence.
    pub fn apply_remote_peer_cfg(&self, cfg: &PeerCfg) {
        self.direct_write_to_pmem.store(cfg.direct_write_to_pmem(), Ordering::Release);
    }

    /// The number of the connection's QP (rpma_conn_get_qp_num(3)).
    pub fn qp_num(&self) -> u32 {
        self.q.qp.qp_num()
    }

    /// The main CQ (rpma_conn_get_cq(3)): every completion, or every one but the
    /// receives if the connection has a receive CQ.
    pub fn get_cq(&self) -> &Cq {
        &self.q.cq
    }

    /// The receive CQ (rpma_conn_get_rcq(3)), if the configuration gave it a size.
    pub fn get_rcq(&self) -> Option<&Cq> {
        self.q.rcq.as_ref()
    }

    /// The descriptor of the shared completion channel (rpma_conn_get_compl_fd(3)).
    ///
    /// Errors: `NotSharedChnl` if the configuration did not share one.
    pub fn compl_fd(&self) -> Result<BorrowedFd<'_>> {
        self.q.shared.as_ref().map(|c| c.fd()).ok_or(Error::NotSharedChnl)
    }

    /// Waits for a completion event on the shared completion channel, acknowledges it,
    /// re-arms the CQ that caused it and returns that CQ and whether it is the receive
    /// CQ (rpma_conn_wait(3)). Collect its completions with [`Cq::get_wc`].
    ///
    /// Errors: `NotSharedChnl` if there is no shared channel; `NoCompletion` if
    /// ibv_get_cq_event(3) fails; `Unknown` if the event names neither CQ; `Provider` if
    /// re-arming fails.
    pub fn wait(&self) -> Result<(&Cq, bool)> {
        let ch = self.q.shared.as_ref().ok_or(Error::NotSharedChnl)?;
        let ev = ch.get_cq_event().map_err(|_| Error::NoCompletion)?;
        let (cq, is_rcq) = if self.q.cq.is(ev.cq()) {
            (&self.q.cq, false)
        } else {
            match &self.q.rcq {
                Some(r) if r.is(ev.cq()) => (r, true),
                _ => return Err(Error::Unknown),
            }
        };
        ev.ack();
        cq.as_verbs().req_notify(false)?;
        Ok((cq, is_rcq))
    }

    /// As [`Conn::wait`], waiting at most `timeout` (an rverbs extension).
    ///
    /// Errors: those of [`Conn::wait`]; `NoCompletion` when the timeout passes.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(&Cq, bool)> {
        let ch = self.q.shared.as_ref().ok_or(Error::NotSharedChnl)?;
        if !util::wait_readable(ch.fd(), Some(timeout))? {
            return Err(Error::NoCompletion);
        }
        self.wait()
    }

    /// Disconnects (rpma_conn_disconnect(3)): the QP moves to the error state (its
    /// outstanding work requests complete with a flush error), the other side sees
    /// `Closed`, and so does this side once the other side disconnects too. Called
    /// both to start closing and after `Closed` arrived.
    ///
    /// Errors: `Provider` if rdma_disconnect(3) fails.
    pub fn disconnect(&self) -> Result<()> {
        self.id.disconnect().map_err(Error::from)
    }

    /// Deletes the connection (rpma_conn_delete(3)): destroys the QP, the CQs, the id
    /// (which disconnects a connection still established) and the channels.
    ///
    /// Errors: `Provider` with the first failure.
    pub fn delete(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.deleted, true) {
            return Ok(());
        }
        let r = self.q.destroy(Some(&self.id));
        let r2 = self.id.clone().destroy().map_err(Error::from);
        let _ = self.raw.dereg();
        r.and(r2)
    }

    fn post(&self, wr: SendWr<'_>) -> Result<()> {
        self.q.qp.post_send(&[wr]).map_err(Error::from)
    }

    /// Reads `len` bytes of `src` at `src_offset` into `dst` at `dst_offset`
    /// (rpma_read(3), IBV_WR_RDMA_READ). `dst` and `src` both `None` with offsets and
    /// length 0 is a 0-byte read.
    ///
    /// Errors: `Inval` for a half-given or non-zero 0-byte form; `Provider` if
    /// ibv_post_send(3) fails.
    #[allow(clippy::too_many_arguments)]
    pub fn read<'a>(
        &self,
        dst: impl Into<Option<&'a MrLocal>>,
        dst_offset: usize,
        src: impl Into<Option<&'a MrRemote>>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        let sge;
        let (list, raddr, rkey): (&[Sge], u64, u32) = match (dst.into(), src.into()) {
            (Some(d), Some(s)) => {
                sge = [d.sge(dst_offset, len)?];
                (&sge, s.addr().wrapping_add(src_offset as u64), s.rkey())
            }
            (None, None) if dst_offset == 0 && src_offset == 0 && len == 0 => (&[], 0, 0),
            _ => return Err(Error::Inval),
        };
        self.post(SendWr::read(op_context, list, raddr, rkey).flags(flags.send_flags()))
    }

    fn write_wr<'a>(
        dst: Option<&MrRemote>,
        dst_offset: usize,
        src: Option<&MrLocal>,
        src_offset: usize,
        len: usize,
        sge: &'a mut [Sge; 1],
    ) -> Result<(&'a [Sge], u64, u32)> {
        match (dst, src) {
            (Some(d), Some(s)) => {
                sge[0] = s.sge(src_offset, len)?;
                Ok((&sge[..], d.addr().wrapping_add(dst_offset as u64), d.rkey()))
            }
            (None, None) if dst_offset == 0 && src_offset == 0 && len == 0 => Ok((&[], 0, 0)),
            _ => Err(Error::Inval),
        }
    }

    /// Writes `len` bytes of `src` at `src_offset` to `dst` at `dst_offset`
    /// (rpma_write(3), IBV_WR_RDMA_WRITE). `dst` and `src` both `None` with offsets and
    /// length 0 is a 0-byte write.
    ///
    /// Errors: `Inval` for a half-given or non-zero 0-byte form; `Provider` if
    /// ibv_post_send(3) fails.
    #[allow(clippy::too_many_arguments)]
    pub fn write<'a>(
        &self,
        dst: impl Into<Option<&'a MrRemote>>,
        dst_offset: usize,
        src: impl Into<Option<&'a MrLocal>>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        op_context: u64,
    ) -> Result<()> {
        let mut sge = [Sge { addr: 0, length: 0, lkey: 0 }];
        let (list, raddr, rkey) = Self::write_wr(dst.into(), dst_offset, src.into(), src_offset, len, &mut sge)?;
        self.post(SendWr::write(op_context, list, raddr, rkey).flags(flags.send_flags()))
    }

    /// As [`Conn::write`] with immediate data `imm` (rpma_write_with_imm(3),
    /// IBV_WR_RDMA_WRITE_WITH_IMM, sent as `htonl(imm)`): the write consumes a receive
    /// of the other side, which completes as `IBV_WC_RECV_RDMA_WITH_IMM` carrying `imm`.
    ///
    /// Errors: those of [`Conn::write`].
    #[allow(clippy::too_many_arguments)]
    pub fn write_with_imm<'a>(
        &self,
        dst: impl Into<Option<&'a MrRemote>>,
        dst_offset: usize,
        src: impl Into<Option<&'a MrLocal>>,
        src_offset: usize,
        len: usize,
        flags: CompletionFlags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        let mut sge = [Sge { addr: 0, length: 0, lkey: 0 }];
        let (list, raddr, rkey) = Self::write_wr(dst.into(), dst_offset, src.into(), src_offset, len, &mut sge)?;
        let mut wr = SendWr::write(op_context, list, raddr, rkey).flags(flags.send_flags());
        wr.opcode = WrOpcode::RdmaWriteWithImm;
        wr.imm_data = imm.to_be();
        self.post(wr)
    }

    /// Writes the 8 bytes `src` atomically to `dst` at `dst_offset`
    /// (rpma_atomic_write(3)). If the peer's atomic write is native ([`crate::Native`];
    /// the QP was created for it), as librpma 1.3.0: `IBV_WR_ATOMIC_WRITE` through the
    /// work-request builder (ibv_wr_atomic_write(3)), signaled or not, nothing else;
    /// it completes as `IBV_WC_ATOMIC_WRITE`. Otherwise, as librpma 1.2: an RDMA WRITE
    /// of 8 inline bytes with `IBV_SEND_FENCE`, so it waits for earlier reads (the
    /// emulated flushes) to finish; it completes as `IBV_WC_RDMA_WRITE`.
    ///
    /// Errors: `Inval` if `dst_offset` is not a multiple of 8
    /// ([`ATOMIC_WRITE_ALIGNMENT`]); `Provider` if posting fails.
    pub fn atomic_write(&self, dst: &MrRemote, dst_offset: usize, src: [u8; 8], flags: CompletionFlags, op_context: u64) -> Result<()> {
        if !dst_offset.is_multiple_of(ATOMIC_WRITE_ALIGNMENT) {
            return Err(Error::Inval);
        }
        let raddr = dst.addr().wrapping_add(dst_offset as u64);
        if self.q.native.atomic_write {
            let mut b = self.q.qp.wr_start()?;
            b.atomic_write(op_context, flags.send_flags(), dst.rkey(), raddr, src);
            return b.complete().map_err(Error::from);
        }
        let mut wr = SendWr::new(op_context, WrOpcode::RdmaWrite);
        wr.payload = Payload::Inline(&src);
        wr.remote_addr = raddr;
        wr.rkey = dst.rkey();
        wr.flags = SendFlags::INLINE | SendFlags::FENCE | flags.send_flags();
        self.post(wr)
    }

    /// Flushes what was written to `dst` (`dst_offset`, `len`) to the point `ty` names
    /// (rpma_flush(3)). The checks come first and are the same either way. If the peer's
    /// flush is native ([`crate::Native`]; the QP was created for it), as librpma
    /// 1.3.0: `IBV_WR_FLUSH` of the range (ibv_wr_flush(3), `IBV_FLUSH_RANGE`) with
    /// placement `IBV_FLUSH_GLOBAL` for `Visibility`, `IBV_FLUSH_PERSISTENT` for
    /// `Persistent`; it completes as `IBV_WC_FLUSH`. Otherwise, as librpma 1.2: an RDMA
    /// READ of 8 bytes at `dst_offset` into the connection's private buffer — a read
    /// after the writes on the same QP returns only once they are placed; `len` and `ty`
    /// only select the checks; it completes as `IBV_WC_RDMA_READ`.
    ///
    /// Errors: `NoSupp` if `ty` is `Persistent` and the other side's peer configuration
    /// ([`Conn::apply_remote_peer_cfg`]) does not declare direct write to pmem, or the
    /// region's usage lacks the flush type asked for; `Inval` for a native flush of
    /// more than 4 GiB − 1 bytes (the verbs length is 32 bits); `Provider` if posting
    /// fails.
    pub fn flush(&self, dst: &MrRemote, dst_offset: usize, len: usize, ty: FlushType, flags: CompletionFlags, op_context: u64) -> Result<()> {
        let needed = match ty {
            FlushType::Persistent => {
                if !self.direct_write_to_pmem.load(Ordering::Acquire) {
                    return Err(Error::NoSupp);
                }
                Usage::FLUSH_TYPE_PERSISTENT
            }
            FlushType::Visibility => Usage::FLUSH_TYPE_VISIBILITY,
        };
        if !dst.flush_type().contains(needed) {
            return Err(Error::NoSupp);
        }
        let raddr = dst.addr().wrapping_add(dst_offset as u64);
        if self.q.native.flush {
            let placement = match ty {
                FlushType::Persistent => FlushPlacement::PERSISTENT,
                FlushType::Visibility => FlushPlacement::GLOBAL,
            };
            let len = u32::try_from(len).map_err(|_| Error::Inval)?;
            let f = FlushWr { len, placement, selectivity: FlushSelectivity::Range };
            let mut b = self.q.qp.wr_start()?;
            b.flush(op_context, flags.send_flags(), dst.rkey(), raddr, f);
            return b.complete().map_err(Error::from);
        }
        let sge = [self.raw.sge(0, RAW_SIZE as u32)?];
        self.post(SendWr::read(op_context, &sge, raddr, dst.rkey()).flags(flags.send_flags()))
    }

    fn send_wr<'a>(src: Option<&MrLocal>, offset: usize, len: usize, sge: &'a mut [Sge; 1]) -> Result<&'a [Sge]> {
        match src {
            Some(s) => {
                sge[0] = s.sge(offset, len)?;
                Ok(&sge[..])
            }
            None if offset == 0 && len == 0 => Ok(&[]),
            None => Err(Error::Inval),
        }
    }

    /// Sends `len` bytes of `src` at `offset` (rpma_send(3), IBV_WR_SEND); the other
    /// side must have a receive posted. `src` `None` with offset and length 0 is a
    /// 0-byte send.
    ///
    /// Errors: `Inval` for a non-zero 0-byte form; `Provider` if ibv_post_send(3) fails
    /// (e.g. `ENOMEM`: the send queue is full).
    pub fn send<'a>(&self, src: impl Into<Option<&'a MrLocal>>, offset: usize, len: usize, flags: CompletionFlags, op_context: u64) -> Result<()> {
        let mut sge = [Sge { addr: 0, length: 0, lkey: 0 }];
        let list = Self::send_wr(src.into(), offset, len, &mut sge)?;
        self.post(SendWr::send(op_context, list).flags(flags.send_flags()))
    }

    /// As [`Conn::send`] with immediate data `imm` (rpma_send_with_imm(3),
    /// IBV_WR_SEND_WITH_IMM, sent as `htonl(imm)`).
    ///
    /// Errors: those of [`Conn::send`].
    #[allow(clippy::too_many_arguments)]
    pub fn send_with_imm<'a>(
        &self,
        src: impl Into<Option<&'a MrLocal>>,
        offset: usize,
        len: usize,
        flags: CompletionFlags,
        imm: u32,
        op_context: u64,
    ) -> Result<()> {
        let mut sge = [Sge { addr: 0, length: 0, lkey: 0 }];
        let list = Self::send_wr(src.into(), offset, len, &mut sge)?;
        let mut wr = SendWr::send(op_context, list).flags(flags.send_flags());
        wr.opcode = WrOpcode::SendWithImm;
        wr.imm_data = imm.to_be();
        self.post(wr)
    }

    /// Posts a receive into `len` bytes of `dst` at `offset` (rpma_recv(3)). Receives
    /// are an unordered set: do not rely on which one a message lands in. `dst` `None`
    /// with offset and length 0 is a 0-byte receive.
    ///
    /// Errors: `Inval` for a non-zero 0-byte form; `Provider` if ibv_post_recv(3) fails.
    pub fn recv<'a>(&self, dst: impl Into<Option<&'a MrLocal>>, offset: usize, len: usize, op_context: u64) -> Result<()> {
        post_recv(&self.q.qp, dst.into(), offset, len, op_context)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}
