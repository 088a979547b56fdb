//! Runs every example (`examples/*.rs`, Rust ports of librpma's examples) and checks its
//! exit status and success lines; some also run as processes (`server` and
//! `client` subcommands). Each run is bounded by `timeout(1)`.
//!
//! `cargo test` builds the examples next to this test (`target/<profile>/examples`);
//! if they are missing (e.g. `cargo test --test examples`), they are built here into a
//! target directory of their own under `CARGO_TARGET_TMPDIR` (the one `cargo test`
//! holds would wait for its lock).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

mod common;
use common::host;

const EXAMPLES: [&str; 18] = [
    "readme",
    "01-connection",
    "02-read-to-volatile",
    "03-read-to-persistent",
    "04-write-to-persistent",
    "05-flush-to-persistent",
    "07-atomic-write",
    "08-messages-ping-pong",
    "08srq-simple-messages-ping-pong-with-srq",
    "09-flush-to-persistent-GPSPM",
    "09scch-flush-to-persistent-GPSPM",
    "10-send-with-imm",
    "11-write-with-imm",
    "12-receive-completion-queue",
    "12scch-receive-completion-queue",
    "06-multiple-connections",
    "06scch-multiple-connections",
    "13-messages-ping-pong-with-srq",
];

/// The directory holding the built examples.
fn examples_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let beside = exe.parent().and_then(Path::parent).map(|p| p.join("examples"));
        if let Some(dir) = beside.filter(|d| fresh(d)) {
            return dir;
        }
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rpma-examples");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet", "-p", "rverbs-rpma", "--examples", "--target-dir"])
            .arg(&target)
            .output()
            .expect("run cargo");
        assert!(out.status.success(), "building the examples failed:\n{}", String::from_utf8_lossy(&out.stderr));
        target.join("debug/examples")
    })
    .clone()
}

/// The newest modification time of the files under `dir`.
fn newest(dir: &Path) -> std::time::SystemTime {
    let mut t = std::time::SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let m = if p.is_dir() { newest(&p) } else { e.metadata().and_then(|m| m.modified()).unwrap_or(t) };
        t = t.max(m);
    }
    t
}

/// Whether `dir` holds every example, built after the crate's sources last changed.
fn fresh(dir: &Path) -> bool {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = newest(&crate_dir.join("src")).max(newest(&crate_dir.join("examples")));
    EXAMPLES.iter().all(|e| {
        std::fs::metadata(dir.join(e)).and_then(|m| m.modified()).is_ok_and(|t| t >= sources)
    })
}

/// Runs `name` with `args` (at most 120 s); returns its stdout after checking it
/// exited 0.
fn run(name: &str, args: &[&str]) -> String {
    let exe = examples_dir().join(name);
    let out = Command::new("timeout")
        .arg("120")
        .arg(&exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} {args:?} failed ({}):\n{stdout}{stderr}", out.status);
    stdout
}

fn assert_lines(name: &str, out: &str, want: &[&str]) {
    for w in want {
        assert!(out.lines().any(|l| l == *w), "{name}: no line {w:?} in:\n{out}");
    }
}

#[test]
fn ex01_connection() {
    let out = run("01-connection", &[]);
    assert_lines("01", &out, &["Received a message: Hello server!", "Received a message: Hello client!"]);
}

#[test]
fn ex02_read_to_volatile() {
    let out = run("02-read-to-volatile", &[]);
    assert_lines("02", &out, &["Read a message: Hello client!"]);
}

#[test]
fn ex03_read_to_persistent() {
    let out = run("03-read-to-persistent", &[]);
    assert_lines("03", &out, &["Next value: Hello world!", "New value: Hello world!", "Translation: ¡Hola Mundo!"]);
}

/// Example 03 as two processes: the server prints what it read from the client.
#[test]
fn ex03_as_two_processes() {
    let (mut server, port, lines) = start_server("03-read-to-persistent", &[]);
    let out = run("03-read-to-persistent", &["client", host(), &port]);
    assert_lines("03 client", &out, &["Next value: Hello world!", "Translation: ¡Hola Mundo!"]);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(server.wait().unwrap().success(), "{rest:?}");
    assert_eq!(rest, ["New value: Hello world!"]);
}

#[test]
fn ex05_flush_to_persistent() {
    let out = run("05-flush-to-persistent", &[]);
    assert_lines(
        "05",
        &out,
        &[
            "Next value: Hello world!",
            "RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead",
            "Translation: ¡Hola Mundo!",
            "New value: Hello world!",
        ],
    );
}

