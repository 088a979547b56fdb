//! Receive queues: a QP's own, or a shared receive queue's.
//!
//! Rule: ibv_post_recv(3): each work request names at most `max_recv_sge` entries
//! (EINVAL) and the queue holds at most `max_recv_wr` (ENOMEM); the first refused
//! request is reported and the ones before it stay posted. Receives are consumed in
//! order by inbound SENDs and RDMA WRITEs with immediate.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::mr::{MrInner, Sge};
use crate::qp::wr::{PostError, RecvWr};

/// Largest scatter list a receive (or send) work request can have on this device.
pub(crate) const MAX_SGE: usize = crate::device::limits::MAX_SGE as usize;

/// A receive work request taken off the queue.
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    pub(crate) num_sge: usize,
    pub(crate) sges: [Sge; MAX_SGE],
    /// Regions kept registered for the Rust API until the data is placed.
    pub(crate) _keep: [Option<Arc<MrInner>>; MAX_SGE],
}

impl RecvWqe {
    pub(crate) fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge]
    }

    /// Total bytes the scatter list can take.
    pub(crate) fn capacity(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length)).sum()
    }
}

struct RqState {
    wr_ids: Vec<u64>,
    num_sge: Vec<u32>,
    sges: Vec<Sge>,
    keep: Vec<Option<Arc<MrInner>>>,
    head: usize,
    count: usize,
}

pub(crate) struct RecvQueue {
    state: Mutex<RqState>,
    cap: usize,
    max_sge: usize,
}

impl RecvQueue {
    pub(crate) fn new(max_wr: u32, max_sge: u32) -> Self {
        let cap = max_wr.max(1) as usize;
        let max_sge = max_sge.max(1) as usize;
        RecvQueue {
            state: Mutex::new(RqState {
                wr_ids: vec![0; cap],
                num_sge: vec![0; cap],
                sges: vec![Sge::default(); cap * max_sge],
                keep: vec![None; cap * max_sge],
                head: 0,
                count: 0,
            }),
            cap,
            max_sge,
        }
    }

    /// Queue capacity.
    pub(crate) fn capacity(&self) -> u32 {
        self.cap as u32
    }

    /// Posts receives. With `keep`, each SGE's region is held registered until the
    /// receive is consumed (the Rust API's buffer-lifetime guarantee), looked up in
    /// `keys`.
    pub(crate) fn post(
        &self,
        wrs: &[RecvWr<'_>],
        keep: Option<&crate::mr::KeyTable>,
        verb: &'static str,
    ) -> Result<(), PostError> {
        let mut st = self.state.lock().expect("rq");
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.max_sge {
                let error =
                    Error::TooManySge { max: self.max_sge as u32, got: wr.sg_list.len() as u32 };
                return Err(PostError { index, error });
            }
            if st.count == self.cap {
                return Err(PostError {
                    index,
                    error: Error::QueueFull { verb, max: self.cap as u32 },
                });
            }
            let slot = (st.head + st.count) % self.cap;
            st.wr_ids[slot] = wr.wr_id;
            st.num_sge[slot] = wr.sg_list.len() as u32;
            let base = slot * self.max_sge;
            for (i, sge) in wr.sg_list.iter().enumerate() {
                st.sges[base + i] = *sge;
                st.keep[base + i] = keep.and_then(|k| k.mr(sge.lkey));
            }
            for i in wr.sg_list.len()..self.max_sge {
                st.keep[base + i] = None;
            }
            st.count += 1;
        }
        Ok(())
    }

