//! The RoCEv2 invariant CRC (ICRC): IBTA Annex A17; rxe `rxe_icrc.c`.
//!
//! Read before editing: rxe `rxe_icrc.c` (`rxe_icrc_hdr`: the algorithm and the masked
//! fields, which hardware computes the same way) and the test vectors in the tests below. The
//! ICRC covers the IPv4 Identification, which the kernel picks for a UDP socket and a UDP
//! receiver never sees: hence the pseudo-header variants ([`compute_ipv4_pseudo`] assumes ID
//! 0) and [`solve_ipv4_id`].
//!
//! The ICRC is CRC-32 (IEEE 802.3, what `crc32fast` computes) over eight 0xFF bytes (a
//! pseudo-LRH), then the IP header, the UDP header and the BTH with their variant fields set
//! to all-ones, then the rest of the packet up to the last pad byte. It is sent
//! little-endian: the wire bytes are `icrc.to_le_bytes()` (see
//! [`crate::wire::roce::Packet::icrc`]).
//!
//! Every function here takes `roce`, the bytes from the first byte of the BTH to the last
//! pad byte (the UDP payload without its last four bytes, the ICRC), and returns the ICRC as
//! a `u32`.

use std::net::{Ipv4Addr, Ipv6Addr};

use crc32fast::Hasher;

use super::{bth, Error};

/// Length of the ICRC in bytes (IBTA Annex A17).
pub const ICRC_LEN: usize = 4;

/// CRC-32 of eight 0xFF bytes: the state after the pseudo-LRH (rxe `rxe_icrc.c`).
const SEED: u32 = 0x2144_df1c;

const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;
const IP_PROTO_UDP: u8 = 17;
/// Offset of the Identification field in an IPv4 header.
const IPV4_ID_OFFSET: usize = 4;

/// Feeds `roce` (BTH onwards) into `hasher` with the BTH's ECN byte masked
/// (IBTA Annex A17; rxe `rxe_icrc_hdr`: byte 4 entirely).
fn update_roce(hasher: &mut Hasher, roce: &[u8]) {
    // A short packet (an ACK, a small request) is hashed in one piece, masked in a copy:
    // one pass of the CRC over it costs less than three over its pieces.
    const SHORT: usize = 128;
    if roce.len() > bth::ECN_OFFSET && roce.len() <= SHORT {
        let mut copy = [0u8; SHORT];
        let copy = &mut copy[..roce.len()];
        copy.copy_from_slice(roce);
        copy[bth::ECN_OFFSET] = 0xff;
        hasher.update(copy);
        return;
    }
    match roce.split_at_checked(bth::ECN_OFFSET) {
        Some((head, [_ecn, rest @ ..])) => {
            hasher.update(head);
            hasher.update(&[0xff]);
            hasher.update(rest);
        }
        _ => hasher.update(roce),
    }
}

/// The ICRC of `ip_udp` (already masked IP and UDP headers) followed by `roce`.
fn finish(ip_udp: &[u8], roce: &[u8]) -> u32 {
    let mut hasher = Hasher::new_with_initial(SEED);
    hasher.update(ip_udp);
    update_roce(&mut hasher, roce);
    hasher.finalize()
}

/// Masks the UDP checksum of `udp` (IBTA Annex A17; rxe `rxe_icrc_hdr`).
fn mask_udp(udp: &mut [u8]) {
    udp[6..8].fill(0xff);
}

/// Masks TOS, TTL and the header checksum of an IPv4 header (IBTA Annex A17; `rxe_icrc_hdr`).
fn mask_ipv4(ip: &mut [u8]) {
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10..12].fill(0xff);
}

/// Masks traffic class, flow label and hop limit of an IPv6 header (IBTA Annex A17).
fn mask_ipv6(ip: &mut [u8]) {
    ip[0] |= 0x0f;
    ip[1..4].fill(0xff);
    ip[7] = 0xff;
}

