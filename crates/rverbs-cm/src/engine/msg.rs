//! Building and reading the CM messages the handshake exchanges: the only place where
//! the engine meets the wire structs of [`crate::mad`].

use std::net::SocketAddr;

use rverbs::{Gid, QpType};

use crate::handle::PortSpace;
use crate::mad::{
    cma_ip::CMA_IP_HEADER_LEN, service, CmaIpHeader, Drep, Dreq, MessageKind, Mra, Path, Rej, RejReason, Rep, Req,
    Rtu, SidrRep, SidrReq, SidrStatus, TransportServiceType,
};

/// REJ reasons rdma_cm uses (IBTA Vol 1 Table 112), as the numbers REJECTED reports.
pub(crate) struct Reason;

impl Reason {
    pub(crate) const NO_QP: u16 = 1;
    pub(crate) const TIMEOUT: u16 = 4;
    pub(crate) const INVALID_SERVICE_ID: u16 = 8;
    pub(crate) const CONSUMER_DEFINED: u16 = 28;
    pub(crate) const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// SIDR_REP status: the service answered.
pub(crate) const SIDR_SUCCESS: u8 = 0;
/// SIDR_REP status: no such service.
pub(crate) const SIDR_UNSUPPORTED: u8 = 1;
/// SIDR_REP status: the consumer rejected the request.
pub(crate) const SIDR_REJECT: u8 = 2;

/// Which message a REJ rejects.
pub(crate) enum Rejected {
    Req,
    Rep,
    Other,
}

fn copy_into<const N: usize>(data: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    let n = data.len().min(N.saturating_sub(at));
    out[at..at + n].copy_from_slice(&data[..n]);
    out
}

/// What a REQ carries that the engine needs.
pub(crate) struct ReqArgs<'a> {
    pub(crate) comm: u32,
    pub(crate) ps: PortSpace,
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    pub(crate) ca_guid: u64,
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) psn: u32,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) flow_control: bool,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) srq: bool,
    pub(crate) cm_timeout: u8,
    pub(crate) cm_retries: u8,
    pub(crate) sgid: Gid,
    pub(crate) dgid: Gid,
    /// IBTA path MTU code (Table 206).
    pub(crate) path_mtu: u8,
    pub(crate) traffic_class: u8,
    pub(crate) ack_timeout: u8,
    pub(crate) ece_vendor: u32,
    pub(crate) private_data: &'a [u8],
}

fn cma_private_data<const N: usize>(src: SocketAddr, dst: SocketAddr, user: &[u8]) -> [u8; N] {
    let mut pd: [u8; N] = copy_into(user, CMA_IP_HEADER_LEN);
    CmaIpHeader { src, dst }.emit(&mut pd);
    pd
}

/// A REQ (IBTA Vol 1 §12.6.5) as rdma_cm sends it over RoCE: the service ID of the port
/// space and port, the RDMA CM IP header then the user's private data, the path MTU
/// (4096 on this host; what the link carries to another), P_Key 0xFFFF, the path as GIDs.
pub(crate) fn req(a: &ReqArgs<'_>) -> Req {
    let primary = Path {
        local_gid: a.sgid.0,
        remote_gid: a.dgid.0,
        traffic_class: a.traffic_class,
        hop_limit: 64,
        subnet_local: true,
        local_ack_timeout: a.ack_timeout,
        ..Path::default()
    };
    Req {
        local_comm_id: a.comm,
        vendor_id: a.ece_vendor & 0xff_ffff,
        service_id: service::service_id(a.ps as u16, a.dst.port()),
        local_ca_guid: a.ca_guid,
        local_qkey: 0,
        local_qpn: a.qpn & 0xff_ffff,
        responder_resources: a.responder_resources,
        local_eecn: 0,
        initiator_depth: a.initiator_depth,
        remote_eecn: 0,
        remote_cm_response_timeout: a.cm_timeout,
        // IBTA Table 106 / Annex A14: XRC is "extended" (3) with extended type 1.
        transport_service_type: match a.qp_type {
            QpType::Uc => TransportServiceType::Uc,
            QpType::XrcSend => TransportServiceType::Extended,
            _ => TransportServiceType::Rc,
        },
        end_to_end_flow_control: a.flow_control,
        starting_psn: a.psn,
        local_cm_response_timeout: a.cm_timeout,
        retry_count: a.retry_count,
        partition_key: 0xffff,
        path_mtu: a.path_mtu,
        rdc_exists: false,
        rnr_retry_count: a.rnr_retry_count,
        max_cm_retries: a.cm_retries,
        srq: a.srq,
        extended_transport_type: u8::from(a.qp_type == QpType::XrcSend),
        primary_path: primary,
        alternate_path: Path::default(),
        sap_supported: false,
        private_data: cma_private_data(a.src, a.dst, a.private_data),
    }
}

