//! The functions that are real without a device, compared call for call with the
//! installed rdma-core 44 `libibverbs.so.1` (loaded with `dlopen`, resolved with
//! `dlvsym` at the exact version): strings, rates, sysfs helpers, `ibv_copy_*`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::size_of;
use std::path::Path;

use ibverbs::abi::*;

const REAL_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

struct RealLib(*mut c_void);

impl RealLib {
    fn open() -> Self {
        assert!(
            Path::new(REAL_LIB).exists(),
            "{REAL_LIB} missing: install libibverbs1 (rdma-core 44)"
        );
        let path = CString::new(REAL_LIB).expect("path");
        // SAFETY: valid path; rdma-core's libibverbs has no constructor side effects
        // beyond its own initialisation.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen({REAL_LIB}) failed");
        RealLib(handle)
    }

    /// Resolves `name@version` as a function pointer of type `F`.
    ///
    /// # Safety
    ///
    /// `F` must be the `extern "C" fn` type of the real function.
    unsafe fn get<F: Copy>(&self, name: &str, version: &str) -> F {
        assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        let (n, v) = (
            CString::new(name).expect("name"),
            CString::new(version).expect("version"),
        );
        // SAFETY: live handle, NUL-terminated strings.
        let sym = unsafe { libc::dlvsym(self.0, n.as_ptr(), v.as_ptr()) };
        assert!(!sym.is_null(), "{name}@{version} not found in {REAL_LIB}");
        // SAFETY: F is a function pointer type of pointer size (caller contract).
        unsafe { std::mem::transmute_copy::<*mut c_void, F>(&sym) }
    }
}

