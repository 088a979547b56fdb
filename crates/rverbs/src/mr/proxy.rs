//! Target-assisted copies: how a peer's private memory is reached when the kernel
//! refuses cross-memory attach (Yama `ptrace_scope`, a non-dumpable process, missing
//! ptrace rights — detected per peer, see `shm::registry::Peer::cma`).
//!
//! The requester owns one channel per such peer: a segment `px-<peer ep>` in its own
//! endpoint directory holding a request header and a bounce buffer. It writes a request
//! (key, range, rights, and for a write the bytes), rings the peer's doorbell, and waits
//! on the header's `done` word (a futex shared between the processes). The peer's
//! progress thread checks the request against its own key table — it never touches
//! memory outside a region that grants the access — copies between the buffer and its
//! memory, and wakes the requester. Messages larger than the buffer move in pieces.
//!
//! This is the one place where the target's CPU works for a one-sided operation; it is
//! a fallback, used only for peers that cannot be reached otherwise. Regions the peer
//! registered in shared segments (library-allocated, or `RVERBS_SHARED_MR=1`) are still
//! reached directly.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::keyspace::{KeySpace, KeyUse, Place, ProxyRef};
use crate::shm::cma::CmaError;
use super::endpoint::Endpoint;
use crate::mem;
use crate::shm::registry::{bell, Peer};
use crate::shm::ShmSafe;
use rverbs_proto::verbs::Access;

/// Bytes one request moves at most.
const BUF: usize = 256 * 1024;
/// How long a requester waits for the peer to serve one request before giving up on it
/// (the request then counts as unanswered: RC retries, then RETRY_EXC_ERR).
const DEADLINE: Duration = Duration::from_secs(5);

const OP_WRITE: u32 = 1;
const OP_READ: u32 = 2;

const STATUS_OK: u32 = 0;
const STATUS_REFUSED: u32 = 1;

/// The request header at byte 0 of a channel segment.
#[repr(C, align(64))]
#[derive(Default)]
struct Request {
    /// Incremented by the requester for each request (the doorbell names the channel).
    seq: AtomicU32,
    /// Set to `seq` by the server when done; the requester sleeps on it.
    done: AtomicU32,
    op: AtomicU32,
    key: AtomicU32,
    pd: AtomicU32,
    /// `KeyUse`: 0 local, else remote for QP `qpn`.
    remote: AtomicU32,
    qpn: AtomicU32,
    need: AtomicU32,
    status: AtomicU32,
    _pad: AtomicU32,
    va: AtomicU64,
    len: AtomicU64,
}

// SAFETY: atomics only.
unsafe impl ShmSafe for Request {}

const HDR: usize = std::mem::size_of::<Request>();

/// The channel name in the requester's directory for peer `ep`.
fn channel_name(ep: u32) -> String {
    format!("px-{ep}")
}

/// Copies `n` bytes from this process's `src` into the peer memory `to` names.
pub(crate) fn write(to: ProxyRef<'_>, src: *const u8, n: usize) -> Result<(), CmaError> {
    transfer(to, OP_WRITE, src as usize, n)
}

/// Copies `n` bytes of the peer memory `from` names into this process's `dst`.
pub(crate) fn read(from: ProxyRef<'_>, dst: *mut u8, n: usize) -> Result<(), CmaError> {
    transfer(from, OP_READ, dst as usize, n)
}

fn transfer(r: ProxyRef<'_>, op: u32, local: usize, n: usize) -> Result<(), CmaError> {
    let peer = r.peer;
    if !peer.is_alive() {
        return Err(CmaError::Gone);
    }
    // This process's channel to the peer, in its own directory.
    let chan = peer.home_segment(&channel_name(peer.ep), HDR + BUF).map_err(|_| CmaError::Denied)?;
    let seg = chan.lock().expect("proxy channel");
    let req = seg.get::<Request>(0);
    let buf = seg.addr() + HDR;
    let mut off = 0;
    while off < n {
        let piece = (n - off).min(BUF);
        req.op.store(op, Ordering::Relaxed);
        req.key.store(r.key, Ordering::Relaxed);
        req.pd.store(r.pd, Ordering::Relaxed);
        let (remote, qpn) = match r.used {
            KeyUse::Local => (0, 0),
            KeyUse::Remote { qpn } => (1, qpn),
        };
        req.remote.store(remote, Ordering::Relaxed);
        req.qpn.store(qpn, Ordering::Relaxed);
        req.need.store(r.need.bits(), Ordering::Relaxed);
        req.va.store(r.va + off as u64, Ordering::Relaxed);
        req.len.store(piece as u64, Ordering::Relaxed);
        if op == OP_WRITE {
            // SAFETY: the source piece lies in memory the caller pinned or borrowed; the
            // destination is the channel's buffer, `BUF` bytes of our own mapping.
            unsafe { mem::copy(buf as *mut u8, (local + off) as *const u8, piece) }.map_err(|_| CmaError::Fault)?;
        }
        let seq = req.seq.load(Ordering::Relaxed).wrapping_add(1);
        req.seq.store(seq, Ordering::Release);
        peer.ring(bell::PROXY, peer.home_ep());
        wait_done(req, seq, peer)?;
        if req.status.load(Ordering::Acquire) != STATUS_OK {
            return Err(CmaError::Fault);
        }
        if op == OP_READ {
            // SAFETY: the destination piece lies in memory the caller pinned; the source
            // is the channel's buffer, which the peer filled before setting `done`.
            unsafe { mem::copy((local + off) as *mut u8, buf as *const u8, piece) }.map_err(|_| CmaError::Fault)?;
        }
        off += piece;
    }
    Ok(())
}

