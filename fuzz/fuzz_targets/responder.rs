//! libFuzzer entry of the `responder` target; the harness is `rverbs_fuzz::responder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::responder::run(data));
