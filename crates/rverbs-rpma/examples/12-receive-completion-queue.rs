//! librpma's example 12-receive-completion-queue in Rust: example 08's ping-pong on
//! connections with a receive CQ (`rcq_size` 10): sends complete to the main CQ,
//! receives to the receive CQ, each waited for on its own CQ ([`Cq::wait`]) and taken
//! with one [`Cq::get_wc`] (no completion after a wake-up is an error, as in librpma's
//! example). The client's last message (`u64::MAX`) is sent unsignaled; both sides
//! then disconnect.
//!
//! `cargo run --example 12-receive-completion-queue` runs both sides as two threads
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

/// Waits for `cq`'s next completion and checks it succeeded with `opcode`.
fn get_wc_and_validate(cq: &Cq, opcode: WcOpcode) -> Result<()> {
    cq.wait_timeout(TIMEOUT)?;
    let wc = cq.get_wc_one()?;
    if !wc.is_success() {
        eprintln!("{opcode:?} failed: {:?}", wc.status());
        return Err(Error::Unknown);
    }
    if wc.opcode() != Some(opcode) {
        eprintln!("unexpected wc.opcode value ({:?} != {opcode:?})", wc.opcode());
        return Err(Error::Unknown);
    }
    Ok(())
}

fn cfg() -> ConnCfg {
    let mut cfg = ConnCfg::new();
    cfg.set_rcq_size(RCQ_SIZE);
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
        let (cq, rcq) = (conn.get_cq(), conn.get_rcq().ok_or(Error::Inval)?);
        loop {
            get_wc_and_validate(rcq, WcOpcode::Recv)?;
            let value = recv.as_verbs().read_u64(0)?;
            if value == I_M_DONE {
                return Ok(());
            }
            println!("SERVER: Value received: {value}");
            send.write(0, &(value + 1).to_ne_bytes())?;
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("SERVER: Value sent: {}", value + 1);
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            get_wc_and_validate(cq, WcOpcode::Send)?;
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
        let (cq, rcq) = (conn.get_cq(), conn.get_rcq().ok_or(Error::Inval)?);
        for _ in 1..rounds {
            conn.recv(&recv, 0, MSG_SIZE, 0)?;
            println!("CLIENT: Value sent: {counter}");
            send.write(0, &counter.to_ne_bytes())?;
            conn.send(&send, 0, MSG_SIZE, CompletionFlags::Always, 0)?;
            get_wc_and_validate(cq, WcOpcode::Send)?;
            get_wc_and_validate(rcq, WcOpcode::Recv)?;
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
    common::main("12-receive-completion-queue", server, client, &["7", "3"])
}
