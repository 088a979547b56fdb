//! Errors of the connection manager, each with the errno librdmacm reports.

pub use crate::rule::Rule;

use crate::event::EventKind;

/// The steps of a connection, named in errors ([`Error::Handshake`],
/// [`Error::TimedOut`]).
pub(crate) const CONNECTING: &str = "connecting to";
pub(crate) const ACCEPTING: &str = "accepting from";

/// The other side of a connection as an error names it: its address, if known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub Option<std::net::SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => write!(f, "{a}"),
            None => f.write_str("(no address)"),
        }
    }
}

/// What event `event` with `status` means to someone who waited for another.
fn describe(event: EventKind, status: i32) -> String {
    let errno = |s: i32| std::io::Error::from_raw_os_error(-s);
    match event {
        // IBTA Table 112's reasons that rdma_cm reports most (rdma_cm(7): the status of
        // REJECTED is the reject reason).
        EventKind::Rejected => match status {
            8 => "rejected: nobody listens on that port (reason 8, invalid service ID)".into(),
            28 => "rejected by the application (reason 28, consumer reject)".into(),
            1 => "rejected: the peer has no resources (reason 1)".into(),
            r => format!("rejected (reason {r})"),
        },
        EventKind::Unreachable if status < 0 => format!("unreachable: {}", errno(status)),
        EventKind::Unreachable => format!("unreachable (status {status})"),
        EventKind::AddrError => format!("address resolution failed: {}", errno(status.min(-1))),
        EventKind::RouteError => format!("route resolution failed: {}", errno(status.min(-1))),
        EventKind::ConnectError => format!("the connection failed: {}", errno(status.min(-1))),
        other if status < 0 => format!("{other:?}: {}", errno(status)),
        other => format!("{other:?} (status {status})"),
    }
}

/// What a connection-manager call can fail with. [`Error::errno`] is the value
/// rdma_cm(7) functions leave in `errno` when they return -1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument or the id's state does not allow the call (`EINVAL`): the rule it
    /// breaks, with the values that broke it.
    #[error("{verb}: {rule}")]
    Invalid {
        /// The call that refused.
        verb: &'static str,
        /// The rule broken.
        rule: Rule,
    },
    /// The address and port are bound by another id (`EADDRINUSE`).
    #[error("address already in use")]
    AddrInUse,
    /// The address is not an address of this host (`EADDRNOTAVAIL`).
    #[error("address not available on this host")]
    AddrNotAvail,
    /// The feature is not implemented (`ENOSYS`).
    #[error("{what} is not implemented")]
    NotImplemented {
        /// What.
        what: &'static str,
    },
    /// A step of a connection that the Rust helpers ([`crate::conn`]) wait for ended with
    /// another event: the peer rejected or could not be reached, an address or route did
    /// not resolve. The errno is the one the event stands for: `ECONNREFUSED` for a
    /// reject, the event's own status where it carries one, else `ECONNABORTED`.
    #[error("{step} {peer}: {}", describe(*.event, *.status))]
    Handshake {
        /// What was being done ("connecting to", "accepting from").
        step: &'static str,
        /// The other side's address.
        peer: Peer,
        /// The event that came instead of the one awaited.
        event: EventKind,
        /// Its status (rdma_cm(7): a reject reason, or a negative errno).
        status: i32,
    },
    /// A step of a connection waited for its event longer than the caller allowed
    /// (`ETIMEDOUT`).
    #[error("{step} {peer}: no {awaited:?} within {waited:?}")]
    TimedOut {
        /// What was being done.
        step: &'static str,
        /// The other side's address.
        peer: Peer,
        /// The event awaited.
        awaited: EventKind,
        /// How long.
        waited: std::time::Duration,
    },
    /// No event is queued and the channel's fd is non-blocking (`EAGAIN`).
    #[error("no event queued")]
    WouldBlock,
    /// The device refused an operation.
    #[error(transparent)]
    Verbs(#[from] rverbs::Error),
    /// An operating-system call failed.
    #[error(transparent)]
    Os(#[from] std::io::Error),
}

impl Error {
    /// The errno of this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Invalid { .. } => libc::EINVAL,
            Error::AddrInUse => libc::EADDRINUSE,
            Error::AddrNotAvail => libc::EADDRNOTAVAIL,
            Error::NotImplemented { .. } => libc::ENOSYS,
            Error::WouldBlock => libc::EAGAIN,
            Error::Handshake { event: EventKind::Rejected, .. } => libc::ECONNREFUSED,
            Error::Handshake { status, .. } if *status < 0 => -status,
            Error::Handshake { .. } => libc::ECONNABORTED,
            Error::TimedOut { .. } => libc::ETIMEDOUT,
            Error::Verbs(e) => e.errno(),
            Error::Os(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(crate) const fn invalid(verb: &'static str, rule: Rule) -> Self {
        Error::Invalid { verb, rule }
    }

    /// The rule broken, for an [`Error::Invalid`].
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::Invalid { rule, .. } => Some(*rule),
            _ => None,
        }
    }
}

/// A refused post (ibv_post_send(3), ibv_post_recv(3)) in a [`crate::connect_with`] or
/// [`crate::Request::accept_with`] preparation: the device's error of the refused request.
impl From<rverbs::PostError> for Error {
    fn from(e: rverbs::PostError) -> Self {
        Error::Verbs(e.error)
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        if e == rustix::io::Errno::AGAIN {
            Error::WouldBlock
        } else {
            Error::Os(std::io::Error::from_raw_os_error(e.raw_os_error()))
        }
    }
}

/// Result of a connection-manager call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
