//! Interoperability with C librpma: `tests/c/rpma_peer.c` (this crate's own program)
//! is compiled with the system C compiler against the installed `<librpma.h>` (Debian's
//! librpma 1.2), linked `-lrpma -libverbs -lrdmacm`, and run with `LD_LIBRARY_PATH` at
//! a directory holding the drop-in `libibverbs.so.1` (crate `rverbs-capi`) and
//! `librdmacm.so.1` (crate `rverbs-rdmacm`). Its modes cover what librpma's examples
//! exercise: read (the server's READ_SRC region descriptor in the accept's private
//! data), write + flush (and a native atomic write from Rust), send/recv, write with
//! immediate data, atomic write (aw), send with immediate data (simm, also 0 bytes),
//! a receive CQ (rcq), the same over one shared completion channel ending with a send
//! right before disconnecting (scch), a shared RQ serving clients in turn (srq) and one
//! epoll thread serving clients connected at the same time (multi). Every mode runs with a C server
//! and C clients (Debian's librpma on both sides of the drop-ins), with a C server and
//! Rust clients, and with a Rust server and C clients. The C peer checks everything it
//! receives and exits 1 with a FAIL line on any mismatch; a test wants exit status 0
//! and "ok <mode>" from every C process.
//!
//! Neither drop-in crate is a dependency of this one, so both are built here, once per
//! test run, into a target directory of their own under `CARGO_TARGET_TMPDIR` (a
//! `cargo build` in the target directory `cargo test` holds would wait for its lock),
//! as `crates/rverbs-capi/tests/cm_c_programs.rs` builds its shim. The C server prints
//! "listening" after rpma_ep_listen(3); clients connect only after the test read
//! that line. Every process runs under `timeout(1)`; missing compiler, header or
//! library = failure, never a skip.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::OnceLock;

use common::*;
use rverbs::{WcFlags, WcOpcode};
use rverbs_rpma::*;

const SERVER_TEXT: &[u8] = b"text of the C server\0";
const CLIENT_TEXT: &[u8] = b"text of the C client\0";
const RUST_SERVER_TEXT: &[u8] = b"text of the Rust server\0";
const RUST_CLIENT_TEXT: &[u8] = b"text of the Rust client\0";
const C_WORD: &[u8; 8] = b"C-atomic";
const RUST_WORD: &[u8; 8] = b"R-atomic";
const IMM: u32 = 0xC0FFEE;
const REGION: usize = 64;
/// The offset of the text behind the atomically written word (aw).
const AW_TEXT_OFF: usize = 8;
/// Ping-pongs per connection (rcq, srq).
const ROUNDS: u64 = 3;
/// The client's first value in rcq.
const RCQ_START: u64 = 7;
const RCQ_SIZE: u32 = 10;
/// Client `i` of srq sends `SRQ_BASE * (i + 1)` first.
const SRQ_BASE: u64 = 100;
/// The last message of scch, sent unsignaled right before disconnecting.
const DONE: u64 = u64::MAX;
/// Receives the srq server keeps posted to its shared RQ.
const SRQ_SLOTS: usize = 4;
/// The bytes of a multi client's name.
const NAME_SIZE: usize = 32;
/// Clients of the srq and multi servers.
const CLIENTS: usize = 3;

/// The drop-in directory: `libibverbs.so.1` and `librdmacm.so.1` (and their link-time
/// names) built from this workspace, or the prebuilt libraries that
/// `RVERBS_CAPI_CDYLIB` and `RVERBS_RDMACM_CDYLIB` name (scripts/test.sh names the ones
/// its workspace build made, instead of a second build of the whole stack here).
fn dropin() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let (verbs, cm, dir) = match (std::env::var_os("RVERBS_CAPI_CDYLIB"), std::env::var_os("RVERBS_RDMACM_CDYLIB")) {
            (Some(verbs), Some(cm)) => {
                let dir = tmp.join(format!("rpma-dropin-given-{:016x}", key(&[verbs.as_encoded_bytes(), cm.as_encoded_bytes()])));
                (PathBuf::from(verbs), PathBuf::from(cm), dir)
            }
            _ => {
                let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
                let target = tmp.join("rpma-dropin");
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let out = Command::new(cargo)
                    .current_dir(&root)
                    .args(["build", "--quiet", "-p", "rverbs-capi", "-p", "rverbs-rdmacm", "--lib", "--target-dir"])
                    .arg(&target)
                    .output()
                    .expect("run cargo");
                assert!(out.status.success(), "building the drop-in libraries failed:\n{}", String::from_utf8_lossy(&out.stderr));
                (target.join("debug/libibverbs.so"), target.join("debug/librdmacm.so"), target.join("dropin"))
            }
        };
        std::fs::create_dir_all(&dir).unwrap();
        for (name, lib) in [("libibverbs.so.1", &verbs), ("libibverbs.so", &verbs), ("librdmacm.so.1", &cm), ("librdmacm.so", &cm)] {
            assert!(lib.is_file(), "{} is not a file (not built?)", lib.display());
            // Test processes share the directory (nextest runs each test in its own), so
            // a link is made under a name of this process's and renamed into place: a
            // rename replaces the old link atomically, a remove-then-create could race.
            let tmp = dir.join(format!(".{name}-{}.tmp", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(lib, &tmp).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        }
        dir
    })
    .clone()
}

