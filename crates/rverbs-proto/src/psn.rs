//! 24-bit packet sequence numbers (IBTA vol. 1, ch. 9; rxe `psn_compare` in `rxe_verbs.h`).

/// A packet sequence number: 24 bits, arithmetic modulo 2^24.
///
/// Ordering between two PSNs is only meaningful within ±2^23 of each other, as in
/// the IBTA and rxe's `psn_compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The mask of the 24 significant bits.
    pub const MASK: u32 = 0x00ff_ffff;

    /// A PSN from the low 24 bits of `raw` (higher bits are dropped, as
    /// `ibv_modify_qp(3)` does with `sq_psn`/`rq_psn`).
    pub const fn new(raw: u32) -> Self {
        Psn(raw & Self::MASK)
    }

    /// The 24-bit value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// This PSN plus `n`, wrapping at 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// The signed distance `self - other` in the 24-bit circle, in −2^23..2^23.
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }
}

impl PartialOrd for Psn {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).add(1).get(), 0);
        assert_eq!(Psn::new(0x1ff_fffe).get(), 0xff_fffe);
    }

    #[test]
    fn psn_order_is_circular() {
        let a = Psn::new(0xff_fff0);
        let b = a.add(0x20);
        assert_eq!(b.get(), 0x10);
        assert!(a < b);
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
    }
}
