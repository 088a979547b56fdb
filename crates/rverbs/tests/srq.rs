//! ibv_create_srq(3), ibv_post_srq_recv(3): receives shared by several QPs.
mod common;
use common::*;
use rverbs::*;

#[test]
fn two_qps_consume_one_srq_in_order() {
    let a1 = side(QpType::Rc);
    let a2 = side(QpType::Rc);
    let b = side(QpType::Rc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: 8, max_sge: 2, ..SrqInit::default() }).unwrap();
    let q1 = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &b.cq, CAP) }).unwrap();
    let q2 = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &b.cq, CAP) }).unwrap();
    assert_eq!(q1.cap().max_recv_wr, 0, "receive caps are the SRQ's");
    let b1 = Side { qp: q1, ..side(QpType::Rc) };
    let b1 = Side { ctx: b.ctx.clone(), pd: b.pd.clone(), cq: b.cq.clone(), mr: b.mr.clone(), ..b1 };
    let b2 = Side { ctx: b.ctx.clone(), pd: b.pd.clone(), cq: b.cq.clone(), mr: b.mr.clone(), qp: q2 };
    connect(&a1, &b1, &PATH);
    connect(&a2, &b2, &PATH);
    for i in 0..4u64 {
        let sge = [b.mr.sge(i as usize * 100, 100).unwrap()];
        srq.post_recv(&[RecvWr::new(i, &sge)]).unwrap();
    }
    assert_eq!(srq.len(), 4);
    // A QP on an SRQ has no receive queue of its own.
    let sge = [b.mr.sge(0, 8).unwrap()];
    assert_eq!(b1.qp.post_recv(&[RecvWr::new(9, &sge)]).unwrap_err().error.errno(), libc::EINVAL);
    a1.mr.write(0, b"one").unwrap();
    a2.mr.write(0, b"two").unwrap();
    a1.qp.post_send(&[SendWr::send(1, &[a1.mr.sge(0, 3).unwrap()])]).unwrap();
    a2.qp.post_send(&[SendWr::send(2, &[a2.mr.sge(0, 3).unwrap()])]).unwrap();
    let r1 = poll_one(&b.cq);
    let r2 = poll_one(&b.cq);
    assert_eq!((r1.wr_id(), r1.qp_num()), (0, b1.qp.qp_num()));
    assert_eq!((r2.wr_id(), r2.qp_num()), (1, b2.qp.qp_num()));
    let mut x = [0u8; 3];
    b.mr.read(0, &mut x).unwrap();
    assert_eq!(&x, b"one");
    b.mr.read(100, &mut x).unwrap();
    assert_eq!(&x, b"two");
    assert_eq!(srq.len(), 2);
}

#[test]
fn srq_limits_and_resize() {
    let pd = open().alloc_pd().unwrap();
    let max = pd.context().query_device().max_srq_wr;
    assert_eq!(pd.create_srq(&SrqInit { max_wr: 0, ..SrqInit::default() }).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(pd.create_srq(&SrqInit { max_wr: max + 1, ..SrqInit::default() }).unwrap_err().errno(), libc::EINVAL);
    let srq = pd.create_srq(&SrqInit { max_wr: 2, max_sge: 1, ..SrqInit::default() }).unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 8).unwrap()];
    srq.post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)]).unwrap();
    let e = srq.post_recv(&[RecvWr::new(3, &sge)]).unwrap_err();
    assert_eq!(e.error.errno(), libc::ENOMEM);
    assert_eq!(srq.modify(&SrqAttr { max_wr: 1, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap_err().errno(), libc::EINVAL);
    srq.modify(&SrqAttr { max_wr: 8, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
    assert_eq!(srq.query().max_wr, 8);
    assert_eq!(srq.len(), 2);
    srq.post_recv(&[RecvWr::new(3, &sge)]).unwrap();
    let two = [sge[0], sge[0]];
    assert_eq!(srq.post_recv(&[RecvWr::new(4, &two)]).unwrap_err().error.errno(), libc::EINVAL);
}

/// A QP `b` on a new SRQ of `b`'s PD, connected to `a`.
fn srq_pair(max_wr: u32) -> (Side, Side, Srq) {
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let srq = b.pd.create_srq(&SrqInit { max_wr, max_sge: 2, ..SrqInit::default() }).unwrap();
    let qp = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &b.cq, CAP) }).unwrap();
    let b = Side { qp, ..b };
    connect(&a, &b, &PATH);
    (a, b, srq)
}

