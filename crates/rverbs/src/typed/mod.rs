//! Typed queue pairs: the transport in the type, one work-request type per opcode
//! family, so that a request the transport cannot carry does not compile.
//!
//! [`Qp`] checks at run time what ibv_post_send(3) allows each QP type (an RDMA READ on
//! UC is `EINVAL`, a UD send without an address handle too). A [`TypedQp<T>`] checks it
//! at compile time: `T` is one of [`Rc`], [`Uc`], [`Ud`] or [`Xrc`] (the XRC initiator),
//! and [`TypedQp::post`] takes only the work requests [`PostOn<T>`] allows:
//!
//! | request | RC | UC | UD | XRC |
//! |---|---|---|---|---|
//! | [`Send`], [`Write`] | yes | yes | — | as [`ToSrq`] |
//! | [`Read`], [`FetchAdd`], [`CompareSwap`] | yes | — | — | as [`ToSrq`] |
//! | [`UdSend`] (address handle, remote QPN and Q_Key required) | — | — | yes | — |
//! | receives ([`TypedQp::post_recv`]) | yes | yes | yes | — (the SRQ of the XRC target) |
//!
//! Each request type has the fields of its opcodes only (a WRITE has no compare value;
//! an atomic's local buffer is one [`AtomicResult`] of exactly 8 bytes). The rules are
//! ibv_post_send(3)'s ("Opcode ... QP Transport" table) and IBTA Vol 1 §9.4 / §11.4.
//! [`TypedQp::post_list`] posts a list in pieces of 16 requests built on the stack: no
//! heap allocation per request.
//!
//! Connecting, modifying and querying are [`Qp`]'s; [`TypedQp::untyped`] lends the
//! runtime-typed handle for everything else.
//!
//! ```
//! use rverbs::typed::{AtomicResult, CompareSwap, FetchAdd, Rc, Read, Remote, TypedQp, Write};
//! use rverbs::{Access, CqInit, QpCap, RemotePath};
//! let ctx = rverbs::devices()?[0].open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(&CqInit::new(16))?;
//! let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let a = TypedQp::<Rc>::create(&pd, &cq, cap)?;
//! let b = TypedQp::<Rc>::create(&pd, &cq, cap)?;
//! let gid = ctx.gid_entry_of([127, 0, 0, 1].into()).expect("loopback GID");
//! let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
//! for (qp, peer) in [(&a, &b), (&b, &a)] {
//!     let path = RemotePath { access, ..RemotePath::new(gid.gid, gid.index as u8, peer.qp_num()) };
//!     qp.connect(&path)?;
//! }
//! let local = pd.alloc_mr(64, access)?;
//! let target = pd.alloc_mr(64, access)?;
//! local.write(0, b"typed")?;
//! let src = [local.sge(0, 5)?];
//! a.post(&Write::new(1, &src, Remote::of(&target, 0)).signaled())?;
//! let back = [local.sge(8, 5)?];
//! a.post(&Read::new(2, &back, Remote::of(&target, 0)).signaled())?;
//! a.post(&FetchAdd::new(3, AtomicResult::in_mr(&local, 16)?, Remote::of(&target, 24), 5).signaled())?;
//! a.post(&CompareSwap::new(4, AtomicResult::in_mr(&local, 32)?, Remote::of(&target, 24), 5, 9).signaled())?;
//! let mut wcs = [rverbs::Wc::default(); 4];
//! let mut n = 0;
//! while n < 4 {
//!     n += cq.poll(&mut wcs[n..])?;
//! }
//! assert!(wcs.iter().all(|w| w.status() == rverbs::WcStatus::Success));
//! assert_eq!(target.read_u64(24)?, 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What does not compile (each next to the line that does, above):
//!
//! An RDMA READ on UC (UC carries SEND and WRITE only):
//! ```compile_fail,E0277
//! # use rverbs::typed::{Read, Remote, TypedQp, Uc};
//! # fn f(qp: &TypedQp<Uc>, into: &[rverbs::Sge]) {
//! qp.post(&Read::new(2, into, Remote::new(0x1000, 7)));
//! # }
//! ```
//! A SEND on UD without the destination (a UD send names its address handle):
//! ```compile_fail,E0277
//! # use rverbs::typed::{Send, TypedQp, Ud};
//! # fn f(qp: &TypedQp<Ud>, sges: &[rverbs::Sge]) {
//! qp.post(&Send::new(1, sges));
//! # }
//! ```
//! An atomic with a list of SGEs (its result is one 8-byte [`AtomicResult`]):
//! ```compile_fail,E0308
//! # use rverbs::typed::{FetchAdd, Rc, Remote, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, sges: &[rverbs::Sge]) {
//! qp.post(&FetchAdd::new(3, sges, Remote::new(0x1000, 7), 5));
//! # }
//! ```
//! A compare value on a WRITE:
//! ```compile_fail,E0599
//! # use rverbs::typed::{Rc, Remote, TypedQp, Write};
//! # fn f(qp: &TypedQp<Rc>, sges: &[rverbs::Sge]) {
//! qp.post(&Write::new(1, sges, Remote::new(0x1000, 7)).compare(5));
//! # }
//! ```
//! A request on an XRC initiator without its target SRQ, and a receive on it:
//! ```compile_fail,E0277
//! # use rverbs::typed::{Remote, TypedQp, Write, Xrc};
//! # fn f(qp: &TypedQp<Xrc>, sges: &[rverbs::Sge]) {
//! qp.post(&Write::new(1, sges, Remote::new(0x1000, 7)));
//! # }
//! ```
//! ```compile_fail,E0599
//! # use rverbs::typed::{TypedQp, Xrc};
//! # fn f(qp: &TypedQp<Xrc>, sges: &[rverbs::Sge]) {
//! qp.post_recv(&[rverbs::RecvWr::new(1, sges)]);
//! # }
//! ```
//! Each of these compiles with the transport or the request that allows it:
//! ```
//! # use rverbs::typed::{AtomicResult, FetchAdd, Rc, Read, Remote, Send, ToSrq, TypedQp, Uc, Ud, UdSend, Write, Xrc};
//! # #[allow(dead_code)]
//! # fn f(rc: &TypedQp<Rc>, uc: &TypedQp<Uc>, ud: &TypedQp<Ud>, xrc: &TypedQp<Xrc>, sges: &[rverbs::Sge],
//! #      dest: rverbs::UdDest<'_>, result: AtomicResult) {
//! rc.post(&Read::new(2, sges, Remote::new(0x1000, 7)));
//! uc.post(&Write::new(1, sges, Remote::new(0x1000, 7)));
//! ud.post(&UdSend::new(1, sges, dest));
//! rc.post(&FetchAdd::new(3, result, Remote::new(0x1000, 7), 5));
//! xrc.post(&ToSrq::new(5, Write::new(1, sges, Remote::new(0x1000, 7))));
//! uc.post_recv(&[rverbs::RecvWr::new(1, sges)]);
//! rc.post(&Send::new(1, sges));
//! # }
//! ```