/// A name for what `parts` hold, for files that test processes share: the same parts give
/// the same name in every process of one build.
fn key(parts: &[&[u8]]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// The compiled C peer.
fn c_peer() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        assert!(Path::new("/usr/include/librpma.h").is_file(), "/usr/include/librpma.h missing: install librpma-dev");
        let dir = dropin();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rpma_peer.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
        let flags = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"];
        // One build per source, compiler and flags, shared by the test processes (nextest
        // runs each test in its own): the first to need it compiles it under a name of
        // its own and renames it into place. A test of another process may be executing
        // the file (writing it would fail with ETXTBSY; a rename replaces it atomically),
        // and two processes that both compile it rename the same program.
        let text = std::fs::read(&src).expect("read the C peer's source");
        let exe = dir.join(format!("rpma_peer-{:016x}", key(&[&text, cc.as_bytes(), flags.join(" ").as_bytes()])));
        if exe.is_file() {
            return exe;
        }
        let tmp = dir.join(format!(".rpma_peer-{}.tmp", std::process::id()));
        let out = Command::new(&cc)
            .args(flags)
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .arg("-L")
            .arg(&dir)
            .args(["-lrpma", "-libverbs", "-lrdmacm"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
        assert!(out.status.success(), "{cc} {}:\n{}", src.display(), String::from_utf8_lossy(&out.stderr));
        std::fs::rename(&tmp, &exe).expect("rename the C peer into place");
        exe
    })
    .clone()
}

/// The C peer as a command (under `timeout 60`, on the drop-in libraries): `rust` says
/// the other side is the Rust model; `args` are the optional numbers of the mode
/// (`[clients]` of a server, `[index [clients]]` of a client).
fn c_command(role: &str, port: u16, mode: &str, rust: bool, args: &[String]) -> Command {
    let mut c = Command::new("timeout");
    c.arg("60")
        .arg(c_peer())
        .args([role, host(), &port.to_string(), mode])
        .args(rust.then_some("rust"))
        .args(args)
        .env("LD_LIBRARY_PATH", dropin())
        .env_remove("RVERBS_SHARED_MR")
        .env_remove("RVERBS_CMA");
    c
}

/// How many clients a mode's server serves.
fn clients(mode: &str) -> usize {
    match mode {
        "srq" | "multi" => CLIENTS,
        _ => 1,
    }
}

/// The arguments of a mode's server (`[clients]`) and of its client `i` (`[index
/// [clients]]`).
fn server_args(mode: &str) -> Vec<String> {
    if clients(mode) > 1 { vec![clients(mode).to_string()] } else { vec![] }
}

fn client_args(mode: &str, i: usize) -> Vec<String> {
    if clients(mode) > 1 { vec![i.to_string(), clients(mode).to_string()] } else { vec![] }
}

/// Starts the C clients of `mode` against a server at `port` on a thread of their own:
/// all at the same time for multi, else one after another (srq: the server serves them
/// in turn). The thread answers their outputs.
fn start_c_clients(mode: &'static str, port: u16, rust: bool) -> std::thread::JoinHandle<Vec<Output>> {
    let spawn = move |i: usize| {
        c_command("client", port, mode, rust, &client_args(mode, i))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a C client")
    };
    std::thread::spawn(move || {
        if mode == "multi" {
            let children: Vec<Child> = (0..clients(mode)).map(spawn).collect();
            children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
        } else {
            (0..clients(mode)).map(|i| spawn(i).wait_with_output().unwrap()).collect()
        }
    })
}

/// Asserts that a C process exited 0 and printed "ok <mode>".
#[track_caller]
fn assert_ok(who: &str, mode: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{who} ({}):\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l == format!("ok {mode}")), "{who}: {stdout}");
}

