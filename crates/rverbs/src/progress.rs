//! The progress thread: runs what cannot run inside the application's calls.
//!
//! One thread per device of the process (docs/progress-and-events.md), started with the
//! device, asleep in epoll while there is nothing to do; each is found by its device's
//! slot ([`Endpoint::slot`], `sys::MAX_DEVICES`). It handles
//! - timers: the RNR wait and the ACK timeout after which a send queue retries its head
//!   work request;
//! - the doorbell: a FIFO peers write to when they changed one of this process's QPs
//!   (e.g. moved it to ERR: its send queue, which only this process runs, must flush);
//! - peer deaths: a pidfd per peer; when one becomes readable the peer is marked dead at
//!   once, and requests towards it go unanswered from then on;
//! - the network transport's sockets (`NetRx`): those bound at start, and one bound later
//!   ([`watch_net_fd`]: a RoCEv2 port taken over from an owner that exited); its
//!   deadlines (held-back packets, takeover attempts); and peer deaths, since the dead
//!   peer may have owned a port.
//!
//! Work requests otherwise execute inside `post_send`, so no latency-critical path waits
//! for this thread to wake.
//!
//! While the application busy-polls (`busy_poll`: detected, or `RVERBS_BUSY_POLL=1`;
//! docs/progress-and-events.md, "Busy-polling applications") and an application thread
//! received inline within the last [`STANDBY`], a readable socket is left to it and not
//! watched again until the application stopped polling for that long or waits for an
//! event ([`application_waits`]), so a busy poller's datagrams do not wake this thread
//! one by one.
//!
//! [`STANDBY`]: crate::busy_poll::STANDBY

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rustix::event::epoll;

use crate::busy_poll::{BusyPolling, Mode};
use crate::shm::fifo::Fifo;
use crate::mr::endpoint::Endpoint;
use crate::shm::registry::Peer;
use crate::sys::EventFd;

/// What a timer wakes: a send queue waiting out an ACK timeout or an RNR delay.
pub(crate) trait Timed: Send + Sync {
    /// The deadline passed: run the queue again.
    fn fire(self: Arc<Self>);
}

/// What the doorbell's QP kicks reach: the QPs of this process, by number.
pub(crate) trait Kicks: Send + Sync {
    /// A peer moved QP `qpn` into ERR: its owner flushes what is left.
    fn errored_by_peer(&self, qpn: u32);
}

