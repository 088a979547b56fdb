//! The victim (namespace A): a process on the Rust API whose registered regions the
//! attacker aims at, and which keeps a legitimate RC connection with the peer.
//!
//! - PD 1: region R (64 KiB, every remote right, canaries around) and RC QP T1, connected
//!   to the attacker's address (QPN 0xa1): the attacker is its "peer", so its forged
//!   packets pass the address and QPN checks and reach the responder's key, bounds and
//!   sequence checks.
//! - PD 2: region R2 (4 KiB, canaries) and RC QP T2 to the attacker (QPN 0xa2): requests
//!   with R's real key reach it through T2 (wrong PD).
//! - PD 3: region L (16 KiB, canaries) and RC QP L to the legitimate peer: each round the
//!   peer WRITEs 4 KiB into L, then SENDs the round's number; the victim checks the bytes
//!   and echoes a SEND.
//!
//! Control (TCP, one line each, from the attacker): `ARM` resets T1 and T2, connects them
//! again with fresh PSNs, posts receives into R and R2, and answers `ARMED k=v ...`.
//! Ends when the file `stop-victim` appears (or `--seconds`); then drops the QPs,
//! deregisters the regions and checks every canary byte.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rverbs::{Access, Context, Cq, CqInit, Gid, QpAttr, QpAttrMask, QpCap, QpInit, QpState, QpType, RecvWr, RemotePath, SendWr, Wc};

use crate::common::{get, legit_pattern, read_info, write_info, Args, Rng};
use crate::region::{Canaried, Check};

/// The attacker's QPNs T1 and T2 are connected to.
pub const ATTACKER_QPN_T1: u32 = 0xa1;
pub const ATTACKER_QPN_T2: u32 = 0xa2;
/// Region sizes.
pub const R_LEN: usize = 64 * 1024;
pub const R2_LEN: usize = 4096;
pub const L_LEN: usize = 16 * 1024;
/// Layout of L: the peer writes into [0, L_WRITE), messages land in receive slots above.
pub const L_WRITE: usize = 12 * 1024;
pub const LEGIT_WRITE_LEN: usize = 4096;
const L_MSG: usize = 16;
const L_RECVS: usize = 32;
/// The echo's source in L.
const L_ECHO: usize = L_LEN - 64;

const ALL: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE).union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC);
const CAP: QpCap = QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };

