//! `rverbs`: the command-line tool of the rverbs soft RDMA device.
//!
//! - `rverbs devinfo [-v]` prints the device as `ibv_devinfo` does.
//! - `rverbs demo` (also what plain `rverbs` runs) needs no configuration: it connects two
//!   RC QPs inside this process and runs a SEND/RECV ping-pong, an RDMA WRITE bandwidth
//!   sweep, and RDMA READ and atomic checks, printing perftest-style tables and one
//!   verdict per part. It exits non-zero if any completion or data check fails.
//! - `rverbs pingpong` and `rverbs write-bw` run one of those parts with chosen sizes and
//!   iteration counts.
//! - `rverbs stat [--json]` prints the hardware counters of every process using the
//!   device, as `rdma statistic show` prints a port's (`stat`; docs/device.md, "Hardware counters");
//!   `rverbs stat --qp [--json]` the counts of every live QP of the processes that count
//!   them (`RVERBS_STATS=1`), as `rdma statistic qp show`, with send-latency
//!   percentiles; `--cq` every live CQ's (docs/device.md, "Per-QP and per-CQ statistics").
//! - `rverbs run [--sanitize[=abort]] [--faults SPEC] -- PROGRAM [ARGS…]` runs an
//!   unmodified program on the drop-in libraries, with the paths of a kernel RDMA device
//!   it may look for in a private mount namespace (`run`, `namespace`; docs/environment.md,
//!   "The launcher: rverbs run").
//!
//! Every figure printed comes from a timed loop over the safe `rverbs` API; nothing here
//! touches registered memory except through `Mr::read`/`Mr::write`.
// Only `namespace` (unshare(2)) has an `unsafe` block.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod devinfo;
mod failure;
mod namespace;
mod pair;
mod pci;
mod perf;
mod report;
mod run;
mod stat;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use failure::Failure;
use perf::{Measurement, WriteBw};

/// RDMA verbs in user space: inspect and exercise the built-in rverbs device.
#[derive(Debug, Parser)]
#[command(name = "rverbs", version, about, after_help = "Without a command, rverbs runs `demo`.")]
struct Cli {
    /// What to run (default: demo).
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the device like ibv_devinfo.
    Devinfo {
        /// Also print device limits, port details and the GID table.
        #[arg(short, long)]
        verbose: bool,
        /// Only this device (default: every device).
        #[arg(short = 'd', long = "ib-dev")]
        device: Option<String>,
        /// Only list device names.
        #[arg(short, long)]
        list: bool,
    },
    /// Zero-configuration self-test: ping-pong, WRITE bandwidth, READ and atomics over two
    /// RC QPs in this process.
    Demo,
    /// SEND/RECV ping-pong between two RC QPs in this process.
    Pingpong {
        /// Message sizes in bytes (suffixes K and M; comma-separated or repeated).
        #[arg(short, long, value_delimiter = ',', value_parser = parse_size, default_value = "8")]
        size: Vec<usize>,
        /// Round trips per size.
        #[arg(short = 'n', long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        iters: u64,
    },
    /// RDMA WRITE bandwidth between two RC QPs in this process.
    WriteBw {
        /// Message sizes in bytes (suffixes K and M; comma-separated or repeated).
        #[arg(short, long, value_delimiter = ',', value_parser = parse_size, default_value = "64,4K,64K,1M")]
        size: Vec<usize>,
        /// WRITEs per size (default: 1 GiB worth, between 1000 and 100000).
        #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
        iters: Option<u64>,
        /// WRITEs kept outstanding.
        #[arg(short, long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
        window: u32,
        /// Signal every N-th WRITE.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
        cq_mod: u32,
    },
    /// Print the hardware counters of every process that has the device open, like
    /// `rdma statistic show` (rxe's counter names; docs/device.md, "Hardware counters").
    Stat {
        /// Print one JSON array, like `rdma -j statistic show`.
        #[arg(long)]
        json: bool,
        /// Print one line per live QP of the processes that count statistics
        /// (`RVERBS_STATS=1`), like `rdma statistic qp show`, with the percentiles of
        /// its send latency.
        #[arg(long, conflicts_with = "cq")]
        qp: bool,
        /// Print one line per live CQ of the processes that count statistics: its size,
        /// what was polled, its deepest poll and whether it overran.
        #[arg(long)]
        cq: bool,
    },
    /// Run an unmodified program on the drop-in libibverbs.so.1 and librdmacm.so.1, with
    /// the device's /dev and /sys entries in a private mount namespace.
    #[command(after_help = run::AFTER_HELP)]
    Run(run::RunArgs),
    /// The GID table as `rverbs run` needs it (internal: `run` calls it in a child process).
    #[command(name = run::SYSFS_ATTRS, hide = true)]
    SysfsAttrs,
}

