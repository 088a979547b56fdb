//! mr-memory-freed (docs/sanitizer.md): a heap block given back (`free`, or the part of
//! a block `realloc` gives back), reported by the drop-in's free watch, under a live
//! region over caller memory. ibv_reg_mr(3): a NIC keeps the pages it pinned until
//! `ibv_dereg_mr`.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{report, site, trace, track, Finding, FindingKind, Id, Kind, Object, Queue, BUSY};

/// How many regions `caller_mrs` holds, kept with it under the tables' lock: a release
/// while there are none takes no lock.
static CALLER_MRS: AtomicUsize = AtomicUsize::new(0);

/// Publishes the number of regions over caller memory after a change of `caller_mrs`.
pub(crate) fn counted(st: &track::State) {
    CALLER_MRS.store(st.caller_mrs.len(), Ordering::Relaxed);
}

/// A region over caller memory (not on-demand) was registered: a heap block released
/// under it is mr-memory-freed.
#[cold]
#[inline(never)]
pub(crate) fn caller_region(lkey: Id, addr: u64, len: u64) {
    let mut st = track::state();
    st.caller_mrs.insert(lkey, (addr, len));
    counted(&st);
}

/// The region `lkey` no longer covers caller memory it can be blamed for.
#[cold]
#[inline(never)]
pub(crate) fn caller_region_gone(lkey: Id) {
    let mut st = track::state();
    st.caller_mrs.remove(&lkey);
    counted(&st);
}

/// The heap block `[addr, addr+len)` is being released (`free`, or the part of a
/// `realloc`'d block given back), reported by the drop-in's `free` watch: a finding if
/// a live region over caller memory covers any of it (mr-memory-freed), once per
/// region, and only for regions this process registered (not those a forked child
/// inherited). Not checked (a miss, never a made-up finding) while this thread is inside
/// the sanitizer's own code, its thread-locals are gone (thread exit), or the tables stay
/// held by another thread through [`track::try_state`]'s bounded wait.
#[cold]
#[inline(never)]
pub(crate) fn released(addr: usize, len: usize) {
    if BUSY.try_with(|b| b.get()).unwrap_or(1) != 0 || len == 0 || CALLER_MRS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let (start, end) = (addr as u64, addr as u64 + len as u64);
    // Bounded: a thread holding the tables may be waiting for a lock this one holds
    // outside the sanitizer (the standard library's backtrace lock, taken by a panic's
    // report); giving up is a miss, waiting could be a deadlock.
    let Some(mut st) = track::try_state() else { return };
    let hit = st.caller_mrs.iter().find(|(_, &(a, l))| a < end && start < a.saturating_add(l)).map(|(&k, &r)| (k, r));
    let Some((lkey, (mr_addr, mr_len))) = hit else { return };
    // A forked child inherits the tables: the parent's regions are not the child's.
    let live = st.live.get(&(Kind::Mr, lkey));
    if live.is_some_and(|l| l.pid != std::process::id()) {
        return;
    }
    let registered = live.map(|l| l.at.clone());
    if !st.unmapped.insert(lkey) {
        return;
    }
    let user = st.user_of(lkey).map(|(queue, num, p, sge)| (queue, num, p.wr_id, sge, p.at.clone()));
    drop(st);
    let mut sites = vec![site("freed at", &trace::capture())];
    let mut objects = vec![Object::Mr { lkey: lkey.num, addr: mr_addr, len: mr_len }];
    let mut tail = String::new();
    if let Some((queue, num, wr_id, sge, posted)) = user {
        sites.push(site("posted at", &posted));
        objects.push(Object::WorkRequest { wr_id, queue, num: num.num, sge: Some(sge) });
        tail = format!(", and work request wr_id {wr_id:#x} on {} ({}) uses it", if queue == Queue::SharedRecv { format!("SRQ {num:#x}") } else { format!("QPN {num:#x}") }, queue.describe());
    }
    if let Some(r) = registered {
        sites.push(site("mr registered at", &r));
    }
    report::emit(Finding {
        kind: FindingKind::MrMemoryFreed,
        device: Some(lkey.slot),
        page: "ibv_reg_mr(3)",
        rule: "a registered region's memory stays allocated until ibv_dereg_mr: a NIC keeps the pages it pinned at registration and goes on reading and writing them, so a heap block freed under a region (then reused by the next malloc) is read and overwritten by the device behind the program's back; with a work request outstanding, its buffers may be reused only once its completion was retrieved (ibv_post_send(3), ibv_post_recv(3), NOTES)",
        headline: format!(
            "heap block [{start:#x}-{end:#x}) released while mr lkey {lkey:#x} [{mr_addr:#x}-{:#x}) is registered over it{tail}",
            mr_addr.saturating_add(mr_len)
        ),
        objects,
        sites,
    });
}
