//! The verbs rules an invalid argument breaks, as values.
//!
//! Every `EINVAL` the API returns is an [`Error::Invalid`](crate::Error::Invalid) that
//! carries one `Rule`: the rule's name is the variant, and the values that broke it
//! (which attribute, which limit, what was asked) are its fields, so that a caller or a
//! test can tell the rules apart by matching, and a message names what to change. Each
//! variant cites the man page or specification the rule comes from.

use rverbs_proto::verbs::{QpState, QpType, WrOpcode};

use crate::gid::Gid;

/// A rule of the verbs API that an argument broke (always reported as `EINVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rule {
    // ---- device, port and tables (ibv_query_port(3), ibv_query_gid(3), ibv_query_pkey(3))
    /// The device has one port, number 1.
    #[error("the device has one port, number 1 (got {port})")]
    PortNumber {
        /// The port asked for.
        port: u8,
    },
    /// A GID index must name an entry of the GID table.
    #[error("GID index {index} beyond the GID table ({len} entries)")]
    GidIndex {
        /// The index asked for.
        index: u32,
        /// Entries in the table.
        len: u32,
    },
    /// The P_Key table has one entry (index 0, the default P_Key 0xffff).
    #[error("P_Key index {index}: the P_Key table has one entry")]
    PkeyIndex {
        /// The index asked for.
        index: u16,
    },
    /// No device has this name (ibv_get_device_list(3)).
    #[error("no device with that name")]
    NoSuchDevice,
    /// A device configured to serve no address (`DeviceConfig::addresses`): its GID table
    /// would hold no address to reach it by.
    #[error("a device must serve at least one address")]
    NoAddresses,

    // ---- objects belong to one context (ibv_create_qp(3), ibv_create_cq(3), ibv_rereg_mr(3))
    /// An object handed to a verb belongs to another device context.
    #[error("the {what} belongs to another context")]
    ForeignContext {
        /// Which argument.
        what: &'static str,
    },
    /// An object handed to a verb was destroyed or closed.
    #[error("the {what} was destroyed or closed")]
    Closed {
        /// Which argument.
        what: &'static str,
    },

    // ---- parent domains (ibv_alloc_parent_domain(3))
    /// A parent domain's allocator answered a buffer that is not aligned as asked.
    #[error("the parent domain allocator's buffer at {addr:#x} is not aligned to {alignment} bytes")]
    MisalignedQueueBuffer {
        /// The buffer's address.
        addr: usize,
        /// The alignment asked for.
        alignment: usize,
    },

    // ---- address vectors (ibv_create_ah(3))
    /// On RoCE every address vector carries a GRH (`is_global`).
    #[error("RoCE address vectors need a GRH (is_global)")]
    GrhRequired,

    // ---- memory regions and windows (ibv_reg_mr(3), ibv_rereg_mr(3), ibv_alloc_mw(3))
    /// A registration of zero bytes.
    #[error("zero length")]
    ZeroLength,
    /// `[addr, addr + len)` wraps around the address space.
    #[error("the range {addr:#x} + {len} wraps the address space")]
    RangeWraps {
        /// Start of the range.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// A range must lie inside the memory region.
    #[error("range {offset} + {len} outside the memory region of {region_len} bytes")]
    OutsideRegion {
        /// Offset of the range in the region.
        offset: u64,
        /// Its length.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// ibv_reg_mr(3): REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
    #[error("REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE")]
    RemoteWriteNeedsLocalWrite,
    /// ibv_reg_mr(3): only the `IBV_ACCESS_*` bits are defined (the kernel's
    /// `ib_check_mr_access` refuses the others with EINVAL).
    #[error("unknown access flags {flags:#x}")]
    UnknownAccessFlags {
        /// The unknown bits asked for.
        flags: u32,
    },
    /// ibv_reg_mr(3): FLUSH_PERSISTENT needs persistent memory (the device has none).
    #[error("FLUSH_PERSISTENT needs persistent memory")]
    FlushPersistentNeedsPmem,
    /// A 64-bit access at an offset that is not 8-byte aligned.
    #[error("offset {offset} not 8-byte aligned")]
    Unaligned {
        /// The offset.
        offset: u64,
    },
    /// ibv_rereg_mr(3): the flags ask for no change.
    #[error("no change requested")]
    NoChange,
    /// ibv_rereg_mr(3): IBV_REREG_MR_CHANGE_TRANSLATION needs a new address range.
    #[error("TRANSLATION needs a new address range")]
    TranslationNeedsRange,
    /// ibv_rereg_mr(3): IBV_REREG_MR_CHANGE_PD needs a PD.
    #[error("PD change without a PD")]
    PdChangeWithoutPd,
    /// ibv_rereg_mr(3): IBV_REREG_MR_CHANGE_ACCESS needs access flags.
    #[error("ACCESS change without flags")]
    AccessChangeWithoutFlags,
    /// ibv_dereg_mr(3): a region with bound type 2 windows cannot be deregistered.
    #[error("memory windows are bound to the region")]
    WindowsBound,
    /// ibv_alloc_mw(3): memory window types are 1 and 2.
    #[error("memory window type {mw_type}: types are 1 and 2")]
    MwType {
        /// The type asked for.
        mw_type: u32,
    },
    /// ibv_bind_mw(3): the verb binds type 1 windows (type 2 are bound by a work request).
    #[error("bind_mw binds type 1 windows")]
    BindType1Only,
    /// ibv_bind_mw(3): a non-empty range needs a memory region.
    #[error("a range needs a memory region")]
    BindNeedsMr,
    /// ibv_bind_mw(3): type 1 windows cannot be zero-based.
    #[error("type 1 windows cannot be zero-based")]
    Type1ZeroBased,

    // ---- XRC domains (ibv_open_xrcd(3))
    /// O_EXCL and a domain already exists for the file.
    #[error("a domain exists for the file (O_EXCL)")]
    XrcdExists,

    // ---- completion queues (ibv_create_cq(3), ibv_resize_cq(3))
    /// `cqe` must be at least 1 and at most the device's `max_cqe`.
    #[error("cqe {cqe} out of range 1..={max}")]
    CqeRange {
        /// Entries asked for.
        cqe: u32,
        /// The device limit.
        max: u32,
    },
    /// `comp_vector` must be below `num_comp_vectors`.
    #[error("comp_vector {vector} >= num_comp_vectors {count}")]
    CompVector {
        /// The vector asked for.
        vector: u32,
        /// The context's completion vectors.
        count: u32,
    },
    /// ibv_resize_cq(3): a CQ cannot shrink below the completions it holds.
    #[error("{cqe} entries are fewer than the {queued} completions in the CQ")]
    CqeBelowQueued {
        /// Entries asked for.
        cqe: u32,
        /// Completions in the CQ.
        queued: u32,
    },

    // ---- shared receive queues (ibv_create_srq(3), ibv_modify_srq(3))
    /// `max_wr` must be between 1 and the device's `max_srq_wr`.
    #[error("max_wr {max_wr} out of range 1..={max}")]
    SrqMaxWr {
        /// Work requests asked for.
        max_wr: u32,
        /// The device limit.
        max: u32,
    },
    /// ibv_modify_srq(3): an SRQ cannot shrink below the receives it holds.
    #[error("max_wr {max_wr} below the {queued} receives queued")]
    SrqBelowQueued {
        /// Work requests asked for.
        max_wr: u32,
        /// Receives queued.
        queued: u32,
    },
    /// ibv_modify_srq(3): the limit must not exceed `max_wr`.
    #[error("srq_limit {limit} above max_wr {max_wr}")]
    SrqLimit {
        /// The limit asked for.
        limit: u32,
        /// The SRQ's size.
        max_wr: u32,
    },

    // ---- queue pairs (ibv_create_qp(3), ibv_create_qp_ex(3), ibv_modify_qp(3))
    /// XRC target QPs are created in an XRC domain.
    #[error("XRC target QPs are created in an XRC domain")]
    XrcTgtNeedsXrcd,
    /// XRC initiator QPs have no receive side.
    #[error("XRC initiators do not receive")]
    XrcIniReceives,
    /// RoCE has no alternate paths (automatic path migration).
    #[error("alternate paths are not available on RoCE")]
    NoAlternatePath,
    /// An attribute above the device's limit.
    #[error("{attr} {value} above the device limit {max}")]
    AttrLimit {
        /// Which attribute (`max_rd_atomic`, `max_dest_rd_atomic`, `timeout` …).
        attr: &'static str,
        /// The value asked for.
        value: u32,
        /// The limit.
        max: u32,
    },
    /// `qp_access_flags` may only hold remote-access flags the device supports.
    #[error("unsupported access flags {flags:#x}")]
    AccessFlags {
        /// The flags asked for.
        flags: u32,
    },
    /// `Qp::connect_until` walks the ladder up to INIT, RTR or RTS only.
    #[error("a QP is connected up to INIT, RTR or RTS, not {last:?}")]
    ConnectTarget {
        /// The state asked for.
        last: QpState,
    },
    /// ibv_post_recv(3): a QP whose receives come from an SRQ (or an XRC QP) has no
    /// receive queue of its own.
    #[error("the QP has no receive queue (SRQ or XRC)")]
    NoReceiveQueue,

    // ---- work requests (ibv_post_send(3), ibv_wr_post(3))
    /// The opcode is not allowed on this QP type (ibv_post_send(3) opcode table).
    #[error("opcode {opcode:?} not allowed on a {qp_type:?} QP")]
    OpcodeForQpType {
        /// The opcode.
        opcode: WrOpcode,
        /// The QP type.
        qp_type: QpType,
    },
    /// The opcode carries no scatter/gather data (BIND_MW, LOCAL_INV, FLUSH,
    /// ATOMIC_WRITE carries its 8 bytes in the request).
    #[error("{opcode:?} carries no scatter/gather data")]
    NoDataFor {
        /// The opcode.
        opcode: WrOpcode,
    },
    /// A FLUSH work request needs its parameters (type and level).
    #[error("FLUSH needs its parameters")]
    FlushParams,
    /// Device memory is aligned to at most a page (ibv_alloc_dm(3) `log_align_req`).
    #[error("device memory alignment 2^{log_align_req}: at most 2^{max} bytes")]
    DmAlignment {
        /// The alignment asked for, as a power of two.
        log_align_req: u32,
        /// The largest power of two.
        max: u32,
    },
    /// One allocation of device memory is at most `max_dm_size` bytes (ibv_alloc_dm(3);
    /// mlx5's `alloc_dm_memic` in rdma-core's providers/mlx5/verbs.c refuses a larger
    /// length with EINVAL before asking the kernel).
    #[error("device memory of {len} bytes: max_dm_size is {max}")]
    DmTooLarge {
        /// The length asked for.
        len: u64,
        /// The device's `max_dm_size`.
        max: u64,
    },
    /// A memory region over device memory has local and remote read, write and atomic
    /// access, ZERO_BASED and the optional-range flags, nothing else (no ON_DEMAND,
    /// MW_BIND, HUGETLB or FLUSH: mlx5's `mlx5_reg_dm_mr`, `MLX5_DM_ALLOWED_ACCESS`).
    #[error("access flags {flags:#x} are not allowed on a memory region over device memory")]
    DmMrAccess {
        /// The bits that are not allowed.
        flags: u32,
    },
    /// An owned region ([`Pd::reg_owned`](crate::Pd::reg_owned), docs/rust-api.md,
    /// "Owned buffers") has no MW_BIND (a bound window would keep it from being
    /// deregistered when its buffer is given back) and no ON_DEMAND (its pages are
    /// there: it owns them).
    #[error("access flags {flags:#x} are not allowed on an owned memory region")]
    OwnedMrAccess {
        /// The bits that are not allowed.
        flags: u32,
    },
    /// Device memory is copied in 4-byte units (ibv_memcpy_to_dm, ibv_memcpy_from_dm).
    #[error("device memory is copied in 4-byte units (offset {offset}, length {len})")]
    DmCopyUnit {
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
    },
    /// A device-memory range must lie inside the allocation (the copies, ibv_reg_dm_mr).
    #[error("device memory range [{offset}, {offset} + {len}) beyond its {size} bytes")]
    DmRange {
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
        /// The allocation's size.
        size: u64,
    },
    /// ibv_advise_mr(3): the lkeys name memory regions; the key of a memory window is
    /// EINVAL ("the requested address doesn't belong to a MR, but a MW"; the kernel's
    /// mlx5 `get_prefetchable_mr`).
    #[error("key {key:#x} names a memory window, not a memory region")]
    KeyNamesWindow {
        /// The key.
        key: u32,
    },
    /// ibv_post_srq_ops(3) operates on tag-matching SRQs only (IBV_SRQT_TM).
    #[error("the SRQ is not a tag-matching SRQ (IBV_SRQT_TM)")]
    NotTagMatching,
    /// A memory region over device memory is zero-based (ibv_reg_dm_mr: `access` must
    /// include IBV_ACCESS_ZERO_BASED).
    #[error("a memory region over device memory needs IBV_ACCESS_ZERO_BASED")]
    DmMrZeroBased,
    /// Atomic operations move exactly 8 bytes.
    #[error("atomic operations move exactly 8 bytes (got {len})")]
    AtomicLength {
        /// The length of the local buffer.
        len: u64,
    },
    /// The remote address of an atomic must be 8-byte aligned.
    #[error("atomic remote address {addr:#x} not 8-byte aligned")]
    AtomicAlignment {
        /// The remote address.
        addr: u64,
    },
    /// IBV_SEND_INLINE on an opcode that sends no data.
    #[error("inline data on {opcode:?}, which sends none")]
    InlineWithoutData {
        /// The opcode.
        opcode: WrOpcode,
    },
    /// A UD send names its destination with an address handle.
    #[error("UD sends need an address handle")]
    UdNeedsAh,
    /// Inline data given as an SGE must lie in a registered region of this process.
    #[error("inline SGE outside a registered region")]
    InlineOutsideRegion,
    /// ibv_wr_start(3) on a QP created without `send_ops_flags`.
    #[error("the QP was created without send_ops_flags")]
    NoSendOps,
    /// An `ibv_wr_*` builder whose operation is not in the QP's `send_ops_flags`.
    #[error("operation not in the QP's send_ops_flags")]
    OpNotInSendOps,
    /// A pointer argument (an AH, an MR, a memory window) that is NULL or names no live
    /// object of its kind (the C ABI's check; ibv_wr_post(3) reports it at
    /// `ibv_wr_complete`).
    #[error("unusable pointer argument: {what}")]
    UnusablePointer {
        /// Which argument.
        what: &'static str,
    },
    /// An `ibv_wr_set_*` with no work request started.
    #[error("no work request to set")]
    NoWrToSet,

    // ---- multicast (ibv_attach_mcast(3))
    /// Only UD QPs join multicast groups.
    #[error("only UD QPs join multicast groups")]
    McastNeedsUd,
    /// The GID is not a multicast GID (`ff00::/8`).
    #[error("{gid} is not a multicast GID")]
    NotMulticast {
        /// The GID.
        gid: Gid,
    },
    /// ibv_detach_mcast(3): no such group.
    #[error("no group {gid}")]
    NoSuchGroup {
        /// The GID.
        gid: Gid,
    },
    /// ibv_detach_mcast(3): the QP is not a member of the group.
    #[error("QP {qpn:#x} is not a member of the group")]
    NotAMember {
        /// The QP.
        qpn: u32,
    },

    // ---- awaiting completions (`aio`, ibv_get_cq_event(3))
    /// An async CQ waits on the CQ's own completion channel.
    #[error("the completion channel is not the CQ's")]
    NotTheCqsChannel,
    /// An async CQ reads every event of its channel, so the channel serves that CQ alone.
    #[error("the completion channel serves {cqs} CQs; an async CQ needs one of its own")]
    SharedChannel {
        /// CQs attached to the channel.
        cqs: u32,
    },
    /// A poll needs room for at least one completion.
    #[error("no room for a completion (empty array)")]
    NoRoomForCompletion,

    // ---- QP1 endpoints (rverbs-cm)
    /// An endpoint cannot watch itself.
    #[error("endpoint {ep} is the caller's own")]
    OwnEndpoint {
        /// The endpoint.
        ep: u32,
    },
}
