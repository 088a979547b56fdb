//! A fault in memory the device touches becomes an error, never a signal.
//!
//! A NIC reaches registered memory through pages the kernel pinned at registration
//! (ibv_reg_mr(3)); when the application later unmaps them, the NIC still writes the old
//! pages and the process never faults. rverbs reaches registered memory with the CPU,
//! so an application that unmaps or `mprotect`s registered memory, a file under a
//! registration that shrinks, or a tmpfs that runs out of pages would turn a device
//! access into SIGSEGV or SIGBUS — for an RDMA WRITE from another host, in the progress
//! thread, on the word of a remote peer.
//!
//! Every device access to memory that can vanish therefore runs in one of the routines
//! below, written in assembly between two labels. A handler for SIGSEGV and SIGBUS,
//! installed once ([`arm`]), looks at the interrupted instruction: inside those labels
//! it resumes the routine at its fault exit, which returns [`Faulted`] (the kernel's
//! `copy_from_user` and its exception table work the same way); anywhere else it hands
//! the signal to whatever handler was installed before, so the program's own handling
//! (and the default crash) is unchanged. The caller turns `Faulted` into the access
//! error a NIC reports for a region it cannot reach (IBV_WC_LOC_PROT_ERR locally,
//! a remote access error for a peer).
//!
//! The routines are leaf functions that do not touch the stack, so resuming at the fault
//! exit with the interrupted stack pointer returns to the caller normally.
//!
//! Shared segments (`shm`) are files other processes of the user can open, and one of
//! them can truncate a file under our mapping: the next access to a page past the new
//! end raises SIGBUS, wherever it is. The handler also knows the segments this process
//! mapped ([`watch`]): a SIGBUS inside one replaces the whole segment with zero-filled
//! private memory, marks it poisoned ([`poisoned`]) and lets the access run again. The
//! process then sees a segment of zeros — no QP, no key, an empty ring — so the peer's
//! objects fail as if they were gone, and the process keeps serving the others (the
//! technique Wayland compositors use for client buffers that shrink).
//!
//! On architectures other than x86-64 the routines are plain copies and atomics, and a
//! fault stays a signal ([`GUARDED`] is false); registration still refuses memory that
//! is not mapped with the access asked (`mr::pages`).
#![allow(unsafe_code)]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Once;

/// Whether faults inside the device's accesses are caught (x86-64 Linux).
pub const GUARDED: bool = cfg!(all(target_arch = "x86_64", target_os = "linux", not(miri)));

