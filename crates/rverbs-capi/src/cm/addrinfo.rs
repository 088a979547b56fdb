//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: a wrapper over the C library's
//! `getaddrinfo`, with rdma-core 44's behaviour (`librdmacm/addrinfo.c`; docs/rpma-rdmacm.md
//! §2.5):
//!
//! * `node`, `service` and `hints` all NULL: -1, `errno = EINVAL`. No RDMA device:
//!   -1, `errno = ENODEV` (rdma-core's `ucma_init`).
//! * With `node` or `service`: the hints become `getaddrinfo` hints (`RAI_PASSIVE` →
//!   `AI_PASSIVE`, `RAI_NUMERICHOST` → `AI_NUMERICHOST`, the family unless `AF_IB`, the
//!   socket type from `ai_qp_type`: RC/UC/XRC → `SOCK_STREAM`, UD → `SOCK_DGRAM`, the
//!   protocol from `ai_port_space`); NULL hints are passed as NULL. Only the *first*
//!   result is converted (`ai_next` is NULL): a passive result goes to `ai_src_addr`
//!   (+ `ai_src_canonname`), an active one to `ai_dst_addr` (+ `ai_dst_canonname`);
//!   `ai_qp_type`/`ai_port_space` come from the hints when set, else from the socket
//!   type (`SOCK_STREAM` → RC, `SOCK_DGRAM` → UD) and protocol (TCP → `RDMA_PS_TCP`,
//!   UDP → `RDMA_PS_UDP`); `ai_flags` is `RAI_PASSIVE` or 0. A `getaddrinfo` failure is
//!   returned as is (a glibc `EAI_*` code, negative).
//! * Without `node` and `service`: the result is built from the hints (flags, family,
//!   QP type, port space, a copy of `ai_dst_addr`).
//! * In both cases the hints' `ai_src_addr` is copied when the result has no source.
//!   Allocation failures are -1 with `errno = ENOMEM`.
//!
//! Differences from rdma-core, by design: no `ibacm` route query for active results
//! (rdma-core's `ucma_ib_resolve`, which only ever fills `ai_route`/`ai_connect` on
//! InfiniBand fabrics running `ibacm`), so `ai_route` and `ai_connect` are always NULL;
//! an `AF_IB` conversion request (`RAI_FAMILY` + `RAI_NUMERICHOST` + `ai_family =
//! AF_IB` with a node or service) is `EAI_FAMILY`, as the soft device has no native IB
//! addressing.
//!
//! Every pointer of a result is `malloc`'d; `rdma_freeaddrinfo` frees the list.

use core::ffi::{c_char, c_int, c_void};
use core::ptr::{null, null_mut};

use libc::{addrinfo, sockaddr, socklen_t};

use super::abi::*;
use super::context::{FreeDeviceList, GetDeviceList};
use crate::abi::{
    ibv_qp_type, Zeroed, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND,
};
use crate::ffi::minus_one_errno;

/// rdma-core's `ucma_init` succeeds iff there is at least one RDMA device.
fn have_device() -> bool {
    let mut num: c_int = 0;
    // SAFETY: `num` is a valid out-parameter.
    let list = unsafe { own_verb!(crate::device, ibv_get_device_list as GetDeviceList)(&mut num) };
    if list.is_null() {
        return false;
    }
    // SAFETY: the list came from ibv_get_device_list and is freed once.
    unsafe { own_verb!(crate::device, ibv_free_device_list as FreeDeviceList)(list) };
    num > 0
}

