//! An owned region ([`OwnedMr`]): a registration that owns the buffer it covers, and
//! whose bytes are either the device's (open) or the program's (closed), never both.
//!
//! Rule (docs/rust-api.md, "Owned buffers"): a reference to the bytes exists only while
//! the region is closed and no leased request names it. Closed means the keys grant
//! nothing and no access is in progress: every access to an owned region counts itself
//! before it checks the key, this process's own included ([`MrInner::close_keys`]), so
//! waiting for the count to drain after closing waits for all of them.
#![allow(unsafe_code)]

use std::ops::{Bound, RangeBounds};

use rverbs_proto::verbs::Access;

use super::buf::{Raw, StableBuf};
use crate::error::{Error, Result};
use crate::mr::{Mr, MrInit, Sge};
use crate::pd::Pd;
use crate::rule::Rule;
use crate::typed::Remote;

/// What a region with a lease out answers to the program.
const LEASED: &str = "owned memory region with a leased work request outstanding (its completion ends the lease)";
/// What an open region answers to the program.
const OPEN: &str = "owned memory region open to the device (OwnedMr::close takes it back)";
/// What a region whose accesses did not drain answers.
const DRAINING: &str = "owned memory region with a device access still in progress";

/// The request a lease stands for: a completion with this `wr_id` on this QP (a receive
/// completion when `recv`) ends it ([`super::lease`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) wr_id: u64,
    pub(crate) qp_num: u32,
    pub(crate) recv: bool,
}

/// A memory region that owns the buffer it registers (`Vec<u8>`, `Box<[u8]>`,
/// `bytes::BytesMut`: [`StableBuf`]) and gives it back at deregistration
/// ([`OwnedMr::into_inner`]); zero copy without `unsafe` (docs/rust-api.md, "Owned
/// buffers").
///
/// Its bytes belong to one side at a time:
/// - **open** (after [`Pd::reg_owned`], [`OwnedMr::open`], or while a leased request
///   runs): the device reaches them through the keys, for this process's work requests
///   and for peers holding the rkey, as after ibv_reg_mr(3); the program cannot;
/// - **closed** (after [`OwnedMr::close`], or the completion that ends a lease): the keys
///   grant nothing (a request or a peer naming them gets a protection or remote access
///   error, as for a deregistered region) and [`OwnedMr::as_slice`] and
///   [`OwnedMr::as_mut_slice`] lend the bytes.
///
/// A work request posted from the region ([`OwnedMr::post_send`] and the others) hands
/// out a [`Lease`](super::lease::Lease) that borrows the region mutably until the completion
/// that ends it: touching the bytes, posting again, deregistering or dropping the region
/// while it lives does not compile. A lease dropped or forgotten before its completion
/// leaves the request outstanding: the region refuses to lend its bytes or lease again
/// until [`OwnedMr::end_lease`] sees that completion or [`OwnedMr::into_inner`] ends the
/// registration. Nothing unsound follows from forgetting anything: the bytes are never
/// lent while the keys grant access.
///
/// Dropping the region deregisters it and frees the buffer (after the accesses in
/// progress, as [`OwnedMr::into_inner`]).
pub struct OwnedMr<B: StableBuf> {
    /// The registration; never lent out (no rereg, no dereg, no window bind but ours).
    pub(super) mr: Mr,
    /// The buffer, taken apart ([`super::buf`]); `None` only once given back.
    buf: Option<(B::Held, Raw)>,
    /// Whether the keys grant access (or may: a close that did not drain).
    pub(super) open: bool,
    /// The leased request outstanding, if any.
    pub(super) pending: Option<Pending>,
}

impl<B: StableBuf> std::fmt::Debug for OwnedMr<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedMr")
            .field("lkey", &self.mr.lkey())
            .field("len", &self.len())
            .field("open", &self.open)
            .field("pending", &self.pending)
            .finish()
    }
}

