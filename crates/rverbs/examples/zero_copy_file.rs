//! Zero-copy file copy with registered `Vec`s (rverbs::owned): a file is read straight
//! into registered staging `Vec`s and written with RDMA WRITEs into a peer's registered
//! `Vec`s, which the peer takes back at the end and compares with the file. No byte is
//! copied by the program between the file and the peer's `Vec`s, and no line is
//! `unsafe`.
//!
//! The example shows:
//! - `Pd::reg_owned(vec, access)`: a region that owns its `Vec` and gives it back with
//!   `OwnedMr::into_inner` (deregistered first: the bytes are then the program's alone);
//! - the peer's `Vec`s open to its rkey from registration (REMOTE_WRITE), named to the
//!   writer by `OwnedMr::remote` (address and rkey, what ibv_rc_pingpong-style
//!   programs exchange out of band);
//! - the writer's staging `Vec`s: filled through `as_mut_slice` while closed, leased to a
//!   WRITE with `post_write` (the lease borrows the `Vec`; touching it before the
//!   completion does not compile), given back by `Lease::complete` with the WRITE's
//!   completion, several in flight at once;
//! - a WRITE per staging buffer, each inside one of the peer's `Vec`s.
//!
//! Rules followed: ibv_reg_mr(3), ibv_dereg_mr(3), ibv_post_send(3) (a buffer is not
//! touched before its request's completion), ibv_poll_cq(3); IBTA Vol 1 §9.7.5 (an RC
//! WRITE's completion at the requester means the responder placed it).
//!
//! Run: `cargo run -p rverbs --example zero_copy_file [FILE]` (without FILE, a generated
//! file of 1 MiB and 3 bytes in the temporary directory, removed afterwards).

mod common;

use std::fs::File;
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};

use common::{connected_pair, fail, poll_one, Result};
use rverbs::owned::{Lease, OwnedMr};
use rverbs::typed::{Rc, Remote, TypedQp};
use rverbs::{Access, QpType};

/// Bytes of one staging `Vec` (one WRITE at most).
pub const STAGE: usize = 64 * 1024;
/// Staging `Vec`s, so WRITEs in flight at once.
pub const STAGES: usize = 4;
/// Bytes of one of the peer's `Vec`s.
pub const TARGET: usize = 256 * 1024;

/// What [`copy_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Bytes copied (the file's length).
    pub bytes: usize,
    /// RDMA WRITEs posted.
    pub writes: usize,
    /// The peer's registered `Vec`s.
    pub targets: usize,
}

fn main() -> Result {
    let (path, generated) = match std::env::args().nth(1) {
        Some(p) => (PathBuf::from(p), false),
        None => (generate(1024 * 1024 + 3)?, true),
    };
    let copied = copy_file(&path);
    if generated {
        let _ = std::fs::remove_file(&path);
    }
    let c = copied?;
    println!(
        "zero_copy_file: {} bytes of {} in {} WRITEs into {} registered Vecs, byte for byte",
        c.bytes,
        path.display(),
        c.writes,
        c.targets
    );
    Ok(())
}

/// Writes a file of `len` bytes that differ from offset to offset into the temporary
/// directory, so that a misplaced WRITE shows.
pub fn generate(len: usize) -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("rverbs-zero-copy-{}-{len}.bin", std::process::id()));
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    File::create(&path)?.write_all(&bytes)?;
    Ok(path)
}

/// Copies the file at `path` into a peer's registered `Vec`s with RDMA WRITEs from
/// registered staging `Vec`s, takes the peer's `Vec`s back and checks them against the
/// file.
pub fn copy_file(path: &Path) -> Result<Copied> {
    let (writer, peer) = connected_pair(QpType::Rc)?;
    let Ok(qp) = TypedQp::<Rc>::from_qp(writer.qp.clone()) else {
        return fail("connected_pair(Rc) made no RC QP");
    };
    let len = usize::try_from(std::fs::metadata(path)?.len())?;

    // The peer: registered Vecs covering the file, open to its rkey.
    let mut targets = Vec::new();
    for start in (0..len).step_by(TARGET) {
        let size = TARGET.min(len - start);
        targets.push(peer.pd.reg_owned(vec![0u8; size], Access::LOCAL_WRITE | Access::REMOTE_WRITE)?);
    }
    // What the peer tells the writer out of band: where each Vec is, under which rkey.
    let remotes: Vec<Remote> = targets.iter().map(|t| t.remote(0)).collect();

    // The writer: staging Vecs, closed so that the program fills them.
    let mut stages = Vec::new();
    for _ in 0..STAGES {
        let mut stage = pd_stage(&writer.pd)?;
        stage.close()?;
        stages.push(stage);
    }
    let mut idle: Vec<&mut OwnedMr<Vec<u8>>> = stages.iter_mut().collect();
    let mut flying: Vec<Lease<'_, Vec<u8>>> = Vec::new();
    let mut file = File::open(path)?;
    let (mut offset, mut writes) = (0usize, 0usize);
    while offset < len || !flying.is_empty() {
        if offset < len {
            if let Some(stage) = idle.pop() {
                // One WRITE stays inside one of the peer's Vecs.
                let n = STAGE.min(len - offset).min(TARGET - offset % TARGET);
                file.read_exact(&mut stage.as_mut_slice()?[..n])?;
                let base = remotes[offset / TARGET];
                let to = Remote::new(base.addr + (offset % TARGET) as u64, base.rkey);
                flying.push(stage.post_write(&qp, writes as u64, 0..n, to)?);
                offset += n;
                writes += 1;
                continue;
            }
        }
        // Every staging Vec is in flight (or the file is read): wait for a completion.
        let wc = poll_one(&writer.cq)?;
        if !wc.is_success() {
            return fail(format!("WRITE {} completed with \"{}\"", wc.wr_id(), wc.status()));
        }
        let Some(at) = flying.iter().position(|l| l.is_completed_by(&wc)) else {
            return fail(format!("a completion of no WRITE in flight: {wc:?}"));
        };
        match flying.swap_remove(at).complete(&wc) {
            Ok(stage) => idle.push(stage),
            Err(_) => return fail("the lease refused its own completion"),
        }
    }
    drop(idle);

    // Every WRITE completed, so every byte is placed: the peer takes its Vecs back
    // (deregistered first) and compares them with the file.
    let want = std::fs::read(path)?;
    let targets_n = targets.len();
    for (i, target) in targets.into_iter().enumerate() {
        let got: Vec<u8> = target.into_inner()?;
        let at = i * TARGET;
        if got[..] != want[at..at + got.len()] {
            let first = got.iter().zip(&want[at..]).position(|(g, w)| g != w).unwrap_or(0);
            return fail(format!("byte {} of the file differs in the peer's Vec {i}", at + first));
        }
    }
    Ok(Copied { bytes: len, writes, targets: targets_n })
}

/// A staging Vec of [`STAGE`] bytes, registered for local use only (a WRITE's source is
/// read, which every region allows: ibv_reg_mr(3)).
fn pd_stage(pd: &rverbs::Pd) -> Result<OwnedMr<Vec<u8>>> {
    Ok(pd.reg_owned(vec![0u8; STAGE], Access::empty())?)
}
