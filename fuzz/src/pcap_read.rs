//! `pcap_read`: a capture file, as `rverbs-probe` reads one (from rverbs' `RVERBS_PCAP`, or
//! from tcpdump on any host), through `pcap::records` and `pcap::parse_ip_udp`.
//!
//! Input: the file's bytes; the whole input is also tried as one raw IP record.
//!
//! Asserts: the readers never panic; every record lies inside the file; records written
//! back with `PcapWriter` read back the same (bytes up to the snap length, microsecond
//! time stamps); a datagram's IP packet is a prefix of its record and its UDP payload a
//! suffix of the packet; a datagram rebuilt around its UDP payload from its parsed
//! headers (`ipv4_udp_datagram` / `ipv6_udp_datagram`) parses to the same headers and
//! payload.

use std::time::Duration;

use rverbs_proto::pcap::{self, IpUdp, PcapWriter};

/// The writer's snap length (a longer record is cut to it).
const SNAPLEN: usize = 65_535;

/// Runs one input.
pub fn run(data: &[u8]) {
    if let Some((linktype, recs)) = pcap::records(data) {
        let range = data.as_ptr_range();
        let mut w = PcapWriter::new(Vec::new(), linktype).expect("writing to a Vec");
        for r in &recs {
            let inside =
                r.data.is_empty() || (range.contains(&r.data.as_ptr()) && r.data.as_ptr_range().end <= range.end);
            assert!(inside, "a record outside the file");
            w.write_record(r.ts, r.data).expect("writing to a Vec");
            datagram(r.data);
        }
        let out = w.into_inner();
        let (lt, again) = pcap::records(&out).expect("a written file reads back");
        assert_eq!((lt, again.len()), (linktype, recs.len()));
        for (a, r) in again.iter().zip(&recs) {
            assert_eq!(a.data, &r.data[..r.data.len().min(SNAPLEN)]);
            if r.ts.as_secs() <= u64::from(u32::MAX) {
                let micros = Duration::from_micros(u64::from(r.ts.subsec_micros()));
                assert_eq!(a.ts, Duration::from_secs(r.ts.as_secs()) + micros);
            }
        }
    }
    datagram(data);
}

/// One raw IP record.
fn datagram(rec: &[u8]) {
    let Some(d) = pcap::parse_ip_udp(rec) else { return };
    assert!(rec.starts_with(d.packet));
    assert!(d.packet.ends_with(d.udp_payload));
    let mut out = Vec::new();
    let built = match d.header {
        IpUdp::V4(h) => pcap::ipv4_udp_datagram(&h, d.udp_payload, &mut out),
        IpUdp::V6(h) => pcap::ipv6_udp_datagram(&h, d.udp_payload, &mut out),
    };
    if built.is_err() {
        // Longer than an IP length field can say: only a cut or padded record gets here.
        return;
    }
    let again = pcap::parse_ip_udp(&out).expect("a built datagram parses");
    assert_eq!(again.header, d.header);
    assert_eq!(again.udp_payload, d.udp_payload);
    assert_eq!(again.packet, &out[..]);
}
