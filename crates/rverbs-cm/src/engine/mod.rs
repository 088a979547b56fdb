//! The connection-manager engine of this process: every id's state, the QP1 MADs it
//! sends and receives, its timers and its watch on peer processes.
//!
//! One engine per device of the process (the listed device's, and one per device a
//! channel was made for with [`EventChannel::on`]), started with its first id; an id
//! belongs to the engine of its channel's device for its life. Application calls lock the
//! engine's state, act (move a QP, send a MAD, queue an event) and return; a thread
//! receives MADs from QP1, fires timers and notices peer deaths, so the handshake
//! progresses while the application blocks elsewhere (in ibv_get_cq_event(3), say) —
//! as with the kernel's rdma_cm, which is asynchronous.
//!
//! The handshake itself is a sans-I/O state machine (`handshake.rs`, with the boundary
//! in `world.rs`): each input (a call, a MAD, the clock, a peer's death) is handed to it
//! under the state lock with a [`Cx`], and the [`Action`]s it returns are executed here
//! before the lock is released, in order: MADs sent on QP1, peers watched with pidfds,
//! events queued on channels, QPs flushed. Address and route resolution, binding and
//! listening stay here: they are the host's tables and the kernel's neighbours.
//!
//! Lock order: the engine state, then a channel's queue, then an id's
//! acknowledgement counters. Nothing waits for acknowledgements while holding the state.

mod handshake;
mod joins;
mod mcast;
mod msg;
mod qp;
mod state;
#[cfg(test)]
mod tests;
mod world;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rustix::event::epoll;
use rverbs::capi_support::qp1::{MadPeer, Qp1};
use rverbs::{Context, QpType};
use rverbs_proto::verb_fault::Verb;

use rverbs::{Qp, QpAttr, QpAttrMask, QpState};

use crate::channel::EventChannel;
use crate::error::{Error, Result};
use crate::event::EventKind;
use crate::handle::{CmId, PortSpace};
use crate::rule::Rule;
use crate::table::{Owner, Table};
use state::{simple_event, IdState, St, State};
use world::{Action, Cx, World};

pub use joins::JoinFlag;
pub(crate) use msg::Reason;
pub use qp::RDMA_UDP_QKEY;

/// The connection manager of one device of the process.
pub(crate) struct Engine {
    /// The device (`None`: the listed one, `rverbs::devices()`).
    pub(crate) device: Option<rverbs::Device>,
    /// Its device slot, the index of [`ENGINES`].
    slot: usize,
    /// The addresses the device serves alone (`rverbs::DeviceConfig::addresses`: a
    /// simulated host), `None` for the host's. Its loopback addresses are then addresses
    /// like any other: bound with the device, reached at their own GID.
    served: Option<Vec<std::net::IpAddr>>,
    pub(crate) qp1: Qp1,
    pub(crate) table: Table,
    pub(crate) ctx: Context,
    state: Mutex<State>,
    epoll: OwnedFd,
    wake: OwnedFd,
}

const KEY_QP1: u64 = u64::MAX;
const KEY_WAKE: u64 = u64::MAX - 1;

/// One engine per device slot (`rverbs::capi_support::MAX_DEVICES`). The listed device
/// of each process generation has a slot of its own, so a child that `fork` created runs
/// its own engine on its own endpoint (`rverbs::capi_support::default_device_slot`).
static ENGINES: [OnceLock<std::result::Result<Engine, i32>>; rverbs::capi_support::MAX_DEVICES] =
    [const { OnceLock::new() }; rverbs::capi_support::MAX_DEVICES];

