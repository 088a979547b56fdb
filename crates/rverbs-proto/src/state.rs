//! The QP state machine and the attribute masks each transition requires.
//!
//! Read before editing: ibv_modify_qp(3), and the IBTA state table that the Linux
//! core applies to every device (`ib_modify_qp_is_ok`): a transition is legal only if
//! the table has it, every required attribute is in the mask, and no attribute outside
//! required ∪ optional ∪ {STATE} is.

use bitflags::bitflags;

use crate::verbs::{QpState, QpType};

bitflags! {
    /// Which fields of a QP attribute set are meaningful (`enum ibv_qp_attr_mask`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `qp_state`: the state to move to.
        const STATE = 1;
        /// `cur_qp_state`: the state the caller believes the QP is in.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey`.
        const QKEY = 1 << 6;
        /// `ah_attr`: the primary path.
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_ah_attr` and friends.
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// `cap`.
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
        /// `rate_limit`.
        const RATE_LIMIT = 1 << 25;
    }
}

/// What a legal transition requires and allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Attributes that must be in the mask.
    pub required: QpAttrMask,
    /// Attributes that may be in the mask.
    pub optional: QpAttrMask,
}

/// Why a modify request is refused (all map to `EINVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransitionError {
    /// The table has no such transition for this QP type.
    Illegal {
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
    },
    /// Required attributes are missing from the mask.
    Missing(QpAttrMask),
    /// Attributes outside required ∪ optional are in the mask.
    Unexpected(QpAttrMask),
    /// `CUR_STATE` was given but is not a state it may be given in, or differs from
    /// the QP's actual state.
    CurState,
}

type M = QpAttrMask;

const CONNECTED_INIT: M = M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS);
const UD_INIT: M = M::PKEY_INDEX.union(M::PORT).union(M::QKEY);
const UC_RTR_REQ: M = M::AV.union(M::PATH_MTU).union(M::DEST_QPN).union(M::RQ_PSN);
const RC_RTR_REQ: M = UC_RTR_REQ.union(M::MAX_DEST_RD_ATOMIC).union(M::MIN_RNR_TIMER);
const CONNECTED_RTR_OPT: M = M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX);
const RC_RTS_REQ: M = M::TIMEOUT
    .union(M::RETRY_CNT)
    .union(M::RNR_RETRY)
    .union(M::SQ_PSN)
    .union(M::MAX_QP_RD_ATOMIC);
const UD_RTS_OPT: M = M::CUR_STATE.union(M::QKEY);
const UC_RTS_OPT: M = M::CUR_STATE
    .union(M::ALT_PATH)
    .union(M::ACCESS_FLAGS)
    .union(M::PATH_MIG_STATE);
const RC_RTS_OPT: M = UC_RTS_OPT.union(M::MIN_RNR_TIMER);

/// The depth a QP's `max_rd_atomic` / `max_dest_rd_atomic` gets: rxe rounds a nonzero
/// value up to a power of two (docs/rocev2-wire.md §3.1); 0 stays 0.
pub const fn rd_atomic_depth(v: u8) -> u32 {
    if v == 0 {
        0
    } else {
        (v as u32).next_power_of_two()
    }
}