impl Pd {
    /// Registers `buf`, which the region owns until [`OwnedMr::into_inner`] gives it back
    /// (ibv_reg_mr(3) over the buffer's bytes: a `Vec`'s `len()` bytes, not its spare
    /// capacity). The region starts open: peers may use its rkey at once.
    ///
    /// Rule: ibv_reg_mr(3): REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE; a zero
    /// length is refused.
    /// Errors: `EINVAL` for MW_BIND or ON_DEMAND ([`Rule::OwnedMrAccess`]), for an empty
    /// buffer and as [`Pd::reg_mr`] for the access flags; on an error the buffer is
    /// dropped.
    pub fn reg_owned<B: StableBuf>(&self, buf: B, access: Access) -> Result<OwnedMr<B>> {
        let refused = access & (Access::MW_BIND | Access::ON_DEMAND);
        if !refused.is_empty() {
            return Err(Error::invalid("reg_owned", Rule::OwnedMrAccess { flags: refused.bits() }));
        }
        let (held, raw) = buf.hold();
        let at = raw.ptr.as_ptr() as usize;
        let init = MrInit { addr: at, len: raw.len, iova: at as u64, access };
        match Mr::register_with(self.inner()?.clone(), init, true) {
            Ok(mr) => Ok(OwnedMr { mr, buf: Some((held, raw)), open: true, pending: None }),
            Err(e) => {
                // SAFETY: from the `hold` above; the registration failed, so the device
                // never had a key to the bytes.
                drop(unsafe { B::release(held, raw) });
                Err(e)
            }
        }
    }
}

impl<B: StableBuf> OwnedMr<B> {
    /// The local key (for this process's work requests; the region's own posts use it).
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// The remote key, for a peer.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The IO virtual address of the first byte (what a peer's RDMA address starts from).
    pub fn iova(&self) -> u64 {
        self.mr.iova()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.as_ref().map_or(0, |(_, raw)| raw.len)
    }

    /// Whether the region is empty (never: registration refuses an empty buffer).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `offset` bytes into the region, as a peer names it in an RDMA or atomic request.
    pub fn remote(&self, offset: u64) -> Remote {
        Remote::of(&self.mr, offset)
    }

    /// Whether the device may reach the bytes (open), or the program (closed).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether a leased request is outstanding (a lease lives, or was dropped before its
    /// completion).
    pub fn is_leased(&self) -> bool {
        self.pending.is_some()
    }

    /// Opens the region to the device: its keys grant what its access flags say, for
    /// this process's requests and for peers, until it is closed.
    pub fn open(&mut self) {
        // The region is a soft one: an owned region registers on a soft PD only.
        if let Ok(inner) = self.mr.inner() {
            inner.open_keys();
        }
        self.open = true;
    }

    /// Takes the bytes back from the device: the keys grant nothing from now on, and
    /// the call returns once no access is in progress (a request or a peer naming the
    /// region later completes with a protection or remote access error).
    ///
    /// Errors: `EBUSY` while a leased request is outstanding (its completion closes the
    /// region: [`Lease::complete`](super::lease::Lease::complete), [`OwnedMr::end_lease`]), or
    /// when an access is still in progress after two seconds (a peer died in it; the keys
    /// stay closed and a later call waits again).
    pub fn close(&mut self) -> Result<()> {
        if self.pending.is_some() {
            return Err(Error::Busy { what: LEASED });
        }
        self.close_keys()
    }

    /// Closes the keys and waits for the accesses in progress.
    pub(super) fn close_keys(&mut self) -> Result<()> {
        if !self.open {
            return Ok(());
        }
        if self.mr.inner()?.close_keys() {
            self.open = false;
            Ok(())
        } else {
            Err(Error::Busy { what: DRAINING })
        }
    }

    fn raw(&self, verb: &'static str) -> Result<&Raw> {
        if self.pending.is_some() {
            return Err(Error::Busy { what: LEASED });
        }
        if self.open {
            return Err(Error::Busy { what: OPEN });
        }
        match &self.buf {
            Some((_, raw)) => Ok(raw),
            None => Err(Error::Bug(verb)),
        }
    }

    /// The bytes, while the region is closed.
    ///
    /// Errors: `EBUSY` while it is open ([`OwnedMr::close`] first) or a leased request
    /// is outstanding.
    pub fn as_slice(&self) -> Result<&[u8]> {
        let raw = self.raw("OwnedMr::as_slice: no buffer")?;
        // SAFETY: the bytes are the held buffer's `len` initialized bytes, alive until
        // the buffer is released (`into_inner` or drop, which take the region by value).
        // The region is closed and no leased request is outstanding: its keys grant
        // nothing and no access is in progress (`close_keys` drained every one, all being
        // counted), and the keys open again only through `open` or a post, which take
        // `&mut self` and so wait for this borrow to end.
        Ok(unsafe { std::slice::from_raw_parts(raw.ptr.as_ptr(), raw.len) })
    }

