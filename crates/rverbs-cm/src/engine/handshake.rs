//! The handshakes: connection establishment (REQ, MRA, REP, RTU, REJ), release
//! (DREQ, DREP) and service ID resolution for datagram services (SIDR_REQ, SIDR_REP),
//! as IBTA Vol 1 chapter 12 describes them and rdma_cm(7) reports them.
//!
//! Event order (rdma_cm(7); the kernel's rdma_cm):
//! - active: ADDR_RESOLVED, ROUTE_RESOLVED, then ESTABLISHED carrying the REP's private
//!   data (CONNECT_RESPONSE instead when the id has no QP), or REJECTED (status: the
//!   reject reason; 8 when nobody listens), or UNREACHABLE (-ETIMEDOUT);
//! - passive: CONNECT_REQUEST on the listener's channel (a new id, the REQ's private
//!   data), then ESTABLISHED when the RTU arrives (no private data);
//! - both: DISCONNECTED exactly once per connection, whoever disconnects first and also
//!   when both do at once (a DREQ received while waiting for the DREP counts as the
//!   DREP) or when the peer's process dies (then the QP is moved to ERR too).
//! - datagram: the active side gets ESTABLISHED with the remote QPN and Q_Key; the
//!   passive side gets no ESTABLISHED.
//!
//! Every message after the REQ names the receiver's local communication id, whose top
//! 8 bits are the receiving endpoint, so it reaches the right process and id.

use std::time::Duration;

use rverbs::capi_support::qp1::{Mad, MadPeer};
use rverbs::{AhAttr, GlobalRoute, Mtu, QpType};

use super::msg::{self, Reason};
use super::qp::{connect_qp, RDMA_UDP_QKEY};
use super::state::{emit, simple_event, St, State, TimerKind};
use super::world::{Action, Cx};
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::event::{ConnParam, Event, EventKind, UdParam};
use crate::handle::{CmId, PortSpace};
use crate::mad::CmMessage;

/// User private data limits (rdma_connect(3), rdma_accept(3), rdma_reject(3)): the IBTA
/// field minus the 36-byte RDMA CM IP header where the request carries one.
pub(crate) const REQ_PDATA: usize = 56;
pub(crate) const SIDR_REQ_PDATA: usize = 180;
pub(crate) const REP_PDATA: usize = 196;
pub(crate) const SIDR_REP_PDATA: usize = 136;
pub(crate) const REJ_PDATA: usize = 148;

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "as many as the device allows".
const MAX_RDMA: u8 = 0xff;

/// Service timeout the passive side asks for with its MRA while the application decides
/// (the kernel's rdma_cm sends 24: about 69 s).
const MRA_SERVICE_TIMEOUT: u8 = 24;

fn pad(data: &[u8], len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let n = data.len().min(len);
    v[..n].copy_from_slice(&data[..n]);
    v
}

fn rd_param(cx: &Cx, verb: &'static str, v: u8, peer: Option<u8>) -> Result<u8> {
    let max = cx.world.max_rd_atom();
    if v == MAX_RDMA {
        Ok(peer.map_or(max, |p| p.min(max)))
    } else if v > max {
        Err(Error::invalid(verb, Rule::RdmaDepth { asked: v, max }))
    } else {
        Ok(v)
    }
}

