//! The send queue: validation of send work requests at post time and their storage
//! until completion.
//!
//! Rule: ibv_post_send(3) and rxe's `validate_send_wr`: a work request is refused with
//! EINVAL if its opcode is not allowed on the QP type, it has more SGEs than
//! `max_send_sge`, its length exceeds the port's `max_msg_sz`, an atomic is not exactly
//! 8 bytes or its remote address is not 8-byte aligned, or inline data is requested for
//! an opcode that carries none or exceeds `max_inline_data`; with ENOMEM if the queue is
//! full. The first refused request is reported; the ones before it stay posted.

use std::sync::Arc;

use rverbs_proto::verbs::{Access, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};

use crate::gid::Gid;
use crate::limits;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::mr::endpoint::Endpoint;
use crate::mr::{self, MrInner, Sge};
use crate::mw::MwInner;
use crate::rings::qp_attr::AddressVector;
use crate::rings::wr::{FlushWr, Payload, SendWr};
use crate::rings::wc::Cqe;
use self::mem::{SharedAllocator, SqMem};

/// The requester's copy of the QP attributes it needs, updated by `modify_qp` under the
/// send-queue lock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReqView {
    pub(crate) dest_qpn: u32,
    pub(crate) dgid: Gid,
    pub(crate) sgid: Gid,
    pub(crate) timeout: u8,
    pub(crate) max_rd_atomic: u8,
    /// The destination is another host reached by the network transport (the path's
    /// destination GID is not this device's and a socket serves its source GID): the
    /// requester runs the protocol core's machine over UDP (`transport::net`).
    pub(crate) network: bool,
    /// Path MTU in bytes (the smaller of `path_mtu` and the port's active MTU).
    pub(crate) mtu: u32,
    /// `sq_psn`.
    pub(crate) sq_psn: u32,
    /// `retry_cnt` and `rnr_retry` (3 bits each).
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
}

/// A UD destination resolved at post time.
#[derive(Clone)]
pub(crate) struct UdAv {
    /// The address handle's resolved address vector (a copy: the handle may be
    /// destroyed while the work request is queued).
    pub(crate) ah: AddressVector,
    pub(crate) remote_qpn: u32,
    pub(crate) remote_qkey: u32,
}

/// A memory-window bind, resolved at post time.
#[derive(Clone)]
pub(crate) struct BindWqe {
    pub(crate) mw: Arc<MwInner>,
    pub(crate) rkey: u32,
    pub(crate) mr: Option<Arc<MrInner>>,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

/// What completing a work request needs once it leaves the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retired {
    pub(crate) wr_id: u64,
    pub(crate) flags: SendFlags,
    /// [`SendWqe::hold_ms`].
    pub(crate) hold_ms: u32,
    /// [`SendWqe::posted_ns`].
    pub(crate) posted_ns: u64,
}

/// A posted send work request.
#[derive(Clone, Default)]
pub(crate) struct SendWqe {
    pub(crate) wr_id: u64,
    pub(crate) opcode: Option<WrOpcode>,
    pub(crate) flags: SendFlags,
    pub(crate) imm: u32,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) ud: Option<UdAv>,
    pub(crate) bind: Option<BindWqe>,
    pub(crate) flush: Option<FlushWr>,
    pub(crate) xrc_srqn: u32,
    pub(crate) num_sge: usize,
    /// Inline payload length (the bytes live in the queue's inline area).
    pub(crate) inline_len: Option<usize>,
    pub(crate) total_len: u64,
    /// The fault plan completes it with this status, nothing sent
    /// (docs/fault-injection.md).
    pub(crate) injected: Option<WcStatus>,
    /// The fault plan holds its completion back this many milliseconds (0: not held;
    /// `wc_delay=`, docs/fault-injection.md).
    pub(crate) hold_ms: u32,
    /// When it was posted ([`crate::clock::device_ns`]) on a device that counts
    /// statistics, for its QP's latency histogram (`shm::stats`); 0 otherwise.
    pub(crate) posted_ns: u64,
}

impl SendWqe {
    pub(crate) fn opcode(&self) -> WrOpcode {
        self.opcode.unwrap_or(WrOpcode::Send)
    }

    /// Its successful completion on QP `qpn` (ibv_poll_cq(3): the opcode of the work
    /// request; `byte_len` its length, 8 for atomics, 0 for local operations).
    pub(crate) fn success(&self, qpn: u32) -> Cqe {
        let op = self.opcode();
        let opcode = op.wc_opcode().unwrap_or(WcOpcode::Send);
        let byte_len = match op {
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => 8,
            WrOpcode::BindMw | WrOpcode::LocalInv => 0,
            _ => self.total_len as u32,
        };
        Cqe::success(self.wr_id, qpn, opcode, byte_len)
    }
}

