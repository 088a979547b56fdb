//! Link flags for the drop-in `librdmacm.so.1`.
//!
//! * `--version-script=librdmacm.map` defines the 4 version nodes (`RDMACM_1.0` …
//!   `RDMACM_1.3`) and keeps every public name in its node; the `@@` binding itself
//!   comes from the `.symver` directive emitted next to each function (src/lib.rs).
//! * `-soname librdmacm.so.1` because consumers `NEEDED` exactly that name.
//!
//! Requires lld or gold (rust-lld is the default for x86_64-unknown-linux-gnu since
//! Rust 1.90); GNU ld rejects rustc's anonymous version script next to ours.

use std::env;

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
}
