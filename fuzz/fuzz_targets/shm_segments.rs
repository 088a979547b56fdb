//! libFuzzer entry of the `shm_segments` target; the harness is `rverbs_fuzz::shm_segments`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::shm_segments::run(data));
