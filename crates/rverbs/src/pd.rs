//! Protection domains, thread domains and parent domains.
//!
//! Rule: ibv_alloc_pd(3): memory regions, queue pairs, SRQs and address handles belong
//! to one PD; a local or remote key is only honoured for a QP of the same PD.
//! Rule: ibv_dealloc_pd(3): fails with EBUSY while objects still belong to the PD.
//! Rule: ibv_alloc_td(3): a thread domain tells the device that the objects created
//! under it are used by one thread at a time, so it may leave out its internal locks;
//! ibv_dealloc_td(3) fails while objects still use it.
//! Rule: ibv_alloc_parent_domain(3): a parent domain extends a protection domain with an
//! optional thread domain and a user context; it is interchangeable with the PD it was
//! made from and accepted wherever a PD is; ibv_dealloc_pd(3) deallocates it.
//!
//! What rverbs does with thread and parent domains (docs/memory.md, "Parent and thread
//! domains"): objects created on a parent domain belong to its protection domain (keys,
//! PD checks and `ibv_dealloc_pd`'s EBUSY are the protection domain's); a CQ created on a
//! parent domain (ibv_create_cq_ex(3), `IBV_CQ_INIT_ATTR_MASK_PD`) keeps it, and is
//! SINGLE_THREADED when the parent domain has a thread domain; a QP created on it holds
//! it too (mlx5 counts both). The application's allocator ([`QueueAllocator`]) is asked
//! for the ring of the send queue of every QP created on it, the one queue buffer that is
//! this process's alone; the completion, receive and SRQ rings are shared segments that
//! other processes map, and never come from it (the page says which and why).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::context::Context;
use crate::cq::{Cq, CqCreateFlags, CqInit};
use crate::error::{Error, Result};
use crate::mr::domain::{ContextCore, PdCore, PdOf};
use crate::rule::Rule;
use crate::mr::{Mr, MrInit, ReregFlags};
use crate::mw::Mw;
use crate::qp::{ParentHold, Qp, QpInit};
use crate::qp::sq::mem::{QueueAllocator, SharedAllocator};
use crate::qp::srq::{Srq, SrqInit};
use rverbs_proto::verbs::Access;
use rverbs_proto::verb_fault::Verb;

impl Context {
    /// Allocates a protection domain (ibv_alloc_pd(3)).
    pub fn alloc_pd(&self) -> Result<Pd> {
        #[cfg(feature = "rdma-core")]
        if let Some(n) = self.native() {
            return Ok(Pd::from_native(Arc::new(n.alloc_pd()?)));
        }
        let core = self.inner()?;
        if let Some(e) = crate::fault_plan::fail(core.endpoint.slot, Verb::AllocPd, None, None) {
            return Err(e);
        }
        Pd::new(core.clone())
    }
}

/// PD handles: the next never used, and those of dropped PDs (reused first, so a
/// process that allocates and frees PDs forever never runs out).
static NEXT_PD: AtomicU32 = AtomicU32::new(1);
static FREE_PDS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

// The core is the PD's only state (`mr::domain`): its handle goes back to the free list
// when the core goes.
impl Drop for PdCore {
    fn drop(&mut self) {
        if crate::sanitizer::on() {
            crate::sanitizer::gone(crate::sanitizer::Kind::Pd, crate::sanitizer::Id::new(self.endpoint().slot, self.id));
        }
        // Nothing names the handle any more: its regions, QPs and SRQs held the PD.
        FREE_PDS.lock().expect("pd handles").push(self.id);
    }
}

/// A protection domain (`struct ibv_pd`). Cloning shares it.
#[derive(Clone)]
pub struct Pd {
    repr: Repr,
}

/// What a [`Pd`] is: the soft device's PD core, or (feature `rdma-core`) a PD of the
/// rdma-core backend with the public context it was allocated in.
#[derive(Clone)]
enum Repr {
    Soft(Arc<PdCore>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn crate::mr::native::NativePd>),
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("handle", &self.handle()).finish()
    }
}

