//! C work-request lists as the application hands them: scatter lists read in place, and
//! receive lists posted in stack-sized chunks (shared by QPs and SRQs, so that neither
//! imports the other for it).

use core::ffi::c_int;

use rverbs::{RecvWr, Sge};

use crate::ffi::ToErrno;
use crate::abi::*;

/// Receive work requests translated per call of the core's post.
const RECV_CHUNK: usize = 8;

/// More scatter/gather entries than any queue of the device accepts: refused before a
/// slice is formed, so a wild `num_sge` never makes us read past the caller's array.
pub(crate) const MAX_ANY_SGE: usize = {
    let (a, b) = (
        rverbs::limits::MAX_SGE,
        rverbs::limits::MAX_SRQ_SGE,
    );
    (if a > b { a } else { b }) as usize
};

/// The scatter list of a C work request as core SGEs (same layout).
///
/// Errors: `EINVAL` for a negative `num_sge`, one above every queue's limit, or a NULL
/// list with entries.
///
/// # Safety
/// `sg_list` points to `num_sge` valid `ibv_sge` (the C contract) when `num_sge > 0`.
pub(crate) unsafe fn sge_slice<'a>(
    sg_list: *const ibv_sge,
    num_sge: c_int,
) -> Result<&'a [Sge], c_int> {
    match usize::try_from(num_sge) {
        Ok(0) => Ok(&[]),
        Ok(n) if n <= MAX_ANY_SGE && !sg_list.is_null() => {
            // SAFETY: ibv_sge and Sge have the same layout (asserted above); the list is
            // valid for n entries (caller contract).
            Ok(unsafe { core::slice::from_raw_parts(sg_list.cast::<Sge>(), n) })
        }
        _ => Err(libc::EINVAL),
    }
}

/// Stores the refused request into `*bad_wr` (if the caller gave one) and returns `err`.
///
/// # Safety
/// `bad_wr` is NULL or writable.
pub(crate) unsafe fn refuse<T>(bad_wr: *mut *mut T, wr: *mut T, err: c_int) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: caller contract.
        unsafe { bad_wr.write(wr) };
    }
    err
}

/// Posts a C receive list through `post` in stack-sized chunks, reporting the first
/// refused request in `*bad_wr` (shared by QPs and SRQs).
///
/// # Safety
/// `wr` is a valid C receive list, `bad_wr` NULL or writable (C contract).
pub(crate) unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(&[RecvWr<'_>]) -> Result<(), rverbs::PostError>,
) -> c_int {
    // One request (the common case, a receive posted again after its completion): no
    // chunk arrays to fill, as `post_send_list`.
    // SAFETY: C contract: every request of the list is valid during the call.
    if let Some(c) = unsafe { wr.as_ref() }.filter(|c| c.next.is_null()) {
        // SAFETY: as above.
        return match unsafe { sge_slice(c.sg_list, c.num_sge) } {
            Ok(sges) => match post(&[RecvWr::new(c.wr_id, sges)]) {
                Ok(()) => 0,
                // SAFETY: bad_wr is NULL or writable.
                Err(pe) => unsafe { refuse(bad_wr, wr, pe.error.c_errno()) },
            },
            // SAFETY: bad_wr is NULL or writable.
            Err(e) => unsafe { refuse(bad_wr, wr, e) },
        };
    }
    let mut next = wr;
    while !next.is_null() {
        let mut wrs = [RecvWr::new(0, &[]); RECV_CHUNK];
        let mut ptrs = [core::ptr::null_mut::<ibv_recv_wr>(); RECV_CHUNK];
        let mut n = 0;
        let mut refused = None;
        while n < RECV_CHUNK && !next.is_null() {
            // SAFETY: C contract: every request of the list is valid during the call.
            let c = unsafe { &*next };
            // SAFETY: as above.
            match unsafe { sge_slice(c.sg_list, c.num_sge) } {
                Ok(sges) => {
                    wrs[n] = RecvWr::new(c.wr_id, sges);
                    ptrs[n] = next;
                    n += 1;
                    next = c.next;
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // n == 0: the batch's first request was refused before anything was posted.
        let posted = if n == 0 { Ok(()) } else { post(&wrs[..n]) };
        if let Err(pe) = posted {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, ptrs[pe.index], pe.error.c_errno()) };
        }
        if let Some(e) = refused {
            // SAFETY: bad_wr is NULL or writable.
            return unsafe { refuse(bad_wr, next, e) };
        }
    }
    0
}

