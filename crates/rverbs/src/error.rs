//! The one error type of the `rverbs` API.
//!
//! Every variant is API misuse or a resource limit, reported at once with the errno
//! rdma-core would give. Faults caused by a peer or the network are never an `Err`:
//! they become completion statuses (see `rverbs_proto::violation`).

use rverbs_proto::state::TransitionError;
use rverbs_proto::verbs::QpState;

pub use crate::rule::Rule;

/// An error returned by a verb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is out of range or inconsistent (`EINVAL`).
    #[error("{verb}: invalid argument: {rule}")]
    Invalid {
        /// The verb that refused.
        verb: &'static str,
        /// The rule the argument broke, with the values that broke it.
        rule: Rule,
    },
    /// The soft device does not implement this verb or option (`EOPNOTSUPP`).
    #[error("{verb}: not supported by the rverbs device ({what})")]
    Unsupported {
        /// The verb that refused.
        verb: &'static str,
        /// The unsupported feature.
        what: &'static str,
    },
    /// A value exceeds a device or object limit (`EINVAL`).
    #[error("{verb}: {what} {got} exceeds the limit {max}")]
    Limit {
        /// The verb that refused.
        verb: &'static str,
        /// The limited quantity.
        what: &'static str,
        /// The limit.
        max: u64,
        /// The requested value.
        got: u64,
    },
    /// A work request names more scatter/gather entries than the queue allows (`EINVAL`).
    #[error("too many scatter/gather entries: {got} > max {max}")]
    TooManySge {
        /// The queue's `max_sge`.
        max: u32,
        /// Entries in the work request.
        got: u32,
    },
    /// A work queue is full (`ENOMEM`).
    #[error("{verb}: the queue is full ({max} work requests outstanding)")]
    QueueFull {
        /// The verb that refused.
        verb: &'static str,
        /// Capacity of the queue.
        max: u32,
    },
    /// A work-request builder ran out of room: the queue, the inline area or the
    /// scatter list (`ENOSPC`, as rxe's `ibv_wr_*` setters report).
    #[error("{verb}: no space: {why}")]
    NoSpace {
        /// The verb that refused.
        verb: &'static str,
        /// What is full.
        why: &'static str,
    },
    /// The QP state does not allow the verb (`EINVAL`).
    #[error("{verb} is not allowed in QP state {state:?}")]
    QpStateForbids {
        /// The verb that refused.
        verb: &'static str,
        /// The QP's state.
        state: QpState,
    },
    /// `modify_qp` asked for a transition or attribute mask the state table forbids
    /// (`EINVAL`).
    #[error("modify_qp: {0:?}")]
    Transition(TransitionError),
    /// The objects belong to different protection domains (`EPERM`).
    #[error("{verb}: {why}")]
    PermissionDenied {
        /// The verb that refused.
        verb: &'static str,
        /// Which rule was broken.
        why: &'static str,
    },
    /// The object is still in use (`EBUSY`).
    #[error("{what} is still in use")]
    Busy {
        /// What is in use.
        what: &'static str,
    },
    /// The object was destroyed (`EINVAL`).
    #[error("the {what} was destroyed")]
    Destroyed {
        /// What was destroyed.
        what: &'static str,
    },
    /// The completion queue overran and is in the error state (`EIO`).
    #[error("the completion queue overran and is in the error state")]
    CqOverrun,
    /// Memory the verb must reach is not mapped with the access it needs (`EFAULT`, as
    /// the kernel's page pinning reports in ibv_reg_mr(3)).
    #[error("{verb}: [{addr:#x}, +{len}) is not mapped with the access asked")]
    BadAddress {
        /// The verb that refused.
        verb: &'static str,
        /// First address of the range.
        addr: u64,
        /// Length of the range in bytes.
        len: u64,
    },
    /// A range lies outside the object the verb reaches (`EFAULT`): an
    /// `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm` past the device memory (mlx5's
    /// `mlx5_access_dm` in rdma-core's providers/mlx5/verbs.c checks the range first,
    /// EFAULT), an `ibv_advise_mr(3)` range outside its region ("out of the MR bounds").
    #[error("{verb}: [{offset}, +{len}) lies outside the {size} bytes it names")]
    OutOfRange {
        /// The verb that refused.
        verb: &'static str,
        /// Offset (or address) of the range in the object.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
        /// Size of the object in bytes.
        size: u64,
    },
    /// A key names no object of the kind the verb needs (`ENOENT`): ibv_advise_mr(3)
    /// with an lkey that names no on-demand region ("the providing lkeys aren't
    /// consistent with the MR's"; the kernel's mlx5 `get_prefetchable_mr` looks the key
    /// up among on-demand keys only).
    #[error("{verb}: key {key:#x} names no {what}")]
    NoSuchKey {
        /// The verb that refused.
        verb: &'static str,
        /// The key.
        key: u32,
        /// What the key had to name.
        what: &'static str,
    },
    /// A range's end, rounded up to a page, wraps the address space (`EOVERFLOW`): an
    /// on-demand registration (ibv_reg_mr(3) IBV_ACCESS_ON_DEMAND), as the kernel's
    /// `ib_init_umem_odp` (drivers/infiniband/core/umem_odp.c) reports it (an empty
    /// range at address 0 counts: its end rounds to 0).
    #[error("{verb}: the range {addr:#x} + {len} wraps the address space")]
    Overflow {
        /// The verb that refused.
        verb: &'static str,
        /// Start of the range.
        addr: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// The destination's next hop does not answer (the errno of the neighbour
    /// resolution: `ETIMEDOUT`, `EHOSTUNREACH` or `ENETUNREACH`), as the kernel's RoCE
    /// providers report at ibv_modify_qp(3) to RTR.
    #[error("{verb}: RoCE route to {dgid} not resolved: nobody answers for its next hop ({})", std::io::Error::from_raw_os_error(*errno))]
    Unreachable {
        /// The verb that refused.
        verb: &'static str,
        /// The destination GID.
        dgid: crate::gid::Gid,
        /// The errno.
        errno: i32,
    },
    /// A resource is exhausted (`ENOMEM`).
    #[error("{what} exhausted")]
    Exhausted {
        /// What ran out.
        what: &'static str,
    },
    /// The resource does not exist yet and was not asked to be created, or the verb
    /// cannot go on now and changed nothing: a later call may succeed (`EAGAIN`).
    #[error("{verb}: {why}")]
    Again {
        /// The verb that refused.
        verb: &'static str,
        /// What is missing.
        why: &'static str,
    },
    /// A non-blocking read found no event (`EAGAIN`).
    #[error("no event is pending")]
    WouldBlock,
    /// The fault plan made the verb fail (`RVERBS_FAULTS` `fail=…`, or
    /// [`crate::fault_plan::install`]; docs/fault-injection.md).
    #[error("{verb}: {name} injected by the fault plan (item `{item}`)")]
    Injected {
        /// The verb that failed (`reg_mr`).
        verb: &'static str,
        /// The errno it returns.
        errno: i32,
        /// Its name (`ENOMEM`).
        name: &'static str,
        /// The plan item that chose this call.
        item: String,
    },
    /// The device reported a fatal error (IBV_EVENT_DEVICE_FATAL, injected by the fault
    /// plan) and is dead for this process: creating and posting verbs fail (`EIO`);
    /// ibv_get_async_event(3): the application must destroy its resources and close the
    /// context, which still works.
    #[error("{verb}: the device had a fatal error (IBV_EVENT_DEVICE_FATAL); destroy its resources and close the context")]
    DeviceFatal {
        /// The verb that failed (`post_send`).
        verb: &'static str,
    },
    /// An operating-system call failed.
    #[error(transparent)]
    Os(#[from] std::io::Error),
    /// An internal invariant broke: a bug in rverbs (`EIO`).
    #[error("internal error: {0}")]
    Bug(&'static str),
}

impl Error {
    /// The errno rdma-core reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Invalid { .. } => libc::EINVAL,
            Error::Unsupported { .. } => libc::EOPNOTSUPP,
            Error::Limit { .. } => libc::EINVAL,
            Error::TooManySge { .. } => libc::EINVAL,
            Error::QueueFull { .. } => libc::ENOMEM,
            Error::NoSpace { .. } => libc::ENOSPC,
            Error::QpStateForbids { .. } => libc::EINVAL,
            Error::Transition(_) => libc::EINVAL,
            Error::PermissionDenied { .. } => libc::EPERM,
            Error::Busy { .. } => libc::EBUSY,
            Error::Destroyed { .. } => libc::EINVAL,
            Error::CqOverrun => libc::EIO,
            Error::BadAddress { .. } => libc::EFAULT,
            Error::OutOfRange { .. } => libc::EFAULT,
            Error::NoSuchKey { .. } => libc::ENOENT,
            Error::Overflow { .. } => libc::EOVERFLOW,
            Error::Unreachable { errno, .. } => *errno,
            Error::Exhausted { .. } => libc::ENOMEM,
            Error::Again { .. } => libc::EAGAIN,
            Error::WouldBlock => libc::EAGAIN,
            Error::Injected { errno, .. } => *errno,
            Error::DeviceFatal { .. } => libc::EIO,
            Error::Os(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Bug(_) => libc::EIO,
        }
    }

    pub(crate) const fn invalid(verb: &'static str, rule: Rule) -> Self {
        Error::Invalid { verb, rule }
    }

    pub(crate) const fn unsupported(verb: &'static str, what: &'static str) -> Self {
        Error::Unsupported { verb, what }
    }

    /// A method the rdma-core backend does not offer, called on one of its objects
    /// (docs/rdma-core-backend.md lists them): `EOPNOTSUPP`.
    #[cfg(feature = "rdma-core")]
    pub(crate) const fn native_unsupported(verb: &'static str) -> Self {
        Error::Unsupported { verb, what: "not offered on a device of the rdma-core backend" }
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

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_an_errno() {
        let all = [
            Error::invalid("v", Rule::ZeroLength),
            Error::unsupported("v", "w"),
            Error::Limit { verb: "v", what: "w", max: 1, got: 2 },
            Error::TooManySge { max: 1, got: 2 },
            Error::QueueFull { verb: "v", max: 1 },
            Error::NoSpace { verb: "v", why: "w" },
            Error::QpStateForbids { verb: "v", state: QpState::Reset },
            Error::Transition(TransitionError::CurState),
            Error::PermissionDenied { verb: "v", why: "w" },
            Error::Busy { what: "w" },
            Error::Destroyed { what: "w" },
            Error::CqOverrun,
            Error::BadAddress { verb: "v", addr: 0, len: 1 },
            Error::OutOfRange { verb: "v", offset: 4, len: 4, size: 4 },
            Error::NoSuchKey { verb: "v", key: 1, what: "w" },
            Error::Overflow { verb: "v", addr: 1, len: u64::MAX },
            Error::Unreachable { verb: "v", dgid: crate::gid::Gid::default(), errno: libc::ETIMEDOUT },
            Error::Exhausted { what: "w" },
            Error::Again { verb: "v", why: "w" },
            Error::WouldBlock,
            Error::DeviceFatal { verb: "v" },
            Error::Os(std::io::Error::from_raw_os_error(libc::EPERM)),
            Error::Bug("b"),
        ];
        let want = [
            libc::EINVAL,
            libc::EOPNOTSUPP,
            libc::EINVAL,
            libc::EINVAL,
            libc::ENOMEM,
            libc::ENOSPC,
            libc::EINVAL,
            libc::EINVAL,
            libc::EPERM,
            libc::EBUSY,
            libc::EINVAL,
            libc::EIO,
            libc::EFAULT,
            libc::EFAULT,
            libc::ENOENT,
            libc::EOVERFLOW,
            libc::ETIMEDOUT,
            libc::ENOMEM,
            libc::EAGAIN,
            libc::EAGAIN,
            libc::EIO,
            libc::EPERM,
            libc::EIO,
        ];
        for (e, w) in all.iter().zip(want) {
            assert_eq!(e.errno(), w, "{e}");
            assert!(!e.to_string().is_empty());
        }
    }
}
