//! libFuzzer entry of the `log_filter` target; the harness is `rverbs_fuzz::log_filter`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::log_filter::run(data));
