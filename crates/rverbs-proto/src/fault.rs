//! A deterministic fault injector for packet transports: drop, duplicate, reorder, delay
//! and corrupt, each at its own rate, from a seed, so that any failure reproduces.
//!
//! The UDP transport puts one [`Injector`] on its send path (configured by the
//! `RVERBS_FAULTS` environment variable, [`FaultConfig::parse`], or the Rust API); the
//! protocol tests put one on each direction of a simulated link (`rc/sim.rs`). netem does
//! the same on a Linux link, but needs root and a kernel module, and rxe has no injector.
//!
//! Like the rest of the crate it reads no clock: packets go in with the caller's `now`,
//! [`Injector::poll_timeout`] says when the next one is due, [`Injector::pop_due`] hands
//! it out. With every rate at zero and no delay, packets come out at once and in order.

use core::fmt;
use std::time::{Duration, Instant};

/// splitmix64: small, seedable, good enough for fault injection.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (never for `p` ≤ 0, always for `p` ≥ 1).
    pub fn chance(&mut self, p: f64) -> bool {
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        p > 0.0 && x < p
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// The faults of one injector. Rates are probabilities per packet, applied in this order:
/// drop; else duplicate (two copies go on); each copy is corrupted with its rate, delayed
/// by `delay`, and held back by up to `reorder_by` more with the `reorder` rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// Seed of the random sequence.
    pub seed: u64,
    /// Probability that a packet is lost.
    pub drop: f64,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability that a copy is held back by a random extra delay up to `reorder_by`.
    pub reorder: f64,
    /// The longest extra delay of a reordered copy.
    pub reorder_by: Duration,
    /// Probability that one bit of a copy is flipped.
    pub corrupt: f64,
    /// Delay added to every copy.
    pub delay: Duration,
}

impl FaultConfig {
    /// No faults: every packet delivered once, at once, in order.
    pub const NONE: FaultConfig = FaultConfig {
        seed: 0,
        drop: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_by: Duration::from_micros(100),
        corrupt: 0.0,
        delay: Duration::ZERO,
    };

    /// The longest `delay` and `reorder_by`: longer ones are refused by
    /// [`FaultConfig::parse`] and cut to this by [`Injector::new`].
    ///
    /// Rule: a packet's due time is its send time plus these, which must not overflow an
    /// `Instant` (`RVERBS_FAULTS=delay=18446744073709551615s` parsed, and the transport's
    /// first send then panicked; found writing the `fault_config` fuzz target). An hour is
    /// far beyond any retransmission timeout, so nothing longer is of use.
    pub const MAX_DELAY: Duration = Duration::from_secs(3600);

    /// Whether this configuration changes nothing.
    pub fn is_none(&self) -> bool {
        self.drop <= 0.0 && self.duplicate <= 0.0 && self.reorder <= 0.0 && self.corrupt <= 0.0 && self.delay.is_zero()
    }

