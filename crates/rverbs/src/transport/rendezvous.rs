//! The receiver's half of a tag-matched rendezvous on the same host (docs/tag-matching.md).
//!
//! Rule (rdma-core's tag-matching documentation): when a RNDV request matches a tagged
//! buffer, the device reads the data the rendezvous header names (`va`, `rkey`, `len`,
//! an RDMA READ on the same connection) into the buffer, completes it a second time with
//! IBV_WC_TM_DATA_VALID, and sends the sender a FIN: a SEND carrying the request's TMH and
//! RVH with the operation set to FIN, which the sender receives as a plain receive and
//! after which it may free its buffer.
//!
//! Here the requester's own process runs the responder, so the read is a copy from the
//! requester's memory, checked under `rkey` against the requester's PD as its responder
//! would check a READ, into the tagged buffer. The FIN is delivered to the requester QP's
//! receive queue after the requester's own send completion is written
//! ([`crate::rings::deferred_notify`]), the order a NIC produces (the ACK comes before the FIN).
//! A FIN that finds no receive posted is dropped (a NIC would retry it under the RNR
//! rules); a read that fails completes the tagged buffer in error and sends no FIN.

use std::sync::Arc;

use rverbs_proto::verbs::{Access, WcFlags, WcOpcode, WcStatus};

use super::deliver::{deliver_recv, place_message, tm_completion};
use super::respond::Head;
use super::target::{LocalTarget, Target};
use crate::mr::{self, copy_message, KeySpace, KeyUse, PinList, Source};
use crate::rings::recv_ring::RecvWqe;
use crate::rings::tag_list::TmhOp;
use crate::rings::tm_recv::{RVH_LEN, TMH_LEN};
use crate::qp::QpInner;
use crate::rings::wc::Cqe;

/// What the rendezvous header of a matched request names.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rendezvous {
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u32,
}

/// Reads the rendezvous data of a request from `qp` into the tagged buffer `entry` of
/// target `t`, completes the buffer, and sends `qp` the FIN built from the request's
/// headers `head`.
pub(crate) fn run<T: Target>(qp: &Arc<QpInner>, t: &T, entry: &RecvWqe, rv: Rendezvous, head: Option<&Head>) {
    let len = u64::from(rv.len);
    let read = (|| {
        let own = KeySpace::local(qp.endpoint);
        let used = KeyUse::Remote { qpn: qp.qpn };
        let src = own.pin(rv.rkey, qp.pd.id, used, rv.va, len, Access::REMOTE_READ).map_err(|f| {
            let v = f.remote();
            (WcStatus::RemAccessErr, v.vendor_err())
        })?;
        let keys = t.keys();
        let mut dst = PinList::new();
        mr::pin_sges_into(&keys, t.pd(), entry.sges(), Access::LOCAL_WRITE, len, &mut dst)
            .map_err(|f| (WcStatus::LocProtErr, f.local_vendor_err()))?;
        copy_message(&dst, 0, Source::Pins(std::slice::from_ref(&src))).map_err(|_| (WcStatus::LocProtErr, rverbs_proto::vendor_err::LOCAL_BOUNDS))
    })();
    let cqe = match read {
        Ok(_) => {
            let mut c = Cqe::success(entry.wr_id, t.qpn(), WcOpcode::TmRecv, rv.len);
            c.wc_flags = WcFlags::TM_DATA_VALID.bits() as u8;
            c
        }
        Err((status, vendor_err)) => Cqe::error(entry.wr_id, t.qpn(), status, vendor_err),
    };
    if deliver_recv(t, cqe, None, qp.endpoint.counters).is_err() || read.is_err() {
        return;
    }
    let mut fin = [0u8; TMH_LEN + RVH_LEN];
    if let Some(h) = head {
        let b = h.bytes();
        fin[..b.len()].copy_from_slice(b);
    }
    fin[0] = TmhOp::Fin as u8;
    let (qp, from) = (qp.clone(), t.qpn());
    crate::rings::deferred_notify::fire_or_hold(move || deliver_fin(&qp, from, &fin));
}

/// Delivers a FIN from QP `from` into a receive of `qp` (the rendezvous sender).
fn deliver_fin(qp: &Arc<QpInner>, from: u32, fin: &[u8]) {
    if !super::route::accepts_requests(qp.state()) {
        return;
    }
    let t = LocalTarget::of(qp.clone());
    let Some(r) = t.take_for(fin, fin.len() as u64) else { return };
    let n = fin.len() as u64;
    let mut cqe = if place_message(&t, &r, Source::Bytes(fin), n) {
        let mut c = Cqe::success(r.wr_id, qp.qpn, WcOpcode::Recv, n as u32);
        c.src_qp = from;
        c
    } else {
        Cqe::error(r.wr_id, qp.qpn, WcStatus::LocLenErr, rverbs_proto::vendor_err::LOCAL_BOUNDS)
    };
    if let Some(tm) = r.tm {
        tm_completion(&mut cqe, tm);
    }
    let _ = deliver_recv(&t, cqe, None, qp.endpoint.counters);
}
