//! The built-in soft device, its attributes, its port and its GID table.
//!
//! Rule: ibv_get_device_list(3): every process sees the device `rverbs0`; it needs no
//! configuration, kernel module or privilege.
//! Rule: ibv_query_port(3): one port (1), ACTIVE, link layer Ethernet (RoCE v2, like
//! Soft-RoCE); the GID table is index 0 = link-local `fe80::` + EUI-64, then one
//! IPv4-mapped GID `::ffff:a.b.c.d` per IPv4 address of the host, then one GID per other
//! IPv6 address (not loopback, not link-local) (as the kernel's `roce_gid_mgmt.c` fills
//! rxe's table).

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::config::DeviceConfig;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::engine::Engine;
use crate::mr::endpoint::Endpoint;
use crate::shm::registry::Registry;
use crate::sys;
use cap_flags::{LINK_LAYER_ETHERNET, PORT_CM_SUP};
use crate::limits;

/// IEEE OUI reported as `vendor_id`: not Mellanox (0x02c9) nor Amazon (0x1d0f), so
/// applications that switch on vendor ids (perftest, pyverbs) take their generic paths.
pub const VENDOR_ID: u32 = 0x52_5645;

/// Frequency of the device clock in kHz (`hca_core_clock`): the clock counts nanoseconds.
pub const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;

pub(crate) use crate::gid::{Gid, GidEntry, GidType};

/// Device attributes (`struct ibv_device_attr` and the `_ex` additions rverbs uses).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (EUI-64), host byte order.
    pub node_guid: u64,
    /// System image GUID, host byte order.
    pub sys_image_guid: u64,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor OUI.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// `IBV_DEVICE_*` capability flags.
    pub device_cap_flags: u32,
    /// The 64-bit `device_cap_flags_ex` of ibv_query_device_ex(3): the bits above plus
    /// the kernel's `IB_UVERBS_DEVICE_*` extensions (ATOMIC_WRITE, FLUSH).
    pub device_cap_flags_ex: u64,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Scatter/gather entries per RDMA READ.
    pub max_sge_rd: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Outstanding RDMA READ/atomic as target, per QP.
    pub max_qp_rd_atom: u32,
    /// Responder resources in all.
    pub max_res_rd_atom: u32,
    /// Outstanding RDMA READ/atomic as initiator, per QP.
    pub max_qp_init_rd_atom: u32,
    /// Atomic guarantees (`IBV_ATOMIC_HCA`).
    pub atomic_cap: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// QPs attached to multicast groups in all.
    pub max_total_mcast_qp_attach: u32,
    /// Address handles.
    pub max_ah: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Work requests per SRQ.
    pub max_srq_wr: u32,
    /// Scatter/gather entries per SRQ work request.
    pub max_srq_sge: u32,
    /// P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Device clock frequency in kHz (`ibv_device_attr_ex.hca_core_clock`).
    pub hca_core_clock: u64,
    /// Largest inline data per send work request.
    pub max_inline_data: u32,
}

pub mod cap_flags {
    //! The flag and code values of the device and port attributes (ibv_query_device(3),
    //! ibv_query_port(3)): the `IBV_DEVICE_*` capability bits rverbs sets in
    //! [`DeviceAttr::device_cap_flags`](crate::device::DeviceAttr::device_cap_flags) and
    //! [`device_cap_flags_ex`](crate::device::DeviceAttr::device_cap_flags_ex) (verbs.h `enum
    //! ibv_device_cap_flags`), the port's `IBV_PORT_*` capability bits in
    //! [`PortAttr::port_cap_flags`](crate::device::PortAttr::port_cap_flags), and its link layer.
    //!
    //! A public namespace because these fields are raw words, as in `struct ibv_device_attr`:
    //! an application tests a capability (memory windows, XRC, FLUSH, ATOMIC_WRITE) against
    //! these constants.

    /// P_Key violation counter.
    pub const BAD_PKEY_CNTR: u32 = 1 << 1;
    /// Q_Key violation counter.
    pub const BAD_QKEY_CNTR: u32 = 1 << 2;
    /// The UD address vector's port is enforced.
    pub const UD_AV_PORT_ENFORCE: u32 = 1 << 6;
    /// PORT_ACTIVE events.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// System image GUID is meaningful.
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// RC responder generates RNR NAKs.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// SRQs can be resized.
    pub const SRQ_RESIZE: u32 = 1 << 13;
    /// Memory windows.
    pub const MEM_WINDOW: u32 = 1 << 17;
    /// Type 2B memory windows (bound to one QP).
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
    /// XRC domains and QPs.
    pub const XRC: u32 = 1 << 20;
    /// `IB_UVERBS_DEVICE_FLUSH_GLOBAL` (device_cap_flags_ex).
    pub const EX_FLUSH_GLOBAL: u64 = 1 << 38;
    /// `IB_UVERBS_DEVICE_ATOMIC_WRITE` (device_cap_flags_ex).
    pub const EX_ATOMIC_WRITE: u64 = 1 << 40;

    /// `IBV_PORT_CM_SUP`: the port supports connection management
    /// ([`PortAttr::port_cap_flags`](crate::device::PortAttr::port_cap_flags)).
    pub const PORT_CM_SUP: u32 = 1 << 16;

