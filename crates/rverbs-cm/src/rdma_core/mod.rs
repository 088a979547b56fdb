//! The `rdma-core` backend of the connection manager (feature `rdma-core`): rdma_cm(7)
//! over the librdmacm loaded at run time — rdma-core's, on a NIC, rxe or siw, or rverbs'
//! own drop-in `librdmacm.so.1`.
//!
//! librdmacm is loaded at the first call (`dlopen` of `librdmacm.so.1`, or the file named
//! by `RVERBS_LIBRDMACM`), after `rverbs`' backend has loaded libibverbs, whose one copy
//! both then use (checked at load); the crate never links it. Its objects have the soft
//! types' method names and take their values ([`crate::EventKind`], [`crate::ConnParam`],
//! [`crate::UdParam`], [`crate::PortSpace`], [`crate::Error`] with librdmacm's errno):
//! [`EventChannel`] (`AsFd`), [`CmId`], [`Event`] (acknowledged when dropped).
//!
//! The RAII helpers [`crate::Listener`], [`crate::connect`], [`crate::Request`] and
//! [`crate::Connection`] run on it when their QP is a QP of `rverbs`' rdma-core backend
//! (or, for a listener, under `RVERBS_BACKEND=rdma-core`): they manage the QP themselves
//! with [`CmId::init_qp_attr`], as librdmacm lets a QP made on another context of the
//! device be connected. docs/rdma-core-backend.md ("rverbs-cm over librdmacm") lists what
//! the backend covers and what is `EOPNOTSUPP`.
#![allow(unsafe_code)] // FFI into librdmacm: each block says why it is sound.

mod channel;
pub(crate) mod conn;
mod event;
mod id;
mod library;
mod sockaddr;

pub use channel::EventChannel;
pub use event::Event;
pub use id::CmId;
