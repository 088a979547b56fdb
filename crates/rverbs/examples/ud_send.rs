//! UD (unreliable datagram) queue pairs: address handles, Q_Keys, the 40-byte GRH
//! area, and replying to whoever sent a datagram.
//!
//! A UD QP is not connected: every SEND names its destination with an address handle
//! (ibv_create_ah(3)), a QP number and a Q_Key. The receiver learns the sender from
//! the completion (`src_qp`) and from the network header the device writes into the
//! first 40 bytes of every receive buffer (the "GRH" area; on RoCE v2 with IPv4 it
//! holds 20 zero bytes then the IPv4 header). From those two it builds an address
//! handle back to the sender, as ibv_init_ah_from_wc(3) does, and replies.
//!
//! The example shows:
//! - a SEND_WITH_IMM from a to b; b's completion has `byte_len` = 40 + payload, the
//!   GRH flag, the immediate and a's QP number in `src_qp`;
//! - the GRH fields (IP version, traffic class, TTL, protocol, addresses, checksum);
//! - a reply from b to a through an AH built from the completion and the GRH;
//! - a SEND with the wrong Q_Key: dropped silently, the receive stays posted.
//!
//! Rules followed: ibv_post_recv(3) and ibv_poll_cq(3) (UD receive buffers need 40
//! extra bytes for the GRH, which `byte_len` counts; `src_qp` and the GRH flag are
//! valid on success), ibv_create_ah(3) (a RoCE AH must be global),
//! ibv_init_ah_from_wc(3), ibv_modify_qp(3) (UD INIT needs QKEY; RTR only STATE; RTS
//! STATE and SQ_PSN), ibv_post_send(3) (`wr.ud`: ah, remote_qpn, remote_qkey).
//!
//! Run: `cargo run -p rverbs --example ud_send`

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::{
    check_bytes, check_eq, ensure, expect_empty, expect_ok, fail, path_to_peer, pattern, Endpoint, Result, PORT, QKEY,
};
use rverbs::{Ah, AhAttr, Context, Gid, GlobalRoute, QpType, SendWr, Wc, WcFlags, WcOpcode};

/// Bytes at the start of every UD receive buffer that the device fills with the
/// network header.
const GRH_LEN: usize = 40;
const PAYLOAD: usize = 1000;

pub fn main() -> Result {
    let a = ud_endpoint()?;
    let b = ud_endpoint()?;
    println!("UD QPs ready: a = {:#x}, b = {:#x}, Q_Key {QKEY:#x}", a.qp.qp_num(), b.qp.qp_num());

    // a only knows b's GID (the path) and QP number.
    let to_b = Ah::new(&a.pd, &path_to_peer(&a.ctx)?)?;
    let (wc, grh) = datagram_to_b(&a, &b, &to_b)?;

    // b answers whoever sent the datagram: the path from the GRH, the QP from src_qp.
    let reply_path = ah_attr_from_wc(&b.ctx, &wc, &grh)?;
    let Some(sender_qpn) = wc.src_qp() else {
        return fail("a successful UD receive has a src_qp");
    };
    if let Some(g) = reply_path.grh {
        println!(
            "AH from the completion: dgid {}, sgid_index {}, hop_limit {}; reply to QP {sender_qpn:#x}",
            g.dgid, g.sgid_index, g.hop_limit
        );
    }
    let to_a = Ah::new(&b.pd, &reply_path)?;
    reply_to_a(&a, &b, &to_a, sender_qpn)?;
    println!("ud_send: all checks passed");
    Ok(())
}

/// A UD QP in RTS. It has no peer: RTR and RTS need no address.
fn ud_endpoint() -> Result<Endpoint> {
    let e = Endpoint::new(QpType::Ud)?;
    common::bring_up(&e.qp, &e.ctx, 0, rverbs::Access::empty())?;
    Ok(e)
}

/// a → b: SEND_WITH_IMM of [`PAYLOAD`] bytes. Returns b's completion and GRH.
fn datagram_to_b(a: &Endpoint, b: &Endpoint, to_b: &Ah) -> Result<(Wc, [u8; GRH_LEN])> {
    const IMM: u32 = 0x5eed;
    let data = pattern(PAYLOAD, 3);
    a.mr.write(0, &data)?;
    b.post_recv(1, 0, (GRH_LEN + PAYLOAD) as u32)?;
    let sge = [a.mr.sge(0, PAYLOAD as u32)?];
    a.qp.post_send(&[SendWr::send(1, &sge).with_imm(IMM).ud(to_b, b.qp.qp_num(), QKEY).signaled()])?;

    expect_ok(&a.cq, 1, WcOpcode::Send)?;
    let wc = expect_ok(&b.cq, 1, WcOpcode::Recv)?;
    check_eq("byte_len (GRH + payload)", wc.byte_len(), Some((GRH_LEN + PAYLOAD) as u32))?;
    check_eq("src_qp", wc.src_qp(), Some(a.qp.qp_num()))?;
    check_eq("imm_data", wc.imm_data(), Some(IMM))?;
    let flags = wc.wc_flags().unwrap_or_default();
    ensure(flags.contains(WcFlags::GRH), || format!("GRH flag missing: {flags:?}"))?;
    check_bytes("payload after the GRH", &b.mr, GRH_LEN, &data)?;
    println!(
        "b received {} bytes (40 GRH + {PAYLOAD} payload) from QP {:#x}, imm {IMM:#x}",
        wc.byte_len().unwrap_or_default(),
        wc.src_qp().unwrap_or_default()
    );

    let mut grh = [0u8; GRH_LEN];
    b.mr.read(0, &mut grh)?;
    print_grh(&grh)?;
    Ok((wc, grh))
}

