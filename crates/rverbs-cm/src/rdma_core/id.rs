//! Connection ids of librdmacm (rdma_create_id(3)) and the calls on them: bind, resolve,
//! listen, connect, accept, reject, establish, disconnect, migrate, the QP attributes of
//! the connection (rdma_init_qp_attr(3)).

use core::ffi::{c_int, c_void};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use rverbs::{Mtu, QpAttr, QpAttrMask, QpState, QpType};
use rverbs_abi::rdma_cm::*;
use rverbs_abi::{ibv_ece, ibv_qp_attr, Zeroed};
use rverbs_proto::verb_fault::Verb;

use super::channel::{ChannelInner, EventChannel};
use super::library::{check, unsupported, Rdmacm};
use super::sockaddr::{self, CAddr};
use crate::error::{Error, Result};
use crate::event::ConnParam;
use crate::handle::{PortSpace, Route};

/// The shared state of a [`CmId`]: the `struct rdma_cm_id` and the channel its events
/// go to (which it keeps alive: rdma_destroy_event_channel(3) wants no id left on it).
pub(super) struct IdInner {
    pub(super) id: *mut rdma_cm_id,
    pub(super) lib: Arc<Rdmacm>,
    channel: Mutex<Arc<ChannelInner>>,
    destroyed: bool,
}

// SAFETY: `id` is owned by this value; librdmacm's calls are thread-safe (it locks each
// id's state), and only `Drop` destroys the id.
unsafe impl Send for IdInner {}
// SAFETY: as for Send.
unsafe impl Sync for IdInner {}

/// The live ids of the process by the address of their `struct rdma_cm_id`: an event
/// names its id by that address.
fn ids() -> &'static Mutex<HashMap<usize, Weak<IdInner>>> {
    static IDS: std::sync::OnceLock<Mutex<HashMap<usize, Weak<IdInner>>>> = std::sync::OnceLock::new();
    IDS.get_or_init(Default::default)
}

impl IdInner {
    fn destroy(&mut self) -> Result<()> {
        self.destroyed = true;
        ids().lock().unwrap_or_else(|p| p.into_inner()).remove(&(self.id as usize));
        // SAFETY: `id` came from rdma_create_id (or a connection request) and is
        // destroyed once, here; every event of it held a handle, so all are acknowledged
        // (rdma_destroy_id(3) waits for them); a QP librdmacm made on it held a handle
        // and was destroyed with rdma_destroy_qp(3) first.
        unsafe { check((self.lib.sym.rdma_destroy_id)(self.id)) }
    }
}

impl Drop for IdInner {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.destroy() {
                tracing::warn!("rverbs_cm::rdma_core: rdma_destroy_id failed: {e}");
            }
        }
    }
}

/// A connection id of librdmacm (rdma_create_id(3)), the backend's [`crate::CmId`]: the
/// same method names and value types. Clones share it; it is destroyed
/// (rdma_destroy_id(3)) when the last handle, the last event about it and the QP
/// librdmacm made on it are gone.
#[derive(Clone)]
pub struct CmId {
    pub(super) inner: Arc<IdInner>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId").field("id", &self.inner.id).finish()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A fault plan (`RVERBS_FAULTS`, `rverbs::fault_plan::install`) that fails this rdma_cm
/// call (docs/fault-injection.md) asks for what the backend cannot inject into
/// librdmacm: the call is `EOPNOTSUPP`, never a silent success.
fn no_fault_planned(verb: Verb) -> Result<()> {
    match rverbs::fault_plan::cm_fail(verb) {
        Some(_) => Err(unsupported("a fault plan's rdma_cm failure (cm_fail) over librdmacm")),
        None => Ok(()),
    }
}

/// `EINVAL` of a call whose argument librdmacm cannot carry.
fn einval() -> Error {
    Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL))
}