/// The engine of `device` (`None`: the listed device), started on first use.
///
/// Every call of the connection manager comes through here or [`engine_of`]: the
/// application moved on from the exchange whose ACKs its verbs hold, so they leave now
/// (rverbs's docs/network.md, "Coalesced ACKs"): a peer that waits for one (its send
/// completion, before it listens again) is not kept waiting for their deadline.
pub(crate) fn engine_on(device: Option<&rverbs::Device>) -> Result<&'static Engine> {
    rverbs::capi_support::application_waits();
    let slot = match device {
        Some(d) => d.slot_index()?,
        None => rverbs::capi_support::default_device_slot(),
    };
    let e = ENGINES[slot].get_or_init(|| match Engine::start(device.copied(), slot) {
        Ok(e) => Ok(e),
        Err(err) => {
            tracing::warn!(%err, "connection manager unavailable");
            Err(err.errno())
        }
    });
    match e {
        Ok(e) => {
            ensure_thread(e);
            Ok(e)
        }
        Err(errno) => Err(Error::Os(std::io::Error::from_raw_os_error(*errno))),
    }
}

/// The device slot of the engine `channel`'s ids use.
fn channel_slot(channel: &EventChannel) -> Result<usize> {
    match channel.device() {
        Some(d) => Ok(d.slot_index()?),
        None => Ok(rverbs::capi_support::default_device_slot()),
    }
}

/// The device of id `id` (`None`: the listed device), for a channel of its own.
pub(crate) fn device_of(id: &CmId) -> Result<Option<rverbs::Device>> {
    Ok(engine_of(id)?.device)
}

/// The engine id `id` belongs to (started: it made the id). Held ACKs leave first, as
/// in [`engine_on`].
pub(crate) fn engine_of(id: &CmId) -> Result<&'static Engine> {
    rverbs::capi_support::application_waits();
    match ENGINES.get(id.shared.slot).and_then(|e| e.get()) {
        Some(Ok(e)) => Ok(e),
        _ => Err(Error::Os(std::io::Error::from_raw_os_error(libc::ENODEV))),
    }
}

fn ensure_thread(e: &'static Engine) {
    static THREADS: [OnceLock<()>; rverbs::capi_support::MAX_DEVICES] = [const { OnceLock::new() }; rverbs::capi_support::MAX_DEVICES];
    THREADS[e.slot].get_or_init(|| {
        // Returns once the thread's start-up is done (rverbs' service_thread.rs says why).
        rverbs::capi_support::spawn_service_thread("rverbs-cm", move || e.run())
            .expect("spawn the connection manager thread");
    });
}

