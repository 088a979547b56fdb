//! The criterion benches of `rverbs`' data path: `benches/cq_poll.rs` (ibv_poll_cq(3)
//! on empty, batched and extended CQs) and `benches/rc_loopback.rs` (post + poll of RC
//! WRITEs and SENDs between two QPs of one process), run with
//! `cargo bench -p rverbs-bench`; `benches/reps.py` repeats them and keeps the medians.
//! Their figures are in BENCHMARKS.md. The crate has no code of its own: it exists so
//! that `rverbs`' examples and tests build without criterion.
