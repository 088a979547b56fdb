//! libFuzzer entry of the `config` target; the harness is `rverbs_fuzz::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::config::run(data));