/// Examples 09 and 09scch (GPSPM; 09scch with a shared completion channel).
const EX09: [&str; 2] = ["09-flush-to-persistent-GPSPM", "09scch-flush-to-persistent-GPSPM"];

/// What the server of example 09 prints after its "Waiting" line: the client's flush
/// request (offset 0, the 1024-byte greeting, op_context 0xF01D), then, once the
/// client closed, the greeting the client wrote.
const EX09_SERVER: [&str; 3] = [
    "Flush request received: {offset: 0x0, length: 0x400, op_context: 0xF01D}",
    "At this point, persist function should be called if persistent memory will be in use",
    "New value: Hello world!",
];

/// Examples 09 and 09scch in one process: the client only translates its greeting
/// once the flush response carried its op_context back.
#[test]
fn ex09_flush_to_persistent_gpspm() {
    for name in EX09 {
        let out = run(name, &[]);
        let mut want = vec!["Next value: Hello world!", "Translation: ¡Hola Mundo!"];
        want.extend(EX09_SERVER);
        assert_lines(name, &out, &want);
    }
}

/// Examples 09 and 09scch as two processes: the flush request and response cross
/// between them.
#[test]
fn ex09_as_two_processes() {
    for name in EX09 {
        let (mut server, port, lines) = start_server(name, &[]);
        let out = run(name, &["client", host(), &port]);
        assert_lines(name, &out, &["Next value: Hello world!", "Translation: ¡Hola Mundo!"]);
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        assert!(server.wait().unwrap().success(), "{name}: {rest:?}");
        assert_eq!(rest, EX09_SERVER, "{name}");
    }
}

/// Example 07 with librpma's script's words: the client reads `used` (16, the offset
/// of the log's data), the server prints the words it appended.
#[test]
fn ex07_atomic_write() {
    let out = run("07-atomic-write", &[]);
    assert_lines("07", &out, &["used value: 16"]);
    let words: Vec<&str> = out.lines().filter(|l| l.ends_with("_word")).collect();
    assert_eq!(words, ["1st_word", "2nd_word", "3rd_word"], "{out}");
}

/// Example 07 as two processes with words of the client's command line.
#[test]
fn ex07_as_two_processes() {
    let (mut server, port, lines) = start_server("07-atomic-write", &[]);
    let out = run("07-atomic-write", &["client", host(), &port, "alpha", "beta"]);
    assert_lines("07 client", &out, &["used value: 16"]);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(server.wait().unwrap().success(), "{rest:?}");
    assert_eq!(rest, ["alpha", "beta"]);
}

#[test]
fn ex04_write_to_persistent() {
    let out = run("04-write-to-persistent", &[]);
    assert_lines("04", &out, &["Next value: Hello world!", "New value: Hello world!"]);
}

#[test]
fn ex08_messages_ping_pong() {
    let out = run("08-messages-ping-pong", &[]);
    // Client: sends 7, gets 8, sends 8, gets 9; server: the reverse.
    let count = |l: &str| out.lines().filter(|x| *x == l).count();
    assert_eq!(count("Value sent: 7"), 1, "{out}");
    assert_eq!(count("Value received: 7"), 1, "{out}");
    assert_eq!(count("Value sent: 8"), 2, "{out}");
    assert_eq!(count("Value received: 8"), 2, "{out}");
    assert_eq!(count("Value sent: 9"), 1, "{out}");
    assert_eq!(count("Value received: 9"), 1, "{out}");
}

/// Example 08srq in its three modes (receives completing to the SRQ's receive CQ, the
/// connection's main CQ, the connection's receive CQ): three round trips from seed 7.
#[test]
fn ex08srq_messages_ping_pong_with_srq() {
    for mode in [&[][..], &["m"], &["r"]] {
        let out = run("08srq-simple-messages-ping-pong-with-srq", mode);
        let count = |l: &str| out.lines().filter(|x| *x == l).count();
        for (line, n) in [("Value sent: 7", 1), ("Value received: 7", 1), ("Value sent: 8", 2), ("Value received: 8", 2)] {
            assert_eq!(count(line), n, "{mode:?} {line}: {out}");
        }
        for (line, n) in [("Value sent: 9", 2), ("Value received: 9", 2), ("Value sent: 10", 1), ("Value received: 10", 1)] {
            assert_eq!(count(line), n, "{mode:?} {line}: {out}");
        }
    }
}