/// rdma_connect(3) on `id`. `fault`: the fault plan's failure of this call
/// (docs/fault-injection.md), decided by the engine: the REQ is never sent and the call
/// ends as one that met no answer (UNREACHABLE, -ETIMEDOUT) or a refusal (REJECTED,
/// consumer reject), the QP in ERR.
pub(crate) fn connect(cx: &mut Cx, st: &mut State, id: &CmId, param: &ConnParam, fault: Option<i32>) -> Result<()> {
    let n = id.number();
    let me = cx.world.endpoint();
    let datagram = id.ps().is_datagram() || id.qp_type() == QpType::Ud;
    {
        let s = st.id(id)?;
        if s.st() != St::RouteResolved {
            return Err(Error::invalid("rdma_connect", Rule::RouteNotResolved { state: s.st() }));
        }
        let limit = if datagram { SIDR_REQ_PDATA } else { REQ_PDATA };
        if param.private_data.len() > limit {
            return Err(Error::invalid("rdma_connect", Rule::PrivateDataTooLong { len: param.private_data.len(), max: limit }));
        }
        if !datagram && s.qp.is_none() && param.qp_num == 0 {
            return Err(Error::invalid("rdma_connect", Rule::NoQp));
        }
    }
    let rr = rd_param(cx, "rdma_connect", param.responder_resources, None)?;
    let init = rd_param(cx, "rdma_connect", param.initiator_depth, None)?;
    // IBTA Vol 1 §12.7.20 as the kernel's CM reads it: the REQ's starting PSN is the
    // PSN the passive side sends with, so this side's receive PSN; the REP's is the PSN
    // this side sends with.
    let psn = st.random_psn();
    let comm = st.new_comm_id(me);
    let s = st.id(id)?;
    s.remote_psn = psn;
    s.local_comm = Some(comm);
    s.local_qpn = s.qp.as_ref().map_or(param.qp_num, |q| q.qp_num());
    s.responder_resources = rr;
    s.initiator_depth = init;
    s.retry_count = param.retry_count.min(7);
    s.rnr_retry_count = param.rnr_retry_count.min(7);
    s.srq = param.srq != 0;
    s.tid = (u64::from(comm) << 32) | u64::from(psn);
    let (src, dst) = (s.src.expect("resolved"), s.dst.expect("resolved"));
    st.by_comm.insert(comm, n);
    let s = st.id(id)?;
    s.enter(St::ReqSent);
    if let Some(errno) = fault {
        s.enter(St::Failed);
        s.qp_to_err(cx);
        if errno == libc::ECONNREFUSED {
            let ev = rejected_event(st, n, Reason::CONSUMER_DEFINED, &[]);
            emit(cx, st, n, ev);
        } else {
            simple_event(cx, st, n, EventKind::Unreachable, -errno);
        }
        return Ok(());
    }

    // Who listens? Another host's connection manager finds its own listener; on this
    // host the listener table says.
    let other_host = cx.world.local_gid(dst.ip()).is_none();
    let owner = if other_host {
        s.path_mtu = mtu_of_bytes(cx.world.link_mtu(src.ip()));
        Some((MadPeer::Remote { peer: dst.ip(), local: src.ip() }, None))
    } else {
        cx.world.listener(id.ps(), dst).map(|o| (MadPeer::Endpoint(o.ep), Some(o.pid)))
    };
    let Some((owner, owner_pid)) = owner else {
        // IBTA: a REQ for a service nobody provides is rejected with "invalid service
        // ID" (8); for SIDR the reply status is "service ID not supported" (1), which
        // rdma_cm reports as UNREACHABLE.
        s.enter(St::Failed);
        s.qp_to_err(cx);
        if datagram {
            simple_event(cx, st, n, EventKind::Unreachable, 1);
        } else {
            let ev = rejected_event(st, n, Reason::INVALID_SERVICE_ID, &[]);
            emit(cx, st, n, ev);
        }
        return Ok(());
    };
    let sgid = s.sgid.expect("resolved ids have a GID");
    let dgid = s.dgid.expect("resolved");
    let message = if datagram {
        CmMessage::SidrReq(msg::sidr_req(comm, id.ps(), src, dst, &param.private_data))
    } else {
        CmMessage::Req(msg::req(&msg::ReqArgs {
            comm,
            ps: id.ps(),
            src,
            dst,
            ca_guid: cx.world.node_guid(),
            qpn: s.local_qpn,
            qp_type: id.qp_type(),
            psn,
            responder_resources: rr,
            initiator_depth: init,
            flow_control: param.flow_control != 0,
            retry_count: s.retry_count,
            rnr_retry_count: s.rnr_retry_count,
            srq: s.srq,
            cm_timeout: s.cm_timeout,
            cm_retries: s.cm_retries,
            sgid: sgid.gid,
            dgid,
            path_mtu: s.path_mtu as u8, // `enum ibv_mtu` is the IBTA code
            traffic_class: s.tos,
            ack_timeout: s.qp_timeout(),
            ece_vendor: s.local_ece.0,
            private_data: &param.private_data,
        }))
    };
    let wait = s.response_wait();
    let tid = s.tid;
    let ece_options = s.local_ece.1;
    s.remote = Some(owner);
    s.remote_pid = owner_pid;
    s.arm(TimerKind::Req, cx.now + wait);
    let bytes = message.encode_with_modifier(tid, ece_options);
    s.resend_until_answered(&bytes, cx.now);
    cx.out.push(Action::Watch { peer: owner, pid: owner_pid });
    // Not sent: the peer is gone (`peer_gone`: UNREACHABLE, -ETIMEDOUT).
    cx.send_for(n, owner, bytes);
    Ok(())
}

