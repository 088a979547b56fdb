//! Memory regions (ibv_reg_mr(3), ibv_rereg_mr(3), ibv_dereg_mr(3)).
//!
//! Rule: ibv_reg_mr(3): a region is addressed through its lkey/rkey in the IO virtual
//! address space starting at `iova` (the process address unless registered with
//! ibv_reg_mr_iova(3) or ZERO_BASED); local read access is always enabled;
//! REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
//! Rule: every device access to a region goes through `access`, which checks key,
//! PD, bounds and rights and pins the region while bytes move.
#![allow(unsafe_code)]

pub(crate) mod access;
pub(crate) mod dm;
pub(crate) mod domain;
pub(crate) mod endpoint;
pub(crate) mod keys;
pub(crate) mod keyspace;
pub(crate) mod pages;
pub(crate) mod proxy;
pub(crate) mod share;
#[cfg(feature = "rdma-core")]
pub(crate) mod native;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use bitflags::bitflags;

use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::mem;
use domain::PdCore;
use crate::shm::tables::{KeyDesc, KeyRecord, ACCESS_COUNT_LOCAL, KEY_KIND_MR, KEY_STATE_INVALID, KEY_STATE_VALID};
use crate::shm::Segment;
use rverbs_proto::verbs::Access;
use endpoint::Endpoint;
pub(crate) use access::{atomic, copy_message, copy_message_from, copy_to, copy_out, flush_global, gather, gather_at, pin_sges, sink_ranges, watch_sges, check_mapped, pin_sges_into, Source};
pub(crate) use keyspace::{key_record, local_range, Fault, LocalRange, KeyMemo, KeySpace, KeyUse, PinList, Pinned, ResponderMemos, Via};
pub(crate) use keys::{KeyTable, KeyTarget, Window};

/// A scatter/gather entry (`struct ibv_sge`): `length` bytes at IO virtual address
/// `addr` of the region named by `lkey`.
///
/// An `Sge` is plain data: the device checks it when the work request executes, so a
/// wrong one yields an error completion, never a stray access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// IO virtual address of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// The name of shared segment `id` holding region memory, in its endpoint directory.
pub(crate) fn segment_name(id: u64) -> String {
    format!("mr-{id}")
}

pub(crate) struct MrInit {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) iova: u64,
    pub(crate) access: Access,
}

/// Where peers find a region's bytes, when not in this process's private memory.
pub(crate) enum MrMem {
    /// Memory the library allocated, in a shared segment peers can map; mapped here while
    /// the region lives, removed from the directory when dropped.
    Owned { _seg: Segment, id: u64 },
    /// Caller memory moved onto a shared file at registration ([`share`]), held in the
    /// endpoint's `shares`.
    Moved { hold: Option<share::ShareHold>, shares: &'static share::Shares, id: u64, offset: u64 },
    /// Device memory (`dm`), from `offset`: its segment, which peers map; the region holds
    /// the allocation (ibv_free_dm is EBUSY) until it is deregistered (`held`), and keeps
    /// it mapped while it lives.
    Dm { dm: Arc<dm::DmInner>, offset: u64, held: AtomicBool },
}

impl MrMem {
    /// A region over device memory stops holding it (deregistered or gone), once.
    fn unhold_dm(&self) {
        if let MrMem::Dm { dm, held, .. } = self {
            if held.swap(false, Ordering::AcqRel) {
                dm.release();
            }
        }
    }

    fn loc(&self) -> (u64, u64) {
        match self {
            MrMem::Owned { id, .. } => (*id, 0),
            MrMem::Moved { id, offset, .. } => (*id, *offset),
            MrMem::Dm { dm, offset, .. } => (dm.location().0, *offset),
        }
    }
}

impl Drop for MrMem {
    fn drop(&mut self) {
        match self {
            MrMem::Moved { hold, shares, .. } => {
                if let Some(h) = hold.take() {
                    shares.release(h);
                }
            }
            MrMem::Dm { .. } => self.unhold_dm(),
            MrMem::Owned { .. } => {}
        }
    }
}

/// Caller memory for a region: moved onto a shared file if the device is configured to
/// (`RVERBS_SHARED_MR=1`) and the memory allows it, else left where it is.
fn caller_memory(endpoint: &'static Endpoint, addr: usize, len: usize) -> Option<MrMem> {
    if !endpoint.share_caller_memory {
        return None;
    }
    let id = u64::from(endpoint.new_id());
    let at = endpoint.shares.share(&endpoint.dir, id, addr, len)?;
    Some(MrMem::Moved { hold: Some(at.hold), shares: &endpoint.shares, id: at.id, offset: at.offset })
}

/// What a region covers; changed in place by rereg.
pub(crate) struct MrDesc {
    pub(crate) pd: Arc<PdCore>,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) iova: u64,
    pub(crate) access: Access,
    /// Library-allocated backing memory, if any.
    mem: Option<MrMem>,
    /// This process's accesses are counted too (an owned region: [`ACCESS_COUNT_LOCAL`]).
    counted: bool,
}