    /// The bytes, mutably, while the region is closed.
    ///
    /// Errors: as [`OwnedMr::as_slice`].
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        let raw = self.raw("OwnedMr::as_mut_slice: no buffer")?;
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference the region
        // lends.
        Ok(unsafe { std::slice::from_raw_parts_mut(raw.ptr.as_ptr(), raw.len) })
    }

    /// An SGE over `range` of the region.
    ///
    /// Errors: `EINVAL` ([`Rule::OutsideRegion`]) for a range that leaves the region or
    /// is reversed; `EINVAL` ([`Error::Limit`]) beyond 4 GiB, an SGE's limit.
    pub(super) fn sge(&self, verb: &'static str, range: impl RangeBounds<usize>) -> Result<Sge> {
        let len = self.len();
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => len,
        };
        if start > end || end > len {
            let outside = Rule::OutsideRegion { offset: start as u64, len: end.saturating_sub(start) as u64, region_len: len as u64 };
            return Err(Error::invalid(verb, outside));
        }
        let n = u32::try_from(end - start)
            .map_err(|_| Error::Limit { verb, what: "bytes of a scatter/gather entry", max: u64::from(u32::MAX), got: (end - start) as u64 })?;
        self.mr.sge(start, n)
    }

    /// Deregisters the region and gives the buffer back (ibv_dereg_mr(3)): the keys are
    /// closed, the accesses in progress finish, then the registration ends. A request
    /// still naming the region (the one of a dropped lease) completes with an error.
    ///
    /// Errors: `EBUSY` when an access is still in progress after two seconds (a peer
    /// died in it): the registration ends but the buffer is leaked, never freed, since
    /// the device may still write it.
    pub fn into_inner(mut self) -> Result<B> {
        match self.give_back() {
            Some(buf) => Ok(buf),
            None => Err(Error::Busy { what: DRAINING }),
        }
    }

    /// Ends the registration and rebuilds the buffer; `None` if it must be leaked (or was
    /// given back already).
    fn give_back(&mut self) -> Option<B> {
        let (held, raw) = self.buf.take()?;
        let drained = self.mr.inner().is_ok_and(|inner| inner.close_keys());
        // Refused only for a region already deregistered or with bound windows, which an
        // owned region never is (its `Mr` is never lent, MW_BIND is refused); the keys
        // are closed either way.
        let _ = self.mr.dereg();
        if drained {
            // SAFETY: from `reg_owned`'s `hold`; the keys grant nothing and no access is
            // in progress (every access to the region is counted), so nothing but the
            // returned buffer reaches the bytes.
            Some(unsafe { B::release(held, raw) })
        } else {
            std::mem::forget((held, raw));
            None
        }
    }
}

impl<B: StableBuf> Drop for OwnedMr<B> {
    fn drop(&mut self) {
        drop(self.give_back());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use rverbs_proto::verbs::Access;

    use crate::mr::{KeySpace, KeyUse};
    use crate::shm::tables::KEY_STATE_INVALID;

    /// This process's own accesses to an owned region are counted (and an ordinary
    /// region's are not), so closing waits for one in progress.
    #[test]
    fn closing_waits_for_a_local_access_in_progress() {
        let ctx = crate::devices().unwrap()[0].open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let core = pd.inner().expect("a soft PD").clone();
        let keys = KeySpace::local(core.endpoint());
        let plain = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let pin = keys.pin(plain.lkey(), core.id, KeyUse::Local, plain.iova(), 8, Access::LOCAL_WRITE).unwrap();
        assert_eq!(plain.inner().unwrap().record().busy(), 0, "an ordinary region's local accesses are not counted");
        drop(pin);

        let mut owned = pd.reg_owned(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
        let pin = keys.pin(owned.lkey(), core.id, KeyUse::Local, owned.iova(), 8, Access::LOCAL_WRITE).unwrap();
        let inner = owned.mr.inner().unwrap().clone();
        assert_eq!(inner.record().busy(), 1, "an owned region's local access is counted");
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let closer = s.spawn(|| {
                let drained = inner.close_keys();
                done.store(true, Ordering::SeqCst);
                drained
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while inner.record().state.load(Ordering::SeqCst) != KEY_STATE_INVALID {
                assert!(std::time::Instant::now() < deadline, "the closer never closed the key");
                std::thread::yield_now();
            }
            assert!(!done.load(Ordering::SeqCst), "closing returned with an access in progress");
            drop(pin);
            assert!(closer.join().unwrap(), "the access finished: closing drained");
        });
        owned.open = false;
        assert!(owned.as_slice().is_ok());
        assert!(keys.pin(owned.lkey(), core.id, KeyUse::Local, owned.iova(), 8, Access::LOCAL_WRITE).is_err(), "a closed region grants nothing");
    }
}
