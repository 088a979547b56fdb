//! The public event (rdma_get_cm_event(3)): the values of the soft connection manager's
//! event or of librdmacm's, which stays held until this one is acknowledged.

use super::channel::{EventChannel, Repr};
use super::id::CmId;
use crate::error::Result;
use crate::event::{ConnParam, EventKind, UdParam};

/// A connection-manager event (`struct rdma_cm_event`). Dropping it acknowledges it
/// (rdma_ack_cm_event(3)).
///
/// Rule (rdma_get_cm_event(3), rdma_ack_cm_event(3)): every event retrieved is
/// acknowledged; rdma_destroy_id(3) waits until the events of its id are, and the
/// private data lives until then (here it is copied out). A CONNECT_REQUEST is accounted
/// to the listening id.
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// 0, a negative errno, or (REJECTED) the reject reason.
    pub status: i32,
    /// The id the event is about (for CONNECT_REQUEST: the new id of the connection).
    pub id: CmId,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmId>,
    /// Connection parameters (connected port spaces): the peer's private data,
    /// zero-padded to the transport field by the soft connection manager, with the
    /// length librdmacm reports over it.
    pub conn: ConnParam,
    /// Datagram parameters (UD ids and multicast).
    pub ud: UdParam,
    /// MULTICAST_JOIN / MULTICAST_ERROR: the context given to the join (librdmacm reports
    /// it as `param.ud.private_data`); 0 otherwise.
    pub mc_context: usize,
    /// The connection manager's event, acknowledged when it drops (after `id` and
    /// `listen_id`: over librdmacm it holds its ids too, so an id's last handle, which
    /// destroys it and waits for its events' acknowledgements, never goes first).
    #[cfg_attr(not(any(feature = "tokio", feature = "async-io")), allow(dead_code))]
    held: Held,
}

/// The event of the connection manager behind an [`Event`] (held for its drop, which
/// acknowledges it; taken by the awaited listener).
#[cfg_attr(not(any(feature = "tokio", feature = "async-io")), allow(dead_code))]
pub(crate) enum Held {
    Soft(crate::event::Event),
    #[cfg(feature = "rdma-core")]
    Native(crate::rdma_core::Event),
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("kind", &self.kind).field("status", &self.status).field("id", &self.id).finish()
    }
}

/// The public event of a connection manager's event `$ev` (the soft one's or librdmacm's:
/// the same fields), its parameters moved out, the event itself held as `$held`.
macro_rules! moved_out {
    ($ev:ident, $held:path) => {
        Event {
            kind: $ev.kind,
            status: $ev.status,
            id: CmId::from($ev.id.clone()),
            listen_id: $ev.listen_id.clone().map(CmId::from),
            conn: std::mem::take(&mut $ev.conn),
            ud: std::mem::take(&mut $ev.ud),
            mc_context: $ev.mc_context,
            held: $held($ev),
        }
    };
}

impl Event {
    /// The soft event `ev`, its parameters moved out.
    pub(crate) fn soft(mut ev: crate::event::Event) -> Event {
        moved_out!(ev, Held::Soft)
    }

    /// librdmacm's event `ev`, its parameters moved out.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn native(mut ev: crate::rdma_core::Event) -> Event {
        moved_out!(ev, Held::Native)
    }

    /// The connection manager's event (the awaited listener makes a request of it).
    #[cfg(any(feature = "tokio", feature = "async-io"))]
    pub(crate) fn into_held(self) -> Held {
        self.held
    }

    /// Acknowledges the event (rdma_ack_cm_event(3); the same as dropping it).
    pub fn ack(self) {}
}

/// Retrieving events (rdma_get_cm_event(3)) from a channel.
impl EventChannel {
    /// Takes the oldest event (rdma_get_cm_event(3)): blocks while none is queued, unless
    /// the fd of a soft channel is non-blocking (then [`crate::Error::WouldBlock`], `EAGAIN`).
    pub fn get_event(&self) -> Result<Event> {
        match &self.repr {
            Repr::Soft(ch) => ch.get_event().map(Event::soft),
            #[cfg(feature = "rdma-core")]
            Repr::Native(ch) => ch.get_event().map(Event::native),
        }
    }

    /// Takes the oldest event if one is queued, never blocking; `None` also when
    /// librdmacm fails otherwise than with `EAGAIN` (then [`EventChannel::get_event`]
    /// returns the error).
    pub fn try_get_event(&self) -> Option<Event> {
        self.take_event().ok().flatten()
    }

    /// The oldest event if one is queued (`Ok(None)` when none is), never blocking; the
    /// error of a librdmacm that fails otherwise.
    pub(crate) fn take_event(&self) -> Result<Option<Event>> {
        match &self.repr {
            Repr::Soft(ch) => Ok(ch.try_get_event().map(Event::soft)),
            #[cfg(feature = "rdma-core")]
            Repr::Native(ch) => Ok(ch.poll_event()?.map(Event::native)),
        }
    }
}
