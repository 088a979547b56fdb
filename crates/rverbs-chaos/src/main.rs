//! `rverbs-chaos`: the roles of the chaos harnesses (tests/chaos/hostile_net.sh, exhaustion.sh, soak.sh).
//!
//! ```text
//! rverbs-chaos victim   --dir D --local IP_A --peer IP_B --attacker IP_C [--ctl-port P] [--seed S] [--seconds T]
//! rverbs-chaos peer     --dir D --local IP_B --victim IP_A [--min-rounds N] [--stall-ms MS] [--seconds T]
//! rverbs-chaos attack   --local IP_C --victim IP_A [--ctl-port P] --seed S --count N [--seconds T]
//! rverbs-chaos exhaust  --dir RUNTIME_DIR [--max N]      (tests/chaos/exhaustion.sh)
//! rverbs-chaos soak     --dir D [--workers N] [--qps Q] [--ops K] [--seed S] [--seconds T]
//!                       [--ns-a A --ns-b B --ip-a IP --ip-b IP --rt-a DIR --rt-b DIR]   (tests/chaos/soak.sh)
//! rverbs-chaos soak-worker --dir D --rank R --local IP [the soak's options]  (started by `soak`)
//! ```
//!
//! Each prints its counts (lines starting `VICTIM`, `PEER`, `ATTACK`, `EXHAUST`, `SOAK`) and exits 0 when its
//! checks pass, 1 otherwise (`FAIL why` on stderr).
#![deny(unsafe_code)]

mod attack;
mod common;
mod exhaust;
mod peer;
mod region;
mod soak;
mod victim;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(role) = args.first() else {
        eprintln!("usage: rverbs-chaos victim|peer|attack|exhaust|soak|soak-worker --option value...");
        return ExitCode::from(2);
    };
    let run = match role.as_str() {
        "victim" => victim::run,
        "peer" => peer::run,
        "attack" => attack::run,
        "exhaust" => exhaust::run,
        "soak" => soak::driver,
        "soak-worker" => soak::worker,
        _ => {
            eprintln!("unknown role {role}");
            return ExitCode::from(2);
        }
    };
    match common::Args::parse(&args[1..]).and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAIL {role}: {e}");
            ExitCode::from(1)
        }
    }
}
