//! This process's endpoint of the host-wide device, as the memory layer holds it: the
//! registry entry, the endpoint directory, the shared tables peers read, the memory keys
//! and what reaching memory across processes needs (shared registrations, the host-wide
//! atomic lock; the proxy channels are kept by the registry).
//!
//! Rule (ARCHITECTURE.md, "Layers"): a layer owns the state it uses. The device
//! (`device::DeviceInner`) is this endpoint plus the objects of the layers above; it
//! creates the endpoint and hands `&'static Endpoint` down to the regions and windows
//! that need it, which never reach the device themselves.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::keys::KeyTable;
use super::share::Shares;
use crate::shm::counters::CounterBlock;
use crate::shm::lock::{Holders, ShmGuard, ShmLock};
use crate::shm::registry::Registry;
use crate::shm::tables::Tables;
use crate::shm::Segment;

/// The host-wide segment of the device, in the runtime directory.
const HOST_SEGMENT: &str = "device";

/// An endpoint of this process: one per device it started (`DeviceConfig::open`), per
/// process generation.
pub(crate) struct Endpoint {
    /// The device's slot in this process (`sys::MAX_DEVICES`): which progress thread
    /// serves the endpoint (`progress`).
    pub(crate) slot: usize,
    /// The host-wide registry entry (`None` if the runtime directory was unusable: then
    /// only in-process traffic works).
    pub(crate) reg: Option<Registry>,
    /// Where this endpoint's segments and FIFOs live.
    pub(crate) dir: PathBuf,
    /// The process that owns the endpoint (it was created in that process).
    pub(crate) pid: u32,
    /// Source of CQ, channel, context and segment ids (unique for the endpoint's life).
    next_id: AtomicU32,
    /// This endpoint's shared tables (what peers read to reach its objects).
    pub(crate) tables: &'static Tables,
    /// This endpoint's hardware counters (docs/device.md, "Hardware counters"), in a segment of its
    /// directory that `rverbs stat` reads; only this process adds to them.
    pub(crate) counters: &'static CounterBlock,
    /// This endpoint's per-QP and per-CQ statistics (docs/device.md, "Per-QP and per-CQ
    /// statistics"), when the device counts them (`DeviceConfig::stats`).
    pub(crate) stats: Option<&'static crate::shm::stats::Stats>,
    /// The host-wide segment whose lock serialises device atomics on memory that peers
    /// reach with cross-memory attach.
    host: Segment,
    /// The memory keys of this endpoint.
    pub(crate) keys: KeyTable,
    /// Live regions in private memory of this process that peers would reach with
    /// cross-memory attach, whose kernel copies make no ordering promise
    /// (ibv_query_qp_data_in_order(3): `Qp::data_in_order` counts on this).
    pub(crate) cma_regions: AtomicUsize,
    /// Caller memory moved onto shared files by registrations.
    pub(crate) shares: Shares,
    /// Registrations of caller memory make it shareable (`crate::mr::share`; the default
    /// on a memory filesystem, `RVERBS_SHARED_MR`); otherwise peers reach it with
    /// cross-memory attach.
    pub(crate) share_caller_memory: bool,
}

/// How long a live holder may keep the host-wide lock of device atomics: a proxied read
/// and write, each given `mr::proxy`'s deadline, and some slack.
const ATOMIC_STUCK: std::time::Duration = std::time::Duration::from_secs(12);

