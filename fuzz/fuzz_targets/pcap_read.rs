//! libFuzzer entry of the `pcap_read` target; the harness is `rverbs_fuzz::pcap_read`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_fuzz::pcap_read::run(data));
