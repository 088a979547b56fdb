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

/// The caller's `errno` at entry to a verb, put back when the verb succeeds
/// (`ffi_guard!`).
pub struct SavedErrno {
    location: *mut c_int,
    value: c_int,
}

impl SavedErrno {
    /// Reads the calling thread's `errno`.
    #[inline]
    pub fn save() -> Self {
        // SAFETY: __errno_location() has no preconditions.
        let location = unsafe { libc::__errno_location() };
        // SAFETY: it returns a valid pointer to the calling thread's errno.
        let value = unsafe { *location };
        SavedErrno { location, value }
    }

    /// Puts the saved value back (same thread: the guard runs on one).
    #[inline]
    fn restore(self) {
        // SAFETY: the pointer of this thread's errno, valid while the thread lives.
        unsafe { *self.location = self.value };
    }

    /// `ret` of a pointer-returning verb; `errno` restored if it is not NULL.
    #[inline]
    pub fn after_ptr<P: Nullable>(self, ret: P) -> P {
        if !ret.is_null_ptr() {
            self.restore();
        }
        ret
    }

    /// `ret` of a verb returning 0 or an errno; `errno` restored if it is 0.
    #[inline]
    pub fn after_errno(self, ret: c_int) -> c_int {
        if ret == 0 {
            self.restore();
        }
        ret
    }

    /// `ret` of a verb returning -1 with `errno` on failure; `errno` restored otherwise.
    #[inline]
    pub fn after_minus_one(self, ret: c_int) -> c_int {
        if ret != -1 {
            self.restore();
        }
        ret
    }
}

/// Raw pointer types that have a NULL value (`*mut T`, `*const T`).
pub trait Nullable {
    /// The NULL pointer.
    const NULL: Self;
    /// Whether this is the NULL pointer.
    fn is_null_ptr(&self) -> bool;
}

impl<T> Nullable for *mut T {
    const NULL: Self = core::ptr::null_mut();
    fn is_null_ptr(&self) -> bool {
        self.is_null()
    }
}

impl<T> Nullable for *const T {
    const NULL: Self = core::ptr::null();
    fn is_null_ptr(&self) -> bool {
        self.is_null()
    }
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

/// A blocking event getter's answer for a channel or context that is not (or no
/// longer) one of ours: -1 with `EINVAL`; while another thread runs the process's exit,
/// only after 2 s, by which time the exit has normally ended this thread too
/// (`park_if_exiting`; docs/capi.md, "Threads racing with exit").
pub fn getter_on_unknown_object() -> c_int {
    rverbs::capi_support::park_if_exiting();
    tracing::debug!("the channel or context passed is not a live object of this library (errno EINVAL)");
    minus_one_errno(libc::EINVAL)
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

/// The errno of an error of the core, for the C caller: the one place where the C layer
/// turns an `rverbs` (or `rverbs-cm`) error into an errno, and so where the reason,
/// which an errno cannot carry, is logged (`RVERBS_LOG=debug` shows it on stderr).
pub trait ToErrno {
    /// The errno rdma-core reports for this error; logs the error's text.
    fn c_errno(&self) -> c_int;
}

impl ToErrno for rverbs::Error {
    #[inline]
    fn c_errno(&self) -> c_int {
        let errno = self.errno();
        log_refusal(self, errno);
        errno
    }
}

impl ToErrno for rverbs_cm::Error {
    #[inline]
    fn c_errno(&self) -> c_int {
        let errno = self.errno();
        log_refusal(self, errno);
        errno
    }
}

/// Logs why a verb failed: at debug level, except "nothing yet" answers (EAGAIN), which
/// polling loops see all the time, at trace level.
#[cold]
fn log_refusal(e: &dyn core::fmt::Display, errno: c_int) {
    if errno == libc::EAGAIN {
        tracing::trace!("{e}");
    } else {
        tracing::debug!("{e} (errno {errno})");
    }
}
