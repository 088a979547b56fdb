//! The packet capture of the network transport: `RVERBS_PCAP=file` records every datagram
//! sent and received, IPv4 and IPv6, as a pcap file of raw IP records (`LINKTYPE_RAW`,
//! both versions in one file) whose IP and UDP headers are rebuilt around the RoCEv2
//! payload (`rverbs_proto::pcap`; tshark decodes it with `-d udp.port==4791,infiniband`).
//!
//! Read before editing: docs/rocev2-wire.md §1.1 and §2.5 (the headers a socket sender
//! puts on a datagram, and what the ICRC covers) and docs/network.md, "Capture and fault
//! injection".

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use rverbs_proto::pcap::{self, PcapWriter};

/// The capture file every socket of a device writes to (`RVERBS_PCAP`, `DeviceConfig::pcap`).
pub(super) struct Trace {
    out: Mutex<PcapWriter<std::fs::File>>,
}

impl Trace {
    /// A trace writing to a new file at `path`; `None` (logged) if it cannot be created.
    pub(super) fn create(path: &std::path::Path) -> Option<Arc<Trace>> {
        let file = std::fs::File::create(path)
            .map_err(|err| tracing::warn!(path = %path.display(), %err, "RVERBS_PCAP: cannot create"))
            .ok()?;
        let out = PcapWriter::new(file, pcap::LINKTYPE_RAW).ok()?;
        Some(Arc::new(Trace { out: Mutex::new(out) }))
    }

    /// Records one datagram from `from` to `to`, with IPv4 Identification `id` (IPv6 has
    /// none: `id` is ignored).
    ///
    /// Rule: the headers a socket sender puts on it (docs/rocev2-wire.md §1.1, §2.5): IPv4 DF,
    /// TTL 64; IPv6 traffic class 0, flow label 0, hop limit 64, a computed UDP checksum.
    /// The masked fields (TTL, hop limit, class, flow) are not what a receiver saw, but the
    /// ICRC does not cover them, so every record's ICRC checks from the record alone.
    pub(super) fn record(&self, from: SocketAddr, to: SocketAddr, id: u16, udp_payload: &[u8]) {
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        // The file is unbuffered: every record is on disk when the call returns, however
        // the process ends.
        let _ = match (from.ip(), to.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let hdr = pcap::Ipv4Udp { src, dst, src_port: from.port(), dst_port: to.port(), id, ttl: 64 };
                self.out.lock().expect("pcap").write_ipv4_udp(ts, &hdr, udp_payload)
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let hdr = pcap::Ipv6Udp {
                    src,
                    dst,
                    src_port: from.port(),
                    dst_port: to.port(),
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                };
                self.out.lock().expect("pcap").write_ipv6_udp(ts, &hdr, udp_payload)
            }
            // Never sent (`seal` refuses mixed families) nor received on one socket.
            _ => return,
        };
    }
}
