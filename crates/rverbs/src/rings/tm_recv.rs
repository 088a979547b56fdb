//! How a message that reaches a tag-matching SRQ is delivered ([`TmRecv`]: what the
//! receive it takes carries to its completion), and the lengths of the headers such a
//! message starts with (docs/tag-matching.md). Apart from the list ([`super::tag_list`])
//! so that a receive ([`super::recv_ring::RecvWqe`]) can carry it without the receive
//! ring depending on the list that takes from it.

/// Bytes of the tag-matching header (`struct ibv_tmh`, infiniband/tm_types.h).
pub const TMH_LEN: usize = 16;
/// Bytes of the rendezvous header that follows it in a RNDV request (`struct ibv_rvh`).
pub const RVH_LEN: usize = 16;

/// How a message reaching a TM-SRQ is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TmRecv {
    /// No TMH, or an operation the list does not match (FIN): IBV_WC_RECV.
    Plain,
    /// NO_TAG: the whole message to a plain receive, IBV_WC_TM_NO_TAG.
    NoTag,
    /// A tagged message no entry matched: the whole message to a plain receive,
    /// IBV_WC_TM_RECV without flags.
    Unexpected,
    /// EAGER matched: the payload after the TMH to the tagged buffer.
    Eager { tag: u64, app_ctx: u32 },
    /// RNDV matched: the device reads `len` bytes at `va` under `rkey` of the sender
    /// into the tagged buffer. `offload` is false when the buffer is too small (or the
    /// link cannot read): the headers go to the tagged buffer and the completion is
    /// IBV_WC_TM_RNDV_INCOMPLETE, for software to finish.
    Rndv { tag: u64, app_ctx: u32, va: u64, rkey: u32, len: u32, offload: bool },
}

impl TmRecv {
    /// Bytes at the start of the message that are not placed (the TMH of an EAGER match;
    /// the whole request of an offloaded RNDV is not placed at all, see [`Self::places`]).
    pub(crate) fn skip(&self) -> u64 {
        match self {
            TmRecv::Eager { .. } => TMH_LEN as u64,
            _ => 0,
        }
    }

    /// Whether the message's bytes are scattered into the receive.
    pub(crate) fn places(&self) -> bool {
        !matches!(self, TmRecv::Rndv { offload: true, .. })
    }
}
