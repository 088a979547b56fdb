//! libFuzzer entry of the `fault_config` target; the harness is `rverbs_fuzz::fault_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::fault_config::run(data));