/// ibv_post_srq_recv(3), ibv_poll_cq(3): SENDs after the first (the express lane, which
/// takes an SRQ's receives as the queued way does) fill the SRQ's receives oldest first,
/// each completion naming the receive, the QP and the length.
#[test]
fn sends_after_the_first_take_the_srqs_receives_in_order() {
    let (a, b, srq) = srq_pair(16);
    for i in 0..8u64 {
        let sge = [b.mr.sge(i as usize * 512, 512).unwrap()];
        srq.post_recv(&[RecvWr::new(100 + i, &sge)]).unwrap();
    }
    for i in 0..8u64 {
        let msg: Vec<u8> = (0..100 + i as usize).map(|k| (k as u8).wrapping_mul(3).wrapping_add(i as u8)).collect();
        a.mr.write(0, &msg).unwrap();
        a.qp.post_send(&[SendWr::send(i, &[a.mr.sge(0, msg.len() as u32).unwrap()]).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        let r = poll_one(&b.cq);
        assert_eq!((r.wr_id(), r.status(), r.byte_len(), r.qp_num()), (100 + i, WcStatus::Success, Some(msg.len() as u32), b.qp.qp_num()));
        let mut got = vec![0u8; msg.len()];
        b.mr.read(i as usize * 512, &mut got).unwrap();
        assert_eq!(got, msg, "SEND {i}");
    }
    assert_eq!(srq.len(), 0);
}

/// ibv_post_send(3): after SENDs into an SRQ, one larger than its next receive fails as
/// on the queued way (REM_INV_REQ_ERR at the sender, LOC_LEN_ERR at the receiver) and one
/// that finds the SRQ empty waits for a receive (RNR), then lands in it.
#[test]
fn an_srq_receive_too_small_or_missing_after_sends_is_handled_as_the_queued_way() {
    let (a, b, srq) = srq_pair(16);
    let sge = [b.mr.sge(0, 64).unwrap()];
    srq.post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)]).unwrap();
    let ss = [a.mr.sge(0, 8).unwrap()];
    for id in 1..=2u64 {
        a.qp.post_send(&[SendWr::send(id, &ss).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        assert_eq!(poll_one(&b.cq).wr_id(), id);
    }
    // Empty: RNR until a receive is posted (min_rnr_timer 1 in PATH), then delivered.
    a.qp.post_send(&[SendWr::send(3, &ss).signaled()]).unwrap();
    assert_empty(&b.cq);
    srq.post_recv(&[RecvWr::new(3, &sge)]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).wr_id(), 3);
    // Too small.
    let small = [b.mr.sge(0, 16).unwrap()];
    srq.post_recv(&[RecvWr::new(4, &small)]).unwrap();
    a.qp.post_send(&[SendWr::send(4, &[a.mr.sge(0, 17).unwrap()])]).unwrap();
    let s = poll_one(&a.cq);
    assert_eq!((s.status(), s.vendor_err()), (WcStatus::RemInvReqErr, vendor_err::RECV_TOO_SMALL));
    let r = poll_one(&b.cq);
    assert_eq!((r.wr_id(), r.status()), (4, WcStatus::LocLenErr));
    assert_eq!(b.qp.state(), QpState::Err);
}

