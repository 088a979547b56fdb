//! The host-wide binding table (`rverbs_cm::table`): the conflict rules of the kernel's
//! `cma_check_port`, ephemeral ports, listener lookup, dead owners, races between
//! tables and between processes, and the shell helper `tests/conformance/lib/cm.bash`.
//!
//! Each test uses its own runtime directory under `std::env::temp_dir()` and removes it.
//! Every wait is bounded.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use rverbs_cm::table::*;

const PORT: u16 = 7174;

/// A runtime directory removed at the end of the test.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p = std::env::temp_dir().join(format!(
            "rverbs-cm-table-{test}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn always_alive() -> Alive {
    Arc::new(|_, _| true)
}

fn open(dir: &TempDir, ep: u32) -> Table {
    Table::open(&dir.0, ep, 1000 + ep as i32, always_alive()).unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn plain() -> BindOpts {
    BindOpts::default()
}

fn reuse() -> BindOpts {
    BindOpts {
        reuse_addr: true,
        af_only: false,
    }
}

fn afonly() -> BindOpts {
    BindOpts {
        reuse_addr: false,
        af_only: true,
    }
}

#[track_caller]
fn assert_errno<T: std::fmt::Debug>(r: std::io::Result<T>, errno: i32) {
    let e = r.expect_err("expected an error");
    assert_eq!(e.raw_os_error(), Some(errno), "{e}");
}

#[test]
fn bind_and_lookup_exact() {
    let dir = TempDir::new("exact");
    let t = open(&dir, 3);
    let b = t.bind(PS_TCP, sa("127.0.0.1:7174"), 17, plain()).unwrap();
    assert_eq!(b.addr(), sa("127.0.0.1:7174"));
    assert_eq!(b.ps(), PS_TCP);
    assert_eq!(
        b.owner(),
        Owner {
            ep: 3,
            pid: 1003,
            id: 17
        }
    );
    b.listen(10).unwrap();
    assert!(b.is_listening());
    assert_eq!(b.backlog(), 10);
    let me = Some(Owner {
        ep: 3,
        pid: 1003,
        id: 17,
    });
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), me);
    // Another table (process) sees it too.
    let other = open(&dir, 4);
    assert_eq!(other.lookup(PS_TCP, sa("127.0.0.1:7174")), me);
    assert_eq!(other.lookup(PS_TCP, sa("127.0.0.2:7174")), None);
    assert_eq!(other.lookup(PS_TCP, sa("127.0.0.1:7175")), None);
    assert_eq!(other.lookup(PS_UDP, sa("127.0.0.1:7174")), None);
    assert_eq!(other.lookup(PS_TCP, sa("[::1]:7174")), None);
    // The entry is one line a shell can grep.
    let line =
        std::fs::read_to_string(dir.0.join("cm/tcp-7174/127.0.0.1,ep3,pid1003,id17")).unwrap();
    assert_eq!(
        line,
        "ep=3 pid=1003 id=17 listen=1 reuse=0 afonly=1 backlog=10 addr=127.0.0.1:7174\n"
    );
}

#[test]
fn not_listening_is_not_found() {
    let dir = TempDir::new("notlisten");
    let t = open(&dir, 1);
    let b = t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, plain()).unwrap();
    let w = t.bind(PS_TCP, sa("0.0.0.0:7175"), 2, plain()).unwrap();
    assert!(!b.is_listening());
    assert_eq!(b.backlog(), 0);
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7175")), None);
    w.listen(0).unwrap();
    assert_eq!(
        w.backlog(),
        MAX_BACKLOG,
        "a backlog of 0 becomes max_backlog, as in ucma"
    );
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7175")).map(|o| o.id),
        Some(2)
    );
    // rdma_listen twice: EINVAL.
    assert_errno(w.listen(5), libc::EINVAL);
}