/// Starts the C server of `mode` and waits until it printed "listening" (after
/// rpma_ep_listen(3) returned); answers it with the rest of its output to come.
fn start_c_server(mode: &str, port: u16, rust: bool) -> (Child, std::io::Lines<BufReader<ChildStdout>>) {
    let mut server = c_command("server", port, mode, rust, &server_args(mode))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the C server");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    // EOF if the server died.
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l == "listening" => break,
            Some(Ok(l)) => seen.push(l),
            _ => {
                let out = server.wait_with_output().unwrap();
                panic!("the C server did not listen: {seen:?}\n{}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
    (server, lines)
}

/// Waits for the C server to end and asserts it succeeded.
fn finish_c_server(mode: &str, server: Child, lines: std::io::Lines<BufReader<ChildStdout>>) {
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let out = server.wait_with_output().unwrap();
    assert!(out.status.success(), "C server ({}): {rest:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(rest.iter().any(|l| *l == format!("ok {mode}")), "{rest:?}");
}

/// A port nobody listens on now (an ephemeral one, released).
fn free_port() -> u16 {
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let ep = Endpoint::listen(&peer, host(), 0).unwrap();
    let port = ep.local_addr().unwrap().port();
    ep.shutdown().unwrap();
    port
}

/// The descriptor-carrying private data of rpma_peer.c (librpma's examples' layout).
fn layout(mr: &MrLocal) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[2] = MR_DESCRIPTOR_SIZE as u8;
    b[4..4 + MR_DESCRIPTOR_SIZE].copy_from_slice(&mr.descriptor());
    b
}

/// The region a layout describes and the data offset.
fn parse_layout(pd: &[u8]) -> (MrRemote, usize) {
    assert!(pd.len() >= 28, "private data of {} bytes", pd.len());
    let size = usize::from(pd[2]);
    (MrRemote::from_descriptor(&pd[4..4 + size]).unwrap(), usize::from(u16::from_ne_bytes([pd[0], pd[1]])))
}

/// Takes the next completion of `cq`, which must be a success, waiting for completion
/// events (polled first: one event may stand for several completions).
#[track_caller]
fn take_wc(cq: &Cq) -> Wc {
    take_wc_of(None, cq)
}

/// As [`take_wc`] for a CQ of `conn`: if the connection shares one completion channel
/// between its CQs, the waits are [`Conn::wait`]s, which must name the CQ that fired.
#[track_caller]
fn take_wc_of(conn: Option<&Conn>, cq: &Cq) -> Wc {
    loop {
        match cq.get_wc_one() {
            Ok(wc) => {
                assert!(wc.is_success(), "completion {:?} of wr {}", wc.status(), wc.wr_id());
                return wc;
            }
            Err(Error::NoCompletion) => match conn.filter(|c| c.compl_fd().is_ok()) {
                Some(conn) => {
                    let (fired, is_rcq) = conn.wait_timeout(WAIT).expect("a completion event");
                    let want = if is_rcq { conn.get_rcq().unwrap() } else { conn.get_cq() };
                    assert!(std::ptr::eq(fired, want), "Conn::wait named the wrong CQ (is_rcq {is_rcq})");
                }
                None => cq.wait_timeout(WAIT).expect("a completion event"),
            },
            Err(e) => panic!("get_wc: {e:?}"),
        }
    }
}

/// scch: the connection's CQs report to its one shared completion channel.
fn assert_shared_channel(conn: &Conn) {
    use std::os::fd::AsRawFd;
    let fd = conn.compl_fd().unwrap().as_raw_fd();
    let rcq = conn.get_rcq().unwrap();
    assert_eq!((conn.get_cq().fd().as_raw_fd(), rcq.fd().as_raw_fd()), (fd, fd));
    assert_eq!(conn.get_cq().wait(), Err(Error::SharedChannel));
}

/// The name of multi client `i` of the Rust or the C side (NUL-padded).
fn client_name(rust: bool, i: usize) -> [u8; NAME_SIZE] {
    let mut b = [0u8; NAME_SIZE];
    let s = format!("{} client {i}", if rust { "Rust" } else { "C" });
    b[..s.len()].copy_from_slice(s.as_bytes());
    b
}

/// Asserts that `names` holds the names of the multi clients 0..n of one side, each
/// once.
#[track_caller]
fn assert_names(names: &[u8], n: usize, rust: bool) {
    assert_eq!(names.len(), n * NAME_SIZE);
    let mut got: Vec<usize> = names
        .chunks(NAME_SIZE)
        .map(|c| (0..n).find(|&i| c == client_name(rust, i)).unwrap_or_else(|| panic!("name {:?}", String::from_utf8_lossy(c))))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>());
}

/// The client side of rcq, scch and srq: ROUNDS ping-pongs of a u64 starting at `v`;
/// with a receive CQ the receives complete there and the sends on the main CQ.
fn ping_pong(conn: &Conn, mem: &MrLocal, mut v: u64) {
    let cq = conn.get_cq();
    let rcq = conn.get_rcq();
    for _ in 0..ROUNDS {
        conn.recv(mem, 8, 8, 1).unwrap();
        mem.write(0, &v.to_ne_bytes()).unwrap();
        conn.send(mem, 0, 8, CompletionFlags::Always, 2).unwrap();
        let recv = match rcq {
            Some(rcq) => {
                assert_eq!(take_wc_of(Some(conn), cq).opcode(), Some(WcOpcode::Send), "the main CQ");
                take_wc_of(Some(conn), rcq)
            }
            None => {
                let (a, b) = (take_wc(cq), take_wc(cq));
                match (a.opcode(), b.opcode()) {
                    (Some(WcOpcode::Send), Some(WcOpcode::Recv)) => b,
                    (Some(WcOpcode::Recv), Some(WcOpcode::Send)) => a,
                    other => panic!("completions {other:?}"),
                }
            }
        };
        assert_eq!((recv.opcode(), recv.byte_len()), (Some(WcOpcode::Recv), Some(8)));
        let got = u64::from_ne_bytes(mem.to_vec(8, 8).unwrap().try_into().unwrap());
        assert_eq!(got, v + 1);
        v = got + 1;
    }
    assert_empty(cq);
    if let Some(rcq) = rcq {
        assert_empty(rcq);
    }
}

/// The Rust client's part of `mode` (but multi) against a server at `port`; `index`
/// numbers the client of srq.
fn rust_client(mode: &str, port: u16, peer_text: &[u8], index: usize) {
    let peer = Peer::new(host(), ContextType::Remote).unwrap();
    let mem = MrLocal::new(&peer, REGION, Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND | Usage::RECV).unwrap();
    let mut cfg = ConnCfg::new();
    if matches!(mode, "rcq" | "scch") {
        cfg.set_rcq_size(RCQ_SIZE).set_compl_channel(mode == "scch");
    }
    let conn = ConnReq::new(&peer, host(), port, Some(&cfg)).unwrap().connect(None).unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
    assert_eq!(conn.get_rcq().is_some(), matches!(mode, "rcq" | "scch"));
    if mode == "scch" {
        assert_shared_channel(&conn);
    }
    let cq = conn.get_cq();
    match mode {
        "read" => {
            let (remote, off) = parse_layout(conn.private_data().unwrap());
            assert!(remote.size() <= REGION);
            conn.read(&mem, 0, &remote, off, remote.size(), CompletionFlags::Always, 1).unwrap();
            cq.wait_timeout(WAIT).unwrap();
            let wc = cq.get_wc_one().unwrap();
            assert_eq!((wc.status(), wc.opcode()), (rverbs::WcStatus::Success, Some(WcOpcode::RdmaRead)));
            assert_eq!(mem.to_vec(0, peer_text.len()).unwrap(), peer_text);
        }
        "write" => {
            let (remote, off) = parse_layout(conn.private_data().unwrap());
            assert!(remote.flush_type().contains(Usage::FLUSH_TYPE_VISIBILITY));
            // The first 8 bytes go by a native atomic write (the rverbs device reports
            // ATOMIC_WRITE): a region C librpma 1.2 registered WRITE_DST takes it, and
            // the C server sees the text only if it landed after the plain write.
            assert!(peer.native().atomic_write);
            assert_eq!(off % ATOMIC_WRITE_ALIGNMENT, 0);
            mem.write(0, RUST_CLIENT_TEXT).unwrap();
            mem.write(0, b"XXXXXXXX").unwrap();
            conn.write(&remote, off, &mem, 0, RUST_CLIENT_TEXT.len(), CompletionFlags::OnError, 1).unwrap();
            let head: [u8; 8] = RUST_CLIENT_TEXT[..8].try_into().unwrap();
            conn.atomic_write(&remote, off, head, CompletionFlags::Always, 3).unwrap();
            cq.wait_timeout(WAIT).unwrap();
            let wc = cq.get_wc_one().unwrap();
            assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (3, rverbs::WcStatus::Success, Some(WcOpcode::AtomicWrite)));
            conn.flush(&remote, off, RUST_CLIENT_TEXT.len(), FlushType::Visibility, CompletionFlags::Always, 2).unwrap();
            cq.wait_timeout(WAIT).unwrap();
            let wc = cq.get_wc_one().unwrap();
            assert_eq!((wc.wr_id(), wc.opcode()), (2, Some(WcOpcode::RdmaRead)));
        }
        "send" => {
            conn.recv(&mem, 32, 32, 1).unwrap();
            mem.write(0, b"ping\0").unwrap();
            conn.send(&mem, 0, 5, CompletionFlags::Always, 2).unwrap();
            let (mut sent, mut received) = (false, false);
            while !(sent && received) {
                let wc = next_wc(cq);
                match wc.opcode() {
                    Some(WcOpcode::Send) => sent = true,
                    Some(WcOpcode::Recv) => {
                        assert_eq!(wc.byte_len(), Some(5));
                        received = true;
                    }
                    other => panic!("{other:?} {:?}", wc.status()),
                }
            }
            assert_eq!(mem.to_vec(32, 5).unwrap(), b"pong\0");
        }
        "wimm" => {
            let (remote, off) = parse_layout(conn.private_data().unwrap());
            mem.write(0, RUST_CLIENT_TEXT).unwrap();
            conn.write_with_imm(&remote, off, &mem, 0, RUST_CLIENT_TEXT.len(), CompletionFlags::Always, IMM, 1).unwrap();
            cq.wait_timeout(WAIT).unwrap();
            assert_eq!(cq.get_wc_one().unwrap().opcode(), Some(WcOpcode::RdmaWrite));
        }
        "aw" => {
            // A plain write of the text, then a native atomic write of the word before
            // it (fenced behind the write), then a flush; the server checks both.
            let (remote, off) = parse_layout(conn.private_data().unwrap());
            assert_eq!(off % ATOMIC_WRITE_ALIGNMENT, 0);
            mem.write(0, RUST_CLIENT_TEXT).unwrap();
            conn.write(&remote, off + AW_TEXT_OFF, &mem, 0, RUST_CLIENT_TEXT.len(), CompletionFlags::OnError, 1).unwrap();
            conn.atomic_write(&remote, off, *RUST_WORD, CompletionFlags::Always, 2).unwrap();
            conn.flush(&remote, off, AW_TEXT_OFF + RUST_CLIENT_TEXT.len(), FlushType::Visibility, CompletionFlags::Always, 3).unwrap();
            let wc = take_wc(cq);
            assert_eq!((wc.wr_id(), wc.opcode()), (2, Some(WcOpcode::AtomicWrite)));
            let wc = take_wc(cq);
            assert_eq!((wc.wr_id(), wc.opcode()), (3, Some(WcOpcode::RdmaRead)));
        }
        "simm" => {
            mem.write(0, RUST_CLIENT_TEXT).unwrap();
            conn.send_with_imm(&mem, 0, RUST_CLIENT_TEXT.len(), CompletionFlags::Always, IMM, 1).unwrap();
            conn.send_with_imm(None, 0, 0, CompletionFlags::Always, IMM + 1, 2).unwrap();
            for id in 1..=2 {
                let wc = take_wc(cq);
                assert_eq!((wc.wr_id(), wc.opcode()), (id, Some(WcOpcode::Send)));
            }
        }
        "rcq" => ping_pong(&conn, &mem, RCQ_START),
        "scch" => {
            ping_pong(&conn, &mem, RCQ_START);
            // Unsignaled, and disconnecting right after it (librpma's example 08).
            mem.write(0, &DONE.to_ne_bytes()).unwrap();
            conn.send(&mem, 0, 8, CompletionFlags::OnError, 3).unwrap();
        }
        "srq" => ping_pong(&conn, &mem, SRQ_BASE * (index as u64 + 1)),
        _ => unreachable!(),
    }
    conn.disconnect().unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
    conn.delete().unwrap();
}

