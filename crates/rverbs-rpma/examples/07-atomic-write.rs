//! librpma's example 07-atomic-write in Rust, with the log in DRAM: the server exposes a
//! log (a signature, the `used` offset, then the data; WRITE_DST, READ_SRC,
//! FLUSH_TYPE_VISIBILITY) and sends the offset of `used` in the private data; the client
//! reads `used`, then for every word writes it at `used` and flushes (completions on
//! error only), atomically writes the new `used` and flushes again, waiting for that
//! last flush alone: its completion must be the next one (an unsignaled success never
//! yields one). The server prints the words once the client has gone.
//!
//! `cargo run --example 07-atomic-write` runs both sides as two threads (words
//! `1st_word 2nd_word 3rd_word`); `server <addr> <port>` / `client <addr> <port> <word1>
//! [<word2>…]` as two processes. Prints `used value: 16` (client) and the words, one a
//! line (server).

mod common;

use common::*;
use rverbs::WcOpcode;
use rverbs_rpma::*;

/// `struct log`: an 8-byte signature, `used` (u64), then 1024 bytes of data.
const SIGNATURE: &[u8] = b"LOG\0\0\0\0\0";
const USED_OFFSET: usize = 8;
const DATA_OFFSET: usize = 16;
const LOG_SIZE: usize = DATA_OFFSET + 1024;
const KILOBYTE: usize = 1024;
const MAX_WORD_LENGTH: usize = KILOBYTE - 1;
/// The flush's identifier (librpma's `FLUSH_ID`).
const FLUSH_ID: u64 = 0xF01D;

fn server(addr: &str, port: u16, ready: &dyn Fn(u16)) -> Result<()> {
    eprintln!("Using DRAM instead of persistent memory.");
    let peer = Peer::new(addr, ContextType::Local)?;
    let ep = Endpoint::listen(&peer, addr, port)?;
    ready(ep.local_addr().map_or(port, |a| a.port()));
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
    let log = MrLocal::new(&peer, LOG_SIZE, usage)?;
    log.write(0, SIGNATURE)?;
    log.write(USED_OFFSET, &(DATA_OFFSET as u64).to_ne_bytes())?;
    let data = CommonData { data_offset: USED_OFFSET as u16, mr_desc: log.descriptor().to_vec(), pcfg_desc: Vec::new() };
    let conn = server_accept(ep.next_conn_req_timeout(None, TIMEOUT)?, Some(&data.encode()))?;
    wait_and_disconnect(conn)?;
    let mut used = [0u8; 8];
    log.read(USED_OFFSET, &mut used)?;
    let used = (u64::from_ne_bytes(used) as usize).clamp(DATA_OFFSET, LOG_SIZE);
    // The saved words, each NUL a line's end.
    let text: Vec<u8> = log.to_vec(DATA_OFFSET, used - DATA_OFFSET)?.into_iter().map(|c| if c == 0 { b'\n' } else { c }).collect();
    print!("{}", String::from_utf8_lossy(&text));
    log.dereg()?;
    ep.shutdown()
}

fn client(addr: &str, port: u16, args: &[String]) -> Result<()> {
    if args.is_empty() {
        eprintln!("usage: 07-atomic-write client <addr> <port> <word1> [<word2>] [..]");
        return Err(Error::Inval);
    }
    let peer = Peer::new(addr, ContextType::Remote)?;
    let conn = client_connect(&peer, addr, port, None)?;
    // The other side's configuration, set here unilaterally: persistent flush supported.
    let mut pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(true);
    conn.apply_remote_peer_cfg(&pcfg);
    let result = (|| {
        let local = MrLocal::new(&peer, KILOBYTE, Usage::WRITE_SRC | Usage::READ_DST)?;
        let data = CommonData::decode(conn.private_data().ok_or(Error::Inval)?)?;
        let used_offset = usize::from(data.data_offset);
        let remote = MrRemote::from_descriptor(&data.mr_desc)?;
        conn.read(&local, 0, &remote, used_offset, 8, CompletionFlags::Always, 0)?;
        let cq = conn.get_cq();
        cq.wait_timeout(TIMEOUT)?;
        let wc = cq.get_wc_one()?;
        if !wc.is_success() || wc.opcode() != Some(WcOpcode::RdmaRead) {
            eprintln!("rpma_read() failed: {:?} {:?}", wc.status(), wc.opcode());
            return Err(Error::Unknown);
        }
        let mut used = [0u8; 8];
        local.read(0, &mut used)?;
        let mut used = u64::from_ne_bytes(used);
        println!("used value: {used}");
        if remote.size() as u64 <= used {
            eprintln!("Log size exhausted.");
            return Err(Error::Unknown);
        }
        let flush_type = if remote.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT) {
            FlushType::Persistent
        } else {
            FlushType::Visibility
        };
        for word in args {
            let mut w = word.as_bytes()[..word.len().min(MAX_WORD_LENGTH)].to_vec();
            w.push(0);
            local.write(0, &w)?;
            let at = usize::try_from(used).map_err(|_| Error::Inval)?;
            conn.write(&remote, at, &local, 0, w.len(), CompletionFlags::OnError, 0)?;
            conn.flush(&remote, at, w.len(), flush_type, CompletionFlags::OnError, 0)?;
            used += w.len() as u64;
            conn.atomic_write(&remote, used_offset, used.to_ne_bytes(), CompletionFlags::OnError, 0)?;
            conn.flush(&remote, used_offset, 8, flush_type, CompletionFlags::Always, FLUSH_ID)?;
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
        }
        // Nothing else completed: the unsignaled operations succeeded silently.
        match cq.get_wc_one() {
            Err(Error::NoCompletion) => Ok(()),
            Ok(wc) => {
                eprintln!("unexpected completion: wr_id 0x{:X} {:?}", wc.wr_id(), wc.status());
                Err(Error::Unknown)
            }
            Err(e) => Err(e),
        }
    })();
    disconnect_and_wait(conn)?;
    result
}

fn main() {
    common::main("07-atomic-write", server, client, &["1st_word", "2nd_word", "3rd_word"])
}