pub(crate) fn accept(cx: &mut Cx, st: &mut State, id: &CmId, param: Option<&ConnParam>) -> Result<()> {
    let n = id.number();
    let datagram = id.ps().is_datagram() || id.qp_type() == QpType::Ud;
    let s = st.id(id)?;
    if s.st() != St::ReqRcvd {
        return Err(Error::invalid("rdma_accept", Rule::NoRequest { state: s.st() }));
    }
    let default = ConnParam { responder_resources: MAX_RDMA, initiator_depth: MAX_RDMA, rnr_retry_count: 7, ..ConnParam::default() };
    if param.is_none() && s.qp.is_none() {
        return Err(Error::invalid("rdma_accept", Rule::NoQp));
    }
    let p = param.unwrap_or(&default);
    let limit = if datagram { SIDR_REP_PDATA } else { REP_PDATA };
    if p.private_data.len() > limit {
        return Err(Error::invalid("rdma_accept", Rule::PrivateDataTooLong { len: p.private_data.len(), max: limit }));
    }
    // s.responder_resources / initiator_depth hold what the peer offered (its initiator
    // depth / responder resources); 0xFF takes the most both allow.
    let (peer_init, peer_rr) = (s.responder_resources, s.initiator_depth);
    let rr = rd_param(cx, "rdma_accept", p.responder_resources, Some(peer_init))?;
    let init = rd_param(cx, "rdma_accept", p.initiator_depth, Some(peer_rr))?;
    let s = st.id(id)?;
    let remote = s.remote.expect("requests come from a peer");
    let local_qpn = s.qp.as_ref().map_or(p.qp_num, |q| q.qp_num());
    s.local_qpn = local_qpn;
    if datagram {
        let rep = msg::sidr_rep(
            s.remote_comm.unwrap_or(0),
            msg::SIDR_SUCCESS,
            local_qpn,
            RDMA_UDP_QKEY,
            s.src.map_or(0, |a| a.port()),
            id.ps(),
            &p.private_data,
        );
        let tid = s.tid;
        s.enter(St::Established);
        cx.send(remote, CmMessage::SidrRep(rep).encode(tid));
        return Ok(());
    }
    s.responder_resources = rr;
    s.initiator_depth = init;
    s.rnr_retry_count = p.rnr_retry_count.min(7);
    if let Err(err) = connect_qp(s) {
        // The QP cannot take the connection: the peer learns it as a reject.
        let rej = msg::rej(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0), msg::Rejected::Req, Reason::NO_QP, &[]);
        let tid = s.tid;
        s.enter(St::Failed);
        s.qp_to_err(cx);
        cx.send(remote, CmMessage::Rej(rej).encode(tid));
        return Err(err);
    }
    let rep = msg::rep(&msg::RepArgs {
        comm: s.local_comm.expect("children get a comm id"),
        remote_comm: s.remote_comm.expect("from the REQ"),
        qpn: local_qpn,
        psn: s.remote_psn,
        responder_resources: rr,
        initiator_depth: init,
        flow_control: p.flow_control != 0,
        rnr_retry_count: s.rnr_retry_count,
        srq: p.srq != 0,
        ca_guid: cx.world.node_guid(),
        ece_vendor: s.local_ece.0,
        private_data: &p.private_data,
    });
    let (tid, wait, ece_options) = (s.tid, s.response_wait(), s.local_ece.1);
    s.enter(St::RepSent);
    s.arm(TimerKind::Rep, cx.now + wait);
    let bytes = CmMessage::Rep(rep).encode_with_modifier(tid, ece_options);
    s.resend_until_answered(&bytes, cx.now);
    // Not sent: the peer is gone (`peer_gone`: CONNECT_ERROR, -ECONNRESET).
    cx.send_for(n, remote, bytes);
    Ok(())
}

pub(crate) fn reject(cx: &mut Cx, st: &mut State, id: &CmId, private_data: &[u8], reason: u16) -> Result<()> {
    let datagram = id.ps().is_datagram() || id.qp_type() == QpType::Ud;
    let s = st.id(id)?;
    if s.st() != St::ReqRcvd {
        return Err(Error::invalid("rdma_reject", Rule::NoRequest { state: s.st() }));
    }
    let limit = if datagram { SIDR_REP_PDATA } else { REJ_PDATA };
    if private_data.len() > limit {
        return Err(Error::invalid("rdma_reject", Rule::PrivateDataTooLong { len: private_data.len(), max: limit }));
    }
    let remote = s.remote.expect("requests come from a peer");
    let tid = s.tid;
    let m = if datagram {
        CmMessage::SidrRep(msg::sidr_rep(s.remote_comm.unwrap_or(0), msg::SIDR_REJECT, 0, 0, 0, id.ps(), private_data))
    } else {
        CmMessage::Rej(msg::rej(
            s.local_comm.unwrap_or(0),
            s.remote_comm.unwrap_or(0),
            msg::Rejected::Req,
            reason,
            private_data,
        ))
    };
    s.enter(St::Failed);
    s.qp_to_err(cx);
    cx.send(remote, m.encode(tid));
    Ok(())
}

