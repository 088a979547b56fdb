//! Connecting a QP: RESET → INIT → RTR → RTS with the attribute masks the state table
//! requires, so that no caller writes the ladder (or its masks) by hand.
//!
//! Read before editing: ibv_modify_qp(3) (the required attributes per QP type and
//! transition) and `rverbs_proto::state` (the table this module reads them from).

use rverbs_proto::state::{transition, QpAttrMask, TransitionError};
use rverbs_proto::verbs::{Access, Mtu, QpState};

use crate::rings::qp_attr::{AhAttr, GlobalRoute, QpAttr};
use super::Qp;
use crate::error::{Error, Result};
use crate::gid::Gid;
use crate::rule::Rule;

/// The states [`Qp::connect`] walks through, in order.
const LADDER: [QpState; 4] = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts];

/// What connecting a QP to its peer needs: this side's port and the access its responder
/// grants, the peer as `ibv_rc_pingpong` exchanges it (GID, QPN, PSN), and the path's
/// transport parameters.
///
/// Each step of [`Qp::connect`] takes from it only the attributes the step requires
/// (the rest of a `RemotePath` is ignored), so one value serves every QP type: UD uses
/// `qkey` and `sq_psn`; UC adds the path, `dest_qp_num`, the PSNs and `access`; RC and
/// XRC add the timers, retry counts and read/atomic depths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemotePath {
    /// Local port (RESET → INIT).
    pub port_num: u8,
    /// P_Key index (RESET → INIT).
    pub pkey_index: u16,
    /// Remote access this QP's responder grants (RESET → INIT, connected QPs).
    pub access: Access,
    /// Q_Key (RESET → INIT, UD).
    pub qkey: u32,
    /// The path to the peer: an address vector, global on a RoCE port (INIT → RTR).
    pub ah_attr: AhAttr,
    /// Path MTU (INIT → RTR).
    pub path_mtu: Mtu,
    /// The peer's QP number (INIT → RTR, connected QPs).
    pub dest_qp_num: u32,
    /// The first PSN this QP expects: the peer's send PSN (INIT → RTR).
    pub rq_psn: u32,
    /// RDMA READ/atomic requests the responder takes at once (INIT → RTR, RC and XRC targets).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code the responder sends (INIT → RTR, RC and XRC targets).
    pub min_rnr_timer: u8,
    /// This QP's first send PSN (RTR → RTS).
    pub sq_psn: u32,
    /// Local ACK timeout, 4.096 µs × 2^timeout (RTR → RTS, RC and XRC).
    pub timeout: u8,
    /// Transport retries (RTR → RTS, RC and XRC initiators).
    pub retry_cnt: u8,
    /// RNR retries, 7 = infinite (RTR → RTS, RC and XRC initiators).
    pub rnr_retry: u8,
    /// RDMA READ/atomic requests outstanding as initiator (RTR → RTS, RC and XRC initiators).
    pub max_rd_atomic: u8,
}

impl RemotePath {
    /// A path to QP `dest_qp_num` at `dgid`, sent from the local GID at `sgid_index` of
    /// port 1 (hop limit 64), with `ibv_rc_pingpong`'s transport parameters (MTU 1024,
    /// timeout 14, retry and RNR retry 7), PSNs 0, read/atomic depth 4, RNR timer code 1,
    /// Q_Key 0x11111111 (`ibv_ud_pingpong`'s) and no remote access granted.
    pub fn new(dgid: Gid, sgid_index: u8, dest_qp_num: u32) -> RemotePath {
        RemotePath {
            port_num: 1,
            pkey_index: 0,
            access: Access::empty(),
            qkey: 0x1111_1111,
            ah_attr: AhAttr {
                grh: Some(GlobalRoute { dgid, sgid_index, hop_limit: 64, ..GlobalRoute::default() }),
                port_num: 1,
                ..AhAttr::default()
            },
            path_mtu: Mtu::Mtu1024,
            dest_qp_num,
            rq_psn: 0,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
        }
    }

    /// The attributes for moving to `state`: every field of the path, `qp_state` set.
    /// Which of them count is said by the mask [`Qp::connect`] gives with them.
    pub fn attr(&self, state: QpState) -> QpAttr {
        QpAttr {
            qp_state: state,
            port_num: self.port_num,
            pkey_index: self.pkey_index,
            qp_access_flags: self.access,
            qkey: self.qkey,
            ah_attr: self.ah_attr,
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qp_num,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            ..QpAttr::default()
        }
    }
}

impl Qp {
    /// Connects the QP along `path`: RESET → INIT → RTR → RTS, starting from the state it
    /// is in (a QP already in INIT or RTR continues from there).
    ///
    /// Rule: ibv_modify_qp(3): each step gives exactly the attributes the IBTA state table
    /// requires for this QP type and transition (`rverbs_proto::state::transition`,
    /// `required`), plus STATE; optional attributes are left as they are.
    /// Errors: as [`Qp::connect_until`].
    pub fn connect(&self, path: &RemotePath) -> Result<()> {
        self.connect_until(path, QpState::Rts)
    }

    /// As [`Qp::connect`], stopping in `last` (INIT, RTR or RTS): the steps from the
    /// QP's current state up to `last`, one [`Qp::modify`] each.
    ///
    /// Rule: the steps and their masks are those of [`Qp::connect`].
    /// Errors: `EINVAL`: `last` is not INIT, RTR or RTS
    /// ([`Error::Invalid`]); the QP is not in a state before `last` on the ladder
    /// ([`Error::QpStateForbids`]); a step is refused by [`Qp::modify`] (the QP stays in
    /// the state the last successful step reached).
    pub fn connect_until(&self, path: &RemotePath, last: QpState) -> Result<()> {
        let verb = "connect";
        let pos = |s: QpState| LADDER.iter().position(|&x| x == s);
        let end = match pos(last) {
            Some(i) if i > 0 => i,
            _ => return Err(Error::invalid(verb, Rule::ConnectTarget { last })),
        };
        let state = self.state();
        let mut i = match pos(state) {
            Some(i) if i < end => i,
            _ => return Err(Error::QpStateForbids { verb, state }),
        };
        while i < end {
            let (from, to) = (LADDER[i], LADDER[i + 1]);
            let step = transition(self.qp_type(), from, to)
                .ok_or(Error::Transition(TransitionError::Illegal { from, to }))?;
            self.modify(&path.attr(to), QpAttrMask::STATE | step.required)?;
            i += 1;
        }
        Ok(())
    }
}
