//! `ffi_guard!`: a panic in an exported body becomes the verb's error value with
//! `errno = EIO` instead of unwinding into C.

use std::ffi::c_int;
use std::hint::black_box;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

fn boom() -> bool {
    black_box(true)
}

#[test]
fn panic_in_pointer_verb_returns_null_with_eio() {
    let p: *mut u8 = ibverbs::ffi_guard!(null, {
        if boom() {
            panic!("bug");
        }
        Box::into_raw(Box::new(1u8))
    });
    assert!(p.is_null());
    assert_eq!(errno(), libc::EIO);
}

#[test]
fn panic_in_errno_verb_returns_eio() {
    let r: c_int = ibverbs::ffi_guard!(errno, {
        if boom() {
            panic!("bug");
        }
        0
    });
    assert_eq!(r, libc::EIO);
    assert_eq!(errno(), libc::EIO);
}

#[test]
fn panic_in_minus_one_verb_returns_minus_one_with_eio() {
    let r: c_int = ibverbs::ffi_guard!(minus_one, {
        if boom() {
            panic!("bug");
        }
        0
    });
    assert_eq!(r, -1);
    assert_eq!(errno(), libc::EIO);
}

#[test]
fn panic_in_void_and_value_verbs() {
    ibverbs::ffi_guard!(void, {
        if boom() {
            panic!("bug");
        }
    });
    assert_eq!(errno(), libc::EIO);
    let r: i64 = ibverbs::ffi_guard!(value(-7), {
        if boom() {
            panic!("bug");
        }
        0
    });
    assert_eq!(r, -7);
}

#[test]
fn no_panic_passes_the_value_through() {
    let r: c_int = ibverbs::ffi_guard!(errno, { 42 });
    assert_eq!(r, 42);
}