    /// Takes the oldest receive, if any; also returns how many remain.
    pub(crate) fn take(&self) -> Option<(RecvWqe, usize)> {
        let mut st = self.state.lock().expect("rq");
        if st.count == 0 {
            return None;
        }
        let slot = st.head;
        let n = st.num_sge[slot] as usize;
        let base = slot * self.max_sge;
        let mut wqe = RecvWqe {
            wr_id: st.wr_ids[slot],
            num_sge: n,
            sges: [Sge::default(); MAX_SGE],
            _keep: std::array::from_fn(|_| None),
        };
        wqe.sges[..n].copy_from_slice(&st.sges[base..base + n]);
        for i in 0..n {
            wqe._keep[i] = st.keep[base + i].take();
        }
        st.head = (st.head + 1) % self.cap;
        st.count -= 1;
        Some((wqe, st.count))
    }

    /// Removes every receive, oldest first, returning their wr_ids.
    pub(crate) fn drain(&self) -> Vec<u64> {
        let mut st = self.state.lock().expect("rq");
        let mut out = Vec::with_capacity(st.count);
        while st.count > 0 {
            let slot = st.head;
            out.push(st.wr_ids[slot]);
            let base = slot * self.max_sge;
            for k in &mut st.keep[base..base + self.max_sge] {
                *k = None;
            }
            st.head = (st.head + 1) % self.cap;
            st.count -= 1;
        }
        out
    }

    /// Moves every receive of `old` (oldest first) to the end of this queue, as far as
    /// it has room (used to resize an SRQ; the caller checked the room).
    pub(crate) fn absorb(&self, old: &RecvQueue) {
        let mut o = old.state.lock().expect("rq");
        let mut st = self.state.lock().expect("rq");
        let n = self.max_sge.min(old.max_sge);
        while o.count > 0 && st.count < self.cap {
            let from = o.head;
            let to = (st.head + st.count) % self.cap;
            st.wr_ids[to] = o.wr_ids[from];
            st.num_sge[to] = o.num_sge[from];
            for i in 0..n {
                st.sges[to * self.max_sge + i] = o.sges[from * old.max_sge + i];
                st.keep[to * self.max_sge + i] = o.keep[from * old.max_sge + i].take();
            }
            o.head = (o.head + 1) % old.cap;
            o.count -= 1;
            st.count += 1;
        }
    }

    /// Receives queued.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().expect("rq").count
    }

    pub(crate) fn max_sge(&self) -> u32 {
        self.max_sge as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(n: u64) -> Sge {
        Sge { addr: n, length: 8, lkey: 1 }
    }

    #[test]
    fn post_take_in_order_and_full_is_enomem() {
        let rq = RecvQueue::new(2, 2);
        let a = [sge(1)];
        let b = [sge(2), sge(3)];
        let c = [sge(4)];
        let wrs = [RecvWr::new(1, &a), RecvWr::new(2, &b), RecvWr::new(3, &c)];
        let err = rq.post(&wrs, None, "post_recv").unwrap_err();
        assert_eq!(err.index, 2);
        assert_eq!(err.error.errno(), libc::ENOMEM);
        let (w, left) = rq.take().unwrap();
        assert_eq!((w.wr_id, left, w.sges()), (1, 1, &a[..]));
        let (w, _) = rq.take().unwrap();
        assert_eq!((w.wr_id, w.sges()), (2, &b[..]));
        assert_eq!(w.capacity(), 16);
        assert!(rq.take().is_none());
    }

    #[test]
    fn too_many_sges_is_einval() {
        let rq = RecvQueue::new(4, 1);
        let two = [sge(1), sge(2)];
        let err = rq.post(&[RecvWr::new(1, &two)], None, "post_recv").unwrap_err();
        assert_eq!((err.index, err.error.errno()), (0, libc::EINVAL));
        assert_eq!(rq.len(), 0);
    }

    #[test]
    fn drain_returns_all_oldest_first() {
        let rq = RecvQueue::new(4, 1);
        let s = [sge(1)];
        rq.post(&[RecvWr::new(7, &s), RecvWr::new(8, &s)], None, "post_recv").unwrap();
        assert_eq!(rq.drain(), vec![7, 8]);
        assert_eq!(rq.len(), 0);
    }
}