/// The access touched memory that is not there (unmapped, protected, or a file page
/// beyond the end of its file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faulted;

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
mod imp {
    // The guarded routines. System V calling convention: arguments in rdi, rsi, rdx,
    // rcx; result in eax; rax, rcx, rdx, rsi, rdi, r8-r11 and xmm0-xmm3 are the
    // caller's to lose. None of them touches the stack.
    //
    // rverbs_guard_copy(dst, src, len) -> 0 | 1
    //   stores the destination in increasing address order, 64 then 16 bytes at a time
    //   with unaligned SSE2 moves, then at most one 8-byte move, then single bytes (ordinary stores: on x86-64 a
    //   reader that sees byte k also sees every byte before it, mem.rs).
    // rverbs_guard_copy_avx2(dst, src, len) -> 0 | 1 (only on a CPU with AVX2)
    //   the same order at twice the width (`copy` calls it for copies of 256 B and more):
    //   below 256 bytes it is rverbs_guard_copy; else single bytes until the destination is 32-byte aligned,
    //   then 128 bytes at a time with aligned 32-byte stores (none splits across a cache
    //   line; from 64 KiB on with a PREFETCHW of the destination 512 bytes ahead), then vzeroupper and rverbs_guard_copy for the rest (< 128 bytes). Its
    //   fault exit is rverbs_guard_fixup_avx2 (vzeroupper first), chosen by the handler
    //   for a fault between rverbs_guard_avx2_begin and rverbs_guard_avx2_end.
    // rverbs_guard_fadd(addr, add, out) / rverbs_guard_swap(addr, value, out)
    // rverbs_guard_cas(addr, compare, swap, out) -> 0 | 1
    //   a locked 64-bit operation; the original value is stored at *out.
    // rverbs_guard_load(addr, out) -> 0 | 1
    //   a 64-bit load (aligned: atomic on x86-64).
    std::arch::global_asm!(
        ".pushsection .text.rverbs_guard,\"ax\",@progbits",
        ".p2align 4",
        ".globl rverbs_guard_begin",
        ".hidden rverbs_guard_begin",
        "rverbs_guard_begin:",
        ".globl rverbs_guard_copy",
        ".hidden rverbs_guard_copy",
        "rverbs_guard_copy:",
        "2:",
        "cmp rdx, 64",
        "jb 3f",
        "movdqu xmm0, [rsi]",
        "movdqu xmm1, [rsi + 16]",
        "movdqu xmm2, [rsi + 32]",
        "movdqu xmm3, [rsi + 48]",
        "movdqu [rdi], xmm0",
        "movdqu [rdi + 16], xmm1",
        "movdqu [rdi + 32], xmm2",
        "movdqu [rdi + 48], xmm3",
        "add rsi, 64",
        "add rdi, 64",
        "sub rdx, 64",
        "jmp 2b",
        "3:",
        "cmp rdx, 16",
        "jb 4f",
        "movdqu xmm0, [rsi]",
        "movdqu [rdi], xmm0",
        "add rsi, 16",
        "add rdi, 16",
        "sub rdx, 16",
        "jmp 3b",
        "4:",
        "cmp rdx, 8",
        "jb 6f",
        "mov rcx, qword ptr [rsi]",
        "mov qword ptr [rdi], rcx",
        "add rsi, 8",
        "add rdi, 8",
        "sub rdx, 8",
        "6:",
        "test rdx, rdx",
        "jz 5f",
        "mov cl, byte ptr [rsi]",
        "mov byte ptr [rdi], cl",
        "inc rsi",
        "inc rdi",
        "dec rdx",
        "jmp 6b",
        "5:",
        "xor eax, eax",
        "ret",
        ".globl rverbs_guard_avx2_begin",
        ".hidden rverbs_guard_avx2_begin",
        "rverbs_guard_avx2_begin:",
        ".globl rverbs_guard_copy_avx2",
        ".hidden rverbs_guard_copy_avx2",
        "rverbs_guard_copy_avx2:",
        "cmp rdx, 256",
        "jb rverbs_guard_copy",
        "7:",
        "test dil, 31",
        "jz 8f",
        "mov cl, byte ptr [rsi]",
        "mov byte ptr [rdi], cl",
        "inc rsi",
        "inc rdi",
        "dec rdx",
        "jmp 7b",
        // From 64 KiB on, each 128 bytes also asks for the destination's lines 512
        // bytes ahead, for writing (PREFETCHW: a hint, which never faults and changes no
        // byte), so that the lines arrive before their stores do.
        "cmp rdx, 65536",
        "jb 8f",
        "10:",
        "prefetchw byte ptr [rdi + 512]",
        "prefetchw byte ptr [rdi + 576]",
        "vmovdqu ymm0, ymmword ptr [rsi]",
        "vmovdqu ymm1, ymmword ptr [rsi + 32]",
        "vmovdqu ymm2, ymmword ptr [rsi + 64]",
        "vmovdqu ymm3, ymmword ptr [rsi + 96]",
        "vmovdqa ymmword ptr [rdi], ymm0",
        "vmovdqa ymmword ptr [rdi + 32], ymm1",
        "vmovdqa ymmword ptr [rdi + 64], ymm2",
        "vmovdqa ymmword ptr [rdi + 96], ymm3",
        "add rsi, 128",
        "add rdi, 128",
        "sub rdx, 128",
        "cmp rdx, 128",
        "jae 10b",
        "8:",
        "cmp rdx, 128",
        "jb 9f",
        "vmovdqu ymm0, ymmword ptr [rsi]",
        "vmovdqu ymm1, ymmword ptr [rsi + 32]",
        "vmovdqu ymm2, ymmword ptr [rsi + 64]",
        "vmovdqu ymm3, ymmword ptr [rsi + 96]",
        "vmovdqa ymmword ptr [rdi], ymm0",
        "vmovdqa ymmword ptr [rdi + 32], ymm1",
        "vmovdqa ymmword ptr [rdi + 64], ymm2",
        "vmovdqa ymmword ptr [rdi + 96], ymm3",
        "add rsi, 128",
        "add rdi, 128",
        "sub rdx, 128",
        "jmp 8b",
        "9:",
        "vzeroupper",
        "jmp rverbs_guard_copy",
        // Where the handler resumes the AVX2 copy that faulted.
        ".globl rverbs_guard_fixup_avx2",
        ".hidden rverbs_guard_fixup_avx2",
        "rverbs_guard_fixup_avx2:",
        "vzeroupper",
        "mov eax, 1",
        "ret",
        ".globl rverbs_guard_avx2_end",
        ".hidden rverbs_guard_avx2_end",
        "rverbs_guard_avx2_end:",
        ".globl rverbs_guard_fadd",
        ".hidden rverbs_guard_fadd",
        "rverbs_guard_fadd:",
        "lock xadd qword ptr [rdi], rsi",
        "mov qword ptr [rdx], rsi",
        "xor eax, eax",
        "ret",
        ".globl rverbs_guard_swap",
        ".hidden rverbs_guard_swap",
        "rverbs_guard_swap:",
        "xchg qword ptr [rdi], rsi",
        "mov qword ptr [rdx], rsi",
        "xor eax, eax",
        "ret",
        ".globl rverbs_guard_cas",
        ".hidden rverbs_guard_cas",
        "rverbs_guard_cas:",
        "mov rax, rsi",
        "lock cmpxchg qword ptr [rdi], rdx",
        "mov qword ptr [rcx], rax",
        "xor eax, eax",
        "ret",
        ".globl rverbs_guard_load",
        ".hidden rverbs_guard_load",
        "rverbs_guard_load:",
        "mov rax, qword ptr [rdi]",
        "mov qword ptr [rsi], rax",
        "xor eax, eax",
        "ret",
        // Where the handler resumes a routine that faulted.
        ".globl rverbs_guard_fixup",
        ".hidden rverbs_guard_fixup",
        "rverbs_guard_fixup:",
        "mov eax, 1",
        "ret",
        ".globl rverbs_guard_end",
        ".hidden rverbs_guard_end",
        "rverbs_guard_end:",
        ".popsection",
    );

