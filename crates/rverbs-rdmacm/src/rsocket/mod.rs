//! The rsocket family of rdma-core 44 (`<rdma/rsocket.h>`, rsocket(7)): stream sockets
//! over RC QPs, with rdma-core's wire protocol (docs/rsockets.md), exported with their
//! `RDMACM_1.0` versions.
//!
//! # Why here, over the C ABI
//!
//! rsockets are a client of the rdma_cm and of the verbs, not part of either: rdma-core
//! builds them in librdmacm over the public `rdma_*` and `ibv_*` functions, and so does
//! this shim. The connection calls go to this library's own `rdma_*` forwarders (so the
//! ids, QPs and events are the ones the rverbs connection manager serves any C
//! program), the verbs to `libibverbs.so.1` (the public functions by name, the inline
//! ones through the context's ops table, as compiled C code calls them). Nothing of the
//! rverbs core is duplicated, and `librspreload.so`, which calls these functions, needs
//! nothing else.
//!
//! # Differences from rdma-core
//!
//! * No service threads: rdma-core accepts connections in a listener thread and watches
//!   connected ids in another. Here `raccept` takes the connection request from the
//!   listener's event channel itself, and every call on a socket first takes the queued
//!   rdma_cm events of its own channel (each socket owns an event channel, whose fd is
//!   the socket's number, as rdma-core's is). `rpoll` waits on the same fds.
//! * A flushed receive completion marks the socket disconnected (rdma-core skips it and
//!   leaves the state to its service thread).
//! * `rpoll` reports `POLLHUP`/`POLLERR` of a disconnected socket only once the data
//!   that arrived before the disconnect has been read (rdma-core reports them with
//!   `POLLIN` at once): rstream's poll loop treats `POLLHUP` as an error and would
//!   lose the peer's last message when its `DISCONNECT` arrives right behind it. TCP
//!   gives no `POLLHUP` for a peer's FIN either.
//! * Not supported: `SOCK_DGRAM` rsockets (`EOPNOTSUPP`; rdma-core runs them over UD QPs
//!   and a UDP service thread), `AF_IB`, keepalive (`SO_KEEPALIVE` fails with
//!   `EOPNOTSUPP`), `RDMA_ROUTE`, fork support, the `/etc/rdma/rsocket` tunables.

use core::ffi::{c_int, c_long, c_ulong, c_void};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use libc::{off_t, socklen_t};

mod abi;
mod stream;
mod wire;

use stream::{set_nonblock, st, Rs};

/// Sets `errno`.
fn set_errno(e: c_int) {
    // SAFETY: __errno_location() returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with `errno = e`.
fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

type Sock = Arc<Mutex<Rs>>;

/// The open rsockets by number.
fn table() -> MutexGuard<'static, BTreeMap<c_int, Sock>> {
    static T: Mutex<BTreeMap<c_int, Sock>> = Mutex::new(BTreeMap::new());
    T.lock().unwrap_or_else(|p| p.into_inner())
}

fn lookup(fd: c_int) -> Result<Sock, c_int> {
    table().get(&fd).cloned().ok_or(libc::EBADF)
}

fn lock(s: &Sock) -> MutexGuard<'_, Rs> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` with panics turned into `err` (errno EIO): no panic crosses the C boundary.
fn guard<T>(err: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        err
    })
}

/// Waits in poll(2) for input on `fds` (`timeout_ms` -1: forever).
fn poll_in(fds: &[c_int], timeout_ms: c_int) {
    let mut p: Vec<libc::pollfd> = fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: valid array of `p.len()` pollfds.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
}