    /// `IBV_LINK_LAYER_ETHERNET`, the port's link layer
    /// ([`PortAttr::link_layer`](crate::device::PortAttr::link_layer)).
    pub const LINK_LAYER_ETHERNET: u8 = 2;
}

/// Port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PortState {
    /// No state change.
    Nop = 0,
    /// Down.
    Down = 1,
    /// Initialising.
    Init = 2,
    /// Armed.
    Armed = 3,
    /// Active.
    Active = 4,
    /// Active, deferred.
    ActiveDefer = 5,
}

/// Port attributes (`struct ibv_port_attr`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Largest MTU (`enum ibv_mtu`).
    pub max_mtu: rverbs_proto::verbs::Mtu,
    /// Active MTU.
    pub active_mtu: rverbs_proto::verbs::Mtu,
    /// GID table entries.
    pub gid_tbl_len: u32,
    /// `IBV_PORT_*` capability flags.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// P_Key violations seen.
    pub bad_pkey_cntr: u32,
    /// Q_Key violations seen.
    pub qkey_viol_cntr: u32,
    /// P_Key table entries.
    pub pkey_tbl_len: u16,
    /// LID (0 on Ethernet).
    pub lid: u16,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active width (`IBV_WIDTH_*`; 1 = 1X).
    pub active_width: u8,
    /// Active speed (`IBV_SPEED_*`; 32 = EDR).
    pub active_speed: u8,
    /// Physical state (5 = LinkUp).
    pub phys_state: u8,
    /// Link layer (`IBV_LINK_LAYER_ETHERNET` = 2).
    pub link_layer: u8,
    /// Port flags.
    pub flags: u8,
    /// Capability flags, second word.
    pub port_cap_flags2: u16,
}

/// The process-wide state of the built-in device: the engine's state ([`Engine`]: this
/// process's endpoint, the memory layer's [`Endpoint`], and the live CQs, QPs and SRQs)
/// and what only the layers above it use.
///
/// The device dereferences to its engine, which dereferences to its endpoint, so the
/// verbs objects read those parts through the device (`dev.qps`, `dev.keys`, `dev.ep()`);
/// the layers below are handed the `Engine` or the `Endpoint` itself and never name the
/// device. A context's core carries the device for the verbs layer ([`of`]); a QP is
/// handed the device as the engine's `qp::device::QpDevice`, and each send queue a path
/// holding what the transports use (the engine, `net`, `mcast`).
pub(crate) struct DeviceInner {
    /// The engine's share: this process's endpoint and its live objects.
    pub(crate) engine: Engine,
    pub(crate) name: &'static str,
    pub(crate) node_guid: u64,
    pub(crate) mcast: crate::mcast::Groups,
    /// The network transport's sockets (RoCEv2 over UDP), if any address could be bound.
    pub(crate) net: Option<crate::transport::udp::Net>,
}

impl crate::progress::NetRx for DeviceInner {
    fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        // Sockets that only send are polled too (nothing arrives on them but stray
        // datagrams, which the receive path checks and drops); the index stays the
        // socket's.
        self.net.as_ref().map(|n| n.socks().iter().map(|s| s.fd()).collect()).unwrap_or_default()
    }

    fn readable(&'static self, index: usize) {
        if let Some(net) = &self.net {
            crate::transport::dispatch::readable(&self.engine, net, &self.mcast, index);
        }
    }

    fn poll_timeout(&self) -> Option<std::time::Instant> {
        let net = self.net.as_ref()?.poll_timeout();
        // Held ACKs (docs/network.md, "Coalesced ACKs") leave alone once they waited long.
        match (net, self.engine.acks_due.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&self, now: std::time::Instant) {
        if let Some(net) = &self.net {
            net.handle_timeout(now);
            crate::transport::net::send_due_acks(&self.engine, net, Some(now), true);
        }
    }

    fn peer_died(&self) {
        if let Some(net) = &self.net {
            net.peer_died();
        }
    }

    fn receive_now(&'static self) {
        if let Some(net) = &self.net {
            crate::transport::dispatch::receive_now(&self.engine, net, &self.mcast);
        }
    }

    fn send_held_acks(&self) {
        if let Some(net) = &self.net {
            crate::transport::net::send_due_acks(&self.engine, net, None, true);
        }
    }
}

impl std::ops::Deref for DeviceInner {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

pub(crate) use crate::sys::{process_generation, GENERATIONS};

/// A device of the process: its settings, and its state in each process generation (a
/// forked child starts its own endpoint, as a process does).
pub(crate) struct Slot {
    config: DeviceConfig,
    /// The device [`crate::devices`] lists (its generation `g` has device slot `g`); else one
    /// [`DeviceConfig::open`] made, which takes a free device slot per generation.
    listed: bool,
    gens: [OnceLock<DeviceInner>; GENERATIONS],
}

/// The device [`crate::devices`] lists, with the settings of the `RVERBS_*` variables.
fn listed() -> &'static Slot {
    static LISTED: OnceLock<&'static Slot> = OnceLock::new();
    LISTED.get_or_init(|| Slot::new(DeviceConfig::from_env(), true))
}

/// Every device of the process, for what runs at exit.
static ALL: std::sync::Mutex<Vec<&'static Slot>> = std::sync::Mutex::new(Vec::new());

