//! The C objects of the rdma_cm API and what maps them to the connection manager
//! (`rverbs_cm`): event channels ([`Chan`]), ids ([`Id`]) and events ([`Ev`]), plus the
//! helpers every entry point shares (address conversion, the refresh of the public id
//! fields, synchronous completion).
//!
//! Layouts (as rdma-core's `cma_id_private`/`cma_event`): each object is a `#[repr(C)]`
//! wrapper whose first field is the public C struct, so the pointer handed to C is the
//! wrapper's. Ownership:
//!
//! * [`Chan`] lives in an `Arc`; the C pointer is the `Arc`'s data pointer. Every call
//!   that uses a channel takes its own strong reference first, so
//!   `rdma_destroy_event_channel` under a thread blocked in `rdma_get_cm_event` (rping
//!   does that) frees nothing that thread uses.
//! * [`Id`] is a `Box` freed by `rdma_destroy_id`; the core id keeps the box's address
//!   as its "user" word so events find their C id. A synchronous id owns a private
//!   channel.
//! * [`Ev`] is a `Box` owning the core event: the private-data pointer handed to C points
//!   into it, and dropping it (`rdma_ack_cm_event`) acknowledges the event.
//!
//! Every pointer C passes in is looked up in the registry of live objects
//! (`live.rs`) before anything is read through it: a foreign, freed or NULL pointer
//! is refused without being dereferenced.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, AF_INET, AF_INET6};
use rverbs::QpType;
use rverbs_cm::soft::{CmId, Event, EventChannel};
use rverbs_cm::{EventKind, PortSpace};

use super::abi::*;
use crate::abi::{ibv_qp_init_attr, ibv_sa_path_rec, Zeroed, IBV_QPT_UD};
use crate::ffi::{ToErrno, minus_one_errno};
use crate::live::{self, Kind};

/// -1 with `errno` set from a connection-manager error.
pub fn fail(e: &rverbs_cm::Error) -> c_int {
    minus_one_errno(e.c_errno())
}

// ---------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------

/// `struct rdma_event_channel` and its core channel (`fd` is the core channel's fd).
#[repr(C)]
pub struct Chan {
    c: rdma_event_channel,
    core: EventChannel,
}

impl Drop for Chan {
    /// The last strong reference is gone: the channel leaves the registry before its
    /// memory is freed.
    fn drop(&mut self) {
        live::remove(Kind::CmChannel, self as *const Chan);
    }
}

impl Chan {
    /// A new channel, or the errno of the failure.
    pub fn new() -> Result<Arc<Chan>, c_int> {
        let core = EventChannel::new().map_err(|e| e.c_errno())?;
        let fd = core.fd().as_raw_fd();
        let ch = Arc::new(Chan {
            c: rdma_event_channel { fd },
            core,
        });
        live::insert(Kind::CmChannel, Arc::as_ptr(&ch));
        Ok(ch)
    }

    /// The pointer handed to C (valid while a strong reference lives).
    pub fn as_ptr(this: &Arc<Chan>) -> *mut rdma_event_channel {
        Arc::as_ptr(this).cast_mut().cast()
    }

    /// Gives C one strong reference: the pointer `rdma_destroy_event_channel` takes back.
    pub fn into_raw(this: Arc<Chan>) -> *mut rdma_event_channel {
        Arc::into_raw(this).cast_mut().cast()
    }

    /// A new strong reference to the channel behind a C pointer; `None` for NULL, a
    /// foreign pointer or a freed channel (nothing is read through it then).
    ///
    /// # Safety
    /// `p` is any pointer; a live channel of this module is not released concurrently.
    pub unsafe fn from_raw(p: *mut rdma_event_channel) -> Option<Arc<Chan>> {
        let c = p.cast::<Chan>().cast_const();
        if !live::contains(Kind::CmChannel, c) {
            return None;
        }
        // SAFETY: in the registry, so the data pointer of a live Arc<Chan>.
        unsafe {
            Arc::increment_strong_count(c);
            Some(Arc::from_raw(c))
        }
    }

