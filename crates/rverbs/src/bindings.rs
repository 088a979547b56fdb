//! Hooks for language bindings (the C ABI in `rverbs-capi`): small, `#[doc(hidden)]`
//! additions to the public types that only a binding needs. No verbs logic lives here;
//! it only exposes what the safe API computes.