/// The send queue's storage: posted work requests, oldest first, with their scatter
/// lists and inline bytes, until they complete.
///
/// The work requests, scatter lists and inline bytes are one block ([`SqMem`]), from the
/// allocator of the parent domain the QP was created on when it gives one
/// (ibv_alloc_parent_domain(3); docs/memory.md, "Custom allocators"); the references
/// that keep regions registered (`keep`) are the device's bookkeeping and stay in its
/// own memory.
pub(crate) struct Ring {
    cap: usize,
    max_sge: usize,
    max_inline: usize,
    keep: Vec<Option<Arc<MrInner>>>,
    /// Some posted request keeps regions alive (the Rust API): retiring clears them.
    keeps: bool,
    head: usize,
    count: usize,
    /// `wqes` (cap), `sges` (cap × max_sge), `inline` (cap × max_inline).
    mem: SqMem,
}

impl Ring {
    /// The scatter entries and inline bytes a work request of this queue may have.
    pub(crate) fn limits(&self) -> (usize, usize) {
        (self.max_sge, self.max_inline)
    }

    /// A ring for `max_wr` requests, its arrays from `alloc` when it gives a buffer.
    ///
    /// Errors: as [`SqMem::new`] (the allocator failed: `ENOMEM`).
    pub(crate) fn new(max_wr: u32, max_sge: u32, max_inline: u32, alloc: Option<&SharedAllocator>) -> Result<Self> {
        let cap = max_wr.max(1) as usize;
        let max_sge = max_sge.max(1) as usize;
        Self::with_capacity(cap, max_sge, max_inline as usize, alloc)
    }

    fn with_capacity(cap: usize, max_sge: usize, max_inline: usize, alloc: Option<&SharedAllocator>) -> Result<Self> {
        Ok(Ring {
            cap,
            max_sge,
            max_inline,
            keep: vec![None; cap * max_sge],
            keeps: false,
            head: 0,
            count: 0,
            mem: SqMem::new(cap, max_sge, max_inline, alloc)?,
        })
    }

    /// A ring that holds nothing and accepts nothing (every push: ENOMEM), with the
    /// limits of `self`: what a destroyed QP keeps once its ring went back to its
    /// parent domain's allocator.
    pub(crate) fn emptied(&self) -> Ring {
        Self::with_capacity(0, self.max_sge, self.max_inline, None).expect("an empty ring allocates nothing")
    }