    /// Takes back the strong reference [`Chan::into_raw`] gave C.
    ///
    /// Returns false (and reads nothing) for NULL, a foreign pointer or a freed channel.
    ///
    /// # Safety
    /// `p` is any pointer; a live one came from [`Chan::into_raw`] and is given up by the
    /// caller.
    pub unsafe fn release(p: *mut rdma_event_channel) -> bool {
        let c = p.cast::<Chan>().cast_const();
        if !live::contains(Kind::CmChannel, c) {
            return false;
        }
        // SAFETY: a live channel: the reference C held, given up now.
        drop(unsafe { Arc::from_raw(c) });
        true
    }

    /// The core channel.
    pub fn core(&self) -> &EventChannel {
        &self.core
    }
}

// ---------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------

/// What an id keeps besides the public struct.
pub struct Extra {
    /// The private channel of a synchronous id (`id->channel` points at it).
    pub sync: Option<Arc<Chan>>,
    /// A passive endpoint's QP attributes (`rdma_create_ep`), applied to every request
    /// `rdma_get_request` returns.
    pub qp_init_attr: Option<ibv_qp_init_attr>,
    /// Private data an active endpoint's `rdma_addrinfo` carried (`ai_connect`), sent
    /// before the caller's own with the next `rdma_connect`.
    pub connect: Vec<u8>,
}

/// `struct rdma_cm_id` and its core id.
#[repr(C)]
pub struct Id {
    c: UnsafeCell<rdma_cm_id>,
    core: CmId,
    /// The one path record `route.path_rec` points at once the route is known.
    path: UnsafeCell<ibv_sa_path_rec>,
    extra: Mutex<Extra>,
}

impl Id {
    /// Wraps `core` for C and records the wrapper in the core id. `sync` is the private
    /// channel of a synchronous id; `channel` the C channel otherwise.
    pub fn create(
        core: CmId,
        channel: *mut rdma_event_channel,
        sync: Option<Arc<Chan>>,
        context: *mut c_void,
        ps: rdma_port_space,
        qp_type: u32,
    ) -> *mut Id {
        let mut c = rdma_cm_id::zeroed();
        c.channel = sync.as_ref().map_or(channel, Chan::as_ptr);
        c.context = context;
        c.ps = ps;
        c.qp_type = qp_type;
        core.set_context(context as usize);
        let id = Box::into_raw(Box::new(Id {
            c: UnsafeCell::new(c),
            core,
            path: UnsafeCell::new(ibv_sa_path_rec::zeroed()),
            extra: Mutex::new(Extra {
                sync,
                qp_init_attr: None,
                connect: Vec::new(),
            }),
        }));
        // SAFETY: the allocation just made.
        let w = unsafe { &*id };
        w.core.set_user(id as usize);
        w.refresh();
        live::insert(Kind::CmId, id);
        id
    }

    /// The id behind an `rdma_cm_id *`; `None` for NULL, a foreign pointer or a
    /// destroyed id (nothing is read through it then).
    ///
    /// # Safety
    /// `p` is any pointer; a live id of this module is not destroyed while the returned
    /// reference is used.
    pub unsafe fn from_raw<'a>(p: *mut rdma_cm_id) -> Option<&'a Id> {
        if !live::contains(Kind::CmId, p) {
            return None;
        }
        // SAFETY: the registry holds only Ids not yet freed (C struct first).
        Some(unsafe { &*p.cast::<Id>() })
    }

    /// The public struct (shared with the application, which reads and writes it).
    pub fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    /// The pointer handed to C.
    pub fn as_ptr(&self) -> *mut rdma_cm_id {
        (self as *const Id).cast_mut().cast()
    }

    /// The core id.
    pub fn core(&self) -> &CmId {
        &self.core
    }

    /// The rest of the id's state.
    pub fn extra(&self) -> MutexGuard<'_, Extra> {
        self.extra.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The private channel of a synchronous id.
    pub fn sync_channel(&self) -> Option<Arc<Chan>> {
        self.extra().sync.clone()
    }