/// The Rust client `index` of multi: its region (its name, then room for the list)
/// is described in the connect's private data; it receives the names of all `n`
/// clients (receive posted before connecting).
fn rust_client_multi(port: u16, index: usize, n: usize) {
    let peer = Peer::new(host(), ContextType::Remote).unwrap();
    let mem = MrLocal::new(&peer, NAME_SIZE * (n + 1), Usage::READ_SRC | Usage::RECV).unwrap();
    mem.write(0, &client_name(true, index)).unwrap();
    let req = ConnReq::new(&peer, host(), port, None).unwrap();
    req.recv(&mem, NAME_SIZE, n * NAME_SIZE, 1).unwrap();
    let conn = req.connect(Some(&layout(&mem))).unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
    let wc = take_wc(conn.get_cq());
    assert_eq!((wc.opcode(), wc.byte_len()), (Some(WcOpcode::Recv), Some((n * NAME_SIZE) as u32)));
    assert_names(&mem.to_vec(NAME_SIZE, n * NAME_SIZE).unwrap(), n, true);
    conn.disconnect().unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
    conn.delete().unwrap();
}

/// The Rust clients of `mode` against a server at `port`: one; srq's one after
/// another; multi's all at the same time, each on a thread.
fn rust_clients(mode: &str, port: u16, peer_text: &[u8]) {
    match mode {
        "multi" => {
            let threads: Vec<_> = (0..CLIENTS).map(|i| std::thread::spawn(move || rust_client_multi(port, i, CLIENTS))).collect();
            for t in threads {
                t.join().unwrap();
            }
        }
        _ => (0..clients(mode)).for_each(|i| rust_client(mode, port, peer_text, i)),
    }
}