#[test]
fn wildcard_v4() {
    let dir = TempDir::new("wild4");
    let t = open(&dir, 1);
    let b = t.bind(PS_TCP, sa("0.0.0.0:7174"), 5, plain()).unwrap();
    b.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.id),
        Some(5)
    );
    assert_eq!(t.lookup(PS_TCP, sa("10.1.2.3:7174")).map(|o| o.id), Some(5));
    // An IPv4 listener never takes IPv6 requests (IPv4 binds are always afonly).
    assert_eq!(t.lookup(PS_TCP, sa("[::1]:7174")), None);
    assert_eq!(t.lookup(PS_TCP, sa("[::ffff:127.0.0.1]:7174")), None);
}

#[test]
fn wildcard_v6_covers_v4_unless_afonly() {
    let dir = TempDir::new("wild6");
    let t = open(&dir, 1);
    let b = t.bind(PS_TCP, sa("[::]:7174"), 6, plain()).unwrap();
    b.listen(1).unwrap();
    assert_eq!(t.lookup(PS_TCP, sa("[::1]:7174")).map(|o| o.id), Some(6));
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.id),
        Some(6)
    );
    drop(b);
    let b = t.bind(PS_TCP, sa("[::]:7174"), 7, afonly()).unwrap();
    b.listen(1).unwrap();
    assert_eq!(t.lookup(PS_TCP, sa("[::1]:7174")).map(|o| o.id), Some(7));
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
}

#[test]
fn exact_before_wildcard_of_other_family() {
    let dir = TempDir::new("order");
    let t = open(&dir, 1);
    // An afonly IPv6 wildcard and IPv4 bindings do not overlap (both afonly, families
    // differ), so they coexist.
    let w6 = t.bind(PS_TCP, sa("[::]:7174"), 1, afonly()).unwrap();
    let e4 = t.bind(PS_TCP, sa("127.0.0.1:7174"), 2, plain()).unwrap();
    w6.listen(1).unwrap();
    e4.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.id),
        Some(2)
    );
    assert_eq!(t.lookup(PS_TCP, sa("10.0.0.1:7174")), None);
    assert_eq!(t.lookup(PS_TCP, sa("[::1]:7174")).map(|o| o.id), Some(1));
    drop(e4);
    let w4 = t.bind(PS_TCP, sa("0.0.0.0:7174"), 3, plain()).unwrap();
    w4.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.id),
        Some(3)
    );
    assert_eq!(
        t.lookup(PS_TCP, sa("[fe80::1%2]:7174")).map(|o| o.id),
        Some(1)
    );
}

#[test]
fn link_local_exact_needs_the_scope() {
    let dir = TempDir::new("scope");
    let t = open(&dir, 1);
    let a = SocketAddr::V6(SocketAddrV6::new(
        "fe80::1".parse::<Ipv6Addr>().unwrap(),
        PORT,
        0,
        2,
    ));
    let b = t.bind(PS_TCP, a, 1, afonly()).unwrap();
    b.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("[fe80::1%2]:7174")).map(|o| o.id),
        Some(1)
    );
    assert_eq!(t.lookup(PS_TCP, sa("[fe80::1%3]:7174")), None);
    // The same address on another interface is another address.
    let _c = t.bind(PS_TCP, sa("[fe80::1%3]:7174"), 2, afonly()).unwrap();
    assert_errno(
        t.bind(PS_TCP, sa("[fe80::1%2]:7174"), 3, afonly()),
        libc::EADDRINUSE,
    );
}

