//! The versioned export table of the built `librdmacm.so` against the installed
//! rdma-core 44 `librdmacm.so.1` (Debian 12), and its pairing with the built
//! `libibverbs.so`: every forwarded `rdma_*` name has its `__rv_<name>` entry point
//! there.
//!
//! The libraries are found next to this test binary (see `common::our_lib`);
//! a missing reference library is a failure, not a skip.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::path::Path;

use common::{exports, our_lib, our_libibverbs, readelf, version_definitions, Export, REAL_LIB};

const NODES: [&str; 4] = ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"];

/// The rsocket family: implemented by the shim itself (docs/rsockets.md), not forwarded.
const RSOCKETS: [&str; 27] = [
    "rsocket",
    "rbind",
    "rlisten",
    "raccept",
    "rconnect",
    "rshutdown",
    "rclose",
    "rrecv",
    "rrecvfrom",
    "rrecvmsg",
    "rsend",
    "rsendto",
    "rsendmsg",
    "rread",
    "rreadv",
    "rwrite",
    "rwritev",
    "rpoll",
    "rselect",
    "rgetpeername",
    "rgetsockname",
    "rsetsockopt",
    "rgetsockopt",
    "rfcntl",
    "riomap",
    "riounmap",
    "riowrite",
];

fn real_lib() -> &'static Path {
    assert!(
        Path::new(REAL_LIB).exists(),
        "{REAL_LIB} is missing: install librdmacm1 (rdma-core 44) to compare against"
    );
    Path::new(REAL_LIB)
}

fn as_set(all: &[Export]) -> BTreeSet<Export> {
    all.iter().cloned().collect()
}

/// `(name, node)` pairs of `librdmacm.map`.
fn map_file() -> BTreeSet<(String, String)> {
    common::map_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("librdmacm.map"))
}

#[test]
fn exports_equal_rdma_core_44() {
    let ours = as_set(&exports(&our_lib()));
    let real = as_set(&exports(real_lib()));
    let missing: Vec<_> = real.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&real).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "dynamic symbol table differs from {REAL_LIB}:\nmissing: {missing:#?}\nextra: {extra:#?}"
    );
    assert_eq!(ours.len(), 68, "41 rdma_* + 27 rsocket functions");
    assert!(ours.iter().all(|e| e.kind == "FUNC"), "{ours:#?}");
    for r in RSOCKETS {
        assert!(
            ours.iter()
                .any(|e| e.name == r && e.version == "RDMACM_1.0"),
            "{r}@@RDMACM_1.0 missing"
        );
    }
}

#[test]
fn version_nodes_and_soname_equal_rdma_core_44() {
    let (our_base, our_nodes) = version_definitions(&our_lib());
    let (real_base, real_nodes) = version_definitions(real_lib());
    assert_eq!(our_base, "librdmacm.so.1");
    assert_eq!(our_base, real_base);
    assert_eq!(our_nodes, real_nodes);
    assert_eq!(our_nodes, NODES.iter().map(|s| s.to_string()).collect());
    // (rust-lld records no parent links between the nodes; glibc ignores them.)

    let dynamic = readelf(&["-d", "-W"], &our_lib());
    assert!(
        dynamic.contains("Library soname: [librdmacm.so.1]"),
        "SONAME is not librdmacm.so.1:\n{dynamic}"
    );
}

#[test]
fn version_script_lists_exactly_the_exports() {
    let map = map_file();
    let exported: BTreeSet<(String, String)> = exports(&our_lib())
        .into_iter()
        .map(|e| (e.name, e.version))
        .collect();
    let only_map: Vec<_> = map.difference(&exported).collect();
    let only_lib: Vec<_> = exported.difference(&map).collect();
    assert!(
        only_map.is_empty() && only_lib.is_empty(),
        "librdmacm.map and the .symver bindings disagree:\nonly in map: {only_map:#?}\n\
         only in library: {only_lib:#?}"
    );
}

#[test]
fn every_export_resolves_with_dlvsym() {
    let path = CString::new(our_lib().into_os_string().into_encoded_bytes()).expect("path");
    // SAFETY: valid NUL-terminated path; the shim has no constructors.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen of the cdylib failed");
    let mut by_version: BTreeMap<String, usize> = BTreeMap::new();
    for e in exports(&our_lib()) {
        let name = CString::new(e.name.clone()).expect("name");
        let version = CString::new(e.version.clone()).expect("version");
        // SAFETY: handle is a live dlopen handle; both strings are NUL-terminated.
        let sym = unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) };
        assert!(!sym.is_null(), "dlvsym({}, {}) failed", e.name, e.version);
        *by_version.entry(e.version).or_default() += 1;
    }
    assert_eq!(by_version["RDMACM_1.0"], 62);
    assert_eq!(by_version["RDMACM_1.1"], 1);
    assert_eq!(by_version["RDMACM_1.2"], 2);
    assert_eq!(by_version["RDMACM_1.3"], 3);
    // The handle is deliberately not closed: the test process ends right after.
}

#[test]
fn every_forwarded_name_has_its_rv_entry_point_in_libibverbs() {
    let verbs = exports(&our_libibverbs());
    let unversioned: BTreeSet<&str> = verbs
        .iter()
        .filter(|e| e.version.is_empty())
        .map(|e| e.name.as_str())
        .collect();
    let forwarded: Vec<String> = exports(&our_lib())
        .into_iter()
        .map(|e| e.name)
        .filter(|n| !RSOCKETS.contains(&n.as_str()))
        .collect();
    assert_eq!(forwarded.len(), 41);
    let missing: Vec<_> = forwarded
        .iter()
        .filter(|n| !unversioned.contains(format!("__rv_{n}").as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "no unversioned __rv_<name> in {:?} for: {missing:?}",
        our_libibverbs()
    );
    // The rsockets are not forwarded, and libibverbs.so.1 owns no rdma_cm public name
    // and no RDMACM_* version node (those belong to librdmacm.so.1 alone).
    for r in RSOCKETS {
        assert!(
            !unversioned.contains(format!("__rv_{r}").as_str()),
            "__rv_{r} exported"
        );
    }
    assert!(
        verbs
            .iter()
            .all(|e| !e.name.starts_with("rdma_") && !e.version.starts_with("RDMACM")),
        "libibverbs.so exports an rdma_cm name or version"
    );
    let (_, verbs_nodes) = version_definitions(&our_libibverbs());
    assert!(
        verbs_nodes.iter().all(|n| !n.starts_with("RDMACM")),
        "{verbs_nodes:?}"
    );
}
