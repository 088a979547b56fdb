//! The endpoint's hardware counters: what this process's part of the device did, as rxe
//! counts it for a port (`/sys/class/infiniband/<dev>/ports/1/hw_counters/`, printed by
//! `rdma statistic show`), in a segment of the endpoint directory (docs/device.md, "Hardware counters").
//!
//! Rule (docs/device.md, "Hardware counters"): the segment `counters` is written by its
//! owner only, with relaxed atomic adds (no ordering is promised between counters; each
//! is a monotonic count), so no cache line of it is written by two processes; other
//! processes (`rverbs stat`) only read it. On the same host the process that executes a
//! request counts it, the responder's events too: there the requester's process runs
//! the responder (docs/device.md), and writing into the target's segment would share its
//! lines between processes on the data path. The device's totals, as rxe gives them for
//! its one device, are the sums over the endpoints.
//!
//! The segment holds a magic word (written last, with Release), then one word per
//! [`Counter`], in [`Counter::ALL`]'s order, then [`LANES`] lanes of the same words. A
//! lane is held by one writer at a time ([`CounterLane`]: a send queue's same-host link,
//! which counts under the queue's lock), which adds with a plain load and store instead
//! of a locked add: on x86-64 a locked add drains the store buffer, about 4 ns on the
//! post of every request delivered on the host (docs/device.md, "Where they live"). A
//! counter's value is its shared word plus its word in every lane.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Segment, ShmSafe};
use crate::error::{Error, Result};

/// Name of the counters segment in the endpoint directory.
pub(crate) const NAME: &str = "counters";

/// "rvcnt" and the layout's version (1: the 15 counters of [`Counter::ALL`]; 2: then
/// [`LANES`] lanes of them).
const MAGIC: u64 = 0x7276_636e_7400_0002;

/// Lanes of a counters segment: send queues beyond this many count in the shared words.
pub(crate) const LANES: usize = 64;

/// One counter of [`CounterBlock`]: the index of its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    SentPkts,
    RcvdPkts,
    DuplicateRequest,
    OutOfSeqRequest,
    RcvdRnrErr,
    SendRnrErr,
    RcvdSeqErr,
    RetryExceededErr,
    RetryRnrExceededErr,
    CompleterRetryErr,
    SendErr,
    LinkDowned,
    RdmaSends,
    RdmaRecvs,
    LocalRequests,
}

/// Counters of one layout.
const COUNT: usize = 15;

#[cfg(test)]
impl Counter {
    /// Every counter, in the segment's order.
    #[cfg(test)]
    pub(crate) const ALL: [Counter; COUNT] = [
        Counter::SentPkts,
        Counter::RcvdPkts,
        Counter::DuplicateRequest,
        Counter::OutOfSeqRequest,
        Counter::RcvdRnrErr,
        Counter::SendRnrErr,
        Counter::RcvdSeqErr,
        Counter::RetryExceededErr,
        Counter::RetryRnrExceededErr,
        Counter::CompleterRetryErr,
        Counter::SendErr,
        Counter::LinkDowned,
        Counter::RdmaSends,
        Counter::RdmaRecvs,
        Counter::LocalRequests,
    ];
}

/// The counters as they lie in the segment.
#[repr(C)]
pub(crate) struct CounterBlock {
    magic: AtomicU64,
    values: [AtomicU64; COUNT],
    lanes: [Lane; LANES],
}

/// One lane: whether a writer holds it, and its words. 128 bytes at a multiple of 128 in
/// the segment: two lanes never share a cache line.
#[repr(C)]
struct Lane {
    /// 0: free; 1: held by a [`CounterLane`].
    held: AtomicU64,
    values: [AtomicU64; COUNT],
}

const _: () = assert!(std::mem::size_of::<Lane>() == 128);
const _: () = assert!(std::mem::offset_of!(CounterBlock, lanes) == 128);

impl Lane {
    const fn zero() -> Lane {
        Lane { held: AtomicU64::new(0), values: [const { AtomicU64::new(0) }; COUNT] }
    }
}

// SAFETY: a `#[repr(C)]` struct of atomics of plain integers, without padding: every bit
// pattern is a valid value and all mutation goes through the atomics.
unsafe impl ShmSafe for CounterBlock {}

/// Where the counts of a network socket made without an endpoint go (unit tests of the
/// UDP link): process memory nobody reads.
pub(crate) static DETACHED: CounterBlock = CounterBlock::zero();

