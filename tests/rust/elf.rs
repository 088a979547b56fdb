//! What the export tests of the drop-in libraries read from an ELF shared object
//! (through binutils' `readelf`) and from a GNU ld version script. Shared by
//! `crates/rverbs-capi/tests/exports.rs` (libibverbs.so.1) and
//! `crates/rverbs-rdmacm/tests/common` (librdmacm.so.1) with `#[path]`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

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
pub fn version_definitions(lib: &Path) -> (String, BTreeSet<String>) {
    let text = readelf(&["-V", "-W"], lib);
    let mut base = String::new();
    let mut names = BTreeSet::new();
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
                names.insert(name.trim().to_owned());
            }
        }
    }
    (base, names)
}

/// `(name, node)` pairs of a version script (comments stripped; `local: *` ignored).
pub fn map_file(path: &Path) -> BTreeSet<(String, String)> {
    let mut text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    while let Some(start) = text.find("/*") {
        let end = text[start..].find("*/").expect("unterminated comment") + start + 2;
        text.replace_range(start..end, " ");
    }
    let mut out = BTreeSet::new();
    let mut node: Option<String> = None;
    for token in text.split(';').map(str::trim) {
        let mut token = token;
        if let Some((head, rest)) = token.split_once('{') {
            // Closing of the previous node: "} PARENT" precedes the next node's name.
            let head = head.rsplit('}').next().unwrap_or(head).trim();
            let head = head.split_whitespace().last().unwrap_or(head);
            node = Some(head.to_owned());
            token = rest.trim();
        }
        let token = token.trim_start_matches("global:").trim();
        if token.is_empty() || token.starts_with('}') || token.starts_with("local:") {
            continue;
        }
        out.insert((token.to_owned(), node.clone().expect("name outside a node")));
    }
    out
}