mod wr;

use std::marker::PhantomData;

use rverbs_proto::verbs::{QpState, QpType};
use smallvec::SmallVec;

use crate::cq::Cq;
use crate::error::Result;
use crate::pd::Pd;
use crate::rings::qp_attr::{QpAttr, QpCap};
use crate::qp::connect::RemotePath;
use crate::rings::wr::{PostError, RecvWr, SendWr};
use crate::qp::{Qp, QpInit};
use rverbs_proto::state::QpAttrMask;

pub use self::wr::{AtomicResult, CompareSwap, FetchAdd, PostOn, Read, Remote, Send, ToSrq, UdSend, Write};

mod sealed {
    /// Only the four transports of this module.
    pub trait Sealed {}
    /// Only [`crate::Pd`] and [`crate::ParentDomain`].
    pub trait SealedDomain {}
}

/// Where a typed QP is created: a protection domain ([`Pd::create_qp`]) or a parent
/// domain ([`ParentDomain::create_qp`], whose allocator then supplies the send ring and
/// which the QP holds, ibv_alloc_parent_domain(3)). Sealed.
///
/// A parent domain is passed as itself, not as the protection domain it wraps (to which
/// it dereferences): `TypedQp::<Rc>::create(&parent, ..)` creates the QP on the parent
/// domain, as `ibv_create_qp(parent_pd, ..)` does.
///
/// [`ParentDomain::create_qp`]: crate::ParentDomain::create_qp
pub trait QpDomain: sealed::SealedDomain {
    /// Creates a QP of `init` here.
    #[doc(hidden)]
    fn create_qp_here(&self, init: &QpInit<'_>) -> Result<Qp>;
    /// The protection domain the QP's memory belongs to (a parent domain's own).
    #[doc(hidden)]
    fn pd_here(&self) -> &Pd;
}

impl sealed::SealedDomain for Pd {}
impl sealed::SealedDomain for crate::pd::ParentDomain {}

impl QpDomain for Pd {
    fn create_qp_here(&self, init: &QpInit<'_>) -> Result<Qp> {
        self.create_qp(init)
    }

