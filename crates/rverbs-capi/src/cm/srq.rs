//! SRQs on ids (`<rdma/rdma_verbs.h>`): stubs (`ENOSYS`) until the connection-manager
//! engine lands. One `cm_export!` per function; replace them one by one.

#![allow(unused_variables)]

use core::ffi::c_int;

use super::abi::rdma_cm_id;
use super::{enosys, enosys_void};
use crate::abi::{ibv_pd, ibv_srq_init_attr, ibv_srq_init_attr_ex};

cm_export! {
    /// Creates an SRQ for the id (`id->srq`). Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_srq(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_srq_init_attr,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Creates an SRQ for the id from extended attributes. Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Destroys the id's SRQ.
    #[cm(void)]
    pub unsafe fn rdma_destroy_srq(id: *mut rdma_cm_id) {
        enosys_void()
    }
}