impl Engine {
    fn start(configured: Option<rverbs::Device>, slot: usize) -> Result<Engine> {
        // The engine's own context, for the life of the process: not a leak of the
        // application's (docs/sanitizer.md).
        let device = match configured {
            Some(d) => d,
            None => rverbs::devices()?.into_iter().next().ok_or(Error::Os(std::io::Error::from_raw_os_error(libc::ENODEV)))?,
        };
        let ctx = rverbs::capi_support::sanitizer_internal(|| device.open())?;
        let qp1 = match configured {
            Some(d) => Qp1::open_on(&d)?,
            None => Qp1::open()?,
        };
        let alive_qp1 = Arc::new(move |ep: u32, pid: i32| owner_alive(slot, ep, pid));
        let table = Table::open(qp1.runtime_dir(), qp1.endpoint(), qp1.pid(), alive_qp1)?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK)?;
        epoll::add(&epoll, qp1.fd(), epoll::EventData::new_u64(KEY_QP1), epoll::EventFlags::IN)?;
        epoll::add(&epoll, &wake, epoll::EventData::new_u64(KEY_WAKE), epoll::EventFlags::IN)?;
        rverbs::fault_plan::set_disconnect_hook(queue_disconnect);
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            ^ (u64::from(qp1.pid() as u32) << 32);
        Ok(Engine {
            device: configured,
            slot,
            served: configured.and_then(|d| d.config().served_addresses().map(<[_]>::to_vec)),
            state: Mutex::new(State::new(seed, slot)),
            qp1,
            table,
            ctx,
            epoll,
            wake,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the thread recompute its next deadline.
    pub(crate) fn kick(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    fn run(&'static self) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(16);
        loop {
            let timeout = {
                let st = self.lock();
                st.next_deadline().map(|d| d.saturating_duration_since(Instant::now()))
            };
            let timeout = timeout.map(|t| rustix::time::Timespec { tv_sec: t.as_secs() as i64, tv_nsec: i64::from(t.subsec_nanos()) });
            events.clear();
            match epoll::wait(&self.epoll, rustix::buffer::spare_capacity(&mut events), timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    tracing::error!(%e, "connection manager thread: epoll failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            for ev in &events {
                let data = ev.data;
                match data.u64() {
                    KEY_QP1 => self.drain_qp1(),
                    KEY_WAKE => {
                        let mut b = [0u8; 8];
                        let _ = rustix::io::read(&self.wake, &mut b);
                    }
                    key => self.peer_died((key & 0xffff_ffff) as u32, (key >> 32) as i32),
                }
            }
            let dead = std::mem::take(&mut self.lock().dead);
            for (ep, pid) in dead {
                self.peer_died(ep, pid);
            }
            self.injected_disconnects();
            self.deliver_deferred();
            self.fire_timers(Instant::now());
        }
    }

    /// Runs `f`, one input of the state machine, at `now` with the state locked, and
    /// executes the actions it returns.
    fn input<T>(&self, st: &mut State, now: Instant, f: impl FnOnce(&mut Cx, &mut State) -> T) -> T {
        let mut cx = Cx::new(self, now);
        let r = f(&mut cx, st);
        self.execute(st, cx.out, now);
        r
    }

    /// Executes `actions` in order (`world.rs`). A MAD that could not be sent to an id's
    /// peer is that peer's death, an input whose actions run next.
    fn execute(&self, st: &mut State, actions: Vec<Action>, now: Instant) {
        let mut queue = std::collections::VecDeque::from(actions);
        while let Some(a) = queue.pop_front() {
            match a {
                Action::Send { to, mad, id } => {
                    if let Err(err) = self.qp1.send_to(to, &mad) {
                        tracing::debug!(%err, ?to, "CM message not sent");
                        if let Some(n) = id {
                            let mut cx = Cx::new(self, now);
                            handshake::peer_gone(&mut cx, st, n);
                            queue.extend(cx.out);
                        }
                    }
                }
                Action::Forward { ep, mad, refuse } => {
                    if self.qp1.forward(ep, &mad).is_err() {
                        let _ = self.qp1.send_to(mad.from, &refuse);
                    }
                }
                Action::Watch { peer, pid } => self.watch(st, peer, pid),
                Action::Unwatch { peer, pid } => self.unwatch(st, peer, pid),
                Action::Deliver { channel, event } => channel.push(event),
                Action::QpToErr(qp) => qp::to_err(&qp),
            }
        }
    }

    fn deliver_deferred(&self) {
        let mut st = self.lock();
        let deferred = std::mem::take(&mut st.deferred);
        self.input(&mut st, Instant::now(), |cx, st| {
            for (n, kind, status) in deferred {
                match kind {
                    EventKind::MulticastJoin => mcast::deliver(cx, st, n),
                    _ => simple_event(cx, st, n, kind, status),
                }
            }
        });
    }

    fn drain_qp1(&self) {
        loop {
            match self.qp1.recv() {
                Ok(Some(mad)) => {
                    let mut st = self.lock();
                    self.input(&mut st, Instant::now(), |cx, st| handshake::receive(cx, st, &mad));
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(%e, "QP1 receive failed");
                    return;
                }
            }
        }
    }

    fn fire_timers(&self, now: Instant) {
        let mut st = self.lock();
        self.input(&mut st, now, |cx, st| {
            resolve_due(cx, st);
            handshake::tick(cx, st);
        });
    }

    /// Process `pid`, which held endpoint `ep`, died: the ids that talked to it (not those
    /// that talk to a later holder of the number) learn it.
    fn peer_died(&self, ep: u32, pid: i32) {
        let mut st = self.lock();
        if let Some((fd, _)) = st.watches.remove(&(ep, pid)) {
            let _ = epoll::delete(&self.epoll, &fd);
        }
        tracing::debug!(ep, pid, "peer endpoint died");
        let ids: Vec<u64> = st
            .ids
            .iter()
            .filter(|(_, s)| s.remote == Some(MadPeer::Endpoint(ep)) && s.remote_pid == Some(pid))
            .map(|(n, _)| *n)
            .collect();
        self.input(&mut st, Instant::now(), |cx, st| {
            for n in ids {
                handshake::peer_gone(cx, st, n);
            }
        });
        drop(st);
        self.table.reclaim();
    }

    /// Watches `peer` for the ids that talk to it: process `pid` holding an endpoint of
    /// this host (not this one); nothing for another host (its death is learnt as the
    /// IBTA says: by timeouts).
    pub(crate) fn watch(&self, st: &mut State, peer: MadPeer, pid: Option<i32>) {
        let (MadPeer::Endpoint(ep), Some(pid)) = (peer, pid) else { return };
        if ep == self.qp1.endpoint() {
            return;
        }
        if let Some(w) = st.watches.get_mut(&(ep, pid)) {
            w.1 += 1;
            return;
        }
        // The pidfd of `pid` if it holds the endpoint now; if not, `pid` is dead.
        let fd = self.qp1.watch(ep, pid).ok();
        let key = (u64::from(pid as u32) << 32) | u64::from(ep);
        match fd {
            Some(fd) if epoll::add(&self.epoll, &fd, epoll::EventData::new_u64(key), epoll::EventFlags::IN).is_ok() => {
                st.watches.insert((ep, pid), (fd, 1));
            }
            _ => {
                // Already dead: the thread handles it like a death it saw.
                st.dead.push((ep, pid));
                self.kick();
            }
        }
    }

    pub(crate) fn unwatch(&self, st: &mut State, peer: MadPeer, pid: Option<i32>) {
        let (MadPeer::Endpoint(ep), Some(pid)) = (peer, pid) else { return };
        if let Some(w) = st.watches.get_mut(&(ep, pid)) {
            w.1 -= 1;
            if w.1 == 0 {
                let (fd, _) = st.watches.remove(&(ep, pid)).expect("present");
                let _ = epoll::delete(&self.epoll, fd.as_fd());
            }
        }
    }

}

/// The host as the handshake reads it: this process's QP1, device and listener table.
impl World for Engine {
    fn endpoint(&self) -> u32 {
        self.qp1.endpoint()
    }

    fn max_rd_atom(&self) -> u8 {
        self.ctx.query_device().max_qp_rd_atom.min(255) as u8
    }

    fn node_guid(&self) -> u64 {
        self.ctx.query_device().node_guid
    }

    fn local_gid(&self, ip: std::net::IpAddr) -> Option<crate::addr::LocalGid> {
        crate::addr::local_gid(&self.ctx, ip)
    }

    fn listener(&self, ps: PortSpace, dst: SocketAddr) -> Option<Owner> {
        self.table.lookup(ps as u16, dst)
    }

    fn owner_pid(&self, ep: u32) -> Option<i32> {
        self.qp1.owner_pid(ep)
    }

    fn link_mtu(&self, local: std::net::IpAddr) -> u32 {
        self.qp1.link_mtu(local)
    }
}

/// Runs `f`, a verbs call of the state machine on id `id`, in the id's engine: at the
/// time of the call, with the state locked, its actions executed before the lock is
/// released; the thread then recomputes its next deadline.
fn call<T>(id: &CmId, f: impl FnOnce(&mut Cx, &mut State) -> Result<T>) -> Result<T> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    let r = e.input(&mut st, Instant::now(), f);
    drop(st);
    e.kick();
    r
}

pub(crate) fn connect(id: &CmId, param: &crate::event::ConnParam) -> Result<()> {
    call(id, |cx, st| {
        // The fault plan (docs/fault-injection.md) counts only the calls that may connect.
        let fault = if st.id(id)?.st() == St::RouteResolved { rverbs::fault_plan::cm_fail(Verb::Connect) } else { None };
        handshake::connect(cx, st, id, param, fault.map(|e| e.number()))
    })
}

/// The QPs whose connections the fault plan disconnects (`event=DISCONNECTED`), with the
/// slot of their device, queued by the verb that met the item for that device's engine
/// thread, which disconnects them: the verb may run inside the engine (which moves QPs),
/// so it must not take the engine's state.
static INJECTED_DISCONNECTS: Mutex<Vec<(usize, u32)>> = Mutex::new(Vec::new());

/// The fault plan's disconnect hook ([`rverbs::fault_plan::set_disconnect_hook`]).
/// A device without a started engine has no rdma_cm id, so none owns the QP.
fn queue_disconnect(slot: usize, qpn: u32) {
    let Some(engine) = ENGINES.get(slot).and_then(|e| e.get()).and_then(|r| r.as_ref().ok()) else {
        no_owner(qpn, "no connection manager runs on its device");
        return;
    };
    INJECTED_DISCONNECTS.lock().unwrap_or_else(|p| p.into_inner()).push((slot, qpn));
    engine.kick();
}

/// The fault plan picked a QP no rdma_cm id owns, for the reason `why`: there is no
/// connection to disconnect.
fn no_owner(qpn: u32, why: &str) {
    tracing::warn!(qpn, "fault plan: no rdma_cm id owns the QP ({why}); nothing to disconnect");
}

impl Engine {
    /// Disconnects the connections of the QPs the fault plan picked on this engine's
    /// device, as rdma_disconnect(3) on their ids: the QP enters ERR, the peer is told,
    /// both sides get DISCONNECTED.
    fn injected_disconnects(&self) {
        let qpns: Vec<u32> = {
            let mut all = INJECTED_DISCONNECTS.lock().unwrap_or_else(|p| p.into_inner());
            let mut taken = Vec::new();
            all.retain(|&(slot, qpn)| {
                let mine = slot == self.slot;
                if mine {
                    taken.push(qpn);
                }
                !mine
            });
            taken
        };
        for qpn in qpns {
            let mut st = self.lock();
            let id = st.ids.values().find(|s| s.qp.as_ref().is_some_and(|q| q.qp_num() == qpn)).map(|s| s.handle.clone());
            let Some(id) = id else {
                no_owner(qpn, "no id of its device holds it");
                continue;
            };
            if let Err(err) = self.input(&mut st, Instant::now(), |cx, st| handshake::disconnect(cx, st, &id)) {
                tracing::warn!(qpn, %err, "fault plan: the injected disconnection failed");
            }
        }
    }
}

pub(crate) fn accept(id: &CmId, param: Option<&crate::event::ConnParam>) -> Result<()> {
    call(id, |cx, st| handshake::accept(cx, st, id, param))
}

pub(crate) fn reject(id: &CmId, private_data: &[u8], reason: u16) -> Result<()> {
    call(id, |cx, st| handshake::reject(cx, st, id, private_data, reason))
}

pub(crate) fn disconnect(id: &CmId) -> Result<()> {
    call(id, |cx, st| handshake::disconnect(cx, st, id))
}

pub(crate) fn establish(id: &CmId) -> Result<()> {
    call(id, |cx, st| handshake::establish(cx, st, id))
}

fn owner_alive(slot: usize, ep: u32, pid: i32) -> bool {
    match ENGINES[slot].get() {
        Some(Ok(e)) => e.qp1.owner_pid(ep) == Some(pid),
        // Before the engine exists (the table is opened while it starts): ask the
        // device directly through a short-lived view is not possible, so treat every
        // entry as alive; entries are checked again on every later lookup.
        _ => true,
    }
}

pub(crate) fn create_id(channel: &EventChannel, ps: PortSpace, qp_type: QpType, context: usize) -> Result<CmId> {
    let e = engine_on(channel.device().as_ref())?;
    let mut st = e.lock();
    Ok(st.new_id(ps, qp_type, context, Some(channel.clone())))
}

pub(crate) fn with_id<T>(id: &CmId, f: impl FnOnce(&mut IdState) -> T) -> Result<T> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    Ok(f(st.id(id)?))
}

pub(crate) fn set_bind_opt(id: &CmId, reuse: Option<bool>, afonly: Option<bool>) -> Result<()> {
    with_id(id, |s| {
        if s.binding.is_some() {
            return Err(Error::invalid("rdma_set_option", Rule::AlreadyBound { state: s.st() }));
        }
        if let Some(r) = reuse {
            s.reuse_addr = r;
        }
        if let Some(a) = afonly {
            s.af_only = a;
        }
        Ok(())
    })?
}

/// Binds id state `s` (of id number `n`) to `addr` in the listener table.
fn bind_locked(e: &Engine, n: u64, s: &mut IdState, addr: SocketAddr) -> Result<()> {
    let ip = crate::addr::canonical(addr.ip());
    let local = if crate::addr::is_wildcard(ip) {
        None
    } else {
        Some(crate::addr::local_gid(&e.ctx, ip).ok_or(Error::AddrNotAvail)?)
    };
    let opts = crate::table::BindOpts { reuse_addr: s.reuse_addr, af_only: s.af_only };
    let binding = e.table.bind(s.ps as u16, SocketAddr::new(ip, addr.port()), n, opts).map_err(|err| {
        if err.raw_os_error() == Some(libc::EADDRINUSE) {
            Error::AddrInUse
        } else {
            Error::Os(err)
        }
    })?;
    s.src = Some(binding.addr());
    s.binding = Some(binding);
    s.sgid = local;
    if s.st() == St::Idle {
        s.enter(St::Bound);
    }
    Ok(())
}

pub(crate) fn bind_addr(id: &CmId, addr: SocketAddr) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    let n = id.number();
    let s = st.id(id)?;
    if s.st() != St::Idle || s.binding.is_some() {
        return Err(Error::invalid("rdma_bind_addr", Rule::AlreadyBound { state: s.st() }));
    }
    bind_locked(e, n, s, addr)?;
    // The kernel's rdma_cm attaches no device to an id bound to a loopback address (no
    // RDMA device sits on `lo`: `id->verbs` stays NULL, as for the any-address; measured
    // on rxe), and a later rdma_resolve_addr picks the device from the destination.
    // libfabric's verbs provider relies on it when it binds `localhost`.
    // A simulated host's loopback address is its interface's, not `lo`'s.
    if crate::addr::canonical(addr.ip()).is_loopback() && e.served.is_none() {
        s.sgid = None;
    }
    Ok(())
}

pub(crate) fn resolve_addr(id: &CmId, src: Option<SocketAddr>, dst: SocketAddr, timeout_ms: i32) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    let n = id.number();
    let s = st.id(id)?;
    // The kernel's resolve_prepare_src: from IDLE (binding first) or ADDR_BOUND only, so an
    // address already resolved is EINVAL; and the destination's family must be the bound
    // address's (cma_family).
    if !matches!(s.st(), St::Idle | St::Bound) || s.resolving.is_some() {
        return Err(Error::invalid("rdma_resolve_addr", Rule::ResolveAddrState { state: s.st() }));
    }
    if let Some(bound) = s.src.filter(|_| s.binding.is_some()) {
        if bound.is_ipv4() != dst.is_ipv4() {
            return Err(Error::invalid("rdma_resolve_addr", Rule::FamilyMismatch { bound, dst }));
        }
    }
    // A wildcard destination is this host (the kernel's cma_resolve_loopback).
    let dst_ip = match crate::addr::canonical(dst.ip()) {
        ip if crate::addr::is_wildcard(ip) => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        ip => ip,
    };
    // The source: the bound address, the one given, or the host's choice.
    let status = (|| -> Result<()> {
        if s.binding.is_none() {
            let src_ip = match src.map(|a| crate::addr::canonical(a.ip())) {
                Some(ip) if !crate::addr::is_wildcard(ip) => ip,
                _ => crate::addr::source_for(&e.ctx, dst_ip, e.served.as_deref())?,
            };
            bind_locked(e, n, s, SocketAddr::new(src_ip, src.map_or(0, |a| a.port())))?;
        } else if s.sgid.is_none() {
            // Bound to a wildcard: the source the host would use, same port.
            let src_ip = crate::addr::source_for(&e.ctx, dst_ip, e.served.as_deref())?;
            s.sgid = Some(crate::addr::local_gid(&e.ctx, src_ip).ok_or(Error::AddrNotAvail)?);
            s.src = Some(SocketAddr::new(src_ip, s.src.map_or(0, |a| a.port())));
        }
        Ok(())
    })();
    s.dst = Some(SocketAddr::new(dst_ip, dst.port()));
    s.dgid = Some(if e.served.is_some() { crate::addr::exact_gid_of(dst_ip) } else { crate::addr::gid_of(dst_ip) });
    // The fault plan (docs/fault-injection.md): the resolution ends with ADDR_ERROR, as
    // rdma_resolve_addr(3) reports a destination that does not answer.
    if status.is_ok() {
        if let Some(errno) = rverbs::fault_plan::cm_fail(Verb::ResolveAddr) {
            st.deferred.push((n, EventKind::AddrError, -errno.number()));
            e.kick();
            return Ok(());
        }
    }
    // Another host: its next hop must answer within the timeout (rdma_resolve_addr(3);
    // `neigh.rs`). The kernel's default when the caller gives none is 2 s (rping's too).
    let remote = status.is_ok() && crate::addr::local_gid(&e.ctx, dst_ip).is_none();
    let status = match status {
        Ok(()) if remote => {
            let timeout = Duration::from_millis(if timeout_ms > 0 { timeout_ms as u64 } else { 2000 });
            match rverbs::capi_support::neigh::start(dst_ip, timeout, Instant::now()) {
                Ok(r) => {
                    s.resolving = Some(r);
                    e.kick();
                    return Ok(());
                }
                Err(rverbs::capi_support::neigh::Probe::Unreachable(errno)) => Err(errno),
                Err(_) => Ok(()),
            }
        }
        Ok(()) => Ok(()),
        Err(err) => Err(match &err {
            Error::AddrInUse => libc::EADDRINUSE,
            _ => libc::EHOSTUNREACH,
        }),
    };
    let ev = match status {
        Ok(()) => {
            s.enter(St::AddrResolved);
            (n, EventKind::AddrResolved, 0)
        }
        Err(errno) => (n, EventKind::AddrError, -errno),
    };
    st.deferred.push(ev);
    e.kick();
    Ok(())
}

