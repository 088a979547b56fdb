//! Hostile peers (the hardening issue; `tests/chaos/hostile_seg.sh` is the harness):
//! another process of the user can write every segment of this process. What it writes
//! may make this process's objects fail, never make the device write outside the
//! regions the application registered.

mod common;

use common::*;
use rverbs::*;

/// This process's own `tables` segment, found among its mappings.
fn own_tables() -> std::path::PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let hdr = maps
        .lines()
        .filter_map(|l| l.find('/').map(|i| &l[i..]))
        .find(|p| p.ends_with("/hdr") && p.contains("/ep-"))
        .expect("the endpoint header is mapped");
    std::path::Path::new(hdr).with_file_name("tables")
}

/// Byte offset of key record `index` in `tables` (docs/shared-state.md, "The `tables`
/// segment": 65 536 QP records of 128 bytes, 65 536 SRQ records of 64, 65 536 CQ records of
/// 16, then keys of 384).
fn key_record(index: u32) -> u64 {
    (65_536 * 128 + 65_536 * 64 + 65_536 * 16 + index as usize * 384) as u64
}

/// Three pages of private memory — [canary][registered][canary] — with the middle one
/// registered on `pd`, for the key record attacks below.
struct Guarded {
    area: *mut u8,
    mr: Option<Mr>,
}

const PAGE: usize = 4096;

impl Guarded {
    fn new(pd: &Pd) -> Guarded {
        // SAFETY: a fresh private anonymous mapping of three pages, used only by this value.
        let area = unsafe {
            libc::mmap(std::ptr::null_mut(), 3 * PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        } as *mut u8;
        assert_ne!(area as *mut libc::c_void, libc::MAP_FAILED);
        // SAFETY: inside the mapping.
        unsafe { std::ptr::write_bytes(area, 0xC5, 3 * PAGE) };
        // SAFETY: the middle page stays mapped until the region is dropped (Drop).
        let mr = unsafe { pd.reg_mr(area.add(PAGE), PAGE, ALL_ACCESS) }.unwrap();
        Guarded { area, mr: Some(mr) }
    }

    fn mr(&self) -> &Mr {
        self.mr.as_ref().unwrap()
    }

    /// The hostile write: the record's `va` (byte 48 of the record) one page lower.
    fn move_record_down(&self) {
        use std::os::unix::fs::FileExt;
        let tables = std::fs::OpenOptions::new().read(true).write(true).open(own_tables()).unwrap();
        let at = key_record(self.mr().lkey() >> 8) + 48;
        let mut va = [0u8; 8];
        tables.read_exact_at(&mut va, at).unwrap();
        assert_eq!(u64::from_ne_bytes(va), self.area as u64 + PAGE as u64, "found the record");
        tables.write_all_at(&(self.area as u64).to_ne_bytes(), at).unwrap();
    }

    /// The canary pages and the registered page.
    fn pages(&self) -> (&[u8], &[u8], &[u8]) {
        // SAFETY: the mapping's three pages, mapped while `self` lives.
        let all = unsafe { std::slice::from_raw_parts(self.area, 3 * PAGE) };
        let (below, rest) = all.split_at(PAGE);
        let (inside, above) = rest.split_at(PAGE);
        (below, inside, above)
    }

    fn assert_canaries(&self) {
        let (below, _, above) = self.pages();
        assert!(below.iter().chain(above).all(|&x| x == 0xC5), "the device wrote outside the registered page");
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        drop(self.mr.take());
        // SAFETY: unmapping what `new` mapped, its region gone.
        unsafe { libc::munmap(self.area as *mut libc::c_void, 3 * PAGE) };
    }
}

// Hostile-segment harness, key_rec "va" attack: another process moved the address of a
// region's key record in this process's tables by one page. The owner took the address
// for its own accesses from the shared record, so a SEND received into that region was
// written one page below it, over memory the application never registered.
#[test]
fn a_key_record_rewritten_by_another_process_does_not_move_the_owners_writes() {
    let (a, b) = pair(QpType::Rc);
    let g = Guarded::new(&b.pd);
    g.move_record_down();
    let rsge = [g.mr().sge(0, 64).unwrap()];
    b.qp.post_recv(&[RecvWr::new(1, &rsge)]).unwrap();
    a.mr.write(0, &[0xAB; 64]).unwrap();
    let ssge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(2, &ssge).signaled()]).unwrap();
    let rwc = poll_one(&b.cq);
    g.assert_canaries();
    assert_ne!(rwc.status(), WcStatus::Success, "the receive cannot be placed through a record that lies");
}

