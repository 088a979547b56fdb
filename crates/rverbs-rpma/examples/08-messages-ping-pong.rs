//! librpma's example 08-messages-ping-pong in Rust: the client sends a counter, the
//! server answers with the counter plus one, for a number of rounds; the client's last
//! message (`u64::MAX`) is sent unsignaled right before it disconnects. The server's
//! first receive is posted before it accepts the connection.
//!
//! `cargo run --example 08-messages-ping-pong` runs both sides as two threads (seed 7,
//! 3 rounds); `server <addr> <port>` / `client <addr> <port> <seed> <rounds>` as two
//! processes. Prints `Value sent: N` and `Value received: N` lines on both sides.

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const MSG_SIZE: usize = 8;
const I_M_DONE: u64 = u64::MAX;

/// Waits until the CQ delivered a SEND completion (unless `send_done` already) and a
/// RECV completion; tolerates a wake-up with nothing new (the completion was taken with
/// an earlier batch).
fn wait_send_and_recv(cq: &Cq, mut send_done: bool) -> Result<()> {
    let mut recv_done = false;
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
                Some(WcOpcode::Send) => send_done = true,
                Some(WcOpcode::Recv) if w.byte_len() == Some(MSG_SIZE as u32) => recv_done = true,
                _ => {
                    eprintln!("unexpected completion: {:?} {:?}", w.status(), w.opcode());
                    return Err(Error::Unknown);
                }
            }
        }
    }
    Ok(())
}

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let recv = MrLocal::new(&peer, MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, MSG_SIZE, Usage::SEND)?;
    let req = ep.next_conn_req_timeout(None, TIMEOUT)?;
    // Ready for the client's first message before the connection exists.
    req.recv(&recv, 0, MSG_SIZE, 0)?;
    let conn = server_accept(req, None)?;
    let result = (|| {
        let cq = conn.get_cq();
        // No SEND precedes the first RECV.
        let mut send_done = true;
        loop {
            wait_send_and_recv(cq, send_done)?;
            let value = recv.as_verbs().read_u64(0)?;
            if value == I_M_DONE {
                return Ok(());
            }
            println!("Value received: {value}");
            send.write(0, &(value + 1).to_ne_bytes())?;
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("Value sent: {}", value + 1);
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            send_done = false;
        }
    })();
    disconnect_and_wait(conn)?;
    ep.shutdown()?;
    result
}

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    let mut counter: u64 = args.first().and_then(|s| s.parse().ok()).ok_or(Error::Inval)?;
    let rounds: u64 = args.get(1).and_then(|s| s.parse().ok()).ok_or(Error::Inval)?;
    let peer = Peer::new(addr, ContextType::Remote)?;
    let recv = MrLocal::new(&peer, MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, MSG_SIZE, Usage::SEND)?;
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let cq = conn.get_cq();
        for _ in 1..rounds {
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("Value sent: {counter}");
            send.write(0, &counter.to_ne_bytes())?;
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            wait_send_and_recv(cq, false)?;
            counter = recv.as_verbs().read_u64(0)?;
            println!("Value received: {counter}");
        }
        // "I'm done", unsignaled, right before the disconnect.
        send.write(0, &I_M_DONE.to_ne_bytes())?;
        conn.send(&send, 0, MSG_SIZE, CompletionFlags::OnError, 0)
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("08-messages-ping-pong", server, client, &["7", "3"])
}