    /// Parses `key=value` pairs separated by commas, the format of `RVERBS_FAULTS`:
    /// `seed` (integer), `drop`, `dup`, `reorder`, `corrupt` (probabilities in `[0, 1]`,
    /// or percentages with a `%` suffix), `delay` and `reorder_by` (durations with a
    /// `ns`, `us`, `ms` or `s` suffix). Unnamed keys keep [`FaultConfig::NONE`]'s values.
    /// The items of the verbs' fault plan (`fail=…`, `wc=…`, `wc_delay=…`, `event=…`,
    /// [`is_verb_plan_key`]) are skipped: `verb_fault::VerbPlan::parse` reads them.
    /// Example: `seed=7,drop=1%,dup=0.5%,reorder=5%,reorder_by=200us,corrupt=1%`.
    ///
    /// Errors: an unknown key, a value that does not parse, a probability outside
    /// `[0, 1]`, a duration above [`FaultConfig::MAX_DELAY`].
    pub fn parse(spec: &str) -> Result<FaultConfig, FaultParseError> {
        let mut c = FaultConfig::NONE;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || FaultParseError(item.to_string());
            let (key, value) = item.split_once('=').ok_or_else(bad)?;
            let (key, value) = (key.trim(), value.trim());
            if is_verb_plan_key(key) {
                continue;
            }
            match key {
                "seed" => c.seed = value.parse().map_err(|_| bad())?,
                "drop" => c.drop = probability(value).ok_or_else(bad)?,
                "dup" | "duplicate" => c.duplicate = probability(value).ok_or_else(bad)?,
                "reorder" => c.reorder = probability(value).ok_or_else(bad)?,
                "corrupt" => c.corrupt = probability(value).ok_or_else(bad)?,
                "delay" => c.delay = duration(value).ok_or_else(bad)?,
                "reorder_by" => c.reorder_by = duration(value).ok_or_else(bad)?,
                _ => return Err(bad()),
            }
        }
        Ok(c)
    }
}

fn probability(v: &str) -> Option<f64> {
    let p = match v.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().ok()? / 100.0,
        None => v.parse::<f64>().ok()?,
    };
    (0.0..=1.0).contains(&p).then_some(p)
}

fn duration(v: &str) -> Option<Duration> {
    let (num, unit) = v.find(|c: char| c.is_ascii_alphabetic()).map(|i| v.split_at(i))?;
    let n: u64 = num.trim().parse().ok()?;
    let d = match unit {
        "ns" => Duration::from_nanos(n),
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        _ => return None,
    };
    (d <= FaultConfig::MAX_DELAY).then_some(d)
}

/// Whether `key` names an item of the verbs' fault plan in a `RVERBS_FAULTS` spec
/// (`fail`, `wc`, `event`, `wc_delay`): the one list of those keys, which the packet parser skips and
/// `verb_fault::VerbPlan::parse` reads.
pub fn is_verb_plan_key(key: &str) -> bool {
    matches!(key.trim(), "fail" | "wc" | "event" | "wc_delay")
}

/// A fault specification that did not parse; holds the offending item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultParseError(pub String);

impl fmt::Display for FaultParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad fault injection item `{}` (expected seed=N, drop|dup|reorder|corrupt=P or P%, delay|reorder_by=Nus, fail=VERB:ERRNO[:…], wc=STATUS[:…], event=EVENT[:…])", self.0)
    }
}

impl std::error::Error for FaultParseError {}

/// What an injector did, counted per fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets handed to [`Injector::send`].
    pub sent: u64,
    /// Lost.
    pub dropped: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Copies held back.
    pub reordered: u64,
    /// Copies with a flipped bit.
    pub corrupted: u64,
}

/// A packet the injector can corrupt.
pub trait Corrupt {
    /// Flips one bit chosen by `random` (any 64 random bits).
    fn corrupt(&mut self, random: u64);
}

impl Corrupt for Vec<u8> {
    fn corrupt(&mut self, random: u64) {
        if self.is_empty() {
            return;
        }
        let bit = random % (self.len() as u64 * 8);
        self[(bit / 8) as usize] ^= 1 << (bit % 8);
    }
}

/// One direction of faults: packets in with [`Injector::send`], out when due with
/// [`Injector::pop_due`]. Copies due at the same instant leave in the order they entered.
#[derive(Clone, Debug)]
pub struct Injector<P> {
    cfg: FaultConfig,
    rng: Rng,
    queue: Vec<(Instant, u64, P)>,
    seq: u64,
    stats: FaultStats,
}