impl Pd {
    pub(crate) fn new(ctx: Arc<ContextCore>) -> Result<Self> {
        let reused = FREE_PDS.lock().expect("pd handles").pop();
        let id = match reused {
            Some(id) => id,
            None => {
                let id = NEXT_PD.fetch_add(1, Ordering::Relaxed);
                if id > crate::limits::MAX_PD {
                    NEXT_PD.fetch_sub(1, Ordering::Relaxed);
                    return Err(Error::Exhausted { what: "protection domains" });
                }
                id
            }
        };
        if crate::sanitizer::on() {
            crate::sanitizer::created(crate::sanitizer::Kind::Pd, crate::sanitizer::Id::new(ctx.endpoint.slot, id), None);
        }
        Ok(Pd { repr: Repr::Soft(Arc::new(PdCore::new(ctx, id))) })
    }

    pub(crate) fn from_inner(inner: Arc<PdCore>) -> Self {
        Pd { repr: Repr::Soft(inner) }
    }

    /// The handle of the PD a region or QP names.
    fn of(parent: PdOf) -> Self {
        match parent {
            PdOf::Soft(core) => Pd::from_inner(core),
            #[cfg(feature = "rdma-core")]
            PdOf::Native(pd) => Pd::from_native(pd),
        }
    }

    /// The public PD of a PD of the rdma-core backend (what a region or QP of the
    /// backend gives back as its PD).
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(pd: Arc<dyn crate::mr::native::NativePd>) -> Self {
        Pd { repr: Repr::Native(pd) }
    }

    /// The soft PD's core; `EOPNOTSUPP` for a PD of the rdma-core backend (what its
    /// caller does, the backend does not offer).
    pub(crate) fn inner(&self) -> Result<&Arc<PdCore>> {
        match &self.repr {
            Repr::Soft(core) => Ok(core),
            #[cfg(feature = "rdma-core")]
            Repr::Native(..) => Err(crate::Error::native_unsupported("a verb of the soft device")),
        }
    }

    /// The backend's PD behind this one, for a PD of the rdma-core backend (`None` for a
    /// soft PD): for a library that creates QPs in it itself (rdma_create_qp(3), as
    /// rverbs-cm's `CmId::create_qp` over librdmacm does).
    #[cfg(feature = "rdma-core")]
    pub fn native(&self) -> Option<&crate::rdma_core::Pd> {
        match &self.repr {
            Repr::Soft(_) => None,
            Repr::Native(pd) => pd.as_any().downcast_ref(),
        }
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> Context {
        match &self.repr {
            Repr::Soft(core) => Context::from_inner(core.ctx.clone()),
            #[cfg(feature = "rdma-core")]
            Repr::Native(pd) => Context::from_native(pd.context()),
        }
    }

    /// A number identifying the PD in the process (`ibv_pd.handle`; on the rdma-core
    /// backend, the handle the provider gave it).
    pub fn handle(&self) -> u32 {
        match &self.repr {
            Repr::Soft(core) => core.id,
            #[cfg(feature = "rdma-core")]
            Repr::Native(pd) => pd.handle(),
        }
    }

    /// Allocates a page-aligned, zero-filled buffer of `len` bytes and registers it
    /// (the safe way to get registered memory). The memory lives until the `Mr` and every
    /// work request naming it are gone.
    ///
    /// Rule: ibv_reg_mr(3): REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE.
    /// Errors: `EINVAL` for a zero length, an illegal access combination or unknown
    /// access bits.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        #[cfg(feature = "rdma-core")]
        if let Some(pd) = self.native() {
            return Ok(Mr::from_native(Arc::new(pd.alloc_mr(len, access)?)));
        }
        Mr::alloc(self.inner()?.clone(), len, access)
    }

    /// Registers `len` bytes of device memory `dm` from `offset` (ibv_reg_dm_mr, in
    /// ibv_alloc_dm(3)): a zero-based region, whose remote addresses are offsets from its
    /// first byte; peer processes of the host reach it with plain loads and stores.
    /// [`Mr::read`] and [`Mr::write`] work on it as on any region.
    ///
    /// Errors: `EINVAL` for access a region over device memory cannot have (ON_DEMAND,
    /// MW_BIND, HUGETLB, FLUSH, unknown bits: [`Rule::DmMrAccess`]), without
    /// [`Access::ZERO_BASED`] ([`Rule::DmMrZeroBased`]), for a range outside the
    /// allocation or freed memory ([`Rule::DmRange`]), or an illegal access combination.
    ///
    /// [`Rule::DmMrAccess`]: crate::Rule::DmMrAccess
    /// [`Rule::DmMrZeroBased`]: crate::Rule::DmMrZeroBased
    /// [`Rule::DmRange`]: crate::Rule::DmRange
    pub fn reg_dm_mr(&self, dm: &crate::mr::dm::Dm, offset: u64, len: usize, access: Access) -> Result<Mr> {
        Mr::register_dm(self.inner()?.clone(), dm, offset, len, access)
    }

