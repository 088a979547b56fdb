//! The exhaustion role (tests/chaos/exhaustion.sh): every resource the device takes from
//! the host or from its own tables is used up, once per kind, and each time
//! - the verb that found nothing left fails with its documented errno (never a signal:
//!   the runtime directory is a small tmpfs the script mounts, where a store into a page
//!   the file system cannot supply would be SIGBUS);
//! - releasing what was taken gives everything back: the runtime directory holds as many
//!   files as before, and the device then carries a checked RDMA WRITE (memory keys,
//!   last: their table pages stay reserved once used, so the check is that every freed
//!   key can be registered again).
//!
//! ```text
//! rverbs-chaos exhaust --dir RUNTIME_DIR [--max N]
//! ```
//! Prints `EXHAUST kind=… taken=N errno=E` per kind and `EXHAUST ok`.

use std::path::Path;

use rverbs::{Access, CqInit, Mr, QpCap, QpInit, QpType, RemotePath, SendWr};

use crate::common::Args;

/// The kinds, each with the errnos its verb may document for "nothing left":
/// ENOMEM (exhausted: ibv_reg_mr(3), ibv_create_cq(3), ibv_create_qp(3)), EMFILE or
/// ENFILE (file descriptors).
const NOTHING_LEFT: [i32; 3] = [libc::ENOMEM, libc::EMFILE, libc::ENFILE];

fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |r| {
        r.flatten().map(|e| if e.path().is_dir() { 1 + files(&e.path()) } else { 1 }).sum()
    })
}

/// Takes `make()` until it fails (at most `max` times); returns what was taken and the
/// errno of the failure.
fn take_all<T>(kind: &str, max: usize, mut make: impl FnMut(usize) -> rverbs::Result<T>) -> Result<Vec<T>, String> {
    let mut got = Vec::new();
    loop {
        if got.len() >= max {
            return Err(format!("{kind}: {max} taken and still no error: the tmpfs is not small enough"));
        }
        match make(got.len()) {
            Ok(t) => got.push(t),
            Err(e) => {
                let errno = e.errno();
                println!("EXHAUST kind={kind} taken={} errno={errno} ({e})", got.len());
                if !NOTHING_LEFT.contains(&errno) {
                    return Err(format!("{kind}: the verb failed with errno {errno} ({e}), not ENOMEM/EMFILE"));
                }
                return Ok(got);
            }
        }
    }
}

/// A checked RDMA WRITE between two fresh RC QPs: the device works.
fn write_works(ctx: &rverbs::Context) -> Result<(), String> {
    let e = |e: rverbs::Error| e.to_string();
    let pd = ctx.alloc_pd().map_err(e)?;
    let cq = ctx.create_cq(&CqInit::new(16)).map_err(e)?;
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let a = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).map_err(e)?;
    let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).map_err(e)?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (src, dst) = (pd.alloc_mr(4096, access).map_err(e)?, pd.alloc_mr(4096, access).map_err(e)?);
    let lo = ctx
        .query_gid_table()
        .into_iter()
        .find(|g| g.gid.to_ipv4() == Some(std::net::Ipv4Addr::LOCALHOST))
        .ok_or("no loopback GID")?;
    for (x, y) in [(&a, &b), (&b, &a)] {
        let path = RemotePath { access, ..RemotePath::new(lo.gid, lo.index as u8, y.qp_num()) };
        x.connect(&path).map_err(e)?;
    }
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
    src.write(0, &pattern).map_err(e)?;
    let sge = [src.whole()];
    a.post_send(&[SendWr::write(7, &sge, dst.iova(), dst.rkey()).signaled()]).map_err(|p| p.to_string())?;
    let mut wc = [rverbs::Wc::default(); 1];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cq.poll(&mut wc).map_err(e)? == 0 {
        if std::time::Instant::now() > deadline {
            return Err("the WRITE never completed".into());
        }
        std::thread::yield_now();
    }
    if wc[0].status() != rverbs::WcStatus::Success {
        return Err(format!("the WRITE completed with {:?}", wc[0].status()));
    }
    let mut back = vec![0u8; 4096];
    dst.read(0, &mut back).map_err(e)?;
    if back != pattern {
        return Err("the WRITE's bytes differ".into());
    }
    Ok(())
}

