//! Thin wrappers over the operating-system calls the device needs: eventfds, shared
//! anonymous memory, the host's interface addresses, the process generation that
//! `fork` starts, batched datagram receives, and epoll waits to the microsecond.
//!
//! This is one of the few modules allowed `unsafe` (ARCHITECTURE.md, "Crates"): `mmap`,
//! `getifaddrs`, `recvmmsg` and `epoll_pwait2` have no safe equivalents in rustix (its
//! epoll wait takes milliseconds unless built for Linux 5.11 only).
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
    /// The interface's flags (`ifa_flags`: `IFF_UP`, `IFF_LOOPBACK`, ...).
    pub(crate) flags: u32,
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
        let mut entry = IfAddr { name: name.clone(), ipv4: None, ipv6: None, mac: None, flags: ifa.ifa_flags };
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

/// The MTU of the network interface `name` in this process's network namespace
/// (`SIOCGIFMTU`, netdevice(7)); `None` if there is no such interface. (Not sysfs: a
/// namespace entered with `unshare -n` still sees the mount of the one it left.)
pub(crate) fn if_mtu(name: &str) -> Option<u32> {
    let bytes = name.as_bytes();
    // SAFETY: an all-zero `ifreq` is a valid value of this plain C struct.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return None;
    }
    for (d, b) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    let sock = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::DGRAM, None).ok()?;
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name in `req` and writes the MTU into
    // its union; `req` is a valid, exclusively borrowed `ifreq` for the whole call and the
    // descriptor is an open socket.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&sock), libc::SIOCGIFMTU, &mut req) };
    if r != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so the kernel wrote `ifru_mtu`, an int, into the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).ok()
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

/// How many forks made this process from the one that loaded the library (0 there):
/// [`process_generation`] unbounded, so that two nested children never compare equal.
pub fn forks_since_load() -> usize {
    GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Devices per generation. After `GENERATIONS - 1` nested forks, descendants share the
/// last one (a documented limit: the last generation's children share its endpoint).
pub const GENERATIONS: usize = 8;

/// This process's generation, bounded by the number of device slots: a forked child's
/// state (device, progress thread, connection manager) lives in its own slot.
pub fn process_generation() -> usize {
    GENERATION.load(std::sync::atomic::Ordering::Relaxed).min(GENERATIONS - 1)
}

/// Descriptors a forked child must not keep, with the generation that owns each: an
/// endpoint's lock (`shm::registry`), an exclusive `flock` held for as long as any
/// descriptor of its open file description is open. A child inherited that description
/// and so held the parent's lock: a parent killed while its child lived looked alive
/// (its directory never reclaimed). The fork handler points each of these descriptor
/// numbers at /dev/null in the child ([`release_in_children`]), except those of the
/// generation the child shares (after `GENERATIONS - 1` nested forks).
static CHILD_RELEASES: [(std::sync::atomic::AtomicI32, std::sync::atomic::AtomicUsize); MAX_DEVICES] =
    [const { (std::sync::atomic::AtomicI32::new(-1), std::sync::atomic::AtomicUsize::new(0)) }; MAX_DEVICES];

/// Devices (each an endpoint with a progress thread) a process can start over its life,
/// its forked generations included: the slots of the per-device state kept in statics
/// (the progress threads, the endpoint locks forked children drop).
pub const MAX_DEVICES: usize = 64;

/// The slot of a device: generation `g`'s device of [`crate::devices`] has slot `g`; a
/// configured device takes the next free one above them (`configured_device_slot`).
pub fn default_device_slot() -> usize {
    process_generation()
}

/// A slot for a configured device (`DeviceConfig::open`), `None` once [`MAX_DEVICES`]
/// were taken. A forked child counts on from its parent's count.
pub(crate) fn configured_device_slot() -> Option<usize> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(GENERATIONS);
    let s = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (s < MAX_DEVICES).then_some(s)
}

/// Makes forked children drop their reference to `fd`'s open file description (an
/// endpoint lock of this generation): in the child the number stays open, on /dev/null, so
/// the parent's owner of `fd` stays valid and still closes a descriptor it owns.
pub(crate) fn release_in_children(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    for (slot, generation) in &CHILD_RELEASES {
        // Reserve the slot (-2), then publish the descriptor after its generation.
        if slot.compare_exchange(-1, -2, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            generation.store(process_generation(), Ordering::Relaxed);
            slot.store(fd.as_raw_fd(), Ordering::Release);
            return;
        }
    }
}

