//! The architecture test: the `rverbs` crate is built in declared layers, and no module
//! imports a layer above its own (ARCHITECTURE.md, "Layers").
//!
//! It reads the crate's sources with `syn`, finds every path a module names inside the
//! crate (`use crate::…`, `crate::…` in code, types and macro arguments, `super::…`), and
//! checks each such dependency against [`LAYERS`]. Test code (`#[cfg(test)]` items) is not
//! part of the layering. A new file must be given a layer here; an import that points up a
//! layer fails the test with the file, the line and both layers named; so does an import
//! loop of any length among the top-level modules of one layer.
//!
//! The crate has no upward import. Where a lower layer needs something of a higher one it
//! holds a core or calls a trait of its own layer: the domain objects' cores live in
//! `mr::domain` (memory layer: `ContextCore`, `PdCore`, `XrcdCore`), which the verbs
//! handles wrap; the engine asks the device and the transports through the traits of
//! `qp::device` (`QpDevice`, `SendPath`), which they implement (ARCHITECTURE.md, "Layers").
//!
//! [`KNOWN_UPWARD`] is the ratchet that took the crate there (issue 11): an upward import
//! not in the list fails, and so does an entry that no longer exists, so the list only
//! ever shrinks. It is empty; keep it so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The layers, lowest first. A module may use modules of its own layer and of the layers
/// listed before it. Modules are files, named by their path (`qp::sq` is `src/qp/sq.rs`,
/// `qp` is `src/qp/mod.rs`).
const LAYERS: &[(&str, &[&str])] = &[
    // Operating system and primitives; the
    // asynchronous event record as it travels through a context's FIFO (`notify`: plain
    // encoding and counters, it uses nothing of the crate), which a context's core sends.
    ("os", &["sanitizer", "sanitizer::early", "sanitizer::finding", "sanitizer::freed", "sanitizer::id", "sanitizer::report", "sanitizer::trace", "sanitizer::track", "clock", "config", "error", "fault", "fault_plan", "gid", "grace", "limits", "mem", "neigh", "rule", "service_thread", "spin", "sys", "table", "notify"]),
    // Shared memory between the processes of one host (`shm`: segments, FIFOs, locks,
    // cross-memory attach, the key tables and the peer registry); memory keys and regions: the key table, registrations, every access to their bytes;
    // and the cores of the domain objects (`mr::domain`: a context's, a PD's, an XRC
    // domain's), which regions, windows and everything above hold instead of the handles.
    ("memory", &["shm", "shm::fifo", "shm::lock", "shm::cma", "shm::counters", "shm::stats", "shm::latency", "shm::tables", "shm::registry", "shm::view", "mr::endpoint", "mr::keys", "mr::pages", "mr::share", "mr::keyspace", "mr::access", "mr::proxy", "mr::domain", "mr::dm", "mr::native", "mr", "mw"]),
    // Completion and receive rings; work requests and QP attributes as data (a UD work
    // request carries an address vector, `rings::qp_attr`).
    ("rings", &["rings", "rings::wc", "rings::completion_ring", "rings::producer_gate", "rings::cq_segment", "rings::deferred_notify", "rings::qp_attr", "rings::wr", "rings::recv_ring", "rings::recv_count", "rings::kept", "rings::bounce", "rings::tag_list", "rings::tm_recv", "rings::staging"]),
    // The engine that executes work requests; what it asks of the device and the
    // transports, as traits they implement (`qp::device`).
    ("engine", &["engine", "qp::connect", "qp::state", "qp::sq", "qp::send", "qp::acks", "qp::local", "qp::transition", "qp::batch", "qp::device", "qp::native", "qp", "cq", "cq::ex", "cq::channel", "cq::native", "event", "qp::srq", "progress", "busy_poll"]),
    // Transports: how a request reaches its responder.
    ("transports", &["transport", "transport::grh", "transport::gsi", "transport::mcast_net", "transport::net", "transport::host", "transport::deliver", "transport::link", "transport::respond", "transport::rendezvous", "transport::route", "transport::target", "transport::udp", "transport::udp::faults", "transport::udp::group", "transport::udp::relay", "transport::udp::rx", "transport::udp::socket", "transport::udp::takeover", "transport::udp::trace", "transport::dispatch", "mcast", "qp1"]),
    // The public verbs objects; and the fuzz harnesses' entry (`fuzzing`, feature
    // `fuzzing` only), which reaches into every layer below; and completions and events
    // awaited on a reactor (`aio`, feature `tokio` or `async-io`), over a context's objects;
    // owned buffers and the leases of the requests posted from them (`owned`); the same
    // verbs over a libibverbs loaded at run time (`rdma_core`, feature `rdma-core`), which
    // takes the soft API's value types, and the choice of a device between the two
    // (`backend`).
    ("verbs", &["device", "backend", "context", "pd", "ah", "xrcd", "fuzzing", "aio", "typed", "typed::wr", "owned", "owned::buf", "owned::region", "owned::lease", "c_abi", "rdma_core", "rdma_core::ah", "rdma_core::channel", "rdma_core::context", "rdma_core::conv", "rdma_core::cq", "rdma_core::device", "rdma_core::library", "rdma_core::life", "rdma_core::mr", "rdma_core::pd", "rdma_core::qp", "rdma_core::wr"]),
];

/// Upward imports still present (importer, imported). See the module docs: a ratchet,
/// now empty.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The C layer's sources (`rverbs-capi`), checked for import loops only.
fn capi_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../rverbs-capi/src")
}

/// Every source file of the crate whose sources are in `root`, as (module path, file).
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = root.to_path_buf();
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut map = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        map.insert(parts.join("::"), f);
    }
    map
}

