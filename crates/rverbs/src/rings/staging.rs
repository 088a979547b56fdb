//! The sanitizer's staging of receives (docs/sanitizer.md, read-before-completion).
//!
//! With the sanitizer on, a receive posted through the C ABI to a QP for which
//! ibv_query_qp_data_in_order(3) answers 0 for SENDs goes to the receive queue with one
//! SGE into a region the library allocates for it (a shared segment: peers place into
//! it with ordered stores), after its own SGEs were checked as the responder would
//! check them; the pages its SGEs cover whole are protected until the completion is
//! polled, and the staged bytes are then scattered into them
//! (`sanitizer::early`). A receive that cannot be staged soundly is posted as it is.

use std::sync::Arc;

use rverbs_proto::verbs::Access;

use super::wr::RecvWr;
use crate::mr::domain::PdCore;
use crate::mr::Sge;

/// The largest receive staged (its staging region is allocated at the post).
const MAX_STAGED: u64 = 16 << 20;

/// Rights under which a peer reaches a region by itself (cross-memory attach into this
/// process's pages, which fails on a protected page): pages such a region covers are
/// never protected.
const REACHED_BY_PEERS: Access =
    Access::REMOTE_WRITE.union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC).union(Access::MW_BIND).union(Access::ON_DEMAND);

/// A receive as posted after staging: its id for the sanitizer (0: not staged) and, if
/// staged, the one SGE into its staging region.
pub(crate) struct Staged {
    pub(crate) ids: Vec<u64>,
    pub(crate) sges: Vec<Option<Sge>>,
}

impl Staged {
    /// The receives to post: each staged one with its staging SGE instead of its own.
    pub(crate) fn apply<'a>(&'a self, wrs: &[RecvWr<'a>]) -> Vec<RecvWr<'a>> {
        wrs.iter()
            .zip(&self.sges)
            .map(|(w, s)| match s {
                Some(s) => RecvWr { wr_id: w.wr_id, sg_list: std::slice::from_ref(s) },
                None => *w,
            })
            .collect()
    }
}

/// Stages what it can of `wrs`, posted to QP `qpn` of PD `pd` (the QP answers 0).
#[cold]
#[inline(never)]
pub(crate) fn stage(pd: &Arc<PdCore>, qpn: u32, wrs: &[RecvWr<'_>]) -> Staged {
    let mut out = Staged { ids: Vec::with_capacity(wrs.len()), sges: Vec::with_capacity(wrs.len()) };
    for w in wrs {
        let (id, sge) = stage_one(pd, qpn, w).map_or((0, None), |(id, s)| (id, Some(s)));
        out.ids.push(id);
        out.sges.push(sge);
    }
    out
}

fn stage_one(pd: &Arc<PdCore>, qpn: u32, w: &RecvWr<'_>) -> Option<(u64, Sge)> {
    let me = pd.endpoint();
    let total: u64 = w.sg_list.iter().map(|g| u64::from(g.length)).sum();
    if total == 0 || total > MAX_STAGED {
        return None;
    }
    // The responder's checks of each SGE (a key of this process, a region of the QP's
    // PD, local write): one it would refuse is posted as it is, to fail as it would.
    let mut extents = Vec::new();
    for g in w.sg_list.iter().filter(|g| g.length > 0) {
        let r = crate::mr::local_range(me, g.lkey, g.addr, u64::from(g.length))?;
        if r.pd != pd.id || !r.access.contains(Access::LOCAL_WRITE) || r.access.intersects(REACHED_BY_PEERS) {
            return None;
        }
        let Some((a, b)) = crate::sanitizer::early::whole_pages(r.addr, r.addr + g.length as usize) else { continue };
        if peers_reach(me, a, b) || !crate::sanitizer::early::plain_rw(a, b) {
            continue;
        }
        extents.push((a, b));
    }
    if extents.is_empty() {
        return None;
    }
    let key = (me.slot, pd.id, qpn);
    let mr = match take_pooled(key, total as usize) {
        Some(mr) => mr,
        None => crate::sanitizer::internal(|| crate::mr::Mr::alloc(pd.clone(), (total as usize).next_power_of_two().max(4096), Access::LOCAL_WRITE)).ok()?,
    };
    let sge = Sge { addr: mr.addr() as u64, length: total as u32, lkey: mr.lkey() };
    let sges: Vec<Sge> = w.sg_list.to_vec();
    let scatter = Box::new(move |n: usize, dead: &[u32]| {
        let mut buf = vec![0u8; n.min(total as usize)];
        if mr.read(0, &mut buf).is_ok() {
            crate::mr::access::scatter_local(me, &sges, &buf, |g, _| !dead.contains(&g.lkey));
        }
        give_back(key, mr);
    });
    let stage = crate::sanitizer::early::Stage { qpn: crate::sanitizer::Id::new(me.slot, qpn), wr_id: w.wr_id, sges: w.sg_list.iter().map(|g| (g.lkey, g.addr, g.length)).collect(), extents, scatter };
    let id = crate::sanitizer::early::stage(stage);
    (id != 0).then_some((id, sge))
}

/// Staging regions kept per QP for its next receives (a region per receive made and
/// freed each time costs a segment file, its mappings here and at the peer), at most
/// [`POOLED`] per QP; freed when the QP is destroyed ([`qp_gone`]), before its PD can be.
/// Keyed by (device slot, PD handle, QPN): QPNs repeat across devices.
static POOL: std::sync::Mutex<std::collections::BTreeMap<PoolKey, Vec<crate::mr::Mr>>> = std::sync::Mutex::new(std::collections::BTreeMap::new());
type PoolKey = (usize, u32, u32);
const POOLED: usize = 64;

fn take_pooled(key: PoolKey, len: usize) -> Option<crate::mr::Mr> {
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let regions = pool.get_mut(&key)?;
    let i = regions.iter().position(|m| m.len() >= len)?;
    Some(regions.swap_remove(i))
}

/// Keeps `mr` for the next receive of QP `key.2`, unless the QP is gone: a poll that
/// raced with its destroy frees it (checked under the pool's lock, which [`qp_gone`]
/// takes after the QP left the tracking, so nothing is left in the pool to hold its PD).
fn give_back(key: PoolKey, mr: crate::mr::Mr) {
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let regions = pool.entry(key).or_default();
    if regions.len() < POOLED && crate::sanitizer::qp_alive(crate::sanitizer::Id::new(key.0, key.2)) {
        regions.push(mr);
        return;
    }
    drop(pool);
    drop(mr);
}

/// QP `qpn` of PD `pd` is destroyed: its staging regions are freed (outside the pool's
/// lock).
#[cold]
#[inline(never)]
pub(crate) fn qp_gone(pd: &PdCore, qpn: u32) {
    let gone = POOL.lock().unwrap_or_else(|p| p.into_inner()).remove(&(pd.endpoint().slot, pd.id, qpn));
    drop(gone);
}

/// Whether a region of this process over caller memory that peers reach by themselves
/// covers part of `[a, b)`, or one the look-up cannot vouch for (another device's: its
/// keys are not `me`'s).
fn peers_reach(me: &crate::mr::endpoint::Endpoint, a: usize, b: usize) -> bool {
    crate::sanitizer::caller_regions_over(a, b).into_iter().any(|(lkey, addr, len)| match crate::mr::local_range(me, lkey.num, addr, len) {
        Some(r) if lkey.slot == me.slot => r.region != (addr, len) || r.access.intersects(REACHED_BY_PEERS),
        _ => true,
    })
}

