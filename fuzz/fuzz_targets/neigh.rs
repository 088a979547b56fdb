//! libFuzzer entry of the `neigh` target; the harness is `rverbs_fuzz::neigh`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::neigh::run(data));
