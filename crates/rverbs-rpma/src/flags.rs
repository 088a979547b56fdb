//! Flags: when an operation completes, what a memory region is used for, and flush types.

use bitflags::bitflags;

/// When a posted operation produces a completion (`RPMA_F_COMPLETION_*`).
///
/// Rule (rpma_cq_get_wc(3)): "All operations generate completions on error. The
/// operations posted with the RPMA_F_COMPLETION_ALWAYS flag also generate completions on
/// success." librpma maps this to the verbs signaled flag: a work request is posted with
/// `IBV_SEND_SIGNALED` exactly when the success bit (`ALWAYS & !ON_ERROR`) is set, so an
/// unsignaled operation that succeeds never yields a completion, and one that fails
/// always does (verbs complete every failed work request).
///
/// The C API refuses `flags == 0` with `RPMA_E_INVAL`; this enum cannot express it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum CompletionFlags {
    /// `RPMA_F_COMPLETION_ON_ERROR` (1): a completion only if the operation fails.
    OnError = 1,
    /// `RPMA_F_COMPLETION_ALWAYS` (3): a completion on success too.
    Always = 3,
}

impl CompletionFlags {
    /// The success bit librpma tests (`RPMA_F_COMPLETION_ON_SUCCESS`, 2).
    const ON_SUCCESS: i32 = 2;

    /// Whether the work request is posted signaled (`IBV_SEND_SIGNALED`).
    pub fn signaled(self) -> bool {
        (self as i32) & Self::ON_SUCCESS != 0
    }

    /// The verbs send flags of the work request (SIGNALED or none).
    pub(crate) fn send_flags(self) -> rverbs::SendFlags {
        if self.signaled() {
            rverbs::SendFlags::SIGNALED
        } else {
            rverbs::SendFlags::empty()
        }
    }
}

bitflags! {
    /// What a memory region is used for (`RPMA_MR_USAGE_*`, rpma_mr_reg(3)); travels in
    /// the last byte of the region's descriptor.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Usage: u8 {
        /// Source of remote reads (`RPMA_MR_USAGE_READ_SRC`, 1).
        const READ_SRC = 1;
        /// Destination of local reads (`RPMA_MR_USAGE_READ_DST`, 2).
        const READ_DST = 1 << 1;
        /// Source of local writes (`RPMA_MR_USAGE_WRITE_SRC`, 4).
        const WRITE_SRC = 1 << 2;
        /// Destination of remote writes (`RPMA_MR_USAGE_WRITE_DST`, 8).
        const WRITE_DST = 1 << 3;
        /// May be flushed to global visibility (`RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY`, 16).
        const FLUSH_TYPE_VISIBILITY = 1 << 4;
        /// May be flushed to persistence (`RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT`, 32).
        const FLUSH_TYPE_PERSISTENT = 1 << 5;
        /// Source of sends (`RPMA_MR_USAGE_SEND`, 64).
        const SEND = 1 << 6;
        /// Destination of receives (`RPMA_MR_USAGE_RECV`, 128).
        const RECV = 1 << 7;
    }
}

impl Usage {
    /// The verbs access rights a registration with this usage gets, as librpma 1.2 maps
    /// them (docs/rpma-rdmacm.md §1.2): READ_SRC or either flush type → REMOTE_READ (the flush
    /// is emulated by a remote read); READ_DST → LOCAL_WRITE (rverbs0 is RoCE, not iWARP,
    /// so no REMOTE_WRITE); WRITE_SRC → LOCAL_WRITE; WRITE_DST → REMOTE_WRITE and
    /// LOCAL_WRITE; RECV → LOCAL_WRITE; SEND → nothing.
    pub fn access(self) -> rverbs::Access {
        self.access_for(false)
    }

    /// The verbs access rights for this usage on a peer whose flush is native or not
    /// (`rpma_peer_usage2access`, librpma 1.3.0): as [`Usage::access`], except that with
    /// a native flush FLUSH_TYPE_VISIBILITY maps to FLUSH_GLOBAL and
    /// FLUSH_TYPE_PERSISTENT to FLUSH_PERSISTENT instead of REMOTE_READ.
    pub fn access_for(self, native_flush: bool) -> rverbs::Access {
        use rverbs::Access;
        let mut a = Access::empty();
        if self.contains(Usage::READ_SRC) {
            a |= Access::REMOTE_READ;
        }
        let flushes = Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT;
        if !native_flush && self.intersects(flushes) {
            a |= Access::REMOTE_READ;
        }
        if native_flush && self.contains(Usage::FLUSH_TYPE_VISIBILITY) {
            a |= Access::FLUSH_GLOBAL;
        }
        if native_flush && self.contains(Usage::FLUSH_TYPE_PERSISTENT) {
            a |= Access::FLUSH_PERSISTENT;
        }
        if self.intersects(Usage::READ_DST | Usage::WRITE_SRC | Usage::RECV) {
            a |= Access::LOCAL_WRITE;
        }
        if self.contains(Usage::WRITE_DST) {
            a |= Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        }
        a
    }
}

/// What a flush guarantees (`enum rpma_flush_type`, rpma_flush(3)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum FlushType {
    /// `RPMA_FLUSH_TYPE_PERSISTENT` (0): the data is persistent; needs the remote peer
    /// configuration's direct write to pmem and the region's FLUSH_TYPE_PERSISTENT usage.
    Persistent = 0,
    /// `RPMA_FLUSH_TYPE_VISIBILITY` (1): the data is globally visible; needs the region's
    /// FLUSH_TYPE_VISIBILITY usage.
    Visibility = 1,
}
