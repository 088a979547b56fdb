//! Helpers: address lookup (rdma_getaddrinfo(3)'s part librpma uses) and bounded waits.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rverbs_cm::{Event, EventChannel};

use crate::error::{Error, Result};

/// The first socket address `addr` (an IPv4/IPv6 literal or a host name) and `port` name.
///
/// librpma asks rdma_getaddrinfo(3) and reports its failure as `RPMA_E_PROVIDER`.
pub(crate) fn lookup(addr: &str, port: u16) -> Result<SocketAddr> {
    (addr, port)
        .to_socket_addrs()
        .map_err(|_| Error::Provider(libc::EADDRNOTAVAIL))?
        .next()
        .ok_or(Error::Provider(libc::EADDRNOTAVAIL))
}

/// Waits up to `timeout` (forever if `None`) for `fd` to become readable; returns whether
/// it did.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ts = left.map(|l| rustix::time::Timespec { tv_sec: l.as_secs() as i64, tv_nsec: i64::from(l.subsec_nanos()) });
        let mut fds = [rustix::event::PollFd::from_borrowed_fd(fd, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(n) if n > 0 => return Ok(true),
            Ok(_) => {
                if left.is_some_and(|l| l.is_zero()) || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(false);
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Error::Provider(e.raw_os_error())),
        }
    }
}

/// The next connection-manager event of `ch`, waiting up to `timeout` (forever if
/// `None`).
///
/// Errors: `NoEvent` when the channel's fd is non-blocking and nothing is queued;
/// `Provider(ETIMEDOUT)` when the timeout passes; `Provider` for other failures.
pub(crate) fn cm_event(ch: &EventChannel, timeout: Option<Duration>) -> Result<Event> {
    if let Some(t) = timeout {
        if let Some(ev) = ch.try_get_event() {
            return Ok(ev);
        }
        if !wait_readable(ch.fd(), Some(t))? {
            return Err(Error::Provider(libc::ETIMEDOUT));
        }
    }
    match ch.get_event() {
        Ok(ev) => Ok(ev),
        Err(rverbs_cm::Error::WouldBlock) => Err(Error::NoEvent),
        Err(e) => Err(e.into()),
    }
}
