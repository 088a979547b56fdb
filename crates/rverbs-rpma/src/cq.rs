//! Completion queues (`struct rpma_cq`) and work completions.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use rverbs::{CompChannel, Context, CqInit, WcFlags, WcOpcode, WcStatus};

use crate::error::{Error, Result};
use crate::util;

/// A work completion (`struct ibv_wc`, the same 48-byte layout), with typed accessors.
///
/// Rule (rpma_cq_get_wc(3)): "If the status of a completion is not equal to
/// IBV_WC_SUCCESS then only the following attributes are valid: wr_id, status, qp_num,
/// and vendor_err." [`Wc::wr_id`], [`Wc::status`], [`Wc::qp_num`] and [`Wc::vendor_err`]
/// always answer; every other accessor returns `None` for an error completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct Wc(rverbs::Wc);

impl Wc {
    /// The operation context given when the operation was posted (`wr_id`; always valid).
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id()
    }

    /// The same as [`Wc::wr_id`]: librpma passes `op_context` as the work request id.
    pub fn op_context(&self) -> u64 {
        self.0.wr_id()
    }

    /// The status (always valid).
    pub fn status(&self) -> WcStatus {
        self.0.status()
    }

    /// Whether the status is `IBV_WC_SUCCESS`.
    pub fn is_success(&self) -> bool {
        self.0.is_success()
    }

    /// The number of the local QP the completion belongs to (always valid).
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num()
    }

    /// The vendor error syndrome (always valid).
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err()
    }

    /// The completed operation (success only).
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.0.opcode()
    }

    /// Bytes received or read (success only).
    pub fn byte_len(&self) -> Option<u32> {
        self.0.byte_len()
    }

    /// The completion flags (success only).
    pub fn wc_flags(&self) -> Option<WcFlags> {
        self.0.wc_flags()
    }

    /// The immediate data, in host byte order: the `imm` the sender gave to
    /// rpma_send_with_imm(3) or rpma_write_with_imm(3) (librpma sends `htonl(imm)`; a C
    /// receiver reads `ntohl(wc.imm_data)`). Success with `IBV_WC_WITH_IMM` only.
    pub fn imm_data(&self) -> Option<u32> {
        self.0.imm_data().map(u32::from_be)
    }

    /// The verbs completion (with `imm_data` in network byte order, as in C).
    pub fn as_verbs(&self) -> &rverbs::Wc {
        &self.0
    }
}

/// A completion queue of a connection (`struct rpma_cq`): a verbs CQ and the completion
/// channel it reports to (its own, or the connection's shared one). The CQ is armed
/// (`ibv_req_notify_cq(cq, 0)`) when created and again by every [`Cq::wait`].
#[derive(Debug)]
pub struct Cq {
    cq: rverbs::Cq,
    channel: CompChannel,
    shared: bool,
}

impl Cq {
    /// Creates a CQ of `size` entries reporting to `shared` or to a channel of its own,
    /// and arms it (librpma's `rpma_cq_new`).
    pub(crate) fn new(ctx: &Context, size: u32, shared: Option<&CompChannel>) -> Result<Cq> {
        let channel = match shared {
            Some(c) => c.clone(),
            None => ctx.create_comp_channel()?,
        };
        let cq = ctx.create_cq(&CqInit::new(size).channel(&channel))?;
        let cq = Cq { cq, channel, shared: shared.is_some() };
        cq.cq.req_notify(false)?;
        Ok(cq)
    }

    /// The verbs CQ.
    pub fn as_verbs(&self) -> &rverbs::Cq {
        &self.cq
    }

