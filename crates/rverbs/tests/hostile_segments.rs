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

// Hostile-segment harness, key_rec "va" attack: another process moved the address of a
// region's key record in this process's tables by one page. The owner took the address
// for its own accesses from the shared record, so a SEND received into that region was
// written one page below it, over memory the application never registered.
#[test]
fn a_key_record_rewritten_by_another_process_does_not_move_the_owners_writes() {
    use std::os::unix::fs::FileExt;
    let page = 4096usize;
    let (a, b) = pair(QpType::Rc);
    // [canary page][registered page][canary page]
    // SAFETY: a fresh private anonymous mapping of three pages, used only by this test.
    let area = unsafe {
        libc::mmap(std::ptr::null_mut(), 3 * page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    } as *mut u8;
    assert_ne!(area as *mut libc::c_void, libc::MAP_FAILED);
    // SAFETY: inside the mapping.
    unsafe { std::ptr::write_bytes(area, 0xC5, 3 * page) };
    // SAFETY: the middle page stays mapped for the test's life.
    let mr = unsafe { b.pd.reg_mr(area.add(page), page, ALL_ACCESS) }.unwrap();
    // The hostile write: the record's `va` (byte 48 of the record) one page lower.
    let tables = std::fs::OpenOptions::new().read(true).write(true).open(own_tables()).unwrap();
    let at = key_record(mr.lkey() >> 8) + 48;
    let mut va = [0u8; 8];
    tables.read_exact_at(&mut va, at).unwrap();
    assert_eq!(u64::from_ne_bytes(va), area as u64 + page as u64, "found the record");
    tables.write_all_at(&(area as u64).to_ne_bytes(), at).unwrap();

    let rsge = [mr.sge(0, 64).unwrap()];
    b.qp.post_recv(&[RecvWr::new(1, &rsge)]).unwrap();
    a.mr.write(0, &[0xAB; 64]).unwrap();
    let ssge = [a.mr.sge(0, 64).unwrap()];
    a.qp.post_send(&[SendWr::send(2, &ssge).signaled()]).unwrap();
    let rwc = poll_one(&b.cq);
    // SAFETY: reading the canary pages of the mapping.
    let below = unsafe { std::slice::from_raw_parts(area, page) };
    // SAFETY: as above.
    let above = unsafe { std::slice::from_raw_parts(area.add(2 * page), page) };
    assert!(below.iter().chain(above).all(|&x| x == 0xC5), "the device wrote outside the registered page");
    assert_ne!(rwc.status(), WcStatus::Success, "the receive cannot be placed through a record that lies");
    drop(mr);
    // SAFETY: unmapping what this test mapped.
    unsafe { libc::munmap(area as *mut libc::c_void, 3 * page) };
}