    // rverbs_watch_trampoline: where a thread resumes after a fault that the sanitizer's
    // read watch wants reported (`super::ReadWatch`), on the thread's own stack rather
    // than the signal handler's (an alternate signal stack, as Rust threads have, is a
    // few KiB: too small to symbolize a backtrace). The handler made the interrupted
    // context look as if the faulting instruction had called it: below the red zone,
    // at R = rsp - 136, the faulting rip; at R - 64 and R - 72 the two arguments of the
    // report. It saves every register the called code may change (the general ones the
    // ABI lets a callee clobber, the flags, and the x87/SSE/AVX/AVX-512 state with xsave), calls
    // `rverbs_watch_report(a, b)`, restores them and returns to the faulting instruction
    // with `ret 128`, which leaves rsp as it was. Its CFI describes that frame (a
    // signal frame: the faulting pc is exact), so a backtrace taken in the report
    // unwinds into the program's frames.
    std::arch::global_asm!(
        ".pushsection .text.rverbs_watch,\"ax\",@progbits",
        ".p2align 4",
        ".globl rverbs_watch_trampoline",
        ".hidden rverbs_watch_trampoline",
        "rverbs_watch_trampoline:",
        ".cfi_startproc",
        ".cfi_signal_frame",
        ".cfi_def_cfa rsp, 136",
        ".cfi_offset rip, -136",
        "push rbp",
        ".cfi_def_cfa rsp, 144",
        ".cfi_offset rbp, -144",
        "mov rbp, rsp",
        ".cfi_def_cfa_register rbp",
        "sub rsp, 80",
        "pushfq",
        "push rax",
        "push rcx",
        "push rdx",
        "push rsi",
        "push rdi",
        "push r8",
        "push r9",
        "push r10",
        "push r11",
        "cld",
        "mov [rbp - 80], rsp",
        "and rsp, -64",
        "sub rsp, 8192",
        "lea rdi, [rsp + 512]",
        "xor eax, eax",
        "mov ecx, 8",
        "rep stosq",
        // The state components saved: x87, SSE, AVX and the three of AVX-512 (XCR0
        // bits 0-2 and 5-7, mask 0xE7), the registers compiled code may use. Their
        // standard-format area ends at byte 2688, inside the 8 KiB reserved above.
        // Not every enabled component: with AMX (bits 17-18, 8 KiB of tile data at
        // offset 2816) the whole area is 11 008 bytes, and saving it all wrote past the
        // reservation over the saved registers (a SIGSEGV in every report on such CPUs).
        "mov eax, 0xe7",
        "xor edx, edx",
        "xsave64 [rsp]",
        "mov rdi, [rbp - 56]",
        "mov rsi, [rbp - 64]",
        "call {report}",
        "mov eax, 0xe7",
        "xor edx, edx",
        "xrstor64 [rsp]",
        "mov rsp, [rbp - 80]",
        "pop r11",
        "pop r10",
        "pop r9",
        "pop r8",
        "pop rdi",
        "pop rsi",
        "pop rdx",
        "pop rcx",
        "pop rax",
        "popfq",
        "mov rsp, rbp",
        "pop rbp",
        ".cfi_def_cfa rsp, 136",
        "ret 128",
        ".cfi_endproc",
        ".popsection",
        report = sym watch_report,
    );

    /// Called by the trampoline on the faulting thread's stack.
    extern "C" fn watch_report(a: u64, b: u64) {
        let f = super::WATCH_REPORT.load(std::sync::atomic::Ordering::Acquire);
        if f != 0 {
            // SAFETY: only `set_read_watch` stores here, a `WatchReport`.
            let f: super::WatchReport = unsafe { std::mem::transmute::<usize, super::WatchReport>(f) };
            f(a, b);
        }
    }

    extern "C" {
        fn rverbs_watch_trampoline();
        fn rverbs_guard_begin();
        fn rverbs_guard_fixup();
        fn rverbs_guard_avx2_begin();
        fn rverbs_guard_fixup_avx2();
        fn rverbs_guard_avx2_end();
        fn rverbs_guard_end();
        pub(super) fn rverbs_guard_copy(dst: *mut u8, src: *const u8, len: usize) -> u32;
        pub(super) fn rverbs_guard_copy_avx2(dst: *mut u8, src: *const u8, len: usize) -> u32;
        pub(super) fn rverbs_guard_fadd(addr: *mut u64, add: u64, out: *mut u64) -> u32;
        pub(super) fn rverbs_guard_swap(addr: *mut u64, value: u64, out: *mut u64) -> u32;
        pub(super) fn rverbs_guard_cas(addr: *mut u64, compare: u64, swap: u64, out: *mut u64) -> u32;
        pub(super) fn rverbs_guard_load(addr: *const u64, out: *mut u64) -> u32;
    }

    /// The handlers that were installed before ours, one per signal (SIGSEGV, SIGBUS);
    /// written once by `install` before ours is installed, read by the handler.
    static mut PREVIOUS: [std::mem::MaybeUninit<libc::sigaction>; 2] =
        [std::mem::MaybeUninit::zeroed(), std::mem::MaybeUninit::zeroed()];

