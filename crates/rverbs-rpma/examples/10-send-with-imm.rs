//! librpma's example 10-send-with-imm in Rust: the client tells the server the
//! immediate data to expect (in the private data of its request), then sends a word
//! with that immediate data; the server checks it.
//!
//! `cargo run --example 10-send-with-imm` runs both sides as two threads (immediate
//! data 1234, word `1st_word`); `server <addr> <port>` / `client <addr> <port> <imm>
//! [word]` as two processes (no word: a 0-byte send). The server prints `Received value
//! '1st_word' with immediate data '1234'`.

mod common;

use common::*;
use rverbs::{WcFlags, WcOpcode};
use rverbs_rpma::*;

const KILOBYTE: usize = 1024;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Local)?;
    let recv = MrLocal::new(&peer, KILOBYTE, Usage::RECV)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let req = ep.next_conn_req_timeout(None, TIMEOUT)?;
    req.recv(&recv, 0, KILOBYTE, 0)?;
    let conn = server_accept(req, None)?;
    let result = (|| {
        let pd = conn.private_data().unwrap_or(&[]);
        if pd.len() < 4 {
            eprintln!("the private data is too small ({} < 4)", pd.len());
            return Err(Error::Inval);
        }
        let expected = u32::from_ne_bytes([pd[0], pd[1], pd[2], pd[3]]);
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::Recv) {
            eprintln!("unexpected completion: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        if !wc.wc_flags().is_some_and(|f| f.contains(WcFlags::WITH_IMM)) {
            eprintln!("the completion has no immediate data");
            return Err(Error::Unknown);
        }
        let imm = wc.imm_data().unwrap_or_default();
        if imm != expected {
            eprintln!("unexpected immediate data ({imm} != {expected})");
            return Err(Error::Unknown);
        }
        let len = wc.byte_len().unwrap_or(0) as usize;
        println!("Received value '{}' with immediate data '{imm}'", c_str(&recv.to_vec(0, len)?));
        Ok(())
    })();
    wait_and_disconnect(conn)?;
    ep.shutdown()?;
    result
}

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    let imm: u32 = args.first().and_then(|s| s.parse().ok()).ok_or(Error::Inval)?;
    let word = args.get(1);
    let peer = Peer::new(addr, ContextType::Remote)?;
    let send = match word {
        Some(w) => {
            let mr = MrLocal::new(&peer, KILOBYTE, Usage::SEND)?;
            let b = w.as_bytes();
            mr.write(0, &b[..b.len().min(KILOBYTE - 1)])?;
            Some(mr)
        }
        None => None,
    };
    let conn = client_connect(&peer, addr, port, Some(&imm.to_ne_bytes()))?;
    let result = (|| {
        let len = match word {
            Some(w) => {
                println!("Sending value '{w}' with immediate data '{imm}'");
                KILOBYTE
            }
            None => {
                println!("Sending immediate data '{imm}'");
                0
            }
        };
        conn.send_with_imm(send.as_ref(), 0, len, CompletionFlags::Always, imm, 0)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::Send) {
            eprintln!("unexpected completion: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        Ok(())
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("10-send-with-imm", server, client, &["1234", "1st_word"])
}
