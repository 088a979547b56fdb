//! librpma's example 06scch-multiple-connections in Rust: example 06
//! (`examples/06-multiple-connections.rs`) with each connection's completions
//! signalled on a completion channel shared by its CQs ([`ConnCfg::set_compl_channel`]):
//! the server's epoll set holds the endpoint's fd and, per connection, its event fd and
//! its shared channel's fd ([`Conn::compl_fd`]), all non-blocking; a completion is
//! waited for with [`Conn::wait`] (`NoCompletion` when woken for nothing), which says
//! which CQ to collect it from. Each client puts its name in a region it registers and
//! sends the region's descriptor in the private data of its connect; the server reads
//! the name, prints it and disconnects the client. The server ends when nothing
//! happened for its idle timeout (librpma's: 15 s).
//!
//! `cargo run --example 06scch-multiple-connections` runs the server (idle timeout 1 s)
//! and three clients one after another (seeds 8, 9, 11) as threads;
//! `server <addr> <port> [idle_seconds]` / `client <addr> <port> <seed>` as processes.
//! The server prints `Today I have got in touch with:` then `- <name>` per client; a
//! client prints `My names is: <name>` (sic, as librpma's).

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const MAX_NAME_SIZE: usize = 32;
const CLIENT_MAX: usize = 10;
/// The epoll token of the endpoint; a client in slot `i` has `2i` (connection events)
/// and `2i + 1` (its shared completion channel).
const EP_TOKEN: u64 = u64::MAX;

const NAMES: [&str; 13] = [
    "Andy", "Chet", "Derek", "Janek", "Kacper", "Lukasz", "Oksana", "Pawel", "Piotr", "Tomasz",
    "Xiang", "Xiaoran", "Xiaoyan",
];

/// The server's idle timeout.
static IDLE: OnceLock<Duration> = OnceLock::new();

struct Client {
    conn: Conn,
    offset: usize,
}

struct Server<'a> {
    epoll: Epoll,
    dst: MrLocal,
    clients: Vec<Option<Client>>,
    ep: &'a Endpoint,
    /// The connections' configuration: a shared completion channel.
    cfg: ConnCfg,
}