    fn slot(sig: libc::c_int) -> usize {
        usize::from(sig == libc::SIGBUS)
    }

    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let begin = rverbs_guard_begin as *const () as usize;
        let end = rverbs_guard_end as *const () as usize;
        if sig == libc::SIGSEGV {
            // SAFETY: the kernel passes a valid siginfo for a synchronous SIGSEGV.
            let addr = unsafe { (*info).si_addr() } as usize;
            if super::wait_out_move(addr) {
                return; // the store runs again, on the moved pages
            }
        }
        let uc = ctx.cast::<libc::ucontext_t>();
        // SAFETY: the kernel passes the interrupted context of this thread (SA_SIGINFO).
        let rip = unsafe { &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] };
        let pc = *rip as usize;
        if sig == libc::SIGSEGV {
            let watch = super::READ_WATCH.load(std::sync::atomic::Ordering::Acquire);
            if watch != 0 {
                // SAFETY: as above; bit 1 of the page fault's error code is set for a write.
                let write = unsafe { (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] } & 2 != 0;
                // SAFETY: as above.
                let addr = unsafe { (*info).si_addr() } as usize;
                // SAFETY: only `set_read_watch` stores here, a `ReadWatch`.
                let f: super::ReadWatch = unsafe { std::mem::transmute::<usize, super::ReadWatch>(watch) };
                match f(addr, write, (begin..end).contains(&pc)) {
                    super::WatchSays::NotOurs => {}
                    super::WatchSays::Again => return, // the access runs again, on the pages given back
                    super::WatchSays::Report(a, b) => {
                        // The report runs on this thread's stack, then the access again
                        // (the trampoline above; it gives the pages back).
                        // SAFETY: as above.
                        let rsp = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] } as usize;
                        let r = rsp - 136;
                        // SAFETY: below the interrupted code's red zone on its own stack,
                        // which it no longer uses: what a call from there would write.
                        unsafe {
                            *(r as *mut u64) = *rip as u64;
                            *((r - 64) as *mut u64) = a;
                            *((r - 72) as *mut u64) = b;
                            (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] = r as i64;
                        }
                        *rip = rverbs_watch_trampoline as *const () as usize as i64;
                        return;
                    }
                }
            }
        }
        if (begin..end).contains(&pc) {
            let avx2 = rverbs_guard_avx2_begin as *const () as usize..rverbs_guard_avx2_end as *const () as usize;
            let fixup = if avx2.contains(&pc) { rverbs_guard_fixup_avx2 as *const () } else { rverbs_guard_fixup as *const () };
            *rip = fixup as usize as i64;
            return;
        }
        if sig == libc::SIGBUS {
            // SAFETY: the kernel passes a valid siginfo for a synchronous SIGBUS.
            let addr = unsafe { (*info).si_addr() } as usize;
            if super::replace_truncated(addr) {
                return;
            }
        }
        // Not ours: what the program had before decides.
        // SAFETY: written before our handler was installed and never again.
        let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS))[slot(sig)].assume_init_ref() };
        let handler = prev.sa_sigaction;
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // Restore it and return: the instruction faults again and the default action
            // (a core dump) happens at the faulting instruction, as without rverbs.
            // SAFETY: sigaction is async-signal-safe; `prev` is a valid sigaction.
            unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the program installed this three-argument handler for `sig`.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx);
        } else {
            // SAFETY: the program installed this one-argument handler for `sig`.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(sig);
        }
    }

    pub(super) fn install() {
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: plain sigaction calls with valid, zero-initialised structures;
            // PREVIOUS is written here before the handler that reads it is installed,
            // and `install` runs once (`arm`'s `Once`).
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_fault as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut act.sa_mask);
                let prev = (*std::ptr::addr_of_mut!(PREVIOUS))[slot(sig)].as_mut_ptr();
                libc::sigaction(sig, std::ptr::null(), prev);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    }
}

/// The segments this process has mapped, for the SIGBUS handler: `(start, len,
/// poisoned)` per slot, `start == 0` when free. Read by a signal handler, so only
/// atomics; the table is zero-filled static memory, committed as slots are used.
const WATCH_SLOTS: usize = 1 << 15;
struct Watched {
    start: std::sync::atomic::AtomicUsize,
    len: std::sync::atomic::AtomicUsize,
    poisoned: std::sync::atomic::AtomicBool,
}
#[allow(clippy::declare_interior_mutable_const)]
const FREE: Watched = Watched {
    start: std::sync::atomic::AtomicUsize::new(0),
    len: std::sync::atomic::AtomicUsize::new(0),
    poisoned: std::sync::atomic::AtomicBool::new(false),
};
static WATCHED: [Watched; WATCH_SLOTS] = [FREE; WATCH_SLOTS];
static WATCH_HINT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// A slot's `start` while its owner fills it: no mapping starts at address 1.
const CLAIMING: usize = 1;

/// A segment mapping known to the SIGBUS handler (module doc); `None` when the table is
/// full (the segment is then unprotected: a truncation stays a SIGBUS).
#[derive(Debug)]
pub(crate) struct Watch(Option<usize>);

