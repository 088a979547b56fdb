//! Event FIFOs: the completion channels, the asynchronous event queues and the progress
//! thread's doorbell are named pipes in the endpoint's directory, so a peer process can
//! queue an event for this process directly — no help from this process's CPU, and the
//! application's fd becomes readable at once.
//!
//! Rule (ibv_get_cq_event(3); rdma-core reads the channel fd): the fd is a real kernel fd,
//! readable exactly while an event is queued, blocking unless the application sets
//! O_NONBLOCK. Records are written whole (at most PIPE_BUF bytes, so writes are atomic
//! among writers) and read whole.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};

/// The owner's side of a FIFO: a read descriptor (the application's fd) and a
/// non-blocking write descriptor for local producers.
pub(crate) struct Fifo {
    read: OwnedFd,
    write: OwnedFd,
    path: PathBuf,
}

impl std::fmt::Debug for Fifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fifo").field("path", &self.path).finish()
    }
}

impl Fifo {
    /// Creates the FIFO at `path` (removed when dropped).
    pub(crate) fn create(path: &Path) -> Result<Fifo> {
        rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::from_raw_mode(0o600))?;
        // O_RDWR keeps a writer open, so reads never see end-of-file; it is blocking by
        // default, as ibv_get_cq_event(3) expects.
        let opened = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(Error::from)
            .and_then(|read| Ok((read, open_writer(path)?)));
        match opened {
            Ok((read, write)) => Ok(Fifo { read, write, path: path.to_owned() }),
            Err(e) => {
                // Out of descriptors (EMFILE) after the FIFO exists: it must not stay
                // behind in the endpoint directory.
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// The descriptor the application reads (and may poll or make non-blocking).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Queues a record from this process.
    pub(crate) fn send(&self, record: &[u8]) {
        send_on(self.write.as_fd(), record);
    }

    /// Reads one record of `buf.len()` bytes: blocks while empty unless the descriptor is
    /// non-blocking (`Error::WouldBlock`).
    ///
    /// Writers of this crate write records whole and atomically (at most `PIPE_BUF`
    /// bytes), so when part of a record has been read the rest is already in the pipe.
    /// A part with nothing after it was written by another process of the user (any of
    /// them can open the FIFO): it is discarded, which also brings the stream back to
    /// record boundaries once the garbage is consumed, instead of waiting for bytes
    /// that never come (a non-blocking reader, the doorbell, would spin for ever).
    pub(crate) fn recv(&self, buf: &mut [u8]) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match rustix::io::read(&self.read, &mut buf[got..]) {
                Ok(0) => return Err(Error::Bug("end of file on an event FIFO")),
                Ok(n) => {
                    got += n;
                    if got < buf.len() && rustix::io::ioctl_fionread(&self.read).unwrap_or(0) == 0 {
                        tracing::warn!(bytes = got, "discarded a partial record another process wrote to an event FIFO");
                        got = 0;
                    }
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Opens a FIFO of another endpoint for writing, without blocking.
pub(crate) fn open_writer(path: &Path) -> Result<OwnedFd> {
    Ok(rustix::fs::open(path, OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?)
}

/// Writes one record to a FIFO; a full FIFO drops it (records are bounded by the
/// number of armed CQs and raised events, so this only happens if nobody reads).
pub(crate) fn send_on(fd: BorrowedFd<'_>, record: &[u8]) {
    debug_assert!(record.len() <= 512);
    loop {
        match crate::sys::write_no_sigpipe(fd, record) {
            Err(Errno::INTR) => continue,
            Err(e) => {
                tracing::warn!(%e, "event FIFO write failed; event dropped");
                return;
            }
            Ok(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_from_owner_and_peer_arrive_whole_and_in_order() {
        let dir = std::env::temp_dir().join(format!("rverbs-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = Fifo::create(&dir.join("ch")).unwrap();
        rustix::io::ioctl_fionbio(f.fd(), true).unwrap();
        let mut b = [0u8; 8];
        assert!(matches!(f.recv(&mut b), Err(Error::WouldBlock)));
        f.send(&1u64.to_ne_bytes());
        let peer = open_writer(&f.path).unwrap();
        send_on(peer.as_fd(), &2u64.to_ne_bytes());
        f.recv(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 1);
        f.recv(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 2);
        assert!(matches!(f.recv(&mut b), Err(Error::WouldBlock)));
        drop(f);
        assert!(!dir.join("ch").exists());
        std::fs::remove_dir(&dir).unwrap();
    }

    // Hostile-segment harness (tests/chaos/hostile_seg.sh), fifo: another process wrote
    // one byte into the doorbell FIFO; the progress thread, reading it non-blocking,
    // waited for the other 7 in a yield loop for ever.
    #[test]
    fn a_partial_record_from_another_process_is_discarded_not_waited_for() {
        let dir = std::env::temp_dir().join(format!("rverbs-fifo-part-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = std::sync::Arc::new(Fifo::create(&dir.join("bell")).unwrap());
        rustix::io::ioctl_fionbio(f.fd(), true).unwrap();
        let hostile = open_writer(&dir.join("bell")).unwrap();
        send_on(hostile.as_fd(), b"x");
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = f.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 8];
            let _ = tx.send(matches!(f2.recv(&mut b), Err(Error::WouldBlock)));
        });
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).expect("recv returned"), "garbage dropped");
        // The stream is at a record boundary again.
        f.send(&3u64.to_ne_bytes());
        let mut b = [0u8; 8];
        f.recv(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 3);
        // Garbage glued to whole records: the records it overlaps are lost, the stream
        // is back at a boundary when the pipe is empty.
        send_on(hostile.as_fd(), b"abc");
        f.send(&4u64.to_ne_bytes());
        assert!(f.recv(&mut b).is_ok(), "8 bytes: 3 garbage and 5 of the record");
        assert!(matches!(f.recv(&mut b), Err(Error::WouldBlock)), "the 3 left are discarded");
        f.send(&5u64.to_ne_bytes());
        f.recv(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 5);
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