impl Slot {
    fn new(config: DeviceConfig, listed: bool) -> &'static Slot {
        let s: &'static Slot = Box::leak(Box::new(Slot { config, listed, gens: [const { OnceLock::new() }; GENERATIONS] }));
        ALL.lock().unwrap_or_else(|p| p.into_inner()).push(s);
        s
    }

    /// The device's state in this process generation, started on first use.
    ///
    /// Errors (a configured device only; the listed one falls back to a private endpoint):
    /// `Error::Exhausted` once the process's device slots are taken (`sys::MAX_DEVICES`),
    /// or the errno of claiming an endpoint in the runtime directory.
    fn inner(&'static self) -> Result<&'static DeviceInner> {
        let cell = &self.gens[process_generation()];
        if let Some(d) = cell.get() {
            return Ok(d);
        }
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = cell.get() {
            return Ok(d);
        }
        crate::sys::count_forks();
        let slot = if self.listed {
            crate::sys::default_device_slot()
        } else {
            crate::sys::configured_device_slot().ok_or(Error::Exhausted { what: "devices in this process" })?
        };
        let _ = cell.set(DeviceInner::new(&self.config, slot, self.listed)?);
        let d: &'static DeviceInner = cell.get().expect("set under the starting lock");
        // Peers may ring this endpoint's doorbell from now on: its reader must run. It is
        // given what it serves (the progress thread never reaches up to the device).
        let net: Option<&'static dyn crate::progress::NetRx> = d.net.as_ref().map(|_| d as _);
        crate::progress::start(&d.endpoint, &d.qps, net, self.config.busy_poll);
        if d.net.is_some() {
            static AT_EXIT: std::sync::Once = std::sync::Once::new();
            AT_EXIT.call_once(|| crate::sys::at_exit(send_held_acks_at_exit));
        }
        Ok(d)
    }
}

/// The listed device's state in this process generation (the device of
/// [`crate::qp1::Qp1::open`], [`endpoint_dir`], and the crate's unit tests).
pub(crate) fn device() -> &'static DeviceInner {
    listed().inner().expect("the listed device falls back to a private endpoint")
}

/// At exit (atexit(3)): the ACKs this process still holds leave (docs/network.md,
/// "Coalesced ACKs"); a responder another thread holds locked is skipped, never waited
/// for. Nothing unwinds out of it (a log line of a failed send may find the thread-locals
/// of the log already gone).
extern "C" fn send_held_acks_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Ok(all) = ALL.try_lock() else { return };
        for slot in all.iter() {
            if let Some(d) = slot.gens[process_generation()].get() {
                if let Some(net) = &d.net {
                    crate::transport::net::send_due_acks(&d.engine, net, None, false);
                }
            }
        }
    });
}

/// The hardware counters of every live endpoint (process) of the device in the runtime
/// directory (`RVERBS_RUNTIME_DIR`, docs/environment.md), lowest endpoint number first,
/// read from the segments their owners count in (docs/device.md, "Hardware counters"). Does not open the
/// device: the calling process is listed only if it did (its own are also
/// [`crate::Context::counters`]). An endpoint still starting, or gone while it was read,
/// is left out (as is one whose counters cannot be read: a process of a version
/// without them); a runtime directory that cannot be read lists nothing.
pub fn host_counters() -> Vec<crate::shm::counters::EndpointCounters> {
    counters_under(&crate::shm::runtime_dir())
}

fn counters_under(root: &std::path::Path) -> Vec<crate::shm::counters::EndpointCounters> {
    // Starting, gone meanwhile, or of a version without counters: left out.
    read_live_endpoints(root, crate::shm::counters::read, |ep, pid, counters| crate::shm::counters::EndpointCounters { ep, pid, counters })
}

/// What `read` finds in the directory of each live endpoint under `root` (lowest
/// endpoint number first), made into a record with the endpoint's number and pid by
/// `record`; an endpoint whose read fails is left out.
fn read_live_endpoints<T, R>(
    root: &std::path::Path,
    read: impl Fn(&std::path::Path) -> Result<T>,
    record: impl Fn(u32, u32, T) -> R,
) -> Vec<R> {
    crate::shm::registry::live_endpoints(root)
        .into_iter()
        .filter_map(|(ep, pid)| read(&crate::shm::registry::ep_dir(root, ep)).ok().map(|t| record(ep, pid, t)))
        .collect()
}

/// The live QPs' and CQs' statistics of every live endpoint of the device in the runtime directory
/// that counts them (`RVERBS_STATS=1`, `DeviceConfig::stats`; docs/device.md, "Per-QP and
/// per-CQ statistics"), lowest endpoint number first, as [`host_counters`] reads the
/// counters: without opening the device, leaving out an endpoint without statistics.
pub fn host_stats() -> Vec<crate::shm::stats::EndpointStats> {
    stats_under(&crate::shm::runtime_dir())
}

fn stats_under(root: &std::path::Path) -> Vec<crate::shm::stats::EndpointStats> {
    // Statistics off, starting, or gone meanwhile: left out.
    read_live_endpoints(root, crate::shm::stats::read_live, |ep, pid, (qps, cqs)| crate::shm::stats::EndpointStats { ep, pid, qps, cqs })
}

