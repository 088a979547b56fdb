//! A pcap writer for RoCEv2 packets, without I/O of its own: it writes into any
//! [`std::io::Write`] the caller hands it, with timestamps the caller supplies.
//!
//! Read before editing: the pcap file format (draft-ietf-opsawg-pcap: the 24-byte file
//! header, a 16-byte record header per packet), docs/rocev2-wire.md §1.1 (what rxe puts in the
//! IPv4, IPv6 and UDP headers) and §6 (tshark reads these files:
//! `tshark -r FILE -d udp.port==4791,infiniband`), RFC 8200 §8.1 (the UDP checksum over
//! IPv6).
//!
//! A UDP transport never sees the IP and UDP headers of what it sends or receives, so each
//! record is rebuilt from what the transport knows: addresses, ports, the IPv4
//! Identification (0 for what an `IP_PMTUDISC_DO` socket sends; the one
//! [`crate::wire::icrc::solve_ipv4_id`] recovers for what arrives; IPv6 has none) and the
//! UDP payload (BTH to ICRC, with the real ICRC). The records are raw IP (`LINKTYPE_RAW`:
//! IPv4 and IPv6 records in one file, told apart by the version nibble), so the ICRC of a
//! record can be checked from the record alone (`icrc::compute_ip_packet`); [`records`] and
//! [`parse_ip_udp`] read such a file back.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// pcap magic for microsecond timestamps, written in the writer's byte order (little-endian).
const MAGIC_USEC: u32 = 0xa1b2_c3d4;
/// `LINKTYPE_RAW`: each record starts with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Longest record kept (the snap length in the file header).
const SNAPLEN: u32 = 65_535;
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;
const IP_PROTO_UDP: u8 = 17;

/// The outer headers of one IPv4 RoCEv2 datagram, as far as the transport knows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Udp {
    /// IPv4 source.
    pub src: Ipv4Addr,
    /// IPv4 destination.
    pub dst: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// IPv4 Identification (covered by the ICRC, docs/rocev2-wire.md §2.2).
    pub id: u16,
    /// TTL (masked in the ICRC; a socket receiver does not see it).
    pub ttl: u8,
}

/// The outer headers of one IPv6 RoCEv2 datagram, as far as the transport knows them.
///
/// Traffic class, flow label and hop limit are masked in the ICRC (docs/rocev2-wire.md §2.2); a
/// socket sender does not choose them per packet, nor does a socket receiver see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Udp {
    /// IPv6 source.
    pub src: Ipv6Addr,
    /// IPv6 destination.
    pub dst: Ipv6Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Traffic class (rxe: `grh.traffic_class`).
    pub traffic_class: u8,
    /// Flow label, 20 bits (rxe sends 0); higher bits are ignored.
    pub flow_label: u32,
    /// Hop limit (rxe: `grh.hop_limit`).
    pub hop_limit: u8,
}

/// The outer headers of one RoCEv2 datagram of either IP version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpUdp {
    /// An IPv4 datagram.
    V4(Ipv4Udp),
    /// An IPv6 datagram.
    V6(Ipv6Udp),
}

impl IpUdp {
    /// The IP source.
    pub fn src(&self) -> IpAddr {
        match self {
            IpUdp::V4(h) => h.src.into(),
            IpUdp::V6(h) => h.src.into(),
        }
    }

    /// The IP destination.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpUdp::V4(h) => h.dst.into(),
            IpUdp::V6(h) => h.dst.into(),
        }
    }

    /// The UDP source port.
    pub fn src_port(&self) -> u16 {
        match self {
            IpUdp::V4(h) => h.src_port,
            IpUdp::V6(h) => h.src_port,
        }
    }

    /// The UDP destination port.
    pub fn dst_port(&self) -> u16 {
        match self {
            IpUdp::V4(h) => h.dst_port,
            IpUdp::V6(h) => h.dst_port,
        }
    }
}