/// The paths one file names inside the crate, with the line of each.
#[derive(Default)]
struct Refs {
    /// Path segments, already made absolute (`crate` removed), and the line.
    paths: Vec<(Vec<String>, usize)>,
    /// The module the file is (for `super` and `self`): `qp` for both `qp.rs` and
    /// `qp/mod.rs`, whose `super` is the crate root.
    here: Vec<String>,
}

impl Refs {
    fn absolute(&self, segs: &[String]) -> Option<Vec<String>> {
        let first = segs.first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "super" => {
                let mut b = self.here.clone();
                b.pop();
                b
            }
            "self" => self.here.clone(),
            _ => return None,
        };
        let mut rest = &segs[1..];
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn add(&mut self, segs: Vec<String>, line: usize) {
        if let Some(p) = self.absolute(&segs) {
            self.paths.push((p, line));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut s = prefix.clone();
                if n.ident != "self" {
                    s.push(n.ident.to_string());
                }
                self.add(s, line);
            }
            syn::UseTree::Rename(r) => {
                let mut s = prefix.clone();
                if r.ident != "self" {
                    s.push(r.ident.to_string());
                }
                self.add(s, line);
            }
            syn::UseTree::Glob(_) => self.add(prefix.clone(), line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, line);
                }
            }
        }
    }

    /// Paths inside macro arguments (`tracing::debug!(…crate::x…)`), found token by token.
    fn tokens(&mut self, ts: proc_macro2::TokenStream) {
        let toks: Vec<proc_macro2::TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                proc_macro2::TokenTree::Group(g) => self.tokens(g.stream()),
                proc_macro2::TokenTree::Ident(id) if *id == "crate" || *id == "super" => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < toks.len() + 1 {
                        let (Some(proc_macro2::TokenTree::Punct(a)), Some(proc_macro2::TokenTree::Punct(b)), Some(proc_macro2::TokenTree::Ident(n))) =
                            (toks.get(j), toks.get(j + 1), toks.get(j + 2))
                        else {
                            break;
                        };
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segs.push(n.to_string());
                        j += 3;
                    }
                    self.add(segs, line);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == "test"))
    })
}

impl<'ast> Visit<'ast> for Refs {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if is_cfg_test(attrs) {
            return;
        }
        syn::visit::visit_item(self, i);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = u.use_token.span.start().line;
        self.use_tree(&mut Vec::new(), &u.tree, line);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p.segments.first().map_or(0, |s| s.ident.span().start().line);
        self.add(segs, line);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }

    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {
        // `pub(crate)` / `pub(super)` name a visibility, not a dependency.
    }
}

/// The module a path lands in: its longest prefix that is a file module. Names the crate
/// root re-exports (`crate::Error`) are followed to the module they come from.
fn resolve(path: &[String], mods: &BTreeMap<String, PathBuf>, reexports: &BTreeMap<String, Vec<String>>) -> Option<String> {
    if path.len() == 1 {
        if let Some(target) = reexports.get(&path[0]) {
            return resolve(target, mods, reexports);
        }
    }
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|c| mods.contains_key(c))
}

/// `pub use a::b::Name;` in lib.rs: Name → [a, b, Name].
fn root_reexports(root: &Path) -> BTreeMap<String, Vec<String>> {
    let file = syn::parse_file(&std::fs::read_to_string(root.join("lib.rs")).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    fn walk(prefix: &mut Vec<String>, t: &syn::UseTree, out: &mut BTreeMap<String, Vec<String>>) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(prefix, &p.tree, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut s = prefix.clone();
                s.push(n.ident.to_string());
                out.insert(n.ident.to_string(), s);
            }
            syn::UseTree::Rename(r) => {
                let mut s = prefix.clone();
                s.push(r.ident.to_string());
                out.insert(r.rename.to_string(), s);
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|i| walk(prefix, i, out)),
            syn::UseTree::Glob(_) => {}
        }
    }
    for item in &file.items {
        if let syn::Item::Use(u) = item {
            walk(&mut Vec::new(), &u.tree, &mut out);
        }
    }
    out
}

/// One dependency: importer, imported, the line of the first place it is named.
type Edges = BTreeMap<(String, String), usize>;

fn dependencies() -> (Edges, BTreeMap<String, PathBuf>) {
    dependencies_in(&src_dir())
}

/// The dependencies between the modules of the crate whose sources are in `root`.
fn dependencies_in(root: &Path) -> (Edges, BTreeMap<String, PathBuf>) {
    let mods = modules(root);
    let reexports = root_reexports(root);
    let mut edges = Edges::new();
    for (name, file) in &mods {
        if name.is_empty() {
            continue; // lib.rs: the facade that re-exports every layer.
        }
        let src = std::fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let here: Vec<String> = name.split("::").map(str::to_owned).collect();
        let mut refs = Refs { here, ..Refs::default() };
        refs.visit_file(&ast);
        for (path, line) in refs.paths {
            let Some(target) = resolve(&path, &mods, &reexports) else { continue };
            if target != *name && !target.is_empty() {
                edges.entry((name.clone(), target)).or_insert(line);
            }
        }
    }
    (edges, mods)
}

fn layer_of() -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for (i, (_, mods)) in LAYERS.iter().enumerate() {
        for &name in mods.iter() {
            assert!(m.insert(name, i).is_none(), "{name} is listed in two layers");
        }
    }
    m
}

#[test]
fn every_module_has_a_layer() {
    let layers = layer_of();
    let (_, mods) = dependencies();
    let missing: Vec<&String> = mods.keys().filter(|m| !m.is_empty() && !layers.contains_key(m.as_str())).collect();
    assert!(missing.is_empty(), "give these modules a layer in tests/architecture.rs: {missing:?}");
    let stale: Vec<&&str> = layers.keys().filter(|m| !mods.contains_key(**m)).collect();
    assert!(stale.is_empty(), "these modules no longer exist; remove them from LAYERS: {stale:?}");
}

