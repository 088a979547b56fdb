//! The errors of librpma (`RPMA_E_*`), with their C codes.
//!
//! Rule (librpma(7), `<librpma.h>`): every function returns 0 or a negative error code;
//! `RPMA_E_PROVIDER` means libibverbs or librdmacm failed, with the details in `errno`
//! (here carried in [`Error::Provider`]).

/// An error of this crate, one variant per `RPMA_E_*` code of librpma 1.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// `RPMA_E_UNKNOWN` (−100000): an unknown error — e.g. rpma_conn_next_event(3) got a
    /// connection-manager event it does not map.
    #[error("unknown error")]
    Unknown,
    /// `RPMA_E_NOSUPP` (−100001): not supported — e.g. rpma_flush(3) of a type the remote
    /// region or peer does not offer.
    #[error("not supported")]
    NoSupp,
    /// `RPMA_E_PROVIDER` (−100002): the provider (verbs or the connection manager) failed
    /// with this errno.
    #[error("provider error: {}", std::io::Error::from_raw_os_error(*.0))]
    Provider(i32),
    /// `RPMA_E_NOMEM` (−100003): out of memory.
    #[error("out of memory")]
    NoMem,
    /// `RPMA_E_INVAL` (−100004): an invalid argument.
    #[error("invalid argument")]
    Inval,
    /// `RPMA_E_NO_COMPLETION` (−100005): no next completion available
    /// (rpma_cq_get_wc(3), rpma_cq_wait(3)).
    #[error("no next completion available")]
    NoCompletion,
    /// `RPMA_E_NO_EVENT` (−100006): no next event available (rpma_conn_next_event(3),
    /// rpma_ep_next_conn_req(3) on a non-blocking descriptor).
    #[error("no next event available")]
    NoEvent,
    /// `RPMA_E_AGAIN` (−100007): a temporary error (librpma's logging setters; kept for
    /// completeness of the code table).
    #[error("temporary error, try again")]
    Again,
    /// `RPMA_E_SHARED_CHANNEL` (−100008): the CQ uses the connection's shared completion
    /// channel; wait with [`crate::Conn::wait`] (rpma_cq_wait(3)).
    #[error("the completion channel is shared; use Conn::wait")]
    SharedChannel,
    /// `RPMA_E_NOT_SHARED_CHNL` (−100009): the connection has no shared completion channel
    /// (rpma_conn_wait(3), rpma_conn_get_compl_fd(3)).
    #[error("the completion channel is not shared")]
    NotSharedChnl,
}

impl Error {
    /// The C code (`RPMA_E_*`, negative) of the error.
    pub const fn code(self) -> i32 {
        match self {
            Error::Unknown => -100000,
            Error::NoSupp => -100001,
            Error::Provider(_) => -100002,
            Error::NoMem => -100003,
            Error::Inval => -100004,
            Error::NoCompletion => -100005,
            Error::NoEvent => -100006,
            Error::Again => -100007,
            Error::SharedChannel => -100008,
            Error::NotSharedChnl => -100009,
        }
    }

    /// The error of a C code; `Provider` gets errno 0 (the code does not carry it).
    pub const fn from_code(code: i32) -> Option<Error> {
        Some(match code {
            -100000 => Error::Unknown,
            -100001 => Error::NoSupp,
            -100002 => Error::Provider(0),
            -100003 => Error::NoMem,
            -100004 => Error::Inval,
            -100005 => Error::NoCompletion,
            -100006 => Error::NoEvent,
            -100007 => Error::Again,
            -100008 => Error::SharedChannel,
            -100009 => Error::NotSharedChnl,
            _ => return None,
        })
    }

    /// The errno of a provider error.
    pub const fn errno(self) -> Option<i32> {
        match self {
            Error::Provider(e) => Some(e),
            _ => None,
        }
    }

    /// A provider error from an errno, except ENOMEM, which librpma reports as
    /// `RPMA_E_NOMEM` where an allocation failed (rpma_peer_new(3), rpma_mr_reg(3)).
    pub(crate) fn alloc(errno: i32) -> Error {
        if errno == libc::ENOMEM {
            Error::NoMem
        } else {
            Error::Provider(errno)
        }
    }
}

impl From<rverbs::Error> for Error {
    fn from(e: rverbs::Error) -> Self {
        Error::Provider(e.errno())
    }
}

impl From<rverbs::PostError> for Error {
    fn from(e: rverbs::PostError) -> Self {
        Error::Provider(e.error.errno())
    }
}

impl From<rverbs_cm::Error> for Error {
    fn from(e: rverbs_cm::Error) -> Self {
        Error::Provider(e.errno())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Provider(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// The result of this crate's functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;