/// Makes the mapping `[start, start + len)` known to the SIGBUS handler until the
/// returned [`Watch`] is given to [`unwatch`], which must happen before it is unmapped.
pub(crate) fn watch(start: usize, len: usize) -> Watch {
    let from = WATCH_HINT.load(Ordering::Relaxed);
    for k in 0..WATCH_SLOTS {
        let i = (from + k) % WATCH_SLOTS;
        let w = &WATCHED[i];
        // Claim the slot (CLAIMING: no handler looks at it), then fill it, then publish
        // its start: a handler that reads a real start (Acquire) sees the length and the
        // flag, and two threads can never fill one slot.
        if w.start.compare_exchange(0, CLAIMING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            w.len.store(len, Ordering::Relaxed);
            w.poisoned.store(false, Ordering::Relaxed);
            w.start.store(start, Ordering::Release);
            WATCH_HINT.store(i + 1, Ordering::Relaxed);
            return Watch(Some(i));
        }
    }
    Watch(None)
}

/// Forgets a mapping (before it is unmapped).
pub(crate) fn unwatch(w: &Watch) {
    if let Some(i) = w.0 {
        WATCHED[i].start.store(0, Ordering::Release);
    }
}

/// Whether a truncation by another process replaced the segment with zeros.
pub(crate) fn poisoned(w: &Watch) -> bool {
    w.0.is_some_and(|i| WATCHED[i].poisoned.load(Ordering::Acquire))
}

/// The SIGBUS handler's part: if `addr` is inside a watched segment, maps zero-filled
/// private memory over the whole segment and marks it poisoned. Async-signal-safe:
/// atomics and one mmap system call.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
fn replace_truncated(addr: usize) -> bool {
    for w in &WATCHED {
        let start = w.start.load(Ordering::Acquire);
        if start == 0 || start == CLAIMING {
            continue;
        }
        let len = w.len.load(Ordering::Relaxed);
        if addr < start || addr - start >= len {
            continue;
        }
        // SAFETY: replaces exactly the segment's own mapping, which this process made
        // and still holds (unwatch precedes munmap); no other mapping is affected.
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        w.poisoned.store(true, Ordering::Release);
        return true;
    }
    false
}

/// The page range being moved (`mr::share`: onto a file, or back to private memory),
/// `(start, len)`, start 0 when none. Moves are one at a time; during one the range is
/// read-only, and a store to it by any thread of this process (the application's, the
/// device's) faults and waits here until the move is done, then runs again on the new
/// pages: no store is lost to the move (docs/memory.md, "Shareable registrations").
static MOVING_START: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static MOVING_LEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The thread that moves: a fault of its own in the range is not waited out (it would
/// wait for itself) but handled as any other.
static MOVER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Marks `[start, start+len)` as being moved by this thread (before it is made
/// read-only); [`moved`] ends it. Only where [`GUARDED`] (the handler that waits exists).
pub(crate) fn moving(start: usize, len: usize) {
    // SAFETY: gettid has no arguments and cannot fail.
    MOVER.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    MOVING_LEN.store(len, Ordering::Relaxed);
    MOVING_START.store(start, Ordering::Release);
}

/// Moves recently done: a store that faulted during one may reach the handler only
/// after it ended (the thread was descheduled in between); it then runs again too. A
/// fault there that is not the move's (the application protected the memory since)
/// faults again, and after [`LATE_RETRIES`] such retries of that move goes to the
/// program's handler as before. `(start, len, retries)`, written under the mover's lock.
const RECENT_MOVES: usize = 64;
const LATE_RETRIES: u32 = 64;
#[allow(clippy::declare_interior_mutable_const)]
const NO_MOVE: (std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicU32) =
    (std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicU32::new(0));
static RECENT: [(std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicU32); RECENT_MOVES] =
    [NO_MOVE; RECENT_MOVES];
static RECENT_NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The move [`moving`] announced is done: stores that waited run again.
pub(crate) fn moved() {
    let (start, len) = (MOVING_START.load(Ordering::Relaxed), MOVING_LEN.load(Ordering::Relaxed));
    let r = &RECENT[RECENT_NEXT.fetch_add(1, Ordering::Relaxed) % RECENT_MOVES];
    r.0.store(0, Ordering::Release);
    r.1.store(len, Ordering::Relaxed);
    r.2.store(0, Ordering::Relaxed);
    r.0.store(start, Ordering::Release);
    MOVING_START.store(0, Ordering::Release);
}

/// The SIGSEGV handler's part: if `addr` is inside the range being moved, waits until
/// the move is done and says so (the faulting instruction then runs again).
/// Async-signal-safe: atomics and sched_yield.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
fn wait_out_move(addr: usize) -> bool {
    let start = MOVING_START.load(Ordering::Acquire);
    if start == 0 || addr < start || addr - start >= MOVING_LEN.load(Ordering::Relaxed) {
        // A move that ended between the fault and now.
        return RECENT.iter().any(|r| {
            let s = r.0.load(Ordering::Acquire);
            s != 0 && addr >= s && addr - s < r.1.load(Ordering::Relaxed) && r.2.fetch_add(1, Ordering::Relaxed) < LATE_RETRIES
        });
    }
    // SAFETY: gettid has no arguments and is async-signal-safe.
    if unsafe { libc::gettid() } == MOVER.load(Ordering::Relaxed) {
        return false;
    }
    while MOVING_START.load(Ordering::Acquire) == start {
        // SAFETY: sched_yield has no arguments and is async-signal-safe.
        unsafe { libc::sched_yield() };
    }
    true
}

/// What the sanitizer's watch of receive buffers says of a fault ([`ReadWatch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchSays {
    /// Not on a page it protected.
    NotOurs,
    /// On one: it was given back, the access runs again.
    Again,
    /// On one, and to be reported: [`WatchReport`] is called with these two values on
    /// the faulting thread's own stack (it gives the pages back), then the access runs
    /// again.
    Report(u64, u64),
}

/// The sanitizer's watch of receive buffers (sanitizer `early`): given a fault's
/// address, whether it was a store, and whether it was inside a guarded routine, says
/// what to do. Called in the signal handler: async-signal-safe.
pub(crate) type ReadWatch = fn(usize, bool, bool) -> WatchSays;
/// The report of a [`WatchSays::Report`], called outside the signal handler.
pub(crate) type WatchReport = fn(u64, u64);
static READ_WATCH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static WATCH_REPORT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Installs the sanitizer's [`ReadWatch`] and its report (once its first page is
/// protected; only where [`GUARDED`]).
pub(crate) fn set_read_watch(f: ReadWatch, report: WatchReport) {
    WATCH_REPORT.store(report as usize, Ordering::Release);
    READ_WATCH.store(f as usize, Ordering::Release);
}

/// Whether this thread is moving pages now ([`moving`]): its faults are the move's.
pub(crate) fn moving_here() -> bool {
    // SAFETY: gettid has no arguments and is async-signal-safe.
    MOVING_START.load(Ordering::Acquire) != 0 && unsafe { libc::gettid() } == MOVER.load(Ordering::Relaxed)
}

static ARMED: Once = Once::new();

/// Installs the SIGSEGV/SIGBUS handler that turns faults inside the guarded routines
/// into [`Faulted`] (once per process; a no-op where [`GUARDED`] is false). Called when
/// a device first opens, before any registered memory is touched. A program that later
/// installs its own handler for these signals should chain to the one it replaces, as
/// sanitizers and language runtimes do; otherwise a fault stays a signal.
pub fn arm() {
    ARMED.call_once(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
        imp::install();
    });
}