impl MrDesc {
    /// The key record's view of this description.
    fn record(&self, state: u32) -> KeyDesc {
        KeyDesc {
            key: 0,
            kind: KEY_KIND_MR,
            state,
            pd: self.pd.id,
            access: self.access.bits() | if self.counted { ACCESS_COUNT_LOCAL } else { 0 },
            qpn: 0,
            mr_index: 0,
            iova: self.iova,
            len: self.len as u64,
            va: self.addr as u64,
            loc: self.mem.as_ref().map_or(0, |m| m.loc().0),
            seg_off: self.mem.as_ref().map_or(0, |m| m.loc().1),
        }
    }
}

pub(crate) struct MrInner {
    /// The endpoint whose keys name the region.
    endpoint: &'static Endpoint,
    key: u32,
    pub(crate) desc: RwLock<MrDesc>,
    /// False once deregistered: no further access is granted.
    valid: AtomicBool,
    /// Memory windows bound to the region at some point (deregistration is refused
    /// while one of them is still bound and valid).
    ///
    /// Lock order: this list, then a window's own lock (`crate::mw`), then `desc`. A
    /// bind takes the list of the region it binds to before the window; dereg and rereg
    /// take the list, then ask each window on it whether it is bound. Nothing takes the
    /// list while holding a window. The list is also what makes a bind and a
    /// dereg/rereg of the region serial (the argument is at [`Mr::dereg`]).
    pub(crate) windows: Mutex<Vec<Weak<dyn Window>>>,
    released: AtomicBool,
}

/// How long deregistration waits for accesses in progress: a peer that died in the
/// middle of one never finishes it.
pub(crate) const IDLE_WAIT: Duration = Duration::from_secs(2);

impl MrInner {
    /// The region's protection domain now (rereg may change it).
    pub(crate) fn pd(&self) -> Arc<PdCore> {
        self.desc.read().expect("mr desc").pd.clone()
    }

    /// The key's shared record.
    pub(crate) fn record(&self) -> &'static KeyRecord {
        self.endpoint.keys.record(self.key).expect("a live key has a record")
    }

    pub(crate) fn key(&self) -> u32 {
        self.key
    }

    /// Stops granting access and waits for accesses in progress to finish; removes the
    /// key. Idempotent. Used when the last handle goes, so without the window list: no
    /// bind can race it (a bind holds the region, and so does a bound window).
    fn invalidate(&self) {
        if self.valid.swap(false, Ordering::SeqCst) {
            self.retire();
        }
        self.release_pd();
    }

    /// Gives the region's hold on its PD back, once.
    fn release_pd(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.desc.read().expect("mr desc").pd.release();
        }
    }

    /// The rest of an invalidation, once `valid` is false: the record stops granting
    /// access, accesses in progress finish, the key is removed.
    fn retire(&self) {
        if crate::sanitizer::on() {
            crate::sanitizer::gone(crate::sanitizer::Kind::Mr, crate::sanitizer::Id::new(self.endpoint.slot, self.key));
        }
        self.record().state.store(KEY_STATE_INVALID, Ordering::SeqCst);
        self.wait_idle();
        self.count_cma(-1);
        self.endpoint.keys.remove(self.key);
    }

    /// Counts the region in (`+1`) or out of (`-1`) the device's regions peers reach
    /// with cross-memory attach, if it is one.
    fn count_cma(&self, by: isize) {
        if self.desc.read().expect("mr desc").mem.is_none() {
            if by > 0 {
                self.endpoint.cma_regions.fetch_add(1, Ordering::AcqRel);
            } else {
                self.endpoint.cma_regions.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Waits until no access (of this process or a peer) is in progress: through the
    /// region's own keys or a window bound to it, which count in the region's record
    /// (`KeySpace::hold`).
    pub(crate) fn wait_idle(&self) {
        self.drain();
    }

    /// Waits until no access (of this process or a peer) is in progress, for up to
    /// [`IDLE_WAIT`] while no process of the host is stopped in an access through
    /// cross-memory attach (`Endpoint::wait_accesses`): whether none is.
    fn drain(&self) -> bool {
        let rec = self.record();
        let idle = self.endpoint.wait_accesses(IDLE_WAIT, || rec.busy() == 0);
        if !idle {
            tracing::warn!(key = self.key, "gave up waiting for accesses to a region; a peer may have died in one");
        }
        idle
    }

    /// Closes the region to the device without deregistering it (an owned region taken
    /// back by the program, `crate::owned`): its keys grant nothing from now on, and the
    /// call waits for the accesses in progress, every one of which is counted in such a
    /// region ([`ACCESS_COUNT_LOCAL`]). Whether none is left (`false`: one was still in
    /// progress after [`IDLE_WAIT`]; the keys stay closed).
    ///
    /// Why no access can touch the bytes once this returns `true`: an access counts itself
    /// in `busy` first, then checks the record's state (`KeySpace::hold`, both SeqCst);
    /// here the state is stored first, then `busy` read (SeqCst). So an access either saw
    /// the closed state and gave up, or was counted before the read and is waited for.
    pub(crate) fn close_keys(&self) -> bool {
        self.record().state.store(KEY_STATE_INVALID, Ordering::SeqCst);
        self.drain()
    }

    /// Opens a region closed by [`MrInner::close_keys`] again, unless it was deregistered.
    pub(crate) fn open_keys(&self) {
        if self.valid.load(Ordering::SeqCst) {
            self.record().state.store(KEY_STATE_VALID, Ordering::SeqCst);
        }
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire)
    }

    /// Whether a memory window on `windows` (the region's list, locked by the caller) is
    /// bound to the region and still valid (a peer may have invalidated it without this
    /// process knowing); drops the others from the list.
    fn has_bound_windows(&self, windows: &mut Vec<Weak<dyn Window>>) -> bool {
        windows.retain(|m| m.upgrade().is_some_and(|mw| mw.is_bound_to(self)));
        !windows.is_empty()
    }

    /// Starts an access through the Rust API: holds off rereg (the description lock,
    /// taken first so rereg never waits for an access that waits for it) and
    /// deregistration (`busy`).
    fn begin(&self) -> Option<Busy<'_>> {
        let desc = self.desc.read().expect("mr desc");
        let busy = &*self.record().busy_local;
        busy.fetch_add(1, Ordering::SeqCst);
        if self.valid.load(Ordering::SeqCst) {
            Some(Busy { desc, busy })
        } else {
            busy.fetch_sub(1, Ordering::SeqCst);
            None
        }
    }
}

