//! Limits the device reports and enforces (ibv_query_device(3), ibv_query_port(3)).
//!
//! Rule: every verb that creates or sizes an object checks its request against these
//! values and fails with EINVAL / ENOMEM as rdma-core's providers do; `ibv_query_device`
//! reports exactly them.

use crate::error::{Error, Result};
use crate::rule::Rule;

/// Ports of the device.
pub const PHYS_PORT_CNT: u8 = 1;

/// Port numbers start at 1 and the device has one port (ibv_query_port(3)).
pub(crate) fn check_port(verb: &'static str, port: u8) -> Result<()> {
    if (1..=PHYS_PORT_CNT).contains(&port) {
        Ok(())
    } else {
        Err(Error::invalid(verb, Rule::PortNumber { port }))
    }
}

/// Bits of a memory key's index: the key table has `2^KEY_INDEX_BITS` records.
pub(crate) const KEY_INDEX_BITS: u32 = 18;

/// Queue pairs per process.
pub const MAX_QP: u32 = crate::table::MAX_LOCAL_QPS;
/// Work requests per send or receive queue.
pub const MAX_QP_WR: u32 = 32_768;
/// Scatter/gather entries per work request.
pub const MAX_SGE: u32 = 32;
/// Scatter/gather entries per RDMA READ.
pub const MAX_SGE_RD: u32 = 32;
/// Completion queues (numbered like QPs, 16 bits per process).
pub const MAX_CQ: u32 = crate::table::MAX_LOCAL_QPS;
/// Entries per completion queue (memory is committed only as it is used).
pub const MAX_CQE: u32 = (1 << 22) - 1;
/// Memory regions and windows together (key index 0 is never used).
pub const MAX_MR: u32 = (1 << KEY_INDEX_BITS) - 1;
/// Largest memory region.
pub const MAX_MR_SIZE: u64 = 1 << 46;
/// Protection domains.
pub const MAX_PD: u32 = 1 << 20;
/// Bytes of device memory a process can allocate (`max_dm_size`, ibv_alloc_dm(3)); each
/// allocation is a shared segment (`mr::dm`). The size of a ConnectX-6's on-chip memory.
pub const MAX_DM_SIZE: u64 = 1 << 18;
/// Outstanding RDMA READ/atomic per QP, as target and as initiator.
pub const MAX_QP_RD_ATOM: u32 = 128;
/// Responder resources for RDMA READ/atomic in all.
pub const MAX_RES_RD_ATOM: u32 = 128 * 16_384;
/// Shared receive queues (numbered like QPs).
pub const MAX_SRQ: u32 = crate::table::MAX_LOCAL_QPS;
/// Work requests per SRQ.
pub const MAX_SRQ_WR: u32 = 32_768;
/// Scatter/gather entries per SRQ work request.
pub const MAX_SRQ_SGE: u32 = 32;
/// Tagged buffers in a tag-matching SRQ's list (`tm_caps.max_num_tags`).
pub const TM_MAX_TAGS: u32 = 256;
/// Outstanding tag-list operations (`tm_caps.max_ops`; they complete at once here).
pub const TM_MAX_OPS: u32 = 1024;
/// Scatter/gather entries of a tagged buffer (`tm_caps.max_sge`).
pub const TM_MAX_SGE: u32 = 4;
/// Largest rendezvous request, TMH and RVH included (`tm_caps.max_rndv_hdr_size`).
pub const TM_MAX_RNDV_HDR: u32 = 64;
/// Address handles.
pub const MAX_AH: u32 = 1 << 20;
/// Memory windows (they share the key table with the regions).
pub const MAX_MW: u32 = MAX_MR;
/// Bytes of inline data per send work request.
pub const MAX_INLINE_DATA: u32 = 1024;
/// Largest message (ibv_port_attr.max_msg_sz), as rxe.
pub const MAX_MSG_SZ: u32 = 1 << 31;
/// P_Key table entries.
pub const MAX_PKEYS: u16 = 1;
/// Completion vectors.
pub const NUM_COMP_VECTORS: u32 = 1;
/// Multicast groups (UD).
pub const MAX_MCAST_GRP: u32 = 8192;
/// QPs per multicast group.
pub const MAX_MCAST_QP_ATTACH: u32 = 56;

/// The port's largest MTU (ibv_query_port(3) `max_mtu`), as rxe's `RXE_PORT_MAX_MTU`:
/// the bound of every path MTU (ibv_modify_qp(3) `path_mtu`).
///
/// The port's *active* MTU, which is also the largest UD message (IBTA C10-93.1.1),
/// depends on the host's links: [`port_active_mtu`].
pub const MAX_MTU: rverbs_proto::verbs::Mtu = rverbs_proto::verbs::Mtu::Mtu4096;

/// Bytes of headers rxe reserves around a RoCEv2 payload when it derives an IB MTU from
/// a netdev's MTU (`RXE_MAX_HDR_LENGTH`, `eth_mtu_int_to_enum` in rxe_param.h).
pub const ROCE_HEADROOM: u32 = 80;