/// Registers the fork handler once (the device does when it is first used): a child
/// starts a new generation, and drops the descriptors [`release_in_children`] names.
pub(crate) fn count_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn child() {
        use std::sync::atomic::Ordering;
        GENERATION.fetch_add(1, Ordering::Relaxed);
        let mine = process_generation();
        for (slot, generation) in &CHILD_RELEASES {
            let fd = slot.load(Ordering::Acquire);
            if fd < 0 || generation.load(Ordering::Relaxed) == mine {
                continue;
            }
            // SAFETY: open, dup3 and close are async-signal-safe, as a fork child
            // handler needs; `fd` is a descriptor number this process owns (the
            // registry's lock, never closed while the device lives), and dup3 replaces
            // it atomically, so the number never dangles.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if null >= 0 {
                    libc::dup3(null, fd, libc::O_CLOEXEC);
                    libc::close(null);
                }
            }
        }
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

/// `SOL_UDP` option and control message: the size a UDP payload is cut into (GSO, sending)
/// or was received as (GRO), udp(7).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Bytes of a control buffer that holds one `UDP_GRO` or `UDP_SEGMENT` message (an int at
/// most), as `u64`s so that it is aligned for `cmsghdr`.
const CMSG_WORDS: usize = 4;

/// Asks the kernel to hand this UDP socket datagrams that arrived as one GSO train, or that
/// it coalesced (GRO), whole: one receive then holds several equal-sized datagrams, with
/// their size in a `UDP_GRO` control message ([`DatagramBatch::segment_size`]). Best
/// effort: `false` where the kernel does not offer it.
pub(crate) fn enable_udp_gro(fd: BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt(2) reads `size_of::<c_int>()` bytes from a live `c_int`.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            UDP_GRO,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Buffers for receiving up to `N` datagrams of up to `SIZE` bytes each with one
/// recvmmsg(2), and each one's source address and, for a coalesced train of datagrams, the
/// size of each (UDP GRO).
pub(crate) struct DatagramBatch<const N: usize, const SIZE: usize> {
    /// `N` buffers of `SIZE` bytes, one after the other.
    data: Vec<u8>,
    addrs: [libc::sockaddr_storage; N],
    /// Control buffers, one per message.
    controls: [[u64; CMSG_WORDS]; N],
    /// The length of each datagram of the last receive (`usize::MAX`: its source address
    /// did not fit, never for an IP socket).
    lens: [usize; N],
    /// The size of each datagram a buffer of the last receive holds several of (the
    /// `UDP_GRO` control message), 0 for a single datagram.
    segs: [u16; N],
    /// The receive headers handed to recvmmsg(2), each naming its iovec of `iovs` (over
    /// its `SIZE`-byte chunk of `data`), its `addrs` and its `controls` entry: made once,
    /// for the address the batch had then (`at`), and made again should it have moved,
    /// so a receive only restores the lengths the kernel overwrote in the last one's.
    iovs: [libc::iovec; N],
    msgs: [libc::mmsghdr; N],
    /// The address of the batch when `msgs` and `iovs` were made (0: not yet).
    at: usize,
    /// How many headers of the start of `msgs` the last receive may have written to.
    dirty: usize,
}

impl<const N: usize, const SIZE: usize> DatagramBatch<N, SIZE> {
    /// Empty buffers (`N × SIZE` bytes allocated zeroed: an allocator usually maps a
    /// large block fresh, whose pages become resident only when written).
    pub(crate) fn new() -> Self {
        // SAFETY: `sockaddr_storage` is a plain C struct of integers and byte arrays, for
        // which all-zero bytes are a valid value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let iov = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        // SAFETY: `mmsghdr` is a plain C struct of integers and pointers, for which all-zero
        // bytes are a valid value (null pointers, zero lengths).
        let msgs: [libc::mmsghdr; N] = unsafe { std::mem::zeroed() };
        DatagramBatch {
            data: vec![0; N * SIZE],
            addrs: [zero; N],
            controls: [[0; CMSG_WORDS]; N],
            lens: [0; N],
            segs: [0; N],
            iovs: [iov; N],
            msgs,
            at: 0,
            dirty: 0,
        }
    }

    /// Points every header at its own buffers, as they are at the batch's present address.
    fn make_headers(&mut self) {
        let slots = self.data.chunks_exact_mut(SIZE).zip(self.addrs.iter_mut()).zip(self.controls.iter_mut());
        for ((iov, msg), ((buf, addr), control)) in self.iovs.iter_mut().zip(self.msgs.iter_mut()).zip(slots) {
            *iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
            msg.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_control = control.as_mut_ptr().cast();
        }
        self.at = self as *const Self as usize;
        self.dirty = N;
    }

    /// Receives up to `N` datagrams waiting on socket `fd` with one recvmmsg(2), without
    /// blocking (`MSG_DONTWAIT`), in arrival order into slots `0..n`; returns `n` (at
    /// least 1), or the call's error (`WouldBlock`: nothing waits). A datagram longer than
    /// `SIZE` is truncated to it, as recvfrom(2) truncates.
    pub(crate) fn recv(&mut self, fd: BorrowedFd<'_>) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let name_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if self.at != self as *const Self as usize {
            self.make_headers();
        }
        for msg in &mut self.msgs[..self.dirty] {
            msg.msg_hdr.msg_namelen = name_len;
            msg.msg_hdr.msg_controllen = std::mem::size_of::<[u64; CMSG_WORDS]>() as _;
            msg.msg_hdr.msg_flags = 0;
        }
        // SAFETY: `self.msgs` holds N headers made by `make_headers` at the batch's present
        // address (checked above; no field they point into is ever replaced, and `data`'s
        // allocation never changes), each naming one iovec of `self.iovs` over its own
        // SIZE-byte chunk of `self.data`, its own `sockaddr_storage` of `self.addrs` with
        // that size as its length, and its own control buffer of `self.controls` with its
        // size (both lengths restored above wherever the last call may have changed them);
        // all of them live and exclusively borrowed for the whole call, which writes only
        // within those bounds (and the headers' lengths and flags). No timeout (null).
        let n = unsafe { libc::recvmmsg(fd.as_raw_fd(), self.msgs.as_mut_ptr(), N as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            // Nothing was received, so nothing written, when nothing waited; after any
            // other failure every header is restored.
            if err.kind() != std::io::ErrorKind::WouldBlock {
                self.dirty = N;
            }
            return Err(err);
        }
        let n = n as usize;
        self.dirty = n;
        for ((len, seg), msg) in self.lens.iter_mut().zip(self.segs.iter_mut()).zip(&self.msgs[..n]) {
            *len = if msg.msg_hdr.msg_namelen <= name_len { (msg.msg_len as usize).min(SIZE) } else { usize::MAX };
            *seg = gro_size(&msg.msg_hdr);
        }
        Ok(n)
    }

    /// The size of each of the datagrams that buffer `i` of the last receive holds, when
    /// it holds a coalesced train of them (UDP GRO; the last may be shorter); `None` for a
    /// single datagram.
    pub(crate) fn segment_size(&self, i: usize) -> Option<usize> {
        self.segs.get(i).filter(|&&s| s != 0).map(|&s| usize::from(s))
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

/// The `UDP_GRO` segment size of a received message header (0: none).
fn gro_size(hdr: &libc::msghdr) -> u16 {
    if hdr.msg_control.is_null() || hdr.msg_flags & libc::MSG_CTRUNC != 0 {
        return 0;
    }
    // SAFETY: the header names a control buffer the kernel just filled and whose length it
    // set; CMSG_FIRSTHDR/CMSG_NXTHDR stay within `msg_controllen` and return null past it;
    // a `UDP_GRO` message's data is one int, read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return u16::try_from(v).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    0
}

/// Sends to `dst`, with one sendmmsg(2), one message per element of `trains` (ranges of
/// `packets`, consecutive: each starts where the one before ended): the concatenation of
/// its datagrams' bytes, cut by the kernel into datagrams of the size of the first (UDP
/// GSO, the `UDP_SEGMENT` control message, udp(7): every datagram of a train but the last
/// has that size, the last may be shorter) — a train of one datagram is sent as it is.
/// Returns how many trains the kernel took (from the first), or the error of the first it
/// refused (`EIO`/`EINVAL`: no GSO on this route).
pub(crate) fn sendmmsg_trains(
    fd: BorrowedFd<'_>,
    dst: std::net::SocketAddr,
    packets: &[Vec<u8>],
    trains: &[std::ops::Range<usize>],
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let (Some(first), Some(last)) = (trains.first(), trains.last()) else { return Ok(0) };
    let (addr, addr_len) = sockaddr_of(dst);
    // The trains' pieces are one stretch of `packets`, so one iovec array in their order;
    // it, the headers and the control buffers live on the stack for the few trains of a
    // latency-bound exchange (a request and an ACK: no allocation on that path), each
    // built in place and filled before any header points into the others.
    let mut iovs: smallvec::SmallVec<[libc::iovec; 8]> = smallvec::SmallVec::new();
    for p in &packets[first.start..last.end] {
        iovs.push(libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() });
    }
    let mut controls: smallvec::SmallVec<[[u64; CMSG_WORDS]; 4]> = smallvec::SmallVec::new();
    let mut msgs: smallvec::SmallVec<[libc::mmsghdr; 4]> = smallvec::SmallVec::new();
    for _ in trains {
        controls.push([0; CMSG_WORDS]);
        // SAFETY: `mmsghdr` is a plain C struct of integers and pointers, for which
        // all-zero bytes are a valid value (null pointers, zero lengths).
        msgs.push(unsafe { std::mem::zeroed() });
    }
    for ((msg, control), train) in msgs.iter_mut().zip(controls.iter_mut()).zip(trains) {
        let pieces = &iovs[train.start - first.start..train.end - first.start];
        msg.msg_hdr.msg_name = (&addr as *const libc::sockaddr_storage) as *mut libc::c_void;
        msg.msg_hdr.msg_namelen = addr_len;
        msg.msg_hdr.msg_iov = pieces.as_ptr() as *mut libc::iovec;
        msg.msg_hdr.msg_iovlen = pieces.len() as _;
        if pieces.len() > 1 {
            let size = u16::try_from(pieces[0].iov_len).unwrap_or(u16::MAX);
            msg.msg_hdr.msg_control = control.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is arithmetic on its argument.
            msg.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
            // SAFETY: the control buffer (32 bytes, u64-aligned) holds CMSG_SPACE(2) = 24
            // bytes, set as the header's control length, so CMSG_FIRSTHDR returns its
            // start, and the message's header and 2 data bytes are written inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg.msg_hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
            }
        }
    }
    let mut sent = 0;
    while sent < msgs.len() {
        // SAFETY: `msgs[sent..]` are headers naming the live `addr` with its length, their
        // own stretches of `iovs` over the caller's borrowed datagrams (read only by the
        // kernel), and their own control buffers with the lengths set above; none of
        // `iovs`, `controls` and `addr` has moved since, and all outlive the call.
        let n = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs[sent..].as_mut_ptr(), (msgs.len() - sent) as libc::c_uint, 0) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return if sent == 0 { Err(err) } else { Ok(sent) };
        }
        if n == 0 {
            break;
        }
        sent += n as usize;
    }
    Ok(sent)
}