/// The network receive path, to the progress thread: sockets to wait on.
pub(crate) trait NetRx: Send + Sync {
    /// The descriptors to wait on; their index names them in [`NetRx::readable`].
    fn fds(&self) -> Vec<BorrowedFd<'_>>;
    /// Descriptor `index` is readable: receive what waits on it.
    fn readable(&'static self, index: usize);
    /// When the transport next needs to run without a readable descriptor (packets the
    /// fault injector holds back), if ever.
    fn poll_timeout(&self) -> Option<Instant>;
    /// That time has come.
    fn handle_timeout(&self, now: Instant);
    /// A peer process died (it may have owned a RoCEv2 port another socket can take
    /// over now).
    fn peer_died(&self);
    /// Receives what waits on every socket now, unless another thread is receiving (an
    /// application thread that found its CQ empty, [`receive_inline`]).
    fn receive_now(&'static self);
    /// Sends every ACK an application thread holds ([`application_waits`]).
    fn send_held_acks(&self);
}

/// Live network connections of this process (`transport::net`'s requesters and
/// responders, and UD QPs that sent to another host): while there are any, a poll that
/// finds a CQ empty receives from the sockets itself ([`receive_inline`]).
static NET_CONNECTIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One live network connection, counted while it lives (see [`net_active`]).
pub(crate) struct NetConnection(());

impl NetConnection {
    pub(crate) fn open() -> NetConnection {
        NET_CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        NetConnection(())
    }
}

impl Drop for NetConnection {
    fn drop(&mut self) {
        NET_CONNECTIONS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether this process has network connections (one load; false for a process that
/// only talks to QPs of its host).
#[inline(always)]
pub(crate) fn net_active() -> bool {
    NET_CONNECTIONS.load(std::sync::atomic::Ordering::Relaxed) != 0
}

/// docs/progress-and-events.md (no latency path waits on a sleeping thread): an application thread that
/// polls an empty CQ while network connections exist receives and delivers what waits on
/// the sockets itself, instead of waiting for the progress thread to be scheduled (on a
/// machine whose cores busy-pollers keep, that wait is a scheduler tick, milliseconds).
/// The caller holds no lock.
#[cold]
pub(crate) fn receive_inline(ep: &Endpoint) {
    if let Some(p) = started(ep.slot) {
        if let Some(net) = p.net {
            if p.busy.mode() != Mode::Never {
                // The raw monotonic clock: an empty poll pays no conversion to an `Instant`.
                p.busy.inline_receive(crate::clock::device_ns());
                if !INLINE_RECEIVED.load(Ordering::Relaxed) {
                    INLINE_RECEIVED.store(true, Ordering::Relaxed);
                }
            }
            net.receive_now();
        }
    }
}

/// Whether the application busy-polls endpoint `ep`'s device (detected, or
/// `RVERBS_BUSY_POLL=1`: `busy_poll`): its inline receives then also hold ACKs for its
/// next requests (docs/network.md, "Coalesced ACKs").
pub(crate) fn holds_acks(ep: &Endpoint) -> bool {
    started(ep.slot).is_some_and(|p| p.busy.polling())
}

/// Whether an application thread received inline since the last [`application_waits`]
/// (one load for a wait that follows none).
static INLINE_RECEIVED: AtomicBool = AtomicBool::new(false);

struct Timer {
    at: Instant,
    seq: u64,
    qp: Weak<dyn Timed>,
}

impl PartialEq for Timer {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timer {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Default)]
struct Timers {
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

use crate::shm::registry::bell;

const TOKEN_WAKE: u64 = 0;
const TOKEN_BELL: u64 = 1;
const TOKEN_NET: u64 = 1 << 16;
const TOKEN_PEER: u64 = 1 << 32;

struct Progress {
    timers: Mutex<Timers>,
    /// QPs peers kicked while the bell was read for proxy requests only.
    deferred: Mutex<Vec<u32>>,
    wake: EventFd,
    epoll: OwnedFd,
    bell: Option<Fifo>,
    peers: Mutex<HashMap<u32, Weak<Peer>>>,
    /// The device's endpoint.
    endpoint: &'static Endpoint,
    /// The device's QPs, which doorbell kicks name.
    qps: &'static dyn Kicks,
    /// The network transport's sockets, if it has any.
    net: Option<&'static dyn NetRx>,
    /// Whether the application busy-polls (`RVERBS_BUSY_POLL`, detected by default): the
    /// sockets are then left to application threads that receive inline (see the module
    /// doc); `Mode::Never` without network sockets.
    busy: BusyPolling,
    /// The network descriptors waited on, by index (re-armed one-shot with
    /// `Mode::Always`, watched again after a standby otherwise).
    net_fds: Mutex<HashMap<usize, RawFd>>,
    /// While the thread waits: when it planned to wake (the device clock,
    /// `clock::device_ns`; `u64::MAX`: no deadline); [`AWAKE`] while it runs. Read by
    /// [`deadline_added`].
    sleep_until: AtomicU64,
    /// When an application thread last started holding ACKs (the device clock; 0:
    /// never): for [`HOLDING`] after it the thread waits no longer than [`HOLDING_WAIT`]
    /// at a time, so the next holds find it due to wake and need no wake-up
    /// ([`deadline_added`]).
    held_at: AtomicU64,
}

/// How long after an application thread last started holding ACKs the progress thread
/// keeps waking every [`HOLDING_WAIT`] at least (a ping-pong holds one per message).
const HOLDING: Duration = Duration::from_millis(10);

/// The longest the progress thread waits while application threads hold ACKs
/// ([`HOLDING`]): no longer than a held ACK may wait (`qp::acks::ACK_DELAY`, which a test
/// there compares with this), so that a hold started while it waits is due after its
/// wake-up.
pub(crate) const HOLDING_WAIT: Duration = Duration::from_micros(200);

/// [`Progress::sleep_until`] of a thread that runs: it reads its deadlines again before
/// it next waits.
const AWAKE: u64 = 0;

impl Progress {
    /// Whether the application busy-polls and a thread of it received inline within
    /// [`STANDBY`](crate::busy_poll::STANDBY) (the sockets are left to it).
    fn standing_by(&self) -> bool {
        self.busy.standing_by(crate::clock::device_ns()).is_some()
    }

    /// The epoll flags of a network descriptor: one-shot with `Mode::Always` (every
    /// datagram may be left to the application), level-triggered otherwise.
    fn net_flags(&self) -> epoll::EventFlags {
        if self.busy.mode() == Mode::Always {
            epoll::EventFlags::IN | epoll::EventFlags::ONESHOT
        } else {
            epoll::EventFlags::IN
        }
    }

    /// Watches network descriptor `index` again (one-shot: it fires at once if readable).
    fn rearm(&self, index: usize) {
        self.modify_net(index, self.net_flags());
    }

    /// Stops watching network descriptor `index` until [`Progress::rearm`] (a
    /// level-triggered one left to the application: it would fire again at once). A
    /// one-shot descriptor is not watched after it fired.
    fn disarm(&self, index: usize) {
        if self.busy.mode() != Mode::Always {
            // No event asked for: one-shot, so that an error condition (always reported)
            // fires once at most.
            self.modify_net(index, epoll::EventFlags::ONESHOT);
        }
    }

    /// Waits on network descriptor `index` for `flags` from now on, if it is still watched.
    fn modify_net(&self, index: usize, flags: epoll::EventFlags) {
        let fds = self.net_fds.lock().expect("net fds");
        if let Some(&raw) = fds.get(&index) {
            // SAFETY: `raw` is open while it is in `net_fds` (the lock is held): a socket
            // bound at start lives as long as the process, and one added later is removed
            // from the map by `unwatch_net_fd` before it closes.
            #[allow(unsafe_code)]
            let fd = unsafe { BorrowedFd::borrow_raw(raw) };
            let _ = epoll::modify(&self.epoll, fd, epoll::EventData::new_u64(TOKEN_NET + index as u64), flags);
        }
    }
}

/// The progress thread of each device slot: a forked child has no threads and devices of
/// its own, in other slots (`sys::default_device_slot`).
static PROGRESS: [OnceLock<&'static Progress>; crate::sys::MAX_DEVICES] = [const { OnceLock::new() }; crate::sys::MAX_DEVICES];

/// The progress thread of slot `slot`. The device starts it ([`start`]) before anything
/// can ask for it, except another thread that found the device just published: that one
/// waits the moment it takes the device to start it.
fn progress(slot: usize) -> &'static Progress {
    PROGRESS[slot].wait()
}

/// The progress thread of slot `slot` if it started (`usize::MAX`, a transport used on its
/// own in tests, has none).
fn started(slot: usize) -> Option<&'static Progress> {
    PROGRESS.get(slot)?.get().copied()
}

fn spawn(endpoint: &'static Endpoint, qps: &'static dyn Kicks, net: Option<&'static dyn NetRx>, busy_poll: Option<bool>) -> &'static Progress {
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    let wake = EventFd::new().expect("eventfd");
    rustix::io::ioctl_fionbio(wake.fd(), true).expect("non-blocking eventfd");
    epoll::add(&epoll, wake.fd(), epoll::EventData::new_u64(TOKEN_WAKE), epoll::EventFlags::IN)
        .expect("epoll add");
    let bell = endpoint.reg.as_ref().and_then(|_| Fifo::create(&endpoint.dir.join(bell::NAME)).ok());
    if let Some(b) = &bell {
        rustix::io::ioctl_fionbio(b.fd(), true).expect("non-blocking bell");
        epoll::add(&epoll, b.fd(), epoll::EventData::new_u64(TOKEN_BELL), epoll::EventFlags::IN)
            .expect("epoll add");
    }
    let mode = if net.is_some() { Mode::from_setting(busy_poll) } else { Mode::Never };
    let mut net_fds = HashMap::new();
    let mut flags = epoll::EventFlags::IN;
    if mode == Mode::Always {
        flags |= epoll::EventFlags::ONESHOT;
    }
    for (i, fd) in net.map(|n| n.fds()).unwrap_or_default().into_iter().enumerate() {
        epoll::add(&epoll, fd, epoll::EventData::new_u64(TOKEN_NET + i as u64), flags).expect("epoll add");
        net_fds.insert(i, fd.as_raw_fd());
    }
    let p: &'static Progress = Box::leak(Box::new(Progress {
        timers: Mutex::default(),
        deferred: Mutex::default(),
        wake,
        epoll,
        bell,
        peers: Mutex::default(),
        endpoint,
        qps,
        net,
        busy: BusyPolling::new(mode),
        net_fds: Mutex::new(net_fds),
        sleep_until: AtomicU64::new(AWAKE),
        held_at: AtomicU64::new(0),
    }));
    // Returns once the thread's start-up is done (service_thread.rs says why).
    crate::service_thread::spawn("rverbs-progress", move || {
        crate::mr::proxy::serve_while_waiting(serve_own_proxies);
        SERVING.set(Some(p));
        run(p)
    })
    .expect("spawn the rverbs progress thread");
    p
}

/// Serves the proxy requests peers queued; other doorbell records are kept for the main
/// loop. The progress thread runs this while it waits for a peer's proxy itself
/// (`mr::proxy::serve_while_waiting`), so two progress threads never wait on each other.
fn serve_own_proxies() {
    if let Some(p) = SERVING.get() {
        read_bell(p, false);
    }
}

thread_local! {
    /// The progress thread the calling thread is (none on other threads).
    static SERVING: std::cell::Cell<Option<&'static Progress>> = const { std::cell::Cell::new(None) };
}

/// Starts the progress thread of endpoint `endpoint`'s slot, once (the device does as
/// soon as it exists, so peers can ring the bell), serving the endpoint (whose directory
/// holds the doorbell), its QPs `qps` and the network transport's sockets `net`;
/// `busy_poll` is the device's `RVERBS_BUSY_POLL` setting (`None`: detected; see the
/// module doc).
pub(crate) fn start(endpoint: &'static Endpoint, qps: &'static dyn Kicks, net: Option<&'static dyn NetRx>, busy_poll: Option<bool>) {
    PROGRESS[endpoint.slot].get_or_init(|| spawn(endpoint, qps, net, busy_poll));
}

/// Wakes the progress thread of slot `slot` to look at its deadlines again (the network
/// transport holds a packet back).
pub(crate) fn wake(slot: usize) {
    // Not started yet (a transport used on its own, in tests): nothing to wake.
    if let Some(p) = started(slot) {
        p.wake.signal();
    }
}

/// Whether an application thread of this process may hold ACKs ([`deadline_added`] sets
/// it, [`application_waits`] clears it): one load for a call that finds none.
static MAY_HOLD_ACKS: AtomicBool = AtomicBool::new(false);

/// The application moved on from polling: it arms a CQ, waits for an event (a completion
/// channel's, the device's asynchronous ones, the connection manager's) or calls the
/// connection manager. On every device, the progress thread stops standing by
/// (docs/progress-and-events.md, "Busy-polling applications": nobody polls for the
/// datagrams it left), and the ACKs this process's application threads hold leave
/// (docs/network.md, "Coalesced ACKs"): no request of theirs is about to carry them, and
/// a peer may be waiting for them. One load each when no thread received inline and none
/// is held. A hold that races with this call waits for its deadline instead.
pub fn application_waits() {
    if INLINE_RECEIVED.load(Ordering::Relaxed) && INLINE_RECEIVED.swap(false, Ordering::Relaxed) {
        for p in PROGRESS.iter().filter_map(|p| p.get()) {
            if p.busy.end() {
                p.wake.signal();
            }
        }
    }
    if !MAY_HOLD_ACKS.load(Ordering::Acquire) || !MAY_HOLD_ACKS.swap(false, Ordering::AcqRel) {
        return;
    }
    for p in PROGRESS.iter().filter_map(|p| p.get()) {
        if let Some(net) = p.net {
            net.send_held_acks();
        }
    }
}

/// A deadline of the network transport's (`NetRx::poll_timeout`) at `at` (the device
/// clock, `clock::device_ns`) was just added by another thread, without the lock of the
/// thread's timers: ACKs an application thread holds (docs/network.md, "Coalesced ACKs").
/// Wakes the progress thread of slot `slot` if it waits past `at`, so that it reads its
/// deadlines again; one that runs reads them before it next waits.
///
/// Rule: either this load sees the planned wake-up the thread stored before it waits, or
/// the thread's second reading of its deadlines (after its fence, in [`run`]) sees the new
/// one: a held ACK never waits for the next datagram or the requester's retransmission.
/// The wake-up is rare: a thread that waits with a held ACK's deadline wakes by then and
/// waits for the next one it finds.
pub(crate) fn deadline_added(slot: usize, at: u64) {
    MAY_HOLD_ACKS.store(true, Ordering::Release);
    let Some(p) = started(slot) else { return };
    p.held_at.store(crate::clock::device_ns(), Ordering::Relaxed);
    // Pairs with the fence in `run` (the thread stores, then reads the deadlines; this
    // thread added a deadline, then reads what the thread stored).
    std::sync::atomic::fence(Ordering::SeqCst);
    let until = p.sleep_until.load(Ordering::Relaxed);
    if until != AWAKE && until > at {
        p.wake.signal();
    }
}

/// Asks the progress thread of endpoint `ep`'s device to kick `qp`'s send queue at `at`.
pub(crate) fn schedule(ep: &Endpoint, at: Instant, qp: Weak<dyn Timed>) {
    let p = progress(ep.slot);
    let mut t = p.timers.lock().expect("timers");
    t.seq += 1;
    let seq = t.seq;
    let earliest = t.heap.peek().map(|Reverse(x)| x.at);
    t.heap.push(Reverse(Timer { at, seq, qp }));
    drop(t);
    if earliest.is_none_or(|e| at < e) {
        p.wake.signal();
    }
}

/// Adds descriptor `fd` to what the progress thread waits on, as network socket `index`
/// ([`NetRx::readable`] is called with it): a socket the network transport bound after
/// the thread started (a RoCEv2 port taken over from an owner that exited, a multicast
/// group's socket). `fd` must stay open until [`unwatch_net_fd`], or as long as the
/// process runs. Without a progress thread (a transport used on its own, in tests)
/// nothing waits on it.
pub(crate) fn watch_net_fd(slot: usize, index: usize, fd: BorrowedFd<'_>) {
    let Some(p) = started(slot) else { return };
    let mut fds = p.net_fds.lock().expect("net fds");
    if let Err(err) = epoll::add(&p.epoll, fd, epoll::EventData::new_u64(TOKEN_NET + index as u64), p.net_flags()) {
        tracing::warn!(index, %err, "cannot wait on a network socket: it is read only when a CQ is polled");
        return;
    }
    fds.insert(index, fd.as_raw_fd());
}

/// Stops waiting on a descriptor [`watch_net_fd`] added, before it closes; an event for it
/// already taken from the wait may still name its index once (the transport finds the
/// index unused, or a new socket with nothing to read).
pub(crate) fn unwatch_net_fd(slot: usize, fd: BorrowedFd<'_>) {
    if let Some(p) = started(slot) {
        let mut fds = p.net_fds.lock().expect("net fds");
        fds.retain(|_, raw| *raw != fd.as_raw_fd());
        let _ = epoll::delete(&p.epoll, fd);
    }
}

/// Watches a peer's pidfd: its death is noticed at once. Once: a pidfd stays readable
/// after the exit, and a peer's number may belong to a new process by the time the event
/// is handled ([`peer_died`]).
pub(crate) fn watch_peer(slot: usize, peer: &Arc<Peer>) {
    let p = progress(slot);
    p.peers.lock().expect("peers").insert(peer.ep, Arc::downgrade(peer));
    let _ = epoll::add(
        &p.epoll,
        peer.pidfd(),
        epoll::EventData::new_u64(TOKEN_PEER | u64::from(peer.ep)),
        epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
    );
}

fn run(p: &'static Progress) {
    let mut events: Vec<epoll::Event> = Vec::with_capacity(crate::sys::EPOLL_EVENTS);
    // Network descriptors left to an application thread that busy-polls, watched again
    // once it stopped (`busy_poll::BusyPolling::standing_by`) or waits for an event.
    let mut left: Vec<usize> = Vec::new();
    loop {
        // Fire due timers; find the next deadline.
        let next = loop {
            let mut t = p.timers.lock().expect("timers");
            let now = Instant::now();
            match t.heap.peek() {
                Some(Reverse(first)) if first.at <= now => {
                    let Reverse(due) = t.heap.pop().expect("peeked");
                    drop(t);
                    if let Some(qp) = due.qp.upgrade() {
                        qp.fire();
                    }
                }
                Some(Reverse(first)) => break Some(first.at - now),
                None => break None,
            }
        };
        // The network transport's own deadline (held-back packets): serve what is due,
        // then wait no longer than its next one.
        let net_next = p.net.and_then(|n| {
            let now = Instant::now();
            if n.poll_timeout().is_some_and(|at| at <= now) {
                n.handle_timeout(now);
            }
            n.poll_timeout().map(|at| at.saturating_duration_since(now))
        });
        let mut next = match (next, net_next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if !left.is_empty() {
            // Said before the standby is read again: an `application_waits` that this
            // reading misses sees it, and wakes the thread (the fences pair).
            match p.busy.leave(crate::clock::device_ns()) {
                Some(left_for) => next = Some(next.map_or(left_for, |d| d.min(left_for))),
                None => {
                    left.drain(..).for_each(|i| p.rearm(i));
                    p.busy.watched();
                }
            }
        }
        // While application threads hold ACKs now and then, wake every HOLDING_WAIT at
        // least: their next holds then find this thread due to wake by their deadline.
        let held_at = p.held_at.load(Ordering::Relaxed);
        if held_at != 0 && crate::clock::device_ns().saturating_sub(held_at) < HOLDING.as_nanos() as u64 {
            next = Some(next.map_or(HOLDING_WAIT, |n| n.min(HOLDING_WAIT)));
        }
        // The wake-up planned, for `deadline_added`; then the network transport's
        // deadlines once more: one another thread added after they were read above (an
        // ACK held) either is seen here or sees this plan (the fences pair).
        let planned = next.map_or(u64::MAX, |d| crate::clock::device_ns().saturating_add(d.as_nanos().min(u128::from(u64::MAX - 1)) as u64));
        p.sleep_until.store(planned, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(at) = p.net.and_then(|n| n.poll_timeout()) {
            let d = at.saturating_duration_since(Instant::now());
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        // An early wake-up is harmless: the loop checks the deadline again. The timeout
        // keeps its microseconds (`sys::epoll_wait_fine`): the 200 µs deadlines above
        // are not a millisecond.
        events.clear();
        let waited = crate::sys::epoll_wait_fine(p.epoll.as_fd(), &mut events, next);
        p.sleep_until.store(AWAKE, Ordering::Relaxed);
        match waited {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                tracing::error!(%e, "epoll_wait failed; progress thread stops");
                return;
            }
        }
        for ev in &events {
            let data = ev.data;
            match data.u64() {
                TOKEN_WAKE => while p.wake.wait().is_ok() {},
                TOKEN_BELL => ring_bell(p),
                t if t & TOKEN_PEER != 0 => peer_died(p, (t & 0xffff_ffff) as u32),
                t if t >= TOKEN_NET => {
                    let index = (t - TOKEN_NET) as usize;
                    if p.standing_by() {
                        // An application thread receives: the socket is its until it stops.
                        p.disarm(index);
                        left.push(index);
                        continue;
                    }
                    if let Some(net) = p.net {
                        net.readable(index);
                    }
                    if p.busy.mode() == Mode::Always {
                        p.rearm(index);
                    }
                }
                _ => {}
            }
        }
        run_deferred(p);
    }
}

fn ring_bell(p: &Progress) {
    read_bell(p, true);
}

/// Reads every queued doorbell record: proxy requests are served at once; QP kicks are
/// run now if `kick`, else deferred to the next call that may.
fn read_bell(p: &Progress, kick: bool) {
    let Some(b) = &p.bell else { return };
    let mut rec = [0u8; bell::LEN];
    while b.recv(&mut rec).is_ok() {
        let kind = u32::from_ne_bytes(rec[..4].try_into().expect("4 bytes"));
        let arg = u32::from_ne_bytes(rec[4..].try_into().expect("4 bytes"));
        match kind {
            bell::PROXY => crate::mr::proxy::serve(p.endpoint, arg),
            bell::KICK_QP => p.deferred.lock().expect("deferred kicks").push(arg),
            _ => {}
        }
    }
    if kick {
        run_deferred(p);
    }
}

/// Runs the QP kicks peers asked for.
fn run_deferred(p: &Progress) {
    let qpns = std::mem::take(&mut *p.deferred.lock().expect("deferred kicks"));
    for qpn in qpns {
        p.qps.errored_by_peer(qpn);
    }
}

fn peer_died(p: &Progress, ep: u32) {
    let mut peers = p.peers.lock().expect("peers");
    // The event names the number only: a peer watched under it whose process has not
    // exited is the number's next owner, and the event its predecessor's (whose pidfd,
    // watched once, fires no more).
    let owns = |peer: &Peer| p.endpoint.reg.as_ref().map_or(!peer.exited(), |r| r.owns_now(peer));
    if peers.get(&ep).and_then(Weak::upgrade).is_some_and(|peer| owns(&peer)) {
        return;
    }
    let gone = peers.remove(&ep).and_then(|w| w.upgrade());
    drop(peers);
    if let Some(peer) = gone {
        tracing::info!(ep, pid = peer.pid, "peer endpoint died");
        peer.mark_dead();
        let _ = epoll::delete(&p.epoll, peer.pidfd());
    }
    if let Some(r) = &p.endpoint.reg {
        r.forget(ep);
    }
    if let Some(net) = p.net {
        net.peer_died();
    }
}