/// Folders that still hold files of two layers (folder, its layers lowest first): a
/// ratchet like [`KNOWN_UPWARD`]. A folder not listed must hold one layer's files only,
/// and an entry that is no longer true fails, so the list only shrinks. It is empty:
/// every folder is one layer (the rings that `cq/` and `qp/` held are in `rings/`); keep
/// it so.
const FOLDERS_ACROSS_LAYERS: &[(&str, &[&str])] = &[];

#[test]
fn every_folder_lies_in_one_layer() {
    let layers = layer_of();
    let mut folders: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for (module, &layer) in &layers {
        // `qp` is `src/qp/mod.rs`: a folder's own module belongs to it.
        let folder = match module.rsplit_once("::") {
            Some((parent, _)) => parent,
            None if src_dir().join(module).is_dir() => module,
            None => continue,
        };
        folders.entry(folder).or_default().insert(layer);
    }
    let known: BTreeMap<&str, &[&str]> = FOLDERS_ACROSS_LAYERS.iter().copied().collect();
    let mut problems = Vec::new();
    for (folder, spans) in &folders {
        let names: Vec<&str> = spans.iter().map(|&l| LAYERS[l].0).collect();
        match known.get(folder) {
            Some(expected) if names != *expected => {
                problems.push(format!("src/{folder}/ now spans {names:?}, not {expected:?}: update FOLDERS_ACROSS_LAYERS"))
            }
            None if names.len() > 1 => problems.push(format!("src/{folder}/ holds files of layers {names:?}: one folder, one layer")),
            _ => {}
        }
    }
    for folder in known.keys() {
        if !folders.contains_key(folder) {
            problems.push(format!("src/{folder}/ no longer exists: remove it from FOLDERS_ACROSS_LAYERS"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let layers = layer_of();
    let (edges, mods) = dependencies();
    let known: BTreeSet<(&str, &str)> = KNOWN_UPWARD.iter().copied().collect();
    let mut upward = Vec::new();
    let mut found_known = BTreeSet::new();
    for ((from, to), line) in &edges {
        let (Some(&lf), Some(&lt)) = (layers.get(from.as_str()), layers.get(to.as_str())) else { continue };
        if lt > lf {
            if known.contains(&(from.as_str(), to.as_str())) {
                found_known.insert((from.as_str(), to.as_str()));
            } else {
                upward.push(format!("src/{}:{line}: `{from}` ({}) imports `{to}` ({})", mods[from].strip_prefix(src_dir()).unwrap().display(), LAYERS[lf].0, LAYERS[lt].0));
            }
        }
    }
    if std::env::var_os("RVERBS_ARCH_LIST").is_some() {
        for (from, to) in edges.keys() {
            let (Some(&lf), Some(&lt)) = (layers.get(from.as_str()), layers.get(to.as_str())) else { continue };
            if lt > lf {
                println!("    (\"{from}\", \"{to}\"),");
            }
        }
    }
    assert!(upward.is_empty(), "upward imports (a lower layer must not depend on a higher one):\n{}", upward.join("\n"));
    let gone: Vec<_> = known.difference(&found_known).collect();
    assert!(gone.is_empty(), "these KNOWN_UPWARD entries are gone; remove them from the list: {gone:?}");
}

/// The import loops of graph `edges`: each strongly connected set of two or more nodes,
/// sorted (a loop of any length, not only two nodes importing each other).
fn loops(edges: &BTreeSet<(String, String)>) -> BTreeSet<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(n) = todo.pop() {
            for &m in next.get(n).into_iter().flatten() {
                if seen.insert(m) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut out = BTreeSet::new();
    for (&n, r) in &reaches {
        let group: Vec<String> =
            r.iter().filter(|&&m| reaches.get(m).is_some_and(|back| back.contains(n))).map(|m| m.to_string()).collect();
        if group.len() > 1 {
            out.insert(group);
        }
    }
    out
}

#[test]
fn the_layers_form_no_loop() {
    // With no upward import, a loop can only run inside one layer: the top-level
    // components of each layer must import each other without a cycle of any length.
    let layers = layer_of();
    let (edges, _) = dependencies();
    let pairs = component_edges(&edges, |from, to| {
        matches!((layers.get(from), layers.get(to)), (Some(lf), Some(lt)) if lf == lt)
    });
    let found = loops(&pairs);
    assert!(found.is_empty(), "components of one layer that import each other in a loop: {found:?}");
}

#[test]
fn the_udp_link_stands_below_the_transports_that_use_it() {
    // Issue 21, file by file: the UDP link (`transport/udp/`: sockets, receive checks,
    // relay, takeover, faults, capture, group sockets) imports no other transport file —
    // where a received packet goes is decided above it (`transport::dispatch`) — and its
    // files import each other without a loop.
    let in_udp = |m: &str| m == "transport::udp" || m.starts_with("transport::udp::");
    let (edges, mods) = dependencies();
    assert!(mods.keys().filter(|m| in_udp(m)).count() > 5, "the UDP link's files were not read: {mods:?}");
    let up: Vec<String> = edges
        .iter()
        .filter(|((from, to), _)| in_udp(from) && to.starts_with("transport") && !in_udp(to))
        .map(|((from, to), line)| format!("src/{}:{line}: `{from}` imports `{to}`", mods[from].strip_prefix(src_dir()).unwrap().display()))
        .collect();
    assert!(up.is_empty(), "the UDP link imports a transport above it:\n{}", up.join("\n"));
    let inside: BTreeSet<(String, String)> = edges.keys().filter(|(from, to)| in_udp(from) && in_udp(to)).cloned().collect();
    assert!(!inside.is_empty(), "no import between the UDP link's files was seen");
    let found = loops(&inside);
    assert!(found.is_empty(), "files of the UDP link that import each other in a loop: {found:?}");
}

#[test]
fn the_c_layer_has_no_import_loop() {
    // rverbs-capi has no layers of its own (each file translates one family of C calls),
    // but its top-level modules must import each other without a loop: the object types
    // and shared helpers (`context`, `wrlist`, ...) below the op modules, `device` (which
    // fills the ops tables with every op module's functions) above them.
    let (edges, _) = dependencies_in(&capi_src_dir());
    let pairs = component_edges(&edges, |_, _| true);
    assert!(pairs.len() > 20, "the C layer's modules were not read: {pairs:?}");
    let found = loops(&pairs);
    assert!(found.is_empty(), "rverbs-capi modules that import each other in a loop: {found:?}");
}

/// The connection manager's sources (`rverbs-cm`).
fn cm_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../rverbs-cm/src")
}

/// rverbs-cm's layers, lowest first, by module path prefix: the values every layer names
/// (the id as a value, its state, events, rules and errors, the messages, the listener
/// table, addresses), the engine (the sans-I/O handshake and its shell), the API on top
/// (the verbs on an id, the Rust helpers).
const CM_LAYERS: &[(&str, &[&str])] = &[
    ("values", &["cm_state", "handle", "table", "mad", "event", "rule", "error", "channel", "addr", "wait"]),
    // rdma_core: the ids, channels and helper steps over librdmacm (feature `rdma-core`),
    // beside the engine: the RAII helpers (`conn`) dispatch to it.
    ("engine", &["engine", "rdma_core"]),
    // objects: the public CmId, EventChannel and Event over either connection manager.
    ("api", &["id", "objects", "conn", "aio", "stream"]),
];

fn cm_layer(module: &str) -> usize {
    let top = module.split("::").next().unwrap_or("");
    CM_LAYERS
        .iter()
        .position(|(_, mods)| mods.contains(&top))
        .unwrap_or_else(|| panic!("give rverbs-cm's module `{module}` a layer in CM_LAYERS"))
}

#[test]
fn the_connection_manager_has_no_import_loop_and_no_upward_import_file_by_file() {
    // Issue 21: file by file (submodules too), not only between top-level modules.
    let (edges, mods) = dependencies_in(&cm_src_dir());
    assert!(edges.len() > 30, "rverbs-cm's files were not read: {edges:?}");
    let files: BTreeSet<(String, String)> = edges.keys().cloned().collect();
    let found = loops(&files);
    assert!(found.is_empty(), "rverbs-cm files that import each other in a loop: {found:?}");
    let upward: Vec<String> = edges
        .iter()
        .filter(|((from, to), _)| cm_layer(to) > cm_layer(from))
        .map(|((from, to), line)| format!("{}:{line}: `{from}` imports `{to}`", mods[from].display()))
        .collect();
    assert!(upward.is_empty(), "rverbs-cm imports that run up a layer:\n{}", upward.join("\n"));
    for m in mods.keys().filter(|m| !m.is_empty()) {
        cm_layer(m);
    }
}

/// The imports between different top-level modules ("components") among `edges` whose
/// (importer, imported) modules pass `keep`, as (component, component).
fn component_edges(edges: &Edges, keep: impl Fn(&str, &str) -> bool) -> BTreeSet<(String, String)> {
    let comp = |m: &str| m.split("::").next().unwrap_or("").to_owned();
    edges
        .keys()
        .filter(|(from, to)| comp(from) != comp(to) && keep(from, to))
        .map(|(from, to)| (comp(from), comp(to)))
        .collect()
}

/// The loop finder itself: a loop of three is found, a chain is not a loop.
#[test]
fn the_loop_finder_sees_loops_of_any_length() {
    let g = |e: &[(&str, &str)]| e.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<BTreeSet<_>>();
    let three = loops(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(three.into_iter().collect::<Vec<_>>(), [vec!["a".to_string(), "b".into(), "c".into()]]);
    assert!(loops(&g(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
}

/// The checker itself: an upward import in a synthetic file is found.
#[test]
fn the_checker_sees_imports_in_every_form() {
    let src = r#"
        use crate::qp::{sq::SendQueue, Qp};
        use super::device;
        fn f() { let _ = crate::transport::host::run(); tracing::debug!("{}", crate::progress::x()); }
        #[cfg(test)] mod tests { use crate::context::Context; }
    "#;
    let ast = syn::parse_file(src).unwrap();
    let mut refs = Refs { here: vec!["mr".into(), "keys".into()], ..Refs::default() };
    refs.visit_file(&ast);
    let names: BTreeSet<String> = refs.paths.iter().map(|(p, _)| p.join("::")).collect();
    for want in ["qp::sq::SendQueue", "qp::Qp", "mr::device", "transport::host::run", "progress::x"] {
        assert!(names.contains(want), "{want} not found in {names:?}");
    }
    assert!(!names.iter().any(|n| n.starts_with("context")), "test code counted: {names:?}");

    // In `qp/mod.rs` (module `qp`), `super` is the crate root.
    let ast = syn::parse_file("use super::device::DeviceInner;").unwrap();
    let mut refs = Refs { here: vec!["qp".into()], ..Refs::default() };
    refs.visit_file(&ast);
    assert_eq!(refs.paths.iter().map(|(p, _)| p.join("::")).collect::<Vec<_>>(), ["device::DeviceInner"]);
}

// ---------------------------------------------------------------------------------------
// The public surface (issue 21): one path per public item. The verbs objects, their
// parameters and the verbs enums are re-exported at the crate root from private modules;
// the only public modules are the namespaces below, each for a reason.
// ---------------------------------------------------------------------------------------

/// The modules `rverbs` makes public (declared `pub mod` in lib.rs, or a module
/// re-exported there), each with the reason it is a namespace of its own. Every other
/// module is private: what it offers the world is re-exported at the root, once.
const PUBLIC_MODULES: &[(&str, &str)] = &[
    ("limits", "the limits the device reports and enforces, as ibv_query_device(3) and ibv_query_port(3) list them"),
    ("cap_flags", "the capability bits of DeviceAttr and PortAttr, raw words as in struct ibv_device_attr (re-exported from the private `device`)"),
    ("vendor_err", "the vendor_err codes of error completions and their meanings (re-exported from rverbs-proto)"),
    ("fault_plan", "the fault plan of the verbs (RVERBS_FAULTS fail= and wc= items, or installed from Rust) and the injections it made"),
    ("clock", "the device clock of completion timestamps (ibv_create_cq_ex(3), ibv_query_rt_values_ex(3))"),
    ("sanitize", "the verbs sanitizer's switch and its findings as values (docs/sanitizer.md): re-exported from the private `sanitizer`, whose hooks the verbs call"),
    ("capi_support", "what rverbs-capi and rverbs-cm need beyond the verbs API: the one, documented public path to those internals"),
    ("aio", "completions and asynchronous events as futures and streams on tokio's reactor (feature `tokio`) or async-io's (feature `async-io`)"),
    ("typed", "queue pairs with the transport in the type and work requests by opcode family (compile-time checks of ibv_post_send(3)'s rules)"),
    ("owned", "registered buffers the region owns and gives back, and the leases of the work requests posted from them (zero copy without unsafe; docs/rust-api.md, Owned buffers)"),
    ("rdma_core", "the rdma-core backend (feature `rdma-core`): the verbs objects over any libibverbs device, loaded at run time, which the public types dispatch to for a device of Backend::RdmaCore (docs/rdma-core-backend.md)"),
    ("c_abi", "the C structs of <infiniband/verbs.h> to and from the value types, both ways (feature `c-abi`): the one home of the drop-in C library's and the rdma-core backend's conversions"),
    ("fuzzing", "the fuzz harnesses' entry into private code: feature `fuzzing` only, hidden from the documentation"),
];

/// What is wrong with the public surface a lib.rs declares: a public module not in
/// [`PUBLIC_MODULES`] or without a doc comment, an item re-exported from a public module
/// (two paths), a glob re-export, an item re-exported twice, and an entry of
/// `PUBLIC_MODULES` that is not public. `module_doc` answers whether the file of
/// `pub mod name;` opens with a module doc.
fn surface_problems(lib_rs: &str, module_doc: &dyn Fn(&str) -> bool) -> Vec<String> {
    let file = syn::parse_file(lib_rs).expect("lib.rs parses");
    let allowed: BTreeMap<&str, &str> = PUBLIC_MODULES.iter().copied().collect();
    let is_pub = |v: &syn::Visibility| matches!(v, syn::Visibility::Public(_));
    let has_doc = |attrs: &[syn::Attribute]| attrs.iter().any(|a| a.path().is_ident("doc"));
    let mut problems = Vec::new();
    // The crate root's modules and whether each is public.
    let mut root_mods: BTreeMap<String, bool> = BTreeMap::new();
    for item in &file.items {
        if let syn::Item::Mod(m) = item {
            root_mods.insert(m.ident.to_string(), is_pub(&m.vis));
        }
    }
    let mut public: BTreeSet<String> = root_mods.iter().filter(|(_, p)| **p).map(|(n, _)| n.clone()).collect();
    for item in &file.items {
        let syn::Item::Mod(m) = item else { continue };
        let name = m.ident.to_string();
        if !is_pub(&m.vis) {
            continue;
        }
        if !allowed.contains_key(name.as_str()) {
            problems.push(format!("`pub mod {name}` is not one of PUBLIC_MODULES: make it private and re-export its items at the root, or add it there with its reason"));
        }
        let documented = if m.content.is_some() { has_doc(&m.attrs) } else { module_doc(&name) };
        if !documented {
            problems.push(format!("public module `{name}` has no module doc saying what it is for"));
        }
    }
    // Every `pub use`, at the root and inside the root's inline public modules: (path of
    // the source, the re-exporting module).
    fn uses(prefix: &mut Vec<String>, t: &syn::UseTree, out: &mut Vec<Vec<String>>, globs: &mut Vec<String>) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                uses(prefix, &p.tree, out, globs);
                prefix.pop();
            }
            syn::UseTree::Name(n) => out.push(prefix.iter().cloned().chain([n.ident.to_string()]).collect()),
            syn::UseTree::Rename(r) => out.push(prefix.iter().cloned().chain([r.ident.to_string()]).collect()),
            syn::UseTree::Glob(_) => globs.push(prefix.join("::")),
            syn::UseTree::Group(g) => g.items.iter().for_each(|i| uses(prefix, i, out, globs)),
        }
    }
    fn collect(items: &[syn::Item], within: &str, out: &mut Vec<(Vec<String>, String)>, globs: &mut Vec<String>) {
        for item in items {
            match item {
                syn::Item::Use(u) if matches!(u.vis, syn::Visibility::Public(_)) => {
                    let mut paths = Vec::new();
                    uses(&mut Vec::new(), &u.tree, &mut paths, globs);
                    out.extend(paths.into_iter().map(|p| (p, within.to_owned())));
                }
                syn::Item::Mod(m) if matches!(m.vis, syn::Visibility::Public(_)) => {
                    if let Some((_, inner)) = &m.content {
                        let here = if within.is_empty() { m.ident.to_string() } else { format!("{within}::{}", m.ident) };
                        collect(inner, &here, out, globs);
                    }
                }
                _ => {}
            }
        }
    }
    let mut reexports = Vec::new();
    let mut globs = Vec::new();
    collect(&file.items, "", &mut reexports, &mut globs);
    for g in globs {
        problems.push(format!("`pub use {g}::*`: a glob re-export has no deliberate list of items"));
    }
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (path, within) in &reexports {
        let at = if within.is_empty() { "the root".to_owned() } else { format!("`{within}`") };
        // The path inside this crate, if it is one (`crate::x::Y` or, at the root, `x::Y`).
        let inner: Option<&[String]> = match path.first().map(String::as_str) {
            Some("crate") => Some(&path[1..]),
            Some(first) if within.is_empty() && root_mods.contains_key(first) => Some(&path[..]),
            _ => None,
        };
        if let Some(inner) = inner {
            if inner.len() > 1 && root_mods.get(&inner[0]) == Some(&true) {
                problems.push(format!(
                    "{at} re-exports `{}`, which is public already as `rverbs::{}`: two paths to one item",
                    path.join("::"),
                    inner.join("::")
                ));
            }
        }
        let source = path.join("::").trim_start_matches("crate::").to_owned();
        if let Some(first) = seen.insert(source.clone(), at.clone()) {
            problems.push(format!("`{source}` is re-exported twice, at {first} and at {at}"));
        }
        if within.is_empty() {
            public.insert(path.last().unwrap().clone());
        }
    }
    for (name, _) in PUBLIC_MODULES {
        if !public.contains(*name) {
            problems.push(format!("PUBLIC_MODULES lists `{name}`, which lib.rs does not make public"));
        }
    }
    problems
}

/// The crate's public surface has one path per item, and its public modules are the
/// deliberate namespaces of [`PUBLIC_MODULES`], each documented (ARCHITECTURE.md,
/// "Layers"; the crate root's doc lists them).
#[test]
fn the_public_surface_has_one_path_per_item() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let module_doc = |name: &str| {
        [format!("{name}.rs"), format!("{name}/mod.rs")]
            .iter()
            .filter_map(|f| std::fs::read_to_string(src_dir().join(f)).ok())
            .any(|src| src.trim_start().starts_with("//!"))
    };
    let mut problems = surface_problems(&lib, &module_doc);
    // A public module that is a file is a flat namespace: a `pub use` or `pub mod` in it
    // would give an item a second path (`device` once re-exported `limits` as
    // `rverbs::device::limits`). The fuzzing entry is exempt: it is no part of the API.
    for (name, _) in PUBLIC_MODULES.iter().filter(|(n, _)| *n != "fuzzing") {
        let Ok(src) = std::fs::read_to_string(src_dir().join(format!("{name}.rs"))) else { continue };
        let ast = syn::parse_file(&src).unwrap();
        for item in &ast.items {
            let nested = match item {
                syn::Item::Use(u) => matches!(u.vis, syn::Visibility::Public(_)),
                syn::Item::Mod(m) => matches!(m.vis, syn::Visibility::Public(_)) && !is_cfg_test(&m.attrs),
                _ => false,
            };
            if nested {
                problems.push(format!("the public module `{name}` ({name}.rs) has a `pub use` or `pub mod`: a second path"));
            }
        }
    }
    assert!(problems.is_empty(), "the public surface of rverbs:\n{}", problems.join("\n"));
    // The crate doc names every public module, so that `cargo doc` opens on the surface;
    // a module of an optional feature (`aio`, `rdma_core`, `c_abi`) is named without a link, which
    // would be broken in the documentation built without the feature.
    let crate_doc: String = lib.lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    for (name, _) in PUBLIC_MODULES.iter().filter(|(n, _)| *n != "fuzzing") {
        let named = if matches!(*name, "aio" | "rdma_core" | "c_abi") { format!("`{name}` (feature") } else { format!("[`{name}`]") };
        assert!(crate_doc.contains(&named), "the crate doc of lib.rs does not list the public module `{name}`");
    }
}

/// The surface checker itself: a public module outside the list, an item re-exported
/// from a public module, a glob, a duplicate and a list entry that is not public are
/// each found; a private module re-exported at the root is not a problem.
#[test]
fn the_surface_checker_sees_every_second_path() {
    let bad = r#"
        pub mod qp;
        pub mod limits;
        mod cq;
        mod device;
        pub use qp::Qp;
        pub use cq::{Cq, CqInit};
        pub use cq::*;
        pub use device::cap_flags;
        pub mod capi_support {
            //! Doc.
            pub use crate::limits::MAX_SGE;
            pub use crate::cq::Cq;
        }
    "#;
    let problems = surface_problems(bad, &|name| name != "qp");
    let has = |what: &str| problems.iter().any(|p| p.contains(what));
    assert!(has("`pub mod qp` is not one of PUBLIC_MODULES"), "{problems:?}");
    assert!(has("public module `qp` has no module doc"), "{problems:?}");
    assert!(has("re-exports `qp::Qp`, which is public already as `rverbs::qp::Qp`"), "{problems:?}");
    assert!(has("re-exports `crate::limits::MAX_SGE`, which is public already"), "{problems:?}");
    assert!(has("`pub use cq::*`"), "{problems:?}");
    assert!(has("`cq::Cq` is re-exported twice"), "{problems:?}");
    assert!(has("lists `vendor_err`, which lib.rs does not make public"), "{problems:?}");
    assert!(!problems.iter().any(|p| p.contains("CqInit") || p.contains("`cap_flags`")), "{problems:?}");
}

// ---------------------------------------------------------------------------------------
// The documentation the code cites (issue 21): ARCHITECTURE.md is a short guide, the
// topics are pages of docs/, and every link and citation between them resolves.
// ---------------------------------------------------------------------------------------

/// The repository's root directory.
fn repo_root() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")).expect("the repository root")
}

/// Every file under `dir` whose name ends with one of `exts`, skipping build output,
/// version control and fuzz inputs (`target*`, dot-directories, `corpus`, `regressions`).
fn files_under(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries {
        let p = e.expect("dir entry").path();
        let name = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if p.is_dir() {
            let skip = name.starts_with('.') || name.starts_with("target") || name == "corpus" || name == "regressions";
            if !skip {
                files_under(&p, exts, out);
            }
        } else if exts.iter().any(|x| name.ends_with(x)) {
            out.push(p);
        }
    }
}

/// GitHub's anchor for a heading's text: the rendered text (code spans, emphasis and
/// link targets removed) in lower case, every character that is not a letter, a digit,
/// `_`, `-` or a space dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // A link keeps its text: `[text](target)` renders as `text`.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| after[close..].find(')').map(|end| (close, close + end))) {
            Some((close, end)) => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of a Markdown text outside fenced code blocks, with their line numbers.
fn prose_lines(md: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// The headings of a Markdown text, as written (`## 1.2 Title` gives `1.2 Title`).
fn headings(md: &str) -> Vec<String> {
    prose_lines(md)
        .into_iter()
        .filter_map(|(_, l)| {
            let t = l.trim_start_matches('#');
            (t.len() < l.len() && l.len() - t.len() <= 6 && t.starts_with(' ')).then(|| t.trim().to_owned())
        })
        .collect()
}

/// The anchors GitHub gives the headings of a Markdown text (a repeated slug gets `-1`,
/// `-2`, ...).
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for h in headings(md) {
        let s = slug(&h);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a Markdown text, outside code
/// blocks and code spans, with their line numbers.
fn link_targets(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(md) {
        // Drop code spans: `a](b)` inside backticks is not a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push((n, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// What is wrong with the relative links of the Markdown file `file` (text `md`): a
/// target file that does not exist, or an `#anchor` its Markdown target does not have.
fn broken_links(file: &Path, md: &str, read: &dyn Fn(&Path) -> Option<String>) -> Vec<String> {
    let mut bad = Vec::new();
    for (n, target) in link_targets(md) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let dest = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
        let Some(text) = read(&dest) else {
            if !dest.exists() {
                bad.push(format!("{}:{n}: {target}: no such file", file.display()));
            }
            continue;
        };
        if !anchor.is_empty() && dest.extension().is_some_and(|x| x == "md") && !anchors(&text).contains(anchor) {
            bad.push(format!("{}:{n}: {target}: no heading with that anchor", file.display()));
        }
    }
    bad
}

fn read_file(p: &Path) -> Option<String> {
    if p.is_file() { std::fs::read_to_string(p).ok() } else { None }
}

/// Every relative link and `#anchor` of the repository's Markdown (README.md,
/// ARCHITECTURE.md, TESTING.md, BENCHMARKS.md, docs/*.md and the tests' READMEs) resolves.
#[test]
fn documentation_links_resolve() {
    let mut files = Vec::new();
    files_under(&repo_root(), &[".md"], &mut files);
    let root_docs = ["README.md", "ARCHITECTURE.md", "TESTING.md", "BENCHMARKS.md"];
    for name in root_docs {
        assert!(files.contains(&repo_root().join(name)), "{name} not found among {files:?}");
    }
    let mut bad = Vec::new();
    let mut links = 0;
    for f in &files {
        let md = std::fs::read_to_string(f).unwrap();
        links += link_targets(&md).len();
        bad.extend(broken_links(f, &md, &read_file));
    }
    assert!(links > 100, "the links were not read: {links} in {files:?}");
    assert!(bad.is_empty(), "broken links in the documentation:\n{}", bad.join("\n"));
}

/// The link checker itself: anchors as GitHub makes them, links in code ignored, a
/// missing file and a missing anchor both found.
#[test]
fn the_link_checker_sees_missing_files_and_anchors() {
    assert_eq!(slug("Registry (`shm::registry`)"), "registry-shmregistry");
    assert_eq!(slug("Active MTU (`limits::port_active_mtu`)"), "active-mtu-limitsport_active_mtu");
    assert_eq!(slug("The active MTU and a network connection's MTU"), "the-active-mtu-and-a-network-connections-mtu");
    assert_eq!(slug("What hardening costs (issue 20; 2026-11-29, 11:05–11:15 UTC)"), "what-hardening-costs-issue-20-2026-11-29-11051115-utc");
    assert_eq!(slug("See [the page](x.md) now"), "see-the-page-now");
    let page = "# Title\n\n## Part\n\n## Part\n\n```\n## not a heading\n```\n";
    assert_eq!(anchors(page), BTreeSet::from(["title".into(), "part".into(), "part-1".into()]));
    let md = "# Here\n[a](other.md#part-1) [b](other.md#gone) [c](missing.md) `[d](missing.md)`\n\
              [e](#here) [f](https://example.invalid/x) [g](#nowhere)\n```\n[h](missing.md)\n```\n";
    let read = |p: &Path| match p.file_name()?.to_str()? {
        "other.md" => Some(page.to_owned()),
        "this.md" => Some(md.to_owned()),
        _ => None,
    };
    let bad = broken_links(Path::new("/nonexistent/this.md"), md, &read);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].contains("other.md#gone") && bad[1].contains("missing.md") && bad[2].contains("#nowhere"), "{bad:?}");
}

/// ARCHITECTURE.md is the guide a newcomer reads in a quarter of an hour; the details are
/// pages of docs/, each of which it names.
#[test]
fn architecture_md_is_a_short_guide_to_the_pages() {
    let arch = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).unwrap();
    let lines = arch.lines().count();
    assert!(lines <= 400, "ARCHITECTURE.md has {lines} lines; move details to a page of docs/");
    let mut pages = Vec::new();
    files_under(&repo_root().join("docs"), &[".md"], &mut pages);
    assert!(pages.len() >= 10, "docs/ pages not found: {pages:?}");
    for p in pages {
        let name = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
        assert!(arch.contains(&format!("]({name})")), "ARCHITECTURE.md does not link {name}");
    }
}

/// The layer diagram of ARCHITECTURE.md names every module of [`LAYERS`] (`a::{b,c}`
/// stands for `a::b` and `a::c`).
#[test]
fn the_layer_diagram_names_every_module() {
    let arch = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).unwrap();
    let layers = arch.split("\n## Layers\n").nth(1).expect("ARCHITECTURE.md has a \"Layers\" section");
    let diagram = layers.split("```").nth(1).expect("the Layers section has a diagram");
    let mut named = BTreeSet::new();
    for word in diagram.split_whitespace() {
        match word.split_once("::{") {
            Some((base, inner)) => {
                for leaf in inner.trim_end_matches(|c| c != '}').trim_end_matches('}').split(',') {
                    named.insert(format!("{base}::{leaf}"));
                }
            }
            None => {
                named.insert(word.to_owned());
            }
        }
    }
    let missing: Vec<&str> = LAYERS.iter().flat_map(|(_, ms)| ms.iter().copied()).filter(|m| !named.contains(*m)).collect();
    assert!(missing.is_empty(), "modules of LAYERS missing from ARCHITECTURE.md's layer diagram: {missing:?}");
}

/// Citations of the documentation in code, scripts, tests and docs name pages that
/// exist: `docs/<page>.md`, a section `§N.M` of a numbered page, a heading quoted after
/// the page (`docs/<page>.md, "Heading"` or `("Heading")`); and no citation names a
/// section number of ARCHITECTURE.md, which has none.
#[test]
fn cited_pages_and_sections_exist() {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in ["crates", "tests", "scripts", "fuzz", "docs", ".ci"] {
        files_under(&root.join(dir), &[".rs", ".sh", ".py", ".c", ".h", ".bash", ".md", ".toml", "run"], &mut files);
    }
    for top in ["README.md", "ARCHITECTURE.md", "TESTING.md", "BENCHMARKS.md"] {
        files.push(root.join(top));
    }
    let mut bad = Vec::new();
    let mut cited = 0;
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", f.strip_prefix(&root).unwrap_or(f).display(), n + 1);
            // (Spelled in pieces so that this line does not cite itself.)
            if line.contains(concat!("ARCHITECTURE", ".md §")) || line.contains(concat!("ARCHITECTURE", " §")) {
                bad.push(format!("{at}: ARCHITECTURE.md has no numbered sections: {line}"));
            }
            for page in ["docs/", "ARCHITECTURE.md", "TESTING.md"] {
                let mut rest = line;
                while let Some(i) = rest.find(page) {
                    let tail = &rest[i..];
                    rest = &rest[i + page.len()..];
                    // The page's path: up to the end of `.md`.
                    let Some(end) = tail.find(".md").map(|e| e + 3) else { continue };
                    let path = &tail[..end];
                    if path.contains(|c: char| !(c.is_ascii_alphanumeric() || "/-_.".contains(c))) {
                        continue;
                    }
                    // Only pages of this repository's root docs/ (a path such as
                    // tests/conformance/docs/ is not one).
                    let before = &line[..line.len() - tail.len()];
                    if before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '/' || c == '.') {
                        continue;
                    }
                    cited += 1;
                    let Some(target) = read_file(&root.join(path)) else {
                        bad.push(format!("{at}: {path}: no such page"));
                        continue;
                    };
                    let after = &tail[end..];
                    if let Some(sec) = after.strip_prefix(" §").or_else(|| after.strip_prefix(", §")) {
                        let num: String = sec.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
                        let num = num.trim_end_matches('.');
                        let found = headings(&target).iter().any(|h| h.strip_prefix(num).is_some_and(|r| r.starts_with(". ") || r.starts_with(' ')));
                        if !num.is_empty() && !found {
                            bad.push(format!("{at}: {path} has no section {num}"));
                        }
                    }
                    let quoted = after.strip_prefix(", \"").or_else(|| after.strip_prefix(" (\""));
                    if let Some(q) = quoted.and_then(|q| q.split_once('"')).map(|(q, _)| q) {
                        let found = headings(&target).iter().any(|h| h == q || h.starts_with(&format!("{q} (")));
                        if !found {
                            bad.push(format!("{at}: {path} has no heading \"{q}\""));
                        }
                    }
                }
            }
        }
    }
    assert!(cited > 100, "citations were not read: {cited}");
    assert!(bad.is_empty(), "citations of pages, sections or headings that do not exist:\n{}", bad.join("\n"));
}

#[test]
fn no_import_circle_of_more_than_two_files() {
    // Issue 21: file by file, every import counted (submodules, and a folder's `mod.rs`
    // as a file of its own), in the crate and in the connection manager, no set of files
    // imports each other in a loop of more than two (a pair that shares one concept, such
    // as a region's access and the memory proxy it falls back to, may).
    for (crate_name, root) in [("rverbs", src_dir()), ("rverbs-cm", cm_src_dir())] {
        let (edges, _) = dependencies_in(&root);
        let files: BTreeSet<(String, String)> = edges.keys().cloned().collect();
        let big: Vec<Vec<String>> = loops(&files).into_iter().filter(|l| l.len() > 2).collect();
        assert!(big.is_empty(), "{crate_name}: files that import each other in a loop of more than two: {big:?}");
    }
}
