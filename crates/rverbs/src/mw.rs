//! Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_dealloc_mw(3)).
//!
//! Rule: a window gives remote access to a range of a memory region under its own rkey.
//! Type 1 windows are bound by the `bind_mw` verb (the key's low byte advances with
//! every bind; a zero-length bind unbinds) and are never invalidated by work requests.
//! Type 2 windows are bound by a BIND_MW work request with a key the caller chooses,
//! only while FREE, and only the QP that bound them can use them; LOCAL_INV and
//! SEND_WITH_INV return them to FREE. Remote access through a window needs the window
//! VALID, its PD equal to the responder QP's, the range inside the window and the access
//! inside the window's rights (rxe `rxe_mw.c` `rxe_lookup_mw`, `rxe_resp.c` `check_rkey`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::mr::endpoint::Endpoint;
use crate::mr::{KeyTable, KeyTarget, Mr, MrInner, Window};
use crate::mr::domain::PdCore;
use crate::shm::tables::{
    KeyDesc, KeyRecord, KEY_KIND_MW1, KEY_KIND_MW2, KEY_STATE_FREE, KEY_STATE_INVALID, KEY_STATE_VALID,
};
use rverbs_proto::verbs::Access;

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MwType {
    /// Bound by the `bind_mw` verb.
    Type1 = 1,
    /// Bound by a BIND_MW work request.
    Type2 = 2,
}

/// The region a window is bound to, held by the window while bound.
struct Binding {
    mr: Arc<MrInner>,
}

/// What only the owner changes: the current key and the binding. The window's status
/// (VALID/FREE/INVALID) is its key record's `state`, which a peer's SEND_WITH_INV can
/// change too.
struct MwCore {
    rkey: u32,
    binding: Option<Binding>,
}

pub(crate) struct MwInner {
    /// The endpoint whose keys name the window.
    endpoint: &'static Endpoint,
    /// The key the last bind posted for this window will install (type 1: the next bind
    /// advances from it even while earlier binds are still queued).
    pub(crate) posted_rkey: std::sync::atomic::AtomicU32,
    pub(crate) pd: Arc<PdCore>,
    pub(crate) mw_type: MwType,
    core: Mutex<MwCore>,
    released: AtomicBool,
}

/// Why a bind failed (the work request completes with MW_BIND_ERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BindError;

/// What a bind asks for.
pub(crate) struct BindSpec {
    pub(crate) new_rkey: u32,
    pub(crate) mr: Option<Arc<MrInner>>,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

/// Access rights a window may carry (rxe `RXE_ACCESS_SUPPORTED_MW`).
const MW_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::MW_BIND)
    .union(Access::ZERO_BASED)
    .union(Access::FLUSH_GLOBAL)
    .union(Access::FLUSH_PERSISTENT);

/// Invalidates the type 2 window whose record is `rec` through `rkey` for a QP of PD
/// `pd` (LOCAL_INV, SEND_WITH_INV): only a VALID window of that PD whose key matches
/// goes back to FREE, and once this returns `true` no access through the window is in
/// progress either ([`quiesce`]). Used on this process's records and on a peer's alike.
/// `me` is the endpoint that invalidates (its host's stopped accessors are waited for:
/// [`quiesce`]).
pub(crate) fn invalidate_record(me: &Endpoint, rec: &KeyRecord, rkey: u32, pd: u32) -> bool {
    let freed = free_record(rec, rkey, pd);
    if freed {
        quiesce(me, rec);
    }
    freed
}