#[test]
fn conflicts_equal_and_overlapping() {
    let dir = TempDir::new("conflict");
    let t = open(&dir, 1);
    let u = open(&dir, 2);
    let b = t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, plain()).unwrap();
    // Equal address, from this process or another: EADDRINUSE.
    assert_errno(
        t.bind(PS_TCP, sa("127.0.0.1:7174"), 2, plain()),
        libc::EADDRINUSE,
    );
    assert_errno(
        u.bind(PS_TCP, sa("127.0.0.1:7174"), 2, plain()),
        libc::EADDRINUSE,
    );
    // A wildcard on either side: EADDRNOTAVAIL (cma_check_port).
    assert_errno(
        u.bind(PS_TCP, sa("0.0.0.0:7174"), 3, plain()),
        libc::EADDRNOTAVAIL,
    );
    assert_errno(
        u.bind(PS_TCP, sa("[::]:7174"), 3, plain()),
        libc::EADDRNOTAVAIL,
    );
    // Disjoint addresses share the port; so do the other family's specific addresses
    // and an IPv4-mapped form (compared as IPv6, as cma_addr_cmp does).
    let _b2 = u.bind(PS_TCP, sa("127.0.0.2:7174"), 4, plain()).unwrap();
    let _b3 = u.bind(PS_TCP, sa("[::1]:7174"), 5, plain()).unwrap();
    let _b5 = u
        .bind(PS_TCP, sa("[::ffff:127.0.0.1]:7174"), 7, afonly())
        .unwrap();
    assert_errno(
        u.bind(PS_TCP, sa("[::1]:7174"), 8, afonly()),
        libc::EADDRINUSE,
    );
    // An IPv6 wildcard overlaps IPv6 addresses even when afonly.
    assert_errno(
        u.bind(PS_TCP, sa("[::]:7174"), 6, afonly()),
        libc::EADDRNOTAVAIL,
    );
    // An afonly IPv6 wildcard and IPv4 addresses do not overlap.
    let _b6 = u.bind(PS_TCP, sa("127.0.0.1:7176"), 9, plain()).unwrap();
    let _b7 = u.bind(PS_TCP, sa("[::]:7176"), 10, afonly()).unwrap();
    assert_errno(
        u.bind(PS_TCP, sa("0.0.0.0:7176"), 11, reuse()),
        libc::EADDRNOTAVAIL,
    );
    drop(b);
    assert_errno(
        t.bind(PS_TCP, sa("0.0.0.0:7174"), 9, plain()),
        libc::EADDRNOTAVAIL,
    );

    // A wildcard first, then specific addresses.
    let w = t.bind(PS_UDP, sa("0.0.0.0:7174"), 10, plain()).unwrap();
    assert_errno(
        u.bind(PS_UDP, sa("10.0.0.1:7174"), 11, plain()),
        libc::EADDRNOTAVAIL,
    );
    assert_errno(
        u.bind(PS_UDP, sa("0.0.0.0:7174"), 11, plain()),
        libc::EADDRNOTAVAIL,
    );
    assert_errno(
        u.bind(PS_UDP, sa("[::]:7174"), 11, plain()),
        libc::EADDRNOTAVAIL,
    );
    // The kernel's rule 3 spans families: an IPv6 address that is not afonly overlaps
    // the IPv4 wildcard; an afonly one does not.
    assert_errno(
        u.bind(PS_UDP, sa("[::1]:7174"), 11, plain()),
        libc::EADDRNOTAVAIL,
    );
    let _v6 = u.bind(PS_UDP, sa("[::1]:7174"), 12, afonly()).unwrap();
    drop(w);
    let _x = u.bind(PS_UDP, sa("10.0.0.1:7174"), 13, plain()).unwrap();
}

#[test]
fn reuse_addr_rule() {
    let dir = TempDir::new("reuse");
    let t = open(&dir, 1);
    let u = open(&dir, 2);
    // Both ask for reuse, neither listens: they share, even the same address.
    let a = t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, reuse()).unwrap();
    let b = u.bind(PS_TCP, sa("127.0.0.1:7174"), 2, reuse()).unwrap();
    let c = u.bind(PS_TCP, sa("0.0.0.0:7174"), 3, reuse()).unwrap();
    // One side without reuse: no sharing, whichever came first.
    assert_errno(
        u.bind(PS_TCP, sa("127.0.0.1:7174"), 4, plain()),
        libc::EADDRNOTAVAIL,
    );
    assert_errno(
        t.bind(PS_TCP, sa("127.0.0.1:7174"), 4, plain()),
        libc::EADDRNOTAVAIL,
    );
    let d = t.bind(PS_TCP, sa("127.0.0.9:7175"), 5, plain()).unwrap();
    assert_errno(
        u.bind(PS_TCP, sa("127.0.0.9:7175"), 6, reuse()),
        libc::EADDRINUSE,
    );
    drop(d);
    // rdma_listen checks again without reuse: the others are still bound.
    assert_errno(a.listen(1), libc::EADDRNOTAVAIL);
    assert!(!a.is_listening());
    drop(c);
    assert_errno(a.listen(1), libc::EADDRINUSE);
    drop(b);
    a.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.id),
        Some(1)
    );
    // A listener is no longer reusable: a reuse bind is refused.
    assert_errno(
        u.bind(PS_TCP, sa("127.0.0.1:7174"), 7, reuse()),
        libc::EADDRINUSE,
    );
    assert_errno(
        u.bind(PS_TCP, sa("0.0.0.0:7174"), 7, reuse()),
        libc::EADDRNOTAVAIL,
    );
    let line =
        std::fs::read_to_string(dir.0.join("cm/tcp-7174/127.0.0.1,ep1,pid1001,id1")).unwrap();
    assert!(line.contains(" listen=1 reuse=0 "), "{line}");
}