    /// Whether the ring's memory is lent by a parent domain's allocator.
    pub(crate) fn lent(&self) -> bool {
        self.mem.lent()
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The slot of position `i` of the ring, `i < 2 × cap` (a head and an offset within
    /// the count): one compare instead of a division on every post, hand-over and retire.
    #[inline]
    fn wrap(&self, i: usize) -> usize {
        debug_assert!(i < 2 * self.cap);
        if i >= self.cap { i - self.cap } else { i }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The oldest work request, with its scatter list and inline bytes.
    #[inline]
    pub(crate) fn head(&self) -> Option<(&SendWqe, &[Sge], &[u8])> {
        (self.count != 0).then(|| self.slot_parts(self.head))
    }

    /// The work request `i` places after the oldest (0 is the oldest), with its scatter
    /// list and inline bytes.
    #[inline]
    pub(crate) fn nth(&self, i: usize) -> Option<(&SendWqe, &[Sge], &[u8])> {
        (i < self.count).then(|| self.slot_parts(self.wrap(self.head + i)))
    }

    /// The WQE of `slot` with its scatter list and inline bytes.
    #[inline]
    fn slot_parts(&self, slot: usize) -> (&SendWqe, &[Sge], &[u8]) {
        let w = &self.mem.wqes[slot];
        let base = slot * self.max_sge;
        let inl = w.inline_len.map(|n| &self.mem.inline[slot * self.max_inline..slot * self.max_inline + n]).unwrap_or(&[]);
        (w, &self.mem.sges[base..base + w.num_sge], inl)
    }

    /// Removes the oldest work request.
    pub(crate) fn pop(&mut self) -> Option<Retired> {
        if self.count == 0 {
            return None;
        }
        // Retire in place: only the handles the WQE holds are released (the rest is
        // overwritten by the next post), so nothing large is moved.
        let w = &mut self.mem.wqes[self.head];
        let retired = Retired { wr_id: w.wr_id, flags: w.flags, hold_ms: w.hold_ms, posted_ns: w.posted_ns };
        w.ud = None;
        w.bind = None;
        if self.keeps {
            let base = self.head * self.max_sge;
            for k in &mut self.keep[base..base + self.max_sge] {
                *k = None;
            }
        }
        self.head = self.wrap(self.head + 1);
        self.count -= 1;
        Some(retired)
    }

    /// The newest work request completes with `status` instead of running (the fault
    /// plan, docs/fault-injection.md).
    pub(crate) fn fail_newest(&mut self, status: WcStatus) {
        if self.count > 0 {
            let slot = self.wrap(self.head + self.count - 1);
            self.mem.wqes[slot].injected = Some(status);
        }
    }

    /// The newest work request's completion is held back `delay` (the fault plan's
    /// `wc_delay=`, docs/fault-injection.md).
    pub(crate) fn hold_newest(&mut self, delay: std::time::Duration) {
        if self.count > 0 {
            let slot = self.wrap(self.head + self.count - 1);
            self.mem.wqes[slot].hold_ms = u32::try_from(delay.as_millis()).unwrap_or(u32::MAX);
        }
    }

    /// Removes the newest work requests until `count` remain (an aborted batch).
    pub(crate) fn truncate(&mut self, count: usize) {
        while self.count > count {
            let slot = self.wrap(self.head + self.count - 1);
            self.mem.wqes[slot] = SendWqe::default();
            let base = slot * self.max_sge;
            for k in &mut self.keep[base..base + self.max_sge] {
                *k = None;
            }
            self.count -= 1;
        }
    }

    /// Validates `wr` (from a QP of PD `pd`, whose keys are `endpoint`'s) and appends it.
    pub(crate) fn push(
        &mut self,
        endpoint: &Endpoint,
        pd: u32,
        qp_type: QpType,
        wr: &SendWr<'_>,
        keep: bool,
    ) -> Result<()> {
        let verb = "post_send";
        let op = wr.opcode;
        if !op.allowed_on(qp_type) {
            return Err(Error::invalid(verb, Rule::OpcodeForQpType { opcode: op, qp_type }));
        }
        if matches!(op, WrOpcode::Tso | WrOpcode::Driver1) {
            return Err(Error::unsupported(verb, "this work request opcode"));
        }
        let inline_flag = wr.flags.contains(SendFlags::INLINE)
            || matches!(wr.payload, Payload::Inline(_) | Payload::InlineList(_));
        let (num_sge, mut total): (usize, u64) = match wr.payload {
            Payload::Sge(s) => (s.len(), s.iter().map(|s| u64::from(s.length)).sum()),
            Payload::Inline(b) => (0, b.len() as u64),
            Payload::InlineList(l) => (0, l.iter().map(|b| b.len() as u64).sum()),
        };
        match op {
            WrOpcode::BindMw
                // rxe provider: a bind carries no data and no immediate.
                if (total != 0 || num_sge != 0 || wr.imm_data != 0 || wr.bind.is_none()) => {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
            WrOpcode::LocalInv
                if (total != 0 || num_sge != 0) => {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
            WrOpcode::AtomicWrite => {
                if total != 0 || num_sge != 0 {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
                total = 8;
            }
            WrOpcode::Flush => {
                let Some(f) = wr.flush else {
                    return Err(Error::invalid(verb, Rule::FlushParams));
                };
                if num_sge != 0 {
                    return Err(Error::invalid(verb, Rule::NoDataFor { opcode: op }));
                }
                total = u64::from(f.len);
            }
            _ => {}
        }
        if num_sge > self.max_sge {
            return Err(Error::TooManySge { max: self.max_sge as u32, got: num_sge as u32 });
        }
        if total > u64::from(limits::MAX_MSG_SZ) {
            return Err(Error::Limit {
                verb,
                what: "message length",
                max: limits::MAX_MSG_SZ.into(),
                got: total,
            });
        }
        if op.is_atomic() {
            if total != 8 {
                return Err(Error::invalid(verb, Rule::AtomicLength { len: total }));
            }
            if !wr.remote_addr.is_multiple_of(8) {
                return Err(Error::invalid(verb, Rule::AtomicAlignment { addr: wr.remote_addr }));
            }
        }
        if inline_flag && !op.carries_payload() {
            return Err(Error::invalid(verb, Rule::InlineWithoutData { opcode: op }));
        }
        if inline_flag && total > self.max_inline as u64 {
            return Err(Error::Limit {
                verb,
                what: "inline data",
                max: self.max_inline as u64,
                got: total,
            });
        }
        if qp_type == QpType::Ud && wr.ud.is_none() {
            return Err(Error::invalid(verb, Rule::UdNeedsAh));
        }
        if self.count == self.cap {
            return Err(Error::QueueFull { verb, max: self.cap as u32 });
        }
        let slot = self.wrap(self.head + self.count);
        // Written in place: a work request is a few hundred bytes, posted on the hot path.
        let wqe = &mut self.mem.wqes[slot];
        wqe.wr_id = wr.wr_id;
        wqe.opcode = Some(op);
        wqe.flags = wr.flags;
        wqe.imm = wr.imm_data;
        wqe.remote_addr = wr.remote_addr;
        wqe.rkey = wr.rkey;
        wqe.compare_add = wr.compare_add;
        wqe.swap = wr.swap;
        wqe.ud = wr.ud.map(|u| UdAv { ah: *u.ah, remote_qpn: u.remote_qpn, remote_qkey: u.remote_qkey });
        wqe.bind = match wr.bind {
            // A region of the rdma-core backend cannot be bound to a soft window: EOPNOTSUPP.
            Some(b) => Some(BindWqe {
                mw: b.mw.inner().clone(),
                rkey: b.rkey,
                mr: b.bind.mr.map(|m| m.inner().cloned()).transpose()?,
                addr: b.bind.addr,
                len: b.bind.length,
                access: b.bind.access,
            }),
            None => None,
        };
        wqe.flush = wr.flush;
        wqe.xrc_srqn = wr.xrc_remote_srqn;
        wqe.num_sge = 0;
        wqe.inline_len = None;
        wqe.total_len = total;
        wqe.injected = None;
        wqe.hold_ms = 0;
        wqe.posted_ns = if endpoint.stats.is_some() { crate::clock::device_ns() } else { 0 };
        if inline_flag {
            let dst = &mut self.mem.inline[slot * self.max_inline..(slot + 1) * self.max_inline];
            let mut off = 0;
            match wr.payload {
                Payload::Inline(b) => {
                    dst[..b.len()].copy_from_slice(b);
                    off = b.len();
                }
                Payload::InlineList(list) => {
                    for b in list {
                        dst[off..off + b.len()].copy_from_slice(b);
                        off += b.len();
                    }
                }
                Payload::Sge(sges) => {
                    // The Rust API reads inline SGEs through the usual local checks.
                    let keys = mr::KeySpace::local(endpoint);
                    for s in sges {
                        let outside = || Error::invalid(verb, Rule::InlineOutsideRegion);
                        let p = keys
                            .pin(s.lkey, pd, mr::KeyUse::Local, s.addr, s.length.into(), Access::empty())
                            .map_err(|_| outside())?;
                        mr::copy_out(&p, &mut dst[off..off + p.len]).map_err(|_| outside())?;
                        off += p.len;
                    }
                }
            }
            wqe.inline_len = Some(off);
        } else if let Payload::Sge(sges) = wr.payload {
            let base = slot * self.max_sge;
            if let [one] = sges {
                // Most requests have one entry: a store, not a call to memcpy.
                self.mem.sges[base] = *one;
            } else {
                self.mem.sges[base..base + sges.len()].copy_from_slice(sges);
            }
            if keep {
                self.keeps = true;
                for (i, s) in sges.iter().enumerate() {
                    self.keep[base + i] = endpoint.keys.mr(s.lkey);
                }
            } else if self.keeps {
                self.keep[base..base + sges.len()].iter_mut().for_each(|k| *k = None);
            }
            wqe.num_sge = sges.len();
        }
        self.count += 1;
        Ok(())
    }
}

/// The capacity a QP really gets for a requested `max_inline_data` (shared with the SGE
/// area, as rxe does: at least `max_send_sge` × 16 bytes).
pub(crate) fn granted_inline(max_send_sge: u32, max_inline: u32) -> u32 {
    max_inline.max(max_send_sge.saturating_mul(16)).min(limits::MAX_INLINE_DATA)
}

pub(crate) mod mem {
    //! The memory of a send queue's ring ([`super::Ring`]): one block holding its work
    //! requests, their scatter lists and their inline bytes, taken from the global allocator
    //! or from the allocator of the parent domain the QP was created on.
    //!
    //! Read before editing: ibv_alloc_parent_domain(3) (`alloc`, `free`,
    //! `IBV_ALLOCATOR_USE_DEFAULT`), docs/memory.md "Custom allocators".
    //!
    //! Rule: ibv_alloc_parent_domain(3): "Provider memory allocations will use this function
    //! to allocate the needed memory"; `alloc` gets the parent domain, its `pd_context`, the
    //! size and alignment of the buffer and a resource type, and answers the buffer, NULL
    //! ("an error"), or IBV_ALLOCATOR_USE_DEFAULT ("allocate the buffer using the default
    //! allocator"); `free` is the callback "to free memory buffers that were allocated using
    //! a successful alloc()", so a buffer the default allocator made is never handed to it.
    //!
    //! Only the send queue's ring can come from the application: completion rings, receive
    //! rings and SRQ rings are shared segments other processes map (docs/memory.md).
    //!
    //! Invariant of this module: the [`Slots`] of an [`SqMem`] point into its [`Block`] and
    //! live exactly as long as it (they are fields of one value, dropped before the block).
    #![allow(unsafe_code)]

    use std::alloc::Layout;
    use std::marker::PhantomData;
    use std::ops::{Deref, DerefMut};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::ptr::NonNull;
    use std::sync::Arc;

    use super::SendWqe;
    use crate::error::{Error, Result};
    use crate::mr::Sge;
    use crate::rule::Rule;

    /// A buffer rverbs asks a parent domain's allocator for ([`QueueAllocator::alloc`]).
    ///
    /// Rule: ibv_alloc_parent_domain(3): the callback receives "the size and the alignment
    /// of the requested buffer, as well a vendor-specific resource_type, which is derived
    /// from the rdma_driver_id enum (upper 32 bits) and a vendor specific resource code".
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct QueueBuffer {
        /// Bytes asked for (never 0).
        pub size: usize,
        /// The alignment the buffer must have (a power of two).
        pub alignment: usize,
        /// What the buffer is for: [`QueueBuffer::SEND_QUEUE`].
        pub resource_type: u64,
    }

    impl QueueBuffer {
        /// The `resource_type` of a send queue's ring: `(RDMA_DRIVER_UNKNOWN << 32) | 1`,
        /// that is 1.
        ///
        /// Rule: ibv_alloc_parent_domain(3): the upper 32 bits are the `rdma_driver_id`;
        /// rverbs has no kernel driver, so they are `RDMA_DRIVER_UNKNOWN` (0). The code 1 is
        /// the one mlx5 gives its QP work-queue buffer (`MLX5DV_RES_TYPE_QP` is
        /// `RDMA_DRIVER_MLX5 << 32 | 1`); an allocator that switches on mlx5's constants
        /// does not take this buffer for an mlx5 one, whose layout it is not
        /// (docs/memory.md, "Custom allocators").
        pub const SEND_QUEUE: u64 = 1;

        /// The alignment rverbs asks for: a cache line, so the ring shares no line with the
        /// allocator's other data (the ring itself needs 8).
        pub const ALIGNMENT: usize = 64;
    }

    /// What a [`QueueAllocator`] answers.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Allocation {
        /// The buffer: valid, aligned and exclusive as [`QueueAllocator`] requires.
        Buffer(NonNull<u8>),
        /// Let rverbs allocate the buffer itself (`IBV_ALLOCATOR_USE_DEFAULT`).
        UseDefault,
        /// No buffer (`alloc` returned NULL): the verb fails with `ENOMEM`.
        Failed,
    }

    /// The application's allocator of a parent domain (`alloc` / `free` of
    /// `struct ibv_parent_domain_init_attr`, ibv_alloc_parent_domain(3)), asked for the
    /// ring of the send queue of every QP created on the parent domain
    /// ([`crate::ParentDomain::create_qp`]).
    ///
    /// rverbs calls `alloc` once per QP, while the QP is created, and `free` exactly once
    /// for every [`Allocation::Buffer`] it got, with the same pointer and request: when the
    /// QP is destroyed (or its last handle dropped), or when the creation fails after the
    /// allocation. It never calls `free` for [`Allocation::UseDefault`] or
    /// [`Allocation::Failed`]. A panic in either method is caught: a panicking `alloc` fails
    /// the creation with `ENOMEM`, a panicking `free` leaves the buffer to the allocator.
    ///
    /// # Safety
    ///
    /// An implementation that answers `Allocation::Buffer(p)` for `buf` promises that `p` is
    /// aligned to `buf.alignment` and valid for reads and writes of `buf.size` bytes, and
    /// that nothing else reads, writes or frees those bytes until rverbs passes `p` to
    /// [`QueueAllocator::free`]: rverbs keeps Rust values (its work requests) there.
    /// (ibv_alloc_parent_domain(3) asks the same of a C `alloc`.)
    pub unsafe trait QueueAllocator: Send + Sync {
        /// A buffer for `buf` (ibv_alloc_parent_domain(3), `alloc`).
        fn alloc(&self, buf: &QueueBuffer) -> Allocation;

        /// Takes back a buffer this allocator gave for `buf` (ibv_alloc_parent_domain(3),
        /// `free`).
        fn free(&self, ptr: NonNull<u8>, buf: &QueueBuffer);
    }

    /// A parent domain's allocator, as the parent domain keeps it.
    pub(crate) type SharedAllocator = Arc<dyn QueueAllocator>;

    /// Where a block's bytes come from, and so where they go back.
    enum Source {
        /// `std::alloc` (or nothing, for an empty block).
        Global,
        /// A parent domain's allocator, with the request it answered.
        Parent { alloc: SharedAllocator, buf: QueueBuffer },
    }

    /// One allocation holding a ring's arrays.
    struct Block {
        ptr: NonNull<u8>,
        layout: Layout,
        source: Source,
    }

    // SAFETY: the block owns its bytes alone (its allocator's contract, or `std::alloc`);
    // it hands them out only as the `Slots` of its `SqMem`, whose own bounds apply.
    unsafe impl Send for Block {}
    // SAFETY: `&Block` gives no access to the bytes.
    unsafe impl Sync for Block {}

    impl Block {
        /// `layout` from the global allocator.
        fn global(layout: Layout) -> Result<Block> {
            if layout.size() == 0 {
                // Nothing to allocate: an aligned dangling pointer (no slot is ever read).
                return Ok(Block { ptr: NonNull::<u64>::dangling().cast(), layout, source: Source::Global });
            }
            // SAFETY: the size is not zero (checked above).
            let p = unsafe { std::alloc::alloc(layout) };
            let ptr = NonNull::new(p).ok_or(Error::Exhausted { what: "memory for the send queue" })?;
            Ok(Block { ptr, layout, source: Source::Global })
        }

        /// `layout` from `alloc`; `None` when it answers `UseDefault`.
        ///
        /// Errors: `ENOMEM` when it fails (or panics); `EINVAL` for a buffer that is not
        /// aligned as asked (given back to it at once).
        fn from_parent(alloc: &SharedAllocator, layout: Layout) -> Result<Option<Block>> {
            let buf = QueueBuffer { size: layout.size(), alignment: layout.align(), resource_type: QueueBuffer::SEND_QUEUE };
            let got = catch_unwind(AssertUnwindSafe(|| alloc.alloc(&buf))).unwrap_or(Allocation::Failed);
            match got {
                Allocation::UseDefault => Ok(None),
                Allocation::Failed => Err(Error::Exhausted { what: "the parent domain allocator's memory (its alloc failed)" }),
                Allocation::Buffer(ptr) => {
                    let block = Block { ptr, layout, source: Source::Parent { alloc: alloc.clone(), buf } };
                    if !(ptr.as_ptr() as usize).is_multiple_of(layout.align()) {
                        let addr = ptr.as_ptr() as usize;
                        drop(block);
                        return Err(Error::invalid("create_qp", Rule::MisalignedQueueBuffer { addr, alignment: layout.align() }));
                    }
                    Ok(Some(block))
                }
            }
        }

        /// `len` slots of `T` at byte `offset`, each written with `init()`.
        ///
        /// # Safety
        /// `offset` is aligned for `T` and `offset + len * size_of::<T>()` lies within the
        /// block; no other `Slots` of the block covers those bytes.
        unsafe fn carve<T>(&self, offset: usize, len: usize, init: impl Fn() -> T) -> Slots<T> {
            if len == 0 {
                return Slots { ptr: NonNull::dangling(), len: 0, _own: PhantomData };
            }
            // SAFETY: within the block (caller contract); aligned for `T` because the
            // block's address is aligned to its layout's alignment (`global` / checked in
            // `from_parent`), which is at least `T`'s, and `offset` is aligned for `T`.
            let ptr: NonNull<T> = unsafe { self.ptr.add(offset) }.cast();
            for i in 0..len {
                // SAFETY: slot `i` is within the range (caller contract), writable (the
                // block is valid for writes) and not yet initialised: `write` drops nothing.
                unsafe { ptr.add(i).write(init()) };
            }
            Slots { ptr, len, _own: PhantomData }
        }

        fn is_parent(&self) -> bool {
            matches!(self.source, Source::Parent { .. })
        }
    }

    impl Drop for Block {
        fn drop(&mut self) {
            match &self.source {
                Source::Global if self.layout.size() == 0 => {}
                // SAFETY: allocated by `std::alloc::alloc` with this layout (`global`).
                Source::Global => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) },
                Source::Parent { alloc, buf } => {
                    // Once, with the pointer and request `alloc` answered (QueueAllocator's
                    // contract). A panic stays here: this runs in destroy and in drops.
                    if catch_unwind(AssertUnwindSafe(|| alloc.free(self.ptr, buf))).is_err() {
                        tracing::error!("a parent domain allocator's free panicked; its buffer is left to it");
                    }
                }
            }
        }
    }

    /// Initialised slots of `T` inside a [`Block`]: a slice that owns its values (dropped
    /// with it) but not its memory.
    pub(crate) struct Slots<T> {
        ptr: NonNull<T>,
        len: usize,
        _own: PhantomData<T>,
    }

    // SAFETY: owns its values as a `Vec<T>` does; the bytes are its block's, which outlives it.
    unsafe impl<T: Send> Send for Slots<T> {}
    // SAFETY: as for `Vec<T>`: `&Slots<T>` gives `&[T]` only.
    unsafe impl<T: Sync> Sync for Slots<T> {}

    impl<T> Deref for Slots<T> {
        type Target = [T];

        #[inline]
        fn deref(&self) -> &[T] {
            // SAFETY: `len` initialised values at `ptr` (`Block::carve`), alive while the
            // block is (module invariant).
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> DerefMut for Slots<T> {
        #[inline]
        fn deref_mut(&mut self) -> &mut [T] {
            // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> Drop for Slots<T> {
        fn drop(&mut self) {
            // SAFETY: the values are initialised and dropped once, here; the bytes stay
            // valid until the block, dropped after the slots, gives them back.
            unsafe { std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) }
        }
    }

    /// The arrays of a send queue's ring, in one block: `cap` work requests, `cap × max_sge`
    /// scatter entries, `cap × max_inline` inline bytes.
    pub(crate) struct SqMem {
        pub(crate) wqes: Slots<SendWqe>,
        pub(crate) sges: Slots<Sge>,
        pub(crate) inline: Slots<u8>,
        /// Declared last: dropped after the slots that point into it.
        block: Block,
    }

    impl SqMem {
        /// The arrays for `cap` requests, from `alloc` when it gives a buffer, else from the
        /// global allocator.
        ///
        /// Errors: as [`QueueAllocator`] answers (`ENOMEM`, or `EINVAL` for a buffer not
        /// aligned as asked); `ENOMEM` when the global allocator has no memory.
        pub(crate) fn new(cap: usize, max_sge: usize, max_inline: usize, alloc: Option<&SharedAllocator>) -> Result<SqMem> {
            let too_big = || Error::Exhausted { what: "address space for the send queue" };
            let array = |l: std::result::Result<Layout, _>| l.map_err(|_| too_big());
            let wqes = array(Layout::array::<SendWqe>(cap))?;
            let (l, sge_at) = wqes.extend(array(Layout::array::<Sge>(cap.checked_mul(max_sge).ok_or_else(too_big)?))?).map_err(|_| too_big())?;
            let inline_len = cap.checked_mul(max_inline).ok_or_else(too_big)?;
            let (l, inline_at) = l.extend(array(Layout::array::<u8>(inline_len))?).map_err(|_| too_big())?;
            let layout = l.align_to(QueueBuffer::ALIGNMENT).map_err(|_| too_big())?.pad_to_align();
            let from_parent = match alloc {
                Some(a) if layout.size() != 0 => Block::from_parent(a, layout)?,
                _ => None,
            };
            let block = match from_parent {
                Some(b) => b,
                None => Block::global(layout)?,
            };
            // SAFETY: the offsets come from `Layout::extend`, so each array is aligned for
            // its type, lies within `layout.size()` bytes and overlaps no other.
            unsafe {
                Ok(SqMem {
                    wqes: block.carve(0, cap, SendWqe::default),
                    sges: block.carve(sge_at, cap * max_sge, Sge::default),
                    inline: block.carve(inline_at, inline_len, || 0u8),
                    block,
                })
            }
        }

        /// Whether the block is lent by a parent domain's allocator.
        pub(crate) fn lent(&self) -> bool {
            self.block.is_parent()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::Mutex;

        /// What [`Recording`] answers instead of a fresh buffer.
        #[derive(Clone, Copy)]
        enum Fixed {
            At(usize),
            UseDefault,
            Failed,
        }

        /// Hands out global-allocator buffers (or a fixed answer) and records every call.
        #[derive(Default)]
        struct Recording {
            answer: Mutex<Option<Fixed>>,
            allocs: Mutex<Vec<(QueueBuffer, Option<usize>)>>,
            frees: Mutex<Vec<(usize, QueueBuffer)>>,
            panic: bool,
        }

        // SAFETY: `Buffer` answers are leaked `Layout` allocations of the size and alignment
        // asked, owned by nobody until `free` takes them back.
        unsafe impl QueueAllocator for Recording {
            fn alloc(&self, buf: &QueueBuffer) -> Allocation {
                assert!(!self.panic, "allocator panics on purpose");
                let a = match *self.answer.lock().unwrap() {
                    Some(Fixed::At(p)) => Allocation::Buffer(NonNull::new(p as *mut u8).unwrap()),
                    Some(Fixed::UseDefault) => Allocation::UseDefault,
                    Some(Fixed::Failed) => Allocation::Failed,
                    None => {
                        let layout = Layout::from_size_align(buf.size, buf.alignment).unwrap();
                        // SAFETY: the size is not zero (QueueBuffer::size).
                        Allocation::Buffer(NonNull::new(unsafe { std::alloc::alloc(layout) }).unwrap())
                    }
                };
                let p = match a {
                    Allocation::Buffer(p) => Some(p.as_ptr() as usize),
                    _ => None,
                };
                self.allocs.lock().unwrap().push((*buf, p));
                a
            }

            fn free(&self, ptr: NonNull<u8>, buf: &QueueBuffer) {
                self.frees.lock().unwrap().push((ptr.as_ptr() as usize, *buf));
                if self.answer.lock().unwrap().is_none() {
                    let layout = Layout::from_size_align(buf.size, buf.alignment).unwrap();
                    // SAFETY: allocated in `alloc` with this layout.
                    unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
                }
            }
        }

        #[test]
        fn sq_mem_from_an_allocator_lives_in_its_buffer_and_is_freed_once() {
            let rec = Arc::new(Recording::default());
            let shared: SharedAllocator = rec.clone();
            let mut m = SqMem::new(4, 2, 32, Some(&shared)).unwrap();
            assert!(m.lent());
            let allocs = rec.allocs.lock().unwrap().clone();
            assert_eq!(allocs.len(), 1);
            let (buf, p) = allocs[0];
            let base = p.unwrap();
            assert_eq!((buf.alignment, buf.resource_type), (QueueBuffer::ALIGNMENT, QueueBuffer::SEND_QUEUE));
            assert_eq!(base % buf.alignment, 0);
            assert!(buf.size >= 4 * std::mem::size_of::<SendWqe>() + 8 * std::mem::size_of::<Sge>() + 128);
            m.inline[127] = 0xee;
            m.sges[7].lkey = 0x1234;
            let inside = |a: usize| a >= base && a < base + buf.size;
            assert!(inside(&m.inline[127] as *const u8 as usize));
            assert!(inside(&m.sges[7] as *const Sge as usize));
            assert!(inside(&m.wqes[3] as *const SendWqe as usize));
            // SAFETY: the buffer is `buf.size` bytes at `base`, alive until the drop below.
            let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, buf.size) };
            assert!(bytes.contains(&0xee));
            assert!(rec.frees.lock().unwrap().is_empty());
            drop(m);
            assert_eq!(*rec.frees.lock().unwrap(), vec![(base, buf)]);
        }

        #[test]
        fn sq_mem_use_default_takes_global_memory_and_frees_nothing() {
            let rec = Arc::new(Recording { answer: Mutex::new(Some(Fixed::UseDefault)), ..Default::default() });
            let shared: SharedAllocator = rec.clone();
            let m = SqMem::new(4, 1, 0, Some(&shared)).unwrap();
            assert!(!m.lent());
            assert_eq!(m.wqes.len(), 4);
            drop(m);
            assert_eq!(rec.allocs.lock().unwrap().len(), 1);
            assert!(rec.frees.lock().unwrap().is_empty());
        }

        #[test]
        fn sq_mem_failed_allocation_is_enomem_without_free() {
            let rec = Arc::new(Recording { answer: Mutex::new(Some(Fixed::Failed)), ..Default::default() });
            let shared: SharedAllocator = rec.clone();
            let e = SqMem::new(4, 1, 0, Some(&shared)).err().unwrap();
            assert_eq!(e.errno(), libc::ENOMEM);
            assert!(rec.frees.lock().unwrap().is_empty());
        }

        #[test]
        fn sq_mem_panicking_allocator_is_enomem() {
            let rec = Arc::new(Recording { panic: true, ..Default::default() });
            let shared: SharedAllocator = rec.clone();
            let e = SqMem::new(4, 1, 0, Some(&shared)).err().unwrap();
            assert_eq!(e.errno(), libc::ENOMEM);
        }

        #[test]
        fn sq_mem_misaligned_buffer_is_einval_and_given_back() {
            // 8-aligned but not 64-aligned: inside a static array, never really freed.
            #[repr(align(64))]
            struct Arena([u8; 8192]);
            static mut ARENA: Arena = Arena([0; 8192]);
            // SAFETY: only the address is taken.
            let p = unsafe { NonNull::new(std::ptr::addr_of_mut!(ARENA.0).cast::<u8>().add(8)).unwrap() };
            let rec = Arc::new(Recording { answer: Mutex::new(Some(Fixed::At(p.as_ptr() as usize))), ..Default::default() });
            let shared: SharedAllocator = rec.clone();
            let e = SqMem::new(2, 1, 0, Some(&shared)).err().unwrap();
            assert_eq!(e.errno(), libc::EINVAL);
            let frees = rec.frees.lock().unwrap();
            assert_eq!(frees.len(), 1);
            assert_eq!(frees[0].0, p.as_ptr() as usize);
        }

        #[test]
        fn sq_mem_empty_allocates_nothing() {
            let rec = Arc::new(Recording::default());
            let shared: SharedAllocator = rec.clone();
            let m = SqMem::new(0, 1, 0, Some(&shared)).unwrap();
            assert!(m.wqes.is_empty() && m.sges.is_empty() && m.inline.is_empty());
            assert!(rec.allocs.lock().unwrap().is_empty());
        }
    }
}
