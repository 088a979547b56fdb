//! The multicast joins of the ids, as data (the rules that make and leave them are
//! `mcast.rs`).

use std::collections::HashMap;
use std::net::SocketAddr;

use rverbs::{Gid, Qp};

/// How an id joins a group (`enum rdma_cm_mc_join_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum JoinFlag {
    /// RDMA_MC_JOIN_FLAG_FULLMEMBER: send and receive (the id's QP is attached).
    #[default]
    FullMember,
    /// RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: send only (the QP is not attached).
    SendOnlyFullMember,
}

impl JoinFlag {
    /// The flag of a raw `enum rdma_cm_mc_join_flags` value (0 or 1).
    pub fn from_raw(v: u32) -> Option<JoinFlag> {
        match v {
            0 => Some(JoinFlag::FullMember),
            1 => Some(JoinFlag::SendOnlyFullMember),
            _ => None,
        }
    }
}

/// One join of an id.
pub(crate) struct Join {
    pub(crate) addr: SocketAddr,
    pub(crate) mgid: Gid,
    pub(crate) flag: JoinFlag,
    pub(crate) context: usize,
    /// MULTICAST_JOIN (or ERROR) still to be queued by the engine thread.
    pub(crate) pending: bool,
    /// The QP this join attached to the group.
    pub(crate) attached: Option<Qp>,
}

/// The joins of every id, by id number.
#[derive(Default)]
pub(crate) struct Joins {
    pub(crate) by_id: HashMap<u64, Vec<Join>>,
}
