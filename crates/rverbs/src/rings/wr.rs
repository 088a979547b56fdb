//! Work requests as the Rust API takes them (`struct ibv_send_wr`, `struct ibv_recv_wr`).

use rverbs_proto::verbs::{SendFlags, WrOpcode};

use bitflags::bitflags;

use crate::mr::endpoint::Endpoint;
use crate::mr::Sge;
use crate::mw::{Mw, MwBind};
use crate::rings::qp_attr::AddressVector;

/// Where a send work request's data comes from.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Registered memory named by SGEs, read when the request executes. With
    /// `SendFlags::INLINE` the bytes are read (through the same checks) at post time.
    Sge(&'a [Sge]),
    /// Bytes copied into the work request at post time (`IBV_SEND_INLINE`); no memory
    /// region is needed.
    Inline(&'a [u8]),
    /// Several inline pieces, concatenated.
    InlineList(&'a [&'a [u8]]),
}

/// The destination of a UD send (`wr.ud`).
#[derive(Clone, Copy, Debug)]
pub struct UdDest<'a> {
    /// Address vector of the destination: the address handle's (`(&ah).into()`).
    pub ah: &'a AddressVector,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key the destination QP must have.
    pub remote_qkey: u32,
}

/// A memory-window bind carried by a BIND_MW work request (`wr.bind_mw`).
#[derive(Clone, Copy, Debug)]
pub struct BindMwWr<'a> {
    /// The window (type 2 for a work request; type 1 windows use `Qp::bind_mw`).
    pub mw: &'a Mw,
    /// The new key: its low byte replaces the window key's low byte.
    pub rkey: u32,
    /// What to bind.
    pub bind: MwBind<'a>,
}

bitflags! {
    /// Where a FLUSH makes data visible (`enum ibv_placement_type`, rdma-core ≥ 45).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct FlushPlacement: u8 {
        /// Global visibility.
        const GLOBAL = 1;
        /// Persistence.
        const PERSISTENT = 1 << 1;
    }
}

/// What a FLUSH covers (`enum ibv_selectivity_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlushSelectivity {
    /// The range `[remote_addr, remote_addr + len)`.
    #[default]
    Range,
    /// The whole memory region the rkey names (address and length ignored).
    WholeMr,
}

/// The parameters of a FLUSH work request (`ibv_wr_flush`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FlushWr {
    /// Bytes to flush.
    pub len: u32,
    /// Placement type.
    pub placement: FlushPlacement,
    /// Selectivity level.
    pub selectivity: FlushSelectivity,
}

/// A send work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Flags (SIGNALED, SOLICITED, FENCE, INLINE).
    pub flags: SendFlags,
    /// The data.
    pub payload: Payload<'a>,
    /// Immediate data (`*_WITH_IMM`, carried verbatim) or the rkey to invalidate
    /// (`SEND_WITH_INV`, `LOCAL_INV`).
    pub imm_data: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Compare value (compare-and-swap) or addend (fetch-and-add).
    pub compare_add: u64,
    /// Swap value (compare-and-swap).
    pub swap: u64,
    /// Destination of a UD send.
    pub ud: Option<UdDest<'a>>,
    /// The bind of a BIND_MW work request.
    pub bind: Option<BindMwWr<'a>>,
    /// The parameters of a FLUSH work request.
    pub flush: Option<FlushWr>,
    /// The SRQ number at the target of an XRC send (`wr.qp_type.xrc.remote_srqn`).
    pub xrc_remote_srqn: u32,
}

