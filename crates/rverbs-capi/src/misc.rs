//! Device-independent helpers, all real: rate conversions, fork helpers, sysfs helpers
//! and the historical kernel-ABI marshalling exports `ibv_copy_*`.
//!
//! Behaviour follows rdma-core 44 (libibverbs/verbs.c, memory.c, sysfs.c, marshall.c);
//! `tests/pure_fns.rs` compares each with the installed libibverbs.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::ffi::CString;
use std::sync::OnceLock;

use crate::abi::*;
use crate::ffi::{minus_one_errno, set_errno};

// ---------------------------------------------------------------------------------------
// Rates
// ---------------------------------------------------------------------------------------

/// `(rate, multiple of 2.5 Gb/s or -1, Mb/s)` for every `enum ibv_rate` value but
/// `IBV_RATE_MAX`. The multiple is -1 for the rates that are not a multiple of 2.5 Gb/s
/// lane rates in rdma-core's table (FDR, EDR, HDR rates).
const RATES: [(ibv_rate, c_int, c_int); 24] = [
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, -1, 25781),
    (IBV_RATE_100_GBPS, -1, 103125),
    (IBV_RATE_200_GBPS, -1, 206250),
    (IBV_RATE_300_GBPS, -1, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
    // Keeps the table exhaustive over the enum: IBV_RATE_MAX has neither.
    (IBV_RATE_MAX, -1, -1),
];

fn rate_entry(rate: ibv_rate) -> Option<(ibv_rate, c_int, c_int)> {
    RATES.iter().copied().find(|&(r, _, _)| r == rate)
}

export! {
    /// Converts an `enum ibv_rate` to a multiple of 2.5 Gb/s (`ibv_rate_to_mult(3)`).
    ///
    /// Rule: verbs.c: -1 for `IBV_RATE_MAX`, unknown values and rates that are not
    /// such a multiple.
    #[export("IBVERBS_1.0", value(-1))]
    pub fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
        rate_entry(rate).map_or(-1, |(_, mult, _)| mult)
    }
}

export! {
    /// Converts a multiple of 2.5 Gb/s to an `enum ibv_rate` (`mult_to_ibv_rate(3)`).
    ///
    /// Rule: verbs.c: unknown multiples give `IBV_RATE_MAX` (0).
    #[export("IBVERBS_1.0", value(IBV_RATE_MAX))]
    pub fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
        RATES
            .iter()
            .find(|&&(_, m, _)| m == mult && m > 0)
            .map_or(IBV_RATE_MAX, |&(rate, _, _)| rate)
    }
}

export! {
    /// Converts an `enum ibv_rate` to Mb/s (`ibv_rate_to_mbps(3)`).
    ///
    /// Rule: verbs.c: -1 for `IBV_RATE_MAX` and unknown values.
    #[export("IBVERBS_1.1", value(-1))]
    pub fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
        rate_entry(rate).map_or(-1, |(_, _, mbps)| mbps)
    }
}

export! {
    /// Converts Mb/s to an `enum ibv_rate` (`mbps_to_ibv_rate(3)`).
    ///
    /// Rule: verbs.c: only the exact values of `ibv_rate_to_mbps` map; anything else
    /// gives `IBV_RATE_MAX` (0).
    #[export("IBVERBS_1.1", value(IBV_RATE_MAX))]
    pub fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
        RATES
            .iter()
            .find(|&&(_, _, m)| m == mbps && m > 0)
            .map_or(IBV_RATE_MAX, |&(rate, _, _)| rate)
    }
}

// ---------------------------------------------------------------------------------------
// fork() support
// ---------------------------------------------------------------------------------------

export! {
    /// Prepares for `fork()` (`ibv_fork_init(3)`): always succeeds.
    ///
    /// Deviation: rdma-core marks registered ranges `MADV_DONTFORK` because the kernel
    /// pins them for DMA; rverbs pins nothing, so a child never corrupts a registration
    /// and there is nothing to set up.
    #[export("IBVERBS_1.1", errno)]
    pub fn ibv_fork_init() -> c_int {
        0
    }
}

