//! Helpers shared by the integration tests: where the built libraries are, a drop-in
//! directory for `LD_LIBRARY_PATH`, and `readelf` parsing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// rdma-core 44's librdmacm (Debian 12), the reference export table.
pub const REAL_LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

/// A library built next to this test binary: cargo compiles each library once with
/// both crate types, so `target/<profile>/deps/<file>` is the current build (this
/// crate's, and rverbs-capi's as a dev-dependency). `env` overrides the path.
fn built(file: &str, env: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let candidates = [deps.join(file), deps.join("..").join(file)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("{file} not found at {candidates:?}; run via `cargo test -p rverbs-rdmacm`")
        })
}

/// The built shim (`librdmacm.so`); `RVERBS_RDMACM_CDYLIB` overrides.
pub fn our_lib() -> PathBuf {
    built("librdmacm.so", "RVERBS_RDMACM_CDYLIB")
}

/// The built drop-in libibverbs (`libibverbs.so`); `RVERBS_CAPI_CDYLIB` overrides.
pub fn our_libibverbs() -> PathBuf {
    built("libibverbs.so", "RVERBS_CAPI_CDYLIB")
}

/// A directory (one per test: they run in parallel) holding `librdmacm.so.1` and
/// `libibverbs.so.1` (plus the link-time names `librdmacm.so`, `libibverbs.so`) ->
/// the built libraries.
pub fn dropin_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("dropin")
        .join(test);
    std::fs::create_dir_all(&dir).expect("create drop-in dir");
    for (name, target) in [
        ("librdmacm.so.1", our_lib()),
        ("librdmacm.so", our_lib()),
        ("libibverbs.so.1", our_libibverbs()),
        ("libibverbs.so", our_libibverbs()),
    ] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).expect("symlink a built library");
    }
    dir
}

#[path = "../../../../tests/rust/elf.rs"]
mod elf;
#[allow(unused_imports)] // not every test crate that shares `common` reads ELF
pub use elf::{exports, map_file, readelf, version_definitions, Export};