/// Writes a pcap file: the file header at construction, then one record per packet.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    packets: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header (version 2.4, microsecond timestamps, `linktype`).
    ///
    /// Errors: those of `out`.
    pub fn new(mut out: W, linktype: u32) -> io::Result<PcapWriter<W>> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_USEC.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs: 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&linktype.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, packets: 0 })
    }

    /// Writes one record holding `data` as captured at `ts` (time since the Unix epoch).
    ///
    /// Rule: pcap record header: seconds, microseconds, captured length, original length;
    /// a record longer than the snap length is cut, its original length kept.
    /// Errors: those of the writer.
    pub fn write_record(&mut self, ts: Duration, data: &[u8]) -> io::Result<()> {
        let caplen = data.len().min(SNAPLEN as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(data.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&data[..caplen])?;
        self.packets += 1;
        Ok(())
    }

    /// Writes one IPv4/UDP datagram whose UDP payload is `udp_payload` (BTH to ICRC), with
    /// the headers rxe would put around it (for a `LINKTYPE_RAW` file).
    ///
    /// Rule: docs/rocev2-wire.md §1.1: version 4, IHL 5, TOS 0, DF, fragment offset 0, protocol
    /// 17, a valid header checksum; UDP length 8 + payload, UDP checksum 0.
    /// Errors: those of the writer; `InvalidInput` if the datagram exceeds 65 535 bytes.
    pub fn write_ipv4_udp(&mut self, ts: Duration, hdr: &Ipv4Udp, udp_payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(IPV4_HEADER_LEN + UDP_HEADER_LEN + udp_payload.len());
        ipv4_udp_datagram(hdr, udp_payload, &mut buf)?;
        self.write_record(ts, &buf)
    }

    /// Writes one IPv6/UDP datagram whose UDP payload is `udp_payload` (BTH to ICRC), with
    /// the headers of `hdr` around it (for a `LINKTYPE_RAW` file).
    ///
    /// Rule: docs/rocev2-wire.md §1.1: version 6, next header 17 (UDP, no extension headers),
    /// payload length = UDP length = 8 + payload; the UDP checksum is computed (RFC 8200
    /// §8.1: mandatory over IPv6; rxe sends 0, which receivers of RoCEv2 accept as it is
    /// masked in the ICRC, but a capture reader would flag it).
    /// Errors: those of the writer; `InvalidInput` if the UDP datagram exceeds 65 535 bytes
    /// (no jumbograms).
    pub fn write_ipv6_udp(&mut self, ts: Duration, hdr: &Ipv6Udp, udp_payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(IPV6_HEADER_LEN + UDP_HEADER_LEN + udp_payload.len());
        ipv6_udp_datagram(hdr, udp_payload, &mut buf)?;
        self.write_record(ts, &buf)
    }

    /// Records written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes the writer.
    ///
    /// Errors: those of the writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Appends to `out` the IPv4 and UDP headers of [`PcapWriter::write_ipv4_udp`], then
/// `udp_payload`.
///
/// Errors: `InvalidInput` if the datagram exceeds 65 535 bytes.
pub fn ipv4_udp_datagram(hdr: &Ipv4Udp, udp_payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let total = IPV4_HEADER_LEN + UDP_HEADER_LEN + udp_payload.len();
    let total = u16::try_from(total).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let udp_len = total - IPV4_HEADER_LEN as u16;
    let mut ip = [0u8; IPV4_HEADER_LEN];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&hdr.id.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = hdr.ttl;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&hdr.src.octets());
    ip[16..20].copy_from_slice(&hdr.dst.octets());
    let sum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&ip);
    out.extend_from_slice(&hdr.src_port.to_be_bytes());
    out.extend_from_slice(&hdr.dst_port.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(udp_payload);
    Ok(())
}

