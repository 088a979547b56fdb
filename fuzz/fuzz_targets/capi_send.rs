//! libFuzzer entry of the `capi_send` target; the harness is `rverbs_fuzz::capi_send`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::capi_send::run(data));
