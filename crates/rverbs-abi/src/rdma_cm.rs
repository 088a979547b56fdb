//! `#[repr(C)]` mirrors of `<rdma/rdma_cma.h>` (rdma-core 44), hand-written, plus the
//! pieces of `<infiniband/sa.h>` and `<infiniband/ib.h>` that the CM API hands around
//! (`struct ibv_path_data` for `RDMA_OPTION_IB_PATH`, `struct sockaddr_ib` for `AF_IB`).
//!
//! Shared by the drop-in `librdmacm.so.1` (`rverbs-capi`'s `cm`, which implements them)
//! and `rverbs-cm`'s `rdma_core` backend (which calls a real librdmacm through them).
//!
//! Same conventions as the verbs mirrors at the crate root: C names; C anonymous unions get a Rust name made
//! of the parent's name and a member name (`rdma_addr_src` is the anonymous union that
//! holds `rdma_addr.src_addr`, reached from Rust as `addr.src.src_addr`); enums are
//! `c_int`/`c_uint` aliases with `pub const` values, anonymous enums plain `c_int`
//! constants. `struct ibv_sa_path_rec`, `struct ibv_ah_attr`, `struct ibv_ece` and the
//! verbs objects are the crate root's mirrors.
//!
//! `crates/rverbs-capi/tests/layout_cm.rs` compares every size, alignment, field offset and constant here
//! with what a C program compiled against the installed headers reports, and fails if
//! something declared here is missing from its tables.

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

use crate::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_qp_type,
    ibv_sa_path_rec, ibv_srq, Zeroed,
};

// ---------------------------------------------------------------------------------------
// Enums and constants
// ---------------------------------------------------------------------------------------

// enum rdma_cm_event_type
pub type rdma_cm_event_type = c_uint;
pub const RDMA_CM_EVENT_ADDR_RESOLVED: rdma_cm_event_type = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: rdma_cm_event_type = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: rdma_cm_event_type = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: rdma_cm_event_type = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: rdma_cm_event_type = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: rdma_cm_event_type = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: rdma_cm_event_type = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: rdma_cm_event_type = 7;
pub const RDMA_CM_EVENT_REJECTED: rdma_cm_event_type = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: rdma_cm_event_type = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: rdma_cm_event_type = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: rdma_cm_event_type = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: rdma_cm_event_type = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: rdma_cm_event_type = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: rdma_cm_event_type = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: rdma_cm_event_type = 15;

// enum rdma_port_space
pub type rdma_port_space = c_uint;
pub const RDMA_PS_IPOIB: rdma_port_space = 0x0002;
pub const RDMA_PS_TCP: rdma_port_space = 0x0106;
pub const RDMA_PS_UDP: rdma_port_space = 0x0111;
pub const RDMA_PS_IB: rdma_port_space = 0x013F;

// AF_IB service ids (`sockaddr_ib.sib_sid`): port space << 16 | port.
pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
pub const RDMA_IB_IP_PORT_MASK: u64 = 0x0000_0000_0000_FFFF;
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
pub const RDMA_IB_PS_IB: u64 = 0x0000_0000_013F_0000;

/// Global qkey of `RDMA_PS_UDP`/`RDMA_PS_IPOIB` ids.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

// anonymous enum: limits of rdma_conn_param.responder_resources/initiator_depth
pub const RDMA_MAX_RESP_RES: c_int = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: c_int = 0xFF;

// rdma_addrinfo.ai_flags (#defines)
pub const RAI_PASSIVE: c_int = 0x0000_0001;
pub const RAI_NUMERICHOST: c_int = 0x0000_0002;
pub const RAI_NOROUTE: c_int = 0x0000_0004;
pub const RAI_FAMILY: c_int = 0x0000_0008;

// enum rdma_cm_join_mc_attr_mask
pub type rdma_cm_join_mc_attr_mask = c_uint;
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: rdma_cm_join_mc_attr_mask = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: rdma_cm_join_mc_attr_mask = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: rdma_cm_join_mc_attr_mask = 1 << 2;

// enum rdma_cm_mc_join_flags
pub type rdma_cm_mc_join_flags = c_uint;
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: rdma_cm_mc_join_flags = 0;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: rdma_cm_mc_join_flags = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: rdma_cm_mc_join_flags = 2;

