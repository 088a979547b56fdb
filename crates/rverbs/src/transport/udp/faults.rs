//! Fault injection on the send path of the network transport: `RVERBS_FAULTS=spec`
//! (`rverbs_proto::fault::FaultConfig::parse`: seed, drop, dup, reorder, reorder_by,
//! corrupt, delay) at start, or [`crate::Context::set_network_faults`] at any time, puts the
//! deterministic injector between the sockets and the wire; packets it holds back leave
//! from the progress thread when due.
//!
//! Read before editing: docs/network.md, "Capture and fault injection".

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use rverbs_proto::fault::{Corrupt, FaultConfig, Injector};

use super::socket::NetSock;

/// A datagram on its way out, as the fault injector holds it.
#[derive(Clone)]
struct Datagram {
    from: IpAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

impl Corrupt for Datagram {
    fn corrupt(&mut self, random: u64) {
        self.bytes.corrupt(random);
    }
}

/// The deterministic fault injector on the send path of every socket of this process:
/// set from `RVERBS_FAULTS=spec` (`rverbs_proto::fault::FaultConfig::parse`) at start, and
/// at any time by [`crate::Context::set_network_faults`]. A packet it holds back (delay,
/// reorder) leaves when due, from the progress thread.
pub(super) struct Faults {
    /// Whether an injector is set (the send path's one check when none is).
    on: AtomicBool,
    inj: Mutex<Option<Injector<Datagram>>>,
    /// The device slot whose progress thread sends what is held back.
    slot: usize,
}

impl Faults {
    /// No injector, and no progress thread to wake (a transport used on its own, in tests).
    pub(super) fn none() -> Faults {
        Faults { on: AtomicBool::new(false), inj: Mutex::new(None), slot: usize::MAX }
    }

    /// The injector of the device's setting `cfg` (`RVERBS_FAULTS`'s packet faults,
    /// `DeviceConfig::net_faults`), if any, waking the progress thread of device slot
    /// `slot` when it holds a packet back.
    pub(super) fn with(cfg: Option<FaultConfig>, slot: usize) -> Faults {
        let f = Faults { slot, ..Faults::none() };
        if let Some(cfg) = cfg {
            f.set(cfg);
        }
        f
    }

    /// Replaces the injector by one with `cfg` (none if `cfg` injects nothing); returns
    /// what the old one still held back, to be sent now.
    fn set(&self, cfg: FaultConfig) -> Vec<Datagram> {
        let mut inj = self.inj.lock().expect("fault injector");
        let mut held = Vec::new();
        if let Some(old) = inj.as_mut() {
            while let Some(d) = old.pop_due(Instant::now() + std::time::Duration::from_secs(3600)) {
                held.push(d);
            }
        }
        *inj = (!cfg.is_none()).then(|| Injector::new(cfg));
        self.on.store(inj.is_some(), Ordering::Release);
        held
    }

    /// Whether an injector is set.
    pub(super) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Puts a new injector with `cfg` on the send path of the sockets `socks`
    /// (`FaultConfig::NONE`: none); what the previous one held back is sent now.
    pub(super) fn replace(&self, socks: &[NetSock], cfg: FaultConfig) {
        for d in self.set(cfg) {
            if let Some(s) = socks.iter().find(|s| s.ip == d.from) {
                s.transmit(d.to, &d.bytes);
            }
        }
        if !cfg.is_none() {
            tracing::info!(?cfg, "injecting faults on the RoCEv2 send path");
        }
        crate::progress::wake(self.slot);
    }

    /// Sends the RoCEv2 packet `packet` (BTH to ICRC; the ICRC written here) from `sock`,
    /// one of `socks`, to `to` through the injector: it may drop, duplicate, corrupt,
    /// delay or reorder it; what it releases leaves from the socket it was sent on.
    pub(super) fn send(&self, socks: &[NetSock], sock: &NetSock, to: SocketAddr, packet: &mut [u8]) {
        if !sock.seal(to, packet) {
            return;
        }
        let now = Instant::now();
        let mut guard = self.inj.lock().expect("fault injector");
        let Some(inj) = guard.as_mut() else {
            // Switched off since the check.
            sock.transmit(to, packet);
            return;
        };
        inj.send(now, Datagram { from: sock.ip, to, bytes: packet.to_vec() });
        release(socks, inj, now);
        if inj.poll_timeout().is_some() {
            // Held back: the progress thread sends it when due.
            crate::progress::wake(self.slot);
        }
    }

    /// When the injector next releases a held-back packet.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        if self.is_on() {
            self.inj.lock().expect("fault injector").as_ref().and_then(|i| i.poll_timeout())
        } else {
            None
        }
    }

    /// Sends the held-back packets that are due, each from the socket of `socks` it was
    /// sent on.
    pub(super) fn release_due(&self, socks: &[NetSock], now: Instant) {
        if let Some(inj) = self.inj.lock().expect("fault injector").as_mut() {
            release(socks, inj, now);
        }
    }
}

/// Sends what the injector holds that is due, each from the socket it was sent on.
fn release(socks: &[NetSock], inj: &mut Injector<Datagram>, now: Instant) {
    while let Some(d) = inj.pop_due(now) {
        if let Some(s) = socks.iter().find(|s| s.ip == d.from) {
            s.transmit(d.to, &d.bytes);
        }
    }
}