    fn pd_here(&self) -> &Pd {
        self
    }
}

impl QpDomain for crate::pd::ParentDomain {
    fn create_qp_here(&self, init: &QpInit<'_>) -> Result<Qp> {
        self.create_qp(init)
    }

    fn pd_here(&self) -> &Pd {
        self.pd()
    }
}

/// A transport a QP can have, as a type (`enum ibv_qp_type`). Sealed.
pub trait Transport: sealed::Sealed + 'static {
    /// The QP type it is.
    const QP_TYPE: QpType;
}

/// Connected transports whose requests need no destination (RC, UC): SEND and WRITE.
pub trait Connected: Transport {}

/// Reliable connected transports (RC): READ and the atomics as well.
pub trait Reliable: Connected {}

/// Transports with a receive queue of their own (RC, UC, UD; not an XRC initiator).
pub trait Receives: Transport {}

/// Reliable Connected (`IBV_QPT_RC`).
#[derive(Debug)]
pub enum Rc {}
/// Unreliable Connected (`IBV_QPT_UC`).
#[derive(Debug)]
pub enum Uc {}
/// Unreliable Datagram (`IBV_QPT_UD`).
#[derive(Debug)]
pub enum Ud {}
/// The initiator of eXtended Reliable Connected (`IBV_QPT_XRC_SEND`): RC's requests, each
/// to an SRQ of the target's XRC domain ([`ToSrq`]).
#[derive(Debug)]
pub enum Xrc {}

impl sealed::Sealed for Rc {}
impl sealed::Sealed for Uc {}
impl sealed::Sealed for Ud {}
impl sealed::Sealed for Xrc {}
impl Transport for Rc {
    const QP_TYPE: QpType = QpType::Rc;
}
impl Transport for Uc {
    const QP_TYPE: QpType = QpType::Uc;
}
impl Transport for Ud {
    const QP_TYPE: QpType = QpType::Ud;
}
impl Transport for Xrc {
    const QP_TYPE: QpType = QpType::XrcSend;
}
impl Connected for Rc {}
impl Connected for Uc {}
impl Reliable for Rc {}
impl Receives for Rc {}
impl Receives for Uc {}
impl Receives for Ud {}

/// Requests [`TypedQp::post_list`] builds on the stack at a time.
const PIECE: usize = 16;

/// A queue pair whose transport is `T` (ibv_create_qp(3) with `qp_type` fixed by the
/// type). Cloning shares the QP, as [`Qp`]'s does.
#[derive(Debug)]
pub struct TypedQp<T: Transport> {
    qp: Qp,
    _transport: PhantomData<fn() -> T>,
}

impl<T: Transport> Clone for TypedQp<T> {
    fn clone(&self) -> Self {
        TypedQp { qp: self.qp.clone(), _transport: PhantomData }
    }
}

