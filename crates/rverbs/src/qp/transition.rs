//! The one function that writes a QP's state, and who may.
//!
//! Read before editing: ibv_modify_qp(3), the locking note of the `qp` module and
//! docs/queue-pairs.md ("State machine").
//!
//! A QP's state lives in its shared record ([`QpRecord::state`]) and changes only through
//! [`QpRecord::transition`], whoever changes it: `modify_qp` (the application), the
//! requester (a failed send: SQE or ERR; an overrun of the send CQ), the responder side (a
//! request that broke a responder rule, an overrun of the receive CQ; run by this process
//! or by a peer process executing requests on this QP through the shared tables), creation
//! and destruction. Each change is traced (`tracing`, debug) with the QPN, the old and the
//! new state and its [`Cause`].

use std::sync::atomic::Ordering;

use rverbs_proto::verbs::QpState;

use super::QpInner;
use crate::shm::tables::QpRecord;

/// The state a writer expects to change from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Exactly this state (`modify_qp`: the state it validated against).
    Is(QpState),
    /// Any state but these (entering ERR: not from RESET, not again). A value no state
    /// has counts as none of them.
    NotIn(&'static [QpState]),
    /// Any state (creation and destruction).
    Any,
}

impl Expect {
    fn admits(self, raw: u32) -> bool {
        let s = QpState::from_raw(raw);
        match self {
            Expect::Is(want) => s == Some(want),
            Expect::NotIn(list) => s.is_none_or(|s| !list.contains(&s)),
            Expect::Any => true,
        }
    }
}

/// Why a QP's state changes (traced with the change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Creation: the record, maybe used by an earlier QP, starts in RESET.
    Create,
    /// ibv_modify_qp(3).
    Modify,
    /// A send work request completed in error: UC and UD stop in SQE, RC and XRC enter ERR.
    SendError,
    /// A completion overran the send CQ (QP_FATAL).
    SendCqOverrun,
    /// A request the QP received broke a responder rule, or its receive CQ overran.
    ResponderFault,
    /// ibv_destroy_qp(3), or the last handle dropped.
    Destroy,
    /// The fault plan raised QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR (docs/fault-injection.md).
    Injected,
}

impl Cause {
    /// The cause as the sanitizer's state history names it (docs/sanitizer.md).
    fn name(self) -> &'static str {
        match self {
            Cause::Create => "created",
            Cause::Modify => "ibv_modify_qp",
            Cause::SendError => "a send work request completed in error",
            Cause::SendCqOverrun => "the send CQ overran",
            Cause::ResponderFault => "a request broke a responder rule, or the receive CQ overran",
            Cause::Destroy => "destroyed",
            Cause::Injected => "the fault plan raised an event",
        }
    }
}

/// Entering ERR is allowed from every state but these.
pub(crate) const ERR_FROM_ANY_BUT: &[QpState] = &[QpState::Reset, QpState::Err];

impl QpRecord {
    /// Changes the state of QP `qpn` (this record's) from `from` to `to`: the only write
    /// of a QP's state, by this process or a peer. `slot` gives the slot of the QP's
    /// device when it is a QP of this endpoint, `None` for a peer's: the sanitizer's key,
    /// asked only when the sanitizer is on.
    ///
    /// Returns the state it changed from, or, if the state was not what `from` admits,
    /// the state it found (nothing changed). A value no state has reads as ERR, as in
    /// [`QpRecord::state`].
    pub(crate) fn transition(&self, qpn: u32, slot: impl FnOnce() -> Option<usize>, from: Expect, to: QpState, cause: Cause) -> std::result::Result<QpState, QpState> {
        let decode = |raw: u32| QpState::from_raw(raw).unwrap_or(QpState::Err);
        match self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |raw| from.admits(raw).then_some(to.raw())) {
            Ok(raw) => {
                tracing::debug!(qpn, from = ?decode(raw), to = ?to, cause = ?cause, "QP state");
                if crate::sanitizer::on() {
                    sanitize(qpn, slot(), raw, to, cause);
                }
                Ok(decode(raw))
            }
            Err(raw) => Err(decode(raw)),
        }
    }
}

/// Tells the sanitizer about a transition (its state history, docs/sanitizer.md). Out
/// of line: the state change only tests the switch.
#[cold]
#[inline(never)]
fn sanitize(qpn: u32, slot: Option<usize>, raw: u32, to: QpState, cause: Cause) {
    let from = QpState::from_raw(raw).unwrap_or(QpState::Err);
    match slot {
        Some(slot) => crate::sanitizer::transition(crate::sanitizer::Id::new(slot, qpn), from, to, cause.name()),
        None => crate::sanitizer::peer_transition(qpn, from, to, cause.name()),
    }
}

/// Whether a responder in `state` accepts requests (rxe drops requests for QPs below
/// RTR, and in ERR).
pub(crate) fn accepts_requests(state: QpState) -> bool {
    matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
}

impl QpInner {
    /// Changes this QP's state ([`QpRecord::transition`]).
    pub(crate) fn transition(&self, from: Expect, to: QpState, cause: Cause) -> std::result::Result<QpState, QpState> {
        self.rec.transition(self.qpn, || Some(self.slot()), from, to, cause)
    }
}
