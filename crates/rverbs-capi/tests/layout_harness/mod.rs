//! The harness of the layout tests (`tests/layout.rs` for `<infiniband/verbs.h>`,
//! `tests/layout_cm.rs` for `<rdma/rdma_cma.h>`): tables of C expressions and the values
//! Rust gives them, a C dumper compiled against the installed headers that prints the
//! C values, their comparison, and the coverage check that every item mirrored in a
//! Rust ABI source is in the tables.
//!
//! Missing header or compiler = failure, never a skip.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One value to compare: a C expression and what Rust says it is.
pub struct Row {
    pub c_expr: String,
    pub rust: i64,
}

/// The rows, and the Rust items they cover (for the coverage test).
#[derive(Default)]
pub struct Layout {
    pub rows: Vec<Row>,
    /// Rust type -> Rust field paths listed for it.
    pub fields: BTreeMap<&'static str, BTreeSet<String>>,
    /// Rust enum aliases listed.
    pub enums: BTreeSet<&'static str>,
    /// Rust constants listed.
    pub consts: BTreeSet<&'static str>,
}

impl Layout {
    pub fn row(&mut self, c_expr: String, rust: i64) {
        self.rows.push(Row { c_expr, rust });
    }

    pub fn whole(&mut self, c_type: &str, rust_type: &'static str, size: usize, align: usize) {
        self.row(format!("sizeof({c_type})"), size as i64);
        self.row(format!("_Alignof({c_type})"), align as i64);
        self.fields.entry(rust_type).or_default();
    }

    #[allow(clippy::too_many_arguments)]
    pub fn field(
        &mut self,
        c_type: &str,
        rust_type: &'static str,
        rust_path: &str,
        c_path: Option<&str>,
        offset: usize,
        size: usize,
    ) {
        let rust_path: String = rust_path.chars().filter(|c| !c.is_whitespace()).collect();
        let c_path = c_path.map_or_else(|| rust_path.clone(), str::to_owned);
        self.row(format!("offsetof({c_type}, {c_path})"), offset as i64);
        self.row(format!("sizeof((({c_type} *)0)->{c_path})"), size as i64);
        self.fields.entry(rust_type).or_default().insert(rust_path);
    }
}

/// `size_of` the pointee type of a (never called) field projection.
pub fn pointee_size<T, F>(_projection: fn(*const T) -> *const F) -> usize {
    std::mem::size_of::<F>()
}

/// `"C type" => RustType { field, a.b, rust_name => "c.path", … }`; a leading `fields`
/// lists only the fields (for a Rust type that is a prefix of the C type).
macro_rules! structs {
    ($l:ident; $($(@$fields_only:ident)? $cty:literal => $t:ident {
        $($f0:ident $(. $fr:ident)* $(=> $cpath:literal)?),* $(,)?
    })*) => {
        $(
            if ![$(stringify!($fields_only))?].contains(&"fields") {
                $l.whole($cty, stringify!($t), ::std::mem::size_of::<$t>(), ::std::mem::align_of::<$t>());
            }
            $(
                $l.field(
                    $cty,
                    stringify!($t),
                    stringify!($f0 $(. $fr)*),
                    [$($cpath)?].first().copied(),
                    ::std::mem::offset_of!($t, $f0 $(. $fr)*),
                    // SAFETY: never called; the projection only names the field's type.
                    $crate::layout_harness::pointee_size(|p: *const $t| unsafe { &raw const (*p).$f0 $(. $fr)* }),
                );
            )*
        )*
    };
}

/// `"enum c_name" => rust_alias`: size and signedness.
macro_rules! enums {
    ($l:ident; $($cty:literal => $t:ident),* $(,)?) => {
        $(
            $l.row(format!("sizeof({})", $cty), ::std::mem::size_of::<$t>() as i64);
            $l.row(format!("(({})-1) < 0", $cty), ((<$t>::MIN as i64) < 0) as i64);
            $l.enums.insert(stringify!($t));
        )*
    };
}

/// Constants with the same name in C and Rust.
macro_rules! consts {
    ($l:ident; $($c:ident),* $(,)?) => {
        $(
            $l.row(stringify!($c).to_owned(), $c as i64);
            $l.consts.insert(stringify!($c));
        )*
    };
}

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles the dumper `source` (a C program that `#include`s `<name>_items.h`, whose
/// `V(expr)` lines print `value<TAB>expr`) against the installed headers, with `rows`
/// as the items, runs it and returns its output lines. `header` must exist (`package`
/// provides it).
pub fn run_c_dumper(name: &str, header: &str, package: &str, source: &str, rows: &[Row]) -> Vec<(i64, String)> {
    assert!(
        Path::new(header).is_file(),
        "{header} is missing: install {package} (rdma-core 44). The layout test \
         compares against the installed header and does not skip."
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("create tmp dir");
    let items: String = rows.iter().map(|r| format!("V({})\n", r.c_expr)).collect();
    std::fs::write(dir.join(format!("{name}_items.h")), items).expect("write the items");
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write the dumper");

    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(&dir)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "compiling the layout dumper against the installed headers failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run layout dumper");
    assert!(out.status.success(), "layout dumper failed: {:?}", out.status);
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| {
            let (value, expr) = line.split_once('\t').expect("value<TAB>expr");
            (value.parse().expect("integer"), expr.to_owned())
        })
        .collect()
}

