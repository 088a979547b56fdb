//! `rverbs devinfo`: the device as `ibv_devinfo` prints it.

use rverbs::cap_flags::{self, LINK_LAYER_ETHERNET};
use rverbs::{Context, GidType, Mtu, PortState};

use crate::failure::Failure;

/// `%04x:%04x:%04x:%04x` of a GUID in host order, as `ibv_devinfo` prints it.
pub fn guid_str(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

fn mtu_str(mtu: Mtu) -> String {
    format!("{} ({})", mtu.bytes(), mtu as u32)
}

fn port_state_str(state: PortState) -> String {
    let name = match state {
        PortState::Down => "PORT_DOWN",
        PortState::Init => "PORT_INIT",
        PortState::Armed => "PORT_ARMED",
        PortState::Active => "PORT_ACTIVE",
        PortState::Nop | PortState::ActiveDefer => "invalid state",
    };
    format!("{name} ({})", state as u32)
}

fn atomic_cap_str(cap: u32) -> String {
    let name = match cap {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    };
    format!("{name} ({cap})")
}

fn gid_type_str(t: GidType) -> &'static str {
    match t {
        GidType::Ib => "IB",
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
    }
}

fn link_layer_str(ll: u8) -> &'static str {
    match ll {
        LINK_LAYER_ETHERNET => "Ethernet",
        0 | 1 => "InfiniBand",
        _ => "Unknown",
    }
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn phys_state_str(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

/// The names of the `IBV_DEVICE_*` bits rverbs sets, in `ibv_devinfo`'s order.
const CAP_NAMES: &[(u32, &str)] = &[
    (cap_flags::BAD_PKEY_CNTR, "BAD_PKEY_CNTR"),
    (cap_flags::BAD_QKEY_CNTR, "BAD_QKEY_CNTR"),
    (cap_flags::UD_AV_PORT_ENFORCE, "UD_AV_PORT_ENFORCE"),
    (cap_flags::PORT_ACTIVE_EVENT, "PORT_ACTIVE_EVENT"),
    (cap_flags::SYS_IMAGE_GUID, "SYS_IMAGE_GUID"),
    (cap_flags::RC_RNR_NAK_GEN, "RC_RNR_NAK_GEN"),
    (cap_flags::SRQ_RESIZE, "SRQ_RESIZE"),
    (cap_flags::MEM_WINDOW, "MEM_WINDOW"),
    (cap_flags::XRC, "XRC"),
    (cap_flags::MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B"),
];

/// Prints the device of `ctx` (and with `verbose` its limits, port details and GID table)
/// in `ibv_devinfo`'s layout.
pub fn print(ctx: &Context, verbose: bool) -> Result<(), Failure> {
    let d = ctx.query_device();
    println!("hca_id:\t{}", ctx.device_name());
    // Like Soft-RoCE (rxe), the device reports the InfiniBand transport over an
    // Ethernet link layer; the Rust API has no transport_type, so it is fixed here.
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!("\tfw_ver:\t\t\t\t{}", d.fw_ver);
    println!("\tnode_guid:\t\t\t{}", guid_str(d.node_guid));
    println!("\tsys_image_guid:\t\t\t{}", guid_str(d.sys_image_guid));
    println!("\tvendor_id:\t\t\t{:#06x}", d.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", d.vendor_part_id);
    println!("\thw_ver:\t\t\t\t{:#X}", d.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", d.phys_port_cnt);
    if verbose {
        println!("\tmax_mr_size:\t\t\t{:#x}", d.max_mr_size);
        println!("\tpage_size_cap:\t\t\t{:#x}", d.page_size_cap);
        println!("\tmax_qp:\t\t\t\t{}", d.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", d.max_qp_wr);
        println!("\tdevice_cap_flags:\t\t{:#010x}", d.device_cap_flags);
        for (bit, name) in CAP_NAMES {
            if d.device_cap_flags & bit != 0 {
                println!("\t\t\t\t\t{name}");
            }
        }
        let known = CAP_NAMES.iter().fold(0, |acc, (bit, _)| acc | bit);
        if d.device_cap_flags & !known != 0 {
            println!(
                "\t\t\t\t\tUnknown flags: {:#X}",
                d.device_cap_flags & !known
            );
        }
        println!("\tmax_sge:\t\t\t{}", d.max_sge);
        println!("\tmax_sge_rd:\t\t\t{}", d.max_sge_rd);
        println!("\tmax_cq:\t\t\t\t{}", d.max_cq);
        println!("\tmax_cqe:\t\t\t{}", d.max_cqe);
        println!("\tmax_mr:\t\t\t\t{}", d.max_mr);
        println!("\tmax_pd:\t\t\t\t{}", d.max_pd);
        println!("\tmax_qp_rd_atom:\t\t\t{}", d.max_qp_rd_atom);
        println!("\tmax_res_rd_atom:\t\t{}", d.max_res_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", d.max_qp_init_rd_atom);
        println!("\tatomic_cap:\t\t\t{}", atomic_cap_str(d.atomic_cap));
        println!("\tmax_mw:\t\t\t\t{}", d.max_mw);
        println!("\tmax_mcast_grp:\t\t\t{}", d.max_mcast_grp);
        println!("\tmax_mcast_qp_attach:\t\t{}", d.max_mcast_qp_attach);
        println!(
            "\tmax_total_mcast_qp_attach:\t{}",
            d.max_total_mcast_qp_attach
        );
        println!("\tmax_ah:\t\t\t\t{}", d.max_ah);
        println!("\tmax_srq:\t\t\t{}", d.max_srq);
        println!("\tmax_srq_wr:\t\t\t{}", d.max_srq_wr);
        println!("\tmax_srq_sge:\t\t\t{}", d.max_srq_sge);
        println!("\tmax_pkeys:\t\t\t{}", d.max_pkeys);
        println!("\tlocal_ca_ack_delay:\t\t{}", d.local_ca_ack_delay);
        println!("\tmax_inline_data:\t\t{}", d.max_inline_data);
        if d.hca_core_clock != 0 {
            println!("\thca_core_clock:\t\t\t{}kHZ", d.hca_core_clock);
        } else {
            println!("\tcore clock not supported");
        }
    }
    for port in 1..=d.phys_port_cnt {
        let p = ctx.query_port(port)?;
        println!("\t\tport:\t{port}");
        println!("\t\t\tstate:\t\t\t{}", port_state_str(p.state));
        println!("\t\t\tmax_mtu:\t\t{}", mtu_str(p.max_mtu));
        println!("\t\t\tactive_mtu:\t\t{}", mtu_str(p.active_mtu));
        println!("\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        println!("\t\t\tport_lid:\t\t{}", p.lid);
        println!("\t\t\tport_lmc:\t\t{:#04x}", p.lmc);
        println!("\t\t\tlink_layer:\t\t{}", link_layer_str(p.link_layer));
        if verbose {
            println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
            println!("\t\t\tport_cap_flags:\t\t{:#010x}", p.port_cap_flags);
            println!("\t\t\tport_cap_flags2:\t{:#06x}", p.port_cap_flags2);
            println!(
                "\t\t\tmax_vl_num:\t\t{} ({})",
                vl_str(p.max_vl_num),
                p.max_vl_num
            );
            println!("\t\t\tbad_pkey_cntr:\t\t{:#x}", p.bad_pkey_cntr);
            println!("\t\t\tqkey_viol_cntr:\t\t{:#x}", p.qkey_viol_cntr);
            println!("\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
            println!("\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
            println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
            println!("\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
            println!("\t\t\tinit_type_reply:\t{}", p.init_type_reply);
            println!(
                "\t\t\tactive_width:\t\t{}X ({})",
                width_str(p.active_width),
                p.active_width
            );
            println!(
                "\t\t\tactive_speed:\t\t{} ({})",
                speed_str(p.active_speed),
                p.active_speed
            );
            println!(
                "\t\t\tphys_state:\t\t{} ({})",
                phys_state_str(p.phys_state),
                p.phys_state
            );
            for index in 0..p.gid_tbl_len {
                let e = ctx.query_gid_ex(port, index)?;
                if e.gid.is_zero() {
                    continue;
                }
                println!(
                    "\t\t\tGID[{index:>3}]:\t\t{}, {}",
                    e.gid,
                    gid_type_str(e.gid_type)
                );
            }
        }
        println!();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_prints_as_four_groups() {
        assert_eq!(guid_str(0x5054_00ff_fe12_3456), "5054:00ff:fe12:3456");
        assert_eq!(guid_str(1), "0000:0000:0000:0001");
    }

    #[test]
    fn mtu_prints_bytes_and_enum_value() {
        assert_eq!(mtu_str(Mtu::Mtu4096), "4096 (5)");
        assert_eq!(mtu_str(Mtu::Mtu1024), "1024 (3)");
    }
}