pub fn gid_index(ctx: &Context, ip: Ipv4Addr) -> Result<u8, String> {
    let g = Gid::from_ipv4(ip);
    let e = ctx.query_gid_table().into_iter().find(|e| e.gid == g).ok_or_else(|| format!("no GID for {ip}"))?;
    u8::try_from(e.index).map_err(|e| e.to_string())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn run(a: &Args) -> Result<(), String> {
    let dir = a.path("dir")?;
    let local = a.ip("local")?;
    let peer_ip = a.ip("peer")?;
    let attacker = a.ip("attacker")?;
    let ctl_port = a.num("ctl-port", 18990)? as u16;
    let mut rng = Rng::new(a.num("seed", 1)? ^ 0x7669_6374);
    let limit = Duration::from_secs(a.num("seconds", 300)?);
    let deadline = Instant::now() + limit;

    let dev = rverbs::devices().map_err(err)?.into_iter().next().ok_or("no device")?;
    let ctx = dev.open().map_err(err)?;
    let sgid = gid_index(&ctx, local)?;
    let (pd1, pd2, pd3) = (ctx.alloc_pd().map_err(err)?, ctx.alloc_pd().map_err(err)?, ctx.alloc_pd().map_err(err)?);
    let cq_t = ctx.create_cq(&CqInit::new(1024)).map_err(err)?;
    let cq_l = ctx.create_cq(&CqInit::new(256)).map_err(err)?;
    let mut r = Canaried::new(&pd1, R_LEN, ALL).map_err(err)?;
    let mut r2 = Canaried::new(&pd2, R2_LEN, ALL).map_err(err)?;
    let mut l = Canaried::new(&pd3, L_LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(err)?;
    let t1 = pd1.create_qp(&QpInit::new(QpType::Rc, &cq_t, CAP)).map_err(err)?;
    let t2 = pd2.create_qp(&QpInit::new(QpType::Rc, &cq_t, CAP)).map_err(err)?;
    let ql = pd3.create_qp(&QpInit::new(QpType::Rc, &cq_l, CAP)).map_err(err)?;

    // The legitimate connection: exchange through files, then RTS and receives.
    let l_psn = rng.next_u32() & 0xff_ffff;
    write_info(
        &dir.join("victim.info"),
        &[
            ("qpn", u64::from(ql.qp_num())),
            ("psn", u64::from(l_psn)),
            ("rkey", u64::from(l.mr().rkey())),
            ("va", l.mr().iova()),
            ("len", L_LEN as u64),
        ],
    )
    .map_err(err)?;
    let p = read_info(&dir.join("peer.info"), Duration::from_secs(30))?;
    let path = RemotePath {
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        rq_psn: get(&p, "psn")? as u32,
        sq_psn: l_psn,
        ..RemotePath::new(Gid::from_ipv4(peer_ip), sgid, get(&p, "qpn")? as u32)
    };
    ql.connect(&path).map_err(err)?;
    for i in 0..L_RECVS {
        post_l_recv(&ql, &l, i)?;
    }

    let listener = TcpListener::bind(SocketAddrV4::new(local, ctl_port)).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    // T1 and T2 are connected at the attacker's first ARM, not now: the attacker's address
    // exists only once the peer is up, and moving a QP to RTR towards an address nobody
    // answers fails (ibv_modify_qp(3) resolves the neighbour, as the kernel does).
    let mut arms = Arms { rng, t_psns: (0, 0), count: 0 };
    std::fs::write(dir.join("victim.ready"), b"").map_err(err)?;
    println!("victim: ready, T1 {:#x}, T2 {:#x}, legit QP {:#x}", t1.qp_num(), t2.qp_num(), ql.qp_num());

    let mut ctl: Option<(TcpStream, Vec<u8>)> = None;
    let mut wcs = [Wc::default(); 32];
    let mut stats = VictimStats::default();
    let stop = dir.join("stop-victim");
    let mut failure: Option<String> = None;
    let mut last_stop_check = Instant::now();
    loop {
        let mut busy = false;
        // The legitimate connection.
        let n = cq_l.poll(&mut wcs).map_err(err)?;
        for wc in &wcs[..n] {
            busy = true;
            if let Err(e) = on_legit(wc, &ql, &l, &mut stats) {
                failure.get_or_insert(e);
            }
        }
        // What the attacker's requests completed on T1/T2 (receives, errors): counted.
        let n = cq_t.poll(&mut wcs).map_err(err)?;
        for wc in &wcs[..n] {
            busy = true;
            *stats.t_completions.entry(format!("{}", wc.status())).or_default() += 1;
        }
        // Control.
        if ctl.is_none() {
            if let Ok((s, _)) = listener.accept() {
                s.set_nonblocking(true).map_err(err)?;
                ctl = Some((s, Vec::new()));
            }
        }
        if let Some((s, pending)) = ctl.as_mut() {
            let mut buf = [0u8; 256];
            match s.read(&mut buf) {
                Ok(0) => ctl = None,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => ctl = None,
            }
        }
        if let Some((s, pending)) = ctl.as_mut() {
            while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                if line.trim_ascii() == b"ARM" {
                    busy = true;
                    drain(&cq_t, &mut stats);
                    let info = arms.arm(&t1, &t2, &r, &r2, attacker, sgid)?;
                    let reply = format!("ARMED {info} lrkey={}\n", l.mr().rkey());
                    s.set_nonblocking(false).map_err(err)?;
                    let sent = s.write_all(reply.as_bytes());
                    s.set_nonblocking(true).map_err(err)?;
                    if sent.is_err() {
                        ctl = None;
                        break;
                    }
                }
            }
        }
        if failure.is_some() || Instant::now() >= deadline {
            break;
        }
        if last_stop_check.elapsed() >= Duration::from_millis(10) {
            last_stop_check = Instant::now();
            if stop.exists() {
                break;
            }
        }
        if !busy {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let timed_out = Instant::now() >= deadline;
    drop(ctl);
    drop((t1, t2, ql));
    let checks = [("R", r.check().map_err(err)?), ("R2", r2.check().map_err(err)?), ("L", l.check().map_err(err)?)];
    let outside: usize = checks.iter().map(|(_, c)| c.outside_changed).sum();
    let canary: usize = checks.iter().map(|(_, c)| c.canary_bytes).sum();
    for (name, Check { canary_bytes, outside_changed, inside_changed }) in checks {
        println!("victim: region {name}: canary bytes {canary_bytes}, changed outside {outside_changed}, region bytes changed {inside_changed}");
    }
    println!(
        "VICTIM canary_bytes={canary} outside_changed={outside} legit_rounds={} legit_bad={} arms={} t_completions={:?}",
        stats.legit_rounds, stats.legit_bad, arms.count, stats.t_completions
    );
    if let Some(f) = failure {
        return Err(f);
    }
    if timed_out {
        return Err(format!("no stop-victim within {limit:?}"));
    }
    if outside != 0 {
        return Err(format!("{outside} bytes outside the registered regions changed"));
    }
    if stats.legit_bad != 0 {
        return Err(format!("{} legitimate rounds with wrong bytes", stats.legit_bad));
    }
    Ok(())
}

#[derive(Default)]
struct VictimStats {
    legit_rounds: u64,
    legit_bad: u64,
    t_completions: std::collections::BTreeMap<String, u64>,
}

fn drain(cq: &Cq, stats: &mut VictimStats) {
    let mut wcs = [Wc::default(); 32];
    while let Ok(n @ 1..) = cq.poll(&mut wcs) {
        for wc in &wcs[..n] {
            *stats.t_completions.entry(format!("{}", wc.status())).or_default() += 1;
        }
    }
}

fn post_l_recv(q: &rverbs::Qp, l: &Canaried, slot: usize) -> Result<(), String> {
    let sge = [l.mr().sge(L_WRITE + slot * L_MSG, L_MSG as u32).map_err(err)?];
    q.post_recv(&[RecvWr::new(slot as u64, &sge)]).map_err(err)
}

/// One completion of the legitimate QP: a round's message (check the bytes the peer
/// wrote, echo) or an echo's send completion.
fn on_legit(wc: &Wc, q: &rverbs::Qp, l: &Canaried, stats: &mut VictimStats) -> Result<(), String> {
    if !wc.is_success() {
        return Err(format!("legitimate QP: completion {} (vendor_err {:#x}), wr_id {}", wc.status(), wc.vendor_err(), wc.wr_id()));
    }
    if wc.wr_id() >= 1 << 32 {
        return Ok(()); // an echo sent
    }
    let slot = wc.wr_id() as usize;
    let mut msg = [0u8; L_MSG];
    l.mr().read(L_WRITE + slot * L_MSG, &mut msg).map_err(err)?;
    let k = u64::from_le_bytes(msg[..8].try_into().expect("8"));
    let off = u32::from_le_bytes(msg[8..12].try_into().expect("4")) as usize;
    let len = u32::from_le_bytes(msg[12..16].try_into().expect("4")) as usize;
    let ok = off + len <= L_WRITE && {
        let mut got = vec![0u8; len];
        l.mr().read(off, &mut got).map_err(err)?;
        got == legit_pattern(k, len)
    };
    stats.legit_rounds += 1;
    stats.legit_bad += u64::from(!ok);
    post_l_recv(q, l, slot)?;
    let mut echo = [0u8; L_MSG];
    echo[..8].copy_from_slice(&k.to_le_bytes());
    echo[8] = u8::from(ok);
    l.mr().write(L_ECHO, &echo).map_err(err)?;
    let sge = [l.mr().sge(L_ECHO, L_MSG as u32).map_err(err)?];
    q.post_send(&[SendWr::send(1 << 32 | k, &sge).signaled()]).map_err(err)?;
    Ok(())
}

/// Arming T1 and T2 towards the attacker.
struct Arms {
    rng: Rng,
    t_psns: (u32, u32),
    count: u64,
}

impl Arms {
    /// Resets T1 and T2, connects them to the attacker with fresh PSNs, posts receives
    /// (into R for T1, R2 for T2); returns what the attacker needs, as `k=v` words.
    fn arm(&mut self, t1: &rverbs::Qp, t2: &rverbs::Qp, r: &Canaried, r2: &Canaried, attacker: Ipv4Addr, sgid: u8) -> Result<String, String> {
        let reset = QpAttr { qp_state: QpState::Reset, ..QpAttr::default() };
        let mut psns = [0u32; 2];
        for (i, (q, region, dest)) in [(t1, r, ATTACKER_QPN_T1), (t2, r2, ATTACKER_QPN_T2)].into_iter().enumerate() {
            q.modify(&reset, QpAttrMask::STATE).map_err(err)?;
            let rq_psn = self.rng.next_u32() & 0xff_ffff;
            psns[i] = rq_psn;
            let path = RemotePath {
                access: ALL,
                rq_psn,
                sq_psn: self.rng.next_u32() & 0xff_ffff,
                retry_cnt: 1,
                rnr_retry: 0,
                ..RemotePath::new(Gid::from_ipv4(attacker), sgid, dest)
            };
            q.connect(&path).map_err(err)?;
            // Receives of 1 KiB into the region (a SEND from the attacker lands there).
            for k in 0..4u32 {
                let len = 1024.min(region.len() as u32 / 4);
                let sge = [region.mr().sge((k * len) as usize, len).map_err(err)?];
                q.post_recv(&[RecvWr::new(u64::from(k), &sge)]).map_err(err)?;
            }
        }
        self.t_psns = (psns[0], psns[1]);
        self.count += 1;
        Ok(format!(
            "t1={} t2={} psn1={} psn2={} rkey={} va={} len={} r2key={} r2va={} r2len={}",
            t1.qp_num(),
            t2.qp_num(),
            psns[0],
            psns[1],
            r.mr().rkey(),
            r.mr().iova(),
            r.len(),
            r2.mr().rkey(),
            r2.mr().iova(),
            r2.len()
        ))
    }
}

