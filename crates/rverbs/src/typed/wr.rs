//! Work requests by opcode family (ibv_post_send(3), `struct ibv_send_wr`): each type
//! carries exactly the fields its operations use, and names the transports that may
//! carry it through [`PostOn`].
//!
//! Rule: ibv_post_send(3): `wr.rdma` (remote address and key) belongs to the RDMA
//! operations, `wr.atomic` (compare, swap or add) to the atomics, `wr.ud` (address
//! handle, remote QPN and Q_Key) to UD sends; an atomic's local buffer is one 8-byte
//! entry (IBTA Vol 1 §9.4.5: the original value is 8 bytes). A field an opcode does not
//! use cannot be set here, where [`SendWr`] has all of them.

use rverbs_proto::verbs::{SendFlags, WrOpcode};

use crate::error::{Error, Result};
use crate::mr::{Mr, Sge};
use crate::rings::wr::{Payload, SendWr, UdDest};
use crate::rule::Rule;

use super::{Connected, Reliable, Transport, Ud, Xrc};

mod sealed {
    /// Only this module's work requests are posted by type.
    pub trait Sealed {}
}

/// A work request that a QP of transport `T` can carry
/// ([`TypedQp::post`](super::TypedQp::post)). Sealed: the pairs are the ones
/// ibv_post_send(3) allows, and only they compile.
pub trait PostOn<T: Transport>: sealed::Sealed {
    /// The request as the runtime-typed API takes it.
    #[doc(hidden)]
    fn to_wr(&self) -> SendWr<'_>;
}

/// Where an RDMA or atomic operation acts: an address of the peer's registration and
/// its rkey (`wr.rdma`, `wr.atomic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The remote address (the peer's iova space).
    pub addr: u64,
    /// The peer's rkey (of a memory region or a bound window).
    pub rkey: u32,
}

impl Remote {
    /// `[addr, …)` under `rkey`.
    pub fn new(addr: u64, rkey: u32) -> Remote {
        Remote { addr, rkey }
    }

    /// The first byte of `mr` plus `offset` (a region of this process, handed to a peer).
    pub fn of(mr: &Mr, offset: u64) -> Remote {
        Remote { addr: mr.iova() + offset, rkey: mr.rkey() }
    }
}

/// The 8-byte local buffer an atomic returns the original value into: one SGE of
/// exactly 8 bytes (IBTA Vol 1 §9.4.5), checked when it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicResult(Sge);

impl AtomicResult {
    /// `sge` as an atomic's result buffer.
    ///
    /// Errors: `EINVAL` ([`Rule::AtomicLength`]) unless it names exactly 8 bytes.
    pub fn new(sge: Sge) -> Result<AtomicResult> {
        if sge.length != 8 {
            return Err(Error::invalid("AtomicResult::new", Rule::AtomicLength { len: u64::from(sge.length) }));
        }
        Ok(AtomicResult(sge))
    }

    /// The 8 bytes of `mr` at `offset`.
    ///
    /// Errors: `EINVAL` when they leave the region ([`Mr::sge`]).
    pub fn in_mr(mr: &Mr, offset: usize) -> Result<AtomicResult> {
        Ok(AtomicResult(mr.sge(offset, 8)?))
    }

    /// The SGE.
    pub fn sge(&self) -> Sge {
        self.0
    }
}

/// The flags every send work request may carry (ibv_post_send(3) `send_flags`),
/// as builder methods.
macro_rules! flag_setters {
    ($t:ident $(<$l:lifetime>)?) => {
        impl$(<$l>)? $t$(<$l>)? {
            /// Sets `IBV_SEND_SIGNALED`: the request completes to the send CQ.
            pub fn signaled(mut self) -> Self {
                self.flags |= SendFlags::SIGNALED;
                self
            }

            /// Sets `IBV_SEND_FENCE`: waits for earlier READs and atomics (RC).
            pub fn fenced(mut self) -> Self {
                self.flags |= SendFlags::FENCE;
                self
            }
        }
    };
}

/// A SEND on a connected QP (RC, UC; XRC through [`ToSrq`]): SEND, SEND_WITH_IMM or
/// SEND_WITH_INV.
#[derive(Clone, Copy, Debug)]
pub struct Send<'a> {
    wr_id: u64,
    data: Payload<'a>,
    flags: SendFlags,
    opcode: WrOpcode,
    imm_data: u32,
}

