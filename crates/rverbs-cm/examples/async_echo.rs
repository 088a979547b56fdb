//! An echo server for 64 connections on one thread, with `rverbs_cm::aio` and
//! `rverbs::aio` on tokio's current-thread runtime: the server accepts each connection
//! request ([`rverbs_cm::aio::AsyncListener`]) and serves it in a task of its own, which
//! awaits its CQ ([`rverbs::aio::AsyncCq`]) and sends back every message it receives;
//! 64 client tasks on the same thread connect ([`rverbs_cm::aio::connect_with`]), send
//! a few messages each and check every echo. No task blocks the thread: each waits on
//! its completion channel's or event channel's fd through the reactor.
//!
//! Run it with `cargo run -p rverbs-cm --features tokio --example async_echo`;
//! `tests/aio.rs` runs it as a test, and `tests/rdma_core_cm.rs` over librdmacm.

use std::net::SocketAddr;
use std::time::Duration;

use rverbs::aio::AsyncCq;
use rverbs::{Access, Context, CqInit, Mr, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, Wc, WcOpcode, WcStatus};
use rverbs_cm::aio::{AsyncListener, AsyncRequest};

const CONNECTIONS: usize = 64;
const MSG: usize = 64;
const MESSAGES: usize = 4;
/// Bounds the whole run, so that a lost wake-up fails instead of hanging.
const TIMEOUT: Duration = Duration::from_secs(60);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One end of one connection: a CQ on a channel of its own (awaited), an RC QP, a buffer.
struct End {
    cq: AsyncCq,
    qp: Qp,
    mr: Mr,
}

impl End {
    fn new(ctx: &Context, pd: &Pd) -> Result<End> {
        let ch = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(&CqInit::new(8).channel(&ch))?;
        let cap = QpCap { max_send_wr: 2, max_recv_wr: 2, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap))?;
        let mr = pd.alloc_mr(2 * MSG, Access::LOCAL_WRITE)?;
        Ok(End { cq: AsyncCq::new(cq, ch)?, qp, mr })
    }

    /// Posts a receive into the second half of the buffer.
    fn post_recv(&self, qp: &Qp) -> rverbs_cm::Result<()> {
        let sge = [self.mr.sge(MSG, MSG as u32)?];
        qp.post_recv(&[RecvWr::new(2, &sge)])?;
        Ok(())
    }

    /// Sends `text` from the first half of the buffer.
    fn send(&self, text: &[u8]) -> Result<()> {
        self.mr.write(0, text)?;
        let sge = [self.mr.sge(0, text.len() as u32)?];
        self.qp.post_send(&[SendWr::send(1, &sge).signaled()])?;
        Ok(())
    }

    /// The next completion, which must have succeeded.
    async fn next(&mut self) -> Result<Wc> {
        let wc = self.cq.next_completion().await?;
        if wc.status() != WcStatus::Success {
            return Err(format!("completion {} failed: {:?}", wc.wr_id(), wc.status()).into());
        }
        Ok(wc)
    }

    /// The text received into the second half of the buffer.
    fn received(&self, wc: &Wc) -> Result<String> {
        let mut buf = vec![0; wc.byte_len().ok_or("a receive without its length")? as usize];
        self.mr.read(MSG, &mut buf)?;
        Ok(String::from_utf8(buf)?)
    }
}

/// Serves one accepted connection: echoes `MESSAGES` messages, then waits for the
/// client to disconnect.
async fn serve(ctx: Context, pd: Pd, req: AsyncRequest) -> Result<()> {
    let mut end = End::new(&ctx, &pd)?;
    let conn = req.accept_with(end.qp.clone(), b"echo server", |qp| end.post_recv(qp)).await?;
    for _ in 0..MESSAGES {
        let wc = end.next().await?;
        let text = end.received(&wc)?;
        end.post_recv(conn.qp())?;
        end.send(text.as_bytes())?;
        end.next().await?;
    }
    conn.disconnected().await?;
    Ok(())
}

/// Connects to `addr` as client `n` and checks the echo of each message.
async fn client(ctx: Context, pd: Pd, addr: SocketAddr, n: usize) -> Result<()> {
    let mut end = End::new(&ctx, &pd)?;
    let qp = end.qp.clone();
    let conn = rverbs_cm::aio::connect_with(addr, qp, b"echo client", Duration::from_secs(5), |qp| end.post_recv(qp)).await?;
    for m in 0..MESSAGES {
        let text = format!("client {n} message {m}");
        end.send(text.as_bytes())?;
        let mut echoed = None;
        // The send's completion and the echo's, in either order.
        for _ in 0..2 {
            let wc = end.next().await?;
            if wc.opcode() == Some(WcOpcode::Recv) {
                echoed = Some(end.received(&wc)?);
                end.post_recv(conn.qp())?;
            }
        }
        let echoed = echoed.ok_or("no echo")?;
        if echoed != text {
            return Err(format!("sent {text:?}, echoed {echoed:?}").into());
        }
    }
    Ok(())
}

async fn run() -> Result<()> {
    let ctx = rverbs::devices()?.first().ok_or("no rverbs device")?.open()?;
    let pd = ctx.alloc_pd()?;
    let listener = AsyncListener::bind("127.0.0.1:0".parse()?, CONNECTIONS as i32)?;
    let addr = listener.local_addr().ok_or("the listener has no address")?;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CONNECTIONS {
        tasks.spawn(client(ctx.clone(), pd.clone(), addr, n));
    }
    for _ in 0..CONNECTIONS {
        let req = listener.next_request().await?;
        tasks.spawn(serve(ctx.clone(), pd.clone(), req));
    }
    let mut done = 0;
    while let Some(r) = tasks.join_next().await {
        r??;
        done += 1;
    }
    println!("{} connections, {} messages echoed each, on one thread", done / 2, MESSAGES);
    Ok(())
}

pub fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    rt.block_on(async { tokio::time::timeout(TIMEOUT, run()).await? })
}
