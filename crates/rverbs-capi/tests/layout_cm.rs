//! Every `#[repr(C)]` mirror in `src/cm/abi.rs` against the *installed* rdma-core
//! headers `<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`, `<infiniband/sa.h>` and
//! `<infiniband/ib.h>` (librdmacm-dev, libibverbs-dev), in the style of tests/layout.rs.
//!
//! The tables below list each mirrored struct/union with every field (members of C
//! anonymous unions by their C path), each enum alias and each constant. The test turns
//! them into `V(expr)` lines, compiles a dumper (the C source is below) against the
//! headers, runs it, and compares every printed value with Rust's `size_of`/`align_of`/
//! `offset_of!`/constant. A second test parses `src/cm/abi.rs` and fails if a mirrored
//! type, field, enum alias or constant is missing from the tables.
//!
//! Missing header or compiler = failure, never a skip.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use ibverbs::cm::abi::*;

const HEADER: &str = "/usr/include/rdma/rdma_cma.h";

/// The dumper: prints `value<TAB>expr` for each generated `V(expr)` line.
const DUMPER_C: &str = r#"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <infiniband/sa.h>
#include <infiniband/ib.h>

#define V(...) printf("%lld\t%s\n", (long long)(__VA_ARGS__), #__VA_ARGS__);

int main(void)
{
#include "layout_cm_items.h"
	return 0;
}
"#;

/// One value to compare: a C expression and what Rust says it is.
struct Row {
    c_expr: String,
    rust: i64,
}

/// The Rust paths listed per Rust type (for the coverage test).
#[derive(Default)]
struct Layout {
    rows: Vec<Row>,
    /// Rust type -> Rust field paths listed for it.
    fields: BTreeMap<&'static str, BTreeSet<String>>,
    /// Rust enum aliases listed.
    enums: BTreeSet<&'static str>,
    /// Rust constants listed.
    consts: BTreeSet<&'static str>,
}

impl Layout {
    fn row(&mut self, c_expr: String, rust: i64) {
        self.rows.push(Row { c_expr, rust });
    }

    fn whole(&mut self, c_type: &str, rust_type: &'static str, size: usize, align: usize) {
        self.row(format!("sizeof({c_type})"), size as i64);
        self.row(format!("_Alignof({c_type})"), align as i64);
        self.fields.entry(rust_type).or_default();
    }