/// Address resolutions waiting for a neighbour that are due: resolved, failed, or looked
/// at again later (`neigh.rs`).
fn resolve_due(cx: &mut Cx, st: &mut State) {
    let now = cx.now;
    let mut done = Vec::new();
    for (n, s) in st.ids.iter_mut() {
        let Some(r) = s.resolving.as_mut().filter(|r| r.next <= now) else { continue };
        let ev = match r.poll(now) {
            rverbs::capi_support::neigh::Probe::Pending => continue,
            rverbs::capi_support::neigh::Probe::Reachable => {
                s.enter(St::AddrResolved);
                (*n, EventKind::AddrResolved, 0)
            }
            rverbs::capi_support::neigh::Probe::Unreachable(errno) => {
                tracing::debug!(dst = ?s.dst, errno, "rdma_resolve_addr: the next hop does not answer");
                (*n, EventKind::AddrError, -errno)
            }
        };
        s.resolving = None;
        done.push(ev);
    }
    for (n, kind, status) in done {
        simple_event(cx, st, n, kind, status);
    }
}

pub(crate) fn resolve_route(id: &CmId, _timeout_ms: i32) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    let n = id.number();
    let s = st.id(id)?;
    // The kernel's rdma_resolve_route: ADDR_RESOLVED only (a resolved route is EINVAL).
    if s.st() != St::AddrResolved {
        return Err(Error::invalid("rdma_resolve_route", Rule::ResolveRouteState { state: s.st() }));
    }
    // The fault plan (docs/fault-injection.md): ROUTE_ERROR with -ETIMEDOUT, as the
    // kernel's rdma_cm reports a path query that timed out; the id stays ADDR_RESOLVED.
    if let Some(errno) = rverbs::fault_plan::cm_fail(Verb::ResolveRoute) {
        st.deferred.push((n, EventKind::RouteError, -errno.number()));
        e.kick();
        return Ok(());
    }
    s.enter(St::RouteResolved);
    s.num_paths = 1;
    st.deferred.push((n, EventKind::RouteResolved, 0));
    e.kick();
    Ok(())
}

