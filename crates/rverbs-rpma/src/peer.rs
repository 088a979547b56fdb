//! Peers (`struct rpma_peer`) and peer configurations (`struct rpma_peer_cfg`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rverbs::{Context, Pd, QpType};
use rverbs_cm::{CmId, EventChannel, EventKind, PortSpace};

use crate::error::{Error, Result};
use crate::flags::Usage;
use crate::util;

/// Which side of a connection an address names (`enum rpma_util_ibv_context_type`,
/// rpma_utils_get_ibv_context(3)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContextType {
    /// `RPMA_UTIL_IBV_CONTEXT_LOCAL`: an address of this host (a server's listening
    /// address): the device is found by binding to it.
    Local,
    /// `RPMA_UTIL_IBV_CONTEXT_REMOTE`: the address of the other side (a client's
    /// server): the device is the one the route to it leaves from.
    Remote,
}

/// The time rpma_utils_get_ibv_context(3) gives rdma_resolve_addr(3) (1000 ms).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The device context an IP address leads to, found as rpma_utils_get_ibv_context(3)
/// finds it: a temporary connection id of the TCP port space is bound to the local
/// address (`Local`) or resolves the remote one (`Remote`); the device is the one whose
/// GID table holds the id's source address (rdma_cm(7): an IP address names the device
/// that holds it). The id is destroyed before returning.
///
/// A local loopback address (127.0.0.0/8, `::1`) names no device: the kernel's rdma_cm
/// attaches none to an id bound to it, as to the any-address (docs/connection-manager.md,
/// "Addresses"), so librpma 1.x returns a NULL context for it and rpma_peer_new(3) then
/// fails; here that is `ENODEV`. A server serves on an address of a network interface. As a
/// remote address the loopback resolves to this host's device (cma_resolve_loopback).
///
/// Errors: `Provider` if the address cannot be bound or resolved (e.g.
/// `EADDRNOTAVAIL` for an address of no local interface) or names no device
/// (`ENODEV`: a wildcard or, as `Local`, a loopback address). As librpma logs the failed
/// step, a failure is logged (`tracing`, warning) with the address and the step.
pub fn context_for(addr: &str, ty: ContextType) -> Result<Context> {
    let mut step = "getaddrinfo";
    let found = find_context(addr, ty, &mut step);
    if let Err(err) = &found {
        tracing::warn!(addr, ?ty, step, %err, "rpma: no device context for the address");
    }
    found
}

/// [`context_for`], with the step under way kept in `step`.
fn find_context(addr: &str, ty: ContextType, step: &mut &'static str) -> Result<Context> {
    let sa = util::lookup(addr, 0)?;
    *step = "rdma_create_id";
    let ch = EventChannel::new()?;
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc, 0)?;
    let found = (|| -> Result<IpAddr> {
        match ty {
            ContextType::Local => {
                *step = "rdma_bind_addr";
                id.bind_addr(sa)?
            }
            ContextType::Remote => {
                *step = "rdma_resolve_addr";
                id.resolve_addr(None, sa, RESOLVE_TIMEOUT.as_millis() as i32)?;
                let ev = util::cm_event(&ch, Some(RESOLVE_TIMEOUT))?;
                if ev.kind != EventKind::AddrResolved {
                    return Err(Error::Provider(if ev.status < 0 { -ev.status } else { libc::EHOSTUNREACH }));
                }
            }
        }
        *step = "the id's device";
        if !id.has_device() {
            return Err(Error::Provider(libc::ENODEV));
        }
        id.src_addr().map(|a| a.ip()).ok_or(Error::Provider(libc::ENODEV))
    })();
    let _ = id.destroy();
    let ip = found?;
    *step = "the device holding the source address";
    for dev in rverbs::devices()? {
        let ctx = dev.open()?;
        if rverbs_cm::addr::local_gid(&ctx, ip).is_some() {
            return Ok(ctx);
        }
    }
    Err(Error::Provider(libc::ENODEV))
}

/// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT` of `device_cap_flags_ex` (the kernel's
/// `ib_user_ioctl_verbs.h`; rverbs defines the other two A19 bits).
const EX_FLUSH_PERSISTENT: u64 = 1 << 39;

/// Which of the IBTA A19 operations a peer posts natively (`IBV_WR_ATOMIC_WRITE`,
/// `IBV_WR_FLUSH`) instead of emulating them, decided once per peer as librpma decides
/// it in `rpma_peer_new` (1.3.0; Debian's 1.2.0 is built without either and always
/// emulates):
///
/// - atomic write is native iff the device's `device_cap_flags_ex` (ibv_query_device_ex(3))
///   has `IB_UVERBS_DEVICE_ATOMIC_WRITE`;
/// - flush is native iff it has **both** `IB_UVERBS_DEVICE_FLUSH_GLOBAL` and
///   `IB_UVERBS_DEVICE_FLUSH_PERSISTENT`.
///
/// The decision looks at the local device only, as librpma's does: a native operation
/// the other side's device cannot execute fails with an error completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Native {
    /// rpma_atomic_write(3) posts `IBV_WR_ATOMIC_WRITE` (else a fenced inline RDMA WRITE).
    pub atomic_write: bool,
    /// rpma_flush(3) posts `IBV_WR_FLUSH` (else an 8-byte RDMA READ), and regions map
    /// the flush usages to `IBV_ACCESS_FLUSH_GLOBAL`/`_PERSISTENT` (else REMOTE_READ).
    pub flush: bool,
}

impl Native {
    /// Neither operation native: librpma built with
    /// `BUILD_FORCE_NATIVE_ATOMIC_WRITE_NOT_SUPPORTED` and
    /// `BUILD_FORCE_NATIVE_FLUSH_NOT_SUPPORTED`, or librpma 1.2.0.
    pub const EMULATED: Native = Native { atomic_write: false, flush: false };

    /// Both operations allowed (the mask [`Peer::from_context`] applies).
    pub const ALL: Native = Native { atomic_write: true, flush: true };

    /// librpma's decision from a device's `device_cap_flags_ex` (see [`Native`]).
    pub fn from_cap_flags_ex(flags: u64) -> Native {
        use rverbs::cap_flags::{EX_ATOMIC_WRITE, EX_FLUSH_GLOBAL};
        let flush = EX_FLUSH_GLOBAL | EX_FLUSH_PERSISTENT;
        Native { atomic_write: flags & EX_ATOMIC_WRITE != 0, flush: flags & flush == flush }
    }

    /// The operations native in both `self` and `other`.
    pub fn and(self, other: Native) -> Native {
        Native { atomic_write: self.atomic_write && other.atomic_write, flush: self.flush && other.flush }
    }
}

struct PeerInner {
    ctx: Context,
    pd: Pd,
    native: Native,
}

/// A peer (`struct rpma_peer`): a device context and a protection domain that every
/// memory region, endpoint and connection made from it shares. Cloning shares the peer.
///
/// rpma_peer_new(3): "creates a new peer object" from an RDMA device context; here the
/// context comes from an IP address ([`Peer::new`]) or is given ([`Peer::from_context`]).
#[derive(Clone)]
pub struct Peer {
    inner: Arc<PeerInner>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("device", &self.inner.ctx.device_name()).field("pd", &self.inner.pd).finish()
    }
}

impl Peer {
    /// The peer of the device `addr` leads to: rpma_utils_get_ibv_context(3) (see
    /// [`context_for`]) followed by rpma_peer_new(3).
    ///
    /// Errors: `Provider` (no device for the address), `NoMem` (no protection domain
    /// left).
    pub fn new(addr: &str, ty: ContextType) -> Result<Peer> {
        Peer::from_context(context_for(addr, ty)?)
    }

    /// The peer of an open device context (rpma_peer_new(3)): decides which A19
    /// operations are native from the device's capabilities ([`Native`]) and allocates
    /// its protection domain.
    ///
    /// Errors: `NoMem` if ibv_alloc_pd(3) fails with ENOMEM, `Provider` otherwise.
    pub fn from_context(ctx: Context) -> Result<Peer> {
        Peer::from_context_with(ctx, Native::ALL)
    }

