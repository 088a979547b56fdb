//! The QP half of the connection manager: the attributes each state needs
//! (rdma_init_qp_attr(3)) and the transitions the handshake makes.
//!
//! Rules (rdma_create_qp(3), rdma_accept(3), rdma_connect(3), rdma_disconnect(3), and
//! the attributes the kernel's `rdma_init_qp_attr` gives for RoCE): a connected QP is
//! moved to INIT when it is created on the id (P_Key index 0, port 1, no remote access
//! yet); when the handshake has negotiated, INIT again with remote write, plus remote
//! read and atomic if the negotiated responder resources are non-zero; RTR with the path
//! (GRH to the peer's GID), the peer's QPN and PSN, the path MTU, responder resources
//! and min RNR timer 0; RTS with this side's PSN, the ACK timeout, retry and RNR retry
//! counts and the initiator depth. A datagram QP goes to RTS at creation (Q_Key
//! RDMA_UDP_QKEY 0x01234567, send PSN 0). Disconnect, reject and failures move the QP
//! to ERR, which flushes its work requests.

use rverbs::{Access, AhAttr, GlobalRoute, Qp, QpAttr, QpAttrMask, QpState, QpType};

use super::state::{IdState, St};
use crate::error::{Error, Result};
use crate::rule::Rule;

/// Q_Key of rdma_cm datagram services (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Whether QPs of `t` are reliable responders (RC, XRC target): READ/atomic resources.
fn responder(t: QpType) -> bool {
    matches!(t, QpType::Rc | QpType::XrcRecv)
}

/// Whether QPs of `t` are reliable requesters (RC, XRC initiator): retries, timeouts.
fn requester(t: QpType) -> bool {
    matches!(t, QpType::Rc | QpType::XrcSend)
}

/// The attributes and mask that move the id's QP to `state`.
pub(crate) fn attrs(s: &IdState, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
    let verb = "rdma_init_qp_attr";
    let qp_type = s.handle.qp_type();
    let sgid = s.sgid.ok_or(Error::invalid(verb, Rule::NoDevice))?;
    let mut a = QpAttr { qp_state: state, port_num: 1, ..QpAttr::default() };
    let mut m = QpAttrMask::STATE;
    let negotiated = s.remote_comm.is_some() || matches!(s.st(), St::RepRcvd | St::ReqRcvd);
    match (state, qp_type) {
        (QpState::Init, QpType::Ud) => {
            a.qkey = RDMA_UDP_QKEY;
            m |= QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
        }
        (QpState::Init, _) => {
            if negotiated {
                a.qp_access_flags = Access::REMOTE_WRITE;
                if responder(qp_type) && s.responder_resources > 0 {
                    a.qp_access_flags |= Access::REMOTE_READ | Access::REMOTE_ATOMIC;
                }
            }
            m |= QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
        }
        (QpState::Rtr, QpType::Ud) => {}
        (QpState::Rtr, _) => {
            if !negotiated {
                return Err(Error::invalid(verb, Rule::NotNegotiated { state }));
            }
            a.path_mtu = s.path_mtu;
            a.dest_qp_num = s.remote_qpn;
            a.rq_psn = s.remote_psn;
            a.ah_attr = AhAttr {
                grh: Some(GlobalRoute {
                    dgid: s.dgid.unwrap_or(sgid.gid),
                    flow_label: 0,
                    sgid_index: sgid.index,
                    hop_limit: 64,
                    traffic_class: s.tos,
                }),
                port_num: 1,
                ..AhAttr::default()
            };
            m |= QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN;
            if responder(qp_type) {
                a.max_dest_rd_atomic = s.responder_resources;
                a.min_rnr_timer = 0;
                m |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
            }
        }
        (QpState::Rts, QpType::Ud) => {
            a.sq_psn = 0;
            m |= QpAttrMask::SQ_PSN;
        }
        (QpState::Rts, _) => {
            if !negotiated {
                return Err(Error::invalid(verb, Rule::NotNegotiated { state }));
            }
            a.sq_psn = s.psn;
            m |= QpAttrMask::SQ_PSN;
            if qp_type == QpType::XrcRecv {
                // IBTA / the kernel's XRC_TGT RTS attributes: the ACK timeout only.
                a.timeout = s.qp_timeout();
                m |= QpAttrMask::TIMEOUT;
            }
            if requester(qp_type) {
                a.timeout = s.qp_timeout();
                a.retry_cnt = s.retry_count.min(7);
                a.rnr_retry = s.rnr_retry_count.min(7);
                a.max_rd_atomic = s.initiator_depth;
                m |= QpAttrMask::TIMEOUT | QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY | QpAttrMask::MAX_QP_RD_ATOMIC;
            }
        }
        (QpState::Err, _) | (QpState::Reset, _) => {}
        _ => return Err(Error::invalid(verb, Rule::NoAttrs { state })),
    }
    Ok((a, m))
}

fn modify(qp: &Qp, s: &IdState, state: QpState) -> Result<()> {
    let (a, m) = attrs(s, state)?;
    qp.modify(&a, m).map_err(Error::from)
}

/// rdma_create_qp(3): `qp` becomes id `s`'s QP, moved to INIT (a datagram QP to RTS).
pub(crate) fn attach(s: &mut IdState, qp: Qp) -> Result<()> {
    if s.qp.is_some() {
        return Err(Error::invalid("rdma_create_qp", Rule::QpExists));
    }
    if s.sgid.is_none() {
        return Err(Error::invalid("rdma_create_qp", Rule::NoDevice));
    }
    if qp.qp_type() == QpType::Ud {
        for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
            modify(&qp, s, state)?;
        }
    } else {
        modify(&qp, s, QpState::Init)?;
    }
    s.qp = Some(qp);
    Ok(())
}

/// Moves the id's QP (if it has one) through INIT (negotiated access), RTR and RTS.
pub(crate) fn connect_qp(s: &IdState) -> Result<()> {
    let Some(qp) = s.qp.clone() else { return Ok(()) };
    if qp.qp_type() == QpType::Ud {
        return Ok(());
    }
    if qp.state() == QpState::Init {
        modify(&qp, s, QpState::Init)?;
    }
    if qp.state() == QpState::Init {
        modify(&qp, s, QpState::Rtr)?;
    }
    if qp.state() == QpState::Rtr {
        modify(&qp, s, QpState::Rts)?;
    }
    Ok(())
}

/// Moves `qp` to ERR (its outstanding work requests flush): the engine's execution of
/// [`Action::QpToErr`](super::world::Action::QpToErr).
pub(crate) fn to_err(qp: &Qp) {
    let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    if let Err(err) = qp.modify(&a, QpAttrMask::STATE) {
        tracing::debug!(%err, "moving the id's QP to ERR");
    }
}
