//! `std::net::SocketAddr` to and from the `struct sockaddr_in` / `sockaddr_in6` that
//! librdmacm takes and gives (rdma_bind_addr(3), rdma_get_local_addr(3)).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// An IPv4 or IPv6 socket address laid out as C's, for a call that takes a
/// `struct sockaddr *`.
pub(super) struct CAddr(libc::sockaddr_storage);

impl CAddr {
    /// `addr` in the layout of its family.
    pub(super) fn new(addr: SocketAddr) -> CAddr {
        // SAFETY: `sockaddr_storage` is plain integers: all-zero is a valid value.
        let mut s: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: `sockaddr_storage` is larger than and aligned for every sockaddr.
                unsafe { core::ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above.
                unsafe { core::ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin6) };
            }
        }
        CAddr(s)
    }

    /// The pointer a librdmacm call takes (it only reads through it).
    pub(super) fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        (&mut self.0 as *mut libc::sockaddr_storage).cast()
    }
}

/// The socket address at `sa`, if it is IPv4 or IPv6 with a non-zero family.
///
/// # Safety
///
/// `sa` is NULL or points to a `struct sockaddr` of its family's full size (librdmacm's
/// `rdma_get_local_addr` / `rdma_get_peer_addr` point into the id's `sockaddr_storage`).
pub(super) unsafe fn from_c(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: a readable sockaddr of its family's size.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(sin6.sin6_port), u32::from_be(sin6.sin6_flowinfo), sin6.sin6_scope_id)))
            }
            _ => None,
        }
    }
}
