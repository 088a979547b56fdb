//! Whether the application busy-polls a device's CQs (docs/progress-and-events.md,
//! "Busy-polling applications"; issue 24).
//!
//! A busy poller's empty polls receive from the network themselves
//! (`progress::receive_inline`). While it polls, the progress thread leaves the sockets to
//! it instead of waking for each datagram (standing by), and its receives hold plain ACKs
//! for its next requests (docs/network.md, "Coalesced ACKs"). `RVERBS_BUSY_POLL=1` says the
//! application busy-polls, `0` or `off` that it does not; by default ([`Mode::Detect`]) a
//! device finds out: an application thread whose empty polls receive inline again and
//! again, never more than [`GAP`] apart, for [`RUN`], busy-polls, until it pauses longer
//! than [`QUIET`] or waits for an event ([`BusyPolling::end`]).
//!
//! Rule: standing by is bounded. The progress thread stands by only while an application
//! thread received inline within [`STANDBY`], so a datagram nobody polls for waits
//! [`STANDBY`] at most; arming a CQ or waiting for an event (completion channel,
//! asynchronous events, the connection manager) ends it at once.
//!
//! Every field is a relaxed atomic shared by the application's threads: two threads that
//! poll at once may each see the other's time stamp, which only shortens or lengthens a
//! run by one gap. Nothing here decides what is delivered, only which thread receives it
//! and whether an ACK waits for a request to ride with.

#[cfg(rverbs_loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(not(rverbs_loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How recently an application thread must have received inline for the progress thread
/// to leave a readable socket to it, and how long it stays away from the sockets after
/// the last such receive.
pub(crate) const STANDBY: Duration = Duration::from_micros(200);

/// [`Mode::Detect`]: the longest pause between two inline receives of a run that is to
/// make a busy poller ([`RUN`]). A ping-pong's pause is the time it takes to post its next
/// message (a few µs).
pub(crate) const GAP: Duration = STANDBY;

/// [`Mode::Detect`]: how long an application must have received inline without a pause
/// longer than [`GAP`] to count as a busy poller.
pub(crate) const RUN: Duration = Duration::from_millis(1);

/// [`Mode::Detect`]: the pause that ends a busy poller's run once it counts as one. Longer
/// than [`GAP`]: a busy poller that waits for a peer's WRITE spinning on memory pauses as
/// long as the WRITE takes to come, up to [`STANDBY`] when its datagram was left to the
/// thread that does not poll. Ending the run there made one side's progress thread answer
/// at once while the other side stood by, and each such pause the next:
/// `ib_write_lat -s 8` across two namespaces ran at ~20 µs on average, 99th percentile
/// ~150 µs, against ~8 and ~25 with `RVERBS_BUSY_POLL=1` (BENCHMARKS.md, "Busy polling
/// found out").
pub(crate) const QUIET: Duration = Duration::from_millis(10);

/// Who says whether the application busy-polls (`RVERBS_BUSY_POLL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `RVERBS_BUSY_POLL=0` or `off`: never; the progress thread receives every datagram
    /// and no ACK is held.
    Never,
    /// `RVERBS_BUSY_POLL=1`: always; every inline receive holds ACKs, and the sockets wait
    /// one-shot.
    Always,
    /// The default: a run of inline receives of [`RUN`] with no pause over [`GAP`].
    Detect,
}

impl Mode {
    /// The mode of a device setting: `Some(true)` always, `Some(false)` never, `None`
    /// detected.
    pub(crate) fn from_setting(setting: Option<bool>) -> Mode {
        match setting {
            Some(true) => Mode::Always,
            Some(false) => Mode::Never,
            None => Mode::Detect,
        }
    }
}

/// One device's busy-polling state, kept by its progress thread and updated by the
/// application's inline receives. Times are the device clock (`clock::device_ns`).
pub(crate) struct BusyPolling {
    mode: Mode,
    /// When an application thread last received inline (0: not since the last
    /// [`BusyPolling::end`]).
    inline_at: AtomicU64,
    /// When the current run of inline receives (none more than [`GAP`] apart, or
    /// [`QUIET`] once it lasted [`RUN`]) started.
    run_from: AtomicU64,
    /// The progress thread left sockets to the application ([`BusyPolling::leave`]): an
    /// [`BusyPolling::end`] must wake it to watch them again.
    leaving: AtomicBool,
}

