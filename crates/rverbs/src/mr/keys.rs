//! The device's table of memory keys.
//!
//! key = index << 8 | key byte. The index names a slot; the key byte must match the
//! slot's current byte, so a stale key of a freed and reused slot, or the old key of a
//! rebound memory window, does not match (like hardware key tags).
//!
//! Each slot has two halves: here, the Rust objects the key names (for this process's
//! own verbs: binds, local invalidation, keeping regions alive); in the endpoint's
//! shared tables, the [`KeyRecord`] every access checks — this process's and its peers'.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, Result};
use crate::mr::MrInner;
use crate::shm::tables::{KeyDesc, KeyRecord, Tables, KEY_RECORDS};

/// A memory window as keys and regions see it.
///
/// Rule: a window binds to a region, not the other way round: `crate::mw` (windows) is
/// built on the regions and implements this, so the key table can name a window and a
/// region can tell whether windows are still bound to it (ibv_dereg_mr(3) fails while
/// one is) without depending on the windows' module.
pub(crate) trait Window: Send + Sync {
    /// Whether the window is bound to `mr` and still valid. Called with `mr`'s window
    /// list held, so it takes the window's lock after the list (the lock order of
    /// `MrInner::windows`); an implementation must not take a region's list itself.
    fn is_bound_to(&self, mr: &MrInner) -> bool;
    /// Invalidates the window through `rkey` (LOCAL_INV, SEND_WITH_INV delivered in this
    /// process): only a valid type 2 window of PD `pd` whose key matches.
    fn invalidate(&self, rkey: u32, pd: u32) -> bool;
}

/// What a key names.
#[derive(Clone)]
pub(crate) enum KeyTarget {
    Mr(Weak<MrInner>),
    Mw(Weak<dyn Window>),
}

struct KeySlot {
    byte: u8,
    target: Option<KeyTarget>,
}

pub(crate) struct KeyTable {
    tables: &'static Tables,
    slots: RwLock<Vec<KeySlot>>,
    free: Mutex<Vec<u32>>,
}

impl KeyTable {
    pub(crate) fn new(tables: &'static Tables) -> Self {
        // Index 0 is never handed out, so keys 0..=255 never name anything.
        KeyTable {
            tables,
            slots: RwLock::new(vec![KeySlot { byte: 0, target: None }]),
            free: Mutex::new(Vec::new()),
        }
    }

    /// Gives `target` a fresh key and publishes `desc` (with that key) in its record.
    pub(crate) fn insert(&self, target: KeyTarget, mut desc: KeyDesc) -> Result<u32> {
        let reuse = self.free.lock().expect("key table").pop();
        let mut slots = self.slots.write().expect("key table");
        let index = match reuse {
            Some(i) => i,
            None => {
                if slots.len() >= KEY_RECORDS {
                    return Err(Error::Exhausted { what: "memory keys" });
                }
                self.tables.reserve_key(slots.len() as u32)?;
                slots.push(KeySlot { byte: 0, target: None });
                slots.len() as u32 - 1
            }
        };
        let slot = &mut slots[index as usize];
        slot.byte = slot.byte.wrapping_add(1);
        slot.target = Some(target);
        let key = index << 8 | u32::from(slot.byte);
        desc.key = key;
        self.record(key).expect("index inside the table").write(&desc);
        Ok(key)
    }

    /// The shared record of `key`'s slot (whatever key it holds now).
    pub(crate) fn record(&self, key: u32) -> Option<&'static KeyRecord> {
        self.tables.key(key >> 8)
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
    /// matching, `new` (same index) starts. The record is rewritten by the caller.
    pub(crate) fn rekey(&self, old: u32, new: u32) {
        debug_assert_eq!(old >> 8, new >> 8);
        let mut slots = self.slots.write().expect("key table");
        if let Some(slot) = slots.get_mut((old >> 8) as usize) {
            if slot.byte == old as u8 {
                slot.byte = new as u8;
            }
        }
    }

    /// Frees `key`'s slot; its record stops granting anything.
    pub(crate) fn remove(&self, key: u32) {
        let mut slots = self.slots.write().expect("key table");
        if let Some(slot) = slots.get_mut((key >> 8) as usize) {
            if slot.byte == key as u8 && slot.target.take().is_some() {
                if let Some(r) = self.tables.key(key >> 8) {
                    r.write(&KeyDesc::default());
                    r.busy_local.store(0, Ordering::Release);
                    r.busy_remote.store(0, Ordering::Release);
                }
                self.free.lock().expect("key table").push(key >> 8);
            }
        }
    }

    /// The region named by `key`, if it is a live memory region.
    pub(crate) fn mr(&self, key: u32) -> Option<Arc<MrInner>> {
        let slots = self.slots.read().expect("key table");
        let slot = slots.get((key >> 8) as usize)?;
        match &slot.target {
            Some(KeyTarget::Mr(w)) if slot.byte == key as u8 => w.upgrade(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::tables::{KEY_KIND_MR, KEY_STATE_VALID};

    #[test]
    fn stale_and_rekeyed_keys_do_not_match() {
        let dir = std::env::temp_dir().join(format!("rverbs-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tables: &'static Tables = Box::leak(Box::new(Tables::create(&dir).unwrap()));
        let t = KeyTable::new(tables);
        let desc = KeyDesc { kind: KEY_KIND_MR, state: KEY_STATE_VALID, ..Default::default() };
        let k = t.insert(KeyTarget::Mr(Weak::new()), desc).unwrap();
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
        let k3 = t.insert(KeyTarget::Mr(Weak::new()), desc).unwrap();
        assert_eq!(k3 >> 8, k >> 8);
        assert_ne!(k3, k2);
        assert!(t.get(k2).is_none());
        assert_eq!(t.record(k3).unwrap().read().key, k3);
        t.remove(k3);
        assert_eq!(t.record(k3).unwrap().read().key, 0, "a freed slot's record grants nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
