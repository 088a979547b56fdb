//! The `#[repr(C)]` mirrors of `<rdma/rdma_cma.h>` (rdma-core 44): they live in crate
//! `rverbs-abi` (`rverbs_abi::rdma_cm`), shared with `rverbs-cm`'s `rdma_core` backend,
//! and are re-exported whole here so that this crate names them `cm::abi::rdma_cm_id`.
//! `tests/layout_cm.rs` checks them against the installed headers.

pub use rverbs_abi::rdma_cm::*;