/// The state change of [`invalidate_record`]: VALID to FREE, if the record is of a type 2
/// window of PD `pd` whose key is `rkey`.
fn free_record(rec: &KeyRecord, rkey: u32, pd: u32) -> bool {
    let d = rec.read();
    d.kind == KEY_KIND_MW2
        && d.key == rkey
        && d.pd == pd
        && rec
            .state
            .compare_exchange(KEY_STATE_VALID, KEY_STATE_FREE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
}

/// Waits for the accesses in progress through the window whose record is `rec`, once its
/// state refuses new ones (LOCAL_INV, SEND_WITH_INV, ibv_dealloc_mw(3)): the work
/// request's completion, the receive's WITH_INV completion or the call's return then
/// means the key reaches nothing any more, and the program may reuse the memory.
///
/// Why it is exact: an access through a window counts itself in the window's record as
/// well as its region's, then checks the window's state (`mr::keyspace`, both SeqCst);
/// the state is stored before this reads the count. Only the window's own accesses are
/// waited for, not the region's others: the invalidating thread may hold one of those
/// itself (a SEND_WITH_INV's receive buffer in the same region), and a region under
/// steady traffic would hold the invalidation up. No invalidating thread holds an
/// access through the window: a type 2 window is reached by the one QP it is bound to,
/// a LOCAL_INV runs on the send queue, a SEND_WITH_INV on a receive. Bounded as
/// deregistration's wait (a peer that died in an access never finishes it; one stopped
/// in an access through cross-memory attach is waited for: `Endpoint::wait_accesses`).
fn quiesce(me: &Endpoint, rec: &KeyRecord) {
    if !me.wait_accesses(crate::mr::IDLE_WAIT, || rec.busy() == 0) {
        tracing::warn!(key = rec.read().key, "gave up waiting for accesses through a window; a peer may have died in one");
    }
}

impl KeyTable {
    /// Invalidates the type 2 window named by `rkey` for a QP of `pd` (LOCAL_INV, and
    /// SEND_WITH_INV delivered in this process); `false` if `rkey` names no such window
    /// (rxe: regions registered by applications cannot be invalidated). Defined with the
    /// windows: the key table itself knows no protection domain.
    ///
    /// Once it returns `true` no access through the window is in progress either
    /// ([`invalidate_record`]), so that the work request's completion (LOCAL_INV) or the
    /// receive's (SEND_WITH_INV) means the key reaches nothing any more, as
    /// ibv_dealloc_mw(3)'s return does (`MwInner::release`).
    pub(crate) fn invalidate_mw(&self, rkey: u32, pd: u32) -> bool {
        match self.get(rkey) {
            Some(KeyTarget::Mw(w)) => w.upgrade().is_some_and(|mw| mw.invalidate(rkey, pd)),
            _ => false,
        }
    }
}

impl MwInner {
    pub(crate) fn rkey(&self) -> u32 {
        self.core.lock().expect("mw").rkey
    }

    fn record(&self, rkey: u32) -> &'static KeyRecord {
        self.endpoint.keys.record(rkey).expect("a live key has a record")
    }

    fn kind(&self) -> u32 {
        match self.mw_type {
            MwType::Type1 => KEY_KIND_MW1,
            MwType::Type2 => KEY_KIND_MW2,
        }
    }

    /// Executes a bind issued by QP `qpn` of PD `qp_pd` (rxe `rxe_bind_mw` checks).
    ///
    /// Rule (ibv_dereg_mr(3), ibv_rereg_mr(3)): a bind to a region and a
    /// deregistration or re-registration of it happen one after the other. The bind
    /// holds the region's window list ([`MrInner::windows`], taken first: see the lock
    /// order there) from its validity check until the window is bound and listed, and
    /// dereg/rereg hold the same list from their "no window bound" check until the
    /// region is marked invalid (dereg) or re-described (rereg). So the bind either
    /// comes first — the window is listed and bound, dereg/rereg see it and refuse — or
    /// comes after — the bind sees the region invalid (dereg) and fails, or binds to the
    /// new description (rereg).
    pub(crate) fn bind(&self, qp_pd: &PdCore, qpn: u32, spec: BindSpec) -> Result<(), BindError> {
        let mut listed = spec.mr.as_ref().map(|mr| mr.windows.lock().expect("mr windows"));
        let mut core = self.core.lock().expect("mw");
        let rec = self.record(core.rkey);
        let status = rec.state.load(Ordering::Acquire);
        let access = spec.access;
        if !MW_ACCESS.contains(access.difference(Access::RELAXED_ORDERING)) {
            return Err(BindError);
        }
        match self.mw_type {
            MwType::Type1 => {
                if status != KEY_STATE_VALID || access.contains(Access::ZERO_BASED) {
                    return Err(BindError);
                }
            }
            MwType::Type2 => {
                if status != KEY_STATE_FREE
                    || !std::ptr::eq(qp_pd, Arc::as_ptr(&self.pd))
                    || spec.mr.is_none()
                    || spec.len == 0
                {
                    return Err(BindError);
                }
            }
        }
        let new_key = (core.rkey & !0xff) | (spec.new_rkey & 0xff);
        let mut desc = KeyDesc { key: new_key, kind: self.kind(), state: KEY_STATE_VALID, pd: self.pd.id, ..KeyDesc::default() };
        let binding = match (&spec.mr, spec.len) {
            (_, 0) if self.mw_type == MwType::Type1 => None,
            (None, _) => return Err(BindError),
            (Some(mr), len) => {
                if !mr.is_valid() {
                    return Err(BindError);
                }
                let d = mr.desc.read().expect("mr desc");
                let mr_access = d.access;
                if !Arc::ptr_eq(&d.pd, &self.pd)
                    || mr_access.contains(Access::ZERO_BASED)
                    || !mr_access.contains(Access::MW_BIND)
                    || (access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                        && !mr_access.contains(Access::LOCAL_WRITE))
                {
                    return Err(BindError);
                }
                let end = spec.addr.checked_add(len).ok_or(BindError)?;
                if spec.addr < d.iova || end > d.iova + d.len as u64 {
                    return Err(BindError);
                }
                // The window's bytes are the region's, from `addr` on: peers reach them
                // where they reach the region's.
                let mr_rec = mr.record().read();
                // Only a record this process wrote says where the region's bytes are
                // (another process may have rewritten it: `mr::keys`).
                if !self.endpoint.keys.vouches(mr.key() >> 8, &mr_rec) {
                    return Err(BindError);
                }
                let skip = spec.addr - d.iova;
                desc.access = access.bits();
                desc.qpn = if self.mw_type == MwType::Type2 { qpn } else { 0 };
                desc.mr_index = mr.key() >> 8;
                desc.iova = if access.contains(Access::ZERO_BASED) { 0 } else { spec.addr };
                desc.len = len;
                desc.va = mr_rec.va + skip;
                desc.loc = mr_rec.loc;
                desc.seg_off = mr_rec.seg_off + skip;
                Some(Binding { mr: mr.clone() })
            }
        };
        if let (Some(_), Some(w)) = (&binding, listed.as_mut()) {
            let me = self as *const MwInner;
            if !w.iter().any(|x| std::ptr::addr_eq(x.as_ptr(), me)) {
                if let Some(weak) = self.endpoint.keys.get(core.rkey).and_then(|t| match t {
                    KeyTarget::Mw(w) => Some(w),
                    KeyTarget::Mr(_) => None,
                }) {
                    w.push(weak);
                }
            }
        }
        core.binding = binding;
        self.endpoint.keys.rekey(core.rkey, new_key);
        core.rkey = new_key;
        self.endpoint.keys.publish(desc.key >> 8, &desc);
        Ok(())
    }

    /// ibv_dealloc_mw(3): the window's key grants nothing from now on, and no access
    /// through it is in progress once this returns ([`quiesce`]: the state is stored,
    /// then the window's own count waited for; the record stays the window's until then,
    /// so no later key's accesses are counted in it). The region the window was bound to
    /// stays registered until the binding, held until then, is dropped.
    fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            let mut core = self.core.lock().expect("mw");
            let binding = core.binding.take();
            let rkey = core.rkey;
            let rec = self.record(rkey);
            rec.state.store(KEY_STATE_INVALID, Ordering::SeqCst);
            drop(core);
            quiesce(self.endpoint, rec);
            self.endpoint.keys.remove(rkey);
            drop(binding);
            self.pd.release();
        }
    }
}

