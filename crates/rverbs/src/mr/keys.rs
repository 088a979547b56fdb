//! The device's table of memory keys.
//!
//! key = index << 8 | key byte. The index names a slot; the key byte must match the
//! slot's current byte, so a stale key of a freed and reused slot, or the old key of a
//! rebound memory window, does not match (like hardware key tags).
//!
//! Each slot has two halves: here, the Rust objects the key names (for this process's
//! own verbs: binds, local invalidation, keeping regions alive); in the endpoint's
//! shared tables, the [`KeyRecord`] every access checks — this process's and its peers'.
//!
//! Any process of the user can write the shared half. The addresses in it decide where
//! this process's own device accesses land, so the table also keeps, in this process's
//! memory, a keyed fingerprint of what it last wrote in each record ([`KeyTable::publish`]):
//! an access through this process's own keys goes ahead only if the record still
//! matches it ([`KeyTable::vouches`]). A record rewritten by another process then fails
//! as a bad key instead of moving the device's writes outside the registered region.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, Result};
use crate::mr::MrInner;
use crate::shm::tables::{KeyDesc, KeyRecord, Tables, ACCESS_COUNT_LOCAL, KEY_RECORDS};

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
    /// process): only a valid type 2 window of PD `pd` whose key matches; once it
    /// returns `true`, no access through the window is in progress either.
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
    /// Per key index, the fingerprint of the record this process last wrote (module
    /// doc); process memory, committed as indices are used.
    written: Box<[AtomicU64]>,
    /// The fingerprint's key: random per process, so another process cannot forge a
    /// record that matches.
    secret: u64,
    /// Per key index, how many times this process has written the record: a requester's
    /// memo of a record it vouched for holds while this count has not moved
    /// (`mr::keyspace::KeyMemo`); process memory, as `written`.
    writes: Box<[AtomicU64]>,
}

/// `n` zeroed atomics, allocated zeroed (calloc: large allocations are committed only
/// as they are touched).
fn zeroed_words(n: usize) -> Box<[AtomicU64]> {
    let words = vec![0u64; n].into_boxed_slice();
    let len = words.len();
    let p = Box::into_raw(words).cast::<AtomicU64>();
    // SAFETY: AtomicU64 has the same size, alignment and bit validity as u64 (its
    // documentation), so the allocation of `len` u64s is one of `len` AtomicU64s, and the
    // box owns it as before.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) }
}

impl KeyTable {
    pub(crate) fn new(tables: &'static Tables) -> Self {
        // Index 0 is never handed out, so keys 0..=255 never name anything.
        use std::hash::{BuildHasher, Hasher};
        let secret = std::collections::hash_map::RandomState::new().build_hasher().finish();
        KeyTable {
            tables,
            slots: RwLock::new(vec![KeySlot { byte: 0, target: None }]),
            free: Mutex::new(Vec::new()),
            written: zeroed_words(KEY_RECORDS),
            secret,
            writes: zeroed_words(KEY_RECORDS),
        }
    }

    /// The fingerprint of the fields of `d` that say where its bytes are and which key
    /// names them, and of whether this process's accesses to them are counted
    /// ([`ACCESS_COUNT_LOCAL`], in the kind's word: kinds are small). Each step is a
    /// bijection of the running value, so two descriptors that differ in one field never
    /// share a fingerprint.
    fn fingerprint(&self, d: &KeyDesc) -> u64 {
        let mut h = self.secret;
        let kind = u64::from(d.kind | (d.access & ACCESS_COUNT_LOCAL));
        for w in [u64::from(d.key) | kind << 32, d.iova, d.len, d.va, d.loc, d.seg_off, u64::from(d.mr_index)] {
            h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
        }
        h
    }

    /// Writes `d` into the shared record of index `index` (this process's own), keeping
    /// its fingerprint, and counts the write. Every write of this process's key records
    /// goes through here (the state word alone aside: a region closed or retired, a
    /// window invalidated; every access reads that word from the record again).
    pub(crate) fn publish(&self, index: u32, d: &KeyDesc) {
        let Some(rec) = self.tables.key(index) else { return };
        self.written[index as usize].store(self.fingerprint(d), Ordering::Release);
        // Counted before the record is written too: an access that sees the record's new
        // state (stored last, sequentially consistent) sees the count moved, and drops the
        // memo it checked before (`KeySpace::pin_held`: a region re-registered to other
        // memory between the memo's check and the access).
        self.writes[index as usize].fetch_add(1, Ordering::SeqCst);
        rec.write(d);
        // And once it is written: a reader that sees the new count reads the new record
        // (or a newer one, whose count it will see move next time).
        self.writes[index as usize].fetch_add(1, Ordering::AcqRel);
    }

    /// How many times this process has written the record of index `index`
    /// ([`KeyTable::publish`]); `u64::MAX` for an index out of the table (never a
    /// count, so never remembered).
    #[inline]
    pub(crate) fn writes(&self, index: u32) -> u64 {
        self.writes.get(index as usize).map_or(u64::MAX, |w| w.load(Ordering::Acquire))
    }

    /// Whether `d`, read from the shared record of index `index`, is what this process
    /// wrote there (module doc).
    pub(crate) fn vouches(&self, index: u32, d: &KeyDesc) -> bool {
        self.written.get(index as usize).is_some_and(|w| w.load(Ordering::Acquire) == self.fingerprint(d))
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
        self.publish(index, &desc);
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
                    self.publish(key >> 8, &KeyDesc::default());
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
