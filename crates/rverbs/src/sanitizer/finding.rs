//! A finding of the verbs sanitizer as a value (docs/sanitizer.md, "Findings"): which
//! rule of which man page was broken, the objects involved and where each was made.

use rverbs_proto::verbs::QpState;

/// What kind of mistake a [`Finding`] reports; each names one rule of the man pages
/// (docs/sanitizer.md lists them with their rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FindingKind {
    /// `ibv_dereg_mr` of a region whose lkey an outstanding work request names
    /// (ibv_dereg_mr(3)).
    DeregMrInUse,
    /// `ibv_destroy_cq` of a CQ with completion events obtained by `ibv_get_cq_event`
    /// and not acknowledged (ibv_get_cq_event(3)): rdma-core's destroy waits for ever.
    UnackedCqEvents,
    /// The destruction of a CQ, QP or SRQ with asynchronous events about it not
    /// acknowledged (ibv_get_async_event(3)).
    UnackedAsyncEvents,
    /// Resources still alive when the process exits, with their creation sites.
    LeakAtExit,
    /// A work request posted to a QP in a state that cannot execute it
    /// (ibv_post_send(3), ibv_post_recv(3), ibv_modify_qp(3)).
    PostInBadState,
    /// A buffer an outstanding SEND or RDMA WRITE reads changed before the completion
    /// that released the request was polled (ibv_post_send(3), NOTES).
    SendBufferChanged,
    /// The queues completing to a CQ can have more work outstanding than it holds: the
    /// overrun that is coming (ibv_create_cq(3)).
    CqTooSmall,
    /// `ibv_start_poll` again, or `ibv_destroy_cq`, while a batch that succeeded
    /// `ibv_start_poll` on the same thread was not ended with `ibv_end_poll`
    /// (ibv_create_cq_ex(3)).
    CqPollUnfinished,
    /// A CQ created `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` polled by a thread while another
    /// was inside a poll of it (ibv_create_cq_ex(3)).
    SingleThreadedCqShared,
    /// `ibv_get_cq_event` on a channel one of whose CQs was armed while it held
    /// completions and was not polled since (ibv_get_cq_event(3)): those completions
    /// raise no event.
    LostWakeup,
    /// A send queue filled by unsignaled work requests with none signaled outstanding:
    /// its slots are freed only by a later completion, which none will make
    /// (ibv_post_send(3), IBV_SEND_SIGNALED; ibv_create_qp(3), sq_sig_all).
    UnsignaledFill,
    /// A work request completed with a remote access error (or a remote invalid request
    /// for its length), explained: the rkey, the range asked, which check failed, and
    /// where the target region was registered when it is of this process (informative).
    RemoteAccessExplained,
    /// `ibv_rereg_mr` changing the translation or the PD of a region whose lkey an
    /// outstanding work request names (ibv_rereg_mr(3), ibv_post_send(3) NOTES).
    ReregMrInUse,
    /// `ibv_dealloc_mw` of a window that an outstanding bind work request names (its
    /// completion not polled yet; ibv_dealloc_mw(3), ibv_bind_mw(3)).
    DeallocMwInUse,
    /// `ibv_destroy_qp` of a QP with send work requests outstanding: posted, their
    /// completion not polled, not discarded by a move to RESET (ibv_destroy_qp(3),
    /// ibv_post_send(3) NOTES). Posted receives are no finding.
    DestroyQpInUse,
    /// An `ibv_wc_read_*` of an extended CQ's field whose `IBV_WC_EX_WITH_*` flag was
    /// not in the `wc_flags` of `ibv_create_cq_ex` (ibv_create_cq_ex(3)); once per CQ
    /// and field.
    WcFieldNotRequested,
    /// Memory of a registered region no longer mapped (unmapped, or freed back to the
    /// system) while the region is registered, found when a work request names it or at
    /// `ibv_dereg_mr` (ibv_reg_mr(3): a NIC keeps the pages it pinned until the
    /// deregistration); once per region.
    MrMemoryUnmapped,
    /// A heap block (`free`, or a `realloc` that moved or shrank it) released while a
    /// registered region covers part of it, found with the drop-in's `free` watch
    /// (`librverbs_free.so`, preloaded); once per region (with [`Self::MrMemoryUnmapped`]).
    MrMemoryFreed,
    /// A load of a receive buffer before the completion of its receive was polled, on a
    /// QP for which `ibv_query_qp_data_in_order` answers 0 for SENDs
    /// (ibv_query_qp_data_in_order(3), ibv_poll_cq(3)).
    ReadBeforeCompletion,
}

