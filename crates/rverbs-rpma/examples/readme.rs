//! The Rust snippet of the repository's README ("librpma's model in Rust"), verbatim
//! between the markers (`tests/examples.rs` checks they match), made runnable: the
//! server and the client as two threads. Prints `New value: Hello world!`.

// README begin
use rverbs_rpma::*;

/// Server: a region whose 21-byte descriptor travels in the private data of the
/// accept; it holds what the client wrote once the client closes.
fn serve(peer: &Peer, ep: &Endpoint) -> Result<MrLocal> {
    let mr = MrLocal::new(peer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let conn = ep.next_conn_req(None)?.connect(Some(&mr.descriptor()))?;
    assert_eq!(conn.next_event()?, ConnEvent::Established);
    assert_eq!(conn.next_event()?, ConnEvent::Closed);
    conn.disconnect()?;
    Ok(mr)
}

/// Client: an RDMA WRITE, then a flush (librpma 1.2: an RDMA READ after the write);
/// only the flush asks for a completion.
fn write_and_flush(addr: &str, port: u16) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Remote)?;
    let src = MrLocal::new(&peer, 64, Usage::WRITE_SRC)?;
    src.write(0, b"Hello world!")?;
    let conn = ConnReq::new(&peer, addr, port, None)?.connect(None)?;
    assert_eq!(conn.next_event()?, ConnEvent::Established);
    let dst = MrRemote::from_descriptor(conn.private_data().unwrap())?;
    conn.write(&dst, 0, &src, 0, 12, CompletionFlags::OnError, 0)?;
    conn.flush(&dst, 0, 12, FlushType::Visibility, CompletionFlags::Always, 1)?;
    conn.get_cq().wait()?;
    assert_eq!(conn.get_cq().get_wc_one()?.wr_id(), 1);
    conn.disconnect()?;
    assert_eq!(conn.next_event()?, ConnEvent::Closed);
    Ok(())
}
// README end

mod common;

fn main() -> Result<()> {
    // An address of this host's network interface (the server names its device by its
    // address, and the loopback names none, as in the kernel's rdma_cm).
    let addr = common::host_addr()?;
    let peer = Peer::new(&addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, &addr, 0)?;
    let port = ep.local_addr().unwrap().port();
    let server = std::thread::spawn(move || serve(&peer, &ep));
    write_and_flush(&addr, port)?;
    let mr = server.join().unwrap()?;
    println!("New value: {}", String::from_utf8_lossy(&mr.to_vec(0, 12)?));
    Ok(())
}
