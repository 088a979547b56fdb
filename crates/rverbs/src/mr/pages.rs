//! Registration checks the pages of caller memory as the kernel's pinning does.
//!
//! Rule: ibv_reg_mr(3) fails with `EFAULT` when the range is not memory the process can
//! access: the kernel pins every page of it (`ib_umem_get`), for writing when the access
//! flags let the device write (LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or MW_BIND, the
//! kernel's `ib_access_writable`), and the pin fails on a hole, on `PROT_NONE` memory, on
//! read-only memory asked for writing and on a file page past the end of its file.
//!
//! rverbs asks the kernel the same question with `madvise(MADV_POPULATE_READ |
//! MADV_POPULATE_WRITE)` (Linux 5.14): it faults every page in as a read or a write
//! would, and fails where such an access would raise a signal. Like pinning, it commits
//! the pages (a write population breaks copy-on-write sharing, as a writable pin does).
//! On a kernel without it, the mappings in `/proc/self/maps` are checked for the
//! permission instead (a page past the end of a file is then not detected: the device's
//! accesses still fail cleanly, `fault.rs`).

use rverbs_proto::verbs::Access;

const MADV_POPULATE_READ: i32 = 22;
const MADV_POPULATE_WRITE: i32 = 23;

/// Why the range cannot be registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NotMapped;

/// Whether `access` lets the device write the region (the kernel's `ib_access_writable`).
pub(crate) fn writable(access: Access) -> bool {
    access.intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC | Access::MW_BIND)
}

/// Checks that every page of `[addr, addr + len)` is mapped readable, and writable when
/// `write`, faulting the pages in (module doc). `len` is non-zero and the range does not
/// wrap (the caller checked both).
pub(crate) fn check(addr: usize, len: usize, write: bool) -> Result<(), NotMapped> {
    let page = rustix::param::page_size();
    let start = addr & !(page - 1);
    let end = (addr + len).div_ceil(page) * page;
    match populate(start, end - start, write) {
        Ok(()) => Ok(()),
        Err(None) => check_maps(start, end, write),
        Err(Some(_)) => Err(NotMapped),
    }
}

/// `Err(None)` when the kernel has no MADV_POPULATE_*.
fn populate(start: usize, len: usize, write: bool) -> Result<(), Option<i32>> {
    let advice = if write { MADV_POPULATE_WRITE } else { MADV_POPULATE_READ };
    loop {
        #[allow(unsafe_code)]
        // SAFETY: madvise with a populate advice only faults pages in (as an access by
        // the program would); it never changes the contents or the mappings.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        match e {
            libc::EINTR | libc::EAGAIN => continue,
            libc::EINVAL if !populate_known() => return Err(None),
            e => return Err(Some(e)),
        }
    }
}

/// Whether this kernel knows MADV_POPULATE_READ (an EINVAL on a fresh readable page
/// means it does not).
fn populate_known() -> bool {
    static KNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KNOWN.get_or_init(|| {
        let page = rustix::param::page_size();
        #[allow(unsafe_code)]
        // SAFETY: a fresh private anonymous page, populated, then unmapped.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            if p == libc::MAP_FAILED {
                return true;
            }
            let r = libc::madvise(p, page, MADV_POPULATE_READ);
            libc::munmap(p, page);
            r == 0
        }
    })
}

/// The fallback: every byte of `[start, end)` lies in mappings with the permission.
fn check_maps(start: usize, end: usize, write: bool) -> Result<(), NotMapped> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|_| NotMapped)?;
    let mut covered = start;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if b <= covered || a > covered {
            continue;
        }
        let p = perms.as_bytes();
        if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return Err(NotMapped);
        }
        covered = b;
        if covered >= end {
            return Ok(());
        }
    }
    Err(NotMapped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn map(pages: usize, prot: i32) -> usize {
        let page = rustix::param::page_size();
        // SAFETY: a fresh private anonymous mapping at an address the kernel chooses.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), pages * page, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    #[allow(unsafe_code)]
    fn unmap(addr: usize, pages: usize) {
        // SAFETY: unmapping pages this test mapped.
        unsafe { libc::munmap(addr as *mut libc::c_void, pages * rustix::param::page_size()) };
    }

    #[test]
    fn each_kind_of_memory_is_judged_as_the_kernel_pins_it() {
        let page = rustix::param::page_size();
        let rw = map(3, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(check(rw + 5, 2 * page, true), Ok(()));
        let ro = map(1, libc::PROT_READ);
        assert_eq!(check(ro, page, false), Ok(()));
        assert_eq!(check(ro, page, true), Err(NotMapped));
        let none = map(1, libc::PROT_NONE);
        assert_eq!(check(none, 8, false), Err(NotMapped));
        // A hole in the middle.
        unmap(rw + page, 1);
        assert_eq!(check(rw, 3 * page, false), Err(NotMapped));
        assert_eq!(check(rw, page, true), Ok(()));
        for (a, n) in [(rw, 1), (rw + 2 * page, 1), (ro, 1), (none, 1)] {
            unmap(a, n);
        }
    }

    #[test]
    fn the_maps_fallback_agrees() {
        let page = rustix::param::page_size();
        let rw = map(2, libc::PROT_READ | libc::PROT_WRITE);
        let ro = map(1, libc::PROT_READ);
        assert_eq!(check_maps(rw, rw + 2 * page, true), Ok(()));
        assert_eq!(check_maps(ro, ro + page, false), Ok(()));
        assert_eq!(check_maps(ro, ro + page, true), Err(NotMapped));
        unmap(rw + page, 1);
        assert_eq!(check_maps(rw, rw + 2 * page, false), Err(NotMapped));
        unmap(rw, 1);
        unmap(ro, 1);
    }
}