#[test]
fn port_spaces_are_separate() {
    let dir = TempDir::new("spaces");
    let t = open(&dir, 1);
    let a = t.bind(PS_TCP, sa("0.0.0.0:7174"), 1, plain()).unwrap();
    let b = t.bind(PS_UDP, sa("0.0.0.0:7174"), 2, plain()).unwrap();
    let c = t.bind(PS_IB, sa("0.0.0.0:7174"), 3, plain()).unwrap();
    let d = t.bind(0x1234, sa("0.0.0.0:7174"), 4, plain()).unwrap();
    for x in [&a, &b, &c, &d] {
        x.listen(1).unwrap();
    }
    let dst = sa("127.0.0.1:7174");
    assert_eq!(t.lookup(PS_TCP, dst).map(|o| o.id), Some(1));
    assert_eq!(t.lookup(PS_UDP, dst).map(|o| o.id), Some(2));
    assert_eq!(t.lookup(PS_IB, dst).map(|o| o.id), Some(3));
    assert_eq!(t.lookup(0x1234, dst).map(|o| o.id), Some(4));
    assert_eq!(t.lookup(PS_IPOIB, dst), None);
    for name in ["tcp-7174", "udp-7174", "ib-7174", "ps1234-7174"] {
        assert!(dir.0.join("cm").join(name).is_dir(), "{name}");
    }
}

#[test]
fn ephemeral_ports_distinct_and_in_range() {
    let dir = TempDir::new("ephemeral");
    let t = open(&dir, 1);
    let u = open(&dir, 2);
    let mut ports = HashSet::new();
    let mut keep = Vec::new();
    for i in 0..200u64 {
        let table = if i % 2 == 0 { &t } else { &u };
        let addr = if i % 3 == 0 {
            sa("[::]:0")
        } else {
            sa("127.0.0.1:0")
        };
        let b = table.bind(PS_TCP, addr, i, plain()).unwrap();
        let p = b.addr().port();
        assert!(EPHEMERAL_PORTS.contains(&p), "port {p}");
        assert_eq!(b.addr().ip(), addr.ip());
        assert!(ports.insert(p), "port {p} handed out twice");
        keep.push(b);
    }
    // Random starting points: 200 ports are not one run.
    let min = *ports.iter().min().unwrap();
    let max = *ports.iter().max().unwrap();
    assert!(max - min > 200, "ports {min}..={max}");
    // The ephemeral port is really taken.
    let p = keep[1].addr().port();
    assert_errno(
        t.bind(PS_TCP, SocketAddr::from(([127, 0, 0, 1], p)), 999, plain()),
        libc::EADDRINUSE,
    );
    // Another port space has its own ports.
    let _o = t
        .bind(PS_UDP, SocketAddr::from(([127, 0, 0, 1], p)), 999, plain())
        .unwrap();
}