/// `a` as a C socket address and its length.
fn sockaddr_of(a: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: `sockaddr_storage` is a plain C struct of integers and byte arrays, for which
    // all-zero bytes are a valid value.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        std::net::SocketAddr::V4(v4) => {
            // SAFETY: `sockaddr_storage` is at least as large and as aligned as
            // `sockaddr_in`; the storage is exclusively borrowed here.
            let sin = unsafe { &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            (s, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        std::net::SocketAddr::V6(v6) => {
            // SAFETY: as above, for `sockaddr_in6`.
            let sin6 = unsafe { &mut *(&mut s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_scope_id = v6.scope_id();
            (s, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
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

    /// The headers a batch keeps between receives follow it when it moves: each receive
    /// after a move lands in the batch where it now is, with its source and the lengths
    /// the kernel overwrote in the receive before restored (a long datagram after a short
    /// one is not cut to the short one's length).
    #[test]
    fn a_batch_that_moved_receives_into_its_new_place() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        // Each datagram from a sender of its own: a source written where the batch was
        // would leave the one before in place.
        let receive = |batch: &mut DatagramBatch<2, 16>, d: &[u8]| {
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            tx.send_to(d, to).unwrap();
            let from = tx.local_addr().unwrap();
            for _ in 0..1000 {
                if let Ok(n) = batch.recv(rx.as_fd()) {
                    assert_eq!(n, 1);
                    return batch.get(0).map(|(f, d)| (f == from, d.to_vec())).unwrap();
                }
                std::thread::yield_now();
            }
            panic!("nothing received");
        };
        let mut batch = DatagramBatch::<2, 16>::new();
        assert_eq!(receive(&mut batch, &[1; 3]), (true, vec![1; 3]));
        let mut boxed = Box::new(batch);
        assert_eq!(receive(&mut boxed, &[2; 12]), (true, vec![2; 12]));
        let mut moved = [*boxed];
        assert_eq!(receive(&mut moved[0], &[3; 5]), (true, vec![3; 5]));
        assert_eq!(receive(&mut moved[0], &[4; 16]), (true, vec![4; 16]));
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

/// Runs `prepare` in the forking thread before every fork(2), `parent` in the parent and
/// `child` in the child after it (pthread_atfork(3)).
pub(crate) fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: pthread_atfork only stores the pointers of plain extern "C" functions with
    // no arguments, which live as long as the library (never unloaded).
    unsafe {
        libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
    }
}

/// Runs `f` when the process exits normally (return from `main`, `exit`), after the
/// handlers registered later (atexit(3)). [`exit_began`] runs before it, so that from
/// `f`'s start on, [`park_if_exiting`] knows the process is exiting.
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: atexit only stores the pointers of plain extern "C" functions with no
    // arguments, which live as long as the library (never unloaded: the drop-in is
    // linked at start-up). Handlers run in the reverse order of registration, so
    // `exit_began` runs before `f`.
    unsafe {
        libc::atexit(f);
        libc::atexit(exit_began);
    }
}

/// The thread running the process's exit handlers (its kernel thread id), once the
/// first of this library's has started; 0 before.
static EXITING_THREAD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Marks the process as exiting, by the calling thread (the one that called `exit`).
extern "C" fn exit_began() {
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    let _ = EXITING_THREAD.compare_exchange(0, tid, std::sync::atomic::Ordering::AcqRel, std::sync::atomic::Ordering::Acquire);
}

/// How long [`park_if_exiting`] holds a thread before letting its call fail.
pub(crate) const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// If the process is exiting and the caller is another thread than the one running the
/// exit, waits 2 s (`EXIT_WAIT`) before returning: the exit normally ends the process (and
/// the thread) long before, as the kernel's `exit_group` would have ended it
/// (docs/capi.md, "Threads racing with exit"). Returns at once otherwise.
///
/// For a getter that found its object already destroyed: a program whose event thread
/// calls `rdma_get_cm_event` on a channel the main thread destroyed just before
/// returning from `main` (rping does) races with its own exit. With the kernel's stack
/// the exit wins nearly always, because it does no work; this library's exit handlers
/// do some (the ACKs held, the runtime directory), and the event thread would
/// otherwise see `EINVAL` and turn the program's exit status into its error. The wait
/// is bounded so that an exit that itself waits for that thread (a destructor that
/// joins it) goes on, 2 s later, as it would have.
pub fn park_if_exiting() {
    let exiting = EXITING_THREAD.load(std::sync::atomic::Ordering::Acquire);
    if exiting == 0 || exiting == rustix::thread::gettid().as_raw_nonzero().get() {
        return;
    }
    let until = std::time::Instant::now() + EXIT_WAIT;
    loop {
        let now = std::time::Instant::now();
        if now >= until {
            return;
        }
        std::thread::park_timeout(until - now);
    }
}

/// The first page of `[addr, addr+len)` that is not mapped in this process, if any: the
/// sanitizer's check that registered memory is still there (docs/sanitizer.md,
/// mr-memory-unmapped). mincore(2) fails with `ENOMEM` over a range holding an unmapped
/// page: the range is asked in chunks of `CHUNK` pages, and the first chunk that fails is
/// bisected.
pub(crate) fn first_unmapped(addr: usize, len: usize) -> Option<usize> {
    const CHUNK: usize = 4096;
    if len == 0 {
        return None;
    }
    let page = rustix::param::page_size();
    let start = addr & !(page - 1);
    let end = addr.checked_add(len)?.checked_add(page - 1)? & !(page - 1);
    let mut vec = [0u8; CHUNK];
    // Whether `[at, at + n pages)` is all mapped (n ≤ CHUNK).
    let mut mapped = |at: usize, n: usize| -> bool {
        // SAFETY: mincore only reads the page tables of `[at, at + n pages)` and writes one
        // byte per page into `vec`, which holds CHUNK ≥ n bytes; it never touches the
        // memory itself, mapped or not.
        let r = unsafe { libc::mincore(at as *mut libc::c_void, n * page, vec.as_mut_ptr()) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOMEM)
    };
    let mut at = start;
    while at < end {
        let n = ((end - at) / page).min(CHUNK);
        if !mapped(at, n) {
            // [at, lo pages) is mapped, [at, hi pages) is not.
            let (mut lo, mut hi) = (0, n);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if mapped(at, mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            return Some(at + lo * page);
        }
        at += n * page;
    }
    None
}

/// Whether `epoll_pwait2` may be called: cleared for the process's life at its first
/// refusal ([`epoll_wait_fine`]).
static EPOLL_PWAIT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// The kernel's `struct __kernel_timespec`, 64-bit on every architecture.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// Events one [`epoll_wait_fine`] takes at most.
pub(crate) const EPOLL_EVENTS: usize = 16;

/// Waits on `epoll` for at most `timeout` (`None`: without end) and appends what is ready
/// to `events` (at most [`EPOLL_EVENTS`]); returns how many.
///
/// The timeout is kept to the nanosecond: `epoll_wait(2)` and `epoll_pwait` take
/// milliseconds, so the 200 µs deadlines of the progress thread (`busy_poll::STANDBY`,
/// `progress::HOLDING_WAIT`, `qp::acks::ACK_DELAY`) would wake it after a whole
/// millisecond (rounded up, never cut short). `epoll_pwait2` (Linux 5.11) takes a
/// timespec. On a kernel without it (ENOSYS), or under a seccomp filter that refuses it
/// (EPERM), the process falls back to milliseconds for its life
/// (docs/progress-and-events.md, "Deadlines below the millisecond").
pub(crate) fn epoll_wait_fine(epoll: BorrowedFd<'_>, events: &mut Vec<rustix::event::epoll::Event>, timeout: Option<std::time::Duration>) -> rustix::io::Result<usize> {
    use std::sync::atomic::Ordering;
    if let Some(d) = timeout.filter(|d| d.subsec_nanos() % 1_000_000 != 0) {
        if EPOLL_PWAIT2.load(Ordering::Relaxed) {
            match epoll_pwait2(epoll, events, d) {
                Err(errno @ (Errno::NOSYS | Errno::PERM)) => {
                    tracing::debug!(%errno, "epoll_pwait2 refused: the progress thread's deadlines round up to milliseconds");
                    EPOLL_PWAIT2.store(false, Ordering::Relaxed);
                }
                r => return r,
            }
        }
    }
    let ts = timeout.map(|d| rustix::time::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) });
    let before = events.len();
    events.reserve(EPOLL_EVENTS);
    rustix::event::epoll::wait(epoll, rustix::buffer::spare_capacity(events), ts.as_ref()).map(|_| events.len() - before)
}

/// `epoll_pwait2(2)` with timeout `d` and no signal mask: the ready events (at most
/// [`EPOLL_EVENTS`]) appended to `events`; how many.
fn epoll_pwait2(epoll: BorrowedFd<'_>, events: &mut Vec<rustix::event::epoll::Event>, d: std::time::Duration) -> rustix::io::Result<usize> {
    use rustix::event::epoll;
    use std::os::fd::AsRawFd;
    let ts = KernelTimespec { tv_sec: d.as_secs().min(i64::MAX as u64) as i64, tv_nsec: i64::from(d.subsec_nanos()) };
    let mut raw = [libc::epoll_event { events: 0, u64: 0 }; EPOLL_EVENTS];
    // SAFETY: `raw` is a writable array of EPOLL_EVENTS `epoll_event`s, as the second and
    // third arguments say; `ts` is a `__kernel_timespec` alive for the call; the signal
    // mask is null (none changed), so its size is not read.
    let n = unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait2,
            epoll.as_raw_fd(),
            raw.as_mut_ptr(),
            EPOLL_EVENTS as libc::c_int,
            &ts as *const KernelTimespec,
            std::ptr::null::<libc::sigset_t>(),
            0usize,
        )
    };
    if n < 0 {
        return Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
    }
    for e in &raw[..n as usize] {
        // Copied out of the kernel's layout (packed on x86-64).
        let (flags, data) = (e.events, e.u64);
        events.push(epoll::Event { flags: epoll::EventFlags::from_bits_retain(flags), data: epoll::EventData::new_u64(data) });
    }
    Ok(n as usize)
}

#[cfg(test)]
mod epoll_tests {
    use super::*;
    use rustix::event::epoll;
    use std::time::Duration;

    /// A ready eventfd, its data and flags, from `epoll_pwait2` itself (the raw call and
    /// the kernel's layout) and through the wrapper with each kind of timeout; nothing
    /// ready is an empty wait.
    #[test]
    fn a_wait_below_the_millisecond_reports_the_ready_descriptor_with_its_data() {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).unwrap();
        epoll::add(&ep, &fd, epoll::EventData::new_u64(0xfeed_0000_0042), epoll::EventFlags::IN).unwrap();
        let mut events = Vec::new();
        assert_eq!(epoll_wait_fine(ep.as_fd(), &mut events, Some(Duration::from_micros(200))).unwrap(), 0);
        assert_eq!(epoll_pwait2(ep.as_fd(), &mut events, Duration::from_micros(200)), Ok(0), "Linux >= 5.11");
        assert!(events.is_empty());
        rustix::io::write(&fd, &1u64.to_ne_bytes()).unwrap();
        let ready = |events: &Vec<epoll::Event>| {
            let (flags, data) = (events[0].flags, events[0].data);
            (events.len(), data.u64(), flags.contains(epoll::EventFlags::IN))
        };
        assert_eq!(epoll_pwait2(ep.as_fd(), &mut events, Duration::from_micros(200)), Ok(1));
        assert_eq!(ready(&events), (1, 0xfeed_0000_0042, true));
        for timeout in [Some(Duration::from_micros(200)), None, Some(Duration::from_millis(1))] {
            events.clear();
            assert_eq!(epoll_wait_fine(ep.as_fd(), &mut events, timeout), Ok(1), "{timeout:?}");
            assert_eq!(ready(&events), (1, 0xfeed_0000_0042, true), "{timeout:?}");
        }
    }
}

/// Whether a thread of process `pid` is stopped now: by a signal (SIGSTOP, SIGTSTP: state
/// `T` in `/proc/<pid>/task/<tid>/stat`, proc(5)) or by a tracer such as a debugger
/// (`t`). Such a process holds whatever it held when it stopped and goes on from there
/// when it runs again, so what it holds must be waited for, not taken over. `false` when
/// the process is gone or `/proc` cannot be read.
pub(crate) fn process_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| std::fs::read(t.path().join("stat")).is_ok_and(|s| stat_says_stopped(&s)))
}

