//! Queue pairs (out-of-line verbs; posting is inline and goes through `ibv_context.ops`).
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.

use core::ffi::c_int;

use crate::abi::*;
use crate::ffi::{not_supported_errno, not_supported_null};

export! {
    /// Creates a queue pair (`ibv_create_qp(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: reference §7 item 9: must accept every QP type the ex path accepts (the inline
    /// `ibv_create_qp_ex` forwards here when `comp_mask == IBV_QP_INIT_ATTR_PD`), reading
    /// only the `ibv_qp_init_attr` prefix; writes the actual caps back into `init_attr->cap`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_qp(
        _pd: *mut ibv_pd,
        _qp_init_attr: *mut ibv_qp_init_attr,
    ) -> *mut ibv_qp {
        // TODO(core): create a core QP as `{ ibv_qp_ex, private }`; write back init_attr.cap.
        not_supported_null()
    }
}

export! {
    /// Modifies a queue pair (`ibv_modify_qp(3)`). Returns 0 or an errno.
    ///
    /// Rule: verbs.c: on success with `IBV_QP_STATE` in the mask, `qp->state = attr->qp_state`.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_modify_qp(
        _qp: *mut ibv_qp,
        _attr: *mut ibv_qp_attr,
        _attr_mask: c_int,
    ) -> c_int {
        // TODO(core): modify the core QP; on success with IBV_QP_STATE set qp->state.
        not_supported_errno()
    }
}

export! {
    /// Queries queue-pair attributes (`ibv_query_qp(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_qp(
        _qp: *mut ibv_qp,
        _attr: *mut ibv_qp_attr,
        _attr_mask: c_int,
        _init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        // TODO(core): fill attr/init_attr from the core QP (incl. cap.max_inline_data).
        not_supported_errno()
    }
}

export! {
    /// Destroys a queue pair (`ibv_destroy_qp(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_qp(_qp: *mut ibv_qp) -> c_int {
        // TODO(core): destroy the core QP (waits for acked async events) and free it.
        not_supported_errno()
    }
}

export! {
    /// Returns the extended view of a QP created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`
    /// (`ibv_qp_to_qp_ex(3)`), else NULL.
    #[export("IBVERBS_1.6", null)]
    pub unsafe fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        // TODO(core): qp as *mut ibv_qp_ex if created with send_ops_flags, else NULL.
        not_supported_null()
    }
}

export! {
    /// Attaches a UD QP to a multicast group (`ibv_attach_mcast(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
        // TODO(core): join the core's multicast group (gid, lid) for this UD QP.
        not_supported_errno()
    }
}

export! {
    /// Detaches a UD QP from a multicast group (`ibv_detach_mcast(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
        // TODO(core): leave the core's multicast group (gid, lid).
        not_supported_errno()
    }
}

export! {
    /// Reads the QP's enhanced connection establishment options (`ibv_query_ece(3)`).
    /// Returns 0 or an errno.
    #[export("IBVERBS_1.10", errno)]
    pub unsafe fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
        // TODO(core): EOPNOTSUPP is also the final answer unless the core implements ECE.
        not_supported_errno()
    }
}

export! {
    /// Sets the QP's enhanced connection establishment options (`ibv_set_ece(3)`).
    /// Returns 0 or an errno (with `errno` set, as rdma-core does).
    #[export("IBVERBS_1.10", errno)]
    pub unsafe fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
        // TODO(core): vendor_id == 0 -> EOPNOTSUPP (as rdma-core), else the core's ECE.
        not_supported_errno()
    }
}

export! {
    /// Says whether data of `op` is placed in address order (`ibv_query_qp_data_in_order(3)`).
    ///
    /// Rule: reference §4.9 (v46 semantics): `flags & IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS`
    /// returns a mask of `IBV_QUERY_QP_DATA_IN_ORDER_{WHOLE_MSG,ALIGNED_128_BYTES}`, else
    /// 1/0; unknown flag bits give 0. 0 ("no guarantee") is always a truthful answer.
    #[export("IBVERBS_1.14", value(0))]
    pub unsafe fn ibv_query_qp_data_in_order(
        _qp: *mut ibv_qp,
        _op: ibv_wr_opcode,
        _flags: u32,
    ) -> c_int {
        // TODO(core): ask the core whether op's payload lands in order (seed 001).
        0
    }
}