/// The `getaddrinfo` hints for `rai` (rdma-core `ucma_convert_to_ai`).
fn to_ai_hints(rai: &rdma_addrinfo) -> addrinfo {
    // SAFETY: addrinfo is plain C data (integers and pointers); all-zero is valid.
    let mut ai: addrinfo = unsafe { core::mem::zeroed() };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if rai.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if rai.ai_family != AF_IB {
        ai.ai_family = rai.ai_family;
    }
    ai.ai_socktype = match rai.ai_qp_type as ibv_qp_type {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match rai.ai_port_space as rdma_port_space {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    // ai_addr/ai_addrlen/ai_canonname/ai_next stay NULL/0, as POSIX requires of hints.
    ai
}

/// A `malloc`'d copy of `len` bytes of the address at `src`; -1/`ENOMEM` on failure.
///
/// # Safety
///
/// `src` is readable for `len` bytes.
unsafe fn copy_addr(
    dst: &mut *mut sockaddr,
    dst_len: &mut socklen_t,
    src: *const sockaddr,
    len: socklen_t,
) -> c_int {
    // SAFETY: malloc has no preconditions (at least one byte, so never a NULL success).
    let p = unsafe { libc::malloc((len as usize).max(1)) }.cast::<sockaddr>();
    if p.is_null() {
        return minus_one_errno(libc::ENOMEM);
    }
    // SAFETY: src readable for len bytes (caller contract); p writable for len bytes.
    unsafe { core::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len as usize) };
    *dst = p;
    *dst_len = len;
    0
}

/// `strdup` of a C string, or NULL (rdma-core ignores a failed canonname copy).
///
/// # Safety
///
/// `s` is NULL or NUL-terminated.
unsafe fn dup_name(s: *const c_char) -> *mut c_char {
    if s.is_null() {
        return null_mut();
    }
    // SAFETY: NUL-terminated (caller contract).
    unsafe { libc::strdup(s) }
}

/// Looks `node`/`service` up and converts the first result into `rai`
/// (rdma-core `ucma_getaddrinfo` + `ucma_convert_to_rai`).
///
/// # Safety
///
/// `node`/`service` are NULL or NUL-terminated; `rai` is the zeroed result.
unsafe fn lookup(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
    rai: &mut rdma_addrinfo,
) -> c_int {
    let nohints = rdma_addrinfo::zeroed();
    let ai_hints = hints.map(to_ai_hints);
    let hints = hints.unwrap_or(&nohints);
    let mut list: *mut addrinfo = null_mut();
    let hints_ptr = ai_hints.as_ref().map_or(null(), |h| h as *const addrinfo);
    // SAFETY: node/service NULL or NUL-terminated; hints_ptr NULL or a valid addrinfo.
    let ret = unsafe { libc::getaddrinfo(node, service, hints_ptr, &mut list) };
    if ret != 0 {
        return ret;
    }
    // SAFETY: getaddrinfo succeeded: `list` holds at least one result.
    let ai = unsafe { &*list };

    rai.ai_qp_type = if hints.ai_qp_type != 0 {
        hints.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    rai.ai_port_space = if hints.ai_port_space != 0 {
        hints.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
            libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
            _ => 0,
        }
    };
    rai.ai_family = ai.ai_family;
    // glibc copies the hint flags into each result, so this is rdma-core's
    // `ai->ai_flags & AI_PASSIVE` test.
    let ret = if hints.ai_flags & RAI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE;
        // SAFETY: ai_canonname is NULL or NUL-terminated.
        rai.ai_src_canonname = unsafe { dup_name(ai.ai_canonname) };
        // SAFETY: ai_addr is readable for ai_addrlen bytes.
        unsafe {
            copy_addr(
                &mut rai.ai_src_addr,
                &mut rai.ai_src_len,
                ai.ai_addr,
                ai.ai_addrlen,
            )
        }
    } else {
        rai.ai_flags = 0;
        // SAFETY: ai_canonname is NULL or NUL-terminated.
        rai.ai_dst_canonname = unsafe { dup_name(ai.ai_canonname) };
        // SAFETY: ai_addr is readable for ai_addrlen bytes.
        unsafe {
            copy_addr(
                &mut rai.ai_dst_addr,
                &mut rai.ai_dst_len,
                ai.ai_addr,
                ai.ai_addrlen,
            )
        }
    };
    // SAFETY: the list came from getaddrinfo and is freed once.
    unsafe { libc::freeaddrinfo(list) };
    ret
}