impl<P: Clone + Corrupt> Injector<P> {
    /// An injector applying `cfg`, its random sequence fixed by `cfg.seed`; `delay` and
    /// `reorder_by` are cut to [`FaultConfig::MAX_DELAY`].
    pub fn new(cfg: FaultConfig) -> Injector<P> {
        let cfg = FaultConfig {
            delay: cfg.delay.min(FaultConfig::MAX_DELAY),
            reorder_by: cfg.reorder_by.min(FaultConfig::MAX_DELAY),
            ..cfg
        };
        Injector { cfg, rng: Rng::new(cfg.seed), queue: Vec::new(), seq: 0, stats: FaultStats::default() }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// What the injector did so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Takes a packet sent at `now` and applies the faults to it.
    pub fn send(&mut self, now: Instant, packet: P) {
        self.stats.sent += 1;
        if self.rng.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut p = packet.clone();
            if self.rng.chance(self.cfg.corrupt) {
                self.stats.corrupted += 1;
                p.corrupt(self.rng.next_u64());
            }
            let mut at = now + self.cfg.delay;
            if self.rng.chance(self.cfg.reorder) {
                self.stats.reordered += 1;
                let by = self.cfg.reorder_by.as_nanos() as u64;
                at += Duration::from_nanos(self.rng.below(by + 1));
            }
            self.seq += 1;
            self.queue.push((at, self.seq, p));
        }
    }