impl BusyPolling {
    pub(crate) fn new(mode: Mode) -> BusyPolling {
        BusyPolling { mode, inline_at: AtomicU64::new(0), run_from: AtomicU64::new(0), leaving: AtomicBool::new(false) }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// An application thread found a CQ empty and receives inline at `now` (the caller
    /// skips this with [`Mode::Never`], whose state never changes).
    #[inline]
    pub(crate) fn inline_receive(&self, now: u64) {
        let before = self.inline_at.swap(now, Ordering::Relaxed);
        let run_from = self.run_from.load(Ordering::Relaxed);
        let longest = if before.saturating_sub(run_from) >= RUN.as_nanos() as u64 { QUIET } else { GAP };
        if before == 0 || now.saturating_sub(before) > longest.as_nanos() as u64 {
            self.run_from.store(now, Ordering::Relaxed);
        }
    }

    /// Whether the application busy-polls as of its last inline receive: always with
    /// [`Mode::Always`], after a run of [`RUN`] with [`Mode::Detect`]. An inline receive
    /// that finds this holds the ACKs it produces.
    pub(crate) fn polling(&self) -> bool {
        match self.mode {
            Mode::Never => false,
            Mode::Always => true,
            Mode::Detect => {
                let at = self.inline_at.load(Ordering::Relaxed);
                at != 0 && at.saturating_sub(self.run_from.load(Ordering::Relaxed)) >= RUN.as_nanos() as u64
            }
        }
    }

    /// Whether the progress thread stands by at `now`: the application busy-polls and an
    /// application thread received inline within [`STANDBY`]. If so, for how much longer.
    pub(crate) fn standing_by(&self, now: u64) -> Option<Duration> {
        let at = self.inline_at.load(Ordering::Relaxed);
        if at == 0 || !self.polling() {
            return None;
        }
        let age = Duration::from_nanos(now.saturating_sub(at));
        STANDBY.checked_sub(age).filter(|left| !left.is_zero())
    }

    /// The progress thread has left sockets to the application. Returns whether it still
    /// stands by at `now` once that is said: an [`BusyPolling::end`] before it is seen
    /// here, and one after it sees `leaving` (and wakes the thread).
    pub(crate) fn leave(&self, now: u64) -> Option<Duration> {
        self.leaving.store(true, Ordering::Relaxed);
        // Pairs with the fence in `end`.
        fence(Ordering::SeqCst);
        self.standing_by(now)
    }

    /// The progress thread watches every socket again: an [`BusyPolling::end`] need not
    /// wake it.
    pub(crate) fn watched(&self) {
        self.leaving.store(false, Ordering::Relaxed);
    }

    /// The application waits for an event or arms a CQ: it stops polling, so the run ends
    /// and the progress thread stops standing by. Returns whether the progress thread left
    /// sockets to the application and must be woken to watch them again.
    pub(crate) fn end(&self) -> bool {
        if self.mode == Mode::Never {
            return false;
        }
        self.inline_at.store(0, Ordering::Relaxed);
        // Pairs with the fence in `leave`.
        fence(Ordering::SeqCst);
        self.leaving.load(Ordering::Relaxed)
    }
}

/// The handshake of [`BusyPolling::leave`] and [`BusyPolling::end`] under loom
/// (TESTING.md, "Models": `RUSTFLAGS="--cfg rverbs_loom" cargo test -p rverbs --release
/// --lib busy_poll`).
#[cfg(all(test, rverbs_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    /// Rule: a progress thread that leaves sockets to the application either sees an end
    /// that raced with it (it stops standing by) or is woken by it; never neither, which
    /// would leave the sockets unwatched for up to [`STANDBY`].
    #[test]
    fn an_end_is_seen_by_the_thread_or_wakes_it() {
        loom::model(|| {
            let b = Arc::new(BusyPolling::new(Mode::Always));
            b.inline_receive(1_000);
            let app = {
                let b = b.clone();
                loom::thread::spawn(move || b.end())
            };
            let stands_by = b.leave(1_001).is_some();
            let woken = app.join().expect("app thread");
            assert!(!stands_by || woken, "the thread stands by and the end did not wake it");
        });
    }
}

