//! QP1, the General Services QP of the device's port: management datagrams (MADs)
//! between endpoints of the host-wide device, as the connection manager (`rverbs-cm`)
//! sends and receives them.
//!
//! Rule (IBTA Vol 1 §13.4, §13.5: the General Services Interface): every port has QP1,
//! which carries 256-byte MADs of the management classes (the Communication Manager is
//! class 0x07); a MAD is addressed to a port, not to a consumer, and the receiving side
//! dispatches it by class and by the fields inside it (for the CM: service ID of a REQ,
//! communication IDs afterwards). Here every process is an endpoint of the host-wide
//! device, so QP1 of this host is the set of endpoints' QP1 queues: a MAD is sent to an
//! endpoint, which the sender finds from the listener table (a REQ) or from the peer's
//! communication ID (every later message).
//!
//! Same-host transport: an endpoint's QP1 receive queue is the FIFO `qp1` in its
//! directory; a record is the sender's endpoint number followed by the MAD, written whole
//! (shorter than `PIPE_BUF`, so concurrent senders never interleave). Delivery between
//! live endpoints is reliable and ordered per sender, so the CM never needs its
//! retransmission timer on this host (it keeps its response timeouts). A peer's death is
//! observable through [`Qp1::watch`].

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::shm::fifo::{self, Fifo};
use crate::shm::registry::Registry;

/// Bytes of a MAD (IBTA Vol 1 §13.4.2).
pub const MAD_LEN: usize = 256;

/// Name of the QP1 receive FIFO in an endpoint directory.
const FIFO_NAME: &str = "qp1";

/// Bytes of a record in the FIFO: sender endpoint (u32, native order), 4 reserved, MAD.
const RECORD_LEN: usize = 8 + MAD_LEN;

/// A received management datagram.
#[derive(Clone)]
pub struct Mad {
    /// The endpoint (process) of this host that sent it.
    pub from: u32,
    /// The datagram.
    pub bytes: [u8; MAD_LEN],
}

impl std::fmt::Debug for Mad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mad").field("from", &self.from).field("class", &self.bytes[1]).finish()
    }
}

/// This process's QP1: receives the MADs peers address to this endpoint and sends MADs
/// to any endpoint of the host. One per process (the receive FIFO has one reader).
pub struct Qp1 {
    /// The device's endpoint registry (`None`: no host-wide endpoint, only this process).
    reg: Option<&'static Registry>,
    /// The endpoint directory, where the receive FIFO is.
    dir: &'static Path,
    ep: u32,
    fifo: Fifo,
}

impl std::fmt::Debug for Qp1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp1").field("endpoint", &self.ep).finish()
    }
}

impl Qp1 {
    /// Opens the QP1 of the endpoint `reg` (none: a private device) whose directory is
    /// `dir` ([`Qp1::open`] opens the device's). Fails with `EBUSY` if it is already open
    /// in this process (its FIFO exists).
    pub(crate) fn open_in(reg: Option<&'static Registry>, dir: &'static Path) -> Result<Qp1> {
        let ep = reg.map_or(0, |r| r.ep);
        let path = dir.join(FIFO_NAME);
        let fifo = match Fifo::create(&path) {
            Ok(f) => f,
            Err(Error::Os(e)) if e.raw_os_error() == Some(libc::EEXIST) => {
                return Err(Error::Busy { what: "QP1 of this process (already open)" })
            }
            Err(e) => return Err(e),
        };
        rustix::io::ioctl_fionbio(fifo.fd(), true)?;
        Ok(Qp1 { reg, dir, ep, fifo })
    }

    /// This process's endpoint number (the top 8 bits of its QPNs).
    pub fn endpoint(&self) -> u32 {
        self.ep
    }

    /// The process id of this endpoint's owner.
    pub fn pid(&self) -> i32 {
        rustix::process::getpid().as_raw_nonzero().get()
    }

    /// The host-wide runtime directory of the device (where host-wide tables live).
    pub fn runtime_dir(&self) -> &Path {
        match self.reg {
            Some(r) => &r.root,
            None => self.dir,
        }
    }

