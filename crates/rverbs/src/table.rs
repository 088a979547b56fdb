//! Numbered objects: QP numbers and SRQ numbers, and the device's tables of the live
//! objects behind them.
//!
//! A number is 24 bits: `endpoint << LOCAL_BITS | local index`. The endpoint identifies
//! the process on this host (0 until a host-wide registry hands out others; 8 bits, so up
//! to 256 processes); the local index identifies the object inside the process
//! (16 bits). Indices 0 and 1 are never used, so QPN 0 (SMI) and 1 (GSI) keep their
//! IBTA meaning.
//!
//! Numbers are handed out next-fit, cycling through the whole index space before one is
//! used again, as hardware does: a peer still retrying towards a destroyed QP must not
//! reach the next QP created in its place.

use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, Result};

/// Bits of a number that index objects inside one process.
pub const LOCAL_BITS: u32 = 16;
/// Objects of one kind one process can have at once.
pub const MAX_LOCAL_QPS: u32 = (1 << LOCAL_BITS) - FIRST_INDEX;
const FIRST_INDEX: u32 = 2;
const INDEX_MASK: u32 = (1 << LOCAL_BITS) - 1;

enum Slot<T> {
    Free,
    /// Reserved, not yet published.
    Reserved,
    Live(Weak<T>),
}

pub(crate) struct Table<T> {
    what: &'static str,
    endpoint: u32,
    slots: RwLock<Vec<Slot<T>>>,
    /// The index handed out last; the search for a free one starts after it.
    cursor: Mutex<u32>,
}

impl<T> Table<T> {
    pub(crate) fn new(what: &'static str, endpoint: u32) -> Self {
        Table {
            what,
            endpoint,
            slots: RwLock::new((0..FIRST_INDEX).map(|_| Slot::Reserved).collect()),
            cursor: Mutex::new(FIRST_INDEX - 1),
        }
    }

    /// Reserves a number; the slot stays empty until [`Table::publish`].
    pub(crate) fn reserve(&self) -> Result<u32> {
        let mut cursor = self.cursor.lock().expect("table cursor");
        let mut slots = self.slots.write().expect("table");
        let space = 1u32 << LOCAL_BITS;
        // Grow before reusing: fresh indices first, then freed ones in cycling order.
        if (slots.len() as u32) < space && *cursor + 1 >= slots.len() as u32 {
            slots.push(Slot::Reserved);
            *cursor = slots.len() as u32 - 1;
            return Ok(self.endpoint << LOCAL_BITS | *cursor);
        }
        let len = slots.len() as u32;
        for step in 1..=len {
            let i = (*cursor + step) % len;
            if i >= FIRST_INDEX && matches!(slots[i as usize], Slot::Free) {
                slots[i as usize] = Slot::Reserved;
                *cursor = i;
                return Ok(self.endpoint << LOCAL_BITS | i);
            }
        }
        if len < space {
            slots.push(Slot::Reserved);
            *cursor = len;
            return Ok(self.endpoint << LOCAL_BITS | len);
        }
        Err(Error::Exhausted { what: self.what })
    }

    pub(crate) fn publish(&self, num: u32, obj: &Arc<T>) {
        let mut slots = self.slots.write().expect("table");
        slots[(num & INDEX_MASK) as usize] = Slot::Live(Arc::downgrade(obj));
    }

    /// Frees a number for reuse (after the whole space has cycled).
    pub(crate) fn remove(&self, num: u32) {
        let i = (num & INDEX_MASK) as usize;
        let mut slots = self.slots.write().expect("table");
        if i >= FIRST_INDEX as usize && i < slots.len() {
            slots[i] = Slot::Free;
        }
    }

    /// Every live object of the table (a snapshot).
    pub(crate) fn live(&self) -> Vec<Arc<T>> {
        let slots = self.slots.read().expect("table");
        slots
            .iter()
            .filter_map(|s| match s {
                Slot::Live(w) => w.upgrade(),
                _ => None,
            })
            .collect()
    }

    /// The live object with number `num` in this process.
    pub(crate) fn get(&self, num: u32) -> Option<Arc<T>> {
        if num >> LOCAL_BITS != self.endpoint {
            return None;
        }
        let slots = self.slots.read().expect("table");
        match slots.get((num & INDEX_MASK) as usize)? {
            Slot::Live(w) => w.upgrade(),
            _ => None,
        }
    }
}

/// The endpoint a QP or SRQ number belongs to.
pub(crate) fn endpoint_of(num: u32) -> u32 {
    num >> LOCAL_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_not_reused_until_the_space_cycles() {
        let t: Table<u8> = Table::new("things", 0);
        let a = t.reserve().unwrap();
        assert_eq!(a, 2);
        let obj = Arc::new(7u8);
        t.publish(a, &obj);
        assert_eq!(t.get(a).map(|x| *x), Some(7));
        t.remove(a);
        assert!(t.get(a).is_none());
        let b = t.reserve().unwrap();
        assert_ne!(a, b, "a freed number is not handed out at once");
        assert!(t.get(b).is_none(), "reserved, not published");
    }

    #[test]
    fn freed_numbers_come_back_after_a_full_cycle() {
        let t: Table<u8> = Table::new("things", 0);
        let first = t.reserve().unwrap();
        t.remove(first);
        let mut last = first;
        for _ in 0..(MAX_LOCAL_QPS - 1) {
            last = t.reserve().unwrap();
        }
        assert_eq!(last, (1 << LOCAL_BITS) - 1);
        assert_eq!(t.reserve().unwrap(), first, "wraps to the first freed index");
        assert!(matches!(t.reserve(), Err(Error::Exhausted { .. })));
    }
}
