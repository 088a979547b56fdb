//! A tokio echo over [`rverbs_cm::stream::RdmaStream`]: the server accepts a stream and
//! copies what it reads back to the writer with `tokio::io::copy`, as it would for a
//! `TcpStream`; the client writes 4 MiB in one task and reads the echo in another
//! (`tokio::io::split`), then checks every byte. Nothing in the echo knows it runs over
//! RDMA: the stream is `AsyncRead + AsyncWrite`.
//!
//! Run it with `cargo run -p rverbs-cm --features tokio --example stream_echo`;
//! `tests/stream.rs` runs it as a test, and `tests/rdma_core_cm.rs` over librdmacm.

use std::time::Duration;

use rverbs_cm::aio::AsyncListener;
use rverbs_cm::stream::RdmaStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BYTES: usize = 4 << 20;
/// Bounds the whole run, so that a lost wake-up fails instead of hanging.
const TIMEOUT: Duration = Duration::from_secs(60);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The byte at offset `i` of the message.
fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

async fn run() -> Result<()> {
    let pd = rverbs::devices()?.first().ok_or("no rverbs device")?.open()?.alloc_pd()?;
    let listener = AsyncListener::bind("127.0.0.1:0".parse()?, 1)?;
    let addr = listener.local_addr().ok_or("the listener has no address")?;

    let server_pd = pd.clone();
    let server = tokio::spawn(async move {
        let stream = RdmaStream::accept(&server_pd, listener.next_request().await?).await?;
        let (mut rd, mut wr) = tokio::io::split(stream);
        let copied = tokio::io::copy(&mut rd, &mut wr).await?;
        wr.shutdown().await?;
        Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(copied)
    });

    let stream = RdmaStream::connect(&pd, addr, Duration::from_secs(5)).await?;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let writer = tokio::spawn(async move {
        let data: Vec<u8> = (0..BYTES).map(byte).collect();
        wr.write_all(&data).await?;
        wr.shutdown().await?;
        Ok::<_, std::io::Error>(wr)
    });
    let mut echoed = Vec::with_capacity(BYTES);
    rd.read_to_end(&mut echoed).await?;
    let _wr = writer.await??;
    let copied = server.await??;
    if echoed.len() != BYTES || copied != BYTES as u64 {
        return Err(format!("sent {BYTES} bytes, the server copied {copied}, {} came back", echoed.len()).into());
    }
    if let Some(i) = (0..BYTES).find(|&i| echoed[i] != byte(i)) {
        return Err(format!("byte {i} came back as {}, not {}", echoed[i], byte(i)).into());
    }
    println!("{BYTES} bytes echoed over an RdmaStream with tokio::io::copy");
    Ok(())
}

pub fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    rt.block_on(async { tokio::time::timeout(TIMEOUT, run()).await? })
}
