//! The `rdma-core` backend (feature `rdma-core`): the verbs API over any libibverbs
//! device — mlx5, rxe, siw, efa, or rverbs' own drop-in `libibverbs.so.1`.
//!
//! libibverbs is loaded at run time (`dlopen` of `libibverbs.so.1`, or the file named
//! by `RVERBS_LIBIBVERBS`), so the crate never links it and builds where it is absent;
//! without it [`devices`] is `EOPNOTSUPP`. The objects take and give the soft API's
//! value types ([`SendWr`](crate::SendWr), [`RecvWr`](crate::RecvWr),
//! [`Sge`](crate::Sge), [`Wc`](crate::Wc), [`QpAttr`](crate::QpAttr),
//! [`QpAttrMask`](crate::QpAttrMask), [`QpCap`](crate::QpCap), [`AhAttr`](crate::AhAttr),
//! [`Gid`](crate::Gid), [`PortAttr`](crate::PortAttr), [`DeviceAttr`](crate::DeviceAttr),
//! [`Access`](crate::Access), [`Error`](crate::Error)) and have the soft types' method
//! names, so that one program runs on either.
//!
//! A program normally reaches these objects through the public types: a device of
//! [`crate::Backend::RdmaCore`] (listed by [`crate::devices`] with
//! `RVERBS_BACKEND=rdma-core`, by [`crate::devices_of`], or found by
//! [`crate::device_by_name`]) opens a [`crate::Context`] whose PDs, CQs, channels, QPs,
//! regions and address handles are this module's, behind `rverbs`' own types (their
//! `Repr`; docs/rdma-core-backend.md lists what they carry). Used directly, as below, the
//! objects follow the same rules.
//!
//! ```no_run
//! use rverbs::rdma_core::devices;
//! use rverbs::{CqInit, QpCap, QpInit, QpType};
//! let dev = devices()?.into_iter().next().expect("an RDMA device");
//! let ctx = dev.open()?;
//! let pd = ctx.alloc_pd()?;
//! // The backend takes the public init types, whose CQs are public `Cq`s.
//! let cq = rverbs::Cq::from(ctx.create_cq(&CqInit::new(16))?);
//! let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap))?;
//! assert_eq!(qp.state(), rverbs::QpState::Reset);
//! # Ok::<(), rverbs::Error>(())
//! ```
//!
//! Ownership: a child holds its parents (a QP its PD and CQs, a CQ its context and
//! channel, every object the context, the context the loaded library); dropping the last
//! handle destroys the object, logging an error. `destroy(&self)` (`dealloc`, `dereg`),
//! through any handle, destroys now and returns the error, `EBUSY` while a live child
//! uses the object (ibv_destroy_cq(3), ibv_dealloc_pd(3)), leaving it usable; the other
//! handles' calls are then `EINVAL`. What the
//! backend covers and what the soft device offers that it cannot: docs/rdma-core-backend.md.
#![allow(unsafe_code)] // FFI into libibverbs: each block says why it is sound.

mod ah;
mod channel;
mod context;
mod conv;
mod cq;
mod device;
mod library;
mod life;
mod mr;
mod pd;
mod qp;
mod wr;

pub use ah::Ah;
pub use channel::CompChannel;
pub use context::Context;
pub use cq::Cq;
pub use device::{device_by_name, devices, ibv_get_device_list_address, Device};
#[doc(hidden)]
pub use library::errno_or_eio;
pub use mr::Mr;
pub use pd::Pd;
pub use qp::{Qp, Release};