/// The masked IP and UDP headers of `packet` and their length, or `Error`.
fn masked_ip_udp(packet: &[u8]) -> Result<([u8; IPV6_HEADER_LEN + UDP_HEADER_LEN], usize), Error> {
    let (ip_len, protocol) = match packet.first().map(|b| b >> 4) {
        // IHL must be 5: no options (rxe `rxe_icrc_hdr` assumes a 20-byte header).
        Some(4) if packet[0] & 0x0f == 5 => (IPV4_HEADER_LEN, packet.get(9)),
        Some(6) => (IPV6_HEADER_LEN, packet.get(6)),
        _ => return Err(Error),
    };
    let len = ip_len + UDP_HEADER_LEN;
    if protocol != Some(&IP_PROTO_UDP) || packet.len() < len + bth::HEADER_LEN {
        return Err(Error);
    }
    let mut out = [0; IPV6_HEADER_LEN + UDP_HEADER_LEN];
    out[..len].copy_from_slice(&packet[..len]);
    let (ip, udp) = out[..len].split_at_mut(ip_len);
    if ip_len == IPV4_HEADER_LEN {
        mask_ipv4(ip);
    } else {
        mask_ipv6(ip);
    }
    mask_udp(udp);
    Ok((out, len))
}

/// The ICRC of a whole IP packet, from the first byte of the IP header to the last pad byte.
///
/// Rule: IBTA Annex A17 (rxe `rxe_icrc.c`): covers IP header .. pad, with the masks above.
/// Errors: `Error` unless `packet` is IPv4 without options or IPv6 without extension headers,
/// carrying UDP, and holds at least the IP, UDP and BTH headers.
pub fn compute_ip_packet(packet: &[u8]) -> Result<u32, Error> {
    let (headers, len) = masked_ip_udp(packet)?;
    Ok(finish(&headers[..len], &packet[len..]))
}

/// The masked pseudo IPv4 and UDP headers (DF, no options) of one flow, with the three
/// fields that change from packet to packet (IP total length, Identification, UDP length)
/// zero: [`Ipv4Flow`] adds them.
fn ipv4_flow_headers(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN] {
    let mut h = [0; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    h[0] = 0x45; // version 4, IHL 5
    h[6] = 0x40; // DF, fragment offset 0
    h[9] = IP_PROTO_UDP;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    h[20..22].copy_from_slice(&src_port.to_be_bytes());
    h[22..24].copy_from_slice(&dst_port.to_be_bytes());
    let (ip, udp) = h.split_at_mut(IPV4_HEADER_LEN);
    mask_ipv4(ip);
    mask_udp(udp);
    h
}

/// The CRC-32 table of the reflected IEEE polynomial: entry `b` is the register after
/// shifting byte `b` through a zero register (no inversion).
const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// For a byte at offset `at` of the 28-byte pseudo IPv4/UDP header: what each of its 256
/// values adds to the CRC state at the end of the header (the register after that byte
/// and the `27 - at` bytes after it, from a zero register).
const fn header_byte(at: usize) -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut v = 0;
    while v < 256 {
        let mut r = CRC_TABLE[v];
        let mut k = at + 1;
        while k < IPV4_HEADER_LEN + UDP_HEADER_LEN {
            r = CRC_TABLE[(r & 0xff) as usize] ^ (r >> 8);
            k += 1;
        }
        t[v] = r;
        v += 1;
    }
    t
}

/// [`header_byte`] for the bytes of the IP total length (2, 3), the Identification (4, 5)
/// and the UDP length (24, 25).
static VARIABLE_BYTES: [[u32; 256]; 6] = [header_byte(2), header_byte(3), header_byte(4), header_byte(5), header_byte(24), header_byte(25)];

/// One IPv4 flow's share of the ICRC: the CRC state after the pseudo-LRH and the masked
/// pseudo IPv4 and UDP headers of packets from `src:src_port` to `dst:dst_port` (IBTA
/// Annex A17; DF, no options), computed once for the flow; each packet adds its lengths
/// and IPv4 Identification by table lookups and hashes only its own bytes
/// ([`Ipv4Flow::icrc`]).
///
/// Rule: the CRC is affine in the message bits, so the state after a header whose length
/// and ID fields are `x` is the state after the same header with them zero XOR a term
/// linear in `x`, the sum of one table entry per byte of those fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Flow {
    /// The addresses and ports, packed ([`flow_key`]).
    key: u128,
    /// The CRC state after the pseudo-LRH and the headers with zero lengths and ID.
    base: u32,
}