/// The directory of this process's endpoint in the host-wide runtime directory, where
/// its shared segments and FIFOs are (for diagnostics and tests; a forked child gets its
/// own).
pub fn endpoint_dir() -> std::path::PathBuf {
    device().dir.clone()
}

impl DeviceInner {
    /// The device with settings `cfg` in device slot `slot`. `fallback`: if no endpoint
    /// can be claimed in the runtime directory, run on a private one (only in-process
    /// traffic works) rather than fail (the listed device, which every verbs program
    /// opens with no say in its settings).
    fn new(cfg: &'static DeviceConfig, slot: usize, fallback: bool) -> Result<Self> {
        let ifs = sys::interfaces();
        // GID 0 is the link-local GID of the interface whose MAC it is built from, as a
        // RoCE device's default GID belongs to its netdev; with no such interface, it is
        // the loopback's (every GID entry belongs to a netdev on RoCE: tools look the
        // name up from the ifindex).
        let (mac, mac_if) = ifs
            .iter()
            .filter(|i| i.name != "lo")
            .find_map(|i| i.mac.filter(|m| *m != [0; 6]).map(|m| (m, i.name.as_str())))
            .unwrap_or((SYNTHETIC_MAC, "lo"));
        let eui = eui64(mac);
        let mut gids = vec![GidEntry {
            gid: Gid::link_local(eui),
            index: 0,
            port: 1,
            gid_type: GidType::RoceV2,
            ifindex: sys::ifindex(mac_if),
        }];
        // Non-loopback addresses first, so index 1 is the host's "real" address; the
        // loopback address still gets an entry (a container may have nothing else).
        let mut v4: Vec<(bool, Ipv4Addr, String)> = ifs
            .iter()
            .filter_map(|i| i.ipv4.map(|ip| (ip.is_loopback(), ip, i.name.clone())))
            .collect();
        v4.sort_by_key(|(lo, _, _)| *lo);
        v4.dedup_by_key(|(_, ip, _)| *ip);
        for (_, ip, name) in v4 {
            gids.push(GidEntry {
                gid: Gid::from_ipv4(ip),
                index: gids.len() as u32,
                port: 1,
                gid_type: GidType::RoceV2,
                ifindex: sys::ifindex(&name),
            });
        }
        // Then the host's other IPv6 addresses (as a RoCE device lists its netdev's): not
        // loopback (::1 names the host through 127.0.0.1's entry) and not link-local (the
        // first entry is the device's own link-local GID), after the IPv4 entries so that
        // their indices do not depend on IPv6 configuration.
        let mut v6: Vec<(std::net::Ipv6Addr, String)> = ifs
            .iter()
            .filter_map(|i| i.ipv6.map(|ip| (ip, i.name.clone())))
            .filter(|(ip, _)| !ip.is_loopback() && !ip.is_unicast_link_local() && ip.to_ipv4_mapped().is_none())
            .collect();
        v6.dedup_by_key(|(ip, _)| *ip);
        for (ip, name) in v6 {
            if gids.iter().any(|g| g.gid.0 == ip.octets()) {
                continue;
            }
            gids.push(GidEntry {
                gid: Gid(ip.octets()),
                index: gids.len() as u32,
                port: 1,
                gid_type: GidType::RoceV2,
                ifindex: sys::ifindex(&name),
            });
        }
        if let Some(addresses) = &cfg.addresses {
            gids.truncate(1);
            gids.extend(served_gids(addresses, &ifs)?);
        }
        // The port's active MTU: the smallest link among the up, non-loopback interfaces
        // that hold a GID (docs/device.md, "Active MTU"; `limits::port_active_mtu`).
        let mut links: Vec<&str> = ifs
            .iter()
            .filter(|i| i.flags & libc::IFF_UP as u32 != 0 && i.flags & libc::IFF_LOOPBACK as u32 == 0)
            .map(|i| i.name.as_str())
            .collect();
        links.sort_unstable();
        links.dedup();
        let active_mtu = limits::ActiveMtu::new(
            links
                .into_iter()
                .filter(|name| {
                    let ix = sys::ifindex(name);
                    ix != 0 && gids.iter().any(|g| g.ifindex == ix)
                })
                .map(str::to_owned)
                .collect(),
        );
        let watch = move |peer: &std::sync::Arc<crate::shm::registry::Peer>| crate::progress::watch_peer(slot, peer);
        let (reg, dir) = match Registry::claim(&cfg.runtime_dir, !cfg.cma, watch) {
            Ok(r) => {
                let d = r.dir.clone();
                (Some(r), d)
            }
            Err(e) if fallback => {
                tracing::warn!(%e, "no host-wide endpoint: only in-process traffic will work");
                let d = std::env::temp_dir().join(format!("rverbs-private-{}-{slot}", std::process::id()));
                let _ = std::fs::remove_dir_all(&d);
                let _ = std::fs::create_dir_all(&d);
                (None, d)
            }
            Err(e) => return Err(e),
        };
        register_cleanup(&dir);
        if let Some(plan) = &cfg.fault_plan {
            crate::fault_plan::install_for(slot, plan.clone());
        }
        let endpoint = Endpoint::new(reg, dir, slot, cfg.shared_mr, cfg.stats);
        let net = crate::transport::udp::Net::open(&gids, endpoint.counters, cfg, slot);
        if let (Some(net), Some(reg)) = (&net, &endpoint.reg) {
            // Where the owner of an address's RoCEv2 port relays this process's RC/UC
            // packets.
            net.publish(reg);
        }
        Ok(DeviceInner {
            net,
            engine: Engine::new(endpoint, gids, active_mtu),
            name: &cfg.name,
            node_guid: u64::from_be_bytes(eui),
            mcast: Default::default(),
        })
    }