    #[allow(clippy::too_many_arguments)]
    fn field(
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
fn pointee_size<T, F>(_projection: fn(*const T) -> *const F) -> usize {
    size_of::<F>()
}

/// `"C type" => RustType { field, a.b, rust_name => "c.path", … }`.
macro_rules! structs {
    ($l:ident; $($cty:literal => $t:ident {
        $($f0:ident $(. $fr:ident)* $(=> $cpath:literal)?),* $(,)?
    })*) => {
        $(
            $l.whole($cty, stringify!($t), size_of::<$t>(), align_of::<$t>());
            $(
                $l.field(
                    $cty,
                    stringify!($t),
                    stringify!($f0 $(. $fr)*),
                    [$($cpath)?].first().copied(),
                    offset_of!($t, $f0 $(. $fr)*),
                    // SAFETY: never called; the projection only names the field's type.
                    pointee_size(|p: *const $t| unsafe { &raw const (*p).$f0 $(. $fr)* }),
                );
            )*
        )*
    };
}

/// `"enum c_name" => rust_alias`: size and signedness.
macro_rules! enums {
    ($l:ident; $($cty:literal => $t:ident),* $(,)?) => {
        $(
            $l.row(format!("sizeof({})", $cty), size_of::<$t>() as i64);
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

fn layout() -> Layout {
    let mut l = Layout::default();

    structs! { l;
        // C: struct ib_addr { union { ... } ib_u; }; Rust flattens it into a union.
        "struct ib_addr" => ib_addr {
            uib_addr8 => "ib_u.uib_addr8", uib_addr16 => "ib_u.uib_addr16",
            uib_addr32 => "ib_u.uib_addr32", uib_addr64 => "ib_u.uib_addr64",
        }
        "struct sockaddr_ib" => sockaddr_ib {
            sib_family, sib_pkey, sib_flowinfo, sib_addr, sib_sid, sib_sid_mask, sib_scope_id,
        }
        "struct rdma_ib_addr" => rdma_ib_addr { sgid, dgid, pkey }
        "struct rdma_addr" => rdma_addr {
            // C: two anonymous unions; sockaddr_storage is the largest member of each.
            src => "src_storage",
            src.src_addr => "src_addr", src.src_sin => "src_sin", src.src_sin6 => "src_sin6",
            src.src_storage => "src_storage",
            dst => "dst_storage",
            dst.dst_addr => "dst_addr", dst.dst_sin => "dst_sin", dst.dst_sin6 => "dst_sin6",
            dst.dst_storage => "dst_storage",
            addr, addr.ibaddr, addr.ibaddr.sgid, addr.ibaddr.dgid, addr.ibaddr.pkey,
        }
        "struct rdma_route" => rdma_route { addr, path_rec, num_paths }
        "struct ibv_path_record" => ibv_path_record {
            service_id, dgid, sgid, dlid, slid, flowlabel_hoplimit, tclass, reversible_numpath,
            pkey, qosclass_sl, mtu, rate, packetlifetime, preference, reserved,
        }
        "struct ibv_path_data" => ibv_path_data { flags, reserved, path }
        "struct rdma_event_channel" => rdma_event_channel { fd }
        "struct rdma_cm_id" => rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type,
            route.addr.src.src_addr => "route.addr.src_addr",
            route.addr.dst.dst_sin6 => "route.addr.dst_sin6",
            route.addr.addr.ibaddr.pkey, route.path_rec, route.num_paths,
        }
        "struct rdma_conn_param" => rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control,
            retry_count, rnr_retry_count, srq, qp_num,
        }
        "struct rdma_ud_param" => rdma_ud_param {
            private_data, private_data_len, ah_attr, qp_num, qkey,
        }
        "struct rdma_cm_event" => rdma_cm_event {
            id, listen_id, event, status, param, param.conn, param.ud, param.conn.qp_num,
            param.conn.private_data_len, param.ud.ah_attr, param.ud.qkey,
        }
        "struct rdma_addrinfo" => rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
            ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
            ai_connect_len, ai_connect, ai_next,
        }
        "struct rdma_cm_join_mc_attr_ex" => rdma_cm_join_mc_attr_ex {
            comp_mask, join_flags, addr,
        }
    }

    enums! { l;
        "enum rdma_cm_event_type" => rdma_cm_event_type,
        "enum rdma_port_space" => rdma_port_space,
        "enum rdma_cm_join_mc_attr_mask" => rdma_cm_join_mc_attr_mask,
        "enum rdma_cm_mc_join_flags" => rdma_cm_mc_join_flags,
    }

    consts! { l;
        RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL, RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR, RDMA_CM_EVENT_ADDR_CHANGE, RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB, RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB,
        RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PORT_MASK, RDMA_IB_IP_PS_TCP, RDMA_IB_IP_PS_UDP,
        RDMA_IB_PS_IB,
        RDMA_UDP_QKEY, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE, RAI_NUMERICHOST, RAI_NOROUTE, RAI_FAMILY,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS, RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED,
        RDMA_OPTION_ID, RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS, RDMA_OPTION_ID_REUSEADDR, RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_OPTION_IB_PATH,
        IBV_PATH_RECORD_REVERSIBLE, IBV_PATH_FLAG_GMP, IBV_PATH_FLAG_PRIMARY,
        IBV_PATH_FLAG_ALTERNATE, IBV_PATH_FLAG_OUTBOUND, IBV_PATH_FLAG_INBOUND,
        IBV_PATH_FLAG_INBOUND_REVERSE, IBV_PATH_FLAG_BIDIRECTIONAL,
        AF_IB,
    }

    l
}

/// Rust-named types for C anonymous members: (Rust type, parent Rust type, path in parent).
const ANONYMOUS: &[(&str, &str, &str)] = &[
    ("rdma_addr_src", "rdma_addr", "src"),
    ("rdma_addr_dst", "rdma_addr", "dst"),
    ("rdma_addr_addr", "rdma_addr", "addr"),
    ("rdma_cm_event_param", "rdma_cm_event", "param"),
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles the dumper with the generated items and returns its output lines.
fn run_c_dumper(rows: &[Row]) -> Vec<(i64, String)> {
    assert!(
        Path::new(HEADER).is_file(),
        "{HEADER} is missing: install librdmacm-dev (rdma-core 44). The layout test \
         compares against the installed header and does not skip."
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout_cm");
    std::fs::create_dir_all(&dir).expect("create tmp dir");
    let items: String = rows.iter().map(|r| format!("V({})\n", r.c_expr)).collect();
    std::fs::write(dir.join("layout_cm_items.h"), items).expect("write layout_cm_items.h");
    let src = dir.join("layout_cm.c");
    std::fs::write(&src, DUMPER_C).expect("write layout_cm.c");

    let exe = dir.join("layout_cm");
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
    assert!(
        out.status.success(),
        "layout dumper failed: {:?}",
        out.status
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| {
            let (value, expr) = line.split_once('\t').expect("value<TAB>expr");
            (value.parse().expect("integer"), expr.to_owned())
        })
        .collect()
}

#[test]
fn layout_matches_installed_rdma_cma_h() {
    let l = layout();
    let c = run_c_dumper(&l.rows);
    assert_eq!(
        c.len(),
        l.rows.len(),
        "the C dumper printed a different number of values"
    );
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let mut mismatches = Vec::new();
    for (row, (c_value, c_expr)) in l.rows.iter().zip(&c) {
        assert_eq!(
            squash(&row.c_expr),
            squash(c_expr),
            "dumper output out of order"
        );
        if row.rust != *c_value {
            mismatches.push(format!(
                "  {}: C {} != Rust {}",
                row.c_expr, c_value, row.rust
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} layout values differ from {HEADER}:\n{}",
        mismatches.len(),
        l.rows.len(),
        mismatches.join("\n")
    );
    // Guard against an accidentally empty table.
    assert!(l.rows.len() > 300, "only {} values compared", l.rows.len());
}

/// Everything declared in `src/cm/abi.rs`, by a line parser that relies on rustfmt's
/// layout: `pub struct X {` / `pub union X {` ... `}` with `pub field:` lines,
/// `pub const NAME:` and `pub type NAME = c_int|c_uint;`.
#[derive(Default, Debug)]
struct Declared {
    types: BTreeMap<String, Vec<String>>,
    consts: BTreeSet<String>,
    enums: BTreeSet<String>,
}

fn parse_abi_source() -> Declared {
    let mut d = Declared::default();
    let path = manifest_dir().join("src/cm/abi.rs");
    let text = std::fs::read_to_string(&path).expect("read src/cm/abi.rs");
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = current.clone() {
            if line.starts_with('}') {
                current = None;
            } else if let Some(rest) = line.trim_start().strip_prefix("pub ") {
                if let Some((field, _)) = rest.split_once(':') {
                    d.types
                        .get_mut(&name)
                        .expect("open type")
                        .push(field.to_owned());
                }
            }
            continue;
        }
        let decl = line
            .strip_prefix("pub struct ")
            .or_else(|| line.strip_prefix("pub union "));
        if let Some(rest) = decl {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
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
    d
}

#[test]
fn every_mirrored_item_is_compared() {
    let l = layout();
    let d = parse_abi_source();
    assert!(
        d.types.len() >= 18,
        "parser found only {} types",
        d.types.len()
    );
    let mut missing = Vec::new();
    for (ty, fields) in &d.types {
        let (table, prefix) = match ANONYMOUS.iter().find(|(t, _, _)| t == ty) {
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
        if !l.consts.contains(name.as_str()) {
            missing.push(format!("const {name}"));
        }
    }
    for name in &d.enums {
        if !l.enums.contains(name.as_str()) {
            missing.push(format!("enum alias {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "mirrored in src/cm/abi.rs but not compared with the headers by tests/layout_cm.rs:\n  {}",
        missing.join("\n  ")
    );
}
