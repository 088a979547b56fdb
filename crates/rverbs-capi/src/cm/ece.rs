//! Enhanced connection establishment (RDMACM_1.3): stubs (`ENOSYS`) until the
//! connection-manager engine lands. One `cm_export!` per function; replace them one by
//! one. All return 0 or -1 with `errno`.

#![allow(unused_variables)]

use core::ffi::{c_int, c_void};

use super::abi::rdma_cm_id;
use super::enosys;
use crate::abi::ibv_ece;

cm_export! {
    /// Sets the ECE options sent with the next connect/accept (rdma_set_local_ece(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        enosys()
    }
}

cm_export! {
    /// The peer's ECE options of a connection request (rdma_get_remote_ece(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Rejects a connection request because of unsupported ECE options
    /// (rdma_reject_ece(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_reject_ece(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int {
        enosys()
    }
}
