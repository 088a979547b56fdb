//! What the examples share: running the server and the client (two threads of one
//! process by default, or `server <addr> <port>` / `client <addr> <port> [args…]` as
//! two processes), the private-data layout of librpma's examples, and the closing
//! sequences; `gpspm` holds example 09's messages.
#![allow(dead_code)]

pub mod gpspm;

use std::sync::mpsc;
use std::time::Duration;

use rverbs_rpma::{Conn, ConnEvent, ConnReq, Error, Peer, Result};

/// How long any wait of an example may take (librpma's examples use 15 s).
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// A server: serves one connection at `addr`:`port` and calls `ready` with the port
/// once it listens.
pub type Server = fn(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()>;
/// A client: connects to `addr`:`port`; `args` are the example's extra arguments.
pub type Client = fn(addr: &str, port: u16, args: &[String]) -> Result<()>;

/// Runs the example as its command line says and exits: 0 if every side succeeded.
pub fn main(name: &str, server: Server, client: Client, default_args: &[&str]) -> ! {
    main_with(name, server, client, default_args, std::env::args().skip(1).collect())
}

/// As [`main`] with the command line `args` (without the program name): for examples
/// that take arguments of their own first.
pub fn main_with(name: &str, server: Server, client: Client, default_args: &[&str], args: Vec<String>) -> ! {
    let result = match args.first().map(String::as_str) {
        None => both(server, client, default_args),
        Some("server") if args.len() >= 3 => port(&args[2]).and_then(|p| {
            server(&args[1], p, &|p| {
                // For whoever starts the client (port 0 picks one).
                println!("Waiting for incoming connection on {}:{p}", args[1]);
                let _ = std::io::Write::flush(&mut std::io::stdout());
            })
        }),
        Some("client") if args.len() >= 3 => port(&args[2]).and_then(|p| client(&args[1], p, &args[3..])),
        _ => {
            eprintln!("usage: {name} [server <addr> <port> | client <addr> <port> [{}]]", default_args.join(" "));
            std::process::exit(2);
        }
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{name}: {e} (code {})", e.code());
            std::process::exit(1);
        }
    }
}

fn port(s: &str) -> Result<u16> {
    s.parse().map_err(|_| Error::Inval)
}

/// An IPv4 address of this host on an interface other than the loopback, from rverbs0's
/// GID table. A server names its device by its address (rpma_utils_get_ibv_context(3)
/// binds it), and the kernel's rdma_cm attaches no device to an id bound to 127.0.0.1,
/// so librpma's examples serve on a NIC's address, never on the loopback.
///
/// Errors: `Provider(EADDRNOTAVAIL)`, with the reason on stderr, on a host without one.
pub fn host_addr() -> Result<String> {
    let ctx = rverbs_rpma::rverbs::devices()?[0].open()?;
    let found = ctx.query_gid_table().iter().map(|e| e.gid.to_ip()).find(|ip| match ip {
        std::net::IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_unspecified(),
        std::net::IpAddr::V6(_) => false,
    });
    found.map(|ip| ip.to_string()).ok_or_else(|| {
        eprintln!("no IPv4 address on an interface other than the loopback: run `server <addr> <port>` and `client <addr> <port>`");
        Error::Provider(libc::EADDRNOTAVAIL)
    })
}

/// The server and the client as two threads over [`host_addr`], the server on an
/// ephemeral port.
fn both(server: Server, client: Client, default_args: &[&str]) -> Result<()> {
    let addr = host_addr()?;
    let saddr = addr.clone();
    let (tx, rx) = mpsc::channel();
    let s = std::thread::spawn(move || {
        // Dropped when the server returns, which ends the wait for the port if it
        // failed before listening.
        let tx = std::sync::Mutex::new(tx);
        server(&saddr, 0, &|p| {
            let _ = tx.lock().unwrap().send(p);
        })
    });
    let port = rx.recv_timeout(TIMEOUT).map_err(|_| Error::Provider(libc::ETIMEDOUT));
    let args: Vec<String> = default_args.iter().map(|s| s.to_string()).collect();
    let c = port.and_then(|p| client(&addr, p, &args));
    let s = s.join().expect("server thread");
    s.and(c)
}

/// librpma's examples' private data (`struct common_data`, 28 bytes): the offset of
/// the user data in the region, the sizes of the descriptors, then the region's
/// descriptor and the peer configuration's.
pub struct CommonData {
    pub data_offset: u16,
    pub mr_desc: Vec<u8>,
    pub pcfg_desc: Vec<u8>,
}

impl CommonData {
    pub const SIZE: usize = 28;

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..2].copy_from_slice(&self.data_offset.to_ne_bytes());
        b[2] = self.mr_desc.len() as u8;
        b[3] = self.pcfg_desc.len() as u8;
        b[4..4 + self.mr_desc.len()].copy_from_slice(&self.mr_desc);
        let at = 4 + self.mr_desc.len();
        b[at..at + self.pcfg_desc.len()].copy_from_slice(&self.pcfg_desc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<CommonData> {
        if b.len() < Self::SIZE {
            return Err(Error::Inval);
        }
        let (m, p) = (usize::from(b[2]), usize::from(b[3]));
        if 4 + m + p > Self::SIZE {
            return Err(Error::Inval);
        }
        Ok(CommonData {
            data_offset: u16::from_ne_bytes([b[0], b[1]]),
            mr_desc: b[4..4 + m].to_vec(),
            pcfg_desc: b[4 + m..4 + m + p].to_vec(),
        })
    }
}