/// Example 08srq as two processes, the server in mode `r`.
#[test]
fn ex08srq_as_two_processes() {
    let exe = examples_dir().join("08srq-simple-messages-ping-pong-with-srq");
    let mut server = Command::new("timeout")
        .arg("120")
        .arg(&exe)
        .args(["server", host(), "0", "r"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the server");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line from the server").unwrap();
    let port = first.strip_prefix(format!("Waiting for incoming connection on {}:", host()).as_str()).unwrap_or_else(|| panic!("{first}"));
    let out = run("08srq-simple-messages-ping-pong-with-srq", &["client", host(), port, "40", "2"]);
    assert_lines("08srq client", &out, &["Value sent: 40", "Value received: 41", "Value sent: 41", "Value received: 42"]);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(server.wait().unwrap().success(), "{rest:?}");
    assert_eq!(rest, ["Value received: 40", "Value sent: 41", "Value received: 41", "Value sent: 42"]);
}

/// Starts `name` as a server on an ephemeral port of [`host`]'s address with the extra
/// arguments `args`; returns it, the port (from its "Waiting for incoming connection"
/// line) and its further stdout lines.
fn start_server(
    name: &str,
    args: &[&str],
) -> (
    std::process::Child,
    String,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut server = Command::new("timeout")
        .arg("120")
        .arg(examples_dir().join(name))
        .args(["server", host(), "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the server");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line from the server").unwrap();
    let port = first
        .strip_prefix(format!("Waiting for incoming connection on {}:", host()).as_str())
        .unwrap_or_else(|| panic!("{first}"));
    (server, port.to_string(), lines)
}

/// Examples 06 and 06scch (a shared completion channel per connection) in one
/// process: the server and three clients one after another.
#[test]
fn ex06_multiple_connections() {
    for example in ["06-multiple-connections", "06scch-multiple-connections"] {
        let out = run(example, &[]);
        assert_lines(example, &out, &["Today I have got in touch with:"]);
        for name in ["Piotr", "Tomasz", "Xiaoran"] {
            assert_lines(
                example,
                &out,
                &[&format!("My names is: {name}"), &format!("- {name}")],
            );
        }
    }
}

/// Examples 06 and 06scch as processes, as librpma's script runs them: one server
/// (idle timeout 2 s: process starts under load), clients with seeds 8, 9, 11 and 12
/// one after another; the server greets each, in order, then ends.
#[test]
fn ex06_as_processes() {
    ex06_processes("06-multiple-connections");
    ex06_processes("06scch-multiple-connections");
}

fn ex06_processes(example: &str) {
    let (mut server, port, lines) = start_server(example, &["2"]);
    let mut names = Vec::new();
    for seed in ["8", "9", "11", "12"] {
        let out = run(example, &["client", host(), &port, seed]);
        let name = out
            .lines()
            .find_map(|l| l.strip_prefix("My names is: "))
            .unwrap_or_else(|| panic!("{out}"));
        names.push(format!("- {name}"));
    }
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(server.wait().unwrap().success(), "{rest:?}");
    assert_eq!(rest[0], "Today I have got in touch with:");
    assert_eq!(rest[1..], names[..]);
}

/// The values a client of example 13 starting at `seed` sends and receives in 3
/// rounds, in its lines' words.
fn ex13_client_lines(seed: u64) -> Vec<String> {
    (seed..seed + 3)
        .flat_map(|v| {
            [
                format!("value sent: {v}"),
                format!("value received: {}", v + 1),
            ]
        })
        .collect()
}

/// The words after `] ` of the lines of `out` that start with `prefix`.
fn tails<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_once("] ").map(|(_, t)| t))
        .collect()
}

/// Checks the server's lines of example 13 after three clients of 3 rounds from
/// `seeds`: each value answered once, on the connection it came on.
fn ex13_check_server(out: &str, seeds: &[u64]) {
    assert_lines(
        "13 server",
        out,
        &[
            "The client #3 has been connected.",
            "Server ended listening.",
        ],
    );
    for &seed in seeds {
        for v in seed..seed + 3 {
            let got: Vec<&str> = out
                .lines()
                .filter(|l| l.starts_with(&format!("[server] value received: {v} ")))
                .collect();
            assert_eq!(got.len(), 1, "{v}: {out}");
            let qp = got[0].rsplit_once(' ').unwrap().1;
            assert_lines(
                "13 server",
                out,
                &[&format!(
                    "[server] value sent: {} from the connection {qp}",
                    v + 1
                )],
            );
        }
    }
}

