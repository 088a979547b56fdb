//! The legitimate peer (namespace B): an RC QP on the Rust API connected to the victim's
//! legitimate QP. Each round: WRITE 4 KiB of the round's pattern into the victim's region
//! L, then SEND (round, offset, length); the victim checks the bytes and echoes (round,
//! ok). Runs until the file `stop-peer` appears and at least `--min-rounds` rounds are
//! done; fails if any round takes longer than `--stall-ms` (a stall), any completion
//! fails, or an echo says the bytes were wrong.

use std::time::{Duration, Instant};

use rverbs::{Access, CqInit, Gid, QpCap, QpInit, QpType, RecvWr, RemotePath, SendWr, Wc};

use crate::common::{get, legit_pattern, read_info, wait_file, write_info, Args, Rng};
use crate::victim::{gid_index, LEGIT_WRITE_LEN, L_WRITE};

const CAP: QpCap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
const MSG: usize = 16;
/// Layout of the peer's region: the round's bytes at 0, the message, the echo slot.
const OUT_MSG: usize = LEGIT_WRITE_LEN;
const IN_ECHO: usize = LEGIT_WRITE_LEN + 64;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn run(a: &Args) -> Result<(), String> {
    let dir = a.path("dir")?;
    let local = a.ip("local")?;
    let victim = a.ip("victim")?;
    let min_rounds = a.num("min-rounds", 20)?;
    let stall = Duration::from_millis(a.num("stall-ms", 3000)?);
    let limit = Duration::from_secs(a.num("seconds", 300)?);
    let mut rng = Rng::new(a.num("seed", 1)? ^ 0x7065_6572);
    let deadline = Instant::now() + limit;

    let dev = rverbs::devices().map_err(err)?.into_iter().next().ok_or("no device")?;
    let ctx = dev.open().map_err(err)?;
    let sgid = gid_index(&ctx, local)?;
    let pd = ctx.alloc_pd().map_err(err)?;
    let cq = ctx.create_cq(&CqInit::new(64)).map_err(err)?;
    let mr = pd.alloc_mr(2 * LEGIT_WRITE_LEN, Access::LOCAL_WRITE).map_err(err)?;
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).map_err(err)?;
    let psn = rng.next_u32() & 0xff_ffff;
    write_info(&dir.join("peer.info"), &[("qpn", u64::from(qp.qp_num())), ("psn", u64::from(psn))]).map_err(err)?;
    let v = read_info(&dir.join("victim.info"), Duration::from_secs(30))?;
    let (vrkey, vva) = (get(&v, "rkey")? as u32, get(&v, "va")?);
    let path = RemotePath {
        access: Access::empty(),
        rq_psn: get(&v, "psn")? as u32,
        sq_psn: psn,
        ..RemotePath::new(Gid::from_ipv4(victim), sgid, get(&v, "qpn")? as u32)
    };
    qp.connect(&path).map_err(err)?;
    wait_file(&dir.join("victim.ready"), Duration::from_secs(30))?;
    std::fs::write(dir.join("peer.ready"), b"").map_err(err)?;

    let stop = dir.join("stop-peer");
    let mut rounds = 0u64;
    let mut max_gap = Duration::ZERO;
    let mut wcs = [Wc::default(); 8];
    let result = loop {
        if Instant::now() >= deadline {
            break Err(format!("no stop-peer within {limit:?}"));
        }
        if rounds >= min_rounds && stop.exists() {
            break Ok(());
        }
        let start = Instant::now();
        let k = rounds;
        let off = (k as usize % (L_WRITE / LEGIT_WRITE_LEN)) * LEGIT_WRITE_LEN;
        mr.write(0, &legit_pattern(k, LEGIT_WRITE_LEN)).map_err(err)?;
        let mut msg = [0u8; MSG];
        msg[..8].copy_from_slice(&k.to_le_bytes());
        msg[8..12].copy_from_slice(&(off as u32).to_le_bytes());
        msg[12..16].copy_from_slice(&(LEGIT_WRITE_LEN as u32).to_le_bytes());
        mr.write(OUT_MSG, &msg).map_err(err)?;
        let echo_sge = [mr.sge(IN_ECHO, MSG as u32).map_err(err)?];
        qp.post_recv(&[RecvWr::new(3, &echo_sge)]).map_err(err)?;
        let wsge = [mr.sge(0, LEGIT_WRITE_LEN as u32).map_err(err)?];
        let ssge = [mr.sge(OUT_MSG, MSG as u32).map_err(err)?];
        // RC executes in order: the WRITE is placed before the SEND is delivered.
        qp.post_send(&[SendWr::write(1, &wsge, vva + off as u64, vrkey).signaled(), SendWr::send(2, &ssge).signaled()])
            .map_err(err)?;
        let mut pending = 0b111u32; // bits of wr_id - 1: write, send, echo
        let mut bad: Option<String> = None;
        while pending > 0 && bad.is_none() {
            if start.elapsed() > stall {
                bad = Some(format!("round {k} stalled: nothing for {stall:?} (pending {pending:#b})"));
                break;
            }
            let n = cq.poll(&mut wcs).map_err(err)?;
            if n == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
            for wc in &wcs[..n] {
                if !wc.is_success() {
                    bad = Some(format!("round {k}: wr {} completed {} (vendor_err {:#x})", wc.wr_id(), wc.status(), wc.vendor_err()));
                    continue;
                }
                pending &= !(1 << (wc.wr_id() - 1));
            }
        }
        if let Some(b) = bad {
            break Err(b);
        }
        let mut echo = [0u8; MSG];
        mr.read(IN_ECHO, &mut echo).map_err(err)?;
        if u64::from_le_bytes(echo[..8].try_into().expect("8")) != k || echo[8] != 1 {
            break Err(format!("round {k}: echo {echo:02x?} (the victim saw other bytes)"));
        }
        max_gap = max_gap.max(start.elapsed());
        rounds += 1;
    };
    println!("PEER rounds={rounds} max_round_ms={:.1}", max_gap.as_secs_f64() * 1e3);
    result
}
