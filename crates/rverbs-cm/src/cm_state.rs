//! Where an id is in the rdma_cm state machine, and the transitions it may make.

/// The states of an id, named after the kernel's `enum rdma_cm_state` and the IBTA CM
/// states they stand for (IBTA Vol 1 §12.9, Figure 158: the communication state
/// diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmState {
    /// Created (RDMA_CM_IDLE).
    Idle,
    /// Bound to an address (RDMA_CM_ADDR_BOUND).
    Bound,
    /// Address resolved (RDMA_CM_ADDR_RESOLVED).
    AddrResolved,
    /// Route resolved (RDMA_CM_ROUTE_RESOLVED).
    RouteResolved,
    /// Listening (RDMA_CM_LISTEN).
    Listen,
    /// Active: REQ (or SIDR_REQ) sent, waiting for REP/REJ (IBTA REQ Sent).
    ReqSent,
    /// Active without a QP: REP received, CONNECT_RESPONSE delivered, waiting for
    /// rdma_establish (IBTA REP Rcvd).
    RepRcvd,
    /// Passive: REQ received, CONNECT_REQUEST delivered, waiting for accept or reject
    /// (IBTA REQ Rcvd / MRA Sent).
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU (IBTA REP Sent).
    RepSent,
    /// Connected (IBTA Established; for datagram ids: the SIDR exchange is done).
    Established,
    /// This side sent DREQ, waiting for DREP (IBTA DREQ Sent).
    DreqSent,
    /// The peer sent DREQ; DISCONNECTED delivered; this side's rdma_disconnect sends
    /// DREP (IBTA DREQ Rcvd).
    DreqRcvd,
    /// The connection is over (IBTA TimeWait/Idle): DISCONNECTED was delivered.
    Disconnected,
    /// The request was rejected, timed out or failed.
    Failed,
}

impl CmState {
    /// Whether an id may go from `self` to `to`: the edges of the rdma_cm state machine
    /// (the kernel's `enum rdma_cm_state` transitions; IBTA Vol 1 §12.9, Figure 158).
    /// Any state may fail (a reject, a timeout, a dead peer, `rdma_destroy_id`).
    pub(crate) fn can_enter(self, to: CmState) -> bool {
        use CmState::*;
        matches!(
            (self, to),
            (_, Failed)
                | (Idle, Bound)
                | (Bound, AddrResolved | Listen)
                | (AddrResolved, RouteResolved)
                | (RouteResolved, ReqSent)
                | (ReqSent, RepRcvd | Established)
                | (Idle, ReqRcvd)
                | (ReqRcvd, RepSent | Established)
                | (RepRcvd, Established)
                | (RepSent, Established | DreqSent | DreqRcvd)
                | (Established, DreqSent | DreqRcvd | Disconnected)
                | (DreqSent | DreqRcvd, Disconnected)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::CmState::{self as St, *};

    #[test]
    fn the_handshake_paths_are_transitions() {
        let active = [Idle, Bound, AddrResolved, RouteResolved, ReqSent, Established, DreqSent, Disconnected];
        let passive = [Idle, ReqRcvd, RepSent, Established, DreqRcvd, Disconnected];
        let no_qp = [RouteResolved, ReqSent, RepRcvd, Established];
        for path in [&active[..], &passive, &no_qp, &[Idle, Bound, Listen]] {
            for w in path.windows(2) {
                assert!(w[0].can_enter(w[1]), "{:?} -> {:?}", w[0], w[1]);
            }
        }
    }

    #[test]
    fn no_state_is_left_backwards_and_every_state_can_fail() {
        let all: [St; 14] = [
            Idle, Bound, AddrResolved, RouteResolved, Listen, ReqSent, RepRcvd, ReqRcvd, RepSent, Established, DreqSent,
            DreqRcvd, Disconnected, Failed,
        ];
        for s in all {
            assert!(s.can_enter(Failed), "{s:?} can fail");
            assert!(!Failed.can_enter(s) || s == Failed, "Failed is final, not {s:?}");
            assert!(!Disconnected.can_enter(s) || s == Failed, "Disconnected -> {s:?}");
        }
        assert!(!Listen.can_enter(ReqSent), "a listener does not connect");
        assert!(!Established.can_enter(ReqSent), "no reconnect on one id");
        assert!(!Idle.can_enter(Established));
    }
}
