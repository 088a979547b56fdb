//! The rsocket family of rdma-core 44 (`<rdma/rsocket.h>`): exported with their
//! `RDMACM_1.0` versions so that programs linked against them load, each failing
//! cleanly: rverbs has no rsockets. Every function sets `errno = ENOSYS` and returns
//! -1 (`ssize_t` -1 for the data calls, `(off_t)-1` for `riomap`, `(size_t)-1` for
//! `riowrite`, rdma-core's error values).

#![allow(unused_variables)]

use core::ffi::{c_int, c_long, c_ulong, c_void};

use libc::{off_t, socklen_t};

/// -1 with `errno = ENOSYS`.
fn enosys() -> c_int {
    // SAFETY: __errno_location() returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// -1 (`ssize_t`) with `errno = ENOSYS`.
fn enosys_ssize() -> isize {
    enosys() as isize
}

export! {
    /// rsocket(3): not supported.
    #[export("RDMACM_1.0")]
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int { enosys() }

    /// rbind: not supported.
    #[export("RDMACM_1.0")]
    fn rbind(socket: c_int, addr: *const c_void, addrlen: socklen_t) -> c_int { enosys() }

    /// rlisten: not supported.
    #[export("RDMACM_1.0")]
    fn rlisten(socket: c_int, backlog: c_int) -> c_int { enosys() }

    /// raccept: not supported.
    #[export("RDMACM_1.0")]
    fn raccept(socket: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int { enosys() }

    /// rconnect: not supported.
    #[export("RDMACM_1.0")]
    fn rconnect(socket: c_int, addr: *const c_void, addrlen: socklen_t) -> c_int { enosys() }

    /// rshutdown: not supported.
    #[export("RDMACM_1.0")]
    fn rshutdown(socket: c_int, how: c_int) -> c_int { enosys() }

    /// rclose: not supported.
    #[export("RDMACM_1.0")]
    fn rclose(socket: c_int) -> c_int { enosys() }

    /// rrecv: not supported.
    #[export("RDMACM_1.0")]
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize { enosys_ssize() }

    /// rrecvfrom: not supported.
    #[export("RDMACM_1.0")]
    fn rrecvfrom(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        flags: c_int,
        src_addr: *mut c_void,
        addrlen: *mut socklen_t,
    ) -> isize { enosys_ssize() }

    /// rrecvmsg: not supported.
    #[export("RDMACM_1.0")]
    fn rrecvmsg(socket: c_int, msg: *mut c_void, flags: c_int) -> isize { enosys_ssize() }

    /// rsend: not supported.
    #[export("RDMACM_1.0")]
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize { enosys_ssize() }

    /// rsendto: not supported.
    #[export("RDMACM_1.0")]
    fn rsendto(
        socket: c_int,
        buf: *const c_void,
        len: usize,
        flags: c_int,
        dest_addr: *const c_void,
        addrlen: socklen_t,
    ) -> isize { enosys_ssize() }

    /// rsendmsg: not supported.
    #[export("RDMACM_1.0")]
    fn rsendmsg(socket: c_int, msg: *const c_void, flags: c_int) -> isize { enosys_ssize() }

    /// rread: not supported.
    #[export("RDMACM_1.0")]
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize { enosys_ssize() }

    /// rreadv: not supported.
    #[export("RDMACM_1.0")]
    fn rreadv(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize { enosys_ssize() }

    /// rwrite: not supported.
    #[export("RDMACM_1.0")]
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize { enosys_ssize() }

    /// rwritev: not supported.
    #[export("RDMACM_1.0")]
    fn rwritev(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize { enosys_ssize() }

    /// rpoll: not supported.
    #[export("RDMACM_1.0")]
    fn rpoll(fds: *mut c_void, nfds: c_ulong, timeout: c_int) -> c_int { enosys() }

    /// rselect: not supported.
    #[export("RDMACM_1.0")]
    fn rselect(
        nfds: c_int,
        readfds: *mut c_void,
        writefds: *mut c_void,
        exceptfds: *mut c_void,
        timeout: *mut c_void,
    ) -> c_int { enosys() }

    /// rgetpeername: not supported.
    #[export("RDMACM_1.0")]
    fn rgetpeername(socket: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int { enosys() }

    /// rgetsockname: not supported.
    #[export("RDMACM_1.0")]
    fn rgetsockname(socket: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int { enosys() }

    /// rsetsockopt: not supported.
    #[export("RDMACM_1.0")]
    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: socklen_t,
    ) -> c_int { enosys() }

    /// rgetsockopt: not supported.
    #[export("RDMACM_1.0")]
    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut socklen_t,
    ) -> c_int { enosys() }

    /// rfcntl: not supported.
    ///
    /// C declares `int rfcntl(int socket, int cmd, ... /* arg */)`. This definition has
    /// the fixed arity `(int, int, long)`, which is ABI-safe on x86_64 SysV (and
    /// aarch64 Linux): a variadic caller passes the first integer arguments in the same
    /// registers as a fixed-arity one (the `%al` vector count it sets is ignored here),
    /// and a missing third argument is simply never read meaningfully.
    #[export("RDMACM_1.0")]
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int { enosys() }

    /// riomap: not supported; `(off_t)-1`.
    #[export("RDMACM_1.0")]
    fn riomap(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        offset: off_t,
    ) -> off_t { off_t::from(enosys()) }

    /// riounmap: not supported.
    #[export("RDMACM_1.0")]
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int { enosys() }

    /// riowrite: not supported; `(size_t)-1`.
    #[export("RDMACM_1.0")]
    fn riowrite(
        socket: c_int,
        buf: *const c_void,
        count: usize,
        offset: off_t,
        flags: c_int,
    ) -> usize {
        enosys();
        usize::MAX
    }
}
