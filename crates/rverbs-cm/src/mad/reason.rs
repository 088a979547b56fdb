//! REJ reasons and SIDR_REP statuses: IBTA Vol 1 §12.6 (the REJ reason table that follows
//! Table 108) and Table 120 (SIDR_REP Status).
//!
//! The numbering is the kernel's, which follows the spec: Linux `include/rdma/ib_cm.h`
//! `enum ib_cm_rej_reason` and `enum ib_cm_sidr_status`. Unknown wire values are data (smoltcp
//! `enum_with_unknown!`): they decode to `Unknown(value)` and encode back unchanged.

use super::field::FieldValue;

use rverbs_proto::enum_with_unknown;

/// `FieldValue` for an [`enum_with_unknown!`] enum: its wire value in a bit field.
macro_rules! field_value {
    ($name:ident($ty:ty)) => {
        impl FieldValue for $name {
            fn from_bits(bits: u32) -> Self {
                $name::from(bits as $ty)
            }
            fn into_bits(self) -> u32 {
                u32::from(<$ty>::from(self))
            }
        }
    };
}

enum_with_unknown! {
    /// The Reason of a REJ (16 bits): IBTA Vol 1 §12.6, REJ reason table; values and names
    /// of Linux `enum ib_cm_rej_reason` (`IB_CM_REJ_*`).
    ///
    /// Rule: Linux cma.c: a consumer's `rdma_reject` is sent as `ConsumerDefined` (28), and
    /// on RoCE rdma_cm reports a received REJ's reason as the event status, so a peer's
    /// reject shows up as status 28.
    pub enum RejReason(u16) {
        /// 1: no QP available (`IB_CM_REJ_NO_QP`).
        NoQp = 1,
        /// 2: no EEC available (`IB_CM_REJ_NO_EEC`).
        NoEec = 2,
        /// 3: no resources available (`IB_CM_REJ_NO_RESOURCES`).
        NoResources = 3,
        /// 4: timeout (`IB_CM_REJ_TIMEOUT`).
        Timeout = 4,
        /// 5: unsupported request (`IB_CM_REJ_UNSUPPORTED`).
        Unsupported = 5,
        /// 6: invalid communication ID (`IB_CM_REJ_INVALID_COMM_ID`).
        InvalidCommId = 6,
        /// 7: invalid communication instance (`IB_CM_REJ_INVALID_COMM_INSTANCE`).
        InvalidCommInstance = 7,
        /// 8: invalid service ID, nobody listens on it (`IB_CM_REJ_INVALID_SERVICE_ID`).
        InvalidServiceId = 8,
        /// 9: invalid transport service type (`IB_CM_REJ_INVALID_TRANSPORT_TYPE`).
        InvalidTransportType = 9,
        /// 10: stale connection (`IB_CM_REJ_STALE_CONN`).
        StaleConn = 10,
        /// 11: RDC does not exist (`IB_CM_REJ_RDC_NOT_EXIST`).
        RdcNotExist = 11,
        /// 12: primary remote port GID rejected (`IB_CM_REJ_INVALID_GID`).
        InvalidGid = 12,
        /// 13: primary remote port LID rejected (`IB_CM_REJ_INVALID_LID`).
        InvalidLid = 13,
        /// 14: primary SL rejected (`IB_CM_REJ_INVALID_SL`).
        InvalidSl = 14,
        /// 15: primary traffic class rejected (`IB_CM_REJ_INVALID_TRAFFIC_CLASS`).
        InvalidTrafficClass = 15,
        /// 16: primary hop limit rejected (`IB_CM_REJ_INVALID_HOP_LIMIT`).
        InvalidHopLimit = 16,
        /// 17: primary packet rate rejected (`IB_CM_REJ_INVALID_PACKET_RATE`).
        InvalidPacketRate = 17,
        /// 18: alternate remote port GID rejected (`IB_CM_REJ_INVALID_ALT_GID`).
        InvalidAltGid = 18,
        /// 19: alternate remote port LID rejected (`IB_CM_REJ_INVALID_ALT_LID`).
        InvalidAltLid = 19,
        /// 20: alternate SL rejected (`IB_CM_REJ_INVALID_ALT_SL`).
        InvalidAltSl = 20,
        /// 21: alternate traffic class rejected (`IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS`).
        InvalidAltTrafficClass = 21,
        /// 22: alternate hop limit rejected (`IB_CM_REJ_INVALID_ALT_HOP_LIMIT`).
        InvalidAltHopLimit = 22,
        /// 23: alternate packet rate rejected (`IB_CM_REJ_INVALID_ALT_PACKET_RATE`).
        InvalidAltPacketRate = 23,
        /// 24: port and CM redirected; the ARI holds a ClassPortInfo
        /// (`IB_CM_REJ_PORT_CM_REDIRECT`).
        PortCmRedirect = 24,
        /// 25: port redirected (`IB_CM_REJ_PORT_REDIRECT`).
        PortRedirect = 25,
        /// 26: path MTU not supported (`IB_CM_REJ_INVALID_MTU`).
        InvalidMtu = 26,
        /// 27: insufficient responder resources (`IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES`).
        InsufficientRespResources = 27,
        /// 28: rejected by the consumer; what `rdma_reject` sends
        /// (`IB_CM_REJ_CONSUMER_DEFINED`).
        ConsumerDefined = 28,
        /// 29: RNR retry count rejected (`IB_CM_REJ_INVALID_RNR_RETRY`).
        InvalidRnrRetry = 29,
        /// 30: the REQ's Local Communication ID duplicates a live one
        /// (`IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID`).
        DuplicateLocalCommId = 30,
        /// 31: class version not supported (`IB_CM_REJ_INVALID_CLASS_VERSION`).
        InvalidClassVersion = 31,
        /// 32: primary flow label rejected (`IB_CM_REJ_INVALID_FLOW_LABEL`).
        InvalidFlowLabel = 32,
        /// 33: alternate flow label rejected (`IB_CM_REJ_INVALID_ALT_FLOW_LABEL`).
        InvalidAltFlowLabel = 33,
        /// 35: an ECE vendor option is not supported
        /// (`IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`).
        VendorOptionNotSupported = 35,
    }
}
field_value!(RejReason(u16));