impl Ipv4Flow {
    /// The flow from `src:src_port` to `dst:dst_port`.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> Ipv4Flow {
        let mut hasher = Hasher::new_with_initial(SEED);
        hasher.update(&ipv4_flow_headers(src, dst, src_port, dst_port));
        Ipv4Flow { key: flow_key(src, dst, src_port, dst_port), base: hasher.finalize() }
    }

    /// Whether this is the flow from `src:src_port` to `dst:dst_port`.
    pub fn is(&self, src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> bool {
        self.key == flow_key(src, dst, src_port, dst_port)
    }

    /// The ICRC of `roce` sent in this flow with IPv4 Identification `id`: what
    /// [`ipv4_pseudo_with_id`] returns for the flow's addresses and ports.
    pub fn icrc(&self, id: u16, roce: &[u8]) -> u32 {
        // Lengths count the ICRC too; a length past 16 bits cannot be sent and is truncated.
        let udp_len = (UDP_HEADER_LEN + roce.len() + ICRC_LEN) as u16;
        let [t0, t1] = (IPV4_HEADER_LEN as u16).wrapping_add(udp_len).to_be_bytes();
        let [i0, i1] = id.to_be_bytes();
        let [u0, u1] = udp_len.to_be_bytes();
        let f = &VARIABLE_BYTES;
        let state = self.base
            ^ f[0][usize::from(t0)]
            ^ f[1][usize::from(t1)]
            ^ f[2][usize::from(i0)]
            ^ f[3][usize::from(i1)]
            ^ f[4][usize::from(u0)]
            ^ f[5][usize::from(u1)];
        if roce.len() <= SHORT_ROCE {
            return short_roce(state, roce);
        }
        let mut hasher = Hasher::new_with_initial(state);
        update_roce(&mut hasher, roce);
        hasher.finalize()
    }
}

/// Up to this many bytes (an ACK, a small request), [`Ipv4Flow::icrc`] hashes a packet
/// itself ([`short_roce`]) rather than through `crc32fast`, whose set-up per call costs
/// more than such a packet's bytes.
const SHORT_ROCE: usize = 64;

/// Slicing-by-8 tables: `SLICE8[k][b]` is the register after byte `b` followed by `k`
/// zero bytes, from a zero register ([`CRC_TABLE`] is `SLICE8[0]`).
static SLICE8: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    t[0] = CRC_TABLE;
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let r = t[k - 1][b];
            t[k][b] = CRC_TABLE[(r & 0xff) as usize] ^ (r >> 8);
            b += 1;
        }
        k += 1;
    }
    t
};

/// The CRC register `r` (not inverted) after `bytes`, a byte at a time.
fn crc_bytes(mut r: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        r = CRC_TABLE[((r ^ u32::from(b)) & 0xff) as usize] ^ (r >> 8);
    }
    r
}

/// The CRC register `r` (not inverted) after `bytes`, eight at a time (slicing-by-8).
fn crc_slice8(mut r: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let lo = r ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let t = &SLICE8;
        r = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][usize::from(c[4])]
            ^ t[2][usize::from(c[5])]
            ^ t[1][usize::from(c[6])]
            ^ t[0][usize::from(c[7])];
    }
    crc_bytes(r, chunks.remainder())
}

/// What `crc32fast` gives from state `state` over `roce` with the BTH's ECN byte masked
/// ([`update_roce`]), for a short packet.
fn short_roce(state: u32, roce: &[u8]) -> u32 {
    let r = !state;
    let r = match roce.split_at_checked(bth::ECN_OFFSET) {
        Some((head, [_ecn, rest @ ..])) => crc_slice8(crc_bytes(crc_bytes(r, head), &[0xff]), rest),
        _ => crc_slice8(r, roce),
    };
    !r
}

