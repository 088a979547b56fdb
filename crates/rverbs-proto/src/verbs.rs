//! The verbs vocabulary shared by every transport.
//!
//! Every enum here has the numeric values of `<infiniband/verbs.h>` (rdma-core 44), so a
//! value converts to and from the C constant with a plain cast. Conversions from raw
//! numbers never panic: unknown values are refused with `None`.

use bitflags::bitflags;

/// Declares a `#[repr(u32)]` enum with explicit discriminants and a fallible
/// conversion from `u32` (`from_raw`) that never panics.
macro_rules! c_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:expr, )* }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name { $( $(#[$vmeta])* $variant = $value, )* }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The variant with this C value, or `None` for a value verbs.h does not define.
            pub const fn from_raw(raw: u32) -> Option<Self> {
                match raw {
                    $( $value => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// The C value of this variant.
            pub const fn raw(self) -> u32 {
                self as u32
            }
        }
    };
}

c_enum! {
    /// Transport service type of a queue pair (`enum ibv_qp_type`).
    pub enum QpType {
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
        /// Raw Ethernet packets.
        RawPacket = 8,
        /// XRC initiator (send side).
        XrcSend = 9,
        /// XRC target (receive side).
        XrcRecv = 10,
        /// Provider-specific.
        Driver = 255,
    }
}

impl QpType {
    /// Whether the transport is connected (one fixed remote QP), as RC, UC and XRC are.
    pub const fn is_connected(self) -> bool {
        matches!(self, QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// Whether the transport acknowledges and retransmits (RC and XRC).
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }
}

c_enum! {
    /// Queue pair state (`enum ibv_qp_state`).
    pub enum QpState {
        /// Reset: no work requests are processed; posting fails.
        Reset = 0,
        /// Initialised: receives may be posted, nothing is processed.
        Init = 1,
        /// Ready to receive.
        Rtr = 2,
        /// Ready to send.
        Rts = 3,
        /// Send queue drained.
        Sqd = 4,
        /// Send queue error (UC/UD).
        Sqe = 5,
        /// Error: every work request is flushed.
        Err = 6,
    }
}

c_enum! {
    /// Status of a work completion (`enum ibv_wc_status`).
    pub enum WcStatus {
        /// The operation completed successfully.
        Success = 0,
        /// Local length error.
        LocLenErr = 1,
        /// Local QP operation error.
        LocQpOpErr = 2,
        /// Local EE context operation error.
        LocEecOpErr = 3,
        /// Local protection error.
        LocProtErr = 4,
        /// Work request flushed because the QP is in the error state.
        WrFlushErr = 5,
        /// Memory window bind error.
        MwBindErr = 6,
        /// Bad response error.
        BadRespErr = 7,
        /// Local access error.
        LocAccessErr = 8,
        /// Remote invalid request error.
        RemInvReqErr = 9,
        /// Remote access error.
        RemAccessErr = 10,
        /// Remote operation error.
        RemOpErr = 11,
        /// Transport retry counter exceeded.
        RetryExcErr = 12,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 13,
        /// Local RDD violation error.
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote aborted error.
        RemAbortErr = 16,
        /// Invalid EE context number.
        InvEecnErr = 17,
        /// Invalid EE context state.
        InvEecStateErr = 18,
        /// Fatal error.
        FatalErr = 19,
        /// Response timeout error.
        RespTimeoutErr = 20,
        /// General error.
        GeneralErr = 21,
        /// Tag matching error.
        TmErr = 22,
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = 23,
    }
}

impl WcStatus {
    /// rdma-core's `ibv_wc_status_str(3)` text for this status.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
            WcStatus::TmErr => "TM error",
            WcStatus::TmRndvIncomplete => "TM software rendezvous",
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

c_enum! {
    /// Opcode of a work completion (`enum ibv_wc_opcode`).
    pub enum WcOpcode {
        /// Send (requester side of SEND, SEND_WITH_IMM, SEND_WITH_INV).
        Send = 0,
        /// RDMA write (requester side of WRITE and WRITE_WITH_IMM).
        RdmaWrite = 1,
        /// RDMA read.
        RdmaRead = 2,
        /// Atomic compare and swap.
        CompSwap = 3,
        /// Atomic fetch and add.
        FetchAdd = 4,
        /// Memory window bind.
        BindMw = 5,
        /// Local invalidate.
        LocalInv = 6,
        /// TCP segmentation offload send.
        Tso = 7,
        /// Flush (rdma-core ≥ 45 value; not in the v44 header).
        Flush = 8,
        /// Atomic write.
        AtomicWrite = 9,
        /// Receive of a SEND.
        Recv = 128,
        /// Receive consumed by an RDMA WRITE with immediate.
        RecvRdmaWithImm = 129,
        /// Tag-matching SRQ: a tag was added (ibv_post_srq_ops(3), IBV_WR_TAG_ADD).
        TmAdd = 130,
        /// Tag-matching SRQ: a tag was removed (IBV_WR_TAG_DEL).
        TmDel = 131,
        /// Tag-matching SRQ: the unexpected-message count was synchronised (IBV_WR_TAG_SYNC).
        TmSync = 132,
        /// Tag-matching SRQ: a tagged message arrived (matched, or unexpected).
        TmRecv = 133,
        /// Tag-matching SRQ: a message sent with the NO_TAG operation arrived.
        TmNoTag = 134,
    }
}

c_enum! {
    /// Opcode of a send work request (`enum ibv_wr_opcode`).
    pub enum WrOpcode {
        /// RDMA write.
        RdmaWrite = 0,
        /// RDMA write with immediate data.
        RdmaWriteWithImm = 1,
        /// Send.
        Send = 2,
        /// Send with immediate data.
        SendWithImm = 3,
        /// RDMA read.
        RdmaRead = 4,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6,
        /// Local invalidate.
        LocalInv = 7,
        /// Bind a memory window.
        BindMw = 8,
        /// Send with invalidate.
        SendWithInv = 9,
        /// TCP segmentation offload.
        Tso = 10,
        /// Provider-specific.
        Driver1 = 11,
        /// Flush (rdma-core ≥ 45 value; not in the v44 header).
        Flush = 14,
        /// Atomic write.
        AtomicWrite = 15,
    }
}

impl WrOpcode {
    /// The completion opcode the requester reports for this work request
    /// (rxe `wr_to_wc_opcode`: SEND_WITH_IMM → SEND, WRITE_WITH_IMM → RDMA_WRITE).
    pub const fn wc_opcode(self) -> Option<WcOpcode> {
        Some(match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::Tso => WcOpcode::Tso,
            WrOpcode::Flush => WcOpcode::Flush,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
            WrOpcode::Driver1 => return None,
        })
    }

    /// Whether the operation is an RDMA READ or an atomic, i.e. needs a read/atomic
    /// credit (`max_rd_atomic`) and waits for a response carrying data.
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    /// Whether the operation is a 64-bit atomic (compare-and-swap or fetch-and-add).
    pub const fn is_atomic(self) -> bool {
        matches!(self, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
    }

    /// Whether the operation sends a payload from the requester's scatter list (or inline
    /// data): the SENDs and the RDMA WRITEs (rxe `WR_INLINE_MASK`).
    pub const fn carries_payload(self) -> bool {
        matches!(
            self,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::SendWithInv
                | WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
        )
    }

    /// Whether the operation carries immediate data.
    pub const fn has_imm(self) -> bool {
        matches!(self, WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm)
    }

    /// Whether a QP of `qp_type` has a wire opcode for this work request (IBTA vol. 1
    /// §9.2, the opcode table: SEND with Invalidate exists for RC and XRC only). rxe
    /// accepts the post of one that has none (its post-time table admits SEND_WITH_INV
    /// on UC) and fails it when its requester finds no opcode (`next_opcode_uc`):
    /// LOC_QP_OP_ERR.
    pub const fn has_wire_opcode(self, qp_type: QpType) -> bool {
        !matches!((self, qp_type), (WrOpcode::SendWithInv, QpType::Uc))
    }

    /// Whether this opcode may be posted on a QP of the given type (ibv_post_send(3);
    /// rxe's opcode table: UC allows SEND, WRITE, BIND_MW and SEND_WITH_INV; UD only
    /// SEND; LOCAL_INV, READ, atomics, ATOMIC_WRITE and FLUSH are RC/XRC only).
    pub const fn allowed_on(self, qp_type: QpType) -> bool {
        match qp_type {
            QpType::Rc | QpType::XrcSend => !matches!(self, WrOpcode::Tso | WrOpcode::Driver1),
            QpType::Uc => matches!(
                self,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::BindMw
                    | WrOpcode::SendWithInv
            ),
            QpType::Ud => matches!(self, WrOpcode::Send | WrOpcode::SendWithImm),
            QpType::RawPacket | QpType::XrcRecv | QpType::Driver => false,
        }
    }
}

bitflags! {
    /// Memory access rights (`enum ibv_access_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The device may write local memory (receives, read responses, atomic results).
        const LOCAL_WRITE = 1;
        /// Remote peers may RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Remote peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote peers may perform atomics.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region.
        const MW_BIND = 1 << 4;
        /// Remote addresses start at zero.
        const ZERO_BASED = 1 << 5;
        /// On-demand paging.
        const ON_DEMAND = 1 << 6;
        /// Backed by huge pages.
        const HUGETLB = 1 << 7;
        /// Flush to global visibility allowed (rdma-core ≥ 45 value).
        const FLUSH_GLOBAL = 1 << 8;
        /// Flush to persistence allowed (rdma-core ≥ 45 value).
        const FLUSH_PERSISTENT = 1 << 9;
        /// Relaxed ordering (an optional-range flag; rdma-core masks it when unsupported).
        const RELAXED_ORDERING = 1 << 20;
    }
}

impl Access {
    /// `IBV_ACCESS_OPTIONAL_RANGE`: flags a device may ignore (ibv_reg_mr(3)).
    pub const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
}

bitflags! {
    /// Flags of a send work request (`enum ibv_send_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics to complete first.
        const FENCE = 1;
        /// Generate a completion on success.
        const SIGNALED = 1 << 1;
        /// Set the solicited-event bit on the message.
        const SOLICITED = 1 << 2;
        /// Copy the payload at post time; lkeys are not checked.
        const INLINE = 1 << 3;
        /// Offload IP checksum (raw packet QPs).
        const IP_CSUM = 1 << 4;
    }
}

bitflags! {
    /// Flags of a work completion (`enum ibv_wc_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// A GRH is present in the first 40 bytes of the receive buffer (UD).
        const GRH = 1;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// IP checksum verified.
        const IP_CSUM_OK = 1 << 2;
        /// `invalidated_rkey` is valid.
        const WITH_INV = 1 << 3;
        /// Tag matching sync request.
        const TM_SYNC_REQ = 1 << 4;
        /// Tag matching match.
        const TM_MATCH = 1 << 5;
        /// Tag matching data valid.
        const TM_DATA_VALID = 1 << 6;
    }
}

c_enum! {
    /// Path MTU (`enum ibv_mtu`).
    pub enum Mtu {
        /// 256 bytes.
        Mtu256 = 1,
        /// 512 bytes.
        Mtu512 = 2,
        /// 1024 bytes.
        Mtu1024 = 3,
        /// 2048 bytes.
        Mtu2048 = 4,
        /// 4096 bytes.
        Mtu4096 = 5,
    }
}

impl Mtu {
    /// The MTU in bytes of payload per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

c_enum! {
    /// Asynchronous event type (`enum ibv_event_type`).
    pub enum EventType {
        /// CQ overrun: the CQ is in error.
        CqErr = 0,
        /// A QP entered the error state because of a fatal error.
        QpFatal = 1,
        /// Invalid request on a QP.
        QpReqErr = 2,
        /// Access violation on a QP.
        QpAccessErr = 3,
        /// Communication established: first packet arrived on a QP in RTR.
        CommEst = 4,
        /// The send queue drained (SQD with async notify).
        SqDrained = 5,
        /// Path migrated.
        PathMig = 6,
        /// Path migration failed.
        PathMigErr = 7,
        /// The device failed.
        DeviceFatal = 8,
        /// A port became active.
        PortActive = 9,
        /// A port went down.
        PortErr = 10,
        /// LID changed.
        LidChange = 11,
        /// P_Key table changed.
        PkeyChange = 12,
        /// SM changed.
        SmChange = 13,
        /// SRQ error.
        SrqErr = 14,
        /// The SRQ fell below its limit.
        SrqLimitReached = 15,
        /// The last WQE of a QP attached to an SRQ was reached.
        QpLastWqeReached = 16,
        /// Client reregistration.
        ClientReregister = 17,
        /// GID table changed.
        GidChange = 18,
        /// Work queue fatal error.
        WqFatal = 19,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enum_round_trips_its_raw_value() {
        for s in WcStatus::ALL {
            assert_eq!(WcStatus::from_raw(s.raw()), Some(*s));
        }
        for o in WcOpcode::ALL {
            assert_eq!(WcOpcode::from_raw(o.raw()), Some(*o));
        }
        for o in WrOpcode::ALL {
            assert_eq!(WrOpcode::from_raw(o.raw()), Some(*o));
        }
        for s in QpState::ALL {
            assert_eq!(QpState::from_raw(s.raw()), Some(*s));
        }
        assert_eq!(WcStatus::from_raw(24), None);
        assert_eq!(QpState::from_raw(7), None);
        assert_eq!(WrOpcode::from_raw(12), None);
    }

    #[test]
    fn values_match_verbs_h() {
        assert_eq!(WcStatus::RnrRetryExcErr.raw(), 13);
        assert_eq!(WcStatus::GeneralErr.raw(), 21);
        assert_eq!(WcOpcode::RecvRdmaWithImm.raw(), 129);
        assert_eq!(WrOpcode::AtomicWrite.raw(), 15);
        assert_eq!(QpType::XrcRecv.raw(), 10);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(EventType::QpLastWqeReached.raw(), 16);
    }

    #[test]
    fn wr_opcode_legality_follows_transport() {
        assert!(WrOpcode::RdmaRead.allowed_on(QpType::Rc));
        assert!(!WrOpcode::RdmaRead.allowed_on(QpType::Uc));
        assert!(!WrOpcode::RdmaWrite.allowed_on(QpType::Ud));
        assert!(WrOpcode::SendWithImm.allowed_on(QpType::Ud));
        assert!(!WrOpcode::AtomicFetchAndAdd.allowed_on(QpType::Uc));
        assert!(WrOpcode::SendWithInv.allowed_on(QpType::Uc) && !WrOpcode::SendWithInv.has_wire_opcode(QpType::Uc));
        assert!(WrOpcode::SendWithInv.has_wire_opcode(QpType::Rc));
    }

    #[test]
    fn status_strings_are_rdma_core_strings() {
        assert_eq!(WcStatus::WrFlushErr.to_string(), "Work Request Flushed Error");
        assert_eq!(WcStatus::RetryExcErr.as_str(), "transport retry counter exceeded");
    }
}