export! {
    /// Reports the fork mode (`ibv_is_fork_initialized(3)`): `IBV_FORK_UNNEEDED`.
    ///
    /// Rule: ibv_is_fork_initialized(3): UNNEEDED means "fork is safe without
    /// ibv_fork_init()", which holds for rverbs (see [`ibv_fork_init`]).
    #[export("IBVERBS_1.13", value(IBV_FORK_UNNEEDED))]
    pub fn ibv_is_fork_initialized() -> ibv_fork_status {
        IBV_FORK_UNNEEDED
    }
}

export! {
    /// Would mark a range `MADV_DONTFORK`; a no-op returning 0 (nothing is pinned).
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
        0
    }
}

export! {
    /// Would undo [`ibv_dontfork_range`]; a no-op returning 0.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
        0
    }
}

// ---------------------------------------------------------------------------------------
// sysfs helpers
// ---------------------------------------------------------------------------------------

/// `SYSFS_PATH` (if the process is not set-uid) without trailing slashes, else "/sys".
fn sysfs_path() -> &'static CStr {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: getuid/geteuid have no preconditions and cannot fail.
        let not_setuid = unsafe { libc::getuid() == libc::geteuid() };
        let env = not_setuid.then(|| std::env::var_os("SYSFS_PATH")).flatten();
        sysfs_path_from(env.as_deref())
    })
}

/// The sysfs path for a `SYSFS_PATH` value (`None`: unset, or a set-uid process).
pub(crate) fn sysfs_path_from(env: Option<&std::ffi::OsStr>) -> CString {
    match env {
        Some(value) => {
            use std::os::unix::ffi::OsStrExt;
            // rdma-core: strndup(env, IBV_SYSFS_PATH_MAX), then strip trailing '/'.
            let bytes = value.as_bytes();
            let bytes = &bytes[..bytes.len().min(IBV_SYSFS_PATH_MAX)];
            let end = bytes.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
            // An environment value contains no NUL byte.
            CString::new(&bytes[..end]).unwrap_or_default()
        }
        None => c"/sys".to_owned(),
    }
}

export! {
    /// Returns the sysfs mount point libibverbs uses (historical export).
    ///
    /// Rule: sysfs.c: `$SYSFS_PATH` with trailing slashes removed (ignored in set-uid
    /// processes), else "/sys"; computed once, valid for the life of the process.
    #[export("IBVERBS_1.0", null)]
    pub fn ibv_get_sysfs_path() -> *const c_char {
        sysfs_path().as_ptr()
    }
}

export! {
    /// Reads the sysfs-style file `dir/file` into `buf` (historical export, used by
    /// `ibv_devinfo` and librdmacm).
    ///
    /// Rule: sysfs.c: one `read()` of at most `size` bytes; a trailing newline is replaced
    /// by NUL and not counted; otherwise the data is NUL-terminated if it fits, and -1 is
    /// returned if it does not (truncation). Returns the length, or -1 with `errno`.
    /// Deviation: NULL `dir`/`file` (or `buf` with `size > 0`) give -1/`EINVAL`; rdma-core
    /// would format "(null)" into the path (or fail in `read()` with `EFAULT`).
    #[export("IBVERBS_1.0", minus_one)]
    pub unsafe fn ibv_read_sysfs_file(
        dir: *const c_char,
        file: *const c_char,
        buf: *mut c_char,
        size: usize,
    ) -> c_int {
        if dir.is_null() || file.is_null() || (buf.is_null() && size != 0) {
            return minus_one_errno(libc::EINVAL);
        }
        // SAFETY: dir and file are non-NULL NUL-terminated strings (caller contract).
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let mut path = Vec::with_capacity(dir.to_bytes().len() + file.to_bytes().len() + 1);
        path.extend_from_slice(dir.to_bytes());
        path.push(b'/');
        path.extend_from_slice(file.to_bytes());
        let Ok(path) = CString::new(path) else {
            return minus_one_errno(libc::EINVAL);
        };
        // SAFETY: path is a valid NUL-terminated string.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return -1;
        }
        // SAFETY: buf is valid for `size` bytes of writes (caller contract; checked
        // non-NULL above when size > 0); fd is open.
        let len = unsafe { libc::read(fd, buf.cast(), size) };
        let saved = crate::ffi::errno();
        // SAFETY: fd was opened above and is closed exactly once.
        unsafe { libc::close(fd) };
        set_errno(saved);
        let Ok(len) = usize::try_from(len) else {
            return -1; // read() failed; errno is read()'s
        };
        if len == 0 {
            return 0;
        }
        let buf = buf.cast::<u8>();
        // SAFETY: read() initialised buf[..len], len <= size.
        if unsafe { buf.add(len - 1).read() } == b'\n' {
            // SAFETY: len - 1 < size; buf is writable for size bytes (caller contract).
            unsafe { buf.add(len - 1).write(0) };
            return (len - 1) as c_int;
        }
        if len == size {
            // No room for the terminator: rdma-core fails rather than pass on an
            // unterminated string.
            return -1;
        }
        // SAFETY: len < size; buf is writable for size bytes (caller contract).
        unsafe { buf.add(len).write(0) };
        len as c_int
    }
}

