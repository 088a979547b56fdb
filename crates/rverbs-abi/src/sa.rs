//! `<infiniband/sa.h>`'s `struct ibv_sa_path_rec`: what librdmacm's `rdma_route.path_rec`
//! points at (`rdma_cm`), and what the historical `ibv_copy_path_rec_*` of libibverbs copy.

use core::ffi::c_int;

use crate::ibv_gid;

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`, 64 bytes); librdmacm's
/// `rdma_route.path_rec` points at these.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    /// `__be16`
    pub dlid: u16,
    /// `__be16`
    pub slid: u16,
    pub raw_traffic: c_int,
    /// `__be32`
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    /// `__be16`
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}