    pub(crate) fn attr(&self) -> DeviceAttr {
        let mut a = self.attr_base();
        a.device_cap_flags_ex = u64::from(a.device_cap_flags)
            | cap_flags::EX_FLUSH_GLOBAL
            | cap_flags::EX_ATOMIC_WRITE;
        a
    }

    fn attr_base(&self) -> DeviceAttr {
        use limits::*;
        DeviceAttr {
            fw_ver: concat!("rverbs ", env!("CARGO_PKG_VERSION")).to_string(),
            node_guid: self.node_guid,
            sys_image_guid: self.node_guid,
            max_mr_size: MAX_MR_SIZE,
            page_size_cap: 0xffff_f000,
            vendor_id: VENDOR_ID,
            vendor_part_id: 1,
            hw_ver: 1,
            max_qp: MAX_QP,
            max_qp_wr: MAX_QP_WR,
            device_cap_flags: cap_flags::BAD_PKEY_CNTR
                | cap_flags::BAD_QKEY_CNTR
                | cap_flags::UD_AV_PORT_ENFORCE
                | cap_flags::PORT_ACTIVE_EVENT
                | cap_flags::SYS_IMAGE_GUID
                | cap_flags::RC_RNR_NAK_GEN
                | cap_flags::SRQ_RESIZE
                | cap_flags::MEM_WINDOW
                | cap_flags::MEM_WINDOW_TYPE_2B
                | cap_flags::XRC,
            device_cap_flags_ex: 0,
            max_sge: MAX_SGE,
            max_sge_rd: MAX_SGE_RD,
            max_cq: MAX_CQ,
            max_cqe: MAX_CQE,
            max_mr: MAX_MR,
            max_pd: MAX_PD,
            max_qp_rd_atom: MAX_QP_RD_ATOM,
            max_res_rd_atom: MAX_RES_RD_ATOM,
            max_qp_init_rd_atom: MAX_QP_RD_ATOM,
            atomic_cap: 1, // IBV_ATOMIC_HCA
            max_mw: MAX_MW,
            max_mcast_grp: MAX_MCAST_GRP,
            max_mcast_qp_attach: MAX_MCAST_QP_ATTACH,
            max_total_mcast_qp_attach: MAX_MCAST_GRP * MAX_MCAST_QP_ATTACH,
            max_ah: MAX_AH,
            max_srq: MAX_SRQ,
            max_srq_wr: MAX_SRQ_WR,
            max_srq_sge: MAX_SRQ_SGE,
            max_pkeys: MAX_PKEYS,
            local_ca_ack_delay: 15,
            phys_port_cnt: crate::limits::PHYS_PORT_CNT,
            hca_core_clock: HCA_CORE_CLOCK_KHZ,
            max_inline_data: MAX_INLINE_DATA,
        }
    }

    /// Port 1's attributes. Rule: after an injected PORT_ERR (or DEVICE_FATAL) the port
    /// reads DOWN with physical state POLLING (2), as rxe's port does while its netdev is
    /// up and its carrier lost (rxe_query_port); ACTIVE and LinkUp (5) otherwise
    /// (docs/fault-injection.md).
    pub(crate) fn port_attr(&self) -> PortAttr {
        let down = crate::fault_plan::port_down(self.endpoint.slot);
        PortAttr {
            state: if down { PortState::Down } else { PortState::Active },
            max_mtu: limits::MAX_MTU,
            active_mtu: self.engine.active_mtu.refresh(),
            gid_tbl_len: self.gids.len() as u32,
            port_cap_flags: PORT_CM_SUP,
            max_msg_sz: limits::MAX_MSG_SZ,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: limits::MAX_PKEYS,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 1,
            active_speed: 32,
            phys_state: if down { 2 } else { 5 },
            link_layer: LINK_LAYER_ETHERNET,
            flags: 0,
            port_cap_flags2: 0,
        }
    }
}

/// Removes the endpoint directory when the process exits normally, and the directories
/// of dead endpoints with it: a process killed before any peer reached it (so no peer
/// watched its pidfd) leaves nothing once the last process of the device has exited
/// normally. (If that last process is killed too, what it leaves is reclaimed by the
/// next process that claims an endpoint: there is no daemon.)
/// A child forked after the device started shares the parent's endpoint and must leave
/// its directory alone.
fn register_cleanup(dir: &std::path::Path) {
    static DIRS: std::sync::Mutex<Vec<(std::path::PathBuf, u32)>> = std::sync::Mutex::new(Vec::new());
    static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    extern "C" fn cleanup() {
        if let Ok(g) = DIRS.lock() {
            for (d, _) in g.iter().filter(|(_, pid)| *pid == std::process::id()) {
                let _ = std::fs::remove_dir_all(d);
                if let Some(root) = d.parent() {
                    crate::shm::registry::Registry::reclaim_dead(root);
                }
            }
        }
    }
    // A forked child that starts its own devices drops the parent's entries (inherited
    // through fork) for its own directories.
    let mut dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
    dirs.retain(|(_, pid)| *pid == std::process::id());
    dirs.push((dir.to_owned(), std::process::id()));
    drop(dirs);
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        crate::sys::at_exit(cleanup);
    }
}

