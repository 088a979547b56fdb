//! Errors of the connection manager, each with the errno librdmacm reports.

pub use crate::rule::Rule;

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