    /// Registers caller memory `[addr, addr + len)` (ibv_reg_mr(3)); local and remote
    /// addresses of the region equal the process addresses.
    ///
    /// With [`Access::ON_DEMAND`] (on-demand paging, docs/memory.md) nothing is checked
    /// or faulted in: pages may be mapped later, and an access to a page that is not
    /// there fails as on a NIC (a protection or access error completion).
    ///
    /// # Safety
    /// The range must be valid, writable memory that stays allocated until the returned
    /// `Mr` is deregistered or dropped and every work request naming it has completed
    /// (on demand: whatever is mapped there when the device accesses it is reached).
    /// A region named by a receive posted with [`Qp::post_recv`](crate::Qp::post_recv)
    /// stays registered, after its handles are dropped, until that receive's completion
    /// is polled (or the queue flushes or drops it): until then peers can still write it
    /// (docs/memory.md, "Buffer lifetime"; [`Mr::dereg`](crate::Mr::dereg) ends it at
    /// once).
    /// The device reads and writes it concurrently with the program, like a NIC.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.reg_mr_iova(addr, len, addr as u64, access) }
    }

    /// Registers caller memory whose device-visible addresses start at `iova`
    /// (ibv_reg_mr_iova(3): the offset of address `x` is `x - iova`).
    ///
    /// # Safety
    /// As for [`Pd::reg_mr`].
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_iova(
        &self,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<Mr> {
        #[cfg(feature = "rdma-core")]
        if let Some(pd) = self.native() {
            if iova != addr as u64 {
                return Err(Error::native_unsupported("reg_mr_iova (an IO virtual address other than the address)"));
            }
            // SAFETY: forwarded from the caller's contract.
            return Ok(Mr::from_native(Arc::new(unsafe { pd.reg_mr(addr, len, access)? })));
        }
        Mr::register(self.inner()?.clone(), MrInit { addr: addr as usize, len, iova, access })
    }

    /// Registers the whole address space on demand: implicit on-demand paging
    /// (ibv_reg_mr(3) with address NULL, length SIZE_MAX and IBV_ACCESS_ON_DEMAND, which
    /// `odp_caps` advertises as IBV_ODP_SUPPORT_IMPLICIT). Any address of the process is
    /// reached through the region's keys, its remote addresses equal to the process's;
    /// memory mapped after the registration is reached too.
    ///
    /// # Safety
    /// Every byte of the process may be read and written by the device through the
    /// region's keys (by peers, through its rkey, as `access` allows), concurrently with
    /// the program, until the region is deregistered and its work requests completed.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_implicit(&self, access: Access) -> Result<Mr> {
        Mr::register(self.inner()?.clone(), MrInit { addr: 0, len: usize::MAX, iova: 0, access: access | Access::ON_DEMAND })
    }

    /// Advises the device of how the ranges `sges` name will be used (ibv_advise_mr(3)):
    /// PREFETCH and PREFETCH_WRITE fault their pages in now, PREFETCH_NO_FAULT does
    /// nothing (pages that are there are found anyway). The regions must be on-demand
    /// regions of this PD.
    ///
    /// Errors, per SGE in mlx5's order (drivers/infiniband/hw/mlx5/odp.c): `ENOENT` for
    /// an lkey naming no on-demand region (none, or one without ON_DEMAND); `EINVAL` for
    /// a memory window's key; `EPERM` for a region of another PD, or PREFETCH_WRITE on a
    /// region that is not writable; `EFAULT` for a range outside its region or pages
    /// outside the address space.
    pub fn advise_mr(&self, advice: crate::mr::Advice, sges: &[crate::mr::Sge]) -> Result<()> {
        crate::mr::advise(self.inner()?, advice, sges)
    }

    /// Creates a queue pair (ibv_create_qp(3)).
    ///
    /// On the rdma-core backend: RC, UC and UD, with CQs of the same backend (others are
    /// `EINVAL`); an SRQ or `send_ops` (the work-request builder) is `EOPNOTSUPP`.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        #[cfg(feature = "rdma-core")]
        if let Some(pd) = self.native() {
            return Ok(pd.create_qp(init)?.into());
        }
        let core = self.inner()?;
        Qp::new(core.clone(), init, crate::device::of(&core.ctx))
    }

    /// Creates a shared receive queue (ibv_create_srq(3)).
    pub fn create_srq(&self, init: &SrqInit) -> Result<Srq> {
        let core = self.inner()?;
        Srq::new_in(core.clone(), &crate::device::of(&core.ctx).srqs, init, None, None)
    }

    /// Creates a tag-matching SRQ (ibv_create_srq_ex(3) with `IBV_SRQT_TM`, `tm_cap`):
    /// its receives and its list operations complete to `cq`; tagged buffers are managed
    /// with [`Srq::post_tag_op`], plain receives (for unexpected messages) posted as on any
    /// SRQ (docs/tag-matching.md).
    ///
    /// Errors: `EINVAL` for `max_num_tags` of 0 or above `tm_caps.max_num_tags`, `max_ops`
    /// above `tm_caps.max_ops`, or a CQ of another context; otherwise as
    /// [`Pd::create_srq`].
    pub fn create_srq_tm(&self, init: &SrqInit, tm: crate::rings::tag_list::TmCap, cq: &crate::cq::Cq) -> Result<Srq> {
        let core = self.inner()?;
        if !Arc::ptr_eq(&cq.inner()?.ctx, &core.ctx) {
            return Err(Error::invalid("create_srq_ex", crate::rule::Rule::ForeignContext { what: "CQ" }));
        }
        let srqs = &crate::device::of(&core.ctx).srqs;
        Srq::new_in(core.clone(), srqs, init, None, Some((tm, cq.inner()?.clone())))
    }

    /// Deallocates the PD (ibv_dealloc_pd(3)).
    ///
    /// Errors: `EBUSY` while MRs, QPs, SRQs or AHs still belong to it (not destroyed),
    /// `EINVAL` once deallocated. On the rdma-core backend, the provider's
    /// ibv_dealloc_pd(3), after the calls in progress through other handles return; an
    /// error leaves the PD usable (docs/rdma-core-backend.md).
    pub fn dealloc(&self) -> Result<()> {
        #[cfg(feature = "rdma-core")]
        if let Repr::Native(pd) = &self.repr {
            return pd.dealloc();
        }
        let core = self.inner()?;
        core.dealloc()?;
        if crate::sanitizer::on() {
            crate::sanitizer::gone(crate::sanitizer::Kind::Pd, crate::sanitizer::Id::new(core.endpoint().slot, core.id));
        }
        Ok(())
    }
}