/// The GID entries of a device that serves exactly `addresses` (`DeviceConfig::addresses`),
/// from index 1, each on the interface of `ifs` that holds it, or on the loopback
/// interface for a loopback address none holds (the kernel delivers all of 127.0.0.0/8
/// locally).
fn served_gids(addresses: &[std::net::IpAddr], ifs: &[sys::IfAddr]) -> Result<Vec<GidEntry>> {
    if addresses.is_empty() {
        return Err(Error::invalid("DeviceConfig::addresses", Rule::NoAddresses));
    }
    let mut out = Vec::new();
    for (i, ip) in addresses.iter().enumerate() {
        let holder = ifs.iter().find(|f| f.ipv4.map(std::net::IpAddr::V4) == Some(*ip) || f.ipv6.map(std::net::IpAddr::V6) == Some(*ip));
        let ifname = match holder {
            Some(f) => f.name.as_str(),
            None if ip.is_loopback() => "lo",
            None => return Err(Error::Os(std::io::Error::from_raw_os_error(libc::EADDRNOTAVAIL))),
        };
        out.push(GidEntry {
            gid: Gid::from_ip(*ip),
            index: i as u32 + 1,
            port: 1,
            gid_type: GidType::RoceV2,
            ifindex: sys::ifindex(ifname),
        });
    }
    Ok(out)
}

/// A locally administered MAC used when the host has no interface with one.
const SYNTHETIC_MAC: [u8; 6] = [0x02, 0x52, 0x56, 0x45, 0x52, 0x42];

/// The modified EUI-64 of a MAC: flip the universal/local bit, insert `ff:fe`
/// (RFC 4291 appendix A; the kernel's default RoCE GID).
fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}


/// A device as listed by [`crate::devices`], or opened with [`DeviceConfig::open`].
///
/// Rule: ibv_get_device_list(3): devices stay valid after the list is freed; a device
/// lives for the whole process. The handle names the device, not one process
/// generation's state: opened in a child that `fork` created, it opens the child's own
/// endpoint (a handle listed before the fork stays usable, as an `ibv_device` from before
/// `fork` is in rdma-core).
#[derive(Clone, Copy)]
pub struct Device {
    at: At,
}

/// Which device a [`Device`] names: a soft one, or (feature `rdma-core`) one of
/// libibverbs' (listed once and kept by `backend`).
#[derive(Clone, Copy)]
enum At {
    Soft(&'static Slot),
    #[cfg(feature = "rdma-core")]
    Native(&'static dyn NativeDevice),
}

/// The implementation behind a [`Device`] and everything opened on it
/// ([`Device::backend`], [`Context::backend`](crate::Context::backend)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// rverbs' own soft device, in this process.
    Soft,
    /// A device of libibverbs (mlx5, rxe, siw, efa, … or rverbs' drop-in
    /// `libibverbs.so.1`) through the `rdma-core` backend (feature `rdma-core`).
    RdmaCore,
}

/// A device of libibverbs' list as this layer sees it (the rdma-core backend's device
/// implements it): its name and GUID, and a context opened on it.
#[cfg(feature = "rdma-core")]
pub(crate) trait NativeDevice: Send + Sync {
    /// ibv_get_device_name(3).
    fn name(&self) -> &str;
    /// ibv_get_device_guid(3), in host order.
    fn guid(&self) -> u64;
    /// ibv_open_device(3): the backend's context, as the public `Context` holds it.
    fn open(&self) -> Result<std::sync::Arc<dyn crate::mr::native::NativeContext>>;
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            At::Soft(slot) => f.debug_struct("Device").field("name", &self.name()).field("runtime_dir", &slot.config.runtime_dir).finish(),
            #[cfg(feature = "rdma-core")]
            At::Native(d) => f.debug_struct("Device").field("name", &d.name()).field("backend", &Backend::RdmaCore).finish(),
        }
    }
}

impl Device {
    /// The listed soft device ([`crate::devices`] without `RVERBS_BACKEND`), started.
    pub(crate) fn listed() -> Result<Device> {
        let slot = listed();
        slot.inner()?;
        Ok(Device { at: At::Soft(slot) })
    }

    /// A device of libibverbs' list, kept for the process.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(dev: &'static dyn NativeDevice) -> Device {
        Device { at: At::Native(dev) }
    }
}

impl DeviceConfig {
    /// Starts a device with these settings, beside the listed one and any other
    /// (docs/device.md, "Several devices in one process"): an endpoint of its own in the
    /// runtime directory (so devices of one directory reach each other's QPs, in one
    /// process as across processes), its own progress thread, its own network sockets
    /// (where another device of the host owns an address's RoCEv2 port, it sends from an
    /// ephemeral port and receives through the owner, as a second process does). The
    /// device lives as long as the process.
    ///
    /// Errors: `Exhausted` once the process started 56 configured devices
    /// (`sys::MAX_DEVICES` less the listed device's generations); the errno of creating
    /// the runtime directory or of claiming an endpoint in it.
    pub fn open(self) -> Result<Device> {
        if let Some(mode) = self.sanitize {
            crate::sanitizer::set_mode(mode);
        }
        let slot = Slot::new(self, false);
        slot.inner()?;
        Ok(Device { at: At::Soft(slot) })
    }
}

