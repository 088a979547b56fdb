//! A pcap writer for RoCEv2 packets, without I/O of its own: it writes into any
//! [`std::io::Write`] the caller hands it, with timestamps the caller supplies.
//!
//! Read before editing: the pcap file format (draft-ietf-opsawg-pcap: the 24-byte file
//! header, a 16-byte record header per packet) and rocev2-wire.md §1.1 (what rxe puts in the
//! IPv4 and UDP headers) and §6 (tshark reads these files:
//! `tshark -r FILE -d udp.port==4791,infiniband`).
//!
//! A UDP transport never sees the IP and UDP headers of what it sends or receives, so each
//! record is rebuilt from what the transport knows: addresses, ports, the IPv4
//! Identification (0 for what an `IP_PMTUDISC_DO` socket sends; the one
//! [`crate::wire::icrc::solve_ipv4_id`] recovers for what arrives) and the UDP payload (BTH
//! to ICRC, with the real ICRC). The records are raw IP (`LINKTYPE_RAW`), so the ICRC of a
//! record can be checked from the record alone (`icrc::compute_ip_packet`).

use std::io::{self, Write};
use std::net::Ipv4Addr;
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
const UDP_HEADER_LEN: usize = 8;

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
    /// IPv4 Identification (covered by the ICRC, rocev2-wire.md §2.2).
    pub id: u16,
    /// TTL (masked in the ICRC; a socket receiver does not see it).
    pub ttl: u8,
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
    /// Rule: rocev2-wire.md §1.1: version 4, IHL 5, TOS 0, DF, fragment offset 0, protocol
    /// 17, a valid header checksum; UDP length 8 + payload, UDP checksum 0.
    /// Errors: those of the writer; `InvalidInput` if the datagram exceeds 65 535 bytes.
    pub fn write_ipv4_udp(&mut self, ts: Duration, hdr: &Ipv4Udp, udp_payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(IPV4_HEADER_LEN + UDP_HEADER_LEN + udp_payload.len());
        ipv4_udp_datagram(hdr, udp_payload, &mut buf)?;
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

/// The Internet checksum (RFC 1071) of an IPv4 header whose checksum field is zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::icrc;
    use crate::wire::tests::{hex, V1};

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

    /// The rebuilt datagram of V1's UDP payload is V1 itself (rocev2-wire.md §2.4), so the
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
