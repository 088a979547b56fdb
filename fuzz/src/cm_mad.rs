//! `cm_mad`: a MAD received on QP1 through the CM decoder, and the private data rdma_cm
//! reads out of it.
//!
//! Input: the MAD (256 bytes are read; more or fewer are fine).
//!
//! Asserts:
//! - `CmMessage::decode` / `decode_with_modifier` never panic and agree; a decoded message
//!   encodes back (`encode_with_modifier`) to a MAD that decodes to the same transaction
//!   ID, attribute modifier and message, with the AttributeID of the input;
//! - the common MAD header parses (any 24 bytes) and emits the same bytes, reserved zeroed;
//! - the RDMA CM IP header of a REQ / SIDR_REQ private data (port from the service ID)
//!   parses without panic and round-trips through `to_bytes`; the same on the raw input;
//! - the REJ ARI and SIDR_REP Additional Information views hold exactly the length field's
//!   bytes, within their areas.

use rverbs_cm::mad::cma_ip::CMA_IP_HEADER_LEN;
use rverbs_cm::mad::service::split_service_id;
use rverbs_cm::mad::{header, CmMessage, CmaIpHeader, MadHeader, MAD_HEADER_LEN, MAD_SIZE};

/// Runs one input.
pub fn run(data: &[u8]) {
    mad_header(data);
    let decoded = CmMessage::decode_with_modifier(data);
    assert_eq!(CmMessage::decode(data), decoded.clone().map(|(tid, _, m)| (tid, m)));
    if let Ok((tid, attr_mod, msg)) = decoded {
        assert!(data.len() >= MAD_SIZE);
        assert_eq!(msg.attribute_id(), u16::from_be_bytes([data[16], data[17]]));
        let bytes = msg.encode_with_modifier(tid, attr_mod);
        let again = CmMessage::decode_with_modifier(&bytes).expect("an encoded message decodes");
        assert_eq!(again, (tid, attr_mod, msg.clone()));
        assert_eq!(bytes[..16], {
            // The header as rverbs sends it: the input's TID, CM class, Send, status 0.
            let mut h = [0u8; 16];
            h[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
            h[8..16].copy_from_slice(&tid.to_be_bytes());
            h
        });
        private_data(&msg);
    }
    // The private-data header on raw bytes, with a port from the input.
    let port = data.last().map_or(0, |&b| u16::from(b) << 8 | 0x2b);
    cma_header(data, port);
}

/// The common header alone: every value is accepted and emitted back.
fn mad_header(data: &[u8]) {
    match MadHeader::parse(&header::Packet::new_unchecked(data)) {
        Ok(h) => {
            assert!(data.len() >= MAD_HEADER_LEN);
            let mut out = [0xa5u8; MAD_HEADER_LEN];
            h.emit(&mut header::Packet::new_unchecked(&mut out[..]));
            let mut want = [0u8; MAD_HEADER_LEN];
            want.copy_from_slice(&data[..MAD_HEADER_LEN]);
            want[18..20].fill(0); // reserved
            assert_eq!(out, want);
        }
        Err(_) => assert!(data.len() < MAD_HEADER_LEN),
    }
}

/// What rdma_cm reads out of a message's private data.
fn private_data(msg: &CmMessage) {
    let (service_id, pdata): (u64, &[u8]) = match msg {
        CmMessage::Req(r) => (r.service_id, &r.private_data),
        CmMessage::SidrReq(r) => (r.service_id, &r.private_data),
        CmMessage::Rej(r) => {
            let ari = r.ari_bytes();
            assert_eq!(ari.len(), usize::from(r.ari_length));
            assert!(ari.len() <= r.ari.len());
            return;
        }
        CmMessage::SidrRep(r) => {
            let info = r.additional_info_bytes();
            assert_eq!(info.len(), usize::from(r.additional_info_length));
            assert!(info.len() <= r.additional_info.len());
            return;
        }
        _ => return,
    };
    let Some((_ps, port)) = split_service_id(service_id) else {
        return;
    };
    if let Some(h) = cma_header(pdata, port) {
        assert_eq!(h.dst.port(), port);
        // The consumer's bytes follow the header.
        assert!(pdata.len() >= CMA_IP_HEADER_LEN);
    }
}

/// `CmaIpHeader::parse`, and its round trip through `to_bytes`.
fn cma_header(pdata: &[u8], port: u16) -> Option<CmaIpHeader> {
    let h = CmaIpHeader::parse(pdata, port).ok()?;
    assert!(pdata.len() >= CMA_IP_HEADER_LEN);
    assert_eq!(h.ip_version(), pdata[1] >> 4);
    assert_eq!(h.src.port(), u16::from_be_bytes([pdata[2], pdata[3]]));
    let bytes = h.to_bytes();
    assert_eq!(CmaIpHeader::parse(&bytes, h.dst.port()), Ok(h));
    let mut buf = [0u8; CMA_IP_HEADER_LEN + 4];
    h.emit(&mut buf);
    assert_eq!(buf[..CMA_IP_HEADER_LEN], bytes);
    Some(h)
}