    /// As [`Peer::from_context`], with native operations limited to `allow` (an rverbs
    /// extension: the runtime form of librpma's `BUILD_FORCE_NATIVE_*_NOT_SUPPORTED`
    /// build options; [`Native::EMULATED`] gives librpma 1.2.0's behaviour). It never
    /// makes native what the device does not support.
    ///
    /// Errors: those of [`Peer::from_context`].
    pub fn from_context_with(ctx: Context, allow: Native) -> Result<Peer> {
        let native = Native::from_cap_flags_ex(ctx.query_device().device_cap_flags_ex).and(allow);
        let pd = ctx.alloc_pd().map_err(|e| Error::alloc(e.errno()))?;
        Ok(Peer { inner: Arc::new(PeerInner { ctx, pd, native }) })
    }

    /// The peer of the device `addr` leads to, with native operations limited to
    /// `allow` ([`Peer::from_context_with`]).
    ///
    /// Errors: those of [`Peer::new`].
    pub fn new_with(addr: &str, ty: ContextType, allow: Native) -> Result<Peer> {
        Peer::from_context_with(context_for(addr, ty)?, allow)
    }

    /// Which operations this peer posts natively.
    pub fn native(&self) -> Native {
        self.inner.native
    }

    /// The access rights a region of this peer registered for `usage` gets
    /// (`rpma_peer_usage2access`): [`Usage::access_for`] with this peer's native flush.
    pub fn usage_to_access(&self, usage: Usage) -> rverbs::Access {
        usage.access_for(self.inner.native.flush)
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// Deletes the peer (rpma_peer_delete(3)): deallocates the protection domain.
    ///
    /// Errors: `Provider(EBUSY)` while memory regions or connections of the peer exist
    /// (ibv_dealloc_pd(3) fails), as in librpma.
    pub fn delete(self) -> Result<()> {
        self.inner.pd.dealloc().map_err(Error::from)
    }
}

/// A peer configuration (`struct rpma_peer_cfg`): what a peer tells the other side about
/// itself, shipped as a 1-byte descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerCfg {
    direct_write_to_pmem: bool,
}

impl PeerCfg {
    /// The size of a peer-configuration descriptor (rpma_peer_cfg_get_descriptor_size(3)):
    /// 1 byte.
    pub const DESCRIPTOR_SIZE: usize = 1;

    /// A configuration with direct write to pmem off (rpma_peer_cfg_new(3)).
    pub fn new() -> PeerCfg {
        PeerCfg::default()
    }

    /// Declares whether RDMA writes to this peer's persistent memory are persistent once
    /// flushed (rpma_peer_cfg_set_direct_write_to_pmem(3)).
    pub fn set_direct_write_to_pmem(&mut self, supported: bool) -> &mut Self {
        self.direct_write_to_pmem = supported;
        self
    }

    /// Whether direct write to pmem is declared (rpma_peer_cfg_get_direct_write_to_pmem(3)).
    pub fn direct_write_to_pmem(&self) -> bool {
        self.direct_write_to_pmem
    }

    /// The descriptor (rpma_peer_cfg_get_descriptor(3)): one byte, 1 if direct write to
    /// pmem is supported, else 0.
    pub fn descriptor(&self) -> [u8; Self::DESCRIPTOR_SIZE] {
        [u8::from(self.direct_write_to_pmem)]
    }

    /// The configuration a descriptor describes (rpma_peer_cfg_from_descriptor(3)); only
    /// the first byte is read, non-zero meaning direct write to pmem.
    ///
    /// Errors: `Inval` if `desc` is empty.
    pub fn from_descriptor(desc: &[u8]) -> Result<PeerCfg> {
        match desc.first() {
            Some(&b) => Ok(PeerCfg { direct_write_to_pmem: b != 0 }),
            None => Err(Error::Inval),
        }
    }
}