impl FindingKind {
    /// The kind's name in reports, e.g. `dereg-mr-in-use`.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::DeregMrInUse => "dereg-mr-in-use",
            FindingKind::UnackedCqEvents => "unacked-cq-events",
            FindingKind::UnackedAsyncEvents => "unacked-async-events",
            FindingKind::LeakAtExit => "leak-at-exit",
            FindingKind::PostInBadState => "post-in-bad-state",
            FindingKind::SendBufferChanged => "send-buffer-changed",
            FindingKind::CqTooSmall => "cq-too-small",
            FindingKind::CqPollUnfinished => "cq-poll-unfinished",
            FindingKind::SingleThreadedCqShared => "single-threaded-cq-shared",
            FindingKind::LostWakeup => "lost-wakeup",
            FindingKind::UnsignaledFill => "unsignaled-fill",
            FindingKind::RemoteAccessExplained => "remote-access-explained",
            FindingKind::ReregMrInUse => "rereg-mr-in-use",
            FindingKind::DeallocMwInUse => "dealloc-mw-in-use",
            FindingKind::DestroyQpInUse => "destroy-qp-in-use",
            FindingKind::WcFieldNotRequested => "wc-field-not-requested",
            FindingKind::MrMemoryUnmapped => "mr-memory-unmapped",
            FindingKind::MrMemoryFreed => "mr-memory-freed",
            FindingKind::ReadBeforeCompletion => "read-before-completion",
        }
    }
}

/// Which queue a work request was posted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Queue {
    /// A QP's send queue (ibv_post_send(3)).
    Send,
    /// A QP's receive queue (ibv_post_recv(3)).
    Recv,
    /// A shared receive queue (ibv_post_srq_recv(3)).
    SharedRecv,
}

impl Queue {
    /// The verb that posts to this queue.
    pub(crate) fn post_verb(self) -> &'static str {
        match self {
            Queue::Send => "ibv_post_send",
            Queue::Recv => "ibv_post_recv",
            Queue::SharedRecv => "ibv_post_srq_recv",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Queue::Send => "send queue",
            Queue::Recv => "receive queue",
            Queue::SharedRecv => "shared receive queue",
        }
    }
}

/// An object a finding names, with the numbers a program sees.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Object {
    /// A device context ([`crate::Context::id`]).
    Context {
        /// Its id.
        id: u32,
    },
    /// A protection domain (`ibv_pd.handle`).
    Pd {
        /// Its handle.
        handle: u32,
    },
    /// A memory region and the range it covers.
    Mr {
        /// Its local key (equal to its rkey on this device).
        lkey: u32,
        /// The process address of its first byte.
        addr: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// A completion queue (`ibv_cq.handle`).
    Cq {
        /// Its id.
        id: u32,
    },
    /// A queue pair.
    Qp {
        /// Its number.
        qpn: u32,
        /// Its state when the finding was made, where it matters.
        state: Option<QpState>,
    },
    /// A shared receive queue.
    Srq {
        /// Its number.
        srqn: u32,
    },
    /// A completion channel.
    CompChannel {
        /// Its id.
        id: u32,
    },
    /// A work request.
    WorkRequest {
        /// Its `wr_id`.
        wr_id: u64,
        /// The queue it was posted to.
        queue: Queue,
        /// The QPN (send and receive queues) or SRQ number of that queue.
        num: u32,
        /// The scatter/gather entry that names the region in question, as (address,
        /// length), if one does.
        sge: Option<(u64, u32)>,
    },
    /// A CQ's size against the work its queues can have outstanding.
    CqCapacity {
        /// The CQ's id.
        id: u32,
        /// The completions it holds (`ibv_cq.cqe`).
        cqe: u32,
        /// The work requests its queues can have outstanding.
        demand: u64,
    },
    /// A queue completing to a CQ, and its depth.
    QueueDepth {
        /// The queue.
        queue: Queue,
        /// The QPN (send and receive queues) or SRQ number.
        num: u32,
        /// Its depth: `max_send_wr`, `max_recv_wr`, or an XRC SRQ's `max_wr`.
        depth: u32,
    },
    /// The remote range a work request asked for through an rkey.
    RemoteRange {
        /// The rkey.
        rkey: u32,
        /// The first remote address asked for.
        addr: u64,
        /// The length asked for.
        len: u64,
    },
    /// A memory window (ibv_alloc_mw(3)).
    Mw {
        /// Its rkey when the finding was made.
        rkey: u32,
    },
    /// A field of an extended CQ's completions read with `ibv_wc_read_*` (ibv_create_cq_ex(3)).
    WcField {
        /// The CQ's id.
        cq: u32,
        /// The reader, e.g. `ibv_wc_read_byte_len`.
        read: &'static str,
        /// The flag that requests the field, e.g. `IBV_WC_EX_WITH_BYTE_LEN`.
        flag: &'static str,
        /// The `wc_flags` the CQ was created with.
        wc_flags: u64,
    },
    /// A load the program made (read-before-completion).
    Read {
        /// The address loaded from.
        addr: u64,
        /// The lkey of the SGE it lies in.
        lkey: u32,
    },
    /// Events obtained and not acknowledged.
    Events {
        /// How many.
        unacked: u64,
    },
}

