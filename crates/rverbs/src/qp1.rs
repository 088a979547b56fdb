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
//! directory; a record is the sender (an endpoint number, or the addresses of another
//! host) followed by the MAD, written whole (shorter than `PIPE_BUF`, so concurrent
//! senders never interleave). Delivery between live endpoints is reliable and ordered per
//! sender, so the CM never needs its retransmission timer on this host (it keeps its
//! response timeouts). A peer's death is observable through [`Qp1::watch`].
//!
//! Other hosts: a MAD to QP1 of another host is a RoCEv2 UD packet to its port 4791
//! ([`Qp1::send_to`]); the owner of this host's port 4791 puts what arrives for QP1 into
//! the FIFO of the endpoint it is for (`transport::gsi`: answers by the communication ID
//! they name, requests to the GSI dispatcher, which [`Qp1::forward`]s them).

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::shm::fifo::{self, Fifo};
use crate::shm::registry::{ep_dir, Registry};
use crate::transport::gsi::{self, RECORD_LEN};
use crate::transport::udp::Net;

pub use crate::transport::gsi::{MadPeer, GSI_QKEY, GSI_QPN, MAD_LEN};

use crate::transport::gsi::FIFO_NAME;

/// A received management datagram.
#[derive(Clone)]
pub struct Mad {
    /// Whoever sent it: an endpoint (process) of this host, or QP1 of another host.
    pub from: MadPeer,
    /// The datagram.
    pub bytes: [u8; MAD_LEN],
}

impl std::fmt::Debug for Mad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mad").field("from", &self.from).field("class", &self.bytes[1]).finish()
    }
}

/// This process's QP1: receives the MADs peers address to this endpoint and sends MADs
/// to any endpoint of the host, or to QP1 of another host over the network transport.
/// One per process (the receive FIFO has one reader).
pub struct Qp1 {
    /// The device's endpoint registry (`None`: no host-wide endpoint, only this process).
    reg: Option<&'static Registry>,
    /// The endpoint directory, where the receive FIFO is.
    dir: &'static Path,
    /// The network transport (`None`: no other host is reachable).
    net: Option<&'static Net>,
    ep: u32,
    fifo: Fifo,
    /// The device slot (`sys::MAX_DEVICES`) of the endpoint, whose port state (an
    /// injected PORT_ERR) this QP1 follows.
    slot: usize,
}

impl std::fmt::Debug for Qp1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp1").field("endpoint", &self.ep).finish()
    }
}

