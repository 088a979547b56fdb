//! Listening, connection establishment and teardown: stubs (`ENOSYS`) until the
//! connection-manager engine lands. One `cm_export!` per function; replace them one by
//! one. All return 0 or -1 with `errno` (rdma-core 44).

#![allow(unused_variables)]

use core::ffi::{c_int, c_void};

use super::abi::{rdma_cm_id, rdma_conn_param};
use super::enosys;
use crate::abi::ibv_event_type;

cm_export! {
    /// Listens for connection requests (rdma_listen(3)); `backlog` 0 = the maximum.
    #[cm(minus_one)]
    pub unsafe fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Takes the next connection request of a synchronous listener (rdma_get_request(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Initiates a connection (rdma_connect(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Accepts a connection request (rdma_accept(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Rejects a connection request (rdma_reject(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_reject(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Completes an active connection on a QP the caller manages (rdma_establish(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Disconnects (rdma_disconnect(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Reports a QP async event to the CM (rdma_notify(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int {
        enosys()
    }
}