cm_export! {
    /// Resolves `node`/`service` into an `rdma_addrinfo` (rdma_getaddrinfo(3)); see the
    /// module documentation for the rules. Returns 0, a `getaddrinfo` `EAI_*` code, or
    /// -1 with `errno`.
    #[cm(minus_one)]
    pub unsafe fn rdma_getaddrinfo(
        node: *const c_char,
        service: *const c_char,
        hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo,
    ) -> c_int {
        if node.is_null() && service.is_null() && hints.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        if res.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        if !have_device() {
            return minus_one_errno(libc::ENODEV);
        }
        // SAFETY: NULL or a valid rdma_addrinfo (caller contract).
        let hints = unsafe { hints.as_ref() };
        let lookup_wanted = !node.is_null() || !service.is_null();
        if let Some(h) = hints {
            if lookup_wanted
                && h.ai_flags & RAI_FAMILY != 0
                && h.ai_flags & RAI_NUMERICHOST != 0
                && h.ai_family == AF_IB
            {
                return libc::EAI_FAMILY;
            }
        }
        // SAFETY: calloc has no preconditions; the result is checked.
        let rai = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
        if rai.is_null() {
            return minus_one_errno(libc::ENOMEM);
        }
        // SAFETY: freshly calloc'd, zero is a valid rdma_addrinfo; exclusively ours.
        let r = unsafe { &mut *rai };
        let nohints = rdma_addrinfo::zeroed();
        let h = hints.unwrap_or(&nohints);

        let mut ret = 0;
        if lookup_wanted {
            // SAFETY: node/service NULL or NUL-terminated (caller contract).
            ret = unsafe { lookup(node, service, hints, r) };
        } else {
            r.ai_flags = h.ai_flags;
            r.ai_family = h.ai_family;
            r.ai_qp_type = h.ai_qp_type;
            r.ai_port_space = h.ai_port_space;
            if h.ai_dst_len != 0 {
                // SAFETY: the hints' address is readable for ai_dst_len bytes.
                ret = unsafe {
                    copy_addr(&mut r.ai_dst_addr, &mut r.ai_dst_len, h.ai_dst_addr, h.ai_dst_len)
                };
            }
        }
        if ret == 0 && r.ai_src_len == 0 && h.ai_src_len != 0 {
            // SAFETY: the hints' address is readable for ai_src_len bytes.
            ret = unsafe {
                copy_addr(&mut r.ai_src_addr, &mut r.ai_src_len, h.ai_src_addr, h.ai_src_len)
            };
        }
        if ret != 0 {
            // SAFETY: `rai` is ours, built above, every member NULL or malloc'd.
            unsafe { rdma_freeaddrinfo(rai) };
            return ret;
        }
        // SAFETY: non-NULL out-parameter (checked above).
        unsafe { res.write(rai) };
        0
    }
}

cm_export! {
    /// Frees a list returned by `rdma_getaddrinfo` (rdma_freeaddrinfo(3)): every node
    /// and its addresses, canonical names, route and connect data.
    #[cm(void)]
    pub unsafe fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
        let mut next = res;
        while !next.is_null() {
            let rai = next;
            // SAFETY: a node of a list built by rdma_getaddrinfo (caller contract): each
            // pointer member is NULL or malloc'd, freed exactly once here.
            unsafe {
                next = (*rai).ai_next;
                for p in [
                    (*rai).ai_connect,
                    (*rai).ai_route,
                    (*rai).ai_src_canonname.cast::<c_void>(),
                    (*rai).ai_dst_canonname.cast::<c_void>(),
                    (*rai).ai_src_addr.cast::<c_void>(),
                    (*rai).ai_dst_addr.cast::<c_void>(),
                ] {
                    libc::free(p);
                }
                libc::free(rai.cast());
            }
        }
    }
}
