//! Work requests: scatter/gather entries, send and receive WRs, SRQ ops WRs.
//!
//! C anonymous members get Rust names; the C spelling is noted on each.

use core::ffi::{c_int, c_uint, c_void};

use super::{ibv_ah, ibv_mw, ibv_mw_bind_info, ibv_ops_wr_opcode, ibv_wr_opcode};

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_data_buf` (`ibv_wr_set_inline_data_list`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_send_wr` (128 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: ibv_wr_opcode,
    /// `enum ibv_send_flags`
    pub send_flags: c_uint,
    /// C: `union { __be32 imm_data; uint32_t invalidate_rkey; }`; see
    /// [`ibv_send_wr::invalidate_rkey`].
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// C: anonymous `union { struct {…} bind_mw; struct {…} tso; }` (members accessed as
    /// `wr->bind_mw` / `wr->tso` in C).
    pub bind_mw_tso: ibv_send_wr_bind_mw_tso,
}

impl ibv_send_wr {
    /// The `invalidate_rkey` member of the C union (for `IBV_WR_*_INV`).
    #[inline]
    pub fn invalidate_rkey(&self) -> u32 {
        self.imm_data
    }

    /// Sets the `invalidate_rkey` member of the C union.
    #[inline]
    pub fn set_invalidate_rkey(&mut self, rkey: u32) {
        self.imm_data = rkey;
    }
}

/// `ibv_send_wr.wr` (anonymous union in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `ibv_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.ud`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.qp_type` (anonymous union in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// `ibv_send_wr.qp_type.xrc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// The anonymous trailing union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_tso {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `ibv_send_wr.bind_mw`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.tso`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// `struct ibv_recv_wr` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_ops_wr` (tag-matching SRQ operations, `ibv_post_srq_ops`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ops_wr {
    pub wr_id: u64,
    pub next: *mut ibv_ops_wr,
    pub opcode: ibv_ops_wr_opcode,
    /// `enum ibv_ops_flags`
    pub flags: c_int,
    pub tm: ibv_ops_wr_tm,
}

/// `ibv_ops_wr.tm` (anonymous struct in C).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ops_wr_tm {
    pub unexpected_cnt: u32,
    pub handle: u32,
    pub add: ibv_ops_wr_tm_add,
}

/// `ibv_ops_wr.tm.add` (anonymous struct in C).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ops_wr_tm_add {
    pub recv_wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub tag: u64,
    pub mask: u64,
}
