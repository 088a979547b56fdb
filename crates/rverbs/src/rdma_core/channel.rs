//! Completion channels (ibv_create_comp_channel(3)) and the events read from them
//! (ibv_get_cq_event(3), ibv_ack_cq_events(3)).

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use rverbs_abi::{ibv_comp_channel, ibv_cq};

use super::context::{Context, ContextInner};
use super::library::{check, last_errno};
use super::life::Life;
use crate::error::{Error, Result};

pub(super) struct ChannelInner {
    pub(super) channel: *mut ibv_comp_channel,
    pub(super) ctx: Arc<ContextInner>,
    /// The CQs reporting here, by their `struct ibv_cq` address (what
    /// ibv_get_cq_event(3) returns).
    cqs: Mutex<HashMap<usize, Weak<dyn Any + Send + Sync>>>,
    /// A duplicate of the channel's fd, what [`CompChannel::fd`] lends: open as long as
    /// any handle lives, even after the channel is destroyed (which closes its own).
    fd: OwnedFd,
    /// Its CQs are its users.
    pub(super) life: Life,
}

// SAFETY: `channel` is owned by this value; libibverbs' verbs are thread-safe; the map is
// behind a Mutex.
unsafe impl Send for ChannelInner {}
// SAFETY: as for Send.
unsafe impl Sync for ChannelInner {}

impl ChannelInner {
    /// Records the CQ object (`cq`'s `CqInner`) that events for `cq` belong to.
    pub(super) fn register(&self, cq: *mut ibv_cq, inner: Weak<dyn Any + Send + Sync>) {
        self.cqs.lock().unwrap_or_else(|p| p.into_inner()).insert(cq as usize, inner);
    }

    /// The CQ object of `cq`, unless it is gone or being destroyed.
    pub(super) fn lookup(&self, cq: *mut ibv_cq) -> Option<Arc<dyn Any + Send + Sync>> {
        self.cqs.lock().unwrap_or_else(|p| p.into_inner()).get(&(cq as usize)).and_then(Weak::upgrade)
    }

    pub(super) fn forget(&self, cq: *mut ibv_cq) {
        self.cqs.lock().unwrap_or_else(|p| p.into_inner()).remove(&(cq as usize));
    }

    /// ibv_destroy_comp_channel(3).
    ///
    /// # Safety
    ///
    /// Called once, with no CQ of the channel left and no call on it in progress (under
    /// [`Life::destroy`], or in the last drop).
    unsafe fn destroy_raw(&self) -> Result<()> {
        // SAFETY: `channel` came from ibv_create_comp_channel; the caller's contract.
        check(unsafe { (self.ctx.verbs.sym.ibv_destroy_comp_channel)(self.channel) })
    }
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if !self.life.is_destroyed() {
            // SAFETY: the last handle and CQ are gone (each holds an Arc of this value);
            // not destroyed yet.
            if let Err(e) = unsafe { self.destroy_raw() } {
                tracing::warn!("rdma_core: ibv_destroy_comp_channel failed: {e}");
            }
        }
    }
}

/// A completion channel (ibv_create_comp_channel(3)): a file descriptor that becomes
/// readable when an armed CQ of it gets a completion.
#[derive(Clone)]
pub struct CompChannel {
    pub(super) inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel").field("fd", &self.fd()).finish()
    }
}

impl Context {
    /// Creates a completion channel (ibv_create_comp_channel(3)).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let c = &self.inner;
        // SAFETY: the context is open.
        let channel = unsafe { (c.verbs.sym.ibv_create_comp_channel)(c.ctx) };
        if channel.is_null() {
            return Err(last_errno());
        }
        // SAFETY: the channel's fd is open while the channel is.
        let fd = unsafe { BorrowedFd::borrow_raw((*channel).fd) }.try_clone_to_owned();
        let fd = match fd {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: created above, used by nothing yet.
                unsafe { (c.verbs.sym.ibv_destroy_comp_channel)(channel) };
                return Err(Error::Os(e));
            }
        };
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                channel,
                ctx: c.clone(),
                cqs: Mutex::new(HashMap::new()),
                fd,
                life: Life::new("completion channel"),
            }),
        })
    }
}

impl CompChannel {
    /// The backend's channel behind a public [`crate::CompChannel`] (`None` for a soft
    /// channel).
    pub fn of(ch: &crate::CompChannel) -> Option<&CompChannel> {
        ch.native().and_then(|c| c.as_any().downcast_ref::<CompChannel>())
    }

    /// The channel's file descriptor, to poll or make non-blocking: a duplicate of
    /// `struct ibv_comp_channel` `fd` (one open file, so readable and non-blocking
    /// together), open as long as the handle, even after the channel is destroyed.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }

    /// Destroys the channel now (ibv_destroy_comp_channel(3)) and returns its error:
    /// `EBUSY` while a CQ of it is not destroyed, `EINVAL` if it already is. Any handle
    /// may destroy it; the others' calls are then `EINVAL`. A refusal leaves the channel
    /// usable. Dropping the last handle and CQ destroys too, logging an error.
    pub fn destroy(&self) -> Result<()> {
        // SAFETY: under the channel's exclusive lock, once (Life::destroy).
        self.inner.life.destroy(|| unsafe { self.inner.destroy_raw() })
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
