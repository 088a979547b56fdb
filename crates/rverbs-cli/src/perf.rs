//! The measured tests: SEND/RECV ping-pong, windowed RDMA WRITE, RDMA READ, atomics.
//!
//! Each test connects its own [`Pair`], so a failure (which moves an RC QP to ERR) never
//! leaks into the next test. Each checks every completion's status and opcode and the
//! transferred bytes, and returns a [`Measurement`]; any failed check is an `Err`.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rverbs::{RecvWr, SendWr, Wc, WcOpcode};

use crate::failure::Failure;
use crate::pair::{check, pattern, poll_batch, poll_expect, verify, Pair, PairConfig};

/// Completions taken per `poll` call in the windowed tests.
const POLL_BATCH: usize = 16;

/// Work requests handed to one `post_send` call in the windowed tests.
const POST_BATCH: usize = 16;

/// One row of a result table.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    /// Bytes per message.
    pub bytes: usize,
    /// Iterations as the test counts them (round trips for ping-pong, operations otherwise).
    pub iters: u64,
    /// Messages moved: two per ping-pong round trip, one per operation otherwise.
    pub messages: u64,
    /// Wall time of the timed loop.
    pub elapsed: Duration,
    /// Percentiles of the time per message, for the latency tests (ping-pong: half of
    /// each round trip, as perftest's `*_lat` report; READ and atomics: each operation).
    pub latency: Option<Latency>,
}

/// Percentiles of the times of one test's messages, from an HDR histogram of every
/// iteration (perftest's `t_typical` is the median; its `99%` and `99.9%` columns match).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// The median, in µs.
    pub p50_us: f64,
    /// The 99th percentile, in µs.
    pub p99_us: f64,
    /// The 99.9th percentile, in µs.
    pub p999_us: f64,
    /// The longest, in µs.
    pub max_us: f64,
}

/// The times of one test's iterations, in nanoseconds (1 ns to 60 s, 3 significant
/// digits).
struct Times {
    hist: Histogram<u64>,
    /// What one iteration's time is divided by (2 for a round trip reported one way).
    per: u64,
}

impl Times {
    fn new(per: u64) -> Times {
        let hist = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds are valid");
        Times { hist, per }
    }

    /// Records the time since `since`.
    fn record(&mut self, since: Instant) {
        self.record_ns(u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records one iteration of `ns` nanoseconds (saturated at the histogram's bound).
    fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record((ns / self.per).max(1));
    }

    fn latency(&self) -> Option<Latency> {
        if self.hist.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Latency {
            p50_us: us(self.hist.value_at_quantile(0.5)),
            p99_us: us(self.hist.value_at_quantile(0.99)),
            p999_us: us(self.hist.value_at_quantile(0.999)),
            max_us: us(self.hist.max()),
        })
    }
}

impl Measurement {
    /// Payload bandwidth in MiB/s (2^20 bytes, as perftest's "MB/sec").
    pub fn bw_mib_s(&self) -> f64 {
        (self.bytes as f64 * self.messages as f64) / self.elapsed.as_secs_f64() / (1024.0 * 1024.0)
    }

    /// Average time per message in µs (for ping-pong: half the round trip, as perftest's
    /// `*_lat` tests report).
    pub fn t_avg_us(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / self.messages as f64
    }

