//! The latency histogram of a QP's statistics (docs/device.md, "Per-QP and per-CQ
//! statistics"): fixed log-linear buckets that the owner counts into with relaxed atomic
//! adds in the shared `stats` segment, and their percentiles, which a reader computes
//! through an HDR histogram ([`hdrhistogram`]).
//!
//! Buckets: values below 16 ns have one bucket each; above, every power of two is cut
//! into 8 equal buckets (a value is known to 1/8 of its power of two: within 12.5 %, the
//! precision of an HDR histogram with one significant digit); values from 2^36 ns (about
//! 69 s) on join the last bucket. The segment keeps counts only: the HDR histogram is
//! built by the reader, each bucket's count at the bucket's midpoint, so a percentile is
//! exact to the bucket's width.

use std::sync::atomic::{AtomicU64, Ordering};

/// Values below this many nanoseconds have a bucket each.
const EXACT: u64 = 16;
/// Buckets per power of two above [`EXACT`] (a power of two).
const PER_OCTAVE: usize = 8;
/// log2 of [`PER_OCTAVE`].
const SUB_BITS: u32 = 3;
/// The first power of two past the last cut one: values from 2^`TOP` share the last bucket.
const TOP: u32 = 36;
/// The number of buckets.
pub(crate) const BUCKETS: usize = EXACT as usize + (TOP - EXACT.trailing_zeros()) as usize * PER_OCTAVE;

/// The bucket of `ns` nanoseconds.
#[inline]
pub(crate) fn bucket(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let octave = 63 - ns.leading_zeros(); // >= log2(EXACT)
    if octave >= TOP {
        return BUCKETS - 1;
    }
    let sub = (ns >> (octave - SUB_BITS)) as usize & (PER_OCTAVE - 1);
    EXACT as usize + (octave - EXACT.trailing_zeros()) as usize * PER_OCTAVE + sub
}

/// The values of bucket `i`: its lowest value and its width (values `low..low + width`).
pub(crate) fn bounds(i: usize) -> (u64, u64) {
    if i < EXACT as usize {
        return (i as u64, 1);
    }
    let octave = (i - EXACT as usize) / PER_OCTAVE + EXACT.trailing_zeros() as usize;
    let sub = ((i - EXACT as usize) % PER_OCTAVE) as u64;
    let width = 1u64 << (octave as u32 - SUB_BITS);
    ((PER_OCTAVE as u64 + sub) * width, width)
}

/// One QP's buckets in the shared segment, `BUCKETS` counters (a whole number of cache
/// lines).
#[repr(C)]
pub(crate) struct LatencyRecord {
    counts: [AtomicU64; BUCKETS],
}

// SAFETY: `#[repr(C)]` array of `AtomicU64`, no padding: every bit pattern is a valid
// value and all mutation goes through the atomics.
unsafe impl super::ShmSafe for LatencyRecord {}

const _: () = assert!(std::mem::size_of::<LatencyRecord>().is_multiple_of(64));

impl LatencyRecord {
    /// Counts one latency of `ns` nanoseconds (the owner only; relaxed).
    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        self.counts[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// Zeroes every bucket (a QP slot starting again).
    pub(crate) fn clear(&self) {
        for c in &self.counts {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// A snapshot of the counts.
    pub(crate) fn snapshot(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }
}

/// A latency distribution in nanoseconds: how many values were counted and their
/// percentiles (read from an HDR histogram built from the device's buckets, so each
/// value is exact to within 1/8 of its power of two, and exact below 16 ns). All zero
/// when nothing was counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Latency {
    /// The number of values counted.
    pub count: u64,
    /// The smallest (its bucket's midpoint).
    pub min_ns: u64,
    /// The median.
    pub p50_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// The 99.9th percentile.
    pub p999_ns: u64,
    /// The largest (its bucket's midpoint).
    pub max_ns: u64,
}

impl Latency {
    /// The distribution of the bucket counts `counts` (indexed as [`bucket`]).
    pub(crate) fn from_buckets(counts: &[u64; BUCKETS]) -> Latency {
        let Ok(mut h) = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << (TOP + 1), 2) else {
            return Latency::default();
        };
        for (i, &n) in counts.iter().enumerate() {
            if n != 0 {
                let (low, width) = bounds(i);
                // Saturates at the histogram's top rather than failing (a peer's garbage).
                h.saturating_record_n(low + width / 2, n);
            }
        }
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }

    /// Each figure with its name (the field's), in the fields' order: what `rverbs stat
    /// --qp` prints after a prefix naming the distribution.
    pub fn named(&self) -> [(&'static str, u64); 6] {
        [
            ("count", self.count),
            ("min_ns", self.min_ns),
            ("p50_ns", self.p50_ns),
            ("p99_ns", self.p99_ns),
            ("p999_ns", self.p999_ns),
            ("max_ns", self.max_ns),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_once_in_order() {
        assert_eq!(BUCKETS, 272);
        let mut next = 0u64;
        for i in 0..BUCKETS {
            let (low, width) = bounds(i);
            assert_eq!(low, next, "bucket {i} starts where the previous ends");
            assert_eq!(bucket(low), i);
            assert_eq!(bucket(low + width - 1), i);
            assert!(width == 1 || width * 8 <= low, "bucket {i} is within 1/8 of its values");
            next = low + width;
        }
        assert_eq!(next, 1 << TOP);
        assert_eq!(bucket(1 << TOP), BUCKETS - 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_come_from_the_buckets() {
        let mut counts = [0u64; BUCKETS];
        // 990 values of 1000 ns, 9 of 50 µs, one of 2 ms.
        counts[bucket(1000)] = 990;
        counts[bucket(50_000)] = 9;
        counts[bucket(2_000_000)] = 1;
        let l = Latency::from_buckets(&counts);
        assert_eq!(l.count, 1000);
        let near = |v: u64, want: u64| v.abs_diff(want) * 8 <= want;
        assert!(near(l.min_ns, 1000) && near(l.p50_ns, 1000), "{l:?}");
        assert!(near(l.p99_ns, 1000), "the 990th of 1000 is still 1000 ns: {l:?}");
        assert!(near(l.p999_ns, 50_000), "{l:?}");
        assert!(near(l.max_ns, 2_000_000), "{l:?}");
        assert_eq!(Latency::from_buckets(&[0; BUCKETS]), Latency::default());
    }

    #[test]
    fn small_values_are_exact() {
        let mut counts = [0u64; BUCKETS];
        counts[bucket(0)] = 1;
        counts[bucket(7)] = 1;
        let l = Latency::from_buckets(&counts);
        assert_eq!((l.count, l.min_ns, l.max_ns), (2, 0, 7));
    }
}