impl Window for MwInner {
    fn is_bound_to(&self, mr: &MrInner) -> bool {
        let core = self.core.lock().expect("mw");
        core.binding.as_ref().is_some_and(|b| std::ptr::eq(Arc::as_ptr(&b.mr), mr))
            && self.record(core.rkey).state.load(Ordering::Acquire) == KEY_STATE_VALID
    }

    fn invalidate(&self, rkey: u32, pd: u32) -> bool {
        let mut core = self.core.lock().expect("mw");
        let rec = self.record(core.rkey);
        if !free_record(rec, rkey, pd) {
            return false;
        }
        let binding = core.binding.take();
        drop(core);
        quiesce(self.endpoint, rec);
        // The region stays registered until the window's accesses ended.
        drop(binding);
        true
    }
}

impl Drop for MwInner {
    fn drop(&mut self) {
        self.release();
    }
}

/// A memory window (`struct ibv_mw`). Cloning shares it.
#[derive(Clone)]
pub struct Mw {
    inner: Arc<MwInner>,
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw").field("type", &self.inner.mw_type).field("rkey", &self.rkey()).finish()
    }
}

/// What to bind a window to (`struct ibv_mw_bind_info`).
#[derive(Clone, Copy, Debug)]
pub struct MwBind<'a> {
    /// The region (`None` with length 0 unbinds a type 1 window).
    pub mr: Option<&'a Mr>,
    /// First address, in the region's IO address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Rights granted through the window.
    pub access: Access,
}

