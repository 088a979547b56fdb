//! How the device moves bytes in registered memory.
//!
//! Registered memory is shared with whoever else uses it: the application, other
//! threads polling it, peers. The device therefore never forms Rust references to it;
//! it copies with [`copy`], which
//! - writes the destination in increasing address order, 16 bytes at a time, with
//!   ordinary (not non-temporal, not fast-string) stores, so on x86-64 (TSO) a reader
//!   that sees byte `k` of a message also sees every byte before it. This is what lets
//!   `query_qp_data_in_order` answer WHOLE_MSG truthfully (ibv_query_qp_data_in_order(3)),
//!   and what the "poll the last byte" idiom of perftest and RDMA applications relies on;
//! - is written in inline assembly, outside the Rust abstract machine, so a copy that
//!   races an application's access to the same bytes produces unspecified bytes but no
//!   undefined behaviour — the semantics of a per-byte atomic memcpy.
//!
//! On other architectures the copy falls back to `ptr::copy_nonoverlapping`, whose order
//! is not guaranteed; [`ORDERED`] is then false and rverbs does not claim in-order
//! placement.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

/// Whether [`copy`] places bytes in increasing address order (see the module doc).
pub const ORDERED: bool = cfg!(all(target_arch = "x86_64", not(miri)));

/// Copies `len` bytes from `src` to `dst`, in increasing destination address order.
///
/// # Safety
/// `src..src+len` must be readable and `dst..dst+len` writable for the duration of the
/// call (memory of a live registration). The ranges may be accessed concurrently by
/// other threads or processes; overlapping ranges give unspecified contents.
#[inline]
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // SAFETY: forwarded from the caller's contract.
        unsafe { copy_x86_64(dst, src, len) }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::ptr::copy(src, dst, len) }
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
unsafe fn copy_x86_64(dst: *mut u8, src: *const u8, len: usize) {
    // 64 bytes per iteration with four unaligned SSE2 moves (baseline on x86-64), then
    // 16-byte steps, then single bytes. Stores are issued in address order.
    // SAFETY: the caller guarantees both ranges are valid for `len` bytes; the loop
    // touches exactly [src, src+len) and [dst, dst+len).
    unsafe {
        core::arch::asm!(
            "2:",
            "cmp {n}, 64",
            "jb 3f",
            "movdqu {a}, [{s}]",
            "movdqu {b}, [{s} + 16]",
            "movdqu {c}, [{s} + 32]",
            "movdqu {e}, [{s} + 48]",
            "movdqu [{d}], {a}",
            "movdqu [{d} + 16], {b}",
            "movdqu [{d} + 32], {c}",
            "movdqu [{d} + 48], {e}",
            "add {s}, 64",
            "add {d}, 64",
            "sub {n}, 64",
            "jmp 2b",
            "3:",
            "cmp {n}, 16",
            "jb 4f",
            "movdqu {a}, [{s}]",
            "movdqu [{d}], {a}",
            "add {s}, 16",
            "add {d}, 16",
            "sub {n}, 16",
            "jmp 3b",
            "4:",
            "test {n}, {n}",
            "jz 5f",
            "mov {t}, byte ptr [{s}]",
            "mov byte ptr [{d}], {t}",
            "inc {s}",
            "inc {d}",
            "dec {n}",
            "jmp 4b",
            "5:",
            s = inout(reg) src => _,
            d = inout(reg) dst => _,
            n = inout(reg) len => _,
            t = out(reg_byte) _,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            e = out(xmm_reg) _,
            options(nostack),
        );
    }
}

/// Writes `len` zero bytes at `dst` in increasing address order.
///
/// # Safety
/// As for [`copy`]: `dst..dst+len` must be writable.
pub unsafe fn zero(dst: *mut u8, len: usize) {
    const ZEROS: [u8; 256] = [0; 256];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(ZEROS.len());
        // SAFETY: within the caller's range; ZEROS is a valid source.
        unsafe { copy(dst.add(off), ZEROS.as_ptr(), n) };
        off += n;
    }
}

/// The 64-bit word at `addr` as an atomic.
///
/// # Safety
/// `addr` must be 8-byte aligned and point into memory valid for the lifetime `'a` that
/// is only ever accessed atomically or by the device's copies while in use.
pub unsafe fn atomic_u64<'a>(addr: usize) -> &'a AtomicU64 {
    debug_assert_eq!(addr % 8, 0);
    // SAFETY: forwarded from the caller's contract; AtomicU64 has the size and (given
    // the check) the alignment of u64.
    unsafe { &*(addr as *const AtomicU64) }
}

/// Executes an IBTA 64-bit atomic on host-endian memory (rxe `rxe_mr_do_atomic_op`
/// operates on host-order words) and returns the original value.
///
/// # Safety
/// As for [`atomic_u64`].
pub unsafe fn atomic_op(addr: usize, op: AtomicOp) -> u64 {
    // SAFETY: forwarded from the caller's contract.
    let word = unsafe { atomic_u64(addr) };
    match op {
        AtomicOp::FetchAdd(add) => word.fetch_add(add, Ordering::SeqCst),
        AtomicOp::CompareSwap { compare, swap } => {
            match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        }
        AtomicOp::Write(value) => word.swap(value, Ordering::SeqCst),
    }
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

    #[test]
    fn copy_moves_every_length_exactly() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 299] {
            for off in [0, 1, 7] {
                let mut dst = vec![0xAAu8; 320];
                // SAFETY: both ranges lie inside their vectors.
                unsafe { copy(dst.as_mut_ptr().add(off), src.as_ptr(), len) };
                assert_eq!(&dst[off..off + len], &src[..len], "len {len} off {off}");
                assert!(dst[..off].iter().all(|&b| b == 0xAA));
                assert!(dst[off + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }

    #[test]
    fn zero_clears_exactly() {
        let mut dst = vec![0xFFu8; 700];
        // SAFETY: inside the vector.
        unsafe { zero(dst.as_mut_ptr().add(3), 600) };
        assert!(dst[3..603].iter().all(|&b| b == 0));
        assert_eq!(dst[2], 0xFF);
        assert_eq!(dst[603], 0xFF);
    }

    #[test]
    fn atomics_return_original_value() {
        let cell = AtomicU64::new(5);
        let addr = &cell as *const AtomicU64 as usize;
        // SAFETY: `cell` is an aligned AtomicU64 alive for the test.
        unsafe {
            assert_eq!(atomic_op(addr, AtomicOp::FetchAdd(3)), 5);
            assert_eq!(atomic_op(addr, AtomicOp::CompareSwap { compare: 7, swap: 1 }), 8);
            assert_eq!(atomic_op(addr, AtomicOp::CompareSwap { compare: 8, swap: 1 }), 8);
            assert_eq!(atomic_op(addr, AtomicOp::Write(9)), 1);
        }
        assert_eq!(cell.load(Ordering::SeqCst), 9);
    }
}