pub(crate) fn disconnect(cx: &mut Cx, st: &mut State, id: &CmId) -> Result<()> {
    let n = id.number();
    let s = st.id(id)?;
    match s.st() {
        St::Idle | St::Bound | St::AddrResolved | St::RouteResolved | St::Listen => {
            Err(Error::invalid("rdma_disconnect", Rule::NotConnected { state: s.st() }))
        }
        St::Established | St::RepSent if s.handle.qp_type() != QpType::Ud && !s.handle.ps().is_datagram() => {
            s.qp_to_err(cx);
            let dreq = msg::dreq(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0), s.remote_qpn);
            s.tid = s.tid.wrapping_add(1);
            let (tid, wait) = (s.tid, s.response_wait());
            s.enter(St::DreqSent);
            s.arm(TimerKind::Dreq, cx.now + wait);
            let bytes = CmMessage::Dreq(dreq).encode(tid);
            match s.remote {
                Some(peer) => {
                    s.resend_until_answered(&bytes, cx.now);
                    // Not sent: the peer is gone (`peer_gone`: DISCONNECTED).
                    cx.send_for(n, peer, bytes);
                }
                // Nobody to answer.
                None => peer_gone(cx, st, n),
            }
            Ok(())
        }
        St::DreqRcvd => {
            s.qp_to_err(cx);
            let drep = msg::drep(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0));
            s.enter(St::Disconnected);
            let tid = s.tid;
            if let Some(peer) = s.remote {
                cx.send(peer, CmMessage::Drep(drep).encode(tid));
            }
            Ok(())
        }
        _ => {
            // Already disconnecting or over, or never established: the QP goes to ERR,
            // nothing else changes (rdma_disconnect(3) is idempotent).
            s.qp_to_err(cx);
            Ok(())
        }
    }
}

pub(crate) fn establish(cx: &mut Cx, st: &mut State, id: &CmId) -> Result<()> {
    let s = st.id(id)?;
    if s.st() != St::RepRcvd {
        return Err(Error::invalid("rdma_establish", Rule::NoResponse { state: s.st() }));
    }
    let rtu = msg::rtu(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0));
    s.enter(St::Established);
    let tid = s.tid;
    if let Some(peer) = s.remote {
        cx.send(peer, CmMessage::Rtu(rtu).encode(tid));
    }
    Ok(())
}

fn rejected_event(st: &State, n: u64, reason: u16, pdata: &[u8]) -> Event {
    let s = &st.ids[&n];
    let mut ev = Event::new(EventKind::Rejected, i32::from(reason), &s.handle, s.handle.shared.acks.clone());
    ev.conn.private_data = pad(pdata, REJ_PDATA);
    ev
}

/// The path MTU of IBTA code `code` (a REQ's field); an unknown code is read as 4096.
fn path_mtu_of(code: u8) -> Mtu {
    // `enum ibv_mtu` has the IBTA codes (Table 206: 1 = 256 … 5 = 4096).
    Mtu::from_raw(u32::from(code)).unwrap_or(Mtu::Mtu4096)
}

