//! perftest-style result tables.

use crate::perf::Measurement;

/// Prints a table of `rows` under `title`, with `note` (what `t_avg` means here) below.
pub fn table(title: &str, note: &str, rows: &[Measurement]) {
    println!("{title}");
    println!(
        " {:>9}  {:>12}  {:>15}  {:>12}  {:>14}",
        "#bytes", "#iterations", "BW avg[MiB/s]", "t_avg[usec]", "MsgRate[Mpps]"
    );
    for r in rows {
        println!(
            " {:>9}  {:>12}  {:>15.2}  {:>12.3}  {:>14.6}",
            r.bytes,
            r.iters,
            r.bw_mib_s(),
            r.t_avg_us(),
            r.msg_rate_mpps()
        );
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
