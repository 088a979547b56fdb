//! Example 09's messages (`examples/common/gpspm.rs`) against librpma's
//! `GPSPM_flush.proto`: the bytes protobuf-c packs, worked out by hand from the
//! protobuf wire format, and refusals of what protobuf-c refuses.
//!
//! Wire format (protobuf encoding, proto2): each field is a key then a value; the key
//! is the varint `(field_number << 3) | wire_type`, and `fixed64` has wire type 1, its
//! value 8 bytes little-endian. Every field of both messages is `required fixed64`, so
//! it is always written, even when 0, in field-number order (protobuf-c packs in the
//! order of its descriptor's fields, which is the .proto's). Keys:
//! field 1 → `0x09`, field 2 → `0x11`, field 3 → `0x19`; each field takes 9 bytes.

#[allow(dead_code)]
#[path = "../examples/common/gpspm.rs"]
mod gpspm;

use gpspm::{FlushRequest, FlushResponse, UnpackError};
use prost::Message;

/// GPSPM_flush_request {offset: 0x0102030405060708, length: 0x400, op_context: 0xF01D}:
/// three 9-byte fields, 27 bytes.
const REQUEST: FlushRequest = FlushRequest { offset: 0x0102_0304_0506_0708, length: 0x400, op_context: 0xF01D };
#[rustfmt::skip]
const REQUEST_BYTES: [u8; 27] = [
    0x09, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // 1:fixed64 offset
    0x11, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 2:fixed64 length 1024
    0x19, 0x1D, 0xF0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 3:fixed64 op_context
];

/// GPSPM_flush_response {op_context: 0xF01D}: one 9-byte field.
const RESPONSE: FlushResponse = FlushResponse { op_context: 0xF01D };
const RESPONSE_BYTES: [u8; 9] = [0x09, 0x1D, 0xF0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];

#[test]
fn flush_request_encodes_to_protobuf_c_bytes() {
    assert_eq!(REQUEST.encoded_len(), 27);
    assert_eq!(REQUEST.encode_to_vec(), REQUEST_BYTES);
}

#[test]
fn flush_response_encodes_to_protobuf_c_bytes() {
    assert_eq!(RESPONSE.encoded_len(), 9);
    assert_eq!(RESPONSE.encode_to_vec(), RESPONSE_BYTES);
}

/// A required field that is 0 is still written (an optional proto3 field would be
/// left out, and protobuf-c would then refuse the message): example 09's own request,
/// offset 0 in the server's region.
#[test]
fn flush_request_with_zero_fields_writes_every_field() {
    let req = FlushRequest { offset: 0, length: 0, op_context: 0 };
    #[rustfmt::skip]
    let want = [
        0x09, 0, 0, 0, 0, 0, 0, 0, 0,
        0x11, 0, 0, 0, 0, 0, 0, 0, 0,
        0x19, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(req.encode_to_vec(), want);
    assert_eq!(FlushResponse { op_context: 0 }.encode_to_vec(), [0x09, 0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn flush_request_unpacks_from_protobuf_c_bytes() {
    assert_eq!(FlushRequest::unpack(&REQUEST_BYTES), Ok(REQUEST));
}

#[test]
fn flush_response_unpacks_from_protobuf_c_bytes() {
    assert_eq!(FlushResponse::unpack(&RESPONSE_BYTES), Ok(RESPONSE));
}

/// Every prefix of a packed request is refused: at a field boundary a required field
/// is missing (named), inside a field the message is truncated.
#[test]
fn flush_request_every_prefix_is_refused() {
    for n in 0..REQUEST_BYTES.len() {
        let got = FlushRequest::unpack(&REQUEST_BYTES[..n]);
        match n {
            0 => assert_eq!(got, Err(UnpackError::MissingField("offset"))),
            9 => assert_eq!(got, Err(UnpackError::MissingField("length"))),
            18 => assert_eq!(got, Err(UnpackError::MissingField("op_context"))),
            _ => assert!(matches!(got, Err(UnpackError::Malformed(_))), "prefix of {n}: {got:?}"),
        }
    }
}

#[test]
fn flush_response_every_prefix_is_refused() {
    for n in 0..RESPONSE_BYTES.len() {
        let got = FlushResponse::unpack(&RESPONSE_BYTES[..n]);
        if n == 0 {
            assert_eq!(got, Err(UnpackError::MissingField("op_context")));
        } else {
            assert!(matches!(got, Err(UnpackError::Malformed(_))), "prefix of {n}: {got:?}");
        }
    }
}

/// Fields in another order, an unknown field (4, a varint) and a repeated field (the
/// last value wins) are accepted, as protobuf-c accepts them.
#[test]
fn flush_request_unpacks_reordered_unknown_and_repeated_fields() {
    #[rustfmt::skip]
    let bytes = [
        0x19, 0x1D, 0xF0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // op_context 0xF01D
        0x20, 0x05,                                           // 4:varint 5 (unknown)
        0x11, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // length 0x400
        0x09, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // offset 0xFF
        0x09, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // offset again
    ];
    assert_eq!(FlushRequest::unpack(&bytes), Ok(REQUEST));
}

/// A field of the right number but another wire type (offset as a varint) is refused.
#[test]
fn flush_request_with_wrong_wire_type_is_malformed() {
    let mut bytes = vec![0x08, 0x00]; // 1:varint 0
    bytes.extend_from_slice(&REQUEST_BYTES[9..]);
    assert!(matches!(FlushRequest::unpack(&bytes), Err(UnpackError::Malformed(_))));
}

/// A response is not a request: its only field is field 1, so `length` is missing.
#[test]
fn flush_response_bytes_are_not_a_request() {
    assert_eq!(FlushRequest::unpack(&RESPONSE_BYTES), Err(UnpackError::MissingField("length")));
}