pub fn run(args: &Args) -> Result<(), String> {
    let dir = args.path("dir")?;
    let max: usize = args.str("max").ok().map_or(Ok(1 << 20), str::parse).map_err(|e| format!("--max: {e}"))?;
    let ctx = rverbs::devices().map_err(|e| e.to_string())?[0].open().map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    write_works(&ctx)?;
    let baseline = files(&dir);

    // Runtime-directory space: allocated regions of 256 KiB.
    let mrs: Vec<Mr> = take_all("alloc_mr", max, |_| pd.alloc_mr(256 << 10, Access::LOCAL_WRITE))?;
    // Every region taken is really there: its last byte can be written and read back
    // (a region without its pages would be SIGBUS here).
    for (i, mr) in mrs.iter().enumerate() {
        mr.write(mr.len() - 1, &[i as u8]).map_err(|e| e.to_string())?;
    }
    if mrs.is_empty() {
        return Err("no region fitted: the tmpfs is too small for the test".into());
    }
    // The device still works for objects that need no new space? Not guaranteed with
    // the directory full; what must hold is that nothing crashed. Release and go on.
    drop(mrs);
    if files(&dir) != baseline {
        return Err(format!("{} files in the runtime directory after releasing the regions, {baseline} before", files(&dir)));
    }
    write_works(&ctx)?;

    // CQs (a ring segment each) until the directory is full.
    let cqs = take_all("create_cq", max, |_| ctx.create_cq(&CqInit::new(4096)))?;
    drop(cqs);
    if files(&dir) != baseline {
        return Err(format!("{} files after releasing the CQs, {baseline} before", files(&dir)));
    }
    write_works(&ctx)?;

    // QPs (a receive ring segment and a table record each).
    let cq = ctx.create_cq(&CqInit::new(16)).map_err(|e| e.to_string())?;
    let cap = QpCap { max_send_wr: 64, max_recv_wr: 4096, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qps = take_all("create_qp", max, |_| pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)))?;
    drop(qps);
    if files(&dir) != baseline + 1 {
        return Err(format!("{} files after releasing the QPs, {} before", files(&dir), baseline + 1));
    }
    drop(cq);
    write_works(&ctx)?;

    // File descriptors: the script lowers RLIMIT_NOFILE; CQs with completion channels
    // each hold descriptors.
    let mut chans = Vec::new();
    let taken = take_all("create_comp_channel", max, |_| {
        let ch = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(&CqInit::new(4).channel(&ch))?;
        chans.push(ch);
        Ok(cq)
    })?;
    drop(taken);
    drop(chans);
    if files(&dir) != baseline {
        return Err(format!("{} files after releasing the channels, {baseline} before", files(&dir)));
    }
    write_works(&ctx)?;
    // Memory keys of caller memory: each registration takes a key record in the sparse
    // tables, whose pages are reserved as records come into use.
    let buf = vec![0u8; 4096].into_boxed_slice();
    let mut buf = std::mem::ManuallyDrop::new(buf);
    let addr = buf.as_mut_ptr();
    let keys = take_all("reg_mr", max, |_| {
        #[allow(unsafe_code)]
        // SAFETY: `buf` is leaked for the process (ManuallyDrop), so it outlives every
        // registration; nothing is posted on them.
        unsafe {
            pd.reg_mr(addr, 4096, Access::LOCAL_WRITE)
        }
    })?;
    let taken = keys.len();
    drop(keys);
    // The table's pages stay reserved once used (a high-water mark, docs/shared-state.md):
    // the space is not given back to the directory, but every freed key is reused.
    for _ in 0..taken {
        #[allow(unsafe_code)]
        // SAFETY: as above.
        let again = unsafe { pd.reg_mr(addr, 4096, Access::LOCAL_WRITE) };
        again.map_err(|e| format!("reg_mr after releasing the keys: {e}"))?.dereg().map_err(|e| e.to_string())?;
    }

    println!("EXHAUST ok");
    Ok(())
}
