//! The registry of live C objects: which addresses this library handed to C, per kind,
//! and not yet destroyed.
//!
//! Rule (docs/capi.md): a pointer C passes in is looked up here *before* anything
//! is read through it, so a foreign pointer (another library's object, a smaller
//! allocation, garbage) or the pointer of a destroyed object is refused without being
//! dereferenced. Every object is [`insert`]ed once it is fully built, before its
//! address is returned to C, and [`remove`]d before it is freed (so a second destroy of
//! the same pointer, even a concurrent one, finds nothing).
//!
//! The read side ([`contains`]) is on the data path (`ibv_post_send`, `ibv_poll_cq`
//! recover their objects through it) and takes no lock and writes nothing: one table per
//! [`Kind`], a power-of-two array of 64-byte buckets of eight `AtomicUsize` slots (0 =
//! free); an address lives in the bucket its hash selects, so a lookup reads one cache
//! line. Writers (create/destroy verbs) serialise on one mutex. Removal frees the slot in
//! place (no tombstones); a full bucket makes the writer build a table twice as large,
//! copy every address and publish it with one pointer store. Readers that loaded the old
//! table may still be reading it, so replaced tables are never freed: they are leaked,
//! and as tables only grow (each twice the last) the leak is bounded by the size of the
//! largest table.
//!
//! The tables are process memory, so a child that `fork` creates inherits its parent's
//! entries, as it inherits the objects themselves (the capi keeps no per-generation
//! state of its own: objects created before `fork` stay usable as memory in the child,
//! as before this registry existed).

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The kinds of C object this library hands out; each has a table of its own, so a
/// pointer of one kind passed where another is expected is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `struct ibv_context` (the address of the `ibv_context` inside the `verbs_context`).
    Context,
    /// `struct ibv_pd`.
    Pd,
    /// `struct ibv_mr`.
    Mr,
    /// `struct ibv_mw`.
    Mw,
    /// `struct ibv_comp_channel`.
    CompChannel,
    /// `struct ibv_cq` / `ibv_cq_ex`.
    Cq,
    /// `struct ibv_qp` / `ibv_qp_ex`.
    Qp,
    /// `struct ibv_srq`.
    Srq,
    /// `struct ibv_ah`.
    Ah,
    /// `struct ibv_xrcd`.
    Xrcd,
    /// `struct ibv_td`.
    Td,
    /// `struct ibv_dm`.
    Dm,
    /// `struct rdma_event_channel`.
    CmChannel,
    /// `struct rdma_cm_id`.
    CmId,
    /// `struct rdma_cm_event`.
    CmEvent,
}

const KINDS: usize = Kind::CmEvent as usize + 1;

/// Slots per bucket: eight words, one cache line.
const SLOTS: usize = 8;

#[repr(C, align(64))]
struct Bucket([AtomicUsize; SLOTS]);

struct Table {
    /// log2 of the number of buckets.
    bits: u32,
    buckets: Box<[Bucket]>,
}

impl Table {
    fn new(bits: u32) -> Table {
        let buckets = (0..1usize << bits)
            .map(|_| Bucket([const { AtomicUsize::new(0) }; SLOTS]))
            .collect();
        Table { bits, buckets }
    }

    /// The bucket index of `addr`: Fibonacci hashing of the address without its
    /// alignment bits; the top `bits` bits of the product select the bucket.
    fn index(&self, addr: usize) -> usize {
        let h = ((addr as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - self.bits)) as usize
    }

    fn bucket(&self, addr: usize) -> &Bucket {
        &self.buckets[self.index(addr)]
    }

    fn contains(&self, addr: usize) -> bool {
        // `get`, not `bucket`'s index: no panic path, so that a C entry point may look an
        // object up outside its panic guard (`rverbs_poll_cq`'s empty poll). The bucket is
        // always there (the hash's top `bits` bits index `2^bits` buckets).
        self.buckets
            .get(self.index(addr))
            .is_some_and(|b| b.0.iter().any(|s| s.load(Ordering::Relaxed) == addr))
    }

    /// Stores `addr` in a free slot of its bucket; false if the bucket is full.
    fn put(&self, addr: usize) -> bool {
        let b = self.bucket(addr);
        match b.0.iter().find(|s| s.load(Ordering::Relaxed) == 0) {
            Some(s) => {
                s.store(addr, Ordering::Release);
                true
            }
            None => false,
        }
    }
}

/// The initial table: 8 buckets (64 slots, 512 bytes), allocated on first insert.
const FIRST_BITS: u32 = 3;

static TABLES: [AtomicPtr<Table>; KINDS] = [const { AtomicPtr::new(core::ptr::null_mut()) }; KINDS];

/// Serialises every insert and remove (of every kind).
static WRITER: Mutex<()> = Mutex::new(());

fn table(kind: Kind) -> Option<&'static Table> {
    let p = TABLES[kind as usize].load(Ordering::Acquire);
    // SAFETY: a non-null table pointer comes from Box::leak in `insert` and is never
    // freed.
    unsafe { p.as_ref() }
}

/// Whether `addr` is a live object of `kind` (NULL never is). Reads nothing through
/// `addr`; lock-free.
pub fn contains<T>(kind: Kind, addr: *const T) -> bool {
    let addr = addr as usize;
    addr != 0 && table(kind).is_some_and(|t| t.contains(addr))
}