impl<'a> Send<'a> {
    /// A SEND of the bytes `sges` name.
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        Send { wr_id, data: Payload::Sge(sges), flags: SendFlags::empty(), opcode: WrOpcode::Send, imm_data: 0 }
    }

    /// A SEND of `bytes`, copied into the request at post time (`IBV_SEND_INLINE`; at
    /// most the QP's `max_inline_data`).
    pub fn inline(wr_id: u64, bytes: &'a [u8]) -> Self {
        Send { wr_id, data: Payload::Inline(bytes), flags: SendFlags::INLINE, opcode: WrOpcode::Send, imm_data: 0 }
    }

    /// SEND_WITH_IMM: `imm` reaches the receiver's completion.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.opcode = WrOpcode::SendWithImm;
        self.imm_data = imm;
        self
    }

    /// SEND_WITH_INV: the receiver's device invalidates `rkey` (RC only, but the
    /// responder checks it: UC refuses the opcode at post).
    pub fn with_inv(mut self, rkey: u32) -> Self {
        self.opcode = WrOpcode::SendWithInv;
        self.imm_data = rkey;
        self
    }

    /// Sets `IBV_SEND_SOLICITED`: wakes a receiver armed for solicited completions.
    pub fn solicited(mut self) -> Self {
        self.flags |= SendFlags::SOLICITED;
        self
    }
}
flag_setters!(Send<'a>);

/// An RDMA WRITE (or WRITE_WITH_IMM) on a connected QP.
#[derive(Clone, Copy, Debug)]
pub struct Write<'a> {
    wr_id: u64,
    data: Payload<'a>,
    remote: Remote,
    flags: SendFlags,
    imm: Option<u32>,
}

impl<'a> Write<'a> {
    /// A WRITE of the bytes `sges` name to `remote`.
    pub fn new(wr_id: u64, sges: &'a [Sge], remote: Remote) -> Self {
        Write { wr_id, data: Payload::Sge(sges), remote, flags: SendFlags::empty(), imm: None }
    }

    /// A WRITE of `bytes`, copied into the request at post time (`IBV_SEND_INLINE`).
    pub fn inline(wr_id: u64, bytes: &'a [u8], remote: Remote) -> Self {
        Write { wr_id, data: Payload::Inline(bytes), remote, flags: SendFlags::INLINE, imm: None }
    }

    /// RDMA_WRITE_WITH_IMM: consumes a receive at the peer, whose completion carries `imm`.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }
}
flag_setters!(Write<'a>);

/// An RDMA READ of `remote` into `sges` (RC, XRC).
#[derive(Clone, Copy, Debug)]
pub struct Read<'a> {
    wr_id: u64,
    into: &'a [Sge],
    remote: Remote,
    flags: SendFlags,
}

impl<'a> Read<'a> {
    /// A READ of as many bytes as `into` names, from `remote`.
    pub fn new(wr_id: u64, into: &'a [Sge], remote: Remote) -> Self {
        Read { wr_id, into, remote, flags: SendFlags::empty() }
    }
}
flag_setters!(Read<'a>);

/// An atomic fetch-and-add of `add` on the 8 bytes at `remote` (RC, XRC).
#[derive(Clone, Copy, Debug)]
pub struct FetchAdd {
    wr_id: u64,
    result: AtomicResult,
    remote: Remote,
    add: u64,
    flags: SendFlags,
}

impl FetchAdd {
    /// Adds `add` at `remote`; the original value lands in `result`.
    pub fn new(wr_id: u64, result: AtomicResult, remote: Remote, add: u64) -> Self {
        FetchAdd { wr_id, result, remote, add, flags: SendFlags::empty() }
    }
}
flag_setters!(FetchAdd);

/// An atomic compare-and-swap on the 8 bytes at `remote` (RC, XRC).
#[derive(Clone, Copy, Debug)]
pub struct CompareSwap {
    wr_id: u64,
    result: AtomicResult,
    remote: Remote,
    compare: u64,
    swap: u64,
    flags: SendFlags,
}

impl CompareSwap {
    /// Writes `swap` at `remote` if it holds `compare`; the original value lands in
    /// `result` either way.
    pub fn new(wr_id: u64, result: AtomicResult, remote: Remote, compare: u64, swap: u64) -> Self {
        CompareSwap { wr_id, result, remote, compare, swap, flags: SendFlags::empty() }
    }
}
flag_setters!(CompareSwap);

/// A UD SEND: to the QP `dest` names, through its address handle.
#[derive(Clone, Copy, Debug)]
pub struct UdSend<'a> {
    wr_id: u64,
    data: Payload<'a>,
    dest: UdDest<'a>,
    flags: SendFlags,
    imm: Option<u32>,
}

