//! The messages of librpma's example 09 (GPSPM, the General Purpose Server
//! Persistency Method) and the layout of its messaging region: after RDMA-writing
//! into the server's region, the client sends a [`FlushRequest`] naming the range to
//! make persistent; the server persists it and answers with a [`FlushResponse`]
//! carrying the request's `op_context` back.
//!
//! librpma's example defines both in `GPSPM_flush.proto` (proto2, every field
//! `required fixed64`) and packs them with protobuf-c; here they are prost messages
//! with the same field numbers, types and labels, so the bytes on the wire are the
//! same and a Rust client can talk to the C server (and the reverse).
//! `tests/gpspm.rs` checks the encoding against bytes worked out by hand.
//!
//! Deviation: prost does not check on decoding that a required field was present
//! (protobuf-c's `*__unpack` returns NULL then); [`FlushRequest::unpack`] and
//! [`FlushResponse::unpack`] do, so a message missing a field is refused here as in C
//! rather than read as 0.

use prost::Message;
use rverbs_rpma::{Error, MrLocal, Result};

/// The most bytes a packed message may take (`MSG_SIZE_MAX`).
pub const MSG_SIZE_MAX: usize = 512;
/// Where in the messaging region a message to send is packed (`SEND_OFFSET`).
pub const SEND_OFFSET: usize = 0;
/// Where in the messaging region a message is received (`RECV_OFFSET`).
pub const RECV_OFFSET: usize = SEND_OFFSET + MSG_SIZE_MAX;
/// The size of the messaging region: the send half and the receive half.
pub const MSG_REGION_SIZE: usize = RECV_OFFSET + MSG_SIZE_MAX;
/// The size of each side's receive CQ (`RCQ_SIZE`): one message is received.
pub const RCQ_SIZE: u32 = 1;

/// `message GPSPM_flush_request`: make `length` bytes at `offset` of the server's
/// region persistent and answer with `op_context`.
#[derive(Clone, Copy, PartialEq, Eq, Message)]
pub struct FlushRequest {
    /// The offset of the range in the server's region (`required fixed64 offset = 1`).
    #[prost(fixed64, required, tag = "1")]
    pub offset: u64,
    /// The length of the range (`required fixed64 length = 2`).
    #[prost(fixed64, required, tag = "2")]
    pub length: u64,
    /// The client's identifier of the request (`required fixed64 op_context = 3`).
    #[prost(fixed64, required, tag = "3")]
    pub op_context: u64,
}

/// `message GPSPM_flush_response`: the request with this `op_context` is done.
#[derive(Clone, Copy, PartialEq, Eq, Message)]
pub struct FlushResponse {
    /// The `op_context` of the completed request (`required fixed64 op_context = 1`).
    #[prost(fixed64, required, tag = "1")]
    pub op_context: u64,
}

/// Why received bytes are not the message expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnpackError {
    /// Not protobuf with this message's field types: truncated, or a field of
    /// another wire type.
    Malformed(prost::DecodeError),
    /// The required field of this name is absent.
    MissingField(&'static str),
}

impl std::fmt::Display for UnpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpackError::Malformed(e) => write!(f, "malformed message: {e}"),
            UnpackError::MissingField(name) => write!(f, "missing required field '{name}'"),
        }
    }
}

/// [`FlushRequest`] with each field optional, to learn which ones the bytes hold.
#[derive(Clone, Copy, PartialEq, Eq, Message)]
struct FlushRequestSeen {
    #[prost(fixed64, optional, tag = "1")]
    offset: Option<u64>,
    #[prost(fixed64, optional, tag = "2")]
    length: Option<u64>,
    #[prost(fixed64, optional, tag = "3")]
    op_context: Option<u64>,
}

/// [`FlushResponse`] with its field optional.
#[derive(Clone, Copy, PartialEq, Eq, Message)]
struct FlushResponseSeen {
    #[prost(fixed64, optional, tag = "1")]
    op_context: Option<u64>,
}

/// The value of a required field, or which one is missing.
fn required(v: Option<u64>, name: &'static str) -> std::result::Result<u64, UnpackError> {
    v.ok_or(UnpackError::MissingField(name))
}

impl FlushRequest {
    /// Decodes a request as `gpspm_flush_request__unpack` does: unknown fields are
    /// skipped, a repeated field keeps its last value.
    ///
    /// Errors: `Malformed` for bytes that are not such a message; `MissingField` when
    /// one of the three fields is absent.
    pub fn unpack(bytes: &[u8]) -> std::result::Result<FlushRequest, UnpackError> {
        let seen = FlushRequestSeen::decode(bytes).map_err(UnpackError::Malformed)?;
        Ok(FlushRequest {
            offset: required(seen.offset, "offset")?,
            length: required(seen.length, "length")?,
            op_context: required(seen.op_context, "op_context")?,
        })
    }
}

impl FlushResponse {
    /// Decodes a response as `gpspm_flush_response__unpack` does.
    ///
    /// Errors: `Malformed` for bytes that are not such a message; `MissingField` when
    /// `op_context` is absent.
    pub fn unpack(bytes: &[u8]) -> std::result::Result<FlushResponse, UnpackError> {
        let seen = FlushResponseSeen::decode(bytes).map_err(UnpackError::Malformed)?;
        Ok(FlushResponse { op_context: required(seen.op_context, "op_context")? })
    }
}

/// Packs `msg` at [`SEND_OFFSET`] of the messaging region `mr` and returns its length,
/// what to send.
///
/// Errors: `Inval` if the packed message is longer than [`MSG_SIZE_MAX`] (the
/// example's messages take 27 and 9 bytes) or `mr` is too small.
pub fn pack(msg: &impl Message, mr: &MrLocal) -> Result<usize> {
    let bytes = msg.encode_to_vec();
    if bytes.len() > MSG_SIZE_MAX {
        eprintln!(
            "Size of the packed message is bigger than the available space of the send buffer ({} > {MSG_SIZE_MAX})",
            bytes.len()
        );
        return Err(Error::Inval);
    }
    mr.write(SEND_OFFSET, &bytes)?;
    Ok(bytes.len())
}

/// The `len` bytes received at [`RECV_OFFSET`] of the messaging region `mr`.
///
/// Errors: `Inval` if they leave `mr`.
pub fn received(mr: &MrLocal, len: u32) -> Result<Vec<u8>> {
    mr.to_vec(RECV_OFFSET, len as usize)
}