impl<'a> SendWr<'a> {
    /// A work request of `opcode` with no data and no flags.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> Self {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::empty(),
            payload: Payload::Sge(&[]),
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            bind: None,
            flush: None,
            xrc_remote_srqn: 0,
        }
    }

    /// A SEND of the bytes named by `sg_list`.
    pub fn send(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        SendWr { payload: Payload::Sge(sg_list), ..Self::new(wr_id, WrOpcode::Send) }
    }

    /// An RDMA WRITE of `sg_list` to `remote_addr` under `rkey`.
    pub fn write(wr_id: u64, sg_list: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            payload: Payload::Sge(sg_list),
            remote_addr,
            rkey,
            ..Self::new(wr_id, WrOpcode::RdmaWrite)
        }
    }

    /// An RDMA READ of `remote_addr` under `rkey` into `sg_list`.
    pub fn read(wr_id: u64, sg_list: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            payload: Payload::Sge(sg_list),
            remote_addr,
            rkey,
            ..Self::new(wr_id, WrOpcode::RdmaRead)
        }
    }

    /// An atomic fetch-and-add of `add` at `remote_addr`; the original value lands in
    /// the 8 bytes named by `result`.
    pub fn fetch_add(wr_id: u64, result: &'a [Sge], remote_addr: u64, rkey: u32, add: u64) -> Self {
        SendWr {
            payload: Payload::Sge(result),
            remote_addr,
            rkey,
            compare_add: add,
            ..Self::new(wr_id, WrOpcode::AtomicFetchAndAdd)
        }
    }

    /// An atomic compare-and-swap at `remote_addr`.
    pub fn compare_swap(
        wr_id: u64,
        result: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            payload: Payload::Sge(result),
            remote_addr,
            rkey,
            compare_add: compare,
            swap,
            ..Self::new(wr_id, WrOpcode::AtomicCmpAndSwp)
        }
    }

    /// An ATOMIC_WRITE of the 8 bytes `value` (stored verbatim) at `remote_addr`.
    pub fn atomic_write(wr_id: u64, remote_addr: u64, rkey: u32, value: [u8; 8]) -> Self {
        SendWr {
            remote_addr,
            rkey,
            swap: u64::from_ne_bytes(value),
            ..Self::new(wr_id, WrOpcode::AtomicWrite)
        }
    }

    /// A FLUSH of `flush.len` bytes at `remote_addr` (or of the whole region).
    pub fn flush(wr_id: u64, remote_addr: u64, rkey: u32, flush: FlushWr) -> Self {
        SendWr { remote_addr, rkey, flush: Some(flush), ..Self::new(wr_id, WrOpcode::Flush) }
    }

    /// A LOCAL_INV of `rkey` (a type 2 memory window).
    pub fn local_inv(wr_id: u64, rkey: u32) -> Self {
        SendWr { imm_data: rkey, ..Self::new(wr_id, WrOpcode::LocalInv) }
    }

    /// A BIND_MW of a type 2 window with the new key `rkey`.
    pub fn bind_mw(wr_id: u64, mw: &'a Mw, rkey: u32, bind: MwBind<'a>) -> Self {
        SendWr { bind: Some(BindMwWr { mw, rkey, bind }), ..Self::new(wr_id, WrOpcode::BindMw) }
    }

    /// Turns a SEND into SEND_WITH_INV of the peer's `rkey`.
    pub fn with_inv(mut self, rkey: u32) -> Self {
        self.opcode = WrOpcode::SendWithInv;
        self.imm_data = rkey;
        self
    }

    /// Sets the SRQ number at the target of an XRC send.
    pub fn xrc(mut self, remote_srqn: u32) -> Self {
        self.xrc_remote_srqn = remote_srqn;
        self
    }

    /// Adds immediate data, turning SEND into SEND_WITH_IMM and RDMA_WRITE into
    /// RDMA_WRITE_WITH_IMM.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.opcode = match self.opcode {
            WrOpcode::Send => WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite => WrOpcode::RdmaWriteWithImm,
            other => other,
        };
        self.imm_data = imm;
        self
    }

    /// Sets `SIGNALED`.
    pub fn signaled(mut self) -> Self {
        self.flags |= SendFlags::SIGNALED;
        self
    }

    /// Adds flags.
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.flags |= flags;
        self
    }

    /// Replaces the data with inline bytes (sets `INLINE`).
    pub fn inline(mut self, data: &'a [u8]) -> Self {
        self.payload = Payload::Inline(data);
        self.flags |= SendFlags::INLINE;
        self
    }

    /// Sets the UD destination: the address handle (`&Ah`, or its address vector),
    /// the destination QP and its Q_Key.
    pub fn ud(mut self, ah: impl Into<&'a AddressVector>, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.ud = Some(UdDest { ah: ah.into(), remote_qpn, remote_qkey });
        self
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive into `sg_list`.
    pub fn new(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        RecvWr { wr_id, sg_list }
    }
}

/// A rejected post: the index of the first refused work request and why. The work
/// requests before it were posted (ibv_post_send(3): `*bad_wr`).
#[derive(Debug, thiserror::Error)]
#[error("work request {index} refused: {error}")]
pub struct PostError {
    /// Index of the refused work request in the list.
    pub index: usize,
    /// Why it was refused.
    #[source]
    pub error: crate::error::Error,
}

/// Receive work requests about to be posted to `queue` `num`, recorded by the sanitizer
/// (docs/sanitizer.md, "What is tracked"): every receive is signaled, and the device
/// writes its buffers. Out of line: the post path only tests the switch.
///
/// `staged` holds the id of each receive's staging (0: posted as it is;
/// `rings::staging`); `None` if none was staged.
#[cold]
#[inline(never)]
pub(crate) fn track_recvs(me: &'static Endpoint, queue: crate::sanitizer::Queue, num: u32, wrs: &[RecvWr<'_>], staged: Option<&[u64]>) -> crate::sanitizer::Ticket {
    let verb = if queue == crate::sanitizer::Queue::SharedRecv { "ibv_post_srq_recv" } else { "ibv_post_recv" };
    for w in wrs {
        crate::mr::check_mapped(me, verb, (queue, num, w.wr_id), w.sg_list);
    }
    unstaged(me, wrs, staged);
    let wrs = wrs
        .iter()
        .enumerate()
        .map(|(i, w)| crate::sanitizer::Wr {
            staged: staged.and_then(|s| s.get(i).copied()).unwrap_or(0),
            wr_id: w.wr_id,
            signaled: true,
            sges: w.sg_list.iter().map(|g| (g.lkey, g.addr, g.length)).collect(),
            watched: Vec::new(),
            sinks: crate::mr::sink_ranges(me, w.sg_list),
            remote: None,
            mw: None,
        })
        .collect();
    crate::sanitizer::posting(queue, crate::sanitizer::Id::new(me.slot, num), wrs)
}

