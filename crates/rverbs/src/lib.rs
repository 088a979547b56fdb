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
//! [`devices()`] lists the device with the settings of the `RVERBS_*` variables
//! (docs/environment.md); a program can start more devices beside it, each with its own
//! settings ([`DeviceConfig`]): another endpoint of the host, a device in a runtime
//! directory of its own (another "host"), one with network faults beside one without.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("rverbs-doc-{}", std::process::id()));
//! let second = rverbs::DeviceConfig::new().runtime_dir(&dir).net(false).open()?;
//! let ctx = second.open()?;
//! assert!(second.endpoint_dir()?.starts_with(&dir));
//! # drop(ctx); let _ = std::fs::remove_dir_all(&dir);
//! # Ok::<(), rverbs::Error>(())
//! ```
//!
//! Where a QP's peer is: in this process, in another process of this host (through shared
//! memory), or on another host over RoCEv2/UDP when the device serves the source GID's
//! network interface (docs/network.md); the same requester runs the QP on every link
//! (docs/queue-pairs.md, "One requester, two links"). A destination nobody answers is
//! handled as on a NIC: RC ends in RETRY_EXC_ERR, UC and UD complete as sent.
//!
//! Safety: safe code cannot make the device touch memory outside a registration.
//! Registering caller memory is `unsafe` ([`Pd::reg_mr`]); [`Pd::alloc_mr`] and
//! [`Pd::reg_owned`] (a buffer the region owns, [`owned`]) are the safe ways to get
//! registered memory. A memory region named by a posted work request
//! stays registered until that request completes, whatever handles the caller drops
//! (except an owned region, whose registration ends when it gives its buffer back; a
//! request still naming it then completes in error).
//! No function panics on bad input; errors carry the errno rdma-core would report.
//!
//! # The surface
//!
//! Every public item has one path. The verbs objects ([`Context`], [`Pd`], [`Mr`],
//! [`Mw`], [`Cq`], [`Qp`], [`Srq`], [`Ah`], [`Xrcd`], …), their parameters and results
//! ([`QpInit`], [`QpAttr`], [`SendWr`], [`Wc`], …), the verbs enums and the one
//! [`Error`] are at the crate root. The modules are namespaces of constants and helpers
//! that belong together:
//!
//! - [`limits`]: the limits the device reports and enforces (ibv_query_device(3),
//!   ibv_query_port(3));
//! - [`cap_flags`]: the capability bits and codes of [`DeviceAttr`] and [`PortAttr`];
//! - [`vendor_err`]: the `vendor_err` codes of error completions and their meanings;
//! - [`clock`]: the device clock of completion timestamps (ibv_create_cq_ex(3),
//!   ibv_query_rt_values_ex(3));
//! - [`fault_plan`]: the fault plan of the verbs (a verb fails with a documented error, a
//!   send work request completes with a chosen status; `RVERBS_FAULTS`);
//! - [`sanitize`]: the verbs sanitizer (`RVERBS_SANITIZE`, docs/sanitizer.md): its
//!   switch and its findings as values;
//! - [`typed`]: queue pairs with the transport in the type and work requests by opcode
//!   family, so that a request the transport cannot carry does not compile;
//! - [`owned`]: registered `Vec`s, boxed slices and `BytesMut`s given back at
//!   deregistration, and work requests that lease them until their completion, so that
//!   zero copy needs no `unsafe`;
//! - `aio` (feature `tokio`, or `async-io` for any executor): completions and
//!   asynchronous events as futures and streams, cancellation-safe;
//! - `rdma_core` (feature `rdma-core`): the same verbs over any libibverbs device
//!   (mlx5, rxe, siw, efa, or the drop-in), loaded at run time; the public types
//!   dispatch to it for a device of [`Backend::RdmaCore`], which [`devices`] lists with
//!   `RVERBS_BACKEND=rdma-core` and [`device_by_name`] finds by its libibverbs name;
//! - `c_abi` (feature `c-abi`): the C structs of `<infiniband/verbs.h>` to and from the
//!   value types, for the drop-in C library and the rdma-core backend;
//! - [`capi_support`]: what the drop-in C libraries (`rverbs-capi`) and the connection
//!   manager (`rverbs-cm`) need of the device beyond the verbs API; not for applications.
//!
//! Everything else (the engine, the transports, the shared segments) is private to the
//! crate; ARCHITECTURE.md draws its layers.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod ah;
mod backend;
mod busy_poll;
#[cfg(any(feature = "tokio", feature = "async-io"))]
pub mod aio;
pub mod clock;
mod config;
mod context;
mod cq;
mod device;
mod engine;
mod error;
mod fault;
pub mod fault_plan;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod event;
mod gid;
mod grace;
pub mod limits;
mod mcast;
mod mem;
mod mr;
mod mw;
mod neigh;
mod notify;
pub mod owned;
mod pd;
mod progress;
mod qp;
mod qp1;
#[cfg(feature = "rdma-core")]
pub mod rdma_core;
#[cfg(feature = "c-abi")]
pub mod c_abi;
mod rings;
mod rule;
mod sanitizer;
mod service_thread;
mod shm;
mod spin;
mod sys;
mod table;
mod transport;
pub mod typed;
mod xrcd;

