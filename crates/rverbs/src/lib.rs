//! rverbs: RDMA verbs in user space — a software RDMA device and a safe, typed verbs API.
//!
//! The built-in device `rverbs0` needs no NIC, kernel module, privilege or
//! configuration: [`devices()`] lists it, and two QPs in one process exchange real
//! traffic through it. Every rule a verbs provider enforces is enforced here (keys,
//! bounds and access rights on every access; the QP state machine; queue limits), and
//! completions are produced as ibv_poll_cq(3), ibv_create_cq_ex(3) and
//! ibv_query_qp_data_in_order(3) describe them.
//!
//! ```
//! use rverbs::{CqInit, QpCap, QpInit, QpType};
//! let ctx = rverbs::devices()?[0].open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(&CqInit::new(16))?;
//! let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap))?;
//! assert_eq!(qp.state(), rverbs::QpState::Reset);
//! # Ok::<(), rverbs::Error>(())
//! ```
//!
//! What this crate does not do (yet): reach QPs in other hosts (a request to an unknown
//! destination is never answered: RC ends in RETRY_EXC_ERR, UC and UD complete as
//! sent).
//!
//! Safety: safe code cannot make the device touch memory outside a registration.
//! Registering caller memory is `unsafe` ([`Pd::reg_mr`]); [`Pd::alloc_mr`] is the
//! safe way to get registered memory. A memory region named by a posted work request
//! stays registered until that request completes, whatever handles the caller drops.
//! No function panics on bad input; errors carry the errno rdma-core would report.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod ah;
pub mod clock;
mod config;
pub mod context;
pub mod cq;
pub mod device;
mod engine;
pub mod error;
pub(crate) mod fault;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod event;
pub mod gid;
pub mod limits;
pub mod mcast;
pub mod mem;
pub mod mr;
pub mod mw;
pub mod neigh;
mod notify;
pub mod pd;
mod progress;
pub mod qp;
pub mod qp1;
pub mod rule;
mod shm;
pub mod srq;
mod spin;
mod sys;
mod table;
mod transport;
pub mod wc;
pub mod xrcd;

pub use ah::Ah;
pub use context::Context;
pub use cq::channel::{CompChannel, CqEvent};
pub use cq::ex::{ExEntry, ExPoll};
pub use cq::{Cq, CqCreateFlags, CqInit, WcExFlags};
pub use device::{devices, device_by_name, endpoint_dir, process_generation, Device, DeviceAttr, Gid, GidEntry, GidType, PortAttr, PortState};
pub use error::{Error, Result, Rule};
pub use event::{AsyncElement, AsyncEvent};
pub use mr::{Mr, MrInfo, ReregFlags, Sge};
pub use mw::{inc_rkey, Mw, MwBind, MwType};
pub use pd::{ParentDomain, ParentDomainInit, Pd, Td};
pub use qp::attr::{AddressVector, AhAttr, GlobalRoute, MigState, QpAttr, QpCap};
pub use qp::wr::{BindMwWr, FlushPlacement, FlushSelectivity, FlushWr, Payload, PostError, RecvWr, SendWr, UdDest};
pub use qp::batch::{SendBatch, SendOps, WrBatch};
pub use qp::connect::RemotePath;
pub use qp::{Qp, QpInit};
pub use rverbs_proto::state::QpAttrMask;
pub use rverbs_proto::fault::FaultConfig;
pub use rverbs_proto::vendor_err;
pub use rverbs_proto::verbs::{
    Access, EventType, Mtu, QpState, QpType, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
pub use srq::{Srq, SrqAttr, SrqAttrMask, SrqInit};
pub use wc::Wc;
pub use xrcd::Xrcd;

/// The README's Rust snippet, compiled and checked by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