/// A SIDR_REQ (IBTA Vol 1 §12.11.1): request id, service ID, RDMA CM IP header and
/// private data.
pub(crate) fn sidr_req(request_id: u32, ps: PortSpace, src: SocketAddr, dst: SocketAddr, user: &[u8]) -> SidrReq {
    SidrReq {
        request_id,
        partition_key: 0xffff,
        service_id: service::service_id(ps as u16, dst.port()),
        private_data: cma_private_data(src, dst, user),
    }
}

/// What a REQ or SIDR_REQ says, as the passive side reads it.
pub(crate) struct ReqView<'a> {
    pub(crate) datagram: bool,
    pub(crate) comm: u32,
    pub(crate) ps: Option<PortSpace>,
    /// (requester, listener) addresses with ports.
    pub(crate) addrs: Option<(SocketAddr, SocketAddr)>,
    pub(crate) sgid: Option<Gid>,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) flow_control: bool,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) srq: bool,
    pub(crate) path_mtu: u8,
    pub(crate) traffic_class: u8,
    pub(crate) ece_vendor: u32,
    /// The consumer's private data (after the RDMA CM IP header).
    pub(crate) user_data: &'a [u8],
}

fn split(service_id: u64, pd: &[u8]) -> (Option<PortSpace>, Option<(SocketAddr, SocketAddr)>) {
    let Some((ps, port)) = service::split_service_id(service_id) else { return (None, None) };
    let ps = PortSpace::from_raw(u32::from(ps));
    let addrs = CmaIpHeader::parse(pd, port).ok().map(|h| {
        let canon = |a: SocketAddr| SocketAddr::new(crate::addr::canonical(a.ip()), a.port());
        (canon(h.src), canon(h.dst))
    });
    (ps, addrs)
}

impl<'a> From<&'a Req> for ReqView<'a> {
    fn from(r: &'a Req) -> Self {
        let (ps, addrs) = split(r.service_id, &r.private_data);
        ReqView {
            datagram: false,
            comm: r.local_comm_id,
            ps,
            addrs,
            sgid: (r.primary_path.local_gid != [0; 16]).then_some(Gid(r.primary_path.local_gid)),
            qpn: r.local_qpn,
            psn: r.starting_psn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            flow_control: r.end_to_end_flow_control,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            path_mtu: r.path_mtu,
            traffic_class: r.primary_path.traffic_class,
            ece_vendor: r.vendor_id,
            user_data: &r.private_data[CMA_IP_HEADER_LEN..],
        }
    }
}

impl<'a> From<&'a SidrReq> for ReqView<'a> {
    fn from(r: &'a SidrReq) -> Self {
        let (ps, addrs) = split(r.service_id, &r.private_data);
        ReqView {
            datagram: true,
            comm: r.request_id,
            ps,
            addrs,
            sgid: None,
            qpn: 0,
            psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: false,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: false,
            path_mtu: 5,
            traffic_class: 0,
            ece_vendor: 0,
            user_data: &r.private_data[CMA_IP_HEADER_LEN..],
        }
    }
}

/// What a REP carries.
pub(crate) struct RepArgs<'a> {
    pub(crate) comm: u32,
    pub(crate) remote_comm: u32,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) flow_control: bool,
    pub(crate) rnr_retry_count: u8,
    pub(crate) srq: bool,
    pub(crate) ca_guid: u64,
    pub(crate) ece_vendor: u32,
    pub(crate) private_data: &'a [u8],
}