pub use ah::Ah;
pub use backend::{device_by_name, devices, devices_of, listed_backend};
pub use config::DeviceConfig;
pub use context::Context;
pub use cq::channel::{CompChannel, CqEvent};
pub use cq::ex::{ExEntry, ExPoll};
pub use cq::{Cq, CqCreateFlags, CqInit, WcExFlags};
#[doc(hidden)]
pub use cq::{Looked, PollResult};
pub use device::cap_flags;
pub use device::{endpoint_dir, host_counters, host_stats, Backend, Device, DeviceAttr, PortAttr, PortState};
pub use shm::counters::{Counters, EndpointCounters};
pub use shm::latency::Latency;
pub use shm::stats::{CqStats, EndpointStats, QpStats};
pub use gid::{Gid, GidEntry, GidType};
pub use error::{Error, Result};
pub use rule::Rule;
pub use event::{AsyncElement, AsyncEvent};
pub use mr::dm::Dm;
pub use mr::{Advice, Mr, MrInfo, ReregFlags, Sge};
pub use mw::{inc_rkey, Mw, MwBind, MwType};
pub use pd::{ParentDomain, ParentDomainInit, Pd, Td};
pub use rings::qp_attr::{AddressVector, AhAttr, GlobalRoute, MigState, QpAttr, QpCap};
pub use rings::wr::{BindMwWr, FlushPlacement, FlushSelectivity, FlushWr, Payload, PostError, RecvWr, SendWr, UdDest};
pub use qp::batch::{SendBatch, SendOps, WrBatch, WrSlot};
pub use qp::connect::RemotePath;
pub use qp::{Qp, QpInit};
pub use qp::sq::mem::{Allocation, QueueAllocator, QueueBuffer};
pub use mcast::MULTICAST_QPN;
pub use rverbs_proto::state::QpAttrMask;
pub use rverbs_proto::fault::FaultConfig;
pub use rverbs_proto::verb_fault::{Injection, VerbPlan};
pub use rverbs_proto::vendor_err;
pub use rverbs_proto::verbs::{
    Access, EventType, Mtu, QpState, QpType, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
pub use qp::srq::{Srq, SrqAttr, SrqAttrMask, SrqInit};
pub use rings::tag_list::{TagOp, TagOpFlags, TagOpKind, TmCap, TmhOp};
pub use rings::tm_recv::{RVH_LEN, TMH_LEN};
pub use rings::wc::Wc;
pub use xrcd::Xrcd;

pub mod sanitize {
    //! The verbs sanitizer (docs/sanitizer.md): checks of the rules the man pages give
    //! verbs programs, each broken rule reported on stderr as AddressSanitizer reports a
    //! memory error, with the backtraces of where the objects involved were made.
    //!
    //! Off by default, at no cost. `RVERBS_SANITIZE=1` (report and continue) or
    //! `RVERBS_SANITIZE=abort` (the first finding is fatal) switches it on for a process,
    //! C programs on the drop-in library included; [`set_mode`] does from Rust, before
    //! the first device is opened. `RVERBS_SANITIZE_LOG=PATH` appends the reports to a
    //! file too. A Rust test harness reads the findings as values with
    //! [`take_findings`] and asks for the objects alive now with [`leaks`].

    pub use crate::sanitizer::{leaks, mode, set_mode, take_findings, Finding, FindingKind, Frame, Mode, Object, Queue, Site};
}

pub mod capi_support {
    //! What the drop-in libraries need of the device beyond the verbs API: the one public
    //! path into this crate's internals, for `rverbs-capi` (`libibverbs.so.1` and
    //! `librdmacm.so.1`, docs/capi.md) and the connection manager behind its rdma_cm calls
    //! (`rverbs-cm`, docs/connection-manager.md).
    //!
    //! An application has no use for these items; the verbs objects and their parameters are
    //! at the crate root, and the device's limits and capability bits in [`limits`](crate::limits)
    //! and [`cap_flags`](crate::cap_flags). Each item here is the only public path to it:
    //!
    //! - [`GENERATIONS`] and [`process_generation`]: a forked child is a new process of the
    //!   host-wide device with its own endpoint (ibv_fork_init(3); docs/device.md), and
    //!   state that belongs to one process's device is kept per generation, in arrays of
    //!   `GENERATIONS` slots indexed by `process_generation()`: the C layer's default
    //!   context, PD and XRC domain of rdma_cm ids (`rverbs-capi` `cm/context.rs`), the
    //!   connection manager's engine and its thread (`rverbs-cm` `engine/mod.rs`).
    //! - [`qp1`]: QP1, the General Services QP of the port (IBTA Vol 1 §13.4, §13.5): the
    //!   management datagrams the connection manager exchanges with other endpoints of this
    //!   host and with other hosts (`Qp1`, `Mad`, `MadPeer`, `MAD_LEN`).
    //! - [`neigh`]: the next-hop probe rdma_resolve_addr(3) runs, so that an address nobody
    //!   answers ends in RDMA_CM_EVENT_ADDR_ERROR within the caller's timeout, as the
    //!   kernel's rdma_cm resolves the neighbour (`neigh::start`, `Resolving::poll`,
    //!   `Probe`).
    //! - [`spawn_service_thread`]: the one way rverbs and the connection manager start
    //!   their threads, returning once the new thread's start-up is done, so that a
    //!   program that patches libc's memory calls right after a verb (libfabric's memory
    //!   hooks) finds none of ours inside them (docs/progress-and-events.md).
    //! - [`sanitizer_internal`]: objects the C libraries and the connection manager keep
    //!   for the life of the process are made inside it, so the verbs sanitizer does not
    //!   report them as leaks (docs/sanitizer.md); [`sanitizer_wc_read`]: the check of the
    //!   extended CQ's `ibv_wc_read_*` functions, which only the C library has.

    pub use crate::sys::{process_generation, GENERATIONS};
    pub use crate::progress::application_waits;
    pub use crate::sanitizer::internal as sanitizer_internal;
    pub use crate::service_thread::spawn as spawn_service_thread;

    /// A heap block `[addr, addr+len)` is being released (`free`, or the part of a block
    /// `realloc` gives back): the verbs sanitizer's mr-memory-freed check
    /// (docs/sanitizer.md), called by the drop-in's `free` watch. Off, one relaxed load.
    #[inline]
    pub fn sanitizer_released(addr: usize, len: usize) {
        if crate::sanitizer::on() {
            crate::sanitizer::released(addr, len);
        }
    }

    /// The verbs sanitizer's check of an `ibv_wc_read_*` of extended CQ `cq` reading the
    /// field that `field` (`flag`, e.g. `IBV_WC_EX_WITH_BYTE_LEN`) requests: reported
    /// if the CQ was created without it (ibv_create_cq_ex(3): "only fields that the user
    /// requested via wc_flags in ibv_create_cq_ex could be queried"; docs/sanitizer.md,
    /// wc-field-not-requested). Off, one relaxed load.
    #[inline(always)]
    pub fn sanitizer_wc_read(cq: &crate::Cq, field: crate::WcExFlags, read: &'static str, flag: &'static str) {
        if crate::sanitizer::on() {
            cq.sanitize_wc_read(field, read, flag);
        }
    }

    /// QP1, the General Services QP of the port: the connection manager's MADs. To an
    /// endpoint of this host a MAD is a record in that endpoint's QP1 FIFO; to another
    /// host, a RoCEv2 UD packet to its port 4791 (docs/connection-manager.md, "QP1").
    pub mod qp1 {
        pub use crate::qp1::{Mad, MadPeer, Qp1, GSI_QKEY, GSI_QPN, MAD_LEN};
    }

    /// The device a QP was created on, for the connection manager, which keeps one
    /// engine (QP1, listener table, context) per device (docs/connection-manager.md,
    /// "Several devices").
    pub use crate::device::device_of_qp;

    /// A blocking event getter (`rdma_get_cm_event`, `ibv_get_cq_event`,
    /// `ibv_get_async_event`) that found its channel or context already destroyed while
    /// another thread runs the process's exit waits (2 s at most) for the exit before
    /// failing (docs/capi.md, "Threads racing with exit").
    pub use crate::sys::park_if_exiting;

    /// Device slots of a process: the connection manager indexes its engines by the
    /// slot of their device ([`crate::Device::slot_index`]).
    pub use crate::sys::{default_device_slot, MAX_DEVICES};

    /// The next-hop probe of rdma_resolve_addr(3) as the kernel's rdma_cm asks it: the
    /// route's next hop is made to resolve and looked up in the kernel's neighbour table
    /// (docs/connection-manager.md).
    pub mod neigh {
        pub use crate::neigh::{start, Probe, Resolving};
    }
}

/// The README's Rust snippet, compiled and checked by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