/// The Rust server's part of `mode` (but srq and multi): listens on an ephemeral port,
/// hands it to `start_client`, serves one connection.
fn rust_server(mode: &str, start_client: impl FnOnce(u16)) {
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let usage = match mode {
        "read" => Usage::READ_SRC,
        "write" | "aw" => Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY,
        _ => Usage::WRITE_DST,
    };
    let mem = MrLocal::new(&peer, REGION, usage).unwrap();
    if mode == "read" {
        mem.write(0, RUST_SERVER_TEXT).unwrap();
    }
    let msg = MrLocal::new(&peer, REGION, Usage::RECV | Usage::SEND).unwrap();
    let mut cfg = ConnCfg::new();
    let rcq_mode = matches!(mode, "rcq" | "scch");
    if rcq_mode {
        cfg.set_rcq_size(RCQ_SIZE).set_compl_channel(mode == "scch");
    }
    let ep = Endpoint::listen(&peer, host(), 0).unwrap();
    start_client(ep.local_addr().unwrap().port());
    let req = ep.next_conn_req_timeout(Some(&cfg), WAIT).unwrap();
    match mode {
        "send" => req.recv(&msg, 0, REGION, 1).unwrap(),
        "wimm" => req.recv(&msg, 0, 1, 2).unwrap(),
        "simm" => {
            req.recv(&msg, 0, 32, 1).unwrap();
            req.recv(&msg, 32, 32, 2).unwrap();
        }
        "rcq" | "scch" => req.recv(&msg, 0, 8, 1).unwrap(),
        _ => {}
    }
    let pdata = layout(&mem);
    let with_region = matches!(mode, "read" | "write" | "wimm" | "aw");
    let conn = req.connect(with_region.then_some(&pdata[..])).unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
    assert_eq!(conn.get_rcq().is_some(), rcq_mode);
    if mode == "scch" {
        assert_shared_channel(&conn);
    }
    let cq = conn.get_cq();
    match mode {
        "send" => {
            cq.wait_timeout(WAIT).unwrap();
            let wc = cq.get_wc_one().unwrap();
            assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (1, Some(WcOpcode::Recv), Some(5)));
            assert_eq!(msg.to_vec(0, 5).unwrap(), b"ping\0");
            msg.write(0, b"pong\0").unwrap();
            conn.send(&msg, 0, 5, CompletionFlags::Always, 3).unwrap();
            assert_eq!(next_wc(cq).opcode(), Some(WcOpcode::Send));
        }
        "wimm" => {
            cq.wait_timeout(WAIT).unwrap();
            let wc = cq.get_wc_one().unwrap();
            assert_eq!(wc.opcode(), Some(WcOpcode::RecvRdmaWithImm));
            assert!(wc.wc_flags().unwrap().contains(WcFlags::WITH_IMM));
            assert_eq!(wc.imm_data(), Some(IMM));
            assert_eq!(mem.to_vec(0, CLIENT_TEXT.len()).unwrap(), CLIENT_TEXT);
        }
        "simm" => {
            // The receive queue is FIFO: the first message lands in the first receive.
            for (id, imm, len) in [(1, IMM, CLIENT_TEXT.len()), (2, IMM + 1, 0)] {
                let wc = take_wc(cq);
                assert_eq!((wc.wr_id(), wc.opcode()), (id, Some(WcOpcode::Recv)));
                assert!(wc.wc_flags().unwrap().contains(WcFlags::WITH_IMM));
                assert_eq!((wc.imm_data(), wc.byte_len()), (Some(imm), Some(len as u32)));
            }
            assert_eq!(msg.to_vec(0, CLIENT_TEXT.len()).unwrap(), CLIENT_TEXT);
        }
        "rcq" | "scch" => {
            let rcq = conn.get_rcq().unwrap();
            for r in 0..ROUNDS {
                let wc = take_wc_of(Some(&conn), rcq);
                assert_eq!((wc.opcode(), wc.byte_len()), (Some(WcOpcode::Recv), Some(8)));
                let v = u64::from_ne_bytes(msg.to_vec(0, 8).unwrap().try_into().unwrap());
                assert_eq!(v, RCQ_START + 2 * r);
                // scch: the last receive takes DONE.
                if r + 1 < ROUNDS || mode == "scch" {
                    conn.recv(&msg, 0, 8, 1).unwrap();
                }
                msg.write(8, &(v + 1).to_ne_bytes()).unwrap();
                conn.send(&msg, 8, 8, CompletionFlags::Always, 2).unwrap();
                assert_eq!(take_wc_of(Some(&conn), cq).opcode(), Some(WcOpcode::Send));
            }
            assert_empty(cq);
            if mode == "rcq" {
                assert_empty(rcq);
            }
        }
        _ => {}
    }
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
    if mode == "scch" {
        // DONE was sent before the client disconnected: it is here already.
        let rcq = conn.get_rcq().unwrap();
        let wc = rcq.get_wc_one().expect("DONE before Closed");
        assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (rverbs::WcStatus::Success, Some(WcOpcode::Recv), Some(8)));
        assert_eq!(msg.to_vec(0, 8).unwrap(), DONE.to_ne_bytes());
        assert_empty(rcq);
    }
    if mode == "write" {
        assert_eq!(mem.to_vec(0, CLIENT_TEXT.len()).unwrap(), CLIENT_TEXT);
    }
    if mode == "aw" {
        assert_eq!(&mem.to_vec(0, 8).unwrap()[..], &C_WORD[..]);
        assert_eq!(mem.to_vec(AW_TEXT_OFF, CLIENT_TEXT.len()).unwrap(), CLIENT_TEXT);
    }
    conn.disconnect().unwrap();
    conn.delete().unwrap();
    ep.shutdown().unwrap();
}

