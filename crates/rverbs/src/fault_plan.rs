//! The fault plan of the verbs: chosen verbs fail with an error their man page documents,
//! chosen send work requests complete with a chosen error status, chosen calls are
//! followed by an asynchronous event the device raises (a QP or CQ in error, an SRQ
//! limit, an rdma_cm disconnection), selected by verb, QP, `wr_id`, the Nth call or a
//! seeded probability (docs/fault-injection.md; [`VerbPlan`] has the grammar).
//!
//! A C program gets its plan from the `fail=…`, `wc=…`, `wc_delay=…` and `event=…` items of `RVERBS_FAULTS`, read
//! at the first verb; a Rust program may [`install`] one instead. Every injection is
//! kept, as an [`Injection`], for [`take_injected`] (a test harness
//! asserts on them), and logged: on stderr, one line each, when the plan came from the
//! environment (the program did not ask for it, its user did); through `tracing` (warn)
//! when it was installed. So a failing run names every fault it met and replays exactly
//! from the same plan and seed.
//!
//! Without a plan a verb pays one relaxed load.
//!
//! The device's events (PORT_ERR, PORT_ACTIVE, DEVICE_FATAL) change the process's view
//! of the device, kept here: port 1 down (`port_down`: the transports send nothing and
//! take nothing for this process, ibv_query_port(3) reports DOWN), or the device dead
//! (`fail` refuses every creating and posting verb with EIO). The view is per device of
//! the process: other processes of the host, and the process's other devices
//! (`DeviceConfig`), see their own device as it was.
//!
//! A device can have a plan of its own (`DeviceConfig::fault_plan`), which replaces the
//! process's for the verbs of that device; the process's plan (`RVERBS_FAULTS`,
//! [`install`]) applies to every other device. Each function takes the device's slot
//! (`sys::MAX_DEVICES`; the connection manager's calls are the listed device's).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, Once, OnceLock};

use rverbs_proto::verb_fault::{Decider, Effect, Errno, Event, Injection, Verb, VerbPlan};
use rverbs_proto::verbs::WcStatus;

use crate::error::Error;
use crate::sys::MAX_DEVICES;

/// How many injections [`take_injected`] keeps (the oldest go first): a probabilistic
/// plan over a long run injects without end.
const KEPT_MAX: usize = 4096;

static FROM_ENV: Once = Once::new();
/// Whether any plan is in force, the process's or a device's: the one load a verb pays
/// without one.
static ON: AtomicBool = AtomicBool::new(false);
/// The process's plan.
static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Each device slot's own plan, if it has one.
static DEVICE_PLANS: [Mutex<Option<State>>; MAX_DEVICES] = [const { Mutex::new(None) }; MAX_DEVICES];
/// Which slots have a plan of their own.
static DEVICE_ON: [AtomicBool; MAX_DEVICES] = [const { AtomicBool::new(false) }; MAX_DEVICES];
/// The injections not yet taken ([`take_injected`]), of every plan.
static KEPT: Mutex<VecDeque<Injection>> = Mutex::new(VecDeque::new());

struct State {
    decider: Decider,
    /// The plan came from `RVERBS_FAULTS`: each injection is written on stderr.
    echo: bool,
}

/// Installs `plan` for the whole process, in place of the one `RVERBS_FAULTS` set (which
/// is then never read) or an earlier one, with fresh counts; an empty plan switches the
/// injection off. Verbs called before see the plan they met.
///
/// The process's view of the device starts again too (a test harness's reset): port 1
/// up and the device alive for what is created and posted from now on. Objects an
/// injected DEVICE_FATAL put in ERR stay there, and QPs made while the port was down
/// keep refusing peers' requests (bring the port up with an injected PORT_ACTIVE first).
pub fn install(plan: VerbPlan) {
    FROM_ENV.call_once(|| {});
    for d in &DEVICE {
        d.store(0, Ordering::Release);
    }
    set(plan, false);
}

/// Gives device slot `slot` a plan of its own (`DeviceConfig::fault_plan`), in place of
/// the process's for that device's verbs, with fresh counts; an empty plan takes it
/// back (the process's applies again). Its injections are logged through `tracing`.
pub(crate) fn install_for(slot: usize, plan: VerbPlan) {
    FROM_ENV.call_once(from_env);
    let on = !plan.is_empty();
    *lock(&DEVICE_PLANS[slot]) = on.then(|| State { decider: Decider::new(plan), echo: false });
    DEVICE_ON[slot].store(on, Ordering::Release);
    if on {
        ON.store(true, Ordering::Release);
    }
}

/// The injections since the last call, of every plan, oldest first (at most the last
/// 4096).
pub fn take_injected() -> Vec<Injection> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect()
}

fn set(plan: VerbPlan, echo: bool) {
    let on = !plan.is_empty();
    *lock(&STATE) = on.then(|| State { decider: Decider::new(plan), echo });
    ON.store(on || DEVICE_ON.iter().any(|d| d.load(Ordering::Relaxed)), Ordering::Release);
}

