//! What the three roles share: the seeded generator, the byte patterns of canaries and
//! regions, the files of the work directory, bounded waits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The fault injector's SplitMix64 (`rverbs_proto::fault::Rng`): small, seedable,
/// reproducible across runs and machines.
#[derive(Debug, Clone)]
pub struct Rng(rverbs_proto::fault::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(rverbs_proto::fault::Rng::new(seed ^ 0x5eed_c4a0_5000_0001))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    /// `n` random bytes, none of them [`CANARY_MARKER`]'s first byte, so that what an
    /// attacker writes can never be mistaken for a leaked canary.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).map(|b| if b == CANARY_MARKER[0] { 0x11 } else { b }).collect()
    }
}

/// The first four bytes of every 8-byte canary block: a READ response (or any datagram
/// the victim sends) holding them carries canary memory.
pub const CANARY_MARKER: [u8; 4] = [0xca, 0x4e, 0x52, 0x59];

/// Byte `i` of a canary: blocks of the marker and the block's index.
pub fn canary_byte(i: usize) -> u8 {
    match i % 8 {
        k @ 0..=3 => CANARY_MARKER[k],
        k => ((i / 8) >> (8 * (k - 4))) as u8,
    }
}

/// Byte `i` of a region's initial contents: below 0xc0, so never the marker's first byte.
pub fn region_byte(i: usize) -> u8 {
    ((i * 7 + 3) % 0xc0) as u8
}

/// Whether `bytes` holds the canary marker.
pub fn has_marker(bytes: &[u8]) -> bool {
    bytes.windows(CANARY_MARKER.len()).any(|w| w == CANARY_MARKER)
}

/// The bytes the legitimate peer writes in round `k`.
pub fn legit_pattern(k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (k.wrapping_mul(131) as usize + j * 13 + 5) as u8).collect()
}

/// A `key=value` file, written whole under a temporary name and renamed, so a reader
/// never sees half of it.
pub fn write_info(path: &Path, kv: &[(&str, u64)]) -> std::io::Result<()> {
    let text: String = kv.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

pub fn parse_info(text: &str) -> BTreeMap<String, u64> {
    text.lines().filter_map(|l| l.split_once('=')).filter_map(|(k, v)| Some((k.to_owned(), v.trim().parse().ok()?))).collect()
}

/// Waits for `path` to exist (bounded by `limit`), polling: the other process creates
/// it with a rename, so its existence is the readiness.
pub fn wait_file(path: &Path, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        if Instant::now() >= deadline {
            return Err(format!("{} did not appear within {limit:?}", path.display()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Reads the info file `path` once it exists.
pub fn read_info(path: &Path, limit: Duration) -> Result<BTreeMap<String, u64>, String> {
    wait_file(path, limit)?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(parse_info(&text))
}

pub fn get(m: &BTreeMap<String, u64>, k: &str) -> Result<u64, String> {
    m.get(k).copied().ok_or_else(|| format!("info file has no {k}"))
}

/// `--name value` options.
pub struct Args(BTreeMap<String, String>);

impl Args {
    pub fn parse(args: &[String]) -> Result<Args, String> {
        let mut m = BTreeMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let k = a.strip_prefix("--").ok_or_else(|| format!("unexpected argument {a}"))?;
            let v = it.next().ok_or_else(|| format!("--{k} needs a value"))?;
            m.insert(k.to_owned(), v.clone());
        }
        Ok(Args(m))
    }

    pub fn str(&self, k: &str) -> Result<&str, String> {
        self.0.get(k).map(String::as_str).ok_or_else(|| format!("--{k} is required"))
    }

    pub fn path(&self, k: &str) -> Result<PathBuf, String> {
        Ok(PathBuf::from(self.str(k)?))
    }

    pub fn num(&self, k: &str, default: u64) -> Result<u64, String> {
        match self.0.get(k) {
            None => Ok(default),
            Some(v) => match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|e| format!("--{k} {v}: {e}")),
        }
    }

    pub fn ip(&self, k: &str) -> Result<std::net::Ipv4Addr, String> {
        self.str(k)?.parse().map_err(|e| format!("--{k}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canaries_are_recognised_and_nothing_else_is() {
        let canary: Vec<u8> = (0..4096).map(canary_byte).collect();
        assert!(has_marker(&canary[8..16]));
        assert!(!has_marker(&canary[4..8]), "half a block carries no marker");
        let region: Vec<u8> = (0..1 << 16).map(region_byte).collect();
        assert!(!has_marker(&region));
        let mut rng = Rng::new(7);
        assert!(!rng.bytes(1 << 16).contains(&CANARY_MARKER[0]));
    }

    #[test]
    fn the_generator_is_reproducible() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert_eq!((0..8).map(|_| a.next_u64()).collect::<Vec<_>>(), (0..8).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