/// The largest path MTU of at most `bytes`.
fn mtu_of_bytes(bytes: u32) -> Mtu {
    match bytes {
        0..=511 => Mtu::Mtu256,
        512..=1023 => Mtu::Mtu512,
        1024..=2047 => Mtu::Mtu1024,
        2048..=4095 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// A MAD that reached this endpoint's QP1.
pub(crate) fn receive(cx: &mut Cx, st: &mut State, mad: &Mad) {
    let (from, bytes) = (mad.from, &mad.bytes);
    let (tid, attr_mod, m) = match CmMessage::decode_with_modifier(bytes) {
        Ok(x) => x,
        Err(err) => {
            tracing::debug!(%err, ?from, "malformed MAD dropped");
            return;
        }
    };
    tracing::trace!(?m, ?from, "CM MAD");
    match m {
        CmMessage::Req(req) => on_req(cx, st, mad, tid, attr_mod, msg::ReqView::from(&req)),
        CmMessage::SidrReq(req) => on_req(cx, st, mad, tid, 0, msg::ReqView::from(&req)),
        CmMessage::Mra(m) => {
            let Some(n) = mine(st, m.remote_comm_id, from) else { return };
            let s = st.ids.get_mut(&n).expect("mine");
            if s.st() == St::ReqSent {
                // The REQ arrived: no need to send it again; the answer will come.
                s.resend = None;
                let extra = Duration::from_nanos(4096u64 << m.service_timeout.min(31));
                let wait = s.response_wait() + extra;
                s.arm(TimerKind::Req, cx.now + wait);
            }
        }
        CmMessage::Rep(rep) => on_rep(cx, st, from, attr_mod, rep),
        CmMessage::Rtu(rtu) => {
            let Some(n) = mine(st, rtu.remote_comm_id, from) else { return };
            let s = st.ids.get_mut(&n).expect("mine");
            if s.st() == St::RepSent {
                s.enter(St::Established);
                s.disarm();
                simple_event(cx, st, n, EventKind::Established, 0);
            }
        }
        CmMessage::Rej(rej) => {
            let Some(n) = mine(st, rej.remote_comm_id, from) else { return };
            let s = st.ids.get_mut(&n).expect("mine");
            if matches!(s.st(), St::ReqSent | St::RepRcvd | St::RepSent | St::ReqRcvd) {
                let was_child_pending = s.st() == St::ReqRcvd;
                s.enter(St::Failed);
                s.disarm();
                s.qp_to_err(cx);
                if !was_child_pending {
                    let ev = rejected_event(st, n, msg::reason_of(&rej), msg::rej_private_data(&rej));
                    emit(cx, st, n, ev);
                }
            }
        }
        CmMessage::Dreq(dreq) => {
            let Some(n) = mine(st, dreq.remote_comm_id, from) else {
                // IBTA: a DREQ for a connection that no longer exists is answered.
                let drep = msg::drep(dreq.remote_comm_id, dreq.local_comm_id);
                cx.send(from, CmMessage::Drep(drep).encode(tid));
                return;
            };
            let s = st.ids.get_mut(&n).expect("mine");
            s.tid = tid;
            match s.st() {
                St::Established | St::RepSent => {
                    s.enter(St::DreqRcvd);
                    s.disarm();
                    simple_event(cx, st, n, EventKind::Disconnected, 0);
                }
                St::DreqSent => {
                    // Both sides disconnected at once: the peer's DREQ is our DREP.
                    let drep = msg::drep(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0));
                    s.enter(St::Disconnected);
                    s.disarm();
                    cx.send(from, CmMessage::Drep(drep).encode(tid));
                    simple_event(cx, st, n, EventKind::Disconnected, 0);
                }
                St::Disconnected => {
                    let drep = msg::drep(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0));
                    cx.send(from, CmMessage::Drep(drep).encode(tid));
                }
                _ => {}
            }
        }
        CmMessage::Drep(drep) => {
            let Some(n) = mine(st, drep.remote_comm_id, from) else { return };
            let s = st.ids.get_mut(&n).expect("mine");
            if s.st() == St::DreqSent {
                s.enter(St::Disconnected);
                s.disarm();
                simple_event(cx, st, n, EventKind::Disconnected, 0);
            }
        }
        CmMessage::SidrRep(rep) => {
            let v = msg::SidrRepView::from(&rep);
            let Some(n) = mine(st, v.request_id, from) else { return };
            let s = st.ids.get_mut(&n).expect("mine");
            if s.st() != St::ReqSent {
                return;
            }
            s.disarm();
            if v.status != msg::SIDR_SUCCESS {
                s.enter(St::Failed);
                simple_event(cx, st, n, EventKind::Unreachable, i32::from(v.status));
                return;
            }
            s.enter(St::Established);
            s.remote_qpn = v.qpn;
            s.remote_qkey = v.qkey;
            let sgid = s.sgid.expect("resolved");
            let mut ev = Event::new(EventKind::Established, 0, &s.handle, s.handle.shared.acks.clone());
            ev.ud = UdParam {
                private_data: pad(v.private_data, SIDR_REP_PDATA),
                ah_attr: AhAttr {
                    grh: Some(GlobalRoute {
                        dgid: s.dgid.unwrap_or(sgid.gid),
                        flow_label: 0,
                        sgid_index: sgid.index,
                        hop_limit: 64,
                        traffic_class: s.tos,
                    }),
                    port_num: 1,
                    ..AhAttr::default()
                },
                qp_num: v.qpn,
                qkey: v.qkey,
            };
            emit(cx, st, n, ev);
        }
    }
}