/// A flow's addresses and ports as one number, compared at once.
fn flow_key(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> u128 {
    (u128::from(src.to_bits()) << 64) | (u128::from(dst.to_bits()) << 32) | (u128::from(src_port) << 16) | u128::from(dst_port)
}

/// As [`compute_ipv4_pseudo`] for a packet sent with IPv4 Identification `id` (rxe and
/// NICs send non-zero IDs; docs/rocev2-wire.md §2.5). A sender or receiver that meets
/// one flow many times keeps its [`Ipv4Flow`] instead.
pub fn ipv4_pseudo_with_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    id: u16,
    roce: &[u8],
) -> u32 {
    Ipv4Flow::new(src, dst, src_port, dst_port).icrc(id, roce)
}

/// The ICRC of `roce` as sent over IPv4 by an unconnected `IP_PMTUDISC_DO` UDP socket:
/// IPv4 header with ID 0, DF, no options (Linux `ip_select_ident_segs` gives the DF packets
/// of an unconnected socket ID 0).
///
/// TOS, TTL and both checksums are masked (IBTA Annex A17), so they are not inputs; the IP total
/// length and UDP length are derived from `roce.len()` plus the ICRC.
pub fn compute_ipv4_pseudo(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    roce: &[u8],
) -> u32 {
    ipv4_pseudo_with_id(src, dst, src_port, dst_port, 0, roce)
}

/// The ICRC of `roce` as sent over IPv6 without extension headers (IPv6 has no
/// Identification, so it is fully predictable). Traffic class, flow label and hop limit are
/// masked.
pub fn compute_ipv6_pseudo(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    src_port: u16,
    dst_port: u16,
    roce: &[u8],
) -> u32 {
    let udp_len = (UDP_HEADER_LEN + roce.len() + ICRC_LEN) as u16;
    let mut h = [0; IPV6_HEADER_LEN + UDP_HEADER_LEN];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&udp_len.to_be_bytes()); // payload length = UDP length
    h[6] = IP_PROTO_UDP;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h[40..42].copy_from_slice(&src_port.to_be_bytes());
    h[42..44].copy_from_slice(&dst_port.to_be_bytes());
    h[44..46].copy_from_slice(&udp_len.to_be_bytes());
    let (ip, udp) = h.split_at_mut(IPV6_HEADER_LEN);
    mask_ipv6(ip);
    mask_udp(udp);
    finish(&h, roce)
}

/// Multiplies a CRC state by x^(8n): the linear effect of appending `n` zero bytes.
fn shift(crc: u32, n: u64) -> u32 {
    let mut hasher = Hasher::new_with_initial_len(crc, 0);
    hasher.combine(&Hasher::new_with_initial_len(0, n));
    hasher.finalize()
}

/// Finds the IPv4 Identification under which `icrc` is the ICRC of `roce` with the pseudo
/// header of [`compute_ipv4_pseudo`], or `None` if no ID fits.
///
/// Rule: the CRC is affine in the message bits, so `ICRC(ID = x) = ICRC(ID = 0) ⊕ L(x)` with
/// `L` linear in the 16 ID bits; `L(1 << i)` is the CRC of that bit shifted over the bytes
/// after the ID field. Gaussian elimination over GF(2) solves `L(x) = icrc ⊕ ICRC(ID = 0)`.
/// The 16 basis vectors are independent, so a solution is unique, and a corrupted packet is
/// accepted with probability 2^-16.
///
/// A UDP socket never sees the IPv4 ID that rxe and NICs put on the wire; this recovers it
/// (and with it the IPv4 header of a UD receive's GRH area). `icrc` is the value read from
/// the packet (`roce::Packet::icrc`); `roce` excludes it.
pub fn solve_ipv4_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    roce: &[u8],
    icrc: u32,
) -> Option<u16> {
    let syndrome = icrc ^ compute_ipv4_pseudo(src, dst, src_port, dst_port, roce);
    Ipv4IdBasis::new(roce.len()).solve(syndrome)
}

