//! The connection id as a value (`struct rdma_cm_id`): its number, port space, QP type,
//! the application's words and its acknowledgement counters. The verbs on an id
//! (`id.rs`) are the engine's; this file is what every layer may hold and name.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rverbs::{Gid, Mtu, QpType};

/// Port spaces (`enum rdma_port_space`): separate namespaces of ports. The TCP space
/// carries connected (RC) services, the UDP space datagram (UD) services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum PortSpace {
    /// RDMA_PS_IPOIB.
    Ipoib = 0x0002,
    /// RDMA_PS_IB (any QP type).
    Ib = 0x013F,
    /// RDMA_PS_TCP (RC).
    Tcp = 0x0106,
    /// RDMA_PS_UDP (UD).
    Udp = 0x0111,
}

impl PortSpace {
    /// The port space of a `enum rdma_port_space` value.
    pub fn from_raw(v: u32) -> Option<PortSpace> {
        Some(match v {
            0x0002 => PortSpace::Ipoib,
            0x013F => PortSpace::Ib,
            0x0106 => PortSpace::Tcp,
            0x0111 => PortSpace::Udp,
            _ => return None,
        })
    }

    /// Whether connections of this space are datagram services (SIDR instead of
    /// REQ/REP/RTU).
    pub fn is_datagram(self) -> bool {
        matches!(self, PortSpace::Udp | PortSpace::Ipoib)
    }
}

/// What an id has resolved about its path (`struct rdma_route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Source GID (`route.addr.addr.ibaddr.sgid`).
    pub sgid: Gid,
    /// Destination GID.
    pub dgid: Gid,
    /// The source GID's index in the device's table.
    pub sgid_index: u8,
    /// P_Key.
    pub pkey: u16,
    /// Path MTU.
    pub mtu: Mtu,
    /// Hop limit of the GRH.
    pub hop_limit: u8,
    /// Traffic class (from the TOS option).
    pub traffic_class: u8,
    /// Number of path records (1 once the route is resolved).
    pub num_paths: u32,
}

pub(crate) struct IdShared {
    pub(crate) number: u64,
    /// The device slot of the engine the id belongs to (`engine::engine_of`).
    pub(crate) slot: usize,
    pub(crate) ps: PortSpace,
    pub(crate) qp_type: QpType,
    context: AtomicUsize,
    user: AtomicUsize,
    pub(crate) acks: Arc<AckCount>,
}

/// A connection id. Cloning shares the id; [`CmId::destroy`] ends it for every clone.
#[derive(Clone)]
pub struct CmId {
    pub(crate) shared: Arc<IdShared>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId").field("number", &self.shared.number).field("ps", &self.shared.ps).finish()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl CmId {
    pub(crate) fn with_number(number: u64, slot: usize, ps: PortSpace, qp_type: QpType, context: usize) -> CmId {
        CmId {
            shared: Arc::new(IdShared {
                number,
                slot,
                ps,
                qp_type,
                context: AtomicUsize::new(context),
                user: AtomicUsize::new(0),
                acks: Arc::new(AckCount::default()),
            }),
        }
    }
    /// The id's number (unique in this process for its life).
    pub fn number(&self) -> u64 {
        self.shared.number
    }

    /// The port space.
    pub fn ps(&self) -> PortSpace {
        self.shared.ps
    }

    /// The QP type.
    pub fn qp_type(&self) -> QpType {
        self.shared.qp_type
    }

    /// The application's cookie (`id->context`).
    pub fn context(&self) -> usize {
        self.shared.context.load(Ordering::Acquire)
    }

    /// Sets the application's cookie.
    pub fn set_context(&self, v: usize) {
        self.shared.context.store(v, Ordering::Release)
    }

    /// A word for the layer above (the C library keeps its `rdma_cm_id` here).
    pub fn user(&self) -> usize {
        self.shared.user.load(Ordering::Acquire)
    }

    /// Sets the layer-above word.
    pub fn set_user(&self, v: usize) {
        self.shared.user.store(v, Ordering::Release)
    }
}

/// Acknowledgement counters of an id (`events_reported`/`events_completed` of
/// librdmacm): destroy and migrate wait until they are equal.
#[derive(Debug, Default)]
pub(crate) struct AckCount {
    counts: Mutex<(u64, u64)>,
    changed: Condvar,
}

impl AckCount {
    pub(crate) fn retrieved(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
    }

    pub(crate) fn acked(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
        self.changed.notify_all();
    }

    /// Blocks until every retrieved event was acknowledged.
    pub(crate) fn wait_all_acked(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        while c.0 != c.1 {
            c = self.changed.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
}