// The verbs-layer accessors and calls of the objects that belong to a PD: the objects
// hold the PD's core (`mr::domain::PdCore`) and never name the handle.

impl Mr {
    /// The protection domain.
    pub fn pd(&self) -> Pd {
        Pd::of(self.parent())
    }

    /// Changes the PD and/or the access rights in place (ibv_rereg_mr(3)); the keys stay
    /// the same. Accesses in progress finish first.
    ///
    /// Rule: flags must be non-empty; `pd` is required with `PD` and `access` with
    /// `ACCESS`, whose rules are those of registration. Address changes need
    /// [`Mr::rereg_translation`].
    /// Errors: `EINVAL` for bad combinations or access flags, `EBUSY` while memory
    /// windows are bound.
    pub fn rereg(&self, flags: ReregFlags, pd: Option<&Pd>, access: Option<Access>) -> Result<()> {
        self.rereg_inner(flags, pd.map(Pd::inner).transpose()?, access, None)
    }

    /// As [`Mr::rereg`], also moving the region to caller memory `[addr, addr + len)`
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`); the IO virtual address becomes `addr`.
    ///
    /// # Safety
    /// As for [`Pd::reg_mr`]: the new range must stay valid until the region is
    /// deregistered, re-registered again or dropped, and every request using it completed.
    #[allow(unsafe_code)]
    pub unsafe fn rereg_translation(
        &self,
        flags: ReregFlags,
        addr: *mut u8,
        len: usize,
        pd: Option<&Pd>,
        access: Option<Access>,
    ) -> Result<()> {
        self.rereg_inner(flags | ReregFlags::TRANSLATION, pd.map(Pd::inner).transpose()?, access, Some((addr as usize, len)))
    }
}

impl Mw {
    /// Allocates a window of `mw_type` in `pd` (ibv_alloc_mw(3): 1 or 2).
    ///
    /// Errors: `EINVAL` for any other type (uverbs refuses it before the driver).
    pub fn new(pd: &Pd, mw_type: u32) -> Result<Mw> {
        Mw::new_in(pd.inner()?, mw_type)
    }
}

impl Qp {
    /// The protection domain.
    pub fn pd(&self) -> Pd {
        Pd::of(self.parent())
    }
}

// ---- Thread domains and parent domains (ibv_alloc_td(3), ibv_alloc_parent_domain(3))

/// `users` bit: the domain was deallocated.
const DEALLOCATED: u32 = 1 << 31;

/// Counts a user of a domain unless it was deallocated.
fn domain_hold(users: &AtomicU32, what: &'static str) -> Result<()> {
    users
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| (u & DEALLOCATED == 0).then_some(u + 1))
        .map(|_| ())
        .map_err(|_| Error::Destroyed { what })
}

/// Marks a domain deallocated if nothing uses it.
fn domain_dealloc(users: &AtomicU32, what: &'static str) -> Result<()> {
    match users.compare_exchange(0, DEALLOCATED, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(()),
        Err(u) if u & DEALLOCATED != 0 => Err(Error::Destroyed { what }),
        Err(_) => Err(Error::Busy { what }),
    }
}

impl Context {
    /// Allocates a thread domain (ibv_alloc_td(3)).
    pub fn alloc_td(&self) -> Result<Td> {
        Ok(Td { inner: Arc::new(TdInner { ctx: self.inner()?.clone(), users: AtomicU32::new(0) }) })
    }

    /// Allocates a parent domain over `init.pd` (ibv_alloc_parent_domain(3)).
    ///
    /// Rule: ibv_alloc_parent_domain(3): the protection domain cannot be missing; the
    /// thread domain is optional. Both must belong to this context.
    /// Rule: ibv_dealloc_pd(3) on the protection domain fails with EBUSY while the parent
    /// domain exists, and ibv_dealloc_td(3) on its thread domain likewise.
    /// Errors: `EINVAL` for a PD or TD of another context, or one already deallocated.
    pub fn alloc_parent_domain(&self, init: &ParentDomainInit<'_>) -> Result<ParentDomain> {
        let pd = init.pd;
        let (core, pd_core) = (self.inner()?, pd.inner()?);
        if pd_core.ctx.id != core.id {
            return Err(Error::invalid("alloc_parent_domain", Rule::ForeignContext { what: "protection domain" }));
        }
        if let Some(td) = init.td {
            if td.inner.ctx.id != core.id {
                return Err(Error::invalid("alloc_parent_domain", Rule::ForeignContext { what: "thread domain" }));
            }
        }
        pd_core.hold()?;
        if let Some(td) = init.td {
            if let Err(e) = domain_hold(&td.inner.users, "thread domain") {
                pd_core.release();
                return Err(e);
            }
        }
        Ok(ParentDomain {
            inner: Arc::new(ParentInner {
                ctx: core.clone(),
                pd: pd.clone(),
                td: init.td.cloned(),
                pd_context: init.pd_context,
                alloc: init.alloc.clone(),
                users: AtomicU32::new(0),
            }),
        })
    }
}

/// A thread domain (`struct ibv_td`, ibv_alloc_td(3)). Cloning shares it.
#[derive(Clone)]
pub struct Td {
    inner: Arc<TdInner>,
}

struct TdInner {
    ctx: Arc<ContextCore>,
    /// Parent domains using the thread domain; the top bit marks it deallocated.
    users: AtomicU32,
}

impl std::fmt::Debug for Td {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Td").field("users", &(self.inner.users.load(Ordering::Relaxed) & !DEALLOCATED)).finish()
    }
}

impl Td {
    /// The context the thread domain belongs to.
    pub fn context(&self) -> Context {
        Context::from_inner(self.inner.ctx.clone())
    }

    /// Deallocates the thread domain (ibv_dealloc_td(3)).
    ///
    /// Errors: `EBUSY` while a parent domain uses it; `EINVAL` if already deallocated.
    pub fn dealloc(&self) -> Result<()> {
        domain_dealloc(&self.inner.users, "thread domain")
    }
}

/// What a parent domain is made of (`struct ibv_parent_domain_init_attr`).
#[derive(Clone)]
pub struct ParentDomainInit<'a> {
    /// The protection domain the parent domain extends (cannot be missing).
    pub pd: &'a Pd,
    /// An optional thread domain.
    pub td: Option<&'a Td>,
    /// The application's value (`pd_context`, `IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`).
    pub pd_context: usize,
    /// The application's allocator (`alloc` / `free` with
    /// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`), asked for the send queue's ring of each
    /// QP created on the parent domain ([`ParentDomain::create_qp`]).
    ///
    /// Deviation: rverbs asks it for no other buffer: the completion, receive and SRQ
    /// rings are shared segments other processes map, allocated as if it had answered
    /// `IBV_ALLOCATOR_USE_DEFAULT` (docs/memory.md, "Custom allocators").
    pub alloc: Option<Arc<dyn QueueAllocator>>,
}

