//! librpma's example 01-connection in Rust: a connection with private data both ways;
//! the server disconnects.
//!
//! `cargo run --example 01-connection` runs the server and the client as two threads;
//! `01-connection server <addr> <port>` and `01-connection client <addr> <port>` run
//! them as two processes. Prints `Received a message: Hello server!` (server) and
//! `Received a message: Hello client!` (client).

mod common;

use common::*;
use rverbs_rpma::*;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let req = ep.next_conn_req_timeout(None, TIMEOUT)?;
    let conn = server_accept(req, Some(b"Hello client!\0"))?;
    match conn.private_data() {
        Some(msg) => println!("Received a message: {}", c_str(msg)),
        None => println!("No message received"),
    }
    // The server ends the connection.
    disconnect_and_wait(conn)?;
    ep.shutdown()
}

fn client(addr: &str, port: u16, _args: &[String]) -> Result<()> {
    let peer = Peer::new(addr, ContextType::Remote)?;
    let conn = client_connect(&peer, addr, port, Some(b"Hello server!\0"))?;
    match conn.private_data() {
        Some(msg) => println!("Received a message: {}", c_str(msg)),
        None => println!("No message received"),
    }
    wait_and_disconnect(conn)
}

fn main() {
    common::main("01-connection", server, client, &[])
}
