//! RoCEv2 wire formats and the transport rules of rverbs, without I/O.
//!
//! This crate does no I/O whatsoever: no sockets, no threads, no clocks. Bytes and
//! caller-supplied instants go in; bytes, completions and deadlines come out. It is
//! deterministic, which is what lets the transports be tested against a simulated
//! network and fuzzed.
//!
//! What lives here:
//! - [`verbs`]: the verbs-level vocabulary shared by every transport (QP types and
//!   states, work-completion statuses and opcodes, access flags), with the same
//!   numeric values as `<infiniband/verbs.h>`.
//! - [`state`]: the QP state machine and the attribute-mask table of `ibv_modify_qp(3)`.
//! - [`violation`]: responder-side rule violations and what each becomes (a NAK, a
//!   drop, a completion status), after rxe's responder (`rxe_resp.c`) and completer
//!   (`rxe_comp.c`).
//! - [`rc`]: the RC/UC/UD requester, completer and responder machines (descriptors in,
//!   descriptors and completions out; time passed in).
//! - [`fault`]: the deterministic fault injector (drop, duplicate, reorder, delay,
//!   corrupt) of packet transports and of the protocol tests.
//! - [`verb_fault`]: the fault plan of the verbs (a verb fails with a documented error, a
//!   send work request completes with a chosen status), counted and drawn from a seed.
//! - [`wire`]: packet views and representations for BTH and the extension headers,
//!   the opcode table and the ICRC (IBTA vol. 1, ch. 9 and Annex A17; rxe `rxe_hdr.h`,
//!   `rxe_opcode.c`, `rxe_icrc.c`).
//! - [`pcap`]: a pcap writer (and reader) over any `std::io::Write` / byte slice, for
//!   transports that record what they send and receive (`RVERBS_PCAP`).
//!
//! Panics: no function panics on any input that comes from the network; parsing goes
//! through `new_checked` (see [`wire`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fault;
pub mod pcap;
pub mod psn;
pub mod rc;
pub mod rnr;
pub mod state;
pub mod verbs;
pub mod vendor_err;
pub mod verb_fault;
pub mod violation;
pub mod wire;