    /// Messages per second, in millions.
    pub fn msg_rate_mpps(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Rounds `n` up to a multiple of 64 (so receive slots start cache-line aligned).
fn slot(n: usize) -> usize {
    n.max(64).div_ceil(64) * 64
}

/// Writes the 8-byte stamp `i` at the start and, if the message has room for both, at
/// the end of the `size`-byte message at `offset`.
fn stamp(mr: &rverbs::Mr, offset: usize, size: usize, i: u64) -> Result<(), Failure> {
    let bytes = i.to_le_bytes();
    let k = size.min(8);
    mr.write(offset, &bytes[..k])?;
    if size >= 16 {
        mr.write(offset + size - 8, &bytes)?;
    }
    Ok(())
}

/// `body` with the stamps [`stamp`] writes for iteration `i`.
fn stamped(mut body: Vec<u8>, i: u64) -> Vec<u8> {
    let bytes = i.to_le_bytes();
    let size = body.len();
    let k = size.min(8);
    body[..k].copy_from_slice(&bytes[..k]);
    if size >= 16 {
        body[size - 8..].copy_from_slice(&bytes);
    }
    body
}

/// Checks the stamps [`stamp`] wrote, as they arrived at `offset`.
fn check_stamp(
    mr: &rverbs::Mr,
    offset: usize,
    size: usize,
    i: u64,
    what: &'static str,
) -> Result<(), Failure> {
    let expected = i.to_le_bytes();
    let k = size.min(8);
    let mut got = [0u8; 8];
    mr.read(offset, &mut got[..k])?;
    let mut want = [0u8; 8];
    want[..k].copy_from_slice(&expected[..k]);
    if got != want {
        return Err(Failure::Value {
            what,
            expected: u64::from_le_bytes(want),
            got: u64::from_le_bytes(got),
        });
    }
    if size >= 16 {
        mr.read(offset + size - 8, &mut got)?;
        if got != expected {
            return Err(Failure::Value {
                what,
                expected: i,
                got: u64::from_le_bytes(got),
            });
        }
    }
    Ok(())
}

/// Fails unless a receive completion reports `size` bytes.
fn check_len(wc: &Wc, size: usize, what: &'static str) -> Result<(), Failure> {
    let got = wc.byte_len().unwrap_or(u32::MAX);
    if got as usize != size {
        return Err(Failure::Value {
            what,
            expected: size as u64,
            got: got.into(),
        });
    }
    Ok(())
}

/// SEND/RECV ping-pong of `iters` round trips of `size` bytes: A sends, B receives and
/// sends back, A receives. Every message carries the iteration number at both ends and
/// both are checked on arrival; the last message is compared byte for byte.
pub fn pingpong(size: usize, iters: u64) -> Result<Measurement, Failure> {
    let size32 =
        u32::try_from(size).map_err(|_| Failure::Usage(format!("size {size} above 4 GiB")))?;
    let recv_off = slot(size);
    let pair = Pair::connect(&PairConfig {
        mr_len: 2 * recv_off,
        max_send_wr: 4,
        max_recv_wr: 4,
    })?;
    let (a, b) = (&pair.a, &pair.b);
    let body_a = pattern(size, 0xa5);
    a.mr.write(0, &body_a)?;
    let body_b = pattern(size, 0x5a);
    b.mr.write(0, &body_b)?;
    let a_send = [a.mr.sge(0, size32)?];
    let a_recv = [a.mr.sge(recv_off, size32)?];
    let b_send = [b.mr.sge(0, size32)?];
    let b_recv = [b.mr.sge(recv_off, size32)?];
    a.qp.post_recv(&[RecvWr::new(0, &a_recv)])?;
    b.qp.post_recv(&[RecvWr::new(0, &b_recv)])?;

    let mut times = Times::new(2);
    let start = Instant::now();
    for i in 0..iters {
        let round = Instant::now();
        stamp(&a.mr, 0, size, i)?;
        a.qp.post_send(&[SendWr::send(i, &a_send).signaled()])?;
        poll_expect(&a.cq, "ping: send completion", WcOpcode::Send)?;
        let wc = poll_expect(&b.cq, "ping: receive completion", WcOpcode::Recv)?;
        check_len(&wc, size, "ping: received byte_len")?;
        check_stamp(&b.mr, recv_off, size, i, "ping: iteration stamp")?;
        b.qp.post_recv(&[RecvWr::new(i + 1, &b_recv)])?;

        stamp(&b.mr, 0, size, i)?;
        b.qp.post_send(&[SendWr::send(i, &b_send).signaled()])?;
        poll_expect(&b.cq, "pong: send completion", WcOpcode::Send)?;
        let wc = poll_expect(&a.cq, "pong: receive completion", WcOpcode::Recv)?;
        check_len(&wc, size, "pong: received byte_len")?;
        check_stamp(&a.mr, recv_off, size, i, "pong: iteration stamp")?;
        a.qp.post_recv(&[RecvWr::new(i + 1, &a_recv)])?;
        times.record(round);
    }
    let elapsed = start.elapsed();

    if iters > 0 {
        // The last ping and pong, byte for byte: each side's pattern with the last stamps.
        verify(
            &b.mr,
            recv_off,
            &stamped(body_a, iters - 1),
            "ping: last message",
        )?;
        verify(
            &a.mr,
            recv_off,
            &stamped(body_b, iters - 1),
            "pong: last message",
        )?;
    }
    Ok(Measurement {
        bytes: size,
        iters,
        messages: 2 * iters,
        elapsed,
        latency: times.latency(),
    })
}

/// Parameters of [`write_bw`].
#[derive(Clone, Copy, Debug)]
pub struct WriteBw {
    /// Bytes per RDMA WRITE.
    pub size: usize,
    /// Number of WRITEs.
    pub iters: u64,
    /// Most WRITEs posted and not yet known complete.
    pub window: u32,
    /// Every `cq_mod`-th WRITE (and the last) is signaled.
    pub cq_mod: u32,
}

/// Bytes past the written range that must stay untouched (checked after the run).
const GUARD: usize = 4096;

/// Streams `iters` RDMA WRITEs of `size` bytes from A to the same place in B with up to
/// `window` outstanding, perftest-style (selective signaling; RC completes in order, so a
/// completion for WRITE `k` retires every WRITE up to `k`). Afterwards the destination
/// must equal the source byte for byte, and the guard bytes after it must still be zero.
pub fn write_bw(p: WriteBw) -> Result<Measurement, Failure> {
    let size32 = u32::try_from(p.size)
        .map_err(|_| Failure::Usage(format!("size {} above 4 GiB", p.size)))?;
    if p.window == 0 || p.cq_mod == 0 {
        return Err(Failure::Usage(
            "window and cq-mod must be at least 1".into(),
        ));
    }
    // With cq_mod <= window every full window holds a signaled WRITE.
    let cq_mod = u64::from(p.cq_mod.min(p.window));
    let window = u64::from(p.window);
    let mr_len = p.size.max(1) + GUARD;
    let pair = Pair::connect(&PairConfig {
        mr_len,
        max_send_wr: p.window,
        max_recv_wr: 1,
    })?;
    let (a, b) = (&pair.a, &pair.b);
    let body = pattern(p.size, 0x3c);
    a.mr.write(0, &body)?;
    let sge = [a.mr.sge(0, size32)?];
    let (remote, rkey) = (b.mr.iova(), b.mr.rkey());

    let mut batch: Vec<SendWr<'_>> = Vec::with_capacity(POST_BATCH);
    let mut wc = [Wc::default(); POLL_BATCH];
    let (mut posted, mut completed) = (0u64, 0u64);
    let start = Instant::now();
    while completed < p.iters {
        while posted < p.iters && posted - completed < window {
            let n = (p.iters - posted)
                .min(window - (posted - completed))
                .min(POST_BATCH as u64);
            batch.clear();
            for id in posted..posted + n {
                let wr = SendWr::write(id, &sge, remote, rkey);
                let last = id + 1 == p.iters;
                batch.push(if (id + 1) % cq_mod == 0 || last {
                    wr.signaled()
                } else {
                    wr
                });
            }
            a.qp.post_send(&batch)?;
            posted += n;
        }
        let n = poll_batch(&a.cq, "write: completion", &mut wc)?;
        for c in &wc[..n] {
            check(c, "write: completion", WcOpcode::RdmaWrite)?;
            if c.wr_id() < completed || c.wr_id() >= posted {
                return Err(Failure::Value {
                    what: "write: completion order (wr_id)",
                    expected: completed,
                    got: c.wr_id(),
                });
            }
            completed = c.wr_id() + 1;
        }
    }
    let elapsed = start.elapsed();

    if p.iters > 0 {
        verify(&b.mr, 0, &body, "write: destination buffer")?;
        verify(
            &b.mr,
            p.size,
            &[0u8; GUARD],
            "write: bytes after the destination",
        )?;
    }
    Ok(Measurement {
        bytes: p.size,
        iters: p.iters,
        messages: p.iters,
        elapsed,
        latency: None,
    })
}

/// `iters` RDMA READs of `size` bytes from B into A, one at a time (latency); the bytes
/// read last must equal B's pattern byte for byte.
pub fn read_lat(size: usize, iters: u64) -> Result<Measurement, Failure> {
    let size32 =
        u32::try_from(size).map_err(|_| Failure::Usage(format!("size {size} above 4 GiB")))?;
    let pair = Pair::connect(&PairConfig {
        mr_len: size.max(1) + GUARD,
        max_send_wr: 4,
        max_recv_wr: 1,
    })?;
    let (a, b) = (&pair.a, &pair.b);
    let body = pattern(size, 0xc3);
    b.mr.write(0, &body)?;
    let sge = [a.mr.sge(0, size32)?];
    let (remote, rkey) = (b.mr.iova(), b.mr.rkey());
    let mut times = Times::new(1);
    let start = Instant::now();
    for i in 0..iters {
        let op = Instant::now();
        a.qp.post_send(&[SendWr::read(i, &sge, remote, rkey).signaled()])?;
        let wc = poll_expect(&a.cq, "read: completion", WcOpcode::RdmaRead)?;
        check_len(&wc, size, "read: byte_len")?;
        times.record(op);
    }
    let elapsed = start.elapsed();
    if iters > 0 {
        verify(&a.mr, 0, &body, "read: local buffer")?;
        verify(
            &a.mr,
            size,
            &[0u8; GUARD],
            "read: bytes after the local buffer",
        )?;
    }
    Ok(Measurement {
        bytes: size,
        iters,
        messages: iters,
        elapsed,
        latency: times.latency(),
    })
}

/// The value the atomic target starts from.
const ATOMIC_START: u64 = 0x0123_4567_0000_0000;

/// `iters` fetch-and-adds of 1 on a word of B, each returning the previous value (checked
/// every time), then one compare-and-swap that must succeed and one that must not.
pub fn atomics(iters: u64) -> Result<Measurement, Failure> {
    let pair = Pair::connect(&PairConfig {
        mr_len: 4096,
        max_send_wr: 4,
        max_recv_wr: 1,
    })?;
    let (a, b) = (&pair.a, &pair.b);
    b.mr.write(0, &ATOMIC_START.to_ne_bytes())?;
    let result = [a.mr.sge(0, 8)?];
    let (remote, rkey) = (b.mr.iova(), b.mr.rkey());

    let mut times = Times::new(1);
    let start = Instant::now();
    for i in 0..iters {
        let op = Instant::now();
        a.qp.post_send(&[SendWr::fetch_add(i, &result, remote, rkey, 1).signaled()])?;
        poll_expect(&a.cq, "fetch-and-add: completion", WcOpcode::FetchAdd)?;
        times.record(op);
        let old = a.mr.read_u64(0)?;
        if old != ATOMIC_START + i {
            return Err(Failure::Value {
                what: "fetch-and-add: returned value",
                expected: ATOMIC_START + i,
                got: old,
            });
        }
    }
    let elapsed = start.elapsed();
    let now = b.mr.read_u64(0)?;
    if now != ATOMIC_START + iters {
        return Err(Failure::Value {
            what: "fetch-and-add: target word",
            expected: ATOMIC_START + iters,
            got: now,
        });
    }

    // A compare that matches swaps; one that does not leaves the word alone. Both return
    // the word's previous value.
    const SWAP: u64 = 0xc0ff_ee00_dead_beef;
    let cases = [(now, SWAP, now, SWAP), (now, 2, SWAP, SWAP)];
    for (k, (compare, swap, want_old, want_word)) in cases.into_iter().enumerate() {
        a.qp.post_send(&[
            SendWr::compare_swap(k as u64, &result, remote, rkey, compare, swap).signaled(),
        ])?;
        poll_expect(&a.cq, "compare-and-swap: completion", WcOpcode::CompSwap)?;
        let old = a.mr.read_u64(0)?;
        if old != want_old {
            return Err(Failure::Value {
                what: "compare-and-swap: returned value",
                expected: want_old,
                got: old,
            });
        }
        let word = b.mr.read_u64(0)?;
        if word != want_word {
            return Err(Failure::Value {
                what: "compare-and-swap: target word",
                expected: want_word,
                got: word,
            });
        }
    }
    Ok(Measurement {
        bytes: 8,
        iters,
        messages: iters,
        elapsed,
        latency: times.latency(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_every_iteration() {
        let mut t = Times::new(2);
        assert_eq!(t.latency(), None, "no iteration, no percentiles");
        // Round trips of 2, 4, …, 2000 µs: one-way 1 … 1000 µs.
        for k in 1..=1000u64 {
            t.record_ns(k * 2_000);
        }
        let l = t.latency().unwrap();
        let near = |got: f64, want: f64| (got - want).abs() <= want / 500.0;
        assert!(near(l.p50_us, 500.0), "{l:?}");
        assert!(near(l.p99_us, 990.0), "{l:?}");
        assert!(near(l.p999_us, 999.0), "{l:?}");
        assert!(near(l.max_us, 1000.0), "{l:?}");
    }
}