/// The device's name (the one `rverbs devinfo` lists).
const DEVICE_NAME: &str = "rverbs0";

/// Parses `4096`, `4K`, `4KiB`, `1M`, `1MiB` (binary multiples).
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, mult) = match t.find(|c: char| !c.is_ascii_digit()) {
        None => (t, 1),
        Some(i) => {
            let mult = match t[i..].to_ascii_lowercase().as_str() {
                "k" | "kib" | "kb" => 1 << 10,
                "m" | "mib" | "mb" => 1 << 20,
                "g" | "gib" | "gb" => 1 << 30,
                other => return Err(format!("unknown size suffix '{other}'")),
            };
            (&t[..i], mult)
        }
    };
    let n: usize = digits.parse().map_err(|e| format!("'{s}': {e}"))?;
    let bytes = n.checked_mul(mult).ok_or_else(|| format!("'{s}' is too large"))?;
    // A message is at most the device's max_msg_sz (ibv_query_port(3)), checked here so
    // that a size the device refuses is an error at once, not after registering it.
    let max = rverbs::limits::MAX_MSG_SZ as usize;
    match bytes {
        0 => Err("a message size must be at least 1 byte".into()),
        b if b > max => Err(format!("'{s}' is {b} bytes, above the device's max_msg_sz of {max}")),
        b => Ok(b),
    }
}

/// Default WRITE count for `size`: 1 GiB worth, clamped to [1000, 100000].
fn default_write_iters(size: usize) -> u64 {
    ((1u64 << 30) / size.max(1) as u64).clamp(1_000, 100_000)
}

/// Demo: ping-pong round trips per size.
const DEMO_PINGPONG_ITERS: u64 = 10_000;
/// Demo: ping-pong sizes.
const DEMO_PINGPONG_SIZES: [usize; 2] = [8, 4096];
/// Demo: WRITE sizes.
const DEMO_WRITE_SIZES: [usize; 4] = [64, 4096, 64 << 10, 1 << 20];
/// Demo: WRITE window and signaling interval.
const DEMO_WINDOW: u32 = 64;
/// Demo: signal every 16th WRITE.
const DEMO_CQ_MOD: u32 = 16;
/// Demo: READ sizes and count.
const DEMO_READ_SIZES: [usize; 3] = [8, 4096, 64 << 10];
/// Demo: READs per size.
const DEMO_READ_ITERS: u64 = 2_000;
/// Demo: fetch-and-adds.
const DEMO_ATOMIC_ITERS: u64 = 10_000;

/// Runs `f` for each size, stopping at the first failure.
fn sweep(
    sizes: &[usize],
    f: impl Fn(usize) -> Result<Measurement, Failure>,
) -> Result<Vec<Measurement>, Failure> {
    sizes.iter().map(|&s| f(s)).collect()
}

