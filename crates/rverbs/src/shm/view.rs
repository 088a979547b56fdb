//! A shared value of a segment found once: checked in bounds and aligned when the view is
//! made, read afterwards without a check (a segment's bounds and alignment never change).
//!
//! For the values a data path reads at every call, such as a CQ's error flag in the
//! busy poller's empty `ibv_poll_cq` (docs/shared-state.md), where
//! [`Segment::get`]'s two checks cost as much as the read.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{Segment, ShmSafe};

/// The `T` at a fixed offset of a segment, which the view keeps mapped.
pub(crate) struct View<T: ShmSafe> {
    /// Keeps the mapping alive.
    seg: Arc<Segment>,
    ptr: NonNull<T>,
}

// SAFETY: `T` is ShmSafe (atomics only, shared by design) and the mapping lives as long as
// the view: the pointer is as good as a `&T` held with the `Arc`.
unsafe impl<T: ShmSafe + Sync> Send for View<T> {}
// SAFETY: as above.
unsafe impl<T: ShmSafe + Sync> Sync for View<T> {}

impl<T: ShmSafe> View<T> {
    /// The `T` at byte `offset` of `seg`. Panics as [`Segment::get`] does if it does not
    /// fit or is misaligned (offsets are this crate's layouts, never a peer's).
    pub(crate) fn new(seg: &Arc<Segment>, offset: usize) -> View<T> {
        let ptr = NonNull::from(seg.get::<T>(offset));
        View { seg: seg.clone(), ptr }
    }

    /// The segment the value is in.
    pub(crate) fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }
}

impl<T: ShmSafe> std::ops::Deref for View<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: checked in bounds and aligned by `new` (Segment::get); the mapping lives
        // as long as `self` (`seg`); T is ShmSafe, so a shared reference is sound while
        // peers write it.
        unsafe { self.ptr.as_ref() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn segment(tag: &str) -> Arc<Segment> {
        let dir = std::env::temp_dir().join(format!("rverbs-view-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let seg = Arc::new(Segment::create(&dir.join("s"), 4096).unwrap());
        seg.unlink();
        seg
    }

    #[test]
    fn reads_and_writes_the_segment_value() {
        let seg = segment("rw");
        let v = View::<AtomicU64>::new(&seg, 64);
        v.store(7, Ordering::Relaxed);
        assert_eq!(seg.get::<AtomicU64>(64).load(Ordering::Relaxed), 7);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn refuses_a_misaligned_offset() {
        let seg = segment("misaligned");
        let _ = View::<AtomicU64>::new(&seg, 4);
    }
}