thread_local! {
    /// What this thread runs while it waits for a peer (see [`serve_while_waiting`]).
    static WHILE_WAITING: std::cell::Cell<Option<fn()>> = const { std::cell::Cell::new(None) };
}

/// Makes the calling thread run `serve` (which serves this process's own pending proxy
/// requests) while it waits for a peer's: the progress thread calls it when it starts,
/// as it both serves requests and may wait on a peer that waits on it.
pub(crate) fn serve_while_waiting(serve: fn()) {
    WHILE_WAITING.set(Some(serve));
}

/// Serves this process's own pending proxy requests if the calling thread is the
/// progress thread (what it runs while it waits for anything a peer may hold while
/// waiting on it: a proxied copy, the host-wide atomics lock).
pub(crate) fn serve_own_pending() {
    if let Some(serve) = WHILE_WAITING.get() {
        serve();
    }
}

/// Waits until the peer served request `seq`, serving this process's own pending
/// requests meanwhile if this is the progress thread (two progress threads retrying
/// towards each other must not wait on each other).
fn wait_done(req: &Request, seq: u32, peer: &Peer) -> Result<(), CmaError> {
    let start = Instant::now();
    loop {
        let done = req.done.load(Ordering::Acquire);
        if done == seq {
            return Ok(());
        }
        if !peer.is_alive() || start.elapsed() > DEADLINE {
            return Err(CmaError::Gone);
        }
        serve_own_pending();
        let ts = rustix::time::Timespec { tv_sec: 0, tv_nsec: 1_000_000 };
        let _ = rustix::thread::futex::wait(&req.done, rustix::thread::futex::Flags::empty(), done, Some(&ts));
    }
}

/// Serves the pending request of peer `ep`'s channel to this process's endpoint `me`
/// (the doorbell said there is one).
pub(crate) fn serve(me: &Endpoint, ep: u32) {
    let Some(reg) = me.reg.as_ref() else { return };
    let Ok(peer) = reg.peer(ep) else { return };
    let Ok(seg) = peer.segment(&channel_name(me.ep())) else { return };
    let req = seg.get::<Request>(0);
    let seq = req.seq.load(Ordering::Acquire);
    if req.done.load(Ordering::Acquire) == seq {
        return;
    }
    let words = RequestWords {
        op: req.op.load(Ordering::Relaxed),
        key: req.key.load(Ordering::Relaxed),
        pd: req.pd.load(Ordering::Relaxed),
        remote: req.remote.load(Ordering::Relaxed),
        qpn: req.qpn.load(Ordering::Relaxed),
        need: req.need.load(Ordering::Relaxed),
        va: req.va.load(Ordering::Relaxed),
        len: req.len.load(Ordering::Relaxed),
    };
    let status = match check_request(&words, seg.len()) {
        Some(c) => serve_one(me, &c, seg.addr() + HDR),
        None => STATUS_REFUSED,
    };
    req.status.store(status, Ordering::Relaxed);
    req.done.store(seq, Ordering::Release);
    let _ = rustix::thread::futex::wake(&req.done, rustix::thread::futex::Flags::empty(), u32::MAX);
}

/// The words of a request header as the serving process read them (another process
/// wrote them: any values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RequestWords {
    pub(crate) op: u32,
    pub(crate) key: u32,
    pub(crate) pd: u32,
    pub(crate) remote: u32,
    pub(crate) qpn: u32,
    pub(crate) need: u32,
    pub(crate) va: u64,
    pub(crate) len: u64,
}

