//! rpma_mr_reg(3) over caller memory: [`MrLocal::reg`] (unsafe, pointer and length) and
//! [`MrLocal::from_static`]; the peer's reads, writes and flushes reach the caller's
//! bytes, and the argument checks are librpma's.
#![allow(unsafe_code)]

mod common;

use common::*;
use rverbs::{Access, WcOpcode};
use rverbs_rpma::*;

/// A pair whose server exposes `mr` (its descriptor in the accept's private data).
fn exposing(speer: Peer, cpeer: Peer, mr: &MrLocal) -> (Pair, MrRemote) {
    let desc = mr.descriptor();
    let p = pair_with(speer, cpeer, None, None, |_| {}, Some(&desc), None);
    let remote = MrRemote::from_descriptor(p.client.private_data().unwrap()).unwrap();
    (p, remote)
}

/// A write and a flush of the peer land in the server's own buffer (registered with
/// `reg`), whose address the descriptor carries; the peer reads back bytes the server
/// put there with plain stores before registering; after deregistration the buffer
/// holds what the peer wrote.
#[test]
fn peer_writes_flushes_and_reads_caller_memory() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let mut buf = vec![0u8; 4096];
        buf[100..105].copy_from_slice(b"hello");
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
        // SAFETY: `buf` outlives the region: it is deregistered below, after the
        // connection (and every work request naming the region) is gone, and `buf` is
        // not touched until then.
        let target = unsafe { MrLocal::reg(&speer, buf.as_mut_ptr(), buf.len(), usage) }.unwrap();
        assert_eq!(target.addr(), buf.as_ptr() as u64, "the region's address is the caller's pointer");
        assert_eq!(target.as_verbs().addr(), buf.as_mut_ptr());
        assert_eq!((target.size(), target.usage()), (4096, usage));
        let (p, remote) = exposing(speer, cpeer, &target);
        assert_eq!((remote.addr(), remote.size()), (buf.as_ptr() as u64, 4096));
        let c = &p.client;

        let src = MrLocal::new(&p.cpeer, 64, Usage::WRITE_SRC | Usage::READ_DST).unwrap();
        src.write(0, b"Hello caller memory!").unwrap();
        c.write(&remote, 2000, &src, 0, 20, CompletionFlags::OnError, 1).unwrap();
        c.flush(&remote, 2000, 20, FlushType::Visibility, CompletionFlags::Always, 2).unwrap();
        let wc = next_wc(c.get_cq());
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!(wc.wr_id(), 2);
        assert_eq!(target.to_vec(2000, 20).unwrap(), b"Hello caller memory!", "seen through the registration");

        c.read(&src, 32, &remote, 100, 5, CompletionFlags::Always, 3).unwrap();
        let wc = next_wc(c.get_cq());
        assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (3, Some(WcOpcode::RdmaRead), Some(5)));
        assert_eq!(src.to_vec(32, 5).unwrap(), b"hello", "the bytes the server stored before registering");
        assert_empty(c.get_cq());
        close(p);
        target.dereg().unwrap();
        assert_eq!(&buf[2000..2020], b"Hello caller memory!", "in the caller's buffer itself");
        assert!(buf[..100].iter().chain(&buf[105..2000]).chain(&buf[2020..]).all(|&b| b == 0), "nothing else written");
    });
}