/// The Rust server of srq: a shared RQ with its own receive CQ serves CLIENTS
/// connections in turn, ROUNDS ping-pongs each; every receive names the connection's
/// QP and carries the client's value.
fn rust_server_srq(start_clients: impl FnOnce(u16)) {
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let mut scfg = SrqCfg::new();
    scfg.set_rq_size(2 * SRQ_SLOTS as u32).set_rcq_size(RCQ_SIZE);
    let srq = Srq::new(&peer, Some(&scfg)).unwrap();
    let rcq = srq.get_rcq().expect("the SRQ's receive CQ");
    let mut cfg = ConnCfg::new();
    cfg.set_srq(Some(&srq));
    let msg = MrLocal::new(&peer, REGION, Usage::RECV | Usage::SEND).unwrap();
    // Slot s receives into bytes 8s..8s+8 and is posted again once it completed.
    for s in 0..SRQ_SLOTS {
        srq.recv(&msg, 8 * s, 8, s as u64).unwrap();
    }
    let ep = Endpoint::listen(&peer, host(), 0).unwrap();
    start_clients(ep.local_addr().unwrap().port());
    for k in 0..CLIENTS {
        let req = ep.next_conn_req_timeout(Some(&cfg), WAIT).unwrap_or_else(|e| panic!("client {k}: next_conn_req: {e:?}"));
        let conn = req.connect(None).unwrap_or_else(|e| panic!("client {k}: accept: {e:?}"));
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
        assert!(conn.get_rcq().is_none());
        let mut want = SRQ_BASE * (k as u64 + 1);
        for _ in 0..ROUNDS {
            let wc = take_wc(rcq);
            assert_eq!((wc.opcode(), wc.qp_num(), wc.byte_len()), (Some(WcOpcode::Recv), conn.qp_num(), Some(8)));
            let slot = wc.wr_id() as usize;
            assert!(slot < SRQ_SLOTS);
            let v = u64::from_ne_bytes(msg.to_vec(8 * slot, 8).unwrap().try_into().unwrap());
            assert_eq!(v, want, "client {k}");
            srq.recv(&msg, 8 * slot, 8, slot as u64).unwrap();
            msg.write(8 * SRQ_SLOTS, &(v + 1).to_ne_bytes()).unwrap();
            conn.send(&msg, 8 * SRQ_SLOTS, 8, CompletionFlags::Always, SRQ_SLOTS as u64).unwrap();
            assert_eq!(take_wc(conn.get_cq()).opcode(), Some(WcOpcode::Send));
            want = v + 2;
        }
        assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
        conn.disconnect().unwrap();
        conn.delete().unwrap();
    }
    assert_empty(rcq);
    ep.shutdown().unwrap();
    drop(cfg);
    srq.delete().unwrap();
}

/// Makes `fd` non-blocking.
fn set_nonblock(fd: BorrowedFd<'_>) {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    fcntl_setfl(fd, fcntl_getfl(fd).unwrap() | OFlags::NONBLOCK).unwrap();
}

