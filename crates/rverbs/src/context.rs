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
    pub fn open(&self) -> Result<Context> {
        use rverbs_proto::verb_fault::Verb;
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
    inner: Arc<ContextCore>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.dev().name).finish()
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
            crate::sanitizer::created(crate::sanitizer::Kind::Context, id, None);
        }
        Ok(Context { inner: Arc::new(ContextCore::new(id, &dev.endpoint, events, dev)).listed() })
    }

    pub(crate) fn inner(&self) -> &Arc<ContextCore> {
        &self.inner
    }

    pub(crate) fn from_inner(inner: Arc<ContextCore>) -> Self {
        Context { inner }
    }

    /// The device the context is open on.
    pub(crate) fn dev(&self) -> &'static DeviceInner {
        crate::device::of(&self.inner)
    }

    /// The name of the device the context is open on.
    pub fn device_name(&self) -> &'static str {
        self.dev().name
    }

    /// Device attributes (ibv_query_device(3), ibv_query_device_ex(3)).
    pub fn query_device(&self) -> DeviceAttr {
        self.dev().attr()
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
        let Some(net) = self.dev().net.as_ref() else {
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
    pub fn counters(&self) -> crate::shm::counters::Counters {
        self.inner.endpoint.counters.snapshot()
    }

    /// Attributes of `port` (ibv_query_port(3)).
    ///
    /// Errors: `EINVAL` for any port but 1.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        check_port("query_port", port)?;
        Ok(self.dev().port_attr())
    }

    /// The GID at `index` of `port` (ibv_query_gid(3)).
    ///
    /// Rule: an index inside the table but without an entry reads as the zero GID.
    /// Errors: `EINVAL` for a bad port or an index ≥ `gid_tbl_len`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        Ok(self.query_gid_ex(port, index)?.gid)
    }

    /// The GID table entry at `index` of `port` (ibv_query_gid_ex(3)).
    pub fn query_gid_ex(&self, port: u8, index: u32) -> Result<GidEntry> {
        check_port("query_gid", port)?;
        self.dev()
            .gids
            .get(index as usize)
            .copied()
            .ok_or(Error::invalid("query_gid", Rule::GidIndex { index, len: self.dev().gids.len() as u32 }))
    }

    /// The whole GID table (ibv_query_gid_table(3)).
    pub fn query_gid_table(&self) -> Vec<GidEntry> {
        self.dev().gids.clone()
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
        let entry = |want: Gid| self.dev().gids.iter().find(|e| e.port == 1 && e.gid == want).copied();
        // A loopback address a device serves itself (`DeviceConfig::addresses`) is its own.
        entry(Gid::from_ip(ip)).or_else(|| ip.is_loopback().then(|| entry(Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST))).flatten())
    }

    /// The P_Key at `index` of `port` (ibv_query_pkey(3)): the default 0xFFFF at index 0.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        check_port("query_pkey", port)?;
        if index == 0 {
            Ok(0xffff)
        } else {
            Err(Error::invalid("query_pkey", Rule::PkeyIndex { index }))
        }
    }

    /// The device clock in nanoseconds and the wall clock (ibv_query_rt_values_ex(3)).
    pub fn query_rt_values(&self) -> crate::clock::RtValues {
        crate::clock::rt_values()
    }

    /// Creates a completion queue (ibv_create_cq(3), ibv_create_cq_ex(3)).
    pub fn create_cq(&self, init: &CqInit) -> Result<Cq> {
        if let Some(e) = crate::fault_plan::fail(self.inner.endpoint.slot, rverbs_proto::verb_fault::Verb::CreateCq, None, None) {
            return Err(e);
        }
        Cq::new(self.inner.clone(), &self.dev().cqs, init)
    }

    /// Allocates `len` bytes of device memory aligned to `2^log_align_req` bytes
    /// (ibv_alloc_dm(3)); see [`Dm`](crate::Dm).
    ///
    /// Errors: `EINVAL` for a zero length, a length above the device's `max_dm_size`
    /// ([`Rule::DmTooLarge`](crate::Rule::DmTooLarge)) or an alignment above a page;
    /// `ENOMEM` when it fits `max_dm_size` but this process's other allocations leave too
    /// little of it.
    pub fn alloc_dm(&self, len: usize, log_align_req: u32) -> Result<crate::mr::dm::Dm> {
        if let Some(e) = crate::fault_plan::fatal(self.inner.endpoint.slot, "alloc_dm") {
            return Err(e);
        }
        crate::mr::dm::Dm::alloc(self.inner.endpoint, len, log_align_req)
    }

    /// Creates a completion channel (ibv_create_comp_channel(3)).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        if let Some(e) = crate::fault_plan::fatal(self.inner.endpoint.slot, "create_comp_channel") {
            return Err(e);
        }
        let dev = self.dev();
        CompChannel::new(dev, &dev.cqs, self.inner.id)
    }

    /// Waits for the next asynchronous event (ibv_get_async_event(3)). Blocks unless
    /// [`Context::async_fd`] was made non-blocking, in which case an empty queue gives
    /// `Error::WouldBlock`.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        let mut rec = [0u8; RawAsyncEvent::LEN];
        loop {
            self.inner.events().recv(&mut rec)?;
            let dev = self.dev();
            if let Some(ev) = RawAsyncEvent::decode(&rec).and_then(|raw| AsyncEvent::deliver(raw, &dev.cqs, &dev.qps, &dev.srqs)) {
                return Ok(ev);
            }
        }
    }

    /// The fd that is readable while an asynchronous event is pending (`async_fd`).
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.inner.events().fd()
    }

    /// Opaque per-context id, unique in the process.
    pub fn id(&self) -> u32 {
        self.inner.id
    }
}

/// The context's asynchronous-event fd ([`Context::async_fd`], `ibv_context.async_fd` of
/// ibv_get_async_event(3)): readable while an event is pending, for epoll or an async
/// reactor; drain it with [`Context::get_async_event`].
impl AsFd for Context {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.async_fd()
    }
}

impl Cq {
    /// The context the CQ belongs to.
    pub fn context(&self) -> Context {
        Context::from_inner(self.inner().ctx.clone())
    }
}