/// Appends to `out` the IPv6 and UDP headers of [`PcapWriter::write_ipv6_udp`], then
/// `udp_payload`.
///
/// Errors: `InvalidInput` if the UDP datagram exceeds 65 535 bytes.
pub fn ipv6_udp_datagram(hdr: &Ipv6Udp, udp_payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let udp_len = UDP_HEADER_LEN + udp_payload.len();
    let udp_len = u16::try_from(udp_len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut ip = [0u8; IPV6_HEADER_LEN];
    // Version 6, traffic class, flow label: 4 + 8 + 20 bits.
    let first = (6u32 << 28) | (u32::from(hdr.traffic_class) << 20) | (hdr.flow_label & 0x000f_ffff);
    ip[0..4].copy_from_slice(&first.to_be_bytes());
    ip[4..6].copy_from_slice(&udp_len.to_be_bytes()); // payload length: the UDP datagram
    ip[6] = IP_PROTO_UDP;
    ip[7] = hdr.hop_limit;
    ip[8..24].copy_from_slice(&hdr.src.octets());
    ip[24..40].copy_from_slice(&hdr.dst.octets());
    out.extend_from_slice(&ip);
    let udp_at = out.len();
    out.extend_from_slice(&hdr.src_port.to_be_bytes());
    out.extend_from_slice(&hdr.dst_port.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(udp_payload);
    let sum = udp_ipv6_checksum(hdr.src, hdr.dst, &out[udp_at..]);
    out[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
    Ok(())
}

/// The one's complement sum (RFC 1071) of `bytes` as big-endian 16-bit words (an odd last
/// byte padded with zero), added to `sum`, not yet folded.
fn ones_sum(sum: u64, bytes: &[u8]) -> u64 {
    sum + bytes
        .chunks(2)
        .map(|c| u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum::<u64>()
}

/// Folds a sum of [`ones_sum`] to 16 bits and complements it.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The Internet checksum (RFC 1071) of an IPv4 header whose checksum field is zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    fold(ones_sum(0, header))
}

/// The UDP checksum of `udp` (header, checksum field zero, and payload) sent from `src` to
/// `dst` over IPv6.
///
/// Rule: RFC 8200 §8.1: the Internet checksum over the pseudo header (source, destination,
/// 32-bit upper-layer length, three zero bytes, next header 17) and the UDP datagram; a
/// result of 0 is sent as 0xffff (0 means "no checksum", which IPv6 forbids for UDP).
pub fn udp_ipv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, udp: &[u8]) -> u16 {
    let mut sum = ones_sum(0, &src.octets());
    sum = ones_sum(sum, &dst.octets());
    sum = ones_sum(sum, &(udp.len() as u32).to_be_bytes());
    sum = ones_sum(sum, &[0, 0, 0, IP_PROTO_UDP]);
    match fold(ones_sum(sum, udp)) {
        0 => 0xffff,
        s => s,
    }
}

/// One record of a pcap file read by [`records`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Time since the Unix epoch (microsecond or nanosecond files).
    pub ts: Duration,
    /// The captured bytes.
    pub data: &'a [u8],
}

/// The link type and records of a classic pcap file held in `file` (either byte order,
/// microsecond or nanosecond timestamps); `None` if it is not one, or is cut short.
pub fn records(file: &[u8]) -> Option<(u32, Vec<Record<'_>>)> {
    let header = file.get(..24)?;
    let magic = u32::from_le_bytes(header[0..4].try_into().ok()?);
    let (le, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        _ => return None,
    };
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(bytes) } else { u32::from_be_bytes(bytes) })
    };
    let linktype = u32_at(header, 20)?;
    let mut out = Vec::new();
    let mut at = 24;
    while at < file.len() {
        let secs = u32_at(file, at)?;
        let frac = u32_at(file, at + 4)?;
        let caplen = u32_at(file, at + 8)? as usize;
        let data = file.get(at + 16..at + 16 + caplen)?;
        let ts = Duration::from_secs(u64::from(secs))
            + if nanos { Duration::from_nanos(u64::from(frac)) } else { Duration::from_micros(u64::from(frac)) };
        out.push(Record { ts, data });
        at += 16 + caplen;
    }
    Some((linktype, out))
}

/// One UDP datagram of a raw IP record ([`parse_ip_udp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The outer headers (for IPv4: TTL and Identification as recorded; for IPv6: traffic
    /// class, flow label and hop limit as recorded).
    pub header: IpUdp,
    /// The IP packet: IP header to the end of the UDP payload (`icrc::compute_ip_packet`
    /// takes it without its last four bytes).
    pub packet: &'a [u8],
    /// The UDP payload (for RoCEv2: BTH to ICRC).
    pub udp_payload: &'a [u8],
}