    /// Whether the id's QP type (the public field, as librdmacm reads it) is UD.
    pub fn is_ud(&self) -> bool {
        // SAFETY: a field of our live allocation.
        unsafe { (*self.c()).qp_type == IBV_QPT_UD }
    }

    /// Updates the public fields from the core id, as librdmacm does after each call by
    /// querying the kernel: `verbs` and `pd` (the CM's context and PD) once the id's
    /// address names the device, `port_num`, the source and destination addresses, the
    /// GIDs and P_Key, and the path record once the route is resolved.
    pub fn refresh(&self) {
        let c = self.c();
        let core = &self.core;
        if core.has_device() {
            let ctx = super::context::cm_context();
            // SAFETY: fields of our live allocation; the application only reads these.
            unsafe {
                if !ctx.is_null() && (*c).verbs.is_null() {
                    (*c).verbs = ctx;
                    (*c).port_num = 1;
                    if (*c).pd.is_null() {
                        (*c).pd = super::context::cm_pd();
                    }
                }
            }
        }
        if let Some(a) = core.src_addr() {
            // SAFETY: the 128-byte union of our allocation.
            unsafe { write_sockaddr((&raw mut (*c).route.addr.src.src_storage).cast(), a) };
        }
        if let Some(a) = core.dst_addr() {
            // SAFETY: as above.
            unsafe { write_sockaddr((&raw mut (*c).route.addr.dst.dst_storage).cast(), a) };
        }
        let r = core.route();
        let ib = rdma_ib_addr {
            sgid: crate::conv::gid(r.sgid),
            dgid: crate::conv::gid(r.dgid),
            pkey: r.pkey.to_be(),
        };
        // SAFETY: fields of our live allocation.
        unsafe { (*c).route.addr.addr.ibaddr = ib };
        if r.num_paths > 0 {
            let mut p = ibv_sa_path_rec::zeroed();
            p.dgid = ib.dgid;
            p.sgid = ib.sgid;
            p.flow_label = 0;
            p.hop_limit = r.hop_limit;
            p.traffic_class = r.traffic_class;
            p.reversible = 1;
            p.numb_path = 1;
            p.pkey = ib.pkey;
            p.mtu_selector = 2;
            p.mtu = r.mtu.raw() as u8;
            p.rate_selector = 2;
            p.rate = 3; // IBV_RATE_10_GBPS, what the kernel reports for a soft RoCE port
            p.packet_life_time_selector = 2;
            p.packet_life_time = 16; // the kernel's CMA_IBOE_PACKET_LIFETIME
            let path = self.path.get();
            // SAFETY: our allocation; `path_rec` points at it for the id's life.
            unsafe {
                path.write(p);
                (*c).route.path_rec = path;
                (*c).route.num_paths = r.num_paths as c_int;
            }
        }
    }

    /// Acknowledges the event parked in `id->event` (synchronous ids), if any.
    pub fn ack_parked(&self) {
        let c = self.c();
        // SAFETY: field of our allocation; only the id's owner touches `event`.
        let ev = unsafe { core::mem::replace(&mut (*c).event, null_mut()) };
        // SAFETY: `event` only ever holds events of this module.
        unsafe { Ev::free(ev) };
    }

    /// librdmacm's `ucma_complete`: for a synchronous id, acknowledges the parked event,
    /// waits for the next one on the private channel and parks it in `id->event`;
    /// REJECTED is `ECONNREFUSED`, another non-zero status its errno (`-status`, or the
    /// positive status itself). Returns 0 or -1 with `errno`. Asynchronous ids: 0.
    pub fn complete(&self) -> c_int {
        let Some(ch) = self.sync_channel() else {
            return 0;
        };
        self.ack_parked();
        let ev = match ch.core().get_event() {
            Ok(ev) => ev,
            Err(e) => return fail(&e),
        };
        let ev = match deliver(ev, Chan::as_ptr(&ch)) {
            Ok(ev) => ev,
            Err(e) => return minus_one_errno(e),
        };
        // SAFETY: field of our allocation; `ev` is a live event of this module.
        let (kind, status) = unsafe {
            (*self.c()).event = ev;
            ((*ev).event, (*ev).status)
        };
        match status {
            0 => 0,
            _ if kind == RDMA_CM_EVENT_REJECTED => minus_one_errno(libc::ECONNREFUSED),
            s if s < 0 => minus_one_errno(-s),
            s => minus_one_errno(s),
        }
    }