/// Drives the socket until `test` holds (rs_get_comp): events, completions, credits;
/// in blocking mode sleeps in poll(2) with the lock released.
fn wait<'a>(s: &'a Sock, mut rs: MutexGuard<'a, Rs>, nonblock: bool, test: fn(&Rs) -> bool) -> (MutexGuard<'a, Rs>, Result<(), c_int>) {
    loop {
        rs.drive_cm();
        rs.progress();
        if test(&rs) {
            return (rs, Ok(()));
        }
        if rs.state & (st::ERROR | st::CONNECT_ERROR) != 0 && rs.state & st::OPENING == 0 && rs.state & st::CONNECTED == 0 {
            let e = if rs.err != 0 { rs.err } else { libc::ENOTCONN };
            return (rs, Err(e));
        }
        if nonblock {
            return (rs, Err(libc::EAGAIN));
        }
        if rs.arm() {
            continue;
        }
        let fds = rs.wait_fds();
        drop(rs);
        poll_in(&fds, -1);
        rs = lock(s);
        rs.take_cq_events();
    }
}

fn not_opening(rs: &Rs) -> bool {
    rs.state & st::OPENING == 0
}

/// Finishes a connection in progress before data calls (rs_do_connect from rsend and
/// rrecv): `EAGAIN` while it goes on in non-blocking mode.
fn finish_connect<'a>(s: &'a Sock, rs: MutexGuard<'a, Rs>, flags: c_int) -> (MutexGuard<'a, Rs>, Result<(), c_int>) {
    if rs.state & st::OPENING == 0 {
        return (rs, Ok(()));
    }
    let nb = rs.nonblocking(flags);
    let (rs, r) = wait(s, rs, nb, not_opening);
    if r.is_ok() && rs.state == st::CONNECT_ERROR {
        let e = rs.err;
        return (rs, Err(e));
    }
    (rs, r)
}

/// Writes the pending iomaps into the peer (rs_send_iomaps).
fn send_iomaps<'a>(s: &'a Sock, mut rs: MutexGuard<'a, Rs>, flags: c_int) -> (MutexGuard<'a, Rs>, Result<(), c_int>) {
    while rs.iomaps.iter().any(|m| m.pending) {
        if !rs.can_send() {
            let nb = rs.nonblocking(flags);
            let (g, r) = wait(s, rs, nb, Rs::conn_can_send);
            rs = g;
            if let Err(e) = r {
                return (rs, Err(e));
            }
            if rs.state & st::WRITABLE == 0 {
                return (rs, Err(libc::ECONNRESET));
            }
        }
        if let Err(e) = rs.send_one_iomap() {
            return (rs, Err(e));
        }
    }
    (rs, Ok(()))
}

/// rsend/rsendv/riowrite: sends `data` (a list of pieces) to the peer's receive buffer
/// (`dest` None) or into its iomap at `offset`.
fn send_all(fd: c_int, pieces: &[&[u8]], flags: c_int, iomap_offset: Option<u64>) -> Result<usize, c_int> {
    let s = lookup(fd)?;
    let rs = lock(&s);
    let (rs, r) = finish_connect(&s, rs, flags);
    r?;
    let (mut rs, r) = send_iomaps(&s, rs, flags);
    r?;
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    let mut staged = Vec::new();
    let mut done = 0usize;
    let (mut piece, mut at) = (0usize, 0usize);
    let mut olen = Rs::olap_start();
    let mut err = None;
    while done < total {
        let mut dest = None;
        let mut limit = usize::MAX;
        if let Some(base) = iomap_offset {
            let off = base + done as u64;
            let Some((ioff, sge)) = rs.find_iomap(off) else { break };
            dest = Some((sge.addr + (off - ioff), sge.key));
            limit = (ioff + u64::from(sge.length) - off) as usize;
        }
        if !rs.can_send() {
            let nb = rs.nonblocking(flags);
            let (g, r) = wait(&s, rs, nb, Rs::conn_can_send);
            rs = g;
            if let Err(e) = r {
                err = Some(e);
                break;
            }
            if rs.state & st::WRITABLE == 0 {
                err = Some(libc::ECONNRESET);
                break;
            }
            continue;
        }
        let x = if iomap_offset.is_some() {
            (rs.xfer_size(total - done, &mut olen) as usize).min(limit)
        } else {
            rs.xfer_size(total - done, &mut olen) as usize
        };
        if x == 0 {
            err = Some(libc::EIO);
            break;
        }
        // Gather `x` bytes of the pieces (one piece: no copy).
        let chunk: &[u8] = if pieces[piece].len() - at >= x {
            let c = &pieces[piece][at..at + x];
            at += x;
            c
        } else {
            staged.clear();
            while staged.len() < x {
                let take = (pieces[piece].len() - at).min(x - staged.len());
                staged.extend_from_slice(&pieces[piece][at..at + take]);
                at += take;
                if at == pieces[piece].len() && staged.len() < x {
                    piece += 1;
                    at = 0;
                }
            }
            &staged
        };
        if at == pieces[piece].len() && piece + 1 < pieces.len() {
            piece += 1;
            at = 0;
        }
        if let Err(e) = rs.write(chunk, dest) {
            err = Some(e);
            break;
        }
        done += x;
    }
    match err {
        Some(e) if done == 0 => Err(e),
        _ => Ok(done),
    }
}