/// Asserts that every value the dumper printed for `l` equals Rust's, and that at least
/// `min_rows` were compared (against an accidentally empty table).
pub fn assert_matches(l: &Layout, c: &[(i64, String)], header: &str, min_rows: usize) {
    assert_eq!(c.len(), l.rows.len(), "the C dumper printed a different number of values");
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let mut mismatches = Vec::new();
    for (row, (c_value, c_expr)) in l.rows.iter().zip(c) {
        assert_eq!(squash(&row.c_expr), squash(c_expr), "dumper output out of order");
        if row.rust != *c_value {
            mismatches.push(format!("  {}: C {} != Rust {}", row.c_expr, c_value, row.rust));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} layout values differ from {header}:\n{}",
        mismatches.len(),
        l.rows.len(),
        mismatches.join("\n")
    );
    assert!(l.rows.len() > min_rows, "only {} values compared", l.rows.len());
}

/// Everything declared in Rust ABI sources, by a line parser that relies on rustfmt's
/// layout: `pub struct X {` / `pub union X {` ... `}` with `pub field:` lines,
/// `pub const NAME:` and `pub type NAME = c_int|c_uint;`.
#[derive(Default, Debug)]
pub struct Declared {
    pub types: BTreeMap<String, Vec<String>>,
    pub consts: BTreeSet<String>,
    pub enums: BTreeSet<String>,
}

/// Parses the ABI sources `files`.
pub fn parse_abi_sources(files: &[PathBuf]) -> Declared {
    let mut d = Declared::default();
    for path in files {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(name) = current.clone() {
                if line.starts_with('}') {
                    current = None;
                } else if let Some(rest) = line.trim_start().strip_prefix("pub ") {
                    if let Some((field, _)) = rest.split_once(':') {
                        d.types.get_mut(&name).expect("open type").push(field.to_owned());
                    }
                }
                continue;
            }
            let decl = line.strip_prefix("pub struct ").or_else(|| line.strip_prefix("pub union "));
            if let Some(rest) = decl {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                d.types.insert(name.clone(), Vec::new());
                if rest.trim_end().ends_with('{') {
                    current = Some(name);
                }
            } else if let Some(rest) = line.strip_prefix("pub const ") {
                let (name, _) = rest.split_once(':').expect("pub const NAME: T");
                d.consts.insert(name.to_owned());
            } else if let Some(rest) = line.strip_prefix("pub type ") {
                let (name, ty) = rest.split_once(" = ").expect("pub type NAME = T");
                if ty == "c_int;" || ty == "c_uint;" {
                    d.enums.insert(name.to_owned());
                }
            }
        }
    }
    d
}

/// What `d` declares that `l` does not compare: types, fields (members of anonymous C
/// unions/structs are listed in `anonymous` as (Rust type, parent Rust type, C path)),
/// constants and enum aliases; `excused` names constants and aliases the headers lack.
pub fn not_compared(l: &Layout, d: &Declared, anonymous: &[(&str, &str, &str)], excused: &BTreeSet<&str>) -> Vec<String> {
    let mut missing = Vec::new();
    for (ty, fields) in &d.types {
        let (table, prefix) = match anonymous.iter().find(|(t, _, _)| t == ty) {
            Some((_, parent, path)) => (*parent, format!("{path}.")),
            None => (ty.as_str(), String::new()),
        };
        let Some(listed) = l.fields.get(table) else {
            missing.push(format!("type {ty} (no table)"));
            continue;
        };
        for field in fields {
            if !listed.contains(&format!("{prefix}{field}")) {
                missing.push(format!("field {ty}.{field}"));
            }
        }
    }
    for name in &d.consts {
        if !l.consts.contains(name.as_str()) && !excused.contains(name.as_str()) {
            missing.push(format!("const {name}"));
        }
    }
    for name in &d.enums {
        if !l.enums.contains(name.as_str()) && !excused.contains(name.as_str()) {
            missing.push(format!("enum alias {name}"));
        }
    }
    missing
}