impl Mw {
    /// A window of `mw_type` in PD `pd` (`Mw::new`, in `pd`).
    pub(crate) fn new_in(pd: &Arc<PdCore>, mw_type: u32) -> Result<Mw> {
        if let Some(e) = crate::fault_plan::fatal(pd.endpoint().slot, "alloc_mw") {
            return Err(e);
        }
        let mw_type = match mw_type {
            1 => MwType::Type1,
            2 => MwType::Type2,
            _ => return Err(Error::invalid("alloc_mw", Rule::MwType { mw_type })),
        };
        let pd_inner = pd.clone();
        pd_inner.hold()?;
        let endpoint = pd_inner.endpoint();
        // A type 1 window is valid from allocation (bound to nothing: every access is out
        // of bounds); a type 2 window is free until a BIND_MW work request binds it.
        let (kind, state) = match mw_type {
            MwType::Type1 => (KEY_KIND_MW1, KEY_STATE_VALID),
            MwType::Type2 => (KEY_KIND_MW2, KEY_STATE_FREE),
        };
        let desc = KeyDesc { kind, state, pd: pd_inner.id, ..KeyDesc::default() };
        let inner = Arc::new_cyclic(|weak: &Weak<MwInner>| {
            let rkey = endpoint.keys.insert(KeyTarget::Mw(weak.clone()), desc).unwrap_or(0);
            MwInner {
                endpoint,
                posted_rkey: std::sync::atomic::AtomicU32::new(rkey),
                pd: pd_inner.clone(),
                mw_type,
                core: Mutex::new(MwCore { rkey, binding: None }),
                released: AtomicBool::new(rkey == 0),
            }
        });
        if inner.rkey() == 0 {
            pd_inner.release();
            return Err(Error::Exhausted { what: "memory keys" });
        }
        Ok(Mw { inner })
    }

    pub(crate) fn inner(&self) -> &Arc<MwInner> {
        &self.inner
    }

    /// The current remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// The window type.
    pub fn mw_type(&self) -> MwType {
        self.inner.mw_type
    }

    /// Deallocates the window (ibv_dealloc_mw(3)): remote access through it fails from
    /// now on, and its region is no longer held.
    pub fn dealloc(&self) -> Result<()> {
        if self.inner.released.load(Ordering::Acquire) {
            return Err(Error::Destroyed { what: "memory window" });
        }
        if crate::sanitizer::on() {
            // Reported, then the window goes as it would on a NIC (docs/sanitizer.md).
            crate::sanitizer::dealloc_mw(Arc::as_ptr(&self.inner) as usize, self.inner.rkey());
        }
        self.inner.release();
        Ok(())
    }
}

/// `ibv_inc_rkey(3)`: the next key of a window (the low byte advances).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

#[cfg(test)]
mod tests {
    //! Binds racing deregistration and re-registration of the bound region: the lock
    //! pair of [`MwInner::bind`] and [`MrInner::windows`] (see the lock order there).
    //! Each thread runs a bounded number of steps and the threads start together
    //! (a barrier, no sleeps); the assertions are the rules, which hold however the
    //! steps interleave.

    use super::*;
    use crate::mr::ReregFlags;
    use crate::Pd;
    use std::sync::Barrier;

    /// Rounds (a fresh region each) and steps per thread and round.
    const ROUNDS: usize = 200;
    const STEPS: usize = 200;

    fn pd() -> Pd {
        crate::devices().unwrap()[0].open().unwrap().alloc_pd().unwrap()
    }

    fn region(pd: &Pd) -> Mr {
        pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap()
    }

