//! Cross-memory attach: moving bytes to and from another process's memory with
//! process_vm_writev(2) / process_vm_readv(2), one system call per contiguous piece.
//!
//! This is how a peer reaches a region that lives in ordinary (private) memory of its
//! owner. The kernel checks the caller's right to access the target (ptrace access mode
//! "attach"); a refusal is reported as [`CmaError::Denied`] so the caller can fall back.
#![allow(unsafe_code)]

use rustix::io::Errno;

/// Why a cross-memory copy failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmaError {
    /// The target process is gone.
    Gone,
    /// The kernel refused access to the target (EPERM: ptrace rules, Yama, a
    /// non-dumpable target, seccomp).
    Denied,
    /// The target range is not mapped (EFAULT): the owner freed registered memory.
    Fault,
}

fn classify(e: Errno) -> CmaError {
    match e {
        Errno::SRCH => CmaError::Gone,
        Errno::PERM | Errno::ACCESS | Errno::NOSYS => CmaError::Denied,
        _ => CmaError::Fault,
    }
}

/// Copies `len` bytes from this process's `src` to `dst` in process `pid`.
///
/// # Safety
/// `src..src+len` must be readable memory of this process for the duration of the call.
pub(crate) unsafe fn write(pid: i32, dst: usize, src: *const u8, len: usize) -> Result<(), CmaError> {
    // SAFETY: forwarded from the caller's contract; process_vm_writev only reads the
    // local iovec.
    unsafe { transfer(libc::process_vm_writev, pid, src as *mut u8, dst, len) }
}

/// Copies `len` bytes from `src` in process `pid` to this process's `dst`.
///
/// # Safety
/// `dst..dst+len` must be writable memory of this process for the duration of the call
/// (it may be shared with others: the kernel writes it like any store).
pub(crate) unsafe fn read(pid: i32, dst: *mut u8, src: usize, len: usize) -> Result<(), CmaError> {
    // SAFETY: forwarded from the caller's contract.
    unsafe { transfer(libc::process_vm_readv, pid, dst, src, len) }
}

/// The signature of process_vm_readv(2) and process_vm_writev(2).
type VmCall = unsafe extern "C" fn(libc::pid_t, *const libc::iovec, libc::c_ulong, *const libc::iovec, libc::c_ulong, libc::c_ulong) -> isize;

/// Moves `len` bytes between `local` here and `remote` in `pid` with `call`, resuming
/// after partial transfers.
///
/// # Safety
/// `local..local+len` must be valid for the direction `call` moves bytes.
unsafe fn transfer(call: VmCall, pid: i32, local: *mut u8, remote: usize, len: usize) -> Result<(), CmaError> {
    let mut done = 0;
    while done < len {
        let l = libc::iovec { iov_base: local.wrapping_add(done).cast(), iov_len: len - done };
        let r = libc::iovec { iov_base: (remote + done) as *mut libc::c_void, iov_len: len - done };
        // SAFETY: one local iovec inside the caller's range and one remote iovec the
        // kernel checks against the target's address space; flags must be 0.
        let n = unsafe { call(pid, &l, 1, &r, 1, 0) };
        if n < 0 {
            return Err(classify(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))));
        }
        if n == 0 {
            return Err(CmaError::Fault);
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_within_this_process() {
        // process_vm_* on our own pid exercises the same code path as a peer's.
        let pid = std::process::id() as i32;
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut dst = vec![0u8; 10_000];
        // SAFETY: both buffers are live for the calls.
        unsafe {
            if let Err(e) = write(pid, dst.as_mut_ptr() as usize, src.as_ptr(), src.len()) {
                assert_eq!(e, CmaError::Denied, "only a sandbox that forbids the call may fail");
                return;
            }
        }
        assert_eq!(dst, src);
        let mut back = vec![0u8; 100];
        // SAFETY: as above.
        unsafe { read(pid, back.as_mut_ptr(), dst.as_ptr() as usize + 50, 100).unwrap() };
        assert_eq!(&back[..], &src[50..150]);
        // SAFETY: the remote address is unmapped: the kernel reports EFAULT.
        assert_eq!(unsafe { write(pid, 8, src.as_ptr(), 8) }, Err(CmaError::Fault));
    }
}