enum_with_unknown! {
    /// The Status of a SIDR_REP (8 bits): IBTA Vol 1 Table 120; values and names of Linux
    /// `enum ib_cm_sidr_status` (`IB_SIDR_*`).
    pub enum SidrStatus(u8) {
        /// 0: the QPN and Q_Key are valid (`IB_SIDR_SUCCESS`).
        Success = 0,
        /// 1: the service ID is not supported (`IB_SIDR_UNSUPPORTED`).
        Unsupported = 1,
        /// 2: the service provider rejected the request (`IB_SIDR_REJECT`).
        Reject = 2,
        /// 3: no QP available (`IB_SIDR_NO_QP`).
        NoQp = 3,
        /// 4: redirected; Additional Information holds a ClassPortInfo (`IB_SIDR_REDIRECT`).
        Redirect = 4,
        /// 5: class version not supported (`IB_SIDR_UNSUPPORTED_VERSION`).
        UnsupportedVersion = 5,
    }
}
field_value!(SidrStatus(u8));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rej_reason_value_round_trips() {
        for v in 0..=u16::MAX {
            assert_eq!(u16::from(RejReason::from(v)), v);
        }
    }

    #[test]
    fn every_sidr_status_value_round_trips() {
        for v in 0..=u8::MAX {
            assert_eq!(u8::from(SidrStatus::from(v)), v);
        }
    }

    #[test]
    fn rej_reason_numbers_match_ib_cm_h() {
        // Values of Linux include/rdma/ib_cm.h enum ib_cm_rej_reason.
        let expected: &[(RejReason, u16)] = &[
            (RejReason::NoQp, 1),
            (RejReason::Timeout, 4),
            (RejReason::InvalidServiceId, 8),
            (RejReason::StaleConn, 10),
            (RejReason::InvalidAltPacketRate, 23),
            (RejReason::PortCmRedirect, 24),
            (RejReason::PortRedirect, 25),
            (RejReason::InvalidMtu, 26),
            (RejReason::InsufficientRespResources, 27),
            (RejReason::ConsumerDefined, 28),
            (RejReason::InvalidRnrRetry, 29),
            (RejReason::DuplicateLocalCommId, 30),
            (RejReason::InvalidClassVersion, 31),
            (RejReason::InvalidFlowLabel, 32),
            (RejReason::InvalidAltFlowLabel, 33),
            (RejReason::VendorOptionNotSupported, 35),
        ];
        for &(reason, value) in expected {
            assert_eq!(u16::from(reason), value, "{reason:?}");
            assert_eq!(RejReason::from(value), reason);
        }
        assert_eq!(RejReason::from(34), RejReason::Unknown(34));
        assert_eq!(RejReason::from(0), RejReason::Unknown(0));
    }

    #[test]
    fn rej_reason_known_values_are_1_to_33_and_35() {
        let mut values: Vec<u16> = RejReason::KNOWN.iter().map(|&r| u16::from(r)).collect();
        values.sort_unstable();
        let mut expected: Vec<u16> = (1..=33).collect();
        expected.push(35);
        assert_eq!(values, expected);
    }

    #[test]
    fn sidr_status_numbers_match_ib_cm_h() {
        let values: Vec<u8> = SidrStatus::KNOWN.iter().map(|&s| u8::from(s)).collect();
        assert_eq!(values, [0, 1, 2, 3, 4, 5]);
        assert_eq!(SidrStatus::from(4), SidrStatus::Redirect);
        assert_eq!(SidrStatus::from(6), SidrStatus::Unknown(6));
    }
}