fn result(code: u32) -> Result<(), Faulted> {
    if code == 0 {
        Ok(())
    } else {
        Err(Faulted)
    }
}

/// Copies `len` bytes from `src` to `dst`, storing the destination in increasing
/// address order (mem.rs); a fault on either side ends the copy with [`Faulted`], the
/// bytes before it copied.
///
/// # Safety
/// The ranges must not overlap, and must not be memory whose contents Rust code holds
/// references to (they may be accessed concurrently by other threads or processes, which
/// gives unspecified bytes, not undefined behaviour). They need not be mapped.
#[inline]
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Faulted> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    {
        // Copies of 256 B and more at twice the width where the CPU has it: in the
        // core's caches that is up to 1.8 times the speed (4 KiB; BENCHMARKS.md, "The
        // ordered copy at twice the width"); from 64 KiB on, with the destination
        // prefetched for writing, at `memcpy`'s speed up to 4 MiB (BENCHMARKS.md, "Large
        // copies at memcpy's speed"). The feature check is a cached load.
        if len >= 256 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as below; the CPU (and the OS, which saves the YMM state) supports
            // AVX2, checked just above.
            return result(unsafe { imp::rverbs_guard_copy_avx2(dst, src, len) });
        }
        // SAFETY: the routine touches exactly [src, src+len) and [dst, dst+len); a
        // fault there resumes at its fault exit (module doc). Forwarded contract.
        result(unsafe { imp::rverbs_guard_copy(dst, src, len) })
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
    {
        // SAFETY: forwarded from the caller's contract (unguarded here: module doc).
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }
}

/// A 64-bit atomic read-modify-write at `addr`, guarded as [`copy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rmw {
    /// Add and return the original value.
    FetchAdd(u64),
    /// Store and return the original value.
    Swap(u64),
    /// Store `swap` if the word equals `compare`; return the original value.
    CompareSwap {
        /// The value compared with.
        compare: u64,
        /// The value stored on equality.
        swap: u64,
    },
}