/// rrecv: copies up to `out.len()` bytes (MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT).
fn recv_into(fd: c_int, out: &mut [u8], flags: c_int) -> Result<usize, c_int> {
    let s = lookup(fd)?;
    let rs = lock(&s);
    let (mut rs, r) = finish_connect(&s, rs, flags);
    r?;
    let mut done = 0;
    loop {
        if !rs.have_rdata() {
            let nb = rs.nonblocking(flags);
            let (g, r) = wait(&s, rs, nb, Rs::conn_have_rdata);
            rs = g;
            if let Err(e) = r {
                if done == 0 && !out.is_empty() {
                    return Err(e);
                }
                break;
            }
        }
        if flags & libc::MSG_PEEK != 0 {
            done = rs.copy_out(out, true);
            break;
        }
        done += rs.copy_out(&mut out[done..], false);
        rs.progress();
        if !(done < out.len() && flags & libc::MSG_WAITALL != 0 && rs.state & st::READABLE != 0) {
            break;
        }
    }
    Ok(done)
}

fn ssize(r: Result<usize, c_int>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => fail(e) as isize,
    }
}

/// The byte slices of an iovec array.
///
/// # Safety
/// `iov` points to `n` valid iovecs whose buffers live as long as the result.
unsafe fn iov_slices<'a>(iov: *const libc::iovec, n: c_int) -> Vec<&'a [u8]> {
    if iov.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY: caller contract.
    unsafe { core::slice::from_raw_parts(iov, n as usize) }
        .iter()
        .filter(|v| !v.iov_base.is_null() && v.iov_len > 0)
        // SAFETY: caller contract.
        .map(|v| unsafe { core::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) })
        .collect()
}

/// Copies a socket address out, as rdma-core's rs_copy_addr: truncated to `*len`,
/// `*len` set to the full size.
///
/// # Safety
/// `dst` has `*len` bytes; `src` is a sockaddr_storage.
unsafe fn copy_addr(dst: *mut c_void, src: &libc::sockaddr_storage, len: *mut socklen_t) -> c_int {
    if dst.is_null() || len.is_null() {
        return fail(libc::EFAULT);
    }
    let full = if c_int::from(src.ss_family) == libc::AF_INET6 {
        core::mem::size_of::<libc::sockaddr_in6>()
    } else {
        core::mem::size_of::<libc::sockaddr_in>()
    } as socklen_t;
    // SAFETY: caller contract.
    unsafe {
        let n = (*len).min(full) as usize;
        core::ptr::copy_nonoverlapping((src as *const libc::sockaddr_storage).cast::<u8>(), dst.cast::<u8>(), n);
        *len = full;
    }
    0
}

// ---------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------

