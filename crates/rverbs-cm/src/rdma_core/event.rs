//! Events of librdmacm (rdma_get_cm_event(3)) as the soft [`crate::Event`]'s values
//! ([`EventKind`], [`ConnParam`], [`UdParam`]), acknowledged (rdma_ack_cm_event(3)) when
//! dropped.

use std::sync::Arc;

use rverbs_abi::rdma_cm::*;

use super::channel::{ChannelInner, EventChannel};
use super::id::CmId;
use super::library::{last_errno, Rdmacm};
use crate::error::{Error, Result};
use crate::event::{ConnParam, EventKind, UdParam};

/// An event of librdmacm, the backend's [`crate::Event`]: the same fields, copied out of
/// the `struct rdma_cm_event`, which is acknowledged when this value is dropped (or by
/// [`Event::ack`]); rdma_destroy_id(3) of its id waits for that, so the event holds its
/// id.
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// 0, a negative errno, or (REJECTED) the reject reason.
    pub status: i32,
    /// The id the event is about (for CONNECT_REQUEST: the new id of the connection).
    pub id: CmId,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmId>,
    /// Connection parameters (connected port spaces): the peer's private data with the
    /// length librdmacm reports.
    pub conn: ConnParam,
    /// Datagram parameters (UD ids).
    pub ud: UdParam,
    /// MULTICAST_JOIN / MULTICAST_ERROR: the context given to the join (librdmacm hands
    /// it back as `param.ud.private_data`, with length 0); 0 otherwise.
    pub mc_context: usize,
    raw: *mut rdma_cm_event,
    lib: Arc<Rdmacm>,
}

// SAFETY: `raw` is only acknowledged (once, in Drop); librdmacm's calls are thread-safe.
unsafe impl Send for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("kind", &self.kind).field("status", &self.status).field("id", &self.id).finish()
    }
}

/// The [`EventKind`] of an `enum rdma_cm_event_type` value.
fn kind(raw: rdma_cm_event_type) -> Option<EventKind> {
    use EventKind as K;
    Some(match raw {
        RDMA_CM_EVENT_ADDR_RESOLVED => K::AddrResolved,
        RDMA_CM_EVENT_ADDR_ERROR => K::AddrError,
        RDMA_CM_EVENT_ROUTE_RESOLVED => K::RouteResolved,
        RDMA_CM_EVENT_ROUTE_ERROR => K::RouteError,
        RDMA_CM_EVENT_CONNECT_REQUEST => K::ConnectRequest,
        RDMA_CM_EVENT_CONNECT_RESPONSE => K::ConnectResponse,
        RDMA_CM_EVENT_CONNECT_ERROR => K::ConnectError,
        RDMA_CM_EVENT_UNREACHABLE => K::Unreachable,
        RDMA_CM_EVENT_REJECTED => K::Rejected,
        RDMA_CM_EVENT_ESTABLISHED => K::Established,
        RDMA_CM_EVENT_DISCONNECTED => K::Disconnected,
        RDMA_CM_EVENT_DEVICE_REMOVAL => K::DeviceRemoval,
        RDMA_CM_EVENT_MULTICAST_JOIN => K::MulticastJoin,
        RDMA_CM_EVENT_MULTICAST_ERROR => K::MulticastError,
        RDMA_CM_EVENT_ADDR_CHANGE => K::AddrChange,
        RDMA_CM_EVENT_TIMEWAIT_EXIT => K::TimewaitExit,
        _ => return None,
    })
}

/// `len` bytes at `data` (none when NULL).
///
/// # Safety
///
/// `data` is NULL or readable for `len` bytes.
unsafe fn bytes(data: *const core::ffi::c_void, len: u8) -> Vec<u8> {
    if data.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }.to_vec()
}