impl Device {
    /// The device name (ibv_get_device_name(3)).
    pub fn name(&self) -> &'static str {
        match self.at {
            At::Soft(slot) => &slot.config.name,
            #[cfg(feature = "rdma-core")]
            At::Native(d) => d.name(),
        }
    }

    /// The implementation behind the device: [`Backend::Soft`](Backend::Soft)
    /// for rverbs' own, [`Backend::RdmaCore`](Backend::RdmaCore) for a device of
    /// libibverbs (feature `rdma-core`).
    pub fn backend(&self) -> crate::Backend {
        match self.at {
            At::Soft(_) => Backend::Soft,
            #[cfg(feature = "rdma-core")]
            At::Native(_) => Backend::RdmaCore,
        }
    }

    /// The node GUID in host byte order (ibv_get_device_guid(3) returns it big-endian);
    /// 0 if the device cannot start in this process generation.
    pub fn guid(&self) -> u64 {
        match self.at {
            At::Soft(slot) => slot.inner().map_or(0, |d| d.node_guid),
            #[cfg(feature = "rdma-core")]
            At::Native(d) => d.guid(),
        }
    }

    /// The device's settings. A device of the rdma-core backend has none of rverbs':
    /// its settings are the defaults ([`DeviceConfig::new`]), which it does not use.
    pub fn config(&self) -> &'static DeviceConfig {
        match self.at {
            At::Soft(slot) => &slot.config,
            #[cfg(feature = "rdma-core")]
            At::Native(_) => {
                static DEFAULTS: OnceLock<DeviceConfig> = OnceLock::new();
                DEFAULTS.get_or_init(DeviceConfig::new)
            }
        }
    }

    /// The directory of this device's endpoint in its runtime directory (for diagnostics
    /// and tests; a forked child gets its own). `EOPNOTSUPP` on a device of the rdma-core
    /// backend, which has none.
    pub fn endpoint_dir(&self) -> Result<std::path::PathBuf> {
        Ok(self.inner()?.dir.clone())
    }

    /// The hardware counters of every live endpoint in this device's runtime directory
    /// ([`host_counters`] for the listed device); none for a device of the rdma-core
    /// backend (its provider's counters are in sysfs).
    pub fn host_counters(&self) -> Vec<crate::shm::counters::EndpointCounters> {
        match self.at {
            At::Soft(slot) => counters_under(&slot.config.runtime_dir),
            #[cfg(feature = "rdma-core")]
            At::Native(_) => Vec::new(),
        }
    }

    /// The live QPs' and CQs' statistics of every endpoint in this device's runtime
    /// directory that counts them ([`host_stats`] for the listed device); none for a
    /// device of the rdma-core backend.
    pub fn host_stats(&self) -> Vec<crate::shm::stats::EndpointStats> {
        match self.at {
            At::Soft(slot) => stats_under(&slot.config.runtime_dir),
            #[cfg(feature = "rdma-core")]
            At::Native(_) => Vec::new(),
        }
    }

    /// The soft device's state; `EOPNOTSUPP` for a device of the rdma-core backend.
    pub(crate) fn inner(&self) -> Result<&'static DeviceInner> {
        match self.at {
            At::Soft(slot) => slot.inner(),
            #[cfg(feature = "rdma-core")]
            At::Native(_) => Err(Error::native_unsupported("the soft device's state")),
        }
    }

    /// The libibverbs device a device of the rdma-core backend is; `None` for a soft one.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn native(&self) -> Option<&'static dyn NativeDevice> {
        match self.at {
            At::Soft(_) => None,
            At::Native(d) => Some(d),
        }
    }
}

/// The device a context (or an object of it: a PD, a CQ, a QP) was opened on, read back
/// from the context's core, which carries it for this layer.
pub(crate) fn of(ctx: &crate::mr::domain::ContextCore) -> &'static DeviceInner {
    ctx.device.downcast_ref::<DeviceInner>().expect("a context's device is the device")
}

/// The device as its QPs see it (the engine's trait): its engine's QP and GID tables,
/// its network sockets, and each send queue's path, which carries the state the
/// transports use — handed down here, never looked up by the transports.
impl crate::qp::device::QpDevice for DeviceInner {
    fn qps(&self) -> &crate::table::Table<crate::qp::QpInner> {
        &self.engine.qps
    }

    fn srqs(&self) -> &crate::table::Table<crate::qp::srq::SrqInner> {
        &self.engine.srqs
    }

    fn gids(&self) -> &[GidEntry] {
        &self.engine.gids
    }

    fn owns_gid(&self, gid: &Gid) -> bool {
        self.engine.owns_gid(gid)
    }

    fn network_link(&self, sgid: &Gid) -> Option<u32> {
        self.net.as_ref()?.sock_of(sgid).map(|s| s.link_mtu)
    }

    fn new_path(&'static self) -> Box<dyn crate::qp::device::SendPath> {
        Box::new(crate::transport::link::Path::new(&self.engine, self.net.as_ref(), &self.mcast))
    }
}

