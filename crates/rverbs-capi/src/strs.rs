//! Enum-to-string helpers. Real: they need no device.
//!
//! The strings are rdma-core 44's byte for byte (libibverbs/enum_strs.c at tag v44.0);
//! tests print and parse them. Every out-of-range value gives "unknown" (no NULL, ever).
//! `tests/pure_fns.rs` compares all four with the installed libibverbs.

use core::ffi::{c_char, CStr};

use crate::abi::{ibv_event_type, ibv_node_type, ibv_port_state, ibv_wc_status};

/// What every helper returns for a value it does not know.
const UNKNOWN: &CStr = c"unknown";

/// Indexed by `enum ibv_wc_status` (0..=23).
static WC_STATUS: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

/// Indexed by `enum ibv_node_type` minus 1 (`IBV_NODE_CA` = 1 ..= `IBV_NODE_UNSPECIFIED` = 7).
static NODE_TYPE: [&CStr; 7] = [
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

/// Indexed by `enum ibv_port_state` (0..=5).
static PORT_STATE: [&CStr; 6] = [
    c"no state change (NOP)",
    c"down",
    c"init",
    c"armed",
    c"active",
    c"active defer",
];

/// Indexed by `enum ibv_event_type` (0..=19).
static EVENT_TYPE: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

/// `table[index]`, or "unknown" when `index` is out of range.
fn lookup(table: &[&'static CStr], index: Option<usize>) -> *const c_char {
    index
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(UNKNOWN)
        .as_ptr()
}

export! {
    /// Describes a work-completion status (`ibv_wc_status_str(3)`).
    ///
    /// Rule: enum_strs.c: values outside `IBV_WC_SUCCESS..=IBV_WC_TM_RNDV_INCOMPLETE`
    /// give "unknown".
    #[export("IBVERBS_1.1", value(UNKNOWN.as_ptr()))]
    pub fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
        lookup(&WC_STATUS, usize::try_from(status).ok())
    }
}

export! {
    /// Describes a node type (`ibv_node_type_str(3)`).
    ///
    /// Rule: enum_strs.c: values outside `IBV_NODE_CA..=IBV_NODE_UNSPECIFIED` give
    /// "unknown" (including `IBV_NODE_UNKNOWN`).
    #[export("IBVERBS_1.1", value(UNKNOWN.as_ptr()))]
    pub fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
        lookup(&NODE_TYPE, usize::try_from(node_type).ok().and_then(|t| t.checked_sub(1)))
    }
}

export! {
    /// Describes a port state (`ibv_port_state_str(3)`).
    ///
    /// Rule: enum_strs.c: values outside `IBV_PORT_NOP..=IBV_PORT_ACTIVE_DEFER` give
    /// "unknown".
    #[export("IBVERBS_1.1", value(UNKNOWN.as_ptr()))]
    pub fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
        lookup(&PORT_STATE, usize::try_from(port_state).ok())
    }
}

export! {
    /// Describes an async event type (`ibv_event_type_str(3)`).
    ///
    /// Rule: enum_strs.c (v44): values outside `IBV_EVENT_CQ_ERR..=IBV_EVENT_WQ_FATAL`
    /// give "unknown".
    #[export("IBVERBS_1.1", value(UNKNOWN.as_ptr()))]
    pub fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
        lookup(&EVENT_TYPE, usize::try_from(event).ok())
    }
}