/// Whether a `stat` line of proc(5) says the task is stopped: the state is the field after
/// the command name, which is in parentheses and may itself hold `)` and spaces.
fn stat_says_stopped(stat: &[u8]) -> bool {
    let Some(end) = stat.iter().rposition(|&b| b == b')') else { return false };
    matches!(stat.get(end + 2), Some(b'T' | b't'))
}

#[cfg(test)]
mod stopped_tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_parentheses() {
        assert!(stat_says_stopped(b"42 (a) T (b)) T 1 42"));
        assert!(stat_says_stopped(b"42 (gdb stop) t 1 42"));
        assert!(!stat_says_stopped(b"42 (x) T) S 1 42"));
        assert!(!stat_says_stopped(b"42 (x) R 1"));
        assert!(!stat_says_stopped(b"garbage"));
    }

    // A child stopped with SIGSTOP reads stopped until SIGCONT (the state changes when
    // the kernel gets to it: each look is retried, bounded).
    #[test]
    fn a_child_stopped_by_a_signal_reads_stopped_until_it_is_continued() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let becomes = |want: bool| (0..2_000).any(|_| process_stopped(pid) == want || { std::thread::sleep(std::time::Duration::from_millis(1)); false });
        let signal = |s| rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), s).unwrap();
        assert!(!process_stopped(pid), "running");
        signal(rustix::process::Signal::STOP);
        assert!(becomes(true), "stopped after SIGSTOP");
        signal(rustix::process::Signal::CONT);
        assert!(becomes(false), "running after SIGCONT");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!process_stopped(pid), "gone");
    }
}