    /// Frees the wrapper (`rdma_destroy_id`, after the core id is destroyed).
    ///
    /// # Safety
    /// `p` is a live id of this module, given up by the caller.
    pub unsafe fn free(p: *mut Id) {
        // Out of the registry before it is freed (of two racing frees, one frees).
        if live::remove(Kind::CmId, p) {
            // SAFETY: caller contract: allocated by Box in `create`.
            let w = unsafe { Box::from_raw(p) };
            w.core.set_user(0);
        }
    }
}

/// The port space of a raw `enum rdma_port_space`, and the QP type the kernel gives an
/// id of it (`ucma_get_qp_type`: TCP → RC, UDP and IPoIB → UD, IB → the one asked for).
pub fn ps_and_qp_type(ps: rdma_port_space, qp_type: u32) -> Result<(PortSpace, QpType), c_int> {
    let space = PortSpace::from_raw(ps).ok_or(libc::EINVAL)?;
    let t = match space {
        PortSpace::Tcp => QpType::Rc,
        PortSpace::Udp | PortSpace::Ipoib => QpType::Ud,
        PortSpace::Ib => QpType::from_raw(qp_type).ok_or(libc::EINVAL)?,
    };
    Ok((space, t))
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// `struct rdma_cm_event` and the core event (which owns the private data).
#[repr(C)]
pub struct Ev {
    c: rdma_cm_event,
    core: Event,
}

impl Ev {
    /// Frees (acknowledges) an event; NULL is ignored. Returns false (and reads nothing)
    /// for a foreign pointer or an event already freed.
    ///
    /// # Safety
    /// `p` is any pointer; a live event of this module is given up by the caller.
    pub unsafe fn free(p: *mut rdma_cm_event) -> bool {
        if p.is_null() {
            return true;
        }
        if !live::remove(Kind::CmEvent, p) {
            return false;
        }
        // SAFETY: a live event (it was in the registry), allocated by Box in `deliver`;
        // dropping the core event acknowledges it.
        drop(unsafe { Box::from_raw(p.cast::<Ev>()) });
        true
    }
}

/// The C id of core id `core`, creating it for a connection request's new id: that id
/// inherits the listener's `context` and `channel`; the id of a synchronous listener's
/// request is synchronous itself (its own private channel, as librdmacm migrates it).
/// `from` is the C channel the event came from (for an id met without a listener,
/// which does not happen but is handled).
fn c_id_of(
    core: &CmId,
    listen: Option<&CmId>,
    from: *mut rdma_event_channel,
) -> Result<*mut Id, c_int> {
    let user = core.user();
    if user != 0 {
        return Ok(user as *mut Id);
    }
    // SAFETY: the user word of a core id is 0 or a live Id of this module.
    let parent = listen.and_then(|l| unsafe { (l.user() as *mut Id).as_ref() });
    let (channel, context, sync) = match parent {
        Some(p) => {
            // SAFETY: field reads of the listener's live wrapper.
            let (pch, pctx) = unsafe { ((*p.c()).channel, (*p.c()).context) };
            if p.sync_channel().is_some() {
                let ch = Chan::new()?;
                core.migrate(ch.core()).map_err(|e| e.c_errno())?;
                (null_mut(), pctx, Some(ch))
            } else {
                (pch, pctx, None)
            }
        }
        None => (from, core.context() as *mut c_void, None),
    };
    let (ps, qp_type) = match parent {
        // SAFETY: as above.
        Some(p) => unsafe { ((*p.c()).ps, (*p.c()).qp_type) },
        None => (core.ps() as u32, core.qp_type().raw()),
    };
    Ok(Id::create(
        core.clone(),
        channel,
        sync,
        context,
        ps,
        qp_type,
    ))
}

/// Turns a retrieved core event into the C event (`rdma_get_cm_event`), after bringing
/// the public fields of its id up to date. `from` is the C channel it came from.
pub fn deliver(core: Event, from: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, c_int> {
    let id = c_id_of(&core.id, core.listen_id.as_ref(), from)?;
    // SAFETY: `id` is a live wrapper: its core id's events are being delivered, and an
    // id is destroyed only once its retrieved events are acknowledged.
    let w = unsafe { &*id };
    w.refresh();
    let listen = core
        .listen_id
        .as_ref()
        .map_or(null_mut(), |l| l.user() as *mut rdma_cm_id);
    let mut c = rdma_cm_event::zeroed();
    c.id = id.cast();
    c.listen_id = listen;
    c.event = core.kind as u32;
    c.status = core.status;
    let ud = core.kind != EventKind::Rejected && core.id.qp_type() == QpType::Ud;
    let mut ev = Box::new(Ev {
        c,
        core,
    });
    if ud {
        let u = &ev.core.ud;
        ev.c.param.ud = rdma_ud_param {
            private_data: pdata_ptr(&u.private_data),
            private_data_len: u.private_data.len().min(255) as u8,
            ah_attr: crate::conv::ah_attr_to_c(&u.ah_attr),
            qp_num: u.qp_num,
            qkey: u.qkey,
        };
        if matches!(ev.core.kind, EventKind::MulticastJoin | EventKind::MulticastError) {
            // librdmacm's `ucma_process_join`: the join's context, no length.
            ev.c.param.ud.private_data = ev.core.mc_context as *const c_void;
            ev.c.param.ud.private_data_len = 0;
        }
    } else {
        let p = &ev.core.conn;
        ev.c.param.conn = rdma_conn_param {
            private_data: pdata_ptr(&p.private_data),
            private_data_len: p.private_data.len().min(255) as u8,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            qp_num: p.qp_num,
        };
    }
    let ev = Box::into_raw(ev);
    live::insert(Kind::CmEvent, ev);
    Ok(ev.cast())
}

fn pdata_ptr(v: &[u8]) -> *const c_void {
    if v.is_empty() {
        core::ptr::null()
    } else {
        v.as_ptr().cast()
    }
}

// ---------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------

/// A C socket address as a Rust one: `AF_INET` and `AF_INET6` only (librdmacm without
/// `AF_IB` support, as on every RoCE host, refuses the others with `EINVAL`).
///
/// # Safety
/// `p` is NULL or points at a socket address of the size its family implies.
pub unsafe fn sockaddr_from_c(p: *const sockaddr) -> Result<SocketAddr, c_int> {
    // SAFETY: caller contract.
    let Some(sa) = (unsafe { p.as_ref() }) else {
        return Err(libc::EINVAL);
    };
    match c_int::from(sa.sa_family) {
        AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in (caller contract).
            let s = unsafe { &*p.cast::<sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(s.sin_port),
            )))
        }
        AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6 (caller contract).
            let s = unsafe { &*p.cast::<sockaddr_in6>() };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        _ => Err(libc::EINVAL),
    }
}

/// Writes `a` as a `sockaddr_in`/`sockaddr_in6` into a 128-byte `sockaddr_storage`
/// (the rest zeroed).
///
/// # Safety
/// `dst` is valid for writing a `sockaddr_storage`.
pub unsafe fn write_sockaddr(dst: *mut sockaddr_storage, a: SocketAddr) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: sockaddr_storage = unsafe { core::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let s = unsafe { &mut *(&raw mut st).cast::<sockaddr_in>() };
            s.sin_family = AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let s = unsafe { &mut *(&raw mut st).cast::<sockaddr_in6>() };
            s.sin6_family = AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_flowinfo = v6.flowinfo().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
        }
    }
    // SAFETY: caller contract.
    unsafe { dst.write(st) };
}