pub(crate) fn listen(id: &CmId, backlog: i32) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    let n = id.number();
    let s = st.id(id)?;
    if s.st() == St::Listen {
        // The kernel's rdma_listen: a listening id is not ADDR_BOUND, and rebinding it
        // (rdma_bind_addr from IDLE only) fails.
        return Err(Error::invalid("rdma_listen", Rule::AlreadyListening));
    }
    if s.st() == St::Idle {
        // rdma_listen(3) on an unbound id binds it to the wildcard address with an
        // ephemeral port, as the kernel does.
        bind_locked(e, n, s, SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0))?;
    }
    if s.st() != St::Bound {
        return Err(Error::invalid("rdma_listen", Rule::NotBound { state: s.st() }));
    }
    s.binding.as_ref().expect("bound").listen(backlog).map_err(Error::Os)?;
    s.backlog = effective_backlog(backlog);
    s.enter(St::Listen);
    Ok(())
}

fn effective_backlog(b: i32) -> usize {
    if b <= 0 {
        1024
    } else {
        b as usize
    }
}

pub(crate) fn migrate(id: &CmId, channel: &EventChannel) -> Result<()> {
    let e = engine_of(id)?;
    let other = channel_slot(channel)?;
    if other != e.slot {
        return Err(Error::invalid("rdma_migrate_id", Rule::OtherDevice { id_device: e.slot, other }));
    }
    let mut st = e.lock();
    let s = st.id(id)?;
    let old = s.channel.replace(channel.clone());
    if let Some(old) = old.filter(|o| o != channel) {
        // The id's own events and, for a listener, the connection requests accounted to
        // it (their `id` is the new child) move, as the kernel moves them.
        let moved = old.take_where(|ev| ev.concerns(id));
        for ev in moved {
            channel.push(ev);
        }
    }
    let acks = id.shared.acks.clone();
    drop(st);
    acks.wait_all_acked();
    Ok(())
}

