//! How the device moves bytes in registered memory.
//!
//! Registered memory is shared with whoever else uses it: the application, other
//! threads polling it, peers. The device therefore never forms Rust references to it;
//! it copies with [`copy`], which
//! - writes the destination in increasing address order, 16 bytes at a time (32 bytes,
//!   aligned, for copies of 256 B and more on a CPU with AVX2), with
//!   ordinary (not non-temporal, not fast-string) stores, so on x86-64 (TSO) a reader
//!   that sees byte `k` of a message also sees every byte before it. This is what lets
//!   `query_qp_data_in_order` answer WHOLE_MSG truthfully (ibv_query_qp_data_in_order(3)),
//!   and what the "poll the last byte" idiom of perftest and RDMA applications relies on;
//! - is written in assembly (`fault.rs`), outside the Rust abstract machine, so a copy
//!   that races an application's access to the same bytes produces unspecified bytes but
//!   no undefined behaviour — the semantics of a per-byte atomic memcpy;
//! - returns [`Faulted`] instead of raising SIGSEGV or SIGBUS when the memory is gone
//!   (`fault.rs`), which the transports turn into an access error completion.
//!
//! On other architectures the copy falls back to `ptr::copy_nonoverlapping`, whose order
//! is not guaranteed; [`ORDERED`] is then false and rverbs does not claim in-order
//! placement.
#![allow(unsafe_code)]

pub use crate::fault::Faulted;
use crate::fault::Rmw;

/// Whether [`copy`] places bytes in increasing address order (see the module doc).
pub const ORDERED: bool = crate::fault::GUARDED;

/// Copies `len` bytes from `src` to `dst`, in increasing destination address order.
/// A fault in either range (memory the application unmapped or protected after
/// registering it, a file page past the end of its file) ends the copy with
/// [`Faulted`] instead of a signal (`fault.rs`).
///
/// # Safety
/// The ranges must not overlap, and no Rust reference may cover them while the copy
/// runs; they may be accessed concurrently by other threads or processes, which gives
/// unspecified bytes.
#[inline]
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Faulted> {
    // SAFETY: forwarded from the caller's contract.
    unsafe { crate::fault::copy(dst, src, len) }
}

/// Executes an IBTA 64-bit atomic on host-endian memory (rxe `rxe_mr_do_atomic_op`
/// operates on host-order words) and returns the original value, or [`Faulted`] when the
/// word is no longer mapped (as [`copy`]).
///
/// # Safety
/// `addr` must be 8-byte aligned, and the word accessed only atomically or by the
/// device's copies while in use.
pub unsafe fn atomic_op(addr: usize, op: AtomicOp) -> Result<u64, Faulted> {
    let rmw = match op {
        AtomicOp::FetchAdd(add) => Rmw::FetchAdd(add),
        AtomicOp::CompareSwap { compare, swap } => Rmw::CompareSwap { compare, swap },
        AtomicOp::Write(value) => Rmw::Swap(value),
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { crate::fault::rmw(addr, rmw) }
}

/// Loads the aligned 64-bit word at `addr` atomically, or [`Faulted`].
///
/// # Safety
/// As for [`atomic_op`].
pub unsafe fn load_u64(addr: usize) -> Result<u64, Faulted> {
    // SAFETY: forwarded from the caller's contract.
    unsafe { crate::fault::load(addr) }
}

/// A remote atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Add and return the original value.
    FetchAdd(u64),
    /// Replace with `swap` if equal to `compare`; return the original value.
    CompareSwap {
        /// The value compared with.
        compare: u64,
        /// The value stored on equality.
        swap: u64,
    },
    /// Store unconditionally (ATOMIC_WRITE).
    Write(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn copy_moves_every_length_exactly() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 299] {
            for off in [0, 1, 7] {
                let mut dst = vec![0xAAu8; 320];
                // SAFETY: both ranges lie inside their vectors.
                unsafe { copy(dst.as_mut_ptr().add(off), src.as_ptr(), len) }.unwrap();
                assert_eq!(&dst[off..off + len], &src[..len], "len {len} off {off}");
                assert!(dst[..off].iter().all(|&b| b == 0xAA));
                assert!(dst[off + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }

    #[test]
    fn atomics_return_original_value() {
        let cell = AtomicU64::new(5);
        let addr = &cell as *const AtomicU64 as usize;
        // SAFETY: `cell` is an aligned AtomicU64 alive for the test.
        unsafe {
            assert_eq!(atomic_op(addr, AtomicOp::FetchAdd(3)), Ok(5));
            assert_eq!(atomic_op(addr, AtomicOp::CompareSwap { compare: 7, swap: 1 }), Ok(8));
            assert_eq!(atomic_op(addr, AtomicOp::CompareSwap { compare: 8, swap: 1 }), Ok(8));
            assert_eq!(atomic_op(addr, AtomicOp::Write(9)), Ok(1));
        }
        assert_eq!(cell.load(Ordering::SeqCst), 9);
    }
}
