//! `rverbs_cm::stream::RdmaStream` without tokio (feature `async-io`): the `futures`
//! `AsyncRead` + `AsyncWrite` traits (smol's, async-std's), each end driven by a minimal
//! `block_on` on a thread of its own. 2 MiB crosses 64 KiB messages with 16 credits, so
//! the writer waits for the reader's credits many times; `poll_close` ends the reader's
//! stream.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use futures_io::{AsyncRead, AsyncWrite};
use rverbs::Pd;
use rverbs_cm::aio::AsyncListener;
use rverbs_cm::stream::{RdmaStream, SLOTS, SLOT_LEN};

mod common;
use common::block_on;

fn pd() -> Pd {
    rverbs::devices().unwrap()[0].open().unwrap().alloc_pd().unwrap()
}

/// `write_all` and `close` of the `futures` traits, by hand (no futures-util here).
async fn write_all_and_close(s: &mut RdmaStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *s).poll_write(cx, data)).await?;
        assert!(n > 0, "a write of a non-empty buffer accepts something");
        data = &data[n..];
    }
    poll_fn(|cx| Pin::new(&mut *s).poll_flush(cx)).await?;
    poll_fn(|cx| Pin::new(&mut *s).poll_close(cx)).await
}

/// Reads until the end of the stream (a read of 0 bytes).
async fn read_to_end(s: &mut RdmaStream) -> io::Result<Vec<u8>> {
    let mut all = Vec::new();
    let mut buf = vec![0u8; 10_000]; // not a multiple of a message: reads split them
    loop {
        let n = poll_fn(|cx| Pin::new(&mut *s).poll_read(cx, &mut buf)).await?;
        if n == 0 {
            return Ok(all);
        }
        all.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn two_mebibytes_cross_the_stream_with_the_futures_traits_on_any_executor() {
    let listener = AsyncListener::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let pd = pd();
        block_on(async {
            let req = listener.next_request().await.unwrap();
            let mut s = RdmaStream::accept(&pd, req).await.unwrap();
            read_to_end(&mut s).await.unwrap()
        })
    });
    let data: Vec<u8> = (0..(2 << 20) + 12_345).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    assert!(data.len() > SLOTS * SLOT_LEN, "more than the reader's receives hold at once");
    let pd = pd();
    block_on(async {
        let mut s = RdmaStream::connect(&pd, addr, Duration::from_secs(5)).await.unwrap();
        write_all_and_close(&mut s, &data).await.unwrap();
        // After the FIN, a write is refused.
        let refused = poll_fn(|cx| Pin::new(&mut s).poll_write(cx, b"late")).await;
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    });
    let got = server.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the bytes arrive in order, unchanged");
}
