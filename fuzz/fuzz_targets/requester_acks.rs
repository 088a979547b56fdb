//! libFuzzer entry of the `requester_acks` target; the harness is `rverbs_fuzz::requester_acks`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::requester_acks::run(data));
