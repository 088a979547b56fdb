//! Completion channels (ibv_create_comp_channel(3)) and the events read from them
//! (ibv_get_cq_event(3), ibv_ack_cq_events(3)).

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, Weak};

use rverbs_abi::{ibv_comp_channel, ibv_cq};

use super::context::{Context, ContextInner};
use super::library::{check, last_errno};
use crate::error::{Error, Result};

pub(super) struct ChannelInner {
    pub(super) channel: *mut ibv_comp_channel,
    pub(super) ctx: Arc<ContextInner>,
    /// The CQs reporting here, by their `struct ibv_cq` address (what
    /// ibv_get_cq_event(3) returns).
    cqs: Mutex<HashMap<usize, Weak<dyn Any + Send + Sync>>>,
    destroyed: bool,
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

    fn destroy(&mut self) -> Result<()> {
        self.destroyed = true;
        // SAFETY: `channel` came from ibv_create_comp_channel; no CQ uses it (each holds
        // an Arc of this value); destroyed once.
        check(unsafe { (self.ctx.verbs.sym.ibv_destroy_comp_channel)(self.channel) })
    }
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.destroy() {
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
        Ok(CompChannel {
            inner: Arc::new(ChannelInner { channel, ctx: c.clone(), cqs: Mutex::new(HashMap::new()), destroyed: false }),
        })
    }
}

impl CompChannel {
    /// The channel's file descriptor (`struct ibv_comp_channel` `fd`), to poll or make
    /// non-blocking.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd belongs to the channel, open while it lives (as long as `self`).
        unsafe { BorrowedFd::borrow_raw((*self.inner.channel).fd) }
    }

    /// Destroys the channel now (ibv_destroy_comp_channel(3)) and returns its error;
    /// `EBUSY` without destroying while another handle or a CQ holds it.
    pub fn destroy(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.destroy(),
            Err(_) => Err(Error::Busy { what: "completion channel" }),
        }
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