fn do_rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    let kind = type_ & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
    if (domain != libc::AF_INET && domain != libc::AF_INET6)
        || (kind != libc::SOCK_STREAM && kind != libc::SOCK_DGRAM)
        || (kind == libc::SOCK_STREAM && protocol != 0 && protocol != libc::IPPROTO_TCP)
        || (kind == libc::SOCK_DGRAM && protocol != 0 && protocol != libc::IPPROTO_UDP)
    {
        return fail(libc::EOPNOTSUPP);
    }
    if kind == libc::SOCK_DGRAM {
        return fail(libc::EOPNOTSUPP);
    }
    // SAFETY: plain rdma_cm calls.
    let ch = unsafe { crate::forward::rdma_create_event_channel() }.cast::<abi::EventChannel>();
    if ch.is_null() {
        return -1;
    }
    let mut id: *mut abi::CmId = core::ptr::null_mut();
    // SAFETY: live channel; valid out-pointer.
    if unsafe { crate::forward::rdma_create_id(ch.cast(), (&mut id as *mut *mut abi::CmId).cast(), core::ptr::null_mut(), abi::RDMA_PS_TCP) } != 0 {
        let e = abi::errno();
        // SAFETY: the channel created above.
        unsafe { crate::forward::rdma_destroy_event_channel(ch.cast()) };
        return fail(e);
    }
    // SAFETY: live channel; its fd is ours to configure (blocking waits use poll(2)).
    let fd = unsafe { (*ch).fd };
    // SAFETY: open fd.
    unsafe { set_nonblock(fd, true) };
    let mut rs = Rs::new(ch, id, None);
    if type_ & libc::SOCK_NONBLOCK != 0 {
        rs.fs_flags = libc::O_NONBLOCK;
    }
    if type_ & libc::SOCK_CLOEXEC != 0 {
        rs.fd_flags = libc::FD_CLOEXEC;
    }
    table().insert(fd, Arc::new(Mutex::new(rs)));
    fd
}

fn do_raccept(fd: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    loop {
        let rs = lock(&s);
        if rs.state != st::LISTENING {
            return fail(libc::EBADF);
        }
        let mut ev: *mut abi::CmEvent = core::ptr::null_mut();
        // SAFETY: live channel (non-blocking fd); valid out-pointer.
        if unsafe { crate::forward::rdma_get_cm_event(rs.channel.cast(), (&mut ev as *mut *mut abi::CmEvent).cast()) } != 0 {
            let e = abi::errno();
            if e != libc::EAGAIN {
                return fail(e);
            }
            if rs.fs_flags & libc::O_NONBLOCK != 0 {
                return fail(libc::EAGAIN);
            }
            let fds = [rs.cm_fd()];
            drop(rs);
            poll_in(&fds, -1);
            continue;
        }
        // SAFETY: a delivered event, valid until acknowledged.
        let (kind, id, pdata, ird, ord) = unsafe {
            let e = &*ev;
            let p = e.conn.private_data.cast::<u8>();
            let data = if p.is_null() { Vec::new() } else { core::slice::from_raw_parts(p, usize::from(e.conn.private_data_len)).to_vec() };
            (e.event, e.id, data, e.conn.initiator_depth, e.conn.responder_resources)
        };
        // SAFETY: acknowledged once.
        unsafe { crate::forward::rdma_ack_cm_event(ev.cast()) };
        if kind != abi::ev::CONNECT_REQUEST {
            continue;
        }
        match accept_one(&rs, id, &pdata, ird, ord) {
            Ok(nfd) => {
                drop(rs);
                if !addr.is_null() && !addrlen.is_null() {
                    do_name(nfd, addr, addrlen, true);
                }
                return nfd;
            }
            Err(_) => {
                // SAFETY: the request's id, refused and destroyed.
                unsafe {
                    crate::forward::rdma_reject(id.cast(), core::ptr::null(), 0);
                }
                continue;
            }
        }
    }
}