/// The Rust server of multi: one thread, one epoll set over the endpoint's fd and, per
/// connection, its event fd (token 2i) and its CQ's fd (2i + 1), all non-blocking. On
/// ESTABLISHED it reads the client's name; once it has all CLIENTS names it sends each
/// client the list; it ends when every client closed.
fn rust_server_multi(start_clients: impl FnOnce(u16)) {
    use rustix::event::{epoll, Timespec};
    const EP_TOKEN: u64 = u64::MAX;
    struct Client {
        conn: Option<Conn>,
        remote: MrRemote,
        offset: usize,
        answered: bool,
    }
    let n = CLIENTS;
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let names = MrLocal::new(&peer, n * NAME_SIZE, Usage::READ_DST).unwrap();
    let answer = MrLocal::new(&peer, n * NAME_SIZE, Usage::SEND).unwrap();
    let ep = Endpoint::listen(&peer, host(), 0).unwrap();
    let set = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
    let watch = |fd: BorrowedFd<'_>, token: u64| {
        set_nonblock(fd);
        epoll::add(&set, fd, epoll::EventData::new_u64(token), epoll::EventFlags::IN).unwrap();
    };
    watch(ep.fd(), EP_TOKEN);
    start_clients(ep.local_addr().unwrap().port());
    let mut clients: Vec<Client> = Vec::new();
    let (mut named, mut closed) = (0, 0);
    let timeout = Timespec { tv_sec: WAIT.as_secs() as i64, tv_nsec: 0 };
    while closed < n {
        let mut buf = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 1];
        let token = match epoll::wait(&set, &mut buf, Some(&timeout)) {
            Ok((ready, _)) => ready.first().map(|e| e.data.u64()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("epoll_wait: {e}"),
        };
        let token = token.unwrap_or_else(|| panic!("nothing happened: {} accepted, {named} named, {closed} closed", clients.len()));
        if token == EP_TOKEN {
            let req = match ep.next_conn_req(None) {
                Err(Error::NoEvent) => continue,
                r => r.unwrap(),
            };
            assert!(clients.len() < n, "more clients than expected");
            let (remote, offset) = parse_layout(req.private_data().unwrap());
            let conn = req.connect(None).unwrap();
            let i = clients.len() as u64;
            watch(conn.fd(), 2 * i);
            watch(conn.get_cq().fd(), 2 * i + 1);
            clients.push(Client { conn: Some(conn), remote, offset, answered: false });
            continue;
        }
        let i = (token / 2) as usize;
        let c = &mut clients[i];
        let conn = c.conn.as_ref().unwrap();
        if token % 2 == 0 {
            match conn.next_event() {
                Err(Error::NoEvent) => {}
                Ok(ConnEvent::Established) => {
                    conn.read(&names, i * NAME_SIZE, &c.remote, c.offset, NAME_SIZE, CompletionFlags::Always, i as u64).unwrap()
                }
                Ok(ConnEvent::Closed) => {
                    assert!(c.answered, "client {i} closed before its answer");
                    epoll::delete(&set, conn.fd()).unwrap();
                    epoll::delete(&set, conn.get_cq().fd()).unwrap();
                    conn.disconnect().unwrap();
                    c.conn.take().unwrap().delete().unwrap();
                    closed += 1;
                }
                other => panic!("client {i}: {other:?}"),
            }
            continue;
        }
        let cq = conn.get_cq();
        match cq.wait() {
            Err(Error::NoCompletion) => continue,
            r => r.unwrap(),
        }
        let mut all_named = false;
        loop {
            let wc = match cq.get_wc_one() {
                Err(Error::NoCompletion) => break,
                r => r.unwrap(),
            };
            assert!(wc.is_success(), "client {i}: {:?}", wc.status());
            match wc.opcode() {
                Some(WcOpcode::Send) => {}
                Some(WcOpcode::RdmaRead) => {
                    assert_eq!(wc.wr_id(), i as u64);
                    named += 1;
                    all_named = named == n;
                }
                other => panic!("client {i}: {other:?}"),
            }
        }
        if all_named {
            // Every client's name is here: send each the list.
            let list = names.to_vec(0, n * NAME_SIZE).unwrap();
            assert_names(&list, n, false);
            answer.write(0, &list).unwrap();
            for c in &mut clients {
                c.conn.as_ref().unwrap().send(&answer, 0, n * NAME_SIZE, CompletionFlags::Always, 0).unwrap();
                c.answered = true;
            }
        }
    }
    epoll::delete(&set, ep.fd()).unwrap();
    ep.shutdown().unwrap();
}

/// A C server and Rust clients.
fn c_server_rust_client(mode: &'static str) {
    let port = free_port();
    let (server, lines) = start_c_server(mode, port, true);
    bounded(60, move || rust_clients(mode, port, SERVER_TEXT));
    finish_c_server(mode, server, lines);
}

/// A Rust server and C clients.
fn rust_server_c_client(mode: &'static str) {
    c_peer();
    let outs = bounded(90, move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let start = move |port| tx.send(start_c_clients(mode, port, true)).unwrap();
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match mode {
            "srq" => rust_server_srq(start),
            "multi" => rust_server_multi(start),
            _ => rust_server(mode, start),
        }));
        // The server's resources are gone once it returned or unwound: the clients end
        // (each within its `timeout`), and their outputs say what they saw.
        let outs = rx.recv().map(|clients| clients.join().unwrap()).unwrap_or_default();
        if let Err(p) = served {
            let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            let mut seen = String::new();
            for (i, out) in outs.iter().enumerate() {
                seen += &format!(
                    "--- C client {i} ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            panic!("the Rust server of {mode} failed: {}\n{seen}", why.unwrap_or_default());
        }
        outs
    });
    assert_eq!(outs.len(), clients(mode));
    for out in &outs {
        assert_ok("C client", mode, out);
    }
}

