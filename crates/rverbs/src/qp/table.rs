//! QP numbers and the device's table of live QPs.
//!
//! A QPN is 24 bits: `endpoint << LOCAL_BITS | local index`. The endpoint identifies the
//! process on this host (0 until a host-wide registry hands out others); the local index
//! identifies the QP inside the process. Indices 0 and 1 are never used, so QPN 0 (SMI)
//! and 1 (GSI) keep their IBTA meaning. Freed indices are reused.

use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, Result};
use crate::qp::QpInner;

/// Bits of a QPN that index QPs inside one process.
pub const LOCAL_BITS: u32 = 14;
/// QPs one process can have at once.
pub const MAX_LOCAL_QPS: u32 = (1 << LOCAL_BITS) - FIRST_INDEX;
const FIRST_INDEX: u32 = 2;

pub(crate) struct QpTable {
    endpoint: u32,
    slots: RwLock<Vec<Option<Weak<QpInner>>>>,
    free: Mutex<Vec<u32>>,
}

impl QpTable {
    pub(crate) fn new() -> Self {
        QpTable {
            endpoint: 0,
            slots: RwLock::new(vec![None; FIRST_INDEX as usize]),
            free: Mutex::new(Vec::new()),
        }
    }

    /// Reserves a QPN; the slot stays empty until [`QpTable::publish`].
    pub(crate) fn reserve(&self) -> Result<u32> {
        let reuse = self.free.lock().expect("qp table").pop();
        let index = match reuse {
            Some(i) => i,
            None => {
                let mut slots = self.slots.write().expect("qp table");
                if slots.len() as u32 >= 1 << LOCAL_BITS {
                    return Err(Error::Exhausted { what: "queue pairs" });
                }
                slots.push(None);
                slots.len() as u32 - 1
            }
        };
        Ok(self.endpoint << LOCAL_BITS | index)
    }

    pub(crate) fn publish(&self, qpn: u32, qp: &Arc<QpInner>) {
        let mut slots = self.slots.write().expect("qp table");
        slots[(qpn & ((1 << LOCAL_BITS) - 1)) as usize] = Some(Arc::downgrade(qp));
    }

    /// Frees a QPN for reuse.
    pub(crate) fn remove(&self, qpn: u32) {
        let index = qpn & ((1 << LOCAL_BITS) - 1);
        let mut slots = self.slots.write().expect("qp table");
        if let Some(slot) = slots.get_mut(index as usize) {
            *slot = None;
            self.free.lock().expect("qp table").push(index);
        }
    }

    /// The live QP with number `qpn` in this process.
    pub(crate) fn get(&self, qpn: u32) -> Option<Arc<QpInner>> {
        if qpn >> LOCAL_BITS != self.endpoint {
            return None;
        }
        let slots = self.slots.read().expect("qp table");
        slots.get((qpn & ((1 << LOCAL_BITS) - 1)) as usize)?.as_ref()?.upgrade()
    }
}
