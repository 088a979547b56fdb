//! Port takeover: when the process that owns an address's RoCEv2 port exits, another
//! process of the host takes the port over, so that the host stays reachable on it
//! (docs/network.md, "Port takeover").
//!
//! Rule: when the owner exits, its port is free; a process with a socket that does not
//! own its address's port takes it over ([`Takeover::attempt`]): its progress thread tries
//! to bind `address:4791` again every [`TAKEOVER_PERIOD`] (500 ms) while some socket is not
//! the owner, and at once when a peer it watches dies (`progress::watch_peer`; the owner
//! is one only if this process reached it, so mostly the timer finds the port free). Cost
//! while not the owner: one progress-thread wake-up per period and, per such address, one
//! failed `bind` (a socket, a bind, a close: microseconds); nothing once every port is
//! this process's. `bind` is atomic: of several processes trying at once, or the old owner
//! restarting, exactly one gets the port, and the others keep sending from their own
//! ports and receive through it. The winner's new socket is added to the progress
//! thread's wait (`progress::watch_net_fd`) and is an owner like any: it receives,
//! checks, delivers UD for the other processes and relays RC/UC to their published ports,
//! from `address:4791`, so their sockets take its relays as they took the old owner's
//! (`super::relay`). The process keeps *sending* from its old socket (RC connections
//! already running keep their source port, the send path stays lock-free over the sockets
//! bound at start, and peers answer to 4791, which now reaches the new socket); the old
//! socket stays polled (only stray datagrams reach it) and its published port stays in the
//! endpoint header (nobody relays to the owner itself). Until the takeover, for up to a
//! period, the others' QPs are unreachable from the network on that address, which RC's
//! retransmits cover when it is shorter than the requester's timeout × retry count.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::socket::NetSock;

/// How often a process with a socket that does not own its address's RoCEv2 port tries
/// to bind that port (module docs).
pub(crate) const TAKEOVER_PERIOD: Duration = Duration::from_millis(500);

/// The takeover state of the sockets bound at start (the same index as theirs).
pub(super) struct Takeover {
    /// Per socket that does not own its address's RoCEv2 port: the socket bound to that
    /// port once this process took it over from an owner that exited. Set once, then read
    /// without a lock.
    taken: Vec<OnceLock<NetSock>>,
    /// When the next takeover attempt is due; `None` once every address's port is this
    /// process's.
    next: Mutex<Option<Instant>>,
}

impl Takeover {
    /// The takeover state of sockets `socks`, created at `now`: the first attempt is one
    /// period later, if some socket does not own its port.
    pub(super) fn new(socks: &[NetSock], now: Instant) -> Takeover {
        let taken = socks.iter().map(|_| OnceLock::new()).collect();
        let next = socks.iter().any(|s| !s.owns_port()).then_some(now + TAKEOVER_PERIOD);
        Takeover { taken, next: Mutex::new(next) }
    }

    /// When the next attempt is due (`None`: never, every port is this process's).
    pub(super) fn deadline(&self) -> Option<Instant> {
        *self.next.lock().expect("takeover deadline")
    }

    /// If an attempt is due at `now`: tries to bind the RoCEv2 port of each address of
    /// `socks` whose port this process does not own yet, and returns the receive indices
    /// (`Net::rx_sock`: `socks.len()` + the socket's index) of the sockets that now own
    /// one. The next attempt is due one [`TAKEOVER_PERIOD`] later, or never once every
    /// port is this process's.
    ///
    /// Rule: `bind` is atomic, so of several processes trying at once (or an exited
    /// owner restarting) exactly one gets the port; the others keep their ephemeral
    /// sockets, receive through the new owner, and keep trying.
    pub(super) fn attempt(&self, socks: &[NetSock], now: Instant) -> Vec<usize> {
        let mut next = self.next.lock().expect("takeover deadline");
        if next.is_none_or(|at| at > now) {
            return Vec::new();
        }
        let mut got = Vec::new();
        for (i, s) in socks.iter().enumerate() {
            if s.owns_port() || self.taken[i].get().is_some() {
                continue;
            }
            match s.take_over() {
                Ok(owner) => {
                    tracing::info!(ip = %s.ip, port = owner.port, "took over the RoCEv2 port: its owner exited");
                    let _ = self.taken[i].set(owner);
                    got.push(socks.len() + i);
                }
                Err(err) => tracing::trace!(ip = %s.ip, %err, "RoCEv2 port still owned"),
            }
        }
        let all = socks.iter().enumerate().all(|(i, s)| s.owns_port() || self.taken[i].get().is_some());
        *next = (!all).then_some(now + TAKEOVER_PERIOD);
        got
    }

    /// A peer process died, which may have owned an address's RoCEv2 port: the next
    /// attempt is due at once (if one is pending at all).
    pub(super) fn peer_died(&self) {
        let mut next = self.next.lock().expect("takeover deadline");
        if next.is_some() {
            *next = Some(Instant::now());
        }
    }

    /// The socket that took over the port of socket `i`, if it did.
    pub(super) fn taken(&self, i: usize) -> Option<&NetSock> {
        self.taken.get(i)?.get()
    }
}

impl NetSock {
    /// A new socket bound to the owner's port of this socket's address, for the same GID
    /// and trace: the port is free (its owner exited). Fails (`EADDRINUSE`) while a
    /// process holds it.
    fn take_over(&self) -> std::io::Result<NetSock> {
        let sock = NetSock::bind(self.ip, self.owner_port, self.gid)?;
        Ok(NetSock { owner_port: self.owner_port, trace: self.trace.clone(), counters: self.counters, ..sock })
    }
}
