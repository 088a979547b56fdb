//! librpma's example 13-messages-ping-pong-with-srq in Rust: one shared receive queue
//! for several concurrent clients. The server watches its endpoint's fd
//! (non-blocking) with epoll; for each connection request it posts one receive to the
//! queue (op context: the client's slot), accepts the request with the queue in its
//! configuration and records the connection's QP number. When no new connection came
//! for its timeout, it stops listening and plays ping-pong with every client at once
//! from the queue's receive CQ: a completion's `qp_num` says which connection the
//! message came on, its op context which buffer it landed in; the server answers
//! value + 1 until each client sent "I'm done" (`u64::MAX`), then disconnects them.
//!
//! `cargo run --example 13-messages-ping-pong-with-srq` runs the server (timeout 1 s)
//! and three clients in parallel (seeds 1, 5, 10; 3 rounds) as threads;
//! `server <addr> <port> [timeout_seconds]` (default 5) /
//! `client <addr> <port> <seed> <rounds> [sleep_us]` as processes. Lines:
//! `The client #N has been connected.`, `Server ended listening.`,
//! `[server] value received: N from the connection [qp#Q]`,
//! `[server] value sent: N from the connection [qp#Q]`,
//! `[client #ID] value sent: N`, `[client #ID] value received: N`.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const MSG_SIZE: usize = 8;
const I_M_DONE: u64 = u64::MAX;
const CLIENT_MAX: usize = 10;

/// How long the server waits for a new connection.
static LISTEN_TIMEOUT: OnceLock<Duration> = OnceLock::new();

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let timeout = *LISTEN_TIMEOUT.get().unwrap_or(&Duration::from_secs(5));
    let peer = Peer::new(addr, ContextType::Local)?;
    let srq = Srq::new(&peer, None)?;
    let mut cfg = ConnCfg::new();
    cfg.set_srq(Some(&srq));
    let ep = Endpoint::listen(&peer, addr, port)?;
    let recv = MrLocal::new(&peer, CLIENT_MAX * MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, CLIENT_MAX * MSG_SIZE, Usage::SEND)?;
    let epoll = Epoll::new()?;
    set_nonblock(ep.fd())?;
    epoll.add(ep.fd(), 0)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));

    // (connection, its QP number)
    let mut conns: Vec<(Conn, u32)> = Vec::new();
    let accepted = (|| {
        while epoll.wait_one(timeout)?.is_some() {
            if conns.len() == CLIENT_MAX {
                eprintln!("No free slot for a new connection request.");
                return Err(Error::Unknown);
            }
            // Ready for the client's first message before it is connected.
            let slot = conns.len();
            srq.recv(&recv, slot * MSG_SIZE, MSG_SIZE, slot as u64)?;
            let conn = server_accept(ep.next_conn_req(Some(&cfg))?, None)?;
            let qp_num = conn.qp_num();
            conns.push((conn, qp_num));
            println!("The client #{} has been connected.", conns.len());
        }
        println!("Server ended listening.");
        Ok(())
    })();
    let result = accepted.and_then(|()| {
        let rcq = srq.get_rcq().ok_or(Error::Inval)?;
        let mut done = 0;
        let mut wc = [Wc::default(); CLIENT_MAX];
        while done < conns.len() {
            rcq.wait_timeout(TIMEOUT)?;
            let n = match rcq.get_wc(&mut wc[..conns.len()]) {
                Ok(n) => n,
                // A wake-up with nothing new is not an error.
                Err(Error::NoCompletion) => continue,
                Err(e) => return Err(e),
            };
            for w in &wc[..n] {
                if !w.is_success() {
                    eprintln!("rpma_srq_recv() failed: {:?}", w.status());
                    return Err(Error::Unknown);
                }
                if w.opcode() != Some(WcOpcode::Recv) {
                    eprintln!("received unexpected wc.opcode value ({:?})", w.opcode());
                    return Err(Error::Unknown);
                }
                let Some((conn, qp_num)) = conns.iter().find(|(_, q)| *q == w.qp_num()) else {
                    eprintln!("Unable to find the connection [qp#{}]", w.qp_num());
                    return Err(Error::Unknown);
                };
                let offset = w.op_context() as usize * MSG_SIZE;
                let value = recv.as_verbs().read_u64(offset)?;
                if value == I_M_DONE {
                    done += 1;
                    continue;
                }
                println!("[server] value received: {value} from the connection [qp#{qp_num}]");
                // The buffer waits for the next message (of any client).
                srq.recv(&recv, offset, MSG_SIZE, w.op_context())?;
                send.write(offset, &(value + 1).to_ne_bytes())?;
                println!(
                    "[server] value sent: {} from the connection [qp#{qp_num}]",
                    value + 1
                );
                conn.send(&send, offset, MSG_SIZE, CompletionFlags::OnError, 0)?;
            }
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        Ok(())
    });
    // Disconnect every client.
    let mut closed = Ok(());
    for (conn, _) in conns {
        closed = closed.and(disconnect_and_wait(conn));
    }
    let _ = epoll.delete(ep.fd());
    ep.shutdown()?;
    drop(cfg);
    srq.delete()?;
    result.and(closed)
}

