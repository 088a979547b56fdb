//! Multicast joins (rdma_join_multicast(3), rdma_join_multicast_ex(3),
//! rdma_leave_multicast(3)) as the kernel's rdma_cm makes them on a RoCE v2 port
//! (`rdma_join_multicast`, `cma_iboe_join_multicast`, `cma_iboe_set_mgid`,
//! `cma_make_mc_event`) and librdmacm completes them (`ucma_process_join`).
//!
//! Rules:
//! * The id must have a device and be bound or address-resolved (not route-resolved,
//!   connecting, listening…), and be of QP type UD: `EINVAL` otherwise.
//! * The group's MGID: an IPv4 address `a.b.c.d` is `::ffff:a.b.c.d` (the IPv4-mapped
//!   form, RoCE v2); `0.0.0.0` and `::` are `EINVAL` (`cma_zero_addr`). An IPv6 address
//!   would be its own GID, but the kernel refuses IPv6 groups on RoCE v2 ports
//!   (`-ENOTSUPP`, its internal 524): here `EOPNOTSUPP`. The address is not checked to be
//!   multicast (neither does the kernel); attaching a QP to a GID that is not multicast
//!   fails later, as below.
//! * Flags: FULLMEMBER, or SENDONLY_FULLMEMBER (may send, is never attached).
//! * The join completes from the engine thread, never inside the call (the kernel
//!   completes it from its work queue): MULTICAST_JOIN with `ud` = the group's address
//!   vector (GRH: dgid = MGID, the id's source GID index, hop limit 64 =
//!   IPV6_DEFAULT_HOPLIMIT, traffic class 0, flow label 0; port 1, LID 0, SL 0),
//!   `qp_num` 0xFFFFFF, `qkey` RDMA_UDP_QKEY, and the join's context in
//!   [`Event::mc_context`] (librdmacm reports it as `param.ud.private_data`, with
//!   `private_data_len` 0). At that moment the id's QP, if it has one and the join is
//!   not send-only, is attached to the group (ibv_attach_mcast(3), as librdmacm does when
//!   the event is retrieved); if the attach fails the event is MULTICAST_ERROR with
//!   `-errno` and the join stays until it is left.
//! * Leave (by the address joined, compared whole: family, address and port):
//!   `EADDRNOTAVAIL` if the id has no such join; the QP attached by the join is detached
//!   (unless another join of the id keeps it attached to the same group) and the join's
//!   events not yet retrieved are discarded; no event. librdmacm also waits until the
//!   join's retrieved events are acknowledged; here nothing of the join outlives the
//!   call, so it does not wait.
//! * Destroying the id leaves its groups.

use std::net::{IpAddr, SocketAddr};

use rverbs::{AhAttr, Gid, GlobalRoute, QpType};

use super::joins::{Join, JoinFlag};
use super::qp::RDMA_UDP_QKEY;
use super::state::{emit, St, State};
use super::world::Cx;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::event::{Event, EventKind, UdParam};
use crate::handle::CmId;

/// The QPN a UD send names to reach a group.
const MULTICAST_QPN: u32 = 0xff_ffff;
/// IPV6_DEFAULT_HOPLIMIT: the hop limit of an IPv4 group on a RoCE v2 port.
const MC_HOP_LIMIT: u8 = 64;

/// The MGID of group address `ip` on a RoCE v2 port (`cma_iboe_set_mgid`).
pub(crate) fn mgid_of(ip: IpAddr) -> Result<Gid> {
    let verb = "rdma_join_multicast";
    if ip.is_unspecified() {
        return Err(Error::invalid(verb, Rule::WildcardGroup));
    }
    match ip {
        IpAddr::V4(v4) => Ok(Gid::from_ipv4(v4)),
        IpAddr::V6(_) => Err(Error::Os(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP))),
    }
}

/// rdma_join_multicast(3) on id `id`: the join is recorded, its event queued for the
/// engine thread (`deliver`).
pub(crate) fn join(st: &mut State, id: &CmId, addr: SocketAddr, flag: JoinFlag, context: usize) -> Result<()> {
    let verb = "rdma_join_multicast";
    let n = id.number();
    let s = st.id(id)?;
    if s.sgid.is_none() || !matches!(s.st(), St::Bound | St::AddrResolved) {
        return Err(Error::invalid(verb, Rule::JoinState { state: s.st() }));
    }
    if id.qp_type() != QpType::Ud {
        return Err(Error::invalid(verb, Rule::NotUd));
    }
    let mgid = mgid_of(addr.ip())?;
    st.mcast.by_id.entry(n).or_default().push(Join { addr, mgid, flag, context, pending: true, attached: None });
    st.deferred.push((n, EventKind::MulticastJoin, 0));
    Ok(())
}