/// The id a message names by our local communication id, if it is ours and came from
/// the peer we talk to.
fn mine(st: &State, comm: u32, from: MadPeer) -> Option<u64> {
    let n = *st.by_comm.get(&comm)?;
    let s = st.ids.get(&n)?;
    (s.remote == Some(from)).then_some(n)
}

fn on_req(cx: &mut Cx, st: &mut State, mad: &Mad, tid: u64, attr_mod: u32, req: msg::ReqView<'_>) {
    let me = cx.world.endpoint();
    let from = mad.from;
    // The process behind the sending endpoint now (a number of a process that died may
    // already be another's: its ids are not this one's).
    let from_pid = match from {
        MadPeer::Endpoint(ep) => cx.world.owner_pid(ep),
        MadPeer::Remote { .. } => None,
    };
    // A retransmitted or duplicate request: the connection already exists. If it was
    // answered (a REP waits for its RTU), the answer may have been lost: send it again.
    if let Some(s) =
        st.ids.values().find(|s| s.remote == Some(from) && s.remote_pid == from_pid && s.remote_comm == Some(req.comm))
    {
        if let Some(r) = s.resend.as_ref() {
            cx.send(from, r.mad);
        }
        return;
    }
    let refusal = |reason: u16| {
        let m = if req.datagram {
            CmMessage::SidrRep(msg::sidr_rep(req.comm, msg::SIDR_UNSUPPORTED, 0, 0, 0, req.ps.unwrap_or(PortSpace::Udp), &[]))
        } else {
            CmMessage::Rej(msg::rej(0, req.comm, msg::Rejected::Req, reason, &[]))
        };
        m.encode(tid)
    };
    let (Some(ps), Some((src, dst))) = (req.ps, req.addrs) else {
        cx.send(from, refusal(Reason::INVALID_SERVICE_ID));
        return;
    };
    let owner = cx.world.listener(ps, dst);
    if let (Some(o), MadPeer::Remote { .. }) = (owner, from) {
        if o.ep != me {
            // This process is the GSI dispatcher (`rverbs::capi_support::qp1`) for a request from
            // another host that another endpoint of this host serves: hand it on.
            let refuse = refusal(Reason::INVALID_SERVICE_ID);
            cx.out.push(Action::Forward { ep: o.ep, mad: Box::new(mad.clone()), refuse });
            return;
        }
    }
    let listener = owner.filter(|o| o.ep == me).map(|o| o.id).filter(|l| st.ids.get(l).is_some_and(|s| s.st() == St::Listen));
    let Some(l) = listener else {
        cx.send(from, refusal(Reason::INVALID_SERVICE_ID));
        return;
    };
    let Some(sgid) = cx.world.local_gid(dst.ip()) else {
        cx.send(from, refusal(Reason::INVALID_SERVICE_ID));
        return;
    };
    let (channel, context, qp_type, backlog, lacks) = {
        let ls = &st.ids[&l];
        (ls.channel.clone(), ls.handle.context(), ls.handle.qp_type(), ls.backlog, ls.handle.shared.acks.clone())
    };
    // rdma_listen(3)'s backlog: requests not yet retrieved by the application.
    let queued = channel.as_ref().map_or(0, |c| {
        c.count_where(|ev| ev.kind == EventKind::ConnectRequest && std::sync::Arc::ptr_eq(&ev.acct, &lacks))
    });
    if queued >= backlog {
        cx.send(from, refusal(Reason::CONSUMER_DEFINED));
        return;
    }
    let child = st.new_id(ps, qp_type, context, channel);
    let cn = child.number();
    // The REQ's starting PSN is the one this (passive) side sends with; the one it
    // receives with is chosen here and travels in the REP (IBTA §12.7.20, §12.7.33).
    let psn = st.random_psn();
    let comm = st.new_comm_id(me);
    st.by_comm.insert(comm, cn);
    let s = st.ids.get_mut(&cn).expect("just made");
    s.enter(St::ReqRcvd);
    s.listener = Some(l);
    s.src = Some(dst);
    s.dst = Some(src);
    s.sgid = Some(sgid);
    s.dgid = Some(req.sgid.unwrap_or_else(|| crate::addr::gid_of(src.ip())));
    s.num_paths = 1;
    s.remote = Some(from);
    s.remote_pid = from_pid;
    s.remote_comm = Some(req.comm);
    s.remote_qpn = req.qpn;
    s.psn = req.psn;
    s.remote_psn = psn;
    s.local_comm = Some(comm);
    s.responder_resources = req.initiator_depth;
    s.initiator_depth = req.responder_resources;
    s.retry_count = req.retry_count;
    s.rnr_retry_count = req.rnr_retry_count;
    s.path_mtu = path_mtu_of(req.path_mtu);
    s.srq = req.srq;
    s.tid = tid;
    s.tos = req.traffic_class;
    s.remote_ece = (req.ece_vendor, attr_mod);
    cx.out.push(Action::Watch { peer: from, pid: from_pid });
    let s = &st.ids[&cn];
    let mut ev = Event::new(EventKind::ConnectRequest, 0, &s.handle, lacks);
    ev.listen_id = Some(st.ids[&l].handle.clone());
    if req.datagram {
        ev.ud.private_data = pad(req.user_data, SIDR_REQ_PDATA);
    } else {
        ev.conn = ConnParam {
            private_data: pad(req.user_data, REQ_PDATA),
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            flow_control: u8::from(req.flow_control),
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: u8::from(req.srq),
            qp_num: req.qpn,
        };
    }
    emit(cx, st, cn, ev);
    if !req.datagram {
        // Ask the requester to wait while the application decides, as rdma_cm does.
        let mra = msg::mra(comm, req.comm, MRA_SERVICE_TIMEOUT);
        cx.send(from, CmMessage::Mra(mra).encode(tid));
    }
}

