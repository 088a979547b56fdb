//! libFuzzer entry of the `cm_mad` target; the harness is `rverbs_fuzz::cm_mad`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::cm_mad::run(data));
