//! Enhanced connection establishment (RDMACM_1.3): the ECE options an application that
//! manages its own QP exchanges through the connection manager.
//!
//! Rules (rdma_set_local_ece(3), rdma_get_remote_ece(3), rdma_reject_ece(3); librdmacm):
//! both are for ids whose QP the application manages (`id->qp` NULL, else `EINVAL`);
//! a local ECE needs a non-zero vendor ID and no `comp_mask` bits. The vendor ID travels
//! in the REQ's or REP's 24-bit vendor field and the options in the MAD's attribute
//! modifier, as the kernel's CM sends them; a peer that sends none reads as zeros.
//! `rdma_reject_ece` rejects with reason 35 (IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED).

use core::ffi::{c_int, c_void};

use super::abi::rdma_cm_id;
use super::id::id_or_einval;
use super::obj::fail;
use crate::abi::ibv_ece;
use crate::ffi::minus_one_errno;

cm_export! {
    /// Sets the ECE options sent with the next connect/accept (rdma_set_local_ece(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract: NULL or a valid ibv_ece.
        let Some(ece) = (unsafe { ece.as_ref() }) else { return minus_one_errno(libc::EINVAL) };
        // SAFETY: field of the live id.
        if !unsafe { (*w.c()).qp }.is_null() || ece.vendor_id == 0 || ece.comp_mask != 0 {
            return minus_one_errno(libc::EINVAL);
        }
        match w.core().set_local_ece(ece.vendor_id, ece.options) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// The peer's ECE options (rdma_get_remote_ece(3)).
    #[cm(minus_one)]
    pub unsafe fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract: NULL or a valid ibv_ece.
        let Some(ece) = (unsafe { ece.as_mut() }) else { return minus_one_errno(libc::EINVAL) };
        // SAFETY: field of the live id.
        if !unsafe { (*w.c()).qp }.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let (vendor_id, options) = w.core().remote_ece();
        *ece = ibv_ece { vendor_id, options, comp_mask: 0 };
        0
    }
}

cm_export! {
    /// Rejects a connection request because of unsupported ECE options
    /// (rdma_reject_ece(3)): REJECTED with status 35 at the peer.
    #[cm(minus_one)]
    pub unsafe fn rdma_reject_ece(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let data: &[u8] = if private_data.is_null() || private_data_len == 0 {
            &[]
        } else {
            // SAFETY: caller contract: `private_data_len` readable bytes.
            unsafe { core::slice::from_raw_parts(private_data.cast(), usize::from(private_data_len)) }
        };
        match w.core().reject_ece(data) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}
