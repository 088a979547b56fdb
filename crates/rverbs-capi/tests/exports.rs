//! The versioned export table of the built `libibverbs.so` against the installed
//! rdma-core 44 `libibverbs.so.1` (`libibverbs/libibverbs.map.in`).
//!
//! The cdylib is found next to this test binary: cargo compiles the library once with
//! both crate types, so `target/<profile>/deps/libibverbs.so` is always the build this
//! test was linked with (works for `cargo test -p rverbs-capi` and
//! `cargo test --workspace`, any profile, any `CARGO_TARGET_DIR`). `RVERBS_CAPI_CDYLIB`
//! overrides the path.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::path::{Path, PathBuf};

#[path = "../../../tests/rust/elf.rs"]
mod elf;
use elf::{exports, readelf, version_definitions, Export};

const REAL_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// The 13 version nodes of rdma-core 44.
const NODES: [&str; 13] = [
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
];

fn our_lib() -> PathBuf {
    if let Some(path) = std::env::var_os("RVERBS_CAPI_CDYLIB") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let candidates = [deps.join("libibverbs.so"), deps.join("../libibverbs.so")];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("built cdylib not found at {candidates:?}; run via `cargo test -p rverbs-capi`")
        })
}

fn default_versioned(all: &[Export]) -> BTreeSet<Export> {
    all.iter()
        .filter(|e| !e.version.is_empty() && !e.version.starts_with('@'))
        .cloned()
        .collect()
}

/// `(name, node)` pairs of `libibverbs.map`.
fn map_file() -> BTreeSet<(String, String)> {
    elf::map_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("libibverbs.map"))
}

#[test]
fn default_versioned_exports_equal_rdma_core_44() {
    assert!(
        Path::new(REAL_LIB).exists(),
        "{REAL_LIB} is missing: install libibverbs1 (rdma-core 44) to compare against"
    );
    let ours = exports(&our_lib());
    let real = exports(Path::new(REAL_LIB));

    // The real library's default-version set, without its hidden compat aliases
    // ((IBVERBS_1.0) ×33, ibv_register_driver@IBVERBS_1.1), which we do not export.
    let real_default = default_versioned(&real);
    let our_default = default_versioned(&ours);
    let missing: Vec<_> = real_default.difference(&our_default).collect();
    let extra: Vec<_> = our_default.difference(&real_default).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "export table differs from {REAL_LIB}:\nmissing: {missing:#?}\nextra: {extra:#?}"
    );
    assert_eq!(our_default.len(), 146, "145 functions + 1 data object");
    let objects: Vec<_> = our_default.iter().filter(|e| e.kind == "OBJECT").collect();
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert_eq!(objects[0].name, "verbs_allow_disassociate_destroy");
    assert_eq!(objects[0].version, "IBVERBS_PRIVATE_34");
    for node in NODES {
        assert!(
            our_default.iter().any(|e| e.version == node),
            "no export in {node}"
        );
    }

    // Nothing hidden, and nothing unversioned but the internal __rv_* names.
    let hidden: Vec<_> = ours.iter().filter(|e| e.version.starts_with('@')).collect();
    assert!(
        hidden.is_empty(),
        "hidden (non-default) versions exported: {hidden:#?}"
    );
    let stray: Vec<_> = ours
        .iter()
        .filter(|e| e.version.is_empty() && !e.name.starts_with("__rv_"))
        .collect();
    assert!(
        stray.is_empty(),
        "unversioned exports other than __rv_*: {stray:#?}"
    );
    // Every public name is backed by exactly its __rv_ twin.
    for e in &our_default {
        assert!(
            ours.iter()
                .any(|o| o.version.is_empty() && o.name == format!("__rv_{}", e.name)),
            "no __rv_{} behind {}@@{}",
            e.name,
            e.name,
            e.version
        );
    }
}

#[test]
fn version_nodes_and_soname_equal_rdma_core_44() {
    let (our_base, our_nodes) = version_definitions(&our_lib());
    let (real_base, real_nodes) = version_definitions(Path::new(REAL_LIB));
    assert_eq!(our_base, "libibverbs.so.1");
    assert_eq!(our_base, real_base);
    assert_eq!(our_nodes, real_nodes);
    assert_eq!(our_nodes, NODES.iter().map(|s| s.to_string()).collect());
    // (rust-lld records no parent links between the nodes; glibc ignores them.)

    let dynamic = readelf(&["-d", "-W"], &our_lib());
    assert!(
        dynamic.contains("Library soname: [libibverbs.so.1]"),
        "SONAME is not libibverbs.so.1:\n{dynamic}"
    );
}

#[test]
fn version_script_lists_exactly_the_exports() {
    let map = map_file();
    let exported: BTreeSet<(String, String)> = default_versioned(&exports(&our_lib()))
        .into_iter()
        .map(|e| (e.name, e.version))
        .collect();
    let only_map: Vec<_> = map.difference(&exported).collect();
    let only_lib: Vec<_> = exported.difference(&map).collect();
    assert!(
        only_map.is_empty() && only_lib.is_empty(),
        "libibverbs.map and the .symver bindings disagree:\nonly in map: {only_map:#?}\n\
         only in library: {only_lib:#?}"
    );
}

#[test]
fn every_export_resolves_with_dlvsym() {
    let path = CString::new(our_lib().into_os_string().into_encoded_bytes()).expect("path");
    // SAFETY: valid NUL-terminated path; loading our own library runs no foreign code.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen of the cdylib failed");
    let mut by_version: BTreeMap<String, usize> = BTreeMap::new();
    for e in default_versioned(&exports(&our_lib())) {
        let name = CString::new(e.name.clone()).expect("name");
        let version = CString::new(e.version.clone()).expect("version");
        // SAFETY: handle is a live dlopen handle; both strings are NUL-terminated.
        let sym = unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) };
        assert!(!sym.is_null(), "dlvsym({}, {}) failed", e.name, e.version);
        *by_version.entry(e.version).or_default() += 1;
    }
    assert_eq!(by_version["IBVERBS_1.0"], 9);
    assert_eq!(by_version["IBVERBS_1.1"], 47);
    assert_eq!(by_version["IBVERBS_PRIVATE_34"], 71);
    // The handle is deliberately not closed: the test process ends right after.
}
