//! Multicast: stubs (`ENOSYS`) until the connection-manager engine lands. One
//! `cm_export!` per function; replace them one by one. All return 0 or -1 with `errno`.

#![allow(unused_variables)]

use core::ffi::{c_int, c_void};

use libc::sockaddr;

use super::abi::{rdma_cm_id, rdma_cm_join_mc_attr_ex};
use super::enosys;

cm_export! {
    /// Joins a multicast group (rdma_join_multicast(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_join_multicast(
        id: *mut rdma_cm_id,
        addr: *mut sockaddr,
        context: *mut c_void,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Joins a multicast group with join flags (rdma_join_multicast_ex(3), RDMACM_1.1).
    #[cm(minus_one)]
    pub unsafe fn rdma_join_multicast_ex(
        id: *mut rdma_cm_id,
        mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Leaves a multicast group (rdma_leave_multicast(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
        enosys()
    }
}
