//! librpma's example 05-flush-to-persistent in Rust, with the memory in DRAM: the server
//! exposes a region (WRITE_DST, FLUSH_TYPE_VISIBILITY) and sends its descriptor and its
//! peer configuration's (direct write to pmem off: DRAM) in the private data of the
//! accept; the client applies that peer configuration, writes its greeting and flushes
//! it — PERSISTENT is not supported, so with VISIBILITY — then translates its greeting
//! and disconnects; the server prints what it holds.
//!
//! `cargo run --example 05-flush-to-persistent` runs both sides as two threads;
//! `server <addr> <port>` / `client <addr> <port>` as two processes. Prints `Next
//! value: Hello world!`, `RPMA_FLUSH_TYPE_PERSISTENT is NOT supported,
//! RPMA_FLUSH_TYPE_VISIBILITY is used instead` (client) and `New value: Hello world!`
//! (server).

mod common;

use common::*;
use rverbs_rpma::*;

/// The flush's identifier (librpma's `FLUSH_ID`).
const FLUSH_ID: u64 = 0xF01D;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    eprintln!("Using DRAM instead of persistent memory.");
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let mr = MrLocal::new(&peer, hello::STR_SIZE, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let old = c_str(&mr.to_vec(0, hello::STR_SIZE)?);
    if !old.is_empty() {
        println!("Old value: {old}");
    }
    // DRAM: no direct write to pmem.
    let pcfg = PeerCfg::new();
    let data = CommonData { data_offset: 0, mr_desc: mr.descriptor().to_vec(), pcfg_desc: pcfg.descriptor().to_vec() };
    let conn = server_accept(ep.next_conn_req_timeout(None, TIMEOUT)?, Some(&data.encode()))?;
    wait_and_disconnect(conn)?;
    println!("New value: {}", c_str(&mr.to_vec(0, hello::STR_SIZE)?));
    mr.dereg()?;
    ep.shutdown()
}

fn client(addr: &str, port: u16, _args: &[String]) -> Result<()> {
    eprintln!("Using DRAM instead of persistent memory.");
    let peer = Peer::new(addr, ContextType::Remote)?;
    let src = MrLocal::new(&peer, hello::T_SIZE, Usage::WRITE_SRC)?;
    hello::write(&src, 0, 0)?;
    println!("Next value: {}", hello::str(&src, 0)?);
    let conn = client_connect(&peer, addr, port, None)?;
    let result = (|| {
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let pcfg = PeerCfg::from_descriptor(&data.pcfg_desc)?;
        conn.apply_remote_peer_cfg(&pcfg);
        let dst = MrRemote::from_descriptor(&data.mr_desc)?;
        let dst_offset = usize::from(data.data_offset);
        if dst.size().saturating_sub(dst_offset) < hello::STR_SIZE {
            eprintln!(
                "Remote memory region size too small for writing the data of the assumed size ({} < {})",
                dst.size().saturating_sub(dst_offset),
                hello::STR_SIZE
            );
            return Err(Error::Inval);
        }
        conn.write(&dst, dst_offset, &src, hello::STR_OFFSET, hello::STR_SIZE, CompletionFlags::OnError, 0)?;
        let flush_type = if pcfg.direct_write_to_pmem() {
            println!("RPMA_FLUSH_TYPE_PERSISTENT is supported");
            FlushType::Persistent
        } else {
            println!("RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead");
            FlushType::Visibility
        };
        conn.flush(&dst, dst_offset, hello::STR_SIZE, flush_type, CompletionFlags::Always, FLUSH_ID)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if wc.wr_id() != FLUSH_ID {
            eprintln!("unexpected wc.wr_id value (0x{:X} != 0x{FLUSH_ID:X})", wc.wr_id());
            return Err(Error::Unknown);
        }
        if !wc.is_success() {
            eprintln!("rpma_flush() failed: {:?}", wc.status());
            return Err(Error::Unknown);
        }
        // So that the next greeting surprises.
        hello::translate(&src, 0)?;
        println!("Translation: {}", hello::str(&src, 0)?);
        Ok(())
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("05-flush-to-persistent", server, client, &[])
}
