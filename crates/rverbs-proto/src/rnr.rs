//! RNR NAK timer codes and the transport timeout (ibv_modify_qp(3); rxe `rxe_qp.c`,
//! `rxe_comp.c` `rnrnak_usec`).

use core::time::Duration;

/// Microseconds of each 5-bit RNR timer code (IBTA table 45; code 0 is the longest).
const RNR_USEC: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
    3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
    163_840, 245_760, 327_680, 491_520,
];

/// How long a requester waits after an RNR NAK carrying timer `code`
/// (`min_rnr_timer` of the responder, ibv_modify_qp(3)). Only the low 5 bits count.
pub const fn rnr_delay(code: u8) -> Duration {
    Duration::from_micros(RNR_USEC[(code & 0x1f) as usize] as u64)
}

/// The local ACK timeout of `ibv_qp_attr.timeout`: 4.096 µs × 2^timeout, or `None`
/// for 0, which means wait forever (ibv_modify_qp(3)). Only the low 5 bits count.
pub const fn ack_timeout(timeout: u8) -> Option<Duration> {
    let t = timeout & 0x1f;
    if t == 0 {
        None
    } else {
        Some(Duration::from_nanos(4096u64 << t))
    }
}

/// A retry counter as IBTA defines `retry_cnt` and `rnr_retry` (3 bits each).
///
/// Rule: ibv_modify_qp(3): `rnr_retry` 7 means retry forever. `retry_cnt` 7 means seven
/// retries (IBTA); rxe treats it as infinite too (`rxe_comp.c`).
/// Deviation: rverbs follows IBTA for `retry_cnt`, so that a dead peer ends in
/// `RETRY_EXC_ERR` instead of a hang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryCounter {
    initial: u8,
    left: u8,
    infinite: bool,
}

impl RetryCounter {
    /// A counter for `rnr_retry` (7 = infinite).
    pub const fn rnr(value: u8) -> Self {
        let v = value & 7;
        RetryCounter { initial: v, left: v, infinite: v == 7 }
    }

    /// A counter for `retry_cnt` (7 = seven retries, see the type doc).
    pub const fn transport(value: u8) -> Self {
        let v = value & 7;
        RetryCounter { initial: v, left: v, infinite: false }
    }

    /// A counter for `retry_cnt` with rxe's reading of 7: retry forever
    /// (docs/rocev2-wire.md §3.1, "rxe quirk").
    ///
    /// Deviation: not the rverbs default (see [`RetryCounter::transport`]); offered so a
    /// transport can match rxe exactly where a peer relies on it.
    pub const fn transport_rxe(value: u8) -> Self {
        let v = value & 7;
        RetryCounter { initial: v, left: v, infinite: v == 7 }
    }

    /// Uses one retry: `true` if a retry is allowed, `false` once the counter is exhausted.
    pub fn consume(&mut self) -> bool {
        if self.infinite {
            return true;
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// Refills the counter after progress (rxe `reset_retry_counters`): the count
    /// is of consecutive failures.
    pub fn reset(&mut self) {
        self.left = self.initial;
    }

    /// Retries left (`None` when infinite).
    pub const fn left(&self) -> Option<u8> {
        if self.infinite {
            None
        } else {
            Some(self.left)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rnr_table_matches_ibta() {
        assert_eq!(rnr_delay(0), Duration::from_micros(655_360));
        assert_eq!(rnr_delay(1), Duration::from_micros(10));
        assert_eq!(rnr_delay(12), Duration::from_micros(640));
        assert_eq!(rnr_delay(25), Duration::from_micros(61_440));
        assert_eq!(rnr_delay(31), Duration::from_micros(491_520));
        assert_eq!(rnr_delay(32 + 1), Duration::from_micros(10));
    }

    #[test]
    fn ack_timeout_is_4096ns_times_power_of_two() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4096 << 14)));
    }

    #[test]
    fn rnr_retry_seven_is_infinite() {
        let mut c = RetryCounter::rnr(7);
        for _ in 0..1000 {
            assert!(c.consume());
        }
        assert_eq!(c.left(), None);
    }

    #[test]
    fn retry_cnt_seven_is_seven_retries() {
        let mut c = RetryCounter::transport(7);
        for _ in 0..7 {
            assert!(c.consume());
        }
        assert!(!c.consume());
        c.reset();
        assert_eq!(c.left(), Some(7));
    }

    #[test]
    fn retry_cnt_seven_is_infinite_the_rxe_way() {
        let mut c = RetryCounter::transport_rxe(7);
        for _ in 0..1000 {
            assert!(c.consume());
        }
        let mut c = RetryCounter::transport_rxe(2);
        assert!(c.consume() && c.consume() && !c.consume());
    }

    #[test]
    fn zero_retries_fail_at_once() {
        assert!(!RetryCounter::rnr(0).consume());
        assert!(!RetryCounter::transport(0).consume());
    }
}
