//! librpma's model in Rust: remote persistent-memory access over RDMA connections, on
//! the rverbs device and its connection manager.
//!
//! librpma (1.2, as Debian ships it) gives an application a few objects and hides the
//! verbs and rdma_cm calls behind them; this crate gives the same objects, with the same
//! rules and error codes, in safe Rust:
//!
//! | librpma | here |
//! |---|---|
//! | `rpma_utils_get_ibv_context` + `rpma_peer_new` | [`Peer::new`] (an IP address names the device, as rdma_cm decides) |
//! | `rpma_peer_cfg` (1-byte descriptor) | [`PeerCfg`] |
//! | `rpma_mr_reg`, `rpma_mr_local` | [`MrLocal`]: caller memory ([`MrLocal::reg`], `unsafe`; [`MrLocal::from_static`]) or memory the registration allocates ([`MrLocal::new`]); usage → access as librpma maps it; 21-byte descriptor |
//! | `rpma_mr_remote_from_descriptor` | [`MrRemote`] |
//! | `rpma_conn_cfg` | [`ConnCfg`] |
//! | `rpma_ep_listen`, `rpma_ep_next_conn_req` | [`Endpoint`] |
//! | `rpma_conn_req_new`, `_recv`, `_connect` | [`ConnReq`] ([`ConnReq::connect`] consumes it) |
//! | `rpma_conn`: events, private data, read/write/send/recv/flush/atomic write | [`Conn`] |
//! | `rpma_cq`: `rpma_cq_wait`, `rpma_cq_get_wc`, `rpma_cq_get_fd` | [`Cq`], [`Wc`] |
//! | `rpma_srq_cfg`, `rpma_srq` (`rpma_srq_recv`, `rpma_srq_get_rcq`), `rpma_conn_cfg_set_srq` | [`SrqCfg`], [`Srq`], [`ConnCfg::set_srq`] |
//! | `RPMA_E_*` | [`Error`] ([`Error::code`] gives the C value) |
//! | `RPMA_F_COMPLETION_*` | [`CompletionFlags`] |
//!
//! Completions follow rpma_cq_get_wc(3) sentence by sentence: all operations complete
//! on error, only [`CompletionFlags::Always`] ones on success (librpma's mapping to the
//! verbs signaled flag); [`Cq::get_wc`] returns the oldest completions first, at most as
//! many as the slice holds, `NoCompletion` when there are none; with a receive CQ the
//! main CQ never returns receives; an error completion only answers `wr_id`, `status`,
//! `qp_num` and `vendor_err` ([`Wc`]). Flush and atomic write are native or
//! emulated as librpma 1.3.0 decides per device ([`Native`]: atomic write native with
//! IB_UVERBS_DEVICE_ATOMIC_WRITE, flush only with both FLUSH_GLOBAL and
//! FLUSH_PERSISTENT): natively `IBV_WR_ATOMIC_WRITE` / `IBV_WR_FLUSH`, else librpma
//! 1.2's emulations, an 8-byte RDMA READ after the writes into a private buffer and a
//! fenced inline 8-byte RDMA WRITE. The rverbs device reports ATOMIC_WRITE and
//! FLUSH_GLOBAL but not FLUSH_PERSISTENT, so its peers write atomically natively and
//! emulate the flush; [`Peer::from_context_with`] with [`Native::EMULATED`] gives
//! librpma 1.2's behaviour throughout.
//!
//! Interoperable with C: the descriptors, private data and immediate data are those of
//! librpma, so a Rust client works with a C librpma server running on the drop-in
//! libraries and the reverse (`tests/interop.rs`: read, write + flush, atomic write,
//! send and write with immediate data, send/recv, a receive CQ, a shared completion
//! channel, a shared RQ, one epoll thread serving concurrent clients; each also C to C
//! on the drop-ins).
//!
//! Differences from librpma: registering caller memory is `unsafe` ([`MrLocal::reg`],
//! whose contract is [`rverbs::Pd::reg_mr`]'s) unless the memory is never freed
//! ([`MrLocal::from_static`]); [`MrLocal::new`] also allocates a region's memory;
//! `flags == 0` and NULL arguments cannot be expressed; the blocking waits have bounded
//! variants (`*_timeout`); on a non-blocking fd, [`Endpoint::next_conn_req`] and
//! [`Conn::next_event`] report `NoEvent` (librpma 1.2 only does for `ENODATA`).
//!
//! Shared receive queues follow docs/rpma-rdmacm.md §1.3: an [`Srq`] with a receive CQ of
//! its own (the default) takes the receives of every connection naming it, and those
//! connections get no receive CQ; a shared completion channel together with such an
//! SRQ is `Inval` when the connection request is created; a completion's
//! [`Wc::qp_num`] is the local QP of the connection ([`Conn::qp_num`]).
//!
//! Many connections are served from one epoll loop over the non-blocking fds
//! ([`Endpoint::fd`], [`Conn::fd`], [`Cq::fd`], or [`Conn::compl_fd`] with
//! [`Conn::wait`] for a shared completion channel): rpma examples 06, 06scch and 13
//! (`examples/06-multiple-connections.rs`, `examples/06scch-multiple-connections.rs`,
//! `examples/13-messages-ping-pong-with-srq.rs`).
//!
//! `examples/` ports librpma's examples 01, 02, 03, 04, 05, 06, 06scch, 07, 08, 08srq,
//! 09, 09scch, 10, 11, 12, 12scch and 13 (memory in DRAM: a flush to persistence is
//! refused, so examples 05 and 07 flush to visibility); `tests/examples.rs` runs them.
//! Example 09's flush request and response are protobuf messages, prost structs with
//! the field numbers and types of librpma's `GPSPM_flush.proto`
//! (`examples/common/gpspm.rs`, checked byte for byte in `tests/gpspm.rs`).
//!
//! Not yet: `rpma_mr_advise`,
//! ODP, the logging setters (failures are logged through `tracing`, as
//! [`context_for`] logs the address and the step); a native flush on rverbs (the device reports no FLUSH_PERSISTENT and
//! rverbs-cm grants QPs no FLUSH access).
//!
//! A client reads a server's memory, the server's region descriptor travelling in the
//! private data of the accept (rpma example 02):
//!
//! ```
//! use rverbs_rpma::*;
//! use std::time::Duration;
//!
//! // The server's address names its device: an address of a network interface of
//! // this host, not the loopback (the kernel's rdma_cm, and so rverbs, attaches no
//! // device to an id bound to 127.0.0.1). Here: the first IPv4 one of rverbs0's GIDs.
//! let ctx = rverbs::devices()?[0].open()?;
//! let addr = ctx.query_gid_table().iter().map(|e| e.gid.to_ip())
//!     .find(|ip| ip.is_ipv4() && !ip.is_loopback()).expect("a non-loopback IPv4 address").to_string();
//! let peer = Peer::new(&addr, ContextType::Local)?;
//! let ep = Endpoint::listen(&peer, &addr, 0)?;
//! let port = ep.local_addr().unwrap().port();
//!
//! let server = std::thread::spawn(move || -> Result<()> {
//!     let mr = MrLocal::new(&peer, 64, Usage::READ_SRC)?;
//!     mr.write(0, b"Hello client!\0")?;
//!     let req = ep.next_conn_req_timeout(None, Duration::from_secs(10))?;
//!     let conn = req.connect(Some(&mr.descriptor()))?;
//!     assert_eq!(conn.next_event()?, ConnEvent::Established);
//!     // The client reads, then disconnects.
//!     assert_eq!(conn.next_event_timeout(Duration::from_secs(10))?, ConnEvent::Closed);
//!     conn.disconnect()?;
//!     conn.delete()
//! });
//!
//! let peer = Peer::new(&addr, ContextType::Remote)?;
//! let dst = MrLocal::new(&peer, 64, Usage::READ_DST)?;
//! let req = ConnReq::new(&peer, &addr, port, None)?;
//! let conn = req.connect(None)?;
//! assert_eq!(conn.next_event()?, ConnEvent::Established);
//! let src = MrRemote::from_descriptor(conn.private_data().unwrap())?;
//! conn.read(&dst, 0, &src, 0, src.size(), CompletionFlags::Always, 7)?;
//! let cq = conn.get_cq();
//! cq.wait()?;
//! let wc = cq.get_wc_one()?;
//! assert!(wc.is_success());
//! assert_eq!(wc.wr_id(), 7);
//! assert_eq!(wc.opcode(), Some(rverbs::WcOpcode::RdmaRead));
//! assert_eq!(&dst.to_vec(0, 13)?, b"Hello client!");
//! conn.disconnect()?;
//! assert_eq!(conn.next_event_timeout(Duration::from_secs(10))?, ConnEvent::Closed);
//! conn.delete()?;
//! server.join().unwrap()?;
//! # Ok::<(), rverbs_rpma::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod cfg;
mod conn;
mod cq;
mod ep;
mod error;
mod flags;
mod mr;
mod peer;
mod queues;
mod recv;
mod srq;
mod util;

pub use cfg::ConnCfg;
pub use conn::{Conn, ConnEvent, ATOMIC_WRITE_ALIGNMENT};
pub use cq::{Cq, Wc};
pub use ep::{ConnReq, Endpoint};
pub use error::{Error, Result};
pub use flags::{CompletionFlags, FlushType, Usage};
pub use mr::{MrLocal, MrRemote, MR_DESCRIPTOR_SIZE};
pub use peer::{context_for, ContextType, Native, Peer, PeerCfg};
pub use srq::{Srq, SrqCfg};

/// The verbs crate, for the types completions and regions expose.
pub use rverbs;
