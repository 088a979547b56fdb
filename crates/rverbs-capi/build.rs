//! Link flags for the drop-in `libibverbs.so.1`.
//!
//! * `--version-script=libibverbs.map` defines the 13 version nodes and keeps every
//!   public name in its node; the `@@` binding itself comes from the `.symver`
//!   directives the `export!` macro emits next to each function.
//! * `-soname libibverbs.so.1` because consumers `NEEDED` exactly that name.
//!
//! Both only apply to the cdylib; the rlib (used by this crate's tests) is unaffected.
//! Requires lld or gold (rust-lld is the default for x86_64-unknown-linux-gnu since
//! Rust 1.90); GNU ld rejects rustc's anonymous version script next to ours.

use std::env;

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