// anonymous enum: rdma_set_option levels
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;

// anonymous enum: RDMA_OPTION_ID option names
/// `uint8_t`: RFC 2474 type of service.
pub const RDMA_OPTION_ID_TOS: c_int = 0;
/// `int`: ~`SO_REUSEADDR`.
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
/// `int`: ~`IPV6_V6ONLY`.
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
/// `uint8_t`: the QP's local ACK timeout.
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

// anonymous enum: RDMA_OPTION_IB option names
/// `struct ibv_path_data[]`.
pub const RDMA_OPTION_IB_PATH: c_int = 1;

// <infiniband/sa.h>: ibv_path_record.reversible_numpath bit, ibv_path_data.flags
pub const IBV_PATH_RECORD_REVERSIBLE: u8 = 0x80;
pub const IBV_PATH_FLAG_GMP: u32 = 1 << 0;
pub const IBV_PATH_FLAG_PRIMARY: u32 = 1 << 1;
pub const IBV_PATH_FLAG_ALTERNATE: u32 = 1 << 2;
pub const IBV_PATH_FLAG_OUTBOUND: u32 = 1 << 3;
pub const IBV_PATH_FLAG_INBOUND: u32 = 1 << 4;
pub const IBV_PATH_FLAG_INBOUND_REVERSE: u32 = 1 << 5;
pub const IBV_PATH_FLAG_BIDIRECTIONAL: u32 = IBV_PATH_FLAG_OUTBOUND | IBV_PATH_FLAG_INBOUND_REVERSE;

/// `AF_IB` (`<infiniband/ib.h>`; glibc's `<sys/socket.h>` does not define it).
pub const AF_IB: c_int = 27;

// ---------------------------------------------------------------------------------------
// Addresses and routes
// ---------------------------------------------------------------------------------------

/// `struct ib_addr` (`<infiniband/ib.h>`): a GID as a union of word views.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_addr {
    pub uib_addr8: [u8; 16],
    /// `__be16[8]`
    pub uib_addr16: [u16; 8],
    /// `__be32[4]`
    pub uib_addr32: [u32; 4],
    /// `__be64[2]`
    pub uib_addr64: [u64; 2],
}

/// `struct sockaddr_ib` (`<infiniband/ib.h>`, 48 bytes): an `AF_IB` address.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sockaddr_ib {
    pub sib_family: u16,
    /// `__be16`
    pub sib_pkey: u16,
    /// `__be32`
    pub sib_flowinfo: u32,
    pub sib_addr: ib_addr,
    /// `__be64`: port space << 16 | port.
    pub sib_sid: u64,
    /// `__be64`
    pub sib_sid_mask: u64,
    pub sib_scope_id: u64,
}

/// `struct rdma_ib_addr` (40 bytes): `rdma_addr.addr.ibaddr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// `__be16`
    pub pkey: u16,
}

/// The anonymous union of `struct rdma_addr` that holds the source address
/// (128 bytes: its largest member is a `sockaddr_storage`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_src {
    pub src_addr: sockaddr,
    pub src_sin: sockaddr_in,
    pub src_sin6: sockaddr_in6,
    pub src_storage: sockaddr_storage,
}

/// The anonymous union of `struct rdma_addr` that holds the destination address.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_dst {
    pub dst_addr: sockaddr,
    pub dst_sin: sockaddr_in,
    pub dst_sin6: sockaddr_in6,
    pub dst_storage: sockaddr_storage,
}

/// `rdma_addr.addr` (a named member of an anonymous union type in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_addr {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr` (296 bytes): C's `addr.src_addr` is Rust's `addr.src.src_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: rdma_addr_src,
    pub dst: rdma_addr_dst,
    pub addr: rdma_addr_addr,
}