fn lock(state: &'static Mutex<Option<State>>) -> std::sync::MutexGuard<'static, Option<State>> {
    // A panic while it was held (none is possible in what holds it) left a consistent plan.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

#[inline]
fn on() -> bool {
    FROM_ENV.call_once(from_env);
    ON.load(Ordering::Relaxed)
}

fn from_env() {
    let Some(spec) = std::env::var_os("RVERBS_FAULTS") else { return };
    let plan = spec.to_str().map(VerbPlan::parse);
    match plan {
        Some(Ok(plan)) => {
            if !plan.is_empty() {
                eprintln!("rverbs: fault plan (RVERBS_FAULTS): {} item(s), seed {}", plan.items.len(), plan.seed);
            }
            set(plan, true);
        }
        Some(Err(e)) => eprintln!("rverbs: RVERBS_FAULTS: {e}; no verb fault is injected"),
        None => eprintln!("rverbs: RVERBS_FAULTS is not UTF-8; no verb fault is injected"),
    }
}

/// Asks the plan of device slot `slot` (its own, else the process's).
fn decide(slot: usize, f: impl FnOnce(&mut Decider) -> Option<Injection>) -> Option<Injection> {
    let own = DEVICE_ON.get(slot).is_some_and(|d| d.load(Ordering::Acquire));
    let mut guard = lock(if own { &DEVICE_PLANS[slot] } else { &STATE });
    let s = guard.as_mut()?;
    let hit = f(&mut s.decider)?;
    let note = match hit.effect {
        Effect::Raise(Event::Disconnected, _) if DISCONNECT.get().is_none() => {
            "; no rdma_cm connection in this process: nothing is disconnected"
        }
        _ => "",
    };
    if s.echo {
        eprintln!("rverbs: fault injected: {hit}{note}");
    } else {
        tracing::warn!(injection = %hit, note, "fault injected");
    }
    drop(guard);
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() == KEPT_MAX {
        kept.pop_front();
    }
    kept.push_back(hit.clone());
    Some(hit)
}

/// The error the plan gives this call of `verb` (on QP `qp`; for the post verbs, the work
/// request `wr_id`), if any: the verb returns it before doing anything. After an injected
/// DEVICE_FATAL every call fails with EIO (`Error::DeviceFatal`), as the verbs of a
/// device that reported IBV_EVENT_DEVICE_FATAL do (ibv_get_async_event(3): the
/// application must destroy its resources and close the context).
#[inline]
pub(crate) fn fail(slot: usize, verb: Verb, qp: Option<u32>, wr_id: Option<u64>) -> Option<Error> {
    if !on() {
        return None;
    }
    if dead(slot) {
        return Some(Error::DeviceFatal { verb: verb.name() });
    }
    let hit = decide(slot, |d| d.fail(verb, qp, wr_id))?;
    match hit.effect {
        Effect::Fail(verb, errno) => {
            Some(Error::Injected { verb: verb.name(), errno: errno.number(), name: errno.name(), item: hit.item })
        }
        Effect::Complete(_) | Effect::Raise(..) | Effect::Hold(_) => None,
    }
}

/// After an injected DEVICE_FATAL, the EIO of a creating verb the plan has no name for
/// (`verb`: ibv_create_comp_channel, ibv_alloc_mw, ibv_open_xrcd, ibv_resize_cq,
/// ibv_rereg_mr): as [`fail`]'s, every command the device would execute fails once it
/// reported IBV_EVENT_DEVICE_FATAL (ibv_get_async_event(3)); destroying verbs still
/// succeed, as rdma-core's do on a disassociated device.
#[inline]
pub(crate) fn fatal(slot: usize, verb: &'static str) -> Option<Error> {
    (on() && dead(slot)).then_some(Error::DeviceFatal { verb })
}

/// The first of the work requests `wr_ids` (posted by `verb` on QP `qp`) the plan makes
/// the post fail at, each counted as one call: its index and the error. The requests
/// before it are posted; it and those after are not (ibv_post_send(3) `bad_wr`).
#[inline]
pub(crate) fn fail_post(slot: usize, verb: Verb, qp: Option<u32>, wr_ids: impl Iterator<Item = u64>) -> Option<(usize, Error)> {
    if !on() {
        return None;
    }
    wr_ids.enumerate().find_map(|(i, w)| fail(slot, verb, qp, Some(w)).map(|e| (i, e)))
}

/// The status the plan completes the send work request `wr_id` of QP `qpn` with, if any:
/// the request is accepted, never sent, and completes with it in its turn.
#[inline]
pub(crate) fn complete(slot: usize, qpn: u32, wr_id: u64) -> Option<WcStatus> {
    if !on() {
        return None;
    }
    match decide(slot, |d| d.complete(qpn, wr_id))?.effect {
        Effect::Complete(status) => Some(status),
        Effect::Fail(..) | Effect::Raise(..) | Effect::Hold(_) => None,
    }
}

/// How long the plan holds back the completion of the send work request `wr_id` of QP
/// `qpn`, if at all (`wc_delay=`): it becomes pollable that much later, and later
/// completions of its CQ wait behind it (docs/fault-injection.md).
#[inline]
pub(crate) fn hold(slot: usize, qpn: u32, wr_id: u64) -> Option<std::time::Duration> {
    if !on() {
        return None;
    }
    match decide(slot, |d| d.hold(qpn, wr_id))?.effect {
        Effect::Hold(ms) => Some(std::time::Duration::from_millis(u64::from(ms))),
        Effect::Fail(..) | Effect::Complete(_) | Effect::Raise(..) => None,
    }
}

/// An rdma_cm call (`rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`) the plan
/// fails: the error whose event the call must end with (docs/fault-injection.md). For
/// the connection manager (rverbs-cm), which reports it as rdma_get_cm_event(3) says:
/// ADDR_ERROR or ROUTE_ERROR with status `-errno`, and for rdma_connect UNREACHABLE
/// (ETIMEDOUT) or REJECTED (ECONNREFUSED).
#[inline]
pub fn cm_fail(verb: Verb) -> Option<Errno> {
    if !on() {
        return None;
    }
    match decide(crate::sys::default_device_slot(), |d| d.fail(verb, None, None))?.effect {
        Effect::Fail(_, errno) => Some(errno),
        _ => None,
    }
}

/// How the connection manager disconnects the connection of a QP (set once, by the
/// first engine of rverbs-cm in the process).
static DISCONNECT: OnceLock<fn(usize, u32)> = OnceLock::new();

/// Registers how an injected RDMA_CM_EVENT_DISCONNECTED reaches the connection manager:
/// `f(slot, qpn)` must disconnect the connection QP `qpn` of the device in slot `slot`
/// ([`crate::Device::slot_index`]) belongs to, as rdma_disconnect(3)
/// does (both sides get DISCONNECTED, the QP enters ERR). It is called after the verb
/// the plan picked, with no lock of the verbs held, and must not block (the connection
/// manager queues the request for its own thread). Only the first registration counts.
pub fn set_disconnect_hook(f: fn(usize, u32)) {
    let _ = DISCONNECT.set(f);
}

/// After a call of `verb` that succeeded (on QP `qp`; for the post verbs, one call per
/// work request it posted, `wr_id`): the event the plan makes the device raise, if any.
/// The object's module does what the device does with it (`QpInner::raise_injected`,
/// `SrqInner::raise_injected`; docs/fault-injection.md).
#[inline]
pub(crate) fn raise(slot: usize, verb: Verb, qp: Option<u32>, wr_id: Option<u64>) -> Option<Event> {
    if !on() {
        return None;
    }
    match decide(slot, |d| d.raise(verb, qp, wr_id))?.effect {
        Effect::Raise(event, _) => Some(event),
        Effect::Fail(..) | Effect::Complete(_) | Effect::Hold(_) => None,
    }
}

/// Whether a plan is in force (the callers that must look at an object before asking
/// [`raise`] check this first, so that no plan costs one relaxed load).
#[inline]
pub(crate) fn active() -> bool {
    on()
}

/// The process's view of each device (by slot): [`PORT_DOWN`], [`DEAD`] (both set once
/// dead). Only an injected event changes it, so without a plan it stays 0.
static DEVICE: [AtomicU8; MAX_DEVICES] = [const { AtomicU8::new(0) }; MAX_DEVICES];
/// Port 1 is DOWN (an injected PORT_ERR, or the device dead).
const PORT_DOWN: u8 = 1;
/// An injected DEVICE_FATAL: the device is dead for this process.
const DEAD: u8 = 2;

/// Whether port 1 of this process's view of the device is down (or the device dead):
/// nothing this process sends leaves, nothing addressed to it is taken
/// (docs/fault-injection.md). One relaxed load: a sender that misses the change by a
/// moment sends as a NIC does while its link goes down.
#[inline]
pub(crate) fn port_down(slot: usize) -> bool {
    DEVICE[slot].load(Ordering::Relaxed) != 0
}

/// Whether an injected DEVICE_FATAL killed device slot `slot` for this process.
#[inline]
pub(crate) fn dead(slot: usize) -> bool {
    DEVICE[slot].load(Ordering::Relaxed) & DEAD != 0
}

/// Takes port 1 down (`up == false`) or up; whether its state changed (a port already in
/// that state, or a dead device's, does not change, and the device raises nothing).
pub(crate) fn set_port(slot: usize, up: bool) -> bool {
    let r = DEVICE[slot].fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| match (d, up) {
        (0, false) => Some(PORT_DOWN),
        (PORT_DOWN, true) => Some(0),
        _ => None,
    });
    r.is_ok()
}

/// Kills device slot `slot` for this process (port down with it); whether it was alive.
pub(crate) fn kill(slot: usize) -> bool {
    DEVICE[slot].fetch_or(DEAD | PORT_DOWN, Ordering::AcqRel) & DEAD == 0
}

/// Disconnects the rdma_cm connection of QP `qpn` of device slot `slot` through the hook
/// the connection manager registered ([`set_disconnect_hook`]); without one there is none
/// to disconnect.
pub(crate) fn disconnect(slot: usize, qpn: u32) {
    if let Some(f) = DISCONNECT.get() {
        f(slot, qpn);
    }
}
