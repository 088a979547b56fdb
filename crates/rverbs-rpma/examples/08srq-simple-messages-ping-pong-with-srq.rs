//! librpma's example 08srq-simple-messages-ping-pong-with-srq in Rust: example 08's
//! ping-pong with the server taking its receives from a shared receive queue
//! ([`Srq::recv`], the first one posted before the connection exists). The server
//! collects the receive completions from the queue's own receive CQ (default), from
//! the connection's main CQ (`m`: the queue has no receive CQ) or from the
//! connection's receive CQ (`r`: the queue has none, the connection has one of 10), and
//! checks each completion's `qp_num` against [`Conn::qp_num`]. The client's last
//! message (`u64::MAX`) is sent unsignaled; the server then disconnects.
//!
//! `cargo run --example 08srq-simple-messages-ping-pong-with-srq [m|r]` runs both sides
//! as two threads (seed 7, 3 rounds); `server <addr> <port> [m|r]` /
//! `client <addr> <port> <seed> <rounds>` as two processes. Prints `Value sent: N` and
//! `Value received: N` lines on both sides.

mod common;

use std::sync::OnceLock;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const MSG_SIZE: usize = 8;
const I_M_DONE: u64 = u64::MAX;
const RCQ_SIZE: u32 = 10;

/// Where the server's receives complete: `s` the queue's receive CQ, `m` the
/// connection's main CQ, `r` the connection's receive CQ.
static MODE: OnceLock<char> = OnceLock::new();

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let mode = *MODE.get().unwrap_or(&'s');
    let peer = Peer::new(addr, ContextType::Local)?;
    let mut scfg = SrqCfg::new();
    if mode != 's' {
        scfg.set_rcq_size(0);
    }
    let srq = Srq::new(&peer, Some(&scfg))?;
    let mut ccfg = ConnCfg::new();
    if mode == 'r' {
        ccfg.set_rcq_size(RCQ_SIZE);
    }
    ccfg.set_srq(Some(&srq));
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let recv = MrLocal::new(&peer, MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, MSG_SIZE, Usage::SEND)?;
    // Ready for the client's first message before the connection exists.
    srq.recv(&recv, 0, MSG_SIZE, 0)?;
    let conn = server_accept(ep.next_conn_req_timeout(Some(&ccfg), TIMEOUT)?, None)?;
    let result = (|| {
        let qp_num = conn.qp_num();
        let rcq = match mode {
            's' => srq.get_rcq(),
            'm' => Some(conn.get_cq()),
            _ => conn.get_rcq(),
        }
        .ok_or(Error::Inval)?;
        loop {
            let wc = loop {
                rcq.wait_timeout(TIMEOUT)?;
                match rcq.get_wc_one() {
                    Ok(wc) => break wc,
                    // A wake-up with nothing new is not an error.
                    Err(Error::NoCompletion) => continue,
                    Err(e) => return Err(e),
                }
            };
            if wc.opcode() != Some(WcOpcode::Recv) || wc.byte_len() != Some(MSG_SIZE as u32) {
                eprintln!("unexpected completion: {:?} {:?} {:?}", wc.status(), wc.opcode(), wc.byte_len());
                return Err(Error::Unknown);
            }
            let value = recv.as_verbs().read_u64(0)?;
            if value == I_M_DONE {
                return Ok(());
            }
            if wc.qp_num() != qp_num {
                eprintln!(
                    "Error: number of QP (qp_num) in the received completion ({}) differs from the one of the connection ({qp_num})",
                    wc.qp_num()
                );
                return Err(Error::Unknown);
            }
            println!("Value received: {value}");
            send.write(0, &(value + 1).to_ne_bytes())?;
            srq.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("Value sent: {}", value + 1);
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::OnError, 0)?;
        }
    })();
    disconnect_and_wait(conn)?;
    ep.shutdown()?;
    drop(ccfg);
    srq.delete()?;
    result
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

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    let mut counter: u64 = args.first().and_then(|s| s.parse().ok()).ok_or(Error::Inval)?;
    let rounds: u64 = args.get(1).and_then(|s| s.parse().ok()).ok_or(Error::Inval)?;
    let peer = Peer::new(addr, ContextType::Remote)?;
    let recv = MrLocal::new(&peer, MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, MSG_SIZE, Usage::SEND)?;
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let cq = conn.get_cq();
        for _ in 0..rounds.max(1) {
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("Value sent: {counter}");
            send.write(0, &counter.to_ne_bytes())?;
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            wait_send_and_recv(cq)?;
            counter = recv.as_verbs().read_u64(0)?;
            println!("Value received: {counter}");
        }
        // "I'm done", unsignaled; the server disconnects.
        send.write(0, &I_M_DONE.to_ne_bytes())?;
        conn.send(&send, 0, MSG_SIZE, CompletionFlags::OnError, 0)
    })();
    wait_and_disconnect(conn)?;
    result
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mode_at = match args.first().map(String::as_str) {
        Some("server") => 3,
        Some("client") => usize::MAX,
        _ => 0,
    };
    if let Some(m) = args.get(mode_at) {
        let mode = match m.as_str() {
            "m" => 'm',
            "r" => 'r',
            _ => {
                eprintln!("The third parameter should be one of m or r ({m} given)");
                std::process::exit(2);
            }
        };
        let _ = MODE.set(mode);
        if mode_at == 0 {
            args.remove(0);
        }
    }
    common::main_with("08srq-simple-messages-ping-pong-with-srq", server, client, &["7", "3"], args)
}