/// Records `addr` as a live object of `kind`. Call once the object is fully built and
/// before its address reaches C.
pub fn insert<T>(kind: Kind, addr: *const T) {
    let addr = addr as usize;
    debug_assert_ne!(addr, 0);
    let _g = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let cur = table(kind);
    if cur.is_some_and(|t| t.put(addr)) {
        return;
    }
    // No table yet, or the bucket is full: publish a larger table holding every live
    // address plus this one. The old one stays allocated for readers still in it.
    let mut bits = cur.map_or(FIRST_BITS, |t| t.bits + 1);
    loop {
        let next = Table::new(bits);
        let old = cur.into_iter().flat_map(|t| t.buckets.iter()).flat_map(|b| b.0.iter());
        let fits = old
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&a| a != 0)
            .chain([addr])
            .all(|a| next.put(a));
        if fits {
            let next = Box::leak(Box::new(next));
            TABLES[kind as usize].store(next, Ordering::Release);
            return;
        }
        // A bucket of `next` overflowed: try twice as many (`next`, never published, is
        // dropped; the copy starts again from the current table).
        bits += 1;
    }
}

/// Forgets `addr` as an object of `kind`; true if it was live. Call before freeing the
/// object: whoever gets `true` is the one that may free it.
pub fn remove<T>(kind: Kind, addr: *const T) -> bool {
    let addr = addr as usize;
    if addr == 0 {
        return false;
    }
    let _g = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(t) = table(kind) else { return false };
    match t.bucket(addr).0.iter().find(|s| s.load(Ordering::Relaxed) == addr) {
        Some(s) => {
            s.store(0, Ordering::Release);
            true
        }
        None => false,
    }
}

/// A C object of this library: a `#[repr(C)]` struct whose first field is the C struct
/// whose address C holds, handed to C as a leaked `Box<Self>` and registered under
/// [`Object::KIND`].
///
/// # Safety
/// Implement only for such types: every address registered under `KIND` must be that
/// of a `Box<Self>` not yet freed (see [`register`]).
pub unsafe trait Object: Sized {
    /// The table the objects of this type are registered in.
    const KIND: Kind;
}

/// Registers the object at `obj` (a `Box<T>` leaked by its create verb, fully built)
/// before its address is returned to C.
pub fn register<T: Object>(obj: *mut T) {
    insert(T::KIND, obj);
}

/// The live `T` behind `p` (a pointer to its C struct), or `None` for NULL, a foreign
/// pointer, an object of another kind or a destroyed one: refused without reading
/// anything through `p`.
///
/// # Safety
/// `p` may be any pointer; if it names a live `T`, the caller does not destroy that
/// object while the returned reference is used.
pub unsafe fn get<'a, T: Object, C>(p: *const C) -> Option<&'a T> {
    if !contains(T::KIND, p) {
        return None;
    }
    // SAFETY: the table of T::KIND holds only addresses of `Box<T>`s not yet freed
    // (`Object`'s contract), whose C struct is at offset 0; the caller keeps it alive
    // while the reference is used.
    Some(unsafe { &*p.cast::<T>() })
}

/// Destroys the live `T` behind `p`: takes it out of the registry first (no later
/// [`get`] reaches it, and of two racing destroys only one frees), then frees it.
/// Returns false if `p` was not a live `T`.
///
/// # Safety
/// The caller gives up the object: no reference to it obtained through [`get`] is used
/// after this call.
pub unsafe fn free<T: Object, C>(p: *mut C) -> bool {
    if !remove(T::KIND, p) {
        return false;
    }
    // SAFETY: registered, so a leaked `Box<T>` (`Object`'s contract); removed above by
    // this call alone, so freed once.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test uses a kind no other unit test of this crate inserts, with addresses
    // that are never real objects (the tables are process-wide).

    #[test]
    fn insert_contains_remove() {
        let a = 0x1000_0040usize as *const u8;
        assert!(!contains(Kind::Mw, a));
        insert(Kind::Mw, a);
        assert!(contains(Kind::Mw, a));
        // Another kind's table does not hold it.
        assert!(!contains(Kind::Ah, a));
        assert!(remove(Kind::Mw, a));
        assert!(!contains(Kind::Mw, a));
        // A second remove finds nothing: only one destroyer frees.
        assert!(!remove(Kind::Mw, a));
        assert!(!contains(Kind::Mw, core::ptr::null::<u8>()));
        assert!(!remove(Kind::Mw, core::ptr::null::<u8>()));
    }

    #[test]
    fn growth_keeps_every_address() {
        let addrs: Vec<*const u8> =
            (1..=5000usize).map(|i| (0x7f00_0000_0000 + i * 64) as *const u8).collect();
        for &a in &addrs {
            insert(Kind::CmEvent, a);
        }
        let t = table(Kind::CmEvent).expect("a table");
        assert!(t.bits > FIRST_BITS, "5000 addresses cannot fit the first table");
        assert!(addrs.iter().all(|&a| contains(Kind::CmEvent, a)));
        assert!(!contains(Kind::CmEvent, 0x7f00_0000_0008usize as *const u8));
        for &a in addrs.iter().step_by(2) {
            assert!(remove(Kind::CmEvent, a));
        }
        for (i, &a) in addrs.iter().enumerate() {
            assert_eq!(contains(Kind::CmEvent, a), i % 2 == 1, "address {i}");
        }
        // Freed slots are reused: re-inserting the removed half does not grow the table.
        for &a in addrs.iter().step_by(2) {
            insert(Kind::CmEvent, a);
        }
        assert_eq!(table(Kind::CmEvent).expect("a table").bits, t.bits);
        assert!(addrs.iter().all(|&a| contains(Kind::CmEvent, a)));
        for &a in &addrs {
            assert!(remove(Kind::CmEvent, a));
        }
    }
}