#[test]
fn drop_removes() {
    let dir = TempDir::new("drop");
    let t = open(&dir, 1);
    let b = t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, plain()).unwrap();
    b.listen(4).unwrap();
    assert!(t.lookup(PS_TCP, sa("127.0.0.1:7174")).is_some());
    drop(b);
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
    assert!(
        !dir.0.join("cm/tcp-7174").exists(),
        "empty port directory removed"
    );
    let b = t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, plain()).unwrap();
    // The same id binding the same address again: EINVAL (it is already bound).
    assert_errno(
        t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, reuse()),
        libc::EINVAL,
    );
    // The table outlives neither: a binding keeps working after its table is dropped.
    drop(t);
    b.listen(1).unwrap();
    let u = open(&dir, 2);
    assert_eq!(
        u.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.ep),
        Some(1)
    );
    drop(b);
    assert_eq!(u.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
}

/// Liveness controlled by the test: endpoints in `dead` are dead.
fn switchable() -> (Arc<AtomicBool>, Alive) {
    let dead = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&dead);
    (
        dead,
        Arc::new(move |ep, _| !(ep == 1 && d.load(Ordering::SeqCst))),
    )
}

#[test]
fn dead_owner_entries_are_ignored_and_removed() {
    let dir = TempDir::new("dead");
    let (dead, alive) = switchable();
    let victim = Table::open(&dir.0, 1, 1001, Arc::clone(&alive)).unwrap();
    let t = Table::open(&dir.0, 2, 1002, alive).unwrap();
    let b = victim.bind(PS_TCP, sa("0.0.0.0:7174"), 1, plain()).unwrap();
    b.listen(1).unwrap();
    let quiet = victim
        .bind(PS_UDP, sa("127.0.0.1:7174"), 2, plain())
        .unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.ep),
        Some(1)
    );
    assert_errno(
        t.bind(PS_TCP, sa("127.0.0.1:7174"), 3, plain()),
        libc::EADDRNOTAVAIL,
    );

    dead.store(true, Ordering::SeqCst);
    let entry = dir.0.join("cm/tcp-7174/0.0.0.0,ep1,pid1001,id1");
    assert!(entry.exists());
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
    assert!(!entry.exists(), "lookup removed the dead owner's entry");
    // Its port is free again.
    let mine = t.bind(PS_TCP, sa("127.0.0.1:7174"), 3, plain()).unwrap();
    // reclaim removes the rest (here the UDP binding nobody looked up) and empty
    // directories.
    let udp = dir.0.join("cm/udp-7174");
    assert!(udp.is_dir());
    t.reclaim();
    assert!(!udp.exists());
    // A dead process's drop never runs; if it did, it removes nothing of others.
    drop(quiet);
    drop(b);
    mine.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.ep),
        Some(2)
    );

    // open reclaims too.
    dead.store(false, Ordering::SeqCst);
    let again = victim
        .bind(PS_UDP, sa("127.0.0.1:7174"), 4, plain())
        .unwrap();
    assert!(udp.is_dir());
    std::mem::forget(again); // as if the process died without dropping it
    dead.store(true, Ordering::SeqCst);
    let _t3 = Table::open(&dir.0, 3, 1003, Arc::new(|ep, _| ep != 1)).unwrap();
    assert!(!udp.exists());
}

#[test]
fn stale_temporary_files_are_ignored_and_reclaimed() {
    let dir = TempDir::new("tmpfiles");
    let t = open(&dir, 1);
    let pd = dir.0.join("cm/tcp-7174");
    std::fs::create_dir_all(&pd).unwrap();
    // A writer that died between creating and renaming its temporary file, and a
    // malformed file.
    std::fs::write(
        pd.join(".tmp-999-0"),
        "ep=9 pid=9 id=9 listen=1 reuse=0 afonly=1 addr=0.0.0.0:7174\n",
    )
    .unwrap();
    std::fs::write(pd.join("junk"), "hello\n").unwrap();
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
    let b = t.bind(PS_TCP, sa("0.0.0.0:7174"), 1, plain()).unwrap();
    assert!(!pd.join(".tmp-999-0").exists());
    b.listen(1).unwrap();
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")).map(|o| o.id),
        Some(1)
    );
}

