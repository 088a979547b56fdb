//! Thin wrappers over the operating-system calls the device needs: eventfds, shared
//! anonymous memory, the host's interface addresses, the process generation that
//! `fork` starts, and batched datagram receives.
//!
//! This is one of the few modules allowed `unsafe` (ARCHITECTURE.md §1): `mmap`,
//! `getifaddrs` and `recvmmsg` have no safe equivalents in rustix.
#![allow(unsafe_code)]

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{eventfd, EventfdFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};

/// A counting eventfd (`EFD_SEMAPHORE`): each `signal` adds one, each `wait` takes one.
///
/// Rule: the fd handed to applications is a real kernel fd usable with poll/epoll,
/// blocking by default, honouring `O_NONBLOCK` if the application sets it
/// (ibv_get_cq_event(3) EXAMPLES).
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> Result<Self> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::SEMAPHORE)?;
        Ok(EventFd { fd })
    }

    /// Adds one to the counter, waking one reader.
    pub(crate) fn signal(&self) {
        // An eventfd write only fails when the counter would overflow u64::MAX - 1,
        // which one increment per queued event can never reach.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Takes one from the counter, blocking while it is zero unless the file is
    /// non-blocking, in which case `Error::WouldBlock` is returned.
    pub(crate) fn wait(&self) -> Result<()> {
        let mut buf = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut buf) {
                Ok(8) => return Ok(()),
                Ok(_) => return Err(Error::Bug("short eventfd read")),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}


/// One interface address of the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IfAddr {
    pub(crate) name: String,
    pub(crate) ipv4: Option<Ipv4Addr>,
    pub(crate) ipv6: Option<std::net::Ipv6Addr>,
    pub(crate) mac: Option<[u8; 6]>,
}

/// The host's interfaces with their IPv4 and IPv6 addresses and MAC addresses
/// (`getifaddrs(3)`), in the order the kernel lists them.
pub(crate) fn interfaces() -> Vec<IfAddr> {
    let mut out: Vec<IfAddr> = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list returned by getifaddrs, valid until
        // freeifaddrs; its fields are read-only here.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family tells
        // its real type.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        let mut entry = IfAddr { name: name.clone(), ipv4: None, ipv6: None, mac: None };
        match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                entry.ipv4 = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                entry.ipv6 = Some(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr));
            }
            libc::AF_PACKET => {
                // SAFETY: family AF_PACKET means the address is a sockaddr_ll.
                let sll = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_ll) };
                if sll.sll_halen == 6 {
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&sll.sll_addr[..6]);
                    entry.mac = Some(mac);
                }
            }
            _ => continue,
        }
        out.push(entry);
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The index of the network interface `name`, or 0 (`if_nametoindex(3)`).
pub(crate) fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else { return 0 };
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// The process generation: 0 in the process that loaded the library, incremented in
/// every child `fork` creates (a `pthread_atfork` child handler). A forked child is a new
/// process and gets its own endpoint of the host-wide device, as it gets new resources
/// from a kernel RDMA device (the parent's objects are not the child's: ibv_fork_init(3)).
static GENERATION: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Devices per generation. After `GENERATIONS - 1` nested forks, descendants share the
/// last one (a documented limit: the last generation's children share its endpoint).
pub const GENERATIONS: usize = 8;

/// This process's generation, bounded by the number of device slots: a forked child's
/// state (device, progress thread, connection manager) lives in its own slot.
pub fn process_generation() -> usize {
    GENERATION.load(std::sync::atomic::Ordering::Relaxed).min(GENERATIONS - 1)
}