impl<'a> ParentDomainInit<'a> {
    /// A parent domain over `pd`, without thread domain, with `pd_context` 0 and no
    /// allocator.
    pub fn new(pd: &'a Pd) -> Self {
        ParentDomainInit { pd, td: None, pd_context: 0, alloc: None }
    }
}

impl std::fmt::Debug for ParentDomainInit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParentDomainInit")
            .field("pd", &self.pd)
            .field("td", &self.td)
            .field("pd_context", &self.pd_context)
            .field("alloc", &self.alloc.is_some())
            .finish()
    }
}

/// A parent domain (ibv_alloc_parent_domain(3)). Cloning shares it.
///
/// Rule: ibv_alloc_parent_domain(3): "completely interchangeable with the struct ibv_pd
/// used to create it": it dereferences to its protection domain, so MRs, QPs, SRQs and
/// AHs created through it belong to that PD (and count against it, as rdma-core's mlx5
/// counts them on the protection domain it wraps). Its own [`ParentDomain::create_cq`]
/// and [`ParentDomain::create_qp`] make objects that hold the parent domain itself.
///
/// ```
/// use rverbs::{Access, CqCreateFlags, CqInit, ParentDomainInit};
/// let ctx = rverbs::devices()?[0].open()?;
/// let pd = ctx.alloc_pd()?;
/// let td = ctx.alloc_td()?;
/// let parent = ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) })?;
/// let cq = parent.create_cq(&CqInit::new(16))?;
/// assert!(cq.create_flags().contains(CqCreateFlags::SINGLE_THREADED));
/// let mr = parent.alloc_mr(4096, Access::LOCAL_WRITE)?;
/// assert_eq!(mr.pd().handle(), pd.handle());
/// assert!(pd.dealloc().is_err(), "EBUSY: the parent domain uses it");
/// # Ok::<(), rverbs::Error>(())
/// ```
#[derive(Clone)]
pub struct ParentDomain {
    inner: Arc<ParentInner>,
}