    /// When the next packet is due, if any is held.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.queue.iter().map(|(at, _, _)| *at).min()
    }

    /// The next packet due at `now`: the earliest, ties in the order they entered.
    pub fn pop_due(&mut self, now: Instant) -> Option<P> {
        let (i, _) = self
            .queue
            .iter()
            .enumerate()
            .filter(|(_, (at, _, _))| *at <= now)
            .min_by_key(|(_, (at, seq, _))| (*at, *seq))?;
        Some(self.queue.swap_remove(i).2)
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no packet is held.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: FaultConfig, n: u8) -> (Vec<Vec<u8>>, FaultStats) {
        let t0 = Instant::now();
        let mut inj = Injector::new(cfg);
        for i in 0..n {
            inj.send(t0 + Duration::from_micros(u64::from(i)), vec![i; 4]);
        }
        let mut out = Vec::new();
        while let Some(at) = inj.poll_timeout() {
            while let Some(p) = inj.pop_due(at) {
                out.push(p);
            }
        }
        (out, inj.stats())
    }

    #[test]
    fn no_faults_delivers_everything_once_in_order() {
        let (out, stats) = run(FaultConfig::NONE, 200);
        assert_eq!(out, (0..200).map(|i| vec![i; 4]).collect::<Vec<_>>());
        assert_eq!(stats, FaultStats { sent: 200, ..FaultStats::default() });
        assert!(FaultConfig::NONE.is_none());
    }

    #[test]
    fn same_seed_same_faults_other_seed_other_faults() {
        let cfg = FaultConfig { seed: 42, drop: 0.1, duplicate: 0.1, reorder: 0.2, corrupt: 0.1, ..FaultConfig::NONE };
        assert_eq!(run(cfg, 250), run(cfg, 250));
        assert_ne!(run(cfg, 250).0, run(FaultConfig { seed: 43, ..cfg }, 250).0);
    }

    #[test]
    fn drop_rate_loses_about_that_share() {
        let cfg = FaultConfig { seed: 1, drop: 0.1, ..FaultConfig::NONE };
        let t0 = Instant::now();
        let mut inj = Injector::new(cfg);
        for _ in 0..10_000 {
            inj.send(t0, vec![0u8]);
        }
        let s = inj.stats();
        assert!((800..=1200).contains(&s.dropped), "{s:?}");
        assert_eq!(inj.len() as u64, 10_000 - s.dropped);
    }

    #[test]
    fn duplicates_arrive_twice_and_reorder_only_permutes() {
        let cfg = FaultConfig { seed: 9, duplicate: 0.2, reorder: 0.3, ..FaultConfig::NONE };
        let (out, stats) = run(cfg, 200);
        assert_eq!(out.len() as u64, 200 + stats.duplicated);
        assert!(stats.duplicated > 0 && stats.reordered > 0);
        let mut firsts: Vec<u8> = out.iter().map(|p| p[0]).collect();
        assert_ne!(firsts.windows(2).filter(|w| w[0] > w[1]).count(), 0, "some packets overtaken");
        firsts.sort();
        firsts.dedup();
        assert_eq!(firsts, (0..200).collect::<Vec<_>>(), "every packet arrives");
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let cfg = FaultConfig { seed: 5, corrupt: 1.0, ..FaultConfig::NONE };
        let (out, stats) = run(cfg, 50);
        assert_eq!(stats.corrupted, 50);
        for (i, p) in out.iter().enumerate() {
            let flipped: u32 = p.iter().map(|b| (b ^ i as u8).count_ones()).sum();
            assert_eq!(flipped, 1, "packet {i}: {p:?}");
        }
    }

    #[test]
    fn delay_holds_packets_until_due() {
        let cfg = FaultConfig { delay: Duration::from_millis(3), ..FaultConfig::NONE };
        let t0 = Instant::now();
        let mut inj = Injector::new(cfg);
        inj.send(t0, vec![1u8]);
        assert_eq!(inj.pop_due(t0 + Duration::from_millis(2)), None);
        assert_eq!(inj.poll_timeout(), Some(t0 + Duration::from_millis(3)));
        assert_eq!(inj.pop_due(t0 + Duration::from_millis(3)), Some(vec![1u8]));
    }

    #[test]
    fn parse_reads_the_environment_format() {
        let c = FaultConfig::parse("seed=7, drop=1%,dup=0.005,reorder=5%,reorder_by=200us,corrupt=1%,delay=2ms").unwrap();
        assert_eq!(c.seed, 7);
        assert!((c.drop - 0.01).abs() < 1e-12 && (c.duplicate - 0.005).abs() < 1e-12);
        assert!((c.reorder - 0.05).abs() < 1e-12 && (c.corrupt - 0.01).abs() < 1e-12);
        assert_eq!((c.reorder_by, c.delay), (Duration::from_micros(200), Duration::from_millis(2)));
        assert_eq!(FaultConfig::parse("").unwrap(), FaultConfig::NONE);
        for bad in ["drop", "drop=2", "drop=-1%", "loss=1%", "delay=5", "delay=5h", "seed=x"] {
            let e = FaultConfig::parse(bad).unwrap_err();
            assert_eq!(e.0, bad, "{bad}");
        }
    }

    /// Found writing the `fault_config` fuzz target: `RVERBS_FAULTS=delay=18446744073709551615s`
    /// parsed, and the first send panicked adding the delay to `now` (and a `reorder_by`
    /// of `u64::MAX` ns overflowed the random extra delay's bound).
    #[test]
    fn delays_beyond_max_are_refused_or_cut() {
        assert!(FaultConfig::parse("delay=18446744073709551615s").is_err());
        assert!(FaultConfig::parse("reorder=1,reorder_by=18446744073709551615ns").is_err());
        assert!(FaultConfig::parse("delay=3601s").is_err());
        assert_eq!(FaultConfig::parse("delay=3600s").unwrap().delay, FaultConfig::MAX_DELAY);
        let cfg = FaultConfig { delay: Duration::MAX, reorder: 1.0, reorder_by: Duration::MAX, ..FaultConfig::NONE };
        let mut inj: Injector<Vec<u8>> = Injector::new(cfg);
        assert_eq!((inj.config().delay, inj.config().reorder_by), (FaultConfig::MAX_DELAY, FaultConfig::MAX_DELAY));
        let now = Instant::now();
        inj.send(now, vec![1]);
        let at = inj.poll_timeout().expect("held");
        assert!(at >= now + FaultConfig::MAX_DELAY && at <= now + 2 * FaultConfig::MAX_DELAY);
        assert_eq!(inj.pop_due(at), Some(vec![1]));
    }
}