/// The local sides of operations in caller memory: an RDMA WRITE's source and an RDMA
/// READ's destination registered with `from_static`, a send's source and a receive's
/// destination registered with `reg`.
#[test]
fn local_operations_use_caller_memory() {
    bounded(60, || {
        let (speer, cpeer) = peers();
        let target = MrLocal::new(&speer, 64, Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY).unwrap();
        target.write(40, b"remote bytes").unwrap();
        let mut rbuf = [0u8; 32];
        // SAFETY: `rbuf` lives until the end of the closure; the region is deregistered
        // after the connection is deleted, before `rbuf` is read.
        let recv_mr = unsafe { MrLocal::reg(&speer, rbuf.as_mut_ptr(), rbuf.len(), Usage::RECV) }.unwrap();
        let desc = target.descriptor();
        let p = pair_with(speer, cpeer, None, None, |r| r.recv(&recv_mr, 0, 32, 70).unwrap(), Some(&desc), None);
        let remote = MrRemote::from_descriptor(p.client.private_data().unwrap()).unwrap();
        let c = &p.client;

        let mem: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
        mem[..7].copy_from_slice(b"static!");
        let local = MrLocal::from_static(&p.cpeer, mem, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND).unwrap();
        assert_eq!(local.size(), 64);
        c.write(&remote, 0, &local, 0, 7, CompletionFlags::Always, 1).unwrap();
        assert_eq!(next_wc(c.get_cq()).wr_id(), 1);
        assert_eq!(target.to_vec(0, 7).unwrap(), b"static!");
        c.read(&local, 16, &remote, 40, 12, CompletionFlags::Always, 2).unwrap();
        assert_eq!(next_wc(c.get_cq()).wr_id(), 2);
        assert_eq!(local.to_vec(16, 12).unwrap(), b"remote bytes");
        c.send(&local, 16, 12, CompletionFlags::Always, 3).unwrap();
        assert_eq!(next_wc(c.get_cq()).wr_id(), 3);
        let wc = next_wc(p.server.get_cq());
        assert_eq!((wc.wr_id(), wc.opcode(), wc.byte_len()), (70, Some(WcOpcode::Recv), Some(12)));
        close(p);
        recv_mr.dereg().unwrap();
        assert_eq!(&rbuf[..12], b"remote bytes", "received into the caller's buffer");
    });
}

/// rpma_mr_reg(3): `Inval` for a null pointer, a zero size, an empty usage — before
/// anything is registered; the access rights follow the usage as for allocated regions.
#[test]
fn reg_argument_errors_and_access() {
    let peer = Peer::new(host(), ContextType::Local).unwrap();
    let mut buf = vec![0u8; 256];
    let p = buf.as_mut_ptr();
    // SAFETY: every registration below fails or is deregistered before `buf` is dropped.
    unsafe {
        assert_eq!(MrLocal::reg(&peer, std::ptr::null_mut(), 8, Usage::READ_SRC).err(), Some(Error::Inval), "null");
        assert_eq!(MrLocal::reg(&peer, std::ptr::null_mut(), 0, Usage::empty()).err(), Some(Error::Inval), "null, 0, 0");
        assert_eq!(MrLocal::reg(&peer, p, 0, Usage::READ_SRC).err(), Some(Error::Inval), "zero size");
        assert_eq!(MrLocal::reg(&peer, p, 8, Usage::empty()).err(), Some(Error::Inval), "no usage");
        for usage in [Usage::READ_SRC, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT, Usage::SEND, Usage::RECV] {
            let mr = MrLocal::reg(&peer, p.add(8), 100, usage).unwrap();
            assert_eq!(mr.as_verbs().access(), usage.access(), "{usage:?}");
            assert_eq!(mr.addr(), p as u64 + 8);
            assert_eq!(mr.size(), 100);
            let d = mr.descriptor();
            assert_eq!(u64::from_le_bytes(d[0..8].try_into().unwrap()), p as u64 + 8);
            assert_eq!(d[20], usage.bits());
            mr.dereg().unwrap();
        }
    }
    assert_eq!(Usage::WRITE_DST.access(), Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    let empty: &'static mut [u8] = Box::leak(Vec::new().into_boxed_slice());
    assert_eq!(MrLocal::from_static(&peer, empty, Usage::READ_SRC).err(), Some(Error::Inval), "empty slice");
    let mem: &'static mut [u8] = Box::leak(vec![0u8; 8].into_boxed_slice());
    assert_eq!(MrLocal::from_static(&peer, mem, Usage::empty()).err(), Some(Error::Inval), "no usage");
    drop(buf);
}