/// The new socket of a connection request `id` (rs_accept): its own event channel,
/// QP, buffers, and the REP.
fn accept_one(listener: &Rs, id: *mut abi::CmId, req: &[u8], ird: u8, ord: u8) -> Result<c_int, c_int> {
    // SAFETY: plain rdma_cm call.
    let ch = unsafe { crate::forward::rdma_create_event_channel() }.cast::<abi::EventChannel>();
    if ch.is_null() {
        return Err(abi::errno());
    }
    // SAFETY: live channel.
    let fd = unsafe { (*ch).fd };
    // SAFETY: open fd.
    unsafe { set_nonblock(fd, true) };
    // SAFETY: `id` is the request's id, its event acknowledged; `ch` is live.
    if unsafe { crate::forward::rdma_migrate_id(id.cast(), ch.cast()) } != 0 {
        let e = abi::errno();
        // SAFETY: the channel created above, unused.
        unsafe { crate::forward::rdma_destroy_event_channel(ch.cast()) };
        return Err(e);
    }
    let mut rs = Rs::new(ch, id, Some(listener));
    rs.fs_flags = listener.fs_flags;
    rs.fd_flags = listener.fd_flags;
    if let Err(e) = rs.accept(req, ird, ord) {
        // Reject before the id goes.
        // SAFETY: the request's id.
        unsafe { crate::forward::rdma_reject(id.cast(), core::ptr::null(), 0) };
        rs.free();
        return Err(e);
    }
    table().insert(fd, Arc::new(Mutex::new(rs)));
    Ok(fd)
}

fn do_rconnect(fd: c_int, addr: *const c_void) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut rs = lock(&s);
    if let Err(e) = rs.start_connect(addr.cast()) {
        return fail(e);
    }
    let nb = rs.fs_flags & libc::O_NONBLOCK != 0;
    let (rs, r) = wait(&s, rs, nb, not_opening);
    match r {
        Err(libc::EAGAIN) => fail(libc::EINPROGRESS),
        Err(e) => fail(e),
        Ok(()) if rs.state == st::CONNECT_ERROR => fail(rs.err),
        Ok(()) => 0,
    }
}

fn do_rshutdown(fd: c_int, how: c_int) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut rs = lock(&s);
    if rs.state & st::CONNECTED != 0 {
        let c = match how {
            libc::SHUT_RDWR => {
                rs.state &= !(st::READABLE | st::WRITABLE);
                Some(wire::ctrl::DISCONNECT)
            }
            libc::SHUT_WR => {
                rs.state &= !st::WRITABLE;
                Some(if rs.state & st::READABLE != 0 { wire::ctrl::SHUTDOWN } else { wire::ctrl::DISCONNECT })
            }
            _ => {
                rs.state &= !st::READABLE;
                if rs.state & st::WRITABLE != 0 { None } else { Some(wire::ctrl::DISCONNECT) }
            }
        };
        let Some(c) = c else { return 0 };
        let (g, _) = wait(&s, rs, false, Rs::conn_can_send_ctrl);
        rs = g;
        rs.send_ctrl(c);
    }
    if rs.state & st::CONNECTED != 0 {
        let (g, _) = wait(&s, rs, false, Rs::all_sends_done);
        rs = g;
    }
    if rs.state & st::DISCONNECTED != 0 {
        // SAFETY: live id.
        unsafe { crate::forward::rdma_disconnect(rs.id.cast()) };
    }
    0
}

fn do_rclose(fd: c_int) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let connected = lock(&s).state & st::CONNECTED != 0;
    if connected {
        do_rshutdown(fd, libc::SHUT_RDWR);
    }
    table().remove(&fd);
    lock(&s).free();
    0
}

fn do_name(fd: c_int, addr: *mut c_void, len: *mut socklen_t, peer: bool) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let rs = lock(&s);
    // SAFETY: live id; the caller's buffer of `*len` bytes.
    unsafe {
        let a = if peer { &(*rs.id).dst_addr } else { &(*rs.id).src_addr };
        copy_addr(addr, a, len)
    }
}

/// Reads the `int` option value.
///
/// # Safety
/// `v` points to `len` readable bytes.
unsafe fn opt_int(v: *const c_void, len: socklen_t) -> Result<c_int, c_int> {
    if v.is_null() || (len as usize) < core::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller contract; length checked.
    Ok(unsafe { v.cast::<c_int>().read_unaligned() })
}

