//! librpma's example 04-write-to-persistent in Rust, with the region in DRAM: the
//! server exposes a region (WRITE_DST, READ_SRC); the client writes a new value into it
//! and makes it visible as librpma's example does, with an 8-byte RDMA READ of the region
//! after the write (no flush: the region has no flush type, so `rpma_flush` would be
//! refused), then disconnects; the server prints what it holds. (Example 05 is the one
//! that flushes.)
//!
//! `cargo run --example 04-write-to-persistent` runs both sides as two threads;
//! `server <addr> <port>` / `client <addr> <port>` as two processes. Prints `Next
//! value: Hello world!` (client) and `New value: Hello world!` (server).

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const SIZE: usize = 1024;
const HELLO: &[u8] = b"Hello world!\0";
/// Bytes the client reads back after its write.
const RAW_SIZE: usize = 8;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    eprintln!("Using DRAM instead of persistent memory.");
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let mr = MrLocal::new(&peer, SIZE, Usage::WRITE_DST | Usage::READ_SRC)?;
    mr.write(0, b"(nothing yet)\0")?;
    let data = CommonData { data_offset: 0, mr_desc: mr.descriptor().to_vec(), pcfg_desc: Vec::new() };
    let conn = server_accept(ep.next_conn_req_timeout(None, TIMEOUT)?, Some(&data.encode()))?;
    wait_and_disconnect(conn)?;
    println!("New value: {}", c_str(&mr.to_vec(0, SIZE)?));
    ep.shutdown()
}

fn client(addr: &str, port: u16, _args: &[String]) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Remote)?;
    let src = MrLocal::new(&peer, SIZE, Usage::WRITE_SRC)?;
    src.write(0, HELLO)?;
    // Where the READ that follows the write lands.
    let raw = MrLocal::new(&peer, RAW_SIZE, Usage::READ_DST)?;
    println!("Next value: {}", c_str(HELLO));
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let dst = MrRemote::from_descriptor(&data.mr_desc)?;
        let offset = usize::from(data.data_offset);
        if dst.size().saturating_sub(offset) < HELLO.len() {
            eprintln!("the remote region is too small");
            return Err(Error::Inval);
        }
        conn.write(&dst, offset, &src, 0, HELLO.len(), CompletionFlags::OnError, 0)?;
        conn.read(&raw, 0, &dst, 0, RAW_SIZE, CompletionFlags::Always, 1)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::RdmaRead) || wc.wr_id() != 1 {
            eprintln!("rpma_read() failed: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        Ok(())
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("04-write-to-persistent", server, client, &[])
}
