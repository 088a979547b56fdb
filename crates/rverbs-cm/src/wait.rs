//! The bounded wait of the RAII helpers ([`crate::conn`] and, over librdmacm,
//! `rdma_core::conn`): the next event of a channel within a timeout that names the step,
//! the peer and the event awaited.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::error::{Error, Peer, Result};
use crate::event::EventKind;

/// Takes the next event with `take` (`None`: none queued), waiting for `fd` (the
/// channel's) to become readable between tries, up to `timeout`: then an
/// [`Error::TimedOut`] that names `step`, `peer` and the event `awaited`.
pub(crate) fn next_event<E>(
    fd: BorrowedFd<'_>,
    timeout: Duration,
    step: &'static str,
    peer: Option<SocketAddr>,
    awaited: EventKind,
    mut take: impl FnMut() -> Result<Option<E>>,
) -> Result<E> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(ev) = take()? {
            return Ok(ev);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::TimedOut { step, peer: Peer(peer), awaited, waited: timeout });
        }
        let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let mut fds = [rustix::event::PollFd::from_borrowed_fd(fd, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}