// ---------------------------------------------------------------------------------------
// Kernel ABI marshalling (historical exports; librdmacm uses them)
// ---------------------------------------------------------------------------------------

fn ah_attr_from_kern(dst: &mut ibv_ah_attr, src: &ib_uverbs_ah_attr) {
    dst.grh.dgid = ibv_gid { raw: src.grh.dgid };
    dst.grh.flow_label = src.grh.flow_label;
    dst.grh.sgid_index = src.grh.sgid_index;
    dst.grh.hop_limit = src.grh.hop_limit;
    dst.grh.traffic_class = src.grh.traffic_class;
    dst.dlid = src.dlid;
    dst.sl = src.sl;
    dst.src_path_bits = src.src_path_bits;
    dst.static_rate = src.static_rate;
    dst.is_global = src.is_global;
    dst.port_num = src.port_num;
}

export! {
    /// Copies a kernel `ib_uverbs_ah_attr` into an `ibv_ah_attr`, field by field.
    ///
    /// Rule: marshall.c: only the named fields are written (padding of `dst` untouched).
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut ib_uverbs_ah_attr) {
        // SAFETY: valid, non-overlapping pointers (caller contract); NULL is ignored.
        let (Some(dst), Some(src)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
            return;
        };
        ah_attr_from_kern(dst, src);
    }
}

export! {
    /// Copies a kernel `ib_uverbs_qp_attr` into an `ibv_qp_attr`, field by field.
    ///
    /// Rule: marshall.c: `qp_state`, `rate_limit` and `qp_attr_mask` are *not* copied;
    /// `cur_qp_state` and everything else is.
    #[export("IBVERBS_1.0", void)]
    pub unsafe fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut ib_uverbs_qp_attr) {
        // SAFETY: valid, non-overlapping pointers (caller contract); NULL is ignored.
        let (Some(dst), Some(src)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
            return;
        };
        dst.cur_qp_state = src.cur_qp_state;
        dst.path_mtu = src.path_mtu;
        dst.path_mig_state = src.path_mig_state;
        dst.qkey = src.qkey;
        dst.rq_psn = src.rq_psn;
        dst.sq_psn = src.sq_psn;
        dst.dest_qp_num = src.dest_qp_num;
        dst.qp_access_flags = src.qp_access_flags;
        dst.cap.max_send_wr = src.max_send_wr;
        dst.cap.max_recv_wr = src.max_recv_wr;
        dst.cap.max_send_sge = src.max_send_sge;
        dst.cap.max_recv_sge = src.max_recv_sge;
        dst.cap.max_inline_data = src.max_inline_data;
        ah_attr_from_kern(&mut dst.ah_attr, &src.ah_attr);
        ah_attr_from_kern(&mut dst.alt_ah_attr, &src.alt_ah_attr);
        dst.pkey_index = src.pkey_index;
        dst.alt_pkey_index = src.alt_pkey_index;
        dst.en_sqd_async_notify = src.en_sqd_async_notify;
        dst.sq_draining = src.sq_draining;
        dst.max_rd_atomic = src.max_rd_atomic;
        dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
        dst.min_rnr_timer = src.min_rnr_timer;
        dst.port_num = src.port_num;
        dst.timeout = src.timeout;
        dst.retry_cnt = src.retry_cnt;
        dst.rnr_retry = src.rnr_retry;
        dst.alt_port_num = src.alt_port_num;
        dst.alt_timeout = src.alt_timeout;
    }
}

