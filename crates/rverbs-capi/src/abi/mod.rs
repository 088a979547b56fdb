//! The C ABI the drop-in implements: the `#[repr(C)]` mirrors of `<infiniband/verbs.h>`
//! (crate `rverbs-abi`, shared with `rverbs`' `rdma-core` backend), re-exported whole so
//! that this crate names them `crate::abi::ibv_qp` as before, plus what only the drop-in
//! needs: the kernel ABI records of `kern`, which the historical `ibv_copy_*` exports and
//! the completion-channel and async fds use.
//!
//! Layout is checked as the crate `rverbs-abi` says (`const` asserts there and here for
//! `kern`, and `tests/layout.rs` against the installed headers for both).

#![allow(non_camel_case_types, missing_docs)]

mod kern;

#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
mod asserts;

pub use kern::*;
pub use rverbs_abi::*;

macro_rules! zeroed {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: $t is a repr(C) mirror made only of integers and arrays thereof.
            unsafe impl Zeroed for $t {}
        )*
    };
}

zeroed!(
    ib_uverbs_global_route,
    ib_uverbs_ah_attr,
    ib_uverbs_qp_attr,
    ib_user_path_rec,
    ib_uverbs_comp_event_desc,
    ib_uverbs_async_event_desc,
);