/// Example 13 in one process: the server (timeout 1 s) and three clients in parallel.
#[test]
fn ex13_messages_ping_pong_with_srq() {
    let out = run("13-messages-ping-pong-with-srq", &[]);
    ex13_check_server(&out, &[1, 5, 10]);
    for seed in [1, 5, 10] {
        let thread = format!("/client{seed}]");
        let mine: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("[client #") && l.contains(&thread))
            .collect();
        let got: Vec<&str> = mine
            .iter()
            .filter_map(|l| l.split_once("] ").map(|(_, t)| t))
            .collect();
        assert_eq!(got, ex13_client_lines(seed), "{out}");
    }
}

/// Example 13 as processes, as librpma's script runs it: a server (timeout 2 s: process
/// starts under load) and three clients started together (seeds 1, 5, 10; 3 rounds).
#[test]
fn ex13_as_processes() {
    let (mut server, port, lines) = start_server("13-messages-ping-pong-with-srq", &["2"]);
    let clients: Vec<_> = [1u64, 5, 10]
        .into_iter()
        .map(|seed| {
            let port = port.clone();
            std::thread::spawn(move || {
                (
                    seed,
                    run(
                        "13-messages-ping-pong-with-srq",
                        &["client", host(), &port, &seed.to_string(), "3"],
                    ),
                )
            })
        })
        .collect();
    for c in clients {
        let (seed, out) = c.join().unwrap();
        assert_eq!(tails(&out, "[client #"), ex13_client_lines(seed), "{out}");
    }
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(server.wait().unwrap().success(), "{rest:?}");
    ex13_check_server(&rest.join("\n"), &[1, 5, 10]);
}

#[test]
fn ex10_send_with_imm() {
    let out = run("10-send-with-imm", &[]);
    assert_lines(
        "10",
        &out,
        &["Sending value '1st_word' with immediate data '1234'", "Received value '1st_word' with immediate data '1234'"],
    );
}

#[test]
fn ex11_write_with_imm() {
    let out = run("11-write-with-imm", &[]);
    assert_lines("11", &out, &["The value '1234' was written together with immediate data '1234'"]);
}

/// Examples 12 and 12scch (receive CQ; and with a shared completion channel): start 7,
/// 3 rounds, so two round trips.
#[test]
fn ex12_receive_completion_queue() {
    for name in ["12-receive-completion-queue", "12scch-receive-completion-queue"] {
        let out = run(name, &[]);
        let want = [
            "CLIENT: Value sent: 7",
            "SERVER: Value received: 7",
            "SERVER: Value sent: 8",
            "CLIENT: Value received: 8",
            "CLIENT: Value sent: 8",
            "SERVER: Value received: 8",
            "SERVER: Value sent: 9",
            "CLIENT: Value received: 9",
        ];
        let mut got: Vec<&str> = out.lines().collect();
        got.sort_unstable();
        let mut want = want.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "{name}:\n{out}");
    }
}

/// Example 10 as two processes: the server on an ephemeral port (found from its
/// "Waiting for incoming connection" line), the client with its own arguments (a
/// 0-byte send with immediate data 77).
#[test]
fn ex10_as_two_processes() {
    let exe = examples_dir().join("10-send-with-imm");
    let mut server = Command::new("timeout")
        .arg("120")
        .arg(&exe)
        .args(["server", host(), "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the server");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line from the server").unwrap();
    let port = first.strip_prefix(format!("Waiting for incoming connection on {}:", host()).as_str()).unwrap_or_else(|| panic!("{first}"));
    let out = run("10-send-with-imm", &["client", host(), port, "77"]);
    assert_lines("10 client", &out, &["Sending immediate data '77'"]);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(server.wait().unwrap().success(), "{rest:?}");
    assert_eq!(rest, ["Received value '' with immediate data '77'"]);
}

#[test]
fn readme_example_runs() {
    let out = run("readme", &[]);
    assert_lines("readme", &out, &["New value: Hello world!"]);
}

/// The README's librpma snippet is the text between the markers of
/// `examples/readme.rs`, line for line (the README fences it `ignore`: its snippets are
/// doctests of crate `rverbs`, which does not depend on this crate).
#[test]
fn readme_snippet_is_the_example() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(crate_dir.join("examples/readme.rs")).unwrap();
    let body = example.split("// README begin\n").nth(1).and_then(|s| s.split("// README end\n").next()).expect("markers");
    let readme = std::fs::read_to_string(crate_dir.join("../../README.md")).unwrap();
    let block = readme
        .split("```rust,ignore\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("rverbs_rpma"))
        .expect("the README has an rverbs_rpma snippet");
    assert_eq!(block, body);
}