/// Guard of an access through the Rust API.
struct Busy<'a> {
    desc: std::sync::RwLockReadGuard<'a, MrDesc>,
    busy: &'a std::sync::atomic::AtomicU32,
}

impl Busy<'_> {
    /// The process address of `[offset, offset+len)` of the region, if inside it.
    fn range(&self, verb: &'static str, offset: usize, len: usize) -> Result<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.desc.len => Ok(self.desc.addr + offset),
            _ => Err(Error::invalid(verb, Rule::OutsideRegion { offset: offset as u64, len: len as u64, region_len: self.desc.len as u64 })),
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.invalidate();
    }
}

/// ibv_reg_mr(3): `EFAULT` unless caller memory is mapped with the access asked
/// (`pages.rs`). The flags are checked first, as the kernel does.
fn check_pages(verb: &'static str, addr: usize, len: usize, access: Access) -> Result<()> {
    let access = check_access(verb, access)?;
    pages::check(addr, len, pages::writable(access))
        .map_err(|pages::NotMapped| Error::BadAddress { verb, addr: addr as u64, len: len as u64 })
}

/// Checks of ibv_reg_mr(3) on the access flags.
fn check_access(verb: &'static str, access: Access) -> Result<Access> {
    // The order and the errnos are the kernel's `ib_check_mr_access` (include/rdma/ib_verbs.h,
    // what rdma-core's `ibv_reg_mr` reaches through uverbs on rxe).
    let raw = access.bits();
    if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(Error::invalid(verb, Rule::RemoteWriteNeedsLocalWrite));
    }
    let known = Access::all().bits() | Access::OPTIONAL_RANGE;
    if raw & !known != 0 {
        return Err(Error::invalid(verb, Rule::UnknownAccessFlags { flags: raw & !known }));
    }
    if access.contains(Access::FLUSH_PERSISTENT) {
        // rxe refuses FLUSH_PERSISTENT for memory that is not persistent (pmem); none of
        // the memory this device registers is.
        return Err(Error::invalid(verb, Rule::FlushPersistentNeedsPmem));
    }
    // Optional-range flags (relaxed ordering) are accepted and ignored, as rdma-core does;
    // HUGETLB without ON_DEMAND is a hint the kernel accepts and rxe ignores.
    Ok(Access::from_bits_truncate(raw & !(Access::OPTIONAL_RANGE | Access::HUGETLB.bits())))
}

/// The access a memory region over device memory can have, besides the optional-range
/// flags (ibv_reg_dm_mr, in ibv_alloc_dm(3)): mlx5's `MLX5_DM_ALLOWED_ACCESS` (rdma-core
/// providers/mlx5/verbs.c), the provider that implements device memory.
pub(crate) const DM_MR_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::ZERO_BASED);

bitflags! {
    /// What [`Mr::rereg`] changes (`enum ibv_rereg_mr_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct ReregFlags: u32 {
        /// The address range (`IBV_REREG_MR_CHANGE_TRANSLATION`).
        const TRANSLATION = 1;
        /// The protection domain (`IBV_REREG_MR_CHANGE_PD`).
        const PD = 1 << 1;
        /// The access rights (`IBV_REREG_MR_CHANGE_ACCESS`).
        const ACCESS = 1 << 2;
    }
}

/// What a memory region covers ([`Mr::query`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Process address of the first byte.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// IO virtual address of the first byte.
    pub iova: u64,
    /// Access rights.
    pub access: Access,
    /// Local and remote key.
    pub key: u32,
    /// Handle of the protection domain.
    pub pd_handle: u32,
}

/// A registered memory region (`struct ibv_mr`). Cloning shares the registration;
/// it ends when the last handle and the last work request naming it are gone, or at an
/// explicit [`Mr::dereg`].
#[derive(Clone)]
pub struct Mr {
    repr: Repr,
}

/// What an [`Mr`] is: the soft device's, or (feature `rdma-core`) one the rdma-core
/// backend registered.
#[derive(Clone)]
enum Repr {
    Soft(Arc<MrInner>),
    #[cfg(feature = "rdma-core")]
    Native(Arc<dyn native::NativeMr>),
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.query();
        f.debug_struct("Mr")
            .field("lkey", &d.key)
            .field("addr", &format_args!("{:#x}", d.addr))
            .field("len", &d.len)
            .finish()
    }
}

