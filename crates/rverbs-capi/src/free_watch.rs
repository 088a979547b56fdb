//! The drop-in's side of the verbs sanitizer's `free` watch (docs/sanitizer.md,
//! mr-memory-freed): `librverbs_free.so` (`preload/free_watch.c`), preloaded by
//! `rverbs run --sanitize`, calls [`__rv_sanitizer_released`] for each heap block a
//! program releases, before the block goes back to the allocator.
//!
//! The symbol is unversioned (an internal `__rv_` name): the preload binds it as a weak
//! reference, so a program that loads this library with dlopen (the preload then finds
//! nothing at start-up) or not at all is left alone.

/// A heap block `[addr, addr+len)` is being released. Never panics across the C
/// boundary; off, one relaxed load.
#[no_mangle]
pub extern "C" fn __rv_sanitizer_released(addr: usize, len: usize) {
    // The check takes locks and allocates; a panic in it is dropped here, not
    // propagated into free(3).
    let _ = std::panic::catch_unwind(|| rverbs::capi_support::sanitizer_released(addr, len));
}
