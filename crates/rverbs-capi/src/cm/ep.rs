//! The synchronous endpoint API: stubs (`ENOSYS`) until the connection-manager engine
//! lands. One `cm_export!` per function; replace them one by one.

#![allow(unused_variables)]

use core::ffi::c_int;

use super::abi::{rdma_addrinfo, rdma_cm_id};
use super::{enosys, enosys_void};
use crate::abi::{ibv_pd, ibv_qp_init_attr};

cm_export! {
    /// Creates a synchronous id bound/resolved from `res`, with a QP when
    /// `qp_init_attr` is given (rdma_create_ep(3)). Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Destroys an endpoint: its QP, SRQ, CQs and the id (rdma_destroy_ep(3)).
    #[cm(void)]
    pub unsafe fn rdma_destroy_ep(id: *mut rdma_cm_id) {
        enosys_void()
    }
}