/// The UDP datagram of a raw IP record (`LINKTYPE_RAW`, or what follows an Ethernet
/// header): IPv4 without options (IHL 5) or IPv6 without extension headers (next header
/// 17), the encapsulations of RoCEv2 (docs/rocev2-wire.md §1.1), told apart by the version
/// nibble; `None` for anything else or a record too short for the IP and UDP headers.
///
/// Rule: the packet ends where the IP length says (IPv4 total length; IPv6 40 + payload
/// length), so bytes a link adds after it (Ethernet padding) are not part of it; a record
/// cut short by the snap length yields what was captured. UDP checksums are not checked.
pub fn parse_ip_udp(data: &[u8]) -> Option<Datagram<'_>> {
    let be16 = |at: usize| u16::from_be_bytes([data[at], data[at + 1]]);
    let (header, ip_len, total) = match data.first()? >> 4 {
        4 if data.len() >= IPV4_HEADER_LEN + UDP_HEADER_LEN && data[0] & 0x0f == 5 && data[9] == IP_PROTO_UDP => {
            let u = IPV4_HEADER_LEN;
            let h = Ipv4Udp {
                src: Ipv4Addr::new(data[12], data[13], data[14], data[15]),
                dst: Ipv4Addr::new(data[16], data[17], data[18], data[19]),
                src_port: be16(u),
                dst_port: be16(u + 2),
                id: be16(4),
                ttl: data[8],
            };
            (IpUdp::V4(h), IPV4_HEADER_LEN, usize::from(be16(2)))
        }
        6 if data.len() >= IPV6_HEADER_LEN + UDP_HEADER_LEN && data[6] == IP_PROTO_UDP => {
            let u = IPV6_HEADER_LEN;
            let first = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
            let addr = |at: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&data[at..at + 16]);
                Ipv6Addr::from(a)
            };
            let h = Ipv6Udp {
                src: addr(8),
                dst: addr(24),
                src_port: be16(u),
                dst_port: be16(u + 2),
                traffic_class: (first >> 20) as u8,
                flow_label: first & 0x000f_ffff,
                hop_limit: data[7],
            };
            (IpUdp::V6(h), IPV6_HEADER_LEN, IPV6_HEADER_LEN + usize::from(be16(4)))
        }
        _ => return None,
    };
    if total < ip_len + UDP_HEADER_LEN {
        return None;
    }
    let packet = &data[..total.min(data.len())];
    Some(Datagram { header, packet, udp_payload: &packet[ip_len + UDP_HEADER_LEN..] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::icrc;
    use crate::wire::tests::{hex, V1, V3};

    const V1_HDR: Ipv4Udp = Ipv4Udp {
        src: Ipv4Addr::new(192, 168, 1, 1),
        dst: Ipv4Addr::new(192, 168, 1, 2),
        src_port: 0xc123,
        dst_port: 4791,
        id: 0x1234,
        ttl: 64,
    };

    #[test]
    fn pcap_header_is_classic_microsecond_little_endian() {
        let w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        let bytes = w.into_inner();
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&bytes[4..8], &[2, 0, 4, 0]);
        assert_eq!(&bytes[20..24], &[101, 0, 0, 0]);
    }

    /// The rebuilt datagram of V1's UDP payload is V1 itself (docs/rocev2-wire.md §2.4), so the
    /// ICRC of a record checks out from the record alone.
    #[test]
    fn pcap_ipv4_udp_record_rebuilds_v1() {
        let wire = hex(V1);
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        w.write_ipv4_udp(Duration::new(1_700_000_000, 123_456_000), &V1_HDR, &wire[28..]).unwrap();
        assert_eq!(w.packets(), 1);
        let file = w.into_inner();
        let (linktype, recs) = records(&file).unwrap();
        assert_eq!(linktype, LINKTYPE_RAW);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].ts, Duration::new(1_700_000_000, 123_456_000));
        assert_eq!(recs[0].data, &wire[..], "headers, checksum and payload as in V1");
        let (body, tail) = recs[0].data.split_at(recs[0].data.len() - 4);
        assert_eq!(icrc::compute_ip_packet(body), Ok(u32::from_le_bytes(tail.try_into().unwrap())));
    }

    /// V3's headers (docs/rocev2-wire.md §2.4: traffic class 0x12, flow label 0xabcde, hop
    /// limit 64).
    const V3_HDR: Ipv6Udp = Ipv6Udp {
        src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        src_port: 0xc123,
        dst_port: 4791,
        traffic_class: 0x12,
        flow_label: 0xabcde,
        hop_limit: 64,
    };

    /// The rebuilt datagram of V3's UDP payload is V3 itself, UDP checksum included (V3
    /// carries a correct one, 0x99e5), and reads back as the header it was written with.
    #[test]
    fn pcap_ipv6_udp_record_round_trips_v3() {
        let wire = hex(V3);
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        w.write_ipv6_udp(Duration::new(1_700_000_001, 5_000), &V3_HDR, &wire[48..]).unwrap();
        assert_eq!(w.packets(), 1);
        let file = w.into_inner();
        let (linktype, recs) = records(&file).unwrap();
        assert_eq!(linktype, LINKTYPE_RAW);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].ts, Duration::new(1_700_000_001, 5_000));
        assert_eq!(recs[0].data, &wire[..], "headers, UDP checksum and payload as in V3");
        let d = parse_ip_udp(recs[0].data).unwrap();
        assert_eq!(d.header, IpUdp::V6(V3_HDR));
        assert_eq!(d.packet, &wire[..]);
        assert_eq!(d.udp_payload, &wire[48..]);
        let (body, tail) = d.packet.split_at(d.packet.len() - 4);
        let want = u32::from_le_bytes(tail.try_into().unwrap());
        assert_eq!(icrc::compute_ip_packet(body), Ok(want));
        let roce = &d.udp_payload[..d.udp_payload.len() - 4];
        assert_eq!(icrc::compute_ipv6_pseudo(V3_HDR.src, V3_HDR.dst, 0xc123, 4791, roce), want);
    }

    /// What a transport records (traffic class 0, flow label 0): the ICRC, which masks
    /// both, still checks from the record alone, and the UDP checksum verifies.
    #[test]
    fn pcap_ipv6_udp_record_with_zero_class_and_flow_checks() {
        let wire = hex(V3);
        let hdr = Ipv6Udp { traffic_class: 0, flow_label: 0, ..V3_HDR };
        let mut buf = Vec::new();
        ipv6_udp_datagram(&hdr, &wire[48..], &mut buf).unwrap();
        assert_eq!(&buf[0..4], &[0x60, 0, 0, 0]);
        assert_eq!(&buf[4..], &wire[4..], "all but version/class/flow as in V3");
        let (body, tail) = buf.split_at(buf.len() - 4);
        assert_eq!(icrc::compute_ip_packet(body), Ok(u32::from_le_bytes(tail.try_into().unwrap())));
        // RFC 8200 §8.1: summing the datagram with its checksum gives all ones.
        let mut sum = ones_sum(0, &hdr.src.octets());
        sum = ones_sum(sum, &hdr.dst.octets());
        sum = ones_sum(sum, &((buf.len() - 40) as u32).to_be_bytes());
        sum = ones_sum(sum, &[0, 0, 0, 17]);
        assert_eq!(fold(ones_sum(sum, &buf[40..])), 0);
    }

    /// RFC 8200 §8.1: a checksum that comes out 0 is sent as 0xffff.
    #[test]
    fn udp_ipv6_checksum_zero_is_sent_as_all_ones() {
        let (src, dst) = (V3_HDR.src, V3_HDR.dst);
        let mut udp = vec![0xc1, 0x23, 0x12, 0xb7, 0, 12, 0, 0, 0xab, 0xcd, 0, 0];
        let c = udp_ipv6_checksum(src, dst, &udp);
        assert_ne!(c, 0);
        // The word that brings the sum to all ones makes the computed checksum 0.
        udp[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(udp_ipv6_checksum(src, dst, &udp), 0xffff);
    }

    #[test]
    fn pcap_ipv6_udp_refuses_oversized_datagram() {
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        let err = w.write_ipv6_udp(Duration::ZERO, &V3_HDR, &vec![0; 65_536 - 8]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(w.packets(), 0);
        w.write_ipv6_udp(Duration::ZERO, &V3_HDR, &vec![0; 65_535 - 8]).unwrap();
    }

    /// One raw-IP file holds both versions; each record parses by its version nibble.
    #[test]
    fn pcap_raw_file_mixes_ipv4_and_ipv6_records() {
        let (v1, v3) = (hex(V1), hex(V3));
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        w.write_ipv4_udp(Duration::ZERO, &V1_HDR, &v1[28..]).unwrap();
        w.write_ipv6_udp(Duration::ZERO, &V3_HDR, &v3[48..]).unwrap();
        let file = w.into_inner();
        let (_, recs) = records(&file).unwrap();
        let parsed: Vec<_> = recs.iter().map(|r| parse_ip_udp(r.data).unwrap()).collect();
        assert_eq!(parsed[0].header, IpUdp::V4(V1_HDR));
        assert_eq!(parsed[0].udp_payload, &v1[28..]);
        assert_eq!(parsed[1].header, IpUdp::V6(V3_HDR));
        assert_eq!(parsed[1].header.src(), IpAddr::V6(V3_HDR.src));
        assert_eq!(parsed[1].header.dst_port(), 4791);
    }

    #[test]
    fn parse_ip_udp_refuses_what_is_not_plain_ip_udp() {
        let (v1, v3) = (hex(V1), hex(V3));
        for cut in 0..48 {
            assert!(parse_ip_udp(&v3[..cut]).is_none(), "IPv6 cut at {cut}");
        }
        for cut in 0..28 {
            assert!(parse_ip_udp(&v1[..cut]).is_none(), "IPv4 cut at {cut}");
        }
        let mut ext = v3.clone();
        ext[6] = 0; // hop-by-hop options header first
        assert!(parse_ip_udp(&ext).is_none());
        let mut opts = v1.clone();
        opts[0] = 0x46; // IHL 6: options
        assert!(parse_ip_udp(&opts).is_none());
        let mut short = v3.clone();
        short[4..6].copy_from_slice(&7u16.to_be_bytes()); // payload shorter than a UDP header
        assert!(parse_ip_udp(&short).is_none());
        let mut v5 = v3.clone();
        v5[0] = 0x50;
        assert!(parse_ip_udp(&v5).is_none());
    }

    /// Bytes after the IP length (Ethernet padding) are not part of the packet; a record
    /// cut short keeps what was captured.
    #[test]
    fn parse_ip_udp_ends_the_packet_at_the_ip_length() {
        let v3 = hex(V3);
        let mut padded = v3.clone();
        padded.extend_from_slice(&[0xee; 6]);
        let d = parse_ip_udp(&padded).unwrap();
        assert_eq!(d.packet, &v3[..]);
        assert_eq!(d.udp_payload, &v3[48..]);
        let d = parse_ip_udp(&v3[..60]).unwrap();
        assert_eq!(d.packet, &v3[..60]);
        assert_eq!(d.udp_payload, &v3[48..60]);
    }

    proptest::proptest! {
        /// Any IPv6 header and payload written reads back as written, and its UDP checksum
        /// verifies (RFC 8200 §8.1).
        #[test]
        fn ipv6_udp_datagram_round_trips(
            src in proptest::prelude::any::<[u8; 16]>(),
            dst in proptest::prelude::any::<[u8; 16]>(),
            ports in proptest::prelude::any::<(u16, u16)>(),
            class_flow_hop in proptest::prelude::any::<(u8, u32, u8)>(),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let (traffic_class, flow_label, hop_limit) = class_flow_hop;
            let hdr = Ipv6Udp {
                src: src.into(),
                dst: dst.into(),
                src_port: ports.0,
                dst_port: ports.1,
                traffic_class,
                flow_label: flow_label & 0xf_ffff,
                hop_limit,
            };
            let mut buf = Vec::new();
            ipv6_udp_datagram(&hdr, &payload, &mut buf).unwrap();
            let d = parse_ip_udp(&buf).unwrap();
            proptest::prop_assert_eq!(d.header, IpUdp::V6(hdr));
            proptest::prop_assert_eq!(d.packet, &buf[..]);
            proptest::prop_assert_eq!(d.udp_payload, &payload[..]);
            let mut sum = ones_sum(0, &src);
            sum = ones_sum(sum, &dst);
            sum = ones_sum(sum, &((buf.len() - 40) as u32).to_be_bytes());
            sum = ones_sum(sum, &[0, 0, 0, 17]);
            proptest::prop_assert_eq!(fold(ones_sum(sum, &buf[40..])), 0);
        }

        #[test]
        fn parse_ip_udp_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            version in proptest::sample::select(vec![0x45u8, 0x60]),
        ) {
            let _ = parse_ip_udp(&bytes);
            let mut bytes = bytes;
            if let Some(b) = bytes.first_mut() {
                *b = version;
            }
            if let Some(d) = parse_ip_udp(&bytes) {
                proptest::prop_assert!(d.packet.len() <= bytes.len());
                proptest::prop_assert!(d.udp_payload.len() + 8 < d.packet.len());
            }
        }
    }

    #[test]
    fn pcap_records_refuse_truncated_files() {
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW).unwrap();
        w.write_record(Duration::ZERO, &[1, 2, 3, 4]).unwrap();
        let file = w.into_inner();
        assert!(records(&file).is_some());
        for cut in 1..file.len() {
            if cut == 24 {
                continue; // a header alone is a valid, empty file
            }
            assert!(records(&file[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn ipv4_checksum_of_v1_header() {
        let wire = hex(V1);
        let mut h = wire[..20].to_vec();
        let want = u16::from_be_bytes([h[10], h[11]]);
        h[10] = 0;
        h[11] = 0;
        assert_eq!(ipv4_checksum(&h), want);
    }
}