fn check_len(verb: &'static str, len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::invalid(verb, Rule::ZeroLength));
    }
    if len as u64 > crate::limits::MAX_MR_SIZE {
        return Err(Error::Limit {
            verb,
            what: "length",
            max: crate::limits::MAX_MR_SIZE,
            got: len as u64,
        });
    }
    Ok(())
}

impl Mr {
    pub(crate) fn alloc(pd: Arc<PdCore>, len: usize, access: Access) -> Result<Self> {
        // A registration of memory the device allocates counts as one of reg_mr.
        if let Some(e) = crate::fault_plan::fail(pd.endpoint().slot, rverbs_proto::verb_fault::Verb::RegMr, None, None) {
            return Err(e);
        }
        check_len("alloc_mr", len)?;
        let endpoint = pd.endpoint();
        let id = u64::from(endpoint.new_id());
        let seg = Segment::create(&endpoint.dir.join(segment_name(id)), len)?;
        let addr = seg.addr();
        Self::build(pd, MrInit { addr, len, iova: addr as u64, access }, Some(MrMem::Owned { _seg: seg, id }), false)
    }

    /// A region over `len` bytes of device memory `dm` from `offset` (ibv_reg_dm_mr):
    /// zero-based, so remote addresses are offsets from the region's first byte.
    ///
    /// Rule: `access` must include ZERO_BASED and have no bit outside [`DM_MR_ACCESS`]
    /// and the optional-range flags ([`Rule::DmMrAccess`]); the range must lie inside the
    /// allocation; a zero length is allowed (mlx5 registers it). Errors: `EINVAL`
    /// otherwise.
    pub(crate) fn register_dm(pd: Arc<PdCore>, dm: &dm::Dm, offset: u64, len: usize, access: Access) -> Result<Self> {
        if let Some(e) = crate::fault_plan::fail(pd.endpoint().slot, rverbs_proto::verb_fault::Verb::RegMr, None, None) {
            return Err(e);
        }
        // mlx5's `mlx5_reg_dm_mr` (rdma-core providers/mlx5/verbs.c) refuses the access
        // bits a region over device memory cannot have before it asks the kernel, whose
        // UVERBS_METHOD_DM_MR_REG (uverbs_std_types_mr.c) then wants ZERO_BASED, legal
        // access (`ib_check_mr_access`, in `build`) and the range inside the allocation.
        let not_allowed = access.bits() & !(DM_MR_ACCESS.bits() | Access::OPTIONAL_RANGE);
        if not_allowed != 0 {
            return Err(Error::invalid("reg_dm_mr", Rule::DmMrAccess { flags: not_allowed }));
        }
        if !access.contains(Access::ZERO_BASED) {
            return Err(Error::invalid("reg_dm_mr", Rule::DmMrZeroBased));
        }
        let size = dm.len() as u64;
        if dm.is_freed() || offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(Error::invalid("reg_dm_mr", Rule::DmRange { offset, len: len as u64, size }));
        }
        let inner = dm.inner().clone();
        inner.hold();
        let addr = inner.location().1 + offset as usize;
        Self::build(pd, MrInit { addr, len, iova: 0, access }, Some(MrMem::Dm { dm: inner, offset, held: AtomicBool::new(true) }), false)
    }

    pub(crate) fn register(pd: Arc<PdCore>, init: MrInit) -> Result<Self> {
        Self::register_with(pd, init, false)
    }

    /// As [`Mr::register`]; with `counted`, this process's accesses to the region are
    /// counted too ([`ACCESS_COUNT_LOCAL`]: an owned region, `crate::owned`).
    pub(crate) fn register_with(pd: Arc<PdCore>, init: MrInit, counted: bool) -> Result<Self> {
        if let Some(e) = crate::fault_plan::fail(pd.endpoint().slot, rverbs_proto::verb_fault::Verb::RegMr, None, None) {
            return Err(e);
        }
        if crate::sanitizer::on() {
            // Receive buffers the sanitizer protects there are given back first: the
            // pages are checked, maybe moved, and reached by peers (docs/sanitizer.md,
            // read-before-completion).
            crate::sanitizer::early::range_reached(init.addr, init.len);
        }
        // On-demand paging (ibv_reg_mr(3) IBV_ACCESS_ON_DEMAND; docs/memory.md, "On-demand
        // paging"): nothing is checked or faulted in at registration, and the memory is
        // left where it is; a device access to a page that is not there fails as any
        // faulting access does. Implicit: address 0 and length SIZE_MAX, the whole address
        // space.
        let odp = init.access.contains(Access::ON_DEMAND);
        let implicit = odp && init.addr == 0 && init.len == usize::MAX;
        if odp && !implicit {
            // The kernel's `ib_init_umem_odp` (drivers/infiniband/core/umem_odp.c): the
            // range's end, rounded up to a page, must not wrap to below a page
            // (EOVERFLOW, before any length check; a non-null address with SIZE_MAX is
            // such a range, and so is nothing at address 0).
            let page = rustix::param::page_size();
            let end = init.addr.checked_add(init.len).and_then(|end| end.checked_next_multiple_of(page));
            if end.is_none_or(|end| end < page) {
                return Err(Error::Overflow { verb: "reg_mr", addr: init.addr as u64, len: init.len as u64 });
            }
        }
        if !implicit {
            check_len("reg_mr", init.len)?;
        }
        if init.addr.checked_add(init.len).is_none() {
            return Err(Error::invalid("reg_mr", Rule::RangeWraps { addr: init.addr as u64, len: init.len as u64 }));
        }
        if odp {
            // `build` checks the access flags.
            return Self::build(pd, init, None, counted);
        }
        check_pages("reg_mr", init.addr, init.len, init.access)?;
        let mem = caller_memory(pd.endpoint(), init.addr, init.len);
        Self::build(pd, init, mem, counted)
    }

    fn build(pd: Arc<PdCore>, mut init: MrInit, mem: Option<MrMem>, counted: bool) -> Result<Self> {
        init.access = check_access("reg_mr", init.access)?;
        if init.access.contains(Access::ZERO_BASED) {
            init.iova = 0;
        }
        if init.iova.checked_add(init.len as u64).is_none() {
            return Err(Error::invalid("reg_mr", Rule::RangeWraps { addr: init.iova, len: init.len as u64 }));
        }
        pd.hold()?;
        let endpoint = pd.endpoint();
        let desc = MrDesc { pd: pd.clone(), addr: init.addr, len: init.len, iova: init.iova, access: init.access, mem, counted };
        let record = desc.record(KEY_STATE_VALID);
        let mut key = Ok(0);
        let inner = Arc::new_cyclic(|weak: &Weak<MrInner>| {
            key = endpoint.keys.insert(KeyTarget::Mr(weak.clone()), record);
            MrInner {
                endpoint,
                key: *key.as_ref().unwrap_or(&0),
                desc: RwLock::new(desc),
                valid: AtomicBool::new(key.is_ok()),
                windows: Mutex::new(Vec::new()),
                released: AtomicBool::new(key.is_err()),
            }
        });
        if let Err(e) = key {
            pd.release();
            drop(inner);
            return Err(e);
        }
        inner.count_cma(1);
        if crate::sanitizer::on() {
            let (key, addr, len) = (inner.key, init.addr as u64, init.len as u64);
            let id = crate::sanitizer::Id::new(inner.endpoint.slot, key);
            crate::sanitizer::created(crate::sanitizer::Kind::Mr, id, Some(crate::sanitizer::Object::Mr { lkey: key, addr, len }));
            let caller = matches!(inner.desc.read().expect("mr desc").mem, None | Some(MrMem::Moved { .. }));
            if caller && !init.access.contains(Access::ON_DEMAND) {
                crate::sanitizer::caller_region(id, addr, len);
            }
            if init.access.contains(Access::ON_DEMAND) && init.access.intersects(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC | Access::MW_BIND) {
                // Peers may reach any page now (docs/sanitizer.md, read-before-completion).
                crate::sanitizer::early::peers_reach_anywhere();
            }
        }
        Ok(Mr { repr: Repr::Soft(inner) })
    }

    /// A region the rdma-core backend registered.
    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_native(mr: Arc<dyn native::NativeMr>) -> Self {
        Mr { repr: Repr::Native(mr) }
    }

    /// The PD the region belongs to, soft or the backend's.
    pub(crate) fn parent(&self) -> domain::PdOf {
        match &self.repr {
            Repr::Soft(inner) => domain::PdOf::Soft(inner.pd()),
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => domain::PdOf::Native(mr.pd()),
        }
    }

    /// The soft region's state; `EOPNOTSUPP` for a region of the rdma-core backend (what
    /// its caller does, the backend does not offer).
    pub(crate) fn inner(&self) -> Result<&Arc<MrInner>> {
        match &self.repr {
            Repr::Soft(inner) => Ok(inner),
            #[cfg(feature = "rdma-core")]
            Repr::Native(_) => Err(Error::native_unsupported("a verb of the soft device")),
        }
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        match &self.repr {
            Repr::Soft(inner) => inner.key,
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => mr.lkey(),
        }
    }

    /// The remote key (equal to the local key on this device; the provider's on the
    /// rdma-core backend).
    pub fn rkey(&self) -> u32 {
        match &self.repr {
            Repr::Soft(inner) => inner.key,
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => mr.rkey(),
        }
    }

    /// What the region covers now (addresses, access, PD).
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn query(&self) -> MrInfo {
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => return mr.info(),
        };
        let d = inner.desc.read().expect("mr desc");
        MrInfo {
            addr: d.addr,
            len: d.len,
            iova: d.iova,
            access: d.access,
            key: inner.key,
            pd_handle: d.pd.id,
        }
    }

    /// The process address of the first byte (`ibv_mr.addr`).
    pub fn addr(&self) -> *mut u8 {
        self.query().addr as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.query().len
    }

    /// Whether the region is empty (never: registration refuses zero lengths).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The IO virtual address of the first byte, which SGEs and remote peers use.
    pub fn iova(&self) -> u64 {
        self.query().iova
    }

    /// The access rights.
    pub fn access(&self) -> Access {
        self.query().access
    }


    /// An SGE for `len` bytes at `offset` into the region.
    ///
    /// Errors: `EINVAL` if the range leaves the region.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        let d = self.check_range("sge", offset, len as usize)?;
        Ok(Sge { addr: d.iova + offset as u64, length: len, lkey: d.key })
    }

    /// An SGE covering the whole region (lengths above 4 GiB are clamped).
    pub fn whole(&self) -> Sge {
        let d = self.query();
        Sge { addr: d.iova, length: d.len.min(u32::MAX as usize) as u32, lkey: d.key }
    }

    fn check_range(&self, verb: &'static str, offset: usize, len: usize) -> Result<MrInfo> {
        let d = self.query();
        match offset.checked_add(len) {
            Some(end) if end <= d.len => Ok(d),
            _ => Err(Error::invalid(verb, Rule::OutsideRegion { offset: offset as u64, len: len as u64, region_len: d.len as u64 })),
        }
    }

    /// Copies `buf.len()` bytes out of the region at `offset`.
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => return mr.read(offset, buf),
        };
        let g = inner.begin().ok_or(Error::Destroyed { what: "memory region" })?;
        let at = g.range("read", offset, buf.len())?;
        // SAFETY: the range is inside the live registration (checked above while `g`
        // holds off deregistration and rereg) and `buf` is a distinct Rust buffer.
        unsafe { mem::copy(buf.as_mut_ptr(), at as *const u8, buf.len()) }
            .map_err(|_| Error::BadAddress { verb: "read", addr: at as u64, len: buf.len() as u64 })
    }

    /// Copies `data` into the region at `offset`.
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => return mr.write(offset, data),
        };
        let g = inner.begin().ok_or(Error::Destroyed { what: "memory region" })?;
        let at = g.range("write", offset, data.len())?;
        // SAFETY: as in `read`.
        unsafe { mem::copy(at as *mut u8, data.as_ptr(), data.len()) }
            .map_err(|_| Error::BadAddress { verb: "write", addr: at as u64, len: data.len() as u64 })
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check_range("fill", offset, len)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The 64-bit word at `offset` (8-byte aligned), read atomically.
    // Without the feature `rdma-core` the match has one arm (no cost, no branch).
    #[cfg_attr(not(feature = "rdma-core"), allow(clippy::infallible_destructuring_match))]
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let inner = match &self.repr {
            Repr::Soft(inner) => inner,
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => return mr.read_u64(offset),
        };
        let g = inner.begin().ok_or(Error::Destroyed { what: "memory region" })?;
        let at = g.range("read_u64", offset, 8)?;
        if at % 8 != 0 {
            return Err(Error::invalid("read_u64", Rule::Unaligned { offset: offset as u64 }));
        }
        // SAFETY: aligned, inside the live registration.
        unsafe { mem::load_u64(at) }.map_err(|_| Error::BadAddress { verb: "read_u64", addr: at as u64, len: 8 })
    }

    /// The region's bytes as a slice.
    ///
    /// # Safety
    /// No device access (a remote write, a receive, a READ response) may write the bytes
    /// while the slice is alive, and the region must not be deregistered or re-registered.
    pub unsafe fn as_slice(&self) -> &[u8] {
        let d = self.query();
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.len) }
    }

    /// The region's bytes as a mutable slice.
    ///
    /// # Safety
    /// As for [`Mr::as_slice`], and no other reference to the bytes may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        let d = self.query();
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(d.addr as *mut u8, d.len) }
    }

    /// ibv_rereg_mr(3) with the new PD's core, if any (`Mr::rereg` and
    /// `Mr::rereg_translation`, in `pd`, check their arguments first).
    pub(crate) fn rereg_inner(
        &self,
        flags: ReregFlags,
        pd: Option<&Arc<PdCore>>,
        access: Option<Access>,
        range: Option<(usize, usize)>,
    ) -> Result<()> {
        let inner = self.inner()?;
        if let Some(e) = crate::fault_plan::fatal(inner.endpoint.slot, "rereg_mr") {
            return Err(e);
        }
        let verb = "rereg_mr";
        if flags.is_empty() {
            return Err(Error::invalid(verb, Rule::NoChange));
        }
        if flags.contains(ReregFlags::TRANSLATION) != range.is_some() {
            return Err(Error::invalid(verb, Rule::TranslationNeedsRange));
        }
        let new_pd = match (flags.contains(ReregFlags::PD), pd) {
            (true, Some(p)) => {
                let same_ctx = Arc::ptr_eq(&p.ctx, &inner.desc.read().expect("mr desc").pd.ctx);
                if !same_ctx {
                    return Err(Error::invalid(verb, Rule::ForeignContext { what: "protection domain" }));
                }
                Some(p.clone())
            }
            (true, None) => return Err(Error::invalid(verb, Rule::PdChangeWithoutPd)),
            (false, _) => None,
        };
        let new_access = match (flags.contains(ReregFlags::ACCESS), access) {
            (true, Some(a)) => Some(check_access(verb, a)?),
            (true, None) => return Err(Error::invalid(verb, Rule::AccessChangeWithoutFlags)),
            (false, _) => None,
        };
        if let Some((addr, len)) = range {
            check_len(verb, len)?;
            if addr.checked_add(len).is_none() {
                return Err(Error::invalid(verb, Rule::RangeWraps { addr: addr as u64, len: len as u64 }));
            }
            let access = new_access.unwrap_or_else(|| self.access());
            if crate::sanitizer::on() {
                crate::sanitizer::early::range_reached(addr, len);
            }
            check_pages(verb, addr, len, access)?;
        }
        // Held to the end: no window binds to the region while it changes (a bind waits,
        // then sees the new description; see `Mr::dereg` for the argument).
        let mut windows = inner.windows.lock().expect("mr windows");
        if !inner.is_valid() {
            return Err(Error::Destroyed { what: "memory region" });
        }
        if inner.has_bound_windows(&mut windows) {
            return Err(Error::Busy { what: "memory region with bound memory windows" });
        }
        if crate::sanitizer::on() && flags.intersects(ReregFlags::TRANSLATION | ReregFlags::PD) {
            // Reported, then the region changes as it would on a NIC (docs/sanitizer.md).
            let d = inner.desc.read().expect("mr desc");
            crate::sanitizer::rereg(crate::sanitizer::Id::new(inner.endpoint.slot, inner.key), d.addr as u64, d.len as u64);
        }
        if crate::sanitizer::on() {
            // Any change (rights too) may open the region's pages to peers: receive
            // buffers protected there are given back (docs/sanitizer.md,
            // read-before-completion).
            let d = inner.desc.read().expect("mr desc");
            crate::sanitizer::early::region_gone(crate::sanitizer::Id::new(inner.endpoint.slot, inner.key));
            crate::sanitizer::early::range_reached(d.addr, d.len);
        }
        if let Some(p) = &new_pd {
            p.hold()?;
        }
        // Accesses through the API wait on the lock; device accesses are refused while
        // the record is invalid; accesses in progress finish first.
        let mut d = inner.desc.write().expect("mr desc");
        let rec = inner.record();
        rec.state.store(KEY_STATE_INVALID, Ordering::SeqCst);
        inner.wait_idle();
        if let Some(p) = new_pd {
            let old = std::mem::replace(&mut d.pd, p);
            old.release();
        }
        if let Some(a) = new_access {
            d.access = a;
            if a.contains(Access::ZERO_BASED) {
                d.iova = 0;
            }
        }
        if let Some((addr, len)) = range {
            d.addr = addr;
            d.len = len;
            d.iova = if d.access.contains(Access::ZERO_BASED) { 0 } else { addr as u64 };
            let was_private = d.mem.is_none();
            d.mem = caller_memory(inner.endpoint, addr, len);
            match (was_private, d.mem.is_none()) {
                (true, false) => drop(inner.endpoint.cma_regions.fetch_sub(1, Ordering::AcqRel)),
                (false, true) => drop(inner.endpoint.cma_regions.fetch_add(1, Ordering::AcqRel)),
                _ => {}
            }
        }
        if range.is_some() && crate::sanitizer::on() {
            // The region covers other caller memory from now on (mr-memory-freed).
            if d.access.contains(Access::ON_DEMAND) {
                crate::sanitizer::caller_region_gone(crate::sanitizer::Id::new(inner.endpoint.slot, inner.key));
            } else {
                crate::sanitizer::caller_region(crate::sanitizer::Id::new(inner.endpoint.slot, inner.key), d.addr as u64, d.len as u64);
            }
        }
        let mut record = d.record(KEY_STATE_VALID);
        record.key = inner.key;
        inner.endpoint.keys.publish(inner.key >> 8, &record);
        Ok(())
    }

    /// Deregisters the region now (ibv_dereg_mr(3)): later accesses through its keys
    /// fail, and the call returns only after accesses in progress finished. Work requests
    /// that still name it complete with an error.
    ///
    /// Errors: `EINVAL` once deregistered, or while memory windows are bound to it (rxe;
    /// ibv_alloc_mw(3): "ibv_dereg_mr() fails if any memory window is still bound"). On
    /// the rdma-core backend, the provider's ibv_dereg_mr(3), after the calls in progress
    /// through other handles return (then their reads and writes are `EINVAL`); an error
    /// leaves the region usable; nothing checks requests that still name it
    /// (docs/rdma-core-backend.md).
    pub fn dereg(&self) -> Result<()> {
        #[cfg(feature = "rdma-core")]
        if let Repr::Native(mr) = &self.repr {
            return mr.dereg();
        }
        let inner = self.inner()?;
        // Why a bind racing this call cannot leave a window bound to a deregistered
        // region, nor make this call deregister a region with a window bound to it.
        // 1. A window becomes bound to this region only through a bind
        //    (`MwInner::bind`), and a bind holds this region's window list from its
        //    check that the region is valid until the window is bound and on the list.
        //    Everything else that changes a window (unbind, a bind to another region,
        //    LOCAL_INV, a peer's SEND_WITH_INV, dealloc) can only unbind it.
        // 2. Here the list is held from the check that no window is bound until `valid`
        //    is false. So a racing bind is either wholly before — its window is bound
        //    (VALID record) and listed, `has_bound_windows` finds it and dereg refuses —
        //    or wholly after: it finds `valid` false and fails, as the bind of a region
        //    that is not valid. Nothing binds between the check and the invalidation
        //    (which checking a snapshot of the list, then releasing it, would allow).
        // 3. What only unbinds needs no list: a window that unbinds after we asked it
        //    was bound when asked (dereg refuses, as it would a moment earlier); one
        //    that unbinds before is seen unbound, each window being asked under its own
        //    lock.
        // 4. The rest of the invalidation (record, waiting for accesses, the key) needs
        //    no exclusion from binds: from here on they fail on `valid`.
        // Windows are asked with the list held, which the lock order allows (list, then
        // window: a bind too takes the list first), so there is no inversion. rereg
        // holds the list the same way until its new description is in place.
        let mut windows = inner.windows.lock().expect("mr windows");
        if !inner.is_valid() {
            return Err(Error::Destroyed { what: "memory region" });
        }
        if inner.has_bound_windows(&mut windows) {
            return Err(Error::invalid("dereg_mr", Rule::WindowsBound));
        }
        if crate::sanitizer::on() {
            // Reported, then the region goes as it would on a NIC (docs/sanitizer.md).
            let d = inner.desc.read().expect("mr desc");
            crate::sanitizer::dereg(crate::sanitizer::Id::new(inner.endpoint.slot, inner.key), d.addr as u64, d.len as u64, d.access.contains(Access::ON_DEMAND));
        }
        inner.valid.store(false, Ordering::SeqCst);
        drop(windows);
        inner.retire();
        inner.release_pd();
        if let Some(mem) = &inner.desc.read().expect("mr desc").mem {
            mem.unhold_dm();
        }
        Ok(())
    }

    /// Whether the registration is still valid (not deregistered).
    pub fn is_valid(&self) -> bool {
        match &self.repr {
            Repr::Soft(inner) => inner.is_valid(),
            #[cfg(feature = "rdma-core")]
            Repr::Native(mr) => mr.is_valid(),
        }
    }
}