export! {
    /// Copies a kernel `ib_user_path_rec` into an `ibv_sa_path_rec`, field by field.
    ///
    /// Rule: marshall.c: `raw_traffic`/`reversible` are reinterpreted as `int`, `mtu` is
    /// truncated to 8 bits; byte order is unchanged (both sides are big-endian where
    /// the wire is).
    #[export("IBVERBS_1.0", void)]
    pub unsafe fn ibv_copy_path_rec_from_kern(
        dst: *mut ibv_sa_path_rec,
        src: *mut ib_user_path_rec,
    ) {
        // SAFETY: valid, non-overlapping pointers (caller contract); NULL is ignored.
        let (Some(dst), Some(src)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
            return;
        };
        dst.dgid = ibv_gid { raw: src.dgid };
        dst.sgid = ibv_gid { raw: src.sgid };
        dst.dlid = src.dlid;
        dst.slid = src.slid;
        dst.raw_traffic = src.raw_traffic as c_int;
        dst.flow_label = src.flow_label;
        dst.hop_limit = src.hop_limit;
        dst.traffic_class = src.traffic_class;
        dst.reversible = src.reversible as c_int;
        dst.numb_path = src.numb_path;
        dst.pkey = src.pkey;
        dst.sl = src.sl;
        dst.mtu_selector = src.mtu_selector;
        dst.mtu = src.mtu as u8;
        dst.rate_selector = src.rate_selector;
        dst.rate = src.rate;
        dst.packet_life_time = src.packet_life_time;
        dst.preference = src.preference;
        dst.packet_life_time_selector = src.packet_life_time_selector;
    }
}

export! {
    /// Copies an `ibv_sa_path_rec` into a kernel `ib_user_path_rec`, field by field.
    ///
    /// Rule: marshall.c: the inverse of [`ibv_copy_path_rec_from_kern`]; fields without a
    /// counterpart are left untouched.
    #[export("IBVERBS_1.0", void)]
    pub unsafe fn ibv_copy_path_rec_to_kern(dst: *mut ib_user_path_rec, src: *mut ibv_sa_path_rec) {
        // SAFETY: valid, non-overlapping pointers (caller contract); NULL is ignored.
        let (Some(dst), Some(src)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
            return;
        };
        // SAFETY: every bit pattern of the 16-byte union is a valid [u8; 16].
        let (dgid, sgid) = unsafe { (src.dgid.raw, src.sgid.raw) };
        dst.dgid = dgid;
        dst.sgid = sgid;
        dst.dlid = src.dlid;
        dst.slid = src.slid;
        dst.raw_traffic = src.raw_traffic as u32;
        dst.flow_label = src.flow_label;
        dst.hop_limit = src.hop_limit;
        dst.traffic_class = src.traffic_class;
        dst.reversible = src.reversible as u32;
        dst.numb_path = src.numb_path;
        dst.pkey = src.pkey;
        dst.sl = src.sl;
        dst.mtu_selector = src.mtu_selector;
        dst.mtu = u32::from(src.mtu);
        dst.rate_selector = src.rate_selector;
        dst.rate = src.rate;
        dst.packet_life_time = src.packet_life_time;
        dst.preference = src.preference;
        dst.packet_life_time_selector = src.packet_life_time_selector;
    }
}