struct ParentInner {
    ctx: Arc<ContextCore>,
    pd: Pd,
    td: Option<Td>,
    pd_context: usize,
    alloc: Option<SharedAllocator>,
    /// CQs and QPs created on the parent domain; the top bit marks it deallocated.
    users: AtomicU32,
}

impl ParentInner {
    /// Gives the protection and thread domains back (once: at deallocation, or when the
    /// last handle of a parent domain never deallocated goes).
    fn release_domains(&self) {
        // The PD is a soft one: `alloc_parent_domain` took only such.
        if let Ok(core) = self.pd.inner() {
            core.release();
        }
        if let Some(td) = &self.td {
            td.inner.users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for ParentInner {
    fn drop(&mut self) {
        if self.users.load(Ordering::Acquire) & DEALLOCATED == 0 {
            self.release_domains();
        }
    }
}

impl std::fmt::Debug for ParentDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParentDomain")
            .field("pd", &self.inner.pd)
            .field("td", &self.inner.td)
            .field("pd_context", &self.inner.pd_context)
            .field("alloc", &self.inner.alloc.is_some())
            .finish()
    }
}

impl std::ops::Deref for ParentDomain {
    type Target = Pd;

    /// The protection domain the parent domain extends.
    fn deref(&self) -> &Pd {
        &self.inner.pd
    }
}

impl ParentDomain {
    /// The protection domain the parent domain extends (`attr->pd`).
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// The thread domain, if any (`attr->td`).
    pub fn td(&self) -> Option<&Td> {
        self.inner.td.as_ref()
    }

    /// The application's value (`attr->pd_context`).
    pub fn pd_context(&self) -> usize {
        self.inner.pd_context
    }

