//! Every `#[repr(C)]` mirror of `rverbs_abi::rdma_cm` (`../rverbs-abi/src/rdma_cm.rs`)
//! against the *installed* rdma-core headers `<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`,
//! `<infiniband/sa.h>` and `<infiniband/ib.h>` (librdmacm-dev, libibverbs-dev), in the style of tests/layout.rs.
//!
//! The tables below list each mirrored struct/union with every field (members of C
//! anonymous unions by their C path), each enum alias and each constant. The test turns
//! them into `V(expr)` lines, compiles a dumper (the C source is below) against the
//! headers, runs it, and compares every printed value with Rust's `size_of`/`align_of`/
//! `offset_of!`/constant. A second test parses `../rverbs-abi/src/rdma_cm.rs` and fails
//! if a mirrored type, field, enum alias or constant is missing from the tables.
//!
//! Missing header or compiler = failure, never a skip.

#[macro_use]
mod layout_harness;

use std::collections::BTreeSet;

use layout_harness::*;

use ibverbs::cm::abi::*;

const HEADER: &str = "/usr/include/rdma/rdma_cma.h";

/// The dumper: prints `value<TAB>expr` for each generated `V(expr)` line.
const DUMPER_C: &str = r#"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <infiniband/sa.h>
#include <infiniband/ib.h>

#define V(...) printf("%lld\t%s\n", (long long)(__VA_ARGS__), #__VA_ARGS__);

int main(void)
{
#include "layout_cm_items.h"
	return 0;
}
"#;

fn layout() -> Layout {
    let mut l = Layout::default();

    structs! { l;
        // C: struct ib_addr { union { ... } ib_u; }; Rust flattens it into a union.
        "struct ib_addr" => ib_addr {
            uib_addr8 => "ib_u.uib_addr8", uib_addr16 => "ib_u.uib_addr16",
            uib_addr32 => "ib_u.uib_addr32", uib_addr64 => "ib_u.uib_addr64",
        }
        "struct sockaddr_ib" => sockaddr_ib {
            sib_family, sib_pkey, sib_flowinfo, sib_addr, sib_sid, sib_sid_mask, sib_scope_id,
        }
        "struct rdma_ib_addr" => rdma_ib_addr { sgid, dgid, pkey }
        "struct rdma_addr" => rdma_addr {
            // C: two anonymous unions; sockaddr_storage is the largest member of each.
            src => "src_storage",
            src.src_addr => "src_addr", src.src_sin => "src_sin", src.src_sin6 => "src_sin6",
            src.src_storage => "src_storage",
            dst => "dst_storage",
            dst.dst_addr => "dst_addr", dst.dst_sin => "dst_sin", dst.dst_sin6 => "dst_sin6",
            dst.dst_storage => "dst_storage",
            addr, addr.ibaddr, addr.ibaddr.sgid, addr.ibaddr.dgid, addr.ibaddr.pkey,
        }
        "struct rdma_route" => rdma_route { addr, path_rec, num_paths }
        "struct ibv_path_record" => ibv_path_record {
            service_id, dgid, sgid, dlid, slid, flowlabel_hoplimit, tclass, reversible_numpath,
            pkey, qosclass_sl, mtu, rate, packetlifetime, preference, reserved,
        }
        "struct ibv_path_data" => ibv_path_data { flags, reserved, path }
        "struct rdma_event_channel" => rdma_event_channel { fd }
        "struct rdma_cm_id" => rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type,
            route.addr.src.src_addr => "route.addr.src_addr",
            route.addr.dst.dst_sin6 => "route.addr.dst_sin6",
            route.addr.addr.ibaddr.pkey, route.path_rec, route.num_paths,
        }
        "struct rdma_conn_param" => rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control,
            retry_count, rnr_retry_count, srq, qp_num,
        }
        "struct rdma_ud_param" => rdma_ud_param {
            private_data, private_data_len, ah_attr, qp_num, qkey,
        }
        "struct rdma_cm_event" => rdma_cm_event {
            id, listen_id, event, status, param, param.conn, param.ud, param.conn.qp_num,
            param.conn.private_data_len, param.ud.ah_attr, param.ud.qkey,
        }
        "struct rdma_addrinfo" => rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
            ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
            ai_connect_len, ai_connect, ai_next,
        }
        "struct rdma_cm_join_mc_attr_ex" => rdma_cm_join_mc_attr_ex {
            comp_mask, join_flags, addr,
        }
    }

    enums! { l;
        "enum rdma_cm_event_type" => rdma_cm_event_type,
        "enum rdma_port_space" => rdma_port_space,
        "enum rdma_cm_join_mc_attr_mask" => rdma_cm_join_mc_attr_mask,
        "enum rdma_cm_mc_join_flags" => rdma_cm_mc_join_flags,
    }

    consts! { l;
        RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL, RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR, RDMA_CM_EVENT_ADDR_CHANGE, RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB, RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB,
        RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PORT_MASK, RDMA_IB_IP_PS_TCP, RDMA_IB_IP_PS_UDP,
        RDMA_IB_PS_IB,
        RDMA_UDP_QKEY, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE, RAI_NUMERICHOST, RAI_NOROUTE, RAI_FAMILY,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS, RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED,
        RDMA_OPTION_ID, RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS, RDMA_OPTION_ID_REUSEADDR, RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_OPTION_IB_PATH,
        IBV_PATH_RECORD_REVERSIBLE, IBV_PATH_FLAG_GMP, IBV_PATH_FLAG_PRIMARY,
        IBV_PATH_FLAG_ALTERNATE, IBV_PATH_FLAG_OUTBOUND, IBV_PATH_FLAG_INBOUND,
        IBV_PATH_FLAG_INBOUND_REVERSE, IBV_PATH_FLAG_BIDIRECTIONAL,
        AF_IB,
    }

    l
}

/// Rust-named types for C anonymous members: (Rust type, parent Rust type, path in parent).
const ANONYMOUS: &[(&str, &str, &str)] = &[
    ("rdma_addr_src", "rdma_addr", "src"),
    ("rdma_addr_dst", "rdma_addr", "dst"),
    ("rdma_addr_addr", "rdma_addr", "addr"),
    ("rdma_cm_event_param", "rdma_cm_event", "param"),
];

#[test]
fn layout_matches_installed_rdma_cma_h() {
    let l = layout();
    let c = run_c_dumper("layout_cm", HEADER, "librdmacm-dev", DUMPER_C, &l.rows);
    assert_matches(&l, &c, HEADER, 300);
}

#[test]
fn every_mirrored_item_is_compared() {
    let l = layout();
    let d = parse_abi_sources(&[manifest_dir().join("../rverbs-abi/src/rdma_cm.rs")]);
    assert!(d.types.len() >= 18, "parser found only {} types", d.types.len());
    let missing = not_compared(&l, &d, ANONYMOUS, &BTreeSet::new());
    assert!(
        missing.is_empty(),
        "mirrored in rverbs-abi/src/rdma_cm.rs but not compared with the headers by tests/layout_cm.rs:\n  {}",
        missing.join("\n  ")
    );
}
