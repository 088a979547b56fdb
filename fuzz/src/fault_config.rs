//! `fault_config`: `RVERBS_FAULTS`, the environment variable every process using the
//! UDP transport reads, through `FaultConfig::parse` and into an injector that sends
//! packets with it.
//!
//! Input: the variable's value (non-UTF-8 values are what `std::env::var` refuses before
//! the parser, so they are skipped).
//!
//! Asserts: the parser never panics; what it accepts has probabilities in `[0, 1]`; an
//! injector built from it sends, holds and releases packets without panicking (the first
//! send is at "now", as the UDP transport's send path does) and never loses a copy it
//! did not count as dropped. The verbs' fault plan of the same value
//! (`VerbPlan::parse`, every item kind: `fail=` of the verbs and of the rdma_cm calls,
//! `wc=`, `event=`, `wc_delay=`): never panics; a plan it accepts decides failures,
//! completions, holds and events for calls of every verb without panicking, and a decision only ever names an
//! item of the plan (an event only ever one of the verbs its item names).

use std::time::{Duration, Instant};

use rverbs_proto::fault::{FaultConfig, Injector};
use rverbs_proto::verb_fault::{Decider, Verb, VerbPlan};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(spec) = std::str::from_utf8(data) else { return };
    if let Ok(plan) = VerbPlan::parse(spec) {
        let mut d = Decider::new(plan.clone());
        for (i, verb) in Verb::ALL.into_iter().cycle().take(64).enumerate() {
            let hit = match i % 5 {
                0 => d.complete(i as u32, i as u64),
                1 => d.raise(verb, Some(i as u32), Some(i as u64)),
                2 => d.hold(i as u32, i as u64),
                _ => d.fail(verb, Some(i as u32), Some(i as u64)),
            };
            if let Some(h) = hit {
                assert!(plan.items.iter().any(|it| it.text == h.item && it.effect == h.effect), "{h:?}");
                if let rverbs_proto::verb_fault::Effect::Raise(event, on) = h.effect {
                    assert!(event.verbs().contains(&on) && on == verb, "{h:?}");
                }
            }
        }
    }
    let Ok(cfg) = FaultConfig::parse(spec) else { return };
    for p in [cfg.drop, cfg.duplicate, cfg.reorder, cfg.corrupt] {
        assert!((0.0..=1.0).contains(&p), "{cfg:?}");
    }
    let mut inj: Injector<Vec<u8>> = Injector::new(cfg);
    let now = Instant::now();
    for i in 0..8u8 {
        inj.send(now + Duration::from_micros(u64::from(i)), vec![i; 16]);
    }
    let s = inj.stats();
    assert_eq!(s.sent, 8);
    let held = inj.len() as u64;
    assert_eq!(held, s.sent - s.dropped + s.duplicated);
    let _ = inj.poll_timeout();
    let mut out = 0;
    while let Some(at) = inj.poll_timeout() {
        assert!(
            inj.pop_due(at).is_some(),
            "a packet due at its own deadline is released"
        );
        out += 1;
    }
    assert_eq!(out, held);
    assert!(inj.is_empty());
}
