//! Unmodified Debian 12 binaries run against the built library via `LD_LIBRARY_PATH`
//! (`readelf -d`/`-V`): every import of every object they pull in — including the real
//! `libmlx5.so.1`/`libefa.so.1` that perftest `NEEDED`s, all linked `-z now` — resolves
//! with the right version, and ibverbs-utils list and describe the soft device.
//!
//! Needs ibverbs-utils, perftest and python3-pyverbs (the project's target environment);
//! a missing program is a failure, not a skip.

mod common;
use common::{dropin_dir, run};

#[test]
fn ibv_devices_lists_rverbs0() {
    let dir = dropin_dir("ibv_devices_lists_rverbs0");
    let (out, stdout, stderr) = run(&dir, "/usr/bin/ibv_devices", &[], &[]);
    assert!(out.status.success(), "{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("rverbs0"))
        .unwrap_or_else(|| panic!("rverbs0 not listed:\n{stdout}"));
    // ibv_devices prints be64toh(ibv_get_device_guid()) as 16 hex digits.
    let guid = line.split_whitespace().nth(1).expect("a GUID column");
    assert_eq!(guid.len(), 16, "{line}");
    assert!(
        u64::from_str_radix(guid, 16).expect("hex GUID") != 0,
        "{line}"
    );
}

/// The value printed after `key:` on the first line that has it.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix(key)
                .and_then(|r| r.strip_prefix(':'))
        })
        .map(str::trim)
        .unwrap_or_else(|| panic!("no `{key}:` in\n{text}"))
}

#[test]
fn ibv_devinfo_describes_rverbs0() {
    let dir = dropin_dir("ibv_devinfo_describes_rverbs0");
    let (out, stdout, stderr) = run(&dir, "/usr/bin/ibv_devinfo", &["-v"], &[]);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(field(&stdout, "hca_id"), "rverbs0");
    assert_eq!(field(&stdout, "transport"), "InfiniBand (0)");
    assert_eq!(field(&stdout, "phys_port_cnt"), "1");
    assert_eq!(field(&stdout, "state"), "PORT_ACTIVE (4)");
    assert_eq!(field(&stdout, "link_layer"), "Ethernet");
    assert_eq!(field(&stdout, "phys_state"), "LINK_UP (5)");
    assert_eq!(field(&stdout, "atomic_cap"), "ATOMIC_HCA (1)");
    assert_eq!(field(&stdout, "num_comp_vectors"), "1");
    // -v output comes from ibv_query_device_ex: the extended attributes are real.
    assert!(
        field(&stdout, "hca_core_clock").ends_with("kHZ"),
        "{stdout}"
    );
    assert_ne!(field(&stdout, "hca_core_clock"), "0kHZ", "{stdout}");
    let gid_tbl_len: usize = field(&stdout, "gid_tbl_len").parse().expect("gid_tbl_len");
    assert!(
        gid_tbl_len >= 2,
        "link-local + at least the loopback address"
    );
    // One line per GID, each typed by ibv_query_gid_type@IBVERBS_PRIVATE_34.
    let gids: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("GID["))
        .collect();
    assert_eq!(gids.len(), gid_tbl_len, "{stdout}");
    assert!(
        gids[0].contains("fe80:"),
        "GID 0 is link-local: {}",
        gids[0]
    );
    assert!(gids.iter().all(|g| g.ends_with(", RoCE v2")), "{gids:#?}");
    assert!(
        gids.iter().any(|g| g.contains("::ffff:127.0.0.1")),
        "{gids:#?}"
    );
}

#[test]
fn ibv_devinfo_selects_the_device_by_name() {
    let dir = dropin_dir("ibv_devinfo_selects_the_device_by_name");
    let (out, stdout, stderr) = run(
        &dir,
        "/usr/bin/ibv_devinfo",
        &["-d", "rverbs0", "-i", "1"],
        &[],
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(field(&stdout, "state"), "PORT_ACTIVE (4)");
    let (out, _, stderr) = run(&dir, "/usr/bin/ibv_devinfo", &["-d", "nosuchdev"], &[]);
    assert!(!out.status.success());
    assert!(
        stderr.contains("IB device 'nosuchdev' wasn't found"),
        "{stderr}"
    );
}

#[test]
fn perftest_loads_with_real_mlx5_and_efa_providers() {
    let dir = dropin_dir("perftest_loads_with_real_mlx5_and_efa_providers");
    let (out, stdout, stderr) = run(
        &dir,
        "/usr/bin/ib_write_bw",
        &["-h"],
        &[("LD_DEBUG", "bindings")],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "ib_write_bw -h exits 1, as with rdma-core"
    );
    assert!(stdout.contains("Usage:"), "{stdout}");
    // The providers' ELF constructors called our no-op verbs_register_driver_34.
    let ours = dir.join("libibverbs.so.1");
    for provider in ["libmlx5.so.1", "libefa.so.1"] {
        let bound = stderr.lines().any(|l| {
            l.contains(provider)
                && l.contains(&format!("to {}", ours.display()))
                && l.contains("`verbs_register_driver_34' [IBVERBS_PRIVATE_34]")
        });
        assert!(
            bound,
            "{provider} did not bind verbs_register_driver_34 to the drop-in"
        );
    }
}

#[test]
fn pyverbs_imports_and_opens_the_device() {
    let dir = dropin_dir("pyverbs_imports_and_opens_the_device");
    let script = "import pyverbs.device as d, pyverbs.pd, pyverbs.cq, pyverbs.qp, pyverbs.mr\n\
                  names = [x.name.decode() for x in d.get_device_list()]\n\
                  assert names == ['rverbs0'], names\n\
                  ctx = d.Context(name='rverbs0')\n\
                  print(ctx.query_port(1).state)\n";
    let (out, stdout, stderr) = run(&dir, "/usr/bin/python3", &["-c", script], &[]);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "4", "IBV_PORT_ACTIVE");
}