/// Prints a part's table (whatever was measured before a failure) and its verdict;
/// returns whether it passed.
fn part(
    label: &str,
    title: &str,
    note: &str,
    result: Result<Vec<Measurement>, Failure>,
    pass: impl Fn(&[Measurement]) -> String,
) -> bool {
    let verdict = result.map(|rows| {
        report::table(title, note, &rows);
        pass(&rows)
    });
    if verdict.is_err() {
        println!("{title}");
    }
    report::verdict(label, &verdict);
    verdict.is_ok()
}

fn demo() -> Result<bool, Failure> {
    // Show what is being connected (a throw-away pair, so every part starts clean).
    let probe = pair::Pair::connect(&pair::PairConfig {
        mr_len: 4096,
        max_send_wr: 1,
        max_recv_wr: 1,
    })?;
    println!(
        "rverbs demo: device {}, two RC QPs in one process over GID[{}] {} (path MTU 4096)",
        probe.a.ctx.device_name(),
        probe.gid_index,
        probe.gid
    );
    println!();
    drop(probe);

    let mut ok = true;
    ok &= part(
        "(a)",
        &format!("(a) SEND/RECV ping-pong, {DEMO_PINGPONG_ITERS} round trips per size"),
        "t_avg = round trip / 2, as perftest *_lat; BW and MsgRate count both directions",
        sweep(&DEMO_PINGPONG_SIZES, |s| {
            perf::pingpong(s, DEMO_PINGPONG_ITERS)
        }),
        |rows| {
            let msgs: u64 = rows.iter().map(|r| r.messages).sum();
            format!("{msgs} messages, every completion succeeded, every stamp and both last messages matched")
        },
    );
    ok &= part(
        "(b)",
        &format!(
            "(b) RDMA WRITE bandwidth, window {DEMO_WINDOW}, every {DEMO_CQ_MOD}th WRITE signaled"
        ),
        "t_avg = wall time / WRITEs at that window (not a latency)",
        sweep(&DEMO_WRITE_SIZES, |s| {
            perf::write_bw(WriteBw {
                size: s,
                iters: default_write_iters(s),
                window: DEMO_WINDOW,
                cq_mod: DEMO_CQ_MOD,
            })
        }),
        |rows| {
            let bytes: u64 = rows.iter().map(|r| r.bytes as u64 * r.messages).sum();
            format!("{} MiB written, each destination equal to its source byte for byte, guard bytes untouched", bytes >> 20)
        },
    );
    ok &= part(
        "(c) READ",
        &format!("(c) RDMA READ latency, {DEMO_READ_ITERS} READs per size, one outstanding"),
        "t_avg = post + completion of one READ",
        sweep(&DEMO_READ_SIZES, |s| perf::read_lat(s, DEMO_READ_ITERS)),
        |_| "the bytes read equal the remote buffer byte for byte".to_string(),
    );
    ok &= part(
        "(c) atomics",
        &format!("(c) atomic fetch-and-add x {DEMO_ATOMIC_ITERS}, then compare-and-swap (match, mismatch)"),
        "t_avg = post + completion of one fetch-and-add",
        perf::atomics(DEMO_ATOMIC_ITERS).map(|m| vec![m]),
        |_| {
            format!("{DEMO_ATOMIC_ITERS} fetch-and-adds each returned the previous value; CAS swapped on match, not on mismatch")
        },
    );
    println!(
        "{}",
        if ok {
            "demo: all parts passed"
        } else {
            "demo: FAILED"
        }
    );
    Ok(ok)
}