    /// A type 1 bind of the whole region (the BIND_MW work request `Qp::bind_mw` posts).
    fn bind(pd: &Pd, mw: &Mw, mr: &Mr) -> Result<(), BindError> {
        let spec = BindSpec {
            new_rkey: inc_rkey(mw.rkey()),
            mr: Some(mr.inner().expect("a soft region").clone()),
            addr: mr.iova(),
            len: 4096,
            access: Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        };
        mw.inner().bind(pd.inner().expect("a soft PD"), 0, spec)
    }

    /// A zero-length type 1 bind with no region: unbinds.
    fn unbind(pd: &Pd, mw: &Mw) -> Result<(), BindError> {
        let spec = BindSpec { new_rkey: inc_rkey(mw.rkey()), mr: None, addr: 0, len: 0, access: Access::empty() };
        mw.inner().bind(pd.inner().expect("a soft PD"), 0, spec)
    }

    fn is_windows_bound(e: &Error) -> bool {
        matches!(e, Error::Invalid { verb: "dereg_mr", rule: Rule::WindowsBound })
    }

    #[test]
    fn type1_bind_racing_dereg_never_leaves_a_window_bound_to_a_dead_region() {
        let pd = pd();
        let mw = Mw::new(&pd, 1).unwrap();
        for _ in 0..ROUNDS {
            let mr = region(&pd);
            // Bound to start with: the first deregistrations meet a bound window.
            bind(&pd, &mw, &mr).unwrap();
            let start = Barrier::new(2);
            let dereg_ok = std::thread::scope(|s| {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..STEPS {
                        unbind(&pd, &mw).unwrap();
                        match bind(&pd, &mw, &mr) {
                            // Bound: no deregistration may succeed until the unbind.
                            Ok(()) => {
                                assert!(mw.inner().is_bound_to(mr.inner().unwrap()));
                                assert!(mr.is_valid(), "region deregistered while a window was bound");
                            }
                            // The only reason this bind fails: the region is gone, for good.
                            Err(BindError) => assert!(!mr.is_valid(), "bind refused while the region was valid"),
                        }
                    }
                    unbind(&pd, &mw).unwrap();
                });
                let d = s.spawn(|| {
                    start.wait();
                    for _ in 0..STEPS {
                        match mr.dereg() {
                            Ok(()) => return true,
                            Err(e) => assert!(is_windows_bound(&e), "dereg failed otherwise: {e:?}"),
                        }
                    }
                    false
                });
                d.join().unwrap()
            });
            // The window is unbound now: a region still registered deregisters.
            if !dereg_ok {
                mr.dereg().unwrap();
            }
            assert!(!mr.is_valid());
            assert!(matches!(mr.dereg(), Err(Error::Destroyed { .. })));
            assert_eq!(bind(&pd, &mw, &mr), Err(BindError), "bind to a deregistered region");
            assert!(!mw.inner().is_bound_to(mr.inner().unwrap()));
        }
    }

    #[test]
    fn type1_bind_racing_rereg_never_sees_the_bound_region_change() {
        let pd = pd();
        let mw = Mw::new(&pd, 1).unwrap();
        let base = Access::LOCAL_WRITE | Access::MW_BIND;
        for _ in 0..ROUNDS / 4 {
            let mr = region(&pd);
            let start = Barrier::new(2);
            std::thread::scope(|s| {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..STEPS {
                        bind(&pd, &mw, &mr).expect("the region stays registered");
                        // Bound: no re-registration may change the region until the unbind.
                        let before = mr.access();
                        assert!(mw.inner().is_bound_to(mr.inner().unwrap()));
                        assert_eq!(mr.access(), before, "region re-registered while a window was bound");
                        unbind(&pd, &mw).unwrap();
                    }
                });
                s.spawn(|| {
                    start.wait();
                    for i in 0..STEPS {
                        let access = if i % 2 == 0 { base | Access::REMOTE_READ } else { base };
                        match mr.rereg(ReregFlags::ACCESS, None, Some(access)) {
                            Ok(()) => assert_eq!(mr.access(), access),
                            Err(e) => assert_eq!(e.errno(), libc::EBUSY, "rereg failed otherwise: {e:?}"),
                        }
                    }
                });
            });
            // Unbound now: re-registration succeeds.
            mr.rereg(ReregFlags::ACCESS, None, Some(base)).unwrap();
            assert_eq!(mr.access(), base);
        }
    }
}