impl<T: Transport> TypedQp<T> {
    /// Creates a QP of transport `T` in `pd` (a [`Pd`] or a parent domain,
    /// [`QpDomain`]), completing to `cq` for both queues ([`Pd::create_qp`] with
    /// [`QpInit::new`]).
    ///
    /// Errors: as [`Pd::create_qp`].
    pub fn create<D: QpDomain>(pd: &D, cq: &Cq, cap: QpCap) -> Result<Self> {
        Self::create_with(pd, &QpInit::new(T::QP_TYPE, cq, cap))
    }

    /// Creates a QP of transport `T` in `pd` ([`QpDomain`]) with the other attributes of
    /// `init` (its `qp_type` is `T`'s, whatever it says).
    ///
    /// Errors: as [`Pd::create_qp`].
    pub fn create_with<D: QpDomain>(pd: &D, init: &QpInit<'_>) -> Result<Self> {
        let init = QpInit { qp_type: T::QP_TYPE, ..*init };
        Ok(TypedQp { qp: pd.create_qp_here(&init)?, _transport: PhantomData })
    }

    /// The typed handle of `qp` if its transport is `T`; `qp` back otherwise.
    pub fn from_qp(qp: Qp) -> std::result::Result<Self, Qp> {
        if qp.qp_type() == T::QP_TYPE {
            Ok(TypedQp { qp, _transport: PhantomData })
        } else {
            Err(qp)
        }
    }

    /// Posts one send work request (ibv_post_send(3)); the rules of [`Qp::post_send`]
    /// apply (the request keeps its regions registered until it completes).
    ///
    /// Errors: as [`Qp::post_send`].
    pub fn post<W: PostOn<T>>(&self, wr: &W) -> std::result::Result<(), PostError> {
        self.qp.post_send(&[wr.to_wr()])
    }

    /// Posts `wrs` in order, in pieces of 16 built on the stack (no allocation per
    /// request); each piece enters the send queue in one piece.
    ///
    /// Errors: [`PostError`] names the first refused request by its index in `wrs`; the
    /// ones before it stay posted (ibv_post_send(3) `bad_wr`).
    pub fn post_list<W: PostOn<T>>(&self, wrs: &[W]) -> std::result::Result<(), PostError> {
        let mut piece: SmallVec<[SendWr<'_>; PIECE]> = SmallVec::new();
        for (n, chunk) in wrs.chunks(PIECE).enumerate() {
            piece.clear();
            piece.extend(chunk.iter().map(|w| w.to_wr()));
            self.qp
                .post_send(&piece)
                .map_err(|e| PostError { index: n * PIECE + e.index, error: e.error })?;
        }
        Ok(())
    }

    /// Connects the QP to its peer: RESET → INIT → RTR → RTS ([`Qp::connect`]).
    ///
    /// Errors: as [`Qp::connect`].
    pub fn connect(&self, path: &RemotePath) -> Result<()> {
        self.qp.connect(path)
    }

    /// Modifies the QP (ibv_modify_qp(3); [`Qp::modify`]).
    ///
    /// Errors: as [`Qp::modify`].
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.qp.modify(attr, mask)
    }

    /// The QP's attributes (ibv_query_qp(3)).
    pub fn query(&self) -> QpAttr {
        self.qp.query()
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The QP's state.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }

    /// The runtime-typed handle: what it posts is checked at run time only.
    pub fn untyped(&self) -> &Qp {
        &self.qp
    }

    /// Destroys the QP (ibv_destroy_qp(3); [`Qp::destroy`]).
    ///
    /// Errors: as [`Qp::destroy`].
    pub fn destroy(&self) -> Result<()> {
        self.qp.destroy()
    }
}

impl<T: Receives> TypedQp<T> {
    /// Posts receive work requests (ibv_post_recv(3); [`Qp::post_recv`]). An XRC
    /// initiator has no receive queue: the method does not exist for it.
    ///
    /// Errors: as [`Qp::post_recv`].
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        self.qp.post_recv(wrs)
    }
}

impl<T: Transport> From<TypedQp<T>> for Qp {
    fn from(qp: TypedQp<T>) -> Qp {
        qp.qp
    }
}