    /// Whether `self` and `other` are the same parent domain.
    pub fn same(&self, other: &ParentDomain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Creates a CQ on the parent domain (ibv_create_cq_ex(3) with
    /// `IBV_CQ_INIT_ATTR_MASK_PD` and `parent_domain`).
    ///
    /// Rule: ibv_alloc_td(3): objects created under a thread domain leave out the
    /// internal locks, so with a thread domain the CQ is created SINGLE_THREADED (its
    /// polls take no consumer lock, ibv_create_cq_ex(3)); producers of other QPs and
    /// processes still publish into it safely, as for any SINGLE_THREADED CQ.
    /// Rule: the parent domain cannot be deallocated while the CQ exists (EBUSY).
    /// Errors: as [`Context::create_cq`]; `EINVAL` if the parent domain was deallocated.
    pub fn create_cq(&self, init: &CqInit<'_>) -> Result<Cq> {
        domain_hold(&self.inner.users, "parent domain")?;
        let guard = ParentUse(self.clone());
        let mut init = init.clone();
        if self.inner.td.is_some() {
            init.flags |= CqCreateFlags::SINGLE_THREADED;
        }
        let cq = Context::from_inner(self.inner.ctx.clone()).create_cq(&init)?;
        cq.set_parent(Box::new(guard));
        Ok(cq)
    }

    /// Creates a QP on the parent domain (ibv_create_qp(3) with the parent domain as
    /// `pd`): a QP of its protection domain, whose send queue's ring comes from the
    /// parent domain's allocator when it has one.
    ///
    /// Rule: ibv_alloc_parent_domain(3): provider buffers come from `alloc`; an answer of
    /// `IBV_ALLOCATOR_USE_DEFAULT` leaves the buffer to the device, NULL is an error;
    /// `free` takes back what `alloc` gave, here when the QP is destroyed (the contract
    /// is on [`QueueAllocator`]). The request: [`QueueBuffer::SEND_QUEUE`],
    /// [`QueueBuffer::ALIGNMENT`].
    /// Rule: the parent domain cannot be deallocated while the QP exists (EBUSY; mlx5
    /// counts QPs on the parent domain).
    /// Errors: as [`Pd::create_qp`]; `ENOMEM` when the allocator fails (or panics);
    /// `EINVAL` when it answers a buffer not aligned as asked (given back at once), or
    /// the parent domain was deallocated.
    ///
    /// [`QueueBuffer::SEND_QUEUE`]: crate::qp::sq::mem::QueueBuffer::SEND_QUEUE
    /// [`QueueBuffer::ALIGNMENT`]: crate::qp::sq::mem::QueueBuffer::ALIGNMENT
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        domain_hold(&self.inner.users, "parent domain")?;
        let hold = ParentHold { hold: Box::new(ParentUse(self.clone())), alloc: self.inner.alloc.clone() };
        let pd = self.inner.pd.inner()?.clone();
        let dev = crate::device::of(&pd.ctx);
        Qp::new_on_parent(pd, init, dev, hold)
    }

    /// Deallocates the parent domain (ibv_dealloc_pd(3) on it); its protection and
    /// thread domains stay, and can be deallocated next.
    ///
    /// Errors: `EBUSY` while CQs or QPs created on it exist; `EINVAL` if already
    /// deallocated.
    pub fn dealloc(&self) -> Result<()> {
        domain_dealloc(&self.inner.users, "parent domain")?;
        self.inner.release_domains();
        Ok(())
    }
}

/// A CQ's or QP's hold on the parent domain it was created on; released with it.
struct ParentUse(ParentDomain);

impl Drop for ParentUse {
    fn drop(&mut self) {
        self.0.inner.users.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Qp {
    /// The parent domain the QP was created on ([`ParentDomain::create_qp`]), if any;
    /// `None` once the QP is destroyed.
    pub fn parent_domain(&self) -> Option<ParentDomain> {
        self.parent_use(|h| h.and_then(|h| h.hold.downcast_ref::<ParentUse>()).map(|u| u.0.clone()))
    }
}

impl Cq {
    /// The parent domain the CQ was created on, if any (ibv_create_cq_ex(3),
    /// `IBV_CQ_INIT_ATTR_MASK_PD`); `None` once the CQ is destroyed.
    pub fn parent_domain(&self) -> Option<ParentDomain> {
        self.with_parent(|h| h.and_then(|h| h.downcast_ref::<ParentUse>()).map(|u| u.0.clone()))
    }
}