impl Qp1 {
    /// Opens the QP1 of the endpoint `reg` (none: a private device) whose directory is
    /// `dir`, reaching other hosts through `net` ([`Qp1::open`] opens the device's).
    /// Fails with `EBUSY` if it is already open in this process (its FIFO exists).
    pub(crate) fn open_in(reg: Option<&'static Registry>, dir: &'static Path, net: Option<&'static Net>, slot: usize) -> Result<Qp1> {
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
        Ok(Qp1 { reg, dir, net, ep, fifo, slot })
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

    /// Takes the next received MAD, if any. While the port of this process's view of
    /// the device is down (an injected PORT_ERR, docs/fault-injection.md) what arrives is
    /// dropped, as a port whose link is down receives nothing.
    pub fn recv(&self) -> Result<Option<Mad>> {
        let mut rec = [0u8; RECORD_LEN];
        loop {
            match self.fifo.recv(&mut rec) {
                Ok(()) => {}
                Err(Error::WouldBlock) => return Ok(None),
                Err(e) => return Err(e),
            }
            if !crate::fault_plan::port_down(self.slot) {
                break;
            }
        }
        let (from, bytes) = gsi::parse_record(&rec);
        Ok(Some(Mad { from, bytes }))
    }

    /// Sends `mad` to QP1 of endpoint `to` (this endpoint included). Fails with
    /// `EHOSTUNREACH` if that endpoint is not alive or has no QP1 open, and with `EAGAIN`
    /// if its queue is full.
    ///
    /// While the port of this process's view of the device is down (docs/fault-injection.md)
    /// the MAD is lost on the way, as on a link that is down: the call succeeds and
    /// nothing arrives (the connection manager's timeouts notice).
    pub fn send(&self, to: u32, mad: &[u8; MAD_LEN]) -> Result<()> {
        if crate::fault_plan::port_down(self.slot) {
            return Ok(());
        }
        self.write_to(to, &gsi::record(MadPeer::Endpoint(self.ep), mad))
    }

    /// Sends `mad` to `to`: an endpoint of this host as [`Qp1::send`] does, or QP1 of
    /// another host as one RoCEv2 UD packet (P_Key 0xFFFF, Q_Key [`GSI_QKEY`], from QP 1)
    /// from this host's address `local` to `peer:4791`. The network may lose it; fails
    /// with `EHOSTUNREACH` if the network transport does not serve `local`.
    pub fn send_to(&self, to: MadPeer, mad: &[u8; MAD_LEN]) -> Result<()> {
        match to {
            MadPeer::Endpoint(ep) => self.send(ep, mad),
            MadPeer::Remote { .. } if crate::fault_plan::port_down(self.slot) => Ok(()),
            MadPeer::Remote { peer, local } => {
                let net = self.net.ok_or_else(unreachable)?;
                gsi::send(net, local, peer, mad).map_err(Error::Os)
            }
        }
    }

    /// Hands `mad`, received from another host, on to endpoint `ep` with its origin, as
    /// if the network had delivered it there: the GSI dispatcher (`transport::gsi`) does
    /// this for requests whose service another endpoint of the host provides.
    pub fn forward(&self, ep: u32, mad: &Mad) -> Result<()> {
        self.write_to(ep, &gsi::record(mad.from, &mad.bytes))
    }

    /// The largest path MTU (bytes) a connection from this host's address `local` can
    /// use: the IB MTU that fits the link of `local` (as the kernel's rdma_cm takes it
    /// from the bound netdev, `cma_resolve_iboe_route`: `iboe_get_mtu(ndev->mtu)`), the
    /// port's largest (4096) where the network transport does not serve `local` (the
    /// loopback, whose 65536-byte MTU gives 4096 in the kernel too).
    pub fn link_mtu(&self, local: IpAddr) -> u32 {
        self.net
            .and_then(|n| n.sock_of(&crate::gid::Gid::from_ip(local)))
            .map_or(crate::limits::MAX_MTU.bytes(), |s| s.link_mtu)
    }

    fn write_to(&self, to: u32, rec: &[u8; RECORD_LEN]) -> Result<()> {
        if to == self.ep {
            return write_record(self.fifo_writer_self().as_fd(), rec);
        }
        // The endpoint's owner now and its FIFO opened now, not a mapped peer's: the peer
        // may be a process that died and whose number another took since, before the
        // progress thread handled the death (`Registry::owner`); its FIFO is gone, and a
        // MAD that cannot be written means that the receiver died.
        let reg = self.reg.ok_or_else(unreachable)?;
        reg.owner(to).ok_or_else(unreachable)?;
        let w = fifo::open_writer(&ep_dir(&reg.root, to).join(FIFO_NAME)).map_err(|_| unreachable())?;
        write_record(w.as_fd(), rec)
    }

    fn fifo_writer_self(&self) -> OwnedFd {
        // A fresh non-blocking writer: `Fifo::send` drops records silently on a full
        // FIFO, and a MAD sender must learn that.
        fifo::open_writer(&self.dir.join(FIFO_NAME)).expect("own QP1 FIFO exists while open")
    }

    /// A descriptor that becomes readable when process `pid`, which owns endpoint `ep`,
    /// dies (a pidfd, pidfd_open(2)). Fails with `EHOSTUNREACH` if `pid` does not own
    /// `ep` now (it died, and the number may be another process's already). For this
    /// endpoint itself, fails with `EINVAL`.
    pub fn watch(&self, ep: u32, pid: i32) -> Result<OwnedFd> {
        if ep == self.ep {
            return Err(Error::invalid("watch endpoint", Rule::OwnEndpoint { ep }));
        }
        let reg = self.reg.ok_or_else(unreachable)?;
        match reg.owner(ep) {
            Some((owner, pidfd)) if owner == pid => Ok(pidfd),
            _ => Err(unreachable()),
        }
    }

    /// The pid of the live owner of endpoint `ep` now, or `None` if nobody owns it.
    ///
    /// Asked of the host at each call (`Registry::owner`), not of the peers this process
    /// mapped: an endpoint number is reused as soon as its process died, before this
    /// process's progress thread has learnt of the death, and a MAD from the number's new
    /// owner must be taken as the new process's.
    pub fn owner_pid(&self, ep: u32) -> Option<i32> {
        if ep == self.ep {
            return Some(self.pid());
        }
        self.reg?.owner(ep).map(|(pid, _)| pid)
    }
}

fn unreachable() -> Error {
    Error::Os(std::io::Error::from_raw_os_error(libc::EHOSTUNREACH))
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
        assert_eq!(got.from, MadPeer::Endpoint(q.endpoint()));
        assert_eq!(got.bytes, m);
        assert!(q.recv().unwrap().is_none());
        assert_eq!(q.owner_pid(q.endpoint()), Some(std::process::id() as i32));
    }

