//! libFuzzer entry of the `udp_rx` target; the harness is `rverbs_fuzz::udp_rx`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::udp_rx::run(data));
