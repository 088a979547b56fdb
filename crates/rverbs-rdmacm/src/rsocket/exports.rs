// The 27 exported functions (included by mod.rs): argument translation only.

export! {
    /// rsocket(3): a stream socket (`SOCK_DGRAM` fails with `EOPNOTSUPP`).
    #[export("RDMACM_1.0")]
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
        guard(-1, || do_rsocket(domain, type_, protocol))
    }

    /// rbind (rsocket(7)): rdma_bind_addr(3).
    #[export("RDMACM_1.0")]
    fn rbind(socket: c_int, addr: *const c_void, addrlen: socklen_t) -> c_int {
        let _ = addrlen;
        guard(-1, || match lookup(socket) {
            Ok(s) => match lock(&s).bind(addr.cast()) {
                Ok(()) => 0,
                Err(e) => fail(e),
            },
            Err(e) => fail(e),
        })
    }

    /// rlisten (rsocket(7)): rdma_listen(3).
    #[export("RDMACM_1.0")]
    fn rlisten(socket: c_int, backlog: c_int) -> c_int {
        guard(-1, || match lookup(socket) {
            Ok(s) => match lock(&s).listen(backlog) {
                Ok(()) => 0,
                Err(e) => fail(e),
            },
            Err(e) => fail(e),
        })
    }

    /// raccept (rsocket(7)): the next connection request, accepted.
    #[export("RDMACM_1.0")]
    fn raccept(socket: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int {
        guard(-1, || do_raccept(socket, addr, addrlen))
    }

    /// rconnect (rsocket(7)); `EINPROGRESS` on a non-blocking socket.
    #[export("RDMACM_1.0")]
    fn rconnect(socket: c_int, addr: *const c_void, addrlen: socklen_t) -> c_int {
        let _ = addrlen;
        guard(-1, || do_rconnect(socket, addr))
    }

    /// rshutdown (rsocket(7)): a DISCONNECT or SHUTDOWN control message, then the
    /// sends drained.
    #[export("RDMACM_1.0")]
    fn rshutdown(socket: c_int, how: c_int) -> c_int {
        guard(-1, || do_rshutdown(socket, how))
    }

    /// rclose (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn rclose(socket: c_int) -> c_int {
        guard(-1, || do_rclose(socket))
    }

    /// rrecv (rsocket(7)): `MSG_PEEK`, `MSG_WAITALL`, `MSG_DONTWAIT`.
    #[export("RDMACM_1.0")]
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
        guard(-1, || {
            if buf.is_null() && len != 0 {
                return fail(libc::EFAULT) as isize;
            }
            // SAFETY: the caller's buffer of `len` bytes.
            let out = if len == 0 { &mut [][..] } else { unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) } };
            ssize(recv_into(socket, out, flags))
        })
    }

    /// rrecvfrom (rsocket(7)): rrecv, then the peer's address.
    #[export("RDMACM_1.0")]
    fn rrecvfrom(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        flags: c_int,
        src_addr: *mut c_void,
        addrlen: *mut socklen_t,
    ) -> isize {
        // SAFETY: the caller's contract.
        let n = unsafe { rrecv(socket, buf, len, flags) };
        if n > 0 && !src_addr.is_null() {
            guard(-1, || do_name(socket, src_addr, addrlen, true));
        }
        n
    }

    /// rrecvmsg (rsocket(7)): the first iovec only, as rdma-core; control data
    /// `EOPNOTSUPP`.
    #[export("RDMACM_1.0")]
    fn rrecvmsg(socket: c_int, msg: *mut c_void, flags: c_int) -> isize {
        if msg.is_null() {
            return fail(libc::EFAULT) as isize;
        }
        // SAFETY: the caller's msghdr.
        let m = unsafe { &*msg.cast::<libc::msghdr>() };
        if !m.msg_control.is_null() && m.msg_controllen != 0 {
            return fail(libc::EOPNOTSUPP) as isize;
        }
        if m.msg_iov.is_null() || m.msg_iovlen == 0 {
            return 0;
        }
        // SAFETY: the caller's first iovec.
        let v = unsafe { &*m.msg_iov };
        // SAFETY: the caller's contract.
        unsafe { rrecv(socket, v.iov_base, v.iov_len, flags) }
    }

    /// rsend (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
        guard(-1, || {
            if buf.is_null() && len != 0 {
                return fail(libc::EFAULT) as isize;
            }
            // SAFETY: the caller's buffer of `len` bytes.
            let data = if len == 0 { &[][..] } else { unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) } };
            ssize(send_all(socket, &[data], flags, None))
        })
    }

    /// rsendto (rsocket(7)): a stream socket ignores the address, as rdma-core.
    #[export("RDMACM_1.0")]
    fn rsendto(
        socket: c_int,
        buf: *const c_void,
        len: usize,
        flags: c_int,
        dest_addr: *const c_void,
        addrlen: socklen_t,
    ) -> isize {
        let _ = (dest_addr, addrlen);
        // SAFETY: the caller's contract.
        unsafe { rsend(socket, buf, len, flags) }
    }

    /// rsendmsg (rsocket(7)): every iovec; control data `EOPNOTSUPP`.
    #[export("RDMACM_1.0")]
    fn rsendmsg(socket: c_int, msg: *const c_void, flags: c_int) -> isize {
        guard(-1, || {
            if msg.is_null() {
                return fail(libc::EFAULT) as isize;
            }
            // SAFETY: the caller's msghdr.
            let m = unsafe { &*msg.cast::<libc::msghdr>() };
            if !m.msg_control.is_null() && m.msg_controllen != 0 {
                return fail(libc::EOPNOTSUPP) as isize;
            }
            // SAFETY: the caller's iovecs.
            let pieces = unsafe { iov_slices(m.msg_iov, m.msg_iovlen as c_int) };
            ssize(send_all(socket, &pieces, flags, None))
        })
    }

    /// rread (rsocket(7)): rrecv without flags.
    #[export("RDMACM_1.0")]
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize {
        // SAFETY: the caller's contract.
        unsafe { rrecv(socket, buf, count, 0) }
    }

    /// rreadv (rsocket(7)): into the first iovec, as rdma-core.
    #[export("RDMACM_1.0")]
    fn rreadv(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize {
        if iov.is_null() || iovcnt <= 0 {
            return fail(libc::EINVAL) as isize;
        }
        // SAFETY: the caller's first iovec.
        let v = unsafe { &*iov.cast::<libc::iovec>() };
        // SAFETY: the caller's contract.
        unsafe { rrecv(socket, v.iov_base, v.iov_len, 0) }
    }

    /// rwrite (rsocket(7)): rsend without flags.
    #[export("RDMACM_1.0")]
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize {
        // SAFETY: the caller's contract.
        unsafe { rsend(socket, buf, count, 0) }
    }

    /// rwritev (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn rwritev(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize {
        guard(-1, || {
            // SAFETY: the caller's iovecs.
            let pieces = unsafe { iov_slices(iov.cast(), iovcnt) };
            ssize(send_all(socket, &pieces, 0, None))
        })
    }

    /// rpoll (rsocket(7)): rsockets and ordinary fds together.
    #[export("RDMACM_1.0")]
    fn rpoll(fds: *mut c_void, nfds: c_ulong, timeout: c_int) -> c_int {
        guard(-1, || do_rpoll(fds.cast(), nfds, timeout))
    }

    /// rselect (rsocket(7)): over rpoll.
    #[export("RDMACM_1.0")]
    fn rselect(
        nfds: c_int,
        readfds: *mut c_void,
        writefds: *mut c_void,
        exceptfds: *mut c_void,
        timeout: *mut c_void,
    ) -> c_int {
        guard(-1, || do_rselect(nfds, readfds.cast(), writefds.cast(), exceptfds.cast(), timeout.cast()))
    }

    /// rgetpeername (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn rgetpeername(socket: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int {
        guard(-1, || do_name(socket, addr, addrlen, true))
    }

    /// rgetsockname (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn rgetsockname(socket: c_int, addr: *mut c_void, addrlen: *mut socklen_t) -> c_int {
        guard(-1, || do_name(socket, addr, addrlen, false))
    }

    /// rsetsockopt (rsocket(7)): the options rdma-core keeps; others `EOPNOTSUPP`.
    #[export("RDMACM_1.0")]
    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: socklen_t,
    ) -> c_int {
        guard(-1, || do_setsockopt(socket, level, optname, optval, optlen))
    }

    /// rgetsockopt (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut socklen_t,
    ) -> c_int {
        guard(-1, || do_getsockopt(socket, level, optname, optval, optlen))
    }

    /// rfcntl (rsocket(7)): `F_GETFL`/`F_SETFL` (`O_NONBLOCK`), `F_GETFD`/`F_SETFD`.
    ///
    /// C declares `int rfcntl(int socket, int cmd, ... /* arg */)`. This definition has
    /// the fixed arity `(int, int, long)`, which is ABI-safe on x86_64 SysV (and
    /// aarch64 Linux): a variadic caller passes the first integer arguments in the same
    /// registers as a fixed-arity one (the `%al` vector count it sets is ignored here),
    /// and a missing third argument is only read by the commands that take one.
    #[export("RDMACM_1.0")]
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
        guard(-1, || do_rfcntl(socket, cmd, arg))
    }

    /// riomap (rsocket(7)): registers `buf` and, with `PROT_WRITE`, offers it to the
    /// peer's riowrite at `offset` (-1: the buffer's address); `(off_t)-1` on error.
    #[export("RDMACM_1.0")]
    fn riomap(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        offset: off_t,
    ) -> off_t {
        let _ = flags;
        guard(-1, || do_riomap(socket, buf, len, prot, offset))
    }

    /// riounmap (rsocket(7)).
    #[export("RDMACM_1.0")]
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
        guard(-1, || do_riounmap(socket, buf, len))
    }

    /// riowrite (rsocket(7)): RDMA WRITEs into the peer's mapping at `offset`;
    /// `(size_t)-1` on error.
    #[export("RDMACM_1.0")]
    fn riowrite(
        socket: c_int,
        buf: *const c_void,
        count: usize,
        offset: off_t,
        flags: c_int,
    ) -> usize {
        guard(usize::MAX, || {
            if buf.is_null() && count != 0 {
                fail(libc::EFAULT);
                return usize::MAX;
            }
            // SAFETY: the caller's buffer of `count` bytes.
            let data = if count == 0 { &[][..] } else { unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), count) } };
            match send_all(socket, &[data], flags, Some(offset as u64)) {
                Ok(n) => n,
                Err(e) => {
                    fail(e);
                    usize::MAX
                }
            }
        })
    }
}