/// The transition table of `ib_modify_qp_is_ok` for the QP types rverbs supports.
///
/// Returns `None` when `from → to` is not a legal transition for `qp_type`.
pub fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<Transition> {
    use QpState::{Err, Init, Reset, Rtr, Rts, Sqd, Sqe};
    use QpType::*;
    let none = M::empty();
    let t = |required, optional| Some(Transition { required, optional });
    match (from, to) {
        // Any state may go to RESET with no attributes, and any but RESET to ERR.
        (_, Reset) => t(none, none),
        (Reset, Err) => None,
        (_, Err) => t(none, none),
        (Reset, Init) => match qp_type {
            Ud => t(UD_INIT, none),
            Rc | Uc | XrcSend | XrcRecv => t(CONNECTED_INIT, none),
            RawPacket => t(M::PORT, none),
            Driver => None,
        },
        (Init, Init) => match qp_type {
            Ud => t(none, UD_INIT),
            Rc | Uc | XrcSend | XrcRecv => t(none, CONNECTED_INIT),
            RawPacket => t(none, M::PORT),
            Driver => None,
        },
        (Init, Rtr) => match qp_type {
            Ud => t(none, M::PKEY_INDEX.union(M::QKEY)),
            Uc | XrcSend => t(UC_RTR_REQ, CONNECTED_RTR_OPT),
            Rc | XrcRecv => t(RC_RTR_REQ, CONNECTED_RTR_OPT),
            RawPacket => t(none, none),
            Driver => None,
        },
        (Rtr, Rts) => match qp_type {
            Ud => t(M::SQ_PSN, UD_RTS_OPT),
            Uc => t(M::SQ_PSN, UC_RTS_OPT),
            Rc => t(RC_RTS_REQ, RC_RTS_OPT),
            XrcSend => t(RC_RTS_REQ, UC_RTS_OPT),
            XrcRecv => t(M::TIMEOUT.union(M::SQ_PSN), RC_RTS_OPT),
            RawPacket => t(none, M::RATE_LIMIT),
            Driver => None,
        },
        (Rts, Rts) | (Sqd, Rts) => match qp_type {
            Ud => t(none, UD_RTS_OPT),
            Uc | XrcSend => t(none, UC_RTS_OPT),
            Rc | XrcRecv => t(none, RC_RTS_OPT),
            RawPacket if from == Rts => t(none, M::RATE_LIMIT),
            RawPacket | Driver => None,
        },
        (Rts, Sqd) => match qp_type {
            Driver => None,
            _ => t(none, M::EN_SQD_ASYNC_NOTIFY),
        },
        (Sqd, Sqd) => match qp_type {
            Ud => t(none, M::PKEY_INDEX.union(M::QKEY)),
            Uc => t(
                none,
                M::AV
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::PATH_MIG_STATE),
            ),
            Rc => t(
                none,
                M::PORT
                    .union(M::AV)
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
            XrcSend => t(
                none,
                M::PORT
                    .union(M::AV)
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::PATH_MIG_STATE),
            ),
            XrcRecv => t(
                none,
                M::PORT
                    .union(M::AV)
                    .union(M::TIMEOUT)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
            RawPacket | Driver => None,
        },
        (Sqe, Rts) => match qp_type {
            Ud => t(none, UD_RTS_OPT),
            Uc => t(none, M::CUR_STATE.union(M::ACCESS_FLAGS)),
            _ => None,
        },
        _ => None,
    }
}