/// What a RoCE v2 GRH area says about the packet.
struct Header {
    /// The sender's GID (the IP source address).
    sgid: Gid,
    /// The GID the packet was sent to (the IP destination address).
    dgid: Gid,
    traffic_class: u8,
    hop_limit: u8,
    flow_label: u32,
}

/// Reads the GRH area: IPv4 (20 zero bytes, then the IPv4 header) or IPv6.
fn parse_grh(raw: &[u8; GRH_LEN]) -> Result<Header> {
    if raw[..20].iter().all(|&x| x == 0) && raw[20] >> 4 == 4 {
        let ip = &raw[20..];
        let addr = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
        Ok(Header {
            sgid: Gid::from_ipv4(addr(12)),
            dgid: Gid::from_ipv4(addr(16)),
            traffic_class: ip[1],
            hop_limit: ip[8],
            flow_label: 0,
        })
    } else if raw[0] >> 4 == 6 {
        let word = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        Ok(Header {
            sgid: Gid(raw[8..24].try_into()?),
            dgid: Gid(raw[24..40].try_into()?),
            traffic_class: (word >> 20) as u8,
            hop_limit: raw[7],
            flow_label: word & 0xf_ffff,
        })
    } else {
        fail(format!("GRH area is neither IPv4 nor IPv6: {raw:02x?}"))
    }
}

/// The Internet checksum over a header; 0 when the header's own checksum is right.
fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn print_grh(raw: &[u8; GRH_LEN]) -> Result {
    let h = parse_grh(raw)?;
    if raw[20] >> 4 == 4 {
        let ip = &raw[20..];
        println!(
            "GRH: IPv4, tos {}, ttl {}, protocol {} (UDP), total length {}, {} -> {}, checksum {}",
            ip[1],
            ip[8],
            ip[9],
            u16::from_be_bytes([ip[2], ip[3]]),
            h.sgid.to_ipv4().unwrap_or(Ipv4Addr::UNSPECIFIED),
            h.dgid.to_ipv4().unwrap_or(Ipv4Addr::UNSPECIFIED),
            if ip_checksum(ip) == 0 { "ok" } else { "BAD" }
        );
        check_eq("IPv4 protocol (UDP)", ip[9], 17)?;
        check_eq("IPv4 header checksum", ip_checksum(ip), 0)?;
    } else {
        println!(
            "GRH: IPv6, traffic class {}, flow label {:#x}, hop limit {}, {} -> {}",
            h.traffic_class,
            h.flow_label,
            h.hop_limit,
            Ipv6Addr::from(h.sgid.0),
            Ipv6Addr::from(h.dgid.0)
        );
    }
    Ok(())
}

/// ibv_init_ah_from_wc(3): the path back to the sender of `wc`. The sender's GID
/// becomes the destination; the local GID the packet was sent to picks the source
/// GID index; the service level comes from the completion.
fn ah_attr_from_wc(ctx: &Context, wc: &Wc, grh: &[u8; GRH_LEN]) -> Result<AhAttr> {
    if !wc.wc_flags().unwrap_or_default().contains(WcFlags::GRH) {
        return fail("the completion has no GRH: on RoCE the path cannot be rebuilt");
    }
    let h = parse_grh(grh)?;
    let Some(local) = ctx.query_gid_table().into_iter().find(|e| e.gid == h.dgid) else {
        return fail(format!("the packet was sent to {}, which is not a local GID", h.dgid));
    };
    Ok(AhAttr {
        grh: Some(GlobalRoute {
            dgid: h.sgid,
            flow_label: h.flow_label,
            sgid_index: u8::try_from(local.index)?,
            hop_limit: h.hop_limit,
            traffic_class: h.traffic_class,
        }),
        sl: wc.sl().unwrap_or_default(),
        port_num: PORT,
        ..AhAttr::default()
    })
}

/// b → a through the AH built from the completion. First with a wrong Q_Key, which
/// a's QP drops without consuming its receive, then with the right one.
fn reply_to_a(a: &Endpoint, b: &Endpoint, to_a: &Ah, a_qpn: u32) -> Result {
    let data = b"pong from b".as_slice();
    b.mr.write(4096, data)?;
    a.post_recv(2, 0, (GRH_LEN + data.len()) as u32)?;
    let sge = [b.mr.sge(4096, data.len() as u32)?];

    b.qp.post_send(&[SendWr::send(2, &sge).ud(to_a, a_qpn, QKEY ^ 1).signaled()])?;
    expect_ok(&b.cq, 2, WcOpcode::Send)?; // UD completes when sent, delivered or not
    expect_empty(&a.cq, "a datagram with the wrong Q_Key is dropped")?;
    // The soft device shows its receive queue; a libibverbs provider's is not seen
    // (rverbs::Qp::recv_queue_len is 0 there), so the reply below is the proof.
    if a.ctx.backend() == rverbs::Backend::Soft {
        check_eq("receives still posted at a", a.qp.recv_queue_len(), 1)?;
    }
    println!("reply with Q_Key {:#x}: dropped by a, its receive still posted", QKEY ^ 1);

    b.qp.post_send(&[SendWr::send(3, &sge).ud(to_a, a_qpn, QKEY).signaled()])?;
    expect_ok(&b.cq, 3, WcOpcode::Send)?;
    let wc = expect_ok(&a.cq, 2, WcOpcode::Recv)?;
    check_eq("reply src_qp", wc.src_qp(), Some(b.qp.qp_num()))?;
    check_eq("reply byte_len", wc.byte_len(), Some((GRH_LEN + data.len()) as u32))?;
    check_bytes("reply payload", &a.mr, GRH_LEN, data)?;
    println!("reply with Q_Key {QKEY:#x}: a received {:?} from QP {:#x}", String::from_utf8_lossy(data), b.qp.qp_num());
    Ok(())
}
