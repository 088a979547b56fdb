//! errno plumbing and the return values shared by the exported functions.
//!
//! The return conventions (rdma-core's, per function; see each verb's man page):
//! object-creating verbs return NULL and set `errno`; most `int` verbs return a
//! positive errno; a few (`ibv_query_gid`, `ibv_query_pkey`, `ibv_get_cq_event`,
//! `ibv_get_async_event`, `ibv_read_sysfs_file`, …) return -1 and set `errno`.

use core::ffi::c_int;

/// Sets the calling thread's `errno`.
#[inline]
pub fn set_errno(err: c_int) {
    // SAFETY: __errno_location() returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() = err };
}

/// Reads the calling thread's `errno`.
#[inline]
pub fn errno() -> c_int {
    // SAFETY: __errno_location() returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Raw pointer types that have a NULL value (`*mut T`, `*const T`).
pub trait Nullable {
    /// The NULL pointer.
    const NULL: Self;
}

impl<T> Nullable for *mut T {
    const NULL: Self = core::ptr::null_mut();
}

impl<T> Nullable for *const T {
    const NULL: Self = core::ptr::null();
}

/// NULL with `errno = err`: the failure value of object-creating verbs.
#[inline]
pub fn null_errno<P: Nullable>(err: c_int) -> P {
    set_errno(err);
    P::NULL
}

/// -1 with `errno = err`: the failure value of the verbs that return -1.
#[inline]
pub fn minus_one_errno(err: c_int) -> c_int {
    set_errno(err);
    -1
}

/// "Not supported yet" for object-creating verbs: NULL, `errno = EOPNOTSUPP`.
#[inline]
pub fn not_supported_null<P: Nullable>() -> P {
    null_errno(libc::EOPNOTSUPP)
}

/// "Not supported yet" for verbs returning a positive errno: `EOPNOTSUPP`.
/// `errno` is set too, as rdma-core's `ibv_set_ece` does; harmless elsewhere.
#[inline]
pub fn not_supported_errno() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// "Not supported yet" for verbs returning -1 + errno: -1, `errno = EOPNOTSUPP`.
#[inline]
pub fn not_supported_minus_one() -> c_int {
    minus_one_errno(libc::EOPNOTSUPP)
}

/// "Not supported yet" for `void` functions: nothing to report but `errno`.
#[inline]
pub fn not_supported_void() {
    set_errno(libc::EOPNOTSUPP);
}

/// Panic value of the `null` convention of `ffi_guard!`.
#[cold]
pub fn panicked_null<P: Nullable>() -> P {
    null_errno(libc::EIO)
}

/// Panic value of the `errno` convention of `ffi_guard!`.
#[cold]
pub fn panicked_errno() -> c_int {
    set_errno(libc::EIO);
    libc::EIO
}

/// Panic value of the `minus_one` convention of `ffi_guard!`.
#[cold]
pub fn panicked_minus_one() -> c_int {
    minus_one_errno(libc::EIO)
}

/// Panic value of the `void` convention of `ffi_guard!`.
#[cold]
pub fn panicked_void() {
    set_errno(libc::EIO);
}

/// Panic value of the `value(v)` convention of `ffi_guard!`.
#[cold]
pub fn panicked_value<T>(value: T) -> T {
    set_errno(libc::EIO);
    value
}