impl Event {
    /// The event librdmacm handed out as `raw` on the channel `ch`, copied; `raw` is
    /// acknowledged when the value is dropped (or here, if it cannot be made).
    ///
    /// # Safety
    ///
    /// `raw` came from rdma_get_cm_event on `ch` and is not yet acknowledged.
    pub(super) unsafe fn from_raw(ch: &Arc<ChannelInner>, raw: *mut rdma_cm_event) -> Result<Event> {
        let lib = ch.lib.clone();
        // SAFETY: the caller's contract: a live event; its ids are live until it is
        // acknowledged, and a CONNECT_REQUEST's new id is on this channel.
        let made = unsafe {
            let e = &*raw;
            let kind = kind(e.event).ok_or(Error::Os(std::io::Error::from_raw_os_error(libc::EPROTO)));
            kind.and_then(|kind| {
                let id = CmId::of_raw(ch, e.id)?;
                let listen_id = if e.listen_id.is_null() { None } else { Some(CmId::of_raw(ch, e.listen_id)?) };
                let mut conn = ConnParam::default();
                let mut ud = UdParam::default();
                let mut mc_context = 0;
                if matches!(kind, EventKind::MulticastJoin | EventKind::MulticastError) {
                    // The pointer is the join's context, not private data.
                    let u = &e.param.ud;
                    mc_context = u.private_data as usize;
                    ud = UdParam {
                        private_data: Vec::new(),
                        ah_attr: rverbs::c_abi::ah_attr_from_c(&u.ah_attr),
                        qp_num: u.qp_num,
                        qkey: u.qkey,
                    };
                } else if id.ps().is_datagram() {
                    let u = &e.param.ud;
                    ud = UdParam {
                        private_data: bytes(u.private_data, u.private_data_len),
                        ah_attr: rverbs::c_abi::ah_attr_from_c(&u.ah_attr),
                        qp_num: u.qp_num,
                        qkey: u.qkey,
                    };
                } else {
                    let c = &e.param.conn;
                    conn = ConnParam {
                        private_data: bytes(c.private_data, c.private_data_len),
                        responder_resources: c.responder_resources,
                        initiator_depth: c.initiator_depth,
                        flow_control: c.flow_control,
                        retry_count: c.retry_count,
                        rnr_retry_count: c.rnr_retry_count,
                        srq: c.srq,
                        qp_num: c.qp_num,
                    };
                }
                Ok((kind, e.status, id, listen_id, conn, ud, mc_context))
            })
        };
        match made {
            Ok((kind, status, id, listen_id, conn, ud, mc_context)) => {
                Ok(Event { kind, status, id, listen_id, conn, ud, mc_context, raw, lib })
            }
            Err(err) => {
                // SAFETY: `raw` is live and acknowledged once, here.
                unsafe { (lib.sym.rdma_ack_cm_event)(raw) };
                Err(err)
            }
        }
    }

    /// Acknowledges the event (the same as dropping it).
    pub fn ack(self) {}
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: `raw` came from rdma_get_cm_event and is acknowledged once, here, while
        // its ids are still held (the fields drop after this).
        unsafe { (self.lib.sym.rdma_ack_cm_event)(self.raw) };
    }
}

/// Retrieving events (rdma_get_cm_event(3)) from a channel.
impl EventChannel {
    /// Waits for the next event (rdma_get_cm_event(3)).
    pub fn get_event(&self) -> Result<Event> {
        loop {
            if let Some(ev) = self.poll_event()? {
                return Ok(ev);
            }
            let mut fds = [rustix::event::PollFd::from_borrowed_fd(self.fd(), rustix::event::PollFlags::IN)];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The next event if one is queued.
    pub fn try_get_event(&self) -> Option<Event> {
        self.poll_event().ok().flatten()
    }

    /// The next event if one is queued; `Ok(None)` when none is (`EAGAIN`), an error
    /// when librdmacm fails otherwise.
    pub(crate) fn poll_event(&self) -> Result<Option<Event>> {
        let mut raw: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live; `raw` is a valid out-pointer.
        if unsafe { (self.inner.lib.sym.rdma_get_cm_event)(self.inner.ch, &mut raw) } != 0 {
            return match last_errno() {
                Error::Os(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(None),
                e => Err(e),
            };
        }
        // SAFETY: librdmacm handed out `raw`, not yet acknowledged.
        unsafe { Event::from_raw(&self.inner, raw) }.map(Some)
    }

}
