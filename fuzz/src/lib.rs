//! The harnesses behind the libFuzzer targets of `fuzz_targets/`, one module per target.
//!
//! Each target binary is one line, `fuzz_target!(|data| rverbs_fuzz::<target>::run(data))`;
//! the logic lives here so that plain `cargo test` (stable, no sanitizer, no libFuzzer
//! driver) replays the committed seed corpora and the regression inputs through the very
//! same code (see `tests/corpus.rs`), and so that the seeds are generated from the crates'
//! own emitters (`seeds`), not written by hand.
//!
//! Every harness asserts more than "no panic": a round trip where an emitter exists, an
//! independent recomputation of the ICRC, and, for the transport machines, that nothing
//! they plan touches a byte outside what the driver said exists.

pub mod capi_send;
pub mod capi_structs;
pub mod cm_mad;
pub mod config;
pub mod fault_config;
pub mod input;
pub mod log_filter;
pub mod neigh;
pub mod pcap_read;
pub mod requester_acks;
pub mod responder;
pub mod seeds;
pub mod shm_segments;
pub mod udp_rx;
pub mod wire_parse;