#[test]
fn race_two_tables_one_winner() {
    let dir = TempDir::new("race");
    let tables = [Arc::new(open(&dir, 1)), Arc::new(open(&dir, 2))];
    for round in 0..50u16 {
        // Alternate address pairs: equal, wildcard vs specific, both wildcard.
        let addrs = match round % 3 {
            0 => [sa("127.0.0.1:0"), sa("127.0.0.1:0")],
            1 => [sa("0.0.0.0:0"), sa("127.0.0.1:0")],
            _ => [sa("[::]:0"), sa("0.0.0.0:0")],
        };
        let port = 20000 + round;
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let t = Arc::clone(&tables[i]);
                let barrier = Arc::clone(&barrier);
                let mut a = addrs[i];
                a.set_port(port);
                std::thread::spawn(move || {
                    barrier.wait();
                    t.bind(PS_TCP, a, u64::from(round), plain())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                let code = e.raw_os_error();
                assert!(
                    code == Some(libc::EADDRINUSE) || code == Some(libc::EADDRNOTAVAIL),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn race_threads_of_one_table() {
    let dir = TempDir::new("race1");
    let t = Arc::new(open(&dir, 1));
    for round in 0..50u16 {
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4u64)
            .map(|i| {
                let t = Arc::clone(&t);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    t.bind(
                        PS_UDP,
                        SocketAddr::from(([0, 0, 0, 0], 30000 + round)),
                        i,
                        plain(),
                    )
                })
            })
            .collect();
        // Keep every result until all threads are done: a dropped winner frees the port.
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
    }
}

#[test]
fn race_ephemeral_ports_distinct() {
    let dir = TempDir::new("race-eph");
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            let t = open(&dir, i);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let bs: Vec<Binding> = (0..100)
                    .map(|id| t.bind(PS_TCP, sa("0.0.0.0:0"), id, plain()).unwrap())
                    .collect();
                let ports: Vec<u16> = bs.iter().map(|b| b.addr().port()).collect();
                (bs, ports)
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut keep = Vec::new();
    for h in handles {
        let (bs, ports) = h.join().unwrap();
        for p in ports {
            assert!(all.insert(p), "port {p} given twice");
        }
        keep.push(bs);
    }
    assert_eq!(all.len(), 400);
}

// ---------------------------------------------------------------------------
// Across processes, and the shell helper.

const ROLE: &str = "RVERBS_CM_TABLE_ROLE";
const ROLE_DIR: &str = "RVERBS_CM_TABLE_DIR";
const RACE_PORTS: u16 = 200;
const CONTEND_ROUNDS: u32 = 300;
const LINE_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether process `pid` exists and is not a zombie.
fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn pid_alive_fn() -> Alive {
    Arc::new(|_, pid| pid_alive(pid))
}

fn cm_bash() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/lib/cm.bash")
}

/// Runs `cm_wait_listen ARGS` from cm.bash with RVERBS_RUNTIME_DIR=`runtime`: its exit
/// code and stderr, or None without bash.
fn wait_listen(runtime: &Path, args: &str) -> Option<(i32, String)> {
    let script = format!("source '{}' && cm_wait_listen {args}", cm_bash().display());
    let out = match Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("RVERBS_RUNTIME_DIR", runtime)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => panic!("bash: {e}"),
    };
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Both processes, for `CONTEND_ROUNDS` rounds: try to bind each of 4 ports and, on
/// winning, create `held-<port>` exclusively, then remove it and drop the binding. Two
/// holders at once would find the file: a violation. Returns (wins, losses,
/// violations).
fn contend(t: &Table, dir: &Path) -> (u32, u32, u32) {
    let (mut wins, mut losses, mut violations) = (0, 0, 0);
    for _ in 0..CONTEND_ROUNDS {
        for p in 45000..45004u16 {
            match t.bind(PS_TCP, SocketAddr::from(([127, 0, 0, 1], p)), 1, plain()) {
                Ok(b) => {
                    wins += 1;
                    let held = dir.join(format!("held-{p}"));
                    match std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&held)
                    {
                        Ok(_) => {
                            std::thread::yield_now();
                            std::fs::remove_file(&held).unwrap();
                        }
                        Err(_) => violations += 1,
                    }
                    drop(b);
                }
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
                    losses += 1;
                }
            }
        }
    }
    (wins, losses, violations)
}

