//! An echo over rdma_cm(7) with the RAII API: a server thread listens
//! ([`rverbs_cm::Listener`]), accepts a connection request with its QP
//! ([`rverbs_cm::Request::accept`]) and sends back every message it receives; the client
//! connects ([`rverbs_cm::connect`]), sends a few messages and checks each echo. Both ends
//! wait on their CQs through completion channels, the way an event loop would (the
//! channels are `AsFd`).
//!
//! Run it with `cargo run -p rverbs-cm --example echo`; `cargo test` runs it too.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use rverbs::{Access, CompChannel, Cq, CqInit, Mr, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, WcStatus};

const MSG: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(10);
const MESSAGES: [&str; 3] = ["hello", "remote direct memory access", "bye"];

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One end: its PD, a CQ on a completion channel, an RC QP, and one registered buffer.
struct End {
    pd: Pd,
    ch: CompChannel,
    cq: Cq,
    mr: Mr,
}

impl End {
    fn new() -> Result<End> {
        let ctx = rverbs::devices()?.first().ok_or("no rverbs device")?.open()?;
        let pd = ctx.alloc_pd()?;
        let ch = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(&CqInit::new(16).channel(&ch))?;
        let mr = pd.alloc_mr(2 * MSG, Access::LOCAL_WRITE)?;
        Ok(End { pd, ch, cq, mr })
    }

    fn qp(&self) -> Result<Qp> {
        let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        Ok(self.pd.create_qp(&QpInit::new(QpType::Rc, &self.cq, cap))?)
    }

    /// Posts a receive into the second half of the buffer.
    fn post_recv(&self, qp: &Qp) -> rverbs_cm::Result<()> {
        let sge = [self.mr.sge(MSG, MSG as u32)?];
        qp.post_recv(&[RecvWr::new(2, &sge)])?;
        Ok(())
    }

    /// Sends `text` from the first half of the buffer.
    fn send(&self, qp: &Qp, text: &[u8]) -> Result<()> {
        self.mr.write(0, text)?;
        let sge = [self.mr.sge(0, text.len() as u32)?];
        qp.post_send(&[SendWr::send(1, &sge).signaled()])?;
        Ok(())
    }

    /// Waits for the next completion: arm the CQ, poll once (a completion may have come
    /// before the arming), else wait until the channel's fd is readable.
    fn next(&self) -> Result<rverbs::Wc> {
        loop {
            self.cq.req_notify(false)?;
            let mut wc = [rverbs::Wc::default()];
            if self.cq.poll(&mut wc)? == 1 {
                let wc = wc[0];
                if wc.status() != WcStatus::Success {
                    return Err(format!("completion {} failed: {:?}", wc.wr_id(), wc.status()).into());
                }
                return Ok(wc);
            }
            let fd = self.ch.as_fd();
            let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
            let ts = rustix::time::Timespec { tv_sec: TIMEOUT.as_secs() as i64, tv_nsec: 0 };
            if rustix::event::poll(&mut fds, Some(&ts))? == 0 {
                return Err("no completion within the timeout".into());
            }
            self.ch.get_cq_event()?.ack();
        }
    }

    /// The text of the message received into the second half of the buffer.
    fn received(&self, len: u32) -> Result<String> {
        let mut buf = vec![0; len as usize];
        self.mr.read(MSG, &mut buf)?;
        Ok(String::from_utf8(buf)?)
    }
}

/// Accepts one connection on `listener` and echoes `MESSAGES.len()` messages.
fn serve(listener: rverbs_cm::Listener) -> Result<()> {
    let end = End::new()?;
    let qp = end.qp()?;
    let req = listener.next_request(TIMEOUT)?;
    // The receive for the first message is posted before the reply goes out (the QP is
    // in INIT then), so that message finds it.
    let conn = req.accept_with(qp, b"echo server", TIMEOUT, |qp| end.post_recv(qp))?;
    for _ in MESSAGES {
        let wc = end.next()?;
        let text = end.received(wc.byte_len().ok_or("a receive without its length")?)?;
        end.post_recv(conn.qp())?;
        end.send(conn.qp(), text.as_bytes())?;
        end.next()?;
    }
    conn.wait_disconnected(TIMEOUT)?;
    Ok(())
}

/// Connects to `addr` and checks the echo of every message.
fn client(addr: SocketAddr) -> Result<()> {
    let end = End::new()?;
    let qp = end.qp()?;
    let conn = rverbs_cm::connect_with(addr, qp, b"echo client", TIMEOUT, |qp| end.post_recv(qp))?;
    for text in MESSAGES {
        end.send(conn.qp(), text.as_bytes())?;
        let mut echoed = None;
        // The send's completion and the echo's, in either order.
        for _ in 0..2 {
            let wc = end.next()?;
            if wc.opcode() == Some(rverbs::WcOpcode::Recv) {
                echoed = Some(end.received(wc.byte_len().ok_or("a receive without its length")?)?);
                end.post_recv(conn.qp())?;
            }
        }
        let echoed = echoed.ok_or("no echo")?;
        if echoed != text {
            return Err(format!("sent {text:?}, echoed {echoed:?}").into());
        }
        println!("echo: {echoed}");
    }
    Ok(())
}

pub fn main() -> Result<()> {
    let listener = rverbs_cm::Listener::bind("127.0.0.1:0".parse()?, 0)?;
    let addr = listener.local_addr().ok_or("the listener has no address")?;
    let server = std::thread::spawn(move || serve(listener));
    client(addr)?;
    server.join().map_err(|_| "the server thread panicked")??;
    println!("echo: all {} messages echoed", MESSAGES.len());
    Ok(())
}

// With the feature `rdma-core`, tests/rdma_core_cm.rs includes this file and runs
// `main` through librdmacm; this soft run would share that binary's process under
// `cargo test` (starting the in-crate device its checks rule out), so it is left to the
// builds without the feature (the workspace's `cargo test`).
#[cfg(all(test, not(feature = "rdma-core")))]
mod tests {
    /// `cargo test` runs the example as it is.
    #[test]
    fn the_echo_example_runs() {
        super::main().unwrap();
    }
}