/// How the IPv4 Identification enters the ICRC of a RoCE packet of one length: the reduced
/// GF(2) basis of [`solve_ipv4_id`], which depends only on the packet's length (how many
/// bytes follow the ID field). Building it costs sixteen CRC shifts; solving with it is at
/// most 32 XORs, so a receiver that meets packets of a few lengths with non-zero IDs (rxe,
/// NICs, a peer's GSO trains) keeps one per length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv4IdBasis {
    roce_len: usize,
    /// rows[p]: a reduced basis vector whose highest set bit is p, and the ID bits that
    /// make it.
    rows: [(u32, u16); 32],
}

impl Ipv4IdBasis {
    /// The basis for RoCE packets of `roce_len` bytes, BTH to the end of the payload and
    /// pad (the ICRC excluded).
    pub fn new(roce_len: usize) -> Ipv4IdBasis {
        let after_id = (IPV4_HEADER_LEN - IPV4_ID_OFFSET - 2 + UDP_HEADER_LEN + roce_len) as u64;
        let zero = crc32fast::hash(&[0, 0]);
        let mut rows = [(0u32, 0u16); 32];
        for bit in 0..16 {
            let id = 1u16 << bit;
            let mut vector = shift(crc32fast::hash(&id.to_be_bytes()) ^ zero, after_id);
            let mut combo = id;
            while vector != 0 {
                let pivot = 31 - vector.leading_zeros() as usize;
                if rows[pivot].0 == 0 {
                    rows[pivot] = (vector, combo);
                    break;
                }
                vector ^= rows[pivot].0;
                combo ^= rows[pivot].1;
            }
        }
        Ipv4IdBasis { roce_len, rows }
    }

    /// The packet length this basis is for.
    pub fn roce_len(&self) -> usize {
        self.roce_len
    }

