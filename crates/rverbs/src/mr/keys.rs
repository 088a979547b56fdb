//! The device's table of memory keys.
//!
//! key = index << 8 | key byte. The index names a slot; the key byte must match the
//! slot's current byte, so a stale key of a freed and reused slot, or the old key of a
//! rebound memory window, does not match (like hardware key tags).

use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, Result};
use crate::mr::MrInner;
use crate::mw::MwInner;

/// What a key names.
#[derive(Clone)]
pub(crate) enum KeyTarget {
    Mr(Weak<MrInner>),
    Mw(Weak<MwInner>),
}

struct KeySlot {
    byte: u8,
    target: Option<KeyTarget>,
}

pub(crate) struct KeyTable {
    slots: RwLock<Vec<KeySlot>>,
    free: Mutex<Vec<u32>>,
}

impl KeyTable {
    pub(crate) fn new() -> Self {
        // Index 0 is never handed out, so keys 0..=255 never name anything.
        KeyTable {
            slots: RwLock::new(vec![KeySlot { byte: 0, target: None }]),
            free: Mutex::new(Vec::new()),
        }
    }

    /// Gives `target` a fresh key.
    pub(crate) fn insert(&self, target: KeyTarget) -> Result<u32> {
        let reuse = self.free.lock().expect("key table").pop();
        let mut slots = self.slots.write().expect("key table");
        let index = match reuse {
            Some(i) => i,
            None => {
                if slots.len() as u32 > crate::device::limits::MAX_MR {
                    return Err(Error::Exhausted { what: "memory keys" });
                }
                slots.push(KeySlot { byte: 0, target: None });
                slots.len() as u32 - 1
            }
        };
        let slot = &mut slots[index as usize];
        slot.byte = slot.byte.wrapping_add(1);
        slot.target = Some(target);
        Ok(index << 8 | u32::from(slot.byte))
    }

    pub(crate) fn get(&self, key: u32) -> Option<KeyTarget> {
        let slots = self.slots.read().expect("key table");
        let slot = slots.get((key >> 8) as usize)?;
        if slot.byte != key as u8 {
            return None;
        }
        slot.target.clone()
    }

    /// Changes the key byte of the slot `old` names (a memory window bind): `old` stops
    /// matching, `new` (same index) starts.
    pub(crate) fn rekey(&self, old: u32, new: u32) {
        debug_assert_eq!(old >> 8, new >> 8);
        let mut slots = self.slots.write().expect("key table");
        if let Some(slot) = slots.get_mut((old >> 8) as usize) {
            if slot.byte == old as u8 {
                slot.byte = new as u8;
            }
        }
    }

    pub(crate) fn remove(&self, key: u32) {
        let mut slots = self.slots.write().expect("key table");
        if let Some(slot) = slots.get_mut((key >> 8) as usize) {
            if slot.byte == key as u8 && slot.target.take().is_some() {
                self.free.lock().expect("key table").push(key >> 8);
            }
        }
    }

    /// The region named by `key`, if it is a live memory region.
    pub(crate) fn mr(&self, key: u32) -> Option<Arc<MrInner>> {
        match self.get(key)? {
            KeyTarget::Mr(w) => w.upgrade(),
            KeyTarget::Mw(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_rekeyed_keys_do_not_match() {
        let t = KeyTable::new();
        let k = t.insert(KeyTarget::Mr(Weak::new())).unwrap();
        assert!(k >> 8 != 0, "index 0 is reserved");
        assert!(t.get(k).is_some());
        assert!(t.get(k ^ 1).is_none());
        let k2 = (k & !0xff) | ((k + 7) & 0xff);
        t.rekey(k, k2);
        assert!(t.get(k).is_none());
        assert!(t.get(k2).is_some());
        t.remove(k2);
        assert!(t.get(k2).is_none());
        // The slot is reused with a different key byte.
        let k3 = t.insert(KeyTarget::Mr(Weak::new())).unwrap();
        assert_eq!(k3 >> 8, k >> 8);
        assert_ne!(k3, k2);
        assert!(t.get(k2).is_none());
    }
}