/// What ibv_advise_mr(3) asks of the pages of on-demand regions (`enum
/// ibv_advise_mr_advice`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Fault the pages in for reading (`IBV_ADVISE_MR_ADVICE_PREFETCH`).
    Prefetch,
    /// Fault the pages in for writing (`IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`).
    PrefetchWrite,
    /// Map only the pages that are there, faulting none
    /// (`IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`).
    PrefetchNoFault,
}

/// ibv_advise_mr(3) on the ranges `sges` name, for PD `pd`: each lkey must name a valid
/// on-demand region of the PD, the range must lie inside it, and PREFETCH_WRITE needs a
/// writable region; the pages are then faulted in (nothing is pinned: every access finds
/// its pages anyway, so this only moves the page faults earlier).
///
/// The order and the errnos are the kernel's mlx5 (drivers/infiniband/hw/mlx5/odp.c,
/// `get_prefetchable_mr`, then `pagefault_mr`), the driver that implements on-demand
/// paging, which the man page's list of errors does not match (it names EFAULT for an
/// invalid lkey; the kernel's maintainers answered that the page is wrong).
///
/// Errors: `ENOENT` ([`Error::NoSuchKey`]) for an lkey that names no valid on-demand
/// region (none at all, or one registered without ON_DEMAND: mlx5 looks keys up among
/// on-demand ones only); `EINVAL` ([`Rule::KeyNamesWindow`]) for the key of a memory
/// window; `EPERM` for a region of another PD, or PREFETCH_WRITE of one that is not
/// writable; `EFAULT` for a range outside the region ([`Error::OutOfRange`]) or pages
/// that are not part of the address space ([`Error::BadAddress`]).
pub(crate) fn advise(pd: &Arc<PdCore>, advice: Advice, sges: &[Sge]) -> Result<()> {
    let keys = &pd.endpoint().keys;
    let mut ranges = Vec::with_capacity(sges.len());
    for s in sges {
        let no_region = Error::NoSuchKey { verb: "advise_mr", key: s.lkey, what: "on-demand memory region" };
        let Some(mr) = keys.mr(s.lkey).filter(|m| m.is_valid()) else {
            if matches!(keys.get(s.lkey), Some(KeyTarget::Mw(_))) {
                return Err(Error::invalid("advise_mr", Rule::KeyNamesWindow { key: s.lkey }));
            }
            return Err(no_region);
        };
        let d = mr.desc.read().expect("mr desc");
        if !d.access.contains(Access::ON_DEMAND) {
            return Err(no_region);
        }
        if d.pd.id != pd.id {
            return Err(Error::PermissionDenied { verb: "advise_mr", why: "the lkey names a region of another protection domain" });
        }
        if advice == Advice::PrefetchWrite && !pages::writable(d.access) {
            return Err(Error::PermissionDenied { verb: "advise_mr", why: "PREFETCH_WRITE of a region without write access" });
        }
        let outside = |offset| Error::OutOfRange { verb: "advise_mr", offset, len: u64::from(s.length), size: d.len as u64 };
        let off = s.addr.checked_sub(d.iova).ok_or_else(|| outside(s.addr.wrapping_sub(d.iova)))?;
        if off.checked_add(u64::from(s.length)).is_none_or(|end| end > d.len as u64) {
            return Err(outside(off));
        }
        ranges.push(((d.addr as u64 + off) as usize, s.length as usize));
    }
    if advice == Advice::PrefetchNoFault {
        return Ok(());
    }
    for ((addr, len), s) in ranges.into_iter().zip(sges) {
        if len > 0 {
            pages::check(addr, len, advice == Advice::PrefetchWrite)
                .map_err(|pages::NotMapped| Error::BadAddress { verb: "advise_mr", addr: s.addr, len: u64::from(s.length) })?;
        }
    }
    Ok(())
}