fn run(command: Command) -> Result<bool, Failure> {
    match command {
        Command::Devinfo {
            verbose,
            device,
            list,
        } => {
            let devices = rverbs::devices()?;
            if list {
                let n = devices.len();
                println!("{n} HCA{} found:", if n == 1 { "" } else { "s" });
                for d in &devices {
                    println!("\t{}", d.name());
                }
                println!();
                return Ok(true);
            }
            let chosen: Vec<_> = match &device {
                Some(name) => vec![rverbs::device_by_name(name)
                    .map_err(|_| Failure::Usage(format!("IB device '{name}' wasn't found")))?],
                None => devices,
            };
            if chosen.is_empty() {
                return Err(Failure::Usage("No IB devices found".into()));
            }
            for d in chosen {
                devinfo::print(&d.open()?, verbose)?;
            }
            Ok(true)
        }
        Command::Demo => demo(),
        Command::Pingpong { size, iters } => Ok(part(
            "pingpong",
            &format!("SEND/RECV ping-pong, {iters} round trips per size"),
            "t_avg = round trip / 2, as perftest *_lat; BW and MsgRate count both directions",
            sweep(&size, |s| perf::pingpong(s, iters)),
            |_| "every completion succeeded, every stamp and both last messages matched".into(),
        )),
        Command::WriteBw {
            size,
            iters,
            window,
            cq_mod,
        } => Ok(part(
            "write-bw",
            &format!("RDMA WRITE bandwidth, window {window}, every {cq_mod}th WRITE signaled"),
            "t_avg = wall time / WRITEs at that window (not a latency)",
            sweep(&size, |s| {
                perf::write_bw(WriteBw {
                    size: s,
                    iters: iters.unwrap_or_else(|| default_write_iters(s)),
                    window,
                    cq_mod,
                })
            }),
            |_| "each destination equal to its source byte for byte, guard bytes untouched".into(),
        )),
        Command::Stat { json, qp: true, .. } => {
            stat::print_objects(DEVICE_NAME, stat::Kind::Qp, json);
            Ok(true)
        }
        Command::Stat { json, cq: true, .. } => {
            stat::print_objects(DEVICE_NAME, stat::Kind::Cq, json);
            Ok(true)
        }
        Command::Stat { json, .. } => {
            stat::print(DEVICE_NAME, json);
            Ok(true)
        }
        Command::SysfsAttrs => run::print_sysfs_attrs().map(|()| true).map_err(Failure::from),
        Command::Run(_) => unreachable!("main handles run"),
    }
}

fn main() -> ExitCode {
    let command = Cli::parse().command.unwrap_or(Command::Demo);
    if let Command::Run(args) = command {
        return run::launch(args);
    }
    match run(command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rverbs: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(parse_size("2G"), Ok(1 << 31));
        assert!(parse_size("3G").unwrap_err().contains("max_msg_sz"));
    }

    #[test]
    fn counts_of_zero_are_refused() {
        for args in [&["rverbs", "write-bw", "-n", "0"][..], &["rverbs", "pingpong", "-n", "0"], &["rverbs", "write-bw", "-w", "0"]] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
        assert!(Cli::try_parse_from(["rverbs", "pingpong", "-s", "3G"]).is_err());
        assert!(Cli::try_parse_from(["rverbs", "write-bw", "-n", "1"]).is_ok());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn every_demo_part_passes_with_small_counts() {
        let m = perf::pingpong(8, 50).unwrap();
        assert_eq!(m.messages, 100);
        let l = m.latency.expect("ping-pong reports percentiles");
        assert!(0.0 < l.p50_us && l.p50_us <= l.p99_us && l.p99_us <= l.p999_us && l.p999_us <= l.max_us, "{l:?}");
        assert_eq!(perf::pingpong(4096, 10).unwrap().messages, 20);
        assert_eq!(perf::pingpong(1, 10).unwrap().messages, 20);
        for size in [1, 64, 4096, 100_000] {
            let m = perf::write_bw(WriteBw {
                size,
                iters: 100,
                window: 8,
                cq_mod: 16,
            })
            .unwrap();
            assert_eq!(m.messages, 100);
            assert_eq!(m.latency, None, "a bandwidth test has no per-message times");
        }
        assert!(perf::read_lat(4096, 10).unwrap().latency.is_some());
        assert!(perf::atomics(100).unwrap().latency.is_some());
    }
}
