//! Ids, address and route resolution, options: stubs (`ENOSYS`) until the
//! connection-manager engine lands. One `cm_export!` per function; replace them one by
//! one. All return 0 or -1 with `errno` (rdma-core 44).

#![allow(unused_variables)]

use core::ffi::{c_int, c_void};

use libc::sockaddr;

use super::abi::{rdma_cm_id, rdma_event_channel, rdma_port_space};
use super::enosys;

cm_export! {
    /// Creates an id (rdma_create_id(3)); `channel` NULL = synchronous id.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Destroys an id (rdma_destroy_id(3)); blocks until its retrieved events are acked.
    #[cm(minus_one)]
    pub unsafe fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Binds an id to a local address (rdma_bind_addr(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Resolves a destination address (rdma_resolve_addr(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut sockaddr,
        dst_addr: *mut sockaddr,
        timeout_ms: c_int,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Resolves the route to the resolved destination (rdma_resolve_route(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Moves an id to another event channel (rdma_migrate_id(3)); NULL = synchronous.
    #[cm(minus_one)]
    pub unsafe fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Sets an option of an id (rdma_set_option(3)): `RDMA_OPTION_ID_*`,
    /// `RDMA_OPTION_IB_PATH`.
    #[cm(minus_one)]
    pub unsafe fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: usize,
    ) -> c_int {
        enosys()
    }
}