/// One frame of a backtrace, as symbolized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function (demangled for Rust).
    pub function: String,
    /// The source file, when the code has line tables (C built with `-g`).
    pub file: Option<String>,
    /// The line in `file`.
    pub line: Option<u32>,
}

/// A labelled backtrace: where an object was created, a work request posted, the
/// offending call made. The frames start at the application's (the sanitizer's, the
/// library's and the standard library's frames are left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// What happened there ("posted at", "created at", …).
    pub label: String,
    /// The application's frames, innermost first.
    pub frames: Vec<Frame>,
}

/// One finding of the sanitizer (docs/sanitizer.md, "Report").
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// The kind.
    pub kind: FindingKind,
    /// The slot of the device whose objects it names (`Device::slot_index`): their
    /// numbers are unique on that device only. The report prints it when it is not the
    /// listed device's (`default_device_slot`, 0 in a process that did not fork). `None`
    /// for leak-at-exit, which lists the objects of every device (each site naming its
    /// device when it is not the listed one).
    pub device: Option<usize>,
    /// The man page whose rule was broken, e.g. `ibv_dereg_mr(3)`.
    pub page: &'static str,
    /// The rule, in one sentence.
    pub rule: &'static str,
    /// The one-line description of this occurrence.
    pub headline: String,
    /// The objects involved.
    pub objects: Vec<Object>,
    /// Where each was made, and where the offending call was.
    pub sites: Vec<Site>,
}

impl Finding {
    /// The QPN of the first queue pair or work request the finding names.
    pub fn qpn(&self) -> Option<u32> {
        self.objects.iter().find_map(|o| match o {
            Object::Qp { qpn, .. } => Some(*qpn),
            Object::WorkRequest { num, queue: Queue::Send | Queue::Recv, .. } => Some(*num),
            Object::QueueDepth { num, queue: Queue::Send | Queue::Recv, .. } => Some(*num),
            _ => None,
        })
    }

    /// The lkey of the first memory region the finding names.
    pub fn lkey(&self) -> Option<u32> {
        self.objects.iter().find_map(|o| match o {
            Object::Mr { lkey, .. } => Some(*lkey),
            _ => None,
        })
    }

    /// The `wr_id` of the first work request the finding names.
    pub fn wr_id(&self) -> Option<u64> {
        self.objects.iter().find_map(|o| match o {
            Object::WorkRequest { wr_id, .. } => Some(*wr_id),
            _ => None,
        })
    }

    /// The site whose label starts with `label`.
    pub fn site(&self, label: &str) -> Option<&Site> {
        self.sites.iter().find(|s| s.label.starts_with(label))
    }
}
