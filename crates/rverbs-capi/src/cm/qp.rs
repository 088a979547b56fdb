//! QPs on ids: stubs (`ENOSYS`) until the connection-manager engine lands. One
//! `cm_export!` per function; replace them one by one.
//!
//! Contract to keep: `rdma_create_qp(_ex)` fills `id->qp`, `id->pd` and, when the caller
//! passes no CQs, `id->send_cq/recv_cq/send_cq_channel/recv_cq_channel` (the inline
//! `rdma_get_send_comp`/`rdma_get_recv_comp` of rdma_verbs.h use them); a PD of another
//! context than `id->verbs` is `EINVAL`.

#![allow(unused_variables)]

use core::ffi::c_int;

use super::abi::rdma_cm_id;
use super::{enosys, enosys_void};
use crate::abi::{ibv_pd, ibv_qp_attr, ibv_qp_init_attr, ibv_qp_init_attr_ex};

cm_export! {
    /// Creates the id's QP (rdma_create_qp(3)). Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_qp(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Creates the id's QP from extended attributes (rdma_create_qp_ex(3)).
    /// Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_create_qp_ex(
        id: *mut rdma_cm_id,
        qp_init_attr: *mut ibv_qp_init_attr_ex,
    ) -> c_int {
        enosys()
    }
}

cm_export! {
    /// Destroys the id's QP (rdma_destroy_qp(3)).
    #[cm(void)]
    pub unsafe fn rdma_destroy_qp(id: *mut rdma_cm_id) {
        enosys_void()
    }
}

cm_export! {
    /// The attributes to move a caller-managed QP to the id's next state
    /// (rdma_init_qp_attr(3), RDMACM_1.2). Returns 0 or -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_init_qp_attr(
        id: *mut rdma_cm_id,
        qp_attr: *mut ibv_qp_attr,
        qp_attr_mask: *mut c_int,
    ) -> c_int {
        enosys()
    }
}