/// The child: listens on 7174; at "go" binds every port of 40000.. it can (from the
/// top) and reports them; at the second "go" runs [`contend`]; at "exit" exits
/// without dropping its bindings (as a crash).
fn child() {
    let dir = PathBuf::from(std::env::var_os(ROLE_DIR).expect("dir"));
    let pid = std::process::id() as i32;
    let t = Table::open(&dir, 7, pid, pid_alive_fn()).unwrap();
    let l = t.bind(PS_TCP, sa("0.0.0.0:7174"), 1, plain()).unwrap();
    l.listen(8).unwrap();
    println!("@@ ready {pid}");
    let mut lines = std::io::stdin().lock().lines();
    assert_eq!(lines.next().unwrap().unwrap(), "go");
    let mut won = Vec::new();
    let mut keep = Vec::new();
    for p in (40000..40000 + RACE_PORTS).rev() {
        if let Ok(b) = t.bind(
            PS_UDP,
            SocketAddr::from(([127, 0, 0, 1], p)),
            u64::from(p),
            plain(),
        ) {
            won.push(p.to_string());
            keep.push(b);
        }
    }
    println!("@@ won {}", won.join(" "));
    assert_eq!(lines.next().unwrap().unwrap(), "go");
    let (wins, losses, violations) = contend(&t, &dir);
    println!("@@ contend {wins} {losses} {violations}");
    assert_eq!(lines.next().unwrap().unwrap(), "exit");
    std::mem::forget(keep);
    std::mem::forget(l);
    std::process::exit(0);
}