/// Executes `op` atomically (sequentially consistent) on the aligned word at `addr` and
/// returns its original value, or [`Faulted`] if the word is not there.
///
/// # Safety
/// `addr` must be 8-byte aligned, and the word accessed only atomically (or by the
/// device's copies) while in use; it need not be mapped.
pub unsafe fn rmw(addr: usize, op: Rmw) -> Result<u64, Faulted> {
    debug_assert_eq!(addr % 8, 0);
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    {
        let mut out = 0u64;
        let p = addr as *mut u64;
        // SAFETY: a locked operation on the aligned word, guarded (module doc); `out` is
        // a local.
        let code = unsafe {
            match op {
                Rmw::FetchAdd(a) => imp::rverbs_guard_fadd(p, a, &mut out),
                Rmw::Swap(v) => imp::rverbs_guard_swap(p, v, &mut out),
                Rmw::CompareSwap { compare, swap } => imp::rverbs_guard_cas(p, compare, swap, &mut out),
            }
        };
        result(code).map(|()| out)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
    {
        // SAFETY: forwarded from the caller's contract; AtomicU64 has u64's size and,
        // aligned, its alignment.
        let word = unsafe { &*(addr as *const AtomicU64) };
        Ok(match op {
            Rmw::FetchAdd(a) => word.fetch_add(a, Ordering::SeqCst),
            Rmw::Swap(v) => word.swap(v, Ordering::SeqCst),
            Rmw::CompareSwap { compare, swap } => {
                match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        })
    }
}

/// Loads the aligned word at `addr` atomically, or [`Faulted`].
///
/// # Safety
/// As for [`rmw`].
pub unsafe fn load(addr: usize) -> Result<u64, Faulted> {
    debug_assert_eq!(addr % 8, 0);
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    {
        let mut out = 0u64;
        // SAFETY: an aligned 64-bit load (atomic on x86-64), guarded; `out` is a local.
        let code = unsafe { imp::rverbs_guard_load(addr as *const u64, &mut out) };
        result(code).map(|()| out)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
    {
        // SAFETY: as in `rmw`.
        Ok(unsafe { &*(addr as *const AtomicU64) }.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous mapping of `pages` pages whose page `hole` is unmapped.
    fn with_hole(pages: usize, hole: usize) -> (usize, usize) {
        let page = rustix::param::page_size();
        // SAFETY: a fresh private anonymous mapping; then unmapping one page of it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                pages * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap((p as usize + hole * page) as *mut libc::c_void, page), 0);
            (p as usize, page)
        }
    }

    #[test]
    fn a_copy_into_or_out_of_unmapped_memory_is_an_error_not_a_signal() {
        if !GUARDED {
            return;
        }
        arm();
        let (base, page) = with_hole(3, 1);
        let buf = vec![7u8; 2 * page];
        // Into the hole, starting in the mapped page before it: the bytes before the
        // hole are written, then the fault ends the copy.
        // SAFETY: the ranges do not overlap; the hole is what is tested.
        let r = unsafe { copy((base + page - 100) as *mut u8, buf.as_ptr(), 300) };
        assert_eq!(r, Err(Faulted));
        // SAFETY: the first page is mapped and ours.
        let before = unsafe { std::slice::from_raw_parts((base + page - 100) as *const u8, 64) };
        assert!(before.iter().all(|&b| b == 7), "bytes before the hole are copied");
        let mut out = vec![0u8; page];
        // SAFETY: as above, out of the hole.
        assert_eq!(unsafe { copy(out.as_mut_ptr(), (base + page) as *const u8, 8) }, Err(Faulted));
        // Mapped memory still copies afterwards (the handler stays armed).
        // SAFETY: the third page is mapped.
        assert_eq!(unsafe { copy(out.as_mut_ptr(), (base + 2 * page) as *const u8, 64) }, Ok(()));
        // SAFETY: unmapping what `with_hole` mapped.
        unsafe {
            libc::munmap(base as *mut libc::c_void, page);
            libc::munmap((base + 2 * page) as *mut libc::c_void, page);
        }
    }

    #[test]
    fn every_length_and_offset_copies_exactly_its_bytes() {
        arm();
        // Lengths that end in each step of the routine (64, 16, 8 and 1 bytes at a time),
        // at offsets that leave every alignment; nothing outside the range changes.
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
        for off in 0..9 {
            for len in 0..=200 {
                let mut dst = vec![0xeeu8; 300];
                // SAFETY: both ranges are inside their vectors and do not overlap.
                assert_eq!(unsafe { copy(dst.as_mut_ptr().add(off), src.as_ptr().add(off), len) }, Ok(()));
                assert_eq!(&dst[off..off + len], &src[off..off + len], "off {off} len {len}");
                assert!(dst[..off].iter().chain(&dst[off + len..]).all(|&b| b == 0xee), "off {off} len {len}");
            }
        }
        // Large copies (the AVX2 routine where the CPU has it): every head before the
        // destination is 32-byte aligned, and tails that end in each step of the rest.
        let src: Vec<u8> = (0..700u32).map(|i| (i * 13 + 5) as u8).collect();
        for off in 0..40 {
            for len in (250..=300).chain(500..=640) {
                let mut dst = vec![0xeeu8; 700];
                // SAFETY: both ranges are inside their vectors and do not overlap.
                assert_eq!(unsafe { copy(dst.as_mut_ptr().add(off), src.as_ptr().add(off / 3), len) }, Ok(()));
                assert_eq!(&dst[off..off + len], &src[off / 3..off / 3 + len], "off {off} len {len}");
                assert!(dst[..off].iter().chain(&dst[off + len..]).all(|&b| b == 0xee), "off {off} len {len}");
            }
        }
        if GUARDED {
            // A fault in the 8-byte step: 12 bytes whose last 4 are in the hole.
            let (base, page) = with_hole(2, 1);
            let buf = [9u8; 12];
            // SAFETY: the start is mapped, the hole is what is tested.
            assert_eq!(unsafe { copy((base + page - 4) as *mut u8, buf.as_ptr(), 12) }, Err(Faulted));
            // SAFETY: unmapping what `with_hole` mapped.
            unsafe { libc::munmap(base as *mut libc::c_void, page) };
        }
    }

    #[test]
    fn a_large_copy_that_faults_midway_keeps_the_bytes_before_and_copies_again() {
        if !GUARDED {
            return;
        }
        arm();
        // Three pages, the third unmapped: a copy of two and a half pages from 100 bytes
        // into the first runs the wide loop into the hole (the AVX2 routine where the CPU
        // has it).
        let (base, page) = with_hole(4, 2);
        let src: Vec<u8> = (0..3 * page).map(|i| (i % 251) as u8).collect();
        // SAFETY: the ranges do not overlap; the hole is what is tested.
        let r = unsafe { copy((base + 100) as *mut u8, src.as_ptr(), 2 * page + page / 2) };
        assert_eq!(r, Err(Faulted));
        // SAFETY: the first two pages are mapped and ours.
        let before = unsafe { std::slice::from_raw_parts((base + 100) as *const u8, 2 * page - 100 - 128) };
        assert_eq!(before, &src[..2 * page - 100 - 128], "bytes before the hole are copied");
        // Out of the hole (the source side faults), then large and small copies again.
        let mut out = vec![0u8; 2 * page];
        // SAFETY: as above.
        assert_eq!(unsafe { copy(out.as_mut_ptr(), (base + page) as *const u8, 2 * page) }, Err(Faulted));
        // SAFETY: the last page is mapped; `out` is ours.
        unsafe {
            assert_eq!(copy(out.as_mut_ptr(), src.as_ptr(), 2 * page), Ok(()));
            assert_eq!(&out[..], &src[..2 * page]);
            assert_eq!(copy(out.as_mut_ptr(), (base + 3 * page) as *const u8, 64), Ok(()));
            libc::munmap(base as *mut libc::c_void, 2 * page);
            libc::munmap((base + 3 * page) as *mut libc::c_void, page);
        }
    }

    #[test]
    fn copies_from_64_kib_on_move_every_byte_and_stop_at_a_hole() {
        // The prefetching loop (64 KiB and more, the AVX2 routine where the CPU has it):
        // heads before a 32-byte aligned destination, tails in each step of the rest.
        let big = 64 << 10;
        let src: Vec<u8> = (0..big + 1024).map(|i| (i % 253) as u8).collect();
        for off in [0, 1, 17, 31, 32, 33] {
            for len in [big, big + 1, big + 127, big + 128, big + 200, big + 511] {
                let mut dst = vec![0xeeu8; big + 1100];
                // SAFETY: both ranges are inside their vectors and do not overlap.
                assert_eq!(unsafe { copy(dst.as_mut_ptr().add(off), src.as_ptr().add(off / 2), len) }, Ok(()));
                assert!(dst[off..off + len] == src[off / 2..off / 2 + len], "off {off} len {len}");
                assert!(dst[..off].iter().chain(&dst[off + len..]).all(|&b| b == 0xee), "off {off} len {len}");
            }
        }
        if !GUARDED {
            return;
        }
        arm();
        let page = rustix::param::page_size();
        let pages = big / page + 2;
        // A copy that ends right before an unmapped page: the prefetches ahead of it (a
        // hint) reach into the hole without a fault.
        let (base, _) = with_hole(pages + 1, pages);
        let from: Vec<u8> = (0..pages * page).map(|i| (i % 249) as u8).collect();
        // SAFETY: `[base, base + pages * page)` is mapped and ours; `from` does not overlap it.
        unsafe {
            assert_eq!(copy(base as *mut u8, from.as_ptr(), pages * page), Ok(()));
            assert!(std::slice::from_raw_parts(base as *const u8, pages * page) == &from[..]);
        }
        // One that runs into it: the bytes before the hole are copied, then Faulted.
        // SAFETY: as above; the hole is what is tested.
        let r = unsafe { copy((base + 64) as *mut u8, from.as_ptr(), pages * page) };
        assert_eq!(r, Err(Faulted));
        // SAFETY: the mapped part before the hole.
        let before = unsafe { std::slice::from_raw_parts((base + 64) as *const u8, pages * page - 64 - 128) };
        assert!(before == &from[..pages * page - 64 - 128], "bytes before the hole are copied");
        // SAFETY: unmapping what `with_hole` mapped (the pages before the hole, the one after).
        unsafe {
            libc::munmap(base as *mut libc::c_void, pages * page);
            libc::munmap((base + (pages + 1) * page) as *mut libc::c_void, page);
        }
    }

    #[test]
    fn atomics_on_unmapped_memory_fault_cleanly() {
        // (Their values on mapped memory: mem.rs, `atomics_return_original_value`.)
        arm();
        if GUARDED {
            let (base, page) = with_hole(2, 1);
            // SAFETY: the word is in the unmapped page: that is the test.
            unsafe {
                assert_eq!(rmw(base + page, Rmw::FetchAdd(1)), Err(Faulted));
                assert_eq!(rmw(base + page, Rmw::CompareSwap { compare: 0, swap: 1 }), Err(Faulted));
                assert_eq!(rmw(base + page, Rmw::Swap(1)), Err(Faulted));
                assert_eq!(load(base + page), Err(Faulted));
                libc::munmap(base as *mut libc::c_void, page);
            }
        }
    }

    #[test]
    fn a_read_only_page_faults_a_write_but_not_a_read() {
        if !GUARDED {
            return;
        }
        arm();
        let page = rustix::param::page_size();
        // SAFETY: a fresh private mapping made read-only, then accessed through the
        // guarded routines only.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            assert_ne!(p, libc::MAP_FAILED);
            let mut out = [1u8; 16];
            assert_eq!(copy(out.as_mut_ptr(), p as *const u8, 16), Ok(()));
            assert_eq!(out, [0u8; 16]);
            assert_eq!(copy(p as *mut u8, out.as_ptr(), 16), Err(Faulted));
            libc::munmap(p, page);
        }
    }
}