impl CounterBlock {
    /// All zero, in process memory (a socket's own counters in tests).
    pub(crate) const fn zero() -> CounterBlock {
        CounterBlock { magic: AtomicU64::new(0), values: [const { AtomicU64::new(0) }; COUNT], lanes: [const { Lane::zero() }; LANES] }
    }

    /// A lane of this block for one writer ([`CounterLane`]); when every lane is held, a
    /// handle that adds to the shared words.
    pub(crate) fn lane(&'static self) -> CounterLane {
        // Acquire: the counts the lane's last holder made (its Release in `drop`) come
        // before this holder's first load of them.
        let index = self.lanes.iter().position(|l| l.held.load(Ordering::Relaxed) == 0 && l.held.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok());
        CounterLane { block: self, index: index.unwrap_or(LANES) }
    }

    /// Counts one event `c`.
    ///
    /// Rule (module doc): only the owner process adds, relaxed: a count is all a reader
    /// needs, and this is on the data path.
    #[inline]
    pub(crate) fn add(&self, c: Counter) {
        self.values[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` events `c` (nothing when `n` is 0).
    #[inline]
    pub(crate) fn add_n(&self, c: Counter, n: u64) {
        if n != 0 {
            self.values[c as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The counters now: each the shared word plus its word in every lane.
    pub(crate) fn snapshot(&self) -> Counters {
        let v = |c: Counter| {
            let i = c as usize;
            self.lanes.iter().fold(self.values[i].load(Ordering::Relaxed), |sum, l| sum.wrapping_add(l.values[i].load(Ordering::Relaxed)))
        };
        Counters {
            sent_pkts: v(Counter::SentPkts),
            rcvd_pkts: v(Counter::RcvdPkts),
            duplicate_request: v(Counter::DuplicateRequest),
            out_of_seq_request: v(Counter::OutOfSeqRequest),
            rcvd_rnr_err: v(Counter::RcvdRnrErr),
            send_rnr_err: v(Counter::SendRnrErr),
            rcvd_seq_err: v(Counter::RcvdSeqErr),
            retry_exceeded_err: v(Counter::RetryExceededErr),
            retry_rnr_exceeded_err: v(Counter::RetryRnrExceededErr),
            completer_retry_err: v(Counter::CompleterRetryErr),
            send_err: v(Counter::SendErr),
            link_downed: v(Counter::LinkDowned),
            rdma_sends: v(Counter::RdmaSends),
            rdma_recvs: v(Counter::RdmaRecvs),
            local_requests: v(Counter::LocalRequests),
        }
    }
}

/// A lane of an endpoint's counters held by one writer: the send queue's same-host link
/// (`transport::host::HostLink`), reached only under the queue's lock.
///
/// Rule (module doc): counts are monotonic and exact. `add` takes `&mut self`, so the
/// lane has one writer and its plain load and store lose no count; a lane given back
/// (`drop`, Release) passes its counts to its next holder (`lane`, Acquire), and they stay
/// in the lane, where readers sum them. Another process that writes the segment can make
/// counts wrong, as it could before, never memory unsafe: every word is an atomic.
pub(crate) struct CounterLane {
    block: &'static CounterBlock,
    /// Index of the lane held; `LANES` when none was free (the shared words).
    index: usize,
}

impl CounterLane {
    /// Counts one event `c` (as [`CounterBlock::add`]).
    #[inline]
    pub(crate) fn add(&mut self, c: Counter) {
        match self.block.lanes.get(self.index) {
            Some(l) => {
                let w = &l.values[c as usize];
                w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            }
            None => self.block.add(c),
        }
    }
}

impl Drop for CounterLane {
    fn drop(&mut self) {
        if let Some(l) = self.block.lanes.get(self.index) {
            l.held.store(0, Ordering::Release);
        }
    }
}

impl std::fmt::Debug for CounterLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterLane").field("index", &self.index).finish_non_exhaustive()
    }
}

/// Creates the counters segment of the endpoint in `dir` (all zero), kept for the life
/// of the process (the directory goes at exit, `Registry`).
pub(crate) fn create(dir: &Path) -> Result<&'static CounterBlock> {
    let seg: &'static Segment = Box::leak(Box::new(Segment::create(&dir.join(NAME), std::mem::size_of::<CounterBlock>())?));
    let block = seg.get::<CounterBlock>(0);
    block.magic.store(MAGIC, Ordering::Release);
    Ok(block)
}

/// The counters of the endpoint whose directory is `dir` (another process's): mapped,
/// read and unmapped.
///
/// Errors: `Again` while the segment is not there or not written yet (an endpoint still
/// starting, or one of a version without counters); `Bug` for a segment too short.
pub(crate) fn read(dir: &Path) -> Result<Counters> {
    let seg = Segment::open_record(dir, NAME, std::mem::size_of::<CounterBlock>(), "read counters", "the endpoint has no counters segment")?;
    let block = seg.get::<CounterBlock>(0);
    if block.magic.load(Ordering::Acquire) != MAGIC {
        return Err(Error::Again { verb: "read counters", why: "the endpoint's counters are not written yet" });
    }
    Ok(block.snapshot())
}

/// The hardware counters of one endpoint of the device (one process): what its send and
/// receive queues, its network sockets and the responders it ran did since it opened the
/// device (docs/device.md, "Hardware counters"). The names and meanings are rxe's
/// (`rxe_hw_counters.c`, `rdma statistic show`) where rverbs has the same event;
/// `local_requests` is rverbs' own. rxe's `ack_deferred` (its completer task scheduled
/// instead of run at once) has no counterpart: rverbs completes inline.
///
/// Rule: on the same host the process that executes a request counts it, the
/// responder's events (`duplicate_request`, `send_rnr_err`, `rdma_recvs`…) included,
/// since there the requester's process runs the target QP's responder; the device's
/// totals are the sums over the endpoints ([`crate::host_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Counters {
    /// RoCEv2 datagrams this process put on the network (requests, responses,
    /// acknowledgements, UD and CM MADs; each datagram of a GSO train): rxe `sent_pkts`
    /// (`rxe_xmit_packet`). Requests on the same host are no packets
    /// (`local_requests`).
    pub sent_pkts: u64,
    /// RoCEv2 datagrams received from the network that parsed and whose ICRC checked,
    /// before they are routed to a QP: rxe `rcvd_pkts` (`rxe_rcv`). A packet the owner
    /// of an address's RoCEv2 port relays to this process counts at the owner only.
    pub rcvd_pkts: u64,
    /// RC requests a responder found behind its expected PSN (§3.3 CHK_PSN): rxe
    /// `duplicate_request`.
    pub duplicate_request: u64,
    /// RC requests a responder found ahead of its expected PSN and answered with a
    /// NAK-sequence (one per gap, as rxe): rxe `out_of_seq_request`.
    pub out_of_seq_request: u64,
    /// RNR NAKs the requesters' completers took: rxe `rcvd_rnr_err`.
    pub rcvd_rnr_err: u64,
    /// RNR NAKs responders sent (an RC SEND with no receive posted): rxe `send_rnr_err`.
    pub send_rnr_err: u64,
    /// NAK-sequence errors the requesters took that acknowledged new PSNs: rxe
    /// `rcvd_seq_err`.
    pub rcvd_seq_err: u64,
    /// Send work requests completed with IBV_WC_RETRY_EXC_ERR: rxe `retry_exceeded_err`.
    pub retry_exceeded_err: u64,
    /// Send work requests completed with IBV_WC_RNR_RETRY_EXC_ERR: rxe
    /// `retry_rnr_exceeded_err`.
    pub retry_rnr_exceeded_err: u64,
    /// Go-back-N retransmissions the requesters started (retransmit timer or NAK): rxe
    /// `completer_retry_err`.
    pub completer_retry_err: u64,
    /// RoCEv2 datagrams the kernel refused to send (lost, as rxe's failed
    /// `rxe_xmit_packet`): rxe `send_err`.
    pub send_err: u64,
    /// Times the port went down (IBV_EVENT_PORT_ERR, from the fault plan: rverbs' port
    /// goes down only on purpose, docs/fault-injection.md): rxe `link_downed`.
    pub link_downed: u64,
    /// SEND work requests (with immediate data or invalidation too) completed
    /// successfully: rxe `rdma_sends`.
    pub rdma_sends: u64,
    /// Receive work requests completed successfully by an incoming SEND or RDMA WRITE
    /// with immediate data: rxe `rdma_recvs`.
    pub rdma_recvs: u64,
    /// Requests delivered to a responder on this host, without packets (one per
    /// request, a whole message, retransmissions included): rverbs' own.
    pub local_requests: u64,
}

impl Counters {
    /// Each counter with its name (rxe's, as `rdma statistic show` prints it), in
    /// rxe's order, then `local_requests`.
    pub fn named(&self) -> [(&'static str, u64); COUNT] {
        [
            ("sent_pkts", self.sent_pkts),
            ("rcvd_pkts", self.rcvd_pkts),
            ("duplicate_request", self.duplicate_request),
            ("out_of_seq_request", self.out_of_seq_request),
            ("rcvd_rnr_err", self.rcvd_rnr_err),
            ("send_rnr_err", self.send_rnr_err),
            ("rcvd_seq_err", self.rcvd_seq_err),
            ("retry_exceeded_err", self.retry_exceeded_err),
            ("retry_rnr_exceeded_err", self.retry_rnr_exceeded_err),
            ("completer_retry_err", self.completer_retry_err),
            ("send_err", self.send_err),
            ("link_downed", self.link_downed),
            ("rdma_sends", self.rdma_sends),
            ("rdma_recvs", self.rdma_recvs),
            ("local_requests", self.local_requests),
        ]
    }
}

/// The counters of one live endpoint of the device ([`crate::host_counters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointCounters {
    /// The endpoint number (the top 8 bits of its QPNs, docs/device.md "Registry").
    pub ep: u32,
    /// The process that owns it.
    pub pid: u32,
    /// Its counters.
    pub counters: Counters,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The segment's words and [`Counters::named`] are in one order, each counter's
    /// word is its own.
    #[test]
    fn each_counter_has_its_own_word_and_name() {
        let block = CounterBlock::zero();
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            block.add_n(*c, i as u64 + 1);
        }
        let named = block.snapshot().named();
        for (i, (_, v)) in named.iter().enumerate() {
            assert_eq!(*v, i as u64 + 1, "counter {i}");
        }
        assert_eq!(named[0].0, "sent_pkts");
        assert_eq!(named[14].0, "local_requests");
    }

    fn leaked() -> &'static CounterBlock {
        Box::leak(Box::new(CounterBlock::zero()))
    }

    // Lanes: counts made through them are the counters' (a reader sums them), exact
    // with writers on several threads at once, kept when a lane is given back and
    // continued by its next holder; a writer finding every lane held counts in the
    // shared words.
    #[test]
    fn counts_through_lanes_are_exact_and_outlive_their_holders() {
        let block = leaked();
        const N: u64 = 20_000;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut lane = block.lane();
                    for _ in 0..N {
                        lane.add(Counter::LocalRequests);
                    }
                    lane.index
                })
            })
            .collect();
        let mut used: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        block.add(Counter::LocalRequests);
        assert_eq!(block.snapshot().local_requests, 4 * N + 1);
        used.sort_unstable();
        used.dedup();
        assert!(used.iter().all(|&i| i < LANES), "each thread held a lane: {used:?}");
        // Every lane held: one more writer counts in the shared words.
        let held: Vec<CounterLane> = (0..LANES).map(|_| block.lane()).collect();
        let mut extra = block.lane();
        assert_eq!(extra.index, LANES);
        extra.add(Counter::RdmaSends);
        drop(held);
        // The first free lane is one the threads counted in: its next holder adds to
        // their counts, not over them.
        let mut again = block.lane();
        assert!(again.index < LANES && used.contains(&again.index), "{} {used:?}", again.index);
        again.add(Counter::RdmaSends);
        again.add(Counter::LocalRequests);
        drop((extra, again));
        let c = block.snapshot();
        assert_eq!((c.local_requests, c.rdma_sends), (4 * N + 2, 2));
    }

    #[test]
    fn a_reader_mapping_the_segment_sees_what_the_owner_counted() {
        let dir = std::env::temp_dir().join(format!("rverbs-counters-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(read(&dir), Err(Error::Again { .. })));
        let block = create(&dir).unwrap();
        block.add(Counter::RdmaSends);
        block.add(Counter::RdmaSends);
        block.add(Counter::LocalRequests);
        let mut lane = block.lane();
        lane.add(Counter::LocalRequests);
        let c = read(&dir).unwrap();
        assert_eq!((c.rdma_sends, c.local_requests, c.sent_pkts), (2, 2, 0), "the lane's count too");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
