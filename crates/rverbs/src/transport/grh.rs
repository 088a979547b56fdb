//! The 40-byte network header a UD receive finds at the start of its buffer.
//!
//! Rule (`union rdma_network_hdr`; rdma-core `get_grh_header_version` in
//! libibverbs/verbs.c): for IPv4 GIDs the area holds 20 zero bytes, then the IPv4 header
//! of the packet with a valid checksum; for IPv6 GIDs it holds the IPv6 header. Consumers
//! (ibv_init_ah_from_wc(3)) tell the two apart from these bytes, so the checksum must be
//! right. rverbs writes the header RoCE v2 would have put on the wire: UDP, ID 0, DF,
//! TTL/hop limit and TOS/traffic class from the sender's path.

use crate::gid::Gid;

/// Bytes of the area.
pub(crate) const GRH_LEN: usize = 40;

/// RoCE v2 bytes after the IP header for a UD SEND: UDP 8 + BTH 12 + DETH 8 (+ ImmDt 4)
/// + payload + pad + ICRC 4.
fn udp_len(payload: usize, imm: bool) -> usize {
    let pad = (4 - payload % 4) % 4;
    8 + 12 + 8 + if imm { 4 } else { 0 } + payload + pad + 4
}

/// The header area for a UD message of `payload` bytes from `sgid` to `dgid`.
pub(crate) fn build(
    sgid: &Gid,
    dgid: &Gid,
    traffic_class: u8,
    hop_limit: u8,
    flow_label: u32,
    payload: usize,
    imm: bool,
) -> [u8; GRH_LEN] {
    let mut h = [0u8; GRH_LEN];
    let udp = udp_len(payload, imm);
    match (sgid.to_ipv4(), dgid.to_ipv4()) {
        (Some(src), Some(dst)) => {
            let ip = &mut h[20..];
            ip[0] = 0x45;
            ip[1] = traffic_class;
            ip[2..4].copy_from_slice(&((20 + udp) as u16).to_be_bytes());
            // Identification 0, DF set, fragment offset 0 (as an unconnected `IP_PMTUDISC_DO`
            // socket sends them).
            ip[6] = 0x40;
            ip[8] = hop_limit;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let sum = checksum(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        _ => {
            let word = 6u32 << 28 | u32::from(traffic_class) << 20 | (flow_label & 0xf_ffff);
            h[0..4].copy_from_slice(&word.to_be_bytes());
            h[4..6].copy_from_slice(&(udp as u16).to_be_bytes());
            h[6] = 17;
            h[7] = hop_limit;
            h[8..24].copy_from_slice(&sgid.0);
            h[24..40].copy_from_slice(&dgid.0);
        }
    }
    h
}

/// The Internet checksum of an IPv4 header whose checksum field is zero.
fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn ipv4_area_is_twenty_zeros_then_a_valid_header() {
        let s = Gid::from_ipv4(Ipv4Addr::new(192, 168, 1, 1));
        let d = Gid::from_ipv4(Ipv4Addr::new(192, 168, 1, 2));
        let h = build(&s, &d, 0, 64, 0, 5, false);
        assert!(h[..20].iter().all(|&b| b == 0));
        assert_eq!(h[20], 0x45);
        // A header with a valid checksum sums to zero.
        assert_eq!(checksum(&h[20..]), 0);
        assert_eq!(&h[32..36], &[192, 168, 1, 1]);
        assert_eq!(&h[36..40], &[192, 168, 1, 2]);
        // total length = 20 + UDP(8) + BTH(12) + DETH(8) + 5 + pad 3 + ICRC 4
        assert_eq!(u16::from_be_bytes([h[22], h[23]]), 20 + 8 + 12 + 8 + 5 + 3 + 4);
        assert_eq!(h[28], 64);
        assert_eq!(h[29], 17);
    }

    #[test]
    fn ipv6_area_is_the_ipv6_header() {
        let mut s = [0u8; 16];
        s[0] = 0xfe;
        s[1] = 0x80;
        s[15] = 1;
        let mut d = s;
        d[15] = 2;
        let h = build(&Gid(s), &Gid(d), 0x12, 7, 0xabcde, 8, true);
        assert_eq!(h[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([h[4], h[5]]) as usize, 8 + 12 + 8 + 4 + 8 + 4);
        assert_eq!(h[6], 17);
        assert_eq!(h[7], 7);
        assert_eq!(&h[8..24], &s);
        assert_eq!(&h[24..40], &d);
    }
}