#[test]
fn cross_process() {
    if std::env::var_os(ROLE).is_some() {
        child();
        return;
    }
    let dir = TempDir::new("xproc");
    let t = Table::open(&dir.0, 2, std::process::id() as i32, pid_alive_fn()).unwrap();
    let mut ch = Command::new(std::env::current_exe().unwrap())
        .args([
            "cross_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ROLE, "child")
        .env(ROLE_DIR, &dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    let stdout = ch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("@@ ") {
                if tx.send(line[at + 3..].to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    let mut recv = || match rx.recv_timeout(LINE_TIMEOUT) {
        Ok(l) => l,
        Err(RecvTimeoutError::Timeout) => {
            let _ = ch.kill();
            panic!("the child said nothing for {LINE_TIMEOUT:?}");
        }
        Err(RecvTimeoutError::Disconnected) => panic!("the child exited: {:?}", ch.wait()),
    };
    let ready = recv();
    let cpid: i32 = ready.strip_prefix("ready ").unwrap().parse().unwrap();

    // The child's listener is seen here, and its port is taken.
    assert_eq!(
        t.lookup(PS_TCP, sa("127.0.0.1:7174")),
        Some(Owner {
            ep: 7,
            pid: cpid,
            id: 1
        })
    );
    assert_errno(
        t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, plain()),
        libc::EADDRNOTAVAIL,
    );
    if let Some((code, err)) = wait_listen(&dir.0, "tcp 7174 5") {
        assert_eq!(code, 0, "cm_wait_listen: {err}");
    }

    // Race: both processes bind the same ports at once, in the same order; each port
    // has one winner.
    writeln!(stdin, "go").unwrap();
    stdin.flush().unwrap();
    let mut mine = Vec::new();
    for p in 40000..40000 + RACE_PORTS {
        if let Ok(b) = t.bind(
            PS_UDP,
            SocketAddr::from(([127, 0, 0, 1], p)),
            u64::from(p),
            plain(),
        ) {
            mine.push(b);
        }
    }
    let won = recv();
    let theirs: HashSet<u16> = won
        .strip_prefix("won")
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let ours: HashSet<u16> = mine.iter().map(|b| b.addr().port()).collect();
    assert!(ours.is_disjoint(&theirs), "ours {ours:?} theirs {theirs:?}");
    assert_eq!(ours.len() + theirs.len(), usize::from(RACE_PORTS));

    // Contention on a few ports, bind and drop again and again in both processes: never
    // two holders at once.
    writeln!(stdin, "go").unwrap();
    stdin.flush().unwrap();
    let (w, l, v) = contend(&t, &dir.0);
    let theirs: Vec<u32> = recv()
        .strip_prefix("contend ")
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    eprintln!(
        "contend: here {w} wins {l} losses, child {} wins {} losses",
        theirs[0], theirs[1]
    );
    assert_eq!((v, theirs[2]), (0, 0), "two processes held a port at once");
    assert_eq!(w + l, CONTEND_ROUNDS * 4);
    assert_eq!(theirs[0] + theirs[1], CONTEND_ROUNDS * 4);

    // The child dies without removing its entries: they are ignored, then removed.
    writeln!(stdin, "exit").unwrap();
    stdin.flush().unwrap();
    let status = ch.wait().unwrap();
    assert!(status.success(), "child: {status}");
    assert!(!pid_alive(cpid));
    assert_eq!(t.lookup(PS_TCP, sa("127.0.0.1:7174")), None);
    if let Some((code, err)) = wait_listen(&dir.0, "tcp 7174 0.2") {
        assert_eq!(code, 1, "cm_wait_listen after the server died: {err}");
        assert!(err.contains("nothing listens on tcp port 7174"), "{err}");
    }
    let b = t.bind(PS_TCP, sa("127.0.0.1:7174"), 1, plain()).unwrap();
    drop(mine);
    for p in 40000..40000 + RACE_PORTS {
        let _c = t
            .bind(PS_UDP, SocketAddr::from(([127, 0, 0, 1], p)), 1, plain())
            .unwrap();
    }
    drop(b);
}

#[test]
fn cm_bash_wait_listen() {
    let dir = TempDir::new("bash");
    let t = Table::open(&dir.0, 1, std::process::id() as i32, pid_alive_fn()).unwrap();
    let (code, err) = wait_listen(&dir.0, "udp 7174 0.1").expect("bash runs lib/cm.bash (the conformance scripts need it too)");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing listens on udp port 7174"), "{err}");
    assert_eq!(wait_listen(&dir.0, "bogus 7174 1").unwrap().0, 2);

    // Bound but not listening: not enough.
    let b = t.bind(PS_UDP, sa("0.0.0.0:7174"), 1, plain()).unwrap();
    assert_eq!(wait_listen(&dir.0, "udp 7174 0.1").unwrap().0, 1);
    // A listening entry of a dead process: not enough either.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let pd = dir.0.join("cm/udp-7174");
    std::fs::write(
        pd.join(format!("10.0.0.1,ep9,pid{dead_pid},id1")),
        format!(
            "ep=9 pid={dead_pid} id=1 listen=1 reuse=0 afonly=1 backlog=1 addr=10.0.0.1:7174\n"
        ),
    )
    .unwrap();
    assert_eq!(wait_listen(&dir.0, "udp 7174 0.1").unwrap().0, 1);
    // Another port space, same port: not this one.
    let other = t.bind(PS_TCP, sa("0.0.0.0:7174"), 2, plain()).unwrap();
    other.listen(1).unwrap();
    assert_eq!(wait_listen(&dir.0, "udp 7174 0.1").unwrap().0, 1);
    assert_eq!(wait_listen(&dir.0, "tcp 7174 0.1").unwrap().0, 0);

    // Listening while the helper waits: it returns 0 well before its timeout.
    let runtime = dir.0.clone();
    let waiter = std::thread::spawn(move || wait_listen(&runtime, "udp 7174 10").unwrap());
    std::thread::sleep(Duration::from_millis(200));
    b.listen(1).unwrap();
    let started = std::time::Instant::now();
    let (code, err) = waiter.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The runtime directory is computed as the device does.
    let script = format!(
        "source '{}'; (unset RVERBS_RUNTIME_DIR; XDG_RUNTIME_DIR=/x cm_runtime_dir); \
         (unset RVERBS_RUNTIME_DIR XDG_RUNTIME_DIR; cm_runtime_dir)",
        cm_bash().display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("RVERBS_RUNTIME_DIR", "/r")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let uid = current_uid();
    let shm = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    assert_eq!(text, format!("/x/rverbs\n{shm}/rverbs-{uid}\n"));
}

fn current_uid() -> String {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