/// Registers the fork handler once (the device does when it is first used): a child
/// starts a new generation.
pub(crate) fn count_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn child() {
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    ONCE.call_once(|| {
        // SAFETY: registers a plain extern "C" function with no arguments that only
        // increments an atomic (async-signal-safe, as a fork child handler must be).
        unsafe {
            libc::pthread_atfork(None, None, Some(child));
        }
    });
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_counts_and_honours_nonblocking() {
        let e = EventFd::new().unwrap();
        rustix::io::ioctl_fionbio(e.fd(), true).unwrap();
        assert!(matches!(e.wait(), Err(Error::WouldBlock)));
        e.signal();
        e.signal();
        e.wait().unwrap();
        e.wait().unwrap();
        assert!(matches!(e.wait(), Err(Error::WouldBlock)));
    }

    #[test]
    fn loopback_interface_is_listed() {
        let ifs = interfaces();
        assert!(ifs.iter().any(|i| i.ipv4 == Some(Ipv4Addr::LOCALHOST)), "{ifs:?}");
    }
}

/// Writes `buf` to a FIFO (or any pipe) without ever raising SIGPIPE in the process.
///
/// A FIFO whose reader died fails with EPIPE and raises SIGPIPE, whose default action
/// kills the writer: a C host of this library (librpma's examples, rping) would die
/// writing to a peer that just exited. The signal is blocked in the calling thread for the
/// write; if the write raised it, the pending SIGPIPE is taken (sigtimedwait) before the
/// mask is restored, unless it was already pending before (then it is left alone, it is
/// not ours). The result is the write's, EPIPE included.
pub(crate) fn write_no_sigpipe(fd: BorrowedFd<'_>, buf: &[u8]) -> rustix::io::Result<usize> {
    // SAFETY: sigset operations on local, initialised sets; pthread_sigmask changes only
    // this thread's mask and is restored below on every path.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let r = rustix::io::write(fd, buf);
        if r == Err(Errno::PIPE) && !was_pending {
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero) == -1
                && *libc::__errno_location() == libc::EINTR
            {}
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// Buffers for receiving up to `N` datagrams of up to `SIZE` bytes each with one
/// recvmmsg(2), and each one's source address.
pub(crate) struct DatagramBatch<const N: usize, const SIZE: usize> {
    /// `N` buffers of `SIZE` bytes, one after the other.
    data: Vec<u8>,
    addrs: [libc::sockaddr_storage; N],
    /// The length of each datagram of the last receive (`usize::MAX`: its source address
    /// did not fit, never for an IP socket).
    lens: [usize; N],
}

impl<const N: usize, const SIZE: usize> DatagramBatch<N, SIZE> {
    /// Empty buffers (`N × SIZE` bytes allocated zeroed: an allocator usually maps a
    /// large block fresh, whose pages become resident only when written).
    pub(crate) fn new() -> Self {
        // SAFETY: `sockaddr_storage` is a plain C struct of integers and byte arrays, for
        // which all-zero bytes are a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        DatagramBatch { data: vec![0; N * SIZE], addrs: [zero; N], lens: [0; N] }
    }

    /// Receives up to `N` datagrams waiting on socket `fd` with one recvmmsg(2), without
    /// blocking (`MSG_DONTWAIT`), in arrival order into slots `0..n`; returns `n` (at
    /// least 1), or the call's error (`WouldBlock`: nothing waits). A datagram longer than
    /// `SIZE` is truncated to it, as recvfrom(2) truncates.
    pub(crate) fn recv(&mut self, fd: BorrowedFd<'_>) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let name_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let mut iovs = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; N];
        // SAFETY: `mmsghdr` is a plain C struct of integers and pointers, for which
        // all-zero bytes are a valid value (null pointers, zero lengths).
        let mut msgs: [libc::mmsghdr; N] = unsafe { std::mem::zeroed() };
        let slots = self.data.chunks_exact_mut(SIZE).zip(self.addrs.iter_mut());
        for ((iov, msg), (buf, addr)) in iovs.iter_mut().zip(msgs.iter_mut()).zip(slots) {
            *iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
            msg.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_namelen = name_len;
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs` holds N headers, each naming one iovec of `iovs` over its own
        // SIZE-byte chunk of `self.data` (`data` is N × SIZE bytes, so every header got
        // one) and its own `sockaddr_storage` of `self.addrs` with that size as its
        // length; all of them live and are exclusively borrowed for the whole call, which
        // writes only within those bounds (and the headers' lengths and flags). No
        // ancillary buffer (msg_control null, msg_controllen 0), no timeout (null).
        let n = unsafe { libc::recvmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), N as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = n as usize;
        for (len, msg) in self.lens.iter_mut().zip(&msgs[..n]) {
            *len = if msg.msg_hdr.msg_namelen <= name_len { (msg.msg_len as usize).min(SIZE) } else { usize::MAX };
        }
        Ok(n)
    }

    /// Datagram `i` of the last [`DatagramBatch::recv`] and its source, IPv6 flow info and
    /// scope included (as recvfrom(2) gives it); `None` if the source is not an IP
    /// address (never, for an IP socket) or `i` is past what it received.
    pub(crate) fn get(&self, i: usize) -> Option<(std::net::SocketAddr, &[u8])> {
        let len = *self.lens.get(i).filter(|&&l| l <= SIZE)?;
        let from = sockaddr_ip(self.addrs.get(i)?)?;
        Some((from, &self.data[i * SIZE..i * SIZE + len]))
    }
}

/// The IP socket address `a` holds; `None` for another family.
fn sockaddr_ip(a: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    match i32::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: `sockaddr_storage` is at least as large and as aligned as
            // `sockaddr_in`, and its family says that is what the kernel wrote.
            let v4 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(v4.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(v4.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for `sockaddr_in6`.
            let v6 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(v6.sin6_port), v6.sin6_flowinfo, v6.sin6_scope_id)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod datagram_tests {
    use super::*;
    use std::net::{SocketAddr, UdpSocket};
    use std::os::fd::AsFd;

    /// recvmmsg(2) hands back datagrams in arrival order with their lengths and
    /// sources, at most `N` per call; a datagram longer than `SIZE` is truncated; nothing
    /// waiting is `WouldBlock`.
    #[test]
    fn a_batch_receives_in_order_with_sources_and_lengths() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (a, b) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        let to = rx.local_addr().unwrap();
        let mut batch = DatagramBatch::<4, 8>::new();
        assert_eq!(batch.recv(rx.as_fd()).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
        let sent: Vec<(&UdpSocket, Vec<u8>)> = (0..6u8).map(|i| (if i % 2 == 0 { &a } else { &b }, vec![i; 1 + usize::from(i) * 2])).collect();
        for (s, d) in &sent {
            s.send_to(d, to).unwrap();
        }
        let mut got: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        // Loopback queues at once; bounded, as the socket does not block.
        for _ in 0..1000 {
            if let Ok(n) = batch.recv(rx.as_fd()) {
                assert!((1..=4).contains(&n));
                got.extend((0..n).map(|i| batch.get(i).map(|(f, d)| (f, d.to_vec())).unwrap()));
                assert!(batch.get(4).is_none());
            }
            if got.len() == sent.len() {
                break;
            }
            std::thread::yield_now();
        }
        let want: Vec<(SocketAddr, Vec<u8>)> =
            sent.iter().map(|(s, d)| (s.local_addr().unwrap(), d[..d.len().min(8)].to_vec())).collect();
        assert_eq!(got, want);
    }
}

#[cfg(test)]
mod sigpipe_tests {
    use super::*;

    #[test]
    fn a_write_to_a_pipe_without_reader_fails_with_epipe_and_raises_no_sigpipe() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        drop(r);
        // The default action (what a C host has): a raised SIGPIPE would kill this test
        // binary. Restored to the Rust runtime's SIG_IGN afterwards.
        // SAFETY: changes the process's SIGPIPE disposition around one call.
        let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let r = write_no_sigpipe(w.as_fd(), b"x");
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGPIPE, old) };
        assert_eq!(r, Err(Errno::PIPE));
    }
}