    /// An endpoint number whose process died is its new owner's at once, though this
    /// process still has the dead one mapped (its progress thread has not handled the
    /// death yet): the connection manager takes a MAD's sender to be `owner_pid`, watches
    /// that pid, and answers with `send`. A dead pid there made the watch fail a new
    /// connection request (rdma_accept EINVAL, state Failed), and the dead process's
    /// FIFO made the answer fail (the connection lost): the rpma interop tests with C
    /// clients in turn, which take one number after another, about 1 run in 10 under load.
    #[test]
    fn a_reused_endpoint_number_is_its_new_owners_before_the_old_death_is_handled() {
        use crate::shm::fifo::Fifo;
        use crate::shm::registry::Registry;
        use rustix::event::{poll, PollFd, PollFlags};
        let root = std::env::temp_dir().join(format!("rverbs-qp1-owner-{}", std::process::id()));
        let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        let mut m = [0u8; MAD_LEN];
        m[1] = 7;
        let mut rec = [0u8; RECORD_LEN];
        // The old endpoint: its header names a process that lives until its stdin closes.
        let old = Registry::claim(&root, false, |_| {}).unwrap();
        let me: &'static Registry = Box::leak(Box::new(Registry::claim(&root, false, |_| {}).unwrap()));
        let tables = crate::shm::tables::Tables::create(&old.dir).unwrap();
        let old_qp1 = Fifo::create(&old.dir.join(FIFO_NAME)).unwrap();
        let mut child = std::process::Command::new("cat").stdin(std::process::Stdio::piped()).spawn().unwrap();
        let dead = child.id() as i32;
        old.set_header_pid(child.id());
        let q = Qp1::open_in(Some(me), Box::leak(me.dir.clone().into_boxed_path()), None, crate::sys::default_device_slot()).unwrap();
        let ep = old.ep;
        assert_eq!(q.owner_pid(ep), Some(dead));
        q.send(ep, &m).unwrap();
        old_qp1.recv(&mut rec).unwrap();
        assert_eq!(me.peer(ep).unwrap().pid, dead, "mapped");
        // It dies (a zombie until reaped), and its number goes to a new process (here:
        // this one, as another endpoint), which opens its QP1.
        drop(child.stdin.take());
        let pidfd = rustix::process::pidfd_open(rustix::process::Pid::from_raw(dead).unwrap(), rustix::process::PidfdFlags::empty()).unwrap();
        assert_eq!(poll(&mut [PollFd::new(&pidfd, PollFlags::IN)], None).unwrap(), 1, "exited");
        assert_eq!(q.owner_pid(ep), None, "exited, its number still locked");
        drop((old_qp1, tables, old));
        let new = Registry::claim(&root, false, |_| {}).unwrap();
        assert_eq!(new.ep, ep);
        let new_qp1 = Fifo::create(&new.dir.join(FIFO_NAME)).unwrap();
        assert_eq!(me.peer(ep).unwrap().pid, dead, "the mapped peer is stale: nobody handled its death");
        let now = std::process::id() as i32;
        assert_eq!(q.owner_pid(ep), Some(now), "the number's owner now, not the dead process");
        assert!(q.watch(ep, dead).is_err(), "the dead process owns nothing");
        let fd = q.watch(ep, now).expect("the new owner is watched");
        assert_eq!(poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&zero)).unwrap(), 0, "alive");
        q.send(ep, &m).expect("a MAD to the number reaches its new owner");
        new_qp1.recv(&mut rec).unwrap();
        assert_eq!(gsi::parse_record(&rec), (MadPeer::Endpoint(q.endpoint()), m));
        // Released: nobody owns it, nothing reaches it.
        drop((new_qp1, new));
        assert_eq!(q.owner_pid(ep), None);
        assert!(q.watch(ep, now).is_err());
        assert!(q.send(ep, &m).is_err());
        child.wait().unwrap();
        drop(q);
        let _ = std::fs::remove_dir_all(&root);
    }
}
