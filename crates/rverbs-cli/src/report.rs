//! perftest-style result tables.

use crate::perf::Measurement;

/// Prints a table of `rows` under `title`, with `note` (what `t_avg` means here) below;
/// latency tests add the median, 99th and 99.9th percentiles of the time per message.
pub fn table(title: &str, note: &str, rows: &[Measurement]) {
    println!("{title}");
    let percentiles = rows.iter().any(|r| r.latency.is_some());
    print!(
        " {:>9}  {:>12}  {:>15}  {:>12}  {:>14}",
        "#bytes", "#iterations", "BW avg[MiB/s]", "t_avg[usec]", "MsgRate[Mpps]"
    );
    if percentiles {
        print!("  {:>12}  {:>12}  {:>14}  {:>12}", "t_p50[usec]", "t_p99[usec]", "t_p99.9[usec]", "t_max[usec]");
    }
    println!();
    for r in rows {
        print!(
            " {:>9}  {:>12}  {:>15.2}  {:>12.3}  {:>14.6}",
            r.bytes,
            r.iters,
            r.bw_mib_s(),
            r.t_avg_us(),
            r.msg_rate_mpps()
        );
        if let Some(l) = r.latency {
            print!("  {:>12.3}  {:>12.3}  {:>14.3}  {:>12.3}", l.p50_us, l.p99_us, l.p999_us, l.max_us);
        }
        println!();
    }
    if !note.is_empty() {
        println!(" ({note})");
    }
}

/// Prints the verdict line of a part: PASS with `detail`, or FAIL with the reason.
pub fn verdict<E: std::fmt::Display>(part: &str, result: &Result<String, E>) {
    match result {
        Ok(detail) => println!(" verdict {part}: PASS - {detail}"),
        Err(e) => println!(" verdict {part}: FAIL - {e}"),
    }
    println!();
}