impl Server<'_> {
    /// A connection request: accept it into the first free slot and watch its fds.
    fn incoming(&mut self) {
        let req = match self.ep.next_conn_req(Some(&self.cfg)) {
            Ok(req) => req,
            Err(Error::NoEvent) => return,
            Err(e) => {
                eprintln!("rpma_ep_next_conn_req: {e}");
                return;
            }
        };
        // No free slot: the request is rejected as it is dropped.
        let Some(slot) = self.clients.iter().position(Option::is_none) else {
            return;
        };
        let conn = match req.connect(None) {
            Ok(conn) => conn,
            Err(e) => {
                eprintln!("rpma_conn_req_connect: {e}");
                return;
            }
        };
        let token = 2 * slot as u64;
        let watched = conn.compl_fd().and_then(|compl| {
            set_nonblock(conn.fd())
                .and_then(|()| set_nonblock(compl))
                .and_then(|()| self.epoll.add(conn.fd(), token))
                .and_then(|()| self.epoll.add(compl, token + 1))
        });
        if let Err(e) = watched {
            eprintln!("[{slot}] cannot watch the connection: {e}");
            let _ = conn.disconnect();
        }
        self.clients[slot] = Some(Client {
            conn,
            offset: slot * MAX_NAME_SIZE,
        });
    }

    /// The next event of the connection in `slot`.
    fn connection_event(&mut self, slot: usize) {
        let Some(client) = &self.clients[slot] else {
            return;
        };
        match client.conn.next_event() {
            Err(Error::NoEvent) => {}
            Err(e) => {
                eprintln!("[{slot}] rpma_conn_next_event: {e}");
                let _ = client.conn.disconnect();
            }
            Ok(ConnEvent::Established) => {
                if let Err(e) = self.fetch_name(client) {
                    eprintln!("[{slot}] cannot read the client's name: {e}");
                    let _ = client.conn.disconnect();
                }
            }
            Ok(_) => self.delete(slot),
        }
    }

    /// Reads the client's name from the region its private data describes.
    fn fetch_name(&self, client: &Client) -> Result<()> {
        let data = CommonData::decode(client.conn.private_data().unwrap_or_default())?;
        let src = MrRemote::from_descriptor(&data.mr_desc)?;
        let len = MAX_NAME_SIZE.min(src.size());
        client.conn.read(
            &self.dst,
            client.offset,
            &src,
            0,
            len,
            CompletionFlags::Always,
            0,
        )
    }

    /// A completion of the connection in `slot` (on its shared channel): the read of
    /// the name.
    fn completion(&mut self, slot: usize) {
        let Some(client) = &self.clients[slot] else {
            return;
        };
        let wc = match client.conn.wait().and_then(|(cq, _)| cq.get_wc_one()) {
            Ok(wc) => wc,
            Err(Error::NoCompletion) => return,
            Err(e) => {
                eprintln!("[{slot}] waiting for the completion: {e}");
                let _ = client.conn.disconnect();
                return;
            }
        };
        if !wc.is_success() {
            eprintln!("[{slot}] rpma_read() failed: {:?}", wc.status());
        } else if wc.opcode() != Some(WcOpcode::RdmaRead) {
            eprintln!(
                "[{slot}] received unexpected wc.opcode value ({:?})",
                wc.opcode()
            );
        } else {
            match self.dst.to_vec(client.offset, MAX_NAME_SIZE) {
                Ok(name) => println!("- {}", c_str(&name)),
                Err(e) => eprintln!("[{slot}] {e}"),
            }
        }
        let _ = client.conn.disconnect();
    }

    /// Forgets the connection in `slot`: stops watching its fds and deletes it.
    fn delete(&mut self, slot: usize) {
        let Some(client) = self.clients[slot].take() else {
            return;
        };
        if let Ok(compl) = client.conn.compl_fd() {
            let _ = self.epoll.delete(compl);
        }
        let _ = self.epoll.delete(client.conn.fd());
        if let Err(e) = client.conn.delete() {
            eprintln!("[{slot}] rpma_conn_delete: {e}");
        }
    }
}

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let idle = *IDLE.get().unwrap_or(&TIMEOUT);
    let peer = Peer::new(addr, ContextType::Local)?;
    let dst = MrLocal::new(&peer, MAX_NAME_SIZE * CLIENT_MAX, Usage::READ_DST)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    let mut cfg = ConnCfg::new();
    cfg.set_compl_channel(true);
    let mut svr = Server {
        epoll: Epoll::new()?,
        dst,
        clients: (0..CLIENT_MAX).map(|_| None).collect(),
        ep: &ep,
        cfg,
    };
    set_nonblock(ep.fd())?;
    svr.epoll.add(ep.fd(), EP_TOKEN)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    println!("Today I have got in touch with:");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let result = loop {
        match svr.epoll.wait_one(idle) {
            Ok(Some(EP_TOKEN)) => svr.incoming(),
            Ok(Some(t)) if t % 2 == 0 => svr.connection_event((t / 2) as usize),
            Ok(Some(t)) => svr.completion((t / 2) as usize),
            Ok(None) => {
                eprintln!("Server timed out.");
                break Ok(());
            }
            Err(e) => break Err(e),
        }
        let _ = std::io::Write::flush(&mut std::io::stdout());
    };
    // Disconnect the clients that remain.
    for slot in 0..CLIENT_MAX {
        if let Some(c) = &svr.clients[slot] {
            let _ = c.conn.disconnect();
            svr.delete(slot);
        }
    }
    let _ = svr.epoll.delete(ep.fd());
    drop(svr);
    ep.shutdown()?;
    result
}

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    let seed: usize = args
        .first()
        .and_then(|s| s.parse().ok())
        .ok_or(Error::Inval)?;
    let peer = Peer::new(addr, ContextType::Remote)?;
    let name = NAMES[seed % NAMES.len()];
    println!("My names is: {name}");
    let mr = MrLocal::new(&peer, MAX_NAME_SIZE, Usage::READ_SRC)?;
    let mut bytes = [0u8; MAX_NAME_SIZE];
    let n = name.len().min(MAX_NAME_SIZE - 1);
    bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
    mr.write(0, &bytes)?;
    let data = CommonData {
        data_offset: 0,
        mr_desc: mr.descriptor().to_vec(),
        pcfg_desc: Vec::new(),
    };
    let conn = client_connect(&peer, addr, port, Some(&data.encode()))?;
    // The server reads the name, then disconnects.
    wait_and_disconnect(conn)
}

/// The server (idle timeout 1 s) and three clients one after another, as threads over
/// [`common::host_addr`].
fn all_in_one() -> Result<()> {
    let addr = common::host_addr()?;
    let saddr = addr.clone();
    let _ = IDLE.set(Duration::from_secs(1));
    let (tx, rx) = std::sync::mpsc::channel();
    let s = std::thread::spawn(move || {
        let tx = std::sync::Mutex::new(tx);
        server(&saddr, 0, &|p| {
            let _ = tx.lock().unwrap().send(p);
        })
    });
    let port = rx
        .recv_timeout(TIMEOUT)
        .map_err(|_| Error::Provider(libc::ETIMEDOUT));
    let c = port.and_then(|p| {
        ["8", "9", "11"]
            .iter()
            .try_for_each(|seed| client(&addr, p, &[seed.to_string()]))
    });
    let s = s.join().expect("server thread");
    s.and(c)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        match all_in_one() {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("06scch-multiple-connections: {e} (code {})", e.code());
                std::process::exit(1);
            }
        }
    }
    if args[0] == "server" && args.len() > 3 {
        let Ok(idle) = seconds(&args[3]) else {
            eprintln!("bad idle timeout: {}", args[3]);
            std::process::exit(2);
        };
        let _ = IDLE.set(idle);
        args.truncate(3);
    }
    common::main_with("06scch-multiple-connections", server, client, &["<seed>"], args)
}
