//! The device clock behind completion timestamps.
//!
//! Rule: ibv_create_cq_ex(3): `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` reads the completion
//! time in HCA clock units, whose frequency is `hca_core_clock` (kHz) in
//! ibv_query_device_ex(3); `..._WALLCLOCK` converts it to wall-clock nanoseconds.
//! The rverbs clock is CLOCK_MONOTONIC in nanoseconds (1 000 000 kHz), and wall-clock
//! nanoseconds are derived from it with the offset between the two clocks measured
//! when the device starts, so both fields describe the same instant.

use std::sync::OnceLock;

use rustix::time::{clock_gettime, ClockId};

/// The device clock: CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn device_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn realtime_ns() -> u64 {
    let t = clock_gettime(ClockId::Realtime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Wall clock minus device clock, measured once.
fn offset() -> u64 {
    static OFFSET: OnceLock<u64> = OnceLock::new();
    *OFFSET.get_or_init(|| realtime_ns().wrapping_sub(device_ns()))
}

/// Wall-clock nanoseconds of a device timestamp.
pub fn to_wallclock_ns(device_ns: u64) -> u64 {
    device_ns.wrapping_add(offset())
}

/// The values of ibv_query_rt_values_ex(3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtValues {
    /// The device clock (HCA clock units = nanoseconds).
    pub raw_clock_ns: u64,
    /// The same instant as wall-clock nanoseconds since the Unix epoch.
    pub wallclock_ns: u64,
}

/// Reads the device clock now.
pub fn rt_values() -> RtValues {
    let raw = device_ns();
    RtValues { raw_clock_ns: raw, wallclock_ns: to_wallclock_ns(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_clock_is_monotonic_and_wallclock_tracks_realtime() {
        let a = rt_values();
        let b = rt_values();
        assert!(b.raw_clock_ns >= a.raw_clock_ns);
        let real = realtime_ns();
        // Same instant within a generous second.
        assert!(real.abs_diff(b.wallclock_ns) < 1_000_000_000);
    }
}