    /// The receive descriptor: readable while a MAD is queued (non-blocking).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fifo.fd()
    }

    /// Takes the next received MAD, if any.
    pub fn recv(&self) -> Result<Option<Mad>> {
        let mut rec = [0u8; RECORD_LEN];
        match self.fifo.recv(&mut rec) {
            Ok(()) => {}
            Err(Error::WouldBlock) => return Ok(None),
            Err(e) => return Err(e),
        }
        let from = u32::from_ne_bytes(rec[..4].try_into().expect("4 bytes"));
        let mut bytes = [0u8; MAD_LEN];
        bytes.copy_from_slice(&rec[8..]);
        Ok(Some(Mad { from, bytes }))
    }

    /// Sends `mad` to QP1 of endpoint `to` (this endpoint included). Fails with
    /// `EHOSTUNREACH` if that endpoint is not alive or has no QP1 open, and with `EAGAIN`
    /// if its queue is full.
    pub fn send(&self, to: u32, mad: &[u8; MAD_LEN]) -> Result<()> {
        let mut rec = [0u8; RECORD_LEN];
        rec[..4].copy_from_slice(&self.ep.to_ne_bytes());
        rec[8..].copy_from_slice(mad);
        if to == self.ep {
            return write_record(self.fifo_writer_self().as_fd(), &rec);
        }
        let unreachable = || Error::Os(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH));
        let reg = self.reg.ok_or_else(unreachable)?;
        let peer = reg.peer(to).map_err(|_| unreachable())?;
        let w = peer.writer(FIFO_NAME).map_err(|_| unreachable())?;
        write_record(w.as_fd(), &rec)
    }

    fn fifo_writer_self(&self) -> OwnedFd {
        // A fresh non-blocking writer: `Fifo::send` drops records silently on a full
        // FIFO, and a MAD sender must learn that.
        fifo::open_writer(&self.dir.join(FIFO_NAME)).expect("own QP1 FIFO exists while open")
    }

    /// A descriptor that becomes readable when endpoint `ep`'s process dies (a pidfd,
    /// pidfd_open(2)). Fails with `EHOSTUNREACH` if it is already dead. For this
    /// endpoint itself, fails with `EINVAL`.
    pub fn watch(&self, ep: u32) -> Result<OwnedFd> {
        if ep == self.ep {
            return Err(Error::invalid("watch endpoint", Rule::OwnEndpoint { ep }));
        }
        let reg = self
            .reg
            .ok_or(Error::Os(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH)))?;
        let peer = reg.peer(ep).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH)))?;
        Ok(rustix::io::fcntl_dupfd_cloexec(peer.pidfd(), 0)?)
    }

    /// The pid of the live owner of endpoint `ep`, or `None` if nobody owns it.
    pub fn owner_pid(&self, ep: u32) -> Option<i32> {
        if ep == self.ep {
            return Some(self.pid());
        }
        let reg = self.reg?;
        reg.peer(ep).ok().filter(|p| p.is_alive()).map(|p| p.pid)
    }
}

fn write_record(fd: BorrowedFd<'_>, rec: &[u8]) -> Result<()> {
    loop {
        match crate::sys::write_no_sigpipe(fd, rec) {
            Err(Errno::INTR) => continue,
            Err(Errno::PIPE) => return Err(Error::Os(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH))),
            Err(e) => return Err(e.into()),
            Ok(n) if n == rec.len() => return Ok(()),
            Ok(_) => return Err(Error::Bug("short write on a FIFO record")),
        }
    }
}

/// The endpoint a QP number belongs to (its top 8 bits; ARCHITECTURE.md §2).
pub fn endpoint_of_qpn(qpn: u32) -> u32 {
    (qpn >> 16) & 0xff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mad_sent_to_the_own_endpoint_arrives_whole_with_the_sender() {
        let q = Qp1::open().unwrap();
        assert!(matches!(Qp1::open(), Err(Error::Busy { .. })), "one QP1 per process");
        assert!(q.recv().unwrap().is_none());
        let mut m = [0u8; MAD_LEN];
        m[0] = 1;
        m[1] = 7;
        m[255] = 0xee;
        q.send(q.endpoint(), &m).unwrap();
        let got = q.recv().unwrap().expect("queued");
        assert_eq!(got.from, q.endpoint());
        assert_eq!(got.bytes, m);
        assert!(q.recv().unwrap().is_none());
        assert_eq!(q.owner_pid(q.endpoint()), Some(std::process::id() as i32));
    }

    #[test]
    fn endpoint_bits_of_a_qpn() {
        assert_eq!(endpoint_of_qpn(0x03_0005), 3);
        assert_eq!(endpoint_of_qpn(0xff_ffff), 255);
    }
}
