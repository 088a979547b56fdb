//! `rdma_event_str`: the exact strings of rdma-core 44 (`librdmacm/cma.c`).

use core::ffi::c_char;

use super::abi::*;

cm_export! {
    /// The name of an event type (rdma_event_str(3)): `"RDMA_CM_EVENT_ADDR_RESOLVED"`,
    /// …; any other value is `"UNKNOWN EVENT"`. Never NULL; the strings are static.
    #[cm(value(c"UNKNOWN EVENT".as_ptr()))]
    pub unsafe fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
        let s = match event {
            RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
            RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
            RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
            RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
            RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
            RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
            RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
            RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
            RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
            RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
            RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
            RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
            RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
            _ => c"UNKNOWN EVENT",
        };
        s.as_ptr()
    }
}