/// The bytes of `b` up to its first NUL, as text.
pub fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Fails unless `got` is `want`.
pub fn expect_event(got: ConnEvent, want: ConnEvent) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        eprintln!("unexpected connection event: {got} (waiting for: {want})");
        Err(Error::Unknown)
    }
}

/// Connects a client and waits for ESTABLISHED.
pub fn client_connect(peer: &Peer, addr: &str, port: u16, pdata: Option<&[u8]>) -> Result<Conn> {
    let conn = ConnReq::new(peer, addr, port, None)?.connect(pdata)?;
    expect_event(conn.next_event_timeout(TIMEOUT)?, ConnEvent::Established)?;
    Ok(conn)
}

/// Accepts a request and waits for ESTABLISHED.
pub fn server_accept(req: ConnReq, pdata: Option<&[u8]>) -> Result<Conn> {
    let conn = req.connect(pdata)?;
    expect_event(conn.next_event_timeout(TIMEOUT)?, ConnEvent::Established)?;
    Ok(conn)
}

/// The side that closes first: disconnect, wait for CLOSED, delete.
pub fn disconnect_and_wait(conn: Conn) -> Result<()> {
    conn.disconnect()?;
    expect_event(conn.next_event_timeout(TIMEOUT)?, ConnEvent::Closed)?;
    conn.delete()
}

/// The side that is closed: wait for CLOSED, disconnect, delete.
pub fn wait_and_disconnect(conn: Conn) -> Result<()> {
    expect_event(conn.next_event_timeout(TIMEOUT)?, ConnEvent::Closed)?;
    conn.disconnect()?;
    conn.delete()
}

/// Makes `fd` non-blocking (`O_NONBLOCK`), as librpma's epoll examples do with every
/// descriptor they watch.
pub fn set_nonblock(fd: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(fd).map_err(errno)?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK).map_err(errno)
}

fn errno(e: rustix::io::Errno) -> Error {
    Error::Provider(e.raw_os_error())
}

/// A level-triggered epoll set whose entries carry a token (librpma's
/// examples' `common-epoll.h`: an fd, a callback and its argument).
pub struct Epoll(std::os::fd::OwnedFd);

impl Epoll {
    pub fn new() -> Result<Epoll> {
        use rustix::event::epoll;
        epoll::create(epoll::CreateFlags::CLOEXEC)
            .map(Epoll)
            .map_err(errno)
    }

    /// Watches `fd` for input; [`Epoll::wait_one`] then answers `token`.
    pub fn add(&self, fd: std::os::fd::BorrowedFd<'_>, token: u64) -> Result<()> {
        use rustix::event::epoll;
        epoll::add(
            &self.0,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        )
        .map_err(errno)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<()> {
        rustix::event::epoll::delete(&self.0, fd).map_err(errno)
    }

    /// Waits at most `timeout` for one ready descriptor and returns its token, `None`
    /// when the timeout passes (an interrupted wait is retried).
    pub fn wait_one(&self, timeout: Duration) -> Result<Option<u64>> {
        use rustix::event::{epoll, Timespec};
        let ts = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut buf = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 1];
        loop {
            match epoll::wait(&self.0, &mut buf, Some(&ts)) {
                Ok((ready, _)) => return Ok(ready.first().map(|e| e.data.u64())),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(errno(e)),
            }
        }
    }
}

/// A number of seconds (fractions allowed) as a duration.
pub fn seconds(s: &str) -> Result<Duration> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or(Error::Inval)
}

/// librpma's examples' `struct hello_t` (`common-hello.h`): the language (an `enum`, 4
/// bytes) then a 1024-byte string; examples 03 and 05 translate it after each run.
pub mod hello {
    use rverbs_rpma::{MrLocal, Result};

    /// The size of the string (`HELLO_STR_SIZE`).
    pub const STR_SIZE: usize = 1024;
    /// The offset of the string (`HELLO_STR_OFFSET`).
    pub const STR_OFFSET: usize = 4;
    /// The size of the whole structure (`HELLO_T_SIZE`).
    pub const T_SIZE: usize = STR_OFFSET + STR_SIZE;
    const STRS: [&str; 2] = ["Hello world!", "¡Hola Mundo!"];

    /// Writes the greeting in language `lang` (0: en, 1: es) at `offset` of `mr`
    /// (`write_hello_str`).
    pub fn write(mr: &MrLocal, offset: usize, lang: u32) -> Result<()> {
        let mut b = vec![0u8; T_SIZE];
        b[..STR_OFFSET].copy_from_slice(&lang.to_ne_bytes());
        let s = STRS[lang as usize % STRS.len()].as_bytes();
        b[STR_OFFSET..STR_OFFSET + s.len()].copy_from_slice(s);
        mr.write(offset, &b)
    }

    /// The greeting at `offset` of `mr`.
    pub fn str(mr: &MrLocal, offset: usize) -> Result<String> {
        Ok(super::c_str(&mr.to_vec(offset + STR_OFFSET, STR_SIZE)?))
    }

    /// Switches the greeting at `offset` of `mr` to the next language (`translate`).
    pub fn translate(mr: &MrLocal, offset: usize) -> Result<()> {
        println!("translating...");
        let mut lang = [0u8; 4];
        mr.read(offset, &mut lang)?;
        write(mr, offset, (u32::from_ne_bytes(lang) + 1) % STRS.len() as u32)
    }
}