fn c_str(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: the string helpers return pointers to static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Values around and far outside every enum range, incl. negative ones seen as unsigned.
fn probe_values() -> Vec<u32> {
    let mut v: Vec<u32> = (0..=300).collect();
    v.extend([u32::MAX, u32::MAX - 1, 0x8000_0000, 0x7fff_ffff, 1 << 16]);
    v
}

#[test]
fn strings_match_rdma_core() {
    let real = RealLib::open();
    macro_rules! compare {
        ($name:ident: $arg:ty) => {{
            // SAFETY: verbs.h: `const char *$name(enum …)`, a 32-bit enum argument.
            let theirs: unsafe extern "C" fn($arg) -> *const c_char =
                unsafe { real.get(stringify!($name), "IBVERBS_1.1") };
            for v in probe_values() {
                let v = v as $arg;
                // SAFETY: value argument; the result is a static string.
                let expected = c_str(unsafe { theirs(v) });
                assert_eq!(
                    c_str(ibverbs::strs::$name(v)),
                    expected,
                    "{}({v})",
                    stringify!($name)
                );
            }
        }};
    }
    compare!(ibv_wc_status_str: ibv_wc_status);
    compare!(ibv_node_type_str: ibv_node_type);
    compare!(ibv_port_state_str: ibv_port_state);
    compare!(ibv_event_type_str: ibv_event_type);
}

#[test]
fn rates_match_rdma_core() {
    let real = RealLib::open();
    // SAFETY: signatures from verbs.h.
    let (to_mult, from_mult, to_mbps, from_mbps) = unsafe {
        (
            real.get::<unsafe extern "C" fn(ibv_rate) -> c_int>("ibv_rate_to_mult", "IBVERBS_1.0"),
            real.get::<unsafe extern "C" fn(c_int) -> ibv_rate>("mult_to_ibv_rate", "IBVERBS_1.0"),
            real.get::<unsafe extern "C" fn(ibv_rate) -> c_int>("ibv_rate_to_mbps", "IBVERBS_1.1"),
            real.get::<unsafe extern "C" fn(c_int) -> ibv_rate>("mbps_to_ibv_rate", "IBVERBS_1.1"),
        )
    };
    for rate in probe_values() {
        // SAFETY: value arguments only.
        unsafe {
            assert_eq!(
                ibverbs::misc::ibv_rate_to_mult(rate),
                to_mult(rate),
                "rate_to_mult({rate})"
            );
            assert_eq!(
                ibverbs::misc::ibv_rate_to_mbps(rate),
                to_mbps(rate),
                "rate_to_mbps({rate})"
            );
        }
    }
    for mult in (-10..5000).chain([c_int::MIN, c_int::MAX]) {
        // SAFETY: value argument only.
        assert_eq!(
            ibverbs::misc::mult_to_ibv_rate(mult),
            unsafe { from_mult(mult) },
            "mult {mult}"
        );
    }
    for mbps in (-10..1_400_000).chain([c_int::MIN, c_int::MAX]) {
        // SAFETY: value argument only.
        assert_eq!(
            ibverbs::misc::mbps_to_ibv_rate(mbps),
            unsafe { from_mbps(mbps) },
            "mbps {mbps}"
        );
    }
}

#[test]
fn fork_helpers() {
    assert_eq!(ibverbs::misc::ibv_fork_init(), 0);
    // Deviation from rdma-core (which says DISABLED without kernel copy-on-fork
    // support): rverbs pins no pages, so fork is safe without ibv_fork_init().
    assert_eq!(ibverbs::misc::ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
    let mut buf = [0u8; 64];
    // SAFETY: a valid buffer; both are no-ops.
    unsafe {
        assert_eq!(
            ibverbs::misc::ibv_dontfork_range(buf.as_mut_ptr().cast(), buf.len()),
            0
        );
        assert_eq!(
            ibverbs::misc::ibv_dofork_range(buf.as_mut_ptr().cast(), buf.len()),
            0
        );
    }
}

#[test]
fn sysfs_helpers_match_rdma_core() {
    let real = RealLib::open();
    // SAFETY: signatures from driver.h.
    type PathFn = unsafe extern "C" fn() -> *const c_char;
    type ReadFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut c_char, usize) -> c_int;
    let (real_path, real_read) = unsafe {
        (
            real.get::<PathFn>("ibv_get_sysfs_path", "IBVERBS_1.0"),
            real.get::<ReadFn>("ibv_read_sysfs_file", "IBVERBS_1.0"),
        )
    };
    // SAFETY: both return static strings.
    assert_eq!(
        c_str(ibverbs::misc::ibv_get_sysfs_path()),
        c_str(unsafe { real_path() })
    );

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sysfs_files");
    std::fs::create_dir_all(dir.join("subdir")).expect("tmp dir");
    let files: &[(&str, &[u8])] = &[
        ("newline", b"hello\n"),
        ("plain", b"hello"),
        ("empty", b""),
        ("only_newline", b"\n"),
        ("two_lines", b"a\nb\n"),
        ("sixteen", b"0123456789abcdef"),
    ];
    for (name, data) in files {
        std::fs::write(dir.join(name), data).expect("write fixture");
    }
    let c_dir = CString::new(dir.as_os_str().as_encoded_bytes()).expect("dir");
    let names = files.iter().map(|(n, _)| *n).chain(["missing", "subdir"]);
    for name in names {
        let c_name = CString::new(name).expect("name");
        for size in 0..20 {
            let mut ours = [0x5au8; 24];
            let mut theirs = [0x5au8; 24];
            // SAFETY: valid strings and a 24-byte buffer >= size.
            let (o, oe, r, re) = unsafe {
                let o = ibverbs::misc::ibv_read_sysfs_file(
                    c_dir.as_ptr(),
                    c_name.as_ptr(),
                    ours.as_mut_ptr().cast(),
                    size,
                );
                let oe = *libc::__errno_location();
                let r = real_read(
                    c_dir.as_ptr(),
                    c_name.as_ptr(),
                    theirs.as_mut_ptr().cast(),
                    size,
                );
                let re = *libc::__errno_location();
                (o, oe, r, re)
            };
            assert_eq!(o, r, "ibv_read_sysfs_file({name}, size {size})");
            assert_eq!(
                ours, theirs,
                "buffer after ibv_read_sysfs_file({name}, size {size})"
            );
            if r < 0 {
                assert_eq!(
                    oe, re,
                    "errno after ibv_read_sysfs_file({name}, size {size})"
                );
            }
        }
    }
}

/// Deterministic filler (xorshift64*).
fn fill_random<T>(value: &mut T, seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    // SAFETY: T is a repr(C) POD mirror; every byte pattern is a valid value of its
    // integer/array/union fields (no pointers, enums are plain integers).
    let bytes =
        unsafe { std::slice::from_raw_parts_mut((value as *mut T).cast::<u8>(), size_of::<T>()) };
    for b in bytes {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *b = (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
    }
}

fn bytes_of<T>(value: &T) -> &[u8] {
    // SAFETY: reading the object representation of a live value.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

/// Compares two objects byte by byte, ignoring the given padding offsets (which
/// neither C nor Rust promise to preserve).
#[track_caller]
fn assert_same_bytes<T>(ours: &T, theirs: &T, padding: &[usize], what: &str) {
    for (i, (a, b)) in bytes_of(ours).iter().zip(bytes_of(theirs)).enumerate() {
        if !padding.contains(&i) {
            assert_eq!(a, b, "{what}: byte {i} differs");
        }
    }
}

#[test]
fn copy_from_and_to_kern_match_rdma_core() {
    let real = RealLib::open();
    type AhFn = unsafe extern "C" fn(*mut ibv_ah_attr, *mut ib_uverbs_ah_attr);
    type QpFn = unsafe extern "C" fn(*mut ibv_qp_attr, *mut ib_uverbs_qp_attr);
    type FromPathFn = unsafe extern "C" fn(*mut ibv_sa_path_rec, *mut ib_user_path_rec);
    type ToPathFn = unsafe extern "C" fn(*mut ib_user_path_rec, *mut ibv_sa_path_rec);
    // SAFETY: signatures from rdma-core's marshall.h.
    let (ah, qp, from_path, to_path) = unsafe {
        (
            real.get::<AhFn>("ibv_copy_ah_attr_from_kern", "IBVERBS_1.1"),
            real.get::<QpFn>("ibv_copy_qp_attr_from_kern", "IBVERBS_1.0"),
            real.get::<FromPathFn>("ibv_copy_path_rec_from_kern", "IBVERBS_1.0"),
            real.get::<ToPathFn>("ibv_copy_path_rec_to_kern", "IBVERBS_1.0"),
        )
    };
    // Padding bytes: ibv_global_route 23, ibv_ah_attr 31; ibv_qp_attr 135 and 140..144;
    // ibv_sa_path_rec 46, 47, 53; ib_user_path_rec has none.
    let ah_pad = [23, 31];
    let qp_pad: Vec<usize> = [56 + 23, 56 + 31, 88 + 23, 88 + 31, 135, 140, 141, 142, 143].into();
    let path_pad = [46, 47, 53];

    for seed in 1..200u64 {
        let mut src_ah = ib_uverbs_ah_attr::zeroed();
        fill_random(&mut src_ah, seed);
        let (mut o, mut t) = (ibv_ah_attr::zeroed(), ibv_ah_attr::zeroed());
        fill_random(&mut o, !seed);
        fill_random(&mut t, !seed);
        // SAFETY: valid, distinct objects.
        unsafe {
            ibverbs::misc::ibv_copy_ah_attr_from_kern(&mut o, &mut src_ah);
            ah(&mut t, &mut src_ah);
        }
        assert_same_bytes(&o, &t, &ah_pad, "ibv_copy_ah_attr_from_kern");

        let mut src_qp = ib_uverbs_qp_attr::zeroed();
        fill_random(&mut src_qp, seed);
        let (mut o, mut t) = (ibv_qp_attr::zeroed(), ibv_qp_attr::zeroed());
        fill_random(&mut o, !seed);
        fill_random(&mut t, !seed);
        // SAFETY: valid, distinct objects.
        unsafe {
            ibverbs::misc::ibv_copy_qp_attr_from_kern(&mut o, &mut src_qp);
            qp(&mut t, &mut src_qp);
        }
        assert_same_bytes(&o, &t, &qp_pad, "ibv_copy_qp_attr_from_kern");

        let mut src_kpath = ib_user_path_rec::zeroed();
        fill_random(&mut src_kpath, seed);
        let (mut o, mut t) = (ibv_sa_path_rec::zeroed(), ibv_sa_path_rec::zeroed());
        fill_random(&mut o, !seed);
        fill_random(&mut t, !seed);
        // SAFETY: valid, distinct objects.
        unsafe {
            ibverbs::misc::ibv_copy_path_rec_from_kern(&mut o, &mut src_kpath);
            from_path(&mut t, &mut src_kpath);
        }
        assert_same_bytes(&o, &t, &path_pad, "ibv_copy_path_rec_from_kern");

        let mut src_path = ibv_sa_path_rec::zeroed();
        fill_random(&mut src_path, seed);
        let (mut o, mut t) = (ib_user_path_rec::zeroed(), ib_user_path_rec::zeroed());
        fill_random(&mut o, !seed);
        fill_random(&mut t, !seed);
        // SAFETY: valid, distinct objects.
        unsafe {
            ibverbs::misc::ibv_copy_path_rec_to_kern(&mut o, &mut src_path);
            to_path(&mut t, &mut src_path);
        }
        assert_same_bytes(&o, &t, &[], "ibv_copy_path_rec_to_kern");
    }
}

#[test]
fn null_arguments_give_an_errno_and_stubs_answer_not_supported() {
    use std::ptr::{null, null_mut};
    let errno = || {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() }
    };
    // SAFETY: every call gets NULL object pointers, which the verbs check before any
    // dereference; the stubs read none of their arguments.
    unsafe {
        // Verbs of the device: NULL objects are refused in their convention.
        assert!(ibverbs::pd::ibv_alloc_pd(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            ibverbs::qp::ibv_modify_qp(null_mut(), null_mut(), 0),
            libc::EINVAL
        );
        assert_eq!(
            ibverbs::device::ibv_query_gid(null_mut(), 1, 0, null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            ibverbs::cq::ibv_get_cq_event(null_mut(), null_mut(), null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            ibverbs::qp::ibv_query_qp_data_in_order(null_mut(), IBV_WR_SEND, 0),
            0
        );
        assert_eq!(
            ibverbs::private::ibv_query_gid_type(null_mut(), 1, 0, null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibverbs::device::ibv_open_device(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        // A pointer that is not one of our devices is refused without a dereference.
        let mut foreign = ibv_device::zeroed();
        assert!(ibverbs::device::ibv_open_device(&mut foreign).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibverbs::device::ibv_get_device_name(&mut foreign).is_null());
        assert_eq!(ibverbs::device::ibv_get_device_index(&mut foreign), -1);

        // Import needs a command fd, a context and a PD of ours: EINVAL without
        // (`ibv_import_device(3)`; fd -1 is not open).
        assert!(ibverbs::device::ibv_import_device(-1).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibverbs::pd::ibv_import_pd(null_mut(), 1).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibverbs::mr::ibv_import_mr(null_mut(), 1).is_null());
        assert_eq!(errno(), libc::EINVAL);
        // Features the device does not have: EOPNOTSUPP, never ENOSYS or success.
        assert!(ibverbs::mr::ibv_reg_dmabuf_mr(null_mut(), 0, 4096, 0, -1, 0).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        // Multicast is wired: NULL arguments are EINVAL.
        assert_eq!(
            ibverbs::qp::ibv_attach_mcast(null_mut(), null(), 0),
            libc::EINVAL
        );
        assert_eq!(
            ibverbs::qp::ibv_detach_mcast(null_mut(), null(), 0),
            libc::EINVAL
        );
        // ECE on no QP: EINVAL (ibv_query_ece(3), ibv_set_ece(3): "The QP is invalid").
        assert_eq!(
            ibverbs::qp::ibv_query_ece(null_mut(), null_mut()),
            libc::EINVAL
        );
        assert_eq!(
            ibverbs::qp::ibv_set_ece(null_mut(), null_mut()),
            libc::EINVAL
        );
        assert_eq!(
            ibverbs::ah::ibv_resolve_eth_l2_from_gid(
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut()
            ),
            -libc::EOPNOTSUPP
        );

        // The IBVERBS_PRIVATE_34 provider stubs.
        assert_eq!(
            ibverbs::private::ibv_cmd_destroy_cq(null_mut()),
            libc::EOPNOTSUPP
        );
        assert_eq!(
            ibverbs::private::ibv_cmd_poll_cq(null_mut(), 1, null_mut()),
            -1
        );
        assert_eq!(
            ibverbs::private::ibv_read_ibdev_sysfs_file(null_mut(), 0, null_mut(), null()),
            -1
        );
        assert_eq!(ibverbs::private::__ioctl_final_num_attrs(7, null_mut()), 7);
        // Called by libmlx5/libefa constructors at load time: must be a no-op.
        ibverbs::private::verbs_register_driver_34(null());
        let mut wr = ibv_recv_wr::zeroed();
        let mut bad: *mut ibv_recv_wr = null_mut();
        assert_eq!(
            ibverbs::private::ibv_cmd_post_recv(null_mut(), &mut wr, &mut bad),
            libc::EOPNOTSUPP
        );
        assert_eq!(bad, &mut wr as *mut ibv_recv_wr);
    }
}
