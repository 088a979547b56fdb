//! librpma's example 02-read-to-volatile in Rust: the server exposes a region (READ_SRC)
//! whose descriptor travels in the private data of the accept; the client reads it
//! with an RDMA READ.
//!
//! `cargo run --example 02-read-to-volatile` runs both sides as two threads; `server
//! <addr> <port>` / `client <addr> <port>` as two processes. The client prints
//! `Read a message: Hello client!`.

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

const HELLO: &[u8] = b"Hello client!\0";
const KILOBYTE: usize = 1024;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let mr = MrLocal::new(&peer, HELLO.len(), Usage::READ_SRC)?;
    mr.write(0, HELLO)?;
    let data = CommonData { data_offset: 0, mr_desc: mr.descriptor().to_vec(), pcfg_desc: Vec::new() };
    let conn = server_accept(ep.next_conn_req_timeout(None, TIMEOUT)?, Some(&data.encode()))?;
    // The client reads while the connection lasts.
    wait_and_disconnect(conn)?;
    mr.dereg()?;
    ep.shutdown()
}

fn client(addr: &str, port: u16, _args: &[String]) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Remote)?;
    let dst = MrLocal::new(&peer, KILOBYTE, Usage::READ_DST)?;
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let src = MrRemote::from_descriptor(&data.mr_desc)?;
        if src.size() > KILOBYTE {
            eprintln!("the remote region is too big ({} > {KILOBYTE})", src.size());
            return Err(Error::Inval);
        }
        conn.read(&dst, 0, &src, 0, src.size(), CompletionFlags::Always, 0)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::RdmaRead) {
            eprintln!("rpma_read() failed: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        println!("Read a message: {}", c_str(&dst.to_vec(0, src.size())?));
        Ok(())
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("02-read-to-volatile", server, client, &[])
}
