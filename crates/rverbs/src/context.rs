//! A device context: the handle every other object hangs off.
//!
//! Rule: ibv_open_device(3): a context owns its protection domains, completion queues,
//! completion channels and its asynchronous event queue (`async_fd`). Several contexts
//! of one device share the device: their QPs can reach each other (the pyverbs suite
//! opens one context per side).

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use crate::cq::channel::CompChannel;
use crate::cq::{Cq, CqInit};
use crate::limits::check_port;
use crate::device::{Device, DeviceAttr, DeviceInner, GidEntry, PortAttr};
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::event::AsyncEvent;
use crate::mr::domain::ContextCore;
use crate::notify::{async_fifo_name, RawAsyncEvent};
use crate::shm::fifo::Fifo;
use crate::gid::Gid;

impl Device {
    /// Opens a context on the device (ibv_open_device(3)).
    ///
    /// Errors: those the fault plan injects (`fail=open_device:ENOMEM`; `EIO` once an
    /// injected DEVICE_FATAL killed the device, docs/fault-injection.md).
    ///
    /// A device of the rdma-core backend opens through libibverbs (ibv_open_device(3));
    /// its errors are libibverbs' `errno`.
    pub fn open(&self) -> Result<Context> {
        use rverbs_proto::verb_fault::Verb;
        #[cfg(feature = "rdma-core")]
        if let Some(dev) = self.native() {
            return Ok(Context::from_native(dev.open()?));
        }
        let dev = self.inner()?;
        if let Some(e) = crate::fault_plan::fail(dev.endpoint.slot, Verb::OpenDevice, None, None) {
            return Err(e);
        }
        let ctx = Context::open(dev)?;
        // An event of the device the plan raises after this call (`on=open_device`).
        if crate::fault_plan::active() {
            if let Some(e) = crate::fault_plan::raise(dev.endpoint.slot, Verb::OpenDevice, None, None).filter(|e| e.is_device()) {
                crate::qp::device_event(dev.endpoint.slot, &dev.engine.qps, e, dev.engine.endpoint.counters);
            }
        }
        Ok(ctx)
    }
}

/// An open device context (`struct ibv_context`). Cloning shares the context.
#[derive(Clone)]
///
/// The context's state is its core (`mr::domain::ContextCore`), which the CQs, PDs and
/// the objects in them hold; the device it is open on is read back from the core.
pub struct Context {
    repr: Repr,
}

/// What a [`Context`] is: the soft device's context core, or (feature `rdma-core`) a
/// context libibverbs opened. Without the feature the one variant costs nothing.
#[derive(Clone)]
enum Repr {
    Soft(Arc<ContextCore>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn crate::mr::native::NativeContext>),
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.device_name()).field("backend", &self.backend()).finish()
    }
}

impl Context {
    pub(crate) fn open(dev: &'static DeviceInner) -> Result<Self> {
        // Device accesses to memory the application unmaps become errors, not signals.
        crate::fault::arm();
        // RVERBS_SANITIZE is read before the first object is made (docs/sanitizer.md).
        crate::sanitizer::init();
        let id = dev.new_id();
        let events = Fifo::create(&dev.dir.join(async_fifo_name(id)))?;
        if crate::sanitizer::on() {
            crate::sanitizer::created(crate::sanitizer::Kind::Context, crate::sanitizer::Id::new(dev.endpoint.slot, id), None);
        }
        Ok(Context { repr: Repr::Soft(Arc::new(ContextCore::new(id, &dev.endpoint, events, dev)).listed()) })
    }

    /// The soft context's core; `EOPNOTSUPP` for a context of the rdma-core backend
    /// (what its caller does, the backend does not offer).
    pub(crate) fn inner(&self) -> Result<&Arc<ContextCore>> {
        match &self.repr {
            Repr::Soft(core) => Ok(core),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(crate::Error::native_unsupported("a verb of the soft device")),
        }
    }

    /// The backend's context, for a context of the rdma-core backend (the only
    /// implementation of its trait).
    #[cfg(feature = "rdma-core")]
    pub(crate) fn native(&self) -> Option<&crate::rdma_core::Context> {
        match &self.repr {
            Repr::Soft(_) => None,
            Repr::Native(n) => n.as_any().downcast_ref(),
        }
    }

