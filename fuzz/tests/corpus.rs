//! Replays, without libFuzzer, every seed the generator builds, every file of the
//! committed corpora (`fuzz/corpus/<target>/`) and every crash input kept as a regression
//! (`fuzz/regressions/<target>/`) through the harness of its target.
//!
//! `RVERBS_FUZZ_WRITE_SEEDS=1 cargo test --manifest-path fuzz/Cargo.toml` (re)writes the
//! generated seeds into `fuzz/corpus/`.

use std::path::Path;

fn harness(target: &str) -> fn(&[u8]) {
    match target {
        "wire_parse" => rverbs_fuzz::wire_parse::run,
        "responder" => rverbs_fuzz::responder::run,
        "requester_acks" => rverbs_fuzz::requester_acks::run,
        "cm_mad" => rverbs_fuzz::cm_mad::run,
        "fault_config" => rverbs_fuzz::fault_config::run,
        "pcap_read" => rverbs_fuzz::pcap_read::run,
        "udp_rx" => rverbs_fuzz::udp_rx::run,
        "shm_segments" => rverbs_fuzz::shm_segments::run,
        "capi_structs" => rverbs_fuzz::capi_structs::run,
        "config" => rverbs_fuzz::config::run,
        "log_filter" => rverbs_fuzz::log_filter::run,
        "neigh" => rverbs_fuzz::neigh::run,
        "capi_send" => rverbs_fuzz::capi_send::run,
        other => panic!("no harness for {other}"),
    }
}

#[test]
fn generated_seeds_run_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let write = std::env::var_os("RVERBS_FUZZ_WRITE_SEEDS").is_some_and(|v| v == "1");
    let seeds = rverbs_fuzz::seeds::all();
    for target in [
        "wire_parse",
        "responder",
        "requester_acks",
        "cm_mad",
        "fault_config",
        "pcap_read",
        "udp_rx",
        "shm_segments",
        "capi_structs",
        "config",
        "log_filter",
        "neigh",
        "capi_send",
    ] {
        assert!(seeds.iter().any(|s| s.0 == target), "no seed for {target}");
    }
    for (target, name, bytes) in &seeds {
        harness(target)(bytes);
        if write {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}

#[test]
fn committed_corpora_and_regressions_run_clean() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut ran = 0;
    for kind in ["corpus", "regressions"] {
        let Ok(targets) = std::fs::read_dir(base.join(kind)) else {
            continue;
        };
        for t in targets {
            let t = t.unwrap();
            let run = harness(t.file_name().to_str().unwrap());
            for f in std::fs::read_dir(t.path()).unwrap() {
                let f = f.unwrap().path();
                let bytes = std::fs::read(&f).unwrap();
                eprintln!("{}", f.display());
                run(&bytes);
                ran += 1;
            }
        }
    }
    assert!(ran > 0, "no committed corpus");
}