/// The largest IB MTU (256 … 4096 bytes) a link of netdev MTU `netdev_mtu` carries, as
/// rxe sets its port's active MTU from its netdev (`rxe_set_mtu`): the netdev MTU less
/// [`ROCE_HEADROOM`], rounded down to an IB MTU, at least 256, at most [`MAX_MTU`]
/// (1500 → 1024, 9000 → 4096).
pub const fn ib_mtu_for_link(netdev_mtu: u32) -> rverbs_proto::verbs::Mtu {
    use rverbs_proto::verbs::Mtu;
    let room = netdev_mtu.saturating_sub(ROCE_HEADROOM);
    if room >= 4096 {
        Mtu::Mtu4096
    } else if room >= 2048 {
        Mtu::Mtu2048
    } else if room >= 1024 {
        Mtu::Mtu1024
    } else if room >= 512 {
        Mtu::Mtu512
    } else {
        Mtu::Mtu256
    }
}

/// The active MTU of the device's one port (ibv_query_port(3) `active_mtu`), whose GID
/// table spans every interface of the host: the smallest [`ib_mtu_for_link`] of the
/// interfaces that are up, are not a loopback and hold a GID (`links`: their netdev
/// MTUs), or [`MAX_MTU`] when there is none (a host with only the loopback, where any
/// size fits). rxe's port takes its one netdev's; the smallest is the value for which
/// every UD message the port accepts fits whichever link it leaves by (a UD message
/// above the active MTU is not sent, C10-93.1.1), which is what applications size UD
/// messages by (ibv_ud_pingpong, UCX's ud_verbs).
pub fn port_active_mtu(links: impl IntoIterator<Item = u32>) -> rverbs_proto::verbs::Mtu {
    links.into_iter().map(ib_mtu_for_link).min_by_key(|m| m.bytes()).unwrap_or(MAX_MTU)
}

/// The port's active MTU as the links' MTUs change: rxe sets its port's from its netdev's
/// MTU again whenever the netdev's changes (`NETDEV_CHANGEMTU`); rverbs reads the links
/// again whenever the port is queried (ibv_query_port(3)), so a program that asks sees
/// the value of now, and its later UD sends are sized by it (docs/device.md, "Active
/// MTU").
pub(crate) struct ActiveMtu {
    /// The up, non-loopback interfaces that hold a GID, by name.
    links: Vec<String>,
    /// The MTU as last read (`enum ibv_mtu`).
    now: std::sync::atomic::AtomicU32,
}

impl ActiveMtu {
    /// The port over `links`, read now.
    pub(crate) fn new(links: Vec<String>) -> ActiveMtu {
        let m = ActiveMtu { links, now: std::sync::atomic::AtomicU32::new(MAX_MTU as u32) };
        m.refresh();
        m
    }

    /// The MTU as last read.
    pub(crate) fn get(&self) -> rverbs_proto::verbs::Mtu {
        rverbs_proto::verbs::Mtu::from_raw(self.now.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(MAX_MTU)
    }

    /// Reads the links' MTUs again (an interface that is gone counts no more).
    pub(crate) fn refresh(&self) -> rverbs_proto::verbs::Mtu {
        let m = port_active_mtu(self.links.iter().filter_map(|name| crate::sys::if_mtu(name)));
        self.now.store(m as u32, std::sync::atomic::Ordering::Relaxed);
        m
    }
}

/// Endpoints (processes using the device) one host can have; endpoint numbers are the top
/// 8 bits of QP numbers and keys' owners (docs/device.md, "Numbers").
pub(crate) const MAX_ENDPOINTS: u32 = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_proto::verbs::Mtu;

    /// rxe_set_mtu's values (netdev MTU less 80, down to an IB MTU, at least 256), and the
    /// port's: the smallest link's, 4096 with none.
    #[test]
    fn the_port_takes_the_smallest_links_ib_mtu() {
        assert_eq!(ib_mtu_for_link(1500), Mtu::Mtu1024);
        assert_eq!(ib_mtu_for_link(1104), Mtu::Mtu1024);
        assert_eq!(ib_mtu_for_link(1103), Mtu::Mtu512);
        assert_eq!(ib_mtu_for_link(9000), Mtu::Mtu4096);
        assert_eq!(ib_mtu_for_link(4175), Mtu::Mtu2048);
        assert_eq!(ib_mtu_for_link(68), Mtu::Mtu256);
        assert_eq!(port_active_mtu([]), Mtu::Mtu4096);
        assert_eq!(port_active_mtu([9000]), Mtu::Mtu4096);
        assert_eq!(port_active_mtu([9000, 1500, 2200]), Mtu::Mtu1024);
        assert_eq!(port_active_mtu([65536, 576]), Mtu::Mtu256);
    }
}
