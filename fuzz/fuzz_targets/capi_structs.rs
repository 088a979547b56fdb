//! libFuzzer entry of the `capi_structs` target; the harness is `rverbs_fuzz::capi_structs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::capi_structs::run(data));