/// The remote range an RDMA READ, WRITE or atomic asks for, with a look-up of its rkey
/// in this process's keys (docs/sanitizer.md, remote-access-explained).
fn remote_of(me: &'static Endpoint, w: &SendWr<'_>, sges: &[Sge]) -> Option<crate::sanitizer::Remote> {
    let (op, need) = match w.opcode {
        WrOpcode::RdmaWrite => ("IBV_WR_RDMA_WRITE", "IBV_ACCESS_REMOTE_WRITE"),
        WrOpcode::RdmaWriteWithImm => ("IBV_WR_RDMA_WRITE_WITH_IMM", "IBV_ACCESS_REMOTE_WRITE"),
        WrOpcode::RdmaRead => ("IBV_WR_RDMA_READ", "IBV_ACCESS_REMOTE_READ"),
        WrOpcode::AtomicCmpAndSwp => ("IBV_WR_ATOMIC_CMP_AND_SWP", "IBV_ACCESS_REMOTE_ATOMIC"),
        WrOpcode::AtomicFetchAndAdd => ("IBV_WR_ATOMIC_FETCH_AND_ADD", "IBV_ACCESS_REMOTE_ATOMIC"),
        _ => return None,
    };
    let len = match (w.opcode, w.payload) {
        (WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd, _) => 8,
        (_, Payload::Inline(d)) => d.len() as u64,
        (_, Payload::InlineList(l)) => l.iter().map(|d| d.len() as u64).sum(),
        (_, Payload::Sge(_)) => sges.iter().map(|g| u64::from(g.length)).sum(),
    };
    let rkey = w.rkey;
    Some(crate::sanitizer::Remote { rkey, va: w.remote_addr, len, op, need, lookup: std::sync::Arc::new(move || crate::mr::key_record(me, rkey)) })
}

/// Send work requests about to be posted to QP `qpn`, recorded by the sanitizer: each
/// with whether it is signaled (`SIGNALED`, or `sq_sig_all`) and the SGEs that name
/// regions (inline data names none); the bytes a SEND or RDMA WRITE reads are watched,
/// the buffers an RDMA READ or atomic writes are sinks (docs/sanitizer.md,
/// "send-buffer-changed").
#[cold]
#[inline(never)]
pub(crate) fn track_sends(me: &'static Endpoint, qpn: u32, sq_sig_all: bool, wrs: &[SendWr<'_>]) -> crate::sanitizer::Ticket {
    let wrs = wrs
        .iter()
        .map(|w| {
            let sges: &[Sge] = match w.payload {
                Payload::Sge(s) if !w.flags.contains(SendFlags::INLINE) => s,
                _ => &[],
            };
            crate::mr::check_mapped(me, "ibv_post_send", (crate::sanitizer::Queue::Send, qpn, w.wr_id), sges);
            let (watched, sinks) = match w.opcode {
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => (crate::mr::watch_sges(me, sges), Vec::new()),
                WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => (Vec::new(), crate::mr::sink_ranges(me, sges)),
                _ => (Vec::new(), Vec::new()),
            };
            crate::sanitizer::Wr {
                staged: 0,
                wr_id: w.wr_id,
                signaled: sq_sig_all || w.flags.contains(SendFlags::SIGNALED),
                sges: sges.iter().map(|g| (g.lkey, g.addr, g.length)).collect(),
                watched,
                sinks,
                remote: remote_of(me, w, sges),
                mw: w.bind.as_ref().map(|b| std::sync::Arc::as_ptr(b.mw.inner()) as usize),
            }
        })
        .collect();
    crate::sanitizer::posting(crate::sanitizer::Queue::Send, crate::sanitizer::Id::new(me.slot, qpn), wrs)
}

/// Receives posted as they are: protected pages they would have the device write are
/// given back first (a peer writes them with cross-memory attach).
#[cold]
#[inline(never)]
fn unstaged(me: &crate::mr::endpoint::Endpoint, wrs: &[RecvWr<'_>], ids: Option<&[u64]>) {
    for (i, w) in wrs.iter().enumerate() {
        if ids.is_some_and(|ids| ids.get(i).is_some_and(|&id| id != 0)) {
            continue;
        }
        for g in w.sg_list.iter().filter(|g| g.length > 0) {
            if let Some(r) = crate::mr::local_range(me, g.lkey, g.addr, u64::from(g.length)) {
                crate::sanitizer::early::range_reached(r.addr, g.length as usize);
            }
        }
    }
}
