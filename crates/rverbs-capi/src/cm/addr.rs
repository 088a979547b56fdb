//! `rdma_get_src_port` / `rdma_get_dst_port`: the port of an id's bound or resolved
//! address, read from `id->route.addr` (rdma-core 44 `ucma_get_port`).

use core::ffi::c_int;

use libc::{sockaddr, sockaddr_in, sockaddr_in6, AF_INET, AF_INET6};

use super::abi::{rdma_cm_id, sockaddr_ib, AF_IB};

/// The port of `addr` in network byte order: `sin_port`/`sin6_port`, the low 16 bits
/// of the service id for `AF_IB`, 0 for any other family.
///
/// # Safety
///
/// `addr` points at a readable socket address of the size its family implies (the
/// 128-byte unions of `struct rdma_addr` always are).
pub unsafe fn port_of(addr: *const sockaddr) -> u16 {
    // SAFETY: caller contract; sa_family is the first field of every sockaddr.
    let family = c_int::from(unsafe { (*addr).sa_family });
    match family {
        // SAFETY: an AF_INET address is a sockaddr_in (caller contract).
        AF_INET => unsafe { (*addr.cast::<sockaddr_in>()).sin_port },
        // SAFETY: an AF_INET6 address is a sockaddr_in6 (caller contract).
        AF_INET6 => unsafe { (*addr.cast::<sockaddr_in6>()).sin6_port },
        AF_IB => {
            // SAFETY: an AF_IB address is a sockaddr_ib (caller contract).
            let sid = u64::from_be(unsafe { (*addr.cast::<sockaddr_ib>()).sib_sid });
            (sid as u16).to_be()
        }
        _ => 0,
    }
}

cm_export! {
    /// The local port of an id, network byte order (rdma_get_src_port(3)); 0 when the
    /// id has no IP/IB source address (or `id` is NULL).
    #[cm(value(0))]
    pub unsafe fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        if id.is_null() {
            return 0;
        }
        // SAFETY: a live id (caller contract); the union is 128 bytes.
        unsafe { port_of(&raw const (*id).route.addr.src.src_addr) }
    }
}

cm_export! {
    /// The remote port of an id, network byte order (rdma_get_dst_port(3)); 0 when the
    /// id has no IP/IB destination address (or `id` is NULL).
    #[cm(value(0))]
    pub unsafe fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        if id.is_null() {
            return 0;
        }
        // SAFETY: a live id (caller contract); the union is 128 bytes.
        unsafe { port_of(&raw const (*id).route.addr.dst.dst_addr) }
    }
}