/// `struct rdma_route` (312 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct ibv_path_record` (`<infiniband/sa.h>`, 64 bytes): a path record in wire
/// (network) byte order, as `RDMA_OPTION_IB_PATH` and `rdma_addrinfo.ai_route` carry it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_path_record {
    /// `__be64`
    pub service_id: u64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    /// `__be16`
    pub dlid: u16,
    /// `__be16`
    pub slid: u16,
    /// `__be32`: reserved 31:28, flow label 27:8, hop limit 7:0.
    pub flowlabel_hoplimit: u32,
    pub tclass: u8,
    /// reversible 7, number of paths 6:0.
    pub reversible_numpath: u8,
    /// `__be16`
    pub pkey: u16,
    /// `__be16`: QoS class 15:4, SL 3:0.
    pub qosclass_sl: u16,
    /// selector 7:6, MTU 5:0.
    pub mtu: u8,
    /// selector 7:6, rate 5:0.
    pub rate: u8,
    /// selector 7:6, packet lifetime 5:0.
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

/// `struct ibv_path_data` (`<infiniband/sa.h>`, 72 bytes): one element of the
/// `RDMA_OPTION_IB_PATH` array.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_path_data {
    /// `IBV_PATH_FLAG_*`
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}

// ---------------------------------------------------------------------------------------
// Channels, ids, parameters, events
// ---------------------------------------------------------------------------------------

/// `struct rdma_event_channel`: applications read `fd` (poll/epoll, `O_NONBLOCK`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` (416 bytes): every field is read or written by applications
/// (rdma_cma.h; docs/rpma-rdmacm.md §2.2).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    /// User cookie (inherited by the ids of connection requests).
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: rdma_port_space,
    pub port_num: u8,
    /// The last event of a synchronous (channel-less) id.
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: ibv_qp_type,
}

/// `struct rdma_conn_param` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    /// Ignored when accepting.
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Ignored if a QP is created on the id (as is `qp_num`).
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `rdma_cm_event.param` (anonymous union type in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event` (80 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    /// For `RDMA_CM_EVENT_CONNECT_REQUEST`: the new id of the request.
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: rdma_cm_event_type,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo` (96 bytes): the result (list) of `rdma_getaddrinfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addrinfo {
    /// `RAI_*`
    pub ai_flags: c_int,
    pub ai_family: c_int,
    /// `enum ibv_qp_type` as `int`.
    pub ai_qp_type: c_int,
    /// `enum rdma_port_space` as `int`.
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex` (16 bytes): `rdma_join_multicast_ex`'s request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    /// `RDMA_CM_JOIN_MC_ATTR_*`
    pub comp_mask: u32,
    /// `RDMA_MC_JOIN_FLAG_*`
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

macro_rules! zeroed {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: $t is a repr(C) mirror made only of integers, raw pointers, libc
            // socket address structs (plain integers), and unions/structs thereof.
            unsafe impl Zeroed for $t {}
        )*
    };
}

zeroed!(
    ib_addr,
    sockaddr_ib,
    rdma_ib_addr,
    rdma_addr_src,
    rdma_addr_dst,
    rdma_addr_addr,
    rdma_addr,
    rdma_route,
    ibv_path_record,
    ibv_path_data,
    rdma_event_channel,
    rdma_cm_id,
    rdma_conn_param,
    rdma_ud_param,
    rdma_cm_event_param,
    rdma_cm_event,
    rdma_addrinfo,
    rdma_cm_join_mc_attr_ex,
);

/// Sizes the rdma-core 44 headers give these structs on x86_64 (gcc); tests/layout_cm.rs
/// checks everything against the installed headers, this catches mistakes at build time.
#[cfg(target_arch = "x86_64")]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<sockaddr_ib>() == 48);
    assert!(size_of::<rdma_ib_addr>() == 40);
    assert!(size_of::<rdma_addr>() == 296);
    assert!(offset_of!(rdma_addr, dst) == 128 && offset_of!(rdma_addr, addr) == 256);
    assert!(size_of::<rdma_route>() == 312);
    assert!(size_of::<ibv_path_data>() == 72);
    assert!(size_of::<rdma_cm_id>() == 416 && offset_of!(rdma_cm_id, ps) == 344);
    assert!(size_of::<rdma_conn_param>() == 24);
    assert!(size_of::<rdma_ud_param>() == 56);
    assert!(size_of::<rdma_cm_event>() == 80);
    assert!(size_of::<rdma_addrinfo>() == 96);
    assert!(size_of::<rdma_cm_join_mc_attr_ex>() == 16);
};
