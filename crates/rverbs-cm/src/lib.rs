//! Connection management for rverbs, with the semantics of rdma_cm(7).
//!
//! Most RDMA applications do not exchange QP numbers themselves: they resolve an IP
//! address to a device, listen on or connect to a port, and let the connection manager
//! move their QPs through the handshake. This crate is that connection manager for the
//! rverbs device; the drop-in `librdmacm.so.1` (crate `rverbs-capi`) is a thin layer
//! over it.
//!
//! - [`EventChannel`], [`CmId`], [`Event`]: the rdma_cm objects, with the same rules
//!   (event order, acknowledgements, private data limits and padding, QP transitions),
//!   over this connection manager or (feature `rdma-core`) librdmacm's, chosen at the
//!   channel ([`EventChannel::new`], [`EventChannel::on`]).
//! - On the device: the handshake is IBTA CM messages ([`mad`]: REQ, MRA, REP, RTU, REJ,
//!   DREQ, DREP, SIDR_REQ, SIDR_REP) with the RDMA CM IP private-data header, carried as
//!   MADs on each endpoint's QP1 ([`rverbs::capi_support::qp1`]). A host-wide table in the runtime
//!   directory ([`table`]) says which process listens on a port.
//! - A peer process that dies: its partners see DISCONNECTED (their QPs flush) or
//!   UNREACHABLE, never a hang.
//! - [`Listener`], [`connect`], [`Connection`]: the RAII way, every wait bounded;
//!   `examples/echo.rs` is a whole server and client with it (`cargo run -p rverbs-cm
//!   --example echo`, run by `cargo test` too).
//! - `aio` (feature `tokio`, or `async-io` for any executor): the same awaited
//!   (`AsyncListener`, `aio::connect`, `AsyncConnection`, a `Stream` of events); `examples/async_echo.rs`
//!   serves 64 connections from one thread. `stream` (feature `tokio` or `async-io`):
//!   `RdmaStream`, an `AsyncRead` + `AsyncWrite` over an RC connection (SEND/RECV with
//!   credits), with tokio's traits or the `futures` ones.
//! - Several devices: an id works on the device of its channel ([`EventChannel::on`];
//!   [`Listener::bind_on`]; [`connect`] takes the QP's), one engine per device, so two
//!   simulated hosts of `rverbs::DeviceConfig::addresses` connect through rdma_cm in one
//!   process (docs/connection-manager.md, "Several devices").
//! - Feature `rdma-core`: the same API over a librdmacm loaded at run time (rdma-core's on
//!   a NIC, or the drop-in), beside `rverbs`' rdma-core backend. Under
//!   `RVERBS_BACKEND=rdma-core` (or on a device of that backend) the objects, the RAII
//!   helpers, `aio` and `stream` run over it, so a program such as `examples/echo.rs`
//!   runs unchanged; what librdmacm cannot do here (the CM timeout, attaching a QP made
//!   elsewhere) is `EOPNOTSUPP` (docs/rdma-core-backend.md, "rverbs-cm over
//!   librdmacm").
//!
//! ```no_run
//! use rverbs_cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
//! let ch = EventChannel::new()?;
//! let listener = CmId::new(&ch, PortSpace::Tcp, rverbs::QpType::Rc, 0)?;
//! listener.bind_addr("127.0.0.1:7471".parse().unwrap())?;
//! listener.listen(0)?;
//! let ev = ch.get_event()?;
//! assert_eq!(ev.kind, EventKind::ConnectRequest);
//! # Ok::<(), rverbs_cm::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
#[cfg(any(feature = "tokio", feature = "async-io"))]
pub mod aio;
#[cfg(any(feature = "tokio", feature = "async-io"))]
pub mod stream;
mod channel;
mod cm_state;
pub mod conn;
mod engine;
pub mod error;
mod event;
mod handle;
mod id;
pub mod mad;
mod objects;
#[cfg(feature = "rdma-core")]
mod rdma_core;
mod rule;
pub mod table;
mod wait;

pub use conn::{connect, connect_with, Connection, Listener, Request};
pub use engine::JoinFlag;
pub use engine::RDMA_UDP_QKEY;
pub use cm_state::CmState;
pub use error::{Error, Peer, Result, Rule};
pub use event::{ConnParam, EventKind, UdParam};
pub use handle::{PortSpace, Route};
pub use objects::{CmId, Event, EventChannel};

/// The soft connection manager's own objects, for the drop-in `librdmacm.so.1` (crate
/// `rverbs-capi`), which is that connection manager's C face and never runs over
/// librdmacm: the public [`CmId`], [`EventChannel`] and [`Event`] without the choice of
/// backend, with the words the C library keeps in them (`CmId::user`).
#[doc(hidden)]
pub mod soft {
    pub use crate::channel::EventChannel;
    pub use crate::event::Event;
    pub use crate::handle::CmId;
}