/// Queues the MULTICAST_JOIN (or MULTICAST_ERROR) of every pending join of id `n`,
/// attaching the id's QP to the groups first (engine thread).
pub(crate) fn deliver(cx: &mut Cx, st: &mut State, n: u64) {
    let Some(s) = st.ids.get(&n) else {
        st.mcast.by_id.remove(&n);
        return;
    };
    let (handle, qp, sgid_index) = (s.handle.clone(), s.qp.clone(), s.sgid.map_or(0, |g| g.index));
    let mut events = Vec::new();
    for j in st.mcast.by_id.get_mut(&n).into_iter().flatten().filter(|j| j.pending) {
        j.pending = false;
        let mut status = 0;
        if let (Some(qp), JoinFlag::FullMember) = (&qp, j.flag) {
            match qp.attach_mcast(&j.mgid, 0) {
                Ok(()) => j.attached = Some(qp.clone()),
                Err(err) => status = -err.errno(),
            }
        }
        let kind = if status == 0 { EventKind::MulticastJoin } else { EventKind::MulticastError };
        let mut ev = Event::new(kind, status, &handle, handle.shared.acks.clone());
        ev.ud = UdParam {
            private_data: Vec::new(),
            ah_attr: AhAttr {
                grh: Some(GlobalRoute {
                    dgid: j.mgid,
                    flow_label: 0,
                    sgid_index,
                    hop_limit: MC_HOP_LIMIT,
                    traffic_class: 0,
                }),
                port_num: 1,
                ..AhAttr::default()
            },
            qp_num: MULTICAST_QPN,
            qkey: RDMA_UDP_QKEY,
        };
        ev.mc_context = j.context;
        events.push(ev);
    }
    for ev in events {
        emit(cx, st, n, ev);
    }
}

/// Detaches `j`'s QP unless another of `rest` keeps that QP attached to the group.
fn detach(j: &Join, rest: &[Join]) {
    let Some(qp) = &j.attached else { return };
    let kept = rest.iter().any(|o| o.mgid == j.mgid && o.attached.as_ref().is_some_and(|q| q.qp_num() == qp.qp_num()));
    if !kept {
        if let Err(err) = qp.detach_mcast(&j.mgid, 0) {
            tracing::debug!(%err, "rdma_leave_multicast: detaching the QP");
        }
    }
}

/// rdma_leave_multicast(3) of the join of `id` made with `addr`.
pub(crate) fn leave(st: &mut State, id: &CmId, addr: SocketAddr) -> Result<()> {
    let n = id.number();
    st.id(id)?;
    let joins = st.mcast.by_id.get_mut(&n).ok_or(Error::AddrNotAvail)?;
    let at = joins.iter().position(|j| j.addr == addr).ok_or(Error::AddrNotAvail)?;
    let j = joins.remove(at);
    detach(&j, joins);
    if joins.is_empty() {
        st.mcast.by_id.remove(&n);
    }
    // Its events not yet retrieved go with it.
    if let Some(ch) = st.ids.get(&n).and_then(|s| s.channel.clone()) {
        let mine = |ev: &Event| {
            ev.id == *id
                && matches!(ev.kind, EventKind::MulticastJoin | EventKind::MulticastError)
                && ev.mc_context == j.context
                && ev.ud.ah_attr.grh.is_some_and(|g| g.dgid == j.mgid)
        };
        drop(ch.take_where(mine));
    }
    Ok(())
}

/// Leaves every group of id `n` (rdma_destroy_id).
pub(crate) fn leave_all(st: &mut State, n: u64) {
    let mut joins = st.mcast.by_id.remove(&n).unwrap_or_default();
    while let Some(j) = joins.pop() {
        detach(&j, &joins);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_addresses_map_to_ipv4_mapped_mgids() {
        let g = mgid_of("224.0.0.251".parse().unwrap()).unwrap();
        assert_eq!(g.0, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 224, 0, 0, 251]);
        assert_eq!(mgid_of("0.0.0.0".parse().unwrap()).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(mgid_of("::".parse().unwrap()).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(mgid_of("ff0e::1".parse().unwrap()).unwrap_err().errno(), libc::EOPNOTSUPP);
        assert_eq!(JoinFlag::from_raw(1), Some(JoinFlag::SendOnlyFullMember));
        assert_eq!(JoinFlag::from_raw(2), None);
    }
}