impl crate::qp::Qp {
    /// Attaches the QP to the multicast group `gid` (ibv_attach_mcast(3)).
    ///
    /// The attachment is published host-wide (`mcast`), so sends from any process of
    /// the host reach the QP, and the process receives the group from the network
    /// (`transport::mcast_net`), so sends from other hosts do.
    ///
    /// Errors: `EINVAL` for a QP that is not UD or a GID that is not multicast;
    /// `ENOMEM` beyond `max_mcast_grp` groups or `max_mcast_qp_attach` QPs per group (of
    /// this process); the errno of a failure to write the host-wide record or to open
    /// the group's socket.
    pub fn attach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let q = self.inner()?;
        let d = of(&q.pd.ctx);
        d.mcast.attach(q, gid, d.net.as_ref().map(|n| n as &dyn crate::mcast::Reception))
    }

    /// Detaches the QP from `gid` (ibv_detach_mcast(3)); sends that start after this
    /// returns no longer reach it, from any process.
    ///
    /// Errors: `EINVAL` if the QP is not a member.
    pub fn detach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let q = self.inner()?;
        let d = of(&q.pd.ctx);
        d.mcast.detach(q, gid, d.net.as_ref().map(|n| n as &dyn crate::mcast::Reception))
    }
}

impl crate::qp1::Qp1 {
    /// Opens this process's QP1, on the device's endpoint (the device gives QP1 its
    /// registry and directory). Fails with `EBUSY` if it is already open in this process
    /// (its FIFO exists).
    pub fn open() -> Result<crate::qp1::Qp1> {
        let dev = device();
        crate::qp1::Qp1::open_in(dev.reg.as_ref(), &dev.dir, dev.net.as_ref(), dev.slot)
    }

    /// Opens this process's QP1 on the endpoint of `device` (a device of its own
    /// configuration, [`DeviceConfig::open`]: its runtime directory, its addresses).
    /// Fails with `EBUSY` if it is already open in this process.
    pub fn open_on(device: &Device) -> Result<crate::qp1::Qp1> {
        let dev = device.inner()?;
        crate::qp1::Qp1::open_in(dev.reg.as_ref(), &dev.dir, dev.net.as_ref(), dev.slot)
    }
}

impl Device {
    /// The device slot of this process's view of the device (for the connection manager
    /// of `rverbs-cm`, which keeps one engine per device): the listed device's is
    /// [`crate::sys::default_device_slot`] in each process generation.
    ///
    /// Errors: those of opening the device.
    #[doc(hidden)]
    pub fn slot_index(&self) -> Result<usize> {
        Ok(self.inner()?.slot)
    }
}

/// The device whose endpoint has slot `slot` in this process, if one was opened.
fn device_at_slot(slot: usize) -> Option<Device> {
    let all = ALL.lock().unwrap_or_else(|p| p.into_inner());
    all.iter().find(|s| s.gens.iter().any(|g| g.get().is_some_and(|d| d.slot == slot))).map(|s| Device { at: At::Soft(s) })
}

/// The device QP `qp` was created on (for `rverbs-cm`, which connects a QP through the
/// connection manager of its device).
#[doc(hidden)]
pub fn device_of_qp(qp: &crate::Qp) -> Option<Device> {
    // A QP of the rdma-core backend has no soft device.
    let slot = qp.inner().ok()?.slot();
    if slot == crate::sys::default_device_slot() {
        return Some(Device { at: At::Soft(listed()) });
    }
    device_at_slot(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eui64_flips_the_local_bit_and_inserts_fffe() {
        assert_eq!(
            eui64([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
    }

    #[test]
    fn gid_table_is_link_local_then_ipv4_mapped_then_other_ipv6() {
        let d = device();
        assert_eq!(&d.gids[0].gid.0[..2], &[0xfe, 0x80]);
        assert_ne!(d.gids[0].gid.interface_id(), 0);
        assert!(d.gids.len() >= 2, "the loopback address at least");
        let mut ipv6_seen = false;
        for (i, e) in d.gids.iter().enumerate().skip(1) {
            assert_eq!(e.index as usize, i);
            match e.gid.to_ipv4() {
                Some(_) => assert!(!ipv6_seen, "IPv4 entries come before IPv6 ones: {}", e.gid),
                None => {
                    ipv6_seen = true;
                    let ip = std::net::Ipv6Addr::from(e.gid.0);
                    assert!(!ip.is_loopback() && !ip.is_unicast_link_local(), "{ip}");
                }
            }
        }
        // Every global IPv6 address of the host is in the table.
        for i in sys::interfaces() {
            if let Some(ip) = i.ipv6.filter(|ip| !ip.is_loopback() && !ip.is_unicast_link_local()) {
                assert!(d.gids.iter().any(|e| e.gid.0 == ip.octets()), "{ip} missing");
            }
        }
        assert!(d.gids.iter().any(|e| e.gid.to_ipv4() == Some(Ipv4Addr::LOCALHOST)));
    }

    #[test]
    fn gid_formats_as_ipv6() {
        let g = Gid::from_ipv4(Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(g.to_string(), "::ffff:10.1.2.3");
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(10, 1, 2, 3)));
    }
}