impl CmId {
    /// Creates an id whose events go to `channel` (rdma_create_id(3)). librdmacm gives
    /// the id its port space's QP type (UD for `Udp` and `Ipoib`, else RC); another
    /// `qp_type` is `EOPNOTSUPP`. `context` is the application's word (`id->context`),
    /// inherited by the ids of connection requests.
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: QpType, context: usize) -> Result<CmId> {
        let own = if ps.is_datagram() { QpType::Ud } else { QpType::Rc };
        if qp_type != own {
            return Err(unsupported("a QP type other than the port space's (rdma_create_id)"));
        }
        let ch = &channel.inner;
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `id` is a valid out-pointer.
        check(unsafe { (ch.lib.sym.rdma_create_id)(ch.ch, &mut id, context as *mut c_void, ps as u16 as rdma_port_space) })?;
        Ok(CmId::adopt(ch, id))
    }

    /// Wraps a new `struct rdma_cm_id` (rdma_create_id's, or a connection request's) on
    /// channel `ch`, and records it for the events that name it.
    fn adopt(ch: &Arc<ChannelInner>, id: *mut rdma_cm_id) -> CmId {
        let inner = Arc::new(IdInner { id, lib: ch.lib.clone(), channel: Mutex::new(ch.clone()), destroyed: false });
        ids().lock().unwrap_or_else(|p| p.into_inner()).insert(id as usize, Arc::downgrade(&inner));
        CmId { inner }
    }

    /// The id an event on `ch` names: a live id of the process, or (a connection
    /// request's) a new one, on `ch`.
    ///
    /// # Safety
    ///
    /// `id` is the live `struct rdma_cm_id` of an event of `ch` not yet acknowledged.
    pub(super) unsafe fn of_raw(ch: &Arc<ChannelInner>, id: *mut rdma_cm_id) -> Result<CmId> {
        if id.is_null() {
            return Err(Error::Os(std::io::Error::from_raw_os_error(libc::EPROTO)));
        }
        if let Some(inner) = ids().lock().unwrap_or_else(|p| p.into_inner()).get(&(id as usize)).and_then(Weak::upgrade) {
            return Ok(CmId { inner });
        }
        Ok(CmId::adopt(ch, id))
    }

    /// The address of the `struct rdma_cm_id`: unique in the process while the id lives.
    pub fn number(&self) -> u64 {
        self.inner.id as usize as u64
    }

    fn raw(&self) -> *mut rdma_cm_id {
        self.inner.id
    }

    fn sym(&self) -> &super::library::Symbols {
        &self.inner.lib.sym
    }

    /// The channel the id's events go to.
    pub fn channel(&self) -> Option<EventChannel> {
        Some(EventChannel { inner: self.inner.channel.lock().unwrap_or_else(|p| p.into_inner()).clone() })
    }

    /// The port space (`id->ps`).
    pub fn ps(&self) -> PortSpace {
        // SAFETY: the id is live; `ps` is set at creation.
        PortSpace::from_raw(unsafe { (*self.raw()).ps }).unwrap_or(PortSpace::Tcp)
    }

    /// The QP type of the id's port space (`id->qp_type`).
    pub fn qp_type(&self) -> QpType {
        if self.ps().is_datagram() { QpType::Ud } else { QpType::Rc }
    }

    /// The application's word given at creation (`id->context`).
    pub fn context(&self) -> usize {
        // SAFETY: the id is live.
        unsafe { (*self.raw()).context as usize }
    }

    /// Binds the id to a local address and port (rdma_bind_addr(3)); port 0 picks one.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut a = CAddr::new(addr);
        // SAFETY: the id is live; `a` is a sockaddr of its family's size.
        check(unsafe { (self.sym().rdma_bind_addr)(self.raw(), a.as_mut_ptr()) })
    }

    /// Resolves `dst` (rdma_resolve_addr(3)): ADDR_RESOLVED or ADDR_ERROR follows.
    /// A fault plan that fails it is `EOPNOTSUPP`.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr, timeout_ms: i32) -> Result<()> {
        no_fault_planned(Verb::ResolveAddr)?;
        let mut s = src.map(CAddr::new);
        let mut d = CAddr::new(dst);
        let sp = s.as_mut().map_or(std::ptr::null_mut(), CAddr::as_mut_ptr);
        // SAFETY: the id is live; the addresses are sockaddrs of their families' sizes.
        check(unsafe { (self.sym().rdma_resolve_addr)(self.raw(), sp, d.as_mut_ptr(), timeout_ms) })
    }

    /// Resolves the route (rdma_resolve_route(3)): ROUTE_RESOLVED or ROUTE_ERROR follows.
    /// A fault plan that fails it is `EOPNOTSUPP`.
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        no_fault_planned(Verb::ResolveRoute)?;
        // SAFETY: the id is live.
        check(unsafe { (self.sym().rdma_resolve_route)(self.raw(), timeout_ms) })
    }

    /// Listens for connection requests (rdma_listen(3)).
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: the id is live.
        check(unsafe { (self.sym().rdma_listen)(self.raw(), backlog) })
    }

    /// Sends a connection request (rdma_connect(3)) with `param`'s private data and
    /// resources; on an id without a QP, `param.qp_num` is the QP the application
    /// manages, and CONNECT_RESPONSE follows (then [`CmId::establish`]).
    /// A fault plan that fails it is `EOPNOTSUPP`.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        no_fault_planned(Verb::Connect)?;
        let mut p = conn_param(param)?;
        // SAFETY: the id is live; `p` and the private data it points to live across the call.
        check(unsafe { (self.sym().rdma_connect)(self.raw(), &mut p) })
    }

    /// Accepts a connection request (rdma_accept(3)).
    pub fn accept(&self, param: Option<&ConnParam>) -> Result<()> {
        let mut p = param.map(conn_param).transpose()?;
        let pp = p.as_mut().map_or(std::ptr::null_mut(), |p| p as *mut rdma_conn_param);
        // SAFETY: the id is live; `p` (if any) and its private data live across the call.
        check(unsafe { (self.sym().rdma_accept)(self.raw(), pp) })
    }

    /// Rejects a connection request (rdma_reject(3)) with `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let len = u8::try_from(private_data.len()).map_err(|_| einval())?;
        let data = if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: the id is live; `data` is readable for `len` bytes.
        check(unsafe { (self.sym().rdma_reject)(self.raw(), data, len) })
    }

    /// Rejects a connection request because its ECE options are not supported
    /// (rdma_reject_ece(3)): the peer sees REJECTED with status 35.
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        let len = u8::try_from(private_data.len()).map_err(|_| einval())?;
        let data = if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: the id is live; `data` is readable for `len` bytes.
        check(unsafe { (self.sym().rdma_reject_ece)(self.raw(), data, len) })
    }

    /// Sets the ECE (vendor ID, options) of this side's REQ or REP
    /// (rdma_set_local_ece(3)).
    pub fn set_local_ece(&self, vendor_id: u32, options: u32) -> Result<()> {
        let mut ece = ibv_ece { vendor_id, options, comp_mask: 0 };
        // SAFETY: the id is live; `ece` is a valid `struct ibv_ece`, only read.
        check(unsafe { (self.sym().rdma_set_local_ece)(self.raw(), &mut ece) })
    }

    /// The ECE (vendor ID, options) the peer's REQ or REP carried
    /// (rdma_get_remote_ece(3)).
    pub fn remote_ece(&self) -> Result<(u32, u32)> {
        let mut ece = ibv_ece { vendor_id: 0, options: 0, comp_mask: 0 };
        // SAFETY: the id is live; `ece` is a valid out-value.
        check(unsafe { (self.sym().rdma_get_remote_ece)(self.raw(), &mut ece) })?;
        Ok((ece.vendor_id, ece.options))
    }

    /// Joins the multicast group of IP address `addr` (rdma_join_multicast_ex(3)), as a
    /// send-only full member if `send_only`: MULTICAST_JOIN follows with `context`, and
    /// librdmacm attaches the QP made on the id ([`CmId::create_qp`]), unless send-only.
    pub fn join_multicast(&self, addr: SocketAddr, send_only: bool, context: usize) -> Result<()> {
        let mut a = CAddr::new(addr);
        let mut attr = rdma_cm_join_mc_attr_ex {
            comp_mask: RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
            join_flags: if send_only { RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER } else { RDMA_MC_JOIN_FLAG_FULLMEMBER },
            addr: a.as_mut_ptr(),
        };
        // SAFETY: the id is live; `attr` and the address it points to live across the
        // call; `context` is only handed back in the join's events, never dereferenced.
        check(unsafe { (self.sym().rdma_join_multicast_ex)(self.raw(), &mut attr, context as *mut c_void) })
    }

    /// Leaves the group joined with `addr` (rdma_leave_multicast(3)).
    pub fn leave_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = CAddr::new(addr);
        // SAFETY: the id is live; `a` is a sockaddr of its family's size.
        check(unsafe { (self.sym().rdma_leave_multicast)(self.raw(), a.as_mut_ptr()) })
    }

    /// Sets option `name` of level RDMA_OPTION_ID to `value` (rdma_set_option(3); the
    /// value of the type the option takes: `u8` for TOS and ACK_TIMEOUT, `c_int` for
    /// REUSEADDR and AFONLY).
    fn set_option<T: Copy>(&self, name: c_int, value: T) -> Result<()> {
        let mut v = value;
        // SAFETY: the id is live; `v` is readable for its size, which is passed.
        check(unsafe {
            (self.sym().rdma_set_option)(self.raw(), RDMA_OPTION_ID, name, (&mut v as *mut T).cast(), std::mem::size_of::<T>())
        })
    }

    /// Sets the type of service (RDMA_OPTION_ID_TOS).
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        self.set_option(RDMA_OPTION_ID_TOS, tos)
    }

    /// Sets the QP's local ACK timeout code (RDMA_OPTION_ID_ACK_TIMEOUT).
    pub fn set_ack_timeout(&self, code: u8) -> Result<()> {
        self.set_option(RDMA_OPTION_ID_ACK_TIMEOUT, code)
    }

    /// Allows binding a port other ids use (RDMA_OPTION_ID_REUSEADDR); before binding.
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        self.set_option(RDMA_OPTION_ID_REUSEADDR, c_int::from(on))
    }

    /// Restricts an IPv6 binding to IPv6 (RDMA_OPTION_ID_AFONLY); before binding.
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        self.set_option(RDMA_OPTION_ID_AFONLY, c_int::from(on))
    }

    /// Completes an active connection whose QP the application manages, after
    /// CONNECT_RESPONSE (rdma_establish(3)): the RTU goes out.
    pub fn establish(&self) -> Result<()> {
        // SAFETY: the id is live.
        check(unsafe { (self.sym().rdma_establish)(self.raw()) })
    }

    /// Disconnects (rdma_disconnect(3)); the QP librdmacm made on the id moves to ERR,
    /// one the application manages is its to move.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is live.
        check(unsafe { (self.sym().rdma_disconnect)(self.raw()) })
    }

    /// The attributes and mask that move a QP of this connection to `state`
    /// (rdma_init_qp_attr(3)), for a QP the application manages.
    pub fn init_qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
        let mut attr = ibv_qp_attr::zeroed();
        attr.qp_state = state as u32;
        let mut mask: c_int = 0;
        // SAFETY: the id is live; both out-values are valid.
        check(unsafe { (self.sym().rdma_init_qp_attr)(self.raw(), &mut attr, &mut mask) })?;
        let mask = QpAttrMask::from_bits_retain(u32::try_from(mask).map_err(|_| einval())?);
        let attr = rverbs::c_abi::qp_attr_from_c(&attr, mask).map_err(|e| Error::Os(std::io::Error::from_raw_os_error(e)))?;
        Ok((attr, mask))
    }

    /// Moves the id's events to `channel` (rdma_migrate_id(3)).
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        let mut held = self.inner.channel.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the id and both channels are live.
        check(unsafe { (self.sym().rdma_migrate_id)(self.raw(), channel.inner.ch) })?;
        *held = channel.inner.clone();
        Ok(())
    }

    /// The local address (rdma_get_local_addr(3), an inline of rdma_cma.h:
    /// `id->route.addr.src_addr`), once bound.
    pub fn src_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; the address is a `sockaddr_storage` inside it, which
        // librdmacm fills whole or leaves zero (family 0: none).
        unsafe { sockaddr::from_c(core::ptr::addr_of!((*self.raw()).route.addr.src.src_storage).cast()) }
    }

    /// The peer's address (rdma_get_peer_addr(3), `id->route.addr.dst_addr`), once
    /// resolved or requested.
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as in `src_addr`.
        unsafe { sockaddr::from_c(core::ptr::addr_of!((*self.raw()).route.addr.dst.dst_storage).cast()) }
    }

    /// What librdmacm resolved of the route (`id->route`): the path record of
    /// rdma_resolve_route(3) (GIDs, P_Key in host order, path MTU, hop limit, traffic
    /// class) and the source GID's index in the GID table of the id's context (the
    /// entry of the source address, `rverbs::Context::gid_entry_of`).
    ///
    /// Errors: `EINVAL` before the route is resolved (no path record).
    pub fn route(&self) -> Result<Route> {
        // SAFETY: the id is live; librdmacm fills `route` as the route resolves (read as
        // rdma_cma.h's inlines read its addresses).
        let (num_paths, rec) = unsafe {
            let r = core::ptr::addr_of!((*self.raw()).route);
            ((*r).num_paths, (*r).path_rec)
        };
        if num_paths < 1 || rec.is_null() {
            return Err(einval());
        }
        // SAFETY: librdmacm allocated `num_paths` ≥ 1 records at `path_rec`, kept while
        // the id lives.
        let p = unsafe { *rec };
        let mtu = Mtu::from_raw(u32::from(p.mtu)).ok_or_else(einval)?;
        let ctx = rverbs::Context::from(self.verbs().ok_or_else(einval)?);
        let entry = self.src_addr().and_then(|a| ctx.gid_entry_of(a.ip())).ok_or_else(einval)?;
        Ok(Route {
            sgid: rverbs::c_abi::gid_from_c(&p.sgid),
            dgid: rverbs::c_abi::gid_from_c(&p.dgid),
            sgid_index: u8::try_from(entry.index).map_err(|_| einval())?,
            pkey: u16::from_be(p.pkey),
            mtu,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            num_paths: num_paths as u32,
        })
    }

    /// Whether the id is bound to a device (`id->verbs` set: after resolving, binding to
    /// a device's address, or a connection request).
    pub fn has_device(&self) -> bool {
        // SAFETY: the id is live.
        !unsafe { (*self.raw()).verbs }.is_null()
    }

    /// The id's verbs context (`id->verbs`), once it has a device ([`CmId::has_device`]):
    /// the context librdmacm opened on that device, as a context of `rverbs`' backend
    /// ([`rverbs::rdma_core::Context::adopt`]; `rverbs::Context::from` makes it the
    /// public type). The PD and CQs of a QP made on the id ([`CmId::create_qp`]) are
    /// made in it. Every id on the device gives the same context; librdmacm keeps it
    /// open for the process.
    pub fn verbs(&self) -> Option<rverbs::rdma_core::Context> {
        // SAFETY: the id is live.
        let raw = unsafe { (*self.raw()).verbs };
        if raw.is_null() {
            return None;
        }
        static ADOPTED: std::sync::OnceLock<Mutex<HashMap<usize, rverbs::rdma_core::Context>>> = std::sync::OnceLock::new();
        let mut adopted = ADOPTED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = adopted.get(&(raw as usize)) {
            return Some(c.clone());
        }
        let keep: Box<dyn std::any::Any + Send + Sync> = Box::new(self.inner.lib.clone());
        // SAFETY: librdmacm opened `raw` with the process's one libibverbs, the
        // backend's (checked when librdmacm was loaded), and keeps it open while the
        // library is loaded, which `keep` ensures.
        let ctx = unsafe { rverbs::rdma_core::Context::adopt(raw, keep) }.ok()?;
        adopted.insert(raw as usize, ctx.clone());
        Some(ctx)
    }

    /// Creates the id's QP (rdma_create_qp(3)) in `pd` with `init`'s CQs, type and
    /// capabilities: librdmacm moves it to INIT, and to RTR and RTS when the connection
    /// is accepted or established (no [`CmId::init_qp_attr`] needed). `pd` and the CQs
    /// must be of the id's context ([`CmId::verbs`]), else `EINVAL` (a soft CQ too); an
    /// SRQ or `send_ops` is `EOPNOTSUPP`. The QP is a QP of `rverbs`' backend
    /// (`rverbs::Qp::from` makes it the public type) whose last handle, or `destroy`,
    /// destroys it with rdma_destroy_qp(3); it holds the id until then.
    pub fn create_qp(&self, pd: &rverbs::rdma_core::Pd, init: &rverbs::QpInit<'_>) -> Result<rverbs::rdma_core::Qp> {
        use rverbs::rdma_core::Cq;
        // SAFETY: the id is live.
        let verbs = unsafe { (*self.raw()).verbs };
        let (Some(send), Some(recv)) = (Cq::of(init.send_cq), Cq::of(init.recv_cq)) else {
            return Err(einval());
        };
        let ctxs = [pd.context().as_raw(), send.context().as_raw(), recv.context().as_raw()];
        if verbs.is_null() || ctxs.iter().any(|c| *c != verbs) {
            return Err(einval());
        }
        let id = self.clone();
        let release: rverbs::rdma_core::Release = Box::new(move || {
            // SAFETY: the id is live (held by this closure) and has the QP rdma_create_qp
            // made, destroyed once, here.
            unsafe { (id.sym().rdma_destroy_qp)(id.raw()) };
            Ok(())
        });
        let create = |attr: &mut rverbs_abi::ibv_qp_init_attr| {
            // SAFETY: the id is live; the PD and the CQs are live (create_qp_with keeps
            // them so for this call) and of one context; `attr` is a valid init struct,
            // written back with the capabilities granted.
            check(unsafe { (self.sym().rdma_create_qp)(self.raw(), pd.as_raw(), attr) }).map_err(|e| match e {
                Error::Verbs(v) => v,
                other => rverbs::Error::Os(std::io::Error::from_raw_os_error(other.errno())),
            })?;
            // SAFETY: rdma_create_qp succeeded: `id->qp` is the new QP.
            Ok(unsafe { (*self.raw()).qp })
        };
        // SAFETY: the QP `create` returns was made by the process's libibverbs (through
        // librdmacm) in `pd` with the attributes given; only `release` destroys it.
        unsafe { pd.create_qp_with(init, create, release) }.map_err(Error::Verbs)
    }

    /// Destroys the id now (rdma_destroy_id(3)); `EBUSY` without destroying while another
    /// handle or an unacknowledged event holds it. Dropping the last handle destroys too.
    pub fn destroy(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.destroy(),
            Err(_) => Err(Error::Verbs(rverbs::Error::Busy { what: "connection id" })),
        }
    }
}

/// `param` as librdmacm takes it; private data beyond 255 bytes is `EINVAL` (the
/// length is a `u8`; librdmacm checks each message's own limit).
fn conn_param(param: &ConnParam) -> Result<rdma_conn_param> {
    let len = u8::try_from(param.private_data.len()).map_err(|_| einval())?;
    Ok(rdma_conn_param {
        private_data: if len == 0 { std::ptr::null() } else { param.private_data.as_ptr().cast() },
        private_data_len: len,
        responder_resources: param.responder_resources,
        initiator_depth: param.initiator_depth,
        flow_control: param.flow_control,
        retry_count: param.retry_count,
        rnr_retry_count: param.rnr_retry_count,
        srq: param.srq,
        qp_num: param.qp_num,
    })
}
