//! librpma's example 11-write-with-imm in Rust: the client writes a value into the
//! server's region with immediate data equal to it; the write consumes the server's
//! 1-byte receive, which completes as RECV_RDMA_WITH_IMM.
//!
//! `cargo run --example 11-write-with-imm` runs both sides as two threads (immediate
//! data 1234); `server <addr> <port>` / `client <addr> <port> <imm>` as two processes.
//! The server prints `The value '1234' was written together with immediate data
//! '1234'`.

mod common;

use common::*;
use rverbs::{WcFlags, WcOpcode};
use rverbs_rpma::*;

const KILOBYTE: usize = 1024;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Local)?;
    let dst = MrLocal::new(&peer, KILOBYTE, Usage::WRITE_DST)?;
    let recv = MrLocal::new(&peer, 1, Usage::RECV)?;
    let data = CommonData { data_offset: 0, mr_desc: dst.descriptor().to_vec(), pcfg_desc: Vec::new() };
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let req = ep.next_conn_req_timeout(None, TIMEOUT)?;
    req.recv(&recv, 0, 1, 0)?;
    let conn = server_accept(req, Some(&data.encode()))?;
    let result = (|| {
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::RecvRdmaWithImm) {
            eprintln!("unexpected completion: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        if !wc.wc_flags().is_some_and(|f| f.contains(WcFlags::WITH_IMM)) {
            eprintln!("the completion has no immediate data");
            return Err(Error::Unknown);
        }
        let mut v = [0u8; 4];
        dst.read(0, &mut v)?;
        let value = u32::from_ne_bytes(v);
        let imm = wc.imm_data().unwrap_or_default();
        if imm != value {
            eprintln!("unexpected immediate data ({imm} != {value})");
            return Err(Error::Unknown);
        }
        println!("The value '{value}' was written together with immediate data '{imm}'");
        Ok(())
    })();
    wait_and_disconnect(conn)?;
    ep.shutdown()?;
    result
}

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    let imm: u32 = args.first().and_then(|s| s.parse().ok()).ok_or(Error::Inval)?;
    let peer = Peer::new(addr, ContextType::Remote)?;
    let src = MrLocal::new(&peer, KILOBYTE, Usage::WRITE_SRC)?;
    src.write(0, &imm.to_ne_bytes())?;
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let dst = MrRemote::from_descriptor(&data.mr_desc)?;
        println!("Writing value '{imm}' with immediate data '{imm}'");
        conn.write_with_imm(&dst, usize::from(data.data_offset), &src, 0, KILOBYTE, CompletionFlags::Always, imm, 0)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::RdmaWrite) {
            eprintln!("unexpected completion: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        Ok(())
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("11-write-with-imm", server, client, &["1234"])
}