// The same attack once the express lane remembers the key (docs/shared-state.md,
// "Remembered keys"): WRITEs through the region's rkey came before the rewrite, so the
// requester holds a memo of the record. The memo is what this process wrote, so the next
// WRITE lands in the registered page (or fails); never on the canary pages.
#[test]
fn a_key_record_rewritten_after_the_key_was_remembered_does_not_move_the_writes() {
    let (a, b) = pair(QpType::Rc);
    let g = Guarded::new(&b.pd);
    let (iova, rkey) = (g.mr().iova(), g.mr().rkey());
    a.mr.write(0, &[0xAB; 64]).unwrap();
    let ssge = [a.mr.sge(0, 64).unwrap()];
    for id in 0..4 {
        a.qp.post_send(&[SendWr::write(id, &ssge, iova, rkey).signaled()]).unwrap();
        assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    }
    g.mr().write(0, &[0; 64]).unwrap();
    g.move_record_down();
    a.qp.post_send(&[SendWr::write(9, &ssge, iova, rkey).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    g.assert_canaries();
    if wc.status() == WcStatus::Success {
        assert_eq!(&g.pages().1[..64], &[0xAB; 64], "a WRITE that succeeded landed in the registered page");
    }
}

/// This process's segment named `name` (its last path component), found among its mappings.
fn own_segment(name: &str) -> std::path::PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = maps
        .lines()
        .filter_map(|l| l.find('/').map(|i| &l[i..]))
        .find(|p| p.contains("/ep-") && p.ends_with(&format!("/{name}")))
        .unwrap_or_else(|| panic!("segment {name} is mapped"));
    std::path::PathBuf::from(path)
}

// Another process of the user rewrites a tag-matching SRQ's list (`tm-<srqn>`,
// docs/tag-matching.md) with seeded garbage, words of entries and counters alike (the lock
// word excepted: a forged holder is the bounded-wait rule's, tested with the other
// locks). Tagged messages keep arriving: each completes (matched, unexpected, or in
// error), and the device writes nowhere but the registered page.
#[test]
fn a_tag_list_rewritten_by_another_process_never_moves_the_devices_writes() {
    use std::os::unix::fs::FileExt;
    let page = 4096usize;
    let sender = side(QpType::Rc);
    let r = side(QpType::Rc);
    let tm_cq = r.ctx.create_cq(&CqInit::new(256).wc_flags(WcExFlags::STANDARD | WcExFlags::TM_INFO)).unwrap();
    let srq = r
        .pd
        .create_srq_tm(&SrqInit { max_wr: 64, max_sge: 1, ..SrqInit::default() }, TmCap { max_num_tags: 8, max_ops: 8 }, &tm_cq)
        .unwrap();
    let qp = r.pd.create_qp(&QpInit { srq: Some(&srq), ..QpInit::new(QpType::Rc, &r.cq, CAP) }).unwrap();
    let recv = Side { qp, ..r };
    connect(&sender, &recv, &PATH);
    // [canary page][registered page][canary page]
    // SAFETY: a fresh private anonymous mapping of three pages, used only by this test.
    let area = unsafe {
        libc::mmap(std::ptr::null_mut(), 3 * page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    } as *mut u8;
    assert_ne!(area as *mut libc::c_void, libc::MAP_FAILED);
    // SAFETY: inside the mapping.
    unsafe { std::ptr::write_bytes(area, 0xC5, 3 * page) };
    // SAFETY: the middle page stays mapped for the test's life.
    let mr = unsafe { recv.pd.reg_mr(area.add(page), page, ALL_ACCESS) }.unwrap();
    let seg = std::fs::OpenOptions::new().read(true).write(true).open(own_segment(&format!("tm-{}", srq.srq_num()))).unwrap();
    let len = seg.metadata().unwrap().len();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut completions = 0;
    for round in 0..40u64 {
        // Tags and plain receives, all inside the registered page.
        let s = [mr.sge(((round % 8) * 256) as usize, 256).unwrap()];
        let kind = TagOpKind::Add { recv_wr_id: round, sg_list: &s, tag: round % 4, mask: 3 };
        let _ = srq.post_tag_op(&TagOp { wr_id: round, kind, flags: TagOpFlags::empty(), unexpected_cnt: 0 });
        let p = [mr.sge(2048 + ((round % 8) * 256) as usize, 256).unwrap()];
        let _ = srq.post_recv(&[RecvWr::new(1000 + round, &p)]);
        // The hostile writes: a few words of the segment past its lock, some of them the
        // registered MR's own lkey or an address beside the page.
        for _ in 0..8 {
            let at = (64 + next() % (len - 72)) & !7;
            let word = match next() % 4 {
                0 => u64::from(mr.lkey()) << 32 | 4096,
                1 => area as u64 + (next() % (3 * page as u64)),
                _ => next(),
            };
            seg.write_all_at(&word.to_ne_bytes(), at).unwrap();
        }
        let mut msg = [0u8; 48];
        msg[0] = if round % 3 == 0 { TmhOp::Rndv as u8 } else { TmhOp::Eager as u8 };
        msg[8..16].copy_from_slice(&(round % 4).to_be_bytes());
        msg[16..24].copy_from_slice(&(area as u64).to_be_bytes());
        msg[24..28].copy_from_slice(&mr.rkey().to_be_bytes());
        msg[28..32].copy_from_slice(&4096u32.to_be_bytes());
        sender.mr.write(0, &msg).unwrap();
        let _ = sender.qp.post_send(&[SendWr::send(round, &[sender.mr.sge(0, 48).unwrap()])]);
        let mut wc = [Wc::default(); 8];
        loop {
            let n = tm_cq.poll(&mut wc).unwrap();
            completions += n;
            if n == 0 {
                break;
            }
        }
        if recv.qp.query().qp_state == QpState::Err {
            break;
        }
    }
    assert!(completions > 0, "messages were delivered");
    // SAFETY: reading the canary pages of the mapping.
    let below = unsafe { std::slice::from_raw_parts(area, page) };
    // SAFETY: as above.
    let above = unsafe { std::slice::from_raw_parts(area.add(2 * page), page) };
    assert!(below.iter().chain(above).all(|&x| x == 0xC5), "the device wrote outside the registered page");
    drop((mr, srq));
    // SAFETY: unmapping what this test mapped.
    unsafe { libc::munmap(area as *mut libc::c_void, 3 * page) };
}

/// The mapped CQ segment (`cq-<id>-<gen>`, docs/shared-state.md) whose first slot holds a
/// receive completion of `wr_id` carrying a take's count: the CQ a test's first receive
/// completed to, told apart from the other contexts' CQs of this process by its content.
fn cq_segment_with_first_receive(wr_id: u64) -> std::fs::File {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut paths: Vec<&str> = maps.lines().filter_map(|l| l.find('/').map(|i| &l[i..])).filter(|p| p.contains("/ep-") && p.contains("/cq-")).collect();
    paths.dedup();
    paths
        .into_iter()
        .find_map(|p| {
            let f = std::fs::OpenOptions::new().read(true).write(true).open(p).ok()?;
            let mut w = [0u8; 64];
            f.read_exact_at(&mut w, CQ_SLOTS).ok()?;
            let word = |i: usize| u64::from_ne_bytes(w[8 * i..8 * i + 8].try_into().unwrap());
            (word(0) == 1 && word(1) == wr_id && word(5) & RQ_TAKEN_BIT != 0).then_some(f)
        })
        .expect("the receiver's CQ segment")
}

/// Byte offset of a CQ segment's ring indices (`tail`, then `head` one 128-byte line on)
/// and of its first slot (docs/completion-queues.md: 64-byte slots, a sequence word and
/// the CQE's seven words).
const CQ_RING: u64 = 4096;
const CQ_SLOTS: u64 = CQ_RING + 256;
/// Bit of CQE word 4 saying word 6 carries a receive queue's tag and taken count.
const RQ_TAKEN_BIT: u64 = 1 << 41;

// Another process of the user writes a receive completion into this process's CQ that
// names a receive not yet taken (its ring's tag and a count one ahead). The owner's poll
// lets that receive's hold go early (docs/memory.md, "Buffer lifetime"): its region,
// whose last handle the application dropped, is deregistered while the receive is still
// posted. The message that then takes the receive fails its key check: nothing is
// written into the page, nor beside it.
#[test]
fn a_forged_receive_count_ends_a_hold_early_and_the_receive_then_fails_its_key_check() {
    use std::os::unix::fs::FileExt;
    let (a, b) = pair(QpType::Rc);
    let first = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let mut g = Guarded::new(&b.pd);
    let (first_wr, second_wr) = (0x5EED_0001u64, 0x5EED_0002u64);
    b.qp.post_recv(&[RecvWr::new(first_wr, &[first.sge(0, 64).unwrap()]), RecvWr::new(second_wr, &[g.mr().sge(0, 64).unwrap()])]).unwrap();
    drop(g.mr.take());
    a.mr.write(0, &[0xAB; 64]).unwrap();
    let ssge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &ssge).signaled()]).unwrap();
    assert_eq!((poll_one(&b.cq).wr_id(), poll_one(&a.cq).status()), (first_wr, WcStatus::Success));

    // The forgery: slot 1 of the ring, as a producer publishes it (words, then the
    // sequence word, then the tail), with the first completion's tag and count + 1.
    let cq = cq_segment_with_first_receive(first_wr);
    let read = |at: u64| {
        let mut w = [0u8; 8];
        cq.read_exact_at(&mut w, at).unwrap();
        u64::from_ne_bytes(w)
    };
    assert_eq!((read(CQ_RING), read(CQ_RING + 128)), (1, 1), "one completion published and polled");
    let taken = read(CQ_SLOTS + 8 + 6 * 8);
    let forged_count = (taken >> 32) + 1;
    let words: [u64; 7] = [
        0xF0F0,
        64,
        u64::from(b.qp.qp_num()),
        u64::from(WcOpcode::Recv as u32) << 40,
        RQ_TAKEN_BIT,
        0,
        (taken & 0xffff_ffff) | forged_count << 32,
    ];
    for (i, w) in words.iter().enumerate() {
        cq.write_all_at(&w.to_ne_bytes(), CQ_SLOTS + 64 + 8 + 8 * i as u64).unwrap();
    }
    cq.write_all_at(&2u64.to_ne_bytes(), CQ_SLOTS + 64).unwrap();
    cq.write_all_at(&2u64.to_ne_bytes(), CQ_RING).unwrap();
    assert_eq!(poll_one(&b.cq).wr_id(), 0xF0F0, "the owner polled the forged completion");

    // The receive the forgery named is still posted, its region gone.
    a.mr.write(0, &[0xCD; 64]).unwrap();
    a.qp.post_send(&[SendWr::send(2, &ssge).signaled()]).unwrap();
    let rwc = poll_one(&b.cq);
    assert_eq!(rwc.wr_id(), second_wr);
    assert_ne!(rwc.status(), WcStatus::Success, "the receive's region was deregistered by the early release");
    assert_ne!(poll_one(&a.cq).status(), WcStatus::Success);
    g.assert_canaries();
    assert!(g.pages().1.iter().all(|&x| x == 0xC5), "nothing was written into the deregistered page");
}