pub(crate) fn destroy(id: &CmId) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    let n = id.number();
    if !st.ids.contains_key(&n) {
        return Err(Error::invalid("rdma_destroy_id", Rule::Destroyed));
    }
    e.input(&mut st, Instant::now(), |cx, st| handshake::abandon(cx, st, n));
    mcast::leave_all(&mut st, n);
    let s = st.ids.remove(&n).expect("present");
    if let Some(c) = s.local_comm {
        st.by_comm.remove(&c);
    }
    if let Some(peer) = s.remote {
        e.unwatch(&mut st, peer, s.remote_pid);
    }
    // Queued events of this id (and, for a listener, the requests no one retrieved)
    // go with it; the children of those requests are rejected and destroyed.
    let mut orphans = Vec::new();
    if let Some(ch) = &s.channel {
        for ev in ch.take_where(|ev| ev.concerns(id)) {
            if ev.kind == EventKind::ConnectRequest && ev.id != *id {
                orphans.push(ev.id.number());
            }
        }
    }
    e.input(&mut st, Instant::now(), |cx, st| {
        for c in orphans {
            handshake::reject_orphan(cx, st, c);
        }
    });
    drop(s);
    drop(st);
    id.shared.acks.wait_all_acked();
    Ok(())
}

pub(crate) fn init_qp_attr(id: &CmId, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    qp::attrs(st.id(id)?, state)
}

pub(crate) fn attach_qp(id: &CmId, qp: Qp) -> Result<()> {
    let e = engine_of(id)?;
    if let Some(d) = rverbs::capi_support::device_of_qp(&qp) {
        let other = d.slot_index()?;
        if other != e.slot {
            return Err(Error::invalid("rdma_create_qp", Rule::OtherDevice { id_device: e.slot, other }));
        }
    }
    let mut st = e.lock();
    qp::attach(st.id(id)?, qp)
}

pub(crate) fn join_multicast(id: &CmId, addr: SocketAddr, flag: JoinFlag, context: usize) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    mcast::join(&mut st, id, addr, flag, context)?;
    drop(st);
    e.kick();
    Ok(())
}

pub(crate) fn leave_multicast(id: &CmId, addr: SocketAddr) -> Result<()> {
    let e = engine_of(id)?;
    let mut st = e.lock();
    mcast::leave(&mut st, id, addr)
}