/// A request that may be served: the copy's direction and the access to check against
/// the key table (which decides the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Into this process's memory (`OP_WRITE`), else out of it (`OP_READ`).
    pub(crate) write: bool,
    pub(crate) key: u32,
    pub(crate) pd: u32,
    pub(crate) used: KeyUse,
    pub(crate) need: Access,
    pub(crate) va: u64,
    pub(crate) len: usize,
}

/// Checks the request header `w` of a channel segment of `seg_len` bytes before anything
/// is touched: `None` (refused) for a length beyond the buffer, a segment too short to
/// hold the buffer, an unknown operation, or a write that asks for no right to write.
///
/// The request comes from another process: it is then checked like any access (the key
/// table, [`KeySpace::pin`]), so nothing outside a region that grants it is ever
/// touched, and nothing written without a right to write.
pub(crate) fn check_request(w: &RequestWords, seg_len: usize) -> Option<Checked> {
    let len = usize::try_from(w.len).ok().filter(|&l| l <= BUF && seg_len >= HDR + BUF)?;
    let write = match w.op {
        OP_WRITE => true,
        OP_READ => false,
        _ => return None,
    };
    let need = Access::from_bits_truncate(w.need);
    let writes = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    if write && !need.intersects(writes) {
        return None;
    }
    let used = if w.remote == 0 { KeyUse::Local } else { KeyUse::Remote { qpn: w.qpn } };
    Some(Checked { write, key: w.key, pd: w.pd, used, need, va: w.va, len })
}

/// Bytes of a channel segment: the header, then the buffer.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) const CHANNEL_BYTES: usize = HDR + BUF;

/// Bytes one request moves at most.
#[cfg(feature = "fuzzing")]
pub(crate) const MAX_PIECE: usize = BUF;

fn serve_one(me: &Endpoint, c: &Checked, buf: usize) -> u32 {
    let keys = KeySpace::local(me);
    let Ok(p) = keys.pin(c.key, c.pd, c.used, c.va, c.len as u64, c.need) else {
        return STATUS_REFUSED;
    };
    let Place::Local(at) = p.place else { return STATUS_REFUSED };
    let moved = if c.write {
        // SAFETY: `at` is `len` bytes of a pinned region of this process; `buf` is the
        // channel's buffer of at least `len` bytes (checked by `check_request`).
        unsafe { mem::copy(at as *mut u8, buf as *const u8, c.len) }
    } else {
        // SAFETY: as above, in the other direction.
        unsafe { mem::copy(buf as *mut u8, at as *const u8, c.len) }
    };
    // Registered memory this process unmapped is refused like a bad key (`fault.rs`).
    if moved.is_ok() { STATUS_OK } else { STATUS_REFUSED }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> RequestWords {
        RequestWords { op: OP_READ, key: 7, pd: 2, remote: 1, qpn: 9, need: Access::REMOTE_READ.bits(), va: 0x1000, len: 64 }
    }

    #[test]
    fn a_proxy_request_is_checked_before_anything_is_touched() {
        let ok = check_request(&words(), CHANNEL_BYTES).expect("a read within the buffer");
        assert_eq!(ok.used, KeyUse::Remote { qpn: 9 });
        assert_eq!((ok.write, ok.key, ok.pd, ok.va, ok.len), (false, 7, 2, 0x1000, 64));
        assert_eq!(check_request(&RequestWords { remote: 0, ..words() }, CHANNEL_BYTES).unwrap().used, KeyUse::Local);
        // A length beyond the buffer, or a segment that cannot hold the buffer.
        assert_eq!(check_request(&RequestWords { len: BUF as u64 + 1, ..words() }, CHANNEL_BYTES), None);
        assert_eq!(check_request(&RequestWords { len: u64::MAX, ..words() }, CHANNEL_BYTES), None);
        assert!(check_request(&RequestWords { len: BUF as u64, ..words() }, CHANNEL_BYTES).is_some());
        assert_eq!(check_request(&words(), CHANNEL_BYTES - 1), None);
        // Unknown operations; a write without a right to write.
        for op in [0, 3, u32::MAX] {
            assert_eq!(check_request(&RequestWords { op, ..words() }, CHANNEL_BYTES), None, "op {op}");
        }
        assert_eq!(check_request(&RequestWords { op: OP_WRITE, ..words() }, CHANNEL_BYTES), None);
        let w = RequestWords { op: OP_WRITE, need: Access::REMOTE_WRITE.bits(), ..words() };
        assert!(check_request(&w, CHANNEL_BYTES).unwrap().write);
    }
}