/// A C server and C clients: Debian's librpma on both sides of the drop-ins.
fn c_server_c_client(mode: &'static str) {
    let port = free_port();
    let (server, lines) = start_c_server(mode, port, false);
    let outs = start_c_clients(mode, port, false).join().unwrap();
    assert_eq!(outs.len(), clients(mode));
    for out in &outs {
        assert_ok("C client", mode, out);
    }
    finish_c_server(mode, server, lines);
}

#[test]
fn rust_client_reads_from_c_server() {
    c_server_rust_client("read");
}

#[test]
fn rust_client_writes_and_flushes_to_c_server() {
    c_server_rust_client("write");
}

#[test]
fn rust_client_sends_to_c_server() {
    c_server_rust_client("send");
}

#[test]
fn rust_client_writes_with_imm_to_c_server() {
    c_server_rust_client("wimm");
}

#[test]
fn rust_client_atomic_writes_to_c_server() {
    c_server_rust_client("aw");
}

#[test]
fn rust_client_sends_with_imm_to_c_server() {
    c_server_rust_client("simm");
}

#[test]
fn rust_client_ping_pongs_through_receive_cqs_with_c_server() {
    c_server_rust_client("rcq");
}

#[test]
fn rust_client_ping_pongs_over_a_shared_channel_with_c_server() {
    c_server_rust_client("scch");
}

#[test]
fn rust_clients_in_turn_reach_the_srq_of_c_server() {
    c_server_rust_client("srq");
}

#[test]
fn rust_clients_at_once_are_multiplexed_by_c_server() {
    c_server_rust_client("multi");
}

#[test]
fn c_client_reads_from_rust_server() {
    rust_server_c_client("read");
}

#[test]
fn c_client_writes_and_flushes_to_rust_server() {
    rust_server_c_client("write");
}

#[test]
fn c_client_sends_to_rust_server() {
    rust_server_c_client("send");
}

#[test]
fn c_client_writes_with_imm_to_rust_server() {
    rust_server_c_client("wimm");
}

#[test]
fn c_client_atomic_writes_to_rust_server() {
    rust_server_c_client("aw");
}

#[test]
fn c_client_sends_with_imm_to_rust_server() {
    rust_server_c_client("simm");
}

#[test]
fn c_client_ping_pongs_through_receive_cqs_with_rust_server() {
    rust_server_c_client("rcq");
}

#[test]
fn c_client_ping_pongs_over_a_shared_channel_with_rust_server() {
    rust_server_c_client("scch");
}

#[test]
fn c_clients_in_turn_reach_the_srq_of_rust_server() {
    rust_server_c_client("srq");
}

#[test]
fn c_clients_at_once_are_multiplexed_by_rust_server() {
    rust_server_c_client("multi");
}

#[test]
fn c_client_reads_from_c_server() {
    c_server_c_client("read");
}

#[test]
fn c_client_writes_and_flushes_to_c_server() {
    c_server_c_client("write");
}

#[test]
fn c_client_sends_to_c_server() {
    c_server_c_client("send");
}

#[test]
fn c_client_writes_with_imm_to_c_server() {
    c_server_c_client("wimm");
}

#[test]
fn c_client_atomic_writes_to_c_server() {
    c_server_c_client("aw");
}

#[test]
fn c_client_sends_with_imm_to_c_server() {
    c_server_c_client("simm");
}

#[test]
fn c_client_ping_pongs_through_receive_cqs_with_c_server() {
    c_server_c_client("rcq");
}

#[test]
fn c_client_ping_pongs_over_a_shared_channel_with_c_server() {
    c_server_c_client("scch");
}

#[test]
fn c_clients_in_turn_reach_the_srq_of_c_server() {
    c_server_c_client("srq");
}

#[test]
fn c_clients_at_once_are_multiplexed_by_c_server() {
    c_server_c_client("multi");
}

// librpma's own error paths, driven by the fault plan of the verbs (RVERBS_FAULTS `fail=`
// and `wc=` items, docs/fault-injection.md): the C program meets the failure where a NIC
// would give it, reports it through librpma's error, and ends at once.

/// `ibv_reg_mr` failing with ENOMEM reaches the C server as rpma_mr_reg's provider error:
/// it prints its FAIL line and exits 1, before listening.
#[test]
fn c_server_reports_a_registration_the_fault_plan_refused() {
    let out = c_command("server", free_port(), "write", false, &[])
        .env("RVERBS_FAULTS", "fail=reg_mr:ENOMEM")
        .output()
        .expect("run the C server");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("FAIL write rpma_mr_reg"), "{stdout}");
    assert!(stdout.contains("Provider error occurred"), "librpma's error for a failed verb: {stdout}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(stderr.contains("fault injected: ibv_reg_mr fails with ENOMEM"), "the injection is logged: {stderr}");
}

/// A READ the fault plan completes with REM_ACCESS_ERR reaches the C client through
/// rpma_cq_get_wc(3) with that status: it says so and exits 1, without waiting for
/// anything more (the server, left alone, is stopped by the test).
#[test]
fn c_client_reports_a_completion_the_fault_plan_failed() {
    let port = free_port();
    let (mut server, _lines) = start_c_server("read", port, false);
    let out = c_command("client", port, "read", false, &[])
        .env("RVERBS_FAULTS", "wc=REM_ACCESS_ERR:nth=1")
        .output()
        .expect("run the C client");
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("completion status: remote access error"), "{stdout}");
    assert!(stdout.contains("FAIL read completion"), "{stdout}");
    assert!(stderr.contains("completes with REM_ACCESS_ERR"), "the injection is logged: {stderr}");
}