    /// The descriptor of the CQ's completion channel (rpma_cq_get_fd(3)); the shared
    /// channel's if the connection shares one.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.channel.fd()
    }

    /// Waits for the CQ's next completion event, acknowledges it and re-arms the CQ
    /// (rpma_cq_wait(3)). It does not poll: collect the completions with
    /// [`Cq::get_wc`] afterwards (there may be none: a completion that arrived before
    /// the CQ was re-armed was already reported).
    ///
    /// Errors: `SharedChannel` if the CQ uses the connection's shared channel (use
    /// [`crate::Conn::wait`]); `NoCompletion` if ibv_get_cq_event(3) fails (e.g. the fd
    /// was made non-blocking and no event is queued); `Provider` if re-arming fails.
    pub fn wait(&self) -> Result<()> {
        if self.shared {
            return Err(Error::SharedChannel);
        }
        let ev = self.channel.get_cq_event().map_err(|_| Error::NoCompletion)?;
        ev.ack();
        self.cq.req_notify(false).map_err(Error::from)
    }

    /// As [`Cq::wait`], waiting at most `timeout` for the event (an rverbs extension).
    ///
    /// Errors: those of [`Cq::wait`]; `NoCompletion` when the timeout passes.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        if self.shared {
            return Err(Error::SharedChannel);
        }
        if !util::wait_readable(self.channel.fd(), Some(timeout))? {
            return Err(Error::NoCompletion);
        }
        self.wait()
    }

    /// Polls the CQ (rpma_cq_get_wc(3)): fills the front of `wc` with the oldest
    /// available completions, at most `wc.len()` (all available ones if fewer), exactly
    /// as ibv_poll_cq(3) does, and returns how many it got (C's `num_entries_got`; in
    /// C it may be NULL only when `num_entries` is 1 — [`Cq::get_wc_one`] is that form).
    ///
    /// "All operations generate completions on error. The operations posted with the
    /// RPMA_F_COMPLETION_ALWAYS flag also generate completions on success." On the main
    /// CQ of a connection that has a receive CQ, receive completions (`IBV_WC_RECV`,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`) never appear: they go to the receive CQ
    /// ([`crate::Conn::get_rcq`]). Of an error completion only `wr_id`, `status`,
    /// `qp_num` and `vendor_err` are valid ([`Wc`]).
    ///
    /// Errors: `Inval` if `wc` is empty (`num_entries < 1`); `NoCompletion` if no
    /// completion is available; `Provider` if ibv_poll_cq(3) fails (a CQ overrun:
    /// errno EIO). `Unknown` (ibv_poll_cq(3) failing without a provider error, or
    /// returning more than asked) cannot happen with rverbs: its poll always carries an
    /// errno and writes into the slice it is given.
    pub fn get_wc(&self, wc: &mut [Wc]) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::Inval);
        }
        // One poll in chunks of a stack buffer: a chunk that comes back short means the
        // CQ had no more, as a single ibv_poll_cq(3) of the whole array would say.
        let mut raw = [rverbs::Wc::default(); 32];
        let mut got = 0;
        while got < wc.len() {
            let want = (wc.len() - got).min(raw.len());
            let n = match self.cq.poll(&mut raw[..want]) {
                Ok(n) => n,
                Err(e) if got == 0 => return Err(e.into()),
                // Completions already removed are the caller's; the failure shows at
                // the next call.
                Err(_) => break,
            };
            if n > want {
                return Err(Error::Unknown);
            }
            for (dst, src) in wc[got..].iter_mut().zip(&raw[..n]) {
                *dst = Wc(*src);
            }
            got += n;
            if n < want {
                break;
            }
        }
        if got == 0 {
            return Err(Error::NoCompletion);
        }
        Ok(got)
    }

    /// The oldest available completion (rpma_cq_get_wc(3) with `num_entries` 1 and
    /// `num_entries_got` NULL).
    ///
    /// Errors: those of [`Cq::get_wc`].
    pub fn get_wc_one(&self) -> Result<Wc> {
        let mut wc = [Wc::default()];
        self.get_wc(&mut wc)?;
        Ok(wc[0])
    }

    pub(crate) fn is(&self, cq: &rverbs::Cq) -> bool {
        self.cq.same_as(cq)
    }

    pub(crate) fn destroy(&self) -> Result<()> {
        self.cq.destroy()?;
        if !self.shared {
            self.channel.destroy()?;
        }
        Ok(())
    }
}
