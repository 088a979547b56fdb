//! librpma's example 03-read-to-persistent in Rust, with the memory in DRAM: the client
//! exposes a greeting (READ_SRC) whose region descriptor travels in the private data
//! of the connection request; the server reads it into its own region (READ_DST) with
//! an RDMA READ, prints it and disconnects; the client then translates its greeting.
//!
//! `cargo run --example 03-read-to-persistent` runs both sides as two threads; `server
//! <addr> <port>` / `client <addr> <port>` as two processes. Prints `Next value: Hello
//! world!` and `Translation: ¡Hola Mundo!` (client), `New value: Hello world!` (server).

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    eprintln!("Using DRAM instead of persistent memory.");
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let dst = MrLocal::new(&peer, hello::STR_SIZE, Usage::READ_DST)?;
    let conn = server_accept(ep.next_conn_req_timeout(None, TIMEOUT)?, None)?;
    let result = (|| {
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let src = MrRemote::from_descriptor(&data.mr_desc)?;
        let old = c_str(&dst.to_vec(0, hello::STR_SIZE)?);
        if !old.is_empty() {
            println!("Old value: {old}");
        }
        conn.read(&dst, 0, &src, usize::from(data.data_offset), hello::STR_SIZE, CompletionFlags::Always, 0)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() {
            eprintln!("rpma_read() failed: {:?}", wc.status());
            return Err(Error::Unknown);
        }
        if wc.opcode() != Some(WcOpcode::RdmaRead) {
            eprintln!("unexpected wc.opcode value ({:?} != RdmaRead)", wc.opcode());
            return Err(Error::Unknown);
        }
        println!("New value: {}", c_str(&dst.to_vec(0, hello::STR_SIZE)?));
        Ok(())
    })();
    disconnect_and_wait(conn)?;
    dst.dereg()?;
    ep.shutdown()?;
    result
}

fn client(addr: &str, port: u16, _args: &[String]) -> Result<()> {
    eprintln!("Using DRAM instead of persistent memory.");
    let peer = Peer::new(addr, ContextType::Remote)?;
    let src = MrLocal::new(&peer, hello::T_SIZE, Usage::READ_SRC)?;
    hello::write(&src, 0, 0)?;
    println!("Next value: {}", hello::str(&src, 0)?);
    let data = CommonData { data_offset: hello::STR_OFFSET as u16, mr_desc: src.descriptor().to_vec(), pcfg_desc: Vec::new() };
    let conn = client_connect(&peer, addr, port, Some(&data.encode()))?;
    // The server reads while the connection lasts, then disconnects.
    wait_and_disconnect(conn)?;
    // So that the next greeting surprises.
    hello::translate(&src, 0)?;
    println!("Translation: {}", hello::str(&src, 0)?);
    src.dereg()
}

fn main() {
    common::main("03-read-to-persistent", server, client, &[])
}