/// A REP (IBTA Vol 1 §12.6.8).
pub(crate) fn rep(a: &RepArgs<'_>) -> Rep {
    Rep {
        local_comm_id: a.comm,
        remote_comm_id: a.remote_comm,
        local_qkey: 0,
        local_qpn: a.qpn & 0xff_ffff,
        local_eecn: 0,
        starting_psn: a.psn,
        vendor_id: a.ece_vendor & 0xff_ffff,
        responder_resources: a.responder_resources,
        initiator_depth: a.initiator_depth,
        target_ack_delay: 0,
        failover_accepted: 0,
        end_to_end_flow_control: a.flow_control,
        rnr_retry_count: a.rnr_retry_count,
        srq: a.srq,
        local_ca_guid: a.ca_guid,
        private_data: copy_into(a.private_data, 0),
    }
}

/// An RTU (IBTA Vol 1 §12.6.9).
pub(crate) fn rtu(local: u32, remote: u32) -> Rtu {
    Rtu { local_comm_id: local, remote_comm_id: remote, private_data: [0; crate::mad::rtu::PRIVATE_DATA_LEN] }
}

/// An MRA for a REQ (IBTA Vol 1 §12.6.6) asking for `service_timeout`.
pub(crate) fn mra(local: u32, remote: u32, service_timeout: u8) -> Mra {
    Mra {
        local_comm_id: local,
        remote_comm_id: remote,
        message_mraed: MessageKind::Req,
        service_timeout,
        private_data: [0; crate::mad::mra::PRIVATE_DATA_LEN],
    }
}

/// A REJ (IBTA Vol 1 §12.6.7).
pub(crate) fn rej(local: u32, remote: u32, what: Rejected, reason: u16, pdata: &[u8]) -> Rej {
    Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: match what {
            Rejected::Req => MessageKind::Req,
            Rejected::Rep => MessageKind::Rep,
            Rejected::Other => MessageKind::Other,
        },
        ari_length: 0,
        reason: RejReason::from(reason),
        ari: [0; crate::mad::rej::ARI_LEN],
        private_data: copy_into(pdata, 0),
    }
}

/// The reason number of a REJ.
pub(crate) fn reason_of(r: &Rej) -> u16 {
    u16::from(r.reason)
}

/// The consumer's private data of a REJ.
pub(crate) fn rej_private_data(r: &Rej) -> &[u8] {
    &r.private_data
}

/// A DREQ (IBTA Vol 1 §12.6.10).
pub(crate) fn dreq(local: u32, remote: u32, remote_qpn: u32) -> Dreq {
    Dreq {
        local_comm_id: local,
        remote_comm_id: remote,
        remote_qpn_eecn: remote_qpn & 0xff_ffff,
        private_data: [0; crate::mad::dreq::PRIVATE_DATA_LEN],
    }
}

/// A DREP (IBTA Vol 1 §12.6.11).
pub(crate) fn drep(local: u32, remote: u32) -> Drep {
    Drep { local_comm_id: local, remote_comm_id: remote, private_data: [0; crate::mad::drep::PRIVATE_DATA_LEN] }
}

/// A SIDR_REP (IBTA Vol 1 §12.11.2).
pub(crate) fn sidr_rep(request_id: u32, status: u8, qpn: u32, qkey: u32, port: u16, ps: PortSpace, pdata: &[u8]) -> SidrRep {
    SidrRep {
        request_id,
        status: SidrStatus::from(status),
        additional_info_length: 0,
        vendor_id: 0,
        qpn: qpn & 0xff_ffff,
        service_id: service::service_id(ps as u16, port),
        qkey,
        additional_info: [0; crate::mad::sidr::REP_ADDITIONAL_INFO_LEN],
        private_data: copy_into(pdata, 0),
    }
}

/// What a SIDR_REP says.
pub(crate) struct SidrRepView<'a> {
    pub(crate) request_id: u32,
    pub(crate) status: u8,
    pub(crate) qpn: u32,
    pub(crate) qkey: u32,
    pub(crate) private_data: &'a [u8],
}

impl<'a> From<&'a SidrRep> for SidrRepView<'a> {
    fn from(r: &'a SidrRep) -> Self {
        SidrRepView { request_id: r.request_id, status: u8::from(r.status), qpn: r.qpn, qkey: r.qkey, private_data: &r.private_data }
    }
}
