//! libFuzzer entry of the `wire_parse` target; the harness is `rverbs_fuzz::wire_parse`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::wire_parse::run(data));
