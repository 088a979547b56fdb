//! Interoperability with C librpma: `tests/c/rpma_peer.c` (this crate's own program)
//! is compiled with the system C compiler against the installed `<librpma.h>` (Debian's
//! librpma 1.2), linked `-lrpma -libverbs -lrdmacm`, and run with `LD_LIBRARY_PATH` at
//! a directory holding the drop-in `libibverbs.so.1` (crate `rverbs-capi`) and
//! `librdmacm.so.1` (crate `rverbs-rdmacm`). For each mode — read (the server's
//! READ_SRC region descriptor in the accept's private data), write + flush (and a
//! native atomic write from Rust), send/recv,
//! write with immediate data — a Rust client talks to the C server and a C client to a
//! Rust server.
//!
//! Neither drop-in crate is a dependency of this one, so both are built here, once per
//! test run, into a target directory of their own under `CARGO_TARGET_TMPDIR` (a
//! `cargo build` in the target directory `cargo test` holds would wait for its lock),
//! as `crates/rverbs-capi/tests/cm_c_programs.rs` builds its shim. The C server prints
//! "listening" after rpma_ep_listen(3); the Rust client connects only after reading
//! that line. Every process runs under `timeout(1)`; missing compiler, header or
//! library = failure, never a skip.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::*;
use rverbs::{WcFlags, WcOpcode};
use rverbs_rpma::*;

const SERVER_TEXT: &[u8] = b"text of the C server\0";
const CLIENT_TEXT: &[u8] = b"text of the C client\0";
const RUST_SERVER_TEXT: &[u8] = b"text of the Rust server\0";
const RUST_CLIENT_TEXT: &[u8] = b"text of the Rust client\0";
const IMM: u32 = 0xC0FFEE;
const REGION: usize = 64;

/// The drop-in directory: `libibverbs.so.1` and `librdmacm.so.1` (and their link-time
/// names) built from this workspace.
fn dropin() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rpma-dropin");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(&root)
            .args(["build", "--quiet", "-p", "rverbs-capi", "-p", "rverbs-rdmacm", "--lib", "--target-dir"])
            .arg(&target)
            .output()
            .expect("run cargo");
        assert!(out.status.success(), "building the drop-in libraries failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let dir = target.join("dropin");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, lib) in [
            ("libibverbs.so.1", "libibverbs.so"),
            ("libibverbs.so", "libibverbs.so"),
            ("librdmacm.so.1", "librdmacm.so"),
            ("librdmacm.so", "librdmacm.so"),
        ] {
            let built = target.join("debug").join(lib);
            assert!(built.is_file(), "{} was not built", built.display());
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&built, &link).unwrap();
        }
        dir
    })
    .clone()
}

/// The compiled C peer.
fn c_peer() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        assert!(Path::new("/usr/include/librpma.h").is_file(), "/usr/include/librpma.h missing: install librpma-dev");
        let dir = dropin();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rpma_peer.c");
        // Each test binary process compiles its own copy and renames it into place: a
        // test of another process may be executing the file (writing it would fail with
        // ETXTBSY; a rename replaces it atomically).
        let exe = dir.join(format!("rpma_peer-{}", std::process::id()));
        let tmp = dir.join(format!(".rpma_peer-{}.tmp", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
        let out = Command::new(&cc)
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-o"])
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

/// The C peer as a command (under `timeout 60`, on the drop-in libraries).
fn c_command(role: &str, port: u16, mode: &str) -> Command {
    let mut c = Command::new("timeout");
    c.arg("60")
        .arg(c_peer())
        .args([role, "127.0.0.1", &port.to_string(), mode, "rust"])
        .env("LD_LIBRARY_PATH", dropin())
        .env_remove("RVERBS_SHARED_MR")
        .env_remove("RVERBS_CMA");
    c
}

/// A port nobody listens on now (an ephemeral one, released).
fn free_port() -> u16 {
    let peer = Peer::new("127.0.0.1", ContextType::Local).unwrap();
    let ep = Endpoint::listen(&peer, "127.0.0.1", 0).unwrap();
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

/// The Rust client's part of `mode` against a server at `port`.
fn rust_client(mode: &str, port: u16, peer_text: &[u8]) {
    let peer = Peer::new("127.0.0.1", ContextType::Remote).unwrap();
    let mem = MrLocal::new(&peer, REGION, Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND | Usage::RECV).unwrap();
    let conn = ConnReq::new(&peer, "127.0.0.1", port, None).unwrap().connect(None).unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
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
        _ => unreachable!(),
    }
    conn.disconnect().unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
    conn.delete().unwrap();
}

/// The Rust server's part of `mode`: listens on an ephemeral port, hands it to
/// `start_client`, serves one connection.
fn rust_server(mode: &str, start_client: impl FnOnce(u16)) {
    let peer = Peer::new("127.0.0.1", ContextType::Local).unwrap();
    let usage = match mode {
        "read" => Usage::READ_SRC,
        "write" => Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY,
        _ => Usage::WRITE_DST,
    };
    let mem = MrLocal::new(&peer, REGION, usage).unwrap();
    mem.write(0, RUST_SERVER_TEXT).unwrap();
    let msg = MrLocal::new(&peer, REGION, Usage::RECV | Usage::SEND).unwrap();
    let ep = Endpoint::listen(&peer, "127.0.0.1", 0).unwrap();
    start_client(ep.local_addr().unwrap().port());
    let req = ep.next_conn_req_timeout(None, WAIT).unwrap();
    match mode {
        "send" => req.recv(&msg, 0, REGION, 1).unwrap(),
        "wimm" => req.recv(&msg, 0, 1, 2).unwrap(),
        _ => {}
    }
    let pdata = layout(&mem);
    let conn = req.connect((mode != "send").then_some(&pdata[..])).unwrap();
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Established);
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
        _ => {}
    }
    assert_eq!(conn.next_event_timeout(WAIT).unwrap(), ConnEvent::Closed);
    if mode == "write" {
        assert_eq!(mem.to_vec(0, CLIENT_TEXT.len()).unwrap(), CLIENT_TEXT);
    }
    conn.disconnect().unwrap();
    conn.delete().unwrap();
    ep.shutdown().unwrap();
}

/// A C server and a Rust client.
fn c_server_rust_client(mode: &'static str) {
    let exe = c_peer();
    assert!(exe.is_file());
    let port = free_port();
    let mut server = c_command("server", port, mode).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the C server");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    // Wait for rpma_ep_listen(3) to have returned (EOF if the server died).
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
    bounded(60, move || rust_client(mode, port, SERVER_TEXT));
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let out = server.wait_with_output().unwrap();
    assert!(out.status.success(), "C server ({}): {rest:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(rest.iter().any(|l| *l == format!("ok {mode}")), "{rest:?}");
}

/// A Rust server and a C client.
fn rust_server_c_client(mode: &'static str) {
    c_peer();
    let out = bounded(60, move || {
        let (tx, rx) = std::sync::mpsc::channel();
        rust_server(mode, move |port| {
            let child = c_command("client", port, mode).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the C client");
            tx.send(std::thread::spawn(move || child.wait_with_output().unwrap())).unwrap();
        });
        rx.recv().unwrap().join().unwrap()
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "C client ({}):\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l == format!("ok {mode}")), "{stdout}");
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