/// `SOL_RDMA` (rsocket.h).
const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;

fn do_setsockopt(fd: c_int, level: c_int, name: c_int, v: *const c_void, len: socklen_t) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut rs = lock(&s);
    // SAFETY: the caller's option buffer of `len` bytes.
    let val = match unsafe { opt_int(v, len) } {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let bit = |opts: &mut u64, on: bool| {
        if on { *opts |= 1 << name } else { *opts &= !(1 << name) }
    };
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            // SAFETY: live id; `v` holds an int.
            let r = unsafe { crate::forward::rdma_set_option(rs.id.cast(), abi::RDMA_OPTION_ID, abi::RDMA_OPTION_ID_REUSEADDR, v as *mut c_void, len as usize) };
            if r != 0 && abi::errno() != libc::ENOSYS {
                return -1;
            }
            bit(&mut rs.so_opts, val != 0);
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            if rs.state & (st::CONNECTED | st::OPENING) == 0 {
                rs.rbuf_size = (val as u32) << 1;
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            if rs.state & (st::CONNECTED | st::OPENING) == 0 {
                rs.sbuf_size = ((val as u32) << 1).max(stream::SNDLOWAT << 1);
            }
        }
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => bit(&mut rs.so_opts, val != 0),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            // Inverted so that the default (0) means on, as rdma-core.
            bit(&mut rs.so_opts, val == 0);
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(&mut rs.tcp_opts, val != 0),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION) => {}
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            if val <= 0 {
                return fail(libc::EINVAL);
            }
            rs.keepalive_time = val;
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => {
            rs.ipv4_tos = val;
            // SAFETY: live id; `v` holds the value.
            if unsafe { crate::forward::rdma_set_option(rs.id.cast(), abi::RDMA_OPTION_ID, abi::RDMA_OPTION_ID_TOS, v as *mut c_void, len as usize) } != 0 {
                return -1;
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            // SAFETY: live id; `v` holds an int.
            if unsafe { crate::forward::rdma_set_option(rs.id.cast(), abi::RDMA_OPTION_ID, abi::RDMA_OPTION_ID_AFONLY, v as *mut c_void, len as usize) } != 0 {
                return -1;
            }
            bit(&mut rs.ipv6_opts, val != 0);
        }
        (SOL_RDMA, _) if rs.state >= st::OPENING => return fail(libc::EINVAL),
        (SOL_RDMA, RDMA_SQSIZE) => rs.sq_size = (val as u32).min(0xFFFE) as u16,
        (SOL_RDMA, RDMA_RQSIZE) => rs.rq_size = (val as u32).min(0xFFFE) as u16,
        (SOL_RDMA, RDMA_INLINE) => rs.sq_inline = (val as u32).min(0xFFFE) as u16,
        (SOL_RDMA, RDMA_IOMAPSIZE) => {
            rs.target_iomap_size = wire::scale_to_value(wire::value_to_scale(val.max(0) as u32)) as u16;
        }
        _ => return fail(libc::EOPNOTSUPP),
    }
    0
}

fn do_getsockopt(fd: c_int, level: c_int, name: c_int, v: *mut c_void, len: *mut socklen_t) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if v.is_null() || len.is_null() {
        return fail(libc::EFAULT);
    }
    let mut rs = lock(&s);
    let bit = |opts: u64| c_int::from(opts & (1 << name) != 0);
    let val: c_int = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_OOBINLINE) => bit(rs.so_opts),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => 0,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => rs.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => rs.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            let e = rs.err;
            rs.err = 0;
            e
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => rs.ipv4_tos,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(rs.tcp_opts),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => rs.keepalive_time,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 2048,
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(rs.ipv6_opts),
        (SOL_RDMA, RDMA_SQSIZE) => c_int::from(rs.sq_size),
        (SOL_RDMA, RDMA_RQSIZE) => c_int::from(rs.rq_size),
        (SOL_RDMA, RDMA_INLINE) => c_int::from(rs.sq_inline),
        (SOL_RDMA, RDMA_IOMAPSIZE) => c_int::from(rs.target_iomap_size),
        _ => return fail(libc::EOPNOTSUPP),
    };
    // SAFETY: the caller's buffer of `*len` bytes.
    unsafe {
        if (*len as usize) < core::mem::size_of::<c_int>() {
            return fail(libc::EINVAL);
        }
        v.cast::<c_int>().write_unaligned(val);
        *len = core::mem::size_of::<c_int>() as socklen_t;
    }
    0
}