/// ibv_post_srq_recv(3) from one thread while another resizes the SRQ (ibv_modify_srq(3),
/// IBV_SRQ_MAX_WR) back and forth: every receive posted is queued once both are done. A
/// post that took the queue before a resize must not write into the ring the resize
/// replaced (nothing takes from it any more: the receive would be lost).
#[test]
fn receives_posted_while_the_srq_is_resized_are_all_kept() {
    const POSTS: usize = 2000;
    let b = side(QpType::Rc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: 2048, max_sge: 1, ..SrqInit::default() }).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let resized = std::sync::atomic::AtomicU32::new(0);
    let posted = std::sync::atomic::AtomicU64::new(0);
    let waiting = std::sync::atomic::AtomicBool::new(false);
    let resizes = std::thread::scope(|s| {
        s.spawn(|| {
            let sge = [b.mr.sge(0, 8).unwrap()];
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            for i in 0..POSTS as u64 {
                // Every 100 posts, one resize at least: the posts never all go before one
                // (they once did, and the test had nothing to say).
                if i % 100 == 0 {
                    let seen = resized.load(std::sync::atomic::Ordering::SeqCst);
                    waiting.store(true, std::sync::atomic::Ordering::SeqCst);
                    while resized.load(std::sync::atomic::Ordering::SeqCst) == seen {
                        assert!(std::time::Instant::now() < deadline, "no resize within 30 s");
                        std::hint::spin_loop();
                    }
                }
                srq.post_recv_unpinned(&[RecvWr::new(i, &sge)]).unwrap();
                posted.store(i + 1, std::sync::atomic::Ordering::SeqCst);
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let (mut resizes, mut at) = (0u32, 0u64);
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            // And one resize per 50 posts at most: back to back, the resizes hold the
            // SRQ's lock nearly all the time and starve the poster.
            let now = posted.load(std::sync::atomic::Ordering::SeqCst);
            if !waiting.swap(false, std::sync::atomic::Ordering::SeqCst) && now < at + 50 {
                std::hint::spin_loop();
                continue;
            }
            at = now;
            let max_wr = if resizes.is_multiple_of(2) { 4096 } else { 2048 };
            srq.modify(&SrqAttr { max_wr, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
            resizes += 1;
            resized.store(resizes, std::sync::atomic::Ordering::SeqCst);
        }
        resizes
    });
    assert!(resizes >= (POSTS / 100) as u32, "{resizes} resizes while {POSTS} receives were posted");
    assert_eq!(srq.len(), POSTS, "receives kept after {resizes} resizes");
}

/// UC SENDs into an SRQ that always holds receives for them while another thread resizes
/// it back and forth: every message lands. A take that looked the queue up before a resize
/// finds the old ring empty and follows it to the new one; refused, a UC message is
/// dropped with receives posted.
#[test]
fn uc_sends_into_an_srq_resized_under_them_all_land() {
    const SENDS: usize = 1000;
    let a = side(QpType::Uc);
    let b = side(QpType::Uc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: 2048, max_sge: 1, ..SrqInit::default() }).unwrap();
    let cq = b.ctx.create_cq(&CqInit::new(2048)).unwrap();
    let qp = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Uc, &cq, CAP) }).unwrap();
    connect_qp(&a.qp, &a.ctx, qp.qp_num(), &PATH);
    connect_qp(&qp, &b.ctx, a.qp.qp_num(), &PATH);
    let sge = [b.mr.sge(0, 8).unwrap()];
    for i in 0..SENDS as u64 {
        srq.post_recv(&[RecvWr::new(i, &sge)]).unwrap();
    }
    // One resize per SEND at most (back to back, the resizer would hold the SRQ's lock
    // nearly all the time and starve the sender).
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let resizes = std::thread::scope(|s| {
        s.spawn(|| {
            let sge = [a.mr.sge(0, 8).unwrap()];
            for i in 0..SENDS as u64 {
                a.qp.post_send(&[SendWr::send(i, &sge).signaled()]).unwrap();
                assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "UC SEND {i} completes locally");
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let (mut resizes, mut seen) = (0u32, usize::MAX);
        loop {
            let now = sent.load(std::sync::atomic::Ordering::SeqCst);
            if now == SENDS {
                break resizes;
            }
            if now == seen {
                std::thread::yield_now();
                continue;
            }
            seen = now;
            let max_wr = if resizes.is_multiple_of(2) { 4096 } else { 2048 };
            srq.modify(&SrqAttr { max_wr, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
            resizes += 1;
        }
    });
    let mut received = 0;
    let mut wc = [Wc::default(); 64];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while received < SENDS && std::time::Instant::now() < deadline {
        let n = cq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!(w.status(), WcStatus::Success);
            received += 1;
        }
    }
    assert_eq!(received, SENDS, "messages received, {resizes} resizes beside");
    assert_eq!(srq.len(), 0);
}

/// [`uc_sends_into_an_srq_resized_under_them_all_land`] with the requester another
/// process, which maps the SRQ and takes its receives itself: a take that met the old
/// generation emptied by a resize follows the generation the old ring names, not the
/// SRQ's record, which the owner updates only after it moved every receive (and their
/// kept regions): reading the record again found the old generation for as long, and the
/// take gave up after 64 tries, dropping a UC message with receives posted.
#[test]
fn uc_sends_from_another_process_into_an_srq_resized_under_them_all_land() {
    use std::io::{BufRead, Write};
    const TEST: &str = "uc_sends_from_another_process_into_an_srq_resized_under_them_all_land";
    const SENDS: usize = 20_000;
    // Receives kept posted beyond the messages: each resize moves them all.
    const SPARE: usize = 2000;
    let wait = std::time::Duration::from_secs(30);
    if std::env::var_os("RVERBS_TEST_ROLE").is_some() {
        let mut lines = std::io::stdin().lock().lines();
        let a = side(QpType::Uc);
        println!("@@ {}", a.qp.qp_num());
        std::io::stdout().flush().unwrap();
        let b_qpn: u32 = lines.next().unwrap().unwrap().trim().parse().unwrap();
        connect_qp(&a.qp, &a.ctx, b_qpn, &PATH);
        assert_eq!(lines.next().unwrap().unwrap().trim(), "go");
        let sge = [a.mr.sge(0, 8).unwrap()];
        for i in 0..SENDS as u64 {
            a.qp.post_send(&[SendWr::send(i, &sge).signaled()]).unwrap();
            assert_eq!(poll_one(&a.cq).status(), WcStatus::Success, "UC SEND {i} completes locally");
        }
        println!("@@ sent");
        std::io::stdout().flush().unwrap();
        return;
    }
    let b = side(QpType::Uc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: 24576, max_sge: 1, ..SrqInit::default() }).unwrap();
    let cq = b.ctx.create_cq(&CqInit::new(SENDS as u32)).unwrap();
    let qp = b.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Uc, &cq, CAP) }).unwrap();
    let sge = [b.mr.sge(0, 8).unwrap()];
    for i in 0..(SENDS + SPARE) as u64 {
        srq.post_recv(&[RecvWr::new(i, &sge)]).unwrap();
    }
    let (child, mut stdin, lines) = spawn_child(TEST, &[("RVERBS_TEST_ROLE", "requester")]);
    let mut child = child;
    let a_qpn: u32 = lines.recv_timeout(wait).expect("the requester's QP number").trim().parse().unwrap();
    connect_qp(&qp, &b.ctx, a_qpn, &PATH);
    writeln!(stdin, "{}", qp.qp_num()).unwrap();
    stdin.flush().unwrap();
    let mut resizes = 0u32;
    let deadline = std::time::Instant::now() + wait;
    while lines.try_recv().is_err() {
        assert!(std::time::Instant::now() < deadline, "the requester did not finish within {wait:?}");
        let max_wr = if resizes.is_multiple_of(2) { 32768 } else { 24576 };
        srq.modify(&SrqAttr { max_wr, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
        resizes += 1;
        if resizes == 1 {
            writeln!(stdin, "go").unwrap();
            stdin.flush().unwrap();
        }
    }
    assert!(child.wait().unwrap().success(), "the requester");
    let mut received = 0;
    let mut wc = [Wc::default(); 64];
    loop {
        let n = cq.poll(&mut wc).unwrap();
        if n == 0 {
            break;
        }
        for w in &wc[..n] {
            assert_eq!(w.status(), WcStatus::Success);
            received += 1;
        }
    }
    assert_eq!(received, SENDS, "messages received from another process, {resizes} resizes beside");
    assert_eq!(srq.len(), SPARE);
}

/// ibv_modify_srq(3) shrinking an SRQ down to the receives it holds while another thread
/// posts more: each posted receive is kept, or the shrink is refused (EINVAL, the size is
/// below the receives queued, rxe `rxe_srq_chk_attr`). The count it checks was read
/// before a post that looked the queue up first added to it; the receives beyond the
/// new ring's room were then dropped without a completion.
#[test]
fn receives_posted_while_the_srq_shrinks_are_kept_or_the_shrink_is_refused() {
    const POSTS: u64 = 4000;
    const MAX: u32 = 8192;
    let b = side(QpType::Rc);
    let srq = b.pd.create_srq(&SrqInit { max_wr: MAX, max_sge: 1, ..SrqInit::default() }).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let posted = std::sync::atomic::AtomicUsize::new(0);
    let resized = std::sync::atomic::AtomicU32::new(0);
    let (shrinks, refused) = std::thread::scope(|s| {
        s.spawn(|| {
            // Lists of 32: one post writes them all into the queue it looked up.
            let sge = [b.mr.sge(0, 8).unwrap()];
            let wrs: Vec<RecvWr<'_>> = (0..POSTS).map(|i| RecvWr::new(i, &sge)).collect();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let mut next = 0;
            let mut lists = 0u32;
            while next < wrs.len() {
                // Every 10 lists, a shrink at least: the posts never all go before one
                // (on a loaded machine they did).
                if lists.is_multiple_of(10) {
                    while resized.load(std::sync::atomic::Ordering::SeqCst) < lists / 10 + 1 {
                        assert!(std::time::Instant::now() < deadline, "no shrink within 30 s");
                        std::hint::spin_loop();
                    }
                }
                let list = &wrs[next..(next + 32).min(wrs.len())];
                match srq.post_recv_unpinned(list) {
                    Ok(()) => {
                        lists += 1;
                        next += list.len();
                        posted.store(next, std::sync::atomic::Ordering::SeqCst);
                    }
                    // Full after a shrink: the rest is posted again once the SRQ grew back.
                    Err(e) => {
                        assert_eq!(e.error.errno(), libc::ENOMEM, "post {}: {e:?}", next + e.index);
                        assert!(std::time::Instant::now() < deadline, "post {} never found room", next + e.index);
                        next += e.index;
                        std::thread::yield_now();
                    }
                }
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let (mut shrinks, mut refused, mut seen) = (0u32, 0u32, usize::MAX);
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            // One shrink per list posted at most: the poster, refused while the SRQ is
            // shrunk, goes on once it grew back.
            let now = posted.load(std::sync::atomic::Ordering::SeqCst);
            if now == seen {
                std::thread::yield_now();
                continue;
            }
            seen = now;
            let max_wr = (srq.len() as u32).max(1);
            match srq.modify(&SrqAttr { max_wr, ..SrqAttr::default() }, SrqAttrMask::MAX_WR) {
                Ok(()) => shrinks += 1,
                Err(e) => {
                    assert_eq!(e.errno(), libc::EINVAL, "{e}");
                    refused += 1;
                }
            }
            srq.modify(&SrqAttr { max_wr: MAX, ..SrqAttr::default() }, SrqAttrMask::MAX_WR).unwrap();
            resized.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        (shrinks, refused)
    });
    assert!(shrinks > 0, "no shrink happened while the posts ran ({refused} refused)");
    assert_eq!(srq.len(), POSTS as usize, "receives kept after {shrinks} shrinks ({refused} refused)");
}