/// Checks a modify request against the table (ibv_modify_qp(3)).
///
/// `current` is the QP's real state; `cur_claim` is `cur_qp_state` when the mask has
/// `CUR_STATE`. Without `STATE` in the mask the target is the current state.
/// Returns the target state.
///
/// Rule: `CUR_STATE` is only accepted from RTR, RTS, SQD and SQE (ib_modify_qp_is_ok).
/// Deviation: a `cur_qp_state` that differs from the real state is refused; rxe does not
/// compare the two.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    mask: QpAttrMask,
    target: QpState,
    cur_claim: QpState,
) -> Result<QpState, TransitionError> {
    let to = if mask.contains(M::STATE) { target } else { current };
    if mask.contains(M::CUR_STATE) {
        let allowed = matches!(current, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe);
        if !allowed || cur_claim != current {
            return Err(TransitionError::CurState);
        }
    }
    let Some(tr) = transition(qp_type, current, to) else {
        return Err(TransitionError::Illegal { from: current, to });
    };
    let missing = tr.required.difference(mask);
    if !missing.is_empty() {
        return Err(TransitionError::Missing(missing));
    }
    let unexpected = mask.difference(tr.required | tr.optional | M::STATE);
    if !unexpected.is_empty() {
        return Err(TransitionError::Unexpected(unexpected));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

    fn ok(t: QpType, from: QpState, to: QpState, mask: M) -> Result<QpState, TransitionError> {
        check_modify(t, from, mask | M::STATE, to, from)
    }

    #[test]
    fn rc_reset_to_init_requires_pkey_port_access() {
        assert_eq!(ok(QpType::Rc, Reset, Init, CONNECTED_INIT), Ok(Init));
        assert_eq!(
            ok(QpType::Rc, Reset, Init, M::PKEY_INDEX | M::PORT),
            Err(TransitionError::Missing(M::ACCESS_FLAGS))
        );
    }

    #[test]
    fn ud_reset_to_init_requires_qkey_not_access() {
        assert_eq!(ok(QpType::Ud, Reset, Init, UD_INIT), Ok(Init));
        assert_eq!(
            ok(QpType::Ud, Reset, Init, UD_INIT | M::ACCESS_FLAGS),
            Err(TransitionError::Unexpected(M::ACCESS_FLAGS))
        );
    }

    #[test]
    fn rc_init_to_rtr_requires_path_and_responder_attrs() {
        assert_eq!(ok(QpType::Rc, Init, Rtr, RC_RTR_REQ), Ok(Rtr));
        assert_eq!(
            ok(QpType::Rc, Init, Rtr, UC_RTR_REQ),
            Err(TransitionError::Missing(M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER))
        );
        assert_eq!(ok(QpType::Uc, Init, Rtr, UC_RTR_REQ), Ok(Rtr));
        assert_eq!(ok(QpType::Ud, Init, Rtr, M::empty()), Ok(Rtr));
    }

    #[test]
    fn rc_rtr_to_rts_requires_requester_attrs() {
        assert_eq!(ok(QpType::Rc, Rtr, Rts, RC_RTS_REQ), Ok(Rts));
        assert_eq!(
            ok(QpType::Rc, Rtr, Rts, M::SQ_PSN),
            Err(TransitionError::Missing(
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
            ))
        );
        assert_eq!(ok(QpType::Ud, Rtr, Rts, M::SQ_PSN), Ok(Rts));
    }

    #[test]
    fn skipping_states_is_illegal() {
        assert_eq!(
            ok(QpType::Rc, Reset, Rtr, RC_RTR_REQ),
            Err(TransitionError::Illegal { from: Reset, to: Rtr })
        );
        assert_eq!(
            ok(QpType::Rc, Init, Rts, RC_RTS_REQ),
            Err(TransitionError::Illegal { from: Init, to: Rts })
        );
        assert_eq!(
            ok(QpType::Rc, QpState::Err, Rts, M::empty()),
            Err(TransitionError::Illegal { from: QpState::Err, to: Rts })
        );
    }

    #[test]
    fn any_state_goes_to_reset_and_all_but_reset_to_err() {
        for &from in QpState::ALL {
            assert_eq!(ok(QpType::Rc, from, Reset, M::empty()), Ok(Reset));
            if from != Reset {
                assert_eq!(ok(QpType::Rc, from, QpState::Err, M::empty()), Ok(QpState::Err));
            }
        }
        assert_eq!(
            ok(QpType::Rc, Reset, QpState::Err, M::empty()),
            Err(TransitionError::Illegal { from: Reset, to: QpState::Err })
        );
        assert_eq!(
            ok(QpType::Rc, Rtr, Rtr, M::empty()),
            Err(TransitionError::Illegal { from: Rtr, to: Rtr })
        );
    }

    #[test]
    fn no_state_in_mask_modifies_in_place() {
        assert_eq!(check_modify(QpType::Rc, Rts, M::MIN_RNR_TIMER, Reset, Rts), Ok(Rts));
        assert_eq!(
            check_modify(QpType::Rc, Rts, M::PATH_MTU, Reset, Rts),
            Err(TransitionError::Unexpected(M::PATH_MTU))
        );
    }

    #[test]
    fn cur_state_only_from_rtr_rts_sqd_sqe_and_must_match() {
        assert_eq!(
            check_modify(QpType::Rc, Init, M::STATE | M::CUR_STATE, Init, Init),
            Err(TransitionError::CurState)
        );
        assert_eq!(
            check_modify(QpType::Rc, Rts, M::STATE | M::CUR_STATE, Rts, Rts),
            Ok(Rts)
        );
        assert_eq!(
            check_modify(QpType::Rc, Rts, M::STATE | M::CUR_STATE, Rts, Sqd),
            Err(TransitionError::CurState)
        );
    }

    #[test]
    fn sqd_and_sqe_transitions() {
        assert_eq!(ok(QpType::Rc, Rts, Sqd, M::EN_SQD_ASYNC_NOTIFY), Ok(Sqd));
        assert_eq!(ok(QpType::Rc, Sqd, Rts, M::empty()), Ok(Rts));
        assert_eq!(ok(QpType::Rc, Sqd, Sqd, M::TIMEOUT | M::AV), Ok(Sqd));
        assert_eq!(
            ok(QpType::Rc, Sqe, Rts, M::empty()),
            Err(TransitionError::Illegal { from: Sqe, to: Rts })
        );
        assert_eq!(ok(QpType::Ud, Sqe, Rts, M::QKEY), Ok(Rts));
    }
}
