//! librpma's example 12scch-receive-completion-queue in Rust: example 12 (a main CQ
//! for the sends, a receive CQ of 10 for the receives) with the two CQs sharing one
//! completion channel ([`ConnCfg::set_compl_channel`]): completions are waited for on
//! the connection ([`Conn::wait`], which says which CQ woke it), [`Cq::wait`] being
//! refused (`SharedChannel`). The client waits for its send and the answer in either
//! order (librpma's example expects the send first). The client's last message
//! (`u64::MAX`) is sent unsignaled; both sides then disconnect.
//!
//! `cargo run --example 12scch-receive-completion-queue` runs both sides as two threads
//! (start 7, 3 rounds); `server <addr> <port>` / `client <addr> <port> <start> <rounds>`
//! as two processes. Prints `CLIENT: Value sent/received: N` and
//! `SERVER: Value received/sent: N` lines.

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const MSG_SIZE: usize = 8;
const I_M_DONE: u64 = u64::MAX;
const RCQ_SIZE: u32 = 10;

/// Waits on the connection's shared channel for the next completion, checks it came
/// from the CQ its opcode belongs to and succeeded, and returns its opcode.
fn wait_and_validate_completion(conn: &Conn) -> Result<WcOpcode> {
    let (cq, is_rcq) = conn.wait_timeout(TIMEOUT)?;
    let wc = cq.get_wc_one()?;
    if !wc.is_success() {
        eprintln!("operation failed: {:?}", wc.status());
        return Err(Error::Unknown);
    }
    match (wc.opcode(), is_rcq) {
        (Some(op @ WcOpcode::Recv), true) | (Some(op @ WcOpcode::Send), false) => Ok(op),
        (op, _) => {
            eprintln!("unexpected wc.opcode value {op:?} (receive CQ: {is_rcq})");
            Err(Error::Unknown)
        }
    }
}

/// Waits for exactly `want`.
fn expect_completion(conn: &Conn, want: WcOpcode) -> Result<()> {
    let got = wait_and_validate_completion(conn)?;
    if got != want {
        eprintln!("unexpected wc.opcode value ({got:?} != {want:?})");
        return Err(Error::Unknown);
    }
    Ok(())
}

fn cfg() -> ConnCfg {
    let mut cfg = ConnCfg::new();
    cfg.set_rcq_size(RCQ_SIZE).set_compl_channel(true);
    cfg
}

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let recv = MrLocal::new(&peer, MSG_SIZE, Usage::RECV)?;
    let send = MrLocal::new(&peer, MSG_SIZE, Usage::SEND)?;
    let req = ep.next_conn_req_timeout(Some(&cfg()), TIMEOUT)?;
    req.recv(&recv, 0, MSG_SIZE, 0)?;
    let conn = server_accept(req, None)?;
    let result = (|| {
        if conn.get_cq().wait() != Err(Error::SharedChannel) {
            return Err(Error::Unknown);
        }
        loop {
            expect_completion(&conn, WcOpcode::Recv)?;
            let value = recv.as_verbs().read_u64(0)?;
            if value == I_M_DONE {
                return Ok(());
            }
            println!("SERVER: Value received: {value}");
            send.write(0, &(value + 1).to_ne_bytes())?;
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("SERVER: Value sent: {}", value + 1);
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            expect_completion(&conn, WcOpcode::Send)?;
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
    let conn = ConnReq::new(&peer, addr, port, Some(&cfg()))?.connect(None)?;
    expect_event(conn.next_event_timeout(TIMEOUT)?, ConnEvent::Established)?;
    let result = (|| {
        for _ in 1..rounds {
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("CLIENT: Value sent: {counter}");
            send.write(0, &counter.to_ne_bytes())?;
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            let (mut sent, mut received) = (false, false);
            while !(sent && received) {
                match wait_and_validate_completion(&conn)? {
                    WcOpcode::Send if !sent => sent = true,
                    WcOpcode::Recv if !received => received = true,
                    op => {
                        eprintln!("a second {op:?} completion");
                        return Err(Error::Unknown);
                    }
                }
            }
            counter = recv.as_verbs().read_u64(0)?;
            println!("CLIENT: Value received: {counter}");
        }
        send.write(0, &I_M_DONE.to_ne_bytes())?;
        conn.send(&send, 0, MSG_SIZE, CompletionFlags::OnError, 0)
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("12scch-receive-completion-queue", server, client, &["7", "3"])
}