fn do_rfcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut rs = lock(&s);
    match cmd {
        libc::F_GETFL => rs.fs_flags,
        libc::F_SETFL => {
            rs.fs_flags = arg as c_int;
            0
        }
        libc::F_GETFD => rs.fd_flags,
        libc::F_SETFD => {
            rs.fd_flags = arg as c_int;
            0
        }
        _ => fail(libc::EOPNOTSUPP),
    }
}

/// Readiness of one rsocket for rpoll (rs_poll_rs), never blocking.
fn poll_rs(rs: &mut Rs, events: i16) -> i16 {
    if rs.state == st::LISTENING {
        let mut p = libc::pollfd { fd: rs.cm_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) };
        return p.revents & events;
    }
    rs.drive_cm();
    if rs.state & (st::CONNECTED | st::DISCONNECTED | st::ERROR) != 0 {
        rs.progress();
        let mut r = 0;
        if events & libc::POLLIN != 0 && rs.conn_have_rdata() {
            r |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0 && rs.can_send() {
            r |= libc::POLLOUT;
        }
        // POLLHUP only once the data that arrived before the disconnect is read (see
        // the module doc).
        if rs.state & st::CONNECTED == 0 && !rs.have_rdata() {
            r |= if rs.state == st::DISCONNECTED { libc::POLLHUP } else { libc::POLLERR };
        }
        return r;
    }
    if rs.state == st::CONNECT_ERROR {
        return (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR;
    }
    0
}

fn do_rpoll(fds: *mut libc::pollfd, nfds: c_ulong, timeout: c_int) -> c_int {
    if fds.is_null() && nfds != 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's array of `nfds` pollfds.
    let fds = if nfds == 0 { &mut [][..] } else { unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) } };
    let start = std::time::Instant::now();
    loop {
        let mut ready = 0;
        let mut waits: Vec<libc::pollfd> = Vec::new();
        let mut real: Vec<usize> = Vec::new();
        let mut rearmed = false;
        for (i, p) in fds.iter_mut().enumerate() {
            p.revents = 0;
            match lookup(p.fd) {
                Ok(s) => {
                    let mut rs = lock(&s);
                    p.revents = poll_rs(&mut rs, p.events);
                    if p.revents != 0 {
                        ready += 1;
                    } else {
                        rearmed |= rs.arm();
                        waits.extend(rs.wait_fds().into_iter().map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }));
                    }
                }
                Err(_) => {
                    real.push(i);
                    waits.push(libc::pollfd { fd: p.fd, events: p.events, revents: 0 });
                }
            }
        }
        if rearmed && ready == 0 {
            continue;
        }
        let remaining = if ready > 0 {
            0
        } else if timeout < 0 {
            -1
        } else {
            (i128::from(timeout) - start.elapsed().as_millis() as i128).max(0) as c_int
        };
        // SAFETY: valid array of `waits.len()` pollfds.
        let n = unsafe { libc::poll(waits.as_mut_ptr(), waits.len() as libc::nfds_t, remaining) };
        if n < 0 && abi::errno() != libc::EINTR {
            return -1;
        }
        // The real fds come after the rsockets' wait fds in the same order as `real`.
        let base = waits.len() - real.len();
        for (k, &i) in real.iter().enumerate() {
            let r = waits[base + k].revents;
            if r != 0 {
                fds[i].revents = r;
                ready += 1;
            }
        }
        if ready > 0 {
            return ready;
        }
        for p in fds.iter() {
            if let Ok(s) = lookup(p.fd) {
                lock(&s).take_cq_events();
            }
        }
        if remaining == 0 {
            return 0;
        }
    }
}