    /// The public context of a context of the rdma-core backend (what a PD, CQ or
    /// region of the backend gives back as its context).
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(ctx: Arc<dyn crate::mr::native::NativeContext>) -> Self {
        Context { repr: Repr::Native(ctx) }
    }

    pub(crate) fn from_inner(inner: Arc<ContextCore>) -> Self {
        Context { repr: Repr::Soft(inner) }
    }

    /// The device the soft context is open on; `EOPNOTSUPP` for the rdma-core backend.
    pub(crate) fn dev(&self) -> Result<&'static DeviceInner> {
        Ok(crate::device::of(self.inner()?))
    }

    /// The implementation behind the context: that of the device it was opened on
    /// ([`Device::backend`]).
    pub fn backend(&self) -> crate::Backend {
        match &self.repr {
            Repr::Soft(_) => crate::Backend::Soft,
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => crate::Backend::RdmaCore,
        }
    }

    /// The name of the device the context is open on.
    pub fn device_name(&self) -> &'static str {
        match &self.repr {
            Repr::Soft(core) => crate::device::of(core).name,
            #[cfg(feature = "rdma-core")]
            Repr::Native(n) => n.device_name(),
        }
    }

    /// Device attributes (ibv_query_device(3), ibv_query_device_ex(3)).
    pub fn query_device(&self) -> DeviceAttr {
        match &self.repr {
            Repr::Soft(core) => crate::device::of(core).attr(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(n) => crate::c_abi::device_attr_from_c(&n.device_attr()),
        }
    }

    /// Injects faults into the RoCEv2 packets this process sends to other hosts,
    /// deterministically (`rverbs_proto::fault`: drop, duplicate, reorder, delay, corrupt,
    /// from a seed), from now on; [`FaultConfig::NONE`](crate::FaultConfig::NONE) stops. The same as `RVERBS_FAULTS`
    /// at start, for a program's own tests (rxe has no such thing; netem would be the tool).
    /// Affects every context of the process (the sockets are the device's).
    ///
    /// Errors: `EOPNOTSUPP` when the device has no network transport (no address could be
    /// bound, or `RVERBS_NET=off`).
    pub fn set_network_faults(&self, cfg: rverbs_proto::fault::FaultConfig) -> Result<()> {
        let Some(net) = self.dev()?.net.as_ref() else {
            return Err(Error::unsupported("set_network_faults", "no network transport on this device"));
        };
        net.set_faults(cfg);
        Ok(())
    }

    /// The hardware counters of this process's endpoint of the device (docs/device.md, "Hardware counters"):
    /// what every context, queue pair and network socket of the process did since it
    /// first opened the device (a forked child that uses the device has its own), under
    /// rxe's names (`/sys/class/infiniband/<dev>/ports/1/hw_counters/`, `rdma statistic
    /// show`). Other processes read them with [`crate::host_counters`] (`rverbs stat`).
    /// All zero on a context of the rdma-core backend: its provider's counters are the
    /// kernel's (sysfs `hw_counters`), which rverbs does not read.
    pub fn counters(&self) -> crate::shm::counters::Counters {
        match &self.repr {
            Repr::Soft(core) => core.endpoint.counters.snapshot(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => crate::shm::counters::Counters::default(),
        }
    }

    /// Attributes of `port` (ibv_query_port(3)).
    ///
    /// Errors: `EINVAL` for any port but 1 (on the rdma-core backend, for a port the
    /// device lacks).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        #[cfg(feature = "rdma-core")]
        if let Some(n) = self.native() {
            return n.query_port(port);
        }
        check_port("query_port", port)?;
        Ok(self.dev()?.port_attr())
    }

    /// The GID at `index` of `port` (ibv_query_gid(3)).
    ///
    /// Rule: an index inside the table but without an entry reads as the zero GID.
    /// Errors: `EINVAL` for a bad port or an index ≥ `gid_tbl_len`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        #[cfg(feature = "rdma-core")]
        if let Some(n) = self.native() {
            return n.query_gid(port, index);
        }
        Ok(self.query_gid_ex(port, index)?.gid)
    }

    /// The GID table entry at `index` of `port` (ibv_query_gid_ex(3)).
    pub fn query_gid_ex(&self, port: u8, index: u32) -> Result<GidEntry> {
        #[cfg(feature = "rdma-core")]
        if let Some(n) = self.native() {
            return n.query_gid_ex(port, index);
        }
        check_port("query_gid", port)?;
        let dev = self.dev()?;
        dev.gids.get(index as usize).copied().ok_or(Error::invalid("query_gid", Rule::GidIndex { index, len: dev.gids.len() as u32 }))
    }

    /// The whole GID table (ibv_query_gid_table(3)): its entries that hold a GID. On the
    /// rdma-core backend, port 1's entries ibv_query_gid_ex(3) reads, up to
    /// `gid_tbl_len` (none when the port cannot be queried).
    pub fn query_gid_table(&self) -> Vec<GidEntry> {
        match &self.repr {
            Repr::Soft(core) => crate::device::of(core).gids.clone(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(n) => n.gid_table(),
        }
    }

    /// The GID-table entry of `ip`, an address of this host, or `None` when no entry
    /// names it: what a RoCE program needs for its address vectors' `sgid_index` (a
    /// RoCE v2 GID is the address, IPv4 as IPv4-mapped IPv6, ibv_query_gid(3); the table
    /// holds every address of the host, docs/device.md). An IPv4-mapped IPv6 address is
    /// its IPv4 address; any address of 127.0.0.0/8, and ::1, is 127.0.0.1's entry (the
    /// table has no ::1 entry: the loopback names the host once), unless the device serves
    /// that loopback address itself (`DeviceConfig::addresses`).
    pub fn gid_entry_of(&self, ip: std::net::IpAddr) -> Option<GidEntry> {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        #[cfg(feature = "rdma-core")]
        if self.native().is_some() {
            // A NIC lists a RoCE v1 and a v2 entry of each address: v2's is the one of
            // routable traffic.
            let table = self.query_gid_table();
            let entry = |want: Gid| {
                let of = |e: &&GidEntry| e.port == 1 && e.gid == want;
                table.iter().filter(of).find(|e| e.gid_type == crate::gid::GidType::RoceV2).or_else(|| table.iter().find(of)).copied()
            };
            return entry(Gid::from_ip(ip)).or_else(|| ip.is_loopback().then(|| entry(Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST))).flatten());
        }
        let Ok(dev) = self.dev() else { return None };
        let entry = |want: Gid| dev.gids.iter().find(|e| e.port == 1 && e.gid == want).copied();
        // A loopback address a device serves itself (`DeviceConfig::addresses`) is its own.
        entry(Gid::from_ip(ip)).or_else(|| ip.is_loopback().then(|| entry(Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST))).flatten())
    }

    /// The P_Key at `index` of `port` (ibv_query_pkey(3)): the default 0xFFFF at index 0.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        self.inner()?;
        check_port("query_pkey", port)?;
        if index == 0 {
            Ok(0xffff)
        } else {
            Err(Error::invalid("query_pkey", Rule::PkeyIndex { index }))
        }
    }

    /// The device clock in nanoseconds and the wall clock (ibv_query_rt_values_ex(3)).
    /// On the rdma-core backend, the soft device's clock (the host's), not the NIC's.
    pub fn query_rt_values(&self) -> crate::clock::RtValues {
        crate::clock::rt_values()
    }

    /// Creates a completion queue (ibv_create_cq(3), ibv_create_cq_ex(3)).
    ///
    /// On the rdma-core backend: `cqe`, `cq_context`, `comp_vector` and a channel of the
    /// same context; other `wc_flags` than the standard ones and creation flags (an
    /// extended CQ) are `EOPNOTSUPP`, and so is a parent domain's CQ.
    pub fn create_cq(&self, init: &CqInit) -> Result<Cq> {
        #[cfg(feature = "rdma-core")]
        if let Some(n) = self.native() {
            return Ok(n.create_cq(init)?.into());
        }
        let core = self.inner()?;
        if let Some(e) = crate::fault_plan::fail(core.endpoint.slot, rverbs_proto::verb_fault::Verb::CreateCq, None, None) {
            return Err(e);
        }
        Cq::new(core.clone(), &crate::device::of(core).cqs, init)
    }

    /// Allocates `len` bytes of device memory aligned to `2^log_align_req` bytes
    /// (ibv_alloc_dm(3)); see [`Dm`](crate::Dm).
    ///
    /// Errors: `EINVAL` for a zero length, a length above the device's `max_dm_size`
    /// ([`Rule::DmTooLarge`](crate::Rule::DmTooLarge)) or an alignment above a page;
    /// `ENOMEM` when it fits `max_dm_size` but this process's other allocations leave too
    /// little of it.
    pub fn alloc_dm(&self, len: usize, log_align_req: u32) -> Result<crate::mr::dm::Dm> {
        let core = self.inner()?;
        if let Some(e) = crate::fault_plan::fatal(core.endpoint.slot, "alloc_dm") {
            return Err(e);
        }
        crate::mr::dm::Dm::alloc(core.endpoint, len, log_align_req)
    }

    /// Creates a completion channel (ibv_create_comp_channel(3)).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        #[cfg(feature = "rdma-core")]
        if let Some(n) = self.native() {
            return Ok(CompChannel::from_native(Arc::new(n.create_comp_channel()?)));
        }
        let core = self.inner()?;
        if let Some(e) = crate::fault_plan::fatal(core.endpoint.slot, "create_comp_channel") {
            return Err(e);
        }
        let dev = crate::device::of(core);
        CompChannel::new(dev, &dev.cqs, core.id)
    }

    /// Waits for the next asynchronous event (ibv_get_async_event(3)). Blocks unless
    /// [`Context::async_fd`] was made non-blocking, in which case an empty queue gives
    /// `Error::WouldBlock`.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        // The application waits: ACKs it holds leave now (docs/network.md, "Coalesced ACKs").
        crate::progress::application_waits();
        let core = self.inner()?;
        let mut rec = [0u8; RawAsyncEvent::LEN];
        loop {
            core.events().recv(&mut rec)?;
            let dev = crate::device::of(core);
            if let Some(ev) = RawAsyncEvent::decode(&rec).and_then(|raw| AsyncEvent::deliver(raw, &dev.cqs, &dev.qps, &dev.srqs)) {
                return Ok(ev);
            }
        }
    }

    /// The fd that is readable while an asynchronous event is pending (`async_fd`); on
    /// the rdma-core backend, libibverbs' `ibv_context.async_fd` (whose events
    /// [`Context::get_async_event`] does not read there: `EOPNOTSUPP`).
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        match &self.repr {
            Repr::Soft(core) => core.events().fd(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(n) => n.async_fd(),
        }
    }

    /// Opaque per-context id, unique in the process.
    pub fn id(&self) -> u32 {
        match &self.repr {
            Repr::Soft(core) => core.id,
            #[cfg(feature = "rdma-core")]
            Repr::Native(n) => n.id(),
        }
    }
}

/// The context's asynchronous-event fd ([`Context::async_fd`], `ibv_context.async_fd` of
/// ibv_get_async_event(3)): readable while an event is pending, for epoll or an async
/// reactor; drain it with [`Context::get_async_event`].
/// The public [`Context`] over a context of the rdma-core backend (what
/// [`crate::Device::open`] gives on one of its devices), e.g. one adopted from librdmacm
/// ([`crate::rdma_core::Context::adopt`]).
#[cfg(feature = "rdma-core")]
impl From<crate::rdma_core::Context> for Context {
    fn from(ctx: crate::rdma_core::Context) -> Context {
        Context::from_native(Arc::new(ctx))
    }
}

impl AsFd for Context {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.async_fd()
    }
}

impl Cq {
    /// The context the CQ belongs to.
    pub fn context(&self) -> Context {
        match self.parent() {
            crate::mr::domain::ContextOf::Soft(ctx) => Context::from_inner(ctx),
            #[cfg(feature = "rdma-core")]
            crate::mr::domain::ContextOf::Native(ctx) => Context::from_native(ctx),
        }
    }
}