    /// The ID `x` with `ICRC(ID = x) = ICRC(ID = 0) ⊕ syndrome`, where `syndrome` is the
    /// packet's ICRC XOR the one [`compute_ipv4_pseudo`] gives it (ID 0); `None` if no ID
    /// fits.
    pub fn solve(&self, syndrome: u32) -> Option<u16> {
        let (mut rest, mut id) = (syndrome, 0u16);
        while rest != 0 {
            let (vector, combo) = self.rows[31 - rest.leading_zeros() as usize];
            if vector == 0 {
                return None;
            }
            rest ^= vector;
            id ^= combo;
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::{hex, V1, V1_MASKED, V2, V3, V4};

    /// Splits IP..ICRC into IP..pad and the ICRC value (read little-endian).
    fn split(wire: &[u8]) -> (&[u8], u32) {
        let (body, icrc) = wire.split_at(wire.len() - ICRC_LEN);
        (body, u32::from_le_bytes(icrc.try_into().unwrap()))
    }

    const V1_SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);
    const V1_DST: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);
    const V3_SRC: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
    const V3_DST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
    const V4_SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 17, 1);
    const V4_DST: Ipv4Addr = Ipv4Addr::new(10, 0, 18, 1);
    const ROCE_PORT: u16 = 4791;

    #[test]
    fn seed_is_crc_of_eight_ones() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), SEED);
    }

    #[test]
    fn icrc_v1_ipv4_send_only() {
        let wire = hex(V1);
        let (body, icrc) = split(&wire);
        assert_eq!(icrc, 0x4ece_fc78);
        assert_eq!(icrc.to_le_bytes(), [0x78, 0xfc, 0xce, 0x4e]);
        assert_eq!(compute_ip_packet(body), Ok(0x4ece_fc78));
    }

    #[test]
    fn icrc_v1_masked_buffer_matches() {
        let wire = hex(V1);
        let (body, _) = split(&wire);
        let (headers, len) = masked_ip_udp(body).unwrap();
        let mut masked = headers[..len].to_vec();
        masked.extend_from_slice(&body[len..]);
        masked[len + bth::ECN_OFFSET] = 0xff;
        assert_eq!(masked, hex(V1_MASKED));
        let mut plain = vec![0xff; 8];
        plain.extend_from_slice(&masked);
        assert_eq!(crc32fast::hash(&plain), 0x4ece_fc78);
    }

    #[test]
    fn icrc_v1_masked_fields_do_not_change_it() {
        let wire = hex(V1);
        let mut body = split(&wire).0.to_vec();
        body[1] = 3; // TOS
        body[8] = 7; // TTL
        body[10..12].copy_from_slice(&[0x12, 0x34]); // IPv4 header checksum
        body[26..28].copy_from_slice(&[0xab, 0xcd]); // UDP checksum
        body[28 + 4] = 0xc0; // FECN = BECN = 1
        assert_eq!(compute_ip_packet(&body), Ok(0x4ece_fc78));
    }

    #[test]
    fn icrc_v1_covered_fields_change_it() {
        let wire = hex(V1);
        let body = split(&wire).0;
        for at in [
            0x04, 0x06, 0x09, 0x0c, 0x14, 0x18, 0x1c, 0x1d, 0x21, 0x25, 0x28,
        ] {
            let mut changed = body.to_vec();
            changed[at] ^= 0x01;
            assert_ne!(compute_ip_packet(&changed), Ok(0x4ece_fc78), "byte {at}");
        }
    }

    #[test]
    fn icrc_v1_with_id_zero() {
        let wire = hex(V1);
        let mut body = split(&wire).0.to_vec();
        body[4..6].fill(0);
        let expected = u32::from_le_bytes([0xe9, 0x55, 0xea, 0x37]);
        assert_eq!(compute_ip_packet(&body), Ok(expected));
        // The same from the synthesized header of `compute_ipv4_pseudo` (ID 0, DF, no options).
        assert_eq!(
            compute_ipv4_pseudo(V1_SRC, V1_DST, 0xc123, ROCE_PORT, &body[28..]),
            expected
        );
    }

    #[test]
    fn icrc_v2_ipv4_acknowledge() {
        let wire = hex(V2);
        let (body, icrc) = split(&wire);
        assert_eq!(icrc, 0xe576_c670);
        assert_eq!(compute_ip_packet(body), Ok(0xe576_c670));
        // tshark's `infiniband.invariant.crc` shows the wire bytes as a big-endian u32.
        assert_eq!(u32::from_be_bytes(icrc.to_le_bytes()), 0x70c6_76e5);
    }

    #[test]
    fn icrc_v3_ipv6_send_only() {
        let wire = hex(V3);
        let (body, icrc) = split(&wire);
        assert_eq!(icrc, 0xd1f2_8bb5);
        assert_eq!(compute_ip_packet(body), Ok(0xd1f2_8bb5));
        let (headers, _) = masked_ip_udp(body).unwrap();
        assert_eq!(headers[..8], hex("6fffffff002011ff")[..]);
        assert_eq!(
            compute_ipv6_pseudo(V3_SRC, V3_DST, 0xc123, ROCE_PORT, &body[48..]),
            0xd1f2_8bb5
        );
    }

    #[test]
    fn icrc_v4_hardware_cnp() {
        let wire = hex(V4);
        assert_eq!(wire.len(), 60);
        let (body, icrc) = split(&wire);
        assert_eq!(icrc, u32::from_le_bytes([0x82, 0xfd, 0x00, 0x2a]));
        assert_eq!(compute_ip_packet(body), Ok(icrc));
    }

    #[test]
    fn solve_ipv4_id_recovers_v4_hardware_id() {
        let wire = hex(V4);
        let (body, icrc) = split(&wire);
        assert_eq!(
            solve_ipv4_id(V4_SRC, V4_DST, 0, ROCE_PORT, &body[28..], icrc),
            Some(0x718c)
        );
    }

    #[test]
    fn solve_ipv4_id_recovers_v1_and_v2_ids() {
        for (vector, src, dst) in [(V1, V1_SRC, V1_DST), (V2, V1_DST, V1_SRC)] {
            let wire = hex(vector);
            let (body, icrc) = split(&wire);
            assert_eq!(
                solve_ipv4_id(src, dst, 0xc123, ROCE_PORT, &body[28..], icrc),
                Some(0x1234)
            );
        }
    }

    /// One basis per length serves every packet of that length: each ID a packet was sealed
    /// with comes back, and a basis of another length does not find it.
    #[test]
    fn one_basis_solves_every_id_of_its_length() {
        let roce: Vec<u8> = (0..1040u32).map(|i| (i * 7) as u8).collect();
        let (src, dst) = (Ipv4Addr::new(10, 66, 0, 1), Ipv4Addr::new(10, 66, 0, 2));
        let basis = Ipv4IdBasis::new(roce.len());
        assert_eq!(basis.roce_len(), 1040);
        let zero = compute_ipv4_pseudo(src, dst, 4791, 4791, &roce);
        for id in [0u16, 1, 2, 63, 0x1234, 0xfffe, 0xffff] {
            let icrc = ipv4_pseudo_with_id(src, dst, 4791, 4791, id, &roce);
            assert_eq!(basis.solve(icrc ^ zero), Some(id), "id {id:#x}");
            assert_eq!(solve_ipv4_id(src, dst, 4791, 4791, &roce, icrc), Some(id));
        }
        let other = Ipv4IdBasis::new(1056);
        let icrc = ipv4_pseudo_with_id(src, dst, 4791, 4791, 5, &roce);
        assert_ne!(other.solve(icrc ^ zero), Some(5));
    }

    #[test]
    fn solve_ipv4_id_of_id_zero_packet_is_zero() {
        let wire = hex(V1);
        let roce = &split(&wire).0[28..];
        let icrc = compute_ipv4_pseudo(V1_SRC, V1_DST, 0xc123, ROCE_PORT, roce);
        assert_eq!(
            solve_ipv4_id(V1_SRC, V1_DST, 0xc123, ROCE_PORT, roce, icrc),
            Some(0)
        );
    }

    #[test]
    fn solve_ipv4_id_refuses_corrupted_packet() {
        let wire = hex(V4);
        let (body, icrc) = split(&wire);
        let mut roce = body[28..].to_vec();
        roce[20] ^= 0x01;
        assert_eq!(
            solve_ipv4_id(V4_SRC, V4_DST, 0, ROCE_PORT, &roce, icrc),
            None
        );
        assert_eq!(
            solve_ipv4_id(V4_SRC, V4_DST, 0, ROCE_PORT, &body[28..], icrc ^ 1),
            None
        );
        // The wrong source address is refused as well.
        let other = Ipv4Addr::new(10, 0, 17, 2);
        assert_eq!(
            solve_ipv4_id(other, V4_DST, 0, ROCE_PORT, &body[28..], icrc),
            None
        );
    }

    #[test]
    fn compute_ip_packet_refuses_what_it_cannot_mask() {
        let wire = hex(V1);
        let body = split(&wire).0;
        assert_eq!(compute_ip_packet(&[]), Err(Error));
        let mut options = body.to_vec();
        options[0] = 0x46;
        assert_eq!(compute_ip_packet(&options), Err(Error));
        let mut tcp = body.to_vec();
        tcp[9] = 6;
        assert_eq!(compute_ip_packet(&tcp), Err(Error));
        let mut v5 = body.to_vec();
        v5[0] = 0x55;
        assert_eq!(compute_ip_packet(&v5), Err(Error));
        for len in 0..20 + 8 + 12 {
            assert_eq!(compute_ip_packet(&body[..len]), Err(Error), "len {len}");
        }
        assert!(compute_ip_packet(&body[..40]).is_ok());
        let v3 = hex(V3);
        for len in 0..40 + 8 + 12 {
            assert_eq!(compute_ip_packet(&v3[..len]), Err(Error), "len {len}");
        }
    }

    #[test]
    fn pseudo_functions_accept_any_length() {
        // Network input never panics, even shorter than a BTH.
        for len in 0..8 {
            let roce = [0x5a; 8];
            let a = compute_ipv4_pseudo(V1_SRC, V1_DST, 1, 2, &roce[..len]);
            let b = compute_ipv6_pseudo(V3_SRC, V3_DST, 1, 2, &roce[..len]);
            assert_eq!(
                solve_ipv4_id(V1_SRC, V1_DST, 1, 2, &roce[..len], a),
                Some(0)
            );
            assert_ne!(a, b);
        }
    }

    /// A whole IPv4/UDP packet from `src:sport` to `dst:dport` with ID `id` around `roce`,
    /// its masked fields (TOS, TTL, checksums, ECN) set to `noise`.
    fn ipv4_packet(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, id: u16, roce: &[u8], noise: u8) -> Vec<u8> {
        let udp_len = (UDP_HEADER_LEN + roce.len() + ICRC_LEN) as u16;
        let mut p = vec![0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
        p[0] = 0x45;
        p[1] = noise;
        p[2..4].copy_from_slice(&(IPV4_HEADER_LEN as u16 + udp_len).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = noise;
        p[9] = IP_PROTO_UDP;
        p[10..12].fill(noise);
        p[12..16].copy_from_slice(&src.octets());
        p[16..20].copy_from_slice(&dst.octets());
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[24..26].copy_from_slice(&udp_len.to_be_bytes());
        p[26..28].fill(noise);
        p.extend_from_slice(roce);
        if let Some(ecn) = p.get_mut(IPV4_HEADER_LEN + UDP_HEADER_LEN + bth::ECN_OFFSET) {
            *ecn = noise;
        }
        p
    }

    /// A flow's ICRC, its header computed once and each packet's lengths and ID added by
    /// table, is the ICRC of the whole packet hashed byte by byte (`compute_ip_packet`),
    /// for every length (shorter than a BTH, short enough to be hashed in one piece,
    /// longer) and for IDs that set every bit of both ID bytes.
    #[test]
    fn a_flow_gives_the_icrc_of_the_whole_packet() {
        let flows = [(V1_SRC, V1_DST, 49152, 4791), (Ipv4Addr::new(10, 73, 0, 2), Ipv4Addr::new(10, 73, 0, 1), 4791, 33000)];
        for (src, dst, sport, dport) in flows {
            let flow = Ipv4Flow::new(src, dst, sport, dport);
            assert!(flow.is(src, dst, sport, dport));
            assert!(!flow.is(src, dst, sport, dport ^ 1) && !flow.is(dst, src, sport, dport));
            for len in [0, 3, 4, 5, 12, 16, 20, 36, 127, 128, 129, 1024 + 28, 4096 + 12] {
                let roce: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                for id in [0u16, 1, 0x00ff, 0xff00, 0x718c, 0xffff] {
                    let whole = ipv4_packet(src, dst, sport, dport, id, &roce, (id as u8) ^ 0x5a);
                    let want = compute_ip_packet(&whole).unwrap_or_else(|_| finish(&masked_ip_udp_short(&whole), &roce));
                    assert_eq!(flow.icrc(id, &roce), want, "len {len} id {id:#x}");
                    assert_eq!(ipv4_pseudo_with_id(src, dst, sport, dport, id, &roce), want);
                }
            }
        }
    }

    /// The masked IPv4 and UDP headers of a packet too short for `compute_ip_packet`
    /// (which wants a whole BTH).
    fn masked_ip_udp_short(packet: &[u8]) -> Vec<u8> {
        let mut h = packet[..IPV4_HEADER_LEN + UDP_HEADER_LEN].to_vec();
        let (ip, udp) = h.split_at_mut(IPV4_HEADER_LEN);
        mask_ipv4(ip);
        mask_udp(udp);
        h
    }

    /// The short path of [`Ipv4Flow::icrc`] (its own slicing-by-8 CRC) gives what
    /// crc32fast gives, from any state, for every length up to and past [`SHORT_ROCE`].
    #[test]
    fn short_packets_hash_as_crc32fast_does() {
        let data: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for state in [0, 1, SEED, 0xdead_beef, u32::MAX] {
            for len in 0..=SHORT_ROCE + 9 {
                let roce = &data[len..2 * len];
                let mut hasher = Hasher::new_with_initial(state);
                update_roce(&mut hasher, roce);
                assert_eq!(short_roce(state, roce), hasher.finalize(), "state {state:#x} len {len}");
            }
        }
    }
}
