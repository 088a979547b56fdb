//! Helpers shared by the integration tests: where the built libraries are, a drop-in
//! directory for `LD_LIBRARY_PATH`, and `readelf` parsing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// `readelf <args> <lib>` (binutils) as text.
pub fn readelf(args: &[&str], lib: &Path) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("cannot run readelf (binutils): {e}"));
    assert!(out.status.success(), "readelf {args:?} {lib:?} failed");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A defined dynamic symbol: `(name, version, kind)`; version "" = unversioned (Base),
/// a `@` prefix marks a hidden (non-default) version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Export {
    pub name: String,
    pub version: String,
    pub kind: String,
}

/// Every defined, non-local, non-ABS dynamic symbol of `lib`.
pub fn exports(lib: &Path) -> Vec<Export> {
    let text = readelf(&["--dyn-syms", "-W"], lib);
    let mut out = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name [(verindex)]
        if cols.len() < 8 || !cols[0].ends_with(':') || cols[0] == "Num:" {
            continue;
        }
        let (kind, bind, ndx, name) = (cols[3], cols[4], cols[6], cols[7]);
        if ndx == "UND" || ndx == "ABS" || bind == "LOCAL" {
            continue;
        }
        let (name, version) = match name.split_once("@@") {
            Some((n, v)) => (n, v.to_owned()),
            None => match name.split_once('@') {
                Some((n, v)) => (n, format!("@{v}")),
                None => (name, String::new()),
            },
        };
        out.push(Export {
            name: name.to_owned(),
            version,
            kind: kind.to_owned(),
        });
    }
    out
}

/// `(BASE name, other version definitions)` of `lib`.
pub fn version_definitions(lib: &Path) -> (String, Vec<String>) {
    let text = readelf(&["-V", "-W"], lib);
    let mut base = String::new();
    let mut names = Vec::new();
    let mut in_defs = false;
    for line in text.lines() {
        if line.starts_with("Version definition section") {
            in_defs = true;
            continue;
        }
        if line.starts_with("Version needs section") || line.starts_with("Version symbols") {
            in_defs = false;
        }
        if !in_defs {
            continue;
        }
        if let Some((_, name)) = line.split_once("Name: ") {
            if line.contains("Flags: BASE") {
                base = name.trim().to_owned();
            } else {
                names.push(name.trim().to_owned());
            }
        }
    }
    (base, names)
}