impl Endpoint {
    /// The endpoint of registry entry `reg` (none: a private endpoint) in directory
    /// `dir`, of the device in slot `slot`: creates its shared tables and maps the
    /// host-wide segment. `shared_mr` is the device's `RVERBS_SHARED_MR` setting, `stats`
    /// its `RVERBS_STATS`.
    pub(crate) fn new(reg: Option<Registry>, dir: PathBuf, slot: usize, shared_mr: Option<bool>, stats: bool) -> Endpoint {
        // Shareable registrations are the default where their files live in memory
        // (docs/memory.md, "Shareable registrations"); `RVERBS_SHARED_MR` decides else.
        let share_caller_memory = reg.is_some() && shared_mr.unwrap_or_else(|| super::share::in_memory(&dir));
        let tables: &'static Tables = Box::leak(Box::new(
            Tables::create(&dir).expect("cannot create the endpoint's shared tables"),
        ));
        // Counting goes on without the segment (a full runtime directory): only readers in
        // other processes miss it.
        let counters = crate::shm::counters::create(&dir).unwrap_or_else(|e| {
            tracing::warn!(%e, "no counters segment: `rverbs stat` will not list this process");
            Box::leak(Box::new(CounterBlock::zero()))
        });
        // Statistics asked for but without room for their segment: the device runs
        // without them (the objects' stats read zero), as it would with them off.
        let stats = stats
            .then(|| {
                crate::shm::stats::Stats::create(&dir)
                    .map_err(|e| tracing::warn!(%e, "no stats segment: per-QP and per-CQ statistics are off"))
                    .ok()
            })
            .flatten();
        let host_path = reg.as_ref().map_or_else(|| dir.join(HOST_SEGMENT), |r| r.root.join(HOST_SEGMENT));
        let host = Segment::open_or_create(&host_path, std::mem::size_of::<ShmLock>())
            .expect("cannot map the host-wide device segment");
        Endpoint {
            slot,
            reg,
            dir,
            pid: std::process::id(),
            next_id: AtomicU32::new(1),
            tables,
            counters,
            stats,
            host,
            keys: KeyTable::new(tables),
            cma_regions: AtomicUsize::new(0),
            shares: Shares::default(),
            share_caller_memory,
        }
    }

    /// A fresh id for a CQ, channel, context or segment of this endpoint.
    pub(crate) fn new_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether a peer could place data in this process's memory with kernel copies
    /// (cross-memory attach), which are not ordered.
    pub(crate) fn peers_copy_unordered(&self) -> bool {
        self.reg.as_ref().is_some_and(|r| !r.refuses_cma) && self.cma_regions.load(Ordering::Acquire) != 0
    }

    /// Whether other processes may take part (a host-wide endpoint was claimed).
    pub(crate) fn shared(&self) -> bool {
        self.reg.is_some()
    }

    /// Takes the host-wide lock of device atomics (IBV_ATOMIC_HCA).
    ///
    /// Its holder may be waiting for this process's progress thread to serve a proxied
    /// read or write (`mr::proxy`, a peer's private memory without cross-memory attach):
    /// the waiter runs `waiting` between looks (the caller passes what serves them, or
    /// the two would wait on each other). A live holder keeps it up to
    /// [`ATOMIC_STUCK`]: taking it over sooner would let two read-modify-writes
    /// interleave.
    pub(crate) fn atomic_lock(&self, waiting: impl FnMut()) -> ShmGuard<'_> {
        self.host.get::<ShmLock>(0).lock_with(self.ep(), self, ATOMIC_STUCK, waiting)
    }

    /// The endpoint number of this process.
    pub(crate) fn ep(&self) -> u32 {
        self.reg.as_ref().map_or(0, |r| r.ep)
    }

    /// Whether endpoint `ep` is alive (this one always is).
    pub(crate) fn alive(&self, ep: u32) -> bool {
        self.reg.as_ref().is_none_or(|r| r.alive(ep))
    }

    /// Whether process `pid`, which held endpoint `ep` when it wrote so into a shared word
    /// (a CQ's producer gate, a receive ring's take record), is alive still
    /// (`Registry::owner_alive`; without a registry only this process writes them).
    pub(crate) fn owner_alive(&self, ep: u32, pid: u32) -> bool {
        self.reg.as_ref().map_or(pid == self.pid, |r| r.owner_alive(ep, pid))
    }

    /// This endpoint's count of its accesses in progress through cross-memory attach
    /// (`Registry::cma_accesses`); `None` without a registry (no peers to reach).
    pub(crate) fn cma_accesses(&self) -> Option<&AtomicU64> {
        self.reg.as_ref().map(|r| r.cma_accesses())
    }

    /// Whether another endpoint's process is stopped while it may be in the middle of an
    /// access to this process's memory (`Registry::accessor_stopped`).
    pub(crate) fn accessor_stopped(&self) -> bool {
        self.reg.as_ref().is_some_and(|r| r.accessor_stopped())
    }

    /// Waits until `idle()`, for up to `bound` while no process of the host that may be in
    /// the middle of an access to this process's memory is stopped: whether `idle()` came
    /// true. A count that does not drain may be a dead process's (it never will) or a
    /// stopped one's (it will, and the access it holds must not land in memory the
    /// program took back, nor through a window or into a receive that is gone): past the
    /// bound it is waited for while such a process is stopped, and given `bound` again
    /// from when none is.
    pub(crate) fn wait_accesses(&self, bound: std::time::Duration, idle: impl Fn() -> bool) -> bool {
        let mut since = std::time::Instant::now();
        while !idle() {
            if since.elapsed() > bound {
                if !self.accessor_stopped() {
                    return false;
                }
                since = std::time::Instant::now();
            }
            std::thread::yield_now();
        }
        true
    }
}

impl Holders for Endpoint {
    fn alive(&self, ep: u32) -> bool {
        Endpoint::alive(self, ep)
    }

    /// Whether endpoint `ep`'s process is stopped by a signal or a debugger (never this
    /// one: a thread asking is running).
    fn stopped(&self, ep: u32) -> bool {
        self.reg.as_ref().is_some_and(|r| r.stopped(ep))
    }
}
