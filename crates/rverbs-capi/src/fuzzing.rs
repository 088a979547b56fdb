//! Entries for the libFuzzer harnesses of `fuzz/` into the conversion layer of the C ABI
//! (the readers of the structs an application hands over), private to this crate.
//! Compiled only with the feature `fuzzing`, which only `fuzz/Cargo.toml` enables;
//! hidden from the documentation and no part of the library: each function forwards to
//! the crate's own.

use core::ffi::c_int;

use crate::abi::{ibv_ah_attr, ibv_qp_attr, ibv_recv_wr, ibv_sge};
use crate::cm::abi::rdma_conn_param;

/// `qp::modify_attr_from_c`: what ibv_modify_qp(3) makes of its attributes and mask.
pub fn modify_attr_from_c(a: &ibv_qp_attr, attr_mask: c_int) -> Result<(rverbs::QpAttr, rverbs::QpAttrMask), c_int> {
    crate::qp::modify_attr_from_c(a, attr_mask)
}

/// `conv::qp_attr_to_c` (ibv_query_qp(3)).
pub fn qp_attr_to_c(q: &rverbs::QpAttr) -> ibv_qp_attr {
    crate::conv::qp_attr_to_c(q)
}

/// `conv::ah_attr_from_c`.
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> rverbs::AhAttr {
    crate::conv::ah_attr_from_c(a)
}

/// `conv::ah_attr_to_c`.
pub fn ah_attr_to_c(a: &rverbs::AhAttr) -> ibv_ah_attr {
    crate::conv::ah_attr_to_c(a)
}

/// More scatter/gather entries than any queue accepts (`wrlist::MAX_ANY_SGE`).
pub const MAX_ANY_SGE: usize = crate::wrlist::MAX_ANY_SGE;

/// `wrlist::sge_slice`, copied out.
///
/// # Safety
/// `sg_list` is NULL or valid for `min(num_sge, MAX_ANY_SGE)` entries.
pub unsafe fn sge_slice(sg_list: *const ibv_sge, num_sge: c_int) -> Result<Vec<rverbs::Sge>, c_int> {
    // SAFETY: forwarded contract (the function refuses more than MAX_ANY_SGE entries
    // before forming a slice).
    unsafe { crate::wrlist::sge_slice(sg_list, num_sge) }.map(<[rverbs::Sge]>::to_vec)
}

/// `wrlist::post_recv_list`.
///
/// # Safety
/// `wr` is a valid C receive list (each `sg_list` as in [`sge_slice`]), `bad_wr` NULL or
/// writable.
pub unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(&[rverbs::RecvWr<'_>]) -> Result<(), rverbs::PostError>,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { crate::wrlist::post_recv_list(wr, bad_wr, post) }
}

/// `cm::conn::core_param`: the core's connection parameters of a C `rdma_conn_param`.
///
/// # Safety
/// `p` is NULL or a valid `rdma_conn_param` whose private data is readable.
pub unsafe fn core_param(p: *const rdma_conn_param, prefix: &[u8]) -> rverbs_cm::ConnParam {
    // SAFETY: forwarded contract.
    unsafe { crate::cm::conn::core_param(p, prefix) }
}

/// `misc::sysfs_path_from`: the sysfs path for a `SYSFS_PATH` value.
pub fn sysfs_path_from(env: Option<&std::ffi::OsStr>) -> std::ffi::CString {
    crate::misc::sysfs_path_from(env)
}

/// The longest `SYSFS_PATH` kept.
pub const SYSFS_PATH_MAX: usize = crate::abi::IBV_SYSFS_PATH_MAX;

/// `device::log_filter` of a `RVERBS_LOG` value: the filter's target directives in
/// its order (target, level as its name), the level of the `level` directive, the
/// ignored directives; and whether the filter enables `target` at each level from
/// error to trace (`would_enable`).
#[allow(clippy::type_complexity)]
pub fn log_filter(value: &str, target: &str) -> (Vec<(String, String)>, Option<String>, Vec<String>, [bool; 5]) {
    use tracing::Level;
    let f = crate::device::log_filter(value);
    let dirs = f.targets.iter().map(|(t, l)| (t.to_owned(), l.to_string())).collect();
    let enabled = [Level::ERROR, Level::WARN, Level::INFO, Level::DEBUG, Level::TRACE].map(|l| f.targets.would_enable(target, &l));
    (dirs, f.targets.default_level().map(|l| l.to_string()), f.ignored.into_iter().map(|(d, _)| d).collect(), enabled)
}