fn on_rep(cx: &mut Cx, st: &mut State, from: MadPeer, attr_mod: u32, rep: crate::mad::Rep) {
    let Some(n) = mine(st, rep.remote_comm_id, from) else { return };
    let s = st.ids.get_mut(&n).expect("mine");
    if s.st() != St::ReqSent {
        if matches!(s.st(), St::Established) {
            // A repeated REP: the RTU got lost on the way; repeat it.
            let rtu = msg::rtu(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0));
            cx.send(from, CmMessage::Rtu(rtu).encode(s.tid));
        }
        return;
    }
    s.disarm();
    s.remote_ece = (rep.vendor_id, attr_mod);
    s.remote_comm = Some(rep.local_comm_id);
    s.remote_qpn = rep.local_qpn;
    s.psn = rep.starting_psn;
    // What we issue is bounded by what the peer accepts as target, and vice versa.
    s.initiator_depth = s.initiator_depth.min(rep.responder_resources);
    s.responder_resources = s.responder_resources.min(rep.initiator_depth);
    s.rnr_retry_count = rep.rnr_retry_count;
    let conn = ConnParam {
        private_data: pad(&rep.private_data, REP_PDATA),
        responder_resources: rep.responder_resources,
        initiator_depth: rep.initiator_depth,
        flow_control: u8::from(rep.end_to_end_flow_control),
        retry_count: 0,
        rnr_retry_count: rep.rnr_retry_count,
        srq: u8::from(rep.srq),
        qp_num: rep.local_qpn,
    };
    if s.qp.is_none() {
        s.enter(St::RepRcvd);
        let mut ev = Event::new(EventKind::ConnectResponse, 0, &s.handle, s.handle.shared.acks.clone());
        ev.conn = conn;
        emit(cx, st, n, ev);
        return;
    }
    if let Err(err) = connect_qp(s) {
        tracing::debug!(%err, "moving the QP to RTS after REP failed");
        let rej = msg::rej(s.local_comm.unwrap_or(0), rep.local_comm_id, msg::Rejected::Rep, Reason::NO_QP, &[]);
        s.enter(St::Failed);
        s.qp_to_err(cx);
        cx.send(from, CmMessage::Rej(rej).encode(s.tid));
        simple_event(cx, st, n, EventKind::ConnectError, -err.errno());
        return;
    }
    let rtu = msg::rtu(s.local_comm.unwrap_or(0), rep.local_comm_id);
    s.enter(St::Established);
    cx.send(from, CmMessage::Rtu(rtu).encode(s.tid));
    let mut ev = Event::new(EventKind::Established, 0, &s.handle, s.handle.shared.acks.clone());
    ev.conn = conn;
    emit(cx, st, n, ev);
}

/// A timer of id `n` expired.
pub(crate) fn timeout(cx: &mut Cx, st: &mut State, n: u64) {
    let Some(s) = st.ids.get_mut(&n) else { return };
    let kind = s.timer_kind.take();
    match (kind, s.st()) {
        (Some(TimerKind::Req), St::ReqSent) | (Some(TimerKind::Rep), St::RepSent) => {
            // IBTA: the peer did not answer in time; tell it (REJ "timeout"), give up.
            let rej = msg::rej(s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0), msg::Rejected::Other, Reason::TIMEOUT, &[]);
            s.enter(St::Failed);
            s.qp_to_err(cx);
            if let Some(peer) = s.remote {
                cx.send(peer, CmMessage::Rej(rej).encode(s.tid));
            }
            simple_event(cx, st, n, EventKind::Unreachable, -libc::ETIMEDOUT);
        }
        (Some(TimerKind::Dreq), St::DreqSent) => {
            s.enter(St::Disconnected);
            simple_event(cx, st, n, EventKind::Disconnected, -libc::ETIMEDOUT);
        }
        _ => {}
    }
}