#[cfg(all(test, not(rverbs_loom)))]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// Inline receives every `step` ns from `from` to `to` (both included).
    fn polls(b: &BusyPolling, from: u64, to: u64, step: u64) {
        let mut t = from;
        while t <= to {
            b.inline_receive(t);
            t += step;
        }
    }

    #[test]
    fn a_run_of_close_inline_receives_is_a_busy_poller_once_it_lasted() {
        let b = BusyPolling::new(Mode::Detect);
        let start = 10_000 * US;
        polls(&b, start, start + 990 * US, 5 * US);
        assert!(!b.polling(), "990 µs of polling is not yet a run");
        assert_eq!(b.standing_by(start + 991 * US), None);
        polls(&b, start + 995 * US, start + 1_000 * US, 5 * US);
        assert!(b.polling(), "1 ms of polls 5 µs apart");
        assert_eq!(b.standing_by(start + 1_050 * US), Some(Duration::from_micros(150)));
        assert_eq!(b.standing_by(start + 1_200 * US), None, "nobody received inline for STANDBY");
    }

    #[test]
    fn a_pause_longer_than_the_gap_starts_a_run_again_and_one_longer_than_quiet_ends_it() {
        let b = BusyPolling::new(Mode::Detect);
        let start = 10_000 * US;
        polls(&b, start, start + 500 * US, 10 * US);
        let resumed = start + 500 * US + GAP.as_nanos() as u64 + 1;
        polls(&b, resumed, resumed + 999 * US, 10 * US);
        assert!(!b.polling(), "the run started again after a pause of more than GAP");
        polls(&b, resumed + 1_000 * US, resumed + 1_000 * US, 10 * US);
        assert!(b.polling());
        // A busy poller pauses longer than GAP (it spun on memory): still one.
        let paused = resumed + 1_000 * US + 5 * GAP.as_nanos() as u64;
        b.inline_receive(paused);
        assert!(b.polling(), "a pause shorter than QUIET keeps a busy poller");
        let quiet = paused + QUIET.as_nanos() as u64 + 1;
        b.inline_receive(quiet);
        assert!(!b.polling(), "a pause of more than QUIET ends it");
        polls(&b, quiet, quiet + 999 * US, 10 * US);
        assert!(!b.polling());
    }

    #[test]
    fn polls_further_apart_than_the_gap_never_make_a_busy_poller() {
        let b = BusyPolling::new(Mode::Detect);
        polls(&b, 1_000 * US, 100_000 * US, GAP.as_nanos() as u64 + US);
        assert!(!b.polling());
        assert_eq!(b.standing_by(100_000 * US), None);
    }

    #[test]
    fn waiting_for_an_event_ends_the_standby_and_the_run() {
        let b = BusyPolling::new(Mode::Detect);
        let start = 10_000 * US;
        polls(&b, start, start + 2_000 * US, 10 * US);
        assert!(b.leave(start + 2_001 * US).is_some());
        assert!(b.end(), "sockets were left: the progress thread must be woken");
        assert_eq!(b.standing_by(start + 2_002 * US), None);
        assert!(!b.polling());
        b.inline_receive(start + 2_005 * US);
        assert!(!b.polling(), "the next run starts at the next inline receive");
        b.watched();
        assert_eq!(b.standing_by(start + 2_006 * US), None);
        assert!(!b.end(), "nothing left: no wake-up");
    }

    #[test]
    fn the_switch_decides_when_it_is_set() {
        let always = BusyPolling::new(Mode::Always);
        assert!(always.polling());
        assert_eq!(always.standing_by(5 * US), None, "no inline receive yet");
        always.inline_receive(10 * US);
        assert_eq!(always.standing_by(20 * US), Some(Duration::from_micros(190)));
        assert!(!always.end());
        assert_eq!(always.standing_by(21 * US), None, "an event wait ends the standby");
        assert!(always.polling(), "but the application still said it busy-polls");

        let never = BusyPolling::new(Mode::Never);
        polls(&never, 1_000 * US, 5_000 * US, US);
        assert!(!never.polling());
        assert_eq!(never.standing_by(5_000 * US), None);
    }

    #[test]
    fn the_setting_names_the_mode() {
        assert_eq!(Mode::from_setting(Some(true)), Mode::Always);
        assert_eq!(Mode::from_setting(Some(false)), Mode::Never);
        assert_eq!(Mode::from_setting(None), Mode::Detect);
    }
}
