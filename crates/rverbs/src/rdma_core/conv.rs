//! What the backend's conversions add to the crate's (`crate::c_abi`, shared with the
//! drop-in C library): C strings.

use core::ffi::c_char;

/// A NUL-terminated C string as an owned `String` (lossy).
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string.
pub(super) unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