fn do_rselect(nfds: c_int, rd: *mut libc::fd_set, wr: *mut libc::fd_set, ex: *mut libc::fd_set, tv: *mut libc::timeval) -> c_int {
    let mut p = Vec::new();
    for fd in 0..nfds.max(0) {
        let mut events = 0;
        // SAFETY: the caller's fd sets (or NULL), `fd < nfds <= FD_SETSIZE`.
        unsafe {
            if !rd.is_null() && libc::FD_ISSET(fd, rd) {
                events |= libc::POLLIN;
            }
            if !wr.is_null() && libc::FD_ISSET(fd, wr) {
                events |= libc::POLLOUT;
            }
            if !ex.is_null() && libc::FD_ISSET(fd, ex) {
                events |= libc::POLLERR;
            }
        }
        if events != 0 {
            p.push(libc::pollfd { fd, events, revents: 0 });
        }
    }
    let timeout = if tv.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        unsafe { ((*tv).tv_sec * 1000 + (*tv).tv_usec / 1000) as c_int }
    };
    let n = do_rpoll(p.as_mut_ptr(), p.len() as c_ulong, timeout);
    if n < 0 {
        return n;
    }
    let mut count = 0;
    // SAFETY: the caller's fd sets.
    unsafe {
        for set in [rd, wr, ex] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
        for q in &p {
            if !rd.is_null() && q.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && q.events & libc::POLLIN != 0 {
                libc::FD_SET(q.fd, rd);
                count += 1;
            }
            if !wr.is_null() && q.revents & (libc::POLLOUT | libc::POLLERR) != 0 && q.events & libc::POLLOUT != 0 {
                libc::FD_SET(q.fd, wr);
                count += 1;
            }
            if !ex.is_null() && q.revents & libc::POLLERR != 0 && q.events & libc::POLLERR != 0 {
                libc::FD_SET(q.fd, ex);
                count += 1;
            }
        }
    }
    count
}

fn do_riomap(fd: c_int, buf: *mut c_void, len: usize, prot: c_int, offset: off_t) -> off_t {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return off_t::from(fail(e)),
    };
    let mut rs = lock(&s);
    // SAFETY: live id.
    let pd = unsafe { (*rs.id).pd };
    if pd.is_null() || prot & !libc::PROT_WRITE != 0 {
        return off_t::from(fail(libc::EINVAL));
    }
    let mut access = abi::IBV_ACCESS_LOCAL_WRITE;
    let index = if prot & libc::PROT_WRITE != 0 {
        access |= abi::IBV_ACCESS_REMOTE_WRITE;
        let used: Vec<usize> = rs.iomaps.iter().filter_map(|m| m.index).collect();
        match (0..rs.remote_iomap_slots()).find(|i| !used.contains(i)) {
            Some(i) => Some(i),
            None => return off_t::from(fail(libc::ENOMEM)),
        }
    } else {
        None
    };
    let mr = match abi::reg_mr(pd, buf.cast(), len, access) {
        Ok(mr) => mr,
        Err(e) => return off_t::from(fail(e)),
    };
    let offset = if offset == -1 { buf as off_t } else { offset };
    rs.iomaps.push(stream::IoMap { offset: offset as u64, mr, index, pending: index.is_some() });
    offset
}

fn do_riounmap(fd: c_int, buf: *mut c_void, len: usize) -> c_int {
    let s = match lookup(fd) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut rs = lock(&s);
    // SAFETY: live registrations of this socket.
    let pos = rs.iomaps.iter().position(|m| unsafe { (*m.mr).addr == buf && (*m.mr).length == len });
    match pos {
        Some(i) => {
            let m = rs.iomaps.remove(i);
            abi::dereg_mr(m.mr);
            0
        }
        None => fail(libc::EINVAL),
    }
}

include!("exports.rs");
