//! Responder-side rule violations and what each becomes.
//!
//! Read before editing: rxe `rxe_resp.c` (responder checks and the NAK each failure
//! sends), `rxe_comp.c` (what the requester completes for each NAK) and the status list
//! of ibv_poll_cq(3). A violation is never an `Err` to an application: it becomes a NAK
//! and an error completion at the requester, maybe an error completion at the responder,
//! or a silent drop.

use crate::vendor_err;
use crate::verbs::WcStatus;

/// What the responder answers, as the AETH syndrome of an RC NAK (IBTA vol. 1, ch. 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nak {
    /// Receiver not ready; the requester retries after the RNR timer.
    Rnr,
    /// PSN sequence error (code 0).
    PsnSequence,
    /// Invalid request (code 1).
    InvalidRequest,
    /// Remote access error (code 2).
    RemoteAccess,
    /// Remote operational error (code 3).
    RemoteOperational,
}

impl Nak {
    /// The completion status the requester reports when this NAK ends the work request
    /// (rxe `rxe_comp.c` `check_ack`): `None` for NAKs that make it retry instead.
    pub const fn requester_status(self) -> Option<WcStatus> {
        match self {
            Nak::Rnr | Nak::PsnSequence => None,
            Nak::InvalidRequest => Some(WcStatus::RemInvReqErr),
            Nak::RemoteAccess => Some(WcStatus::RemAccessErr),
            Nak::RemoteOperational => Some(WcStatus::RemOpErr),
        }
    }

    /// The AETH NAK code (low 5 bits of the syndrome) for the non-RNR NAKs.
    pub const fn code(self) -> u8 {
        match self {
            Nak::Rnr => 0,
            Nak::PsnSequence => 0,
            Nak::InvalidRequest => 1,
            Nak::RemoteAccess => 2,
            Nak::RemoteOperational => 3,
        }
    }
}

/// A rule an inbound request broke at the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A SEND or WRITE_WITH_IMM found no receive WQE (rxe `check_resource`).
    ReceiveNotReady,
    /// The responder QP's access flags do not enable the operation (rxe `check_op_valid`).
    QpAccessDenied,
    /// READ or atomic to a responder with `max_dest_rd_atomic` 0.
    NoRdAtomicResources,
    /// An atomic's remote address is not 8-byte aligned.
    MisalignedAtomic,
    /// The opcode is not valid for the responder (wrong transport, unsupported op).
    InvalidOpcode,
    /// The receive buffers are smaller than the message (rxe `send_data_in`).
    ReceiveTooSmall,
    /// The rkey is unknown.
    RkeyUnknown,
    /// The rkey's memory belongs to another PD than the responder QP.
    RkeyWrongPd,
    /// The remote range is outside the rkey's memory.
    RkeyBounds,
    /// The rkey's memory lacks the access the operation needs.
    RkeyAccess,
    /// The receive WQE's scatter list is malformed (bad lkey, PD, bounds, or no
    /// LOCAL_WRITE).
    RecvWqeMalformed,
    /// SEND_WITH_INV named an rkey that cannot be invalidated.
    InvalidateFailed,
    /// A MIDDLE or LAST packet outside a message, or a packet of another operation inside
    /// one (docs/rocev2-wire.md §3.3 "Opcode sequence", rxe `check_op_seq`).
    OpcodeSequence,
    /// A packet's payload or RETH length breaks the length rules (docs/rocev2-wire.md §3.3
    /// "Length checks", rxe `check_length`).
    InvalidLength,
    /// An XRC request's XRCETH names no XRC SRQ, or one of another XRC domain than the
    /// target QP (IBTA Annex A14, docs/rocev2-wire.md §1.8).
    XrcSrqInvalid,
}

impl Violation {
    /// The NAK an RC responder sends (UC and UD drop silently instead).
    pub const fn nak(self) -> Nak {
        match self {
            Violation::ReceiveNotReady => Nak::Rnr,
            Violation::QpAccessDenied
            | Violation::NoRdAtomicResources
            | Violation::MisalignedAtomic
            | Violation::InvalidOpcode
            | Violation::ReceiveTooSmall
            | Violation::InvalidateFailed
            | Violation::OpcodeSequence
            | Violation::InvalidLength
            | Violation::XrcSrqInvalid => Nak::InvalidRequest,
            Violation::RkeyUnknown
            | Violation::RkeyWrongPd
            | Violation::RkeyBounds
            | Violation::RkeyAccess => Nak::RemoteAccess,
            Violation::RecvWqeMalformed => Nak::RemoteOperational,
        }
    }