/// Waits until the CQ delivered a SEND and a RECV completion.
fn wait_send_and_recv(cq: &Cq) -> Result<()> {
    let (mut send_done, mut recv_done) = (false, false);
    while !(send_done && recv_done) {
        cq.wait_timeout(TIMEOUT)?;
        let mut wc = [Wc::default(); 2];
        let n = match cq.get_wc(&mut wc) {
            Ok(n) => n,
            Err(Error::NoCompletion) => continue,
            Err(e) => return Err(e),
        };
        for w in &wc[..n] {
            match w.opcode() {
                Some(WcOpcode::Send) if w.is_success() => send_done = true,
                Some(WcOpcode::Recv) if w.is_success() && w.byte_len() == Some(MSG_SIZE as u32) => {
                    recv_done = true
                }
                _ => {
                    eprintln!("unexpected completion: {:?} {:?}", w.status(), w.opcode());
                    return Err(Error::Unknown);
                }
            }
        }
    }
    Ok(())
}

/// A client's name in its lines: the process id, and the thread when several clients
/// share the process.
fn client_id() -> String {
    match std::thread::current().name() {
        Some(name) if name.starts_with("client") => format!("{}/{name}", std::process::id()),
        _ => std::process::id().to_string(),
    }
}

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    let arg = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok());
    let mut counter = arg(0).ok_or(Error::Inval)?;
    let rounds = arg(1).ok_or(Error::Inval)?;
    let sleep = Duration::from_micros(arg(2).unwrap_or(0));
    let id = client_id();
    let peer = Peer::new(addr, ContextType::Remote)?;
    let recv = MrLocal::new(&peer, MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, MSG_SIZE, Usage::SEND)?;
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let cq = conn.get_cq();
        for _ in 0..rounds.max(1) {
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("[client #{id}] value sent: {counter}");
            send.write(0, &counter.to_ne_bytes())?;
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            // The server answers once it stopped listening: allow for its timeout.
            wait_send_and_recv(cq)?;
            counter = recv.as_verbs().read_u64(0)?;
            println!("[client #{id}] value received: {counter}");
            std::thread::sleep(sleep);
        }
        send.write(0, &I_M_DONE.to_ne_bytes())?;
        conn.send(&send, 0, MSG_SIZE, CompletionFlags::OnError, 0)
    })();
    wait_and_disconnect(conn)?;
    result
}

/// The server (timeout 1 s) and three clients in parallel, as threads over
/// [`common::host_addr`].
fn all_in_one() -> Result<()> {
    let addr = common::host_addr()?;
    let saddr = addr.clone();
    let _ = LISTEN_TIMEOUT.set(Duration::from_secs(1));
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
        let clients: Vec<_> = ["1", "5", "10"]
            .iter()
            .map(|seed| {
                let args = [seed.to_string(), "3".to_string()];
                let addr = addr.clone();
                std::thread::Builder::new()
                    .name(format!("client{seed}"))
                    .spawn(move || client(&addr, p, &args))
                    .expect("spawn a client")
            })
            .collect();
        clients
            .into_iter()
            .map(|c| c.join().expect("client thread"))
            .fold(Ok(()), Result::and)
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
                eprintln!("13-messages-ping-pong-with-srq: {e} (code {})", e.code());
                std::process::exit(1);
            }
        }
    }
    if args[0] == "server" && args.len() > 3 {
        match seconds(&args[3]) {
            Ok(t) if !t.is_zero() => {
                let _ = LISTEN_TIMEOUT.set(t);
            }
            _ => {
                eprintln!(
                    "<timeout> should be a positive number of seconds ({} given)",
                    args[3]
                );
                std::process::exit(2);
            }
        }
        args.truncate(3);
    }
    common::main_with(
        "13-messages-ping-pong-with-srq",
        server,
        client,
        &["<seed>", "<rounds>", "[sleep_us]"],
        args,
    )
}
