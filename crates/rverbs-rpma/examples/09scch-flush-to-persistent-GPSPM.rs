//! librpma's example 09scch-flush-to-persistent-GPSPM in Rust: example 09 (an RDMA
//! WRITE into the server's region, then a protobuf `GPSPM_flush_request` sent to the
//! server, which persists the range and answers with a `GPSPM_flush_response`
//! carrying the request's op_context) with each connection's main CQ and receive CQ
//! sharing one completion channel ([`ConnCfg::set_compl_channel`]): completions are
//! waited for on the connection ([`Conn::wait`], which says which CQ woke it). As in
//! librpma's example, the client expects its send's completion before the response's
//! (rverbs notifies a requester's completion before the responder can answer,
//! docs/completion-queues.md), and each completion must come from the CQ of its opcode.
//!
//! `cargo run --example 09scch-flush-to-persistent-GPSPM` runs both sides as two
//! threads; `server <addr> <port>` / `client <addr> <port>` as two processes. Prints
//! `Next value: Hello world!`, `Translation: ¡Hola Mundo!` (client), `Flush request
//! received: {offset: 0x0, length: 0x400, op_context: 0xF01D}` and `New value: Hello
//! world!` (server).

mod common;

use common::gpspm::{self, FlushRequest, FlushResponse, MSG_REGION_SIZE, MSG_SIZE_MAX, RCQ_SIZE, RECV_OFFSET, SEND_OFFSET};
use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

/// The client's identifier of its flush request (librpma's `FLUSH_ID`).
const FLUSH_ID: u64 = 0xF01D;

/// Waits on the connection's shared channel for the next completion, checks it
/// succeeded with `opcode` on the CQ of that opcode (the receive CQ for receives),
/// and returns it (librpma's examples' `wait_and_validate_completion`).
fn wait_and_validate_completion(conn: &Conn, opcode: WcOpcode) -> Result<Wc> {
    let (cq, is_rcq) = conn.wait_timeout(TIMEOUT)?;
    let wc = cq.get_wc_one()?;
    if !wc.is_success() {
        eprintln!("{opcode:?} failed: {:?}", wc.status());
        return Err(Error::Unknown);
    }
    if wc.opcode() != Some(opcode) || is_rcq != (opcode == WcOpcode::Recv) {
        eprintln!("unexpected wc.opcode value ({:?} != {opcode:?}; receive CQ: {is_rcq})", wc.opcode());
        return Err(Error::Unknown);
    }
    Ok(wc)
}

/// Both sides' connection configuration: a receive CQ of [`RCQ_SIZE`] sharing the
/// main CQ's completion channel.
fn cfg() -> ConnCfg {
    let mut cfg = ConnCfg::new();
    cfg.set_rcq_size(RCQ_SIZE).set_compl_channel(true);
    cfg
}

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
    let msg = MrLocal::new(&peer, MSG_REGION_SIZE, Usage::SEND | Usage::RECV)?;
    let data = CommonData { data_offset: 0, mr_desc: mr.descriptor().to_vec(), pcfg_desc: Vec::new() };
    let req = ep.next_conn_req_timeout(Some(&cfg()), TIMEOUT)?;
    // Ready for the flush request before the client can send it.
    req.recv(&msg, RECV_OFFSET, MSG_SIZE_MAX, 0)?;
    let conn = server_accept(req, Some(&data.encode()))?;
    let result = (|| {
        let wc = wait_and_validate_completion(&conn, WcOpcode::Recv)?;
        let bytes = gpspm::received(&msg, wc.byte_len().unwrap_or(0))?;
        let flush = FlushRequest::unpack(&bytes).map_err(|e| {
            eprintln!("Cannot unpack the flush request buffer: {e}");
            Error::Unknown
        })?;
        println!(
            "Flush request received: {{offset: 0x{:X}, length: 0x{:X}, op_context: 0x{:X}}}",
            flush.offset, flush.length, flush.op_context
        );
        let in_region = flush.offset.checked_add(flush.length).is_some_and(|end| end <= mr.size() as u64);
        if !in_region {
            eprintln!("The range to flush leaves the region of {} bytes", mr.size());
            return Err(Error::Inval);
        }
        println!("At this point, persist function should be called if persistent memory will be in use");
        let len = gpspm::pack(&FlushResponse { op_context: flush.op_context }, &msg)?;
        conn.send(&msg, SEND_OFFSET, len, CompletionFlags::Always, 0)?;
        wait_and_validate_completion(&conn, WcOpcode::Send)?;
        Ok(())
    })();
    if let Err(e) = result {
        // The client still waits for the response: close first; report the first error.
        let _ = disconnect_and_wait(conn);
        return Err(e);
    }
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
    let msg = MrLocal::new(&peer, MSG_REGION_SIZE, Usage::SEND | Usage::RECV)?;
    let conn = ConnReq::new(&peer, addr, port, Some(&cfg()))?.connect(None)?;
    expect_event(conn.next_event_timeout(TIMEOUT)?, ConnEvent::Established)?;
    let result = (|| {
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let dst = MrRemote::from_descriptor(&data.mr_desc)?;
        let dst_offset = usize::from(data.data_offset);
        if dst.size().saturating_sub(dst_offset) < hello::STR_SIZE {
            eprintln!(
                "Size of the remote memory region is too small for writing the data of the assumed size ({} < {})",
                dst.size().saturating_sub(dst_offset),
                hello::STR_SIZE
            );
            return Err(Error::Inval);
        }
        conn.write(&dst, dst_offset, &src, hello::STR_OFFSET, hello::STR_SIZE, CompletionFlags::OnError, 0)?;
        // Ready for the response before asking for it.
        conn.recv(&msg, RECV_OFFSET, MSG_SIZE_MAX, 0)?;
        let flush = FlushRequest { offset: dst_offset as u64, length: hello::STR_SIZE as u64, op_context: FLUSH_ID };
        let len = gpspm::pack(&flush, &msg)?;
        conn.send(&msg, SEND_OFFSET, len, CompletionFlags::Always, 0)?;
        wait_and_validate_completion(&conn, WcOpcode::Send)?;
        let wc = wait_and_validate_completion(&conn, WcOpcode::Recv)?;
        let bytes = gpspm::received(&msg, wc.byte_len().unwrap_or(0))?;
        let response = FlushResponse::unpack(&bytes).map_err(|e| {
            eprintln!("Cannot unpack the flush response buffer: {e}");
            Error::Unknown
        })?;
        if response.op_context != FLUSH_ID {
            eprintln!("unexpected flush_resp->op_context value (0x{:X} != 0x{FLUSH_ID:X})", response.op_context);
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
    common::main("09scch-flush-to-persistent-GPSPM", server, client, &[])
}
