//! QP attributes (`struct ibv_qp_attr`), capabilities and address vectors.

use rverbs_proto::verbs::{Access, Mtu, QpState};

use crate::error::Error;
use crate::gid::Gid;
use crate::limits::check_port;
use crate::rule::Rule;

/// Queue capacities (`struct ibv_qp_cap`).
///
/// Rule: ibv_create_qp(3): the device may grant more than requested and writes the
/// actual values back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
}

/// The global routing header of an address vector (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the source GID in the local GID table.
    pub sgid_index: u8,
    /// Hop limit (IP TTL).
    pub hop_limit: u8,
    /// Traffic class (IP TOS).
    pub traffic_class: u8,
}

/// An address vector (`struct ibv_ah_attr`).
///
/// Rule: on an Ethernet (RoCE) port the path is global: `grh` is required.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// The GRH; `Some` is `is_global = 1`.
    pub grh: Option<GlobalRoute>,
    /// Destination LID (0 on Ethernet).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Local port.
    pub port_num: u8,
}

/// A resolved UD address vector: where a UD send through an address handle goes
/// ([`AhAttr`]) and the handle of the PD the address handle was created in (a send through
/// an address handle of another PD fails, as in rxe).
///
/// Rule: a UD work request names its destination by address handle (`wr.ud.ah`). The
/// address handle ([`crate::Ah`]) holds its address vector and `&Ah` converts into
/// `&AddressVector`, which is what a work request carries ([`crate::UdDest`]), so the
/// work requests (this layer) need nothing from the verbs object above them. A posted
/// work request keeps its own copy, so sends already posted keep working after the
/// handle is destroyed (ibv_destroy_ah(3)). Only an address handle makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    pub(crate) attr: AhAttr,
    pub(crate) pd: u32,
}

impl AddressVector {
    /// The address attributes the handle was created with (ibv_create_ah(3)).
    pub fn attr(&self) -> AhAttr {
        self.attr
    }
}

/// Path migration state (`enum ibv_mig_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u32)]
pub enum MigState {
    /// Migrated.
    #[default]
    Migrated = 0,
    /// Rearm.
    Rearm = 1,
    /// Armed.
    Armed = 2,
}

/// QP attributes (`struct ibv_qp_attr`); which fields count is said by a
/// `QpAttrMask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// The state to move to.
    pub qp_state: QpState,
    /// The state the caller believes the QP is in (with `CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Path migration state.
    pub path_mig_state: MigState,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number (RC, UC).
    pub dest_qp_num: u32,
    /// Remote access the responder allows.
    pub qp_access_flags: Access,
    /// Capacities.
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Alternate path.
    pub alt_ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Raise SQ_DRAINED when entering SQD.
    pub en_sqd_async_notify: u8,
    /// Whether the send queue is draining (query only).
    pub sq_draining: u8,
    /// Outstanding RDMA READ/atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic as target.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code the responder sends.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout (4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit (kbps).
    pub rate_limit: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu256,
            path_mig_state: MigState::Migrated,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: Access::empty(),
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            alt_ah_attr: AhAttr::default(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            alt_port_num: 0,
            alt_timeout: 0,
            rate_limit: 0,
        }
    }
}

impl AhAttr {
    /// Checks an address vector against the device whose GID table has `gids` entries
    /// (ibv_create_ah(3), ibv_modify_qp(3) with IBV_QP_AV): the one port, a GRH (RoCE
    /// address vectors are global) and a source GID index inside the table.
    pub(crate) fn check(&self, verb: &'static str, gids: usize) -> crate::error::Result<()> {
        check_port(verb, self.port_num)?;
        let grh = self.grh.ok_or(Error::invalid(verb, Rule::GrhRequired))?;
        if usize::from(grh.sgid_index) >= gids {
            return Err(Error::invalid(verb, Rule::GidIndex { index: u32::from(grh.sgid_index), len: gids as u32 }));
        }
        Ok(())
    }
}
