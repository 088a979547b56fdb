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

/// The shape of a QP that `qp::translate_send` needs: `max_send_sge`, UD, XRC_SEND.
pub type SendShape = (usize, bool, bool);

/// `qp::post_send_list`: a C send list translated for a QP of `shape` and posted through
/// `post` in chunks.
///
/// # Safety
/// `wr` is a valid C send list: every `sg_list` NULL or valid for
/// `min(num_sge, MAX_ANY_SGE)` entries, every inline SGE naming readable bytes; `bad_wr`
/// NULL or writable.
pub unsafe fn post_send_list(
    wr: *mut crate::abi::ibv_send_wr,
    bad_wr: *mut *mut crate::abi::ibv_send_wr,
    shape: SendShape,
    post: impl Fn(&[rverbs::SendWr<'_>]) -> Result<(), rverbs::PostError>,
) -> c_int {
    let (max_send_sge, ud, xrc_send) = shape;
    let shape = crate::qp::SendShape { max_send_sge, ud, xrc_send };
    // SAFETY: forwarded contract.
    unsafe { crate::qp::post_send_list(wr, bad_wr, shape, post) }
}

/// `qp::qp_type_from_c`.
pub fn qp_type_from_c(raw: u32) -> Result<rverbs::QpType, c_int> {
    crate::qp::qp_type_from_c(raw)
}

/// What `qp::qp_init_attr_ex_from_c` took: the prefix, `send_ops`, the PD pointer, and
/// where the QP goes (`Ok(xrcd)` or `Err(pd)`).
pub type QpExAttr = (crate::abi::ibv_qp_init_attr, Option<rverbs::SendOps>, *mut crate::abi::ibv_pd, Result<*mut crate::abi::ibv_xrcd, *mut crate::abi::ibv_pd>);

/// `qp::qp_init_attr_ex_from_c`.
pub fn qp_init_attr_ex_from_c(a: &crate::abi::ibv_qp_init_attr_ex) -> Result<QpExAttr, c_int> {
    crate::qp::qp_init_attr_ex_from_c(a).map(|q| {
        let home = match q.home {
            crate::qp::QpHome::Xrcd(x) => Ok(x),
            crate::qp::QpHome::Pd(p) => Err(p),
        };
        (q.prefix, q.send_ops, q.pd, home)
    })
}

/// `cq::cq_init_attr_ex_from_c`: (cqe, comp_vector, wc_flags, flags, parent_domain).
pub fn cq_init_attr_ex_from_c(
    a: &crate::abi::ibv_cq_init_attr_ex,
) -> Result<(c_int, c_int, u64, u32, Option<*mut crate::abi::ibv_pd>), c_int> {
    crate::cq::cq_init_attr_ex_from_c(a).map(|c| (c.cqe, c.comp_vector, c.wc_flags.bits(), c.flags.bits(), c.parent_domain))
}

/// `cq::cq_counts`.
pub fn cq_counts(cqe: c_int, comp_vector: c_int) -> Option<(u32, u32)> {
    crate::cq::cq_counts(cqe, comp_vector)
}

/// `srq::srq_init_attr_ex_from_c`: the PD, for an XRC SRQ its domain and CQ, for a
/// tag-matching SRQ its `tm_cap` and CQ.
#[allow(clippy::type_complexity)]
pub fn srq_init_attr_ex_from_c(
    a: &crate::abi::ibv_srq_init_attr_ex,
) -> Result<
    (
        *mut crate::abi::ibv_pd,
        Option<(*mut crate::abi::ibv_xrcd, *mut crate::abi::ibv_cq)>,
        Option<(crate::abi::ibv_tm_cap, *mut crate::abi::ibv_cq)>,
    ),
    c_int,
> {
    crate::srq::srq_init_attr_ex_from_c(a).map(|c| (c.pd, c.xrc, c.tm))
}

/// `cm::ep::connect_data`: the private data `rdma_create_ep` keeps from an addrinfo.
///
/// # Safety
/// A non-NULL `ai_connect` holds `ai_connect_len` readable bytes.
pub unsafe fn ep_connect_data(res: &crate::cm::abi::rdma_addrinfo) -> Vec<u8> {
    // SAFETY: forwarded contract.
    unsafe { crate::cm::ep::connect_data(res) }.to_vec()
}

/// `qp::wr::builder_flags`: the flags of an `ibv_wr_*` request from `qpx->wr_flags`.
pub fn builder_flags(wr_flags: u32) -> rverbs::SendFlags {
    crate::qp::wr::builder_flags(wr_flags)
}

/// `qp::wr::atomic_write_value`.
///
/// # Safety
/// A non-NULL `value` points to 8 readable bytes.
pub unsafe fn atomic_write_value(value: *const core::ffi::c_void) -> Option<[u8; 8]> {
    // SAFETY: forwarded contract.
    unsafe { crate::qp::wr::atomic_write_value(value) }
}

/// `qp::wr::sge_list_arg`, copied out.
///
/// # Safety
/// A non-NULL `list` holds `num_sge` entries when `num_sge <= max_send_sge`.
pub unsafe fn sge_list_arg(num_sge: usize, list: *const crate::abi::ibv_sge, max_send_sge: usize) -> Option<Vec<rverbs::Sge>> {
    // SAFETY: forwarded contract.
    unsafe { crate::qp::wr::sge_list_arg(num_sge, list, max_send_sge) }.map(<[rverbs::Sge]>::to_vec)
}

/// `qp::wr::inline_data`: `ibv_wr_set_inline_data_list`'s bytes, or why they are refused.
///
/// # Safety
/// A non-NULL `list` holds `num_buf` entries, each naming `length` readable bytes or NULL.
pub unsafe fn inline_data(num_buf: usize, list: *const crate::abi::ibv_data_buf) -> Result<Vec<u8>, &'static str> {
    // SAFETY: forwarded contract.
    unsafe { crate::qp::wr::inline_data(num_buf, list) }
}