impl<'a> UdSend<'a> {
    /// A datagram of the bytes `sges` name (at most the path MTU) to `dest`.
    pub fn new(wr_id: u64, sges: &'a [Sge], dest: UdDest<'a>) -> Self {
        UdSend { wr_id, data: Payload::Sge(sges), dest, flags: SendFlags::empty(), imm: None }
    }

    /// A datagram of `bytes`, copied into the request at post time (`IBV_SEND_INLINE`).
    pub fn inline(wr_id: u64, bytes: &'a [u8], dest: UdDest<'a>) -> Self {
        UdSend { wr_id, data: Payload::Inline(bytes), dest, flags: SendFlags::INLINE, imm: None }
    }

    /// SEND_WITH_IMM.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }

    /// Sets `IBV_SEND_SOLICITED`.
    pub fn solicited(mut self) -> Self {
        self.flags |= SendFlags::SOLICITED;
        self
    }
}
flag_setters!(UdSend<'a>);

/// A request of an XRC initiator: `wr` delivered to SRQ `srqn` of the target's XRC
/// domain (ibv_post_send(3) `qp_type.xrc.remote_srqn`). An XRC send QP carries nothing
/// else: a request without its SRQ does not compile.
#[derive(Clone, Copy, Debug)]
pub struct ToSrq<W> {
    /// The target SRQ's number (ibv_get_srq_num(3)).
    pub srqn: u32,
    /// The request; what RC carries.
    pub wr: W,
}

impl<W> ToSrq<W> {
    /// `wr` to SRQ `srqn`.
    pub fn new(srqn: u32, wr: W) -> Self {
        ToSrq { srqn, wr }
    }
}

impl sealed::Sealed for Send<'_> {}
impl sealed::Sealed for Write<'_> {}
impl sealed::Sealed for Read<'_> {}
impl sealed::Sealed for FetchAdd {}
impl sealed::Sealed for CompareSwap {}
impl sealed::Sealed for UdSend<'_> {}
impl<W: sealed::Sealed> sealed::Sealed for ToSrq<W> {}

impl<T: Connected> PostOn<T> for Send<'_> {
    fn to_wr(&self) -> SendWr<'_> {
        SendWr { flags: self.flags, payload: self.data, imm_data: self.imm_data, ..SendWr::new(self.wr_id, self.opcode) }
    }
}

impl<T: Connected> PostOn<T> for Write<'_> {
    fn to_wr(&self) -> SendWr<'_> {
        let opcode = if self.imm.is_some() { WrOpcode::RdmaWriteWithImm } else { WrOpcode::RdmaWrite };
        SendWr {
            flags: self.flags,
            payload: self.data,
            imm_data: self.imm.unwrap_or(0),
            remote_addr: self.remote.addr,
            rkey: self.remote.rkey,
            ..SendWr::new(self.wr_id, opcode)
        }
    }
}

impl<T: Reliable> PostOn<T> for Read<'_> {
    fn to_wr(&self) -> SendWr<'_> {
        SendWr { flags: self.flags, ..SendWr::read(self.wr_id, self.into, self.remote.addr, self.remote.rkey) }
    }
}

impl<T: Reliable> PostOn<T> for FetchAdd {
    fn to_wr(&self) -> SendWr<'_> {
        let result = std::slice::from_ref(&self.result.0);
        SendWr { flags: self.flags, ..SendWr::fetch_add(self.wr_id, result, self.remote.addr, self.remote.rkey, self.add) }
    }
}

impl<T: Reliable> PostOn<T> for CompareSwap {
    fn to_wr(&self) -> SendWr<'_> {
        let result = std::slice::from_ref(&self.result.0);
        let wr = SendWr::compare_swap(self.wr_id, result, self.remote.addr, self.remote.rkey, self.compare, self.swap);
        SendWr { flags: self.flags, ..wr }
    }
}

impl PostOn<Ud> for UdSend<'_> {
    fn to_wr(&self) -> SendWr<'_> {
        let opcode = if self.imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send };
        SendWr {
            flags: self.flags,
            payload: self.data,
            imm_data: self.imm.unwrap_or(0),
            ud: Some(self.dest),
            ..SendWr::new(self.wr_id, opcode)
        }
    }
}

impl<W: PostOn<super::Rc>> PostOn<Xrc> for ToSrq<W> {
    fn to_wr(&self) -> SendWr<'_> {
        self.wr.to_wr().xrc(self.srqn)
    }
}