    /// The status of the responder's receive completion when the violation happens
    /// while a receive WQE is in use, `None` when no receive WQE is involved.
    ///
    /// Deviation: a receive buffer that is too small completes `LOC_LEN_ERR` at the
    /// responder, as ibv_poll_cq(3)'s IBV_WC_LOC_LEN_ERR text and hardware do. rxe
    /// (6.1, measured by `tests/interop/rxe_errors.sh`) takes it for a malformed receive
    /// WQE: `LOC_QP_OP_ERR` at the responder, NAK remote operational error, so
    /// `REM_OP_ERR` at the requester.
    pub const fn responder_status(self) -> Option<WcStatus> {
        match self {
            Violation::ReceiveTooSmall => Some(WcStatus::LocLenErr),
            Violation::RecvWqeMalformed => Some(WcStatus::LocQpOpErr),
            Violation::InvalidateFailed => Some(WcStatus::RemInvReqErr),
            _ => None,
        }
    }

    /// The status of the responder's receive completion when the violation happens while
    /// a receive WQE is in use: [`Violation::responder_status`] where it names one, else
    /// the status the requester gets for the NAK (docs/rocev2-wire.md §3.3 table: "the
    /// in-progress recv WQE (if any) completed with an error"). `None` for RNR, which
    /// never holds a receive.
    pub const fn recv_status(self) -> Option<WcStatus> {
        match self.responder_status() {
            Some(s) => Some(s),
            None => self.nak().requester_status(),
        }
    }

    /// Whether an RC responder moves to the error state (class A/C errors do, RNR does
    /// not; rxe `rxe_resp.c`).
    pub const fn responder_fatal(self) -> bool {
        !matches!(self, Violation::ReceiveNotReady)
    }

    /// The documented `vendor_err` code (see [`vendor_err`]).
    pub const fn vendor_err(self) -> u32 {
        match self {
            Violation::ReceiveNotReady => vendor_err::RNR_EXHAUSTED,
            Violation::QpAccessDenied => vendor_err::REMOTE_QP_ACCESS,
            Violation::NoRdAtomicResources => vendor_err::REMOTE_RD_ATOMIC,
            Violation::MisalignedAtomic => vendor_err::REMOTE_ALIGN,
            Violation::InvalidOpcode => vendor_err::REMOTE_INVALID,
            Violation::ReceiveTooSmall => vendor_err::RECV_TOO_SMALL,
            Violation::RkeyUnknown => vendor_err::REMOTE_RKEY,
            Violation::RkeyWrongPd => vendor_err::REMOTE_PD,
            Violation::RkeyBounds => vendor_err::REMOTE_BOUNDS,
            Violation::RkeyAccess => vendor_err::REMOTE_MR_ACCESS,
            Violation::RecvWqeMalformed => vendor_err::RECV_WQE_BAD,
            Violation::InvalidateFailed => vendor_err::REMOTE_INVALIDATE,
            Violation::OpcodeSequence => vendor_err::REMOTE_SEQUENCE,
            Violation::InvalidLength => vendor_err::REMOTE_LENGTH,
            Violation::XrcSrqInvalid => vendor_err::REMOTE_XRC_SRQ,
        }
    }

    /// Every violation (for exhaustive tests).
    pub const ALL: &'static [Violation] = &[
        Violation::ReceiveNotReady,
        Violation::QpAccessDenied,
        Violation::NoRdAtomicResources,
        Violation::MisalignedAtomic,
        Violation::InvalidOpcode,
        Violation::ReceiveTooSmall,
        Violation::RkeyUnknown,
        Violation::RkeyWrongPd,
        Violation::RkeyBounds,
        Violation::RkeyAccess,
        Violation::RecvWqeMalformed,
        Violation::InvalidateFailed,
        Violation::OpcodeSequence,
        Violation::InvalidLength,
        Violation::XrcSrqInvalid,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rkey_faults_are_remote_access_errors() {
        for v in [
            Violation::RkeyUnknown,
            Violation::RkeyWrongPd,
            Violation::RkeyBounds,
            Violation::RkeyAccess,
        ] {
            assert_eq!(v.nak().requester_status(), Some(WcStatus::RemAccessErr));
            assert!(v.responder_fatal());
        }
    }

    #[test]
    fn rnr_retries_instead_of_failing() {
        assert_eq!(Violation::ReceiveNotReady.nak(), Nak::Rnr);
        assert_eq!(Nak::Rnr.requester_status(), None);
        assert!(!Violation::ReceiveNotReady.responder_fatal());
    }

    #[test]
    fn malformed_receive_is_remote_operational_error() {
        let v = Violation::RecvWqeMalformed;
        assert_eq!(v.nak().requester_status(), Some(WcStatus::RemOpErr));
        assert_eq!(v.responder_status(), Some(WcStatus::LocQpOpErr));
    }

    #[test]
    fn every_violation_has_a_distinct_vendor_err() {
        let mut seen = std::collections::HashSet::new();
        for v in Violation::ALL {
            assert!(vendor_err::describe(v.vendor_err()).is_some());
            assert!(seen.insert(v.vendor_err()), "{v:?}");
        }
    }
}