/// The process of id `n`'s peer died.
pub(crate) fn peer_gone(cx: &mut Cx, st: &mut State, n: u64) {
    let Some(s) = st.ids.get_mut(&n) else { return };
    s.disarm();
    match s.st() {
        St::ReqSent => {
            s.enter(St::Failed);
            s.qp_to_err(cx);
            simple_event(cx, st, n, EventKind::Unreachable, -libc::ETIMEDOUT);
        }
        St::RepRcvd | St::RepSent => {
            s.enter(St::Failed);
            s.qp_to_err(cx);
            simple_event(cx, st, n, EventKind::ConnectError, -libc::ECONNRESET);
        }
        St::Established | St::DreqSent => {
            s.enter(St::Disconnected);
            s.qp_to_err(cx);
            simple_event(cx, st, n, EventKind::Disconnected, 0);
        }
        St::ReqRcvd => s.enter(St::Failed),
        _ => {}
    }
}

/// What destroying id `n` tells its peer (IBTA: destroying a communication id in each
/// state; the kernel's cm_destroy_id).
pub(crate) fn abandon(cx: &mut Cx, st: &mut State, n: u64) {
    let Some(s) = st.ids.get_mut(&n) else { return };
    let (local, remote) = (s.local_comm.unwrap_or(0), s.remote_comm.unwrap_or(0));
    let m = match s.st() {
        St::ReqSent => Some(CmMessage::Rej(msg::rej(local, remote, msg::Rejected::Req, Reason::TIMEOUT, &[]))),
        St::ReqRcvd | St::RepSent | St::RepRcvd if !s.handle.ps().is_datagram() => {
            Some(CmMessage::Rej(msg::rej(local, remote, msg::Rejected::Req, Reason::CONSUMER_DEFINED, &[])))
        }
        St::Established if s.handle.qp_type() != QpType::Ud && !s.handle.ps().is_datagram() => {
            s.qp_to_err(cx);
            s.tid = s.tid.wrapping_add(1);
            Some(CmMessage::Dreq(msg::dreq(local, remote, s.remote_qpn)))
        }
        St::DreqRcvd => Some(CmMessage::Drep(msg::drep(local, remote))),
        _ => None,
    };
    s.enter(St::Failed);
    if let (Some(m), Some(peer)) = (m, s.remote) {
        cx.send(peer, m.encode(s.tid));
    }
}

/// A child whose CONNECT_REQUEST nobody retrieved before its listener was destroyed:
/// rejected and forgotten (the kernel rejects such requests).
pub(crate) fn reject_orphan(cx: &mut Cx, st: &mut State, c: u64) {
    abandon(cx, st, c);
    if let Some(s) = st.ids.remove(&c) {
        if let Some(comm) = s.local_comm {
            st.by_comm.remove(&comm);
        }
        if let Some(peer) = s.remote {
            cx.out.push(Action::Unwatch { peer, pid: s.remote_pid });
        }
    }
}


/// The clock reached `cx.now`: messages to another host still unanswered are sent again
/// (IBTA Vol 1 §12.7.27; the last retry over, the response timer decides), then every
/// expired timer fires ([`timeout`]).
pub(crate) fn tick(cx: &mut Cx, st: &mut State) {
    let now = cx.now;
    for s in st.ids.values_mut() {
        let state = s.st();
        let Some(r) = s.resend.as_mut().filter(|r| r.at <= now) else { continue };
        if r.while_in != state || r.left == 0 {
            s.resend = None;
            continue;
        }
        r.left -= 1;
        r.at = now + r.every;
        let mad = r.mad;
        if let Some(peer) = s.remote {
            tracing::debug!(?peer, "CM message resent: no answer yet");
            cx.send(peer, mad);
        }
    }
    let due: Vec<u64> = st.ids.iter().filter(|(_, s)| s.timer.is_some_and(|t| t <= now)).map(|(n, _)| *n).collect();
    for n in due {
        if let Some(s) = st.ids.get_mut(&n) {
            s.timer = None;
        }
        timeout(cx, st, n);
    }
}
